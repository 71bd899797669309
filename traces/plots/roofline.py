"""The roofline: each op's achieved arithmetic rate against its operational intensity, under the
chip's peaks (the trace carries them: `Trace.peak_ops` and `Trace.ddr_bandwidth`) in the dtypes
the ops run in (`Trace.op_dtypes`): a float32 model's roof is the float32 peak, not the int8 one.
An op's rate is over its share of the time (traces/summary.py), so the ops of a layer group are
not each given the whole group's span."""

from pathlib import Path
from typing import NamedTuple

import numpy as np
from matplotlib.axes import Axes

from ..records import Trace
from ..summary import summarize
from .figure import LABEL_SIZE, SMALL_SIZE, TITLE_SIZE, new_figure, save

_UNIT_COLOURS = {"matrix": "#4c72b0", "vector": "#dd8452", "scalar": "#55a868"}
_COMPUTE = tuple(_UNIT_COLOURS)


class RooflinePoint(NamedTuple):
    op: str
    unit: str  # the compute unit kind that was busy longest for the op: "matrix", "vector", "scalar"
    intensity: float  # ops per byte it moved to or from DDR
    achieved: float  # ops per second over its share of the time
    share: float  # its share of the time over the run's cycles
    dtype: str = ""  # the dtype it runs in on that unit, whose peak is its roof ("" when the trace does not say)


class Ceiling(NamedTuple):
    unit: str  # "matrix" or "vector"
    dtypes: tuple[str, ...]  # the dtypes that reach this peak
    ops_per_second: float


def roofline_points(trace: Trace) -> list[RooflinePoint]:
    """A point per op that did arithmetic and moved DDR bytes, in order of first start."""
    summary = summarize(trace)
    busy: dict[str, dict[str, float]] = {}  # op -> unit -> cycles
    for e in trace.events:
        if e.op and e.kind in _COMPUTE:
            units = busy.setdefault(e.op, {})
            units[e.kind] = units.get(e.kind, 0) + (e.end - e.start)
    points = []
    for op in summary.ops.values():
        if op.intensity and op.achieved:
            unit = max(busy[op.name], key=lambda u: busy[op.name][u])
            points.append(RooflinePoint(op.name, unit, op.intensity, op.achieved, op.cycles / trace.cycles if trace.cycles else 0.0,
                                        trace.op_dtypes.get(op.name, {}).get(unit, "")))
    return points


def ceilings(trace: Trace, points: list[RooflinePoint] | None = None) -> list[Ceiling]:
    """The compute peaks in ops per second, highest first: one per distinct peak of each unit;
    given `points` that know their dtypes, only the peaks of the units and dtypes they run in."""
    used = {(p.unit, p.dtype) for p in points or () if p.dtype}
    found = []
    for unit, peaks in trace.peak_ops.items():
        by_value: dict[float, list[str]] = {}
        for dtype, ops_per_cycle in peaks.items():
            if not used or (unit, dtype) in used:
                by_value.setdefault(ops_per_cycle, []).append(dtype)
        found += [Ceiling(unit, tuple(dtypes), value * trace.clock_hz) for value, dtypes in by_value.items()]
    return sorted(found, key=lambda c: -c.ops_per_second)


def plot_roofline(trace: Trace, path: str | Path, labels: int = 8) -> None:
    """The roofline as a PNG, log-log: a point per op (colour: the unit it used most; area: its
    share of the run), the `labels` longest ops named; the roof is the DDR bandwidth slope up to
    the highest peak of the units and dtypes the ops run in, with a dashed ceiling for each lower
    one (another dtype, the vector unit). Ops with no arithmetic or no DDR traffic have no
    point; the plot counts them."""
    points = roofline_points(trace)
    roofs = ceilings(trace, points)
    bandwidth = trace.ddr_bandwidth * trace.clock_hz  # bytes per second
    fig = new_figure(6.5)
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")

    top = roofs[0].ops_per_second if roofs else 0.0
    ridges = [top / bandwidth] if top and bandwidth else []
    low, high = _x_range([p.intensity for p in points] + ridges)
    x = np.geomspace(low, high, 256)
    if bandwidth:
        roof = np.minimum(bandwidth * x, top) if top else bandwidth * x
        ax.plot(x, roof / 1e9, color="black", linewidth=1.8,
                label=f"roof: DDR {bandwidth / 1e9:,.1f} GB/s" + (f", {_name(roofs[0])} {_rate(top)}" if top else ""))
    lower: dict[float, list] = {}  # ops per second -> the ceilings at that height, below the roof
    for ceiling in roofs[1:] if bandwidth else roofs:
        lower.setdefault(ceiling.ops_per_second, []).append(ceiling)
    for rate, same in lower.items():
        start = max(low, rate / bandwidth) if bandwidth else low
        colour = _UNIT_COLOURS[same[0].unit]
        ax.plot([start, high], [rate / 1e9] * 2, color=colour, linestyle="--", linewidth=1.0)
        ax.text(high, rate / 1e9, f"{' | '.join(_name(c) for c in same)} {_rate(rate)} ",
                ha="right", va="bottom", fontsize=SMALL_SIZE, color=colour)

    for unit, colour in _UNIT_COLOURS.items():
        mine = [p for p in points if p.unit == unit]
        if mine:
            ax.scatter([p.intensity for p in mine], [p.achieved / 1e9 for p in mine],
                       s=[15 + 400 * p.share for p in mine], color=colour, alpha=0.75, edgecolor="white",
                       linewidth=0.5, label=f"{unit} ops ({len(mine)})", zorder=3)
    ax.set_xlim(low, high)
    ys = [p.achieved / 1e9 for p in points] + ([top / 1e9] if top else [])
    if ys:
        ax.set_ylim(min(ys) / 5, max(ys) * 3)
    for at, names in _labels(ax, sorted(points, key=lambda p: -p.share)[:labels]):
        ax.annotate(names, at, xytext=(6, 4), textcoords="offset points", fontsize=SMALL_SIZE, zorder=4)
    ax.set_xlabel("operational intensity (ops per DDR byte)", fontsize=LABEL_SIZE)
    ax.set_ylabel("achieved (GOP/s)", fontsize=LABEL_SIZE)
    ax.tick_params(labelsize=SMALL_SIZE)
    ax.grid(which="both", color="0.93", linewidth=0.5)
    ax.set_axisbelow(True)
    missing = len({e.op for e in trace.events if e.op and e.kind != "wait"}) - len(points)
    note = f", {missing} ops without arithmetic or DDR traffic not shown" if missing else ""
    ax.set_title(f"{trace.chip}: roofline, {len(points)} ops{note}", fontsize=TITLE_SIZE)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="lower right", fontsize=SMALL_SIZE, framealpha=0.9)
    save(fig, path)


def _labels(ax: Axes, points: list[RooflinePoint], near: float = 14) -> list[tuple[tuple[float, float], str]]:
    """((x, y), text) labels for points: a point within `near` pixels of one already labelled
    joins its label, so ops at one place are named together instead of over each other."""
    anchors: list[list] = []  # [pixel position, data position, names]
    for p in points:
        position = (p.intensity, p.achieved / 1e9)
        pixel = ax.transData.transform(position)
        anchor = next((a for a in anchors if abs(a[0] - pixel).max() < near), None)
        if anchor:
            anchor[2].append(p.op)
        else:
            anchors.append([pixel, position, [p.op]])
    return [(position, ", ".join(names)) for _, position, names in anchors]


def _x_range(values: list[float]) -> tuple[float, float]:
    values = [v for v in values if v > 0]
    if not values:
        return 0.1, 100.0
    return min(values) / 4, max(values) * 4


def _name(ceiling: Ceiling) -> str:
    shown = ", ".join(ceiling.dtypes[:3]) + (", ..." if len(ceiling.dtypes) > 3 else "")
    return f"{ceiling.unit} {shown}"


def _rate(ops_per_second: float) -> str:
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
        if ops_per_second >= factor:
            return f"{ops_per_second / factor:,.2f} {prefix}OP/s"
    return f"{ops_per_second:,.0f} OP/s"
