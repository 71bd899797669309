"""Deployment precisions (isa/deploy/, `npusim run --quantize`): a float32 model compiled in FP16,
BF16 and INT8 computes close to the float model on the machine, INT8 runs faster where the chip's
int8 products are faster, the chip's table decides what falls back to float32, and every refusal
is a SimError naming what is wrong."""

import functools
import math
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from refeval import evaluate

import chips
import isa
import sim
from isa.deploy import Table, int8, read_table
from isa.lower.schedule.fusion import groups
from sim.cli import main

ROOT = Path(__file__).resolve().parents[1]


def cnn(width=8, size=16, classes=10, silu=False, residual=False, seed=0):
    """conv 3x3 + activation, 2x2 max pool, conv 3x3 + activation (a 1x1 conv and a residual add),
    global average pool, fully connected: a float32 ONNX model, seeded He-normal weights."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array, np.float32), name))
        return name

    def conv(x, name, oc, ic, k):
        w = const(f"{name}_w", rng.standard_normal((oc, ic, k, k)) * math.sqrt(2 / (ic * k * k)))
        b = const(f"{name}_b", rng.standard_normal(oc) * 0.1)
        nodes.append(helper.make_node("Conv", [x, w, b], [name], pads=[k // 2] * 4))
        return name

    def act(x, name):
        if silu:
            nodes.append(helper.make_node("Sigmoid", [x], [f"{name}_sig"]))
            nodes.append(helper.make_node("Mul", [x, f"{name}_sig"], [name]))
        else:
            nodes.append(helper.make_node("Relu", [x], [name]))
        return name

    y = act(conv("x", "c1", width, 3, 3), "a1")
    nodes.append(helper.make_node("MaxPool", [y], ["p1"], kernel_shape=[2, 2], strides=[2, 2]))
    y = act(conv("p1", "c2", 2 * width, width, 3), "a2")
    if residual:
        nodes.append(helper.make_node("Add", [conv(y, "c3", 2 * width, 2 * width, 1), y], ["r3"]))
        y = act("r3", "a3")
    nodes.append(helper.make_node("GlobalAveragePool", [y], ["g"]))
    nodes.append(helper.make_node("Flatten", ["g"], ["f"]))
    wf = const("fc_w", rng.standard_normal((2 * width, classes)) * math.sqrt(1 / (2 * width)))
    nodes.append(helper.make_node("Gemm", ["f", wf, const("fc_b", rng.standard_normal(classes) * 0.1)], ["y"]))
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, size, size))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, classes))], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def image(seed=100, size=16):
    return np.random.default_rng(seed).standard_normal((1, 3, size, size)).astype(np.float32)


def reference(model, x, chip="generic"):
    """The float32 model's output, computed by the machine on `chip` (on another chip, other
    reduction blocks may round a float32 sum differently in its last bit)."""
    return sim.run(isa.from_onnx(model), chips.load(chip), inputs={"x": x}).outputs["y"]


def deployed(model, chip, precision, x, calibration=None):
    g = isa.from_onnx(model, quantize=precision, chip=chip, calibration=calibration)
    return g, sim.run(g, chips.load(chip), inputs={"x": x}).outputs["y"]


def cosine(a, b):
    return float((a * b).sum() / np.linalg.norm(a) / np.linalg.norm(b))


def note(g):
    (line,) = [n for n in g.notes if n.startswith("quantize ")]
    return line


# ---- FP16 and BF16 ----------------------------------------------------------------------------

# float16 rounds to 11 significant bits (unit roundoff 2^-11 ~ 4.9e-4): the input, every weight and
# every layer's result are rounded once, about ten roundings on any path of this network, so its
# error stays within ~10 unit roundoffs of the output's magnitude: 5e-3. bfloat16 keeps 8 bits
# (unit roundoff 2^-8 ~ 3.9e-3): 4e-2 by the same count.
TOLERANCE = {"float16": 5e-3, "bfloat16": 4e-2}


@pytest.mark.parametrize("chip, precision", [("bm1686", "F16"), ("generic", "F16"), ("generic", "BF16")])
def test_float_precisions_compute_the_float_model_within_their_rounding(chip, precision):
    model, x = cnn(), image()
    want = reference(model, x)
    g, got = deployed(model, chip, precision, x)
    dtype = isa.deploy.precision(precision)
    assert got.dtype == np.float32 and got.shape == want.shape
    error = np.abs(got - want).max() / np.abs(want).max()
    assert 0 < error <= TOLERANCE[dtype]  # not float32 (0 error), within the dtype's rounding
    assert f"8 op(s) in {dtype}, 0 in float32" in note(g)
    products = [n for n in g.nodes if n.op in ("conv", "matrix_mul")]
    assert {g.tensors[n.inputs[1]].dtype for n in products} == {dtype}  # the weights converted when built


def test_float16_falls_back_to_float32_where_the_chip_table_has_no_float16():
    """BM1684X's table gives sigmoid in float32 only: SiLU's sigmoid runs in float32 between casts."""
    model, x = cnn(silu=True), image()
    g, got = deployed(model, "bm1686", "F16", x)
    assert "2 in float32 (the chip's table has no float16 for them: active.sigmoid x2)" in note(g)
    sigmoids = [n for n in g.nodes if n.op == "active"]
    assert [g.tensors[n.inputs[0]].dtype for n in sigmoids] == ["float32", "float32"]
    assert all(g.producer[n.inputs[0]].op == "cast" for n in sigmoids)
    want = reference(model, x)
    assert np.abs(got - want).max() / np.abs(want).max() <= TOLERANCE["float16"]
    with pytest.raises(isa.UnsupportedError, match=r"active.sigmoid with float16 -> float16 is not supported on chip bm1686"):
        isa.lower(_float16_by_hand(), chips.load("bm1686"))


def _float16_by_hand():
    """A graph built op by op in float16 still gets the table's refusal: no fallback outside isa.quantize."""
    g = isa.Graph("by_hand")
    x = g.input("x", (1, 8, 4, 4), "float16")
    g.output(isa.ops.active(x, "sigmoid"), "y")
    return g


def test_float16_on_a_chip_without_float16_is_the_float32_model():
    model, x = cnn(), image()
    g, got = deployed(model, "bm1684", "F16", x)
    assert "0 op(s) in float16, 8 in float32" in note(g)
    np.testing.assert_array_equal(got, reference(model, x, "bm1684"))


# ---- INT8 ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("chip", ["bm1684", "bm1686"])
@pytest.mark.parametrize("silu, residual", [(False, False), (True, True)])
def test_int8_computes_the_float_model_within_its_quantization(chip, silu, residual):
    """Calibrated on 8 random images, run on another: TPU-MLIR's model_deploy checks int8 against
    float by cosine similarity; an output element may be off by a few of the output's steps
    (threshold / 127): the input, each convolution's result and each lookup table round to half a
    step of their own scale, and each channel's weight scale is widened so that its requantization
    is exact (a few levels lost; on bm1684, which has no per-channel requantization, one scale a
    product, as TPU-MLIR lowers its convolutions). 10% of the output's threshold (12.7 steps) bounds it with room; a float16 or float32
    model is far closer, an int8 model with a wrong scale or sign far off."""
    model, x = cnn(silu=silu, residual=residual), image()
    floating = isa.from_onnx(model)
    table = isa.deploy.measure(floating, isa.deploy.random_samples(floating, 8))
    g, got = deployed(model, chip, "INT8", x, calibration=table)
    want = reference(model, x)
    assert cosine(got, want) > 0.99
    assert np.abs(got - want).max() <= 0.1 * table.threshold("y")
    assert np.abs(got - want).max() > 0  # int8, not float
    line = note(g)
    if silu:
        assert "chain(s) as lut" in line and "active" not in {n.op for n in g.nodes}
    kinds = {n.op for n in g.nodes}
    conv = next(n for n in g.nodes if n.op == "conv")
    assert "cast" in kinds  # quantized at the input, dequantized at the output
    if chip == "bm1684":  # no per-channel requantization: one scale a product, its int8 result shifted (OnlyShift)
        assert "2 conv in int8," in line or "3 conv in int8," in line
        assert "per channel" not in line and "mul_shift" not in kinds
        assert g.tensors[conv.outputs[0]].dtype == "int8" and conv.params["mode"] == "LowPrecisionSymmetric"
        return
    assert "2 conv in int8 per channel" in line or "3 conv in int8 per channel" in line
    assert "1 matrix_mul in int8 per channel" in line
    assert g.tensors[conv.outputs[0]].dtype == "int16" and conv.params["mode"] == "HighPrecisionSymmetric"
    (requant,) = g.consumers(conv.outputs[0])
    assert requant.op == "mul_shift" and g.tensors[requant.outputs[0]].dtype == "int8"


def test_int8_weight_scales_are_per_channel_and_their_requantization_is_exact():
    """Each output channel's weight takes its own scale (its largest |w| near 127 levels when
    channels differ by up to 8x), the product goes to int16 at 2^-r and one mul_shift by the
    channels' int8 multipliers makes the int8 result in the convolution's layer group: the
    deployed weights times their scales give the float weights within half a step of each channel."""
    model = cnn()
    w = numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == "c2_w"))
    w = w * np.linspace(1, 6, w.shape[0], dtype=np.float32).reshape(-1, 1, 1, 1)  # channels of different ranges
    model.graph.initializer.remove(next(i for i in model.graph.initializer if i.name == "c2_w"))
    model.graph.initializer.append(numpy_helper.from_array(w, "c2_w"))
    s_x = s_y = 4.0 / 127
    g = isa.from_onnx(model, quantize="INT8", chip="bm1686", calibration=Table(default=4.0))
    conv = next(n for n in g.nodes if n.name == "c2/int16")
    (requant,) = g.consumers(conv.outputs[0])
    q = g.constants[conv.inputs[1]].astype(np.float64)
    m = g.constants[requant.inputs[1]].astype(np.float64).reshape(-1)
    s_w = m / 2.0 ** requant.params["shift"] * s_y / (s_x * conv.params["scale"])
    assert np.all(np.abs(q * s_w.reshape(-1, 1, 1, 1) - w).max(axis=(1, 2, 3)) <= s_w / 2 * (1 + 1e-6))
    assert np.all(np.abs(q).max(axis=(1, 2, 3)) >= 100)  # each channel keeps most of its 127 levels
    assert s_w.max() / s_w.min() > 4  # one scale a channel, not one for all
    (group,) = [grp for grp in groups(g, chips.load("bm1686"), isa.Policy()) if conv in grp.nodes]
    assert requant in group.nodes and conv.outputs[0] not in group.stores  # the int16 result stays on chip


def test_int8_per_channel_requantization_adds_one_vector_instruction_a_tile_and_keeps_exact_values():
    """BM1684X's convolution instruction requantizes per channel itself (TPU-Kernel's
    tpu_bdc_conv2d_requant_pc), so the per-channel way must cost about what the per-tensor shift
    costs: the product's finish into int16 at 2^-r is its bias add and one shift (no float32
    multiply by 1 and rounding), the requantization one `mul_rshift` (no int32 scratch), and a
    residual add of two int8 tensors at one scale one `add`. The machine's values equal the ops'
    references, bit for bit."""
    chip = chips.load("bm1686")
    g = isa.from_onnx(cnn(residual=True), quantize="INT8", chip="bm1686", calibration=Table(default=4.0))
    program = isa.lower(g, chip)
    vectors, products = {}, {}
    for instr in program.streams["tiu"]:
        if instr.kind == "vector":
            vectors.setdefault(instr.op, []).append((instr.fn, instr.cdt, instr.dst.dtype))
        elif instr.kind == "matrix":
            products[instr.op] = products.get(instr.op, 0) + 1
    for product in ("c1", "c2", "c3", "y"):  # the convolutions and the fully connected layer
        tiles = products[f"{product}/int16"]
        finish = [v for v in vectors[f"{product}/int16"] if v[0] != "copy"]  # not the input's staging copies
        assert finish == [("add", "int64", "int32"), ("rshift", "int64", "int16")] * tiles, product
        assert vectors[product] == [("mul_rshift", "int64", "int8")] * tiles, product
    (add,) = [n for n in g.nodes if n.op == "add_shift"]
    assert add.params["shift"] == 0 and vectors[add.name] == [("add", "int64", "int8")]
    feeds = {g.inputs[0]: image()}
    got = sim.execute(program, chip, feeds).outputs
    for name, want in evaluate(g, feeds, chip).items():
        np.testing.assert_array_equal(got[name], want, err_msg=name)


def onnx_models():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import onnx_models
    finally:
        del sys.path[0]
    return onnx_models


def test_int8_products_read_an_int8_input_at_the_scale_it_has():
    """A residual block's result is int8 at its add's scale (a power of two times the smaller
    operand's, not its own threshold's); the next block's convolutions and the classifier read it
    as it is, their requantization taking its scale in, instead of a `muls_shift` to the
    threshold's scale (an op outside every layer group: a DDR round trip of the activations).
    Calibrated on random inputs, the values equal the ops' references and the float model's
    within a cosine of 0.99."""
    model = onnx_models().resnet50(size=32, width=0.125)
    floating = isa.from_onnx(model)
    table = isa.deploy.measure(floating, isa.deploy.random_samples(floating, 2))
    g = isa.from_onnx(model, quantize="INT8", chip="bm1686", calibration=table)
    products = [n for n in g.nodes if n.op in ("conv", "matrix_mul")]
    assert len(products) == 54
    assert [n.name for n in products if g.producer[n.inputs[0]].op == "muls_shift"] == []
    assert not any(n.op == "muls_shift" and n.params["shift"] > 0 for n in g.nodes)  # no requantization anywhere
    x = np.random.default_rng(7).standard_normal((1, 3, 32, 32)).astype(np.float32)
    chip = chips.load("bm1686")
    feeds = {g.inputs[0]: x}
    got = sim.execute(isa.lower(g, chip), chip, feeds).outputs
    for name, want in evaluate(g, feeds, chip).items():
        np.testing.assert_array_equal(got[name], want, err_msg=name)
    want = sim.run(floating, chips.load("generic"), inputs={"input": x}).outputs
    (name,) = got
    assert cosine(got[name].reshape(-1), want[name].reshape(-1)) > 0.99


def test_int8_residual_add_needs_no_op_outside_the_producers_layer_group():
    """The convolution before a residual add takes a scale 2^j times the shortcut's, so the add is
    one add_shift of the two (and a muls_shift of the convolution's result when j > 0)."""
    g = isa.from_onnx(cnn(residual=True), quantize="INT8", chip="bm1684", calibration=Table(default=4.0))
    add = next(n for n in g.nodes if n.op == "add_shift")
    shortcut = [i for i in add.inputs if g.producer[i].op != "muls_shift" and g.producer[i].name != "c3"]
    assert [g.producer[i].op for i in shortcut] == ["active"]  # the relu's int8 result, read as it is


def test_int8_is_faster_than_float32_on_bm1684_for_a_conv_network():
    """BM1684's matrix unit does four int8 products in the time of one float32 product (its
    YAML); with 64 and 128 channels on 64 x 64 images the convolutions dominate. Not four times
    faster: each output block also pays the fitted fill and drain (bench/fit.py), the same in
    both dtypes, and int8 products are padded to four batch items (batch_slots)."""
    model = cnn(width=64, size=64)
    chip = chips.load("bm1684")
    f32 = sim.execute(isa.lower(isa.from_onnx(model), chip), chip, mode="timing").cycles
    g = isa.from_onnx(model, quantize="INT8", chip="bm1684", calibration=Table(default=4.0))
    i8 = sim.execute(isa.lower(g, chip), chip, mode="timing").cycles
    assert i8 < 0.75 * f32, (i8, f32)


@functools.cache
def resnet50_calibration():
    """bench/deploy.py's: ResNet-50's thresholds on two random 32 x 32 inputs."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import deploy
    finally:
        del sys.path[0]
    return deploy.small_calibration(onnx_models().resnet50, 2)


@functools.cache
def resnet50_by_hand_cycles(chip_name):
    """bench/resnet50.py's INT8 graph built op by op, in timing mode."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import resnet50
    finally:
        del sys.path[0]
    chip = chips.load(chip_name)
    return sim.execute(isa.lower(resnet50.resnet50("int8"), chip), chip, mode="timing").cycles


@pytest.mark.parametrize("chip_name", ["bm1684", "bm1686"])
@pytest.mark.parametrize("calibrated", [False, True])
def test_int8_resnet50_from_onnx_costs_what_the_hand_built_int8_graph_costs(chip_name, calibrated):
    """The issue's measure: ResNet-50 written as ONNX (examples/onnx_models.py) and deployed in
    INT8, with every threshold 4 or calibrated on random inputs, against bench/resnet50.py's INT8
    graph built op by op: within 5%."""
    chip = chips.load(chip_name)
    table = resnet50_calibration() if calibrated else Table(default=4.0)
    g = isa.from_onnx(onnx_models().resnet50(), quantize="INT8", chip=chip_name, calibration=table)
    ours = sim.execute(isa.lower(g, chip), chip, mode="timing").cycles
    hand = resnet50_by_hand_cycles(chip_name)
    assert abs(ours / hand - 1) <= 0.05, (ours, hand)


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=1e-6, max_value=127.0))
def test_multiplier_approximates_the_ratio_within_half_a_unit_of_its_last_bit(ratio):
    m, r = int8.multiplier(ratio, 127)
    assert 1 <= m <= 127 and 0 <= r <= 31
    assert abs(m / 2**r - ratio) <= 0.5 / 2**r + 1e-12
    if r < 31:
        assert m >= 64  # as many bits as 127 allows


# ---- calibration ---------------------------------------------------------------------------------

def test_calibration_table_is_tpu_mlir_format_and_round_trips(tmp_path):
    model = cnn()
    floating = isa.from_onnx(model)
    samples = isa.deploy.random_samples(floating, 2)
    table = isa.deploy.measure(floating, samples)
    outputs = [sim.run(floating, chips.load("generic"), inputs=s).outputs["y"] for s in samples]
    low, high = min(float(o.min()) for o in outputs), max(float(o.max()) for o in outputs)
    assert table.ranges["y"] == pytest.approx((max(-low, high), low, high))
    assert set(table.ranges) >= {"x", "c1", "a1", "p1", "c2", "a2", "g", "y"}
    path = tmp_path / "cali_table"
    table.write(path)
    text = path.read_text() + "#int4_th\nc1 9 -9 9\n"  # TPU-MLIR's INT4 section: ignored
    path.write_text(text)
    again = read_table(path)
    assert again.ranges.keys() == table.ranges.keys()
    for name, (t, lo, hi) in table.ranges.items():
        assert again.ranges[name] == pytest.approx((t, lo, hi), rel=1e-6)
    x = image()
    _, a = deployed(model, "bm1684", "INT8", x, calibration=table)
    _, b = deployed(model, "bm1684", "INT8", x, calibration=str(path))
    np.testing.assert_array_equal(a, b)


def test_calibration_from_samples_by_the_models_input_names():
    model, x = cnn(), image()
    samples = [{"x": image(seed)} for seed in range(3)]
    _, got = deployed(model, "bm1686", "INT8", x, calibration=samples)
    assert cosine(got, reference(model, x)) > 0.99


# ---- refusals ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, error, match", [
    ({"quantize": "INT4", "chip": "bm1684"}, isa.ConfigError, ("quantize 'INT4': not a deployment "
                                                              "precision; expected one of F16, BF16, INT8")),
    ({"quantize": "INT8"}, isa.ConfigError, r"quantize='INT8'\) needs chip="),
    ({"calibration": 4}, isa.ConfigError, "calibration= and chip= go with quantize="),
    ({"quantize": "INT8", "chip": "bm1684"}, isa.ConfigError, "INT8 needs a calibration: a table file"),
    ({"quantize": "INT8", "chip": "bm1684", "calibration": 0}, isa.ConfigError, "calibration=0: a count of random samples must be"),
    ({"quantize": "F16", "chip": "bm1686", "calibration": 4}, isa.ConfigError, "quantize float16: a calibration is for INT8 only"),
    ({"quantize": "INT8", "chip": "bm1684", "calibration": [{"image": np.zeros((1, 3, 16, 16), np.float32)}]}, isa.InputError,
     "calibration sample 0: 'image' is not a run input of the model"),
    ({"quantize": "INT8", "chip": "bm1684", "calibration": Table({"x": (1.0, -1.0, 1.0)}, where="t.txt")}, isa.ConfigError,
     "t.txt: no threshold for tensor 'a1'"),
])
def test_refusals_name_what_is_wrong(kwargs, error, match):
    with pytest.raises(error, match=match):
        isa.from_onnx(cnn(), **kwargs)


@pytest.mark.parametrize("text, match", [
    ("x 1 -1\n", "line 1: expected `name threshold min max`, got 'x 1 -1'"),
    ("# only a comment\n", "lists no tensor"),
    ("x 0 -1 1\n", "line 1: tensor 'x': the threshold must be positive and finite"),
    ("x nan -1 1\n", "line 1: tensor 'x': the threshold must be positive and finite"),
    ("x one -1 1\n", "line 1: expected `name threshold min max`"),
])
def test_bad_calibration_tables_are_config_errors_naming_file_and_line(tmp_path, text, match):
    path = tmp_path / "table.txt"
    path.write_text(text)
    with pytest.raises(isa.ConfigError, match=match) as info:
        read_table(path)
    assert str(path) in str(info.value)


# ---- the command line -------------------------------------------------------------------------------------

def test_cli_runs_a_model_deployed_in_int8_and_float16(tmp_path, capsys):
    model_path = tmp_path / "cnn.onnx"
    onnx.save(cnn(silu=True), model_path)
    assert main(["run", str(model_path), "--chip", "bm1686", "--quantize", "INT8", "--outputs", str(tmp_path / "y.npz")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("int8 on bm1686 deployment: 2 conv in int8")
    y8 = np.load(tmp_path / "y.npz")["y"]
    assert main(["run", str(model_path), "--chip", "bm1686", "--quantize", "f16", "--mode", "timing"]) == 0
    assert "float16 on bm1686 deployment: " in capsys.readouterr().out
    table = tmp_path / "cnn.cali"
    floating = isa.from_onnx(cnn(silu=True))
    isa.deploy.measure(floating, isa.deploy.random_samples(floating, 1)).write(table)
    assert main(["run", str(model_path), "--chip", "bm1686", "--quantize", "INT8", "--calibration", str(table),
                 "--outputs", str(tmp_path / "y2.npz")]) == 0
    capsys.readouterr()
    assert np.load(tmp_path / "y2.npz")["y"].shape == y8.shape


def test_a_functional_deployed_run_prints_its_error_against_the_float_model(tmp_path, capsys):
    """The cosine similarity and largest error it prints are those of the deployed outputs it
    writes against the float model's outputs on the same inputs."""
    model_path, inputs = tmp_path / "cnn.onnx", tmp_path / "x.npz"
    onnx.save(cnn(silu=True), model_path)
    floating = isa.from_onnx(cnn(silu=True))
    (name,) = floating.onnx_inputs
    np.savez(inputs, **{name: np.random.default_rng(5).standard_normal(floating.tensors[floating.inputs[0]].shape).astype(np.float32)})
    assert main(["run", str(model_path), "--chip", "bm1686", "--quantize", "INT8", "--inputs", str(inputs),
                 "--outputs", str(tmp_path / "y.npz")]) == 0
    out = capsys.readouterr().out
    got = np.load(tmp_path / "y.npz")["y"]
    want = sim.run(floating, "generic", {name: np.load(inputs)[name]}).outputs["y"]
    cosine, error = isa.deploy.similarity(got, want)
    assert 0.9 < cosine < 1 and error > 0
    assert f"y: cosine similarity {cosine:.6f}, max abs error {error:.4g} against the float model" in out
    assert isa.deploy.similarity(want, want) == (pytest.approx(1.0), 0.0)
    assert isa.deploy.similarity(np.zeros(3), np.zeros(3)) == (1.0, 0.0)


@pytest.mark.parametrize("argv, match", [
    (["--quantize", "int4"], "ConfigError: quantize 'int4': not a deployment precision"),
    (["--quantize", "F16", "--calibration", "t.txt"], "ConfigError: --calibration t.txt: a calibration is for --quantize INT8 only"),
    (["--quantize", "INT8", "--calibration", "missing.txt"], "ConfigError: missing.txt: cannot read the calibration table"),
])
def test_cli_refusals_are_one_line(tmp_path, capsys, argv, match):
    model_path = tmp_path / "cnn.onnx"
    onnx.save(cnn(), model_path)
    assert main(["run", str(model_path), "--chip", "bm1684", *argv]) == 1
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1


def test_a_float32_model_the_chip_refuses_names_the_deployments_that_may_run_it(tmp_path, capsys):
    """The 910B's cube has no float32 rate: run without --quantize says how to deploy it; with
    --quantize F16 it runs; lower, which deploys nothing, keeps the bare refusal."""
    model_path = tmp_path / "cnn.onnx"
    onnx.save(cnn(), model_path)
    assert main(["run", str(model_path), "--chip", "ascend910b", "--mode", "timing"]) == 1
    err = capsys.readouterr().err
    assert "float32 x float32 -> float32 is not supported on chip ascend910b" in err and "; --quantize F16, BF16 or INT8" in err
    assert main(["run", str(model_path), "--chip", "ascend910b", "--mode", "timing", "--quantize", "F16"]) == 0
    capsys.readouterr()
    assert main(["lower", str(model_path), "--chip", "ascend910b", "-o", str(tmp_path / "p.txt")]) == 1
    err = capsys.readouterr().err
    assert "is not supported on chip ascend910b" in err and "--quantize" not in err


def test_a_model_with_a_dynamic_batch_is_deployed_when_the_feeds_fix_it():
    model = cnn()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "N"
    x = np.random.default_rng(7).standard_normal((2, 3, 16, 16)).astype(np.float32)
    g = isa.from_onnx(model, quantize="F16", chip="bm1686")
    assert g.missing  # built by the first run, for its feeds
    got = sim.run(g, chips.load("bm1686"), inputs={"x": x}).outputs["y"]
    want = sim.run(isa.from_onnx(model), chips.load("generic"), inputs={"x": x}).outputs["y"]
    assert got.shape == (2, 10)
    assert np.abs(got - want).max() / np.abs(want).max() <= TOLERANCE["float16"]
    assert "8 op(s) in float16" in note(g.specialise({"x": x}).graph)


def test_int8_on_a_chip_without_int8_products_is_the_float32_model_and_adds_nothing():
    """BM1682's table has no int8 convolution, product, lookup table or shifted add: every node stays
    float32, and no quantization is left dangling for an op that then refused it."""
    model, x = cnn(silu=True, residual=True), image()
    g = isa.from_onnx(model, quantize="INT8", chip="bm1682", calibration=Table(default=4.0))
    assert "17 in float32; 0 cast(s) added" in note(g)
    assert len(g.nodes) == len(isa.from_onnx(model).nodes)
    np.testing.assert_array_equal(sim.run(g, chips.load("bm1682"), inputs={"x": x}).outputs["y"], reference(model, x, "bm1682"))
