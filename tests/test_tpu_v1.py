"""The TPU v1 (chips/tpu_v1.yaml) against docs/sources.md#google-tpu-v1: its memories, the routes
its five CISC instructions take through npusim's ISA, the matrix unit's weight-stationary count,
and a few int8 ops against their references, timing mode giving functional mode's cycles."""

import math

import numpy as np
import pytest
from refeval import evaluate

import chips
import isa
import sim
from isa.instructions import Matmul
from isa.lower.memory.route import route
from sim.run import configure
from traces.stored import from_data, to_data
from traces.summary import format_summary

CHIP = chips.load("tpu_v1")
O = isa.ops
MiB = 2**20


def test_memories_and_bandwidths():
    m = CHIP.memories
    assert {name: mem.capacity for name, mem in m.items()} == {"ddr": 8 * 2**30, "host": 256 * 2**30,
                                                               "ub": 24 * MiB, "acc": 4 * MiB, "wfifo": 4 * 64 * 1024}
    assert m["ddr"].bandwidth * CHIP.clock_hz == pytest.approx(34e9)  # the weight memory
    for direction in ("host_read", "host_write"):  # PCIe Gen3 x16, each way
        assert CHIP.engines[direction].bandwidth * CHIP.clock_hz == pytest.approx(14 * 2**30)
    assert m["host"].bandwidth == 2 * CHIP.engines["host_read"].bandwidth  # every host byte crosses it, either way
    assert CHIP.data_memory == "host"


def test_the_cisc_instructions_routes():
    assert route(CHIP, "host", "ub") == (("host_read", "host", "ub"),)  # Read_Host_Memory
    assert route(CHIP, "ddr", "wfifo") == (("weights", "ddr", "wfifo"),)  # Read_Weights
    mxu = CHIP.engines["mxu"]
    assert (mxu.operand_memory("a"), mxu.operand_memory("b"), mxu.operand_memory("c")) == ("ub", "wfifo", "acc")  # MatrixMultiply
    assert route(CHIP, "acc", "ub") == (("activate", "acc", "ub"),)  # Activate: the accumulators into the pipeline
    assert CHIP.engines["act"].memory == "ub"  # ... whose functions run on the unified buffer
    assert route(CHIP, "ub", "host") == (("host_write", "ub", "host"),)  # Write_Host_Memory


def run_both(graph, inputs):
    """The functional run's outputs (checked against the references) and cycles, which timing mode must give too."""
    res = sim.run(graph, CHIP, inputs)
    for name, want in evaluate(graph, inputs, CHIP).items():
        np.testing.assert_array_equal(res.outputs[name], want)
    assert sim.run(graph, CHIP, mode="timing").cycles == res.cycles
    return res


def ints(rng, shape, lo=-100, hi=100):
    return rng.integers(lo, hi, shape).astype(np.int8)


def test_a_matrix_product_streams_whole_weight_tiles_at_one_row_a_cycle():
    rng = np.random.default_rng(0)
    g = isa.Graph("fc")
    x = g.input("x", (300, 600), "int8")
    y = O.matrix_mul(x, g.constant("w", ints(rng, (600, 260), -5, 5)), scale=1 / 64)
    g.output(y, "y")
    res = run_both(g, {"x": ints(rng, (300, 600), -5, 5)})
    mxu = CHIP.engines["mxu"]
    products = [i for i in res.program.streams["mxu"] if isinstance(i, Matmul)]
    events = [e for e in res.trace.events if e.kind == "matrix"]
    assert len(products) == len(events) > 1
    for instr, event in zip(products, events):
        m, k, n = instr.dims()
        blocks = -(-m // 256) * -(-n // 256) * -(-k // 256)
        assert event.end - event.start == mxu.issue_latency + blocks * 256  # 256 cycles per 256 x 256 x 256 block
        assert event.ops == 2 * m * k * n


def test_convolution_pool_and_activation():
    rng = np.random.default_rng(1)
    g = isa.Graph("layer")
    x = g.input("x", (1, 16, 14, 14), "int8")
    y = O.conv(x, g.constant("w", ints(rng, (32, 16, 3, 3), -3, 3)), pad_h_t=1, pad_h_b=1, pad_w_l=1, pad_w_r=1, scale=1 / 16)
    y = O.pool(O.active(y, "relu"), kernel_h=2, kernel_w=2, stride_h=2, stride_w=2, pooling_type="MAX")
    g.output(y, "y")
    run_both(g, {"x": ints(rng, (1, 16, 14, 14), -10, 10)})


def conv_graph(seed, cin, cout, side, kernel=3, pad=0):
    """(graph, inputs) of one int8 convolution of a side x side image, `pad` on every side."""
    rng = np.random.default_rng(seed)
    g = isa.Graph("conv")
    x = g.input("x", (1, cin, side, side), "int8")
    w = g.constant("w", ints(rng, (cout, cin, kernel, kernel), -3, 3))
    g.output(O.conv(x, w, scale=1 / 16, pad_h_t=pad, pad_h_b=pad, pad_w_l=pad, pad_w_r=pad), "y")
    return g, {"x": ints(rng, (1, cin, side, side), -10, 10)}


def test_a_3x3_convolution_takes_input_channel_blocks_that_fill_the_arrays_256_weight_rows():
    """56 channels x 9 kernel positions are 504 of two passes' 512 weight rows; a power of two
    would leave the last pass partly empty (32 channels: 288 of 512, 64: 576 of 768)."""
    res = run_both(*conv_graph(2, 128, 256, 18))
    assert "56 input channels a step" in " ".join(res.program.notes)
    depths = [i.dims()[1] for i in res.program.streams["mxu"] if isinstance(i, Matmul)]
    assert sorted(set(depths)) == [16 * 9, 56 * 9] and depths.count(56 * 9) == 2 * depths.count(16 * 9)


def test_a_convolution_keeps_its_input_while_its_output_channel_blocks_walk():
    """768 output channels are six blocks of 128; the input crosses PCIe once, not once a
    block, in four loads of 28 channels, and the first products wait for the first load only."""
    res = run_both(*conv_graph(3, 112, 768, 18))
    assert "the input kept across output-channel blocks" in " ".join(res.program.notes)
    loads = [e for e in res.trace.events if e.kind == "dma" and e.engine == "host_read"]
    assert len(loads) == 112 // 28 and sum(e.bytes for e in loads) == 112 * 18 * 18
    products = sorted(e.start for e in res.trace.events if e.kind == "matrix")
    assert len(products) == 6 * 4 and products[0] < loads[-1].end


def test_the_estimate_of_a_kept_input_is_the_machines_cycles():
    """A kept block's load waits for the products that last read its part of the kept buffer,
    not for the step two back, so the next spatial tile's input crosses PCIe while this one's
    output-channel blocks walk: in the lowering's estimate as in the machine (the estimate was
    2.2% over before)."""
    g, _ = conv_graph(3, 112, 768, 26)
    res = sim.run(g, CHIP, mode="timing")
    note = " ".join(res.program.notes)
    assert "the input kept across output-channel blocks" in note and f"estimated {res.cycles:,} cycles" in note


@pytest.mark.parametrize("cin, cout, side, kernel, pad", [
    (136, 582, 14, 1, 0), (137, 558, 20, 3, 1), (63, 305, 6, 3, 1), (156, 240, 5, 3, 0), (94, 498, 9, 3, 0), (143, 462, 21, 3, 1)])
def test_kept_inputs_give_the_reference_values_and_equal_cycles(cin, cout, side, kernel, pad):
    """Odd channel counts (an edge input-channel block, an edge output-channel block), padding,
    several spatial tiles: output tiles of at most 128 channels, so the input is kept."""
    chip, policy = configure("tpu_v1", {"policy.max_tile": "c=128"})
    g, inputs = conv_graph(cin, cin, cout, side, kernel, pad)
    res = sim.run(g, chip, inputs, policy=policy)
    assert "the input kept across output-channel blocks" in " ".join(res.program.notes)
    for name, want in evaluate(g, inputs, chip).items():
        np.testing.assert_array_equal(res.outputs[name], want)
    assert sim.run(g, chip, mode="timing", policy=policy).cycles == res.cycles


@pytest.mark.parametrize("op", ["add", "sub", "mul", "max", "min"])
def test_element_wise_int8(op):
    rng = np.random.default_rng(2)
    g = isa.Graph(op)
    a, b = g.input("a", (2, 3, 20, 20), "int8"), g.input("b", (2, 3, 20, 20), "int8")
    g.output(getattr(O, op)(a, b), "y")
    run_both(g, {"a": ints(rng, (2, 3, 20, 20)), "b": ints(rng, (2, 3, 20, 20))})


@pytest.mark.parametrize("fn", ["sigmoid", "tanh"])
def test_activate_functions(fn):
    g = isa.Graph(fn)
    g.output(O.active(g.input("x", (4, 300), "int8"), fn), "y")
    run_both(g, {"x": ints(np.random.default_rng(3), (4, 300), -128, 127)})


def test_float32_is_not_supported():
    g = isa.Graph("f32")
    x = g.input("x", (4, 8), "float32")
    g.output(O.matrix_mul(x, g.constant("w", np.ones((8, 4), np.float32))), "y")
    with pytest.raises(sim.UnsupportedError, match="not supported on chip tpu_v1"):
        isa.lower(g, CHIP)


def test_activations_kept_in_the_unified_buffer_reach_the_mxu_through_the_systolic_data_setup():
    """A left operand already on chip (a pinned constant) is staged ub -> ub by `setup`: the
    run reads only the weights from DDR."""
    rng = np.random.default_rng(4)
    g = isa.Graph("resident")
    x = g.constant("x", ints(rng, (256, 512), -5, 5))
    g.output(O.matrix_mul(x, g.constant("w", ints(rng, (512, 256), -5, 5)), scale=1 / 64), "y")
    res = sim.run(g, CHIP, {}, policy=isa.Policy(pinned=("x",)))
    np.testing.assert_array_equal(res.outputs["y"], evaluate(g, {}, CHIP)["y"])
    staged = [e for e in res.trace.events if e.kind == "dma" and e.engine == "setup"]
    assert staged and all((e.src, e.dst) == ("ub", "ub") for e in staged)
    assert res.stats.ddr_read_bytes == 512 * 256


def test_the_graphs_data_crosses_pcie_from_the_host_and_the_weights_come_from_the_weight_memory():
    """Inputs and outputs live in the host's memory (`kind: host`): Read_Host_Memory and
    Write_Host_Memory move them at PCIe's 14 GiB/s; DDR, the weight memory, holds the weights
    alone, and its bytes are all Result.stats counts."""
    rng = np.random.default_rng(5)
    g = isa.Graph("fc")
    g.output(O.matrix_mul(g.input("x", (64, 512), "int8"), g.constant("w", ints(rng, (512, 256), -5, 5)), scale=1 / 64), "y")
    res = run_both(g, {"x": ints(rng, (64, 512), -5, 5)})
    assert {b.name: b.region.mem for b in res.program.bindings} == {"x": "host", "w": "ddr", "y": "host"}
    moved = {}
    for e in res.trace.events:
        if e.kind == "dma":
            moved[e.engine, e.src, e.dst] = moved.get((e.engine, e.src, e.dst), 0) + e.bytes
    assert moved[("host_read", "host", "ub")] == 64 * 512 and moved[("host_write", "ub", "host")] == 64 * 256
    assert moved[("weights", "ddr", "wfifo")] == 512 * 256
    assert (res.stats.ddr_read_bytes, res.stats.ddr_write_bytes) == (512 * 256, 0)
    assert (res.stats.host_read_bytes, res.stats.host_write_bytes) == (64 * 512, 64 * 256)
    assert "host: read 32.0 KiB, write 16.0 KiB" in format_summary(res.stats).splitlines()
    assert from_data(to_data(res.trace)).host_memory == "host"  # a saved trace keeps it
    # a host transfer alone: its engine's latency, then its bytes at the link's rate
    load = next(e for e in res.trace.events if (e.engine, e.src) == ("host_read", "host"))
    host = CHIP.engines["host_read"]
    assert load.end - load.start == host.latency + math.ceil(load.bytes / host.bandwidth)


def two_layers(rng):
    """(graph, inputs): two int8 fully connected layers with a ReLU between them."""
    g = isa.Graph("mlp2")
    h = O.active(O.matrix_mul(g.input("x", (64, 512), "int8"), g.constant("w1", ints(rng, (512, 512), -5, 5)), scale=1 / 64), "relu")
    g.output(O.matrix_mul(h, g.constant("w2", ints(rng, (512, 256), -5, 5)), scale=1 / 64), "y")
    return g, {"x": ints(rng, (64, 512), -5, 5)}


def test_a_layers_activations_stay_in_the_unified_buffer_for_the_next():
    """By default the tensors passed between layer groups stay in the UB (the chip's data memory
    is the host's): PCIe carries the graph's input and output only, 64 x 512 in and 64 x 256 out.
    With policy.intermediates=ddr each of the two 64 x 512 tensors between groups crosses it
    both ways, and the run takes longer by more than their bytes' time on the link one way."""
    g, inputs = two_layers(np.random.default_rng(6))
    kept = run_both(g, inputs)
    assert (kept.stats.host_read_bytes, kept.stats.host_write_bytes) == (64 * 512, 64 * 256)
    host = sim.run(g, CHIP, inputs, policy=isa.Policy(intermediates="ddr"))
    np.testing.assert_array_equal(host.outputs["y"], kept.outputs["y"])
    between = 2 * 64 * 512  # the product before the ReLU and the ReLU's output
    assert (host.stats.host_read_bytes, host.stats.host_write_bytes) == (64 * 512 + between, 64 * 256 + between)
    assert host.cycles - kept.cycles > between / CHIP.engines["host_write"].bandwidth


@pytest.mark.parametrize("key, value, message", [
    ("memories.weights2", "{kind: host, size: 1GiB, bandwidth: 8}", r"one memory is the host's, and host already is"),
    ("memories.host.shared", "true", r"a host memory is one memory every core shares"),
    ("memories.host.kind", "hostess", r"hostess"),
])
def test_bad_host_memories_are_config_errors(key, value, message):
    with pytest.raises(sim.ConfigError, match=message):
        chips.load("tpu_v1", {key: value})


def test_a_mode_that_computes_in_float32_is_refused_by_its_op():
    """A depthwise int8 convolution in HighPrecisionAsymmetric computes its epilogue in float32,
    which the TPU v1's vector unit lacks: an error naming the op, the function, the dtype and
    the chip, not a missing key deep in the pricing."""
    g = isa.Graph("dw")
    with g:
        x = g.input("x", (1, 8, 8, 8), "int8")
        w = g.constant("w", np.ones((8, 1, 3, 3), np.int8))
        g.output(O.conv(x, w, groups=8, pad_h_t=1, pad_h_b=1, pad_w_l=1, pad_w_r=1, scale=1 / 16,
                        mode="HighPrecisionAsymmetric"), "y")
    with pytest.raises(isa.UnsupportedError, match=r"op conv_0: its mul in float32 is not supported on chip tpu_v1 "
                                                   r"\(the vector unit of engine act computes in int8, uint8, int16"):
        isa.lower(g, chips.load("tpu_v1"))
