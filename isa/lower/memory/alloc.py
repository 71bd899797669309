"""Allocation of one memory's flat address space, first fit or best fit.

Buffers start on, and are sized in, the memory's granule (its per-lane alignment times its
lanes, so a buffer in Sophgo local memory occupies the same address range in every lane).
First fit takes the gap at the lowest address that holds a buffer; best fit the smallest such
gap (the lowest of equal ones), keeping large gaps whole for large buffers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ...errors import ConfigError, OutOfMemoryError

STRATEGIES = ("first_fit", "best_fit")


def align_up(value: int, granule: int) -> int:
    return -(-value // granule) * granule


class Allocator:
    def __init__(self, mem: str, capacity: int, granule: int, strategy: str = "first_fit") -> None:
        if strategy not in STRATEGIES:
            raise ConfigError(f"allocator for {mem}: unknown strategy {strategy!r} (known: {', '.join(STRATEGIES)})")
        self.mem, self.capacity, self.granule, self.strategy = mem, capacity, granule, strategy
        self.live: dict[int, tuple[int, str]] = {}  # addr -> (size, name)
        self.peak = 0
        self._free: tuple[tuple[int, int], ...] | None = None  # the free blocks, worked out once per placement or release

    def free_bytes(self) -> int:
        return self.capacity - sum(size for size, _ in self.live.values())

    def gaps(self) -> tuple[tuple[int, int], ...]:
        """(address, bytes) of each free block, in address order."""
        return self._gaps()

    def _gaps(self) -> tuple[tuple[int, int], ...]:
        """gaps(), kept until the next placement or release: a tiling search asks whether
        candidates fit many times between two of them."""
        if self._free is None:
            free, cursor = [], 0
            for addr in sorted(self.live):
                if addr > cursor:
                    free.append((cursor, addr - cursor))
                cursor = addr + self.live[addr][0]
            if cursor < self.capacity:
                free.append((cursor, self.capacity - cursor))
            self._free = tuple(free)
        return self._free

    def _pick(self, gaps: Sequence[Sequence[int]], size: int) -> int | None:
        """Index of the gap (addr, room) a buffer of `size` goes in, or None."""
        fitting = [i for i, (_, room) in enumerate(gaps) if room >= size]
        if not fitting:
            return None
        if self.strategy == "best_fit":
            return min(fitting, key=lambda i: (gaps[i][1], gaps[i][0]))
        return fitting[0]

    def fits(self, sizes: Iterable[int]) -> bool:
        """Whether buffers of these sizes could all be allocated now, in order (in one free
        block, whether their sum fits it)."""
        free = self._gaps()
        if len(free) <= 1:
            return sum(align_up(max(size, 1), self.granule) for size in sizes) <= (free[0][1] if free else 0)
        gaps = [list(g) for g in free]
        for asked in sizes:
            size = align_up(max(asked, 1), self.granule)
            i = self._pick(gaps, size)
            if i is None:
                return False
            gaps[i][0] += size
            gaps[i][1] -= size
        return True

    def alloc(self, size: int, name: str, unused: bool = False, at: int | None = None) -> tuple[int, int]:
        """(addr, size) of a new buffer. With unused, only addresses no buffer has held yet
        (above the high-water mark): where bytes preloaded before the program starts stay
        intact until it reads them. At `at` where the buffer fits there (a home held for it)."""
        size = align_up(max(size, 1), self.granule)
        gaps = list(self._gaps())
        if unused:
            gaps = [(max(a, self.peak), a + room - max(a, self.peak)) for a, room in gaps if a + room > self.peak]
        i = None if at is None else next((k for k, (a, room) in enumerate(gaps) if a <= at and at + size <= a + room), None)
        if at is not None and i is not None:
            gaps[i] = (at, size)
        else:
            i = self._pick(gaps, size)
        if i is None:
            largest = max((room for _, room in gaps), default=0)
            raise OutOfMemoryError(
                f"{self.mem}: cannot place {name} ({size} bytes): {self.free_bytes()} of {self.capacity} bytes free, "
                f"largest free block {largest}; live: {self.live_text()}"
            )
        addr = gaps[i][0]
        self.live[addr] = (size, name)
        self._free = None
        self.peak = max(self.peak, addr + size)
        return addr, size

    def side_by_side(self, nbytes: int, name: str, most: int) -> tuple[list[int], int]:
        """(the addresses of up to `most` buffers of nbytes placed one after another as alloc
        would place them, as many as fit: at least one, their size), placing none of them; the
        high-water mark rises as if they all were placed. An Emitter's staging buffer takes one
        of them (Emitter.stage_buffer) without placing and releasing the others."""
        size = align_up(max(nbytes, 1), self.granule)
        addrs: list[int] = []
        if self.strategy == "first_fit":  # the gaps in order, each filled before the next (what _pick's first fit gives)
            for addr, room in self._gaps():
                while room >= size and len(addrs) < most:
                    addrs.append(addr)
                    addr, room = addr + size, room - size
        else:
            gaps = [list(g) for g in self._gaps()]
            while len(addrs) < most:
                i = self._pick(gaps, size)
                if i is None:
                    break
                addrs.append(gaps[i][0])
                gaps[i][0] += size
                gaps[i][1] -= size
        if not addrs:
            self.alloc(nbytes, name)  # none fits: alloc's error names it
        self.peak = max(self.peak, max(addrs) + size)
        return addrs, size

    def take(self, addr: int, size: int, name: str) -> None:
        """Place a buffer of `size` (a granule multiple) at `addr`, one of side_by_side's."""
        self.live[addr] = (size, name)
        self._free = None

    def reserve(self, nbytes: int, why: str) -> tuple[int, int]:
        """Take nbytes (rounded up to the granule) off the top of the memory for good, before
        anything else is placed."""
        size = align_up(nbytes, self.granule)
        if size > self.capacity:
            raise ConfigError(f"{why}: {size} bytes of {self.mem} asked, its capacity is {self.capacity}")
        addr = (self.capacity - size) // self.granule * self.granule
        self.live[addr] = (size, why)
        self._free = None
        return addr, size

    def free(self, addr: int) -> None:
        del self.live[addr]
        self._free = None

    def live_text(self, most: int = 5) -> str:
        """The largest live buffers (name and bytes), for an out-of-memory message."""
        live = sorted(self.live.values(), key=lambda v: -v[0])
        text = ", ".join(f"{n} ({s} B)" for s, n in live[:most]) + (f" and {len(live) - most} more" if len(live) > most else "")
        return text or "nothing"


def shortfall(allocators: Mapping[str, Allocator], per_mem: Mapping[str, Iterable[int]]) -> str:
    """For an out-of-memory message: the bytes buffers of these sizes (memory -> sizes) take in
    each memory, each rounded up to its granule, what is free there and what is live."""
    return "; ".join(
        f"{sum(align_up(max(n, 1), allocators[m].granule) for n in sizes)} bytes of {m} ({allocators[m].free_bytes()} free), "
        f"live there: {allocators[m].live_text()}"
        for m, sizes in per_mem.items()
    )
