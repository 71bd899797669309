"""The BMLang seed's global select ops (seed 002 lines 925-949), each one kernel on the chip's
scalar engine (sim/kernels/select.py):

    masked_select(tensor_i, mask)
        the elements of tensor_i where mask is nonzero, in row-major order, as a 1-D tensor of
        tensor_i's dtype. The mask broadcasts only in the seed's forms: it has tensor_i's rank,
        1s on leading dims and tensor_i's dims after them (for tensor_i [2, 5, 10, 1000]: mask
        [2, 5, 10, 1000], [1, 5, 10, 1000], [1, 1, 10, 1000] or [1, 1, 1, 1000]).
    index_select(tensor_i, index, dim)
        the slices of tensor_i along dim at the positions in index (1-D, integer), in its
        order: torch.index_select. An index outside [0, dim size) is an IndexRangeError (at
        build time when the index is known then, else when the kernel reads it).
    where(tensor_i)
        the coordinates of tensor_i's nonzero elements (the chips have no bool: float32 stands
        for it), one int32 row of rank values each, in row-major order: tf.where / np.argwhere.

The tensors first, then the scalars (the project's rule for op functions): index_select's
index comes before dim, unlike the seed's C signature. masked_select's and where's outputs
are as long as the data decide: their shape is an upper bound (isa.graph) and the run
reports the shape produced.
"""

from typing import Any

import numpy as np

from .. import dtypes
from ..errors import IndexRangeError, ShapeError, UnsupportedError
from ..graph import Tensor
from .arrange import integer
from .base import OpDef, Spec, TensorLike, apply_one, register
from .sorting import axis_in


class _Global(OpDef):
    kind = "global"
    template = "scalar"

    def kernel(self, ins: list[Tensor], params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return self.name, {}


class MaskedSelect(_Global):
    name = "masked_select"

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        if len(ins) != 2:
            raise ShapeError(f"masked_select: takes tensor_i and mask, got {len(ins)} tensors")
        x, mask = ins
        lead = next((i for i, d in enumerate(mask.shape) if d != 1), len(mask.shape))
        if len(mask.shape) != len(x.shape) or mask.shape[lead:] != x.shape[lead:]:
            raise ShapeError(f"masked_select: mask of shape {mask.shape} does not broadcast to tensor_i {x.shape} in a form "
                             "the seed allows: tensor_i's rank, 1s on leading dims and tensor_i's dims after them "
                             "(for [2, 5, 10, 1000]: [1, 5, 10, 1000], [1, 1, 10, 1000], [1, 1, 1, 1000])")
        return [Spec((int(np.prod(x.shape)),), x.dtype, bounded=True)]

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        x, mask = arrays
        picked = [x[i] for i in np.ndindex(x.shape) if mask[tuple(j if m > 1 else 0 for j, m in zip(i, mask.shape))] != 0]
        return [np.array(picked, x.dtype).reshape(-1)]


MASKED_SELECT = register(MaskedSelect())


def masked_select(tensor_i: Tensor, mask: TensorLike, name: str | None = None) -> Tensor:
    """tensor_i's elements where mask is nonzero, row-major, as a 1-D tensor (at most tensor_i's
    size; the data decide how many)."""
    return apply_one(MASKED_SELECT, [tensor_i, mask], {}, name)


def out_of_range(index: np.ndarray, size: int) -> tuple[int, int] | None:
    """(position, value) of the first entry of `index` outside [0, size), or None."""
    bad = np.flatnonzero((index < 0) | (index >= size))
    return (int(bad[0]), int(index[bad[0]])) if len(bad) else None


def range_message(found: tuple[int, int], dim: int, size: int) -> str:
    return f"index[{found[0]}] = {found[1]} is out of range for dim {dim} of size {size}"


class IndexSelect(_Global):
    name = "index_select"

    def dim(self, shape: tuple[int, ...], params: dict[str, Any]) -> int:
        return axis_in("index_select", params["dim"], shape)

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        if len(ins) != 2:
            raise ShapeError(f"index_select: takes tensor_i and index, got {len(ins)} tensors")
        x, index = ins
        if len(index.shape) != 1:
            raise ShapeError(f"index_select: index must be 1-D, got shape {index.shape}")
        if not dtypes.is_int(index.dtype):
            raise UnsupportedError(f"index_select: index must be an integer tensor (the seed: int32), got {index.dtype}")
        dim = self.dim(x.shape, params)
        return [Spec(x.shape[:dim] + index.shape + x.shape[dim + 1:], x.dtype)]

    def kernel(self, ins: list[Tensor], params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return "index_select", {"dim": self.dim(ins[0].shape, params)}

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        x, index = arrays
        dim = self.dim(x.shape, params)
        shape = x.shape[:dim] + index.shape + x.shape[dim + 1:]
        out = np.empty(shape, x.dtype)
        for o in np.ndindex(shape):
            out[o] = x[o[:dim] + (index[o[dim]],) + o[dim + 1:]]
        return [out]


INDEX_SELECT = register(IndexSelect())


def index_select(tensor_i: Tensor, index: TensorLike, dim: int, name: str | None = None) -> Tensor:
    """The slices of tensor_i along dim at the positions in index (1-D), in index's order."""
    params = {"dim": integer(dim, "index_select", "dim")}
    known = index if isinstance(index, np.ndarray) else index.graph.known(index) if isinstance(index, Tensor) else None
    if known is not None and isinstance(tensor_i, (Tensor, np.ndarray)) and known.ndim == 1:
        dim = INDEX_SELECT.dim(tensor_i.shape, params)
        found = out_of_range(known, tensor_i.shape[dim])
        if found:
            raise IndexRangeError(f"index_select: {range_message(found, dim, tensor_i.shape[dim])}")
    return apply_one(INDEX_SELECT, [tensor_i, index], params, name)


class Where(_Global):
    name = "where"

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        if len(ins) != 1:
            raise ShapeError(f"where: takes one tensor, got {len(ins)}")
        x = ins[0]
        return [Spec((int(np.prod(x.shape)), len(x.shape)), "int32", bounded=True)]

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        x = arrays[0]
        found = [i for i in np.ndindex(x.shape) if x[i] != 0]
        return [np.array(found, np.int32).reshape(len(found), x.ndim)]


WHERE = register(Where())


def where(tensor_i: Tensor, name: str | None = None) -> Tensor:
    """The coordinates (int32, one row of rank values each) of tensor_i's nonzero elements."""
    return apply_one(WHERE, [tensor_i], {}, name)
