"""The software pipeline every tiled template emits through, and how big its steps should be.

With double buffering, tile i+1's loads are emitted before tile i's compute, into the other
buffer slot, so the DMA engine fetches ahead while the compute engine works; the emitter's
inferred waits keep each slot from being overwritten before its reader is done.
"""

from .route import route


def pipeline(steps, double_buffer):
    """steps: (load, compute, store) callables per tile, in order."""
    if double_buffer and steps:
        steps[0][0]()
    for i, (load, compute, store) in enumerate(steps):
        if not double_buffer:
            load()
        elif i + 1 < len(steps):
            steps[i + 1][0]()
        compute()
        store()


def step_budget(ctx, total_bytes, dst_mem):
    """Most bytes one pipeline step should load, or None for no limit.

    Without double buffering there is nothing to overlap: no limit. With it, the policy's
    pipeline_steps share total_bytes, but a step is never smaller than the bytes the first
    DMA hop moves during its own fixed latency (below that, latency dominates the transfer).
    """
    if not ctx.policy.double_buffer:
        return None
    engine, src, dst = route(ctx.chip, "ddr", dst_mem)[0]
    chip = ctx.chip
    mems = chip.memories
    e = chip.engines[engine]
    latency = e.latency + mems[src].latency + mems[dst].latency
    bandwidth = min(e.bandwidth, mems[src].bandwidth, mems[dst].bandwidth)
    return max(total_bytes / max(ctx.policy.pipeline_steps, 1), latency * bandwidth)
