"""Data-generation kernels: sequence_gen's count, and the TensorRT Fill modes (linspace and the
Philox4x32-10 random numbers; isa/ops/generate.py states the exact rules).

Every element is one element of work. The random numbers come from a counter-based generator
(element i's block is philox(counter=i, key=seed)), so a kernel split over any number of cores
would give the same numbers; here it is one vectorized numpy call.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import kernel

M0, M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)  # Philox4x32 round multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85  # its key schedule's increments
MASK32 = 0xFFFFFFFF
UNIT = 2.0**-24  # a uniform from the top 24 bits of a word


def elements(srcs: list[tuple[int, ...]], dsts: list[tuple[int, ...]], args: dict[str, Any]) -> int:
    return int(np.prod(dsts[0], dtype=np.int64))


def philox4x32_10(counter: Sequence[np.ndarray | int], key: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Philox4x32-10 on arrays: counter is four uint32 arrays, key two Python ints; returns the
    four uint32 result words."""
    c0, c1, c2, c3 = (np.asarray(c, np.uint32) for c in counter)
    k0, k1 = key
    for r in range(10):
        if r:
            k0, k1 = (k0 + W0) & MASK32, (k1 + W1) & MASK32
        p0 = M0 * c0.astype(np.uint64)
        p1 = M1 * c2.astype(np.uint64)
        c0, c1, c2, c3 = (
            (p1 >> np.uint64(32)).astype(np.uint32) ^ c1 ^ np.uint32(k0),
            p1.astype(np.uint32),
            (p0 >> np.uint64(32)).astype(np.uint32) ^ c3 ^ np.uint32(k1),
            p0.astype(np.uint32),
        )
    return c0, c1, c2, c3


def _uniforms(shape: tuple[int, ...], seed: int) -> list[np.ndarray]:
    """(u0, u1) in [0, 1) per element, from words 0 and 1 of the element's Philox block."""
    index = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.uint64)
    counter = ((index & np.uint64(MASK32)).astype(np.uint32), (index >> np.uint64(32)).astype(np.uint32), 0, 0)
    w0, w1, _, _ = philox4x32_10(np.broadcast_arrays(*counter), (seed & MASK32, seed >> 32))
    return [((w >> np.uint32(8)).astype(np.float64) * UNIT).reshape(shape) for w in (w0, w1)]


def _pair(arrays: list[np.ndarray], args: dict[str, Any], names: tuple[str, str], wide: type[np.generic]) -> tuple[np.ndarray, ...]:
    """The mode's two parameters: from the source tensors when they are inputs, else the args."""
    if arrays:
        return tuple(a.astype(wide).reshape(-1) for a in arrays)
    return tuple(np.asarray(args[k], wide).reshape(-1) for k in names)


@kernel("sequence", elements)
def sequence(arrays: list[np.ndarray], args: dict[str, Any]) -> list[np.ndarray]:
    """0, 1, 2, ... in the shape the source (a 1-d int32 shape tensor) holds."""
    shape = tuple(int(d) for d in arrays[0])
    return [np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64).reshape(shape)]


@kernel("linspace", elements)
def linspace(arrays: list[np.ndarray], args: dict[str, Any]) -> list[np.ndarray]:
    """alpha + sum_d beta[d] * i_d, in int64 when alpha is an integer, else float64."""
    shape = tuple(args["shape"])
    integral = arrays[0].dtype.kind in "iu" if arrays else isinstance(args["alpha"], int)
    alpha, beta = _pair(arrays, args, ("alpha", "beta"), np.int64 if integral else np.float64)
    value = np.full(shape, alpha[0])
    for d in range(len(shape)):
        steps = beta[d] * np.arange(shape[d], dtype=np.int64)
        value = value + steps.reshape((-1,) + (1,) * (len(shape) - d - 1))
    return [value]


@kernel("random_uniform", elements)
def random_uniform(arrays: list[np.ndarray], args: dict[str, Any]) -> list[np.ndarray]:
    low, high = (v[0] for v in _pair(arrays, args, ("low", "high"), np.float64))
    u0, _ = _uniforms(tuple(args["shape"]), args["seed"])
    return [low + (high - low) * u0]


@kernel("random_normal", elements)
def random_normal(arrays: list[np.ndarray], args: dict[str, Any]) -> list[np.ndarray]:
    mean, scale = (v[0] for v in _pair(arrays, args, ("mean", "scale"), np.float64))
    u0, u1 = _uniforms(tuple(args["shape"]), args["seed"])
    return [mean + scale * np.sqrt(-2.0 * np.log(1.0 - u0)) * np.cos(2.0 * np.pi * u1)]
