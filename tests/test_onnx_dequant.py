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
    ("int8", 64, True, 8, 64),      # blocked, zero points drawn in -3..2: zero terms -z x scale
    ("uint8", 0, True, 8, K),       # per column, zero points 0..2: codes u - 128, zero terms (128 - z) x scale
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
    assert len(products) == 1 and products[0].params["bits"] == bits and products[0].params["group"] == group
    assert len(products[0].inputs) == (4 if zero or kind == "uint8" or bits == 4 else 3)  # zero terms where they are not all 0
    assert "onnx pass weight_only: 1 MatMul(s) of a dequantized constant weight became matrix_mul_a16" in g.notes
    assert not any(n.op in ("mul", "sub", "tile") for n in g.nodes)
    x = np.random.default_rng(5).standard_normal((1, 3, K)).astype(np.float16)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0].astype(np.float64)
    got = sim.run(g, chips.load(chip), inputs={"x": x}).outputs["y"].astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * np.abs(want).max())


@pytest.mark.parametrize("case", [{"dtype": "float32"}, {"kind": "int4", "axis": 0}])
def test_what_the_op_does_not_take_imports_as_before(case):
    """float32 activations (the op's are float16 and bfloat16), and 4-bit scales per row of K (a
    group of 1; the op's 4-bit groups are even): element-wise dequantization ahead of the
    product, as before, still onnxruntime's numbers."""
    model = qdq_model(**case)
    g = isa.from_onnx(model)
    assert "onnx pass weight_only: nothing to rewrite" in g.notes
    assert not any(n.op == "matrix_mul_a16" for n in g.nodes) and any(n.op == "matrix_mul" for n in g.nodes)
    dtype = case.get("dtype", "float16")
    x = np.random.default_rng(5).standard_normal((1, 3, K)).astype(dtype)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0].astype(np.float64)
    got = sim.run(g, chips.load("generic"), inputs={"x": x}).outputs["y"].astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * np.abs(want).max())


def nbits_model(bits=4, block=64, zero=None, dtype="float16", bias=False, g_idx=None, rows=3):
    """x (1, rows, K) @ com.microsoft.MatMulNBits(B of N x K codes packed low-first along K, a scale
    per block of `block`; zero points None (2^(bits - 1)), "packed" (uint8) or "float" (x's dtype))."""
    rng = np.random.default_rng(1)
    blocks = K // block
    q = rng.integers(0, 2 ** bits, (N, K)).astype(np.uint8)
    packed = q if bits == 8 else q[:, 0::2] | (q[:, 1::2] << 4)
    inits = [numpy_helper.from_array(packed.reshape(N, blocks, block * bits // 8), "B"),
             numpy_helper.from_array((rng.random(N * blocks) * 0.02 + 1e-3).astype(dtype), "S")]
    if zero == "packed":
        z = rng.integers(0, 2 ** bits, (N, blocks)).astype(np.uint8)
        inits.append(numpy_helper.from_array((z if bits == 8 else z[:, 0::2] | (z[:, 1::2] << 4)).reshape(-1), "Z"))
    elif zero == "float":
        inits.append(numpy_helper.from_array(rng.integers(0, 2 ** bits, N * blocks).astype(dtype), "Z"))
    elif zero == 128:
        inits.append(numpy_helper.from_array(np.full(N * blocks, 128, np.uint8), "Z"))
    names = ["x", "B", "S", "Z" if zero is not None else ""]
    if g_idx is not None:
        inits.append(numpy_helper.from_array(g_idx.astype(np.int32), "G"))
    names.append("G" if g_idx is not None else "")
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(N).astype(dtype), "bias"))
        names.append("bias")
    while not names[-1]:
        names.pop()
    nodes = [helper.make_node("MatMulNBits", names, ["y"], domain="com.microsoft", K=K, N=N, bits=bits, block_size=block)]
    graph = helper.make_graph(nodes, "nbits", [helper.make_tensor_value_info("x", ELEM[dtype], [1, rows, K])],
                              [helper.make_tensor_value_info("y", ELEM[dtype], [1, rows, N])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])


def _against_onnxruntime(model, chip, dtype="float16"):
    g = isa.from_onnx(model)
    x = np.random.default_rng(5).standard_normal((1, 3, K)).astype(dtype)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0].astype(np.float64)
    got = sim.run(g, chips.load(chip), inputs={"x": x}).outputs["y"].astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * np.abs(want).max())
    return g


@pytest.mark.parametrize("chip", ["bm1686", "ascend910b"])
@pytest.mark.parametrize("bits, block, zero, bias", [
    (4, 64, None, False),       # zero point 8: codes as stored, zero term -8 x scale
    (4, 32, "packed", True),    # uint8 zero points two a byte, and a bias added after the product
    (4, 128, "float", False),   # zero points in x's dtype
    (8, 64, None, False),       # zero point 128: symmetric int8 codes q - 128
    (8, 16, 128, False),        # given, all 128
    (8, 64, "packed", False),   # other 8-bit zero points: zero terms (128 - z) x scale
    (8, 32, "packed", True),
])
def test_matmul_nbits_imports_as_matrix_mul_a16(chip, bits, block, zero, bias):
    """onnxruntime's int4 / int8 export (MatMulNBits) is the op's stored codes multiplied on chip:
    onnxruntime's numbers within float16 precision, no float weight in the graph."""
    g = _against_onnxruntime(nbits_model(bits, block, zero, bias=bias), chip)
    products = [n for n in g.nodes if n.op == "matrix_mul_a16"]
    assert len(products) == 1 and products[0].params == {**products[0].params, "bits": bits, "group": block}
    assert not any(n.op == "matrix_mul" for n in g.nodes) and any(n.op == "add" for n in g.nodes) == bias


@pytest.mark.parametrize("case, why", [({"dtype": "float32"}, "float32 activations"),
                                       ({"dtype": "float32", "bits": 8, "zero": "packed"}, "float32 activations")])
def test_matmul_nbits_the_op_does_not_take_dequantizes_at_import(case, why):
    """float32 activations (4- or 8-bit codes, zero points or not): a matrix_mul by the weight
    dequantized at import, a note saying so, still onnxruntime's numbers."""
    dtype = case.get("dtype", "float16")
    g = _against_onnxruntime(nbits_model(**case), "generic", dtype)
    assert not any(n.op == "matrix_mul_a16" for n in g.nodes) and any(n.op == "matrix_mul" for n in g.nodes)
    assert any("MatMulNBits" in note and "dequantized at import, not a matrix_mul_a16: " + why in note for note in g.notes)


def test_matmul_nbits_refuses_act_order_and_bad_input():
    """A g_idx that reorders K is refused, naming it; the blocks in order import; a B of the wrong
    shape and 2-bit codes are UnsupportedError / ShapeError (SimErrors) naming what and the value."""
    _against_onnxruntime(nbits_model(g_idx=np.arange(K) // 64), "bm1686")
    with pytest.raises(isa.errors.UnsupportedError, match="g_idx reorders K"):
        isa.from_onnx(nbits_model(g_idx=np.random.default_rng(0).permutation(np.arange(K) // 64)))
    for attr, value, error, says in (("bits", 2, isa.errors.UnsupportedError, "bits=2"),
                                     ("N", N + 1, isa.errors.ShapeError, r"expected uint8 \(97, 4, 32\)")):
        bad = nbits_model()
        next(a for a in bad.graph.node[0].attribute if a.name == attr).i = value
        with pytest.raises(error, match=says):
            isa.from_onnx(bad)
