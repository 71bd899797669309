"""The machine's cost arithmetic (docs/cost-model.md), in one place for the two that
need it: the simulator's engines (sim/engines) charge instructions with it, and the lowering's
estimate (isa/lower/schedule/estimate.py) prices the tilings it chooses between with it.

- DMA: latency + ceil(bytes_moved / bandwidth). bytes_moved is the larger of a transfer's two
  sides, each rounding every contiguous run of bytes up to its memory's burst; latency is the
  engine's plus each endpoint memory's; bandwidth is the least of the engine's (its link's,
  where the link has a rate of its own) and each endpoint memory's, a memory used by several
  endpoints of one transfer shared among them.
  A converting DMA's narrower side carries its width's share of the bytes (side_shares), and
  an engine's bandwidth counts the bytes it writes (an Ascend FixPipe's is the L2 write rate).
  An engine that keeps several transfers in flight (`Engine.in_flight`) runs a transfer's
  latency while the one before it moves its bytes (isa/timing/core.py, _Flight).
- matrix: issue_latency + ceil(M/m) * ceil(N/n) * fold (a convolution's ceil(M/n) * ceil(N/m) on a
  unit whose lanes hold whole output channels, `conv_channels_on_m`), k the unit's depth in dtype, a fold
  ceil(K/k) * block_cycles[dtype] + fill_drain (a convolution's K = channels x kernel positions,
  the channels padded at each position where the unit gives `conv_tap_channels`); on a unit that drains one output block while it
  computes the next (`drain_hidden`) max(ceil(K/k) * block_cycles[dtype], fill_drain). A
  convolution's product at conv_block_cycles[dtype] where the chip gives it.
- vector: issue_latency + ceil(elements / (lanes * per_lane[dtype])) * op_cycles[fn], each pass of a
  several-pass function (op_cycles > 1) at the unit's pass_cycles[dtype] (VectorUnit.fn_cycles).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeAlias

from . import dtypes

Sizes: TypeAlias = list[tuple[int, int]]  # (value, how many) of a product's M, N or K sizes
Factor: TypeAlias = tuple[int, int]  # (how many, folds or cycles): matmul_total's factor along one dimension

if TYPE_CHECKING:
    from chips.schema import Engine, MatrixUnit, Memory, VectorUnit
    from isa.instructions import Region


def run_layout(region: Region) -> tuple[list[tuple[int, int]], int] | None:
    """(the dimensions [(count, element stride)] that step from one contiguous run to the next,
    elements per run) of the distinct elements a region touches (its zero-stride dimensions left
    out); None for an empty region."""
    if any(n == 0 for n in region.shape):
        return None
    dims = [(n, s) for n, s in zip(region.shape, region.strides) if s != 0 and n != 1]
    run = 1
    while dims and dims[-1][1] == run:
        run *= dims.pop()[0]
    return dims, run


def runs(region: Region) -> tuple[int, int]:
    """(number of contiguous runs, bytes per run) of the distinct elements a region touches."""
    layout = run_layout(region)
    if layout is None:  # an empty region touches nothing
        return 0, 0
    dims, run = layout
    return math.prod(n for n, _ in dims), run * dtypes.itemsize(region.dtype)


def side_bytes(region: Region, burst: int) -> int:
    """The bytes a DMA moves on one side of a transfer: every run rounded up to the burst."""
    count, run = runs(region)
    return count * (-(-run // burst) * burst)


def transfer_bytes(src: Region, dst: Region, memories: Mapping[str, Memory]) -> int:
    """bytes_moved of a copy from region src to region dst (memories: name -> chips Memory)."""
    return max(side_bytes(src, memories[src.mem].burst), side_bytes(dst, memories[dst.mem].burst))


def side_shares(src: Region, dst: Region) -> tuple[float, float]:
    """The share of a transfer's bytes_moved that each side's memory carries: all of them on
    both sides of a copy; a converting DMA's narrower side (int32 read, int8 written) its width's
    share (1 and 0.25)."""
    if src.dtype == dst.dtype:
        return 1.0, 1.0
    a, b = dtypes.itemsize(src.dtype), dtypes.itemsize(dst.dtype)
    return a / max(a, b), b / max(a, b)


def ports(endpoints: tuple[str, ...], shares: tuple[float, ...] | None = None) -> dict[str, float]:
    """memory -> how many of a transfer's endpoints are in it, each counting its share of the
    bytes (default one)."""
    use: dict[str, float] = {}
    for k, mem in enumerate(endpoints):
        use[mem] = use.get(mem, 0) + (shares[k] if shares else 1)
    return use


def transfer_latency(engine: Engine, memories: Mapping[str, Memory], endpoints: tuple[str, ...]) -> int:
    return engine.latency + sum(memories[mem].latency for mem in endpoints)


def transfer_bandwidth(engine: Engine, memories: Mapping[str, Memory], endpoints: tuple[str, ...],
                       shares: tuple[float, ...] | None = None) -> float:
    """Uncontended bytes per cycle of a transfer touching `endpoints` (memory names: the one read,
    the one written, then any other), each carrying its share of the bytes (ports)."""
    return min([engine_cap(engine.rate(*endpoints[:2]), shares)] + [memories[m].bandwidth / n for m, n in ports(endpoints, shares).items()])


def engine_cap(bandwidth: float, shares: tuple[float, ...] | None = None) -> float:
    """bytes_moved per cycle an engine of `bandwidth` allows: it counts the bytes it writes,
    the written side's share (shares[1]) of those moved."""
    return bandwidth / shares[1] if shares else bandwidth


def matmul_cycles(M: int, K: int, N: int, unit: MatrixUnit, dtype: str, issue_latency: int, conv: bool = False,
                  kernel: tuple[int, ...] = ()) -> int:
    """One M x K by K x N product on a matrix unit, its operands of `dtype`; a convolution's
    when `conv` (isa/instructions.py, Matmul.conv), K its channels times its kernel's positions."""
    m, n = unit.sides(conv)
    return issue_latency + math.ceil(M / m) * math.ceil(N / n) * fold_cycles(K, unit, dtype, conv, kernel)


def fold_cycles(K: int, unit: MatrixUnit, dtype: str, conv: bool = False, kernel: tuple[int, ...] = ()) -> int:
    """Cycles of one m x n output block over depth K: its K/k blocks, then the pipeline's fill
    and drain; where the unit drains a block while it computes the next (`drain_hidden`), the
    longer of the two. A convolution's K padded as the unit takes its channels at each kernel
    position (MatrixUnit.conv_depth)."""
    K = unit.conv_depth(K, kernel, dtype) if conv else K
    compute = math.ceil(K / unit.depth(dtype)) * unit.block(dtype, conv)
    return max(compute, unit.fill_drain) if unit.drain_hidden else compute + unit.fill_drain


def matmul_total(ms: Sizes, ks: Sizes, ns: Sizes, unit: MatrixUnit, dtype: str, issue_latency: int, conv: bool = False) -> int:
    """The sum of matmul_cycles over every combination of an M, a K and an N, each list of
    (value, how many), without enumerating the combinations (the formula separates into
    matmul_rows(ms), matmul_rows(ns) and matmul_depths(ks))."""
    m, n = unit.sides(conv)
    return matmul_combined(matmul_rows(ms, m), matmul_depths(ks, unit, dtype, conv), matmul_rows(ns, n), issue_latency)


def matmul_rows(sizes: Sizes, per: int) -> Factor:
    """(how many, folds) of a product's M (per = unit.m) or N (per = unit.n) sizes, a list of
    (value, how many)."""
    return sum(c for _, c in sizes), sum(c * math.ceil(v / per) for v, c in sizes)


def matmul_depths(ks: Sizes, unit: MatrixUnit, dtype: str, conv: bool = False, kernel: tuple[int, ...] = ()) -> Factor:
    """(how many, cycles of one fold over each) of a product's K sizes, a list of (value, how many);
    a convolution's of `kernel`."""
    return sum(c for _, c in ks), sum(c * fold_cycles(k, unit, dtype, conv, kernel) for k, c in ks)


def matmul_combined(m: Factor, k: Factor, n: Factor, issue_latency: int) -> int:
    """matmul_total from its three factors."""
    return m[0] * k[0] * n[0] * issue_latency + m[1] * n[1] * k[1]


def vector_cycles(elements: int, dtype: str, fn: str, unit: VectorUnit, issue_latency: int) -> int:
    """One element-wise function over `elements` elements, the widest operand of `dtype`."""
    return issue_latency + math.ceil(elements / (unit.lanes * unit.per_lane[dtype])) * unit.fn_cycles(fn, dtype)
