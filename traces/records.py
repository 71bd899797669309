"""The trace records: plain data that `sim` fills and the writers, summaries and plots read.

Times are in cycles of the chip clock (`Trace.clock_hz` turns them into seconds).
"""
from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar, overload


class Event(NamedTuple):
    """One instruction's execution on one engine."""

    engine: str  # engine name, as in the chip YAML
    index: int  # type: ignore[assignment]  # position in its engine's stream; the field shadows tuple.index, never called on it
    kind: str  # "dma", "vector", "matrix", "scalar" or "wait" (a wait that blocked)
    name: str  # what it did: "dma" ("dma.rshift": a converting one), "matmul", a vector function ("add", "relu", ...), "wait"
    op: str  # the graph op it belongs to ("" when none)
    start: float  # cycle it started
    end: float  # cycle it finished
    bytes: int  # bytes moved (dma) or written (compute)
    src: str  # memory read from ("" for waits)
    dst: str  # memory written ("" for waits)
    note: str = ""  # what else the run learned: the shape a data-dependent op produced
    ops: int = 0  # arithmetic done: 2*M*K*N for a matmul, elements processed by a vector
    #               instruction (a reduction's source elements), 0 for dma, scalar and waits
    cached: int = 0  # of a dma's bytes read from ddr, those the chip's cache held (isa/timing/cache.py):
    #                  read on chip, not from ddr


_make = Event._make  # an Event from all its fields, skipping the defaults' handling


T = TypeVar("T")


class Made(Sequence[T]):
    """A list of `n` records made by `make` when first read: a fast-forwarded run's waits in the
    blocks it cut out (sim/forward.py's Moved), a 7B decode step's million, and its events
    (Repeated) are made only where someone reads them (a stored or Chrome trace)."""

    def __init__(self, make: Callable[[], list[T]], n: int) -> None:
        self.make, self.n = make, n
        self._items: list[T] | None = None

    @property
    def items(self) -> list[T]:
        if self._items is None:
            self._items = self.make()
            assert len(self._items) == self.n, "a made list has the length it was given"
        return self._items

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, i: int) -> T: ...

    @overload
    def __getitem__(self, i: slice) -> list[T]: ...

    def __getitem__(self, i: int | slice) -> T | list[T]:
        return self.items[i]

    def __iter__(self) -> Iterator[T]:
        return iter(self.items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (list, Made)) and len(self) == len(other) and self.items == list(other)

    __hash__ = None  # type: ignore[assignment]  # a list's equality, unhashable as a list

    def __repr__(self) -> str:
        return repr(self.items)

    def __reduce__(self) -> tuple:
        return list, (self.items,)  # pickled as the list it reads as


class Repeated(Made[Event]):
    """A run's events where a block of them repeats (a fast-forwarded run, sim/forward.py): `run`,
    then `len(ops)` copies of `block`, copy k with each event's index `steps[j]` k times on, its
    start and end k periods later and its op `ops[k - 1][j]`. The copies are made as Events when
    first read as a sequence; a summary reads them as columns (traces/summary.py), so a run whose
    events no one lists (a 7B decode step's 2.8 million) makes none."""

    def __init__(self, run: list[Event], block: list[Event], steps: list[int], period: float, ops: list[list[str]]) -> None:
        self.run, self.block, self.steps, self.period, self.ops = run, block, steps, period, ops
        super().__init__(self._copies, len(run) + len(ops) * len(block))

    def _copies(self) -> list[Event]:
        events = list(self.run)
        if self.block:
            engines, indices, kinds, names, _, starts, ends, *rest = map(list, zip(*self.block))
            for k, ops in enumerate(self.ops, 1):
                shift = k * self.period
                indices = list(map(operator.add, indices, self.steps))
                events += map(_make, zip(engines, indices, kinds, names, ops, map(operator.add, starts, itertools.repeat(shift)),
                                         map(operator.add, ends, itertools.repeat(shift)), *rest))
        return events


class Sync(NamedTuple):
    """A wait instruction (whether it blocked or not) and the instructions it waited for."""

    engine: str
    index: int  # type: ignore[assignment]  # the wait's position in its engine's stream (shadows tuple.index, never called)
    on: tuple[tuple[str, int], ...]  # ((engine, index), ...) of the instructions it waited for


class BufferSpan(NamedTuple):
    """A placed buffer and when it was live: from the start of the first instruction that uses
    it to the end of the last. Bound tensors (inputs, outputs, constants) are live for the
    whole run."""

    name: str
    mem: str
    addr: int  # byte address in the memory's flat address space
    size: int  # bytes
    start: float  # cycle
    end: float  # cycle
    kind: str = ""  # a bound tensor's role: "state" (graph state: a KV cache), "input", "output", "const"; "" for a planned buffer


@dataclass
class Trace:
    """Everything a run recorded: enough to rebuild the summary, the plots and the Chrome trace."""

    chip: str
    clock_hz: float
    engines: tuple[str, ...]  # engine names in chip order
    memories: dict[str, int]  # memory name -> capacity in bytes
    cycles: int = 0  # total cycles of the run
    events: Sequence[Event] = field(default_factory=list)  # Event, in order of completion (a list, or Repeated)
    # Step counters, each a list of (cycle, value) points where the value changes:
    #   "memory.<name>"  bytes occupied in that memory
    #   "fragmentation.<name>"  1 - largest free block / free bytes in that memory (0 when full or empty)
    #   "ddr.read", "ddr.write"  DDR bandwidth in bytes per cycle
    counters: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    syncs: Sequence[Sync] = field(default_factory=list)  # Sync, one per wait instruction, in program order (a list, or Made)
    buffers: list[BufferSpan] = field(default_factory=list)  # BufferSpan: bound tensors, then planned buffers
    ddr_bandwidth: float = 0.0  # the chip's DDR bandwidth in bytes per cycle (0: not known)
    host_memory: str = ""  # the chip's host memory (`kind: host`: the TPU v1's, across PCIe), if it has one
    # unit kind ("matrix", "vector") -> dtype -> the chip's peak in ops per cycle over all its
    # engines of that kind (2 per multiply-accumulate, 1 per vector element)
    peak_ops: dict[str, dict[str, float]] = field(default_factory=dict)
    # op -> unit kind -> the dtype its instructions of that kind run in (sim/peaks.py: op_dtypes),
    # whose peak is the op's roof on the roofline ({} when not known)
    op_dtypes: dict[str, dict[str, str]] = field(default_factory=dict)

    def seconds(self, cycles: float) -> float:
        return cycles / self.clock_hz
