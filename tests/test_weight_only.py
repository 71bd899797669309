"""Weight-only quantization (W8A16, W4A16: isa/deploy/weight_only.py, isa/ops/weight_only.py): the
products take int8 or packed int4 weights dequantized on chip, and compute what the model with
the dequantized weights computes, within float16's precision."""

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

import chips
import isa
import sim
from isa.deploy import weight_only
from isa.ops.weight_only import MATRIX_MUL_A16, pack, unpack

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import llm

SMALL = llm.config("tinyllama-1.1b", layers=1, hidden=128, heads=4, kv_heads=2, mlp=256, vocab=50)


def dequantized(w, bits, group=weight_only.GROUP):
    """The weight the chip multiplies by: quantized per group of rows, dequantized in float16."""
    stored, scale, zero = weight_only.quantize_weight(w, bits, group)
    arrays = [np.zeros((1, w.shape[0]), np.float16), stored, scale.astype(np.float16)]
    arrays += [] if zero is None else [zero.astype(np.float16)]
    return MATRIX_MUL_A16.weights(arrays, {"bits": bits, "group": group}).astype(np.float32)


def reference_model(model, bits):
    """The model with each projection's weight replaced by its dequantized self."""
    for i, init in enumerate(model.graph.initializer):
        w = numpy_helper.to_array(init)
        if init.name.endswith("proj.weight"):
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(dequantized(w, bits).astype(w.dtype), init.name))
    return model


@pytest.mark.parametrize("scheme, bits", [("W8A16", 8), ("W4A16", 4)])
@pytest.mark.parametrize("chip, dtype", [("generic", "float16"), ("bm1686", "float32"), ("bm1686", "float16"), ("ascend910b", "float16")])
def test_a_decode_step_computes_the_dequantized_model(scheme, bits, chip, dtype):
    """float16 activations: each value rounds to 11 bits (2^-11 ~ 5e-4 relative) a few dozen times
    along the layer, so 2e-2 of values of order 1 bounds the error with room; the quantization
    itself is not in the error (the reference has the same dequantized weights). On bm1686 the
    model is compiled to float16 first: the norm's square root, the softmax and the sigmoid run in
    float32 between casts (its table has them in float32 only)."""
    model = llm.decoder_layer(SMALL, seq=1, past=6, dtype=dtype)
    g = isa.from_onnx(model, quantize=scheme, chip=chip)
    assert f"quantize W{bits}A16 on {chip}: 7 matrix_mul with {bits}-bit weights, group 128" in " ".join(g.notes)
    stored = [g.constants[n.inputs[1]] for n in g.nodes if n.op == "matrix_mul_a16"]
    assert {a.dtype.name for a in stored} == {"int8" if bits == 8 else "uint8"}
    rng = np.random.default_rng(1)
    feeds = {v.name: rng.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim]).astype(dtype) for v in model.graph.input}
    got = sim.run(g, chips.load(chip), feeds).outputs
    want = dict(zip([o.name for o in model.graph.output], ReferenceEvaluator(reference_model(model, bits)).run(None, feeds)))
    for name, value in want.items():
        np.testing.assert_allclose(got[name].astype(np.float64), value.astype(np.float64), rtol=2e-2, atol=2e-2, err_msg=name)


@settings(max_examples=20, deadline=None)
@given(st.sampled_from([8, 4]), st.integers(1, 3), st.sampled_from([32, 64]), st.integers(1, 3), st.sampled_from([16, 40]),
       st.integers(0, 2**31))
def test_the_product_on_chip_equals_its_definition(bits, m, group, groups, n, seed):
    """Random shapes and groups: the machine's unpacking and dequantization in local memory, then
    the float16 product, give the op's numpy definition exactly (both dequantize to float16 and
    accumulate in float32) up to the order of the float32 sums."""
    rng = np.random.default_rng(seed)
    k = group * groups
    w = rng.standard_normal((k, n)).astype(np.float32)
    stored, scale, zero = weight_only.quantize_weight(w, bits, group)
    g = isa.Graph("a16")
    x = g.input("x", (m, k), "float16")
    operands = [x, g.constant("w", stored), g.constant("s", scale.astype(np.float16))]
    operands += [] if zero is None else [g.constant("z", zero.astype(np.float16))]
    g.output(isa.ops.matrix_mul_a16(*operands, bits=bits, group=group, name="y"), "y")
    xv = rng.standard_normal((m, k)).astype(np.float16)
    got = sim.run(g, chips.load("bm1686"), inputs={"x": xv}).outputs["y"].astype(np.float64)
    want = MATRIX_MUL_A16.reference([xv] + [g.constants[t.name] for t in operands[1:]], g.nodes[0].params)[0].astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3 * np.abs(want).max())
    # the quantization's own error: half a step, plus the float16 rounding of the scale and of the result
    step = np.abs(w).max() / 127 if bits == 8 else 2 * np.abs(w).max() / 15
    assert np.abs(dequantized(w, bits, group) - w).max() <= 0.6 * step + 2**-10 * np.abs(w).max()


def test_int4_codes_pack_two_a_byte_and_stream_half_the_bytes():
    codes = np.random.default_rng(0).integers(0, 16, (256, 64)).astype(np.uint8)
    packed = pack(codes)
    assert packed.shape == (128, 64) and packed.dtype == np.uint8
    np.testing.assert_array_equal(unpack(packed), codes)
    w = np.random.default_rng(1).standard_normal((256, 256)).astype(np.float32)
    chip = chips.load("bm1686")
    moved = {}
    for bits in (8, 4):
        g = isa.Graph("a16")
        x = g.input("x", (1, 256), "float16")
        stored, scale, zero = weight_only.quantize_weight(w, bits, 128)
        extra = [] if zero is None else [g.constant("z", zero.astype(np.float16))]
        g.output(isa.ops.matrix_mul_a16(x, g.constant("w", stored), g.constant("s", scale.astype(np.float16)), *extra,
                                        bits=bits, group=128, name="y"), "y")
        result = sim.execute(isa.lower(g, chip), chip, mode="timing")
        moved[bits] = result.stats.ddr_read_bytes
    assert moved[8] >= 256 * 256 and moved[4] < 0.6 * moved[8], moved


def a16_gemv(w, bits):
    """A graph of one row times w quantized to `bits` (a decode step's projection), and its stored bytes."""
    g = isa.Graph("a16")
    x = g.input("x", (1, w.shape[0]), "float16")
    stored, scale, zero = weight_only.quantize_weight(w, bits, 128)
    terms = [scale] + ([] if zero is None else [zero])
    operands = [g.constant(f"t{i}", t.astype(np.float16)) for i, t in enumerate(terms)]
    g.output(isa.ops.matrix_mul_a16(x, g.constant("w", stored), *operands, bits=bits, group=128, name="y"), "y")
    return g, stored.nbytes + sum(t.size * 2 for t in terms)


@pytest.mark.parametrize("bits, within", [(8, 1.15), (4, 1.25)])
def test_a_gemv_multiplies_one_tile_while_the_next_one_loads(bits, within):
    """TinyLlama's MLP projection (2048 x 5632) for one token on bm1686, whose TIU both dequantizes
    and multiplies: each step's dequantization runs with its product, after the step before's, so
    the TIU multiplies step i while the DMA loads step i + 1, and the product is within `within`
    of its weights' bytes over the DDR bandwidth (1.22x and 1.42x with the dequantization among
    the loads, the TIU waiting for step i + 1's tile before multiplying step i)."""
    chip = chips.load("bm1686")
    g, nbytes = a16_gemv(np.random.default_rng(0).standard_normal((2048, 5632)).astype(np.float32), bits)
    program = isa.lower(g, chip)
    result = sim.execute(program, chip, mode="timing")
    floor = nbytes / chip.memories["ddr"].bandwidth
    assert result.cycles < within * floor, (result.cycles, floor)
    # the TIU's vector work between its products: one step's dequantization before the first product
    # (not two: step 2's is not before step 1's product), one (and a finished tile's copy out) between two
    kinds = "".join("m" if i.kind == "matrix" else "v" for i in program.streams["tiu"] if i.kind != "wait")
    runs = [len(r) for r in kinds.split("m")]
    assert len(runs) > 3 and 0 < runs[0] <= min(runs[1:-1]), runs


def test_bad_weight_only_operands_are_refused():
    g = isa.Graph("a16")
    x = g.input("x", (1, 96), "float16")
    with pytest.raises(isa.ShapeError, match=r"group 64 must divide K = 96"):
        isa.ops.matrix_mul_a16(x, g.constant("w", np.zeros((96, 8), np.int8)), g.constant("s", np.ones((1, 8), np.float16)), group=64)
    with pytest.raises(isa.UnsupportedError, match=r"4-bit weights are stored as uint8, got int8"):
        isa.ops.matrix_mul_a16(x, g.constant("w2", np.zeros((48, 8), np.int8)), g.constant("s2", np.ones((1, 8), np.float16)),
                               g.constant("z2", np.ones((1, 8), np.float16)), bits=4, group=96)
    with pytest.raises(isa.SimError, match=r"not a deployment precision; expected one of F16, BF16, INT8, W8A16, W4A16"):
        isa.deploy.precision("W3A16")
