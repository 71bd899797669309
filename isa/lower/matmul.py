"""The matrix template: matrix_mul tiled over M, N and K for the matrix engine.

For each output tile (tm x tn) the K dimension is walked in steps of tk: the left and right
tiles of each step are loaded into the matrix engine's operand memories (two slots each with
double buffering) and multiplied into an accumulator tile, accumulating after the first
step. After the last step the op's epilogue (bias, requantization, cast) runs as vector
instructions and the result tile is stored. Tile sizes are the largest multiples of the
matrix unit's m, n, k whose buffers fit, halving the dimension that is largest in units.
"""

import numpy as np

from .. import dtypes
from ..errors import OutOfMemoryError, UnsupportedError
from ..instructions import Matmul, Region, Vector, dense
from ..ops import REGISTRY
from .alloc import align_up
from .pipeline import pipeline, step_budget
from .route import copy
from .tiling import broadcast_view, sub_region
from .vector_steps import emit_steps


def lower_matmul(ctx, group):
    node = group.nodes[0]
    plan = _Plan(ctx, node)
    tm, tn, tk = plan.tiles()
    M, K = plan.left.shape
    N = plan.right.shape[1]
    em = ctx.em
    bufs = plan.place(tm, tn, tk)
    steps = []
    tile = 0
    for m0 in range(0, M, tm):
        for n0 in range(0, N, tn):
            for k0 in range(0, K, tk):
                box = (m0, n0, k0, min(tm, M - m0), min(tn, N - n0), min(tk, K - k0))
                steps.append(plan.step(bufs, len(steps), tile, box, k0 == 0, k0 + tk >= K))
            tile += 1
    pipeline(steps, ctx.policy.double_buffer)
    for buf in bufs.values():
        em.release(buf)


class _Plan:
    def __init__(self, ctx, node):
        self.ctx, self.node = ctx, node
        self.opdef = REGISTRY[node.op]
        g = ctx.graph
        self.left, self.right = g.tensors[node.inputs[0]], g.tensors[node.inputs[1]]
        self.out = g.tensors[node.outputs[0]]
        self.mx, self.vx = ctx.engine("matrix"), ctx.engine("vector")
        self.acc_dtype = self.opdef.acc_dtype(self.left.dtype)
        self.asym = self.acc_dtype == "int32" and self.opdef.asymmetric(node.params)
        # the bias as (DDR Buf, dtype); the asymmetric mode's is bias_v2, folded here offline
        if self.asym:
            self.bias = (self._fold_bias(g), "int32")
        elif len(node.inputs) == 3:
            self.bias = (ctx.ddr[node.inputs[2]], g.tensors[node.inputs[2]].dtype)
        else:
            self.bias = None
        self.steps, self.temps = self.opdef.epilogue(node.params, self.bias[1] if self.bias else None, self.out.dtype)
        # The epilogue reads the accumulator in the vector memory: a copy when the matrix
        # engine accumulates elsewhere (as an Ascend cube does in L0C). The result is the
        # accumulator itself when the two share a dtype.
        self.acc_key = "acc" if self.mx.operand_memory("c") == self.vx.memory else "accv"
        self.out_key = self.acc_key if self.out.dtype == self.acc_dtype else "out"

    def _fold_bias(self, g):
        """bias_v2 = bias - zp_l * sum over K of (right - zp_r), a constant bound in DDR."""
        p = self.node.params
        right = g.constants[self.right.name].astype(np.int64)
        bias = g.constants[self.node.inputs[2]].astype(np.int64) if len(self.node.inputs) == 3 else 0
        folded = bias - p["left_zero_point"] * (right - p["right_zero_point"]).sum(axis=0, keepdims=True)
        data = dtypes.convert(folded, "int32").tobytes()
        return self.ctx.em.bind(f"{self.node.name}.bias_v2", "const", "int32", (1, right.shape[1]), data)

    def _needs(self, tm, tn, tk):
        """(buffer key, memory, bytes) of one slot."""
        size = lambda dtype, n: n * dtypes.itemsize(dtype)  # noqa: E731
        needs = [
            ("a", self.mx.operand_memory("a"), size(self.left.dtype, tm * tk)),
            ("b", self.mx.operand_memory("b"), size(self.right.dtype, tk * tn)),
            ("acc", self.mx.operand_memory("c"), size(self.acc_dtype, tm * tn)),
        ]
        if self.acc_key != "acc":
            needs.append(("accv", self.vx.memory, size(self.acc_dtype, tm * tn)))
        if self.asym:
            needs.append(("acc_zp", self.mx.operand_memory("c"), size(self.acc_dtype, tm * tn)))
            if self.acc_key != "acc":
                needs.append(("accv_zp", self.vx.memory, size(self.acc_dtype, tm * tn)))
        if self.bias is not None:
            needs.append(("bias", self.vx.memory, size(self.bias[1], tn)))
        if self.out_key == "out":
            needs.append(("out", self.vx.memory, size(self.out.dtype, tm * tn)))
        needs += [(("tmp", k), self.vx.memory, size(d, tm * tn)) for k, d in enumerate(self.temps)]
        return needs

    def _fits(self, tm, tn, tk):
        per_mem = {}
        for _, mem, n in self._needs(tm, tn, tk):
            per_mem.setdefault(mem, []).extend([n] * self.ctx.slots)
        return all(self.ctx.em.allocators[m].fits(sizes) for m, sizes in per_mem.items())

    def _step_bytes(self, tm, tn, tk):
        return tm * tk * dtypes.itemsize(self.left.dtype) + tk * tn * dtypes.itemsize(self.right.dtype)

    def tiles(self):
        """(tm, tn, tk): halve the dimension largest in matrix-unit units until the buffers fit
        and a step loads no more than the pipeline's budget."""
        unit = self.mx.matrix
        (M, K), N = self.left.shape, self.right.shape[1]
        dims = {"m": [M, unit.m], "n": [N, unit.n], "k": [K, unit.k]}
        budget = step_budget(self.ctx, self._step_bytes(M, N, K), self.mx.operand_memory("a"))
        size = lambda: (dims["m"][0], dims["n"][0], dims["k"][0])  # noqa: E731
        while not self._fits(*size()) or (budget is not None and self._step_bytes(*size()) > budget):
            shrinkable = {d: v[0] / v[1] for d, v in dims.items() if v[0] > v[1]}
            if not shrinkable:
                if self._fits(*size()):
                    break
                need = sum(n for _, _, n in self._needs(*size())) * self.ctx.slots
                raise OutOfMemoryError(f"{self.node.name}: even a {unit.m}x{unit.n}x{unit.k} matrix tile needs {need} bytes of on-chip memory")
            d = max(shrinkable, key=shrinkable.get)
            dims[d][0] = align_up(-(-dims[d][0] // 2), dims[d][1])
        return size()

    def place(self, tm, tn, tk):
        em, name = self.ctx.em, self.node.name
        bufs = {
            (key, s): em.alloc(mem, n, f"{name}/{key if isinstance(key, str) else f'tmp{key[1]}'}.{s}")
            for s in range(self.ctx.slots)
            for key, mem, n in self._needs(tm, tn, tk)
        }
        if self.asym:  # one element of zp_r, read with stride 0 as a whole right tile
            mem = self.mx.operand_memory("b")
            self.zero_point = bufs["zp", 0] = em.alloc(mem, dtypes.itemsize(self.right.dtype), f"{name}/zp_r")
            fill = self._fill_engine(mem)
            em.emit(fill, Vector("copy", self.zero_point.region(self.right.dtype, (1,)), (self.node.params["right_zero_point"],), "int64", name),
                    writes=(self.zero_point,))
        return bufs

    def _fill_engine(self, mem):
        """The vector engine, which must reach mem to write the zero point there."""
        if mem != self.vx.memory:
            raise UnsupportedError(f"{self.node.name}: the matrix unit's right operand memory {mem} is not the vector memory {self.vx.memory}")
        return self.vx.name

    def step(self, bufs, index, tile, box, first, last):
        ctx, em, node = self.ctx, self.ctx.em, self.node
        m0, n0, k0, tm, tn, tk = box
        ab = index % ctx.slots
        ts = tile % ctx.slots
        a, b, acc = bufs["a", ab], bufs["b", ab], bufs["acc", ts]
        a_r = a.region(self.left.dtype, (tm, tk))
        b_r = b.region(self.right.dtype, (tk, tn))
        acc_r = acc.region(self.acc_dtype, (tm, tn))

        def load():
            copy(em, sub_region(ctx.ddr_region(self.left.name), (m0, k0), (tm, tk)), ctx.ddr[self.left.name], a_r, a, node.name)
            copy(em, sub_region(ctx.ddr_region(self.right.name), (k0, n0), (tk, tn)), ctx.ddr[self.right.name], b_r, b, node.name)
            if first and self.bias is not None:
                src_buf, dtype = self.bias
                dst = bufs["bias", ts]
                src = sub_region(dense("ddr", src_buf.addr, dtype, (1, self.out.shape[1])), (0, n0), (1, tn))
                copy(em, src, src_buf, dst.region(dtype, (1, tn)), dst, node.name)

        def compute():
            reads = (a, b, acc) if not first else (a, b)
            em.emit(self.mx.name, Matmul(a_r, b_r, acc_r, not first, node.name), reads=reads, writes=(acc,))
            if self.asym:  # the second partial product: left times a matrix of zp_r
                zp, acc_zp = self.zero_point, bufs["acc_zp", ts]
                zp_r = Region(zp.mem, zp.addr, self.right.dtype, (tk, tn), (0, 0))
                acc_zp_r = acc_zp.region(self.acc_dtype, (tm, tn))
                em.emit(self.mx.name, Matmul(a_r, zp_r, acc_zp_r, not first, node.name),
                        reads=(a, zp) + ((acc_zp,) if not first else ()), writes=(acc_zp,))
            if last:
                for key in ("acc", "acc_zp") if self.asym else ("acc",):
                    if self.acc_key != "acc":
                        here, there = bufs[key, ts], bufs["accv" + key[3:], ts]
                        copy(em, here.region(self.acc_dtype, (tm, tn)), here, there.region(self.acc_dtype, (tm, tn)), there, node.name)
                self._epilogue(bufs, ts, tm, tn)

        def store():
            if last:
                out = bufs[self.out_key, ts]
                dst = sub_region(ctx.ddr_region(self.out.name), (m0, n0), (tm, tn))
                copy(em, out.region(self.out.dtype, (tm, tn)), out, dst, ctx.ddr[self.out.name], node.name)

        return load, compute, store

    def _epilogue(self, bufs, ts, tm, tn):
        acc = bufs[self.acc_key, ts]
        inputs = [(acc.region(self.acc_dtype, (tm, tn)), acc)]
        if self.bias is not None:
            bias = bufs["bias", ts]
            inputs.append((broadcast_view(bias.region(self.bias[1], (1, tn)), (tm, tn)), bias))
        if self.asym:
            acc_zp = bufs[self.acc_key + "_zp", ts]
            inputs.append((acc_zp.region(self.acc_dtype, (tm, tn)), acc_zp))
        out = bufs[self.out_key, ts]
        temps = [(bufs[("tmp", k), ts].region(d, (tm, tn)), bufs[("tmp", k), ts]) for k, d in enumerate(self.temps)]
        emit_steps(self.ctx.em, self.vx.name, self.node.name, self.steps, inputs, (out.region(self.out.dtype, (tm, tn)), out), temps)
