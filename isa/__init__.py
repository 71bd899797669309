"""The op set and the lowered instruction set: Graph -> isa.lower -> Program."""

from . import dtypes, ops
from .deploy import quantize
from .errors import (
    ConfigError,
    DeadlockError,
    GraphError,
    IndexRangeError,
    InputError,
    OutOfMemoryError,
    ProgramError,
    ShapeError,
    SimError,
    UnsupportedError,
)
from .graph import Graph, Node, Tensor
from .lower import Policy, lower
from .program import Binding, Buffer, Program


def from_onnx(model, values=None, shapes=None, name=None, passes=None, quantize=None, calibration=None, chip=None):
    """An ONNX model (a path or an onnx.ModelProto) as a Graph that specialises itself from the
    feeds `sim.run` gives it; see isa/onnx/model.py. quantize="F16" | "BF16" | "INT8" deploys
    it for `chip` in that precision (isa/deploy/). (Imported on first use: the onnx package
    takes a moment to load.)"""
    from .onnx import from_onnx as load

    return load(model, values=values, shapes=shapes, name=name, passes=passes, quantize=quantize, calibration=calibration, chip=chip)


__all__ = [
    "Binding", "Buffer", "ConfigError", "DeadlockError", "Graph", "GraphError", "IndexRangeError", "InputError", "Node",
    "OutOfMemoryError", "Policy", "Program", "ProgramError", "ShapeError", "SimError", "Tensor",
    "UnsupportedError", "dtypes", "from_onnx", "lower", "ops", "quantize",
]
