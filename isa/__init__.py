"""The op set and the lowered instruction set: Graph -> isa.lower -> Program."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from pathlib import Path

    from numpy.typing import ArrayLike
    from onnx import ModelProto

    from chips.schema import Chip

    from .deploy import Calibration
    from .onnx.model import OnnxGraph


def from_onnx(model: ModelProto | str | Path, values: Mapping[str, ArrayLike] | None = None,
              shapes: Mapping[str, Sequence[int]] | None = None, name: str | None = None, passes: Sequence[str] | None = None,
              quantize: str | None = None,
              calibration: Calibration | None = None, chip: Chip | str | None = None) -> OnnxGraph:
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
