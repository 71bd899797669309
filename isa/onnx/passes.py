"""Import passes: what a deployment compiler rewrites in an ONNX graph before lowering it (as
TPU-MLIR's canonicalizations and onnx-simplifier do), run on the Source (the graph without its
initializers, and its Weights) before any op is mapped.

- gptq: a MatMul of a weight that a GPTQ or AWQ export unpacks in the graph from int32 words
  (BitShift, BitwiseAnd, the zero points subtracted, the scales multiplied per group) becomes one
  matrix_mul_a16 (gptq.py), ahead of the constants pass, which would compute the float weight;
- constants: Constant nodes become constants, and every node whose inputs are all constants is
  computed once (onnx.reference.ReferenceEvaluator, the ONNX reference implementation) and
  becomes a constant, unless it draws random numbers, (de)quantizes, holds a subgraph, or its
  result would exceed the host-memory cap (limits.HOST_MEMORY);
- bn_fold: inference BatchNormalization folded into the Conv, ConvTranspose or Gemm before it
  (bn_fold.py), its parameters initializers or Constant nodes alike;
- activations: activations written as element-wise chains become the one ONNX op they compute
  (activations.py: hardswish, hardsigmoid, SiLU, GELU with Erf or tanh, Mish), which maps to
  one element-wise chain (elementwise.py) with its scalars as immediates;
- identities: Identity, Dropout in inference (its mask unused) and a Transpose undone by the
  next vanish; consecutive Transposes, and consecutive Reshapes, become one;
- transposes: a Transpose moves past the element-wise ops, slices and concatenations after it
  (a head split past the rotary embedding), towards the op that reads through it (transposes.py);
- weight_only: a MatMul of a DequantizeLinear of a constant int8 or int4 weight becomes one
  matrix_mul_a16, which dequantizes on chip (weight_only.py);
- attention: MatMul -> scale -> mask -> Softmax -> MatMul becomes one fused attention (attention.py);
- transposed_gemv: a row times a transposed operand (a decode step's scores against its key
  cache) reads the operand as it lies instead of permuting it (gemv.py).

Each pass adds a note to the graph (the lowering copies the graph's notes into the program's):
its name and what it changed. `isa.from_onnx(model, passes=...)` names the passes to run (all by
default, in the order above; `()` for none).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import helper

from .. import limits
from ..errors import ConfigError, SimError
from .builder import node_attr
from .registry import DEFAULT_DOMAINS
from .store import constant_value, raw_size

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from numpy.typing import NDArray
    from onnx import NodeProto

    from .importer import Source



@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable  # (Source) -> str: what it changed, for the note


class Graph:
    """The nodes of a Source's graph with who produces and who reads each value, kept up to
    date as nodes are replaced; `commit` writes the nodes back."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.nodes = list(source.model.graph.node)
        self.outputs = {o.name for o in source.model.graph.output}
        self.inputs = {i.name for i in source.model.graph.input}
        self.producer: dict[str, NodeProto] = {}
        self.readers: defaultdict[str, int] = defaultdict(int)
        # the nodes taken out, by id; held so that no node made later can take a freed node's id
        self.removed: dict[int, NodeProto] = {}
        for node in self.nodes:
            self._add(node)

    def _add(self, node: NodeProto) -> None:
        for o in node.output:
            if o:
                self.producer[o] = node
        for i in node.input:
            if i:
                self.readers[i] += 1

    def _drop(self, node: NodeProto) -> None:
        for o in node.output:
            if self.producer.get(o) is node:
                del self.producer[o]
        for i in node.input:
            if i:
                self.readers[i] -= 1

    def value(self, name: str) -> NDArray[Any] | None:
        """The value of a constant (a weight or a Constant node's output), else None."""
        weights = self.source.weights
        if name in weights:
            return weights[name]
        node = self.producer.get(name)
        if node is not None and node.op_type == "Constant" and node.domain in DEFAULT_DOMAINS:
            return constant_value(node, weights.folder, weights.where)
        return None

    def alive(self, node: NodeProto) -> bool:
        return id(node) not in self.removed

    def private(self, name: str) -> bool:
        """Whether a value is read by one node only and is not a graph output."""
        return self.readers[name] == 1 and name not in self.outputs

    def replace(self, old_nodes: Sequence[NodeProto], new_nodes: Sequence[NodeProto]) -> None:
        """Put new_nodes where the last of old_nodes was, and remove old_nodes."""
        gone = {id(n) for n in old_nodes}
        last = max(i for i, n in enumerate(self.nodes) if id(n) in gone)
        for n in old_nodes:
            self._drop(n)
        self.removed.update((id(n), n) for n in old_nodes)
        self.nodes[last:last + 1] = [*new_nodes, self.nodes[last]]
        self.nodes = [n for n in self.nodes if id(n) not in gone]
        for n in new_nodes:
            self._add(n)

    def rename_uses(self, old: str, new: str) -> None:
        """Every node reading `old` reads `new` instead."""
        for node in self.nodes:
            for k, name in enumerate(node.input):
                if name == old:
                    node.input[k] = new
                    self.readers[old] -= 1
                    self.readers[new] += 1

    def bypass(self, node: NodeProto, out: str, inp: str) -> bool:
        """Remove `node`, whose output `out` equals its input `inp`: readers of `out` read `inp`;
        a graph output keeps its name, taken over by inp's producer where it can be. Returns
        whether the node went."""
        if out in self.outputs:
            maker = self.producer.get(inp)
            if maker is None or inp in self.outputs or inp in self.inputs:
                return False
            self.replace([node], [])
            self.rename_uses(inp, out)
            maker.output[list(maker.output).index(inp)] = out
            self.producer[out] = maker
            self.producer.pop(inp, None)
            return True
        self.replace([node], [])
        self.rename_uses(out, inp)
        return True

    def commit(self) -> None:
        """Write the nodes back, dropping Constant nodes and weights nothing reads any more."""
        read = {i for n in self.nodes for i in n.input if i} | self.outputs
        nodes = [n for n in self.nodes if not (n.op_type == "Constant" and not set(n.output) & read)]
        graph = self.source.model.graph
        del graph.node[:]
        graph.node.extend(nodes)
        weights = self.source.weights
        for name in weights.names():
            if name not in read and name not in self.inputs:
                del weights[name]
        produced = {o for n in nodes for o in n.output} | self.inputs
        keep = [v for v in graph.value_info if v.name in produced]
        del graph.value_info[:]
        graph.value_info.extend(keep)


# ---- constants ------------------------------------------------------------------------------------

NOT_FOLDED = {"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Bernoulli", "Multinomial",
              "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"}


def constants(source: Source) -> str:
    g = Graph(source)
    weights = source.weights
    became, folded = 0, 0
    for node in list(g.nodes):
        if node.op_type == "Constant" and node.domain in DEFAULT_DOMAINS and len(node.output) == 1:
            value = constant_value(node, weights.folder, weights.where)
            if value is not None:
                weights[node.output[0]] = value
                g.replace([node], [])
                became += 1
            continue
        outs = _fold(source, node)
        if outs is not None:
            for name, value in zip(node.output, outs):
                if name:
                    weights[name] = value
            g.replace([node], [])
            folded += 1
    g.commit()
    return f"{became} Constant node(s) became constants, {folded} node(s) of constant inputs computed once"


def _fold(source: Source, node: NodeProto) -> list[NDArray[Any]] | None:
    """The outputs of a node whose inputs are all constants, computed by the ONNX reference; None
    when it is not to be folded (see the module's docstring) or the reference cannot compute it
    (the importer then maps the node and names what is wrong)."""
    weights = source.weights
    names = [i for i in node.input if i]
    if (node.domain not in DEFAULT_DOMAINS or node.op_type in NOT_FOLDED or not names or not all(i in weights for i in names)
            or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)):
        return None
    sizes = _output_sizes(source, node)
    if sizes is None or sum(sizes) > limits.HOST_MEMORY:
        return None
    from onnx.reference import ReferenceEvaluator

    try:
        evaluator = ReferenceEvaluator(node, opsets={"": source.opset})
        outs = evaluator.run(None, {i: weights[i] for i in names})
    except SimError:
        raise
    except Exception:  # noqa: BLE001 - the reference's own errors, of any type
        return None
    return [np.asarray(o) for o in outs]


def _output_sizes(source: Source, node: NodeProto) -> list[int] | None:
    """Bytes of each output of a node by ONNX shape inference on it alone, None if unknown."""
    weights = source.weights
    inits, inputs = [], []
    for name in dict.fromkeys(i for i in node.input if i):
        if weights.small(name):
            inits.append(weights.proto(name))
        else:
            inputs.append(helper.make_tensor_value_info(name, weights.type(name)[1], weights.type(name)[0]))
    graph = helper.make_graph([node], "fold", inputs, [helper.make_value_info(o, onnx.TypeProto()) for o in node.output if o], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", source.opset)])
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=True, data_prop=True)
    except Exception:  # noqa: BLE001 - onnx's InferenceError
        return None
    sizes = []
    for v in inferred.graph.output:
        tt = v.type.tensor_type
        if not tt.HasField("shape") or not all(d.HasField("dim_value") for d in tt.shape.dim) or not tt.elem_type:
            return None
        try:
            sizes.append(raw_size([d.dim_value for d in tt.shape.dim], tt.elem_type))
        except (TypeError, KeyError, ValueError):  # a type numpy has no dtype for (a string)
            return None
    return sizes


# ---- identities ------------------------------------------------------------------------------------

def identities(source: Source) -> str:
    g = Graph(source)
    counts: defaultdict[str | None, int] = defaultdict(int)
    for node in list(g.nodes):
        if node.domain not in DEFAULT_DOMAINS or not g.alive(node):
            continue
        kind = node.op_type
        if kind == "Identity" and g.bypass(node, node.output[0], node.input[0]):
            counts["Identity"] += 1
        elif kind == "Dropout" and _inference_dropout(g, node) and g.bypass(node, node.output[0], node.input[0]):
            counts["Dropout"] += 1
        elif kind == "Transpose":
            counts[merge_transposes(g, node)] += 1
        elif kind == "Reshape":
            counts[_reshapes(g, node)] += 1
    counts.pop(None, None)
    done = ", ".join(f"{n} {what}" for what, n in counts.items())
    g.commit()
    return f"removed {done}" if done else "nothing to remove"


def _inference_dropout(g: Graph, node: NodeProto) -> bool:
    """A Dropout that passes its input: training_mode absent or false, its mask unused."""
    if len(node.output) > 1 and node.output[1] and (g.readers[node.output[1]] or node.output[1] in g.outputs):
        return False
    if len(node.input) > 2 and node.input[2]:
        training = g.value(node.input[2])
        return training is not None and not bool(np.asarray(training).reshape(-1)[0])
    return True


def merge_transposes(g: Graph, node: NodeProto) -> str | None:
    """Transpose(Transpose(x, p), q): nothing when it gives x back, else one Transpose."""
    first = g.producer.get(node.input[0])
    if first is None or first.op_type != "Transpose" or not g.private(node.input[0]):
        return None
    p, q = node_attr(first, "perm"), node_attr(node, "perm")
    if p is None or q is None or len(p) != len(q):
        return None
    perm = [p[i] for i in q]
    merged = helper.make_node("Transpose", [first.input[0]], list(node.output), name=node.name, perm=perm)
    g.replace([first, node], [merged])
    if perm == list(range(len(perm))) and g.bypass(merged, merged.output[0], merged.input[0]):
        return "Transpose pair(s) that undo each other"
    return "Transpose pair(s) merged"


def _reshapes(g: Graph, node: NodeProto) -> str | None:
    """Reshape(Reshape(x, a), b) is Reshape(x, b) when b is known and copies no dimension (no 0)."""
    first = g.producer.get(node.input[0])
    if first is None or first.op_type != "Reshape" or not g.private(node.input[0]) or len(node.input) < 2:
        return None
    shape = g.value(node.input[1])
    if shape is None or (0 in np.asarray(shape).reshape(-1).tolist() and not node_attr(node, "allowzero", 0)):
        return None
    attrs: dict[str, Any] = {"allowzero": 1} if node_attr(node, "allowzero", 0) else {}
    merged = helper.make_node("Reshape", [first.input[0], node.input[1]], list(node.output), name=node.name, **attrs)
    g.replace([first, node], [merged])
    return "Reshape pair(s) merged"


# ---- the table ---------------------------------------------------------------------------------------

def _bn_fold(source: Source) -> str:
    from .bn_fold import fold_batch_norms

    return fold_batch_norms(source, Graph(source))


def _activations(source: Source) -> str:
    from .activations import recognise

    return recognise(source, Graph(source))


def _attention(source: Source) -> str:
    from .attention import fuse

    return fuse(source, Graph(source))


def _transposed_gemv(source: Source) -> str:
    from .gemv import rewrite

    return rewrite(source, Graph(source))


def _sink_transposes(source: Source) -> str:
    from .transposes import sink

    return sink(source, Graph(source))


def _gptq(source: Source) -> str:
    from .gptq import rewrite

    return rewrite(source, Graph(source))


def _weight_only(source: Source) -> str:
    from .weight_only import rewrite

    return rewrite(source, Graph(source))


PASSES = {p.name: p for p in (Pass("gptq", _gptq), Pass("constants", constants), Pass("bn_fold", _bn_fold),
                              Pass("activations", _activations),
                              Pass("identities", identities), Pass("transposes", _sink_transposes),
                              Pass("weight_only", _weight_only), Pass("attention", _attention),
                              Pass("transposed_gemv", _transposed_gemv))}


def run_passes(source: Source, names: Sequence[str] | None = None) -> None:
    """Run the named passes (all when None) in PASSES' order, each adding a note to the source."""
    names = tuple(PASSES) if names is None else tuple(names)
    unknown = [n for n in names if n not in PASSES]
    if unknown:
        raise ConfigError(f"isa.from_onnx: unknown pass(es) {', '.join(map(repr, unknown))}; the passes are {', '.join(PASSES)}")
    for name, onnx_pass in PASSES.items():
        if name in names:
            source.notes.append(f"onnx pass {name}: {onnx_pass.run(source)}")


__all__ = ["PASSES", "Pass", "run_passes"]
