"""Decoder-only language models as ONNX graphs with seeded random weights, built with onnx.helper
(examples/onnx_models.py's Net): no download, no torch. The shapes are the models' public
configurations (Hugging Face config.json; each CONFIGS entry cites its file):

- `llama2-7b`: meta-llama/Llama-2-7b-hf, 32 layers, hidden 4096, 32 heads, 32 KV heads, MLP 11008, vocabulary 32000.
- `qwen2-7b`: Qwen/Qwen2-7B, 28 layers, hidden 3584, 28 heads, 4 KV heads, MLP 18944, vocabulary 152064, biases on Q/K/V.
- `tinyllama-1.1b`: TinyLlama/TinyLlama-1.1B-Chat-v1.0, 22 layers, hidden 2048, 32 heads, 4 KV heads, MLP 5632, vocabulary 32000.

A decoder layer is Llama's as Hugging Face's LlamaDecoderLayer computes it: RMSNorm (x / sqrt(mean(x^2)
+ eps) x weight, exported as Pow, ReduceMean, Add, Sqrt, Reciprocal, Mul), Q/K/V projections, rotary
embedding (q cos + rotate_half(q) sin, the cos/sin tables of the tokens' positions as constants),
grouped-query attention, the output projection, a residual add, RMSNorm, the SwiGLU MLP
(down(silu(gate(h)) x up(h))) and a residual add.

One graph serves prefill and decode: `seq` new tokens attend to `past` cached tokens and to each other
(causally). Attention is written the way serving engines lay it out, so that no cache is copied or
repeated in DDR:
- the key and value caches are (batch, KV heads, past, head size), a token's key and value rows
  appended as rows (Hugging Face's layout); the score product reads the keys transposed
  (q @ k.transpose(-1, -2)), which the fused attention folds into its product;
- grouped-query attention folds each KV head's query group into the product's rows ((batch, KV heads,
  group x seq, head size)) instead of repeating the cache per query head;
- the scores over the cache and over the new tokens are two products, concatenated (small), softmaxed
  and split again: the cache is never concatenated with the new keys.
Inputs: "x" (batch, seq, hidden) for a layer, "input_ids" (batch, seq) int64 for a model; with
past > 0, "past.{i}.key" and "past.{i}.value" per layer. Outputs: "y" (a layer) or "logits" (batch, 1,
vocabulary: the last position's, as a generation step needs), and "present.{i}.key" and "present.{i}.value"
(batch, KV heads, seq, head size): the new tokens' cache rows.

    python examples/llm.py --model tinyllama-1.1b --what layer --seq 128 --out out/llm
    python examples/llm.py --model tinyllama-1.1b --what layer --seq 1 --past 512 --dtype float16
    python examples/llm.py --model tinyllama-1.1b --what model --layers 2 --seq 16
"""

import argparse
import dataclasses
import math
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from onnx_models import Net

DTYPES = ("float32", "float16", "bfloat16")  # every op of these models takes bfloat16 at opset 17


@dataclasses.dataclass(frozen=True)
class Config:
    """A decoder-only model's shape: Hugging Face config.json's fields under their meaning here."""

    name: str
    layers: int        # num_hidden_layers
    hidden: int        # hidden_size
    heads: int         # num_attention_heads
    kv_heads: int      # num_key_value_heads
    mlp: int           # intermediate_size
    vocab: int         # vocab_size
    eps: float         # rms_norm_eps
    rope_theta: float  # rope_theta
    qkv_bias: bool     # biases on the Q, K and V projections (Qwen2)
    source: str        # the config.json it is read from

    @property
    def head_size(self):
        return self.hidden // self.heads

    @property
    def group(self):
        """Query heads per KV head."""
        return self.heads // self.kv_heads

    def layer_weights(self):
        """Weights of one decoder layer (elements)."""
        kv = self.kv_heads * self.head_size
        bias = (self.hidden + 2 * kv) if self.qkv_bias else 0
        return self.hidden * (self.hidden + 2 * kv) + bias + self.hidden * self.hidden + 3 * self.hidden * self.mlp + 2 * self.hidden

    def weights(self):
        """Weights of the whole model (elements): layers, embedding, final norm and (untied) head."""
        return self.layers * self.layer_weights() + 2 * self.vocab * self.hidden + self.hidden

    def kv_elements(self, tokens, batch=1):
        """Elements of every layer's key and value caches for `tokens` positions."""
        return 2 * self.layers * batch * tokens * self.kv_heads * self.head_size


HF = "https://huggingface.co/{}/blob/main/config.json"
CONFIGS = {c.name: c for c in (
    Config("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 1e-5, 10000.0, False, HF.format("meta-llama/Llama-2-7b-hf")),
    Config("qwen2-7b", 28, 3584, 28, 4, 18944, 152064, 1e-6, 1000000.0, True, HF.format("Qwen/Qwen2-7B")),
    Config("tinyllama-1.1b", 22, 2048, 32, 4, 5632, 32000, 1e-5, 10000.0, False, HF.format("TinyLlama/TinyLlama-1.1B-Chat-v1.0")),
)}


def config(name, **changes):
    """CONFIGS[name], with fields changed (a smaller model of the same kind for tests)."""
    if name not in CONFIGS:
        raise ValueError(f"model {name!r}: expected one of {', '.join(CONFIGS)}")
    return dataclasses.replace(CONFIGS[name], **changes)


def decoder_layer(cfg, batch=1, seq=1, past=0, dtype="float16", seed=0, block=None):
    """One decoder layer: "x" (batch, seq, hidden) -> "y", "present.0.key", "present.0.value" (with
    `block`, its caches in blocks of that many positions: see `_layer`)."""
    net = _net(cfg, "decoder_layer", dtype, seed)
    x = net.input("x", (batch, seq, cfg.hidden))
    y, presents = _layer(net, cfg, x, 0, batch, seq, past, block)
    net.output(y, "y")
    for value, name in presents:
        net.output(value, name)
    return net.model(f"{cfg.name} decoder layer, {seq} new tokens over {past} cached, random weights (seed {seed})")


def model(cfg, batch=1, seq=1, past=0, dtype="float16", seed=0, block=None, weight_inputs=False, embedding=True):
    """The whole model: "input_ids" (batch, seq) -> the last position's "logits" (batch, 1, vocab)
    and each layer's "present.{i}.key" / "present.{i}.value" (per block with `block`). With
    weight_inputs, the embedding's, projections' and head's weights are graph inputs of the same
    names, not initializers: a model for timing mode (which reads no values) that the host need
    not draw or hold, as a 7B model's 13.5 GB of float16 weights would not fit this machine's
    memory twice. Without `embedding`, the first layer reads "embedded" (batch, seq, hidden), the
    lookup's rows, as a graph input (for a chip that refuses the lookup, as `ends`)."""
    net = _net(cfg, "decoder", dtype, seed)
    net.weight_inputs = weight_inputs
    x = _embedding(net, cfg, batch, seq) if embedding else net.input("embedded", (batch, seq, cfg.hidden))
    presents = []
    for i in range(cfg.layers):
        x, rows = _layer(net, cfg, x, i, batch, seq, past, block)
        presents += rows
    if seq > 1:
        x = net.slice(x, [seq - 1], [seq], [1], "last")
    net.output(_head(net, cfg, x), "logits")
    for value, name in presents:
        net.output(value, name)
    return net.model(f"{cfg.name}, {cfg.layers} layers, {seq} new tokens over {past} cached, random weights (seed {seed})")


def ends(cfg, batch=1, seq=1, dtype="float16", seed=0, embedding=True):
    """What a model adds around its layers, as one graph: the embedding lookup of "input_ids"
    (batch, seq) -> "embedded" (batch, seq, hidden) (unless not `embedding`), and the final norm
    and head of the last position's "h" (batch, 1, hidden) -> "logits" (batch, 1, vocab)."""
    net = _net(cfg, "ends", dtype, seed)
    if embedding:
        net.output(_embedding(net, cfg, batch, seq), "embedded")
    net.output(_head(net, cfg, net.input("h", (batch, 1, cfg.hidden))), "logits")
    return net.model(f"{cfg.name} embedding, final norm and head, random weights (seed {seed})")


TABLE = "block_table"  # the graph input a paged step reads its block table from


def kv_caches(cfg, batch, capacity, dtype, past=0, seq=1, layers=1, block=None, pool=None):
    """The key and value caches of `layers` layers as graph state (isa/ops/cache.py), for a step of
    `seq` new tokens after `past` cached, in this builder's layout: "cache.{i}.key" and "cache.{i}.value"
    (batch, KV heads, capacity, head size), read as "past.{i}.*" and appended to from
    "present.{i}.*". With `block`, paged: each layer's caches are a pool of `pool` blocks (default:
    batch x capacity / block), (pool, KV heads, block, head size), and the graph input "block_table"
    (batch, capacity / block) int32 says which pool block holds each sequence's block j, as a
    serving engine's block manager assigns them; the step reads and appends the blocks through
    the table at run time, so one program serves any table."""
    from isa.ops.cache import Cache

    d, kv = cfg.head_size, cfg.kv_heads
    if block is None:
        return [Cache(f"cache.{i}.{kind}", (batch, kv, capacity, d), dtype, 2, past, f"past.{i}.{kind}" if past else None,
                      f"present.{i}.{kind}")
                for i in range(layers) for kind in ("key", "value")]
    read, written = blocks(past, seq, block)
    shape = (pool or batch * -(-capacity // block), kv, block, d)
    return [c for i in range(layers) for kind in ("key", "value") for c in
            [Cache(f"cache.{i}.{kind}", shape, dtype, 2, n, f"past.{i}.{kind}.{j}", None, TABLE, j) for j, n in read] +
            [Cache(f"cache.{i}.{kind}", shape, dtype, 2, first, None, f"present.{i}.{kind}.{j}", TABLE, j) for j, first, _ in written]]


def with_kv_cache(graph, cfg, batch, capacity, past=0, seq=1, layers=1, block=None, pool=None):
    """An imported layer or model of this builder (isa.from_onnx of decoder_layer or model, built with
    the same `block`) as a step that keeps its KV cache in DDR between runs: its caches read from graph
    state, its new key and value rows appended at position `past` (run it in a sim.Session); with
    `block`, through the block table the step takes as input "block_table" (kv_caches)."""
    from isa.errors import GraphError
    from isa.ops.cache import keep_in_state

    rows = "present.0.key" if block is None else f"present.0.key.{past // block}"
    if rows not in graph.outputs:
        raise GraphError(f"graph {graph.name}: no output {rows!r} (outputs: {', '.join(graph.outputs)}); a step over a cache "
                         f"{'in blocks of ' + str(block) if block else 'not in blocks'} is built with block={block}")
    dtype = graph.tensors[graph.outputs[rows]].dtype
    if block is not None:
        graph.input(TABLE, (batch, -(-capacity // block)), "int32")
    return _appends_in_their_layers(keep_in_state(graph, kv_caches(cfg, batch, capacity, dtype, past, seq, layers, block, pool)))


def _appends_in_their_layers(graph):
    """Each cache append moved from the graph's end to just after the last op of its layer that reads
    the cache or makes the rows, as a serving engine writes a layer's new key and value rows within
    that layer's attention (vLLM's and MindIE's ReshapeAndCache): its rows are then passed between
    the layer's own ops, so every layer of a model is lowered alike (isa/lower/replay.py), not its
    rows kept until the model's end. After the cache's reads, so none of them waits for the write."""
    nodes = graph.nodes
    for append in [n for n in nodes if n.op == "cache_append"]:
        state, rows = append.inputs[:2]
        reads = {n.outputs[0] for n in nodes if n.op == "cache_read" and n.inputs[0] == state}
        nodes.remove(append)
        last = max(k for k, n in enumerate(nodes) if rows in n.outputs or reads & set(n.inputs))
        nodes.insert(last + 1, append)
    return graph


def _net(cfg, what, dtype, seed):
    if cfg.hidden % cfg.heads or cfg.heads % cfg.kv_heads or cfg.head_size % 2:
        raise ValueError(f"{cfg.name}: hidden {cfg.hidden}, heads {cfg.heads}, KV heads {cfg.kv_heads}: the head size must be even "
                         f"and the heads a multiple of the KV heads")
    return Net(f"{cfg.name}_{what}", dtype, seed, dtypes=DTYPES)


def _embedding(net, cfg, batch, seq):
    """The rows of the embedding table for "input_ids" (batch, seq), an int64 input."""
    net.inputs.append(helper.make_tensor_value_info("input_ids", TensorProto.INT64, (batch, seq)))
    net.shapes["input_ids"] = (batch, seq)
    embed = _weight(net, "embed_tokens.weight", (cfg.vocab, cfg.hidden))
    return net.node("Gather", [embed, "input_ids"], "embed", (batch, seq, cfg.hidden), axis=0)


def _head(net, cfg, x):
    """The final norm and the (untied) head of x (batch, 1, hidden): logits (batch, 1, vocab)."""
    h = _rms_norm(net, cfg, x, "norm")
    return net.node("MatMul", [h, _weight(net, "lm_head.weight", (cfg.hidden, cfg.vocab))], "lm_head", (net.shapes[x][0], 1, cfg.vocab))


def _weight(net, name, shape, std=0.02):
    """A projection's weight, N(0, std), drawn in float32 a block of rows at a time into the net's dtype
    (the values of one whole draw: a 14B model's head drawn whole in float32 would hold 3 GB twice);
    or a graph input of its name and shape (model()'s weight_inputs)."""
    if getattr(net, "weight_inputs", False):
        return net.input(name, shape)
    weight = np.empty(shape, net.dtype)
    rows = weight.reshape(-1, shape[-1])
    step = max(1, (1 << 24) // shape[-1])  # 64 MB of float32 a block
    for at in range(0, len(rows), step):
        block = net.rng.standard_normal(rows[at:at + step].shape, np.float32)
        block *= np.float32(std)
        rows[at:at + step] = block
    return net.const(name, weight)


def _rms_norm(net, cfg, x, name):
    """x / sqrt(mean(x^2) + eps) x weight, as torch exports LlamaRMSNorm (Pow, ReduceMean, Add, Sqrt, Reciprocal)."""
    sq = net.binary("Pow", x, net.scalar(f"{name}.two", 2.0), f"{name}.pow")
    mean = net.reduce("ReduceMean", sq, [len(net.shapes[x]) - 1], f"{name}.mean")
    inv = net.unary("Reciprocal", net.unary("Sqrt", net.binary("Add", mean, net.scalar(f"{name}.eps", cfg.eps), f"{name}.add"),
                                            f"{name}.sqrt"), f"{name}.rsqrt")
    gamma = net.const(f"{name}.weight", 1 + net.rng.standard_normal(cfg.hidden, np.float32) * np.float32(0.02))
    return net.binary("Mul", net.binary("Mul", x, inv, f"{name}.scaled"), gamma, name)


def _rotary(net, cfg, x, past, name):
    """x cos + rotate_half(x) sin over the last axis (head size) for positions past .. past + seq - 1."""
    d, seq = cfg.head_size, net.shapes[x][-2]
    inv_freq = 1.0 / cfg.rope_theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    angles = np.outer(np.arange(past, past + seq, dtype=np.float64), inv_freq)
    angles = np.concatenate([angles, angles], axis=1)
    half = d // 2
    x1 = net.slice(x, [0], [half], [-1], f"{name}.x1")
    x2 = net.slice(x, [half], [d], [-1], f"{name}.x2")
    rotated = net.concat([net.unary("Neg", x2, f"{name}.neg"), x1], len(net.shapes[x]) - 1, f"{name}.rotate_half")
    cos = net.binary("Mul", x, net.const(f"{name}.cos", np.cos(angles)), f"{name}.xcos")
    sin = net.binary("Mul", rotated, net.const(f"{name}.sin", np.sin(angles)), f"{name}.xsin")
    return net.binary("Add", cos, sin, name)


def _projection(net, x, out, name, bias=False):
    *lead, k = net.shapes[x]
    y = net.node("MatMul", [x, _weight(net, f"{name}.weight", (k, out))], f"{name}.matmul" if bias else name, (*lead, out))
    return net.binary("Add", y, net.const(f"{name}.bias", net.normal(out, 0.02)), name) if bias else y


def blocks(past, seq, block):
    """(the cached positions' blocks as (index, length), the new rows' blocks as (index, first
    position in it, count)) of a cache in blocks of `block` positions (None: one block)."""
    if block is None:
        return ([(None, past)] if past else []), [(None, past, seq)]
    read = [(j, min(block, past - j * block)) for j in range(-(-past // block))]
    written = [(j, max(past, j * block) - j * block, min(past + seq, (j + 1) * block) - max(past, j * block))
               for j in range(past // block, (past + seq - 1) // block + 1)]
    return read, written


def _layer(net, cfg, x, i, batch, seq, past, block=None):
    """One decoder layer's nodes under "layers.{i}.": the layer's output and its new key and value
    rows as (tensor, output name). With `block`, the caches come in blocks of that many positions,
    as a paged cache keeps them (vLLM's PagedAttention, MindIE): the cached positions as one input
    per block ("past.{i}.key.{j}", the last block's filled part), scored block by block, and the new
    rows as one output per block they fall in ("present.{i}.key.{j}")."""
    p = f"layers.{i}"
    d, kv, g = cfg.head_size, cfg.kv_heads, cfg.group
    h = _rms_norm(net, cfg, x, f"{p}.input_layernorm")

    def heads(value, n, name):  # (batch, seq, n * d) -> (batch, n, seq, d)
        return net.transpose(net.reshape(value, (batch, seq, n, d), f"{name}.view"), (0, 2, 1, 3), f"{name}.heads")

    q = heads(_projection(net, h, cfg.heads * d, f"{p}.self_attn.q_proj", cfg.qkv_bias), cfg.heads, f"{p}.q")
    k = heads(_projection(net, h, kv * d, f"{p}.self_attn.k_proj", cfg.qkv_bias), kv, f"{p}.k")
    v = heads(_projection(net, h, kv * d, f"{p}.self_attn.v_proj", cfg.qkv_bias), kv, f"{p}.v")
    q = net.reshape(_rotary(net, cfg, q, past, f"{p}.q_rot"), (batch, kv, g * seq, d), f"{p}.q_groups")
    key = _rotary(net, cfg, k, past, f"{p}.k_rot")  # (batch, kv, seq, d)
    scale = net.scalar(f"{p}.scale", 1 / math.sqrt(d))
    rows = (batch, kv, g * seq)

    def scores_of(keys, n, name):  # q @ keys^T, scaled: (batch, kv, g * seq, n)
        keys_t = net.transpose(keys, (0, 1, 3, 2), f"{p}.key_t_{name}")
        return net.binary("Mul", net.node("MatMul", [q, keys_t], f"{p}.scores_{name}", (*rows, n)), scale, f"{p}.scaled_{name}")

    scores = scores_of(key, seq, "new")
    if seq > 1:  # causal: a new token sees the cache and the new tokens up to itself (each query group alike)
        causal = np.triu(np.full((seq, seq), ml_dtypes.finfo(net.dtype).min, net.dtype), 1)  # in the net's dtype: 8192 tokens' are 0.8 GB
        scores = net.binary("Add", scores, net.const(f"{p}.causal_mask", np.tile(causal, (g, 1))), f"{p}.masked")
    read, written = blocks(past, seq, block)
    if past:
        parts, at = [], 0
        for j, n in read:
            tag = "" if j is None else f".{j}"
            key_cache = net.input(f"past.{i}.key{tag}", (batch, kv, n, d))
            value_cache = net.input(f"past.{i}.value{tag}", (batch, kv, n, d))
            parts.append((scores_of(key_cache, n, f"cache{tag}"), value_cache, at, n, tag))
            at += n
        probs = net.softmax(net.concat([s for s, *_ in parts] + [scores], 3, f"{p}.scores"), 3, f"{p}.probs")
        p_new = net.slice(probs, [past], [past + seq], [3], f"{p}.probs_new")
        ctx = net.node("MatMul", [p_new, v], f"{p}.ctx_new", (*rows, d))
        for _, value_cache, at, n, tag in parts:
            p_cache = net.slice(probs, [at], [at + n], [3], f"{p}.probs_cache{tag}")
            ctx = net.binary("Add", net.node("MatMul", [p_cache, value_cache], f"{p}.ctx_cache{tag}", (*rows, d)), ctx,
                             f"{p}.ctx{tag}" if tag else f"{p}.ctx")
    else:
        ctx = net.node("MatMul", [net.softmax(scores, 3, f"{p}.probs"), v], f"{p}.ctx", (*rows, d))
    ctx = net.reshape(net.transpose(net.reshape(ctx, (batch, cfg.heads, seq, d), f"{p}.ctx_heads"), (0, 2, 1, 3), f"{p}.ctx_t"),
                      (batch, seq, cfg.hidden), f"{p}.ctx_merged")
    x = net.binary("Add", x, _projection(net, ctx, cfg.hidden, f"{p}.self_attn.o_proj"), f"{p}.residual1")
    h = _rms_norm(net, cfg, x, f"{p}.post_attention_layernorm")
    gate = _projection(net, h, cfg.mlp, f"{p}.mlp.gate_proj")
    up = _projection(net, h, cfg.mlp, f"{p}.mlp.up_proj")
    down = _projection(net, net.binary("Mul", net.silu(gate, f"{p}.mlp.act"), up, f"{p}.mlp.swiglu"), cfg.hidden, f"{p}.mlp.down_proj")
    presents = []
    for j, first, n in written:  # the new rows, whole or cut at the blocks' edges
        tag, lo = ("", 0) if j is None else (f".{j}", j * block + first - past)
        whole = n == seq
        presents += [(key if whole else net.slice(key, [lo], [lo + n], [2], f"{p}.key{tag}"), f"present.{i}.key{tag}"),
                     (v if whole else net.slice(v, [lo], [lo + n], [2], f"{p}.value{tag}"), f"present.{i}.value{tag}")]
    return net.binary("Add", x, down, f"{p}.residual2"), presents


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(CONFIGS), default="tinyllama-1.1b")
    parser.add_argument("--what", choices=("layer", "model"), default="layer", help="one decoder layer or the whole model")
    parser.add_argument("--layers", type=int, help="a model of this many layers (default: the configuration's)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=128, help="new tokens (prefill: the prompt; decode: 1)")
    parser.add_argument("--past", type=int, default=0, help="cached tokens (0: prefill)")
    parser.add_argument("--dtype", choices=DTYPES, default="float16")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="out/llm", help="folder for the .onnx file (default: out/llm)")
    args = parser.parse_args(argv)
    if min(args.batch, args.seq) < 1 or args.past < 0 or (args.layers is not None and args.layers < 1):
        parser.error("--batch, --seq and --layers are at least 1; --past at least 0")
    cfg = config(args.model, **({"layers": args.layers} if args.layers else {}))
    build = decoder_layer if args.what == "layer" else model
    onnx_model = build(cfg, args.batch, args.seq, args.past, args.dtype, args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{cfg.name}_{args.what}_s{args.seq}_p{args.past}_{args.dtype}.onnx"
    large = sum(len(t.raw_data) for t in onnx_model.graph.initializer) > 2**30  # beyond protobuf's 2 GB with room to spare
    onnx.save(onnx_model, path, save_as_external_data=large, location=path.name + ".data" if large else None)
    print(f"wrote {path}: {len(onnx_model.graph.node)} nodes, {cfg.name} from {cfg.source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
