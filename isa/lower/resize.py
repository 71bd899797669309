"""The resize template: interpolate on the matrix unit.

Resizing a plane is two products with interpolation matrices made offline: T = plane @ Rx^T
(along W), then out = Ry @ T (along H); both matrices have a row per output index and that
index's taps (one for NEAREST, two for BILINEAR) as its only non-zeros. Planes (n, c) go through
in blocks (at most the policy's "n" limit times its "c" limit): the first product reads the block as ((planes, rows), columns), the second reads T
as (rows, (planes, columns)), so each block is two matrix instructions.
"""

import numpy as np

from ..errors import OutOfMemoryError
from ..instructions import Matmul, Region
from ..ops.resample import matrix
from .alloc import shortfall
from .pipeline import pipeline, step_budget
from .route import copy
from .tiling import halvings, nbytes, sub_region


def lower_resize(ctx, group):
    node = group.nodes[0]
    g, em, p = ctx.graph, ctx.em, node.params
    x, out = g.tensors[node.inputs[0]], g.tensors[node.outputs[0]]
    n, c, h, w = x.shape
    oh, ow = out.shape[2:]
    planes = n * c
    mx = ctx.engine("matrix")
    amem, bmem, cmem = (mx.operand_memory(r) for r in "abc")
    ry = em.bind(f"{node.name}.ry", "const", "float32", (oh, h), matrix(h, oh, p).tobytes())
    rxt = em.bind(f"{node.name}.rxt", "const", "float32", (w, ow), np.ascontiguousarray(matrix(w, ow, p).T).tobytes())

    def needs(k):
        """(key, memory, bytes) of one slot for k planes."""
        items = [("x", amem, nbytes(x.dtype, (k, h, w))), ("t", cmem, nbytes("float32", (k, h, ow))),
                 ("y", cmem, nbytes(out.dtype, (k, oh, ow)))]
        return items + ([("tb", bmem, nbytes("float32", (k, h, ow)))] if bmem != cmem else [])

    def sizes(k):
        """memory -> the sizes of every buffer placed there for blocks of k planes."""
        per_mem = {amem: [nbytes("float32", (oh, h))]}
        per_mem.setdefault(bmem, []).append(nbytes("float32", (w, ow)))
        for _, mem, size in needs(k):
            per_mem.setdefault(mem, []).extend([size] * ctx.slots)
        return per_mem

    def fits(k):
        return all(em.allocators[m].fits(s) for m, s in sizes(k).items())

    budget = step_budget(ctx, nbytes(x.dtype, (planes, h, w)), amem)
    most = ctx.policy.tile_limit("n", n) * ctx.policy.tile_limit("c", c)  # the planes an (n, c) tile limit allows
    candidates = [k for k in halvings(most, 1) if fits(k)]
    if not candidates:
        raise OutOfMemoryError(f"{node.name}: one {h}x{w} plane with its {oh}x{ow} result and the interpolation matrices need {shortfall(em.allocators, sizes(1))}")
    k = next((k for k in candidates if budget is None or nbytes(x.dtype, (k, h, w)) <= budget), candidates[-1])
    local_ry = em.alloc(amem, nbytes("float32", (oh, h)), f"{node.name}/ry")
    local_rxt = em.alloc(bmem, nbytes("float32", (w, ow)), f"{node.name}/rxt")
    ry_r, rxt_r = local_ry.region("float32", (oh, h)), local_rxt.region("float32", (w, ow))
    copy(em, ry.region("float32", (oh, h)), ry, ry_r, local_ry, node.name)
    copy(em, rxt.region("float32", (w, ow)), rxt, rxt_r, local_rxt, node.name)
    slots = [{key: em.alloc(mem, size, f"{node.name}/{key}.{s}") for key, mem, size in needs(k)} for s in range(ctx.slots)]
    src_all = ctx.home[x.name].region(x.dtype, (planes, h, w))
    dst_all = ctx.home[out.name].region(out.dtype, (planes, oh, ow))

    def step(i, p0, kk):
        bufs = slots[i % ctx.slots]
        xr = bufs["x"].region(x.dtype, (kk, h, w))
        t = bufs["t"].region("float32", (kk, h, ow))
        yr = bufs["y"].region(out.dtype, (kk, oh, ow))

        def load():
            copy(em, sub_region(src_all, (p0, 0, 0), (kk, h, w)), ctx.home[x.name], xr, bufs["x"], node.name)

        def compute():
            em.emit(mx.name, Matmul(xr, rxt_r, t, False, node.name, m=2), reads=(bufs["x"], local_rxt), writes=(bufs["t"],))
            tb_buf, tb = bufs["t"], t
            if "tb" in bufs:
                tb_buf, tb = bufs["tb"], bufs["tb"].region("float32", (kk, h, ow))
                copy(em, t, bufs["t"], tb, tb_buf, node.name)
            # T read as (rows, planes, columns), the result written as (rows, planes, columns)
            b = Region(tb.mem, tb.addr, "float32", (h, kk, ow), (ow, h * ow, 1))
            y = Region(yr.mem, yr.addr, out.dtype, (oh, kk, ow), (ow, oh * ow, 1))
            em.emit(mx.name, Matmul(ry_r, b, y, False, node.name), reads=(local_ry, tb_buf), writes=(bufs["y"],))

        def store():
            copy(em, yr, bufs["y"], sub_region(dst_all, (p0, 0, 0), (kk, oh, ow)), ctx.home[out.name], node.name)

        return load, compute, store

    pipeline([step(i, p0, min(k, planes - p0)) for i, p0 in enumerate(range(0, planes, k))], ctx.policy.double_buffer)
    for bufs in slots:
        for buf in bufs.values():
            em.release(buf)
    em.release(local_ry)
    em.release(local_rxt)
