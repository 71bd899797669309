"""Static shapes for the import passes: ONNX shape inference on a copy of the source model, with
its small constants as initializers (a Reshape's shape is then known) and its other weights
declared as typed inputs, so that no weight's bytes are copied. Inference lists no initializer
among its values, so the weights' own shapes are taken from the store (a prefill's small mask is
one)."""

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
