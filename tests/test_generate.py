"""Data-generation ops: constdata (a preloaded constant), sequence_gen (the seed's example), and
the TensorRT Fill modes linspace, random_uniform and random_normal on the scalar engine:
Philox4x32-10 against Random123's known answers, the machine against the plain-Python
references, the distributions' moments, determinism, and every documented limit."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from refeval import evaluate

import chips
import isa
import sim
from isa.instructions import Dma, Scalar, Wait
from isa.ops.generate import philox4x32
from sim.kernels import KERNELS
from sim.kernels.generate import philox4x32_10

O = isa.ops
CHIPS = {name: chips.load(name) for name in ("generic", "bm1682", "bm1684", "bm1686")}
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run(build, inputs=None, chip="generic"):
    """Build a graph (build(g) returns its outputs by name), run it functional and timing (equal
    cycles), check the program text round trip; returns (result, references, program)."""
    g = isa.Graph("t")
    with g:
        outs = build(g)
    for name, t in outs.items():
        g.output(t, name)
    inputs = inputs or {}
    res = sim.run(g, chip, inputs)
    assert sim.run(g, chip, mode="timing").cycles == res.cycles
    prog = isa.lower(g, CHIPS[chip])
    assert isa.Program.from_text(prog.to_text()) == prog
    return res, evaluate(g, inputs, CHIPS[chip]), prog


def instructions(prog, op):
    return [i for stream in prog.streams.values() for i in stream if i.op == op and not isinstance(i, Wait)]


def scalar_cycles(chip, work, fn):
    engine = CHIPS[chip].engines_of("scalar")[0]
    return engine.issue_latency + math.ceil(engine.scalar.per_element * engine.scalar.op_cycles.get(fn, 1) * work)


# ---- Philox4x32-10 -------------------------------------------------------------------------------

KAT = [  # Random123 tests/kat_vectors, the three "philox4x32 10" lines: counter, key, result
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0), (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("counter, key, want", KAT)
def test_philox_known_answers(counter, key, want):
    assert philox4x32(counter, key) == want  # the references' plain-Python generator
    words = philox4x32_10([np.array([c], np.uint32) for c in counter], key)  # the kernel's numpy one
    assert tuple(int(w[0]) for w in words) == want


def test_both_philox_agree_on_a_batch_of_counters():
    counters = np.arange(0, 2**32, 2**32 // 97, dtype=np.uint64)[:97].astype(np.uint32)
    key = (0x12345678, 0x9ABCDEF0)
    words = philox4x32_10([counters, counters ^ np.uint32(0xFFFF), np.zeros_like(counters), counters], key)
    for i, c in enumerate(counters.tolist()):
        assert philox4x32((c, c ^ 0xFFFF, 0, c), key) == tuple(int(w[i]) for w in words)


# ---- constdata -----------------------------------------------------------------------------------

@pytest.mark.parametrize("chip", ["generic", "bm1682", "bm1684", "bm1686"])
def test_constdata_is_preloaded_and_runs_no_instruction(chip):
    array = np.arange(12, dtype=np.float32).reshape(3, 4) / 4
    x = np.ones((3, 4), np.float32)
    res, ref, prog = run(lambda g: {"y": O.add(g.input("x", (3, 4)), O.constdata(array, name="c"))}, {"x": x}, chip)
    np.testing.assert_array_equal(res.outputs["y"], array + 1)
    np.testing.assert_array_equal(ref["y"], array + 1)
    assert instructions(prog, "c") == []
    assert [b.name for b in prog.bindings if b.role == "const"] == ["c.value"]


def test_constdata_as_a_graph_output_is_a_copy():
    array = np.array([[1, -2, 3]], np.int8)
    res, _, prog = run(lambda g: {"y": O.constdata(array, name="c")}, chip="bm1684")
    np.testing.assert_array_equal(res.outputs["y"], array)
    assert instructions(prog, "c") and all(isinstance(i, Dma) for i in instructions(prog, "c"))


@pytest.mark.parametrize("chip, dtype, ok", [
    ("bm1682", "float32", True), ("bm1682", "int32", False),  # seed line 1184
    ("bm1684", "uint16", True), ("bm1684", "float16", False),  # line 1185
    ("bm1686", "int8", True), ("bm1686", "float16", False),  # line 1186 has no FLOAT16
])
def test_constdata_dtypes(chip, dtype, ok):
    g = isa.Graph("t")
    g.output(O.constdata([[1, 2]], dtype, graph=g), "y")
    if ok:
        assert sim.run(g, chip).outputs["y"].tolist() == [[1, 2]]
    else:
        with pytest.raises(isa.UnsupportedError, match=f"constdata with no input -> {dtype} is not supported on chip {chip}"):
            isa.lower(g, CHIPS[chip])


def test_constdata_errors():
    g = isa.Graph("t")
    with pytest.raises(isa.UnsupportedError, match=r"constdata: the array holds values that are "
                                                   r"not integers in \[-128, 127\], so not int8"):
        O.constdata([1, 300], "int8", graph=g)
    with pytest.raises(isa.UnsupportedError, match="constdata: numpy dtype complex128 has no npusim dtype"):
        O.constdata([0.5j], graph=g)
    with pytest.raises(isa.GraphError, match="constdata: no tensor operand says which graph"):
        O.constdata(np.ones(2, np.float32))


# ---- sequence_gen --------------------------------------------------------------------------------

SEED_EXAMPLE = [[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]], [[12, 13, 14, 15], [16, 17, 18, 19], [20, 21, 22, 23]]]


@pytest.mark.parametrize("chip", ["generic", "bm1684", "bm1686"])
@pytest.mark.parametrize("out_dtype", ["int32", "float32"])
def test_sequence_gen_gives_the_seeds_example(chip, out_dtype):
    res, ref, prog = run(lambda g: {"y": O.sequence_gen(g.constant("s", np.array([2, 3, 4], np.int32)), out_dtype, name="q")}, chip=chip)
    assert res.outputs["y"].dtype == np.dtype(out_dtype)
    assert res.outputs["y"].tolist() == SEED_EXAMPLE == ref["y"].tolist()  # seed lines 1197-1198
    (instr,) = instructions(prog, "q")
    assert isinstance(instr, Scalar) and instr.fn == "sequence"
    (event,) = [e for e in res.trace.events if e.op == "q" and e.kind == "scalar"]
    assert event.end - event.start == scalar_cycles(chip, 24, "sequence")  # one element of work each


def test_sequence_gen_takes_its_shape_from_shape_fetch():
    x = np.zeros((3, 5), np.float32)
    res, _, _ = run(lambda g: {"y": O.sequence_gen(O.shape_fetch(g.input("x", (3, 5)), 0, 2), "float32")}, {"x": x}, "bm1684")
    np.testing.assert_array_equal(res.outputs["y"], np.arange(15, dtype=np.float32).reshape(3, 5))


def test_sequence_gen_errors():
    g = isa.Graph("t")
    shape = g.constant("s", np.array([2, 3], np.int32))
    with pytest.raises(isa.ShapeError, match=r"sequence_gen: shape_tensor \(n\) must be a constant tensor"):
        O.sequence_gen(g.input("n", (2,), "int32"))
    with pytest.raises(isa.UnsupportedError, match=r"sequence_gen: out_dtype must be one of int32, float32 \(seed line 1200\), got 'int8'"):
        O.sequence_gen(shape, "int8")
    with pytest.raises(isa.UnsupportedError, match=r"sequence_gen: shape_tensor must be a 1-d int32 tensor \(seed line 1200\), got int64"):
        O.sequence_gen(g.constant("s64", np.array([2, 3], np.int64)))
    with pytest.raises(isa.ShapeError, match=r"sequence_gen: every shape_tensor value must be >= 1, got \[2, 0\]"):
        O.sequence_gen(g.constant("s0", np.array([2, 0], np.int32)))
    g.output(O.sequence_gen(shape), "y")
    with pytest.raises(isa.UnsupportedError, match=r"sequence_gen with int32 -> int32 is not supported "
                                                   r"on chip bm1682 \(the chip has no sequence_gen"):
        isa.lower(g, CHIPS["bm1682"])  # seed line 1199: 不支持


# ---- linspace ------------------------------------------------------------------------------------

def test_linspace_gives_the_seeds_example_with_alpha_and_beta_as_inputs():
    """Seed 003's example: alpha and beta are network inputs, read by the kernel at run time."""
    def build(g):
        return {"y": O.linspace((2, 3), g.input("alpha", ()), g.input("beta", (2,)), name="l")}

    res, ref, prog = run(build, {"alpha": np.array(0.0, np.float32), "beta": np.array([3.0, 1.0], np.float32)})
    assert res.outputs["y"].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]] == ref["y"].tolist()
    (instr,) = instructions(prog, "l")
    assert instr.fn == "linspace" and len(instr.srcs) == 2 and "alpha" not in dict(instr.args)
    res, _, _ = run(build, {"alpha": np.array(10.0, np.float32), "beta": np.array([-1.0, 0.5], np.float32)})
    assert res.outputs["y"].tolist() == [[10.0, 10.5, 11.0], [9.0, 9.5, 10.0]]


@pytest.mark.parametrize("dtype, alpha, beta, want", [
    ("int32", 5, [10, -1], [[5, 4, 3], [15, 14, 13]]),
    ("int64", -(2**40), [2**33, 1], [[-(2**40), -(2**40) + 1, -(2**40) + 2], [2**33 - 2**40, 2**33 - 2**40 + 1, 2**33 - 2**40 + 2]]),
    ("float32", 0.25, [0.5, 0.125], [[0.25, 0.375, 0.5], [0.75, 0.875, 1.0]]),
    ("int32", 2**31 - 2, [0, 1], [[2**31 - 2, 2**31 - 1, 2**31 - 1]] * 2),  # saturates, as every integer store
])
def test_linspace_by_hand(dtype, alpha, beta, want):
    res, ref, _ = run(lambda g: {"y": O.linspace((2, 3), alpha, beta, dtype)})
    assert res.outputs["y"].dtype == np.dtype(dtype)
    assert res.outputs["y"].tolist() == want == ref["y"].tolist()


def test_linspace_with_a_number_and_a_tensor():
    """A number given next to a tensor becomes a constant tensor: both are read at run time."""
    res, _, _ = run(lambda g: {"y": O.linspace((3,), g.input("a", (1,), "int32"), [4], "int32")}, {"a": np.array([7], np.int32)})
    assert res.outputs["y"].tolist() == [7, 11, 15]


def test_linspace_shape_from_a_known_tensor():
    res, _, _ = run(lambda g: {"y": O.linspace(O.shape_fetch(g.input("x", (2, 2)), 0, 2), 1, [2, 1], "int32")},
                    {"x": np.zeros((2, 2), np.float32)})
    assert res.outputs["y"].tolist() == [[1, 2], [3, 4]]


@SETTINGS
@given(data=st.data())
def test_linspace_random(data):
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    dtype = data.draw(st.sampled_from(["int32", "int64", "float32"]))
    number = st.integers(-1000, 1000) if dtype != "float32" else st.floats(-100, 100, width=32)
    alpha, beta = data.draw(number), [data.draw(number) for _ in shape]
    res, ref, _ = run(lambda g: {"y": O.linspace(shape, alpha, beta, dtype)})
    want = alpha + sum(np.float64(b) * i for b, i in zip(beta, np.indices(shape)))
    np.testing.assert_array_equal(res.outputs["y"], ref["y"])
    np.testing.assert_allclose(res.outputs["y"], want.astype(dtype), rtol=1e-6, atol=1e-30)


# ---- random_uniform and random_normal ------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("op, a, b", [("random_uniform", -2.0, 3.0), ("random_normal", 1.5, 0.25)])
def test_random_equals_the_plain_python_reference(op, a, b, dtype):
    res, ref, _ = run(lambda g: {"y": getattr(O, op)((5, 7), a, b, dtype, seed=2**40 + 3, name="r")})
    assert res.outputs["y"].dtype == np.dtype(dtype)
    if op == "random_uniform":
        np.testing.assert_array_equal(res.outputs["y"], ref["y"])  # integer arithmetic and one multiply-add
    else:
        np.testing.assert_allclose(res.outputs["y"], ref["y"], rtol=1e-6 if dtype == "float32" else 1e-3)
    (event,) = [e for e in res.trace.events if e.op == "r" and e.kind == "scalar"]
    assert event.end - event.start == scalar_cycles("generic", 35, op)


def test_uniform_by_hand():
    """Element 0 with seed 0 is the first known-answer block: word 0 = 0x6627e8d5."""
    res, _, _ = run(lambda g: {"y": O.random_uniform((1,), 10.0, 20.0)})
    u = (0x6627E8D5 >> 8) * 2.0**-24
    assert res.outputs["y"][0] == np.float32(10.0 + 10.0 * u)


def test_uniform_moments_and_range():
    res, _, _ = run(lambda g: {"y": O.random_uniform((400, 500), 2.0, 3.0, seed=7)})
    y = res.outputs["y"].astype(np.float64)
    assert 2.0 <= y.min() < 2.001 and 2.999 < y.max() <= 3.0  # seed 003: in [alpha, beta]
    assert abs(y.mean() - 2.5) < 0.005  # the standard error is 0.289 / sqrt(2e5) = 0.00065
    assert abs(y.std() - 1 / math.sqrt(12)) < 0.003
    counts, _ = np.histogram(y, bins=10, range=(2.0, 3.0))
    assert counts.min() > 0.97 * y.size / 10 and counts.max() < 1.03 * y.size / 10


def test_normal_moments():
    res, _, _ = run(lambda g: {"y": O.random_normal((400, 500), -1.0, 2.0, seed=11)})
    y = res.outputs["y"].astype(np.float64)
    assert abs(y.mean() + 1.0) < 0.02  # standard error 2 / sqrt(2e5) = 0.0045
    assert abs(y.std() - 2.0) < 0.02
    z = (y + 1.0) / 2.0
    assert abs(np.mean(np.abs(z) < 1) - 0.6827) < 0.005  # the 68% rule
    assert abs(np.mean(z**3)) < 0.03 and abs(np.mean(z**4) - 3.0) < 0.08  # skew 0, kurtosis 3
    assert np.abs(z).max() <= math.sqrt(48 * math.log(2))  # 24-bit uniforms bound the tail


def test_random_numbers_depend_on_the_index_and_the_seed_only():
    """Counter-based: the same element gets the same number whatever the shape around it."""
    run_kernel = KERNELS["random_normal"].run
    flat = run_kernel([], {"shape": (24,), "mean": 0.0, "scale": 1.0, "seed": 5})[0]
    shaped = run_kernel([], {"shape": (2, 3, 4), "mean": 0.0, "scale": 1.0, "seed": 5})[0]
    longer = run_kernel([], {"shape": (100,), "mean": 0.0, "scale": 1.0, "seed": 5})[0]
    other = run_kernel([], {"shape": (24,), "mean": 0.0, "scale": 1.0, "seed": 6})[0]
    np.testing.assert_array_equal(flat, shaped.reshape(-1))
    np.testing.assert_array_equal(flat, longer[:24])
    assert not np.any(flat == other)


def test_random_with_parameters_as_inputs():
    inputs = {"lo": np.array([-5.0], np.float32), "hi": np.array([-4.0], np.float32)}
    res, ref, prog = run(lambda g: {"y": O.random_uniform((50,), g.input("lo", (1,)), g.input("hi", (1,)), seed=3, name="r")}, inputs)
    np.testing.assert_array_equal(res.outputs["y"], ref["y"])
    assert res.outputs["y"].min() >= -5.0 and res.outputs["y"].max() <= -4.0
    (instr,) = instructions(prog, "r")
    assert len(instr.srcs) == 2
    static, _, _ = run(lambda g: {"y": O.random_uniform((50,), -5.0, -4.0, seed=3)})
    np.testing.assert_array_equal(res.outputs["y"], static.outputs["y"])


# ---- errors ------------------------------------------------------------------------------------

@pytest.mark.parametrize("build, err, match", [
    (lambda g: O.linspace((2**16, 2**15), 0, [1, 1], "int32"), isa.ShapeError,
     r"linspace: shape \(65536, 32768\) has 2147483648 elements; the limit is 2\^31 - 1 = 2147483647 \(seed 003, Volume Limits\)"),
    (lambda g: O.random_normal((2**31,)), isa.ShapeError, r"random_normal: shape \(2147483648,\) has 2147483648 elements; the limit"),
    (lambda g: O.linspace((2, 3), 0, [1, 1], "float16"), isa.UnsupportedError,
     r"linspace: dtype 'float16' is not supported \(seed 003: int32, int64, float32\)"),
    (lambda g: O.random_uniform((2,), dtype="int32"), isa.UnsupportedError, (r"random_uniform: dtype 'int32' is not "
                                                                            r"supported \(seed 003: float16, float32\)")),
    (lambda g: O.linspace((2, 3), 0, [1], "int32"), isa.ShapeError, (r"linspace: beta needs one step per output "
                                                                    r"dimension \(2 for shape \(2, 3\)\), got \[1\]")),
    (lambda g: O.linspace((3,), 0, 1), isa.ShapeError, r"linspace: beta needs one step per output dimension \(a list or a tensor\), got 1"),
    (lambda g: O.linspace((3,), 0.5, [1], "int32"), isa.UnsupportedError, (r"linspace: alpha must be an integer in "
                                                                          r"\[-2147483648, 2147483647\] for int32, got 0.5")),
    (lambda g: O.random_uniform((3,), 2.0, 1.0), isa.UnsupportedError, "random_uniform: low 2.0 is above high 1.0"),
    (lambda g: O.random_normal((3,), 0.0, -1.0), isa.UnsupportedError, r"random_normal: scale must be >= 0, got -1.0"),
    (lambda g: O.random_normal((3,), "a"), isa.UnsupportedError, "random_normal: mean must be a number or a Tensor, got 'a'"),
    (lambda g: O.random_normal((3,), 0.0, 1e6, "float16"), isa.UnsupportedError, "random_normal: scale 1000000.0 overflows float16"),
    (lambda g: O.random_uniform((3,), seed=-1), isa.ShapeError, "random_uniform: seed must be >= 0, got -1"),
    (lambda g: O.random_uniform((3,), seed=2**64), isa.UnsupportedError, r"random_uniform: seed must be below 2\^64"),
    (lambda g: O.random_uniform((0, 3)), isa.ShapeError, r"random_uniform: every shape value must be >= 1, got \[0, 3\]"),
    (lambda g: O.random_uniform(g.input("n", (2,), "int32")), isa.ShapeError, r"random_uniform: shape \(n\) must be a constant tensor"),
    (lambda g: O.random_uniform((3,), g.input("lo", (1,), "float16"), 1.0), isa.UnsupportedError,
     "random_uniform: low is float16; as a tensor it must have the output's dtype float32"),
    (lambda g: O.linspace((2, 3), 0.0, g.input("b", (3,))), isa.ShapeError,
     r"linspace: beta must be a tensor of 2 element\(s\) \(a scalar or a vector\), got shape \(3,\)"),
])
def test_fill_errors(build, err, match):
    g = isa.Graph("t")
    with g, pytest.raises(err, match=match):
        build(g)


def test_fill_needs_a_graph():
    with pytest.raises(isa.GraphError, match="random_uniform: no tensor operand says which graph it belongs to"):
        O.random_uniform((2,))


@pytest.mark.parametrize("chip", ["bm1682", "bm1684", "bm1686"])
def test_the_tensorrt_ops_are_not_on_the_sophgo_chips(chip):
    g = isa.Graph("t")
    g.output(O.linspace((2,), 0, [1], graph=g), "y")
    with pytest.raises(isa.UnsupportedError, match=f"linspace with .*-> float32 is not supported on chip {chip}"):
        isa.lower(g, CHIPS[chip])
