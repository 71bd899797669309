"""What a mapping works with: the graph under construction and the values of the ONNX model.

An ONNX value is either a Tensor of the graph (an input, a constant, an op's output) or a
numpy array the importer knows at import time (an initializer, a Constant, a shape and what
is computed from shapes alone; see importer.py `_map`). A known array becomes a graph constant the first
time an op needs it as an operand (`tensor`).

npusim tensors have at least one dimension: an ONNX scalar (rank 0) is a tensor of shape (1,)
that the builder remembers as rank 0, so ONNX shapes (`shape`) stay exact for the mappings that
care (Gather with a scalar index, Unsqueeze, MatMul of vectors).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
from onnx import NodeProto, TensorProto, helper

from .. import dtypes, limits, ops
from ..errors import GraphError, OutOfMemoryError, ShapeError, UnsupportedError
from ..graph import Graph, Tensor
from .store import to_array

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray

    from ..errors import SimError
    from .store import Weights

# A mapping's value for one ONNX output (registry.py): a Tensor, an array (or a number) known at import
# time, a Tensor ONNX makes a scalar, or None for an optional output it does not make.
Output: TypeAlias = "Tensor | NDArray[Any] | np.generic | Rank0 | None"
Shape: TypeAlias = "tuple[int, ...]"
# ONNX shape inference's answer for a value: (shape, a dimension a name where symbolic; elem type), either None if unknown
Inferred: TypeAlias = "tuple[tuple[int | str, ...] | None, int | None]"

_BY_ONNX_NAME = {
    "FLOAT": "float32", "FLOAT16": "float16", "BFLOAT16": "bfloat16", "DOUBLE": "float64",
    "FLOAT8E4M3FN": "float8_e4m3fn", "FLOAT8E4M3FNUZ": "float8_e4m3fnuz", "FLOAT8E5M2": "float8_e5m2",
    "FLOAT8E5M2FNUZ": "float8_e5m2fnuz", "FLOAT4E2M1": "float4_e2m1fn", "FLOAT8E8M0": "float8_e8m0fnu",
    "INT8": "int8", "INT16": "int16", "INT32": "int32", "INT64": "int64", "INT4": "int4", "INT2": "int2",
    "UINT8": "uint8", "UINT16": "uint16", "UINT32": "uint32", "UINT64": "uint64", "UINT4": "uint4", "UINT2": "uint2",
    "BOOL": "bool",
}
# ONNX element type -> npusim dtype (the types the installed onnx knows: INT2 and FLOAT4E2M1 are recent)
DTYPES = {getattr(TensorProto, k): v for k, v in _BY_ONNX_NAME.items() if hasattr(TensorProto, k)}
ONNX_TYPES = {v: k for k, v in DTYPES.items()}

CEIL_POOLS = ("MaxPool", "AveragePool", "LpPool")
_BAD = re.compile(r"[^A-Za-z0-9_.:/-]")


def dtype_of(elem_type: int, what: str) -> str:
    """The npusim dtype of an ONNX element type, or an UnsupportedError naming `what`."""
    if elem_type not in DTYPES:
        name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else str(elem_type)
        raise UnsupportedError(f"{what}: ONNX type {name} has no npusim dtype (npusim has {', '.join(dtypes.NAMES)})")
    return DTYPES[elem_type]


def node_attr(node: NodeProto, name: str, default: Any = None) -> Any:
    """A node's attribute value as onnx.helper gives it, or `default` when the node has none."""
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def tensor_name(onnx_name: str) -> str:
    """The npusim name of an ONNX value name: characters a graph name may not hold become '_',
    and a name not starting with a letter or '_' gets a 't_' prefix ("0" -> "t_0")."""
    name = _BAD.sub("_", onnx_name) or "t"
    return name if re.match(r"[A-Za-z_]", name) else f"t_{name}"


class Rank0:
    """A mapping's output that ONNX makes a scalar (rank 0): the tensor holds its one value."""

    def __init__(self, tensor: Tensor) -> None:
        self.tensor = tensor


class ImportGraph(Graph):
    """A Graph whose ops get names from the ONNX node being imported ("conv1", "conv1/add"), so
    traces and per-op tables speak of the model's own nodes: the node's first op that runs an
    instruction takes its name, views and the rest get "<node>/<op>"."""

    prefix: str | None = None
    VIEWS = ("reshape", "squeeze", "expand_dims")

    def _fresh(self, op: str) -> str:
        if self.prefix is None:
            return super()._fresh(op)
        taken = self.prefix in self.tensors or self.prefix in self._node_names
        base = self.prefix if not taken and op not in self.VIEWS else f"{self.prefix}/{op}"
        name, k = base, 0
        while name in self.tensors or name in self._node_names:
            k += 1
            name = f"{base}_{k}"
        return name


class Known(dict[str, "NDArray[Any]"]):
    """ONNX value name -> numpy array known at import time: the values computed while importing,
    the inputs bound to values, and the model's constants, read from its Weights when first asked
    for (an unused weight is never read)."""

    def __init__(self, weights: Weights, values: Mapping[str, NDArray[Any]]) -> None:
        super().__init__(values)
        self.weights = weights

    def __contains__(self, name: object) -> bool:
        return dict.__contains__(self, name) or name in self.weights

    def __missing__(self, name: str) -> NDArray[Any]:
        if name in self.weights:
            return self.weights[name]
        raise KeyError(name)

    def get(self, name: str, default: NDArray[Any] | None = None) -> NDArray[Any] | None:  # type: ignore[override]  # dict.get's overloads; this one only ever gives an array or None
        return self[name] if name in self else default  # noqa: SIM401 - this is get()


class Builder:
    def __init__(self, graph: ImportGraph, opset: int, inferred: dict[str, Inferred], values: Known) -> None:
        self.g = graph
        self.opset = opset
        self.inferred = inferred  # ONNX value name -> (shape tuple or None, elem type or None)
        self.tensors: dict[str, Tensor] = {}  # ONNX value name -> Tensor
        self.values = values  # ONNX value name -> numpy array known at import time (a Known)
        self.rank0: set[str] = set()  # names of ONNX scalars held by tensors of shape (1,)
        self.reshaped: dict[tuple[str, Shape], Tensor] = {}  # (constant name, shape) -> the constant in that shape
        self.node = NodeProto()  # the node being mapped (importer.py sets it before each mapping)
        self.index = 0

    # ---- the node being mapped ---------------------------------------------------------------

    def where(self) -> str:
        n = self.node
        label = n.name or (n.output[0] if n.output else f"#{self.index}")
        return f"node {label} ({n.op_type})"

    def error(self, message: str, cls: type[SimError] = UnsupportedError) -> SimError:
        return cls(f"{self.where()}: {message}")

    def reject(self, attr: str, value: object, why: str = "") -> UnsupportedError:
        """The error for an attribute value npusim cannot express."""
        return UnsupportedError(f"{self.where()}: attribute {attr}={value!r} is not supported" + (f" ({why})" if why else ""))

    def attr(self, name: str, default: Any = None) -> Any:
        for a in self.node.attribute:
            if a.name == name:
                value = helper.get_attribute_value(a)
                if isinstance(value, bytes):
                    return value.decode()
                if a.type == a.TENSOR:
                    return to_array(value, self.values.weights.folder, self.values.weights.where)
                return value
        return default

    def has(self, i: int) -> bool:
        return i < len(self.node.input) and self.node.input[i] != ""

    def input_name(self, i: int) -> str:
        return self.node.input[i]

    @property
    def count(self) -> int:
        """How many inputs the node gives (optional ones left out at the end do not count)."""
        return len(self.node.input)

    # ---- values -------------------------------------------------------------------------------

    def _name(self, ref: int | str) -> str:
        return self.node.input[ref] if isinstance(ref, int) else ref

    def known(self, ref: int | str) -> NDArray[Any] | None:
        """The value of an input (its position or ONNX name) when known at import time, else None."""
        name = self._name(ref)
        if name in self.values:
            return self.values[name]
        if name in self.tensors:
            value = self.g.known(self.tensors[name])
            if value is not None and name in self.rank0:
                return value.reshape(())
            return value
        return None

    def static(self, i: int, what: str) -> NDArray[Any]:
        """An input whose value the graph needs when it is built."""
        value = self.known(i)
        if value is None:
            raise self.error(f"input {i} ({what}, {self.node.input[i]!r}) must be known when the graph is built (an initializer, "
                             "a Constant or computed from shapes): memory is planned before the run; give a graph input's value "
                             "with from_onnx(..., values={name: array})")
        return value

    def static_ints(self, i: int, what: str) -> list[int]:
        """A static input ONNX types as integers (a shape, axes, pads, k), as a list of ints; a
        value of another type is refused rather than truncated."""
        value = self.static(i, what)
        if value.dtype.kind not in "iu":
            raise self.error(f"input {i} ({what}, {self.node.input[i]!r}) is {value.dtype}; {self.node.op_type} takes integers there",
                             GraphError)
        return [int(v) for v in value.reshape(-1)]

    def tensor(self, ref: int | str) -> Tensor:
        """An input as a Tensor of the graph (a known value becomes a constant)."""
        name = self._name(ref)
        if name in self.tensors:
            return self.tensors[name]
        if name not in self.values:
            raise GraphError(f"{self.where()}: input {name!r} is not produced by any earlier node, initializer or graph input")
        array = self.values[name]
        if array.size == 0:
            raise self.error(f"value {name!r} is empty (shape {array.shape}); npusim tensors have at least one element")
        t = self.g.constant(self.unique(tensor_name(name)), array)
        self.tensors[name] = t
        if array.ndim == 0:
            self.rank0.add(name)
        return t

    def output_tensor(self, name: str) -> Tensor:
        """A graph output as a Tensor: an empty value (known from the shapes alone) becomes an
        empty constant, which only a graph output may be."""
        value = self.values.get(name)
        if name not in self.tensors and value is not None and value.size == 0:
            self.tensors[name] = self.g.constant(self.unique(tensor_name(name)), value)
        return self.tensor(name)

    def shape(self, ref: int | str) -> Shape:
        """The ONNX shape of an input (() for a scalar)."""
        name = self._name(ref)
        if name in self.values:
            return tuple(self.values[name].shape)
        if name in self.tensors:
            return () if name in self.rank0 else self.tensors[name].shape
        raise GraphError(f"{self.where()}: input {name!r} is not produced by any earlier node, initializer or graph input")

    def rank(self, ref: int | str) -> int:
        return len(self.shape(ref))

    def dtype(self, ref: int | str) -> str:
        name = self._name(ref)
        if name in self.values:
            return dtypes.of_array(self.values[name], name) if self.values[name].dtype.kind != "O" else "object"
        return self.tensor(name).dtype

    def check_size(self, shape: Sequence[int], dtype: np.dtype | type | str, what: str) -> Sequence[int]:
        """Refuse, before allocating it, a value computed at import time beyond the host-memory cap
        (limits.HOST_MEMORY, read when called: a caller may lower it)."""
        nbytes = math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize
        if nbytes > limits.HOST_MEMORY:
            raise self.error(f"{what} of shape {tuple(int(d) for d in shape)} would take {nbytes} bytes when the graph is built; "
                             f"the limit is {limits.HOST_MEMORY} bytes", OutOfMemoryError)
        return shape

    def unique(self, base: str) -> str:
        name, k = base, 0
        while name in self.g.tensors:
            k += 1
            name = f"{base}_{k}"
        return name

    def const(self, array: ArrayLike, dtype: str | None = None) -> Tensor:
        """A fresh constant tensor."""
        return self.g.constant(self.unique(f"{self.g.prefix or 'const'}/c"), np.asarray(array), dtype)

    # ---- helpers the mappings share ---------------------------------------------------------

    def reshape(self, t: Tensor, shape: Iterable[int]) -> Tensor:
        """t in another shape: a view, or for a constant the constant itself in that shape (its
        bytes shared), so no view op sits between an op and the element-wise ops after it that
        read the constant (which would cut their layer group, isa/lower/schedule/fusion.py)."""
        dims = tuple(int(d) for d in shape) or (1,)
        if t.shape == dims:
            return t
        if t.name in self.g.constants:
            key = (t.name, dims)
            if key not in self.reshaped:
                value = self.g.constants[t.name].reshape(dims)
                value.flags.writeable = False
                self.reshaped[key] = self.g.constant(self.unique(f"{t.name}.{'x'.join(map(str, dims))}"), value, t.dtype)
            return self.reshaped[key]
        return ops.reshape(t, dims)

    def bcast(self, *ts: Tensor) -> list[Tensor]:
        """Tensors brought to one rank (numpy's rule: leading 1s), as the element-wise ops need."""
        rank = max(len(t.shape) for t in ts)
        return [self.reshape(t, (1,) * (rank - len(t.shape)) + t.shape) for t in ts]

    def full(self, value: float, dtype: str, rank: int) -> Tensor:
        """A one-element constant of `dtype` shaped (1,) * rank, to broadcast against a tensor."""
        return self.const(np.full((1,) * max(rank, 1), value, dtypes.np_dtype(dtype)))

    def cast(self, t: Tensor, dtype: str, saturate: bool = True, round_mode: str = "up") -> Tensor:
        """t converted to dtype as ONNX's Cast does: a float becomes an integer by truncation
        (toward zero), anything becomes a bool by comparison with 0. Integers saturate. A float8
        target saturates too when `saturate` (ONNX's default): the value is clamped to the
        format's largest finite magnitude first (infinities included, NaN stays NaN); without it
        the conversion is the machine's, to +-inf or NaN beyond the range. float8_e8m0fnu
        follows `round_mode` (see e8m0)."""
        if t.dtype == dtype:
            return t
        if dtype == "bool":
            return ops.nes(t, 0, out_dtype="bool")
        if dtypes.is_float(t.dtype) and not dtypes.is_float(dtype):
            return ops.condition_select(t, ops.floor(t), ops.ceil(t), out_dtype=dtype)
        if dtype == "float8_e8m0fnu":
            return self.e8m0(t, saturate, round_mode)
        if dtype in dtypes.FLOAT8 and saturate:
            top = dtypes.float_max(dtype)
            top = int(top) if dtypes.is_int(t.dtype) else top
            return ops.clamp(t, -top, top, out_dtype=dtype)
        return ops.cast(t, out_dtype=dtype)

    def e8m0(self, t: Tensor, saturate: bool, round_mode: str) -> Tensor:
        """t as float8_e8m0fnu (a power of two) by ONNX's rule, from the machine's conversion to
        the nearest power (a mantissa of a half or more rounds up): `up` doubles a result below
        t, `down` halves one above it; with `saturate` t is first clamped to [2^-127, 2^127], so
        0 (and anything below) gives 2^-127 where the machine gives NaN. Negative values,
        which ONNX leaves unspecified, saturate to 2^-127 (NaN without saturate)."""
        if round_mode not in ("up", "down", "nearest"):
            raise self.reject("round_mode", round_mode)
        x = t if t.dtype in ("float32", "float64") else ops.cast(t, out_dtype="float32")
        if saturate:
            x = ops.clamp(x, dtypes.float_tiny("float8_e8m0fnu"), dtypes.float_max("float8_e8m0fnu"))
        r = ops.cast(x, out_dtype="float8_e8m0fnu")
        if round_mode == "nearest":
            return r
        back = ops.cast(r, out_dtype=x.dtype)
        if round_mode == "up":
            return ops.condition_select(ops.gt(x, back, out_dtype="bool"), ops.muls(r, 2.0), r)
        return ops.condition_select(ops.lt(x, back, out_dtype="bool"), ops.muls(r, 0.5), r)

    # ---- outputs ------------------------------------------------------------------------------

    def set_outputs(self, outs: Sequence[Output]) -> None:
        node = self.node
        padded = list(outs) + [None] * (len(node.output) - len(outs))
        for name, value in zip(node.output, padded):
            if not name:
                continue
            if value is None:
                raise self.error(f"output {name!r} is not produced by npusim's mapping of {node.op_type}")
            scalar = isinstance(value, Rank0)
            if isinstance(value, Rank0):
                value = value.tensor
            if not isinstance(value, Tensor):  # an array or a number known at import time
                array = np.asarray(value)
                self.values[name] = array
                self._check(name, array.shape, array.dtype)
                continue
            self.tensors[name] = value
            inferred = self.inferred.get(name, (None, None))[0]
            if scalar or (inferred == () and value.shape == (1,)):
                if value.size != 1:
                    raise self.error(f"output {name!r} should be a scalar, got shape {value.shape}", ShapeError)
                self.rank0.add(name)
            self._check(name, self.shape(name), dtypes.np_dtype(value.dtype), value.bounded)

    def _check(self, name: str, shape: Sequence[int], np_dtype: np.dtype, bounded: bool = False) -> None:
        """Our output against ONNX's shape inference: a mismatch is a bug to report, never a
        number to return. A data-sized output's shape is an upper bound."""
        inferred, elem = self.inferred.get(name, (None, None))
        dims = tuple(d for d in inferred or () if isinstance(d, int))
        static = inferred is not None and len(dims) == len(inferred)  # every dimension known
        if self.node.op_type in CEIL_POOLS and self.attr("ceil_mode", 0):
            # ONNX's shape inference (1.22) keeps a last window that starts in the end padding,
            # which the operator's definition, its reference and onnxruntime drop: ours follow them
            static = static and len(dims) != len(shape)
        if bounded:
            static = static and (len(dims) != len(shape) or any(d > s for d, s in zip(dims, shape)))
        if static and (bounded or dims != tuple(shape)):
            raise self.error(f"output {name!r}: npusim's mapping gives shape {tuple(shape)}, ONNX shape inference {dims}",
                             ShapeError)
        if elem in DTYPES and np.dtype(np_dtype) != dtypes.np_dtype(DTYPES[elem]):
            raise self.error(f"output {name!r}: npusim's mapping gives {np.dtype(np_dtype)}, ONNX says {DTYPES[elem]}", GraphError)
