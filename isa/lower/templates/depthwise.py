"""The depthwise convolution template: a convolution whose groups are its channels (groups ==
input channels == output channels) has no reduction to give the matrix unit, so it runs on the
vector unit as one multiply-accumulate per kernel position over the output tile, the input tile
read through the window's strides (isa/lower/templates/window.py). Its output is tiled over
(batch, channels, spatial), every channel in one box, and the tiles are dealt among the vector
engines; the rest (windows, offline constants, zero points, the epilogue and the fused tail,
slicing by rows in a layer group) is the convolution's (isa/lower/templates/conv.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ... import dtypes
from ...instructions import Region, Vector
from ..schedule.pipeline import step_budget
from ..schedule.tiling import budgeted_tile, sub_region
from .conv import Convolution, Operands
from .window import window_view

if TYPE_CHECKING:
    from ..context import Lowering, Unit
    from ..emit import Buf
    from ..schedule.fusion import Group

Tile = tuple[int, ...]


def lower_depthwise(ctx: Lowering, group: Group) -> None:
    _Depthwise(ctx, group).run()


def plan_depthwise(ctx: Lowering, group: Group) -> Convolution:
    """The plan of a depthwise convolution group, to run over rows of its output (isa/lower/schedule/chain.py)."""
    return _Depthwise(ctx, group)


class _Depthwise(Convolution):
    zp_buffer = False  # the second product multiplies by zp_r as a number

    def _units(self, ctx: Lowering) -> list[Unit]:
        return ctx.units("vector")

    def _operands(self) -> Operands:
        return Operands(1, self._readable_in_place(self.vx.memory, 1), False, False)

    def _memories(self) -> tuple[str, str, str]:
        return (self.vmem,) * 3

    def _channels(self, toc: int, tic: int) -> int:
        """A depthwise tile reads its own channels."""
        return toc

    def _channel_starts(self, g: int, c0: int, i0: int, toc: int, tic: int) -> tuple[tuple[int, int], int]:
        return (c0, toc), c0

    @property
    def tiled_channels(self) -> int:
        """Every channel in one box."""
        return self.oc

    def _walked(self) -> tuple[int, int]:
        """No reduction walked (the block is 1), no repeats."""
        return 1, 1

    def _weight_shape(self, toc: int, tic: int) -> Tile:
        """A weight block [C, 1, k...]."""
        return (toc, 1) + tuple(self.kernel)

    def _kzp_axis(self) -> int:
        return 0

    def _weight_regions(self, w_buf: Buf, oc0: int, i0: int, toc: int, tic: int) -> tuple[Region, Buf, Region, Buf]:
        """(source, destination) regions of a weight block's load into w_buf."""
        src_buf, dtype = self.weight
        shape = self._weight_shape(toc, tic)
        src = sub_region(src_buf.region(dtype, self.w.shape), (oc0, 0) + (0,) * len(self.kernel), shape)
        return src, src_buf, w_buf.region(dtype, shape), w_buf

    def _search(self) -> tuple[tuple[Tile, int, bool], float]:
        """A depthwise tile reads only its own channels, so the largest that fits (and keeps the
        pipeline's steps in budget) is best."""
        shape = self.span(self.tiled_channels)
        budget = step_budget(self.ctx, self._moved(shape, 1), self.vmem, len(self.units))
        tile = budgeted_tile(shape, lambda t: self._fits(t, 1), lambda t: self._moved(t, 1), budget, self.ctx.tile_limits(shape))
        return self._searched(((tile, 1, False), self._schedule(tile, 1, len(self.units)).cycles()) if tile else None)

    def floor(self) -> float:
        """No lower bound without a search (0): the search is a direct one."""
        return 0

    def _product(self, acc_bufs: dict[Any, Buf], x_buf: Buf, x_region: Region, w_buf: Buf, oc0: int,
                 ch_in: tuple[int, int], tile: Tile, toc: int, tic: int, first: bool) -> None:
        """acc = the input tile convolved with the weight block (and the asymmetric mode's second
        accumulator, the input times zp_r)."""
        out_extents = (tile[0], toc) + tuple(tile[1:])
        for key, weight in (("acc", w_buf), ("acc_zp", None)) if self.asym else (("acc", w_buf),):
            acc = acc_bufs[key]
            self._depthwise(x_region, x_buf, weight, acc.region(self.acc_dtype, out_extents), acc)

    def _depthwise(self, x_region: Region, x_buf: Buf, w_buf: Buf | None, acc_region: Region, acc: Buf) -> None:
        """acc = sum over kernel positions of the shifted input times that position's weight
        (w_buf None: times zp_r, the asymmetric mode's second product)."""
        dtype = self.operand_dtype or self.weight[1]
        cdt = "float32" if dtypes.is_float(self.acc_dtype) else "int64"
        item = dtypes.itemsize(dtype)
        flip = self.opdef.transposed  # a transposed convolution runs its kernel backwards
        bufs: tuple[Buf, ...]
        for k in np.ndindex(*self.kernel):
            xv = window_view(x_region, self.axes, 2, k)
            j = int(np.ravel_multi_index(tuple(n - 1 - i for i, n in zip(k, self.kernel)) if flip else k, self.kernel))
            if w_buf is None:
                wv, bufs = self.node.params["right_zero_point"], (x_buf,)
            else:
                wv = Region(w_buf.mem, w_buf.addr + j * item, dtype, acc_region.shape, (0, self.k) + (0,) * len(self.axes))
                bufs = (x_buf, w_buf)
            first = not any(k)
            srcs, reads = ((xv, wv), bufs) if first else ((xv, wv, acc_region), bufs + (acc,))
            self.em.emit(self.vx.name, Vector("mul" if first else "mul_add", acc_region, srcs, cdt, self.node.name),
                         reads=reads, writes=(acc,))
