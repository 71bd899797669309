"""The software pipeline every tiled template emits through, how big its steps should be, and
how tiles are dealt among units (the engines of one core that run a tile, isa/lower/context.py).

With double buffering, tile i+1's loads are emitted before tile i's compute, into the other
buffer slot, so the DMA engine fetches ahead while the compute engine works; the emitter's
inferred waits keep each slot from being overwritten before its reader is done. A fused tail's
operand loads for tile i+1 (its fill) follow tile i's compute (`pipeline`).

With several units, each takes a run of consecutive tiles (`deal`) and pipelines them with its
own engines and slots; the units' stores into the group's outputs touch different bytes, so they
do not wait for one another (`run_units`, Emitter.disjoint). A tile that reduces over blocks (a
convolution's input channels) stays on one unit.
"""

from collections.abc import Callable, Sequence
from typing import TypeAlias, TypeVar

from ...costs import transfer_bandwidth, transfer_latency
from ..context import Lowering
from ..emit import Buf
from ..memory.route import route

Step: TypeAlias = Sequence[Callable[[], object]]  # (load, compute, store) and, where it has one, fill
T = TypeVar("T")


def pipeline(steps: Sequence[Step], double_buffer: bool) -> None:
    """steps: per step in order, its (load, compute, store) callables and, where it has loads
    that only the end of its compute reads (a fused tail's operands), a fourth: fill. With
    double buffering a step's fill is emitted after the step before has computed and before it
    stores: in a queue that also loads the step before's accumulator for its finish (an Ascend
    vector core's), that load comes first, so tiles' tails overlap instead of each waiting for
    the tail before it; in a queue of loads and stores alone (a Sophgo GDMA's) the order is the
    loads' own."""
    def fill(step: Step) -> None:
        for f in step[3:]:
            f()

    if double_buffer and steps:
        steps[0][0]()
        fill(steps[0])
    for i, step in enumerate(steps):
        load, compute, store = step[:3]
        if not double_buffer:
            load()
            fill(step)
        elif i + 1 < len(steps):
            steps[i + 1][0]()
        compute()
        if double_buffer and i + 1 < len(steps):
            fill(steps[i + 1])
        store()


def deal(items: Sequence[T], n: int) -> list[list[T]]:
    """items cut into n runs of consecutive ones, as equal as can be (the first runs one longer)."""
    size, extra = divmod(len(items), n)
    runs: list[list[T]] = []
    start = 0
    for k in range(n):
        end = start + size + (k < extra)
        runs.append(list(items[start:end]))
        start = end
    return runs


def run_units(ctx: Lowering, outputs: Sequence[Buf], per_unit: Sequence[Sequence[Step]]) -> None:
    """Pipeline each unit's steps; their writes to `outputs` (Bufs of the group's stored tensors
    where they live) are disjoint between units."""
    busy = [steps for steps in per_unit if steps]
    if len(busy) == 1:
        pipeline(busy[0], ctx.policy.double_buffer)
        return
    with ctx.em.disjoint(outputs):
        for steps in busy:
            pipeline(steps, ctx.policy.double_buffer)


def step_budget(ctx: Lowering, total_bytes: float, dst_mem: str, units: int = 1) -> float | None:
    """Most bytes one pipeline step should load, or None for no limit.

    Without double buffering on one unit there is nothing to overlap: no limit. With it, the
    policy's pipeline_steps share total_bytes, and with several units each unit's share of it;
    but a step is never smaller than least_step.
    """
    if not ctx.policy.double_buffer and units == 1:
        return None
    steps = max(ctx.policy.pipeline_steps, 1) if ctx.policy.double_buffer else 1
    return max(total_bytes / (steps * units), least_step(ctx, "ddr", dst_mem))


def least_step(ctx: Lowering, src_mem: str, dst_mem: str) -> float:
    """The bytes the first DMA hop from src_mem to dst_mem moves during its own fixed latency,
    at its uncontended bandwidth (isa/costs.py): below that, latency dominates a transfer."""
    engine, src, dst = route(ctx.chip, src_mem, dst_mem)[0]
    e, mems = ctx.chip.engines[engine], ctx.chip.memories
    return transfer_latency(e, mems, (src, dst)) * transfer_bandwidth(e, mems, (src, dst))
