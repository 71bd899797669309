"""Weight-only quantization on the Ascend 910B (isa/lower/templates/matmul.py, isa/lower/templates/msd.py,
chips/ascend910b.yaml): as CANN's WeightQuantBatchMatmulV2 runs on A2. For many rows (prefill) the
antiquant kernel: each core's vector cores load the int8 or packed int4 weight tile into their UB and
dequantize it there, and the float16 tile goes UB -> L2 -> L1 -> L0B to the cube. For a few rows (a
decode step) the msd-group kernel where its estimate is the lower: the activations unfolded into
integer slices on the vector cores, multiplied by the weights as stored on the cube, the slices'
int32 results combined on the vector cores. The products compute what the dequantized model
computes (a decode step's values: tests/test_weight_only.py, which takes the 910B among its chips),
and a decode step's projection reads the stored bytes from HBM, not float16 ones."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_weight_only import a16_gemv

import chips
import isa
import sim
from isa.deploy import weight_only
from isa.lower.templates.msd import SLICES, TINY
from isa.ops.weight_only import MATRIX_MUL_A16, unpack

CHIP = chips.load("ascend910b")


def a16_graph(m, k, n, bits, group, seed, asym=False):
    """(graph of x [m, k] times a random weight quantized to `bits`, its constants' operands, an x);
    asym: 8-bit codes with zero terms, as an asymmetric uint8 weight's (zero points 120 to 135)."""
    rng = np.random.default_rng(seed)
    stored, scale, zero = weight_only.quantize_weight(rng.standard_normal((k, n)).astype(np.float32), bits, group)
    if asym and bits == 8:
        zero = (128 - rng.integers(120, 136, scale.shape)) * scale
    g = isa.Graph("a16")
    operands = [g.input("x", (m, k), "float16"), g.constant("w", stored), g.constant("s", scale.astype(np.float16))]
    operands += [] if zero is None else [g.constant("z", zero.astype(np.float16))]
    g.output(isa.ops.matrix_mul_a16(*operands, bits=bits, group=group, name="y"), "y")
    return g, operands, rng.standard_normal((m, k)).astype(np.float16)


def kernel(program):
    """Which kernel the lowering took for the product, by its note."""
    return "msd" if any(note.startswith("tiling y: msd") for note in program.notes) else "antiquant"


@settings(max_examples=8, deadline=None)
@given(st.sampled_from([(8, False), (8, True), (4, True)]), st.integers(1, 3), st.sampled_from([32, 128]), st.integers(1, 3),
       st.sampled_from([16, 72]), st.integers(0, 2**31))
def test_the_antiquant_product_on_the_910b_equals_its_definition(scheme, extra, group, groups, n, seed):
    """Random shapes and groups, more rows than the msd kernel takes (group / 8), 8-bit codes with
    zero terms or without: unpacked and dequantized on the vector core, moved to L0B, multiplied
    on the cube: the op's numpy definition up to the order of the float32 sums."""
    bits, asym = scheme
    g, operands, xv = a16_graph(group // 8 + extra, group * groups, n, bits, group, seed, asym)
    program = isa.lower(g, CHIP)
    assert kernel(program) == "antiquant"
    got = sim.execute(program, CHIP, inputs={"x": xv}).outputs["y"].astype(np.float64)
    want = MATRIX_MUL_A16.reference([xv] + [g.constants[t.name] for t in operands[1:]], g.nodes[0].params)[0].astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3 * np.abs(want).max())
    # the dequantized tile reaches the cube's L0B from the vector core's UB through the L2 and L1
    hops = {(i.src.mem.split(".")[-1], i.dst.mem.split(".")[-1]) for s in program.streams.values() for i in s if i.kind == "dma"}
    assert {("ub0", "l2"), ("l2", "l1"), ("l1", "l0b")} <= hops and ("ddr", "l1") in hops, hops


def msd(x, stored, scale, zero, bits, group):
    """The msd kernel's arithmetic in numpy (isa/lower/templates/msd.py), float32 step by step as
    the vector instructions compute it: (its result, the bound of its distance from the exact
    product: each row's residual after the last slice, at most its group's magnitude times 0.5 /
    (f1 f2^(S-1)), times the weights' magnitudes)."""
    f32 = np.float32
    slices, f1, f2 = SLICES[bits]
    m, k = x.shape
    groups = k // group
    xf = x.astype(f32).reshape(m, groups, group)
    am = np.maximum(np.abs(xf).max(-1), f32(TINY))
    u = (xf / am[..., None]).astype(f32) * f32(f1)
    parts = []
    for j in range(slices):
        if j:
            u = (u - parts[-1].astype(f32)) * f32(f2)
        parts.append(np.where(u >= 0, np.floor(u + 0.5), -np.floor(0.5 - u)).astype(np.int64))  # halves away from zero
    codes = (stored if bits == 8 else unpack(stored)).astype(np.int64)
    factors = [(am / f32(f1 * f2**j)).astype(f32) for j in range(slices)]
    sums = xf.sum(-1, dtype=f32)
    scale16, y = scale.astype(np.float16).astype(f32), np.zeros((m, stored.shape[1]), f32)
    for g in range(groups):
        rows = codes[g * group:(g + 1) * group]
        scaled = [(p[:, g] @ rows).astype(f32) * factors[j][:, g, None] for j, p in enumerate(parts)]
        total = scaled[0]
        for more in scaled[1:]:
            total = total + more
        y = total * scale16[g] if g == 0 else total * scale16[g] + y
        if zero is not None:
            y = sums[:, g, None] * zero.astype(np.float16).astype(f32)[g] + y
    weights = codes * np.repeat(scale16, group, axis=0) + (0 if zero is None else np.repeat(zero.astype(np.float16).astype(f32), group, 0))
    reach = np.repeat(am, group, axis=1) * 0.5 / (f1 * f2 ** (slices - 1))
    return y.astype(np.float16), reach @ np.abs(weights)


@settings(max_examples=8, deadline=None)
@given(st.sampled_from([(8, False), (8, True), (4, True)]), st.integers(1, 2), st.integers(1, 3), st.sampled_from([72, 256]),
       st.integers(0, 2**31))
def test_the_msd_product_on_the_910b_is_its_slices_arithmetic(scheme, m, groups, n, seed):
    """A row or two (the kernel takes at most group / 8) of a product whose weights' bytes outweigh
    the unfold (K of one to three groups of 128, N of 72 or 256; fewer, and the antiquant kernel's
    estimate is the lower): the msd kernel, its slices made by vector instructions,
    multiplied as integers on the cube by the codes as stored (4-bit ones unpacked into L0B by
    MTE1), combined on the vector core: the slices' arithmetic in numpy up to a float16 rounding,
    and within the slices' precision of the exact (float64) product of the dequantized weights;
    zero terms (every 4-bit product's, an asymmetric 8-bit one's) added as each row's group sums
    times them."""
    group, (bits, asym) = 128, scheme
    g, _, xv = a16_graph(m, group * groups, n, bits, group, seed, asym)
    program = isa.lower(g, CHIP)
    assert kernel(program) == "msd"
    got = sim.execute(program, CHIP, inputs={"x": xv}).outputs["y"].astype(np.float64)
    stored, scale = g.constants["w"], g.constants["s"].astype(np.float64)
    zero = g.constants["z"].astype(np.float64) if "z" in g.constants else None
    want, reach = msd(xv, stored, scale, zero, bits, group)
    np.testing.assert_allclose(got, want.astype(np.float64), rtol=2**-10, atol=1e-4 * np.abs(want).max())  # (a float16 rounding)
    codes = (stored if bits == 8 else unpack(stored)).astype(np.float64)
    dequant = codes * np.repeat(scale, group, axis=0) + (0 if zero is None else np.repeat(zero, group, axis=0))
    exact = xv.astype(np.float64) @ dequant
    assert np.all(np.abs(got - exact) <= reach + 2**-10 * np.abs(exact) + 1e-3 * np.abs(exact).max()), np.abs(got - exact).max()
    # no dequantized tile crosses the L2: the vector cores' writes to it are the unfold's workspace, a few bytes a row
    hops = {(i.src.mem.split(".")[-1], i.dst.mem.split(".")[-1]) for s in program.streams.values() for i in s if i.kind == "dma"}
    assert ("ub0", "l2") not in hops and ("l1", "l0b") in hops, hops


def floors(k, n, nbytes):
    """Lower bounds (cycles) of a decode projection on the 910B: the stored bytes over HBM's
    bandwidth; the float16 tiles over the vector cores' MTE3s (UB -> L2), two per cube core; the
    tiles written to and read from the L2 over its bandwidth."""
    half = k * n * 2
    mte3 = sum(e.bandwidth for e in CHIP.engines.values() if any(a.endswith(("ub0", "ub1")) for a, _ in e.links))
    return {"hbm": nbytes / CHIP.memories["ddr"].bandwidth, "mte3": half / mte3, "l2": 2 * half / CHIP.memories["l2"].bandwidth}


@pytest.mark.parametrize("bits, within", [(8, 1.1), (4, 1.2)])
def test_a_decode_projection_streams_the_stored_bytes(bits, within):
    """TinyLlama's MLP projection (2048 x 5632) for one token: float16 weights are HBM-bound; int8
    and int4 ones read half and a quarter of those bytes from HBM, and by the msd kernel no float16
    tile goes through the L2, so they are HBM-bound too: within `within` of the stored bytes over
    HBM's bandwidth, below the antiquant kernel's floor (the tiles written and read through the L2)."""
    w = np.random.default_rng(0).standard_normal((2048, 5632)).astype(np.float32)
    g = isa.Graph("f16")
    g.output(isa.ops.matrix_mul(g.input("x", (1, 2048), "float16"), g.constant("w", w.astype(np.float16)), name="y"), "y")
    half = sim.execute(isa.lower(g, CHIP), CHIP, mode="timing")
    assert half.cycles < 1.1 * w.size * 2 / CHIP.memories["ddr"].bandwidth
    g, nbytes = a16_gemv(w, bits)
    program = isa.lower(g, CHIP)
    assert kernel(program) == "msd"
    result = sim.execute(program, CHIP, mode="timing")
    bound = floors(*w.shape, nbytes)
    assert bound["hbm"] <= result.cycles < within * bound["hbm"] < bound["l2"], (bits, result.cycles, bound)
    assert result.stats.ddr_read_bytes < (0.6 if bits == 8 else 0.35) * half.stats.ddr_read_bytes


def test_a_prefill_product_takes_the_antiquant_kernel():
    """64 rows (a prompt's), more than the msd kernel takes: the antiquant kernel, its tiles
    through the L2; and 8 rows of a 128 group, which it may take, by the estimates noted."""
    w = np.random.default_rng(0).standard_normal((1024, 512)).astype(np.float32)
    stored, scale, _ = weight_only.quantize_weight(w, 8, 128)
    for m, kernels in ((64, {"antiquant"}), (8, {"msd", "antiquant"})):
        g = isa.Graph("a16")
        y = isa.ops.matrix_mul_a16(g.input("x", (m, 1024), "float16"), g.constant("w", stored), g.constant("s", scale.astype(np.float16)),
                                   bits=8, group=128, name="y")
        g.output(y, "y")
        program = isa.lower(g, CHIP)
        assert kernel(program) in kernels
        if m == 8:  # the msd kernel's note gives both estimates, and it is taken for the lower
            note = next(n for n in program.notes if n.startswith("tiling y"))
            assert kernel(program) == "antiquant" or float(note.split("estimated ")[1].split(" ")[0].replace(",", "")) < float(
                note.split("antiquant ")[1].rstrip(")").replace(",", ""))


def bfloat16_a16(chip, bits):
    """A (5, 256) x (256, 96) product of bfloat16 activations and `bits`-bit weights in groups of
    128 run on chip: (its graph, its output, the op's reference in float64)."""
    bf16 = isa.dtypes.np_dtype("bfloat16")
    stored, scale, zero = weight_only.quantize_weight(np.random.default_rng(0).standard_normal((256, 96)).astype(np.float32), bits, 128)
    g = isa.Graph("a16")
    terms = [g.constant(n, t.astype(bf16)) for n, t in (("s", scale), ("z", zero)) if t is not None]
    y = isa.ops.matrix_mul_a16(g.input("x", (5, 256), "bfloat16"), g.constant("w", stored), *terms, bits=bits, group=128, name="y")
    g.output(y, "y")
    x = np.random.default_rng(1).standard_normal((5, 256)).astype(bf16)
    got = sim.run(g, chip, inputs={"x": x}).outputs["y"]
    want = MATRIX_MUL_A16.reference([x, stored] + [g.constants[t.name] for t in terms], g.nodes[0].params)[0].astype(np.float64)
    return g, got, want


@pytest.mark.parametrize("bits", [8, 4])
def test_bfloat16_products_on_the_910b_and_the_310b_refusal(bits):
    """The 910B's table has the op in bfloat16 too (CANN's x BF16); the 310B's has none (CANN's
    operator page marks the Atlas 200I/500 A2 unsupported): refused naming the op, dtypes and chip."""
    g, got, want = bfloat16_a16(CHIP, bits)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-2, atol=1e-2 * np.abs(want).max())
    stored_dtype = "int8" if bits == 8 else "uint8"
    refused = rf"op y: matrix_mul_a16 with bfloat16 x {stored_dtype} -> bfloat16 is not supported on chip ascend310b"
    with pytest.raises(isa.UnsupportedError, match=refused):
        isa.lower(g, chips.load("ascend310b"))
