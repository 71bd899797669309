"""The cache template: graph state (isa.Graph.state) bound in DDR for the whole program, read in
place and appended to by DMA (isa/ops/cache.py).

A state is bound before anything else, in the order the graph declares its states, so every
program built from graphs that declare the same states has them at the same DDR addresses: a
sim.Session keeps their bytes there between runs. Its Buf holds positions [0, capacity) of its
cache axis (`Buf.window`), so a read of positions [0, length) is the same Buf seen through
the cache's strides: a product (the matmul template), or a data-arrangement op (a head's extract),
reads the cache where it lies, as a serving engine's attention kernel does. An append is one DMA of the new rows into the cache's positions
[position, position + n) (spread over the cores, staged where DDR-to-DDR copies stage), as the
runtimes' ReshapeAndCache or device-to-device memcpy does. The emitter orders the reads and writes
of a state's Buf, so the cache ops act in graph order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import GraphError, UnsupportedError
from ...ops import REGISTRY
from ..schedule.tiling import sub_region
from .staging import staged_copy

if TYPE_CHECKING:
    from ...graph import Graph, Node
    from ..context import Lowering
    from ..emit import Emits
    from ..schedule.fusion import Group

# templates that read an operand through its region's strides at the tensor's own shape (the
# arrangement ops' views, isa/lower/templates/staging.py view_region, as an ONNX MatMul's per-head extracts)
READS_IN_PLACE = ("matmul", "arrange", "attention")


def bind_states(ctx: Lowering) -> None:
    """Bind each state of the graph in DDR (role "state"), in declaration order, its Buf holding
    positions [0, capacity) of the axis its cache ops name."""
    g: Graph = ctx.graph
    em: Emits = ctx.em
    for name in g.states:
        t = g.tensors[name]
        axes = {n.params["axis"] for n in g.consumers(name) if REGISTRY[n.op].template == "cache"}
        if len(axes) > 1:
            raise GraphError(f"state {name}: its cache ops name different axes ({', '.join(map(str, sorted(axes)))}); a cache "
                             "has one axis of positions")
        buf = ctx.home[name] = em.bind(name, "state", t.dtype, t.shape, mem="ddr")
        if axes:
            axis = axes.pop()
            buf.window = (axis, 0, t.shape[axis])


def lower_cache(ctx: Lowering, group: Group) -> None:
    node = group.nodes[0]
    g: Graph = ctx.graph
    state, out = node.inputs[0], node.outputs[0]
    buf = ctx.home[state]
    t = g.tensors[state]
    if node.op == "cache_append":
        rows = g.tensors[node.inputs[1]]
        starts = [0] * len(t.shape)
        starts[node.params["axis"]] = node.params["position"]
        dst = sub_region(buf.region(t.dtype, t.shape), starts, rows.shape)
        staged_copy(ctx, node.name, ctx.home_region(rows.name), ctx.home[rows.name], dst, buf, spread=True)
    else:
        _check_readers(ctx, node)
    if out in ctx.home:  # a graph output: a copy of its own
        view = g.tensors[out]
        staged_copy(ctx, node.name, buf.region(view.dtype, view.shape), buf, ctx.home_region(out), ctx.home[out], spread=True)
    else:
        ctx.home[out] = buf


def _check_readers(ctx: Lowering, node: Node) -> None:
    """A read of a cache is a strided view of it: only templates that read their operands through
    their regions' strides may take it."""
    out = node.outputs[0]
    g: Graph = ctx.graph
    for user in g.consumers(out):
        template = REGISTRY[user.op].template
        if template not in READS_IN_PLACE:
            raise UnsupportedError(f"op {user.op} {user.name} reads {out}, a read of cache {node.inputs[0]} in place, which only "
                                   f"products ({', '.join(READS_IN_PLACE)} templates) do; its template is {template}")
