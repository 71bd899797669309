"""A Trace as plain JSON data, and back: `write_chrome` puts it under the trace file's "npusim"
key (which Perfetto and chrome://tracing ignore), and `load` reads a saved trace file back
so a run can be reported on and compared without running it again.

Records are stored as a list of field names and one list of values per record, so a file stays
compact and a field added later takes its default when an older file is read.

A saved trace is input like any other: `load` reads at most TRACE_BYTES and checks the type and
range of every field it reads (a clock > 0, times finite and >= 0, counts whole), so a damaged
or hostile file is a TraceFileError naming the file, the field and the value, never a
ZeroDivisionError in a summary.
"""
from __future__ import annotations

import json
import math
import os
from numbers import Real
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from isa.limits import open_input

from .records import BufferSpan, Event, Sync, Trace

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

Record = Event | Sync | BufferSpan
R = TypeVar("R", Event, Sync, BufferSpan)  # _unpack gives back records of the kind it is given

KEY = "npusim"
FORMAT = 1
TRACE_BYTES = 1 << 30  # a trace file npusim reads: a run of some ten million instructions


class TraceFileError(ValueError):
    """A file that cannot be read as an npusim trace: the message names the file and why."""


def to_data(trace: Trace) -> dict[str, Any]:
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
        "op_dtypes": trace.op_dtypes,
        "events": _records(Event, trace.events),
        "syncs": _records(Sync, trace.syncs),
        "buffers": _records(BufferSpan, trace.buffers),
        "counters": {name: [list(point) for point in points] for name, points in trace.counters.items()},
    }


def from_data(data: object) -> Trace:
    """The Trace `to_data` was given; a ValueError naming the field and value when data is not one."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a mapping of fields, got {_show(data)}")
    if data.get("format") != FORMAT:
        raise ValueError(f"format {_show(data.get('format'))}, this version reads format {FORMAT}")
    missing = [k for k in _TOP if k not in data and k not in _LATER]
    if missing:
        raise ValueError(f"missing field(s) {', '.join(missing)}")
    for key, check in _TOP.items():
        if key in data and not check(data[key]):
            raise ValueError(f"{key}: {_show(data[key])} is not {_WHAT[check]}")
    return Trace(
        chip=data["chip"],
        clock_hz=float(data["clock_hz"]),
        engines=tuple(data["engines"]),
        memories=dict(data["memories"]),
        cycles=data["cycles"],
        events=_unpack(Event, data["events"]),
        counters={name: [tuple(point) for point in points] for name, points in data["counters"].items()},
        syncs=[s._replace(on=tuple((engine, index) for engine, index in s.on)) for s in _unpack(Sync, data["syncs"])],
        buffers=_unpack(BufferSpan, data["buffers"]),
        ddr_bandwidth=data["ddr_bandwidth"],
        host_memory=data.get("host_memory", ""),
        peak_ops=data["peak_ops"],
        op_dtypes=data.get("op_dtypes", {}),
    )


def load(path: str | Path) -> Trace:
    """The Trace saved in a trace JSON that `write_chrome` wrote."""
    try:
        with open_input(path, regular=True) as f:
            size = os.fstat(f.fileno()).st_size
            text = f.read() if size <= TRACE_BYTES else None  # refused by its size, before it is read
    except OSError as exc:
        raise TraceFileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if text is None or len(text) > TRACE_BYTES:
        raise TraceFileError(f"{path}: larger than the limit of {TRACE_BYTES} bytes for a trace file")
    try:
        document = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise TraceFileError(f"{path}: not a JSON file ({type(exc).__name__}: {str(exc)[:200]})") from None
    if not isinstance(document, dict) or KEY not in document:
        raise TraceFileError(f"{path}: not an npusim trace (no {KEY!r} key; write it with npusim run --trace)")
    try:
        return from_data(document[KEY])
    except ValueError as exc:
        raise TraceFileError(f"{path}: a damaged npusim trace ({exc})") from None


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _text(v: object) -> bool:
    return isinstance(v, str)


def _count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _amount(v: object) -> bool:
    """A number >= 0 and finite: a time in cycles, a rate."""
    return isinstance(v, Real) and not isinstance(v, bool) and math.isfinite(v) and v >= 0  # type: ignore[operator]  # numbers.Real declares no <=; every Real has it


def _clock(v: object) -> bool:
    return _amount(v) and v > 0  # type: ignore[operator]  # _amount checked that v is a Real


def _texts(v: object) -> bool:
    return isinstance(v, list) and all(map(_text, v))


def _ids(v: object) -> bool:  # lists once read from JSON; tuples when to_data's own output is read back
    return isinstance(v, (list, tuple)) and all(isinstance(i, (list, tuple)) and len(i) == 2 and _text(i[0]) and _count(i[1]) for i in v)


def _mapping_of(check: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda v: isinstance(v, dict) and all(_text(k) and check(x) for k, x in v.items())


def _points(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(p, (list, tuple)) and len(p) == 2 and _amount(p[0]) and _amount(p[1]) for p in v)


def _block(v: object) -> bool:
    return isinstance(v, dict) and _texts(v.get("fields")) and isinstance(v.get("rows"), list)


_peaks = _mapping_of(_mapping_of(_amount))
_dtypes = _mapping_of(_mapping_of(_text))
_counters = _mapping_of(_points)
_sizes = _mapping_of(_count)
_TOP = {"chip": _text, "clock_hz": _clock, "engines": _texts, "memories": _sizes, "cycles": _count, "events": _block,
        "syncs": _block, "buffers": _block, "counters": _counters, "ddr_bandwidth": _amount, "host_memory": _text, "peak_ops": _peaks,
        "op_dtypes": _dtypes}
_LATER = ("host_memory", "op_dtypes")  # optional: a file without them reads with their defaults
_WHAT = {_text: "a string", _clock: "a finite number > 0", _texts: "a list of strings", _sizes: "a mapping of name to whole number",
         _count: "a whole number >= 0", _block: "a block of {fields, rows}", _counters: "a mapping of name to [cycle, value] points",
         _amount: "a finite number >= 0", _peaks: "a mapping of unit to dtype to number", _ids: "a list of [engine, index] pairs",
         _dtypes: "a mapping of op to unit to dtype"}
# Each record's fields and what each holds.
_FIELDS: dict[type, dict[str, Callable[[object], bool]]] = {
    Event: {"engine": _text, "index": _count, "kind": _text, "name": _text, "op": _text, "start": _amount, "end": _amount,
            "bytes": _count, "src": _text, "dst": _text, "note": _text, "ops": _count, "cached": _count},
    Sync: {"engine": _text, "index": _count, "on": _ids},
    BufferSpan: {"name": _text, "mem": _text, "addr": _count, "size": _count, "start": _amount, "end": _amount, "kind": _text},
}


def _records(kind: type[Record], items: Sequence[Record]) -> dict[str, Any]:
    return {"fields": list(kind._fields), "rows": [list(item) for item in items]}


def _unpack(kind: type[R], block: dict[str, Any]) -> list[R]:
    fields = block["fields"]
    unknown = set(fields) - set(kind._fields)
    if unknown:
        raise ValueError(f"unknown {kind.__name__} field(s) {', '.join(sorted(unknown))}")
    required = [f for f in kind._fields if f not in kind._field_defaults and f not in fields]
    if required or len(set(fields)) != len(fields):
        raise ValueError(f"{kind.__name__} fields {fields} repeat one or lack {', '.join(required)}")
    checks = [_FIELDS[kind][f] for f in fields]
    records = []
    for i, row in enumerate(block["rows"]):
        if not isinstance(row, list) or len(row) != len(fields):
            raise ValueError(f"{kind.__name__} {i}: {_show(row)} is not a list of its {len(fields)} fields")
        for field, check, value in zip(fields, checks, row):
            if not check(value):
                raise ValueError(f"{kind.__name__} {i}: {field} {_show(value)} is not {_WHAT[check]}")
        record = kind(**dict(zip(fields, row)))
        if isinstance(record, (Event, BufferSpan)) and "start" in fields and record.end < record.start:
            raise ValueError(f"{kind.__name__} {i}: it ends (cycle {record.end}) before it starts ({record.start})")
        records.append(record)
    return records
