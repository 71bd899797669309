"""Resampling ops of the BMLang seed: upsample and interpolate.

    upsample(tensor_i, scale): every element of an NCHW tensor repeated scale x scale times
                               (the seed's example: 2x3 -> 4x6), one DMA with zero strides
    interpolate(tensor_i, size, scale_factor, platform, method, align_corners, half_pixel_centers)
"""

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..graph import Tensor
from .arrange import Arrangement, Piece, View
from .base import OpDef, Spec, apply_one, register


class Upsample(Arrangement):
    name = "upsample"
    kind = "local"

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        if len(ins) != 1 or len(ins[0].shape) != 4:
            raise ShapeError(f"upsample: takes one NCHW tensor, got shapes {[s.shape for s in ins]}")
        if params.get("out_dtype") not in (None, ins[0].dtype):
            raise UnsupportedError(f"upsample: the output has the input's dtype {ins[0].dtype}, out_dtype {params['out_dtype']} asked")
        n, c, h, w = ins[0].shape
        s = params["scale"]
        return [Spec((n, c, h * s, w * s), ins[0].dtype)]

    def pieces(self, shapes: list[tuple[int, ...]], out_shape: tuple[int, ...], params: dict[str, Any]) -> list[Piece]:
        """One transfer: the input read as (n, c, h, s, w, s) with the two s dimensions at stride 0."""
        (n, c, h, w), s = shapes[0], params["scale"]
        src = View(0, (n, c, h, s, w, s), (c * h * w, h * w, w, 0, 1, 0))
        dst = View(0, (n, c, h, s, w, s), (c * h * s * w * s, h * s * w * s, s * w * s, w * s, s, 1))
        return [Piece(0, src, dst)]

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        s = params["scale"]
        return [arrays[0].repeat(s, axis=2).repeat(s, axis=3)]


UPSAMPLE = register(Upsample())


def upsample(tensor_i: Tensor, scale: int, out_dtype: str | None = None, name: str | None = None) -> Tensor:
    """Repeat every element of an NCHW tensor `scale` times along H and along W."""
    if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
        raise ShapeError(f"upsample: scale must be a positive integer, got {scale!r}")
    return apply_one(UPSAMPLE, [tensor_i], {"scale": scale, "out_dtype": out_dtype}, name)


# ---- interpolate ----------------------------------------------------------------------------

PLATFORMS = ("OPENCV", "TENSORFLOW")
METHODS = ("NEAREST", "BILINEAR")


def weights(in_size: int, out_size: int, platform: str, method: str, align_corners: bool,
            half_pixel_centers: bool) -> list[list[tuple[int, float]]]:
    """The interpolation along one axis as a list, per output index, of (input index, weight).

    TENSORFLOW follows tf.image.resize (v1): the scale is (in - 1) / (out - 1) with
    align_corners, else in / out; a source coordinate is (x + 0.5) * scale - 0.5 with
    half_pixel_centers (nearest: (x + 0.5) * scale), else x * scale; nearest takes its floor
    (with align_corners its roundf, halves away from zero), bilinear the two neighbours, lower
    clamped at 0 and upper at in - 1, with weight (coordinate - floor). OPENCV follows cv::resize's INTER_LINEAR: the
    coordinate is (x + 0.5) * in / out - 0.5, below 0 reads element 0, at or past in - 1 the last.
    """
    out = []
    if platform == "OPENCV":
        scale = in_size / out_size
        for x in range(out_size):
            f = (x + 0.5) * scale - 0.5
            s = int(np.floor(f))
            frac = f - s
            if s < 0:
                s, frac = 0, 0.0
            if s >= in_size - 1:
                s, frac = in_size - 1, 0.0
            out.append([(s, 1.0 - frac), (min(s + 1, in_size - 1), frac)])
        return out
    scale = (in_size - 1) / (out_size - 1) if align_corners and out_size > 1 else in_size / out_size
    for x in range(out_size):
        if method == "NEAREST":
            f = (x + 0.5) * scale if half_pixel_centers else x * scale
            s = int(np.floor(f + 0.5)) if align_corners else int(np.floor(f))
            out.append([(min(max(s, 0), in_size - 1), 1.0)])
            continue
        f = (x + 0.5) * scale - 0.5 if half_pixel_centers else x * scale
        lower = int(np.floor(f))
        frac = f - lower
        out.append([(max(lower, 0), 1.0 - frac), (min(int(np.ceil(f)), in_size - 1), frac)])
    return out


def matrix(in_size: int, out_size: int, params: dict[str, Any]) -> np.ndarray:
    """The axis's interpolation as an (out, in) float32 matrix: out = matrix @ in."""
    m = np.zeros((out_size, in_size), np.float32)
    for o, taps in enumerate(weights(in_size, out_size, params["platform"], params["method"], params["align_corners"],
                                     params["half_pixel_centers"])):
        for i, w in taps:
            m[o, i] += np.float32(w)
    return m


class Interpolate(OpDef):
    """interpolate(tensor_i, size, scale_factor, platform, method, align_corners, half_pixel_centers):
    NCHW resized in H and W, float32 or float16 (the seed's BM1686 line). Run on the matrix unit
    as out = Ry @ plane @ Rx^T with the interpolation matrices made offline (resize template)."""

    name = "interpolate"
    kind = "global"
    template = "resize"

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        if len(ins) != 1 or len(ins[0].shape) != 4:
            raise ShapeError(f"interpolate: takes one NCHW tensor, got shapes {[s.shape for s in ins]}")
        x = ins[0]
        if x.dtype not in ("float32", "float16", "bfloat16"):
            raise UnsupportedError(f"interpolate: dtype {x.dtype} is not supported (float32, float16, bfloat16)")
        if params.get("out_dtype") not in (None, x.dtype):
            raise UnsupportedError(f"interpolate: the output has the input's dtype {x.dtype}, out_dtype {params['out_dtype']} asked")
        return [Spec(x.shape[:2] + self.out_size(x.shape, params), x.dtype)]

    def out_size(self, shape: tuple[int, ...], params: dict[str, Any]) -> tuple[int, ...]:
        if params["size"]:
            return tuple(params["size"])
        return tuple(int(n * f) for n, f in zip(shape[2:], params["scale_factor"]))

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        """Pixel by pixel from the taps, in float32: each output the weighted sum of its rows
        of weighted columns."""
        x = arrays[0].astype(np.float32)
        n, c, h, w = x.shape
        oh, ow = self.out_size(x.shape, params)
        rows = weights(h, oh, params["platform"], params["method"], params["align_corners"], params["half_pixel_centers"])
        cols = weights(w, ow, params["platform"], params["method"], params["align_corners"], params["half_pixel_centers"])
        out = np.zeros((n, c, oh, ow), np.float32)
        for i, row_taps in enumerate(rows):
            for j, col_taps in enumerate(cols):
                acc = np.zeros((n, c), np.float32)
                for r, wr in row_taps:
                    line = np.zeros((n, c), np.float32)
                    for q, wq in col_taps:
                        line += x[:, :, r, q] * np.float32(wq)
                    acc += line * np.float32(wr)
                out[:, :, i, j] = acc
        return [out.astype(arrays[0].dtype)]


INTERPOLATE = register(Interpolate())


def interpolate(tensor_i: Tensor, size: Sequence[int] | None = None, scale_factor: Sequence[float] | None = None,
                platform: str = "TENSORFLOW", method: str = "BILINEAR", align_corners: bool = False, half_pixel_centers: bool = False,
                out_dtype: str | None = None, name: str | None = None) -> Tensor:
    """Resize H and W to `size`, or by `scale_factor` (the seed's InterpolateParam)."""
    platform, method = str(platform).upper(), str(method).upper()
    if platform not in PLATFORMS:
        raise UnsupportedError(f"interpolate: platform {platform!r} is not supported (the seed: {', '.join(PLATFORMS)})")
    if method not in METHODS:
        raise UnsupportedError(f"interpolate: unknown method {method!r}; known: {', '.join(METHODS)}")
    if platform == "OPENCV" and (method != "BILINEAR" or align_corners):
        raise UnsupportedError("interpolate: OPENCV is BILINEAR without align_corners (the seed; cv::resize's INTER_LINEAR)")
    if bool(size) == bool(scale_factor):
        raise ShapeError(f"interpolate: give either size or scale_factor (2 values), got size={size}, scale_factor={scale_factor}")
    given: Sequence[float] = size or scale_factor or ()  # one of them, as checked above
    if len(given) != 2 or any(v <= 0 for v in given):
        raise ShapeError(f"interpolate: size or scale_factor needs 2 positive values, got {given}")
    params = {"size": tuple(int(v) for v in size) if size else None, "scale_factor": tuple(scale_factor) if scale_factor else None,
              "platform": platform, "method": method, "align_corners": bool(align_corners),
              "half_pixel_centers": bool(half_pixel_centers), "out_dtype": out_dtype}
    return apply_one(INTERPOLATE, [tensor_i], params, name)
