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

A paged cache's ops (a block table their last operand) reach each sequence's block through the
table's entry at run time, as vLLM's PagedAttention kernel and its reshape_and_cache do: an
append is a scatter (IndexedDma) of the rows into the pool blocks the table's column names, a
read a view whose reader gathers each tile by the entry (`paged`; the fused attention's key and
value loads), or a graph output gathered whole. The engine reads the entries from DDR, so a
program serves any table; an entry beyond the pool faults (IndexRangeError).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import GraphError, UnsupportedError
from ...ops import REGISTRY
from ..schedule.tiling import sub_region
from .indexed import Access, gather_rows, scatter_rows
from .staging import staged_copy

if TYPE_CHECKING:
    from ...graph import Graph, Node
    from ..context import Lowering
    from ..emit import Emits
    from ..schedule.fusion import Group

# templates that read an operand through its region's strides at the tensor's own shape (the
# arrangement ops' views, isa/lower/templates/staging.py view_region, as an ONNX MatMul's per-head extracts)
READS_IN_PLACE = ("matmul", "arrange", "attention")
READS_PAGED = ("attention",)  # templates that read a paged cache's block through its table (`paged`)


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
    through = paged(ctx, node)
    if node.op == "cache_append":
        rows = g.tensors[node.inputs[1]]
        if through is not None:
            scatter_rows(ctx, through, ctx.home_region(rows.name), ctx.home[rows.name])
        else:
            starts = [0] * len(t.shape)
            starts[node.params["axis"]] = node.params["position"]
            dst = sub_region(buf.region(t.dtype, t.shape), starts, rows.shape)
            staged_copy(ctx, node.name, ctx.home_region(rows.name), ctx.home[rows.name], dst, buf, spread=True)
    else:
        _check_readers(ctx, node, through is not None)
    if out in ctx.home and through is not None and node.op == "cache_read":  # a graph output: the block view gathered
        gather_rows(ctx, through, ctx.home_region(out), ctx.home[out])
    elif out in ctx.home:  # a graph output: a copy of its own
        view = g.tensors[out]
        staged_copy(ctx, node.name, buf.region(view.dtype, view.shape), buf, ctx.home_region(out), ctx.home[out], spread=True)
    else:
        ctx.home[out] = buf


def paged(ctx: Lowering, node: Node) -> Access | None:
    """A paged cache op's block view as an indexed access (isa/lower/templates/indexed.py): the
    pool, the positions of each block an append writes, indexed along its first axis by the block
    table's column of the op's block; None for an op on a cache not paged."""
    g: Graph = ctx.graph
    if len(node.inputs) != (2 if node.op == "cache_read" else 3):
        return None
    state, table = node.inputs[0], node.inputs[-1]
    t, n = g.tensors[state], g.tensors[table].shape[0]
    pool = ctx.home[state].region(t.dtype, t.shape)
    if node.op == "cache_append":
        axis, rows = node.params["axis"], g.tensors[node.inputs[1]].shape
        starts = [0] * len(t.shape)
        starts[axis] = node.params["position"]
        pool = sub_region(pool, starts, t.shape[:axis] + (rows[axis],) + t.shape[axis + 1:])
    column = sub_region(ctx.home_region(table), (0, node.params["block"]), (n, 1))
    return Access(ctx, node.name, pool, ctx.home[state], column, ctx.home[table])


def paged_read(ctx: Lowering, name: str) -> Access | None:
    """The block view of tensor `name` where it is a read of a paged cache (a reader gathers its
    tiles through it: Access.part gives a box's pool and table regions), else None."""
    node = ctx.graph.producer.get(name)
    return paged(ctx, node) if node is not None and node.op == "cache_read" else None


def _check_readers(ctx: Lowering, node: Node, through_table: bool) -> None:
    """A read of a cache is a strided view of it: only templates that read their operands through
    their regions' strides may take it, and a paged cache's block only those that gather it
    through its block table."""
    out = node.outputs[0]
    g: Graph = ctx.graph
    allowed = READS_PAGED if through_table else READS_IN_PLACE
    for user in g.consumers(out):
        template = REGISTRY[user.op].template
        if template not in allowed:
            state = node.inputs[0]
            how = f"a block of paged cache {state} read through its block table, which only the fused attention" if through_table \
                else f"a read of cache {state} in place, which only products"
            raise UnsupportedError(f"op {user.op} {user.name} reads {out}, {how} ({', '.join(allowed)} templates) do; its template "
                                   f"is {template}")
