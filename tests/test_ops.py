"""Every op against its reference: random shapes, broadcasts, dtypes and values on both shipped
chips (functional mode, values equal), and the same cycles in timing mode."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from refeval import evaluate

import chips
import isa
import sim
from isa import dtypes
from isa.ops.activation import Active

CHIPS = {name: chips.load(name) for name in ("bm1684", "generic")}
SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def values(rng, shape, dtype):
    if dtypes.is_int(dtype):
        lo, hi = dtypes.int_range(dtype)
        wide = np.uint64 if dtype == "uint64" else np.int64
        return rng.integers(lo, hi, shape, endpoint=True, dtype=wide).astype(dtypes.np_dtype(dtype))
    values = rng.standard_normal(shape) * 4
    return (np.abs(values) if dtype == "float8_e8m0fnu" else values).astype(dtypes.np_dtype(dtype))  # e8m0: no sign


def allowed(chip, key, candidates=dtypes.NAMES):
    row = chip.support(key)
    return [d for d in candidates if row is not None and (row.dtypes is None or d in row.dtypes) and d != "bool"]


def check(graph, chip, inputs):
    """Run functional and timing; the outputs equal the references, the cycles each other."""
    res = sim.run(graph, chip, inputs)
    want = evaluate(graph, inputs, chip)
    for name, w in want.items():
        got = res.outputs[name]
        assert got.dtype == w.dtype and got.shape == w.shape
        if dtypes.is_float(dtypes.of_array(w)):  # compare as float64, where NaN equals NaN
            got, w = got.astype(np.float64), w.astype(np.float64)
        np.testing.assert_array_equal(got, w)
    assert sim.run(graph, chip, mode="timing").cycles == res.cycles
    return res


@st.composite
def broadcast_shapes(draw, count):
    rank = draw(st.integers(1, 4))
    out = draw(st.lists(st.integers(1, 9), min_size=rank, max_size=rank))
    shapes = [tuple(d if draw(st.booleans()) else 1 for d in out) for _ in range(count - 1)]
    return [tuple(out)] + shapes


@pytest.mark.parametrize("op", ["add", "sub", "mul", "max", "min"])
@pytest.mark.parametrize("chip", CHIPS)
@SETTINGS
@given(data=st.data())
def test_binary_ops(op, chip, data):
    chip = CHIPS[chip]
    dtype = data.draw(st.sampled_from(allowed(chip, op)))
    shapes = data.draw(broadcast_shapes(2))
    if data.draw(st.booleans()):
        shapes.reverse()
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    g = isa.Graph("t")
    a, b = g.input("a", shapes[0], dtype), g.input("b", shapes[1], dtype)
    g.output(getattr(isa.ops, op)(a, b), "y")
    check(g, chip, {"a": values(rng, shapes[0], dtype), "b": values(rng, shapes[1], dtype)})


@pytest.mark.parametrize("op", ["adds", "subs", "muls"])
@pytest.mark.parametrize("chip", CHIPS)
@SETTINGS
@given(data=st.data())
def test_tensor_scalar_ops(op, chip, data):
    chip = CHIPS[chip]
    dtype = data.draw(st.sampled_from(allowed(chip, op)))
    shape = data.draw(broadcast_shapes(1))[0]
    if dtypes.is_int(dtype):
        scalar = data.draw(st.integers(-300, 300))
    else:
        scalar = data.draw(st.floats(-100, 100, allow_nan=False, width=32))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    g = isa.Graph("t")
    g.output(getattr(isa.ops, op)(g.input("x", shape, dtype), scalar), "y")
    check(g, chip, {"x": values(rng, shape, dtype)})


@pytest.mark.parametrize("kind", Active.variants)
@pytest.mark.parametrize("chip", CHIPS)
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_every_active_type(kind, chip, data):
    chip = CHIPS[chip]
    dtype = data.draw(st.sampled_from(allowed(chip, f"active.{kind}")))
    shape = data.draw(broadcast_shapes(1))[0]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    g = isa.Graph("t")
    g.output(isa.ops.active(g.input("x", shape, dtype), f"ACTIVE_{kind.upper()}"), "y")
    check(g, chip, {"x": values(rng, shape, dtype)})


def test_active_values_on_known_inputs():
    x = np.array([[-2.5, -0.5, 0.0, 0.5, 1.5, 2.5]], np.float32)
    want = {
        "relu": [0, 0, 0, 0.5, 1.5, 2.5],
        "absval": [2.5, 0.5, 0, 0.5, 1.5, 2.5],
        "round": [-3, -1, 0, 1, 2, 3],  # halves away from zero, as C's round()
        "ceil": [-2, 0, 0, 1, 2, 3],
        "floor": [-3, -1, 0, 0, 1, 2],
        "square": [6.25, 0.25, 0, 0.25, 2.25, 6.25],
        "leaky_relu": [0, 0, 0, 0.5, 1.5, 2.5],  # `active` has no slope: it is relu (seed)
    }
    for kind, expected in want.items():
        g = isa.Graph("t")
        g.output(isa.ops.active(g.input("x", x.shape), kind), "y")
        np.testing.assert_array_equal(sim.run(g, "bm1684", {"x": x}).outputs["y"][0], np.float32(expected))


def test_integer_results_saturate_or_widen_as_the_chip_allows():
    g = isa.Graph("t")
    a, b = g.input("a", (1, 4), "int8"), g.input("b", (1, 4), "int8")
    g.output(isa.ops.add(a, b), "narrow")
    g.output(isa.ops.add(a, b, out_dtype="int16"), "wide")
    g.output(isa.ops.active(a, "absval"), "abs")
    av = np.array([[127, -128, 100, -5]], np.int8)
    bv = np.array([[1, -1, 100, 3]], np.int8)
    out = check(g, CHIPS["bm1684"], {"a": av, "b": bv}).outputs
    np.testing.assert_array_equal(out["narrow"], [[127, -128, 127, -2]])
    np.testing.assert_array_equal(out["wide"], [[128, -129, 200, -2]])
    np.testing.assert_array_equal(out["abs"], [[127, 127, 100, 5]])  # |-128| saturates


def test_max_min_may_not_change_dtype_on_bm1684():
    g = isa.Graph("t")
    g.output(isa.ops.max(g.input("a", (2, 2), "int8"), g.input("b", (2, 2), "int8"), out_dtype="int16"), "y")
    with pytest.raises(isa.UnsupportedError, match=r"max with int8 x int8 -> int16 is not supported on chip bm1684"):
        isa.lower(g, CHIPS["bm1684"])


def test_operand_errors():
    g = isa.Graph("t")
    a = g.input("a", (2, 3), "float32")
    with pytest.raises(isa.ShapeError, match=r"add: shapes \(2, 3\), \(3, 2\) do not broadcast"):
        isa.ops.add(a, g.input("b", (3, 2), "float32"))
    with pytest.raises(isa.ShapeError, match=r"same rank"):
        isa.ops.add(a, g.input("c", (3,), "float32"))
    with pytest.raises(isa.UnsupportedError, match=r"adds: scalar for a int8 tensor must be an integer, got 1.5"):
        isa.ops.adds(g.input("i", (2,), "int8"), 1.5)
    with pytest.raises(isa.UnsupportedError, match=r"unknown active_type 'gelu'"):
        isa.ops.active(a, "gelu")
    with pytest.raises(isa.GraphError, match=r"belongs to graph 'other'"):
        isa.ops.add(a, isa.Graph("other").input("z", (2, 3)))


# ---- matrix_mul -----------------------------------------------------------------------------

@st.composite
def matmul_case(draw, max_dim=70):
    m, k, n = (draw(st.integers(1, max_dim)) for _ in range(3))
    return m, k, n, draw(st.booleans()), draw(st.integers(0, 2**32 - 1))


def matmul_graph(m, k, n, dtype, bias_dtype=None, rng=None, **params):
    g = isa.Graph("mm")
    x = g.input("x", (m, k), dtype)
    w = g.constant("w", values(rng, (k, n), dtype))
    b = g.constant("b", values(rng, (1, n), bias_dtype)) if bias_dtype else None
    g.output(isa.ops.matrix_mul(x, w, b, **params), "y")
    return g


@pytest.mark.parametrize("chip, dtype", [("bm1684", "float32"), ("generic", "float32"), ("generic", "float16"), ("generic", "bfloat16")])
@SETTINGS
@given(case=matmul_case())
def test_matrix_mul_float(chip, dtype, case):
    m, k, n, with_bias, seed = case
    rng = np.random.default_rng(seed)
    g = matmul_graph(m, k, n, dtype, dtype if with_bias else None, rng)
    inputs = {"x": values(rng, (m, k), dtype)}
    res = sim.run(g, CHIPS[chip], inputs)
    want = evaluate(g, inputs, CHIPS[chip])["y"]
    tol = 1e-5 if dtype == "float32" else 1e-2
    np.testing.assert_allclose(res.outputs["y"].astype(np.float32), want.astype(np.float32), rtol=tol, atol=tol * np.sqrt(k) * 16)
    assert res.outputs["y"].dtype == want.dtype
    assert sim.run(g, CHIPS[chip], mode="timing").cycles == res.cycles


@st.composite
def batched_matmul_case(draw):
    """Batch shapes of up to three axes, each side's axis its own size or 1 (broadcast)."""
    batch = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    left = [d if draw(st.booleans()) else 1 for d in batch]
    right = [d if draw(st.booleans()) else 1 for d in batch]
    m, k, n = (draw(st.integers(1, 40)) for _ in range(3))
    return tuple(left), tuple(right), m, k, n, draw(st.integers(0, 2**32 - 1))


@pytest.mark.parametrize("chip, dtype", [("bm1684", "float32"), ("generic", "float32"), ("generic", "float16")])
@SETTINGS
@given(case=batched_matmul_case())
def test_matrix_mul_batched_reads_each_batchs_matrices_in_place(chip, dtype, case):
    """Batched float operands broadcast as numpy's matmul, one matrix_mul node (no extract or copy
    of a batch's matrix). Where each batch element's product is one instruction its float32 sums
    are the reference's bit for bit; a product cut into tiles sums in another order (numpy's
    kernels differ by shape), so within float precision."""
    left, right, m, k, n, seed = case
    rng = np.random.default_rng(seed)
    g = isa.Graph("bmm")
    g.output(isa.ops.matrix_mul(g.input("x", left + (m, k), dtype), g.input("w", right + (k, n), dtype)), "y")
    assert [node.op for node in g.nodes] == ["matrix_mul"]
    inputs = {"x": values(rng, left + (m, k), dtype), "w": values(rng, right + (k, n), dtype)}
    res = sim.run(g, CHIPS[chip], inputs)
    want = inputs["x"].astype(np.float64) @ inputs["w"].astype(np.float64)
    tol = 1e-5 if dtype == "float32" else 1e-2
    assert res.outputs["y"].shape == want.shape and res.outputs["y"].dtype == np.dtype(dtype)
    np.testing.assert_allclose(res.outputs["y"].astype(np.float64), want, rtol=tol, atol=tol * np.sqrt(k) * 16)
    instrs = [i for s in res.program.streams.values() for i in s]
    if sum(i.kind == "matrix" for i in instrs) == int(np.prod(want.shape[:-2])):
        np.testing.assert_array_equal(res.outputs["y"], evaluate(g, inputs, CHIPS[chip])["y"])
    assert sim.run(g, CHIPS[chip], mode="timing").cycles == res.cycles


def test_matrix_mul_batches_are_float_only_and_must_broadcast():
    g = isa.Graph("bmm")
    with pytest.raises(isa.ShapeError, match=r"matrix_mul left: expected rank 2, got shape \(2, 4, 8\)"):
        isa.ops.matrix_mul(g.input("xi", (2, 4, 8), "int8"), g.input("wi", (2, 8, 3), "int8"))
    with pytest.raises(isa.ShapeError, match=r"batch dimensions \(2,\) and \(3,\) do not broadcast"):
        isa.ops.matrix_mul(g.input("x", (2, 4, 8), "float32"), g.input("w", (3, 8, 3), "float32"))
    with pytest.raises(isa.ShapeError, match=r"left columns 8 != right rows 7"):
        isa.ops.matrix_mul(g.input("x2", (2, 4, 8), "float32"), g.input("w2", (2, 7, 3), "float32"))


QUANT = [
    # mode, input dtype, bias dtype, output dtype
    ("LowPrecisionSymmetric", "int8", "int16", "int8"),
    ("LowPrecisionSymmetric", "uint8", "uint16", "uint8"),
    ("LowPrecisionSymmetric", "int8", None, "int8"),
    ("HighPrecisionSymmetric", "int8", "int16", "int16"),
    ("HighPrecisionSymmetric", "int8", "int32", "int8"),
    ("HighPrecisionSymmetric", "uint8", "uint16", "uint16"),
    ("HighPrecisionAsymmetric", "int8", "int32", "int16"),
    ("HighPrecisionAsymmetric", "uint8", None, "uint8"),
]


@pytest.mark.parametrize("mode, dtype, bias, out", QUANT)
@pytest.mark.parametrize("chip", CHIPS)
@SETTINGS
@given(case=matmul_case(), scale=st.sampled_from([1.0, 0.5, 2.0**-7, 2.0**-12, 0.3, 0.0123, 1.7]))
def test_matrix_mul_quantized_modes_are_exact(mode, dtype, bias, out, chip, case, scale):
    m, k, n, _, seed = case
    rng = np.random.default_rng(seed)
    zero_points = {}
    if mode == "HighPrecisionAsymmetric":
        lo, hi = dtypes.int_range(dtype)
        zero_points = {"left_zero_point": int(rng.integers(lo, hi)), "right_zero_point": int(rng.integers(lo, hi)),
                       "output_zero_point": int(rng.integers(*dtypes.int_range(out)))}
    g = matmul_graph(m, k, n, dtype, bias, rng, scale=scale, mode=mode, out_dtype=out, **zero_points)
    check(g, CHIPS[chip], {"x": values(rng, (m, k), dtype)})


def test_high_precision_asymmetric_meets_the_formula_when_nothing_saturates():
    """The seed's formula, Round{[(x - zp_l) x (w - zp_r) + bias] * scale} + zp_o: with scale 1
    nothing is shifted away, so the two partial products and the folded bias give it exactly."""
    rng = np.random.default_rng(7)
    x = rng.integers(-20, 20, (6, 9)).astype(np.int8)
    w = rng.integers(-20, 20, (9, 5)).astype(np.int8)
    b = rng.integers(-100, 100, (1, 5)).astype(np.int32)
    g = isa.Graph("mm")
    g.output(isa.ops.matrix_mul(g.input("x", x.shape, "int8"), g.constant("w", w), g.constant("b", b), scale=1.0,
                                mode="HighPrecisionAsymmetric", left_zero_point=4, right_zero_point=-3, output_zero_point=11,
                                out_dtype="int16"), "y")
    want = (x.astype(np.int64) - 4) @ (w.astype(np.int64) + 3) + b + 11
    for chip in CHIPS.values():
        np.testing.assert_array_equal(sim.run(g, chip, {"x": x}).outputs["y"], want)


def test_low_precision_symmetric_by_hand():
    """The seed's pseudo-code on numbers worked by hand, including the 7-bit compensation."""
    g = isa.Graph("mm")
    x = g.input("x", (1, 2), "int8")
    w = g.constant("w", np.array([[10, 1], [20, -3]], np.int8))
    b = g.constant("b", np.array([[5, 0]], np.int16))
    g.output(isa.ops.matrix_mul(x, w, b, scale=0.3), "y")
    # acc = [3*10 + 4*20 + 5, 3*1 - 4*3] = [115, -9]; rshift = ceil(log2(1/0.3)) = 2
    # (115 + 2) >> 2 = 29, (-9 + 2) >> 2 = -2; left scale 0.3 * 4 = 1.2 -> int(1.2 * 128) = 153
    # (29 * 153 + 64) >> 7 = 35, (-2 * 153 + 64) >> 7 = -2
    out = sim.run(g, "bm1684", {"x": np.array([[3, 4]], np.int8)}).outputs["y"]
    np.testing.assert_array_equal(out, [[35, -2]])


def test_matrix_mul_errors():
    g = isa.Graph("mm")
    x = g.input("x", (4, 8), "int8")
    with pytest.raises(isa.ShapeError, match=r"left columns 8 != right rows 7"):
        isa.ops.matrix_mul(x, g.input("w", (7, 3), "int8"))
    w = g.input("w2", (8, 3), "int8")
    with pytest.raises(isa.UnsupportedError, match=r"needs all zero points to be 0"):
        isa.ops.matrix_mul(x, w, left_zero_point=3)
    with pytest.raises(isa.UnsupportedError, match=r"bias: dtype int32 is not supported \(supported: int16, uint16\)"):
        isa.ops.matrix_mul(x, w, g.input("b", (1, 3), "int32"))
    with pytest.raises(isa.UnsupportedError, match=r"unsigned output uint8 needs unsigned inputs"):
        isa.ops.matrix_mul(x, w, out_dtype="uint8")
    with pytest.raises(isa.UnsupportedError, match=r"HighPrecisionAsymmetric folds zero points "
                                                   r"offline, so matrix_right must be a constant"):
        isa.ops.matrix_mul(x, w, mode="HighPrecisionAsymmetric")
    with pytest.raises(isa.UnsupportedError, match=r"left_zero_point 300 is outside int8's range \[-128, 127\]"):
        isa.ops.matrix_mul(x, np.ones((8, 3), np.int8), mode="HighPrecisionAsymmetric", left_zero_point=300)
    with pytest.raises(isa.UnsupportedError, match=r"unknown mode 'Fast'"):
        isa.ops.matrix_mul(x, w, mode="Fast")
    with pytest.raises(isa.ShapeError, match=r"bias must have shape \(1, 3\)"):
        isa.ops.matrix_mul(x, w, g.input("b2", (3,), "int16"))
