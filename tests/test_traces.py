import csv
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from matplotlib import image

import chips
import isa
import sim
import traces
from isa import graphfile
from sim.peaks import peak_ops
from traces.occupancy import fragmentation, memory_counters
from traces.plots.bandwidth import ddr_traffic
from traces.plots.memory import peak_buffers, used_memories
from traces.plots.roofline import RooflinePoint, ceilings, roofline_points
from traces.plots.timeline import _bars, _op_colours
from traces.records import BufferSpan, Sync
from traces.summary import human_bytes

CLOCK_HZ = 2e6  # one cycle is 0.5 us, exactly representable
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def dma(engine, index, op, start, end, nbytes, src, dst):
    return traces.Event(engine, index, "dma", "dma", op, start, end, nbytes, src, dst)


def compute(engine, index, kind, name, op, start, end, nbytes=64):
    return traces.Event(engine, index, kind, name, op, start, end, nbytes, "lmem", "lmem")


def wait(engine, index, op, start, end):
    return traces.Event(engine, index, "wait", "wait", op, start, end, 0, "", "")


def small_trace():
    """conv loads two tiles and multiplies; relu waits for it, runs, and stores; fc comes last."""
    events = [
        dma("dma0", 0, "conv", 0, 10, 256, "ddr", "lmem"),
        dma("dma0", 1, "conv", 10, 20, 128, "ddr", "lmem"),
        compute("mxu", 0, "matrix", "matmul", "conv", 20, 50),
        wait("vec", 0, "relu", 20, 50),
        compute("vec", 1, "vector", "relu", "relu", 50, 60),
        wait("dma0", 2, "relu", 20, 60),
        dma("dma0", 3, "relu", 60, 70, 64, "lmem", "ddr"),
        compute("vec", 2, "vector", "add", "", 70, 72),
        compute("mxu", 1, "matrix", "matmul", "fc", 72, 100, 32),
    ]
    return traces.Trace(
        chip="tiny",
        clock_hz=CLOCK_HZ,
        engines=("dma0", "vec", "mxu"),
        memories={"ddr": 1 << 30, "lmem": 1024},
        cycles=100,
        events=events,
        counters={
            "memory.lmem": [(0, 0), (10, 256), (20, 384), (50, 448), (70, 0)],
            "ddr.read": [(0, 25.6), (20, 0)],
            "ddr.write": [(60, 6.4), (70, 0)],
        },
    )


def empty_trace():
    return traces.Trace(chip="idle", clock_hz=1e9, engines=("dma0", "vec"), memories={"lmem": 1024})


# ---- summary


def test_summary_totals():
    s = traces.summarize(small_trace())
    assert s.cycles == 100
    assert s.seconds == pytest.approx(50e-6)
    assert s.instructions == 7
    assert s.busy == {"dma0": 30, "vec": 12, "mxu": 58}
    assert list(s.busy) == ["dma0", "vec", "mxu"]
    assert s.utilization == pytest.approx({"dma0": 0.30, "vec": 0.12, "mxu": 0.58})
    assert (s.ddr_read_bytes, s.ddr_write_bytes) == (384, 64)
    assert s.peak_bytes == {"ddr": 0, "lmem": 448}
    assert s.capacity_bytes == {"ddr": 1 << 30, "lmem": 1024}


def test_summary_ops_exclude_waits_and_opless_work():
    ops = traces.summarize(small_trace()).ops
    assert list(ops) == ["conv", "relu", "fc"]  # order of first start
    conv, relu, fc = ops.values()
    assert (conv.start, conv.end, conv.span) == (0, 50, 50)
    assert conv.busy == {"dma0": 20, "mxu": 30}
    assert conv.dma_bytes == 384
    assert conv.busiest_engine == "mxu"
    assert (relu.start, relu.end, relu.span) == (50, 70, 20)  # its waits from cycle 20 don't count
    assert relu.busy == {"vec": 10, "dma0": 10}
    assert relu.dma_bytes == 64
    assert (fc.start, fc.end, fc.busy, fc.dma_bytes) == (72, 100, {"mxu": 28}, 0)


def test_slowest_orders_by_span_then_start():
    s = traces.summarize(small_trace())
    assert [op.name for op in s.slowest(3)] == ["conv", "fc", "relu"]
    assert [op.name for op in s.slowest(1)] == ["conv"]
    tied = traces.Trace("t", 1e9, ("e",), {}, cycles=20, events=[
        compute("e", 0, "vector", "add", "b", 0, 5),
        compute("e", 1, "vector", "add", "a", 5, 10),
        compute("e", 2, "vector", "add", "c", 10, 20),
    ])
    assert [op.name for op in traces.summarize(tied).slowest(5)] == ["c", "b", "a"]


def test_summary_of_empty_trace():
    s = traces.summarize(empty_trace())
    assert s.cycles == 0 and s.instructions == 0
    assert s.utilization == {"dma0": 0.0, "vec": 0.0}
    assert s.peak_bytes == {"lmem": 0}
    assert s.ops == {} and s.slowest(3) == []


def test_summary_is_frozen():
    s = traces.summarize(small_trace())
    with pytest.raises(AttributeError):
        s.cycles = 1


def test_format_summary():
    text = traces.format_summary(traces.summarize(small_trace()), top=2)
    lines = text.splitlines()
    assert lines[0] == "tiny: 100 cycles = 50.00 us at 2 MHz, 7 instructions"
    assert "  dma0   30.0% busy  (30 cycles)" in lines
    assert "  vec    12.0% busy  (12 cycles)" in lines
    assert "  mxu    58.0% busy  (58 cycles)" in lines
    assert "ddr: read 384 B, write 64 B" in lines
    assert "  lmem  448 B of 1.0 KiB (43.8%)" in lines
    assert "  ddr   0 B of 1.0 GiB (0.0%)" in lines
    slowest = lines[lines.index("slowest ops:") + 2:]
    assert [line.split() for line in slowest] == [
        ["conv", "50", "50.0%", "mxu"],
        ["fc", "28", "28.0%", "mxu"],
    ]


def test_format_summary_of_empty_trace():
    text = traces.format_summary(traces.summarize(empty_trace()))
    assert text.startswith("idle: 0 cycles = 0.00 us at 1,000 MHz, 0 instructions")
    assert "slowest ops" not in text


@pytest.mark.parametrize("n, text", [
    (0, "0 B"), (1023, "1,023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
    (int(1.2 * 2**20), "1.2 MiB"), (3 * 2**30, "3.0 GiB"), (2**50, "1,024.0 TiB"),
])
def test_human_bytes(n, text):
    assert human_bytes(n) == text


# ---- Chrome trace


def read_chrome(tmp_path, trace):
    path = tmp_path / "run.json"
    traces.write_chrome(trace, path)
    return json.loads(path.read_text())


def test_chrome_threads_in_chip_order(tmp_path):
    doc = read_chrome(tmp_path, small_trace())
    assert doc["displayTimeUnit"] == "ns"
    assert doc["otherData"] == {"chip": "tiny", "clock_hz": CLOCK_HZ, "cycles": 100}
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    assert [e["args"]["name"] for e in meta if e["name"] == "process_name"] == ["tiny"]
    names = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    order = {e["tid"]: e["args"]["sort_index"] for e in meta if e["name"] == "thread_sort_index"}
    assert [names[tid] for tid in sorted(names, key=order.get)] == ["dma0", "vec", "mxu"]


def test_chrome_complete_events(tmp_path):
    doc = read_chrome(tmp_path, small_trace())
    tids = {e["args"]["name"]: e["tid"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    complete = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == 9
    assert [e["ts"] for e in complete] == sorted(e["ts"] for e in complete)
    matmul = next(e for e in complete if e["name"] == "matmul" and e["args"]["op"] == "conv")
    assert matmul["tid"] == tids["mxu"] and matmul["cat"] == "matrix"
    assert (matmul["ts"], matmul["dur"]) == (10.0, 15.0)
    assert matmul["args"] == {"op": "conv", "index": 0, "start cycle": 20, "end cycle": 50,
                              "bytes": 64, "src": "lmem", "dst": "lmem"}
    waits = [e for e in complete if e["cat"] == "wait"]
    spans = sorted((e["tid"], e["ts"], e["dur"]) for e in waits)
    assert spans == [(tids["dma0"], 10.0, 20.0), (tids["vec"], 10.0, 15.0)]


def test_chrome_time_in_microseconds_at_1ghz(tmp_path):
    event = compute("e", 0, "vector", "add", "x", 1000, 3000)
    trace = traces.Trace("g", 1e9, ("e",), {}, cycles=3000, events=[event])
    (event,) = [e for e in read_chrome(tmp_path, trace)["traceEvents"] if e["ph"] == "X"]
    assert event["ts"] == pytest.approx(1.0) and event["dur"] == pytest.approx(2.0)


def test_chrome_counters(tmp_path):
    counters = [e for e in read_chrome(tmp_path, small_trace())["traceEvents"] if e["ph"] == "C"]
    memory = [(e["ts"], e["args"]) for e in counters if e["name"] == "memory.lmem"]
    assert memory == [(0.0, {"bytes": 0}), (5.0, {"bytes": 256}), (10.0, {"bytes": 384}),
                      (25.0, {"bytes": 448}), (35.0, {"bytes": 0})]
    ddr = [(e["ts"], e["args"]["read GB/s"], e["args"]["write GB/s"])
           for e in counters if e["name"] == "ddr bandwidth"]
    # 25.6 B/cycle at 2 MHz = 0.0512 GB/s; 6.4 B/cycle = 0.0128 GB/s
    assert ddr == [(0.0, pytest.approx(0.0512), 0), (10.0, 0, 0), (30.0, 0, pytest.approx(0.0128)),
                   (35.0, 0, 0)]
    assert {e["name"] for e in counters} == {"memory.lmem", "ddr bandwidth"}


def test_chrome_ddr_bandwidth_keeps_the_direction_that_did_not_change(tmp_path):
    trace = traces.Trace("g", 1e9, ("e",), {}, cycles=40, counters={
        "ddr.read": [(0, 10), (20, 3), (20, 0)],  # two points at one cycle: the last one holds
        "ddr.write": [(10, 5), (30, 0)],
    })
    counters = [e for e in read_chrome(tmp_path, trace)["traceEvents"] if e["ph"] == "C"]
    # at 1 GHz, bytes per cycle equal GB/s
    assert [(e["ts"], e["args"]) for e in counters] == [
        (0.0, {"read GB/s": 10.0, "write GB/s": 0.0}),
        (0.01, {"read GB/s": 10.0, "write GB/s": 5.0}),
        (0.02, {"read GB/s": 0.0, "write GB/s": 5.0}),
        (0.03, {"read GB/s": 0.0, "write GB/s": 0.0}),
    ]


def test_chrome_is_deterministic(tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    traces.write_chrome(small_trace(), first)
    traces.write_chrome(small_trace(), second)
    assert first.read_bytes() == second.read_bytes()


def test_chrome_of_empty_trace(tmp_path):
    doc = read_chrome(tmp_path, empty_trace())
    assert {e["ph"] for e in doc["traceEvents"]} == {"M"}


# ---- plots


def assert_png(path, min_width=1000, min_height=300):
    """A PNG of a plausible size that is not blank: several colours, not one flat field."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width >= min_width and height >= min_height, (width, height)
    pixels = image.imread(path)[::3, ::3, :3]
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 20
    assert (pixels < 0.5).any() and (pixels > 0.9).any()  # dark lines and text on a light field


def test_plot_timeline_writes_png(tmp_path):
    path = tmp_path / "timeline.png"
    traces.plot_timeline(small_trace(), path)
    assert_png(path)


def test_plot_timeline_of_empty_trace(tmp_path):
    path = tmp_path / "empty.png"
    traces.plot_timeline(empty_trace(), path)
    assert path.read_bytes()[:8] == PNG_SIGNATURE


def long_trace(n_events):
    """Three engines busy back to back, the op changing every 1,000 instructions."""
    engines = ("dma0", "vec", "mxu")
    events = []
    for i in range(n_events):
        slot = i // 3
        events.append(compute(engines[i % 3], slot, "vector", "add", f"op{i // 1000}", slot * 4, slot * 4 + 3))
    return traces.Trace("big", 1e9, engines, {}, cycles=(n_events // 3 + 1) * 4, events=events)


def test_plot_timeline_aggregates_a_long_trace(tmp_path):
    path = tmp_path / "long.png"
    traces.plot_timeline(long_trace(100_000), path)
    assert_png(path)


def test_bars_merge_only_consecutive_events_of_one_op_within_the_gap():
    events = [
        compute("e", 0, "vector", "add", "a", 0, 3),
        compute("e", 1, "vector", "add", "a", 4, 6),  # gap 1 < 2: merged
        compute("e", 2, "vector", "add", "b", 6, 7),  # other op: new bar
        compute("e", 3, "vector", "add", "a", 7, 8),  # a again after b: new bar
        compute("e", 4, "vector", "add", "a", 10, 12),  # gap 2, not < 2: new bar
        wait("e", 5, "a", 12, 13),  # waits get their own colour
    ]
    assert _bars(events, merge_gap=2) == {
        "a": [(0, 6), (7, 1), (10, 2)],
        "b": [(6, 1)],
        "(wait)": [(12, 1)],
    }
    assert _bars(events, merge_gap=None)["a"] == [(0, 3), (4, 2), (7, 1), (10, 2)]


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 5), st.sampled_from("ab")), max_size=40),
       st.floats(0, 10))
def test_bars_cover_every_event(steps, merge_gap):
    """Merged bars never lose an instruction's time and never cover time outside the events' span."""
    events, cycle = [], 0
    for i, (gap, length, op) in enumerate(steps):
        events.append(compute("e", i, "vector", "add", op, cycle + gap, cycle + gap + length))
        cycle += gap + length
    bars = _bars(events, merge_gap)
    for e in events:
        assert any(start <= e.start and e.end <= start + width for start, width in bars[e.op])
    assert sum(len(spans) for spans in bars.values()) <= len(events)
    covered = sum(width for spans in bars.values() for _, width in spans)
    assert covered <= (events[-1].end - events[0].start if events else 0)


def test_long_trace_is_merged_to_few_bars():
    trace = long_trace(50_000)
    mxu = sorted((e for e in trace.events if e.engine == "mxu"), key=lambda e: e.start)
    pixel_cycles = trace.cycles / 1000
    bars = _bars(mxu, pixel_cycles)
    assert sorted(bars) == sorted(f"op{i}" for i in range(50))
    assert all(len(spans) == 1 for spans in bars.values())  # one bar per op instead of ~333 events


# ---- a hand-written program on the tiny chip, whose every figure is known
#
# gdma.0, gdma.1 load a (8x16) and b (16x8) float32: 10 latency + 512 B / 4 B per cycle = 138 each;
# tiu.0 waits for both; tiu.1 multiplies (2 + 2*2 folds * (16 + 6) = 90 cycles, 2*8*16*8 = 2048 ops);
# gdma.2 waits for it and gdma.3 stores c (10 + 256/4 = 74); tiu.2 sums c's rows (2 + 64/4 = 18
# cycles over 64 source elements); gdma.4 waits for that (already done: it does not block) and
# gdma.5 stores the 8 sums (10 + 32/4 = 18).

HAND = """\
.program chip=tiny graph=hand
.engine gdma
.engine tiu
.buffer lmem@0x0 size=512 name=a first=gdma.0 last=tiu.1
.buffer lmem@0x200 size=512 name=b first=gdma.1 last=tiu.1
.buffer lmem@0x400 size=256 name=c first=tiu.1 last=gdma.3,tiu.2
.buffer lmem@0x500 size=32 name=rows first=tiu.2 last=gdma.5
gdma.0 dma src=ddr@0x0:float32[8,16;16,1] dst=lmem@0x0:float32[8,16;16,1] op=mm
gdma.1 dma src=ddr@0x200:float32[16,8;8,1] dst=lmem@0x200:float32[16,8;8,1] op=mm
gdma.2 wait on=tiu.1 op=mm
gdma.3 dma src=lmem@0x400:float32[8,8;8,1] dst=ddr@0x400:float32[8,8;8,1] op=mm
gdma.4 wait on=tiu.2 op=rs
gdma.5 dma src=lmem@0x500:float32[8;1] dst=ddr@0x600:float32[8;1] op=rs
tiu.0 wait on=gdma.0,gdma.1 op=mm
tiu.1 matmul a=lmem@0x0:float32[8,16;16,1] b=lmem@0x200:float32[16,8;8,1] c=lmem@0x400:float32[8,8;8,1] acc=0 op=mm
tiu.2 vector fn=reduce_sum cdt=float32 dst=lmem@0x500:float32[8;1] src=lmem@0x400:float32[8,8;8,1] op=rs
"""


@pytest.fixture(scope="module")
def hand(tiny):
    return sim.execute(isa.Program.from_text(HAND), tiny, mode="timing").trace


# The hand program's ops overlap from cycle 366 to 440: mm stores c (gdma, 366-440) while rs
# reduces it (tiu, 366-384), so cycles 366-384 split evenly. Before, mm runs alone; after, rs.
MM_CYCLES = 366 + 9 + 56
RS_CYCLES = 9 + 18


def test_time_shares_of_the_hand_program(hand):
    ops = traces.summarize(hand).ops
    assert (ops["mm"].cycles, ops["rs"].cycles) == (pytest.approx(MM_CYCLES), pytest.approx(RS_CYCLES))
    assert ops["mm"].cycles + ops["rs"].cycles == pytest.approx(hand.cycles)


def group_trace():
    """A layer group of three ops, each spanning cycles 0-100 (conv's loads, then its product;
    bias and relu on the vector unit as the product's tiles come), and then an op alone."""
    events = [
        dma("dma0", 0, "conv", 0, 40, 256, "ddr", "lmem"),
        compute("mxu", 0, "matrix", "matmul", "conv", 40, 80),
        compute("vec", 0, "vector", "add", "bias", 0, 10),  # bias and relu start with the group (a first tile)
        compute("vec", 1, "vector", "relu", "relu", 10, 20),
        compute("vec", 2, "vector", "add", "bias", 80, 90),
        compute("vec", 3, "vector", "relu", "relu", 90, 100),
        dma("dma0", 1, "conv", 80, 100, 64, "lmem", "ddr"),
        wait("dma0", 2, "fc", 100, 110),
        compute("mxu", 1, "matrix", "matmul", "fc", 120, 150),
    ]
    return traces.Trace("tiny", 1e9, ("dma0", "vec", "mxu"), {"ddr": 1 << 30, "lmem": 1024}, cycles=150, events=events)


def test_a_layer_groups_time_is_split_among_its_ops_by_their_work():
    ops = traces.summarize(group_trace()).ops
    assert [ops[name].span for name in ("conv", "bias", "relu")] == [100, 90, 90]
    # 0-10: conv's dma and bias's add; 10-20: conv's dma and relu; 20-80: conv alone; 80-90: conv's dma and
    # bias; 90-100: conv's dma and relu -> conv 5 + 5 + 60 + 5 + 5, bias 5 + 5, relu 5 + 5
    assert (ops["conv"].cycles, ops["bias"].cycles, ops["relu"].cycles) == (80, 10, 10)
    assert sum(ops[name].cycles for name in ("conv", "bias", "relu")) == 100  # the group's span, counted once
    assert ops["fc"].cycles == 30 and ops["fc"].span == 30  # its wait is not its time
    s = traces.summarize(group_trace())
    assert [op.name for op in s.slowest(4)] == ["conv", "fc", "bias", "relu"]


def test_ops_that_all_wait_share_that_time_by_their_work():
    trace = traces.Trace("t", 1e9, ("a", "b"), {}, cycles=40, events=[
        compute("a", 0, "vector", "add", "x", 0, 30),  # x runs 0-10 and 20-30, y 0-10 and 30-40: 10-20 neither
        compute("b", 0, "vector", "add", "y", 0, 10),
        compute("b", 1, "vector", "add", "y", 30, 40),
    ])
    trace.events[0] = trace.events[0]._replace(end=10)
    trace.events.append(compute("a", 1, "vector", "add", "x", 20, 30))
    ops = traces.summarize(trace).ops
    # 0-10 split 10 : 10; 10-20 both wait, by their work (20 : 20); 20-30 x; 30-40 y
    assert (ops["x"].cycles, ops["y"].cycles) == (20, 20)
    trace.events.append(compute("a", 2, "vector", "add", "x", 20, 30))  # x's work doubles in 20-30 (two engines' worth)
    ops = traces.summarize(trace).ops
    assert ops["x"].cycles == pytest.approx(5 + 10 * 30 / 50 + 10)


def test_the_shares_of_a_real_run_add_up_to_its_time():
    """The bottleneck on the BM1684: a convolution's bias and activation run with its tiles, the
    residual sum and its activation with the last convolution's, so the ops' spans overlap and
    together count the run's time a third more than once; their shares count it once."""
    root = Path(__file__).resolve().parents[1]
    res = sim.run(graphfile.load(root / "examples" / "bottleneck.yaml").graph, "bm1684", mode="timing")
    ops = res.stats.ops.values()
    assert sum(op.span for op in ops) > 1.3 * res.cycles
    assert sum(op.cycles for op in ops) == pytest.approx(res.cycles)  # some op runs at every moment
    assert all(0 <= op.cycles <= op.span + 1e-9 for op in ops)
    c, add, relu = (res.stats.ops[name] for name in ("res2b_c", "res2b_sum", "res2b_relu"))
    assert c.start < add.start < c.end < add.end and add.start < relu.start < add.end
    assert c.cycles < 0.5 * c.span and add.cycles < 0.7 * add.span  # each gets its part of the time they share


def event(trace, engine, index):
    return next(e for e in trace.events if (e.engine, e.index) == (engine, index))


def test_hand_program_timeline(hand):
    spans = {(e.engine, e.index): (e.kind, e.start, e.end, e.ops) for e in hand.events}
    assert spans == {
        ("gdma", 0): ("dma", 0, 138, 0),
        ("gdma", 1): ("dma", 138, 276, 0),
        ("gdma", 2): ("wait", 276, 366, 0),
        ("gdma", 3): ("dma", 366, 440, 0),
        ("gdma", 5): ("dma", 440, 458, 0),  # gdma.4 did not block: no event
        ("tiu", 0): ("wait", 0, 276, 0),
        ("tiu", 1): ("matrix", 276, 366, 2 * 8 * 16 * 8),
        ("tiu", 2): ("vector", 366, 384, 64),  # a reduction counts its source's elements
    }
    assert hand.cycles == 458
    assert hand.syncs == [Sync("gdma", 2, (("tiu", 1),)), Sync("gdma", 4, (("tiu", 2),)),
                          Sync("tiu", 0, (("gdma", 0), ("gdma", 1)))]


def test_trace_carries_the_chip_peaks(hand, tiny):
    assert hand.ddr_bandwidth == 4
    # tiny: 4x4x1 matrix, 1 block cycle: 2 * 16 ops per cycle; vector 4 lanes x per_lane
    assert hand.peak_ops == {"matrix": {"float32": 32.0, "int8": 32.0},
                             "vector": {"float32": 4, "int8": 16, "int32": 4, "int16": 8, "int64": 4}}


# ---- flow arrows


def flows(doc):
    """flow id -> (start event, end event)."""
    starts = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "s"}
    ends = {e["id"]: e for e in doc["traceEvents"] if e["ph"] == "f"}
    assert starts.keys() == ends.keys()
    return {i: (starts[i], ends[i]) for i in sorted(starts)}


def test_flow_arrows_go_from_each_waited_instruction_to_the_one_held_back(tmp_path, hand):
    doc = read_chrome(tmp_path, hand)
    tids = {e["args"]["name"]: e["tid"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    gdma, tiu = tids["gdma"], tids["tiu"]
    arrows = [((s["tid"], s["ts"]), (f["tid"], f["ts"])) for s, f in flows(doc).values()]
    # each end sits mid-slice (at 1 GHz, cycle c is c/1000 us): program order of the waits
    assert arrows == [
        ((tiu, pytest.approx(0.321)), (gdma, pytest.approx(0.403))),  # tiu.1 (276-366) -> gdma.3 (366-440)
        ((tiu, pytest.approx(0.375)), (gdma, pytest.approx(0.449))),  # tiu.2 -> gdma.5, past a wait that did not block
        ((gdma, pytest.approx(0.069)), (tiu, pytest.approx(0.321))),  # gdma.0 (0-138) -> tiu.1
        ((gdma, pytest.approx(0.207)), (tiu, pytest.approx(0.321))),  # gdma.1 (138-276) -> tiu.1
    ]
    for start, end in flows(doc).values():
        assert (start["cat"], start["name"], end["cat"], end["name"]) == ("sync", "wait", "sync", "wait")
        assert end["bp"] == "e" and "bp" not in start


def test_flow_ends_lie_inside_their_slices_and_point_forward(tmp_path):
    """On a double-buffered run: every flow event is inside the slice it binds to, on its track,
    and the arrow never goes back in time; every waited instruction has its arrow."""
    g = isa.Graph("mm")
    x = g.input("x", (64, 256), "float32")
    g.output(isa.ops.active(isa.ops.matrix_mul(x, g.constant("w", np.ones((256, 128), np.float32))), "relu"), "y")
    trace = sim.run(g, "bm1684", mode="timing").trace
    doc = read_chrome(tmp_path, trace)
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]

    def enclosing(flow):
        (found,) = [e for e in slices if e["tid"] == flow["tid"] and e["ts"] <= flow["ts"] <= e["ts"] + e["dur"]]
        return found

    arrows = flows(doc)
    assert len(arrows) == len(traces.chrome.flow_pairs(trace)) > 10
    waited = sum(len(s.on) for s in trace.syncs)
    assert len(arrows) == waited  # no wait ends a stream here, so each waited instruction has an arrow
    for start, end in arrows.values():
        source, target = enclosing(start), enclosing(end)
        assert source["ts"] + source["dur"] <= target["ts"] + 1e-9
        assert target["cat"] != "wait"


def test_a_blocked_wait_that_ends_its_stream_receives_the_arrow():
    trace = traces.Trace("t", 1e9, ("a", "b"), {}, cycles=20, events=[
        compute("a", 0, "vector", "add", "x", 0, 20),
        wait("b", 0, "x", 0, 20),
    ], syncs=[Sync("b", 0, (("a", 0),))])
    (pair,) = traces.chrome.flow_pairs(trace)
    assert pair == (trace.events[0], trace.events[1])
    trace.events.pop()  # had it not blocked, it would hold nothing back
    assert traces.chrome.flow_pairs(trace) == []


# ---- reading a saved trace back


def test_load_gives_back_the_trace_written(tmp_path, hand):
    path = tmp_path / "run.json"
    traces.write_chrome(hand, path)
    loaded = traces.load(path)
    assert loaded == hand
    assert loaded.events == hand.events and loaded.counters == hand.counters
    assert loaded.buffers == hand.buffers and loaded.syncs == hand.syncs
    assert isinstance(loaded.events[0], traces.Event) and isinstance(loaded.syncs[0].on[0], tuple)
    assert list(json.loads(path.read_text()))[-1] == "npusim"  # Perfetto stops reading at a key it does not know


def test_load_of_a_hand_made_trace(tmp_path):
    trace = small_trace()
    trace.buffers = [BufferSpan("w", "ddr", 0, 64, 0, 100)]
    path = tmp_path / "small.json"
    traces.write_chrome(trace, path)
    assert traces.load(path) == trace


@pytest.mark.parametrize("content, fragment", [
    (None, "cannot read"),
    (b"\x89PNG\r\n", "not a JSON file"),
    (b"not json", "not a JSON file"),
    (b"[1, 2]", "not an npusim trace"),
    (b'{"traceEvents": []}', "not an npusim trace"),
    (b'{"npusim": {"format": 99}}', "format 99"),
    (b'{"npusim": {"format": 1, "chip": "x"}}', "damaged"),
    ((b'{"npusim": {"format": 1, "chip": "x", "clock_hz": 1, "engines": [], "memories": {}, "cycles": 0,'
      b' "events": {"fields": ["nonsense"], "rows": [[1]]}, "syncs": {"fields": [], "rows": []},'
      b' "buffers": {"fields": [], "rows": []}, "counters": {}, "ddr_bandwidth": 0, "peak_ops": {}}}'), "nonsense"),
], ids=["missing", "binary", "text", "list", "other-trace", "format", "fields", "unknown-field"])
def test_load_names_the_file_and_what_is_wrong(tmp_path, content, fragment):
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(traces.TraceFileError, match=fragment) as info:
        traces.load(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


# ---- memory: occupancy, fragmentation, buffers


def test_buffer_spans_of_the_hand_program(hand):
    assert hand.buffers == [
        BufferSpan("a", "lmem", 0x0, 512, 0, 366),
        BufferSpan("b", "lmem", 0x200, 512, 138, 366),
        BufferSpan("c", "lmem", 0x400, 256, 276, 440),  # closes at the later of gdma.3 and tiu.2
        BufferSpan("rows", "lmem", 0x500, 32, 366, 458),
    ]


def test_occupancy_and_fragmentation_counters_of_the_hand_program(hand):
    assert hand.counters["memory.lmem"] == [(0, 512), (138, 1024), (276, 1280), (366, 288), (440, 32), (458, 0)]
    assert hand.counters["memory.ddr"] == [(0, 0)]
    # at 366, c [0x400, 0x500) and rows [0x500, 0x520) leave holes of 1024 and 2784 bytes in 4 KiB;
    # at 440 rows alone leaves 1280 and 2784
    assert hand.counters["fragmentation.lmem"] == [(0, 0.0), (366, pytest.approx(1024 / 3808)),
                                                   (440, pytest.approx(1280 / 4064)), (458, 0.0)]
    s = traces.summarize(hand)
    assert s.peak_fragmentation["lmem"] == pytest.approx(1280 / 4064)
    assert s.peak_bytes["lmem"] == 1280


def test_fragmentation_of_a_hand_made_layout():
    blocks = [BufferSpan("a", "m", 0, 10, 0, 1), BufferSpan("b", "m", 20, 10, 0, 1), BufferSpan("c", "m", 50, 10, 0, 1)]
    # free 70 bytes in holes of 10, 20 and 40
    assert fragmentation(blocks, 100) == pytest.approx(1 - 40 / 70)
    assert fragmentation(blocks[:1], 100) == 0.0  # one free block
    assert fragmentation([], 100) == 0.0
    assert fragmentation([BufferSpan("all", "m", 0, 100, 0, 1)], 100) == 0.0  # full: no free bytes
    overlapping = blocks + [BufferSpan("d", "m", 5, 10, 0, 1)]  # [5, 15) overlaps a: one block [0, 15)
    assert fragmentation(overlapping, 100) == pytest.approx(1 - 40 / 65)


def test_memory_counters_apply_every_change_of_a_cycle_before_recording():
    spans = [
        BufferSpan("a", "m", 0, 40, 0, 10),
        BufferSpan("b", "m", 60, 20, 5, 20),
        BufferSpan("c", "m", 0, 40, 10, 20),  # takes a's place at the cycle a leaves
        BufferSpan("d", "m", 90, 10, 12, 12),  # opens and closes at once: never live
    ]
    counters = memory_counters(spans, {"m": 100, "other": 50})
    assert counters["memory.m"] == [(0, 40), (5, 60), (20, 0)]
    # holes at 5: [40, 60) and [80, 100): 20 of 40 free bytes in the largest
    assert counters["fragmentation.m"] == [(0, 0.0), (5, 0.5), (20, 0.0)]
    assert counters["memory.other"] == [(0, 0)] and counters["fragmentation.other"] == [(0, 0.0)]


def test_occupancy_equals_the_live_buffers_on_a_real_run():
    g = isa.Graph("mm")
    x = g.input("x", (64, 512), "float32")
    g.output(isa.ops.matrix_mul(x, g.constant("w", np.ones((512, 256), np.float32))), "y")
    trace = sim.run(g, "bm1684", mode="timing").trace
    for mem, capacity in trace.memories.items():
        for cycle, value in trace.counters[f"memory.{mem}"]:
            live = [b for b in trace.buffers if b.mem == mem and b.start <= cycle < b.end]
            assert value == sum(b.size for b in live) <= capacity


def test_peak_buffers_are_the_biggest_live_at_the_peak():
    trace = traces.Trace("t", 1e9, ("e",), {"m": 1000}, cycles=30, buffers=[
        BufferSpan("small", "m", 0, 100, 0, 30),
        BufferSpan("big", "m", 100, 400, 10, 20),
        BufferSpan("mid", "m", 500, 200, 10, 30),
        BufferSpan("later", "m", 700, 300, 20, 30),  # at 20 the peak is over: big left
        BufferSpan("gone", "m", 800, 150, 0, 10),
    ])
    trace.counters.update(memory_counters(trace.buffers, trace.memories))
    assert trace.counters["memory.m"] == [(0, 250), (10, 700), (20, 600), (30, 0)]
    cycle, biggest = peak_buffers(trace, "m", 2)
    assert cycle == 10
    assert [b.name for b in biggest] == ["big", "mid"]
    assert [b.name for b in peak_buffers(trace, "m", 5)[1]] == ["big", "mid", "small"]
    assert used_memories(trace) == ["m"]


# ---- DDR bandwidth series


def test_ddr_traffic_averages_each_bin():
    edges, read, write = ddr_traffic(small_trace(), bins=10)
    assert list(edges) == list(range(0, 101, 10))
    assert read.tolist() == pytest.approx([25.6, 25.6] + [0] * 8)
    assert write.tolist() == pytest.approx([0] * 6 + [6.4] + [0] * 3)
    edges, read, write = ddr_traffic(small_trace(), bins=4)  # bins across the changes
    assert read.tolist() == pytest.approx([25.6 * 20 / 25, 0, 0, 0])
    assert write.tolist() == pytest.approx([0, 0, 6.4 * 10 / 25, 0])


def test_ddr_traffic_holds_the_bytes_moved(hand):
    edges, read, write = ddr_traffic(hand, bins=7)
    width = np.diff(edges)
    assert read @ width == pytest.approx(512 + 512)
    assert write @ width == pytest.approx(256 + 32)
    edges, read, _ = ddr_traffic(hand)  # a short run: one bin per cycle
    assert len(edges) == hand.cycles + 1
    assert read[:10].tolist() == [0] * 10 and read[10:138].tolist() == [4] * 128  # after gdma.0's latency


# ---- roofline


def test_roofline_points_of_the_hand_program(hand):
    mm, rs = MM_CYCLES, RS_CYCLES  # their shares of the time (test_time_shares_of_the_hand_program)
    assert roofline_points(hand) == [
        # mm: 2048 ops over a + b read and c written (1280 DDR bytes), at 1 GHz
        RooflinePoint("mm", "matrix", 2048 / 1280, pytest.approx(2048 / (mm * 1e-9)), pytest.approx(mm / 458), "float32"),
        RooflinePoint("rs", "vector", 64 / 32, pytest.approx(64 / (rs * 1e-9)), pytest.approx(rs / 458), "float32"),
    ]


def test_roofline_leaves_out_ops_without_arithmetic_or_ddr_traffic():
    trace = small_trace()
    assert roofline_points(trace) == []  # the events of small_trace count no ops
    trace.events = [e._replace(ops=1000) if e.kind != "dma" else e for e in trace.events]
    names = [p.op for p in roofline_points(trace)]
    assert names == ["conv", "relu"]  # fc moved no DDR bytes


def test_ceilings_group_dtypes_of_one_peak_highest_first(hand):
    assert ceilings(hand) == [
        ("matrix", ("float32", "int8"), 32e9),
        ("vector", ("int8",), 16e9),
        ("vector", ("int16",), 8e9),
        ("vector", ("float32", "int32", "int64"), 4e9),
    ]
    # the ops run in float32: their roofs are the float32 peaks of the units they use
    assert ceilings(hand, roofline_points(hand)) == [("matrix", ("float32",), 32e9), ("vector", ("float32",), 4e9)]


@pytest.mark.parametrize("example, dtype", [("mlp.yaml", "float32"), ("mlp_int8.yaml", "int8")])
def test_the_roof_is_the_peak_of_the_dtype_the_model_runs_in(tmp_path, example, dtype):
    """On the BM1684 the int8 matrix peak is 8 times the float32 one: a float32 model's roof is
    the float32 peak, an int8 model's the int8 one; a saved trace keeps the ops' dtypes."""
    root = Path(__file__).resolve().parents[1]
    res = sim.run(graphfile.load(root / "examples" / example).graph, "bm1684", mode="timing")
    points = roofline_points(res.trace)
    assert {p.dtype for p in points} == {dtype}
    bm = chips.load("bm1684")
    roof = ceilings(res.trace, points)[0]
    assert roof == ("matrix", (dtype,), peak_ops(bm)["matrix"][dtype] * bm.clock_hz)
    assert (peak_ops(bm)["matrix"]["float32"], peak_ops(bm)["matrix"]["int8"]) == (4096, 32768)
    traces.write_chrome(res.trace, tmp_path / "run.json")
    assert traces.load(tmp_path / "run.json").op_dtypes == res.trace.op_dtypes
    assert res.trace.op_dtypes["fc1"]["matrix"] == dtype


# ---- per-op figures, the op table and CSV


def test_op_stats_count_arithmetic_and_ddr_bytes(hand):
    mm, rs = traces.summarize(hand).ops.values()
    assert (mm.ops, mm.ddr_bytes, mm.dma_bytes, mm.span) == (2048, 1280, 1280, 440)
    assert (mm.cycles, mm.seconds) == (pytest.approx(MM_CYCLES), pytest.approx(MM_CYCLES * 1e-9))
    assert mm.intensity == 1.6 and mm.achieved == pytest.approx(2048 / (MM_CYCLES * 1e-9))
    assert (rs.ops, rs.ddr_bytes, rs.intensity) == (64, 32, 2.0)
    both_ways = traces.Trace("t", 1e9, ("d",), {}, cycles=10, events=[dma("d", 0, "copy", 0, 10, 100, "ddr", "ddr")])
    (copy,) = traces.summarize(both_ways).ops.values()
    assert (copy.ddr_bytes, copy.ops, copy.intensity, copy.achieved) == (200, 0, 0.0, 0.0)


def test_format_ops(hand):
    lines = traces.format_ops(traces.summarize(hand)).splitlines()
    assert lines[0] == "ops by time (2 of 2):"
    assert lines[1].split() == ["op", "cycles", "%", "total", "span", "busiest", "DDR", "bytes", "ops", "ops/B", "GOP/s"]
    assert lines[2].split() == ["mm", "431", "94.1%", "440", "gdma", "1.2", "KiB", "2.0k", "1.60", "4.75"]
    assert lines[3].split() == ["rs", "27", "5.9%", "92", "tiu", "32", "B", "64", "2.00", "2.37"]
    assert traces.format_ops(traces.summarize(empty_trace())) == "no ops"


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_events_csv(tmp_path, hand):
    path = tmp_path / "events.csv"
    traces.write_events_csv(hand, path)
    rows = read_csv(path)
    assert list(rows[0]) == ["engine", "index", "kind", "name", "op", "start", "end", "cycles", "bytes", "cached",
                             "ops", "src", "dst", "note"]
    assert len(rows) == len(hand.events)
    assert [(r["engine"], r["index"]) for r in rows[:3]] == [("gdma", "0"), ("tiu", "0"), ("gdma", "1")]  # by start
    matmul = next(r for r in rows if r["name"] == "matmul")
    assert matmul == {"engine": "tiu", "index": "1", "kind": "matrix", "name": "matmul", "op": "mm", "start": "276",
                      "end": "366", "cycles": "90", "bytes": "256", "cached": "0", "ops": "2048", "src": "", "dst": "lmem", "note": ""}


def test_ops_csv(tmp_path, hand):
    path = tmp_path / "ops.csv"
    traces.write_ops_csv(traces.summarize(hand), path)
    rows = read_csv(path)
    assert list(rows[0]) == ["op", "start", "end", "span cycles", "cycles", "seconds", "busy gdma cycles", "busy tiu cycles",
                             "ddr bytes", "ops", "intensity ops/byte", "achieved ops/s"]
    mm, rs = rows
    assert (mm["op"], mm["start"], mm["end"], mm["span cycles"]) == ("mm", "0", "440", "440")
    assert float(mm["cycles"]) == pytest.approx(MM_CYCLES) and float(rs["cycles"]) == pytest.approx(RS_CYCLES)
    assert float(mm["seconds"]) == pytest.approx(MM_CYCLES * 1e-9)
    assert (mm["busy gdma cycles"], mm["busy tiu cycles"], mm["ddr bytes"], mm["ops"]) == ("350", "90", "1280", "2048")
    assert float(mm["intensity ops/byte"]) == 1.6 and float(mm["achieved ops/s"]) == pytest.approx(2048 / (MM_CYCLES * 1e-9))
    assert (rs["busy gdma cycles"], rs["busy tiu cycles"], rs["ops"]) == ("18", "18", "64")


def test_ops_csv_leaves_undefined_figures_empty(tmp_path):
    trace = traces.Trace("t", 1e9, ("v",), {}, cycles=5, events=[compute("v", 0, "vector", "add", "x", 5, 5)])
    path = tmp_path / "ops.csv"
    traces.write_ops_csv(traces.summarize(trace), path)
    (row,) = read_csv(path)
    assert (row["intensity ops/byte"], row["achieved ops/s"]) == ("", "")


# ---- the other plots


@pytest.mark.parametrize("plot", ["plot_memory", "plot_bandwidth", "plot_roofline", "plot_timeline"])
def test_each_plot_writes_a_png(tmp_path, hand, plot):
    path = tmp_path / f"{plot}.png"
    getattr(traces, plot)(hand, path)
    assert_png(path)


@pytest.mark.parametrize("plot", ["plot_memory", "plot_bandwidth", "plot_roofline"])
def test_plots_of_an_empty_trace(tmp_path, plot):
    path = tmp_path / f"{plot}.png"
    getattr(traces, plot)(empty_trace(), path)
    assert path.read_bytes()[:8] == PNG_SIGNATURE


def many_ops_trace(n_ops):
    """One engine, op k running k + 1 instructions of 10 cycles: the later ops are the busiest."""
    events, cycle = [], 0
    for k in range(n_ops):
        for _ in range(k % 7 + 1):
            events.append(compute("e", len(events), "vector", "add", f"op{k}", cycle, cycle + 10))
            cycle += 10
    events.append(wait("e", len(events), "", cycle, cycle + 5))
    return traces.Trace("many", 1e9, ("e",), {}, cycles=cycle + 5, events=events)


def test_timeline_colours_name_one_op_each_at_300_ops(tmp_path):
    trace = many_ops_trace(300)
    colours, legend = _op_colours(trace.events)
    labels = [label for _, label in legend]
    assert len(legend) == 19 and labels[-2:] == ["(other ops: 283)", "(wait)"]
    coloured = labels[:17]
    assert all(label.startswith("op") and int(label[2:]) % 7 == 6 for label in coloured)  # the busiest ops
    assert len({colours[op] for op in coloured}) == 17
    others = {colours[f"op{k}"] for k in range(300) if f"op{k}" not in coloured}
    assert others == {legend[-2][0]} and legend[-2][0] not in {colours[op] for op in coloured}
    path = tmp_path / "many.png"
    traces.plot_timeline(trace, path)
    assert_png(path)


def test_timeline_gives_each_op_its_colour_up_to_18_ops():
    colours, legend = _op_colours(many_ops_trace(18).events)
    assert len({colours[f"op{k}"] for k in range(18)}) == 18
    assert not any("other" in label for _, label in legend)
