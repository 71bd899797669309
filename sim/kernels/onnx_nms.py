"""ONNX's NonMaxSuppression kernel (isa/ops/onnx_nms.py): per batch and class, the candidates
above score_threshold by descending score (equal ones in index order: a stable sort), then the
greedy loop: take the next live candidate, suppress every later one whose IoU with it is above
iou_threshold, stop after max_output_size boxes; (batch, class, box) int64 rows. IoU in the
boxes' dtype, 0 for boxes that do not overlap or have no area.

Work, in elements, from the shapes only (the worst case: nothing suppressed or dropped): per
batch and class, the sort of the N scores as sort's formula prices it plus one IoU test per
pair of a kept box (at most M = min(N, max_output_boxes_per_class)) and a candidate:
B * C * (N * max(1, ceil(log2 N)) * STABLE_COST + M * N).
"""

from typing import Any

import numpy as np

from . import kernel
from .sort import order, sort_work


def _work(srcs: list[tuple[int, ...]], dsts: list[tuple[int, ...]], args: dict[str, Any]) -> float:
    (b, n, _), c = srcs[0], srcs[1][1]
    most = min(n, args["max_output_boxes_per_class"])
    return b * c * (sort_work(1, n, True) + most * n)


def _corners(boxes: np.ndarray, center: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(y_min, x_min, y_max, x_max) columns of [N, 4] boxes."""
    if center:
        half_w, half_h = boxes[:, 2] / 2, boxes[:, 3] / 2
        return boxes[:, 1] - half_h, boxes[:, 0] - half_w, boxes[:, 1] + half_h, boxes[:, 0] + half_w
    y, x = boxes[:, 0::2], boxes[:, 1::2]
    return y.min(axis=1), x.min(axis=1), y.max(axis=1), x.max(axis=1)


@kernel("non_max_suppression", _work)
def non_max_suppression(arrays: list[np.ndarray], args: dict[str, Any]) -> list[np.ndarray]:
    boxes, scores = arrays
    most = args["max_output_boxes_per_class"]
    threshold = boxes.dtype.type(args["iou_threshold"])
    rows = []
    for b in range(boxes.shape[0]):
        y1, x1, y2, x2 = _corners(boxes[b], args["center_point_box"])
        area = (y2 - y1) * (x2 - x1)
        zero = boxes.dtype.type(0)
        for c in range(scores.shape[1]):
            s = scores[b, c]
            candidates = order(s, 0, descending=True, stable=True)
            if "score_threshold" in args:
                candidates = candidates[s[candidates] > s.dtype.type(args["score_threshold"])]
            live = np.ones(len(candidates), bool)
            kept = 0
            for p, i in enumerate(candidates):
                if kept == most:
                    break
                if not live[p]:
                    continue
                rows.append((b, c, i))
                kept += 1
                rest = candidates[p + 1:]
                ih = np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest])
                iw = np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest])
                inter = np.where((ih > zero) & (iw > zero), ih * iw, zero)
                union = area[i] + area[rest] - inter
                with np.errstate(divide="ignore", invalid="ignore"):
                    iou = np.where((inter > zero) & (area[i] > zero) & (area[rest] > zero) & (union > zero), inter / union, zero)
                live[p + 1:] &= ~(iou > threshold)
    return [np.array(rows, np.int64).reshape(-1, 3)]
