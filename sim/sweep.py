"""Sweeps: one graph run at every point of the cross product of chip and policy overrides.

    grid = parse_grid(["memories.lmem.size=128KiB,512KiB", "policy.double_buffer=true,false"])
    result = sweep("examples/bottleneck.yaml", "bm1684", grid, jobs=2)
    write_csv(result, "out/sweep/sweep.csv")
    plot_sweep(result, "out/sweep/sweep.png")

Keys starting with "policy." are Policy fields (isa.lower.policy.policy_from_overrides reads
their values), every other key is a chip field (chips.load's overrides). Points run through a
`concurrent.futures.Executor`, by default a ProcessPoolExecutor, so a distributed engine's
executor (Dask's: sim.cluster.dask_executor, or a Client's get_executor()) can stand in; only
strings cross to the workers, which load the graph file and the chip themselves (a file by its
absolute path: a worker may run in another folder). Every point's configuration is checked
before any point runs, so a bad key or value fails the sweep at once; a point whose lowering or
run raises a SimError (a tile that cannot fit the local memory) is a row carrying the message.
"""

import csv
import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter
from tqdm import tqdm

import chips
from isa import graphfile
from isa.errors import ConfigError, InputError, SimError
from isa.graphfile import GraphFile
from traces.summary import human_bytes

from .feeds import RandomInputs
from .run import configure, run

MODES = ("timing", "functional")
OFF_CHIP = "ddr"  # the off-chip memory's name on every chip: the plot shows the others' peaks
_DPI = 150
LineStyle = Literal["-", "--", ":", "-."]  # a memory's line in the plot


@dataclass(frozen=True)
class Row:
    """One point of a sweep: its swept values and the run's figures, or the error it raised."""

    values: dict[str, str]  # swept key -> value as given
    cycles: int | None = None
    seconds: float | None = None
    instructions: int | None = None  # waits excluded
    engine_instructions: dict[str, int] = field(default_factory=dict)  # engine -> its instructions (DMA transfers on a DMA engine)
    utilization: dict[str, float] = field(default_factory=dict)  # engine -> busy cycles / cycles
    ddr_read_bytes: int | None = None
    ddr_write_bytes: int | None = None
    peak_bytes: dict[str, float] = field(default_factory=dict)  # memory -> most bytes occupied at once
    capacity_bytes: dict[str, int] = field(default_factory=dict)  # memory -> its size at this point (failed points too)
    error: str = ""  # "OutOfMemoryError: ..." when the point failed


@dataclass(frozen=True)
class Sweep:
    graph: str  # the graph's name
    chip: str  # the chip as given (a shipped name or a YAML path)
    mode: str
    grid: dict[str, tuple[str, ...]]  # key -> tuple of values, in the order given
    rows: list[Row]  # one Row per point, in cross-product order (the last key varies fastest)

    def engines(self) -> list[str]:
        return _union(row.utilization for row in self.rows)

    def memories(self) -> list[str]:
        return _union(row.capacity_bytes for row in self.rows)


def parse_grid(specs: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """["KEY=V1,V2,...", ...] -> {KEY: (V1, V2, ...)}. Commas inside brackets do not split, so a
    value can be a list ("[w1,w2]")."""
    grid: dict[str, tuple[str, ...]] = {}
    for spec in specs:
        key, sep, text = spec.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--grid {spec!r}: expected KEY=V1,V2,..., e.g. memories.lmem.size=128KiB,512KiB")
        if key in grid:
            raise ConfigError(f"--grid {key}: given twice; list all its values in one --grid {key}=V1,V2,...")
        grid[key] = tuple(_split_values(text))
    return grid


def _split_values(text: str) -> list[str]:
    values, depth, start = [], 0, 0
    for i, ch in enumerate(text + ","):
        depth += (ch in "[{(") - (ch in "]})")
        if ch == "," and depth == 0:
            values.append(text[start:i].strip())
            start = i + 1
    return values


def points(grid: Mapping[str, Sequence[str]]) -> list[dict[str, str]]:
    """The cross product of the grid's values: one {key: value} per point, the last key fastest."""
    return [dict(zip(grid, combo)) for combo in itertools.product(*grid.values())]


def load_graph(path: str | Path) -> GraphFile:
    """A graph file, or an ONNX model whose inputs are drawn at random (seed 0, as `npusim run`
    draws them) when functional mode reads them. A model with inputs that decide shapes (a
    Reshape's shape fed as an input) needs their values, which a sweep does not take."""
    if Path(path).suffix.lower() != ".onnx":
        return graphfile.load(path)
    from isa.onnx import from_onnx, load, static_inputs

    model, _ = load(str(path))
    needed = static_inputs(model)
    if needed:
        raise InputError(f"{path}: input(s) {', '.join(needed)} decide shapes in the model, so a sweep cannot run it "
                         "(npusim run --inputs gives their values)")
    graph = from_onnx(model)
    return GraphFile(graph, RandomInputs.of(graph, 0))


def run_point(graph_path: str, chip: str, point: dict[str, str], mode: str) -> Row:
    """Load the graph (a graph file or an ONNX model) and the chip with this point's overrides,
    lower and execute: a Row. Runs in a worker, so it takes and returns plain picklable data."""
    gf = load_graph(graph_path)
    chip_config, policy = configure(chip, point)
    capacity = {name: memory.capacity for name, memory in chip_config.memories.items()}
    try:
        result = run(gf.graph, chip_config, gf.defaults if mode == "functional" else None, mode, policy)
    except SimError as exc:
        return Row(point, capacity_bytes=capacity, error=f"{type(exc).__name__}: {exc}")
    s = result.stats
    issued = Counter(e.engine for e in result.trace.events if e.kind != "wait")
    return Row(point, s.cycles, s.seconds, s.instructions, {e: issued[e] for e in s.busy}, dict(s.utilization), s.ddr_read_bytes,
               s.ddr_write_bytes, dict(s.peak_bytes), capacity)


def sweep(graph_path: str | Path, chip: str, grid: Mapping[str, Iterable[object]], mode: str = "timing", jobs: int = 1,
          executor: Executor | None = None, progress: bool = True) -> Sweep:
    """Run `graph_path` (a graph file or an ONNX model) on `chip` (a shipped chip's name or a chip YAML's path) at
    every point of `grid` ({key: [values]}), `jobs` points at a time in worker processes, or
    through `executor` (any concurrent.futures.Executor, such as a Dask Client's
    get_executor() or sim.cluster.dask_executor's; the caller shuts it down). Functional
    mode feeds the graph file's random inputs. Rows come back in the grid's order. Values may be
    given as strings, as typed on a command line, or as numbers and booleans."""
    grid = _checked(grid)
    if mode not in MODES:
        raise ConfigError(f"mode {mode!r}: expected one of {', '.join(MODES)}")
    if not isinstance(jobs, int) or jobs < 1:
        raise ConfigError(f"jobs {jobs!r}: expected a whole number >= 1")
    gf = load_graph(graph_path)
    missing = [name for name in gf.graph.inputs if name not in gf.defaults]
    if mode == "functional" and missing:
        raise InputError(f"{graph_path}: functional mode needs a random: spec for input(s) {', '.join(missing)}; or use timing mode")
    todo = points(grid)
    for point in todo:
        configure(chip, point)
    own = executor is None
    executor = ProcessPoolExecutor(max_workers=jobs) if executor is None else executor
    rows: dict[int, Row] = {}  # position in the grid's order -> its row, as the points finish
    try:
        path = str(Path(graph_path).resolve())  # absolute paths: a worker may run in another folder
        chip_arg = str(Path(chip).resolve()) if chips.is_path(chip) else str(chip)
        futures = {executor.submit(run_point, path, chip_arg, point, mode): i for i, point in enumerate(todo)}
        with tqdm(total=len(todo), desc=f"sweep {gf.graph.name}", unit="point", disable=not progress) as bar:
            for future in as_completed(futures):
                rows[futures[future]] = future.result()
                bar.update()
    finally:
        if own:
            executor.shutdown(cancel_futures=True)
    return Sweep(gf.graph.name, str(chip), mode, grid, [rows[i] for i in range(len(todo))])


def _checked(grid: Mapping[str, Iterable[object]]) -> dict[str, tuple[str, ...]]:
    """The grid with each key's values as a tuple of strings, after checking there is something
    to sweep and no value is empty or listed twice."""
    if not grid:
        raise ConfigError("empty grid: give at least one KEY=V1,V2,... to sweep")
    checked = {}
    for key, given in grid.items():
        values = tuple(str(v).strip() for v in given)
        if not values:
            raise ConfigError(f"grid key {key}: no values")
        if "" in values:
            raise ConfigError(f"grid key {key}: empty value in {','.join(values)!r}")
        repeated = [v for i, v in enumerate(values) if v in values[:i]]
        if repeated:
            raise ConfigError(f"grid key {key}: value {repeated[0]!r} listed twice")
        checked[key] = values
    return checked


def _union(dicts: Iterable[Iterable[str]]) -> list[str]:
    """Keys of several dicts in order of first appearance."""
    return list(dict.fromkeys(k for d in dicts for k in d))


def columns(result: Sweep) -> list[str]:
    """The CSV's header: the swept keys, then the figures."""
    return [
        *result.grid, "cycles", "seconds", "instructions", *(f"instructions.{e}" for e in result.engines()),
        *(f"utilization.{e}" for e in result.engines()),
        "ddr_read_bytes", "ddr_write_bytes", *(f"peak_bytes.{m}" for m in result.memories()),
        *(f"capacity_bytes.{m}" for m in result.memories()), "error",
    ]


def write_csv(result: Sweep, path: str | Path) -> None:
    """One row per point: each swept key's value, then the figures (empty where the point failed)."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns(result))
        for row in result.rows:
            writer.writerow([
                *(row.values[k] for k in result.grid), *_blank(row.cycles, row.seconds, row.instructions),
                *_blank(*(row.engine_instructions.get(e) for e in result.engines())),
                *_blank(*(row.utilization.get(e) for e in result.engines())), *_blank(row.ddr_read_bytes, row.ddr_write_bytes),
                *_blank(*(row.peak_bytes.get(m) for m in result.memories())),
                *_blank(*(row.capacity_bytes.get(m) for m in result.memories())), row.error,
            ])


def _blank(*values: object) -> list[object]:
    return ["" if v is None else v for v in values]


def table_rows(result: Sweep) -> list[tuple[str, ...]]:
    """The points as text cells for a terminal table, a header row first. Engines that ran
    nothing at any point are left out (the CSV has every engine)."""
    engines = [e for e in result.engines() if any(row.engine_instructions.get(e) for row in result.rows)]
    memories = result.memories()
    rows = [(*result.grid, "cycles", "us", *(f"{e} {what}" for e in engines for what in ("instr", "busy")), "ddr read", "ddr write",
             *(f"peak {m}" for m in memories), "error")]
    for row in result.rows:
        if row.error:
            figures = ("-",) * (len(rows[0]) - len(result.grid) - 1) + (row.error,)
        else:
            assert row.seconds is not None and row.ddr_read_bytes is not None and row.ddr_write_bytes is not None  # a run's figures
            figures = (
                f"{row.cycles:,}", f"{row.seconds * 1e6:,.2f}",
                *(text for e in engines for text in (f"{row.engine_instructions[e]:,}", f"{row.utilization[e]:.1%}")),
                human_bytes(row.ddr_read_bytes), human_bytes(row.ddr_write_bytes), *(_peak_text(row, m) for m in memories), "",
            )
        rows.append((*(row.values[k] for k in result.grid), *figures))
    return rows


def _peak_text(row: Row, memory: str) -> str:
    """Peak bytes, with the share of the capacity for an on-chip memory (DDR is sized for a board, not the chip)."""
    peak, capacity = row.peak_bytes[memory], row.capacity_bytes.get(memory)
    return f"{human_bytes(peak)} ({peak / capacity:.0%})" if capacity and memory != OFF_CHIP else human_bytes(peak)


def plot_sweep(result: Sweep, path: str | Path) -> None:
    """PNG: a column of two panels per swept key, cycles on top and the on-chip memories' peak
    bytes (with their capacity, log scale) below, against that key's values; one line per
    combination of the other keys' values, one line style per memory. Failed points are crosses
    at the foot of the cycles panel."""
    keys = list(result.grid)
    memories = [m for m in result.memories() if m != OFF_CHIP]
    line_styles: tuple[LineStyle, ...] = ("-", "--", ":", "-.")
    styles = dict(zip(memories, itertools.cycle(line_styles)))
    fig = Figure(figsize=(8.0 * len(keys), 7.5), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, len(keys), squeeze=False, sharex="col")
    by_point = {tuple(row.values[k] for k in keys): row for row in result.rows}
    for col, key in enumerate(keys):
        cycles_ax, peak_ax = axes[0][col], axes[1][col]
        xs = list(range(len(result.grid[key])))
        others = [k for k in keys if k != key]
        combos = list(itertools.product(*(result.grid[k] for k in others)))
        failed = []
        for combo, colour in zip(combos, _colours(len(combos))):
            fixed = dict(zip(others, combo))
            line = [by_point[tuple({**fixed, key: v}[k] for k in keys)] for v in result.grid[key]]
            cycles_ax.plot(xs, [_nan_if_failed(r, r.cycles) for r in line], "o-", color=colour, label=", ".join(combo) or None)
            for m in memories:
                peak_ax.plot(xs, [_nan_if_failed(r, r.peak_bytes.get(m, 0)) for r in line], styles[m], marker="o", color=colour)
                peak_ax.plot(xs, [r.capacity_bytes.get(m, float("nan")) for r in line], styles[m], color=colour, alpha=0.3, linewidth=3)
            failed += [x for x, r in zip(xs, line) if r.error]
        if failed:
            cycles_ax.plot(failed, [0.03] * len(failed), "x", color="black", markersize=9, transform=cycles_ax.get_xaxis_transform(),
                           label="failed (see the\nCSV's error column)")
        cycles_ax.set_title(key)
        cycles_ax.set_ylabel("cycles")
        cycles_ax.set_ylim(bottom=0)
        cycles_ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        peak_ax.set_ylabel(f"{memories[0] if len(memories) == 1 else 'on-chip memory'}: peak, capacity")
        peak_ax.set_yscale("log", base=2)
        peak_ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: human_bytes(v)))
        peak_ax.set_xticks(xs, result.grid[key], rotation=45, ha="right")
        peak_ax.set_xlabel(key)
        for ax in (cycles_ax, peak_ax):
            ax.grid(True, alpha=0.3)
        if cycles_ax.get_legend_handles_labels()[0]:
            cycles_ax.legend(title=", ".join(others) or None, fontsize="small", title_fontsize="small", loc="upper left",
                             bbox_to_anchor=(1.01, 1.0), ncols=-(-len(combos) // 12))
        peak_ax.legend(handles=[Line2D([], [], color="0.3", linestyle=styles[m], marker="o", label=f"{m} peak") for m in memories]
                       + [Line2D([], [], color="0.3", alpha=0.3, linewidth=3, label="capacity")], fontsize="small", loc="upper left",
                       bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(f"{result.graph} on {result.chip} ({result.mode} mode): cycles and peak on-chip memory")
    fig.savefig(path, format="png", dpi=_DPI)


def _colours(n: int) -> list[str] | list[tuple[float, float, float, float]]:
    """n line colours: the qualitative tab10 for up to ten lines, else steps along viridis (a
    swept key's values are usually ordered, small to large)."""
    if n <= 10:
        return [f"C{i}" for i in range(n)]
    return [colormaps["viridis"](i / (n - 1)) for i in range(n)]


def _nan_if_failed(row: Row, value: float | None) -> float | None:
    return float("nan") if row.error else value
