"""Converting DMAs (a DMA that applies an element-wise function on the way, as an Ascend FixPipe
quantizes, casts and rectifies what leaves L0C) and the matrix templates' epilogue done by one
(isa/lower/templates/in_flight.py): values, exact cycles, traffic, and the errors."""

from itertools import pairwise

import numpy as np
import pytest
from conftest import TEST_CHIPS
from hypothesis import given, settings
from hypothesis import strategies as st

import chips
import isa
import sim
from isa.errors import ConfigError
from isa.instructions import Dma, Matmul, Region, dense, instr_text, parse_instr
from isa.ops import REGISTRY
from sim.run import configure

CONVERTING = """.program chip=tiny graph=hand
.input x ddr@0x0:int32[16;1]
.output y ddr@0x100:int8[16;1]
.engine gdma
gdma.0 dma src=ddr@0x0:int32[16;1] dst=lmem@0x0:int32[16;1]
gdma.1 dma src=lmem@0x0:int32[16;1] dst=ddr@0x100:int8[16;1] fn=rshift cdt=int64 args=2,5
"""


def tiny(**overrides):
    return chips.load(TEST_CHIPS / "tiny.yaml", {"engines.gdma.bandwidth": 16, **overrides})


def test_a_converting_dma_stores_the_function_of_what_it_reads_and_its_narrow_side_moves_fewer_bytes():
    chip = tiny(**{"engines.gdma.converts": "[rshift]"})
    program = isa.Program.from_text(CONVERTING)
    x = np.linspace(-1000, 1000, 16).astype(np.int32)
    res = sim.execute(program, chip, {"x": x})
    # ROUNDING_HALF_UP (5) of x / 4, saturated to int8
    np.testing.assert_array_equal(res.outputs["y"], np.clip(np.floor(x / 4 + 0.5), -128, 127).astype(np.int8))
    # the load: 64 B at DDR's 4 B/cycle, 10 + 16; the store: 64 B read from lmem, 16 written to
    # DDR, so DDR carries a quarter of the bytes and the engine's 16 B/cycle sets the pace: 10 + 4
    assert [(e.name, e.start, e.end, e.bytes) for e in res.trace.events] == [("dma", 0, 26, 64), ("dma.rshift", 26, 40, 16)]
    assert res.stats.ddr_write_bytes == 16
    series = res.trace.counters["ddr.write"]
    assert sum(v * (b - a) for (a, v), (b, _) in zip(series, series[1:] + [(res.cycles, 0)])) == pytest.approx(16)
    assert sim.execute(program, chip, mode="timing").cycles == res.cycles == 40
    # an engine's bandwidth counts the bytes it writes: at 2 B/cycle, the store's 16 take 8 cycles
    slow = tiny(**{"engines.gdma.converts": "[rshift]", "engines.gdma.bandwidth": 2, "memories.ddr.bandwidth": 64})
    assert [(e.start, e.end) for e in sim.execute(program, slow, mode="timing").trace.events] == [(0, 42), (42, 60)]


def test_a_converting_dma_reads_as_text_and_back():
    instr = Dma(dense("l0c", 64, "float32", (4, 8)), dense("ddr", 0, "float16", (4, 8)), "mm", "mul", (0.5,), "float32")
    line = instr_text("fixpipe.3", instr)
    assert line == "fixpipe.3 dma src=l0c@0x40:float32[4,8;8,1] dst=ddr@0x0:float16[4,8;8,1] fn=mul cdt=float32 args=0.5 op=mm"
    assert parse_instr(line.split()[1:], "here") == instr


@pytest.mark.parametrize("converts, line, message", [
    ("[]", "gdma.1 dma src=lmem@0x0:int32[16;1] dst=ddr@0x100:int8[16;1] fn=rshift cdt=int64 args=2,5",
     r"engine gdma does not convert with rshift \(it converts nothing\)"),
    ("[relu]", "gdma.1 dma src=lmem@0x0:int32[16;1] dst=ddr@0x100:int8[16;1] fn=rshift cdt=int64 args=2,5",
     r"does not convert with rshift \(it converts with relu\)"),
    ("[rshift]", "gdma.1 dma src=lmem@0x0:int32[16;1] dst=ddr@0x100:int8[16;1] fn=rshift cdt=int64 args=2",
     r"converting with rshift takes 2 number\(s\) after its source, got 1"),
    ("[rshift]", "gdma.1 dma src=ddr@0x0:int32[16;1] dst=lmem@0x100:int8[16;1] fn=rshift cdt=int64 args=2,5",
     r"a converting dma reads on-chip memory, not ddr"),
    ("[rshift]", "gdma.1 dma src=lmem@0x0:int32[16;1] dst=ddr@0x100:int8[16;1] fn=reduce_sum cdt=int64",
     r"a dma converts with an element-wise function .* not 'reduce_sum'"),
    ("[rshift]", "gdma.1 dma src=lmem@0x0:int32[16;1] dst=ddr@0x100:int8[16;1] fn=add cdt=int64 args=lmem@0x0:int32[16;1]",
     r"a converting dma's args are numbers"),
    ("[rshift]", "gdma.1 dma src=lmem@0x0:int32[16;1] dst=ddr@0x100:int8[16;1]", r"differ in shape or width"),
])
def test_bad_converting_dmas_are_program_errors(converts, line, message):
    text = CONVERTING.rsplit("\n", 2)[0] + "\n" + line + "\n"
    with pytest.raises(isa.ProgramError, match=message):
        sim.execute(isa.Program.from_text(text), tiny(**{"engines.gdma.converts": converts}), mode="timing")


@pytest.mark.parametrize("key, value, message", [
    ("engines.gdma.converts", "[reduce_max]", r"a dma converts with an element-wise function .* not 'reduce_max'"),
    ("engines.gdma.converts", "relu", r"expected a list"),
    ("engines.tiu.converts", "[relu]", r"'converts' belongs to dma engines"),
])
def test_bad_converts_keys_are_config_errors(key, value, message):
    with pytest.raises(ConfigError, match=message):
        chips.load(TEST_CHIPS / "tiny.yaml", {key: value})


# ---- the epilogue on the way out of L0C -------------------------------------------------------

def _ascend(name, dtype, converts=True, cores=None):
    """The chip with the op rows a product, a convolution and an activation in dtype need (as
    bench/roofline adds them), FixPipe converting or not; all its cores, or as many as given."""
    point = {f"ops.{op}": {"dtypes": [dtype]} for op in ("matrix_mul", "conv", "active")}
    if not converts:
        point["engines.fixpipe.converts"] = "[]"
    if cores is not None:
        point["cores"] = cores
    return configure(name, point)[0]


def _graphs(dtype):
    g = isa.Graph("mm")
    g.output(isa.ops.matrix_mul(g.input("x", (80, 160), dtype), g.input("w", (160, 48), dtype),
                                scale=0.25 if dtype == "int8" else 1.0), "y")
    c = isa.Graph("conv")
    quant = {"scale": 1 / 8} if dtype == "int8" else {}
    c.output(isa.ops.conv(c.input("x", (1, 24, 10, 12), dtype), c.input("w", (40, 24, 3, 3), dtype),
                          pad_h_t=1, pad_h_b=1, pad_w_l=1, pad_w_r=1, **quant), "y")
    return g, c


def _inputs(graph, seed):
    rng = np.random.default_rng(seed)
    out = {}
    for name in ("x", "w"):
        t = graph.tensors[name]
        out[name] = (rng.integers(-128, 128, t.shape)
                     if t.dtype == "int8" else rng.standard_normal(t.shape)).astype(isa.dtypes.np_dtype(t.dtype))
    return out


@pytest.mark.parametrize("name", ["ascend310b", "ascend910b"])
@pytest.mark.parametrize("dtype", ["int8", "float16"])
def test_fixpipe_does_the_epilogue_of_products_and_convolutions(name, dtype):
    for k, graph in enumerate(_graphs(dtype)):
        inputs = _inputs(graph, k)
        node = graph.nodes[0]
        want = REGISTRY[node.op].reference([inputs["x"], inputs["w"]], node.params)[0]
        res = sim.run(graph, _ascend(name, dtype), inputs)
        if dtype == "int8":
            np.testing.assert_array_equal(res.outputs["y"], want)
        else:
            np.testing.assert_allclose(res.outputs["y"].astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=2e-3)
        fixpipe = [e for e in res.trace.events if e.kind == "dma" and e.engine.endswith("fixpipe")]
        assert fixpipe and all(e.dst in ("ddr", "l2") for e in fixpipe)
        assert {e.name for e in fixpipe} == ({"dma.rshift"} if dtype == "int8" else {"dma.copy"})
        assert sum(e.bytes for e in fixpipe) == want.nbytes  # every result byte, written once, by FixPipe
        assert not [e for e in res.trace.events if e.kind == "vector"]
        assert sim.run(graph, _ascend(name, dtype), mode="timing").cycles == res.cycles
        # without it the vector core does the epilogue: the same values, later
        plain = sim.run(graph, _ascend(name, dtype, converts=False), inputs)
        np.testing.assert_array_equal(plain.outputs["y"], res.outputs["y"]) if dtype == "int8" else None
        assert [e for e in plain.trace.events if e.kind == "vector"]
        assert res.cycles < plain.cycles


def test_an_integer_bias_is_still_added_on_the_vector_core():
    """An int8 product's bias and requantization are two steps: the vector core adds the bias,
    FixPipe only hands the accumulator over."""
    chip = configure("ascend310b", {"ops.matrix_mul": {"signatures": ["int8, int8, int16 -> int8"]}})[0]
    g = isa.Graph("mm")
    b = g.constant("b", np.arange(-24, 24, dtype=np.int16).reshape(1, 48))
    g.output(isa.ops.matrix_mul(g.input("x", (32, 64), "int8"), g.input("w", (64, 48), "int8"), bias=b, scale=0.25), "y")
    inputs = _inputs(g, 3)
    res = sim.run(g, chip, inputs)
    want = REGISTRY["matrix_mul"].reference([inputs["x"], inputs["w"], g.constants["b"]], g.nodes[0].params)[0]
    np.testing.assert_array_equal(res.outputs["y"], want)
    assert "add" in {e.name for e in res.trace.events if e.kind == "vector"}
    assert {e.name for e in res.trace.events if e.engine == "fixpipe" and e.kind == "dma"} == {"dma"}  # L0C to UB, as it is
    assert not [e for e in res.trace.events if e.kind == "dma" and e.dst == "bt"]


def test_on_the_910b_an_int8_output_tile_is_bounded_by_l0c_not_the_ub():
    """Without the UB in the way, an output tile takes L0C (128 KiB): one 128x256 int32
    accumulator, which FixPipe empties while the next tile's operands load (or two of 128x128).
    The UB (192 KiB) held only a 64x128 tile with its copy, its int8 result and the
    requantization's scratch. One core shows it: each core tiles its own share alike."""
    g = isa.Graph("mm")
    g.output(isa.ops.matrix_mul(g.input("x", (512, 4096), "int8"), g.input("w", (4096, 512), "int8")), "y")

    def tile(chip):
        note = next(n for n in isa.lower(g, chip).notes if n.startswith("tiling"))
        tm, tn = note.split("output tile ")[1].split(",")[0].split("x")
        return int(tm) * int(tn), "one accumulator" in note

    assert tile(_ascend("ascend910b", "int8", cores=1)) == (128 * 256, True)
    assert tile(_ascend("ascend910b", "int8", converts=False, cores=1)) == (64 * 128, False)


@pytest.mark.parametrize("dtype, parts", [("int8", 2), ("float16", 4)])
def test_fixpipe_drains_one_accumulator_in_parts_while_the_cube_goes_on(dtype, parts):
    """With one accumulator, a tile's last product and the next tile's first run in parts of
    rows: FixPipe drains each part while the cube does the next, and the next tile's first
    product waits part by part only for that part's drain, so the cube never waits for FixPipe.
    A float32 accumulator takes twice as long to drain as an int32 one written as int8 (its
    float16 result is twice the bytes): it is cut finer, in four parts against two."""
    chip = configure("ascend910b", {"cores": 1, "ops.matrix_mul": {"dtypes": [dtype]}})[0]
    g = isa.Graph("mm")
    g.output(isa.ops.matrix_mul(g.input("x", (256, 512), dtype), g.input("w", (512, 512), dtype),
                                scale=0.25 if dtype == "int8" else 1.0), "y")
    program = isa.lower(g, chip)
    note = next(n for n in program.notes if n.startswith("tiling"))
    assert "output tile 128x256" in note and "one accumulator" in note
    inputs = _inputs(g, 5)
    res = sim.execute(program, chip, inputs)
    want = REGISTRY["matrix_mul"].reference([inputs["x"], inputs["w"]], g.nodes[0].params)[0]
    if dtype == "int8":
        np.testing.assert_array_equal(res.outputs["y"], want)
    else:
        np.testing.assert_allclose(res.outputs["y"].astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=2e-3)
    assert sim.execute(program, chip, mode="timing").cycles == res.cycles
    # the estimate runs the parts as the machine does
    estimated = float(note.split("estimated ")[1].split()[0].replace(",", ""))
    assert estimated == res.cycles
    # the accumulator's parts are buffers of their own in the program's memory map
    assert sum(b.name.startswith("matrix_mul_0/acc.0[") for b in program.buffers) == parts
    cube = [e for e in res.trace.events if e.engine == "cube" and e.kind != "wait"]
    drains = [e for e in res.trace.events if e.engine == "fixpipe" and e.kind == "dma"]
    # 4 tiles of 512 / tk K steps, the first and last of each in parts; each part drained on its own
    steps = 512 // int(note.split(" K ")[1].split()[0])
    assert len(cube) == 4 * (steps + 2 * (parts - 1)) and len(drains) == 4 * parts
    assert {e.bytes for e in drains} == {128 // parts * 256 * want.itemsize}
    # from its first product on, the cube is never idle: no product waits for a drain to end
    assert all(b.start == a.end for a, b in pairwise(cube))
    # and each tile's drains but its last part's run beside the cube's products
    for drain in drains:
        if drain.end < cube[-1].end:
            assert any(e.start < drain.end and drain.start < e.end for e in cube)


@settings(max_examples=8, deadline=None)
@given(m=st.integers(100, 700), k=st.integers(64, 900), n=st.integers(100, 700), dtype=st.sampled_from(["int8", "float16"]),
       seed=st.integers(0, 2**16))
def test_products_of_any_shape_are_exact_with_their_accumulator_in_parts(m, k, n, dtype, seed):
    """Edge tiles (fewer rows or columns than the tiling's), a kept left block, a float bias in
    the BiasTable: the values are the reference's, and timing mode gives the same cycles."""
    chip = configure("ascend910b", {"cores": 1, "ops.matrix_mul": {"dtypes": [dtype]}})[0]
    rng = np.random.default_rng(seed)
    g = isa.Graph("mm")
    params = {"scale": 0.25} if dtype == "int8" else {"bias": g.constant("b", rng.standard_normal((1, n)).astype(np.float16))}
    g.output(isa.ops.matrix_mul(g.input("x", (m, k), dtype), g.input("w", (k, n), dtype), **params), "y")
    inputs = _inputs(g, seed)
    program = isa.lower(g, chip)
    res = sim.execute(program, chip, inputs)
    want = REGISTRY["matrix_mul"].reference([inputs["x"], inputs["w"], *g.constants.values()], g.nodes[0].params)[0]
    if dtype == "int8":
        np.testing.assert_array_equal(res.outputs["y"], want)
    else:
        np.testing.assert_allclose(res.outputs["y"].astype(np.float32), want.astype(np.float32), rtol=3e-3, atol=3e-2)
    assert sim.execute(program, chip, mode="timing").cycles == res.cycles


# A converting DMA is the vector function of that name on the way: the same bytes as the vector
# unit computing it in local memory and a plain DMA storing the result.
FUNCTIONS = {  # fn -> numbers after the source, drawn for a source dtype
    "copy": lambda d: (),
    "relu": lambda d: (),
    "mul": lambda d: (st.floats(-4, 4, width=32) if d == "float32" else st.integers(-9, 9),),
    "add": lambda d: (st.floats(-100, 100, width=32) if d == "float32" else st.integers(-300, 300),),
    "max": lambda d: (st.integers(-50, 50),),
    "rshift": lambda d: (st.integers(0, 12), st.sampled_from(sorted(isa.dtypes.ROUNDING.values()))),
    "clamp": lambda d: (st.integers(-200, 0), st.integers(0, 200)),
}
SOURCES = {"int32": ("int8", "int16", "int32"), "float32": ("float32", "int8", "int32")}


@st.composite
def conversions(draw):
    src = draw(st.sampled_from(sorted(SOURCES)))
    fn = draw(st.sampled_from(sorted(f for f in FUNCTIONS if not (f == "rshift" and src == "float32"))))
    args = tuple(draw(s) for s in FUNCTIONS[fn](src))
    cdt = "float32" if src == "float32" else "int64"
    return src, draw(st.sampled_from(SOURCES[src])), fn, args, cdt, draw(st.integers(1, 40))


@settings(max_examples=60, deadline=None)
@given(conversions(), st.integers(0, 2**31))
def test_a_converting_dma_stores_what_the_vector_unit_computes(case, seed):
    src, dst, fn, args, cdt, n = case
    chip = tiny(**{"engines.gdma.converts": f"[{fn}]", "memories.lmem.size": "4KiB"})
    arg_text = f" args={','.join(map(repr, args))}" if args else ""
    numbers = "".join(f",{a!r}" for a in args)
    text = f""".program chip=tiny graph=hand
.input x ddr@0x0:{src}[{n};1]
.output y ddr@0x200:{dst}[{n};1]
.output z ddr@0x400:{dst}[{n};1]
.engine gdma
.engine tiu
gdma.0 dma src=ddr@0x0:{src}[{n};1] dst=lmem@0x0:{src}[{n};1]
gdma.1 dma src=lmem@0x0:{src}[{n};1] dst=ddr@0x200:{dst}[{n};1] fn={fn} cdt={cdt}{arg_text}
tiu.0 wait on=gdma.0
tiu.1 vector fn={fn} cdt={cdt} dst=lmem@0x800:{dst}[{n};1] src=lmem@0x0:{src}[{n};1]{numbers}
gdma.2 wait on=tiu.1
gdma.3 dma src=lmem@0x800:{dst}[{n};1] dst=ddr@0x400:{dst}[{n};1]
"""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 300).astype(np.float32) if src == "float32" else rng.integers(-70000, 70000, n).astype(np.int32)
    res = sim.execute(isa.Program.from_text(text), chip, {"x": x})
    np.testing.assert_array_equal(res.outputs["y"], res.outputs["z"])


@pytest.mark.parametrize("name", ["ascend310b", "ascend910b"])
def test_fixpipe_casts_and_rectifies_a_convolution_with_its_fused_relu(name):
    """A float16 convolution then ReLU, fused in one layer group: FixPipe stores relu(acc) as
    float16 (ReLU before the cast gives the cast's values after it); no vector instruction."""
    g = isa.Graph("conv_relu")
    x = g.input("x", (1, 16, 12, 12), "float16")
    w = g.constant("w", np.random.default_rng(7).standard_normal((24, 16, 3, 3)).astype(np.float16))
    g.output(isa.ops.active(isa.ops.conv(x, w, pad_h_t=1, pad_h_b=1, pad_w_l=1, pad_w_r=1), "relu"), "y")
    chip = _ascend(name, "float16")
    xv = np.random.default_rng(8).standard_normal((1, 16, 12, 12)).astype(np.float16)
    res = sim.run(g, chip, {"x": xv})
    conv, relu = g.nodes
    want = REGISTRY["active"].reference([REGISTRY["conv"].reference([xv, g.constants["w"]], conv.params)[0]], relu.params)[0]
    np.testing.assert_allclose(res.outputs["y"].astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=2e-3)
    assert (res.outputs["y"] >= 0).all() and (res.outputs["y"] == 0).any()
    assert {e.name for e in res.trace.events if e.kind == "dma" and e.engine.endswith("fixpipe")} == {"dma.relu"}
    assert not [e for e in res.trace.events if e.kind == "vector"]
    assert sim.run(g, chip, mode="timing").cycles == res.cycles


@pytest.mark.parametrize("name", ["ascend310b", "ascend910b"])
@pytest.mark.parametrize("relu", [False, True])
def test_a_float_convolutions_bias_goes_through_the_bias_table(name, relu):
    """MTE1 converts the float16 bias to float32 into the BiasTable, the first mmad of each
    output tile starts from it, and FixPipe casts (and rectifies) on the way out: no vector
    instruction, the reference's values."""
    g = isa.Graph("conv_bias")
    rng = np.random.default_rng(9)
    x = g.input("x", (1, 16, 12, 12), "float16")
    w = g.constant("w", rng.standard_normal((40, 16, 3, 3)).astype(np.float16))
    b = g.constant("b", rng.standard_normal((1, 40, 1, 1)).astype(np.float16))
    y = isa.ops.conv(x, w, b, pad_h_t=1, pad_h_b=1, pad_w_l=1, pad_w_r=1)
    g.output(isa.ops.active(y, "relu") if relu else y, "y")
    chip = _ascend(name, "float16")
    xv = rng.standard_normal((1, 16, 12, 12)).astype(np.float16)
    res = sim.run(g, chip, {"x": xv})
    want = REGISTRY["conv"].reference([xv, g.constants["w"], g.constants["b"]], g.nodes[0].params)[0]
    if relu:
        want = np.maximum(want, 0)
    np.testing.assert_allclose(res.outputs["y"].astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=2e-3)
    dmas = [e for e in res.trace.events if e.kind == "dma"]
    into_table = [e for e in dmas if e.dst.endswith("bt")]
    assert into_table and {e.name for e in into_table} == {"dma.copy"} and all(e.src.endswith("l1") for e in into_table)
    assert sum(e.bytes for e in into_table) >= 40 * 4  # every channel's bias, in float32
    assert {e.name for e in dmas if e.engine.endswith("fixpipe")} == {"dma.relu" if relu else "dma.copy"}
    assert not [e for e in res.trace.events if e.kind == "vector"]
    assert sim.run(g, chip, mode="timing").cycles == res.cycles


def test_a_matmul_bias_reads_as_text_and_back_and_must_have_the_results_shape():
    bias = Region("bt", 0, "float32", (4, 8), (0, 1))
    instr = Matmul(dense("l0a", 0, "float16", (4, 16)), dense("l0b", 0, "float16", (16, 8)), dense("l0c", 0, "float32", (4, 8)), False, "c",
                   bias=bias)
    line = instr_text("cube.0", instr)
    assert line.endswith("bias=bt@0x0:float32[4,8;0,1] op=c")
    assert parse_instr(line.split()[1:], "here") == instr
    chip = chips.load("ascend310b")
    bad = instr_text("cube.0", Matmul(instr.a, instr.b, instr.c, False, "c", bias=Region("bt", 0, "float32", (8,), (1,))))
    with pytest.raises(isa.ProgramError, match=r"bias bt@0x0:float32\[8;1\] does not have the result's shape \(4, 8\)"):
        sim.execute(isa.Program.from_text(".program chip=ascend310b graph=hand\n.engine cube\n" + bad + "\n"), chip, mode="timing")


@pytest.mark.parametrize("name", ["ascend310b", "ascend910b"])
def test_a_float_products_bias_goes_through_the_bias_table(name):
    g = isa.Graph("fc")
    rng = np.random.default_rng(11)
    b = g.constant("b", rng.standard_normal((1, 96)).astype(np.float16))
    g.output(isa.ops.matrix_mul(g.input("x", (40, 64), "float16"), g.input("w", (64, 96), "float16"), bias=b), "y")
    inputs = _inputs(g, 12)
    res = sim.run(g, _ascend(name, "float16"), inputs)
    want = REGISTRY["matrix_mul"].reference([inputs["x"], inputs["w"], g.constants["b"]], g.nodes[0].params)[0]
    np.testing.assert_allclose(res.outputs["y"].astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=2e-3)
    assert [e for e in res.trace.events if e.kind == "dma" and e.dst.endswith("bt")]
    assert not [e for e in res.trace.events if e.kind == "vector"]
    assert sim.run(g, _ascend(name, "float16"), mode="timing").cycles == res.cycles
