"""Policy: the placement knobs a lowering obeys. Each one changes the lowered program.

    fuse            chain local ops into layer groups whose intermediates stay on chip
    max_group       the most ops in one layer group (None: no limit)
    double_buffer   two buffer slots per tile: the next tile's load overlaps this compute
    pipeline_steps  with double buffering, cut work that would fit in one tile into at least
                    this many steps, so loads overlap compute (a step never shrinks below what
                    the DMA moves in its own latency)
    max_tile        the largest tile extent per dimension, by name (TILE_DIMS): an output's
                    dimension 0 is "n" (batch), 1 is "c" (channels), its last three after
                    those "d", "h", "w" (spatial, "w" last); a matrix product's (M, N) output
                    is read as an FC layer's (batch, channels), so M is "n" and N is "c"; "k"
                    is the reduction block (a convolution's input channels, a product's K).
                    A reduction keeps its reduced axes whole; a resize's blocks of planes
                    hold at most "n" x "c" planes; DMA-only and scalar ops are not tiled
    pinned          constants placed in the chip's largest on-chip memory for the whole
                    program and preloaded there, like DDR constants: resident across calls,
                    so loading them costs no DDR traffic
    reserve         bytes of a memory taken off its top before planning (another program's
                    share, a runtime's scratch): memory name -> bytes of the whole memory (all
                    lanes), rounded up to its allocation granule
    intermediates   where a tensor passed between layer groups lives: "ddr" (the chip's data
                    memory: DDR, or the host's memory on a chip that has one), or "local": the
                    chip's largest on-chip memory when it takes at most half of its free bytes
                    and every template touching it can reach it there (else the data memory,
                    noted in the program's notes). None (the default): "local" on a chip whose
                    data memory is the host's, across its link (the TPU v1, whose software keeps
                    a layer's activations in the unified buffer for the next), "ddr" on others
    allocator       "first_fit" (the lowest gap that fits) or "best_fit" (the smallest)
    chain           with fuse, run consecutive convolution and max-pooling groups as
                    multi-layer layer groups, slice by slice along the rows, the tensors they
                    hand on in local memory, where that moves fewer DDR bytes and the estimate
                    finds it faster (isa/lower/schedule/chain.py)

`policy_from_overrides` builds one from strings as typed on a command line
(`--set policy.max_tile=h=4,w=8`).
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from chips.units import size as parse_size

from ..errors import ConfigError

TILE_DIMS = ("n", "c", "d", "h", "w", "k")
INTERMEDIATES = ("ddr", "local")
ALLOCATORS = ("first_fit", "best_fit")
T = TypeVar("T")


@dataclass(frozen=True)
class Policy:
    fuse: bool = True
    max_group: int | None = None
    double_buffer: bool = True
    pipeline_steps: int = 4
    max_tile: tuple = ()  # given as a mapping (or pairs) of TILE_DIMS name -> extent; kept as sorted pairs
    pinned: tuple = ()  # constant names
    reserve: tuple = ()  # given as a mapping (or pairs) of memory -> bytes or "64KiB"; kept as sorted pairs
    intermediates: str | None = None  # None: by the chip's data memory (isa/lower/__init__.py _local_intermediates)
    allocator: str = "first_fit"
    chain: bool = True  # last, so that positional construction keeps its meaning

    def __post_init__(self) -> None:
        for name in ("fuse", "chain", "double_buffer"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"policy.{name}: expected true or false, got {getattr(self, name)!r}")
        if self.max_group is not None:
            _whole("max_group", self.max_group)
        _whole("pipeline_steps", self.pipeline_steps)
        tiles = _pairs("max_tile", self.max_tile)
        for dim, extent in tiles:
            if dim not in TILE_DIMS:
                raise ConfigError(f"policy.max_tile: unknown dimension {dim!r} (known: {', '.join(TILE_DIMS)})")
            _whole(f"max_tile.{dim}", extent)
        object.__setattr__(self, "max_tile", tiles)
        pinned = (self.pinned,) if isinstance(self.pinned, str) else self.pinned
        if not all(isinstance(t, str) and t for t in pinned):
            raise ConfigError(f"policy.pinned: expected tensor names, got {self.pinned!r}")
        object.__setattr__(self, "pinned", tuple(dict.fromkeys(pinned)))
        reserve: list[tuple[str, int]] = []
        for mem, amount in _pairs("reserve", self.reserve):
            if isinstance(amount, str):
                try:
                    amount = parse_size(amount)
                except ValueError as exc:
                    raise ConfigError(f"policy.reserve.{mem}: {exc}") from None
            if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
                raise ConfigError(f"policy.reserve.{mem}: expected bytes >= 0 or a size such as 64KiB, got {amount!r}")
            reserve.append((mem, amount))
        object.__setattr__(self, "reserve", tuple(reserve))
        for name, allowed in (("intermediates", INTERMEDIATES), ("allocator", ALLOCATORS)):
            if getattr(self, name) not in allowed and not (name == "intermediates" and self.intermediates is None):
                raise ConfigError(f"policy.{name}: expected one of {', '.join(allowed)}, got {getattr(self, name)!r}")

    def tile_limit(self, dim: str | None, extent: int) -> int:
        """The most of `extent` a tile may take along dimension `dim` (a TILE_DIMS name or None)."""
        return min(extent, dict(self.max_tile).get(dim, extent))


def _whole(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"policy.{name}: expected a whole number >= 1, got {value!r}")


def _pairs(name: str, value: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> tuple[tuple[str, Any], ...]:
    """A mapping or (key, value) pairs as sorted pairs with string keys."""
    try:
        items = dict(value.items() if hasattr(value, "items") else value)
    except (TypeError, ValueError):
        raise ConfigError(f"policy.{name}: expected a mapping of name -> value, got {value!r}") from None
    if not all(isinstance(k, str) and k for k in items):
        raise ConfigError(f"policy.{name}: expected names as keys, got {list(items)!r}")
    return tuple(sorted(items.items()))


# ---- from a command line ---------------------------------------------------------------------

_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def _bool(text: str) -> bool:
    word = text.strip().lower()
    if word in _TRUE + _FALSE:
        return word in _TRUE
    raise ValueError("true or false")


def _int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError("a whole number") from None


def _optional_int(text: str) -> int | None:
    return None if text.strip().lower() == "none" else _int(text)


def _names(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in text.split(",") if t.strip())


def _mapping(convert: Callable[[str], T]) -> Callable[[str], dict[str, T]]:
    def parse(text: str) -> dict[str, T]:
        out = {}
        for item in _names(text):
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ValueError("NAME=VALUE pairs separated by commas")
            out[key.strip()] = convert(value)
        return out
    return parse


PARSERS: dict[str, tuple[Callable[[str], Any], str]] = {
    "fuse": (_bool, "true or false"),
    "max_group": (_optional_int, "a whole number >= 1 or none"),
    "double_buffer": (_bool, "true or false"),
    "pipeline_steps": (_int, "a whole number >= 1"),
    "max_tile": (_mapping(_int), f"DIM=EXTENT pairs separated by commas, DIM one of {', '.join(TILE_DIMS)} (e.g. h=4,w=8)"),
    "pinned": (_names, "constant names separated by commas (e.g. w1,w2)"),
    "reserve": (_mapping(str.strip), "MEMORY=SIZE pairs separated by commas (e.g. lmem=64KiB)"),
    "intermediates": (str.strip, " or ".join(INTERMEDIATES)),
    "allocator": (str.strip, " or ".join(ALLOCATORS)),
    "chain": (_bool, "true or false"),
}


def policy_from_overrides(pairs: Mapping[str, object]) -> Policy:
    """A Policy from {field name: value as typed} (keys without the "policy." prefix)."""
    values = {}
    for key, text in pairs.items():
        if key not in PARSERS:
            raise ConfigError(f"policy.{key}={text}: unknown policy key {key!r} (known: {', '.join(PARSERS)})")
        parse, allowed = PARSERS[key]
        try:
            values[key] = parse(str(text))
        except ValueError:
            raise ConfigError(f"policy.{key}={text}: expected {allowed}") from None
    return Policy(**values)  # its checks name the key, the value and what is allowed
