"""The dtype table (isa/dtypes.py) beyond the seed's types: float64, uint64, the float8 family,
float4_e2m1fn and the 4- and 2-bit integers. Their conversions (rounding, saturation, what
overflow gives), the compute dtype rule, exact 64-bit shifts, and round trips through the
machine on the `generic` chip in functional and timing mode, values asserted."""

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import chips
import isa
import sim
from isa import dtypes

GENERIC = chips.load("generic")
O = isa.ops
NEW = ("float64", "uint64", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
       "float4_e2m1fn", "int4", "uint4", "int2", "uint2")


def arr(values, dtype):
    return np.asarray(values).astype(dtypes.np_dtype(dtype))


def f64(a):
    return np.asarray(a).astype(np.float64)


# ---- the table ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NEW)
def test_every_new_dtype_is_in_the_table_with_whole_bytes(name):
    assert name in dtypes.NAMES
    assert dtypes.np_dtype(name) == np.dtype(getattr(ml_dtypes, name, None) or name)
    assert dtypes.itemsize(name) == (8 if name in ("float64", "uint64") else 1)  # int4, int2, float4: a byte each
    assert dtypes.is_float(name) != dtypes.is_int(name)
    assert dtypes.of_array(np.zeros(2, dtypes.np_dtype(name))) == name


def test_ranges_of_the_narrow_integers_and_floats():
    assert [dtypes.int_range(n) for n in ("int4", "uint4", "int2", "uint2", "uint64")] == [
        (-8, 7), (0, 15), (-2, 1), (0, 3), (0, 2**64 - 1)]
    assert [dtypes.float_max(n) for n in dtypes.FLOAT8 + ("float4_e2m1fn",)] == [448.0, 240.0, 57344.0, 57344.0, 6.0]
    assert dtypes.float_tiny("float8_e8m0fnu") == 2.0**-127 and dtypes.float_max("float8_e8m0fnu") == 2.0**127


# ---- conversions -------------------------------------------------------------------------------

def test_float8_rounds_to_nearest_even_and_overflows_as_its_format_says():
    x = np.array([0.3, 17.0, 19.0, 300.0, 460.0, 1e6, -1e6, np.inf, -0.0, np.nan], np.float32)
    e4m3fn = f64(dtypes.convert(x, "float8_e4m3fn"))
    # 0.3 -> 0.3125 (nearest), 17 and 19 are halves: to even mantissas 16 and 20; beyond 448: NaN (no infinity)
    np.testing.assert_array_equal(e4m3fn[:5], [0.3125, 16.0, 20.0, 288.0, 448.0])
    assert np.isnan(e4m3fn[5:8]).all() and np.signbit(e4m3fn[8]) and np.isnan(e4m3fn[9])
    e5m2 = f64(dtypes.convert(x, "float8_e5m2"))
    np.testing.assert_array_equal(e5m2[:8], [0.3125, 16.0, 20.0, 320.0, 448.0, np.inf, -np.inf, np.inf])
    fnuz = f64(dtypes.convert(x, "float8_e4m3fnuz"))
    assert fnuz[8] == 0.0 and not np.signbit(fnuz[8])  # no -0 in the fnuz formats
    assert np.isnan(fnuz[3:8]).all()  # 300 and beyond: past its 240, NaN
    np.testing.assert_array_equal(f64(dtypes.convert(x[:7], "float4_e2m1fn")), [0.5, 6.0, 6.0, 6.0, 6.0, 6.0, -6.0])  # saturates


def test_float8_e8m0_is_the_nearest_power_of_two():
    x = np.array([1.0, 1.4, 1.5, 3.0, 0.75, 2.0**-128, 0.0, -1.0, 2.0**128], np.float64)
    got = f64(dtypes.convert(x, "float8_e8m0fnu"))
    np.testing.assert_array_equal(got[:6], [1.0, 1.0, 2.0, 4.0, 1.0, 2.0**-127])
    assert np.isnan(got[6:]).all()


@pytest.mark.parametrize("name, want", [
    ("int4", [-8, -8, -2, 0, 2, 7, 7, 0]),
    ("uint4", [0, 0, 0, 0, 2, 8, 15, 0]),
    ("int2", [-2, -2, -2, 0, 1, 1, 1, 0]),
    ("uint2", [0, 0, 0, 0, 2, 3, 3, 0]),
])
def test_floats_into_narrow_integers_round_half_even_and_saturate(name, want):
    x = np.array([-100.0, -8.5, -2.5, 0.5, 2.5, 7.5, 1e9, np.nan], np.float32)
    np.testing.assert_array_equal(dtypes.convert(x, name).astype(np.int64), want)


def test_64_bit_integers_saturate_exactly_at_their_ends():
    big = np.array([2.0**63, 2.0**64, -1e30, 1e30, 12345.5], np.float64)
    np.testing.assert_array_equal(dtypes.convert(big, "int64"), [2**63 - 1, 2**63 - 1, -(2**63), 2**63 - 1, 12346])
    np.testing.assert_array_equal(dtypes.convert(big, "uint64"), [2**63, 2**64 - 1, 0, 2**64 - 1, 12346])
    u = np.array([2**64 - 1, 2**63, 5], np.uint64)
    np.testing.assert_array_equal(dtypes.convert(u, "int64"), [2**63 - 1, 2**63 - 1, 5])
    np.testing.assert_array_equal(dtypes.convert(u, "int4"), [7, 7, 5])
    np.testing.assert_array_equal(dtypes.convert(np.array([-5, 2**62], np.int64), "uint64"), [0, 2**62])
    assert dtypes.convert(u, "float64")[0] == 2.0**64 and dtypes.convert(u, "float32")[0] == np.float32(2.0**64)


def test_narrow_types_convert_to_each_other_through_their_values():
    i4 = arr([-8, -1, 3, 7], "int4")
    np.testing.assert_array_equal(dtypes.convert(i4, "uint2"), arr([0, 0, 3, 3], "uint2"))
    np.testing.assert_array_equal(f64(dtypes.convert(i4, "float8_e4m3fn")), [-8.0, -1.0, 3.0, 7.0])
    f8 = arr([1.5, -2.5, 3.5], "float8_e5m2")
    np.testing.assert_array_equal(dtypes.convert(f8, "int8"), [2, -2, 4])  # halves to even
    np.testing.assert_array_equal(dtypes.convert(arr([True, False], "bool"), "int4"), arr([1, 0], "int4"))


def test_compute_dtype():
    c = dtypes.compute_dtype
    assert c("float64", "float16") == "float64" and c("float8_e5m2", "int8") == "float32" and c("int32", 1.5) == "float32"
    assert c("uint64", "uint8", 3) == "uint64" and c("uint64", "int8") == "int64" and c("uint64", -1) == "int64"
    assert c("int4") == c("uint2") == c("int64") == "int64"


# ---- 64-bit shifts -----------------------------------------------------------------------------

def _exact_shift(x, n, mode, lo, hi):
    if n >= 0:
        return max(lo, min(hi, x * 2**n))
    q = Fraction(x, 2**-n)
    down, frac, half = math.floor(q), q - math.floor(q), Fraction(1, 2)
    bump = {dtypes.DOWN: False, dtypes.UP: frac > 0, dtypes.TOWARDS_ZERO: frac > 0 and x < 0, dtypes.HALF_UP: frac >= half,
            dtypes.HALF_DOWN: frac > half, dtypes.HALF_AWAY: frac > half or (frac == half and x >= 0),
            dtypes.HALF_TO_EVEN: frac > half or (frac == half and down % 2 == 1)}[mode]
    return down + bump


@pytest.mark.parametrize("unsigned", [False, True])
def test_shifts_are_exact_for_every_64_bit_value_count_and_rounding(unsigned):
    lo, hi = (0, 2**64 - 1) if unsigned else (-(2**63), 2**63 - 1)
    rng = np.random.default_rng(7)
    xs = [lo, hi, 0, 1, 3, 2**62, 2**63 - 1, hi - 1] + ([-1, -3, lo + 1, -(2**62)] if not unsigned else [2**63, 2**63 + 1])
    xs += [int(v) for v in rng.integers(lo, hi, 40, endpoint=True, dtype=np.uint64 if unsigned else np.int64)]
    counts = list(range(-67, 68, 3)) + [-64, -63, 63, 64, 65]
    x = np.array([v for v in xs for _ in counts], np.uint64 if unsigned else np.int64)
    n = np.array([k for _ in xs for k in counts], np.int64)
    for mode in range(7):
        got = dtypes.shift(x, n, mode).tolist()
        want = [_exact_shift(int(a), int(k), mode, lo, hi) for a, k in zip(x.tolist(), n.tolist())]
        assert got == want, mode
    np.testing.assert_array_equal(dtypes.shift(np.array([16, 4], np.uint64), np.array([1, 2], np.uint64), right=True), [8, 1])


# ---- through the machine ----------------------------------------------------------------------

def run_both(g, inputs):
    """Functional and timing runs on generic: the outputs, and the same cycles (and the program
    read back from its text is the same program)."""
    res = sim.run(g, GENERIC, inputs=inputs)
    assert sim.run(g, GENERIC, mode="timing").cycles == res.cycles
    prog = isa.lower(g, GENERIC)
    assert isa.Program.from_text(prog.to_text()) == prog
    return res.outputs


@pytest.mark.parametrize("name", NEW)
def test_cast_round_trip_through_the_machine(name):
    """float32 -> name -> float32 on the vector unit: the stored values are the conversion's."""
    x = np.array([[0.0, 0.75, -1.25, 2.5], [3.0, -7.0, 100.0, 1e6], [0.1, -0.1, 5.5, -9.75]], np.float32)
    if name in ("uint64", "uint4", "uint2", "float8_e8m0fnu"):
        x = np.abs(x) + (2.0**-126 if name == "float8_e8m0fnu" else 0.0)
    g = isa.Graph("cast")
    t = g.input("x", x.shape, "float32")
    narrow = O.cast(t, out_dtype=name)
    g.output(narrow, "narrow")
    g.output(O.cast(narrow, out_dtype="float32"), "back")
    out = run_both(g, {"x": x})
    want = x.copy()
    if dtypes.is_int(name):  # the cast rounds half away from zero (the seed's), then saturates
        lo, hi = dtypes.int_range(name)
        want = np.clip(np.where(x >= 0, np.floor(x + 0.5), np.ceil(x - 0.5)), lo, hi)
    else:
        want = x.astype(np.float64).astype(dtypes.np_dtype(name)).astype(np.float64)
    assert out["narrow"].dtype == dtypes.np_dtype(name)
    np.testing.assert_array_equal(f64(out["narrow"]), want)
    np.testing.assert_array_equal(out["back"], want.astype(np.float32))


def test_float64_computes_in_float64_on_the_vector_unit():
    x = np.array([1.0, 30.0, -3.0], np.float64)
    g = isa.Graph("f64")
    t = g.input("x", (3,), "float64")
    y = O.adds(O.mul(t, t), 1e-10)
    g.output(y, "y")
    g.output(O.active(t, "exp"), "e")
    out = run_both(g, {"x": x})
    np.testing.assert_array_equal(out["y"], x * x + 1e-10)  # 1 + 1e-10 is 1 in float32
    np.testing.assert_array_equal(out["e"], np.exp(x))
    prog = isa.lower(g, GENERIC).to_text()
    assert "cdt=float64" in prog and "cdt=float32" not in prog


def test_float64_matrix_product_accumulates_in_float64():
    rng = np.random.default_rng(3)
    a, w = rng.standard_normal((37, 53)), rng.standard_normal((53, 29))
    g = isa.Graph("mm64")
    y = O.matrix_mul(g.input("a", a.shape, "float64"), g.constant("w", w))
    g.output(y, "y")
    np.testing.assert_array_equal(run_both(g, {"a": a})["y"], a @ w)


def test_uint64_arithmetic_keeps_the_top_bit():
    a = np.array([2**63 + 5, 2**64 - 10, 7], np.uint64)
    b = np.array([3, 5, 2**63], np.uint64)
    g = isa.Graph("u64")
    ta, tb = g.input("a", (3,), "uint64"), g.input("b", (3,), "uint64")
    g.output(O.add(ta, tb), "sum")
    g.output(O.gt(ta, tb, out_dtype="bool"), "gt")
    g.output(O.bit_xor(ta, tb), "xor")
    g.output(O.arith_rshift(ta, O.cast(tb, out_dtype="uint64")), "shr")
    out = run_both(g, {"a": a, "b": b})
    np.testing.assert_array_equal(out["sum"], [2**63 + 8, 2**64 - 5, 2**63 + 7])
    np.testing.assert_array_equal(out["gt"], [True, True, False])
    np.testing.assert_array_equal(out["xor"], a ^ b)
    np.testing.assert_array_equal(out["shr"], [(2**63 + 5) >> 3, (2**64 - 10) >> 5, 0])


def test_int4_arithmetic_saturates_into_its_range():
    g = isa.Graph("i4")
    a, b = g.input("a", (4,), "int4"), g.input("b", (4,), "int4")
    g.output(O.add(a, b), "sum")
    g.output(O.mul(a, b), "product")
    out = run_both(g, {"a": arr([7, -8, 3, -2], "int4"), "b": arr([3, -1, 2, 1], "int4")})
    np.testing.assert_array_equal(out["sum"].astype(np.int8), [7, -8, 5, -1])
    np.testing.assert_array_equal(out["product"].astype(np.int8), [7, 7, 6, -2])


def test_float8_arithmetic_rounds_each_result_into_float8():
    g = isa.Graph("f8")
    a = g.input("a", (3,), "float8_e4m3fn")
    g.output(O.adds(a, 0.125), "y")
    g.output(O.muls(a, 100.0), "big")
    out = run_both(g, {"a": arr([1.0, 10.0, 448.0], "float8_e4m3fn")})
    np.testing.assert_array_equal(f64(out["y"]), [1.125, 10.0, 448.0])  # 10.125 rounds to 10 (spacing 1 there)
    assert f64(out["big"])[0] == 96.0 and np.isnan(f64(out["big"])[1:]).all()  # 1000 and 44800: beyond 448, NaN


def test_an_empty_constant_is_an_output_never_an_operand():
    g = isa.Graph("empty")
    e = g.constant("e", np.zeros((3, 0), np.float32))
    g.output(e, "e")
    g.output(O.adds(g.input("x", (2,), "float32"), 1.0), "y")
    out = run_both(g, {"x": np.ones(2, np.float32)})
    assert out["e"].shape == (3, 0) and out["e"].dtype == np.float32
    with pytest.raises(isa.ShapeError, match=r"adds: operand e is empty \(shape \(3, 0\)\)"):
        O.adds(e, 1.0)
    with pytest.raises(isa.ShapeError, match="positive integers"):
        g.input("z", (0, 2), "float32")
