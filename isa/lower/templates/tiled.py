"""The mechanism the tiled templates share: the convolution (isa/lower/templates/conv.py), the
depthwise convolution (depthwise.py) and the matrix product (matmul.py) each tile an output,
multiply into an accumulator tile block by block, and run the op's epilogue on the way out.

What is the same in all three lives here: the output tiles dealt among the units and run there
(`run_dealt`, `on`); the search's shape (the least estimate of the tilings that fit, for one unit
and then for several with its reduction block) and whether a tiling's buffers fit; each slot's
buffers placed and named (`place_buffers`) and a tile's buffers as the estimate's roles; the
accumulator's way to the vector memory (a copy staged through shared memory where the matrix unit
accumulates elsewhere, or the epilogue done by the DMA storing it: isa/lower/templates/in_flight.py)
and the buffers of that way; the epilogue's inputs
(the accumulator, the bias, the asymmetric mode's second accumulator); the bias (folded offline
with the zero points, loaded per tile into the vector memory or the matrix unit's bias table:
isa/lower/templates/bias_table.py); the one-element zero point the asymmetric mode's second
product reads (`place_zero_point`); the integer family's zero points as the operands its shift
subtracts (`_zero_operand`: a number, or a table loaded per tile); and a fused tail's buffers as
the estimate's roles (`tail_roles`, which the pooling template uses too). The float epilogue (the
bias added, or a cast) is isa/ops/quantized.py's plain_epilogue, the matrix ops' and conv's.

A plan using it sets, besides what `Priced` asks (ctx, em, node, units): mx and vx (the unit's
matrix engine, None on the vector unit, and its vector engine), opdef, out (the tensor the op
makes), out_channels (its channels, the accumulator tile's dimension 1), acc_dtype, bias ((home
Buf, dtype) or None) and bias_in_table (by init_bias), asym (a second accumulator: the input times
the weight's zero point) and zp_dtype (the weight's dtype, that zero point's), then calls
init_epilogue() with the epilogue and the accumulator's way out.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from copy import copy as shallow_copy
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ... import dtypes
from ...errors import OutOfMemoryError, UnsupportedError
from ...instructions import Region, Vector
from ..context import Lowering, Unit, operand_memory
from ..emit import Buf, Emits
from ..memory.alloc import shortfall
from ..memory.route import copy
from ..schedule import estimate
from ..schedule.estimate import Estimate, Priced, Recorder
from ..schedule.pipeline import deal, run_units
from ..schedule.tiling import broadcast_view, least, nbytes, sub_region
from . import bias_table
from .in_flight import InFlight, in_flight
from .staging import stages
from .vector_steps import emit_steps

if TYPE_CHECKING:
    from typing_extensions import Self  # typing's from Python 3.11

    from chips.schema import Engine, MatrixUnit

    from ...graph import Node, Tensor
    from ...ops.base import OpDef
    from ...ops.elementwise import Step
    from ..schedule.pipeline import Step as PipelineStep
    from .local import Slot, Tail

Key = str | tuple[str, int]  # a buffer's key in a plan's needs: a name, or ("tmp", j) for the epilogue's temporaries
Bufs = dict[Any, Buf]  # key -> Buf: a tile's buffers (a template's own keys, or the estimate's roles)
T = TypeVar("T")  # an output tile, as a template deals them


def per_memory(placed: Iterable[tuple[str, int, int]]) -> dict[str, list[int]]:
    """memory -> the sizes of the buffers (memory, bytes, how many) placed there, as a tiling's fit is judged."""
    out: dict[str, list[int]] = {}
    for mem, n, count in placed:
        out.setdefault(mem, []).extend([n] * count)
    return out


def recorder(em: Emits) -> Recorder:
    """A plan's emitter as the estimate's Recorder, while the plan prices a tiling (Priced.recording)."""
    assert isinstance(em, Recorder), "a piece is priced on the plan's Recorder (Priced.recording)"
    return em


def tail_roles(tail: Tail, mem: str, tile: tuple[int, ...], op: str, scope: str) -> Slot:
    """A fused tail's buffers for a tile in mem as the estimate's roles of `scope` (a tile's
    own, or a step's where each tile is one step): Tail.allocate's own placement, placing nothing."""
    return tail.allocate(mem, tile, op, lambda m, n, name: estimate.role(scope, name, m, n))[0]


class Tiled(Priced, ABC):
    bias_lead: tuple[int, ...] = ()  # the bias's dimensions before its channels, as the op's tensor has them (a matrix's row: (1,))
    step_keys: frozenset[str] = frozenset()  # the keys of a slot's buffers, each step's own (the rest are the output tile's)
    zp_buffer = True  # the asymmetric mode's second product reads zp_r from a buffer (_zero_point), not as a number
    zero_point: Buf | None = None  # that buffer, once placed (place_zero_point), or its role while a tiling is priced
    ctx: Lowering
    em: Emits  # while the estimate prices a tiling, its Recorder, which answers the calls the templates make (Priced.recording)
    node: Node
    opdef: OpDef
    units: list[Unit]
    mx: Engine | None  # the unit's matrix engine, None on the vector unit
    vx: Engine  # its vector engine
    out: Tensor  # the tensor the op makes
    out_channels: int
    acc_dtype: str
    bias: tuple[Buf, str] | None
    bias_in_table: bool  # the products start from the bias, in the matrix unit's bias memory (bias_table.py)
    steps: list[Step]
    temps: list[str]  # the epilogue's scratch dtypes
    asym: bool
    zp_dtype: str  # zp_r's dtype: the weight's (the product's right operand's) as the op has it
    stored: str
    flight_steps: list[Step] | None
    flight: InFlight | None
    acc_key: str
    result_key: str

    def init_bias(self, bias: tuple[Buf, str] | None, integer: bool) -> None:
        """The op's bias (bias_v2 in the asymmetric mode: _fold_bias), and whether the products
        start from it in the matrix unit's bias memory (a float one, where the unit has such a
        memory: bias_table.bias_memory)."""
        self.bias = bias
        self.bias_in_table = bias_table.bias_memory(self.units[0], bias, integer) is not None
        self.__dict__.pop("_epilogue", None)

    @property
    def added_bias(self) -> str | None:
        """The dtype of the bias the epilogue adds (one the products do not start from), or None."""
        return self.bias[1] if self.bias is not None and not self.bias_in_table else None

    def init_epilogue(self, steps: list[Step], temps: list[str], stored: str, flight_steps: list[Step] | None) -> None:
        """The op's epilogue (steps from the accumulator, their scratch dtypes) and the
        accumulator's way out (the tensor it would store, the epilogue steps the DMA storing it
        would do, or None); then where the epilogue reads the accumulator (acc_key: the
        accumulator, or its copy in the vector memory where the matrix unit accumulates elsewhere,
        as an Ascend cube in L0C) and where the result ends (result_key: that, where it has the
        result's dtype, or "out"); with the epilogue done on the way out (self.flight), both are
        the accumulator."""
        self.steps, self.temps, self.stored, self.flight_steps = steps, temps, stored, flight_steps
        self.acc_key = "acc" if self._acc_memory() == self.vmem else "accv"
        self.result_key = self.acc_key if self.out.dtype == self.acc_dtype else "out"
        self.flight = self._flight(self.units[0])
        if self.flight is not None:  # the store reads the accumulator, and does the epilogue on its way
            self.acc_key = self.result_key = "acc"
        self.__dict__.pop("_epilogue", None)

    @property
    def vmem(self) -> str:
        """The memory of the unit's vector engine: where the epilogue runs."""
        return operand_memory(self.vx, "")

    @property
    def matrix_engine(self) -> Engine:
        """The unit's matrix engine, of a plan that multiplies on one."""
        if self.mx is None:
            raise UnsupportedError(f"{self.node.name}: a plan on the vector unit has no matrix engine")
        return self.mx

    @property
    def matrix_unit(self) -> MatrixUnit:
        """The figures of the unit's matrix engine (chips/schema.py), of a plan that multiplies on one."""
        unit = self.matrix_engine.matrix
        if unit is None:
            raise UnsupportedError(f"{self.node.name}: matrix engine {self.matrix_engine.name} has no matrix unit")
        return unit

    def _acc_memory(self) -> str:
        return self.vmem if self.mx is None else operand_memory(self.mx, "c")

    def _flight(self, unit: Unit) -> InFlight | None:
        """The InFlight storing unit's accumulator home with the epilogue done on the way, or None."""
        if self.flight_steps is None:
            return None
        return in_flight(self.ctx.chip, unit, self.flight_steps, self.acc_dtype, self.ctx.home[self.stored].mem)

    def on(self, unit: Unit) -> Self:
        """This plan with its tiles run by unit's engines."""
        mine = shallow_copy(self)
        mine.mx, mine.vx, mine.flight = unit.matrix, unit.vx, self._flight(unit)
        return mine

    def run_dealt(self, tiles: list[T], unit_steps: Callable[[Self, list[T]], tuple[list[PipelineStep], list[Buf]]], stores: list[Buf],
                  later: Callable[[], list[Buf]] = list) -> None:
        """Deal the output tiles among the units (pipeline.deal) and run each unit's steps
        (pipeline.run_units): unit_steps(this plan on the unit, its tiles) places the unit's
        buffers and gives (its steps, those buffers); all are released after the run, then
        what later() gives (buffers the steps placed as they ran)."""
        per_unit: list[list[PipelineStep]] = []
        placed: list[Buf] = []
        for k, (unit, run) in enumerate(zip(self.units, deal(tiles, len(self.units)))):
            if k and not run:
                continue
            steps, bufs = unit_steps(self.on(unit), run)
            per_unit.append(steps)
            placed += bufs
        run_units(self.ctx, stores, per_unit)
        for buf in placed + later():
            self.em.release(buf)

    def _least(self, fitting: list, floors: np.ndarray, ties: tuple, units: int, fits: Callable[[tuple], bool] | None = None,
               only: Callable[[tuple], int] | None = None) -> tuple[tuple, float] | None:
        """(Of the fitting tilings, the one of least estimated cycles on the busiest of `units`
        units, those cycles) (tiling.least: floors bound each from below; ties break equal
        estimates), each estimated by self._schedule(*tiling, units, ...) (_schedule_of); with
        `fits`, of the tilings that fit by it, asked only of those that can still win; with
        `only`, a tiling of the least one's reduction block (`only` gives a tiling's), found
        once that block is decided."""
        admits = None if fits is None else (lambda i: fits(fitting[i]))
        blocks = None if only is None else np.array([only(t) for t in fitting], np.int64)
        hold = estimate.bounds_hold(self.ctx.chip, units)
        return least(floors, ties, lambda i: self._schedule_of(fitting[i], units), fitting, hold, admits, blocks)

    @abstractmethod
    def _schedule_of(self, tiling: tuple, units: int) -> Estimate:
        """The Estimate (estimate.tiled) of a tiling, as the search's candidates have it, on `units` units."""

    def _for_units(self, choose: Callable[[list | None, int, Callable[[tuple], int] | None], tuple[tuple, float] | None],
                   block: Callable[[tuple], int]) -> tuple[tuple, float] | None:
        """(choice, its estimated cycles on every unit): choose(blocks, units, only) for one unit
        (blocks None: every reduction block), then, with several units, for them with its
        reduction block, so that the order of the sums does not depend on the units. The search
        for one unit then decides only the block (only: `block`, tiling.least's blocks)."""
        several = len(self.units) > 1
        found = choose(None, 1, block if several else None)
        if found and several:
            found = choose([block(found[0])], len(self.units), None)
        return found

    def place_buffers(self, wanted: Iterable[tuple[Key, int, str, int]]) -> dict[tuple[Key, int], Buf]:
        """(key, slot) -> the Buf placed, for each (key, slot, memory, bytes) wanted, in that order
        (the order decides the addresses), named by the op, its key (("tmp", j) for the epilogue's
        temporaries) and slot."""
        op = self.node.name
        return {(key, s): self.em.alloc(mem, n, f"{op}/{key if isinstance(key, str) else f'tmp{key[1]}'}.{s}") for key, s, mem, n in wanted}

    def fits(self, per_mem: dict[str, list[int]]) -> bool:
        """Whether buffers of these sizes (memory -> sizes) fit in what is free now."""
        return all(self.em.allocators[m].fits(sizes) for m, sizes in per_mem.items())

    def _none_fits(self, least: str, per_mem: dict[str, list[int]]) -> OutOfMemoryError:
        """The error of a search no tiling of which fits: even the least tile (`least` names it)
        needs buffers of these sizes (memory -> sizes), more than is free."""
        return OutOfMemoryError(f"{self.node.name}: even {least} needs {shortfall(self.em.allocators, per_mem)}")

    # ---- the bias and the zero points ------------------------------------------------------

    def _fold_bias(self, sums: np.ndarray, dtype: str = "int32") -> Buf:
        """bias_v2 = bias - zp_l * sums (sums: over each output channel's reduction, the weight
        less zp_r), a constant of dtype bound where the bias it replaces lives (DDR without one).
        INT32, the seed says (a float bias converts as C's (int) does: toward zero); float32
        where the product is made in float32."""
        node, g = self.node, self.ctx.graph
        constants: dict[str, np.ndarray] = g.constants
        zl = node.params["left_zero_point"]
        given = self._given_bias()
        bias: np.ndarray | int
        if dtype == "float32":
            bias = constants[node.inputs[2]].astype(np.float32).reshape(sums.shape)
            data = (bias - np.float32(zl) * sums.astype(np.float32)).astype(np.float32).tobytes()
        else:
            bias = constants[node.inputs[2]].astype(np.int64).reshape(sums.shape) if given else 0
            data = dtypes.convert(bias - zl * sums, "int32").tobytes()
        mem = given[0].mem if given else "ddr"
        return self.em.bind(f"{node.name}.bias_v2", "const", dtype, sums.shape, data, mem)

    def _given_bias(self) -> tuple[Buf, str] | None:
        """(home Buf, dtype) of the op's bias input, its third, or None without one (the integer
        family appends zero-point tables after it)."""
        if self.opdef.checked_inputs(self.node) != 3:
            return None
        name = self.node.inputs[2]
        return self.ctx.home[name], self.ctx.graph.tensors[name].dtype

    def _load_bias(self, bufs: Bufs, c0: int, n: int) -> None:
        """A tile's bias, n channels from c0: into the matrix unit's bias table, or the vector memory."""
        assert self.bias is not None
        home, dtype = self.bias
        if self.bias_in_table:
            bias_table.load(self.em, bufs.__getitem__, home, dtype, self.out_channels, c0, n, self.acc_dtype, self.matrix_engine.core,
                            self.node.name)
            return
        lead = self.bias_lead
        src = sub_region(home.region(dtype, lead + (self.out_channels,)), (0,) * len(lead) + (c0,), lead + (n,))
        copy(self.em, src, home, bufs["bias"].region(dtype, lead + (n,)), bufs["bias"], self.node.name)

    def place_zero_point(self) -> list[Buf]:
        """Places the asymmetric mode's zp_r element where its second product reads it from a
        buffer (self.zero_point; None otherwise): the Bufs placed, to release after the run."""
        self.zero_point = self._zero_point() if self.asym and self.zp_buffer else None
        return [self.zero_point] if self.zero_point is not None else []

    def _zero_point(self) -> Buf:
        """One element of zp_r in the matrix unit's weight memory, read with stride 0 as a whole
        weight block by the asymmetric mode's second product."""
        mem, name = operand_memory(self.matrix_engine, "b"), self.node.name
        if mem != self.vmem:
            raise UnsupportedError(f"{name}: the matrix unit's weight memory {mem} is not the vector memory {self.vmem}")
        buf = self.em.alloc(mem, dtypes.itemsize(self.zp_dtype), f"{name}/zp_r")
        zr = self.node.params["right_zero_point"]
        self.em.emit(self.vx.name, Vector("copy", buf.region(self.zp_dtype, (1,)), (zr,), "int64", name), writes=(buf,))
        return buf

    def _zero_point_block(self, shape: tuple[int, ...]) -> tuple[Region, Buf]:
        """(zp_r's one element (self.zero_point) read as a whole weight block of `shape` (every
        stride 0), its Buf)."""
        zp = self.zero_point
        assert zp is not None, "placed with the tile's buffers (place_zero_point), or a role while a tiling is priced"
        return Region(zp.mem, zp.addr, self.zp_dtype, shape, (0,) * len(shape)), zp

    def _zero_point_role(self) -> Buf:
        """_zero_point's buffer as the estimate's role: where it is placed, and its bytes."""
        return estimate.role("fixed", "zp_r", operand_memory(self.matrix_engine, "b"), dtypes.itemsize(self.zp_dtype))

    def _as_roles(self, needs: Iterable[tuple[Key, str, int]], kept: Iterable[Key] = ()) -> Bufs:
        """A tile's buffers (key, memory, bytes) as the estimate's roles: a slot's (step_keys) by
        step, a kept operand's (kept) by the tiles that load it, the rest by tile; and the
        asymmetric mode's zp_r element where a buffer holds it."""
        out = {key: estimate.role(estimate.KEPT if key in kept else estimate.STEP if key in self.step_keys else estimate.TILE, key, mem, n)
               for key, mem, n in needs}
        if self.asym and self.zp_buffer:
            out["zp_r"] = self._zero_point_role()
        return out

    def _zero_operand(self, key: str, length: int, start: int, n: int, buf: Buf | None, shape: tuple[int, ...],
                      axis: int) -> tuple[Region | int, tuple[Buf, ...]]:
        """(the integer family's zero point `key` as the operand its shift subtracts, the Bufs it
        reads): its number (params[key]), or elements start..start+n of its table (params[key +
        "_input"], int16, `length` long) loaded into buf and read as `shape` along `axis`."""
        zero = self.node.params[key]
        if zero != "vector":
            return zero, ()
        assert buf is not None, f"{key}: a zero-point table needs its buffer (the plan's needs)"
        home = self.ctx.home[self.node.inputs[self.node.params[key + "_input"]]]
        copy(self.em, sub_region(home.region("int16", (length,)), (start,), (n,)), home, buf.region("int16", (n,)), buf,
             self.node.name)
        return Region(buf.mem, buf.addr, "int16", shape, tuple(int(d == axis) for d in range(len(shape)))), (buf,)

    # ---- the accumulator's way out ----------------------------------------------------------

    def _epilogue_needs(self, acc_bytes: int, channels: int, out_elems: int) -> list[tuple[Key, str, int]]:
        """(key, memory, bytes) of a tile's buffers past its accumulator: the asymmetric mode's
        second one, the bias table's row and, unless the epilogue is done on the way out, the
        accumulators' copies in the vector memory (with the buffers their copies stage
        through), the bias, the result and the epilogue's temporaries. Worked out once per
        sizes and unit: a search asks for them with every candidate's every block (the list
        given is not to be changed)."""
        known = self.__dict__.setdefault("_epilogue", {})  # init_bias and init_epilogue start it afresh
        key = (acc_bytes, channels, out_elems, self.mx.name if self.mx is not None else None, self.vx.name, self.flight is None)
        if key not in known:
            known[key] = self._worked_epilogue_needs(acc_bytes, channels, out_elems)
        return known[key]

    def _worked_epilogue_needs(self, acc_bytes: int, channels: int, out_elems: int) -> list[tuple[Key, str, int]]:
        cmem, vmem = self._acc_memory(), self.vmem
        needs: list[tuple[Key, str, int]] = [("acc_zp", cmem, acc_bytes)] if self.asym else []
        table = self.matrix_unit.bias if self.bias_in_table else None  # this unit's bias memory
        if table is not None and self.bias is not None:
            home, dtype = self.bias
            needs += bias_table.needs(self.ctx.chip, home, dtype, self.acc_dtype, table, channels)
        if self.flight is not None:
            return needs
        if self.acc_key != "acc":
            suffixes = ("", "_zp") if self.asym else ("",)
            needs += [("accv" + s, vmem, acc_bytes) for s in suffixes]
            needs += [(f"accv{s}.stage{k}", mem, acc_bytes) for s in suffixes for k, mem in enumerate(stages(self.ctx.chip, cmem, vmem))]
        added = self.added_bias
        if added is not None:
            needs.append(("bias", vmem, nbytes(added, (channels,))))
        if self.result_key == "out":
            needs.append(("out", vmem, nbytes(self.out.dtype, (out_elems,))))
        return needs + [(("tmp", j), vmem, nbytes(d, (out_elems,))) for j, d in enumerate(self.temps)]

    def _finish(self, bufs: Bufs, extents: tuple[int, ...]) -> None:
        """The accumulators to the vector memory where they live elsewhere, then the epilogue
        into the result: it reads the accumulator, the bias along the channels (dimension 1) and
        the asymmetric mode's second accumulator."""
        if self.acc_key != "acc":
            for s in ("", "_zp") if self.asym else ("",):
                here, there = bufs["acc" + s], bufs["accv" + s]
                staged = [bufs[f"accv{s}.stage{k}"] for k in range(len(stages(self.ctx.chip, here.mem, there.mem)))]
                copy(self.em, here.region(self.acc_dtype, extents), here, there.region(self.acc_dtype, extents), there, self.node.name,
                     stages=staged)
        acc = bufs[self.acc_key]
        inputs = [(acc.region(self.acc_dtype, extents), acc)]
        added = self.added_bias
        if added is not None:
            bias = bufs["bias"]
            view = bias.region(added, (1, extents[1]) + (1,) * (len(extents) - 2))
            inputs.append((broadcast_view(view, extents), bias))
        if self.asym:
            acc_zp = bufs[self.acc_key + "_zp"]
            inputs.append((acc_zp.region(self.acc_dtype, extents), acc_zp))
        out = bufs[self.result_key]
        temps = [(bufs["tmp", j].region(d, extents), bufs["tmp", j]) for j, d in enumerate(self.temps)]
        emit_steps(self.em, self.vx.name, self.node.name, self.steps, inputs, (out.region(self.out.dtype, extents), out), temps)

    def _store_flown(self, bufs: Bufs, dst: Region, extents: tuple[int, ...]) -> None:
        """The accumulator to dst (a region where self.stored lives) by its way out, the epilogue
        done on the way: part by part where the accumulator is in parts (_acc_parts)."""
        assert self.flight is not None
        acc = bufs["acc"]
        whole = acc.region(self.acc_dtype, extents)
        rest = tuple(extents[1:])
        for r0, rows, held in self._acc_parts(acc, extents):
            starts = (r0,) + (0,) * len(rest)
            self.flight.emit(self.em, sub_region(whole, starts, (rows,) + rest), held, sub_region(dst, starts, (rows,) + rest),
                             self.ctx.home[self.stored], self.node.name)

    def _acc_parts(self, acc: Buf, extents: tuple[int, ...]) -> list[tuple[int, int, tuple[Buf, ...]]]:
        """(first row, rows, Bufs) of the accumulator's parts (Emitter.split, along dimension 0)
        that a tile of `extents` fills, one per part where the parts fall on its rows (a whole
        tile), else one naming them all."""
        row, count = math.prod(extents[1:]) * dtypes.itemsize(self.acc_dtype), extents[0]
        parts: tuple[Buf, ...] = acc.parts
        starts = [0]
        for part in parts[:-1]:
            starts.append(starts[-1] + part.size // row if part.size % row == 0 else count)
        if len(starts) == 1 or starts[-1] >= count:
            return [(0, count, parts or (acc,))]
        return [(r, end - r, (part,)) for r, end, part in zip(starts, starts[1:] + [count], parts)]
