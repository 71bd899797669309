"""The emitter: where lowering templates place buffers and append instructions.

Templates say which buffers an instruction reads and writes; the emitter infers the sync
(isa/lower/schedule/sync.py): before an instruction it appends one `wait` for the instructions of other
engines it must follow that its engine does not already know finished. A buffer placed where
released buffers lay inherits their history, so reusing an address orders the new writes after
the old accesses.

So double buffering is only a matter of placing two slots and emitting the next tile's loads
before this tile's compute; the waits follow.

Hazards are per buffer, not per byte. A buffer may be split into parts tracked apart
(`split`): an instruction that reads or writes several of them names them all, its region
spanning them. Where cores work on tiles of one output, their writes to it fall on different
bytes: within `disjoint(bufs)` writes to those buffers by different engines do not wait for one
another (each still waits for what came before), and afterwards a reader waits for every
engine's last write.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from itertools import pairwise
from typing import TYPE_CHECKING, Protocol, TypeVar

from ..dtypes import itemsize
from ..errors import OutOfMemoryError, ProgramError
from ..instructions import Instr, Region, Wait, dense, regions
from ..program import Binding, Buffer, Program
from .check import engine_runs
from .memory.alloc import Allocator
from .memory.route import STAGE_SLOTS
from .schedule.sync import Clocks, accessed
from .schedule.tiling import nbytes as tile_nbytes

if TYPE_CHECKING:
    from chips.schema import Chip

Accesses = dict[str, int]  # engine -> index of its last access of a kind (a write, a read)
Section = tuple[Accesses, Accesses, Accesses, Accesses]  # Emitter.disjoint's (writes, reads) before it, and its own
Bound = tuple[str, tuple[int, ...], bytes, str]  # what Emitter.bind placed: (dtype, shape, data, memory)


class Buf:
    """A placed buffer and its access history while it is being emitted against."""

    __slots__ = ("addr", "covered", "first", "last", "mem", "name", "parts", "reads", "section", "size", "window", "writes")

    def __init__(self, name: Hashable, mem: str, addr: int, size: int) -> None:
        # name: a str where the Emitter places it; (scope, key) for a role of the estimate (schedule/estimate.py)
        self.name, self.mem, self.addr, self.size = name, mem, addr, size
        self.writes: Accesses = {}  # engine -> index of the last write (one engine after any write, but after a disjoint section)
        self.reads: Accesses = {}  # engine -> index of its last read since that write
        self.first: str | None = None  # id of the first access
        self.last: Accesses = {}  # engine -> index of its last access
        self.section: Section | None = None  # in a disjoint section: (writes, reads) before it, and its own (writes, reads)
        self.window: tuple[int, int, int] | None = None  # (axis, first, count): it holds only these indices of a tensor's axis
        self.parts: tuple[Buf, ...] = ()  # the Bufs it was split into (Emitter.split), which hold its accesses
        self.covered: list[tuple[int, int, Buf]] = []  # the released ranges it took when placed (_Released.hand_on)

    def region(self, dtype: str, shape: tuple[int, ...], offset: int = 0) -> Region:
        """The buffer read as a dense array of `shape`. A buffer holding a window of a tensor
        (a layer group's slice, isa/lower/schedule/chain.py) gives the whole tensor's region with the
        held indices' strides and its origin where index 0 would lie, so templates address the
        tensor by absolute index and touch only what the window holds."""
        if self.window is None:
            return dense(self.mem, self.addr + offset, dtype, shape)
        axis, first, count = self.window
        held = dense(self.mem, self.addr + offset, dtype, tuple(shape[:axis]) + (count,) + tuple(shape[axis + 1:]))
        origin = held.addr - first * held.strides[axis] * itemsize(dtype)
        return Region(self.mem, origin, dtype, tuple(shape), held.strides)

    def inherit(self, old: Buf) -> None:
        for mine, theirs in ((self.writes, old.writes), (self.reads, old.reads)):
            if not mine:
                mine.update(theirs)
                continue
            for e, i in theirs.items():
                if mine.get(e, -1) < i:
                    mine[e] = i


class Emits(Protocol):
    """What the templates and the emission helpers call on an emitter: the Emitter, or while a
    tiling is priced the estimate's Recorder (isa/lower/schedule/estimate.py), which places
    nothing and keeps each instruction as a Timed."""

    chip: Chip
    allocators: dict[str, Allocator]
    notes: list[str]

    def emit(self, engine: str, instr: Instr, reads: Sequence[Buf] = (), writes: Sequence[Buf] = ()) -> str | None: ...

    def alloc(self, mem: str, nbytes: int, name: str, unused: bool = False, at: int | None = None) -> Buf: ...

    def split(self, buf: Buf, at: Sequence[int]) -> tuple[Buf, ...]: ...

    def release(self, buf: Buf) -> None: ...

    def stage_buffer(self, mem: str, nbytes: int, name: str, engine: str) -> Buf: ...

    def bind(self, name: str, role: str, dtype: str, shape: tuple[int, ...], data: bytes = b"", mem: str = "ddr") -> Buf: ...

    def disjoint(self, bufs: Iterable[Buf]) -> AbstractContextManager[None]: ...


class Emitter:
    def __init__(self, chip: Chip, graph_name: str, allocator: str = "first_fit") -> None:
        self.chip, self.graph_name = chip, graph_name
        self.streams: dict[str, list[Instr]] = {name: [] for name in chip.engines}
        self.clocks = Clocks(chip.engines)
        self.allocators = {m.name: Allocator(m.name, m.capacity, m.granule, allocator) for m in chip.memories.values()}
        self.released = {name: _Released() for name in chip.memories}  # memory -> the histories its released buffers hand on
        self.buffers: list[Buffer] = []
        self.bindings: list[Binding] = []
        self._bound: dict[tuple[str, str], tuple[Bound, Buf]] = {}  # (name, role) -> (what was bound, its Buf)
        self.notes: list[str] = []  # placement decisions worth reading in the program (Program.notes)

    # ---- placement --------------------------------------------------------------------------

    def alloc(self, mem: str, nbytes: int, name: str, unused: bool = False, at: int | None = None) -> Buf:
        addr, size = self.allocators[mem].alloc(nbytes, name, unused, at)
        buf = Buf(name, mem, addr, size)
        self.released[mem].hand_on(buf)
        return buf

    def split(self, buf: Buf, at: Sequence[int]) -> tuple[Buf, ...]:
        """buf as Bufs of its bytes [0, at[0]), [at[0], at[1]), ... [at[-1], size), whose
        accesses are tracked apart from here on, so that one engine may write a part while
        another reads the one before (a FixPipe draining an accumulator's first rows while the
        cube finishes the rest: isa/lower/templates/matmul.py). Release buf itself."""
        edges = (0, *at, buf.size)
        buf.parts = tuple(Buf(f"{buf.name}[{k}]", buf.mem, buf.addr + lo, hi - lo) for k, (lo, hi) in enumerate(pairwise(edges)))
        for part in buf.parts:
            part.inherit(buf)
        return buf.parts

    def release(self, buf: Buf) -> None:
        """Free buf's address range; record its lifetime (its parts') if it was used."""
        self.allocators[buf.mem].free(buf.addr)
        for b in buf.parts or (buf,):
            self.released[b.mem].add(b, untouched=b.first is None and not buf.parts)
            if b.first is not None:
                last = tuple(f"{e}.{i}" for e, i in b.last.items())
                self.buffers.append(Buffer(str(b.name), b.mem, b.addr, b.size, b.first, last))

    def stage_buffer(self, mem: str, nbytes: int, name: str, engine: str) -> Buf:
        """A buffer of nbytes in mem for a hop by `engine` to write and the next hop to read
        (isa/lower/memory/route.py): of up to STAGE_SLOTS placed side by side, the one `engine` wrote
        longest ago (or never); the others are released untouched, so the memory holds one
        stage once the transfer is over."""
        allocator, released = self.allocators[mem], self.released[mem]
        addrs, size = allocator.side_by_side(nbytes, name, STAGE_SLOTS)
        slots = [Buf(name, mem, addr, size) for addr in addrs]
        for b in slots:  # each takes the history of what it lies over, as if placed
            released.hand_on(b)
        stage = oldest(slots, engine)
        allocator.take(stage.addr, size, name)
        for b in slots:  # the others are released whole, each slot one range with what it lay over's
            if b is not stage:  # history, which the replay moves slot by slot (isa/lower/replay.py, Slots)
                released.add(b)
        return stage

    def bind(self, name: str, role: str, dtype: str, shape: tuple[int, ...], data: bytes = b"", mem: str = "ddr") -> Buf:
        """Place a graph tensor for the whole program: in mem (DDR; the host's memory for a graph's
        data on a chip that has one; on chip for a pinned constant). Its
        bytes are in place before the program starts, so it takes addresses no buffer has used
        (a constant a template binds midway must not sit where an earlier buffer was written).
        Binding a name again with the same contents gives the first Buf: a template planned
        twice (isa/lower/schedule/chain.py tries a layer group before lowering its layers one by one)
        derives its constants once."""
        key = (dtype, tuple(shape), bytes(data), mem)
        if (name, role) in self._bound:
            if self._bound[name, role][0] != key:
                raise ProgramError(f"lowering bug: {role} {name} bound twice with different contents")
            return self._bound[name, role][1]
        nbytes = len(data) if data else tile_nbytes(dtype, shape)
        try:
            buf = self.alloc(mem, nbytes,
                             f"{role} {name}" if self.chip.memories[mem].kind != "local" else f"pinned {role} {name}", unused=True)
        except OutOfMemoryError as exc:
            raise OutOfMemoryError(f"{exc} ({mem} capacity {self.chip.memories[mem].capacity} bytes)") from None
        self.bindings.append(Binding(name, role, buf.region(dtype, shape), data))
        self._bound[name, role] = (key, buf)
        return buf

    @contextmanager
    def disjoint(self, bufs: Iterable[Buf]) -> Iterator[None]:
        """Within: writes to bufs by different engines touch different bytes (module docstring)."""
        distinct = list(dict.fromkeys(bufs))
        for b in distinct:
            b.section = (b.writes, b.reads, {}, {})
        try:
            yield
        finally:
            for b in distinct:
                assert b.section is not None, f"{b.name}: its disjoint section ended within it"
                writes_before, reads_before, writes, reads = b.section
                b.section = None
                b.writes = writes or writes_before
                b.reads = reads if writes else {**reads_before, **reads}

    # ---- instructions -----------------------------------------------------------------------

    def emit(self, engine: str, instr: Instr, reads: Sequence[Buf] = (), writes: Sequence[Buf] = ()) -> str:
        """Append instr to engine's stream after the waits it needs (isa/lower/schedule/sync.py); returns its id."""
        _check_inside(instr, reads, writes)
        engine_runs(self.chip, engine, instr)
        clocks, stream = self.clocks, self.streams[engine]
        need = clocks.need(engine, reads, writes)
        if need:
            stream.append(Wait(tuple([f"{e}.{i}" for e, i in sorted(need.items())]), instr.op))
            clocks.appended(engine)
            clocks.learn(engine, need)
        index = len(stream)
        stream.append(instr)
        clocks.appended(engine)
        accessed(engine, index, reads, writes)
        ident = f"{engine}.{index}"
        for bufs in (reads, writes):
            for b in bufs:
                if b.first is None:
                    b.first = ident
                b.last[engine] = index
        return ident

    def program(self) -> Program:
        return Program(self.chip.name, self.graph_name, self.streams, self.bindings, self.buffers, self.notes)


class _Released:
    """What released buffers of a memory leave for a buffer placed over them to inherit: their
    histories, as disjoint ranges sorted by address. A placed buffer takes the history of the
    ranges it overlaps and the ranges keep only what it leaves uncovered (its own history
    holds the rest), so a placement looks at a few ranges, not at every buffer ever released
    there."""

    def __init__(self) -> None:
        self.addrs: list[int] = []
        self.ranges: list[tuple[int, int, Buf]] = []  # (addr, end, the released Buf whose history it holds)

    def add(self, buf: Buf, untouched: bool = False) -> None:
        """A released buffer: placed over ranges it took, so it overlaps none. One no instruction
        touched gives those ranges back as they were: its bytes hold what they held, and the
        union of their histories it inherited would order later accesses after writes that
        never reached them."""
        for start, stop, old in buf.covered if untouched else ((buf.addr, buf.addr + buf.size, buf),):
            k = bisect.bisect_right(self.addrs, start)
            self.addrs.insert(k, start)
            self.ranges.insert(k, (start, stop, old))
        buf.covered = []  # what it took is the ranges' now

    def hand_on(self, buf: Buf) -> None:
        """buf inherits the history of the ranges it overlaps, which it then covers."""
        addr, end = buf.addr, buf.addr + buf.size
        lo, hi = max(bisect.bisect_right(self.addrs, addr) - 1, 0), bisect.bisect_left(self.addrs, end)
        if lo >= hi:
            return
        left: list[tuple[int, int, Buf]] = []
        for start, stop, old in self.ranges[lo:hi]:
            if stop <= addr:
                left.append((start, stop, old))
                continue
            buf.inherit(old)
            buf.covered.append((max(start, addr), min(stop, end), old))
            if start < addr:
                left.append((start, addr, old))
            if end < stop:
                left.append((end, stop, old))
        self.ranges[lo:hi] = left
        self.addrs[lo:hi] = [r[0] for r in left]


def _check_inside(instr: Instr, reads: Sequence[Buf], writes: Sequence[Buf]) -> None:
    """Every region an instruction reads lies in the buffers it says it reads (or writes), and
    the region it writes in those it says it writes: a template that gets its sizes wrong is
    caught here, not by wrong numbers."""
    read_regions, written = regions(instr)
    for found, bufs in ((read_regions, (*reads, *writes) if writes else reads), (written, writes)):
        for region in found:
            lo, hi = region.span()
            mem = region.mem
            for b in bufs:
                if b.mem == mem and b.addr <= lo and hi <= b.addr + b.size:
                    break
            else:
                _outside(instr, region, lo, hi, bufs)


def _outside(instr: Instr, region: Region, lo: int, hi: int, bufs: Sequence[Buf]) -> None:
    """_check_inside for a region no one buffer holds: the parts of a split buffer may."""
    for b in sorted((b for b in bufs if b.mem == region.mem), key=lambda b: b.addr):
        if b.addr <= lo < b.addr + b.size:
            lo = b.addr + b.size  # covered up to there (parts of a split buffer follow on)
    if lo < hi:
        names = ", ".join(f"{b.name} {b.mem}@{b.addr:#x}+{b.size}" for b in bufs) or "none"
        raise ProgramError(f"lowering bug in {instr.op}: {region.text()} lies outside the buffers it names ({names})")


class _Written(Protocol):
    writes: dict[str, int]  # engine -> the index of its last write


_Staged = TypeVar("_Staged", bound=_Written)


def oldest(bufs: Sequence[_Staged], engine: str) -> _Staged:
    """Of buffers to stage in, the one `engine` wrote longest ago (or never)."""
    return min(bufs, key=lambda b: b.writes.get(engine, -1))
