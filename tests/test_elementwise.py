"""Every element-wise op of the seed on the machine against its reference: random shapes,
broadcasts, dtypes and values, on every shipped chip that supports the combination; the same
cycles in timing mode; and the seed's semantics on numbers worked out by hand."""

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from refeval import evaluate

import chips
import isa
import sim
from isa import dtypes

CHIPS = {name: chips.load(name) for name in chips.available()}
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
O = isa.ops
SMALL_INTS = ("int8", "uint8", "int16", "uint16")
INTS = SMALL_INTS + ("int32",)
NUMERIC = ("float32", "float16", "bfloat16") + INTS


def values(rng, shape, dtype, low=None, high=None):
    if dtypes.is_int(dtype):
        lo, hi = dtypes.int_range(dtype)
        lo, hi = max(lo, low if low is not None else lo), min(hi, high if high is not None else hi)
        return rng.integers(lo, hi, shape, endpoint=True).astype(dtypes.np_dtype(dtype))
    return (rng.standard_normal(shape) * 4).astype(dtypes.np_dtype(dtype))


def having(*ops):
    """The chips whose op table has any of these ops (the seed gives the others no support)."""
    return [chip for chip in CHIPS if any(CHIPS[chip].support(op) for op in ops)]


def supported(ops):
    """(chip, op) for every op and every chip that has it."""
    return [(chip, op) for op in ops for chip in having(op)]


def check(graph, chip, inputs):
    """Lower (skipping combinations the chip rejects), run, compare with the references."""
    try:
        program = isa.lower(graph, chip)
    except isa.UnsupportedError:
        assume(False)
    res = sim.execute(program, chip, inputs)
    for name, want in evaluate(graph, inputs, chip).items():
        got = res.outputs[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        if dtypes.is_float(dtypes.of_array(want)):
            got, want = got.astype(np.float64), want.astype(np.float64)
        np.testing.assert_array_equal(got, want, err_msg=name)
    assert sim.execute(program, chip, mode="timing").cycles == res.cycles
    return res.outputs


@st.composite
def shapes(draw, count=1, rank=None):
    rank = rank or draw(st.integers(1, 4))
    out = draw(st.lists(st.integers(1, 7), min_size=rank, max_size=rank))
    return [tuple(out)] + [tuple(d if draw(st.booleans()) else 1 for d in out) for _ in range(count - 1)]


# op -> (tensor operand count, candidate input dtypes, extra params strategy, builder(graph tensors, params))
TENSOR_TENSOR = {
    "add": NUMERIC, "sub": NUMERIC, "mul": NUMERIC, "max": NUMERIC, "min": NUMERIC, "div": ("float32", "float16", "bfloat16"),
    "gt": NUMERIC, "ge": NUMERIC, "lt": NUMERIC, "le": NUMERIC, "eq": NUMERIC, "ne": NUMERIC,
    "bit_and": INTS, "bit_or": INTS, "bit_xor": INTS,
}
TENSOR_SCALAR = {
    "adds": NUMERIC, "subs": NUMERIC, "muls": NUMERIC, "maxs": NUMERIC, "mins": NUMERIC, "divs": ("float32", "float16"),
    "gts": NUMERIC, "ges": NUMERIC, "lts": NUMERIC, "les": NUMERIC, "eqs": NUMERIC, "nes": NUMERIC,
    "bit_ands": INTS, "bit_ors": INTS, "bit_xors": INTS,
}
SCALAR_TENSOR = {"rsubs": NUMERIC, "rdivs": ("float32", "float16")}
UNARY = {"ceil": ("float32", "float16"), "floor": ("float32", "float16"), "round": ("float32", "float16"),
         "sin": ("float32",), "cos": ("float32",), "copy": NUMERIC}


def scalar_for(draw, dtype):
    if dtypes.is_int(dtype):
        return draw(st.integers(-200, 200))
    return draw(st.floats(-50, 50, allow_nan=False, width=32).filter(lambda v: v != 0))


def out_dtype_for(draw, dtype, ints_may_change=True):
    """The input dtype, or (for small integers) another small integer type: mixed types."""
    if dtype in SMALL_INTS and ints_may_change and draw(st.booleans()):
        return draw(st.sampled_from(SMALL_INTS))
    return None


@pytest.mark.parametrize("chip, op", supported(sorted(TENSOR_TENSOR)))
@SETTINGS
@given(data=st.data())
def test_tensor_tensor_ops(chip, op, data):
    dtype = data.draw(st.sampled_from(TENSOR_TENSOR[op]))
    a_shape, b_shape = data.draw(shapes(2))
    if data.draw(st.booleans()):
        a_shape, b_shape = b_shape, a_shape
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    g = isa.Graph("t")
    a, b = g.input("a", a_shape, dtype), g.input("b", b_shape, dtype)
    cmp_or_bits = op in ("gt", "ge", "lt", "le", "eq", "ne") or op.startswith("bit")
    g.output(getattr(O, op)(a, b, out_dtype=out_dtype_for(data.draw, dtype, not cmp_or_bits)), "y")
    check(g, CHIPS[chip], {"a": values(rng, a_shape, dtype), "b": values(rng, b_shape, dtype)})


@pytest.mark.parametrize("chip, op", supported(sorted(TENSOR_SCALAR) + sorted(SCALAR_TENSOR)))
@SETTINGS
@given(data=st.data())
def test_tensor_scalar_ops(chip, op, data):
    table = {**TENSOR_SCALAR, **SCALAR_TENSOR}
    dtype = data.draw(st.sampled_from(table[op]))
    (shape,) = data.draw(shapes())
    scalar = scalar_for(data.draw, dtype)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    g = isa.Graph("t")
    x = g.input("x", shape, dtype)
    args = (scalar, x) if op in SCALAR_TENSOR else (x, scalar)
    g.output(getattr(O, op)(*args, out_dtype=out_dtype_for(data.draw, dtype, op[:-1] in ("add", "sub", "mul", "rsub"))), "y")
    check(g, CHIPS[chip], {"x": values(rng, shape, dtype)})


@pytest.mark.parametrize("chip, op", supported(sorted(UNARY)))
@SETTINGS
@given(data=st.data())
def test_unary_ops(chip, op, data):
    dtype = data.draw(st.sampled_from(UNARY[op]))
    (shape,) = data.draw(shapes())
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    g = isa.Graph("t")
    g.output(getattr(O, op)(g.input("x", shape, dtype)), "y")
    check(g, CHIPS[chip], {"x": values(rng, shape, dtype)})


@pytest.mark.parametrize("chip", having("clamp"))
@SETTINGS
@given(data=st.data())
def test_axpy_and_clamp(chip, data):
    dtype = data.draw(st.sampled_from(NUMERIC))
    shape, y_shape = data.draw(shapes(2))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    lo, hi = sorted((scalar_for(data.draw, dtype), scalar_for(data.draw, dtype)))
    g = isa.Graph("t")
    x = g.input("x", shape, dtype)
    g.output(O.clamp(x, lo, hi), "clamped")
    if dtypes.is_float(dtype):
        g.output(O.axpy(x, scalar_for(data.draw, dtype), g.input("y", y_shape, dtype)), "axpy")
    inputs = {"x": values(rng, shape, dtype)}
    if dtypes.is_float(dtype):
        inputs["y"] = values(rng, y_shape, dtype)
    check(g, CHIPS[chip], inputs)


@pytest.mark.parametrize("chip", having("cast"))
@SETTINGS
@given(data=st.data(), src=st.sampled_from(NUMERIC), dst=st.sampled_from(NUMERIC))
def test_cast(chip, data, src, dst):
    (shape,) = data.draw(shapes())
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    g = isa.Graph("t")
    g.output(O.cast(g.input("x", shape, src), out_dtype=dst), "y")
    x = values(rng, shape, src) * (100 if dtypes.is_float(src) else 1)
    check(g, CHIPS[chip], {"x": x.astype(dtypes.np_dtype(src))})


FIXED = {"mul_shift": 2, "add_shift": 2, "sub_shift": 2, "muls_shift": 1, "adds_shift": 1, "subs_shift": 1, "rsubs_shift": 1}


@pytest.mark.parametrize("chip, op", supported(sorted(FIXED)))
@SETTINGS
@given(data=st.data())
def test_fixed_point_ops(chip, op, data):
    a_dtype, b_dtype = data.draw(st.sampled_from(SMALL_INTS)), data.draw(st.sampled_from(SMALL_INTS))
    out = data.draw(st.sampled_from(SMALL_INTS))
    shift = data.draw(st.integers(0, 12))
    a_shape, b_shape = data.draw(shapes(2))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    g = isa.Graph("t")
    a = g.input("a", a_shape, a_dtype)
    inputs = {"a": values(rng, a_shape, a_dtype)}
    if FIXED[op] == 2:
        args = (a, g.input("b", b_shape, b_dtype))
        inputs["b"] = values(rng, b_shape, b_dtype)
    else:
        scalar = data.draw(st.integers(-128, 127))
        args = (scalar, a) if op == "rsubs_shift" else (a, scalar)
    g.output(getattr(O, op)(*args, shift, out_dtype=out), "y")
    check(g, CHIPS[chip], inputs)


SHIFTS = ("arith_lshift", "arith_rshift", "round_rshift", "arith_lshifts", "arith_rshifts", "round_rshifts")


@pytest.mark.parametrize("chip, op", supported(SHIFTS))
@SETTINGS
@given(data=st.data())
def test_bit_shifts(chip, op, data):
    dtype = data.draw(st.sampled_from(("int16", "uint16", "int32")))
    count_dtype = "int32" if dtype == "int32" else "int16"
    x_shape, n_shape = data.draw(shapes(2))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    g = isa.Graph("t")
    x = g.input("x", x_shape, dtype)
    inputs = {"x": values(rng, x_shape, dtype)}
    if op.endswith("s"):
        count = data.draw(st.integers(-20, 20))
    else:
        count = g.input("n", n_shape, count_dtype)
        inputs["n"] = values(rng, n_shape, count_dtype, -20, 20)
    out = data.draw(st.sampled_from((None, "int8", "int16"))) if op.startswith("round") and dtype != "uint16" else None
    g.output(getattr(O, op)(x, count, out_dtype=out), "y")
    check(g, CHIPS[chip], inputs)


ROUNDINGS = list(dtypes.ROUNDING)


@pytest.mark.parametrize("chip, op", supported(["arithmetic_shift", "arithmetic_pc_shift", "logical_shift", "logical_pc_shift"]))
@SETTINGS
@given(data=st.data(), mode=st.sampled_from(ROUNDINGS))
def test_rounding_shifts(chip, op, data, mode):
    unsigned = ("uint8", "uint16", "uint32")
    dtype = data.draw(st.sampled_from(unsigned if op.startswith("logical") else INTS + ("uint32",)))
    (shape,) = data.draw(shapes(rank=data.draw(st.integers(2, 4))))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    g = isa.Graph("t")
    x = g.input("x", shape, dtype)
    inputs = {"x": values(rng, shape, dtype)}
    if op.endswith("pc_shift"):
        count = g.input("s", (shape[0],), "int8")
        inputs["s"] = values(rng, (shape[0],), "int8", -9, 9)
    else:
        count = data.draw(st.integers(-12, 12))
    g.output(getattr(O, op)(x, count, mode), "y")
    check(g, CHIPS[chip], inputs)


STRIDE = ["stride_add", "stride_sub", "stride_mul", "stride_div", "stride_max", "stride_min", "stride_cpy"]


@pytest.mark.parametrize("chip, op", supported(STRIDE + [f"{s}_offset" for s in STRIDE]))
@SETTINGS
@given(data=st.data())
def test_stride_ops(chip, op, data):
    dtype = data.draw(st.sampled_from(("float32", "float16", "int8", "int16") if "div" not in op else ("float32", "float16")))
    rank = data.draw(st.integers(1, 4))
    stride = data.draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
    offset = [data.draw(st.integers(0, 2)) if "offset" in op else 0 for _ in range(rank)]
    full = [data.draw(st.integers(o + 1, o + 9)) for o in offset]
    other = [n if data.draw(st.booleans()) else 1 for n in full]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    g = isa.Graph("t")
    a = g.input("a", full, dtype)
    inputs = {"a": values(rng, full, dtype)}
    args = [a]
    if "cpy" not in op:
        args.append(g.input("b", other, dtype))
        inputs["b"] = values(rng, other, dtype)
    args.append(stride)
    if "offset" in op:
        args.append(offset)
    y = getattr(O, op)(*args)
    g.output(y, "y")
    g.output(O.adds(y, 1 if dtypes.is_int(dtype) else 1.0), "fused")  # a local op may follow a stride op
    check(g, CHIPS[chip], inputs)


@pytest.mark.parametrize("chip", having("select"))
@SETTINGS
@given(data=st.data(), dtype=st.sampled_from(("float32", "float16", "int8", "uint8")),
       kind=st.sampled_from(["GREATER_THAN", "GREATER_EQUAL"]))
def test_select_ops(chip, data, dtype, kind):
    a_shape, b_shape = data.draw(shapes(2))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    g = isa.Graph("t")
    a, b = g.input("a", a_shape, dtype), g.input("b", b_shape, dtype)
    c = g.input("c", a_shape, dtype)
    d = g.constant("d", values(rng, (1,), dtype))  # a one-element COEFF_TENSOR
    g.output(O.select(a, b, c, d, kind), "sel")
    g.output(O.condition_select(a, c, d), "cond")
    check(g, CHIPS[chip], {"a": values(rng, a_shape, dtype), "b": values(rng, b_shape, dtype), "c": values(rng, a_shape, dtype)})


@pytest.mark.parametrize("chip", having("lut"))
@SETTINGS
@given(data=st.data(), index=st.sampled_from(("int8", "uint8")), table=st.sampled_from(("int8", "uint8", "float32")))
def test_lut(chip, data, index, table):
    (shape,) = data.draw(shapes())
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    g = isa.Graph("t")
    g.output(O.lut(g.input("x", shape, index), g.constant("table", values(rng, (256,), table))), "y")
    check(g, CHIPS[chip], {"x": values(rng, shape, index)})


@pytest.mark.parametrize("chip", having("requant_fp32_to_int"))
@SETTINGS
@given(data=st.data(), mode=st.sampled_from([0, 1]), pc=st.booleans(), out=st.sampled_from(SMALL_INTS))
def test_requant_fp32_to_int(chip, data, mode, pc, out):
    (shape,) = data.draw(shapes(rank=data.draw(st.integers(2, 4))))
    src = "float32" if mode == 0 else data.draw(st.sampled_from(("int32", "int16", "uint16")))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    c = shape[1]
    g = isa.Graph("t")
    kwargs = {"mode": mode, "out_dtype": out}
    if pc:
        kwargs.update(is_scale_pc=True, scale_vec=list(rng.uniform(-3, 3, c)), is_offset_pc=True)
        kwargs["offset_vec" if mode == 0 else "offset_fp_vec"] = (list(rng.integers(-50, 50, c)) if mode == 0
                                                                  else list(rng.uniform(-50, 50, c)))
    else:
        kwargs.update(scale_val=float(rng.uniform(-3, 3)), offset_val=int(rng.integers(-50, 50)), offset_fp_val=float(rng.uniform(-50, 50)))
    g.output(O.requant_fp32_to_int(g.input("x", shape, src), **kwargs), "y")
    check(g, CHIPS[chip], {"x": values(rng, shape, src) * (40 if src == "float32" else 1)})


@pytest.mark.parametrize("chip", having("requant_int32"))
@SETTINGS
@given(data=st.data(), mode=st.sampled_from([0, 1, 2]), pc=st.booleans(), out=st.sampled_from(("int8", "int16", "int32")))
def test_requant_int32(chip, data, mode, pc, out):
    (shape,) = data.draw(shapes(rank=data.draw(st.integers(2, 4))))
    src = data.draw(st.sampled_from(INTS))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    c = shape[1]
    g = isa.Graph("t")
    kwargs = {"mode": mode, "out_dtype": out}
    mult = lambda n: rng.integers(-(2**31), 2**31 - 1, n) if mode < 2 else rng.integers(-300, 300, n)  # noqa: E731
    if pc:
        kwargs.update(is_mul_shift_pc=True, multiplier_vec=[int(m) for m in mult(c)], scale_vec=[int(s) for s in rng.integers(-8, 6, c)],
                      is_offset_pc=True, offset_vec=[int(o) for o in rng.integers(-100, 100, c)])
    else:
        kwargs.update(multiplier_val=int(mult(1)[0]), scale_val=int(rng.integers(-8, 6)), offset_val=int(rng.integers(-100, 100)))
    g.output(O.requant_int32(g.input("x", shape, src), **kwargs), "y")
    check(g, CHIPS[chip], {"x": values(rng, shape, src)})


@pytest.mark.parametrize("chip", having("dequant_int_to_fp32"))
@SETTINGS
@given(data=st.data(), mode=st.sampled_from([0, 1]), pc=st.booleans(), src=st.sampled_from(SMALL_INTS))
def test_dequant(chip, data, mode, pc, src):
    (shape,) = data.draw(shapes(rank=data.draw(st.integers(2, 4))))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    c = shape[1]
    kwargs = {"mode": mode}
    if pc:
        kwargs.update(is_scale_pc=True, scale_vec=list(rng.uniform(0, 1, c)), is_offset_pc=True)
        kwargs["offset_vec" if mode == 0 else "offset_fp_vec"] = ([int(v) for v in rng.integers(-9, 9, c)] if mode == 0
                                                                  else list(rng.uniform(-9, 9, c)))
    else:
        kwargs.update(scale_val=0.125, offset_val=3, offset_fp_val=2.75)
    g = isa.Graph("t")
    g.output(O.dequant_int_to_fp32(g.input("x", shape, src), **kwargs), "y")
    check(g, CHIPS[chip], {"x": values(rng, shape, src)})


def test_dequant_mode_picks_the_integer_or_the_float_offset_of_the_shared_struct():
    """(x - offset) * scale: mode 0 subtracts offset_val, mode 1 offset_fp_val (the seed's struct
    carries both, as requant_fp32_to_int's does), worked out by hand."""
    x = np.array([[-4, 0, 7, 100]], np.int8)
    build = lambda mode: lambda g: O.dequant_int_to_fp32(g.input("x", x.shape, "int8"), scale_val=0.5, offset_val=3,  # noqa: E731
                                                         offset_fp_val=1.5, mode=mode)
    np.testing.assert_array_equal(run1(build(0), {"x": x}), np.array([[-3.5, -1.5, 2.0, 48.5]], np.float32))
    np.testing.assert_array_equal(run1(build(1), {"x": x}), np.array([[-2.75, -0.75, 2.75, 49.25]], np.float32))


# ---- the seed's semantics on numbers worked out by hand --------------------------------------

def run1(build, inputs, chip="generic"):
    g = isa.Graph("t")
    g.output(build(g), "y")
    return sim.run(g, chip, inputs).outputs["y"]


def test_round_right_shift_rounds_half_up_and_ignores_non_positive_counts():
    x = np.array([[5, -5, 6, -6, 7, -7, 100]], np.int16)
    n = np.array([[1, 1, 2, 2, 0, -3, 3]], np.int16)
    # (5+1)>>1=3, (-5+1)>>1=-2, (6+2)>>2=2, (-6+2)>>2=-1, 7, -7 (count <= 0), (100+4)>>3=13
    out = run1(lambda g: O.round_rshift(g.input("x", x.shape, "int16"), g.input("n", n.shape, "int16")), {"x": x, "n": n})
    np.testing.assert_array_equal(out, [[3, -2, 2, -1, 7, -7, 13]])


def test_arith_shifts_take_negative_counts_the_other_way_and_saturate():
    x = np.array([[1, -1, 3, -8, 30000]], np.int16)
    n = np.array([[3, 3, -1, -2, 4]], np.int16)
    out = run1(lambda g: O.arith_lshift(g.input("x", x.shape, "int16"), g.input("n", n.shape, "int16")), {"x": x, "n": n})
    np.testing.assert_array_equal(out, [[8, -8, 1, -2, 32767]])  # 3>>1 = 1, -8>>2 = -2, 30000<<4 saturates


def test_every_rounding_mode_of_arithmetic_shift():
    x = np.array([[5, -5, 7, -7, 6, -6]], np.int32)  # divided by 2: 2.5 -2.5 3.5 -3.5 3 -3
    want = {
        "ROUNDING_HALF_TO_EVEN": [2, -2, 4, -4, 3, -3],
        "ROUNDING_HALF_AWAY_FROM_ZERO": [3, -3, 4, -4, 3, -3],
        "ROUNDING_TOWARDS_ZERO": [2, -2, 3, -3, 3, -3],
        "ROUNDING_DOWN": [2, -3, 3, -4, 3, -3],
        "ROUNDING_UP": [3, -2, 4, -3, 3, -3],
        "ROUNDING_HALF_UP": [3, -2, 4, -3, 3, -3],
        "ROUNDING_HALF_DOWN": [2, -3, 3, -4, 3, -3],
    }
    for mode, expected in want.items():
        out = run1(lambda g: O.arithmetic_shift(g.input("x", x.shape, "int32"), -1, mode), {"x": x})  # noqa: B023
        np.testing.assert_array_equal(out, [expected], err_msg=mode)


def test_fixed_point_keeps_an_int32_intermediate_and_rounds_half_up():
    a = np.array([[100, -100, 127, -128]], np.int8)
    b = np.array([[100, 100, 127, 127]], np.int8)
    out = run1(lambda g: O.mul_shift(g.input("a", a.shape, "int8"), g.input("b", b.shape, "int8"), 6, out_dtype="int16"), {"a": a, "b": b})
    # 10000/64 = 156.25 -> 156; -10000/64 = -156.25 -> -156; 16129/64 = 252.02 -> 252; -16256/64 = -254
    np.testing.assert_array_equal(out, [[156, -156, 252, -254]])
    out = run1(lambda g: O.mul_shift(g.input("a", a.shape, "int8"), g.input("b", b.shape, "int8"), 6, out_dtype="int8"), {"a": a, "b": b})
    np.testing.assert_array_equal(out, [[127, -128, 127, -128]])  # saturates to the output


def vector_fns(graph, chip):
    program = isa.lower(graph, chips.load(chip))
    return [i.fn for stream in program.streams.values() for i in stream if i.kind == "vector"]


def test_fixed_point_is_one_instruction_where_its_int32_intermediate_cannot_saturate():
    """int16 x int8 cannot leave INT32: the multiply and its rounding shift are one `mul_rshift`
    (BM1684X's integer multiply takes the shift), an add with no shift one `add`; int32 operands
    can overflow it, and there the intermediate still saturates before the shift."""
    a = np.array([[300, -300, 32767, -32768]], np.int16)
    b = np.array([[100, 100, 127, 127]], np.int8)

    def build(op, shift):
        return lambda g: getattr(O, op)(g.input("a", a.shape, "int16"), g.input("b", b.shape, "int8"), shift, out_dtype="int16")

    # 30000/128 = 234.375 -> 234; -234.375 -> -234 (half up); 4161409/128 = 32511.01 -> 32511; -4161536/128 = -32512
    np.testing.assert_array_equal(run1(build("mul_shift", 7), {"a": a, "b": b}), [[234, -234, 32511, -32512]])
    np.testing.assert_array_equal(run1(build("add_shift", 0), {"a": a, "b": b}), [[400, -200, 32767, -32641]])
    g = isa.Graph("t")
    g.output(build("mul_shift", 7)(g), "y")
    assert vector_fns(g, "bm1686") == ["mul_rshift"]
    g = isa.Graph("t")
    g.output(build("add_shift", 0)(g), "y")
    assert vector_fns(g, "bm1686") == ["add"]
    x = np.array([[2**20, -(2**20), 3]], np.int32)
    y = np.array([[2**20, 2**20, 5]], np.int32)
    wide = lambda g: O.mul_shift(g.input("x", x.shape, "int32"), g.input("y", y.shape, "int32"), 16, out_dtype="int32")  # noqa: E731
    # 2^40 saturates to 2^31 - 1 first: (2^31 - 1 + 2^15) >> 16 = 32768, not 2^24; -2^40 to -2^31: -32768
    np.testing.assert_array_equal(run1(wide, {"x": x, "y": y}), [[32768, -32768, 0]])
    g = isa.Graph("t")
    g.output(wide(g), "y")
    assert vector_fns(g, "generic") == ["mul", "rshift"]


def test_requant_int32_mode0_by_hand():
    # 1000 * 1073741824 >> 31 = 500 (half up); shift -2: 500/4 = 125; + offset 3 = 128 -> int8 127
    x = np.array([[1000, -1000, 7], [5, -5, 0]], np.int32).reshape(2, 3)
    out = run1(lambda g: O.requant_int32(g.input("x", x.shape, "int32"), multiplier_val=2**30, scale_val=-2, offset_val=3), {"x": x})
    # -1000 -> -500 -> -125 + 3 = -122; 7 -> 3.5 -> 4 (half up) -> 1 (4/4) + 3 = 4; 5 -> 2.5 -> 3 -> 0.75 -> 1 + 3 = 4
    # -5 -> -2.5 -> -2 (half up) -> -0.5 -> -1 (half away from zero) + 3 = 2; 0 -> 3
    np.testing.assert_array_equal(out, [[127, -122, 4], [4, 2, 3]])


def test_division_by_zero_follows_ieee():
    """The seed is silent: x/0 is inf, 0/0 NaN (floats); into an integer, inf saturates and NaN is 0."""
    x = np.array([[1.0, -1.0, 0.0]], np.float32)
    y = np.zeros((1, 3), np.float32)
    out = run1(lambda g: O.div(g.input("x", x.shape), g.input("y", y.shape)), {"x": x, "y": y}, "bm1684")
    np.testing.assert_array_equal(out, [[np.inf, -np.inf, np.nan]])
    out = run1(lambda g: O.cast(O.div(g.input("x", x.shape), g.input("y", y.shape)), out_dtype="int8"), {"x": x, "y": y})
    np.testing.assert_array_equal(out, [[127, -128, 0]])


def test_nan_compares_false_and_relu_keeps_it():
    x = np.array([[np.nan, 1.0, -1.0]], np.float32)
    out = run1(lambda g: O.gts(g.input("x", x.shape), 0.0), {"x": x}, "bm1684")
    np.testing.assert_array_equal(out, [[0, 1, 0]])


def test_lut_indexes_int8_by_its_bits():
    x = np.array([[0, 1, -1, -128, 127]], np.int8)
    table = np.arange(256, dtype=np.float32) * 2
    out = run1(lambda g: O.lut(g.input("x", x.shape, "int8"), g.constant("t", table)), {"x": x}, "bm1684")
    np.testing.assert_array_equal(out, [[0, 2, 510, 256, 254]])


def test_cast_rounds_half_away_and_saturates():
    x = np.array([[0.5, -0.5, 1.5, -2.5, 300.0, -300.0]], np.float32)
    out = run1(lambda g: O.cast(g.input("x", x.shape), out_dtype="int8"), {"x": x}, "bm1684")
    np.testing.assert_array_equal(out, [[1, -1, 2, -3, 127, -128]])


def test_stride_ops_pick_every_kth_element_from_the_offset():
    a = np.arange(12, dtype=np.float32).reshape(2, 6)
    b = np.full((1, 6), 100, np.float32)  # broadcast along dimension 0, stride applied in dimension 1
    out = run1(lambda g: O.stride_add_offset(g.input("a", a.shape), g.input("b", b.shape), [1, 2], [1, 1]), {"a": a, "b": b})
    np.testing.assert_array_equal(out, [[107, 109, 111]])  # row 1 of a at columns 1, 3, 5, plus b at the same


# ---- what each chip accepts -------------------------------------------------------------------

@pytest.mark.parametrize("chip", CHIPS)
def test_every_same_dtype_use_is_accepted_exactly_when_the_table_says(chip):
    """For each simple op and every dtype: lowering accepts it iff the chip's row lists it, and a
    rejection names the op, the dtype, the chip and what is supported."""
    c = CHIPS[chip]
    for op in sorted(TENSOR_TENSOR) + sorted(TENSOR_SCALAR) + sorted(UNARY):
        row = c.support(op)
        if row is not None and row.signatures:
            continue  # per-operand rules: tests/test_chip_tables.py checks those
        own = isa.ops.REGISTRY[op].dtypes_allowed
        for dtype in NUMERIC:
            if own is not None and dtype not in own:
                continue  # the op itself refuses it, on any chip
            g = isa.Graph("t")
            x = g.input("x", (2, 3), dtype)
            args = (x, g.input("y", (2, 3), dtype)) if op in TENSOR_TENSOR else (x, 1) if op in TENSOR_SCALAR else (x,)
            g.output(getattr(O, op)(*args), "z")
            if row is not None and (row.dtypes is None or dtype in row.dtypes):
                isa.lower(g, c)
                continue
            with pytest.raises(isa.UnsupportedError) as info:
                isa.lower(g, c)
            message = str(info.value)
            assert op in message and dtype in message and f"chip {chip}" in message, message
            assert "not supported" in message and ("same-dtype:" in message or row is None), message


def test_constants_may_stand_on_either_side():
    x = np.array([[1.0, -2.0, 3.0]], np.float32)
    coeff = np.array([[10.0, 20.0, 30.0]], np.float32)
    g = isa.Graph("t")
    t = g.input("x", x.shape)
    g.output(O.sub(coeff, t), "left")  # a numpy array becomes a COEFF_TENSOR constant
    g.output(O.sub(t, g.constant("c", coeff)), "right")
    out = sim.run(g, "bm1684", {"x": x}).outputs
    np.testing.assert_array_equal(out["left"], coeff - x)
    np.testing.assert_array_equal(out["right"], x - coeff)
