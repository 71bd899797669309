"""What every plot shares: a figure on matplotlib's Agg canvas (no pyplot, so importing the
plots neither picks a backend nor keeps figures alive), the PNG it is saved as, and the time
axis in a unit that suits the run's length."""

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..records import Trace

DPI = 150
WIDTH_INCHES = 12
TITLE_SIZE = 12
LABEL_SIZE = 10
SMALL_SIZE = 8
_TIME_UNITS = ((1e-6, "ns", 1e9), (1e-3, "µs", 1e6), (1.0, "ms", 1e3))  # (below seconds, name, per second)


def new_figure(height_inches: float) -> Figure:
    fig = Figure(figsize=(WIDTH_INCHES, height_inches), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def save(fig: Figure, path: str | Path) -> None:
    """Write the PNG; the bounding box grows to take in a legend outside the axes."""
    fig.savefig(path, format="png", dpi=DPI, bbox_inches="tight", pad_inches=0.15)


def time_unit(trace: Trace, cycles: float) -> tuple[float, str]:
    """(factor turning cycles into the unit, unit name) for a run of `cycles` cycles: ns below
    2 µs, µs below 2 ms, ms below 2 s, then s."""
    seconds = trace.seconds(cycles)
    for limit, name, per_second in _TIME_UNITS:
        if seconds < 2 * limit:
            return per_second / trace.clock_hz, name
    return 1 / trace.clock_hz, "s"


def end_cycle(trace: Trace) -> float:
    """The last cycle anything in the trace happened."""
    return max([trace.cycles] + [e.end for e in trace.events])
