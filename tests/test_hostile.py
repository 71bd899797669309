"""Hostile input (issue 23): one test per class of what an attacker or a new user tried, each with
the smallest input that showed it, asserting the SimError subclass and that the message names the
field and the value. Nothing here may hang, exhaust memory, escape as a traceback or change a
number silently."""

import base64
import os
import re
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import chips
import isa
import sim
import traces
from isa import graphfile, limits, yamlfile
from isa.errors import ConfigError, GraphError, InputError, OutOfMemoryError, ProgramError, ShapeError, SimError, UnsupportedError
from sim.cli import main

TINY = Path(__file__).parent / "chips" / "tiny.yaml"
ROOT = Path(__file__).resolve().parents[1]


def write(folder, name, text):
    path = folder / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def raises(exc_type, fn, *fragments):
    """fn() raises exactly exc_type, in one line naming every fragment; returns the message."""
    with pytest.raises(SimError) as info:
        fn()
    message = str(info.value)
    assert type(info.value) is exc_type, f"{type(info.value).__name__}: {message}"
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def cli(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def one_line_error(rc, err, status=1):
    assert rc == status, err
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


GRAPH = """\
name: g
inputs:
  x: {shape: [2, 4], dtype: float32, random: normal}
ops:
  - {op: active, inputs: [x], params: {active_type: relu}, name: y}
outputs: [y]
"""


# ---- hangs and unbounded memory -----------------------------------------------------------------

LAUGHS = "".join(f"{c}: &{c} [" + ", ".join([f"*{p}"] * 10) + "]\n" for p, c in zip("abcdefgh", "bcdefghi"))
BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + LAUGHS  # 10^9 values once expanded


@pytest.mark.parametrize("where", ["chip", "graph", "set"])
def test_an_alias_bomb_stops_at_the_limit_of_expanded_values(tmp_path, where):
    if where == "chip":
        path = tmp_path / "chip.yaml"
        path.write_text(TINY.read_text() + "bomb:\n" + textwrap.indent(BOMB, "  "))
        fn = lambda: chips.load(path)  # noqa: E731
    elif where == "graph":
        path = write(tmp_path, "g.yaml", GRAPH + "description:\n" + textwrap.indent(BOMB, "  "))
        fn = lambda: graphfile.load(path)  # noqa: E731
    else:
        value = "{" + BOMB.strip().replace("\n", ", ") + "}"
        fn = lambda: chips.load(TINY, {"description": value})  # noqa: E731
    raises(ConfigError, fn, "aliases repeat more than", str(limits.YAML_ALIAS_NODES))


def test_a_merge_of_merges_does_not_double_with_each_level():
    text = "a0: &a0 {k: 1}\n" + "".join(f"a{i}: &a{i} {{<<: [*a{i - 1}, *a{i - 1}], k{i}: {i}}}\n" for i in range(1, 60))
    raises(ConfigError, lambda: yamlfile.parse(text, "m.yaml"), "m.yaml:", "aliases repeat more than")
    small = yamlfile.parse("a: &a {k: 1, j: 2}\nb: {<<: [*a, {k: 3, m: 4}], j: 5}\n", "s.yaml")
    assert small["b"] == {"k": 1, "j": 5, "m": 4}  # the first mapping merged gives a key, the mapping's own win


@pytest.mark.parametrize("depth", [60, 5000])
def test_yaml_nested_deeper_than_the_limit(depth):
    text = "a: " + "[" * depth + "]" * depth + "\n"
    raises(ConfigError, lambda: yamlfile.parse(text, "deep.yaml"), "deep.yaml:1:", "nest")


def test_a_yaml_file_beyond_the_size_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "YAML_BYTES", 100)
    path = write(tmp_path, "big.yaml", "a: " + "x" * 200 + "\n")
    raises(ConfigError, lambda: yamlfile.read(path), str(path), "limit of 100 bytes")


@pytest.mark.parametrize("key, value, fragment", [
    ("memories.ddr.bandwidth", "1e999999999GB/s", "exponent 999999999 is beyond the limit of +-30"),
    ("memories.ddr.size", "1e-999999999GiB", "exponent -999999999 is beyond the limit of +-30"),
    ("memories.ddr.size", "1" + "0" * 60 + "B", "more digits than the limit of 40"),
    ("clock", "1e400", "exponent 400"),
    ("engines.gdma.latency", "1e400", "exponent 400"),
    ("engines.tiu.issue_latency", "1e400", "exponent 400"),
    ("engines.gdma.bandwidth", "1e-20", "outside the limits"),
    ("memories.ddr.size", "1e25", "outside the limits"),
])
def test_unit_strings_with_huge_exponents_are_refused_at_once(key, value, fragment):
    raises(ConfigError, lambda: chips.load(TINY, {key: value}), f"override {key}={value}", fragment)


def test_cores_beyond_the_limit():
    raises(ConfigError, lambda: chips.load("generic", {"cores": 10000}), "cores=10000", "10000 cores", f"limit of {limits.CORES}")


def test_engines_of_a_core_are_its_own_and_the_shared_ones_in_chip_order():
    chip = chips.load("ascend910b")
    for kind in ("dma", "vector", "matrix", "scalar"):
        every = [e for e in chip.engines.values() if kind in e.kinds]
        assert chip.engines_of(kind) == every
        for core in (0, 7, 23):
            assert chip.engines_of(kind, core) == [e for e in every if e.core in (core, None)]


@pytest.mark.parametrize("section", ["inputs", "constants"])
@pytest.mark.parametrize("mode", ["functional", "timing"])
def test_a_random_tensor_larger_than_the_host_cap_is_refused_before_it_is_drawn(tmp_path, capsys, section, mode):
    spec = "{shape: [1000000000, 1000000000], dtype: float32, random: normal}"
    text = GRAPH.replace("  x: {shape: [2, 4], dtype: float32, random: normal}\n",
                         "  x: {shape: [2, 4], dtype: float32, random: normal}\n" + (f"  big: {spec}\n" if section == "inputs" else ""))
    if section == "constants":
        text = text.replace("ops:", f"constants:\n  big: {spec}\nops:")
    path = write(tmp_path, "g.yaml", text)
    raises(ConfigError, lambda: graphfile.load(path), f"{path}:", f"{section}.big",
           "[1000000000, 1000000000]", "8000000000000000000 bytes", "host-memory cap")
    rc, _, err = cli(capsys, "run", path, "--chip", TINY, "--mode", mode)
    assert "what is left of tiny's ddr capacity" in one_line_error(rc, err)


def test_a_graph_input_larger_than_the_chips_ddr_is_refused_when_placed(tmp_path):
    path = write(tmp_path, "g.yaml", GRAPH.replace("{shape: [2, 4], dtype: float32, random: normal}", "{shape: [1024, 1024]}"))
    raises(OutOfMemoryError, lambda: sim.run(graphfile.load(path).graph, chips.load(TINY), mode="timing"),
           "input x", "4194304 bytes", "ddr capacity 1048576")


# ---- silently wrong ---------------------------------------------------------------------------------

def int8_graph():
    g = isa.Graph("feed")
    x = g.input("x", (2, 3), "int8")
    g.output(isa.ops.active(x, "relu"), "y")
    return g


@pytest.mark.parametrize("array, span", [
    (np.array([[200, 1, 2], [3, 4, 5]], np.int16), "int16 values in [1, 200]"),
    (np.array([[255, 0, 0], [0, 0, 0]], np.uint8), "uint8 values in [0, 255]"),
    (np.full((2, 3), 0.5), "float64 values in [0.5, 0.5]"),
])
def test_a_feed_that_would_change_converting_is_refused_naming_its_range(array, span):
    raises(InputError, lambda: sim.run(int8_graph(), "generic", {"x": array}), "input 'x'", span, "int8", "[-128, 127]")


def test_a_feed_that_converts_exactly_is_accepted():
    x = np.array([[100, -100, 0], [127, -128, 5]], np.int16)
    res = sim.run(int8_graph(), "generic", {"x": x})
    assert res.outputs["y"].dtype == np.int8
    np.testing.assert_array_equal(res.outputs["y"], [[100, 0, 0], [127, 0, 5]])
    g = isa.Graph("f")
    g.output(isa.ops.active(g.input("x", (1, 3), "float32"), "relu"), "y")
    np.testing.assert_array_equal(sim.run(g, "generic", {"x": np.array([[0.5, -1, 3]])}).outputs["y"], [[0.5, 0, 3]])
    rounded = sim.run(g, "generic", {"x": np.array([[0.1, 0, 0]])}).outputs["y"]  # a float rounds as any float's store does
    assert rounded[0, 0] == np.float32(0.1)
    raises(InputError, lambda: sim.run(g, "generic", {"x": np.array([[1e39, 0, 0]])}), "float64 values in [0, 1e+39]", "float32")


def test_a_feed_through_the_cli_is_refused_the_same_way(tmp_path, capsys):
    np.savez(tmp_path / "in.npz", x=np.full((64, 512), 200, np.int16))
    rc, _, err = cli(capsys, "run", ROOT / "examples" / "mlp_int8.yaml", "--chip", "bm1684", "--inputs", tmp_path / "in.npz")
    assert "int16 values in [200, 200] do not all convert exactly to int8" in one_line_error(rc, err)


# ---- tracebacks -------------------------------------------------------------------------------------

@pytest.mark.parametrize("params, fragments", [
    ("{scale: abc}", ("ops[0].params.scale", "expected a finite number", "'abc'")),
    ("{stride_h: 1.5}", ("ops[0].params.stride_h", "expected an integer", "1.5")),
    ("{stride_h: true}", ("ops[0].params.stride_h", "expected an integer", "True")),
    ("{bogus: 1}", ("ops[0].params.bogus", "no parameter 'bogus'")),
])
def test_an_op_parameter_of_the_wrong_type(tmp_path, params, fragments):
    op = "matrix_mul, inputs: [x, w]" if "scale" in params else "conv, inputs: [x, w]"
    path = write(tmp_path, "g.yaml", f"""\
        name: g
        inputs:
          x: {{shape: [1, 4, 8, 8], random: normal}}
        constants:
          w: {{shape: [4, 4, 3, 3], random: normal}}
        ops:
          - {{op: {op}, params: {params}, name: y}}
        outputs: [y]
        """)
    raises(ConfigError, lambda: graphfile.load(path), f"{path}:7:", *fragments)


@pytest.mark.parametrize("make, fragments", [
    (lambda f: f.write(b"not a zip at all"), ("not an .npz (zip) file",)),
    (lambda f: np.save(f, np.zeros((64, 512), np.int8)), ("not an .npz (zip) file", "a .npy holds one array")),
    (lambda f: np.savez_compressed(f, x=np.zeros(1 << 24, np.int8)), ("member 'x.npy'", "[16777216] of int8", "bm1684's ddr capacity")),
], ids=["not-a-zip", "npy", "larger-than-ddr"])
def test_inputs_that_are_no_npz_of_arrays(tmp_path, capsys, monkeypatch, make, fragments):
    path = tmp_path / "in.npz"
    with open(path, "wb") as f:
        make(f)
    overrides = ["--set", "memories.ddr.size=4MiB"] if len(fragments) == 3 else []
    rc, _, err = cli(capsys, "run", ROOT / "examples" / "mlp_int8.yaml", "--chip", "bm1684", "--inputs", path, *overrides)
    line = one_line_error(rc, err)
    assert "InputError: --inputs" in line and str(path) in line
    for fragment in fragments:
        assert fragment in line, line


def test_a_negative_seed_names_the_flag(tmp_path, capsys):
    rc, _, err = cli(capsys, "run", ROOT / "examples" / "mlp.yaml", "--seed", "-1")
    assert "argument --seed" in one_line_error(rc, err) and "'-1'" in err


def test_a_closed_pipe_ends_the_output_quietly():
    with subprocess.Popen([sys.executable, "-m", "sim.cli", "ops"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout.readline().startswith(b"op ")
        proc.stdout.close()  # as `head` does once it has its lines
        err = proc.stderr.read().decode()
    assert proc.returncode == 128 + 13 and err == ""


def test_a_saved_trace_whose_clock_is_zero(tmp_path, capsys, tiny):
    g = isa.Graph("t")
    g.output(isa.ops.active(g.input("x", (2, 4), "float32"), "relu"), "y")
    saved = tmp_path / "run.json"
    traces.write_chrome(sim.run(g, tiny, mode="timing").trace, saved)
    damaged = tmp_path / "zero.json"
    damaged.write_text(saved.read_text().replace('"clock_hz":1000000000.0', '"clock_hz":0'))
    rc, _, err = cli(capsys, "report", damaged)
    line = one_line_error(rc, err)
    assert "InputError" in line and str(damaged) in line and "clock_hz: 0 is not a finite number > 0" in line


# ---- program text -----------------------------------------------------------------------------------

PROGRAM = """\
.program chip=tiny graph=hand
.engine gdma
.engine tiu
.input x ddr@0x0:float32[4;1]
.const t ddr@0x100:int8[256;1] {table}
.output y ddr@0x40:float32[4;1]
.buffer lmem@0x0 size=16 name=x.0 first=gdma.0 last=tiu.1
gdma.0 dma src=ddr@0x0:float32[4;1] dst=lmem@0x0:float32[4;1]
gdma.1 wait on=tiu.1
gdma.2 dma src=lmem@0x0:float32[4;1] dst=ddr@0x40:float32[4;1]
tiu.0 wait on=gdma.0
tiu.1 vector fn=relu cdt=float32 dst=lmem@0x0:float32[4;1] src=lmem@0x0:float32[4;1]
"""


def table(n=256):
    return base64.b64encode(zlib.compress(bytes(range(256))[:n])).decode()


def test_the_program_of_these_tests_runs(tiny):
    res = sim.execute(isa.Program.from_text(PROGRAM.format(table=table())), tiny, {"x": np.array([-1, 2, -3, 4], np.float32)})
    np.testing.assert_array_equal(res.outputs["y"], [0, 2, 0, 4])


@pytest.mark.parametrize("old, new, fragments", [
    ("tiu.0 wait on=gdma.0", "tiu.0 wait on=garbage", ("program line 11", "bad instruction id 'garbage'")),
    ("tiu.0 wait on=gdma.0", "tiu.0 wait on=gdma.x", ("program line 11", "'x'", "expected an integer")),
    ("last=tiu.1", "last=%%%", ("program line 7", "buffer 'x.0'", "'%%%'")),
    ("size=16", "size=-16", ("program line 7", "bad size '-16'")),
    ("dst=lmem@0x0:float32[4;1]\ngdma.1", "dst=lmem@0x0:float32[-4;1]\ngdma.1", ("program line 8", "bad dimension '-4'")),
    ("float32[4;1] dst=lmem@0x0", "float32[4,4;1] dst=lmem@0x0", ("program line 8", "2 dims but 1 strides")),
    ("{table}", "{short}", ("program line 5", "constant 't' holds 200 bytes", "takes 256")),
    ("{table}", "!!notbase64", ("program line 5", "constant 't'", "not base64")),
    ("fn=relu cdt=float32 dst=lmem@0x0:float32[4;1] src=lmem@0x0:float32[4;1]",
     "fn=lut cdt=float32 dst=lmem@0x0:float32[4;1] src=lmem@0x0:float32[4;1],lmem@0x10:int8[16;1]",
     ("program line 12", "lut's table is a region of 256 entries", "got 16 entries")),
    ("vector fn=relu cdt=float32 dst=lmem@0x0:float32[4;1] src=lmem@0x0:float32[4;1]", "scalar fn=sort dst= src=",
     ("program line 12", "kernel sort reads 1 source(s) and writes 2 destination(s), got 0 and 0")),
    ("vector fn=relu cdt=float32 dst=lmem@0x0:float32[4;1] src=lmem@0x0:float32[4;1]",
     "scalar fn=sort dst=ddr@0x0:int32[4;1],ddr@0x40:float32[4;1] src=ddr@0x0:float32[4;1]",
     ("program line 12", "kernel sort takes the args axis, stable, descending", "missing axis, stable, descending")),
    ("vector fn=relu cdt=float32 dst=lmem@0x0:float32[4;1] src=lmem@0x0:float32[4;1]",
     "scalar fn=topk dst=ddr@0x0:float32[4;1],ddr@0x40:int32[4;1] src=ddr@0x0:float32[4;1] args=axis:0;descending:1;k:9",
     ("program line 12", "arg k is an integer from 1 to the length of the source along the axis, got 9")),
    ("vector fn=relu cdt=float32 dst=lmem@0x0:float32[4;1] src=lmem@0x0:float32[4;1]",
     "matmul a=lmem@0x0:float32[1,4;4,1] b=lmem@0x20:int32[4,1;1,1] c=lmem@0x40:float32[1,1;1,1] acc=0",
     ("program line 12", "matmul of float32 by int32")),
    ("vector fn=relu cdt=float32", "vector fn=add cdt=int8", ("program line 12", "vector add takes 2 operand(s), got 1")),
    ("src=lmem@0x0:float32[4;1]\n", "src=lmem@0x0:float32[4;1],1000\n", ("program line 12", "vector relu takes 1 operand(s), got 2")),
    (".program chip=tiny graph=hand\n", "", ("program line 1", "first line is `.program chip=NAME graph=NAME`")),
    (".engine tiu\n", ".engine tiu\n.engine tiu\n", ("program line 4", "engine tiu declared twice")),
    ("ddr@0x0:float32[4;1]\n.const", "ddr@0x0:float32[4;1] extra\n.const", ("program line 4", "expected `.input NAME REGION`")),
    ("ddr@0x0:float32[4;1]\n.const", "ddr@-0x10:float32[4;1]\n.const", ("program line 4", "bad address '-0x10'")),
    ("gdma.2 dma", "gdma.2 dma src=ddr@0x0:float32[4;1] src=ddr@0x0:float32[4;1]", ("program line 10", "field src= given twice")),
], ids=["wait-garbage", "wait-index", "lifetime-garbage", "negative-size", "negative-shape", "dims-strides", "const-length",
        "const-base64", "lut-small", "scalar-without-operands", "scalar-without-args", "topk-k", "float-by-int32", "vector-operands",
        "vector-extra-number", "no-header", "engine-twice", "binding-words", "negative-address", "field-twice"])
def test_bad_program_text_names_the_line_the_field_and_the_value(old, new, fragments):
    text = PROGRAM.format(table=table()) if "{table}" not in old else PROGRAM
    assert old in text
    text = text.replace(old, new, 1).replace("{short}", table(200))
    if "{table}" in text:
        text = text.format(table=table())
    raises(ProgramError, lambda: isa.Program.from_text(text), *fragments)


def test_a_vector_number_that_does_not_fit_its_compute_dtype():
    text = PROGRAM.format(table=table()).replace(
        "vector fn=relu cdt=float32 dst=lmem@0x0:float32[4;1] src=lmem@0x0:float32[4;1]",
        "vector fn=add cdt=int8 dst=lmem@0x0:int8[4;1] src=lmem@0x0:int8[4;1],1000")
    raises(ProgramError, lambda: isa.Program.from_text(text), "program line 12", "the number 1000 does not fit add's compute dtype int8")


def test_a_scalar_kernels_argument_is_a_number_a_list_of_numbers_or_a_word_and_survives_the_text_form():
    text = PROGRAM.format(table=table()).replace(
        "vector fn=relu cdt=float32 dst=lmem@0x0:float32[4;1] src=lmem@0x0:float32[4;1]",
        "scalar fn=custom.mine dst=ddr@0x0:float32[4;1] src=ddr@0x0:float32[4;1] args=at:a@b;n:3;x:-0.5;xs:[1|2.5]")
    program = isa.Program.from_text(text)
    scalar = next(i for stream in program.streams.values() for i in stream if isinstance(i, isa.instructions.Scalar))
    assert scalar.args == (("at", "a@b"), ("n", 3), ("x", -0.5), ("xs", (1, 2.5)))
    assert isa.Program.from_text(program.to_text()) == program
    raises(ProgramError, lambda: isa.Program.from_text(text.replace("xs:[1|2.5]", "xs:[1|a@b]")), "program line 12", "bad operand 'a@b'")


def test_a_program_runs_only_on_the_chip_its_header_names():
    program = isa.Program.from_text(PROGRAM.format(table=table()).replace("chip=tiny", "chip=bm1684"))
    raises(ProgramError, lambda: sim.execute(program, chips.load(TINY), mode="timing"), "lowered for chip 'bm1684', not 'tiny'")


def test_constants_together_beyond_the_host_cap_are_refused_before_they_inflate(monkeypatch):
    """Each constant fits the cap, the two together do not: the second is refused by its region's
    size, before its data is inflated."""
    monkeypatch.setattr(limits, "HOST_MEMORY", 400)
    text = PROGRAM.format(table=table()).replace(".output y", f".const u ddr@0x200:int8[256;1] {table()}\n.output y")
    raises(OutOfMemoryError, lambda: isa.Program.from_text(text), "program line 6", "constant 'u'", "takes 256 bytes",
           "the program's constants may take together", "(144 bytes)")


def test_a_program_file_beyond_its_size_limit_is_refused_unread(tmp_path, monkeypatch):
    path = tmp_path / "prog.txt"
    path.write_text(PROGRAM.format(table=table()))
    assert isa.program.read_program(path).chip == "tiny"
    monkeypatch.setattr(limits, "PROGRAM_BYTES", 100)
    raises(ProgramError, lambda: isa.program.read_program(path), str(path), "larger than the limit of 100 bytes")
    raises(ProgramError, lambda: isa.program.read_program(tmp_path), str(tmp_path), "cannot read", "not a regular file")


def test_a_functional_run_beyond_the_host_cap_is_refused_before_memory_is_backed(tiny):
    huge = chips.load(TINY, {"memories.ddr.size": "64GiB"})
    text = PROGRAM.format(table=table()).replace(".output y ddr@0x40:", ".output y ddr@0x400000000:").replace(
        "dst=ddr@0x40:", "dst=ddr@0x400000000:")
    program = isa.Program.from_text(text)
    raises(OutOfMemoryError, lambda: sim.execute(program, huge, {"x": np.zeros(4, np.float32)}), "backs the 17179869216 bytes",
           "ddr 17179869200", "host-memory cap")
    assert sim.execute(program, huge, mode="timing").cycles > 0


def test_an_instruction_whose_functional_work_is_beyond_the_limit(tiny):
    text = PROGRAM.format(table=table()).replace(
        "tiu.1 vector fn=relu cdt=float32 dst=lmem@0x0:float32[4;1] src=lmem@0x0:float32[4;1]",
        "tiu.1 vector fn=reduce_sum cdt=float32 dst=lmem@0x0:float32[4;1] src=lmem@0x0:float32[4,100000,100000;0,0,0]")
    program = isa.Program.from_text(text)
    raises(ProgramError, lambda: sim.execute(program, tiny, {"x": np.zeros(4, np.float32)}), "tiu.1: touches 40000000000 elements",
           f"limit of {limits.INSTRUCTION_WORK}")


# ---- ONNX models (what tests/test_fuzz.py found) ------------------------------------------------------

def onnx_model(nodes, x_shape=(2, 4), inits=()):
    """A model of opset 17 with one float input x and one output y."""
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_initializer_of_undefined_type_is_named():
    w = numpy_helper.from_array(np.ones(4, np.float32), "w")
    w.data_type = TensorProto.UNDEFINED
    m = onnx_model([helper.make_node("Add", ["x", "w"], ["y"])], inits=[w])
    raises(UnsupportedError, lambda: isa.from_onnx(m), "tensor 'w'", "type UNDEFINED", "no npusim dtype")


@pytest.mark.parametrize("as_path", [False, True])
def test_a_name_that_is_not_utf8_is_named_with_its_bytes(tmp_path, as_path):
    data = onnx_model([helper.make_node("Relu", ["x"], ["y"], name="r")]).SerializeToString().replace(b"\x1a\x01r", b"\x1a\x01\xe1")
    path = tmp_path / "m.onnx"
    path.write_bytes(data)
    model = path if as_path else onnx.ModelProto.FromString(data)
    raises(InputError, lambda: isa.from_onnx(model), "model.graph.node[0].name is not UTF-8 text", r"b'\xe1'")


@pytest.mark.parametrize("node, fragments", [
    (helper.make_node("Reshape", [], ["y"], name="r"), ("node r (Reshape) has 0 inputs", "Reshape of opset 17 takes 2")),
    (helper.make_node("Relu", ["x", "x"], ["y"]), ("node y (Relu) has 2 inputs", "takes 1")),
    (helper.make_node("Concat", [], ["y"], axis=0), ("has 0 inputs", "takes at least 1")),
    (helper.make_node("Add", ["x", ""], ["y"]), ("its input 1 (B) is required, but its name is empty",)),
    (helper.make_node("LeakyRelu", ["x"], ["y"], alpha=[0.5, 0.5]), ("attribute 'alpha' is of type FLOATS", "LeakyRelu takes FLOAT")),
    (helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[1.0]), ("attribute 'kernel_shape' is of type FLOATS", "takes INTS")),
    (helper.make_node("MaxPool", ["x"], ["y"]), ("lacks its required attribute(s) kernel_shape",)),
    (helper.make_node("Elu", ["x"], ["y"], name="e", alpha=1.0), ("node e (Elu) has the attribute 'alpha' twice",)),
])
def test_a_node_unlike_its_ops_schema_is_named_before_the_passes_read_it(node, fragments):
    if node.op_type == "Elu":
        node.attribute.append(helper.make_attribute("alpha", 2.0))
    raises(GraphError, lambda: isa.from_onnx(onnx_model([node], (1, 1, 4, 4))), *fragments)


@pytest.mark.parametrize("axes, error, fragments", [
    (np.array([0, 0]), GraphError, ("node u (Unsqueeze): axes [0, 0] name an axis of rank 4 more than once",)),
    (np.array([0.5]), GraphError, ("node u (Unsqueeze): input 1 (axes, 'axes') is float64; Unsqueeze takes integers there",)),
])
def test_unsqueeze_axes_that_repeat_or_are_not_integers(axes, error, fragments):
    m = onnx_model([helper.make_node("Unsqueeze", ["x", "axes"], ["y"], name="u")], inits=[numpy_helper.from_array(axes, "axes")])
    raises(error, lambda: isa.from_onnx(m), *fragments)


@pytest.mark.parametrize("attrs, fragments", [
    ({"strides": [1, 0], "auto_pad": "SAME_UPPER"}, ("strides [1, 0]: must be 2 integers >= 1, one per spatial axis",)),
    ({"kernel_shape": [3]}, ("kernel_shape [3]: must be 2 integers >= 1",)),
    ({"pads": [1, 1]}, ("pads [1, 1]: must be 4 integers, a begin and an end per spatial axis",)),
])
def test_conv_windows_of_the_wrong_length_or_a_zero_stride(attrs, fragments):
    w = numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "w")
    m = onnx_model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **attrs)], (1, 1, 4, 4), [w])
    raises(ShapeError, lambda: isa.from_onnx(m), "node conv (Conv)", *fragments)


def _ints(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


@pytest.mark.parametrize("node, inits, error, fragments", [
    (helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=0), [], ShapeError, ("(DepthToSpace): blocksize 0 must be >= 1",)),
    (helper.make_node("SpaceToDepth", ["x"], ["y"], blocksize=0), [], ShapeError, ("(SpaceToDepth): blocksize 0 must be >= 1",)),
    (helper.make_node("Flatten", ["x"], ["y"], axis=99), [], ShapeError, ("(Flatten): axis 99 is out of range [-4, 4] for rank 4",)),
    (helper.make_node("OneHot", ["i", "d", "v"], ["y"]), [_ints("i", [0]), _ints("d", 2**40), _ints("v", [0, 1])], OutOfMemoryError,
     ("(OneHot): the one-hot positions of shape (1099511627776,) would take 8796093022208 bytes", "the limit is")),
    (helper.make_node("Resize", ["x", "", "", "s"], ["y"]), [_ints("s", [1, 4, 2**40, 4])], OutOfMemoryError,
     ("(Resize): the weights of axis 2 of shape (1099511627776, 4) would take 35184372088832 bytes", "the limit is")),
    (helper.make_node("Split", ["x"], ["y"], axis=1, num_outputs=0), [], ShapeError, ("(Split): num_outputs 0 must be >= 1",)),
    (helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2], p=0), [], ShapeError, ("(LpPool): p 0.0 must be a finite number > 0",)),
    (helper.make_node("Range", ["a", "b", "c"], ["y"]), [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in
                                                         (("a", 0), ("b", np.inf), ("c", 1))],
     UnsupportedError, ("(Range): start 0.0, limit inf and delta 1.0 must be finite",)),
])
def test_attributes_and_static_inputs_out_of_range_are_refused_before_anything_is_allocated(node, inits, error, fragments):
    raises(error, lambda: isa.from_onnx(onnx_model([node], (1, 4, 4, 4), inits)), *fragments)


def test_a_pad_that_makes_a_tensor_beyond_the_chips_memory_is_refused_before_the_lowering_slices_it():
    w = numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[0, 0, 2**63 - 1, 0]),
             helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2]),
             helper.make_node("GlobalAveragePool", ["p"], ["y"])]
    m = onnx_model(nodes, (1, 1, 8, 8), [w])
    raises(OutOfMemoryError, lambda: sim.run(isa.from_onnx(m), "generic", mode="timing"),
           "tensor conv (made by op conv): [1, 1, 9223372036854775813, 6] of float32", "bytes, more than chip generic's largest memory",
           "ddr capacity 17179869184 bytes")


def test_a_stride_far_beyond_the_input_computes_the_one_window_it_leaves():
    """A stride of 2**63 - 1 gives one window along its axis; the machine's views of that
    dimension of one element must not step by it (numpy refused the byte stride)."""
    m = onnx_model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[1, 2**63 - 1])], (1, 1, 4, 4))
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)[..., ::-1].copy()
    y = sim.run(isa.from_onnx(m), "generic", {"x": x}).outputs["y"]
    np.testing.assert_array_equal(y, np.array([[[[7], [11], [15]]]], np.float32))


# ---- accepted where it should not be ------------------------------------------------------------

@pytest.mark.parametrize("name", ["../outside.npy", "/abs/w.npy", "link.npy"])
def test_a_graph_files_file_stays_beneath_its_folder(tmp_path, name):
    folder = tmp_path / "model"
    folder.mkdir()
    np.save(tmp_path / "outside.npy", np.ones((2, 4), np.float32))
    os.symlink(tmp_path / "outside.npy", folder / "link.npy")
    text = GRAPH.replace("ops:", f"constants:\n  w: {{file: {name}}}\nops:")
    path = write(folder, "g.yaml", text)
    raises(ConfigError, lambda: graphfile.load(path), f"{path}:5:", "constants.w.file", repr(name), "outside the graph file's folder")


def test_a_graph_files_file_is_read_with_its_size_checked_first(tmp_path):
    with open(tmp_path / "lie.npy", "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (1 << 40,)})
    path = write(tmp_path, "g.yaml", GRAPH.replace("ops:", "constants:\n  w: {file: lie.npy}\nops:"))
    raises(ConfigError, lambda: graphfile.load(path), f"{path}:5:", "constants.w.file", "[1099511627776] of float32", "host-memory cap")


@pytest.mark.parametrize("spec, fragments", [
    ("{shape: [4], dtype: int8, random: uniform, low: 0, high: 300}", ("random uniform in [0, 300]", "int8's range [-128, 127]")),
    ("{shape: [4], dtype: uint8, random: uniform, low: -1, high: 3}", ("random uniform in [-1, 3]", "uint8's range [0, 255]")),
    ("{shape: [4], dtype: float16, random: uniform, low: 0, high: 1.0e+6}", ("random uniform in [0, 1000000.0]", "float16's range")),
    ("{value: [1.0e+6], dtype: float16}", ("values up to 1000000 in magnitude do not fit float16",)),
])
def test_a_constant_beyond_its_dtypes_range_is_refused(tmp_path, spec, fragments):
    path = write(tmp_path, "g.yaml", GRAPH.replace("ops:", f"constants:\n  c: {spec}\nops:"))
    raises(ConfigError, lambda: graphfile.load(path), f"{path}:5:", "constants.c", *fragments)


# ---- the CLI: the user's errors and npusim's defects --------------------------------------------------

def test_a_defect_of_npusim_is_one_line_exit_2_and_debug_shows_the_traceback(capsys, monkeypatch):
    def broken(args):
        raise RuntimeError("an invariant broke")

    monkeypatch.setattr("sim.cli._chips", broken)
    rc, _, err = cli(capsys, "chips")
    line = one_line_error(rc, err, status=2)
    assert re.search(r"internal error \(a bug in npusim.*--debug.*\): RuntimeError: an invariant broke$", line), line
    with pytest.raises(RuntimeError, match="an invariant broke"):
        main(["chips", "--debug"])


def test_an_unknown_flag_is_a_user_error_on_one_line(capsys):
    rc, out, err = cli(capsys, "run", "g.yaml", "--bogus")
    assert "unrecognized arguments: --bogus" in one_line_error(rc, err) and out == ""
