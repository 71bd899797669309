"""Element-wise ONNX ops: arithmetic, compare, logic, bitwise, activations, hyperbolic
functions, Cast, Where, Clip, Identity, Dropout (inference).

One mapping serves each family through a table of ONNX op type -> npusim op; the ops ONNX has
and npusim lacks are compositions of npusim's element-wise ops (they fuse into one layer group
on the machine). Operands of different ranks are first reshaped to one rank (numpy's
broadcast: leading 1s), which runs no instruction.

Where npusim's semantics differ from ONNX's, the importer composes ONNX's, so the machine gives
ONNX's numbers: integer Div truncates and integer Mod takes the divisor's sign (exact integer
steps), Round rounds halves to even, Cast truncates a float to an integer and keeps the low bits of an
integer out of a narrower type's range, a left BitShift drops the bits shifted out. Two
differences remain, documented rather than hidden: integer arithmetic saturates where ONNX's
wraps around (an int8 100 + 100 is 127, not -56), and Erf is a polynomial (Abramowitz and
Stegun 7.1.26 above |x| = 0.5, its Taylor series below: within 2e-7 of erf in float32).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .. import dtypes, ops
from .builder import DTYPES, Rank0, dtype_of
from .registry import folds, onnx_op

if TYPE_CHECKING:
    from typing import Any

    from numpy.typing import NDArray
    from onnx import NodeProto

    from ..graph import Tensor
    from .builder import Builder, Output

HALF = ("float16", "bfloat16")


def result(b: Builder, t: Tensor, count: int | None = None) -> Tensor | Rank0:
    """t, marked as an ONNX scalar when every input of the node is one."""
    n = b.count if count is None else count
    return Rank0(t) if all(b.rank(i) == 0 for i in range(n) if b.has(i)) else t


def wide(b: Builder, t: Tensor) -> Tensor:
    """A half-precision tensor as float32, so a composition keeps float32 between its steps."""
    return ops.cast(t, out_dtype="float32") if t.dtype in HALF else t


def narrow(t: Tensor, dtype: str) -> Tensor:
    return t if t.dtype == dtype else ops.cast(t, out_dtype=dtype)


# ---- binary arithmetic, compare, logic, bitwise ------------------------------------------------

BINARY = {
    "Add": ops.add, "Sub": ops.sub, "Mul": ops.mul,
    "And": ops.min, "Or": ops.max, "Xor": ops.ne,  # on bools (0 and 1)
    "BitwiseAnd": ops.bit_and, "BitwiseOr": ops.bit_or, "BitwiseXor": ops.bit_xor,
}
COMPARE = {"Equal": ops.eq, "Greater": ops.gt, "Less": ops.lt, "GreaterOrEqual": ops.ge, "LessOrEqual": ops.le}


@onnx_op(*BINARY)
def binary(b: Builder, node: NodeProto) -> Sequence[Output]:
    x, y = b.bcast(b.tensor(0), b.tensor(1))
    return [result(b, BINARY[node.op_type](x, y))]


@onnx_op(*COMPARE)
def compare(b: Builder, node: NodeProto) -> Sequence[Output]:
    x, y = b.bcast(b.tensor(0), b.tensor(1))
    return [result(b, COMPARE[node.op_type](x, y, out_dtype="bool"))]


@onnx_op("Div")
def div(b: Builder, node: NodeProto) -> Sequence[Output]:
    x, y = b.bcast(b.tensor(0), b.tensor(1))
    if dtypes.is_float(x.dtype):
        return [result(b, ops.div(x, y))]
    return [result(b, narrow(int_div(b, x, y, "trunc"), x.dtype))]


def int_div(b: Builder, x: Tensor, y: Tensor, rounding: str) -> Tensor:
    """Exact integer division in int64: the quotient rounded toward zero ("trunc") or down
    ("floor"). q0 = a / b rounded to the nearest integer (the vector unit divides int64 in
    float64, exact for 32-bit operands), r = a - q0 * b, then q0 moves one step when r has the
    wrong sign."""
    x, y = narrow(x, "int64"), narrow(y, "int64")
    q0 = ops.div(x, y, out_dtype="int64")
    r = ops.sub(x, ops.mul(q0, y))
    # trunc: the remainder must have a's sign (or be 0), and q0 moves toward 0; floor: b's sign,
    # and q0 moves down
    ref = x if rounding == "trunc" else y
    wrong = ops.lts(ops.mul(sign(r), sign(ref)), 0)
    return ops.sub(q0, ops.mul(wrong, sign(ops.mul(x, y))) if rounding == "trunc" else wrong)


def sign(t: Tensor) -> Tensor:
    """-1, 0 or 1 in t's dtype."""
    zero = 0 if dtypes.is_int(t.dtype) else 0.0
    return ops.sub(ops.gts(t, zero), ops.lts(t, zero))


@onnx_op("Mod")
def mod(b: Builder, node: NodeProto) -> Sequence[Output]:
    x, y = b.bcast(b.tensor(0), b.tensor(1))
    fmod = b.attr("fmod", 0)
    if fmod == 0 and dtypes.is_float(x.dtype) and b.opset < 28:
        raise b.reject("fmod", 0, "a float Mod needs fmod=1 before opset 28")
    if dtypes.is_float(x.dtype):  # x - trunc(x / y) * y (fmod), x - floor(x / y) * y (opset 28's fmod=0), in float32
        xf, yf = wide(b, x), wide(b, y)
        q = ops.div(xf, yf)
        t = ops.condition_select(q, ops.floor(q), ops.ceil(q)) if fmod else ops.floor(q)
        r = ops.sub(xf, ops.mul(t, yf))
        # a finite x over an infinite y: x (fmod, or x and y of one sign), else y
        keep = ops.condition_select(ops.mul(xf, yf), xf, yf) if not fmod else xf
        special = ops.mul(ops.eqs(ops.active(yf, "absval"), math.inf, out_dtype="bool"),
                          ops.lts(ops.active(xf, "absval"), math.inf, out_dtype="bool"))
        return [result(b, narrow(ops.condition_select(special, keep, r), x.dtype))]
    q = int_div(b, x, y, "trunc" if b.attr("fmod", 0) else "floor")
    return [result(b, narrow(ops.sub(narrow(x, "int64"), ops.mul(q, narrow(y, "int64"))), x.dtype))]


@onnx_op("BitShift")
def bitshift(b: Builder, node: NodeProto) -> Sequence[Output]:
    """Shifts by counts in [0, bits); a count outside gives what the sign alone does (ONNX,
    opset 28): -1 for a right shift of a negative value, else 0. A right shift of a signed value
    is arithmetic. A left shift drops the bits shifted out (the kept ones masked first, shifted in
    int64 and wrapped back); of a 64-bit value it saturates."""
    x, n = b.bcast(b.tensor(0), b.tensor(1))
    direction = b.attr("direction")
    if direction not in ("LEFT", "RIGHT"):
        raise b.reject("direction", direction)
    bits = 8 * dtypes.itemsize(x.dtype)
    if direction == "LEFT" and bits < 64:
        count = ops.clamp(narrow(n, "int64"), 0, bits - 1)
        kept = ops.arith_rshift(b.full((1 << bits) - 1, "int64", len(x.shape)), count)
        y = wrap(ops.arith_lshift(ops.bit_and(*b.bcast(narrow(x, "int64"), kept)), count), x.dtype)
    else:
        y = (ops.arith_lshift if direction == "LEFT" else ops.arith_rshift)(x, n)
    inside = ops.mul(ops.ges(n, 0, out_dtype="bool"), ops.lts(n, bits, out_dtype="bool"))
    outside = ops.muls(ops.lts(x, 0), -1) if direction == "RIGHT" and not x.dtype.startswith("u") else b.full(0, x.dtype, len(x.shape))
    return [result(b, ops.condition_select(inside, y, outside))]


@onnx_op("Max", "Min", "Sum", "Mean")
def variadic(b: Builder, node: NodeProto) -> Sequence[Output]:
    fn = {"Max": ops.max, "Min": ops.min, "Sum": ops.add, "Mean": ops.add}[node.op_type]
    ts = [b.tensor(i) for i in range(b.count)]
    out = ts[0]
    for t in ts[1:]:
        out = fn(*b.bcast(out, t))
    if node.op_type == "Mean" and len(ts) > 1:
        out = ops.divs(out, float(len(ts)))
    return [result(b, out)]


@onnx_op("Pow")
def power(b: Builder, node: NodeProto) -> Sequence[Output]:
    x = b.tensor(0)
    exponent = b.known(1)
    if exponent is not None and exponent.size and np.all(exponent == exponent.reshape(-1)[0]) and b.rank(1) <= b.rank(0):
        special = _pow_special(b, x, float(exponent.reshape(-1)[0]))
        if special is not None:
            return [result(b, special, 1)]
    xf, yf = b.bcast(wide(b, b.cast(x, "float32") if not dtypes.is_float(x.dtype) else x),
                     wide(b, b.cast(b.tensor(1), "float32") if not dtypes.is_float(b.dtype(1)) else b.tensor(1)))
    # |x|^y = exp(y ln|x|); a negative x keeps its sign for an odd integer y and gives NaN for a
    # non-integer y (ln(-1)); y = 0 gives 1 (0 * ln 0 would be NaN)
    e = ops.active(ops.mul(yf, ops.active(ops.active(xf, "absval"), "ln")), "exp")
    neg = ops.lts(xf, 0.0)
    floor_y = ops.floor(yf)
    odd = ops.eqs(ops.sub(yf, ops.muls(ops.floor(ops.muls(yf, 0.5)), 2.0)), 1.0)
    fractional = ops.ne(yf, floor_y)
    signed = ops.mul(e, ops.rsubs(scalar=1.0, tensor_i=ops.muls(ops.mul(neg, odd), 2.0)))
    nan_term = ops.active(ops.rsubs(scalar=1.0, tensor_i=ops.muls(ops.mul(neg, fractional), 2.0)), "ln")
    total = ops.add(signed, nan_term)
    value = ops.condition_select(ops.eqs(yf, 0.0), b.full(1.0, total.dtype, len(yf.shape)), total)
    out_dtype = x.dtype
    if dtypes.is_float(out_dtype):
        return [result(b, narrow(value, out_dtype))]
    return [result(b, ops.adds(value, 0.0, out_dtype=out_dtype))]  # to the nearest integer


def _pow_special(b: Builder, x: Tensor, v: float) -> Tensor | None:
    if v == 1.0:
        return x
    if v == 2.0:
        return ops.mul(x, x)
    if v == 3.0:
        return ops.mul(ops.mul(x, x), x)
    if v == 0.5 and dtypes.is_float(x.dtype):
        return ops.active(x, "sqrt")
    if v == -1.0 and dtypes.is_float(x.dtype):
        return ops.rdivs(scalar=1.0, tensor_i=x)
    return None


# ---- unary ---------------------------------------------------------------------------------

ACTIVE = {"Abs": "absval", "Sqrt": "sqrt", "Exp": "exp", "Log": "ln", "Tanh": "tanh", "Sigmoid": "sigmoid", "Relu": "relu"}
PLAIN = {"Ceil": ops.ceil, "Floor": ops.floor, "Sin": ops.sin, "Cos": ops.cos}


@onnx_op(*ACTIVE)
def active(b: Builder, node: NodeProto) -> Sequence[Output]:
    return [result(b, ops.active(b.tensor(0), ACTIVE[node.op_type]))]


@onnx_op(*PLAIN)
def plain(b: Builder, node: NodeProto) -> Sequence[Output]:
    return [result(b, PLAIN[node.op_type](b.tensor(0)))]


@onnx_op("Neg")
def neg(b: Builder, node: NodeProto) -> Sequence[Output]:
    x = b.tensor(0)
    return [result(b, ops.muls(x, -1 if dtypes.is_int(x.dtype) else -1.0))]


@onnx_op("Reciprocal")
def reciprocal(b: Builder, node: NodeProto) -> Sequence[Output]:
    return [result(b, ops.rdivs(scalar=1.0, tensor_i=b.tensor(0)))]


@onnx_op("Tan")
def tan(b: Builder, node: NodeProto) -> Sequence[Output]:
    x = b.tensor(0)
    xf = wide(b, x)
    return [result(b, narrow(ops.div(ops.sin(xf), ops.cos(xf)), x.dtype))]


@onnx_op("Sinh", "Cosh", "Asinh", "Acosh", "Atanh")
def hyperbolic(b: Builder, node: NodeProto) -> Sequence[Output]:
    """From exp and ln: sinh, cosh = (e^x -/+ e^-x) / 2; asinh = sign(x) ln(|x| + sqrt(x^2 + 1));
    acosh = ln(x + sqrt(x^2 - 1)); atanh = ln((1 + x) / (1 - x)) / 2."""
    x0 = b.tensor(0)
    x = wide(b, x0)
    kind = node.op_type
    if kind in ("Sinh", "Cosh"):
        e, inv = ops.active(x, "exp"), ops.active(ops.muls(x, -1.0), "exp")
        y = ops.muls(ops.sub(e, inv) if kind == "Sinh" else ops.add(e, inv), 0.5)
    elif kind == "Asinh":
        a = ops.active(x, "absval")
        y = ops.mul(sign(x), ops.active(ops.add(a, ops.active(ops.adds(ops.mul(x, x), 1.0), "sqrt")), "ln"))
    elif kind == "Acosh":
        y = ops.active(ops.add(x, ops.active(ops.adds(ops.mul(x, x), -1.0), "sqrt")), "ln")
    else:
        y = ops.muls(ops.active(ops.div(ops.adds(x, 1.0), ops.rsubs(scalar=1.0, tensor_i=x)), "ln"), 0.5)
    return [result(b, narrow(y, x0.dtype))]


@onnx_op("Sign")
def sign_op(b: Builder, node: NodeProto) -> Sequence[Output]:
    return [result(b, sign(b.tensor(0)))]


@onnx_op("Round")
def round_half_even(b: Builder, node: NodeProto) -> Sequence[Output]:
    """Halves to even: the vector unit stores a float into an integer that way (IEEE's
    conversion); values of 2^23 and more (integers already), infinities and NaN pass as they are."""
    x = b.tensor(0)
    xf = wide(b, x)
    rounded = ops.cast(ops.adds(xf, 0.0, out_dtype="int32"), out_dtype=xf.dtype)
    big = b.full(2.0**23, "float32", len(x.shape))
    return [result(b, narrow(ops.select(big, ops.active(xf, "absval"), rounded, xf, "GREATER_THAN"), x.dtype))]


@onnx_op("Not")
def logical_not(b: Builder, node: NodeProto) -> Sequence[Output]:
    return [result(b, ops.eqs(b.tensor(0), 0, out_dtype="bool"))]


@onnx_op("BitwiseNot")
def bitwise_not(b: Builder, node: NodeProto) -> Sequence[Output]:
    x = b.tensor(0)
    ones = -1 if x.dtype.startswith("int") else dtypes.int_range(x.dtype)[1]
    return [result(b, ops.bit_xors(x, ones))]


@onnx_op("IsNaN")
def isnan(b: Builder, node: NodeProto) -> Sequence[Output]:
    x = b.tensor(0)
    return [result(b, ops.ne(x, x, out_dtype="bool"))]


@onnx_op("IsInf")
def isinf(b: Builder, node: NodeProto) -> Sequence[Output]:
    x = b.tensor(0)
    pos, neg_ = b.attr("detect_positive", 1), b.attr("detect_negative", 1)
    found = [ops.eqs(x, v, out_dtype="bool") for v, on in ((math.inf, pos), (-math.inf, neg_)) if on]
    if not found:
        return [result(b, ops.eqs(x, math.nan, out_dtype="bool"))]  # NaN equals nothing: all false
    return [result(b, found[0] if len(found) == 1 else ops.max(*found))]


# ---- activations ---------------------------------------------------------------------------

def elu(x: Tensor, alpha: float) -> Tensor:
    """x for x > 0, alpha * (exp(x) - 1) otherwise; npusim's elu is alpha = 1."""
    e = ops.active(x, "elu")
    if alpha == 1.0:
        return e
    return ops.axpy(ops.mins(e, 0.0), float(alpha), ops.active(x, "relu"))


def hard_sigmoid(x: Tensor, alpha: float, beta: float) -> Tensor:
    return ops.clamp(ops.adds(ops.muls(x, float(alpha)), float(beta)), 0.0, 1.0)


def softplus(x: Tensor) -> Tensor:
    return ops.active(ops.adds(ops.active(x, "exp"), 1.0), "ln")


ERF_AS = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)  # Abramowitz and Stegun 7.1.26
ERF_P = 0.3275911
ERF_TAYLOR = tuple(2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(7))


def erf(b: Builder, x: Tensor) -> Tensor:
    """erf of a float32 tensor: the Taylor series (7 terms, in x^2) below |x| = 0.5, Abramowitz
    and Stegun 7.1.26 (1 - poly(t) exp(-x^2), t = 1 / (1 + p|x|)) above, with x's sign."""
    a = ops.active(x, "absval")
    t = ops.rdivs(scalar=1.0, tensor_i=ops.adds(ops.muls(a, ERF_P), 1.0))
    poly = ops.muls(t, ERF_AS[-1])
    for c in reversed(ERF_AS[:-1]):
        poly = ops.mul(ops.adds(poly, c), t)
    far = ops.rsubs(scalar=1.0, tensor_i=ops.mul(poly, ops.active(ops.muls(ops.mul(x, x), -1.0), "exp")))
    far = ops.mul(far, sign(x))
    x2 = ops.mul(x, x)
    series = ops.muls(x2, ERF_TAYLOR[-1])
    for c in reversed(ERF_TAYLOR[1:-1]):
        series = ops.mul(ops.adds(series, c), x2)
    near = ops.mul(ops.adds(series, ERF_TAYLOR[0]), x)
    half = b.full(0.5, "float32", len(x.shape))
    return ops.select(half, a, near, far, "GREATER_THAN")


@onnx_op("Erf")
def erf_op(b: Builder, node: NodeProto) -> Sequence[Output]:
    x = b.tensor(0)
    return [result(b, narrow(erf(b, wide(b, x)), x.dtype))]


@onnx_op("LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "ThresholdedRelu", "Mish",
         "Swish", "Gelu")
def activation(b: Builder, node: NodeProto) -> Sequence[Output]:
    x0 = b.tensor(0)
    x = wide(b, x0)
    kind, attr = node.op_type, b.attr
    if kind == "LeakyRelu":
        y = ops.active_param(x, "leaky_relu", [float(attr("alpha", 0.01))])
    elif kind == "Elu":
        y = elu(x, attr("alpha", 1.0))
    elif kind == "Selu":
        y = ops.muls(elu(x, attr("alpha", 1.67326319217681884765625)), float(attr("gamma", 1.05070102214813232421875)))
    elif kind == "Celu":
        alpha = float(attr("alpha", 1.0))
        y = ops.axpy(ops.mins(ops.active(ops.divs(x, alpha), "elu"), 0.0), alpha, ops.active(x, "relu"))
    elif kind == "HardSigmoid":
        y = hard_sigmoid(x, attr("alpha", 0.2), attr("beta", 0.5))
    elif kind == "HardSwish":
        y = ops.mul(x, hard_sigmoid(x, 1 / 6, 0.5))
    elif kind == "Softplus":
        y = softplus(x)
    elif kind == "Softsign":
        y = ops.div(x, ops.adds(ops.active(x, "absval"), 1.0))
    elif kind == "ThresholdedRelu":
        y = ops.mul(x, ops.gts(x, float(attr("alpha", 1.0))))
    elif kind == "Mish":
        y = ops.mul(x, ops.active(softplus(x), "tanh"))
    elif kind == "Swish":
        y = ops.mul(x, ops.active(ops.muls(x, float(attr("alpha", 1.0))), "sigmoid"))
    else:  # Gelu
        approximate = attr("approximate", "none")
        if approximate == "tanh":
            inner = ops.muls(ops.add(x, ops.muls(ops.mul(ops.mul(x, x), x), 0.044715)), math.sqrt(2 / math.pi))
            y = ops.mul(ops.muls(x, 0.5), ops.adds(ops.active(inner, "tanh"), 1.0))
        elif approximate == "none":
            y = ops.mul(ops.muls(x, 0.5), ops.adds(erf(b, ops.muls(x, 1 / math.sqrt(2))), 1.0))
        else:
            raise b.reject("approximate", approximate, "none or tanh")
    return [result(b, narrow(y, x0.dtype))]


@onnx_op("PRelu")
def prelu(b: Builder, node: NodeProto) -> Sequence[Output]:
    x, slope = b.bcast(b.tensor(0), b.tensor(1))
    return [result(b, ops.add(ops.active(x, "relu"), ops.mul(ops.mins(x, 0 if dtypes.is_int(x.dtype) else 0.0), slope)))]


@onnx_op("Clip")
def clip(b: Builder, node: NodeProto) -> Sequence[Output]:
    x = b.tensor(0)
    bounds = [b.known(i) if b.has(i) else None for i in (1, 2)]
    if all(not b.has(i) or (v is not None and v.size == 1) for i, v in zip((1, 2), bounds)):
        lo, hi = (dtypes.int_range(x.dtype) if dtypes.is_int(x.dtype) else (-math.inf, math.inf))
        lo = lo if bounds[0] is None else bounds[0].reshape(-1)[0].item()
        hi = hi if bounds[1] is None else bounds[1].reshape(-1)[0].item()
        return [result(b, ops.clamp(x, lo, hi), 1)]
    out = x
    if b.has(1):
        out = ops.max(*b.bcast(out, b.tensor(1)))
    if b.has(2):
        out = ops.min(*b.bcast(out, b.tensor(2)))
    return [result(b, out)]


@onnx_op("Where")
def where(b: Builder, node: NodeProto) -> Sequence[Output]:
    c, x, y = b.bcast(b.tensor(0), b.tensor(1), b.tensor(2))
    return [result(b, ops.condition_select(c, x, y))]


@onnx_op("Cast")
def cast(b: Builder, node: NodeProto) -> Sequence[Output]:
    to = dtype_of(b.attr("to"), f"{b.where()}: attribute to")
    return [result(b, onnx_cast(b, b.tensor(0), to))]


@onnx_op("CastLike")
def cast_like(b: Builder, node: NodeProto) -> Sequence[Output]:
    return [result(b, onnx_cast(b, b.tensor(0), b.dtype(1)), 1)]


def onnx_cast(b: Builder, t: Tensor, to: str) -> Tensor:
    """ONNX's Cast: into an integer type narrower than 64 bits that cannot hold every value of
    t's type, an integer keeps its low bits (two's complement: int16 200 -> int8 -56), as ONNX
    defines it, and a float is truncated toward zero and then does the same, as onnxruntime and
    the reference do (ONNX leaves a float out of range undefined). Else Builder.cast."""
    if t.dtype == to or not dtypes.is_int(to) or to in ("int64", "uint64") or not _narrows(t.dtype, to):
        return b.cast(t, to, bool(b.attr("saturate", 1)), b.attr("round_mode", "up"))
    if t.dtype == "uint64":  # the low bits first, within int64's range
        t = ops.bit_ands(t, (1 << int_bits(to)) - 1)
    return wrap(b.cast(t, "int64") if dtypes.is_float(t.dtype) else narrow(t, "int64"), to)


def int_bits(dtype: str) -> int:
    lo, hi = dtypes.int_range(dtype)
    return (hi - lo).bit_length()


def wrap(v: Tensor, to: str) -> Tensor:
    """An int64 tensor's low bits as the integer dtype `to` (narrower than 64 bits), read as
    two's complement when `to` is signed."""
    bits = int_bits(to)
    low = ops.bit_ands(v, (1 << bits) - 1)
    if dtypes.int_range(to)[0] < 0:  # the top bit is the sign
        low = ops.sub(low, ops.muls(ops.ges(low, 1 << (bits - 1)), 1 << bits))
    return ops.cast(low, out_dtype=to)


def _narrows(source: str, target: str) -> bool:
    """Whether a value of dtype `source` may lie outside the integer dtype `target`."""
    if not dtypes.is_int(source):
        return source != "bool"
    lo, hi = dtypes.int_range(source)
    tlo, thi = dtypes.int_range(target)
    return lo < tlo or hi > thi


@onnx_op("Identity")
def identity(b: Builder, node: NodeProto) -> Sequence[Output]:
    known = b.known(0)
    return [known if known is not None else b.tensor(0)]


@onnx_op("Dropout", static=(1, 2))
def dropout(b: Builder, node: NodeProto) -> Sequence[Output]:
    """Inference: the input as it is, and a mask of ones. Training mode (random dropout) is
    not supported unless its ratio is 0."""
    training = b.known(2) if b.has(2) else np.array(False)
    if training is None or bool(np.asarray(training).reshape(-1)[0]):
        ratio = b.known(1) if b.has(1) else np.array(b.attr("ratio", 0.5))
        if ratio is None or float(np.asarray(ratio).reshape(-1)[0]) != 0.0:
            raise b.error("training_mode with a non-zero ratio (random dropout) is not supported; export the model for inference")
    known = b.known(0)
    x = known if known is not None else b.tensor(0)
    mask = np.ones(b.shape(0), bool)
    return [x, mask]


# ---- folding index arithmetic ------------------------------------------------------------------

def _ints(arrays: list[NDArray[Any]]) -> bool:
    return all(a.dtype.kind in "iub" for a in arrays)


@folds("Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "Sum", "Neg", "Abs", "Equal", "Less", "Greater", "LessOrEqual",
       "GreaterOrEqual", "And", "Or", "Xor", "Not", "Where")
def fold_ints(b: Builder, node: NodeProto, arrays: list[NDArray[Any]]) -> Sequence[Output] | None:
    """Shape arithmetic on known integers (and bools), as ONNX defines it."""
    if not _ints(arrays[1:] if node.op_type == "Where" else arrays):
        return None
    a = arrays
    kind = node.op_type
    out: NDArray[Any]
    with np.errstate(all="ignore"):
        if kind == "Div":
            q = np.abs(a[0]) // np.maximum(np.abs(a[1]), 1)
            out = (q * np.sign(a[0]) * np.sign(a[1])).astype(np.result_type(a[0], a[1]))
        elif kind == "Mod":
            out = np.fmod(a[0], a[1]) if b.attr("fmod", 0) else np.mod(a[0], a[1])
        elif kind in ("Max", "Min", "Sum"):
            fn: np.ufunc = {"Max": np.maximum, "Min": np.minimum, "Sum": np.add}[kind]
            out = a[0]
            for v in a[1:]:
                out = fn(out, v)
        elif kind == "Where":
            out = np.where(a[0], a[1], a[2])
        else:
            fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Neg": np.negative, "Abs": np.abs, "Equal": np.equal,
                  "Less": np.less, "Greater": np.greater, "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal,
                  "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor, "Not": np.logical_not}[kind]
            out = fn(*a)
    return [np.asarray(out)]


@folds("Cast", "CastLike")
def fold_cast(b: Builder, node: NodeProto, arrays: list[NDArray[Any]]) -> Sequence[Output] | None:
    """A known value converted as ONNX's Cast does (a float truncates toward zero, a float8
    saturates unless saturate=0); float8_e8m0fnu (rounding modes) and the 4- and 2-bit integers
    convert on the machine."""
    x = arrays[0]
    if node.op_type == "Cast":
        to = b.attr("to")
        if to not in DTYPES:
            return None
        name: str | None = DTYPES[to]
    else:
        name = dtypes.of_array(arrays[1]) if arrays[1].dtype.kind != "O" else None
    if name is None or x.dtype.kind not in "iufbV" or name == "float8_e8m0fnu" or (dtypes.is_int(name) and name not in (
            "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")):
        return None
    target = dtypes.np_dtype(name)
    if x.dtype.kind == "V":  # an ml_dtypes float (bfloat16, float8 ...): exact in float64
        x = x.astype(np.float64)
    if target.kind in "iu" and x.dtype.kind == "f":
        x = np.trunc(x)
    if name in dtypes.FLOAT8 and b.attr("saturate", 1):
        x = np.clip(x, -dtypes.float_max(name), dtypes.float_max(name))
    if target == np.bool_:
        return [np.not_equal(x, 0)]
    with np.errstate(all="ignore"):
        return [x.astype(target)]


@folds("Identity")
def fold_identity(b: Builder, node: NodeProto, arrays: list[NDArray[Any]]) -> Sequence[Output] | None:
    return [arrays[0]]
