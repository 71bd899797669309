"""scatter_nd (seed 004, ONNX ScatterND opsets 11, 13, 16, 18) on the machine: the seed's examples
under every opset, every reduction on numbers worked by hand, random cases against the ONNX
reference loop, repeated indices combining in order, staging through on-chip memory where no
engine copies DDR to DDR, the same cycles in timing mode, and every documented limit."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import chips
import isa
import sim
from isa import dtypes
from isa.instructions import IndexedDma, Vector

O = isa.ops
GENERIC = chips.load("generic")
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# The seed's example 2 (every opset)
DATA2 = np.array([[[1, 2, 3, 4], [5, 6, 7, 8], [8, 7, 6, 5], [4, 3, 2, 1]],
                  [[1, 2, 3, 4], [5, 6, 7, 8], [8, 7, 6, 5], [4, 3, 2, 1]],
                  [[8, 7, 6, 5], [4, 3, 2, 1], [1, 2, 3, 4], [5, 6, 7, 8]],
                  [[8, 7, 6, 5], [4, 3, 2, 1], [1, 2, 3, 4], [5, 6, 7, 8]]], np.float32)
UPDATES2 = np.array([[[5, 5, 5, 5], [6, 6, 6, 6], [7, 7, 7, 7], [8, 8, 8, 8]],
                     [[1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3], [4, 4, 4, 4]]], np.float32)


def onnx_scatter_nd(data, indices, updates, reduction="none"):
    """The seed's loop: output[indices[idx]] = f(output[indices[idx]], updates[idx])."""
    f = {"none": lambda old, new: new, "add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[reduction]
    output = np.copy(data)
    for idx in np.ndindex(indices.shape[:-1]):
        at = tuple(indices[idx])
        output[at] = f(output[at], updates[idx])
    return output


def run(chip, data, indices, updates, reduction="none", opset=18, constant=False, policy=None):
    g = isa.Graph("t")
    d = g.input("d", data.shape, dtypes.of_array(data))
    u = g.input("u", updates.shape, dtypes.of_array(updates))
    i = indices if constant else g.input("i", indices.shape, dtypes.of_array(indices))
    g.output(O.scatter_nd(d, i, u, reduction, opset), "y")
    inputs = {"d": data, "u": updates} if constant else {"d": data, "u": updates, "i": indices}
    program = isa.lower(g, chip, policy)
    res = sim.execute(program, chip, inputs)
    assert sim.execute(program, chip, mode="timing").cycles == res.cycles
    return res


# ---- the seed's examples -------------------------------------------------------------------

@pytest.mark.parametrize("opset", [11, 13, 16, 18])
def test_seed_examples_under_every_opset(opset):
    got = run(GENERIC, np.arange(1, 9, dtype=np.float32), np.array([[4], [3], [1], [7]]), np.array([9, 10, 11, 12], np.float32),
              opset=opset).outputs["y"]
    np.testing.assert_array_equal(got, [1, 11, 3, 10, 9, 6, 7, 12])
    got = run(GENERIC, DATA2, np.array([[0], [2]]), UPDATES2, opset=opset).outputs["y"]
    want = DATA2.copy()
    want[0], want[2] = UPDATES2[0], UPDATES2[1]
    np.testing.assert_array_equal(got, want)
    assert got[0, 3].tolist() == [8, 8, 8, 8] and got[2, 0].tolist() == [1, 1, 1, 1] and got[1, 0].tolist() == [1, 2, 3, 4]


# Example 2's data with both update blocks sent to index 0 (opset 16 and 18 reductions), by hand.
BY_HAND = {
    "add": [[7, 8, 9, 10], [13, 14, 15, 16], [18, 17, 16, 15], [16, 15, 14, 13]],  # data + 5 + 1, + 6 + 2, ...
    "mul": [[5, 10, 15, 20], [60, 72, 84, 96], [168, 147, 126, 105], [128, 96, 64, 32]],  # data * 5 * 1, * 6 * 2, ...
    "max": [[5, 5, 5, 5], [6, 6, 7, 8], [8, 7, 7, 7], [8, 8, 8, 8]],
    "min": [[1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3], [4, 3, 2, 1]],
}


@pytest.mark.parametrize("reduction", sorted(BY_HAND))
def test_reductions_by_hand(reduction):
    got = run(GENERIC, DATA2, np.array([[0], [0]]), UPDATES2, reduction).outputs["y"]
    np.testing.assert_array_equal(got[0], BY_HAND[reduction])
    np.testing.assert_array_equal(got[1:], DATA2[1:])
    np.testing.assert_array_equal(onnx_scatter_nd(DATA2, np.array([[0], [0]]), UPDATES2, reduction)[0], BY_HAND[reduction])


def test_negative_indices_count_from_the_end():
    got = run(GENERIC, np.zeros((3, 4), np.int32), np.array([[-1, -4], [0, 3]]), np.array([5, 6], np.int32)).outputs["y"]
    np.testing.assert_array_equal(got, [[0, 0, 0, 6], [0, 0, 0, 0], [5, 0, 0, 0]])


def test_repeated_indices_add_in_order():
    """float16 rounding shows the order: 2048 + 1 rounds back to 2048 (ties to even), so
    (2048 + 1) + 1 = 2048 while (1 + 1) + 2048 = 2050."""
    data, indices = np.zeros(3, np.float16), np.array([[1], [1], [1]])
    forward = run(GENERIC, data, indices, np.array([2048, 1, 1], np.float16), "add").outputs["y"]
    backward = run(GENERIC, data, indices, np.array([1, 1, 2048], np.float16), "add").outputs["y"]
    assert forward.tolist() == [0, 2048, 0] and backward.tolist() == [0, 2050, 0]


def test_a_reduction_takes_one_row_at_a_time_and_none_one_scatter():
    """The plain scatter is one transfer; a reduction gathers, combines and scatters each row."""
    data, indices = np.zeros((5, 3), np.float32), np.array([[4], [0], [4]])
    updates = np.arange(9, dtype=np.float32).reshape(3, 3)
    plain = run(GENERIC, data, np.array([[4], [0], [2]]), updates).program
    summed = run(GENERIC, data, indices, updates, "add")
    kinds = lambda p: [type(i).__name__ + ("s" if getattr(i, "scatter", False) else "") for s in p.streams.values() for i in s]  # noqa: E731
    assert kinds(plain).count("IndexedDmas") == 1 and "Vector" not in kinds(plain)
    instrs = [i for s in summed.program.streams.values() for i in s]
    assert sum(isinstance(i, IndexedDma) and not i.scatter for i in instrs) == 3
    assert sum(isinstance(i, IndexedDma) and i.scatter for i in instrs) == 3
    assert [i.fn for i in instrs if isinstance(i, Vector)] == ["add"] * 3
    np.testing.assert_array_equal(summed.outputs["y"], [[3, 4, 5], [0, 0, 0], [0, 0, 0], [0, 0, 0], [6, 8, 10]])


# ---- random cases --------------------------------------------------------------------------

DTYPES = ("float32", "float16", "bfloat16", "int32", "int8", "uint8", "int64", "bool")


@st.composite
def cases(draw, dtype_choice=DTYPES):
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank)))
    k = draw(st.integers(1, rank))
    reduction = draw(st.sampled_from(("none", "add", "mul", "max", "min")))
    dtype = draw(st.sampled_from(dtype_choice))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    places = int(np.prod(shape[:k]))
    batch = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
    count = int(np.prod(batch))
    if reduction == "none":  # no index tuple twice
        count = min(count, places)
        batch = (count,)
        flat = rng.permutation(places)[:count]
    else:
        flat = rng.integers(0, places, count)
    indices = np.stack(np.unravel_index(flat, shape[:k]), -1).reshape(batch + (k,))
    indices = np.where(rng.random(indices.shape) < 0.3, indices - np.array(shape[:k]), indices)  # some negative
    index_dtype = draw(st.sampled_from(["int64", "int32"]))
    # small values: no integer overflow (ONNX's numpy loop would wrap where the machine saturates)
    low = 0 if dtype in ("uint8", "bool") else -1
    values = lambda s: (rng.integers(low, 3, s) if dtype != "float32" else rng.standard_normal(s)).astype(dtypes.np_dtype(dtype))  # noqa: E731
    return values(shape), indices.astype(index_dtype), values(batch + shape[k:]), reduction


@SETTINGS
@given(case=cases(), constant=st.booleans())
def test_random_on_generic(case, constant):
    data, indices, updates, reduction = case
    got = run(GENERIC, data, indices, updates, reduction, constant=constant).outputs["y"]
    want = onnx_scatter_nd(data, indices, updates, reduction)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=cases(("float32", "int32", "int8", "int64")))  # the dtypes its vector unit has
def test_random_staged_in_chunks(case, three_level):
    """No engine copies DDR to DDR on the three-level chip, and the vector unit's memory is
    reached through l1: the data copy, the update rows and each row's gather stage on chip."""
    chip = chips.load(three_level.source, {"memories.l1.size": "1KiB", "memories.lmem.size": "64B"})
    data, indices, updates, reduction = case
    got = run(chip, data, indices, updates, reduction).outputs["y"]
    np.testing.assert_array_equal(got, onnx_scatter_nd(data, indices, updates, reduction))


@pytest.mark.parametrize("reduction", ["none", "mul"])
def test_rows_larger_than_local_memory(reduction):
    """Rows of 700 float32 (2800 B) on a generic chip with 2 KiB of local memory in all (two 1 KiB granules): the
    update rows are cut along their elements; with 'none' every chunk still holds every row."""
    chip = chips.load("generic", {"memories.lmem.size": "64B", "engines.dma_out.links": ["lmem->ddr"]})
    rng = np.random.default_rng(5)
    data = rng.standard_normal((4, 700)).astype(np.float32)
    indices = np.array([[3], [1], [3]]) if reduction == "mul" else np.array([[3], [1], [0]])
    updates = rng.standard_normal((3, 700)).astype(np.float32)
    res = run(chip, data, indices, updates, reduction, policy=isa.Policy(double_buffer=False))
    np.testing.assert_array_equal(res.outputs["y"], onnx_scatter_nd(data, indices, updates, reduction))
    scatters = [i for s in res.program.streams.values() for i in s if isinstance(i, IndexedDma) and i.scatter]
    assert len(scatters) > 3
    if reduction == "none":
        assert all(i.index.shape == (3, 1) for i in scatters)  # every row in every chunk: duplicates still fault


# ---- every limit ---------------------------------------------------------------------------

def test_duplicate_indices_with_none_fault_at_run_time():
    with pytest.raises(isa.IndexRangeError, match=r"op scatter_nd_0: the scatter writes position \(1,\) more than once"):
        run(GENERIC, np.zeros(4, np.float32), np.array([[1], [2], [-3]]), np.ones(3, np.float32))


def test_duplicate_indices_with_none_rejected_at_build_time():
    g = isa.Graph("t")
    d, u = g.input("d", (4, 2)), g.input("u", (3, 2))
    with pytest.raises(isa.IndexRangeError, match=r"scatter_nd: index \(1,\) is given more than once; with reduction 'none'"):
        O.scatter_nd(d, np.array([[1], [2], [-3]]), u)
    assert O.scatter_nd(d, np.array([[1], [2], [-3]]), u, "add").shape == (4, 2)  # a reduction combines them


def test_out_of_range_indices():
    with pytest.raises(isa.IndexRangeError, match=r"op scatter_nd_0: index 4 at position \(1,\) is out of "
                                                  r"range for dimension 0 of size 4 \(allowed -4\.\.3\)"):
        run(GENERIC, np.zeros(4, np.float32), np.array([[1], [4]]), np.ones(2, np.float32))
    with pytest.raises(isa.IndexRangeError, match=r"index -5 at position \(0,\) is out of range"):
        run(GENERIC, np.zeros(4, np.float32), np.array([[-5], [0]]), np.ones(2, np.float32), "max")
    g = isa.Graph("t")
    d, u = g.input("d", (4, 3)), g.input("u", (1,))
    with pytest.raises(isa.IndexRangeError, match=r"scatter_nd: index 3 at position \(0,\) is out of "
                                                  r"range for a dimension of size 3 \(allowed -3\.\.2\)"):
        O.scatter_nd(d, np.array([[0, 3]]), u)


@pytest.mark.parametrize("opset, reduction, match", [
    (13, "add", r"scatter_nd: opset 13 has no reduction 'add' \(from opset 16; opset 13 has none\)"),
    (11, "mul", r"opset 11 has no reduction 'mul' \(from opset 16"),
    (16, "max", r"opset 16 has no reduction 'max' \(from opset 18; opset 16 has none, add, mul\)"),
    (17, "min", r"opset 17 has no reduction 'min'"),
    (10, "none", r"scatter_nd: opset 10 has no ScatterND \(from opset 11"),
    (18, "sum", r"scatter_nd: unknown reduction 'sum'; known: none, add, mul, max, min"),
])
def test_opset_without_the_reduction(opset, reduction, match):
    g = isa.Graph("t")
    d, i, u = g.input("d", (4,)), g.input("i", (2, 1), "int64"), g.input("u", (2,))
    with pytest.raises(isa.UnsupportedError, match=match):
        O.scatter_nd(d, i, u, reduction, opset)


def test_shapes_and_dtypes():
    g = isa.Graph("t")
    d, u = g.input("d", (4, 3)), g.input("u", (2, 3))
    with pytest.raises(isa.ShapeError, match=r"scatter_nd: updates must have shape indices.shape\[:-1\] "
                                             r"\+ data.shape\[1:\] = \(2, 3\), got \(2, 2\)"):
        O.scatter_nd(d, g.input("i", (2, 1), "int64"), g.input("u2", (2, 2)))
    with pytest.raises(isa.ShapeError, match=r"indices.shape\[-1\] = 3 must be at most rank\(data\) = 2"):
        O.scatter_nd(d, g.input("i3", (2, 3), "int64"), u)
    with pytest.raises(isa.UnsupportedError, match=r"scatter_nd: indices: dtype int16 is not supported \(supported: int64, int32\)"):
        O.scatter_nd(d, g.input("i16", (2, 1), "int16"), u)
    with pytest.raises(isa.UnsupportedError, match=r"updates are float16 and data float32"):
        O.scatter_nd(d, g.input("i4", (2, 1), "int64"), g.input("uh", (2, 3), "float16"))
    b = g.input("b", (4,), "bfloat16")
    with pytest.raises(isa.UnsupportedError, match=r"scatter_nd: opset 11 does not take bfloat16 data \(from opset 13\)"):
        O.scatter_nd(b, g.input("i5", (1, 1), "int64"), g.input("ub", (1,), "bfloat16"), opset=11)


def test_a_reduction_needs_the_dtype_on_the_vector_unit(three_level):
    g = isa.Graph("t")
    g.output(O.scatter_nd(g.input("d", (4,), "float16"), g.input("i", (1, 1), "int64"), g.input("u", (1,), "float16"), "add"), "y")
    with pytest.raises(isa.UnsupportedError, match=r"op scatter_nd_0: combining float16 rows \(add\) needs the "
                                                   r"vector unit, which has no float16 on chip three_level"):
        isa.lower(g, three_level)


def test_not_on_ascend310b():
    """ONNX's op is no ATB op: the Ascend chip's table has no row for it."""
    g = isa.Graph("t")
    g.output(O.scatter_nd(g.input("d", (4,), "float16"), g.input("i", (1, 1), "int64"), g.input("u", (1,), "float16")), "y")
    with pytest.raises(isa.UnsupportedError, match=r"scatter_nd with float16 x int64 x float16 -> "
                                                   r"float16 is not supported on chip ascend310b"):
        isa.lower(g, chips.load("ascend310b"))
