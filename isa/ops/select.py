"""Select ops (the seed's condition_select, select, lut)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from ..errors import ShapeError, UnsupportedError
from .base import Spec
from .elementwise import Elementwise, In, Step, define


class _Choice(Elementwise):
    """An op choosing between two value operands (positions `values`), which share the result's
    dtype; a one-element value operand (a COEFF_TENSOR, the seed says) serves every element."""

    values: tuple[int, ...] = ()  # the value operands

    def operand_shape(self, i: int, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
        return (1,) * len(shapes[0]) if i in self.values and int(np.prod(shapes[i])) == 1 else shapes[i]

    def out_dtype(self, ins: list[Spec], params: dict[str, Any]) -> str:
        a, b = (ins[i] for i in self.values)
        if a.dtype != b.dtype:
            names = [self.inputs[i] for i in self.values]
            raise UnsupportedError(f"{self.name}: {names[0]} is {a.dtype} and {names[1]} {b.dtype}; they must match")
        return params.get("out_dtype") or a.dtype


class ConditionSelect(_Choice):
    """tensor_o = cond > 0 ? tensor_sel0 : tensor_sel1; a one-element tensor_sel0 or tensor_sel1
    is used for every element."""

    values = (1, 2)

    def __init__(self) -> None:
        super().__init__("condition_select", "select_gt", None, ("tensor_cond", "tensor_sel0", "tensor_sel1"))

    def steps(self, params: dict[str, Any], ins: list[str], out: str) -> list[Step]:
        return [Step("select_gt", (In(0), 0, In(1), In(2)))]

    def ref_fn(self, params: dict[str, Any]) -> Callable[..., Any]:
        return lambda cond, a, b: np.where(cond > 0, a, b)


class Select(_Choice):
    """tensor_o = a > b ? c : d (GREATER_THAN) or a >= b ? c : d (GREATER_EQUAL); a and b
    broadcast together, a one-element c or d is used for every element."""

    values = (2, 3)
    TYPES: ClassVar[dict] = {"GREATER_THAN": ("select_gt", np.greater), "GREATER_EQUAL": ("select_ge", np.greater_equal)}

    def __init__(self) -> None:
        inputs = ("tensor_a", "tensor_b", "tensor_c", "tensor_d")
        super().__init__("select", None, None, inputs, order=inputs + ("select_type",))

    def prepare(self, params: dict[str, Any]) -> dict[str, Any]:
        kind = str(params["select_type"]).upper()
        if kind not in self.TYPES:
            raise UnsupportedError(f"select: unknown select_type {params['select_type']!r}; known: {', '.join(self.TYPES)}")
        params["select_type"] = kind
        return params

    def steps(self, params: dict[str, Any], ins: list[str], out: str) -> list[Step]:
        return [Step(self.TYPES[params["select_type"]][0], (In(0), In(1), In(2), In(3)))]

    def ref_fn(self, params: dict[str, Any]) -> Callable[..., Any]:
        compare = self.TYPES[params["select_type"]][1]
        return lambda a, b, c, d: np.where(compare(a, b), c, d)


class Lut(Elementwise):
    """tensor_o = table[tensor_i]: tensor_i is INT8 or UINT8 and indexes the 256-entry table
    by its bits read as unsigned (an INT8 -1 reads entry 255); the result has the table's dtype."""

    table_inputs = (1,)

    def __init__(self) -> None:
        super().__init__("lut", "lut", None, ("tensor_i", "table"))

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        if len(ins) != 2:
            raise ShapeError(f"lut: takes tensor_i and table, got {len(ins)} tensors")
        if ins[0].dtype not in ("int8", "uint8"):
            raise UnsupportedError(f"lut: tensor_i is {ins[0].dtype}; it must be int8 or uint8")
        if int(np.prod(ins[1].shape)) != 256:
            raise ShapeError(f"lut: the table must have 256 entries, got shape {ins[1].shape}")
        if params.get("out_dtype") not in (None, ins[1].dtype):
            raise UnsupportedError(f"lut: the output dtype is the table's ({ins[1].dtype}), got {params['out_dtype']}")
        return [Spec(ins[0].shape, ins[1].dtype)]

    def steps(self, params: dict[str, Any], ins: list[str], out: str) -> list[Step]:
        return [Step("lut", (In(0), In(1)), cdt=ins[1])]

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        x, table = arrays
        return [table.reshape(-1)[x.view(np.uint8) if x.dtype == np.int8 else x]]


condition_select = define(ConditionSelect(), ConditionSelect.__doc__)
select = define(Select(), Select.__doc__)
lut = define(Lut(), Lut.__doc__)
