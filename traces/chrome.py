"""Chrome trace event format writer: the JSON opens in ui.perfetto.dev and chrome://tracing.

One process for the chip, one thread (track) per engine in chip order (on a chip of several
cores, a process per core holds that core's engines: "c3.cube" is core 3's cube, as chip YAML
names have no dots; the chip's process keeps the shared ones and the counters), a complete ("X") event
per instruction (waits included, category "wait"), counter ("C") tracks for the occupancy and
fragmentation of each memory and for DDR bandwidth, and flow arrows for the sync between
engines. Times are in microseconds, as the format requires.

A flow arrow goes from each instruction a `wait` waited for to the instruction the wait held
back (the next instruction of the waiting engine; the wait itself when nothing follows it and
it blocked). It is a flow start ("s") and a flow end ("f", bound to its enclosing slice) with
one id, each placed at the middle of its instruction: Perfetto binds a flow event to the slice
open on its track at its timestamp, and the middle of a slice is inside it even where another
slice begins at its end.

The whole Trace is also stored under the "npusim" key, after the events (Perfetto stops
reading at a key it does not know), so `traces.load` can read the file back.
"""

import bisect
import json
from pathlib import Path
from typing import Any

from . import stored
from .records import Event, Trace

_PID = 1
_COUNTERS = {"memory.": "bytes", "state.": "bytes", "fragmentation.": "fraction"}  # counter prefix -> its value's name


def write_chrome(trace: Trace, path: str | Path) -> None:
    """Write `trace` to `path`; the same trace always gives the same bytes."""
    document = {
        "displayTimeUnit": "ns",
        "otherData": {"chip": trace.chip, "clock_hz": trace.clock_hz, "cycles": trace.cycles},
        "traceEvents": (
            _metadata(trace) + _instructions(trace) + _flows(trace) + _memory_counters(trace) + _ddr_counter(trace)
        ),
        stored.KEY: stored.to_data(trace),
    }
    with open(path, "w") as f:
        json.dump(document, f, separators=(",", ":"))


def _micros(trace: Trace, cycles: float) -> float:
    return cycles / trace.clock_hz * 1e6


def _tids(trace: Trace) -> dict[str, int]:
    return {engine: i + 1 for i, engine in enumerate(trace.engines)}  # tid 0 reads as "no thread" in some viewers


def _pids(trace: Trace) -> dict[str, int]:
    """engine -> its process: the chip's, or its core's ("c3.cube": core 3, after the chip's)."""
    cores: dict[str, int] = {}
    for engine in trace.engines:
        core, dot, _ = engine.rpartition(".")
        if dot:
            cores.setdefault(core, len(cores) + _PID + 1)
    return {engine: cores.get(engine.rpartition(".")[0], _PID) for engine in trace.engines}


def _metadata(trace: Trace) -> list[dict[str, Any]]:
    events = [{"ph": "M", "pid": _PID, "name": "process_name", "args": {"name": trace.chip}}]
    pids = _pids(trace)
    for engine, pid in pids.items():
        if pid != _PID and not any(e["pid"] == pid for e in events):
            events.append({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": f"{trace.chip} {engine.rpartition('.')[0]}"}})
            events.append({"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": pid}})
    for i, (engine, tid) in enumerate(_tids(trace).items()):
        thread = {"ph": "M", "pid": pids[engine], "tid": tid}
        events.append(thread | {"name": "thread_name", "args": {"name": engine}})
        events.append(thread | {"name": "thread_sort_index", "args": {"sort_index": i}})
    return events


def _instructions(trace: Trace) -> list[dict[str, Any]]:
    tids, pids = _tids(trace), _pids(trace)
    ordered = sorted(trace.events, key=lambda e: (e.start, tids[e.engine], e.index))
    return [
        {
            "ph": "X",
            "pid": pids[e.engine],
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
            } | ({"ops": e.ops} if e.ops else {}) | ({"cached bytes": e.cached} if e.cached else {}) | ({"note": e.note} if e.note else {}),
        }
        for e in ordered
    ]


def flow_pairs(trace: Trace) -> list[tuple[Event, Event]]:
    """(event waited for, event held back) for every instruction a wait waited for, in the
    order of the waits in the program and of the instructions each names."""
    events = {(e.engine, e.index): e for e in trace.events}
    work: dict[str, list[int]] = {}  # engine -> sorted indices of its events that are not waits
    for e in trace.events:
        if e.kind != "wait":
            work.setdefault(e.engine, []).append(e.index)
    for indices in work.values():
        indices.sort()
    pairs: list[tuple[Event, Event]] = []
    for sync in trace.syncs:
        indices = work.get(sync.engine, [])
        k = bisect.bisect_right(indices, sync.index)
        held = events[sync.engine, indices[k]] if k < len(indices) else events.get((sync.engine, sync.index))
        if held is None:
            continue  # a wait at the end of its stream that did not block holds nothing back
        pairs.extend((events[ident], held) for ident in sync.on if ident in events)
    return pairs


def _flows(trace: Trace) -> list[dict[str, Any]]:
    tids, pids = _tids(trace), _pids(trace)
    flows = []
    for flow_id, (source, target) in enumerate(flow_pairs(trace), 1):
        common = lambda event: {"pid": pids[event.engine], "cat": "sync", "name": "wait", "id": flow_id}  # noqa: E731, B023
        flows.append(common(source) | {"ph": "s", "tid": tids[source.engine], "ts": _middle(trace, source)})
        flows.append(common(target) | {"ph": "f", "bp": "e", "tid": tids[target.engine], "ts": _middle(trace, target)})
    return flows


def _middle(trace: Trace, event: Event) -> float:
    return _micros(trace, (event.start + event.end) / 2)


def _counter(trace: Trace, name: str, cycle: float, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "C", "pid": _PID, "name": name, "ts": _micros(trace, cycle), "args": args}


def _memory_counters(trace: Trace) -> list[dict[str, Any]]:
    return [
        _counter(trace, key, cycle, {value_name: value})
        for prefix, value_name in _COUNTERS.items()
        for key, points in trace.counters.items()
        if key.startswith(prefix)
        for cycle, value in points
    ]


def _ddr_counter(trace: Trace) -> list[dict[str, Any]]:
    """One "ddr bandwidth" track with read and write in GB/s, a point whenever either changes."""
    read = dict(trace.counters.get("ddr.read", []))  # the last point at a cycle wins
    write = dict(trace.counters.get("ddr.write", []))
    events: list[dict[str, Any]] = []
    read_now, write_now = 0.0, 0.0
    for cycle in sorted(read.keys() | write.keys()):
        read_now = read.get(cycle, read_now)
        write_now = write.get(cycle, write_now)
        args = {"read GB/s": _gb_per_s(trace, read_now), "write GB/s": _gb_per_s(trace, write_now)}
        events.append(_counter(trace, "ddr bandwidth", cycle, args))
    return events


def _gb_per_s(trace: Trace, bytes_per_cycle: float) -> float:
    return bytes_per_cycle * trace.clock_hz / 1e9
