"""The convolution template: conv, deconv and conv3d, with the element-wise ops fused behind
them (a layer group's Tail: bias, activation, ... on the output tile before it leaves).

The output is tiled over (batch, output channels, spatial) within a group of channels, and the
reduction over input channels is walked in blocks. Each step loads the input tile a window
needs (zero-filled where padding or a transposed convolution's inserted zeros fall, the real
elements placed by a strided DMA, isa/lower/templates/window.py) and the matching weight block, and the
matrix unit multiplies them as an implicit GEMM: the input tile read as (batch, outputs...,
channels, kernel...) through strides, the weights as (channels, kernel..., out channels), so
no im2col copy is made. A float bias goes where the matrix unit starts its products from, where
it has such a memory (an Ascend cube's BiasTable, isa/lower/templates/bias_table.py). After the last block
the op's epilogue (bias, requantization) and the tail run on the vector unit and the tile is
stored; where the accumulator's way out converts with the epilogue (an Ascend FixPipe,
isa/lower/templates/in_flight.py), and the tail is none or one ReLU, the DMA storing the accumulator does
it. The accumulator, the bias, the zero points and the epilogue are the tiled templates'
(isa/lower/templates/tiled.py).

A depthwise convolution (groups == channels) has no reduction to give the matrix unit: it has
a vector template of its own (isa/lower/templates/depthwise.py), a `Convolution` as this one's
matrix plan is, which shares everything here but the product and the search.

Output tiles are dealt among the units (a core's matrix engine with its vector engine), each
tile with all its input-channel blocks on one unit. Where the accumulator reaches the vector
memory through shared memory (an Ascend 910B cube core's FixPipe writes to GM or the L2, which
its vector cores read), the staging buffers are placed with the slots.
"""

from __future__ import annotations

import itertools
import math
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ... import costs, dtypes
from ...instructions import Matmul, Region, Vector, dense
from ...ops import REGISTRY, quantized
from ...ops.elementwise import Step
from ..context import operand_memory
from ..memory.route import copy, hop_floor
from ..schedule import estimate
from ..schedule.estimate import Estimate, Work, tiled
from ..schedule.tiling import candidates, nbytes, sub_region
from ..templates import bias_table
from ..templates.in_flight import then_relu
from ..templates.local import Tail
from ..templates.rows import RowsTiled
from ..templates.window import Axis, conv_axes, deconv_axes, load_window, placed, tile_reads, window_view
from .tiled import Bufs, Key, Tiled, per_memory, recorder, tail_roles

if TYPE_CHECKING:
    from chips.schema import Engine

    from ...graph import Graph, Node
    from ...ops.conv import Conv
    from ..context import Lowering, Unit
    from ..emit import Buf
    from ..schedule.estimate import Timed
    from ..schedule.fusion import Group
    from ..schedule.pipeline import Step as PipelineStep
    from ..templates.local import Local, Slot
    from ..templates.rows import Position
    from ..templates.window import Fillers, Read

    Action = Callable[[], None]  # one of a pipeline step's load, compute, store and fill

Tile = tuple[int, ...]
Need = tuple[Key, str, int]  # (buffer key, memory, bytes)
Choice = tuple[Tile, int, bool]  # (output tile, input-channel block, keep the input)
Placed = tuple[int, tuple[int, ...], tuple[int, ...]]  # (group, starts, extents) of an output tile


class Operands(NamedTuple):
    """How a unit multiplies a convolution's operands (Convolution._operands)."""

    batch_slots: int  # batch items the matrix unit multiplies as one group
    in_place: bool  # the input is multiplied where it lives
    keepable: bool  # an input tile may stay while the output-channel blocks walk
    weight_in_place: bool  # the weight is multiplied where it lives


def lower_conv(ctx: Lowering, group: Group) -> None:
    plan_conv(ctx, group).run()


def plan_conv(ctx: Lowering, group: Group) -> Convolution:
    """The plan of a convolution group, to run over rows of its output (isa/lower/schedule/chain.py)."""
    return _Matrix(ctx, group)


def conv_node_axes(graph: Graph, node: Node) -> tuple[Axis, ...]:
    """The window axes of a convolution (not transposed) over its input's spatial dimensions."""
    p, x, w = node.params, graph.tensors[node.inputs[0]], graph.tensors[node.inputs[1]]
    kernel = REGISTRY[node.op].channels(x.shape, w.shape, p["groups"])[2]
    return conv_axes(x.shape[2:], kernel, p["strides"], p["dilations"], p["pads"])


class Convolution(Tiled, RowsTiled):
    """What a convolution's plan does on either unit: its windows, its offline constants, its
    buffers, its steps and their estimate. _Matrix (here) multiplies on the matrix unit;
    isa/lower/templates/depthwise.py's on the vector unit. Each says (the abstract methods) which
    units run it (_units), how and where the operands are multiplied (_operands, _memories), which channels a tile reads
    (_channels, _channel_starts), the weight block's layout (_weight_shape, _weight_regions,
    _kzp_axis), what the estimate walks (_walked), the product (_product) and the search
    (_search, floor)."""

    step_keys = frozenset(("x", "w", "xs", "ws", "izp", "kzp"))
    opdef: Conv
    batch_slots: int  # these four: the unit's Operands (_operands)
    in_place: bool
    keepable: bool
    weight_in_place: bool

    def __init__(self, ctx: Lowering, group: Group) -> None:
        self.ctx, self.em, self.group = ctx, ctx.em, group
        head = self.node = group.nodes[0]
        g = ctx.graph
        self.opdef, p = REGISTRY[head.op], head.params
        self.x, self.w = g.tensors[head.inputs[0]], g.tensors[head.inputs[1]]
        self.out = g.tensors[head.outputs[0]]
        self.groups = p["groups"]
        self.ic, self.oc, self.kernel = self.opdef.channels(self.x.shape, self.w.shape, self.groups)
        self.icg, self.ocg = self.ic // self.groups, self.oc // self.groups
        self.out_channels = self.oc
        axes = deconv_axes if self.opdef.transposed else conv_axes
        self.axes = axes(self.x.shape[2:], self.kernel, p["strides"], p["dilations"], p["pads"])
        self.units = self._units(ctx)
        self.mx, self.vx = self.units[0].matrix, self.units[0].vx
        # the integer family shifts its operands by their zero points in local memory
        self.shifted = p["mode"] == "v2"
        quantized_op = self.x.dtype not in ("float32", "float16", "bfloat16") and not self.shifted
        self.float_acc = quantized_op and self.opdef.float_compute(p, self.x.dtype, dict(ctx.compute_map(head)))
        self.asym = quantized_op and self.opdef.asymmetric(p) and not self.float_acc
        self.zp_dtype = self.w.dtype
        self.acc_dtype = self.opdef.acc_dtype(self.x.dtype, self.float_acc)
        self.weight = self._weight(g, quantized_op)
        self.init_bias(self._bias(g, quantized_op), quantized_op)
        self.operand_dtype = "int16" if self.shifted else None  # what the multiplies read
        if quantized_op:
            floor = self.opdef.floor_shift(p)
            steps, temps = quantized.epilogue(p, self.added_bias, self.out.dtype, self.float_acc, floor)
        else:
            steps, temps = quantized.plain_epilogue(self.added_bias, self.out.dtype, self.acc_dtype)
        self.tail = Tail(ctx, group.nodes[1:], group.stores, self.out.shape, given={self.out.name})
        self.init_epilogue(steps, temps, *self._flown(steps))
        self.k = int(np.prod(self.kernel))
        self.batch_slots, self.in_place, self.keepable, self.weight_in_place = self._operands()
        self.init_rows()

    # ---- what each unit's plan says: _Matrix (here), depthwise.py's _Depthwise ---------------

    @abstractmethod
    def _units(self, ctx: Lowering) -> list[Unit]:
        """The units the tiles are dealt among."""

    @abstractmethod
    def _operands(self) -> Operands:
        """How the unit multiplies its operands."""

    @abstractmethod
    def _memories(self) -> tuple[str, str, str]:
        """The memories the input, the weight and the accumulator are multiplied in."""

    @abstractmethod
    def _channels(self, toc: int, tic: int) -> int:
        """The input channels a tile of toc output channels reads in a block of tic."""

    @abstractmethod
    def _channel_starts(self, g: int, c0: int, i0: int, toc: int, tic: int) -> tuple[tuple[int, int], int]:
        """((first input channel, count), first output channel) of group g's block from i0 of
        the tile of output channels from c0 (within the group)."""

    @property
    @abstractmethod
    def tiled_channels(self) -> int:
        """The channels an output tile's box spans."""

    @abstractmethod
    def _walked(self) -> tuple[int, int]:
        """(the reduction the estimate walks in blocks, how many times the box repeats)."""

    @abstractmethod
    def _weight_shape(self, toc: int, tic: int) -> Tile:
        """A weight block's shape as loaded."""

    @abstractmethod
    def _kzp_axis(self) -> int:
        """The weight block's output-channel dimension."""

    @abstractmethod
    def _weight_regions(self, w_buf: Buf, oc0: int, i0: int, toc: int, tic: int) -> tuple[Region, Buf, Region, Buf]:
        """(source, its Buf, destination, its Buf) of a weight block's load into w_buf."""

    @abstractmethod
    def _product(self, acc_bufs: Bufs, x_buf: Buf, x_region: Region, w_buf: Buf, oc0: int,
                 ch_in: tuple[int, int], tile: Tile, toc: int, tic: int, first: bool) -> None:
        """acc (+)= the input block times the weight block (and the asymmetric mode's second product)."""

    def _readable_in_place(self, mem: str | None, batch_slots: int) -> bool:
        """Whether the input can be read where it lives, by products that read `mem`: it lives
        there, wholly inside every window (no padding, no inserted zeros), unshifted and
        multiplied without batch padding (batch_slots 1); no copy into a tile buffer then."""
        return batch_slots == 1 and self.ctx.home[self.x.name].mem == mem and not self.shifted and all(
            a.offset == 0 and a.stuff == 1 and a.extent(a.out) <= a.size for a in self.axes)

    def _flown(self, epilogue: list[Step]) -> tuple[str, list[Step] | None]:
        """(the tensor the accumulator's way out would store, the epilogue steps it would do, or
        None): with no fused tail, the result and the epilogue; with one ReLU of the result after a
        cast (or after nothing), the ReLU's result and one `relu` (isa/lower/templates/in_flight.py)."""
        steps: list[Step] | None
        if not self.tail.nodes:
            stored, steps = self.out.name, epilogue
        else:
            node = self.tail.nodes[0]
            alone = len(self.tail.nodes) == 1 and tuple(node.node.inputs) == (self.out.name,)
            stored, steps = node.out.name, then_relu(epilogue, node.steps) if alone else None
        return stored, steps if self.tail.stores == [stored] else None

    # ---- offline constants ------------------------------------------------------------------

    def _weight(self, g: Graph, quantized_op: bool) -> tuple[Buf, str]:
        """(home Buf, dtype) of the weight the machine multiplies: w, or w - zp_r (int16) where
        the product is made in float32 (BM1684's depthwise high-precision modes), bound where w
        lives."""
        zr = self.node.params["right_zero_point"] if quantized_op else 0
        home = self.ctx.home[self.w.name]
        if not (self.float_acc and zr):
            return home, self.w.dtype
        data = (g.constants[self.w.name].astype(np.int64) - zr).astype(np.int16).tobytes()
        return self.em.bind(f"{self.node.name}.weight_zp", "const", "int16", self.w.shape, data, home.mem), "int16"

    def _bias(self, g: Graph, quantized_op: bool) -> tuple[Buf, str] | None:
        """(home Buf of shape [OC], dtype) or None; the asymmetric mode's is bias_v2, folded
        offline: bias - zp_l * sum over each output channel's reduction of (w - zp_r), bound
        where the bias it replaces lives (DDR without one)."""
        p = self.node.params
        given = self._given_bias()
        if not (quantized_op and self.opdef.asymmetric(p)):
            return given
        sums = self.opdef._window_sums(g.constants[self.w.name], p, p["right_zero_point"]).reshape(-1)
        bias_dtype = given[1] if given else "int32"
        dtype = "float32" if self.float_acc and bias_dtype == "float32" else "int32"  # computed in float32: the bias stays a float
        return self._fold_bias(sums, dtype), dtype

    # ---- sizes ------------------------------------------------------------------------------

    def _needs(self, tile: Tile, tic: int, keep: bool = False) -> list[Need]:
        """(key, memory, bytes) of one slot's buffers for an output tile (n, oc, spatial...); with
        keep, the input is in buffers of its own (_kept_bytes)."""
        tn, toc, tos = tile[0], tile[1], tile[2:]
        channels = self._channels(toc, tic)
        out_elems = tn * toc * math.prod(tos)
        slotted = self._slotted(tn) * toc * math.prod(tos)  # the accumulator's, batch padded
        extents = tuple(a.extent(n) for a, n in zip(self.axes, tos))
        vmem = self.vmem
        amem, bmem, cmem = self._memories()
        needs: list[Need] = [] if self.in_place or keep else [("x", amem, nbytes(self.x.dtype, (self._slotted(tn), channels) + extents))]
        if not self.weight_in_place:
            needs.append(("w", bmem, nbytes(self.weight[1], (toc, tic, self.k))))
        acc = nbytes(self.acc_dtype, (slotted,))
        needs.append(("acc", cmem, acc))
        if self.shifted:
            needs += [("xs", amem, nbytes("int16", (tn, channels) + extents)), ("ws", bmem, nbytes("int16", (toc, tic, self.k)))]
            p = self.node.params
            needs += [(key, vmem, nbytes("int16", (n,))) for key, n in (("izp", channels), ("kzp", toc)) if p[key] == "vector"]
        return needs + self._epilogue_needs(acc, toc, out_elems)

    def _slotted(self, tn: int) -> int:
        """A batch tile of tn as the matrix unit multiplies it: whole groups of batch_slots."""
        return -(-tn // self.batch_slots) * self.batch_slots

    def _kept_bytes(self, tile: Tile) -> int:
        """The bytes of a kept input tile: every input channel of the group for the output tile's
        windows."""
        extents = tuple(a.extent(n) for a, n in zip(self.axes, tile[2:]))
        return nbytes(self.x.dtype, (tile[0], self.icg) + extents)

    def _sizes(self, tile: Tile, tic: int, keep: bool = False) -> dict[str, list[int]]:
        """memory -> the sizes of every buffer the tiling places there: each slot's, the tail's,
        a kept input's and, in the asymmetric mode on the matrix unit, the one zp_r element."""
        placed = [(mem, n, self.ctx.slots) for _, mem, n in self._needs(tile, tic, keep)]
        per_mem = per_memory(placed + ([(self._memories()[0], self._kept_bytes(tile), self.ctx.slots)] if keep else []))
        per_mem.setdefault(self.vmem, []).extend(self.tail.class_bytes(tile) * self.ctx.slots)
        if self.asym and self.zp_buffer:
            zp = self._zero_point_role()
            per_mem.setdefault(zp.mem, []).append(zp.size)
        return per_mem

    def _fits(self, tile: Tile, tic: int, keep: bool = False) -> bool:
        return self.fits(self._sizes(tile, tic, keep))

    def _moved(self, tile: Tile, tic: int) -> int:
        """Bytes one step loads (input tile and weight block) plus what the tail moves."""
        return sum(n for key, _, n in self._needs(tile, tic) if key in ("x", "w")) + self.tail.moved(tile)

    def tiles(self) -> Choice:
        """(output tile, input-channel block, keep) of the rows run, noted in the program."""
        choice, cycles = self.tiling()
        kept = ", the input kept across output-channel blocks" if choice[2] else ""
        self.em.notes.append(f"tiling {self.node.name}{self.rows_note()}: output tile {'x'.join(map(str, choice[0]))}, "
                             f"{choice[1]} input channels a step{kept}: estimated {cycles:,.0f} cycles")
        return choice

    def _searched(self, found: tuple[Choice, float] | None) -> tuple[Choice, float]:
        """found: (the search's choice, its estimated cycles on every unit); None: no tile fits."""
        if found is None:
            shape = self.span(self.tiled_channels)
            raise self._none_fits("a one-element output tile", self._sizes((1,) * len(shape), 1))
        return found

    def _schedule_of(self, choice: Choice, units: int) -> Estimate:
        tile, tic, keep = choice
        return self._schedule(tile, tic, units, keep)

    def _schedule(self, tile: Tile, tic: int, units: int = 1, keep: bool = False) -> Estimate:
        """The Estimate (isa/lower/schedule/estimate.py) of this tiling: every output tile with its
        input-channel blocks, on the busiest of `units` units. With keep the tiles walk the
        output channels innermost, and the input tile, loaded block by block with the first of
        them, stays for the others (estimate.tiled's reuse)."""
        reduction, repeat = self._walked()
        axes = self.axis_classes(self.span(self.tiled_channels), tile)
        work: Callable[..., Work] = self._work
        reuse = None
        if keep:  # (batch, spatial..., channels): the input depends on all but the last
            axes, reuse = [axes[0], *axes[2:], axes[1]], len(axes) - 1

            def work(kind: Sequence[Position], tic: int, first: bool, last: bool, i0: int, fresh: bool = True) -> Work:
                return self._work(_channels_second(kind), tic, first, last, i0, fresh, kept=True)

        return tiled(self.ctx, work, axes, reduction, tic, units, self.ctx.slots, repeat, reuse, once=self.once(self.x, self.w),
                     reuse_blocks=True, cores=self.unit_cores(units))

    def _work(self, kind: Sequence[Position], tic: int, first: bool, last: bool, i0: int, fresh: bool = True, kept: bool = False) -> Work:
        """The estimate.Work of one input-channel block (from i0) of an output tile of class
        `kind`; fresh: whether it loads its input block (not where a kept input has it already),
        into the kept input's part when kept."""
        starts, extents = tuple(c[0] for c in kind), tuple(c[1] for c in kind)
        tn, toc, tos = extents[0], extents[1], extents[2:]
        cached = self.ctx.chip.cache is not None
        oc0 = starts[1] if cached else 0  # where the weights and the bias are read: for the cache
        # the tail's own place matters to the cache alone: elsewhere it is priced where a tile of its extents first was
        at = starts if cached else self.__dict__.setdefault("_tail_at", {}).setdefault(extents, starts)
        tail_load, tail_compute, tail_store = self.piece("tail", at, extents) if first or last else ((), (), ())
        channels = self._channels(toc, tic)
        block = self.piece("input", tn, channels, tos, self._reads(starts[2:], tos), kept) if fresh else ()
        load = (() if kept else block) + self.piece("weight", toc, tic, oc0, i0)
        if self.shifted:
            load += self.piece("shift", tn, toc, tic, tos, self._reads(starts[2:], tos))
        fills = self.piece("bias", toc, oc0) if first else ()
        product = self.piece("product", tn, toc, tos, tic, first, kept)
        if last and self.flight is not None:
            finish, store = (), self.piece("flight", extents, starts if self.ctx.chip.cache is not None else (0,) * len(starts))
        else:
            finish, store = (self.piece("finish", extents) + tail_compute, tail_store) if last else ((), ())
        return Work(load, product, finish, store, fills, block if kept else (), tail_load)

    def _reads(self, starts: Tile, outs: Tile) -> tuple[Read, ...]:
        """What a tile of spatial extents `outs` from `starts` reads along each axis (first
        input, count, buffer position, gaps): all a piece's loads depend on. Where the chip caches
        DDR the first input row is the tile's own (which lines it touches); elsewhere any."""
        cached = self.ctx.chip.cache is not None
        reads = (a.reads(s, n) for a, s, n in zip(self.axes, starts, outs))
        return tuple((lo if cached else 0, count, at, gaps) for lo, count, at, gaps in reads)

    # ---- the estimate's pieces: the emission's own code on roles (isa/lower/schedule/estimate.py) ------

    def _roles(self, tile: Tile, tic: int, keep: bool = False) -> Bufs:
        """A step's buffers as the estimate's roles: the slot's by step, the tile's own by tile."""
        return self._as_roles(self._needs(tile, tic, keep))

    def _price_input(self, rec: Convolution, tn: int, channels: int, tos: Tile, reads: Sequence[Read], kept: bool) -> None:
        """An input tile's load (its window's fill where it reads padding) into the step's
        buffer, or into its block's part of a kept input."""
        if self.in_place:
            return
        buf_ext = tuple(a.extent(n) for a, n in zip(self.axes, tos))
        held = self._kept_role(tn, channels, buf_ext) if kept else None
        buf, region = self._input_block(self._roles((tn, channels) + tuple(tos), channels), held, (0,) * (2 + len(tos)),
                                        (tn, channels) + buf_ext)
        load_window(rec.ctx, self.vx, self.x, region, buf, self.axes, reads, (0, 0), 0, self.node.name,
                    self.fillers(self.x.dtype, 0, region.mem))

    def _price_weight(self, rec: Convolution, toc: int, tic: int, oc0: int, i0: int) -> None:
        if not self.weight_in_place:
            rec._load_weight(self._roles((1, toc, 1), tic)["w"], oc0, i0, toc, tic)

    def _price_shift(self, rec: Convolution, tn: int, toc: int, tic: int, tos: Tile, reads: Sequence[Read]) -> None:
        io = self._roles((tn, toc) + tuple(tos), tic)
        buf_ext = tuple(a.extent(n) for a, n in zip(self.axes, tos))
        channels = self._channels(toc, tic)
        x_region = io["x"].region(self.x.dtype, (tn, channels) + buf_ext)
        rec._shift(io, x_region, reads, (0, channels), 0, toc, tic)

    def _price_bias(self, rec: Convolution, toc: int, oc0: int) -> None:
        if self.bias:
            rec._load_bias(self._roles((1, toc, 1), 1), oc0, toc)

    def _price_product(self, rec: Convolution, tn: int, toc: int, tos: Tile, tic: int, first: bool, kept: bool) -> None:
        tile = (tn, toc) + tuple(tos)
        bufs = self._roles(tile, tic)
        buf_ext = tuple(a.extent(n) for a, n in zip(self.axes, tos))
        channels = self._channels(toc, tic)
        held = self._kept_role(tn, tic, buf_ext) if kept else None
        x_buf, x_region = self._input_block(bufs, held, (0,) * len(tile), (tn, channels) + buf_ext)
        rec.zero_point = bufs.get("zp_r")
        rec._product(bufs, *self._multiplied(bufs, x_buf, x_region), 0, (0, channels), (tn,) + tuple(tos), toc, tic, first)

    def _kept_role(self, tn: int, channels: int, extents: Tile) -> tuple[Buf, Region]:
        """(the estimate's role of a block's part of a kept input, the block's region in it)."""
        part = estimate.role(estimate.PART, "x", self._memories()[0])
        return part, self._kept_region(part, tn, channels, extents)

    def _price_finish(self, rec: Convolution, extents: Tile) -> None:
        rec._finish(self._roles(extents, 1), extents)

    def _price_flight(self, rec: Convolution, extents: Tile, starts: Tile) -> None:
        """The accumulator stored home by the DMA that does the epilogue (self.flight)."""
        rec._store_flown(self._roles(extents, 1), sub_region(self.ctx.home_region(self.stored), starts, extents), extents)

    def _price_tail(self, rec: Convolution, starts: Tile, extents: Tile) -> tuple[tuple[Timed, ...], ...]:
        """(loads, compute, stores) of the fused tail on a tile: its own emission on roles."""
        bufs = self._roles(extents, 1)
        tails = tail_roles(self.tail, self.vmem, extents, self.node.name, estimate.TILE)
        take = recorder(rec.em).take
        local = rec.tail.load(tails, starts, extents)
        loads = take()
        rec.tail.compute(self.vx.name, tails, local, extents, {self.out.name: bufs[self.result_key]})
        compute = take()
        rec.tail.store(tails, starts, extents, {self.out.name: bufs[self.result_key]})
        return loads, compute, take()

    # ---- emission ---------------------------------------------------------------------------

    def feasible(self) -> bool:
        """Whether a one-element output tile's buffers fit in what is free now."""
        return self._fits((1,) * len(self.out.shape), 1)

    def run(self, rows: tuple[int, int] | None = None) -> None:
        """Emit the convolution of output rows [rows[0], rows[1]) (default: all of them)."""
        if rows is not None:
            self.rows = rows
        tile, tic, keep = self.tiles()
        tiles = [(g, starts, extents) for g in range(self._walked()[1])
                 for starts, extents in self.placed_boxes(self.tiled_channels, tile)]
        if keep:  # the output channels innermost, so consecutive tiles share their input
            tiles.sort(key=lambda t: (t[0], t[1][0], t[1][2:], t[1][1]))
        fillers: list[Fillers] = []  # per unit, the padding's fill values near its input memory (window.load_window)

        def unit_steps(mine: Convolution, run: list[Placed]) -> tuple[list[PipelineStep], list[Buf]]:
            fillers.append({})
            return mine._steps(run, tile, tic, keep, fillers[-1])

        self.run_dealt(tiles, unit_steps, [self.ctx.home[t] for t in self.tail.stores],
                       lambda: [buf for near in fillers for buf in near.values()])

    def _steps(self, tiles: list[Placed], tile: Tile, tic: int, keep: bool, fillers: Fillers) -> tuple[list[PipelineStep], list[Buf]]:
        """This unit's buffers, placed, and the pipeline steps of its output tiles."""
        placed = self.place_buffers((key, s, mem, n) for s in range(self.ctx.slots) for key, mem, n in self._needs(tile, tic, keep))
        slots = [{key: buf for (key, s), buf in placed.items() if s == slot} for slot in range(self.ctx.slots)]
        tails = self.tail.allocate(self.vmem, tile, self.node.name)
        zero_point = self.place_zero_point()
        blocks = [(i0, min(tic, self.icg - i0)) for i0 in range(0, self.icg, tic)]
        kept = [self._kept(tile, blocks, s) for s in range(self.ctx.slots if keep else 0)]
        steps: list[PipelineStep] = []
        at, fresh = None, 0  # the input position kept, and how many were loaded
        for t, (g, starts, extents) in enumerate(tiles):
            new = not keep or (g, starts[0], starts[2:]) != at
            at, fresh = (g, starts[0], starts[2:]), fresh + new
            tail_local: Local = {}  # the tail's loads of this output tile, made with its first block
            held = kept[(fresh - 1) % len(kept)] if keep else None
            for b, block in enumerate(blocks):
                steps.append(self._step(slots[len(steps) % self.ctx.slots], slots[t % self.ctx.slots], tails[t % self.ctx.slots],
                                        g, starts, extents, block, b == 0, b == len(blocks) - 1, tail_local, fillers,
                                        (held[0].parts[b], held[1]) if held else None, new))
        return steps, list(placed.values()) + [buf for bufs in tails for buf in bufs.values()] + [buf for buf, _ in kept] + zero_point

    def _kept(self, tile: Tile, blocks: list[tuple[int, int]], slot: int) -> tuple[Buf, Region]:
        """(Buf, region) of a kept input tile: every input channel for the output tile's windows,
        (batch, channels, window...) laid out channels outermost, so that each channel block is
        one run of bytes, a part of the Buf of its own (Emitter.split): a block's product waits
        only for its own block's load."""
        extents = tuple(a.extent(n) for a, n in zip(self.axes, tile[2:]))
        buf = self.em.alloc(self._memories()[0], self._kept_bytes(tile), f"{self.node.name}/kept_x.{slot}")
        per_channel = tile[0] * math.prod(extents)
        self.em.split(buf, tuple(i0 * per_channel * dtypes.itemsize(self.x.dtype) for i0, _ in blocks[1:]))
        return buf, self._kept_region(buf, tile[0], self.icg, extents)

    def _kept_region(self, buf: Buf, tn: int, channels: int, extents: Tile) -> Region:
        """A kept input of `channels` in buf, read as (batch, channels, window...) though laid out
        channels outermost."""
        major = dense(buf.mem, buf.addr, self.x.dtype, (channels, tn) + tuple(extents))
        return Region(buf.mem, buf.addr, self.x.dtype, (tn, channels) + tuple(extents),
                      (major.strides[1], major.strides[0]) + major.strides[2:])

    def _step(self, io: Bufs, acc_bufs: Bufs, tail_bufs: Slot, g: int, starts: Tile, extents: Tile, block: tuple[int, int],
              first: bool, last: bool, tail_local: Local, fillers: Fillers,
              kept: tuple[Buf, Region] | None = None, fresh: bool = True) -> tuple[Action, Action, Action, Action]:
        """(load, compute, store) of one input-channel block of one output tile; kept: the
        (its block's part of the Buf, the whole tile's region) of a kept input, which the step
        loads its block into when fresh."""
        node = self.node.name
        n0, c0, s0 = starts[0], starts[1], starts[2:]
        tn, toc, tos = extents[0], extents[1], extents[2:]
        i0, tic = block
        ch_in, oc0 = self._channel_starts(g, c0, i0, toc, tic)
        reads, buf_ext = tile_reads(self.axes, s0, tos)
        w_buf = self.weight[0] if self.weight_in_place else io["w"]
        held = (kept[0], sub_region(kept[1], (0, i0) + (0,) * len(buf_ext), (tn, tic) + buf_ext)) if kept is not None else None
        x_buf, x_region = self._input_block(io, held, (n0, ch_in[0]) + tuple(r[0] for r in reads), (tn, ch_in[1]) + buf_ext)
        operands = self._multiplied(io, x_buf, x_region)
        out_starts, out_extents = (n0, oc0) + tuple(s0), (tn, toc) + tuple(tos)

        def load() -> None:
            if not self.in_place and fresh:
                load_window(self.ctx, self.vx, self.x, x_region, x_buf, self.axes, reads, (n0, ch_in[0]), 0, node, fillers)
            if not self.weight_in_place:
                self._load_weight(w_buf, oc0, ch_in[0], toc, tic)
            if self.shifted:
                self._shift(io, x_region, reads, ch_in, oc0, toc, tic)
            if first and self.bias:
                self._load_bias(acc_bufs, oc0, toc)

        def fill() -> None:
            if first:
                tail_local.update(self.tail.load(tail_bufs, out_starts, out_extents))

        def compute() -> None:
            self._product(acc_bufs, *operands, oc0, ch_in, (tn,) + tuple(tos), toc, tic, first)
            if last and self.flight is None:
                self._finish(acc_bufs, out_extents)
                self.tail.compute(self.vx.name, tail_bufs, tail_local, out_extents, {self.out.name: acc_bufs[self.result_key]})

        def store() -> None:
            if last and self.flight is not None:
                self._store_flown(acc_bufs, sub_region(self.ctx.home_region(self.stored), out_starts, out_extents), out_extents)
            elif last:
                self.tail.store(tail_bufs, out_starts, out_extents, {self.out.name: acc_bufs[self.result_key]})

        return load, compute, store, fill

    def _input_block(self, bufs: Bufs, kept: tuple[Buf, Region] | None, starts: Tile, extents: Tile) -> tuple[Buf, Region]:
        """(Buf, region) of a step's input block of `extents` (batch, channels, window...) as it is
        loaded: where the input lives, from `starts` (read in place); a kept input's (kept: the
        block's part of its Buf, the block's region); or the step's buffer."""
        if self.in_place:
            home = self.ctx.home[self.x.name]
            return home, sub_region(home.region(self.x.dtype, self.x.shape), starts, extents)
        if kept is not None:
            return kept
        return bufs["x"], bufs["x"].region(self.x.dtype, extents)

    def _multiplied(self, bufs: Bufs, x_buf: Buf, x_region: Region) -> tuple[Buf, Region, Buf]:
        """(input Buf, its region, weight Buf) the products read: the input block as loaded, or
        in the integer family its shifted copy (and the weight's)."""
        if self.shifted:
            return bufs["xs"], bufs["xs"].region("int16", x_region.shape), bufs["ws"]
        return x_buf, x_region, self.weight[0] if self.weight_in_place else bufs["w"]

    def _shift(self, io: Bufs, x_region: Region, reads: Sequence[Read], ch_in: tuple[int, int], oc0: int, toc: int, tic: int) -> None:
        """xs = input - izp where real elements land, zeros elsewhere; ws = weight - kzp (INT16)."""
        em, op = self.em, self.node.name
        xs, ws = io["xs"], io["ws"]
        xs_region = xs.region("int16", x_region.shape)
        src, dst = placed(x_region, self.axes, reads, 2), placed(xs_region, self.axes, reads, 2)  # where real elements land
        w_shape = self._weight_shape(toc, tic)
        izp, izp_bufs = self._zero_operand("izp", self.ic, *ch_in, io.get("izp"), dst.shape, 1)  # by input channel
        kzp, kzp_bufs = self._zero_operand("kzp", self.oc, oc0, toc, io.get("kzp"), w_shape, self._kzp_axis())  # by output channel
        em.emit(self.vx.name, Vector("copy", xs_region, (0,), "int64", op), writes=(xs,))
        if all(count for _, count, _, _ in reads):
            em.emit(self.vx.name, Vector("sub", dst, (src, izp), "int64", op), reads=(io["x"],) + izp_bufs, writes=(xs,))
        w_region, ws_region = io["w"].region(self.w.dtype, w_shape), ws.region("int16", w_shape)
        em.emit(self.vx.name, Vector("sub", ws_region, (w_region, kzp), "int64", op), reads=(io["w"],) + kzp_bufs, writes=(ws,))

    def _load_weight(self, w_buf: Buf, oc0: int, i0: int, toc: int, tic: int) -> None:
        src, src_buf, dst, dst_buf = self._weight_regions(w_buf, oc0, i0, toc, tic)
        copy(self.em, src, src_buf, dst, dst_buf, self.node.name)


class _Matrix(Convolution):
    """A convolution on the matrix unit, as an implicit GEMM; the groups are walked as repeats,
    the input channels in blocks."""

    mx: Engine

    def _units(self, ctx: Lowering) -> list[Unit]:
        return ctx.units("matrix", vector=True)

    def _operands(self) -> Operands:
        """Where the matrix unit stores batch items in groups (BM1684's int8 4N), a batch tile is
        multiplied padded to whole groups: the padding's rows cost what real ones do and their
        results are never read. An input tile may stay while the output-channel blocks walk
        (_cheapest); weights that live where the matrix unit reads them (held by a layer group,
        or pinned) are multiplied in place, block by block."""
        batch_slots = 1 if self.shifted else self.matrix_unit.batch_slots.get(self.x.dtype, 1)
        in_place = self._readable_in_place(operand_memory(self.mx, "a"), batch_slots)
        weight_in_place = not self.shifted and not self.opdef.transposed and self.weight[0].mem == operand_memory(self.mx, "b")
        return Operands(batch_slots, in_place, not in_place and not self.shifted and batch_slots == 1, weight_in_place)

    def _memories(self) -> tuple[str, str, str]:
        """The memories the input, the weight and the accumulator are multiplied in."""
        return operand_memory(self.mx, "a"), operand_memory(self.mx, "b"), operand_memory(self.mx, "c")

    def _channels(self, toc: int, tic: int) -> int:
        """A block of tic input channels, whatever the output channels."""
        return tic

    def _channel_starts(self, g: int, c0: int, i0: int, toc: int, tic: int) -> tuple[tuple[int, int], int]:
        """Group g's input channels from i0, its output channels from c0."""
        return (g * self.icg + i0, tic), g * self.ocg + c0

    @property
    def tiled_channels(self) -> int:
        """The channels an output tile's box spans: a group's (the groups are walked as repeats)."""
        return self.ocg

    def _walked(self) -> tuple[int, int]:
        """A group's input channels, walked once per group."""
        return self.icg, self.groups

    def _weight_shape(self, toc: int, tic: int) -> Tile:
        """A weight block as loaded: [IC, OC/g, k...] for a transposed convolution, else [OC, IC/g, k...]."""
        return ((tic, toc) if self.opdef.transposed else (toc, tic)) + tuple(self.kernel)

    def _kzp_axis(self) -> int:
        """Dimension 1 of a transposed convolution's weight block, else 0."""
        return 1 if self.opdef.transposed else 0

    def _weight_regions(self, w_buf: Buf, oc0: int, i0: int, toc: int, tic: int) -> tuple[Region, Buf, Region, Buf]:
        """The block of a group's [IC, OC/g, k...] or [OC, IC/g, k...] weight."""
        src_buf, dtype = self.weight
        full = src_buf.region(dtype, self.w.shape)
        starts = (i0, oc0 % self.ocg) if self.opdef.transposed else (oc0, i0 % self.icg)
        shape = self._weight_shape(toc, tic)
        return sub_region(full, starts + (0,) * len(self.kernel), shape), src_buf, w_buf.region(dtype, shape), w_buf

    def _search(self) -> tuple[Choice, float]:
        """A tile trades input reloads (one per output-channel block) against weight reloads
        (one per spatial block): candidates are searched for the least estimated cycles
        (isa/lower/tiling), the input-channel block as for one unit, then with several units the
        output tile."""
        shape = self.span(self.tiled_channels)
        unit = self.matrix_unit
        limits = self.ctx.tile_limits(shape) + (self.ctx.policy.tile_limit("k", self.icg),)
        granules = (unit.sides(conv=True)[1], unit.depth(self.operand_dtype or self.x.dtype))
        return self._searched(self._for_units(lambda blocks, units, only: self._cheapest(shape, granules, limits, blocks, units, only),
                                              lambda c: c[1]))

    def _cheapest(self, shape: Tile, granules: tuple[int, int], limits: Tile, blocks: list[int] | None,
                  units: int, only: Callable[[tuple], int] | None = None) -> tuple[Choice, float] | None:
        """(tile, input-channel block, keep) of least estimated cycles (tiling.least), over
        keeping the input or not (where the convolution may keep it); with `only`, one of the
        least one's block (Tiled._least)."""
        choices: list[Choice] = []
        floors: list[np.ndarray] = []
        for keep in ((False, True) if self.keepable else (False,)):
            found = candidates(shape, self.icg, granules, lambda t, tic: self._fits(t, tic, keep), limits, blocks, area=self.k)  # noqa: B023
            floors.append(self._floors(found, keep, units, path=True))
            choices += [(tile, tic, keep) for tile, tic in found]
        volume = {tile: math.prod(tile) for tile in dict.fromkeys([tile for tile, *_ in choices])}  # per distinct tile
        ties = (np.array([-volume[tile] * tic for tile, tic, _ in choices]), np.array([keep for *_, keep in choices]))
        return self._least(choices, np.concatenate(floors), ties, units, only=only)

    def floor(self) -> float:
        """A lower bound of tiling()'s cycles without a search: _floors of the whole output as
        one tile (its products, loads and DDR bytes only shrink as the tile grows)."""
        return float(self._floors([(self.span(self.tiled_channels), self.icg)], False, len(self.units))[0])

    def _floors(self, found: Sequence[tuple[Tile, int]], keep: bool, units: int, path: bool = False) -> np.ndarray:
        """Lower bounds of the estimated cycles of tilings (tile, input-channel block), from
        their shapes alone, as an array: the products (isa/costs.py's formula summed over every
        tile and block), the loads of the input windows and weight blocks and the tail's loads
        and stores on their first hop's engine (route.hop_floor; with several units, the
        busiest has at least its share of each), or with one unit the bytes of those that go
        through DDR at DDR's bandwidth (bursts left out). With path, where the estimate's bounds
        hold, also the matrix unit's path (Estimate._products_path): the first tile's input and
        weight blocks load before its first product, and the products follow one another. (Not
        for floor(): that term grows with the tile. Where the bounds are only a guide, the search
        is not exact and a changed floor would change the order it weighs candidates in.)"""
        m0, m1, reads, first, n0, n1, toc, k0, k1, tic = self._floor_factors(found).T
        mx, chip, home = self.mx, self.ctx.chip, self.ctx.home
        products = self.groups * (2 if self.asym else 1) * (m0 * k0 * n0 * mx.issue_latency + m1 * n1 * k1)
        tiles = self.groups * m0 * n0  # (batch, spatial) positions by channel blocks
        engines: dict[str, np.ndarray | float] = {mx.name: products.astype(float)}
        loaded = stored = 0

        def busy(src: str, dst: str, transfers: np.ndarray, nbytes: np.ndarray | int) -> None:
            engine, cycles = hop_floor(chip, src, dst, transfers, nbytes)  # type: ignore[arg-type]  # its arithmetic takes arrays too
            engines[engine] = engines.get(engine, 0) + cycles

        if not self.in_place:  # the windows once per output-channel block, or once kept
            nbytes = self.groups * reads * self.icg * dtypes.itemsize(self.x.dtype) * (1 if keep else n0)
            loaded += nbytes if home[self.x.name].mem == "ddr" else 0
            busy(home[self.x.name].mem, operand_memory(mx, "a"), tiles * k0 // (n0 if keep else 1), nbytes)
        if not self.weight_in_place:  # every weight once per spatial tile
            nbytes = self.groups * m0 * self.ocg * self.icg * self.k * dtypes.itemsize(self.weight[1])
            loaded += nbytes if self.weight[0].mem == "ddr" else 0
            busy(self.weight[0].mem, operand_memory(mx, "b"), tiles * k0, nbytes)
        for src, dst, nbytes in self._tail_transfers():  # the output box as one tile (Tail.least_transfers)
            if src == "ddr" and chip.cache is not None:  # a cache of DDR may serve it faster
                continue
            busy(src, dst, tiles, nbytes)
            stored += nbytes * ((src == "ddr") + (dst == "ddr"))
        most = np.maximum.reduce(np.broadcast_arrays(*engines.values()))
        if path and estimate.bounds_hold(chip, units):
            lead = 0.0
            if not self.in_place:
                lead = hop_floor(chip, home[self.x.name].mem, operand_memory(mx, "a"), 1, first * tic * dtypes.itemsize(self.x.dtype))[1]
            if not self.weight_in_place:
                nbytes = toc * tic * self.k * dtypes.itemsize(self.weight[1])
                lead = np.maximum(lead, hop_floor(chip, self.weight[0].mem, operand_memory(mx, "b"), 1, nbytes)[1])
            most = np.maximum(most, products + lead)
        if units > 1:
            return most / units
        if chip.cache is not None:
            loaded = np.minimum(loaded, self.once(self.x, self.w))
        return np.maximum(most, (loaded + stored) / chip.memories["ddr"].bandwidth)

    def _floor_factors(self, found: Sequence[tuple[Tile, int]]) -> np.ndarray:
        """_floors' products in factors (isa/costs.py, matmul_rows and matmul_depths) for each
        (tile, input-channel block) in found, as rows of an array: the M (count, folds), the
        input rows read of the (batch, spatial) tiles and those of the first tile alone, the N
        (count, folds) of the channel blocks and their extent, and the K (count, cycles) of the
        reduction blocks and their extent, each worked out once per extent."""
        classes, rows = self._classes, self.rows
        # the distinct tiles and blocks, each worked out once (a tile comes with many blocks), and each candidate's
        tiles = {tile: k for k, tile in enumerate(dict.fromkeys([tile for tile, _ in found]))}
        blocks = {tic: k for k, tic in enumerate(dict.fromkeys([tic for _, tic in found]))}
        at = np.array([(tiles[tile], blocks[tic]) for tile, tic in found], np.int64)
        per_tile = []
        for tile in tiles:
            sp, ch = ("floor m", tile[0], tile[2:], rows), ("floor n", tile[1], rows)
            if sp not in classes or ch not in classes:
                self._count_factors(tile)
            per_tile.append((*classes[sp], *classes[ch]))
        per_block = []
        for tic in blocks:
            if ("floor k", tic) not in classes:
                ks = [(tic * self.k, self.icg // tic)] + ([(self.icg % tic * self.k, 1)] if self.icg % tic else [])
                classes["floor k", tic] = (*costs.matmul_depths(ks, self.matrix_unit, self.operand_dtype or self.x.dtype, conv=True,
                                                                       kernel=tuple(self.kernel)), tic)
            per_block.append(classes["floor k", tic])
        at = at.reshape(-1, 2)
        per_tile_array, per_block_array = np.array(per_tile, np.int64).reshape(-1, 7), np.array(per_block, np.int64).reshape(-1, 3)
        return np.concatenate((per_tile_array[at[:, 0]], per_block_array[at[:, 1]]), axis=1)

    def _count_factors(self, tile: Tile) -> None:
        """_floor_factors' M and input rows of tile's (batch, spatial) extents, and N of its channels."""
        along_m, along_n = self.matrix_unit.sides(conv=True)
        span = self.span(self.tiled_channels)
        counted = self.axis_counts(span, tile)
        first = tile[0] * math.prod(a[0][2] for a in self.axis_classes(span, tile)[2:])  # (start, extent, count, ...)
        ms, reads = [], 0
        for n, k in counted[0].items():
            for combo in itertools.product(*(c.items() for c in counted[2:])):
                count = k * math.prod(c for _, c in combo)
                ms.append((self._slotted(n[0]) * math.prod(e[0] for e, _ in combo), count))
                reads += count * n[0] * math.prod(e[1] for e, _ in combo)
        self._classes["floor m", tile[0], tile[2:], self.rows] = (*costs.matmul_rows(ms, along_m), reads, first)
        self._classes["floor n", tile[1], self.rows] = (*costs.matmul_rows([(e[0], c) for e, c in counted[1].items()], along_n), tile[1])

    def _tail_transfers(self) -> list[tuple[str, str, int]]:
        key = ("tail", self.rows)
        if key not in self._classes:
            self._classes[key] = self.tail.least_transfers(self.span(self.out.shape[1]), self.vmem)
        return self._classes[key]

    def _product(self, acc_bufs: Bufs, x_buf: Buf, x_region: Region, w_buf: Buf, oc0: int,
                 ch_in: tuple[int, int], tile: Tile, toc: int, tic: int, first: bool) -> None:
        """acc (+)= the input block times the weight block, for an output tile of batch and
        spatial extents `tile` (and the asymmetric mode's second product, the input times zp_r)."""
        acc = acc_bufs["acc"]
        out_extents = (tile[0], toc) + tuple(tile[1:])
        # the input and accumulator tiles as multiplied: batch padded to whole slots (the batch
        # dimension is outermost, so the real items are the tiles' leading rows)
        slotted = (self._slotted(tile[0]),)
        x_view = x_buf.region(self.x.dtype, slotted + x_region.shape[1:]) if slotted[0] != tile[0] else x_region
        acc_view = acc.region(self.acc_dtype, slotted + out_extents[1:])
        self._matmul(x_view, x_buf, w_buf, self._weight_view(w_buf, oc0, ch_in[0], tic, toc), acc_view, acc, first,
                     acc_bufs["bias"] if first and self.bias_in_table else None)
        if self.asym:
            zp, zero_point = self._zero_point_block((tic,) + tuple(self.kernel) + (toc,))
            acc_zp = acc_bufs["acc_zp"]
            self._matmul(x_view, x_buf, zero_point, zp, acc_zp.region(self.acc_dtype, slotted + out_extents[1:]), acc_zp, first)

    def _matmul(self, x_region: Region, x_buf: Buf, w_buf: Buf, b: Region, acc_region: Region, acc: Buf, first: bool,
                bias: Buf | None = None) -> None:
        """acc (+)= the window view of the input, (n, outputs..., channels, kernel...), times b,
        (channels, kernel..., out channels), into acc read as (n, outputs..., out channels); from
        the row of out channels in the Buf `bias` where given."""
        s = len(self.axes)
        a = _permuted(window_view(x_region, self.axes, 2), (0,) + tuple(range(2, 2 + s)) + (1,) + tuple(range(2 + s, 2 + 2 * s)))
        c = _permuted(acc_region, (0,) + tuple(range(2, 2 + s)) + (1,))
        self.em.emit(self.mx.name, Matmul(a, b, c, not first, self.node.name, m=1 + s,
                                          bias=bias_table.row(bias, c.shape, self.acc_dtype) if bias is not None else None, conv=True),
                     reads=(x_buf, w_buf) + (() if first else (acc,)) + ((bias,) if bias else ()), writes=(acc,))

    def _weight_view(self, w_buf: Buf, oc0: int, i0: int, tic: int, toc: int) -> Region:
        """The weight block of output channels from oc0, input channels from i0, as (in
        channels, kernel..., out channels): in w_buf, or where the whole weight lives when it is
        read in place. A transposed convolution reads its [IC, OC] block with the kernel
        flipped (negative strides)."""
        dtype = self.operand_dtype or self.weight[1]
        if not self.opdef.transposed:
            if self.weight_in_place:
                full = w_buf.region(dtype, self.w.shape)
                local = sub_region(full, (oc0, i0 % self.icg) + (0,) * len(self.kernel), (toc, tic) + tuple(self.kernel))
            else:
                local = w_buf.region(dtype, (toc, tic) + tuple(self.kernel))
            return Region(local.mem, local.addr, dtype, (tic,) + tuple(self.kernel) + (toc,),
                          (local.strides[1],) + local.strides[2:] + (local.strides[0],))
        local = w_buf.region(dtype, (tic, toc) + tuple(self.kernel))
        last = sum((k - 1) * st for k, st in zip(self.kernel, local.strides[2:])) * dtypes.itemsize(dtype)
        return Region(local.mem, local.addr + last, dtype, (tic,) + tuple(self.kernel) + (toc,),
                      (local.strides[0],) + tuple(-st for st in local.strides[2:]) + (local.strides[1],))


def _permuted(region: Region, order: Sequence[int]) -> Region:
    """The same elements with the dimensions in another order."""
    return Region(region.mem, region.addr, region.dtype, tuple(region.shape[i] for i in order), tuple(region.strides[i] for i in order))


def _channels_second(kind: Sequence[Position]) -> tuple[Position, ...]:
    """A tile class ordered (batch, spatial..., channels), as a kept input's estimate walks it,
    back in the template's order (batch, channels, spatial...)."""
    return (kind[0], kind[-1], *kind[1:-1])

