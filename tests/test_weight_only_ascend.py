"""Weight-only quantization on the Ascend 910B (isa/lower/templates/matmul.py, chips/ascend910b.yaml):
as CANN's WeightQuantBatchMatmulV2 runs on A2, each core's vector core loads the int8 or packed
int4 weight tile into its UB and dequantizes it there, and the float16 tile goes UB -> L2 -> L1 ->
L0B to the cube. The products compute what the dequantized model computes (a decode step's values:
tests/test_weight_only.py, which takes the 910B among its chips), and a decode step's projection
reads the stored bytes from HBM, not float16 ones."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_weight_only import a16_gemv

import chips
import isa
import sim
from isa.deploy import weight_only
from isa.ops.weight_only import MATRIX_MUL_A16

CHIP = chips.load("ascend910b")


@settings(max_examples=10, deadline=None)
@given(st.sampled_from([8, 4]), st.integers(1, 4), st.sampled_from([32, 128]), st.integers(1, 3), st.sampled_from([16, 72]),
       st.integers(0, 2**31))
def test_the_product_on_the_910b_equals_its_definition(bits, m, group, groups, n, seed):
    """Random shapes and groups: unpacked and dequantized on the vector core, moved to L0B,
    multiplied on the cube: the op's numpy definition up to the order of the float32 sums."""
    rng = np.random.default_rng(seed)
    k = group * groups
    stored, scale, zero = weight_only.quantize_weight(rng.standard_normal((k, n)).astype(np.float32), bits, group)
    g = isa.Graph("a16")
    operands = [g.input("x", (m, k), "float16"), g.constant("w", stored), g.constant("s", scale.astype(np.float16))]
    operands += [] if zero is None else [g.constant("z", zero.astype(np.float16))]
    g.output(isa.ops.matrix_mul_a16(*operands, bits=bits, group=group, name="y"), "y")
    program = isa.lower(g, CHIP)
    xv = rng.standard_normal((m, k)).astype(np.float16)
    got = sim.execute(program, CHIP, inputs={"x": xv}).outputs["y"].astype(np.float64)
    want = MATRIX_MUL_A16.reference([xv] + [g.constants[t.name] for t in operands[1:]], g.nodes[0].params)[0].astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3 * np.abs(want).max())
    # the dequantized tile reaches the cube's L0B from the vector core's UB through the L2 and L1
    hops = {(i.src.mem.split(".")[-1], i.dst.mem.split(".")[-1]) for s in program.streams.values() for i in s if i.kind == "dma"}
    assert {("ub0", "l2"), ("l2", "l1"), ("l1", "l0b")} <= hops and ("ddr", "l1") in hops, hops


def floors(k, n, nbytes):
    """Lower bounds (cycles) of a decode projection on the 910B: the stored bytes over HBM's
    bandwidth; the float16 tiles over the vector cores' MTE3s (UB -> L2), two per cube core; the
    tiles written to and read from the L2 over its bandwidth."""
    half = k * n * 2
    mte3 = sum(e.bandwidth for e in CHIP.engines.values() if any(a.endswith(("ub0", "ub1")) for a, _ in e.links))
    return {"hbm": nbytes / CHIP.memories["ddr"].bandwidth, "mte3": half / mte3, "l2": 2 * half / CHIP.memories["l2"].bandwidth}


def test_a_decode_projection_streams_the_stored_bytes():
    """TinyLlama's MLP projection (2048 x 5632) for one token: float16 weights are HBM-bound; int8
    and int4 ones read half and a quarter of those bytes from HBM, and the float16 tiles' way to
    the cubes through the L2 (written by each vector core's MTE3, read by the cube's MTE2) bounds
    them instead: within 1.1x of the largest floor, both faster than float16."""
    w = np.random.default_rng(0).standard_normal((2048, 5632)).astype(np.float32)
    g = isa.Graph("f16")
    g.output(isa.ops.matrix_mul(g.input("x", (1, 2048), "float16"), g.constant("w", w.astype(np.float16)), name="y"), "y")
    half = sim.execute(isa.lower(g, CHIP), CHIP, mode="timing")
    assert half.cycles < 1.1 * w.size * 2 / CHIP.memories["ddr"].bandwidth
    for bits in (8, 4):
        g, nbytes = a16_gemv(w, bits)
        result = sim.execute(isa.lower(g, CHIP), CHIP, mode="timing")
        bound = floors(*w.shape, nbytes)
        assert max(bound.values()) <= result.cycles < 1.1 * max(bound.values()), (bits, result.cycles, bound)
        assert result.cycles < 0.8 * half.cycles and result.stats.ddr_read_bytes < 0.6 * half.stats.ddr_read_bytes


@pytest.mark.parametrize("bits", [8, 4])
def test_bfloat16_products_on_the_910b_and_the_310b_refusal(bits):
    """The 910B's table has the op in bfloat16 too (CANN's x BF16); the 310B's has none (CANN's
    operator page marks the Atlas 200I/500 A2 unsupported): refused naming the op, dtypes and chip."""
    bf16 = isa.dtypes.np_dtype("bfloat16")
    stored, scale, zero = weight_only.quantize_weight(np.random.default_rng(0).standard_normal((256, 96)).astype(np.float32), bits, 128)
    g = isa.Graph("a16")
    terms = [g.constant(n, t.astype(bf16)) for n, t in (("s", scale), ("z", zero)) if t is not None]
    y = isa.ops.matrix_mul_a16(g.input("x", (5, 256), "bfloat16"), g.constant("w", stored), *terms, bits=bits, group=128, name="y")
    g.output(y, "y")
    x = np.random.default_rng(1).standard_normal((5, 256)).astype(bf16)
    got = sim.run(g, CHIP, inputs={"x": x}).outputs["y"].astype(np.float64)
    want = MATRIX_MUL_A16.reference([x, stored] + [g.constants[t.name] for t in terms], g.nodes[0].params)[0].astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * np.abs(want).max())
    stored_dtype = "int8" if bits == 8 else "uint8"
    refused = rf"op y: matrix_mul_a16 with bfloat16 x {stored_dtype} -> bfloat16 is not supported on chip ascend310b"
    with pytest.raises(isa.UnsupportedError, match=refused):
        isa.lower(g, chips.load("ascend310b"))
