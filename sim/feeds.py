"""Values fed to a program's inputs: checked against the input's shape and converted to its dtype
only where no number changes beyond a float's rounding.

An array of another dtype is converted as isa.dtypes.convert stores values. Floats fed to a float
input round to the nearest value of its dtype, as any store of a float does (float64 0.1 into
float32); every other conversion that would change a number (int16 200 into int8 saturates to
127, 1e6 into float16 overflows, 2.5 into an integer input, 2**24 + 1 into float32) is refused,
naming the values' range. int16 100 into int8 converts exactly and is accepted.

Where none are given (an ONNX model's run, a program's, a sweep's points), RandomInputs draws
them: normal floats, integers in [0, 10), bools.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import numpy as np

from isa import dtypes
from isa.errors import InputError, SimError

if TYPE_CHECKING:
    from numpy import ndarray

    from isa.graph import Graph
    from isa.instructions import Region


def as_input(name: str, value: ndarray, region: Region, what: str = "input") -> np.ndarray:
    """`value` as the array input `name` (bound at `region`; `what` it is: an input, a state) is written from."""
    array = np.asarray(value)
    if array.shape != region.shape:
        raise InputError(f"{what} {name!r}: expected shape {region.shape}, got {array.shape}")
    want = region.dtype
    try:
        have = dtypes.of_array(array)
    except SimError:
        raise InputError(f"{what} {name!r}: expected {want}, got {array.dtype}, which is no npusim dtype") from None
    if have == want:
        return array.astype(dtypes.np_dtype(want), copy=False)  # the same dtype of another byte order
    converted = dtypes.convert(array, want)
    if not _exact(array, have, converted, want):
        raise InputError(f"{what} {name!r}: {have} values in {_span(array, have)} do not all convert exactly to {want} "
                         f"({_range(want)}); convert them first if the change is meant")
    return converted


def _exact(array: np.ndarray, have: str, converted: np.ndarray, want: str) -> bool:
    """Whether converting `array` (of dtype `have`) to `want` gave `converted` without changing a value."""
    if array.size == 0:
        return True
    if not dtypes.is_float(want):  # an integer or bool: the values are whole and in range
        lo, hi = (0, 1) if want == "bool" else dtypes.int_range(want)
        if dtypes.is_float(have):
            wide = dtypes.convert(array, "float64")
            if not np.all(np.isfinite(wide)) or np.any(wide != np.trunc(wide)):
                return False
            return lo <= wide.min() and wide.max() <= hi
        return lo <= int(array.min()) and int(array.max()) <= hi
    back = dtypes.convert(converted, have)
    if dtypes.is_float(have):  # rounding to the nearest is a float's store; overflow to infinity is not
        wide, after = dtypes.convert(array, "float64"), dtypes.convert(converted, "float64")
        return bool(np.all(np.isfinite(after) | ~np.isfinite(wide)))
    lo, hi = (0, 1) if have == "bool" else dtypes.int_range(have)
    wide = dtypes.convert(converted, "float64")  # beyond the integer range, converting back saturates: not exact
    return bool(np.all(back == array) and np.all(np.isfinite(wide)) and lo <= wide.min() and wide.max() < hi + 1)


def _span(array: np.ndarray, have: str) -> str:
    if array.size == 0:
        return "[]"
    if dtypes.is_float(have):
        wide = dtypes.convert(array, "float64")
        finite = wide[np.isfinite(wide)]
        extra = ", with NaN or infinities" if finite.size < wide.size else ""
        return f"[{finite.min():.9g}, {finite.max():.9g}]{extra}" if finite.size else "[NaN or infinities only]"
    return f"[{int(array.min())}, {int(array.max())}]"


def _range(want: str) -> str:
    if want == "bool":
        return "0 or 1"
    if dtypes.is_int(want):
        lo, hi = dtypes.int_range(want)
        return f"whole numbers in [{lo}, {hi}]"
    return f"finite values up to {dtypes.float_max(want):.9g} in magnitude"


class RandomInputs(Mapping):
    """Random values for a graph's or a program's inputs, drawn in input order when first read:
    after the lowering has placed the inputs and the machine has checked the program's memories
    against the host (so one too large is refused before any byte is drawn), and never in timing
    mode, which reads none."""

    drawn: dict[str, np.ndarray] | None

    def __init__(self, specs: dict[str, tuple[tuple[int, ...], str]], seed: int) -> None:
        self.specs, self.seed, self.drawn = specs, seed, None  # specs: input name -> (shape, dtype), in input order

    @classmethod
    def of(cls, graph: Graph, seed: int) -> RandomInputs:
        """For a graph's inputs."""
        return cls({n: (graph.tensors[n].shape, graph.tensors[n].dtype) for n in graph.inputs}, seed)

    def __getitem__(self, name: str) -> np.ndarray:
        if self.drawn is None:
            rng = np.random.default_rng(self.seed)
            self.drawn = {n: _random(rng, shape, dtype) for n, (shape, dtype) in self.specs.items()}
        return self.drawn[name]

    def __contains__(self, name: object) -> bool:
        return name in self.specs

    def __iter__(self) -> Iterator[str]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)


def _random(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    np_dtype = dtypes.np_dtype(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if dtypes.is_int(dtype):
        return rng.integers(0, 10, shape).astype(np_dtype)
    return rng.standard_normal(shape).astype(np_dtype)
