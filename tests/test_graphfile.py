"""Graph files (isa.graphfile): the shipped examples, constants and default inputs, and every
kind of malformed file, each of which must raise a SimError naming the file and the exact line."""

import textwrap
from pathlib import Path

import numpy as np
import pytest

import sim
from isa import dtypes, graphfile
from isa.errors import ConfigError, GraphError, ShapeError, SimError, UnsupportedError

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def write(tmp_path, text, name="g.yaml"):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def load_error(path, exc_type, line, *fragments):
    """Load `path`, expecting exactly `exc_type` located at `path:line`, mentioning `fragments`."""
    with pytest.raises(SimError) as info:
        graphfile.load(path)
    message = str(info.value)
    assert type(info.value) is exc_type, f"{type(info.value).__name__}: {message}"
    assert message.startswith(f"{path}:{line}: "), message
    assert message.count(str(path)) == 1, message  # located once, not wrapped twice
    for fragment in fragments:
        assert fragment in message, message
    assert "\n" not in message
    return message


def rng(seed):
    return np.random.default_rng(seed)


# ---- the shipped examples ----------------------------------------------------------------------

MLP_CONSTANTS = {  # name: (shape, scale, seed), as examples/mlp.yaml writes them
    "w1": ((512, 512), 0.044, 1),
    "b1": ((1, 512), 0.1, 2),
    "w2": ((512, 256), 0.044, 3),
    "b2": ((1, 256), 0.1, 4),
    "w3": ((256, 128), 0.062, 5),
    "b3": ((1, 128), 0.1, 6),
}
MLP_NODES = [
    ("fc1", "matrix_mul", ("x", "w1")),
    ("fc1_bias", "add", ("fc1", "b1")),
    ("fc1_relu", "active", ("fc1_bias",)),
    ("fc2", "matrix_mul", ("fc1_relu", "w2")),
    ("fc2_bias", "add", ("fc2", "b2")),
    ("fc2_relu", "active", ("fc2_bias",)),
    ("fc3", "matrix_mul", ("fc2_relu", "w3")),
    ("fc3_bias", "add", ("fc3", "b3")),
    ("fc3_relu", "active", ("fc3_bias",)),
]


def test_mlp_example_graph():
    g = graphfile.load(EXAMPLES / "mlp.yaml").graph
    assert g.name == "mlp"
    assert g.inputs == ["x"]
    assert (g.tensors["x"].shape, g.tensors["x"].dtype) == ((64, 512), "float32")
    assert list(g.constants) == list(MLP_CONSTANTS)
    for name, (shape, _, _) in MLP_CONSTANTS.items():
        assert g.constants[name].shape == shape, name
        assert g.constants[name].dtype == np.float32, name
        assert (g.tensors[name].shape, g.tensors[name].dtype) == (shape, "float32")
    assert [(n.name, n.op, n.inputs) for n in g.nodes] == MLP_NODES
    assert [n.params["active_type"] for n in g.nodes if n.op == "active"] == ["relu"] * 3
    assert [g.tensors[n.outputs[0]].shape for n in g.nodes] == [(64, 512)] * 3 + [(64, 256)] * 3 + [(64, 128)] * 3
    assert g.outputs == {"y": "fc3_relu"}
    assert (g.tensors["fc3_relu"].shape, g.tensors["fc3_relu"].dtype) == ((64, 128), "float32")


def test_mlp_example_values_are_the_documented_seeded_draws():
    gf = graphfile.load(EXAMPLES / "mlp.yaml")
    assert list(gf.defaults) == ["x"]
    x = gf.defaults["x"]
    assert x.dtype == np.float32 and x.shape == (64, 512)
    np.testing.assert_array_equal(x, rng(0).normal(0.0, 1.0, (64, 512)).astype(np.float32))
    for name, (shape, scale, seed) in MLP_CONSTANTS.items():
        expected = rng(seed).normal(0.0, scale, shape).astype(np.float32)
        np.testing.assert_array_equal(gf.graph.constants[name], expected, err_msg=name)


@pytest.mark.parametrize("example", ["mlp.yaml", "mlp_int8.yaml"])
def test_examples_load_deterministically(example):
    a = graphfile.load(EXAMPLES / example)
    b = graphfile.load(EXAMPLES / example)
    assert list(a.defaults) == list(b.defaults) == ["x"]
    for name in a.defaults:
        assert a.defaults[name].dtype == b.defaults[name].dtype
        np.testing.assert_array_equal(a.defaults[name], b.defaults[name])
    assert list(a.graph.constants) == list(b.graph.constants)
    for name in a.graph.constants:
        np.testing.assert_array_equal(a.graph.constants[name], b.graph.constants[name])
    assert [(n.name, n.op, n.inputs, n.params) for n in a.graph.nodes] == [
        (n.name, n.op, n.inputs, n.params) for n in b.graph.nodes
    ]


MLP_INT8_CONSTANTS = {  # name: (shape, dtype, low, high, seed), as examples/mlp_int8.yaml writes them
    "w1": ((512, 512), "int8", -16, 16, 1),
    "c1": ((1, 512), "int16", -2000, 2000, 2),
    "o1": ((1, 512), "int8", -8, 8, 3),
    "w2": ((512, 256), "int8", -16, 16, 4),
    "c2": ((1, 256), "int16", -2000, 2000, 5),
    "o2": ((1, 256), "int8", -8, 8, 6),
    "w3": ((256, 128), "int8", -16, 16, 7),
    "c3": ((1, 128), "int16", -2000, 2000, 8),
    "o3": ((1, 128), "int8", -8, 8, 9),
}


def test_mlp_int8_example_graph():
    gf = graphfile.load(EXAMPLES / "mlp_int8.yaml")
    g = gf.graph
    assert g.name == "mlp_int8"
    assert g.inputs == ["x"]
    assert (g.tensors["x"].shape, g.tensors["x"].dtype) == ((64, 512), "int8")
    assert list(g.constants) == list(MLP_INT8_CONSTANTS)
    for name, (shape, dtype, _, _, _) in MLP_INT8_CONSTANTS.items():
        assert g.constants[name].shape == shape, name
        assert g.constants[name].dtype == dtypes.np_dtype(dtype), name
        assert g.tensors[name].dtype == dtype
    nodes = [(n.name, n.op, n.inputs) for n in g.nodes]
    assert nodes == [
        ("fc1", "matrix_mul", ("x", "w1", "c1")),
        ("fc1_bias", "add", ("fc1", "o1")),
        ("fc1_relu", "active", ("fc1_bias",)),
        ("fc2", "matrix_mul", ("fc1_relu", "w2", "c2")),
        ("fc2_bias", "add", ("fc2", "o2")),
        ("fc2_relu", "active", ("fc2_bias",)),
        ("fc3", "matrix_mul", ("fc2_relu", "w3", "c3")),
        ("fc3_bias", "add", ("fc3", "o3")),
        ("fc3_relu", "active", ("fc3_bias",)),
    ]
    for n in g.nodes:
        assert g.tensors[n.outputs[0]].dtype == "int8", n.name
        if n.op == "matrix_mul":
            assert n.params["scale"] == 0.0078125
            assert n.params["mode"] == "LowPrecisionSymmetric"
    assert g.outputs == {"y": "fc3_relu"}
    assert g.tensors["fc3_relu"].shape == (64, 128)


def test_mlp_int8_example_values_are_inclusive_integer_draws():
    gf = graphfile.load(EXAMPLES / "mlp_int8.yaml")
    x = gf.defaults["x"]
    assert x.dtype == np.int8 and x.shape == (64, 512)
    assert x.min() == -64 and x.max() == 63  # both ends of the inclusive range occur in 32768 draws
    np.testing.assert_array_equal(x, rng(0).integers(-64, 63, (64, 512), endpoint=True).astype(np.int8))
    for name, (shape, dtype, low, high, seed) in MLP_INT8_CONSTANTS.items():
        value = gf.graph.constants[name]
        assert low <= value.min() and value.max() <= high, name
        expected = rng(seed).integers(low, high, shape, endpoint=True).astype(dtypes.np_dtype(dtype))
        np.testing.assert_array_equal(value, expected, err_msg=name)
    w1 = gf.graph.constants["w1"]
    assert (w1.min(), w1.max()) == (-16, 16)


# ---- constants and default inputs --------------------------------------------------------------

HEAD = """\
name: g
inputs:
  x: {shape: [2, 3]}
"""
TAIL = """\
ops: []
outputs: [x]
"""


def graph_with_constants(tmp_path, constants, name="g.yaml"):
    return graphfile.load(write(tmp_path, HEAD + "constants:\n" + textwrap.indent(textwrap.dedent(constants), "  ") + TAIL, name))


def test_constant_from_value(tmp_path):
    g = graph_with_constants(tmp_path, """\
        b: {value: [[0.5, -0.5]], dtype: float32}
        d: {value: [1.5, 2.5]}
        i: {value: [[1, -2], [3, -4]], dtype: int16}
        """).graph
    assert g.constants["b"].dtype == np.float32
    np.testing.assert_array_equal(g.constants["b"], np.array([[0.5, -0.5]], np.float32))
    assert g.tensors["d"].dtype == "float32"  # the default dtype
    np.testing.assert_array_equal(g.constants["d"], np.array([1.5, 2.5], np.float32))
    assert g.constants["i"].dtype == np.int16 and g.tensors["i"].shape == (2, 2)
    np.testing.assert_array_equal(g.constants["i"], [[1, -2], [3, -4]])
    assert list(g.constants) == ["b", "d", "i"]


def test_constant_from_file_relative_to_the_graph_file(tmp_path, monkeypatch):
    data = tmp_path / "model" / "data"
    data.mkdir(parents=True)
    w = np.arange(12, dtype=np.int16).reshape(3, 4) - 6
    np.save(data / "w.npy", w)
    np.save(data / "f.npy", np.linspace(-1.0, 1.0, 6).reshape(2, 3))  # float64 on disk
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # `file:` is relative to the graph file, not the working directory
    g = graph_with_constants(tmp_path, """\
        w: {file: data/w.npy}
        f: {file: data/f.npy, dtype: float32}
        """, name="model/g.yaml").graph
    assert g.tensors["w"].dtype == "int16" and g.tensors["w"].shape == (3, 4)
    np.testing.assert_array_equal(g.constants["w"], w)
    assert g.constants["f"].dtype == np.float32
    np.testing.assert_array_equal(g.constants["f"], np.linspace(-1.0, 1.0, 6).reshape(2, 3).astype(np.float32))


def test_constant_random_normal(tmp_path):
    g = graph_with_constants(tmp_path, """\
        n: {shape: [50, 40], random: normal, mean: 3.0, scale: 0.25, seed: 7}
        h: {shape: [8], dtype: float16, random: normal, seed: 7}
        z: {shape: [8], random: normal}
        """).graph
    n = g.constants["n"]
    assert n.dtype == np.float32 and n.shape == (50, 40)
    np.testing.assert_array_equal(n, rng(7).normal(3.0, 0.25, (50, 40)).astype(np.float32))
    assert abs(float(n.mean()) - 3.0) < 0.05 and abs(float(n.std()) - 0.25) < 0.02
    assert g.constants["h"].dtype == np.float16
    np.testing.assert_array_equal(g.constants["h"], rng(7).normal(0.0, 1.0, 8).astype(np.float16))
    np.testing.assert_array_equal(g.constants["z"], rng(0).normal(0.0, 1.0, 8).astype(np.float32))  # seed 0 by default


def test_constant_random_uniform_float_and_integer(tmp_path):
    g = graph_with_constants(tmp_path, """\
        f: {shape: [1000], random: uniform, low: -2.0, high: 2.0, seed: 3}
        i: {shape: [1000], dtype: int8, random: uniform, low: -2, high: 2, seed: 3}
        b: {shape: [200], dtype: uint8, random: uniform, low: 0, high: 1, seed: 4}
        d: {shape: [100], dtype: int32, random: uniform, seed: 5}
        """).graph
    f = g.constants["f"]
    assert f.dtype == np.float32 and f.min() >= -2.0 and f.max() < 2.0
    np.testing.assert_array_equal(f, rng(3).uniform(-2.0, 2.0, 1000).astype(np.float32))
    i = g.constants["i"]
    assert i.dtype == np.int8
    assert sorted(set(i.tolist())) == [-2, -1, 0, 1, 2]  # high is included for integers
    np.testing.assert_array_equal(i, rng(3).integers(-2, 2, 1000, endpoint=True))
    assert sorted(set(g.constants["b"].tolist())) == [0, 1]
    assert sorted(set(g.constants["d"].tolist())) == [0, 1]  # default low 0, high 1, inclusive


def test_random_normal_into_an_integer_dtype_rounds_and_saturates(tmp_path):
    g = graph_with_constants(tmp_path, "q: {shape: [400], dtype: int8, random: normal, scale: 300, seed: 2}\n").graph
    q = g.constants["q"]
    raw = rng(2).normal(0.0, 300.0, 400)
    np.testing.assert_array_equal(q, np.clip(np.rint(raw), -128, 127).astype(np.int8))
    assert q.min() == -128 and q.max() == 127


def test_default_inputs_only_for_inputs_with_a_random_spec(tmp_path):
    gf = graphfile.load(write(tmp_path, """\
        name: g
        inputs:
          a: {shape: [4, 4], dtype: int16, random: uniform, low: -3, high: 3, seed: 9}
          b: {shape: [4, 4]}
          c: {shape: [4, 4], dtype: float16, random: normal, scale: 2.0, seed: 9}
        ops: []
        outputs: [a, b, c]
        """))
    assert gf.graph.inputs == ["a", "b", "c"]
    assert sorted(gf.defaults) == ["a", "c"]
    assert gf.defaults["a"].dtype == np.int16
    np.testing.assert_array_equal(gf.defaults["a"], rng(9).integers(-3, 3, (4, 4), endpoint=True))
    assert gf.defaults["c"].dtype == np.float16
    np.testing.assert_array_equal(gf.defaults["c"], rng(9).normal(0.0, 2.0, (4, 4)).astype(np.float16))
    assert gf.graph.outputs == {"a": "a", "b": "b", "c": "c"}


def test_different_seeds_give_different_values(tmp_path):
    g = graph_with_constants(tmp_path, """\
        p: {shape: [16], random: normal, seed: 1}
        q: {shape: [16], random: normal, seed: 2}
        """).graph
    assert not np.array_equal(g.constants["p"], g.constants["q"])


def test_outputs_mapping_renames(tmp_path):
    g = graphfile.load(write(tmp_path, """\
        name: g
        inputs:
          x: {shape: [2, 3]}
        ops:
          - {op: active, inputs: [x], params: {active_type: relu}}
          - {op: active, inputs: [active_0], params: {active_type: absval}, name: second}
        outputs: {first: active_0, out: second}
        """)).graph
    assert [(n.name, n.op, n.inputs, n.params["active_type"]) for n in g.nodes] == [
        ("active_0", "active", ("x",), "relu"),
        ("second", "active", ("active_0",), "absval"),
    ]
    assert g.outputs == {"first": "active_0", "out": "second"}


# ---- malformed files: each names the file and the exact line -----------------------------------


def test_unknown_top_level_key(tmp_path):
    path = write(tmp_path, """\
        name: g
        bogus: 1
        inputs:
          x: {shape: [2, 2]}
        ops: []
        outputs: [x]
        """)
    load_error(path, ConfigError, 2, "unknown key 'bogus'")


def test_missing_ops(tmp_path):
    path = write(tmp_path, """\
        # a comment first, so the mapping starts on line 2
        name: g
        inputs:
          x: {shape: [2, 2]}
        outputs: [x]
        """)
    load_error(path, ConfigError, 2, "missing key 'ops'")


def test_ops_not_a_list(tmp_path):
    path = write(tmp_path, """\
        name: g
        inputs:
          x: {shape: [2, 2]}
        ops: {op: active}
        outputs: [x]
        """)
    load_error(path, ConfigError, 4, "ops: expected a list")


@pytest.mark.parametrize("flow", [True, False], ids=["flow", "block"])
def test_unknown_op(tmp_path, flow):
    bad = "  - {op: frobnicate, inputs: [x]}\n" if flow else "  - op: frobnicate\n    inputs: [x]\n"
    path = write(tmp_path, (
        "name: g\n"
        "inputs:\n"
        "  x: {shape: [2, 2]}\n"
        "ops:\n"
        "  - {op: active, inputs: [x], params: {active_type: relu}}\n"
        + bad +
        "outputs: [active_0]\n"
    ))
    load_error(path, ConfigError, 6, "unknown op 'frobnicate'", "matrix_mul")


def test_unknown_input_tensor(tmp_path):
    path = write(tmp_path, """\
        name: g
        inputs:
          x: {shape: [2, 2]}
        ops:
          - {op: active, inputs: [x], params: {active_type: relu}}

          - {op: add, inputs: [active_0, zz]}
        outputs: [active_0]
        """)
    load_error(path, ConfigError, 7, "op add", "'zz'")


def test_unknown_op_key_and_param(tmp_path):
    path = write(tmp_path, """\
        name: g
        inputs:
          x: {shape: [2, 2]}
        ops:
          - op: active
            inputs: [x]
            parms: {active_type: relu}
        outputs: [x]
        """)
    load_error(path, ConfigError, 7, "unknown key 'parms'")
    path = write(tmp_path, """\
        name: g
        inputs:
          x: {shape: [2, 2]}
        ops:
          - {op: active, inputs: [x], params: {active_typ: relu}}
        outputs: [x]
        """)
    load_error(path, ConfigError, 5, "op active", "active_typ")


def test_missing_shape(tmp_path):
    path = write(tmp_path, """\
        name: g
        inputs:
          x: {shape: [2, 2]}
          y: {dtype: float32}
        ops: []
        outputs: [x]
        """)
    load_error(path, ConfigError, 4, "inputs.y", "missing key 'shape'")


def test_unknown_key_in_a_tensor_spec(tmp_path):
    path = write(tmp_path, """\
        name: g
        inputs:
          x:
            shape: [2, 2]
            dtyp: int8
        ops: []
        outputs: [x]
        """)
    load_error(path, ConfigError, 5, "inputs.x", "unknown key 'dtyp'")


def test_bad_shape_values(tmp_path):
    path = write(tmp_path, """\
        name: g
        inputs:
          x: {shape: [2, 2]}
          y: {shape: [2, -3]}
        ops: []
        outputs: [x]
        """)
    load_error(path, ConfigError, 4, "inputs.y.shape", "[2, -3]")


def test_bad_dtype_of_an_input(tmp_path):
    path = write(tmp_path, """\
        name: g
        inputs:
          x: {shape: [2, 2]}
          y: {shape: [2, 2], dtype: float33}
        ops: []
        outputs: [x]
        """)
    load_error(path, ConfigError, 4, "inputs.y.dtype", "'float33'", "float32")


def test_bad_dtype_of_a_constant(tmp_path):
    path = write(tmp_path, HEAD + "constants:\n  a: {value: [1]}\n  c: {value: [1, 2], dtype: flaot32}\n" + TAIL)
    load_error(path, ConfigError, 6, "constants.c.dtype", "'flaot32'")


def test_bad_random_kind_of_an_input(tmp_path):
    path = write(tmp_path, """\
        name: g
        inputs:
          x:
            shape: [2, 2]
            seed: 1
            random: gaussian
        ops: []
        outputs: [x]
        """)
    load_error(path, ConfigError, 6, "'gaussian'", "normal", "uniform")


def test_bad_random_kind_of_a_constant(tmp_path):
    path = write(tmp_path, HEAD + "constants:\n  a: {value: [1]}\n  c: {shape: [2], random: poisson}\n" + TAIL)
    load_error(path, ConfigError, 6, "'poisson'")


@pytest.mark.parametrize(
    "spec, got",
    [
        ("{value: [1.0, 2.0], random: normal, shape: [2]}", "value, random"),
        ("{value: [1.0], file: c.npy}", "value, file"),
        ("{file: c.npy, random: uniform, shape: [1]}", "file, random"),
        ("{dtype: float32}", "none"),
    ],
)
def test_constant_needs_exactly_one_source(tmp_path, spec, got):
    np.save(tmp_path / "c.npy", np.ones(1, np.float32))
    path = write(tmp_path, HEAD + f"constants:\n  a: {{value: [1]}}\n  c: {spec}\n" + TAIL)
    load_error(path, ConfigError, 6, "exactly one of value, file, random", f"(got {got})")


def test_constant_file_that_does_not_exist(tmp_path):
    path = write(tmp_path, HEAD + "constants:\n  a: {value: [1]}\n  c: {file: missing.npy}\n" + TAIL)
    load_error(path, ConfigError, 6, "missing.npy")


def test_unknown_output_tensor(tmp_path):
    path = write(tmp_path, """\
        name: g
        inputs:
          x: {shape: [2, 2]}
        ops:
          - {op: active, inputs: [x], params: {active_type: relu}}

        outputs: {y: active_0, z: nope}
        """)
    load_error(path, ConfigError, 7, "outputs", "'nope'")


@pytest.mark.parametrize("outputs, line", [
    ("outputs:\n  y: active_0\n  z: nope\n", 8),
    ("outputs:\n  - active_0\n  - nope\n", 8),
], ids=["mapping", "list"])
def test_unknown_output_tensor_in_block_form_names_its_own_line(tmp_path, outputs, line):
    path = write(tmp_path, (
        "name: g\n"
        "inputs:\n"
        "  x: {shape: [2, 2]}\n"
        "ops:\n"
        "  - {op: active, inputs: [x], params: {active_type: relu}}\n"
        + outputs
    ))
    load_error(path, ConfigError, line, "'nope'")


def test_duplicate_key(tmp_path):
    path = write(tmp_path, """\
        name: g
        inputs:
          x: {shape: [2, 2]}
          x: {shape: [3, 3]}
        ops: []
        outputs: [x]
        """)
    load_error(path, ConfigError, 4, "duplicate key 'x'", "first at line 3")


def test_duplicate_key_inside_a_flow_mapping(tmp_path):
    path = write(tmp_path, """\
        name: g
        inputs:
          x: {shape: [2, 2]}
        ops:
          - {op: active, inputs: [x], params: {active_type: relu}, inputs: [x]}
        outputs: [x]
        """)
    load_error(path, ConfigError, 5, "duplicate key 'inputs'", "first at line 5")


def test_yaml_syntax_error(tmp_path):
    path = write(tmp_path, """\
        name: g
        inputs:
          x: {shape: [2, 2]}
        ops:
          - op: active: relu
        outputs: [x]
        """)
    load_error(path, ConfigError, 5, "mapping values are not allowed")


def test_yaml_syntax_error_unclosed_flow_mapping(tmp_path):
    # PyYAML notices the missing '}' at the next token, on line 4.
    path = write(tmp_path, """\
        name: g
        inputs:
          x: {shape: [2, 2]
        ops: []
        outputs: [x]
        """)
    load_error(path, ConfigError, 4, "while parsing a flow mapping", "expected ',' or '}'")


def test_not_a_mapping(tmp_path):
    load_error(write(tmp_path, "- a\n- b\n"), ConfigError, 1, "expected a mapping")
    load_error(write(tmp_path, ""), ConfigError, 1, "expected a mapping")


def test_missing_file(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        graphfile.load(path)
    assert str(info.value).startswith(f"{path}: cannot read")


@pytest.mark.parametrize("flow", [True, False], ids=["flow", "block"])
def test_shape_error_from_an_op_names_the_ops_line(tmp_path, flow):
    bad = "  - {op: matrix_mul, inputs: [x, w], name: mm}\n" if flow else "  - op: matrix_mul\n    name: mm\n    inputs: [x, w]\n"
    path = write(tmp_path, (
        "name: g\n"
        "inputs:\n"
        "  x: {shape: [2, 3]}\n"
        "  w: {shape: [4, 5]}\n"
        "ops:\n"
        "  - {op: active, inputs: [x], params: {active_type: relu}}\n"
        "\n"
        + bad +
        "outputs: [active_0]\n"
    ))
    load_error(path, ShapeError, 8, "matrix_mul", "(2, 3)", "(4, 5)")


def test_unsupported_parameter_from_an_op(tmp_path):
    path = write(tmp_path, """\
        name: g
        inputs:
          x: {shape: [2, 3]}
        ops:
          - {op: active, inputs: [x], params: {active_type: frob}}
        outputs: [x]
        """)
    load_error(path, UnsupportedError, 5, "'frob'")


def test_duplicate_tensor_name_from_an_op(tmp_path):
    path = write(tmp_path, """\
        name: g
        inputs:
          x: {shape: [2, 3]}
        ops:
          - {op: active, inputs: [x], params: {active_type: relu}, name: x}
        outputs: [x]
        """)
    load_error(path, GraphError, 5, "'x'")


# ---- bugs: malformed files that escape as raw Python exceptions or give wrong values ----------

RAW_EXCEPTIONS = {
    # id: (file text, line the error should name)
    "shape-scalar": ("name: g\ninputs:\n  x: {shape: 3}\nops: []\noutputs: [x]\n", 3),  # TypeError
    "params-list": (("name: g\ninputs:\n  x: {shape: [2]}\nops:\n  - {op: active, inputs: [x], params: [relu]}\n"
                    "outputs: [x]\n"), 5),  # ValueError
    "op-int": ("name: g\ninputs:\n  x: {shape: [2]}\nops:\n  - {op: 5, inputs: [x]}\noutputs: [x]\n", 5),  # TypeError
    "op-list": ("name: g\ninputs:\n  x: {shape: [2]}\nops:\n  - {op: [active], inputs: [x]}\noutputs: [x]\n", 5),  # TypeError
    "outputs-int": ("name: g\ninputs:\n  x: {shape: [2]}\nops: []\noutputs: 5\n", 5),  # TypeError
    "outputs-null": ("name: g\ninputs:\n  x: {shape: [2]}\nops: []\noutputs:\n", 5),  # TypeError
    "value-ragged": (("name: g\ninputs:\n  x: {shape: [2]}\nconstants:\n  c: {value: [[1, 2], [3]]}\n"
                     "ops: []\noutputs: [x]\n"), 5),  # ValueError
    "value-strings": ("name: g\ninputs:\n  x: {shape: [2]}\nconstants:\n  c: {value: [a, b]}\nops: []\noutputs: [x]\n", 5),  # ValueError
    "scale-string": ("name: g\ninputs:\n  x: {shape: [2], random: normal, scale: abc}\nops: []\noutputs: [x]\n", 3),  # ValueError
    "seed-negative": ("name: g\ninputs:\n  x: {shape: [2], random: normal, seed: -1}\nops: []\noutputs: [x]\n", 3),  # ValueError
    "low-above-high": (("name: g\ninputs:\n  x: {shape: [2], dtype: int8, random: uniform, low: 5, high: 1}\n"
                       "ops: []\noutputs: [x]\n"), 3),  # ValueError
}


@pytest.mark.parametrize("text, line", RAW_EXCEPTIONS.values(), ids=RAW_EXCEPTIONS.keys())
def test_malformed_values_give_a_sim_error_with_the_line(tmp_path, text, line):
    path = write(tmp_path, text)
    with pytest.raises(SimError) as info:
        graphfile.load(path)
    assert str(info.value).startswith(f"{path}:{line}: ")


@pytest.mark.parametrize("text, line, expected_outputs", [
    ("name: g\ninputs:\n  x: {shape: [2]}\nops:\n  - {op: active, inputs: [x], params: {active_type: relu}}\noutputs: active_0\n",
     6, {"active_0": "active_0"}),
    ("name: g\ninputs:\n  fc: {shape: [2]}\nops:\n  - {op: active, inputs: fc, params: {active_type: relu}}\noutputs: [active_0]\n",
     5, {"active_0": "active_0"}),
], ids=["outputs", "op-inputs"])
def test_a_single_name_where_a_list_belongs(tmp_path, text, line, expected_outputs):
    path = write(tmp_path, text)
    try:
        gf = graphfile.load(path)
    except ConfigError as exc:  # an error is fine if it says where and does not split the name
        message = str(exc)
        assert message.startswith(f"{path}:{line}: "), message
        assert "'a'" not in message and "'f'" not in message, message
    else:  # or the name is taken as a one-element list
        assert gf.graph.outputs == expected_outputs


def test_constant_value_out_of_range_is_not_wrapped(tmp_path):
    path = write(tmp_path, HEAD + "constants:\n  c: {value: [300, -200, 5], dtype: int8}\n" + TAIL)
    try:
        gf = graphfile.load(path)
    except SimError as exc:
        assert str(exc).startswith(f"{path}:5: "), str(exc)
    else:
        assert gf.graph.constants["c"].tolist() == [127, -128, 5]


@pytest.mark.parametrize("spec", ["{value: [1, 2, 3, 4, 5, 6], shape: [3, 3]}", "{file: c.npy, shape: [3, 3]}"],
                         ids=["value", "file"])
def test_constant_shape_that_disagrees_with_its_data(tmp_path, spec):
    np.save(tmp_path / "c.npy", np.arange(6, dtype=np.float32).reshape(2, 3))
    path = write(tmp_path, HEAD + f"constants:\n  c: {spec}\n" + TAIL)
    with pytest.raises(SimError) as info:
        graphfile.load(path)
    assert str(info.value).startswith(f"{path}:5: ")


def test_input_value_is_used_or_rejected(tmp_path):
    path = write(tmp_path, "name: g\ninputs:\n  x: {shape: [2], value: [1.5, 2.5]}\nops: []\noutputs: [x]\n")
    try:
        gf = graphfile.load(path)
    except ConfigError as exc:
        assert str(exc).startswith(f"{path}:3: ") and "value" in str(exc)
    else:
        np.testing.assert_array_equal(gf.defaults.get("x"), np.array([1.5, 2.5], np.float32))


def test_list_and_multi_output_ops(tmp_path):
    """concat takes its inputs as one list; split's parts are tensors named `<op>:<i>`."""
    path = write(tmp_path, """
        name: parts
        inputs:
          a: {shape: [2, 3], dtype: float32}
          b: {shape: [2, 1], dtype: float32}
        ops:
          - {op: concat, inputs: [a, b], params: {axis: 1}, name: ab}
          - {op: split, inputs: [ab], params: {axis: 1, num: 2}, name: halves}
        outputs: {left: "halves:0", right: "halves:1"}
    """)
    g = graphfile.load(path).graph
    a, b = rng(0).standard_normal((2, 3)).astype(np.float32), rng(1).standard_normal((2, 1)).astype(np.float32)
    out = sim.run(g, "generic", {"a": a, "b": b}).outputs
    np.testing.assert_array_equal(out["left"], a[:, :2])
    np.testing.assert_array_equal(out["right"], np.concatenate([a[:, 2:], b], axis=1))


def test_an_op_without_inputs_joins_the_file_graph(tmp_path):
    path = write(tmp_path, """
        name: ramp
        inputs:
          x: {shape: [2, 3], dtype: float32}
        ops:
          - {op: linspace, inputs: [], params: {shape: [2, 3], alpha: 1.0, beta: [10.0, 1.0]}, name: ramp}
          - {op: add, inputs: [x, ramp]}
        outputs: {y: add_0}
    """)
    g = graphfile.load(path).graph
    x = rng(2).standard_normal((2, 3)).astype(np.float32)
    y = sim.run(g, "generic", {"x": x}).outputs["y"]
    np.testing.assert_allclose(y, x + np.array([[1, 2, 3], [11, 12, 13]], np.float32), rtol=1e-6)
