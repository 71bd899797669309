"""Tiling searches worked out once per lowering for everything they depend on.

A network repeats its layers (ResNet-50's blocks, a transformer's layers), and a layer group is
planned more than once (isa/lower/schedule/chain.py prices a chain's layers in slices and one by one).
A search's result depends only on its ops (their kinds, parameters, operand shapes and dtypes,
and which operands are the same tensor; the two operands of a commuting element-wise function in
either order), on where those tensors live (their memories, and on a
chip that caches DDR their offsets in its lines, or their addresses where they share one,
which decide what hits), on which of them the group
stores, on what is free in each on-chip memory (which tilings fit), and on what the caller adds (the
rows it runs): `signature` is all of it, and `Lowering.searches` keeps each result by it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np

from ...ops import REGISTRY
from ...vector_fns import COMMUTES, FNS

if TYPE_CHECKING:  # the lowering's context imports this module
    from ...graph import Node
    from ..context import Lowering
    from ..emit import Buf


def signature(ctx: Lowering, nodes: Sequence[Node], stores: Sequence[str], extra: Hashable = ()) -> tuple:
    """What a search over the group of `nodes` (storing `stores`) depends on, with `extra`."""
    local: dict[str, int] = {}
    place = _placement(ctx, nodes)

    def tensor(name: str) -> tuple:
        t, home = ctx.graph.tensors[name], ctx.home.get(name)
        where = None if home is None else (home.mem, place(home), home.window, ctx.home_region(name).strides)
        return local.setdefault(name, len(local)), t.shape, t.dtype, where

    ops = tuple((n.op, _frozen(n.params), _operands(n, [tensor(t) for t in n.inputs]), tuple(tensor(t) for t in n.outputs))
                for n in nodes)
    free = tuple((m, tuple(a.gaps())) for m, a in ctx.em.allocators.items() if ctx.chip.memories[m].kind == "local")
    return ops, tuple(local.get(t) for t in stores), free, extra


def _operands(node: Node, described: list[tuple]) -> tuple:
    """A node's inputs as a search sees them: in order, but the two of an element-wise op whose
    function commutes (a residual add) in either order alike."""
    opdef = REGISTRY[node.op]
    fn = FNS.get(getattr(opdef, "fn", ""))
    if len(described) == 2 and fn is not None and COMMUTES in fn.flags and not getattr(opdef, "scalars", ()):
        return tuple(sorted(described, key=repr))
    return tuple(described)


def _placement(ctx: Lowering, nodes: Sequence[Node]) -> Callable[[Buf], int | None]:
    """home -> what of its address a search depends on. None without a cache of DDR. With one,
    the estimate replays an op on a cold cache that holds whole lines (isa/timing/cache.py), so
    what hits depends on each tensor's offset in its line, unless two of the group's tensors
    share a line of DDR: then on their addresses."""
    if ctx.chip.cache is None:
        return lambda home: None
    line = ctx.chip.memories["ddr"].burst
    homes = {t: home for n in nodes for t in (*n.inputs, *n.outputs) if (home := ctx.home.get(t)) is not None and home.mem == "ddr"}
    spans = sorted((home.addr // line, -(-(home.addr + home.size) // line)) for home in homes.values())
    shared = any(b[0] < a[1] for a, b in pairwise(spans))
    return lambda home: home.addr if shared else home.addr % line


def _frozen(value: Any) -> Hashable:
    """A parameter as a hashable value."""
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, np.ndarray):
        return value.dtype.str, value.shape, value.tobytes()
    return value
