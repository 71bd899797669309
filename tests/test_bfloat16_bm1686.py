"""bfloat16 decoder layers on bm1686 (BM1684X), compiled as TPU-MLIR compiles BM1684X's BF16 models:
the ops its lowering makes in BF16 run in bfloat16 (chips/bm1686.yaml's bfloat16 rows), the ones it
lowers in F32 (square root, sigmoid, reciprocal) in float32 between casts (isa/deploy/floats.py).
The values come from the machine; the reference is the same layer evaluated in float32 on the
bfloat16 weights, widened exactly."""

import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

import chips
import isa
import sim
from isa.errors import UnsupportedError
from isa.instructions import Matmul, Vector

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import llm
from test_deploy import TOLERANCE, cnn, image, note
from test_deploy import deployed as deployed_cnn
from test_weight_only_ascend import bfloat16_a16

BM1686 = chips.load("bm1686")
BF16 = np.dtype(ml_dtypes.bfloat16)
TINY = llm.config("tinyllama-1.1b", layers=1, hidden=64, heads=4, kv_heads=2, mlp=96, vocab=50)  # grouped-query, as TinyLlama
TINY_QWEN = llm.config("qwen2-7b", layers=1, hidden=48, heads=6, kv_heads=2, mlp=80, vocab=40)  # with Q/K/V biases
# bfloat16 keeps 8 significant bits: a unit roundoff of 2^-8; a layer's outputs stay within 8 of them
TOL = 2.0**-5


def feeds_for(model, seed=1):
    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim]).astype(BF16)
            for v in model.graph.input}


def reference(cfg, seq, past, model, feeds):
    """The layer's outputs in float32 (numpy, ONNX's reference evaluator): the float32 build of the
    same graph with the bfloat16 model's weights widened exactly, on the same inputs."""
    wide = llm.decoder_layer(cfg, seq=seq, past=past, dtype="float32")
    narrow = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for t in wide.graph.initializer:
        if narrow[t.name].dtype == BF16:
            t.CopyFrom(numpy_helper.from_array(narrow[t.name].astype(np.float32), t.name))
    outs = ReferenceEvaluator(wide).run(None, {k: v.astype(np.float32) for k, v in feeds.items()})
    return dict(zip([o.name for o in wide.graph.output], outs))


def deployed(model):
    return isa.from_onnx(model, quantize="BF16", chip=BM1686)


@pytest.mark.parametrize("cfg", [TINY, TINY_QWEN], ids=["tinyllama", "qwen2"])
@pytest.mark.parametrize("seq, past", [(6, 0), (1, 6)], ids=["prefill", "decode"])
def test_a_bfloat16_layer_on_bm1686_matches_the_float32_reference(cfg, seq, past):
    model = llm.decoder_layer(cfg, seq=seq, past=past, dtype="bfloat16")
    feeds = feeds_for(model)
    got = sim.run(deployed(model), BM1686, feeds).outputs
    want = reference(cfg, seq, past, model, feeds)
    assert got.keys() == want.keys() == {"y", "present.0.key", "present.0.value"}
    for name, value in want.items():
        assert got[name].dtype == BF16, name
        np.testing.assert_allclose(got[name].astype(np.float64), value.astype(np.float64), rtol=TOL, atol=TOL, err_msg=name)
    assert np.abs(want["y"]).max() > 1  # the residual stream: values well above the tolerance


def test_a_decode_step_over_the_prefills_bfloat16_cache_gives_its_last_row():
    """Prefill 5 tokens, feed their key and value rows back as the caches, decode the 6th: its output
    is the 6-token prefill's last row within bfloat16's precision (one seed: the same weights)."""
    x = np.random.default_rng(2).standard_normal((1, 6, TINY.hidden)).astype(BF16)

    def run(seq, past, feeds):
        return sim.run(deployed(llm.decoder_layer(TINY, seq=seq, past=past, dtype="bfloat16")), BM1686, feeds).outputs

    full = run(6, 0, {"x": x})
    head = run(5, 0, {"x": x[:, :5]})
    assert head["present.0.key"].dtype == BF16
    step = run(1, 5, {"x": x[:, 5:], "past.0.key": head["present.0.key"], "past.0.value": head["present.0.value"]})
    np.testing.assert_allclose(step["y"][:, 0].astype(np.float64), full["y"][:, 5].astype(np.float64), rtol=TOL, atol=TOL)


def test_the_ops_tpu_mlir_lowers_in_f32_run_in_float32_between_casts_the_rest_in_bfloat16():
    model = llm.decoder_layer(TINY, seq=1, past=4, dtype="bfloat16")
    g = deployed(model)
    assert g.notes[-1] == ("quantize bfloat16 on bm1686: 61 op(s) in bfloat16, 5 in float32 (the chip's table has no bfloat16 "
                           "for them: active.sqrt x2, rdivs x2, active.sigmoid x1), 6 cast(s) added")
    program = isa.lower(g, BM1686)
    instrs = [i for stream in program.streams.values() for i in stream]
    products = [i for i in instrs if isinstance(i, Matmul)]
    assert products and {(i.a.dtype, i.b.dtype) for i in products} == {("bfloat16", "bfloat16")}  # the cube multiplies bfloat16
    wide = {n.name for n in g.nodes if n.op != "cast" and g.tensors[n.outputs[0]].dtype == "float32"}
    assert len(wide) == 5
    for name in wide:
        vector = [i for i in instrs if isinstance(i, Vector) and i.op == name]
        assert vector and all(i.cdt == "float32" for i in vector), name
    casts = {n.name for n in g.nodes if n.op == "cast"}
    assert {i.dst.dtype for i in instrs if isinstance(i, Vector) and i.op in casts} == {"float32", "bfloat16"}


@pytest.mark.parametrize("bits", [8, 4])
def test_a_weight_only_product_with_bfloat16_activations(bits):
    """W8BF16 and W4BF16: TPU-MLIR lowers a MatMul with weight_bits in BF16 to an A16MatMul; the
    template dequantizes the tile to bfloat16 in local memory and the cube multiplies it."""
    _, got, want = bfloat16_a16(BM1686, bits)
    assert got.dtype == BF16
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=TOL, atol=TOL * np.abs(want).max())


def test_timing_mode_gives_the_functional_cycles():
    model = llm.decoder_layer(TINY, seq=6, dtype="bfloat16")
    g = deployed(model)
    functional = sim.run(g, BM1686, feeds_for(model))
    timing = sim.run(g, BM1686, mode="timing")
    assert timing.cycles == functional.cycles > 0


def test_a_bfloat16_op_bm1686_lacks_is_refused_naming_the_op_the_dtype_and_the_chip():
    """Lowered as it is, a bfloat16 square root is refused (TPU-MLIR lowers it in F32); deployed, an op
    the table has in neither bfloat16 nor float32 stays bfloat16 and is refused the same way."""
    g = isa.Graph("bf16")
    with g:
        x = g.input("x", (4, 64), "bfloat16")
        g.output(isa.ops.active(isa.ops.mul(x, x), "sqrt"), "y")
    with pytest.raises(UnsupportedError, match=r"op .*: active\.sqrt with bfloat16 -> bfloat16 is not supported on chip bm1686"):
        isa.lower(g, BM1686)
    g = isa.Graph("bf16_fill")
    with g:
        x = g.input("x", (4, 64), "bfloat16")
        g.output(isa.ops.masked_fill(isa.ops.mul(x, x), g.input("mask", (4, 64), "int8"), 0.0), "y")
    with pytest.raises(UnsupportedError, match=r"op .*: masked_fill with bfloat16 x int8 -> bfloat16 is not supported on chip bm1686"):
        isa.lower(isa.quantize(g, "BF16", BM1686), BM1686)


def test_a_cnn_deployed_in_bf16_runs_in_bfloat16_within_its_rounding():
    """Convolutions, pooling and ReLU have bfloat16 too (TPU-MLIR's BM1684X lowerings): the small
    network of test_deploy.py runs all its ops in bfloat16, within bfloat16's tolerance there."""
    model, x = cnn(), image()
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    g, got = deployed_cnn(model, "bm1686", "BF16", x)
    assert "8 op(s) in bfloat16, 0 in float32" in note(g)
    assert 0 < np.abs(got - want).max() / np.abs(want).max() <= TOLERANCE["bfloat16"]
