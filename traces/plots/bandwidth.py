"""DDR traffic over time against the chip's DDR bandwidth."""

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..records import Trace
from ..text import human_bytes
from .figure import LABEL_SIZE, SMALL_SIZE, TITLE_SIZE, end_cycle, new_figure, save, time_unit


def ddr_traffic(trace: Trace, bins: int = 1000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bin edges in cycles, read bytes per cycle, write bytes per cycle): the DDR counters
    averaged over at most `bins` equal bins of the run (one per cycle for a shorter run), so
    a bin holds exactly the bytes that moved in it."""
    end = end_cycle(trace) or 1
    edges = np.linspace(0, end, max(1, min(bins, math.ceil(end))) + 1)
    return edges, _average(trace.counters.get("ddr.read", []), edges), _average(trace.counters.get("ddr.write", []), edges)


def plot_bandwidth(trace: Trace, path: str | Path, bins: int = 1000) -> None:
    """DDR read and write traffic over time in GB/s as a PNG: read and write stacked (their sum
    shares the DDR's bandwidth), averaged over `bins` bins, under a line at the chip's peak. The
    bytes in the title are those the DMA engines moved, each contiguous run rounded up to the
    DDR burst, so they can exceed the tensor bytes of the summary."""
    edges, read, write = ddr_traffic(trace, bins)
    scale, unit = time_unit(trace, edges[-1])
    gb = trace.clock_hz / 1e9  # bytes per cycle -> GB/s
    times = edges * scale
    fig = new_figure(4.5)
    ax = fig.add_subplot()
    ax.stairs(read * gb, times, fill=True, color="#4c72b0", alpha=0.8, label="read")
    ax.stairs((read + write) * gb, times, baseline=read * gb, fill=True, color="#dd8452", alpha=0.8, label="write")
    peak = trace.ddr_bandwidth * gb
    if peak:
        ax.axhline(peak, color="#c44e52", linestyle="--", linewidth=1.2, label=f"DDR peak {peak:,.1f} GB/s")
    top = max(peak, float(((read + write) * gb).max(initial=0)))
    ax.set_ylim(0, top * 1.12 or 1.0)
    ax.set_xlim(0, times[-1] or 1.0)
    ax.set_xlabel(f"time ({unit})", fontsize=LABEL_SIZE)
    ax.set_ylabel("DDR traffic (GB/s)", fontsize=LABEL_SIZE)
    ax.tick_params(labelsize=SMALL_SIZE)
    ax.grid(color="0.92", linewidth=0.6)
    ax.set_axisbelow(True)
    width = np.diff(edges)
    read_bytes, write_bytes = float(read @ width), float(write @ width)
    seconds = trace.seconds(edges[-1])
    mean = (read_bytes + write_bytes) / seconds / 1e9 if seconds else 0.0
    share = f" ({mean / peak:.0%} of peak)" if peak else ""
    ax.set_title(f"{trace.chip}: DDR traffic, read {human_bytes(read_bytes)}, written {human_bytes(write_bytes)}, "
                 f"mean {mean:,.2f} GB/s{share}", fontsize=TITLE_SIZE)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=SMALL_SIZE, frameon=False)
    save(fig, path)


def _average(points: Sequence[tuple[float, float]], edges: np.ndarray) -> np.ndarray:
    """Mean of a step counter over each bin between `edges`, from its integral at the edges."""
    steps = dict(points)  # the last point at a cycle holds
    if not steps:
        return np.zeros(len(edges) - 1)
    cycles = np.array(sorted(steps), dtype=float)
    rates = np.array([steps[c] for c in sorted(steps)], dtype=float)
    knots = np.append(cycles, max(edges[-1], cycles[-1]))
    integral = np.concatenate(([0.0], np.cumsum(rates * np.diff(knots))))
    at_edges = np.interp(edges, knots, integral, left=0.0)
    return np.diff(at_edges) / np.diff(edges)
