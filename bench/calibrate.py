"""ResNet-50 simulated against Sophgo's published bmrt_test times, one row per chip, precision
and batch, with the error of each row.

The published figure is sophon-demo's `bmrt_test` "calculate time" of torchvision's ResNet-50
compiled by TPU-MLIR, divided by the batch (sample/ResNet/README.md, section 7.1,
docs/sources.md#sophgo-published-times). The simulated figure is the whole lowered program's
time on the chip (bench/resnet50.py's graph, timing mode, the default placement policy) divided
by the batch. The DDR floor is the least time the lowering's layer groups can take at the DDR
peak: every group loads what it reads from outside (weights included) once and stores what it
makes for later groups once. The method and what the model leaves out: docs/accuracy.md.

    python bench/calibrate.py                                  # print the table
    python bench/calibrate.py --csv docs/accuracy.csv --markdown docs/accuracy-table.md
    python bench/calibrate.py --chip bm1684 --set engines.gdma.latency=50
"""

import argparse
import csv
import re
from dataclasses import dataclass

from resnet50 import resnet50

import isa
import sim
from isa.lower.schedule.fusion import groups
from sim.run import configure

SOURCE = "sophgo/sophon-demo sample/ResNet/README.md @ 04d1ec7f, section 7.1"
PRECISIONS = {"FP32": "float32", "FP16": "float16", "INT8": "int8"}


@dataclass(frozen=True)
class Published:
    """One row of the published table: bmrt_test's calculate time per image."""

    chip: str  # the vendor's name
    sim_chip: str  # the shipped chip that models it
    precision: str  # a key of PRECISIONS
    batch: int
    ms: float  # per image


PUBLISHED = (
    Published("BM1684", "bm1684", "FP32", 1, 6.35),
    Published("BM1684", "bm1684", "INT8", 1, 3.92),
    Published("BM1684", "bm1684", "INT8", 4, 1.14),
    Published("BM1684X", "bm1686", "FP32", 1, 8.84),
    Published("BM1684X", "bm1686", "FP16", 1, 1.57),
    Published("BM1684X", "bm1686", "INT8", 1, 1.07),
    Published("BM1684X", "bm1686", "INT8", 4, 0.79),
)


@dataclass(frozen=True)
class Row:
    published: Published
    ms: float  # simulated, per image
    cycles: int  # simulated, the whole batch
    ddr_bytes: int  # read and written, the whole batch
    floor_ms: float  # the DDR floor (see the module's docstring), per image
    busy: dict  # engine -> share of the run it was busy

    @property
    def error(self):
        """(simulated - published) / published, in percent."""
        return error_percent(self.ms, self.published.ms)


def error_percent(simulated, published):
    return (simulated - published) / published * 100


def floor_bytes(graph, chip, policy, program):
    """DDR bytes the layer groups must move at least: each group's loads and stores of tensors
    whose home is in DDR (every one, unless the policy keeps some on chip or a multi-layer
    group holds it in windows named <tensor>.rows<slot>), once."""
    homes = {b.name: b.region.mem for b in program.bindings} | {b.name: b.mem for b in program.buffers if "/" not in b.name}
    homes |= {m[1]: b.mem for b in program.buffers if (m := re.fullmatch(r"(.+)\.rows\d+", b.name))}
    size = lambda t: graph.tensors[t].nbytes if homes.get(t, "ddr") == "ddr" else 0  # noqa: E731
    return sum(sum(map(size, g.loads)) + sum(map(size, g.stores)) for g in groups(graph, chip, policy) if g.template.name != "view")


def simulate(published, overrides=None):
    """The Row of a published figure: ResNet-50 at its precision and batch on its chip."""
    chip, policy = configure(published.sim_chip, overrides or {})  # chip fields, and policy. keys for the placement policy
    graph = resnet50(PRECISIONS[published.precision], batch=published.batch)
    program = isa.lower(graph, chip, policy)
    res = sim.execute(program, chip, mode="timing")
    s = res.stats
    ddr_per_ms = chip.memories["ddr"].bandwidth * chip.clock_hz / 1e3
    return Row(published, res.seconds * 1e3 / published.batch, res.cycles, s.ddr_read_bytes + s.ddr_write_bytes,
               floor_bytes(graph, chip, policy, program) / ddr_per_ms / published.batch,
               {e: u for e, u in s.utilization.items() if s.busy[e]})


HEADER = ("chip", "precision", "batch", "simulated ms/image", "published ms/image", "error %", "DDR MiB/image",
          "DDR floor ms/image", "engines busy")
TEXT = (0, 1, 8)  # the columns that are not numbers


def cells(row):
    p = row.published
    busy = ", ".join(f"{e} {u:.0%}" for e, u in row.busy.items())
    return (p.chip, p.precision, str(p.batch), f"{row.ms:.2f}", f"{p.ms:.2f}", f"{row.error:+.1f}",
            f"{row.ddr_bytes / p.batch / 2**20:.1f}", f"{row.floor_ms:.2f}", busy)


def text(rows):
    table = [HEADER] + [cells(r) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADER))]
    return "\n".join("  ".join(c.ljust(w) if i in TEXT else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths)))
                     for line in table)


def markdown(rows):
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "|".join("---" if i in TEXT else "---:" for i in range(len(HEADER))) + "|"]
    return "\n".join(lines + ["| " + " | ".join(cells(r)) + " |" for r in rows]) + "\n"


def write_csv(rows, path):
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(HEADER)
        out.writerows(cells(r) for r in rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chip", action="append", help="only this shipped chip's rows (repeatable)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a chip or policy override, as npusim run --set")
    parser.add_argument("--csv", help="write the table as CSV here")
    parser.add_argument("--markdown", help="write the table as a markdown table here")
    args = parser.parse_args()
    overrides = dict(kv.split("=", 1) for kv in args.set)
    wanted = [p for p in PUBLISHED if not args.chip or p.sim_chip in args.chip or p.chip.lower() in args.chip]
    rows = [simulate(p, overrides) for p in wanted]
    print(f"ResNet-50, simulated against bmrt_test calculate time ({SOURCE})")
    print(text(rows))
    if args.csv:
        write_csv(rows, args.csv)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(rows))


if __name__ == "__main__":
    main()
