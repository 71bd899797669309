"""Sort-family kernels (arg, topk, sort, argsort) and the ordering the nms kernel shares.

The unstable sort is a heapsort: in place, no buffer, and its order among equal elements
depends only on the data (numpy's quicksort may run a SIMD sort chosen by the host CPU, whose tie
order would differ between hosts). The stable sort is a merge sort (numpy's "stable").
Descending sorts the line reversed and reverses the result, so a stable descending sort keeps
equal elements in input order. NaN ranks above every number (numpy's order).

Work, in elements (n the sorted dim, rows the number of lines along it):
    sort, argsort   rows * n * max(1, ceil(log2 n)), times STABLE_COST when stable
    topk            rows * n * ceil(log2(k + 1)): a core keeps a k-element heap and each of the n
                    elements costs a heap step (k = 1 is a plain scan). The host takes the first
                    k of the unstable sort: the same values, ties in no set order either way
    arg             the input's elements: one comparison each
"""

from typing import Any, Literal

import numpy as np

from . import kernel

# A stable sort's price over an unstable one's. The seed says stable=false performs better
# (lines 1077, 1087) but not by how much; GCC's std::stable_sort (a merge sort with a buffer)
# against std::sort (introsort) ordering indices by random float32 keys took 1.08x (n = 1e3),
# 1.14x (1e5) and 1.11x (1e6) the time on the development machine (-O2): about 1.1.
STABLE_COST = 1.1


def order(x: np.ndarray, axis: int, descending: bool, stable: bool) -> np.ndarray:
    """The indices sorting x along axis."""
    kind: Literal["stable", "heapsort"] = "stable" if stable else "heapsort"
    if not descending:
        return np.argsort(x, axis=axis, kind=kind)
    last = x.shape[axis] - 1
    return last - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind=kind), axis)


def sort_work(rows: int, n: int, stable: bool) -> float:
    return rows * n * max(1, (n - 1).bit_length()) * (STABLE_COST if stable else 1)


def _sort_work(srcs: list[tuple[int, ...]], dsts: list[tuple[int, ...]], args: dict[str, Any]) -> float:
    shape = srcs[0]
    n = shape[args["axis"]]
    return sort_work(int(np.prod(shape)) // n, n, args["stable"])


def _topk_work(srcs: list[tuple[int, ...]], dsts: list[tuple[int, ...]], args: dict[str, Any]) -> int:
    return int(np.prod(srcs[0])) * args["k"].bit_length()


@kernel("sort", _sort_work)
def sort(arrays: list[np.ndarray], args: dict[str, Any]) -> list[np.ndarray]:
    x = arrays[0]
    idx = order(x, args["axis"], args["descending"], args["stable"])
    return [idx, np.take_along_axis(x, idx, args["axis"])]


@kernel("argsort", _sort_work)
def argsort(arrays: list[np.ndarray], args: dict[str, Any]) -> list[np.ndarray]:
    return [order(arrays[0], args["axis"], args["descending"], args["stable"])]


@kernel("topk", _topk_work)
def topk(arrays: list[np.ndarray], args: dict[str, Any]) -> list[np.ndarray]:
    x, axis = arrays[0], args["axis"]
    idx = np.take(order(x, axis, args["descending"], stable=False), np.arange(args["k"]), axis)
    return [np.take_along_axis(x, idx, axis), idx]


@kernel("arg", lambda srcs, dsts, args: int(np.prod(srcs[0])))
def arg(arrays: list[np.ndarray], args: dict[str, Any]) -> list[np.ndarray]:
    find = np.argmax if args["method"] == "max" else np.argmin
    return [find(arrays[0], axis=args["axis"], keepdims=True)]
