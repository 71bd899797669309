"""Folding inference BatchNormalization into the Conv, ConvTranspose or Gemm before it at import
(the bn_fold pass, isa/onnx/bn_fold.py): folded, unfolded and onnx.reference.ReferenceEvaluator
agree; what does not fold keeps its BatchNormalization; the model given is not changed."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import chips
import isa
import sim
from isa.onnx import PASSES
from isa.onnx.importer import prepare

OPSET = 17
GENERIC = chips.load("generic")
BM1684 = chips.load("bm1684")
F = TensorProto.FLOAT
NO_FOLD = tuple(p for p in PASSES if p != "bn_fold")


def fold_batch_norms(model):
    """The model after the bn_fold pass alone, as a ModelProto."""
    return prepare(model, ["bn_fold"]).to_model()


def bn_params(rng, name, c, dtype=np.float32):
    """{name.scale, .bias, .mean, .var}: the initializers of a BatchNormalization over c channels."""
    values = (rng.uniform(0.5, 1.5, c), rng.normal(0, 0.3, c), rng.normal(0, 0.3, c), rng.uniform(0.3, 2.0, c))
    return {f"{name}.{k}": v.astype(dtype) for k, v in zip(("scale", "bias", "mean", "var"), values)}


def bn(x, name, out=None, **attrs):
    ins = [x] + [f"{name}.{k}" for k in ("scale", "bias", "mean", "var")]
    return helper.make_node("BatchNormalization", ins, [out or name], name=name, epsilon=1e-3, **attrs)


def model_of(nodes, inputs, outputs, inits, opset=OPSET):
    vi = lambda spec: helper.make_tensor_value_info(*spec)  # noqa: E731
    graph = helper.make_graph(nodes, "m", [vi(s) for s in inputs], [vi(s) for s in outputs],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(m, full_check=True)
    return m


def residual_block(seed=0, dtype=np.float32):
    """Conv (no bias) -> BN -> Relu -> Conv (bias) -> BN, shortcut Conv -> BN, Add, Relu: a
    ResNet bottleneck in miniature, as torch exports it in eval mode."""
    rng = np.random.default_rng(seed)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inits = {"w1": rng.normal(0, 0.3, (6, 4, 3, 3)), "w2": rng.normal(0, 0.3, (8, 6, 1, 1)), "b2": rng.normal(0, 0.1, 8),
             "ws": rng.normal(0, 0.3, (8, 4, 1, 1))}
    inits = {k: v.astype(dtype) for k, v in inits.items()}
    for name, c in (("bn1", 6), ("bn2", 8), ("bns", 8)):
        inits.update(bn_params(rng, name, c, dtype))
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"), bn("c1", "bn1"),
        helper.make_node("Relu", ["bn1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2"), bn("c2", "bn2"),
        helper.make_node("Conv", ["x", "ws"], ["cs"], name="shortcut"), bn("cs", "bns"),
        helper.make_node("Add", ["bn2", "bns"], ["sum"], name="add"),
        helper.make_node("Relu", ["sum"], ["y"], name="relu"),
    ]
    return model_of(nodes, [("x", elem, [2, 4, 8, 8])], [("y", elem, [2, 8, 8, 8])], inits)


def reference(model, inputs):
    return ReferenceEvaluator(model).run(None, inputs)[0]


def x_of(shape, dtype=np.float32, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def op_types(model):
    return [n.op_type for n in model.graph.node]


# ---- the ONNX graph ------------------------------------------------------------------------------

def test_every_batch_norm_after_a_conv_folds_and_the_model_given_is_not_changed():
    m = residual_block()
    before = m.SerializeToString()
    folded = fold_batch_norms(m)
    assert m.SerializeToString() == before
    assert op_types(folded) == ["Conv", "Relu", "Conv", "Conv", "Add", "Relu"]
    conv1 = folded.graph.node[0]
    assert conv1.name == "conv1" and list(conv1.output) == ["bn1"] and len(conv1.input) == 3
    inits = {t.name for t in folded.graph.initializer}
    assert not inits & {"w1", "w2", "b2", "bn1.scale", "bn1.mean", "bns.var"}  # replaced, so dropped
    onnx.checker.check_model(folded, full_check=True)


def test_folded_weights_are_the_batch_norm_algebra_in_float64():
    m = residual_block()
    init = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    folded = {t.name: numpy_helper.to_array(t) for t in fold_batch_norms(m).graph.initializer}
    p = {k: init[f"bn2.{k}"].astype(np.float64) for k in ("scale", "bias", "mean", "var")}
    s = p["scale"] / np.sqrt(p["var"] + np.float64(np.float32(1e-3)))
    w = folded["conv2.weight_bn_folded"]
    assert w.dtype == np.float32
    np.testing.assert_array_equal(w, (init["w2"].astype(np.float64) * s[:, None, None, None]).astype(np.float32))
    np.testing.assert_array_equal(folded["conv2.bias_bn_folded"], ((init["b2"] - p["mean"]) * s + p["bias"]).astype(np.float32))


def test_the_pass_says_what_it_folded():
    notes = isa.from_onnx(residual_block()).notes
    assert "onnx pass bn_fold: 3 BatchNormalization(s) folded into the convolution or Gemm before them" in notes
    m = model_of([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2])], [("y", F, [2])], {})
    assert any(n.startswith("onnx pass bn_fold: 0 BatchNormalization(s)") for n in isa.from_onnx(m).notes)
    assert not any("bn_fold" in n for n in isa.from_onnx(m, passes=NO_FOLD).notes)


# ---- simulated: folded, unfolded and the reference agree -------------------------------------------

@pytest.mark.parametrize("chip", [GENERIC, BM1684], ids=["generic", "bm1684"])
def test_folded_unfolded_and_reference_agree_on_a_residual_block(chip):
    m = residual_block()
    x = x_of((2, 4, 8, 8))
    folded, unfolded = isa.from_onnx(m), isa.from_onnx(m, passes=NO_FOLD)
    assert "batch_norm" not in {n.op for n in folded.nodes}
    assert [n.op for n in folded.nodes if n.op not in ("reshape",)] == ["conv", "active", "conv", "conv", "add", "active"]
    assert "rdivs" in {n.op for n in unfolded.nodes}  # the unfolded BN computes s on the machine
    y_folded = sim.run(folded, chip, inputs={"x": x}).outputs["y"]
    y_unfolded = sim.run(unfolded, chip, inputs={"x": x}).outputs["y"]
    want = reference(m, {"x": x})
    np.testing.assert_allclose(y_folded, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y_unfolded, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y_folded, y_unfolded, rtol=1e-5, atol=1e-5)


def test_the_folded_block_is_two_layer_groups_with_add_and_relu_in_the_second():
    """Folded, each Conv leads a layer group its Relu (and the residual Add) joins; unfolded, the
    BN's parameter arithmetic sits between each Conv and its Relu in graph order."""
    from isa.lower.schedule.fusion import groups

    def heads(g):
        return [[n.op for n in grp.nodes] for grp in groups(g, BM1684, isa.Policy()) if grp.template.name != "view"]

    m = residual_block()
    assert heads(isa.from_onnx(m)) == [["conv", "active"], ["conv"], ["conv", "add", "active"]]
    assert len(heads(isa.from_onnx(m, passes=NO_FOLD))) > 3


def test_float16_folds_in_float16_and_runs_without_float32():
    m = residual_block(dtype=np.float16)
    folded = fold_batch_norms(m)
    assert {numpy_helper.to_array(t).dtype for t in folded.graph.initializer} == {np.dtype(np.float16)}
    x = x_of((2, 4, 8, 8), np.float16)
    g = isa.from_onnx(m)
    assert {g.tensors[t].dtype for n in g.nodes for t in n.outputs} == {"float16"}
    y = sim.run(g, GENERIC, inputs={"x": x}).outputs["y"]
    want = reference(m, {"x": x}).astype(np.float32)
    np.testing.assert_allclose(y.astype(np.float32), want, rtol=2e-2, atol=2e-2)


def test_a_folded_cnn_lowers_on_bm1682_which_has_no_rdivs():
    chip = chips.load("bm1682")
    assert chip.support("rdivs") is None
    isa.lower(isa.from_onnx(residual_block()), chip)


# ---- what does not fold ----------------------------------------------------------------------------

def _conv_bn(extra_nodes=(), outputs=(("y", F, [1, 3, 4, 4]),), inputs=(("x", F, [1, 2, 4, 4]),), drop=(), **bn_attrs):
    rng = np.random.default_rng(3)
    inits = {"w": rng.normal(0, 0.5, (3, 2, 1, 1)).astype(np.float32), **bn_params(rng, "bn", 3)}
    for k in drop:
        del inits[k]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), bn("c", "bn", "y", **bn_attrs), *extra_nodes]
    return model_of(nodes, list(inputs), list(outputs), inits)


def _check_unfolded(m, inputs):
    assert "BatchNormalization" in op_types(fold_batch_norms(m))
    g = isa.from_onnx(m)
    assert "rdivs" in {n.op for n in g.nodes}
    res = sim.run(g, GENERIC, inputs=inputs)
    for name, want in zip([o.name for o in m.graph.output], ReferenceEvaluator(m).run(None, inputs)):
        np.testing.assert_allclose(res.outputs[name], want, rtol=1e-5, atol=1e-5)


def test_a_batch_norm_whose_parameters_are_not_initializers_stays():
    scale = np.array([0.5, 1.0, 2.0], np.float32)
    m = _conv_bn(inputs=(("x", F, [1, 2, 4, 4]), ("bn.scale", F, [3])), drop=("bn.scale",))
    _check_unfolded(m, {"x": x_of((1, 2, 4, 4)), "bn.scale": scale})


def test_a_batch_norm_after_a_conv_output_read_elsewhere_stays():
    m = _conv_bn(extra_nodes=[helper.make_node("Relu", ["c"], ["r"])], outputs=(("y", F, [1, 3, 4, 4]), ("r", F, [1, 3, 4, 4])))
    _check_unfolded(m, {"x": x_of((1, 2, 4, 4))})


def test_a_batch_norm_after_a_conv_output_that_is_a_graph_output_stays():
    m = _conv_bn(outputs=(("y", F, [1, 3, 4, 4]), ("c", F, [1, 3, 4, 4])))
    _check_unfolded(m, {"x": x_of((1, 2, 4, 4))})


def test_a_batch_norm_whose_output_is_a_graph_output_folds():
    m = _conv_bn()
    folded = fold_batch_norms(m)
    assert op_types(folded) == ["Conv"] and list(folded.graph.node[0].output) == ["y"]
    x = x_of((1, 2, 4, 4))
    np.testing.assert_allclose(sim.run(isa.from_onnx(m), GENERIC, inputs={"x": x}).outputs["y"], reference(m, {"x": x}),
                               rtol=1e-5, atol=1e-5)


def test_a_batch_norm_in_training_mode_stays():
    rng = np.random.default_rng(3)
    inits = {"w": rng.normal(0, 0.5, (3, 2, 1, 1)).astype(np.float32), **bn_params(rng, "bn", 3)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("BatchNormalization", ["c", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["y", "rm", "rv"],
                              training_mode=1)]
    m = model_of(nodes, [("x", F, [1, 2, 4, 4])], [("y", F, [1, 3, 4, 4]), ("rm", F, [3]), ("rv", F, [3])], inits)
    assert "BatchNormalization" in op_types(fold_batch_norms(m))


def test_a_batch_norm_after_another_op_stays():
    rng = np.random.default_rng(4)
    m = model_of([helper.make_node("Relu", ["x"], ["r"]), bn("r", "bn", "y")], [("x", F, [1, 3, 4, 4])],
                 [("y", F, [1, 3, 4, 4])], bn_params(rng, "bn", 3))
    _check_unfolded(m, {"x": x_of((1, 3, 4, 4))})


# ---- ConvTranspose and Gemm --------------------------------------------------------------------------

@pytest.mark.parametrize("group", [1, 2])
def test_conv_transpose_with_groups_folds_per_output_channel(group):
    rng = np.random.default_rng(5)
    inits = {"w": rng.normal(0, 0.3, (4, 6 // group, 3, 3)).astype(np.float32), "b": rng.normal(0, 0.1, 6).astype(np.float32),
             **bn_params(rng, "bn", 6)}
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1], group=group,
                              name="deconv"), bn("c", "bn", "y")]
    m = model_of(nodes, [("x", F, [1, 4, 5, 5])], [("y", F, [1, 6, 9, 9])], inits)
    assert op_types(fold_batch_norms(m)) == ["ConvTranspose"]
    x = x_of((1, 4, 5, 5))
    want = reference(m, {"x": x}) if group == 1 else _grouped_reference(m, x, group)
    np.testing.assert_allclose(sim.run(isa.from_onnx(m, passes=NO_FOLD), GENERIC, inputs={"x": x}).outputs["y"], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sim.run(isa.from_onnx(m), GENERIC, inputs={"x": x}).outputs["y"], want, rtol=1e-5, atol=1e-5)


def _grouped_reference(m, x, group):
    """The reference of a grouped ConvTranspose + BN, one group at a time (onnx 1.22's reference
    ConvTranspose takes group 1 only)."""
    node = m.graph.node[0]
    init = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    cin, cout = init["w"].shape[0] // group, init["w"].shape[1]
    parts = []
    for g in range(group):
        inits = {"w": init["w"][g * cin:(g + 1) * cin], "b": init["b"][g * cout:(g + 1) * cout]}
        inits.update({k: v[g * cout:(g + 1) * cout] for k, v in init.items() if k.startswith("bn.")})
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name != "group"}
        nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["c"], **attrs), bn("c", "bn", "y")]
        part = model_of(nodes, [("x", F, [1, cin, 5, 5])], [("y", F, [1, cout, 9, 9])], inits)
        parts.append(reference(part, {"x": x[:, g * cin:(g + 1) * cin]}))
    return np.concatenate(parts, axis=1)


@pytest.mark.parametrize("trans_b, bias_shape, beta", [(1, (5,), 1.0), (0, (5,), 0.5), (1, None, 1.0), (0, (3, 1), 2.0),
                                                       (1, (), 1.0)])
def test_gemm_folds_per_column_with_beta_taken_into_the_bias(trans_b, bias_shape, beta):
    rng = np.random.default_rng(6)
    inits = {"w": rng.normal(0, 0.3, (5, 7) if trans_b else (7, 5)).astype(np.float32), **bn_params(rng, "bn", 5)}
    ins = ["x", "w"]
    if bias_shape is not None:
        inits["c"] = rng.normal(0, 0.3, bias_shape).astype(np.float32)
        ins.append("c")
    nodes = [helper.make_node("Gemm", ins, ["g"], transB=trans_b, alpha=1.5, beta=beta, name="fc"), bn("g", "bn", "y")]
    m = model_of(nodes, [("x", F, [3, 7])], [("y", F, [3, 5])], inits)
    folded = fold_batch_norms(m)
    assert op_types(folded) == ["Gemm"]
    x = x_of((3, 7))
    want = reference(m, {"x": x})
    np.testing.assert_allclose(reference(folded, {"x": x}), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sim.run(isa.from_onnx(m), GENERIC, inputs={"x": x}).outputs["y"], want, rtol=1e-5, atol=1e-5)
