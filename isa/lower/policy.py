"""Policy: the placement knobs a lowering obeys. Each one changes the lowered program."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Policy:
    fuse: bool = True  # chain local ops into layer groups whose intermediates stay on chip
    double_buffer: bool = True  # two buffer slots per tile: the next load overlaps this compute
    # With double buffering, cut work that would fit in one tile into at least this many, so
    # loads overlap compute; a tile never shrinks below what the DMA moves in its own latency.
    pipeline_steps: int = 4
