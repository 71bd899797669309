"""Static shapes for the import passes: ONNX shape inference on a copy of the source model, with
its small constants as initializers (a Reshape's shape is then known) and its other weights
declared as typed inputs, so that no weight's bytes are copied. Inference lists no initializer
among its values, so the weights' own shapes are taken from the store (a prefill's small mask is
one). A weight-only product (a MatMulNBits, or the weight_only pass's WeightOnlyMatMul), whose
op ONNX has no schema for, is inferred as the MatMul of A by a [K, N] weight it stands for, so
that the shapes after it are known too (the attention pass reads them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import onnx
from onnx import helper

if TYPE_CHECKING:
    from .importer import Source


def static_shapes(source: Source) -> tuple[dict[str, tuple[int, ...]], dict[str, int]]:
    """(value name -> static shape, value name -> ONNX element type) of every value whose every
    dimension inference fixes; both empty where inference fails."""
    model = onnx.ModelProto()
    model.CopyFrom(source.model)
    weights, declared = source.weights, {i.name for i in model.graph.input}
    for name in weights.names():
        if weights.small(name):
            model.graph.initializer.append(weights.proto(name))
        elif name not in declared:
            shape, elem = weights.type(name)
            model.graph.input.append(helper.make_tensor_value_info(name, elem, shape))
    for i, node in enumerate(model.graph.node):
        kn = _product_dims(node, source)
        if kn is not None:
            stand_in = f"{node.output[0]}.weight_dims"
            model.graph.input.append(helper.make_tensor_value_info(stand_in, onnx.TensorProto.FLOAT16, kn))
            model.graph.node[i].CopyFrom(helper.make_node("MatMul", [node.input[0], stand_in], [node.output[0]], name=node.name))
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - onnx's InferenceError: the pass finds nothing to do
        return {}, {}
    shapes, elems = {}, {}
    for name in weights.names():
        shapes[name], elems[name] = weights.type(name)
    for v in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        tt = v.type.tensor_type
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            shapes[v.name] = tuple(d.dim_value for d in tt.shape.dim)
            elems[v.name] = tt.elem_type
    return shapes, elems


def _product_dims(node: onnx.NodeProto, source: Source) -> tuple[int, int] | None:
    """(K, N) of a weight-only product's weight, or None for another node."""
    from ..ops.weight_only import PER_BYTE
    from .builder import node_attr
    from .registry import op_key
    from .weight_only import A16, NBITS

    key = op_key(node)
    if key == NBITS:
        return int(node_attr(node, "K")), int(node_attr(node, "N"))
    if key == A16 and node.input[1] in source.weights:
        rows, n = source.weights.type(node.input[1])[0]
        return rows * PER_BYTE[int(node_attr(node, "bits"))], n
    return None
