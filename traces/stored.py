"""A Trace as plain JSON data, and back: `write_chrome` puts it under the trace file's "npusim"
key (which Perfetto and chrome://tracing ignore), and `load` reads a saved trace file back
so a run can be reported on and compared without running it again.

Records are stored as a list of field names and one list of values per record, so a file stays
compact and a field added later takes its default when an older file is read.
"""

import json

from .records import BufferSpan, Event, Sync, Trace

KEY = "npusim"
FORMAT = 1


class TraceFileError(ValueError):
    """A file that cannot be read as an npusim trace: the message names the file and why."""


def to_data(trace):
    return {
        "format": FORMAT,
        "chip": trace.chip,
        "clock_hz": trace.clock_hz,
        "engines": list(trace.engines),
        "memories": trace.memories,
        "cycles": trace.cycles,
        "ddr_bandwidth": trace.ddr_bandwidth,
        "host_memory": trace.host_memory,
        "peak_ops": trace.peak_ops,
        "events": _records(Event, trace.events),
        "syncs": _records(Sync, trace.syncs),
        "buffers": _records(BufferSpan, trace.buffers),
        "counters": {name: [list(point) for point in points] for name, points in trace.counters.items()},
    }


def from_data(data):
    """The Trace `to_data` was given (KeyError, TypeError or ValueError when data is not one)."""
    if data.get("format") != FORMAT:
        raise ValueError(f"format {data.get('format')!r}, this version reads format {FORMAT}")
    return Trace(
        chip=data["chip"],
        clock_hz=float(data["clock_hz"]),
        engines=tuple(data["engines"]),
        memories=dict(data["memories"]),
        cycles=data["cycles"],
        events=_unpack(Event, data["events"]),
        counters={name: [tuple(point) for point in points] for name, points in data["counters"].items()},
        syncs=[s._replace(on=tuple(tuple(ident) for ident in s.on)) for s in _unpack(Sync, data["syncs"])],
        buffers=_unpack(BufferSpan, data["buffers"]),
        ddr_bandwidth=data["ddr_bandwidth"],
        host_memory=data.get("host_memory", ""),  # written since the host memory came
        peak_ops=data["peak_ops"],
    )


def load(path):
    """The Trace saved in a trace JSON that `write_chrome` wrote."""
    try:
        with open(path, encoding="utf-8") as f:
            document = json.load(f)
    except OSError as exc:
        raise TraceFileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TraceFileError(f"{path}: not a JSON file ({exc})") from None
    if not isinstance(document, dict) or KEY not in document:
        raise TraceFileError(f"{path}: not an npusim trace (no {KEY!r} key; write it with npusim run --trace)")
    try:
        return from_data(document[KEY])
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise TraceFileError(f"{path}: a damaged npusim trace ({type(exc).__name__}: {exc})") from None


def _records(kind, items):
    return {"fields": list(kind._fields), "rows": [list(item) for item in items]}


def _unpack(kind, block):
    fields = block["fields"]
    unknown = set(fields) - set(kind._fields)
    if unknown:
        raise ValueError(f"unknown {kind.__name__} field(s) {', '.join(sorted(unknown))}")
    return [kind(**dict(zip(fields, row))) for row in block["rows"]]
