"""First-fit allocation of one memory's flat address space.

Buffers start on, and are sized in, the memory's granule (its per-lane alignment times its
lanes, so a buffer in Sophgo local memory occupies the same address range in every lane).
"""

from ..errors import OutOfMemoryError


def align_up(value, granule):
    return -(-value // granule) * granule


class Allocator:
    def __init__(self, mem, capacity, granule):
        self.mem, self.capacity, self.granule = mem, capacity, granule
        self.live = {}  # addr -> (size, name)
        self.peak = 0

    def free_bytes(self):
        return self.capacity - sum(size for size, _ in self.live.values())

    def _gaps(self):
        cursor = 0
        for addr in sorted(self.live):
            if addr > cursor:
                yield cursor, addr - cursor
            cursor = addr + self.live[addr][0]
        if cursor < self.capacity:
            yield cursor, self.capacity - cursor

    def fits(self, sizes):
        """Whether buffers of these sizes could all be allocated now (first fit, in order)."""
        gaps = [list(g) for g in self._gaps()]
        for size in sizes:
            size = align_up(max(size, 1), self.granule)
            gap = next((g for g in gaps if g[1] >= size), None)
            if gap is None:
                return False
            gap[0] += size
            gap[1] -= size
        return True

    def alloc(self, size, name):
        size = align_up(max(size, 1), self.granule)
        for addr, room in self._gaps():
            if room >= size:
                self.live[addr] = (size, name)
                self.peak = max(self.peak, addr + size)
                return addr, size
        largest = max((room for _, room in self._gaps()), default=0)
        live = ", ".join(f"{n} ({s} B)" for s, n in sorted(self.live.values(), key=lambda v: -v[0])[:5])
        raise OutOfMemoryError(
            f"{self.mem}: cannot place {name} ({size} bytes): {self.free_bytes()} of {self.capacity} bytes free, "
            f"largest free block {largest}; live: {live or 'nothing'}"
        )

    def free(self, addr):
        del self.live[addr]
