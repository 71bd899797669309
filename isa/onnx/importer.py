"""The import of an ONNX model into an isa.Graph, in two stages.

`prepare(model, passes)` runs once per model (isa.from_onnx):
1. load: a path is read with its tensors' bytes located, not loaded (store.py): data inside the
   file and external data (which must lie beneath the model's own folder) are read once, when a
   constant is first needed;
2. opset: the default domain's opset must be between 11 and the newest the onnx package knows
   (onnx.defs.onnx_opset_version()); a model of opset 7 to 10 (or older, where the converter
   has adapters) is first converted to opset 11 by onnx.version_converter;
3. the import passes (passes.py: Constant nodes and constant subgraphs folded, BatchNormalization
   folded, decomposed activations recognised, Identity and no-op pairs removed);
4. unsupported ops: every node whose op type has no mapping (registry.OPS) is counted, and one
   UnsupportedError lists them all ("If x2, Loop x1").

`build(graph, source, shapes, values)` runs once per binding of the model's dynamic dimensions
(`shapes`) and of the inputs a shape depends on (`values`, which become constants): ONNX shape
inference (with data propagation) on the graph without its large constants, then every node
maps onto npusim ops in order, by the table in registry.py; values computed from shapes and
constants alone fold (`_map`, by each op's `fold` rule). Every output is checked against shape
inference's shape and type where inference knows them.

A dimension is dynamic when it is a `dim_param`, absent, or a `dim_value` of 0 or less
(Paddle2ONNX writes -1); an input whose type has no shape has a dynamic rank.
"""
from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import external_data_helper, shape_inference, version_converter

from ..errors import GraphError, InputError, ShapeError, SimError, UnsupportedError
from . import attention, conv, elementwise, generate, index, matmul, quant, reduce, resize, shape, weight_only  # noqa: F401 (they register their mappings)
from .builder import DTYPES, Builder, Known, dtype_of, tensor_name
from .registry import DEFAULT_DOMAINS, OPS, op_key
from .store import Weights, external_info, read_model, to_array

if TYPE_CHECKING:
    from typing import Any

    from numpy.typing import NDArray
    from onnx import GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto

    from .builder import ImportGraph, Inferred, Output
    from .model import OnnxGraph

MIN_OPSET = 11


def max_opset() -> int:
    return onnx.defs.onnx_opset_version()


@dataclass
class Source:
    """A model ready to import: its graph without initializers (`model`), its constants by name
    (`weights`, read when first needed), a description for messages, its opset and the notes of
    the passes that ran."""

    model: onnx.ModelProto
    weights: Weights
    where: str
    opset: int
    notes: list = field(default_factory=list)

    def inputs(self) -> list[ValueInfoProto]:
        """The graph inputs that are not constants, as ValueInfoProtos in the model's order."""
        return [i for i in self.model.graph.input if i.name not in self.weights]

    def to_model(self) -> onnx.ModelProto:
        """The model as the passes left it, its constants initializers again (a copy: to save it
        or to run it elsewhere)."""
        model = onnx.ModelProto()
        model.CopyFrom(self.model)
        model.graph.initializer.extend(onnx.numpy_helper.from_array(np.asarray(self.weights[n]), n) for n in self.weights.names())
        return model


@dataclass(frozen=True)
class Input:
    """A graph input as declared: its npusim dtype and its dimensions (None where dynamic; `dims`
    is None when even the rank is unknown)."""

    name: str
    dtype: str
    elem_type: int
    dims: tuple | None

    def known(self) -> bool:
        return self.dims is not None and all(d is not None for d in self.dims)

    def describe(self) -> str:
        return "(unknown rank)" if self.dims is None else str(tuple("?" if d is None else d for d in self.dims))


def prepare(model: ModelProto | str | Path, passes: Sequence[str] | None) -> Source:
    """Load, convert, check and run the passes (see the module's docstring)."""
    from .passes import run_passes

    model, folder, where = _read(model)
    model = upgrade(model, where)
    opset = check_opset(model, where)
    check_nodes(model, opset, where)
    source = _split(model, folder, where, opset)
    run_passes(source, passes)
    check_ops(source.model, where)
    for inp in source.inputs():
        declared(inp, where)
    return source


# ---- loading and checks ------------------------------------------------------------------------

def _read(model: ModelProto | str | Path) -> tuple[ModelProto, Path | None, str]:
    """(ModelProto, its folder or None, a description for messages), its text checked."""
    if isinstance(model, onnx.ModelProto):
        check_text(model, "ONNX model")
        where = f"ONNX model {model.graph.name!r}"
        external = [t.name for t in _tensors(model.graph) if external_data_helper.uses_external_data(t) and not t.raw_data]
        if external:
            raise InputError(f"{where}: tensor(s) {', '.join(external[:5])} keep their data in external files; "
                             "give the model's path so the data can be read from beneath its folder")
        return model, None, where
    if not isinstance(model, (str, Path)):
        raise InputError(f"isa.from_onnx takes an onnx.ModelProto or a path, got {type(model).__name__}")
    if isinstance(model, str) and "\0" in model:
        raise InputError(f"ONNX model path {model!r} holds a NUL byte")
    path = Path(model)
    if not path.exists():
        raise InputError(f"{path}: cannot read an ONNX model (no such file)")
    if not path.is_file():
        raise InputError(f"{path}: cannot read an ONNX model (not a file)")
    real = path.resolve()
    proto = read_model(real)
    check_text(proto, str(path))
    for t in _tensors(proto.graph):  # every reference checked before anything is built
        if external_data_helper.uses_external_data(t):
            external_info(t, real.parent, str(path))
    return proto, real.parent, str(path)


def check_text(message: Any, where: str, field: str = "model") -> None:  # any protobuf message: onnx's stubs name no base
    """Every string field below `message` is UTF-8 text (protobuf hands invalid text on as
    bytes, which names and op types must not be). Only string and message fields are read: reading
    a tensor's raw_data would copy its bytes (1.6 GB for a 14B model's head)."""
    for desc in _text_fields(message.DESCRIPTOR):
        repeated = desc.is_repeated
        if not repeated and not message.HasField(desc.name):
            continue
        value = getattr(message, desc.name)
        for k, item in enumerate(value if repeated else [value]):
            path = f"{field}.{desc.name}[{k}]" if repeated else f"{field}.{desc.name}"
            if desc.message_type is not None:
                check_text(item, where, path)
            elif desc.type == desc.TYPE_STRING and not isinstance(item, str):
                raise InputError(f"{where}: {path} is not UTF-8 text: {bytes(item)[:60]!r}")


@functools.cache
def _text_fields(descriptor: Any) -> list[Any]:
    """A message type's string and message fields in field-number order (ListFields' order)."""
    return sorted((f for f in descriptor.fields if f.message_type is not None or f.type == f.TYPE_STRING), key=lambda f: f.number)


def load(model: str | Path) -> tuple[ModelProto, str]:
    """(ModelProto with all its data read, a description for messages): for callers that want
    the whole proto (the command line's input check). isa.from_onnx reads through `prepare`."""
    proto, folder, where = _read(model)
    if folder is not None:
        for t in _tensors(proto.graph):
            if external_data_helper.uses_external_data(t):
                array = to_array(t, folder, where)
                t.raw_data = onnx.numpy_helper.from_array(np.asarray(array)).raw_data
                del t.external_data[:]
                t.data_location = onnx.TensorProto.DEFAULT
    return proto, where


def _tensors(graph: GraphProto) -> Iterator[TensorProto]:
    """Every TensorProto of a graph: initializers and tensor attributes, subgraphs included."""
    yield from graph.initializer
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                yield a.t
            elif a.type == onnx.AttributeProto.TENSORS:
                yield from a.tensors
            elif a.type == onnx.AttributeProto.GRAPH:
                yield from _tensors(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sub in a.graphs:
                    yield from _tensors(sub)


def _split(model: ModelProto, folder: Path | None, where: str, opset: int) -> Source:
    """The Source: a copy of the model without its initializers, which go to Weights."""
    if len(model.graph.sparse_initializer):
        raise UnsupportedError(f"{where}: sparse initializer {model.graph.sparse_initializer[0].values.name!r}: "
                               "npusim reads dense tensors only")
    weights = Weights(folder, where)
    for t in model.graph.initializer:
        weights.add_proto(t.name, t)
    return Source(_copy_except(model, "initializer"), weights, where, opset)


def _copy_except(model: ModelProto, skipped: str) -> ModelProto:
    """A copy of the model whose graph lacks the field `skipped` (no copy of its data)."""
    copy = onnx.ModelProto()
    _copy_fields(model, copy, {"graph"})
    _copy_fields(model.graph, copy.graph, {skipped})
    return copy


def _copy_fields(source: ModelProto | GraphProto, target: ModelProto | GraphProto, skipped: set[str]) -> None:
    for desc, value in source.ListFields():
        if desc.name in skipped:
            continue
        if hasattr(value, "extend"):  # a repeated field
            getattr(target, desc.name).extend(value)
        elif desc.message_type is not None:
            getattr(target, desc.name).CopyFrom(value)
        else:
            setattr(target, desc.name, value)


_SINGLE = onnx.defs.OpSchema.FormalParameterOption.Single


def check_nodes(model: ModelProto, opset: int, where: str) -> None:
    """Every node of the default domain against its op's schema at the model's opset: how many
    inputs and outputs it has, its required ones named, each attribute once and of the schema's
    type, the required ones present. The passes and the mappings read a node's inputs by
    position and its attributes by type, so these are checked before either runs; an op without
    a schema is left to check_ops."""
    for i, node in enumerate(model.graph.node):
        if node.domain not in DEFAULT_DOMAINS:
            continue
        try:
            schema = onnx.defs.get_schema(node.op_type, opset)
        except onnx.defs.SchemaError:
            continue
        label = f"{where}: node {node.name or (node.output[0] if node.output else f'#{i}')} ({node.op_type})"
        for kind, names, formal, lo, hi in (("input", node.input, schema.inputs, schema.min_input, schema.max_input),
                                            ("output", node.output, schema.outputs, schema.min_output, schema.max_output)):
            if not lo <= len(names) <= hi:
                takes = f"at least {lo}" if hi == _VARIADIC else str(lo) if lo == hi else f"{lo} to {hi}"
                raise GraphError(f"{label} has {len(names)} {kind}s; {node.op_type} of opset {opset} takes {takes}")
            for k, (name, param) in enumerate(zip(names, formal)):
                if not name and param.option == _SINGLE:
                    raise GraphError(f"{label}: its {kind} {k} ({param.name}) is required, but its name is empty")
        seen = set()
        for a in node.attribute:
            if a.name in seen:
                raise GraphError(f"{label} has the attribute {a.name!r} twice")
            seen.add(a.name)
            want = schema.attributes.get(a.name)
            if want is not None and a.type != int(want.type):  # type: ignore[call-overload]  # AttrType is an int enum
                raise GraphError(f"{label}: attribute {a.name!r} is of type {_attribute_type(a.type)}; {node.op_type} takes "
                                 f"{_attribute_type(int(want.type))}")  # type: ignore[call-overload]
        missing = [name for name, attr in schema.attributes.items() if attr.required and name not in seen]
        if missing:
            raise GraphError(f"{label} lacks its required attribute(s) {', '.join(missing)}")


_VARIADIC = 2**31 - 1  # a schema's max_input of a variadic input


def _attribute_type(number: int) -> str:
    return onnx.AttributeProto.AttributeType.Name(number) if number in onnx.AttributeProto.AttributeType.values() else str(number)


def check_opset(model: ModelProto, where: str) -> int:
    versions = {o.domain: o.version for o in model.opset_import}
    version = next((versions[d] for d in DEFAULT_DOMAINS if d in versions), None)
    if version is None:
        raise UnsupportedError(f"{where}: imports no opset of the default ONNX domain")
    if not MIN_OPSET <= version <= max_opset():
        raise UnsupportedError(f"{where}: opset {version} is outside the supported range {MIN_OPSET}..{max_opset()} "
                               f"(onnx {onnx.__version__}); convert it with onnx.version_converter")
    return version


def upgrade(model: ModelProto, where: str) -> ModelProto:
    """A model of an opset before 11 converted to opset 11 by onnx.version_converter (its
    adapters rewrite the ops whose definitions changed: Upsample becomes Resize, ...); a model
    the converter cannot convert keeps check_opset's error, with the converter's reason."""
    versions = {o.domain: o.version for o in model.opset_import}
    version = next((versions[d] for d in DEFAULT_DOMAINS if d in versions), None)
    if version is None or version >= MIN_OPSET:
        return model
    try:
        return version_converter.convert_version(model, MIN_OPSET)
    except Exception as exc:  # noqa: BLE001 - the converter raises its own ConvertError, or RuntimeError
        reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}" if str(exc).strip() else type(exc).__name__
        raise UnsupportedError(f"{where}: opset {version} is outside the supported range {MIN_OPSET}..{max_opset()} "
                               f"(onnx {onnx.__version__}) and onnx.version_converter cannot convert it ({reason})") from None


def unsupported_ops(model: ModelProto) -> Counter[str]:
    """Counter of the model's op types that have no mapping ("com.microsoft.Attention" for
    another domain's op)."""
    return Counter(key for key in map(op_key, model.graph.node) if key not in OPS)


def check_ops(model: ModelProto, where: str) -> None:
    found = unsupported_ops(model)
    if found:
        listed = ", ".join(f"{op} x{n}" for op, n in sorted(found.items()))
        raise UnsupportedError(f"{where}: {sum(found.values())} node(s) of {len(found)} op type(s) npusim does not map: {listed}")


def declared(inp: ValueInfoProto, where: str) -> Input:
    """A graph input's declared type: a tensor of an npusim dtype, its dynamic dimensions None."""
    if not inp.type.HasField("tensor_type"):
        raise UnsupportedError(f"{where}: input {inp.name!r} is a {inp.type.WhichOneof('value')}; npusim takes tensors only")
    tt = inp.type.tensor_type
    dtype = dtype_of(tt.elem_type, f"{where}: input {inp.name!r}")
    if not tt.HasField("shape"):
        return Input(inp.name, dtype, tt.elem_type, None)
    dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tt.shape.dim)
    return Input(inp.name, dtype, tt.elem_type, dims)


def static_inputs(model: Source | ModelProto) -> list[str]:
    """Names of graph inputs whose values the graph needs when it is built: those a node reads
    where a shape or an index must be known (a Reshape's shape), directly or through shape
    arithmetic the importer folds. (A ModelProto or a Source.)"""
    if isinstance(model, Source):
        graph, constants = model.model.graph, set(model.weights.names())
    else:
        graph, constants = model.graph, {t.name for t in model.graph.initializer}
    inputs = {i.name for i in graph.input} - constants
    producer = {out: node for node in graph.node for out in node.output}
    stack = [node.input[i] for node in graph.node if op_key(node) in OPS
             for i in OPS[op_key(node)].static if i < len(node.input) and node.input[i]]
    seen, need = set(), []
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in inputs:
            need.append(name)
        elif name in producer and op_key(producer[name]) in OPS and OPS[op_key(producer[name])].fold:
            stack.extend(i for i in producer[name].input if i)
    order = [i.name for i in graph.input]
    return sorted(need, key=order.index)


# ---- building --------------------------------------------------------------------------------------

def build(g: OnnxGraph | ImportGraph, source: Source, shapes: Mapping[str, tuple[int, ...]],
          values: Mapping[str, NDArray[Any]]) -> Builder:
    """Map every node of the source onto npusim ops in graph `g` (an ImportGraph), for the
    given shapes of dynamic inputs and values of the inputs that become constants. Returns
    the Builder (its `rank0` names the ONNX scalars)."""
    inferred = infer(source, shapes, values)
    b = Builder(g, source.opset, inferred, Known(source.weights, values))
    _inputs(b, source, shapes)
    for i, node in enumerate(source.model.graph.node):
        b.node, b.index = node, i
        g.prefix = tensor_name(node.name or (node.output[0] if node.output else f"node{i}"))
        _map(b, node)
    g.prefix = None
    for out in source.model.graph.output:
        b.node = onnx.helper.make_node("Identity", [out.name], [out.name], name=f"graph output {out.name}")
        name, k = tensor_name(out.name), 0
        while name in g.outputs:
            k += 1
            name = f"{tensor_name(out.name)}_{k}"
        g.output(b.output_tensor(out.name), name)
    return b


ACTIVATIONS = ("HardSwish", "HardSigmoid", "Gelu", "Mish", "Swish")  # shape-preserving: inferred as Identity where the opset lacks them


def infer(source: Source, shapes: Mapping[str, tuple[int, ...]],
          values: Mapping[str, NDArray[Any]]) -> dict[str, Inferred]:
    """ONNX value name -> (shape or None, elem type or None) from shape inference, run on the
    graph with its small constants (whose values shapes may depend on) and its large ones as
    typed inputs without data, the given shapes and values bound and dynamic dimensions
    (declared <= 0) left unknown."""
    model = onnx.ModelProto()
    model.CopyFrom(source.model)
    model.ir_version = max(model.ir_version, 4)  # initializers need not be inputs
    graph = model.graph
    weights = source.weights
    listed = {i.name for i in graph.input}
    for name in weights.names():
        if weights.small(name):
            graph.initializer.append(weights.proto(name))
        elif name not in listed:
            dims, elem = weights.type(name)
            graph.input.append(onnx.helper.make_tensor_value_info(name, elem, dims))
    for name, value in values.items():
        graph.initializer.append(onnx.numpy_helper.from_array(np.asarray(value), name))
    keep = [i for i in graph.input if i.name not in values]
    del graph.input[:]
    graph.input.extend(keep)
    for v in list(graph.input) + list(graph.output) + list(graph.value_info):
        tt = v.type.tensor_type
        if v.name in shapes:
            tt.shape.Clear()
            for n in shapes[v.name]:
                tt.shape.dim.add().dim_value = n
            continue
        for d in tt.shape.dim:
            if d.HasField("dim_value") and d.dim_value <= 0:
                d.Clear()
    for node in graph.node:
        if node.op_type in ACTIVATIONS and node.domain in DEFAULT_DOMAINS and not _defined(node.op_type, source.opset):
            node.op_type = "Identity"
            del node.attribute[:]
    try:
        inferred = shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception as exc:  # noqa: BLE001 - onnx raises its own InferenceError (or a ValueError for a model over 2 GB)
        raise ShapeError(f"{source.where}: ONNX shape inference failed: {exc}") from None
    out: dict[str, Inferred] = {}
    for v in list(inferred.graph.value_info) + list(inferred.graph.output) + list(inferred.graph.input):
        if not v.type.HasField("tensor_type"):
            continue
        tt = v.type.tensor_type
        found: tuple[int | str, ...] | None = None
        if tt.HasField("shape"):
            found = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else (d.dim_param or "?") for d in tt.shape.dim)
        out[v.name] = (found, tt.elem_type or None)
    return out


def _defined(op_type: str, opset: int) -> bool:
    try:
        onnx.defs.get_schema(op_type, opset)
        return True
    except onnx.defs.SchemaError:
        return False


def _inputs(b: Builder, source: Source, shapes: Mapping[str, tuple[int, ...]]) -> None:
    for inp in source.inputs():
        if inp.name in b.values:  # a graph input given a value: a constant
            continue
        info = declared(inp, source.where)
        dims = shapes.get(inp.name, info.dims)
        if dims is None or any(d is None for d in dims):
            raise InputError(f"{source.where}: input {inp.name!r} has dynamic dimensions {info.describe()}; fix them with "
                             f"shapes={{{inp.name!r}: (...)}} or feed it to sim.run (or --inputs with an array of the shape)")
        if 0 in dims:  # no element to wait for: an empty tensor is known (an op that reads it is refused)
            b.values[inp.name] = np.empty(dims, onnx.helper.tensor_dtype_to_np_dtype(info.elem_type))
            continue
        t = b.g.input(b.unique(tensor_name(inp.name)), tuple(dims) or (1,), info.dtype)
        b.tensors[inp.name] = t
        if not dims:
            b.rank0.add(inp.name)


def _empty_outputs(b: Builder, node: NodeProto) -> list[NDArray[Any]] | None:
    """Empty arrays for a node whose outputs are all empty by shape inference (an op of an
    empty tensor computes nothing), else None."""
    outs = []
    for name in node.output:
        dims, elem = b.inferred.get(name, (None, None))
        sizes = tuple(d for d in dims or () if isinstance(d, int))
        if not name or dims is None or len(sizes) != len(dims) or 0 not in sizes or elem is None or elem not in DTYPES:
            return None
        outs.append(np.empty(sizes, onnx.helper.tensor_dtype_to_np_dtype(elem)))
    return outs


def _map(b: Builder, node: NodeProto) -> None:
    mapping = OPS[op_key(node)]
    try:
        empty = any(value is not None and value.size == 0 for value in (b.known(n) for n in node.input if n))
        outs: Sequence[Output] | None = _empty_outputs(b, node) if empty else None
        if outs is None and mapping.fold is not None:
            arrays = [b.known(n) for n in node.input]
            known = [a for a in arrays if a is not None]
            if len(known) == len(arrays):  # every input given and known (the folded ops have no optional input)
                outs = mapping.fold(b, node, known)
        if outs is None:
            outs = mapping.fn(b, node)
        b.set_outputs(outs)
    except SimError as exc:
        if str(exc).startswith(b.where()):
            raise
        raise type(exc)(f"{b.where()}: {exc}") from None
    except (ValueError, TypeError, IndexError, KeyError) as exc:  # a malformed model (shapes that disagree, an attribute missing)
        raise GraphError(f"{b.where()}: cannot map the node ({type(exc).__name__}: {exc}); is the model valid "
                         "(onnx.checker.check_model)?") from exc


__all__ = ["MIN_OPSET", "Input", "Source", "build", "check_nodes", "check_text", "declared", "load",
           "max_opset", "prepare", "static_inputs", "unsupported_ops"]
