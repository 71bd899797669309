"""The lowering's estimate of a tiled op's cycles, to choose its tiling by (isa/lower/templates/conv.py,
isa/lower/templates/matmul.py, isa/lower/templates/pool.py): the machine's own timing run on the candidate's own
instructions.

A tiling is a run of pipeline steps (isa/lower/schedule/pipeline.py). A step loads its operands into its
slot's buffers and multiplies them; the last step of an output tile then finishes it (epilogue,
fused tail) and stores it. The template records each part of a step once per kind of step
(`Priced.piece`), by its own emission code run against a `Recorder`: an emitter that places
nothing, prices each instruction as the machine does (isa/timing/price.py) and keeps the
buffers it reads and writes as roles (`role`): the step's slot buffers, its tile's, a part of a
kept input, a staging buffer on a route, a tensor's home. A load that differs from one recorded
only in where its ddr bytes lie is that one `moved` there (a copy costs the same at any address).

`Estimate.cycles` lays the steps out in the order the pipeline emits them, gives each role the
buffer the template places for it (slot buffers rotating by step, a tile's by tile, a kept
input's by the tiles that load it, staging buffers as Emitter.stage_buffer picks them), infers
the waits by the emitter's rule (isa/lower/schedule/sync.py) and runs the streams on the machine's
timing core (isa/timing/core.py): engine queues, DMA transfers in flight, the bandwidth
overlapping transfers share, the cache of DDR. With several units (isa/lower/context.py) it
runs the busiest unit's tiles, the memories the units share (DDR, an L2) at that unit's share
of their bandwidth.

Steady state is priced once: where more than `repeats` consecutive positions of a loop (tiles
along an axis, the middle reduction blocks of a tile, the batch) do the same work, the first
`repeats` of them run and each one left out costs the time between the ends of the two before
the last one run (which drains into what follows the loop). That time is taken only once it
has settled, the same between the two positions before (or, where steps rotate among k buffer
slots, the same for three runs of k positions: `_left_out`): otherwise more positions run
(REPEATS, then twice as many, up to all). Where every unit's tiles run (`cores`), their
transfers interleave in the memories they share, and a loop's periods may jitter with the units'
phases and never repeat exactly (a weight-only GEMV's blocks on the 910B's 24 cores: 600-614
cycles to the end): once JITTERED times REPEATS positions have run, a loop still unsettled is
priced at the mean period of those run (`_jittered`), rather than replaying every position. (The
periods drift up as the run goes on, so the mean falls short of a whole replay by up to 1%; with
fewer positions, enough to rank a W4A16 GEMV's two widths the wrong way round.)

`bound` is a lower bound of the cycles (the busiest engine's total, or DDR's), so a search
(isa/lower/schedule/tiling.py, `least`) replays only the candidates that can still win; the templates
bound them more cheaply still, from their shapes alone, before any is recorded.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import math
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from contextlib import nullcontext
from copy import copy as shallow_copy
from itertools import pairwise
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

from ...costs import transfer_bandwidth
from ...timing import Cache, Observer, Step, Timeline, price
from ..check import engine_runs
from ..emit import Buf, oldest
from ..memory.route import STAGE_SLOTS
from ..schedule.sync import Clocks, accessed
from ..templates.window import filler

if TYPE_CHECKING:
    from chips.schema import Chip

    from ...graph import Node
    from ...instructions import Instr
    from ..context import Lowering, Unit
    from ..memory.alloc import Allocator

REPEATS = 4  # the least positions of a loop that run before the rest are priced (module docstring)
CYCLE = 4  # the most positions a settled loop may take to repeat its times (`_left_out`)
JITTERED = 4  # times REPEATS positions of a loop of every unit's replay that run before its mean period prices it (`_jittered`)

STEP, TILE, KEPT, PART, STAGE = "step", "tile", "kept", "part", "stage"  # role scopes (`role`)

StepKey: TypeAlias = tuple[Any, ...]  # what a step does (Estimate.work's argument)
Mark: TypeAlias = tuple[str, int]  # an instruction of a replay: (engine, its index in the engine's stream)
Position: TypeAlias = tuple[int, int, int]  # a step's index, its tile's and its kept operand load's (_Run._buffer)


def role(scope: str, name: Hashable, mem: str, size: int = 0) -> Buf:
    """A placeholder buffer naming what a step's instruction reads or writes, for a Recorder:
    scope STEP (a slot buffer: the step's own), TILE (the output tile's own: its accumulator,
    epilogue and tail buffers), KEPT (a kept operand, loaded by a tile and kept by the next
    ones), PART (a part of a kept operand, one per reduction block); any other scope names a
    buffer that does not rotate (a tensor's home, a fill value)."""
    return Buf((scope, name), mem, 0, size)


class Timed(NamedTuple):
    """An instruction of a candidate tiling: its engine, its Step as the machine prices it, and
    the roles (Buf names) of what it reads and writes."""

    engine: str
    step: Step
    reads: tuple[Hashable, ...] = ()
    writes: tuple[Hashable, ...] = ()


def moved(step: Step, delta: int) -> Step:
    """A transfer's Step at `delta` more bytes into ddr: its ddr regions moved (its cost is the
    same at any address)."""
    if step.read is None and step.write is None:
        return step
    read, write = (r if r is None else r._replace(addr=r.addr + delta) for r in (step.read, step.write))
    return step._replace(read=read, write=write)


class Recorder:
    """The emitter's interface as the templates use it (isa/lower/emit.py Emits), placing
    nothing: each instruction is kept as a Timed."""

    def __init__(self, chip: Chip, allocators: dict[str, Allocator]):
        self.chip, self.allocators = chip, allocators
        self.notes: list[str] = []
        self._timed: list[Timed] = []
        self._steps: dict[tuple[str, Instr], Step] = {}

    def emit(self, engine: str, instr: Instr, reads: Sequence[Buf] = (), writes: Sequence[Buf] = ()) -> None:
        key = (engine, instr)
        step = self._steps.get(key)
        if step is None:
            engine_runs(self.chip, engine, instr)
            step = self._steps[key] = price(self.chip, self.chip.engines[engine], instr)
        self._timed.append(Timed(engine, step, tuple(b.name for b in reads), tuple(b.name for b in writes)))

    def stage_buffer(self, mem: str, nbytes: int, name: str, engine: str) -> Buf:
        return role(STAGE, mem, mem, nbytes)

    def alloc(self, mem: str, nbytes: int, name: str, unused: bool = False, at: int | None = None) -> Buf:
        return role("fixed", name, mem, nbytes)

    def bind(self, name: str, role_: str, dtype: str, shape: Sequence[int], data: bytes = b"", mem: str = "ddr") -> Buf:
        return Buf(("fixed", name), mem, 0, len(data))

    def split(self, buf: Buf, at: Sequence[int]) -> tuple[Buf, ...]:
        """buf's parts as roles of its scope, named (scope, (its name, k)) as a template names them."""
        assert isinstance(buf.name, tuple), "a Recorder's Bufs are roles, named (scope, name)"
        scope, name = buf.name
        edges = (0, *at, buf.size)
        buf.parts = tuple(role(scope, (name, k), buf.mem, hi - lo) for k, (lo, hi) in enumerate(pairwise(edges)))
        return buf.parts

    def release(self, buf: Buf) -> None:
        pass

    def disjoint(self, bufs: Iterable[Buf]) -> nullcontext[None]:
        """Nothing to relax: the Recorder keeps what each instruction reads and writes, not its waits."""
        return nullcontext()

    def take(self) -> tuple[Timed, ...]:
        """What was recorded since the last take."""
        out = tuple(self._timed)
        self._timed.clear()
        return out


class Work(NamedTuple):
    """A step's instructions (Timed), in the order the template emits them: load (into its
    slot), product, and on a tile's last step finish (reads the accumulator) and store; fills:
    on a tile's first step, the loads into the tile's own buffers its product reads (a bias),
    emitted after the step's loads; tail: on a tile's first step, its fused tail's operand
    loads, emitted as pipeline.pipeline emits a step's fill; kept: the loads into a part of a
    kept operand, emitted before them."""

    load: tuple[Timed, ...]
    product: tuple[Timed, ...]
    finish: tuple[Timed, ...] = ()
    store: tuple[Timed, ...] = ()
    fills: tuple[Timed, ...] = ()
    kept: tuple[Timed, ...] = ()
    tail: tuple[Timed, ...] = ()


class Priced:
    """A template's plan that prices its candidate tilings (a mixin). `piece(name, *args)`
    records `_price_<name>(plan, *args)` once: plan is this plan with its emitter (and the
    context's, and its tail's) a Recorder, so the method emits through the template's own code;
    it returns the Timed recorded, or what the method returns (parts it took as it went)."""

    units: list[Unit]  # the plan's: the units its tiles are dealt among
    ctx: Lowering
    em: Any  # the lowering's emitter, or a Recorder in a plan's recording
    node: Node

    def unit_cores(self, units: int) -> list[int] | None:
        """The core each of the first `units` units runs on, where each has a core of its own
        (estimate.tiled runs every unit's tiles then); else None."""
        cores = [u.matrix.core for u in self.units[:units] if u.matrix is not None and u.matrix.core is not None]
        return cores if units > 1 and len(set(cores)) == len(cores) == units else None

    def recording(self) -> Any:
        """This plan emitting into a Recorder (made once per plan); its type is the plan's own."""
        rec: Any = self.__dict__.get("_recording")
        if rec is None:
            recorder = Recorder(self.ctx.chip, self.ctx.em.allocators)
            rec = shallow_copy(self)
            # the Recorder stands in for the emitter: it answers the calls the emission helpers make
            rec.em, rec.ctx = recorder, dataclasses.replace(self.ctx, em=recorder, constants={})
            tail = getattr(self, "tail", None)
            if tail is not None:
                rec.tail = shallow_copy(tail)
                rec.tail.ctx = rec.ctx
            self.__dict__["_recording"] = rec
        return rec

    def piece(self, name: str, *args: Hashable) -> Any:
        pieces = self.__dict__.setdefault("_pieces", {})
        key = (name,) + args
        if key not in pieces:
            rec = self.recording()
            parts = getattr(self, "_price_" + name)(rec, *args)  # several parts, each taken as it was recorded
            recorded = rec.em.take()
            pieces[key] = recorded if parts is None else parts
        return pieces[key]

    def fillers(self, dtype: str, value: float, mem: str) -> dict:
        """The fill values a window load reads (isa/lower/templates/window.py), placed once, outside the
        steps: a plan's first loads place them, once per op and unit, which no step repeats."""
        rec = self.recording()
        fillers = rec.__dict__.setdefault("_fillers", {})
        filler(rec.ctx, fillers, dtype, value, mem, self.node.name)
        rec.em.take()
        return fillers

    def once(self, *tensors: Any) -> int:
        """The bytes of those of the op's inputs `tensors` that live in DDR (Estimate's `once`)."""
        return sum(t.nbytes for t in tensors if self.ctx.home[t.name].mem == "ddr")


class _Loop(NamedTuple):
    bodies: tuple[tuple[_Node, ...], ...]  # the nodes of its first REPEATS positions
    positions: int


class _Step(NamedTuple):
    key: StepKey
    block: int  # its reduction block, 0 first
    first: bool  # its tile's first step
    last: bool
    fresh: bool  # its tile loads the kept operand


_Node: TypeAlias = "_Step | _Loop"
Tiles: TypeAlias = list[tuple[Hashable, list[_Step]]]  # a unit's tiles, each (signature, its steps)
LoopEnds: TypeAlias = tuple[int, int, list[int]]  # (positions left out, times the loop recurs, each position's last step)


def bounds_hold(chip: Chip, units: int) -> bool:
    """Whether Estimate.bound() is a lower bound of the replay's cycles for `units` units on
    chip: on one unit, unless a cache of DDR serves some load faster than DDR would (the bound
    prices every read of DDR at DDR's bandwidth). Several units replayed together share DDR
    otherwise than the fixed share the bound gives each; there the bound is a guide to the
    search, not a proof."""
    return units == 1 and not _cache_outpaces_ddr(chip)


def _cache_outpaces_ddr(chip: Chip) -> bool:
    """Whether a DMA engine reading DDR would move bytes faster if the cache of DDR served them
    (a hit is read at the cache memory's bandwidth, isa/timing/core.py): only where the engine
    itself is faster than DDR."""
    cache = chip.cache
    if cache is None:
        return False
    key = ("cache_outpaces_ddr",)
    if key not in chip.memo:
        mems = chip.memories
        chip.memo[key] = any(transfer_bandwidth(e, mems, ("ddr", dst)) < min(e.rate("ddr", dst), cache.bandwidth, mems[dst].bandwidth)
                             for e in chip.engines_of("dma") for src, dst in e.links if src == "ddr")
    return chip.memo[key]


class Estimate:
    """The cycles of a run of steps (module docstring).

    work(key) -> Work of a step; counts: key -> how many steps do it (for the bounds); runs():
    per unit run, its tiles in order, each (signature, steps: [_Step]), with `periods` the
    number of tiles each position takes at each loop level, outermost first (like positions
    are found among them); slots: the slot buffers steps rotate; tile_slots: those tiles
    rotate; stage_slots: memory -> the staging buffers a route rotates there; ctx: the
    lowering (chip, allocators); busy: units at work at once; once: the bytes of the op's DDR
    inputs (a cache of DDR serves any byte read again); ends: the keys of the first and the last
    step; cores: each unit's core, where runs() has every unit's run (tiled)."""

    def __init__(self, ctx: Lowering, work: Callable[[StepKey], Work], counts: dict[StepKey, int], runs: Callable[[], list[Tiles]],
                 periods: list[int], slots: int, tile_slots: int | None = None, stage_slots: dict[str, int] | None = None,
                 busy: float = 1, once: int | None = None, ends: tuple[StepKey, StepKey] | None = None, cores: list[int] | None = None):
        self.ctx, self.work, self.counts, self.runs, self.periods, self.ends, self.cores = ctx, work, counts, runs, periods, ends, cores
        self.slots, self.tile_slots = slots, tile_slots or slots
        self.stage_slots = stage_slots or {}
        self.busy, self.once = busy, once
        self._works: dict[StepKey, Work] = {}
        self._cycles: float | None = None
        chip = ctx.chip
        # the memories the units share (ddr, an L2, a host) give each its share of their bandwidth
        self.bandwidths = {m.name: m.bandwidth / (busy if m.core is None or m.name == "ddr" else 1) for m in chip.memories.values()}
        # a replay of every unit shares them as the machine does
        self.replayed = self.bandwidths if cores is None else {m.name: m.bandwidth for m in chip.memories.values()}

    def work_of(self, key: StepKey) -> Work:
        """The Work of a step of `key`, worked out once."""
        work = self._works.get(key)
        if work is None:
            work = self._works[key] = self.work(key)
        return work

    # ---- bounds -----------------------------------------------------------------------------

    def bound(self) -> float:
        """A lower bound of the cycles: the busiest engine's total, or a shared memory's (each
        transfer's bytes at the least bandwidth on its way; a cache of DDR may serve a load's
        bytes after the first read of them)."""
        chip, bw = self.ctx.chip, self.bandwidths
        busy: dict[str, float] = {}
        reads = 0.0
        for key, n in self.counts.items():
            for t in (t for part in self.work_of(key) for t in part):
                step = t.step
                if step.kind != "dma":
                    busy[t.engine] = busy.get(t.engine, 0.0) + n * step.cycles
                    continue
                assert step.use is not None and step.shares is not None, "a transfer's Step names the memories it uses"
                rate = min([step.rate] + [bw[m] / k for m, k in step.use.items()])
                overlap = chip.engines[t.engine].in_flight > 1  # its latency may hide behind the transfer before
                busy[t.engine] = busy.get(t.engine, 0.0) + n * (step.moved / rate + (0 if overlap else step.cycles))
                for m, k in step.use.items():
                    busy[m] = busy.get(m, 0.0) + n * step.moved * k / bw[m]
                if step.read is not None:
                    reads += n * step.moved * step.shares[0]
        cache = chip.cache
        if cache is not None and self.once is not None and reads > self.once:  # bytes read again may hit
            busy["ddr"] = busy.get("ddr", 0.0) - (reads - self.once) / bw["ddr"]
        return max(max(busy.values(), default=0.0), self._products_path())

    def _products_path(self) -> float:
        """A lower bound of the cycles by the matrix engine's path: its products wait for the
        first step's loads, follow one another, and the last tile's finish and store follow the
        last of them."""
        if self.ends is None:
            return 0.0
        first, last = (self.work_of(key) for key in self.ends)
        engines = {t.engine for t in first.product if t.step.kind == "matrix"}
        if len(engines) != 1:
            return 0.0
        (engine,) = engines
        products = sum(n * t.step.cycles for key, n in self.counts.items() for t in self.work_of(key).product if t.engine == engine)
        lead = max((self._alone(t) for t in (*first.kept, *first.load) if t.engine != engine), default=0.0)
        finish = sum(t.step.cycles for t in last.finish if t.engine == engine and t.step.kind != "dma")
        store = max((self._alone(t) for t in last.store if t.engine != engine), default=0.0)
        return lead + products + finish + store

    def _alone(self, t: Timed) -> float:
        """The least time a Timed takes: a transfer's latency and bytes at the least bandwidth on its way."""
        step = t.step
        if step.kind != "dma":
            return step.cycles
        assert step.use is not None, "a transfer's Step names the memories it uses"
        return step.cycles + step.moved / min([step.rate] + [self.bandwidths[m] / k for m, k in step.use.items()])

    # ---- the replay -------------------------------------------------------------------------

    def cycles(self) -> float:
        if self._cycles is None:
            self._cycles = self._replay()
        return self._cycles

    def _replay(self) -> float:
        runs, repeats = self.runs(), REPEATS
        distinct = self.ctx.chip.cache is not None
        cores: Sequence[int | None] = self.cores or [None]
        while True:
            run = _Run(self)
            laid: list[tuple[list[list[Mark]], list[LoopEnds]]] = []
            for unit, tiles in enumerate(runs):
                if tiles:
                    steps: list[_Step] = []
                    loops: list[LoopEnds] = []
                    _expand(_nest(tiles, self.periods, distinct, repeats), steps, loops, 1)
                    laid.append((run.emit(steps, unit, cores[unit]), loops))
            run.run()
            total, settled = 0.0, True
            for marks, loops in laid:
                extra = 0.0
                for left, mult, ends in loops:
                    times = [run.ends(marks[i]) for i in ends[:-1]]  # the last position drains into what follows
                    left_out = _left_out(times, left)
                    if left_out is None and self.cores is not None and repeats >= JITTERED * REPEATS:
                        left_out = _jittered(times, left)
                    settled = settled and left_out is not None
                    extra += mult * max(left_out if left_out is not None else left * (times[-1] - times[-2]), 0.0)
                total = max(total, max(run.ends(m) for m in marks) + extra)
            if settled or not any(loops for _, loops in laid):
                return total
            repeats *= 2


def _left_out(times: list[float], left: int) -> float | None:
    """The time `left` more positions of a loop take once settled, from the ends of its
    positions run: once the last two positions' times are alike (within a rounding), or, for
    steps that rotate among k buffer slots (k up to CYCLE), the last three runs of k positions
    take the very same times, the positions left out repeat them; None until settled."""
    periods = [b - a for a, b in itertools.pairwise(times)]
    if len(periods) >= 2 and abs(periods[-1] - periods[-2]) <= max(1.0, 0.002 * periods[-1]):
        return left * periods[-1]
    for k in range(2, min(CYCLE, len(periods) // 3) + 1):
        if periods[-k:] == periods[-2 * k:-k] == periods[-3 * k:-2 * k]:
            return left // k * sum(periods[-k:]) + sum(periods[-k:][:left % k])
    return None


def _jittered(times: list[float], left: int) -> float:
    """The time `left` more positions of a loop take at the mean period of its positions run
    (the ends of at least two): for a loop whose periods jitter with other units' (module
    docstring)."""
    return left * (times[-1] - times[0]) / (len(times) - 1)


def _nest(tiles: Tiles, periods: list[int], distinct: bool, repeats: int) -> list[_Node]:
    """The tiles (each (signature, its steps)) as nodes (_Step, _Loop): at each loop level,
    more than `repeats` consecutive positions (chunks of periods[0] tiles) that do the same
    work are a loop of the first `repeats` of them; within a tile, more than `repeats` middle
    reduction blocks are. distinct: whether like steps differ by where they are (their keys
    carry their positions), so that each is laid out with its own."""
    p = periods[0]
    chunks = [tiles[i:i + p] for i in range(0, len(tiles), p)]
    out: list[_Node] = []
    nest: Callable[[Tiles], list[_Node]] = ((lambda chunk: _nest(chunk, periods[1:], distinct, repeats)) if len(periods) > 1
                                              else (lambda chunk: _blocks(chunk[0][1], repeats)))
    for _, like in itertools.groupby(chunks, key=lambda chunk: tuple(sig for sig, _ in chunk)):
        group = list(like)
        kept = group[:repeats] if len(group) > repeats else group
        bodies = [nest(chunk) for chunk in kept] if distinct else [nest(group[0])] * len(kept)
        if len(group) > repeats:
            out.append(_Loop(tuple(tuple(b) for b in bodies), len(group)))
        else:
            out.extend(node for body in bodies for node in body)
    return out


def _blocks(steps: list[_Step], repeats: int) -> list[_Node]:
    """A tile's steps, more than `repeats` like middle ones as a loop of the first `repeats`."""
    if len(steps) > repeats + 2:
        return [steps[0], _Loop(tuple((s,) for s in steps[1:1 + repeats]), len(steps) - 2), steps[-1]]
    return list(steps)


def _expand(nodes: Sequence[_Node], out: list[_Step], loops: list[LoopEnds] | None, mult: int) -> None:
    """Lay nodes out as steps in `out`, each loop's positions run; for the first instance of
    each loop, (positions left out, times it recurs, the index of each position's last step) in
    `loops` (None: not the first instance)."""
    for node in nodes:
        if isinstance(node, _Loop):
            ends = []
            for c, body in enumerate(node.bodies):
                _expand(body, out, loops if c == 0 else None, mult * node.positions)
                ends.append(len(out) - 1)
            if loops is not None:
                loops.append((node.positions - len(node.bodies), mult, ends))
        else:
            out.append(node)


class _Run(Observer):
    """Steps laid out in the pipeline's order as per-engine streams of Steps, with the waits
    the emitter would infer, run on the timing core."""

    def __init__(self, estimate: Estimate):
        self.estimate, chip = estimate, estimate.ctx.chip
        self.chip = chip
        self.streams: dict[str, list[Step | None]] = {}
        self.waits: dict[Mark, tuple[tuple[str, int], ...]] = {}
        self.clocks = Clocks(chip.engines)
        self.buffers: dict[tuple[Any, ...], _Buffer] = {}
        self.stages: dict[tuple[int, Hashable], list[_Buffer]] = {}  # (unit, memory) -> its staging buffers
        self.current: dict[Hashable, _Buffer] = {}  # memory -> the staging buffer the copy under way uses
        self.end: dict[Mark, float] = {}
        self.moved: dict[tuple[int, int], Timed] = estimate.__dict__.setdefault("_moved", {})  # (id of a Timed, core) -> it there

    def emit(self, steps: list[_Step], unit: int = 0, core: int | None = None) -> list[list[Mark]]:
        """Emit a unit's steps (the pipeline's order: with double buffering, step i + 1's loads
        before step i's product), on `core`'s engines and memories where given; returns per
        step the (engine, index) of its instructions."""
        est = self.estimate
        self.unit, self.core = unit, core
        double = est.slots > 1
        marks: list[list[Mark]] = [[] for _ in steps]
        where: list[Position] = []
        tile = fresh = -1
        for i, s in enumerate(steps):
            tile += s.first
            fresh += s.first and s.fresh
            where.append((i, tile, fresh))

        work = est.work_of
        def load(i: int) -> None:
            s, at = steps[i], where[i]
            w = work(s.key)
            self._part(w.kept, at, s, marks[i])
            self._part(w.load, at, s, marks[i])
            if s.first:
                self._part(w.fills, at, s, marks[i])

        def fill(i: int) -> None:
            if steps[i].first:
                self._part(work(steps[i].key).tail, where[i], steps[i], marks[i])

        if double and steps:
            load(0)
            fill(0)
        for i, s in enumerate(steps):
            if not double:
                load(i)
                fill(i)
            elif i + 1 < len(steps):
                load(i + 1)
            w = work(s.key)
            self._part(w.product, where[i], s, marks[i])
            if s.last:
                self._part(w.finish, where[i], s, marks[i])
            if double and i + 1 < len(steps):
                fill(i + 1)
            if s.last:
                self._part(w.store, where[i], s, marks[i])
        return marks

    def _part(self, timed: tuple[Timed, ...], at: Position, s: _Step, marks: list[Mark]) -> None:
        core, streams, clocks, buffer = self.core, self.streams, self.clocks, self._buffer
        for t in timed:
            if core is not None:
                t = self._on_core(t, core)
            engine = t.engine
            reads = [buffer(name, at, s, False) for name in t.reads]
            writes = [buffer(name, at, s, True, engine) for name in t.writes]
            stream = streams.setdefault(engine, [])
            need = clocks.need(engine, reads, writes)
            if need:
                self.waits[engine, len(stream)] = tuple(sorted(need.items()))
                stream.append(None)
                clocks.appended(engine)
                clocks.learn(engine, need)
            index = len(stream)
            stream.append(t.step)
            clocks.appended(engine)
            accessed(engine, index, reads, writes)
            marks.append((engine, index))

    def _buffer(self, name: Hashable, at: Position, s: _Step, written: bool, engine: str | None = None) -> _Buffer:
        """The buffer a role names for step s (at: its index, tile and kept-operand load)."""
        scope: str
        what: Any  # a role's name: a tensor's, a memory's, a buffer's
        scope, what = name if isinstance(name, tuple) and len(name) == 2 else ("fixed", name)
        est = self.estimate
        if scope == STAGE:
            if written:
                pool = self.stages.get((self.unit, what))
                if pool is None:
                    pool = self.stages[self.unit, what] = [_Buffer() for _ in range(est.stage_slots.get(what, STAGE_SLOTS))]
                assert engine is not None, "a staging buffer is written by an engine"
                self.current[what] = oldest(pool, engine)
            return self.current[what]
        # units write disjoint parts of what they share: no order between them
        if scope == STEP:
            key: tuple = (self.unit, scope, what, at[0] % est.slots)
        elif scope == TILE:
            key = (self.unit, scope, what, at[1] % est.tile_slots)
        elif scope == KEPT:
            key = (self.unit, scope, what, at[2] % est.slots)
        elif scope == PART:
            key = (self.unit, scope, what, at[2] % est.slots, s.block)
        else:
            key = (self.unit, scope, what)
        buf = self.buffers.get(key)
        if buf is None:
            buf = self.buffers[key] = _Buffer()
        return buf

    def run(self) -> float:
        est, chip = self.estimate, self.chip
        cache = None
        if chip.cache is not None:
            allocators = est.ctx.em.allocators
            accesses = 2 * sum(len(s) for s in self.streams.values())
            cache = Cache(chip.cache.name, chip.memories["ddr"].burst, allocators[chip.cache.name].free_bytes(), allocators["ddr"].peak + 1,
                          accesses)
        timeline = Timeline(chip, self.streams, self.waits, cache, est.replayed, observer=self)
        return timeline.run()

    def _on_core(self, t: Timed, core: int) -> Timed:
        """Unit 0's Timed on `core`: its engine and its core's memories renamed."""
        key = (id(t), core)
        moved = self.moved.get(key)
        if moved is None:
            assert self.estimate.cores is not None, "units on cores of their own name their cores"
            here = self.estimate.cores[0]
            rename = (lambda name: f"c{core}.{name[len(f'c{here}.'):]}" if name.startswith(f"c{here}.") else name)  # noqa: E731
            step = t.step
            if step.use is not None:
                step = step._replace(use={rename(m): k for m, k in step.use.items()}, src=rename(step.src), dst=rename(step.dst))
            else:
                step = step._replace(dst=rename(step.dst))
            moved = self.moved[key] = Timed(rename(t.engine), step, t.reads, t.writes)
        return moved

    def ends(self, marks: list[Mark]) -> float:
        return max((self.end.get(m, 0.0) for m in marks), default=0.0)

    def ended(self, engine: str, i: int, step: Step, start: float, end: float, note: str, cached: float) -> None:
        self.end[engine, i] = end


class _Buffer:
    """A buffer of the replay, for the sync rule: its last writer and its readers since."""

    __slots__ = ("reads", "section", "writes")

    def __init__(self) -> None:
        self.writes: dict[str, int] = {}
        self.reads: dict[str, int] = {}
        self.section: Any = None


def tiled(ctx: Lowering, work: Callable[..., Work], axes: Sequence[Sequence[tuple]], reduction: int, block: int, units: int,
          slots: int, repeat: int = 1, reuse: int | None = None, stage_slots: dict[str, int] | None = None, once: int | None = None,
          tile_slots: int | None = None, reuse_blocks: bool = False, cores: list[int] | None = None) -> Estimate:
    """The Estimate of a tiled op's steps on the first (busiest) of `units` units, the output
    tiles dealt among them in runs of consecutive ones (isa/lower/pipeline.deal).

    axes: per dimension of the output, a class per tile position in order, (start, ...): tiles
    whose classes but for their starts are alike in every dimension do the same work; repeat:
    how many times the whole grid of tiles is walked (groups, batch), outermost; each tile
    walks a reduction of `reduction` in blocks of `block`; work(kind, size, first, last, start):
    the Work of one step, kind the tuple of the tile's classes, size and start its block's. On
    a chip that caches DDR,
    where a step reads decides what hits: each position is then its own class (the caller's
    axes say so) and each block passes its start; elsewhere the start is 0.

    reuse: an operand that depends only on the tile's position along the first `reuse` axes
    (and the repeat) is loaded whole with a tile's first block and stays while consecutive
    tiles share it (a matrix product's left row block): the steps then carry one more argument
    for work and floor, fresh, whether they load it (a unit's first tile does); with
    reuse_blocks, block by block with every step of the tile that loads it (a convolution's
    input, channel block by channel block). stage_slots, once and tile_slots: Estimate's.

    cores: the core each unit runs on, where each unit has a core of its own: every unit's
    tiles then run, on its core's engines and memories, sharing DDR and the chip's cache of it
    as they do in the machine; without, the busiest unit's alone, with its share of the
    memories the units share."""
    grid = _Grid(axes, repeat, reduction, block, units, reuse, reuse_blocks, ctx.chip.cache is not None)

    def runs() -> list[Tiles]:
        """Each unit's tiles, (signature, steps) in order: the busiest unit's alone, or every
        unit's where `cores` names the core each runs on."""
        bounds = [(0, grid.mine)] if cores is None else [(sum(r), sum(r) + n) for r, n in _dealt(grid.count, units)]
        return [[((_signature(kind), fresh), grid.steps(kind, fresh)) for kind, fresh in grid.tiles(lo, hi)] for lo, hi in bounds]

    return Estimate(ctx, lambda k: work(*k), grid.counts(), runs, grid.periods, slots, tile_slots, stage_slots,
                    grid.count / grid.mine, once, grid.ends(), cores)


class _Grid:
    """tiled()'s walk: the output tiles (repeat, then one index per axis), each a run of
    reduction blocks, as steps with their keys; the busiest unit takes `mine` of the `count`
    tiles. The units share DDR in proportion to their tiles: the busiest has ceil(count / units)
    of them, and DDR moves every unit's bytes meanwhile."""

    def __init__(self, axes: Sequence[Sequence[tuple]], repeat: int, reduction: int, block: int, units: int, reuse: int | None,
                 reuse_blocks: bool, positions: bool) -> None:
        self.axes, self.repeat, self.block, self.units, self.reuse_blocks = axes, repeat, block, units, reuse_blocks
        self.reuse = reuse if reuse is not None else 0  # read only where reusing
        self.positions = positions  # a cache of DDR: where a block starts decides what hits
        self.reusing = reuse is not None
        self.count = repeat * math.prod(len(a) for a in axes)
        self.mine = -(-self.count // units)
        self.blocks = -(-reduction // block)
        self.edge = reduction - (self.blocks - 1) * block
        self.sizes = [repeat] + [len(a) for a in axes]
        self.periods = [math.prod(self.sizes[d + 1:]) for d in range(len(self.sizes))]

    def part(self, k: int) -> tuple[int, bool, bool, int]:
        """(size, first, last, start) of block k."""
        last = k == self.blocks - 1
        return (self.edge if last else self.block, k == 0, last, k * self.block if self.positions else 0)

    def key(self, kind: tuple, p: tuple, fresh: bool) -> StepKey:
        """A step's key: its tile's classes, its block, and where an operand is reused whether
        the step loads it."""
        return (kind,) + p + ((fresh and (p[1] or self.reuse_blocks),) if self.reusing else ())

    def tiles(self, lo: int = 0, hi: int | None = None) -> Iterator[tuple[tuple, bool]]:
        """(kind, fresh) of the tiles at positions lo..hi - 1 of a unit's run (default: the busiest's)."""
        before, reuse = None, self.reuse
        walk = itertools.product(range(self.repeat), *(range(len(a)) for a in self.axes))
        for at in itertools.islice(walk, lo, self.mine if hi is None else hi):
            shared = at[:1 + reuse] if self.reusing else None
            yield tuple(a[i] for a, i in zip(self.axes, at[1:])), shared is None or shared != before
            before = shared

    def steps(self, kind: tuple, fresh: bool) -> list[_Step]:
        last = self.blocks - 1
        return [_Step(self.key(kind, self.part(k), fresh), k, k == 0, k == last, fresh) for k in range(self.blocks)]

    def counts(self) -> dict[StepKey, int]:
        """step key -> how many steps do it, for the bounds: steps counted by what they do, each
        kind of tile at its first position (where it is matters only to a replay's cache)."""
        axes, repeat, reuse, blocks = self.axes, self.repeat, self.reuse, self.blocks
        reps: list[dict[tuple, tuple]] = [{} for _ in axes]
        canon = [[reps[d].setdefault(c[1:], c) for c in a] for d, a in enumerate(axes)]
        kinds: dict[tuple[tuple, bool], int]
        if self.units > 1:
            kinds = collections.Counter((tuple(reps[d][c[1:]] for d, c in enumerate(kind)), fresh) for kind, fresh in self.tiles())
        else:  # the classes per dimension combined in every way, without walking every tile
            per_axis = [collections.Counter(a) for a in canon]
            kinds = {}
            for kind in itertools.product(*per_axis):
                n = repeat * math.prod(c[k] for c, k in zip(per_axis, kind))
                # fresh: the tiles first along every axis past `reuse`
                fresh = n if not self.reusing else repeat * math.prod(per_axis[d][k] for d, k in enumerate(kind[:reuse])) * all(
                    k == canon[d][0] for d, k in enumerate(kind) if d >= reuse)
                kinds[kind, True] = fresh
                kinds[kind, False] = n - fresh
        counts: dict[StepKey, int] = {}
        for (kind, fresh), n in kinds.items():
            for k in {0, min(1, blocks - 1), blocks - 1}:
                repeats = blocks - 2 if 0 < k < blocks - 1 else 1
                if n and repeats:
                    step = self.key(kind, self.part(k)[:3] + (0,), fresh)
                    counts[step] = counts.get(step, 0) + n * repeats
        return counts

    def at(self, i: int) -> tuple[tuple, bool]:
        """The tile of the unit's i-th position: (kind, fresh)."""
        here = [i // p % n for p, n in zip(self.periods, self.sizes)]
        before = [(i - 1) // p % n for p, n in zip(self.periods, self.sizes)] if i else None
        fresh = not self.reusing or before is None or here[:1 + self.reuse] != before[:1 + self.reuse]
        return tuple(a[j] for a, j in zip(self.axes, here[1:])), fresh

    def ends(self) -> tuple[StepKey, StepKey]:
        """The keys of the busiest unit's first and last step."""
        return self.steps(*self.at(0))[0].key, self.steps(*self.at(self.mine - 1))[-1].key


def _dealt(count: int, units: int) -> list[tuple[list[int], int]]:
    """(the sizes of the runs before, this run's size) of `count` tiles dealt among `units`
    units in runs of consecutive ones, as pipeline.deal deals them."""
    size, extra = divmod(count, units)
    sizes = [size + (k < extra) for k in range(units)]
    return [(sizes[:k], n) for k, n in enumerate(sizes)]


def _signature(kind: tuple) -> tuple:
    """What a tile of classes `kind` does, wherever it is: its classes but for their starts."""
    return tuple(c[1:] for c in kind)
