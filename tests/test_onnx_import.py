"""isa.from_onnx: initializers, inputs, shape inference and folding, the unsupported-op and
opset errors, the external-data rule, models simulated on bm1684 and generic against
onnx.reference.ReferenceEvaluator, ONNX's NonMaxSuppression op, and `npusim run model.onnx`."""

import os

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from refeval import evaluate

import chips
import isa
import sim
from isa.onnx import static_inputs, tensor_name
from sim.cli import main

OPSET = 17
GENERIC = chips.load("generic")
BM1684 = chips.load("bm1684")


def model_of(nodes, inputs, outputs, inits=(), opset=OPSET, name="m"):
    """A model from (name, elem type, shape) inputs and outputs, initializer arrays by name."""
    vi = lambda spec: helper.make_tensor_value_info(*spec)  # noqa: E731
    graph = helper.make_graph(nodes, name, [vi(s) for s in inputs], [vi(s) for s in outputs],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def small_cnn(seed=0):
    """Conv + Relu + Flatten + Gemm (transB), float32, weights as initializers."""
    rng = np.random.default_rng(seed)
    inits = {
        "w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3,
        "cb": rng.standard_normal(4).astype(np.float32),
        "fw": rng.standard_normal((10, 4 * 8 * 8)).astype(np.float32) * 0.05,
        "fb": rng.standard_normal(10).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w", "cb"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1, name="fc"),
    ]
    m = model_of(nodes, [("x", TensorProto.FLOAT, [2, 3, 8, 8])], [("y", TensorProto.FLOAT, [2, 10])], inits, name="cnn")
    onnx.checker.check_model(m, full_check=True)
    return m


def reference(model, inputs):
    names = [o.name for o in model.graph.output]
    return dict(zip(names, ReferenceEvaluator(model).run(None, inputs)))


# ---- building the graph ------------------------------------------------------------------------

def test_initializers_become_constants_and_graph_inputs_inputs():
    g = isa.from_onnx(small_cnn())
    assert isinstance(g, isa.Graph) and g.name == "cnn"
    assert g.inputs == ["x"] and g.tensors["x"].shape == (2, 3, 8, 8) and g.tensors["x"].dtype == "float32"
    assert {"w", "cb", "fb"} <= set(g.constants)
    np.testing.assert_array_equal(g.constants["w"], numpy_helper.to_array(small_cnn().graph.initializer[0]))
    assert list(g.outputs) == ["y"] and g.tensors[g.outputs["y"]].shape == (2, 10)
    assert [n.op for n in g.nodes if n.name in ("conv", "relu", "fc")] == ["conv", "active", "matrix_mul"]


def test_a_path_loads_like_a_model(tmp_path):
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), path)
    g = isa.from_onnx(str(path))
    assert [n.op for n in g.nodes] == [n.op for n in isa.from_onnx(small_cnn()).nodes]


def test_names_become_valid_graph_names():
    assert tensor_name("input.1") == "input.1" and tensor_name("onnx::Conv_3") == "onnx::Conv_3"
    assert tensor_name("0") == "t_0" and tensor_name("a b") == "a_b"
    m = model_of([helper.make_node("Relu", ["0"], ["out put"])], [("0", TensorProto.FLOAT, [3])], [("out put", TensorProto.FLOAT, [3])])
    g = isa.from_onnx(m)
    assert g.inputs == ["t_0"] and list(g.outputs) == ["out_put"]


def test_shape_inference_gives_intermediate_shapes_and_checks_ours():
    """A Shape -> Gather -> Concat -> Reshape chain folds when the graph is built: the Reshape
    is a view, no gather runs; every value's shape equals ONNX's inference."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "first"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "zero"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    inits = {"first": np.array(0, np.int64), "zero": np.array([0], np.int64), "minus1": np.array([-1], np.int64)}
    m = model_of(nodes, [("x", TensorProto.FLOAT, [2, 3, 4])], [("y", TensorProto.FLOAT, None)], inits)
    g = isa.from_onnx(m)
    assert [n.op for n in g.nodes] == ["reshape"]
    assert g.tensors[g.outputs["y"]].shape == (2, 12)


def test_a_shape_input_is_found_and_given_as_a_value_or_by_the_feeds():
    m = model_of([helper.make_node("Reshape", ["x", "shape"], ["y"])],
                 [("x", TensorProto.FLOAT, [2, 6]), ("shape", TensorProto.INT64, [2])], [("y", TensorProto.FLOAT, None)])
    assert static_inputs(m) == ["shape"]
    g = isa.from_onnx(m)
    assert g.static == ["shape"]
    with pytest.raises(isa.GraphError, match=r"input 'shape' decides shapes in the model, so its value is needed.*sim.run"):
        isa.lower(g, GENERIC)
    built = isa.from_onnx(m, values={"shape": np.array([3, 4])})
    assert built.inputs == ["x"] and built.tensors[built.outputs["y"]].shape == (3, 4)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    res = sim.run(g, GENERIC, inputs={"x": x, "shape": np.array([4, 3])})
    np.testing.assert_array_equal(res.outputs["y"], x.reshape(4, 3))


def test_symbolic_dimensions_are_fixed_by_shapes_or_by_the_feeds():
    m = model_of([helper.make_node("Relu", ["x"], ["y"])], [("x", TensorProto.FLOAT, ["N", 4])], [("y", TensorProto.FLOAT, ["N", 4])])
    with pytest.raises(isa.GraphError, match=r"input 'x' has dynamic dimensions \('\?', 4\)"):
        isa.lower(isa.from_onnx(m), GENERIC)
    assert isa.from_onnx(m, shapes={"x": (5, 4)}).tensors["x"].shape == (5, 4)
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(sim.run(isa.from_onnx(m), GENERIC, inputs={"x": x}).outputs["y"], np.maximum(x, 0))


def test_a_type_npusim_lacks_is_named():
    m = model_of([helper.make_node("Identity", ["x"], ["y"])], [("x", TensorProto.COMPLEX64, [3])], [("y", TensorProto.COMPLEX64, [3])])
    with pytest.raises(isa.UnsupportedError, match=r"input 'x': ONNX type COMPLEX64 has no npusim dtype"):
        isa.from_onnx(m)


# ---- what is refused, and how ----------------------------------------------------------------------

def test_unsupported_ops_are_listed_with_counts_before_anything_is_built(monkeypatch):
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Loop", ["n", "c"], ["b"], body=helper.make_graph([], "body", [], [])),
        helper.make_node("Unique", ["a"], ["u"]),
        helper.make_node("Unique", ["u"], ["v"]),
        helper.make_node("FusedConv", ["v"], ["y"], domain="com.microsoft"),
    ]
    m = model_of(nodes, [("x", TensorProto.FLOAT, [3])], [("y", TensorProto.FLOAT, [3])])
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    built = []
    monkeypatch.setattr(isa.onnx.model, "build", lambda *a: built.append(a))
    with pytest.raises(isa.UnsupportedError) as info:
        isa.from_onnx(m)
    assert "4 node(s) of 3 op type(s) npusim does not map: Loop x1, Unique x2, com.microsoft.FusedConv x1" in str(info.value)
    assert not built


def test_an_opset_newer_than_onnx_knows_is_refused():
    opset = onnx.defs.onnx_opset_version() + 1
    m = model_of([helper.make_node("Relu", ["x"], ["y"])], [("x", TensorProto.FLOAT, [3])], [("y", TensorProto.FLOAT, [3])], opset=opset)
    m.ir_version = 8
    with pytest.raises(isa.UnsupportedError, match=rf"opset {opset} is outside the supported range 11\.\.{onnx.defs.onnx_opset_version()}"):
        isa.from_onnx(m)


def test_an_opset_before_11_is_converted_to_11():
    """onnx.version_converter's adapters rewrite what changed: opset 9's Upsample (scales an
    input) becomes Resize."""
    m = model_of([helper.make_node("Upsample", ["x", "scales"], ["y"], mode="nearest")], [("x", TensorProto.FLOAT, [1, 1, 2, 2])],
                 [("y", TensorProto.FLOAT, [1, 1, 4, 4])], {"scales": np.array([1, 1, 2, 2], np.float32)}, opset=9)
    m.ir_version = 8
    g = isa.from_onnx(m)
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    y = sim.run(g, GENERIC, inputs={"x": x}).outputs["y"]
    np.testing.assert_array_equal(y, x.repeat(2, axis=2).repeat(2, axis=3))


def test_an_opset_the_converter_cannot_convert_keeps_the_opset_error():
    m = model_of([helper.make_node("ImageScaler", ["x"], ["y"], scale=2.0)], [("x", TensorProto.FLOAT, [1, 1, 2, 2])],
                 [("y", TensorProto.FLOAT, [1, 1, 2, 2])], opset=8)
    m.ir_version = 8
    with pytest.raises(isa.UnsupportedError, match=r"opset 8 is outside the supported range 11\.\.\d+ .* and "
                                                   r"onnx.version_converter cannot convert it \("):
        isa.from_onnx(m)


def test_an_attribute_npusim_cannot_express_names_node_attribute_and_value():
    m = model_of([helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="bicubic", name="up")],
                 [("x", TensorProto.FLOAT, [1, 1, 2, 2])], [("y", TensorProto.FLOAT, None)],
                 {"scales": np.array([1, 1, 2, 2], np.float32)})
    with pytest.raises(isa.UnsupportedError, match=r"node up \(Resize\): attribute mode='bicubic' is not supported"):
        isa.from_onnx(m)


def test_a_data_sized_result_is_a_graph_output_only():
    """Compress gives a masked_select, whose length the data decide: an output, not an operand."""
    nodes = [helper.make_node("Compress", ["x", "c"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    m = model_of(nodes, [("x", TensorProto.FLOAT, [4]), ("c", TensorProto.BOOL, [4])], [("y", TensorProto.FLOAT, None)])
    with pytest.raises(isa.ShapeError, match=r"node y \(Relu\): .*data-dependent shape"):
        isa.from_onnx(m)


# ---- external data ------------------------------------------------------------------------------------

def _save_external(model, folder, location):
    onnx.save_model(model, folder / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True, location=location,
                    size_threshold=0)
    return folder / "m.onnx"


def test_external_data_beneath_the_model_folder_loads(tmp_path):
    (tmp_path / "weights").mkdir()
    path = _save_external(small_cnn(), tmp_path, "weights/w.bin")
    g = isa.from_onnx(path)
    np.testing.assert_array_equal(g.constants["w"], isa.from_onnx(small_cnn()).constants["w"])


@pytest.mark.parametrize("escape", ["../outside.bin", "ABSOLUTE"])
def test_external_data_outside_the_model_folder_is_refused(tmp_path, escape):
    folder = tmp_path / "model"
    folder.mkdir()
    path = _save_external(small_cnn(), folder, "w.bin")
    target = str(tmp_path / "outside.bin") if escape == "ABSOLUTE" else escape
    os.replace(folder / "w.bin", tmp_path / "outside.bin")
    m = onnx.load(str(path), load_external_data=False)
    for t in m.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = target
    onnx.save_model(m, path)
    with pytest.raises(isa.InputError, match=r"keeps its data at .*outside the model's folder"):
        isa.from_onnx(path)


def test_a_symlink_out_of_the_folder_is_refused(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    path = _save_external(small_cnn(), folder, "w.bin")
    os.replace(folder / "w.bin", tmp_path / "real.bin")
    os.symlink(tmp_path / "real.bin", folder / "w.bin")
    with pytest.raises(isa.InputError, match="outside the model's folder"):
        isa.from_onnx(path)


def test_a_model_proto_with_unread_external_data_is_refused(tmp_path):
    path = _save_external(small_cnn(), tmp_path, "w.bin")
    with pytest.raises(isa.InputError, match="give the model's path"):
        isa.from_onnx(onnx.load(str(path), load_external_data=False))


# ---- simulated, against the ONNX reference ---------------------------------------------------------

@pytest.mark.parametrize("chip", [GENERIC, BM1684], ids=["generic", "bm1684"])
def test_conv_relu_gemm_on_the_machine_equals_the_onnx_reference(chip):
    m = small_cnn()
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    g = isa.from_onnx(m)
    res = sim.run(g, chip, inputs={"x": x})
    np.testing.assert_allclose(res.outputs["y"], reference(m, {"x": x})["y"], rtol=1e-4, atol=1e-5)
    assert sim.run(g, chip, mode="timing").cycles == res.cycles


def test_a_transformer_block_equals_the_onnx_reference():
    """MatMul with batched operands, Softmax, LayerNormalization, Erf-GELU, Transpose, Where."""
    rng = np.random.default_rng(2)
    d, h = 8, 2
    inits = {"wq": rng.standard_normal((d, d)).astype(np.float32) * 0.3, "shape": np.array([1, 4, h, d // h], np.int64),
             "scale": np.full(d, 1.1, np.float32), "bias": np.full(d, 0.1, np.float32), "sqrt2": np.array(1.4142135, np.float32),
             "one": np.array(1.0, np.float32), "half": np.array(0.5, np.float32), "mask": np.tril(np.ones((4, 4), bool)),
             "neg": np.array(-1e9, np.float32)}
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("Reshape", ["q", "shape"], ["q4"]),
        helper.make_node("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["q4"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("MatMul", ["qt", "kt"], ["s"]),
        helper.make_node("Where", ["mask", "s", "neg"], ["sm"]),
        helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "qt"], ["ctx"]),
        helper.make_node("Transpose", ["ctx"], ["ct"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ct", "back"], ["c2"]),
        helper.make_node("LayerNormalization", ["c2", "scale", "bias"], ["ln"], axis=-1),
        helper.make_node("Div", ["ln", "sqrt2"], ["t"]),
        helper.make_node("Erf", ["t"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["e1"]),
        helper.make_node("Mul", ["ln", "e1"], ["g"]),
        helper.make_node("Mul", ["g", "half"], ["y"]),
    ]
    inits["back"] = np.array([1, 4, d], np.int64)
    m = model_of(nodes, [("x", TensorProto.FLOAT, [1, 4, d])], [("y", TensorProto.FLOAT, [1, 4, d])], inits)
    x = rng.standard_normal((1, 4, d)).astype(np.float32)
    res = sim.run(isa.from_onnx(m), GENERIC, inputs={"x": x})
    np.testing.assert_allclose(res.outputs["y"], reference(m, {"x": x})["y"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op, attrs, x", [
    ("Div", {}, (np.array([-7, 7, -7, 7, 9, -1], np.int32), np.array([2, 2, -2, -2, 3, 5], np.int32))),
    ("Mod", {}, (np.array([-7, 7, -7, 7, 9, -1], np.int32), np.array([2, 3, -2, -3, 3, 5], np.int32))),
    ("Mod", {"fmod": 1}, (np.array([-7, 7, -7, 7, 9, -1], np.int32), np.array([2, 3, -2, -3, 3, 5], np.int32))),
    ("Round", {}, (np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.7, 1e10], np.float32),)),
    ("Cast", {"to": TensorProto.INT32}, (np.array([-2.7, -0.5, 0.5, 2.7, 100.9], np.float32),)),
    ("Pow", {}, (np.array([-2.0, -2.0, 2.0, 0.0, 0.0, 3.0], np.float32), np.array([3.0, 0.5, -1.0, 0.0, 2.0, 2.5], np.float32))),
])
def test_ops_whose_semantics_npusim_composes_match_onnx(op, attrs, x):
    """Integer Div truncates, Mod takes the divisor's sign (fmod the dividend's), Round goes
    to even, Cast truncates, Pow of a negative base: ONNX's numbers, not npusim's own."""
    names = [f"x{i}" for i in range(len(x))]
    types = [(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape)) for n, a in zip(names, x)]
    m = model_of([helper.make_node(op, names, ["y"], **attrs)], types, [("y", TensorProto.UNDEFINED, None)])
    res = sim.run(isa.from_onnx(m), GENERIC, inputs=dict(zip(names, x)))
    want = reference(m, dict(zip(names, x)))["y"]
    assert res.outputs["y"].dtype == want.dtype
    np.testing.assert_allclose(res.outputs["y"], want, rtol=1e-6, equal_nan=True)


def test_resnet_style_block_on_bm1684_in_timing_mode():
    m = small_cnn()
    res = sim.run(isa.from_onnx(m), BM1684, mode="timing")
    assert res.cycles > 0 and res.outputs == {}


# ---- dynamic dimensions, scalars and the one call -----------------------------------------------------

def _dims(*dims):
    """A TensorShapeProto's dims as exporters write them: an int (dim_value, -1 as Paddle2ONNX
    writes), a str (dim_param) or None (absent)."""
    shape = onnx.TensorShapeProto()
    for d in dims:
        dim = shape.dim.add()
        if isinstance(d, int):
            dim.dim_value = d
        elif isinstance(d, str):
            dim.dim_param = d
    return shape


def dynamic_model(dims, out_dims=None, value_info_dims=None):
    """Relu -> Add 1: input x and output y of the given dims, an intermediate declared too."""
    m = model_of([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "one"], ["y"])],
                 [("x", TensorProto.FLOAT, None)], [("y", TensorProto.FLOAT, None)], {"one": np.array(1.0, np.float32)})
    m.graph.input[0].type.tensor_type.shape.CopyFrom(_dims(*dims))
    m.graph.output[0].type.tensor_type.shape.CopyFrom(_dims(*(out_dims or dims)))
    vi = helper.make_tensor_value_info("r", TensorProto.FLOAT, None)
    vi.type.tensor_type.shape.CopyFrom(_dims(*(value_info_dims or dims)))
    m.graph.value_info.append(vi)
    return m


@pytest.mark.parametrize("dims", [(-1, 3, -1), ("N", 3, "W"), (None, 3, None), (0, 3, 0), (-1, 3, "W")],
                         ids=["minus-one", "dim_param", "absent", "zero", "mixed"])
def test_a_dynamic_dimension_is_fixed_by_shapes_or_the_feeds_and_declared_shapes_are_checked_where_known(dims):
    m = dynamic_model(dims)
    x = np.linspace(-2, 2, 2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5)
    g = isa.from_onnx(m)
    assert not g.declared["x"].known()
    np.testing.assert_array_equal(sim.run(g, GENERIC, inputs={"x": x}).outputs["y"], np.maximum(x, 0) + 1)
    fixed = isa.from_onnx(m, shapes={"x": (2, 3, 5)})
    assert fixed.tensors["x"].shape == (2, 3, 5) and sim.run(fixed, BM1684, mode="timing").cycles > 0
    with pytest.raises(isa.InputError, match=r"input 'x' has dimension 1 of 3 .*; shapes= gives 4"):
        isa.from_onnx(m, shapes={"x": (2, 4, 5)})
    with pytest.raises(isa.InputError, match=r"input 'x' has rank 3 .*; the feeds gives the shape \(2, 3\)"):
        sim.run(g, GENERIC, inputs={"x": x[:, :, 0]})


def test_a_declared_output_or_intermediate_that_disagrees_where_known_is_an_error():
    with pytest.raises(isa.ShapeError, match=r"output 'y': npusim's mapping gives shape \(2, 3, 5\), ONNX shape inference"):
        isa.from_onnx(dynamic_model((2, 3, 5), out_dims=(2, 3, 6)))
    isa.from_onnx(dynamic_model((2, 3, 5), out_dims=(-1, 3, -1), value_info_dims=(-1, -1, 5)))


def test_a_second_run_with_the_same_shapes_does_not_import_again(monkeypatch):
    m = dynamic_model(("N", 3, 5))
    g = isa.from_onnx(m)
    built = []
    real_build = isa.onnx.model.build
    monkeypatch.setattr(isa.onnx.model, "build", lambda *a: built.append(a) or real_build(*a))
    x = np.ones((2, 3, 5), np.float32)
    sim.run(g, GENERIC, inputs={"x": x})
    sim.run(g, GENERIC, inputs={"x": x * 2})
    assert len(built) == 1
    sim.run(g, GENERIC, inputs={"x": np.ones((4, 3, 5), np.float32)})
    assert len(built) == 2


def test_scalars_are_rank_0_in_the_feeds_and_the_outputs():
    """An input, a constant and an output of rank 0, and a scalar reduced from a tensor."""
    nodes = [helper.make_node("Mul", ["s", "two"], ["s2"]), helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
             helper.make_node("Add", ["total", "s2"], ["y"]), helper.make_node("Mul", ["x", "s"], ["z"])]
    m = model_of(nodes, [("x", TensorProto.FLOAT, [2, 3]), ("s", TensorProto.FLOAT, [])],
                 [("y", TensorProto.FLOAT, []), ("z", TensorProto.FLOAT, [2, 3])], {"two": np.array(2.0, np.float32)})
    x, s = np.arange(6, dtype=np.float32).reshape(2, 3), np.array(1.5, np.float32)
    res = sim.run(isa.from_onnx(m), GENERIC, inputs={"x": x, "s": s})
    assert res.outputs["y"].shape == () and res.outputs["y"].dtype == np.float32 and res.outputs["y"] == 18.0
    np.testing.assert_array_equal(res.outputs["z"], x * 1.5)
    with pytest.raises(isa.InputError, match=r"input 's' has rank 0 \(\); the feeds gives the shape \(1,\)"):
        sim.run(isa.from_onnx(m), GENERIC, inputs={"x": x, "s": s.reshape(1)})


def test_the_one_call_takes_and_gives_the_models_own_names():
    """Names a graph may not hold (spaces, a leading digit) stay ONNX's in the feeds and the outputs."""
    nodes = [helper.make_node("Reshape", ["0", "new shape"], ["r"]), helper.make_node("Relu", ["r"], ["out put"])]
    m = model_of(nodes, [("0", TensorProto.FLOAT, ["n"]), ("new shape", TensorProto.INT64, [2])], [("out put", TensorProto.FLOAT, None)])
    g = isa.from_onnx(m)
    assert g.static == ["new shape"]
    x = np.arange(-3, 3, dtype=np.float32)
    res = sim.run(g, GENERIC, inputs={"0": x, "new shape": np.array([2, 3])})
    assert list(res.outputs) == ["out put"]
    np.testing.assert_array_equal(res.outputs["out put"], np.maximum(x, 0).reshape(2, 3))
    with pytest.raises(isa.InputError, match=r"the feeds names 'x', which is not an input of the model \(inputs: 0, new shape\)"):
        sim.run(g, GENERIC, inputs={"x": x})
    with pytest.raises(isa.InputError, match=r"input 'new shape' decides shapes in the model, so its value is needed: feed it"):
        sim.run(g, GENERIC, inputs={"0": x})
    with pytest.raises(isa.InputError, match=r"gives input 'new shape' a float64 value that does not convert exactly to the input's int64"):
        sim.run(g, GENERIC, inputs={"0": x, "new shape": np.array([2.5, 3.0])})


# ---- malformed models and their data ---------------------------------------------------------------------

def _set_location(path, **fields):
    m = onnx.load(str(path), load_external_data=False)
    for t in m.graph.initializer:
        for e in t.external_data:
            if e.key in fields:
                e.value = str(fields[e.key])
    onnx.save_model(m, path)


@pytest.mark.parametrize("change, message", [
    ({"location": "missing.bin"}, r"tensor '\w+' keeps its data in 'missing.bin', which does not exist"),
    ({"location": "sub"}, r"tensor '\w+' keeps its data in 'sub', which is not a file"),
    ({"location": "w\0.bin"}, r"tensor '\w+' keeps its data at 'w\\x00.bin', a location holding a NUL byte"),
    ({"length": 3}, r"tensor 'w': its external data is 3 bytes long; its shape \(4, 3, 3, 3\) of FLOAT takes 432"),
    ({"offset": 10**6}, r"tensor '\w+': its external data needs bytes 1000000\.\.\d+ of 'w.bin', which holds \d+"),
    ({"offset": "x"}, r"external data offset 'x' is not an integer"),
], ids=["missing", "directory", "nul", "length", "too-short", "offset"])
def test_bad_external_data_is_an_input_error_naming_the_tensor_and_the_file(tmp_path, change, message):
    (tmp_path / "sub").mkdir()
    path = _save_external(small_cnn(), tmp_path, "w.bin")
    _set_location(path, **change)
    with pytest.raises(isa.InputError, match=message) as info:
        isa.from_onnx(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("cut", [1, 100])
def test_raw_data_of_the_wrong_length_is_an_input_error(tmp_path, cut):
    m = small_cnn()
    t = next(t for t in m.graph.initializer if t.name == "cb")
    t.raw_data = t.raw_data[:-cut] if cut < len(t.raw_data) else b"\0"
    with pytest.raises(isa.InputError, match=r"tensor 'cb' has \d+ bytes of raw data; its shape \(4,\) of FLOAT takes 16"):
        isa.from_onnx(m)


def test_raw_data_running_past_the_end_of_the_file_is_an_input_error(tmp_path):
    path = tmp_path / "cut.onnx"
    onnx.save(small_cnn(), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(isa.InputError, match=r"cut.onnx: not an ONNX model \(a field of \d+ bytes at byte \d+ runs past the end"):
        isa.from_onnx(path)


def test_large_tensors_in_the_file_are_read_once_from_their_place(tmp_path):
    """A weight inside the .onnx file (not external data) is read into its array straight from
    the file: equal to the model's, read-only, and the graph keeps it without a copy."""
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), path)
    g = isa.from_onnx(path)
    proto = onnx.load(str(path), load_external_data=False)
    assert not next(t for t in proto.graph.initializer if t.name == "fw").HasField("data_location")  # inside the file
    want = numpy_helper.to_array(next(t for t in small_cnn().graph.initializer if t.name == "fw"))
    (fw,) = [a for a in g.constants.values() if a.shape == (256, 10)]  # stored transposed for Gemm's transB
    np.testing.assert_array_equal(fw, want.T)
    np.testing.assert_array_equal(g.source.weights["fw"], want)
    assert not g.source.weights["fw"].flags.writeable
    assert np.shares_memory(g.constants["w"], g.source.weights["w"])  # the graph's constant is the weight, not a copy


def test_a_path_that_is_not_a_model_file_is_an_input_error(tmp_path):
    for bad, message in ((tmp_path, "not a file"), (tmp_path / "none.onnx", "no such file"), ("a\0b.onnx", "holds a NUL byte")):
        with pytest.raises(isa.InputError, match=message):
            isa.from_onnx(bad)
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(isa.InputError, match="the file is empty"):
        isa.from_onnx(tmp_path / "empty.onnx")


# ---- NonMaxSuppression, the op ONNX import added -----------------------------------------------------

@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("seed", range(4))
def test_non_max_suppression_equals_its_reference(center, seed):
    rng = np.random.default_rng(seed)
    g = isa.Graph("nms")
    boxes = g.input("boxes", (2, 12, 4))
    scores = g.input("scores", (2, 3, 12))
    g.output(isa.ops.non_max_suppression(boxes, scores, 4, 0.3, 0.2 if seed % 2 else None, center), "y")
    b = rng.uniform(0, 1, (2, 12, 4)).astype(np.float32)
    s = np.round(rng.uniform(0, 1, (2, 3, 12)), 1).astype(np.float32)  # ties in score
    res = sim.run(g, GENERIC, inputs={"boxes": b, "scores": s})
    want = evaluate(g, {"boxes": b, "scores": s}, GENERIC)["y"]
    np.testing.assert_array_equal(res.outputs["y"], want)
    assert res.outputs["y"].shape[0] <= g.tensors[g.outputs["y"]].shape[0]
    assert sim.run(g, GENERIC, mode="timing").cycles == res.cycles


def test_non_max_suppression_refuses_zero_boxes():
    g = isa.Graph("nms")
    with pytest.raises(isa.UnsupportedError, match="max_output_boxes_per_class must be an integer >= 1"):
        isa.ops.non_max_suppression(g.input("b", (1, 3, 4)), g.input("s", (1, 1, 3)), 0)


# ---- the command line ------------------------------------------------------------------------------

def cli(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_runs_an_onnx_model_with_random_inputs(tmp_path, capsys):
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), path)
    rc, out, err = cli(capsys, "run", path, "--chip", "generic", "--outputs", tmp_path / "a.npz")
    assert rc == 0, err
    assert out.startswith("cnn on generic (functional mode)") and "generic:" in out
    rc, _, _ = cli(capsys, "run", path, "--chip", "generic", "--seed", "0", "--outputs", tmp_path / "b.npz")
    rc2, _, _ = cli(capsys, "run", path, "--chip", "generic", "--seed", "1", "--outputs", tmp_path / "c.npz")
    a, b, c = (np.load(tmp_path / f"{k}.npz")["y"] for k in "abc")
    assert rc == rc2 == 0 and a.shape == (2, 10)
    np.testing.assert_array_equal(a, b)  # the default seed is 0
    assert not np.array_equal(a, c)


def test_cli_runs_an_onnx_model_with_inputs_from_an_npz(tmp_path, capsys):
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), path)
    x = np.random.default_rng(3).standard_normal((2, 3, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    rc, out, err = cli(capsys, "run", path, "--chip", "generic", "--inputs", tmp_path / "in.npz", "--outputs", tmp_path / "out.npz")
    assert rc == 0, err
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["y"], reference(small_cnn(), {"x": x})["y"], rtol=1e-4, atol=1e-5)
    rc, out, err = cli(capsys, "run", path, "--chip", "bm1684", "--mode", "timing")
    assert rc == 0 and "bm1684 (timing mode)" in out


def test_cli_gives_shape_inputs_from_the_npz_and_fixes_symbolic_shapes(tmp_path, capsys):
    m = model_of([helper.make_node("Reshape", ["x", "shape"], ["y"])],
                 [("x", TensorProto.FLOAT, ["N", 6]), ("shape", TensorProto.INT64, [2])], [("y", TensorProto.FLOAT, None)])
    onnx.save(m, tmp_path / "r.onnx")
    np.savez(tmp_path / "in.npz", x=np.arange(12, dtype=np.float32).reshape(2, 6), shape=np.array([3, 4]))
    rc, _, err = cli(capsys, "run", tmp_path / "r.onnx", "--inputs", tmp_path / "in.npz", "--outputs", tmp_path / "o.npz")
    assert rc == 0, err
    np.testing.assert_array_equal(np.load(tmp_path / "o.npz")["y"], np.arange(12, dtype=np.float32).reshape(3, 4))
    rc, out, err = cli(capsys, "run", tmp_path / "r.onnx")
    assert_one_line_error(rc, out, err, "InputError", "shape", "--inputs")


def assert_one_line_error(rc, out, err, *fragments):
    assert rc == 1, (rc, out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("npusim: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert "Traceback" not in out + err


def test_cli_errors_on_an_onnx_model_are_one_line(tmp_path, capsys):
    m = model_of([helper.make_node("Unique", ["x"], ["y"])], [("x", TensorProto.FLOAT, [3])], [("y", TensorProto.FLOAT, None)])
    onnx.save(m, tmp_path / "u.onnx")
    assert_one_line_error(*cli(capsys, "run", tmp_path / "u.onnx"), "UnsupportedError", "Unique x1")
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    assert_one_line_error(*cli(capsys, "run", tmp_path / "bad.onnx"), "InputError", "bad.onnx")
    assert_one_line_error(*cli(capsys, "run", tmp_path / "missing.onnx"), "InputError", "missing.onnx")
    onnx.save(small_cnn(), tmp_path / "cnn.onnx")
    np.savez(tmp_path / "in.npz", z=np.zeros(3, np.float32))
    assert_one_line_error(*cli(capsys, "run", tmp_path / "cnn.onnx", "--inputs", tmp_path / "in.npz"), "InputError", "z is not an input")


# ---- single ops beyond the node tests, against the ONNX reference -------------------------------------

R = np.random.default_rng(7)
SPECIAL = np.array([0.3, -17.0, 19.0, 300.0, 1e6, -1e6, np.inf, -np.inf, -0.0, np.nan], np.float32)
POWERS = np.array([0.0, 0.124, 0.25, 0.3, 1.1, 1.5, 3.0, 2.0**100, 7e37], np.float32)


def _f(*shape):
    return R.standard_normal(shape).astype(np.float32)


def single_op(op, inputs, attrs=None, consts=None, opset=OPSET, outputs=1):
    types = [(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)) for k, v in inputs.items()]
    node = helper.make_node(op, list(inputs) + list(consts or {}), [f"y{i}" for i in range(outputs)], **(attrs or {}))
    return model_of([node], types, [(f"y{i}", TensorProto.UNDEFINED, None) for i in range(outputs)], consts or {}, opset=opset)


SINGLE = [
    ("MatMul", {"a": _f(2, 3, 4), "b": _f(4, 5)}, {}, {}, 17),
    ("MatMul", {"a": _f(4), "b": _f(2, 4, 5)}, {}, {}, 17),
    ("MatMul", {"a": _f(2, 1, 3, 4), "b": _f(3, 4, 2)}, {}, {}, 17),
    ("Gemm", {"a": _f(4, 3), "b": _f(5, 4), "c": _f(3, 5)}, {"alpha": 0.5, "beta": 2.0, "transA": 1, "transB": 1}, {}, 17),
    ("GatherElements", {"x": _f(3, 4)}, {"axis": 1}, {"i": np.array([[0, -1], [2, 1], [-4, 3]], np.int64)}, 17),
    ("GatherND", {"x": _f(2, 3, 4)}, {"batch_dims": 1}, {"i": np.array([[[1], [2]], [[0], [1]]], np.int64)}, 17),
    ("ScatterElements", {"x": _f(3, 4)}, {"axis": 0, "reduction": "add"},
     {"i": np.array([[0, 1, 2, 0], [1, 1, 0, 0]], np.int64), "u": _f(2, 4)}, 18),
    ("Slice", {"x": R.integers(-100, 100, (5, 6)).astype(np.int8)}, {},
     {"s": np.array([4, -1]), "e": np.array([0, -7]), "a": np.array([0, 1]), "st": np.array([-2, -2])}, 17),
    ("Pad", {"x": _f(3, 4, 5)}, {"mode": "reflect"}, {"p": np.array([1, 2, 2, 0]), "v": np.array(0.0, np.float32),
                                                       "ax": np.array([1, 2])}, 18),
    ("TopK", {"x": np.array([[3, 1, 3, 2, 1, 3]], np.float32)}, {"axis": 1, "largest": 0}, {"k": np.array([4])}, 17),
    ("ArgMax", {"x": np.array([[3, 1, 3], [2, 2, 1]], np.float32)}, {"axis": 1, "select_last_index": 1, "keepdims": 0}, {}, 17),
    ("OneHot", {"i": np.array([[1, -1], [0, 2]], np.int64)}, {"axis": 0}, {"d": np.array(3), "v": np.array([0.0, 5.0], np.float32)}, 17),
    ("Expand", {"x": _f(3, 1)}, {}, {"s": np.array([2, 1, 1, 4])}, 17),
    ("QuantizeLinear", {"x": _f(2, 3, 4) * 10}, {"axis": 1},
     {"s": np.array([0.1, 0.2, 0.3], np.float32), "z": np.array([-3, 0, 5], np.int8)}, 21),
    ("ConvTranspose", {"x": _f(1, 4, 3, 3)}, {"strides": [2, 2], "output_padding": [1, 0], "pads": [0, 1, 1, 0], "dilations": [1, 2]},
     {"w": _f(4, 3, 3, 3)}, 17),
    ("Conv", {"x": _f(1, 4, 7)}, {"group": 2, "dilations": [2], "auto_pad": "SAME_UPPER", "strides": [2]},
     {"w": _f(6, 2, 3), "b": _f(6)}, 17),
    ("Conv", {"x": _f(1, 2, 5, 6, 7)}, {"pads": [1, 0, 2, 0, 1, 1], "strides": [1, 2, 1]}, {"w": _f(3, 2, 3, 3, 2)}, 17),
    ("AveragePool", {"x": _f(1, 2, 5, 6)}, {"kernel_shape": [3, 3], "pads": [1, 1, 2, 0], "strides": [2, 2], "ceil_mode": 1,
                                           "count_include_pad": 1}, {}, 17),
    ("AveragePool", {"x": _f(1, 2, 5, 6, 7)}, {"kernel_shape": [3, 2, 3], "pads": [1, 0, 1, 1, 1, 0], "strides": [2, 2, 1]}, {}, 17),
    ("Resize", {"x": _f(1, 2, 4, 5)}, {"mode": "cubic", "coordinate_transformation_mode": "pytorch_half_pixel", "antialias": 1},
     {"r": np.array([], np.float32), "s": np.array([1, 1, 0.6, 1.7], np.float32)}, 18),
    ("ReduceMean", {"x": R.integers(0, 100, (3, 4)).astype(np.uint8)}, {"keepdims": 0}, {"a": np.array([1])}, 18),
    ("CumSum", {"x": _f(3, 5)}, {"exclusive": 1, "reverse": 1}, {"a": np.array(1)}, 17),
    ("Gelu", {"x": _f(3, 4) * 3}, {}, {}, 20),
    ("Erf", {"x": np.linspace(-4, 4, 41).astype(np.float32)}, {}, {}, 17),
    # the dtypes of ml_dtypes, float64 and uint64
    ("Cast", {"x": SPECIAL}, {"to": TensorProto.FLOAT8E4M3FN}, {}, 21),  # saturates: inf and 1e6 -> 448
    ("Cast", {"x": SPECIAL}, {"to": TensorProto.FLOAT8E5M2, "saturate": 0}, {}, 21),  # 1e6 -> inf
    ("Cast", {"x": SPECIAL}, {"to": TensorProto.FLOAT8E5M2FNUZ, "saturate": 0}, {}, 21),  # 1e6, inf -> NaN
    ("CastLike", {"x": np.array([0.3, -17, 300, 6e4, -np.inf, -0.0, np.nan], np.float16)}, {"saturate": 1},
     {"like": np.zeros(1, ml_dtypes.float8_e4m3fnuz)}, 21),
    ("Cast", {"x": POWERS}, {"to": TensorProto.FLOAT8E8M0}, {}, 25),  # round_mode up
    ("Cast", {"x": POWERS}, {"to": TensorProto.FLOAT8E8M0, "round_mode": "down"}, {}, 25),
    ("Cast", {"x": POWERS}, {"to": TensorProto.FLOAT8E8M0, "round_mode": "nearest"}, {}, 25),
    ("Cast", {"x": np.array([0.5, 1.5, 2.25, 5.0, 7.0, -3.0], np.float32)}, {"to": TensorProto.FLOAT4E2M1}, {}, 23),
    ("QuantizeLinear", {"x": _f(2, 6) * 20}, {"axis": 1, "block_size": 2},
     {"s": np.array([[1.0, 2.0, 3.0], [0.5, 4.0, 1.5]], np.float32), "z": np.array([[1, -2, 0], [3, 0, -8]], ml_dtypes.int4)}, 21),
    ("QuantizeLinear", {"x": _f(3, 4) * 300}, {"saturate": 0}, {"s": np.array(0.5, np.float32),
                                                                  "z": np.zeros((), ml_dtypes.float8_e5m2)}, 21),
    ("DequantizeLinear", {"x": np.array([[-8, 7, 3], [0, -1, 5]], ml_dtypes.int4)}, {"axis": 0},
     {"s": np.array([0.5, 2.0], np.float32), "z": np.array([1, -1], ml_dtypes.int4)}, 21),
    ("DequantizeLinear", {"x": np.array([448, -0.5, 3], ml_dtypes.float8_e4m3fn)}, {}, {"s": np.array(2.0, np.float32)}, 21),
    ("Add", {"a": _f(2, 3).astype(np.float64) / 3, "b": np.full((1, 3), 1e-12)}, {}, {}, 17),
    ("MatMul", {"a": _f(3, 4).astype(np.float64) / 7}, {}, {"b": _f(4, 2).astype(np.float64) / 3}, 17),
    ("Pow", {"a": np.abs(_f(3, 4)).astype(np.float64) + 0.1, "b": _f(3, 4).astype(np.float64)}, {}, {}, 17),
    ("Resize", {"x": _f(1, 1, 3, 4).astype(np.float64) / 3}, {"mode": "linear"},
     {"r": np.array([], np.float32), "s": np.array([1, 1, 2, 1.5], np.float32)}, 18),
    ("BitShift", {"x": np.array([2**64 - 1, 2**63 + 8, 7], np.uint64)}, {"direction": "RIGHT"}, {"n": np.array([3, 60, 1], np.uint64)}, 17),
    ("BitwiseXor", {"x": np.array([2**64 - 1, 2**63 + 8, 7], np.uint64), "y": np.array([5, 2**63, 1], np.uint64)}, {}, {}, 18),
    ("Greater", {"x": np.array([2**64 - 1, 2**63 + 8, 7], np.uint64), "y": np.array([5, 2**63 + 9, 1], np.uint64)}, {}, {}, 17),
]


@pytest.mark.parametrize("op, inputs, attrs, consts, opset", SINGLE, ids=[f"{s[0]}-{i}" for i, s in enumerate(SINGLE)])
def test_single_ops_equal_the_onnx_reference(op, inputs, attrs, consts, opset):
    m = single_op(op, inputs, attrs, consts, opset, outputs=2 if op == "TopK" else 1)
    want = ReferenceEvaluator(m).run(None, inputs)
    g = isa.from_onnx(m)
    res = sim.run(g, GENERIC, inputs=inputs)
    for i, w in enumerate(want):
        got = res.outputs[f"y{i}"]
        assert got.shape == w.shape and got.dtype == w.dtype
        if w.dtype.kind == "V":  # an ml_dtypes type: compare the values, NaN equal to NaN
            got, w = got.astype(np.float64), w.astype(np.float64)
        np.testing.assert_allclose(got, w, rtol=1e-5 if w.dtype != np.float64 else 1e-13, atol=1e-6 if w.dtype != np.float64 else 0)


def test_softmax_before_opset_13_works_on_the_input_flattened_at_axis():
    """Softmax-11 coerces the input to 2-D at axis (its definition; onnxruntime does so too,
    ReferenceEvaluator applies opset 13's per-axis rule to every version)."""
    x = _f(2, 3, 4)
    res = sim.run(isa.from_onnx(single_op("Softmax", {"x": x}, {"axis": 1}, opset=11)), GENERIC, inputs={"x": x})
    flat = x.reshape(2, 12)
    want = np.exp(flat - flat.max(axis=1, keepdims=True))
    np.testing.assert_allclose(res.outputs["y0"], (want / want.sum(axis=1, keepdims=True)).reshape(2, 3, 4), rtol=1e-5)
