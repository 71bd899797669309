"""Select kernels: masked_select, index_select, where.

Work, in elements:
    masked_select   tensor_i's elements: each one's mask is tested
    where           the input's elements: each one is tested
    index_select    the output's elements: each one is copied
"""

from typing import Any

import numpy as np

from isa.errors import IndexRangeError
from isa.ops.selection import out_of_range, range_message

from . import kernel


def _source_size(srcs: list[tuple[int, ...]], dsts: list[tuple[int, ...]], args: dict[str, Any]) -> int:
    return int(np.prod(srcs[0]))


@kernel("masked_select", _source_size)
def masked_select(arrays: list[np.ndarray], args: dict[str, Any]) -> list[np.ndarray]:
    x, mask = arrays
    return [x[np.broadcast_to(mask != 0, x.shape)]]


@kernel("where", _source_size)
def where(arrays: list[np.ndarray], args: dict[str, Any]) -> list[np.ndarray]:
    return [np.argwhere(arrays[0] != 0)]


@kernel("index_select", lambda srcs, dsts, args: int(np.prod(dsts[0])))
def index_select(arrays: list[np.ndarray], args: dict[str, Any]) -> list[np.ndarray]:
    x, index = arrays
    dim = args["dim"]
    found = out_of_range(index, x.shape[dim])
    if found:
        raise IndexRangeError(range_message(found, dim, x.shape[dim]))
    return [np.take(x, index.astype(np.int64), axis=dim)]
