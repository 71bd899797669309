"""The op set and the lowered instruction set: Graph -> isa.lower -> Program."""

from . import dtypes, ops
from .errors import (
    ConfigError, DeadlockError, GraphError, IndexRangeError, InputError, OutOfMemoryError, ProgramError, ShapeError, SimError,
    UnsupportedError,
)
from .graph import Graph, Node, Tensor
from .lower import Policy, lower
from .program import Binding, Buffer, Program

__all__ = [
    "Binding", "Buffer", "ConfigError", "DeadlockError", "Graph", "GraphError", "IndexRangeError", "InputError", "Node",
    "OutOfMemoryError", "Policy", "Program", "ProgramError", "ShapeError", "SimError", "Tensor",
    "UnsupportedError", "dtypes", "lower", "ops",
]
