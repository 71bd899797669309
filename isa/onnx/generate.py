"""ONNX ops that make values: Constant, ConstantOfShape, Range, EyeLike (their values follow
from attributes and shapes, so they are constants, preloaded in DDR when an op reads them),
and RandomUniform, RandomNormal and their *Like forms (npusim's random_uniform and
random_normal on the scalar engine: Philox4x32-10 keyed by the node's seed, 0 when it has none;
ONNX leaves the generator to the implementation, so the numbers are npusim's own).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .. import dtypes, ops
from .builder import dtype_of
from .registry import onnx_op
from .store import constant_value

if TYPE_CHECKING:
    from onnx import NodeProto

    from .builder import Builder, Output


@onnx_op("Constant")
def constant(b: Builder, node: NodeProto) -> Sequence[Output]:
    if not node.attribute:
        raise b.error("Constant has no value attribute")
    value = constant_value(node, b.values.weights.folder, b.values.weights.where)
    if value is None:
        raise b.reject(node.attribute[0].name, "...", "npusim has no string or sparse tensors")
    return [value]


@onnx_op("ConstantOfShape", static=(0,))
def constant_of_shape(b: Builder, node: NodeProto) -> Sequence[Output]:
    shape = tuple(b.static_ints(0, "shape"))
    value = b.attr("value")
    value = np.zeros(1, np.float32) if value is None else value
    return [np.full(b.check_size(shape, value.dtype, "the result"), value.reshape(-1)[0], value.dtype)]


@onnx_op("Range", static=(0, 1, 2))
def range_op(b: Builder, node: NodeProto) -> Sequence[Output]:
    start, limit, delta = (b.static(i, what).reshape(()) for i, what in enumerate(("start", "limit", "delta")))
    if delta == 0:
        raise b.error("delta is 0")
    if not all(np.isfinite(v) for v in (start, limit, delta)):
        raise b.error(f"start {start}, limit {limit} and delta {delta} must be finite")
    n = max(math.ceil((float(limit) - float(start)) / float(delta)), 0)
    dtype = start.dtype
    b.check_size((n,), np.float64, "the range")
    if dtype.kind in "iu":
        return [(np.arange(n, dtype=np.int64) * int(delta) + int(start)).astype(dtype)]
    return [(start + np.arange(n, dtype=np.float64).astype(dtype) * delta).astype(dtype)]


@onnx_op("EyeLike")
def eye_like(b: Builder, node: NodeProto) -> Sequence[Output]:
    shape = b.shape(0)
    if len(shape) != 2:
        raise b.error(f"EyeLike takes a 2-D input, got shape {shape}")
    dtype = dtype_of(b.attr("dtype"), f"{b.where()}: attribute dtype") if b.attr("dtype") is not None else b.dtype(0)
    b.check_size(shape, dtypes.np_dtype(dtype), "the result")
    return [np.eye(shape[0], shape[1], b.attr("k", 0), dtypes.np_dtype(dtype))]


@onnx_op("RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike")
def random(b: Builder, node: NodeProto) -> Sequence[Output]:
    like = node.op_type.endswith("Like")
    if like:
        shape = b.shape(0)
        dtype = dtype_of(b.attr("dtype"), f"{b.where()}: attribute dtype") if b.attr("dtype") is not None else b.dtype(0)
    else:
        shape = tuple(b.attr("shape"))
        dtype = dtype_of(b.attr("dtype", 1), f"{b.where()}: attribute dtype")
    seed = b.attr("seed")
    if seed is not None and not float(seed).is_integer():
        raise b.reject("seed", seed, "npusim's generators take an integer seed")
    seed = 0 if seed is None else int(seed)
    if node.op_type.startswith("RandomUniform"):
        out = ops.random_uniform(shape, float(b.attr("low", 0.0)), float(b.attr("high", 1.0)), dtype, seed, graph=b.g)
    else:
        out = ops.random_normal(shape, float(b.attr("mean", 0.0)), float(b.attr("scale", 1.0)), dtype, seed, graph=b.g)
    return [out]
