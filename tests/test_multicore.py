"""Chips of several cores: the YAML scheme (`cores`, `shared`) and its errors, the per-core names
and the program text, every tiled template dealing its tiles over the cores with the same
outputs as on one core, the trace's tracks per core, and the Ascend 910B (24 cube cores, 48
vector cores) against docs/sources.md#huawei-ascend and against itself on one core."""

import json
import re

import numpy as np
import pytest
from conftest import TEST_CHIPS
from refeval import evaluate

import chips
import isa
import sim
import traces
from isa.lower.memory.route import route
from sim.cli import main
from sim.peaks import peak_ops

O = isa.ops
QUAD = TEST_CHIPS / "quad.yaml"
KiB, MiB = 1024, 1024 * 1024


def quad(cores=4, **overrides):
    return chips.load(QUAD, {"cores": cores, **overrides})


# ---- the YAML scheme -----------------------------------------------------------------------

def test_per_core_copies_are_named_by_core_shared_ones_plainly():
    chip = quad()
    assert chip.cores == 4
    assert list(chip.memories)[:4] == ["ddr", "l2", "c0.l1", "c0.l0a"]  # shared first, then core 0's, ...
    assert [m for m in chip.memories if m.startswith("c3.")] == ["c3.l1", "c3.l0a", "c3.l0b", "c3.l0c", "c3.ub0", "c3.ub1"]
    assert (chip.memories["ddr"].core, chip.memories["l2"].core, chip.memories["c2.ub1"].core) == (None, None, 2)
    assert chip.memories["c2.ub1"].base == "ub1" and chip.memories["c2.ub1"].capacity == 32 * KiB
    assert list(chip.engines)[:2] == ["cpu", "c0.mte2"] and len(chip.engines) == 1 + 4 * 10
    mte2, cube = chip.engines["c2.mte2"], chip.engines["c2.cube"]
    assert mte2.links == (("ddr", "c2.l1"), ("l2", "c2.l1"))  # a core's engine reaches its own copies and the shared ones
    assert (cube.memory, cube.matrix.a, cube.matrix.b, cube.matrix.c) == ("c2.l0c", "c2.l0a", "c2.l0b", "c2.l0c")
    assert chip.engines["cpu"].core is None
    assert chip.engines_of("vector", 1) == [chip.engines["c1.aiv0_vector"], chip.engines["c1.aiv1_vector"]]


def test_one_core_keeps_the_yaml_names():
    chip = quad(cores=1)
    assert list(chip.memories) == ["ddr", "l2", "l1", "l0a", "l0b", "l0c", "ub0", "ub1"]
    assert chip.engines["mte2"].links == (("ddr", "l1"), ("l2", "l1"))
    bm = chips.load("bm1684")  # no `cores`: one, and nothing renamed
    assert bm.cores == 1 and list(bm.engines) == ["gdma", "tiu", "arm"] and list(bm.memories) == ["ddr", "lmem"]


def test_overrides_set_every_cores_copy():
    chip = quad(**{"memories.l1.size": "128KiB", "engines.mte1.latency": 9})
    assert {chip.memories[f"c{c}.l1"].capacity for c in range(4)} == {128 * KiB}
    assert {chip.engines[f"c{c}.mte1"].latency for c in range(4)} == {9}
    assert chips.load("ascend910b", {"cores": 2}).cores == 2


@pytest.mark.parametrize("overrides, message", [
    ({"cores": 0}, r"override cores=0: 0 must be >= 1; expected a whole number >= 1"),
    ({"cores": "four"}, r"override cores=four: .*whole number >= 1"),
    ({"memories.ddr.shared": True}, r"a global memory is one memory every core shares"),
    ({"memories.l2.shared": "often"}, r"override memories.l2.shared=often: expected true or false, got str 'often'"),
    ({"engines.mte1.shared": True}, r"engines.mte1.links: a shared engine reaches shared memories only, and l1 is a memory of each core"),
    ({"engines.mte2.links": "[ddr->c1.l1]"}, r"engines.mte2.links\[0\]: 'c1.l1' names core 1's copy of l1: .* never another core's"),
    ({"engines.cube.matrix.a": "c0.l0a"}, r"'c0.l0a' names core 0's copy of l0a"),
    ({"engines.cpu.links": "[ddr->l1]"}, r"'links' belongs to dma engines"),
])
def test_errors_name_the_key_and_what_is_wrong(overrides, message):
    with pytest.raises(isa.ConfigError, match=message):
        quad(**overrides)


def test_a_shared_memory_named_twice_is_an_error(tmp_path):
    text = QUAD.read_text().replace("  l1: {kind: local", "  l2: {kind: local, shared: true, size: "
                                                          "1MiB, bandwidth: 8}\n  l1: {kind: local", 1)
    path = tmp_path / "twice.yaml"
    path.write_text(text)
    with pytest.raises(isa.ConfigError, match=r"twice.yaml:\d+: duplicate key 'l2' \(first at line \d+\)"):
        chips.load(path)


def test_tensors_placed_on_chip_go_where_every_core_reaches():
    g = isa.Graph("pin")
    product = O.matrix_mul(g.input("x", (8, 8), "float32"), g.constant("w", np.ones((8, 8), np.float32)), name="product")
    g.output(O.reduce(product, "REDUCE_SUM", [1]), "y")
    pinned, local = isa.Policy(pinned=("w",)), isa.Policy(intermediates="local")
    assert [b.region.mem for b in isa.lower(g, quad(), pinned).bindings if b.name == "w"] == ["l2"]  # the shared L2
    assert [b.mem for b in isa.lower(g, quad(), local).buffers if b.name == "product"] == ["l2"]
    split = chips.load(TEST_CHIPS / "three_level.yaml", {"cores": 2})  # every memory a core's own
    with pytest.raises(isa.ConfigError, match=r"policy.pinned: chip three_level has no on-chip memory every core reaches"):
        isa.lower(g, split, pinned)
    assert [n for n in isa.lower(g, split, local).notes if n.startswith("intermediate")] == [("intermediate product (256 bytes) stays in "
                                                                                             "ddr: no on-chip memory every core reaches")]


def test_a_reserve_of_a_per_core_memory_takes_it_off_every_core():
    prog = isa.lower(elementwise_graph(), quad(), isa.Policy(reserve={"ub1": "16KiB", "l2": "1MiB"}))
    assert [n for n in prog.notes if n.startswith("reserved")] == (["reserved 1048576 bytes of l2 at 0x300000"]
                                                                   + [f"reserved 16384 bytes of c{c}.ub1 at 0x4000" for c in range(4)])


# ---- programs ------------------------------------------------------------------------------

def elementwise_graph():
    g = isa.Graph("elementwise")
    x = g.input("x", (4, 24, 30), "float32")
    g.output(O.active(O.add(x, O.muls(x, 2.0)), "relu"), "y")
    return g


def test_names_and_program_text_round_trip():
    chip = quad()
    prog = isa.lower(elementwise_graph(), chip)
    text = prog.to_text()
    assert isa.Program.from_text(text) == prog
    assert ".engine c3.aiv1_vector" in text.splitlines()
    assert re.search(r"^c2\.aiv0_vector\.\d+ vector fn=mul .*dst=c2\.ub0@", text, re.MULTILINE)
    assert re.search(r"^c1\.aiv1_mte3\.0 wait on=c1\.aiv1_vector\.\d+ ", text, re.MULTILINE)
    assert re.search(r"^c1\.aiv1_mte3\.1 dma src=c1\.ub1@\S+ dst=ddr@", text, re.MULTILINE)
    assert {b.mem for b in prog.buffers} >= {f"c{c}.ub{v}" for c in range(4) for v in range(2)}
    res = sim.execute(isa.Program.from_text(text), chip, mode="timing")
    assert res.cycles == sim.execute(prog, chip, mode="timing").cycles


# ---- every tiled template on one core and on four --------------------------------------------

RNG = np.random.default_rng(7)


def ints(shape):
    """Small integers as float32: every sum exact, whatever the order."""
    return RNG.integers(-3, 4, shape).astype(np.float32)


def conv(g, x):
    w, b = g.constant("w", ints((32, 16, 3, 3))), g.constant("b", ints((1, 32, 1, 1)))
    return O.active(O.conv(x, w, b, pad_h_t=1, pad_h_b=1, pad_w_l=1, pad_w_r=1), "relu")


def depthwise(g, x):
    return O.conv(x, g.constant("w", ints((16, 1, 3, 3))), None, pad_h_t=1, pad_h_b=1, pad_w_l=1, pad_w_r=1, groups=16)


def matmul(g, x):
    return O.matrix_mul(x, g.constant("w", ints((48, 40))), g.constant("b", ints((1, 40))))


TEMPLATES = {  # name: (input shape, build, the engines whose every copy must work: each core's, both vector cores)
    "elementwise": ((4, 24, 30), lambda g, x: O.active(O.add(x, O.muls(x, 2.0)), "relu"), "vector"),
    "conv": ((2, 16, 12, 12), conv, "cube"),
    "depthwise": ((1, 16, 12, 12), depthwise, "vector"),
    "matmul": ((64, 48), matmul, "cube"),
    "pool": ((2, 16, 20, 20), lambda g, x: O.active(O.pool(x, 2, 2, 3, 3, pad_h=1, pad_w=1), "relu"), "vector"),
    "reduce": ((8, 32, 50), lambda g, x: O.reduce(x, "REDUCE_SUM", [2]), "vector"),
    "softmax": ((8, 32, 50), lambda g, x: O.softmax(x, 1), "vector"),
    "resize": ((2, 8, 12, 12), lambda g, x: O.interpolate(x, [24, 24]), "cube"),
    "arrange": ((4, 8, 30), lambda g, x: O.concat([O.permute(x, [0, 2, 1]), O.permute(x, [0, 2, 1])], 1), "aiv0_mte3"),
}


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_each_template_gives_the_same_outputs_on_one_core_and_four(name):
    shape, build, engine = TEMPLATES[name]
    g = isa.Graph(name)
    g.output(build(g, g.input("x", shape, "float32")), "y")
    xv = ints(shape)
    one, four = (sim.run(g, quad(cores), {"x": xv}) for cores in (1, 4))
    np.testing.assert_array_equal(four.outputs["y"], one.outputs["y"])
    np.testing.assert_allclose(four.outputs["y"], evaluate(g, {"x": xv}, quad())["y"], rtol=1e-5, atol=1e-5)
    assert sim.run(g, quad(), mode="timing").cycles == four.cycles
    busy = {e.engine for e in four.trace.events if e.kind != "wait"}
    users = [e for e in quad().engines if e.endswith(engine)]
    assert len(users) == (8 if engine == "vector" else 4) and set(users) <= busy
    assert four.cycles < one.cycles


def test_a_reduction_over_blocks_stays_on_one_core():
    """A convolution's input-channel blocks accumulate on the core that owns the output tile."""
    g = isa.Graph("k")
    x = g.input("x", (4, 64, 8, 8), "float32")
    g.output(O.conv(x, g.constant("w", ints((32, 64, 1, 1))), None), "y")
    prog = isa.lower(g, quad(), isa.Policy(max_tile={"k": 16}))
    for c in range(4):
        mms = [i for i in prog.streams[f"c{c}.cube"] if i.kind == "matrix"]
        accumulated = [m.accumulate for m in mms]
        assert accumulated.count(False) * 4 == len(mms)  # each tile: a first block, then three accumulating
        assert {m.c.mem for m in mms} == {f"c{c}.l0c"}


def test_the_cube_hands_its_results_to_the_vector_core_through_the_l2():
    assert route(quad(), "c1.l0c", "c1.ub0") == (("c1.fixpipe", "c1.l0c", "l2"), ("c1.aiv0_mte2", "l2", "c1.ub0"))
    g = isa.Graph("mm")
    g.output(matmul(g, g.input("x", (64, 48), "float32")), "y")
    res = sim.run(g, quad(), {"x": ints((64, 48))})
    hops = {(e.engine.split(".")[1], e.src.split(".")[-1], e.dst.split(".")[-1]) for e in res.trace.events if e.kind == "dma"}
    assert {("fixpipe", "l0c", "l2"), ("aiv0_mte2", "l2", "ub0"), ("mte2", "ddr", "l1"), ("mte1", "l1", "l0a")} <= hops


def test_the_trace_has_a_track_per_core_engine(tmp_path):
    chip = quad()
    res = sim.run(elementwise_graph(), chip, mode="timing")
    assert res.trace.engines == tuple(chip.engines)
    assert set(res.stats.utilization) == set(chip.engines)
    traces.write_chrome(res.trace, tmp_path / "run.json")
    events = json.loads((tmp_path / "run.json").read_text())["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert sorted(processes.values()) == ["quad", "quad c0", "quad c1", "quad c2", "quad c3"]
    threads = {e["args"]["name"]: processes[e["pid"]] for e in events if e.get("name") == "thread_name"}
    assert threads["cpu"] == "quad" and threads["c2.aiv1_vector"] == "quad c2"
    assert set(threads) == set(chip.engines)
    slices = {(processes[e["pid"]], e["tid"]) for e in events if e["ph"] == "X"}
    assert {p for p, _ in slices} == {"quad c0", "quad c1", "quad c2", "quad c3"}


# ---- the Ascend 910B -----------------------------------------------------------------------

ASCEND = chips.load("ascend910b")


def test_ascend910b_is_the_910b2_ini_row_on_24_cores():
    assert ASCEND.cores == 24 and ASCEND.clock_hz == 1.8e9
    assert len(ASCEND.engines_of("matrix")) == 24 and len(ASCEND.engines_of("vector")) == 48  # ini: 24 AIC, 48 AIV
    core = {m.base: (m.capacity, m.align) for m in ASCEND.memories.values() if m.core == 5}
    assert core == {"l1": (512 * KiB, 32), "l0a": (64 * KiB, 512), "l0b": (64 * KiB, 512), "l0c": (128 * KiB, 64), "bt": (KiB, 64),
                    "ub0": (192 * KiB, 32), "ub1": (192 * KiB, 32)}
    l2 = ASCEND.memories["l2"]
    assert (l2.core, l2.capacity) == (None, 192 * MiB)
    assert ASCEND.memories["ddr"].capacity == 64 * 2**30
    assert route(ASCEND, "ddr", "c5.l0a") == (("c5.mte2", "ddr", "c5.l1"), ("c5.mte1", "c5.l1", "c5.l0a"))
    assert route(ASCEND, "c5.l0c", "c5.ub0") == (("c5.fixpipe", "c5.l0c", "l2"), ("c5.aiv0_mte2", "l2", "c5.ub0"))  # CO2 = GM
    assert route(ASCEND, "c5.ub1", "ddr") == (("c5.aiv1_mte3", "c5.ub1", "ddr"),)
    assert chips.load("Ascend910B2").name == "ascend910b"


@pytest.mark.parametrize("dtype, peak", [("float16", 354e12), ("int8", 708e12)])  # docs/sources.md#ascend-peaks [D]
def test_ascend910b_peaks(dtype, peak):
    assert peak_ops(ASCEND)["matrix"][dtype] * ASCEND.clock_hz == pytest.approx(peak, rel=0.02)


def test_npusim_chips_lists_the_cores_once(capsys):
    assert main(["chips"]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("ascend910b")]
    assert "24 x (l1 512 KiB, l0a 64 KiB, l0b 64 KiB, l0c 128 KiB, bt 1 KiB, ub0 192 KiB, ub1 192 KiB), l2 192 MiB" in row
    assert "int8 707.79 TOPS, float16 353.89 TOPS" in row and "24 x (mte2 (dma), mte1 (dma), fixpipe (dma), cube (matrix)" in row


def conv_graph(ic, oc, hw):
    g = isa.Graph("conv")
    x = g.input("x", (1, ic, hw, hw), "float16")
    w = g.constant("w", RNG.integers(-2, 3, (oc, ic, 3, 3)).astype(np.float16))
    g.output(O.active(O.conv(x, w, None, pad_h_t=1, pad_h_b=1, pad_w_l=1, pad_w_r=1), "relu"), "y")
    return g


def test_a_conv_on_24_cores_equals_one_core():
    g = conv_graph(64, 64, 28)
    xv = RNG.integers(-3, 4, (1, 64, 28, 28)).astype(np.float16)
    one, many = (sim.run(g, chips.load("ascend910b", {"cores": c}), {"x": xv}) for c in (1, 24))
    np.testing.assert_array_equal(many.outputs["y"], one.outputs["y"])
    assert sim.run(g, ASCEND, mode="timing").cycles == many.cycles
    assert many.cycles < one.cycles / 4


def test_a_large_conv_on_24_cores_is_far_faster_than_on_one():
    """HBM-bound on 24 cores (each core reloads input and weights from GM: the L2 is no cache
    here); with the weights pinned in the L2, more than N/2 times faster."""
    g = conv_graph(512, 512, 28)
    for policy, least in ((None, 8), (isa.Policy(pinned=("w",)), 12)):
        one = sim.run(g, chips.load("ascend910b", {"cores": 1}), mode="timing", policy=policy)
        many = sim.run(g, ASCEND, mode="timing", policy=policy)
        assert one.cycles / many.cycles > least
        cubes = {name: u for name, u in many.stats.utilization.items() if name.endswith("cube")}
        assert len(cubes) == 24 and min(cubes.values()) > 0.2  # every core's cube busy
