"""A float16 decoder layer on bm1686 compiled as TPU-MLIR compiles it for BM1684X (the ops its table
lacks in float16 run in float32 between casts: isa/deploy/floats.py), and bench/llm_published.py's
comparison of the published LLM figures with the simulation of their settings."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

import chips
import isa
import sim
from isa.errors import UnsupportedError
from isa.instructions import Vector

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
import llm  # noqa: E402

BM1686 = chips.load("bm1686")
TINY = llm.config("tinyllama-1.1b", layers=1, hidden=64, heads=4, kv_heads=2, mlp=96, vocab=50)  # grouped-query, as TinyLlama
TINY_QWEN = llm.config("qwen2-7b", layers=1, hidden=48, heads=6, kv_heads=2, mlp=80, vocab=40)  # with Q/K/V biases


def feeds_for(model, seed=1):
    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim]).astype(np.float16)
            for v in model.graph.input}


@pytest.mark.parametrize("cfg", [TINY, TINY_QWEN], ids=["tinyllama", "qwen2"])
@pytest.mark.parametrize("seq, past", [(6, 0), (1, 6), (3, 5)], ids=["prefill", "decode", "chunk"])
def test_a_float16_layer_on_bm1686_matches_the_onnx_reference(cfg, seq, past):
    model = llm.decoder_layer(cfg, seq=seq, past=past, dtype="float16")
    feeds = feeds_for(model)
    want = dict(zip([o.name for o in model.graph.output], ReferenceEvaluator(model).run(None, feeds)))
    got = sim.run(isa.from_onnx(model, quantize="F16", chip=BM1686), BM1686, feeds).outputs
    for name, value in want.items():
        assert got[name].dtype == np.float16
        np.testing.assert_allclose(got[name].astype(np.float64), value.astype(np.float64), rtol=2e-2, atol=2e-2, err_msg=name)


def writes(instrs):
    """The dtypes these instructions write (waits and signals write nothing)."""
    return {i.dst.dtype for i in instrs if hasattr(i, "dst")}


def test_the_ops_bm1686_lacks_in_float16_run_in_float32_between_casts_on_chip():
    model = llm.decoder_layer(TINY, seq=1, past=4, dtype="float16")
    with pytest.raises(UnsupportedError, match=r"op layers\.0\.input_layernorm\.sqrt: active\.sqrt with float16 -> float16 "
                                               r"is not supported on chip bm1686"):
        isa.lower(isa.from_onnx(model), BM1686)  # not deployed: the table's refusal
    g = isa.from_onnx(model, quantize="F16", chip=BM1686)
    program = isa.lower(g, BM1686)
    by_op = {}
    for instr in (i for stream in program.streams.values() for i in stream):
        by_op.setdefault(instr.op, []).append(instr)
    wide = {n.name: n for n in g.nodes if n.op != "cast" and g.tensors[n.outputs[0]].dtype == "float32"}
    assert sorted(wide) == ["layers.0.input_layernorm.sqrt", "layers.0.mlp.act/active", "layers.0.post_attention_layernorm.sqrt"]
    # RMSNorm's square roots, SiLU's sigmoid; the softmax is the fused attention's, in float16 (its steps in float32 within)
    assert [g.tensors[n.outputs[0]].dtype for n in g.nodes if n.op == "attention"] == ["float16"]
    for name, node in wide.items():
        before = g.producer[node.inputs[0]]
        after = [n for n in g.nodes if node.outputs[0] in n.inputs]
        assert before.op == "cast" and g.tensors[before.inputs[0]].dtype == "float16"
        assert after and all(n.op == "cast" and g.tensors[n.outputs[0]].dtype == "float16" for n in after)
        assert "float32" in writes(by_op[before.name])  # the casts are instructions of the program
        assert all("float16" in writes(by_op[n.name]) for n in after)
        vector = [i for i in by_op[name] if isinstance(i, Vector)]
        assert vector and all(i.cdt == "float32" for i in vector), name  # the op itself computes in float32
    assert "3 in float32 (the chip's table has no float16 for them: active.sqrt x2, active.sigmoid x1)" in g.notes[-1]


def test_a_cast_the_deployment_makes_an_identity_is_dropped():
    """The importer computes SiLU in float32 between casts; deployed in float16 on a chip whose table
    has every op in float16, those casts would convert float16 into itself: none is left."""
    g = isa.from_onnx(llm.decoder_layer(TINY, seq=1, past=4, dtype="float16"))
    assert sum(n.op == "cast" for n in g.nodes) == 2
    deployed = isa.quantize(g, "F16", "ascend910b")
    assert not any(n.op == "cast" for n in deployed.nodes)
    assert not any(t.dtype == "float32" for t in deployed.tensors.values())


def test_an_op_the_chip_cannot_cast_to_float32_is_refused_naming_the_op_dtype_and_chip():
    """bm1684's table has no float16 rows (nor a float16 cast): a float16 graph deployed in F16 stays
    float16, and the lowering names its first op, the dtype and the chip."""
    bm1684 = chips.load("bm1684")
    g = isa.Graph("f16")
    with g:
        x = g.input("x", (4, 64), "float16")
        g.output(isa.ops.active(isa.ops.mul(x, x), "sqrt"), "y")
    deployed = isa.quantize(g, "F16", bm1684)
    assert not any(n.op == "cast" for n in deployed.nodes)
    with pytest.raises(UnsupportedError, match=r"op .*: mul with float16 x float16 -> float16 is not supported on chip bm1684"):
        isa.lower(deployed, bm1684)


# ---- bench/llm_published.py ----------------------------------------------------------------------

def load_bench():
    spec = importlib.util.spec_from_file_location("bench_llm", ROOT / "bench" / "llm.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


BENCH = load_bench()
PUBLISHED = BENCH.llm_published


class Step:
    def __init__(self, seconds):
        self.seconds = seconds


@pytest.mark.parametrize("refused", [None, "the lookup's int64 compare"], ids=["with-embedding", "embedding-refused"])
def test_a_setting_is_one_prefill_layer_over_the_length_and_one_decode_step_over_the_cache_times_the_layers(refused):
    calls = []

    def simulate(build, chip, top, quantize, keep=None):
        model = build()
        x = next(v for v in model.graph.input if v.name == "x")
        seq = x.type.tensor_type.shape.dim[1].dim_value
        past = sum(v.name.startswith("past.") for v in model.graph.input) and next(
            v for v in model.graph.input if v.name == "past.0.value").type.tensor_type.shape.dim[2].dim_value
        calls.append((chip.name, quantize, seq, past))
        return Step(1.0 if seq > 1 else 0.01)

    def simulate_ends(cfg, chip, batch, seq, dtype, seed):
        calls.append((chip.name, dtype, seq))
        return Step(0.5 if seq > 1 else 0.002), refused

    cfg = llm.config("qwen2-7b", layers=3, hidden=128, heads=2, kv_heads=1, mlp=256, vocab=40)
    got = PUBLISHED.simulate_setting(PUBLISHED.Setting(cfg, "bm1686", "w4a16", 16), simulate, simulate_ends)
    # the blocks in W4A16, the head in float16 (LLM-TPU's lm_head is half precision)
    ends = [("bm1686", "float16", 16)] + ([] if refused else [("bm1686", "float16", 1)])
    assert calls == [("bm1686", "w4a16", 16, 0), ("bm1686", "w4a16", 1, 15), *ends]
    assert got.ttft == pytest.approx(3 * 1.0 + 0.5)
    # without the embedding the head's graph does not depend on the sequence: the decode step takes the one simulated
    assert got.tpot == pytest.approx(3 * 0.01 + (0.5 if refused else 0.002))


def test_the_published_rows_are_validation_with_their_errors_or_why_not(capsys, monkeypatch):
    settings = []

    def fake(setting, simulate, simulate_ends, seed=0):
        settings.append(setting)
        return PUBLISHED.Simulated(ttft=2.0, tpot=0.1, cpu=1.0)

    monkeypatch.setattr(PUBLISHED, "simulate_setting", fake)
    assert BENCH.main(["--published"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("every figure below is validation: none sets a parameter")
    rows = lines[1:-1]
    assert len(rows) == len(PUBLISHED.ROWS) and all(" @ " in line for line in rows)
    assert len(settings) == 3 and {s.seq for s in settings} == {8192, 2048, 512}  # one simulation a setting
    ttft = next(line for line in rows if "Qwen-7B" in line and "TTFT" in line)
    assert "simulated 2 " in ttft and "error -32%" in ttft  # 2.0 s against 2.939 s
    rate = next(line for line in rows if "Qwen-7B" in line and "tokens/s" in line)
    assert "simulated 10 " in rate and "error -6%" in rate  # 10 tokens/s against 10.6
    floor = float(rate.split("DDR floor ")[1].split(" tokens/s")[0])
    assert 10.6 < floor < 20  # 4-bit weights of DeepSeek-R1-Distill-Qwen-7B's shapes over bm1686's 64 GB/s
    out = [line for line in rows if "not simulated: " in line]
    assert len(out) == 4 and all("Qwen-7B" not in line for line in out)
    assert any("tensor parallelism" in line for line in out) and any("4 chips in a pipeline" in line for line in out)
    assert lines[-1].startswith("6 figures simulated (3 settings")
