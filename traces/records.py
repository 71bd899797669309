"""The trace records: plain data that `sim` fills and the writers, summaries and plots read.

Times are in cycles of the chip clock (`Trace.clock_hz` turns them into seconds).
"""

from dataclasses import dataclass, field
from typing import NamedTuple


class Event(NamedTuple):
    """One instruction's execution on one engine."""

    engine: str  # engine name, as in the chip YAML
    index: int  # position of the instruction in its engine's stream
    kind: str  # "dma", "vector", "matrix" or "wait" (a wait that blocked)
    name: str  # what it did: "dma", "matmul", a vector function ("add", "relu", ...), "wait"
    op: str  # the graph op it belongs to ("" when none)
    start: float  # cycle it started
    end: float  # cycle it finished
    bytes: int  # bytes moved (dma) or written (compute)
    src: str  # memory read from ("" for waits)
    dst: str  # memory written ("" for waits)
    note: str = ""  # what else the run learned: the shape a data-dependent op produced


@dataclass
class Trace:
    """Everything a run recorded: enough to rebuild the summary, the plots and the Chrome trace."""

    chip: str
    clock_hz: float
    engines: tuple  # engine names in chip order
    memories: dict  # memory name -> capacity in bytes
    cycles: int = 0  # total cycles of the run
    events: list = field(default_factory=list)  # Event, in order of completion
    # Step counters, each a list of (cycle, value) points where the value changes:
    #   "memory.<name>"  bytes occupied in that memory
    #   "ddr.read", "ddr.write"  DDR bandwidth in bytes per cycle
    counters: dict = field(default_factory=dict)

    def seconds(self, cycles):
        return cycles / self.clock_hz
