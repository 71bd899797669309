"""The table of ONNX op types the importer maps: op type -> Mapping.

Each op family registers its mappings from its own module with `@onnx_op(...)`; a mapping is a
function `(builder, node) -> outputs` that adds npusim ops to the graph under construction (see
isa/onnx/builder.py) and returns one value per ONNX output, in order: a Tensor, or a numpy
array when the value is known at import time (a folded shape computation).
"""
from __future__ import annotations

import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

if typing.TYPE_CHECKING:
    from numpy.typing import NDArray
    from onnx import NodeProto

    from .builder import Builder, Output

# A mapping: adds the node's ops to the graph under construction, gives one value per ONNX output.
MappingFn: TypeAlias = "Callable[[Builder, NodeProto], Sequence[Output]]"
# An import-time folding: the node's outputs from its inputs' known values (every input given and known),
# or None where it does not apply (the mapping then runs).
FoldFn: TypeAlias = "Callable[[Builder, NodeProto, list[NDArray[Any]]], Sequence[Output] | None]"
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Mapping:
    fn: MappingFn
    static: tuple[int, ...] = ()  # input positions whose values must be known when the graph is built
    fold: FoldFn | None = None  # (Builder, node, arrays) -> outputs, when every input is known (importer.py `_map`)


OPS: dict[str, Mapping] = {}  # op key (op_key) -> Mapping
DEFAULT_DOMAINS = ("", "ai.onnx")


def op_key(node: NodeProto) -> str:
    """A node's key in OPS: its op type in the default domain, "domain.OpType" in another (a
    runtime's contrib op, "com.microsoft.MatMulNBits"), so that no other domain's op of the same
    name is taken for a default one."""
    return node.op_type if node.domain in DEFAULT_DOMAINS else f"{node.domain}.{node.op_type}"


def onnx_op(*op_types: str, static: Sequence[int] = ()) -> Callable[[F], F]:
    """Register the decorated function as the mapping of each of `op_types` (op_key's form). `static` names the
    input positions whose values the graph needs when it is built (a Reshape's shape, a Slice's
    starts): memory is planned before the run, so shapes cannot wait for data."""

    def register(fn: F) -> F:
        for op_type in op_types:
            if op_type in OPS:
                raise ValueError(f"ONNX op {op_type} mapped twice")
            OPS[op_type] = Mapping(fn, tuple(static))
        return fn

    return register


def folds(*op_types: str) -> Callable[[F], F]:
    """Register the decorated function as the import-time folding of each of `op_types`: used
    only when every input's value is known and the result is index arithmetic (importer.py `_map`)."""

    def register(fn: F) -> F:
        for op_type in op_types:
            mapping = OPS[op_type]
            OPS[op_type] = Mapping(mapping.fn, mapping.static, fn)
        return fn

    return register
