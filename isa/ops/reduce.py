"""Reduction-shaped ops of the seed: reduce, softmax, softmax_int, hw_avg and hw_mul. All run
by the reduction template (isa/lower/templates/reduce.py): a tile keeps every reduced axis whole and
the tiles split the other (kept) axes; each op's `reduced_axes` names the axes of its input 0
that are reduced.

    reduce(tensor_i, method="REDUCE_MEAN", axis_list, axis_num=None, keep_dims=True)
        REDUCE_SUM / MAX / MIN / PROD / MEAN over the axes of axis_list (any order, negative
        axes count from the end; axis_num, when given, takes its first axis_num entries as the
        seed's C array does). keep_dims leaves the reduced axes as size 1, else they go; a
        reduction of every axis without keep_dims gives shape (1,) (a tensor keeps a dimension).
        Floats (float32, float16, bfloat16) compute in float32 and store in their dtype; the
        mean is the sum times float32(1 / count). Integers (int8, uint8, int16, uint16) are
        exact, then saturate: the sum in int64; the mean is sum / count rounded half to even
        (numpy's rint, IEEE's default conversion, as every float -> int store in npusim does;
        the seed does not say); max and min exact; the product saturates (computed in float32,
        which is exact for any result a 16-bit or narrower dtype can hold, see the template).
    softmax(tensor_i, axis)
        exp(x - max) / sum(exp(x - max)) over one axis, in float32 (float inputs).
    softmax_int(inputs, table, scale, zero_point)
        over C (dimension 1) of an INT8/UINT8 NC or NCHW tensor, the seed's formula:
            max_val = max over C; t = table[max_val - x] (256 float entries, max_val - x in 0..255)
            prob = t / sum over C of t (float32)
            output = saturate(int(round(prob * scale)) + zero_point), round halves away from zero (C's)
        in the input's dtype. The table travels as a float32 [256] graph constant (input 1).
    hw_avg(tensor_i, tensor_hw, mode)
        hw = tensor_hw[0] * tensor_hw[1] (tensor_hw has shape [2]), then per element
            mode 0: float(input) / hw                               -> float32
            mode 1: int(round(float(input) / hw)), round half up     -> the input dtype
            mode 2: int(round(float(input) / hw)), half away from 0  -> the input dtype
        float(input) / hw is float32 (C's float / int); the product hw is an int32 (saturating).
        Half up is exact (floor(q + 1/2) of the float32 quotient q); half away from zero is the
        vector unit's `round` (isa.dtypes.round_half_away, as every op rounding "like C" uses).
    hw_mul(tensor_i, scale)
        tensor_i[0] * tensor_i[1] * scale (tensor_i has shape [2]): the int32 product (saturating)
        times scale in float32, a float32 tensor of shape [1].

hw_avg and hw_mul are reductions of a [2] tensor (a product of its two entries), so they run
on the reduction template too; they do not fuse with element-wise ops around them.
"""

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import ShapeError, UnsupportedError
from ..graph import Node, Tensor
from .base import OpDef, Spec, TensorLike, apply_one, register

F32 = "float32"
FLOATS = ("float32", "float16", "bfloat16")
METHODS = ("REDUCE_MEAN", "REDUCE_SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD")
REDUCE_DTYPES = FLOATS + ("int8", "uint8", "int16", "uint16")
HW_INTS = ("int8", "uint8", "int16", "uint16", "int32", "uint32")
REDUCERS: dict[str, Callable[..., Any]] = {"REDUCE_SUM": np.sum, "REDUCE_MEAN": np.sum, "REDUCE_MAX": np.max, "REDUCE_MIN": np.min,
                                          "REDUCE_PROD": np.prod}  # the references' numpy reductions (the mean divides after)


def normalize_axes(op: str, axes: Sequence[int | np.integer], shape: tuple[int, ...]) -> tuple[int, ...]:
    """Axes of a tensor of `shape` as sorted non-negative ints; negative ones count from the
    end. An axis out of range or named twice is a ShapeError naming the op."""
    rank = len(shape)
    out = []
    for a in axes:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
            raise ShapeError(f"{op}: axis {a!r} is not an integer")
        if not -rank <= a < rank:
            raise ShapeError(f"{op}: axis {a} is out of range for a rank-{rank} tensor of shape {shape} (axes are {-rank}..{rank - 1})")
        a = int(a) % rank
        if a in out:
            raise ShapeError(f"{op}: axis {a} is named twice in {list(axes)}")
        out.append(a)
    return tuple(sorted(out))


def reduced_last(x: np.ndarray, axes: Sequence[int]) -> np.ndarray:
    """x with its `axes` moved last (the others keep their order), as a contiguous array: the
    layout the reduction template gives a tile in local memory, so a reference that reduces it
    over its trailing axes adds in the machine's order."""
    kept = tuple(i for i in range(x.ndim) if i not in axes)
    return np.ascontiguousarray(np.transpose(x, kept + tuple(axes)))


def trailing(array: np.ndarray, count: int) -> tuple[int, ...]:
    return tuple(range(array.ndim - count, array.ndim))


def _check_out_dtype(op: str, params: dict[str, Any], dtype: str) -> str:
    if params.get("out_dtype") not in (None, dtype):
        raise UnsupportedError(f"{op}: the output dtype is {dtype}, got out_dtype {params['out_dtype']}")
    return dtype


def _number(op: str, what: str, value: object) -> float:
    """value as a Python float (so an instruction's text form holds a plain number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise UnsupportedError(f"{op}: {what} must be a number, got {value!r}")
    return float(value)


def _check_count(op: str, ins: list[Spec], count: int, names: Sequence[str]) -> None:
    if len(ins) != count:
        raise ShapeError(f"{op}: takes {', '.join(names)}, got {len(ins)} tensor(s)")


class Reduction(OpDef):
    """An op of the reduction template."""

    kind = "local"
    template = "reduce"

    def reduced_axes(self, shape: tuple[int, ...], params: dict[str, Any]) -> tuple[int, ...]:
        """The axes of input 0 (of `shape`) that the op reduces."""
        raise NotImplementedError


# ---- reduce ----------------------------------------------------------------------------------

class Reduce(Reduction):
    name = "reduce"

    def reduced_axes(self, shape: tuple[int, ...], params: dict[str, Any]) -> tuple[int, ...]:
        return normalize_axes("reduce", params["axis_list"], shape)

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        _check_count("reduce", ins, 1, ["tensor_i"])
        x = ins[0]
        if params["method"] not in METHODS:
            raise UnsupportedError(f"reduce: unknown method {params['method']!r}; known: {', '.join(METHODS)}")
        if x.dtype not in REDUCE_DTYPES:
            raise UnsupportedError(f"reduce: tensor_i is {x.dtype}; reduce takes {', '.join(REDUCE_DTYPES)}")
        if not params["axis_list"]:
            raise ShapeError(f"reduce: axis_list is empty; name at least one axis of {x.shape}")
        axes = self.reduced_axes(x.shape, params)
        return [Spec(self.out_shape(x.shape, axes, params["keep_dims"]), _check_out_dtype("reduce", params, x.dtype))]

    @staticmethod
    def out_shape(shape: tuple[int, ...], axes: Sequence[int], keep_dims: bool) -> tuple[int, ...]:
        if keep_dims:
            return tuple(1 if i in axes else n for i, n in enumerate(shape))
        return tuple(n for i, n in enumerate(shape) if i not in axes) or (1,)

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        x = arrays[0]
        out = self.infer([Spec(x.shape, dtypes.of_array(x))], params)[0]
        axes = self.reduced_axes(x.shape, params)
        lay = reduced_last(x, axes)
        dims, n, method = trailing(lay, len(axes)), int(np.prod([x.shape[a] for a in axes])), params["method"]
        if dtypes.is_float(out.dtype):
            v = lay.astype(np.float32)
            fn = REDUCERS[method]
            result = np.asarray(fn(v, axis=dims), np.float32)
            if method == "REDUCE_MEAN":
                result = result * np.float32(1 / n)
        elif method == "REDUCE_PROD":  # the exact product (Python integers), then saturated
            lo, hi = dtypes.int_range(out.dtype)
            exact = np.asarray(np.prod(lay.astype(object), axis=dims), object)
            result = np.asarray(np.clip(exact, lo, hi), object).astype(np.int64)
        else:
            v = lay.astype(np.int64)
            fn = REDUCERS[method]  # not REDUCE_PROD, exact above
            result = np.asarray(fn(v, axis=dims))
            if method == "REDUCE_MEAN":
                result = np.rint(result / n)  # half to even
        return [dtypes.convert(np.asarray(result).reshape(out.shape), out.dtype)]


REDUCE = register(Reduce())


def reduce(tensor_i: Tensor, method: str = "REDUCE_MEAN", axis_list: int | Sequence[int] | None = None, axis_num: int | None = None,
           keep_dims: bool = True, *,
           out_dtype: str | None = None, name: str | None = None) -> Tensor:
    """Reduce tensor_i over the axes of axis_list by REDUCE_MEAN, REDUCE_SUM, REDUCE_MAX,
    REDUCE_MIN or REDUCE_PROD; keep_dims leaves them as size-1 dimensions."""
    if not isinstance(tensor_i, Tensor):
        raise ShapeError(f"reduce: tensor_i must be a Tensor, got {type(tensor_i).__name__}")
    axes = [axis_list] if isinstance(axis_list, (int, np.integer)) else list(axis_list or [])
    if axis_num is not None:
        if isinstance(axis_num, bool) or not isinstance(axis_num, (int, np.integer)) or not 0 < axis_num <= len(axes):
            raise ShapeError(f"reduce: axis_num {axis_num!r} must be in 1..{len(axes)} (the length of axis_list {axes})")
        axes = axes[:axis_num]
    params: dict[str, Any] = {
        "method": str(method).upper(),
        "axis_list": normalize_axes("reduce", axes, tensor_i.shape),
        "keep_dims": bool(keep_dims),
        "out_dtype": out_dtype,
    }
    if params["method"] not in METHODS and "REDUCE_" + params["method"] in METHODS:
        params["method"] = "REDUCE_" + params["method"]  # "sum", "MEAN" ...
    return apply_one(REDUCE, [tensor_i], params, name)


# ---- softmax ---------------------------------------------------------------------------------

class Softmax(Reduction):
    name = "softmax"

    def reduced_axes(self, shape: tuple[int, ...], params: dict[str, Any]) -> tuple[int, ...]:
        return normalize_axes("softmax", [params["axis"]], shape)

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        _check_count("softmax", ins, 1, ["tensor_i"])
        x = ins[0]
        if x.dtype not in FLOATS:
            raise UnsupportedError(f"softmax: tensor_i is {x.dtype}; softmax takes {', '.join(FLOATS)}")
        self.reduced_axes(x.shape, params)
        return [Spec(x.shape, _check_out_dtype("softmax", params, x.dtype))]

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        x = arrays[0]
        (axis,) = self.reduced_axes(x.shape, params)
        lay = reduced_last(x.astype(np.float32), (axis,))
        with np.errstate(all="ignore"):
            e = np.exp(lay - lay.max(axis=-1, keepdims=True))
            y = e / e.sum(axis=-1, keepdims=True)
        return [np.moveaxis(y, -1, axis).astype(x.dtype)]


SOFTMAX = register(Softmax())


def softmax(tensor_i: Tensor, axis: int, *, out_dtype: str | None = None, name: str | None = None) -> Tensor:
    """The normalized exponential of tensor_i along axis."""
    if not isinstance(tensor_i, Tensor):
        raise ShapeError(f"softmax: tensor_i must be a Tensor, got {type(tensor_i).__name__}")
    (axis,) = normalize_axes("softmax", [axis], tensor_i.shape)
    return apply_one(SOFTMAX, [tensor_i], {"axis": axis, "out_dtype": out_dtype}, name)


# ---- softmax_int -----------------------------------------------------------------------------

class SoftmaxInt(Reduction):
    name = "softmax_int"

    def reduced_axes(self, shape: tuple[int, ...], params: dict[str, Any]) -> tuple[int, ...]:
        return (1,)

    def checked_inputs(self, node: Node) -> int:
        return 1  # the table is the op's own constant

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        _check_count("softmax_int", ins, 2, ["inputs", "the table"])
        x, table = ins
        if x.dtype not in ("int8", "uint8"):
            raise UnsupportedError(f"softmax_int: inputs is {x.dtype}; it must be int8 or uint8")
        if len(x.shape) < 2:
            raise ShapeError(f"softmax_int: inputs must be NC or NCHW (C is dimension 1), got shape {x.shape}")
        if table.shape != (256,) or table.dtype != F32:
            raise ShapeError(f"softmax_int: the table must be float32 with 256 entries, got {table.dtype}{list(table.shape)}")
        _number("softmax_int", "scale", params["scale"])
        _number("softmax_int", "zero_point", params["zero_point"])
        return [Spec(x.shape, _check_out_dtype("softmax_int", params, x.dtype))]

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        x, table = arrays
        lay = reduced_last(x.astype(np.int64), (1,))
        t = table.reshape(-1).astype(np.float32)[lay.max(axis=-1, keepdims=True) - lay]
        with np.errstate(all="ignore"):
            prob = t / t.sum(axis=-1, keepdims=True)
            scaled = prob * np.float32(params["scale"])
        v = dtypes.convert(dtypes.round_half_away(scaled), "int32").astype(np.int64) + int(params["zero_point"])
        return [dtypes.convert(np.moveaxis(v, -1, 1), dtypes.of_array(x))]


SOFTMAX_INT = register(SoftmaxInt())


def softmax_int(inputs: Tensor, table: TensorLike | Sequence[float], scale: float = 1.0, zero_point: int = 0, *,
                out_dtype: str | None = None, name: str | None = None) -> Tensor:
    """Fixed-point softmax over C: a 256-entry exp table indexed by max - x, then
    saturate(int(round(prob * scale)) + zero_point) in the input's dtype."""
    if not isinstance(inputs, Tensor):
        raise ShapeError(f"softmax_int: inputs must be a Tensor, got {type(inputs).__name__}")
    operand: TensorLike = table if isinstance(table, Tensor) else np.asarray(table, dtype=np.float64).reshape(-1)
    if isinstance(operand, np.ndarray) and operand.size != 256:
        raise ShapeError(f"softmax_int: the table must have 256 entries, got {operand.size}")
    if isinstance(zero_point, bool) or not isinstance(zero_point, (int, np.integer)):
        raise UnsupportedError(f"softmax_int: zero_point must be an integer, got {zero_point!r}")
    params = {"scale": _number("softmax_int", "scale", scale), "zero_point": int(zero_point), "out_dtype": out_dtype}
    return apply_one(SOFTMAX_INT, [inputs, operand if isinstance(operand, Tensor) else operand.astype(np.float32)], params, name)


# ---- hw_avg and hw_mul -----------------------------------------------------------------------

class HwAvg(Reduction):
    name = "hw_avg"
    variants = ("mode0", "mode1", "mode2")

    def variant(self, params: dict[str, Any]) -> str:
        return f"mode{params['mode']}"

    def reduced_axes(self, shape: tuple[int, ...], params: dict[str, Any]) -> tuple[int, ...]:
        return ()  # input 0 is divided element-wise; the reduction is of tensor_hw

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        _check_count("hw_avg", ins, 2, ["tensor_i", "tensor_hw"])
        x, hw = ins
        mode = params["mode"]
        if isinstance(mode, bool) or mode not in (0, 1, 2):
            raise UnsupportedError(f"hw_avg: mode must be 0, 1 or 2, got {mode!r}")
        if x.dtype not in HW_INTS:
            raise UnsupportedError(f"hw_avg: tensor_i is {x.dtype}; it must be an integer ({', '.join(HW_INTS)})")
        if hw.shape != (2,) or hw.dtype not in HW_INTS:
            raise ShapeError(f"hw_avg: tensor_hw must be an integer tensor of shape [2] (H, W), got {hw.dtype}{list(hw.shape)}")
        return [Spec(x.shape, _check_out_dtype("hw_avg", params, F32 if mode == 0 else x.dtype))]

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        x, hw = arrays
        out = self.infer([Spec(a.shape, dtypes.of_array(a)) for a in arrays], params)[0]
        area = dtypes.convert(np.int64(hw[0]) * np.int64(hw[1]), "int32")
        with np.errstate(all="ignore"):
            q = x.astype(np.float32) / np.float32(area)
            if params["mode"] == 1:
                q = np.floor(q.astype(np.float64) + 0.5)  # half up, exactly
            elif params["mode"] == 2:
                q = dtypes.round_half_away(q)
        return [dtypes.convert(q, out.dtype)]


HW_AVG = register(HwAvg())


def hw_avg(tensor_i: Tensor, tensor_hw: Tensor, mode: int = 0, *, out_dtype: str | None = None, name: str | None = None) -> Tensor:
    """tensor_i / (tensor_hw[0] * tensor_hw[1]): mode 0 as float32; mode 1 rounded half up and
    mode 2 rounded half away from zero, in tensor_i's dtype."""
    return apply_one(HW_AVG, [tensor_i, tensor_hw], {"mode": mode, "out_dtype": out_dtype}, name)


class HwMul(Reduction):
    name = "hw_mul"

    def reduced_axes(self, shape: tuple[int, ...], params: dict[str, Any]) -> tuple[int, ...]:
        return (0,)

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        _check_count("hw_mul", ins, 1, ["tensor_i"])
        x = ins[0]
        if x.shape != (2,) or x.dtype not in HW_INTS:
            raise ShapeError(f"hw_mul: tensor_i must be an integer tensor of shape [2] (H, W), got {x.dtype}{list(x.shape)}")
        _number("hw_mul", "scale", params["scale"])
        return [Spec((1,), _check_out_dtype("hw_mul", params, F32))]

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        x = arrays[0]
        area = dtypes.convert(np.int64(x[0]) * np.int64(x[1]), "int32")
        return [np.asarray([np.float32(area) * np.float32(params["scale"])], np.float32)]


HW_MUL = register(HwMul())


def hw_mul(tensor_i: Tensor, scale: float, *, out_dtype: str | None = None, name: str | None = None) -> Tensor:
    """tensor_i[0] * tensor_i[1] * scale as a float32 [1] tensor (tensor_i holds H and W)."""
    return apply_one(HW_MUL, [tensor_i], {"scale": _number("hw_mul", "scale", scale), "out_dtype": out_dtype}, name)
