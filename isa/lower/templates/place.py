"""Templates that place an op's output rather than compute it, as a compiler does:

- `view`: squeeze, expand_dims and reshape keep the element order, so the output is the input's
  buffer under another shape; no instruction runs. (An output the graph returns has a
  buffer of its own, so it gets a copy.)
- `constant`: a value known when the graph is built (constdata's array, shape_fetch's shape) is
  a constant preloaded in DDR, like weights; no instruction runs.

lower() leaves these outputs unplaced (Template.places_outputs) and frees a shared buffer after the
last use of any tensor that shares it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ... import dtypes
from ..memory.route import copy

if TYPE_CHECKING:
    from ..context import Lowering
    from ..schedule.fusion import Group


def lower_view(ctx: Lowering, group: Group) -> None:
    node = group.nodes[0]
    src, out = node.inputs[0], node.outputs[0]
    if out in ctx.home:  # a graph output: its own buffer
        t = ctx.graph.tensors[out]
        copy(ctx.em, ctx.home[src].region(t.dtype, t.shape), ctx.home[src], ctx.home_region(out), ctx.home[out], node.name)
    else:
        ctx.home[out] = ctx.home[src]


def lower_constant(ctx: Lowering, group: Group) -> None:
    node = group.nodes[0]
    out = node.outputs[0]
    t = ctx.graph.tensors[out]
    data = np.ascontiguousarray(np.asarray(ctx.graph.values[out]).astype(dtypes.np_dtype(t.dtype))).tobytes()
    buf = ctx.em.bind(f"{node.name}.value", "const", t.dtype, t.shape, data)
    ctx.bound.add(out)
    if out in ctx.home:  # a graph output: copied from the preloaded constant
        copy(ctx.em, buf.region(t.dtype, t.shape), buf, ctx.home_region(out), ctx.home[out], node.name)
    else:
        ctx.home[out] = buf
