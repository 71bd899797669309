"""What every lowering template works with: the graph, the chip, the policy, the emitter and
the home of each tensor that crosses a group boundary: the Buf it lives in for its lifetime, in
DDR or, as the policy places it, in on-chip memory. Templates move a tensor to and from its
home through route/copy, whichever memory that is.

A tiled template runs its tiles on units: the engines of one core that compute a tile, each
with that core's memories (`units`). A chip of several cores, or a core of several vector
engines (an Ascend 910B cluster's two vector cores), has several; the template deals its
tiles among them (isa/lower/schedule/pipeline.py)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from .. import dtypes
from ..errors import UnsupportedError
from .check import support_row
from .schedule.searches import signature
from .schedule.tiling import dim_names

if TYPE_CHECKING:
    from chips.schema import Chip, Engine

    from ..graph import Graph, Node, Tensor
    from ..instructions import Region
    from .emit import Buf, Emits
    from .policy import Policy

T = TypeVar("T")


@dataclass
class Lowering:
    graph: Graph
    chip: Chip
    policy: Policy
    em: Emits  # the Emitter, or while a tiling is priced the estimate's Recorder
    home: dict[str, Buf]  # tensor name -> Buf it lives in (DDR or on-chip)
    bound: set[str] = field(default_factory=set)  # tensors whose home lasts the whole program (bindings)
    # a product's output -> (the permute's output whose home it is written into, the permute's order) (templates/place.py)
    permuted: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)
    # a permute's output read through strides -> (the permute's input, whose buffer it is, the order) (templates/place.py)
    read_through: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)
    constants: dict[tuple[str, float, str], Buf] = field(default_factory=dict)  # (op, value, dtype) -> its one-element DDR constant
    # a tiling search's signature -> its result (isa/lower/schedule/searches.py)
    searches: dict[Hashable, Any] = field(default_factory=dict)

    def search(self, nodes: Sequence[Node], stores: Any, extra: Any, work: Callable[[], T]) -> T:
        """work(), or its result for an earlier search of the same signature (isa/lower/schedule/searches.py)."""
        key = signature(self, nodes, stores, extra)
        if key not in self.searches:
            self.searches[key] = work()
        return self.searches[key]

    @property
    def slots(self) -> int:
        return 2 if self.policy.double_buffer else 1

    def engine(self, kind: str) -> Engine:
        """The first engine of a kind: a shared one or core 0's (for work that runs on one core)."""
        engines = self.chip.engines_of(kind)
        if not engines:
            raise UnsupportedError(f"chip {self.chip.name} has no {kind} engine")
        return engines[0]

    def units(self, kind: str, vector: bool = False) -> list[Unit]:
        """One Unit per engine of `kind` ("vector" or "matrix") on the chip, in chip order; with
        vector, a matrix engine is paired with the first vector engine of its core (for the
        epilogue)."""
        out: list[Unit] = []
        for engine in self.chip.engines_of(kind):
            if kind == "vector":
                out.append(Unit(None, engine))
                continue
            partner = self.chip.engines_of("vector", engine.core)[:1] if vector else [None]
            if not partner:
                raise UnsupportedError(f"chip {self.chip.name}: the core of matrix engine {engine.name} has no vector engine")
            out.append(Unit(engine, partner[0]))
        if not out:
            raise UnsupportedError(f"chip {self.chip.name} has no {kind} engine")
        return out

    def constant(self, op: str, value: float, dtype: str) -> Buf:
        """The Buf of a one-element constant in DDR, bound once per op, value and dtype: a DMA
        reading it with zero strides fills a region with the value (one burst read)."""
        key = (op, value, dtype)
        if key not in self.constants:
            data = np.array([value], dtypes.np_dtype(dtype)).tobytes()
            self.constants[key] = self.em.bind(f"{op}.fill{len(self.constants)}", "const", dtype, (1,), data)
        return self.constants[key]

    def tensor(self, name: str) -> Tensor:
        return self.graph.tensors[name]

    def home_region(self, name: str) -> Region:
        """The whole of tensor `name` where it lives: dense; for a tensor written in place of a
        permute's output (`permuted`), that output's region read through the permute's order; for a
        permute's output read through strides (`read_through`), its input's region so read."""
        t = self.graph.tensors[name]
        if name in self.read_through:
            src, order = self.read_through[name]
            full = self.home[src].region(t.dtype, self.graph.tensors[src].shape)
            return full._replace(shape=t.shape, strides=tuple(full.strides[axis] for axis in order))
        if name not in self.permuted:
            return self.home[name].region(t.dtype, t.shape)
        out, order = self.permuted[name]
        full = self.home[name].region(t.dtype, self.graph.tensors[out].shape)
        strides = [0] * len(order)
        for k, axis in enumerate(order):
            strides[axis] = full.strides[k]
        return full._replace(shape=t.shape, strides=tuple(strides))

    def compute_map(self, node: Node) -> Mapping[str, str]:
        return support_row(self.chip, node).compute

    def tile_limits(self, shape: Sequence[int], names: Sequence[str | None] | None = None) -> tuple[int, ...]:
        """The policy's largest tile extent for each dimension of `shape`, named by `names`
        (default: an output's, isa/lower/tiling.dim_names)."""
        names = dim_names(len(shape)) if names is None else names
        return tuple(self.policy.tile_limit(d, n) for d, n in zip(names, shape))


@dataclass(frozen=True)
class Unit:
    """The engines a tile runs on: a matrix engine, a vector engine, or both, of one core."""

    matrix: Engine | None
    vector: Engine | None

    @property
    def vx(self) -> Engine:
        """The vector engine, of a unit Lowering.units("vector") gave (or of a matrix one's, with vector=True)."""
        if self.vector is None:
            raise UnsupportedError("a matrix unit taken without its vector engine has none")
        return self.vector

    @property
    def mx(self) -> Engine:
        """The matrix engine, of a unit Lowering.units("matrix") gave."""
        if self.matrix is None:
            raise UnsupportedError("a vector unit has no matrix engine")
        return self.matrix


def operand_memory(engine: Engine, role: str) -> str:
    """The memory a compute engine's operand (role "a", "b", "c", or "" for a vector engine's)
    sits in: every compute engine names one (chips/schema.py)."""
    mem = engine.operand_memory(role)
    if mem is None:
        raise UnsupportedError(f"engine {engine.name} names no memory for its operands")
    return mem


def vector_memories(units: Sequence[Unit]) -> list[str]:
    """The distinct memories of the units' vector engines: a tile must fit in each."""
    memories = [u.vector.memory for u in units if u.vector is not None]
    assert len(memories) == len(units) and None not in memories, "vector units only: a compute engine names its memory"
    return list(dict.fromkeys(m for m in memories if m is not None))


def local_memory(chip: Chip) -> str | None:
    """The on-chip memory pinned constants and local intermediates live in: the largest (the
    first listed of equal ones) that every core reaches: any on a chip of one core, a shared
    one (an L2) on a chip of several. None when there is none."""
    local = [m for m in chip.memories.values() if m.kind == "local" and (chip.cores == 1 or m.core is None)]
    return max(local, key=lambda m: m.capacity).name if local else None
