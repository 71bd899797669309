"""Layer groups of several convolutions, run slice by slice, as TPU-MLIR's layer groups are.

A chain is a run of convolution groups (each with its fused element-wise tail) in which every
group but the last hands one tensor to the next and nothing else reads it: a ResNet
bottleneck's three convolutions, a VGG stage. Those intermediates never go to DDR. The chain
runs in slices of its output's rows (its height): a slice runs each convolution over the rows
the ones after it read (a 3x3 convolution's halo rows are computed by both neighbouring slices),
and each intermediate lives in a local-memory window of the rows its slice holds
(`Buf.window`), which the convolution templates address by absolute row. The chain's own input
and output stay where they live (DDR, or on chip as the policy places them).

How many slices: the fewest whose windows (one set per buffer slot, so one slice's first
convolution can start while the last slice's last one still reads) take at most half of the
local memory's free bytes, the share the policy gives any on-chip intermediate, leaving the
rest for the convolutions' tiles. A chain whose one-row windows do not fit is lowered group by
group. The weights: when they too fit in that half, they are loaded once and the matrix unit
reads them in place; otherwise every slice loads them again. So a smaller local memory means
more slices, weights reloaded and halo rows recomputed: the extra DDR traffic Sophgo gives as
the reason some FP32 models run slower on BM1684X (half BM1684's local memory) than on BM1684
(sophon-demo docs/FAQ.md 6.1, ../shared/hardware-facts.md 2.6).

Chains form where the local memory is the one the convolutions' engines compute in (a Sophgo
lane's, generic's), as in the compilers that fuse layers this way.
"""

from dataclasses import dataclass

from ..ops import REGISTRY
from .alloc import align_up
from .context import local_memory
from .conv import input_rows, plan_conv
from .route import copy


@dataclass
class Chain:
    groups: list  # fusion.Group, in order
    inner: list  # the tensors handed from one group to the next
    mem: str  # the local memory the windows live in


def find_chains(ctx, groups):
    """{index of a chain's first group: Chain} for the chains of at least two groups."""
    mem = local_memory(ctx.chip)
    if not (ctx.policy.chain and ctx.policy.fuse) or mem is None or mem != ctx.units("vector")[0].vector.memory:
        return {}
    readers = {}
    for g in groups:
        for t in g.loads:
            readers[t] = readers.get(t, 0) + 1
    outputs = set(ctx.graph.outputs.values())
    found, run = {}, []
    for i, g in enumerate(groups):
        if run and _links(ctx.graph, run[-1], g, readers, outputs):
            run.append(g)
            continue
        if len(run) > 1:
            found[i - len(run)] = Chain(run, [h.stores[0] for h in run[:-1]], mem)
        run = [g] if _sliceable(ctx.graph, g) else []
    if len(run) > 1:
        found[len(groups) - len(run)] = Chain(run, [h.stores[0] for h in run[:-1]], mem)
    return found


def _sliceable(graph, group):
    """A group whose rows can be run apart and whose cycles the lowering's estimate prices: a
    2-d convolution on the matrix unit (not transposed, not depthwise) with its tail."""
    head = group.nodes[0]
    return (group.template == "conv" and not REGISTRY[head.op].transposed and not head.params.get("depthwise")
            and len(graph.tensors[head.outputs[0]].shape) == 4)


def _links(graph, a, b, readers, outputs):
    """Whether group b continues a chain ending in group a: a's one stored tensor is b's
    convolution input, read by nothing else (b's tail included) and not a graph output."""
    if not _sliceable(graph, b) or len(a.stores) != 1:
        return False
    t = a.stores[0]
    tail_reads = {x for n in b.nodes[1:] for x in n.inputs}
    return b.nodes[0].inputs[0] == t and readers.get(t) == 1 and t not in outputs and t not in tail_reads


def lower_chain(ctx, chain):
    """Emit the chain slice by slice; False (nothing emitted) when its windows do not fit or
    the lowering's estimate says layer by layer is faster."""
    plan = _slices(ctx, chain)
    if plan is None:
        ctx.em.notes.append(f"layer group {_names(chain)}: one-row slices do not fit in {chain.mem}; lowered layer by layer")
        return False
    slices, rows, hold = plan
    em, graph = ctx.em, ctx.graph
    layered = _layered_cycles(ctx, chain)
    windows = {t: [em.alloc(chain.mem, _window_bytes(graph, t, rows[t]), f"{t}.rows{k}") for k in range(ctx.slots)]
               for t in chain.inner}
    for t in chain.inner:
        ctx.home[t] = windows[t][0]
    held = _hold(ctx, chain) if hold else {}
    plans = [plan_conv(ctx, g) for g in chain.groups]
    if held and not all(p.feasible() for p in plans):  # the weights leave the tiles no room
        _unhold(ctx, held)
        held, plans = {}, [plan_conv(ctx, g) for g in chain.groups]
    if not all(p.feasible() for p in plans):
        _release(ctx, chain, windows)
        ctx.em.notes.append(f"layer group {_names(chain)}: its windows leave a convolution no room for a tile; lowered layer by layer")
        return False
    sliced = sum(p.tiling(r)[1] for ranges in slices for p, r in zip(plans, ranges[1:]))
    if sliced > layered:
        _unhold(ctx, held)
        _release(ctx, chain, windows)
        em.notes.append(f"layer group {_names(chain)}: estimated {sliced:,.0f} cycles in {len(slices)} slice(s) against {layered:,.0f} "
                        f"layer by layer; lowered layer by layer")
        return False
    for w, (home, buf) in held.items():
        t = graph.tensors[w]
        copy(em, home.region(t.dtype, t.shape), home, buf.region(t.dtype, t.shape), buf, f"{w}.hold")
    em.notes.append(f"layer group {_names(chain)}: {len(chain.groups)} convolutions in {len(slices)} slice(s) of output rows, "
                    f"intermediates in {chain.mem}, weights {'held' if held else 'loaded every slice'}: estimated {sliced:,.0f} cycles "
                    f"against {layered:,.0f} layer by layer")
    for s, ranges in enumerate(slices):
        for t, (lo, _) in zip(chain.inner, ranges[1:]):
            buf = windows[t][s % ctx.slots]
            buf.window = (2, lo, rows[t])
            ctx.home[t] = buf
        for p, r in zip(plans, ranges[1:]):
            p.run(r)
    _release(ctx, chain, windows)
    _unhold(ctx, held)
    return True


def _layered_cycles(ctx, chain):
    """The estimated cycles of the chain's convolutions lowered one by one, the tensors they
    hand on in DDR (placed for the estimate and released)."""
    graph, placed = ctx.graph, []
    for t in chain.inner:
        ctx.home[t] = ctx.em.alloc("ddr", graph.tensors[t].nbytes, t)
        placed.append(t)
    cycles = sum(plan_conv(ctx, g).tiling()[1] for g in chain.groups)
    for t in placed:
        ctx.em.release(ctx.home.pop(t))
    return cycles


def _names(chain):
    return f"{chain.groups[0].nodes[0].name}..{chain.groups[-1].nodes[0].name}"


def _release(ctx, chain, windows):
    for t in chain.inner:
        del ctx.home[t]
        for buf in windows[t]:
            ctx.em.release(buf)


def _slices(ctx, chain):
    """(per slice the row range of the chain's input and of every group's output, rows each
    inner tensor's window holds, whether the weights are held) for the fewest slices that fit;
    None when even one output row a slice does not."""
    graph, alloc = ctx.graph, ctx.em.allocators[chain.mem]
    heads = [g.nodes[0] for g in chain.groups]
    height = graph.tensors[heads[-1].outputs[0]].shape[2]
    room = alloc.free_bytes() // 2
    weights = sum(align_up(graph.tensors[w].nbytes, alloc.granule) for w in _holdable(ctx, chain))
    for count in range(1, height + 1):
        slices = []
        for k in range(count):
            ranges = [(k * height // count, (k + 1) * height // count)]
            for node in reversed(heads):
                ranges.insert(0, input_rows(graph, node, ranges[0]))
            slices.append(ranges)
        rows = {t: max(r[j + 1][1] - r[j + 1][0] for r in slices) for j, t in enumerate(chain.inner)}
        sizes = [_window_bytes(graph, t, rows[t]) for t in chain.inner] * ctx.slots
        need = sum(align_up(n, alloc.granule) for n in sizes)
        if need <= room and alloc.fits(sizes):
            return slices, rows, count > 1 and 0 < weights <= room - need
    return None


def _window_bytes(graph, name, rows):
    t = graph.tensors[name]
    return t.nbytes // t.shape[2] * rows


def _holdable(ctx, chain):
    """The weights of the chain's convolutions the matrix unit could read in place from the
    local memory: in DDR, of a convolution on the matrix unit that does not shift its operands
    (isa/lower/conv.py, weight_in_place)."""
    matrix = ctx.chip.engines_of("matrix")
    if not matrix or matrix[0].operand_memory("b") != chain.mem:
        return []
    out = []
    for g in chain.groups:
        node = g.nodes[0]
        if node.params.get("mode") != "v2" and ctx.home[node.inputs[1]].mem == "ddr":
            out.append(node.inputs[1])
    return list(dict.fromkeys(out))


def _hold(ctx, chain):
    """Place the holdable weights in the local memory (lower_chain loads them there once);
    {weight: (its home, the copy)}, the copies their homes meanwhile."""
    held = {}
    for w in _holdable(ctx, chain):
        held[w] = (ctx.home[w], ctx.em.alloc(chain.mem, ctx.graph.tensors[w].nbytes, f"{w}.held"))
        ctx.home[w] = held[w][1]
    return held


def _unhold(ctx, held):
    for w, (home, buf) in held.items():
        ctx.home[w] = home
        ctx.em.release(buf)
