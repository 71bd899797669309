"""Padding and space/batch rearrangement of the BMLang seed (seed lines 853-890), as DMA
transfers and constant fills (isa/lower/templates/arrange.py).

    pad(tensor_i, pad_val, paddings, pad_mode)      paddings = [before_0, after_0, before_1, ...]
    pad_v2(tensor_i, paddings, pad_val, pad_mode)   paddings an int32 tensor known when built
    space_to_batch(tensor_i, block_size, pad)       NCHW, zero-padded H and W cut into
                                                    block_size[0] x block_size[1] phases along N
    batch_to_space(tensor_i, block_size, crop_size) its inverse, cropping

Padding is per axis a run before, the body and a run after; PAD_CONSTANT fills the runs,
PAD_REFLECT and PAD_SYMMETRIC read them backwards (negative strides), PAD_EDGE repeats the
edge (zero strides), so every piece is one strided transfer and the pieces are disjoint.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ..errors import ShapeError, UnsupportedError
from .arrange import Arrangement, Piece, Segment, View, assemble, check_vector_operand, fill_value, ints, known_ints, strides, whole
from .base import Spec, apply_one, register

if TYPE_CHECKING:
    from numpy import ndarray

    from isa.graph import Node, Tensor

_NumpyMode = Literal["constant", "reflect", "symmetric", "edge"]
MODES: dict[str, _NumpyMode] = {"PAD_CONSTANT": "constant", "PAD_REFLECT": "reflect", "PAD_SYMMETRIC": "symmetric",
                               "PAD_EDGE": "edge"}  # -> numpy's


def _mode(pad_mode: str, op: str) -> str:
    mode = str(pad_mode).upper()
    if mode not in MODES:
        raise UnsupportedError(f"{op}: unknown pad_mode {pad_mode!r}; known: {', '.join(MODES)}")
    return mode


def _pad_segments(d: int, before: int, after: int, mode: str) -> list[Segment]:
    """One axis of size d padded: (before run, body, after run) as output segments."""
    body = Segment(before, d, 0)
    if mode == "PAD_CONSTANT":
        return [Segment(0, before), body, Segment(before + d, after)]
    # where the before run starts reading, walking back; where the after run does
    first, last, step = {"PAD_REFLECT": (before, d - 2, -1), "PAD_SYMMETRIC": (before - 1, d - 1, -1), "PAD_EDGE": (0, d - 1, 0)}[mode]
    return [Segment(0, before, first, step), body, Segment(before + d, after, last, step)]


class Pad(Arrangement):
    name = "pad"
    kind = "local"  # 受限本地操作: local when the first 4 paddings are 0 (seed line 859)

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        x, mode, paddings = ins[0], params["pad_mode"], params["paddings"]
        rank = len(x.shape)
        if len(paddings) != 2 * rank:
            raise ShapeError(f"{self.name}: paddings needs 2 x rank = {2 * rank} values for shape {x.shape}, "
                             f"got {len(paddings)}: {list(paddings)}")
        if any(p < 0 for p in paddings):
            raise ShapeError(f"{self.name}: paddings must be >= 0, got {list(paddings)}")
        limit = {"PAD_REFLECT": 1, "PAD_SYMMETRIC": 0}.get(mode)  # a run reads at most d - limit indices
        for i, p in enumerate(paddings):
            d = x.shape[i // 2]
            if limit is not None and p > d - limit:
                raise ShapeError(f"{self.name}: {mode} needs paddings[{i}] <= {d - limit} (axis {i // 2} has size {d}), got {p}")
        fill_value(params["pad_val"], x.dtype, self.name, "pad_val")
        return [Spec(tuple(d + paddings[2 * i] + paddings[2 * i + 1] for i, d in enumerate(x.shape)), x.dtype)]

    def pieces(self, shapes: list[tuple[int, ...]], out_shape: tuple[int, ...], params: dict[str, Any]) -> list[Piece]:
        shape, p = shapes[0], params["paddings"]
        axes = [_pad_segments(d, p[2 * i], p[2 * i + 1], params["pad_mode"]) for i, d in enumerate(shape)]
        return assemble(axes, strides(shape), strides(out_shape), value=params["pad_val"])

    def reference(self, arrays: list[ndarray], params: dict[str, Any], compute: dict[Any, Any] | None = None) -> list[ndarray]:
        return [_np_pad(arrays[0], params["paddings"], params)]


def _np_pad(x: ndarray, paddings: tuple[int, ...] | list[int], params: dict[str, Any]) -> ndarray:
    pairs = [(paddings[2 * i], paddings[2 * i + 1]) for i in range(x.ndim)]
    mode = MODES[params["pad_mode"]]
    if mode == "constant":
        return np.pad(x, pairs, mode=mode, constant_values=params["pad_val"])
    return np.pad(x, pairs, mode=mode)


PAD = register(Pad())


def pad(tensor_i: Tensor, pad_val: int, paddings: list[int], pad_mode: str = "PAD_CONSTANT", name: str | None = None) -> Tensor:
    """Pad each axis i by paddings[2i] before and paddings[2i + 1] after."""
    params = {"pad_val": pad_val, "paddings": ints(paddings, "pad", "paddings"), "pad_mode": _mode(pad_mode, "pad")}
    return apply_one(PAD, [tensor_i], params, name)


class PadV2(Pad):
    """pad with paddings an int32 tensor of 2 x rank elements whose values the graph knows (the
    machine plans memory before it runs); the reference reads the operand itself."""

    name = "pad_v2"
    kind = "global"  # seed line 866

    def checked_inputs(self, node: Node) -> int:
        return 1  # paddings is INT32 on every chip (lines 864-865); infer checks that

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        check_vector_operand(ins[1], 2 * len(ins[0].shape), self.name, "paddings")
        return super().infer(ins[:1], params)

    def reference(self, arrays: list[ndarray], params: dict[str, Any], compute: dict[Any, Any] | None = None) -> list[ndarray]:
        return [_np_pad(arrays[0], arrays[1].tolist(), params)]


PAD_V2 = register(PadV2())


def pad_v2(tensor_i: Tensor, paddings: Tensor, pad_val: int, pad_mode: str = "PAD_CONSTANT", name: str | None = None) -> Tensor:
    """pad with paddings given as an int32 tensor whose values the graph knows."""
    params = {"pad_val": pad_val, "paddings": known_ints(paddings, "pad_v2", "paddings"), "pad_mode": _mode(pad_mode, "pad_v2")}
    return apply_one(PAD_V2, [tensor_i, paddings], params, name)


# ---- space_to_batch and batch_to_space ---------------------------------------------------------

def _phase(count: int, size: int, block: int, phase: int, before: int) -> tuple[int, int]:
    """[first, last): the indices q in [0, count) for which q * block + phase - before lies in
    [0, size) (one phase of a blocked axis against the other side's extent)."""
    first = min(max(-((phase - before) // block), 0), count)
    last = min(max((size - 1 + before - phase) // block + 1, first), count)
    return first, last


def _check_nchw(op: str, x: Spec, block: tuple[int, int], margins: tuple[int, ...], margin_name: str) -> None:
    if len(x.shape) != 4:
        raise ShapeError(f"{op}: tensor_i must be 4-d NCHW, got shape {x.shape}")
    if len(block) != 2 or any(b < 1 for b in block):
        raise ShapeError(f"{op}: block_size needs 2 values >= 1, got {list(block)}")
    if len(margins) != 4 or any(m < 0 for m in margins):
        raise ShapeError(f"{op}: {margin_name} needs 4 values >= 0, got {list(margins)}")


class SpaceToBatch(Arrangement):
    """Output batch (i * block_size[1] + j) * N + n holds rows i, i + bh, ... and columns j, j + bw,
    ... of image n padded with zeros (TensorFlow's order; the seed's example, line 871)."""

    name = "space_to_batch"
    kind = "global"  # seed line 874

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        x, block, p = ins[0], params["block_size"], params["pad"]
        _check_nchw(self.name, x, block, p, "pad")
        n, c, h, w = x.shape
        for axis, size, extra, b in ((2, h, p[0] + p[1], block[0]), (3, w, p[2] + p[3], block[1])):
            if (size + extra) % b:
                raise ShapeError(f"{self.name}: padded axis {axis} ({size} + {extra}) must be a multiple of block_size {b}")
        return [Spec((n * block[0] * block[1], c, (h + p[0] + p[1]) // block[0], (w + p[2] + p[3]) // block[1]), x.dtype)]

    def pieces(self, shapes: list[tuple[int, ...]], out_shape: tuple[int, ...], params: dict[str, Any]) -> list[Piece]:
        """Per phase (i, j): its batch block of the output, where the rows and columns that
        fall in the padding are filled with 0 and the rest read with strides (bh, bw)."""
        (n, c, h, w), (bh, bw), p = shapes[0], params["block_size"], params["pad"]
        oh, ow = out_shape[2:]
        src_st, dst_st = strides(shapes[0]), strides(out_shape)
        pieces = []
        for i in range(bh):
            for j in range(bw):
                axes = [[whole(n)], [whole(c)], _phased(oh, h, bh, i, p[0]), _phased(ow, w, bw, j, p[2])]
                pieces += assemble(axes, src_st, dst_st, value=0, dst_offset=(i * bw + j) * n * dst_st[0])
        return pieces

    def reference(self, arrays: list[ndarray], params: dict[str, Any], compute: dict[Any, Any] | None = None) -> list[ndarray]:
        (bh, bw), p = params["block_size"], params["pad"]
        x = np.pad(arrays[0], ((0, 0), (0, 0), (p[0], p[1]), (p[2], p[3])))
        n, c, h, w = x.shape
        y = x.reshape(n, c, h // bh, bh, w // bw, bw).transpose(3, 5, 0, 1, 2, 4)
        return [y.reshape(bh * bw * n, c, h // bh, w // bw)]


def _phased(count: int, size: int, block: int, phase: int, before: int) -> list[Segment]:
    """One phase of a padded axis as segments: fill, the input read `block` apart, fill."""
    first, last = _phase(count, size, block, phase, before)
    return [Segment(0, first), Segment(first, last - first, first * block + phase - before, block), Segment(last, count - last)]


SPACE_TO_BATCH = register(SpaceToBatch())


def space_to_batch(tensor_i: Tensor, block_size: list[int], pad: list[int], name: str | None = None) -> Tensor:
    """Move block_size[0] x block_size[1] phases of the zero-padded H and W into the batch."""
    params = {"block_size": ints(block_size, "space_to_batch", "block_size"), "pad": ints(pad, "space_to_batch", "pad")}
    return apply_one(SPACE_TO_BATCH, [tensor_i], params, name)


class BatchToSpace(Arrangement):
    """space_to_batch's inverse: out[n, c, h, w] is input batch (i * block_size[1] + j) * N + n at
    row (h + crop[0]) // bh, column (w + crop[2]) // bw, with i, j those sums' remainders."""

    name = "batch_to_space"
    kind = "global"  # seed line 890

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        x, block, crop = ins[0], params["block_size"], params["crop_size"]
        _check_nchw(self.name, x, block, crop, "crop_size")
        n, c, h, w = x.shape
        if n % (block[0] * block[1]):
            raise ShapeError(f"{self.name}: batch {n} must be a multiple of block_size[0] x block_size[1] = {block[0] * block[1]}")
        oh, ow = h * block[0] - crop[0] - crop[1], w * block[1] - crop[2] - crop[3]
        if oh < 1 or ow < 1:
            raise ShapeError(f"{self.name}: crop_size {list(crop)} crops the {h * block[0]}x{w * block[1]} result to {oh}x{ow}; "
                             "it must keep at least 1x1")
        return [Spec((n // (block[0] * block[1]), c, oh, ow), x.dtype)]

    def pieces(self, shapes: list[tuple[int, ...]], out_shape: tuple[int, ...], params: dict[str, Any]) -> list[Piece]:
        """Per phase (i, j): one transfer from its batch block into every bh-th row and bw-th
        column of the output, less the crop."""
        (_, c, h, w), (bh, bw), crop = shapes[0], params["block_size"], params["crop_size"]
        on, _, oh, ow = out_shape
        pieces = []
        for i in range(bh):
            for j in range(bw):
                (r0, r1), (q0, q1) = _phase(h, oh, bh, i, crop[0]), _phase(w, ow, bw, j, crop[2])
                shape = (on, c, r1 - r0, q1 - q0)
                src = View((i * bw + j) * on * c * h * w + r0 * w + q0, shape, (c * h * w, h * w, w, 1))
                dst = View((r0 * bh + i - crop[0]) * ow + q0 * bw + j - crop[2], shape, (c * oh * ow, oh * ow, bh * ow, bw))
                pieces.append(Piece(0, src, dst))
        return pieces

    def reference(self, arrays: list[ndarray], params: dict[str, Any], compute: dict[Any, Any] | None = None) -> list[ndarray]:
        (bh, bw), crop = params["block_size"], params["crop_size"]
        n, c, h, w = arrays[0].shape
        y = arrays[0].reshape(bh, bw, n // (bh * bw), c, h, w).transpose(2, 3, 4, 0, 5, 1).reshape(n // (bh * bw), c, h * bh, w * bw)
        return [y[:, :, crop[0]:h * bh - crop[1], crop[2]:w * bw - crop[3]]]


BATCH_TO_SPACE = register(BatchToSpace())


def batch_to_space(tensor_i: Tensor, block_size: list[int], crop_size: list[int], name: str | None = None) -> Tensor:
    """Move block_size[0] x block_size[1] batch blocks back into H and W, then crop."""
    params = {"block_size": ints(block_size, "batch_to_space", "block_size"), "crop_size": ints(crop_size, "batch_to_space", "crop_size")}
    return apply_one(BATCH_TO_SPACE, [tensor_i], params, name)
