"""FP16 and BF16 deployment: every float32 tensor of the graph becomes the narrower float where
the chip's op table takes the op in it, as TPU-MLIR's `model_deploy --quantize F16/BF16` does.

A node whose float32 operands and results can all be `dtype` (the op itself and the chip's table
take them) runs in `dtype`, its weights converted when the graph is built. A node the table has
only in float32 (BM1684X's sigmoid, tanh, nearest upsampling, division) runs in float32, with a
`cast` node before it for each operand computed in `dtype` and one after it for a reader in
`dtype`, as TPU-MLIR's mixed precision does. The graph's inputs and outputs stay float32 (cast at
the edges). A cast that becomes a conversion of `dtype` into itself (the importer's widening
around a composite activation) is dropped. The program's notes list the ops left in float32.

A graph already in `dtype` (an LLM built in float16) is compiled the same way: a node the table
lacks in `dtype` but has in float32 (BM1684X's square root, sigmoid and softmax) runs in float32
between casts; where the chip has no cast for it either, the node stays as it is and the lowering
refuses it, naming the op, its dtypes and the chip.

TPU-MLIR lowers BM1684X's F16 and BF16 ops this way (sophgo/tpu-mlir): Sqrt and Sigmoid through
`lowering_common_f32` (lib/Conversion/TopToTpu/BM1684X/Sqrt.cpp @ f3632a4c01c424dd4f525ff2babf0f41fd9f6eda,
Sigmoid.cpp @ d50059d620ecaed7a0e3249d7fd85f10b35f2c6d), Softmax in F32 where its axis exceeds half a
local-memory bank (Softmax.cpp @ d50059d; its earlier LoweringF16 always called LoweringF32, as the
BMLang table this repository's bm1686.yaml reads gives softmax in FLOAT32 only), and
ConvertTopToTpu::cast_process inserts a tpu.CastOp before each operand whose dtype is not the one its
op was lowered to (lib/Conversion/TopToTpu/TopToTpuPass.cpp @ 16232af4db63f19388050a2317cd7fd876abeb8e).
The casts are ordinary vector instructions of the program, priced as any other.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from ..graph import Graph
from ..ops import REGISTRY
from .rebuild import Rebuild, float_params

if TYPE_CHECKING:
    from chips.schema import Chip

    from ..graph import Node

SOURCE = "float32"


def rewrite(source: Graph, target: Graph, chip: Chip, dtype: str) -> Graph:
    rb = Rebuild(source, target, chip)
    narrow, kept = 0, Counter[str]()
    for node in source.nodes:
        tensors = [source.tensors[n] for n in node.inputs + node.outputs]
        if any(t.dtype == dtype for t in tensors) and not any(t.dtype == SOURCE for t in tensors):
            widened = _widened(rb, source, node, dtype)
            kept.update(widened)
            narrow += not widened
            continue
        if not any(t.dtype == SOURCE for t in tensors):
            rb.copy(node)
            continue
        params = float_params(node.params, SOURCE, dtype)
        want = [dtype if source.tensors[n].dtype == SOURCE else source.tensors[n].dtype for n in node.inputs]
        if node.op == "cast" and want == [params["out_dtype"]]:  # now a conversion into itself: dropped
            rb.map[node.outputs[0]] = rb.as_dtype(rb.tensor(node.inputs[0]), want[0])
            continue
        outs = rb.fits(node, want, params)
        expected = [dtype if source.tensors[n].dtype == SOURCE else source.tensors[n].dtype for n in node.outputs]
        if outs == expected:
            rb.copy(node, params, [rb.as_dtype(rb.tensor(n), d) for n, d in zip(node.inputs, want)])
            narrow += 1
        else:
            rb.copy(node)
            kept[REGISTRY[node.op].support_key(node.params)] += 1
    rb.finish()
    listed = ", ".join(f"{k} x{n}" for k, n in sorted(kept.items(), key=lambda kv: (-kv[1], kv[0])))
    target.notes.append(f"quantize {dtype} on {chip.name}: {narrow} op(s) in {dtype}, {sum(kept.values())} in float32 "
                        f"(the chip's table has no {dtype} for them{': ' + listed if listed else ''}), {rb.casts} cast(s) added")
    return target


def _widened(rb: Rebuild, source: Graph, node: Node, dtype: str) -> list[str]:
    """A node of `dtype` tensors: copied, or where the chip's table lacks it in `dtype` and has it
    in float32, run in float32 between casts; the support keys widened."""
    if rb.fits(node, [source.tensors[n].dtype for n in node.inputs], node.params) is not None:
        rb.copy(node)
        return []
    want = [SOURCE if source.tensors[n].dtype == dtype else source.tensors[n].dtype for n in node.inputs]
    params = float_params(node.params, dtype, SOURCE)
    casts = all(rb.supported("cast", {"out_dtype": b}, [a], b) for a, b in ((dtype, SOURCE), (SOURCE, dtype)))
    if not casts or rb.fits(node, want, params) is None:
        rb.copy(node)  # the lowering gives the table's refusal, naming the op, its dtypes and the chip
        return []
    rb.copy(node, params, [rb.as_dtype(rb.tensor(n), d) for n, d in zip(node.inputs, want)])
    return [REGISTRY[node.op].support_key(node.params)]


__all__ = ["rewrite"]
