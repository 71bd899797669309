"""The templates: one Template each, carrying its lowering, where the tensors it reads and writes
may live, its part in fusion and, for those a multi-layer group runs slice by slice, how. Every
question the passes ask of a template is an attribute here. An op names its template
(`OpDef.template`, or a variant's own: `OpDef.template_for`, as a depthwise convolution does):
isa.ops sits below the compiler, which imports it, so `template_of` turns that name into the
Template once per node, when layer groups form."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...ops import REGISTRY
from .arrange import lower_arrange
from .attention import lower_attention
from .cache import lower_cache
from .conv import conv_node_axes, lower_conv, plan_conv
from .depthwise import lower_depthwise, plan_depthwise
from .indexed import lower_indexed
from .local import lower_elementwise
from .msd import lower_product
from .place import lower_constant, lower_in_place, lower_view
from .pool import lower_pool, plan_pool, pool_axes
from .reduce import lower_reduce
from .resize import lower_resize
from .scalar import lower_scalar

if TYPE_CHECKING:
    from ...graph import Graph
    from ..schedule.fusion import Group


@dataclass(frozen=True)
class Slicing:
    """How a group of this template runs over slices of its output rows in a multi-layer group
    (isa/lower/schedule/chain.py)."""

    plan: Callable  # (Lowering, Group) -> its plan, run over rows (plan.run(rows))
    axes: Callable  # (Graph, node) -> the window axes of the group's first op
    sliceable: Callable  # (Graph, Group) -> whether its rows can be run apart and priced


@dataclass(frozen=True, eq=False)
class Template:
    name: str
    lower: Callable  # (Lowering, Group) -> None: emits the group's instructions
    homes: str = "any"  # where the tensors it reads and writes may live: "any" memory (it moves them by route/copy) or "ddr" only
    head: bool = False  # an element-wise tail can finish its output tile in local memory (schedule/fusion.py)
    tail: bool = False  # it can join a head's group as such a tail
    places_outputs: bool = False  # it places its own outputs (place.py): lower() leaves them unplaced
    slicing: Slicing | None = None  # how a multi-layer group slices it; None: it ends such groups


def _four_d(graph: Graph, group: Group) -> bool:
    return len(graph.tensors[group.nodes[0].outputs[0]].shape) == 4


def _conv_sliceable(graph: Graph, group: Group) -> bool:
    """A 2-d convolution, not transposed (on the matrix unit, or depthwise on the vector unit)."""
    return _four_d(graph, group) and not REGISTRY[group.nodes[0].op].transposed


def _pool_sliceable(graph: Graph, group: Group) -> bool:
    """A 2-d max pooling whose window is shorter than its input (not global)."""
    head = group.nodes[0]
    p = head.params
    return _four_d(graph, group) and p["method"] == "MAX" and p["kernel"][0] < graph.tensors[head.inputs[0]].shape[2]


CONV = Template("conv", lower_conv, head=True, slicing=Slicing(plan_conv, conv_node_axes, _conv_sliceable))
DEPTHWISE = Template("depthwise", lower_depthwise, head=True, slicing=Slicing(plan_depthwise, conv_node_axes, _conv_sliceable))
POOL = Template("pool", lower_pool, head=True, slicing=Slicing(plan_pool, pool_axes, _pool_sliceable))
ELEMENTWISE = Template("elementwise", lower_elementwise, head=True, tail=True)
VIEW = Template("view", lower_view, places_outputs=True)
IN_PLACE = Template("in place", lower_in_place, places_outputs=True)
READ_THROUGH = Template("read through", lower_view, places_outputs=True)  # its output: its input's buffer, read through strides
TEMPLATES = {t.name: t for t in (
    CONV, DEPTHWISE, POOL, ELEMENTWISE, VIEW,
    Template("matmul", lower_product), Template("reduce", lower_reduce), Template("resize", lower_resize),
    Template("arrange", lower_arrange), Template("constant", lower_constant, places_outputs=True),
    Template("attention", lower_attention),  # fused attention: the scores stay on chip
    Template("cache", lower_cache, places_outputs=True),  # graph state: reads in place, appends by DMA
    Template("scalar", lower_scalar, homes="ddr"),  # the scalar engine's kernels read and write DDR
    Template("indexed", lower_indexed, homes="ddr"),  # a gather or scatter indexes a table in DDR
)}


def template_of(op: str, params: dict | None = None) -> Template:
    """The Template that lowers op `op` (every registered op names one: tests/test_templates.py),
    or an instance of it with these params (a variant may have its own: OpDef.template_for)."""
    opdef = REGISTRY[op]
    return TEMPLATES[opdef.template if params is None else opdef.template_for(params)]
