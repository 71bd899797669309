"""Layer groups of several convolutions and max poolings, run slice by slice, as TPU-MLIR's
layer groups are.

A chain is a run of consecutive convolution or max-pooling groups (each with its fused
element-wise tail) in which every group but the last makes one tensor that only later groups
of the chain read, through a convolution's or pooling's windows or as a same-shape operand of a
tail: a ResNet stem and its pooling, a ResNet bottleneck block with its
projection and shortcut add, several blocks in a row, a VGG stage. Those inner tensors never go
to DDR. The chain runs in slices of its last output's rows (its height): a slice runs each group
over the rows the groups reading its result need (a 3x3 convolution's halo rows are computed by
both neighbouring slices), and each inner tensor lives in a local-memory window of the rows its
slice holds (`Buf.window`), which the convolution and pooling templates address by absolute row. Tensors
from before the chain are read where they live, a slice's rows at a time; the last group's
results are stored where they live.

How many slices: the fewest whose windows (one set per buffer slot, so one slice's first
layer can start while the last slice's last one still reads) take at most half of the
local memory's free bytes, the share the policy gives any on-chip intermediate, leaving the
rest for the layers' tiles. The weights: when they too fit in that half, they are loaded
once and the matrix unit reads them in place; otherwise every slice loads them again.

Where chains are cut: a run of such groups is cut into the chains (or single groups)
that move the fewest DDR bytes (dynamic programming over where chains end, at most LONGEST
groups each), counting for a chain the rows its groups read from outside in every slice, its
weights once or once a slice, and its results; for a single group what it loads and stores.
Then each chain is lowered only if the lowering's estimate of its cycles
(isa/lower/schedule/estimate.py, every slice's tilings) is below that of its groups one by one.

So a smaller local memory means shorter chains, more slices, weights reloaded and halo rows
recomputed: the extra DDR traffic Sophgo gives as the reason some FP32 models run slower on
BM1684X (half BM1684's local memory) than on BM1684 (sophon-demo docs/FAQ.md 6.1,
docs/sources.md#sophgo-faq).

Chains form where the local memory is the one the convolutions' engines compute in (a Sophgo
lane's, generic's), as in the compilers that fuse layers this way. Depthwise convolutions
(on the vector unit) join them, so a MobileNet inverted-residual block is one group;
transposed convolutions, average and global poolings and other templates end them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from ..context import local_memory
from ..memory.alloc import align_up
from ..memory.route import copy
from ..templates.catalog import CONV
from .estimate import bounds_hold

if TYPE_CHECKING:
    from ...graph import Graph
    from ..context import Lowering
    from ..templates.catalog import Slicing
    from ..templates.window import Axis
    from .fusion import Group

Rows: TypeAlias = tuple[int, int]  # output rows [first, end)
Plan: TypeAlias = tuple[list[list[Rows]], dict[str, int], bool]  # _slices': each slice's rows per group, windows' rows, hold
Held: TypeAlias = dict[str, tuple[Any, Any]]  # weight -> (its home, its copy in the local memory)
Placed: TypeAlias = tuple[dict[str, list[Any]], Held, list[Any]]  # _place_slices': windows, held weights, plans

LONGEST = 16  # the most groups one chain takes: bounds the search, far more than a block's


@dataclass
class Chain:
    start: int  # the index of its first group among the lowering's
    groups: list[Group]  # in order
    inner: dict[str, int]  # tensor handed on inside the chain -> the index of the group that makes it
    readers: dict[str, list[tuple[int, str]]]  # inner tensor -> [(index of a group reading it, "window" or "tail")]
    mem: str  # the local memory the windows live in
    row_axes: list[Axis]  # each group's window axis along the rows of its input


class Chains:
    """Where a lowering's groups form chains: `at` maps the index of a chain's first group to
    the Chain, for runs of sliceable groups cut where chains move the fewest DDR bytes by the
    layer groups' own count (the module's docstring); `recut` cuts the groups of a chain the
    estimate declined into shorter chains."""

    def __init__(self, ctx: Lowering, groups: list[Group]) -> None:
        self.ctx, self.groups = ctx, groups
        self.at: dict[int, Chain] = {}
        mem = local_memory(ctx.chip)
        if not (ctx.policy.chain and ctx.policy.fuse) or mem is None or mem != ctx.units("vector")[0].vx.memory:
            return
        self.mem = mem
        self.readers: dict[str, list[int]] = {}
        for i, g in enumerate(groups):
            for t in g.loads:
                self.readers.setdefault(t, []).append(i)
        self.outputs = set(ctx.graph.outputs.values())
        self.row_axes = {i: _slicing(g).axes(ctx.graph, g.nodes[0])[0] for i, g in enumerate(groups) if _sliceable(ctx.graph, g)}
        i = 0
        while i < len(groups):
            j = i
            while j in self.row_axes:
                j += 1
            self.at.update(self._cut(i, j, LONGEST))
            i = j + 1

    def recut(self, chain: Chain) -> dict[int, Chain]:
        """{index of a first group: Chain} for the chain's groups cut into chains of fewer groups."""
        return self._cut(chain.start, chain.start + len(chain.groups), len(chain.groups) - 1)

    def _cut(self, lo: int, hi: int, longest: int) -> dict[int, Chain]:
        """The chains of groups[lo:hi] (all sliceable), at most `longest` groups each, that move
        the fewest DDR bytes, by dynamic programming over where chains end."""
        best: dict[int, tuple[int, dict[int, Chain]]] = {lo: (0, {})}  # position -> (bytes, chains) of the best cut of groups[lo:position]
        for end in range(lo + 1, hi + 1):
            options = []
            for start in range(max(lo, end - longest), end):
                chain = self._chain(start, end) if end - start > 1 else None
                if end - start > 1 and chain is None:
                    continue
                moved = _moved(self.ctx, chain) if chain else _layer_bytes(self.ctx, self.groups[start])
                if moved is not None:
                    options.append((best[start][0] + moved, -start, {**best[start][1], **({start: chain} if chain else {})}))
            found = min(options, key=lambda o: o[:2])
            best[end] = (found[0], found[2])
        return best[hi][1]

    def _chain(self, start: int, end: int) -> Chain | None:
        """The Chain of groups[start:end], or None when one of them but the last hands on a
        tensor that is read outside the chain (or is a graph output), is not its only stored
        tensor, or is read other than through a layer's windows or as a same-shape operand of a tail."""
        graph, groups = self.ctx.graph, self.groups
        inner: dict[str, int] = {}
        who: dict[str, list[tuple[int, str]]] = {}
        for k in range(start, end - 1):
            g = groups[k]
            if len(g.stores) != 1 or g.stores[0] in self.outputs:
                return None
            t = g.stores[0]
            if not all(start < r < end for r in self.readers.get(t, ())):
                return None
            inner[t], who[t] = k - start, []
            for r in dict.fromkeys(self.readers.get(t, ())):
                member = groups[r]
                if member.nodes[0].inputs[0] == t:  # through the windows of a convolution or a pooling
                    who[t].append((r - start, "window"))
                if any(t in n.inputs for n in member.nodes[1:]):
                    if graph.tensors[t].shape != graph.tensors[member.nodes[0].outputs[0]].shape:
                        return None
                    who[t].append((r - start, "tail"))
                if t in member.nodes[0].inputs[1:]:
                    return None
        return Chain(start, groups[start:end], inner, who, self.mem, [self.row_axes[k] for k in range(start, end)])


def _sliceable(graph: Graph, group: Group) -> bool:
    """A group whose rows can be run apart and priced, with its tail: its template's slicing says
    (a 2-d convolution or max pooling: isa/lower/templates/catalog.py)."""
    slicing = group.template.slicing
    return slicing is not None and slicing.sliceable(graph, group)


def _slicing(group: Group) -> Slicing:
    """The slicing plan of a group of a chain (only sliceable groups join one)."""
    slicing = group.template.slicing
    assert slicing is not None, f"{group.nodes[0].name}: a group without a slicing plan in a chain"
    return slicing


def _input_rows(axis: Axis, rows: Rows) -> Rows:
    """The rows [lo, hi) of a windowed input (its window axis along them) that output rows
    [o0, o1) read."""
    lo, count = axis.reads(rows[0], rows[1] - rows[0])[:2]
    return lo, lo + count


def _layer_bytes(ctx: Lowering, group: Group) -> int:
    """DDR bytes a group lowered alone moves at least: what it loads and stores, once."""
    return sum(ctx.graph.tensors[t].nbytes for t in group.loads + group.stores)


def _moved(ctx: Lowering, chain: Chain) -> int | None:
    """DDR bytes the chain moves at least, sliced as _slices says (None: it does not fit):
    the rows its groups read from outside it in every slice (halos twice), the weights once
    or once a slice, its outputs once."""
    plan = _slices(ctx, chain)
    if plan is None:
        return None
    slices, _, hold = plan
    graph, total = ctx.graph, 0
    for k, g in enumerate(chain.groups):
        head, out = g.nodes[0], graph.tensors[g.nodes[0].outputs[0]]
        for t in (t for t in g.loads if t not in chain.inner):
            tensor = graph.tensors[t]
            if t == head.inputs[0]:  # the rows its windows read, a slice at a time
                total += tensor.nbytes // tensor.shape[2] * sum(b - a for r in slices for a, b in [_input_rows(chain.row_axes[k], r[k])])
            elif tensor.shape == out.shape:  # a tail's operand, a slice's rows at a time
                total += tensor.nbytes // tensor.shape[2] * sum(b - a for r in slices for a, b in [r[k]])
            else:  # weights, biases, broadcast operands: whole, again every slice unless held
                total += tensor.nbytes * (1 if hold else len(slices))
    return total + sum(graph.tensors[t].nbytes for t in chain.groups[-1].stores)


def lower_chain(ctx: Lowering, chain: Chain) -> bool:
    """Emit the chain slice by slice; False (nothing emitted) when its windows do not fit or
    the lowering's estimate says layer by layer is faster. Layer by layer is searched only
    where its lower bound (each layer's floor, isa/lower/templates/conv.py) does not already exceed the
    sliced estimate; the slices are searched only where their floors, where they bound the
    estimate, do not already exceed layer by layer's estimate (a chain cut too fine to win)."""
    plan = _slices(ctx, chain)
    if plan is None:
        ctx.em.notes.append(f"layer group {_names(chain)}: one-row slices do not fit in {chain.mem}; lowered layer by layer")
        return False
    slices, rows, _ = plan
    em = ctx.em
    floor = _layered_cycles(ctx, chain, lambda p: p.floor())
    placed = _place_slices(ctx, chain, plan)
    if placed is None:
        return False
    if _floors_bound(ctx, placed[2]):
        least = sum(p.floor_of(r) for ranges in slices for p, r in zip(placed[2], ranges))
        if least > floor:  # layer by layer may win before any slice is searched
            weighed = _against_layered(ctx, chain, plan, placed, least, "at least")
            if weighed is None:
                return False
            placed = weighed[1]
    sliced = sum(p.tiling(r)[1] for ranges in slices for p, r in zip(placed[2], ranges))
    against = f"at least {floor:,.0f}"
    if sliced > floor:  # the bound does not decide: search layer by layer, where its layers would be placed
        weighed = _against_layered(ctx, chain, plan, placed, sliced, "estimated")
        if weighed is None:
            return False
        against = f"{weighed[0]:,.0f}"
        placed = weighed[1]
    windows, held, plans = placed
    graph = ctx.graph
    for w, (home, buf) in held.items():
        weight = graph.tensors[w]
        copy(em, home.region(weight.dtype, weight.shape), home, buf.region(weight.dtype, weight.shape), buf, f"{w}.hold")
    em.notes.append(f"layer group {_names(chain)}: {len(chain.groups)} layers in {len(slices)} slice(s) of output rows, "
                    f"intermediates in {chain.mem}, weights {'held' if held else 'loaded every slice'}: estimated {sliced:,.0f} cycles "
                    f"against {against} layer by layer")
    for s, ranges in enumerate(slices):
        for t, k in chain.inner.items():
            buf = windows[t][s % ctx.slots]
            buf.window = (2, ranges[k][0], rows[t])
            ctx.home[t] = buf
        for p, r in zip(plans, ranges):
            p.run(r)
    _release_slices(ctx, chain, placed)
    return True


def _against_layered(ctx: Lowering, chain: Chain, plan: Plan, placed: Placed, cycles: float,
                     kind: str) -> tuple[float, Placed] | None:
    """Weigh the sliced chain's cycles (of `kind`: "estimated", or "at least" for a bound)
    against layer by layer, searched where its layers would be placed: None, noted, where layer
    by layer is cheaper; else (its estimate, the slices placed again)."""
    _release_slices(ctx, chain, placed)
    layered = _layered_cycles(ctx, chain, lambda p: p.tiling()[1])
    if cycles > layered:
        ctx.em.notes.append(f"layer group {_names(chain)}: {kind} {cycles:,.0f} cycles in {len(plan[0])} slice(s) against {layered:,.0f} "
                            f"layer by layer; lowered layer by layer")
        return None
    again = _place_slices(ctx, chain, plan)
    assert again is not None, "the same windows fit again once released"
    return layered, again


def _place_slices(ctx: Lowering, chain: Chain, plan: Plan) -> Placed | None:
    """(windows, held weights, plans) of the chain run slice by slice, its windows and held
    weights placed; None (nothing placed) when a layer has no room for a tile."""
    _, rows, hold = plan
    em, graph = ctx.em, ctx.graph
    windows = {t: [em.alloc(chain.mem, _window_bytes(graph, t, rows[t]), f"{t}.rows{k}") for k in range(ctx.slots)]
               for t in chain.inner}
    for t in chain.inner:
        ctx.home[t] = windows[t][0]
    held = _hold(ctx, chain) if hold else {}
    plans = [_slicing(g).plan(ctx, g) for g in chain.groups]
    if held and not all(p.feasible() for p in plans):  # the weights leave the tiles no room
        _unhold(ctx, held)
        held, plans = {}, [_slicing(g).plan(ctx, g) for g in chain.groups]
    if not all(p.feasible() for p in plans):
        _release(ctx, chain, windows)
        ctx.em.notes.append(f"layer group {_names(chain)}: its windows leave a layer no room for a tile; lowered layer by layer")
        return None
    return windows, held, plans


def _floors_bound(ctx: Lowering, plans: list[Any]) -> bool:
    """Whether every layer's floor is a lower bound of its estimate (estimate.bounds_hold)."""
    return all(bounds_hold(ctx.chip, len(p.units)) for p in plans)


def _release_slices(ctx: Lowering, chain: Chain, placed: Placed) -> None:
    windows, held, _ = placed
    _release(ctx, chain, windows)
    _unhold(ctx, held)


def _layered_cycles(ctx: Lowering, chain: Chain, cycles: Callable[[Any], float]) -> float:
    """The sum of cycles(plan) over the chain's layers lowered one by one (their tiling()'s
    estimate, or its floor), the tensors they hand on in DDR (placed for the estimate and
    released)."""
    for t in chain.inner:
        ctx.home[t] = ctx.em.alloc(ctx.chip.data_memory, ctx.graph.tensors[t].nbytes, t)
    total = sum(cycles(_slicing(g).plan(ctx, g)) for g in chain.groups)
    for t in chain.inner:
        ctx.em.release(ctx.home.pop(t))
    return total


def _names(chain: Chain) -> str:
    return f"{chain.groups[0].nodes[0].name}..{chain.groups[-1].nodes[0].name}"


def _release(ctx: Lowering, chain: Chain, windows: dict[str, list[Any]]) -> None:
    for t in chain.inner:
        del ctx.home[t]
        for buf in windows[t]:
            ctx.em.release(buf)


def _slices(ctx: Lowering, chain: Chain) -> Plan | None:
    """(per slice the output rows each group runs, the rows each inner tensor's window holds,
    whether the weights are held) for the fewest slices that fit; None when even one output row
    a slice does not."""
    graph, alloc = ctx.graph, ctx.em.allocators[chain.mem]
    height = graph.tensors[chain.groups[-1].nodes[0].outputs[0]].shape[2]
    room = alloc.free_bytes() // 2
    weights = sum(align_up(graph.tensors[w].nbytes, alloc.granule) for w in _holdable(ctx, chain))

    def need(slices: list[list[Rows]]) -> tuple[dict[str, int], list[int], int]:
        """(the rows each inner tensor's window holds, their buffers' sizes, their bytes placed)."""
        rows = {t: max(r[k][1] - r[k][0] for r in slices) for t, k in chain.inner.items()}
        sizes = [_window_bytes(graph, t, rows[t]) for t in chain.inner] * ctx.slots
        return rows, sizes, sum(align_up(n, alloc.granule) for n in sizes)

    for count in range(1, height + 1):
        cuts = [(k * height // count, (k + 1) * height // count) for k in range(count)]
        _, sizes, placed = need([_rows(chain, cuts[count // 2])])  # one slice's windows: no wider than the widest's
        if placed > room or not alloc.fits(sizes):
            continue
        slices = [_rows(chain, rows) for rows in cuts]
        rows, sizes, placed = need(slices)
        if placed <= room and alloc.fits(sizes):
            return slices, rows, count > 1 and 0 < weights <= room - placed
    return None


def _rows(chain: Chain, last: Rows) -> list[Rows]:
    """The output rows each group runs for the last one to make rows `last`: what the groups
    reading its result need of it (a convolution or pooling its windows' rows, a tail the same rows)."""
    out: list[Rows] = [last] * len(chain.groups)  # each but the last set below, from the last back
    for k in range(len(chain.groups) - 2, -1, -1):  # group k makes one inner tensor, its only store
        readers = chain.readers[chain.groups[k].stores[0]]
        needs = [_input_rows(chain.row_axes[r], out[r]) if how == "window" else out[r] for r, how in readers]
        out[k] = (min(a for a, _ in needs), max(b for _, b in needs))
    return out


def _window_bytes(graph: Graph, name: str, rows: int) -> int:
    t = graph.tensors[name]
    return t.nbytes // t.shape[2] * rows


def _holdable(ctx: Lowering, chain: Chain) -> list[str]:
    """The weights of the chain's convolutions the matrix unit could read in place from the
    local memory: in DDR, of a convolution on the matrix unit (the conv template: a depthwise
    one has its own) that does not shift its operands (isa/lower/templates/conv.py, weight_in_place)."""
    matrix = ctx.chip.engines_of("matrix")
    if not matrix or matrix[0].operand_memory("b") != chain.mem:
        return []
    out = []
    for g in (g for g in chain.groups if g.template is CONV):
        node = g.nodes[0]
        if node.params.get("mode") != "v2" and ctx.home[node.inputs[1]].mem == "ddr":
            out.append(node.inputs[1])
    return list(dict.fromkeys(out))


def _hold(ctx: Lowering, chain: Chain) -> Held:
    """Place the holdable weights in the local memory (lower_chain loads them there once);
    {weight: (its home, the copy)}, the copies their homes meanwhile."""
    held = {}
    for w in _holdable(ctx, chain):
        held[w] = (ctx.home[w], ctx.em.alloc(chain.mem, ctx.graph.tensors[w].nbytes, f"{w}.held"))
        ctx.home[w] = held[w][1]
    return held


def _unhold(ctx: Lowering, held: Held) -> None:
    for w, (home, buf) in held.items():
        ctx.home[w] = home
        ctx.em.release(buf)
