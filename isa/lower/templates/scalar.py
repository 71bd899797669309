"""The scalar template: a global op a tensor unit cannot run (sort, nms, where, a user's op) is
one kernel call on the chip's scalar engine, reading and writing the op's tensors in DDR.

The op names its kernel and arguments (`OpDef.kernel(ins, params) -> (fn, args)`); outputs
nothing reads still get a DDR scratch buffer, since the kernel writes every result."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ...instructions import Scalar
from ...ops import REGISTRY

if TYPE_CHECKING:
    from ..context import Lowering
    from ..schedule.fusion import Group


def lower_scalar(ctx: Lowering, group: Group) -> None:
    node = group.nodes[0]
    g, em = ctx.graph, ctx.em
    engine = ctx.engine("scalar")
    fn, args = REGISTRY[node.op].kernel([g.tensors[t] for t in node.inputs], node.params)
    scratch = [t for t in node.outputs if t not in ctx.home]
    for t in scratch:
        ctx.home[t] = em.alloc("ddr", g.tensors[t].nbytes, f"{node.name}/{t}")
    instr = Scalar(fn, tuple(ctx.home_region(t) for t in node.outputs), tuple(ctx.home_region(t) for t in node.inputs),
                   tuple(sorted(args.items())), node.name)
    em.emit(engine.name, instr, reads=[ctx.home[t] for t in node.inputs], writes=[ctx.home[t] for t in node.outputs])
    for t in scratch:
        em.release(ctx.home.pop(t))
