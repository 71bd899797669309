"""Weight-only quantization (W8A16, W4A16), as LLMs are deployed on these chips (TPU-MLIR's
`model_deploy --quantize W8F16|W4F16 --q_group_size 128`, CANN's WeightQuantBatchMatmul): every
matrix_mul of a constant weight becomes matrix_mul_a16 (isa/ops/weight_only.py), its weight
quantized per group of `group` rows of K and per column, the activations staying float16.

- W8A16: symmetric, q = round(w / s) in -127..127, s = max |w| of the group / 127;
- W4A16: asymmetric 4-bit codes as GPTQ and AWQ store them, u = clamp(round(w / s) + z, 0, 15)
  with s = (max - min) / 15 and z = round(-min / s) per group, two codes a byte; the op takes
  the zero term -z * s beside the scale, so the dequantization is one mul_add.

The graph is compiled to float16 first (floats.py: from float32, or where the chip's table
lacks an op in float16, that op in float32 between casts); everything other than those
products keeps its dtype. The note says how many products went, and why any did not.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import numpy as np

from .. import ops
from ..errors import ConfigError
from ..graph import Graph
from ..ops import weight_only
from . import floats
from .rebuild import Rebuild

if TYPE_CHECKING:
    from chips.schema import Chip

    from ..graph import Node

SCHEMES = {"w8a16": 8, "w4a16": 4}
GROUP = 128  # TPU-MLIR's and AutoGPTQ's usual q_group_size
ACTIVATIONS = ("float16", "bfloat16")


def scheme(name: object) -> int | None:
    """The weight bits of a weight-only precision name (W8A16, W4A16), or None."""
    return SCHEMES.get(str(name).lower())


def quantize_weight(w: np.ndarray, bits: int, group: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(stored weight, scale, zero term or None) of a float weight [K, N], per group of rows."""
    k, n = w.shape
    blocks = w.astype(np.float64).reshape(k // group, group, n)
    if bits == 8:
        scale = np.maximum(np.abs(blocks).max(axis=1), 1e-8) / 127
        q = np.clip(np.rint(blocks / scale[:, None]), -127, 127).reshape(k, n).astype(np.int8)
        return q, scale, None
    low, high = np.minimum(blocks.min(axis=1), 0), np.maximum(blocks.max(axis=1), 0)
    scale = np.maximum(high - low, 1e-8) / 15
    zero = np.clip(np.rint(-low / scale), 0, 15)
    codes = np.clip(np.rint(blocks / scale[:, None]) + zero[:, None], 0, 15).reshape(k, n)
    return weight_only.pack(codes), scale, -zero * scale


def rewrite(source: Graph, target: Graph, chip: Chip, bits: int, group: int = GROUP) -> Graph:
    if group < 1:
        raise ConfigError(f"weight-only quantization: group {group} must be at least 1")
    if any(t.dtype in ("float32", "float16") for t in source.tensors.values()):
        source = floats.rewrite(source, Graph(source.name), chip, "float16")
    rb = Rebuild(source, target, chip)
    done, kept = 0, Counter[str]()
    for node in source.nodes:
        why = _refusal(rb, source, node, bits, group)
        if why:
            if node.op == "matrix_mul":
                kept[why] += 1
            rb.copy(node)
            continue
        x, w = node.inputs
        dt = source.tensors[x].dtype
        stored, scale, zero = quantize_weight(np.asarray(source.constants[w], np.float32), bits, group)
        act, right, scales = rb.tensor(x), rb.constant(w, stored, stored.dtype.name), rb.constant(f"{w}/scale", scale, dt)
        zeros = rb.constant(f"{w}/zero", zero, dt) if zero is not None else None
        rb.map[node.outputs[0]] = ops.matrix_mul_a16(act, right, scales, zeros, bits=bits, group=group, name=node.name)
        done += 1
    rb.finish()
    left = "; ".join(f"{n} left as they were ({why})" for why, n in kept.items())
    target.notes.append(f"quantize W{bits}A16 on {chip.name}: {done} matrix_mul with {bits}-bit weights, group {group}"
                        + (f"; {left}" if left else ""))
    return target


def _refusal(rb: Rebuild, source: Graph, node: Node, bits: int, group: int) -> str | None:
    """Why node stays as it is (None: it takes quantized weights)."""
    if node.op != "matrix_mul" or len(node.inputs) != 2:
        return "not a product" if node.op != "matrix_mul" else "a bias"
    x, w = node.inputs
    dt = source.tensors[x].dtype
    if not rb.is_constant(w) or rb.is_constant(x):
        return "the weight is not a constant"
    if dt not in ACTIVATIONS:
        return f"{dt} activations"
    if source.tensors[w].shape[0] % group:
        return f"K not a multiple of the group {group}"
    if not rb.supported("matrix_mul_a16", {"bits": bits}, [dt, weight_only.STORED[bits]], dt):
        return f"chip {rb.chip.name} has no matrix_mul_a16 for {dt}"
    return None


__all__ = ["GROUP", "SCHEMES", "quantize_weight", "rewrite", "scheme"]
