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

    from ..context import Lowering
    from ..emit import Buf
    from ..schedule.fusion import Group

    Action = Callable[[], None]  # one of a pipeline step's load, compute and store (isa/lower/schedule/pipeline.py)


def lower_resize(ctx: Lowering, group: Group) -> None:  # noqa: PLR0915  # one template: slots, tiling and emission share its locals
    """Emit the group's resize (the module's docstring). One function of some 90 lines: the slot
    sizes, the block search and each unit's load/compute/store closures read the same locals (the
    shapes, the interpolation matrices, the homes), which a split would pass around as a dozen
    arguments."""
    node = group.nodes[0]
    g, em, p = ctx.graph, ctx.em, node.params
    x, out = g.tensors[node.inputs[0]], g.tensors[node.outputs[0]]
    n, c, h, w = x.shape
    oh, ow = out.shape[2:]
    planes = n * c
    units = ctx.units("matrix")
    amem, bmem, _cmem = (operand_memory(units[0].mx, r) for r in "abc")
    ry = em.bind(f"{node.name}.ry", "const", "float32", (oh, h), matrix(h, oh, p).tobytes())
    rxt = em.bind(f"{node.name}.rxt", "const", "float32", (w, ow), np.ascontiguousarray(matrix(w, ow, p).T).tobytes())

    def needs(k: int, mx: Engine) -> list[tuple[str, str, int]]:
        """(key, memory, bytes) of one slot for k planes on matrix engine mx: T goes on as the
        second product's right operand, copied there (through the memories the copy stages in)
        when the engine's result and right operand memories differ."""
        amem, bmem, cmem = (operand_memory(mx, r) for r in "abc")
        t = nbytes("float32", (k, h, ow))
        items = [("x", amem, nbytes(x.dtype, (k, h, w))), ("t", cmem, t), ("y", cmem, nbytes(out.dtype, (k, oh, ow)))]
        if bmem != cmem:
            items += [("tb", bmem, t)] + [(f"tb.stage{j}", mem, t) for j, mem in enumerate(stages(ctx.chip, cmem, bmem))]
        return items

    def sizes(k: int) -> dict[str, list[int]]:
        """memory -> the sizes of every buffer placed there for blocks of k planes."""
        per_mem: dict[str, list[int]] = {amem: [nbytes("float32", (oh, h))]}
        per_mem.setdefault(bmem, []).append(nbytes("float32", (w, ow)))
        for _, mem, size in needs(k, units[0].mx):
            per_mem.setdefault(mem, []).extend([size] * ctx.slots)
        return per_mem

    def fits(k: int) -> bool:
        return all(em.allocators[m].fits(s) for m, s in sizes(k).items())

    budget = step_budget(ctx, nbytes(x.dtype, (planes, h, w)), amem, len(units))
    most = ctx.policy.tile_limit("n", n) * ctx.policy.tile_limit("c", c)  # the planes an (n, c) tile limit allows
    candidates = [k for k in halvings(most, 1) if fits(k)]
    if not candidates:
        raise OutOfMemoryError(f"{node.name}: one {h}x{w} plane with its {oh}x{ow} result and the "
                               f"interpolation matrices need {shortfall(em.allocators, sizes(1))}")
    k = next((k for k in candidates if budget is None or nbytes(x.dtype, (k, h, w)) <= budget), candidates[-1])
    src_all = ctx.home[x.name].region(x.dtype, (planes, h, w))
    dst_all = ctx.home[out.name].region(out.dtype, (planes, oh, ow))

    def unit_steps(mx: Engine, blocks: list[tuple[int, int]]) -> tuple[list[tuple[Action, Action, Action]], list[Buf]]:
        """The buffers matrix engine mx places, and its pipeline steps for these blocks."""
        local_ry = em.alloc(operand_memory(mx, "a"), nbytes("float32", (oh, h)), f"{node.name}/ry")
        local_rxt = em.alloc(operand_memory(mx, "b"), nbytes("float32", (w, ow)), f"{node.name}/rxt")
        ry_r, rxt_r = local_ry.region("float32", (oh, h)), local_rxt.region("float32", (w, ow))
        copy(em, ry.region("float32", (oh, h)), ry, ry_r, local_ry, node.name)
        copy(em, rxt.region("float32", (w, ow)), rxt, rxt_r, local_rxt, node.name)
        slots = [{key: em.alloc(mem, size, f"{node.name}/{key}.{s}") for key, mem, size in needs(k, mx)} for s in range(ctx.slots)]

        def step(i: int, p0: int, kk: int) -> tuple[Action, Action, Action]:
            bufs = slots[i % ctx.slots]
            xr = bufs["x"].region(x.dtype, (kk, h, w))
            t = bufs["t"].region("float32", (kk, h, ow))
            yr = bufs["y"].region(out.dtype, (kk, oh, ow))

            def load() -> None:
                copy(em, sub_region(src_all, (p0, 0, 0), (kk, h, w)), ctx.home[x.name], xr, bufs["x"], node.name)

            def compute() -> None:
                em.emit(mx.name, Matmul(xr, rxt_r, t, False, node.name, m=2), reads=(bufs["x"], local_rxt), writes=(bufs["t"],))
                tb_buf, tb = bufs["t"], t
                if "tb" in bufs:
                    tb_buf, tb = bufs["tb"], bufs["tb"].region("float32", (kk, h, ow))
                    staged = [bufs[f"tb.stage{j}"] for j in range(len(stages(ctx.chip, t.mem, tb.mem)))]
                    copy(em, t, bufs["t"], tb, tb_buf, node.name, stages=staged)
                # T read as (rows, planes, columns), the result written as (rows, planes, columns)
                b = Region(tb.mem, tb.addr, "float32", (h, kk, ow), (ow, h * ow, 1))
                y = Region(yr.mem, yr.addr, out.dtype, (oh, kk, ow), (ow, oh * ow, 1))
                em.emit(mx.name, Matmul(ry_r, b, y, False, node.name), reads=(local_ry, tb_buf), writes=(bufs["y"],))

            def store() -> None:
                copy(em, yr, bufs["y"], sub_region(dst_all, (p0, 0, 0), (kk, oh, ow)), ctx.home[out.name], node.name)

            return load, compute, store

        placed = [buf for bufs in slots for buf in bufs.values()] + [local_ry, local_rxt]
        return [step(i, p0, kk) for i, (p0, kk) in enumerate(blocks)], placed

    blocks = [(p0, min(k, planes - p0)) for p0 in range(0, planes, k)]
    per_unit, placed = [], []
    for u, (unit, run) in enumerate(zip(units, deal(blocks, len(units)))):
        if u and not run:
            continue
        steps, bufs = unit_steps(unit.mx, run)
        per_unit.append(steps)
        placed += bufs
    run_units(ctx, [ctx.home[out.name]], per_unit)
    for buf in placed:
        em.release(buf)
