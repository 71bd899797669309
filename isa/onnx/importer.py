"""isa.from_onnx: an ONNX model as an isa.Graph.

    g = isa.from_onnx("resnet50.onnx")                      # a path or an onnx.ModelProto
    g = isa.from_onnx(model, values={"shape": np.array([1, -1])}, shapes={"x": (1, 3, 224, 224)})

What happens, in order, before any op is added:
1. load: a path is read with its external data, which must lie beneath the model's own folder
   (a location that is absolute, or that `..` or a link takes outside it, is refused);
2. opset: the default domain's opset must be between 11 and the newest the onnx package
   knows (onnx.defs.onnx_opset_version()); a model of opset 7 to 10 (or older, where the
   converter has adapters) is first converted to opset 11 by onnx.version_converter;
3. unsupported ops: every node whose op type has no mapping (isa/onnx/registry.OPS) is
   counted, and one UnsupportedError lists them all ("If x2, Loop x1");
4. graph inputs given in `values` become constants (a shape tensor fed as an input), `shapes`
   fixes symbolic dimensions, and ONNX shape inference (with data propagation) runs.
Then every node maps onto npusim ops in order: initializers and Constant nodes are constants,
graph inputs are inputs, and values computed from shapes alone are folded (`_map`, by each op's `fold` rule). Every
output is checked against shape inference's shape and type. Graph outputs keep their ONNX
names (made valid npusim names by builder.tensor_name).
"""

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
from onnx import external_data_helper, numpy_helper, shape_inference, version_converter

from ..errors import ConfigError, GraphError, InputError, ShapeError, SimError, UnsupportedError
from . import conv, elementwise, generate, index, matmul, quant, reduce, resize, shape  # noqa: F401 (they register their mappings)
from .bn_fold import fold_batch_norms
from .builder import DTYPES, Builder, ImportGraph, dtype_of, tensor_name
from .registry import OPS

MIN_OPSET = 11
DEFAULT_DOMAINS = ("", "ai.onnx")


def max_opset():
    return onnx.defs.onnx_opset_version()


def from_onnx(model, values=None, shapes=None, name=None, fold=True):
    """An ONNX model (a path or an onnx.ModelProto) as an isa.Graph.

    values: graph input name -> array; those inputs become constants (their values known when
            the graph is built, as a Reshape's shape or a Slice's starts must be).
    shapes: graph input name -> shape, for inputs with symbolic dimensions.
    fold: fold inference BatchNormalization into the Conv, ConvTranspose or Gemm before it (bn_fold.py).
    """
    model, where = load(model)
    model = upgrade(model, where)
    opset = check_opset(model, where)
    check_ops(model, where)
    model = _bind(model, dict(values or {}), dict(shapes or {}), where)
    if fold:
        model = fold_batch_norms(model)
    inferred = _infer(model, where)
    g = ImportGraph(tensor_name(name or model.graph.name or "onnx"))
    b = Builder(g, opset, inferred)
    _inputs(b, model, where)
    for i, node in enumerate(model.graph.node):
        b.node, b.index = node, i
        g.prefix = tensor_name(node.name or (node.output[0] if node.output else f"node{i}"))
        _map(b, node)
    g.prefix = None
    for out in model.graph.output:
        b.node = onnx.helper.make_node("Identity", [out.name], [out.name], name=f"graph output {out.name}")
        name, k = tensor_name(out.name), 0
        while name in g.outputs:
            k += 1
            name = f"{tensor_name(out.name)}_{k}"
        g.output(b.output_tensor(out.name), name)
    return g


# ---- loading and checks ------------------------------------------------------------------------

def load(model):
    """(ModelProto with its external data, a description for messages)."""
    if isinstance(model, onnx.ModelProto):
        external = [t.name for t in _tensors(model.graph) if external_data_helper.uses_external_data(t)
                    and not t.raw_data]
        if external:
            raise InputError(f"ONNX model: tensor(s) {', '.join(external[:5])} keep their data in external files; "
                             "give the model's path so the data can be read from beneath its folder")
        return model, f"ONNX model {model.graph.name!r}"
    path = Path(model)
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot read an ONNX model ({exc})") from None
    except Exception as exc:  # protobuf's DecodeError and friends
        raise InputError(f"{path}: not an ONNX model ({type(exc).__name__}: {exc})") from None
    folder = path.resolve().parent
    for t in _tensors(proto.graph):
        if external_data_helper.uses_external_data(t):
            _check_location(t, folder, path)
    try:
        external_data_helper.load_external_data_for_model(proto, str(folder))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot read the model's external data ({exc})") from None
    return proto, str(path)


def _check_location(tensor, folder, path):
    info = {e.key: e.value for e in tensor.external_data}
    location = info.get("location", "")
    target = (folder / location).resolve()
    if not location or Path(location).is_absolute() or not target.is_relative_to(folder):
        raise InputError(f"{path}: tensor {tensor.name!r} keeps its data at {location!r}, outside the model's folder {folder}; "
                         "external data is read only from beneath the model's own folder")


def _tensors(graph):
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


def check_opset(model, where):
    versions = {o.domain: o.version for o in model.opset_import}
    version = next((versions[d] for d in DEFAULT_DOMAINS if d in versions), None)
    if version is None:
        raise UnsupportedError(f"{where}: imports no opset of the default ONNX domain")
    if not MIN_OPSET <= version <= max_opset():
        raise UnsupportedError(f"{where}: opset {version} is outside the supported range {MIN_OPSET}..{max_opset()} "
                               f"(onnx {onnx.__version__}); convert it with onnx.version_converter")
    return version


def upgrade(model, where):
    """A model of an opset before 11 converted to opset 11 by onnx.version_converter (its
    adapters rewrite the ops whose definitions changed: Upsample becomes Resize, ...); a model
    the converter cannot convert keeps check_opset's error, with the converter's reason."""
    versions = {o.domain: o.version for o in model.opset_import}
    version = next((versions[d] for d in DEFAULT_DOMAINS if d in versions), None)
    if version is None or version >= MIN_OPSET:
        return model
    try:
        return version_converter.convert_version(model, MIN_OPSET)
    except Exception as exc:  # the converter raises its own ConvertError, or RuntimeError
        reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}" if str(exc).strip() else type(exc).__name__
        raise UnsupportedError(f"{where}: opset {version} is outside the supported range {MIN_OPSET}..{max_opset()} "
                               f"(onnx {onnx.__version__}) and onnx.version_converter cannot convert it ({reason})") from None


def unsupported_ops(model):
    """Counter of the model's op types that have no mapping ("com.microsoft.Attention" for
    another domain's op)."""
    found = Counter()
    for node in model.graph.node:
        if node.domain not in DEFAULT_DOMAINS:
            found[f"{node.domain}.{node.op_type}"] += 1
        elif node.op_type not in OPS:
            found[node.op_type] += 1
    return found


def check_ops(model, where):
    found = unsupported_ops(model)
    if found:
        listed = ", ".join(f"{op} x{n}" for op, n in sorted(found.items()))
        raise UnsupportedError(f"{where}: {sum(found.values())} node(s) of {len(found)} op type(s) npusim does not map: {listed}")


def static_inputs(model):
    """Names of graph inputs whose values the graph needs when it is built: those a node reads
    where a shape or an index must be known (a Reshape's shape), directly or through shape
    arithmetic the importer folds. Give them to from_onnx(values=...)."""
    graph = model.graph
    inits = {t.name for t in graph.initializer}
    inputs = {i.name for i in graph.input} - inits
    producer = {out: node for node in graph.node for out in node.output}
    stack = [node.input[i] for node in graph.node if node.op_type in OPS
             for i in OPS[node.op_type].static if i < len(node.input) and node.input[i]]
    seen, need = set(), []
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in inputs:
            need.append(name)
        elif name in producer and producer[name].op_type in OPS and OPS[producer[name].op_type].fold:
            stack.extend(i for i in producer[name].input if i)
    return sorted(need)


def _bind(model, values, shapes, where):
    """A copy of the model with the inputs in `values` turned into initializers and the shapes
    in `shapes` written into the inputs' types."""
    names = {i.name: i for i in model.graph.input}
    for key in list(values) + list(shapes):
        if key not in names:
            raise InputError(f"{where}: no graph input named {key!r} (inputs: {', '.join(names)})")
    if not values and not shapes:
        return model
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    for name, given in shapes.items():
        dims = names[name].type.tensor_type.shape.dim
        given = tuple(int(d) for d in given)
        if len(dims) != len(given):
            raise InputError(f"{where}: input {name!r} has rank {len(dims)}, shapes= gives {given}")
        target = next(i for i in graph.input if i.name == name).type.tensor_type.shape.dim
        for d, n in zip(target, given):
            if d.HasField("dim_value") and d.dim_value != n:
                raise InputError(f"{where}: input {name!r} has dimension {d.dim_value}, shapes= gives {n}")
            d.dim_value = n
    for name, value in values.items():
        elem = names[name].type.tensor_type.elem_type
        want = onnx.helper.tensor_dtype_to_np_dtype(elem)
        array = np.asarray(value)
        if array.dtype != want:
            converted = array.astype(want)
            if not np.array_equal(converted, array):
                raise InputError(f"{where}: values[{name!r}] is {array.dtype} and does not convert exactly to the input's {want}")
            array = converted
        graph.initializer.append(numpy_helper.from_array(array, name))
        keep = [i for i in graph.input if i.name != name]
        del graph.input[:]
        graph.input.extend(keep)
    return model


def _infer(model, where):
    """ONNX value name -> (shape or None, elem type or None) from shape inference."""
    try:
        inferred = shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception as exc:  # onnx raises its own InferenceError (or a ValueError for a model over 2 GB)
        raise ShapeError(f"{where}: ONNX shape inference failed: {exc}") from None
    out = {}
    for v in list(inferred.graph.value_info) + list(inferred.graph.output) + list(inferred.graph.input):
        if not v.type.HasField("tensor_type"):
            continue
        tt = v.type.tensor_type
        dims = None
        if tt.HasField("shape"):
            dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim)
        out[v.name] = (dims, tt.elem_type or None)
    return out


def _inputs(b, model, where):
    graph = model.graph
    for init in graph.initializer:
        b.values[init.name] = numpy_helper.to_array(init)
    for inp in graph.input:
        if inp.name in b.values:  # an initializer listed as an input (IR < 4): a constant
            continue
        if not inp.type.HasField("tensor_type"):
            raise UnsupportedError(f"{where}: input {inp.name!r} is a {inp.type.WhichOneof('value')}; npusim takes tensors only")
        tt = inp.type.tensor_type
        dtype = dtype_of(tt.elem_type, f"{where}: input {inp.name!r}")
        dims = []
        for k, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value"):
                dims.append(d.dim_value)
            else:
                raise InputError(f"{where}: input {inp.name!r} has symbolic dimension {k} ({d.dim_param or '?'!r}); "
                                 f"fix it with shapes={{{inp.name!r}: (...)}} (or --inputs with an array of the shape)")
        if not tt.HasField("shape"):
            raise InputError(f"{where}: input {inp.name!r} has no shape; give it with shapes=")
        if 0 in dims:  # no element to wait for: an empty tensor is known (an op that reads it is refused)
            b.values[inp.name] = np.empty(dims, onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
            continue
        t = b.g.input(b.unique(tensor_name(inp.name)), tuple(dims) or (1,), dtype)
        b.tensors[inp.name] = t
        if not dims:
            b.rank0.add(inp.name)


def _empty_outputs(b, node):
    """Empty arrays for a node whose outputs are all empty by shape inference (an op of an
    empty tensor computes nothing), else None."""
    outs = []
    for name in node.output:
        dims, elem = b.inferred.get(name, (None, None))
        if not name or dims is None or not all(isinstance(d, int) for d in dims) or 0 not in dims or elem not in DTYPES:
            return None
        outs.append(np.empty(dims, onnx.helper.tensor_dtype_to_np_dtype(elem)))
    return outs


def _map(b, node):
    mapping = OPS[node.op_type]
    try:
        outs = _empty_outputs(b, node) if any(b.known(n) is not None and b.known(n).size == 0 for n in node.input if n) else None
        if outs is None and mapping.fold is not None:
            arrays = [b.known(n) if n else None for n in node.input]
            if all(a is not None for a, n in zip(arrays, node.input) if n):
                outs = mapping.fold(b, node, arrays)
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


__all__ = ["DTYPES", "ConfigError", "GraphError", "from_onnx", "load", "max_opset", "static_inputs", "unsupported_ops"]
