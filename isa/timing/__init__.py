"""The machine's model of time, shared by the simulator and the compiler.

`price` turns an instruction into a `Step` (its cycles, or a transfer's latency and bytes) with
isa/costs.py's formulas; `Timeline` runs per-engine streams of Steps as SimPy processes, with
the waits between engines, DMA transfers in flight, the bandwidth overlapping transfers share
(`Arbiter`) and the cache of ddr (`Cache`). The machine (sim/machine.py) runs a program's
instructions on it and watches (`Observer`) to compute values and record the trace; the
lowering's estimate (isa/lower/schedule/estimate.py) runs a candidate tiling's instructions on it to
choose between tilings. One timing rule, one place.
"""

from .bandwidth import Arbiter
from .cache import Cache, touched_lines
from .core import Observer, Timeline
from .price import Step, bytes_moved, dma_cycles, dma_latency, matrix_cycles, price, vector_cycles, vector_dtype, vector_elements

__all__ = [
    "Arbiter", "Cache", "Observer", "Step", "Timeline", "bytes_moved", "dma_cycles", "dma_latency", "matrix_cycles", "price",
    "touched_lines", "vector_cycles", "vector_dtype", "vector_elements",
]
