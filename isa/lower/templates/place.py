"""Templates that place an op's output rather than compute it, as a compiler does:

- `view`: squeeze, expand_dims and reshape keep the element order, so the output is the input's
  buffer under another shape; no instruction runs. (An output the graph returns has a
  buffer of its own, so it gets a copy.)
- `constant`: a value known when the graph is built (constdata's array, shape_fetch's shape) is
  a constant preloaded in DDR, like weights; no instruction runs.
- `in place`: a permute that keeps the last axis, of a product's output read by nothing else (a
  prefill's head merge: the attention's (batch, heads, rows, head size) context to (batch, rows,
  heads, head size)): the product writes its rows straight into the permute's output through
  strides (Lowering.permuted), as a compiler folds the layout change into the product; no
  instruction runs; the product's stores write runs of a head row each instead of whole rows.
- `read through`: a permute that keeps the last axis, read only by ops whose templates read
  their operands through strides (a prefill's query split into heads, (batch, rows, heads, head
  size) to (batch, heads, rows, head size), read by the fused attention; its value split, read
  by the attention and the cache append): its output is its
  input's buffer read through the permute's order (Lowering.read_through), as a compiler folds
  the head split into the product; no instruction runs; the reader's loads read runs of a head
  row each. Likewise a permute that swaps the last two axes, read only as the right operand of
  matrix_mul (an unfused q @ k^T over a token-major key cache): the product loads the rows as
  they lie and the matrix unit reads them transposed (isa/lower/templates/matmul.py).

lower() leaves these outputs unplaced (Template.places_outputs) and frees a shared buffer after the
last use of any tensor that shares it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ... import dtypes
from .staging import staged_copy

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ...graph import Graph, Node
    from ..context import Lowering
    from ..schedule.fusion import Group

WRITES_THROUGH_STRIDES = ("matmul", "attention")  # templates that write their output through Lowering.home_region
READS_THROUGH_STRIDES = ("attention", "cache")  # templates that read every operand through Lowering.home_region
READS_RIGHT_TRANSPOSED = ("matrix_mul",)  # ops whose template reads a right operand lying as rows of K (matmul.py)


def lower_view(ctx: Lowering, group: Group) -> None:
    node = group.nodes[0]
    src, out = node.inputs[0], node.outputs[0]
    if out in ctx.home:  # a graph output: its own buffer, copied in chunks the route's memories hold
        t = ctx.graph.tensors[out]
        staged_copy(ctx, node.name, ctx.home[src].region(t.dtype, t.shape), ctx.home[src], ctx.home_region(out), ctx.home[out])
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
        staged_copy(ctx, node.name, buf.region(t.dtype, t.shape), buf, ctx.home_region(out), ctx.home[out])
    else:
        ctx.home[out] = buf


def lower_in_place(ctx: Lowering, group: Group) -> None:
    """Nothing to emit: the product made the output in place (permuted_in_place)."""


def permuted_in_place(graph: Graph, groups: list[Group], shares: dict[str, str]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """product output -> (the permute output it is written into, the permute's order), for each
    permute that keeps the last axis and reads, directly or through views of the same shape, the
    output of a one-op group of a template in WRITES_THROUGH_STRIDES, which nothing else reads and
    the graph does not return."""
    by_node = {id(n): g for g in groups for n in g.nodes}
    made = {t: by_node[id(n)] for t, n in graph.producer.items() if id(n) in by_node}
    outputs = set(graph.outputs.values())
    found: dict[str, tuple[str, tuple[int, ...]]] = {}
    for node, order in _row_permutes(groups):
        x = node.inputs[0]
        t = shares.get(x, x)
        maker = made.get(t)
        if (maker is None or len(maker.nodes) != 1 or maker.template.name not in WRITES_THROUGH_STRIDES
                or graph.tensors[t].shape != graph.tensors[x].shape):
            continue
        chain = {t, *(s for s, root in shares.items() if root == t)}
        readers = [r for s in chain for r in graph.consumers(s)]
        if chain & outputs or any(r is not node and not (by_node[id(r)].template.name == "view" and r.outputs[0] in chain)
                                  for r in readers if id(r) in by_node):
            continue
        found[t] = (node.outputs[0], order)
    return found


def read_through(graph: Graph, groups: list[Group], written: set[str]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """permute output -> (its input, the permute's order), for each one-op permute group that keeps
    the last axis, whose output only groups of a template in READS_THROUGH_STRIDES read and the
    graph does not return, and whose input is no permute's output written in place (`written`);
    and so for each one that swaps the last two axes whose readers are READS_RIGHT_TRANSPOSED ops
    reading it as their right operand alone."""
    by_node = {id(n): g for g in groups for n in g.nodes}
    outputs = set(graph.outputs.values())
    found: dict[str, tuple[str, tuple[int, ...]]] = {}
    swaps = [(g.nodes[0], tuple(g.nodes[0].params["order"])) for g in groups if len(g.nodes) == 1 and g.nodes[0].op == "permute"
             and _swaps_last_two(g.nodes[0].params["order"])]
    for (node, order), reads in [(p, _reads_through) for p in _row_permutes(groups)] + [(p, _reads_transposed) for p in swaps]:
        x, out = node.inputs[0], node.outputs[0]
        readers = graph.consumers(out)
        if out in outputs or x in written or not readers or not all(reads(r, out, by_node[id(r)]) for r in readers):
            continue
        found[out] = (x, order)
    return found


def _reads_through(reader: Node, _: str, group: Group) -> bool:
    return group.template.name in READS_THROUGH_STRIDES


def _reads_transposed(reader: Node, operand: str, _: Group) -> bool:
    return reader.op in READS_RIGHT_TRANSPOSED and list(reader.inputs).count(operand) == 1 and reader.inputs[1] == operand


def _swaps_last_two(order: tuple[int, ...]) -> bool:
    n = len(order)
    return n >= 2 and tuple(order) == (*range(n - 2), n - 1, n - 2)


def _row_permutes(groups: list[Group]) -> Iterator[tuple[Node, tuple[int, ...]]]:
    """(node, order) of each one-op permute group that keeps the last axis (moves whole rows)."""
    for g in groups:
        node = g.nodes[0]
        if node.op == "permute" and len(g.nodes) == 1 and node.params["order"][-1] == len(node.params["order"]) - 1:
            yield node, tuple(node.params["order"])
