"""masked_fill(x, mask, value): Ascend ATB FillOperation with withMask=true (seed 000).

out = value where mask is 1, x where it is 0. An element-wise op on the vector unit (a select;
an int8 mask is first compared with 0), so it tiles and fuses like the rest of the family
(isa/ops/elementwise.py).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..graph import Tensor
from .arrange import fill_value
from .base import Spec, TensorLike, check_dtype
from .elementwise import Elementwise, In, Step, Tmp, broadcast_shape, define
from .gather import known_values


class MaskedFill(Elementwise):
    """masked_fill(x, mask, value): out = value where mask is 1 (true), x where it is 0.

    x is float16, int32 or bfloat16 and is never broadcast; mask is int8 or bool and broadcasts
    to x (numpy rules: missing leading dimensions, and dimensions of 1); value holds one number
    (a number or a one-element list, the seed's `value.size() == 1`). The seed allows mask values
    0 and 1 only: a known mask holding anything else is rejected when the graph is built; a mask
    known only at run time is read as nonzero = 1 (an int8 -1 fills too)."""

    seed = "atb"
    X_DTYPES = ("float16", "int32", "bfloat16")  # seed 000, x
    MASK_DTYPES = ("int8", "bool")  # seed 000, mask

    def __init__(self) -> None:
        super().__init__("masked_fill", "select_gt", None, inputs=("x", "mask"), scalars=("value",))

    def prepare(self, params: dict[str, Any]) -> dict[str, Any]:
        value = params["value"]
        if isinstance(value, (Sequence, np.ndarray)):
            if len(value) != 1:
                raise ShapeError("masked_fill: value must hold exactly one element (the seed: value.size() == 1), "
                                 f"got {len(value)}: {list(value)}")
            (value,) = value
        params["value"] = value
        return params

    def operand_shape(self, i: int, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
        """The mask with its missing leading dimensions as 1s."""
        return (1,) * (len(shapes[0]) - len(shapes[i])) + tuple(shapes[i])

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        if len(ins) != 2:
            raise ShapeError(f"masked_fill: takes x and mask, got {len(ins)} tensors")
        x, mask = ins
        check_dtype(x.dtype, self.X_DTYPES, "masked_fill: x")
        check_dtype(mask.dtype, self.MASK_DTYPES, "masked_fill: mask")
        if len(mask.shape) > len(x.shape):
            raise ShapeError(f"masked_fill: mask {mask.shape} has more dimensions than x {x.shape}; x is never broadcast")
        shape = broadcast_shape([x.shape, self.operand_shape(1, [x.shape, mask.shape])], "masked_fill")
        if shape != x.shape:
            raise ShapeError(f"masked_fill: mask {mask.shape} would broadcast x {x.shape} to {shape}; x is never broadcast (the seed)")
        fill_value(params["value"], x.dtype, "masked_fill", "value")
        if params.get("out_dtype") not in (None, x.dtype):
            raise UnsupportedError(f"masked_fill: the output has x's dtype {x.dtype}, out_dtype {params['out_dtype']} asked")
        return [Spec(x.shape, x.dtype)]

    def steps(self, params: dict[str, Any], ins: list[str], out: str) -> list[Step]:
        """A bool mask is 0 or 1 already: one select. An int8 mask is first made 0/1 (nonzero = 1)."""
        value = fill_value(params["value"], ins[0], self.name, "value")  # an int for int32 x: exact, not through float32
        if ins[1] == "bool":
            return [Step("select_gt", (In(1), 0, value, In(0)))]
        return [Step("ne", (In(1), 0), Tmp(0)), Step("select_gt", (Tmp(0), 0, value, In(0)))]

    def temps(self, params: dict[str, Any], ins: list[str], out: str) -> list[str]:
        return [] if ins[1] == "bool" else ["int8"]

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        x, mask = arrays
        out = x.copy()
        out[np.broadcast_to(mask != 0, x.shape)] = np.asarray(params["value"]).astype(x.dtype)
        return [out]


_masked_fill = define(MaskedFill(), MaskedFill.__doc__)


def masked_fill(x: TensorLike, mask: TensorLike, value: float, out_dtype: str | None = None, name: str | None = None) -> Tensor:
    """x with value where mask is 1 (seed 000, FillOperation with withMask=true)."""
    known = known_values(mask)
    if known is not None:
        bad = np.asarray(known)[~np.isin(known, (0, 1))]
        if bad.size:
            raise UnsupportedError(f"masked_fill: mask may hold only 0 and 1 (the seed), got {int(bad[0])} among its values")
    return _masked_fill(x, mask, value, out_dtype=out_dtype, name=name)
