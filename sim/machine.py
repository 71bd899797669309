"""The machine: memories and engines built from a Chip, running a Program.

The program is checked against the chip and each distinct instruction priced once
(isa/timing/price.py); the engines then run their streams as SimPy processes on the shared
timing core (isa/timing/core.py: waits, DMA transfers in flight, shared bandwidth, the cache of
ddr), which this machine watches: in functional mode an instruction moves or computes bytes
when it starts (its inputs are final then: the waits guarantee it); timing mode spends the same
costs without touching bytes, so both modes give the same cycles. Every instruction becomes a
trace event, every placed buffer a span of its memory's occupancy.
"""

import bisect
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property, partial
from itertools import accumulate, chain, groupby, repeat
from operator import attrgetter, itemgetter, lt

import numpy as np

from chips.schema import Chip, Engine
from isa import dtypes
from isa.errors import IndexRangeError, InputError, ProgramError
from isa.instructions import (
    REDUCTIONS,
    TABLE_OPERANDS,
    VECTOR_FNS,
    Dma,
    IndexedDma,
    Instr,
    Matmul,
    Region,
    Scalar,
    Vector,
    Wait,
    dense,
    instr_text,
    regions,
)
from isa.program import Buffer, Program, waits_in
from isa.timing import Cache, Observer, Step, Timeline, price, vector_dtype
from traces.occupancy import memory_counters
from traces.records import BufferSpan, Event, Made, Sync, Trace
from traces.summary import Summary, summarize

from .bounds import check_run
from .engines import dma, matrix, scalar, vector
from .feeds import as_input
from .forward import KEEP, Moved, Ran, counters, fast_forward, make_sync, plan, step_event, wait_event
from .memory import Memory, check_region
from .peaks import op_dtypes, peak_ops

Ident = tuple[str, int]  # (engine, index in its stream)
Partial = list[tuple[Region, tuple[int, ...]]]  # the outputs a kernel filled only in part, with the shape it produced
Span = tuple[str, int, int, int]  # a copy's side: (memory, first byte, last byte + 1 from its address, the memory's capacity)


@dataclass
class Result:
    """What a run of a program produced (sim.execute and sim.run return it)."""

    outputs: dict  # output name -> numpy array (empty in timing mode)
    cycles: int
    seconds: float
    trace: Trace
    program: Program  # the program that ran
    state: dict = field(default_factory=dict)  # graph state name -> its bytes after the run, as an array (functional mode)

    @cached_property
    def stats(self) -> Summary:
        """Busy and utilization per engine, DDR bytes, memory peaks and fragmentation, the per-op
        table: summed up from the trace when first read, so a caller that reads only the cycles
        or the trace does not pay for it."""
        return summarize(self.trace)


class Machine:
    def __init__(self, chip: Chip, program: Program, mode: str = "functional") -> None:
        if mode not in ("functional", "timing"):
            raise ProgramError(f"mode must be 'functional' or 'timing', got {mode!r}")
        self.chip, self.program, self.functional = chip, program, mode == "functional"
        self.cut = None if self.functional else plan(program)  # the blocks timing mode may fast-forward through
        skipped, blocks = (self.cut.skipped, self.cut.buffers) if self.cut else ({}, None)
        extents, self.costs, self.waits, self.lives, self.moved = _check(chip, program, skipped, blocks)
        check_run(chip, program, extents, self.functional)
        self.extents = extents
        self.memories = {name: Memory(chip.memories[name], extents.get(name, 0), self.functional) for name in chip.memories}

    # ---- data in and out --------------------------------------------------------------------

    def load(self, inputs: Mapping[str, np.ndarray] | None, state: Mapping[str, np.ndarray] | None = None) -> None:
        """Write constants (each in its binding's memory: DDR, or on chip where the policy pinned
        it), the given inputs and graph state into place. Inputs and state are checked against the
        bindings in both modes; timing mode needs none and writes nothing. A state not given
        starts as zeros (fresh DDR)."""
        given = inputs is not None
        inputs, state = dict(inputs or {}), dict(state or {})
        for b in self.program.bindings:
            memory = self.memories[b.region.mem]
            if b.role == "state" and b.name in state:
                value = as_input(b.name, state.pop(b.name), b.region, "state")
                if self.functional:
                    memory.write(b.region, value)
            elif b.role == "const" and self.functional:
                memory.view(b.region).reshape(-1).view(np.uint8)[...] = np.frombuffer(b.data, np.uint8)
            elif b.role == "input" and (given or self.functional):
                if b.name not in inputs:
                    raise InputError(f"input {b.name!r} ({b.region.dtype}{list(b.region.shape)}) was not given")
                value = as_input(b.name, inputs.pop(b.name), b.region)
                if self.functional:
                    memory.write(b.region, value)
        for what, left in (("input", inputs), ("state", state)):
            if left:
                known = [b.name for b in self.program.bindings if b.role == what] or ["none"]
                raise InputError(f"unknown {what}(s) {', '.join(sorted(left))}; the program's {what}s are {', '.join(known)}")

    def states(self) -> dict[str, np.ndarray]:
        """Each graph state's bytes after the run, as an array (functional mode)."""
        if not self.functional:
            return {}
        return {b.name: self.memories[b.region.mem].read(b.region) for b in self.program.bindings if b.role == "state"}

    def outputs(self) -> dict[str, np.ndarray]:
        """Each output's values; one a kernel filled only in part has the shape it produced."""
        if not self.functional:
            return {}
        memories, produced = self.memories, self.produced  # what a kernel produced is in ddr
        return {b.name: memories[b.region.mem].read(b.region)[: produced[b.region.addr][0]]
                if b.region.mem == "ddr" and b.region.addr in produced else memories[b.region.mem].read(b.region)
                for b in self.program.bindings if b.role == "output"}

    # ---- running ----------------------------------------------------------------------------

    def run(self, inputs: Mapping[str, np.ndarray] | None = None, state: Mapping[str, np.ndarray] | None = None) -> Result:
        self.load(inputs, state)
        self.produced: dict[int, tuple[int, ...]] = {}  # DDR address -> the shape a kernel produced there, when not its region's
        self.events: list[Event] = []
        self.occupancy = _Occupancy(self.program, self.lives)
        streams = self.program.streams
        ran = fast_forward(self, _cache(self.chip, self.program, self.extents)) if self.cut else None
        if ran is None:  # functional mode, or a program that does not fast-forward: every instruction runs
            if self.cut:  # the cut blocks' instructions were priced as copies of the block before's: price each, read their waits
                _, self.costs, self.waits, _, self.moved = _check(self.chip, self.program, {})
            timeline = Timeline(self.chip, self.costs, self.waits, _cache(self.chip, self.program, self.extents), observer=_Watch(self))
            end = timeline.run(lambda e, i: f"{instr_text(f'{e}.{i}', streams[e][i])}")
            ran = Ran(end, timeline.arbiter.read, timeline.arbiter.write)
        cycles = int(np.ceil(ran.end))
        syncs = Made(partial(_syncs, self.waits, self.moved), len(self.waits) + sum(m.waits for m in self.moved.values()))
        events = self.events if ran.events is None else ran.events
        trace = Trace(self.chip.name, self.chip.clock_hz, tuple(streams), {m.name: m.capacity for m in self.chip.memories.values()}, cycles,
                      events, syncs=syncs, buffers=self.occupancy.spans(cycles), ddr_bandwidth=self.chip.memories["ddr"].bandwidth,
                      peak_ops=peak_ops(self.chip), host_memory="" if self.chip.data_memory == "ddr" else self.chip.data_memory)
        if ran.m:  # fast-forwarded: the cut blocks' buffers are those from the bindings' on
            blocks, first = self.program.blocks, len(self.program.bindings)
            assert blocks is not None
            cut = range(first + blocks.buffers + KEEP * blocks.per_block, first + blocks.buffers + (KEEP + ran.m) * blocks.per_block)
            trace.counters.update(counters(ran, trace.buffers, trace.memories, cut))
        else:
            trace.counters.update(memory_counters(trace.buffers, trace.memories))
        trace.counters["ddr.read"], trace.counters["ddr.write"] = ran.read, ran.write
        trace.op_dtypes = op_dtypes(self.program, self.costs, self.cut.skipped if ran.m and self.cut else None)  # each op's roof
        return Result(self.outputs(), cycles, self.chip.seconds(cycles), trace, self.program, self.states())

    def _produced(self, partial: Partial) -> str:
        for region, shape in partial:
            if region.mem == "ddr":
                self.produced[region.addr] = shape
        return "; ".join(f"produced {list(shape)} of at most {list(region.shape)}" for region, shape in partial)


def _cache(chip: Chip, program: Program, extents: dict[str, int]) -> Cache | None:
    """The run's Cache of ddr, on a chip that has one: it holds lines in what the program
    leaves free of its memory."""
    memory = chip.cache
    if memory is None:
        return None
    accesses = 2 * sum(len(stream) for stream in program.streams.values())  # a ddr -> ddr copy reads and writes
    return Cache(memory.name, chip.memories["ddr"].burst, memory.capacity - extents.get(memory.name, 0), extents.get("ddr", 0), accesses)


_EXECUTE: dict[str, Callable] = {"dma": dma.execute, "vector": vector.execute, "matrix": matrix.execute, "scalar": scalar.execute}


# an instruction class -> the fields its equality compares, as a tuple: a key equal where the
# instructions are, hashed and compared without the dataclass's own __hash__ and __eq__
_KEY: dict[type, Callable[[Instr], tuple]] = {cls: attrgetter(*(f.name for f in fields(cls) if f.compare))
                                              for cls in (Vector, Matmul, IndexedDma, Scalar)}


def _step(chip: Chip, engine: Engine, instr: Instr, where: str) -> Step:
    """Check that engine can run instr, and price it (isa/timing/price.py)."""
    kind = instr.kind
    if kind not in engine.kinds:
        raise ProgramError(f"engine {engine.name} is not a {kind} engine (it is {', '.join(engine.kinds)}): {instr_text('?', instr)}")
    if isinstance(instr, (Dma, IndexedDma)):
        if (instr.src.mem, instr.dst.mem) not in engine.links:
            raise ProgramError(f"engine {engine.name} has no link {instr.src.mem}->{instr.dst.mem}: {instr_text('?', instr)}")
        fn = getattr(instr, "fn", "")
        if fn and fn not in engine.converts:
            can = f"it converts with {', '.join(engine.converts)}" if engine.converts else "it converts nothing"
            raise ProgramError(f"engine {engine.name} does not convert with {fn} ({can}): {instr_text('?', instr)}")
    elif isinstance(instr, Scalar):
        return Step("scalar", scalar.cycles(instr, engine, where), name=instr.fn,
                    nbytes=sum(r.nbytes for r in instr.dsts), src="ddr", dst="ddr")
    elif isinstance(instr, Vector):
        dtype = vector_dtype(instr)
        assert engine.vector is not None, "a vector engine has a vector unit"
        if dtype not in engine.vector.per_lane:
            raise ProgramError(f"engine {engine.name}: the vector unit has no throughput for "
                               f"dtype {dtype} (per_lane: {', '.join(engine.vector.per_lane)})")
    elif isinstance(instr, Matmul):
        assert engine.matrix is not None, "a matrix engine has a matrix unit"
        if instr.a.dtype not in engine.matrix.block_cycles:
            raise ProgramError(f"engine {engine.name}: the matrix unit has no block_cycles for dtype {instr.a.dtype}")
    return price(chip, engine, instr)


def _index(text: str) -> int:
    """An instruction id's index, -1 (no instruction's) where it is not a number."""
    try:
        return int(text)
    except ValueError:
        return -1


def _instruction_ids(groups: list[tuple[str, ...]], lengths: dict[str, int]
                     ) -> tuple[list[tuple[Ident, ...]], tuple[int, str] | None]:
    """Each group of "engine.index" ids as its (engine, index) pairs, and the first id that names
    no instruction of the program (lengths: engine -> its instructions) with its group's position,
    None where all do. A column at a time (_parsed; where it finds an id it does not read, map over
    str.rpartition, int and the bounds): a 7B decode step's waits and buffer lifetimes name millions."""
    idents = list(chain.from_iterable(groups))
    parsed = _parsed(idents, lengths)
    if parsed is not None:
        engines, indices = list(map(list(lengths).__getitem__, parsed[0].tolist())), parsed[1].tolist()
    else:
        parts = list(map(str.rpartition, idents, repeat(".")))
        engines, texts = list(map(itemgetter(0), parts)), list(map(itemgetter(2), parts))
        try:
            indices = list(map(int, texts))
        except ValueError:
            indices = list(map(_index, texts))
    ids = list(zip(engines, indices))
    offsets = list(accumulate(map(len, groups), initial=0))
    grouped = list(map(tuple, map(ids.__getitem__, map(slice, offsets, offsets[1:]))))
    if parsed is not None or (min(indices, default=0) >= 0 and all(map(lt, indices, map(lengths.get, engines, repeat(0))))):
        return grouped, None
    p = next(p for p, (e, i) in enumerate(ids) if not 0 <= i < lengths.get(e, 0))
    return grouped, (bisect.bisect_right(offsets, p) - 1, idents[p])


def _parsed(idents: list[str], lengths: dict[str, int]) -> tuple[np.ndarray, np.ndarray] | None:
    """Each id's engine (its position in `lengths`) and index, as arrays, where every id is an engine of `lengths`, a dot and one of its
    instructions' indices in 1 to 9 ASCII digits, read from the ids' bytes as arrays; None where
    one is not (_instruction_ids then reads them one by one, and names the first it cannot)."""
    names = list(lengths)
    words = -(-max(map(len, names), default=0) // 8)  # an engine's name in 8-byte words
    if not idents or not names or words > 8 or not all(map(str.isascii, names)):
        return None
    try:
        data = np.frombuffer("".join(idents).encode("ascii") + bytes(8 * words), np.uint8)
    except UnicodeEncodeError:
        return None
    end = np.cumsum(np.fromiter(map(len, idents), np.int64, len(idents)))
    start = np.concatenate(([0], end[:-1]))
    dots = np.flatnonzero(data == ord("."))
    last = np.searchsorted(dots, end) - 1  # each id's last dot
    if last.min() < 0:
        return None
    dot = dots[last]
    digits, size = end - dot - 1, dot - start
    if (size < 0).any() or digits.min() < 1 or digits.max() > 9 or size.max() > 8 * words:
        return None
    index = np.zeros(len(idents), np.int64)
    for place in range(int(digits.max())):
        has = digits > place
        digit = data[end[has] - 1 - place].astype(np.int64) - ord("0")
        if digit.min() < 0 or digit.max() > 9:
            return None
        index[has] += digit * 10 ** place
    window = np.ndarray((len(data) - 7,), "<u8", data, 0, (1,))  # the 8 bytes from each byte on, as one number
    known = np.frombuffer(b"".join(name.encode("ascii").ljust(8 * words, b"\0") for name in names), "<u8").reshape(len(names), words)
    prefix = np.stack([window[start + 8 * w] & _low(size - 8 * w) for w in range(words)], axis=1)  # each id's engine, zero-padded
    key, known_key = _key(prefix), _key(known)
    order = np.argsort(known_key, kind="stable")
    engine = order[np.minimum(np.searchsorted(known_key[order], key), len(names) - 1)]
    bound = np.fromiter(map(lengths.__getitem__, names), np.int64, len(names))
    named = np.fromiter(map(len, names), np.int64, len(names))
    if not (known[engine] == prefix).all() or (named[engine] != size).any() or (index >= bound[engine]).any():
        return None
    return engine, index


def _low(count: np.ndarray) -> np.ndarray:
    """The masks of a number's low `count` bytes (clipped to 0..8)."""
    bits = np.clip(count, 0, 8).astype(np.uint64) * np.uint64(8)
    return np.where(bits == 64, np.uint64(2**64 - 1), (np.uint64(1) << np.minimum(bits, np.uint64(63))) - np.uint64(1))


def _key(words: np.ndarray) -> np.ndarray:
    """One number of each row of 8-byte words (equal rows, equal numbers; _parsed compares the rows)."""
    key = np.zeros(len(words), np.uint64)
    for column in words.T:
        key = key * np.uint64(1_000_003) + column
    return key


@dataclass
class Lives:
    """Each planned buffer's first instruction and its last ones as columns (a 7B decode step has
    530,000 buffers): an instruction as its engine (a position in `engines`) and index; the last
    ones one buffer after another, `count` of them each."""

    engines: list[str]
    first_engine: np.ndarray
    first_index: np.ndarray
    last_engine: np.ndarray
    last_index: np.ndarray
    count: np.ndarray

    def firsts(self) -> list[Ident]:
        return list(zip(map(self.engines.__getitem__, self.first_engine.tolist()), self.first_index.tolist()))

    def lasts(self) -> list[Ident]:
        """The last ones, one buffer's after another's."""
        return list(zip(map(self.engines.__getitem__, self.last_engine.tolist()), self.last_index.tolist()))

    def owners(self) -> np.ndarray:
        """Each last one's buffer."""
        return np.repeat(np.arange(len(self.count)), self.count)

    @classmethod
    def read(cls, buffers: list[Buffer], lengths: dict[str, int]) -> tuple["Lives", int | None, str]:
        """The buffers' Lives, and the first buffer whose lifetime names no instruction of the
        program (lengths: engine -> its instructions) with that id; (None, "") where none does."""
        names = list(lengths)
        columns, bad = [], None
        firsts: list[tuple[str, ...]] = list(zip(map(attrgetter("first"), buffers)))
        for groups in (firsts, list(map(attrgetter("last"), buffers))):
            count = np.fromiter(map(len, groups), np.int64, len(groups))
            parsed = _parsed(list(chain.from_iterable(groups)), lengths)
            if parsed is None:  # read one by one, naming the first bad id
                grouped, wrong = _instruction_ids(groups, lengths)
                bad = bad if wrong is None or (bad is not None and bad[0] <= wrong[0]) else wrong
                flat = list(chain.from_iterable(grouped))
                code = {e: c for c, e in enumerate(names)}
                parsed = (np.fromiter((code.get(e, 0) for e, _ in flat), np.int64, len(flat)),
                          np.fromiter(map(itemgetter(1), flat), np.int64, len(flat)))
            columns.append((*parsed, count))
        (fe, fi, _), (le, li, count) = columns
        return cls(names, fe, fi, le, li, count), bad[0] if bad else None, bad[1] if bad else ""

    def moved(self, lo: int, per: int, blocks: int) -> "Lives | None":
        """These Lives with `blocks` blocks of `per` buffers inserted at buffer lo, each the
        block's before it (ending at lo) moved on by the step the lifetimes of the block before
        that took to it (sim/forward.py's Moved, for buffers); None where those two blocks' do not
        line up (other counts or engines)."""
        a, b = lo - 2 * per, lo - per
        same = np.array_equal(self.count[a:b], self.count[b:lo]) and np.array_equal(self.first_engine[a:b], self.first_engine[b:lo])
        if a < 0 or not same:
            return None
        ends = np.concatenate(([0], np.cumsum(self.count)))
        la, lb, lz = ends[a], ends[b], ends[lo]
        if not np.array_equal(self.last_engine[la:lb], self.last_engine[lb:lz]):
            return None
        t = np.arange(1, blocks + 1)[:, None]

        def laid(column: np.ndarray, i: int, j: int, k: int, moves: bool) -> np.ndarray:
            block = column[j:k]
            made = block + t * (block - column[i:j]) if moves else np.broadcast_to(block, (blocks, k - j))
            return np.concatenate((column[:k], made.ravel(), column[k:]))

        return Lives(self.engines, laid(self.first_engine, a, b, lo, False), laid(self.first_index, a, b, lo, True),
                     laid(self.last_engine, la, lb, lz, False), laid(self.last_index, la, lb, lz, True),
                     laid(self.count, a, b, lo, False))


def _check(chip: Chip, program: Program, skipped: dict[str, tuple[int, int, int]], blocks: tuple[int, int, int] | None = None
           ) -> tuple[dict[str, int], dict[str, list[Step | None]], dict[Ident, tuple[Ident, ...]], Lives, dict[str, Moved]]:
    """Static checks of a program against a chip; returns the bytes used per memory, each
    engine's list of loop steps (see _step; None for a wait), {(engine, index) of a wait:
    the (engine, index) it waits on}, the buffers' lifetimes as (engine, index) (Lives) and the
    waits of the cut blocks after the first (below). Tiles repeat their local-memory instructions,
    so each distinct instruction of an engine is checked and priced once; copies, by their shapes
    (_Copies). skipped: engine -> (lo, hi, n): its instructions [lo, hi) are a fast-forward's cut
    blocks (sim/forward.py), each the one n before moved to the block's own bound tensors (which
    are checked as bindings): each takes that one's Step, unchecked, and the waits of those after
    the first are the first's moved on (sim/forward.py's Moved), not read, where its waits line up
    with the kept block's before it (else they are read)."""
    extents: dict[str, int] = {}
    costs: dict[str, list[Step | None]] = {}
    waits: dict[Ident, tuple[Ident, ...]] = {}
    moved: dict[str, Moved] = {}
    lengths = {e: len(stream) for e, stream in program.streams.items()}
    for e, stream in program.streams.items():
        if e not in chip.engines:
            raise ProgramError(f"program engine {e!r} is not on chip {chip.name} (engines: {', '.join(chip.engines)})")
        lo, hi, n = skipped.get(e, (0, 0, 0))
        later = lo + n if n and hi - lo >= 2 * n else hi  # the cut blocks from here to hi: their waits the first's moved (Moved)
        at, ons = waits_in(stream, 0, later)
        bad = _read_waits(e, at, ons, lengths, waits)
        if bad is None and later < hi:
            found = Moved.of(e, waits, at, lo, n, (hi - later) // n)
            if found is None:  # they do not line up as blocks' do: read each
                more, ons = waits_in(stream, later, hi)
                at += more
                bad = _read_waits(e, more, ons, lengths, waits)
            else:
                moved[e] = found
        if bad is None:
            more, ons = waits_in(stream, hi, len(stream))
            at += more
            bad = _read_waits(e, more, ons, lengths, waits)
        stop = len(stream) if bad is None else bad[0]  # instructions before the first bad wait are checked first
        costs[e] = _steps(chip, chip.engines[e], stream, extents, (lo, hi, n), at, stop)
        if bad is not None:
            raise ProgramError(f"{e}.{stop}: waits on {bad[1]}, which is not an instruction of the program")
    for b in program.bindings:
        extents[b.region.mem] = max(extents.get(b.region.mem, 0), check_region(b.region, chip.memories, f"binding {b.name}"))
    buffers, (lo, hi, per) = program.buffers, blocks or (0, 0, 0)
    if per and hi - lo >= 2 * per:  # the cut blocks' buffers after the first: the first's moved on
        lives, wrong, text = Lives.read(buffers[:lo + per] + buffers[hi:], lengths)
        laid = None if wrong is not None else lives.moved(lo + per, per, (hi - lo) // per - 1)
        if laid is not None:
            return extents, costs, waits, laid, moved
    lives, wrong, text = Lives.read(buffers, lengths)
    if wrong is not None:
        raise ProgramError(f"buffer {buffers[wrong].name}: its lifetime names {text}, which is not an instruction of the program")
    return extents, costs, waits, lives, moved


def _syncs(waits: dict[Ident, tuple[Ident, ...]], moved: dict[str, Moved]) -> list[Sync]:
    """The trace's Syncs, one per wait in program order: `waits`, and on an engine of `moved` those
    of its cut blocks after the first between its waits before them and after."""
    syncs = list(map(make_sync, [(e, i, on) for (e, i), on in waits.items()]))  # made in C: one per wait
    if not moved:
        return syncs
    out: list[Sync] = []
    for _, engine in groupby(syncs, itemgetter(0)):
        run = list(engine)
        m = moved.get(run[0][0])
        if m is None:
            out += run
            continue
        k = bisect.bisect_left(run, m.first, key=itemgetter(1))
        out += run[:k]
        out += m.syncs()
        out += run[k:]
    return out


def _read_waits(e: str, at: list[int], ons: list[tuple[str, ...]], lengths: dict[str, int], waits: dict[Ident, tuple[Ident, ...]]
                ) -> tuple[int, str] | None:
    """Add engine e's waits at `at`, naming `ons`, to `waits`; the first that names no instruction
    of the program (its index, the id), None where none does."""
    on, bad = _instruction_ids(ons, lengths)
    waits.update(zip(zip(repeat(e), at), on))
    return None if bad is None else (at[bad[0]], bad[1])


def _steps(chip: Chip, engine: Engine, stream: list[Instr], extents: dict[str, int], skipped: tuple[int, int, int],
           waits: list[int], stop: int) -> list[Step | None]:
    """_check's loop steps of one engine's instructions [0, stop) (waits: where its waits are,
    skipped: its cut blocks, as in _check)."""
    known: dict[tuple, Step] = {}  # (class, _KEY) -> Step
    copies = _Copies(chip, engine, extents)
    costs: list[Step | None] = [None] * len(stream)
    lo, hi, n = skipped
    for i, instr in chain(enumerate(stream[:min(lo, stop)]), enumerate(stream[hi:stop], hi)):  # slices: read at C speed
        if type(instr) is Wait:
            continue
        if type(instr) is Dma:
            costs[i] = copies.step(instr, i)
            continue
        cls = type(instr)
        key = cls, _KEY[cls](instr)
        cost = known.get(key)
        if cost is None:
            where = f"{engine.name}.{i}"
            _check_regions(instr, chip, extents, where)
            _check_shapes(instr, where)
            cost = known[key] = _step(chip, engine, instr, where)
        costs[i] = cost
    for a in range(lo, min(hi, stop), n) if hi > lo else ():  # a cut block: the one before's Steps, None for its waits
        costs[a:a + n] = costs[a - n:a]
        for i in waits[bisect.bisect_left(waits, a):bisect.bisect_left(waits, a + n)]:
            costs[i] = None
    return costs


def _check_regions(instr: Instr, chip: Chip, extents: dict[str, int], where: str) -> None:
    """Each region of instr lies inside its memory; extents[memory] grows to the last byte used."""
    reads, written = regions(instr)
    for r in (*reads, *written):
        extents[r.mem] = max(extents.get(r.mem, 0), check_region(r, chip.memories, where))


_READ = Step._fields.index("read")  # Step's read and write fields, one after the other
assert Step._fields[_READ + 1] == "write"
_step_of: Callable[[tuple], Step] = partial(tuple.__new__, Step)  # a Step from all its fields, made in C: one per copy


class _Copies:
    """An engine's plain copies, checked and priced once per shape: a copy costs the same at any
    address (its runs and bursts are those of its shapes and strides), so only its two regions'
    bounds are checked again, from their byte spans, and on a chip with a cache of ddr the Step
    is given the copy's own ddr regions (isa/timing/cache.py reads them)."""

    def __init__(self, chip: Chip, engine: Engine, extents: dict[str, int]) -> None:
        self.chip, self.engine, self.extents = chip, engine, extents
        self.cached = chip.cache is not None
        self.shaped: dict[tuple, tuple[Step, Span, Span]] = {}  # shape key -> (Step, then per side its Span)

    def step(self, instr: Dma, i: int) -> Step:
        src, dst = instr.src, instr.dst
        key = (src.mem, src.dtype, src.shape, src.strides, dst.mem, dst.dtype, dst.shape, dst.strides, instr.fn, instr.args, instr.cdt)
        known = self.shaped.get(key)
        if known is None:
            known = self.shaped[key] = self._first(instr, f"{self.engine.name}.{i}")
        step, src_span, dst_span = known
        self._inside(src, src_span, i)
        self._inside(dst, dst_span, i)
        if not self.cached:
            return step
        return _step_of(step[:_READ] + (src if step.read is not None else None, dst if step.write is not None else None) + step[_READ + 2:])

    def _first(self, instr: Dma, where: str) -> tuple[Step, Span, Span]:
        chip = self.chip
        _check_regions(instr, chip, self.extents, where)
        _check_shapes(instr, where)
        step = _step(chip, self.engine, instr, where)
        if not self.cached:
            step = step._replace(read=None, write=None)
        src, dst = ((r.mem, lo - r.addr, hi - r.addr, chip.memories[r.mem].capacity) for r, (lo, hi) in
                    ((r, r.span()) for r in (instr.src, instr.dst)))
        return step, src, dst

    def _inside(self, region: Region, span: Span, i: int) -> None:
        """region lies inside its memory, given its span's (memory, first, end) bytes from its address."""
        mem, lo, hi, capacity = span
        addr = region.addr
        if addr + lo < 0 or addr + hi > capacity:
            check_region(region, self.chip.memories, f"{self.engine.name}.{i}")  # raises, naming the bound
        self.extents[mem] = max(self.extents[mem], addr + hi)


def _check_shapes(instr: Instr, where: str) -> None:
    if isinstance(instr, IndexedDma):
        _check_indexed(instr, where)
    elif isinstance(instr, Scalar):
        if any(r.mem != "ddr" for r in (*instr.srcs, *instr.dsts)):
            raise ProgramError(f"{where}: a scalar kernel's operands are in ddr")
    elif isinstance(instr, Dma):
        if instr.src.shape != instr.dst.shape or (not instr.fn and dtypes.itemsize(instr.src.dtype) != dtypes.itemsize(instr.dst.dtype)):
            raise ProgramError(f"{where}: dma src {instr.src.text()} and dst {instr.dst.text()} differ in shape or width")
        if instr.fn and instr.src.mem == "ddr":  # a converter sits at a unit's output; the stats count ddr reads by the destination
            raise ProgramError(f"{where}: a converting dma reads on-chip memory, not ddr: {instr.src.text()}")
        if instr.fn and len(instr.args) != VECTOR_FNS[instr.fn] - 1:
            raise ProgramError(f"{where}: a dma converting with {instr.fn} takes {VECTOR_FNS[instr.fn] - 1} "
                               f"number(s) after its source, got {len(instr.args)}")
    elif isinstance(instr, Vector):
        if len(instr.srcs) != VECTOR_FNS[instr.fn]:
            raise ProgramError(f"{where}: {instr.fn} takes {VECTOR_FNS[instr.fn]} operands, got {len(instr.srcs)}")
        tables = TABLE_OPERANDS.get(instr.fn, ())
        for i, s in enumerate(instr.srcs):
            if isinstance(s, (int, float)) or i in tables:
                continue
            shape = s.shape[: len(instr.dst.shape)] if instr.fn in REDUCTIONS else s.shape
            if shape != instr.dst.shape:
                raise ProgramError(f"{where}: source {s.text()} does not have the destination's shape {instr.dst.shape}")
    elif isinstance(instr, Matmul):
        m = instr.m
        if instr.b.shape != instr.a.shape[m:] + instr.c.shape[m:] or instr.a.shape[:m] != instr.c.shape[:m]:
            raise ProgramError(f"{where}: matmul shapes {instr.a.shape} x {instr.b.shape} -> {instr.c.shape} do not agree (m={m})")
        if instr.bias is not None and instr.bias.shape != instr.c.shape:
            raise ProgramError(f"{where}: matmul bias {instr.bias.text()} does not have the result's shape {instr.c.shape}")
    for written in regions(instr)[1]:
        if written.size and any(d > 1 for d, s in zip(written.shape, written.strides) if s == 0):
            raise ProgramError(f"{where}: destination {written.text()} writes some elements more than once (zero stride)")


def _check_indexed(instr: IndexedDma, where: str) -> None:
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


def _holder(program: Program, at: tuple[str, int] | None) -> str:
    """Which graph tensor's element lies at (memory, byte address), worded for an error: an index
    a gather reads from an input (a paged cache's block table) is the user's to mend there."""
    if at is None:
        return ""
    mem, addr = at
    for b in program.bindings:
        r = b.region
        lo, hi = r.span()
        if r.mem == mem and lo <= addr < hi:
            offset = (addr - r.addr) // dtypes.itemsize(r.dtype)
            dense_strides = dense(r.mem, r.addr, r.dtype, r.shape).strides
            if r.strides != dense_strides or not r.shape:
                return f" (read from {b.role} {b.name!r})"
            return f" (read from {b.role} {b.name!r}, element {tuple(int(v) for v in np.unravel_index(offset, r.shape))})"
    return ""


class _Watch(Observer):
    """The machine's view of a run: it computes each instruction as it starts (functional mode),
    records the trace's events and keeps each placed buffer's lifetime."""

    def __init__(self, machine: Machine) -> None:
        self.machine, self.streams = machine, machine.program.streams
        self.execute = _EXECUTE if machine.functional else None
        self.record, occupancy = machine.events.append, machine.occupancy
        self.opens, self.closes = occupancy.opens, occupancy.closes
        self.watched = {e: set(closes) for e, closes in occupancy.closes.items()}

    def started(self, engine: str, i: int, now: float) -> str:
        opens = self.opens.get(engine)
        if opens and i in opens:
            self.machine.occupancy.open(opens[i], now)
        if self.execute:
            instr = self.streams[engine][i]
            try:
                partial = self.execute[instr.kind](instr, self.machine.memories)
            except IndexRangeError as exc:
                raise IndexRangeError(f"{exc}{_holder(self.machine.program, exc.at)}") from None
            if partial:
                return self.machine._produced(partial)
        return ""

    def ended(self, engine: str, i: int, step: Step, start: float, end: float, note: str, cached: float) -> None:
        op = self.streams[engine][i].op
        self.record(step_event(engine, i, step, op, start, end, note, cached))
        closes = self.closes.get(engine)
        if closes and i in closes:
            self.machine.occupancy.close(closes[i], end)

    def waited(self, engine: str, i: int, start: float, end: float) -> None:
        self.record(wait_event(engine, i, self.streams[engine][i].op, start, end))

    def bind(self, engine: str, n: int) -> tuple[Container[int], Callable[[int, float], str], Callable[..., None]]:
        """started and ended of one engine (Observer.bind), called for each of its instructions:
        its stream and buffers at hand. Timing mode sees only the starts that open buffers."""
        stream, record, occupancy = self.streams[engine], self.record, self.machine.occupancy
        closes = self.closes.get(engine, {})

        def ended(i: int, step: Step, start: float, end: float, note: str, cached: float) -> None:
            record(step_event(engine, i, step, stream[i].op, start, end, note, cached))
            if i in closes:
                occupancy.close(closes[i], end)

        return range(n) if self.execute else self.opens.get(engine, {}), partial(self.started, engine), ended


class _Occupancy:
    """When each placed tensor is live: bound tensors (inputs, outputs, constants) for the whole
    run, every planned buffer from the start of its first instruction to the end of the last of
    its last ones. The occupancy and fragmentation counters are worked out from these spans
    after the run."""

    def __init__(self, program: Program, lives: Lives) -> None:
        self.program, self.lives = program, lives  # each buffer's first instruction, and its last ones
        self.start: dict[int, float] = {}  # position in program.buffers -> cycle
        self.end: dict[int, float] = {}

    @cached_property
    def pending(self) -> list[int]:
        """position in program.buffers -> last instructions not yet ended (a run of every instruction counts them down)."""
        return self.lives.count.tolist()

    @cached_property
    def opens(self) -> dict[str, dict[int, list[int]]]:
        """engine -> {index: positions in program.buffers it opens} (a run of every instruction watches them)."""
        opens: dict[str, dict[int, list[int]]] = {}
        for k, (e, i) in enumerate(self.lives.firsts()):
            opens.setdefault(e, {}).setdefault(i, []).append(k)
        return opens

    @cached_property
    def closes(self) -> dict[str, dict[int, list[int]]]:
        """engine -> {index: positions it is one of the last of}."""
        closes: dict[str, dict[int, list[int]]] = {}
        for k, (e, i) in zip(self.lives.owners().tolist(), self.lives.lasts()):
            closes.setdefault(e, {}).setdefault(i, []).append(k)
        return closes

    def open(self, positions: list[int], now: float) -> None:
        for k in positions:
            self.start[k] = now

    def close(self, positions: list[int], now: float) -> None:
        for k in positions:
            self.pending[k] -= 1
            if self.pending[k] == 0:
                self.end[k] = now

    def spans(self, cycles: int) -> list[BufferSpan]:
        """BufferSpans: the bindings (live from 0 to `cycles`, of their role's kind), then the planned buffers."""
        bound = [BufferSpan(b.name, b.region.mem, b.region.addr, b.region.nbytes, 0, cycles, b.role) for b in self.program.bindings]
        buffers, at = self.program.buffers, range(len(self.program.buffers))  # a column at a time: a 7B decode step has 530,000
        fields = (map(attrgetter(name), buffers) for name in ("name", "mem", "addr", "size"))
        made = partial(tuple.__new__, BufferSpan)  # in C, without _make's check of the length
        return bound + list(map(made, zip(*fields, map(self.start.__getitem__, at), map(self.end.__getitem__, at), repeat(""))))
