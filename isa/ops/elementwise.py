"""The element-wise family's definition class: every op of the seed's element-wise sections
(arithmetic, activations, fixed point, compare, bits and shifts, stride, select, quantization)
is an instance, and all of them share one lowering template (isa/lower/templates/local.py).

An op says what the vector unit does for it as `Step`s: a vector function, its operands (the
node's tensors `In(i)`, scratch tiles `Tmp(k)` of dtypes the op declares, or numbers) and where
the result goes (`OUT` or a scratch tile). Most ops are one step; fixed-point and
quantization ops are short sequences whose scratch tiles hold the seed's INT32 intermediates.

Semantics common to the family (seed, "Base Element-wise Operator"):
- two-tensor ops need equal ranks; a dimension may differ only where one side is 1 (broadcast);
- integer results saturate to the output dtype (isa.dtypes.convert); the output dtype may
  differ from the inputs' where the chip's op table allows it (`out_dtype=`);
- a step computes in float32 when any operand is a float (float64 when one is float64), else
  exactly (int64, or uint64 for unsigned operands), after the chip's compute map
  (BM1682/BM1684 compute INT32 through FLOAT32); a step may fix its dtype.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from .. import dtypes
from ..errors import ShapeError, UnsupportedError
from ..graph import Tensor
from .base import OpDef, Spec, apply_one, register

T = TypeVar("T")  # what _ordered orders: operands, or their values

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from numpy import ufunc



@dataclass(frozen=True)
class In:
    """Tensor operand `index` of the node."""

    index: int


@dataclass(frozen=True)
class Tmp:
    """Scratch tile `index` of the op's `temps`."""

    index: int


OUT = "out"  # the node's result tile


@dataclass(frozen=True)
class Step:
    fn: str  # a vector function (isa.instructions.VECTOR_FNS)
    operands: tuple  # In, Tmp or numbers
    dst: object = OUT  # OUT or Tmp
    cdt: str | None = None  # compute dtype; None: step_dtype's rule


def step_dtype(step: Step, operand_dtypes: Sequence[str]) -> str:
    """The dtype a step computes in: its own, or isa.dtypes.compute_dtype's rule over its
    operands: float64 when one is float64, float32 when one is another float or a float number,
    else exact integers (int64, or uint64 for unsigned operands of which one is uint64).
    operand_dtypes are the step's tensor operands' dtypes, the node's inputs already passed
    through the chip's compute map (see `computed`)."""
    if step.cdt:
        return step.cdt
    numbers = [o for o in step.operands if isinstance(o, (int, float)) and not isinstance(o, bool)]
    return dtypes.compute_dtype(*operand_dtypes, *numbers)


def computed(dtype: str, compute: dict[str, str] | None) -> str:
    """The dtype a chip computes an input of `dtype` in (BM1684: int32 -> float32)."""
    return (compute or {}).get(dtype, dtype)


def broadcast_shape(shapes: list[tuple[int, ...]], what: str) -> tuple[int, ...]:
    """The seed's broadcast: equal ranks, and per dimension equal sizes or a 1."""
    if len({len(s) for s in shapes}) != 1:
        raise ShapeError(f"{what}: operands must have the same rank, got shapes {', '.join(map(str, shapes))}")
    out = []
    for dims in zip(*shapes):
        sizes = set(dims) - {1}
        if len(sizes) > 1:
            raise ShapeError(f"{what}: shapes {', '.join(map(str, shapes))} do not broadcast (sizes {sorted(sizes)} in one dimension)")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def check_number(value: object, what: str, integer: bool = False, low: int | None = None, high: int | None = None) -> Real:
    if isinstance(value, bool) or not isinstance(value, Integral if integer else Real):
        raise UnsupportedError(f"{what} must be {'an integer' if integer else 'a number'}, got {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):  # type: ignore[operator]  # a Real compares; typeshed's Real does not say
        raise UnsupportedError(f"{what} must be in [{low}, {high}], got {value}")
    return value


class Elementwise(OpDef):
    """One op of the family. By default: tensor operands named by `inputs` broadcast together,
    scalar params named by `scalars`, both in the seed's argument `order`; one step of vector
    function `fn` on them in that order; `ref` (a numpy function of the compute-dtype operands,
    in the same order) as the reference. `defaults` gives params that may be left out."""

    template = "elementwise"
    restricted: int | None = None  # how many leading operands dtypes_allowed applies to (None: all)
    table_inputs: tuple[int, ...] = ()  # operands read whole (a lookup table), not element-wise
    strided = False  # reads its inputs with strides (the stride_* ops): starts a layer group

    def __init__(self, name: str, fn: str | None, ref: Callable | ufunc | None, inputs: tuple[str, ...] = ("tensor_i0", "tensor_i1"),
                 scalars: tuple[str, ...] = (), order: tuple[str, ...] | None = None,
                 defaults: dict[str, list[Any]] | None = None, dtypes_allowed: tuple[str, ...] | None = None) -> None:
        self.name, self.fn, self.ref = name, fn, ref
        self.inputs, self.scalars = tuple(inputs), tuple(scalars)
        self.order = tuple(order or self.inputs + self.scalars)
        self.defaults = dict(defaults or {})
        self.dtypes_allowed = dtypes_allowed  # dtypes the op itself takes (None: any)

    @property
    def tensors(self) -> int:
        return len(self.inputs)

    def _ordered(self, tensors: Iterable[T], scalars: Iterable[T]) -> tuple[T, ...]:
        """Operands in the seed's order, from tensors (in `inputs` order) and scalar values."""
        by_name = dict(zip(self.inputs, tensors))
        by_name.update(zip(self.scalars, scalars))
        return tuple(by_name[n] for n in self.order if n in by_name)

    def prepare(self, params: dict[str, Any]) -> dict[str, Any]:
        """Check and normalize params (enum names) when the op is added to a graph."""
        return params

    # ---- what the vector unit does ----------------------------------------------------------

    def vector_fn(self) -> str:
        """The vector function of the op's one step (an op defined without one overrides `steps`)."""
        if self.fn is None:
            raise NotImplementedError(f"{self.name}: defined without a vector function, so it overrides steps")
        return self.fn

    def steps(self, params: dict[str, Any], ins: list[str], out: str) -> list[Step]:
        return [Step(self.vector_fn(), self._ordered([In(i) for i in range(self.tensors)], [params[s] for s in self.scalars]))]

    def temps(self, params: dict[str, Any], ins: list[str], out: str) -> list[str]:
        """dtypes of the scratch tiles the steps use (Tmp(k) is temps[k])."""
        return []

    def operand_shape(self, i: int, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
        """How operand i broadcasts against the output (a per-channel vector may reshape)."""
        return shapes[i]

    def load_kind(self, i: int, shapes: list[tuple[int, ...]], params: dict[str, Any]) -> tuple[object, ...]:
        """What distinguishes how operand i is read from DDR: two operands of a layer group
        with the same tensor and load kind share one load."""
        return ("whole",) if i in self.table_inputs else ("view", self.operand_shape(i, shapes))

    def input_box(self, i: int, shape: tuple[int, ...], starts: tuple[int, ...], extents: tuple[int, ...],
                  params: dict[str, Any]) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """The part of operand i (of shape `shape`, see operand_shape) a box of the output
        needs, as (starts, extents, steps): its size-1 dimensions stay at 0; a table operand is
        read whole."""
        if i in self.table_inputs:
            return (0,) * len(shape), tuple(shape), (1,) * len(shape)
        pinned = [n == 1 for n in shape]
        return (
            tuple(0 if p else s for p, s in zip(pinned, starts)),
            tuple(1 if p else e for p, e in zip(pinned, extents)),
            (1,) * len(shape),
        )

    # ---- checks and inference ---------------------------------------------------------------

    def infer(self, ins: list[Spec], params: dict[str, Any]) -> list[Spec]:
        if len(ins) != self.tensors:
            raise ShapeError(f"{self.name}: takes {self.tensors} tensor(s), got {len(ins)}")
        if self.dtypes_allowed is not None:
            for k, s in enumerate(ins[: self.restricted]):
                if s.dtype not in self.dtypes_allowed:
                    raise UnsupportedError(f"{self.name}: operand {k} is {s.dtype}; {self.name} takes {', '.join(self.dtypes_allowed)}")
        for scalar in self.scalars:
            check_number(params[scalar], f"{self.name}: {scalar} for a {ins[0].dtype} tensor", integer=dtypes.is_int(ins[0].dtype))
        shape = broadcast_shape([self.operand_shape(i, [s.shape for s in ins]) for i in range(len(ins))
                                 if i not in self.table_inputs], self.name)
        return [Spec(self.out_shape(shape, params), dtypes.check(self.out_dtype(ins, params), f"{self.name} out_dtype"))]

    def out_shape(self, shape: tuple[int, ...], params: dict[str, Any]) -> tuple[int, ...]:
        return shape

    def out_dtype(self, ins: list[Spec], params: dict[str, Any]) -> str:
        return params.get("out_dtype") or np.result_type(*(dtypes.np_dtype(s.dtype) for s in ins)).name

    # ---- reference --------------------------------------------------------------------------

    def reference(self, arrays: list[np.ndarray], params: dict[str, Any], compute: dict[str, str] | None = None) -> list[np.ndarray]:
        out = self.infer([Spec(a.shape, dtypes.of_array(a)) for a in arrays], params)[0]
        step = self.steps(params, [dtypes.of_array(a) for a in arrays], out.dtype)[0]
        cdt = dtypes.np_dtype(step_dtype(step, [computed(dtypes.of_array(a), compute) for a in arrays]))
        args = self._ordered((a.astype(cdt) for a in self.reference_operands(arrays, params)), (cdt.type(params[s]) for s in self.scalars))
        with np.errstate(all="ignore"):  # IEEE answers (NaN, inf) are the answers
            result = self.ref_fn(params)(*args)
        return [dtypes.convert(np.broadcast_to(result, out.shape), out.dtype)]

    def reference_operands(self, arrays: list[np.ndarray], params: dict[str, Any]) -> list[np.ndarray]:
        return [a.reshape(self.operand_shape(i, [b.shape for b in arrays])) for i, a in enumerate(arrays)]

    def ref_fn(self, params: dict[str, Any]) -> Callable[..., Any]:
        """The reference's numpy function (an op defined without one overrides this)."""
        if self.ref is None:
            raise NotImplementedError(f"{self.name}: defined without a reference function, so it overrides ref_fn")
        return self.ref


# ---- op functions ----------------------------------------------------------------------------

def define(opdef: Elementwise, doc: str | None) -> Callable[..., Tensor]:
    """Register opdef; return its op function, taking the seed's arguments in the seed's order
    (`opdef.order`, those in `opdef.defaults` optional), then `out_dtype=` and `name=`."""
    register(opdef)
    params = [
        inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=opdef.defaults.get(n, inspect.Parameter.empty))
        for n in opdef.order
    ]
    params += [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=v)
               for n, v in opdef.defaults.items() if n not in opdef.order]
    params += [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None) for n in ("out_dtype", "name")]
    signature = inspect.Signature(params)

    def op(*args: object, **kwargs: object) -> Tensor:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        values = dict(bound.arguments)
        name = values.pop("name")
        tensors = [values.pop(n) for n in opdef.inputs]
        return apply_one(opdef, tensors, opdef.prepare(values), name)

    op.__name__ = op.__qualname__ = opdef.name
    op.__doc__ = doc
    op.__signature__ = signature  # type: ignore[attr-defined]  # inspect reads it; functions declare no such attribute
    return op
