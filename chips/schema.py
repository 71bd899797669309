"""The typed chip configuration: what a chip YAML becomes once parsed and validated.

Every size is in bytes, every bandwidth in bytes per cycle of `Chip.clock_hz`, every latency in
cycles; `chips.loader` converts the units people write (`512KiB`, `34GB/s`, `550MHz`, `80ns`).
The cost formulas that read these fields are in docs/cost-model.md, isa/costs.py and isa/timing/price.py.

A chip of several cores holds every core's copy of its per-core memories and engines, named
by `core_name` and marked with their `core`; engines' links and operand memories name the
copies of their own core (chips/loader.py builds them from the YAML).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from isa.errors import UnsupportedError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence


def core_name(name: str, core: int, cores: int) -> str:
    """The name of core `core`'s copy of a per-core memory or engine: "c3.l1" on a chip of
    several cores, the YAML's own name on a chip of one (YAML names have no dots)."""
    return name if cores == 1 else f"c{core}.{name}"


def base_name(name: str) -> str:
    """The YAML name of a memory or engine: "l1" for "c3.l1"."""
    return name.rpartition(".")[2]


@dataclass(frozen=True)
class Memory:
    name: str
    kind: str  # "global" (off-chip, e.g. ddr), "local" (on-chip SRAM) or "host" (the host's, across its link)
    size: int  # bytes; per lane when lanes > 1
    bandwidth: float  # bytes per cycle through this memory's ports, shared by overlapping DMAs
    lanes: int = 1  # per-lane local memory (Sophgo NPUs): capacity = size * lanes
    banks: int = 1
    align: int = 1  # bytes per lane: buffers start on, and grow by, align * lanes bytes
    burst: int = 1  # bytes: a DMA rounds each contiguous run it touches here up to this
    latency: int = 0  # cycles every DMA touching this memory adds
    core: int | None = 0  # the core whose copy this is; None: one memory shared by every core (ddr, an L2)
    cache: bool = False  # a shared on-chip memory that also caches ddr, in lines of ddr's burst (isa/timing/cache.py)

    @property
    def base(self) -> str:
        """The name the chip YAML gives it: "l1" for core 3's copy "c3.l1"."""
        return base_name(self.name)

    @property
    def capacity(self) -> int:
        return self.size * self.lanes

    @property
    def granule(self) -> int:
        """Allocation unit in bytes of the flat address space."""
        return self.align * self.lanes


@dataclass(frozen=True)
class Accuracy:
    """How far the chip's estimates were from published times on networks it was not fitted to:
    the validation rows of docs/data/published.csv, as bench/fit.py measured and wrote them."""

    networks: int  # validation networks simulated
    rows: int  # validation rows simulated
    mean_error: float  # mean absolute error, percent
    worst_error: float  # the worst row's signed error, percent
    worst_row: str  # which row that is ("c3d FP32 b1")

    def __str__(self) -> str:
        return (f"validated on {self.networks} network{'s' * (self.networks != 1)}: mean error {self.mean_error:.0f}%, "
                f"worst {abs(self.worst_error):.0f}% ({self.worst_row})")


@dataclass(frozen=True)
class VectorUnit:
    """cycles = issue_latency + ceil(elements / (lanes * per_lane[dtype])) * op_cycles[fn], each of a
    function's several passes (op_cycles > 1: division, roots, transcendentals) pass_cycles[dtype]"""

    lanes: int
    per_lane: Mapping[str, int]  # dtype -> elements per lane per cycle
    op_cycles: Mapping[str, int] = field(default_factory=dict)  # vector fn -> factor (default 1)
    pass_cycles: Mapping[str, int] = field(default_factory=dict)  # dtype -> cycles of one pass of a several-pass fn (default 1)

    def fn_cycles(self, fn: str, dtype: str) -> int:
        """Cycles per group of lanes * per_lane[dtype] elements: a one-pass function's 1 (or its
        op_cycles), a several-pass function's passes at pass_cycles[dtype] each."""
        passes = self.op_cycles.get(fn, 1)
        return passes * self.pass_cycles.get(dtype, 1) if passes > 1 else passes


@dataclass(frozen=True)
class MatrixUnit:
    """cycles = issue_latency + ceil(M/m)*ceil(N/n) * (ceil(K/depth(dtype)) * block(dtype, conv) + fill_drain);
    with drain_hidden the fold is the max of the two terms, not their sum (isa/costs.py fold_cycles);
    with conv_channels_on_m a convolution's M and N take n and m (`sides`)"""

    m: int
    n: int
    k: int
    block_cycles: Mapping[str, int]  # operand dtype -> cycles per m x n x depth(dtype) block
    fill_drain: int = 0
    drain_hidden: bool = False  # a block's fill and drain overlap the next block's compute (a fold costs the longer)
    # a convolution's output channels (its N) go on the m side and its output positions (its M)
    # on the n side: the unit's m rows are lanes that each hold whole channels (Sophgo's NPUs), so
    # a convolution of 16 output channels keeps 16 of 64 lanes busy (`sides`)
    conv_channels_on_m: bool = False
    # operand dtype -> cycles per block of a convolution's product (Matmul.conv), where the unit
    # runs convolutions at a rate of their own (BM1684X's float32); block_cycles where absent
    conv_block_cycles: Mapping[str, int] = field(default_factory=dict)
    k_per_dtype: Mapping[str, int] = field(default_factory=dict)  # operand dtype -> its block's depth, where not k
    # operand dtype -> the input channels a convolution takes at one kernel position: its
    # channels are padded to a multiple of it at every position, a small kernel's rows or
    # columns folded into them where they fit (`conv_depth`); absent, K is ic * kernel unpadded
    conv_tap_channels: Mapping[str, int] = field(default_factory=dict)
    # operand dtype -> batch items stored side by side in one word (BM1684's int8 "4N"): the
    # unit multiplies whole groups of them, so a convolution's batch tile is computed padded
    # to a multiple (isa/lower/templates/conv.py); 1 where absent
    batch_slots: Mapping[str, int] = field(default_factory=dict)
    a: str | None = None  # memory of the left operand (default: the engine's memory)
    b: str | None = None  # memory of the right operand
    c: str | None = None  # memory of the accumulator / result
    bias: str | None = None  # memory of a bias row a product may start from (an Ascend cube's BiasTable)

    def depth(self, dtype: str) -> int:
        """The K of one block in `dtype` (an Ascend cube's is 32 for int8, 16 for float16)."""
        return self.k_per_dtype.get(dtype, self.k)

    def conv_depth(self, K: int, kernel: tuple[int, ...], dtype: str) -> int:
        """A convolution's K (its channels times its kernel positions) as the unit multiplies
        it: with conv_tap_channels[dtype] = D, the channels padded to a multiple of D at each
        kernel position; where the channels times the whole kernel, or times its largest
        dimension, fit in D, those positions folded into the channels first (TPU-MLIR's
        `use_3ic_optimize`). K as it is where the unit gives no D."""
        D = self.conv_tap_channels.get(dtype)
        taps = math.prod(kernel)
        if not D or not kernel or K % taps:
            return K
        channels = K // taps
        folded = taps if channels * taps <= D else max((d for d in kernel if channels * d <= D), default=1)
        return taps // folded * math.ceil(channels * folded / D) * D

    def sides(self, conv: bool = False) -> tuple[int, int]:
        """(the block's extent along M, along N) of a product: (m, n), or (n, m) for a
        convolution's on a unit with conv_channels_on_m."""
        return (self.n, self.m) if conv and self.conv_channels_on_m else (self.m, self.n)

    def block(self, dtype: str, conv: bool = False) -> int:
        """Cycles per block in `dtype`: a convolution's (conv) at conv_block_cycles where given.
        A dtype the unit has no rate for is an UnsupportedError (a chip whose op table allows
        more than its unit multiplies)."""
        if dtype not in self.block_cycles:
            raise UnsupportedError(f"the matrix unit has no block_cycles for {dtype} (its "
                                   f"dtypes: {', '.join(self.block_cycles) or 'none'})")
        return self.conv_block_cycles.get(dtype, self.block_cycles[dtype]) if conv else self.block_cycles[dtype]


@dataclass(frozen=True)
class ScalarUnit:
    """cycles = issue_latency + ceil(per_element * op_cycles[fn] * work(fn, shapes)): a general-
    purpose core (the host's or the chip's CPU) running the global ops a tensor unit cannot:
    sort, nms, where. Its operands are in DDR; `work` is each kernel's element count
    (n log n for a sort, n^2 for nms; sim/kernels/)."""

    per_element: float  # cycles of the chip clock per element of work
    op_cycles: Mapping[str, float] = field(default_factory=dict)  # kernel -> factor (default 1)


@dataclass(frozen=True)
class Engine:
    name: str
    kinds: tuple  # of "dma", "vector", "matrix", "scalar"; one engine may drive several units in one queue
    issue_latency: int = 0  # compute engines: cycles added to every instruction
    memory: str | None = None  # compute engines: the memory operands must sit in
    links: tuple = ()  # dma engines: (src, dst) memory-name pairs it moves data between
    bandwidth: float = 0.0  # dma engines: bytes per cycle
    # dma engines: (src, dst) -> bytes per cycle of a link with a rate of its own (Engine.rate)
    link_bandwidth: Mapping[tuple, float] = field(default_factory=dict)
    latency: int = 0  # dma engines: fixed cycles per transfer
    # dma engines: transfers under way at once; from 2, a transfer's fixed latency runs while those before it move their bytes
    in_flight: int = 1
    converts: tuple = ()  # dma engines: the element-wise functions it applies to what it moves (a converting dma, isa/instructions.py)
    vector: VectorUnit | None = None
    matrix: MatrixUnit | None = None
    scalar: ScalarUnit | None = None
    core: int | None = 0  # the core whose copy this is; None: one engine of the chip's, shared by the cores

    @property
    def base(self) -> str:
        return base_name(self.name)

    def rate(self, src: str, dst: str) -> float:
        """Bytes per cycle a dma engine moves from memory src to dst: the link's own rate where it
        has one (BM1684X's GDMA loads faster than it stores), else the engine's bandwidth."""
        return self.link_bandwidth.get((src, dst), self.bandwidth)

    def operand_memory(self, role: str) -> str | None:
        """Memory a compute operand must sit in; role is "a", "b" or "c" for matrix operands."""
        if role in ("a", "b", "c") and self.matrix is not None:
            return getattr(self.matrix, role) or self.memory
        return self.memory


@dataclass(frozen=True)
class OpSupport:
    """One row of a chip's op table (the seed's per-chip dtype lines).

    An op instance is accepted when every tensor operand and the result share one dtype listed
    in `dtypes`; or, when their dtypes differ, every input is in `mixed_in` and the result in
    `mixed_out`; or when it matches one of `signatures`. `None` means "no restriction"; empty
    means "not allowed".
    """

    kind: str | None = None  # "local" or "global"; None keeps the op's own (seed) kind
    dtypes: frozenset | None = None
    mixed_in: frozenset | None = None
    mixed_out: frozenset | None = None
    signatures: tuple = ()  # Signature: dtypes allowed per input and for the result
    compute: Mapping[str, str] = field(default_factory=dict)  # dtype -> dtype it is computed in
    global_for: tuple = ()  # Signatures for which the op is global though `kind` is local (cast)


@dataclass(frozen=True)
class Signature:
    """`int16|uint16, int8 -> int16`: the dtypes each input may have, and the result's."""

    inputs: tuple  # frozenset per input
    output: frozenset

    def matches(self, ins: Sequence[str], out: str) -> bool:
        return len(ins) == len(self.inputs) and all(d in s for d, s in zip(ins, self.inputs)) and out in self.output


@dataclass(frozen=True)
class Chip:
    name: str
    description: str
    clock_hz: float
    memories: Mapping[str, Memory]  # in YAML order (with several cores: the shared ones, then each core's)
    engines: Mapping[str, Engine]  # in YAML order (likewise)
    ops: Mapping[str, OpSupport]  # op name, "op.variant" (e.g. "active.relu") or "*"
    source: str = ""  # the file it was read from
    cores: int = 1  # cores, each with its copy of every memory and engine not shared (core_name)
    accuracy: Accuracy | None = None  # its validation against published times (bench/fit.py), where measured

    @cached_property
    def memo(self) -> dict[Any, Any]:
        """A dict for what is worked out from the chip once and kept with it (isa/lower/memory/route.py's
        routes); not part of its value."""
        return {}

    def support(self, key: str) -> OpSupport | None:
        """The op-table row for `key` ("active.relu" falls back to "active", then "*"), or None."""
        base = key.split(".", 1)[0]
        for k in (key, base, "*"):
            if k in self.ops:
                return self.ops[k]
        return None

    @cached_property
    def data_memory(self) -> str:
        """Where a graph's inputs, outputs and the tensors passed between its layer groups live:
        the host's memory on a chip that has one (`kind: host`: the TPU v1's, across PCIe, its
        ddr holding the weights), else ddr."""
        return next((m.name for m in self.memories.values() if m.kind == "host"), "ddr")

    @cached_property
    def cache(self) -> Memory | None:
        """The memory that caches ddr (`cache: true`), or None."""
        return next((m for m in self.memories.values() if m.cache), None)

    def engines_of(self, kind: str, core: int | None = None) -> list[Engine]:
        """Engines of a kind, in chip order: every core's, or those core `core` runs (its own
        and the shared ones, which come first in chip order)."""
        index = self._engines_by_kind
        if core is None:
            return list(index.get((kind, "all"), ()))
        return [*index.get((kind, None), ()), *index.get((kind, core), ())]

    @cached_property
    def _engines_by_kind(self) -> dict[tuple[str, int | str | None], list[Engine]]:
        """(kind, core) -> that core's engines of the kind ((kind, None) the shared ones, (kind,
        "all") every one): asked for per core, so looked up rather than scanned over every core's."""
        index: dict[tuple[str, int | str | None], list[Engine]] = {}
        for e in self.engines.values():
            for kind in e.kinds:
                index.setdefault((kind, "all"), []).append(e)
                index.setdefault((kind, e.core), []).append(e)
        return index

    def seconds(self, cycles: int) -> float:
        return cycles / self.clock_hz
