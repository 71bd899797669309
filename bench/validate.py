"""Every row of the published-times dataset (docs/data/published.csv) simulated: per row the
simulated and the published time of one item (image, clip or example) and the signed error; then
the mean absolute error of the training and of the validation rows and the worst rows.

A row names its network's builder (`path:function` under the repository, with keyword arguments),
which is called with the row's batch and dtype (FP32 float32, FP16 float16, INT8 int8): an ONNX
model is imported with isa.from_onnx, an isa graph is used as it is. An FP16 or INT8 row whose
builder writes float ONNX models is built in float32 and deployed for the row's chip by
isa.quantize (isa/deploy/), as TPU-MLIR's model_deploy compiles the float model. The graph is lowered for the
row's chip with the default placement policy and run in timing mode; the simulated time of one
item is the program's time divided by the batch, as the published bmrt_test times are. A row that
cannot be simulated (a builder without that dtype, an op the chip's table lacks) is listed with
the reason and left out of the means. The split of each row is the dataset's; `--split` prints the
rule that drew it (docs/accuracy.md, "The dataset").

    python bench/validate.py                                   # every row (tens of CPU-minutes)
    python bench/validate.py --network yolov5s --chip bm1684   # a subset
    python bench/validate.py --precision INT8 --split-only train
    python bench/validate.py --csv out/validate.csv            # also write the table
    python bench/validate.py --split                           # the split rule, family by family
    python bench/validate.py --plot docs/images/accuracy.png   # also plot simulated against published
    python bench/validate.py --from-csv out/validate.csv --plot docs/images/accuracy.png  # a table written before
"""

import argparse
import csv
import hashlib
import importlib
import math
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import chips
import isa
import sim
from isa.errors import ConfigError
from sim.run import configure

ROOT = Path(__file__).resolve().parent.parent
DATASET = ROOT / "docs" / "data" / "published.csv"
COLUMNS = ("network", "family", "variant", "vendor_chip", "chip", "precision", "batch", "input_shape", "published_ms", "measures",
           "source", "source_path", "source_commit", "model_file", "builder", "builder_args", "split")
DTYPES = {"FP32": "float32", "FP16": "float16", "INT8": "int8"}
SPLITS = ("train", "validation")
SPLIT_SEED = "21"  # the number, fixed before any row was simulated
CALIBRATED = ("resnet50",)  # families already used for calibration (docs/accuracy.md): training whatever the draw says
BUILDER_ROOTS = ("examples", "bench")  # a builder's module lives under one of these, imported by its dotted path there
WORST = 8


@dataclass(frozen=True)
class Row:
    """One published figure, as the dataset gives it."""

    line: int  # in the CSV, for messages
    network: str
    family: str
    chip: str  # npusim's chip name
    precision: str  # a key of DTYPES
    batch: int
    input_shape: tuple  # without the batch
    published_ms: float  # one item
    split: str
    builder: str  # path:function
    builder_args: dict
    fields: dict = field(repr=False, compare=False)  # every column, as text


def load(path=DATASET):
    """The dataset's rows, each checked: every column present, a known chip and precision, a
    positive batch and time, a split of `train` or `validation`, a source, a builder path:function.
    Errors are ConfigError naming the file, line and column."""
    path = Path(path)
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
            if missing:
                raise ConfigError(f"{path}: columns {', '.join(missing)} missing (has {', '.join(reader.fieldnames or ())})")
            return [_row(path, i, fields) for i, fields in enumerate(reader, 2)]
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the dataset ({exc.strerror or exc})") from None


def _row(path, line, fields):
    def bad(column, what):
        return ConfigError(f"{path} line {line}, column {column}: {what}, got {fields.get(column)!r}")

    for column in COLUMNS:
        if not (fields.get(column) or "").strip() and column != "builder_args":
            raise bad(column, "empty")
    if fields["chip"] not in chips.available():
        raise bad("chip", f"not a shipped chip ({', '.join(chips.available())})")
    if fields["precision"] not in DTYPES:
        raise bad("precision", f"expected one of {', '.join(DTYPES)}")
    if fields["split"] not in SPLITS:
        raise bad("split", f"expected one of {', '.join(SPLITS)}")
    if not re.fullmatch(r"[\w/.-]+\.py:\w+", fields["builder"]):
        raise bad("builder", "expected path/to/module.py:function")
    try:
        batch, ms = int(fields["batch"]), float(fields["published_ms"])
        shape = tuple(int(d) for d in fields["input_shape"].split("x"))
    except ValueError:
        raise bad("batch, published_ms or input_shape", "expected an integer, a number and dimensions joined by x") from None
    if batch < 1 or not ms > 0 or not math.isfinite(ms) or min(shape) < 1:
        raise bad("batch, published_ms or input_shape", "must be positive")
    try:
        args = dict(_arg(kv) for kv in fields["builder_args"].split(";") if kv.strip())
    except ValueError:
        raise bad("builder_args", "expected key=value pairs joined by ;") from None
    return Row(line, fields["network"], fields["family"], fields["chip"], fields["precision"], batch, shape, ms, fields["split"],
               fields["builder"], args, dict(fields))


def _arg(pair):
    key, value = (s.strip() for s in pair.split("=", 1))
    for convert in (int, float):
        try:
            return key, convert(value)
        except ValueError:
            pass
    return key, {"True": True, "False": False}.get(value, value)


def draw(family):
    """The split rule: a family is validation when the first 8 bytes of sha256("21:<family>"),
    read as a fraction of 2^64, are below 1/3, else training; a calibrated family (ResNet-50) is
    training. Every network of a family (YOLOv8s detect, seg and pose share one backbone) falls on
    the same side, and adding a family moves no other."""
    if family in CALIBRATED:
        return "train"
    return "validation" if draw_value(family) < 1 / 3 else "train"


def draw_value(family):
    return int.from_bytes(hashlib.sha256(f"{SPLIT_SEED}:{family}".encode()).digest()[:8], "big") / 2**64


def builder(spec):
    """The function a `path/to/module.py:function` names, its module imported from examples/ or bench/."""
    path, name = spec.split(":")
    parts = Path(path).with_suffix("").parts
    if parts[0] not in BUILDER_ROOTS:
        raise ConfigError(f"builder {spec}: the module must be under {' or '.join(BUILDER_ROOTS)}/")
    examples, bench = (str(ROOT / root) for root in BUILDER_ROOTS)
    if sys.path[0] != examples:  # first: bench/ has an onnx_models.py too, and the builders import examples' one
        sys.path[:] = [examples] + [p for p in sys.path if p != examples]
    if bench not in sys.path:
        sys.path.append(bench)
    try:
        fn = getattr(importlib.import_module(".".join(parts[1:])), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"builder {spec}: {exc}") from None
    return fn


# The INT8 rows' calibration: every tensor's threshold is this. Timing does not depend on it (the
# weights are random too): a threshold sets a scale, not which instructions run (docs/quantize.md).
TIMING_THRESHOLD = 8.0


def graph(row):
    """The row's network as an isa graph, checked against the row's input shape: an FP32 row's
    builder at the row's batch (an ONNX model imported); an FP16 or INT8 row's builder in float32,
    deployed for the row's chip by isa.quantize as TPU-MLIR's model_deploy does, unless the builder
    builds the precision itself (an isa graph: bench/resnet50.py, the TPU v1 applications)."""
    fn = builder(row.builder)
    dtype = DTYPES[row.precision]
    model = None
    if dtype != "float32":
        try:
            model = fn(batch=row.batch, dtype="float32", **row.builder_args)
        except ValueError:  # a builder of one precision only (the TPU v1's int8 applications)
            model = None
        if isinstance(model, isa.Graph):
            model = None
    if model is not None:
        calibration = isa.deploy.Table(default=TIMING_THRESHOLD) if dtype == "int8" else None
        g = isa.from_onnx(model, quantize=dtype, chip=row.chip, calibration=calibration)
    else:
        model = fn(batch=row.batch, dtype=dtype, **row.builder_args)
        g = model if isinstance(model, isa.Graph) else isa.from_onnx(model)
    shapes = [g.tensors[name].shape for name in g.inputs]
    want = (row.batch, *row.input_shape)
    if shapes[:1] != [want]:
        raise ConfigError(f"line {row.line} ({row.network}): the builder's input is {shapes}, the dataset says {want}")
    return g


@dataclass
class Outcome:
    row: Row
    ms: float = None  # simulated, one item
    reason: str = ""  # why it was not simulated
    cpu_s: float = 0.0

    @property
    def error(self):
        """(simulated - published) / published, in percent."""
        return (self.ms - self.row.published_ms) / self.row.published_ms * 100


def simulate(rows, overrides=None, progress=None):
    """An Outcome per row, in the rows' order. The rows that share network, precision and batch run
    one after the other on one graph, built once."""
    def key(row):  # a deployed precision depends on the chip's op table
        return row.builder, tuple(sorted(row.builder_args.items())), row.batch, row.precision, row.precision != "FP32" and row.chip

    order = sorted(range(len(rows)), key=lambda i: (key(rows[i]), i))
    outcomes, built = [None] * len(rows), {}
    for i in order:
        row, start = rows[i], time.process_time()
        out = Outcome(row)
        try:
            if key(row) not in built:
                built.clear()  # one network in memory at a time
                built[key(row)] = graph(row)
            chip, policy = configure(row.chip, overrides or {})
            res = sim.execute(isa.lower(built[key(row)], chip, policy), chip, mode="timing")
            out.ms = res.seconds * 1e3 / row.batch
        except Exception as exc:  # noqa: BLE001 - a row that cannot run is reported, the others go on
            out.reason = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        out.cpu_s = time.process_time() - start
        outcomes[i] = out
        if progress:
            progress(out)
    return outcomes


HEADER = ("network", "chip", "precision", "batch", "split", "simulated ms", "published ms", "error %", "note")


def cells(out):
    r = out.row
    if out.ms is None:
        return (r.network, r.chip, r.precision, str(r.batch), r.split, "-", f"{r.published_ms:.4g}", "-", out.reason)
    return (r.network, r.chip, r.precision, str(r.batch), r.split, f"{out.ms:.4g}", f"{r.published_ms:.4g}", f"{out.error:+.1f}", "")


def table(outcomes):
    lines = [HEADER] + [cells(o) for o in outcomes]
    widths = [max(len(line[i]) for line in lines) for i in range(len(HEADER) - 1)]
    numeric = range(3, 8)
    return "\n".join("  ".join([c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths))] + [line[-1]])
                     for line in lines)


# The targets (issue 21): each split's mean absolute error at most this, percent.
TARGET_MAE = {"train": 10.0, "validation": 12.0}
TARGET_VALIDATION_ROW = 30.0  # every validation row within +-this
TARGET_RESNET50_ROW = 15.0  # every ResNet-50 row within +-this
RESNET50 = "resnet50"


def _mae(outcomes):
    return sum(abs(o.error) for o in outcomes) / len(outcomes)


def summary(outcomes):
    """Per split: rows simulated of all, networks, mean absolute error, and per chip; the worst
    rows; then each target of the issue, met or not, per chip."""
    lines = []
    for split in SPLITS:
        mine = [o for o in outcomes if o.row.split == split]
        done = [o for o in mine if o.ms is not None]
        if not mine:
            continue
        nets = len({o.row.network for o in done})
        mae = f"mean absolute error {_mae(done):.1f}%" if done else "no row simulated"
        lines.append(f"{split}: {len(done)} of {len(mine)} rows simulated ({nets} networks), {mae}")
        for chip in sorted({o.row.chip for o in done}):
            rows = [o for o in done if o.row.chip == chip]
            nets = len({o.row.network for o in rows})
            lines.append(f"  {chip}: {len(rows)} rows ({nets} networks), mean absolute error {_mae(rows):.1f}%")
    done = sorted((o for o in outcomes if o.ms is not None), key=lambda o: -abs(o.error))
    if done:
        lines.append(f"worst rows ({min(WORST, len(done))} of {len(done)}):")
        lines += [f"  {o.error:+7.1f}%  {o.row.network} {o.row.chip} {o.row.precision} b{o.row.batch} ({o.row.split})"
                  for o in done[:WORST]]
    lines += targets(outcomes)
    skipped = {}
    for o in outcomes:
        if o.ms is None:
            skipped.setdefault(o.reason.split(":")[0] + ": " + _gist(o.reason), []).append(o)
    if skipped:
        lines.append("not simulated:")
        lines += [f"  {len(v):3d} rows  {reason}" for reason, v in sorted(skipped.items(), key=lambda kv: -len(kv[1]))]
    return "\n".join(lines)


def targets(outcomes):
    """The issue's targets per chip, met or not, over the rows simulated."""
    done = [o for o in outcomes if o.ms is not None]
    lines = []
    for chip in sorted({o.row.chip for o in done}):
        mine = [o for o in done if o.row.chip == chip]
        checks = []
        for split in SPLITS:
            rows = [o for o in mine if o.row.split == split]
            if rows:
                checks.append((f"{split} mean absolute error {_mae(rows):.1f}% <= {TARGET_MAE[split]:g}%", _mae(rows) <= TARGET_MAE[split]))
        held = [o for o in mine if o.row.split == "validation"]
        if held:
            within = sum(abs(o.error) <= TARGET_VALIDATION_ROW for o in held)
            checks.append((f"validation rows within +-{TARGET_VALIDATION_ROW:g}%: {within} of {len(held)}", within == len(held)))
        resnet = [o for o in mine if o.row.network == RESNET50]
        if resnet:
            errs = ", ".join(f"{o.error:+.1f}" for o in resnet)
            ok = all(abs(o.error) <= TARGET_RESNET50_ROW for o in resnet)
            checks.append((f"ResNet-50 rows within +-{TARGET_RESNET50_ROW:g}%: {errs}", ok))
        lines.append(f"targets, {chip}:")
        lines += [f"  {'met    ' if ok else 'not met'}  {text}" for text, ok in checks]
    return lines


def _gist(reason):
    """A reason without the op and tensor names that differ from row to row, to group the rows."""
    text = reason.split(":", 1)[1] if ":" in reason else reason
    return re.sub(r"op \S+: ", "", text).strip()[:160]


def write_csv(outcomes, path):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(HEADER)
        out.writerows(cells(o) for o in outcomes)


BAND = 0.20  # the plot's shaded band: within +-20% of the published time


def plot(outcomes, path):
    """Simulated against published time per item, one log-log panel per chip, training and
    validation rows in two colours, the diagonal and its +-20% band."""
    from traces.plots.figure import new_figure, save

    simulated = [o for o in outcomes if o.ms is not None]
    names = sorted({o.row.chip for o in simulated})
    if not names:
        raise ConfigError("--plot: no row was simulated")
    fig = new_figure(4.2)
    for k, name in enumerate(names):
        ax = fig.add_subplot(1, len(names), k + 1)
        mine = [o for o in simulated if o.row.chip == name]
        values = [v for o in mine for v in (o.ms, o.row.published_ms)]
        low, high = min(values) / 1.5, max(values) * 1.5
        ax.fill_between([low, high], [low * (1 - BAND), high * (1 - BAND)], [low * (1 + BAND), high * (1 + BAND)],
                        color="0.88", label="within ±20%")
        ax.plot([low, high], [low, high], color="0.5", linewidth=0.8)
        for split, colour in (("train", "tab:blue"), ("validation", "tab:orange")):
            pts = [o for o in mine if o.row.split == split]
            if pts:
                ax.scatter([o.row.published_ms for o in pts], [o.ms for o in pts], s=14, color=colour, label=f"{split} ({len(pts)})",
                           zorder=3)
        ax.set(xscale="log", yscale="log", xlim=(low, high), ylim=(low, high), title=name,
               xlabel="published ms per item", ylabel="simulated ms per item" if k == 0 else None)
        ax.legend(fontsize=8, loc="upper left")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save(fig, path)


def read_csv(path, rows):
    """Outcomes from a table write_csv wrote, matched to the dataset's rows by network, chip,
    precision and batch (rows the table lacks are left out)."""
    index = {(r.network, r.chip, r.precision, str(r.batch)): r for r in rows}
    out = []
    try:
        with open(path, newline="") as f:
            for line in csv.DictReader(f):
                row = index.get((line["network"], line["chip"], line["precision"], line["batch"]))
                if row is not None:
                    ms = line["simulated ms"]
                    out.append(Outcome(row, float(ms) if ms != "-" else None, line["note"]))
    except (OSError, KeyError, ValueError) as exc:
        raise ConfigError(f"{path}: not a table bench/validate.py --csv wrote ({exc})") from None
    return out


def print_split(rows):
    families = sorted({r.family for r in rows})
    print("split rule: sha256('21:<family>') / 2^64 < 1/3 -> validation; calibrated families (resnet50) -> train")
    for family in sorted(families, key=draw_value):
        nets = sorted({r.network for r in rows if r.family == family})
        recorded = sorted({r.split for r in rows if r.family == family})
        print(f"  {draw_value(family):.3f}  {family:<12} {draw(family):<10} recorded {'/'.join(recorded):<10} {', '.join(nets)}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default=str(DATASET), help="the CSV (default: docs/data/published.csv)")
    parser.add_argument("--network", action="append", help="only this network's rows (repeatable)")
    parser.add_argument("--chip", action="append", help="only this chip's rows (repeatable)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a chip or policy override, as npusim run --set")
    parser.add_argument("--csv", help="write the per-row table as CSV here")
    parser.add_argument("--precision", action="append", choices=tuple(DTYPES), help="only this precision's rows (repeatable)")
    parser.add_argument("--split-only", choices=SPLITS, help="only this split's rows")
    parser.add_argument("--split", action="store_true", help="print the split rule's draw per family and stop")
    parser.add_argument("--plot", help="write a PNG of simulated against published time per chip here")
    parser.add_argument("--from-csv", help="take the outcomes from a table --csv wrote instead of simulating")
    args = parser.parse_args(argv)
    try:
        rows = load(args.dataset)
        if args.split:
            print_split(rows)
            return 0
        overrides = dict(kv.split("=", 1) for kv in args.set if "=" in kv)
        if len(overrides) != len(args.set):
            raise ConfigError(f"--set {next(kv for kv in args.set if '=' not in kv)!r}: expected KEY=VALUE")
        for name, wanted, known in (("--network", args.network, {r.network for r in rows}), ("--chip", args.chip, {r.chip for r in rows})):
            unknown = set(wanted or ()) - known
            if unknown:
                raise ConfigError(f"{name} {', '.join(sorted(unknown))}: no such rows (the dataset has {', '.join(sorted(known))})")
        rows = [r for r in rows if (not args.network or r.network in args.network) and (not args.chip or r.chip in args.chip)
                and (not args.precision or r.precision in args.precision) and (not args.split_only or r.split == args.split_only)]
    except isa.SimError as exc:
        print(f"bench/validate.py: {exc}", file=sys.stderr)
        return 2
    print(f"{len(rows)} rows of {args.dataset}", flush=True)
    try:
        if args.from_csv:
            outcomes = [o for o in read_csv(args.from_csv, rows) if o.row in rows]
        else:
            outcomes = simulate(rows, overrides, progress=lambda o: print(f"  {'  '.join(cells(o))}  ({o.cpu_s:.0f} CPU-s)", flush=True))
        print()
        print(table(outcomes))
        print()
        print(summary(outcomes))
        if args.csv:
            write_csv(outcomes, args.csv)
        if args.plot:
            plot(outcomes, args.plot)
            print(f"wrote {args.plot}")
    except isa.SimError as exc:
        print(f"bench/validate.py: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
