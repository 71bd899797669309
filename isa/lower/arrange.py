"""The data-arrangement template: ops whose outputs are their inputs' elements moved about, or
a constant, run as DMA transfers and nothing else, the way hardware runs them (strided,
zero-stride, negative-stride and offset descriptors).

The op describes its outputs as `Piece`s (isa/ops/arrange.py): a strided view of one input
copied to a strided view of one output, both in elements of the tensors' dense layouts, or a
fill: a constant written into a view of an output. Each piece becomes one DMA between DDR
tensors, routed along the chip's links; where a route stages through on-chip memory, the piece
is cut into chunks that memory can hold. A fill reads a one-element constant bound in DDR with
all-zero strides, so its read side costs one burst (the DMA engine's constant fill).
"""

import numpy as np

from .. import dtypes
from ..errors import OutOfMemoryError
from ..instructions import Region
from ..ops import REGISTRY
from .route import copy, route


def lower_arrange(ctx, group):
    """Pieces are written in the op's order; an empty one, or one of an output nothing reads
    (a split's unused part), emits nothing."""
    node = group.nodes[0]
    g = ctx.graph
    ins = [g.tensors[t] for t in node.inputs]
    outs = [g.tensors[t] for t in node.outputs]
    pieces = REGISTRY[node.op].pieces([t.shape for t in ins], outs[0].shape, node.params)
    hops = route(ctx.chip, "ddr", "ddr")
    staged = [ctx.em.allocators[to] for _, _, to in hops[:-1]]
    limit = min((a.free_bytes() for a in staged), default=None)
    constants = {}  # (fill value, dtype) -> its one-element DDR constant
    for piece in pieces:
        out = outs[piece.output]
        if out.name not in ctx.ddr or 0 in piece.dst.shape:
            continue
        dst = _region(ctx, out, piece.dst)
        if piece.input is None:
            key = (piece.value, out.dtype)
            if key not in constants:
                data = np.array([piece.value], dtypes.np_dtype(out.dtype)).tobytes()
                constants[key] = ctx.em.bind(f"{node.name}.fill{len(constants)}", "const", out.dtype, (1,), data)
            src_buf = constants[key]
            src = Region("ddr", src_buf.addr, out.dtype, dst.shape, (0,) * len(dst.shape))
        else:
            src_buf = ctx.ddr[node.inputs[piece.input]]
            src = _region(ctx, ins[piece.input], piece.src)
        for s, d in _chunks(src, dst, limit, node.name):
            copy(ctx.em, s, src_buf, d, ctx.ddr[out.name], node.name)


def _region(ctx, tensor, view):
    item = dtypes.itemsize(tensor.dtype)
    return Region("ddr", ctx.ddr[tensor.name].addr + view.offset * item, tensor.dtype, tuple(view.shape), tuple(view.strides))


def _chunks(src, dst, limit, op):
    """(src, dst) parts of at most `limit` bytes, cut along the outermost dimensions."""
    if limit is None or dst.nbytes <= limit:
        yield src, dst
        return
    if not src.shape:
        raise OutOfMemoryError(f"{op}: a single element ({dst.nbytes} bytes) does not fit the {limit} bytes free for staging")
    n = src.shape[0]
    per = max(dst.nbytes // n, 1)
    step = max(limit // per, 1)
    for start in range(0, n, step):
        count = min(step, n - start)
        parts = [_slice(r, start, count) for r in (src, dst)]
        if count == 1 and parts[1].nbytes > limit:  # one index is too big: cut the next dimension
            yield from _chunks(_drop(parts[0]), _drop(parts[1]), limit, op)
        else:
            yield parts[0], parts[1]


def _slice(region, start, count):
    item = dtypes.itemsize(region.dtype)
    return Region(region.mem, region.addr + start * region.strides[0] * item, region.dtype, (count,) + region.shape[1:], region.strides)


def _drop(region):
    """A region whose first dimension is 1, without it."""
    return Region(region.mem, region.addr, region.dtype, region.shape[1:], region.strides[1:])
