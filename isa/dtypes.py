"""The dtype table and the integer rounding and saturation helpers every integer op uses.

Dtypes are named by strings (`"float32"`, `"int8"`, ...) everywhere in npusim: in graphs, chip
YAML, instructions and program text. bfloat16, the 8-bit floats (float8_e4m3fn,
float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz, and float8_e8m0fnu, the powers of two of the
MX formats' scales), the 4-bit float float4_e2m1fn and the 4- and 2-bit integers (int4, uint4,
int2, uint2) come from ml_dtypes and keep its names and its conversion rules (see `convert`).

Every element takes whole bytes, as the simulator's memories are byte-addressed: an int4, an
int2 or a float4_e2m1fn takes one byte (ml_dtypes' own storage: the value in the low bits),
never two or four to a byte, so a tensor of them takes as many bytes as an int8 one.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from .errors import UnsupportedError

if TYPE_CHECKING:
    from numpy import dtype, ndarray
    from numpy.typing import ArrayLike, NDArray

_TABLE = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float64": np.dtype(np.float64),
    "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),  # no infinity; NaN is S.1111.111; max 448
    "float8_e4m3fnuz": np.dtype(ml_dtypes.float8_e4m3fnuz),  # no infinity, no -0; NaN is 1.0000.000; max 240
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),  # IEEE-like, with infinities; max 57344
    "float8_e5m2fnuz": np.dtype(ml_dtypes.float8_e5m2fnuz),  # no infinity, no -0; max 57344
    "float4_e2m1fn": np.dtype(ml_dtypes.float4_e2m1fn),  # no infinity, no NaN; max 6
    "float8_e8m0fnu": np.dtype(ml_dtypes.float8_e8m0fnu),  # the MX scale: 2^-127 .. 2^127 only; no sign, no 0; NaN
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "uint8": np.dtype(np.uint8),
    "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32),
    "uint64": np.dtype(np.uint64),
    "int4": np.dtype(ml_dtypes.int4),
    "uint4": np.dtype(ml_dtypes.uint4),
    "int2": np.dtype(ml_dtypes.int2),
    "uint2": np.dtype(ml_dtypes.uint2),
    "bool": np.dtype(np.bool_),
}

NAMES = tuple(_TABLE)
FLOATS = ("float32", "float16", "bfloat16", "float64", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
          "float4_e2m1fn", "float8_e8m0fnu")
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "int4", "uint4", "int2", "uint2")
FLOAT8 = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")


def check(name: str, where: str = "dtype") -> str:
    """Return `name` if it is a known dtype, else raise naming where it was asked for."""
    if name not in _TABLE:
        raise UnsupportedError(f"{where}: unknown dtype {name!r}; known: {', '.join(NAMES)}")
    return name


def np_dtype(name: str) -> dtype:
    return _TABLE[check(name)]


@functools.cache  # asked for in every tiling's estimate
def itemsize(name: str) -> int:
    return np_dtype(name).itemsize


def is_float(name: str) -> bool:
    return name in FLOATS


def is_int(name: str) -> bool:
    return name in INTS


def of_array(array: ndarray, where: str = "array") -> str:
    """The npusim name of a numpy array's dtype."""
    name = _name_of(array.dtype)
    if name is not None:
        return name
    raise UnsupportedError(f"{where}: numpy dtype {array.dtype} has no npusim dtype; known: {', '.join(NAMES)}")


@functools.cache
def int_range(name: str) -> tuple[int, int]:
    info = ml_dtypes.iinfo(np_dtype(name))
    return int(info.min), int(info.max)


def float_max(name: str) -> float:
    """The largest finite value of a float dtype (448.0 for float8_e4m3fn)."""
    return float(ml_dtypes.finfo(np_dtype(name)).max)


def float_tiny(name: str) -> float:
    """The smallest positive normal value of a float dtype (2^-127 for float8_e8m0fnu)."""
    return float(ml_dtypes.finfo(np_dtype(name)).tiny)


def compute_dtype(*operands: str | float) -> str:
    """The dtype arithmetic on these operands (dtype names, or numbers) is done in: float64 when
    one is float64, else float32 when one is a float (or a float number); uint64 when one is
    uint64 and none is signed (a negative number is), else int64. So no operand loses range or
    precision, but an int64 or uint64 beyond 2^24 does in float32."""
    names = [o for o in operands if isinstance(o, str)]
    numbers = [o for o in operands if not isinstance(o, str)]
    if "float64" in names:
        return "float64"
    if any(is_float(n) for n in names) or any(isinstance(v, float) for v in numbers):
        return "float32"
    signed = any(n in INTS and not n.startswith("u") for n in names) or any(v < 0 for v in numbers)
    return "uint64" if "uint64" in names and not signed else "int64"


def round_half_away(x: ArrayLike) -> NDArray[Any]:
    """C's round(): halves go away from zero. Exact in any float format (adding 0.5 first would
    round 0.49999997 up and 2^23 + 1 away in float32)."""
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t)


# The seed's RoundingMode (arithmetic_shift and friends), by enum name and value.
ROUNDING = {
    "ROUNDING_HALF_TO_EVEN": 0,
    "ROUNDING_HALF_AWAY_FROM_ZERO": 1,
    "ROUNDING_TOWARDS_ZERO": 2,
    "ROUNDING_DOWN": 3,  # floor: what `>>` does
    "ROUNDING_UP": 4,  # ceil
    "ROUNDING_HALF_UP": 5,  # the seed's rounding right shift: ((x >> (s - 1)) + 1) >> 1
    "ROUNDING_HALF_DOWN": 6,
}
HALF_TO_EVEN, HALF_AWAY, TOWARDS_ZERO, DOWN, UP, HALF_UP, HALF_DOWN = range(7)


def rounding(mode: str | int) -> int:
    """A RoundingMode given by name ("ROUNDING_HALF_UP", "half_up") or value, as its value."""
    if isinstance(mode, str):
        key = mode.upper() if mode.upper().startswith("ROUNDING_") else "ROUNDING_" + mode.upper()
        if key in ROUNDING:
            return ROUNDING[key]
    elif mode in ROUNDING.values() and not isinstance(mode, bool):
        return int(mode)
    raise UnsupportedError(f"unknown rounding mode {mode!r}; known: {', '.join(ROUNDING)}")


def shift(x: ArrayLike, n: ArrayLike, mode: int = DOWN, right: bool = False) -> NDArray[np.integer]:
    """x * 2^n for n >= 0, saturated to x's 64-bit type; for n < 0, x / 2^-n rounded by `mode`
    (a RoundingMode value). `right` shifts by -n.

    x and n are integer arrays (or scalars). The result is uint64 when x is uint64, else int64:
    exact for every 64-bit x and count, so the saturation to a narrower result that follows
    gives what shifting in that type would.
    """
    xs = np.asarray(x)
    wide: type[np.integer] = np.uint64 if xs.dtype == np.uint64 else np.int64
    xs = xs.astype(wide)
    ns = np.asarray(n)
    counts = (np.minimum(ns, 65) if ns.dtype.kind == "u" else np.clip(ns, -65, 65)).astype(np.int64)  # beyond: alike
    counts = -counts if right else counts
    with np.errstate(over="ignore"):
        if np.all(counts >= 0):
            return _shift_left(xs, counts, wide)
        down = _shift_right(xs, np.maximum(-counts, 0), int(mode), wide)
        return down if np.all(counts < 0) else np.where(counts >= 0, _shift_left(xs, np.maximum(counts, 0), wide), down)


def _shift_left(x: NDArray[np.integer], n: NDArray[np.int64], wide: type[np.integer]) -> NDArray[np.integer]:
    """x << n, or the type's end when that leaves the range (n is capped at 63: more saturates
    alike, but for an unsigned 1 << 64)."""
    info = np.iinfo(wide)
    left = np.minimum(n, 63).astype(wide)
    up = np.where(x > np.right_shift(wide(info.max), left), wide(info.max), np.left_shift(x, left))
    if wide is np.uint64:
        return np.where((n >= 64) & (x > 0), wide(info.max), up)
    return np.where(x < np.right_shift(wide(info.min), left), wide(info.min), up)


def _shift_right(x: NDArray[np.integer], r: NDArray[np.int64], mode: int, wide: type[np.integer]) -> NDArray[np.integer]:
    """floor(x / 2^r) for r >= 1, then bumped by one as `mode` rounds the remainder."""
    info, one = np.iinfo(wide), wide(1)
    big = r >= 64  # a shift by 64 is not one numpy (or the CPU) makes: q is 0 or -1, worked out apart
    rr = np.where(big | (r == 0), 1, r).astype(wide)
    q = np.right_shift(x, rr)
    rem = x - np.left_shift(q, rr)  # 0 <= rem < 2^rr
    half = np.left_shift(one, rr - one)
    cmp = (rem > half).astype(np.int64) - (rem < half)  # the remainder against half of 2^r
    nonzero = rem != 0
    if np.any(big):
        if wide is np.uint64:  # q = 0, rem = x, half = 2^63 (r = 64) or beyond x
            q = np.where(big, wide(0), q)
            cmp = np.where(big, np.where(r == 64, (x > wide(2**63)).astype(np.int64) - (x < wide(2**63)), -1), cmp)
        else:  # q = -1 or 0; rem = x + 2^r or x, over half of 2^r exactly when x < 0
            q = np.where(big, np.where(x < 0, -1, 0), q)
            tie = (x == info.min) & (r == 64)  # -2^63 / 2^64 = -0.5 exactly
            cmp = np.where(big, np.where(tie, 0, np.where(x < 0, 1, -1)), cmp)
        nonzero = np.where(big, x != 0, nonzero)
    negative = x < 0
    if mode == DOWN:
        return q
    if mode == UP:
        bump = nonzero
    elif mode == TOWARDS_ZERO:
        bump = nonzero & negative
    elif mode == HALF_UP:
        bump = cmp >= 0
    elif mode == HALF_DOWN:
        bump = cmp > 0
    elif mode == HALF_AWAY:
        bump = np.where(negative, cmp > 0, cmp >= 0)
    else:  # HALF_TO_EVEN
        bump = (cmp > 0) | ((cmp == 0) & (q % 2 != 0))
    return q + (bump & (r > 0)).astype(wide)


def convert(x: ArrayLike, name: str) -> NDArray[Any]:
    """Store values into dtype `name`, saturating integers.

    Floats become integers by round-half-to-even (the IEEE default conversion), then are clipped
    to the target range; NaN becomes 0. Float targets take the nearest value, halves to even
    (IEEE, and ml_dtypes for its types): beyond the largest finite value a format with
    infinities (float16, bfloat16, float32, float64, float8_e5m2) gives +-inf and one without
    gives NaN (float8_e4m3fn, both fnuz formats); float4_e2m1fn, which has neither, saturates
    to +-6 and stores NaN as -0. Clamping first to +-float_max gives the saturating conversion
    ONNX's Cast makes by default. The fnuz formats have no -0: it becomes 0. float8_e8m0fnu
    takes the nearest power of two, a mantissa of a half or more rounding up (1.5 -> 2, 3 -> 4),
    and 0, negative values and values beyond 2^127 become NaN.
    """
    with np.errstate(over="ignore", invalid="ignore"):  # IEEE overflow to inf is the answer
        return _convert(np.asarray(x), name)


_NAME_OF = {dt: name for name, dt in _TABLE.items()}


def _name_of(dtype: dtype) -> str | None:
    name = _NAME_OF.get(dtype)
    if name is None:  # an equal dtype of another byte order
        name = next((n for n, dt in _TABLE.items() if dtype == dt), None)
    return name


def _convert(x: NDArray[Any], name: str) -> NDArray[Any]:
    dt = np_dtype(name)
    src = _name_of(x.dtype) or ("float64" if x.dtype.kind == "f" else "int64" if x.dtype.kind in "iu" else None)
    if name == "bool":
        return x != 0
    if src == "bool":
        x, src = x.astype(np.uint8), "uint8"
    if x.dtype.kind == "V":  # an ml_dtypes type: its values in float64 (exact for all of them) or int64
        x, src = (x.astype(np.float64), "float64") if src in FLOATS else (x.astype(np.int64), "int64")
    if is_int(name):
        return _to_int(x, src, name, dt)
    if dt.kind != "f" and x.dtype not in (np.float32, np.float64):  # into an ml_dtypes float: from float64
        x = x.astype(np.float64)
    return x.astype(dt)


def _to_int(x: NDArray[Any], src: str | None, name: str, dt: dtype) -> NDArray[Any]:
    lo, hi = int_range(name)
    if src in FLOATS:
        f = np.rint(np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=np.inf, neginf=-np.inf))
        if name not in ("int64", "uint64"):
            return np.clip(f, lo, hi).astype(dt)
        over, under = f >= float(hi), f <= float(lo)  # float(hi) rounds up past hi (2^63, 2^64)
        wide = np.uint64 if name == "uint64" else np.int64
        inside = np.where(over | under, 0, f).astype(wide)
        return np.where(over, wide(hi), np.where(under, wide(lo), inside)).astype(dt)
    if src == "uint64":
        return np.minimum(x, np.uint64(hi)).astype(dt)
    if name == "uint64":
        return np.maximum(x, 0).astype(dt)
    slo, shi = int_range(src)
    if slo >= lo and shi <= hi:
        return x.astype(dt)
    return np.clip(x if x.dtype.kind in "iu" else x.astype(np.int64), lo, hi).astype(dt)
