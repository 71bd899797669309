"""The non-maximum suppression kernel (nms and nms_v2): the candidates ordered by descending
score (sim/kernels/sort.py's order, stable or not), those not above score_threshold dropped
(nms_v2), then the greedy loop: take the next live candidate, suppress every later candidate
whose IoU with it is above iou_threshold, stop after max_output_size boxes. IoU in float32
as TensorFlow computes it (0 when either box has no area).

Work, in elements, from the shapes only (timing mode has no scores): the score sort of the N
boxes, as sort's formula prices it, plus one IoU test per pair of a kept box (at most M, the
output's bound) and a candidate: N * max(1, ceil(log2 N)) [* STABLE_COST] + M * N, the
worst case (no box suppressed, none below score_threshold).
"""

from typing import Any

import numpy as np

from . import kernel
from .sort import order, sort_work


def _work(srcs: list[tuple[int, ...]], dsts: list[tuple[int, ...]], args: dict[str, Any]) -> float:
    n = srcs[0][0]
    return sort_work(1, n, args["stable"]) + dsts[0][0] * n


def _corners(boxes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(y1, x1, y2, x2) columns with y1 <= y2 and x1 <= x2."""
    y, x = boxes[:, 0::2], boxes[:, 1::2]
    return y.min(axis=1), x.min(axis=1), y.max(axis=1), x.max(axis=1)


@kernel("nms", _work)
def nms(arrays: list[np.ndarray], args: dict[str, Any]) -> list[np.ndarray]:
    boxes, scores = arrays
    candidates = order(scores, 0, descending=True, stable=args["stable"])
    if "score_threshold" in args:
        candidates = candidates[scores[candidates] > np.float32(args["score_threshold"])]
    y1, x1, y2, x2 = _corners(boxes)
    area = (y2 - y1) * (x2 - x1)
    threshold = np.float32(args["iou_threshold"])
    live = np.ones(len(candidates), bool)
    kept = []
    for p, i in enumerate(candidates):
        if not live[p]:
            continue
        kept.append(i)
        if len(kept) == args["max_output_size"]:
            break
        rest = candidates[p + 1:]
        inter = (np.maximum(np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]), np.float32(0))
                 * np.maximum(np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]), np.float32(0)))
        with np.errstate(divide="ignore", invalid="ignore"):
            iou = np.where((area[i] > 0) & (area[rest] > 0), inter / (area[i] + area[rest] - inter), np.float32(0))
        live[p + 1:] &= ~(iou > threshold)
    return [np.array(kept, np.int32)]
