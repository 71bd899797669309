"""Timing mode's fast-forward through a program's repeated blocks (a model's decoder layers,
`Program.blocks`, isa/lower/replay.py): the blocks in the middle are not run but laid down as
copies of the last one run before them, shifted by the period the run observes.

The run is of a shorter program: the head, the first `KEEP` blocks, the last two blocks and the
tail, the m blocks between them cut out and the waits after the cut on instructions in or after
it moved back by m blocks (a block's waits on the two before it then name the two kept before the
cut). The blocks are the same instructions but for addresses, and timing reads no value and no
address but through the cache of ddr, so the shorter program is the whole one with m fewer
blocks. Where the machine's state (engines, transfers in flight, the bandwidth each gets, the
cache's lines) at a block's edge is the state at the edge before, moved on by a block and P
cycles, each block runs as the one before P cycles later, and the whole run is the shorter one
with m periods of copies laid down at the cut: everything after it m periods later.

The state is not compared (SimPy's processes hold it), its consequences are, and the run is
laid down only where all of them repeat:
- blocks KEEP - 2 and KEEP - 1 and the first after the cut (run as block KEEP) are copies: each
  instruction (and each wait that blocked) starts and ends exactly P cycles (float-equal) after its
  counterpart in the block before, with the same share of its bytes the cache held, and the same
  waits blocked;
- ddr's read and write traffic over the period of the first block after the cut is that over
  the period before it, P cycles on (so is each memory's occupancy, `counters`);
- the cache tells blocks apart only by lines: each block's own tensors (the bound tensors the
  replay moves, `Blocks.owned`) lie on ddr lines no other block's tensors do, and no instruction
  outside the blocks touches a cut block's, so the lines the cache holds of the blocks around the
  cut are those it would hold there in the whole run; a line one block's tensors share with the
  next's shows up anyway as a cache share that differs across the cut.
Otherwise the whole program runs (the same result, slower; tests/test_fast_forward.py has both
kinds). Blocks whose times repeat only every few blocks (the cache holding a number of layers
that is not whole) run whole. Functional mode always runs every instruction: values come from
the machine.

The cut blocks' instructions are priced as their counterparts a block before (sim/machine.py's
_check), their waits and buffer lifetimes after the first cut block's are that block's moved on
(Moved; sim/machine.py's Lives.moved) rather than read, and their events are the last kept
block's, their indices moved by whole blocks and their op names their own; the events, buffer
lifetimes and ddr traffic after the cut move by m blocks and m periods.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import operator
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from isa.errors import ProgramError
from isa.instructions import regions
from isa.program import op_names
from isa.timing import Observer, Step, Timeline
from traces.occupancy import memory_counters
from traces.records import Event, Repeated, Sync

if TYPE_CHECKING:
    from collections.abc import Callable, Container, Iterable

    from isa.program import Blocks, Program
    from isa.timing import Cache
    from isa.timing.core import Ended, Started
    from traces.records import BufferSpan

    from .machine import Machine

KEEP = 2  # blocks kept before the cut: the block a wait reaches back two blocks to must be run
Ident = tuple[str, int]
Series = list[tuple[float, float]]
Raw = tuple  # (engine, index, Step or None for a wait, start, end, cached share)


class Ran(NamedTuple):
    """What a fast-forwarded run leaves: its end and ddr's read and write traffic (the events
    and buffer lifetimes go to the machine); where the run was cut: the last kept block's first
    start, the period, the blocks cut out and the whole run's events."""

    end: float
    read: Series
    write: Series
    first: float = 0.0
    period: float = 0.0
    m: int = 0
    events: Repeated | None = None  # the whole run's, where it was cut


class Cut:
    """The program's blocks with m = count - KEEP - 2 of them cut out: engine e's instructions
    [lo[e], hi[e]) are not run; those from hi[e] on run at index i - gap[e]."""

    def __init__(self, blocks: Blocks) -> None:
        self.blocks, self.m = blocks, blocks.count - KEEP - 2
        self.size = blocks.size
        self.lo = {e: s + KEEP * blocks.size[e] for e, s in blocks.start.items()}
        self.hi = {e: s + (blocks.count - 2) * blocks.size[e] for e, s in blocks.start.items()}
        self.gap = {e: self.m * n for e, n in blocks.size.items()}

    @property
    def buffers(self) -> tuple[int, int, int]:
        """(lo, hi, buffers a block): the cut blocks' buffers are the program's [lo, hi)."""
        b = self.blocks
        return b.buffers + KEEP * b.per_block, b.buffers + (KEEP + self.m) * b.per_block, b.per_block

    @property
    def skipped(self) -> dict[str, tuple[int, int, int]]:
        """engine -> (lo, hi, instructions a block): the instructions not run (sim/machine.py's _check)."""
        return {e: (self.lo[e], self.hi[e], n) for e, n in self.size.items()}

    def streams(self, costs: dict[str, list[Step | None]]) -> dict[str, list[Step | None]]:
        return {e: s[:self.lo[e]] + s[self.hi[e]:] for e, s in costs.items()}

    def waits(self, waits: dict[Ident, tuple[Ident, ...]]) -> dict[Ident, tuple[Ident, ...]] | None:
        """The waits of the shorter program; None where a wait before the cut names an
        instruction after it, or one after it names one the cut takes out that does not move back
        into the blocks kept before it."""
        lo, hi, gap, start = self.lo, self.hi, self.gap, self.blocks.start
        cut: dict[Ident, tuple[Ident, ...]] = {}
        for (e, i), on in waits.items():
            if i < lo[e]:
                if any(j >= lo[a] for a, j in on):
                    return None
                cut[e, i] = on
            elif i >= hi[e]:
                moved = []
                for a, j in on:
                    if j >= lo[a]:
                        j -= gap[a]
                        if j < start[a]:
                            return None
                    moved.append((a, j))
                cut[e, i - gap[e]] = tuple(moved)
        return cut

    def full(self, e: str, i: int) -> int:
        """The whole program's index of the shorter one's instruction i of engine e."""
        return i if i < self.lo[e] else i + self.gap[e]

    def block(self, engines: list[str], indices: list[int]) -> list[int]:
        """Which block (0..count-1) each of the shorter program's instructions (engine, index) is
        in; -1 before them, count after. A column at a time: a 7B decode step runs 650,000."""
        names = list(self.lo)
        code = np.fromiter(map({e: c for c, e in enumerate(names)}.__getitem__, engines), np.int64, len(engines))
        lo, gap, start, size = (np.array([d[e] for e in names], np.int64)[code] for d in (self.lo, self.gap, self.blocks.start, self.size))
        index = np.array(indices, np.int64)
        whole = np.where(index < lo, index, index + gap) - start  # the whole program's index, from the blocks' start
        count = self.blocks.count
        block = np.where(size > 0, np.minimum(whole // np.maximum(size, 1), count), count)
        return np.where(whole < 0, -1, block).tolist()


class Moved:
    """An engine's waits in `count` cut blocks of `size` instructions from index `first`, not read
    (sim/machine.py's _check): each block's the one before's moved on, so block t's are the first
    cut block's at the same places, each id `step` on t times, `step` being how far it moved from
    the kept block before the cut to the first cut block (a block's size on its engine, or 0)."""

    def __init__(self, engine: str, first: int, size: int, count: int, at: list[int], on: list[tuple[Ident, ...]], step: list[int]) -> None:
        self.engine, self.first, self.size, self.count, self.at, self.on, self.step = engine, first, size, count, at, on, step
        self.waits = count * len(at)

    @classmethod
    def of(cls, e: str, waits: dict[Ident, tuple[Ident, ...]], at: list[int], lo: int, n: int, count: int) -> Moved | None:
        """Engine e's waits in the `count` cut blocks from lo + n, where the first cut block's waits
        (at lo) lie where the kept block's before it do, each naming instructions of the same
        engines; None where they do not."""
        before = at[bisect.bisect_left(at, lo - n):bisect.bisect_left(at, lo)]
        first = at[bisect.bisect_left(at, lo):bisect.bisect_left(at, lo + n)]
        if [i + n for i in before] != first:
            return None
        on = [waits[e, i] for i in first]
        pairs = [(a, b) for i, j in zip(before, first) for a, b in itertools.zip_longest(waits[e, i], waits[e, j], fillvalue=("", 0))]
        if any(a[0] != b[0] for a, b in pairs):
            return None
        return cls(e, lo + n, n, count, [i - lo for i in first], on, [b[1] - a[1] for a, b in pairs])

    def syncs(self) -> list[Sync]:
        """The cut blocks' waits after the first, as Syncs (engine, index, ((engine, index), ...))."""
        flat = [x for ids in self.on for x in ids]
        engines = list(map(operator.itemgetter(0), flat))
        index, step = np.array([x[1] for x in flat], np.int64), np.array(self.step, np.int64)
        ends = list(itertools.accumulate(map(len, self.on), initial=0))
        out: list[Sync] = []
        for t in range(1, self.count + 1):
            ids = list(zip(engines, (index + t * step).tolist()))
            at = [self.first + (t - 1) * self.size + r for r in self.at]
            out += map(make_sync, zip(itertools.repeat(self.engine), at, map(tuple, map(ids.__getitem__, map(slice, ends, ends[1:])))))
        return out


def plan(program: Program) -> Cut | None:
    """The cut through the program's blocks, where it has enough of them to cut one out."""
    blocks = program.blocks
    if blocks is None or blocks.count < KEEP + 3:
        return None
    for e, stream in program.streams.items():
        start, size = blocks.start.get(e), blocks.size.get(e)
        if start is None or size is None or start < 0 or size < 0 or start + blocks.count * size > len(stream):
            raise ProgramError(f"program blocks: {blocks.count} blocks of {size} instructions from {e}.{start} do not lie "
                               f"in engine {e}'s {len(stream)} instructions")
    return Cut(blocks)


def fast_forward(machine: Machine, cache: Cache | None) -> Ran | None:
    """Run the machine's program with its middle blocks cut out (on `cache`, the machine's cache
    of ddr) and lay down the whole run (its events, machine.occupancy); None where the
    program has too few blocks, or the check above fails (the machine then runs it whole)."""
    program, cut = machine.program, machine.cut
    assert cut is not None  # the machine fast-forwards where it planned a cut
    waits = cut.waits(machine.waits)
    if waits is None or (cache is not None and not _own_lines(machine, cut)):
        return None
    lives = machine.occupancy.lives
    firsts = _Ids(cut, lives.engines, lives.first_engine, lives.first_index)
    lasts = _Ids(cut, lives.engines, lives.last_engine, lives.last_index)
    record = _Record(lasts.watched(), firsts.ran())
    timeline = Timeline(machine.chip, cut.streams(machine.costs), waits, cache, observer=record)
    end = timeline.run(lambda e, i: f"{e}.{cut.full(e, i)}")
    blocks = cut.block(list(map(operator.itemgetter(0), record.raw)), list(map(operator.itemgetter(1), record.raw)))
    period = _period(cut, record.raw, blocks)
    if period is None:
        return None
    first = min(r[3] for r, k in zip(record.raw, blocks) if k == KEEP - 1)  # the last kept block's first start
    lo, hi = first + period, first + 2 * period
    read, write = (_extend(s, first, period, cut.m) for s in (timeline.arbiter.read, timeline.arbiter.write))
    if not all(_window(s, first, lo) == _window(s, lo, hi) for s in (timeline.arbiter.read, timeline.arbiter.write)):
        return None
    _lifetimes(machine, cut, record, period, firsts, lasts)
    return Ran(end + cut.m * period, read, write, first, period, cut.m, _events(cut, record.raw, blocks, program, period))


class _Record(Observer):
    """The shorter run as it happens: each instruction's (and blocking wait's) engine, index,
    Step, start, end and cache share, and when each instruction of `opens` (engine -> indices:
    those a buffer's lifetime starts at) started."""

    def __init__(self, watched: dict[str, set[int]], opens: dict[str, set[int]]) -> None:
        self.watched, self.opens = watched, opens
        self.raw: list[Raw] = []
        self.opened: dict[Ident, float] = {}

    def bind(self, engine: str, n: int) -> tuple[Container[int], Started, Ended]:
        return self.opens.get(engine, ()), functools.partial(self.started, engine), functools.partial(self.ended, engine)

    def started(self, engine: str, i: int, now: float) -> str:
        self.opened[engine, i] = now
        return ""

    def ended(self, engine: str, i: int, step: Step, start: float, end: float, note: str, cached: float) -> None:
        self.raw.append((engine, i, step, start, end, cached))

    def waited(self, engine: str, i: int, start: float, end: float) -> None:
        self.raw.append((engine, i, None, start, end, 0.0))


def _period(cut: Cut, raw: list[Raw], blocks: list[int]) -> float | None:
    """P where the blocks KEEP - 2, KEEP - 1 and the first after the cut (run as block KEEP) are
    copies of one another each P later; None where they are not (blocks: each run one's block)."""
    rows: dict[int, list[tuple]] = {KEEP - 2: [], KEEP - 1: [], cut.blocks.count - 2: []}
    # engine -> what moves a run index in block k to its place in the block (cut.full, less the block's start)
    offset = {k: {e: (cut.gap[e] if k >= KEEP else 0) - s - k * cut.size[e] for e, s in cut.blocks.start.items()} for k in rows}
    for r, k in zip(raw, blocks):
        if k in rows:
            rows[k].append((r[0], r[1] + offset[k][r[0]], r[2] is None, r[5], r[3], r[4]))
    order = [sorted(rows[k], key=operator.itemgetter(0, 1)) for k in sorted(rows)]
    if not order[0] or any(len(x) != len(order[0]) for x in order):
        return None
    period = order[1][0][4] - order[0][0][4]
    for before, after in itertools.pairwise(order):
        for x, y in zip(before, after):
            if x[:4] != y[:4] or x[4] + period != y[4] or x[5] + period != y[5]:
                return None
    return period


def _window(series: Series, lo: float, hi: float) -> tuple:
    """The traffic over [lo, hi): the rate at lo and each change in it, timed from lo."""
    k = bisect.bisect_right(series, (lo, float("inf")))
    return (_value(series, lo), *((t - lo, r) for t, r in series[k:bisect.bisect_left(series, (hi, float("-inf")))]))


def _extend(series: Series, first: float, period: float, m: int) -> Series:
    """The whole run's traffic: up to the period after `first` as run, then that period m times
    more, then the rest m periods later; a point that changes nothing is left out."""
    lo, hi = first + period, first + 2 * period
    before = [p for p in series if p[0] < lo]
    middle = [p for p in series if lo <= p[0] < hi]
    after = [(t + m * period, r) for t, r in series if t >= lo]
    laid = before + [(t + k * period, r) for k in range(m) for t, r in middle] + after
    out: Series = []
    for p in laid:
        if not out or p[1] != out[-1][1]:
            out.append(p)
    return out


# an Event (a Sync) from the tuple of all its fields, made in C: a run records one per instruction (wait)
_make: Callable[[tuple], Event] = functools.partial(tuple.__new__, Event)
make_sync: Callable[[tuple], Sync] = functools.partial(tuple.__new__, Sync)


def step_event(e: str, i: int, step: Step, op: str, start: float, end: float, note: str, cached: float) -> Event:
    """The trace event of instruction i of engine e, priced as `step`, that ran from start to end
    with `cached` of its bytes served by the cache."""
    return _make((e, i, step.kind, step.name, op, start, end, step.nbytes, step.src, step.dst, note, step.ops,
                  round(cached * step.nbytes) if cached else 0))


def wait_event(e: str, i: int, op: str, start: float, end: float) -> Event:
    """The trace event of wait i of engine e that blocked from start to end."""
    return _make((e, i, "wait", "wait", op, start, end, 0, "", "", "", 0, 0))


def _events(cut: Cut, raw: list[Raw], blocks: list[int], program: Program, period: float) -> Repeated:
    """The whole run's events: those run, moved past the cut where after it, and the cut blocks'
    as copies of the last kept block's (blocks: each run one's block, Cut.block), made as Events
    only when read (traces.records.Repeated)."""
    streams, m, size, lo, gap = program.streams, cut.m, cut.size, cut.lo, cut.gap
    read = {e: functools.partial(list.__getitem__, s) for e, s in streams.items()}  # the instructions run are made: read as they are
    events: list[Event] = []
    add = events.append
    last = []  # the last kept block's events
    for (e, i, step, start, end, cached), k in zip(raw, blocks):
        if i >= lo[e]:
            i, start, end = i + gap[e], start + m * period, end + m * period
        op = read[e](i).op
        event = wait_event(e, i, op, start, end) if step is None else step_event(e, i, step, op, start, end, "", cached)
        add(event)
        if k == KEEP - 1:
            last.append(event)
    engines = list(map(operator.itemgetter(0), last))
    steps = list(map(size.__getitem__, engines))
    at: dict[str, list[int]] = {}  # engine -> the places of its events in `last`
    for k, e in enumerate(engines):
        at.setdefault(e, []).append(k)
    ops = np.empty((m if last else 0, len(last)), object)  # each cut block's op names, its own instructions'
    for e, places in at.items():  # (not made where replayed: op_names)
        first = [last[k][1] for k in places]
        found = op_names(streams[e], [i + b * size[e] for b in range(1, len(ops) + 1) for i in first])
        ops[:, places] = np.array(found, object).reshape(len(ops), len(places))
    return Repeated(events, last, steps, period, ops.tolist())


def _lifetimes(machine: Machine, cut: Cut, record: _Record, period: float, firsts: _Ids, lasts: _Ids) -> None:
    """Each planned buffer's lifetime in the whole run, from when its first instruction started
    and its last ones ended in the shorter run, moved as their instructions are (firsts: the
    buffers' first instructions; lasts: their last ones, one buffer's after another). A buffer's end is the latest of its last
    ones' ends, the one met last in the order the machine closes them where two are equal (as
    numbers: one may be an int)."""
    occupancy = machine.occupancy
    lengths = {e: len(stream) - cut.gap[e] for e, stream in machine.program.streams.items()}
    lives = occupancy.lives
    occupancy.start.update(enumerate(firsts.times(record.opened.items(), period, lengths)))
    raw = record.raw  # (a blocking wait's end is there too, and no buffer's last)
    ends = lasts.times(zip(map(operator.itemgetter(0, 1), raw), map(operator.itemgetter(4), raw)), period, lengths)
    owner = lives.owners()
    if not len(owner):
        return
    order = np.lexsort((lasts.order(), np.array(ends, float), owner))
    latest = order[np.flatnonzero(np.diff(owner[order], append=-1))]  # each buffer's last in that order
    occupancy.end.update(zip(owner[latest].tolist(), map(ends.__getitem__, latest.tolist())))


class _Ids:
    """Instruction ids (engine, index) of the whole program as columns, each engine's with the
    blocks k it lies on from its counterpart in the shorter run (0 before the cut, 1 to m in the
    cut blocks, from the last kept block's, m after it)."""

    def __init__(self, cut: Cut, engines: list[str], engine: np.ndarray, index: np.ndarray) -> None:
        """ids as columns: each one's engine (a position in `engines`) and index."""
        self.cut, self.count = cut, len(index)
        codes = {e: c for c, e in enumerate(cut.lo)}
        self.engine = np.array([codes[e] for e in engines], np.int64)[engine] if len(engines) else np.zeros(0, np.int64)
        self.index = index
        self.at = {e: np.flatnonzero(self.engine == c) for e, c in codes.items()}  # each engine's positions
        self.k = {}
        for e, at in self.at.items():
            whole, lo, n = self.index[at], cut.lo[e], cut.size[e]
            self.k[e] = np.clip((whole - lo) // n + 1, 0, cut.m) if n else np.where(whole >= lo, cut.m, 0)

    def watched(self) -> dict[str, set[int]]:
        """engine -> the shorter run's indices of the ids outside the cut blocks (Observer.watched)."""
        cut, watched = self.cut, {}
        for e, at in self.at.items():
            if len(at):
                whole = self.index[at]
                kept = whole[(whole < cut.lo[e]) | (whole >= cut.hi[e])]
                watched[e] = set(np.where(kept >= cut.hi[e], kept - cut.gap[e], kept).tolist())
        return watched

    def ran(self) -> dict[str, set[int]]:
        """engine -> the shorter run's indices of the ids' counterparts (the times `times` reads)."""
        return {e: set((self.index[at] - self.k[e] * self.cut.size[e]).tolist()) for e, at in self.at.items()}

    def times(self, times: Iterable[tuple[Ident, float]], period: float, lengths: dict[str, int]) -> list[float]:
        """When each instruction started or ended in the whole run, from (id, time) pairs of the
        shorter run's (lengths: its engines' instructions): k periods after its counterpart there,
        the number as Python adds them (an int where both are)."""
        dense = {e: np.full(n, None, object) for e, n in lengths.items()}  # each engine's times by its index in the shorter run
        for (e, i), t in times:
            dense[e][i] = t
        out = np.empty(self.count, object)
        for e, at in self.at.items():
            k = self.k[e]
            whole = dense[e][self.index[at] - k * self.cut.size[e]]
            moved = k > 0
            whole[moved] = whole[moved] + k[moved].astype(object) * period
            out[at] = whole
        result = out.tolist()
        assert None not in result, "every instruction a buffer's lifetime names ran"
        return result

    def order(self) -> np.ndarray:
        """Each id's place in the order of the machine's closes: engines by their first id, then
        indices by their first id."""
        _, first, inverse = np.unique(self.engine, return_index=True, return_inverse=True)
        engine_rank = first[inverse]
        _, first, inverse = np.unique(self.engine * (int(self.index.max()) + 1) + self.index, return_index=True, return_inverse=True)
        return engine_rank * self.count + first[inverse]


def counters(ran: Ran, spans: list[BufferSpan], capacities: dict[str, int], cut: range) -> dict[str, Series]:
    """traces.occupancy.memory_counters of the whole run's buffer lifetimes, worked out from those
    live before the second cut block or after the last: the counters over the first cut block's
    period, laid down again for the other cut blocks. A memory whose counters over that period and
    the first after the cut's differ (staging slots that take turns leave holes that repeat every
    few blocks) has them from every lifetime in it; all memories do where a buffer other than a cut
    block's (`cut`: their positions in `spans`, a range of step 1) lives only between those periods."""
    period = ran.period
    lo, hi = ran.first + 2 * period, ran.first + (ran.m + 1) * period
    if any(lo <= b.start and b.end <= hi for b in itertools.chain(spans[:cut.start], spans[cut.stop:])):
        return memory_counters(spans, capacities)
    laid = memory_counters([b for b in spans if b.start < lo or b.end >= hi], capacities)
    differ = {name.split(".", 1)[1] for name, c in laid.items() if _window(c, lo - period, lo) != _window(c, hi, hi + period)}
    exact = memory_counters([b for b in spans if b.mem in differ], {m: c for m, c in capacities.items() if m in differ})
    return {name: exact[name] if name in exact else _lay(c, lo - period, period, ran.m - 1, hi) for name, c in laid.items()}


def _lay(series: Series, w: float, period: float, n: int, hi: float) -> Series:
    """A step counter: `series` before w + period, its period from w laid down n more times, and
    `series` from hi (= w + (n + 1) periods) on; a point changes the value, as traces.occupancy
    records them."""
    inf = float("inf")
    end = bisect.bisect_left(series, (w + period, -inf))
    window = series[bisect.bisect_left(series, (w, -inf)):end]
    times, values = [t for t, _ in window], [v for _, v in window]
    laid = series[:end]
    for k in range(1, n + 1):
        shift = k * period
        laid.append((w + shift, _value(series, w)))
        laid += zip(map(operator.add, times, itertools.repeat(shift)), values)
    laid.append((hi, _value(series, hi)))
    laid += series[bisect.bisect_right(series, (hi, inf)):]
    # of points at one cycle the last, then of points of one value the first
    at = np.fromiter(map(operator.itemgetter(0), laid), float, len(laid))
    last = np.flatnonzero(np.append(at[1:] != at[:-1], True))
    value = np.fromiter(map(operator.itemgetter(1), laid), float, len(laid))[last]
    return list(map(laid.__getitem__, last[np.append(True, value[1:] != value[:-1])].tolist()))


def _value(series: Series, t: float) -> float:
    """A step counter's value at t."""
    k = bisect.bisect_right(series, (t, float("inf"))) - 1
    return series[k][1] if k >= 0 else 0.0


def _own_lines(machine: Machine, cut: Cut) -> bool:
    """Whether the cache sees the cut blocks' own tensors alone: each block's own ddr spans
    (the bound regions that move with it) cover whole lines no other block's or tensor's do,
    and no instruction outside the blocks touches a cut block's."""
    owned = cut.blocks.owned
    if len(owned) != cut.blocks.count:
        return False
    line = machine.chip.memories["ddr"].burst
    spans = sorted((lo // line, -(-hi // line), b) for b, own in enumerate(owned) for lo, hi in own)
    if any(a[1] > b[0] for a, b in itertools.pairwise(spans)):
        return False  # two blocks' (or one block's two) tensors share a line
    cut_spans = [(lo, hi) for lo, hi, b in spans if KEEP <= b < cut.blocks.count - 2]
    starts = [lo for lo, _ in cut_spans]
    for e, stream in machine.program.streams.items():
        first, last = cut.blocks.start[e], cut.blocks.start[e] + cut.blocks.count * cut.size[e]
        for instr in (*stream[:first], *stream[last:]):
            for r in (*regions(instr)[0], *regions(instr)[1]):
                if r.mem != "ddr":
                    continue
                a, z = r.span()
                k = bisect.bisect_right(starts, a // line) - 1
                if (k >= 0 and cut_spans[k][1] > a // line) or (k + 1 < len(starts) and starts[k + 1] < -(-z // line)):
                    return False
    return True
