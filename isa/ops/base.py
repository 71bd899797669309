"""What every op definition provides, the registry, and the helper op functions call.

An op definition (`OpDef`) is the op's whole meaning apart from its lowering template:
signature checks, shape and dtype inference, the seed's local/global class and a numpy
reference. The reference exists for tests; results on the machine never come from it.
"""

from dataclasses import dataclass

import numpy as np

from .. import dtypes
from ..errors import GraphError, ShapeError, UnsupportedError
from ..graph import Tensor

REGISTRY = {}  # op name -> OpDef


def register(opdef):
    if opdef.name in REGISTRY:
        raise ValueError(f"op {opdef.name} registered twice")
    REGISTRY[opdef.name] = opdef
    return opdef


@dataclass(frozen=True)
class Spec:
    """A tensor's shape and dtype, as inference sees it."""

    shape: tuple
    dtype: str


class OpDef:
    name = ""
    kind = "local"  # the seed's class: "local" (本地操作, fusable) or "global" (全局操作, from DDR)
    template = ""  # the lowering template that runs it (see isa.lower.TEMPLATES)
    variants = ()  # sub-keys a chip's op table may price separately ("active.relu")

    def infer(self, ins, params):
        """Check operands and params; return the output Specs."""
        raise NotImplementedError

    def reference(self, arrays, params, compute=None):
        """Numpy whole-tensor semantics; `compute` maps a dtype to the dtype a chip computes it in."""
        raise NotImplementedError

    def variant(self, params):
        """The variant this instance is (a member of `variants`), or None."""
        return None

    def checked_inputs(self, node):
        """How many leading inputs a chip's dtype table judges (the rest are the op's own
        constants, such as per-channel quantization vectors)."""
        return len(node.inputs)

    def support_key(self, params):
        v = self.variant(params)
        return f"{self.name}.{v}" if v else self.name


def check_dtype(value, allowed, what):
    if value not in allowed:
        raise UnsupportedError(f"{what}: dtype {value} is not supported (supported: {', '.join(allowed)})")
    return value


def check_rank(spec, rank, what):
    if len(spec.shape) != rank:
        raise ShapeError(f"{what}: expected rank {rank}, got shape {spec.shape}")


def apply(opdef, operands, params, name=None):
    """Add a node for `opdef` to the graph of the first tensor operand; returns its outputs.

    Operands are Tensors; numpy arrays are added to that graph as constants (COEFF tensors).
    """
    graph = next((o.graph for o in operands if isinstance(o, Tensor)), None)
    if graph is None:
        raise GraphError(f"{opdef.name}: needs at least one Tensor operand to know its graph")
    tensors = []
    for i, o in enumerate(operands):
        if isinstance(o, np.ndarray):
            o = graph.constant(f"{name or opdef.name}_c{len(graph.constants)}", o)
        tensors.append(graph.tensor(o))
    specs = opdef.infer([Spec(t.shape, t.dtype) for t in tensors], params)
    outs = graph.add_node(opdef.name, tensors, params, [(s.shape, dtypes.check(s.dtype)) for s in specs], name)
    return outs[0] if len(outs) == 1 else tuple(outs)
