"""The `npusim` command.

    npusim run GRAPH.yaml --chip bm1684 [--mode timing] [--inputs in.npz] [--outputs out.npz]
                          [--trace run.json] [--plots DIR] [--program prog.txt] [--set KEY=VALUE ...]
    npusim chips                      shipped chips with their headline figures
    npusim ops [--chip NAME]          ops and the dtypes each chip supports

A SimError prints as one line on stderr and the exit status is 1.
"""

import argparse
import sys
from pathlib import Path

import numpy as np

import chips
import isa
import traces
from isa import graphfile
from isa.lower.check import describe
from isa.errors import ConfigError, InputError, SimError

from .run import execute


def main(argv=None):
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except SimError as exc:
        print(f"npusim: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _parser():
    p = argparse.ArgumentParser(prog="npusim", description="Cycle-approximate NPU/TPU simulator: exact numbers, cycles and traces.")
    sub = p.add_subparsers(required=True, metavar="COMMAND")
    run = sub.add_parser("run", help="simulate a graph file on a chip")
    run.add_argument("graph", help="graph YAML file (see examples/)")
    run.add_argument("--chip", default="generic", help="shipped chip name or chip YAML path (default: generic)")
    run.add_argument("--mode", choices=("functional", "timing"), default="functional")
    run.add_argument("--inputs", help=".npz with one array per graph input (default: the graph file's random inputs)")
    run.add_argument("--outputs", help="write the outputs to this .npz")
    run.add_argument("--trace", help="write a Chrome/Perfetto trace JSON here")
    run.add_argument("--plots", help="write plots (timeline.png) into this folder")
    run.add_argument("--program", help="write the lowered program's text here")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a chip field, e.g. memories.ddr.bandwidth=68GB/s")
    run.set_defaults(func=_run)
    sub.add_parser("chips", help="list the shipped chips").set_defaults(func=_chips)
    ops = sub.add_parser("ops", help="list ops and the dtypes each chip supports")
    ops.add_argument("--chip", help="only this chip")
    ops.set_defaults(func=_ops)
    return p


def _overrides(pairs):
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {pair!r}: expected KEY=VALUE, e.g. memories.ddr.bandwidth=68GB/s")
        out[key] = value
    return out


def _inputs(args, gf):
    if not args.inputs:
        if args.mode == "timing":
            return None
        missing = [n for n in gf.graph.inputs if n not in gf.defaults]
        if missing:
            raise InputError(f"no value for input(s) {', '.join(missing)}: pass --inputs FILE.npz, give them a random: spec in the graph file, or use --mode timing")
        return gf.defaults
    try:
        with np.load(args.inputs) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError) as exc:
        raise InputError(f"--inputs {args.inputs}: cannot read ({exc})") from None


def _run(args):
    chip = chips.load(args.chip, _overrides(args.set))
    gf = graphfile.load(args.graph)
    program = isa.lower(gf.graph, chip)
    if args.program:
        _write(args.program, lambda p: Path(p).write_text(program.to_text()))
    if args.outputs and args.mode == "timing":
        raise ConfigError("--outputs needs functional mode: timing mode computes no values")
    result = execute(program, chip, _inputs(args, gf), args.mode)
    waits = sum(1 for s in program.streams.values() for i in s if i.kind == "wait")
    print(f"{gf.graph.name} on {chip.name} ({args.mode} mode): lowered to {len(program) - waits} instructions and {waits} waits")
    print(traces.format_summary(result.stats))
    if args.outputs:
        _write(args.outputs, lambda p: _savez(p, result.outputs))
    if args.trace:
        _write(args.trace, lambda p: traces.write_chrome(result.trace, p))
    if args.plots:
        _write(str(Path(args.plots) / "timeline.png"), lambda p: traces.plot_timeline(result.trace, p))
    return 0


def _savez(path, arrays):
    with open(path, "wb") as f:  # np.savez would add ".npz" to a path without it
        np.savez(f, **arrays)


def _write(path, writer):
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        writer(path)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
    print(f"wrote {path}")


def _chips(args):
    rows = [("chip", "clock", "local memory", "DDR", "matrix peak", "vector peak", "engines")]
    for name in chips.available():
        chip = chips.load(name)
        local = [m for m in chip.memories.values() if m.kind == "local"]
        ddr = chip.memories["ddr"]
        rows.append((
            name,
            f"{chip.clock_hz / 1e6:g} MHz",
            ", ".join(f"{m.name} {_size(m.capacity)}" + (f" ({m.lanes} x {_size(m.size)})" if m.lanes > 1 else "") for m in local),
            f"{ddr.bandwidth * chip.clock_hz / 1e9:.1f} GB/s",
            ", ".join(_matrix_peak(chip, e) for e in chip.engines_of("matrix")),
            ", ".join(_vector_peak(chip, e) for e in chip.engines_of("vector")),
            ", ".join(f"{e.name} ({'+'.join(e.kinds)})" for e in chip.engines.values()),
        ))
    _table(rows)
    return 0


def _matrix_peak(chip, engine):
    """Peak of the matrix unit for the headline dtypes it supports: 2 ops per MAC."""
    u = engine.matrix
    return ", ".join(
        f"{d} {2 * u.m * u.n * u.k / u.block_cycles[d] * chip.clock_hz / 1e12:.2f} TOPS"
        for d in ("int8", "float16", "float32") if d in u.block_cycles
    )


def _vector_peak(chip, engine):
    u = engine.vector
    f32 = u.lanes * u.per_lane.get("float32", 0)
    return f"{f32} float32/cycle"


def _ops(args):
    names = [args.chip] if args.chip else chips.available()
    loaded = [chips.load(n) for n in names]
    rows = [("op",) + tuple(c.name for c in loaded)]
    for name, opdef in sorted(isa.ops.REGISTRY.items()):
        for key in [name] + [f"{name}.{v}" for v in opdef.variants]:
            rows.append((key,) + tuple(_support_text(c.support(key)) for c in loaded))
    _table(rows)
    return 0


def _support_text(row):
    return "-" if row is None else describe(row).replace("same-dtype: ", "")


def _size(n):
    for unit in ("GiB", "MiB", "KiB"):
        scale = {"GiB": 1 << 30, "MiB": 1 << 20, "KiB": 1 << 10}[unit]
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"


def _table(rows):
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip())


if __name__ == "__main__":
    sys.exit(main())
