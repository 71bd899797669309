"""gather (seed 001, Ascend ATB GatherOperation: tf.gather with batch_dims) on the machine: the
seed's examples, random shapes, axes, batch_dims and dtypes against a TensorFlow-style reference
written as explicit loops, on every chip that has the op, through on-chip staging in chunks
where no engine copies DDR to DDR, the same cycles in timing mode, and every documented limit."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import chips
import isa
import sim
from isa import dtypes
from isa.instructions import IndexedDma

O = isa.ops
GENERIC = chips.load("generic")
ASCEND = chips.load("ascend310b")
BM1686 = chips.load("bm1686")  # TPU-MLIR's BM1684X gather: float tables, int32 or int64 indices
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SEED_X = np.arange(1, 10).reshape(3, 3)


def tf_gather(x, indices, axis, batch_dims):
    """tf.gather, element by element: out[b, a, i, q] = x[b, a, indices[b, i], q]."""
    b = batch_dims
    shape = x.shape[:axis] + indices.shape[b:] + x.shape[axis + 1:]
    out = np.empty(shape, x.dtype)
    rank_i = indices.ndim - b
    for o in np.ndindex(*shape):
        batch, before, at, after = o[:b], o[b:axis], o[axis:axis + rank_i], o[axis + rank_i:]
        out[o] = x[batch + before + (int(indices[batch + at]),) + after]
    return out


def run(chip, x, indices, axis=0, batch_dims=0, constant=False, wrap=False):
    """Gather on the machine (indices an input, or a constant); checks timing cycles too."""
    g = isa.Graph("t")
    xt = g.input("x", x.shape, dtypes.of_array(x))
    it = indices if constant else g.input("i", indices.shape, dtypes.of_array(indices))
    g.output(O.gather(xt, it, axis=axis, batch_dims=batch_dims, wrap=wrap), "y")
    inputs = {"x": x} if constant else {"x": x, "i": indices}
    res = sim.run(g, chip, inputs)
    assert sim.run(g, chip, mode="timing").cycles == res.cycles
    return res


# ---- the seed's examples -----------------------------------------------------------------

@pytest.mark.parametrize("chip", [GENERIC, ASCEND, BM1686], ids=["generic", "ascend310b", "bm1686"])
def test_seed_examples(chip):
    x = SEED_X.astype(np.float16)  # the seed's C++ example makes x ACL_FLOAT16
    example1 = run(chip, x, np.array([2, 0], np.int64), axis=1).outputs["y"]
    np.testing.assert_array_equal(example1, [[3, 1], [6, 4], [9, 7]])
    example2 = run(chip, x, np.array([[1], [2], [0]], np.int64), axis=1, batch_dims=1).outputs["y"]
    np.testing.assert_array_equal(example2, [[2], [6], [7]])
    demo = run(chip, x, np.array([2, 1], np.int64), axis=0, constant=True).outputs["y"]  # the C++ demo: out {2, 3}
    np.testing.assert_array_equal(demo, [[7, 8, 9], [4, 5, 6]])


def test_the_reference_agrees_with_the_seed():
    np.testing.assert_array_equal(tf_gather(SEED_X, np.array([[1], [2], [0]]), 1, 1), [[2], [6], [7]])
    opdef = O.REGISTRY["gather"]
    got = opdef.reference([SEED_X, np.array([[1], [2], [0]])], {"axis": 1, "batch_dims": 1})[0]
    np.testing.assert_array_equal(got, [[2], [6], [7]])


def test_one_indexed_transfer_ddr_to_ddr_where_an_engine_links_them():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    res = run(GENERIC, x, np.array([[3, 0, 3], [1, 1, 2]], np.int32), axis=2, batch_dims=1)
    np.testing.assert_array_equal(res.outputs["y"], tf_gather(x, np.array([[3, 0, 3], [1, 1, 2]]), 2, 1))
    (instr,) = [i for s in res.program.streams.values() for i in s if not hasattr(i, "on")]
    assert isinstance(instr, IndexedDma) and not instr.scatter
    assert instr.table.mem == instr.rows.mem == "ddr"
    assert instr.index.strides[1] == 0  # the axis before `axis` (after the batch) repeats the indices


# ---- random cases --------------------------------------------------------------------------

@st.composite
def cases(draw, x_dtypes, index_dtypes):
    rank = draw(st.integers(1, 4))
    x_shape = tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    axis = draw(st.integers(0, rank - 1))
    extra = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
    batch_dims = draw(st.integers(0, axis))
    i_shape = x_shape[:batch_dims] + extra
    x_dtype, i_dtype = draw(st.sampled_from(x_dtypes)), draw(st.sampled_from(index_dtypes))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = (rng.standard_normal(x_shape) * 100).astype(dtypes.np_dtype(x_dtype))
    indices = rng.integers(0, x_shape[axis], i_shape).astype(dtypes.np_dtype(i_dtype))
    negative = draw(st.booleans())  # a negative axis and batch_dims, counted from the end
    return x, indices, axis - rank if negative else axis, batch_dims - len(i_shape) if negative else batch_dims, axis, batch_dims


def row_dtypes(chip):
    """(x dtypes, index dtypes) the chip's gather row allows."""
    row = chip.support("gather")
    if row.dtypes is None:
        return O.REGISTRY["gather"].X_DTYPES, O.REGISTRY["gather"].INDEX_DTYPES
    (sig,) = row.signatures
    return tuple(sorted(sig.inputs[0])), tuple(sorted(sig.inputs[1]))


@pytest.mark.parametrize("chip", [GENERIC, ASCEND, BM1686], ids=["generic", "ascend310b", "bm1686"])
@SETTINGS
@given(data=st.data())
def test_random(chip, data):
    x, indices, axis, batch_dims, axis_, batch_ = data.draw(cases(*row_dtypes(chip)))
    constant = data.draw(st.booleans())
    got = run(chip, x, indices, axis, batch_dims, constant).outputs["y"]
    want = tf_gather(x, indices, axis_, batch_)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("chip", [GENERIC, ASCEND, BM1686], ids=["generic", "ascend310b", "bm1686"])
@SETTINGS
@given(data=st.data())
def test_wrap_counts_a_negative_index_from_the_end_as_the_engine_reads_it(chip, data):
    """ONNX's Gather: with `wrap` an index in [-n, 0) is index + n, mapped by the DMA engine itself
    (no other instruction), whether the indices are known or read at run time."""
    x, indices, axis, batch_dims, axis_, batch_ = data.draw(cases(*row_dtypes(chip)))
    n = x.shape[axis_]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    signed = indices.dtype != np.uint32
    indices = (rng.integers(-n if signed else 0, n, indices.shape)).astype(indices.dtype)
    constant = data.draw(st.booleans())
    res = run(chip, x, indices, axis, batch_dims, constant, wrap=True)
    want = tf_gather(x, np.where(indices < 0, indices.astype(np.int64) + n, indices), axis_, batch_)
    np.testing.assert_array_equal(res.outputs["y"], want)
    assert all(i.wrap for s in res.program.streams.values() for i in s if isinstance(i, IndexedDma))
    assert not [i for s in res.program.streams.values() for i in s if type(i).__name__ in ("Vector", "Scalar")]
    got = O.REGISTRY["gather"].reference([x, indices], {"axis": axis_, "batch_dims": batch_, "wrap": True})[0]
    np.testing.assert_array_equal(got, want)


def test_ascend_gathers_into_the_unified_buffer_and_copies_on():
    """No engine copies DDR to DDR there: mte2 gathers into UB, mte3 stores."""
    x = np.arange(60, dtype=np.float16).reshape(3, 4, 5)
    res = run(ASCEND, x, np.array([4, 0, 2], np.uint32), axis=2)
    np.testing.assert_array_equal(res.outputs["y"], tf_gather(x, np.array([4, 0, 2]), 2, 0))
    gathers = [e for e in res.trace.events if e.name == "gather"]
    assert [(e.engine, e.src, e.dst) for e in gathers] == [("mte2", "ddr", "ub")]
    assert [(e.engine, e.src, e.dst) for e in res.trace.events if e.name == "dma"] == [("mte3", "ub", "ddr")]


@pytest.mark.parametrize("chip, overrides", [
    ("ascend310b", {"memories.ub.size": "256B"}),
    ("three", {"memories.l1.size": "512B", "memories.lmem.size": "64B"}),
])
def test_chunks_the_memory_can_hold(chip, overrides, three_level):
    """Rows longer than the staging memory are cut too (a row of 300 float16 is 600 B)."""
    chip = chips.load(three_level.source if chip == "three" else chip, overrides)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 7, 300)).astype(np.float16)
    indices = np.array([[6, 0, 6, 3], [1, 2, 2, 5]], np.int64)
    res = run(chip, x, indices, axis=1, batch_dims=1)
    np.testing.assert_array_equal(res.outputs["y"], tf_gather(x, indices, 1, 1))
    assert sum(1 for e in res.trace.events if e.name == "gather") > 8


# ---- every limit ---------------------------------------------------------------------------

def graph_with(x_shape, i_shape, x_dtype="float16", i_dtype="int64"):
    g = isa.Graph("t")
    return g, g.input("x", x_shape, x_dtype), g.input("i", i_shape, i_dtype)


def test_output_rank_at_most_8():
    _, x, i = graph_with((2,) * 5, (2,) * 4)  # 5 + 4 - 1 = 8: fine
    assert O.gather(x, i, axis=1).shape == (2,) * 8
    _, x, i = graph_with((2,) * 5, (2,) * 5)
    with pytest.raises(isa.ShapeError, match=r"gather: the output would have rank 9 .* at most 8"):
        O.gather(x, i, axis=1)
    _, x, i = graph_with((2,) * 5, (2,) * 5)
    assert len(O.gather(x, i, axis=1, batch_dims=1).shape) == 8  # batch_dims take one off


def test_dtypes():
    _, x, i = graph_with((3, 3), (2,), i_dtype="int16")
    with pytest.raises(isa.UnsupportedError, match=r"gather: indices: dtype int16 is not supported \(supported: int64, int32, uint32\)"):
        O.gather(x, i)
    _, x, i = graph_with((3, 3), (2,), x_dtype="int8")
    with pytest.raises(isa.UnsupportedError, match=r"gather: x: dtype int8 is not supported"):
        O.gather(x, i)


def test_x_float16_only_on_ascend310b():
    g, x, i = graph_with((3, 3), (2,), x_dtype="float32")
    g.output(O.gather(x, i), "y")
    with pytest.raises(isa.UnsupportedError, match=r"gather with float32 x int64 -> float32 is not supported on chip ascend310b"):
        isa.lower(g, ASCEND)
    assert isa.lower(g, GENERIC)


def test_out_of_range_index_at_run_time():
    x = SEED_X.astype(np.float16)
    with pytest.raises(isa.IndexRangeError, match=r"op gather_0: index 3 at position \(1,\) is out of range for dimension 0 of size 3 "
                                                  r".* \(read from input 'i', element \(1,\)\)"):
        run(GENERIC, x, np.array([0, 3], np.int64), axis=0)
    with pytest.raises(isa.IndexRangeError, match=r"index -1 at position \(0, 1\) .* \(allowed 0\.\.2\)"):
        run(ASCEND, x, np.array([1, -1], np.int64), axis=1)  # negative: out of range, as tf.gather on a CPU
    with pytest.raises(isa.IndexRangeError, match=r"index -4 at position \(0, 1\) .* \(allowed -3\.\.2\)"):
        run(BM1686, x, np.array([1, -4], np.int64), axis=1, wrap=True)  # with wrap, [-3, 3)


def test_out_of_range_index_at_build_time():
    _, x, _ = graph_with((3, 3), (2,))
    with pytest.raises(isa.IndexRangeError, match=r"gather: index 3 at position \(1,\) is out of range for a dimension of size 3"):
        O.gather(x, np.array([[0], [3]], np.int64)[:, 0], axis=1)
    with pytest.raises(isa.IndexRangeError, match=r"gather: index -2"):
        O.gather(x, np.array([-2], np.int64))
    assert O.gather(x, np.array([-3], np.int64), wrap=True).shape == (1, 3)
    with pytest.raises(isa.IndexRangeError, match=r"gather: index -4 .* \(allowed -3\.\.2\)"):
        O.gather(x, np.array([-4], np.int64), wrap=True)
    with pytest.raises(isa.ShapeError, match=r"gather: wrap must be a bool, got 1"):
        O.gather(x, np.array([0], np.int64), wrap=1)


def test_axis_and_batch_dims_limits():
    _, x, i = graph_with((3, 3), (3, 1))
    with pytest.raises(isa.ShapeError, match=r"gather: axis must be in \[-2, 1\] for x of rank 2, got 2"):
        O.gather(x, i, axis=2)
    with pytest.raises(isa.ShapeError, match=r"gather: batch_dims must be in \[0, min\(axis, rank\(indices\) - 1\)\] = \[0, 0\] .* got 1"):
        O.gather(x, i, axis=0, batch_dims=1)
    _, x, i = graph_with((3, 3), (2, 1))
    with pytest.raises(isa.ShapeError, match=r"first batch_dims=1 dimensions of x \(3, 3\) and indices \(2, 1\) must be equal"):
        O.gather(x, i, axis=1, batch_dims=1)
    with pytest.raises(isa.ShapeError, match=r"gather: axis must be an integer, got 1.0"):
        O.gather(x, i, axis=1.0)
    _, x, i = graph_with((3, 3), ())
    with pytest.raises(isa.ShapeError, match=r"gather: indices must have rank >= 1"):
        O.gather(x, i)
