"""Language models on the NPUs: the op tables a transformer needs (chips/*.yaml), the builders of
examples/llm.py against a numpy reference of the same model, and bench/llm.py's figures and errors."""

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import chips
import isa
import isa.onnx
import sim
from isa.costs import transfer_bandwidth

O = isa.ops
ASCEND910B = chips.load("ascend910b")


def rms_softmax_silu(dtype, n=8, d=64):
    """RMSNorm, a softmax over the last axis and SiLU: the vector work of a decoder layer."""
    g = isa.Graph("vector_work")
    with g:
        x = g.input("x", (n, d), dtype)
        ms = O.reduce(O.mul(x, x), "REDUCE_MEAN", [1])
        g.output(O.mul(x, O.active(O.adds(ms, 1e-6), "rsqrt")), "normed")
        g.output(O.softmax(x, axis=1), "probs")
        g.output(O.mul(x, O.active(x, "sigmoid")), "silu")
    return g


def reference(x):
    x = x.astype(np.float64)
    normed = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return {"normed": normed, "probs": e / e.sum(axis=1, keepdims=True), "silu": x / (1 + np.exp(-x))}


@pytest.mark.parametrize("dtype, tol", [("float16", 1e-2), ("float32", 1e-5), ("bfloat16", 4e-2)])
def test_ascend910b_runs_a_layers_vector_work_in_each_float_dtype(dtype, tol):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 64)).astype(isa.dtypes.np_dtype(dtype))
    res = sim.run(rms_softmax_silu(dtype), ASCEND910B, {"x": x})
    for name, want in reference(x).items():
        got = res.outputs[name].astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=name)


@pytest.mark.parametrize("chip, op, dtype", [
    ("bm1686", "softmax", "float16"),     # BMLang's softmax line for BM1686: FLOAT32 only
    ("bm1686", "active", "float16"),      # sigmoid: only relu, leaky_relu and absval gain FLOAT16 on BM1686
    ("ascend310b", "active", "float16"),  # aclnnExp: Atlas 200I/500 A2 ×
    ("ascend310b", "softmax", "bfloat16"),  # aclnnSoftmax: no BFLOAT16 on Atlas 200I/500 A2
])
def test_a_refusal_names_the_op_the_dtype_and_the_chip(chip, op, dtype):
    g = isa.Graph("refused")
    with g:
        x = g.input("x", (4, 16), dtype)
        g.output(O.softmax(x, axis=1) if op == "softmax" else O.active(x, "sigmoid" if chip == "bm1686" else "exp"), "y")
    key = "softmax" if op == "softmax" else ("active.sigmoid" if chip == "bm1686" else "active.exp")
    with pytest.raises(isa.UnsupportedError, match=rf"{key} with {dtype} -> {dtype} is not supported on chip {chip}"):
        isa.lower(g, chips.load(chip))


def test_ascend910b_refuses_a_float32_product_its_cube_has_no_rate_for():
    g = isa.Graph("refused")
    with g:
        x = g.input("x", (16, 32), "float32")
        g.output(O.matrix_mul(x, g.constant("w", np.ones((32, 16), np.float32))), "y")
    with pytest.raises(isa.UnsupportedError, match=r"matrix_mul with float32 x float32 -> float32 is not supported on chip ascend910b"):
        isa.lower(g, ASCEND910B)


def test_ascend910b_multiplies_bfloat16_on_its_cube():
    rng = np.random.default_rng(1)
    bf16 = isa.dtypes.np_dtype("bfloat16")
    x, w = (rng.standard_normal(s).astype(bf16) for s in ((32, 64), (64, 48)))
    g = isa.Graph("bf16_product")
    with g:
        g.output(O.matrix_mul(g.input("x", x.shape, "bfloat16"), g.constant("w", w)), "y")
    res = sim.run(g, ASCEND910B, {"x": x})
    want = x.astype(np.float64) @ w.astype(np.float64)
    np.testing.assert_allclose(res.outputs["y"].astype(np.float64), want, rtol=2e-2, atol=5e-2)


# ---- examples/llm.py: the builders against the ONNX reference evaluator (numpy) ----------------

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import llm  # noqa: E402

TINY = llm.config("tinyllama-1.1b", layers=2, hidden=64, heads=4, kv_heads=2, mlp=96, vocab=50)  # grouped-query, as TinyLlama
TINY_QWEN = llm.config("qwen2-7b", layers=1, hidden=48, heads=6, kv_heads=2, mlp=80, vocab=40)  # with Q/K/V biases


def feeds_for(model, seed=1):
    rng = np.random.default_rng(seed)
    out = {}
    for value in model.graph.input:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        out[value.name] = rng.integers(0, 40, shape).astype(dtype) if dtype == np.int64 else rng.standard_normal(shape).astype(dtype)
    return out


def against_reference(model, chip, tol):
    feeds = feeds_for(model)
    want = dict(zip([o.name for o in model.graph.output], ReferenceEvaluator(model).run(None, feeds)))
    got = sim.run(isa.from_onnx(model), chips.load(chip), feeds).outputs
    for name, value in want.items():
        np.testing.assert_allclose(got[name].astype(np.float64), value.astype(np.float64), rtol=tol, atol=tol, err_msg=name)
    return got


@pytest.mark.parametrize("cfg", [TINY, TINY_QWEN], ids=["tinyllama", "qwen2"])
@pytest.mark.parametrize("seq, past", [(6, 0), (1, 6), (3, 5)], ids=["prefill", "decode", "chunk"])
@pytest.mark.parametrize("chip, dtype, tol", [("generic", "float32", 1e-4), ("bm1686", "float32", 1e-4), ("bm1684", "float32", 1e-4),
                                              ("ascend910b", "float16", 2e-2)])
def test_a_decoder_layer_matches_the_reference(cfg, seq, past, chip, dtype, tol):
    against_reference(llm.decoder_layer(cfg, seq=seq, past=past, dtype=dtype), chip, tol)


@pytest.mark.parametrize("chip, dtype, tol", [("generic", "float32", 1e-4), ("bm1686", "float32", 1e-4), ("ascend910b", "float16", 2e-2)])
def test_a_whole_model_matches_the_reference(chip, dtype, tol):
    against_reference(llm.model(TINY, seq=4, past=3, dtype=dtype), chip, tol)


@pytest.mark.parametrize("chip, dtype, tol", [("generic", "float32", 1e-5), ("bm1686", "float32", 1e-5), ("bm1684", "float32", 1e-5),
                                              ("ascend910b", "float16", 1e-2)])
def test_a_decode_step_equals_the_prefills_last_position(chip, dtype, tol):
    """Prefill 5 tokens, keep their key and value rows as the caches, decode the 6th: its output is
    the 6-token prefill's last row (the same weights: one seed)."""
    target = chips.load(chip)
    x = np.random.default_rng(2).standard_normal((1, 6, TINY.hidden)).astype(dtype)

    def run(seq, past, feeds):
        return sim.run(isa.from_onnx(llm.decoder_layer(TINY, seq=seq, past=past, dtype=dtype)), target, feeds).outputs

    full = run(6, 0, {"x": x})
    head = run(5, 0, {"x": x[:, :5]})
    step = run(1, 5, {"x": x[:, 5:], "past.0.key": head["present.0.key"], "past.0.value": head["present.0.value"]})
    np.testing.assert_allclose(step["y"][:, 0].astype(np.float64), full["y"][:, 5].astype(np.float64), rtol=tol, atol=tol)
    np.testing.assert_array_equal(head["present.0.key"].shape, (1, TINY.kv_heads, 5, TINY.head_size))


def test_bm1686_float16_is_refused_at_the_norms_square_root():
    layer = llm.decoder_layer(TINY, seq=2, dtype="float16")
    with pytest.raises(isa.UnsupportedError, match=r"active.sqrt with float16 -> float16 is not supported on chip bm1686"):
        sim.run(isa.from_onnx(layer), chips.load("bm1686"), feeds_for(layer))


def test_the_configurations_are_the_model_cards():
    llama, qwen, tiny = (llm.CONFIGS[n] for n in ("llama2-7b", "qwen2-7b", "tinyllama-1.1b"))
    assert (llama.layers, llama.hidden, llama.heads, llama.kv_heads, llama.mlp, llama.vocab) == (32, 4096, 32, 32, 11008, 32000)
    assert (qwen.layers, qwen.hidden, qwen.heads, qwen.kv_heads, qwen.mlp, qwen.vocab) == (28, 3584, 28, 4, 18944, 152064)
    assert (tiny.layers, tiny.hidden, tiny.heads, tiny.kv_heads, tiny.mlp, tiny.vocab) == (22, 2048, 32, 4, 5632, 32000)
    # the published sizes: Llama-2-7B 6.74 B parameters, Qwen2-7B 7.62 B, TinyLlama 1.10 B
    assert [round(c.weights() / 1e9, 2) for c in (llama, qwen, tiny)] == [6.74, 7.62, 1.1]
    assert llama.kv_elements(2048) * 2 == 2**30  # float16 KV cache of Llama-2-7B at 2048 tokens: 1 GiB



# ---- bench/llm.py: the footprint check and the decode lengths (the figures are the bench's to print) ----

def load_bench():
    """bench/llm.py as a module of its own name (examples/llm.py holds the name `llm`)."""
    spec = importlib.util.spec_from_file_location("bench_llm", Path(__file__).resolve().parent.parent / "bench" / "llm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCH = load_bench()


def test_a_model_too_big_for_the_chips_ddr_is_an_error_naming_both_sizes(capsys):
    assert BENCH.main(["--model", "llama2-7b", "--chip", "ascend310b", "--prompt", "512", "--generate", "128"]) == 2
    err = capsys.readouterr().err
    assert "llama2-7b in float16 needs 13.48 GB of weights + 0.34 GB of KV cache (640 tokens x batch 1) = 13.81 GB" in err
    assert "more than chip ascend310b's DDR of 4.29 GB" in err
    too_big = r"needs 26.95 GB of weights \+ 0.67 GB of KV cache .* more than chip bm1686.s DDR of 17.18 GB"
    with pytest.raises(isa.errors.OutOfMemoryError, match=too_big):
        BENCH.check_fits(llm.CONFIGS["llama2-7b"], chips.load("bm1686"), "float32", 1, 640)


def test_a_model_that_fits_gives_its_footprint():
    weights, kv = BENCH.check_fits(llm.CONFIGS["qwen2-7b"], ASCEND910B, "float16", 4, 2048)
    assert weights == llm.CONFIGS["qwen2-7b"].weights() * 2
    assert kv == 2 * 28 * 4 * 2048 * 4 * 128 * 2  # K and V, 28 layers, batch 4, 2048 tokens, 4 KV heads of 128, 2 bytes


@pytest.mark.parametrize("chip, dtype", [("generic", "float32"), ("bm1686", "float32"), ("bm1684", "float32"), ("ascend910b", "float16")])
def test_a_decode_step_streams_its_weights_and_cache_within_1_5x_of_the_ddr_floor(chip, dtype):
    """TinyLlama's real layer (88 MB of float16 weights): a decode step reads every weight once, so
    its time is bound by the bytes over the DDR's bandwidth; the lowering's tiles, waits and layout
    changes may add at most half of it (issue 22's fidelity goal)."""
    cfg, target = llm.CONFIGS["tinyllama-1.1b"], chips.load(chip)
    keep = lambda graph: llm.with_kv_cache(graph, cfg, 1, 320, past=256)  # noqa: E731  # the cache in DDR as graph state, as the bench keeps it
    step = BENCH.simulate(lambda: llm.decoder_layer(cfg, seq=1, past=256, dtype=dtype), target, top=0, keep=keep)
    assert step.state_bytes == 2 * 4 * 64 * 320 * BENCH.DTYPE_BYTES[dtype]  # K and V, 4 KV heads of 64, 320 positions
    floor_bytes, floor = BENCH.decode_floor(cfg, target, dtype, 1, 256)
    assert floor_bytes == (cfg.layer_weights() + 2 * 256 * 4 * 64) * BENCH.DTYPE_BYTES[dtype]  # 4 KV heads of 64
    assert floor <= step.seconds <= 1.5 * floor


@pytest.mark.parametrize("chip, dtype", [("generic", "float32"), ("bm1686", "float32"), ("bm1684", "float32"), ("ascend910b", "float16")])
def test_a_decode_steps_head_products_read_the_caches_in_place(chip, dtype):
    """A layer whose caches outweigh its weights (8 heads of 128 over 2048 cached tokens): the
    fused attention, and unfused each head's products, read the key and value caches where they
    lie (one batched product, no extract through DDR), so the step stays within 1.5x of its DDR
    floor; a copy of each head's slice first reads and writes the caches' bytes twice more (2.0x
    on generic, 2.5x on ascend910b)."""
    cfg, target = llm.config("llama2-7b", hidden=1024, heads=8, kv_heads=8, mlp=1024), chips.load(chip)
    model = llm.decoder_layer(cfg, seq=1, past=2048, dtype=dtype)
    caches = {"past.0.key", "past.0.value"}
    for passes, reader in ((None, "attention"), ([p for p in isa.onnx.PASSES if p != "attention"], "matrix_mul")):
        graph = isa.from_onnx(model, passes=passes)
        assert not [n.name for n in graph.nodes if n.op == "extract" and caches & set(n.inputs)]
        assert {n.op for n in graph.nodes if caches & set(n.inputs)} == {reader}
    step = BENCH.simulate(lambda: model, target, top=0)
    floor_bytes, floor = BENCH.decode_floor(cfg, target, dtype, 1, 2048)
    assert floor_bytes == (cfg.layer_weights() + 2 * 2048 * 1024) * BENCH.DTYPE_BYTES[dtype]
    assert cfg.layer_weights() / 2 < 2 * 2048 * 1024  # the caches are a large part of the floor
    assert floor <= step.seconds <= 1.5 * floor


def test_decode_lengths_are_the_middles_of_equal_parts():
    assert BENCH.decode_lengths(512, 128, 1) == [576]
    assert BENCH.decode_lengths(512, 128, 4) == [528, 560, 592, 624]


# ---- the transposed_gemv import pass: a decode step's scores against a key cache exported as
# ---- Hugging Face writes them (q @ k.transpose(-1, -2)) read the cache as it lies ----------------

def hf_decode_attention(rows, heads=8, cached=64, d=32):
    """Softmax(q @ Transpose(k)) @ v with q (1, heads, rows, d) and k, v (1, heads, cached, d)."""
    f = onnx.TensorProto.FLOAT
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), helper.make_node("MatMul", ["q", "kt"], ["s"], name="scores"),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    shapes = {"q": (1, heads, rows, d), "k": (1, heads, cached, d), "v": (1, heads, cached, d)}
    graph = helper.make_graph(nodes, "hf_attention", [helper.make_tensor_value_info(n, f, s) for n, s in shapes.items()],
                              [helper.make_tensor_value_info("y", f, (1, heads, rows, d))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), shapes


@pytest.mark.parametrize("chip", ["generic", "bm1686"])
def test_a_decode_steps_scores_read_the_key_cache_without_permuting_it(chip):
    model, shapes = hf_decode_attention(rows=1)
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    folded = isa.from_onnx(model)
    assert "permute" not in {n.op for n in folded.nodes}
    assert "1 product(s) of a row and a transposed operand" in folded.notes[-1]
    permuted = isa.from_onnx(model, passes=("constants", "bn_fold", "activations", "identities"))
    assert "permute" in {n.op for n in permuted.nodes}
    fast, slow = (sim.run(g, chips.load(chip), feeds) for g in (folded, permuted))
    np.testing.assert_allclose(fast.outputs["y"], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(slow.outputs["y"], want, rtol=1e-5, atol=1e-6)
    # unfolded, the product reads k through its permute (k's rows loaded as they lie, the tile read
    # transposed by the matrix unit): no instruction of the permute runs either
    assert "kt" not in {e.op for e in slow.trace.events}
    assert fast.cycles < slow.cycles if chip == "bm1686" else fast.cycles < 1.01 * slow.cycles


def test_a_prefills_scores_keep_their_transpose():
    model, _ = hf_decode_attention(rows=4)
    assert "permute" in {n.op for n in isa.from_onnx(model).nodes}
    assert isa.from_onnx(model).notes[-1].endswith("nothing to rewrite")


@pytest.mark.parametrize("kv_heads", [2, 4], ids=["grouped", "one-to-one"])
@pytest.mark.parametrize("chip, dtype, tol", [("bm1686", "float32", 1e-4), ("ascend910b", "float16", 2e-2)])
def test_a_prefills_attention_writes_the_heads_merged(kv_heads, chip, dtype, tol):
    """A prefill's fused attention writes each head's context rows straight into the (rows, heads,
    head size) layout the output projection reads (the head merge permute written in place,
    isa/lower/templates/place.py), grouped-query or not: no instruction of the merge runs, the
    values are the reference's, and the layer is faster than when the context is also returned (a
    returned tensor has its own buffer, so the merge is then a DDR-to-DDR copy)."""
    cfg = llm.config("tinyllama-1.1b", layers=1, hidden=64, heads=4, kv_heads=kv_heads, mlp=96, vocab=50)
    model = llm.decoder_layer(cfg, seq=32, dtype=dtype)  # a mask of 1 KiB or more: shape inference sees it
    got = against_reference(model, chip, tol)
    assert "attention" in {n.op for n in isa.from_onnx(model).nodes}
    returned = onnx.ModelProto()
    returned.CopyFrom(model)
    returned.graph.output.append(helper.make_empty_tensor_value_info("layers.0.ctx"))
    target, feeds = chips.load(chip), feeds_for(model)
    fast, slow = (sim.run(isa.from_onnx(m), target, feeds) for m in (model, returned))
    merges = [{e.name for e in r.trace.events if e.op == "layers.0.ctx_t"} for r in (fast, slow)]
    assert not merges[0] and merges[1]
    np.testing.assert_array_equal(fast.outputs["y"], got["y"])
    np.testing.assert_array_equal(slow.outputs["y"], fast.outputs["y"])
    assert fast.cycles < slow.cycles


@pytest.mark.parametrize("kv_heads", [2, 4], ids=["grouped", "one-to-one"])
@pytest.mark.parametrize("chip, dtype, tol", [("bm1686", "float32", 1e-4), ("ascend910b", "float16", 2e-2)])
def test_a_prefills_attention_reads_the_query_split_in_place(kv_heads, chip, dtype, tol):
    """The query's head split moves past the rotary embedding (the transposes pass), and the fused
    attention reads each head's rows where the rotary wrote them (the permute read through strides,
    isa/lower/templates/place.py): no instruction of the split runs, the values are the
    reference's, and the layer moves fewer DDR bytes than with the split a copy ahead of the rotary
    (the pass left out): on bm1686 it is also faster; on the 910B, whose attention is bound by its
    L2 and reads a head row's run at a time either way, it takes about as long (within 3%: the
    key's split, moved past the rotary too, is a copy of its own there, as the layer returns the
    key rows, where ahead of the rotary the rotary writes them)."""
    cfg = llm.config("tinyllama-1.1b", layers=1, hidden=64, heads=4, kv_heads=kv_heads, mlp=96, vocab=50)
    model = llm.decoder_layer(cfg, seq=32, dtype=dtype)
    got = against_reference(model, chip, tol)
    graph = isa.from_onnx(model)
    assert "onnx pass transposes: 14 node(s) moved ahead of the Transposes before them" in graph.notes
    target, feeds = chips.load(chip), feeds_for(model)
    without = isa.from_onnx(model, passes=[p for p in isa.onnx.PASSES if p != "transposes"])
    fast, slow = sim.run(graph, target, feeds), sim.run(without, target, feeds)
    assert not {e.name for e in fast.trace.events if e.op == "layers.0.q_rot.transpose"}
    assert {e.name for e in slow.trace.events if e.op == "layers.0.q.heads"}
    np.testing.assert_array_equal(fast.outputs["y"], got["y"])
    np.testing.assert_allclose(slow.outputs["y"].astype(np.float64), got["y"].astype(np.float64), rtol=tol, atol=tol)
    moved = [r.stats.ddr_read_bytes + r.stats.ddr_write_bytes for r in (fast, slow)]
    assert moved[0] < moved[1]
    assert fast.cycles < slow.cycles if chip == "bm1686" else fast.cycles < 1.03 * slow.cycles


def test_the_bench_simulates_a_layer_and_reads_its_engines():
    step = BENCH.simulate(lambda: llm.decoder_layer(TINY, seq=1, past=8), ASCEND910B, top=2)
    assert step.cycles > 0 and step.seconds == pytest.approx(step.cycles / ASCEND910B.clock_hz)
    assert set(step.utilization) == {"dma", "matrix", "vector", "scalar"}
    assert all(0 <= u <= 1 for u in step.utilization.values())
    assert len(step.slowest) == 2 and all(name.startswith("layers.0.") for name, _, _ in step.slowest)
    assert step.ddr_bytes > 0  # less than the weights for a layer this small: the L2's hits are not DDR traffic


# ---- a transpose through local memory (isa/lower/templates/transpose.py) -----------------------------------

def once_through_the_dma(chip, nbytes):
    """Cycles to read and write nbytes once at the DDR rate the chip's DMA reaches: DDR's own
    where the cores' DMA engines share it (Ascend), or where one engine (a Sophgo GDMA) moves both
    ways, its load rate then its store rate (isa/costs.py: link rates capped by the memories')."""
    if len(chip.engines_of("dma")) > 1:
        return 2 * nbytes / chip.memories["ddr"].bandwidth
    (gdma,) = chip.engines_of("dma")
    return sum(nbytes / transfer_bandwidth(gdma, chip.memories, way) for way in (("ddr", "lmem"), ("lmem", "ddr")))


@pytest.mark.parametrize("chip, dtype", [("ascend910b", "float16"), ("ascend310b", "float16"), ("bm1686", "float16"),
                                         ("bm1686", "float32"), ("bm1684", "float32")])
def test_a_transpose_staged_on_chip_moves_whole_bursts(chip, dtype):
    """A prefill's key transpose, (heads, tokens, head size) -> (heads, head size, tokens): each
    element is not a burst of its own, whether the copy stages through local memory anyway
    (Ascend) or goes round through it where the DMA copies DDR to DDR directly (Sophgo, the TIU
    putting each chunk in order); the copy takes about the time of reading and writing its bytes
    once. BM1684 has no float16."""
    target = chips.load(chip, {"ops.permute": {"dtypes": [dtype]}})
    x = np.random.default_rng(0).standard_normal((8, 512, 128)).astype(dtype)
    g = isa.Graph("key_transpose")
    with g:
        g.output(O.permute(g.input("x", x.shape, dtype), [0, 2, 1]), "y")
    res = sim.run(g, target, {"x": x})
    np.testing.assert_array_equal(res.outputs["y"], x.transpose(0, 2, 1))
    assert res.stats.ddr_write_bytes == x.nbytes
    assert res.cycles < 1.5 * once_through_the_dma(target, x.nbytes)
    copies = {e.engine for e in res.trace.events if e.name == "copy"}  # the reordering engine, where a vector engine does it
    assert copies == ({"tiu"} if chip.startswith("bm") else set())


@pytest.mark.parametrize("chip", ["bm1686", "generic"])
def test_negative_token_ids_are_looked_up_from_the_end_by_the_gathers_dma(chip):
    """ONNX's Gather of run-time int64 ids: the gather's DMA maps a negative id from the end as it
    reads it (TPU-MLIR's gather on BM1684X takes ONNX's ids as they are), so bm1686, which has no
    int64 arithmetic, looks up the rows; nothing but the lookup's transfers runs for it."""
    ends = llm.ends(TINY, seq=4, dtype="float32")
    feeds = feeds_for(ends) | {"input_ids": np.array([[3, -1, 0, -50]], np.int64)}
    want = dict(zip([o.name for o in ends.graph.output], ReferenceEvaluator(ends).run(None, feeds)))
    res = sim.run(isa.from_onnx(ends), chips.load(chip), feeds)
    np.testing.assert_array_equal(res.outputs["embedded"], want["embedded"])
    lookup = [i for s in res.program.streams.values() for i in s if i.op.startswith("embed") and not hasattr(i, "on")]
    assert lookup and all(isinstance(i, isa.instructions.IndexedDma) and i.wrap for i in lookup)
    feeds["input_ids"][0, 3] = -51
    with pytest.raises(isa.IndexRangeError, match=r"index -51 .* \(allowed -50\.\.49\)"):
        sim.run(isa.from_onnx(ends), chips.load(chip), feeds)


@pytest.mark.parametrize("args, message", [
    (["--layers", "0"], "--layers and --kv-block are at least 1"), (["--kv-block", "0"], "--layers and --kv-block are at least 1"),
    (["--seed", "-1"], "--top and --seed at least 0"), (["--samples", "5", "--generate", "4"], "--samples is at most --generate"),
])
def test_the_bench_refuses_a_setting_out_of_range_before_building_anything(capsys, args, message):
    with pytest.raises(SystemExit) as exit_:
        BENCH.main(["--model", "tinyllama-1.1b", "--chip", "bm1686", *args])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_the_bench_leaves_out_an_embedding_lookup_the_chip_refuses():
    """bm1684 has no gather: the head is simulated alone, and the reason kept."""
    head, refused = BENCH.simulate_ends(TINY, chips.load("bm1684"), 1, 4, "float32", 0)
    assert head.cycles > 0 and "gather with float32 x int64 -> float32 is not supported on chip bm1684" in refused
    for chip, dtype in (("bm1686", "float32"), ("ascend910b", "float16")):
        both, none = BENCH.simulate_ends(TINY, chips.load(chip), 1, 4, dtype, 0)
        assert none is None and both.cycles > 0


@pytest.mark.parametrize("chip, dtype, ends", [("generic", "float32", "embedding and head"), ("bm1684", "float32", "head")])
def test_the_bench_simulates_a_decode_step_whole(capsys, chip, dtype, ends):
    """--whole: the model (embedding, layers, head) as one graph, its layers each near one layer
    simulated alone; on a chip that refuses the lookup (bm1684), the model from its rows."""
    assert BENCH.main(["--model", "tinyllama-1.1b", "--chip", chip, "--dtype", dtype, "--layers", "2", "--whole",
                       "--prompt", "4", "--generate", "2", "--top", "0"]) == 0
    out = capsys.readouterr().out
    assert f"the whole model (2 layers, {ends}) simulated as one graph" in out
    whole = float(re.search(r"simulated as one graph: time per output token ([\d.]+) ms", out).group(1))
    multiplied = float(re.search(rf"x 2 \+ {ends} would be ([\d.]+) ms", out).group(1))
    assert abs(whole - multiplied) <= 0.05 * multiplied


def test_a_model_without_its_lookup_reads_the_rows_the_lookup_gives():
    """model(embedding=False) starts from "embedded", the lookup's rows: given the embedding table's
    rows for some ids, and the whole model's weights, its outputs are the whole model's for those ids."""
    whole, rows = (llm.model(TINY, seq=3, past=2, dtype="float32", embedding=e) for e in (True, False))
    weights = {t.name: t for t in whole.graph.initializer}
    for t in rows.graph.initializer:
        t.CopyFrom(weights[t.name])
    feeds = feeds_for(whole)
    table = next(onnx.numpy_helper.to_array(t) for t in whole.graph.initializer if t.name == "embed_tokens.weight")
    given = {k: v for k, v in feeds.items() if k != "input_ids"} | {"embedded": table[feeds["input_ids"]]}
    assert "input_ids" not in {i.name for i in rows.graph.input}
    for want, got in zip(ReferenceEvaluator(whole).run(None, feeds), ReferenceEvaluator(rows).run(None, given)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("chip, dtype", [("generic", "float32"), ("ascend910b", "float16")])
def test_a_model_with_its_weights_as_inputs_times_as_with_them_as_constants(chip, dtype):
    """examples/llm.py's model(weight_inputs=True), what bench/llm.py --whole simulates: the weights
    in DDR as the program's inputs, not preloaded constants; timing mode reads neither, so the
    program and its cycles are the same."""
    target = chips.load(chip)
    runs = [sim.run(isa.from_onnx(llm.model(TINY, seq=1, past=3, dtype=dtype, weight_inputs=inputs)), target, mode="timing")
            for inputs in (False, True)]
    constants, inputs = runs
    weights = {f"layers.{i}.{p}.weight" for i in range(TINY.layers) for p in ("self_attn.q_proj", "mlp.down_proj")}
    assert weights <= {b.name for b in inputs.program.bindings if b.role == "input"}
    assert not weights & {b.name for b in constants.program.bindings if b.role == "input"}
    assert len(inputs.program) == len(constants.program) and inputs.cycles == constants.cycles > 0
