"""The BMLang seed's vision ops (seed 002 lines 1204-1220): non-maximum suppression, one kernel on
the chip's scalar engine (sim/kernels/nms.py).

    nms(boxes, scores, threshold, stable=False)
    nms_v2(boxes, scores, iou_threshold, score_threshold, max_output_size, stable=False)

boxes [N, 4] float32 as [y1, x1, y2, x2], two opposite corners in either order; scores [N]
float32. The result is the int32 indices of the boxes kept, in the order they were kept:
greedily by descending score, a box is kept unless its IoU with a box kept before it is greater
than the threshold (tf.image.non_max_suppression: strictly greater, IoU 0 when either box has
no area, computed in float32 as TensorFlow's kernel does). nms_v2 first drops the boxes whose
score is not greater than score_threshold and stops after max_output_size boxes. `stable`
takes equal scores in index order; otherwise their order is the same run after run but not
specified. How many boxes are kept is the data's: the output's shape is an upper bound
(min(N, max_output_size),) and the run reports the shape produced.
"""

from numbers import Real
from typing import Any

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..graph import Tensor
from .arrange import integer
from .base import OpDef, Spec, TensorLike, apply_one, register
from .sorting import rank_key


def iou(a: np.ndarray, b: np.ndarray) -> np.float32:
    """IoU of two [y1, x1, y2, x2] float32 boxes, in float32, as TensorFlow's IOU()."""
    ay1, ay2, ax1, ax2 = min(a[0], a[2]), max(a[0], a[2]), min(a[1], a[3]), max(a[1], a[3])
    by1, by2, bx1, bx2 = min(b[0], b[2]), max(b[0], b[2]), min(b[1], b[3]), max(b[1], b[3])
    area_a, area_b = (ay2 - ay1) * (ax2 - ax1), (by2 - by1) * (bx2 - bx1)
    if area_a <= 0 or area_b <= 0:
        return np.float32(0)
    zero = np.float32(0)
    inter = max(min(ay2, by2) - max(ay1, by1), zero) * max(min(ax2, bx2) - max(ax1, bx1), zero)
    return inter / (area_a + area_b - inter)


def number(value: object, op: str, param: str) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise UnsupportedError(f"{op}: {param} must be a number, got {value!r}")
    return float(value)


class _Nms(OpDef):
    kind = "global"
    template = "scalar"

    def limits(self, params: dict[str, Any], n: int) -> tuple[float, float | None, int]:
        """(IoU threshold, score threshold or None, most boxes kept) of an instance."""
        raise NotImplementedError

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        if len(ins) != 2:
            raise ShapeError(f"{self.name}: takes boxes and scores, got {len(ins)} tensors")
        boxes, scores = ins
        if len(boxes.shape) != 2 or boxes.shape[1] != 4:
            raise ShapeError(f"{self.name}: boxes must have shape [num_boxes, 4], got {boxes.shape}")
        if scores.shape != boxes.shape[:1]:
            raise ShapeError(f"{self.name}: scores must have shape [num_boxes] = {list(boxes.shape[:1])}, got {scores.shape}")
        for what, spec in (("boxes", boxes), ("scores", scores)):
            if spec.dtype != "float32":
                raise UnsupportedError(f"{self.name}: {what} must be float32 (the seed), got {spec.dtype}")
        return [Spec((self.limits(params, boxes.shape[0])[2],), "int32", bounded=True)]

    def kernel(self, ins: list[Tensor], params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        iou_threshold, score_threshold, most = self.limits(params, ins[0].shape[0])
        args = {"iou_threshold": iou_threshold, "max_output_size": most, "stable": int(params["stable"])}
        if score_threshold is not None:
            args["score_threshold"] = score_threshold
        return "nms", args

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        """The greedy loop, box by box: candidates by descending score (equal ones in index
        order), each kept unless it overlaps a kept one by more than the threshold."""
        boxes, scores = arrays
        iou_threshold, score_threshold, most = self.limits(params, len(scores))
        above = [i for i in range(len(scores)) if score_threshold is None or scores[i] > np.float32(score_threshold)]
        kept: list[int] = []
        for i in sorted(above, key=lambda i: rank_key(scores[i]), reverse=True):
            if len(kept) == most:
                break
            if not any(iou(boxes[i], boxes[j]) > np.float32(iou_threshold) for j in kept):
                kept.append(i)
        return [np.array(kept, np.int32)]


class Nms(_Nms):
    name = "nms"

    def limits(self, params: dict[str, Any], n: int) -> tuple[float, float | None, int]:
        return params["threshold"], None, n


class NmsV2(_Nms):
    name = "nms_v2"

    def limits(self, params: dict[str, Any], n: int) -> tuple[float, float | None, int]:
        return params["iou_threshold"], params["score_threshold"], min(n, params["max_output_size"])


NMS = register(Nms())
NMS_V2 = register(NmsV2())


def nms(boxes: TensorLike, scores: TensorLike, threshold: float, stable: bool = False, name: str | None = None) -> Tensor:
    """Indices (int32) of the boxes non-maximum suppression keeps, in the order kept."""
    params = {"threshold": number(threshold, "nms", "threshold"), "stable": bool(stable)}
    return apply_one(NMS, [boxes, scores], params, name)


def nms_v2(boxes: TensorLike, scores: TensorLike, iou_threshold: float, score_threshold: float, max_output_size: int, stable: bool = False,
           name: str | None = None) -> Tensor:
    """As nms, over the boxes scoring above score_threshold, keeping at most max_output_size."""
    params = {"iou_threshold": number(iou_threshold, "nms_v2", "iou_threshold"),
              "score_threshold": number(score_threshold, "nms_v2", "score_threshold"),
              "max_output_size": integer(max_output_size, "nms_v2", "max_output_size", low=1), "stable": bool(stable)}
    return apply_one(NMS_V2, [boxes, scores], params, name)
