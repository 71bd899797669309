"""Recognising activations written as element-wise chains (the `activations` import pass,
passes.py): exporters write hardswish as Add -> Clip -> Div -> Mul (Paddle2ONNX, torch before
opset 14), SiLU as Mul(x, Sigmoid(x)), GELU from Erf or tanh (before opset 20), Mish from
Softplus or Exp and Log (before opset 18). Each chain becomes the one ONNX op it computes, which
the importer maps to the chip's activation where isa.ops' ActiveTypes have it, else to one
element-wise chain with its scalars as immediates (elementwise.py `activation`).

A chain matches a pattern when every intermediate value is read by the chain alone (not by another
node, not a graph output), every scalar is a constant of one element within 1e-4 of the pattern's
(written as an initializer or a Constant node), and every `x` is the same value.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
from onnx import helper

from .builder import node_attr

if TYPE_CHECKING:
    from onnx import NodeProto

    from .importer import Source
    from .passes import Graph

SQRT2 = math.sqrt(2.0)
SQRT_2_PI = math.sqrt(2.0 / math.pi)
COMMUTATIVE = ("Add", "Mul")

# A pattern: "x" (the activation's input), a number (a one-element constant of that value),
# ("?", key) (any one-element constant, kept as key), or (op type, inputs..., {attribute: value})
Pattern: TypeAlias = "str | float | tuple[Pattern | dict[str, float], ...]"
RELU6_OF_X_PLUS_3 = ("Clip", ("Add", "x", 3.0), 0.0, 6.0)


def _gelu_forms(inner: Pattern) -> list[Pattern]:
    """x * 0.5 * (1 + inner) in the orders exporters write it."""
    one_plus = ("Add", inner, 1.0)
    return [("Mul", ("Mul", "x", one_plus), 0.5), ("Mul", ("Mul", "x", 0.5), one_plus), ("Mul", "x", ("Mul", one_plus, 0.5))]


ERF_OF: list[Pattern] = [("Erf", ("Div", "x", SQRT2)), ("Erf", ("Mul", "x", 1 / SQRT2))]
CUBE: list[Pattern] = [("Pow", "x", 3.0), ("Mul", ("Mul", "x", "x"), "x")]
TANH_OF: list[Pattern] = [("Tanh", ("Mul", ("Add", "x", ("Mul", cube, 0.044715)), SQRT_2_PI)) for cube in CUBE]

# (op it becomes, its attributes from the captured constants, the patterns), in the order tried
PATTERNS: list[tuple[str, Callable[[dict[str, float]], dict[str, Any]], list[Pattern]]] = [
    ("HardSigmoid", lambda c: {"alpha": 1 / 6, "beta": 0.5}, [("Div", RELU6_OF_X_PLUS_3, 6.0), ("Mul", RELU6_OF_X_PLUS_3, 1 / 6)]),
    ("HardSigmoid", lambda c: {"alpha": c["alpha"], "beta": c["beta"]},
     [("Clip", ("Add", ("Mul", "x", ("?", "alpha")), ("?", "beta")), 0.0, 1.0)]),
    ("HardSwish", lambda c: {}, [("Mul", "x", ("HardSigmoid", "x", {"alpha": 1 / 6, "beta": 0.5})),
                                 ("Div", ("Mul", "x", RELU6_OF_X_PLUS_3), 6.0), ("Mul", ("Mul", "x", RELU6_OF_X_PLUS_3), 1 / 6)]),
    ("Swish", lambda c: {}, [("Mul", "x", ("Sigmoid", "x"))]),
    ("Gelu", lambda c: {}, [form for inner in ERF_OF for form in _gelu_forms(inner)]),
    ("Gelu", lambda c: {"approximate": "tanh"}, [form for inner in TANH_OF for form in _gelu_forms(inner)]),
    ("Mish", lambda c: {}, [("Mul", "x", ("Tanh", ("Softplus", "x"))), ("Mul", "x", ("Tanh", ("Log", ("Add", ("Exp", "x"), 1.0))))]),
]


def recognise(source: Source, g: Graph) -> str:
    """Replace every matching chain of the source (g: its passes.Graph) by its op; the note."""
    made: list[NodeProto] = []
    for root in list(g.nodes):
        if not g.alive(root) or root.domain not in ("", "ai.onnx"):
            continue
        for op, attrs, patterns in PATTERNS:
            found = next((m for m in (_Match(g).at(p, root) for p in patterns) if m is not None), None)
            if found is not None:
                nodes, x, captured = found
                new = helper.make_node(op, [x], [root.output[0]], name=root.name or root.output[0], **attrs(captured))
                g.replace(nodes, [new])
                made.append(new)
                break
    counts: dict[str, int] = {}
    for node in made:  # a HardSigmoid the pass made may have become part of a HardSwish
        if g.alive(node):
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    g.commit()
    listed = ", ".join(f"{n} {op}" for op, n in counts.items())
    return f"recognised {listed}" if listed else "no decomposed activation found"


class _Match:
    def __init__(self, g: Graph) -> None:
        self.g = g
        self.x: str | None = None
        self.nodes: list[NodeProto] = []
        self.captured: dict[str, float] = {}

    def at(self, pattern: Pattern, root: NodeProto) -> tuple[list[NodeProto], str, dict[str, float]] | None:
        """(the matched nodes, x, the captured constants) if the chain ending at root matches."""
        if len(root.output) != 1 or not self._node(pattern, root) or self.x is None:
            return None
        return self.nodes, self.x, self.captured

    def _value(self, pattern: Pattern | dict[str, float], name: str) -> bool:
        if pattern == "x":
            if self.x is None:
                self.x = name
            return self.x == name
        if isinstance(pattern, float) or (isinstance(pattern, tuple) and pattern[0] == "?"):
            value = self.g.value(name)
            if value is None or np.asarray(value).size != 1 or np.asarray(value).ndim > 1 or np.asarray(value).dtype.kind != "f":
                return False
            v = float(np.asarray(value).reshape(-1)[0])
            if isinstance(pattern, tuple):
                self.captured[str(pattern[1])] = v
                return True
            return math.isclose(v, pattern, rel_tol=1e-4, abs_tol=1e-7)
        node = self.g.producer.get(name)
        return node is not None and self.g.private(name) and self._node(pattern, node)

    def _node(self, pattern: Pattern | dict[str, float], node: NodeProto) -> bool:
        if not isinstance(pattern, tuple):  # a leaf: no node matches it
            return False
        op, *args = pattern
        attrs: dict[str, float] = {}
        if args and isinstance(args[-1], dict):
            attrs = args[-1]
            args.pop()
        if node.op_type != op or node.domain not in ("", "ai.onnx") or len(node.output) != 1:
            return False
        if any(not math.isclose(float(node_attr(node, k, math.nan)), v, rel_tol=1e-4) for k, v in attrs.items()):
            return False
        inputs = list(node.input)
        if len(inputs) != len(args) or not all(inputs):
            return False
        orders = [inputs, inputs[::-1]] if op in COMMUTATIVE else [inputs]
        for order in orders:
            saved = (self.x, list(self.nodes), dict(self.captured))
            if all(self._value(p, name) for p, name in zip(args, order)):
                self.nodes.append(node)
                return True
            self.x, self.nodes, self.captured = saved
        return False
