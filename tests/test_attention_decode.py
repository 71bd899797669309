"""Fused attention for a decode step (isa/ops/attention.py's key and value segments,
isa/lower/templates/attention.py's parts of the keys combined, isa/onnx/attention.py's decode
forms): the machine's outputs against numpy and the ONNX reference evaluator on generic, bm1686
and ascend910b, grouped-query heads, a paged cache, a chunk's causal mask over the new tokens, the
scores kept off DDR, and the fused step faster than the unfused over a 2048-long cache."""

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import chips
import isa
import sim
from isa.errors import ShapeError
from isa.onnx import PASSES

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import llm

O = isa.ops
UNFUSED = [p for p in PASSES if p != "attention"]
SMALL = llm.config("tinyllama-1.1b", layers=1, hidden=64, heads=4, kv_heads=2, mlp=96, vocab=100)


def reference(q, keys, values, mask, scale):
    """softmax(scale q k^T + mask over the last keys) v in float64, k and v the segments
    concatenated (the keys transposed), query head h reading KV head h // group."""
    k = np.swapaxes(np.concatenate([a.astype(np.float64) for a in keys], axis=3), -1, -2)
    v = np.concatenate([a.astype(np.float64) for a in values], axis=2)
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = scale * q.astype(np.float64) @ np.swapaxes(k, -1, -2)
    if mask is not None:
        s[..., s.shape[-1] - mask.shape[-1]:] += mask.astype(np.float64)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


def segments(chip, dtype, heads, kv, seq, lengths, d, seed=0):
    """The attention op over key and value segments of `lengths` positions (the last one the
    `seq` new tokens, causally masked when seq > 1); (result, numpy's answer)."""
    rng = np.random.default_rng(seed)
    npdt = isa.dtypes.np_dtype(dtype)
    feeds = {"q": rng.standard_normal((1, heads, seq, d)).astype(npdt)}
    for i, n in enumerate(lengths):
        feeds[f"k{i}"] = rng.standard_normal((1, kv, d, n)).astype(npdt)
        feeds[f"v{i}"] = rng.standard_normal((1, kv, n, d)).astype(npdt)
    g = isa.Graph("decode")
    q = g.input("q", feeds["q"].shape, dtype)
    ks = [g.input(f"k{i}", feeds[f"k{i}"].shape, dtype) for i in range(len(lengths))]
    vs = [g.input(f"v{i}", feeds[f"v{i}"].shape, dtype) for i in range(len(lengths))]
    mask = np.triu(np.full((seq, seq), np.finfo(npdt).min, npdt), 1) if seq > 1 else None
    scale = 1 / math.sqrt(d)
    g.output(O.attention(q, ks, vs, None if mask is None else g.constant("mask", mask), scale=scale, key_transposed=True), "y")
    res = sim.run(g, chips.load(chip), feeds)
    want = reference(feeds["q"], [feeds[f"k{i}"] for i in range(len(lengths))], [feeds[f"v{i}"] for i in range(len(lengths))],
                     mask, scale)
    return res, want


@pytest.mark.parametrize("chip, dtype, tol", [("generic", "float32", 1e-4), ("bm1686", "float32", 1e-4), ("generic", "float16", 4e-3),
                                              ("ascend910b", "float16", 4e-3)])
@pytest.mark.parametrize("heads, kv, seq, lengths", [(8, 2, 1, [300, 1]), (4, 4, 1, [130, 7, 1]), (8, 2, 3, [70, 5, 3])])
def test_segments_and_a_mask_over_the_new_tokens_match_numpy(chip, dtype, tol, heads, kv, seq, lengths):
    res, want = segments(chip, dtype, heads, kv, seq, lengths, 32)
    np.testing.assert_allclose(res.outputs["y"].astype(np.float64), want, rtol=tol, atol=tol)


def test_the_cores_share_a_decode_steps_keys_and_the_scores_stay_off_ddr():
    """8 query heads over 2 KV heads, 3000 cached positions, on the 910B's 24 cores: a KV group's
    rows are one tile (the cache read once per KV head), its keys cut into parts the cores do
    apart and combine after; only the output is written to DDR."""
    res, want = segments("ascend910b", "float16", 8, 2, 1, [3000, 1], 64)
    np.testing.assert_allclose(res.outputs["y"].astype(np.float64), want, rtol=4e-3, atol=4e-3)
    note = next(n for n in res.program.notes if n.startswith("attention"))
    assert "query tiles of 4 rows" in note and "parts combined" in note, note
    assert int(note.split(" unit(s)")[0].split("on ")[-1]) > 12, note  # 2 tiles (KV heads) on more than half the cores
    assert res.stats.ddr_write_bytes == 8 * 64 * 2


def test_a_mask_wider_than_the_keys_is_refused():
    g = isa.Graph("bad")
    q = g.input("q", (1, 2, 3, 8))
    ks = [g.input(f"k{i}", (1, 2, 8, n)) for i, n in enumerate((4, 3))]
    vs = [g.input(f"v{i}", (1, 2, n, 8)) for i, n in enumerate((4, 3))]
    with pytest.raises(ShapeError, match="over the last keys of the 7"):
        O.attention(q, ks, vs, g.input("m", (3, 8)), scale=1.0, key_transposed=True)
    with pytest.raises(ShapeError, match="2 key segment"):
        O.attention(q, ks, vs[:1], scale=1.0, key_transposed=True)


# ---- the import pass: a decode step as examples/llm.py and Hugging Face exports write it ----------

@pytest.mark.parametrize("chip, dtype, tol", [("generic", "float32", 1e-4), ("bm1686", "float32", 1e-4), ("ascend910b", "float16", 2e-2)])
@pytest.mark.parametrize("seq, past, block", [(1, 6, None), (3, 5, None), (1, 9, 4), (3, 9, 4)])
def test_the_pass_fuses_an_llm_decode_step_and_it_matches_the_reference(chip, dtype, tol, seq, past, block):
    """examples/llm.py's step: scores over the cache (or each paged block) and over the new
    tokens, concatenated, softmaxed and sliced: one fused attention over the segments, the
    grouped query read by heads; its output the ONNX reference evaluator's."""
    model = llm.decoder_layer(SMALL, 1, seq, past, dtype, 0, block)
    rng = np.random.default_rng(1)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(dtype) for i in model.graph.input}
    want = ReferenceEvaluator(model).run(["y"], feeds)[0]
    graph = isa.from_onnx(model)
    (att,) = [n for n in graph.nodes if n.op == "attention"]
    assert att.params.get("segments") == (-(-past // block) if block else 1) + 1
    assert not [n for n in graph.nodes if n.op == "softmax" or n.name.endswith(".scores")]
    got = sim.run(graph, chips.load(chip), feeds).outputs["y"]
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


def hf_decode(heads, kv, past, d):
    """A step as Hugging Face exports it: the new key and value rows concatenated to the cache
    (the concatenation the present outputs), the key transposed, MatMul, Div by sqrt(d), Add of
    an attention mask input, Softmax, MatMul; grouped heads already repeated (kv = heads)."""
    f = TensorProto.FLOAT
    shapes = {"q": (1, heads, 1, d), "past_key": (1, kv, past, d), "k": (1, kv, 1, d), "past_value": (1, kv, past, d),
              "v": (1, kv, 1, d), "mask": (1, 1, 1, past + 1)}
    nodes = [helper.make_node("Concat", ["past_key", "k"], ["present_key"], axis=2),
             helper.make_node("Concat", ["past_value", "v"], ["present_value"], axis=2),
             helper.make_node("Transpose", ["present_key"], ["kt"], perm=[0, 1, 3, 2]), helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Div", ["s", "root"], ["ss"]), helper.make_node("Add", ["ss", "mask"], ["sm"]),
             helper.make_node("Softmax", ["sm"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "present_value"], ["y"])]
    outs = [helper.make_tensor_value_info("y", f, (1, heads, 1, d)), helper.make_tensor_value_info("present_key", f, (1, kv, past + 1, d)),
            helper.make_tensor_value_info("present_value", f, (1, kv, past + 1, d))]
    graph = helper.make_graph(nodes, "hf_decode", [helper.make_tensor_value_info(n, f, s) for n, s in shapes.items()], outs,
                              [numpy_helper.from_array(np.array(math.sqrt(d), np.float32), "root")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), shapes


@pytest.mark.parametrize("chip", ["generic", "bm1686"])
def test_the_pass_reads_a_cache_and_new_rows_concatenated_as_exported_in_place(chip):
    model, shapes = hf_decode(4, 4, 40, 16)
    rng = np.random.default_rng(2)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    feeds["mask"][..., :3] = np.finfo(np.float32).min  # the first positions padding
    want = ReferenceEvaluator(model).run(None, feeds)
    graph = isa.from_onnx(model)
    (att,) = [n for n in graph.nodes if n.op == "attention"]
    assert list(att.inputs[1:5]) == ["past_key", "k", "past_value", "v"] and not att.params["key_transposed"]
    got = sim.run(graph, chips.load(chip), feeds).outputs
    for name, value in zip(("y", "present_key", "present_value"), want):
        np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-4)


# ---- speed: the fused step against the scores through DDR ---------------------------------------------

def llm_decode_attention(heads, kv, past, d, dtype):
    """The attention of examples/llm.py's decode step alone: the query (1, kv, group, d), the key
    cache (1, kv, d, past) and new key (1, kv, d, 1), the value cache and new value."""
    t = TensorProto.FLOAT16 if dtype == "float16" else TensorProto.FLOAT
    group, npdt = heads // kv, isa.dtypes.np_dtype(dtype)
    shapes = {"q": (1, kv, group, d), "kc": (1, kv, d, past), "key": (1, kv, d, 1), "vc": (1, kv, past, d), "v": (1, kv, 1, d)}
    consts = [numpy_helper.from_array(np.array(1 / math.sqrt(d), npdt), "scale")]
    nodes = [helper.make_node("MatMul", ["q", "kc"], ["sc"]), helper.make_node("Mul", ["sc", "scale"], ["ssc"]),
             helper.make_node("MatMul", ["q", "key"], ["sn"]), helper.make_node("Mul", ["sn", "scale"], ["ssn"]),
             helper.make_node("Concat", ["ssc", "ssn"], ["s"], axis=3), helper.make_node("Softmax", ["s"], ["p"], axis=3)]
    for i, (lo, hi, v) in enumerate(((0, past, "vc"), (past, past + 1, "v"))):
        consts += [numpy_helper.from_array(np.array([x], np.int64), f"{what}{i}") for what, x in (("lo", lo), ("hi", hi), ("axis", 3))]
        nodes += [helper.make_node("Slice", ["p", f"lo{i}", f"hi{i}", f"axis{i}"], [f"p{i}"]),
                  helper.make_node("MatMul", [f"p{i}", v], [f"c{i}"])]
    nodes.append(helper.make_node("Add", ["c0", "c1"], ["y"]))
    graph = helper.make_graph(nodes, "decode_attention", [helper.make_tensor_value_info(n, t, s) for n, s in shapes.items()],
                              [helper.make_tensor_value_info("y", t, (1, kv, group, d))], consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("chip, dtype", [("ascend910b", "float16"), ("bm1686", "float32")])
def test_the_fused_decode_step_is_faster_than_its_scores_through_ddr(chip, dtype):
    """32 query heads over 8 KV heads of 128 and a 2048-long cache: the fused kernel reads each
    KV head's cache once for its group of queries (on the 910B the 24 cores each take a part of
    the keys) and keeps the scores on chip; unfused, the scores go to DDR and back, and the
    softmax and the probabilities' products are ops of their own."""
    model, target = llm_decode_attention(32, 8, 2048, 128, dtype), chips.load(chip)
    cycles = {}
    for name, passes in (("fused", None), ("unfused", UNFUSED)):
        graph = isa.from_onnx(model, passes=passes)
        assert (name == "fused") == any(n.op == "attention" for n in graph.nodes)
        cycles[name] = sim.execute(isa.lower(graph, target), target, mode="timing").cycles
    assert cycles["fused"] < cycles["unfused"], cycles


@pytest.mark.parametrize("chip, dtype, tol", [("generic", "float32", 1e-5), ("bm1686", "float32", 1e-5), ("ascend910b", "float16", 1e-2)])
@pytest.mark.parametrize("fused", [True, False])
def test_a_multi_query_step_reads_its_one_kv_heads_cache_in_place(chip, dtype, tol, fused):
    """Multi-query attention (4 query heads, 1 KV head), the caches kept as graph state: a
    prefill of 5 tokens, then a decode step of the 6th reads the one KV head's caches where they
    lie, fused or not (unfused, the scores' product reads the token-major key cache through its
    transposing permute, which runs no instruction); its output is the 6-token prefill's last row."""
    cfg = llm.config("tinyllama-1.1b", layers=1, hidden=64, heads=4, kv_heads=1, mlp=96, vocab=100)
    passes = None if fused else UNFUSED
    x = np.random.default_rng(5).standard_normal((1, 6, cfg.hidden)).astype(dtype)
    full = sim.run(isa.from_onnx(llm.decoder_layer(cfg, seq=6, dtype=dtype), passes=passes), chip, {"x": x}).outputs["y"]
    session = sim.Session(chip)
    for seq, past in ((5, 0), (1, 5)):
        graph = llm.with_kv_cache(isa.from_onnx(llm.decoder_layer(cfg, seq=seq, past=past, dtype=dtype), passes=passes), cfg, 1, 8,
                                  past=past, seq=seq)
        step = session.run(graph, {"x": x[:, past:past + seq]})
    got = step.outputs["y"]
    readers = {n.op for n in graph.nodes if {"past.0.key", "past.0.value"} & set(n.inputs)}
    assert readers == ({"attention"} if fused else {"matrix_mul", "permute"})
    assert "layers.0.key_t_cache" not in {e.op for e in step.trace.events}
    np.testing.assert_allclose(got[:, 0].astype(np.float64), full[:, 5].astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("chip, dtype, tol", [("generic", "float32", 1e-5), ("bm1686", "float32", 1e-5), ("ascend910b", "float16", 1e-2)])
def test_an_unfused_products_right_operand_is_read_transposed_where_it_lies(chip, dtype, tol):
    """matrix_mul(q, permute(k, (0, 1, 3, 2))), k token-major keys (an unfused score product over a
    key cache): the permute runs no instruction, the product loads k's rows as they lie and the
    matrix unit reads each tile transposed (isa/lower/templates/matmul.py); the values are numpy's,
    in fewer cycles than with the permute's copy (returned, so of its own)."""
    rng = np.random.default_rng(7)
    feeds = {"q": rng.standard_normal((1, 2, 3, 32)).astype(dtype), "k": rng.standard_normal((1, 2, 200, 32)).astype(dtype)}
    results = []
    for returned in (False, True):
        g = isa.Graph("scores")
        with g:
            kt = O.permute(g.input("k", feeds["k"].shape, dtype), [0, 1, 3, 2])
            g.output(O.matrix_mul(g.input("q", feeds["q"].shape, dtype), kt), "s")
            if returned:
                g.output(kt, "kt")
        results.append(sim.run(g, chip, feeds))
    fast, slow = results
    want = feeds["q"].astype(np.float64) @ np.swapaxes(feeds["k"].astype(np.float64), -1, -2)
    np.testing.assert_allclose(fast.outputs["s"].astype(np.float64), want, rtol=tol, atol=tol)
    np.testing.assert_array_equal(fast.outputs["s"], slow.outputs["s"])
    products = [x for s in fast.program.streams.values() for x in s if x.kind == "matrix"]
    assert products and all(x.b.strides[0] == 1 and x.b.strides[1] > 1 for x in products)  # each tile read transposed
    assert not [e for e in fast.trace.events if e.op.startswith("permute")]
    assert [e for e in slow.trace.events if e.op.startswith("permute")]
    assert fast.cycles < slow.cycles
