"""Fuzzing (issue 23): valid chip YAML, graph YAML, program text and ONNX models, mutated by
hypothesis (fields dropped, duplicated, given another type or an extreme value; lines dropped,
repeated or swapped; a model's nodes, inputs, attributes, dimensions, types and tensor data, its
edges made dangling or cyclic), must each load and run to a success or a SimError, within CASE_SECONDS, in a worker process whose
address space is limited (tests/fuzz_worker.py). A hang, a crash of the worker or any other
exception fails the test and shows the text that did it.

The default run tries EXAMPLES inputs of each kind, a few seconds a test; `make fuzz` sets
NPUSIM_FUZZ_EXAMPLES to try many more.
"""

import base64
import copy
import json
import math
import os
import re
import select
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from google.protobuf.descriptor import FieldDescriptor
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

import chips
import isa
from isa.onnx import OPS

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "examples"))
import onnx_models  # noqa: E402

EXAMPLES = int(os.environ.get("NPUSIM_FUZZ_EXAMPLES", "25"))
CASE_SECONDS = 60  # a load and a run of the small seeds take well under a second; more is a hang
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize="NPUSIM_FUZZ_EXAMPLES" not in os.environ,
                suppress_health_check=list(HealthCheck))

CHIP = (HERE / "chips" / "tiny.yaml").read_text()
GRAPH = """\
name: fuzz
description: every kind of section a graph file has, small enough to run in a blink
inputs:
  x: {shape: [1, 4, 6, 6], dtype: float32, random: normal, mean: 0.5, scale: 2.0, seed: 1}
  i: {shape: [2, 8], dtype: int8, random: uniform, low: -10, high: 10, seed: 2}
constants:
  w: {shape: [4, 4, 3, 3], dtype: float32, random: normal, scale: 0.1, seed: 3}
  b: {value: [[1, 2, 3, 4, 5, 6, 7, 8]], dtype: int8}
  m: {shape: [4, 16], dtype: float32, random: uniform, low: -1.0, high: 1.0}
ops:
  - {op: conv, inputs: [x, w], params: {stride_h: 1, stride_w: 1, pad_h_t: 1, pad_h_b: 1, pad_w_l: 1, pad_w_r: 1}, name: c}
  - {op: active, inputs: [c], params: {active_type: relu}, name: r}
  - {op: add, inputs: [i, b], name: s}
  - {op: reshape, inputs: [r], params: {reshape_param: [36, 4]}, name: flat}
  - {op: matrix_mul, inputs: [flat, m], params: {scale: 0.5}, name: mm}
outputs: {y: mm, z: s}
"""


def _program():
    """A lowered program for the tiny chip: loads, a product, a LUT-free vector op, stores, waits
    and buffers, a constant's bytes."""
    g = isa.Graph("fuzz")
    x = g.input("x", (4, 8), "float32")
    w = g.constant("w", np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4))
    g.output(isa.ops.active(isa.ops.matrix_mul(x, w), "tanh"), "y")
    return isa.lower(g, chips.load(HERE / "chips" / "tiny.yaml")).to_text()


PROGRAM = _program()

# Values a field is given instead of its own: other types, and extremes of each.
EXTREMES = [0, -1, 1, 2, 3, 7, 100, 0.5, 2**31, 2**63, -(2**63), 10**30, 10**39, 1.5, -0.0,
            1e-300, 1e308, -1e308, float("inf"), float("nan"),
            True, False, None, "", "abc", "x" * 300, "1e999999999GB/s", "1e-999999999GiB", "-5GiB", "0B/cycle", "1e30ns",
            "2.5.3MHz", "float128", "int8", "..", "../../etc/passwd", "/dev/zero", [], [0], [-1, 1], [1e9, 1e9], [[[[[]]]]], {},
            {"a": 1}, {"kind": "local"}]
NUMBERS = ["0", "-1", "1", "2", "3", "4", "7", "8", "16", "64", "255", "256", "1000", "4096", "65536", "4294967296",
           "18446744073709551616", "99999999999999999999999999999", "1e308", "nan", "-0", "0x7fffffffffffffff"]
WORDS = ["", "=", "garbage", "x=y", "on=", "op=", "fn=lut", "fn=sort", "cdt=bool", "cdt=int4", "acc=2", "m=9",
         "ddr@0x0:float32[1000000000,1000000000;0,0]", "lmem@-1:int8[1;1]", "nope@0x0:int8[1;1]", "ddr@0x0:float32[4;1",
         "gdma.99", "tiu.-1", "c3.tiu.0", "args=axis:9", "wrap=7"]


def _spots(node, out):
    """(container, key) of every value below node."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        out.append((node, key))
        _spots(value, out)
    return out


@st.composite
def mutated_yaml(draw, text):
    """text's YAML with one to three fields dropped, duplicated, retyped or made extreme; then,
    sometimes, a line of the text dropped or repeated (a repeated key is a YAML error)."""
    data = yaml.safe_load(text)
    for _ in range(draw(st.integers(1, 3))):
        spots = _spots(data, [])
        if not spots:
            break
        parent, key = draw(st.sampled_from(spots))
        action = draw(st.sampled_from(["drop", "duplicate", "replace"]))
        if action == "drop":
            del parent[key]
        elif action == "duplicate" and isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
        elif action == "duplicate":
            parent[f"{key}_again"] = copy.deepcopy(parent[key])
        else:
            parent[key] = copy.deepcopy(draw(st.sampled_from(EXTREMES)))  # later mutations must not change EXTREMES
    out = yaml.safe_dump(data, sort_keys=False, width=1000)
    lines = out.splitlines()
    if lines and draw(st.booleans()):
        i = draw(st.integers(0, len(lines) - 1))
        lines[i:i + 1] = draw(st.sampled_from([[], [lines[i]] * 2, [lines[i] + " " + lines[i]]]))
    return "\n".join(lines) + "\n"


@st.composite
def mutated_program(draw):
    """PROGRAM with one to three lines dropped, repeated or swapped, or, mostly, a word of one
    changed: a number in it made extreme, its dtype another, or the whole word replaced. The
    header line is kept, so that most texts reach the machine's own checks."""
    lines = PROGRAM.splitlines()
    for _ in range(draw(st.integers(1, 3))):
        if len(lines) < 2:
            break
        i = draw(st.sampled_from(range(1, len(lines))))
        action = draw(st.sampled_from(["drop", "repeat", "swap", "word", "word", "word", "word", "word"]))
        if action == "drop":
            del lines[i]
        elif action == "repeat":
            lines.insert(i, lines[i])
        elif action == "swap":
            j = draw(st.sampled_from(range(1, len(lines))))
            lines[i], lines[j] = lines[j], lines[i]
        else:
            words = lines[i].split(" ")
            k = draw(st.sampled_from(range(1, len(words)))) if len(words) > 1 else 0
            words[k] = draw(_mutated_word(words[k]))
            lines[i] = " ".join(words)
    return "\n".join(lines) + "\n"


@st.composite
def _mutated_word(draw, word):
    numbers = list(re.finditer(r"\d+", word))
    dtypes = list(re.finditer("|".join(sorted(isa.dtypes.NAMES, key=len, reverse=True)), word))
    how = draw(st.sampled_from(["number", "dtype", "word"]))
    if how == "number" and numbers:
        span = draw(st.sampled_from(numbers)).span()
        return word[:span[0]] + draw(st.sampled_from(NUMBERS)) + word[span[1]:]
    if how == "dtype" and dtypes:
        span = draw(st.sampled_from(dtypes)).span()
        return word[:span[0]] + draw(st.sampled_from(isa.dtypes.NAMES + ("float128", ""))) + word[span[1]:]
    return draw(st.sampled_from(WORDS))


# ---- ONNX models --------------------------------------------------------------------------------

def _cnn():
    """Conv + Relu + MaxPool, then examples/onnx_models.py's classifier: GlobalAveragePool, Flatten, Gemm."""
    net = onnx_models.Net("cnn", "float32", seed=0)
    x = net.unary("Relu", net.conv(net.input("x", (1, 3, 8, 8)), 4, 3, bias=True), "relu")
    net.output(net.classifier(net.max_pool(x, 2, 2, 0, "pool"), 5, "fc"), "y")
    return net.model("fuzz seed"), {"x": np.linspace(-1, 1, 192, dtype=np.float32).reshape(1, 3, 8, 8)}


def _shapes():
    """A Reshape whose shape is an input (a static input, a constant once fed), a Slice, a Gather
    by an input's indices, and shape arithmetic the importer folds (Shape, Gather, Unsqueeze,
    Concat) into a Reshape."""
    net = onnx_models.Net("shapes", "float32", seed=0)
    x = net.input("x", (2, 3, 4))
    net.inputs += [onnx.helper.make_tensor_value_info("shape", onnx.TensorProto.INT64, [2]),
                   onnx.helper.make_tensor_value_info("idx", onnx.TensorProto.INT64, [3])]
    r = net.slice(net.node("Reshape", [x, "shape"], "reshape", (6, 4)), [1], [5], [0], "slice")
    r = net.node("Gather", [r, "idx"], "gather", (4, 3), axis=1)
    rows = net.node("Gather", [net.node("Shape", [r], "shape_of", (2,)), net.const("one", 1, np.int64)], "rows", ())
    rows = net.node("Unsqueeze", [rows, net.const("zero", [0], np.int64)], "rows1", (1,))
    shape = net.node("Concat", [rows, net.const("rest", [-1], np.int64)], "new_shape", (2,), axis=0)
    net.output(net.node("Reshape", [r, shape], "out", (3, 4)), "y")
    feeds = {"x": np.arange(24, dtype=np.float32).reshape(2, 3, 4), "shape": np.array([6, 4]), "idx": np.array([3, 0, 2])}
    return net.model("fuzz seed"), feeds


def _dynamic():
    """A dynamic dimension ("N") and a scalar input: Mul by the scalar, Softmax, ReduceSum over
    axes given as a constant input."""
    net = onnx_models.Net("dynamic", "float32", seed=0)
    net.inputs += [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 4]),
                   onnx.helper.make_tensor_value_info("s", onnx.TensorProto.FLOAT, [])]
    y = net.node("Softmax", [net.node("Mul", ["x", "s"], "mul", ("N", 4))], "softmax", ("N", 4), axis=-1)
    net.output(net.node("ReduceSum", [y, net.const("axes", [1], np.int64)], "sum", ("N",), keepdims=0), "y")
    return net.model("fuzz seed"), {"x": np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4), "s": np.array(0.5, np.float32)}


ONNX_SEEDS = {"cnn": _cnn(), "shapes": _shapes(), "dynamic": _dynamic()}

# Values a field of a model is given instead of its own, by the field's type.
INTS = [0, -1, 1, 2, 3, 7, 64, 1000, 2**31 - 1, 2**31, -(2**31), 2**32, 2**40, 2**62, 2**63 - 1, -(2**63)]
FLOATS = [0.0, -0.0, -1.0, 0.5, 1e-30, 1e30, 3.4e38, float("inf"), float("-inf"), float("nan")]
STRINGS = ["", "nope", "x" * 300, "a\0b", "../up", "com.microsoft", "ai.onnx.ml"]
OP_TYPES = sorted(OPS) + ["If", "Loop", "Scan", "Unique", "NotAnOp"]


def _schema(op):
    try:
        return onnx.defs.get_schema(op, onnx_models.OPSET)
    except onnx.defs.SchemaError:  # an op of a later opset, or of no default-domain opset
        return None


ONNX_SCHEMAS = {op: schema for op in OPS if (schema := _schema(op)) is not None}  # the seeds' opset's
WORDS_OF_ATTRIBUTES = ["", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID", "nearest", "linear", "cubic", "half_pixel", "tf_crop_and_resize",
                       "round_prefer_ceil", "constant", "reflect", "edge", "wrap", "DCR", "CRD", "none", "tanh", "xyz"]
ATTRIBUTE_FIELDS = {onnx.AttributeProto.FLOAT: "f", onnx.AttributeProto.INT: "i", onnx.AttributeProto.STRING: "s",
                    onnx.AttributeProto.FLOATS: "floats", onnx.AttributeProto.INTS: "ints", onnx.AttributeProto.STRINGS: "strings"}


def _proto_spots(message, out):
    """(message, field, index or None) of every field set below message, repeated elements one by one."""
    for fd, value in message.ListFields():
        repeated = hasattr(value, "extend")
        for i in range(len(value)) if repeated else (None,):
            out.append((message, fd, i))
            element = value[i] if repeated else value
            if fd.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE:
                _proto_spots(element, out)
    return out


def _names(model):
    return sorted({n for node in model.graph.node for n in list(node.input) + list(node.output)} |
                  {v.name for v in list(model.graph.input) + list(model.graph.output) + list(model.graph.initializer)})


def _fit(fd, value):
    """value, or a value of the field's type near it (a protobuf field takes no other)."""
    bits = {FieldDescriptor.CPPTYPE_INT32: 32, FieldDescriptor.CPPTYPE_ENUM: 32, FieldDescriptor.CPPTYPE_INT64: 64}.get(fd.cpp_type)
    if bits:
        return max(-(2 ** (bits - 1)), min(2 ** (bits - 1) - 1, value))
    if fd.cpp_type in (FieldDescriptor.CPPTYPE_UINT32, FieldDescriptor.CPPTYPE_UINT64):
        return max(0, min(2 ** (32 if fd.cpp_type == FieldDescriptor.CPPTYPE_UINT32 else 64) - 1, value))
    return value


@st.composite
def _replacement(draw, fd, old, model):
    """Another value for a field: an extreme number, a name of the model (a dangling or cyclic
    edge) or a garbage string, another op type, cut or lengthened bytes."""
    kind = fd.cpp_type
    if kind == FieldDescriptor.CPPTYPE_BOOL:
        return not old
    if kind in (FieldDescriptor.CPPTYPE_FLOAT, FieldDescriptor.CPPTYPE_DOUBLE):
        return draw(st.sampled_from(FLOATS))
    if kind == FieldDescriptor.CPPTYPE_STRING and fd.type == FieldDescriptor.TYPE_BYTES:
        return draw(st.sampled_from([b"", old[: len(old) // 2], old[:-1], old + b"\0", old * 2, b"\xff" * 9]))
    if kind == FieldDescriptor.CPPTYPE_STRING:
        return draw(st.sampled_from(OP_TYPES if fd.name == "op_type" else _names(model) + STRINGS))
    if kind == FieldDescriptor.CPPTYPE_ENUM:
        return draw(st.sampled_from(sorted(v.number for v in fd.enum_type.values) + [99]))
    return _fit(fd, draw(st.sampled_from(INTS)))


def _retype_attribute(draw, model):
    """An attribute given another type, its value in that type's field (2 -> 2.0, [1, 2] -> 1)."""
    attrs = [a for node in model.graph.node for a in node.attribute if a.type in ATTRIBUTE_FIELDS]
    if not attrs:
        return
    a = draw(st.sampled_from(attrs))
    new = draw(st.sampled_from(sorted(ATTRIBUTE_FIELDS)))
    number = (list(a.ints) or list(a.floats) or [a.i or a.f or 1])[0]
    values = {"f": float(number), "i": int(number) if math.isfinite(number) else 0, "s": str(number).encode(),
              "floats": [float(number)] * 2, "ints": [int(number) if math.isfinite(number) else 0] * 2, "strings": [b"x"]}
    field, name = ATTRIBUTE_FIELDS[new], a.name
    a.Clear()
    a.name, a.type = name, new
    if isinstance(values[field], list):
        getattr(a, field).extend(values[field])
    else:
        setattr(a, field, values[field])


def _insert(draw, model):
    """A node of any op type at the end, reading one to three values of the model, with up to
    two of its schema's attributes (_set_attribute), its output another output of the graph."""
    node = model.graph.node.add()
    node.op_type = draw(st.sampled_from(OP_TYPES))
    node.input.extend(draw(st.lists(st.sampled_from(_names(model) or ["x"]), min_size=1, max_size=3)))
    node.output.append("fuzz_out")
    model.graph.output.add().name = "fuzz_out"
    for _ in range(draw(st.integers(0, 2))):
        _set_attribute(draw, model, node)


def _set_attribute(draw, model, node=None):
    """A node (or `node`) given an attribute its op's schema names (or replaced), of the
    schema's type, an extreme value or a word."""
    nodes = [n for n in ([node] if node is not None else model.graph.node)
             if n.op_type in ONNX_SCHEMAS and ONNX_SCHEMAS[n.op_type].attributes]
    if not nodes:
        return
    node = draw(st.sampled_from(nodes))
    schema = ONNX_SCHEMAS[node.op_type]
    name = draw(st.sampled_from(sorted(schema.attributes)))
    kind = int(schema.attributes[name].type)
    values = {onnx.AttributeProto.INT: st.sampled_from(INTS), onnx.AttributeProto.FLOAT: st.sampled_from(FLOATS),
              onnx.AttributeProto.INTS: st.lists(st.sampled_from(INTS), max_size=5),
              onnx.AttributeProto.FLOATS: st.lists(st.sampled_from(FLOATS), max_size=5),
              onnx.AttributeProto.STRING: st.sampled_from(WORDS_OF_ATTRIBUTES)}
    if kind not in values:
        return
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend(kept)
    node.attribute.append(onnx.helper.make_attribute(name, draw(values[kind]), attr_type=kind))


def _cycle(draw, model):
    """A node made to read a value of its own or of a node after it."""
    nodes = model.graph.node
    if not nodes:
        return
    i = draw(st.integers(0, len(nodes) - 1))
    j = draw(st.integers(i, len(nodes) - 1))
    if nodes[i].input and nodes[j].output:
        nodes[i].input[draw(st.integers(0, len(nodes[i].input) - 1))] = nodes[j].output[0]


def _swap(draw, model):
    """Two nodes swapped (one producer after its reader)."""
    nodes = model.graph.node
    if len(nodes) > 1:
        i, j = draw(st.lists(st.integers(0, len(nodes) - 1), min_size=2, max_size=2))
        a, b = onnx.NodeProto(), onnx.NodeProto()
        a.CopyFrom(nodes[i])
        b.CopyFrom(nodes[j])
        nodes[i].CopyFrom(b)
        nodes[j].CopyFrom(a)


def _edit_field(action):
    """A field anywhere in the model (a node's input, an attribute's value, a dimension, a type,
    a tensor's data, the opset...) dropped, duplicated (a repeated one) or replaced
    (_replacement; a scalar one)."""
    def edit(draw, model):
        message, fd, i = draw(st.sampled_from(_proto_spots(model, [])))
        field = getattr(message, fd.name)
        message_field = fd.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE
        if action == "drop" and i is not None:
            del field[i]
        elif action == "drop":
            message.ClearField(fd.name)
        elif action == "duplicate" and i is not None and message_field:
            field.add().CopyFrom(field[i])
        elif action == "duplicate" and i is not None:
            field.append(field[i])
        elif action == "replace" and not message_field:
            value = draw(_replacement(fd, field[i] if i is not None else field, model))
            try:
                if i is None:
                    setattr(message, fd.name, value)
                else:
                    field[i] = value
            except (ValueError, TypeError):  # a closed enum refuses an unknown value
                pass
    return edit


MUTATIONS = {"drop": _edit_field("drop"), "duplicate": _edit_field("duplicate"), "replace": _edit_field("replace"),
             "retype": _retype_attribute, "attribute": _set_attribute, "insert": _insert, "cycle": _cycle, "swap": _swap}
WEIGHTS = {"replace": 3, "attribute": 2}  # how many times more often than the others


@st.composite
def mutated_onnx(draw):
    """(a seed's name, the seed model with one to three MUTATIONS, serialized); sometimes the
    serialized bytes are cut or one of them changed."""
    name = draw(st.sampled_from(sorted(ONNX_SEEDS)))
    model = onnx.ModelProto()
    model.CopyFrom(ONNX_SEEDS[name][0])
    for _ in range(draw(st.integers(1, 3))):
        MUTATIONS[draw(st.sampled_from([m for m in MUTATIONS for _ in range(WEIGHTS.get(m, 1))]))](draw, model)
    data = model.SerializeToString()
    corrupt = draw(st.sampled_from(["none"] * 8 + ["cut", "byte"]))
    if corrupt != "none" and data:
        k = draw(st.integers(0, len(data) - 1))
        data = data[:k] if corrupt == "cut" else data[:k] + bytes([draw(st.integers(0, 255))]) + data[k + 1:]
    return name, data


def _feeds_json(feeds):
    return {k: {"dtype": v.dtype.str, "shape": list(v.shape), "data": v.ravel().tolist()} for k, v in feeds.items()}


def _model_text(data):
    """A mutated model as text for hypothesis's notes: ONNX's text form where it prints one."""
    try:
        model = onnx.ModelProto.FromString(data)
        return onnx.printer.to_text(model)
    except Exception:  # noqa: BLE001 -- a model too broken to print
        return repr(data)


class Worker:
    """tests/fuzz_worker.py, restarted after a hang or a death."""

    def __init__(self):
        self.proc = None

    def run(self, kind, text, feeds=None):
        """(outcome, detail): "ok", "error" (a SimError), "crash", "hang" or "died"."""
        if self.proc is None or self.proc.poll() is not None:
            env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
            self.proc = subprocess.Popen([sys.executable, str(HERE / "fuzz_worker.py")], cwd=HERE.parent, env=env,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.proc.stdin.write((json.dumps({"kind": kind, "text": text, "feeds": feeds}) + "\n").encode())
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], CASE_SECONDS)
        if not ready:
            self.close()
            return "hang", f"no answer within {CASE_SECONDS} s"
        line = self.proc.stdout.readline()
        if not line:
            return "died", f"the worker ended with status {self.proc.wait()}"
        reply = json.loads(line)
        return reply["outcome"], reply["detail"]

    def close(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@pytest.fixture(scope="module")
def worker():
    w = Worker()
    yield w
    w.close()


def check(worker, kind, text, feeds=None, shown=None):
    """The worker's outcome for text is a success or a SimError; `shown` (or text) is noted for a failure's report."""
    note(shown or text)
    outcome, detail = worker.run(kind, text, feeds)
    event(outcome if outcome != "error" else detail.partition(":")[0])  # --hypothesis-show-statistics counts them
    assert outcome in ("ok", "error"), f"{outcome}: {detail}"


@pytest.mark.parametrize("kind, text", [("chip", CHIP), ("graph", GRAPH), ("program", PROGRAM)])
def test_the_seeds_run(worker, kind, text):
    assert worker.run(kind, text)[0] == "ok"


@FUZZ
@given(text=mutated_yaml(CHIP))
def test_fuzzed_chip_yaml_loads_and_runs_or_is_a_sim_error(worker, text):
    check(worker, "chip", text)


@FUZZ
@given(text=mutated_yaml(GRAPH))
def test_fuzzed_graph_yaml_loads_and_runs_or_is_a_sim_error(worker, text):
    check(worker, "graph", text)


@FUZZ
@given(text=mutated_program())
def test_fuzzed_program_text_loads_and_runs_or_is_a_sim_error(worker, text):
    check(worker, "program", text)


@pytest.mark.parametrize("name", sorted(ONNX_SEEDS))
def test_the_onnx_seeds_are_valid_and_run(worker, name):
    model, feeds = ONNX_SEEDS[name]
    onnx.checker.check_model(model, full_check=True)
    outcome, detail = worker.run("onnx", base64.b64encode(model.SerializeToString()).decode(), _feeds_json(feeds))
    assert outcome == "ok", detail


@FUZZ
@given(case=mutated_onnx())
def test_fuzzed_onnx_models_import_and_run_or_are_a_sim_error(worker, case):
    name, data = case
    text = base64.b64encode(data).decode()
    shown = f"mutated from the {name!r} seed:\n{_model_text(data)}\nas base64: {text}"
    check(worker, "onnx", text, _feeds_json(ONNX_SEEDS[name][1]), shown)
