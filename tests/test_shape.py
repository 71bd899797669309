"""Shape ops (squeeze, expand_dims, reshape, reshape_v2, shape_fetch): the seed's examples, random
shapes on every chip that has the op, that a view of an intermediate runs no instruction and a
view that is a graph output costs one copy, shape_fetch feeding reshape_v2, and every error."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from refeval import evaluate

import chips
import isa
import sim
from isa import dtypes
from isa.instructions import Dma, Wait

O = isa.ops
CHIPS = {name: chips.load(name) for name in ("generic", "bm1682", "bm1684", "bm1686")}
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
VIEWS = ("squeeze", "expand_dims", "reshape", "reshape_v2")


def run(build, inputs, chip="generic"):
    """Run a graph whose outputs build(g) returns (a dict); check timing cycles == functional
    cycles and the program's text round trip; return the result and the references."""
    g = isa.Graph("t")
    for name, t in build(g).items():
        g.output(t, name)
    res = sim.run(g, chip, inputs)
    assert sim.run(g, chip, mode="timing").cycles == res.cycles
    prog = isa.lower(g, CHIPS[chip])
    assert isa.Program.from_text(prog.to_text()) == prog
    return res, evaluate(g, inputs, CHIPS[chip]), prog


def data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if dtypes.is_int(dtype):
        lo, hi = dtypes.int_range(dtype)
        return rng.integers(max(lo, -1000), min(hi, 1000), shape, endpoint=True).astype(dtypes.np_dtype(dtype))
    values = rng.standard_normal(shape) * 10
    return (np.abs(values) if dtype == "float8_e8m0fnu" else values).astype(dtypes.np_dtype(dtype))  # e8m0: no sign


def ops_of(prog, op):
    return [i for stream in prog.streams.values() for i in stream if i.op == op]


# ---- the seed's examples -----------------------------------------------------------------------

def test_reshape_gives_the_seeds_example():
    x = data((10, 20, 30, 40), "float32")
    res, ref, _ = run(lambda g: {"y": O.reshape(g.input("x", x.shape), (0, 10, -1, 10))}, {"x": x}, "bm1684")
    assert res.outputs["y"].shape == (10, 10, 240, 10)  # seed line 1113
    np.testing.assert_array_equal(res.outputs["y"], x.reshape(10, 10, 240, 10))
    np.testing.assert_array_equal(ref["y"], x.reshape(10, 10, 240, 10))


def test_reshape_v2_gives_the_seeds_example():
    x = data((10, 20, 30, 40), "int8")
    res, _, _ = run(lambda g: {"y": O.reshape_v2(g.input("x", x.shape, "int8"), g.constant("s", np.array([0, 10, -1, 10], np.int32)))},
                    {"x": x}, "bm1684")
    np.testing.assert_array_equal(res.outputs["y"], x.reshape(10, 10, 240, 10))  # seed line 1123


@pytest.mark.parametrize("axis, want", [([3], (1, 3, 8)), ([], (3, 8)), ([-1], (1, 3, 8))])  # seed line 1097
def test_squeeze_gives_the_seeds_examples(axis, want):
    x = data((1, 3, 8, 1), "float32")
    res, ref, _ = run(lambda g: {"y": O.squeeze(g.input("x", x.shape), axis)}, {"x": x}, "bm1682")
    assert res.outputs["y"].shape == want
    np.testing.assert_array_equal(res.outputs["y"], x.reshape(want))
    np.testing.assert_array_equal(ref["y"], x.reshape(want))


@pytest.mark.parametrize("axis, ndims, want", [(0, 1, (1, 2, 3)), (1, 2, (2, 1, 1, 3)), (2, 1, (2, 3, 1)), (-1, 2, (2, 3, 1, 1)),
                                               (-3, 1, (1, 2, 3))])
def test_expand_dims_by_hand(axis, ndims, want):
    x = data((2, 3), "float32")
    res, ref, _ = run(lambda g: {"y": O.expand_dims(g.input("x", x.shape), axis, ndims)}, {"x": x})
    assert res.outputs["y"].shape == want == ref["y"].shape
    np.testing.assert_array_equal(res.outputs["y"], x.reshape(want))


def test_squeezing_every_axis_of_one_element_leaves_one_axis():
    x = np.array([[[7.5]]], np.float32)
    res, ref, _ = run(lambda g: {"y": O.squeeze(g.input("x", x.shape))}, {"x": x})
    assert res.outputs["y"].shape == (1,) == ref["y"].shape
    assert res.outputs["y"][0] == 7.5


# ---- random shapes on every chip ---------------------------------------------------------------

def draw_view(draw, shape):
    """(op name, its arguments after the tensor, the shape it must give) for a random view."""
    op = draw(st.sampled_from(VIEWS))
    if op == "squeeze":
        ones = [i for i, d in enumerate(shape) if d == 1]
        axes = draw(st.lists(st.sampled_from(ones), unique=True)) if ones else []
        axes = [a - len(shape) if draw(st.booleans()) else a for a in axes]
        picked = {a % len(shape) for a in axes} or set(ones)
        want = tuple(d for i, d in enumerate(shape) if i not in picked) or (1,)
        return op, (axes,), want
    if op == "expand_dims":
        axis, ndims = draw(st.integers(-len(shape) - 1, len(shape))), draw(st.integers(1, 3))
        at = axis if axis >= 0 else axis + len(shape) + 1
        return op, (axis, ndims), shape[:at] + (1,) * ndims + shape[at:]
    factors = [p for d in shape for p in _primes(d)]
    rank = draw(st.integers(1, 4))
    bins = [draw(st.integers(0, rank - 1)) for _ in factors]
    want = tuple(math.prod(f for f, b in zip(factors, bins) if b == k) for k in range(rank))
    param = [0 if i < len(shape) and d == shape[i] and draw(st.booleans()) else d for i, d in enumerate(want)]
    param[draw(st.integers(0, rank - 1))] = -1
    return op, (param,), want


def _primes(n):
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


@pytest.mark.parametrize("chip", list(CHIPS))
@SETTINGS
@given(draw=st.data())
def test_views_of_random_shapes(chip, draw):
    shape = tuple(draw.draw(st.lists(st.integers(1, 6), min_size=1, max_size=4)))
    op, args, want = draw_view(draw.draw, shape)
    dtype = draw.draw(st.sampled_from(sorted(CHIPS[chip].support(op).dtypes or dtypes.NAMES)))
    x = data(shape, dtype, draw.draw(st.integers(0, 999)))

    def build(g):
        t = g.input("x", shape, dtype)
        if op == "reshape_v2":
            return {"y": O.reshape_v2(t, g.constant("s", np.array(args[0], np.int32)), name="y")}
        return {"y": getattr(O, op)(t, *args, name="y")}

    res, ref, prog = run(build, {"x": x}, chip)
    assert res.outputs["y"].shape == want
    np.testing.assert_array_equal(res.outputs["y"], x.reshape(want))
    np.testing.assert_array_equal(ref["y"], x.reshape(want))
    instrs = [i for stream in prog.streams.values() for i in stream if not isinstance(i, Wait)]
    assert instrs and all(isinstance(i, Dma) and i.op == "y" for i in instrs)  # only the copy into the output


# ---- what a view costs -----------------------------------------------------------------------

@pytest.mark.parametrize("chip", ["generic", "bm1684", "bm1686"])
@pytest.mark.parametrize("op, args", [("reshape", ((6, -1),)), ("squeeze", ([0],)), ("expand_dims", (1, 2)), ("reshape_v2", ())])
def test_a_view_of_an_intermediate_runs_no_instruction(chip, op, args):
    x = data((1, 4, 6), "float32")

    def build(g):
        t = O.adds(g.input("x", x.shape), 1.0)
        v = (O.reshape_v2(t, g.constant("s", np.array([6, -1], np.int32)), name="v") if op == "reshape_v2"
             else getattr(O, op)(t, *args, name="v"))
        return {"y": O.muls(v, 2.0)}

    res, ref, prog = run(build, {"x": x}, chip)
    np.testing.assert_array_equal(res.outputs["y"].reshape(-1), ((x + 1) * 2).reshape(-1))
    np.testing.assert_array_equal(res.outputs["y"], ref["y"])
    assert ops_of(prog, "v") == []
    assert not [e for e in res.trace.events if e.op == "v"]


@pytest.mark.parametrize("chip", ["generic", "bm1684"])
def test_a_view_that_is_a_graph_output_costs_a_copy(chip):
    x = data((4, 6), "float32")
    res, _, prog = run(lambda g: {"y": O.reshape(g.input("x", x.shape), (3, 8), name="v")}, {"x": x}, chip)
    copies = ops_of(prog, "v")
    assert copies and all(isinstance(i, Dma) for i in copies)
    events = [e for e in res.trace.events if e.op == "v" and e.kind != "wait"]
    assert events and {e.kind for e in events} == {"dma"}
    assert res.cycles >= max(e.end for e in events) > 0
    np.testing.assert_array_equal(res.outputs["y"], x.reshape(3, 8))


# ---- shape_fetch -------------------------------------------------------------------------------

@pytest.mark.parametrize("begin, end, step, want", [(0, 1, 1, [2]), (0, 4, 1, [2, 3, 4, 5]), (1, 4, 2, [3, 5]),
                                                     (-2, 4, 1, [4, 5]), (0, -1, 1, [2, 3, 4]), (0, 4, 3, [2, 5])])
def test_shape_fetch(begin, end, step, want):
    x = data((2, 3, 4, 5), "int8")
    res, ref, prog = run(lambda g: {"s": O.shape_fetch(g.input("x", x.shape, "int8"), begin, end, step, name="f")}, {"x": x}, "bm1684")
    assert res.outputs["s"].dtype == np.int32
    assert res.outputs["s"].tolist() == want == ref["s"].tolist()
    assert all(isinstance(i, Dma) for i in ops_of(prog, "f"))  # a preloaded constant, copied to the output


def test_shape_fetch_is_known_when_the_graph_is_built():
    g = isa.Graph("t")
    s = O.shape_fetch(g.input("x", (2, 3, 4)), 1, 3)
    assert g.known(s).tolist() == [3, 4]


@pytest.mark.parametrize("chip", ["generic", "bm1682", "bm1684", "bm1686"])
def test_shape_fetch_feeds_reshape_v2(chip):
    """y takes z's shape: reshape_v2(x, shape_fetch(z, 0, 3)), and no instruction runs for either
    when y is an intermediate."""
    x = data((4, 6), "float32")

    def build(g):
        z = g.input("z", (2, 3, 4))
        y = O.reshape_v2(O.adds(g.input("x", x.shape), 1.0), O.shape_fetch(z, 0, 3, name="f"), name="v")
        return {"y": O.add(y, z)}

    z = data((2, 3, 4), "float32", 1)
    g_inputs = {"x": x, "z": z}
    res, ref, prog = run(build, g_inputs, chip)
    np.testing.assert_allclose(res.outputs["y"], (x + 1).reshape(2, 3, 4) + z, rtol=1e-6)
    np.testing.assert_array_equal(res.outputs["y"], ref["y"])
    assert ops_of(prog, "f") == ops_of(prog, "v") == []


# ---- chips' dtype rows ---------------------------------------------------------------------------

@pytest.mark.parametrize("chip, dtype, ok", [
    ("bm1682", "float32", True), ("bm1682", "int32", False),  # seed line 1115
    ("bm1684", "uint16", True), ("bm1684", "float16", False),  # line 1116
    ("bm1686", "float16", True), ("bm1686", "uint32", False),  # line 1117
])
def test_reshape_dtypes(chip, dtype, ok):
    g = isa.Graph("t")
    g.output(O.reshape(g.input("x", (2, 3), dtype), (3, 2)), "y")
    if ok:
        isa.lower(g, CHIPS[chip])
    else:
        with pytest.raises(isa.UnsupportedError, match=f"reshape with {dtype} -> {dtype} is not supported on chip {chip}"):
            isa.lower(g, CHIPS[chip])


@pytest.mark.parametrize("chip, dtype, ok", [("bm1682", "float32", True), ("bm1682", "int8", False),  # seed line 1132
                                              ("bm1684", "uint16", True), ("bm1686", "float16", True), ("bm1684", "float16", False)])
def test_shape_fetch_dtypes(chip, dtype, ok):
    g = isa.Graph("t")
    g.output(O.shape_fetch(g.input("x", (2, 3), dtype)), "y")
    if ok:
        isa.lower(g, CHIPS[chip])
    else:
        with pytest.raises(isa.UnsupportedError, match=f"shape_fetch with {dtype} -> int32 is not supported on chip {chip}"):
            isa.lower(g, CHIPS[chip])


# ---- errors ------------------------------------------------------------------------------------

def graph_input(shape=(2, 3, 4), dtype="float32"):
    return isa.Graph("t").input("x", shape, dtype)


@pytest.mark.parametrize("param, match", [
    ((-1, -1, 4), r"reshape: reshape_param may hold at most one -1, got \[-1, -1, 4\]"),
    ((5, 5), r"reshape: reshape_param \[5, 5\] gives shape \(5, 5\) of 25 elements; the input \(2, 3, 4\) has 24"),
    ((5, -1), r"cannot hold the input's 24 elements \(shape \(2, 3, 4\)\): 24 is not a multiple of 5"),
    ((2, 3, 2, 0, 2), r"reshape_param\[3\] is 0 \(keep the input's size\) but the input \(2, 3, 4\) has no axis 3"),
    ((-2, 12), r"reshape_param\[0\] is -2; sizes are positive, 0 \(keep\) or -1 \(infer\)"),
    ((2.5, 3), r"reshape: reshape_param must be integers"),
])
def test_reshape_errors(param, match):
    with pytest.raises(isa.ShapeError, match=match):
        O.reshape(graph_input(), param)


@pytest.mark.parametrize("axis, match", [
    ([1], r"squeeze: axis 1 has size 3, not 1 \(input shape \(1, 3, 1\)\)"),
    ([3], r"squeeze: axis 3 is out of range for a rank-3 tensor \(allowed: \[-3, 2\]\)"),
    ([0, -3], r"squeeze: axis names an axis twice: \[0, -3\]"),
])
def test_squeeze_errors(axis, match):
    with pytest.raises(isa.ShapeError, match=match):
        O.squeeze(graph_input((1, 3, 1)), axis)


def test_expand_dims_errors():
    with pytest.raises(isa.ShapeError, match=r"expand_dims: axis must be in \[-4, 3\] for a rank-3 tensor, got 4"):
        O.expand_dims(graph_input(), 4)
    with pytest.raises(isa.ShapeError, match="expand_dims: ndims must be >= 1, got 0"):
        O.expand_dims(graph_input(), 0, 0)


def test_reshape_v2_needs_a_shape_known_when_the_graph_is_built():
    x = graph_input()
    computed = x.graph.input("s", (2,), "int32")
    with pytest.raises(isa.ShapeError, match=r"reshape_v2: shape_info \(s\) must be a constant tensor \(or computed from shapes alone\)"):
        O.reshape_v2(x, computed)
    with pytest.raises(isa.ShapeError, match="must be a constant"):
        O.reshape_v2(x, O.adds(x.graph.constant("k", np.array([4, 6], np.int32)), 0))


def test_reshape_v2_shape_info_errors():
    x = graph_input()
    with pytest.raises(isa.UnsupportedError, match=r"reshape_v2: shape_info must be a 1-d int32 "
                                                   r"tensor \(seed line 1126\), got int64 \(2,\)"):
        O.reshape_v2(x, x.graph.constant("s64", np.array([4, 6], np.int64)))
    with pytest.raises(isa.ShapeError, match=r"reshape_v2: shape_info \[4, 5\] gives shape \(4, 5\) of 20 elements"):
        O.reshape_v2(x, x.graph.constant("s", np.array([4, 5], np.int32)))
    with pytest.raises(isa.GraphError, match="reshape_v2: shape_info must be a Tensor"):
        O.reshape_v2(x, [4, 6])


@pytest.mark.parametrize("begin, end, step, err, match", [
    (2, 2, 1, isa.ShapeError, r"shape_fetch: begin_axis 2 and end_axis 2 must select at least one axis of a rank-3 tensor"),
    (0, 5, 1, isa.ShapeError, r"end_axis 5 must select"),
    (0, 2, 0, isa.ShapeError, "shape_fetch: step must be >= 1, got 0"),
    (0.5, 2, 1, isa.ShapeError, "shape_fetch: begin_axis must be an integer"),
])
def test_shape_fetch_errors(begin, end, step, err, match):
    with pytest.raises(err, match=match):
        O.shape_fetch(graph_input(), begin, end, step)
