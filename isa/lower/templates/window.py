"""Sliding windows over N-d feature maps: which input an output tile of a convolution or a
pooling reads, and how it is laid out in local memory.

Along each spatial dimension the window slides over a virtual input: the real input with
`stuff - 1` zeros between elements (a transposed convolution's zero insertion) whose element
0 sits at position `offset` (the leading padding; negative crops), then `stride` steps of the
window, `dilation` apart. An output tile [o0, o0 + n) reads virtual positions
[o0 * stride, (n - 1) * stride + dilation * (kernel - 1) + 1) from there: the tile's buffer holds
exactly those, zeros where no real element lands (padding, inserted zeros), the real ones
placed by a strided DMA.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ... import dtypes
from ...instructions import Region, Vector
from ..memory.route import copy, route
from ..schedule.tiling import sub_region

if TYPE_CHECKING:
    from collections.abc import Sequence

    from chips.schema import Engine

    from ...graph import Tensor
    from ..context import Lowering
    from ..emit import Buf

    Read = tuple[int, int, int, bool]  # Axis.reads: (first real index, count, its buffer position, zeros needed)
    Fillers = dict[tuple[float, str, str], Buf]  # (value, dtype, memory) -> a one-element copy of the value there


@dataclass(frozen=True)
class Axis:
    size: int  # real input length
    kernel: int
    stride: int = 1
    dilation: int = 1
    offset: int = 0  # virtual position of real element 0 (leading padding)
    stuff: int = 1  # virtual distance between real elements (transposed convolution's stride)
    out: int = 0  # output length

    def extent(self, n: int) -> int:
        """Virtual positions an output run of n needs."""
        return (n - 1) * self.stride + self.dilation * (self.kernel - 1) + 1

    def reads(self, o0: int, n: int) -> Read:
        """(first real index, count, buffer position of the first, whether zeros are needed)."""
        v0, length = o0 * self.stride, self.extent(n)
        lo = max(0, -(-(v0 - self.offset) // self.stuff))
        hi = min(self.size, (v0 + length - 1 - self.offset) // self.stuff + 1)
        count = max(hi - lo, 0)
        first = self.offset + lo * self.stuff - v0
        gaps = count == 0 or self.stuff > 1 or first > 0 or first + (count - 1) * self.stuff < length - 1
        return lo, count, first, gaps


def conv_axes(sizes: tuple[int, ...], kernels: tuple[int, ...], strides: tuple[int, ...], dilations: tuple[int, ...],
              pads: Sequence[tuple[int, int]]) -> tuple[Axis, ...]:
    """Axes of an ordinary convolution or pooling; pads are (before, after) per dimension."""
    return tuple(
        Axis(n, k, s, d, pb, 1, (n + pb + pa - d * (k - 1) - 1) // s + 1)
        for n, k, s, d, (pb, pa) in zip(sizes, kernels, strides, dilations, pads)
    )


def deconv_axes(sizes: tuple[int, ...], kernels: tuple[int, ...], strides: tuple[int, ...], dilations: tuple[int, ...],
                pads: Sequence[tuple[int, int]]) -> tuple[Axis, ...]:
    """Axes of a transposed convolution, run as a stride-1 convolution over the zero-stuffed input."""
    return tuple(
        Axis(n, k, 1, d, d * (k - 1) - pb, s, (n - 1) * s - pb - pa + d * (k - 1) + 1)
        for n, k, s, d, (pb, pa) in zip(sizes, kernels, strides, dilations, pads)
    )


def tile_reads(axes: Sequence[Axis], starts: tuple[int, ...],
               extents: tuple[int, ...]) -> tuple[list[Read], tuple[int, ...]]:
    """Per axis (first real index, count, buffer position, zeros needed), and the buffer extents."""
    reads = [a.reads(o0, n) for a, o0, n in zip(axes, starts, extents)]
    return reads, tuple(a.extent(n) for a, n in zip(axes, extents))


def placed(buffer_region: Region, axes: Sequence[Axis],
           reads: Sequence[Read], lead: int) -> Region:
    """The part of a dense tile buffer (lead dims, then one per axis) the real input fills."""
    strides = buffer_region.strides
    offset = sum(first * st for (_, _, first, _), st in zip(reads, strides[lead:]))
    shape = buffer_region.shape[:lead] + tuple(count for _, count, _, _ in reads)
    steps = strides[:lead] + tuple(st * a.stuff for a, st in zip(axes, strides[lead:]))
    item = _itemsize(buffer_region)
    return Region(buffer_region.mem, buffer_region.addr + offset * item, buffer_region.dtype, shape, steps)


def window_view(buffer_region: Region, axes: Sequence[Axis], lead: int,
                kernel_offsets: tuple[int, ...] | None = None) -> Region:
    """Read a tile buffer (lead dims, then one per axis) as the output tile's windows.

    With kernel_offsets, the view of one kernel position: shape lead + outputs. Without, the
    whole window: shape lead + outputs + kernel, ready for a reduction or an implicit im2col.
    """
    strides = buffer_region.strides
    spatial = strides[lead:]
    outputs = tuple((n - 1 - a.dilation * (a.kernel - 1)) // a.stride + 1 for a, n in zip(axes, buffer_region.shape[lead:]))
    out_strides = tuple(st * a.stride for a, st in zip(axes, spatial))
    item = _itemsize(buffer_region)
    if kernel_offsets is not None:
        offset = sum(k * a.dilation * st for k, a, st in zip(kernel_offsets, axes, spatial))
        return Region(buffer_region.mem, buffer_region.addr + offset * item, buffer_region.dtype,
                      buffer_region.shape[:lead] + outputs, strides[:lead] + out_strides)
    kernel_strides = tuple(st * a.dilation for a, st in zip(axes, spatial))
    return Region(buffer_region.mem, buffer_region.addr, buffer_region.dtype,
                  buffer_region.shape[:lead] + outputs + tuple(a.kernel for a in axes),
                  strides[:lead] + out_strides + kernel_strides)


def _itemsize(region: Region) -> int:
    return dtypes.itemsize(region.dtype)


def load_window(ctx: Lowering, engine: Engine, x: Tensor, region: Region, buf: Buf, axes: Sequence[Axis],
                reads: Sequence[Read], lead_starts: tuple[int, ...], fill: float, op: str,
                fillers: Fillers | None = None) -> None:
    """Emit the loads of one input tile: `fill` (a number) where no real element lands, then the
    real elements by a strided DMA. x is the graph tensor; lead_starts the tile's first index in
    each leading dimension (batch, channel).

    The vector engine writes the fill where the tile is in its memory. Elsewhere (a matrix
    unit's operand memory) a DMA does, reading one element with zero strides, as an Ascend
    MTE1 pads on its way to L0A: from a copy of the value in the memory the last hop of the
    route from DDR starts in, placed once per op and unit in `fillers` (which the caller
    releases), or from DDR itself when the route has one hop."""
    if any(gaps for _, _, _, gaps in reads):
        if region.mem == engine.memory:
            ctx.em.emit(engine.name, Vector("copy", region, (fill,), "float32" if isinstance(fill, float) else "int64", op), writes=(buf,))
        else:
            src = filler(ctx, fillers, x.dtype, fill, region.mem, op)
            copy(ctx.em, Region(src.mem, src.addr, x.dtype, region.shape, (0,) * len(region.shape)), src, region, buf, op)
    if all(count for _, count, _, _ in reads):
        lead = len(lead_starts)
        home = ctx.home[x.name]
        full = home.region(x.dtype, x.shape)
        starts = tuple(lead_starts) + tuple(lo for lo, _, _, _ in reads)
        extents = region.shape[:lead] + tuple(count for _, count, _, _ in reads)
        copy(ctx.em, sub_region(full, starts, extents), home, placed(region, axes, reads, lead), buf, op)


def filler(ctx: Lowering, fillers: Fillers | None, dtype: str, value: float, mem: str, op: str) -> Buf:
    """The Buf of one element of value that a DMA fills a region of mem from (see load_window)."""
    const = ctx.constant(op, value, dtype)
    near = route(ctx.chip, "ddr", mem)[-1][1]
    if near == const.mem:
        return const
    key = (value, dtype, mem)
    if fillers is None:  # load_window's caller gives it where a fill goes through another memory
        raise ValueError(f"{op}: a fill through {near} needs the op's fillers")
    if key not in fillers:
        fillers[key] = ctx.em.alloc(near, dtypes.itemsize(dtype), f"{op}/fill")
        copy(ctx.em, const.region(dtype, (1,)), const, fillers[key].region(dtype, (1,)), fillers[key], op)
    return fillers[key]
