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

import collections
from collections.abc import Callable

import simpy

from ..errors import DeadlockError
from .bandwidth import Arbiter
from .cache import Cache
from .price import Step

Ident = tuple[str, int]  # (engine, index in its stream)


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


class Timeline:
    """One run of per-engine streams (a Step per instruction, None for a wait) with the waits
    {(engine, index of a wait): the (engine, index) it waits on}, on `chip` (its memories'
    bandwidths, or `bandwidths` where given, and its engines' in-flight depths)."""

    def __init__(self, chip, steps: dict, waits: dict, cache: Cache | None = None, bandwidths: dict | None = None,
                 observer: Observer | None = None):
        self.chip, self.steps, self.waits, self.cache = chip, steps, waits, cache
        self.observer = observer or Observer()
        self.env = simpy.Environment()
        self.arbiter = Arbiter(self.env, bandwidths or {m.name: m.bandwidth for m in chip.memories.values()})
        self.pc = dict.fromkeys(steps, 0)  # engine -> the Step it stands at (its stream's length once done)

    def run(self, describe: Callable[[str, int], str] | None = None) -> float:
        """Run to the end; the cycle it ends at. describe(engine, i) words a stuck Step for the
        DeadlockError (default "engine.i")."""
        env, finished = self.env, {}
        for on in self.waits.values():
            for ident in on:
                if ident not in finished:
                    finished[ident] = env.event()
        self.finished = finished
        mine = {e: {} for e in self.steps}  # engine -> {index: the event its waiters wait on}
        for (e, i), ev in finished.items():
            mine[e][i] = ev
        for e, stream in self.steps.items():
            on = {i: [finished[ident] for ident in self.waits[e, i]] for i, s in enumerate(stream) if s is None}
            env.process(self._engine(e, stream, on, mine[e]))
        env.run()
        self._check_finished(describe or (lambda e, i: f"{e}.{i}"))
        return env.now

    def _engine(self, name, stream, waits, finished):
        env, observer = self.env, self.observer
        timeout, transfer = env.timeout, self.arbiter.transfer
        started, ended = observer.started, observer.ended
        depth = self.chip.engines[name].in_flight
        watched = observer.watched.get(name, ())
        flight = _Flight(env, depth, transfer)
        through_cache = self.cache is not None and self._through_cache

        def done(i, step, start, note, cached=0.0):
            ended(name, i, step, start, env.now, note, cached)
            if i in finished:
                finished[i].succeed()

        clock = None  # the quiet run's end so far
        last = len(stream) - 1
        for i, step in enumerate(stream):
            if step is not None and step.kind == "dma" and depth > 1:
                yield from flight.room()
            start = env.now if clock is None else clock
            if step is None:  # a wait: only a wait can block forever, so pc is kept here
                pending = [ev for ev in waits[i] if not ev.triggered]
                if pending:
                    self.pc[name] = i
                    yield env.all_of(pending) if len(pending) > 1 else pending[0]
                    observer.waited(name, i, start, env.now)
                if i in finished:
                    finished[i].succeed()
                continue
            note = started(name, i, start)
            if step.kind != "dma":
                after = stream[i + 1] if i < last else None
                if after is not None and after.kind != "dma" and i not in finished and i not in watched:
                    clock = start + step.cycles
                    ended(name, i, step, start, clock, note, 0.0)
                    continue
                yield timeout(step.cycles if clock is None else start + step.cycles - env.now)
                clock = None
                done(i, step, start, note)
                continue
            use, cached = through_cache(step) if through_cache else (step.use, 0.0)
            if step.cycles:
                yield timeout(step.cycles)
            if depth > 1:  # the bytes move once the transfers before have moved theirs
                flight.send(step, use, cached, lambda after, i=i, step=step, start=start, note=note, cached=cached:
                            done(i, step, max(start, after), note, cached))
                continue
            yield transfer(step.moved, step.rate, use, step.src, step.dst, cached, step.shares)
            done(i, step, start, note, cached)
        yield from flight.drain()
        self.pc[name] = len(stream)

    def _through_cache(self, step):
        """(port use, share of the bytes the cache serves) of a transfer starting now: the ddr
        bytes the cache holds are read from the cache's memory instead; what it writes to ddr the
        cache keeps too."""
        cache, use = self.cache, step.use
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

    def _check_finished(self, describe):
        stuck = []
        for e, stream in self.steps.items():
            i = self.pc[e]
            if i < len(stream):
                waiting = [f"{a}.{k}" for a, k in self.waits.get((e, i), ()) if not self.finished[a, k].triggered]
                stuck.append(f"{describe(e, i)} (waiting for {', '.join(waiting)})")
        if stuck:
            raise DeadlockError(f"deadlock at cycle {int(self.env.now)}: no engine can proceed; stuck: " + "; ".join(stuck))


class _Flight:
    """A DMA engine's transfers in flight, when it keeps several (`Engine.in_flight`): a
    transfer's fixed latency runs while the ones before it move their bytes; the bytes of
    each move in order, after the previous transfer's, through the shared-bandwidth arbiter;
    a new transfer starts only while fewer than `depth` are in flight."""

    def __init__(self, env, depth, transfer):
        self.env, self.depth, self.transfer = env, depth, transfer
        self.moving = collections.deque()  # completion events, oldest first
        self.last_end = 0.0  # when the latest finished transfer ended

    def room(self):
        """Wait (a generator to yield from) until another transfer may start."""
        while self.moving and self.moving[0].processed:
            self.moving.popleft()
        if len(self.moving) >= self.depth:
            yield self.moving.popleft()

    def send(self, step, use, cached, done):
        """Move the step's bytes once the previous transfer has moved its own; then done(after),
        after the cycle the previous transfer ended (an event in the trace starts no earlier, so
        an engine's events do not overlap)."""
        finished = self.env.event()
        before = self.moving[-1] if self.moving else None

        def begin(_=None):
            after = self.last_end
            moved = self.transfer(step.moved, step.rate, use, step.src, step.dst, cached, step.shares)
            moved.callbacks.append(lambda _: self._end(after, done, finished))

        if before is None or before.processed:
            begin()
        else:
            before.callbacks.append(begin)
        self.moving.append(finished)

    def _end(self, after, done, finished):
        self.last_end = self.env.now
        done(after)
        finished.succeed()

    def drain(self):
        if self.moving and not self.moving[-1].processed:
            yield self.moving[-1]
