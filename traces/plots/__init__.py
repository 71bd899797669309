"""Plots of a Trace as PNG files for reports: the timeline, memory occupancy, DDR bandwidth and
the roofline. Each needs only the trace (the chip's peaks travel in it)."""

from .bandwidth import plot_bandwidth
from .memory import plot_memory
from .roofline import plot_roofline
from .timeline import plot_timeline

__all__ = ["plot_bandwidth", "plot_memory", "plot_roofline", "plot_timeline"]
