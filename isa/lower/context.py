"""What every lowering template works with: the graph, the chip, the policy, the emitter and
the DDR placement of the tensors that cross group boundaries."""

from dataclasses import dataclass, field

from ..errors import UnsupportedError
from ..instructions import dense
from .check import support_row


@dataclass
class Lowering:
    graph: object
    chip: object
    policy: object
    em: object  # Emitter
    ddr: dict  # tensor name -> Buf in DDR
    pinned: set = field(default_factory=set)  # tensors whose DDR place lasts the whole program (bindings)

    @property
    def slots(self):
        return 2 if self.policy.double_buffer else 1

    def engine(self, kind):
        engines = self.chip.engines_of(kind)
        if not engines:
            raise UnsupportedError(f"chip {self.chip.name} has no {kind} engine")
        return engines[0]

    def tensor(self, name):
        return self.graph.tensors[name]

    def ddr_region(self, name):
        t = self.graph.tensors[name]
        return dense("ddr", self.ddr[name].addr, t.dtype, t.shape)

    def compute_map(self, node):
        return support_row(self.chip, node).compute
