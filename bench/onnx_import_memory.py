"""Peak memory of importing a large ONNX model: a Llama-7B-shaped decoder layer (hidden 4096,
32 heads, MLP 11008: 202 M float32 weights, 810 MB) built with onnx.helper and random weights,
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

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

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
    """One Llama decoder layer in float32: RMSNorm, Q/K/V/O projections, causal-free attention,
    RMSNorm, the SwiGLU MLP (gate, up, down), two residual adds."""
    rng = np.random.default_rng(0)
    head = hidden // heads
    inits, nodes = [], []

    def weight(name, shape):
        inits.append(numpy_helper.from_array(rng.standard_normal(shape, np.float32) * 0.02, name))
        return name

    def const(name, values):
        inits.append(numpy_helper.from_array(np.asarray(values), name))
        return name

    def node(op, inputs, output, **attrs):
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def rms_norm(x, prefix):
        sq = node("Mul", [x, x], f"{prefix}.sq")
        mean = node("ReduceMean", [sq], f"{prefix}.mean", axes=[-1], keepdims=1)
        eps = node("Add", [mean, const(f"{prefix}.eps", np.array(1e-6, np.float32))], f"{prefix}.eps_add")
        inv = node("Reciprocal", [node("Sqrt", [eps], f"{prefix}.sqrt")], f"{prefix}.inv")
        return node("Mul", [node("Mul", [x, inv], f"{prefix}.scaled"), weight(f"{prefix}.weight", (hidden,))], f"{prefix}.out")

    def heads_of(x, prefix):
        r = node("Reshape", [x, const(f"{prefix}.shape", np.array([1, seq, heads, head], np.int64))], f"{prefix}.heads")
        return node("Transpose", [r], f"{prefix}.t", perm=[0, 2, 1, 3])

    x = "x"
    h = rms_norm(x, "input_norm")
    q, k, v = (heads_of(node("MatMul", [h, weight(f"{p}_proj.weight", (hidden, hidden))], f"{p}_proj"), p) for p in "qkv")
    kt = node("Transpose", [k], "k.tt", perm=[0, 1, 3, 2])
    scores = node("Div", [node("MatMul", [q, kt], "scores"), const("scale", np.array(np.sqrt(head), np.float32))], "scaled")
    ctx = node("MatMul", [node("Softmax", [scores], "probs", axis=-1), v], "context")
    ctx = node("Reshape", [node("Transpose", [ctx], "ctx.t", perm=[0, 2, 1, 3]), const("ctx.shape", np.array([1, seq, hidden], np.int64))],
               "ctx.merged")
    x = node("Add", [x, node("MatMul", [ctx, weight("o_proj.weight", (hidden, hidden))], "o_proj")], "residual1")
    h = rms_norm(x, "post_norm")
    gate = node("MatMul", [h, weight("gate_proj.weight", (hidden, mlp))], "gate_proj")
    silu = node("Mul", [gate, node("Sigmoid", [gate], "gate.sigmoid")], "gate.silu")
    up = node("MatMul", [h, weight("up_proj.weight", (hidden, mlp))], "up_proj")
    down = node("MatMul", [node("Mul", [silu, up], "swiglu"), weight("down_proj.weight", (mlp, hidden))], "down_proj")
    out = node("Add", [x, down], "y")
    graph = helper.make_graph(nodes, "llama_layer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, hidden])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, seq, hidden])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


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
        out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True)
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
