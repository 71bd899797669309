"""The transposes import pass: a Transpose moves past the element-wise work after it, so that it
meets the op that can read through it.

Exporters split a projection's heads (Reshape, then Transpose to (batch, heads, rows, head
size)) before the rotary embedding, whose slices, negation, concatenation and products by cos
and sin then read and write the split layout: the Transpose is a copy through DDR. Moved past the
rotary, it reaches the attention that reads the heads where they lie (the lowering reads a
permute's input through strides, isa/lower/templates/place.py), as a compiler folds the head
split into the product.

A node moves under the Transpose when its result is the Transpose of the same node on the
Transpose's input: element-wise ops (unary ones, and binary or variadic ones whose other
operands are Transposes of the same order or constants, which are transposed here: a
constant c broadcast against the transposed shape becomes c expanded to its rank and permuted
back), Slice (its axes mapped through the order, its other inputs constants) and Concat (its
axis mapped). A Transpose moves only where every node reading it moves, so no copy is added; the
moved Transposes then read the nodes' results, and the pass repeats until none moves. A moved
Transpose that another reads alone becomes one with it (a key's head split and its transpose for
the scores: one permute, not two in a row after the rotary).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from onnx import helper

from .builder import node_attr
from .passes import merge_transposes
from .registry import DEFAULT_DOMAINS

if TYPE_CHECKING:
    from numpy.typing import NDArray
    from onnx import NodeProto

    from .importer import Source
    from .passes import Graph

UNARY = frozenset(("Neg", "Abs", "Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Exp", "Log", "Sqrt",
                   "Reciprocal", "Erf", "Sin", "Cos", "Softplus", "Mish", "Gelu", "Elu", "Selu", "Cast", "Floor", "Ceil",
                   "Round", "Sign"))
ELEMENTWISE = frozenset(("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"))
Perm = tuple[int, ...]


def sink(source: Source, g: Graph) -> str:
    """Move every Transpose that can past the nodes reading it (the module docstring); what
    changed, for the note."""
    moved, constants = 0, set[str]()
    while True:
        movable = _movable(g)
        if not movable:
            break
        for node in movable:
            constants.update(_move(source, g, node))
        moved += len(movable)
        for t in [n for n in g.nodes if n.op_type == "Transpose" and g.alive(n) and not g.readers[n.output[0]]
                  and n.output[0] not in g.outputs]:
            g.replace([t], [])
    for node in list(g.nodes):  # a moved Transpose read by another alone: one Transpose (the identities pass's rule)
        if node.op_type == "Transpose" and g.alive(node) and _order(g, node.input[0]) is not None:
            merge_transposes(g, node)
    for name in constants:  # a constant read only by the moved nodes: its permuted copy replaces it
        if not g.readers[name] and name not in g.outputs and name in source.weights:
            del source.weights[name]
    g.commit()
    return f"{moved} node(s) moved ahead of the Transposes before them" if moved else "nothing to move"


def _order(g: Graph, name: str) -> Perm | None:
    """The order of the Transpose making `name`, None if another node makes it."""
    t = g.producer.get(name)
    if t is None or t.op_type != "Transpose" or t.domain not in DEFAULT_DOMAINS or node_attr(t, "perm") is None:
        return None
    return tuple(int(a) for a in node_attr(t, "perm"))


def _orders(g: Graph, node: NodeProto) -> Perm | None:
    """The one order of the Transposes a node could move under, None where it cannot move."""
    if node.domain not in DEFAULT_DOMAINS or not g.alive(node):
        return None
    kind, ins = node.op_type, [i for i in node.input if i]
    if kind in UNARY or kind == "Slice":
        moving, fixed = ins[:1], ins[1:]
    elif kind in ELEMENTWISE or kind == "Concat":
        moving, fixed = [i for i in ins if _order(g, i) is not None], [i for i in ins if _order(g, i) is None]
    else:
        return None
    orders = {_order(g, i) for i in moving}
    if len(orders) != 1 or None in orders:
        return None
    perm = orders.pop()
    assert perm is not None
    values = [g.value(i) for i in fixed]
    if any(v is None or v.ndim > len(perm) for v in values):
        return None
    return perm


def _movable(g: Graph) -> list[NodeProto]:
    """The nodes to move now: each under Transposes all of whose readers move too."""
    readers: dict[str, list[int]] = {}
    for n in g.nodes:
        for i in dict.fromkeys(n.input):
            readers.setdefault(i, []).append(id(n))
    nodes = {id(n): n for n in g.nodes if _orders(g, n) is not None}
    while True:
        kept = {key: node for key, node in nodes.items()
                if all(i not in g.outputs and all(r in nodes for r in readers[i]) for i in node.input if i and _order(g, i) is not None)}
        if len(kept) == len(nodes):
            return [n for n in g.nodes if id(n) in kept]
        nodes = kept


def _move(source: Source, g: Graph, node: NodeProto) -> list[str]:
    """node(Transpose(x), c) -> Transpose(node'(x, c')), its output keeping its name; the
    constants c it permuted."""
    perm = _orders(g, node)
    assert perm is not None
    back = tuple(int(a) for a in np.argsort(perm))
    rank, kind = len(perm), node.op_type
    inputs, constants = list(node.input), []
    for k, name in enumerate(inputs):
        if not name:
            continue
        if _order(g, name) is not None:
            inputs[k] = g.producer[name].input[0]
        elif kind != "Slice":
            inputs[k] = _constant(source, g, name, back, rank)
            constants.append(name)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if kind == "Concat":
        attrs["axis"] = perm[int(attrs["axis"]) % rank]
    elif kind == "Slice":
        starts = np.asarray(g.value(inputs[1]))
        axes = np.asarray(g.value(inputs[3])) if len(inputs) > 3 and inputs[3] else np.arange(starts.size)
        inputs += [""] * (4 - len(inputs))
        inputs[3] = f"{node.name or node.output[0]}.axes_untransposed"
        source.weights[inputs[3]] = np.array([perm[int(a) % rank] for a in axes.reshape(-1)], np.int64)
    out = node.output[0]
    inner = f"{out}.untransposed"
    name = node.name or out
    moved = helper.make_node(kind, inputs, [inner], name=name, domain=node.domain, **attrs)
    g.replace([node], [moved, helper.make_node("Transpose", [inner], [out], name=f"{name}.transpose", perm=list(perm))])
    return constants


def _constant(source: Source, g: Graph, name: str, back: Perm, rank: int) -> str:
    """The constant `name` permuted back by `back` (expanded to `rank` first), as a new weight."""
    value: NDArray = np.asarray(g.value(name))
    new = f"{name}.untransposed{''.join(map(str, back))}"
    if new not in source.weights:
        source.weights[new] = np.transpose(value.reshape((1,) * (rank - value.ndim) + value.shape), back)
    return new


__all__ = ["sink"]
