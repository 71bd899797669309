"""Data-generation ops.

BMLang (seed 002, lines 1178-1202):
    constdata(array, dtype)      a tensor of fixed data, preloaded in DDR like weights: no run time
                                 ("在TPU运行过程中,没有时间开销"), the "constant" template
    sequence_gen(shape_tensor)   0, 1, 2, ... in the shape the 1-d int32 shape_tensor holds (its
                                 values known when the graph is built), on the scalar engine

TensorRT IFillLayer (seed 003), on the scalar engine, no tensor operand needed (`graph=` or
`with graph:`):
    linspace(shape, alpha, beta, dtype)      output[i0, ..., in] = alpha + sum_d beta[d] * i_d
    random_uniform(shape, low, high, dtype, seed)
    random_normal(shape, mean, scale, dtype, seed)
alpha and beta (low/high, mean/scale) are numbers, or tensors the kernel reads at run time (a
number given with a tensor becomes a constant tensor). `shape` is a tuple or an int32 tensor
whose values the graph knows (TensorRT constant-folds it too). Output volume <= 2^31 - 1.

The random numbers are Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1,
2, 3", SC'11; Random123): element i gets the block philox(counter=(i mod 2^32, i div 2^32, 0, 0),
key=(seed mod 2^32, seed div 2^32)), so each number depends on its index and the seed only, not
on how the work is split. Word 0 gives u0 = (w0 >> 8) * 2^-24 in [0, 1), word 1 gives u1 alike:
uniform = low + (high - low) * u0; normal = mean + scale * sqrt(-2 ln(1 - u0)) * cos(2 pi u1)
(Box-Muller; 24-bit uniforms bound |z| by sqrt(48 ln 2) ~ 5.77). Values are computed in
float64 (int64 for an integer linspace) and rounded once to the output dtype (integers
saturate). The references below are an independent plain-Python Philox.
"""

import math
from collections.abc import Sequence
from numbers import Integral
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .. import dtypes
from ..errors import ShapeError, UnsupportedError
from ..graph import Graph, Tensor
from .arrange import fill_value, integer, ints, known_ints
from .base import OpDef, Spec, TensorLike, apply_one, register

# ---- constdata --------------------------------------------------------------------------------

class ConstData(OpDef):
    """A tensor of data fixed when the graph is built. The seed declares a tensor, gives it data
    and marks it constant; here the array is the op's parameter and its value is known, so it is
    preloaded in DDR and costs no instruction."""

    name = "constdata"
    kind = "global"  # seed line 1187, "but with no time cost on the TPU"
    template = "constant"

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        return [Spec(params["array"].shape, params["dtype"])]

    def known_value(self, known: list[np.ndarray | None], ins: list[Spec], params: dict[str, Any]) -> np.ndarray | None:
        return params["array"]

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        return [params["array"]]


CONSTDATA = register(ConstData())


def constdata(array: ArrayLike, dtype: str | None = None, name: str | None = None, graph: Graph | None = None) -> Tensor:
    """A constant tensor holding `array` (in `dtype`, else the array's own). It has no tensor
    operand: it goes to `graph`, or to the graph of `with graph:`."""
    array = np.asarray(array)
    dtype = dtypes.check(dtype, "constdata") if dtype else dtypes.of_array(array, "constdata")
    with np.errstate(over="ignore", invalid="ignore"):
        stored = np.ascontiguousarray(array.astype(dtypes.np_dtype(dtype))).reshape(array.shape or (1,))
    if dtypes.is_int(dtype) and not np.array_equal(stored.reshape(array.shape), array):
        lo, hi = dtypes.int_range(dtype)
        raise UnsupportedError(f"constdata: the array holds values that are not integers in [{lo}, {hi}], so not {dtype}")
    return apply_one(CONSTDATA, [], {"array": stored, "dtype": dtype}, name, graph=graph)


# ---- sequence_gen -----------------------------------------------------------------------------

class SequenceGen(OpDef):
    """0, 1, 2, ... in row-major order, in the shape shape_tensor holds; tensor_o is INT32 or
    FLOAT32 (seed lines 1200-1201). The kernel reads shape_tensor; the graph needs its values
    when it is built to plan memory."""

    name = "sequence_gen"
    kind = "global"  # seed line 1202
    template = "scalar"
    OUT_DTYPES = ("int32", "float32")

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        (spec,) = ins
        if spec.dtype != "int32" or len(spec.shape) != 1:
            raise UnsupportedError(f"sequence_gen: shape_tensor must be a 1-d int32 tensor (seed line 1200), got {spec.dtype} {spec.shape}")
        if params["out_dtype"] not in self.OUT_DTYPES:
            raise UnsupportedError(f"sequence_gen: out_dtype must be one of {', '.join(self.OUT_DTYPES)} "
                                   f"(seed line 1200), got {params['out_dtype']!r}")
        return [Spec(params["shape"], params["out_dtype"])]

    def kernel(self, ins: list[Tensor], params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return "sequence", {}

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        shape = [int(d) for d in arrays[0]]
        return [np.arange(math.prod(shape), dtype=np.int64).reshape(shape).astype(dtypes.np_dtype(params["out_dtype"]))]


SEQUENCE_GEN = register(SequenceGen())


def sequence_gen(shape_tensor: Tensor, out_dtype: str = "int32", name: str | None = None) -> Tensor:
    """0, 1, 2, ... in the shape held by the 1-d int32 tensor shape_tensor (a constant or a
    shape_fetch output)."""
    if not isinstance(shape_tensor, Tensor):
        raise ShapeError("sequence_gen: shape_tensor must be a Tensor (a constant or "
                         f"a shape_fetch output), got {type(shape_tensor).__name__}")
    shape = ints(known_ints(shape_tensor, "sequence_gen", "shape_tensor"), "sequence_gen", "shape_tensor", low=1)
    return apply_one(SEQUENCE_GEN, [shape_tensor], {"shape": shape, "out_dtype": out_dtype}, name)


# ---- TensorRT Fill ------------------------------------------------------------------------------

VOLUME_LIMIT = 2**31 - 1  # seed 003, "Volume Limits": input0 and output up to 2^31 - 1 elements
SEED_LIMIT = 2**64  # the Philox key is two 32-bit words


class Fill(OpDef):
    """The IFillLayer modes. params: shape, dtype, the two parameters under their names (None
    when they are the node's two inputs, read at run time), and seed for the random ones."""

    seed = "tensorrt"
    kind = "global"
    template = "scalar"
    DTYPES: tuple[str, ...] = ()  # seed 003, "Data Types"
    PARAMS: tuple[str, ...] = ()  # the names of alpha and beta in this mode
    vector_beta = False  # LINSPACE: beta has one value per output dimension

    def check_dtype(self, dtype: str) -> str:
        if dtype not in self.DTYPES:
            raise UnsupportedError(f"{self.name}: dtype {dtype!r} is not supported (seed 003: {', '.join(self.DTYPES)})")
        return dtype

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        dtype = self.check_dtype(params["dtype"])
        shape = params["shape"]
        volume = math.prod(shape)
        if volume > VOLUME_LIMIT:
            raise ShapeError(f"{self.name}: shape {shape} has {volume} elements; the limit "
                             f"is 2^31 - 1 = {VOLUME_LIMIT} (seed 003, Volume Limits)")
        if ins:
            self.check_operands(ins, shape, dtype)
        else:
            self.check_values(params, shape, dtype)
        return [Spec(shape, dtype)]

    def check_operands(self, ins: list[Spec], shape: tuple[int, ...], dtype: str) -> None:
        alpha, beta = self.PARAMS
        beta_size = len(shape) if self.vector_beta else 1
        for spec, key, size in ((ins[0], alpha, 1), (ins[1], beta, beta_size)):
            if spec.dtype != dtype:
                raise UnsupportedError(f"{self.name}: {key} is {spec.dtype}; as a tensor it must have the output's dtype {dtype}")
            if math.prod(spec.shape) != size or len(spec.shape) > 1:
                raise ShapeError(f"{self.name}: {key} must be a tensor of {size} element(s) (a scalar or a vector), got shape {spec.shape}")

    def check_values(self, params: dict[str, Any], shape: tuple[int, ...], dtype: str) -> None:
        """Rules between the parameters given as numbers (each is checked as it is given)."""

    def static(self, key: str, value: object, dtype: str) -> float | tuple[float, ...]:
        """A parameter given as numbers, as the output dtype holds them (LINSPACE's beta: a list,
        one step per dimension)."""
        if not (self.vector_beta and key == self.PARAMS[1]):
            return fill_value(_number(value, self.name, key), dtype, self.name, key)
        if not isinstance(value, (Sequence, np.ndarray)):
            raise ShapeError(f"{self.name}: {key} needs one step per output dimension (a list or a tensor), got {value!r}")
        return tuple(fill_value(_number(v, self.name, key), dtype, self.name, key) for v in np.asarray(value).reshape(-1).tolist())

    def kernel(self, ins: list[Tensor], params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        args = {"shape": params["shape"]}
        args.update((k, params[k]) for k in self.PARAMS + ("seed",) if params.get(k) is not None)
        return self.name, args

    def operands(self, arrays: list[np.ndarray], params: dict[str, Any]) -> tuple[np.generic, np.generic | np.ndarray]:
        """(alpha, beta) as float64 or int64 numbers (beta a vector for LINSPACE)."""
        wide = np.int64 if dtypes.is_int(params["dtype"]) else np.float64
        if arrays:
            alpha, beta = (a.astype(wide).reshape(-1) for a in arrays)
            return alpha[0], (beta if self.vector_beta else beta[0])
        alpha, beta = (params[k] for k in self.PARAMS)
        return wide(alpha), (np.array(beta, wide) if self.vector_beta else wide(beta))


def _number(value: object, op: str, param: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (Integral, float, np.floating)):
        raise UnsupportedError(f"{op}: {param} must be a number or a Tensor, got {value!r}")
    return int(value) if isinstance(value, Integral) else float(value)


def _fill(opdef: Fill, shape: Sequence[int] | Tensor, values: dict[str, object], dtype: str, name: str | None, graph: Graph | None,
          **extra: int) -> Tensor:
    """Add a Fill node: `values` maps the two parameter names to numbers or Tensors. When either
    is a Tensor, both become the node's inputs (a number as a constant of the output's dtype)."""
    if isinstance(shape, Tensor):
        graph = graph or shape.graph
        shape = known_ints(shape, opdef.name, "shape")
    shape = ints(shape, opdef.name, "shape", low=1)
    if not shape:
        raise ShapeError(f"{opdef.name}: shape needs at least one dimension, got []")
    params = {"shape": shape, "dtype": opdef.check_dtype(dtype), **extra}
    static = {k: v if isinstance(v, Tensor) else opdef.static(k, v, dtype) for k, v in values.items()}
    if not any(isinstance(v, Tensor) for v in static.values()):
        return apply_one(opdef, [], {**params, **static}, name, graph=graph)
    operands = [v if isinstance(v, Tensor) else np.array(v, dtypes.np_dtype(dtype)).reshape(-1)
                for v in static.values()]
    return apply_one(opdef, operands, {**params, **dict.fromkeys(static)}, name, graph=graph)


class Linspace(Fill):
    """output[i0, ..., in] = alpha + beta[0] * i0 + ... + beta[n] * in (seed 003, LINSPACE); an
    integer output needs integer alpha and beta."""

    name = "linspace"
    DTYPES = ("int32", "int64", "float32")
    PARAMS = ("alpha", "beta")
    vector_beta = True

    def check_values(self, params: dict[str, Any], shape: tuple[int, ...], dtype: str) -> None:
        if len(params["beta"]) != len(shape):
            raise ShapeError("linspace: beta needs one step per output dimension "
                             f"({len(shape)} for shape {shape}), got {list(params['beta'])}")

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        alpha, step = self.operands(arrays, params)
        beta = np.asarray(step)  # one step per dimension (vector_beta)
        index = np.indices(params["shape"], dtype=np.int64)
        value = np.full(params["shape"], alpha)
        for d in range(len(params["shape"])):
            value = value + beta[d] * index[d]
        return [dtypes.convert(value, params["dtype"])]


LINSPACE = register(Linspace())


def linspace(shape: Sequence[int] | Tensor, alpha: float | Tensor, beta: Sequence[float] | TensorLike, dtype: str = "float32",
             name: str | None = None, graph: Graph | None = None) -> Tensor:
    """alpha + sum_d beta[d] * i_d at every index (i_0, ..., i_n) of `shape`; alpha a number or a
    one-element tensor, beta one step per dimension (a list, or a tensor of that many)."""
    return _fill(LINSPACE, shape, {"alpha": alpha, "beta": beta}, dtype, name, graph)


# ---- Philox4x32-10, one element at a time (the references' generator) ----------------------------

MASK32 = 0xFFFFFFFF
PHILOX_M = (0xD2511F53, 0xCD9E8D57)  # the round multipliers
PHILOX_W = (0x9E3779B9, 0xBB67AE85)  # the key schedule's Weyl increments (golden ratio, sqrt(3) - 1)


def philox4x32(counter: tuple[int, int, int, int], key: tuple[int, int], rounds: int = 10) -> tuple[int, int, int, int]:
    """Random123's philox4x32_R: four 32-bit words from a 4-word counter and a 2-word key."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + PHILOX_W[0]) & MASK32, (k1 + PHILOX_W[1]) & MASK32
        p0, p1 = PHILOX_M[0] * c0, PHILOX_M[1] * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & MASK32, (p0 >> 32) ^ c3 ^ k1, p0 & MASK32
    return c0, c1, c2, c3


def uniforms(count: int, seed: int) -> list[tuple[float, float]]:
    """(u0, u1) in [0, 1) for elements 0 .. count - 1, from words 0 and 1 of each element's block."""
    key = (seed & MASK32, seed >> 32)
    blocks = [philox4x32((i & MASK32, i >> 32, 0, 0), key) for i in range(count)]
    return [((w[0] >> 8) * 2.0**-24, (w[1] >> 8) * 2.0**-24) for w in blocks]


class RandomFill(Fill):
    DTYPES = ("float16", "float32")

    def sample(self, u0: float, u1: float, alpha: float, beta: float) -> float:
        raise NotImplementedError

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        alpha, beta = (float(v) for v in self.operands(arrays, params))
        values = [self.sample(u0, u1, alpha, beta) for u0, u1 in uniforms(math.prod(params["shape"]), params["seed"])]
        return [dtypes.convert(np.array(values, np.float64).reshape(params["shape"]), params["dtype"])]


class RandomUniform(RandomFill):
    """Uniform in [low, high] (seed 003, RANDOM_UNIFORM: random(min = alpha, max = beta))."""

    name = "random_uniform"
    PARAMS = ("low", "high")

    def check_values(self, params: dict[str, Any], shape: tuple[int, ...], dtype: str) -> None:
        if params["low"] > params["high"]:
            raise UnsupportedError(f"random_uniform: low {params['low']} is above high {params['high']}")

    def sample(self, u0: float, u1: float, low: float, high: float) -> float:
        return low + (high - low) * u0


class RandomNormal(RandomFill):
    """Normal with mean alpha and standard deviation beta (seed 003, RANDOM_NORMAL)."""

    name = "random_normal"
    PARAMS = ("mean", "scale")

    def check_values(self, params: dict[str, Any], shape: tuple[int, ...], dtype: str) -> None:
        if params["scale"] < 0:
            raise UnsupportedError(f"random_normal: scale must be >= 0, got {params['scale']}")

    def sample(self, u0: float, u1: float, mean: float, scale: float) -> float:
        return mean + scale * math.sqrt(-2.0 * math.log(1.0 - u0)) * math.cos(2.0 * math.pi * u1)


RANDOM_UNIFORM = register(RandomUniform())
RANDOM_NORMAL = register(RandomNormal())


def _seed(seed: int, op: str) -> int:
    seed = integer(seed, op, "seed", low=0)
    if seed >= SEED_LIMIT:
        raise UnsupportedError(f"{op}: seed must be below 2^64 (the Philox key is two 32-bit words), got {seed}")
    return seed


def random_uniform(shape: Sequence[int] | Tensor, low: float | Tensor = 0.0, high: float | Tensor = 1.0, dtype: str = "float32",
                   seed: int = 0, name: str | None = None, graph: Graph | None = None) -> Tensor:
    """Uniform random numbers in [low, high], Philox4x32-10 keyed by `seed`."""
    return _fill(RANDOM_UNIFORM, shape, {"low": low, "high": high}, dtype, name, graph, seed=_seed(seed, "random_uniform"))


def random_normal(shape: Sequence[int] | Tensor, mean: float | Tensor = 0.0, scale: float | Tensor = 1.0, dtype: str = "float32",
                  seed: int = 0, name: str | None = None, graph: Graph | None = None) -> Tensor:
    """Normal random numbers of mean `mean` and standard deviation `scale`, Philox4x32-10 and
    Box-Muller, keyed by `seed`."""
    return _fill(RANDOM_NORMAL, shape, {"mean": mean, "scale": scale}, dtype, name, graph, seed=_seed(seed, "random_normal"))
