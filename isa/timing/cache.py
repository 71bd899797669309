"""An on-chip memory that caches ddr (a chip memory with `cache: true`, as the Ascend L2 in front
of GM): which of a DMA transfer's ddr bytes it already holds.

The cache holds lines of ddr, each one ddr burst long: a transfer already moves whole bursts
(isa/costs.py rounds its runs up to them), so the bytes a miss reads from ddr are the
transfer's own, and a line a neighbouring transfer brought in is one it would have moved. A
transfer that reads ddr hits on the lines it holds, which the machine then serves at the cache
memory's bandwidth rather than ddr's, and which do not count as ddr traffic; its other lines
are read from ddr and kept. A transfer that writes ddr writes
through (its bytes still reach ddr) and keeps its lines too, so a product one core writes and
another reads back is read on chip. Only timing is modelled: values always live in ddr.

A line counts as held from the start of the transfer that brings it: a second core asking for
it meanwhile is served at once, where a real cache would have it wait for the fill (so runs
where many cores start on the same bytes together are a little optimistic).

Replacement is least recently used, by transfer: the lines one transfer touches share one
stamp, and when the lines held exceed the capacity the transfers least recently used leave
whole. The capacity is the memory's, less what the program places in it. A gather or scatter
touches rows only its indices say (which timing mode does not read), so it bypasses the cache.
"""

import functools

import numpy as np

from .. import dtypes
from ..costs import run_layout
from ..instructions import Region

Shaped = tuple[np.ndarray, int, int]  # a shape's lines (sorted), the first and the last of them

class Cache:
    def __init__(self, memory: str, line: int, capacity: int, ddr_extent: int, accesses: int) -> None:
        """memory: the name of the memory that caches; line: ddr's burst; capacity: the bytes it
        has for lines; ddr_extent: the ddr bytes the program uses; accesses: how many accesses
        (reads and writes of ddr) the run can make at most."""
        self.memory, self.line = memory, line
        self.lines = capacity // self.line  # lines it can hold
        self.stamp = _Stamps(-(-ddr_extent // self.line) + 1)  # line -> its last access, -1: never
        self.count = np.zeros(accesses + 1, np.int64)  # access -> lines still stamped with it
        self.now = 0  # the next access's stamp
        self.oldest = 0  # accesses older than this have left the cache
        self.held = 0  # lines held

    def access(self, region: Region) -> float:
        """A transfer reads or writes region of ddr: the fraction (0..1) of its lines the cache
        held; all of them are held after."""
        first, offset = divmod(region.addr, self.line)
        shaped = _shape_lines(offset, region.dtype, region.shape, region.strides, self.line)
        n = len(shaped[0])
        if not n:
            return 0.0
        at = self.stamp.index(shaped, first, self.now, self.oldest)
        values = self.stamp.values
        before = values[at]
        held = before[before >= self.oldest]
        hits = len(held)
        if hits:
            np.subtract.at(self.count, held, 1)  # each held line leaves its last access's count
            self.held -= hits
        now = self.now
        values[at] = now
        count = self.count
        count[now] = n
        self.held += n
        self.now += 1
        while self.held > self.lines:
            self.held -= int(count[self.oldest])
            self.oldest += 1
        return hits / n


class _Stamps:
    """Each line's last access (-1: never), stored by pages of PAGE lines placed when first
    touched: a program's ddr may span gigabytes (a 7B model's weights) of which a replay of a
    few tiles touches a few pages, and a dense array over all of it would cost its size per Cache.
    A page whose last access has left the cache holds no line, so its place is taken back when
    pages run short: a run streaming gigabytes of weights through the cache keeps about as many
    pages as the cache holds lines, not its whole ddr."""

    PAGE = 1 << 14

    def __init__(self, lines: int) -> None:
        self.slot = np.full(-(-lines // self.PAGE), -1, np.int64)  # page -> its place in `values`, -1: none yet
        self.values = np.zeros(0, np.int64)
        self.page = np.zeros(0, np.int64)  # place -> the page it holds
        self.last = np.zeros(0, np.int64)  # place -> the last access to its page
        self.used = 0  # places ever given
        self.free: list[int] = []  # places taken back

    def index(self, shaped: Shaped, first: int, now: int, oldest: int) -> np.ndarray | slice:
        """Where the stamps of lines `first` + `lines` (a sorted array, from `shaped`) are in
        `values`, their pages placed if new, for access `now` (accesses before `oldest` have left
        the cache): within one placed page, a slice where the lines are consecutive (a
        contiguous transfer's), else one sum."""
        lines, lo, hi = shaped
        page = (first + lo) // self.PAGE
        if page == (first + hi) // self.PAGE and (slot := self.slot.item(page)) >= 0:
            self.last[slot] = now
            base = (slot - page) * self.PAGE + first
            return slice(base + lo, base + hi + 1) if hi - lo + 1 == len(lines) else lines + base
        lines = lines + first
        pages = lines // self.PAGE
        slots = self.slot[pages]
        self.last[slots[slots >= 0]] = now  # kept from being taken back below
        if slots.min() < 0:
            new = np.unique(pages[slots < 0])
            places = self._places(len(new), oldest)
            self.slot[new] = places
            self.page[places] = new
            slots = self.slot[pages]
            self.last[places] = now
        return slots * self.PAGE + lines % self.PAGE

    def _places(self, n: int, oldest: int) -> np.ndarray:
        """n places for new pages: taken back from pages no line of which is held, else new
        ones, `values` grown by doubling (placing pages costs their size, amortized)."""
        if len(self.free) < n:
            stale = np.flatnonzero(self.last[:self.used] < oldest)
            stale = stale[self.slot[self.page[stale]] == stale]  # held by their page, not already taken back
            self.slot[self.page[stale]] = -1
            self.values.reshape(-1, self.PAGE)[stale] = -1
            self.free += stale.tolist()[::-1]
        taken = [self.free.pop() for _ in range(min(n, len(self.free)))]
        fresh = n - len(taken)
        if fresh:
            need = self.used + fresh
            if need * self.PAGE > len(self.values):
                grow = max(need, 2 * (len(self.values) // self.PAGE))
                self.values = np.concatenate((self.values, np.full(grow * self.PAGE - len(self.values), -1, np.int64)))
                self.page = np.concatenate((self.page, np.zeros(grow - len(self.page), np.int64)))
                self.last = np.concatenate((self.last, np.zeros(grow - len(self.last), np.int64)))
            taken += range(self.used, need)
            self.used = need
        return np.array(taken, np.int64)


@functools.lru_cache(maxsize=4096)
def _shape_lines(offset: int, dtype: str, shape: tuple[int, ...], strides: tuple[int, ...], line: int) -> Shaped:
    """touched_lines of a region at byte `offset` of the first line, and the first and last of
    them, worked out once per shape and offset: a region's lines are those, moved on by the
    lines before its address (the tiles of one shape that a program streams differ only there,
    and the lowering's estimate replays the same tiles' transfers on a new Cache for every
    candidate it prices)."""
    lines = touched_lines(Region("ddr", offset, dtype, shape, strides), line)
    return (lines, int(lines[0]), int(lines[-1])) if len(lines) else (lines, 0, 0)


def touched_lines(region: Region, line: int) -> np.ndarray:
    """The distinct cache lines (byte address // line) a region's elements lie in, sorted."""
    layout = run_layout(region)
    if layout is None:
        return np.zeros(0, np.int64)
    dims, run = layout
    item = dtypes.itemsize(region.dtype)
    run *= item  # bytes
    starts = np.array([region.addr], np.int64)
    for n, stride in dims:
        starts = (starts[:, None] + np.arange(n, dtype=np.int64) * (stride * item)).reshape(-1)
    first, last = starts // line, (starts + run - 1) // line
    span = int((last - first).max()) + 1
    lines = (first[:, None] + np.arange(span, dtype=np.int64)).reshape(-1)
    lines = lines[lines <= np.repeat(last, span)]
    step = np.diff(lines)
    if (step >= 0).all():  # runs in address order (the usual layout): sorted already, neighbours may share a line
        return lines[np.concatenate(([True], step > 0))]
    return np.unique(lines)
