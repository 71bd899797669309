"""masked_fill (seed 000, Ascend ATB FillOperation with withMask=true) on the vector unit: the
seed's examples, random shapes, broadcasts, dtypes and values against numpy, on every chip that
has the op, the same cycles in timing mode, what a run-time mask other than 0/1 does, and every
documented limit."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import chips
import isa
import sim
from isa import dtypes
from isa.instructions import Vector

O = isa.ops
GENERIC = chips.load("generic")
ASCEND = chips.load("ascend310b")
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SEED_X = np.arange(1, 10).reshape(3, 3)
SEED_MASK = np.array([[True, False, True], [False, True, True], [True, True, False]])


def run(chip, x, mask, value, constant_mask=False):
    g = isa.Graph("t")
    xt = g.input("x", x.shape, dtypes.of_array(x))
    m = mask if constant_mask else g.input("m", mask.shape, dtypes.of_array(mask))
    g.output(O.masked_fill(xt, m, value), "y")
    inputs = {"x": x} if constant_mask else {"x": x, "m": mask}
    res = sim.run(g, chip, inputs)
    assert sim.run(g, chip, mode="timing").cycles == res.cycles
    return res


@pytest.mark.parametrize("chip", [GENERIC, ASCEND], ids=["generic", "ascend310b"])
@pytest.mark.parametrize("dtype", ["float16", "int32", "bfloat16"])
def test_seed_examples(chip, dtype):
    x = SEED_X.astype(dtypes.np_dtype(dtype))
    example1 = run(chip, x, SEED_MASK, [-1]).outputs["y"]
    np.testing.assert_array_equal(example1, [[-1, 2, -1], [4, -1, -1], [-1, -1, 9]])
    assert example1.dtype == x.dtype
    example2 = run(chip, x, np.array([1, 0, 1], np.int8), -1, constant_mask=True).outputs["y"]  # broadcast
    np.testing.assert_array_equal(example2, [[-1, 2, -1], [-1, 5, -1], [-1, 8, -1]])


def test_runs_on_the_vector_unit_one_select_for_a_bool_mask():
    res = run(ASCEND, SEED_X.astype(np.float16), SEED_MASK, 0.5)
    vector = [i for i in res.program.streams["vector"] if isinstance(i, Vector)]
    assert [i.fn for i in vector] == ["select_gt"] and vector[0].dst.mem == "ub"
    np.testing.assert_array_equal(res.outputs["y"], np.where(SEED_MASK, np.float16(0.5), SEED_X.astype(np.float16)))


def test_a_run_time_mask_other_than_0_and_1_fills_where_nonzero():
    """The seed allows 0 and 1 only; the machine reads any nonzero int8 as 1."""
    mask = np.array([[0, -1, 2], [1, 0, 127], [-128, 0, 1]], np.int8)
    got = run(GENERIC, SEED_X.astype(np.int32), mask, 100).outputs["y"]
    np.testing.assert_array_equal(got, [[1, 100, 100], [100, 5, 100], [100, 8, 100]])


@st.composite
def cases(draw, chip):
    row = chip.support("masked_fill")
    if row.dtypes is None:
        x_dtypes, mask_dtypes = O.REGISTRY["masked_fill"].X_DTYPES, O.REGISTRY["masked_fill"].MASK_DTYPES
    else:
        x_dtypes = sorted({d for sig in row.signatures for d in sig.inputs[0]})
        mask_dtypes = sorted({d for sig in row.signatures for d in sig.inputs[1]})
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=rank, max_size=rank)))
    mask_rank = draw(st.integers(1, rank))
    mask_shape = tuple(d if draw(st.booleans()) else 1 for d in shape[rank - mask_rank:])
    x_dtype, mask_dtype = draw(st.sampled_from(x_dtypes)), draw(st.sampled_from(mask_dtypes))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if x_dtype == "int32":
        x = rng.integers(-(2**31), 2**31, shape, dtype=np.int64).astype(np.int32)  # exact: not through float32
        value = draw(st.integers(-(2**31), 2**31 - 1))
    else:
        x = (rng.standard_normal(shape) * 1000).astype(dtypes.np_dtype(x_dtype))
        value = float(np.asarray(draw(st.floats(-1e4, 1e4, width=16)), dtypes.np_dtype(x_dtype)))  # representable
    mask = rng.integers(0, 2, mask_shape).astype(dtypes.np_dtype(mask_dtype))
    return x, mask, value


@pytest.mark.parametrize("chip", [GENERIC, ASCEND], ids=["generic", "ascend310b"])
@SETTINGS
@given(data=st.data())
def test_random(chip, data):
    x, mask, value = data.draw(cases(chip))
    got = run(chip, x, mask, value, constant_mask=data.draw(st.booleans())).outputs["y"]
    want = np.where(mask.astype(bool), np.asarray(value).astype(x.dtype), x)
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got, want)


def test_fuses_after_an_element_wise_op():
    """A local element-wise op: the sum never leaves local memory before the fill."""
    g = isa.Graph("t")
    a, b = g.input("a", (4, 8), "float16"), g.input("b", (4, 8), "float16")
    g.output(O.masked_fill(O.add(a, b), g.input("m", (8,), "bool"), 7.0), "y")
    av, bv = np.ones((4, 8), np.float16), np.full((4, 8), 2, np.float16)
    mask = np.arange(8) % 3 == 0
    res = sim.run(g, GENERIC, {"a": av, "b": bv, "m": mask})
    np.testing.assert_array_equal(res.outputs["y"], np.where(mask, np.float16(7), np.float16(3)) * np.ones((4, 1), np.float16))
    assert sum(1 for e in res.trace.events if e.kind == "dma" and e.dst == "ddr") == 1


# ---- every limit ---------------------------------------------------------------------------

def test_limits():
    g = isa.Graph("t")
    x = g.input("x", (3, 4), "float16")
    with pytest.raises(isa.ShapeError, match=r"masked_fill: shapes \(3, 4\), \(1, 3\) do not broadcast"):
        O.masked_fill(x, g.input("m1", (3,), "bool"), 1)
    with pytest.raises(isa.ShapeError, match=r"masked_fill: mask \(2, 3, 4\) has more dimensions than x \(3, 4\); x is never broadcast"):
        O.masked_fill(x, g.input("m2", (2, 3, 4), "bool"), 1)
    with pytest.raises(isa.ShapeError, match=r"masked_fill: mask \(3, 1\) would broadcast x \(1, 4\) to \(3, 4\); x is never broadcast"):
        O.masked_fill(g.input("x1", (1, 4), "float16"), g.input("m3", (3, 1), "bool"), 1)
    with pytest.raises(isa.ShapeError, match=r"masked_fill: value must hold exactly one element "
                                             r"\(the seed: value.size\(\) == 1\), got 2: \[1, 2\]"):
        O.masked_fill(x, g.input("m4", (4,), "bool"), [1, 2])
    with pytest.raises(isa.UnsupportedError, match=r"masked_fill: x: dtype float32 is not supported "
                                                   r"\(supported: float16, int32, bfloat16\)"):
        O.masked_fill(g.input("x2", (3, 4), "float32"), g.input("m5", (4,), "bool"), 1)
    with pytest.raises(isa.UnsupportedError, match=r"masked_fill: mask: dtype uint8 is not supported \(supported: int8, bool\)"):
        O.masked_fill(x, g.input("m6", (4,), "uint8"), 1)
    with pytest.raises(isa.UnsupportedError, match=r"masked_fill: mask may hold only 0 and 1 \(the seed\), got 2 among its values"):
        O.masked_fill(x, np.array([0, 1, 2, 1], np.int8), 1)
    with pytest.raises(isa.UnsupportedError, match=r"masked_fill: value must be an integer in "
                                                   r"\[-2147483648, 2147483647\] for int32, got 1.5"):
        O.masked_fill(g.input("x3", (3, 4), "int32"), g.input("m7", (4,), "bool"), 1.5)
    with pytest.raises(isa.UnsupportedError, match=r"masked_fill: value 1000000.0 overflows float16"):
        O.masked_fill(x, g.input("m8", (4,), "bool"), 1e6)
    with pytest.raises(isa.UnsupportedError, match=r"masked_fill: the output has x's dtype float16, out_dtype float32 asked"):
        O.masked_fill(x, g.input("m9", (4,), "bool"), 1, out_dtype="float32")
