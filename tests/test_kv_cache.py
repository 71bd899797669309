"""Graph state and the KV cache (isa/ops/cache.py, isa/lower/templates/cache.py, sim/session.py):
appends and reads against numpy over random shapes, the cache's bytes persisting in the simulated
DDR between runs, a decode step over the cache a prefill wrote equal to the longer prefill's last
position (examples/llm.py's layers and a whole model, on generic, the Sophgo chips and ascend910b),
the trace's state buffers, and every bad input refused with a SimError naming it."""

import re
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx.reference import ReferenceEvaluator

import chips
import isa
import sim
import traces
from traces.stored import from_data, to_data

O = isa.ops
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import llm  # noqa: E402

TINY = llm.config("tinyllama-1.1b", layers=2, hidden=64, heads=4, kv_heads=2, mlp=96, vocab=50)


def step(shape, axis, position, n, read=0, dtype="float32"):
    """A graph appending input "rows" (n positions) at `position` to state "cache" and, with
    read > 0, giving positions [0, read) of the cache as "seen" (read before the append)."""
    g = isa.Graph("step")
    with g:
        cache = g.state("cache", shape, dtype)
        rows_shape = shape[:axis] + (n,) + shape[axis + 1:]
        rows = g.input("rows", rows_shape, dtype)
        if read:
            g.output(O.cache_read(cache, read, axis), "seen")
        O.cache_append(cache, O.adds(rows, 0.0), position, axis)
    return g


def positions(array, axis, lo, hi):
    index = [slice(None)] * array.ndim
    index[axis] = slice(lo, hi)
    return array[tuple(index)]


# ---- the cache ops on the machine --------------------------------------------------------------

@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), rank=st.integers(1, 4), chunks=st.lists(st.integers(1, 4), min_size=1, max_size=4))
def test_appends_and_reads_equal_numpy_and_persist_between_runs(data, rank, chunks):
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank)))
    axis = data.draw(st.integers(0, rank - 1))
    capacity = sum(chunks) + data.draw(st.integers(0, 3))
    shape = shape[:axis] + (capacity,) + shape[axis + 1:]
    rng = np.random.default_rng(sum(shape) + len(chunks))
    session, want, at = sim.Session("generic"), np.zeros(shape, np.float32), 0
    for n in chunks:
        rows = rng.standard_normal(shape[:axis] + (n,) + shape[axis + 1:]).astype(np.float32)
        result = session.run(step(shape, axis, at, n, read=at), {"rows": rows})
        if at:
            np.testing.assert_array_equal(result.outputs["seen"], positions(want, axis, 0, at))
        positions(want, axis, at, at + n)[...] = rows
        at += n
        np.testing.assert_array_equal(session.state["cache"], want)  # written positions kept, the rest still zero


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), shape=st.lists(st.integers(1, 4), min_size=2, max_size=4))
def test_arrangements_read_a_cache_in_place_as_numpy_does(data, shape):
    """A read of a cache is a strided view: permute, extract (with steps) and tile take it where it lies."""
    shape = tuple(shape)
    axis = data.draw(st.integers(0, len(shape) - 1))
    length = data.draw(st.integers(1, shape[axis]))
    full = shape[:axis] + (shape[axis] + data.draw(st.integers(0, 3)),) + shape[axis + 1:]
    seen_shape = shape[:axis] + (length,) + shape[axis + 1:]
    order = data.draw(st.permutations(range(len(shape))))
    start = [data.draw(st.integers(0, n - 1)) for n in seen_shape]
    step = [data.draw(st.integers(1, 3)) for _ in seen_shape]
    reps = [data.draw(st.integers(1, 2)) for _ in seen_shape]
    g = isa.Graph("arrange")
    with g:
        seen = O.cache_read(g.state("cache", full), length, axis)
        g.output(O.permute(seen, order), "permuted")
        g.output(O.extract(seen, start, list(seen_shape), step), "extracted")
        g.output(O.tile(seen, reps), "tiled")
    state = np.random.default_rng(len(shape)).standard_normal(full).astype(np.float32)
    got = sim.execute(isa.lower(g, chips.load("generic")), "generic", {}, state={"cache": state}).outputs
    view = positions(state, axis, 0, length)
    np.testing.assert_array_equal(got["permuted"], view.transpose(order))
    np.testing.assert_array_equal(got["extracted"], view[tuple(slice(a, None, s) for a, s in zip(start, step))])
    np.testing.assert_array_equal(got["tiled"], np.tile(view, reps))


@pytest.mark.parametrize("chip", ["bm1684", "ascend910b"])
def test_a_cache_on_a_chip_that_stages_its_ddr_copies(chip):
    dtype = "float16" if chip == "ascend910b" else "float32"
    shape, session = (2, 3, 6, 8), sim.Session(chip)
    first = np.arange(2 * 3 * 6 * 5).reshape(2, 3, 6, 5).astype(dtype)
    session.run(step(shape, 3, 0, 5, dtype=dtype), {"rows": first})
    second = -np.arange(2 * 3 * 6).reshape(2, 3, 6, 1).astype(dtype)
    result = session.run(step(shape, 3, 5, 1, read=5, dtype=dtype), {"rows": second})
    np.testing.assert_array_equal(result.outputs["seen"], first)
    np.testing.assert_array_equal(session.state["cache"][..., :6], np.concatenate([first, second], axis=3))
    assert not session.state["cache"][..., 6:].any()


@pytest.mark.parametrize("chip, dtype", [("generic", "float32"), ("ascend910b", "float16"), ("bm1684", "float32")])
def test_the_cache_ops_act_in_graph_order(chip, dtype):
    """A read after an append, in one program, sees the appended row (the emitter orders the
    accesses of the state's buffer across engines and cores)."""
    g = isa.Graph("read_after_append")
    with g:
        cache = g.state("cache", (8, 16), dtype)
        O.cache_append(cache, O.adds(g.input("rows", (1, 16), dtype), 0.0), 2, 0)
        g.output(O.matrix_mul(O.cache_read(cache, 3, 0), g.constant("w", np.eye(16, dtype=dtype))), "y")
    state = {"cache": np.arange(128).reshape(8, 16).astype(dtype)}
    got = sim.execute(isa.lower(g, chips.load(chip)), chip, {"rows": np.full((1, 16), 7, dtype)}, state=state)
    want = state["cache"][:3].copy()
    want[2] = 7
    np.testing.assert_array_equal(got.outputs["y"], want)


def test_a_session_in_timing_mode_gives_the_functional_cycles():
    shape, rows = (4, 8, 16), np.ones((4, 1, 16), np.float32)
    cycles = [sim.Session("bm1686", mode).run(step(shape, 1, 3, 1, read=3), {"rows": rows}).cycles for mode in ("functional", "timing")]
    assert cycles[0] == cycles[1] > 0


def test_a_program_with_state_reads_back_from_its_text():
    program = isa.lower(step((2, 8, 4), 1, 2, 1, read=2), chips.load("generic"))
    text = program.to_text()
    assert re.search(r"^\.state cache ddr@0x0:float32\[2,8,4;32,4,1\]$", text, re.MULTILINE)
    state = {"cache": np.arange(64, dtype=np.float32).reshape(2, 8, 4)}
    rows = np.full((2, 1, 4), 7, np.float32)
    again = sim.execute(isa.Program.from_text(text), "generic", {"rows": rows}, state=state)
    np.testing.assert_array_equal(again.outputs["seen"], state["cache"][:, :2])
    np.testing.assert_array_equal(again.state["cache"][:, 2:3], rows)
    np.testing.assert_array_equal(np.delete(again.state["cache"], 2, axis=1), np.delete(state["cache"], 2, axis=1))


# ---- the KV cache of examples/llm.py's layers ----------------------------------------------------

def layer_step(cfg, seq, past, capacity, dtype, layers=1, block=None, batch=1):
    build = llm.model if layers > 1 else llm.decoder_layer
    onnx_model = build(cfg, batch, seq=seq, past=past, dtype=dtype, block=block)
    graph = llm.with_kv_cache(isa.from_onnx(onnx_model), cfg, batch, capacity, past=past, seq=seq, layers=layers, block=block)
    return onnx_model, graph


@pytest.mark.parametrize("chip, dtype, tol", [("generic", "float32", 1e-5), ("bm1686", "float32", 1e-5), ("bm1684", "float32", 1e-5),
                                              ("ascend910b", "float16", 1e-2)])
def test_a_decode_step_over_the_kept_cache_equals_the_prefills_last_position(chip, dtype, tol):
    """Prefill 5 tokens into a cache of 8 positions kept in the session's DDR, decode the 6th
    (its cache not given as an input: read where the prefill left it): its output is the
    6-token prefill's last row, the prefill's cache rows are the same bytes after the step, the
    step's rows are the 6-token prefill's, and the positions after them are still zero."""
    x = np.random.default_rng(2).standard_normal((1, 6, TINY.hidden)).astype(dtype)
    full = sim.run(isa.from_onnx(llm.decoder_layer(TINY, seq=6, dtype=dtype)), chip, {"x": x}).outputs
    session = sim.Session(chip)
    session.run(layer_step(TINY, 5, 0, 8, dtype)[1], {"x": x[:, :5]})
    prefilled = {name: value.copy() for name, value in session.state.items()}
    decode = session.run(layer_step(TINY, 1, 5, 8, dtype)[1], {"x": x[:, 5:]})
    first = decode.program.bindings[0]
    assert (first.name, first.role, first.region.addr) == ("cache.0.key", "state", 0)  # states bound first
    np.testing.assert_allclose(decode.outputs["y"][:, 0].astype(np.float64), full["y"][:, 5].astype(np.float64), rtol=tol, atol=tol)
    assert set(decode.outputs) == {"y"}  # the new rows went into the cache, not out
    for kind in ("key", "value"):  # both token-major: (batch, KV heads, positions, head size)
        cache = session.state[f"cache.0.{kind}"]
        np.testing.assert_array_equal(cache[:, :, :5], prefilled[f"cache.0.{kind}"][:, :, :5])
        np.testing.assert_allclose(cache[:, :, :6].astype(np.float64), full[f"present.0.{kind}"].astype(np.float64), rtol=tol, atol=tol)
        assert not cache[:, :, 6:].any()


@pytest.mark.parametrize("chip, dtype, tol", [("bm1686", "float32", 1e-5), ("ascend910b", "float16", 1e-2)])
def test_a_prefill_appends_its_values_from_where_the_projection_wrote_them(chip, dtype, tol):
    """The value's head split, read only by the fused attention and the cache append, is read
    through strides by both (isa/lower/templates/place.py): none of its instructions runs, and
    the cache holds the prefill's value rows."""
    x = np.random.default_rng(4).standard_normal((1, 5, TINY.hidden)).astype(dtype)
    full = sim.run(isa.from_onnx(llm.decoder_layer(TINY, seq=5, dtype=dtype)), chip, {"x": x})
    assert {e.op for e in full.trace.events} >= {"layers.0.v.heads"}  # returned as present.0.value: a copy of its own
    session = sim.Session(chip)
    step = session.run(layer_step(TINY, 5, 0, 8, dtype)[1], {"x": x})
    assert "layers.0.v.heads" not in {e.op for e in step.trace.events}
    np.testing.assert_allclose(session.state["cache.0.value"][:, :, :5].astype(np.float64),
                               full.outputs["present.0.value"].astype(np.float64), rtol=tol, atol=tol)
    np.testing.assert_allclose(step.outputs["y"].astype(np.float64), full.outputs["y"].astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("chip, dtype, tol", [("generic", "float32", 1e-5), ("bm1686", "float32", 1e-5), ("ascend910b", "float16", 1e-2)])
def test_a_prefills_keys_are_appended_as_rows_and_read_transposed_by_its_product(chip, dtype, tol):
    """The key cache is token-major, as the value cache: the prefill's fused attention takes the
    keys as rows (the scores' Transpose folded into its product, which reads each key block
    transposed) and the cache append reads the rows where the rotary wrote them, so no permute of
    the keys runs (none of the step's permutes runs an instruction); the output and the cache's key
    rows are the reference's (the ONNX reference evaluator's)."""
    model = llm.decoder_layer(TINY, seq=5, dtype=dtype)
    x = np.random.default_rng(6).standard_normal((1, 5, TINY.hidden)).astype(dtype)
    want = dict(zip([o.name for o in model.graph.output], ReferenceEvaluator(model).run(None, {"x": x})))
    graph = layer_step(TINY, 5, 0, 8, dtype)[1]
    attention = next(n for n in graph.nodes if n.op == "attention")
    assert not attention.params["key_transposed"]
    session = sim.Session(chip)
    step = session.run(graph, {"x": x})
    permutes = {n.name for n in graph.nodes if n.op == "permute"}
    assert permutes and not permutes & {e.op for e in step.trace.events}
    np.testing.assert_allclose(step.outputs["y"].astype(np.float64), want["y"].astype(np.float64), rtol=tol, atol=tol)
    np.testing.assert_allclose(session.state["cache.0.key"][:, :, :5].astype(np.float64), want["present.0.key"].astype(np.float64),
                               rtol=tol, atol=tol)


def test_a_whole_model_decodes_over_its_kept_caches_as_the_reference_does():
    """Two layers, their four caches state; the decode step's logits equal the ONNX reference
    evaluator's for the same step given the session's caches as inputs."""
    ids = np.random.default_rng(3).integers(0, TINY.vocab, (1, 5)).astype(np.int64)
    session = sim.Session("generic")
    session.run(layer_step(TINY, 4, 0, 8, "float32", layers=2)[1], {"input_ids": ids[:, :4]})
    model, graph = layer_step(TINY, 1, 4, 8, "float32", layers=2)
    feeds = {"input_ids": ids[:, 4:]}
    for i in range(2):
        for kind in ("key", "value"):
            feeds[f"past.{i}.{kind}"] = session.state[f"cache.{i}.{kind}"][:, :, :4]
    want = ReferenceEvaluator(model).run(["logits"], feeds)[0]
    got = session.run(graph, {"input_ids": ids[:, 4:]})
    np.testing.assert_allclose(got.outputs["logits"], want, rtol=1e-4, atol=1e-4)
    assert [b.name for b in got.program.bindings if b.role == "state"] == [f"cache.{i}.{k}" for i in range(2) for k in ("key", "value")]


def in_table_order(pool, table):
    """A pool (blocks, KV heads, block, head size) read through a block table (sequences, blocks
    per sequence): each sequence's cache (sequences, KV heads, positions, head size)."""
    blocks = pool[table]  # (sequences, blocks per sequence, KV heads, block, head size)
    return np.concatenate(list(blocks.transpose(1, 0, 2, 3, 4)), axis=2)


@pytest.mark.parametrize("chip, dtype, tol", [("generic", "float32", 1e-5), ("bm1686", "float32", 1e-5), ("ascend910b", "float16", 1e-2)])
def test_one_paged_program_serves_any_block_table(chip, dtype, tol):
    """A cache in blocks of 4 positions, a pool of 3 blocks: a prefill of 6 tokens fills blocks 0
    and half of 1, a chunk of 3 tokens fills block 1 and starts block 2, a decode step adds the 10th
    position. Each step is lowered once and run with the block tables [1, 2, 0] and [2, 0, 1], fed
    at run time: each step's output is the contiguous cache's, the pool's blocks in each table's
    order are the contiguous cache's bytes, the blocks are read and written by gathers and
    scatters through the table, and timing mode gives functional mode's cycles."""
    x = np.random.default_rng(4).standard_normal((1, 10, TINY.hidden)).astype(dtype)
    target, whole = chips.load(chip), sim.Session(chip)
    steps = [(seq, past, isa.lower(layer_step(TINY, seq, past, 12, dtype, block=4)[1], target)) for seq, past in ((6, 0), (3, 6), (1, 9))]
    wants = [whole.run(layer_step(TINY, seq, past, 12, dtype)[1], {"x": x[:, past:past + seq]}).outputs["y"] for seq, past, _ in steps]
    for table in (np.array([[1, 2, 0]], np.int32), np.array([[2, 0, 1]], np.int32)):
        paged = sim.Session(target)
        for (seq, past, program), want in zip(steps, wants):
            got = paged.execute(program, {"x": x[:, past:past + seq], "block_table": table})
            np.testing.assert_allclose(got.outputs["y"].astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
            assert sim.execute(program, target, None, mode="timing").cycles == got.cycles
        for kind in ("key", "value"):
            np.testing.assert_array_equal(in_table_order(paged.state[f"cache.0.{kind}"], table), whole.state[f"cache.0.{kind}"])
    program = steps[-1][2]
    assert [(b.name, b.role) for b in program.bindings[:2]] == [("cache.0.key", "state"), ("cache.0.value", "state")]
    assert [b.region.shape for b in program.bindings if b.name == "block_table"] == [(1, 3)]
    indexed = {(i.op, i.scatter) for s in program.streams.values() for i in s if isinstance(i, isa.instructions.IndexedDma)}
    attention = next(n.name for n in layer_step(TINY, 1, 9, 12, dtype, block=4)[1].nodes if n.op == "attention")
    assert indexed == {(attention, False), ("cache.0.key.append.2", True), ("cache.0.value.append.2", True)}


def test_each_sequence_of_a_batch_has_its_own_block_table():
    """Two sequences over one pool of 6 blocks, the tables [1, 2, 0] and [5, 3, 4]: a prefill of 5
    tokens and a decode step give the contiguous caches' outputs, and each sequence's blocks are
    its cache's bytes."""
    x = np.random.default_rng(5).standard_normal((2, 6, TINY.hidden)).astype(np.float32)
    table = np.array([[1, 2, 0], [5, 3, 4]], np.int32)
    paged, whole = sim.Session("generic"), sim.Session("generic")
    for seq, past in ((5, 0), (1, 5)):
        feeds = {"x": x[:, past:past + seq]}
        got = paged.run(layer_step(TINY, seq, past, 12, "float32", block=4, batch=2)[1], {**feeds, "block_table": table})
        want = whole.run(layer_step(TINY, seq, past, 12, "float32", batch=2)[1], feeds)
        np.testing.assert_allclose(got.outputs["y"], want.outputs["y"], rtol=1e-5, atol=1e-5)
    assert paged.state["cache.0.key"].shape == (6, TINY.kv_heads, 4, TINY.head_size)
    for kind in ("key", "value"):
        np.testing.assert_array_equal(in_table_order(paged.state[f"cache.0.{kind}"], table), whole.state[f"cache.0.{kind}"])


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), sequences=st.integers(1, 3), pool=st.integers(1, 4), block=st.integers(1, 4), width=st.integers(1, 3))
def test_paged_appends_and_reads_equal_the_ops_reference(data, sequences, pool, block, width):
    """An append of rows into each sequence's block j through a block table, then a read of the
    block's first positions as a graph output (a gather of the block view): the machine's pool and
    output are the ops' numpy references', on generic and ascend910b (its DDR-to-DDR moves staged
    on chip)."""
    per = data.draw(st.integers(1, 3))
    j = data.draw(st.integers(0, per - 1))
    n = data.draw(st.integers(1, block))
    position = data.draw(st.integers(0, block - n))
    length = data.draw(st.integers(1, block))
    table = np.array(data.draw(st.lists(st.lists(st.integers(0, pool - 1), min_size=per, max_size=per), min_size=sequences,
                                        max_size=sequences).filter(lambda t: len({row[j] for row in t}) == len(t))), np.int32)
    g = isa.Graph("paged")
    with g:
        state = g.state("pool", (pool, 2, block, width), "float16")
        at = g.input("table", (sequences, per), "int32")
        rows = g.input("rows", (sequences, 2, n, width), "float16")
        O.cache_append(state, O.adds(rows, 0.0), position, 2, table=at, block=j)
        g.output(O.cache_read(state, length, 2, table=at, block=j), "seen")
    rng = np.random.default_rng(pool * 7 + block)
    before = rng.standard_normal((pool, 2, block, width)).astype(np.float16)
    feeds = {"table": table, "rows": rng.standard_normal((sequences, 2, n, width)).astype(np.float16)}
    pooled = O.REGISTRY["cache_append"].reference([before, feeds["rows"], table], {"position": position, "axis": 2, "block": j})[0]
    seen = O.REGISTRY["cache_read"].reference([pooled, table], {"length": length, "axis": 2, "block": j})[0]
    for chip in ("generic", "ascend910b"):
        result = sim.execute(isa.lower(g, chips.load(chip)), chip, feeds, state={"pool": before})
        np.testing.assert_array_equal(result.state["pool"], pooled)
        np.testing.assert_array_equal(result.outputs["seen"], seen)  # read after the append, in graph order


def test_a_whole_models_paged_decode_step_replays_its_layers():
    """16 layers, each with its pool, all reading the one block table: the layers replay
    (isa/lower/replay.py) into the program of every layer emitted, which takes the same cycles."""
    deep = llm.config("tinyllama-1.1b", layers=16, hidden=64, heads=4, kv_heads=2, mlp=96, vocab=50)
    graph = llm.with_kv_cache(isa.from_onnx(llm.model(deep, seq=1, past=6, dtype="float16", block=4, weight_inputs=True)), deep, 1, 8,
                              past=6, layers=deep.layers, block=4)
    target = chips.load("ascend910b")
    replay, every = (isa.lower(graph, target, replay=r) for r in (True, False))
    assert any(n.startswith("layers replayed") for n in replay.notes)
    assert replay.streams == every.streams and replay.bindings == every.bindings
    assert sim.execute(replay, target, None, mode="timing").cycles == sim.execute(every, target, None, mode="timing").cycles


def test_the_trace_shows_the_cache_as_graph_state(tmp_path):
    session = sim.Session("bm1686")
    result = session.run(layer_step(TINY, 3, 0, 8, "float32")[1], {"x": np.ones((1, 3, TINY.hidden), np.float32)})
    cache_bytes = 2 * 1 * TINY.kv_heads * TINY.head_size * 8 * 4
    spans = [b for b in result.trace.buffers if b.kind == "state"]
    assert sorted(b.name for b in spans) == ["cache.0.key", "cache.0.value"] and sum(b.size for b in spans) == cache_bytes
    assert result.trace.counters["state.ddr"] == [(0, cache_bytes)]
    assert result.stats.state_bytes == {"ddr": cache_bytes}
    assert re.search(r"^  ddr .*, graph state \(KV cache\) 2\.0 KiB$", traces.format_summary(result.stats), re.MULTILINE)
    assert from_data(to_data(result.trace)).buffers == result.trace.buffers  # the kind is stored
    traces.plot_memory(result.trace, tmp_path / "memory.png")
    assert (tmp_path / "memory.png").stat().st_size > 0


# ---- bad input ---------------------------------------------------------------------------------

def test_an_append_beyond_the_cache_names_the_state_the_position_and_the_length():
    with pytest.raises(isa.ShapeError, match=r"cache_append of 'rows' into state cache: 2 position\(s\) from position 7 along axis 1 "
                                             r"reach position 9, beyond the cache's 8 \(state shape \(2, 8, 4\); "
                                             r"a position is in 0\.\.6\)"):
        g = isa.Graph("g")
        O.cache_append(g.state("cache", (2, 8, 4)), g.input("rows", (2, 2, 4)), 7, 1)


@pytest.mark.parametrize("build, error, message", [
    (lambda g, c: O.cache_append(c, g.input("rows", (3, 1, 4)), 0, 1), isa.ShapeError,
     r"rows of shape \(3, 1, 4\) do not fit a state of shape \(2, 8, 4\): they must match it on every axis but 1"),
    (lambda g, c: O.cache_append(c, g.input("rows", (2, 1, 4)), -1, 1), isa.ShapeError, r"from position -1 along axis 1"),
    (lambda g, c: O.cache_append(c, g.input("rows", (2, 1, 4), "float16"), 0, 1), isa.UnsupportedError,
     r"rows of float16 into a state of float32"),
    (lambda g, c: O.cache_read(c, 9, 1), isa.ShapeError,
     r"cache_read of state cache: length 9 along axis 1 is beyond the cache's 8 positions"),
    (lambda g, c: O.cache_read(c, 2, 3), isa.ShapeError, r"axis 3 is not an axis of a rank-3 state \(allowed: -3\.\.2\)"),
    (lambda g, c: O.cache_read(c, 2.5, 1), isa.ShapeError, r"length must be an integer, got 2\.5"),
    (lambda g, c: O.cache_read(g.input("x", (2, 8, 4)), 2, 1), isa.GraphError, r"cache_read: its first operand must be a state"),
])
def test_bad_cache_ops_are_refused_naming_what(build, error, message):
    g = isa.Graph("g")
    with pytest.raises(error, match=message):
        build(g, g.state("cache", (2, 8, 4)))


def paged_pool(g, dtype="int32"):
    """A pool of 3 blocks of 4 positions and a block table of one sequence's 3 blocks."""
    return g.state("pool", (3, 2, 4, 2)), g.input("table", (1, 3), dtype)


def paged_read(g, axis=2, block=0, dtype="int32"):
    pool, table = paged_pool(g, dtype)
    return O.cache_read(pool, 2, axis, table=table, block=block)


@pytest.mark.parametrize("build, message", [
    (lambda g: paged_read(g, block=3),
     r"cache_read of state pool: block 3 of a sequence is beyond the block table's 3 \(table shape \(1, 3\); a block is in 0\.\.2\)"),
    (lambda g: paged_read(g, axis=0), r"cache_read of state pool: axis 0 of a pool counts its blocks"),
    (lambda g: paged_read(g, dtype="float32"),
     r"the block table must be integers of shape \(sequences, blocks per sequence\), got float32\[1, 3\]"),
])
def test_bad_paged_cache_ops_are_refused_naming_what(build, message):
    g = isa.Graph("g")
    with pytest.raises(isa.ShapeError, match=message):
        build(g)


def test_rows_for_more_sequences_than_the_block_table_has_are_refused():
    g = isa.Graph("g")
    pool, table = paged_pool(g)
    with pytest.raises(isa.ShapeError, match=r"rows of shape \(2, 2, 1, 2\) do not fit a state of shape \(1, 2, 4, 2\)"):
        O.cache_append(pool, g.input("rows", (2, 2, 1, 2)), 0, 2, table=table)


def test_a_block_table_entry_beyond_the_pool_faults_naming_it():
    """The table is read at run time: an entry beyond the pool's blocks is an IndexRangeError of
    the op reading through it (the fused attention of a decode step, the append's scatter), naming
    the entry, the pool's blocks and the table's element it was read from; a table of the wrong
    shape is refused as an input."""
    program = isa.lower(layer_step(TINY, 1, 9, 12, "float32", block=4)[1], chips.load("generic"))
    x = np.ones((1, 1, TINY.hidden), np.float32)
    with pytest.raises(sim.IndexRangeError, match=r"op layers\.0\.ctx\.2: index 3 at position \(0,\) is out of range for dimension 0 "
                                                  r"of size 3 \(allowed 0\.\.2\) \(read from input 'block_table', element \(0, 1\)\)"):
        sim.Session("generic").execute(program, {"x": x, "block_table": np.array([[1, 3, 0]], np.int32)})
    with pytest.raises(sim.IndexRangeError, match=r"index -1 at position \(0,\) is out of range for dimension 0 of size 3 "
                                                  r"\(allowed 0\.\.2\) \(read from input 'block_table', element \(0, 2\)\)"):
        sim.Session("generic").execute(program, {"x": x, "block_table": np.array([[1, 2, -1]], np.int32)})
    with pytest.raises(sim.InputError, match=r"input 'block_table': expected shape \(1, 3\), got \(1, 2\)"):
        sim.Session("generic").execute(program, {"x": x, "block_table": np.array([[1, 2]], np.int32)})


def test_a_block_of_a_paged_cache_only_the_fused_attention_reads():
    g = isa.Graph("g")
    with g:
        pool, table = paged_pool(g)
        g.output(O.adds(O.cache_read(pool, 3, 2, table=table, block=1), 1.0), "y")
    with pytest.raises(isa.UnsupportedError, match=r"op adds adds_0 reads cache_read_0, a block of paged cache pool read through its "
                                                   r"block table, which only the fused attention \(attention templates\) do"):
        isa.lower(g, chips.load("generic"))


def test_a_read_of_the_cache_only_products_and_arrangements_take_in_place():
    g = isa.Graph("g")
    with g:
        seen = O.cache_read(g.state("cache", (2, 8, 4)), 3, 1)
        g.output(O.adds(seen, 1.0), "y")
    with pytest.raises(isa.UnsupportedError, match=r"op adds adds_0 reads cache_read_0, a read of cache cache in place"):
        isa.lower(g, chips.load("generic"))


def test_a_session_refuses_a_program_that_binds_its_state_elsewhere():
    session = sim.Session("generic")
    session.run(step((2, 8, 4), 1, 0, 1), {"rows": np.ones((2, 1, 4), np.float32)})
    g = isa.Graph("other")
    with g:
        g.state("first", (16,))
        O.cache_append(g.state("cache", (2, 8, 4)), g.input("rows", (2, 1, 4)), 1, 1)
    with pytest.raises(sim.InputError, match=r"state cache: program other binds it at ddr@0x40:float32\[2,8,4;32,4,1\], and the "
                                             r"session holds it at ddr@0x0:float32\[2,8,4;32,4,1\]"):
        session.run(g, {"rows": np.ones((2, 1, 4), np.float32)})


@pytest.mark.parametrize("state, message", [
    ({"cache": np.ones((2, 7, 4), np.float32)}, r"state 'cache': expected shape \(2, 8, 4\), got \(2, 7, 4\)"),
    ({"kv": np.ones((2, 8, 4), np.float32)}, r"unknown state\(s\) kv; the program's states are cache"),
])
def test_bad_state_given_to_a_run_is_refused(state, message):
    program = isa.lower(step((2, 8, 4), 1, 0, 1), chips.load("generic"))
    with pytest.raises(sim.InputError, match=message):
        sim.execute(program, "generic", {"rows": np.ones((2, 1, 4), np.float32)}, state=state)


def test_a_step_past_the_caches_capacity_names_it():
    with pytest.raises(isa.ShapeError, match=r"cache_append of 'layers\.0\.k_rot\.transpose/reshape' into state cache\.0\.key: 1 "
                                             r"position\(s\) from position 8 along axis 2 reach position 9, beyond the cache's 8"):
        layer_step(TINY, 1, 8, 8, "float32")


def test_an_input_is_replaced_by_a_read_of_its_shape_or_kept():
    g = isa.Graph("g")
    x, cache = g.input("x", (2, 3, 4)), g.state("cache", (2, 8, 4))
    with pytest.raises(isa.ShapeError, match=r"length 9 along axis 1 is beyond the cache's 8 positions"):
        g.input_from("x", lambda: O.cache_read(cache, 9, 1, name="x"))
    assert g.inputs == ["x"] and g.tensors["x"] is x  # the refused read changed nothing
    with pytest.raises(isa.GraphError, match=r"input 'x' \(float32\[2, 3, 4\]\) replaced by Tensor\('x', \(2, 2, 4\), float32\)"):
        g.input_from("x", lambda: O.cache_read(cache, 2, 1, name="x"))
    h = isa.Graph("h")
    h.input("y", (2, 3, 4))
    read = h.input_from("y", lambda: O.cache_read(h.state("cache", (2, 8, 4)), 3, 1, name="y"))
    assert h.inputs == [] and h.nodes[0].op == "cache_read" and read is h.tensors["y"]


def test_a_paged_step_of_a_layer_built_whole_is_refused():
    with pytest.raises(isa.GraphError, match=r"no output 'present\.0\.key\.1' .* a step over a cache in blocks of 4 is built with block=4"):
        llm.with_kv_cache(isa.from_onnx(llm.decoder_layer(TINY, seq=1, past=5, dtype="float32")), TINY, 1, 8, past=5, block=4)
