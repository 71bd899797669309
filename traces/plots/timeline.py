"""The timeline: a Gantt chart with a lane per engine and a bar per instruction, coloured by op."""

from collections.abc import Sequence
from pathlib import Path

from matplotlib import colormaps
from matplotlib.patches import Patch

from ..records import Event, Trace
from .figure import DPI, LABEL_SIZE, SMALL_SIZE, TITLE_SIZE, WIDTH_INCHES, end_cycle, new_figure, save, time_unit

_AXES_FRACTION = 0.8  # of the figure's width, for the pixel size of merged bars
_WAIT, _NO_OP, _OTHER = "(wait)", "(no op)", "(other ops)"
_GREYS = {_WAIT: "0.85", _NO_OP: "0.55", _OTHER: "#b9c4d0"}
# tab20 without its two greys, which are kept for waits, op-less instructions and other ops
_PALETTE = [c for i, c in enumerate(colormaps["tab20"].colors) if i not in (14, 15)]  # type: ignore[attr-defined]  # tab20 is a ListedColormap


def plot_timeline(trace: Trace, path: str | Path, max_bars: int = 5000) -> None:
    """Gantt chart of `trace` as a PNG: a lane per engine (labelled with its utilization), a bar
    per instruction coloured by op. Up to 18 ops get a colour each; with more, the 17 busiest
    keep theirs and the rest share one "(other ops)" colour, so every colour names one op.

    With more than `max_bars` events, consecutive events of one op on one engine less than a
    pixel apart are merged into one bar: the picture is the same and a 100,000-event trace
    draws in a couple of seconds. Below that, each bar gets a thin outline so single
    instructions stay visible.
    """
    end = end_cycle(trace)
    colours, legend = _op_colours(trace.events)
    lanes = max(len(trace.engines), 1)
    fig = new_figure(max(3.0, 1.2 + 0.5 * lanes, 1.0 + 0.16 * len(legend)))
    ax = fig.add_subplot()

    aggregate = len(trace.events) > max_bars
    pixel_cycles = end / (WIDTH_INCHES * DPI * _AXES_FRACTION)
    scale, unit = time_unit(trace, end)
    busy: dict[str, float] = dict.fromkeys(trace.engines, 0)
    for lane, engine in enumerate(trace.engines):
        events = sorted((e for e in trace.events if e.engine == engine), key=lambda e: e.start)
        busy[engine] = sum(e.end - e.start for e in events if e.kind != "wait")
        for key, spans in _bars(events, pixel_cycles if aggregate else None, colours).items():
            ax.broken_barh(
                [(start * scale, width * scale) for start, width in spans],
                (lane - 0.4, 0.8),
                facecolors=colours[key],
                edgecolor="none" if aggregate else "white",
                linewidth=0.3,
            )

    ax.set_xlim(0, end * scale or 1.0)
    ax.set_ylim(lanes - 0.5, -0.5)  # first engine on top
    ax.set_yticks(range(len(trace.engines)),
                  [f"{engine}\n{busy[engine] / end:.0%} busy" if end else engine for engine in trace.engines],
                  fontsize=LABEL_SIZE)
    ax.set_xlabel(f"time ({unit})", fontsize=LABEL_SIZE)
    ax.grid(axis="x", color="0.9", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.set_title(f"{trace.chip}: {trace.seconds(trace.cycles) * 1e6:,.2f} µs ({trace.cycles:,} cycles), "
                 f"{sum(e.kind != 'wait' for e in trace.events):,} instructions", fontsize=TITLE_SIZE)
    if legend:
        handles = [Patch(color=colour, label=label) for colour, label in legend]
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=SMALL_SIZE,
                  frameon=False, title="op (busiest first)", title_fontsize=SMALL_SIZE)
    save(fig, path)


def _op(event: Event) -> str:
    if event.kind == "wait":
        return _WAIT
    return event.op or _NO_OP


def _op_colours(events: Sequence[Event]) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """(colour key -> colour, [(colour, legend label)]). Coloured ops get colours in order of first
    start, so ops that follow each other differ; the legend lists them busiest first, then
    the grey keys."""
    busy: dict[str, float] = {}
    first: dict[str, int] = {}
    for e in sorted(events, key=lambda e: e.start):
        key = _op(e)
        first.setdefault(key, len(first))
        busy[key] = busy.get(key, 0) + (e.end - e.start)
    ops = sorted((key for key in busy if key not in _GREYS), key=lambda key: (-busy[key], first[key]))
    coloured = ops if len(ops) <= len(_PALETTE) else ops[: len(_PALETTE) - 1]
    colours = {op: _PALETTE[i % len(_PALETTE)] for i, op in enumerate(sorted(coloured, key=lambda op: first[op]))}
    others = ops[len(coloured):]
    colours |= dict.fromkeys(others, _GREYS[_OTHER]) | _GREYS
    legend = [(colours[op], op) for op in coloured]
    if others:
        legend.append((_GREYS[_OTHER], f"(other ops: {len(others)})"))
    legend += [(_GREYS[key], key) for key in (_NO_OP, _WAIT) if key in busy]
    return colours, legend


def _bars(events: list[Event], merge_gap: float | None, colours: dict[str, str] | None = None) -> dict[str, list[tuple[float, float]]]:
    """Colour key -> [(start, width)] for one engine's events sorted by start. When merge_gap is
    given, an event that continues the previous bar's colour within merge_gap cycles extends it
    (ops that share the "other" colour merge too). Without colours, each op is its own key."""
    merged: list[list] = []  # [key, start, end] per bar
    for e in events:
        key = _op(e)
        if colours is not None and colours[key] == _GREYS[_OTHER]:
            key = _OTHER
        last = merged[-1] if merged else None
        if merge_gap is not None and last and last[0] == key and e.start - last[2] < merge_gap:
            last[2] = max(last[2], e.end)
        else:
            merged.append([key, e.start, e.end])
    bars: dict[str, list[tuple[float, float]]] = {}
    for key, start, end in merged:
        bars.setdefault(key, []).append((start, end - start))
    return bars
