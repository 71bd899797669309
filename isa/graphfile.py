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

`random` is normal (mean, scale), uniform (low, high; integers inclusive for integer dtypes)
drawn with numpy's default_rng(seed), so a file always gives the same values. Every error
names the file and line.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import dtypes, ops, yamlfile
from .errors import ConfigError, SimError
from .graph import Graph


@dataclass
class GraphFile:
    graph: Graph
    defaults: dict  # input name -> array, for inputs that give a `random` spec


class _Reader:
    def __init__(self, path):
        self.path = Path(path)

    def error(self, line, message):
        return ConfigError(f"{self.path}:{line}: {message}" if line else f"{self.path}: {message}")

    def mapping(self, value, line, where, required=(), optional=()):
        """value, checked to be a mapping with the required keys and no unknown ones."""
        if not isinstance(value, dict):
            raise self.error(line, f"{where}: expected a mapping, got {type(value).__name__}")
        unknown = sorted(map(str, set(value) - set(required) - set(optional)))
        if unknown:
            raise self.error(value.line_of(unknown[0]), f"{where}: unknown key {unknown[0]!r} (known: {', '.join(required + optional)})")
        for key in required:
            if key not in value:
                raise self.error(value.line, f"{where}: missing key {key!r}")
        return value


_TENSOR_KEYS = ("shape", "dtype", "random", "mean", "scale", "low", "high", "seed", "value", "file")


def load(path):
    """Read a graph file into a Graph and its default input values."""
    r = _Reader(path)
    doc = yamlfile.read(path)
    top = r.mapping(doc, 1, "graph file", ("name", "ops", "outputs"), ("inputs", "constants", "description"))
    g = _wrap(r, top, "name", lambda: Graph(top["name"]))
    defaults = {}
    inputs = _section(r, top, "inputs")
    for name in inputs:
        spec = r.mapping(inputs[name], inputs.line_of(name), f"inputs.{name}", ("shape",), _TENSOR_KEYS)
        t = _wrap(r, inputs, name, lambda: g.input(name, spec["shape"], spec.get("dtype", "float32")))
        if "random" in spec:
            defaults[name] = _wrap(r, spec, "random", lambda: _random(spec, t.shape, t.dtype))
    constants = _section(r, top, "constants")
    for name in constants:
        spec = r.mapping(constants[name], constants.line_of(name), f"constants.{name}", (), _TENSOR_KEYS)
        _wrap(r, constants, name, lambda: g.constant(name, _constant(r.path, spec), spec.get("dtype")))
    if not isinstance(top["ops"], list):
        raise r.error(top.line_of("ops"), "ops: expected a list of {op, inputs, params, name}")
    for i, item in enumerate(top["ops"]):
        spec = r.mapping(item, top["ops"].line_of(i), f"ops[{i}]", ("op", "inputs"), ("params", "name"))
        _wrap(r, top["ops"], i, lambda: _apply(g, spec))
    outputs = top["outputs"]
    pairs = outputs.items() if isinstance(outputs, dict) else [(n, n) for n in outputs]
    for out_name, tname in pairs:
        if tname not in g.tensors:
            raise r.error(top.line_of("outputs"), f"outputs: unknown tensor {tname!r}")
        _wrap(r, top, "outputs", lambda: g.output(g.tensors[tname], out_name))
    return GraphFile(g, defaults)


def _section(reader, top, key):
    """top[key]: a mapping of tensor name to spec (empty when absent)."""
    value = top.get(key) or {}
    if not isinstance(value, dict):
        raise reader.error(top.line_of(key), f"{key}: expected a mapping of tensor name to spec")
    return value


def _wrap(reader, node, key, fn):
    """Run fn; a SimError it raises gets the file and line of node[key] in front."""
    try:
        return fn()
    except SimError as exc:
        raise type(exc)(f"{reader.path}:{node.line_of(key)}: {exc}") from None


def _apply(g, spec):
    name = spec["op"]
    fn = getattr(ops, name, None)
    if name not in ops.REGISTRY or fn is None:
        raise ConfigError(f"unknown op {name!r} (known: {', '.join(sorted(ops.REGISTRY))})")
    inputs = spec["inputs"]
    missing = [t for t in inputs if t not in g.tensors]
    if missing:
        raise ConfigError(f"op {name}: unknown input tensor(s) {', '.join(map(repr, missing))}")
    params = dict(spec.get("params") or {})
    try:
        return fn(*(g.tensors[t] for t in inputs), **params, name=spec.get("name"))
    except TypeError as exc:
        raise ConfigError(f"op {name}: {exc}") from None


def _random(spec, shape, dtype):
    rng = np.random.default_rng(spec.get("seed", 0))
    kind = spec["random"]
    if kind == "normal":
        values = rng.normal(spec.get("mean", 0.0), spec.get("scale", 1.0), shape)
    elif kind == "uniform":
        low, high = spec.get("low", 0), spec.get("high", 1)
        values = rng.integers(low, high, shape, endpoint=True) if dtypes.is_int(dtype) else rng.uniform(low, high, shape)
    else:
        raise ConfigError(f"random: {kind!r} is not 'normal' or 'uniform'")
    return dtypes.convert(values, dtype)


def _constant(path, spec):
    sources = [k for k in ("value", "file", "random") if k in spec]
    if len(sources) != 1:
        raise ConfigError(f"a constant needs exactly one of value, file, random (got {', '.join(sources) or 'none'})")
    dtype = dtypes.check(spec.get("dtype", "float32"), "constant dtype")
    if "value" in spec:
        return np.asarray(spec["value"]).astype(dtypes.np_dtype(dtype))
    if "file" in spec:
        file = path.parent / spec["file"]
        try:
            return np.load(file)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read {file}: {exc}") from None
    if "shape" not in spec:
        raise ConfigError("a random constant needs a shape")
    return _random(spec, tuple(spec["shape"]), dtype)
