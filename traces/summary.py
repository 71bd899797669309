"""Summary of a run, computed from its Trace alone: totals, per-engine busy time, DDR traffic,
memory peaks and a per-op breakdown, plus a compact text form of it.

An op's time is its share of the run, not its span: the ops of a layer group run at once (a
convolution, its bias and activation, the next layer of a chain) and each spans the whole group,
so at each moment the time is split among the ops running then (from the start of an op's first
instruction to the end of its last) in proportion to their work in it, the engine cycles their
instructions spend there. The shares of all ops add up to the time some op was running."""
from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .occupancy import NEGLIGIBLE_FRAGMENTATION, STATE, memory_names
from .records import Event, Repeated
from .text import human_bytes, si, table

if TYPE_CHECKING:
    from numpy import ndarray

    from traces.records import Trace

DDR = "ddr"  # the off-chip memory's name on every chip


@dataclass(frozen=True)
class OpStats:
    """The instructions of one graph op, waits excluded (a wait is not work of the op)."""

    name: str
    start: float  # start cycle of its first instruction
    end: float  # end cycle of its last instruction
    busy: dict[str, float]  # engine -> busy cycles, engines in order of first use
    dma_bytes: int  # bytes moved by its DMA instructions
    ddr_bytes: int  # bytes its DMA instructions read from and wrote to DDR (ddr->ddr counts twice)
    ops: int  # arithmetic it did (Event.ops)
    cycles: float  # its share of the run's time (the module docstring): at most its span
    seconds: float  # that share in seconds

    @property
    def span(self) -> float:
        return self.end - self.start

    @property
    def intensity(self) -> float | None:
        """Operational intensity: ops per DDR byte (None when it moved no DDR bytes)."""
        return self.ops / self.ddr_bytes if self.ddr_bytes else None

    @property
    def achieved(self) -> float | None:
        """Ops per second over its share of the time (None for an op that took no time)."""
        return self.ops / self.seconds if self.seconds else None

    @property
    def busiest_engine(self) -> str:
        return max(self.busy, key=lambda engine: self.busy[engine])


@dataclass(frozen=True)
class Summary:
    chip: str
    clock_hz: float
    cycles: int
    seconds: float
    instructions: int  # events that are not waits
    busy: dict[str, float]  # engine -> busy cycles, engines in chip order
    utilization: dict[str, float]  # engine -> busy / cycles (0 when cycles is 0)
    ddr_read_bytes: int
    ddr_write_bytes: int
    cache_hit_bytes: int  # ddr bytes DMAs read from the chip's cache of it instead (isa/timing/cache.py)
    host_memory: str  # the chip's host memory ("" without one) and its traffic
    host_read_bytes: int
    host_write_bytes: int
    peak_bytes: dict[str, float]  # memory -> most bytes occupied at once
    capacity_bytes: dict[str, int]  # memory -> capacity (0 when the trace does not give it)
    peak_fragmentation: dict[str, float]  # memory -> highest 1 - largest free block / free bytes
    ops: dict[str, OpStats]  # op name -> OpStats, in order of first start
    state_bytes: dict[str, int]  # memory -> bytes of graph state it holds (a KV cache kept between runs), where any

    def slowest(self, n: int) -> list[OpStats]:
        """The n ops with the largest share of the time, largest first (ties: earliest start first)."""
        return sorted(self.ops.values(), key=lambda op: op.cycles, reverse=True)[:n]


def summarize(trace: Trace) -> Summary:
    work = _Work(trace.events)
    busy: dict[str, float] = dict.fromkeys(trace.engines, 0)
    for name, cycles in work.per_engine().items():
        busy[name] = busy.get(name, 0) + cycles
    dma = work.kind == work.code("kind", "dma")
    read = dma & (work.src == work.code("src", DDR))
    written = dma & (work.dst == work.code("dst", DDR))
    host = trace.host_memory
    peaks = _memory_peaks(trace)
    return Summary(
        chip=trace.chip,
        clock_hz=trace.clock_hz,
        cycles=trace.cycles,
        seconds=trace.seconds(trace.cycles),
        instructions=work.count,
        busy=busy,
        utilization={name: c / trace.cycles if trace.cycles else 0.0 for name, c in busy.items()},
        ddr_read_bytes=int(work.bytes[read].sum() - work.cached[read].sum()),
        ddr_write_bytes=int(work.bytes[written].sum()),
        cache_hit_bytes=int(work.cached[dma].sum()),
        host_memory=host,
        host_read_bytes=int(work.bytes[dma & (work.src == work.code("src", host))].sum()) if host else 0,
        host_write_bytes=int(work.bytes[dma & (work.dst == work.code("dst", host))].sum()) if host else 0,
        peak_bytes=peaks,
        capacity_bytes={name: trace.memories.get(name, 0) for name in peaks},
        peak_fragmentation={name: _peak(trace, "fragmentation." + name) for name in peaks},
        ops=_op_table(trace, work),
        state_bytes={name: int(_peak(trace, STATE + name)) for name in peaks if STATE + name in trace.counters},
    )


_COLUMNS = ("engine", "kind", "op", "start", "end", "bytes", "src", "dst", "ops", "cached")


class _Work:
    """A trace's events other than waits, as columns: numbers as numpy arrays, names as codes
    (`names[column][code]`), so that sums per engine and per op are bincounts."""

    engine: np.ndarray  # codes, as all the name columns
    kind: np.ndarray
    op: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    start: np.ndarray  # cycles, as floats
    end: np.ndarray
    bytes: np.ndarray
    ops: np.ndarray
    cached: np.ndarray

    def __init__(self, events: Sequence[Event]) -> None:
        repeated = events if isinstance(events, Repeated) else Repeated(list(events), [], [], 0.0, [])
        work = [e for e in repeated.run if e.kind != "wait"]
        kept = [j for j, e in enumerate(repeated.block) if e.kind != "wait"]  # the copies' work, a column at a time
        block, copies = [repeated.block[j] for j in kept], len(repeated.ops)
        fields = {name: _column(work, name) for name in _COLUMNS}
        once = {name: _column(block, name) for name in _COLUMNS}
        once["op"] = [ops[j] for ops in repeated.ops for j in kept]  # each copy's own op names
        self.count = len(work) + copies * len(block)
        self.names, self.codes = {}, {}
        for column in ("engine", "kind", "op", "src", "dst"):
            codes = self.codes[column] = {name: k for k, name in enumerate(dict.fromkeys(itertools.chain(fields[column], once[column])))}
            self.names[column] = list(codes)
            laid = _coded(codes, once[column]) if column == "op" else np.tile(_coded(codes, once[column]), copies)
            setattr(self, column, np.concatenate((_coded(codes, fields[column]), laid)))
        shifts = np.array([k * repeated.period for k in range(1, copies + 1)], float)
        for column in ("start", "end"):  # a copy's times k periods on, added as the copies' Events add them
            laid = (np.array(once[column], float)[None, :] + shifts[:, None]).ravel()
            setattr(self, column, np.concatenate((np.array(fields[column], float), laid)))
        for column in ("bytes", "ops", "cached"):
            laid = np.tile(np.array(once[column], np.int64), copies)
            setattr(self, column, np.concatenate((np.array(fields[column], np.int64), laid)))

    def code(self, column: str, name: str) -> int:
        """name's code in column; -1 (matching nothing) when no event has it."""
        return self.codes[column].get(name, -1)

    def per_engine(self) -> dict[str, int]:
        """engine -> busy cycles, engines in order of first event."""
        cycles = np.bincount(self.engine, weights=self.end - self.start, minlength=len(self.names["engine"]))
        return dict(zip(self.names["engine"], map(_number, cycles.tolist())))


def _column(events: list[Event], name: str) -> list:
    return list(map(operator.itemgetter(Event._fields.index(name)), events))


def _coded(codes: dict[str, int], names: list[str]) -> np.ndarray:
    return np.fromiter(map(codes.__getitem__, names), np.int64, len(names))


def _number(x: float) -> int | float:
    """A cycle count as the events give it: whole cycles as an int."""
    x = float(x)
    return int(x) if x.is_integer() else x


def _memory_peaks(trace: Trace) -> dict[str, float]:
    """Peak per memory: the trace's memories first, then any other memory with a counter."""
    return {name: _peak(trace, "memory." + name) for name in memory_names(trace)}


def _peak(trace: Trace, counter: str) -> float | int:
    return max(map(operator.itemgetter(1), trace.counters.get(counter, [])), default=0)


def _op_table(trace: Trace, work: _Work) -> dict[str, OpStats]:
    """op -> OpStats, ops in order of their first instruction's start (ties: trace order), each
    op's engines likewise."""
    named = work.op != work.code("op", "")
    order = np.argsort(work.start, kind="stable")
    order = order[named[order]]
    op, engine = work.op[order], work.engine[order]
    start, end = work.start[order], work.end[order]
    n_ops, n_engines = len(work.names["op"]), len(work.names["engine"])
    codes, first = np.unique(op, return_index=True)
    codes = codes[np.argsort(first, kind="stable")]
    names = [work.names["op"][c] for c in codes]
    least = np.full(n_ops, np.inf)
    np.minimum.at(least, op, start)
    most = np.full(n_ops, -np.inf)
    np.maximum.at(most, op, end)
    spans = {name: (_number(least[c]), _number(most[c])) for name, c in zip(names, codes)}
    pairs = op * n_engines + engine
    busy_cycles = np.bincount(pairs, weights=end - start, minlength=n_ops * n_engines)
    used, first = np.unique(pairs, return_index=True)
    busy: dict[str, dict[str, float]] = {name: {} for name in names}
    op_names, engine_names = work.names["op"], work.names["engine"]
    for pair in used[np.argsort(first, kind="stable")].tolist():
        busy[op_names[pair // n_engines]][engine_names[pair % n_engines]] = _number(busy_cycles[pair])
    dma = work.kind[order] == work.code("kind", "dma")
    nbytes, cached = work.bytes[order], work.cached[order]
    ends = (work.src[order] == work.code("src", DDR)).astype(np.int64) + (work.dst[order] == work.code("dst", DDR))
    dma_bytes = np.bincount(op[dma], weights=nbytes[dma], minlength=n_ops)
    ddr_bytes = np.bincount(op[dma], weights=(nbytes * ends - cached)[dma], minlength=n_ops)
    arithmetic = np.bincount(op, weights=work.ops[order], minlength=n_ops)
    position = np.zeros(n_ops, np.int64)
    position[codes] = np.arange(len(codes))
    shares = time_shares(least[codes], most[codes], position[op], start, end).tolist()
    return {name: OpStats(name, *spans[name], busy[name], int(dma_bytes[c]), int(ddr_bytes[c]), int(arithmetic[c]), share,
                          trace.seconds(share)) for name, c, share in zip(names, codes, shares)}


def time_shares(first: ndarray, last: ndarray, op: ndarray, start: ndarray, end: ndarray) -> ndarray:
    """op -> its share of the time (the module docstring): at each moment the time goes to the
    ops whose instructions run then, in proportion to the engines each keeps busy; a moment when
    the ops whose spans cover it all wait goes to them in proportion to their work over the run
    (equally if none did any). So an event earns the integral over its time of one over the
    engines busy then, and an op's span, over the moments nothing runs, its work over the work
    of the spans covering them: integrals of step functions over the run's change points.
    Each op's span is first[k] to last[k]; each event's op is a position k in those arrays. The
    shares come back as an array in that order."""
    ran = end > start
    starts, ends, ops = start[ran], end[ran], op[ran]
    work = np.bincount(ops, weights=ends - starts, minlength=len(first))
    points = np.unique(np.concatenate((starts, ends, first, last, [0.0])))

    # the weights of the intervals covering each step [points[k], points[k + 1])
    def level(lo: ndarray, hi: ndarray, weights: ndarray) -> ndarray:
        delta = np.zeros(len(points))
        np.add.at(delta, np.searchsorted(points, lo), weights)
        np.add.at(delta, np.searchsorted(points, hi), -weights)
        return np.cumsum(delta)

    def integral(rate: ndarray, lo: ndarray, hi: ndarray) -> ndarray:  # of a step function over [lo, hi) of each interval
        cumulative = np.concatenate(([0.0], np.cumsum(rate[:-1] * np.diff(points))))
        return cumulative[np.searchsorted(points, hi)] - cumulative[np.searchsorted(points, lo)]

    engines = level(starts, ends, np.ones(len(starts)))  # counts: whole numbers, compared at a half
    worked = level(first, last, (work > 0).astype(float))
    unworked = level(first, last, (work == 0).astype(float))
    by_work = level(first, last, work)
    shares = np.zeros(len(first))
    np.add.at(shares, ops, integral(np.where(engines > 0.5, 1 / np.maximum(engines, 1), 0.0), starts, ends))
    waiting = engines < 0.5
    shares += work * integral(np.where(waiting & (worked > 0.5), 1 / np.where(worked > 0.5, by_work, 1), 0.0), first, last)
    shares += (work == 0) * integral(np.where(waiting & (worked < 0.5) & (unworked > 0.5), 1 / np.maximum(unworked, 1), 0.0), first, last)
    return shares


def format_summary(summary: Summary, top: int = 5) -> str:
    """A compact report: totals, engines, DDR traffic, memory peaks and the `top` slowest ops."""
    s = summary
    lines = [
        (f"{s.chip}: {s.cycles:,} cycles = {s.seconds * 1e6:,.2f} us at {s.clock_hz / 1e6:,.0f} MHz, "
         f"{s.instructions:,} instructions"),
        "engines:",
    ]
    width = max((len(name) for name in [*s.busy, *s.peak_bytes]), default=0)
    for name, cycles in s.busy.items():
        lines.append(f"  {name:<{width}}  {s.utilization[name]:6.1%} busy  ({cycles:,.0f} cycles)")
    cached = f" (and {human_bytes(s.cache_hit_bytes)} of ddr read from its cache)" if s.cache_hit_bytes else ""
    lines.append(f"ddr: read {human_bytes(s.ddr_read_bytes)}, write {human_bytes(s.ddr_write_bytes)}{cached}")
    if s.host_memory:
        lines.append(f"{s.host_memory}: read {human_bytes(s.host_read_bytes)}, write {human_bytes(s.host_write_bytes)}")
    lines.append("memory peaks:")
    for name, peak in s.peak_bytes.items():
        capacity = s.capacity_bytes[name]
        of = f" of {human_bytes(capacity)} ({peak / capacity:.1%})" if capacity else ""
        fragmented = s.peak_fragmentation.get(name, 0)
        holes = f", fragmentation up to {fragmented:.1%}" if fragmented >= NEGLIGIBLE_FRAGMENTATION else ""
        state = f", graph state (KV cache) {human_bytes(s.state_bytes[name])}" if name in s.state_bytes else ""
        lines.append(f"  {name:<{width}}  {human_bytes(peak)}{of}{holes}{state}")
    slowest = s.slowest(top)
    if slowest:
        op_width = max(len("op"), *(len(op.name) for op in slowest))
        lines.append("slowest ops:")
        lines.append(f"  {'op':<{op_width}}  {'cycles':>12}  {'% total':>7}  busiest engine")
        for op in slowest:
            share = op.cycles / s.cycles if s.cycles else 0.0
            lines.append(f"  {op.name:<{op_width}}  {op.cycles:>12,.0f}  {share:>7.1%}  {op.busiest_engine}")
    return "\n".join(lines)


def format_ops(summary: Summary, top: int = 20, width: int | None = None) -> str:
    """The `top` ops by their share of the time as a table: that share in cycles and of the run,
    the span from first start to last end, busiest engine, DDR traffic, arithmetic, operational
    intensity (ops per DDR byte) and achieved rate over the share; fitted to `width` columns
    where given (traces.text.table)."""
    s = summary
    slowest = s.slowest(top)
    if not slowest:
        return "no ops"
    rows = [["op", "cycles", "% total", "span", "busiest", "DDR bytes", "ops", "ops/B", "GOP/s"]]
    for op in slowest:
        rows.append([
            op.name,
            f"{op.cycles:,.0f}",
            f"{op.cycles / s.cycles:.1%}" if s.cycles else "-",
            f"{op.span:,.0f}",
            op.busiest_engine,
            human_bytes(op.ddr_bytes),
            si(op.ops),
            "-" if op.intensity is None else f"{op.intensity:,.2f}",
            "-" if op.achieved is None else f"{op.achieved / 1e9:,.2f}",
        ])
    return "\n".join([f"ops by time ({len(slowest)} of {len(s.ops)}):", *table(rows, left=(0, 4), width=width)])
