"""Real models from ONNX on every shipped chip: simulated latency, CPU time and the top ops.

Each model of examples/onnx_models.py (ResNet-50, MobileNetV2, YOLOv5s, one BERT-base encoder
layer; seeded random weights, no download) is built as an onnx.ModelProto, imported with
`isa.from_onnx`, lowered for the chip with the default placement policy and run in timing mode.
`--file` runs ONNX files instead (any model, with `--shape NAME=D,D,...` for its dynamic
dimensions). A row gives the simulated latency of the whole batch, the CPU time of each stage
(import, lower, simulate) and the five ops with the longest simulated span
(traces.Summary.slowest, the table `npusim report` prints), with their share of the run.

The dtype is the model's: float32 by default. `--dtype auto` picks, per chip, float32 where the
chip's convolution (matrix_mul for BERT) takes it, else float16. A chip whose table has no row
for that op in that dtype is skipped with the reason (tpu_v1 runs int8 only; ascend310b's table
has only the ATB seeds' ops); a stage that fails prints the error's type and message on one line
and the bench goes on.

    python bench/onnx_models.py                                    # every model on every chip
    python bench/onnx_models.py --model resnet50 --chip bm1684
    python bench/onnx_models.py --dtype auto --size 320 --seq 64   # float16 where float32 is not there
    python bench/onnx_models.py --file det.onnx --shape x=1,3,640,640 --chip bm1684
"""

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import chips
import isa
import sim
from isa.lower.check import check_graph

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import onnx_models

MODELS = tuple(onnx_models.MODELS)
KEY_OP = {"bert_encoder_layer": "matrix_mul"}  # the op whose dtype support decides; "conv" for the others
TOP = 5


@dataclass
class Run:
    model: str
    chip: str
    dtype: str
    skipped: str = ""  # why the chip was not tried
    failed: str = ""  # "stage: ErrorType: message"
    ms: float = 0.0  # simulated latency of the whole batch
    cycles: int = 0
    instructions: int = 0
    cpu: dict = field(default_factory=dict)  # stage -> CPU seconds: build, import, lower, simulate
    top: list = field(default_factory=list)  # (op name, its share of the time in cycles, of the run)


def supports(chip, op, dtype):
    """Whether the chip's op table has a row for `op` that takes `dtype` (dtypes None: any)."""
    row = chip.support(op)
    return row is not None and (row.dtypes is None or dtype in row.dtypes)


def pick_dtype(chip, model, wanted):
    """(dtype, None) to run `model` on `chip` in, or (None, the reason to skip)."""
    op = KEY_OP.get(model, "conv")
    candidates = onnx_models.DTYPES if wanted == "auto" else (wanted,)
    for dtype in candidates:
        if supports(chip, op, dtype):
            return dtype, None
    row = chip.support(op)
    has = "no row" if row is None else "only " + ", ".join(sorted(row.dtypes))
    return None, f"{op} in {' or '.join(candidates)} not supported ({has} in its op table)"


def build_kwargs(model, args):
    kwargs = {"batch": args.batch}
    if model == "bert_encoder_layer":
        kwargs["seq"] = args.seq
    elif args.size:
        kwargs["size"] = args.size
    return kwargs


def simulate(model, chip, run, shapes=None):
    """Import (a ModelProto or a path), lower and run in timing mode, filling `run` (its CPU
    times, latency, top ops); a chip whose op table lacks an op of the model is skipped."""
    stage = "import"
    try:
        start = time.process_time()
        graph = isa.from_onnx(model, shapes=shapes)
        run.cpu["import"] = time.process_time() - start
        try:
            check_graph(graph, chip)
        except isa.UnsupportedError as exc:
            run.skipped = _one_line(exc)
            return run
        stage, start = "lower", time.process_time()
        program = isa.lower(graph, chip)
        run.cpu["lower"] = time.process_time() - start
        stage, start = "simulate", time.process_time()
        res = sim.execute(program, chip, mode="timing")
        run.cpu["simulate"] = time.process_time() - start
    except Exception as exc:  # noqa: BLE001 - one failing model or chip must not stop the table
        run.failed = f"{stage}: {type(exc).__name__}: {_one_line(exc)}"
        return run
    run.ms, run.cycles, run.instructions = res.seconds * 1e3, res.cycles, res.stats.instructions
    run.top = [(op.name, op.cycles, op.cycles / res.cycles if res.cycles else 0.0) for op in res.stats.slowest(TOP)]
    return run


def _one_line(exc):
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."


def report(run):
    """A run as text: one line, then its top ops."""
    if run.skipped:
        return f"{run.model} on {run.chip}: skipped, {run.skipped}"
    head = f"{run.model} {run.dtype} on {run.chip}"
    if run.failed:
        return f"{head}: FAILED at {run.failed}"
    cpu = ", ".join(f"{k} {v:.2f} s" for k, v in run.cpu.items())
    lines = [f"{head}: {run.ms:.3f} ms simulated ({run.cycles:,} cycles, {run.instructions:,} instructions); CPU: {cpu}"]
    lines += [f"    {name:<40} {cycles:>14,.0f} cycles {share:7.1%}" for name, cycles, share in run.top]
    return "\n".join(lines)


def table(runs):
    header = ("model", "chip", "dtype", "simulated ms", "import CPU-s", "lower CPU-s", "simulate CPU-s", "total CPU-s",
              f"top {TOP} ops by their share of the simulated time")
    rows = [header]
    for r in runs:
        if r.skipped or r.failed:
            rows.append((r.model, r.chip, r.dtype or "-", "skipped" if r.skipped else "FAILED", "", "", "", "",
                         r.skipped or r.failed))
            continue
        cpu = [r.cpu.get(k) for k in ("import", "lower", "simulate")]
        top = ", ".join(f"{name} {share:.1%}" for name, _, share in r.top)
        rows.append((r.model, r.chip, r.dtype, f"{r.ms:.3f}", *(f"{w:.2f}" for w in cpu), f"{sum(cpu):.2f}", top))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    numeric = range(3, 8)
    return "\n".join("  ".join([c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))] + [row[-1]])
                     for row in rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", choices=MODELS, help="only this model (repeatable; default: all)")
    parser.add_argument("--chip", action="append", help="only this shipped chip (repeatable; default: all)")
    parser.add_argument("--dtype", choices=(*onnx_models.DTYPES, "auto"), default="float32",
                        help="the models' dtype; auto: float32 where the chip takes it, else float16 (default: float32)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--size", type=int, help="CNN input height and width (default: 224, YOLOv5s 640)")
    parser.add_argument("--seq", type=int, default=128, help="BERT sequence length (default: 128)")
    parser.add_argument("--file", action="append", help="an ONNX file to run instead of the built models (repeatable)")
    parser.add_argument("--shape", action="append", default=[], help="NAME=D,D,...: the shape of every --file's input NAME (repeatable)")
    args = parser.parse_args(argv)
    loaded = [chips.load(name) for name in args.chip or chips.available()]
    runs, built = [], {}
    if args.file:
        shapes = {k: tuple(int(d) for d in v.split(",")) for k, v in (s.split("=", 1) for s in args.shape)}
        for path in args.file:
            for chip in loaded:
                run = simulate(path, chip, Run(Path(path).name, chip.name, "model's"), shapes)
                runs.append(run)
                print(report(run), flush=True)
        print()
        print(table(runs))
        return 0
    for model in args.model or MODELS:
        for chip in loaded:
            dtype, reason = pick_dtype(chip, model, args.dtype)
            run = Run(model, chip.name, dtype, skipped=reason or "")
            if dtype:
                if dtype not in built:
                    start = time.process_time()
                    built.clear()  # one model in memory at a time (ResNet-50 float32 is 100 MB)
                    built[dtype] = onnx_models.MODELS[model](dtype=dtype, **build_kwargs(model, args))
                    run.cpu["build"] = time.process_time() - start
                simulate(built[dtype], chip, run)
            runs.append(run)
            print(report(run), flush=True)
        built.clear()
    print()
    print(table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
