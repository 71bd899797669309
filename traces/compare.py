"""Two runs side by side, from their summaries: totals, engines, DDR traffic, memory, and the
ops whose time (their share of the run, traces/summary.py) changed most."""

from collections.abc import Iterable

from .occupancy import NEGLIGIBLE_FRAGMENTATION
from .summary import Summary
from .text import human_bytes, table


def format_comparison(a: Summary, b: Summary, labels: tuple[str, str] = ("A", "B"), top: int = 10, width: int | None = None) -> str:
    """Text of two Summaries side by side with B/A ratios (differences for shares), then the
    `top` ops (matched by name) whose share of the time changed most in cycles; the tables fit
    `width` columns where given (traces.text.table)."""
    rows = [["", *labels, "B/A"],
            ["chip", a.chip, b.chip, ""],
            ["cycles", f"{a.cycles:,}", f"{b.cycles:,}", _ratio(a.cycles, b.cycles)],
            ["time", f"{a.seconds * 1e6:,.2f} us", f"{b.seconds * 1e6:,.2f} us", _ratio(a.seconds, b.seconds)],
            ["instructions", f"{a.instructions:,}", f"{b.instructions:,}", _ratio(a.instructions, b.instructions)]]
    for engine in _union(a.busy, b.busy):
        rows.append([f"busy {engine}", _busy(a, engine), _busy(b, engine), _ratio(a.busy.get(engine), b.busy.get(engine))])
    rows.append(["ddr read", human_bytes(a.ddr_read_bytes), human_bytes(b.ddr_read_bytes), _ratio(a.ddr_read_bytes, b.ddr_read_bytes)])
    rows.append(["ddr write", human_bytes(a.ddr_write_bytes), human_bytes(b.ddr_write_bytes), _ratio(a.ddr_write_bytes, b.ddr_write_bytes)])
    for mem in _union(a.peak_bytes, b.peak_bytes):
        rows.append([f"peak {mem}", _bytes(a.peak_bytes, mem), _bytes(b.peak_bytes, mem),
                     _ratio(a.peak_bytes.get(mem), b.peak_bytes.get(mem))])
    for mem in _union(a.peak_fragmentation, b.peak_fragmentation):
        fa, fb = a.peak_fragmentation.get(mem), b.peak_fragmentation.get(mem)
        if max(fa or 0, fb or 0) >= NEGLIGIBLE_FRAGMENTATION:
            diff = f"{(fb - fa) * 100:+.1f} pts" if fa is not None and fb is not None else ""
            rows.append([f"fragmentation {mem}", _share(fa), _share(fb), diff])
    lines = table(rows, indent="", width=width)
    changed = _changed_ops(a, b, top)
    if changed:
        lines += ["", f"ops whose time changed most ({len(changed)} of {len(_union(a.ops, b.ops))}):"]
        op_rows = [["op", f"{labels[0]} cycles", f"{labels[1]} cycles", "B/A", "B-A cycles"]]
        for name, sa, sb in changed:
            op_rows.append([name, _cycles(sa), _cycles(sb), _ratio(sa, sb), f"{(sb or 0) - (sa or 0):+,.0f}"])
        lines += table(op_rows, width=width)
    return "\n".join(lines)


def _changed_ops(a: Summary, b: Summary, top: int) -> list[tuple[str, float | None, float | None]]:
    """(name, cycles in a or None, cycles in b or None), biggest change first (ties: name)."""
    times = [(name, _cycles_of(a, name), _cycles_of(b, name)) for name in _union(a.ops, b.ops)]
    times.sort(key=lambda row: (-abs((row[2] or 0) - (row[1] or 0)), row[0]))
    return times[:top]


def _cycles_of(summary: Summary, name: str) -> float | None:
    op = summary.ops.get(name)
    return op.cycles if op else None


def _union(first: Iterable[str], second: Iterable[str]) -> list[str]:
    return list(first) + [key for key in second if key not in first]


def _ratio(x: float | None, y: float | None) -> str:
    return f"{y / x:.2f}x" if x and y is not None else "-"


def _busy(summary: Summary, engine: str) -> str:
    if engine not in summary.busy:
        return "-"
    return f"{summary.busy[engine]:,.0f} ({summary.utilization[engine]:.1%})"


def _bytes(peaks: dict[str, float], mem: str) -> str:
    return human_bytes(peaks[mem]) if mem in peaks else "-"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _cycles(span: float | None) -> str:
    return "-" if span is None else f"{span:,.0f}"
