"""ONNX's NonMaxSuppression (opsets 11 on): one kernel on the chip's scalar engine
(sim/kernels/onnx_nms.py), as the seed's nms is, with ONNX's inputs and result.

    non_max_suppression(boxes [B, N, 4], scores [B, C, N], max_output_boxes_per_class,
                        iou_threshold=0.0, score_threshold=None, center_point_box=0)
        -> selected [K, 3] int64: (batch, class, box) rows

Per batch and class, boxes scoring above score_threshold (strictly; all when it is None) are
taken by descending score (equal scores in index order), each kept unless its IoU with a box
kept before it in that class is above iou_threshold, at most max_output_boxes_per_class of
them; the rows follow batch, then class, then the order kept. center_point_box 0 reads a box
as two opposite corners [y1, x1, y2, x2] in either order, 1 as [x_center, y_center, width,
height]. IoU is computed in the boxes' dtype and is 0 for boxes that do not overlap or have
no area (ONNX's reference). How many rows there are is the data's: the output's shape is an
upper bound, B * C * min(N, max_output_boxes_per_class) rows, and the run reports the rows
produced.
"""

from numbers import Integral, Real
from typing import Any

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..graph import Tensor
from .base import OpDef, Spec, TensorLike, apply_one, register

FLOATS = ("float32", "float16")


def corners(boxes: np.ndarray, center_point_box: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(y_min, x_min, y_max, x_max) columns of [..., 4] boxes."""
    if center_point_box:
        xc, yc, w, h = (boxes[..., i] for i in range(4))
        return yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2
    y, x = boxes[..., 0::2], boxes[..., 1::2]
    return y.min(axis=-1), x.min(axis=-1), y.max(axis=-1), x.max(axis=-1)


def select(boxes: np.ndarray, scores: np.ndarray, most: int, iou_threshold: float, score_threshold: float | None,
           center_point_box: int) -> np.ndarray:
    """The kept (batch, class, box) rows: the loop ONNX's reference runs, one class at a time."""
    rows = []
    threshold = boxes.dtype.type(iou_threshold)
    for b in range(boxes.shape[0]):
        y1, x1, y2, x2 = corners(boxes[b], center_point_box)
        area = (y2 - y1) * (x2 - x1)
        for c in range(scores.shape[1]):
            s = scores[b, c]
            candidates = [i for i in range(len(s)) if score_threshold is None or s[i] > s.dtype.type(score_threshold)]
            candidates.sort(key=lambda i: (-s[i], i))
            kept: list[int] = []
            for i in candidates:
                if len(kept) == most:
                    break
                ok = True
                for j in kept:
                    ih = min(y2[i], y2[j]) - max(y1[i], y1[j])
                    iw = min(x2[i], x2[j]) - max(x1[i], x1[j])
                    if ih <= 0 or iw <= 0:
                        continue
                    inter = ih * iw
                    union = area[i] + area[j] - inter
                    if area[i] <= 0 or area[j] <= 0 or union <= 0:
                        continue
                    if inter / union > threshold:
                        ok = False
                        break
                if ok:
                    kept.append(i)
                    rows.append((b, c, i))
    return np.array(rows, np.int64).reshape(-1, 3)


class NonMaxSuppression(OpDef):
    name = "non_max_suppression"
    kind = "global"
    template = "scalar"
    seed = "onnx"

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        if len(ins) != 2:
            raise ShapeError(f"non_max_suppression: takes boxes and scores, got {len(ins)} tensors")
        boxes, scores = ins
        if len(boxes.shape) != 3 or boxes.shape[2] != 4:
            raise ShapeError(f"non_max_suppression: boxes must have shape [batches, boxes, 4], got {boxes.shape}")
        if len(scores.shape) != 3 or scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
            raise ShapeError(f"non_max_suppression: scores must have shape [{boxes.shape[0]}, classes, {boxes.shape[1]}], "
                             f"got {scores.shape}")
        for what, spec in (("boxes", boxes), ("scores", scores)):
            if spec.dtype not in FLOATS:
                raise UnsupportedError(f"non_max_suppression: {what} must be {' or '.join(FLOATS)}, got {spec.dtype}")
        b, n, c = boxes.shape[0], boxes.shape[1], scores.shape[1]
        return [Spec((b * c * min(n, params["max_output_boxes_per_class"]), 3), "int64", bounded=True)]

    def kernel(self, ins: list[Tensor], params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        args = {k: params[k] for k in ("max_output_boxes_per_class", "iou_threshold", "center_point_box")}
        if params["score_threshold"] is not None:
            args["score_threshold"] = params["score_threshold"]
        return "non_max_suppression", args

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        boxes, scores = arrays
        return [select(boxes, scores, params["max_output_boxes_per_class"], params["iou_threshold"], params["score_threshold"],
                       params["center_point_box"])]


NON_MAX_SUPPRESSION = register(NonMaxSuppression())


def non_max_suppression(boxes: TensorLike, scores: TensorLike, max_output_boxes_per_class: int, iou_threshold: float = 0.0,
                        score_threshold: float | None = None,
                        center_point_box: int = 0, name: str | None = None) -> Tensor:
    """(batch, class, box) int64 rows of the boxes kept per batch and class (ONNX NonMaxSuppression)."""
    most = max_output_boxes_per_class
    if isinstance(most, bool) or not isinstance(most, Integral) or most < 1:
        raise UnsupportedError(f"non_max_suppression: max_output_boxes_per_class must be an integer >= 1 "
                               f"(0 selects nothing, and npusim tensors are not empty), got {most!r}")
    for what, value in (("iou_threshold", iou_threshold), ("score_threshold", score_threshold)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, Real)):
            raise UnsupportedError(f"non_max_suppression: {what} must be a number, got {value!r}")
    if center_point_box not in (0, 1):
        raise UnsupportedError(f"non_max_suppression: center_point_box must be 0 or 1, got {center_point_box!r}")
    params = {"max_output_boxes_per_class": int(most), "iou_threshold": float(iou_threshold),
              "score_threshold": None if score_threshold is None else float(score_threshold),
              "center_point_box": int(center_point_box)}
    return apply_one(NON_MAX_SUPPRESSION, [boxes, scores], params, name)
