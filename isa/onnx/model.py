"""isa.from_onnx: an ONNX model as an isa.Graph that specialises itself from its feeds.

    g = isa.from_onnx("model.onnx")                             # a path or an onnx.ModelProto
    res = sim.run(g, chip, inputs={"x": x})                     # feeds and outputs by ONNX names
    g = isa.from_onnx(model, shapes={"x": (1, 3, 640, 640)})    # dynamic dimensions fixed up front
    isa.lower(g, chip)                                          # once every shape is known

Memory is planned before a run, so every shape must be known when the graph is built: each
input's dimensions (declared, or given by `shapes=` or by the feeds' shapes) and the value of
each input a shape depends on (a Reshape's shape, a Slice's starts, a Resize's scales, TopK's k,
reduction axes...: found by the importer, `OnnxGraph.static`; given by `values=` or by the
feeds). When from_onnx knows them all, the graph is built at once. Otherwise it is built by
`specialise(feeds)`, which sim.run calls, for the feeds' shapes and static values, and kept for
the next run with the same ones; until then using it as a Graph (isa.lower) raises a GraphError
naming what is missing.

Feeds and outputs speak ONNX: keyed by the model's own input and output names, in its shapes and
dtypes, where rank-0 tensors have shape (). Inside, the graph uses npusim's names (tensor_name)
and one-element tensors for scalars.
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np
import onnx

from ..errors import ConfigError, GraphError, InputError
from ..graph import Graph
from .builder import ImportGraph, tensor_name
from .importer import Source, build, declared, prepare, static_inputs

if TYPE_CHECKING:
    from pathlib import Path

    from numpy.typing import ArrayLike, NDArray
    from onnx import ModelProto

    from chips.schema import Chip

    from ..deploy import Calibration
    from .builder import Builder
    from .importer import Input


def from_onnx(model: ModelProto | str | Path, values: Mapping[str, ArrayLike] | None = None,
              shapes: Mapping[str, Sequence[int]] | None = None, name: str | None = None, passes: Sequence[str] | None = None,
              quantize: str | None = None, calibration: Calibration | None = None, chip: Chip | str | None = None) -> OnnxGraph:
    """An ONNX model (a path or an onnx.ModelProto) as an OnnxGraph (an isa.Graph).

    values: input name -> array, for inputs a shape depends on (they become constants).
    shapes: input name -> shape, fixing dynamic dimensions (dim_param, absent, or <= 0).
    passes: names of the import passes to run (isa.onnx.PASSES; all by default, () for none).
    quantize: "F16", "BF16" or "INT8": the graph deployed in that precision for `chip`, with
    `calibration` for INT8 (isa/deploy/: a table file, samples keyed by the model's input names,
    or a count of random samples), each time the graph is built.
    """
    deploy = None
    if quantize is not None:
        from ..deploy import precision

        if chip is None:
            raise ConfigError(f"isa.from_onnx(quantize={quantize!r}) needs chip=: the chip's op table decides which ops take "
                              "the precision")
        deploy = Deploy(precision(quantize), chip, calibration)
    elif calibration is not None or chip is not None:
        raise ConfigError("isa.from_onnx: calibration= and chip= go with quantize=")
    return OnnxGraph(prepare(model, passes), values or {}, shapes or {}, name, deploy)


@dataclass(frozen=True)
class Deploy:
    """A deployment precision to compile the graph in, each time it is built (isa/deploy/)."""

    dtype: str
    chip: Chip | str
    calibration: Calibration | None = None

    def apply(self, floating: ImportGraph, target: OnnxGraph, builder: Builder) -> Graph:
        from ..deploy import quantize

        calibration = self.calibration
        if isinstance(calibration, (list, tuple)):  # samples by the model's input names
            calibration = [_by_graph_names(sample, builder, k) for k, sample in enumerate(calibration)]
        return quantize(floating, self.dtype, self.chip, calibration, target=target)


def _by_graph_names(sample: Mapping[str, ArrayLike], builder: Builder, k: int) -> dict[str, NDArray[Any]]:
    if not isinstance(sample, dict):
        raise InputError(f"calibration sample {k}: expected a dict of input arrays, got {type(sample).__name__}")
    out: dict[str, NDArray[Any]] = {}
    for onnx_name, array in sample.items():
        t = builder.tensors.get(onnx_name)
        if t is None:
            raise InputError(f"calibration sample {k}: {onnx_name!r} is not a run input of the model "
                             f"(inputs: {', '.join(builder.tensors) or 'none'})")
        out[t.name] = np.asarray(array).reshape(t.shape)
    return out


@dataclass
class Bound:
    """An OnnxGraph specialised for one set of feeds: the graph to lower and the run inputs
    by its own names (the static inputs are constants of it; None when no feeds were given)."""

    graph: OnnxGraph
    inputs: dict[str, NDArray[Any]] | None

    def outputs(self, arrays: Mapping[str, NDArray[Any]]) -> dict[str, NDArray[Any]]:
        """The machine's outputs under the model's output names, scalars of shape ()."""
        return {onnx_name: arrays[name].reshape(()) if scalar else arrays[name]
                for onnx_name, name, scalar in self.graph.onnx_outputs if name in arrays}


_GRAPH_FIELDS = set(vars(Graph("probe"))) | {"onnx_inputs", "onnx_outputs"}


class OnnxGraph(ImportGraph):
    """An imported ONNX model (see the module's docstring)."""

    def __init__(self, source: Source, values: Mapping[str, ArrayLike], shapes: Mapping[str, Sequence[int]], name: str | None = None,
                 deploy: Deploy | None = None) -> None:
        self.source = source
        self.deploy = deploy
        self.declared = {i.name: declared(i, source.where) for i in source.inputs()}
        self.static = static_inputs(source)
        self.given_values = {k: self._value(k, v, "values=") for k, v in values.items()}
        self.given_shapes = {k: self._shape(k, v, "shapes=") for k, v in shapes.items()}
        self.graph_name = tensor_name(name or source.model.graph.name or "onnx")
        self._cache: dict[Hashable, OnnxGraph] = {}  # _key -> the graph specialised for it
        self.missing = self._missing(self.given_shapes, self.given_values)
        if self.missing:
            self.notes = list(source.notes)
            return
        ImportGraph.__init__(self, self.graph_name)
        if deploy is None:
            self.notes.extend(source.notes)
            b = build(self, source, self.given_shapes, self.given_values)
        else:
            floating = ImportGraph(self.graph_name)
            floating.notes.extend(source.notes)
            b = build(floating, source, self.given_shapes, self.given_values)
            deploy.apply(floating, self, b)
        self.onnx_inputs = {n: b.tensors[n].name for n in self.declared if n in b.tensors}
        self.onnx_outputs = [(out.name, name, out.name in b.rank0) for out, name in zip(source.model.graph.output, self.outputs)]

    def __getattr__(self, attr: str) -> NoReturn:
        """Reached only for attributes the object lacks: a Graph's, before the graph is built."""
        if attr not in _GRAPH_FIELDS or not self.__dict__.get("missing"):
            raise AttributeError(attr)
        raise GraphError(f"{self.source.where}: the graph is not built yet: {'; '.join(self.missing)}. Give them to "
                         "isa.from_onnx(..., shapes=..., values=...) (on the command line: --inputs with arrays of those shapes "
                         "and values), or run it with sim.run(graph, chip, inputs=feeds), which builds it for the feeds")

    def __repr__(self) -> str:
        if self.missing:
            return f"OnnxGraph({self.graph_name!r}, waiting for {'; '.join(self.missing)})"
        return super().__repr__().replace("Graph(", "OnnxGraph(", 1)

    # ---- feeds -----------------------------------------------------------------------------------

    def _input(self, name: str, what: str) -> Input:
        if name not in self.declared:
            raise InputError(f"{self.source.where}: {what} names {name!r}, which is not an input of the model "
                             f"(inputs: {', '.join(self.declared) or 'none'})")
        return self.declared[name]

    def _shape(self, name: str, shape: Sequence[int], what: str) -> tuple[int, ...]:
        inp = self._input(name, what)
        try:
            shape = tuple(int(d) for d in shape)
        except (TypeError, ValueError):
            raise InputError(f"{self.source.where}: {what} gives input {name!r} the shape {shape!r}; a shape is a tuple of "
                             "integers") from None
        if any(d < 0 for d in shape):
            raise InputError(f"{self.source.where}: {what} gives input {name!r} the shape {shape}, with a negative dimension")
        if inp.dims is not None:
            if len(shape) != len(inp.dims):
                raise InputError(f"{self.source.where}: input {name!r} has rank {len(inp.dims)} {inp.describe()}; {what} gives "
                                 f"the shape {shape}")
            for k, (want, got) in enumerate(zip(inp.dims, shape)):
                if want is not None and want != got:
                    raise InputError(f"{self.source.where}: input {name!r} has dimension {k} of {want} {inp.describe()}; {what} "
                                     f"gives {got}")
        return shape

    def _value(self, name: str, value: ArrayLike, what: str) -> NDArray[Any]:
        """A static input's value, of the input's dtype (converted only when exact)."""
        inp = self._input(name, what)
        array = np.asarray(value)
        self._shape(name, array.shape, what)
        want = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(inp.elem_type))
        if array.dtype != want:
            with np.errstate(all="ignore"):
                converted = array.astype(want)
            if array.dtype.kind not in "biuf" or not np.array_equal(converted, array):
                raise InputError(f"{self.source.where}: {what} gives input {name!r} a {array.dtype} value that does not convert "
                                 f"exactly to the input's {want}")
            array = converted
        return array

    def _missing(self, shapes: Mapping[str, tuple[int, ...]], values: Mapping[str, NDArray[Any]]) -> list[str]:
        """What the graph still needs to be built: one phrase per input."""
        out = []
        for name, inp in self.declared.items():
            if name in self.static:
                if name not in values:
                    out.append(f"input {name!r} decides shapes in the model, so its value is needed")
            elif name not in shapes and not inp.known():
                out.append(f"input {name!r} has dynamic dimensions {inp.describe()}")
        return out

    def specialise(self, feeds: Mapping[str, ArrayLike] | None = None) -> Bound:
        """The graph for these feeds (input name -> array, by the model's names) and the run
        inputs by the graph's names: this graph itself when the feeds fit it, else one built
        for the feeds' shapes and static values, kept for the next feeds alike."""
        shapes, values, run = dict(self.given_shapes), dict(self.given_values), {}
        for name, array in (feeds or {}).items():
            if name in self.static:
                values[name] = self._value(name, array, "the feeds")
                continue
            array = np.asarray(array)
            shapes[name] = self._shape(name, array.shape, "the feeds")
            run[name] = array
        key = self._key(shapes, values)
        graph = self
        if self.missing or key != self._key(self.given_shapes, self.given_values):
            cached = self._cache.get(key)
            if cached is None:
                missing = self._missing(shapes, values)
                if missing:
                    raise InputError(f"{self.source.where}: {'; '.join(missing)}: feed it (or give it to isa.from_onnx)")
                cached = self._cache[key] = OnnxGraph(self.source, values, shapes, self.graph_name, self.deploy)
            graph = cached
        inputs = {}
        for name, array in run.items():
            if name in graph.onnx_inputs:
                own = graph.onnx_inputs[name]
                inputs[own] = array.reshape(graph.tensors[own].shape) if array.ndim == 0 else array
        return Bound(graph, inputs if feeds else None)

    def _key(self, shapes: Mapping[str, tuple[int, ...]], values: Mapping[str, NDArray[Any]]) -> Hashable:
        """What a specialisation depends on: the shapes of the inputs with dynamic dimensions
        and the static inputs' values."""
        dynamic = tuple((n, shapes[n]) for n, inp in self.declared.items() if n in shapes and not inp.known() and n not in self.static)
        static = tuple((n, values[n].dtype.str, values[n].shape, values[n].tobytes()) for n in self.static if n in values)
        return dynamic, static


__all__ = ["Bound", "OnnxGraph", "from_onnx"]
