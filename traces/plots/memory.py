"""Memory occupancy over time: a panel per memory that held anything, with its capacity, its
fragmentation and the biggest buffers live at its peak."""

from pathlib import Path

from matplotlib.axes import Axes

from ..occupancy import NEGLIGIBLE_FRAGMENTATION, STATE, live_at, memory_names, peak_cycle
from ..records import BufferSpan, Trace
from ..text import human_bytes
from .figure import LABEL_SIZE, SMALL_SIZE, TITLE_SIZE, end_cycle, new_figure, save, time_unit

_BYTE_UNITS = ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"), (1, "B"))
_FULL_SCALE = 0.25  # the axis reaches the capacity when the peak is at least this share of it


def peak_buffers(trace: Trace, mem: str, n: int) -> tuple[float, list[BufferSpan]]:
    """(cycle of the memory's peak occupancy, the n biggest buffers live then)."""
    cycle = peak_cycle(trace.counters.get(f"memory.{mem}", []))
    return cycle, live_at(trace.buffers, mem, cycle)[:n]


def used_memories(trace: Trace) -> list[str]:
    """Memories whose occupancy rose above zero, in the trace's order."""
    return [m for m in memory_names(trace) if any(v for _, v in trace.counters.get(f"memory.{m}", []))]


def plot_memory(trace: Trace, path: str | Path, labels: int = 4) -> None:
    """Occupancy of each used memory over time as a PNG: one panel per memory with the bytes
    occupied (filled steps), the capacity (a red line; named in the legend when it is far above
    the peak and the axis is scaled to the peak), the graph state among them (a KV cache, its own
    colour), the fragmentation on a second axis, and the `labels` biggest buffers live at the peak
    listed by name next to a marker at the peak."""
    mems = used_memories(trace)
    end = end_cycle(trace)
    scale, unit = time_unit(trace, end)
    fig = new_figure(1.0 + 2.6 * max(len(mems), 1))
    axes = [fig.add_subplot(max(len(mems), 1), 1, i + 1) for i in range(max(len(mems), 1))]
    for ax, mem in zip(axes, mems):
        _panel(ax, trace, mem, end, (scale, unit), labels)
        ax.set_xlim(0, end * scale or 1.0)
    if not mems:
        axes[0].text(0.5, 0.5, "no memory was occupied", ha="center", va="center", transform=axes[0].transAxes)
    axes[-1].set_xlabel(f"time ({unit})", fontsize=LABEL_SIZE)
    fig.suptitle(f"{trace.chip}: memory occupancy", fontsize=TITLE_SIZE)
    fig.tight_layout()
    save(fig, path)


def _panel(ax: Axes, trace: Trace, mem: str, end: float, time: tuple[float, str], labels: int) -> None:
    scale, unit = time
    points = trace.counters[f"memory.{mem}"]
    capacity = trace.memories.get(mem, 0)
    peak = max(v for _, v in points)
    full = capacity and peak >= _FULL_SCALE * capacity
    factor, byte_unit = _byte_unit(capacity if full else peak)
    times = [c * scale for c, _ in points] + [end * scale]
    values = [v / factor for _, v in points]
    ax.stairs(values, times, fill=True, color="#4c72b0", alpha=0.35, linewidth=0)
    ax.stairs(values, times, color="#4c72b0", linewidth=1.0, label="occupied")
    state = trace.counters.get(STATE + mem)
    if state:
        ax.stairs([v / factor for _, v in state], [c * scale for c, _ in state] + [end * scale], fill=True, color="#dd8452",
                  alpha=0.6, linewidth=0, label=f"graph state (KV cache) {human_bytes(state[-1][1])}")
    if capacity:
        label = f"capacity {human_bytes(capacity)}" + ("" if full else " (off scale)")
        if full:
            ax.axhline(capacity / factor, color="#c44e52", linestyle="--", linewidth=1.2, label=label)
        else:
            ax.plot([], [], color="#c44e52", linestyle="--", linewidth=1.2, label=label)
    ax.set_ylim(0, (capacity if full else peak) / factor * 1.12)
    ax.set_ylabel(f"occupied ({byte_unit})", fontsize=LABEL_SIZE)

    fragmentation = trace.counters.get(f"fragmentation.{mem}", [])
    peak_fragmentation = max((v for _, v in fragmentation), default=0)
    if peak_fragmentation >= NEGLIGIBLE_FRAGMENTATION:
        twin = ax.twinx()
        twin.stairs([v * 100 for _, v in fragmentation], [c * scale for c, _ in fragmentation] + [end * scale],
                    color="0.35", linestyle=":", linewidth=1.0)
        twin.set_ylim(0, min(100, max(5, peak_fragmentation * 125)))
        twin.set_ylabel("fragmentation (%)", fontsize=SMALL_SIZE, color="0.35")
        twin.tick_params(labelsize=SMALL_SIZE, colors="0.35")
        ax.plot([], [], color="0.35", linestyle=":", linewidth=1.0, label="fragmentation (right axis)")

    cycle, biggest = peak_buffers(trace, mem, labels)
    ax.axvline(cycle * scale, color="0.2", linewidth=0.8, linestyle="-.")
    _label_peak(ax, f"{cycle * scale:,.4g} {unit}", peak, biggest, left=cycle > end / 2)

    of = f" of {human_bytes(capacity)} ({peak / capacity:.1%})" if capacity else ""
    holes = f", fragmentation up to {peak_fragmentation:.1%}" if peak_fragmentation >= NEGLIGIBLE_FRAGMENTATION else ""
    ax.set_title(f"{mem}: peak {human_bytes(peak)}{of}{holes}", fontsize=LABEL_SIZE, loc="left")
    ax.legend(loc="upper left", bbox_to_anchor=(1.07, 1.0), fontsize=SMALL_SIZE, frameon=False)
    ax.tick_params(labelsize=SMALL_SIZE)
    ax.grid(color="0.92", linewidth=0.6)
    ax.set_axisbelow(True)


def _label_peak(ax: Axes, when: str, peak: float, biggest: list[BufferSpan], left: bool) -> None:
    """A box on the side away from the peak marker naming the biggest buffers live at the peak."""
    lines = [f"at the peak ({human_bytes(peak)} at {when}):"]
    lines += [f"{b.name}{' (state)' if b.kind == 'state' else ''}  {human_bytes(b.size)}  @{b.addr:#x}" for b in biggest]
    ax.text(0.01 if left else 0.99, 0.5, "\n".join(lines), transform=ax.transAxes, fontsize=SMALL_SIZE,
            ha="left" if left else "right", va="center", multialignment="left", family="monospace",
            bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "0.7", "alpha": 0.9})


def _byte_unit(n: float) -> tuple[int, str]:
    for factor, name in _BYTE_UNITS:
        if n >= factor:
            return factor, name
    return 1, "B"

