"""The Ascend 310B chip (chips/ascend310b.yaml) against docs/sources.md#huawei-ascend (the 310B4
.ini row and the Atlas 200I DK A2 figures): sizes, alignments, peaks, the data movers' routes,
instruction costs worked by hand from the YAML's figures, and its op table (the ATB seeds')."""

import re

import numpy as np
import pytest

import chips
import isa
import sim
from isa.lower.memory.route import route
from sim.cli import main

CHIP = chips.load("ascend310b")
O = isa.ops
KiB = 1024


def test_shipped_and_listed(capsys):
    assert "ascend310b" in chips.available()
    assert chips.load("Ascend310B4").name == "ascend310b"
    assert main(["chips"]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("ascend310b")]
    for text in ("500 MHz", "l2 4 MiB, l1 1 MiB, l0a 64 KiB, l0b 64 KiB, l0c 128 KiB, bt 1 KiB, ub 248 KiB",
                 "25.6 GB/s", "int8 8.19 TOPS", "float16 4.10 TOPS"):
        assert text in row


def test_memories_are_the_ini_row():
    m = CHIP.memories
    assert CHIP.clock_hz == 500e6
    assert {k: (v.capacity, v.align) for k, v in m.items() if k != "ddr"} == {
        "l2": (4096 * KiB, 32), "l1": (1024 * KiB, 32), "l0a": (64 * KiB, 512), "l0b": (64 * KiB, 512),
                                                                              "l0c": (128 * KiB, 64), "bt": (KiB, 64), "ub": (253952, 32),
    }
    assert m["ddr"].capacity == 4 * 2**30
    assert (m["l2"].core, m["l1"].core) == (None, 0)  # the L2 is the chip's (ini l2_size), L1 the core's
    assert m["ddr"].bandwidth * CHIP.clock_hz == pytest.approx(25.6e9)  # LPDDR4X 3200 Mbps x 64 bit


@pytest.mark.parametrize("dtype, macs, peak", [("float16", 4096, 4e12), ("int8", 8192, 8e12)])
def test_cube_peaks_are_the_dk_figures(dtype, macs, peak):
    cube = CHIP.engines["cube"].matrix
    assert (cube.a, cube.b, cube.c) == ("l0a", "l0b", "l0c")
    assert cube.m * cube.n * cube.depth(dtype) / cube.block_cycles[dtype] == macs  # docs/sources.md#ascend-ai-core
    assert macs * 2 * CHIP.clock_hz == pytest.approx(peak, rel=0.05)  # 4 TFLOPS FP16 / 8 TOPS INT8


def test_vector_unit_does_128_float16_per_cycle_in_ub():
    vec = CHIP.engines["vector"]
    assert vec.memory == "ub"
    assert vec.vector.lanes * vec.vector.per_lane["float16"] == 128  # vec_calc_size
    assert vec.vector.lanes * vec.vector.per_lane["float32"] * 4 == 256  # 2048 bits


def test_the_data_movers_routes():
    assert route(CHIP, "ddr", "l0a") == (("mte2", "ddr", "l1"), ("mte1", "l1", "l0a"))
    assert route(CHIP, "ddr", "l0b") == (("mte2", "ddr", "l1"), ("mte1", "l1", "l0b"))
    assert route(CHIP, "ddr", "ub") == (("mte2", "ddr", "ub"),)
    assert route(CHIP, "l0c", "ddr") == (("fixpipe", "l0c", "ddr"),)
    assert route(CHIP, "ub", "ddr") == (("mte3", "ub", "ddr"),)
    assert route(CHIP, "ddr", "ddr") == (("mte2", "ddr", "ub"), ("mte3", "ub", "ddr"))  # no DDR-to-DDR engine
    # the L2: read by MTE2, written by MTE3 and FixPipe, as GM is; no mover fills it from DDR
    assert route(CHIP, "l2", "l0a") == (("mte2", "l2", "l1"), ("mte1", "l1", "l0a"))
    assert route(CHIP, "l0c", "l2") == (("fixpipe", "l0c", "l2"),)
    assert route(CHIP, "ub", "l2") == (("mte3", "ub", "l2"),)
    assert CHIP.engines["aicpu"].kinds == ("scalar",)


PROGRAM = """.program chip=ascend310b graph=t
.engine {engine}
{engine}.0 {instr}
"""


def cycles(engine, instr):
    program = isa.Program.from_text(PROGRAM.format(engine=engine, instr=instr))
    return sim.execute(program, CHIP, mode="timing").cycles


@pytest.mark.parametrize("a, b, c, want", [
    # issue 8 + folds x ceil(K / depth) x block_cycles 1 (fill_drain 0): depth 16 for float16, 32 for int8
    ("l0a@0x0:float16[16,32;32,1]", "l0b@0x0:float16[32,16;16,1]", "l0c@0x0:float32[16,16;16,1]", 8 + 1 * 2),
    ("l0a@0x0:float16[32,64;64,1]", "l0b@0x0:float16[64,48;48,1]", "l0c@0x0:float32[32,48;48,1]", 8 + 6 * 4),
    ("l0a@0x0:float16[16,48;48,1]", "l0b@0x0:float16[48,16;16,1]", "l0c@0x0:float32[16,16;16,1]", 8 + 1 * 3),  # not 2 blocks of 32
    ("l0a@0x0:int8[16,32;32,1]", "l0b@0x0:int8[32,16;16,1]", "l0c@0x0:int32[16,16;16,1]", 8 + 1 * 1),
    ("l0a@0x0:int8[16,48;48,1]", "l0b@0x0:int8[48,16;16,1]", "l0c@0x0:int32[16,16;16,1]", 8 + 1 * 2),
])
def test_cube_cost_by_hand(a, b, c, want):
    assert cycles("cube", f"matmul a={a} b={b} c={c} acc=0") == want


def test_vector_and_mte2_costs_by_hand():
    # 1000 float16: issue 8 + ceil(1000 / 128)
    assert cycles("vector",
                  "vector fn=add cdt=float32 dst=ub@0x0:float16[1000;1] src=ub@0x0:float16[1000;1],ub@0x800:float16[1000;1]") == 8 + 8
    # 4096 B from DDR to UB: mte2's 20 fixed cycles (the DDR's and UB's latencies are 0), then
    # 4096 B at the least of mte2's 256, the DDR's 51.2 and UB's 128 B/cycle: ceil(4096 / 51.2) = 80
    assert cycles("mte2", "dma src=ddr@0x0:float16[2048;1] dst=ub@0x0:float16[2048;1]") == 20 + 80
    # 4096 B from the L2 to L1: 20, then at the least of mte2's 256, the L2's 256 and L1's 512: 16
    assert cycles("mte2", "dma src=l2@0x0:float16[2048;1] dst=l1@0x0:float16[2048;1]") == 20 + 16


def test_op_table_is_the_atb_seeds_and_the_aclnn_rows():
    # and the fused attention template's own steps, marked [U] (CANN lists its fused attention for A2 only)
    assert set(CHIP.ops) == {"gather", "masked_fill", "fill", "mul", "div", "softmax", "attention"}
    assert all(CHIP.support(op).dtypes == {"float16", "float32"} for op in ("mul", "div", "softmax"))  # no bfloat16 on 310B
    assert CHIP.support("fill").dtypes == {"float16", "int32", "bfloat16"}
    (gather,) = CHIP.support("gather").signatures
    assert gather.inputs == ({"float16"}, {"int64", "int32", "uint32"})  # seed 001: x float16 only here
    masked = CHIP.support("masked_fill").signatures
    assert {d for sig in masked for d in sig.output} == {"float16", "int32", "bfloat16"}
    assert all(set(sig.inputs[1]) == {"int8", "bool"} for sig in masked)
    priced = set(CHIP.engines["vector"].vector.per_lane)
    assert all(set(sig.inputs[0]) | set(sig.inputs[1]) <= priced for sig in masked)


def test_other_ops_are_rejected():
    g = isa.Graph("t")
    x = g.input("x", (4,), "float16")
    g.output(O.add(x, x), "y")
    with pytest.raises(isa.UnsupportedError, match=r"add with float16 x float16 -> float16 is not "
                                                   r"supported on chip ascend310b \(the chip has no add"):
        isa.lower(g, CHIP)


def test_the_three_ops_run():
    x = np.arange(12, dtype=np.float16).reshape(3, 4)
    g = isa.Graph("t")
    xt = g.input("x", x.shape, "float16")
    picked = O.gather(xt, np.array([3, 1], np.int32), axis=1)
    g.output(picked, "picked")
    g.output(O.masked_fill(xt, np.array([1, 0, 0, 1], np.int8), 9), "masked")
    with g:
        g.output(O.fill([2, 2], [5], "int32"), "filled")
    res = sim.run(g, CHIP, {"x": x})
    np.testing.assert_array_equal(res.outputs["picked"], x[:, [3, 1]])
    np.testing.assert_array_equal(res.outputs["masked"], np.where([1, 0, 0, 1], np.float16(9), x))
    np.testing.assert_array_equal(res.outputs["filled"], np.full((2, 2), 5, np.int32))
    assert {e.engine for e in res.trace.events if e.kind != "wait"} == {"mte2", "mte3", "vector"}


@pytest.mark.parametrize("cache", [False, True])
def test_a_matrix_product_keeps_its_left_row_block_in_l1_and_cuts_l0a_tiles_from_it(cache):
    """The matrix template keeps a row's left block where the way into L0A stages (L1): MTE2
    brings it from GM once, MTE1 cuts each step's L0A tile from it; values and traffic show it.
    The right operand comes again for every row block: from DDR without the L2 cache, from the
    L2 (each byte read from DDR once) with it."""
    chip = chips.load("ascend310b", {"ops.matrix_mul": {"dtypes": ["float16"]}, "memories.l2.cache": cache})
    rng = np.random.default_rng(3)
    g = isa.Graph("kept_l1")
    with g:
        x = g.input("x", (512, 512), "float16")
        w = g.constant("w", (rng.standard_normal((512, 512)) * 0.05).astype(np.float16))
        g.output(isa.ops.matrix_mul(x, w), "y")
    prog = isa.lower(g, chip)
    (note,) = [n for n in prog.notes if n.startswith("tiling")]
    assert "the left row block kept" in note
    xv = rng.standard_normal((512, 512)).astype(np.float16)
    result = sim.execute(prog, chip, {"x": xv})
    tm = int(re.search(r"output tile (\d+)x", note).group(1))
    # x crosses GM once; w once per row block, from DDR the first time and from the cache after
    w = g.constants["w"].nbytes
    assert 512 // tm > 1
    assert result.stats.ddr_read_bytes == xv.nbytes + (1 if cache else 512 // tm) * w
    assert result.stats.cache_hit_bytes == (512 // tm - 1) * w * cache
    assert any(e.kind == "dma" and (e.src, e.dst) == ("l1", "l0a") for e in result.trace.events)
    expected = xv.astype(np.float32) @ g.constants["w"].astype(np.float32)
    np.testing.assert_allclose(result.outputs["y"].astype(np.float32), expected, rtol=2e-2, atol=2e-2)
