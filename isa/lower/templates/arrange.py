"""The data-arrangement template: ops whose outputs are their inputs' elements moved about, or
a constant, run as DMA transfers, the way hardware runs them (strided, zero-stride,
negative-stride and offset descriptors); a transpose may go round through local memory, where
a vector engine puts each chunk in order (isa/lower/templates/transpose.py).

The op describes its outputs as `Piece`s (isa/ops/arrange.py): a strided view of one input
copied to a strided view of one output, both in elements of the tensors' dense layouts, or a
fill: a constant written into a view of an output. Each piece becomes one DMA between the
tensors' homes, routed along the chip's links; where a route stages through on-chip memory,
the piece is cut into chunks that memory can hold. A fill reads a one-element constant bound in DDR with
all-zero strides, so its read side costs one burst (the DMA engine's constant fill). On a chip
of several cores each piece is spread over them (isa/lower/templates/staging.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ... import dtypes
from ...instructions import Region
from ...ops import REGISTRY
from .staging import staged_copy, view_region

if TYPE_CHECKING:
    from ..context import Lowering
    from ..emit import Buf
    from ..schedule.fusion import Group


def lower_arrange(ctx: Lowering, group: Group) -> None:
    """Pieces are written in the op's order; an empty one, or one of an output nothing reads
    (a split's unused part), emits nothing."""
    node = group.nodes[0]
    g = ctx.graph
    ins = [g.tensors[t] for t in node.inputs]
    outs = [g.tensors[t] for t in node.outputs]
    pieces = REGISTRY[node.op].pieces([t.shape for t in ins], outs[0].shape, node.params)
    constants: dict[tuple[float, str], Buf] = {}  # (fill value, dtype) -> its one-element DDR constant
    for piece in pieces:
        out = outs[piece.output]
        if out.name not in ctx.home or 0 in piece.dst.shape:
            continue
        dst = view_region(ctx, out.name, piece.dst)
        if piece.input is None:
            key = (piece.value, out.dtype)
            if key not in constants:
                data = np.array([piece.value], dtypes.np_dtype(out.dtype)).tobytes()
                constants[key] = ctx.em.bind(f"{node.name}.fill{len(constants)}", "const", out.dtype, (1,), data)
            src_buf = constants[key]
            src = Region(src_buf.mem, src_buf.addr, out.dtype, dst.shape, (0,) * len(dst.shape))
        else:
            src_buf = ctx.home[node.inputs[piece.input]]
            src = view_region(ctx, ins[piece.input].name, piece.src)
        staged_copy(ctx, node.name, src, src_buf, dst, ctx.home[out.name], spread=True)
