"""The placement policy (isa.Policy): each knob changes the lowered program in the way it says,
and what that does to cycles and to peak memory is what the machine measures. Every run checks
the outputs against the references and that timing mode gives functional mode's cycles."""

import math
from pathlib import Path

import numpy as np
import pytest
from refeval import evaluate

import chips
import isa
import sim
from isa import graphfile
from isa.lower.memory.alloc import Allocator
from isa.lower.policy import policy_from_overrides
from isa.lower.schedule.fusion import groups
from sim.cli import main

O = isa.ops
CHIPS = {name: chips.load(name) for name in ("generic", "bm1684")}
# the tilings these tests measured, with bm1684's output channels on the EU side (on the lanes its
# 16-channel products cost twice and the estimate picks other tiles)
BM1684_CHANNELS_ON_EUS = chips.load("bm1684", {"engines.tiu.matrix.conv_channels_on_m": False})
MLP_FILE = Path(__file__).resolve().parents[1] / "examples" / "mlp.yaml"


def run(graph, inputs, chip, **knobs):
    """Functional run under Policy(**knobs): outputs equal the references, timing mode's
    cycles equal functional mode's."""
    res = sim.run(graph, chip, inputs, policy=isa.Policy(**knobs))
    for name, want in evaluate(graph, inputs, chip).items():
        np.testing.assert_allclose(res.outputs[name], want, rtol=1e-4, atol=1e-5)
    assert sim.execute(res.program, chip, mode="timing").cycles == res.cycles
    return res


def instructions(prog, kind=None):
    return [i for s in prog.streams.values() for i in s if kind is None or i.kind == kind]


def binding(prog, name):
    return next(b for b in prog.bindings if b.name == name)


def stores_to(prog, name):
    """The DMAs writing into the home of output `name`."""
    region = binding(prog, name).region
    lo, hi = region.span()
    return [i for i in instructions(prog, "dma") if i.dst.mem == region.mem and lo <= i.dst.addr < hi]


def reads_from(prog, region, vector=False):
    """The DMAs reading region, and with vector=True the vector instructions too (a tail reads
    an operand in the vector memory in place)."""
    lo, hi = region.span()
    inside = lambda r: isinstance(r, isa.instructions.Region) and r.mem == region.mem and lo <= r.addr < hi  # noqa: E731
    found = [i for i in instructions(prog, "dma") if inside(i.src)]
    return found + ([i for i in instructions(prog, "vector") if any(map(inside, i.srcs))] if vector else [])


# ---- graphs ------------------------------------------------------------------------------------

def mlp():
    """x @ w + b, relu, three times: matmul groups and element-wise groups in turn."""
    rng = np.random.default_rng(0)
    g = isa.Graph("mlp")
    h = g.input("x", (16, 128), "float32")
    for i, n in enumerate((128, 128, 64)):
        w = g.constant(f"w{i}", (rng.standard_normal((h.shape[1], n)) * 0.1).astype(np.float32))
        b = g.constant(f"b{i}", rng.standard_normal((1, n)).astype(np.float32))
        h = O.active(O.add(O.matrix_mul(h, w), b), "relu")
    g.output(h, "y")
    return g, {"x": rng.standard_normal((16, 128)).astype(np.float32)}


def convs(layers=2):
    """conv 3x3 + bias + relu, `layers` times: one layer group each when fused."""
    rng = np.random.default_rng(1)
    g = isa.Graph("convs")
    h = g.input("x", (1, 16, 32, 32), "float32")
    for i in range(layers):
        w = g.constant(f"w{i}", (rng.standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32))
        b = g.constant(f"b{i}", rng.standard_normal((1, 16, 1, 1)).astype(np.float32))
        h = O.active(O.add(O.conv(h, w, pad_h_t=1, pad_h_b=1, pad_w_l=1, pad_w_r=1), b), "relu")
    g.output(h, "y")
    return g, {"x": rng.standard_normal((1, 16, 32, 32)).astype(np.float32)}


def elementwise():
    """One element-wise group over 256 KiB, compute-heavy enough for loads to hide behind."""
    g = isa.Graph("ew")
    x = g.input("x", (256, 256), "float32")
    g.output(O.active(O.muls(O.adds(x, 1.0), 0.5), "tanh"), "y")
    return g, {"x": np.random.default_rng(2).standard_normal((256, 256)).astype(np.float32)}


def mixed():
    """Every kind of template, with a sort (the scalar engine, DDR operands) at the end."""
    rng = np.random.default_rng(3)
    g = isa.Graph("mixed")
    x = g.input("x", (1, 4, 12, 12), "float32")
    w = g.constant("w", (rng.standard_normal((8, 4, 3, 3)) * 0.2).astype(np.float32))
    b = g.constant("b", rng.standard_normal((1, 8, 1, 1)).astype(np.float32))
    h = O.active(O.add(O.conv(x, w, pad_h_t=1, pad_h_b=1, pad_w_l=1, pad_w_r=1), b), "relu", name="relu")
    h = O.pool(h, kernel_h=2, kernel_w=2, stride_h=2, stride_w=2, pooling_type="MAX", name="pool")
    h = O.softmax(h, 1, name="softmax")
    h = O.interpolate(h, size=(12, 12), name="resize")
    h = O.permute(h, [0, 2, 3, 1], name="permute")  # (1, 12, 12, 8)
    h = O.reshape(h, [144, 8], name="flat")
    m = O.matrix_mul(h, g.constant("m", (rng.standard_normal((8, 16)) * 0.3).astype(np.float32)), name="fc")
    g.output(O.sort(m, 1, name="sort")[1], "sorted")
    return g, {"x": rng.standard_normal((1, 4, 12, 12)).astype(np.float32)}


# ---- fuse and max_group ------------------------------------------------------------------------

def test_fuse_off_splits_every_op_and_costs_ddr_traffic_and_cycles():
    g, x = convs()
    chip = CHIPS["bm1684"]
    fused, unfused = run(g, x, chip, chain=False), run(g, x, chip, fuse=False)
    assert len(groups(g, chip, isa.Policy())) == 2 and len(groups(g, chip, isa.Policy(fuse=False))) == 6
    out = 16 * 32 * 32 * 4
    assert fused.stats.ddr_write_bytes == 2 * out and unfused.stats.ddr_write_bytes == 6 * out
    assert unfused.cycles > 1.5 * fused.cycles  # measured 27,560 against 10,607
    assert unfused.stats.peak_bytes["ddr"] > fused.stats.peak_bytes["ddr"]  # intermediates in DDR
    assert unfused.stats.peak_bytes["lmem"] < fused.stats.peak_bytes["lmem"]  # no tail tiles beside the conv's


def test_max_group_caps_layer_groups():
    g, x = convs()
    chip = CHIPS["bm1684"]
    whole, capped = run(g, x, chip, chain=False), run(g, x, chip, max_group=2, chain=False)
    assert [len(grp.nodes) for grp in groups(g, chip, isa.Policy(max_group=2))] == [2, 1, 2, 1]
    assert [len(grp.nodes) for grp in groups(g, chip, isa.Policy(max_group=3))] == [3, 3]
    out = 16 * 32 * 32 * 4
    assert capped.stats.ddr_write_bytes == whole.stats.ddr_write_bytes + 2 * out  # conv+add results go out and back
    assert capped.stats.ddr_read_bytes == whole.stats.ddr_read_bytes + 2 * out
    assert capped.cycles > whole.cycles  # measured 18,288 against 10,607
    assert capped.stats.peak_bytes["ddr"] > whole.stats.peak_bytes["ddr"]


# ---- double_buffer and pipeline_steps ----------------------------------------------------------

@pytest.mark.parametrize("chip", ["generic", "bm1684"])
def test_double_buffer_places_two_slots_and_overlaps(chip):
    g, x = elementwise()
    chip = CHIPS[chip]
    double, single = run(g, x, chip, max_tile={"n": 64}), run(g, x, chip, max_tile={"n": 64}, double_buffer=False)
    assert {b.name for b in double.program.buffers} == {"adds_0/x.0", "adds_0/x.1"}
    assert {b.name for b in single.program.buffers} == {"adds_0/x.0"}
    assert len(instructions(double.program, "dma")) == len(instructions(single.program, "dma")) == 8  # the same 4 tiles
    assert double.stats.peak_bytes["lmem"] == 2 * single.stats.peak_bytes["lmem"] == 2 * 64 * 256 * 4
    assert double.cycles < single.cycles  # generic 8,942 against 10,464; bm1684 10,616 against 11,464


def test_pipeline_steps_cut_work_that_fits_into_overlapping_steps():
    g, x = elementwise()
    chip = CHIPS["generic"]
    one, four = run(g, x, chip, pipeline_steps=1), run(g, x, chip)
    assert len(instructions(one.program, "dma")) == 2 and len(instructions(four.program, "dma")) == 8
    assert one.stats.peak_bytes["lmem"] == 2 * four.stats.peak_bytes["lmem"] == 256 * 256 * 4
    assert four.cycles < one.cycles  # measured 8,942 against 9,528


# ---- max_tile ----------------------------------------------------------------------------------

def test_max_tile_cuts_spatial_tiles():
    g, x = convs()
    chip = BM1684_CHANNELS_ON_EUS
    whole, rows = run(g, x, chip), run(g, x, chip, max_tile={"h": 4})
    assert max(d.dst.shape[2] for d in stores_to(whole.program, "y")) == 16  # the estimate's choice: two tiles pipeline
    assert max(d.dst.shape[2] for d in stores_to(rows.program, "y")) == 4
    assert len(stores_to(rows.program, "y")) == 8
    assert len(rows.program) > 3 * len(whole.program)  # measured 192 against 48
    assert rows.stats.peak_bytes["lmem"] < whole.stats.peak_bytes["lmem"]
    assert rows.cycles > whole.cycles  # measured 20,902 against 9,285


def test_max_tile_limits_a_matrix_product_in_n_c_and_k():
    g, x = mlp()
    chip = CHIPS["generic"]
    free, capped = run(g, x, chip), run(g, x, chip, max_tile={"n": 8, "c": 32, "k": 32})
    assert {i.dims() for i in instructions(free.program, "matrix")} == {(16, 128, 32)}  # (M, K, N): the estimate's choice
    assert {i.dims() for i in instructions(capped.program, "matrix")} == {(8, 32, 32)}
    # two blocks of 8 rows read every weight twice
    weight_bytes = sum(g.constants[f"w{i}"].nbytes for i in range(3))
    assert capped.stats.ddr_read_bytes - free.stats.ddr_read_bytes >= weight_bytes  # measured 375,296 against 211,200
    assert capped.stats.peak_bytes["lmem"] < free.stats.peak_bytes["lmem"]  # 14,336 against 45,056
    assert capped.cycles > free.cycles  # 26,154 against 11,016


@pytest.mark.parametrize("output, knob, limits", [
    ("relu", {"n": 1, "c": 2, "h": 3, "w": 5, "k": 2}, (1, 2, 3, 5)),  # conv + tail; k below
    ("pool", {"c": 3, "w": 2}, (1, 3, 6, 2)),
    ("softmax", {"h": 2, "c": 1}, (1, 8, 2, 6)),  # a reduction over c keeps c whole: n, h, w are tiled
    ("resize", {"c": 2}, (2, 12, 12)),  # blocks of planes (n x c), each plane whole
    ("fc", {"n": 16, "c": 4}, (16, 4)),  # a matrix product's M is "n", N is "c"
])
def test_every_tiled_template_honours_max_tile(output, knob, limits):
    g, x = mixed()
    g.output(g.tensors[output], "probe")  # the tensor in question, also returned
    res = run(g, x, CHIPS["generic"], max_tile=knob)
    stores = stores_to(res.program, "probe")
    for i, limit in enumerate(limits):
        assert max(d.dst.shape[i] for d in stores) == limit, [d.dst.shape for d in stores]
    if "k" in knob:
        ks = {i.dims()[1] for i in instructions(res.program, "matrix") if i.op == "conv_0"}
        assert ks == {2 * 9}  # blocks of two input channels, times the 3x3 kernel


# ---- pinned ------------------------------------------------------------------------------------

@pytest.mark.parametrize("chip", ["generic", "bm1684"])
def test_pinned_weights_live_on_chip_and_cost_no_ddr_reads(chip):
    g, x = mlp()
    chip = CHIPS[chip]
    pins = ("w0", "w1", "w2", "b0", "b1", "b2")
    tiles = {"n": 16, "c": 128, "k": 64}  # the same tiling both ways (the estimate would tile each its own way)
    base, pinned = run(g, x, chip, max_tile=tiles), run(g, x, chip, pinned=pins, max_tile=tiles)
    pinned_bytes = sum(g.constants[n].nbytes for n in pins)
    for name in pins:
        assert binding(pinned.program, name).region.mem == "lmem"
        assert binding(base.program, name).region.mem == "ddr"
        assert reads_from(pinned.program, binding(pinned.program, name).region, vector=True)  # read where they live
    assert base.stats.ddr_read_bytes - pinned.stats.ddr_read_bytes >= pinned_bytes  # measured bm1684 211,200 -> 45,056
    assert pinned.cycles < base.cycles  # generic 10,740 against 11,628; bm1684 10,148 against 11,248
    assert base.stats.peak_bytes["ddr"] - pinned.stats.peak_bytes["ddr"] >= pinned_bytes
    assert pinned.stats.peak_bytes["lmem"] >= pinned_bytes  # live for the whole run, with the tiles beside them


def test_pinned_constants_of_every_template():
    g, x = mixed()
    res = run(g, x, CHIPS["generic"], pinned=("w", "b", "m"))
    assert {b.name: b.region.mem for b in res.program.bindings
            if b.role == "const" and "." not in b.name} == {"w": "lmem", "b": "lmem", "m": "lmem"}
    assert {b.region.mem for b in res.program.bindings if "." in b.name} == {"ddr"}  # the resize's interpolation matrices
    prog = res.program
    assert isa.Program.from_text(prog.to_text()) == prog


def test_pinning_what_cannot_be_pinned_is_a_config_error():
    g, _ = mixed()
    chip = CHIPS["generic"]
    for pins, message in [
        (("w9",), r"graph mixed has no tensor 'w9' \(constants: w, b, m\)"),
        (("x",), r"x is an input, not a constant"),
        (("relu",), r"relu is made by op relu, not a constant"),
    ]:
        with pytest.raises(isa.ConfigError, match=message):
            isa.lower(g, chip, isa.Policy(pinned=pins))
    t = isa.Graph("gather")
    table = t.constant("table", np.arange(12, dtype=np.float32).reshape(4, 3))
    t.output(O.gather(table, t.input("i", (2,), "int32")), "y")
    with pytest.raises(isa.ConfigError, match=r"constant table is read by op gather_0 \(the "
                                              r"indexed template\), whose operands must be in DDR"):
        isa.lower(t, chip, isa.Policy(pinned=("table",)))


def test_a_pin_that_does_not_fit_names_the_tensor_its_bytes_and_the_free_bytes():
    g, _ = mlp()
    chip = chips.load("generic", {"memories.lmem.size": "1KiB"})  # 32 KiB in all; w0 is 64 KiB
    with pytest.raises(isa.OutOfMemoryError, match=r"lmem: cannot place pinned const w0 \(65536 bytes\): 32768 of 32768 bytes free"):
        isa.lower(g, chip, isa.Policy(pinned=("w0",)))


# ---- reserve -----------------------------------------------------------------------------------

def test_reserve_takes_memory_out_of_planning():
    g, x = convs()
    chip = BM1684_CHANNELS_ON_EUS
    capacity = chip.memories["lmem"].capacity
    reserved = capacity - 128 * 1024
    base, squeezed = run(g, x, chip, chain=False), run(g, x, chip, reserve={"lmem": reserved}, chain=False)
    assert [n for n in squeezed.program.notes if n.startswith("reserved")] == [(f"reserved {reserved} bytes of "
                                                                               f"lmem at {capacity - reserved:#x}")]
    assert all(b.addr + b.size <= capacity - reserved for b in squeezed.program.buffers if b.mem == "lmem")
    assert squeezed.stats.peak_bytes["lmem"] <= capacity - reserved < base.stats.peak_bytes["lmem"] + reserved
    assert squeezed.stats.peak_bytes["lmem"] < base.stats.peak_bytes["lmem"]  # measured 131,072 against 155,648
    assert len(squeezed.program) > 2 * len(base.program)  # smaller tiles: measured 136 instructions against 48
    assert squeezed.cycles > base.cycles  # measured 16,814 against 9,285


def test_reserve_errors():
    g, _ = convs(1)
    chip = CHIPS["generic"]
    with pytest.raises(isa.ConfigError, match=r"policy.reserve: chip generic has no memory 'sram' \(memories: ddr, lmem\)"):
        isa.lower(g, chip, isa.Policy(reserve={"sram": 1}))
    with pytest.raises(isa.ConfigError, match=r"policy.reserve.lmem: 9437184 bytes of lmem asked, its capacity is 8388608"):
        isa.lower(g, chip, isa.Policy(reserve={"lmem": "9MiB"}))
    with pytest.raises(isa.OutOfMemoryError, match=r"conv_0: even a one-element output tile needs .* bytes of lmem \(0 free\)"):
        isa.lower(g, chip, isa.Policy(reserve={"lmem": "8MiB"}))


# ---- intermediates -----------------------------------------------------------------------------

@pytest.mark.parametrize("chip", ["generic", "bm1684"])
def test_local_intermediates_cut_ddr_traffic(chip):
    g, x = mlp()
    chip = CHIPS[chip]
    tiles = {"n": 16, "c": 128, "k": 64}  # the same tiling both ways (the estimate would tile each its own way)
    ddr, local = run(g, x, chip, max_tile=tiles), run(g, x, chip, intermediates="local", max_tile=tiles)
    passed = {b.name: b.mem for b in local.program.buffers if "/" not in b.name}
    assert len(passed) == 5 and set(passed.values()) == {"lmem"}  # 3 products and 2 relu results
    assert {b.mem for b in ddr.program.buffers if "/" not in b.name} == {"ddr"}
    passed_bytes = (4 * 16 * 128 + 16 * 64) * 4  # each written to DDR once and read back at least once
    assert ddr.stats.ddr_read_bytes - local.stats.ddr_read_bytes >= passed_bytes  # bm1684 211,200 -> 174,336 (exactly)
    assert ddr.stats.ddr_write_bytes - local.stats.ddr_write_bytes == passed_bytes
    assert local.cycles < ddr.cycles  # generic 10,534 against 11,628; bm1684 9,648 against 11,248
    assert local.stats.peak_bytes["lmem"] >= ddr.stats.peak_bytes["lmem"]  # bm1684: equal, the passed tensors fit beside the largest step
    assert local.stats.peak_bytes["ddr"] < ddr.stats.peak_bytes["ddr"]


def test_local_intermediates_through_every_template_and_ddr_for_the_scalar_engine():
    g, x = mixed()
    chip = CHIPS["generic"]
    ddr, local = run(g, x, chip, chain=False), run(g, x, chip, intermediates="local", chain=False)
    homes = {b.name: b.mem for b in local.program.buffers if "/" not in b.name}
    assert homes == {"relu": "lmem", "pool": "lmem", "softmax": "lmem", "resize": "lmem", "permute": "lmem", "fc": "ddr"}  # sort reads DDR
    assert local.stats.ddr_read_bytes < ddr.stats.ddr_read_bytes / 2  # measured 4,576 against 20,704
    assert local.cycles < ddr.cycles  # 13,715 against 16,947


def test_a_convolution_reads_an_on_chip_input_in_place():
    """A 1x1 convolution (no padding) whose input lives in local memory multiplies it where it
    is: no DMA copies it into a tile buffer; a padded 3x3 one still copies its windows."""
    rng = np.random.default_rng(3)
    g = isa.Graph("pointwise")
    h = g.input("x", (1, 32, 16, 16), "float32")
    for i, (cin, cout, k) in enumerate(((32, 64, 1), (64, 32, 1), (32, 32, 3))):
        w = g.constant(f"w{i}", (rng.standard_normal((cout, cin, k, k)) * 0.1).astype(np.float32))
        pad = {"pad_h_t": 1, "pad_h_b": 1, "pad_w_l": 1, "pad_w_r": 1} if k == 3 else {}
        h = O.active(O.conv(h, w, **pad), "relu")
    g.output(h, "y")
    x = {"x": rng.standard_normal((1, 32, 16, 16)).astype(np.float32)}
    chip = CHIPS["bm1684"]
    ddr, local = run(g, x, chip, chain=False), run(g, x, chip, intermediates="local", chain=False)
    homes = {b.name: b for b in local.program.buffers if "/" not in b.name}
    assert {b.mem for b in homes.values()} == {"lmem"} and len(homes) == 2
    first, second = (homes[n] for n in sorted(homes))  # conv_0's relu output, conv_1's
    def reads(op, buf):
        return [i for i in instructions(local.program, "matrix") if i.op == op and buf.addr <= i.a.addr < buf.addr + buf.size]

    assert reads("conv_1", first) and not [i for i in instructions(local.program, "dma")
                                           if i.src.mem == "lmem" and first.addr <= i.src.addr < first.addr + first.size]
    assert not reads("conv_2", second)  # the 3x3 convolution pads: its windows are copied
    # the relu after conv_0 writes its result straight into its home, tile by tile, every
    # element of it: no DMA stores it there
    within = lambda r, buf: r.mem == buf.mem and buf.addr <= r.addr < buf.addr + buf.size  # noqa: E731
    relus = [i for i in instructions(local.program, "vector") if i.op == "active_0" and within(i.dst, first)]
    assert {i.fn for i in relus} == {"relu"} and sum(math.prod(i.dst.shape) for i in relus) == 64 * 16 * 16
    assert not [i for i in instructions(local.program, "dma") if i.op in ("conv_0", "active_0") and within(i.dst, first)]
    assert len(instructions(local.program, "dma")) < len(instructions(ddr.program, "dma"))
    assert local.cycles < ddr.cycles


def test_an_intermediate_that_does_not_fit_stays_in_ddr_and_says_so():
    g, x = mlp()
    chip = chips.load("generic", {"memories.lmem.size": "512B"})  # 16 KiB in all: room for some of the 8 KiB tensors
    res = run(g, x, chip, intermediates="local")
    homes = [b.mem for b in res.program.buffers if "/" not in b.name]
    assert "lmem" in homes and "ddr" in homes
    notes = [n for n in res.program.notes if n.startswith("intermediate")]
    assert len(notes) == homes.count("ddr") and all("bytes) stays in ddr: lmem has" in n for n in notes)
    assert isa.Program.from_text(res.program.to_text()) == res.program


def test_a_constant_bound_midway_is_not_where_an_earlier_buffer_was_written():
    """The resize binds its interpolation matrices while lowering, after the conv, pool and
    softmax groups released DDR buffers: preloaded bytes must not sit where those wrote."""
    g, x = mixed()
    g.output(g.tensors["relu"], "relu")
    res = run(g, x, CHIPS["generic"])
    for b in res.program.bindings:
        lo, hi = b.region.span()
        assert not [u.name for u in res.program.buffers if u.mem == b.region.mem and u.addr < hi and lo < u.addr + u.size]


# ---- allocator ---------------------------------------------------------------------------------

def gaps():
    """Tensors whose lifetimes leave a 16 KiB hole below a 2 KiB one when e (2 KiB) is placed,
    and b (16 KiB) comes next: first fit puts e in the big hole, best fit in the small one."""
    rng = np.random.default_rng(4)
    g = isa.Graph("gaps")

    def mm(x, n, name):
        return O.matrix_mul(x, g.constant(f"w_{name}", (rng.standard_normal((x.shape[1], n)) * 0.1).astype(np.float32)), name=name)

    x = g.input("x", (16, 64), "float32")
    r1 = mm(x, 256, "r1")
    l1 = mm(r1, 64, "l1")
    l2 = mm(mm(l1, 32, "r2"), 64, "l2")
    f = mm(r1, 64, "f")  # r1's last use: its 16 KiB free below l1
    e = mm(l2, 32, "e")  # r2's 2 KiB is free between l1 and l2
    c = mm(mm(f, 256, "b"), 64, "c")
    g.output(O.add(mm(O.add(c, l1, name="d"), 32, "q"), e, name="s"), "y")
    return g, {"x": rng.standard_normal((16, 64)).astype(np.float32)}


def test_best_fit_places_differently_and_fits_where_first_fit_runs_out():
    g, x = gaps()
    chip = CHIPS["generic"]
    first, best = run(g, x, chip), run(g, x, chip, allocator="best_fit")
    at = {p: {b.name: b.addr for b in res.program.buffers if "/" not in b.name} for p, res in (("first", first), ("best", best))}
    assert at["first"]["e"] == at["first"]["r1"]  # the lowest hole that fits
    assert at["best"]["e"] == at["best"]["r2"]  # the smallest
    assert at["best"]["b"] == at["best"]["r1"]
    # the same buffers for the same instructions: only addresses change
    assert best.cycles == first.cycles and best.stats.peak_bytes == first.stats.peak_bytes
    # in a DDR just big enough, first fit runs out where best fit does not
    tight = chips.load("generic", {"memories.ddr.size": str(at["first"]["r1"] + 40 * 1024)})
    with pytest.raises(isa.OutOfMemoryError) as info:
        isa.lower(g, tight)
    assert str(info.value).startswith("tensor b made by op b, passed between layer groups: ddr: cannot place b (16384 bytes): 30720 of ")
    assert "largest free block 14336; live: const w_r1 (65536 B)," in str(info.value)
    assert run(g, x, tight, allocator="best_fit").cycles == best.cycles


def test_allocator_strategies():
    for strategy in ("first_fit", "best_fit"):
        a = Allocator("m", 100, 1, strategy)
        for size in (50, 10, 30, 10):
            a.alloc(size, f"{size}")
        a.free(0)  # holes: 50 at 0, 30 at 60
        a.free(60)
        assert a.alloc(30, "small")[0] == (0 if strategy == "first_fit" else 60)
        assert a.fits([50]) is (strategy == "best_fit")
    with pytest.raises(isa.ConfigError, match="unknown strategy 'worst_fit'"):
        Allocator("m", 100, 1, "worst_fit")


def test_an_allocation_takes_the_address_held_for_it_where_it_fits_there():
    a = Allocator("m", 100, 4)
    a.alloc(20, "x")
    assert a.alloc(10, "held", at=40) == (40, 12)  # in the gap [20, 100), at 40
    assert a.alloc(8, "low", at=48) == (20, 8)  # 48 lies in [40, 52), taken: first fit
    assert a.alloc(40, "big", at=60) == (60, 40) and a.alloc(4, "next")[0] == 28


# ---- the Policy itself, and from a command line ------------------------------------------------

def test_policy_checks_its_values():
    p = isa.Policy(max_tile={"w": 8, "h": 4}, pinned="w1", reserve={"lmem": "64KiB"})
    assert p.max_tile == (("h", 4), ("w", 8)) and p.pinned == ("w1",) and p.reserve == (("lmem", 65536),)
    assert p == isa.Policy(max_tile=(("h", 4), ("w", 8)), pinned=("w1",), reserve={"lmem": 65536}) and hash(p)
    for knobs, message in [
        ({"fuse": "yes"}, r"policy.fuse: expected true or false, got 'yes'"),
        ({"max_group": 0}, r"policy.max_group: expected a whole number >= 1, got 0"),
        ({"pipeline_steps": 2.5}, r"policy.pipeline_steps: expected a whole number >= 1, got 2.5"),
        ({"max_tile": {"x": 2}}, r"policy.max_tile: unknown dimension 'x' \(known: n, c, d, h, w, k\)"),
        ({"max_tile": {"h": 0}}, r"policy.max_tile.h: expected a whole number >= 1, got 0"),
        ({"reserve": {"lmem": "lots"}}, r"policy.reserve.lmem: expected a size such as 512KiB"),
        ({"reserve": {"lmem": -1}}, r"policy.reserve.lmem: expected bytes >= 0"),
        ({"intermediates": "sram"}, r"policy.intermediates: expected one of ddr, local, got 'sram'"),
        ({"allocator": "worst_fit"}, r"policy.allocator: expected one of first_fit, best_fit, got 'worst_fit'"),
    ]:
        with pytest.raises(isa.ConfigError, match=message):
            isa.Policy(**knobs)


def test_policy_from_overrides():
    p = policy_from_overrides({"fuse": "false", "max_group": "3", "double_buffer": "off", "pipeline_steps": "2",
                               "max_tile": "h=4, w=8", "pinned": "w1,w2", "reserve": "lmem=64KiB,ddr=1MiB",
                               "intermediates": "local", "allocator": "best_fit", "chain": "no"})
    assert p == isa.Policy(False, 3, False, 2, {"h": 4, "w": 8}, ("w1", "w2"), {"lmem": 65536, "ddr": 1 << 20}, "local", "best_fit", False)
    assert policy_from_overrides({}) == isa.Policy() and policy_from_overrides({"max_group": "none"}).max_group is None
    for pairs, message in [
        ({"fusion": "false"}, r"policy.fusion=false: unknown policy key 'fusion' \(known: fuse, max_group, .*allocator, chain\)"),
        ({"fuse": "maybe"}, r"policy.fuse=maybe: expected true or false"),
        ({"max_group": "two"}, r"policy.max_group=two: expected a whole number >= 1 or none"),
        ({"max_tile": "h4"}, r"policy.max_tile=h4: expected DIM=EXTENT pairs separated by commas, DIM one of n, c, d, h, w, k"),
        ({"max_tile": "q=4"}, r"policy.max_tile: unknown dimension 'q'"),
        ({"reserve": "lmem=big"}, r"policy.reserve.lmem: expected a size such as 512KiB.*got 'big'"),
        ({"allocator": "next_fit"}, r"policy.allocator: expected one of first_fit, best_fit, got 'next_fit'"),
    ]:
        with pytest.raises(isa.ConfigError, match=message):
            policy_from_overrides(pairs)


def test_cli_routes_policy_keys(capsys):
    def npusim(*sets):
        rc = main(["run", str(MLP_FILE), "--chip", "bm1684", "--mode", "timing"] + [a for s in sets for a in ("--set", s)])
        out, err = capsys.readouterr()
        return rc, out, err

    rc, fused, _ = npusim()
    rc2, unfused, _ = npusim("policy.fuse=false", "memories.ddr.bandwidth=16GB/s")
    assert rc == rc2 == 0
    lines = [line for line in fused.splitlines() if "lowered to" in line], [line for line in unfused.splitlines() if "lowered to" in line]
    assert lines[0] != lines[1]
    gf = graphfile.load(MLP_FILE)
    want = sim.run(gf.graph, chips.load("bm1684", {"memories.ddr.bandwidth": "16GB/s"}), mode="timing", policy=isa.Policy(fuse=False))
    assert f"{want.cycles:,} cycles" in unfused
    rc, out, err = npusim("policy.fusion=false")
    assert rc == 1 and out == ""
    known = "fuse, max_group, double_buffer, pipeline_steps, max_tile, pinned, reserve, intermediates, allocator, chain"
    assert err.strip().splitlines() == [f"npusim: error: ConfigError: policy.fusion=false: unknown policy key 'fusion' (known: {known})"]
