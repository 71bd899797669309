"""ONNX import: `isa.from_onnx(model_or_path) -> isa.Graph`.

The importer (importer.py) loads the model with its external data, checks its opset and that
every op is mapped, runs ONNX shape inference and maps node by node through the table in
registry.py, filled by one small module per op family: elementwise.py (arithmetic, compare,
logic, bitwise, activations, Cast, Where, Clip), conv.py (Conv, ConvTranspose, ConvInteger,
QLinearConv, pooling), matmul.py (MatMul, Gemm, MatMulInteger, QLinearMatMul), quant.py
(QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear), shape.py (Reshape ... Pad,
SpaceToDepth, DepthToSpace), reduce.py (Reduce*, ArgMax, ArgMin, TopK, Softmax and the
normalizations), index.py (Gather*, Scatter*, OneHot, Trilu, CumSum, Compress), resize.py
(Resize, Upsample) and generate.py (Constant, ConstantOfShape, Range, EyeLike, Random*).
"""

from .builder import tensor_name
from .importer import MIN_OPSET, from_onnx, load, max_opset, static_inputs, unsupported_ops
from .registry import OPS

__all__ = ["MIN_OPSET", "OPS", "from_onnx", "load", "max_opset", "static_inputs", "tensor_name", "unsupported_ops"]
