"""The weight_only import pass (isa/onnx/weight_only.py): an exported weight-only quantized product,
DequantizeLinear of a constant int8 or int4 weight feeding a MatMul, imports as one matrix_mul_a16
and computes what onnxruntime computes; a pattern the op does not take imports as before."""

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import chips
import isa
import sim

K, N = 256, 96
ELEM = {"float16": TensorProto.FLOAT16, "float32": TensorProto.FLOAT}


def qdq_model(kind="int8", block=0, zero=False, dtype="float16", axis=None, rows=3):
    """x (1, rows, K) @ DequantizeLinear(w [K, N] of `kind`, scales per column or per block of
    `block` rows of K, or with axis 0 per row, optional zero points), opset 21."""
    rng = np.random.default_rng(0)
    low, high = {"int8": (-127, 128), "int4": (-8, 8), "uint4": (0, 16), "uint8": (0, 256)}[kind]
    store = {"int8": np.int8, "int4": ml_dtypes.int4, "uint4": ml_dtypes.uint4, "uint8": np.uint8}[kind]
    q = rng.integers(low, high, (K, N)).astype(store)
    shape = (K // block, N) if block else (K,) if axis == 0 else (N,)
    inits = [numpy_helper.from_array(q, "wq"), numpy_helper.from_array((rng.random(shape) * 0.02 + 1e-3).astype(dtype), "s")]
    if zero:
        inits.append(numpy_helper.from_array(rng.integers(max(low, -3), min(high, 3), shape).astype(store), "z"))
    attrs = {"axis": 0, "block_size": block} if block else {"axis": 1 if axis is None else axis}
    nodes = [helper.make_node("DequantizeLinear", [i.name for i in inits], ["w"], **attrs), helper.make_node("MatMul", ["x", "w"], ["y"])]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", ELEM[dtype], [1, rows, K])],
                              [helper.make_tensor_value_info("y", ELEM[dtype], [1, rows, N])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("chip", ["bm1686", "ascend910b"])
@pytest.mark.parametrize("kind, block, zero, bits, group", [
    ("int8", 0, False, 8, K),       # per column
    ("int8", 64, True, 8, 64),      # blocked, zero points drawn in -3..2: not all zero, so not taken
    ("int4", 128, True, 4, 128),    # blocked with zero points
    ("int4", 0, False, 4, K),       # per column, no zero point: codes q + 8, zero term -8 x scale
    ("uint4", 64, True, 4, 64),
])
def test_a_dequantized_weight_times_x_imports_as_matrix_mul_a16(chip, kind, block, zero, bits, group):
    """The product of the op's stored codes on chip against onnxruntime's float16 product of the
    dequantized weight: within float16 precision of sums of 256 terms (onnxruntime rounds its
    dequantized weight and its products' sums to float16)."""
    model = qdq_model(kind, block, zero)
    g = isa.from_onnx(model)
    products = [n for n in g.nodes if n.op == "matrix_mul_a16"]
    if kind == "int8" and zero:  # non-zero int8 zero points: the op's 8-bit weights are symmetric
        assert not products and "onnx pass weight_only: nothing to rewrite" in g.notes
        return
    assert len(products) == 1 and products[0].params["bits"] == bits and products[0].params["group"] == group
    assert "onnx pass weight_only: 1 MatMul(s) of a dequantized constant weight became matrix_mul_a16" in g.notes
    assert not any(n.op in ("mul", "sub", "tile") for n in g.nodes)
    x = np.random.default_rng(5).standard_normal((1, 3, K)).astype(np.float16)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0].astype(np.float64)
    got = sim.run(g, chips.load(chip), inputs={"x": x}).outputs["y"].astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * np.abs(want).max())


@pytest.mark.parametrize("case", [{"dtype": "float32"}, {"kind": "uint8", "zero": True}, {"kind": "int4", "axis": 0}])
def test_what_the_op_does_not_take_imports_as_before(case):
    """float32 activations (the op's are float16 and bfloat16), uint8 codes with zero points, and
    4-bit scales per row of K (a group of 1; the op's 4-bit groups are even): element-wise
    dequantization ahead of the product, as before, still onnxruntime's numbers."""
    model = qdq_model(**case)
    g = isa.from_onnx(model)
    assert "onnx pass weight_only: nothing to rewrite" in g.notes
    assert not any(n.op == "matrix_mul_a16" for n in g.nodes) and any(n.op == "matrix_mul" for n in g.nodes)
    dtype = case.get("dtype", "float16")
    x = np.random.default_rng(5).standard_normal((1, 3, K)).astype(dtype)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0].astype(np.float64)
    got = sim.run(g, chips.load("generic"), inputs={"x": x}).outputs["y"].astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * np.abs(want).max())
