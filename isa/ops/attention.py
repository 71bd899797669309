"""attention: scaled dot-product attention as one op, as deployment compilers fuse it (Ascend's
FlashAttentionScore, TPU-MLIR's FAttention) and as ONNX's Attention (opset 23) specifies it.

    attention(query [B, Hq, M, D], key [B, Hkv, N, D] (or [B, Hkv, D, N] with key_transposed),
              value [B, Hkv, N, Dv], mask (optional, additive, broadcast to [B, Hq, M, N]), scale)
    -> [B, Hq, M, Dv] = softmax(scale x query @ key^T + mask) @ value

Grouped-query attention: Hq is a multiple of Hkv and query head h reads key and value head
h // (Hq / Hkv). The mask is a float tensor of rank 2 (M, N) or 4 (B or 1, Hq or 1, M, N); a
masked position holds a large negative number (the dtype's lowest, or -inf). The lowering
(isa/lower/templates/attention.py) never writes the scores to DDR.
"""

from typing import Any

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..graph import Tensor
from .base import OpDef, Spec, apply_one, register

FLOATS = ("float32", "float16", "bfloat16")


class Attention(OpDef):
    name = "attention"
    kind = "global"
    template = "attention"
    seed = "onnx"

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        if len(ins) not in (3, 4):
            raise ShapeError(f"attention: takes query, key, value and an optional mask, got {len(ins)} tensors")
        q, k, v = ins[:3]
        for t, what in ((q, "query"), (k, "key"), (v, "value")):
            if len(t.shape) != 4:
                raise ShapeError(f"attention: {what} must be (batch, heads, sequence, head size), got shape {t.shape}")
            if t.dtype != q.dtype or q.dtype not in FLOATS:
                raise UnsupportedError(f"attention: query, key and value share one float dtype ({', '.join(FLOATS)}); "
                                       f"got {q.dtype}, {k.dtype}, {v.dtype}")
        batch, heads, m, d = q.shape
        kd, n = (k.shape[2], k.shape[3]) if params["key_transposed"] else (k.shape[3], k.shape[2])
        if k.shape[:2] != v.shape[:2] or k.shape[0] != batch or heads % k.shape[1]:
            raise ShapeError(f"attention: key {k.shape} and value {v.shape} must share batch and KV heads, the batch {batch} "
                             f"of query {q.shape} and KV heads dividing its {heads} heads")
        if kd != d or v.shape[2] != n:
            layout = "(batch, KV heads, head size, keys)" if params["key_transposed"] else "(batch, KV heads, keys, head size)"
            raise ShapeError(f"attention: key {k.shape} is {layout}: head size {kd} against the query's {d}, and {n} keys "
                             f"against the value's {v.shape[2]}")
        if len(ins) == 4:
            mask = ins[3]
            full = (batch, heads, m, n)
            ok = len(mask.shape) in (2, 4) and all(s in (1, f) for s, f in zip(mask.shape[::-1], full[::-1]))
            if not ok or mask.shape[-2:] != (m, n):
                raise ShapeError(f"attention: mask {mask.shape} must be ({m}, {n}) or (1 or {batch}, 1 or {heads}, {m}, {n})")
            if mask.dtype not in FLOATS:
                raise UnsupportedError(f"attention: the mask is added to the scores: a float tensor, not {mask.dtype}")
        return [Spec((batch, heads, m, v.shape[3]), q.dtype)]

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        q, k, v = (a.astype(np.float32) for a in arrays[:3])
        if params["key_transposed"]:
            k = np.swapaxes(k, -1, -2)
        group = q.shape[1] // k.shape[1]
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        scores = q @ np.swapaxes(k, -1, -2) * np.float32(params["scale"])
        if len(arrays) == 4:
            scores = scores + arrays[3].astype(np.float32)
        with np.errstate(all="ignore"):
            e = np.exp(scores - scores.max(axis=-1, keepdims=True))
            y = (e / e.sum(axis=-1, keepdims=True)) @ v
        return [y.astype(arrays[0].dtype)]


ATTENTION = register(Attention())


def attention(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None, *, scale: float, key_transposed: bool = False,
              name: str | None = None) -> Tensor:
    """softmax(scale x query @ key^T + mask) @ value, key and value heads shared by groups of query heads."""
    operands = [query, key, value] + ([mask] if mask is not None else [])
    return apply_one(ATTENTION, operands, {"scale": float(scale), "key_transposed": bool(key_transposed)}, name)
