"""Evaluate a graph with each op's numpy reference: what the machine's outputs must equal."""

from isa.ops import REGISTRY


def evaluate(graph, inputs, chip):
    values = dict(inputs)
    values.update(graph.constants)
    for node in graph.nodes:
        opdef = REGISTRY[node.op]
        row = chip.support(opdef.support_key(node.params))
        outs = opdef.reference([values[t] for t in node.inputs], node.params, row.compute)
        values.update(zip(node.outputs, outs))
    return {name: values[t] for name, t in graph.outputs.items()}
