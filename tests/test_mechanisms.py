"""The general timing mechanisms the published times called for (docs/accuracy.md), each shown
on a small program in isolation: the cycles move the way the mechanism says."""

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import chips
import isa
import sim
from isa import costs
from isa import ops as O

ROOT = Path(__file__).resolve().parents[1]
HEAD = (1, 3, 85, 20, 20)  # a YOLOv5 head's (batch, anchors, 5 + classes, H, W), permuted to (..., H, W, 85)


def _permute(chip, dtype):
    x = (np.random.default_rng(0).standard_normal(HEAD) * 10).astype(dtype)
    g = isa.Graph("head_permute")
    with g:
        g.output(O.permute(g.input("x", x.shape, dtype), [0, 1, 3, 4, 2]), "y")
    res = sim.run(g, chip, {"x": x})
    np.testing.assert_array_equal(res.outputs["y"], x.transpose(0, 1, 3, 4, 2))
    return res, x.nbytes


@pytest.mark.parametrize("name", ["bm1684", "bm1686"])
@pytest.mark.parametrize("dtype", ["int8", "float32"])
def test_a_permute_on_a_chip_that_copies_ddr_to_ddr_goes_round_through_local_memory(name, dtype):
    """The GDMA copies DDR to DDR directly; read in the output's order a head permute's source
    comes one element a run, a 64-byte burst each. Through local memory (no bursts) it moves its
    bytes about once each way; without a burst-free local memory it costs a burst per element."""
    chip = chips.load(name)
    res, nbytes = _permute(chip, dtype)
    once = 2 * nbytes / chip.memories["ddr"].bandwidth  # cycles to read and write the bytes at DDR's rate
    assert res.stats.ddr_write_bytes == nbytes
    assert once < res.cycles < 1.3 * once + 2000
    per_element, _ = _permute(chips.load(name, {"memories.lmem.burst": 64}), dtype)
    burst = chip.memories["ddr"].burst
    elements = nbytes // np.dtype(dtype).itemsize
    assert per_element.cycles > elements * burst / chip.engines["gdma"].rate("ddr", "ddr") * 0.9


def _product_cycles(chip, M, K, N):
    a = np.random.default_rng(1).integers(-2, 3, (M, K)).astype("float16")
    b = np.random.default_rng(2).integers(-2, 3, (K, N)).astype("float16")
    g = isa.Graph("product")
    with g:
        g.output(O.matrix_mul(g.input("a", a.shape, "float16"), g.input("b", b.shape, "float16")), "c")
    res = sim.run(g, chip, {"a": a, "b": b})
    np.testing.assert_allclose(res.outputs["c"].astype(np.float32), a.astype(np.float32) @ b.astype(np.float32))
    return res.stats.busy["tiu"]


@pytest.mark.parametrize("K", [64, 2048])
def test_a_hidden_drain_costs_a_fold_the_longer_of_its_blocks_and_its_drain(K):
    """drain_hidden: a fold costs max(ceil(K/k) * block, fill_drain), not their sum. A shallow
    product (K = 64: 8 cycles of float16 blocks per 32 of drain) keeps the drain and loses its blocks' cycles;
    a deep one (K = 2048: 256 cycles of blocks) loses the whole drain."""
    base = chips.load("bm1686")
    unit = base.engines["tiu"].matrix
    M, N = 4 * unit.m, 4 * unit.n
    folds, blocks = 16, -(-K // unit.depth("float16")) * unit.block("float16")
    summed = _product_cycles(chips.load("bm1686", {"engines.tiu.matrix.drain_hidden": False}), M, K, N)
    hidden = _product_cycles(chips.load("bm1686", {"engines.tiu.matrix.drain_hidden": True}), M, K, N)
    # the program is retiled for the cheaper folds (the estimate prices with the same formula), so at least that much is saved
    assert summed - hidden >= folds * min(blocks, unit.fill_drain)
    assert hidden >= folds * max(blocks, unit.fill_drain)


@given(st.integers(1, 300), st.integers(1, 5000), st.integers(1, 300), st.sampled_from(["float32", "float16", "int8"]),
       st.booleans(), st.integers(0, 64))
@settings(max_examples=60, deadline=None)
def test_the_fold_formula_and_its_separated_sum_agree(M, K, N, dtype, conv, fill):
    """matmul_total (the estimate's separated sum) equals matmul_cycles, with the drain hidden or not."""
    for hidden in (False, True):
        unit = dataclasses.replace(chips.load("bm1686").engines["tiu"].matrix, fill_drain=fill, drain_hidden=hidden)
        one = costs.matmul_cycles(M, K, N, unit, dtype, 20, conv)
        assert costs.matmul_total([(M, 1)], [(K, 1)], [(N, 1)], unit, dtype, 20, conv) == one
        blocks = -(-K // unit.depth(dtype)) * unit.block(dtype, conv)
        along_m, along_n = (unit.n, unit.m) if conv and unit.conv_channels_on_m else (unit.m, unit.n)
        folds = -(-M // along_m) * -(-N // along_n)
        assert one == 20 + folds * (max(blocks, fill) if hidden else blocks + fill)


def _pointwise_tiu(chip, oc):
    """TIU cycles of a 1x1 float32 convolution of 64 channels of 32 x 32 into oc channels."""
    rng = np.random.default_rng(4)
    x = rng.integers(-2, 3, (1, 64, 32, 32)).astype(np.float32)
    w = rng.integers(-2, 3, (oc, 64, 1, 1)).astype(np.float32)
    g = isa.Graph("pointwise")
    with g:
        g.output(O.conv(g.input("x", x.shape), g.constant("w", w)), "y")
    res = sim.run(g, chip, {"x": x})
    np.testing.assert_array_equal(res.outputs["y"], np.einsum("nchw,oc->nohw", x, w[:, :, 0, 0]))
    return res.stats.busy["tiu"]


@pytest.mark.parametrize("oc", [8, 16, 32, 64, 128])
def test_a_convolution_keeps_as_many_lanes_busy_as_it_has_output_channels(oc):
    """conv_channels_on_m: a convolution's output channels go on the unit's m side (BM1684's 64
    lanes, each holding whole channels) and its positions on the n side (32 EUs). With 32 or fewer
    output channels the products take 64 / 32 = 2 times the folds they take with the channels on
    the 32-wide side; from 64 on, the same."""
    unit = chips.load("bm1684").engines["tiu"].matrix
    across = _pointwise_tiu(chips.load("bm1684", {"engines.tiu.matrix.conv_channels_on_m": False}), oc)
    on_lanes = _pointwise_tiu(chips.load("bm1684", {"engines.tiu.matrix.conv_channels_on_m": True}), oc)
    ratio = (-(-oc // unit.m) * unit.m) / (-(-oc // unit.n) * unit.n)  # the padded channel extents' ratio
    assert on_lanes == pytest.approx(across * ratio, rel=0.02)
    assert (on_lanes > 1.9 * across) if oc <= unit.n else (on_lanes == across)


def _c3d_block(batch=1):
    """Two 3x3x3 convolutions with bias and ReLU (C3D's conv1 and conv2 at a small size), float32 ONNX."""
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from onnx_models import Net
    finally:
        del sys.path[0]
    net = Net("c3d_block", "float32", 0)
    x = net.input("input", (batch, 3, 8, 28, 28))
    for name, out in (("conv1", 16), ("conv2", 32)):
        x = net.unary("Relu", net.conv(x, out, 3, bias=True, name=name), f"{name}.relu")
    net.output(x, "output")
    return net.model("two 3-d convolutions")


@pytest.mark.parametrize("name, way", [("bm1684", "conv3d in int8"), ("bm1686", "conv3d in int8 through int32")])
def test_a_3d_convolution_deploys_to_int8_as_the_chip_compiler_lowers_it(name, way):
    """INT8 deployment of a 3-d convolution: on BM1684 conv3d itself in int8 (an int16 bias and a
    shift), on BM1684X conv3d_v2 into int32 and requant_int32 into int8 (TPU-MLIR's lowerings,
    isa/deploy/int8.py): no convolution is left in float32, the result is within a few int8 steps of
    the float model's, and the products run faster than float32's."""
    model = _c3d_block()
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 28, 28)).astype(np.float32)
    chip = chips.load(name)
    threshold = 8.0
    g = isa.from_onnx(model, quantize="int8", chip=name, calibration=isa.deploy.Table(default=threshold))
    assert f"2 {way}" in g.notes[-1] and "in float32" not in g.notes[-1]
    quantized = sim.run(g, chip, {"input": x})
    floating = sim.run(isa.from_onnx(model), chip, {"input": x})
    step = threshold / 127
    assert np.abs(quantized.outputs["output"] - floating.outputs["output"]).max() < 6 * step
    assert quantized.stats.busy["tiu"] < floating.stats.busy["tiu"]


def _mobilenet_block():
    """A depthwise 3x3 and a pointwise 1x1 convolution of 16 channels, each with bias and ReLU
    (a MobileNet block at a small size), float32 ONNX."""
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from onnx_models import Net
    finally:
        del sys.path[0]
    net = Net("mobilenet_block", "float32", 0)
    x = net.input("input", (1, 16, 24, 24))
    x = net.unary("Relu", net.conv(x, 16, 3, group=16, bias=True, name="dw"), "dw.relu")
    x = net.unary("Relu", net.conv(x, 16, 1, bias=True, name="pw"), "pw.relu")
    net.output(x, "output")
    return net.model("a depthwise and a pointwise convolution")


@pytest.mark.parametrize("name, per_channel", [("bm1684", False), ("bm1686", True)])
def test_int8_weight_scales_are_per_channel_only_where_the_chip_requantizes_per_channel(name, per_channel):
    """INT8 deployment of a MobileNet block: BM1684X requantizes per channel (its table has
    requant_int32 mode 2), so each product goes to int16 and a mul_shift by per-channel multipliers;
    BM1684 does not, and TPU-MLIR lowers its int8 convolutions, depthwise ones too, with one right
    shift for the whole filter (isa/deploy/int8.py): each product is finished into int8 by its own
    shift, no multiplier runs on the vector unit, and the depthwise convolution is computed in int8,
    not in float32 between casts. Either way the result is within a few int8 steps of the float model's."""
    model = _mobilenet_block()
    x = np.random.default_rng(0).standard_normal((1, 16, 24, 24)).astype(np.float32)
    chip = chips.load(name)
    threshold = 8.0
    g = isa.from_onnx(model, quantize="int8", chip=name, calibration=isa.deploy.Table(default=threshold))
    convs = [n for n in g.nodes if n.op == "conv"]
    assert len(convs) == 2 and "in float32" not in g.notes[-1]
    assert ("mul_shift" in {n.op for n in g.nodes}) == per_channel
    assert {g.tensors[n.outputs[0]].dtype for n in convs} == {"int16" if per_channel else "int8"}
    quantized = sim.run(g, chip, {"input": x})
    fns = {e.name for e in quantized.trace.events if e.kind == "vector"}
    assert ("mul_rshift" in fns) == per_channel
    floating = sim.run(isa.from_onnx(model), chip, {"input": x})
    assert np.abs(quantized.outputs["output"] - floating.outputs["output"]).max() < 6 * threshold / 127


def _conv_folds(chip, ic):
    """The matrix unit's cycles of a 3x3 float16 convolution of ic channels of 16 x 16 into 64
    channels, each product's issue left out (the tiling may cut the product in pieces)."""
    rng = np.random.default_rng(5)
    x = rng.integers(-2, 3, (1, ic, 16, 16)).astype(np.float16)
    w = rng.integers(-2, 3, (64, ic, 3, 3)).astype(np.float16)
    g = isa.Graph("conv3x3")
    with g:
        g.output(O.conv(g.input("x", x.shape, "float16"), g.constant("w", w)), "y")
    res = sim.run(g, chip, {"x": x})
    windows = np.lib.stride_tricks.sliding_window_view(x[0].astype(np.float32), (3, 3), axis=(1, 2))
    np.testing.assert_array_equal(res.outputs["y"][0].astype(np.float32), np.einsum("chwij,ocij->ohw", windows, w.astype(np.float32)))
    issue = chip.engines["tiu"].issue_latency
    return sum(e.end - e.start - issue for e in res.trace.events if e.kind == "matrix")


@pytest.mark.parametrize("ic", [16, 32, 64])
def test_a_convolution_pads_its_channels_at_every_kernel_position(ic):
    """conv_tap_channels: BM1684X's CUBE takes 32 float16 channels of one kernel position at a time
    (TPU-MLIR's filter layout), so a 3x3 convolution of 16 input channels multiplies as many blocks
    as one of 32 (K 9 x 32, not 16 x 9): twice those of the unit's 16-deep blocks unpadded; from 32
    channels on, the same. (Fill and drain off, so a fold is its blocks alone: 14 x 14 outputs by
    64 channels are 4 x 4 folds of 64 x 16, however the tiling cuts them.)"""
    quiet = {"engines.tiu.matrix.fill_drain": 0, "engines.tiu.matrix.drain_hidden": False}
    unit = chips.load("bm1686").engines["tiu"].matrix
    padded = _conv_folds(chips.load("bm1686", quiet), ic)
    unpadded = _conv_folds(chips.load("bm1686", {**quiet, "engines.tiu.matrix.conv_tap_channels.float16": 16}), ic)
    block = unit.block("float16", conv=True)
    assert unpadded == 4 * 4 * 9 * ic // unit.depth("float16") * block
    assert padded == 4 * 4 * 9 * max(ic, 32) // unit.depth("float16") * block


@pytest.mark.parametrize("K, kernel, dtype, padded", [
    (32 * 9, (3, 3), "int8", 9 * 64),  # 32 channels padded to 64 at each of 9 positions
    (96 * 9, (3, 3), "int8", 9 * 128),
    (3 * 36, (6, 6), "int8", 6 * 64),  # a stem's 3 channels x 6 rows folded into 18 channels, at 6 positions
    (3 * 9, (3, 3), "int8", 64),  # 3 x 3 x 3 fit in one position's 64
    (32, (1, 1), "float16", 32),
    (3 * 49, (7, 7), "float16", 7 * 32),
    (3 * 49, (7, 7), "float32", 3 * 49),  # float32 filters are not padded
])
def test_a_convolutions_depth_as_bm1684x_lays_its_filters_out(K, kernel, dtype, padded):
    """MatrixUnit.conv_depth: the channels padded at every kernel position, a small kernel's
    positions folded into them first where they fit (TPU-MLIR's use_3ic_optimize)."""
    assert chips.load("bm1686").engines["tiu"].matrix.conv_depth(K, kernel, dtype) == padded
