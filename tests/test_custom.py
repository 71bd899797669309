"""customed_ops: a user's op registered with isa.ops.register_custom runs on the scalar engine of
bm1684 and generic with the user's values and the user's cost; its arguments survive the
program's text; bad registrations, arguments and unknown ops are clear errors."""

import math

import numpy as np
import pytest
from refeval import evaluate

import chips
import isa
import sim
from isa.graphfile import load
from isa.instructions import Scalar
from isa.ops import Spec
from isa.ops.custom import CUSTOM

O = isa.ops
CHIPS = {name: chips.load(name) for name in ("generic", "bm1682", "bm1684", "bm1686")}


def softplus(arrays, params):
    (x,) = arrays
    beta = params["beta"]
    return [np.log1p(np.exp(beta * x.astype(np.float64))) / beta]


def softplus_cost(srcs, dsts, params):
    return 3.5 * math.prod(srcs[0])  # an exp, a log1p and a divide per element, say


def minmax(arrays, params):
    return [arrays[0].min(axis=-1), arrays[0].max(axis=-1)]


def minmax_infer(specs, params):
    return [Spec(specs[0].shape[:-1], specs[0].dtype)] * 2


def affine(arrays, params):
    """Uses every kind of argument: an int, a float, a word and a tuple of numbers."""
    x = arrays[0].astype(np.float64)
    y = x * params["scale"] + params["shift"] + sum(params["taps"])
    return [-y if params["mode"] == "negate" else y]


O.register_custom("softplus", softplus, softplus_cost)
O.register_custom("minmax", minmax, lambda srcs, dsts, params: math.prod(srcs[0]), minmax_infer)
O.register_custom("affine", affine, lambda srcs, dsts, params: 2 * math.prod(srcs[0]))


def run(build, inputs, chip):
    g = isa.Graph("t")
    outs = build(g)
    for name, t in outs.items():
        g.output(t, name)
    res = sim.run(g, chip, inputs)
    assert sim.run(g, chip, mode="timing").cycles == res.cycles
    prog = isa.lower(g, CHIPS[chip])
    assert isa.Program.from_text(prog.to_text()) == prog
    return res, prog


@pytest.mark.parametrize("chip", ["bm1684", "generic"])
def test_a_users_softplus_runs_with_its_values_and_its_cost(chip):
    x = np.linspace(-6, 6, 60, dtype=np.float32).reshape(5, 12)
    res, prog = run(lambda g: {"y": O.customed_ops([g.input("x", x.shape)], "softplus", {"beta": 2.0}, name="sp")}, {"x": x}, chip)
    want = (np.log1p(np.exp(2.0 * x.astype(np.float64))) / 2.0).astype(np.float32)
    np.testing.assert_array_equal(res.outputs["y"], want)
    (event,) = [e for e in res.trace.events if e.op == "sp" and e.kind == "scalar"]
    engine = CHIPS[chip].engines_of("scalar")[0]
    assert event.end - event.start == engine.issue_latency + math.ceil(3.5 * 60)  # 1100 + 210 on bm1684
    (instr,) = [i for s in prog.streams.values() for i in s if isinstance(i, Scalar)]
    assert instr.fn == "custom.softplus" and instr.args == (("beta", 2.0),)


def test_an_op_with_two_outputs_gives_a_tuple():
    x = np.array([[3, -1, 7], [0, 5, 2]], np.int32)

    def build(g):
        lo, hi = O.customed_ops([g.input("x", x.shape, "int32")], "minmax")
        assert lo.shape == hi.shape == (2,)
        return {"lo": lo, "hi": hi}

    res, _ = run(build, {"x": x}, "bm1684")
    assert res.outputs["lo"].tolist() == [-1, 0] and res.outputs["hi"].tolist() == [7, 5]


def test_arguments_survive_the_programs_text():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    param = {"scale": 3, "shift": -0.25, "mode": "negate", "taps": [1, 2.5, -4], "none": ()}
    res, prog = run(lambda g: {"y": O.customed_ops([g.input("x", x.shape)], "affine", param)}, {"x": x}, "generic")
    want = -(x * 3 - 0.25 + (1 + 2.5 - 4))
    np.testing.assert_array_equal(res.outputs["y"], want)
    again = isa.Program.from_text(prog.to_text())
    (instr,) = [i for s in again.streams.values() for i in s if isinstance(i, Scalar)]
    assert dict(instr.args) == {"scale": 3, "shift": -0.25, "mode": "negate", "taps": (1, 2.5, -4), "none": ()}
    assert isinstance(dict(instr.args)["scale"], int)
    np.testing.assert_array_equal(sim.execute(again, CHIPS["generic"], {"x": x}).outputs["y"], want)


def test_the_reference_is_the_users_compute():
    g = isa.Graph("t")
    g.output(O.customed_ops([g.input("x", (4,))], "softplus", {"beta": 1}), "y")
    x = np.array([-1, 0, 1, 2], np.float32)
    np.testing.assert_allclose(evaluate(g, {"x": x}, CHIPS["bm1684"])["y"], np.log1p(np.exp(x)), rtol=1e-6)


# ---- chips ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("chip, in_dtype, op, ok", [
    ("bm1682", "float32", "softplus", True), ("bm1682", "int8", "affine", False),  # seed line 1237: FLOAT32 only
    ("bm1684", "int16", "affine", True), ("bm1684", "float16", "affine", False),  # line 1238
    ("bm1686", "uint8", "affine", True), ("bm1686", "float16", "affine", False),  # line 1239
])
def test_customed_ops_dtypes(chip, in_dtype, op, ok):
    g = isa.Graph("t")
    g.output(O.customed_ops([g.input("x", (3,), in_dtype)], op, {"beta": 1.0} if op == "softplus" else
                            {"scale": 1, "shift": 0, "mode": "keep", "taps": ()}), "y")
    if ok:
        isa.lower(g, CHIPS[chip])
    else:
        with pytest.raises(isa.UnsupportedError, match=f"customed_ops with {in_dtype} -> {in_dtype} is not supported on chip {chip}"):
            isa.lower(g, CHIPS[chip])


def test_dtypes_may_mix_on_bm1684():
    """The seed's line lists dtypes without asking inputs and outputs to agree (an interpretation)."""
    O.register_custom("to_float", lambda a, p: [a[0].astype(np.float32) / 4], lambda s, d, p: 1,
                      lambda specs, p: [Spec(specs[0].shape, "float32")])
    x = np.array([4, -8, 2], np.int8)
    res, _ = run(lambda g: {"y": O.customed_ops([g.input("x", (3,), "int8")], "to_float")}, {"x": x}, "bm1684")
    assert res.outputs["y"].tolist() == [1.0, -2.0, 0.5]


# ---- errors ------------------------------------------------------------------------------------

def x_tensor():
    return isa.Graph("t").input("x", (3,))


def test_an_unregistered_op_lists_the_registered_ones():
    with pytest.raises(isa.UnsupportedError, match=r"customed_ops: op_type 'gelu' is not registered "
                                                   r"\(registered: .*affine, minmax, softplus"):
        O.customed_ops([x_tensor()], "gelu")


@pytest.mark.parametrize("param, match", [
    ({"flag": True}, r"param 'flag' must be a number, a word or a list of numbers, got bool True"),
    ({"d": {"a": 1}}, r"param 'd' must be a number, a word or a list of numbers, got dict"),
    ({"s": "two words"}, r"param 's': a string must be one word"),
    ({"s": "1.5"}, r"param 's': a string must be one word .*\(and not a number\), got '1.5'"),
    ({"s": "x" * 65}, r"param 's': a string must be one word of at most 64"),
    ({"v": float("nan")}, r"param 'v' is NaN"),
    ({"v": [[1, 2]]}, r"param 'v' element must be a number, a word or a list of numbers, got list"),
    ({"v": [1, "a"]}, r"param 'v' element must be a number"),
    ({"bad key": 1}, r"customed_ops softplus: param name 'bad key' must match"),
    ([("beta", 1.0)], r"customed_ops softplus: param must be a dict of arguments, got list"),
])
def test_bad_arguments(param, match):
    with pytest.raises(isa.UnsupportedError, match=match):
        O.customed_ops([x_tensor()], "softplus", param)


def test_numpy_arguments_become_plain_numbers():
    y = O.customed_ops([x_tensor()], "affine", {"scale": np.int64(2), "shift": np.float32(0.5), "mode": "keep", "taps": np.array([1, 2])})
    node = y.graph.producer[y.name]
    assert node.params["param"] == {"scale": 2, "shift": 0.5, "mode": "keep", "taps": (1, 2)}
    assert type(node.params["param"]["scale"]) is int


def test_bad_registrations():
    with pytest.raises(isa.GraphError, match=r"register_custom: name 'my op' must match"):
        O.register_custom("my op", softplus, softplus_cost)
    with pytest.raises(isa.GraphError, match="register_custom f: cost must be callable, got int"):
        O.register_custom("f", softplus, 3)
    O.register_custom("bad_infer", softplus, softplus_cost, lambda specs, p: [(3,)])
    with pytest.raises(isa.GraphError, match=r"customed_ops bad_infer: infer must return a non-empty list of isa.ops.Spec, got \[\(3,\)\]"):
        O.customed_ops([x_tensor()], "bad_infer")
    O.register_custom("bad_cost", softplus, lambda s, d, p: -1)
    with pytest.raises(isa.GraphError, match="customed_ops bad_cost: cost must return a finite number of cycles >= 0, got -1"):
        O.customed_ops([x_tensor()], "bad_cost")
    with pytest.raises(isa.ShapeError, match="customed_ops softplus: with no input tensor the op must say its outputs"):
        O.customed_ops([], "softplus", {"beta": 1.0}, graph=isa.Graph("t"))
    with pytest.raises(isa.GraphError, match="customed_ops: tensor_i must be a list of tensors, got Tensor"):
        O.customed_ops(x_tensor(), "softplus")


def test_a_program_needs_its_custom_op_registered_where_it_runs():
    O.register_custom("gone", softplus, softplus_cost)
    g = isa.Graph("t")
    g.output(O.customed_ops([g.input("x", (3,))], "gone", {"beta": 1.0}), "y")
    prog = isa.lower(g, CHIPS["generic"])
    del CUSTOM["gone"]
    with pytest.raises(isa.ProgramError, match=r"custom op 'gone' is not registered in this process \(isa.ops.register_custom\)"):
        sim.execute(prog, CHIPS["generic"], {"x": np.zeros(3, np.float32)})


def test_a_graph_file_runs_a_custom_op(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text("name: g\ninputs:\n  x: {shape: [4], dtype: float32}\n"
                    "ops:\n  - {op: customed_ops, inputs: [x], params: {op_type: softplus, param: {beta: 1.0}}, name: sp}\n"
                    "outputs: {y: sp}\n")
    x = np.array([-2, 0, 1, 3], np.float32)
    res = sim.run(load(path).graph, "bm1684", {"x": x})
    np.testing.assert_array_equal(res.outputs["y"], np.log1p(np.exp(x.astype(np.float64))).astype(np.float32))
