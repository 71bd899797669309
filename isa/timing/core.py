"""The engine loop: per-engine streams of priced Steps run as SimPy processes, the one model of
time the machine (sim/machine.py) and the lowering's estimate (isa/lower/schedule/estimate.py) share.

Each engine runs its stream in order; the only order between engines is what the waits say (a
wait holds its engine until the instructions it names have finished). A compute Step holds its
engine for its cycles. A transfer spends its latency, then moves its bytes through the
shared-bandwidth arbiter (isa/timing/bandwidth.py): transfers that overlap share each memory's
bandwidth. A DMA engine that keeps several transfers in flight (`Engine.in_flight`) starts the
next one's latency while the ones before it move their bytes (`_Flight`). On a chip with a
cache of ddr (isa/timing/cache.py) a transfer learns when it starts which of its ddr lines the
cache holds, and reads those from the cache's memory instead.

A compute Step nobody waits on, followed by another compute Step, is spent without stopping
SimPy: the engine's clock runs ahead of env.now over such a quiet run, its times added up as
SimPy would add them, and the run's last Step brings env.now to its end in one timeout. Nothing
can observe the run in between: no other engine waits on it and it waits on nothing.

A run that stops with Steps left has deadlocked: `DeadlockError` names where each engine stands.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Container, Generator
from typing import TYPE_CHECKING

import simpy
from simpy.events import Event

from ..errors import DeadlockError
from .bandwidth import Arbiter
from .cache import Cache
from .price import Step

if TYPE_CHECKING:
    from chips.schema import Chip

Ident = tuple[str, int]  # (engine, index in its stream)
Stream = list[Step | None]  # an engine's Steps, None for a wait
Process = Generator[Event, object, None]  # a SimPy process: the events it waits on
Done = Callable[[float], None]  # what a transfer in flight calls with the cycle the one before it ended
Started = Callable[[int, float], str]  # Observer.started of one engine: (index, cycle) -> note
Ended = Callable[[int, Step, float, float, str, float], None]  # Observer.ended of one engine: (index, step, start, end, note, cached)


class Observer:
    """What a run's caller sees of it; the default sees nothing (the estimate's case).

    started(engine, i, now) is called as Step i starts (the machine computes there and opens the
    buffers it places) and returns a note for the trace or ""; ended(engine, i, step, start, end,
    note, cached) as it ends (or, in a quiet run, with the end it will have); waited(engine, i,
    start, end) as a wait that blocked ends. `watched[engine]` are Steps whose end must fall at
    its own cycle (the machine closes buffers there), as if someone waited on them."""

    watched: dict = {}  # noqa: RUF012 - read only; the machine sets its own per instance

    def started(self, engine: str, i: int, now: float) -> str:
        return ""

    def ended(self, engine: str, i: int, step: Step, start: float, end: float, note: str, cached: float) -> None:
        pass

    def waited(self, engine: str, i: int, start: float, end: float) -> None:
        pass

    def bind(self, engine: str, n: int) -> tuple[Container[int], Started, Ended]:
        """What a run of engine's n Steps calls: the indices whose start the observer sees (the
        others' notes are ""), and `started` and `ended` with the engine given. By default
        every Step's start, or none where `started` is this class's; an observer called for
        every Step binds its own per engine, with that engine's tables at hand."""
        starts: Container[int] = () if type(self).started is Observer.started else range(n)
        return starts, functools.partial(self.started, engine), functools.partial(self.ended, engine)


class Timeline:
    """One run of per-engine streams (a Step per instruction, None for a wait) with the waits
    {(engine, index of a wait): the (engine, index) it waits on}, on `chip` (its memories'
    bandwidths, or `bandwidths` where given, and its engines' in-flight depths)."""

    def __init__(self, chip: Chip, steps: dict[str, Stream], waits: dict[Ident, tuple[Ident, ...]], cache: Cache | None = None,
                 bandwidths: dict[str, float] | None = None, observer: Observer | None = None) -> None:
        self.chip, self.steps, self.waits, self.cache = chip, steps, waits, cache
        self.observer = observer or Observer()
        self.env = simpy.Environment()
        self.arbiter = Arbiter(self.env, bandwidths or {m.name: m.bandwidth for m in chip.memories.values()})
        self.pc = dict.fromkeys(steps, 0)  # engine -> the Step it stands at (its stream's length once done)

    def run(self, describe: Callable[[str, int], str] | None = None) -> float:
        """Run to the end; the cycle it ends at. describe(engine, i) words a stuck Step for the
        DeadlockError (default "engine.i")."""
        env: simpy.Environment = self.env
        # the instructions a wait names that have finished, and those not finished that a blocked wait
        # waits on -> the event it waits for: none is made (or scheduled) for an instruction no wait blocks on
        self.finished: set[Ident] = set()
        self.wanted: dict[Ident, Event] = {}
        targets: dict[str, set[int]] = {e: set() for e in self.steps}  # engine -> its instructions some wait names
        blocks: dict[str, dict[int, tuple[Ident, ...]]] = {e: {} for e in self.steps}  # engine -> {index of a wait: what it waits on}
        for (e, i), on in self.waits.items():
            blocks[e][i] = on
            for a, k in on:
                targets[a].add(k)
        for e, stream in self.steps.items():
            env.process(self._engine(e, stream, blocks[e], targets[e]))
        env.run()
        self._check_finished(describe or (lambda e, i: f"{e}.{i}"))
        return env.now

    def _engine(self, name: str, stream: Stream, waits: dict[int, tuple[Ident, ...]], targets: set[int]) -> Process:
        env, observer, timeout, fire = self.env, self.observer, self.env.timeout, self._fire
        transfer: Callable[..., Event] = self.arbiter.transfer  # given a Step's fields as they are
        starts, started, ended = observer.bind(name, len(stream))
        waited, depth = observer.waited, self.chip.engines[name].in_flight
        watched, flight = observer.watched.get(name, ()), _Flight(env, depth, transfer)
        through_cache = self.cache is not None and self._through_cache

        def done(i: int, step: Step, start: float, note: str, cached: float = 0.0) -> None:
            ended(i, step, start, env.now, note, cached)
            if i in targets:
                fire((name, i))

        def landed(i: int, step: Step, start: float, note: str, cached: float, after: float) -> None:
            """A transfer in flight has moved its bytes; its event starts no earlier than `after`."""
            done(i, step, max(start, after), note, cached)

        clock = None  # the quiet run's end so far (only ever set before a compute Step)
        last = len(stream) - 1
        for i, step in enumerate(stream):
            if step is None:  # a wait: only a wait can block forever, so pc is kept here
                pending = self._blocking(waits[i])
                if pending:  # it blocks until they have fired
                    self.pc[name], begun = i, env.now
                    yield env.all_of(pending) if len(pending) > 1 else pending[0]
                    waited(name, i, begun, env.now)
                if i in targets:
                    fire((name, i))
                continue
            if step.kind != "dma":
                start = env.now if clock is None else clock
                note = started(i, start) if i in starts else ""
                if i < last and i not in targets and i not in watched and (after := stream[i + 1]) is not None and after.kind != "dma":
                    clock = start + step.cycles
                    ended(i, step, start, clock, note, 0.0)
                    continue
                yield timeout(step.cycles if clock is None else start + step.cycles - env.now)
                clock = None
                done(i, step, start, note)
                continue
            if depth > 1 and (full := flight.room()) is not None:
                yield full
            start = env.now
            note = started(i, start) if i in starts else ""
            use, cached = through_cache(step) if through_cache else (step.use, 0.0)
            if step.cycles:
                yield timeout(step.cycles)
            if depth > 1:  # the bytes move once the transfers before have moved theirs
                flight.send(step, use, cached, functools.partial(landed, i, step, start, note, cached))
                continue
            yield transfer(step.moved, step.rate, use, step.src, step.dst, cached, step.shares)
            done(i, step, start, note, cached)
        if (drained := flight.drain()) is not None:
            yield drained
        self.pc[name] = len(stream)

    def _blocking(self, on: tuple[Ident, ...]) -> list[Event]:
        """What a wait on `on` blocks on: an event for each instruction not finished, shared with
        the other waits on it."""
        wanted = self.wanted
        return [wanted.get(ident) or wanted.setdefault(ident, self.env.event()) for ident in on if ident not in self.finished]

    def _fire(self, ident: Ident) -> None:
        """Instruction `ident`, which a wait names, has finished: the waits blocked on it go on."""
        self.finished.add(ident)
        if (ev := self.wanted.pop(ident, None)) is not None:
            ev.succeed()

    def _through_cache(self, step: Step) -> tuple[dict[str, float], float]:
        """(port use, share of the bytes the cache serves) of a transfer starting now: the ddr
        bytes the cache holds are read from the cache's memory instead; what it writes to ddr the
        cache keeps too."""
        cache, use = self.cache, step.use
        assert cache is not None and use is not None and step.shares is not None  # a transfer's, on a chip with a cache
        hit = cache.access(step.read) * step.shares[0] if step.read is not None else 0.0
        if step.write is not None:
            cache.access(step.write)
        if not hit:
            return use, 0.0
        use = dict(use)
        use["ddr"] -= hit
        if not use["ddr"]:
            del use["ddr"]
        use[cache.memory] = use.get(cache.memory, 0) + hit
        return use, hit

    def _check_finished(self, describe: Callable[[str, int], str]) -> None:
        stuck = []
        for e, stream in self.steps.items():
            i = self.pc[e]
            if i < len(stream):
                waiting = [f"{a}.{k}" for a, k in self.waits.get((e, i), ()) if (a, k) not in self.finished]
                stuck.append(f"{describe(e, i)} (waiting for {', '.join(waiting)})")
        if stuck:
            raise DeadlockError(f"deadlock at cycle {int(self.env.now)}: no engine can proceed; stuck: " + "; ".join(stuck))


class _Flight:
    """A DMA engine's transfers in flight, when it keeps several (`Engine.in_flight`): a
    transfer's fixed latency runs while the ones before it move their bytes; the bytes of
    each move in order, after the previous transfer's, through the shared-bandwidth arbiter;
    a new transfer starts only while fewer than `depth` are in flight."""

    def __init__(self, env: simpy.Environment, depth: int, transfer: Callable[..., Event]) -> None:
        self.env, self.depth, self.transfer = env, depth, transfer
        self.moving: collections.deque[Event] = collections.deque()  # completion events, oldest first
        self.last_end = 0.0  # when the latest finished transfer ended

    def room(self) -> Event | None:
        """What to wait on before another transfer may start; None: it may start now."""
        moving = self.moving
        while moving and moving[0].processed:
            moving.popleft()
        return moving.popleft() if len(moving) >= self.depth else None

    def send(self, step: Step, use: dict[str, float] | None, cached: float, done: Done) -> None:
        """Move the step's bytes once the previous transfer has moved its own; then done(after),
        after the cycle the previous transfer ended (an event in the trace starts no earlier, so
        an engine's events do not overlap)."""
        finished = self.env.event()
        before = self.moving[-1] if self.moving else None

        def begin(_: object = None) -> None:
            after = self.last_end
            moved = self.transfer(step.moved, step.rate, use, step.src, step.dst, cached, step.shares)
            moved.callbacks.append(lambda _: self._end(after, done, finished))

        if before is None or before.processed:
            begin()
        else:
            before.callbacks.append(begin)
        self.moving.append(finished)

    def _end(self, after: float, done: Done, finished: Event) -> None:
        self.last_end = self.env.now
        done(after)
        finished.succeed()

    def drain(self) -> Event | None:
        """What to wait on until the last transfer has moved its bytes; None: it has."""
        return self.moving[-1] if self.moving and not self.moving[-1].processed else None
