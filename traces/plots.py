"""Plots of a Trace, drawn with matplotlib's Agg canvas directly (no pyplot, so importing this
module neither picks a backend nor keeps figures alive)."""

from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

_DPI = 150
_WIDTH_INCHES = 12
_AXES_LEFT, _AXES_RIGHT = 0.1, 0.8  # figure fractions; the legend sits right of the axes
_LEGEND_OPS = 12
_WAIT, _NO_OP = "(wait)", "(no op)"
_WAIT_COLOUR, _NO_OP_COLOUR = "0.85", "0.55"
# tab20 without its two greys, which are kept for waits and op-less instructions
_PALETTE = [c for i, c in enumerate(colormaps["tab20"].colors) if i not in (14, 15)]


def plot_timeline(trace, path, max_bars=5000):
    """Gantt chart of `trace` as a PNG: a lane per engine, a bar per instruction coloured by op.

    With more than `max_bars` events, consecutive events of one op on one engine less than a
    pixel apart are merged into one bar: the picture is the same and a 100,000-event trace
    draws in a couple of seconds. Below that, each bar gets a thin outline so single
    instructions stay visible.
    """
    end_cycle = max([trace.cycles] + [e.end for e in trace.events])
    fig = Figure(figsize=(_WIDTH_INCHES, max(3.0, 1.0 + 0.5 * len(trace.engines))), dpi=_DPI)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=_AXES_LEFT, right=_AXES_RIGHT, top=0.88, bottom=0.15)
    ax = fig.add_subplot()

    aggregate = len(trace.events) > max_bars
    pixel_cycles = end_cycle / (_WIDTH_INCHES * _DPI * (_AXES_RIGHT - _AXES_LEFT))
    colours = _op_colours(trace.events)
    to_micros = 1e6 / trace.clock_hz
    for lane, engine in enumerate(trace.engines):
        events = sorted((e for e in trace.events if e.engine == engine), key=lambda e: e.start)
        for key, spans in _bars(events, pixel_cycles if aggregate else None).items():
            ax.broken_barh(
                [(start * to_micros, width * to_micros) for start, width in spans],
                (lane - 0.4, 0.8),
                facecolors=colours[key],
                edgecolor="none" if aggregate else "white",
                linewidth=0.3,
            )

    ax.set_xlim(0, end_cycle * to_micros or 1.0)
    ax.set_ylim(max(len(trace.engines), 1) - 0.5, -0.5)  # first engine on top
    ax.set_yticks(range(len(trace.engines)), trace.engines)
    ax.set_xlabel("time (µs)")
    ax.set_title(f"{trace.chip}: {trace.seconds(trace.cycles) * 1e6:,.2f} µs ({trace.cycles:,} cycles)")
    legend = [Patch(color=colours[key], label=key) for key in _legend_keys(trace.events)]
    if legend:
        ax.legend(handles=legend, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small",
                  frameon=False)
    fig.savefig(path, format="png", dpi=_DPI)


def _colour_key(event):
    if event.kind == "wait":
        return _WAIT
    return event.op or _NO_OP


def _op_colours(events):
    """Colour key -> colour, ops coloured in order of first start, so a trace always gets the
    same colours and ops that follow each other get different ones."""
    keys = dict.fromkeys(_colour_key(e) for e in sorted(events, key=lambda e: e.start))
    ops = [key for key in keys if key not in (_WAIT, _NO_OP)]
    colours = {op: _PALETTE[i % len(_PALETTE)] for i, op in enumerate(ops)}
    return colours | {_WAIT: _WAIT_COLOUR, _NO_OP: _NO_OP_COLOUR}


def _legend_keys(events):
    """The ops with the most busy cycles (at most _LEGEND_OPS), then waits and op-less work."""
    busy = {}
    for e in events:
        key = _colour_key(e)
        busy[key] = busy.get(key, 0) + (e.end - e.start)
    ops = sorted((key for key in busy if key not in (_WAIT, _NO_OP)), key=lambda key: -busy[key])
    return ops[:_LEGEND_OPS] + [key for key in (_NO_OP, _WAIT) if key in busy]


def _bars(events, merge_gap):
    """Colour key -> [(start, width)] for one engine's events sorted by start. When merge_gap is
    given, an event that continues the previous bar's op within merge_gap cycles extends it."""
    merged = []  # [key, start, end] per bar
    for e in events:
        key = _colour_key(e)
        last = merged[-1] if merged else None
        if merge_gap is not None and last and last[0] == key and e.start - last[2] < merge_gap:
            last[2] = max(last[2], e.end)
        else:
            merged.append([key, e.start, e.end])
    bars = {}
    for key, start, end in merged:
        bars.setdefault(key, []).append((start, end - start))
    return bars
