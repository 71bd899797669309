"""Routing operands along the chip's DMA links.

A route is the shortest chain of DMA hops from one memory to another (ties go to the engine
and link listed first in the chip YAML), so one lowering serves a two-level TPU (DDR -> local
memory) and a multi-level AI core (GM -> L1 -> L0A) alike. Intermediate hops stage through
buffers the caller placed (a template that copies a tile through shared memory every step
places them with its slots, so cores do not reuse one another's staging addresses), or through
a buffer placed for the transfer and released after it, in one of STAGE_SLOTS slots.

The slots are what lets a staged route pipeline. A stage is written by one hop and read by the
next; a buffer placed where a released one lay inherits its accesses (isa/lower/emit.py), so
were every transfer staged at the same address, the next transfer's first hop (an AI core's
MTE2, DDR -> L1) would wait for this one's last hop (MTE1, L1 -> L0A) to empty it, and DDR
would idle while MTE1 works. So each staged hop places STAGE_SLOTS buffers of the transfer's
size side by side (as many as fit, at least one), stages in the one whose last write by the
hop's engine is oldest and releases the others untouched: consecutive transfers through a
memory take turns between addresses, and the first hop of one waits only for the last hop of
the transfer STAGE_SLOTS before it, as in a double-buffered L1. Nothing stays placed between
transfers, so the memory is free for whatever is placed next.

On a chip of several cores, a core's memories are linked by its own DMA engines only, so a
route to or from them runs on that core; a route between shared memories (DDR to DDR) runs on
the engines of `core` and the shared ones, on any core's when `core` is None.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...costs import transfer_bandwidth, transfer_latency
from ...errors import UnsupportedError
from ...instructions import Dma, IndexedDma, Region, dense

if TYPE_CHECKING:
    from chips.schema import Chip

    from ..emit import Buf, Emits

Hop = tuple[str, str, str]  # (DMA engine, from memory, to memory)


def _hops(chip_links: Sequence[Hop], src: str, dst: str) -> tuple[Hop, ...] | None:
    """Breadth-first search over (engine, from, to) links for at least one hop (a copy within a
    memory goes round through others when no engine copies inside it); a tuple of hops."""
    frontier: list[tuple[str, tuple[Hop, ...]]] = [(src, ())]
    seen: set[str] = set()
    while frontier:
        nxt = []
        for mem, path in frontier:
            for engine, a, b in chip_links:
                if a != mem or b in seen:
                    continue
                if b == dst:
                    return path + ((engine, a, b),)
                seen.add(b)
                nxt.append((b, path + ((engine, a, b),)))
        frontier = nxt
    return None


def hop_floor(chip: Chip, src: str, dst: str, transfers: int, nbytes: int, core: int | None = None) -> tuple[str, float]:
    """(engine, cycles): a lower bound of the time `transfers` copies of `nbytes` bytes in all
    from src to dst keep the first hop's engine busy: each transfer's latency (unless the engine
    overlaps its transfers' latencies) and the bytes at the hop's uncontended bandwidth
    (isa/costs.py), bursts left out."""
    key = ("hop_floor", src, dst, core)
    if key not in chip.memo:
        engine, a, b = route(chip, src, dst, core)[0]
        e = chip.engines[engine]
        latency = 0 if e.in_flight > 1 else transfer_latency(e, chip.memories, (a, b))
        chip.memo[key] = engine, latency, transfer_bandwidth(e, chip.memories, (a, b))
    engine, latency, bandwidth = chip.memo[key]
    return engine, transfers * latency + nbytes / bandwidth


def route(chip: Chip, src: str, dst: str, core: int | None = None) -> tuple[Hop, ...]:
    key = ("route", src, dst, core)
    if key not in chip.memo:
        chip.memo[key] = _route(chip, src, dst, core)
    return chip.memo[key]


def _route(chip: Chip, src: str, dst: str, core: int | None) -> tuple[Hop, ...]:
    links = tuple((e.name, a, b) for e in chip.engines_of("dma", core) for a, b in e.links)
    hops = _hops(links, src, dst)
    if not hops:
        raise UnsupportedError(f"chip {chip.name}: no DMA route from {src} to {dst} (links: {', '.join(f'{a}->{b}' for _, a, b in links)})")
    return hops


# Staging buffers a staged hop chooses from (module docstring): a template's step stages two
# operands of different sizes (a product's left and right tiles), so each keeps two addresses.
STAGE_SLOTS = 4


def copy(em: Emits, src: Region, src_buf: Buf, dst: Region, dst_buf: Buf, op: str, core: int | None = None,
         stages: Sequence[Buf] | None = None, index: tuple[Region, Buf] | None = None, wrap: bool = False) -> None:
    """Emit the DMA(s) moving region src (in src_buf) to region dst (in dst_buf): through a
    staging buffer per intermediate hop, placed here (Emitter.stage_buffer) or given in
    `stages` (one per hop). With `index` (indices P + (n, k) and their buffer), src is a table
    whose rows the first hop gathers by the indices it reads (IndexedDma, negative ones counted
    from the end with `wrap`): a gather op's, a paged cache's block read through its block table."""
    hops = route(em.chip, src.mem, dst.mem, core)
    here, here_buf = src, src_buf
    for k, (engine, _, to) in enumerate(hops[:-1]):
        shape = gathered(here, index[0]) if index and not k else here.shape
        stage = stages[k] if stages else em.stage_buffer(to, dense(to, 0, here.dtype, shape).nbytes, f"{op}/stage.{to}", engine)
        there = dense(to, stage.addr, here.dtype, shape)
        _hop(em, engine, here, here_buf, there, stage, op, index if not k else None, wrap)
        if here_buf is not src_buf and not stages:
            em.release(here_buf)
        here, here_buf = there, stage
    _hop(em, hops[-1][0], here, here_buf, dst, dst_buf, op, index if len(hops) == 1 else None, wrap)
    if here_buf is not src_buf and not stages:
        em.release(here_buf)


def gathered(table: Region, index: Region) -> tuple[int, ...]:
    """The shape of the rows indices of shape P + (n, k) gather from a table P + (k dims) + Q: P + (n,) + Q."""
    p = len(index.shape) - 2
    return index.shape[:-1] + table.shape[p + index.shape[-1]:]


def _hop(em: Emits, engine: str, src: Region, src_buf: Buf, dst: Region, dst_buf: Buf, op: str, index: tuple[Region, Buf] | None,
         wrap: bool) -> None:
    """One hop: a Dma, or with `index` a gather of src's rows by it."""
    if index is None:
        em.emit(engine, Dma(src, dst, op), reads=(src_buf,), writes=(dst_buf,))
    else:
        em.emit(engine, IndexedDma(src, index[0], dst, False, wrap, op), reads=(src_buf, index[1]), writes=(dst_buf,))
