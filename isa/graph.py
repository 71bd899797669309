"""Graph and Tensor: the model a user describes, before any lowering.

Tensors are symbolic (name, shape, dtype). Op functions in `isa.ops` append nodes to the graph
their tensor operands belong to, so a model reads as plain calls:
`y = ops.active(ops.matrix_mul(x, w), "relu")`. An op with no tensor operand (`fill`,
`linspace`) goes to the graph of the innermost `with graph:` block, or to its `graph=`.

Shapes are static: memory is planned before the run. An op whose output size depends on the
data (`where`, `masked_select`, `nms`) gives a tensor whose shape is an upper bound
(`Tensor.bounded`); the machine reports the shape it produced.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
from typing_extensions import Self

from . import dtypes
from .errors import GraphError, ShapeError, SimError

if TYPE_CHECKING:
    from collections.abc import Callable

    from numpy import ndarray

# An op output: (shape, dtype) or (shape, dtype, bounded), as Graph.add_node takes it.
OutSpec: TypeAlias = "tuple[tuple[int, ...], str] | tuple[tuple[int, ...], str, bool]"

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:/-]*$")


@dataclass(frozen=True, eq=False)
class Tensor:
    graph: Graph
    name: str
    shape: tuple[int, ...]
    dtype: str
    bounded: bool = False  # the shape is an upper bound: the data decide the first dimension

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * dtypes.itemsize(self.dtype)

    def __repr__(self) -> str:
        bound = ", at most" if self.bounded else ""
        return f"Tensor({self.name!r}, {self.shape}{bound}, {self.dtype})"


@dataclass(frozen=True)
class Node:
    name: str
    op: str
    inputs: tuple[str, ...]  # tensor names
    params: dict[str, Any]
    outputs: tuple[str, ...]  # tensor names


_DEFAULT: list[Graph] = []  # graphs of the enclosing `with graph:` blocks, innermost last


def default_graph() -> Graph | None:
    """The graph of the innermost `with graph:` block, or None."""
    return _DEFAULT[-1] if _DEFAULT else None


def _check_shape(shape: tuple[int, ...], where: str, empty: bool = False) -> tuple[int, ...]:
    shape = tuple(shape)
    low = 0 if empty else 1
    if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= low for d in shape):
        raise ShapeError(f"{where}: shape must be {'non-negative' if empty else 'positive'} integers, got {shape}")
    return tuple(int(d) for d in shape)


class Graph:
    """Inputs, constants, nodes in the order they were added (a topological order) and outputs."""

    def __init__(self, name: str = "graph") -> None:
        self.name = self._check_name(name, "graph name")
        self.tensors: dict[str, Tensor] = {}  # name -> Tensor
        self.inputs: list[str] = []  # tensor names
        self.states: list[str] = []  # tensor names of the graph state (`state`), in declaration order
        self.kept: list[str] = []  # tensors the graph computes though no output returns them (a state's update)
        self.constants: dict[str, ndarray] = {}  # tensor name -> numpy array
        self.nodes: list[Node] = []
        self.outputs: dict[str, str] = {}  # output name -> tensor name
        self.producer: dict[str, Node] = {}  # tensor name -> Node
        self.values: dict[str, ndarray] = {}  # tensor name -> numpy array, for tensors whose values the graph knows
        self._node_names: set[str] = set()
        self._counts: dict[str, int] = {}  # op -> next suffix for fresh node names
        # lines of text on how the graph was made (an importer's passes); the lowering copies them to the program
        self.notes: list[str] = []

    @staticmethod
    def _check_name(name: str, what: str) -> str:
        if not isinstance(name, str) or not _NAME.match(name):
            raise GraphError(f"{what} {name!r} must match {_NAME.pattern}")
        return name

    def _new_tensor(self, name: str, shape: tuple[int, ...], dtype: str, bounded: bool = False) -> Tensor:
        self._check_name(name, "tensor name")
        if name in self.tensors:
            raise GraphError(f"graph {self.name}: tensor name {name!r} is already used")
        t = Tensor(self, name, shape, dtype, bounded)
        self.tensors[name] = t
        return t

    def input(self, name: str, shape: tuple[int, ...], dtype: str = "float32") -> Tensor:
        t = self._new_tensor(name, _check_shape(shape, f"input {name}"), dtypes.check(dtype, f"input {name}"))
        self.inputs.append(name)
        return t

    def state(self, name: str, shape: tuple[int, ...], dtype: str = "float32") -> Tensor:
        """A tensor of graph state: bytes in DDR that outlive a run, as a serving engine keeps a
        language model's key and value caches between decode steps. A run reads and updates them
        in place through the cache ops (isa/ops/cache.py); sim.Session keeps them between runs."""
        t = self._new_tensor(name, _check_shape(shape, f"state {name}"), dtypes.check(dtype, f"state {name}"))
        self.states.append(name)
        return t

    def keep(self, tensor: Tensor) -> Tensor:
        """Compute `tensor` though no output returns it: a state's update is its effect."""
        self.kept.append(self.tensor(tensor).name)
        return tensor

    def results(self) -> set[str]:
        """The tensors a run must compute: the outputs' and the kept ones (`keep`)."""
        return {*self.outputs.values(), *self.kept}

    def input_from(self, name: str, make: Callable[..., Tensor]) -> Tensor:
        """Replace input `name` by the single output of the one node `make()` adds, named `name`, of
        the input's shape and dtype, from tensors no node computes (a state): the input's users read
        it unchanged. The node goes first, so the nodes stay in a topological order."""
        if name not in self.inputs:
            raise GraphError(f"graph {self.name}: {name!r} is not an input (inputs: {', '.join(self.inputs) or 'none'})")
        old, at, nodes = self.tensors.pop(name), self.inputs.index(name), len(self.nodes)
        self.inputs.remove(name)
        try:
            made = make()
        except SimError:
            self.tensors[name] = old  # make() refused before adding its node: the input stays
            self.inputs.insert(at, name)
            raise
        computed = any(t in self.producer for n in self.nodes[nodes:] for t in n.inputs)
        if made.name != name or (made.shape, made.dtype) != (old.shape, old.dtype) or computed or len(self.nodes) != nodes + 1:
            raise GraphError(f"graph {self.name}: input {name!r} ({old.dtype}{list(old.shape)}) replaced by {made!r}, made from "
                             f"computed tensors or of another name, shape or dtype")
        self.nodes.insert(0, self.nodes.pop())
        return made

    def constant(self, name: str, array: ndarray, dtype: str | None = None) -> Tensor:
        """A COEFF tensor: its bytes are preloaded in DDR before the run. An empty constant (a
        dimension of 0: no bytes) can be a graph output, never an op's operand. The graph keeps a
        copy of a writable array, and a read-only one of the dtype as it is."""
        array = np.asarray(array)
        dtype = dtypes.check(dtype, f"constant {name}") if dtype else dtypes.of_array(array, f"constant {name}")
        # a read-only array of the dtype (an importer's weights) is kept as it is, not copied
        array = np.ascontiguousarray(array.astype(dtypes.np_dtype(dtype), copy=array.flags.writeable))
        t = self._new_tensor(name, _check_shape(array.shape or (1,), f"constant {name}", empty=True), dtype)
        self.constants[name] = self.values[name] = array.reshape(t.shape)
        return t

    def known(self, tensor: Tensor) -> ndarray | None:
        """The values of a tensor known when the graph is built (a constant, or a value computed
        from shapes alone, such as shape_fetch's), or None."""
        return self.values.get(self.tensor(tensor).name)

    def __enter__(self) -> Self:
        _DEFAULT.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _DEFAULT.remove(self)

    def output(self, tensor: Tensor, name: str | None = None) -> Tensor:
        self.tensor(tensor)
        name = self._check_name(name or tensor.name, "output name")
        if name in self.outputs:
            raise GraphError(f"graph {self.name}: output {name!r} is already defined")
        self.outputs[name] = tensor.name
        return tensor

    def tensor(self, value: Tensor) -> Tensor:
        """`value` as a tensor of this graph (a Tensor of another graph is an error)."""
        if not isinstance(value, Tensor):
            raise GraphError(f"graph {self.name}: expected a Tensor, got {type(value).__name__}")
        if value.graph is not self:
            raise GraphError(f"tensor {value.name!r} belongs to graph {value.graph.name!r}, not {self.name!r}")
        return value

    def add_node(self, op: str, inputs: list[Tensor | Any], params: dict[str, Any], out_specs: list[OutSpec],
                 name: str | None = None) -> list[Tensor]:
        """Append a node; out_specs are (shape, dtype) or (shape, dtype, bounded). Returns the
        output tensors."""
        name = name or self._fresh(op)
        self._check_name(name, "op name")
        if name in self.tensors or name in self._node_names:
            raise GraphError(f"graph {self.name}: name {name!r} is already used")
        outs = [
            self._new_tensor(name if len(out_specs) == 1 else f"{name}:{i}", *spec)
            for i, spec in enumerate(out_specs)
        ]
        node = Node(name, op, tuple(t.name for t in inputs), dict(params), tuple(t.name for t in outs))
        self.nodes.append(node)
        self._node_names.add(name)
        for t in outs:
            self.producer[t.name] = node
        return outs

    def _fresh(self, op: str) -> str:
        k = self._counts.get(op, 0)
        while f"{op}_{k}" in self.tensors or f"{op}_{k}" in self._node_names:
            k += 1
        self._counts[op] = k + 1
        return f"{op}_{k}"

    def consumers(self, tensor_name: str) -> list[Node]:
        return [n for n in self.nodes if tensor_name in n.inputs]

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self.inputs)} inputs, {len(self.nodes)} nodes, {len(self.outputs)} outputs)"
