"""What every lowering template works with: the graph, the chip, the policy, the emitter and
the home of each tensor that crosses a group boundary: the Buf it lives in for its lifetime, in
DDR or, as the policy places it, in on-chip memory. Templates move a tensor to and from its
home through route/copy, whichever memory that is."""

from dataclasses import dataclass, field

from ..errors import UnsupportedError
from .check import support_row
from .tiling import dim_names


@dataclass
class Lowering:
    graph: object
    chip: object
    policy: object
    em: object  # Emitter
    home: dict  # tensor name -> Buf it lives in (DDR or on-chip)
    bound: set = field(default_factory=set)  # tensors whose home lasts the whole program (bindings)

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

    def home_region(self, name):
        """The whole of tensor `name`, dense, where it lives."""
        t = self.graph.tensors[name]
        return self.home[name].region(t.dtype, t.shape)

    def compute_map(self, node):
        return support_row(self.chip, node).compute

    def tile_limits(self, shape, names=None):
        """The policy's largest tile extent for each dimension of `shape`, named by `names`
        (default: an output's, isa/lower/tiling.dim_names)."""
        names = dim_names(len(shape)) if names is None else names
        return tuple(self.policy.tile_limit(d, n) for d, n in zip(names, shape))


def local_memory(chip):
    """The on-chip memory pinned constants and local intermediates live in: the largest (the
    first listed of equal ones)."""
    local = [m for m in chip.memories.values() if m.kind == "local"]
    if not local:
        raise UnsupportedError(f"chip {chip.name} has no on-chip memory to place tensors in")
    return max(local, key=lambda m: m.capacity).name
