"""A copy that reorders axes through local memory: where a DDR-to-DDR copy's source, read in the
output's order, comes in runs shorter than a DDR burst (a transpose's: one element each),
reading it in its own memory order gives whole bursts. Two ways, as the compilers do it:

- where the route stages anyway (an Ascend core: GM -> UB -> GM), the first hop reads the
  source in its memory order and writes the staged chunk in the output's order (local memory
  has no burst), and the second hop writes the output in whole runs (`staged_reorder`);
- where one engine copies DDR to DDR directly (the Sophgo GDMA), the copy goes round through
  the local memory a vector engine computes in, as Sophgo's TPU kernel library transposes
  (nodechip_transpose: a GDMA load of whole rows, the TIU's cw_trans, a GDMA store of whole
  rows): a DMA loads the chunk in the source's memory order, the vector engine copies it into
  the output's order, a DMA stores it (`on_chip`, `detour`). This route is taken where its
  instructions, priced one after another as the machine prices them (isa/timing/price.py),
  take fewer cycles than the direct DMA (`cheaper`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from ... import dtypes
from ...costs import run_layout
from ...errors import UnsupportedError
from ...instructions import Dma, Region, Vector, dense
from ...timing.price import dma_cycles, vector_cycles
from ..memory.route import copy, route

if TYPE_CHECKING:
    from collections.abc import Iterable

    from chips.schema import Chip

    from ..emit import Buf, Emits
    from ..schedule.pipeline import Step


class Detour(NamedTuple):
    """A transpose through local memory: the DMA engines of the hops there and back, the local
    memory, and the vector engine computing in it that puts the chunk in the output's order."""

    there: str
    back: str
    mem: str
    vector: str


def detour(chip: Chip, src: Region, dst: Region, core: int | None = None) -> Detour | None:
    """Where a copy of src to dst goes direct in one hop and reading src in its memory order
    gives longer runs (short ones costing bursts): the first local memory without bursts that
    one hop each reaches and leaves and a vector engine computes in, for src's dtype."""
    order = _memory_order(src)
    if len(route(chip, src.mem, dst.mem, core)) != 1 or order is None:
        return None
    for mem in chip.memories.values():
        if mem.kind != "local" or mem.burst > 1 or mem.core not in (0, core) or not _gains(chip, src, order, mem.name):
            continue
        vector = [e.name for e in chip.engines_of("vector", core)
                  if e.memory == mem.name and e.vector is not None and src.dtype in e.vector.per_lane]
        try:
            there, back = route(chip, src.mem, mem.name, core), route(chip, mem.name, dst.mem, core)
        except UnsupportedError:
            continue
        if vector and len(there) == len(back) == 1:
            return Detour(there[0][0], back[0][0], mem.name, vector[0])
    return None


def on_chip(em: Emits, way: Detour, src: Region, src_buf: Buf, dst: Region, dst_buf: Buf, op: str) -> Step:
    """A pipeline step (isa/lower/schedule/pipeline.py) copying src to dst the way `way` goes:
    load, reorder on the vector engine, store; its two buffers taken from the staging slots, so
    the next chunk loads while this one is put in order."""
    held: dict[str, Buf] = {}

    def load() -> None:
        held["loaded"] = em.stage_buffer(way.mem, dst.nbytes, f"{op}/load.{way.mem}", way.there)
        em.emit(way.there, _load(way, src, held["loaded"].addr, op), reads=(src_buf,), writes=(held["loaded"],))

    def reorder() -> None:
        held["ordered"] = em.stage_buffer(way.mem, dst.nbytes, f"{op}/order.{way.mem}", way.vector)
        em.emit(way.vector, _reorder(way, src, dst, held["loaded"].addr, held["ordered"].addr, op),
                reads=(held["loaded"],), writes=(held["ordered"],))
        em.release(held["loaded"])

    def store() -> None:
        em.emit(way.back, _store(way, dst, held["ordered"].addr, op), reads=(held["ordered"],), writes=(dst_buf,))
        em.release(held["ordered"])

    return load, reorder, store


def cheaper(chip: Chip, way: Detour, src: Region, dst: Region, boxes: Iterable[tuple[Region, Region]]) -> bool:
    """Whether the detour's instructions over `boxes` ((source, destination) of each chunk),
    priced one after another with no overlap counted, take fewer cycles than one direct DMA
    from src to dst."""
    direct_engine = route(chip, src.mem, dst.mem)[0][0]
    direct = dma_cycles(Dma(src, dst), chip, chip.engines[direct_engine])
    total = 0
    for s, d in boxes:
        total += dma_cycles(_load(way, s, 0, ""), chip, chip.engines[way.there])
        total += vector_cycles(_reorder(way, s, d, 0, 0, ""), chip.engines[way.vector])
        total += dma_cycles(_store(way, d, 0, ""), chip, chip.engines[way.back])
        if total >= direct:
            return False
    return True


def _order(src: Region) -> list[int]:
    order = _memory_order(src)
    assert order is not None, "a detour reads its source in memory order"
    return order


def _load(way: Detour, src: Region, loaded: int, op: str) -> Dma:
    """A chunk's load: src read in its memory order, dense at address `loaded` of way.mem."""
    order = _order(src)
    return Dma(_reordered(src, order), dense(way.mem, loaded, src.dtype, tuple(src.shape[a] for a in order)), op)


def _reorder(way: Detour, src: Region, dst: Region, loaded: int, ordered: int, op: str) -> Vector:
    """The vector engine's copy of the loaded chunk (at `loaded`) into dst's order (at `ordered`)."""
    order = _order(src)
    held = dense(way.mem, loaded, src.dtype, tuple(src.shape[a] for a in order))
    as_dst = [0] * len(order)  # the loaded chunk's strides, axis by axis of dst
    for k, a in enumerate(order):
        as_dst[a] = held.strides[k]
    return Vector("copy", dense(way.mem, ordered, dst.dtype, dst.shape), (Region(way.mem, loaded, src.dtype, dst.shape, tuple(as_dst)),),
                  dst.dtype, op)


def _store(way: Detour, dst: Region, ordered: int, op: str) -> Dma:
    """A chunk's store: the ordered chunk (at `ordered`) to dst, whole runs."""
    return Dma(dense(way.mem, ordered, dst.dtype, dst.shape), dst, op)


def staged_reorder(em: Emits, src: Region, src_buf: Buf, dst: Region, dst_buf: Buf, op: str, core: int | None = None) -> None:
    """route.copy's hops for src -> dst, the first reading src in its memory order where the
    route stages in one memory without bursts and that gives longer runs; route.copy otherwise."""
    route_hops = route(em.chip, src.mem, dst.mem, core)
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
