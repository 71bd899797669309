"""The import passes (isa/onnx/passes.py): what each rewrites, that the rewritten graph computes
what the model does (against onnx.reference.ReferenceEvaluator), that each can be turned off,
and that a network exported as Paddle2ONNX writes it costs what its op-by-op twin costs."""

import math
import sys
from pathlib import Path

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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import onnx_models

GENERIC = chips.load("generic")
F = TensorProto.FLOAT


def const(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value, np.float32), name))


def model_of(nodes, shape=(2, 3, 4, 4), inits=None, outputs=("y",), opset=17):
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", F, shape)],
                              [helper.make_tensor_value_info(o, F, None) for o in outputs],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def check(model, passes=None, shape=(2, 3, 4, 4), seed=0, rtol=1e-5, atol=1e-6):
    """The graph after the passes, its outputs equal to the reference's on random inputs."""
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 3
    want = ReferenceEvaluator(model).run(None, {"x": x})
    g = isa.from_onnx(model, passes=passes)
    got = sim.run(g, GENERIC, inputs={"x": x}).outputs
    for o, w in zip([o.name for o in model.graph.output], want):
        np.testing.assert_allclose(got[o], w, rtol=rtol, atol=atol, err_msg=o)
    return g


def node_ops(model, passes):
    return [n.op_type for n in prepare(model, passes).model.graph.node]


# ---- constants ------------------------------------------------------------------------------------

def test_constant_nodes_become_constants_and_constant_subgraphs_compute_once():
    nodes = [const("v", [0.5, 1.0, 2.0]), const("eps", 1e-3), helper.make_node("Add", ["v", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["s"]), helper.make_node("Reshape", ["s", "shape"], ["s4"]),
             helper.make_node("Div", ["x", "s4"], ["y"])]
    m = model_of(nodes, inits={"shape": np.array([1, 3, 1, 1])})
    assert node_ops(m, ["constants"]) == ["Div"]
    g = check(m)
    assert "onnx pass constants: 2 Constant node(s) became constants, 3 node(s) of constant inputs computed once" in g.notes
    assert [n.op for n in g.nodes] == ["div"]


def test_random_and_quantizing_nodes_and_huge_results_are_not_computed_at_import():
    nodes = [helper.make_node("RandomNormal", [], ["r"], shape=[3]),
             helper.make_node("QuantizeLinear", ["w", "s"], ["q"]), helper.make_node("DequantizeLinear", ["q", "s"], ["dq"]),
             helper.make_node("ConstantOfShape", ["huge"], ["big"]), helper.make_node("Add", ["x", "dq"], ["y"])]
    m = model_of(nodes, shape=(3,), inits={"w": np.ones(3, np.float32), "s": np.array(0.5, np.float32),
                                           "huge": np.array([2**20, 2**20], np.int64)}, outputs=("y", "r", "big"))
    assert node_ops(m, ["constants"]) == ["RandomNormal", "QuantizeLinear", "DequantizeLinear", "ConstantOfShape", "Add"]
    with pytest.raises(isa.OutOfMemoryError, match=r"node big \(ConstantOfShape\): the result of shape \(1048576, 1048576\) would "
                                                   r"take 4398046511104 bytes when the graph is built; the limit is 8589934592 bytes"):
        isa.from_onnx(m)


# ---- bn_fold ----------------------------------------------------------------------------------------

def test_a_batch_norm_folds_when_its_parameters_are_constant_nodes():
    rng = np.random.default_rng(1)
    params = [const(f"bn.{k}", v) for k, v in zip(("s", "b", "m", "v"), (rng.uniform(0.5, 1.5, 4), rng.normal(0, 0.3, 4),
                                                                         rng.normal(0, 0.3, 4), rng.uniform(0.3, 2.0, 4)))]
    nodes = [const("w", rng.normal(0, 0.5, (4, 3, 3, 3))), *params, helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "bn.s", "bn.b", "bn.m", "bn.v"], ["y"], epsilon=1e-3)]
    m = model_of(nodes)
    assert node_ops(m, ["bn_fold"]) == ["Conv"]  # without the constants pass: the Constant nodes it read are gone too
    g = check(m, passes=["bn_fold"], rtol=1e-4, atol=1e-5)
    assert g.notes == ["onnx pass bn_fold: 1 BatchNormalization(s) folded into the convolution or Gemm before them"]
    assert [n.op for n in g.nodes] == ["conv"]


# ---- activations ------------------------------------------------------------------------------------

def _chain(spec):
    """Nodes from (op, inputs, output[, attrs]) with scalars as Constant nodes."""
    nodes, k = [], 0
    for op, inputs, out, *attrs in spec:
        names = []
        for i in inputs:
            if isinstance(i, float):
                names.append(f"c{k}")
                nodes.append(const(f"c{k}", i))
                k += 1
            else:
                names.append(i)
        nodes.append(helper.make_node(op, names, [out], **(attrs[0] if attrs else {})))
    return nodes


R2 = math.sqrt(2)
CHAINS = {  # name -> (the op it becomes, its attributes, the chain)
    "hardswish Add-Clip-Div-Mul": ("HardSwish", {}, [("Add", ["x", 3.0], "a"), ("Clip", ["a", 0.0, 6.0], "c"), ("Div", ["c", 6.0], "d"),
                                                    ("Mul", ["x", "d"], "y")]),
    "hardswish Paddle2ONNX": ("HardSwish", {}, [("Add", ["x", 3.0], "a"), ("Clip", ["a", 0.0, 6.0], "c"), ("Mul", ["x", "c"], "m"),
                                               ("Div", ["m", 6.0], "y")]),
    "hardswish of HardSigmoid": ("HardSwish", {}, [("HardSigmoid", ["x"], "h", {"alpha": 1 / 6, "beta": 0.5}), ("Mul", ["h", "x"], "y")]),
    "hardsigmoid": ("HardSigmoid", {"alpha": 0.2, "beta": 0.5}, [("Mul", ["x", 0.2], "m"), ("Add", ["m", 0.5], "a"),
                                                                 ("Clip", ["a", 0.0, 1.0], "y")]),
    "silu": ("Swish", {}, [("Sigmoid", ["x"], "s"), ("Mul", ["s", "x"], "y")]),
    "gelu erf": ("Gelu", {}, [("Div", ["x", R2], "d"), ("Erf", ["d"], "e"), ("Add", ["e", 1.0], "a"), ("Mul", ["x", "a"], "m"),
                              ("Mul", ["m", 0.5], "y")]),
    "gelu erf, half first": ("Gelu", {}, [("Mul", ["x", 1 / R2], "d"), ("Erf", ["d"], "e"), ("Add", [1.0, "e"], "a"),
                                          ("Mul", [0.5, "x"], "h"), ("Mul", ["h", "a"], "y")]),
    "gelu tanh": ("Gelu", {"approximate": "tanh"}, [("Pow", ["x", 3.0], "p"), ("Mul", ["p", 0.044715], "q"), ("Add", ["x", "q"], "s"),
                                                    ("Mul", ["s", math.sqrt(2 / math.pi)], "t"), ("Tanh", ["t"], "th"),
                                                    ("Add", ["th", 1.0], "a"), ("Mul", ["x", "a"], "m"), ("Mul", ["m", 0.5], "y")]),
    "mish softplus": ("Mish", {}, [("Softplus", ["x"], "s"), ("Tanh", ["s"], "t"), ("Mul", ["x", "t"], "y")]),
    "mish exp log": ("Mish", {}, [("Exp", ["x"], "e"), ("Add", ["e", 1.0], "a"), ("Log", ["a"], "l"), ("Tanh", ["l"], "t"),
                                  ("Mul", ["t", "x"], "y")]),
}


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_a_decomposed_activation_becomes_its_op_and_computes_the_same(name):
    op, attrs, spec = CHAINS[name]
    m = model_of(_chain(spec))
    source = prepare(m, ["activations"])
    (node,) = [n for n in source.model.graph.node if n.op_type != "Constant"]
    assert node.op_type == op and list(node.input) == ["x"] and list(node.output) == ["y"]
    for k, v in attrs.items():
        got = next(helper.get_attribute_value(a) for a in node.attribute if a.name == k)
        assert (got.decode() if isinstance(got, bytes) else pytest.approx(got)) == v
    assert source.notes == [f"onnx pass activations: recognised 1 {op}"]
    check(m, rtol=2e-5, atol=2e-6)


def test_a_chain_whose_intermediate_is_read_elsewhere_stays():
    spec = CHAINS["silu"][2] + [("Relu", ["s"], "z")]
    m = model_of(_chain(spec), outputs=("y", "z"))
    assert "Sigmoid" in node_ops(m, ["activations"])
    check(m)


def test_a_scalar_not_the_patterns_stays():
    m = model_of(_chain([("Add", ["x", 3.0], "a"), ("Clip", ["a", 0.0, 6.0], "c"), ("Div", ["c", 5.0], "d"), ("Mul", ["x", "d"], "y")]))
    assert [op for op in node_ops(m, ["activations"]) if op != "Constant"] == ["Add", "Clip", "Div", "Mul"]


# ---- identities -------------------------------------------------------------------------------------

def test_identity_dropout_and_transposes_that_undo_each_other_vanish():
    nodes = [helper.make_node("Identity", ["x"], ["i"]), helper.make_node("Relu", ["i"], ["r"]),
             helper.make_node("Dropout", ["r"], ["d"]), helper.make_node("Transpose", ["d"], ["t1"], perm=[0, 2, 3, 1]),
             helper.make_node("Transpose", ["t1"], ["t2"], perm=[0, 3, 1, 2]), helper.make_node("Identity", ["t2"], ["y"])]
    m = model_of(nodes)
    source = prepare(m, ["identities"])
    assert [(n.op_type, list(n.input), list(n.output)) for n in source.model.graph.node] == [("Relu", ["x"], ["y"])]
    assert source.notes == ["onnx pass identities: removed 2 Identity, 1 Dropout, 1 Transpose pair(s) that undo each other"]
    check(m)


def test_transposes_and_reshapes_in_a_row_become_one():
    nodes = [helper.make_node("Transpose", ["x"], ["t1"], perm=[0, 2, 3, 1]),
             helper.make_node("Transpose", ["t1"], ["t2"], perm=[0, 2, 1, 3]),
             helper.make_node("Reshape", ["t2", "s1"], ["r1"]), helper.make_node("Reshape", ["r1", "s2"], ["y"])]
    m = model_of(nodes, inits={"s1": np.array([2, -1]), "s2": np.array([4, 4, 6])})
    assert node_ops(m, ["identities"]) == ["Transpose", "Reshape"]
    check(m)


def test_an_identity_between_a_graph_input_and_output_stays():
    m = model_of([helper.make_node("Identity", ["x"], ["y"])])
    assert node_ops(m, ["identities"]) == ["Identity"]
    check(m)


def test_a_node_made_after_others_are_removed_is_alive():
    """Replaced nodes are freed by their callers; a node made afterwards can get a freed one's id,
    and must not be taken for removed (the transposes pass makes nodes after removing others)."""
    from isa.onnx.passes import Graph

    g = Graph(prepare(model_of([helper.make_node("Relu", ["x"], ["y"])]), []))
    for k in range(50):
        g.replace([g.nodes[0]], [helper.make_node("Relu", ["x"], [f"r{k}"])])
        assert g.alive(g.nodes[0]), k


# ---- transposes ------------------------------------------------------------------------------------

def rotary_after_split(perm=(0, 2, 1, 3)):
    """x (2, 3, 4, 4) split by a Transpose, then a rotary embedding over the last axis (slices, Neg,
    Concat, products by cos and sin of the transposed shape's last two axes, Add), then a Relu."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=list(perm)),
             helper.make_node("Slice", ["t", "lo", "mid", "last"], ["x1"]), helper.make_node("Slice", ["t", "mid", "hi", "last"], ["x2"]),
             helper.make_node("Neg", ["x2"], ["n"]), helper.make_node("Concat", ["n", "x1"], ["rot"], axis=-1),
             helper.make_node("Mul", ["t", "cos"], ["a"]), helper.make_node("Mul", ["rot", "sin"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
    inits = {"lo": np.array([0]), "mid": np.array([2]), "hi": np.array([4]), "last": np.array([-1]),
             "cos": rng.standard_normal((3, 4)).astype(np.float32), "sin": rng.standard_normal((1, 4)).astype(np.float32)}
    return model_of(nodes, inits=inits)


def test_a_transpose_moves_past_the_elementwise_work_after_it():
    """The head split moves past the rotary and the Relu: eight nodes compute on the untransposed
    input (their constants permuted back, the slices' axes and the Concat's mapped), one Transpose
    at the end, and the reference's values."""
    m = rotary_after_split()
    source = prepare(m, ["transposes"])
    assert [n.op_type for n in source.model.graph.node] == ["Slice", "Slice", "Neg", "Concat", "Mul", "Mul", "Add", "Relu", "Transpose"]
    assert source.notes == ["onnx pass transposes: 8 node(s) moved ahead of the Transposes before them"]
    assert "cos" not in source.weights and source.weights["cos.untransposed0213"].shape == (1, 3, 1, 4)
    check(m, ["transposes"])


def test_a_transpose_another_op_or_the_graph_reads_stays():
    """A Transpose also read by a MatMul (which does not move), or returned by the graph, stays
    where it is: moving past its other readers would add a copy."""
    extra = [helper.make_node("MatMul", ["t", "w"], ["z"])]
    m = rotary_after_split()
    m.graph.node.extend(extra)
    m.graph.initializer.append(numpy_helper.from_array(np.ones((4, 4), np.float32), "w"))
    m.graph.output.append(helper.make_tensor_value_info("z", F, None))
    assert node_ops(m, ["transposes"])[0] == "Transpose"
    check(m, ["transposes"])
    returned = rotary_after_split()
    returned.graph.output.append(helper.make_tensor_value_info("t", F, None))
    assert node_ops(returned, ["transposes"])[0] == "Transpose"


def test_a_transpose_of_unit_axes_is_a_view():
    """A Transpose moving only axes of one element keeps the elements' order: a reshape, no copy."""
    m = model_of([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 1, 3])], shape=(2, 1, 3, 4))
    assert [n.op for n in check(m, shape=(2, 1, 3, 4)).nodes] == ["reshape"]


# ---- choosing passes ------------------------------------------------------------------------------------

def test_passes_can_be_turned_off_and_unknown_ones_are_refused():
    m = model_of(_chain(CHAINS["silu"][2]))
    assert isa.from_onnx(m, passes=()).notes == []
    assert [n.split(":")[0] for n in isa.from_onnx(m).notes] == [f"onnx pass {p}" for p in PASSES]
    with pytest.raises(isa.ConfigError,
                       match=r"unknown pass\(es\) 'fold'; the passes are gptq, constants, bn_fold, activations, identities, transposes"):
        isa.from_onnx(m, passes=["fold"])


def test_the_program_lists_the_passes_in_its_notes():
    program = isa.lower(isa.from_onnx(model_of(_chain(CHAINS["silu"][2]))), GENERIC)
    assert "onnx pass activations: recognised 1 Swish" in program.notes
    assert ".note onnx pass activations: recognised 1 Swish" in program.to_text()


# ---- the measure: a Paddle2ONNX-style export against its op-by-op twin -----------------------------------

@pytest.mark.parametrize("chip", ["bm1684", "bm1686"])
def test_a_paddle_style_export_costs_within_5_percent_of_its_op_by_op_twin(chip):
    paddle, twin = onnx_models.pp_lcnet("paddle", size=32), onnx_models.pp_lcnet("twin", size=32)
    x = np.random.default_rng(2).standard_normal((1, 3, 32, 32)).astype(np.float32)
    got = sim.run(isa.from_onnx(paddle), chip, inputs={"x": x})
    base = sim.run(isa.from_onnx(twin), chip, inputs={"x": x})
    assert abs(got.cycles / base.cycles - 1) < 0.05
    assert sim.run(isa.from_onnx(paddle, passes=()), chip, mode="timing").cycles > 1.5 * base.cycles
    np.testing.assert_allclose(got.outputs["y"], ReferenceEvaluator(paddle).run(None, {"x": x})[0], rtol=1e-4, atol=1e-6)


def test_scalar_multiply_add_and_hardswish_after_each_convolution_join_its_layer_group():
    from isa.lower.schedule.fusion import groups

    g = isa.from_onnx(onnx_models.pp_lcnet("paddle", size=32))
    convolutions = ("conv", "depthwise")  # a depthwise convolution has a template of its own
    heads = [[n.op for n in grp.nodes] for grp in groups(g, chips.load("bm1684"), isa.Policy()) if grp.template.name in convolutions]
    assert len(heads) == 15 and all(ops == ["conv", "mul", "add", "muls", "adds", "clamp", "mul"] for ops in heads)


def test_the_two_exports_are_valid_and_compute_the_same():
    paddle, twin = onnx_models.pp_lcnet("paddle"), onnx_models.pp_lcnet("twin")
    for m in (paddle, twin):
        onnx.checker.check_model(m, full_check=True)
    assert not paddle.graph.initializer and "Constant" in {n.op_type for n in paddle.graph.node}
    assert {"BatchNormalization", "Clip"} <= {n.op_type for n in paddle.graph.node}
    assert {"BatchNormalization", "Clip", "Constant"}.isdisjoint({n.op_type for n in twin.graph.node})
    x = np.random.default_rng(3).standard_normal((1, 3, 64, 64)).astype(np.float32)
    np.testing.assert_allclose(ReferenceEvaluator(paddle).run(None, {"x": x})[0], ReferenceEvaluator(twin).run(None, {"x": x})[0],
                               rtol=1e-5, atol=1e-7)
