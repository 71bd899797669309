"""The machine: exact timelines on a tiny chip, cost formulas, shared bandwidth, deadlocks,
bad programs, and the two modes agreeing."""

import json
import math

import numpy as np
import pytest
import simpy

import chips
import isa
import sim
import sim.machine
import traces
from isa import timing
from isa.costs import runs
from isa.instructions import Dma, Matmul, Region, Vector, dense
from isa.timing import Arbiter
from traces.records import Event

SERIAL = isa.Policy(double_buffer=False)


def relu_graph(n=16):
    g = isa.Graph("relu")
    g.output(isa.ops.active(g.input("x", (1, n), "float32"), "relu", name="r"), "y")
    return g


def test_exact_timeline_on_tiny_chip(tiny):
    # gdma.0 load 64 B: 10 latency + 64/4 = 26; relu: 2 + ceil(16/4) = 6; store: 26 more.
    res = sim.run(relu_graph(), tiny, {"x": np.arange(-8, 8, dtype=np.float32).reshape(1, 16)}, policy=SERIAL)
    events = sorted(res.trace.events, key=lambda e: (e.engine, e.index))
    assert events == [
        Event("gdma", 0, "dma", "dma", "r", 0, 26, 64, "ddr", "lmem"),
        Event("gdma", 1, "wait", "wait", "r", 26, 32, 0, "", ""),
        Event("gdma", 2, "dma", "dma", "r", 32, 58, 64, "lmem", "ddr"),
        Event("tiu", 0, "wait", "wait", "r", 0, 26, 0, "", ""),
        Event("tiu", 1, "vector", "relu", "r", 26, 32, 64, "", "lmem", ops=16),  # 16 elements
    ]
    assert res.cycles == 58
    assert res.seconds == pytest.approx(58e-9)
    np.testing.assert_array_equal(res.outputs["y"], np.maximum(np.arange(-8, 8, dtype=np.float32), 0).reshape(1, 16))
    assert res.stats.busy == {"gdma": 52, "tiu": 6}
    assert res.stats.ddr_read_bytes == 64 and res.stats.ddr_write_bytes == 64


def test_dma_cost_rounds_runs_up_to_bursts(tiny):
    gdma = tiny.engines["gdma"]
    contiguous = Dma(dense("ddr", 0, "int8", (4, 8)), dense("lmem", 0, "int8", (4, 8)))
    assert runs(contiguous.src) == (1, 32)
    assert timing.dma_cycles(contiguous, tiny, gdma) == 10 + 32 // 4
    # 8 runs of 3 bytes (stride 8): each rounds up to a 4-byte burst in DDR
    strided = Dma(Region("ddr", 0, "int8", (8, 3), (8, 1)), dense("lmem", 0, "int8", (8, 3)))
    assert runs(strided.src) == (8, 3)
    assert timing.bytes_moved(strided, tiny) == 32
    assert timing.dma_cycles(strided, tiny, gdma) == 10 + 8
    # DDR to DDR: the memory is both ends, so half its bandwidth
    both = Dma(dense("ddr", 0, "int8", (32,)), dense("ddr", 64, "int8", (32,)))
    assert timing.dma_cycles(both, tiny, gdma) == 10 + 32 // 2


def test_vector_and_matrix_costs(tiny):
    unit = tiny.engines["tiu"]
    add = Vector("add", dense("lmem", 0, "float32", (3, 7)), (dense("lmem", 128, "float32", (3, 7)), 1.0), "float32")
    assert timing.vector_cycles(add, unit) == 2 + 6  # ceil(21 / 4)
    tanh = Vector("tanh", dense("lmem", 0, "float32", (4, 4)), (dense("lmem", 128, "float32", (4, 4)),), "float32")
    assert timing.vector_cycles(tanh, unit) == 2 + 4 * 3
    # int8 in, int32 out: the wider dtype sets the rate
    widen = Vector("copy", dense("lmem", 0, "int32", (16,)), (dense("lmem", 128, "int8", (16,)),), "int64")
    assert timing.vector_cycles(widen, unit) == 2 + 4
    mm = Matmul(dense("lmem", 0, "float32", (8, 5)), dense("lmem", 256, "float32", (5, 4)), dense("lmem", 512, "float32", (8, 4)), False)
    # a 4x4 output-stationary array: SCALE-Sim's folds * (K + R + C - 2), plus issue latency
    assert timing.matrix_cycles(mm, unit) == 2 + 2 * (5 + 4 + 4 - 2)


def test_a_convolution_s_product_and_a_link_may_have_rates_of_their_own():
    """BM1684X (bm1686): a float32 convolution's block at conv_block_cycles, a plain product's at
    block_cycles; the GDMA's loads, stores and DDR copies at their links' rates (chips/bm1686.yaml). The
    fitted values (bench/fit.py) are held at these so the arithmetic stays the test's."""
    chip = chips.load("bm1686", {"engines.tiu.matrix.conv_block_cycles.float32": 26, "engines.tiu.matrix.fill_drain": 32,
                                 "engines.tiu.matrix.drain_hidden": False, "engines.gdma.latency": 30})
    tiu, gdma = chip.engines["tiu"], chip.engines["gdma"]
    unit = tiu.matrix
    assert (unit.block("float32"), unit.block("float32", conv=True), unit.block("float16", conv=True)) == (16, 26, 2)
    a, b, c = dense("lmem", 0, "float32", (100, 40)), dense("lmem", 2**14, "float32", (40, 20)), dense("lmem", 2**15, "float32", (100, 20))
    folds = 2 * 2  # ceil(100 / 64) * ceil(20 / 16); K = 40 is ceil(40 / 16) = 3 blocks deep
    assert timing.matrix_cycles(Matmul(a, b, c, False), tiu) == 20 + folds * (3 * 16 + 32)
    conv = Matmul(a, b, c, False, conv=True)
    assert timing.matrix_cycles(conv, tiu) == 20 + folds * (3 * 26 + 32)
    assert isa.instructions.instr_text("tiu.0", conv).endswith(" conv=1")
    program = isa.Program.from_text(".program chip=bm1686 graph=hand\n.engine tiu\n" + isa.instructions.instr_text("tiu.0", conv))
    assert program.streams["tiu"] == [conv]
    n = 2**20
    ddr, lmem, ddr2 = dense("ddr", 0, "int8", (n,)), dense("lmem", 0, "int8", (n,)), dense("ddr", n, "int8", (n,))
    load, store, copy = Dma(ddr, lmem), Dma(lmem, ddr), Dma(ddr, ddr2)
    gib_per_s = (58, 44, 28)  # bytes per cycle at 1 GHz: GiB/s * 2**30 / 1e9
    assert [timing.dma_cycles(d, chip, gdma) for d in (load, store, copy)] == [30 + math.ceil(n / (g * 2**30 / 1e9)) for g in gib_per_s]


def _program(text):
    return isa.Program.from_text(".program chip=generic graph=hand\n" + text)


def test_overlapping_dmas_share_ddr_bandwidth():
    chip = chips.load("generic")
    load = "dma_in.0 dma src=ddr@0x0:int8[6400;1] dst=lmem@0x0:int8[6400;1]\n"
    store = "dma_out.0 dma src=lmem@0x4000:int8[6400;1] dst=ddr@0x4000:int8[6400;1]\n"
    engines = ".engine dma_in\n.engine dma_out\n"
    alone = sim.execute(_program(engines + load), chip, mode="timing")
    # 50 engine + 100 DDR latency, then 6400 B at 64 B/cycle
    assert alone.cycles == 150 + 100
    both = sim.execute(_program(engines + load + store), chip, mode="timing")
    # both transfer at once: DDR's 64 B/cycle splits in two
    assert [e.end for e in both.trace.events] == [350, 350]
    assert both.trace.counters["ddr.read"] == [(0, 0), (150, 32.0), (350, 0)]
    assert both.trace.counters["ddr.write"] == [(0, 0), (150, 32.0), (350, 0)]


@pytest.mark.parametrize("in_flight, ends", [
    (1, [(0, 400), (400, 800), (800, 1200)]),  # each: 150 latency, then 16000 B at 64 B/cycle
    # a latency runs while the transfer before moves its bytes; the third waits until the
    # first is done (two under way at most), its latency then hidden behind the second's bytes
    (2, [(0, 400), (400, 650), (650, 900)]),
    (3, [(0, 400), (400, 650), (650, 900)]),  # the latencies queue one after another: no gain
])
def test_a_dma_engine_overlaps_as_many_transfers_as_it_keeps_in_flight(in_flight, ends):
    chip = chips.load("generic", {"engines.dma_in.in_flight": in_flight})
    loads = "".join(f"dma_in.{i} dma src=ddr@{i * 0x4000:#x}:int8[16000;1] dst=lmem@{i * 0x4000:#x}:int8[16000;1]\n" for i in range(3))
    prog = _program(".engine dma_in\n" + loads)
    timing = sim.execute(prog, chip, mode="timing")
    assert [(e.start, e.end) for e in timing.trace.events] == ends  # an engine's events never overlap
    assert timing.cycles == ends[-1][1]
    assert sim.execute(prog, chip).cycles == timing.cycles


def test_bandwidth_one_transfer_cannot_use_goes_to_the_others():
    """Max-min fair shares: on a 64 B/cycle DDR, a transfer whose engine moves 16 B/cycle
    leaves 48 to the other (not an equal 32 each); a transfer with both ends in one memory uses
    its bandwidth twice."""
    env = simpy.Environment()
    arbiter = Arbiter(env, {"ddr": 64.0, "lmem": 64.0})
    ends = {}

    def move(name, nbytes, cap, use):
        yield arbiter.transfer(nbytes, cap, use, "ddr", "lmem")
        ends[name] = env.now

    env.process(move("slow", 1600, 16.0, {"ddr": 1}))  # 100 cycles at 16 B/cycle
    env.process(move("fast", 4800, 1e9, {"ddr": 1}))  # 48 B/cycle beside it: 100 cycles
    env.process(move("copy", 640, 1e9, {"lmem": 2}))  # lmem -> lmem: 32 B/cycle, 20 cycles
    env.run()
    assert ends == {"slow": 100, "fast": 100, "copy": 20}


def test_a_transfer_rescheduled_midway_costs_no_extra_cycle():
    """4096 bytes at 51.2 bytes a cycle take 80 cycles, also when another transfer starting at
    cycle 16 makes the arbiter work out what is left (3276.8 bytes, in floats a hair over 64
    cycles' worth, which must not round up to 65)."""
    env = simpy.Environment()
    arbiter = Arbiter(env, {"ddr": 51.2, "lmem": 1000.0})
    ends = {}

    def load():
        yield arbiter.transfer(4096, 1e9, {"ddr": 1}, "ddr", "lmem")
        ends["load"] = env.now

    def other():
        yield env.timeout(16)
        yield arbiter.transfer(10, 1e9, {"lmem": 1}, "lmem", "lmem")

    env.process(load())
    env.process(other())
    env.run()
    assert ends["load"] == 80


def test_deadlock_is_an_error_listing_the_stuck_instructions(tiny):
    prog = isa.Program.from_text(
        ".program chip=tiny graph=hand\n.engine gdma\n.engine tiu\n"
        "gdma.0 wait on=tiu.0\ntiu.0 wait on=gdma.0\n"
    )
    with pytest.raises(sim.DeadlockError, match=r"gdma\.0 wait on=tiu\.0 .*tiu\.0 wait on=gdma\.0"):
        sim.execute(prog, tiny)
    own_future = isa.Program.from_text(
        ".program chip=tiny graph=hand\n.engine gdma\n.engine tiu\n"
        "gdma.0 wait on=gdma.1\ngdma.1 dma src=ddr@0x0:int8[4;1] dst=lmem@0x0:int8[4;1]\n"
    )
    with pytest.raises(sim.DeadlockError, match=r"waiting for gdma\.1"):
        sim.execute(own_future, tiny, mode="timing")


def test_a_run_of_compute_instructions_keeps_its_times_and_its_waiters_go_on_at_their_end(tiny):
    """tiu.0, tiu.2 and tiu.3 are waited on by no one: the engine records them without stopping
    SimPy. Every relu still starts where the one before ended, and the store waiting on tiu.1
    starts at tiu.1's end."""
    relus = "".join(f"tiu.{k} vector fn=relu cdt=float32 dst=lmem@{0x40 * (k + 2):#x}:float32[16;1] "
                    f"src=lmem@{0x40 * (k + 1):#x}:float32[16;1]\n"
                    for k in range(4))
    prog = isa.Program.from_text(".program chip=tiny graph=hand\n.engine gdma\n.engine tiu\n" + relus +
                                 "gdma.0 wait on=tiu.1\ngdma.1 dma src=lmem@0xc0:float32[16;1] dst=ddr@0x0:float32[16;1]\n")
    res = sim.execute(prog, tiny)
    relu = timing.vector_cycles(prog.streams["tiu"][0], tiny.engines["tiu"])
    tiu = [e for e in res.trace.events if e.engine == "tiu"]
    assert [(e.start, e.end) for e in tiu] == [(k * relu, (k + 1) * relu) for k in range(4)]
    [store] = [e for e in res.trace.events if e.engine == "gdma" and e.kind == "dma"]
    assert store.start == 2 * relu and res.cycles == store.end > 4 * relu
    assert sim.execute(prog, tiny, mode="timing").trace.events == res.trace.events


@pytest.mark.parametrize(
    "body, message",
    [
        ("gdma.0 wait on=tiu.5\n", r"waits on tiu\.5, which is not an instruction"),
        ("gdma.0 dma src=ddr@0x0:int8[4;1] dst=lmem@0x0:int8[8;1]\n", r"differ in shape"),
        ("gdma.0 dma src=ddr@0x0:int8[8;1] dst=lmem@0xfffc:int8[8;1]\n", r"reaches byte 65540 of lmem, capacity 4096"),
        ("tiu.0 dma src=ddr@0x0:int8[8;1] dst=lmem@0x0:int8[8;1]\n", r"engine tiu is not a dma engine"),
        ("gdma.0 dma src=lmem@0x0:int8[8;1] dst=lmem@0x10:int8[8;1]\n", r"no link lmem->lmem"),
        ("tiu.0 vector fn=add cdt=float32 dst=lmem@0x0:float32[4;0] src=lmem@0x40:float32[4;1],1.0\n", r"more than once"),
        ("tiu.0 vector fn=add cdt=float32 dst=lmem@0x0:float16[4;1] src=lmem@0x40:float16[4;1],1.0\n", r"no throughput for dtype float16"),
        ("npu.0 vector fn=relu cdt=float32 dst=lmem@0x0:float32[4;1] src=lmem@0x40:float32[4;1]\n", r"undeclared engine 'npu'"),
        ("tiu.0 vector fn=relu cdt=float32 dst=sram@0x0:float32[4;1] src=lmem@0x40:float32[4;1]\n", r"unknown memory 'sram'"),
        ("tiu.0 vector fn=frobnicate cdt=float32 dst=lmem@0x0:float32[4;1] src=lmem@0x40:float32[4;1]\n", r"unknown vector function"),
        ("tiu.0 vector fn=add cdt=float32 dst=lmem@0x0:float32[4;1] src=lmem@0x40:float32[4;1]\n", r"add takes 2 operand"),
        ("tiu.1 vector fn=relu cdt=float32 dst=lmem@0x0:float32[4;1] src=lmem@0x40:float32[4;1]\n", r"out of order"),
    ],
)
def test_bad_programs_are_program_errors(tiny, body, message):
    with pytest.raises(isa.ProgramError, match=message):
        sim.execute(isa.Program.from_text(".program chip=tiny graph=hand\n.engine gdma\n.engine tiu\n" + body), tiny)


def test_instruction_ids_are_read_as_int_reads_each():
    """The ids read as arrays (sim/machine.py's _parsed) give what reading each with int gives,
    and an id that does not name an instruction is the first bad one, however it is spelled."""
    lengths = {"a": 12, "a.b": 3, "c0.aiv0_mte2": 100, "x": 0}
    good = [("a.0", "a.11"), ("c0.aiv0_mte2.99",), ("a.b.2", "a.007")]
    odd = ["a.12", "a.+1", "a. 1", "a.1_0", "a", ".1", "a.9999999999", "\u00e9.1", "a\0.1", "a.-1", "b.1", "x.0", "a.1x", "a..1", "a.b.3"]

    def one_by_one(groups):
        ids = [(e, int(i) if i.strip().lstrip("+-").replace("_", "").isdigit() else -1) for e, _, i in
               (text.rpartition(".") for group in groups for text in group)]
        bad = next((p for p, (e, i) in enumerate(ids) if not 0 <= i < lengths.get(e, 0)), None)
        return ids, bad

    for groups in [good, *([*good[:2], (good[2][0], text), *good[2:]] for text in odd)]:
        grouped, bad = sim.machine._instruction_ids(groups, lengths)
        ids, first = one_by_one(groups)
        assert [i for group in grouped for i in group] == ids and list(map(len, grouped)) == list(map(len, groups))
        assert bad == (None if first is None else (2, [t for g in groups for t in g][first]))
    engine, index = sim.machine._parsed(["a.0", "a.b.2", "c0.aiv0_mte2.99"], lengths)  # engines as positions in lengths
    assert engine.tolist() == [0, 1, 2] and index.tolist() == [0, 2, 99]


def test_timing_mode_gives_the_cycles_of_functional_mode(tiny):
    for chip in (chips.load("bm1684"), chips.load("generic"), tiny):
        g = relu_graph(1000)
        x = np.linspace(-1, 1, 1000, dtype=np.float32).reshape(1, 1000)
        functional = sim.run(g, chip, {"x": x})
        timing = sim.run(g, chip, mode="timing")
        assert timing.cycles == functional.cycles
        assert timing.trace.events == functional.trace.events
        assert timing.outputs == {}


def test_runs_are_deterministic():
    g = relu_graph(5000)
    a = sim.run(g, "generic", mode="timing")
    b = sim.run(g, "generic", mode="timing")
    assert a.trace == b.trace


def test_chrome_trace_has_a_track_per_engine(tmp_path):
    res = sim.run(relu_graph(4096), "generic", mode="timing")
    path = tmp_path / "run.json"
    traces.write_chrome(res.trace, path)
    data = json.loads(path.read_text())
    names = {e["args"]["name"] for e in data["traceEvents"] if e.get("name") == "thread_name"}
    assert names == {"dma_in", "dma_out", "vpu", "mxu", "cpu"}
    assert {e["cat"] for e in data["traceEvents"] if e["ph"] == "X"} >= {"dma", "vector"}


def test_inputs_are_checked(tiny):
    g = relu_graph()
    with pytest.raises(sim.InputError, match=r"input 'x' \(float32\[1, 16\]\) was not given"):
        sim.run(g, tiny, {})
    with pytest.raises(sim.InputError, match=r"expected shape \(1, 16\), got \(16,\)"):
        sim.run(g, tiny, {"x": np.zeros(16, np.float32)})
    with pytest.raises(sim.InputError, match=r"unknown input\(s\) z"):
        sim.run(g, tiny, {"x": np.zeros((1, 16), np.float32), "z": 1})
    with pytest.raises(sim.InputError, match=r"expected float32, got complex128"):
        sim.run(g, tiny, {"x": np.zeros((1, 16), complex)})
