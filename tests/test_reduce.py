"""The reduction-shaped ops (reduce, softmax, softmax_int, batch_norm, hw_avg, hw_mul) on the
machine against their references: random shapes, axes, dtypes and keep_dims on the generic
chip; the same cycles in timing mode; tiles that split the kept axes giving the same numbers;
the seed's semantics on numbers worked out by hand; and every error naming the op."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from refeval import evaluate

import chips
import isa
import sim
from isa import dtypes
from isa.instructions import REDUCTIONS, Dma, Matmul, Vector

GENERIC = chips.load("generic")
SMALL = chips.load("generic", {"memories.lmem.size": "1KiB"})  # 32 KiB in all: tiles split
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
O = isa.ops
FLOAT_TOL = {"float32": 1e-6, "float16": 1e-3, "bfloat16": 8e-3}  # relative, about one ulp of the result
METHODS = ("REDUCE_MEAN", "REDUCE_SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD")


def values(rng, shape, dtype, scale=4.0):
    if dtypes.is_int(dtype):
        lo, hi = dtypes.int_range(dtype)
        return rng.integers(lo, hi, shape, endpoint=True).astype(dtypes.np_dtype(dtype))
    return (rng.standard_normal(shape) * scale).astype(dtypes.np_dtype(dtype))


def run(graph, chip, inputs, policy=None):
    program = isa.lower(graph, chip, policy)
    res = sim.execute(program, chip, inputs)
    assert sim.execute(program, chip, mode="timing").cycles == res.cycles
    return program, res


def check(graph, inputs, chip=GENERIC, rtol=None, atol=0.0):
    """Run, compare with the references (integers exactly, floats to about an ulp), return the
    machine's outputs."""
    _, res = run(graph, chip, inputs)
    for name, want in evaluate(graph, inputs, chip).items():
        got = res.outputs[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        kind = dtypes.of_array(want)
        if dtypes.is_float(kind):
            tol = rtol if rtol is not None else FLOAT_TOL[kind]
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=atol, err_msg=name)
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)
    return res.outputs


@st.composite
def shape_and_axes(draw, max_rank=4):
    rank = draw(st.integers(1, max_rank))
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=rank, max_size=rank)))
    axes = sorted(draw(st.sets(st.integers(0, rank - 1), min_size=1)))
    axes = [a - rank if draw(st.booleans()) else a for a in draw(st.permutations(axes))]  # any order, negative too
    return shape, axes


# ---- reduce ----------------------------------------------------------------------------------

@settings(SETTINGS, max_examples=120)
@given(sa=shape_and_axes(), method=st.sampled_from(METHODS), keep=st.booleans(),
       dtype=st.sampled_from(("float32", "float16", "bfloat16", "int8", "uint8", "int16", "uint16")), seed=st.integers(0, 2**32 - 1))
def test_reduce_matches_its_reference(sa, method, keep, dtype, seed):
    shape, axes = sa
    rng = np.random.default_rng(seed)
    g = isa.Graph("t")
    y = O.reduce(g.input("x", shape, dtype), method, axes, keep_dims=keep)
    g.output(y, "y")
    kept = [n for i, n in enumerate(shape) if i not in {a % len(shape) for a in axes}]
    assert y.shape == (tuple(1 if i in {a % len(shape) for a in axes} else n for i, n in enumerate(shape)) if keep else tuple(kept) or (1,))
    # small magnitudes keep float products finite and integer products away from saturation now and then
    x = values(rng, shape, dtype, scale=1.5 if method == "REDUCE_PROD" else 4.0)
    if method == "REDUCE_PROD" and dtypes.is_int(dtype) and rng.random() < 0.5:
        x = np.clip(x, -3, 3).astype(x.dtype)
    check(g, {"x": x})


def test_reduce_shapes_follow_the_seed_example():
    g = isa.Graph("t")
    x = g.input("x", (10, 20, 30, 40))
    assert O.reduce(x, "REDUCE_SUM", [1, 3]).shape == (10, 1, 30, 1)  # seed: tensor_o_shape = {10, 1, 30, 1}
    assert O.reduce(x, "REDUCE_SUM", [1, 3], keep_dims=False).shape == (10, 30)
    assert O.reduce(x, "REDUCE_MAX", [3, 1, 0, 2], keep_dims=False).shape == (1,)  # a tensor keeps a dimension
    assert O.reduce(x, "REDUCE_MEAN", [3, 1, 2], axis_num=2).shape == (10, 1, 30, 1)  # the seed's axis_num
    assert O.reduce(x, "sum", [-1]).shape == (10, 20, 30, 1)
    assert g.nodes[-1].params["method"] == "REDUCE_SUM" and g.nodes[-1].params["axis_list"] == (3,)


def test_integer_mean_rounds_half_to_even():
    """sum / count, rounded half to even (numpy's rint: IEEE's default conversion, as every
    float -> int store in npusim; the seed does not say how BM1684 rounds a mean)."""
    x = np.array([[1, 2], [2, 3], [-1, -2], [-2, -3], [5, 6], [127, 127], [-128, -127]], np.int8)
    g = isa.Graph("t")
    g.output(O.reduce(g.input("x", x.shape, "int8"), "REDUCE_MEAN", [1], keep_dims=False), "y")
    got = check(g, {"x": x})["y"]
    assert got.tolist() == [2, 2, -2, -2, 6, 127, -128]  # 1.5 -> 2, 2.5 -> 2, -1.5 -> -2, -2.5 -> -2, 5.5 -> 6


def test_integer_sum_and_product_are_exact_then_saturate():
    x = np.array([[100, 100, -50], [-128, 2, 1], [16, 16, 1], [0, 127, 127], [-3, 5, 7], [-2, -2, -2]], np.int8)
    out = {}
    for method in ("REDUCE_SUM", "REDUCE_PROD", "REDUCE_MAX", "REDUCE_MIN"):
        g = isa.Graph("t")
        g.output(O.reduce(g.input("x", x.shape, "int8"), method, [1], keep_dims=False), "y")
        out[method] = check(g, {"x": x})["y"].tolist()
    assert out["REDUCE_SUM"] == [127, -125, 33, 127, 9, -6]  # 150 saturates
    assert out["REDUCE_PROD"] == [-128, -128, 127, 0, -105, -8]  # -500000, -256, 256 saturate
    assert out["REDUCE_MAX"] == [100, 2, 16, 127, 7, -2]
    assert out["REDUCE_MIN"] == [-50, -128, 1, 0, -3, -2]


def test_integer_product_stays_exact_past_int64():
    """127^40 overflows int64; the saturated product is still right (see the template)."""
    x = np.full((2, 40), 127, np.int8)
    x[1, 0] = -1
    g = isa.Graph("t")
    g.output(O.reduce(g.input("x", x.shape, "int8"), "REDUCE_PROD", [1]), "y")
    assert check(g, {"x": x})["y"].ravel().tolist() == [127, -128]


def test_float_mean_is_the_float32_sum_times_the_reciprocal_count():
    x = np.array([[1.0, 2.0, 4.0]], np.float32)
    g = isa.Graph("t")
    g.output(O.reduce(g.input("x", x.shape), "REDUCE_MEAN", [1]), "y")
    assert check(g, {"x": x})["y"][0, 0] == np.float32(7) * np.float32(1 / 3)


def test_reduction_sources_have_the_reduced_axes_last_and_dense():
    """The tile of x [2, 3, 4, 5] reduced over axes 0 and 2 sits as (3, 5, 2, 4): the DMA
    writes local memory in that order, and reduce_sum reads it whole and dense."""
    g = isa.Graph("t")
    g.output(O.reduce(g.input("x", (2, 3, 4, 5)), "REDUCE_SUM", [2, 0]), "y")
    program = isa.lower(g, GENERIC)
    instrs = [i for stream in program.streams.values() for i in stream]
    assert not any(isinstance(i, Matmul) for i in instrs)
    (red,) = [i for i in instrs if isinstance(i, Vector) and i.fn in REDUCTIONS]
    assert red.srcs[0].shape == (3, 5, 2, 4) and red.srcs[0].strides == (40, 8, 4, 1)
    assert red.dst.shape == (3, 5)
    load = next(i for i in instrs if isinstance(i, Dma) and i.dst.mem == "lmem")
    assert load.src.shape == (2, 3, 4, 5) and load.src.strides == (60, 20, 5, 1)
    assert load.dst.strides == (4, 40, 1, 8)  # the same elements, reduced axes last


# ---- softmax ---------------------------------------------------------------------------------

@SETTINGS
@given(sa=shape_and_axes(), dtype=st.sampled_from(("float32", "float16", "bfloat16")), seed=st.integers(0, 2**32 - 1))
def test_softmax_matches_its_reference(sa, dtype, seed):
    shape, axes = sa
    rng = np.random.default_rng(seed)
    g = isa.Graph("t")
    g.output(O.softmax(g.input("x", shape, dtype), axes[0]), "y")
    x = values(rng, shape, dtype)
    y = check(g, {"x": x}, atol=1e-7 if dtype == "float32" else 1e-3)["y"].astype(np.float64)
    np.testing.assert_allclose(y.sum(axis=axes[0]), 1.0, rtol=1e-2 if dtype != "float32" else 1e-5)


def test_softmax_by_hand():
    x = np.array([[0.0, np.log(3.0)], [1000.0, 1000.0]], np.float32)  # x - max keeps 1000 finite
    g = isa.Graph("t")
    g.output(O.softmax(g.input("x", x.shape), -1), "y")
    np.testing.assert_allclose(check(g, {"x": x})["y"], [[0.25, 0.75], [0.5, 0.5]], rtol=1e-6)


# ---- softmax_int -----------------------------------------------------------------------------

@SETTINGS
@given(rank=st.sampled_from((2, 4)), dims=st.lists(st.integers(1, 9), min_size=4, max_size=4),
       dtype=st.sampled_from(("int8", "uint8")), scale=st.floats(1.0, 300.0, width=32),
       zero_point=st.integers(-140, 140), seed=st.integers(0, 2**32 - 1))
def test_softmax_int_matches_its_reference_exactly(rank, dims, dtype, scale, zero_point, seed):
    rng = np.random.default_rng(seed)
    shape = tuple(dims[:rank])
    table = (np.exp(-np.arange(256) / rng.uniform(2, 40)) * rng.uniform(0.5, 2)).astype(np.float32)
    g = isa.Graph("t")
    g.output(O.softmax_int(g.input("x", shape, dtype), table, scale, zero_point), "y")
    check(g, {"x": values(rng, shape, dtype)})


def test_softmax_int_by_hand():
    """C = 3: max 5; table[max - x] = table[0, 1, 5] = 4, 2, 2: prob 0.5, 0.25, 0.25; times
    scale 10 = 5, 2.5, 2.5, rounded half away from zero 5, 3, 3; plus zero point -1."""
    table = np.zeros(256, np.float32)
    table[[0, 1, 5]] = [4, 2, 2]
    x = np.array([[5, 4, 0]], np.int8).reshape(1, 3, 1, 1)
    g = isa.Graph("t")
    g.output(O.softmax_int(g.input("x", x.shape, "int8"), table, scale=10.0, zero_point=-1), "y")
    assert check(g, {"x": x})["y"].ravel().tolist() == [4, 2, 2]


def test_softmax_int_reads_differences_up_to_255_and_saturates():
    table = np.linspace(1.0, 0.0, 256, dtype=np.float32)
    table[255] = 1000.0  # max - x = 127 - (-128)
    x = np.array([[127, -128]], np.int8)
    g = isa.Graph("t")
    g.output(O.softmax_int(g.input("x", x.shape, "int8"), table, scale=1000.0, zero_point=0), "y")
    assert check(g, {"x": x})["y"].tolist() == [[1, 127]]  # 1000/1001 * 1000 = 999 saturates to 127


# ---- batch_norm ------------------------------------------------------------------------------

@SETTINGS
@given(dims=st.lists(st.integers(1, 6), min_size=2, max_size=4), affine=st.booleans(), stats=st.booleans(),
       scale=st.sampled_from((1.0, 0.0, 2.5, 0.999)), eps=st.sampled_from((1e-5, 1e-3, 0.0)), seed=st.integers(0, 2**32 - 1))
def test_batch_norm_matches_its_reference(dims, affine, stats, scale, eps, seed):
    rng = np.random.default_rng(seed)
    shape, c = tuple(dims), dims[1]
    if not stats and eps == 0.0 and any(n == 1 for i, n in enumerate(shape) if i != 1):
        eps = 1e-3  # a single sample per channel has variance 0: avoid 0 / 0
    g = isa.Graph("t")
    x = g.input("x", shape)
    names = ["mean", "var"] + (["gamma", "beta"] if affine else [])
    y, mean, var = O.batch_norm([x] + [g.input(n, (c,)) for n in names], epsilon=eps, use_global_stats=stats, scale=scale)
    for t, n in ((y, "y"), (mean, "mean_o"), (var, "var_o")):
        g.output(t, n)
    inputs = {"x": values(rng, shape, "float32"), "mean": values(rng, (c,), "float32"),
              "var": (rng.random(c) * 4 + 0.5).astype(np.float32),
              "gamma": values(rng, (c,), "float32"), "beta": values(rng, (c,), "float32")}
    inputs = {k: v for k, v in inputs.items() if k == "x" or k in names}
    check(g, inputs, rtol=2e-5, atol=2e-5)


def test_batch_norm_by_hand():
    """Global stats: mean_o = mean / scale, variance_o = variance / scale; batch stats: the
    biased variance over N, H and W; a scale of 0 zeroes the given statistics (Caffe's factor)."""
    x = np.array([1, 3, 10, 30], np.float32).reshape(2, 2, 1, 1)  # channel 0: 1, 10; channel 1: 3, 30
    for stats, scale, mean_o, var_o in ((True, 2.0, [1.0, 2.0], [4.0, 8.0]), (True, 0.0, [0.0, 0.0], [0.0, 0.0]),
                                        (False, 5.0, [5.5, 16.5], [20.25, 182.25])):
        g = isa.Graph("t")
        y, m, v = O.batch_norm(g.input("x", x.shape), g.constant("m", np.array([2, 4], np.float32)),
                               g.constant("v", np.array([8, 16], np.float32)), epsilon=0.0, use_global_stats=stats, scale=scale)
        g.output(y, "y"), g.output(m, "m"), g.output(v, "v")
        out = check(g, {"x": x}, rtol=1e-6)
        assert out["m"].tolist() == mean_o and out["v"].tolist() == var_o
        with np.errstate(divide="ignore"):  # a zeroed variance with epsilon 0: x / 0
            want = (x.reshape(2, 2) - np.array(mean_o)) / np.sqrt(var_o)
        np.testing.assert_allclose(out["y"].reshape(2, 2), want, rtol=1e-6)


def test_batch_norm_takes_its_tensors_as_a_list_or_one_by_one():
    g = isa.Graph("t")
    x, m, v = g.input("x", (1, 2, 2, 2)), g.input("m", (2,)), g.input("v", (2,))
    a = O.batch_norm([x, m, v], epsilon=1e-3)
    b = O.batch_norm(x, m, v, epsilon=1e-3)
    assert [t.shape for t in a] == [t.shape for t in b] == [(1, 2, 2, 2), (2,), (2,)]
    assert g.nodes[0].params == g.nodes[1].params and g.nodes[0].inputs == g.nodes[1].inputs


def test_batch_norm_stores_only_the_outputs_used():
    g = isa.Graph("t")
    y, _, _ = O.batch_norm(g.input("x", (2, 3, 2, 2)), g.input("m", (3,)), g.input("v", (3,)), use_global_stats=False)
    g.output(y, "y")
    program = isa.lower(g, GENERIC)
    stores = [i for i in program.streams["dma_out"] if isinstance(i, Dma)]
    assert len(stores) == 1 and stores[0].dst.shape == (2, 3, 2, 2)


# ---- hw_avg and hw_mul -----------------------------------------------------------------------

def test_hw_avg_modes_by_hand():
    """hw = 2 * 2; x / 4 = -1.5, -0.5, 0.5, 1.5, 2.25, -2.75: mode 1 rounds half up, mode 2 half
    away from zero."""
    x = np.array([-6, -2, 2, 6, 9, -11], np.int32).reshape(1, 6, 1, 1)
    want = {0: [-1.5, -0.5, 0.5, 1.5, 2.25, -2.75], 1: [-1, 0, 1, 2, 2, -3], 2: [-2, -1, 1, 2, 2, -3]}
    for mode, expected in want.items():
        g = isa.Graph("t")
        g.output(O.hw_avg(g.input("x", x.shape, "int32"), g.input("hw", (2,), "int32"), mode), "y")
        got = check(g, {"x": x, "hw": np.array([2, 2], np.int32)})["y"]
        assert got.dtype == (np.float32 if mode == 0 else np.int32)
        assert got.ravel().tolist() == expected, mode


@SETTINGS
@given(dims=st.lists(st.integers(1, 6), min_size=1, max_size=4), mode=st.sampled_from((0, 1, 2)),
       dtype=st.sampled_from(("int32", "uint32", "int16", "uint8")), h=st.integers(0, 40), w=st.integers(1, 40),
       seed=st.integers(0, 2**32 - 1))
def test_hw_avg_matches_its_reference(dims, mode, dtype, h, w, seed):
    rng = np.random.default_rng(seed)
    shape = tuple(dims)
    g = isa.Graph("t")
    g.output(O.hw_avg(g.input("x", shape, dtype), g.input("hw", (2,), "int32"), mode), "y")
    x = values(rng, shape, dtype)
    if rng.random() < 0.5:  # multiples of half the area: exact ties
        x = (rng.integers(-30, 30, shape) * max(h * w // 2, 1)).astype(x.dtype)
    check(g, {"x": x, "hw": np.array([h, w], np.int32)}, rtol=0)


def test_hw_mul():
    g = isa.Graph("t")
    y = O.hw_mul(g.input("hw", (2,), "int32"), 0.5)
    g.output(y, "y")
    assert y.shape == (1,) and y.dtype == "float32"
    assert check(g, {"hw": np.array([7, 9], np.int32)})["y"].tolist() == [31.5]


# ---- tiles -----------------------------------------------------------------------------------

def _graphs():
    """(graph, inputs) for each op, big enough to need several tiles in SMALL's local memory."""
    rng = np.random.default_rng(7)
    out = []
    g = isa.Graph("reduce")
    g.output(O.reduce(g.input("x", (24, 33, 20)), "REDUCE_SUM", [0, 2]), "sum")
    g.output(O.reduce(g.input("xi", (40, 12, 30), "int8"), "REDUCE_MEAN", [1], keep_dims=False), "mean")
    out.append((g, {"x": values(rng, (24, 33, 20), "float32"), "xi": values(rng, (40, 12, 30), "int8")}))
    g = isa.Graph("softmax")
    g.output(O.softmax(g.input("x", (30, 40, 16)), 1), "y")
    out.append((g, {"x": values(rng, (30, 40, 16), "float32")}))
    g = isa.Graph("softmax_int")
    g.output(O.softmax_int(g.input("x", (16, 50, 6, 5), "uint8"), np.exp(-np.arange(256) / 30), 200.0, 10), "y")
    out.append((g, {"x": values(rng, (16, 50, 6, 5), "uint8")}))
    for stats in (True, False):
        g = isa.Graph(f"bn{int(stats)}")
        y, m, v = O.batch_norm(g.input("x", (3, 40, 5, 7)), *(g.input(n, (40,)) for n in ("m", "v", "ga", "be")),
                               use_global_stats=stats, scale=3.0)
        g.output(y, "y"), g.output(m, "mo"), g.output(v, "vo")
        out.append((g, {"x": values(rng, (3, 40, 5, 7), "float32"), "m": values(rng, (40,), "float32"),
                        "v": (rng.random(40) + 0.5).astype(np.float32),
                        "ga": values(rng, (40,), "float32"), "be": values(rng, (40,), "float32")}))
    g = isa.Graph("hw_avg")
    g.output(O.hw_avg(g.input("x", (8, 64, 30), "int32"), g.input("hw", (2,), "int32"), 1), "y")
    out.append((g, {"x": values(rng, (8, 64, 30), "int32"), "hw": np.array([3, 5], np.int32)}))
    return out


@pytest.mark.parametrize("name", ["reduce", "softmax", "softmax_int", "bn1", "bn0", "hw_avg"])
def test_tiles_that_split_the_kept_axes_give_the_same_numbers(name):
    graph, inputs = next((g, i) for g, i in _graphs() if g.name == name)
    program, res = run(graph, SMALL, inputs)
    loads = [i for i in program.streams["dma_in"] if isinstance(i, Dma) and i.src.mem == "ddr" and i.src.size > 256]
    assert len(loads) >= 3, "the small chip should need several tiles"
    whole = check(graph, inputs, rtol=2e-5, atol=2e-6)  # the generic chip, against the references
    for policy in (isa.Policy(double_buffer=False), isa.Policy(fuse=False)):
        _, again = run(graph, SMALL, inputs, policy)
        for out in whole:
            np.testing.assert_array_equal(again.outputs[out], res.outputs[out], err_msg=out)
    for out in whole:
        np.testing.assert_array_equal(res.outputs[out], whole[out], err_msg=out)


def test_reduction_programs_survive_their_text_form():
    for graph, _ in _graphs() + [(_hw_mul_graph(), None)]:
        program = isa.lower(graph, SMALL)
        assert isa.Program.from_text(program.to_text()) == program


def _hw_mul_graph():
    g = isa.Graph("hw_mul")
    g.output(O.hw_mul(g.input("hw", (2,), "int32"), 3), "y")
    return g


# ---- errors ----------------------------------------------------------------------------------

def _x(shape=(2, 3, 4, 5), dtype="float32"):
    return isa.Graph("t").input("x", shape, dtype)


@pytest.mark.parametrize("build, error, message", [
    (lambda: O.reduce(_x(), "REDUCE_SUM", [4]), isa.ShapeError, r"reduce: axis 4 is out of range for a rank-4 tensor"),
    (lambda: O.reduce(_x(), "REDUCE_SUM", [-5]), isa.ShapeError, r"reduce: axis -5 is out of range"),
    (lambda: O.reduce(_x(), "REDUCE_SUM", [1, -3]), isa.ShapeError, r"reduce: axis 1 is named twice"),
    (lambda: O.reduce(_x(), "REDUCE_SUM", []), isa.ShapeError, r"reduce: axis_list is empty"),
    (lambda: O.reduce(_x(), "REDUCE_SUM", [0, 1], axis_num=3), isa.ShapeError, r"reduce: axis_num 3"),
    (lambda: O.reduce(_x(), "REDUCE_AVG", [0]), isa.UnsupportedError, r"reduce: unknown method 'REDUCE_AVG'"),
    (lambda: O.reduce(_x(dtype="int32"), "REDUCE_SUM", [0]), isa.UnsupportedError, r"reduce: tensor_i is int32"),
    (lambda: O.softmax(_x(), 4), isa.ShapeError, r"softmax: axis 4 is out of range"),
    (lambda: O.softmax(_x(dtype="int8"), 1), isa.UnsupportedError, r"softmax: tensor_i is int8"),
    (lambda: O.softmax_int(_x(dtype="int8"), np.ones(255), 1.0, 0), isa.ShapeError, (r"softmax_int: the table must "
                                                                                    r"have 256 entries, got 255")),
    (lambda: O.softmax_int(_x(dtype="int16"), np.ones(256), 1.0, 0), isa.UnsupportedError, r"softmax_int: inputs is int16"),
    (lambda: O.softmax_int(_x((5,), "int8"), np.ones(256), 1.0, 0), isa.ShapeError, r"softmax_int: inputs must be NC or NCHW"),
    (lambda: O.softmax_int(_x(dtype="int8"), np.ones(256), 1.0, 0.5), isa.UnsupportedError, r"softmax_int: zero_point must be an integer"),
    (lambda: _hw_avg(3), isa.UnsupportedError, r"hw_avg: mode must be 0, 1 or 2, got 3"),
    (lambda: _hw_avg(-1), isa.UnsupportedError, r"hw_avg: mode must be 0, 1 or 2, got -1"),
    (lambda: _hw_avg(0, hw_shape=(3,)), isa.ShapeError, r"hw_avg: tensor_hw must be an integer tensor of shape \[2\]"),
    (lambda: _hw_avg(0, dtype="float32"), isa.UnsupportedError, r"hw_avg: tensor_i is float32"),
    (lambda: O.hw_mul(_x((3,), "int32"), 1.0), isa.ShapeError, r"hw_mul: tensor_i must be an integer tensor of shape \[2\]"),
    (lambda: O.hw_mul(_x((2,), "int32"), "two"), isa.UnsupportedError, r"hw_mul: scale must be a number"),
    (lambda: _bn(count=4), isa.ShapeError, r"batch_norm: tensor_i must hold 3 or 5 tensors"),
    (lambda: _bn(c=4), isa.ShapeError, r"batch_norm: mean_i must have shape \(3,\)"),
    (lambda: _bn(dtype="float16"), isa.UnsupportedError, r"batch_norm: tensor_i is float16"),
    (lambda: _bn(method="LAYER_NORM"), isa.UnsupportedError, r"batch_norm: method 'LAYER_NORM' is not supported"),
])
def test_bad_parameters_raise_errors_naming_the_op(build, error, message):
    with pytest.raises(error, match=message):
        build()


def _hw_avg(mode, hw_shape=(2,), dtype="int32"):
    g = isa.Graph("t")
    return O.hw_avg(g.input("x", (1, 2, 1, 1), dtype), g.input("hw", hw_shape, "int32"), mode)


def _bn(count=3, c=3, dtype="float32", method="BATCH_NORM"):
    g = isa.Graph("t")
    x = g.input("x", (2, 3, 2, 2), dtype)
    vectors = [g.input(f"v{i}", (c,), dtype) for i in range(count - 1)]
    return O.batch_norm(x, *vectors, method=method)


@pytest.mark.parametrize("build", [
    lambda g: O.reduce(g.input("x", (2, 5000, 3)), "REDUCE_MAX", [1]),
    lambda g: O.softmax(g.input("x", (3, 9000)), 1),
    lambda g: O.batch_norm(g.input("x", (20, 2, 30, 30)), g.input("m", (2,)), g.input("v", (2,))),
])
def test_reduced_axes_too_large_for_local_memory_raise_out_of_memory(build):
    g = isa.Graph("t")
    y = build(g)
    g.output(y[0] if isinstance(y, tuple) else y, "y")
    op = g.nodes[0].op
    with pytest.raises(isa.OutOfMemoryError, match=rf"{op} {op}_0: a tile keeps the reduced axes .* bytes of lmem .* \d+ free"):
        isa.lower(g, SMALL)
    isa.lower(g, GENERIC)  # fits in the full-size local memory
