"""Peak memory of importing a large ONNX model: a Llama-7B-shaped decoder layer (hidden 4096,
32 heads, MLP 11008: 202 M float32 weights, 810 MB) built by examples/llm.py with random weights,
saved to a temporary folder (in the .onnx file, or with `--external` as external data beside
it), then imported by `isa.from_onnx(path)` in a fresh Python process that prints its peak
resident set size (VmHWM, Linux) before and after the import.

    python bench/onnx_import_memory.py                 # weights inside the .onnx file
    python bench/onnx_import_memory.py --external      # weights in an external data file
    python bench/onnx_import_memory.py --hidden 1024 --mlp 2752   # a smaller layer
"""

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx
from onnx import numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import llm

CHILD = """
import sys, time
import isa, isa.onnx
def peak():  # VmHWM: this process's peak resident set (ru_maxrss would keep the parent's peak across exec)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 2**20  # KiB -> GiB
before = peak()
start = time.process_time()
g = isa.from_onnx(sys.argv[1])
print(f"{before:.3f} {peak():.3f} {time.process_time() - start:.1f} {sum(a.nbytes for a in g.constants.values()) / 2**30:.3f}")
"""


def layer(hidden, heads, mlp, seq):
    """One Llama decoder layer in float32 (examples/llm.py's, with Llama-2-7B's configuration resized)."""
    cfg = llm.config("llama2-7b", hidden=hidden, heads=heads, kv_heads=heads, mlp=mlp)
    return llm.decoder_layer(cfg, seq=seq, dtype="float32")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--mlp", type=int, default=11008)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--external", action="store_true", help="keep the weights in an external data file")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "layer.onnx"
        model = layer(args.hidden, args.heads, args.mlp, args.seq)
        weights = sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer) / 2**30
        onnx.save(model, str(path), save_as_external_data=args.external, location="layer.data" if args.external else None)
        del model
        out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, check=False)
        if out.returncode:
            print(out.stderr.strip().splitlines()[-1])
            return 1
        before, after, cpu, held = (float(v) for v in out.stdout.split())
    kind = "external data" if args.external else "inside the .onnx file"
    print(f"Llama-shaped layer (hidden {args.hidden}, {args.heads} heads, MLP {args.mlp}), weights {kind}: {weights:.2f} GiB")
    print(f"peak RSS: {before:.2f} GiB before the import, {after:.2f} GiB after ({after - before:.2f} GiB for the import, "
          f"{(after - before) / weights:.2f}x the weights); the graph holds {held:.2f} GiB of constants; {cpu:.1f} CPU-s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
