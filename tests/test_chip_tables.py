"""The Sophgo chips' op tables (chips/bm1682.yaml, bm1684.yaml, bm1686.yaml) against the BMLang
seed's per-chip lines (seed 002, the BMLang operator reference, docs/sources.md#op-set-documents; line numbers
below), and their hardware figures against the vendor peaks (docs/sources.md#sophgo).

Acceptance is checked the way a user meets it: a tiny graph lowered with isa.lower, which raises
isa.UnsupportedError naming the op, the dtypes and the chip when the chip's row says no."""

import re

import numpy as np
import pytest

import chips
import isa
import sim
from isa import dtypes
from isa.lower.check import kind
from isa.ops import REGISTRY
from isa.ops.conv import Conv

O = isa.ops
SOPHGO = ("bm1682", "bm1684", "bm1686")
SHAPE = (2, 3)


@pytest.fixture(scope="module", params=SOPHGO)
def chip(request):
    return chips.load(request.param)


def load(name):
    return chips.load(name)


# ---- graph helpers ---------------------------------------------------------------------------

def graph(build, *in_dtypes, shapes=None):
    """A graph whose inputs x0, x1, ... have `in_dtypes`; build(*tensors) gives its one output."""
    g = isa.Graph("t")
    shapes = shapes or [SHAPE] * len(in_dtypes)
    ins = [g.input(f"x{i}", s, d) for i, (s, d) in enumerate(zip(shapes, in_dtypes))]
    g.output(build(*ins), "y")
    return g


def accepts(chip_name, g):
    try:
        isa.lower(g, load(chip_name))
    except isa.UnsupportedError:
        return False
    return True


def binary(op, a, b, out=None):
    return graph(lambda x, y: getattr(O, op)(x, y, out_dtype=out), a, b)


def unary(op, a, out=None, **params):
    return graph(lambda x: getattr(O, op)(x, out_dtype=out, **params), a)


def askable_keys():
    """Every key a node can ask a chip's table for: the op's name, one per variant, or both for
    a convolution (only a depthwise one asks for its variant)."""
    for name, opdef in REGISTRY.items():
        yield from ([f"{name}.{v}" for v in opdef.variants] if opdef.variants else [])
        if not opdef.variants or isinstance(opdef, Conv):
            yield name


# ---- loading ---------------------------------------------------------------------------------

def test_the_three_sophgo_chips_load(chip):
    assert chip.name in SOPHGO
    assert chip.source.endswith(f"{chip.name}.yaml")
    assert set(chip.memories) == {"ddr", "lmem"}
    assert chip.memories["lmem"].lanes == 64
    (tiu,) = chip.engines_of("vector")
    assert chip.engines_of("matrix") == [tiu] and tiu.kinds == ("vector", "matrix")
    assert len(chip.engines_of("dma")) == 1


@pytest.mark.parametrize("alias", ["bm1684x", "BM1684X"])
def test_bm1684x_is_bm1686(alias):
    chip = chips.load(alias)
    assert chip.name == "bm1686" and chip.source.endswith("bm1686.yaml")


def test_bm1686_figures_are_the_bm1684x_headers():
    chip = load("bm1686")
    lmem, ddr = chip.memories["lmem"], chip.memories["ddr"]
    assert chip.clock_hz == 1e9  # bm1684x_defs.py BDCyclePeriod = 1 / 1000
    assert (lmem.size, lmem.lanes, lmem.banks, lmem.align) == (256 * 1024, 64, 16, 64)
    assert lmem.capacity == 16 * 2**20  # half of BM1684's 32 MiB (sophon-demo FAQ 6.1)
    assert lmem.capacity * 2 == load("bm1684").memories["lmem"].capacity
    assert ddr.bandwidth * chip.clock_hz == pytest.approx(64e9)  # tpu-perf run.py
    vec = chip.engines["tiu"].vector
    assert {d: vec.per_lane[d] for d in ("float32", "float16", "int8")} == {"float32": 16, "float16": 32, "int8": 64}


def test_bm1682_is_modelled_bm1680_like_and_float32_only_in_its_matrix_unit():
    chip = load("bm1682")
    lmem = chip.memories["lmem"]
    assert (lmem.size, lmem.lanes) == (512 * 1024, 64)
    assert set(chip.engines["tiu"].matrix.block_cycles) == {"float32"}  # seed line 102


# ---- peaks -----------------------------------------------------------------------------------

PEAKS = [  # (chip, operand dtype, vendor peak in ops/s, where it is from)
    ("bm1684", "int8", 17.6e12, "tpu-perf run.py / sophon-demo FAQ"),
    ("bm1684", "float32", 2.2e12, "tpu-perf run.py"),
    ("bm1686", "int8", 32e12, "tpu-perf run.py"),
    ("bm1686", "float16", 16e12, "tpu-perf run.py"),
    ("bm1686", "float32", 2e12, "tpu-perf run.py"),
    ("bm1682", "float32", 3e12, "third-party table [U]"),
]


@pytest.mark.parametrize("name, dtype, peak, source", PEAKS)
def test_matrix_peak_is_within_10_percent_of_the_vendor_figure(name, dtype, peak, source):
    chip = load(name)
    mx = chip.engines["tiu"].matrix
    macs_per_cycle = mx.m * mx.n * mx.depth(dtype) / mx.block_cycles[dtype]
    assert macs_per_cycle * 2 * chip.clock_hz == pytest.approx(peak, rel=0.10), source


def test_bm1686_fp32_matrix_rate_is_its_vector_fp32_rate():
    """64 NPU x 16 EU (EU_NUM) fp32 multiply-adds per cycle in either unit."""
    tiu = load("bm1686").engines["tiu"]
    mx = tiu.matrix
    assert mx.m * mx.n * mx.k / mx.block_cycles["float32"] == tiu.vector.lanes * tiu.vector.per_lane["float32"]


def test_division_and_transcendental_functions_cost_more_than_an_add(chip):
    cycles = chip.engines["tiu"].vector.op_cycles
    add = cycles.get("add", 1)
    for fn in ("div", "exp", "ln", "sqrt", "rsqrt", "tanh", "sigmoid", "elu", "sin", "cos"):
        assert cycles.get(fn, 1) > add, fn
    assert cycles["div"] < cycles["tanh"] and cycles["exp"] < cycles["sigmoid"]  # built from exp and div


# ---- every row of every chip -----------------------------------------------------------------

def row_dtypes(row):
    out = set(row.dtypes or ()) | set(row.mixed_in or ()) | set(row.mixed_out or ())
    for sig in row.signatures + row.global_for:
        out |= set(sig.output).union(*sig.inputs)
    return out | set(row.compute) | set(row.compute.values())


def test_every_row_of_every_chip_is_valid_and_priced(chip):
    """Every dtype a row allows is a known dtype and one the TIU can price (vector per_lane; the
    matrix unit's block_cycles for matrix_mul's operands)."""
    tiu = chip.engines["tiu"]
    assert "*" not in chip.ops  # a real chip lists what it runs
    seen = 0
    for key in askable_keys():
        row = chip.support(key)
        if row is None:
            continue
        seen += 1
        allowed = row_dtypes(row)
        assert allowed, key
        assert allowed <= set(dtypes.NAMES), key
        assert row.kind in (None, "local", "global"), key
        assert row.dtypes is not None, f"{key}: a Sophgo row must restrict dtypes"
        moved = key == "gather"  # an indexed DMA's: priced by its bytes, its indices' dtype needs no TIU rate
        priced = allowed - {"int64"} if moved else allowed
        assert priced <= set(tiu.vector.per_lane), f"{key}: {priced - set(tiu.vector.per_lane)} unpriced on {chip.name}"
        if key == "matrix_mul":
            lefts = set(row.dtypes) | {d for sig in row.signatures for d in sig.inputs[0]}
            assert lefts <= set(tiu.matrix.block_cycles), key
    assert seen >= 40


ABSENT_ON_BM1682 = {  # the seed's BM1682 line says 不支持, or there is no BM1682 line
    "pool_int", "pool3d_int", "conv_v2", "conv3d_v2", "deconv_v2", "deconv3d_v2", "matrix_mul_v2", "fc_int",
    "softmax", "softmax_int", "batch_norm", "hw_mul", "hw_avg.mode0", "hw_avg.mode1", "hw_avg.mode2", "interpolate",
    "rdivs", "axpy", "ceil", "floor", "round", "lut",
    "mul_shift", "add_shift", "sub_shift", "muls_shift", "adds_shift", "subs_shift", "rsubs_shift",
    "arith_lshift", "arith_lshifts", "arith_rshift", "arith_rshifts", "round_rshift", "round_rshifts",
    "bit_and", "bit_ands", "bit_or", "bit_ors", "bit_xor", "bit_xors",
    "requant_fp32_to_int.mode0", "requant_fp32_to_int.mode1", "requant_int32.mode0", "requant_int32.mode1",
    "requant_int32.mode2", "dequant_int_to_fp32.mode0", "dequant_int_to_fp32.mode1",
    "arithmetic_shift", "arithmetic_pc_shift", "logical_shift", "logical_pc_shift",
    "lshift", "rshift", "clshift", "crshift", "sequence_gen",
}
BM1686_ONLY = {  # seed lines 131-230, 987, 1009, 1027-1053, 1136-1176, 1223-1232 and 1302-1336: BM1686 only
    "pool_int", "pool3d_int", "conv_v2", "conv3d_v2", "deconv_v2", "deconv3d_v2", "matrix_mul_v2", "fc_int",
    "softmax_int", "hw_mul", "hw_avg.mode0", "hw_avg.mode1", "hw_avg.mode2", "interpolate",
    "requant_fp32_to_int.mode0", "requant_fp32_to_int.mode1", "requant_int32.mode0", "requant_int32.mode1",
    "requant_int32.mode2", "dequant_int_to_fp32.mode0", "dequant_int_to_fp32.mode1",
    "arithmetic_shift", "arithmetic_pc_shift", "logical_shift", "logical_pc_shift",
    "sort.stable", "argsort.stable",  # lines 1077 and 1087: "BM1684仅支持stable为false"
}


@pytest.mark.parametrize("name, absent", [("bm1682", ABSENT_ON_BM1682), ("bm1684", BM1686_ONLY), ("bm1686", set())])
def test_which_ops_each_chip_runs(name, absent):
    chip = load(name)
    missing = {key for key in askable_keys() if chip.support(key) is None}
    # an op the chip lacks lacks its variants too (conv_v2.depthwise); the other seeds' ops
    # (Ascend ATB, TensorRT, ONNX) are not the Sophgo chips' at all, but for the fused attention
    # (TPU-MLIR's FAttention on BM1684X; on BM1684 and BM1686 the template's float32 steps),
    # TPU-MLIR's weight-only product (isa/ops/weight_only.py), BM1686's alone, whose matrix unit takes
    # float16, and TPU-MLIR's BM1684X gather
    variants = {f"{op}.{v}" for op in absent if op in REGISTRY for v in REGISTRY[op].variants}
    fused = {"attention"} if name != "bm1682" else set()
    others = {key for key in askable_keys() if REGISTRY[key.split(".")[0]].seed != "bmlang"} - fused
    others -= {"matrix_mul_a16", "gather"} if name == "bm1686" else set()
    assert missing == (absent | variants | others) & set(askable_keys())


# ---- spot checks against the seed --------------------------------------------------------------

def test_unsupported_op_error_names_the_op_and_the_chip():
    with pytest.raises(isa.UnsupportedError, match=r"mul_shift with int8 x int8 -> int8 is not supported "
                                                   r"on chip bm1682 \(the chip has no mul_shift"):
        isa.lower(graph(lambda a, b: O.mul_shift(a, b, 1), "int8", "int8"), load("bm1682"))  # seed line 400
    assert load("bm1682").support("mul_shift") is None
    assert load("bm1684").support("mul_shift") is not None


def test_rejected_dtypes_error_names_the_op_the_dtypes_and_the_chip():
    with pytest.raises(isa.UnsupportedError, match=re.escape("add with int16 x int16 -> uint16 is not supported on chip bm1684")):
        isa.lower(binary("add", "int16", "int16", "uint16"), load("bm1684"))


@pytest.mark.parametrize("name, dtype, ok", [
    ("bm1682", "float32", True), ("bm1682", "int32", False),  # seed line 244
    ("bm1684", "float32", True), ("bm1684", "float16", False), ("bm1684", "int32", False),  # line 245
    ("bm1686", "float32", True), ("bm1686", "float16", True), ("bm1686", "int8", False),  # line 246 (TODO)
])
def test_div_dtypes(name, dtype, ok):
    assert accepts(name, binary("div", dtype, dtype)) is ok


@pytest.mark.parametrize("a, b, out, ok", [
    ("int8", "int8", "int16", True),  # seed line 253: 8/16-bit inputs may give another 8/16-bit output
    ("int8", "uint8", "uint16", True),
    ("uint16", "uint8", "uint16", True),
    ("uint16", "uint16", "uint16", True),
    ("int16", "int16", "uint16", False),  # "if tensor_o is UINT16, no input may be INT16"
    ("int16", "uint8", "uint16", False),
    ("int16", "int16", "int16", True),
    ("int32", "int32", "int32", True),
    ("int32", "int32", "int16", False),  # INT32 does not mix
    ("float16", "float16", "float16", False),
])
def test_bm1684_add(a, b, out, ok):
    assert accepts("bm1684", binary("add", a, b, out)) is ok


def test_the_uint16_rule_is_on_subs_and_rsubs_but_not_on_adds():
    """Seed lines 284 (adds), 291 (subs), 312 (rsubs): only subs and rsubs say it."""
    assert accepts("bm1684", unary("adds", "int16", "uint16", scalar=1))
    assert not accepts("bm1684", unary("subs", "int16", "uint16", scalar=1))
    assert not accepts("bm1684", graph(lambda x: O.rsubs(1, x, out_dtype="uint16"), "int16"))
    assert accepts("bm1684", unary("subs", "uint8", "uint16", scalar=1))


def test_bm1686_add_takes_uint32_and_float16_but_does_not_mix():
    """Seed line 254 lists dtypes and says nothing of mixing, unlike BM1684's line 253."""
    assert accepts("bm1686", binary("add", "uint32", "uint32"))
    assert accepts("bm1686", binary("add", "float16", "float16"))
    assert not accepts("bm1686", binary("add", "int8", "int8", "int16"))
    assert not accepts("bm1684", binary("add", "uint32", "uint32"))


@pytest.mark.parametrize("a, b, out, ok", [
    ("int8", "int8", "int16", True),  # seed line 401
    ("uint8", "int8", "uint16", True),  # an 8-bit tensor_i0: any output
    ("int16", "int8", "int16", True),
    ("int8", "int16", "int16", False),  # tensor_i1 only INT8/UINT8
    ("int16", "int16", "int16", False),
    ("int16", "uint8", "uint16", False),  # a 16-bit tensor_i0 with a signed input: signed output
    ("uint16", "int8", "uint16", False),
    ("uint16", "uint8", "uint16", True),
    ("int32", "int8", "int32", False),
])
def test_bm1684_mul_shift(a, b, out, ok):
    assert accepts("bm1684", graph(lambda x, y: O.mul_shift(x, y, 2, out_dtype=out), a, b)) is ok


@pytest.mark.parametrize("op, ok", [("sub_shift", False), ("add_shift", True)])
def test_sub_shift_needs_a_signed_output_add_shift_does_not(op, ok):
    """Seed lines 409 and 417: uint8 - uint8 -> uint8 is refused, uint8 + uint8 -> uint8 is not."""
    g = graph(lambda x, y: getattr(O, op)(x, y, 1, out_dtype="uint8"), "uint8", "uint8")
    assert accepts("bm1684", g) is ok
    assert accepts("bm1686", g) is ok  # seed lines 410 and 418: 同BM1684


@pytest.mark.parametrize("x, n, ok", [
    ("int32", "int32", True), ("int32", "int16", False),  # seed line 557
    ("int16", "int16", True), ("uint16", "int16", True), ("uint16", "uint16", False),
    ("int8", "int8", False),
])
def test_bm1684_arith_lshift(x, n, ok):
    assert accepts("bm1684", binary("arith_lshift", x, n)) is ok


@pytest.mark.parametrize("x, out, ok", [
    ("int16", "int8", True), ("uint16", "uint8", True),  # seed line 593: the width may change
    ("int16", "uint8", False), ("uint16", "int16", False),  # the sign may not
    ("int8", "int8", False), ("int32", "int32", False),  # tensor_i is INT16/UINT16 only
])
def test_bm1684_round_rshift(x, out, ok):
    assert accepts("bm1684", graph(lambda a, n: O.round_rshift(a, n, out_dtype=out), x, "int16")) is ok


@pytest.mark.parametrize("table, name, ok", [
    ("float32", "bm1684", True), ("int8", "bm1684", True), ("uint8", "bm1686", True),  # seed lines 951, 955, 956
    ("int16", "bm1684", False),
    ("float32", "bm1682", False),  # seed line 954: 不支持
])
def test_lut(table, name, ok):
    values = np.arange(256).astype(dtypes.np_dtype(table)) if table != "float32" else np.linspace(-1, 1, 256, dtype=np.float32)
    g = graph(lambda x: O.lut(x, values), "int8")
    assert accepts(name, g) is ok


def test_lut_int8_to_float32_runs_on_bm1684():
    table = np.linspace(-1, 1, 256, dtype=np.float32)
    g = graph(lambda x: O.lut(x, table), "int8")
    x = np.array([[-128, -1, 0], [1, 2, 127]], np.int8)
    got = sim.run(g, "bm1684", {"x0": x}).outputs["y"]
    np.testing.assert_array_equal(got, table[x.view(np.uint8)])
    assert load("bm1682").support("lut") is None


@pytest.mark.parametrize("mode, x, out, ok", [
    (2, "int8", "int8", False), (2, "uint8", "int8", False),  # seed line 1167: INT32/INT16/UINT16 in
    (2, "int16", "int8", True), (2, "int32", "uint16", True),
    (0, "int8", "int8", True), (1, "uint8", "int32", True),  # lines 1159, 1163: 8-bit inputs too
    (0, "int8", "uint8", False),  # modes 0 and 1 give INT32/INT16/INT8
])
def test_bm1686_requant_int32(mode, x, out, ok):
    g = unary("requant_int32", x, out, multiplier_val=1 << 30, scale_val=-1, mode=mode)
    assert accepts("bm1686", g) is ok
    assert not accepts("bm1684", g)  # the seed gives BM1686 lines only


def test_requant_int32_judges_only_tensor_i_and_the_output():
    """Per-channel multipliers are int32 constants; they are not data operands (OpDef.checked_inputs)."""
    g = unary("requant_int32", "int16", "int8", is_mul_shift_pc=True, multiplier_vec=[1 << 30] * 3,
              scale_vec=[-1, 0, 1], mode=2)
    assert len(g.nodes[0].inputs) > 1
    assert accepts("bm1686", g)


@pytest.mark.parametrize("name, src, dst, ok, where", [
    ("bm1684", "int32", "float32", True, "global"),  # seed line 393: global only for INT32 -> FLOAT32
    ("bm1684", "float32", "int8", True, "local"),
    ("bm1684", "int16", "uint8", True, "local"),
    ("bm1684", "float32", "float16", False, None),  # no FLOAT16 on BM1684 (line 391)
    ("bm1684", "int32", "int8", False, None),
    ("bm1682", "float32", "int32", True, "local"),  # line 393: local only for FLOAT32 -> INT32
    ("bm1682", "float32", "int8", True, "global"),
    ("bm1682", "int32", "float32", True, "global"),
    ("bm1682", "int16", "float32", False, None),  # line 390
    ("bm1686", "float16", "int8", True, "local"),  # line 392: FLOAT16 <-> every other format
    ("bm1686", "int32", "float32", True, "global"),  # "the rest as BM1684"
])
def test_cast(name, src, dst, ok, where):
    g = unary("cast", src, dst)
    assert accepts(name, g) is ok
    if ok:
        assert kind(g, load(name), g.nodes[0]) == where


def test_active_types():
    relu16 = unary("active", "float16", active_type="relu")
    tanh16 = unary("active", "float16", active_type="tanh")
    relu_mixed = unary("active", "int8", "int16", active_type="relu")
    leaky_mixed = unary("active", "int8", "int16", active_type="leaky_relu")
    assert accepts("bm1686", relu16) and not accepts("bm1684", relu16)  # seed line 349: FLOAT16 for relu
    assert not accepts("bm1686", tanh16)  # "the rest as BM1684": FLOAT32 only
    assert accepts("bm1684", relu_mixed) and accepts("bm1686", relu_mixed)  # line 348
    assert not accepts("bm1684", leaky_mixed)  # mixed only for RELU and ABSVAL
    assert not accepts("bm1682", unary("active", "int8", active_type="relu"))  # line 347
    p = graph(lambda x: O.active_param(x, "absval", [], out_dtype="uint8"), "int16")
    assert accepts("bm1684", p) and not accepts("bm1682", p)  # line 359


@pytest.mark.parametrize("name, left, bias, out, ok", [
    ("bm1682", "float32", None, None, True),  # seed line 102: FLOAT32 only
    ("bm1682", "int8", None, "int8", False),
    ("bm1684", "int8", "int16", "int8", True),  # line 103: the quantized modes
    ("bm1684", "float16", None, None, False),
    ("bm1686", "float16", None, None, True),  # line 104: plus FLOAT16
    ("bm1686", "uint8", "uint16", "uint8", True),
])
def test_matrix_mul(name, left, bias, out, ok):
    g = isa.Graph("mm")
    a = g.input("a", (4, 8), left)
    b = g.input("b", (8, 5), left)
    c = g.input("c", (1, 5), bias) if bias else None
    g.output(O.matrix_mul(a, b, c, out_dtype=out), "y")
    assert accepts(name, g) is ok
    if ok:
        assert kind(g, load(name), g.nodes[0]) == "global"


def test_condition_select_and_select():
    cs = graph(O.condition_select, "float32", "int8", "int8")  # seed line 911
    assert accepts("bm1684", cs) and not accepts("bm1682", cs)  # line 910: FLOAT32 only
    cs16 = graph(O.condition_select, "float16", "float16", "float16")
    assert accepts("bm1686", cs16) and not accepts("bm1684", cs16)  # line 912
    sel = graph(lambda a, b, c, d: O.select(a, b, c, d, "GREATER_THAN"), "uint8", "uint8", "float32", "float32")
    assert accepts("bm1684", sel) and not accepts("bm1682", sel)  # lines 921, 922
    skew = graph(lambda a, b, c, d: O.select(a, b, c, d, "GREATER_EQUAL"), "int8", "float32", "int8", "int8")
    assert not accepts("bm1684", skew)  # the compared operands share a dtype


def test_stride_ops():
    add = graph(lambda a, b: O.stride_add(a, b, [1, 1], out_dtype="int16"), "int8", "uint8")
    assert accepts("bm1684", add) and not accepts("bm1682", add)  # seed lines 667, 668
    bad = graph(lambda a, b: O.stride_add(a, b, [1, 1], out_dtype="uint16"), "int16", "uint8")
    assert not accepts("bm1684", bad)
    half = graph(lambda a, b: O.stride_max(a, b, [1, 1]), "float16", "float16")
    assert accepts("bm1686", half) and not accepts("bm1684", half)  # lines 704, 705


def test_arithmetic_shift_family_is_bm1686_only():
    g = graph(lambda x: O.arithmetic_shift(x, -2, "HALF_UP", out_dtype="int8"), "int32")  # seed line 1309
    assert accepts("bm1686", g) and not accepts("bm1684", g)
    assert accepts("bm1686", graph(lambda x: O.logical_shift(x, 3, "DOWN", out_dtype="uint32"), "uint8"))  # line 1327
    wide = graph(lambda x, s: O.arithmetic_pc_shift(x, s, "HALF_UP"), "int8", "int16", shapes=[(3, 4), (3,)])
    assert not accepts("bm1686", wide)  # line 1318: tensor_shift no wider than tensor_i
    narrow = graph(lambda x, s: O.arithmetic_pc_shift(x, s, "HALF_UP"), "int16", "int8", shapes=[(3, 4), (3,)])
    assert accepts("bm1686", narrow)


# ---- INT32 through FLOAT32 (seed: "INT32会被转成FLOAT32来计算") ----------------------------------

def test_int32_arithmetic_goes_through_float32_on_bm1682_and_bm1684_only():
    for name in ("bm1682", "bm1684"):
        assert load(name).support("add").compute == {"int32": "float32"}
    assert load("bm1686").support("add").compute == {}
    g = graph(lambda x: O.adds(x, 0), "int32")
    x = np.array([[2**24 + 1, 3, -(2**24) - 1], [7, 2**30 + 1, 0]], np.int32)
    rounded = x.astype(np.float32).astype(np.int32)
    assert not np.array_equal(rounded, x)
    np.testing.assert_array_equal(sim.run(g, "bm1684", {"x0": x}).outputs["y"], rounded)
    np.testing.assert_array_equal(sim.run(g, "bm1682", {"x0": x}).outputs["y"], rounded)
    np.testing.assert_array_equal(sim.run(g, "bm1686", {"x0": x}).outputs["y"], x)


@pytest.mark.parametrize("name, build, in_dtypes", [
    ("bm1686", lambda a, b: O.add(a, b), ("float16", "float16")),
    ("bm1686", lambda a, b: O.max(a, b), ("uint32", "uint32")),
    ("bm1686", lambda x: O.requant_fp32_to_int(x, scale_val=8.0, mode=0, out_dtype="int8"), ("float32",)),
    ("bm1682", lambda a, b: O.div(a, b), ("float32", "float32")),
    ("bm1682", lambda x: O.cast(x, out_dtype="uint8"), ("float32",)),
    ("bm1684", lambda a, b: O.mul_shift(a, b, 3, out_dtype="int8"), ("int16", "int8")),
])
def test_accepted_combinations_run_on_the_machine(name, build, in_dtypes):
    """A row's dtypes are ones the machine can run and price, not just ones the table accepts."""
    g = graph(build, *in_dtypes)
    rng = np.random.default_rng(0)
    inputs = {}
    for i, d in enumerate(in_dtypes):
        if dtypes.is_int(d):
            lo, hi = dtypes.int_range(d)
            inputs[f"x{i}"] = rng.integers(max(lo, -100), min(hi, 100), SHAPE, endpoint=True).astype(dtypes.np_dtype(d))
        else:
            inputs[f"x{i}"] = (rng.standard_normal(SHAPE) + 3).astype(dtypes.np_dtype(d))
    res = sim.run(g, name, inputs)
    assert res.cycles > 0 and res.outputs["y"].shape == SHAPE
