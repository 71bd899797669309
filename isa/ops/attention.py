"""attention: scaled dot-product attention as one op, as deployment compilers fuse it (Ascend's
FlashAttentionScore, TPU-MLIR's FAttention) and as ONNX's Attention (opset 23) specifies it.

    attention(query [B, Hq, M, D], key [B, Hkv, N, D] (or [B, Hkv, D, N] with key_transposed),
              value [B, Hkv, N, Dv], mask (optional, additive, broadcast to [B, Hq, M, N]), scale)
    -> [B, Hq, M, Dv] = softmax(scale x query @ key^T + mask) @ value

Grouped-query attention: Hq is a multiple of Hkv and query head h reads key and value head
h // (Hq / Hkv). The mask is a float tensor of rank 2 (M, n) or 4 (B or 1, Hq or 1, M, n) added to
the scores of the last n <= N keys (n = N: all of them; a decode step's causal mask covers the
new tokens alone, not the cache); a masked position holds a large negative number (the dtype's
lowest, or -inf). The keys and values may come in segments along the keys' axis (`segments` > 1:
the operands are query, the keys' segments, the values' segments, then the mask), read as one
concatenation that is never made: a decode step's cache (or a paged cache's blocks) and its new
tokens, as decode kernels (flash-decoding, CANN's IncreFlashAttention, PagedAttention) read them
in place. The lowering (isa/lower/templates/attention.py) never writes the scores to DDR.
"""

from collections.abc import Sequence
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
        parts = params.get("segments", 1)
        if len(ins) not in (1 + 2 * parts, 2 + 2 * parts):
            raise ShapeError(f"attention: takes query, {parts} key and {parts} value segment(s) and an optional mask, "
                             f"got {len(ins)} tensors")
        q, keys, values = ins[0], ins[1:1 + parts], ins[1 + parts:1 + 2 * parts]
        for k, v in zip(keys, values):
            self._segment(q, k, v, params)
        if len({(k.shape[1], v.shape[3]) for k, v in zip(keys, values)}) > 1:
            raise ShapeError(f"attention: key segments {[k.shape for k in keys]} and value segments {[v.shape for v in values]} "
                             "must share KV heads and value size")
        batch, heads, m, _ = q.shape
        n = sum(v.shape[2] for v in values)
        if len(ins) == 2 + 2 * parts:
            mask = ins[-1]
            full = (batch, heads, m, mask.shape[-1])
            ok = len(mask.shape) in (2, 4) and all(s in (1, f) for s, f in zip(mask.shape[::-1], full[::-1]))
            if not ok or mask.shape[-2] != m or not 1 <= mask.shape[-1] <= n:
                raise ShapeError(f"attention: mask {mask.shape} must be ({m}, keys) or (1 or {batch}, 1 or {heads}, {m}, keys), "
                                 f"over the last keys of the {n}")
            if mask.dtype not in FLOATS:
                raise UnsupportedError(f"attention: the mask is added to the scores: a float tensor, not {mask.dtype}")
        return [Spec((batch, heads, m, values[0].shape[3]), q.dtype)]

    @staticmethod
    def _segment(q: Spec, k: Spec, v: Spec, params: dict[str, Any]) -> None:
        """Refuse a key and value segment that does not fit the query."""
        for t, what in ((q, "query"), (k, "key"), (v, "value")):
            if len(t.shape) != 4:
                raise ShapeError(f"attention: {what} must be (batch, heads, sequence, head size), got shape {t.shape}")
            if t.dtype != q.dtype or q.dtype not in FLOATS:
                raise UnsupportedError(f"attention: query, key and value share one float dtype ({', '.join(FLOATS)}); "
                                       f"got {q.dtype}, {k.dtype}, {v.dtype}")
        batch, heads, _, d = q.shape
        kd, n = (k.shape[2], k.shape[3]) if params["key_transposed"] else (k.shape[3], k.shape[2])
        if k.shape[:2] != v.shape[:2] or k.shape[0] != batch or heads % k.shape[1]:
            raise ShapeError(f"attention: key {k.shape} and value {v.shape} must share batch and KV heads, the batch {batch} "
                             f"of query {q.shape} and KV heads dividing its {heads} heads")
        if kd != d or v.shape[2] != n:
            layout = "(batch, KV heads, head size, keys)" if params["key_transposed"] else "(batch, KV heads, keys, head size)"
            raise ShapeError(f"attention: key {k.shape} is {layout}: head size {kd} against the query's {d}, and {n} keys "
                             f"against the value's {v.shape[2]}")

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        parts = params.get("segments", 1)
        q = arrays[0].astype(np.float32)
        k = np.concatenate([a.astype(np.float32) for a in arrays[1:1 + parts]], axis=3 if params["key_transposed"] else 2)
        v = np.concatenate([a.astype(np.float32) for a in arrays[1 + parts:1 + 2 * parts]], axis=2)
        if params["key_transposed"]:
            k = np.swapaxes(k, -1, -2)
        group = q.shape[1] // k.shape[1]
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        scores = q @ np.swapaxes(k, -1, -2) * np.float32(params["scale"])
        if len(arrays) == 2 + 2 * parts:
            mask = arrays[-1].astype(np.float32)
            scores[..., scores.shape[-1] - mask.shape[-1]:] += mask
        with np.errstate(all="ignore"):
            e = np.exp(scores - scores.max(axis=-1, keepdims=True))
            y = (e / e.sum(axis=-1, keepdims=True)) @ v
        return [y.astype(arrays[0].dtype)]


ATTENTION = register(Attention())


def attention(query: Tensor, key: Tensor | Sequence[Tensor], value: Tensor | Sequence[Tensor], mask: Tensor | None = None, *,
              scale: float, key_transposed: bool = False, name: str | None = None) -> Tensor:
    """softmax(scale x query @ key^T + mask) @ value, key and value heads shared by groups of query
    heads; key and value each a tensor or a sequence of segments along the keys' axis (the
    mask, if any, over the last keys)."""
    keys = [key] if isinstance(key, Tensor) else list(key)
    values = [value] if isinstance(value, Tensor) else list(value)
    if len(keys) != len(values):
        raise ShapeError(f"attention: {len(keys)} key segment(s) against {len(values)} value segment(s)")
    params: dict[str, Any] = {"scale": float(scale), "key_transposed": bool(key_transposed)}
    if len(keys) > 1:
        params["segments"] = len(keys)
    return apply_one(ATTENTION, [query, *keys, *values] + ([mask] if mask is not None else []), params, name)
