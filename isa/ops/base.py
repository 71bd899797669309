"""What every op definition provides, the registry, and the helper op functions call.

An op definition (`OpDef`) is the op's whole meaning apart from its lowering template:
signature checks, shape and dtype inference, the seed's local/global class and a numpy
reference. The reference exists for tests; results on the machine never come from it.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from .. import dtypes
from ..errors import GraphError, ShapeError, UnsupportedError
from ..graph import Tensor, default_graph

if TYPE_CHECKING:
    from numpy import ndarray

    from isa.graph import Graph, Node

REGISTRY: dict[str, Any] = {}  # op name -> OpDef; Any as isa/lower reads template hooks (kernel, views, transposed) off it by name


def register(opdef: D) -> D:
    if opdef.name in REGISTRY:
        raise ValueError(f"op {opdef.name} registered twice")
    REGISTRY[opdef.name] = opdef
    return opdef


@dataclass(frozen=True)
class Spec:
    """A tensor's shape and dtype, as inference sees it; `bounded` when the shape is an upper
    bound and the data decide the first dimension (see isa.graph)."""

    shape: tuple[int, ...]
    dtype: str
    bounded: bool = False


class OpDef:
    name = ""
    kind = "local"  # the seed's class: "local" (本地操作, fusable) or "global" (全局操作, from DDR)
    template = ""  # the lowering template that runs it (isa/lower/templates/catalog.py)
    variants: tuple[str, ...] = ()  # sub-keys a chip's op table may price separately ("active.relu")
    seed = "bmlang"  # the document that specifies it: bmlang, atb (Ascend), tensorrt, onnx, or runtime (isa/ops/cache.py)
    list_input = False  # its function takes its tensors as one list (concat), not one by one
    table = True  # a chip runs it only where its op table has a row for it (False: DMA copies any chip runs)

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        """Check operands and params; return the output Specs."""
        raise NotImplementedError

    def reference(self, arrays: list[ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[ndarray]:
        """Numpy whole-tensor semantics; `compute` maps a dtype to the dtype a chip computes it in."""
        raise NotImplementedError

    @property
    def templates(self) -> tuple[str, ...]:
        """Every template an instance may name (template_for)."""
        return (self.template,)

    def template_for(self, params: dict[str, Any]) -> str:
        """The template that lowers an instance with these params: `template`, unless its variant has one of its own."""
        return self.template

    def variant(self, params: dict[str, Any]) -> str | None:
        """The variant this instance is (a member of `variants`), or None."""
        return None

    def checked_inputs(self, node: Node) -> int:
        """How many leading inputs a chip's dtype table judges (the rest are the op's own
        constants, such as per-channel quantization vectors)."""
        return len(node.inputs)

    def support_key(self, params: dict[str, Any]) -> str:
        v = self.variant(params)
        return f"{self.name}.{v}" if v else self.name

    def known_value(self, known: list[ndarray | None], ins: list[Spec], params: dict[str, Any]) -> ndarray | None:
        """The output's values when they follow from what the graph knows when it is built
        (`known`: each input's values or None, `ins`: their Specs), or None. Ops whose results
        follow from shapes alone (shape_fetch) say so here, so that an op that needs a
        tensor's values at build time (reshape_v2's shape) can take theirs."""
        return None


TensorLike = Tensor | np.ndarray  # an op's tensor operand: a Tensor, or a numpy array its graph takes as a constant
D = TypeVar("D", bound=OpDef)  # register gives back the subclass it was given


def check_dtype(value: str, allowed: tuple[str, ...] | list[str], what: str) -> str:
    if value not in allowed:
        raise UnsupportedError(f"{what}: dtype {value} is not supported (supported: {', '.join(allowed)})")
    return value


def check_rank(spec: Spec, rank: int, what: str) -> None:
    if len(spec.shape) != rank:
        raise ShapeError(f"{what}: expected rank {rank}, got shape {spec.shape}")


def apply(opdef: OpDef, operands: Sequence[TensorLike], params: dict[str, Any], name: str | None = None,
          graph: Graph | None = None) -> Tensor | tuple[Tensor, ...]:
    """`outputs`, with an op of one output giving that Tensor alone."""
    outs = outputs(opdef, operands, params, name, graph)
    return outs[0] if len(outs) == 1 else outs


def apply_one(opdef: OpDef, operands: Sequence[TensorLike], params: dict[str, Any], name: str | None = None,
              graph: Graph | None = None) -> Tensor:
    """`outputs` for an op of one output: that Tensor."""
    (out,) = outputs(opdef, operands, params, name, graph)
    return out


def outputs(opdef: OpDef, operands: Sequence[TensorLike], params: dict[str, Any], name: str | None = None,
            graph: Graph | None = None) -> tuple[Tensor, ...]:
    """Add a node for `opdef` to the graph of its tensor operands (else `graph`, else the graph
    of the enclosing `with graph:`); returns its outputs.

    Operands are Tensors; numpy arrays are added to that graph as constants (COEFF tensors). A
    tensor whose shape is only an upper bound (see isa.graph), or an empty constant, can be a
    graph output, not an operand: memory is planned from shapes before the run.
    """
    graph = next((o.graph for o in operands if isinstance(o, Tensor)), None) or graph or default_graph()
    if graph is None:
        raise GraphError(f"{opdef.name}: no tensor operand says which graph it belongs to; pass graph= or build it inside `with graph:`")
    tensors = []
    for o in operands:
        if isinstance(o, np.ndarray):
            o = graph.constant(f"{name or opdef.name}_c{len(graph.constants)}", o)
        t = graph.tensor(o)
        if t.bounded:
            raise ShapeError(f"{opdef.name}: operand {t.name} has a data-dependent shape (at most {t.shape}); "
                             "such a tensor can only be a graph output, as memory is planned before the run")
        if t.size == 0:
            raise ShapeError(f"{opdef.name}: operand {t.name} is empty (shape {t.shape}); an op's operands have at least "
                             "one element (an empty constant can only be a graph output)")
        tensors.append(t)
    ins = [Spec(t.shape, t.dtype) for t in tensors]
    specs = opdef.infer(ins, params)
    outs = graph.add_node(opdef.name, tensors, params, [(s.shape, dtypes.check(s.dtype), s.bounded) for s in specs], name)
    value = opdef.known_value([graph.values.get(t.name) for t in tensors], ins, params)
    if value is not None:
        graph.values[outs[0].name] = value
    return tuple(outs)
