"""Summary of a run, computed from its Trace alone: totals, per-engine busy time, DDR traffic,
memory peaks and a per-op breakdown, plus a compact text form of it."""

from dataclasses import dataclass


@dataclass(frozen=True)
class OpStats:
    """The instructions of one graph op, waits excluded (a wait is not work of the op)."""

    name: str
    start: float  # start cycle of its first instruction
    end: float  # end cycle of its last instruction
    busy: dict  # engine -> busy cycles, engines in order of first use
    dma_bytes: int  # bytes moved by its DMA instructions

    @property
    def span(self):
        return self.end - self.start

    @property
    def busiest_engine(self):
        return max(self.busy, key=self.busy.get)


@dataclass(frozen=True)
class Summary:
    chip: str
    clock_hz: float
    cycles: int
    seconds: float
    instructions: int  # events that are not waits
    busy: dict  # engine -> busy cycles, engines in chip order
    utilization: dict  # engine -> busy / cycles (0 when cycles is 0)
    ddr_read_bytes: int
    ddr_write_bytes: int
    peak_bytes: dict  # memory -> most bytes occupied at once
    capacity_bytes: dict  # memory -> capacity (0 when the trace does not give it)
    ops: dict  # op name -> OpStats, in order of first start

    def slowest(self, n):
        """The n ops with the longest span, longest first (ties: earliest start first)."""
        return sorted(self.ops.values(), key=lambda op: op.span, reverse=True)[:n]


def summarize(trace):
    work = [e for e in trace.events if e.kind != "wait"]
    busy = dict.fromkeys(trace.engines, 0)
    for e in work:
        busy[e.engine] = busy.get(e.engine, 0) + (e.end - e.start)
    dma = [e for e in work if e.kind == "dma"]
    peaks = _memory_peaks(trace)
    return Summary(
        chip=trace.chip,
        clock_hz=trace.clock_hz,
        cycles=trace.cycles,
        seconds=trace.seconds(trace.cycles),
        instructions=len(work),
        busy=busy,
        utilization={name: c / trace.cycles if trace.cycles else 0.0 for name, c in busy.items()},
        ddr_read_bytes=sum(e.bytes for e in dma if e.src == "ddr"),
        ddr_write_bytes=sum(e.bytes for e in dma if e.dst == "ddr"),
        peak_bytes=peaks,
        capacity_bytes={name: trace.memories.get(name, 0) for name in peaks},
        ops=_op_table(work),
    )


def _memory_peaks(trace):
    """Peak per memory: the trace's memories first, then any other memory with a counter."""
    prefix = "memory."
    counted = [key[len(prefix):] for key in trace.counters if key.startswith(prefix)]
    names = list(trace.memories) + [name for name in counted if name not in trace.memories]
    return {name: max((v for _, v in trace.counters.get(prefix + name, ())), default=0) for name in names}


def _op_table(work):
    spans, busy, dma_bytes = {}, {}, {}
    for e in sorted(work, key=lambda e: e.start):
        if not e.op:
            continue
        start, end = spans.get(e.op, (e.start, e.end))
        spans[e.op] = (start, max(end, e.end))
        engines = busy.setdefault(e.op, {})
        engines[e.engine] = engines.get(e.engine, 0) + (e.end - e.start)
        dma_bytes[e.op] = dma_bytes.get(e.op, 0) + (e.bytes if e.kind == "dma" else 0)
    return {
        op: OpStats(op, start, end, busy[op], dma_bytes[op]) for op, (start, end) in spans.items()
    }


def format_summary(summary, top=5):
    """A compact report: totals, engines, DDR traffic, memory peaks and the `top` slowest ops."""
    s = summary
    lines = [
        f"{s.chip}: {s.cycles:,} cycles = {s.seconds * 1e6:,.2f} us at {s.clock_hz / 1e6:,.0f} MHz, "
        f"{s.instructions:,} instructions",
        "engines:",
    ]
    width = max((len(name) for name in [*s.busy, *s.peak_bytes]), default=0)
    for name, cycles in s.busy.items():
        lines.append(f"  {name:<{width}}  {s.utilization[name]:6.1%} busy  ({cycles:,.0f} cycles)")
    lines.append(f"ddr: read {human_bytes(s.ddr_read_bytes)}, write {human_bytes(s.ddr_write_bytes)}")
    lines.append("memory peaks:")
    for name, peak in s.peak_bytes.items():
        capacity = s.capacity_bytes[name]
        of = f" of {human_bytes(capacity)} ({peak / capacity:.1%})" if capacity else ""
        lines.append(f"  {name:<{width}}  {human_bytes(peak)}{of}")
    slowest = s.slowest(top)
    if slowest:
        op_width = max(len("op"), *(len(op.name) for op in slowest))
        lines.append("slowest ops:")
        lines.append(f"  {'op':<{op_width}}  {'span cycles':>12}  {'% total':>7}  busiest engine")
        for op in slowest:
            share = op.span / s.cycles if s.cycles else 0.0
            lines.append(f"  {op.name:<{op_width}}  {op.span:>12,.0f}  {share:>7.1%}  {op.busiest_engine}")
    return "\n".join(lines)


def human_bytes(n):
    """1536 -> '1.5 KiB'; below 1 KiB, plain bytes."""
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    power = 0
    while n >= 1024 and power < len(units) - 1:
        n /= 1024
        power += 1
    return f"{n:,.0f} B" if power == 0 else f"{n:,.1f} {units[power]}"
