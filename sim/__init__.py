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
from .session import Session

__all__ = [
    "ClusterError", "ConfigError", "DeadlockError", "GraphError", "IndexRangeError", "InputError", "Machine", "OutOfMemoryError",
    "ProgramError", "Result", "Session", "ShapeError", "SimError", "UnsupportedError", "execute", "run",
]
