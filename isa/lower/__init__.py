"""Graph -> Program: a sequence of small passes over plain data.

1. check    every op is supported by the chip for its dtypes (isa/lower/check.py)
2. group    chains of local ops fuse into layer groups (isa/lower/fusion.py)
3. place    graph inputs, constants and outputs get DDR addresses for the whole run;
            tensors passed between groups live in DDR from their producer to their last user
4. emit     each group's template tiles it and emits instructions (local.py, matmul.py),
            the emitter inferring the sync between engines (emit.py)
"""

from .arrange import lower_arrange
from .check import check_graph
from .conv import lower_conv
from .context import Lowering
from .emit import Emitter
from .fusion import groups as make_groups
from .indexed import lower_indexed
from .local import lower_elementwise
from .matmul import lower_matmul
from .pool import lower_pool
from .policy import Policy
from .reduce import lower_reduce
from .resize import lower_resize
from .place import PLACES_OWN_OUTPUTS, lower_constant, lower_view
from .scalar import lower_scalar
from .route import copy

TEMPLATES = {"arrange": lower_arrange, "indexed": lower_indexed, "elementwise": lower_elementwise, "matmul": lower_matmul, "conv": lower_conv, "pool": lower_pool, "reduce": lower_reduce, "resize": lower_resize,
             "scalar": lower_scalar, "view": lower_view, "constant": lower_constant}

__all__ = ["Policy", "lower", "TEMPLATES"]


def lower(graph, chip, policy=None):
    policy = policy or Policy()
    check_graph(graph, chip)
    groups = make_groups(graph, chip, policy)
    em = Emitter(chip, graph.name)
    ctx = Lowering(graph, chip, policy, em, {})
    aliased = _bind(ctx)
    ctx.pinned.update(ctx.ddr)
    shares = _shared_buffers(ctx, groups)
    last_use = {}
    for i, g in enumerate(groups):
        for t in g.loads:
            last_use[shares.get(t, t)] = i
    for i, g in enumerate(groups):
        for t in g.stores:
            if t not in ctx.ddr and g.template not in PLACES_OWN_OUTPUTS:
                ctx.ddr[t] = em.alloc("ddr", graph.tensors[t].nbytes, t)
        TEMPLATES[g.template](ctx, g)
        for t in dict.fromkeys(shares.get(t, t) for t in g.loads):
            if last_use[t] == i and t not in ctx.pinned:
                em.release(ctx.ddr[t])
    _copy_aliased_outputs(ctx, aliased)
    return em.program()


def _shared_buffers(ctx, groups):
    """tensor -> the tensor whose DDR buffer it shares (a view of it not bound to an output)."""
    shares = {}
    for g in groups:
        if g.template == "view" and g.nodes[0].outputs[0] not in ctx.ddr:
            src = g.nodes[0].inputs[0]
            shares[g.nodes[0].outputs[0]] = shares.get(src, src)
    return shares


def _bind(ctx):
    """Inputs, constants and outputs get their DDR places first, in that order. Returns the
    outputs that alias a tensor placed already, as (output name, tensor name, Buf)."""
    g, em = ctx.graph, ctx.em
    for name in g.inputs:
        t = g.tensors[name]
        ctx.ddr[name] = em.bind(name, "input", t.dtype, t.shape)
    for name, array in g.constants.items():
        ctx.ddr[name] = em.bind(name, "const", g.tensors[name].dtype, array.shape, array.tobytes())
    aliased = []
    for out_name, tname in g.outputs.items():
        t = g.tensors[tname]
        if tname in ctx.ddr:  # an input, a constant or a tensor already output under another name
            aliased.append((out_name, tname, em.bind(out_name, "output", t.dtype, t.shape)))
        else:
            ctx.ddr[tname] = em.bind(out_name, "output", t.dtype, t.shape)
    return aliased


def _copy_aliased_outputs(ctx, aliased):
    """An output that is also an input, a constant or another output is a DDR-to-DDR copy."""
    for out_name, tname, buf in aliased:
        t = ctx.graph.tensors[tname]
        copy(ctx.em, ctx.ddr_region(tname), ctx.ddr[tname], buf.region(t.dtype, t.shape), buf, f"output {out_name}")
