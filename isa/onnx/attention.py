"""Attention: the attention import pass, mapped to npusim's attention op (isa/ops/attention.py),
which the lowering runs as one fused kernel (isa/lower/templates/attention.py). ONNX's own
Attention op (opset 23) is not mapped: most of its backend cases use what the kernel does not run
(a KV cache input, softcap, sliding windows, run-time boolean masks).

The pass finds attention written out as exporters write it (torch.onnx, examples/llm.py):

    MatMul(q, k^T) -> Mul or Div by a scalar -> Add(mask) (optional) -> Softmax(last axis) -> MatMul(., v)

on rank-4 (batch, heads, sequence, head size) operands, each value between them read by the next
node alone, and replaces it by one `FusedAttention` node: an op type of the importer's own (not an
ONNX op), read by the mapping below, its output's shape kept for shape inference. k^T is the
product's right operand as it is (the key stored transposed, as a key cache is), or, when it is a
Transpose of the last two axes read by this product alone, that Transpose's input.

A grouped-query export regroups the query by KV head before the product ((batch, heads, rows,
head size) reshaped to (batch, KV heads, group x rows, head size), its constant mask the (rows,
keys) mask tiled group times, examples/llm.py): the fused node then takes the query by heads, as the
op reads a KV head's group itself, and the one mask block, and its output is reshaped to the
regrouped one (a view). Its output is then (batch, heads, rows, head size), which the head merge
after it permutes with the last axis kept: the lowering writes it in place of the merge
(isa/lower/templates/place.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from onnx import helper, numpy_helper

from .. import ops
from .builder import node_attr
from .inference import static_shapes
from .registry import onnx_op

if TYPE_CHECKING:
    from onnx import NodeProto

    from .builder import Builder, Output
    from .importer import Source
    from .passes import Graph

    # what _match finds: the nodes to replace, and (q, key, key transposed, v, mask or None, scale)
    Match = tuple[list[NodeProto], tuple[str, str, bool, str, "str | None", float]]

FUSED = "FusedAttention"


# ---- the mappings ---------------------------------------------------------------------------------

@onnx_op(FUSED)
def fused(b: Builder, node: NodeProto) -> Sequence[Output]:
    mask = b.tensor(3) if b.has(3) else None
    return [ops.attention(b.tensor(0), b.tensor(1), b.tensor(2), mask, scale=float(b.attr("scale", 1.0)),
                          key_transposed=bool(b.attr("key_transposed", 0)))]


# ---- the import pass ------------------------------------------------------------------------------

def fuse(source: Source, g: Graph) -> str:
    """Rewrite every attention subgraph of g (a passes.Graph of source); what changed, for the note."""
    shapes, elems = static_shapes(source)
    infos, done = [], 0
    for node in list(g.nodes):
        found = g.alive(node) and _match(g, node, shapes)
        if not found:
            continue
        chain, (q, key, key_t, v, mask, scale) = found
        name = node.name or node.output[0]
        ungrouped = _ungrouped(g, name, q, shapes[key][1], mask, shapes)
        made: list[NodeProto] = []
        out, out_shape = node.output[0], shapes[node.output[0]]
        if ungrouped is not None:
            regroup, q, mask, made = ungrouped
            chain.insert(0, regroup)
            out, out_shape = f"{name}.heads", (*shapes[q][:3], out_shape[3])
            made.append(helper.make_node("Reshape", [out, _shape_constant(made, f"{name}.regrouped_shape", shapes[node.output[0]])],
                                         list(node.output), name=f"{name}.regrouped"))
        inputs = [q, key, v] + ([mask] if mask else [])
        fused_node = helper.make_node(FUSED, inputs, [out], name=name, scale=scale, key_transposed=int(key_t))
        g.replace(chain, [*made[:-1], fused_node, *made[-1:]] if made else [fused_node])
        infos.append(helper.make_tensor_value_info(out, elems[node.output[0]], out_shape))
        done += 1
    g.commit()
    graph = source.model.graph
    known = {v.name for v in graph.value_info}
    graph.value_info.extend(i for i in infos if i.name not in known)
    return f"{done} attention subgraph(s) became one fused attention each" if done else "nothing to fuse"


def _match(g: Graph, out_mm: NodeProto, shapes: dict[str, tuple[int, ...]]) -> Match | None:
    """(nodes to replace, (q, key, key transposed, v, mask or None, scale)) when out_mm ends an
    attention subgraph, else None."""
    if out_mm.op_type != "MatMul" or out_mm.domain not in ("", "ai.onnx"):
        return None
    probs, v = out_mm.input
    softmax = _private_producer(g, probs, "Softmax")
    if softmax is None or len(shapes.get(probs, ())) != 4 or node_attr(softmax, "axis", -1) not in (-1, 3):
        return None
    if g.source.opset < 13 and node_attr(softmax, "axis") is None:
        return None  # before opset 13 the default axis is 1 (on a flattened view)
    chain = [softmax, out_mm]
    x = softmax.input[0]
    mask = None
    add = _private_producer(g, x, "Add")
    if add is not None:
        scaled = next((i for i in add.input if _private_producer(g, i, "Mul") or _private_producer(g, i, "Div")), None)
        if scaled is None:
            return None
        mask = add.input[1] if add.input[0] == scaled else add.input[0]
        if len(shapes.get(mask, ())) not in (2, 4) or shapes[mask][-2:] != shapes[probs][-2:]:
            return None  # the fused op takes a mask of the scores' (queries, keys), not one broadcast over them
        chain.insert(0, add)
        x = scaled
    scale_node = _private_producer(g, x, "Mul") or _private_producer(g, x, "Div")
    if scale_node is None:
        return None
    scaled_by = _scaled(g, scale_node)
    if scaled_by is None:
        return None
    scores, scale = scaled_by
    chain.insert(0, scale_node)
    product = _private_producer(g, scores, "MatMul")
    if product is None:
        return None
    chain.insert(0, product)
    q, right = product.input
    key, key_t = right, True
    transpose = _private_producer(g, right, "Transpose")
    if transpose is not None and list(node_attr(transpose, "perm") or []) == [0, 1, 3, 2]:
        key, key_t = transpose.input[0], False
        chain.insert(0, transpose)
    if not all(len(shapes.get(t, ())) == 4 for t in (q, key, v)):
        return None
    return chain, (q, key, key_t, v, mask, scale)


def _ungrouped(g: Graph, name: str, q: str, kv: int, mask: str | None,
               shapes: dict[str, tuple[int, ...]]) -> tuple[NodeProto, str, str | None, list[NodeProto]] | None:
    """(the Reshape regrouping the query, the query by heads, its mask block, the Constant nodes
    made) when q is a private Reshape of (B, kv x group, S, D) to (B, kv, group x S, D), group > 1,
    and the mask is absent or a constant (group x S, keys) of group equal (S, keys) blocks; else None."""
    regroup = _private_producer(g, q, "Reshape")
    if regroup is None:
        return None
    heads, grouped = shapes.get(regroup.input[0], ()), shapes.get(q, ())
    if len(heads) != 4 or len(grouped) != 4 or grouped[1] != kv or heads[1] == kv or heads[1] % kv:
        return None
    group = heads[1] // kv
    if grouped != (heads[0], kv, group * heads[2], heads[3]):
        return None
    made: list[NodeProto] = []
    if mask is None:
        return regroup, regroup.input[0], None, made
    value = g.value(mask)
    if value is None or value.ndim != 2 or value.shape[0] != group * heads[2]:
        return None
    block = value[:heads[2]]
    if not (value.reshape(group, *block.shape) == block).all():
        return None
    made.append(helper.make_node("Constant", [], [f"{name}.mask_rows"], name=f"{name}.mask_rows",
                                 value=numpy_helper.from_array(np.ascontiguousarray(block), f"{name}.mask_rows")))
    return regroup, regroup.input[0], f"{name}.mask_rows", made


def _shape_constant(made: list[NodeProto], name: str, shape: Sequence[int]) -> str:
    """Append a Constant node holding `shape` (int64) to made; its output's name."""
    made.append(helper.make_node("Constant", [], [name], name=name, value=numpy_helper.from_array(np.array(shape, np.int64), name)))
    return name


def _private_producer(g: Graph, name: str, op_type: str) -> NodeProto | None:
    node = g.producer.get(name)
    if node is None or node.op_type != op_type or node.domain not in ("", "ai.onnx") or not g.private(name):
        return None
    return node


def _scaled(g: Graph, node: NodeProto) -> tuple[str, float] | None:
    """(the scores, the scale) of a Mul or Div by a known scalar, else None."""
    a, c = node.input
    for x, s in ((a, c), (c, a)) if node.op_type == "Mul" else ((a, c),):
        known = g.value(s)
        if known is not None and np.asarray(known).size == 1:
            value = float(np.asarray(known).reshape(-1)[0])
            if node.op_type == "Div" and value == 0:
                return None
            return x, value if node.op_type == "Mul" else 1 / value
    return None


__all__ = ["FUSED", "fuse"]
