"""ONNX import: `isa.from_onnx(model_or_path) -> OnnxGraph` (an isa.Graph that specialises
itself from its feeds: model.py), and `isa.onnx.backend`, an onnx.backend.base.Backend.

The importer (importer.py) reads the model with its weights located, not loaded (store.py),
checks its opset, runs the import passes (passes.py: constants, bn_fold.py, activations.py,
identities), checks that every op is mapped, runs ONNX shape inference and maps node by node
through the table in registry.py, filled by one small module per op family: elementwise.py
(arithmetic, compare, logic, bitwise, activations, Cast, Where, Clip), conv.py (Conv,
ConvTranspose, ConvInteger, QLinearConv, pooling), matmul.py (MatMul, Gemm, MatMulInteger,
QLinearMatMul), quant.py (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear), shape.py
(Reshape ... Pad, SpaceToDepth, DepthToSpace), reduce.py (Reduce*, ArgMax, ArgMin, TopK, Softmax
and the normalizations), index.py (Gather*, Scatter*, OneHot, Trilu, CumSum, Compress),
resize.py (Resize, Upsample) and generate.py (Constant, ConstantOfShape, Range, EyeLike, Random*).
"""

from .builder import tensor_name
from .importer import MIN_OPSET, load, max_opset, static_inputs, unsupported_ops
from .model import Bound, OnnxGraph, from_onnx
from .passes import PASSES
from .registry import OPS

__all__ = ["MIN_OPSET", "OPS", "PASSES", "Bound", "OnnxGraph", "from_onnx", "load", "max_opset", "static_inputs", "tensor_name",
           "unsupported_ops"]
