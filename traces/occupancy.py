"""Memory occupancy and fragmentation over time, worked out from the placed buffers
(`Trace.buffers`: address, size and live interval of each).

At a cycle where buffers open and close, the value recorded is the one after all of them:
a buffer is live at cycle t when start <= t < end.
"""
from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from traces.records import BufferSpan, Trace

_PREFIX = "memory."
STATE = "state."
NEGLIGIBLE_FRAGMENTATION = 0.0005  # below this (0.0% to one decimal) reports and plots leave it out


def memory_counters(buffers: list[BufferSpan], capacities: dict[str, int]) -> dict[str, list[tuple[float, float]]]:
    """The "memory.<name>" (bytes occupied) and "fragmentation.<name>" step counters of every
    memory in `capacities` (name -> bytes), each starting at cycle 0, and "state.<name>" (bytes
    of graph state: a language model's KV cache, kept between runs) of a memory that holds any. Fragmentation is
    1 - largest free block / free bytes: 0 when the free bytes are one block (or there are none),
    near 1 when they are scattered in small holes between live buffers."""
    by_memory: dict[str, list] = {name: [] for name in capacities}
    for b in buffers:
        by_memory.setdefault(b.mem, []).append(b)
    counters: dict[str, list[tuple[float, float]]] = {}
    for mem, spans in by_memory.items():
        capacity = capacities.get(mem, 0)
        occupied: list[tuple[float, float]] = [(0, 0)]
        fragmented: list[tuple[float, float]] = [(0, 0.0)]
        live: list[tuple[int, int]] = []  # the live buffers' (address, end clipped to the capacity), in order
        used = 0  # their bytes
        for cycle, opening, closing in _changes(spans):
            for k in opening:
                b = spans[k]
                bisect.insort(live, (b.addr, min(b.addr + b.size, capacity)))
                used += b.size
            for k in closing:
                b = spans[k]
                del live[bisect.bisect_left(live, (b.addr, min(b.addr + b.size, capacity)))]
                used -= b.size
            _step(occupied, cycle, used)
            _step(fragmented, cycle, _fragmentation(live, capacity))
        counters[_PREFIX + mem] = occupied
        state = [b for b in spans if b.kind == "state"]
        if state:
            counters[STATE + mem] = [(0, sum(b.size for b in state))]  # bound: held the whole run
        if capacity:
            counters[f"fragmentation.{mem}"] = fragmented
    return counters


def fragmentation(blocks: Iterable[BufferSpan], capacity: int) -> float:
    """1 - largest free block / free bytes of a memory of `capacity` bytes holding `blocks`
    (anything with addr and size; overlapping blocks count once)."""
    return _fragmentation(sorted((b.addr, min(b.addr + b.size, capacity)) for b in blocks), capacity)


def _fragmentation(spans: list[tuple[int, int]], capacity: int) -> float:
    """fragmentation of the sorted (first byte, end) spans, clipped to the capacity: their union
    as disjoint blocks, the free bytes between them."""
    largest, used, cursor = 0, 0, 0
    lo = hi = -1  # the block being merged ([lo, hi); none yet)
    for addr, end in spans:
        if hi >= 0 and addr <= hi:
            hi = max(hi, end)
        elif addr < end:
            if hi >= 0:
                largest = max(largest, lo - cursor)
                used, cursor = used + hi - lo, hi
            lo, hi = addr, end
    if hi >= 0:
        largest = max(largest, lo - cursor)
        used, cursor = used + hi - lo, hi
    largest = max(largest, capacity - cursor)
    free = capacity - used
    return 1 - largest / free if free > 0 else 0.0


def memory_names(trace: Trace) -> list[str]:
    """The trace's memories, then any other memory with an occupancy counter."""
    counted = [key[len(_PREFIX):] for key in trace.counters if key.startswith(_PREFIX)]
    return list(trace.memories) + [name for name in counted if name not in trace.memories]


def live_at(buffers: list[BufferSpan], mem: str, cycle: float) -> list[BufferSpan]:
    """The buffers of `mem` live at `cycle`, biggest first (ties: lowest address first)."""
    live = [b for b in buffers if b.mem == mem and b.start <= cycle < b.end]
    return sorted(live, key=lambda b: (-b.size, b.addr))


def peak_cycle(points: Sequence[tuple[float, float]]) -> float:
    """The first cycle at which a step counter reaches its highest value (0 for no points)."""
    best = max(points, key=lambda p: p[1], default=(0, 0))
    return next(cycle for cycle, value in points if value == best[1]) if points else 0


def _changes(spans: list[BufferSpan]) -> list[tuple[float, list[int], list[int]]]:
    """(cycle, positions opening, positions closing) in order of cycle."""
    at: dict[float, tuple[list[int], list[int]]] = {}
    for k, b in enumerate(spans):
        at.setdefault(b.start, ([], []))[0].append(k)
        at.setdefault(b.end, ([], []))[1].append(k)
    return [(cycle, *at[cycle]) for cycle in sorted(at)]


def _step(points: list[tuple[float, float]], cycle: float, value: float) -> None:
    """Append a point when the value changes; a change at cycle 0 replaces the initial point."""
    if points[-1][0] == cycle:
        points[-1] = (cycle, value)
    elif points[-1][1] != value:
        points.append((cycle, value))
