"""Graph -> Program: a sequence of small passes over plain data.

1. check    every op is supported by the chip for its dtypes (isa/lower/check.py)
2. group    chains of local ops fuse into layer groups (isa/lower/schedule/fusion.py); runs of
            convolution groups form multi-layer groups run slice by slice, the tensors they
            hand on in local memory (isa/lower/schedule/chain.py)
3. place    memory the policy reserves is taken out; graph inputs, constants and outputs get
            homes for the whole run (DDR; a pinned constant on chip); a tensor passed between
            groups lives from its producer to its last user in DDR, or on chip when the policy
            says so, it fits and every template touching it can reach it there (Template.homes);
            a repeated layer's output where its input lay (memory/carry.py)
4. emit     each group's template tiles it and emits instructions (local.py, matmul.py, ...),
            the emitter inferring the sync between engines (emit.py); a run of identical blocks
            of groups (a model's decoder layers) is emitted for its first blocks and the last
            emitted one replayed for the rest at their own addresses (replay.py)
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ..collect import paused
from ..errors import ConfigError, OutOfMemoryError
from .check import check_graph, check_sizes
from .context import Lowering, local_memory
from .emit import Buf, Emitter
from .memory.carry import Carry, carried
from .policy import Policy, policy_from_overrides
from .replay import Replayer, find
from .schedule.chain import Chain, Chains, lower_chain
from .schedule.fusion import groups as make_groups
from .templates.cache import bind_states
from .templates.catalog import IN_PLACE, READ_THROUGH, TEMPLATES, VIEW, Template
from .templates.place import permuted_in_place, read_through
from .templates.staging import staged_copy

if TYPE_CHECKING:
    from chips.schema import Chip

    from ..graph import Graph
    from ..program import Program
    from .schedule.fusion import Group

Progress = Callable[[int, int], None]  # progress(ops lowered, ops in all)
Place = Callable[[str, Template], None]  # place(tensor, the template that makes it): give it a home
Touch = dict[str, dict[Template, str]]  # tensor -> {template: the first op of its groups} reading it
Aliased = list[tuple[str, str, Buf]]  # (output name, tensor name, the output's Buf)

__all__ = ["TEMPLATES", "Policy", "lower", "policy_from_overrides"]


def lower(graph: Graph, chip: Chip, policy: Policy | None = None, progress: Progress | None = None, replay: bool = True) -> Program:
    """The Program of `graph` on `chip`. `progress`, when given, is called as progress(ops lowered,
    ops in all) after each layer group is emitted: a long lowering can show how far it is. With
    replay (the default), identical layers are emitted once and replayed (isa/lower/replay.py): the
    same program, emitted sooner."""
    with paused(kept=True):  # the emitted instructions are long-lived: collections would walk them for nothing
        return _lower(graph, chip, policy or Policy(), progress, replay)


def _lower(graph: Graph, chip: Chip, policy: Policy, progress: Progress | None, replay: bool) -> Program:
    check_graph(graph, chip)
    check_sizes(graph, chip)
    groups = make_groups(graph, chip, policy)
    em = Emitter(chip, graph.name, policy.allocator)
    em.notes.extend(graph.notes)
    ctx = Lowering(graph, chip, policy, em, {})
    _reserve(ctx)
    shares = _shared_buffers(graph, groups)
    _permutes_in_place(ctx, groups, shares)
    touch = _templates_touching(groups, shares)
    _check_pins(ctx, touch)
    aliased = _bind(ctx, _in_ddr_only(groups, shares))
    ctx.bound.update(ctx.home)
    last_use: dict[str, int] = {}
    for i, g in enumerate(groups):
        for t in g.loads:
            last_use[shares.get(t, t)] = i
    chains, placed = Chains(ctx, groups), set[str]()
    repeat = find(graph, groups, _span_starts(groups, chains), set(ctx.bound))  # the program is the same emitted whole or replayed
    carry = Carry(carried(graph, groups, repeat) if repeat else {}, groups)
    place = functools.partial(_place, ctx, touch, placed, carry)  # not a closure calling itself: that cycle would keep ctx,
    # its emitter and the program's instructions until a full collection
    replayer = Replayer(ctx, em, groups, repeat) if repeat and replay else None
    i, done, total = 0, 0, sum(len(g.nodes) for g in groups)
    while i < len(groups):
        resume = replayer.at(i, placed) if replayer else None
        if resume is not None:
            done += sum(len(g.nodes) for g in groups[i:resume])
            i = resume
            if progress:
                progress(done, total)
            continue
        chain = chains.at.get(i)
        span = chain.groups if chain else [groups[i]]
        for g in span:
            for t in g.stores:
                if t not in ctx.home and t not in (chain.inner if chain else ()) and not g.template.places_outputs:
                    place(t, g.template)
        if chain:
            _lower_chain(ctx, chains, chain, place)
        else:
            groups[i].template.lower(ctx, groups[i])
        for k, g in enumerate(span, i):
            for t in dict.fromkeys(shares.get(t, t) for t in g.loads):
                if last_use[t] == k and t in placed and not carry.hold(t, ctx.home[t], k):
                    em.release(ctx.home[t])
        i += len(span)
        for buf in carry.unclaimed(i):
            em.release(buf)
        if progress:
            done += sum(len(g.nodes) for g in span)
            progress(done, total)
    _copy_aliased_outputs(ctx, aliased)
    return dataclasses.replace(em.program(), blocks=replayer.found if replayer else None)


def _place(ctx: Lowering, touch: Touch, placed: set[str], carry: Carry, t: str, template: Template) -> None:
    """Give tensor t, made by `template`, a home, and note it in `placed`: a repeat's carried
    tensor where the one it is handed on in place of was held for it."""
    if t in ctx.permuted:  # written in place of the permute's output (templates/place.py)
        out = ctx.permuted[t][0]
        if out not in ctx.home:
            _place(ctx, touch, placed, carry, out, template)
        ctx.home[t] = ctx.home[out]
        return
    held = carry.claim(t)
    if held is not None:
        ctx.em.release(held)
    ctx.home[t] = _place_intermediate(ctx, t, {*touch.get(t, {}), template}, held)
    placed.add(t)


def _span_starts(groups: list[Group], chains: Chains) -> set[int]:
    """The groups the driver's spans (a chain, or one group) begin at, and the end."""
    starts, i = set(), 0
    while i < len(groups):
        starts.add(i)
        chain = chains.at.get(i)
        i += len(chain.groups) if chain else 1
    return starts | {len(groups)}


def _lower_chain(ctx: Lowering, chains: Chains, chain: Chain, place: Place) -> None:
    """Emit a chain as one layer group, or where its estimate declines it, its groups cut into
    shorter chains and single groups (isa/lower/schedule/chain.py), the tensors it would have held
    placed as their makers run."""
    if lower_chain(ctx, chain):
        return
    parts = chains.recut(chain)
    k = chain.start
    while k < chain.start + len(chain.groups):
        part = parts.get(k)
        span = part.groups if part else [chains.groups[k]]
        for g in span:
            for t in g.stores:
                if t in chain.inner and not (part and t in part.inner):
                    place(t, g.template)
        if part:
            _lower_chain(ctx, chains, part, place)
        else:
            span[0].template.lower(ctx, span[0])
        k += len(span)


def _reserve(ctx: Lowering) -> None:
    """Take each reserved amount off the top of its memory before anything is placed; a
    per-core memory's YAML name ("lmem") reserves it in every core's copy."""
    for mem, nbytes in ctx.policy.reserve:
        copies = [m.name for m in ctx.chip.memories.values() if mem in (m.name, m.base)]
        if not copies:
            raise ConfigError(f"policy.reserve: chip {ctx.chip.name} has no memory {mem!r} (memories: {', '.join(ctx.chip.memories)})")
        for name in copies if nbytes else ():
            addr, size = ctx.em.allocators[name].reserve(nbytes, f"policy.reserve.{mem}")
            ctx.em.notes.append(f"reserved {size} bytes of {name} at {addr:#x}")


def _shared_buffers(graph: Graph, groups: list[Group]) -> dict[str, str]:
    """tensor -> the tensor whose buffer it shares (a view of it not bound to an output)."""
    shares: dict[str, str] = {}
    outputs = set(graph.outputs.values())
    for g in groups:
        if g.template is VIEW and g.nodes[0].outputs[0] not in outputs:
            src = g.nodes[0].inputs[0]
            shares[g.nodes[0].outputs[0]] = shares.get(src, src)
    return shares


def _permutes_in_place(ctx: Lowering, groups: list[Group], shares: dict[str, str]) -> None:
    """The permutes a product writes in place and those read through strides (templates/place.py):
    ctx.permuted and ctx.read_through; their groups emit nothing, and a permute read through shares
    its input's buffer (`shares`)."""
    ctx.permuted = permuted_in_place(ctx.graph, groups, shares)
    written = {out for out, _ in ctx.permuted.values()}
    ctx.read_through = read_through(ctx.graph, groups, written)
    for out, (src, _) in ctx.read_through.items():
        shares[out] = shares.get(src, src)
    for g in groups:
        out = g.nodes[0].outputs[0]
        if out in written:
            g.template = IN_PLACE
        elif out in ctx.read_through:
            g.template = READ_THROUGH


def _templates_touching(groups: list[Group], shares: dict[str, str]) -> Touch:
    """tensor -> {template: the first op of its groups} that read it or a view sharing its buffer."""
    touch: Touch = {}
    for g in groups:
        for t in g.loads:
            touch.setdefault(shares.get(t, t), {}).setdefault(g.template, g.nodes[0].name)
    return touch


def _on_chip_ok(templates: Iterable[Template]) -> bool:
    return all(t.homes == "any" for t in templates)


def _check_pins(ctx: Lowering, touch: Touch) -> None:
    g = ctx.graph
    for name in ctx.policy.pinned:
        if name not in g.tensors:
            raise ConfigError(f"policy.pinned: graph {g.name} has no tensor {name!r} (constants: {', '.join(g.constants) or 'none'})")
        if name not in g.constants:
            what = "an input" if name in g.inputs else f"made by op {g.producer[name].name}"
            raise ConfigError(f"policy.pinned: {name} is {what}, not a constant; only constants "
                              f"can be pinned (constants: {', '.join(g.constants) or 'none'})")
        for template, op in touch.get(name, {}).items():
            if template.homes == "ddr":
                raise ConfigError(f"policy.pinned: constant {name} is read by op {op} (the "
                                  f"{template.name} template), whose operands must be in DDR")


def _in_ddr_only(groups: list[Group], shares: dict[str, str]) -> set[str]:
    """The tensors a template whose operands must be in DDR reads or writes."""
    return {shares.get(t, t) for g in groups if g.template.homes == "ddr" for t in (*g.loads, *g.stores)}


def _bind(ctx: Lowering, ddr_only: set[str]) -> Aliased:
    """Graph state, inputs, constants and outputs get their places first, in that order: states in
    DDR (isa/lower/templates/cache.py), constants in DDR (a pinned one in on-chip memory), inputs
    and outputs in the chip's data memory (DDR, or the host's where it has one, unless a template
    that reads DDR only touches them). Returns the outputs that alias a tensor placed already, as
    (output name, tensor name, Buf)."""
    g, em = ctx.graph, ctx.em

    def data(name: str) -> str:
        return "ddr" if name in ddr_only else ctx.chip.data_memory

    local = local_memory(ctx.chip) if ctx.policy.pinned else None
    if ctx.policy.pinned and local is None:
        raise ConfigError(f"policy.pinned: chip {ctx.chip.name} has no on-chip memory every core reaches (each of its "
                          f"{ctx.chip.cores} cores has its own), so nothing can be pinned")
    bind_states(ctx)
    for name in g.inputs:
        t = g.tensors[name]
        ctx.home[name] = em.bind(name, "input", t.dtype, t.shape, mem=data(name))
    for name, array in g.constants.items():
        mem = local if local is not None and name in ctx.policy.pinned else "ddr"
        ctx.home[name] = em.bind(name, "const", g.tensors[name].dtype, array.shape, array.tobytes(), mem)
    aliased: Aliased = []
    for out_name, tname in g.outputs.items():
        t = g.tensors[tname]
        if tname in ctx.home:  # an input, a constant or a tensor already output under another name
            aliased.append((out_name, tname, em.bind(out_name, "output", t.dtype, t.shape, mem=data(tname))))
        else:
            ctx.home[tname] = em.bind(out_name, "output", t.dtype, t.shape, mem=data(tname))
    return aliased


def _place_intermediate(ctx: Lowering, name: str, templates: set[Template], held: Buf | None = None) -> Buf:
    """The home of a tensor passed between groups: the chip's data memory (DDR, or the host's
    where it has one and every template touching it can reach it), or with local intermediates the
    chip's largest on-chip memory when every template touching it can reach it there and it
    takes at most half of that memory's free bytes, so the groups that run while it lives keep
    room for their tiles; at `held`'s address where that is its memory. A tensor that could have
    gone on chip but did not is noted."""
    em, nbytes = ctx.em, ctx.graph.tensors[name].nbytes

    def at(mem: str) -> int | None:
        return held.addr if held is not None and held.mem == mem else None

    if _local_intermediates(ctx) and _on_chip_ok(templates):
        mem = local_memory(ctx.chip)
        alloc = em.allocators[mem] if mem is not None else None
        if mem is not None and alloc and 2 * nbytes <= alloc.free_bytes() and alloc.fits([nbytes]):
            return em.alloc(mem, nbytes, name, at=at(mem))
        why = f"{mem} has {alloc.free_bytes()} bytes free" if alloc else "no on-chip memory every core reaches"
        em.notes.append(f"intermediate {name} ({nbytes} bytes) stays in ddr: {why}")
    mem = ctx.chip.data_memory if _on_chip_ok(templates) else "ddr"
    try:
        return em.alloc(mem, nbytes, name, at=at(mem))
    except OutOfMemoryError as exc:
        raise OutOfMemoryError(f"tensor {name} made by op {ctx.graph.producer[name].name}, passed between layer groups: {exc}") from None


def _local_intermediates(ctx: Lowering) -> bool:
    """Whether tensors passed between layer groups go on chip first: the policy's choice, or by
    default where the chip's data memory is the host's, across its link: the TPU v1's software
    reads a layer's input from the unified buffer that the previous layer's Activate wrote
    (UCSBarchlab/OpenTPU README.md @ 0cd15f59, boston.a @ 9855521c), its weight memory holding
    the weights only."""
    if ctx.policy.intermediates is None:
        return ctx.chip.memories[ctx.chip.data_memory].kind == "host"
    return ctx.policy.intermediates == "local"


def _copy_aliased_outputs(ctx: Lowering, aliased: Aliased) -> None:
    """An output that is also an input, a constant or another output is a copy from its home."""
    for out_name, tname, buf in aliased:
        t = ctx.graph.tensors[tname]
        staged_copy(ctx, f"output.{out_name}", ctx.home_region(tname), ctx.home[tname], buf.region(t.dtype, t.shape), buf)
