"""Tiles: boxes of an N-d iteration space, how large they may be, and the regions they cover."""

import heapq
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeAlias

import numpy as np

from ... import dtypes
from ...instructions import Region

Extents: TypeAlias = Sequence[int]  # a box's extent along each dimension
Fits: TypeAlias = Callable[[Any], bool]  # whether a tile of these extents fits what is free


def dim_names(rank: int) -> tuple[str | None, ...]:
    """The policy's names (isa/lower/policy.py) of an output's dimensions: "n" (batch), "c"
    (channels), then the last three "d", "h", "w"; dimensions between have none (no limit)."""
    names = ("n", "c")[:rank]
    spatial = ("d", "h", "w")[max(0, 3 - (rank - 2)):]
    return names + (None,) * max(0, rank - 5) + (spatial if rank > 2 else ())


def choose_tile(shape: Extents, fits: Fits, limits: Extents | None = None) -> tuple[int, ...] | None:
    """The largest box (extents) with fits(extents) true, keeping inner dimensions whole, each
    at most its limit (default: the shape).

    Outer dimensions shrink first, so each tile row stays a long contiguous run in DDR; the
    first dimension that can't stay whole is cut as long as it still fits. Returns None when
    not even one element fits.
    """
    limits = tuple(shape) if limits is None else limits
    tile = list(limits)
    for d in range(len(shape)):
        if fits(tile):
            return tuple(tile)
        tile[d] = 1
        if fits(tile):
            lo, hi = 1, limits[d]
            while lo < hi:
                mid = (lo + hi + 1) // 2
                tile[d] = mid
                if fits(tile):
                    lo = mid
                else:
                    hi = mid - 1
            tile[d] = lo
            return tuple(tile)
    return tuple(tile) if fits(tile) else None


def budgeted_tile(shape: Extents, fits: Fits, moved: Callable[[Any], float], budget: float | None,
                  limits: Extents | None = None) -> tuple[int, ...] | None:
    """The largest tile that fits and moves at most `budget` bytes a step (see
    pipeline.step_budget); the largest that fits when none keeps to it or there is no budget."""
    return (budget and choose_tile(shape, lambda t: fits(t) and moved(t) <= budget, limits)) or choose_tile(shape, fits, limits)


def boxes(shape: Extents, tile: Extents) -> Iterator[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(starts, extents) of every tile, row-major; edge tiles are cut to the shape."""
    ranges = [range(0, n, t) for n, t in zip(shape, tile)]
    for starts in itertools.product(*ranges):
        yield starts, tuple(min(t, n - s) for s, t, n in zip(starts, tile, shape))


def operand_box(shape: Extents, starts: Extents, extents: Extents) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The box of an operand broadcast to the iteration space: its size-1 dimensions stay 0:1."""
    return (
        tuple(0 if n == 1 else s for n, s in zip(shape, starts)),
        tuple(1 if n == 1 else e for n, e in zip(shape, extents)),
    )


def sub_region(region: Region, starts: Extents, extents: Extents) -> Region:
    """The part of a region covered by a box."""
    mem, addr, dtype, _, strides = region
    offset = 0
    for s, st in zip(starts, strides):
        offset += s * st
    return tuple.__new__(Region, (mem, addr + offset * dtypes.itemsize(dtype), dtype, tuple(extents), strides))


def broadcast_view(region: Region, extents: Extents) -> Region:
    """Read a region as if it had the given extents: its size-1 dimensions get stride 0."""
    strides = tuple(0 if n == 1 and e != 1 else s for n, e, s in zip(region.shape, extents, region.strides))
    return Region(region.mem, region.addr, region.dtype, tuple(extents), strides)


def nbytes(dtype: str, extents: Extents) -> int:
    """The bytes of a dense box of these extents."""
    n = dtypes.itemsize(dtype)
    for e in extents:
        n *= e
    return n


def halvings(n: int, unit: int) -> list[int]:
    """n, then about n/2, n/4, ... as multiples of unit (or n itself), down to 1."""
    out, v = [n], n
    while v > 1:
        v = max(1, -(-(v // 2) // unit) * unit if v // 2 >= unit else v // 2)
        if v < out[-1]:
            out.append(v)
        else:
            break
    return out


def splits(n: int, most: int = 8) -> list[int]:
    """halvings(n, 1) and the extents that cut n into 3 to `most` tiles as equal as can be:
    a row count such as 56 is best cut 8 x 7 or 7 x 8 rather than only in halves."""
    return sorted(set(halvings(n, 1)) | {-(-n // k) for k in range(3, most + 1)}, reverse=True)


def filling_blocks(limit: int, depth: int, area: int) -> list[int]:
    """Reduction blocks of whole channels, each bringing `area` kernel positions to a product
    of the matrix unit's `depth`, that fill about 1, 2, 4, ... of its depth steps where a
    channel count in multiples of the depth would leave the last step partly empty: with a
    3x3 kernel and a depth of 256 (the TPU v1's), 28 channels are 252 of 256 (32 would be 288
    of 512). Up to `limit` channels; below `area` steps only (from there on a multiple of the
    depth in channels fills every step)."""
    return [j * depth // area for j in (1 << i for i in range(area.bit_length())) if j < area and 0 < j * depth // area <= limit]


def candidates(shape: Extents, reduction: int, units: tuple[int, int], fits: Callable[[tuple, int], bool],
               limits: Extents | None = None, blocks: list[int] | None = None, area: int = 1) -> list[tuple[tuple, int]]:
    """The (tile, reduction block) candidates that fit for an output of `shape` (batch,
    channels, spatial...) with a reduction of `reduction`, for a search of the least estimate
    (`least`). limits: the largest extent of each dimension and then of the reduction block
    (default: the shape and the reduction); blocks: the reduction blocks to try (default:
    halvings, and the filling_blocks of a reduction whose every element brings `area` kernel
    positions).

    Candidates halve the batch, the channels (in multiples of units[0]) and the reduction (in
    multiples of units[1]), and cut the first spatial dimension (splits); other spatial
    dimensions stay whole unless even a single row is too big, when choose_tile cuts them. More
    memory only adds candidates, so it never raises the least cost."""
    channel_unit, reduce_unit = units
    limits = tuple(shape) + (reduction,) if limits is None else limits
    found = []
    fits = _asked_once(fits)
    blocks = blocks or sorted(set(halvings(limits[-1], reduce_unit) + filling_blocks(limits[-1], reduce_unit, area)), reverse=True)
    rows = splits(limits[2]) if len(shape) > 2 else [None]
    rest = tuple(limits[3:-1])
    first: dict[tuple[int, int], int] = {}  # (batch, channel) positions -> the first of rows that fits them with the block before
    before = None
    for tic in blocks:
        larger: dict[tuple[int, int], int] = first if before is not None and tic < before else {}
        first, before = {}, tic  # the same with this block
        for b, tn in enumerate(halvings(limits[0], 1)):
            for c, toc in enumerate(halvings(limits[1], channel_unit)):
                tiles = [(tn, toc) + ((toh,) + rest if toh is not None else ()) for toh in rows]
                # a tile that fits with more of the block, the batch or the channels fits with less
                known = min(larger.get((b, c), len(rows)), first.get((b - 1, c), len(rows)), first.get((b, c - 1), len(rows)))
                # and where the fewest rows do not fit, none do
                none = known == len(rows) and not fits(tiles[-1], tic)
                k = first[b, c] = known if none else next((k for k in range(known) if fits(tiles[k], tic)), known)
                found += [(tile, tic) for tile in tiles[k:]]
                if k == len(rows) and len(shape) > 3:  # a row too big: cut the rest of the spatial dims
                    cut = choose_tile(shape[3:], lambda rest: fits((tn, toc, 1) + tuple(rest), tic), limits[3:-1])  # noqa: B023
                    if cut:
                        found.append(((tn, toc, 1) + tuple(cut), tic))
    return found


def _asked_once(fits: Callable[[tuple, int], bool]) -> Callable[[tuple, int], bool]:
    """fits, each (tile, block) asked once: candidates() and choose_tile ask some again."""
    known: dict[tuple[tuple, int], bool] = {}

    def once(tile: tuple, block: int) -> bool:
        key = (tuple(tile), block)
        if key not in known:
            known[key] = fits(key[0], block)
        return known[key]

    return once


def least(floors: np.ndarray, ties: Sequence[np.ndarray], make: Callable[[int], Any], choices: Sequence[Any],
          bounds_hold: bool = True, admits: Callable[[int], bool] | None = None,
          blocks: np.ndarray | None = None) -> tuple[Any, float] | None:
    """(The choice of least estimate among `choices`, its estimated cycles), ties to the least
    `ties` (arrays, the first compared first); None when there are none. floors[i] is a lower bound of choice i's
    estimated cycles worked out without it (an array over the candidates, in closed form);
    make(i) makes its Estimate (isa/lower/schedule/estimate.py), whose bound() is a tighter lower bound
    and cycles() the estimate. Candidates are made in order of their floors, and only those
    whose bounds are below the best estimate found so far are replayed. Where the bounds hold
    (bounds_hold), best first: a made candidate waits its turn by its bound, so the replays go
    to the likeliest first; where they are only a guide (several units replayed together share
    memories the bound gives each a fixed share of), each is replayed as soon as it is made.
    admits(i): whether choice i is one at all (its buffers fit), asked only of those whose floors
    are below the best estimate found so far: the others are passed over as if absent.
    blocks (an array over the candidates, each one's reduction block): where only the block of
    the choice is asked, the search stops as soon as every candidate that could still replace
    the best has the best's block, the block the search would end with (the unmade of other
    blocks are made ahead of their turn for their bounds; the search goes on as it would); the
    choice returned then has that block, and is not otherwise the least."""
    if not len(choices):
        return None
    order = np.lexsort((*reversed(ties), floors)).tolist()  # the unmade, by (floor, ties, index)
    ranked, ranked_floors = (blocks[order], floors[order]) if blocks is not None else (None, None)
    waiting: list[tuple] = []  # a heap of the made that wait their turn: (bound, ties, index, Estimate)
    ahead: dict[int, tuple[Any, float] | None] = {}  # index -> (Estimate, its bound) made ahead of its turn, None if not admitted
    best, k = None, 0

    def made_of(i: int) -> tuple[Any, float] | None:
        """(Estimate, its bound) of choice i, None if it is not admitted."""
        if i in ahead:
            return ahead.pop(i)
        if admits is not None and not admits(i):
            return None
        made = make(i)
        return made, made.bound()

    def decided() -> bool:
        """Whether every candidate whose floor and bound are below the best estimate has the best's block."""
        assert best is not None and blocks is not None and ranked is not None and ranked_floors is not None
        block, cut = blocks[best[2]], best[0]
        if any(blocks[w[2]] != block for w in waiting if w[0] < cut):
            return False
        below = k + int(np.searchsorted(ranked_floors[k:], cut))  # the unmade whose floors are below it
        for j in np.flatnonzero(ranked[k:below] != block).tolist():
            i = order[k + j]
            if i not in ahead:
                ahead[i] = made_of(i)
            known = ahead[i]
            if known is not None and known[1] < cut:
                return False
        return True

    while k < len(order) or waiting:
        if blocks is not None and best is not None and decided():
            break
        if k < len(order):
            i = order[k]
            unmade = (floors[i], tuple(t[i] for t in ties), i, None)
        if k < len(order) and not (waiting and waiting[0][:3] < unmade[:3]):
            low, tie, i, made = unmade
            k += 1
        else:
            low, tie, i, made = heapq.heappop(waiting)
        if best is not None and low >= best[0]:
            break
        if made is None:
            known = made_of(i)
            if known is None:
                continue
            made, bound = known
            if best is not None and bound >= best[0]:
                continue
            if bounds_hold:
                heapq.heappush(waiting, (max(low, bound), tie, i, made))
                continue
        found = (made.cycles(), tie, i)
        if best is None or found[:2] < best[:2]:
            best = found
    return None if best is None else (choices[best[2]], best[0])
