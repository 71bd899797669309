"""Graphs written in YAML, for the CLI and the examples.

    name: mlp
    inputs:
      x: {shape: [16, 512], dtype: float32, random: normal, seed: 0}   # random: the default value
    constants:
      w1: {shape: [512, 256], dtype: float32, random: normal, scale: 0.05, seed: 1}
      b1: {value: [[0.5, -0.5]], dtype: float32}        # or {file: b1.npy} (relative to this file)
    ops:
      - {op: matrix_mul, inputs: [x, w1], name: fc1}
      - {op: active, inputs: [fc1], params: {active_type: relu}}
    outputs: {y: active_0}                               # or a list of tensor names

`random` is normal (mean, scale) or uniform (low, high; inclusive for integer dtypes, and
within the dtype's range), drawn with numpy's default_rng(seed), so a file always gives the same
values. A constant's `value` or `file` must fit its dtype (an integer in its range, a finite
float within its largest value) and agree with `shape` when one is given; a `file` is a .npy
beneath the graph file's folder (no absolute path, no `..` or link out of it). Each op's
`params` are checked against the op's parameters: a parameter whose default is a bool, an int,
a float or a string takes only a value of that type. No tensor is drawn or read before its size
is checked: each, and all together, at most `max_bytes` (the host-memory cap of isa/limits.py,
or what a caller that knows the chip passes). Every error names the file and the line.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from numbers import Integral, Real
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from . import dtypes, limits, npyfile, ops, yamlfile
from .errors import ConfigError, SimError
from .graph import Graph
from .yamlfile import Yaml, YamlDict, YamlList

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from .graph import Tensor

T = TypeVar("T")


@dataclass
class GraphFile:
    graph: Graph
    defaults: Mapping[str, NDArray[Any]]  # input name -> array, for inputs that give a `random` spec


_RANDOM_KEYS = ("random", "mean", "scale", "low", "high", "seed")
_INPUT_KEYS = ("dtype",) + _RANDOM_KEYS
_CONSTANT_KEYS = ("shape", "dtype", "value", "file") + _RANDOM_KEYS


class _Reader:
    """Checks values of one graph file; every error it raises names the file and a line."""

    def __init__(self, path: str | Path, max_bytes: int, limit: str) -> None:
        self.path = Path(path)
        self.left, self.limit = max_bytes, f"what is left of {limit}"  # bytes the tensors still drawn or read may take

    def reserve(self, line: int | None, where: str, shape: tuple[int, ...], dtype: str, draw: str | None = None) -> None:
        """Count a tensor about to be made against the byte limit, before it is allocated: its
        own bytes stay counted, and the wider array it is first drawn in (`draw`) must fit too."""
        try:
            if draw is not None:
                limits.check_shape(shape, draw, f"{where} (drawn in {draw})", self.left, self.limit)
            self.left -= limits.check_shape(shape, dtype, where, self.left, self.limit)
        except SimError as exc:
            raise self.error(line, str(exc)) from None

    def error(self, line: int | None, message: str) -> ConfigError:
        return ConfigError(f"{self.path}:{line}: {message}")

    def mapping(self, value: Yaml, line: int | None, where: str, required: tuple[str, ...] = (),
                optional: tuple[str, ...] = ()) -> YamlDict:
        """value, checked to be a mapping with the required keys and no unknown ones."""
        if not isinstance(value, YamlDict):
            raise self.error(line, f"{where}: expected a mapping, got {_kind(value)}")
        unknown = sorted(map(str, set(value) - set(required) - set(optional)))
        if unknown:
            raise self.error(value.line_of(unknown[0]), f"{where}: unknown key {unknown[0]!r} (known: {', '.join(required + optional)})")
        for key in required:
            if key not in value:
                raise self.error(value.line, f"{where}: missing key {key!r}")
        return value

    def text(self, parent: YamlDict, key: str, where: str) -> str:
        value = parent[key]
        if not isinstance(value, str):
            raise self.error(parent.line_of(key), f"{where}: expected a name, got {_kind(value)}")
        return value

    def names(self, parent: YamlDict, key: str, where: str) -> list[str]:
        value = parent[key]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(parent.line_of(key), f"{where}: expected a list of tensor names, got {_kind(value)}")
        return value

    def number(self, spec: YamlDict, key: str, where: str, default: float, integer: bool = False, minimum: float | None = None) -> Any:
        value = spec.get(key, default)
        ok = isinstance(value, Integral if integer else Real) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or (minimum is not None and value < minimum):
            want = "an integer" if integer else "a number"
            want += f" >= {minimum}" if minimum is not None else ""
            raise self.error(spec.line_of(key), f"{where}.{key}: expected {want}, got {value!r}")
        return value

    def shape(self, spec: YamlDict, where: str) -> tuple[int, ...]:
        value = spec["shape"]
        if not isinstance(value, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in value):
            raise self.error(spec.line_of("shape"), f"{where}.shape: expected a list of positive integers, got {value!r}")
        return tuple(value)

    def dtype(self, spec: YamlDict, where: str) -> str:
        name = spec.get("dtype", "float32")
        if not isinstance(name, str):
            raise self.error(spec.line_of("dtype"), f"{where}.dtype: expected a dtype name such as float32, got {_kind(name)}")
        try:
            return dtypes.check(name, f"{where}.dtype")
        except SimError as exc:
            raise self.error(spec.line_of("dtype"), str(exc)) from None


def load(path: str | Path, max_bytes: int | None = None, limit: str = "the host-memory cap") -> GraphFile:
    """Read a graph file into a Graph and its default input values; the tensors it draws or
    reads take at most `max_bytes` together (by default the host-memory cap; `limit` says what
    the bound is, for messages)."""
    r = _Reader(path, limits.HOST_MEMORY if max_bytes is None else max_bytes, limit)
    top = r.mapping(yamlfile.read(path), 1, "graph file", ("name", "ops", "outputs"), ("inputs", "constants", "description"))
    g = _located(r, top, "name", lambda: Graph(top["name"]))
    defaults: dict[str, NDArray[Any]] = {}
    inputs = _section(r, top, "inputs")
    for name in inputs:
        where = f"inputs.{name}"
        spec = r.mapping(inputs[name], inputs.line_of(name), where, ("shape",), _INPUT_KEYS)
        t = _located(r, inputs, name, lambda: g.input(name, r.shape(spec, where), r.dtype(spec, where)))  # noqa: B023
        if "random" in spec:
            defaults[name] = _random(r, spec, where, t.shape, t.dtype, inputs.line_of(name))
    constants = _section(r, top, "constants")
    for name in constants:
        where = f"constants.{name}"
        spec = r.mapping(constants[name], constants.line_of(name), where, (), _CONSTANT_KEYS)
        array = _constant(r, spec, where)
        _located(r, constants, name, lambda: g.constant(name, array))  # noqa: B023 - called within this iteration
    if not isinstance(top["ops"], YamlList):
        raise r.error(top.line_of("ops"), f"ops: expected a list of {{op, inputs, params, name}}, got {_kind(top['ops'])}")
    with g:  # an op with no tensor input (linspace, constdata) goes to this graph
        for i, item in enumerate(top["ops"]):
            spec = r.mapping(item, top["ops"].line_of(i), f"ops[{i}]", ("op", "inputs"), ("params", "name"))
            _located(r, top["ops"], i, lambda: _apply(r, g, spec, f"ops[{i}]"))  # noqa: B023 - called within this iteration
    _outputs(r, g, top)
    return GraphFile(g, defaults)


def _kind(value: object) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {value!r}"[:60]


def _section(r: _Reader, top: YamlDict, key: str) -> YamlDict:
    """top[key]: a mapping of tensor name to spec (empty when absent)."""
    value = top.get(key) or YamlDict(line=top.line_of(key))
    if not isinstance(value, YamlDict):
        raise r.error(top.line_of(key), f"{key}: expected a mapping of tensor name to spec, got {_kind(value)}")
    return value


def _located(r: _Reader, node: YamlDict | YamlList, key: Any, fn: Callable[[], T]) -> T:
    """Run fn; a SimError it raises without a location gets node[key]'s file and line."""
    try:
        return fn()
    except ConfigError as exc:
        if str(exc).startswith(f"{r.path}:"):
            raise
        raise r.error(node.line_of(key), str(exc)) from None
    except SimError as exc:
        raise type(exc)(f"{r.path}:{node.line_of(key)}: {exc}") from None


def _apply(r: _Reader, g: Graph, spec: YamlDict, where: str) -> Tensor | list[Tensor]:
    name = r.text(spec, "op", f"{where}.op")
    fn = getattr(ops, name, None)
    if name not in ops.REGISTRY or fn is None:
        raise ConfigError(f"unknown op {name!r} (known: {', '.join(sorted(ops.REGISTRY))})")
    inputs = r.names(spec, "inputs", f"{where}.inputs")
    missing = [t for t in inputs if t not in g.tensors]
    if missing:
        raise ConfigError(f"op {name}: unknown input tensor(s) {', '.join(map(repr, missing))}")
    params = _params(r, spec, name, fn, where)
    node_name = r.text(spec, "name", f"{where}.name") if "name" in spec else None
    tensors = [g.tensors[t] for t in inputs]
    try:
        return fn(tensors, **params, name=node_name) if ops.REGISTRY[name].list_input else fn(*tensors, **params, name=node_name)
    except (TypeError, ValueError, OverflowError, IndexError, KeyError, ZeroDivisionError) as exc:
        # operands or parameters the op's own checks let through: still the file's mistake, named with what it gave
        operands = ", ".join(f"{t.name}{list(t.shape)}" for t in tensors)
        raise ConfigError(f"op {name} cannot take operands {operands} with params {_kind(dict(params))} "
                          f"({type(exc).__name__}: {exc})") from None


# A parameter whose default is of one of these types takes only values of it: (check, what it takes).
_PARAM_TYPES = {
    bool: (lambda v: isinstance(v, bool), "true or false"),
    int: (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    float: (lambda v: isinstance(v, Real) and not isinstance(v, bool) and math.isfinite(v), "a finite number"),
    str: (lambda v: isinstance(v, str), "a string"),
}


def _params(r: _Reader, spec: YamlDict, name: str, fn: Callable[..., Any], where: str) -> YamlDict:
    """The op's params, each one of its function's parameters and of the type its default has."""
    params = spec.get("params") or YamlDict(line=spec.line_of("params"))
    if not isinstance(params, YamlDict):
        raise r.error(spec.line_of("params"), f"{where}.params: expected a mapping of parameter to value, got {_kind(params)}")
    signature = inspect.signature(fn).parameters
    known = [p for p in signature if p not in ("name", "graph")]
    for key, value in params.items():
        here = f"{where}.params.{key}"
        if key not in known:
            raise r.error(params.line_of(key), f"{here}: op {name} has no parameter {key!r} (its parameters: {', '.join(known)})")
        check, takes = _PARAM_TYPES.get(type(signature[key].default), (None, ""))
        if check is not None and not check(value):
            raise r.error(params.line_of(key), f"{here}: expected {takes}, got {_kind(value)}")
    return params


def _outputs(r: _Reader, g: Graph, top: YamlDict) -> None:
    outputs = top["outputs"]
    entries: list[tuple[Yaml, Yaml, YamlDict | YamlList, Any]]
    if isinstance(outputs, YamlDict):
        entries = [(k, outputs[k], outputs, k) for k in outputs]
    elif isinstance(outputs, YamlList):
        entries = [(v, v, outputs, i) for i, v in enumerate(outputs)]
    else:
        raise r.error(top.line_of("outputs"),
                      f"outputs: expected a list of tensor names or a mapping of output name to tensor, got {_kind(outputs)}")
    for out_name, tname, parent, key in entries:
        if not isinstance(tname, str) or tname not in g.tensors:
            raise r.error(parent.line_of(key), f"outputs: unknown tensor {tname!r}")
        _located(r, parent, key, lambda: g.output(g.tensors[tname], out_name))  # noqa: B023 - called within this iteration


def _random(r: _Reader, spec: YamlDict, where: str, shape: tuple[int, ...], dtype: str, line: int | None) -> NDArray[Any]:
    kind = spec["random"]
    seed = r.number(spec, "seed", where, 0, integer=True, minimum=0)
    rng = np.random.default_rng(seed)
    if kind == "normal":
        mean, scale = r.number(spec, "mean", where, 0.0), r.number(spec, "scale", where, 1.0, minimum=0)
        r.reserve(line, where, shape, dtype, "float64")
        values = rng.normal(mean, scale, shape)
    elif kind == "uniform":
        integer = dtypes.is_int(dtype)
        low = r.number(spec, "low", where, 0, integer=integer)
        high = r.number(spec, "high", where, 1, integer=integer, minimum=low)
        top = dtypes.float_max(dtype) if dtypes.is_float(dtype) else 1
        lo, hi = dtypes.int_range(dtype) if integer else (-top if dtypes.is_float(dtype) else 0, top)
        if not (lo <= low and high <= hi) or (not integer and not math.isfinite(high - low)):
            raise r.error(spec.line_of("low" if not lo <= low else "high"),
                          f"{where}: random uniform in [{low}, {high}] goes beyond {dtype}'s range [{lo}, {hi}]")
        wide = "uint64" if dtype == "uint64" else "int64" if integer else "float64"
        r.reserve(line, where, shape, dtype, wide)
        values = rng.integers(low, high, shape, dtype=dtypes.np_dtype(wide), endpoint=True) if integer else rng.uniform(low, high, shape)
    else:
        raise r.error(spec.line_of("random"), f"{where}.random: {kind!r} is not 'normal' or 'uniform'")
    return dtypes.convert(values, dtype)


def _constant(r: _Reader, spec: YamlDict, where: str) -> NDArray[Any]:
    sources = [k for k in ("value", "file", "random") if k in spec]
    if len(sources) != 1:
        raise r.error(spec.line, f"{where}: a constant needs exactly one of value, file, random (got {', '.join(sources) or 'none'})")
    dtype = r.dtype(spec, where)
    shape = r.shape(spec, where) if "shape" in spec else None
    if "random" in spec:
        if shape is None:
            raise r.error(spec.line, f"{where}: a random constant needs a shape")
        return _random(r, spec, where, shape, dtype, spec.line)
    array = _value(r, spec, where, dtype) if "value" in spec else _file(r, spec, where, dtype)
    if shape is not None and array.shape != shape:
        raise r.error(spec.line_of("shape"), f"{where}: shape {list(shape)} does not match its data's {list(array.shape)}")
    return array


def _value(r: _Reader, spec: YamlDict, where: str, dtype: str) -> NDArray[Any]:
    try:
        array = np.array(spec["value"])
    except (ValueError, OverflowError):
        array = None
    if array is None or array.dtype.kind not in "biuf":
        raise r.error(spec.line_of("value"), f"{where}.value: expected a number or a rectangular nested list of numbers")
    r.reserve(spec.line_of("value"), where, array.shape, dtype)
    return _fit(r, spec.line_of("value"), f"{where}.value", array, dtype)


def _fit(r: _Reader, line: int | None, where: str, array: NDArray[Any], dtype: str) -> NDArray[Any]:
    """array in dtype, refused when a value would change beyond rounding: an integer dtype takes
    whole numbers in its range, a float one finite values within its largest (NaN and infinities
    stay what they are)."""
    if dtypes.is_int(dtype):
        lo, hi = dtypes.int_range(dtype)
        if array.size and ((array.dtype.kind == "f" and not np.all(np.isfinite(array))) or np.any(array != np.round(array))
                           or int(array.min()) < lo or int(array.max()) > hi):
            raise r.error(line, f"{where}: values must be integers in [{lo}, {hi}] for {dtype}")
    elif dtypes.is_float(dtype) and array.size:
        wide = dtypes.convert(array, "float64")
        finite = wide[np.isfinite(wide)]
        if finite.size and np.abs(finite).max() > dtypes.float_max(dtype):
            raise r.error(line, f"{where}: values up to {np.abs(finite).max():.9g} in magnitude do not fit {dtype} "
                                f"(largest {dtypes.float_max(dtype):.9g})")
    return dtypes.convert(array, dtype)


def _file(r: _Reader, spec: YamlDict, where: str, dtype: str) -> NDArray[Any]:
    """A .npy beneath the graph file's folder, read once its header's size is checked."""
    line, name = spec.line_of("file"), r.text(spec, "file", f"{where}.file")
    folder = r.path.resolve().parent
    file = limits.beneath(folder, name)
    if file is None:
        raise r.error(line, f"{where}.file: {name!r} is outside the graph file's folder {folder}; "
                            "a file is read only from beneath it (no absolute path, no '..', no link out)")
    try:
        array = npyfile.read_npy(file, r.left, r.limit)
    except SimError as exc:
        raise r.error(line, f"{where}.file: {exc}") from None
    r.left -= array.nbytes
    return _fit(r, line, f"{where}.file", array, dtype) if "dtype" in spec else array
