"""Language models on the NPUs: the op tables a transformer needs (chips/*.yaml), the builders of
examples/llm.py against a numpy reference of the same model, and bench/llm.py's figures and errors."""

import numpy as np
import pytest

import chips
import isa
import sim

O = isa.ops
ASCEND910B = chips.load("ascend910b")


def rms_softmax_silu(dtype, n=8, d=64):
    """RMSNorm, a softmax over the last axis and SiLU: the vector work of a decoder layer."""
    g = isa.Graph("vector_work")
    with g:
        x = g.input("x", (n, d), dtype)
        ms = O.reduce(O.mul(x, x), "REDUCE_MEAN", [1])
        g.output(O.mul(x, O.active(O.adds(ms, 1e-6), "rsqrt")), "normed")
        g.output(O.softmax(x, axis=1), "probs")
        g.output(O.mul(x, O.active(x, "sigmoid")), "silu")
    return g


def reference(x):
    x = x.astype(np.float64)
    normed = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return {"normed": normed, "probs": e / e.sum(axis=1, keepdims=True), "silu": x / (1 + np.exp(-x))}


@pytest.mark.parametrize("dtype, tol", [("float16", 1e-2), ("float32", 1e-5), ("bfloat16", 4e-2)])
def test_ascend910b_runs_a_layers_vector_work_in_each_float_dtype(dtype, tol):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 64)).astype(isa.dtypes.np_dtype(dtype))
    res = sim.run(rms_softmax_silu(dtype), ASCEND910B, {"x": x})
    for name, want in reference(x).items():
        got = res.outputs[name].astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=name)


@pytest.mark.parametrize("chip, op, dtype", [
    ("bm1686", "softmax", "float16"),     # BMLang's softmax line for BM1686: FLOAT32 only
    ("bm1686", "active", "float16"),      # sigmoid: only relu, leaky_relu and absval gain FLOAT16 on BM1686
    ("ascend310b", "active", "float16"),  # aclnnExp: Atlas 200I/500 A2 ×
    ("ascend310b", "softmax", "bfloat16"),  # aclnnSoftmax: no BFLOAT16 on Atlas 200I/500 A2
])
def test_a_refusal_names_the_op_the_dtype_and_the_chip(chip, op, dtype):
    g = isa.Graph("refused")
    with g:
        x = g.input("x", (4, 16), dtype)
        g.output(O.softmax(x, axis=1) if op == "softmax" else O.active(x, "sigmoid" if chip == "bm1686" else "exp"), "y")
    key = "softmax" if op == "softmax" else ("active.sigmoid" if chip == "bm1686" else "active.exp")
    with pytest.raises(isa.UnsupportedError, match=rf"{key} with {dtype} -> {dtype} is not supported on chip {chip}"):
        isa.lower(g, chips.load(chip))


def test_ascend910b_refuses_a_float32_product_its_cube_has_no_rate_for():
    g = isa.Graph("refused")
    with g:
        x = g.input("x", (16, 32), "float32")
        g.output(O.matrix_mul(x, g.constant("w", np.ones((32, 16), np.float32))), "y")
    with pytest.raises(isa.UnsupportedError, match=r"matrix_mul with float32 x float32 -> float32 is not supported on chip ascend910b"):
        isa.lower(g, ASCEND910B)


def test_ascend910b_multiplies_bfloat16_on_its_cube():
    rng = np.random.default_rng(1)
    bf16 = isa.dtypes.np_dtype("bfloat16")
    x, w = (rng.standard_normal(s).astype(bf16) for s in ((32, 64), (64, 48)))
    g = isa.Graph("bf16_product")
    with g:
        g.output(O.matrix_mul(g.input("x", x.shape, "bfloat16"), g.constant("w", w)), "y")
    res = sim.run(g, ASCEND910B, {"x": x})
    want = x.astype(np.float64) @ w.astype(np.float64)
    np.testing.assert_allclose(res.outputs["y"].astype(np.float64), want, rtol=2e-2, atol=5e-2)
