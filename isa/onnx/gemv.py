"""The transposed_gemv import pass: a matrix-vector product against a transposed operand, as a
decoder's attention scores are exported for one new token (q (..., 1, K) @ Transpose(keys)
(..., K, N), the keys (..., N, K) a cache), is computed as keys @ q^T (..., N, 1) and reshaped to
(..., 1, N): q^T and the reshape move a 1-long axis (views), so the keys are read as they lie and
never permuted (a DDR-to-DDR copy element by element). A compiler does the same when it has the
product read the transposed operand; the result is the same numbers.

Rewritten when the Transpose swaps the last two axes only, its result is read by this MatMul alone,
and shape inference gives the left operand's rows as 1 and the output's shape in full."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from onnx import helper, numpy_helper

from .builder import node_attr
from .inference import static_shapes

if TYPE_CHECKING:
    from collections.abc import Sequence

    from onnx import NodeProto

    from .importer import Source
    from .passes import Graph


def rewrite(source: Source, g: Graph) -> str:
    """Rewrite every such MatMul in g (a passes.Graph of source); what changed, for the note."""
    shapes = static_shapes(source)[0]
    done = 0
    for node in list(g.nodes):
        if node.op_type != "MatMul" or not g.alive(node) or node.domain not in ("", "ai.onnx"):
            continue
        left, right = node.input
        transpose = g.producer.get(right)
        if transpose is None or transpose.op_type != "Transpose" or not g.private(right):
            continue
        a, y = shapes.get(left), shapes.get(node.output[0])
        if a is None or y is None:
            continue
        perm = node_attr(transpose, "perm")
        rank = len(a)
        if rank < 2 or a[-2] != 1 or perm is None or list(perm) != [*range(rank - 2), rank - 1, rank - 2]:
            continue
        name = node.name or node.output[0]
        column = (*a[:-2], a[-1], 1)
        made = [
            _shape_constant(f"{name}.gemv_column_shape", column),
            helper.make_node("Reshape", [left, f"{name}.gemv_column_shape"], [f"{name}.gemv_column"], name=f"{name}.gemv_column"),
            helper.make_node("MatMul", [transpose.input[0], f"{name}.gemv_column"], [f"{name}.gemv"], name=f"{name}.gemv"),
            _shape_constant(f"{name}.gemv_row_shape", y),
            helper.make_node("Reshape", [f"{name}.gemv", f"{name}.gemv_row_shape"], list(node.output), name=name),
        ]
        g.replace([transpose, node], made)
        done += 1
    g.commit()
    return f"{done} product(s) of a row and a transposed operand read the operand as it lies" if done else "nothing to rewrite"


def _shape_constant(name: str, shape: Sequence[int]) -> NodeProto:
    return helper.make_node("Constant", [], [name], name=name, value=numpy_helper.from_array(np.array(shape, np.int64), name))
