"""Serving a language model on a chip: time to first token, time per output token, tokens per second,
the weights' and KV cache's footprint against the chip's DDR, and engine utilisation.

The model is examples/llm.py's (its public configuration, random weights). ONE decoder layer is
lowered and simulated in timing mode and its time multiplied by the layer count (the layers are
identical in shape, so each would take the same time); the embedding lookup, final norm and head are
simulated once as their own graph. Prefill is one layer over the whole prompt; a decode step is one
layer for one token over a cache of length L, taken at the middle of the generation (or, with
--samples N, averaged over N lengths spread over it: the mean step time, whose product with the
token count is the generation's time). The caches are graph state (isa/ops/cache.py): each layer's
key and value caches of prompt + generate positions stay in DDR between runs, as a serving engine
keeps them; prefill appends the prompt's rows, a decode step reads the cache where it lies and
appends its token's rows; with --kv-block N the caches are paged, a pool of blocks of N positions
per layer, scored block by block, each block read and written through the block table the step
takes as an input at run time (examples/llm.py's with_kv_cache; timing mode reads no values, and
the cycles are the same for any table). The floor of a decode step is its DDR bytes (weights and the cache it
reads) over the DDR bandwidth.

With --whole, a decode step is the whole model as one graph (embedding, every layer, final norm and
head), lowered and simulated in timing mode: one layer's first weight loads then overlap the previous
one's last products, as on the machine. Its tiling searches run once for all the layers (the layers
share their signatures, isa/lower/schedule/searches.py), its first layers are emitted and the rest
replay their instructions at their own addresses (isa/lower/replay.py), and timing mode runs the
first and last layers and lays down the ones between as copies of the last one run, once it has
checked that the layers around the cut repeat exactly (sim/forward.py; else it runs every layer).
Its weights are the program's inputs (examples/llm.py's weight_inputs: timing mode reads no values,
and the cycles are those of the weights as constants), so the host draws and holds none; with w8a16
or w4a16 they are drawn, to be quantized.

    python bench/llm.py --model llama2-7b --chip ascend910b --dtype float16 --batch 1 --prompt 512 --generate 128
    python bench/llm.py --model tinyllama-1.1b --chip bm1686 --dtype float32 --prompt 128 --generate 64 --samples 2
    python bench/llm.py --model tinyllama-1.1b --chip bm1686 --dtype w4a16 --prompt 64 --generate 32
    python bench/llm.py --model tinyllama-1.1b --chip bm1686 --dtype bfloat16 --prompt 128 --generate 64
    python bench/llm.py --model tinyllama-1.1b --chip bm1686 --dtype float32 --prompt 128 --generate 64 --kv-block 64
    python bench/llm.py --model tinyllama-1.1b --chip ascend910b --layers 4 --whole
"""

import argparse
import gc
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import chips
import isa
import isa.onnx  # its PASSES (--unfused-attention): a submodule isa does not import until a model is read
import sim
from isa.errors import OutOfMemoryError, SimError, UnsupportedError

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))  # first: `llm` is examples/llm.py, not this script
import llm
import llm_published

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
# weight-only quantization (isa/deploy/weight_only.py), float16 activations: a weight's bytes are its
# code's and, per group of 128, a float16 scale (and for int4 a float16 zero term)
WEIGHT_ONLY = {"w8a16": 1 + 2 / 128, "w4a16": 0.5 + 4 / 128}


def weight_bytes(dtype):
    return WEIGHT_ONLY.get(dtype) or DTYPE_BYTES[dtype]


def activations(dtype):
    """The dtype the model is built in (and its KV cache kept in)."""
    return "float16" if dtype in WEIGHT_ONLY else dtype


def deployed(dtype):
    """The precision the model is deployed in (isa.from_onnx's quantize): float16, bfloat16 and the
    weight-only schemes are compiled for the chip as TPU-MLIR's model_deploy does, an op its table
    lacks in that dtype run in float32 between casts (isa/deploy/floats.py); float32 as it is."""
    return None if dtype == "float32" else dtype


@dataclass
class Simulated:
    """One graph's simulated time, what its engines did, and what the host spent on it."""

    seconds: float
    cycles: int
    utilization: dict  # engine kind -> mean busy fraction over that kind's engines
    ddr_bytes: int
    cpu: dict  # "build", "lower", "simulate" -> CPU seconds
    slowest: list  # (op name, span in seconds, DDR bytes) of the ops with the longest spans, longest first
    instructions: int  # of the lowered program
    state_bytes: int  # of the program's graph state (its KV cache)


def footprint(cfg, dtype, batch, tokens):
    """(weight bytes, KV cache bytes at `tokens` positions) of the whole model."""
    return cfg.weights() * weight_bytes(dtype), cfg.kv_elements(tokens, batch) * DTYPE_BYTES[activations(dtype)]


def check_fits(cfg, chip, dtype, batch, tokens):
    """An OutOfMemoryError naming both sizes when the weights and the cache exceed the chip's DDR."""
    weights, kv = footprint(cfg, dtype, batch, tokens)
    ddr = chip.memories["ddr"].capacity
    if weights + kv > ddr:
        raise OutOfMemoryError(f"{cfg.name} in {dtype} needs {weights / 1e9:.2f} GB of weights + {kv / 1e9:.2f} GB of KV cache "
                               f"({tokens} tokens x batch {batch}) = {(weights + kv) / 1e9:.2f} GB: more than chip {chip.name}'s "
                               f"DDR of {ddr / 1e9:.2f} GB")
    return weights, kv


def simulate(build, chip, top=3, quantize=None, passes=None, keep=None):
    """Build an ONNX model (a callable), import (deployed in `quantize`: float16 or a weight-only scheme, with
    the named import passes, default all), keep its KV cache as graph state (`keep`, a callable
    changing the imported graph: examples/llm.py's with_kv_cache), lower and run it in timing mode. The
    graphs and programs of earlier calls are collected first: they hold reference cycles, so their
    weights (a 7B head's 3 GB) would otherwise stay until the collector's next full pass."""
    gc.collect()
    cpu = {}
    start = time.process_time()
    graph = isa.from_onnx(build(), quantize=quantize, chip=chip if quantize else None, passes=passes)
    if keep:
        keep(graph)
    cpu["build"] = time.process_time() - start
    start = time.process_time()
    program = isa.lower(graph, chip)
    cpu["lower"] = time.process_time() - start
    start = time.process_time()
    result = sim.execute(program, chip, None, mode="timing")
    cpu["simulate"] = time.process_time() - start
    kinds = {}
    for name, busy in result.stats.busy.items():
        for kind in chip.engines[name].kinds:
            kinds.setdefault(kind, []).append(busy / max(result.cycles, 1))
    utilization = {kind: sum(v) / len(v) for kind, v in kinds.items()}
    slowest = [(op.name, op.seconds, op.ddr_bytes) for op in result.stats.slowest(top)]
    ddr_bytes = result.stats.ddr_read_bytes + result.stats.ddr_write_bytes
    state = sum(b.region.nbytes for b in program.bindings if b.role == "state")
    return Simulated(result.seconds, result.cycles, utilization, ddr_bytes, cpu, slowest, len(program), state)


def simulate_ends(cfg, chip, batch, seq, dtype, seed):
    """(the embedding lookup, final norm and head simulated, None), or where the chip refuses the
    lookup (the importer's index arithmetic on int64 token ids), (the norm and head alone, why)."""
    act, quantize = activations(dtype), deployed(dtype)
    try:
        return simulate(lambda: llm.ends(cfg, batch, seq, act, seed), chip, quantize=quantize), None
    except UnsupportedError as e:
        refused = str(e)  # the retry runs after the handler, which would keep the refused graph alive (its traceback's frames)
    return simulate(lambda: llm.ends(cfg, batch, seq, act, seed, embedding=False), chip, quantize=quantize), refused


def weights_read_per_token(cfg, bits):
    """Bytes of weights a decode step reads: every layer's at `bits` per weight, the head's in float16
    (the embedding lookup reads one row)."""
    return cfg.layers * cfg.layer_weights() * bits / 8 + cfg.vocab * cfg.hidden * 2


def decode_lengths(prompt, generate, samples):
    """Cache lengths at the middles of `samples` equal parts of the generation: the midpoint rule
    for the mean step time over lengths prompt .. prompt + generate - 1."""
    return [prompt + int((k + 0.5) * generate / samples) for k in range(samples)]


def ddr_bandwidth(chip):
    """Bytes per second the DDR gives."""
    return chip.memories["ddr"].bandwidth * chip.clock_hz


def decode_floor(cfg, chip, dtype, batch, length):
    """(bytes, seconds) of one layer's decode step at cache length `length`: its weights and the
    key and value caches it reads, streamed once at the DDR's bandwidth. A decode step reads
    every weight once for a few rows, so no tiling can beat it: within 1.5x of it is the fidelity
    goal (issue 22)."""
    floor_bytes = cfg.layer_weights() * weight_bytes(dtype) + cfg.kv_elements(length, batch) // cfg.layers * DTYPE_BYTES[activations(dtype)]
    return floor_bytes, floor_bytes / ddr_bandwidth(chip)


def run(args):
    cfg = llm.config(args.model, **({"layers": args.layers} if args.layers else {}))
    chip = chips.load(args.chip)
    dtype, batch, prompt, generate = args.dtype, args.batch, args.prompt, args.generate
    weights, kv = check_fits(cfg, chip, dtype, batch, prompt + generate)
    ddr = chip.memories["ddr"].capacity
    out = print
    out(f"{cfg.name} ({cfg.source}) on {chip.name}, {dtype}, batch {batch}, prompt {prompt}, generate {generate}")
    out(f"one decoder layer simulated in timing mode and multiplied by the model's {cfg.layers} layers (identical in shape, so "
        f"each takes one layer's time; what this leaves out is one layer's first weight loads overlapping the previous one's last "
        f"products: the whole model lowered and simulated costs about {cfg.layers}x a layer's CPU seconds); embedding, final norm "
        f"and head simulated once"
        + ("; the decode step also simulated as the whole model (--whole)" if args.whole else "; --whole simulates a decode step whole"))
    out(f"footprint: weights {weights / 1e9:.2f} GB + KV cache {kv / 1e9:.3f} GB ({prompt + generate} tokens x batch {batch}) = "
        f"{(weights + kv) / 1e9:.2f} GB of {ddr / 1e9:.2f} GB DDR ({(weights + kv) / ddr:.0%})")

    act, quantize = activations(dtype), deployed(dtype)
    passes = [p for p in isa.onnx.PASSES if p != "attention"] if args.unfused_attention else None
    capacity = prompt + generate

    def cached(past, layers=1):  # the KV cache kept in DDR as graph state: read at [0, past), appended at past
        return lambda graph: llm.with_kv_cache(graph, cfg, batch, capacity, past, 1 if past else prompt, layers, args.kv_block)

    def layer(seq, past):
        return llm.decoder_layer(cfg, batch, seq, past, act, args.seed, args.kv_block)

    prefill = simulate(lambda: layer(prompt, 0), chip, args.top, quantize, passes, cached(0))
    prefill_ends, refused = simulate_ends(cfg, chip, batch, prompt, dtype, args.seed)
    if refused:
        out(f"the embedding lookup is not simulated: {refused}")
    ttft = cfg.layers * prefill.seconds + prefill_ends.seconds
    ends_name = "head" if refused else "embedding and head"
    out(f"prefill: one layer {prefill.seconds * 1e3:.3f} ms ({prefill.cycles} cycles) x {cfg.layers} + {ends_name} "
        f"{prefill_ends.seconds * 1e3:.3f} ms = time to first token {ttft * 1e3:.2f} ms")

    lengths = decode_lengths(prompt, generate, args.samples)
    decode_ends, _ = simulate_ends(cfg, chip, batch, 1, dtype, args.seed)
    if args.whole:
        # the weights as the program's inputs (timing mode reads no values); quantized ones must be constants to quantize;
        # the lookup left out where the chip refuses it, as from the ends
        wholes = [simulate(lambda n=n: llm.model(cfg, batch, 1, n, act, args.seed, args.kv_block, weight_inputs=dtype not in WEIGHT_ONLY,
                                                 embedding=not refused),
                           chip, args.top, quantize, passes, keep=cached(n, cfg.layers))
                  for n in lengths]
        tpot = sum(s.seconds for s in wholes) / len(wholes)
        out(f"decode: the whole model ({cfg.layers} layers, {ends_name}) simulated as one graph: time per output token "
            f"{tpot * 1e3:.2f} ms; its layers take {(tpot - decode_ends.seconds) / cfg.layers * 1e3:.3f} ms each after the "
            f"{ends_name} ({decode_ends.seconds * 1e3:.3f} ms simulated alone)")
        cpu = {k: sum(s.cpu[k] for s in wholes) for k in ("build", "lower", "simulate")}
        out(f"  whole-model decode step{'s' if len(wholes) > 1 else ''}: CPU seconds build and import {cpu['build']:.1f}, "
            f"lower {cpu['lower']:.1f}, simulate {cpu['simulate']:.1f}")
    steps = [simulate(lambda n=n: layer(1, n), chip, args.top, quantize, passes, keep=cached(n))
             for n in lengths]
    layer_step = sum(s.seconds for s in steps) / len(steps)
    tpot = sum(s.seconds for s in wholes) / len(wholes) if args.whole else cfg.layers * layer_step + decode_ends.seconds
    floors = [decode_floor(cfg, chip, dtype, batch, n) for n in lengths]
    floor_bytes, floor = (sum(f[i] for f in floors) / len(floors) for i in (0, 1))
    multiplied = f"x {cfg.layers} + {ends_name} {decode_ends.seconds * 1e3:.3f} ms = time per output token {tpot * 1e3:.2f} ms"
    out(f"decode: one layer {layer_step * 1e3:.3f} ms at cache length{'s' if len(lengths) > 1 else ''} "
        f"{', '.join(map(str, lengths))} (floor {floor * 1e3:.3f} ms: {floor_bytes / 1e6:.1f} MB over "
        f"{ddr_bandwidth(chip) / 1e9:.0f} GB/s, {layer_step / floor:.2f}x the floor)"
        + (f" {multiplied}" if not args.whole
           else f"; x {cfg.layers} + {ends_name} would be {(cfg.layers * layer_step + decode_ends.seconds) * 1e3:.2f} ms"))
    state = steps[len(steps) // 2].state_bytes
    paged = f" in blocks of {args.kv_block} (paged, through a run-time block table)" if args.kv_block else ""
    out(f"KV cache: graph state in DDR, {capacity} positions{paged}: {state / 1e6:.2f} MB a layer x {cfg.layers} = "
        f"{state * cfg.layers / 1e9:.3f} GB; "
        f"prefill appends the prompt's rows, a decode step reads the cache where it lies and appends its token's")
    if dtype in WEIGHT_ONLY:  # the same step with float16 weights, compiled the same way: what the weight bytes buy
        middle = lengths[len(lengths) // 2]
        base = simulate(lambda: layer(1, middle), chip, 0, "float16", keep=cached(middle))
        out(f"decode with float16 weights (compiled the same way): one layer {base.seconds * 1e3:.3f} ms at cache length "
            f"{lengths[len(lengths) // 2]}; {dtype} takes {layer_step / base.seconds:.2f}x its time for "
            f"{weight_bytes(dtype) / DTYPE_BYTES['float16']:.2f}x its weight bytes")
    total = ttft + (generate - 1) * tpot
    out(f"tokens per second: {batch / tpot:.1f} while decoding (batch {batch} / time per output token); "
        f"{batch * generate / total:.1f} over the whole request ({total * 1e3:.1f} ms for the prompt and {generate} tokens)")
    for what, s in (("prefill layer", prefill), ("decode layer", steps[len(steps) // 2])):
        ddr_use = s.ddr_bytes / (s.seconds * ddr_bandwidth(chip))
        out(f"engine utilisation, {what} (mean busy fraction of each kind's engines): "
            + ", ".join(f"{kind} {u:.0%}" for kind, u in sorted(s.utilization.items())) + f"; DDR bandwidth {ddr_use:.0%}")
        if s.slowest:
            ops = (f"{name} {sec * 1e6:.1f} us ({ddr / 1e6:.1f} MB DDR)" for name, sec, ddr in s.slowest)
            out(f"  longest ops, {what}: " + "; ".join(ops))
    every = [prefill, prefill_ends, *steps, decode_ends, *(wholes if args.whole else ())]
    cpu = {k: sum(s.cpu[k] for s in every) for k in ("build", "lower", "simulate")}
    out(f"CPU seconds: build and import {cpu['build']:.1f}, lower {cpu['lower']:.1f}, simulate {cpu['simulate']:.1f} "
        f"({len(every)} graphs; the decode layer {steps[len(steps) // 2].instructions:,} instructions)")
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(llm.CONFIGS), default="llama2-7b")
    p.add_argument("--chip", default="ascend910b", help="a shipped chip's name or a chip YAML")
    p.add_argument("--dtype", choices=sorted(DTYPE_BYTES) + sorted(WEIGHT_ONLY), default="float16",
                   help="float16, bfloat16, float32, or weight-only int8 / int4 weights with float16 activations (w8a16, w4a16)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt", type=int, default=512, help="prompt tokens (prefill)")
    p.add_argument("--generate", type=int, default=128, help="tokens generated (decode steps)")
    p.add_argument("--samples", type=int, default=1, help="cache lengths the decode step is simulated at (default: 1, the middle)")
    p.add_argument("--top", type=int, default=3, help="the layer's ops with the longest spans to print (default: 3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--unfused-attention", action="store_true",
                   help="import the prefill and decode layers without the attention pass: their scores go through DDR (for comparison)")
    p.add_argument("--published", action="store_true", help="print the published figures for these chips against the simulator")
    p.add_argument("--layers", type=int, help="a model of this many layers (default: the configuration's)")
    p.add_argument("--whole", action="store_true", help="simulate a decode step as the whole model, one graph (see above)")
    p.add_argument("--kv-block", type=int, help="keep the KV cache paged, in blocks of this many positions (default: contiguous)")
    args = p.parse_args(argv)
    if args.published:
        for line in llm_published.rows(lambda s: llm_published.simulate_setting(s, simulate, simulate_ends, args.seed),
                                       weights_read_per_token):
            print(line)
        return 0
    given = [args.layers, args.kv_block]
    if min(args.batch, args.prompt, args.generate, args.samples, *(v for v in given if v is not None)) < 1 \
            or min(args.top, args.seed) < 0:
        p.error("--batch, --prompt, --generate, --samples, --layers and --kv-block are at least 1, --top and --seed at least 0")
    if args.samples > args.generate:
        p.error(f"--samples is at most --generate (the decode steps): {args.samples} > {args.generate}")
    try:
        return run(args)
    except SimError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
