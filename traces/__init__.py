"""Trace records and what is made from them: summaries, Chrome/Perfetto JSON (which also
stores the trace, for `load`), CSV files, comparisons and plots."""

from .chrome import write_chrome
from .compare import format_comparison
from .export import write_events_csv, write_ops_csv
from .plots import plot_bandwidth, plot_memory, plot_roofline, plot_timeline
from .records import BufferSpan, Event, Sync, Trace
from .stored import TraceFileError, load
from .summary import Summary, format_ops, format_summary, summarize

__all__ = [
    "BufferSpan", "Event", "Summary", "Sync", "Trace", "TraceFileError", "format_comparison", "format_ops",
    "format_summary", "load", "plot_bandwidth", "plot_memory", "plot_roofline", "plot_timeline", "summarize",
    "write_chrome", "write_events_csv", "write_ops_csv",
]
