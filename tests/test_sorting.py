"""The sort family on the scalar engine (arg, topk, sort, argsort): the seed's descending slip,
stable and unstable ties, NaN order, random shapes against the references on every chip that
has the op, the kernels' work formulas, and every constraint violated once."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from refeval import evaluate

import chips
import isa
import sim
from sim.kernels.sort import STABLE_COST

O = isa.ops
CHIPS = {name: chips.load(name) for name in ("generic", "bm1682", "bm1684", "bm1686")}
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NAN = np.nan


def run(build, inputs, chip="generic"):
    """Run a graph whose outputs build(g) names; returns (result, the references' outputs)."""
    g = isa.Graph("t")
    for name, t in build(g).items():
        g.output(t, name)
    res = sim.run(g, chip, inputs)
    assert sim.run(g, chip, mode="timing").cycles == res.cycles
    return res, evaluate(g, inputs, CHIPS[chip] if isinstance(chip, str) else chip)


def sort_of(x, chip="generic", **params):
    res, ref = run(lambda g: dict(zip(("i", "v"), O.sort(g.input("x", x.shape), **params))), {"x": x}, chip)
    return res.outputs["i"], res.outputs["v"], ref


def scalar_cycles(res):
    (event,) = [e for e in res.trace.events if e.kind == "scalar"]
    return event.end - event.start


def expected_cycles(chip, work):
    arm = CHIPS[chip].engines_of("scalar")[0]
    return arm.issue_latency + math.ceil(arm.scalar.per_element * work)


# ---- direction, ties, NaN ----------------------------------------------------------------------

@pytest.mark.parametrize("chip", ["generic", "bm1682", "bm1684", "bm1686"])
def test_descending_true_sorts_descending(chip):
    """The seed's text says descending=true sorts ascending (a known slip): true is descending."""
    x = np.array([3, 1, 2, 5], np.float32)
    idx, values, _ = sort_of(x, chip, descending=True)
    np.testing.assert_array_equal(values, [5, 3, 2, 1])
    np.testing.assert_array_equal(idx, [3, 0, 2, 1])
    idx, values, _ = sort_of(x, chip, descending=False)
    np.testing.assert_array_equal(values, [1, 2, 3, 5])
    np.testing.assert_array_equal(idx, [1, 2, 0, 3])
    assert idx.dtype == np.int32


@pytest.mark.parametrize("descending, want", [(False, [1, 3, 0, 2, 4]), (True, [0, 2, 4, 1, 3])])
def test_a_stable_sort_keeps_equal_elements_in_input_order(descending, want):
    x = np.array([2, 1, 2, 1, 2], np.float32)
    for chip in ("generic", "bm1682", "bm1686"):
        idx, _, ref = sort_of(x, chip, stable=True, descending=descending)
        np.testing.assert_array_equal(idx, want)
        np.testing.assert_array_equal(ref["i"], want)


def test_the_seeds_three_threes_unstable_any_order_the_same_every_run():
    """(3,3,3): the seed allows index_o (0,1,2) or (1,0,2) when not stable; a rerun gives the same."""
    x = np.full(3, 3, np.float32)
    idx, values, _ = sort_of(x, "bm1684")
    np.testing.assert_array_equal(values, [3, 3, 3])
    assert sorted(idx) == [0, 1, 2]
    np.testing.assert_array_equal(sort_of(x, "bm1684")[0], idx)
    np.testing.assert_array_equal(sort_of(x, "bm1686", stable=True)[0], [0, 1, 2])


def test_nan_ranks_above_every_number_as_in_numpy():
    """Ascending puts NaN last (np.sort), descending first; -inf and +inf are numbers."""
    x = np.array([NAN, 1, -np.inf, NAN, 0, np.inf], np.float32)
    idx, values, ref = sort_of(x, stable=True)
    np.testing.assert_array_equal(idx, [2, 4, 1, 5, 0, 3])
    np.testing.assert_array_equal(idx, np.argsort(x, kind="stable"))
    np.testing.assert_array_equal(values, [-np.inf, 0, 1, np.inf, NAN, NAN])
    np.testing.assert_array_equal(ref["i"], idx)
    idx, values, ref = sort_of(x, stable=True, descending=True)
    np.testing.assert_array_equal(idx, [0, 3, 5, 1, 4, 2])
    np.testing.assert_array_equal(ref["i"], idx)


def test_sort_along_a_middle_dim_and_the_default_last():
    x = np.array([[[4, 1], [2, 3], [0, 5]]], np.float32)  # (1, 3, 2)
    idx, values, _ = sort_of(x, dim=1, stable=True)
    np.testing.assert_array_equal(values, [[[0, 1], [2, 3], [4, 5]]])
    np.testing.assert_array_equal(idx, [[[2, 0], [1, 1], [0, 2]]])
    idx, values, _ = sort_of(x, stable=True)
    np.testing.assert_array_equal(values, [[[1, 4], [2, 3], [0, 5]]])
    np.testing.assert_array_equal(idx, [[[1, 0], [0, 1], [0, 1]]])


def test_argsort_gives_sorts_index_as_int32_or_float32():
    x = np.array([[0.5, -1, 2], [3, 3, -3]], np.float32)
    for out in ("int32", "float32"):
        res, _ = run(lambda g, out=out: {"y": O.argsort(g.input("x", x.shape), descending=True, out_dtype=out)}, {"x": x}, "bm1684")
        assert res.outputs["y"].dtype == np.dtype(out)
        np.testing.assert_array_equal(res.outputs["y"][0], [2, 0, 1])
        np.testing.assert_array_equal(sorted(res.outputs["y"][1][:2]), [0, 1])  # the two 3s, unstable
        assert res.outputs["y"][1][2] == 2


@pytest.mark.parametrize("method, want", [(0, [[1], [3]]), ("max", [[1], [3]]), (1, [[3], [0]]), ("MIN", [[3], [0]])])
def test_arg_takes_the_first_of_equal_extremes(method, want):
    x = np.array([[1, 5, 5, 0, 0], [-2, 7, -2, 9, 9]], np.float32)
    res, ref = run(lambda g: {"y": O.arg(g.input("x", x.shape), 1, method)}, {"x": x}, "bm1684")
    np.testing.assert_array_equal(res.outputs["y"], want)
    np.testing.assert_array_equal(ref["y"], want)
    assert res.outputs["y"].dtype == np.int32 and res.outputs["y"].shape == (2, 1)  # the axis's dim becomes 1


@pytest.mark.parametrize("method", ["max", "min"])
def test_arg_returns_the_first_nan_as_numpy_does(method):
    """np.argmax and np.argmin both return the first NaN: NaN propagates through the comparisons."""
    x = np.array([[1, 5, NAN, -7, NAN], [1, 5, 9, -7, 9]], np.float32)
    res, ref = run(lambda g: {"y": O.arg(g.input("x", x.shape), 1, method, out_dtype="float32")}, {"x": x}, "bm1686")
    want = {"max": [[2], [2]], "min": [[2], [3]]}[method]
    np.testing.assert_array_equal(res.outputs["y"], want)
    np.testing.assert_array_equal(ref["y"], want)
    np.testing.assert_array_equal(getattr(np, f"arg{method}")(x, axis=1, keepdims=True), want)
    assert res.outputs["y"].dtype == np.float32


def test_arg_on_int8_gives_int32_on_bm1684():
    x = np.array([[[-128, 127, 127]], [[5, -5, 0]]], np.int8)  # (2, 1, 3)
    res, _ = run(lambda g: {"y": O.arg(g.input("x", x.shape, "int8"), -1, "max")}, {"x": x}, "bm1684")
    np.testing.assert_array_equal(res.outputs["y"], [[[1]], [[0]]])


def test_topk_by_hand():
    x = np.array([[4, 9, 1, 7], [0, -1, 3, 3]], np.float32)
    res, _ = run(lambda g: dict(zip(("v", "i"), O.topk(g.input("x", x.shape), 2, axis=1))), {"x": x}, "bm1684")
    np.testing.assert_array_equal(res.outputs["v"], [[9, 7], [3, 3]])
    np.testing.assert_array_equal(res.outputs["i"][0], [1, 3])
    assert sorted(res.outputs["i"][1]) == [2, 3] and res.outputs["i"].dtype == np.int32
    res, _ = run(lambda g: dict(zip(("v", "i"), O.topk(g.input("x", x.shape), 1, descending=False))), {"x": x})
    np.testing.assert_array_equal(res.outputs["v"], [[0, -1, 1, 3]])  # the seed's default axis is 0
    np.testing.assert_array_equal(res.outputs["i"], [[1, 1, 0, 1]])


# ---- random cases against the references -------------------------------------------------------

def input_dtypes(row):
    """The dtypes a chip's row lets the (first) input have; a few of each kind on generic."""
    if row.dtypes is None:
        return ["float32", "float16", "int32", "int8"]
    return sorted(set(row.dtypes).union(*(sig.inputs[0] for sig in row.signatures)))


def random_input(data, chip, row_key):
    """A tensor of a dtype the chip's row allows, with many ties or none, and an axis of it."""
    dtype = data.draw(st.sampled_from(input_dtypes(CHIPS[chip].support(row_key))))
    shape = tuple(data.draw(st.integers(1, 6)) for _ in range(data.draw(st.integers(1, 3))))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = rng.integers(-4, 5, shape) if data.draw(st.booleans()) else np.clip(rng.standard_normal(shape) * 60, -127, 127)  # ties or not
    if dtype == "uint8":
        x = np.abs(x)
    return x.astype(dtype), data.draw(st.integers(-len(shape), len(shape) - 1))


def check_sorted(x, axis, idx, values, want_values):
    """Values as the reference's, and idx a permutation along axis giving them."""
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(np.sort(idx, axis=axis), np.broadcast_to(
        np.arange(x.shape[axis]).reshape([-1 if a == axis % x.ndim else 1 for a in range(x.ndim)]), x.shape))
    np.testing.assert_array_equal(np.take_along_axis(x, idx.astype(np.int64), axis), values)


@pytest.mark.parametrize("chip", list(CHIPS))
@SETTINGS
@given(data=st.data())
def test_sort_and_argsort_random(chip, data):
    stable = chip != "bm1684" and data.draw(st.booleans())
    descending = data.draw(st.booleans())
    x, dim = random_input(data, chip, "sort.stable" if stable else "sort.unstable")
    res, ref = run(lambda g: dict(zip(("i", "v"), O.sort(g.input("x", x.shape, x.dtype.name), dim, stable, descending))) | {
        "a": O.argsort(g.input("y", x.shape, x.dtype.name), dim, stable, descending)}, {"x": x, "y": x}, chip)
    if stable:
        np.testing.assert_array_equal(res.outputs["i"], ref["i"])
        np.testing.assert_array_equal(res.outputs["a"], ref["a"])
    check_sorted(x, dim, res.outputs["i"], res.outputs["v"], ref["v"])
    np.testing.assert_array_equal(res.outputs["a"], res.outputs["i"])  # one ordering
    full = np.sort(x, axis=dim)
    np.testing.assert_array_equal(ref["v"], np.flip(full, dim) if descending else full)


@pytest.mark.parametrize("chip", list(CHIPS))
@SETTINGS
@given(data=st.data())
def test_topk_random(chip, data):
    x, axis = random_input(data, chip, "topk")
    k = data.draw(st.integers(1, x.shape[axis]))
    descending = data.draw(st.booleans())
    res, ref = run(lambda g: dict(zip(("v", "i"), O.topk(g.input("x", x.shape, x.dtype.name), k, axis, descending))), {"x": x}, chip)
    np.testing.assert_array_equal(res.outputs["v"], ref["v"])
    np.testing.assert_array_equal(np.take_along_axis(x, res.outputs["i"].astype(np.int64), axis), res.outputs["v"])
    assert (np.diff(np.sort(res.outputs["i"], axis=axis), axis=axis) > 0).all()  # k distinct positions
    full = np.sort(x, axis=axis)
    want = np.flip(full, axis) if descending else full
    np.testing.assert_array_equal(ref["v"], np.take(want, np.arange(k), axis))


@pytest.mark.parametrize("chip", list(CHIPS))
@SETTINGS
@given(data=st.data())
def test_arg_random(chip, data):
    x, axis = random_input(data, chip, "arg")
    method = data.draw(st.sampled_from(["max", "min"]))
    out = "int32" if x.dtype.kind != "f" or CHIPS[chip].support("arg").dtypes is None else data.draw(st.sampled_from(["int32", "float32"]))
    res, ref = run(lambda g: {"y": O.arg(g.input("x", x.shape, x.dtype.name), axis, method, out_dtype=out)}, {"x": x}, chip)
    np.testing.assert_array_equal(res.outputs["y"], ref["y"])
    np.testing.assert_array_equal(ref["y"], getattr(np, f"arg{method}")(x, axis=axis, keepdims=True))


# ---- work --------------------------------------------------------------------------------------

def test_sort_cycles_follow_the_work_formula_and_stable_costs_more():
    """rows * n * ceil(log2 n): 4 rows of 8 is 4 * 8 * 3 = 96, times STABLE_COST when stable."""
    x = np.zeros((4, 8), np.float32)
    unstable = scalar_cycles(sim.run(_sort_graph(x.shape, False), "bm1686", mode="timing"))
    stable = scalar_cycles(sim.run(_sort_graph(x.shape, True), "bm1686", mode="timing"))
    assert unstable == expected_cycles("bm1686", 96)
    assert stable == expected_cycles("bm1686", 96 * STABLE_COST)
    assert stable > unstable  # the seed: stable=false performs better
    one = scalar_cycles(sim.run(_sort_graph((5, 1), False), "bm1686", mode="timing"))
    assert one == expected_cycles("bm1686", 5)  # a one-element line still costs its element


def _sort_graph(shape, stable):
    g = isa.Graph("t")
    g.output(O.argsort(g.input("x", shape), stable=stable), "y")
    return g


def test_topk_and_arg_cycles_follow_their_work_formulas():
    g = isa.Graph("t")
    x = g.input("x", (3, 100))
    g.output(O.topk(x, 5, axis=1)[0], "v")
    g.output(O.arg(x, 0, "max"), "a")
    res = sim.run(g, "bm1684", mode="timing")
    topk, arg = [e.end - e.start for e in res.trace.events if e.kind == "scalar"]
    assert topk == expected_cycles("bm1684", 300 * 3)  # n * ceil(log2(k + 1)) per row, k = 5
    assert arg == expected_cycles("bm1684", 300)


# ---- errors ------------------------------------------------------------------------------------

def test_errors():
    g = isa.Graph("t")
    x = g.input("x", (2, 3))
    with pytest.raises(isa.ShapeError, match=r"sort: axis 2 is out of range for a rank-2 tensor of shape \(2, 3\)"):
        O.sort(x, 2)
    with pytest.raises(isa.ShapeError, match=r"argsort: axis -3 is out of range"):
        O.argsort(x, -3)
    with pytest.raises(isa.ShapeError, match=r"arg: axis 5 is out of range"):
        O.arg(x, 5, 0)
    with pytest.raises(isa.ShapeError, match=r"topk: k must be at most the axis's dim 3 \(axis 1 of \(2, 3\)\), got 4"):
        O.topk(x, 4, axis=1)
    with pytest.raises(isa.ShapeError, match=r"topk: k must be >= 1, got 0"):
        O.topk(x, 0)
    with pytest.raises(isa.ShapeError, match=r"sort: dim must be an integer, got 1.5"):
        O.sort(x, 1.5)
    with pytest.raises(isa.UnsupportedError, match=r"arg: method must be 0 \(max\) or 1 \(min\), got 2"):
        O.arg(x, 0, 2)
    with pytest.raises(isa.UnsupportedError, match=r"arg: out_dtype must be int32 or float32 \(the index output\), got 'int8'"):
        O.arg(x, 0, 0, out_dtype="int8")
    with pytest.raises(isa.UnsupportedError, match=r"argsort: out_dtype must be int32 or float32"):
        O.argsort(x, out_dtype="int16")


def lowered(build, dtype, chip):
    g = isa.Graph("t")
    out = build(g.input("x", (2, 3), dtype))
    g.output(out[0] if isinstance(out, tuple) else out, "y")
    return isa.lower(g, CHIPS[chip])


@pytest.mark.parametrize("build, dtype, chip, match", [
    (lambda x: O.sort(x, stable=True), "float32", "bm1684", (r"sort\.stable with float32 -> int32 is not supported "
                                                            r"on chip bm1684 \(the chip has no sort\.stable")),
    (lambda x: O.argsort(x, stable=True), "float32", "bm1684", r"argsort\.stable with float32 -> int32 is not supported on chip bm1684"),
    (lambda x: O.arg(x, 0, 0, out_dtype="float32"), "int8", "bm1684", r"arg with int8 -> float32 is not supported on chip bm1684"),
    (lambda x: O.arg(x, 0, 0), "int8", "bm1682", r"arg with int8 -> int32 is not supported on chip bm1682"),
    (lambda x: O.sort(x), "int32", "bm1686", r"sort\.unstable with int32 -> int32 is not supported on chip bm1686"),
    (lambda x: O.topk(x, 1), "float16", "bm1686", r"topk with float16 -> float16 is not supported on chip bm1686"),
    (lambda x: O.argsort(x), "int8", "bm1682", r"argsort\.unstable with int8 -> int32 is not supported on chip bm1682"),
])
def test_dtypes_and_stable_sorts_a_chip_lacks_are_rejected(build, dtype, chip, match):
    with pytest.raises(isa.UnsupportedError, match=match):
        lowered(build, dtype, chip)


def test_each_chip_sorts_stably_but_bm1684():
    for chip in ("bm1682", "bm1686", "generic"):
        lowered(lambda x: O.sort(x, stable=True), "float32", chip)
    lowered(lambda x: O.sort(x, stable=False), "float32", "bm1684")
