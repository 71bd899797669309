"""A copy that reorders axes through local memory: where a DDR-to-DDR copy's source, read in the
output's order, comes in runs shorter than a DDR burst (a transpose's: one element each), the
first hop reads the source in its own memory order, whole bursts, and writes the staged chunk in
the output's order (local memory has no burst), and the second hop writes the output in whole
runs. This is the transpose a compiler does in local memory instead of moving a burst per
element; the staging memory's own rate prices the reordering. A route that stages anyway (an
Ascend core: GM -> UB -> GM) reorders on its way; where one engine copies DDR to DDR directly
(the Sophgo GDMA), the copy goes round through a local memory without bursts that engine reaches
(`hops`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ... import dtypes
from ...costs import run_layout
from ...errors import UnsupportedError
from ...instructions import Dma, Region, dense
from ..memory.route import copy, route

if TYPE_CHECKING:
    from chips.schema import Chip

    from ..emit import Buf, Emits
    from ..memory.route import Hop


def hops(chip: Chip, src: Region, dst: Region, core: int | None = None) -> tuple[Hop, ...]:
    """The hops a copy of region src to region dst takes: its route's; or, where that is one hop
    and reading src in its memory order gives longer runs, two through the first local memory
    without bursts that one hop each reaches and leaves."""
    direct = route(chip, src.mem, dst.mem, core)
    order = _memory_order(src)
    if len(direct) != 1 or order is None:
        return direct
    for mem in chip.memories.values():
        if mem.kind != "local" or mem.burst > 1 or mem.core not in (0, core) or not _gains(chip, src, order, mem.name):
            continue
        try:
            there, back = route(chip, src.mem, mem.name, core), route(chip, mem.name, dst.mem, core)
        except UnsupportedError:
            continue
        if len(there) == len(back) == 1:
            return there + back
    return direct


def staged_reorder(em: Emits, src: Region, src_buf: Buf, dst: Region, dst_buf: Buf, op: str, core: int | None = None) -> None:
    """route.copy's hops for src -> dst, the first reading src in its memory order where that
    gives longer runs (two hops through a memory without bursts, `hops`); route.copy otherwise."""
    route_hops = hops(em.chip, src, dst, core)
    order = _memory_order(src)
    if len(route_hops) != 2 or order is None or not _gains(em.chip, src, order, route_hops[0][2]):
        return copy(em, src, src_buf, dst, dst_buf, op, core)
    (first, _, mid), (second, _, _) = route_hops
    stage = em.stage_buffer(mid, dst.nbytes, f"{op}/stage.{mid}", first)
    held = dense(mid, stage.addr, dst.dtype, dst.shape)  # the chunk in the output's order
    em.emit(first, Dma(_reordered(src, order), _reordered(held, order), op), reads=(src_buf,), writes=(stage,))
    em.emit(second, Dma(held, dst, op), reads=(stage,), writes=(dst_buf,))
    em.release(stage)
    return None


def _memory_order(region: Region) -> list[int] | None:
    """The axes by decreasing stride (ties keep their order), or None when a stride is 0 or
    negative (a repeat or a reversal: left to route.copy)."""
    if any(s <= 0 for n, s in zip(region.shape, region.strides) if n > 1):
        return None
    return sorted(range(len(region.shape)), key=lambda a: -region.strides[a])


def _reordered(region: Region, order: list[int]) -> Region:
    return Region(region.mem, region.addr, region.dtype, tuple(region.shape[a] for a in order), tuple(region.strides[a] for a in order))


def _gains(chip: Chip, src: Region, order: list[int], mid: str) -> bool:
    """Whether reading src in its memory order gives longer runs, short ones costing bursts at
    src and none where the chunk is staged."""
    burst = chip.memories[src.mem].burst
    if burst <= 1 or chip.memories[mid].burst > 1:
        return False
    as_given, as_stored = run_layout(src), run_layout(_reordered(src, order))
    if as_given is None or as_stored is None:
        return False
    return as_stored[1] > as_given[1] and as_given[1] * dtypes.itemsize(src.dtype) < burst
