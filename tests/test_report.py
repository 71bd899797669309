"""`npusim report` and `npusim compare`: they read back what `npusim run --trace` wrote, print the
summary, the per-op table and the side-by-side comparison, write the CSV files, and fail in one
line on a file that is not an npusim trace."""

import io
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

import chips
import sim
import traces
from isa import graphfile
from sim.cli import main
from traces.text import human_bytes

MLP = Path(__file__).resolve().parents[1] / "examples" / "mlp.yaml"
SLOW_DDR = "memories.ddr.bandwidth=16GB/s"


def cli(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_line_error(rc, out, err, *fragments):
    assert rc == 1, (rc, out, err)
    assert out == "" and len(err.splitlines()) == 1, err
    assert err.startswith("npusim: error: ") and "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, err


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The demo MLP on bm1684 at 32 GB/s (A) and 16 GB/s (B) DDR: their traces and CSV files as
    `npusim run` wrote them, and the Python API's results for the same runs."""
    d = tmp_path_factory.mktemp("report")
    gf = graphfile.load(MLP)
    results, paths = {}, {}
    for name, overrides in (("a", []), ("b", ["--set", SLOW_DDR])):
        paths[name] = d / f"{name}.json"
        argv = ["run", str(MLP), "--chip", "bm1684", "--mode", "timing", "--trace", str(paths[name]),
                "--csv", str(d / f"{name}_csv"), *overrides]
        assert main(argv) == 0
        chip = chips.load("bm1684", dict(pair.split("=") for pair in overrides[1:]))
        results[name] = sim.run(gf.graph, chip, mode="timing")
    return d, paths, results


def test_report_prints_the_summary_of_the_saved_run(capsys, runs):
    _, paths, results = runs
    capsys.readouterr()
    rc, out, err = cli(capsys, "report", paths["a"])
    assert rc == 0 and err == ""
    s = results["a"].stats
    lines = out.splitlines()
    assert lines[0] == f"bm1684: {s.cycles:,} cycles = {s.seconds * 1e6:,.2f} us at 550 MHz, {s.instructions:,} instructions"
    for engine, busy in s.busy.items():
        assert any(re.fullmatch(rf"\s+{engine}\s+[\d.]+% busy\s+\({busy:,.0f} cycles\)", line) for line in lines), out
    assert f"ddr: read {human_bytes(s.ddr_read_bytes)}, write {human_bytes(s.ddr_write_bytes)}" in lines
    assert any(line.split()[:3] == ["lmem", *human_bytes(s.peak_bytes["lmem"]).split()] for line in lines)
    assert "slowest ops:" not in lines  # the op table replaces it
    assert out.rstrip("\n").endswith(traces.format_ops(s, 20))


def test_report_op_table_lists_the_top_ops(capsys, runs):
    _, paths, results = runs
    rc, out, _ = cli(capsys, "report", paths["a"], "--top", "3")
    assert rc == 0
    s = results["a"].stats
    table = out.splitlines()[out.splitlines().index(f"ops by time (3 of {len(s.ops)}):") + 2:]
    assert [row.split()[0] for row in table] == [op.name for op in s.slowest(3)]
    fc1 = s.ops["fc1"]
    assert table[0].split()[:4] == ["fc1", f"{fc1.cycles:,.0f}", f"{fc1.cycles / s.cycles:.1%}", f"{fc1.span:,.0f}"]
    assert table[0].split()[-2:] == [f"{fc1.intensity:,.2f}", f"{fc1.achieved / 1e9:,.2f}"]
    assert fc1.ops == 2 * 64 * 512 * 512  # the demo's first layer: x (64 x 512) @ w1 (512 x 512)


def test_report_writes_the_csv_files_run_wrote(capsys, tmp_path, runs):
    d, paths, _ = runs
    rc, out, err = cli(capsys, "report", paths["b"], "--csv", tmp_path / "csv")
    assert rc == 0, err
    for name in ("events.csv", "ops.csv"):
        assert f"wrote {tmp_path / 'csv' / name}" in out.splitlines()
        assert (tmp_path / "csv" / name).read_text() == (d / "b_csv" / name).read_text()


def test_compare_shows_the_two_runs_and_the_cycle_ratio(capsys, runs):
    _, paths, results = runs
    rc, out, err = cli(capsys, "compare", paths["a"], paths["b"], "--top", "4")
    assert rc == 0 and err == ""
    a, b = results["a"].stats, results["b"].stats
    assert b.cycles > 1.5 * a.cycles  # half the DDR bandwidth on a DDR-bound run
    rows = {re.split(r"\s{2,}", line.strip())[0]: re.split(r"\s{2,}", line.strip())[1:] for line in out.splitlines() if line.strip()}
    assert rows["A = " + str(paths["a"])] == [] and rows["B = " + str(paths["b"])] == []
    assert rows["cycles"] == [f"{a.cycles:,}", f"{b.cycles:,}", f"{b.cycles / a.cycles:.2f}x"]
    assert rows["time"][2] == f"{b.cycles / a.cycles:.2f}x"
    assert rows["busy gdma"] == [f"{a.busy['gdma']:,.0f} ({a.utilization['gdma']:.1%})",
                                 f"{b.busy['gdma']:,.0f} ({b.utilization['gdma']:.1%})",
                                 f"{b.busy['gdma'] / a.busy['gdma']:.2f}x"]
    assert rows["busy tiu"][2] == "1.00x"  # the compute did not change
    assert rows["ddr read"] == [human_bytes(a.ddr_read_bytes)] * 2 + ["1.00x"]
    assert rows["peak lmem"] == [human_bytes(a.peak_bytes["lmem"])] * 2 + ["1.00x"]
    changed = out.splitlines()[out.splitlines().index(f"ops whose time changed most (4 of {len(a.ops)}):") + 2:]
    growth = sorted(a.ops, key=lambda name: -abs(b.ops[name].cycles - a.ops[name].cycles))[:4]
    assert [line.split()[0] for line in changed] == growth
    first = a.ops[growth[0]], b.ops[growth[0]]
    assert changed[0].split()[1:] == [f"{first[0].cycles:,.0f}", f"{first[1].cycles:,.0f}",
                                      f"{first[1].cycles / first[0].cycles:.2f}x", f"{first[1].cycles - first[0].cycles:+,.0f}"]


def test_compare_of_runs_on_different_chips(capsys, tmp_path, runs):
    _, paths, _ = runs
    other = tmp_path / "generic.json"
    assert main(["run", str(MLP), "--chip", "generic", "--mode", "timing", "--trace", str(other)]) == 0
    capsys.readouterr()
    rc, out, _ = cli(capsys, "compare", paths["a"], other)
    assert rc == 0
    lines = out.splitlines()
    assert re.split(r"\s{2,}", lines[3].strip())[:3] == ["chip", "bm1684", "generic"]
    # engines of either chip appear, '-' where a chip has none
    generic = chips.load("generic")
    for engine in generic.engines:
        row = next(line for line in lines if line.startswith(f"busy {engine} "))
        assert re.split(r"\s{2,}", row)[1] == "-"


@pytest.mark.parametrize("content, fragment", [
    (None, "cannot read"),
    ("name: mlp\n", "not a JSON file"),
    ('{"traceEvents": []}', "not an npusim trace"),
    ('{"npusim": {"format": 1}}', "damaged"),
], ids=["missing", "yaml", "other-trace", "damaged"])
def test_bad_trace_files_are_one_line_errors(capsys, tmp_path, runs, content, fragment):
    _, paths, _ = runs
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    for argv in (["report", bad], ["compare", paths["a"], bad], ["compare", bad, paths["a"]]):
        rc, out, err = cli(capsys, *argv)
        assert_one_line_error(rc, out, err, "InputError", str(bad), fragment)


def test_negative_top_is_a_config_error(capsys, runs):
    _, paths, _ = runs
    rc, out, err = cli(capsys, "report", paths["a"], "--top", "-1")
    assert_one_line_error(rc, out, err, "ConfigError", "--top -1")


class _Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("command", ["report", "compare"])
def test_the_tables_fit_the_terminal_and_wide_prints_whole_rows(capsys, monkeypatch, runs, command):
    _, paths, _ = runs
    argv = [command, str(paths["a"])] + ([str(paths["b"])] if command == "compare" else [])
    rc, piped, _ = cli(capsys, *argv)
    assert rc == 0 and max(map(len, piped.splitlines())) > 60
    for wide in ([], ["--wide"]):
        terminal = _Terminal()
        monkeypatch.setattr(sys, "stdout", terminal)
        monkeypatch.setenv("COLUMNS", "60")
        rc = main(argv + wide)
        monkeypatch.undo()
        assert rc == 0
        out = terminal.getvalue()
        if wide:
            assert out == piped
            continue
        head = "ops by time" if command == "report" else "ops whose time changed most"
        tables = out.splitlines()[[line.startswith(head) for line in out.splitlines()].index(True) + 1:]
        if command == "compare":
            tables += out.split("\n\n")[0].splitlines()[2:]  # and the side-by-side table, after the A = and B = lines
        assert max(map(len, tables)) <= 60
        assert not Counter("".join(piped.split())) - Counter("".join(out.split()))  # nothing lost (a further block repeats the names)
