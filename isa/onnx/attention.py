"""Attention: the attention import pass, mapped to npusim's attention op (isa/ops/attention.py),
which the lowering runs as one fused kernel (isa/lower/templates/attention.py). ONNX's own
Attention op (opset 23) is not mapped: most of its backend cases use what the kernel does not run
(a KV cache input, softcap, sliding windows, run-time boolean masks).

The pass finds attention written out as exporters write it (torch.onnx, examples/llm.py):

    MatMul(q, k^T) -> Mul or Div by a scalar -> Add(mask) (optional) -> Softmax(last axis) -> MatMul(., v)

on rank-4 (batch, heads, sequence, head size) operands, each value between them read by the next
node alone, and replaces it by one `FusedAttention` node: an op type of the importer's own (not an
ONNX op), read by the mapping below, its output's shape kept for shape inference. k^T is the
product's right operand: when it is a Transpose of the last two axes read by this product alone
(q @ k.transpose(-1, -2), the keys stored as rows, as a token-major key cache holds them), the
fused op takes that Transpose's input and its product reads the key blocks transposed, so no
transposed copy of the keys is made; else the operand as it is (the keys stored transposed).
Each score product of the decode forms below is read the same way.

A grouped-query export regroups the query by KV head before the product ((batch, heads, rows,
head size) reshaped to (batch, KV heads, group x rows, head size), its constant mask the (rows,
keys) mask tiled group times, examples/llm.py): the fused node then takes the query by heads, as the
op reads a KV head's group itself, and the one mask block, and its output is reshaped to the
regrouped one (a view). Its output is then (batch, heads, rows, head size), which the head merge
after it permutes with the last axis kept: the lowering writes it in place of the merge
(isa/lower/templates/place.py).

A decode step's attention comes in two more forms, fused into one op over key and value segments
(the cache, or its paged blocks, and the new tokens' rows), never concatenated:
- examples/llm.py's (_match_concat): scores over each segment, MatMul(q, k_i) -> Mul or Div by one
  scalar (the last one's -> Add(mask) optionally), Concat along the keys, Softmax, Slices back
  into the segments, MatMul(., v_i) each, the products summed by Adds;
- Hugging Face's (_concatenated): the pattern above whose key and value are Concats of the cache
  and the new rows along the keys; the fused op reads the Concat's inputs.
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

    # what _match finds: the nodes to replace (the last one's output the attention's), and
    # (q, key segments, key transposed, value segments, mask or None, scale)
    Match = tuple[list[NodeProto], tuple[str, list[str], bool, list[str], "str | None", float]]

FUSED = "FusedAttention"


# ---- the mappings ---------------------------------------------------------------------------------

@onnx_op(FUSED)
def fused(b: Builder, node: NodeProto) -> Sequence[Output]:
    parts = int(b.attr("segments", 1))
    mask = b.tensor(1 + 2 * parts) if b.has(1 + 2 * parts) else None
    keys, values = [b.tensor(1 + i) for i in range(parts)], [b.tensor(1 + parts + i) for i in range(parts)]
    return [ops.attention(b.tensor(0), keys if parts > 1 else keys[0], values if parts > 1 else values[0], mask,
                          scale=float(b.attr("scale", 1.0)), key_transposed=bool(b.attr("key_transposed", 0)))]


# ---- the import pass ------------------------------------------------------------------------------

def fuse(source: Source, g: Graph) -> str:
    """Rewrite every attention subgraph of g (a passes.Graph of source); what changed, for the note."""
    shapes, elems = static_shapes(source)
    infos, done = [], 0
    for found_at in list(g.nodes):
        found = g.alive(found_at) and (_match(g, found_at, shapes) or _match_concat(g, found_at, shapes))
        if not found:
            continue
        chain, (q, keys, key_t, values, mask, scale) = found
        node = chain[-1]
        name = node.name or node.output[0]
        ungrouped = _ungrouped(g, name, q, shapes[keys[0]][1], mask, shapes, sum(n.op_type == "MatMul" and n.input[0] == q for n in chain))
        made: list[NodeProto] = []
        out, out_shape = node.output[0], shapes[node.output[0]]
        if ungrouped is not None:
            regroup, q, mask, made = ungrouped
            chain.insert(0, regroup)
            out, out_shape = f"{name}.heads", (*shapes[q][:3], out_shape[3])
            made.append(helper.make_node("Reshape", [out, _shape_constant(made, f"{name}.regrouped_shape", shapes[node.output[0]])],
                                         list(node.output), name=f"{name}.regrouped"))
        inputs = [q, *keys, *values] + ([mask] if mask else [])
        fused_node = helper.make_node(FUSED, inputs, [out], name=name, scale=scale, key_transposed=int(key_t))
        if len(keys) > 1:
            fused_node.attribute.append(helper.make_attribute("segments", len(keys)))
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
    key, key_t = _key(g, right, chain)
    if not all(len(shapes.get(t, ())) == 4 for t in (q, key, v)):
        return None
    keys, values = _concatenated(g, chain, key, 3 if key_t else 2, shapes), _concatenated(g, chain, v, 2, shapes)
    if [shapes[k][3 if key_t else 2] for k in keys] != [shapes[x][2] for x in values]:
        keys, values = [key], [v]
    return chain, (q, keys, key_t, values, mask, scale)


def _concatenated(g: Graph, chain: list[NodeProto], name: str, axis: int, shapes: dict[str, tuple[int, ...]]) -> list[str]:
    """The segments of a key or value made by a Concat along the keys' axis (a cache and the new
    tokens' rows, as Hugging Face exports write them): the fused op reads them where they lie;
    a Concat read by this attention alone joins the chain. Else [name]."""
    node = g.producer.get(name)
    if node is None or node.op_type != "Concat" or node.domain not in ("", "ai.onnx") or \
            node_attr(node, "axis") not in (axis, axis - 4) or not all(len(shapes.get(i, ())) == 4 for i in node.input):
        return [name]
    if g.private(name):
        chain.insert(0, node)
    return list(node.input)


def _match_concat(g: Graph, softmax: NodeProto, shapes: dict[str, tuple[int, ...]]) -> Match | None:
    """(nodes to replace, (q, key segments, key transposed, value segments, mask or None, scale))
    when softmax ends a decode step's scores as examples/llm.py writes them: scores over each
    segment of keys (the cache, or its blocks, and the new tokens), MatMul(q, k_i) -> Mul or Div by
    one scalar, the last one's (optionally) -> Add(mask), concatenated along the keys, softmaxed,
    sliced back into the segments' probabilities, each -> MatMul(., v_i), and the products summed
    by Adds; else None."""
    if softmax.op_type != "Softmax" or softmax.domain not in ("", "ai.onnx") or node_attr(softmax, "axis", -1) not in (-1, 3):
        return None
    concat = _private_producer(g, softmax.input[0], "Concat")
    probs = softmax.output[0]
    if concat is None or node_attr(concat, "axis") not in (-1, 3) or len(shapes.get(probs, ())) != 4 or probs in g.outputs:
        return None
    chain: list[NodeProto] = [concat, softmax]
    parts: list[tuple[str, str, bool]] = []  # (q, key, key transposed) of each segment's scores
    scales, mask = set(), None
    for i, x in enumerate(concat.input):
        add = _private_producer(g, x, "Add")
        if add is not None:
            if i != len(concat.input) - 1:
                return None  # a mask on the last segment (the new tokens) alone
            scaled = next((a for a in add.input if _private_producer(g, a, "Mul") or _private_producer(g, a, "Div")), None)
            if scaled is None:
                return None
            mask = add.input[1] if add.input[0] == scaled else add.input[0]
            if len(shapes.get(mask, ())) not in (2, 4) or shapes[mask][-2:] != shapes[x][-2:]:
                return None
            chain.append(add)
            x = scaled
        scale_node = _private_producer(g, x, "Mul") or _private_producer(g, x, "Div")
        scaled_by = _scaled(g, scale_node) if scale_node is not None else None
        product = _private_producer(g, scaled_by[0], "MatMul") if scaled_by is not None else None
        if product is None or scale_node is None or scaled_by is None:
            return None
        chain += [scale_node, product]
        scales.add(scaled_by[1])
        parts.append((product.input[0], *_key(g, product.input[1], chain)))
    q, key_t = parts[0][0], parts[0][2]
    if len(scales) != 1 or any(pq != q or t != key_t for pq, _, t in parts) or not all(len(shapes.get(k, ())) == 4 for _, k, _ in parts):
        return None
    keys = [k for _, k, _ in parts]
    values = _values(g, probs, [shapes[k][3 if key_t else 2] for k in keys], chain, shapes)
    if values is None:
        return None
    return chain, (q, keys, key_t, values, mask, scales.pop())


def _key(g: Graph, right: str, chain: list[NodeProto]) -> tuple[str, bool]:
    """(the key, whether it is stored transposed) of a score product's right operand: the input
    of a Transpose of the last two axes that this product alone reads (the Transpose joining
    chain), the keys stored as rows as a token-major cache holds them, which the fused op's
    product reads transposed; else the operand as it is, the keys stored transposed."""
    transpose = _private_producer(g, right, "Transpose")
    if transpose is not None and list(node_attr(transpose, "perm") or []) == [0, 1, 3, 2]:
        chain.insert(0, transpose)
        return transpose.input[0], False
    return right, True


def _values(g: Graph, probs: str, sizes: list[int], chain: list[NodeProto], shapes: dict[str, tuple[int, ...]]) -> list[str] | None:
    """The value segments when probs is read by Slices alone, along the keys, one per segment of
    `sizes` keys, each read by a MatMul by its value segment alone, the products summed by private
    Adds into one tensor (the nodes appended to chain, the last Add last); else None."""
    readers = [n for n in g.nodes if g.alive(n) and probs in n.input]
    edges = list(np.cumsum([0, *sizes]))
    by_start: dict[int, NodeProto] = {}
    for sl in readers:
        bounds = [g.value(i) if i else None for i in list(sl.input[1:]) + [""] * (5 - len(sl.input))]
        starts, ends, axes, steps = bounds[0], bounds[1], bounds[2], bounds[3]
        if sl.op_type != "Slice" or starts is None or ends is None or axes is None or [int(a) % 4 for a in np.ravel(axes)] != [3] or \
                (steps is not None and list(np.ravel(steps)) != [1]) or not g.private(sl.output[0]):
            return None
        by_start[int(np.ravel(starts)[0])] = sl
        if int(np.ravel(starts)[0]) not in edges[:-1] or int(np.ravel(ends)[0]) != edges[edges.index(int(np.ravel(starts)[0])) + 1]:
            return None
    if sorted(by_start) != edges[:-1]:
        return None
    values, products = [], set()
    for start in edges[:-1]:
        sl = by_start[start]
        product = next((n for n in g.nodes if g.alive(n) and sl.output[0] in n.input), None)
        if product is None or product.op_type != "MatMul" or product.input[0] != sl.output[0] or len(shapes.get(product.input[1], ())) != 4:
            return None
        values.append(product.input[1])
        chain += [sl, product]
        products.add(product.output[0])
    sums = _sums(g, products)
    if sums is None:
        return None
    chain += sums
    return values


def _sums(g: Graph, leaves: set[str]) -> list[NodeProto] | None:
    """The Adds that sum exactly `leaves` (each read by them alone) into one value, in graph
    order, the root last; else None."""
    done, adds = set(leaves), []
    for node in g.nodes:
        if g.alive(node) and node.op_type == "Add" and node.domain in ("", "ai.onnx") and all(i in done for i in node.input):
            adds.append(node)
            done.add(node.output[0])
    inner = [x for x in done if x != (adds[-1].output[0] if adds else None)]
    if not adds or len(adds) != len(leaves) - 1 or not all(g.private(x) for x in inner):
        return None
    return adds


def _ungrouped(g: Graph, name: str, q: str, kv: int, mask: str | None, shapes: dict[str, tuple[int, ...]],
               readers: int = 1) -> tuple[NodeProto, str, str | None, list[NodeProto]] | None:
    """(the Reshape regrouping the query, the query by heads, its mask block, the Constant nodes
    made) when q is a Reshape of (B, kv x group, S, D) to (B, kv, group x S, D), group > 1, read
    by the attention's `readers` score products alone, and the mask is absent or a constant
    (group x S, keys) of group equal (S, keys) blocks; else None."""
    regroup = g.producer.get(q)
    if regroup is None or regroup.op_type != "Reshape" or g.readers[q] != readers or q in g.outputs:
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
