"""Every lowering template as one object, by the name an op gives (isa.ops: `template`): how it
lowers a layer group, where the tensors it reads and writes may live, whether an element-wise
tail may join a group it leads, and how a multi-layer group runs it row slice by row slice."""

from collections.abc import Callable
from dataclasses import dataclass

from .arrange import lower_arrange
from .conv import conv_node_axes, conv_rows_apart, lower_conv, plan_conv
from .indexed import lower_indexed
from .local import lower_elementwise
from .matmul import lower_matmul
from .place import lower_constant, lower_view
from .pool import lower_pool, plan_pool, pool_axes, pool_rows_apart
from .reduce import lower_reduce
from .resize import lower_resize
from .scalar import lower_scalar


@dataclass(frozen=True)
class Rows:
    """How a layer group of several windowed ops (isa/lower/schedule/chain.py) runs one of them
    over a run of its output's rows."""

    plan: Callable  # (Lowering, Group) -> its plan, run over rows (plan.run(rows))
    axes: Callable  # (Graph, its head node) -> its window axes
    apart: Callable  # (Graph, Group) -> whether its 2-d output's rows can be run apart and priced


@dataclass(frozen=True)
class Template:
    name: str
    lower: Callable  # (Lowering, Group) -> None: emits the group's instructions
    homes: str = "any"  # where the tensors it reads and writes may live: "any" memory (it moves them by route/copy) or "ddr" only
    head: bool = False  # an element-wise tail may join a group it leads: it finishes its output tile in local memory
    rows: Rows | None = None  # how a multi-layer group slices it by rows; None: it does not


TEMPLATES = {t.name: t for t in (
    Template("arrange", lower_arrange),
    Template("elementwise", lower_elementwise, head=True),
    Template("matmul", lower_matmul),
    Template("conv", lower_conv, head=True, rows=Rows(plan_conv, conv_node_axes, conv_rows_apart)),
    Template("pool", lower_pool, head=True, rows=Rows(plan_pool, pool_axes, pool_rows_apart)),
    Template("reduce", lower_reduce),
    Template("resize", lower_resize),
    Template("view", lower_view),
    Template("constant", lower_constant),
    Template("scalar", lower_scalar, homes="ddr"),  # the scalar engine's kernels read and write DDR
    Template("indexed", lower_indexed, homes="ddr"),  # a gather or scatter indexes a table in DDR
)}
