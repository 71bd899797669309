"""The SimPy machine: memories and engines built from a Chip, running a Program.

Each engine is a SimPy process executing its stream in order; the only order between engines
is what `wait` instructions say. In functional mode an instruction moves or computes bytes
when it starts (its inputs are final then: the waits guarantee it) and holds its engine for
its cost (a DMA engine that keeps several transfers in flight moves on to the next one's
latency while this one's bytes move); timing mode spends the same costs without touching
bytes, so both modes give the same cycles. A run that stops with instructions left has
deadlocked and says where. On a chip with a cache of ddr (sim/cache.py) a DMA transfer learns
when it starts which of its ddr bytes the cache holds, and reads those on chip.
"""

import collections
from dataclasses import dataclass

import numpy as np
import simpy

from isa import dtypes
from isa.costs import engine_cap
from isa.errors import DeadlockError, InputError, ProgramError
from isa.instructions import REDUCTIONS, TABLE_OPERANDS, VECTOR_FNS, IndexedDma, Wait, instr_text, regions
from traces.occupancy import memory_counters
from traces.records import BufferSpan, Event, Sync, Trace

from .bandwidth import Arbiter
from .bounds import check_run
from .cache import Cache
from .engines import dma, matrix, scalar, vector
from .feeds import as_input
from .memory import Memory, check_region
from .peaks import peak_ops

@dataclass
class Run:
    """What a run of a program produced."""

    outputs: dict  # output name -> numpy array (empty in timing mode)
    cycles: int
    trace: Trace


class Machine:
    def __init__(self, chip, program, mode="functional"):
        if mode not in ("functional", "timing"):
            raise ProgramError(f"mode must be 'functional' or 'timing', got {mode!r}")
        self.chip, self.program, self.functional = chip, program, mode == "functional"
        extents, self.costs, self.waits = _check(chip, program)
        check_run(chip, program, extents, self.functional)
        self.extents = extents
        self.memories = {name: Memory(chip.memories[name], extents.get(name, 0), self.functional) for name in chip.memories}

    # ---- data in and out --------------------------------------------------------------------

    def load(self, inputs):
        """Write constants (each in its binding's memory: DDR, or on chip where the policy pinned
        it) and the given inputs into place. Inputs are checked against the bindings in both
        modes; timing mode needs none and writes nothing."""
        given = inputs is not None
        inputs = dict(inputs or {})
        for b in self.program.bindings:
            memory = self.memories[b.region.mem]
            if b.role == "const" and self.functional:
                memory.view(b.region).reshape(-1).view(np.uint8)[...] = np.frombuffer(b.data, np.uint8)
            elif b.role == "input" and (given or self.functional):
                if b.name not in inputs:
                    raise InputError(f"input {b.name!r} ({b.region.dtype}{list(b.region.shape)}) was not given")
                value = as_input(b.name, inputs.pop(b.name), b.region)
                if self.functional:
                    memory.write(b.region, value)
        if inputs:
            known = [b.name for b in self.program.bindings if b.role == "input"]
            raise InputError(f"unknown input(s) {', '.join(sorted(inputs))}; the program's inputs are {', '.join(known)}")

    def outputs(self):
        """Each output's values; one a kernel filled only in part has the shape it produced."""
        if not self.functional:
            return {}
        memories, produced = self.memories, self.produced  # what a kernel produced is in ddr
        return {b.name: memories[b.region.mem].read(b.region)[: produced[b.region.addr][0]]
                if b.region.mem == "ddr" and b.region.addr in produced else memories[b.region.mem].read(b.region)
                for b in self.program.bindings if b.role == "output"}

    # ---- running ----------------------------------------------------------------------------

    def run(self, inputs=None):
        self.load(inputs)
        env = self.env = simpy.Environment()
        bw = {m.name: m.bandwidth for m in self.chip.memories.values()}
        self.arbiter = Arbiter(env, bw)
        self.cache = _cache(self.chip, self.program, self.extents)
        self.events = []
        self.produced = {}  # DDR address -> the shape a kernel produced there, when not its region's
        self.pc = {e: 0 for e in self.program.streams}
        self.finished = {}  # (engine, index) -> simpy event, for the instructions someone waits on
        waits = {e: {} for e in self.program.streams}  # engine -> {index of a wait: the events it waits on}
        syncs = []
        finished = self.finished
        for (e, i), on in self.waits.items():
            for ident in on:
                if ident not in finished:
                    finished[ident] = env.event()
            waits[e][i] = [finished[ident] for ident in on]
            syncs.append(Sync(e, i, on))
        self.occupancy = _Occupancy(self.program)
        waited = {e: {} for e in self.program.streams}  # engine -> {index: the event its waiters wait on}
        for (e, i), ev in self.finished.items():
            waited[e][i] = ev
        for e, stream in self.program.streams.items():
            env.process(self._engine(e, stream, waits[e], waited[e]))
        env.run()
        self._check_finished()
        cycles = int(np.ceil(env.now))
        trace = Trace(self.chip.name, self.chip.clock_hz, tuple(self.program.streams), {m.name: m.capacity for m in self.chip.memories.values()}, cycles, self.events,
                      syncs=syncs, buffers=self.occupancy.spans(cycles), ddr_bandwidth=self.chip.memories["ddr"].bandwidth, peak_ops=peak_ops(self.chip),
                      host_memory="" if self.chip.data_memory == "ddr" else self.chip.data_memory)
        trace.counters.update(memory_counters(trace.buffers, trace.memories))
        trace.counters["ddr.read"], trace.counters["ddr.write"] = self.arbiter.read, self.arbiter.write
        return Run(self.outputs(), cycles, trace)

    def _engine(self, name, stream, waits, finished):
        env, record, steps = self.env, self.events.append, self.costs[name]
        timeout, transfer = env.timeout, self.arbiter.transfer
        depth = self.chip.engines[name].in_flight
        occupancy, execute, memories = self.occupancy, self.functional and _EXECUTE, self.memories
        opens, closes = occupancy.opens.get(name, {}), occupancy.closes.get(name, {})
        flight = _Flight(env, depth, transfer)
        through_cache = self.cache is not None and self._through_cache

        def settle(i):
            """Instruction i is over: the buffers it last used close, its waiters go on."""
            if i in closes:
                occupancy.close(closes[i], env.now)
            if i in finished:
                finished[i].succeed()

        def done(i, instr, start, step, note, cached=0.0):
            kind, _, _, _, fn, nbytes, src, dst, ops, _, _ = step
            record(Event(name, i, kind, fn, instr.op, start, env.now, nbytes, src, dst, note, ops, round(cached * nbytes) if cached else 0))
            settle(i)

        # A compute instruction nobody waits on, followed by another, is recorded without
        # stopping SimPy: `clock` runs ahead of env.now over such a quiet run, its times added
        # up as SimPy would, and the run's last instruction brings env.now to its end in one
        # timeout. Nothing can observe the run in between: no other engine waits on it, and it
        # waits on nothing.
        clock = None  # the quiet run's end so far
        last = len(stream) - 1
        for i, instr in enumerate(stream):
            step = steps[i]
            if step is not None and step[0] == "dma" and depth > 1:
                yield from flight.room()
            start = env.now if clock is None else clock
            if i in opens:
                occupancy.open(opens[i], start)
            if step is None:  # a wait: only a wait can block forever, so pc is kept here
                pending = [ev for ev in waits[i] if not ev.triggered]
                if pending:
                    self.pc[name] = i
                    yield env.all_of(pending) if len(pending) > 1 else pending[0]
                    record(Event(name, i, "wait", "wait", instr.op, start, env.now, 0, "", ""))
                settle(i)
                continue
            note = ""
            if execute:
                partial = execute[instr.kind](instr, memories)
                if partial:
                    note = self._produced(partial)
            kind, cycles, moved, use = step[:4]
            if kind != "dma":
                after = steps[i + 1] if i < last else None
                if after is not None and after[0] != "dma" and i not in finished and i not in closes:
                    clock = start + cycles
                    record(Event(name, i, kind, step[4], instr.op, start, clock, step[5], step[6], step[7], note, step[8]))
                    continue
                yield timeout(cycles if clock is None else start + cycles - env.now)
                clock = None
                done(i, instr, start, step, note)
                continue
            shares, rate = step[9], step[10]
            use, cached = through_cache(instr, use, shares[0]) if through_cache else (use, 0.0)
            if cycles:
                yield timeout(cycles)
            if depth > 1:  # the bytes move once the transfers before have moved theirs
                flight.send(moved, rate, use, step[6], step[7], cached, shares, lambda after, i=i, instr=instr, start=start, step=step, note=note, cached=cached:
                            done(i, instr, max(start, after), step, note, cached))
                continue
            yield transfer(moved, rate, use, step[6], step[7], cached, shares)
            done(i, instr, start, step, note, cached)
        yield from flight.drain()
        self.pc[name] = len(stream)

    def _through_cache(self, instr, use, read):
        """(port use, share of the bytes the cache serves) of a DMA transfer starting now, `read`
        its share of the bytes read: the ddr bytes the cache holds are read from the cache memory
        instead; what it writes to ddr the cache keeps too."""
        cache = self.cache
        if isinstance(instr, IndexedDma):
            return use, 0.0
        hit = cache.access(instr.src) * read if instr.src.mem == "ddr" else 0.0
        if instr.dst.mem == "ddr":
            cache.access(instr.dst)
        if not hit:
            return use, 0.0
        use = dict(use)
        use["ddr"] -= hit
        if not use["ddr"]:
            del use["ddr"]
        use[cache.memory] = use.get(cache.memory, 0) + hit
        return use, hit

    def _produced(self, partial):
        for region, shape in partial:
            if region.mem == "ddr":
                self.produced[region.addr] = shape
        return "; ".join(f"produced {list(shape)} of at most {list(region.shape)}" for region, shape in partial)

    def _check_finished(self):
        stuck = []
        for e, stream in self.program.streams.items():
            i = self.pc[e]
            if i < len(stream):
                instr = stream[i]
                waiting = [ident for ident in getattr(instr, "on", ()) if not self.finished[_parse_id(ident)].triggered]
                stuck.append(f"{instr_text(f'{e}.{i}', instr)} (waiting for {', '.join(waiting)})")
        if stuck:
            raise DeadlockError(f"deadlock at cycle {int(self.env.now)}: no engine can proceed; stuck: " + "; ".join(stuck))


def _cache(chip, program, extents):
    """The run's Cache of ddr, on a chip that has one: it holds lines in what the program
    leaves free of its memory."""
    memory = chip.cache
    if memory is None:
        return None
    accesses = 2 * sum(len(stream) for stream in program.streams.values())  # a ddr -> ddr copy reads and writes
    return Cache(memory.name, chip.memories["ddr"].burst, memory.capacity - extents.get(memory.name, 0), extents.get("ddr", 0), accesses)


_EXECUTE = {"dma": dma.execute, "vector": vector.execute, "matrix": matrix.execute, "scalar": scalar.execute}


def _step(chip, engine, instr, where):
    """Check that engine can run instr and work out, once, what the engine loop needs of it:
    (kind, cycles or DMA latency, DMA bytes moved, DMA port use, trace name, trace bytes, src, dst,
    arithmetic ops, and for a DMA the (read, written) shares of its bytes and the rate its engine allows)."""
    kind = instr.kind
    if kind not in engine.kinds:
        raise ProgramError(f"engine {engine.name} is not a {kind} engine (it is {', '.join(engine.kinds)}): {instr_text('?', instr)}")
    if kind == "dma":
        if (instr.src.mem, instr.dst.mem) not in engine.links:
            raise ProgramError(f"engine {engine.name} has no link {instr.src.mem}->{instr.dst.mem}: {instr_text('?', instr)}")
        if getattr(instr, "fn", "") and instr.fn not in engine.converts:
            can = f"it converts with {', '.join(engine.converts)}" if engine.converts else "it converts nothing"
            raise ProgramError(f"engine {engine.name} does not convert with {instr.fn} ({can}): {instr_text('?', instr)}")
        moved = dma.bytes_moved(instr, chip)
        name = ("scatter" if instr.scatter else "gather") if isinstance(instr, IndexedDma) else f"dma.{instr.fn}" if instr.fn else "dma"
        shares = dma.shares(instr)
        return ("dma", dma.latency(instr, chip, engine), moved, dma.port_use(instr, shares), name, instr.dst.nbytes, instr.src.mem, instr.dst.mem, 0,
                shares[:2], engine_cap(engine.rate(instr.src.mem, instr.dst.mem), shares))
    if kind == "scalar":
        nbytes = sum(r.nbytes for r in instr.dsts)
        return ("scalar", scalar.cycles(instr, engine, where), 0, None, instr.fn, nbytes, "ddr", "ddr", 0, None, None)
    if kind == "vector":
        dtype = vector.cost_dtype(instr)
        if dtype not in engine.vector.per_lane:
            raise ProgramError(f"engine {engine.name}: the vector unit has no throughput for dtype {dtype} (per_lane: {', '.join(engine.vector.per_lane)})")
        return ("vector", vector.cycles(instr, engine.vector, engine.issue_latency), 0, None, instr.fn, instr.dst.nbytes, "", instr.dst.mem, vector.elements(instr),
                None, None)
    if instr.a.dtype not in engine.matrix.block_cycles:
        raise ProgramError(f"engine {engine.name}: the matrix unit has no block_cycles for dtype {instr.a.dtype}")
    M, K, N = instr.dims()
    return ("matrix", matrix.cycles(instr, engine.matrix, engine.issue_latency), 0, None, "matmul", instr.c.nbytes, "", instr.c.mem, 2 * M * K * N, None, None)


def _parse_id(ident):
    engine, _, index = ident.rpartition(".")
    return engine, int(index)


def _is_instruction(program, ident):
    engine, index = _parse_id(ident)
    return engine in program.streams and 0 <= index < len(program.streams[engine])


def _check(chip, program):
    """Static checks of a program against a chip; returns the bytes used per memory, each
    engine's list of loop steps (see _step; None for a wait) and {(engine, index) of a wait:
    the (engine, index) it waits on}. Tiles repeat their local-memory instructions, so each
    distinct instruction of an engine is checked and priced once."""
    extents, costs, waits = {}, {}, {}
    lengths = {e: len(stream) for e, stream in program.streams.items()}
    for e, stream in program.streams.items():
        if e not in chip.engines:
            raise ProgramError(f"program engine {e!r} is not on chip {chip.name} (engines: {', '.join(chip.engines)})")
        known, costs[e] = {}, []
        for i, instr in enumerate(stream):
            if isinstance(instr, Wait):
                on = waits[e, i] = tuple(_parse_id(ident) for ident in instr.on)
                for ident, (engine, index) in zip(instr.on, on):
                    if not 0 <= index < lengths.get(engine, 0):
                        raise ProgramError(f"{e}.{i}: waits on {ident}, which is not an instruction of the program")
                costs[e].append(None)
                continue
            cost = known.get(instr)
            if cost is None:
                where = f"{e}.{i}"
                reads, written = regions(instr)
                for r in (*reads, *written):
                    extents[r.mem] = max(extents.get(r.mem, 0), check_region(r, chip.memories, where))
                _check_shapes(instr, where)
                cost = known[instr] = _step(chip, chip.engines[e], instr, where)
            costs[e].append(cost)
    for b in program.bindings:
        extents[b.region.mem] = max(extents.get(b.region.mem, 0), check_region(b.region, chip.memories, f"binding {b.name}"))
    for b in program.buffers:
        for ident in (b.first, *b.last):
            if not _is_instruction(program, ident):
                raise ProgramError(f"buffer {b.name}: its lifetime names {ident}, which is not an instruction of the program")
    return extents, costs, waits


def _check_shapes(instr, where):
    if isinstance(instr, IndexedDma):
        _check_indexed(instr, where)
    elif instr.kind == "scalar":
        if any(r.mem != "ddr" for r in (*instr.srcs, *instr.dsts)):
            raise ProgramError(f"{where}: a scalar kernel's operands are in ddr")
    elif instr.kind == "dma":
        if instr.src.shape != instr.dst.shape or not instr.fn and dtypes.itemsize(instr.src.dtype) != dtypes.itemsize(instr.dst.dtype):
            raise ProgramError(f"{where}: dma src {instr.src.text()} and dst {instr.dst.text()} differ in shape or width")
        if instr.fn and instr.src.mem == "ddr":  # a converter sits at a unit's output; the stats count ddr reads by the destination
            raise ProgramError(f"{where}: a converting dma reads on-chip memory, not ddr: {instr.src.text()}")
        if instr.fn and len(instr.args) != VECTOR_FNS[instr.fn] - 1:
            raise ProgramError(f"{where}: a dma converting with {instr.fn} takes {VECTOR_FNS[instr.fn] - 1} number(s) after its source, got {len(instr.args)}")
    elif instr.kind == "vector":
        if len(instr.srcs) != VECTOR_FNS[instr.fn]:
            raise ProgramError(f"{where}: {instr.fn} takes {VECTOR_FNS[instr.fn]} operands, got {len(instr.srcs)}")
        tables = TABLE_OPERANDS.get(instr.fn, ())
        for i, s in enumerate(instr.srcs):
            if isinstance(s, (int, float)) or i in tables:
                continue
            shape = s.shape[: len(instr.dst.shape)] if instr.fn in REDUCTIONS else s.shape
            if shape != instr.dst.shape:
                raise ProgramError(f"{where}: source {s.text()} does not have the destination's shape {instr.dst.shape}")
    else:
        m = instr.m
        if instr.b.shape != instr.a.shape[m:] + instr.c.shape[m:] or instr.a.shape[:m] != instr.c.shape[:m]:
            raise ProgramError(f"{where}: matmul shapes {instr.a.shape} x {instr.b.shape} -> {instr.c.shape} do not agree (m={m})")
        if instr.bias is not None and instr.bias.shape != instr.c.shape:
            raise ProgramError(f"{where}: matmul bias {instr.bias.text()} does not have the result's shape {instr.c.shape}")
    for written in regions(instr)[1]:
        if written.size and any(d > 1 for d, s in zip(written.shape, written.strides) if s == 0):
            raise ProgramError(f"{where}: destination {written.text()} writes some elements more than once (zero stride)")


def _check_indexed(instr, where):
    """index P + (n, k), table P + (k dims) + Q, rows P + (n,) + Q, rows and table of one width."""
    index, table, rows = instr.index.shape, instr.table.shape, instr.rows.shape
    p = len(index) - 2
    k = index[-1] if p >= 0 else 0
    if p < 0 or not dtypes.is_int(instr.index.dtype) or k < 1:
        raise ProgramError(f"{where}: indices {instr.index.text()} must be integers of shape P + (n, k)")
    if table[:p] != index[:p] or rows != index[:p + 1] + table[p + k:] or len(table) < p + k:
        raise ProgramError(f"{where}: table {table}, indices {index} and rows {rows} do not agree")
    if dtypes.itemsize(instr.table.dtype) != dtypes.itemsize(instr.rows.dtype):
        raise ProgramError(f"{where}: table and rows differ in width")


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

    def send(self, nbytes, cap, use, src, dst, cached, shares, done):
        """Move nbytes once the previous transfer has moved its own; then done(after), after
        the cycle the previous transfer ended (an event in the trace starts no earlier, so an
        engine's events do not overlap)."""
        finished = self.env.event()
        before = self.moving[-1] if self.moving else None

        def begin(_=None):
            after = self.last_end
            moved = self.transfer(nbytes, cap, use, src, dst, cached, shares)
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


class _Occupancy:
    """When each placed tensor is live: bound tensors (inputs, outputs, constants) for the whole
    run, every planned buffer from the start of its first instruction to the end of the last of
    its last ones. The occupancy and fragmentation counters are worked out from these spans
    after the run."""

    def __init__(self, program):
        self.program = program
        self.opens, self.closes, self.pending = {}, {}, {}
        self.start, self.end = {}, {}  # position in program.buffers -> cycle
        for k, buf in enumerate(program.buffers):
            e, i = _parse_id(buf.first)
            self.opens.setdefault(e, {}).setdefault(i, []).append(k)
            self.pending[k] = len(buf.last)
            for ident in buf.last:
                e, i = _parse_id(ident)
                self.closes.setdefault(e, {}).setdefault(i, []).append(k)

    def open(self, positions, now):
        for k in positions:
            self.start[k] = now

    def close(self, positions, now):
        for k in positions:
            self.pending[k] -= 1
            if self.pending[k] == 0:
                self.end[k] = now

    def spans(self, cycles):
        """BufferSpans: the bindings (live from 0 to `cycles`), then the planned buffers."""
        bound = [BufferSpan(b.name, b.region.mem, b.region.addr, b.region.nbytes, 0, cycles) for b in self.program.bindings]
        return bound + [BufferSpan(b.name, b.mem, b.addr, b.size, self.start[k], self.end[k]) for k, b in enumerate(self.program.buffers)]
