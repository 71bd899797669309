"""batch_norm of the seed (NN/Matrix Operator), run by the reduction template: its tiles split
the channels (dimension 1) and keep N and the spatial dimensions whole.

    batch_norm(tensor_i, mean_i, variance_i[, gamma, beta], epsilon=1e-5, use_global_stats=True,
               scale=1.0, method="BATCH_NORM") -> (tensor_o, mean_o, variance_o)

The seed's tensor_i is the vector (x, mean, variance[, gamma, beta]): pass the tensors one by
one or as one list. x is NCHW (any rank >= 2 with C at dimension 1), FLOAT32; the others have
shape [C]; without gamma and beta they are taken as ones and zeros. The seed says "see the
frameworks' batch_norm"; this is Caffe's BatchNorm followed by a Scale layer:

- use_global_stats: the given statistics, divided by `scale` (Caffe's moving-average
  normalizer, blobs_[2]): mean_o = mean_i * (1 / scale), variance_o = variance_i * (1 / scale),
  with the factor a float32 as Caffe's; a scale of 0 gives a factor of 0, which zeroes both
  statistics, as Caffe's layer (batch_norm_layer.cpp) and MNN's converter do.
- otherwise: the batch's statistics over N and the spatial dimensions, mean_o = sum / count
  and variance_o = sum((x - mean_o)^2) / count (biased: the variance the frameworks normalize
  with; Caffe's running average alone corrects it by count / (count - 1)).

tensor_o = (x - mean_o) / sqrt(variance_o + epsilon) * gamma + beta, in float32; the machine
folds gamma / sqrt(variance_o + epsilon) per channel first, so it may differ from this
reference in the last bits.
"""

from typing import Any

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..graph import Tensor
from .base import Spec, TensorLike, outputs, register
from .reduce import Reduction, reduced_last, trailing

F32 = "float32"
NAMES = ("tensor_i", "mean_i", "variance_i", "gamma", "beta")


def stat_factor(scale: float) -> float:
    """What the given statistics are multiplied by: float32 1 / scale, or 0 for a scale of 0 (Caffe)."""
    return 0.0 if scale == 0 else float(np.float32(1) / np.float32(scale))


class BatchNorm(Reduction):
    name = "batch_norm"

    def reduced_axes(self, shape: tuple[int, ...], params: dict[str, Any]) -> tuple[int, ...]:
        return tuple(i for i in range(len(shape)) if i != 1)

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        if len(ins) not in (3, 5):
            raise ShapeError(f"batch_norm: tensor_i must hold 3 or 5 tensors (x, mean, variance[, gamma, beta]), got {len(ins)}")
        x = ins[0]
        if len(x.shape) < 2:
            raise ShapeError(f"batch_norm: x must be NCHW (C is dimension 1), got shape {x.shape}")
        for spec, what in zip(ins, NAMES):
            if spec.dtype != F32:
                raise UnsupportedError(f"batch_norm: {what} is {spec.dtype}; batch_norm takes float32")
        c = x.shape[1]
        for spec, what in zip(ins[1:], NAMES[1:]):
            if spec.shape != (c,):
                raise ShapeError(f"batch_norm: {what} must have shape ({c},) (the channels of {x.shape}), got {spec.shape}")
        if params["method"] != "BATCH_NORM":
            raise UnsupportedError(f"batch_norm: method {params['method']!r} is not supported (only BATCH_NORM)")
        if params.get("out_dtype") not in (None, F32):
            raise UnsupportedError(f"batch_norm: the outputs are float32, got out_dtype {params['out_dtype']}")
        if not params["epsilon"] >= 0:
            raise UnsupportedError(f"batch_norm: epsilon must be >= 0, got {params['epsilon']}")
        return [Spec(x.shape, F32), Spec((c,), F32), Spec((c,), F32)]

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        x = arrays[0].astype(np.float32)
        c = x.shape[1]
        gamma = arrays[3] if len(arrays) == 5 else np.ones(c, np.float32)
        beta = arrays[4] if len(arrays) == 5 else np.zeros(c, np.float32)
        axes = self.reduced_axes(x.shape, params)
        per_channel = (1, c) + (1,) * (x.ndim - 2)
        if params["use_global_stats"]:
            factor = np.float32(stat_factor(params["scale"]))
            mean, var = arrays[1] * factor, arrays[2] * factor
        else:
            count = np.float32(1 / (x.size // c))
            dims = trailing(x, len(axes))  # summed in the machine's order: C first, then the rest
            mean = reduced_last(x, axes).sum(axis=dims) * count
            var = reduced_last(np.square(x - mean.reshape(per_channel)), axes).sum(axis=dims) * count
        with np.errstate(all="ignore"):  # IEEE answers (a zero variance without epsilon) are the answers
            std = np.sqrt(var + np.float32(params["epsilon"]))
            y = (x - mean.reshape(per_channel)) / std.reshape(per_channel) * gamma.reshape(per_channel) + beta.reshape(per_channel)
        return [y.astype(np.float32), mean.astype(np.float32), var.astype(np.float32)]


BATCH_NORM = register(BatchNorm())


def batch_norm(tensor_i: TensorLike | list[TensorLike] | tuple[TensorLike, ...], *more: TensorLike, epsilon: float = 1e-5,
               use_global_stats: bool = True, scale: float = 1.0, method: str = "BATCH_NORM", out_dtype: str | None = None,
               name: str | None = None) -> tuple[Tensor, ...]:
    """Batch normalization of x with mean, variance[, gamma, beta]; returns
    (tensor_o, mean_o, variance_o)."""
    tensors = list(tensor_i) if isinstance(tensor_i, (list, tuple)) else [tensor_i]
    tensors += list(more)
    for t, what in zip(tensors, NAMES):
        if not isinstance(t, (Tensor, np.ndarray)):
            raise ShapeError(f"batch_norm: {what} must be a Tensor, got {type(t).__name__}")
    for value, what in ((epsilon, "epsilon"), (scale, "scale")):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise UnsupportedError(f"batch_norm: {what} must be a number, got {value!r}")
    params = {
        "epsilon": float(epsilon), "use_global_stats": bool(use_global_stats), "scale": float(scale),
        "method": str(method).upper(), "out_dtype": out_dtype,
    }
    return outputs(BATCH_NORM, tensors, params, name)
