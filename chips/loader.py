"""A chip YAML's raw mapping -> a validated `schema.Chip`, and `--set KEY=VALUE` overrides.

Every value is checked by one parser per kind of value (size, bandwidth, memory name, dtype, ...);
each parser takes `(value, at)`, where `at` knows the dotted key and the source line, and raises
a ConfigError reading `file:line: dotted.key: what is wrong`. Values set by an override are
reported as `file: override dotted.key=value: what is wrong` instead.

A section's keys are declared once, in a spec `{yaml key: (parser, REQUIRED or OPTIONAL)}`; the
YAML keys are the schema's field names, and an optional key left out takes the schema default,
so defaults live in one place (schema.py).

A chip of `cores: N` (default 1) has N copies of every local memory and engine not marked
`shared: true`; ddr is always one memory shared by all. The YAML names each memory and engine
once, by its plain name, and an engine's links and operand memories name memories the same
way: a core's engines reach its own copies and the shared memories, a shared engine the
shared memories only. With several cores the copies are called `c0.l1`, `c3.cube`
(schema.core_name), shared ones first, then core 0's, core 1's, ..., each in YAML order; with
one, every name is the YAML's and the order too. Overrides address the YAML, so
`memories.l1.size=1MiB` sets every core's l1, and `cores=1` makes a one-core chip.
"""
from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from isa import dtypes, limits, yamlfile
from isa.errors import ConfigError, UnsupportedError
from isa.instructions import SCALAR_FNS, STREAM_FNS, VECTOR_FNS

from . import units
from .schema import Accuracy, Chip, Engine, MatrixUnit, Memory, OpSupport, ScalarUnit, Signature, VectorUnit, core_name

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from isa.yamlfile import YamlDict

REQUIRED, OPTIONAL = True, False
Parser: TypeAlias = "Callable[[object, _At], Any]"  # (a YAML value, where it sits) -> the value parsed, or a ConfigError
Spec: TypeAlias = "dict[str, tuple[Parser, bool]]"  # a section's keys: key -> (parser, REQUIRED or OPTIONAL)
T = TypeVar("T")
M = TypeVar("M", Memory, Engine)  # what _per_core copies per core
ENGINE_KINDS = ("dma", "vector", "matrix", "scalar")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")  # no dots: a dot joins a core to a name ("c3.cube.12" is instruction 12 of core 3's cube)
_COPY = re.compile(r"c(\d+)\.([A-Za-z][A-Za-z0-9_-]*)")  # a core's copy, "c3.l1"


def from_raw(raw: YamlDict, source: str, overrides: dict[str, str] | None = None) -> Chip:
    """Validate `raw` (a chip YAML's top mapping) with `overrides` applied; `source` names the file."""
    ctx = _Context(source, dict(overrides or {}))
    raw = apply_overrides(raw, ctx.overrides, source)
    return _chip(raw, _At(ctx, "", getattr(raw, "line", None)))


def load_file(path: str | Path, overrides: dict[str, str] | None = None) -> Chip:
    """Read and validate the chip YAML at `path`."""
    return from_raw(yamlfile.read(path), str(path), overrides)


# ---- overrides -----------------------------------------------------------------------------

def apply_overrides(raw: YamlDict, overrides: dict[str, str], source: str = "<overrides>") -> YamlDict:
    """A copy of `raw` with each dotted key of `overrides` set to its value (`raw` is unchanged).

    A string value is read as a YAML scalar or flow value, as typed on a command line ("10" is
    an int, "[a, b]" a list, "68GB/s" stays a string). Every key but the last must walk through
    existing mappings; keys may contain dots themselves ("ops.active.relu.dtypes"), the longest
    existing key wins. Whether the last key is one the schema knows is checked by validation.
    """
    if not overrides:
        return raw
    raw = copy.deepcopy(raw)
    for key, value in overrides.items():
        where = f"{source}: override {key}={value}"
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: the file is {units.describe(raw)}, not a mapping")
        mapping, last = _walk(raw, str(key).split("."), "", where)
        mapping[last] = _override_value(value, where)
    return raw


def _walk(mapping: dict[Any, Any], parts: list[str], path: str, where: str) -> tuple[dict[Any, Any], str]:
    """(mapping, key) that `parts` names under `mapping`."""
    whole = ".".join(parts)
    if len(parts) == 1 or whole in mapping:
        if not whole:
            raise ConfigError(f"{where}: empty key")
        return mapping, whole
    for n in range(len(parts) - 1, 0, -1):
        key = ".".join(parts[:n])
        if key in mapping:
            child = mapping[key]
            child_path = f"{path}.{key}" if path else key
            if not isinstance(child, dict):
                raise ConfigError(f"{where}: {child_path} is {units.describe(child)}, not a mapping")
            return _walk(child, parts[n:], child_path, where)
    known = ", ".join(map(str, mapping)) or "none"
    raise ConfigError(f"{where}: {path or 'the file'} has no key {parts[0]!r} (known: {known})")


def _override_value(value: str, where: str) -> object:
    if not isinstance(value, str) or not value.strip():
        return value
    try:
        return yamlfile.parse(value, "value")
    except ConfigError as exc:
        raise ConfigError(f"{where}: not a YAML value ({exc})") from None


# ---- where a value sits --------------------------------------------------------------------

@dataclass
class _Context:
    """One validation run: the file, the overrides, and what earlier sections established."""

    source: str
    overrides: dict[str, str]
    clock_hz: float = 0.0  # set once `clock` is parsed: bandwidths and latencies need it
    memories: dict[str, Memory] = field(default_factory=dict)  # set once `memories` is parsed: engines refer to them

    def prefix(self, path: str, line: int | None) -> str:
        for key, value in self.overrides.items():
            key = str(key)
            if path == key or path.startswith((key + ".", key + "[")):
                inner = f"{path}: " if path != key else ""
                return f"{self.source}: override {key}={value}: {inner}"
        head = f"{self.source}:{line}" if line else self.source
        return f"{head}: {path}: " if path else f"{head}: "


@dataclass(frozen=True)
class _At:
    """Where a value sits: its dotted key, its line, and its own key in the parent."""

    ctx: _Context
    path: str
    line: int | None
    key: object = None

    def child(self, container: list[Any] | dict[Any, Any], key: object) -> _At:
        if isinstance(container, list):
            path = f"{self.path}[{key}]"
        else:
            path = f"{self.path}.{key}" if self.path else str(key)
        line = container.line_of(key) if isinstance(container, (yamlfile.YamlList, yamlfile.YamlDict)) else self.line
        return _At(self.ctx, path, line, key)

    def error(self, message: str) -> ConfigError:
        return ConfigError(self.ctx.prefix(self.path, self.line) + message)

    def convert(self, function: Callable[..., T], *args: object) -> T:
        """function(*args), with a ValueError turned into a ConfigError here."""
        try:
            return function(*args)
        except ValueError as exc:
            raise self.error(str(exc)) from None


# ---- parsers: (value, at) -> parsed value ----------------------------------------------------

def _size(value: object, at: _At) -> int:
    return at.convert(units.size, value)


def _count(value: object, at: _At) -> int:
    return at.convert(units.count, value)


def _frequency(value: object, at: _At) -> float:
    return at.convert(units.frequency, value)


def _bandwidth(value: object, at: _At) -> float:
    return at.convert(units.bandwidth, value, at.ctx.clock_hz)


def _latency(value: object, at: _At) -> int:
    return at.convert(units.latency, value, at.ctx.clock_hz)


def _flag(value: object, at: _At) -> bool:
    if not isinstance(value, bool):
        raise at.error(f"expected true or false, got {units.describe(value)}")
    return value


def _text(value: object, at: _At) -> str:
    if not isinstance(value, str):
        raise at.error(f"expected a string, got {units.describe(value)}")
    return value


def _name(value: object, at: _At) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise at.error(f"bad name {value!r}: use letters, digits, '_' and '-', starting with a letter")
    return value


def _choice(*options: str) -> Parser:
    def parse(value: object, at: _At) -> str:
        if not isinstance(value, str) or value not in options:
            raise at.error(f"expected one of {', '.join(options)}, got {value!r}")
        return value

    return parse


def _dtype(value: object, at: _At) -> str:
    if not isinstance(value, str):
        raise at.error(f"unknown dtype {value!r} (known: {', '.join(dtypes.NAMES)})")
    try:
        return dtypes.check(value)
    except (UnsupportedError, TypeError):
        raise at.error(f"unknown dtype {value!r} (known: {', '.join(dtypes.NAMES)})") from None


def _vector_fn(value: object, at: _At) -> str:
    if not isinstance(value, str) or value not in VECTOR_FNS:
        raise at.error(f"unknown vector function {value!r} (known: {', '.join(VECTOR_FNS)})")
    return value


def _stream_fn(value: object, at: _At) -> str:
    if not isinstance(value, str) or value not in STREAM_FNS:
        raise at.error(f"a dma converts with an element-wise function ({', '.join(STREAM_FNS)}), not {value!r}")
    return value


def _scalar_fn(value: object, at: _At) -> str:
    if not isinstance(value, str) or value not in SCALAR_FNS:
        raise at.error(f"unknown scalar kernel {value!r} (known: {', '.join(SCALAR_FNS)})")
    return value


def _percent(value: object, at: _At) -> float:
    """A percentage written as a number (8.1) or with its sign (8.1%)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str, bytes)):  # what float() reads
        raise at.error(f"expected a percentage such as 8.1 or 8.1%, got {units.describe(value)}")
    text = value[:-1].strip() if isinstance(value, str) and value.endswith("%") else value
    try:
        number = float(text)
    except ValueError:
        raise at.error(f"expected a percentage such as 8.1 or 8.1%, got {units.describe(value)}") from None
    if not math.isfinite(number):
        raise at.error(f"expected a finite percentage, got {value!r}")
    return number


def _cycles_per(value: object, at: _At) -> float:
    return at.convert(units.cycles_per, value, at.ctx.clock_hz)


def _factor(value: object, at: _At) -> float:
    return at.convert(units.factor, value)


def _memory_ref(value: object, at: _At) -> str:
    """The name of a memory declared under `memories`."""
    if not isinstance(value, str) or value not in at.ctx.memories:
        copy_of = _COPY.fullmatch(value) if isinstance(value, str) else None
        if copy_of and copy_of.group(2) in at.ctx.memories:
            raise at.error(f"{value!r} names core {copy_of.group(1)}'s copy of {copy_of.group(2)}: an engine names memories by their "
                           f"plain names and reaches its own core's copy ({copy_of.group(2)}), never another core's")
        raise at.error(f"unknown memory {value!r} (memories: {', '.join(at.ctx.memories)})")
    return value


def _local_memory(value: object, at: _At) -> str:
    """A local memory: compute engines read their operands from on-chip memory."""
    name = _memory_ref(value, at)
    memory = at.ctx.memories[name]
    if memory.kind != "local":
        raise at.error(f"memory {name!r} is {memory.kind}; compute operands must sit in a local memory")
    return name


def _link(value: object, at: _At) -> tuple[str, str]:
    """"src->dst": a pair of memories a DMA engine moves data between."""
    parts = value.split("->") if isinstance(value, str) else []
    if len(parts) != 2:
        raise at.error(f"expected a link such as 'ddr->lmem', got {value!r}")
    src, dst = parts
    return _memory_ref(src.strip(), at), _memory_ref(dst.strip(), at)


def _list_of(item: Parser, least: int = 0) -> Parser:
    def parse(value: object, at: _At) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise at.error(f"expected a list, got {units.describe(value)}")
        if len(value) < least:
            raise at.error(f"expected at least {least} item(s), got none")
        return tuple(item(v, at.child(value, i)) for i, v in enumerate(value))

    return parse


def _set_of(item: Parser) -> Parser:
    as_list = _list_of(item)
    return lambda value, at: frozenset(as_list(value, at))


def _mapping(value: object, at: _At) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise at.error(f"expected a mapping, got {units.describe(value)}")
    return value


def _table(key: Parser, item: Parser) -> Parser:
    """A mapping whose keys are checked by `key` and values parsed by `item`, both `(value, at)`."""

    def parse(value: object, at: _At) -> dict[Any, Any]:
        mapping = _mapping(value, at)
        out = {}
        for k, v in mapping.items():
            here = at.child(mapping, k)
            out[key(k, here)] = item(v, here)
        return out

    return parse


def _fields(value: object, at: _At, spec: Spec) -> dict[str, Any]:
    """Check a mapping against `spec` {key: (parser, REQUIRED/OPTIONAL)}; parse the keys it has."""
    value = _mapping(value, at)
    for k in value:
        if k not in spec:
            raise at.child(value, k).error(f"unknown key {k!r} (known: {', '.join(spec)})")
    for k, (_, required) in spec.items():
        if required and k not in value:
            raise at.error(f"missing required key {k!r}")
    return {k: parse(value[k], at.child(value, k)) for k, (parse, _) in spec.items() if k in value}


# ---- sections --------------------------------------------------------------------------------

_MEMORY: Spec = {
    "kind": (_choice("global", "local", "host"), REQUIRED),
    "size": (_size, REQUIRED),
    "bandwidth": (_bandwidth, REQUIRED),
    "lanes": (_count, OPTIONAL),
    "banks": (_count, OPTIONAL),
    "align": (_size, OPTIONAL),
    "burst": (_size, OPTIONAL),
    "latency": (_latency, OPTIONAL),
    "shared": (_flag, OPTIONAL),
    "cache": (_flag, OPTIONAL),
}


def _memory(value: object, at: _At) -> Memory:
    value = _mapping(value, at)
    fields = _fields(value, at, _MEMORY)
    shared = fields.pop("shared", False)
    if fields["kind"] != "local" and "shared" in value:
        raise at.child(value, "shared").error(f"a {fields['kind']} memory is one memory every core shares; "
                                              "only local memories are per core or shared")
    if fields.get("cache") and (fields["kind"] != "local" or not shared):
        raise at.child(value, "cache").error("only a shared local memory (an L2 every core reaches) can cache ddr")
    return Memory(name=str(at.key), core=None if shared or fields["kind"] != "local" else 0, **fields)


def _memories(value: object, at: _At) -> dict[str, Memory]:
    """Every chip has one off-chip memory, named `ddr` (so `memories.ddr.bandwidth` works everywhere),
    and may have one host memory (`kind: host`: where a graph's data lives, chips.Chip.data_memory)."""
    value = _mapping(value, at)
    memories = _table(_name, _memory)(value, at)
    if "ddr" not in memories:
        raise at.error(f"no memory named 'ddr': every chip calls its off-chip memory ddr (memories: {', '.join(memories)})")
    for memory in memories.values():
        if (memory.kind == "global") != (memory.name == "ddr"):
            raise at.child(value, memory.name).child(value[memory.name], "kind").error(
                f"{memory.name} is {memory.kind}: ddr must be the one global memory, and every other memory local or host"
            )
    hosts = [m.name for m in memories.values() if m.kind == "host"]
    if len(hosts) > 1:
        raise at.child(value, hosts[1]).error(f"one memory is the host's, and {hosts[0]} already is")
    caches = [m.name for m in memories.values() if m.cache]
    if len(caches) > 1:
        raise at.child(value, caches[1]).error(f"one memory caches ddr, and {caches[0]} already does")
    at.ctx.memories = memories
    return memories


_VECTOR: Spec = {
    "lanes": (_count, REQUIRED),
    "per_lane": (_table(_dtype, _count), REQUIRED),
    "op_cycles": (_table(_vector_fn, _count), OPTIONAL),
    "pass_cycles": (_table(_dtype, _count), OPTIONAL),
}
_MATRIX: Spec = {
    "m": (_count, REQUIRED),
    "n": (_count, REQUIRED),
    "k": (_count, REQUIRED),
    "k_per_dtype": (_table(_dtype, _count), OPTIONAL),
    "conv_tap_channels": (_table(_dtype, _count), OPTIONAL),
    "block_cycles": (_table(_dtype, _count), REQUIRED),
    "conv_block_cycles": (_table(_dtype, _count), OPTIONAL),
    "fill_drain": (_latency, OPTIONAL),
    "drain_hidden": (_flag, OPTIONAL),
    "conv_channels_on_m": (_flag, OPTIONAL),
    "batch_slots": (_table(_dtype, _count), OPTIONAL),
    "a": (_local_memory, OPTIONAL),
    "b": (_local_memory, OPTIONAL),
    "c": (_local_memory, OPTIONAL),
    "bias": (_local_memory, OPTIONAL),
}
_SCALAR: Spec = {
    "per_element": (_cycles_per, REQUIRED),
    "op_cycles": (_table(_scalar_fn, _factor), OPTIONAL),
}


def _matrix(value: object, at: _At) -> MatrixUnit:
    value = _mapping(value, at)
    fields = _fields(value, at, _MATRIX)
    for dtype in fields.get("conv_block_cycles", {}):
        if dtype not in fields["block_cycles"]:
            raise at.child(value, "conv_block_cycles").error(
                f"dtype {dtype} has no block_cycles (the unit's dtypes: {', '.join(fields['block_cycles'])}): "
                "a convolution's rate needs the product's")
    return MatrixUnit(**fields)


# The keys each engine kind adds to an engine; an engine of several kinds takes them all.
_ENGINE_KIND_KEYS: dict[str, Spec] = {
    "dma": {
        "links": (_list_of(_link, least=1), REQUIRED),
        "bandwidth": (_bandwidth, REQUIRED),
        "link_bandwidth": (_table(_link, _bandwidth), OPTIONAL),
        "latency": (_latency, OPTIONAL),
        "in_flight": (_count, OPTIONAL),
        "converts": (_list_of(_stream_fn), OPTIONAL),
    },
    "vector": {
        "memory": (_local_memory, REQUIRED),
        "issue_latency": (_latency, OPTIONAL),
        "vector": (lambda value, at: VectorUnit(**_fields(value, at, _VECTOR)), REQUIRED),
    },
    "matrix": {
        "memory": (_local_memory, REQUIRED),
        "issue_latency": (_latency, OPTIONAL),
        "matrix": (_matrix, REQUIRED),
    },
    "scalar": {  # its operands are in DDR
        "issue_latency": (_latency, OPTIONAL),
        "scalar": (lambda value, at: ScalarUnit(**_fields(value, at, _SCALAR)), REQUIRED),
    },
}


def _engine_kinds(value: object, at: _At) -> tuple[str, ...]:
    """`kind: dma` or `kind: [vector, matrix]` (one instruction queue driving several units)."""
    kinds = tuple(value) if isinstance(value, list) else (value,)
    for kind in kinds:
        if kind not in ENGINE_KINDS:
            raise at.error(f"unknown engine kind {kind!r} (known: {', '.join(ENGINE_KINDS)})")
    if not kinds or len(set(kinds)) != len(kinds):
        raise at.error(f"expected distinct engine kinds, got {value!r}")
    return kinds


def _engine(value: object, at: _At) -> Engine:
    value = _mapping(value, at)
    if "kind" not in value:
        raise at.error("missing required key 'kind'")
    kinds = _engine_kinds(value["kind"], at.child(value, "kind"))
    spec: Spec = {"kind": (_engine_kinds, REQUIRED), "shared": (_flag, OPTIONAL)}
    for kind in kinds:
        spec.update(_ENGINE_KIND_KEYS[kind])
    for k in value:
        owners = [kind for kind, keys in _ENGINE_KIND_KEYS.items() if k in keys and k not in spec]
        if owners:
            raise at.child(value, k).error(
                f"{k!r} belongs to {' or '.join(owners)} engines, and this engine's kind is {', '.join(kinds)}"
            )
    fields = _fields(value, at, spec)
    fields["kinds"] = fields.pop("kind")
    for src, dst in fields.get("link_bandwidth", {}):
        if (src, dst) not in fields["links"]:
            raise at.child(value, "link_bandwidth").error(
                f"link {src}->{dst} is not one of the engine's links ({', '.join(f'{a}->{b}' for a, b in fields['links'])})")
    shared = fields.pop("shared", False)
    if shared:
        _check_shared_reach(value, at, fields)
    return Engine(name=str(at.key), core=None if shared else 0, **fields)


def _check_shared_reach(value: dict[Any, Any], at: _At, fields: dict[str, Any]) -> None:
    """A shared engine reaches shared memories only: which core's copy would it use?"""
    refs = [("memory", fields.get("memory"))] + [("links", m) for link in fields.get("links", ()) for m in link]
    unit = fields.get("matrix")
    refs += [("matrix", getattr(unit, role)) for role in ("a", "b", "c", "bias") if unit is not None]
    for key, name in refs:
        if name is not None and at.ctx.memories[name].core is not None:
            raise at.child(value, key).error(f"a shared engine reaches shared memories only, and {name} is a memory of each core "
                                             f"(mark it shared, or the engine not)")


def _op_key(value: object, at: _At) -> str:
    """An op name from isa.ops.REGISTRY, "op.variant" (e.g. "active.relu"), or "*" (every op)."""
    if value == "*":
        return value
    from isa.ops import REGISTRY  # here, not at import: isa.ops pulls in the op modules

    name, dot, variant = str(value).partition(".")
    if name not in REGISTRY:
        close = difflib.get_close_matches(name, REGISTRY, n=3)
        hint = f"did you mean {', '.join(close)}?" if close else "`npusim ops` lists them"
        raise at.error(f"unknown op {name!r} ({hint})")
    variants = REGISTRY[name].variants
    if dot and variant not in variants:
        known = f"known: {', '.join(variants)}" if variants else f"{name} has no variants"
        raise at.error(f"unknown variant {variant!r} of op {name} ({known})")
    return str(value)


_MIXED: Spec = {"in": (_set_of(_dtype), REQUIRED), "out": (_set_of(_dtype), REQUIRED)}
def _signature(value: object, at: _At) -> Signature:
    """"int8|uint8, int16 -> int16|uint16": dtypes per input, `->`, dtypes of the result."""
    ins, arrow, out = str(value).partition("->") if isinstance(value, str) else ("", "", "")
    if not arrow or not ins.strip():
        raise at.error(f"expected a signature such as 'int8|uint8, int16 -> int16', got {value!r}")
    alternatives = lambda text: frozenset(_dtype(d.strip(), at) for d in text.split("|"))  # noqa: E731
    return Signature(tuple(alternatives(part) for part in ins.split(",")), alternatives(out))


_OP: Spec = {
    "kind": (_choice("local", "global"), OPTIONAL),
    "dtypes": (_set_of(_dtype), OPTIONAL),
    "mixed": (lambda value, at: _fields(value, at, _MIXED), OPTIONAL),
    "signatures": (_list_of(_signature), OPTIONAL),
    "compute": (_table(_dtype, _dtype), OPTIONAL),
    "global_for": (_list_of(_signature), OPTIONAL),
}


def _op_support(value: object, at: _At) -> OpSupport:
    """A row that lists dtypes or signatures allows nothing else: no mixing unless it says
    `mixed`, no same-dtype use unless it lists `dtypes`; a row that lists none restricts nothing."""
    fields = _fields(value, at, _OP)
    mixed = fields.pop("mixed", None)
    if mixed:
        fields.update(mixed_in=mixed["in"], mixed_out=mixed["out"])
    elif "dtypes" in fields or "signatures" in fields:
        fields.update(mixed_in=frozenset(), mixed_out=frozenset())
    if "signatures" in fields and "dtypes" not in fields:
        fields["dtypes"] = frozenset()
    return OpSupport(**fields)


def _clock(value: object, at: _At) -> float:
    at.ctx.clock_hz = _frequency(value, at)
    return at.ctx.clock_hz


def _cores(value: object, at: _At) -> int:
    cores = _count(value, at)
    if cores > limits.CORES:
        raise at.error(f"{cores} cores, more than the limit of {limits.CORES}")
    return cores


_ACCURACY: Spec = {
    "networks": (_count, REQUIRED),
    "rows": (_count, REQUIRED),
    "mean_error": (_percent, REQUIRED),
    "worst_error": (_percent, REQUIRED),
    "worst_row": (_text, REQUIRED),
}


def _accuracy(value: object, at: _At) -> Accuracy:
    value = _mapping(value, at)
    fields = _fields(value, at, _ACCURACY)
    if fields["mean_error"] < 0:
        raise at.child(value, "mean_error").error(f"a mean absolute error is at least 0, got {fields['mean_error']}")
    if abs(fields["worst_error"]) < fields["mean_error"]:
        raise at.child(value, "worst_error").error(f"the worst row's error ({fields['worst_error']}%) is below the mean "
                                                   f"({fields['mean_error']}%)")
    return Accuracy(**fields)


# In this order: the clock before anything in cycles, memories before the engines naming them.
_CHIP: Spec = {
    "name": (_name, REQUIRED),
    "description": (_text, REQUIRED),
    "clock": (_clock, REQUIRED),
    "cores": (_cores, OPTIONAL),
    "aliases": (_list_of(_name), OPTIONAL),
    "memories": (_memories, REQUIRED),
    "engines": (_table(_name, _engine), REQUIRED),
    "ops": (_table(_op_key, _op_support), REQUIRED),
    "accuracy": (_accuracy, OPTIONAL),
}


def _chip(raw: YamlDict, at: _At) -> Chip:
    fields = _fields(raw, at, _CHIP)
    cores = fields.get("cores", 1)
    memories, engines = _per_core(fields["memories"], fields["engines"], cores)
    return Chip(
        name=fields["name"],
        description=fields["description"],
        clock_hz=fields["clock"],
        memories=memories,
        engines=engines,
        ops=fields["ops"],
        source=at.ctx.source,
        cores=cores,
        accuracy=fields.get("accuracy"),
    )


def _per_core(memories: dict[str, Memory], engines: dict[str, Engine], cores: int) -> tuple[dict[str, Memory], dict[str, Engine]]:
    """The chip's memories and engines: the shared ones, then each core's copies of the others
    (loader docstring). With one core, the YAML's as they are."""
    if cores == 1:
        return memories, engines

    def copies(items: dict[str, M], copy: Callable[[M, int], M]) -> dict[str, M]:
        out = {name: item for name, item in items.items() if item.core is None}
        for core in range(cores):
            for item in items.values():
                if item.core is not None:
                    made = copy(item, core)
                    out[made.name] = made
        return out

    def engine_copy(engine: Engine, core: int) -> Engine:
        mem = lambda name: name if name is None or memories[name].core is None else core_name(name, core, cores)  # noqa: E731
        unit = engine.matrix and dataclasses.replace(engine.matrix, a=mem(engine.matrix.a), b=mem(engine.matrix.b), c=mem(engine.matrix.c),
                                                     bias=mem(engine.matrix.bias))
        return dataclasses.replace(engine, name=core_name(engine.name, core, cores), core=core, memory=mem(engine.memory),
                                   links=tuple((mem(a), mem(b)) for a, b in engine.links), matrix=unit,
                                   link_bandwidth={(mem(a), mem(b)): bw for (a, b), bw in engine.link_bandwidth.items()})

    memory_copy = lambda m, core: dataclasses.replace(m, name=core_name(m.name, core, cores), core=core)  # noqa: E731
    return copies(memories, memory_copy), copies(engines, engine_copy)
