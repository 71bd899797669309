"""Memory occupancy and fragmentation over time, worked out from the placed buffers
(`Trace.buffers`: address, size and live interval of each).

At a cycle where buffers open and close, the value recorded is the one after all of them:
a buffer is live at cycle t when start <= t < end.
"""
from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

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
        known: dict[tuple, float] = {}  # live spans -> their fragmentation: a model's layers repeat them
        for b, closes, cycle in _changes(spans):
            if closes:
                del live[bisect.bisect_left(live, (b.addr, min(b.addr + b.size, capacity)))]
                used -= b.size
            else:
                bisect.insort(live, (b.addr, min(b.addr + b.size, capacity)))
                used += b.size
            if cycle is None:
                continue  # more change at this cycle
            _step(occupied, cycle, used)
            if capacity:
                key = tuple(live)
                held = known.get(key)
                if held is None:
                    held = known[key] = _fragmentation(live, capacity)
                _step(fragmented, cycle, held)
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


def _changes(spans: list[BufferSpan]) -> Iterator[tuple[BufferSpan, bool, float | None]]:
    """(span, whether it closes, None or, on the last change at a cycle, the cycle) in order of
    cycle, those opening at a cycle before those closing; a cycle as the first span met that
    opens or closes then gives it (an int or a float)."""
    if not spans:
        return iter(())
    times = list(itertools.chain.from_iterable(map(operator.attrgetter("start", "end"), spans)))  # each span's start, then end
    at = np.array(times, float)
    order = np.lexsort((np.arange(len(times)) % 2, at))
    ordered = at[order]
    last = np.append(ordered[1:] != ordered[:-1], True)  # the last change at each cycle
    named = np.minimum.reduceat(order, np.flatnonzero(np.append(True, last[:-1])))  # the first met at each cycle
    cycles = np.full(len(times), None, object)
    cycles[np.flatnonzero(last)] = list(map(times.__getitem__, named.tolist()))
    return zip(map(spans.__getitem__, (order // 2).tolist()), (order % 2).astype(bool).tolist(), cycles.tolist())


def _step(points: list[tuple[float, float]], cycle: float, value: float) -> None:
    """Append a point when the value changes; a change at cycle 0 replaces the initial point."""
    if points[-1][0] == cycle:
        points[-1] = (cycle, value)
    elif points[-1][1] != value:
        points.append((cycle, value))
