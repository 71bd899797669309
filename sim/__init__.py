"""The SimPy machine: executes lowered programs, producing numbers, cycles and traces."""

from isa.errors import (
    ClusterError,
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

from .machine import Machine, Result
from .run import execute, run

__all__ = [
    "ClusterError", "ConfigError", "DeadlockError", "GraphError", "IndexRangeError", "InputError", "Machine", "OutOfMemoryError",
    "ProgramError", "Result", "ShapeError", "SimError", "UnsupportedError", "execute", "run",
]
