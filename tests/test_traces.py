import json
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

import traces
from traces.plots import _bars
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


def test_plot_timeline_writes_png(tmp_path):
    path = tmp_path / "timeline.png"
    traces.plot_timeline(small_trace(), path)
    assert path.read_bytes()[:8] == PNG_SIGNATURE


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
    began = time.perf_counter()
    traces.plot_timeline(long_trace(50_000), path)
    assert time.perf_counter() - began < 10
    assert path.read_bytes()[:8] == PNG_SIGNATURE


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
