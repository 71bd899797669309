"""CSV files of a run for spreadsheets and scripts: one row per event, one row per op."""

import csv
from collections.abc import Iterable, Sequence
from pathlib import Path

from .records import Trace
from .summary import Summary

EVENT_COLUMNS = ("engine", "index", "kind", "name", "op", "start", "end", "cycles", "bytes", "cached", "ops", "src", "dst", "note")


def write_events_csv(trace: Trace, path: str | Path) -> None:
    """events.csv: one row per event (waits that blocked included), in order of start, then
    engine (chip order), then index; times in cycles."""
    order = {engine: i for i, engine in enumerate(trace.engines)}
    events = sorted(trace.events, key=lambda e: (e.start, order.get(e.engine, len(order)), e.index))
    _write(path, EVENT_COLUMNS, (
        [e.engine, e.index, e.kind, e.name, e.op, e.start, e.end, e.end - e.start, e.bytes, e.cached, e.ops, e.src, e.dst, e.note]
        for e in events
    ))


def op_columns(summary: Summary) -> tuple[str, ...]:
    return ("op", "start", "end", "span cycles", "cycles", "seconds",
            *(f"busy {engine} cycles" for engine in summary.busy),
            "ddr bytes", "ops", "intensity ops/byte", "achieved ops/s")


def write_ops_csv(summary: Summary, path: str | Path) -> None:
    """ops.csv: one row per op in order of first start: its span (first start to last end), its
    share of the time in cycles and seconds (traces/summary.py: the ops of a layer group split
    its time), busy cycles per engine, DDR bytes, ops, intensity (empty for an op that moved no
    DDR bytes) and the rate achieved over its share (empty for an op that took no time)."""
    _write(path, op_columns(summary), (
        [op.name, op.start, op.end, op.span, op.cycles, op.seconds, *(op.busy.get(engine, 0) for engine in summary.busy),
         op.ddr_bytes, op.ops, _blank(op.intensity), _blank(op.achieved)]
        for op in summary.ops.values()
    ))


def _blank(value: float | None) -> float | str:
    return "" if value is None else value


def _write(path: str | Path, columns: Sequence[str], rows: Iterable[list[object]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        writer.writerows(rows)
