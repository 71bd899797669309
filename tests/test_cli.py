"""The `npusim` command: `run` (summary, trace, plots, outputs, program), `chips`, `ops`, and the
one-line error every failure must give. Runs `sim.cli.main` in-process, plus real subprocess runs
of the installed console script to prove the entry point and its exit status."""

import contextlib
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import chips
import isa
import sim
from isa import graphfile
from sim.cli import main
from traces import text
from traces.summary import human_bytes

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
MLP = EXAMPLES / "mlp.yaml"
MLP_INT8 = EXAMPLES / "mlp_int8.yaml"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CYCLES = re.compile(r"^(\S+): ([\d,]+) cycles = ", re.MULTILINE)


def cli(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def cycles_of(out, chip="bm1684"):
    found = CYCLES.findall(out)
    assert len(found) == 1, out
    assert found[0][0] == chip, out
    return int(found[0][1].replace(",", ""))


def cycles_line(out):
    return next(line for line in out.splitlines() if CYCLES.match(line))


def assert_one_line_error(rc, out, err, *fragments):
    assert rc == 1, (rc, out, err)
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("npusim: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert "Traceback" not in out and "Traceback" not in err
    assert not any(line.startswith("  File ") for line in out.splitlines()), out
    return lines[0]


def write_graph(tmp_path, text, name="g.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def mlp():
    """The demo graph, its chip and the Python API's run of it: what the CLI must reproduce."""
    gf = graphfile.load(MLP)
    chip = chips.load("bm1684")
    return gf, chip, sim.run(gf.graph, chip, gf.defaults)


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """`npusim run examples/mlp.yaml --chip bm1684` with every output file asked for."""
    d = tmp_path_factory.mktemp("cli_full")
    paths = {
        "trace": d / "T" / "run.json",
        "plots": d / "D",
        "outputs": d / "O" / "out.npz",
        "program": d / "P" / "prog.txt",
        "csv": d / "C",
    }
    argv = ["run", str(MLP), "--chip", "bm1684"]
    for flag, path in paths.items():
        argv += [f"--{flag}", str(path)]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue(), paths


# ---- run: the summary and every file -----------------------------------------------------------


def test_run_prints_the_summary(full_run, mlp):
    rc, out, err, paths = full_run
    gf, chip, res = mlp
    assert rc == 0, err
    assert err == ""
    lines = out.splitlines()
    program = isa.lower(gf.graph, chip)
    waits = sum(1 for stream in program.streams.values() for i in stream if i.kind == "wait")
    assert f"mlp on bm1684 (functional mode): lowered to {len(program) - waits} instructions and {waits} waits" in lines
    assert cycles_of(out) == res.cycles > 0
    assert cycles_line(out).startswith(f"bm1684: {res.cycles:,} cycles = {res.seconds * 1e6:,.2f} us at 550 MHz")
    for engine in ("gdma", "tiu"):
        busy = res.stats.busy[engine]
        assert busy > 0
        assert any(re.fullmatch(rf"\s+{engine}\s+[\d.]+% busy\s+\({busy:,.0f} cycles\)", line) for line in lines), out
    assert res.stats.ddr_read_bytes > 0 and res.stats.ddr_write_bytes > 0
    assert f"ddr: read {human_bytes(res.stats.ddr_read_bytes)}, write {human_bytes(res.stats.ddr_write_bytes)}" in lines
    assert res.stats.ddr_write_bytes >= 64 * 128 * 4  # at least the output (64 x 128 float32)
    for path in (paths["program"], paths["outputs"], paths["trace"], paths["plots"] / "timeline.png"):
        assert f"wrote {path}" in lines


def test_run_writes_a_chrome_trace_with_both_engines(full_run, mlp):
    _, _, _, paths = full_run
    _, chip, res = mlp
    with open(paths["trace"]) as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert sorted(names.values()) == ["arm", "gdma", "tiu"]  # every engine of the chip has its track
    complete = [e for e in events if e["ph"] == "X"]
    by_engine = {}
    for e in complete:
        by_engine.setdefault(names[e["tid"]], []).append(e)
    assert set(by_engine) == {"gdma", "tiu"}
    assert {e["cat"] for e in by_engine["gdma"]} - {"wait"} == {"dma"}
    assert {"matrix", "vector"} <= {e["cat"] for e in by_engine["tiu"]}
    assert sum(e["cat"] != "wait" for e in complete) == res.stats.instructions
    end_us = max(e["ts"] + e["dur"] for e in complete)
    assert end_us == pytest.approx(res.cycles / chip.clock_hz * 1e6)
    assert doc["otherData"]["cycles"] == res.cycles


def test_run_writes_a_png_timeline(full_run):
    _, _, _, paths = full_run
    png = (paths["plots"] / "timeline.png").read_bytes()
    assert png[:8] == PNG_SIGNATURE
    assert png[12:16] == b"IHDR" and len(png) > 1000


def test_run_writes_the_four_plots(full_run):
    _, out, _, paths = full_run
    for name in ("timeline", "memory", "bandwidth", "roofline"):
        path = paths["plots"] / f"{name}.png"
        assert f"wrote {path}" in out.splitlines()
        png = path.read_bytes()
        assert png[:8] == PNG_SIGNATURE and png[12:16] == b"IHDR" and len(png) > 20_000


def test_run_writes_events_and_ops_csv(full_run, mlp):
    _, out, _, paths = full_run
    _, _, res = mlp
    for name in ("events.csv", "ops.csv"):
        assert f"wrote {paths['csv'] / name}" in out.splitlines()
    with open(paths["csv"] / "events.csv", newline="") as f:
        events = list(csv.DictReader(f))
    assert len(events) == len(res.trace.events)
    # the three layers' matmuls: x (64 x 512) through 512 -> 512 -> 256 -> 128
    assert sum(int(e["ops"]) for e in events if e["kind"] == "matrix") == 2 * 64 * (512 * 512 + 512 * 256 + 256 * 128)
    with open(paths["csv"] / "ops.csv", newline="") as f:
        ops = {row["op"]: row for row in csv.DictReader(f)}
    assert list(ops) == list(res.stats.ops)
    assert int(ops["fc2"]["ops"]) == 2 * 64 * 512 * 256
    assert int(ops["fc2"]["span cycles"]) == res.stats.ops["fc2"].span
    assert float(ops["fc2"]["cycles"]) == res.stats.ops["fc2"].cycles
    assert sum(float(row["cycles"]) for row in ops.values()) == pytest.approx(res.cycles)  # the time counted once


def test_run_writes_the_outputs_the_python_api_gives(full_run, mlp):
    _, _, _, paths = full_run
    gf, _, res = mlp
    with np.load(paths["outputs"]) as data:
        assert data.files == ["y"]
        y = data["y"]
    assert y.dtype == np.float32 and y.shape == (64, 128)
    np.testing.assert_array_equal(y, res.outputs["y"])
    # and they are the MLP's numbers, not just the same wrong ones twice
    c, h = gf.graph.constants, gf.defaults["x"]
    for i in (1, 2, 3):
        h = np.maximum(h @ c[f"w{i}"] + c[f"b{i}"], 0)
    np.testing.assert_allclose(y, h, rtol=1e-5, atol=1e-5)
    assert 0 < (y > 0).mean() < 1


def test_run_writes_the_lowered_program(full_run, mlp):
    _, _, _, paths = full_run
    gf, chip, _ = mlp
    text = paths["program"].read_text()
    assert text.splitlines()[0] == ".program chip=bm1684 graph=mlp"
    expected = isa.lower(gf.graph, chip)
    assert text == expected.to_text()
    assert isa.Program.from_text(text) == expected


def test_timing_mode_gives_the_same_cycles(full_run, capsys):
    _, functional, _, _ = full_run
    rc, out, err = cli(capsys, "run", MLP, "--chip", "bm1684", "--mode", "timing")
    assert rc == 0 and err == ""
    assert out.splitlines()[0].startswith("mlp on bm1684 (timing mode): ")
    assert cycles_line(out) == cycles_line(functional)


def test_timing_mode_of_the_int8_example(capsys):
    rc_f, out_f, _ = cli(capsys, "run", MLP_INT8, "--chip", "bm1684")
    rc_t, out_t, _ = cli(capsys, "run", MLP_INT8, "--chip", "bm1684", "--mode", "timing")
    assert rc_f == rc_t == 0
    assert cycles_line(out_f) == cycles_line(out_t)
    gf = graphfile.load(MLP_INT8)
    assert cycles_of(out_f) == sim.run(gf.graph, "bm1684", mode="timing").cycles


# ---- lower and exec -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mlp_inputs(tmp_path_factory, mlp):
    """The demo graph's inputs as an .npz, so run and exec read the same values."""
    path = tmp_path_factory.mktemp("cli_inputs") / "x.npz"
    with open(path, "wb") as f:
        np.savez(f, **mlp[0].defaults)
    return path


def test_lower_writes_the_program_run_lowers(tmp_path, capsys, mlp):
    gf, chip, _ = mlp
    rc, out, err = cli(capsys, "lower", MLP, "--chip", "bm1684", "-o", tmp_path / "p" / "prog.txt")
    assert rc == 0 and err == "", err
    expected = isa.lower(gf.graph, chip)
    assert (tmp_path / "p" / "prog.txt").read_text() == expected.to_text()
    waits = sum(1 for stream in expected.streams.values() for i in stream if i.kind == "wait")
    assert out.splitlines() == [f"wrote {tmp_path / 'p' / 'prog.txt'}",
                                f"mlp on bm1684: lowered to {len(expected) - waits} instructions and {waits} waits"]


def test_lower_then_exec_gives_the_outputs_and_cycles_of_run(tmp_path, capsys, mlp_inputs):
    rc, run_out, _ = cli(capsys, "run", MLP, "--chip", "bm1684", "--inputs", mlp_inputs, "--outputs", tmp_path / "run.npz")
    assert rc == 0
    rc, _, _ = cli(capsys, "lower", MLP, "--chip", "bm1684", "-o", tmp_path / "prog.txt")
    assert rc == 0
    rc, out, err = cli(capsys, "exec", tmp_path / "prog.txt", "--chip", "bm1684", "--inputs", mlp_inputs,
                       "--outputs", tmp_path / "exec.npz", "--trace", tmp_path / "exec.json")
    assert rc == 0 and err == "", err
    assert out.splitlines()[0].startswith(f"mlp on bm1684 (functional mode): {tmp_path / 'prog.txt'} holds ")
    assert cycles_line(out) == cycles_line(run_out)
    assert cycles_of(out) > 0
    with np.load(tmp_path / "run.npz") as a, np.load(tmp_path / "exec.npz") as b:
        assert a.files == b.files == ["y"]
        np.testing.assert_array_equal(a["y"], b["y"])
        assert np.abs(a["y"]).max() > 0
    assert json.loads((tmp_path / "exec.json").read_text())["otherData"]["cycles"] == cycles_of(out)


def test_exec_in_timing_mode_of_a_layer_group_program(tmp_path, capsys):
    bottleneck = EXAMPLES / "bottleneck.yaml"
    rc, run_out, _ = cli(capsys, "run", bottleneck, "--chip", "bm1684", "--mode", "timing")
    assert rc == 0
    rc, lower_out, _ = cli(capsys, "lower", bottleneck, "--chip", "bm1684", "-o", tmp_path / "prog.txt")
    assert rc == 0 and "layer groups:\n  res2b_a..res2b_c: 3 layers" in lower_out
    rc, out, err = cli(capsys, "exec", tmp_path / "prog.txt", "--mode", "timing")  # the chip the program names
    assert rc == 0 and err == "", err
    assert cycles_line(out) == cycles_line(run_out)


def test_an_edited_dma_runs_and_changes_the_cycles(tmp_path, capsys, mlp_inputs):
    """The program loads x (64 x 512 float32, row-major) with one DMA; read column by column
    instead, the same bytes come in many short bursts: slower, and the values arrive transposed."""
    rc, _, _ = cli(capsys, "lower", MLP, "--chip", "bm1684", "-o", tmp_path / "prog.txt")
    text = (tmp_path / "prog.txt").read_text()
    row_major = "src=ddr@0x0:float32[64,512;512,1]"
    assert text.count(row_major) == 1
    (tmp_path / "edited.txt").write_text(text.replace(row_major, "src=ddr@0x0:float32[64,512;1,64]"))
    runs = {}
    for name in ("prog", "edited"):
        rc, out, err = cli(capsys, "exec", tmp_path / f"{name}.txt", "--chip", "bm1684", "--inputs", mlp_inputs,
                           "--outputs", tmp_path / f"{name}.npz")
        assert rc == 0 and err == "", err
        with np.load(tmp_path / f"{name}.npz") as data:
            runs[name] = cycles_of(out), data["y"]
    assert runs["edited"][0] > runs["prog"][0] * 1.2
    assert not np.array_equal(runs["edited"][1], runs["prog"][1])


def test_exec_draws_random_inputs_with_the_seed(tmp_path, capsys):
    rc, _, _ = cli(capsys, "lower", MLP, "--chip", "bm1684", "-o", tmp_path / "prog.txt")
    outputs = []
    for seed in (1, 1, 2):
        rc, _out, err = cli(capsys, "exec", tmp_path / "prog.txt", "--seed", seed, "--outputs", tmp_path / "o.npz")
        assert rc == 0, err
        with np.load(tmp_path / "o.npz") as data:
            outputs.append(data["y"])
    program = isa.program.read_program(tmp_path / "prog.txt")
    x = np.random.default_rng(1).standard_normal((64, 512)).astype(np.float32)
    np.testing.assert_array_equal(outputs[0], sim.execute(program, "bm1684", {"x": x}).outputs["y"])
    np.testing.assert_array_equal(outputs[0], outputs[1])
    assert not np.array_equal(outputs[0], outputs[2])


@pytest.mark.parametrize("argv, fragments", [
    (["--chip", "generic"], ("ProgramError", "lowered for chip 'bm1684', not 'generic'")),
    (["--set", "policy.fuse=false"], ("ConfigError", "--set policy.fuse", "npusim lower")),
    (["--set", "memories.ddr.bandwith=1GB/s"], ("ConfigError", "'bandwith'")),
    (["--mode", "timing", "--outputs", "o.npz"], ("ConfigError", "--outputs needs functional mode")),
])
def test_exec_refuses_with_one_line(tmp_path, capsys, argv, fragments):
    rc, _, _ = cli(capsys, "lower", MLP, "--chip", "bm1684", "-o", tmp_path / "prog.txt")
    rc, out, err = cli(capsys, "exec", tmp_path / "prog.txt", *argv)
    assert_one_line_error(rc, out, err, *fragments)


@pytest.mark.parametrize("content, fragments", [
    (None, ("ProgramError", "cannot read", "No such file")),
    (b"\xff\xfe binary", ("ProgramError", "not UTF-8 text")),
    (b"gdma.0 dma\n", ("ProgramError", "prog.txt: program line 1", "first line is `.program chip=NAME graph=NAME`")),
    (b".program chip=bm1684 graph=g\n.engine gdma\ngdma.0 dma src=ddr@0x0:float32[4;1]\n", ("ProgramError", "program line 3")),
])
def test_exec_of_a_bad_program_file_is_a_one_line_error(tmp_path, capsys, content, fragments):
    path = tmp_path / "prog.txt"
    if content is not None:
        path.write_bytes(content)
    rc, out, err = cli(capsys, "exec", path)
    assert_one_line_error(rc, out, err, *fragments)


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_lowering_shows_progress_on_a_terminal_only(tmp_path, capsys, monkeypatch):
    """A progress bar over the ops on stderr when it is a terminal; none in a pipe (every other
    test here: stderr stays empty)."""
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    rc = main(["lower", str(EXAMPLES / "bottleneck.yaml"), "--chip", "bm1684", "-o", str(tmp_path / "prog.txt")])
    assert rc == 0
    ops = len(graphfile.load(EXAMPLES / "bottleneck.yaml").graph.nodes)
    assert "lowering res2b" in terminal.getvalue()
    assert f"{ops}/{ops} [" in terminal.getvalue()  # tqdm's last count: every op lowered
    monkeypatch.undo()
    rc, _out, err = cli(capsys, "lower", EXAMPLES / "bottleneck.yaml", "--chip", "bm1684", "-o", tmp_path / "prog.txt")
    assert rc == 0 and err == ""


def test_lowering_reports_the_ops_lowered_after_each_layer_group():
    graph = graphfile.load(EXAMPLES / "bottleneck.yaml").graph
    calls = []
    program = isa.lower(graph, chips.load("bm1684"), progress=lambda done, total: calls.append((done, total)))
    assert program.to_text() == isa.lower(graph, chips.load("bm1684")).to_text()
    done = [d for d, _ in calls]
    assert done == sorted(set(done)) and calls[-1] == (len(graph.nodes), len(graph.nodes))
    assert len(calls) < len(graph.nodes)  # the three convolutions' chain is one step


def test_lower_needs_an_output_path(capsys):
    rc, out, err = cli(capsys, "lower", MLP, "--chip", "bm1684")
    assert_one_line_error(rc, out, err, "ConfigError", "-o/--output")


# ---- run: --set ---------------------------------------------------------------------------------


def test_set_lower_ddr_bandwidth_slows_the_memory_bound_demo(capsys, mlp):
    _, _, res = mlp
    rc, out, err = cli(capsys, "run", MLP, "--chip", "bm1684", "--mode", "timing", "--set", "memories.ddr.bandwidth=8GB/s")
    assert rc == 0, err
    slow = cycles_of(out)
    assert slow > 2 * res.cycles  # 32 GB/s -> 8 GB/s on a DMA-bound run
    chip = chips.load("bm1684", overrides={"memories.ddr.bandwidth": "8GB/s"})
    assert slow == sim.run(mlp[0].graph, chip, mode="timing").cycles
    # an override does not stick to later runs in the same process
    rc, out, _ = cli(capsys, "run", MLP, "--chip", "bm1684", "--mode", "timing")
    assert rc == 0 and cycles_of(out) == res.cycles


def test_set_with_a_misspelt_key_fails(capsys):
    rc, out, err = cli(capsys, "run", MLP, "--chip", "bm1684", "--set", "memories.ddr.bandwith=1")
    assert_one_line_error(rc, out, err, "ConfigError", "'bandwith'", "bandwidth")
    assert "cycles" not in out


@pytest.mark.parametrize("pair, fragment", [
    ("memories.ddr.bandwidth", "'memories.ddr.bandwidth'"),  # no '='
    ("=8GB/s", "'=8GB/s'"),  # no key
    ("memories.ddr.bandwidth=fast", "'fast'"),
    ("memories.nosuch.size=1", "nosuch"),
])
def test_set_with_a_bad_pair_fails(capsys, pair, fragment):
    rc, out, err = cli(capsys, "run", MLP, "--chip", "bm1684", "--set", pair)
    assert_one_line_error(rc, out, err, "ConfigError", fragment)


# ---- run: --inputs ------------------------------------------------------------------------------


def test_inputs_from_an_npz(tmp_path, capsys, mlp):
    gf, chip, default = mlp
    x = np.random.default_rng(123).uniform(-1, 1, (64, 512)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    rc, out, err = cli(capsys, "run", MLP, "--chip", "bm1684", "--inputs", tmp_path / "in.npz",
                       "--outputs", tmp_path / "out.npz")
    assert rc == 0, err
    expected = sim.run(gf.graph, chip, {"x": x})
    with np.load(tmp_path / "out.npz") as data:
        np.testing.assert_array_equal(data["y"], expected.outputs["y"])
        assert not np.array_equal(data["y"], default.outputs["y"])  # the file's x was used
    assert cycles_of(out) == expected.cycles


def test_inputs_file_that_does_not_exist(tmp_path, capsys):
    missing = tmp_path / "nothere.npz"
    rc, out, err = cli(capsys, "run", MLP, "--chip", "bm1684", "--inputs", missing)
    assert_one_line_error(rc, out, err, "InputError", str(missing))


def test_inputs_file_that_is_not_an_npz(tmp_path, capsys):
    (tmp_path / "junk.npz").write_text("not numpy\n")
    rc, out, err = cli(capsys, "run", MLP, "--chip", "bm1684", "--inputs", tmp_path / "junk.npz")
    assert_one_line_error(rc, out, err, "InputError", "junk.npz")


@pytest.mark.parametrize("arrays, fragments", [
    ({"x": np.zeros((64, 511), np.float32)}, ("'x'", "(64, 512)", "(64, 511)")),
    ({"z": np.zeros((64, 512), np.float32)}, ("'x'", "not given")),
    ({"x": np.zeros((64, 512), np.float32), "extra": np.zeros(3)}, ("extra",)),
], ids=["wrong-shape", "missing", "extra"])
def test_inputs_that_do_not_match_the_graph(tmp_path, capsys, arrays, fragments):
    np.savez(tmp_path / "in.npz", **arrays)
    rc, out, err = cli(capsys, "run", MLP, "--chip", "bm1684", "--inputs", tmp_path / "in.npz")
    assert_one_line_error(rc, out, err, "InputError", *fragments)


def test_inputs_of_another_dtype_that_do_not_convert_exactly(tmp_path, capsys):
    np.savez(tmp_path / "in.npz", x=np.full((64, 512), 0.5, np.float32))
    rc, out, err = cli(capsys, "run", MLP_INT8, "--chip", "bm1684", "--inputs", tmp_path / "in.npz")
    assert_one_line_error(rc, out, err, "InputError", "'x'", "int8", "float32 values in [0.5, 0.5]")


GRAPH_WITHOUT_DEFAULTS = """\
name: nodefault
inputs:
  a: {shape: [8, 16]}
ops:
  - {op: active, inputs: [a], params: {active_type: relu}}
outputs: {y: active_0}
"""


def test_an_input_without_a_value_fails_in_functional_mode_only(tmp_path, capsys):
    path = write_graph(tmp_path, GRAPH_WITHOUT_DEFAULTS)
    rc, out, err = cli(capsys, "run", path, "--chip", "bm1684")
    assert_one_line_error(rc, out, err, "InputError", "input(s) a", "--inputs")
    rc, out, err = cli(capsys, "run", path, "--chip", "bm1684", "--mode", "timing")
    assert rc == 0, err
    assert out.splitlines()[0].startswith("nodefault on bm1684 (timing mode): ")


# ---- run: other failures ------------------------------------------------------------------------


def test_unknown_chip(capsys):
    rc, out, err = cli(capsys, "run", MLP, "--chip", "nochip")
    assert_one_line_error(rc, out, err, "ConfigError", "'nochip'", "bm1684", "generic")


def test_graph_file_that_does_not_exist(tmp_path, capsys):
    missing = tmp_path / "nograph.yaml"
    rc, out, err = cli(capsys, "run", missing, "--chip", "bm1684")
    assert_one_line_error(rc, out, err, "ConfigError", f"{missing}: cannot read")


def test_malformed_graph_file(tmp_path, capsys):
    path = write_graph(tmp_path, GRAPH_WITHOUT_DEFAULTS.replace("op: active", "op: frobnicate"))
    rc, out, err = cli(capsys, "run", path, "--chip", "bm1684")
    assert_one_line_error(rc, out, err, "ConfigError", f"{path}:5:", "'frobnicate'")


def test_graph_file_with_a_shape_error(tmp_path, capsys):
    path = write_graph(tmp_path, (
        "name: bad\n"
        "inputs:\n"
        "  a: {shape: [8, 16]}\n"
        "  b: {shape: [8, 16]}\n"
        "ops:\n"
        "  - {op: matrix_mul, inputs: [a, b]}\n"
        "outputs: [matrix_mul_0]\n"
    ))
    rc, out, err = cli(capsys, "run", path, "--chip", "bm1684")
    assert_one_line_error(rc, out, err, "ShapeError", f"{path}:6:", "(8, 16)")


def test_unwritable_trace_path(tmp_path, capsys):
    rc, out, err = cli(capsys, "run", MLP, "--chip", "bm1684", "--mode", "timing", "--trace", tmp_path)
    assert_one_line_error(rc, out, err, "ConfigError", f"cannot write {tmp_path}")


@pytest.mark.parametrize("flag, target", [("--plots", "file"), ("--trace", "file/run.json")], ids=["plots", "trace"])
def test_output_path_under_a_file_is_a_one_line_error(tmp_path, capsys, flag, target):
    (tmp_path / "file").write_text("x")
    argv = ["run", MLP, "--chip", "bm1684", "--mode", "timing", flag, tmp_path / target]
    try:
        rc = main([str(a) for a in argv])
    except OSError as exc:
        pytest.fail(f"raw {type(exc).__name__} escaped: {exc}")
    out, err = capsys.readouterr()
    assert_one_line_error(rc, out, err, "ConfigError", "cannot write")


def test_graph_with_a_scalar_shape_is_a_one_line_error(tmp_path, capsys):
    path = write_graph(tmp_path, GRAPH_WITHOUT_DEFAULTS.replace("[8, 16]", "16"))
    try:
        rc = main(["run", str(path), "--chip", "bm1684", "--mode", "timing"])
    except Exception as exc:  # noqa: BLE001 - any escaping exception fails the test
        pytest.fail(f"raw {type(exc).__name__} escaped: {exc}")
    out, err = capsys.readouterr()
    assert_one_line_error(rc, out, err, f"{path}:3:")


def test_wrote_lines_name_files_that_exist(tmp_path, capsys):
    rc, out, err = cli(capsys, "run", MLP, "--chip", "bm1684", "--outputs", tmp_path / "O")
    assert rc == 0, err
    wrote = [line[len("wrote "):] for line in out.splitlines() if line.startswith("wrote ")]
    assert len(wrote) == 1 and wrote[0].startswith(str(tmp_path / "O")), wrote
    assert Path(wrote[0]).is_file(), (wrote, sorted(p.name for p in tmp_path.iterdir()))
    with np.load(wrote[0]) as data:
        assert data.files == ["y"]


# ---- chips and ops ------------------------------------------------------------------------------


def table(out):
    """Rows of a CLI table as lists of cells (cells are separated by two or more spaces)."""
    return [re.split(r"\s{2,}", line.strip()) for line in out.splitlines() if line.strip()]


def test_chips_lists_the_shipped_chips(capsys):
    rc, out, err = cli(capsys, "chips")
    assert rc == 0 and err == ""
    rows = table(out)
    assert rows[0][:2] == ["chip", "clock"]
    assert sorted(r[0] for r in rows[1:]) == sorted(chips.available())
    assert {"bm1684", "generic"} <= set(chips.available())
    by_name = {r[0]: r for r in rows[1:]}
    bm = by_name["bm1684"]
    assert bm[1] == "550 MHz"
    assert "lmem" in bm[2] and "64 x 512 KiB" in bm[2]
    assert bm[3] == "32.0 GB/s"
    assert bm[-1] == "gdma (dma), tiu (vector+matrix), arm (scalar)"
    generic = chips.load("generic")
    assert by_name["generic"][1] == f"{generic.clock_hz / 1e6:g} MHz"
    assert by_name["generic"][-1] == ", ".join(f"{e.name} ({'+'.join(e.kinds)})" for e in generic.engines.values())


def expected_support(chip, key):
    row = chip.support(key)
    assert row is not None and row.dtypes is not None
    return ", ".join(sorted(row.dtypes))


def test_ops_lists_every_op_for_every_chip(capsys):
    rc, out, err = cli(capsys, "ops")
    assert rc == 0 and err == ""
    rows = table(out)
    assert rows[0] == ["op"] + list(chips.available())
    col = {name: i for i, name in enumerate(rows[0])}
    by_op = {r[0]: r for r in rows[1:]}
    assert {"matrix_mul", "active", "active.relu", "active.tanh", "add"} <= set(by_op)
    assert set(by_op) >= set(isa.ops.REGISTRY)
    bm = chips.load("bm1684")
    for key in ("matrix_mul", "active.relu"):
        cell = by_op[key][col["bm1684"]]
        assert cell.startswith(expected_support(bm, key)), cell
        assert {"float32", "int8"} <= set(cell.split(";")[0].split(", "))
        assert by_op[key][col["generic"]] == "any dtype"
    assert by_op["active.tanh"][col["bm1684"]] == "float32; no mixed dtypes"  # no integer tanh on BM1684
    assert "int16" not in by_op["matrix_mul"][col["bm1684"]].split(";")[0].split(", ")


def test_ops_for_one_chip(capsys):
    rc, out, err = cli(capsys, "ops", "--chip", "bm1684")
    assert rc == 0 and err == ""
    rows = table(out)
    assert rows[0] == ["op", "bm1684"]
    assert all(len(r) == 2 for r in rows)
    assert "generic" not in out
    by_op = dict(rows[1:])
    bm = chips.load("bm1684")
    assert by_op["matrix_mul"].startswith("float32, int8, uint8;")
    assert by_op["matrix_mul"].startswith(expected_support(bm, "matrix_mul"))
    assert by_op["active.relu"].startswith("float32, int16, int8, uint16, uint8;")
    assert by_op["active.relu"].startswith(expected_support(bm, "active.relu"))


def test_ops_for_an_unknown_chip(capsys):
    rc, out, err = cli(capsys, "ops", "--chip", "nochip")
    assert_one_line_error(rc, out, err, "ConfigError", "'nochip'")
    assert out == ""


# ---- tables fit the terminal ---------------------------------------------------------------------


def on_terminal(monkeypatch, capsys, columns, *argv):
    """The command's stdout as a terminal of `columns` columns shows it (COLUMNS sets the size
    shutil.get_terminal_size reports)."""
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    monkeypatch.setenv("COLUMNS", str(columns))
    rc = main([str(a) for a in argv])
    monkeypatch.undo()
    assert rc == 0, capsys.readouterr().err
    return terminal.getvalue()


@pytest.mark.parametrize("columns", [60, 80, 132])
def test_chips_fit_the_terminal_and_wide_prints_whole_rows(monkeypatch, capsys, columns):
    _, piped, _ = cli(capsys, "chips")
    assert max(map(len, piped.splitlines())) > 300  # the whole rows, in a pipe
    out = on_terminal(monkeypatch, capsys, columns, "chips")
    assert max(map(len, out.splitlines())) <= columns
    blocks = out.split("\n\n")
    first = ["chip", *chips.available()]
    for block in blocks:
        assert [line.split()[0] for line in block.splitlines() if line[:1].strip()] == first
    assert sorted("".join(out.split())) == sorted("".join(piped.split() + first * (len(blocks) - 1)))  # nothing lost
    if columns >= 132:  # room enough that no word is broken
        assert sorted(out.split()) == sorted(piped.split() + first * (len(blocks) - 1))
    assert on_terminal(monkeypatch, capsys, columns, "chips", "--wide") == piped


def test_ops_fit_the_terminal_in_blocks_of_chips(monkeypatch, capsys):
    _, piped, _ = cli(capsys, "ops")
    assert max(map(len, piped.splitlines())) > 1500
    out = on_terminal(monkeypatch, capsys, 80, "ops")
    lines = out.splitlines()
    assert max(map(len, lines)) <= 80
    blocks = out.split("\n\n")
    assert len(blocks) >= 2
    headers = [block.splitlines()[0].split() for block in blocks]
    assert all(h[0] == "op" for h in headers)
    assert [name for h in headers for name in h[1:]] == chips.available()  # every chip once, in order
    keys = [r[0] for r in table(piped)[1:]]
    for block in blocks:  # each block names every op, in order, at the start of its first line
        assert [line.split()[0] for line in block.splitlines()[1:] if line[:1].strip()] == keys
    assert on_terminal(monkeypatch, capsys, 80, "ops", "--wide") == piped


TOKEN = st.integers(0, 9)


@st.composite
def token_tables(draw):
    """Rows of cells made of tokens unique to their cell ("r3c1w0"), each at most 6 characters;
    every row's name (the first cell) is not empty, any other cell may be."""
    n_rows, n_cols = draw(st.integers(1, 6)), draw(st.integers(1, 8))
    return [[" ".join(f"r{r}c{c}w{k}" for k in range(draw(st.integers(0 if c else 1, 7)))) for c in range(n_cols)]
            for r in range(n_rows)]


@settings(max_examples=200, deadline=None)
@given(rows=token_tables(), width=st.integers(text.MIN_COLUMN * 2 + 2, 160), indent=st.sampled_from(["", "  "]))
def test_a_fitted_table_keeps_every_word_in_order_within_the_width(rows, width, indent):
    lines = text.table(rows, indent=indent, left=range(len(rows[0])), width=width + len(indent))
    whole = text.table(rows, indent=indent, left=range(len(rows[0])))
    if max(map(len, whole)) <= width + len(indent):
        assert lines == whole
        return
    assert max(map(len, lines)) <= width + len(indent)
    words = " ".join(lines).split()
    blocks = 1 + sum(1 for line in lines if not line)
    for row in rows:
        for c, cell in enumerate(row):
            found = [words.index(w) for w in cell.split()] if c else []
            assert all(words.count(w) == (blocks if c == 0 else 1) for w in cell.split()), (cell, lines)
            assert found == sorted(found)


# ---- the installed entry point ------------------------------------------------------------------


def npusim_command():
    script = Path(sys.executable).with_name("npusim")
    if script.exists():
        return [str(script)]
    found = shutil.which("npusim")
    return [found] if found else [sys.executable, "-m", "sim.cli"]


def test_console_script_runs_the_demo(tmp_path, mlp):
    _, _, res = mlp
    proc = subprocess.run(
        npusim_command() + ["run", str(MLP), "--chip", "bm1684", "--outputs", str(tmp_path / "o.npz"),
                            "--trace", str(tmp_path / "t.json")],
        capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert cycles_of(proc.stdout) == res.cycles
    with np.load(tmp_path / "o.npz") as data:
        np.testing.assert_array_equal(data["y"], res.outputs["y"])
    assert json.loads((tmp_path / "t.json").read_text())["otherData"]["cycles"] == res.cycles


def test_the_outputs_do_not_hang_on_how_many_threads_blas_runs(tmp_path):
    """The matrix unit's float32 sums are rounded once from float64 ones (sim/engines/matrix.py):
    the demo's outputs are the same bits with OpenBLAS on one thread as on its default count (a
    float32 sum's order, and so its last bits, change with the threads)."""
    outputs = []
    for threads in ({"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}, {}):
        env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")} | threads
        path = tmp_path / f"o{len(outputs)}.npz"
        proc = subprocess.run(npusim_command() + ["run", str(MLP), "--chip", "bm1684", "--outputs", str(path)],
                              capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False, env=env)
        assert proc.returncode == 0, proc.stderr
        with np.load(path) as data:
            outputs.append(data["y"])
    np.testing.assert_array_equal(outputs[0], outputs[1])


def test_console_script_exit_status_on_error(tmp_path):
    proc = subprocess.run(
        npusim_command() + ["run", str(MLP), "--chip", "bm1684", "--set", "memories.ddr.bandwith=1"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False,
    )
    assert_one_line_error(proc.returncode, proc.stdout, proc.stderr, "'bandwith'")


def test_run_lists_the_layer_groups(capsys):
    bottleneck = EXAMPLES / "bottleneck.yaml"
    rc, out, _ = cli(capsys, "run", bottleneck, "--chip", "bm1684", "--mode", "timing")
    program = isa.lower(graphfile.load(bottleneck).graph, chips.load("bm1684"))
    [note] = [n for n in program.notes if n.startswith("layer group")]
    assert rc == 0 and f"layer groups:\n  {note.removeprefix('layer group ')}\n" in out
    assert "res2b_a..res2b_c: 3 layers in 1 slice(s)" in out
    rc, out, _ = cli(capsys, "run", bottleneck, "--chip", "bm1684", "--mode", "timing", "--set", "policy.chain=false")
    assert rc == 0 and "layer groups:" not in out


def test_a_timing_run_prints_the_chips_accuracy_beside_the_estimate(tmp_path, capsys):
    """A chip YAML's `accuracy:` block (written by bench/fit.py) is printed after a timing run's
    summary, with the estimate in milliseconds; a functional run and a chip without it print none."""
    text = (chips.SHIPPED_DIR / "bm1684.yaml").read_text().split("\n# accuracy:")[0].split("\naccuracy:")[0]
    path = tmp_path / "bm1684.yaml"
    path.write_text(text + "\naccuracy:\n  networks: 14\n  rows: 30\n  mean_error: 8.2%\n  worst_error: -21.4%\n"
                           "  worst_row: yolov8s INT8 b4\n")
    rc, out, _ = cli(capsys, "run", MLP, "--chip", path, "--mode", "timing")
    ms = sim.run(graphfile.load(MLP).graph, chips.load(path), mode="timing").seconds * 1e3
    assert rc == 0
    assert out.rstrip().splitlines()[-1] == (f"{ms:.3g} ms; bm1684 validated on 14 networks: mean error 8%, worst 21% "
                                             "(yolov8s INT8 b4)")
    rc, out, _ = cli(capsys, "run", MLP, "--chip", path)
    assert rc == 0 and "validated on" not in out
    rc, out, _ = cli(capsys, "run", MLP, "--chip", "generic", "--mode", "timing")
    assert rc == 0 and "validated on" not in out
