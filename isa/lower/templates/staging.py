"""Copies between tensors where they live, staging through on-chip memory in chunks it can hold.

A route from DDR to DDR may pass through on-chip memories (where no engine copies DDR to DDR,
as on an Ascend AI core: GM -> UB -> GM); each hop stages through a buffer placed for it
(isa/lower/memory/route.py). Chunks are boxes of the copy's iteration space (isa/lower/schedule/tiling.py),
outer dimensions cut first, each as large as every memory on the way can hold twice over (the
route's staging slots, so consecutive chunks pipeline). A chunk whose source comes in runs
shorter than a burst is reordered on the way through, or, where the route goes direct, may go
round through local memory (isa/lower/templates/transpose.py).

On a chip of several cores a copy may be spread: cut into at least a chunk per core (but no
chunk smaller than a DMA moves in its own latency) and dealt among the cores, each moving its
chunks along its own route (isa/lower/memory/route.py), its writes disjoint from the others'.
"""
from __future__ import annotations

import math
from contextlib import nullcontext
from typing import TYPE_CHECKING

from ... import dtypes
from ...errors import OutOfMemoryError, UnsupportedError
from ...instructions import Region
from ..memory.alloc import shortfall
from ..memory.route import route
from ..schedule.pipeline import deal, least_step, pipeline
from ..schedule.tiling import boxes, choose_tile, nbytes, sub_region
from .transpose import cheaper, detour, on_chip, staged_reorder

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from chips.schema import Chip

    from ...ops.arrange import View
    from ..context import Lowering
    from ..emit import Buf

    Needs = Callable[[tuple[int, ...]], list[tuple[str, int]]]  # a box's extents -> the (memory, bytes) it holds at once
    Box = tuple[tuple[int, ...], tuple[int, ...]]  # (starts, extents) of a chunk


def view_region(ctx: Lowering, name: str, view: View) -> Region:
    """The region of tensor `name`, where it lives, that an op's View (offset, shape, element
    strides) names. A View counts elements of the dense tensor; where the tensor lies strided
    (its Buf holds a window: a read of a cache, isa/lower/templates/cache.py), each of its steps
    is taken as the index steps it makes, which must not carry from one axis to the next."""
    t, buf = ctx.graph.tensors[name], ctx.home[name]
    if buf.window is None:
        return Region(buf.mem, buf.addr + view.offset * dtypes.itemsize(t.dtype), t.dtype, tuple(view.shape), tuple(view.strides))
    return _strided_view(buf.region(t.dtype, t.shape), t.name, view)


def _strided_view(where: Region, name: str, view: View) -> Region:
    """View (in elements of a dense tensor of where.shape) of the tensor lying at Region `where`."""
    shape = where.shape
    dense = [math.prod(shape[k + 1:]) for k in range(len(shape))]

    def steps(n: int) -> list[int]:  # n dense elements as index steps per axis (sign kept: -(steps of -n))
        sign, n = (-1, -n) if n < 0 else (1, n)
        return [sign * (n // d % s) if k else sign * (n // d) for k, (d, s) in enumerate(zip(dense, shape))]

    start, moves = steps(view.offset), [steps(s) for s in view.strides]
    for k, n in enumerate(shape):  # the view's extreme indices on each axis stay on it: no step carried
        low = start[k] + sum((e - 1) * min(m[k], 0) for e, m in zip(view.shape, moves))
        high = start[k] + sum((e - 1) * max(m[k], 0) for e, m in zip(view.shape, moves))
        if low < 0 or high >= n:
            raise UnsupportedError(f"tensor {name}: a view (offset {view.offset}, shape {view.shape}, strides {view.strides}) of it "
                                   f"crosses its axes, and it lies strided ({where.text()})")
    item = dtypes.itemsize(where.dtype)
    addr = where.addr + sum(i * s for i, s in zip(start, where.strides)) * item
    strides = tuple(sum(a * s for a, s in zip(m, where.strides)) for m in moves)
    return Region(where.mem, addr, where.dtype, tuple(view.shape), strides)


def stages(chip: Chip, src: str, dst: str) -> list[str]:
    """The memories a copy from src to dst stages through."""
    return [to for _, _, to in route(chip, src, dst)[:-1]]


def held_whole(mems: list[str], dtype: str) -> Needs:
    """needs() of a chunk held whole in each of mems."""
    return lambda extents: [(m, nbytes(dtype, extents)) for m in mems]


def chunks(ctx: Lowering, shape: tuple[int, ...], needs: Needs, what: str, rows_whole: bool = False,
           most: Callable[[tuple[int, ...]], bool] | None = None) -> Iterator[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Boxes of `shape`, each as large as fits: needs(extents) gives the (memory, bytes) a box
    holds at once, most(extents) (if given) whether it is small enough. Outer dimensions are
    cut first; with rows_whole the first dimension (the rows) is cut last."""
    em = ctx.em

    def fits(extents: Sequence[int]) -> bool:
        if most is not None and not most(tuple(extents)):
            return False
        sizes: dict[str, list[int]] = {}
        for mem, size in needs(tuple(extents)):
            sizes.setdefault(mem, []).append(size)
        return all(em.allocators[mem].fits(s) for mem, s in sizes.items())

    if rows_whole:
        turned = choose_tile(shape[1:] + shape[:1], lambda t: fits(tuple(t[-1:]) + tuple(t[:-1])))
        tile = turned and turned[-1:] + turned[:-1]
    else:
        tile = choose_tile(shape, fits)
    if tile is None:
        per_mem: dict[str, list[int]] = {}
        for mem, size in needs((1,) * len(shape)):
            per_mem.setdefault(mem, []).append(size)
        raise OutOfMemoryError(f"{what}: a single element needs {shortfall(em.allocators, per_mem)}")
    return boxes(shape, tile)


def staged_copy(ctx: Lowering, op: str, src: Region, src_buf: Buf, dst: Region, dst_buf: Buf, spread: bool = False) -> None:
    """Copy region src to region dst (same shape), in chunks when the route stages, each small
    enough that every memory on the way holds two of them (so one chunk's first hop overlaps
    the last chunk's last hop, isa/lower/memory/route.py); with spread, dealt among the chip's cores.
    A transpose goes round through local memory where that is cheaper (isa/lower/templates/transpose.py)."""
    if not dst.nbytes:  # an empty tensor: nothing moves
        return None
    cores = ctx.chip.cores if spread else 1
    most = None
    if cores > 1:
        share = max(dst.nbytes / cores, least_step(ctx, src.mem, dst.mem), dtypes.itemsize(dst.dtype))
        most = lambda extents: nbytes(dst.dtype, extents) <= share  # noqa: E731
    ways = [w for w in (detour(ctx.chip, src, dst, core if cores > 1 else None) for core in range(cores)) if w is not None]
    if len(ways) == cores:
        boxes = list(chunks(ctx, dst.shape, held_whole([ways[0].mem] * 4, dst.dtype), f"{op} (transposing)", most=most))
        if cheaper(ctx.chip, ways[0], src, dst, ((sub_region(src, s, e), sub_region(dst, s, e)) for s, e in boxes)):
            return _dealt(ctx, boxes, cores, dst_buf, lambda core, run: pipeline(
                [on_chip(ctx.em, ways[core], sub_region(src, s, e), src_buf, sub_region(dst, s, e), dst_buf, op) for s, e in run], True))
    needs = held_whole(stages(ctx.chip, src.mem, dst.mem) * 2, dst.dtype)
    boxes = list(chunks(ctx, dst.shape, needs, f"{op} (copying)", most=most))

    def copied(core: int, run: list[Box]) -> None:
        for s, e in run:
            staged_reorder(ctx.em, sub_region(src, s, e), src_buf, sub_region(dst, s, e), dst_buf, op, core if cores > 1 else None)

    return _dealt(ctx, boxes, cores, dst_buf, copied)


def _dealt(ctx: Lowering, boxes: list[Box], cores: int, dst_buf: Buf, move: Callable[[int, list[Box]], object]) -> None:
    """move(core, run) for the boxes dealt among `cores` cores in runs, their writes to dst_buf
    disjoint where several cores write it."""
    runs = deal(boxes, cores)
    with ctx.em.disjoint([dst_buf]) if sum(map(bool, runs)) > 1 else nullcontext():
        for core, run in enumerate(runs):
            move(core, run)
