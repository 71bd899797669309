"""Element-wise ops of the BMLang seed (Base Element-wise Operator), run on the vector unit.

Each op is a row: a name, the vector function(s) its lowering emits and a numpy reference.
All of them share one definition class and one lowering template (isa/lower/local.py).

Semantics common to the family (seed, "Base Element-wise Operator"):
- two-tensor ops need equal ranks; a dimension may differ only where one side is 1 (broadcast);
- integer results saturate to the output dtype; the output dtype may differ from the inputs'
  where a chip's op table allows it (`out_dtype=`);
- operands are computed in float32 when any is a float, else exactly (int64), unless the
  chip's table says a dtype is computed in another (BM1684 computes INT32 through FLOAT32).
"""

from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np

from .. import dtypes
from ..errors import ShapeError, UnsupportedError
from .base import REGISTRY, OpDef, Spec, apply, register


@dataclass(frozen=True)
class In:
    """Operand `index` of the node, in a vector step's operand list."""

    index: int


def broadcast_shape(shapes, what):
    """The seed's broadcast: equal ranks, and per dimension equal sizes or a 1."""
    ranks = {len(s) for s in shapes}
    if len(ranks) != 1:
        raise ShapeError(f"{what}: operands must have the same rank, got shapes {', '.join(map(str, shapes))}")
    out = []
    for dims in zip(*shapes):
        sizes = set(dims) - {1}
        if len(sizes) > 1:
            raise ShapeError(f"{what}: shapes {', '.join(map(str, shapes))} do not broadcast (sizes {sorted(sizes)} in one dimension)")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def compute_dtype(in_dtypes, compute=None):
    """The dtype an element-wise op computes in, given its input dtypes and a chip's compute map."""
    mapped = {(compute or {}).get(d, d) for d in in_dtypes}
    return "float32" if any(dtypes.is_float(d) for d in mapped) else "int64"


class Elementwise(OpDef):
    """One row of the family: `steps(params)` gives the vector step(s) as (fn, operands) where
    operands are In(i) or numbers; `ref` computes the result from compute-dtype arrays."""

    template = "elementwise"

    def __init__(self, name, fn, ref, tensors, scalars=()):
        self.name, self.fn, self.ref = name, fn, ref
        self.tensors, self.scalars = tensors, scalars  # tensor operand count, scalar param names

    def steps(self, params):
        return [(self.fn, [In(i) for i in range(self.tensors)] + [params[s] for s in self.scalars])]

    def ref_fn(self, params):
        return self.ref

    def infer(self, ins, params):
        if len(ins) != self.tensors:
            raise ShapeError(f"{self.name}: takes {self.tensors} tensor(s), got {len(ins)}")
        shape = broadcast_shape([s.shape for s in ins], self.name)
        for s in self.scalars:
            self._check_scalar(params[s], ins[0].dtype, s)
        out = params.get("out_dtype") or np.result_type(*(dtypes.np_dtype(s.dtype) for s in ins)).name
        return [Spec(shape, dtypes.check(out, f"{self.name} out_dtype"))]

    def _check_scalar(self, value, dtype, what):
        if isinstance(value, bool) or not isinstance(value, Real):
            raise UnsupportedError(f"{self.name}: {what} must be a number, got {value!r}")
        if dtypes.is_int(dtype) and not isinstance(value, Integral):
            raise UnsupportedError(f"{self.name}: {what} {value!r} must be an integer for a {dtype} tensor")

    def reference(self, arrays, params, compute=None):
        cdt = dtypes.np_dtype(compute_dtype([dtypes.of_array(a) for a in arrays], compute))
        args = [a.astype(cdt) for a in arrays] + [cdt.type(params[s]) for s in self.scalars]
        out = self.infer([Spec(a.shape, dtypes.of_array(a)) for a in arrays], params)[0]
        with np.errstate(all="ignore"):  # IEEE answers (NaN, inf) are the answers
            result = self.ref_fn(params)(*args)
        return [dtypes.convert(np.broadcast_to(result, out.shape), out.dtype)]


class Active(Elementwise):
    """active(x, active_type): the seed's ActiveType, by enum name or short name ("relu")."""

    # short name -> (vector fn, reference); ACTIVE_LEAKY_RELU in `active` has slope 0 (seed).
    TYPES = {
        "tanh": ("tanh", np.tanh),
        "sigmoid": ("sigmoid", lambda x: 1 / (1 + np.exp(-x))),
        "relu": ("relu", lambda x: np.maximum(x, 0)),
        "exp": ("exp", np.exp),
        "elu": ("elu", lambda x: np.where(x > 0, x, np.expm1(x))),
        "sqrt": ("sqrt", np.sqrt),
        "square": ("square", np.square),
        "rsqrt": ("rsqrt", lambda x: 1 / np.sqrt(x)),
        "absval": ("abs", np.abs),
        "ln": ("ln", np.log),
        "round": ("round", dtypes.round_half_away),
        "ceil": ("ceil", np.ceil),
        "floor": ("floor", np.floor),
        "sin": ("sin", np.sin),
        "cos": ("cos", np.cos),
        "leaky_relu": ("leaky_relu", lambda x: np.where(x > 0, x, x * 0)),
    }
    variants = tuple(TYPES)

    def __init__(self):
        super().__init__("active", None, None, 1)

    @classmethod
    def canonical(cls, active_type):
        key = str(active_type).lower().removeprefix("active_")
        if key not in cls.TYPES:
            raise UnsupportedError(f"active: unknown active_type {active_type!r}; known: {', '.join(cls.TYPES)}")
        return key

    def variant(self, params):
        return params["active_type"]

    def steps(self, params):
        fn = self.TYPES[params["active_type"]][0]
        return [(fn, [In(0), 0.0])] if fn == "leaky_relu" else [(fn, [In(0)])]

    def ref_fn(self, params):
        return self.TYPES[params["active_type"]][1]


_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum, "min": np.minimum}
_WITH_SCALAR = {"adds": "add", "subs": "sub", "muls": "mul"}

for _name, _ref in _BINARY.items():
    register(Elementwise(_name, _name, _ref, 2))
for _name, _fn in _WITH_SCALAR.items():
    register(Elementwise(_name, _fn, _BINARY[_fn], 1, ("scalar",)))
ACTIVE = register(Active())


def _binary(op_name):
    opdef = REGISTRY[op_name]

    def op(tensor_i0, tensor_i1, out_dtype=None, name=None):
        return apply(opdef, [tensor_i0, tensor_i1], {"out_dtype": out_dtype}, name)

    op.__name__ = op.__qualname__ = op_name
    op.__doc__ = f"tensor_o = {op_name}(tensor_i0, tensor_i1), element-wise with shape broadcast (BMLang `{op_name}`)."
    return op


def _with_scalar(op_name):
    opdef = REGISTRY[op_name]

    def op(tensor_i0, scalar, out_dtype=None, name=None):
        return apply(opdef, [tensor_i0], {"scalar": scalar, "out_dtype": out_dtype}, name)

    op.__name__ = op.__qualname__ = op_name
    op.__doc__ = f"tensor_o = {opdef.fn}(tensor_i0, scalar), element-wise (BMLang `{op_name}`)."
    return op


def active(tensor_i, active_type, out_dtype=None, name=None):
    """tensor_o = activation(tensor_i) for one of the seed's ActiveType values."""
    return apply(ACTIVE, [tensor_i], {"active_type": Active.canonical(active_type), "out_dtype": out_dtype}, name)


add, sub, mul, max, min = (_binary(n) for n in _BINARY)  # noqa: A001  (the seed's names)
adds, subs, muls = (_with_scalar(n) for n in _WITH_SCALAR)
