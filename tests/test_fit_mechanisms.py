"""The mechanisms bench/fit.py fits (docs/accuracy.md): an activation the chip runs as a
layer of its own (`kind: global`) instead of in a convolution's layer group (`local`) moves its
operands through DDR, shown on a convolution and a leaky ReLU, and on an int8 convolution and the
lookup table its SiLU deploys to; a several-pass vector function (a sigmoid) spends the chip's
`pass_cycles` on each of its passes, a one-pass one (an add) one cycle."""

import sys
from pathlib import Path

import numpy as np
import pytest

import chips
import isa
import sim
from isa import ops as O

SHAPE = (1, 16, 16, 16)


def conv_leaky():
    rng = np.random.default_rng(0)
    g = isa.Graph("conv_leaky")
    with g:
        x = g.input("x", SHAPE, "float32")
        w = g.constant("w", (rng.standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32))
        h = O.conv(x, w, pad_h_t=1, pad_h_b=1, pad_w_l=1, pad_w_r=1, name="conv")
        g.output(O.active_param(h, "leaky_relu", [0.1], name="leaky"), "y")
    return g, {"x": rng.standard_normal(SHAPE).astype(np.float32)}


@pytest.mark.parametrize("name", ["bm1684", "bm1686"])
def test_a_global_activation_is_a_layer_of_its_own_through_ddr(name):
    g, x = conv_leaky()
    fused = sim.run(g, chips.load(name, {"ops.active_param.leaky_relu.kind": "local"}), x)
    alone = sim.run(g, chips.load(name, {"ops.active_param.leaky_relu.kind": "global"}), x)
    np.testing.assert_array_equal(alone.outputs["y"], fused.outputs["y"])
    h = fused.outputs["y"]
    assert (h[h < 0] != 0).any()  # the negative slope is applied, not a relu
    nbytes = int(np.prod(SHAPE)) * 4
    assert fused.stats.ddr_write_bytes == nbytes  # the activation's result only
    assert alone.stats.ddr_write_bytes == 2 * nbytes  # the convolution's result too
    assert alone.stats.ddr_read_bytes >= fused.stats.ddr_read_bytes + nbytes  # and read back
    assert alone.cycles > fused.cycles


def conv_silu_onnx():
    """A 3x3 convolution and a SiLU, float32 ONNX, to deploy in int8 (the SiLU becomes one `lut`)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    try:
        from onnx_models import Net
    finally:
        del sys.path[0]
    net = Net("conv_silu", "float32", 0)
    x = net.input("input", SHAPE)
    net.output(net.silu(net.conv(x, 16, 3, bias=True, name="conv"), "silu"), "output")
    return net.model("a convolution and a SiLU")


def test_an_int8_lookup_table_as_a_layer_of_its_own_moves_its_operands_through_ddr():
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    runs = {}
    for kind in ("local", "global"):
        chip = chips.load("bm1684", {"ops.lut.kind": kind})
        g = isa.from_onnx(conv_silu_onnx(), quantize="int8", chip=chip, calibration=isa.deploy.Table(default=8.0))
        assert [n.op for n in g.nodes].count("lut") == 1
        runs[kind] = sim.run(g, chip, {"input": x})
    fused, alone = runs["local"], runs["global"]
    np.testing.assert_array_equal(alone.outputs["output"], fused.outputs["output"])
    nbytes = int(np.prod(SHAPE))  # the convolution's int8 result, stored and loaded again
    assert alone.stats.ddr_write_bytes >= fused.stats.ddr_write_bytes + nbytes
    assert alone.stats.ddr_read_bytes >= fused.stats.ddr_read_bytes + nbytes
    assert alone.cycles > fused.cycles


def sigmoid_then_add():
    rng = np.random.default_rng(2)
    g = isa.Graph("sigmoid_add")
    with g:
        x = g.input("x", SHAPE, "float32")
        g.output(O.add(O.active(x, "sigmoid", name="sig"), x, name="add"), "y")
    return g, {"x": rng.standard_normal(SHAPE).astype(np.float32)}


@pytest.mark.parametrize("name", ["bm1684", "bm1686"])
def test_a_several_pass_function_takes_pass_cycles_a_pass_and_a_one_pass_function_one(name):
    """A float32 sigmoid (op_cycles 16 passes) at pass_cycles 1 and 5: each of its instructions
    takes issue_latency + groups * 16 * pass_cycles cycles, the add's the same either way."""
    g, x = sigmoid_then_add()
    runs = {p: sim.run(g, chips.load(name, {"engines.tiu.vector.pass_cycles.float32": str(p)}), x) for p in (1, 5)}
    np.testing.assert_array_equal(runs[1].outputs["y"], runs[5].outputs["y"])
    unit = chips.load(name).engines["tiu"].vector
    issue = chips.load(name).engines["tiu"].issue_latency
    passes = unit.op_cycles["sigmoid"]
    assert passes > 1 and unit.op_cycles.get("add", 1) == 1
    spent = {p: {fn: [e.end - e.start for e in r.trace.events if e.name == fn] for fn in ("sigmoid", "add")} for p, r in runs.items()}
    assert spent[1]["add"] == spent[5]["add"] and spent[1]["add"]
    assert len(spent[1]["sigmoid"]) == len(spent[5]["sigmoid"]) > 0
    for one, five in zip(spent[1]["sigmoid"], spent[5]["sigmoid"]):
        groups = (one - issue) / passes
        assert groups == int(groups) > 0
        assert five == issue + groups * passes * 5
    added = sum(spent[5]["sigmoid"]) - sum(spent[1]["sigmoid"])
    assert runs[5].stats.busy["tiu"] - runs[1].stats.busy["tiu"] == added > 0  # the TIU's work grows by the passes alone
