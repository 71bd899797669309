"""Trace records and what is made from them: summaries, Chrome/Perfetto JSON, plots."""

from .chrome import write_chrome
from .plots import plot_timeline
from .records import Event, Trace
from .summary import Summary, format_summary, summarize

__all__ = ["Event", "Trace", "summarize", "Summary", "format_summary", "write_chrome", "plot_timeline"]
