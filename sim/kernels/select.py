"""Select kernels: masked_select, index_select, where.

Work, in elements:
    masked_select   tensor_i's elements: each one's mask is tested
    where           the input's elements: each one is tested
    index_select    the output's elements: each one is copied
"""

import numpy as np

from isa.errors import IndexRangeError
from isa.ops.selection import out_of_range, range_message

from . import kernel


def _source_size(srcs, dsts, args):
    return int(np.prod(srcs[0]))


@kernel("masked_select", _source_size)
def masked_select(arrays, args):
    x, mask = arrays
    return [x[np.broadcast_to(mask != 0, x.shape)]]


@kernel("where", _source_size)
def where(arrays, args):
    return [np.argwhere(arrays[0] != 0)]


@kernel("index_select", lambda srcs, dsts, args: int(np.prod(dsts[0])))
def index_select(arrays, args):
    x, index = arrays
    dim = args["dim"]
    found = out_of_range(index, x.shape[dim])
    if found:
        raise IndexRangeError(range_message(found, dim, x.shape[dim]))
    return [np.take(x, index.astype(np.int64), axis=dim)]
