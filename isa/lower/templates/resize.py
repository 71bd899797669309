"""The resize template: interpolate on the matrix unit.

Resizing a plane is two products with interpolation matrices made offline: T = plane @ Rx^T
(along W), then out = Ry @ T (along H); both matrices have a row per output index and that
index's taps (one for NEAREST, two for BILINEAR) as its only non-zeros. Planes (n, c) go through
in blocks (at most the policy's "n" limit times its "c" limit): the first product reads the block as ((planes, rows), columns),
the second reads T as (rows, (planes, columns)), so each block is two matrix instructions.

The blocks are dealt among the matrix units (one per core), each with its own copy of the two
interpolation matrices in its operand memories.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...errors import OutOfMemoryError
from ...instructions import Matmul, Region
from ...ops.resample import matrix
from ..context import operand_memory
from ..memory.alloc import shortfall
from ..memory.route import copy
from ..schedule.pipeline import deal, run_units, step_budget
from ..schedule.tiling import halvings, nbytes, sub_region
from .staging import stages

if TYPE_CHECKING:
    from collections.abc import Callable

    from chips.schema import Engine

    from ...graph import Node
    from ..context import Lowering
    from ..emit import Buf
    from ..schedule.fusion import Group

    Action = Callable[[], None]  # one of a pipeline step's load, compute and store (isa/lower/schedule/pipeline.py)


def lower_resize(ctx: Lowering, group: Group) -> None:
    """Emit the group's resize (the module's docstring): the block of planes, then each unit's
    steps, run together."""
    plan = _Resize(ctx, group.nodes[0])
    k = plan.block()
    blocks = [(p0, min(k, plan.planes - p0)) for p0 in range(0, plan.planes, k)]
    per_unit, placed = [], []
    for u, (unit, run) in enumerate(zip(plan.units, deal(blocks, len(plan.units)))):
        if u and not run:
            continue
        steps, bufs = plan.unit_steps(unit.mx, run, k)
        per_unit.append(steps)
        placed += bufs
    run_units(ctx, [ctx.home[plan.out.name]], per_unit)
    for buf in placed:
        ctx.em.release(buf)


class _Resize:
    """A resize's shapes and its interpolation matrices, bound as constants."""

    def __init__(self, ctx: Lowering, node: Node) -> None:
        self.ctx, self.node, p = ctx, node, node.params
        g = ctx.graph
        self.x, self.out = g.tensors[node.inputs[0]], g.tensors[node.outputs[0]]
        self.n, self.c, self.h, self.w = self.x.shape
        self.oh, self.ow = self.out.shape[2:]
        self.planes = self.n * self.c
        self.units = ctx.units("matrix")
        h, w, oh, ow = self.h, self.w, self.oh, self.ow
        self.ry = ctx.em.bind(f"{node.name}.ry", "const", "float32", (oh, h), matrix(h, oh, p).tobytes())
        self.rxt = ctx.em.bind(f"{node.name}.rxt", "const", "float32", (w, ow), np.ascontiguousarray(matrix(w, ow, p).T).tobytes())

    def needs(self, k: int, mx: Engine) -> list[tuple[str, str, int]]:
        """(key, memory, bytes) of one slot for k planes on matrix engine mx: T goes on as the
        second product's right operand, copied there (through the memories the copy stages in)
        when the engine's result and right operand memories differ."""
        h, w, oh, ow = self.h, self.w, self.oh, self.ow
        amem, bmem, cmem = (operand_memory(mx, r) for r in "abc")
        t = nbytes("float32", (k, h, ow))
        items = [("x", amem, nbytes(self.x.dtype, (k, h, w))), ("t", cmem, t), ("y", cmem, nbytes(self.out.dtype, (k, oh, ow)))]
        if bmem != cmem:
            items += [("tb", bmem, t)] + [(f"tb.stage{j}", mem, t) for j, mem in enumerate(stages(self.ctx.chip, cmem, bmem))]
        return items

    def sizes(self, k: int) -> dict[str, list[int]]:
        """memory -> the sizes of every buffer placed there for blocks of k planes."""
        mx = self.units[0].mx
        per_mem: dict[str, list[int]] = {operand_memory(mx, "a"): [nbytes("float32", (self.oh, self.h))]}
        per_mem.setdefault(operand_memory(mx, "b"), []).append(nbytes("float32", (self.w, self.ow)))
        for _, mem, size in self.needs(k, mx):
            per_mem.setdefault(mem, []).extend([size] * self.ctx.slots)
        return per_mem

    def block(self) -> int:
        """The planes a block takes: the most (a halving of the policy's limits) whose buffers fit
        and whose input stays within the pipeline's step budget, else the least that fits."""
        ctx, em, h, w = self.ctx, self.ctx.em, self.h, self.w
        budget = step_budget(ctx, nbytes(self.x.dtype, (self.planes, h, w)), operand_memory(self.units[0].mx, "a"), len(self.units))
        most = ctx.policy.tile_limit("n", self.n) * ctx.policy.tile_limit("c", self.c)  # the planes an (n, c) tile limit allows
        candidates = [k for k in halvings(most, 1) if all(em.allocators[m].fits(s) for m, s in self.sizes(k).items())]
        if not candidates:
            raise OutOfMemoryError(f"{self.node.name}: one {h}x{w} plane with its {self.oh}x{self.ow} result and the "
                                   f"interpolation matrices need {shortfall(em.allocators, self.sizes(1))}")
        return next((k for k in candidates if budget is None or nbytes(self.x.dtype, (k, h, w)) <= budget), candidates[-1])

    def unit_steps(self, mx: Engine, blocks: list[tuple[int, int]], k: int) -> tuple[list[tuple[Action, Action, Action]], list[Buf]]:
        """The pipeline steps of matrix engine mx for these blocks (of at most k planes), and the
        buffers it places: its copies of the interpolation matrices and each slot's."""
        ctx, em, name, h, w, oh, ow = self.ctx, self.ctx.em, self.node.name, self.h, self.w, self.oh, self.ow
        local_ry = em.alloc(operand_memory(mx, "a"), nbytes("float32", (oh, h)), f"{name}/ry")
        local_rxt = em.alloc(operand_memory(mx, "b"), nbytes("float32", (w, ow)), f"{name}/rxt")
        ry_r, rxt_r = local_ry.region("float32", (oh, h)), local_rxt.region("float32", (w, ow))
        copy(em, self.ry.region("float32", (oh, h)), self.ry, ry_r, local_ry, name)
        copy(em, self.rxt.region("float32", (w, ow)), self.rxt, rxt_r, local_rxt, name)
        slots = [{key: em.alloc(mem, size, f"{name}/{key}.{s}") for key, mem, size in self.needs(k, mx)} for s in range(ctx.slots)]
        x_home, out_home = ctx.home[self.x.name], ctx.home[self.out.name]
        src_all = x_home.region(self.x.dtype, (self.planes, h, w))
        dst_all = out_home.region(self.out.dtype, (self.planes, oh, ow))

        def step(i: int, p0: int, kk: int) -> tuple[Action, Action, Action]:
            bufs = slots[i % ctx.slots]
            xr = bufs["x"].region(self.x.dtype, (kk, h, w))
            t = bufs["t"].region("float32", (kk, h, ow))
            yr = bufs["y"].region(self.out.dtype, (kk, oh, ow))

            def load() -> None:
                copy(em, sub_region(src_all, (p0, 0, 0), (kk, h, w)), x_home, xr, bufs["x"], name)

            def compute() -> None:
                em.emit(mx.name, Matmul(xr, rxt_r, t, False, name, m=2), reads=(bufs["x"], local_rxt), writes=(bufs["t"],))
                tb_buf, tb = bufs["t"], t
                if "tb" in bufs:
                    tb_buf, tb = bufs["tb"], bufs["tb"].region("float32", (kk, h, ow))
                    staged = [bufs[f"tb.stage{j}"] for j in range(len(stages(ctx.chip, t.mem, tb.mem)))]
                    copy(em, t, bufs["t"], tb, tb_buf, name, stages=staged)
                # T read as (rows, planes, columns), the result written as (rows, planes, columns)
                b = Region(tb.mem, tb.addr, "float32", (h, kk, ow), (ow, h * ow, 1))
                y = Region(yr.mem, yr.addr, self.out.dtype, (oh, kk, ow), (ow, oh * ow, 1))
                em.emit(mx.name, Matmul(ry_r, b, y, False, name), reads=(local_ry, tb_buf), writes=(bufs["y"],))

            def store() -> None:
                copy(em, yr, bufs["y"], sub_region(dst_all, (p0, 0, 0), (kk, oh, ow)), out_home, name)

            return load, compute, store

        placed = [buf for bufs in slots for buf in bufs.values()] + [local_ry, local_rxt]
        return [step(i, p0, kk) for i, (p0, kk) in enumerate(blocks)], placed
