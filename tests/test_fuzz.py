"""Fuzzing (issue 23): valid chip YAML, graph YAML and program text, mutated by hypothesis (fields
dropped, duplicated, given another type or an extreme value; lines dropped, repeated or swapped),
must each load and run to a success or a SimError, within CASE_SECONDS, in a worker process whose
address space is limited (tests/fuzz_worker.py). A hang, a crash of the worker or any other
exception fails the test and shows the text that did it.

The default run tries EXAMPLES inputs of each kind, a few seconds a test; `make fuzz` sets
NPUSIM_FUZZ_EXAMPLES to try many more.
"""

import copy
import json
import os
import re
import select
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

import chips
import isa

HERE = Path(__file__).parent
EXAMPLES = int(os.environ.get("NPUSIM_FUZZ_EXAMPLES", "25"))
CASE_SECONDS = 60  # a load and a run of the small seeds take well under a second; more is a hang
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize="NPUSIM_FUZZ_EXAMPLES" not in os.environ,
                suppress_health_check=list(HealthCheck))

CHIP = (HERE / "chips" / "tiny.yaml").read_text()
GRAPH = """\
name: fuzz
description: every kind of section a graph file has, small enough to run in a blink
inputs:
  x: {shape: [1, 4, 6, 6], dtype: float32, random: normal, mean: 0.5, scale: 2.0, seed: 1}
  i: {shape: [2, 8], dtype: int8, random: uniform, low: -10, high: 10, seed: 2}
constants:
  w: {shape: [4, 4, 3, 3], dtype: float32, random: normal, scale: 0.1, seed: 3}
  b: {value: [[1, 2, 3, 4, 5, 6, 7, 8]], dtype: int8}
  m: {shape: [4, 16], dtype: float32, random: uniform, low: -1.0, high: 1.0}
ops:
  - {op: conv, inputs: [x, w], params: {stride_h: 1, stride_w: 1, pad_h_t: 1, pad_h_b: 1, pad_w_l: 1, pad_w_r: 1}, name: c}
  - {op: active, inputs: [c], params: {active_type: relu}, name: r}
  - {op: add, inputs: [i, b], name: s}
  - {op: reshape, inputs: [r], params: {reshape_param: [36, 4]}, name: flat}
  - {op: matrix_mul, inputs: [flat, m], params: {scale: 0.5}, name: mm}
outputs: {y: mm, z: s}
"""


def _program():
    """A lowered program for the tiny chip: loads, a product, a LUT-free vector op, stores, waits
    and buffers, a constant's bytes."""
    g = isa.Graph("fuzz")
    x = g.input("x", (4, 8), "float32")
    w = g.constant("w", np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4))
    g.output(isa.ops.active(isa.ops.matrix_mul(x, w), "tanh"), "y")
    return isa.lower(g, chips.load(HERE / "chips" / "tiny.yaml")).to_text()


PROGRAM = _program()

# Values a field is given instead of its own: other types, and extremes of each.
EXTREMES = [0, -1, 1, 2, 3, 7, 100, 0.5, 2**31, 2**63, -(2**63), 10**30, 10**39, 1.5, -0.0,
            1e-300, 1e308, -1e308, float("inf"), float("nan"),
            True, False, None, "", "abc", "x" * 300, "1e999999999GB/s", "1e-999999999GiB", "-5GiB", "0B/cycle", "1e30ns",
            "2.5.3MHz", "float128", "int8", "..", "../../etc/passwd", "/dev/zero", [], [0], [-1, 1], [1e9, 1e9], [[[[[]]]]], {},
            {"a": 1}, {"kind": "local"}]
NUMBERS = ["0", "-1", "1", "2", "3", "4", "7", "8", "16", "64", "255", "256", "1000", "4096", "65536", "4294967296",
           "18446744073709551616", "99999999999999999999999999999", "1e308", "nan", "-0", "0x7fffffffffffffff"]
WORDS = ["", "=", "garbage", "x=y", "on=", "op=", "fn=lut", "fn=sort", "cdt=bool", "cdt=int4", "acc=2", "m=9",
         "ddr@0x0:float32[1000000000,1000000000;0,0]", "lmem@-1:int8[1;1]", "nope@0x0:int8[1;1]", "ddr@0x0:float32[4;1",
         "gdma.99", "tiu.-1", "c3.tiu.0", "args=axis:9", "wrap=7"]


def _spots(node, out):
    """(container, key) of every value below node."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        out.append((node, key))
        _spots(value, out)
    return out


@st.composite
def mutated_yaml(draw, text):
    """text's YAML with one to three fields dropped, duplicated, retyped or made extreme; then,
    sometimes, a line of the text dropped or repeated (a repeated key is a YAML error)."""
    data = yaml.safe_load(text)
    for _ in range(draw(st.integers(1, 3))):
        spots = _spots(data, [])
        if not spots:
            break
        parent, key = draw(st.sampled_from(spots))
        action = draw(st.sampled_from(["drop", "duplicate", "replace"]))
        if action == "drop":
            del parent[key]
        elif action == "duplicate" and isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
        elif action == "duplicate":
            parent[f"{key}_again"] = copy.deepcopy(parent[key])
        else:
            parent[key] = copy.deepcopy(draw(st.sampled_from(EXTREMES)))  # later mutations must not change EXTREMES
    out = yaml.safe_dump(data, sort_keys=False, width=1000)
    lines = out.splitlines()
    if lines and draw(st.booleans()):
        i = draw(st.integers(0, len(lines) - 1))
        lines[i:i + 1] = draw(st.sampled_from([[], [lines[i]] * 2, [lines[i] + " " + lines[i]]]))
    return "\n".join(lines) + "\n"


@st.composite
def mutated_program(draw):
    """PROGRAM with one to three lines dropped, repeated or swapped, or, mostly, a word of one
    changed: a number in it made extreme, its dtype another, or the whole word replaced. The
    header line is kept, so that most texts reach the machine's own checks."""
    lines = PROGRAM.splitlines()
    for _ in range(draw(st.integers(1, 3))):
        if len(lines) < 2:
            break
        i = draw(st.sampled_from(range(1, len(lines))))
        action = draw(st.sampled_from(["drop", "repeat", "swap", "word", "word", "word", "word", "word"]))
        if action == "drop":
            del lines[i]
        elif action == "repeat":
            lines.insert(i, lines[i])
        elif action == "swap":
            j = draw(st.sampled_from(range(1, len(lines))))
            lines[i], lines[j] = lines[j], lines[i]
        else:
            words = lines[i].split(" ")
            k = draw(st.sampled_from(range(1, len(words)))) if len(words) > 1 else 0
            words[k] = draw(_mutated_word(words[k]))
            lines[i] = " ".join(words)
    return "\n".join(lines) + "\n"


@st.composite
def _mutated_word(draw, word):
    numbers = list(re.finditer(r"\d+", word))
    dtypes = list(re.finditer("|".join(sorted(isa.dtypes.NAMES, key=len, reverse=True)), word))
    how = draw(st.sampled_from(["number", "dtype", "word"]))
    if how == "number" and numbers:
        span = draw(st.sampled_from(numbers)).span()
        return word[:span[0]] + draw(st.sampled_from(NUMBERS)) + word[span[1]:]
    if how == "dtype" and dtypes:
        span = draw(st.sampled_from(dtypes)).span()
        return word[:span[0]] + draw(st.sampled_from(isa.dtypes.NAMES + ("float128", ""))) + word[span[1]:]
    return draw(st.sampled_from(WORDS))


class Worker:
    """tests/fuzz_worker.py, restarted after a hang or a death."""

    def __init__(self):
        self.proc = None

    def run(self, kind, text):
        """(outcome, detail): "ok", "error" (a SimError), "crash", "hang" or "died"."""
        if self.proc is None or self.proc.poll() is not None:
            env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
            self.proc = subprocess.Popen([sys.executable, str(HERE / "fuzz_worker.py")], cwd=HERE.parent, env=env,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.proc.stdin.write((json.dumps({"kind": kind, "text": text}) + "\n").encode())
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], CASE_SECONDS)
        if not ready:
            self.close()
            return "hang", f"no answer within {CASE_SECONDS} s"
        line = self.proc.stdout.readline()
        if not line:
            return "died", f"the worker ended with status {self.proc.wait()}"
        reply = json.loads(line)
        return reply["outcome"], reply["detail"]

    def close(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@pytest.fixture(scope="module")
def worker():
    w = Worker()
    yield w
    w.close()


def check(worker, kind, text):
    note(text)
    outcome, detail = worker.run(kind, text)
    event(outcome if outcome != "error" else detail.partition(":")[0])  # --hypothesis-show-statistics counts them
    assert outcome in ("ok", "error"), f"{outcome}: {detail}"


@pytest.mark.parametrize("kind, text", [("chip", CHIP), ("graph", GRAPH), ("program", PROGRAM)])
def test_the_seeds_run(worker, kind, text):
    assert worker.run(kind, text)[0] == "ok"


@FUZZ
@given(text=mutated_yaml(CHIP))
def test_fuzzed_chip_yaml_loads_and_runs_or_is_a_sim_error(worker, text):
    check(worker, "chip", text)


@FUZZ
@given(text=mutated_yaml(GRAPH))
def test_fuzzed_graph_yaml_loads_and_runs_or_is_a_sim_error(worker, text):
    check(worker, "graph", text)


@FUZZ
@given(text=mutated_program())
def test_fuzzed_program_text_loads_and_runs_or_is_a_sim_error(worker, text):
    check(worker, "program", text)
