"""Reductions and normalizations: the Reduce ops, ArgMax, ArgMin, TopK, Softmax, LogSoftmax,
Hardmax, BatchNormalization, LayerNormalization, InstanceNormalization, GroupNormalization,
LpNormalization, MeanVarianceNormalization, RMSNormalization.

npusim's reduce (sum, mean, max, min, prod over any axes) and softmax run them; the others are
compositions. TopK is a stable sort (ONNX puts the lower index first among equal values) and
the first k of each line. The normalizations compute in float32 for half-precision inputs.
BatchNormalization in inference after a Conv, ConvTranspose or Gemm is usually folded into its
weight and bias before mapping (bn_fold.py); one that is not is y = x * s + t per channel,
s = scale / sqrt(var + epsilon) and t = B - mean * s computed on the machine from the [C]
vectors. Those vector ops come, in graph order, between the convolution and the multiply-add,
so the multiply-add does not join the convolution's layer group (isa/lower/schedule/fusion.py extends
only the group just before). In training mode it is npusim's batch_norm with the batch's
statistics.
A reduction of no element is its identity (0 for a sum, -inf for a max ...), known from the
shapes.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .. import ops
from .builder import Rank0
from .elementwise import narrow, wide
from .registry import onnx_op
from .shape import axis_of, gather_axis

if TYPE_CHECKING:
    from collections.abc import Callable

    from onnx import NodeProto

    from ..graph import Tensor
    from .builder import Builder, Output

REDUCE_DTYPES = ("float32", "float16", "bfloat16", "int8", "uint8", "int16", "uint16")


def reduce(b: Builder, x: Tensor, method: str, axes: list[int], keep: bool) -> Tensor:
    """x reduced over axes; a bool goes through uint8 (max, min) exactly."""
    if x.dtype == "bool" and method in ("REDUCE_MAX", "REDUCE_MIN"):
        return ops.nes(ops.reduce(ops.cast(x, out_dtype="uint8"), method, axes, keep_dims=keep), 0, out_dtype="bool")
    if x.dtype not in REDUCE_DTYPES:
        raise b.error(f"{method.lower()} of {x.dtype} is not supported (npusim's reduce takes {', '.join(REDUCE_DTYPES)})")
    return ops.reduce(x, method, axes, keep_dims=keep)


def reduce_axes(b: Builder, rank: int) -> tuple[list[int], bool] | tuple[None, bool]:
    """(axes, keepdims) of a Reduce node, or (None, keep) for an identity (noop_with_empty_axes)."""
    axes: list[int] | None
    if b.has(1):
        axes = b.static_ints(1, "axes")
    else:
        given = b.attr("axes")
        axes = None if given is None else list(given)
    keep = bool(b.attr("keepdims", 1))
    if not axes:
        if b.attr("noop_with_empty_axes", 0):
            return None, keep
        axes = list(range(rank))
    return sorted({axis_of(b, a, rank) for a in axes}), keep


EMPTY = {"sum": 0, "l1": 0, "l2": 0, "sumsquare": 0, "prod": 1, "max": -np.inf, "min": np.inf, "mean": np.nan,
         "logsum": -np.inf, "logsumexp": -np.inf}  # what a reduction of no element gives (ONNX)
REDUCERS = {
    "ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min", "ReduceProd": "prod",
    "ReduceL1": "l1", "ReduceL2": "l2", "ReduceLogSum": "logsum", "ReduceLogSumExp": "logsumexp", "ReduceSumSquare": "sumsquare",
}


@onnx_op(*REDUCERS, static=(1,))
def reduce_op(b: Builder, node: NodeProto) -> Sequence[Output]:
    rank = b.rank(0)
    axes, keep = reduce_axes(b, rank)
    kind = REDUCERS[node.op_type]
    shape = b.shape(0)
    if 0 in shape:  # a reduction of no element is its identity, known from the shapes
        data = b.static(0, "data")
        if axes is None:  # the identity (noop_with_empty_axes) of an empty tensor: the tensor itself
            return [data]
        out = [1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes]
        dtype = data.dtype
        identity = EMPTY[kind] if dtype != np.bool_ else kind == "min"  # any() of nothing is False, all() True
        return [np.full(b.check_size(out, dtype, "the reduction of an empty tensor"), identity, dtype)]
    x = b.tensor(0)
    if axes is None:
        return [x]
    if kind == "mean" and x.dtype != "bool" and not x.dtype.startswith(("float", "bfloat")):
        # ONNX's integer mean truncates: the sum in float32 (exact below 2^24), divided, truncated
        count = int(np.prod([shape[a] for a in axes]))
        y = b.cast(ops.divs(reduce(b, ops.cast(x, out_dtype="float32"), "REDUCE_SUM", axes, keep), float(count)), x.dtype)
    elif kind in ("sum", "mean", "max", "min", "prod"):
        y = reduce(b, x, f"REDUCE_{kind.upper()}", axes, keep)
    elif kind == "l1":
        y = reduce(b, ops.active(x, "absval"), "REDUCE_SUM", axes, keep)
    elif kind == "sumsquare":
        y = reduce(b, ops.mul(x, x), "REDUCE_SUM", axes, keep)
    elif kind == "l2":
        y = narrow(ops.active(reduce(b, ops.mul(wide(b, x), wide(b, x)), "REDUCE_SUM", axes, keep), "sqrt"), x.dtype)
    elif kind == "logsum":
        y = ops.active(reduce(b, x, "REDUCE_SUM", axes, keep), "ln")
    else:  # log-sum-exp, shifted by the max so that large inputs do not overflow
        m = reduce(b, x, "REDUCE_MAX", axes, True)
        s = ops.active(reduce(b, ops.active(ops.sub(x, m), "exp"), "REDUCE_SUM", axes, True), "ln")
        y = ops.add(s, m)
        if not keep:
            y = b.reshape(y, [d for i, d in enumerate(y.shape) if i not in axes])
    out_rank = rank if keep else rank - len(axes)
    return [Rank0(y) if out_rank == 0 else y]


def _reverse(b: Builder, x: Tensor, axis: int) -> Tensor:
    return gather_axis(b, x, np.arange(x.shape[axis] - 1, -1, -1), axis)


@onnx_op("ArgMax", "ArgMin")
def arg(b: Builder, node: NodeProto) -> Sequence[Output]:
    x = b.tensor(0)
    rank = b.rank(0)
    axis = axis_of(b, b.attr("axis", 0), rank)
    last = b.attr("select_last_index", 0)
    src = _reverse(b, x, axis) if last else x
    idx = ops.arg(src, axis, "max" if node.op_type == "ArgMax" else "min")
    if last:
        idx = ops.rsubs(scalar=x.shape[axis] - 1, tensor_i=idx)
    idx = ops.cast(idx, out_dtype="int64")
    if b.attr("keepdims", 1):
        return [idx]
    shape = tuple(d for i, d in enumerate(idx.shape) if i != axis)
    return [Rank0(b.reshape(idx, ())) if not shape else b.reshape(idx, shape)]


@onnx_op("TopK", static=(1,))
def topk(b: Builder, node: NodeProto) -> Sequence[Output]:
    x = b.tensor(0)
    axis = axis_of(b, b.attr("axis", -1), len(x.shape))
    k = b.static_ints(1, "k")[0]
    if not 1 <= k <= x.shape[axis]:
        raise b.error(f"k = {k} must be in [1, {x.shape[axis]}] (npusim tensors are not empty)")
    index, values = ops.sort(x, axis, stable=True, descending=bool(b.attr("largest", 1)))
    if k < x.shape[axis]:
        end = [d if i != axis else k for i, d in enumerate(x.shape)]
        zeros, ones = [0] * len(x.shape), [1] * len(x.shape)
        index, values = ops.extract(index, zeros, end, ones), ops.extract(values, zeros, end, ones)
    return [values, ops.cast(index, out_dtype="int64")]


def softmax_axis(b: Builder, rank: int) -> int:
    default = -1 if b.opset >= 13 else 1
    return axis_of(b, b.attr("axis", default), rank)


def coerced(b: Builder, node: NodeProto, x: Tensor, fn: Callable[[Tensor, int], Tensor]) -> Tensor:
    """Before opset 13 Softmax, LogSoftmax and Hardmax work on x flattened to 2-D at axis."""
    axis = softmax_axis(b, len(x.shape))
    if b.opset >= 13:
        return fn(x, axis)
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    y = fn(b.reshape(x, (rows, int(np.prod(x.shape[axis:], dtype=np.int64)))), 1)
    return b.reshape(y, x.shape)


@onnx_op("Softmax")
def softmax(b: Builder, node: NodeProto) -> Sequence[Output]:
    return [coerced(b, node, b.tensor(0), lambda x, axis: ops.softmax(x, axis))]


@onnx_op("LogSoftmax")
def log_softmax(b: Builder, node: NodeProto) -> Sequence[Output]:
    x0 = b.tensor(0)

    def fn(x: Tensor, axis: int) -> Tensor:
        x = wide(b, x)
        s = ops.sub(x, ops.reduce(x, "REDUCE_MAX", [axis], keep_dims=True))
        return ops.sub(s, ops.active(ops.reduce(ops.active(s, "exp"), "REDUCE_SUM", [axis], keep_dims=True), "ln"))

    return [narrow(coerced(b, node, x0, fn), x0.dtype)]


@onnx_op("Hardmax")
def hardmax(b: Builder, node: NodeProto) -> Sequence[Output]:
    x0 = b.tensor(0)

    def fn(x: Tensor, axis: int) -> Tensor:
        idx = ops.arg(x, axis, "max")
        iota = b.const(np.arange(x.shape[axis], dtype=np.int32).reshape([-1 if i == axis else 1 for i in range(len(x.shape))]))
        return ops.cast(ops.eq(iota, idx, out_dtype="bool"), out_dtype=x.dtype)

    return [coerced(b, node, x0, fn)]


# ---- normalizations ----------------------------------------------------------------------------

def per_channel(b: Builder, t: Tensor, rank: int, axis: int = 1) -> Tensor:
    """A [C] vector as (1, C, 1, ...) against a rank-`rank` tensor."""
    return b.reshape(t, [t.shape[0] if i == axis else 1 for i in range(rank)])


def standardize(b: Builder, x: Tensor, axes: list[int], epsilon: float) -> tuple[Tensor, Tensor, Tensor]:
    """(x - mean) / sqrt(var + epsilon) over axes, with mean and 1 / sqrt(var + epsilon) kept."""
    mean = ops.reduce(x, "REDUCE_MEAN", axes, keep_dims=True)
    d = ops.sub(x, mean)
    var = ops.reduce(ops.mul(d, d), "REDUCE_MEAN", axes, keep_dims=True)
    inv = ops.rdivs(scalar=1.0, tensor_i=ops.active(ops.adds(var, float(epsilon)), "sqrt"))
    return ops.mul(d, inv), mean, inv


@onnx_op("BatchNormalization")
def batch_norm(b: Builder, node: NodeProto) -> Sequence[Output]:
    x0 = b.tensor(0)
    scale, bias, mean, var = (narrow(b.tensor(i), "float32") for i in (1, 2, 3, 4))
    eps = float(b.attr("epsilon", 1e-5))
    training = b.attr("training_mode", 0) if b.opset >= 14 else len([o for o in node.output if o]) > 1
    if not training:  # y = x * s + t per channel (when not folded at import: bn_fold.py)
        rank = len(x0.shape)
        s = ops.mul(scale, ops.rdivs(scalar=1.0, tensor_i=ops.active(ops.adds(var, eps), "sqrt")))
        t = ops.sub(bias, ops.mul(mean, s))
        s, t = (per_channel(b, narrow(v, x0.dtype), rank) for v in (s, t))
        return [ops.add(ops.mul(x0, s), t)]
    x = narrow(x0, "float32")
    y, batch_mean, batch_var = ops.batch_norm(x, mean, var, scale, bias, epsilon=eps, use_global_stats=False)
    momentum = float(b.attr("momentum", 0.9))
    running_mean = ops.axpy(batch_mean, 1 - momentum, ops.muls(mean, momentum))
    running_var = ops.axpy(batch_var, 1 - momentum, ops.muls(var, momentum))
    return [narrow(y, x0.dtype), narrow(running_mean, b.dtype(3)), narrow(running_var, b.dtype(4))]


def trailing_axes(b: Builder) -> tuple[Tensor, Tensor, list[int]]:
    """(input, input widened for the arithmetic, the axes from `axis` on) of LayerNormalization
    and RMSNormalization."""
    x0 = b.tensor(0)
    rank = len(x0.shape)
    return x0, wide(b, x0), list(range(axis_of(b, b.attr("axis", -1), rank), rank))


@onnx_op("LayerNormalization")
def layer_norm(b: Builder, node: NodeProto) -> Sequence[Output]:
    x0, x, axes = trailing_axes(b)
    y, mean, inv = standardize(b, x, axes, b.attr("epsilon", 1e-5))
    y = ops.mul(*b.bcast(y, wide(b, b.tensor(1))))
    if b.has(2):
        y = ops.add(*b.bcast(y, wide(b, b.tensor(2))))
    stash = "float32" if b.attr("stash_type", 1) == 1 else x0.dtype
    return [narrow(y, x0.dtype), narrow(mean, stash), narrow(inv, stash)]


@onnx_op("InstanceNormalization")
def instance_norm(b: Builder, node: NodeProto) -> Sequence[Output]:
    x0 = b.tensor(0)
    rank = len(x0.shape)
    x = wide(b, x0)
    y, _, _ = standardize(b, x, list(range(2, rank)), b.attr("epsilon", 1e-5))
    y = ops.add(ops.mul(y, per_channel(b, wide(b, b.tensor(1)), rank)), per_channel(b, wide(b, b.tensor(2)), rank))
    return [narrow(y, x0.dtype)]


@onnx_op("GroupNormalization")
def group_norm(b: Builder, node: NodeProto) -> Sequence[Output]:
    x0 = b.tensor(0)
    n, c = x0.shape[:2]
    groups = b.attr("num_groups")
    if c % groups:
        raise b.error(f"num_groups {groups} does not divide the {c} channels")
    x = wide(b, x0)
    grouped = b.reshape(x, (n, groups, int(np.prod(x0.shape[1:])) // groups))
    y, _, _ = standardize(b, grouped, [2], b.attr("epsilon", 1e-5))
    scale, bias = wide(b, b.tensor(1)), wide(b, b.tensor(2))
    if scale.shape[0] == groups and groups != c:  # opset 18: one scale and bias per group
        y = ops.add(ops.mul(y, b.reshape(scale, (1, groups, 1))), b.reshape(bias, (1, groups, 1)))
        return [narrow(b.reshape(y, x0.shape), x0.dtype)]
    y = b.reshape(y, x0.shape)
    rank = len(x0.shape)
    y = ops.add(ops.mul(y, per_channel(b, scale, rank)), per_channel(b, bias, rank))
    return [narrow(y, x0.dtype)]


@onnx_op("LpNormalization")
def lp_norm(b: Builder, node: NodeProto) -> Sequence[Output]:
    x0 = b.tensor(0)
    x = wide(b, x0)
    axis = axis_of(b, b.attr("axis", -1), len(x.shape))
    p = b.attr("p", 2)
    if p == 2:
        norm = ops.active(ops.reduce(ops.mul(x, x), "REDUCE_SUM", [axis], keep_dims=True), "sqrt")
    elif p == 1:
        norm = ops.reduce(ops.active(x, "absval"), "REDUCE_SUM", [axis], keep_dims=True)
    else:
        raise b.reject("p", p, "1 or 2")
    zero = b.full(0.0, "float32", len(x.shape))
    return [narrow(ops.condition_select(norm, ops.div(x, norm), zero), x0.dtype)]  # a zero norm gives 0 (ONNX)


@onnx_op("MeanVarianceNormalization")
def mvn(b: Builder, node: NodeProto) -> Sequence[Output]:
    """ONNX's function body: (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9)."""
    x0 = b.tensor(0)
    x = wide(b, x0)
    axes = [axis_of(b, a, len(x.shape)) for a in b.attr("axes", [0, 2, 3])]
    mean = ops.reduce(x, "REDUCE_MEAN", axes, keep_dims=True)
    var = ops.sub(ops.reduce(ops.mul(x, x), "REDUCE_MEAN", axes, keep_dims=True), ops.mul(mean, mean))
    return [narrow(ops.div(ops.sub(x, mean), ops.adds(ops.active(var, "sqrt"), 1e-9)), x0.dtype)]


@onnx_op("RMSNormalization")
def rms_norm(b: Builder, node: NodeProto) -> Sequence[Output]:
    x0, x, axes = trailing_axes(b)
    ms = ops.reduce(ops.mul(x, x), "REDUCE_MEAN", axes, keep_dims=True)
    y = ops.mul(x, ops.rdivs(scalar=1.0, tensor_i=ops.active(ops.adds(ms, float(b.attr("epsilon", 1e-5))), "sqrt")))
    y = ops.mul(*b.bcast(y, wide(b, b.tensor(1))))
    return [narrow(y, x0.dtype)]

