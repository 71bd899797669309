"""The data-arrangement ops (isa/ops/movement.py, pad.py, axis_shift.py, fill.py) on the arrange
template (isa/lower/templates/arrange.py): every seed example with its hand values (the
corrections for pad PAD_SYMMETRIC and space_to_batch in docs/sources.md#known-slips), random shapes and dtypes on every chip
that has the op, DMA transfers only (and a transpose's vector copy on chip), pieces that write every output element exactly once,
staging through on-chip memory, the fill's one-burst read, and every documented constraint's
error."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from refeval import evaluate

import chips
import isa
import sim
from isa import dtypes
from isa.costs import side_bytes
from isa.ops import REGISTRY

O = isa.ops
CHIPS = {name: chips.load(name) for name in chips.available()}
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run(build, inputs, chip="generic"):
    """Build a graph (build(g) gives a tensor or a list), run it in both modes; returns the
    machine's outputs, the ops' references' outputs, and the functional result."""
    chip = CHIPS[chip] if isinstance(chip, str) else chip
    g = isa.Graph("t")
    outs = build(g)
    outs = outs if isinstance(outs, list) else [outs]
    names = [f"y{i}" for i in range(len(outs))]
    for t, n in zip(outs, names):
        g.output(t, n)
    res = sim.run(g, chip, inputs)
    assert sim.run(g, chip, mode="timing").cycles == res.cycles
    # data movement only: DMA transfers, or a vector copy putting a transpose's chunk in order on chip
    # (isa/lower/templates/transpose.py)
    assert all(e.kind in ("dma", "wait") or (e.kind, e.name) == ("vector", "copy") for e in res.trace.events)
    want = evaluate(g, inputs, chip)
    return [res.outputs[n] for n in names], [want[n] for n in names], res


def check(build, inputs, expected, chip="bm1684"):
    """The machine and the reference both give the hand-written values."""
    got, want, _ = run(build, inputs, chip)
    for out, ref, hand in zip(got, want, expected):
        np.testing.assert_array_equal(out, np.asarray(hand, out.dtype))
        np.testing.assert_array_equal(ref, np.asarray(hand, ref.dtype))
        assert out.shape == np.shape(hand)


# ---- the seed's examples ---------------------------------------------------------------------

A23 = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
TILED = [[1, 2, 3, 1, 2, 3], [4, 5, 6, 4, 5, 6], [1, 2, 3, 1, 2, 3], [4, 5, 6, 4, 5, 6]]


def test_permute_moves_axes_as_the_seed_says():
    x = np.arange(6 * 7 * 8 * 9, dtype=np.float32).reshape(6, 7, 8, 9)
    (y,), _, _ = run(lambda g: O.permute(g.input("x", x.shape), [1, 3, 2, 0]), {"x": x}, "bm1684")
    assert y.shape == (7, 9, 8, 6)
    assert y[2, 5, 3, 1] == x[1, 2, 3, 5]


@pytest.mark.parametrize("op", ["tile", "broadcast", "repeat"])  # the seed: broadcast and repeat are tile
def test_tile_broadcast_and_repeat_give_the_tile_example(op):
    check(lambda g: getattr(O, op)(g.input("x", A23.shape), [2, 2]), {"x": A23}, [TILED])


def test_extract_examples():
    check(lambda g: O.extract(g.input("x", A23.shape), [0, 0], [2, 3], [1, 2]), {"x": A23}, [[[1, 3], [4, 6]]])
    x = np.arange(10, dtype=np.float32)  # "size 10, start 1, end 7, stride 2: 3 elements, indices 1, 3, 5"
    check(lambda g: O.extract(g.input("x", x.shape), [1], [7], [2]), {"x": x}, [[1, 3, 5]])


def test_extract_v2_takes_constant_tensors():
    def build(g):
        start, end, stride = (g.constant(k, np.array(v, np.int32)) for k, v in (("s", [0, 0]), ("e", [2, 3]), ("k", [1, 2])))
        return O.extract_v2(g.input("x", A23.shape), start, end, stride)
    check(build, {"x": A23}, [[[1, 3], [4, 6]]])


def test_interleave_example_and_a_short_last_run():
    a = np.array([[1, 2, 3, 4], [5, 6, 7, 8]], np.float32)
    check(lambda g: O.interleave(g.input("a", a.shape), g.input("b", a.shape), 1, 2), {"a": a, "b": a + 8},
          [[[1, 2, 9, 10, 3, 4, 11, 12], [5, 6, 13, 14, 7, 8, 15, 16]]])
    # the seed is silent on an axis that is no multiple of step: the last, shorter run alternates too
    check(lambda g: O.interleave(g.input("a", (3,)), g.input("b", (3,)), 0, 2),
          {"a": np.array([1, 2, 3], np.float32), "b": np.array([4, 5, 6], np.float32)}, [[1, 2, 4, 5, 3, 6]])


def test_concat_and_split_by_hand():
    b = np.array([[7], [8]], np.float32)
    check(lambda g: O.concat([g.input("a", A23.shape), g.input("b", b.shape)], 1), {"a": A23, "b": b},
          [[[1, 2, 3, 7], [4, 5, 6, 8]]])
    check(lambda g: O.split(g.input("a", A23.shape), 1, 2, [2, 1]), {"a": A23}, [[[1, 2], [4, 5]], [[3], [6]]])
    check(lambda g: O.split(g.input("a", A23.shape), 0, 2), {"a": A23}, [[[1, 2, 3]], [[4, 5, 6]]])


def test_split_returns_a_list_and_writes_only_the_parts_used():
    g = isa.Graph("t")
    parts = O.split(g.input("a", (4, 3)), 0, 1)
    assert isinstance(parts, list) and len(parts) == 1
    _, b = O.split(g.tensors["a"], 0, 2)
    g.output(b, "b")
    res = sim.run(g, "bm1684", {"a": np.arange(12, dtype=np.float32).reshape(4, 3)})
    np.testing.assert_array_equal(res.outputs["b"], [[6, 7, 8], [9, 10, 11]])
    assert sum(1 for e in res.trace.events if e.kind == "dma") == 1


X33 = np.array([[1, 2, 3], [4, 5, 6], [7, 8, 9]], np.float32)
PADDED = {  # the seed's example, paddings [2, 1, 1, 2], pad_val 0
    "PAD_CONSTANT": [[0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0], [0, 1, 2, 3, 0, 0], [0, 4, 5, 6, 0, 0], [0, 7, 8, 9, 0, 0],
                     [0, 0, 0, 0, 0, 0]],
    "PAD_REFLECT": [[8, 7, 8, 9, 8, 7], [5, 4, 5, 6, 5, 4], [2, 1, 2, 3, 2, 1], [5, 4, 5, 6, 5, 4], [8, 7, 8, 9, 8, 7],
                    [5, 4, 5, 6, 5, 4]],
    # the seed prints the second row [1,1,2,3,3,0]; symmetric padding gives [1,1,2,3,3,2] (docs/sources.md#known-slips)
    "PAD_SYMMETRIC": [[4, 4, 5, 6, 6, 5], [1, 1, 2, 3, 3, 2], [1, 1, 2, 3, 3, 2], [4, 4, 5, 6, 6, 5], [7, 7, 8, 9, 9, 8],
                      [7, 7, 8, 9, 9, 8]],
    "PAD_EDGE": [[1, 1, 2, 3, 3, 3], [1, 1, 2, 3, 3, 3], [1, 1, 2, 3, 3, 3], [4, 4, 5, 6, 6, 6], [7, 7, 8, 9, 9, 9],
                 [7, 7, 8, 9, 9, 9]],
}


@pytest.mark.parametrize("mode", PADDED)
def test_pad_example(mode):
    check(lambda g: O.pad(g.input("x", X33.shape), 0, [2, 1, 1, 2], mode), {"x": X33}, [PADDED[mode]])
    check(lambda g: O.pad_v2(g.input("x", X33.shape), g.constant("p", np.array([2, 1, 1, 2], np.int32)), 0, mode),
          {"x": X33}, [PADDED[mode]])


def test_pad_pieces_are_disjoint_slabs_and_reversed_reads():
    """A constant border is 2 fills per axis around one copy; a reflected one reads backwards."""
    opdef = REGISTRY["pad"]
    constant = opdef.pieces([(3, 3)], (6, 6), {"paddings": (2, 1, 1, 2), "pad_mode": "PAD_CONSTANT", "pad_val": 0})
    assert sorted(p.input is None for p in constant) == [False] + [True] * 4
    reflect = opdef.pieces([(3, 3)], (6, 6), {"paddings": (2, 1, 1, 2), "pad_mode": "PAD_REFLECT", "pad_val": 0})
    assert len(reflect) == 9 and any(s < 0 for p in reflect for s in p.src.strides)


S2B_IN = np.arange(1, 17, dtype=np.float32).reshape(2, 2, 2, 2)
S2B_OUT = [  # the seed prints the sixth block [[0,12]],[[0,6]]; the formula gives [[0,12]],[[0,16]]
    [[[0, 2]], [[0, 6]]], [[[0, 10]], [[0, 14]]], [[[1, 0]], [[5, 0]]], [[[9, 0]], [[13, 0]]],
    [[[0, 4]], [[0, 8]]], [[[0, 12]], [[0, 16]]], [[[3, 0]], [[7, 0]]], [[[11, 0]], [[15, 0]]],
]


def test_space_to_batch_and_batch_to_space_examples():
    check(lambda g: O.space_to_batch(g.input("x", S2B_IN.shape), [2, 2], [0, 0, 1, 1]), {"x": S2B_IN}, [S2B_OUT])
    y = np.array(S2B_OUT, np.float32)
    check(lambda g: O.batch_to_space(g.input("x", y.shape), [2, 2], [0, 0, 1, 1]), {"x": y}, [S2B_IN])


def numbers(text):
    return np.array(text.split(), np.float32).reshape(2, 3, 2, 3)


SHIFTS = {  # the seed's examples (lines 1249-1298), num=2, axis=1: (input, output)
    "lshift": (numbers("""
        -2.8400023 -3.0926123 0.8007528 -4.425494 3.1243792 -1.8667252
        2.6016338 -4.5330453 3.3297958 0.4723102 -3.9454443 2.9412758
        1.639079 0.9966435 -4.565726 -4.4187098 -4.164262 -2.1304157
        -1.0305262 0.29448375 2.296344 4.6640167 4.8765826 4.213974
        -0.5052162 2.5084617 -1.0592794 3.5504768 -1.8535931 2.8203747
        2.269553 1.8395575 -0.29201797 3.826423 1.2334696 -3.597132"""), numbers("""
        1.639079 0.9966435 -4.565726 -4.4187098 -4.164262 -2.1304157
        0 0 0 0 0 0
        0 0 0 0 0 0
        2.269553 1.8395575 -0.29201797 3.826423 1.2334696 -3.597132
        0 0 0 0 0 0
        0 0 0 0 0 0""")),
    "rshift": (numbers("""
        -2.9186313 -0.24356237 1.2540053 -4.8955007 -4.2767916 2.6306164
        0.4980812 -3.5192926 -3.6721635 -2.4307063 -4.778728 -1.1970373
        -0.8761543 -3.8434331 4.1573873 -1.0016538 -2.423648 4.227273
        -0.6212847 -3.8671243 -2.8993464 3.8161297 -1.1340241 3.7225533
        1.4913342 -2.3859684 -4.793918 -3.1233387 -3.7450933 0.23620334
        0.7224776 -0.17362665 -1.212464 -1.4175521 2.4217072 1.9185396"""), numbers("""
        0 0 0 0 0 0
        0 0 0 0 0 0
        -2.9186313 -0.24356237 1.2540053 -4.8955007 -4.2767916 2.6306164
        0 0 0 0 0 0
        0 0 0 0 0 0
        -0.6212847 -3.8671243 -2.8993464 3.8161297 -1.1340241 3.7225533""")),
    "clshift": (numbers("""
        -1.4399457 1.3908076 4.605652 4.1669855 -4.5294094 -2.269803
        -2.791052 0.24600852 -0.31004244 -2.2961752 -3.7278128 3.9250836
        3.9799519 0.10813443 4.395123 -4.0098004 -4.0820565 3.7188065
        -0.9577033 -0.9451188 4.2339325 -3.3796852 2.1229327 -2.6846838
        4.5255566 2.3164961 4.5181227 -0.37370363 -4.586216 3.908726
        -0.17074646 1.3929528 -4.4028926 0.6453225 -4.983816 2.3636074"""), numbers("""
        3.9799519 0.10813443 4.395123 -4.0098004 -4.0820565 3.7188065
        -1.4399457 1.3908076 4.605652 4.1669855 -4.5294094 -2.269803
        -2.791052 0.24600852 -0.31004244 -2.2961752 -3.7278128 3.9250836
        -0.17074646 1.3929528 -4.4028926 0.6453225 -4.983816 2.3636074
        -0.9577033 -0.9451188 4.2339325 -3.3796852 2.1229327 -2.6846838
        4.5255566 2.3164961 4.5181227 -0.37370363 -4.586216 3.908726""")),
    "crshift": (numbers("""
        0.19381493 -1.3157253 -0.7534135 -3.4642425 2.8708158 -0.02517204
        -0.2214326 1.6934406 -4.934953 -2.593857 0.6439782 -4.3378534
        -4.404575 -4.548932 -3.44572 -1.871432 -3.1994293 3.7281854
        4.6499877 -4.407126 -1.496588 -3.5752625 4.5654907 -3.6933322
        -4.4067974 2.0822976 -0.22787085 -1.5884587 0.04195577 -2.4798908
        -3.8945446 -0.90788925 -3.20682 2.5059738 4.5769157 -2.5235941"""), numbers("""
        -0.2214326 1.6934406 -4.934953 -2.593857 0.6439782 -4.3378534
        -4.404575 -4.548932 -3.44572 -1.871432 -3.1994293 3.7281854
        0.19381493 -1.3157253 -0.7534135 -3.4642425 2.8708158 -0.02517204
        -4.4067974 2.0822976 -0.22787085 -1.5884587 0.04195577 -2.4798908
        -3.8945446 -0.90788925 -3.20682 2.5059738 4.5769157 -2.5235941
        4.6499877 -4.407126 -1.496588 -3.5752625 4.5654907 -3.6933322""")),
}


@pytest.mark.parametrize("op", SHIFTS)
def test_shift_examples(op):
    x, y = SHIFTS[op]
    check(lambda g: getattr(O, op)(g.input("x", x.shape), 2), {"x": x}, [y])


@pytest.mark.parametrize("op, num, want", [
    ("lshift", 5, [[0, 0, 0]]), ("rshift", 3, [[0, 0, 0]]),  # past the axis: all zeros
    ("clshift", 5, [[3, 1, 2]]), ("crshift", 7, [[3, 1, 2]]),  # circular: num modulo the axis
    ("lshift", 0, [[1, 2, 3]]),
])
def test_shifts_past_the_axis(op, num, want):
    x = np.array([[[1], [2], [3]]], np.int8)
    check(lambda g: getattr(O, op)(g.input("x", x.shape, "int8"), num), {"x": x}, [np.array(want, np.int8).reshape(1, 3, 1)])


def test_number_like_reads_nothing_and_fills():
    x = np.zeros((2, 3), np.int8)
    check(lambda g: O.number_like(g.input("x", x.shape, "int8"), -3), {"x": x}, [[[-3] * 3] * 2])
    check(lambda g: O.number_like(g.input("x", x.shape), 2.5), {"x": x.astype(np.float32)}, [[[2.5] * 3] * 2])


@pytest.mark.parametrize("dtype", ["float16", "int32", "bfloat16"])
def test_fill_gives_the_atb_example(dtype):
    """ATB example 3: value [1], outDim [2, 3]; made in a `with graph:` block."""
    g = isa.Graph("t")
    with g:
        y = O.fill([2, 3], [1], dtype)
    assert y.graph is g and y.dtype == dtype
    g.output(y, "y")
    res = sim.run(g, "generic")
    np.testing.assert_array_equal(res.outputs["y"].astype(np.float32), np.ones((2, 3)))
    assert [e.kind for e in res.trace.events if e.kind != "wait"] == ["dma"]
    check(lambda g: O.fill([2, 3], 1, dtype, graph=g), {}, [np.ones((2, 3))], "generic")


# ---- the cost of a fill --------------------------------------------------------------------

def ddr_reads(build, chip):
    g = isa.Graph("t")
    g.output(build(g), "y")
    prog = isa.lower(g, chip)
    return [i for s in prog.streams.values() for i in s if i.kind == "dma" and i.src.mem == "ddr"]


def test_a_fill_reads_one_burst_where_a_copy_reads_the_tensor():
    chip = CHIPS["bm1684"]
    burst = chip.memories["ddr"].burst
    (fill,) = ddr_reads(lambda g: O.number_like(g.input("x", (4, 64)), 1.0), chip)
    (copy,) = ddr_reads(lambda g: O.permute(g.input("x", (4, 64)), [0, 1]), chip)
    assert fill.src.strides == (0, 0) and fill.dst == copy.dst
    assert side_bytes(fill.src, burst) == burst < side_bytes(copy.src, burst) == 4 * 64 * 4


# ---- random shapes and dtypes on every chip that has the op --------------------------------

GENERIC_DTYPES = ("float32", "float16", "bfloat16", "int8", "uint8", "int16", "int32", "int64", "uint32")


def shape_of(data, low=1, high=4, size=5):
    return tuple(data.draw(st.integers(1, size)) for _ in range(data.draw(st.integers(low, high))))


def array(data, shape, dtype):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    if dtypes.is_float(dtype):
        return (rng.standard_normal(shape) * 50).astype(dtypes.np_dtype(dtype))
    return rng.integers(0, 100, shape).astype(dtypes.np_dtype(dtype))


def one_input(data, dtype, shape, make):
    x = array(data, shape, dtype)
    return (lambda g: make(g, g.input("x", shape, dtype))), {"x": x}


def case_permute(data, dtype):
    shape = shape_of(data)
    order = data.draw(st.permutations(range(len(shape))))
    return one_input(data, dtype, shape, lambda g, x: O.permute(x, order))


def case_tile(op):
    def case(data, dtype):
        shape = shape_of(data, high=3, size=4)
        reps = [data.draw(st.integers(1, 3)) for _ in shape]
        return one_input(data, dtype, shape, lambda g, x: getattr(O, op)(x, reps))
    return case


def slices(data, shape):
    start = [data.draw(st.integers(0, d - 1)) for d in shape]
    end = [data.draw(st.integers(s + 1, d)) for s, d in zip(start, shape)]
    return start, end, [data.draw(st.integers(1, 3)) for _ in shape]


def case_extract(data, dtype):
    shape = shape_of(data, size=7)
    start, end, stride = slices(data, shape)
    return one_input(data, dtype, shape, lambda g, x: O.extract(x, start, end, stride))


def case_extract_v2(data, dtype):
    shape = shape_of(data, size=7)
    values = [np.array(v, np.int32) for v in slices(data, shape)]
    return one_input(data, dtype, shape, lambda g, x: O.extract_v2(x, *(g.constant(k, v) for k, v in zip("sek", values))))


def case_interleave(data, dtype):
    shape = shape_of(data, high=3, size=6)
    axis, step = data.draw(st.integers(0, len(shape) - 1)), data.draw(st.integers(1, 4))
    inputs = {"a": array(data, shape, dtype), "b": array(data, shape, dtype)}
    return (lambda g: O.interleave(g.input("a", shape, dtype), g.input("b", shape, dtype), axis, step)), inputs


def case_concat(data, dtype):
    shape = shape_of(data, high=3)
    axis = data.draw(st.integers(0, len(shape) - 1))
    shapes = [shape[:axis] + (data.draw(st.integers(1, 4)),) + shape[axis + 1:] for _ in range(data.draw(st.integers(1, 3)))]
    inputs = {f"x{k}": array(data, s, dtype) for k, s in enumerate(shapes)}
    return (lambda g: O.concat([g.input(f"x{k}", s, dtype) for k, s in enumerate(shapes)], axis)), inputs


def case_split(data, dtype):
    shape = shape_of(data, high=3, size=6)
    axis = data.draw(st.integers(0, len(shape) - 1))
    d = shape[axis]
    if data.draw(st.booleans()):  # equal parts
        num, size = data.draw(st.sampled_from([k for k in range(1, d + 1) if d % k == 0])), None
    else:
        cuts = sorted(data.draw(st.sets(st.integers(1, d - 1), max_size=3))) if d > 1 else []
        size = [b - a for a, b in zip([0] + cuts, cuts + [d])]
        num = len(size)
    return one_input(data, dtype, shape, lambda g, x: O.split(x, axis, num, size))


def paddings(data, shape):
    mode = data.draw(st.sampled_from(["PAD_CONSTANT", "PAD_REFLECT", "PAD_SYMMETRIC", "PAD_EDGE"]))
    most = {"PAD_REFLECT": lambda d: d - 1, "PAD_SYMMETRIC": lambda d: d}.get(mode, lambda d: 3)
    return mode, [data.draw(st.integers(0, min(most(d), 3))) for d in shape for _ in "ba"]


def case_pad(data, dtype):
    shape = shape_of(data)
    mode, pads = paddings(data, shape)
    value = data.draw(st.integers(0, 9))
    return one_input(data, dtype, shape, lambda g, x: O.pad(x, value, pads, mode))


def case_pad_v2(data, dtype):
    shape = shape_of(data)
    mode, pads = paddings(data, shape)
    return one_input(data, dtype, shape, lambda g, x: O.pad_v2(x, g.constant("p", np.array(pads, np.int32)), 7, mode))


def padded_to(data, size, block):
    """(before, after) padding that makes size a multiple of block."""
    before = data.draw(st.integers(0, 2))
    return [before, -(size + before) % block + block * data.draw(st.integers(0, 1))]


def case_space_to_batch(data, dtype):
    block = [data.draw(st.integers(1, 3)) for _ in range(2)]
    shape = shape_of(data, low=4, high=4)
    pad = padded_to(data, shape[2], block[0]) + padded_to(data, shape[3], block[1])
    return one_input(data, dtype, shape, lambda g, x: O.space_to_batch(x, block, pad))


def case_batch_to_space(data, dtype):
    block = [data.draw(st.integers(1, 3)) for _ in range(2)]
    h, w = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    crop = [data.draw(st.integers(0, h * block[0] - 1)), 0, data.draw(st.integers(0, w * block[1] - 1)), 0]
    crop[1] = data.draw(st.integers(0, h * block[0] - 1 - crop[0]))
    crop[3] = data.draw(st.integers(0, w * block[1] - 1 - crop[2]))
    shape = (data.draw(st.integers(1, 2)) * block[0] * block[1], data.draw(st.integers(1, 3)), h, w)
    return one_input(data, dtype, shape, lambda g, x: O.batch_to_space(x, block, crop))


def case_shift(op):
    def case(data, dtype):
        shape = shape_of(data, low=2)
        num = data.draw(st.integers(0, shape[1] + 2))
        return one_input(data, dtype, shape, lambda g, x: getattr(O, op)(x, num))
    return case


def case_number_like(data, dtype):
    value = data.draw(st.integers(0, 9))
    return one_input(data, dtype, shape_of(data), lambda g, x: O.number_like(x, value))


def case_fill(data, dtype):
    dims, value = shape_of(data), data.draw(st.integers(-9, 9))
    return (lambda g: O.fill(dims, [value], dtype, graph=g)), {}


CASES = {
    "permute": case_permute, "tile": case_tile("tile"), "broadcast": case_tile("broadcast"), "repeat": case_tile("repeat"),
    "extract": case_extract, "extract_v2": case_extract_v2, "interleave": case_interleave, "concat": case_concat,
    "split": case_split, "pad": case_pad, "pad_v2": case_pad_v2, "space_to_batch": case_space_to_batch,
    "batch_to_space": case_batch_to_space, "number_like": case_number_like, "fill": case_fill,
    **{op: case_shift(op) for op in ("lshift", "rshift", "clshift", "crshift")},
}
PAIRS = [(op, chip) for op in CASES for chip in CHIPS if CHIPS[chip].support(op)]


def test_every_arrangement_op_is_tested_on_every_chip_that_has_it():
    assert all(REGISTRY[op].template == "arrange" for op in CASES) and len(CASES) == 19
    assert {chip for op, chip in PAIRS if op == "lshift"} == {"bm1684", "bm1686", "generic"}
    assert {chip for op, chip in PAIRS if op == "fill"} == {"generic", "ascend310b", "ascend910b"}  # an Ascend ATB op


def pieces_of(build):
    """The non-empty pieces of the op build(g) adds, and its output shapes."""
    g = isa.Graph("p")
    build(g)
    node = g.nodes[-1]
    shapes = [g.tensors[t].shape for t in node.outputs]
    pieces = REGISTRY[node.op].pieces([g.tensors[t].shape for t in node.inputs], shapes[0], node.params)
    return [p for p in pieces if 0 not in p.dst.shape], shapes


def written_once(pieces, out_shapes):
    """Whether the pieces write every output element exactly once."""
    counts = [np.zeros(int(np.prod(s)), int) for s in out_shapes]
    for p in pieces:
        grid = np.indices(p.dst.shape).reshape(len(p.dst.shape), -1)
        np.add.at(counts[p.output], p.dst.offset + np.dot(p.dst.strides, grid).astype(int), 1)
    return all((c == 1).all() for c in counts)


@pytest.mark.parametrize("op, chip", PAIRS)
@SETTINGS
@given(data=st.data())
def test_random_shapes_and_dtypes(op, chip, data):
    row = CHIPS[chip].support(op).dtypes
    allowed = REGISTRY[op].DTYPES if op == "fill" else GENERIC_DTYPES
    dtype = data.draw(st.sampled_from(sorted(set(allowed) & set(row or allowed))))
    build, inputs = CASES[op](data, dtype)
    got, want, _ = run(build, inputs, chip)
    for out, ref in zip(got, want):
        assert out.dtype == ref.dtype and out.shape == ref.shape
        np.testing.assert_array_equal(out, ref)
    assert written_once(*pieces_of(build))


# ---- staging through on-chip memory --------------------------------------------------------

@pytest.mark.parametrize("build", [
    lambda g, x: O.pad(x, 5, [1, 0, 0, 2, 3, 1, 2, 2], "PAD_CONSTANT"),
    lambda g, x: O.pad(x, 0, [1, 1, 2, 0, 3, 1, 2, 2], "PAD_REFLECT"),
    lambda g, x: O.tile(x, [1, 2, 1, 2]),
    lambda g, x: O.split(x, 0, 2),
    lambda g, x: O.crshift(x, 2),
    lambda g, x: O.number_like(x, 4.0),
], ids=["pad-constant", "pad-reflect", "tile", "split", "crshift", "number_like"])
def test_through_a_staging_memory_in_chunks(three_level, build):
    """No engine copies DDR to DDR there: each piece goes round through on-chip memory in chunks."""
    chip = chips.load(three_level.source, {"memories.lmem.size": "1KiB", "memories.l1.size": "2KiB"})
    x = np.arange(2 * 3 * 12 * 16, dtype=np.float32).reshape(2, 3, 12, 16)  # 4.5 KiB
    op = lambda g: build(g, g.input("x", x.shape))  # noqa: E731
    got, want, res = run(op, {"x": x}, chip)
    for out, ref in zip(got, want):
        np.testing.assert_array_equal(out, ref)
    stores = [e for e in res.trace.events if e.dst == "ddr"]
    assert len(stores) > len(pieces_of(op)[0]) and max(e.bytes for e in stores) <= 2048


# ---- errors ----------------------------------------------------------------------------------

def constant(g, name, values, dtype="int32"):
    return g.constant(name, np.array(values, dtype))


ERRORS = [  # (op call on a graph g with x float32 (2, 3, 4) and n float32 (2, 2, 4, 4), error, message)
    (lambda g, x, n: O.permute(x, [0, 0, 1]), isa.ShapeError,
     r"permute: order must be a permutation of 0\.\.2 for shape \(2, 3, 4\), got \[0, 0, 1\]"),
    (lambda g, x, n: O.tile(x, [1, 2]), isa.ShapeError, r"tile: reps needs one count per dimension of shape \(2, 3, 4\), got 2: \[1, 2\]"),
    (lambda g, x, n: O.broadcast(x, [1, 0, 1]), isa.ShapeError, r"broadcast: every times value must be >= 1, got \[1, 0, 1\]"),
    (lambda g, x, n: O.repeat(x, 2), isa.ShapeError, r"repeat: reps must be a list of integers, got 2"),
    (lambda g, x, n: O.extract(x, [0, 0], [2, 3], [1, 1]), isa.ShapeError, r"extract: start needs 3 values for shape \(2, 3, 4\), got 2"),
    (lambda g, x, n: O.extract(x, [0, 0, 0], [2, 3, 4], [1, 0, 1]), isa.ShapeError, r"extract: stride\[1\] must be >= 1, got 0"),
    (lambda g, x, n: O.extract(x, [0, 2, 0], [2, 2, 4], [1, 1, 1]), isa.ShapeError,
     r"extract: axis 1 of size 3 needs 0 <= start < end <= 3, got start 2, end 2"),
    (lambda g, x, n: O.extract(x, [0, 0, 0], [2, 3, 5], [1, 1, 1]), isa.ShapeError,
     r"axis 2 of size 4 needs 0 <= start < end <= 4, got start 0, end 5"),
    (lambda g, x, n: O.extract_v2(x, g.input("s", (3,), "int32"), constant(g, "e", [2, 3, 4]), constant(g, "k", [1, 1, 1])),
     isa.ShapeError, r"extract_v2: start \(s\) must be a constant tensor"),
    (lambda g, x, n: O.extract_v2(x, constant(g, "s", [0, 0, 0], "float32"), constant(g, "e", [2, 3, 4]), constant(g, "k", [1, 1, 1])),
     isa.ShapeError, r"extract_v2: start must be an int32 vector of 3 elements, got float32 \(3,\)"),
    (lambda g, x, n: O.extract_v2(x, constant(g, "s", [0, 0]), constant(g, "e", [2, 3]), constant(g, "k", [1, 1])),
     isa.ShapeError, r"extract_v2: start must be an int32 vector of 3 elements, got int32 \(2,\)"),
    (lambda g, x, n: O.interleave(x, g.input("y", (2, 3, 5)), 1, 1), isa.ShapeError,
     r"interleave: tensor_i0 and tensor_i1 must have one shape, got \(2, 3, 4\) and \(2, 3, 5\)"),
    (lambda g, x, n: O.interleave(x, g.input("y", (2, 3, 4), "int8"), 1, 1), isa.UnsupportedError,
     r"interleave: every input must have one dtype, got \['float32', 'int8'\]"),
    (lambda g, x, n: O.interleave(x, x, 3, 1), isa.ShapeError, r"interleave: axis must be in \[0, 2\] for a rank-3 tensor, got 3"),
    (lambda g, x, n: O.interleave(x, x, 1, 0), isa.ShapeError, r"interleave: step must be >= 1, got 0"),
    (lambda g, x, n: O.concat([], 0), isa.ShapeError, r"concat: tensor_i must be a non-empty list of tensors"),
    (lambda g, x, n: O.concat([x, n], 0), isa.ShapeError,
     r"concat: every input must have rank 3 \(as input 0\), input 1 has shape \(2, 2, 4, 4\)"),
    (lambda g, x, n: O.concat([x, g.input("y", (2, 2, 4))], 0), isa.ShapeError,
     r"concat: inputs must agree off axis 0: input 0 has shape \(2, 3, 4\), input 1 \(2, 2, 4\)"),
    (lambda g, x, n: O.concat([x, g.input("y", (2, 3, 4), "int32")], 0), isa.UnsupportedError, r"concat: every input must have one dtype"),
    (lambda g, x, n: O.split(x, 1, 2), isa.ShapeError, r"split: axis 1 of size 3 does not split into num = 2 equal parts"),
    (lambda g, x, n: O.split(x, 1, 2, [1, 1, 1]), isa.ShapeError, r"split: size needs num = 2 values, got 3: \[1, 1, 1\]"),
    (lambda g, x, n: O.split(x, 1, 2, [1, 1]), isa.ShapeError, r"split: size must add up to axis 1's 3, got \[1, 1\] \(sum 2\)"),
    (lambda g, x, n: O.split(x, 1, 0), isa.ShapeError, r"split: num must be >= 1, got 0"),
    (lambda g, x, n: O.pad(x, 0, [1, 1, 1, 1]), isa.ShapeError, r"pad: paddings needs 2 x rank = 6 values for shape \(2, 3, 4\), got 4"),
    (lambda g, x, n: O.pad(x, 0, [1, 1, -1, 1, 0, 0]), isa.ShapeError, r"pad: paddings must be >= 0, got \[1, 1, -1, 1, 0, 0\]"),
    (lambda g, x, n: O.pad(x, 0, [0, 0, 3, 0, 0, 0], "PAD_REFLECT"), isa.ShapeError,
     r"pad: PAD_REFLECT needs paddings\[2\] <= 2 \(axis 1 has size 3\), got 3"),
    (lambda g, x, n: O.pad(x, 0, [0, 0, 0, 0, 0, 5], "PAD_SYMMETRIC"), isa.ShapeError,
     r"pad: PAD_SYMMETRIC needs paddings\[5\] <= 4 \(axis 2 has size 4\), got 5"),
    (lambda g, x, n: O.pad(x, 0, [0] * 6, "PAD_WRAP"), isa.UnsupportedError, r"pad: unknown pad_mode 'PAD_WRAP'; known: PAD_CONSTANT"),
    (lambda g, x, n: O.pad(g.input("i", (2,), "int8"), 1.5, [1, 1]), isa.UnsupportedError,
     r"pad: pad_val must be an integer in \[-128, 127\] for int8, got 1.5"),
    (lambda g, x, n: O.pad(g.input("h", (2,), "float16"), 1e6, [1, 1]), isa.UnsupportedError, r"pad: pad_val 1000000.0 overflows float16"),
    (lambda g, x, n: O.pad_v2(x, g.input("p", (6,), "int32"), 0), isa.ShapeError, r"pad_v2: paddings \(p\) must be a constant tensor"),
    (lambda g, x, n: O.pad_v2(x, constant(g, "p", [1, 1]), 0), isa.ShapeError, r"pad_v2: paddings must be an int32 vector of 6 elements"),
    (lambda g, x, n: O.space_to_batch(x, [2, 2], [0, 0, 0, 0]), isa.ShapeError,
     r"space_to_batch: tensor_i must be 4-d NCHW, got shape \(2, 3, 4\)"),
    (lambda g, x, n: O.space_to_batch(n, [2], [0, 0, 0, 0]), isa.ShapeError, r"space_to_batch: block_size needs 2 values >= 1, got \[2\]"),
    (lambda g, x, n: O.space_to_batch(n, [2, 2], [0, 0, 1]), isa.ShapeError, r"space_to_batch: pad needs 4 values >= 0, got \[0, 0, 1\]"),
    (lambda g, x, n: O.space_to_batch(n, [2, 2], [0, 1, 0, 0]), isa.ShapeError,
     r"space_to_batch: padded axis 2 \(4 \+ 1\) must be a multiple of block_size 2"),
    (lambda g, x, n: O.batch_to_space(n, [2, 2], [0, 0, 0, 0]), isa.ShapeError,
     r"batch_to_space: batch 2 must be a multiple of block_size\[0\] x block_size\[1\] = 4"),
    (lambda g, x, n: O.batch_to_space(n, [2, 1], [4, 4, 0, 0]), isa.ShapeError,
     r"batch_to_space: crop_size \[4, 4, 0, 0\] crops the 8x4 result to 0x4; it must keep at least 1x1"),
    (lambda g, x, n: O.batch_to_space(n, [1, 1], [0, 0, -1, 0]), isa.ShapeError, r"batch_to_space: crop_size needs 4 values >= 0"),
    (lambda g, x, n: O.lshift(x, 1, axis=2), isa.UnsupportedError, r"lshift: only axis 1 is supported \(seed line 1247\), got axis 2"),
    (lambda g, x, n: O.crshift(x, -1), isa.ShapeError, r"crshift: num must be >= 0, got -1"),
    (lambda g, x, n: O.rshift(g.input("v", (5,)), 1), isa.ShapeError, r"rshift: shifts along axis 1, so needs rank >= 2, got shape \(5,\)"),
    (lambda g, x, n: O.number_like(g.input("i", (2,), "int8"), 300), isa.UnsupportedError,
     r"number_like: scalar_i must be an integer in \[-128, 127\] for int8, got 300"),
    (lambda g, x, n: O.number_like(x, "one"), isa.UnsupportedError, r"number_like: scalar_i must be a number, got 'one'"),
    (lambda g, x, n: O.fill([2, 3], [1], "float32", graph=g), isa.UnsupportedError,
     r"fill: dtype 'float32' is not supported \(the seed: float16, int32, bfloat16\)"),
    (lambda g, x, n: O.fill([2, 3], [1, 2], "int32", graph=g), isa.ShapeError,
     r"fill: value must hold exactly one element \(the seed: value.size\(\) == 1\), got 2"),
    (lambda g, x, n: O.fill([2, 0], [1], "int32", graph=g), isa.ShapeError, r"fill: every out_dim value must be >= 1, got \[2, 0\]"),
    (lambda g, x, n: O.fill([], [1], "int32", graph=g), isa.ShapeError, r"fill: out_dim needs at least one dimension"),
    (lambda g, x, n: O.fill([2], [0.5], "int32", graph=g), isa.UnsupportedError,
     r"fill: value must be an integer in .* for int32, got 0.5"),
]


@pytest.mark.parametrize("call, error, message", ERRORS)
def test_errors(call, error, message):
    g = isa.Graph("t")
    with pytest.raises(error, match=message):
        call(g, g.input("x", (2, 3, 4)), g.input("n", (2, 2, 4, 4)))


def test_fill_needs_a_graph():
    with pytest.raises(isa.GraphError, match=r"fill: no tensor operand says which graph it belongs to; pass graph="):
        O.fill([2, 3], [1], "int32")


@pytest.mark.parametrize("chip, build, message", [
    ("bm1682", lambda g: O.lshift(g.input("x", (2, 3)), 1), r"lshift with float32 -> float32 is not supported on chip bm1682"),
    ("bm1684", lambda g: O.fill([2], [1], "int32", graph=g), r"fill with no input -> int32 is not supported on chip bm1684"),
    ("bm1684", lambda g: O.permute(g.input("x", (2, 3), "float16"), [1, 0]),
     r"permute with float16 -> float16 is not supported on chip bm1684"),
    # no BM1686 line for pad_v2: BM1684's row, without FLOAT16
    ("bm1686", lambda g: O.pad_v2(g.input("x", (2, 3), "float16"), g.constant("p", np.zeros(4, np.int32)), 0),
     r"pad_v2 with float16 -> float16 is not supported on chip bm1686"),
])
def test_chip_tables_reject_what_the_seed_does_not_list(chip, build, message):
    g = isa.Graph("t")
    g.output(build(g), "y")
    with pytest.raises(isa.UnsupportedError, match=message):
        isa.lower(g, CHIPS[chip])
