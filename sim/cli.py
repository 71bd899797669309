"""The `npusim` command.

    npusim run GRAPH.yaml --chip bm1684 [--mode timing] [--inputs in.npz] [--outputs out.npz]
                          [--trace run.json] [--plots DIR] [--csv DIR] [--program prog.txt] [--set KEY=VALUE ...]
    npusim run MODEL.onnx --chip bm1684 [--inputs in.npz] [--seed N] ...
                          an ONNX model (isa.from_onnx); without --inputs, random inputs of each
                          input's shape and dtype drawn with --seed
    npusim run MODEL.onnx --chip bm1684 --quantize F16|BF16|INT8 [--calibration table.txt|sample.npz]
                          deployed in that precision first (sim/deploy.py)
    npusim lower GRAPH --chip bm1684 [--inputs in.npz] [--set KEY=VALUE ...] -o prog.txt
                          the lowered program as text (a progress bar on a terminal)
    npusim exec prog.txt [--chip NAME] [--mode timing] [--inputs in.npz] [--seed N] [--set KEY=VALUE ...] ...
                          run a saved or hand-edited program (the outputs of run: --outputs, --trace, ...)
    npusim report run.json [--csv DIR] [--top N] [--wide]   summary and per-op table of a saved trace
    npusim compare A.json B.json [--top N] [--wide]         two saved runs side by side
    npusim sweep GRAPH.yaml --chip bm1684 --grid KEY=V1,V2,... [--grid ...] [--jobs N | --scheduler tcp://HOST:8786]
                            [--mode timing|functional] [--out DIR]
    npusim chips [--wide]             shipped chips with their headline figures
    npusim ops [--chip NAME] [--wide] ops and the dtypes each chip supports

On a terminal, tables (chips, ops, sweep, report, compare) fit its width (cells wrap within their columns; columns that do not fit
go to a further block); --wide prints each row on one line, as a pipe or a file always gets them.

A mistake in what the user gave (a SimError, or a command line argparse refuses) prints as one
line on stderr and the exit status is 1. Anything else is a defect of npusim: one line saying
so, the exit status 2, and the traceback with --debug. A reader that closes the pipe early
(`npusim ops | head`) ends the output quietly, with the status 141 a shell gives SIGPIPE.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, Protocol, TypeVar

import numpy as np
from tqdm import tqdm

import chips
import isa
import traces
from isa import graphfile, limits, npyfile
from isa.errors import ConfigError, InputError, SimError, UnsupportedError
from isa.graphfile import GraphFile
from isa.lower.check import describe
from isa.program import read_program
from traces import text

from .cluster import INSTALL, dask_executor
from .feeds import RandomInputs
from .peaks import peak_ops
from .run import POLICY_PREFIX, configure, execute
from .sweep import parse_grid, plot_sweep, sweep, table_rows, write_csv


class _OfCore(Protocol):
    """A memory or an engine, as _per_core lists them: core None is one shared by every core."""

    @property
    def core(self) -> int | None: ...


T = TypeVar("T", bound=_OfCore)

if TYPE_CHECKING:
    from chips.schema import Chip, OpSupport
    from isa.graph import Graph
    from isa.lower.policy import Policy
    from isa.program import Program
    from sim.machine import Result

    Commands = argparse._SubParsersAction["_Parser"]  # the parser's subcommands (_parser)

BUG = 2  # exit status of a defect of npusim
PIPE_CLOSED = 128 + 13  # a shell's status for a process SIGPIPE ends


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv
    try:
        args = _parser().parse_args([a for a in argv if a != "--debug"])
        status = args.func(args)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at the interpreter's exit
        return status
    except SimError as exc:
        print(f"npusim: error: {type(exc).__name__}: {_one_line(exc)}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        _quiet_stdout()
        return PIPE_CLOSED
    except KeyboardInterrupt:
        print("npusim: interrupted", file=sys.stderr)
        return 128 + 2
    except Exception as exc:  # a defect of npusim, not of what the user gave
        if debug:
            raise
        print(f"npusim: internal error (a bug in npusim; please report it with the command that shows it, "
              f"and run it again with --debug for the traceback): {type(exc).__name__}: {_one_line(exc)}", file=sys.stderr)
        return BUG


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:2000]


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush does not fail on the closed pipe."""
    with contextlib.suppress(OSError, ValueError):  # no file descriptor (a captured stdout)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are ConfigErrors: one line, exit status 1, as every
    other mistake of the user's."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{self.prog}: {message} (see {self.prog} --help)")


def _seed(text: str) -> int:
    try:
        seed = int(text)
    except ValueError:
        seed = -1
    if not 0 <= seed < 2**64:
        raise argparse.ArgumentTypeError(f"expected a whole number in [0, 2^64), got {text!r}")
    return seed


def _parser() -> argparse.ArgumentParser:
    """npusim's command line: each subcommand with its options, added by the functions below in
    the order `npusim --help` lists them."""
    p = _Parser(prog="npusim", description="Cycle-approximate NPU/TPU simulator: exact numbers, cycles and traces. "
                                           "--debug anywhere shows the traceback of an internal error.")
    sub = p.add_subparsers(required=True, metavar="COMMAND")
    for add in (_run_command, _lower_command, _exec_command, _sweep_command, _trace_commands, _list_commands):
        add(sub)
    return p


def _run_command(sub: Commands) -> None:
    run = sub.add_parser("run", help="simulate a graph file or an ONNX model on a chip")
    run.add_argument("graph", help="graph YAML file (see examples/) or ONNX model (.onnx)")
    run.add_argument("--chip", default="generic", help="shipped chip name or chip YAML path (default: generic)")
    run.add_argument("--mode", choices=("functional", "timing"), default="functional")
    run.add_argument("--inputs", help=".npz with one array per graph input (default: the graph file's random inputs; "
                                      "for an ONNX model, random inputs drawn with --seed)")
    run.add_argument("--seed", type=_seed, default=0, help="seed of an ONNX model's random inputs (default: 0)")
    _result_files(run)
    run.add_argument("--program", help="write the lowered program's text here")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a chip field (memories.ddr.bandwidth=68GB/s) "
                          "or a policy field (policy.fuse=false, policy.max_tile=h=4,w=8)")
    run.add_argument("--quantize", metavar="F16|BF16|INT8", help="deploy the graph in this precision for --chip first (docs/quantize.md)")
    run.add_argument("--calibration", help="INT8's calibration: a TPU-MLIR table (name threshold min max lines) or an .npz sample "
                                           "(default: the run's inputs)")
    run.set_defaults(func=_run)


def _lower_command(sub: Commands) -> None:
    low = sub.add_parser("lower", help="lower a graph file or an ONNX model for a chip and write the program as text")
    low.add_argument("graph", help="graph YAML file (see examples/) or ONNX model (.onnx)")
    low.add_argument("--chip", default="generic", help="shipped chip name or chip YAML path (default: generic)")
    low.add_argument("--inputs", help="for an ONNX model: .npz with the values of the inputs shapes depend on, and other "
                                      "inputs whose shapes are to be fixed (as run reads it)")
    low.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a chip or policy field, as run takes it")
    low.add_argument("-o", "--output", required=True, metavar="PROGRAM", help="write the program's text here")
    low.set_defaults(func=_lower, seed=0)


def _exec_command(sub: Commands) -> None:
    ex = sub.add_parser("exec", help="run a program text written by lower or run --program, saved or edited by hand")
    ex.add_argument("program", help="program text file (npusim lower -o)")
    ex.add_argument("--chip", help="shipped chip name or chip YAML path (default: the chip the program's .program line names); "
                                   "a program runs only on the chip it was lowered for")
    ex.add_argument("--mode", choices=("functional", "timing"), default="functional")
    ex.add_argument("--inputs", help=".npz with one array per program input (default: random inputs drawn with --seed)")
    ex.add_argument("--seed", type=_seed, default=0, help="seed of the random inputs (default: 0)")
    ex.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a chip field (memories.ddr.bandwidth=16GB/s); policy fields change the lowering, not a program")
    _result_files(ex)
    ex.set_defaults(func=_exec)


def _sweep_command(sub: Commands) -> None:
    sw = sub.add_parser("sweep", help="run a graph over the cross product of chip and policy overrides")
    sw.add_argument("graph", help="graph YAML file (see examples/) or ONNX model")
    sw.add_argument("--chip", default="generic", help="shipped chip name or chip YAML path (default: generic)")
    sw.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                    help="a chip field (memories.lmem.size=128KiB,512KiB) or a policy field (policy.double_buffer=true,false; "
                         "a value with commas in brackets: policy.pinned=[w1,w2],[w3]); repeat to cross")
    where = sw.add_mutually_exclusive_group()
    where.add_argument("--jobs", type=int, default=1, help="points run at once, each in its own process (default: 1)")
    where.add_argument("--scheduler", metavar="tcp://HOST:8786",
                       help=f"run the points on the Dask cluster of this scheduler (needs dask.distributed: {INSTALL})")
    sw.add_argument("--mode", choices=("timing", "functional"), default="timing", help="functional feeds the graph file's random inputs")
    sw.add_argument("--out", default="out/sweep", help="folder for sweep.csv and sweep.png (default: out/sweep)")
    _wide(sw)
    sw.set_defaults(func=_sweep)


def _trace_commands(sub: Commands) -> None:
    """report and compare: what a run's saved traces hold."""
    report = sub.add_parser("report", help="summary and per-op table of a trace saved by run --trace")
    report.add_argument("trace", help="trace JSON written by npusim run --trace")
    report.add_argument("--csv", help="write events.csv and ops.csv into this folder")
    report.add_argument("--top", type=int, default=20, help="ops in the table, longest first (default: 20)")
    _wide(report)
    report.set_defaults(func=_report)
    compare = sub.add_parser("compare", help="two runs' saved traces side by side")
    compare.add_argument("a", help="trace JSON of run A")
    compare.add_argument("b", help="trace JSON of run B")
    compare.add_argument("--top", type=int, default=10, help="ops whose time changed most to list (default: 10)")
    _wide(compare)
    compare.set_defaults(func=_compare)


def _list_commands(sub: Commands) -> None:
    """chips and ops: what npusim ships."""
    chip_list = sub.add_parser("chips", help="list the shipped chips")
    _wide(chip_list)
    chip_list.set_defaults(func=_chips)
    ops = sub.add_parser("ops", help="list ops and the dtypes each chip supports")
    ops.add_argument("--chip", help="only this chip")
    _wide(ops)
    ops.set_defaults(func=_ops)


def _wide(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wide", action="store_true", help="print each row of the table on one line, whatever the terminal's width")


def _result_files(parser: argparse.ArgumentParser) -> None:
    """The files a run writes, as run and exec take them."""
    parser.add_argument("--outputs", help="write the outputs to this .npz")
    parser.add_argument("--trace", help="write a Chrome/Perfetto trace JSON here")
    parser.add_argument("--plots", help="write timeline.png, memory.png, bandwidth.png and roofline.png into this folder")
    parser.add_argument("--csv", help="write events.csv and ops.csv into this folder")


def _overrides(pairs: Iterable[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {pair!r}: expected KEY=VALUE, e.g. memories.ddr.bandwidth=68GB/s")
        out[key] = value
    return out


def _inputs(args: argparse.Namespace, gf: GraphFile, chip: Chip) -> Mapping[str, np.ndarray] | None:
    if not args.inputs:
        if args.mode == "timing":
            return None
        missing = [n for n in gf.graph.inputs if n not in gf.defaults]
        if missing:
            raise InputError(f"no value for input(s) {', '.join(missing)}: pass --inputs FILE.npz, give them a random: spec "
                             "in the graph file, or use --mode timing")
        return gf.defaults
    given = _read_npz(args.inputs, *_data_limit(chip))
    return gf.rename(given) if hasattr(gf, "rename") else given


def _data_limit(chip: Chip) -> tuple[int, str]:
    """(bytes, what they are) a run's data may take on the host: the host-memory cap, or the
    chip's data memory (ddr, or the host's) where that is smaller."""
    memory = chip.memories[chip.data_memory]
    if memory.capacity < limits.HOST_MEMORY:
        return memory.capacity, f"{chip.name}'s {memory.name} capacity"
    return limits.HOST_MEMORY, "the host-memory cap"


def _read_npz(path: str, limit: int | None = None, what: str = "the host-memory cap") -> dict[str, np.ndarray]:
    """The arrays of an .npz (isa/npyfile.py: each size checked before it is read)."""
    try:
        return npyfile.read_npz(path, limit, what)
    except InputError as exc:
        raise InputError(f"--inputs {exc}") from None


class OnnxGraph(GraphFile):
    """An ONNX model as the graph `run` simulates: inputs a shape depends on (a Reshape's shape
    fed as an input) take their values from --inputs when the graph is built; the others are
    run inputs, from --inputs by their ONNX names, or random (normal floats, integers in
    [0, 10), bools) drawn with --seed."""

    def __init__(self, args: argparse.Namespace) -> None:
        from isa.onnx import from_onnx, load, static_inputs, tensor_name

        model, _ = load(args.graph)
        given = _read_npz(args.inputs) if args.inputs else {}
        names = {i.name for i in model.graph.input} - {t.name for t in model.graph.initializer}
        unknown = sorted(set(given) - names)
        if unknown:
            raise InputError(f"--inputs {args.inputs}: {', '.join(unknown)} is not an "
                             f"input of {args.graph} (inputs: {', '.join(sorted(names))})")
        needed = static_inputs(model)
        missing = [n for n in needed if n not in given]
        if missing:
            raise InputError(f"{args.graph}: input(s) {', '.join(missing)} decide shapes in the model, so their values are needed "
                             "when the graph is built: give them in --inputs FILE.npz")
        shapes = {n: a.shape for n, a in given.items() if n not in needed and a.ndim}
        graph = from_onnx(model, values={n: given[n] for n in needed}, shapes=shapes)
        self.names = {n: tensor_name(n) for n in names if n not in needed}
        super().__init__(graph, RandomInputs.of(graph, args.seed))

    def rename(self, given: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """--inputs arrays by the graph's input names (an ONNX scalar as its (1,) tensor)."""
        out = {}
        for onnx_name, array in given.items():
            name = self.names.get(onnx_name, onnx_name)
            if name in self.graph.inputs:
                out[name] = array.reshape(self.graph.tensors[name].shape) if array.ndim == 0 else array
        return out


def _load(args: argparse.Namespace, chip: Chip) -> tuple[GraphFile, Graph]:
    """(the graph file, the float graph it came from: with --quantize, the graph before it was deployed)."""
    gf = OnnxGraph(args) if Path(args.graph).suffix.lower() == ".onnx" else graphfile.load(args.graph, *_data_limit(chip))
    float_graph = gf.graph
    if getattr(args, "quantize", None):
        from .deploy import deploy

        float_graph = deploy(gf, args, chip)
    return gf, float_graph


def _run(args: argparse.Namespace) -> int:
    chip, policy = configure(args.chip, _overrides(args.set))  # policy.KEY=VALUE sets a placement knob, any other key a chip field
    gf, float_graph = _load(args, chip)
    program = _deployed_or_hinted(args, gf.graph, chip, policy)
    if args.program:
        _write(args.program, lambda p: Path(p).write_text(program.to_text()))
    _check_result_files(args)
    inputs = _inputs(args, gf, chip)
    result = execute(program, chip, inputs, args.mode)
    _report_result(args, program, result, f"lowered to {_counts(program)}", chip)
    if getattr(args, "quantize", None) and args.mode == "functional":
        from .deploy import compared

        print(f"{args.quantize} against float32:")
        for line in compared(float_graph, inputs, result.outputs):
            print("  " + line)
    return 0


def _lower(args: argparse.Namespace) -> int:
    chip, policy = configure(args.chip, _overrides(args.set))
    gf, _ = _load(args, chip)
    program = _lowered(gf.graph, chip, policy)
    _write(args.output, lambda p: Path(p).write_text(program.to_text()))
    print(f"{program.graph} on {chip.name}: lowered to {_counts(program)}")
    _print_layer_groups(program)
    return 0


def _exec(args: argparse.Namespace) -> int:
    program = read_program(args.program)
    point = _overrides(args.set)
    policy = [key for key in point if key.startswith(POLICY_PREFIX)]
    if policy:
        raise ConfigError(f"--set {policy[0]}: a policy field changes how a graph is lowered, and exec runs a program as it is "
                          "(give it to npusim lower)")
    chip = chips.load(args.chip or program.chip, point)
    _check_result_files(args)
    inputs: Mapping[str, np.ndarray] | None
    if args.inputs:
        inputs = _read_npz(args.inputs, *_data_limit(chip))
    elif args.mode == "functional":
        inputs = RandomInputs({b.name: (b.region.shape, b.region.dtype) for b in program.bindings if b.role == "input"}, args.seed)
    else:
        inputs = None
    result = execute(program, chip, inputs, args.mode)
    _report_result(args, program, result, f"{args.program} holds {_counts(program)}", chip)
    return 0


def _deployed_or_hinted(args: argparse.Namespace, graph: Graph, chip: Chip, policy: Policy) -> Program:
    """_lowered, for run; where the chip refuses a float32 graph given without --quantize (the
    910B's cube has no float32 rate), the refusal also names the deployments that may run it."""
    try:
        return _lowered(graph, chip, policy)
    except UnsupportedError as exc:
        if getattr(args, "quantize", None) or not any(t.dtype == "float32" for t in graph.tensors.values()):
            raise
        raise UnsupportedError(f"{exc}; --quantize F16, BF16 or INT8 deploys the float32 graph for the chip first, in the "
                               "precisions its tables have (docs/quantize.md)") from exc


def _lowered(graph: Graph, chip: Chip, policy: Policy) -> Program:
    """isa.lower, with a progress bar over the ops on stderr when stderr is a terminal (never in
    a pipe, a file or a test): a large model takes seconds to lower. It updates once a layer
    group (mininterval 0: each update is drawn, however fast the lowering)."""
    if not sys.stderr.isatty():
        return isa.lower(graph, chip, policy)
    with tqdm(total=len(graph.nodes), desc=f"lowering {graph.name}", unit="op", leave=False, file=sys.stderr,
              mininterval=0) as bar:
        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        return isa.lower(graph, chip, policy, progress)


def _counts(program: Program) -> str:
    waits = sum(1 for s in program.streams.values() for i in s if i.kind == "wait")
    return f"{len(program) - waits} instructions and {waits} waits"


def _print_layer_groups(program: Program) -> None:
    groups = [n.removeprefix("layer group ") for n in program.notes if n.startswith("layer group") and "lowered layer by layer" not in n]
    if groups:  # isa/lower/schedule/chain.py's multi-layer groups, as the program notes them
        print("layer groups:\n" + "\n".join(f"  {g}" for g in groups))


def _check_result_files(args: argparse.Namespace) -> None:
    if args.outputs and args.mode == "timing":
        raise ConfigError("--outputs needs functional mode: timing mode computes no values")


def _report_result(args: argparse.Namespace, program: Program, result: Result, what: str, chip: Chip) -> None:
    """The summary of a run (of run or exec) and the files asked for; in timing mode the
    estimate beside how far the chip's estimates were from published times (its `accuracy:`)."""
    print(f"{program.graph} on {program.chip} ({args.mode} mode): {what}")
    _print_layer_groups(program)
    print(traces.format_summary(result.stats))
    if args.mode == "timing" and chip.accuracy is not None:
        print(f"{result.stats.seconds * 1e3:.3g} ms; {chip.name} {chip.accuracy}")
    if args.outputs:
        _write(args.outputs, lambda p: _savez(p, result.outputs))
    if args.trace:
        _write(args.trace, lambda p: traces.write_chrome(result.trace, p))
    if args.plots:
        for name, plot in _PLOTS.items():
            _write(str(Path(args.plots) / f"{name}.png"), functools.partial(plot, result.trace))
    if args.csv:
        _write_csv(args.csv, result.trace, result.stats)


_PLOTS: dict[str, Callable[[traces.Trace, str], None]] = {
    "timeline": traces.plot_timeline, "memory": traces.plot_memory, "bandwidth": traces.plot_bandwidth, "roofline": traces.plot_roofline,
}


def _write_csv(folder: str, trace: traces.Trace, summary: traces.Summary) -> None:
    _write(str(Path(folder) / "events.csv"), lambda p: traces.write_events_csv(trace, p))
    _write(str(Path(folder) / "ops.csv"), lambda p: traces.write_ops_csv(summary, p))


def _load_trace(path: str) -> traces.Trace:
    try:
        return traces.load(path)
    except traces.TraceFileError as exc:
        raise InputError(str(exc)) from None


def _top(n: int) -> int:
    if n < 0:
        raise ConfigError(f"--top {n}: must be 0 or more")
    return n


def _report(args: argparse.Namespace) -> int:
    top = _top(args.top)
    trace = _load_trace(args.trace)
    summary = traces.summarize(trace)
    print(traces.format_summary(summary, top=0))
    print(traces.format_ops(summary, top, None if args.wide else _terminal_width()))
    if args.csv:
        _write_csv(args.csv, trace, summary)
    return 0


def _compare(args: argparse.Namespace) -> int:
    top = _top(args.top)
    a, b = (traces.summarize(_load_trace(path)) for path in (args.a, args.b))
    print(f"A = {args.a}\nB = {args.b}")
    print(traces.format_comparison(a, b, top=top, width=None if args.wide else _terminal_width()))
    return 0


def _sweep(args: argparse.Namespace) -> int:
    grid = parse_grid(args.grid)
    if args.scheduler:
        with dask_executor(args.scheduler) as executor:
            result = sweep(args.graph, args.chip, grid, args.mode, executor=executor)
    else:
        result = sweep(args.graph, args.chip, grid, args.mode, args.jobs)
    print(f"{result.graph} on {result.chip} ({result.mode} mode): {len(result.rows)} points")
    _table(table_rows(result), args.wide)
    _write(str(Path(args.out) / "sweep.csv"), lambda p: write_csv(result, p))
    _write(str(Path(args.out) / "sweep.png"), lambda p: plot_sweep(result, p))
    return 0


def _savez(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    with open(path, "wb") as f:  # np.savez would add ".npz" to a path without it
        np.savez(f, **arrays)  # type: ignore[arg-type]  # numpy's stub: an output named allow_pickle would be read as that option


def _write(path: str, writer: Callable[[str], object]) -> None:
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        writer(path)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
    print(f"wrote {path}")


def _chips(args: argparse.Namespace) -> int:
    """A row per shipped chip. On a chip of several cores the per-core memories and engines are
    listed once, as "24 x (...)", and the peaks are the whole chip's."""
    rows = [("chip", "clock", "local memory", "DDR", "matrix peak", "vector peak", "engines")]
    for name in chips.available():
        chip = chips.load(name)
        local = [m for m in chip.memories.values() if m.kind == "local"]
        ddr = chip.memories["ddr"]
        peaks = peak_ops(chip)
        rows.append((
            name,
            f"{chip.clock_hz / 1e6:g} MHz",
            _per_core(chip, local, lambda m: f"{m.base} {_size(m.capacity)}" + (f" ({m.lanes} x {_size(m.size)})" if m.lanes > 1 else "")),
            f"{ddr.bandwidth * chip.clock_hz / 1e9:.1f} GB/s",
            ", ".join(f"{d} {peaks['matrix'][d] * chip.clock_hz / 1e12:.2f} TOPS"
                      for d in ("int8", "float16", "float32") if d in peaks.get("matrix", {})),
            f"{peaks['vector'].get('float32', 0):g} float32/cycle" if "vector" in peaks else "",
            _per_core(chip, chip.engines.values(), lambda e: f"{e.base} ({'+'.join(e.kinds)})"),
        ))
    _table(rows, args.wide)
    return 0


def _per_core(chip: Chip, items: Iterable[T], text: Callable[[T], str]) -> str:
    """items as text: on a chip of several cores, core 0's copies once as "N x (...)", then the
    shared ones."""
    if chip.cores == 1:
        return ", ".join(text(i) for i in items)
    mine = ", ".join(text(i) for i in items if i.core == 0)
    return ", ".join([f"{chip.cores} x ({mine})"] * bool(mine) + [text(i) for i in items if i.core is None])


def _ops(args: argparse.Namespace) -> int:
    names = [args.chip] if args.chip else chips.available()
    loaded = [chips.load(n) for n in names]
    rows = [("op",) + tuple(c.name for c in loaded)]
    for name, opdef in sorted(isa.ops.REGISTRY.items()):
        for key in [name] + [f"{name}.{v}" for v in opdef.variants]:
            rows.append((key,) + tuple(_support_text(c.support(key)) if opdef.table else "any dtype (DMA copies)" for c in loaded))
    _table(rows, args.wide)
    return 0


def _support_text(row: OpSupport | None) -> str:
    return "-" if row is None else describe(row).replace("same-dtype: ", "")


def _size(n: int) -> str:
    for unit in ("GiB", "MiB", "KiB"):
        scale = {"GiB": 1 << 30, "MiB": 1 << 20, "KiB": 1 << 10}[unit]
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"


def _table(rows: Sequence[Sequence[object]], wide: bool = False) -> None:
    """Print rows left-aligned, fitted to the terminal's width (traces.text.table wraps the
    cells) unless `wide`."""
    print("\n".join(text.table(rows, indent="", left=range(len(rows[0])), width=None if wide else _terminal_width())))


def _terminal_width() -> int | None:
    """The columns a table fits in: the terminal's (COLUMNS where it is set) when stdout is a
    terminal, else None: whole rows in a pipe or a file, for grep and scripts."""
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


if __name__ == "__main__":
    sys.exit(main())
