"""Grouping nodes: a chain of local ops becomes one layer group whose intermediates stay on
chip (at most the policy's max_group ops); every other node is a group of its own. Nodes
nothing uses are dropped."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...ops import REGISTRY
from ..check import kind
from ..templates.catalog import Template, template_of

if TYPE_CHECKING:
    from chips.schema import Chip

    from ...graph import Graph, Node
    from ..policy import Policy


@dataclass
class Group:
    nodes: list[Node]
    template: Template
    loads: list[str] = field(default_factory=list)  # tensors read from their homes (made outside the group)
    stores: list[str] = field(default_factory=list)  # tensors written to their homes (needed outside it)


def live_nodes(graph: Graph) -> list[Node]:
    """Nodes whose outputs reach a graph output or a kept tensor (a state's update), in graph order."""
    needed = graph.results()
    keep = []
    for node in reversed(graph.nodes):
        if needed.intersection(node.outputs):
            keep.append(node)
            needed.update(node.inputs)
    return keep[::-1]


def groups(graph: Graph, chip: Chip, policy: Policy) -> list[Group]:
    """The live nodes in groups, in graph order (the module docstring), each with what it loads and stores."""
    nodes = live_nodes(graph)
    result: list[Group] = []
    for node in nodes:
        template = template_of(node.op, node.params)
        cur = result[-1] if result else None
        room = cur is not None and (policy.max_group is None or len(cur.nodes) < policy.max_group)
        if cur is not None and policy.fuse and room and _fusable(graph, chip, cur, node, template):
            cur.nodes.append(node)
        else:
            result.append(Group([node], template))
    users: dict[str, set[int]] = {}
    for node in nodes:
        for t in node.inputs:
            users.setdefault(t, set()).add(id(node))
    outputs = set(graph.outputs.values())
    for g in result:
        produced = {t for n in g.nodes for t in n.outputs}
        members = {id(n) for n in g.nodes}
        g.loads = list(dict.fromkeys(t for n in g.nodes for t in n.inputs if t not in produced))
        g.stores = [t for n in g.nodes for t in n.outputs if t in outputs or users.get(t, set()) - members]
    return result


def _fusable(graph: Graph, chip: Chip, group: Group, node: Node, template: Template) -> bool:
    """An element-wise op (a tail template) joins a group led by a local op of a head template when it has
    the group's output shape and is fed by the group with whole tiles (not as a lookup table or
    a per-channel vector). A stride op reads DDR with strides, so it starts a group instead."""
    opdef = REGISTRY[node.op]
    if not template.tail or not group.template.head or opdef.strided:
        return False
    if kind(graph, chip, node) != "local" or kind(graph, chip, group.nodes[0]) != "local":
        return False
    shape = graph.tensors[group.nodes[0].outputs[0]].shape
    if graph.tensors[node.outputs[0]].shape != shape:
        return False
    produced = {t for n in group.nodes for t in n.outputs}
    shapes = [graph.tensors[t].shape for t in node.inputs]
    fed = [i for i, t in enumerate(node.inputs) if t in produced]
    return bool(fed) and all(i not in opdef.table_inputs and opdef.operand_shape(i, shapes) == shape for i in fed)
