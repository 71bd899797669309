"""Chrome trace event format writer: the JSON opens in ui.perfetto.dev and chrome://tracing.

One process for the chip, one thread (track) per engine in chip order, a complete ("X") event
per instruction (waits included, category "wait"), and counter ("C") tracks for the occupancy
of each memory and for DDR bandwidth. Times are in microseconds, as the format requires.
"""

import json

_PID = 1
_MEMORY_PREFIX = "memory."


def write_chrome(trace, path):
    """Write `trace` to `path`; the same trace always gives the same bytes."""
    document = {
        "traceEvents": (
            _metadata(trace) + _instructions(trace) + _memory_counters(trace) + _ddr_counter(trace)
        ),
        "displayTimeUnit": "ns",
        "otherData": {"chip": trace.chip, "clock_hz": trace.clock_hz, "cycles": trace.cycles},
    }
    with open(path, "w") as f:
        json.dump(document, f, separators=(",", ":"))


def _micros(trace, cycles):
    return cycles / trace.clock_hz * 1e6


def _tid(engine_index):
    return engine_index + 1  # tid 0 reads as "no thread" in some viewers


def _metadata(trace):
    events = [{"ph": "M", "pid": _PID, "name": "process_name", "args": {"name": trace.chip}}]
    for i, engine in enumerate(trace.engines):
        thread = {"ph": "M", "pid": _PID, "tid": _tid(i)}
        events.append(thread | {"name": "thread_name", "args": {"name": engine}})
        events.append(thread | {"name": "thread_sort_index", "args": {"sort_index": i}})
    return events


def _instructions(trace):
    tids = {engine: _tid(i) for i, engine in enumerate(trace.engines)}
    ordered = sorted(trace.events, key=lambda e: (e.start, tids[e.engine], e.index))
    return [
        {
            "ph": "X",
            "pid": _PID,
            "tid": tids[e.engine],
            "name": e.name,
            "cat": e.kind,
            "ts": _micros(trace, e.start),
            "dur": _micros(trace, e.end - e.start),
            "args": {
                "op": e.op,
                "index": e.index,
                "start cycle": e.start,
                "end cycle": e.end,
                "bytes": e.bytes,
                "src": e.src,
                "dst": e.dst,
            } | ({"note": e.note} if e.note else {}),
        }
        for e in ordered
    ]


def _counter(trace, name, cycle, args):
    return {"ph": "C", "pid": _PID, "name": name, "ts": _micros(trace, cycle), "args": args}


def _memory_counters(trace):
    return [
        _counter(trace, key, cycle, {"bytes": value})
        for key, points in trace.counters.items()
        if key.startswith(_MEMORY_PREFIX)
        for cycle, value in points
    ]


def _ddr_counter(trace):
    """One "ddr bandwidth" track with read and write in GB/s, a point whenever either changes."""
    read = dict(trace.counters.get("ddr.read", ()))  # the last point at a cycle wins
    write = dict(trace.counters.get("ddr.write", ()))
    events, read_now, write_now = [], 0, 0
    for cycle in sorted(read.keys() | write.keys()):
        read_now = read.get(cycle, read_now)
        write_now = write.get(cycle, write_now)
        args = {"read GB/s": _gb_per_s(trace, read_now), "write GB/s": _gb_per_s(trace, write_now)}
        events.append(_counter(trace, "ddr bandwidth", cycle, args))
    return events


def _gb_per_s(trace, bytes_per_cycle):
    return bytes_per_cycle * trace.clock_hz / 1e9
