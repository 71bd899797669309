"""The op set, under the seed's names. Each family is one module; every op registers its
definition in REGISTRY (name -> OpDef) and exposes a function that adds it to a graph."""

from .base import REGISTRY, OpDef, Spec
from .elementwise import active, add, adds, max, min, mul, muls, sub, subs  # noqa: A004
from .matrix import matrix_mul

__all__ = ["REGISTRY", "OpDef", "Spec", "active", "add", "adds", "matrix_mul", "max", "min", "mul", "muls", "sub", "subs"]
