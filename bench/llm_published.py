"""Published LLM serving figures for the shipped chips, and what bench/llm.py can say about each
(`python bench/llm.py --published`). None of them sets a parameter of a chip: every row is
validation. A row is simulated when its model is one of examples/llm.py's, its chip shipped and its
dtype one bench/llm.py simulates; otherwise the row says why not and, for a decode rate, gives the
DDR floor (the weights' bytes over the DDR bandwidth: no step can be faster).

Sources (each a repository, path and commit):
- LLM-TPU: sophgo/LLM-TPU template/README.md @
  595ebd04c07f0f81d955a6e23a350f1eec79ecb1 (section 6, "LLM性能": SE7-32, BM1684X, SDK V24.04.01); models/Qwen3_5/
  cpp_demo_pp/README.md and models/Falcon-Perception/README.md @ d581e7bfa2411b9c51c775bbb4a2de4046bac9a3.
- torchair: Ascend/torchair npu_tuned_model/llm/models/llama/README.md @ 8369446bac7e99c382bb3567f7ac8dc43a19f3b3 ("性能数据",
  Atlas 800I A2, 8 cards; graph mode, batch 1: 175 ms prefill of 1024 tokens, 35.9 ms a decode step).
"""

from dataclasses import dataclass

LLM_TPU = "sophgo/LLM-TPU template/README.md @ 595ebd0"
LLM_TPU_HEAD = "sophgo/LLM-TPU {} @ d581e7b"
TORCHAIR = "Ascend/torchair npu_tuned_model/llm/models/llama/README.md @ 8369446"


@dataclass(frozen=True)
class Published:
    source: str
    chip: str          # npusim's name of the chip
    model: str         # as the source names it
    setting: str       # quantization, sequence, batch, cards
    metric: str        # "TTFT s" or "tokens/s"
    value: float
    config: str = ""   # examples/llm.py's configuration of the same shapes, if any
    weight_bits: int = 16
    why_not: str = ""  # why bench/llm.py cannot simulate it


TP8 = "70B split over 8 cards (Ascend 910B4, 800I A2) by tensor parallelism: one chip is modelled"
W4 = "W4A16 (int4 weights) is not modelled (issue 22 item 4); BM1684X's float16 layer is refused (sqrt, sigmoid: float32 only)"
ROWS = (
    Published(LLM_TPU, "bm1686", "DeepSeek-R1-Distill-Qwen-1.5B", "INT4, seq 8192, batch 1", "TTFT s", 5.431, why_not=W4),
    Published(LLM_TPU, "bm1686", "DeepSeek-R1-Distill-Qwen-1.5B", "INT4, seq 8192, batch 1", "tokens/s", 28.878, why_not=W4),
    Published(LLM_TPU, "bm1686", "DeepSeek-R1-Distill-Qwen-7B", "INT4, seq 2048, batch 1", "TTFT s", 2.939, "qwen2-7b", 4, W4),
    Published(LLM_TPU, "bm1686", "DeepSeek-R1-Distill-Qwen-7B", "INT4, seq 2048, batch 1", "tokens/s", 10.600, "qwen2-7b", 4, W4),
    Published(LLM_TPU, "bm1686", "DeepSeek-R1-Distill-Qwen-14B", "INT4, seq 512, batch 1", "TTFT s", 1.400, why_not=W4),
    Published(LLM_TPU, "bm1686", "DeepSeek-R1-Distill-Qwen-14B", "INT4, seq 512, batch 1", "tokens/s", 5.564, why_not=W4),
    Published(LLM_TPU_HEAD.format("models/Qwen3_5/cpp_demo_pp/README.md"), "bm1686", "Qwen3.5-9B", "w4bf16, seq 2048, 4 cards",
              "tokens/s", 7.7, why_not="4 chips in a pipeline; a hybrid linear-attention model"),
    Published(LLM_TPU_HEAD.format("models/Falcon-Perception/README.md"), "bm1686", "Falcon-Perception", "BF16, seq 512", "TTFT s",
              0.356, why_not="a vision-language model, not one of examples/llm.py's"),
    Published(TORCHAIR, "ascend910b", "Llama2-70B", "float16, 1024 in, batch 1, graph mode", "TTFT s", 0.175,
              why_not=TP8),
    Published(TORCHAIR, "ascend910b", "Llama2-70B", "float16, 1024 in, batch 1, graph mode", "tokens/s", 1 / 0.0359,
              why_not=TP8),
)


def rows(configs, load_chip, weight_bytes):
    """One line per published figure: the figure, and bench/llm.py's simulation of it or why there is
    none, with a decode rate's DDR floor where the model's shapes are examples/llm.py's."""
    lines = []
    for r in ROWS:
        line = f"{r.model} on {r.chip} ({r.setting}): {r.metric} {r.value:g} [{r.source}]"
        if r.why_not:
            line += f"; not simulated: {r.why_not}"
        if r.config and r.metric == "tokens/s":
            chip = load_chip(r.chip)
            nbytes = weight_bytes(configs[r.config], r.weight_bits)
            bandwidth = chip.memories["ddr"].bandwidth * chip.clock_hz
            floor = bandwidth / nbytes
            line += (f"; DDR floor: {nbytes / 1e9:.2f} GB of weights ({r.config} shapes, {r.weight_bits}-bit) over "
                     f"{bandwidth / 1e9:.0f} GB/s = at most {floor:.1f} tokens/s, published {r.value / floor:.0%} of it")
        lines.append(line)
    return lines
