"""Published LLM serving figures for the shipped chips against bench/llm.py's simulation of the same
setting (`python bench/llm.py --published`). None of them sets a parameter of a chip or of the
simulator: every row is validation. A row is simulated when its model's shapes are known (its
Hugging Face config.json), its chip is shipped and its precision is one the simulator deploys;
otherwise the row says why not.

How a Sophgo LLM-TPU figure is simulated: the model is compiled with `model_deploy --quantize
W4F16` (or W4BF16: the same bytes and rates on BM1684X), as isa.from_onnx(quantize="w4a16") does
(isa/deploy/weight_only.py; the ops the chip's table lacks in float16 run in float32 between casts,
isa/deploy/floats.py). LLM-TPU's blocks are compiled for a fixed sequence length (the table's
"模型长度"): the first token runs each block over the whole length, the prompt padded to it
(models/Qwen2/python_demo/chat.cpp @ 0eea0dcaea7fe347651dd7ac341b6f917a6ce3ff, forward_first:
MAX_INPUT_LENGTH), and each next token runs the cached block over the whole cache of that length
under a mask (forward_next: SEQLEN + 1 positions). So the time to first token is one prefill layer
over `seq` tokens times the layer count plus the embedding lookup and the head, and a decode step
one layer over a cache of seq - 1 positions times the layer count plus the lookup of one token and
the head (bench/llm.py's simulate; LLM-TPU runs the lookup as networks of its own, chat.cpp's
net_embed and net_embed_cache). The head is deployed in float16 whatever the blocks' precision,
as LLM-TPU compiles its lm_head with the half-precision `--quantize` (template/compile/model_export.py
@ 0c2acd24b259ad5422a48d43d9c70f1704c9b2e2, compile_lm_head). Tokens per second is 1 / the decode step.

Sources (each a repository, path and commit):
- LLM-TPU: sophgo/LLM-TPU template/README.md @
  595ebd04c07f0f81d955a6e23a350f1eec79ecb1 (section 6, "LLM性能": SE7-32, BM1684X, SDK V24.04.01); models/Qwen3_5/
  cpp_demo_pp/README.md and models/Falcon-Perception/README.md @ d581e7bfa2411b9c51c775bbb4a2de4046bac9a3.
- torchair: Ascend/torchair npu_tuned_model/llm/models/llama/README.md @ 8369446bac7e99c382bb3567f7ac8dc43a19f3b3 ("性能数据",
  Atlas 800I A2, 8 cards; graph mode, batch 1: 175 ms prefill of 1024 tokens, 35.9 ms a decode step).
- The DeepSeek-R1-Distill-Qwen shapes: each model's config.json on Hugging Face (the URL in MODELS); the Qwen2
  architecture (Q/K/V biases, untied head), as examples/llm.py's qwen2-7b.
"""

import dataclasses
import resource
import time
from dataclasses import dataclass

import llm  # examples/llm.py (bench/llm.py puts examples/ first on the path)

LLM_TPU = "sophgo/LLM-TPU template/README.md @ 595ebd0"
LLM_TPU_HEAD = "sophgo/LLM-TPU {} @ d581e7b"
TORCHAIR = "Ascend/torchair npu_tuned_model/llm/models/llama/README.md @ 8369446"
HF = "https://huggingface.co/deepseek-ai/{}/blob/main/config.json"


def _distill(name, layers, hidden, heads, kv_heads, mlp, vocab, eps, theta):
    return dataclasses.replace(llm.CONFIGS["qwen2-7b"], name=name, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                               mlp=mlp, vocab=vocab, eps=eps, rope_theta=theta, source=HF.format(name))


MODELS = {m.name: m for m in (
    _distill("DeepSeek-R1-Distill-Qwen-1.5B", 28, 1536, 12, 2, 8960, 151936, 1e-6, 10000.0),
    _distill("DeepSeek-R1-Distill-Qwen-7B", 28, 3584, 28, 4, 18944, 152064, 1e-6, 10000.0),
    _distill("DeepSeek-R1-Distill-Qwen-14B", 48, 5120, 40, 8, 13824, 152064, 1e-5, 1000000.0),
)}


@dataclass(frozen=True)
class Setting:
    """What one simulation answers: a model's shapes on a chip, deployed in a precision, at a fixed
    sequence length (LLM-TPU's compiled length: the prefill's tokens and the decode step's cache)."""

    model: llm.Config
    chip: str
    dtype: str  # a bench/llm.py --dtype
    seq: int


@dataclass(frozen=True)
class Simulated:
    ttft: float  # seconds
    tpot: float  # seconds a decode step
    cpu: float  # CPU seconds the simulation took


@dataclass(frozen=True)
class Published:
    source: str
    chip: str          # npusim's name of the chip
    model: str         # as the source names it
    setting: str       # quantization, sequence, batch, cards
    metric: str        # "TTFT s" or "tokens/s"
    value: float
    simulate: Setting | None = None
    why_not: str = ""  # why it is not simulated


def _int4(model, seq, ttft, tokens_per_second):
    """An LLM-TPU W4A16 model's two published figures at its compiled length, both simulated alike."""
    setting, simulate = f"INT4, seq {seq}, batch 1", Setting(MODELS[model], "bm1686", "w4a16", seq)
    return (Published(LLM_TPU, "bm1686", model, setting, "TTFT s", ttft, simulate),
            Published(LLM_TPU, "bm1686", model, setting, "tokens/s", tokens_per_second, simulate))


TP8 = "70B split over 8 cards (Ascend 910B4, 800I A2) by tensor parallelism: one chip is modelled"
ROWS = (
    *_int4("DeepSeek-R1-Distill-Qwen-1.5B", 8192, 5.431, 28.878),
    *_int4("DeepSeek-R1-Distill-Qwen-7B", 2048, 2.939, 10.600),
    *_int4("DeepSeek-R1-Distill-Qwen-14B", 512, 1.400, 5.564),
    Published(LLM_TPU_HEAD.format("models/Qwen3_5/cpp_demo_pp/README.md"), "bm1686", "Qwen3.5-9B", "w4bf16, seq 2048, 4 cards",
              "tokens/s", 7.7, why_not="4 chips in a pipeline (one chip is modelled); a hybrid linear-attention model"),
    Published(LLM_TPU_HEAD.format("models/Falcon-Perception/README.md"), "bm1686", "Falcon-Perception", "BF16, seq 512", "TTFT s",
              0.356, why_not="a vision-language model (no builder)"),
    Published(TORCHAIR, "ascend910b", "Llama2-70B", "float16, 1024 in, batch 1, graph mode", "TTFT s", 0.175, why_not=TP8),
    Published(TORCHAIR, "ascend910b", "Llama2-70B", "float16, 1024 in, batch 1, graph mode", "tokens/s", 1 / 0.0359,
              why_not=TP8),
)


def simulate_setting(s: Setting, simulate, simulate_ends, seed: int = 0) -> Simulated:
    """bench/llm.py's `simulate` and `simulate_ends` on one setting: the prefill layer over s.seq
    tokens and the decode layer over a cache of s.seq - 1, each its KV cache kept as graph state,
    multiplied by the layer count, plus the head (see the module docstring)."""
    import chips

    cfg, chip, start = s.model, chips.load(s.chip), time.process_time()
    act = "float16" if s.dtype in ("w8a16", "w4a16") else s.dtype
    quantize = None if s.dtype == "float32" else s.dtype

    def step(seq, past):
        def keep(graph):
            return llm.with_kv_cache(graph, cfg, 1, s.seq, past, seq)
        return simulate(lambda: llm.decoder_layer(cfg, 1, seq, past, act, seed), chip, 0, quantize, keep=keep)

    prefill, decode = step(s.seq, 0), step(1, s.seq - 1)
    head_prefill, refused = simulate_ends(cfg, chip, 1, s.seq, act, seed)  # LLM-TPU's lm_head is half precision (module docstring)
    # without the embedding lookup the graph is the norm and head of one position, whatever the sequence: the same for a decode step
    head_decode = head_prefill if refused else simulate_ends(cfg, chip, 1, 1, act, seed)[0]
    return Simulated(cfg.layers * prefill.seconds + head_prefill.seconds, cfg.layers * decode.seconds + head_decode.seconds,
                     time.process_time() - start)


def simulated_value(row: Published, sim: Simulated) -> float:
    return sim.ttft if row.metric == "TTFT s" else 1 / sim.tpot


def rows(run, weight_bytes) -> list[str]:
    """One line per published figure: the figure and the simulation of its setting (`run`, a Setting
    -> Simulated, called once a setting) with the error, or why there is none; a decode rate's DDR
    floor (`weight_bytes(config, bits)`: the bytes a decode step reads) where its model's shapes are
    known; then the errors' summary."""
    import chips

    lines, done, errors = ["every figure below is validation: none sets a parameter of a chip or of the simulator"], {}, []
    for r in ROWS:
        line = f"{r.model} on {r.chip} ({r.setting}): {r.metric} {r.value:g} [{r.source}]"
        if r.simulate is None:
            lines.append(f"{line}; not simulated: {r.why_not}")
            continue
        s = r.simulate
        if s not in done:
            done[s] = run(s)
        got = simulated_value(r, done[s])
        errors.append(got / r.value - 1)
        line += (f"; simulated {got:.3g} ({s.model.name} shapes, {s.dtype} on {s.chip}, seq {s.seq}): error {got / r.value - 1:+.0%}")
        if r.metric == "tokens/s":
            chip = chips.load(s.chip)
            nbytes = weight_bytes(s.model, 4 if s.dtype == "w4a16" else 8 if s.dtype == "w8a16" else 16)
            bandwidth = chip.memories["ddr"].bandwidth * chip.clock_hz
            floor = bandwidth / nbytes
            line += (f"; DDR floor {floor:.1f} tokens/s ({nbytes / 1e9:.2f} GB of weights over {bandwidth / 1e9:.0f} GB/s), "
                     f"published {r.value / floor:.0%} of it")
        lines.append(line)
    if errors:
        cpu, peak = sum(sim.cpu for sim in done.values()), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        lines.append(f"{len(errors)} figures simulated ({len(done)} settings, {cpu:.0f} CPU seconds, peak resident memory "
                     f"{peak / 1e9:.1f} GB): mean absolute error "
                     f"{sum(abs(e) for e in errors) / len(errors):.0%}, largest {max(errors, key=abs):+.0%}")
    return lines
