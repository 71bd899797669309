"""Fits the chip parameters marked fitted on the training rows of the published-times dataset
(docs/data/published.csv), and writes each chip's accuracy on its validation rows into its YAML.

A fitted value is tagged in its YAML comment with the rows it is fitted on and the values tried:

    fill_drain: 32  # [F rows=resnet50 grid=16,24,28,32,40] cycles to start and drain ...

`rows` are selectors joined by commas, each network[:precision[:batch]] (resnet50:INT8:4), taken
among the chip's rows; a selector reaching a validation row is an error, as validation rows never
choose a parameter. The fit is coordinate descent over the chip's fitted values in file order:
each value in turn takes the grid value whose rows' mean absolute error is least (the others
held), ties to the value nearer the current one, then the earlier in the grid; passes repeat
until none moves (at most --passes). It is deterministic: the simulator's cycles are.

The accuracy is then measured on the chip's validation rows (every one the simulator can run)
and written as the YAML's `accuracy:` block, which chips.load validates and `npusim run` prints.

    python bench/fit.py --chip bm1686                  # fit, measure, write chips/bm1686.yaml
    python bench/fit.py --chip bm1686 --dry-run        # print what would change
    python bench/fit.py --chip bm1686 --no-accuracy    # fit only
    python bench/fit.py --chip bm1686 --no-fit         # measure the accuracy only
    python bench/fit.py --chip bm1686 --no-fit --from-csv out/validate.csv  # ... from a bench/validate.py table
    python bench/fit.py --chip bm1684 --only engines.tiu.matrix.fill_drain  # one value
    python bench/fit.py --list                         # every fitted value and its rows
"""

import argparse
import re
import sys
import time
from dataclasses import dataclass

import validate

import chips
import isa
import sim
from isa.errors import ConfigError
from sim.run import configure

TAG = re.compile(r"\[F rows=(?P<rows>\S+) grid=(?P<grid>\S+)\]")
KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[\w.-]+):(?P<value>[^#]*?)\s*(?:#(?P<comment>.*))?$")
ACCURACY_HEAD = "accuracy:"


@dataclass(frozen=True)
class Parameter:
    """One fitted value of a chip YAML: its dotted key (as --set takes it), its line, its value
    as written, the row selectors and the grid."""

    chip: str
    key: str
    line: int  # 0-based, in the file
    value: str
    rows: tuple
    grid: tuple


def yaml_path(chip):
    return chips.SHIPPED_DIR / f"{chip}.yaml"


def parameters(chip, text=None):
    """The chip's fitted values in file order, read from its YAML's [F ...] tags."""
    path = yaml_path(chip)
    lines = (path.read_text() if text is None else text).splitlines()
    stack, found = [], []
    for i, line in enumerate(lines):
        m = KEY_LINE.match(line)
        if not m:
            continue
        indent = len(m["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, m["key"]))
        tag = TAG.search(m["comment"] or "")
        if tag:
            key = ".".join(k for _, k in stack)
            if not m["value"].strip():
                raise ConfigError(f"{path}:{i + 1}: {key}: a fitted value must be a scalar on the tagged line")
            grid = tuple(tag["grid"].split(","))
            if m["value"].strip() not in grid:
                raise ConfigError(f"{path}:{i + 1}: {key}: its value {m['value'].strip()} is not in its grid {tag['grid']}")
            found.append(Parameter(chip, key, i, m["value"].strip(), tuple(tag["rows"].split(",")), grid))
    return found


def select(rows, chip, selectors, where=""):
    """The chip's training rows the selectors name; a selector naming no row, or a validation row,
    is a ConfigError."""
    chosen = []
    for sel in selectors:
        parts = sel.split(":")
        if not 1 <= len(parts) <= 3:
            raise ConfigError(f"{where}row selector {sel!r}: expected network[:precision[:batch]]")

        def matches(r, parts=parts):
            return r.chip == chip and r.network == parts[0] and (len(parts) < 2 or r.precision == parts[1]) and \
                (len(parts) < 3 or str(r.batch) == parts[2])

        mine = [r for r in rows if matches(r)]
        if not mine:
            raise ConfigError(f"{where}row selector {sel!r}: no {chip} row of the dataset matches it")
        held_out = [r for r in mine if r.split != "train"]
        if held_out:
            raise ConfigError(f"{where}row selector {sel!r}: names validation rows ({held_out[0].network} line {held_out[0].line}); "
                              "a parameter is fitted on training rows only")
        chosen += [r for r in mine if r not in chosen]
    return chosen


def errors(rows, points, log=None):
    """errors[p][r]: the signed percent error of row r with the overrides points[p]; None where
    the row cannot be simulated. Each row's graph is built once for every point."""
    out = [[None] * len(rows) for _ in points]
    for r, row in enumerate(rows):
        start = time.process_time()
        try:
            g = validate.graph(row)
        except isa.SimError as exc:
            if log:
                log(f"  {row.network} {row.precision} b{row.batch}: not simulated ({exc})")
            continue
        for p, point in enumerate(points):
            chip, policy = configure(row.chip, point)
            ms = sim.execute(isa.lower(g, chip, policy), chip, mode="timing").seconds * 1e3 / row.batch
            out[p][r] = (ms - row.published_ms) / row.published_ms * 100
        if log:
            log(f"  {row.network} {row.chip} {row.precision} b{row.batch}: "
                + " ".join(f"{e:+.1f}" for e in (o[r] for o in out)) + f"  ({time.process_time() - start:.0f} CPU-s)")
    return out


def mae(errs):
    done = [abs(e) for e in errs if e is not None]
    return sum(done) / len(done) if done else float("inf")


def best(param, scores, current):
    """The grid value of least score; ties to the one nearer the current value, then the earlier."""
    def distance(v):
        try:
            return abs(float(v) - float(current))
        except ValueError:
            return 0.0 if v == current else 1.0

    order = sorted(range(len(param.grid)), key=lambda i: (round(scores[i], 6), distance(param.grid[i]), i))
    return param.grid[order[0]]


def fit(chip, params, rows, passes=3, log=None):
    """{key: value} after coordinate descent over `params` (module docstring), each on the rows
    its selectors name."""
    values = {p.key: p.value for p in params}
    for n in range(passes):
        moved = False
        for p in params:
            mine = select(rows, chip, p.rows, f"{p.key}: ")
            points = [{**values, p.key: v} for v in p.grid]
            if log:
                log(f"pass {n + 1}, {p.key} over {', '.join(p.grid)} on {len(mine)} rows:")
            table = errors(mine, points, log)
            scores = [mae(errs) for errs in table]
            chosen = best(p, scores, values[p.key])
            if log:
                log(f"  mean abs error {' / '.join(f'{s:.1f}' for s in scores)}% -> {chosen}")
            moved |= chosen != values[p.key]
            values[p.key] = chosen
        if not moved or len(params) == 1:
            break
    return values


def measure(chip, rows, values=None, log=None, table=None):
    """The chip's accuracy block from its validation rows with the fitted `values` ({key: value}):
    networks, rows, mean absolute error, worst row; None when no validation row of the chip can
    be simulated. With `table` (a CSV bench/validate.py --csv wrote at these values) the rows'
    outcomes are read from it instead of simulated again."""
    mine = [r for r in rows if r.chip == chip and r.split == "validation"]
    if table:
        outcomes = [o for o in validate.read_csv(table, mine) if o.row in mine]
        if len(outcomes) != len(mine):
            raise ConfigError(f"--from-csv {table}: has {len(outcomes)} of {chip}'s {len(mine)} validation rows")
    else:
        outcomes = validate.simulate(mine, values, progress=log and (lambda o: log("  " + "  ".join(validate.cells(o)))))
    done = [o for o in outcomes if o.ms is not None]
    if not done:
        return None
    worst = max(done, key=lambda o: abs(o.error))
    return {"networks": len({o.row.network for o in done}), "rows": len(done),
            "mean_error": round(sum(abs(o.error) for o in done) / len(done), 1), "worst_error": round(worst.error, 1),
            "worst_row": f"{worst.row.network} {worst.row.precision} b{worst.row.batch}"}


def with_values(text, params, values):
    """The YAML text with each fitted value replaced, its comment kept."""
    lines = text.splitlines(keepends=True)
    for p in params:
        old = lines[p.line]
        m = KEY_LINE.match(old.rstrip("\n"))
        start, end = m.span("value")
        new = f" {values[p.key]}"
        if m["comment"] is None:
            lines[p.line] = old[:start] + new + old[end:].lstrip(" ")
        else:  # the comment stays in its column where the new value leaves room
            hash_at = m.start("comment") - 1
            lines[p.line] = old[:start] + new + " " * max(hash_at - start - len(new), 1) + old[hash_at:]
    return "".join(lines)


def with_accuracy(text, block):
    """The YAML text with its `accuracy:` block (top level, at the end) replaced by `block`."""
    lines = text.splitlines(keepends=True)
    head = next((i for i, line in enumerate(lines) if line.startswith(ACCURACY_HEAD)), None)
    if head is not None:
        end = head + 1
        while end < len(lines) and (lines[end].startswith((" ", "#")) or not lines[end].strip()):
            end += 1
        top = head
        while top > 0 and lines[top - 1].startswith("#"):
            top -= 1
        if lines[top].startswith("# accuracy:"):  # its comment, as written below
            head = top
        lines[head:end] = []
    while lines and not lines[-1].strip():
        lines.pop()
    if block is None:
        return "".join(lines)
    text = "".join(lines).rstrip("\n") + "\n\n"
    return text + (
        "# accuracy: written by bench/fit.py, the chip's validation rows of docs/data/published.csv (networks not\n"
        "# used to fit anything): how many were simulated, their mean absolute error and the worst row (percent).\n"
        f"{ACCURACY_HEAD}\n"
        f"  networks: {block['networks']}\n"
        f"  rows: {block['rows']}\n"
        f"  mean_error: {block['mean_error']}%\n"
        f"  worst_error: {block['worst_error']:+}%\n"
        f"  worst_row: {block['worst_row']}\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chip", action="append", help="only this chip (repeatable; default: every chip with fitted values)")
    parser.add_argument("--dataset", default=str(validate.DATASET), help="the CSV (default: docs/data/published.csv)")
    parser.add_argument("--no-fit", action="store_true", help="keep the fitted values; measure the accuracy only")
    parser.add_argument("--no-accuracy", action="store_true", help="fit only; leave the accuracy block as it is")
    parser.add_argument("--only", action="append", help="fit only this dotted key (repeatable); the others keep their values")
    parser.add_argument("--passes", type=int, default=3, help="coordinate descent passes at most (default 3)")
    parser.add_argument("--dry-run", action="store_true", help="print the new values; write nothing")
    parser.add_argument("--list", action="store_true", help="print every fitted value with its rows and grid, and stop")
    parser.add_argument("--from-csv", help="with --no-fit: the accuracy from a table bench/validate.py --csv wrote at the present values")
    args = parser.parse_args(argv)
    log = lambda text: print(text, flush=True)  # noqa: E731
    try:
        if args.from_csv and not args.no_fit:
            raise ConfigError("--from-csv: the table holds the outcomes at the present values, so it takes --no-fit")
        rows = validate.load(args.dataset)
        names = args.chip or [c for c in chips.available() if parameters(c)]
        for chip in names:
            chips.load(chip)  # a known chip, its YAML valid
            path, params = yaml_path(chip), parameters(chip)
            if args.list:
                for p in params:
                    n = len(select(rows, chip, p.rows))
                    print(f"{chip} {p.key} = {p.value}: rows {', '.join(p.rows)} ({n}); grid {', '.join(p.grid)}")
                continue
            text, values = path.read_text(), {p.key: p.value for p in params}
            fitted = [p for p in params if not args.only or p.key in args.only]
            if fitted and not args.no_fit:
                values |= fit(chip, fitted, rows, args.passes, log)
                log(f"{chip}: " + ", ".join(f"{k} = {v}" for k, v in values.items()))
                text = with_values(text, params, values)
            if not args.no_accuracy:
                log(f"{chip}: validation rows")
                block = measure(chip, rows, {p.key: values[p.key] for p in params}, log, args.from_csv)
                text = with_accuracy(text, block)
                log(f"{chip}: accuracy {block}")
            if args.dry_run:
                log(f"{chip}: --dry-run, {path} unchanged")
            else:
                path.write_text(text)
                chips._read_shipped.cache_clear()
                chips.load(chip)  # what was written loads
                log(f"wrote {path}")
    except isa.SimError as exc:
        print(f"bench/fit.py: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
