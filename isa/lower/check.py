"""Is every op of the graph supported by the chip, for its dtypes? (the seed's per-chip lines)"""

from ..errors import UnsupportedError
from ..ops import REGISTRY


def support_row(chip, node):
    """The chip's op-table row for node, or an error naming the op and the chip."""
    key = REGISTRY[node.op].support_key(node.params)
    row = chip.support(key)
    if row is None:
        raise UnsupportedError(f"op {node.name}: {key} is not supported on chip {chip.name}")
    return row


def kind(chip, node):
    """"local" or "global": the chip's table may override the seed's class."""
    return support_row(chip, node).kind or REGISTRY[node.op].kind


def check_graph(graph, chip):
    for node in graph.nodes:
        row = support_row(chip, node)
        ins = [graph.tensors[t].dtype for t in node.inputs]
        outs = [graph.tensors[t].dtype for t in node.outputs]
        if len(set(ins + outs)) == 1:
            if row.dtypes is None or ins[0] in row.dtypes:
                continue
        elif _within(ins, row.mixed_in) and _within(outs, row.mixed_out):
            continue
        key = REGISTRY[node.op].support_key(node.params)
        allowed = "any dtype" if row.dtypes is None else ", ".join(sorted(row.dtypes)) or "none"
        mixed = f"; mixed: inputs {', '.join(sorted(row.mixed_in))} -> outputs {', '.join(sorted(row.mixed_out))}" if row.mixed_in else "; no mixed dtypes"
        raise UnsupportedError(
            f"op {node.name}: {key} with {' x '.join(ins)} -> {', '.join(outs)} is not supported on chip {chip.name} "
            f"(same-dtype: {allowed}{mixed})"
        )


def _within(values, allowed):
    return allowed is None or all(v in allowed for v in values)
