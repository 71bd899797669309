"""`sim.sweep` and `npusim sweep`: the grid's cross product in order whatever order points finish,
rows equal to sim.run's figures for the same overrides, failing points as error rows, the CSV and
the plot, the same rows from one worker process or two or from a Dask cluster, and the CLI's
one-line errors (an unreachable scheduler among them)."""

import csv
import os
import re
import socket
import sys
import threading
import time
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
import pytest
from matplotlib.image import imread
from onnx import TensorProto, helper, numpy_helper

import chips
import sim
from isa import graphfile
from isa.errors import ClusterError, ConfigError, InputError
from isa.lower.policy import Policy, policy_from_overrides
from sim import cluster
from sim import sweep as sweeps
from sim.cli import main
from traces.summary import human_bytes

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "examples" / "mlp.yaml"
STUDY = ROOT / "docs" / "lmem-vs-latency.md"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHIP = "bm1684"
# 256 bytes per lane cannot hold fc1's smallest tile; 8KiB and 64KiB tile the MLP differently
SIZES = ("256", "8KiB", "64KiB")
BANDWIDTHS = ("16GB/s", "32GB/s")
GRID = {"memories.lmem.size": SIZES, "memories.ddr.bandwidth": BANDWIDTHS}


class Synchronous(Executor):
    """Runs each task as it is submitted, in this thread."""

    def submit(self, fn, *args, **kwargs):
        future = Future()
        future.set_result(fn(*args, **kwargs))
        return future


class Refusing(Executor):
    """Fails the test if any point is submitted."""

    def submit(self, fn, *args, **kwargs):
        raise AssertionError("a point ran")


@pytest.fixture(scope="module")
def result():
    return sweeps.sweep(MLP, CHIP, GRID, executor=Synchronous(), progress=False)


def expected(overrides, policy=None, mode="timing"):
    gf = graphfile.load(MLP)
    return sim.run(gf.graph, chips.load(CHIP, overrides), gf.defaults if mode == "functional" else None, mode, policy)


def one_line_error(capsys, argv, *fragments):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert rc == 1, (out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("npusim: error: ConfigError: "), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


# ---- the grid -----------------------------------------------------------------------------------


def test_parse_grid_keeps_key_and_value_order():
    grid = sweeps.parse_grid(["memories.lmem.size=8KiB, 64KiB,256", "policy.pin=[w1,w2],[w3]"])
    assert grid == {"memories.lmem.size": ("8KiB", "64KiB", "256"), "policy.pin": ("[w1,w2]", "[w3]")}
    assert list(grid) == ["memories.lmem.size", "policy.pin"]


def test_points_are_the_cross_product_with_the_last_key_fastest():
    assert sweeps.points({"a": ("1", "2"), "b": ("x", "y", "z")}) == [
        {"a": "1", "b": "x"}, {"a": "1", "b": "y"}, {"a": "1", "b": "z"},
        {"a": "2", "b": "x"}, {"a": "2", "b": "y"}, {"a": "2", "b": "z"},
    ]


@pytest.mark.parametrize("specs, fragment", [
    (["memories.lmem.size"], "--grid 'memories.lmem.size': expected KEY=V1,V2"),
    (["=8KiB"], "--grid '=8KiB': expected KEY=V1,V2"),
    (["a=1", "a=2"], "--grid a: given twice"),
])
def test_parse_grid_rejects_bad_syntax(specs, fragment):
    with pytest.raises(ConfigError, match="^" + fragment.replace("(", r"\(").replace("[", r"\[")):
        sweeps.parse_grid(specs)


@pytest.mark.parametrize("grid, fragment", [
    ({}, "empty grid"),
    ({"memories.lmem.size": ()}, "grid key memories.lmem.size: no values"),
    ({"memories.lmem.size": ("8KiB", "")}, "grid key memories.lmem.size: empty value in '8KiB,'"),
    ({"memories.lmem.size": ("8KiB", "8KiB")}, "grid key memories.lmem.size: value '8KiB' listed twice"),
    ({"memories.lmem.sizee": ("8KiB",)}, "override memories.lmem.sizee=8KiB: unknown key 'sizee'"),
    ({"memories.lmem.size": ("8KiB", "lots")}, "override memories.lmem.size=lots: expected a size"),
])
def test_bad_grids_fail_before_any_point_runs(grid, fragment):
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(")):
        sweeps.sweep(MLP, CHIP, grid, executor=Refusing(), progress=False)


def test_values_may_be_numbers_and_booleans():
    got = sweeps.sweep(MLP, CHIP, {"memories.lmem.size": [8192], "policy.double_buffer": [False]}, executor=Synchronous(), progress=False)
    assert got.grid == {"memories.lmem.size": ("8192",), "policy.double_buffer": ("False",)}
    assert got.rows[0].cycles == expected({"memories.lmem.size": "8KiB"}, Policy(double_buffer=False)).cycles


def test_jobs_and_mode_are_checked():
    with pytest.raises(ConfigError, match="jobs 0: expected a whole number >= 1"):
        sweeps.sweep(MLP, CHIP, GRID, jobs=0, progress=False)
    with pytest.raises(ConfigError, match="mode 'fast': expected one of timing, functional"):
        sweeps.sweep(MLP, CHIP, GRID, mode="fast", progress=False)


def test_functional_mode_needs_default_inputs(tmp_path):
    graph = tmp_path / "g.yaml"
    graph.write_text("name: g\ninputs:\n  x: {shape: [4, 8]}\n"
                     "ops:\n  - {op: active, inputs: [x], params: {active_type: relu}}\noutputs: [active_0]\n")
    with pytest.raises(InputError, match="functional mode needs a random: spec for input\\(s\\) x"):
        sweeps.sweep(graph, CHIP, {"memories.lmem.size": ("8KiB",)}, mode="functional", progress=False)


@pytest.mark.parametrize("mode", ["timing", "functional"])
def test_an_onnx_model_is_swept_as_npusim_run_runs_it(tmp_path, mode):
    """Each point runs the model as `npusim run` does: the same cycles, and in functional mode
    the same random inputs (seed 0)."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])], "mm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], [w])
    path = tmp_path / "mm.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    got = sweeps.sweep(path, CHIP, {"memories.ddr.bandwidth": BANDWIDTHS}, mode=mode, executor=Synchronous(), progress=False)
    for row in got.rows:
        bandwidth = row.values["memories.ddr.bandwidth"]
        rc = main(["run", str(path), "--chip", CHIP, "--mode", mode, "--set", f"memories.ddr.bandwidth={bandwidth}"])
        assert rc == 0 and row.error == ""
        res = sweeps.load_graph(path)
        want = sim.run(res.graph, chips.load(CHIP, row.values), res.defaults if mode == "functional" else None, mode)
        assert row.cycles == want.cycles > 0
    assert got.rows[0].cycles > got.rows[1].cycles


def test_an_onnx_model_with_shape_deciding_inputs_cannot_be_swept(tmp_path):
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"])], "r",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4]),
                               helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "r.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(InputError, match=r"input\(s\) shape decide shapes in the model, so a sweep cannot run it"):
        sweeps.sweep(path, CHIP, {"memories.ddr.bandwidth": BANDWIDTHS}, executor=Refusing(), progress=False)


# ---- rows -------------------------------------------------------------------------------------


def test_rows_come_in_grid_order_with_sim_runs_figures(result):
    assert (result.graph, result.chip, result.mode) == ("mlp", CHIP, "timing")
    assert [row.values for row in result.rows] == sweeps.points(GRID)
    for row in result.rows:
        if row.values["memories.lmem.size"] == "256":
            continue
        res = expected(row.values)
        s = res.stats
        assert row.error == ""
        assert (row.cycles, row.seconds, row.instructions) == (res.cycles, res.seconds, s.instructions)
        transfers = sum(1 for e in res.trace.events if e.engine == "gdma" and e.kind == "dma")
        assert row.engine_instructions == {"gdma": transfers, "tiu": s.instructions - transfers, "arm": 0}
        assert row.utilization == s.utilization and set(row.utilization) == {"gdma", "tiu", "arm"}
        assert (row.ddr_read_bytes, row.ddr_write_bytes) == (s.ddr_read_bytes, s.ddr_write_bytes)
        assert row.peak_bytes == s.peak_bytes and row.capacity_bytes == s.capacity_bytes
    cycles = {tuple(r.values.values()): r.cycles for r in result.rows}
    assert cycles[("8KiB", "16GB/s")] > cycles[("8KiB", "32GB/s")]  # the sweep changed the chip
    assert cycles[("8KiB", "32GB/s")] != cycles[("64KiB", "32GB/s")]


def test_a_point_that_does_not_fit_is_an_error_row(result):
    failed = [row for row in result.rows if row.error]
    assert [row.values["memories.lmem.size"] for row in failed] == ["256", "256"]
    for row in failed:
        assert row.error.startswith("OutOfMemoryError: fc1: ")
        assert row.cycles is None and row.instructions is None and row.peak_bytes == {}
        assert row.capacity_bytes["lmem"] == 256 * 64  # the chip's figures are there: 64 lanes
    with pytest.raises(sim.OutOfMemoryError) as exc:
        expected({"memories.lmem.size": "256"})
    assert failed[0].error == f"OutOfMemoryError: {exc.value}"


def test_rows_keep_grid_order_when_points_finish_in_reverse():
    grid = {"memories.lmem.size": ("8KiB", "16KiB", "64KiB")}
    order = [p["memories.lmem.size"] for p in sweeps.points(grid)]
    finished = {size: threading.Event() for size in order}
    done = []
    run_point = sweeps.run_point

    def last_first(graph_path, chip, point, mode):
        size = point["memories.lmem.size"]
        later = order[order.index(size) + 1:]
        if later:
            assert finished[later[0]].wait(30)
        try:
            row = run_point(graph_path, chip, point, mode)
            done.append(size)
            return row
        finally:
            finished[size].set()

    with ThreadPoolExecutor(len(order)) as pool, pytest.MonkeyPatch.context() as mp:
        mp.setattr(sweeps, "run_point", last_first)
        got = sweeps.sweep(MLP, CHIP, grid, executor=pool, progress=False)
    assert done == order[::-1]
    assert [row.values["memories.lmem.size"] for row in got.rows] == order
    assert [row.cycles for row in got.rows] == [expected(p).cycles for p in sweeps.points(grid)]


def test_one_and_two_worker_processes_give_the_same_rows(result):
    small = {"memories.lmem.size": ("256", "8KiB"), "memories.ddr.bandwidth": BANDWIDTHS}
    one = sweeps.sweep(MLP, CHIP, small, jobs=1, progress=False)
    two = sweeps.sweep(MLP, CHIP, small, jobs=2, progress=False)
    assert one.rows == two.rows == [row for row in result.rows if row.values["memories.lmem.size"] in ("256", "8KiB")]


def test_functional_mode_gives_timing_modes_cycles(result):
    point = {"memories.lmem.size": "8KiB", "memories.ddr.bandwidth": "32GB/s"}
    functional = sweeps.sweep(MLP, CHIP, {k: (v,) for k, v in point.items()}, mode="functional", executor=Synchronous(), progress=False)
    timing = next(r for r in result.rows if r.values == point)
    assert functional.rows[0].cycles == timing.cycles == expected(point, mode="functional").cycles


def test_policy_keys_reach_the_policy():
    grid = {"policy.double_buffer": ("true", "false"), "memories.lmem.size": ("8KiB",)}
    got = sweeps.sweep(MLP, CHIP, grid, executor=Synchronous(), progress=False)
    on, off = got.rows
    assert on.cycles == expected({"memories.lmem.size": "8KiB"}, Policy(double_buffer=True)).cycles
    assert off.cycles == expected({"memories.lmem.size": "8KiB"}, Policy(double_buffer=False)).cycles
    assert policy_from_overrides({"double_buffer": "false"}) == Policy(double_buffer=False)
    assert on.cycles != off.cycles
    with pytest.raises(ConfigError, match="no_such_knob"):
        sweeps.sweep(MLP, CHIP, {"policy.no_such_knob": ("1",)}, executor=Synchronous(), progress=False)


def test_a_bracketed_policy_value_is_one_list():
    got = sweeps.sweep(MLP, CHIP, sweeps.parse_grid(["policy.pinned=[w1,w2],[w3]"]), executor=Synchronous(), progress=False)
    assert [row.values["policy.pinned"] for row in got.rows] == ["[w1,w2]", "[w3]"]
    pinned = [expected({}, Policy(pinned=("w1", "w2"))).cycles, expected({}, Policy(pinned=("w3",))).cycles]
    assert [row.cycles for row in got.rows] == pinned
    assert got.rows[0].cycles != got.rows[1].cycles


# ---- files and the table ----------------------------------------------------------------------


def test_csv_reads_back(result, tmp_path):
    path = tmp_path / "sweep.csv"
    sweeps.write_csv(result, path)
    with open(path, newline="") as f:
        table = list(csv.DictReader(f))
    assert list(table[0]) == [
        "memories.lmem.size", "memories.ddr.bandwidth", "cycles", "seconds", "instructions", "instructions.gdma", "instructions.tiu",
        "instructions.arm", "utilization.gdma", "utilization.tiu", "utilization.arm", "ddr_read_bytes", "ddr_write_bytes",
        "peak_bytes.ddr", "peak_bytes.lmem", "capacity_bytes.ddr", "capacity_bytes.lmem", "error",
    ]
    assert len(table) == len(result.rows)
    for line, row in zip(table, result.rows):
        assert [line[k] for k in GRID] == [row.values[k] for k in GRID]
        assert int(line["capacity_bytes.lmem"]) == row.capacity_bytes["lmem"]
        assert line["error"] == row.error
        if row.error:
            assert line["cycles"] == line["seconds"] == line["peak_bytes.lmem"] == ""
            continue
        assert int(line["cycles"]) == row.cycles and float(line["seconds"]) == row.seconds
        assert int(line["instructions"]) == row.instructions and int(line["instructions.gdma"]) == row.engine_instructions["gdma"]
        assert float(line["utilization.tiu"]) == row.utilization["tiu"]
        assert (int(line["ddr_read_bytes"]), int(line["ddr_write_bytes"])) == (row.ddr_read_bytes, row.ddr_write_bytes)
        assert int(line["peak_bytes.lmem"]) == row.peak_bytes["lmem"]


def test_plot_is_written_and_not_blank(result, tmp_path):
    path = tmp_path / "sweep.png"
    sweeps.plot_sweep(result, path)
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    image = imread(path)
    assert image.shape[0] > 500 and image.shape[1] > 1000  # two columns of panels: two swept keys
    assert len(np.unique(image.reshape(-1, image.shape[-1]), axis=0)) > 10


def test_table_rows(result):
    header, *rows = sweeps.table_rows(result)
    assert header[:3] == ("memories.lmem.size", "memories.ddr.bandwidth", "cycles") and header[-1] == "error"
    assert len(rows) == len(result.rows)
    for cells, row in zip(rows, result.rows):
        assert len(cells) == len(header)
        if row.error:
            assert cells[2] == "-" and cells[-1] == row.error
        else:
            assert cells[2] == f"{row.cycles:,}"
            assert cells[header.index("gdma instr")] == f"{row.engine_instructions['gdma']:,}"
            assert cells[header.index("tiu busy")] == f"{row.utilization['tiu']:.1%}"
            assert cells[header.index("peak ddr")] == human_bytes(row.peak_bytes["ddr"])
            peak = row.peak_bytes["lmem"]
            assert cells[header.index("peak lmem")] == f"{human_bytes(peak)} ({peak / row.capacity_bytes['lmem']:.0%})"


# ---- the command ------------------------------------------------------------------------------


def test_npusim_sweep_end_to_end(capsys, tmp_path):
    out_dir = tmp_path / "study"
    rc = main(["sweep", str(MLP), "--chip", CHIP, "--grid", "memories.lmem.size=8KiB,64KiB", "--jobs", "2", "--out", str(out_dir)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == "mlp on bm1684 (timing mode): 2 points"
    assert lines[1].split()[:3] == ["memories.lmem.size", "cycles", "us"]
    for line, size in zip(lines[2:4], ("8KiB", "64KiB")):
        res = expected({"memories.lmem.size": size})
        assert line.split()[:3] == [size, f"{res.cycles:,}", f"{res.seconds * 1e6:,.2f}"]
    assert lines[4:] == [f"wrote {out_dir / 'sweep.csv'}", f"wrote {out_dir / 'sweep.png'}"]
    with open(out_dir / "sweep.csv", newline="") as f:
        assert [r["memories.lmem.size"] for r in csv.DictReader(f)] == ["8KiB", "64KiB"]
    assert (out_dir / "sweep.png").read_bytes()[:8] == PNG_SIGNATURE


@pytest.mark.parametrize("grid, fragments", [
    (["--grid", "memories.lmem.size"], ("--grid 'memories.lmem.size': expected KEY=V1,V2,...",)),
    (["--grid", "memories.lmem.sizee=8KiB,64KiB"], ("memories.lmem.sizee=8KiB", "unknown key 'sizee'")),
    (["--grid", "memories.lmem.size=8KiB,huge"], ("memories.lmem.size=huge", "expected a size")),
    ([], ("empty grid",)),
])
def test_npusim_sweep_errors_are_one_line(capsys, tmp_path, grid, fragments):
    one_line_error(capsys, ["sweep", MLP, "--chip", CHIP, "--out", tmp_path, *grid], *fragments)
    assert not (tmp_path / "sweep.csv").exists()


# ---- the worked study in docs/ -----------------------------------------------------------------


def test_the_docs_study_quotes_what_the_sweep_gives():
    """docs/lmem-vs-latency.md's table is its CSV's, and points of that CSV run again give the
    same figures: when the lowering or the chip changes, the study must be run again."""
    with open(STUDY.parent / "study-lmem" / "sweep.csv", newline="") as f:
        table = {(r["memories.lmem.size"], r["policy.double_buffer"]): r for r in csv.DictReader(f)}
    assert len(table) == 32
    text = STUDY.read_text()
    for (size, double_buffer), line in table.items():
        shown = rf"^{re.escape(size)}\s+{double_buffer}\s+" + (re.escape(f"{int(line['cycles']):,}") if line["cycles"] else "-") + r"\s"
        assert re.search(shown, text, re.MULTILINE), (size, double_buffer)
    for point in (("1KiB", "true"), ("1KiB", "false"), ("32KiB", "true"), ("512KiB", "true"), ("512KiB", "false")):
        row = sweeps.run_point(ROOT / "examples" / "bottleneck.yaml", "bm1684",
                               {"memories.lmem.size": point[0], "policy.double_buffer": point[1]}, "timing")
        line = table[point]
        assert line["error"] == row.error
        if not row.error:
            assert int(line["cycles"]) == row.cycles and int(line["instructions.gdma"]) == row.engine_instructions["gdma"]
            assert int(line["ddr_read_bytes"]) == row.ddr_read_bytes and int(line["peak_bytes.lmem"]) == row.peak_bytes["lmem"]


# ---- on a Dask cluster ---------------------------------------------------------------------------


@pytest.fixture
def quick_connect(monkeypatch):
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT", 1.0)


def free_port():
    """A local port nothing listens on: bound, read and released."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_dask_cluster_writes_the_csv_of_one_local_job(capsys, tmp_path):
    """Two worker processes of a LocalCluster give, byte for byte, the CSV of `--jobs 1` (its
    columns are simulated figures, no wall time), through the CLI and through a Client's executor."""
    from distributed import Client, LocalCluster

    grid = ["--grid", "memories.lmem.size=256,8KiB", "--grid", "memories.ddr.bandwidth=16GB/s,32GB/s"]
    assert main(["sweep", str(MLP), "--chip", CHIP, *grid, "--jobs", "1", "--out", str(tmp_path / "local")]) == 0
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as dask_cluster:
        assert main(["sweep", str(MLP), "--chip", CHIP, *grid, "--scheduler", dask_cluster.scheduler_address,
                     "--out", str(tmp_path / "dask")]) == 0
        with Client(dask_cluster) as client:
            assert len(client.scheduler_info()["workers"]) == 2
            got = sweeps.sweep(MLP, CHIP, sweeps.parse_grid(grid[1::2]), executor=client.get_executor(), progress=False)
    capsys.readouterr()
    sweeps.write_csv(got, tmp_path / "client.csv")
    local = (tmp_path / "local" / "sweep.csv").read_bytes()
    assert local.count(b"\n") == 5 and b"OutOfMemoryError" in local  # a header, four points, two of them failed
    assert (tmp_path / "dask" / "sweep.csv").read_bytes() == local
    assert (tmp_path / "client.csv").read_bytes() == local


class Recording(Synchronous):
    """Runs each task here, keeping the arguments it was given."""

    def __init__(self):
        self.calls = []

    def submit(self, fn, *args, **kwargs):
        self.calls.append(args)
        return super().submit(fn, *args, **kwargs)


@pytest.mark.parametrize("chip, sent", [("bm1684", "bm1684"), ("chips/bm1684.yaml", str(ROOT / "chips" / "bm1684.yaml"))])
def test_workers_get_files_by_absolute_path(monkeypatch, chip, sent):
    """A worker may run in another folder (`dask worker` started anywhere): the graph file and a
    chip YAML go by absolute path, a shipped chip by its name."""
    monkeypatch.chdir(ROOT)
    executor = Recording()
    got = sweeps.sweep("examples/mlp.yaml", chip, {"memories.lmem.size": ("8KiB",)}, executor=executor, progress=False)
    assert [call[:2] for call in executor.calls] == [(str(MLP), sent)]
    assert got.chip == chip and got.rows[0].cycles == expected({"memories.lmem.size": "8KiB"}).cycles


def test_an_unreachable_scheduler_is_one_line_naming_it(capsys, tmp_path, quick_connect):
    address = f"tcp://127.0.0.1:{free_port()}"
    start = time.monotonic()
    rc = main(["sweep", str(MLP), "--chip", CHIP, "--grid", "memories.lmem.size=8KiB", "--scheduler", address, "--out", str(tmp_path)])
    elapsed = time.monotonic() - start
    err = capsys.readouterr().err
    assert rc == 1 and elapsed < 10, (rc, elapsed)
    assert err.startswith(f"npusim: error: ClusterError: scheduler {address}: cannot connect within 1 s: ") and err.count("\n") == 1, err
    assert not (tmp_path / "sweep.csv").exists()


@pytest.mark.parametrize("address, reason", [
    ("tcp://127.0.0.1", "missing port number"),
    ("http://127.0.0.1:8786", "unknown address scheme 'http'"),
])
def test_a_malformed_scheduler_address_says_why(address, reason):
    with pytest.raises(ClusterError, match=f"^scheduler {re.escape(address)}: not a scheduler's address: .*{reason}"), \
            cluster.dask_executor(address):
        pass


def test_a_scheduler_without_workers_is_an_error(quick_connect):
    from distributed import LocalCluster

    with LocalCluster(n_workers=0, dashboard_address=None) as empty:
        address = empty.scheduler_address
        expected_error = f"^scheduler {re.escape(address)}: no worker joined within 1 s; start one with `dask worker {re.escape(address)}`$"
        with pytest.raises(ClusterError, match=expected_error), cluster.dask_executor(address):
            pass


def test_without_dask_the_cli_says_how_to_install_it(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed raises ImportError
    rc = main(["sweep", str(MLP), "--chip", CHIP, "--grid", "memories.lmem.size=8KiB", "--scheduler", "tcp://127.0.0.1:8786",
               "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 1
    assert err == ("npusim: error: ClusterError: scheduler tcp://127.0.0.1:8786: dask.distributed is not installed; "
                   "pip install 'npusim[dask]'\n")


def test_jobs_and_a_scheduler_are_one_or_the_other(capsys):
    rc = main(["sweep", str(MLP), "--grid", "memories.lmem.size=8KiB", "--jobs", "2", "--scheduler", "tcp://127.0.0.1:8786"])
    assert rc == 1
    assert capsys.readouterr().err == ("npusim: error: ConfigError: npusim sweep: argument --scheduler: "
                                       "not allowed with argument --jobs (see npusim sweep --help)\n")


def test_a_worker_that_dies_is_a_cluster_error():
    import dask
    from distributed import LocalCluster

    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), \
            LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as one:
        address = one.scheduler_address
        with pytest.raises(ClusterError, match=f"^scheduler {re.escape(address)}: a worker died running a point: "), \
                cluster.dask_executor(address) as executor:
            executor.submit(os._exit, 1).result()
