"""masked_select, index_select and where on the scalar engine: the seed's examples, the
data-dependent output shapes (trimmed outputs, the trace's note), the mask's broadcast forms,
random cases against the references on every chip, run-time and build-time index checks, and
every constraint violated once."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from refeval import evaluate

import chips
import isa
import sim

O = isa.ops
CHIPS = {name: chips.load(name) for name in ("generic", "bm1682", "bm1684", "bm1686")}
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run(build, inputs, chip="generic"):
    """Run the graph with output y = build(g); returns (result, the reference's y)."""
    g = isa.Graph("t")
    g.output(build(g), "y")
    res = sim.run(g, chip, inputs)
    assert sim.run(g, chip, mode="timing").cycles == res.cycles
    return res, evaluate(g, inputs, CHIPS[chip])["y"]


def notes(res):
    return [e.note for e in res.trace.events if e.note]


def expected_cycles(chip, work):
    arm = CHIPS[chip].engines_of("scalar")[0]
    return arm.issue_latency + math.ceil(arm.scalar.per_element * work)


# ---- the seed's examples -----------------------------------------------------------------------

SEED_X = np.array([[0.1427, 0.0231, -0.5414, -1.0009],
                   [-0.4664, 0.2647, -0.1228, -1.1068],
                   [-1.1734, -0.6571, 0.7230, -0.6004]], np.float32)


@pytest.mark.parametrize("chip", list(CHIPS))
@pytest.mark.parametrize("dim, want", [
    (0, [[0.1427, 0.0231, -0.5414, -1.0009], [-1.1734, -0.6571, 0.7230, -0.6004]]),
    (1, [[0.1427, -0.5414], [-0.4664, -0.1228], [-1.1734, 0.7230]]),
])
def test_index_select_gives_the_seeds_example(chip, dim, want):
    index = np.array([0, 2], np.int32)
    res, ref = run(lambda g: O.index_select(g.input("x", SEED_X.shape), g.input("i", (2,), "int32"), dim),
                   {"x": SEED_X, "i": index}, chip)
    np.testing.assert_array_equal(res.outputs["y"], np.array(want, np.float32))
    np.testing.assert_array_equal(ref, np.array(want, np.float32))


@pytest.mark.parametrize("chip", list(CHIPS))
def test_where_gives_the_seeds_example_and_notes_the_shape_produced(chip):
    x = np.array([[0, 1, 1], [1, 0, 0]], np.float32)
    res, ref = run(lambda g: O.where(g.input("x", x.shape)), {"x": x}, chip)
    assert res.outputs["y"].shape == (3, 2) and res.outputs["y"].dtype == np.int32
    np.testing.assert_array_equal(res.outputs["y"], [[0, 1], [0, 2], [1, 0]])
    np.testing.assert_array_equal(ref, [[0, 1], [0, 2], [1, 0]])
    assert notes(res) == ["produced [3, 2] of at most [6, 2]"]


def test_where_of_all_zeros_is_empty_and_of_nan_counts_it_true():
    x = np.zeros((2, 3, 4), np.float32)
    res, _ = run(lambda g: O.where(g.input("x", x.shape)), {"x": x})
    assert res.outputs["y"].shape == (0, 3)
    assert notes(res) == ["produced [0, 3] of at most [24, 3]"]
    x = np.array([0, np.nan, -0.0, -2], np.float32)  # NaN is nonzero (numpy, tf.where); -0.0 is zero
    res, ref = run(lambda g: O.where(g.input("x", x.shape)), {"x": x})
    np.testing.assert_array_equal(res.outputs["y"], [[1], [3]])
    np.testing.assert_array_equal(ref, [[1], [3]])


def test_where_when_every_element_is_nonzero_fills_its_bound_without_a_note():
    x = np.ones((2, 2), np.float32)
    res, _ = run(lambda g: O.where(g.input("x", x.shape)), {"x": x})
    np.testing.assert_array_equal(res.outputs["y"], [[0, 0], [0, 1], [1, 0], [1, 1]])
    assert notes(res) == []


# ---- masked_select -----------------------------------------------------------------------------

@pytest.mark.parametrize("mask_shape", [(2, 5, 10, 1000), (1, 5, 10, 1000), (1, 1, 10, 1000), (1, 1, 1, 1000)])
def test_masked_select_takes_the_seeds_broadcast_forms(mask_shape):
    rng = np.random.default_rng(sum(mask_shape))
    x = rng.standard_normal((2, 5, 10, 1000)).astype(np.float32)
    mask = (rng.random(mask_shape) < 0.3).astype(np.float32)
    g = isa.Graph("t")
    g.output(O.masked_select(g.input("x", x.shape), g.input("m", mask_shape)), "y")
    res = sim.run(g, "bm1684", {"x": x, "m": mask})
    full = np.broadcast_to(mask, x.shape)
    np.testing.assert_array_equal(res.outputs["y"], x[full != 0])  # numpy's own boolean indexing
    assert notes(res) == [f"produced [{int(full.sum())}] of at most [{x.size}]"]


def test_masked_select_by_hand():
    x = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    mask = np.array([[0, 2.5, -1]], np.float32)  # any nonzero selects; broadcast over the rows
    res, ref = run(lambda g: O.masked_select(g.input("x", x.shape, "int32"), g.input("m", mask.shape)), {"x": x, "m": mask}, "bm1684")
    np.testing.assert_array_equal(res.outputs["y"], [2, 3, 5, 6])
    np.testing.assert_array_equal(ref, [2, 3, 5, 6])
    assert res.outputs["y"].dtype == np.int32  # tensor_i's dtype, whatever the mask's


@pytest.mark.parametrize("mask_shape", [(2, 1, 10, 1000), (1, 5, 10, 1), (10, 1000), (1, 2, 5, 10, 1000), (2, 5, 10, 999)])
def test_masked_select_rejects_other_broadcasts(mask_shape):
    g = isa.Graph("t")
    with pytest.raises(isa.ShapeError, match=r"masked_select: mask of shape .* does not broadcast to "
                                             r"tensor_i \(2, 5, 10, 1000\) in a form the seed allows"):
        O.masked_select(g.input("x", (2, 5, 10, 1000)), g.input("m", mask_shape))


# ---- random cases ------------------------------------------------------------------------------

def input_dtypes(row, position):
    """The dtypes a chip's row lets input `position` have; a few on generic."""
    if row.dtypes is None:
        return ["float32", "float16", "int32", "int8"]
    return sorted(set(row.dtypes).union(*(sig.inputs[position] for sig in row.signatures)))


def random_shape(data, low=1):
    return tuple(data.draw(st.integers(1, 5)) for _ in range(data.draw(st.integers(low, 4))))


def sparse(rng, shape, dtype):
    """Mostly zeros: each element nonzero with probability about 0.4."""
    x = rng.standard_normal(shape) * 10 * (rng.random(shape) < 0.4)
    return x.astype(dtype)


@pytest.mark.parametrize("chip", list(CHIPS))
@SETTINGS
@given(data=st.data())
def test_masked_select_random(chip, data):
    row = CHIPS[chip].support("masked_select")
    x_dtype, m_dtype = (data.draw(st.sampled_from(input_dtypes(row, i))) for i in (0, 1))
    shape = random_shape(data)
    lead = data.draw(st.integers(0, len(shape)))
    mask_shape = (1,) * lead + shape[lead:]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x, mask = np.clip(rng.standard_normal(shape) * 50, -127, 127).astype(x_dtype), sparse(rng, mask_shape, m_dtype)
    res, ref = run(lambda g: O.masked_select(g.input("x", shape, x_dtype), g.input("m", mask_shape, m_dtype)), {"x": x, "m": mask}, chip)
    np.testing.assert_array_equal(res.outputs["y"], ref)
    np.testing.assert_array_equal(ref, x[np.broadcast_to(mask, shape) != 0])
    assert res.outputs["y"].dtype == x.dtype


@pytest.mark.parametrize("chip", list(CHIPS))
@SETTINGS
@given(data=st.data())
def test_where_random(chip, data):
    dtype = data.draw(st.sampled_from(input_dtypes(CHIPS[chip].support("where"), 0)))
    shape = random_shape(data)
    x = sparse(np.random.default_rng(data.draw(st.integers(0, 2**16))), shape, dtype)
    res, ref = run(lambda g: O.where(g.input("x", shape, dtype)), {"x": x}, chip)
    np.testing.assert_array_equal(res.outputs["y"], ref)
    np.testing.assert_array_equal(ref, np.argwhere(x))
    assert res.outputs["y"].shape == (np.count_nonzero(x), len(shape))


@pytest.mark.parametrize("chip", list(CHIPS))
@SETTINGS
@given(data=st.data())
def test_index_select_random(chip, data):
    dtype = data.draw(st.sampled_from(input_dtypes(CHIPS[chip].support("index_select"), 0)))
    shape = random_shape(data)
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    index = rng.integers(0, shape[dim], data.draw(st.integers(1, 7))).astype(np.int32)  # repeats and any order
    x = np.clip(rng.standard_normal(shape) * 50, -127, 127).astype(dtype)
    res, ref = run(lambda g: O.index_select(g.input("x", shape, dtype), g.input("i", index.shape, "int32"), dim),
                   {"x": x, "i": index}, chip)
    np.testing.assert_array_equal(res.outputs["y"], ref)
    np.testing.assert_array_equal(ref, np.take(x, index, axis=dim))


# ---- work --------------------------------------------------------------------------------------

def test_cycles_follow_the_work_formulas():
    """masked_select and where: the input's elements; index_select: the output's elements."""
    g = isa.Graph("t")
    x = g.input("x", (4, 6))
    g.output(O.masked_select(x, g.input("m", (1, 6))), "a")
    g.output(O.where(x), "b")
    g.output(O.index_select(x, g.input("i", (3,), "int32"), 1), "c")
    res = sim.run(g, "bm1686", mode="timing")
    cycles = [e.end - e.start for e in res.trace.events if e.kind == "scalar"]
    assert cycles == [expected_cycles("bm1686", 24), expected_cycles("bm1686", 24), expected_cycles("bm1686", 12)]


# ---- errors ------------------------------------------------------------------------------------

def test_an_index_out_of_range_at_run_time_names_the_op_the_position_and_the_value():
    g = isa.Graph("t")
    g.output(O.index_select(g.input("x", (3, 4)), g.input("i", (3,), "int32"), 0, name="pick"), "y")
    x = np.zeros((3, 4), np.float32)
    with pytest.raises(isa.IndexRangeError, match=r"op pick, kernel index_select: index\[1\] = 3 is out of range for dim 0 of size 3"):
        sim.run(g, "bm1684", {"x": x, "i": np.array([0, 3, -1], np.int32)})
    with pytest.raises(isa.IndexRangeError, match=r"index\[2\] = -1 is out of range for dim 0 of size 3"):
        sim.run(g, "bm1684", {"x": x, "i": np.array([0, 2, -1], np.int32)})


def test_a_known_index_out_of_range_is_an_error_when_the_graph_is_built():
    g = isa.Graph("t")
    x = g.input("x", (3, 4))
    with pytest.raises(isa.IndexRangeError, match=r"index_select: index\[2\] = 4 is out of range for dim 1 of size 4"):
        O.index_select(x, np.array([0, 3, 4], np.int32), -1)
    with pytest.raises(isa.IndexRangeError, match=r"index\[0\] = -1 is out of range for dim 0 of size 3"):
        O.index_select(x, g.constant("i", np.array([-1], np.int32)), 0)
    assert not g.nodes  # nothing was added
    assert O.index_select(x, np.array([3, 0], np.int32), 1).shape == (3, 2)


def test_the_output_of_where_or_masked_select_cannot_feed_another_op():
    g = isa.Graph("t")
    x = g.input("x", (2, 3))
    w = O.where(x)
    assert w.bounded and w.shape == (6, 2)
    with pytest.raises(isa.ShapeError, match=r"add: operand where_0 has a data-dependent shape \(at most \(6, 2\)\)"):
        O.add(w, w)
    with pytest.raises(isa.ShapeError, match=r"index_select: operand masked_select_0 has a data-dependent shape"):
        O.index_select(x, O.masked_select(x, x), 0)


def test_errors():
    g = isa.Graph("t")
    x = g.input("x", (2, 3))
    with pytest.raises(isa.ShapeError, match=r"index_select: index must be 1-D, got shape \(1, 2\)"):
        O.index_select(x, g.input("i2", (1, 2), "int32"), 0)
    with pytest.raises(isa.UnsupportedError, match=r"index_select: index must be an integer tensor \(the seed: int32\), got float32"):
        O.index_select(x, g.input("f", (2,)), 0)
    with pytest.raises(isa.ShapeError, match=r"index_select: axis 2 is out of range for a rank-2 tensor"):
        O.index_select(x, g.input("i", (2,), "int32"), 2)
    with pytest.raises(isa.ShapeError, match=r"index_select: dim must be an integer, got '0'"):
        O.index_select(x, g.input("j", (2,), "int32"), "0")


def lower_one(build, dtypes, chip):
    g = isa.Graph("t")
    g.output(build(*(g.input(f"x{i}", shape, d) for i, (shape, d) in enumerate(dtypes))), "y")
    isa.lower(g, CHIPS[chip])


@pytest.mark.parametrize("build, dtypes, chip, match", [
    (O.where, [((2, 3), "int32")], "bm1684", r"where with int32 -> int32 is not supported on chip bm1684"),
    (O.masked_select, [((2, 3), "float16"), ((2, 3), "float32")], "bm1684", (r"masked_select with float16 x float32 -> "
                                                                            r"float16 is not supported on chip bm1684")),
    (O.masked_select, [((2, 3), "int32"), ((2, 3), "float32")], "bm1682", (r"masked_select with int32 x float32 -> "
                                                                          r"int32 is not supported on chip bm1682")),
    (lambda x, i: O.index_select(x, i, 0), [((2, 3), "float32"), ((2,), "int16")], "bm1686", (r"index_select with float32 x int16 "
                                                                                             r"-> float32 is not supported")),
    (lambda x, i: O.index_select(x, i, 0), [((2, 3), "int32"), ((2,), "int32")], "bm1684", (r"index_select with int32 x int32 "
                                                                                           r"-> int32 is not supported")),
])
def test_dtypes_a_chip_lacks_are_rejected(build, dtypes, chip, match):
    with pytest.raises(isa.UnsupportedError, match=match):
        lower_one(build, dtypes, chip)


def test_masked_select_mixes_dtypes_per_the_seed():
    lower_one(O.masked_select, [((2, 3), "int32"), ((1, 3), "float32")], "bm1684")  # line 932: not necessarily alike
    lower_one(O.masked_select, [((2, 3), "float16"), ((2, 3), "int32")], "bm1686")  # line 933: FLOAT16 too
