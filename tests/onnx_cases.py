"""The ONNX backend node tests in npusim's scope, shared by tests/test_onnx_backend.py (which
runs them with onnx.backend.test.BackendTest) and bench/conformance.py (a table per op).

The cases are the installed onnx package's (`onnx.backend.test.loader.load_model_tests(
kind="node")`: its test data up to onnx 1.22.0, generated in memory from onnx 1.23 on). A case is
in scope when every node of its model has an op type the importer maps (isa.onnx.OPS):
single-node cases, and the `_expanded` cases (an op's function body) whose nodes are all mapped.
`check` runs one through npusim's ONNX backend (isa.onnx.backend, the `generic` chip by default)
and compares as BackendTest does (onnx's Runner.assert_similar_outputs: same shape, same dtype,
values within the case's rtol and atol).
"""

import glob
import os
from dataclasses import dataclass

import onnx
from onnx import numpy_helper
from onnx.backend.test.loader import load_model_tests
from onnx.backend.test.runner import Runner

from isa.onnx import OPS
from isa.onnx.backend import NpusimBackend

DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclass
class Case:
    name: str
    model: onnx.ModelProto
    data: list  # [(inputs, outputs)], each a list of arrays
    rtol: float
    atol: float

    @property
    def ops(self):
        return tuple(n.op_type for n in self.model.graph.node)

    @property
    def mapped(self):
        return all(n.domain in DEFAULT_DOMAINS and n.op_type in OPS for n in self.model.graph.node)


def _array(value):
    """A tensor as an array; a sequence or optional value as it is."""
    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else value


def _read_dir(model_dir):
    """[(inputs, outputs)] of a case stored as files (onnx up to 1.22)."""
    def tensors(folder, kind):
        paths = sorted(glob.glob(os.path.join(folder, f"{kind}_*.pb")), key=lambda p: int(os.path.basename(p).split("_")[1][:-3]))
        return [numpy_helper.to_array(onnx.load_tensor(p)) for p in paths]

    return [(tensors(d, "input"), tensors(d, "output")) for d in sorted(glob.glob(os.path.join(model_dir, "test_data_set_*")))]


def load_cases():
    """Every node test case of the installed onnx, sorted by name."""
    cases = []
    for tc in sorted(load_model_tests(kind="node"), key=lambda t: t.name):
        if tc.model is not None:
            data = [([_array(a) for a in ins], [_array(b) for b in outs]) for ins, outs in tc.data_sets]
            cases.append(Case(tc.name, tc.model, data, tc.rtol, tc.atol))
        elif tc.model_dir:
            cases.append(Case(tc.name, onnx.load(os.path.join(tc.model_dir, "model.onnx")), _read_dir(tc.model_dir), tc.rtol, tc.atol))
    return cases


def label(case, by_name):
    """The op a case tests: its node's op type; an expanded case counts for the op of the case
    it expands (test_softmax_axis_0_expanded -> Softmax)."""
    if len(case.ops) == 1:
        return case.ops[0]
    base = case.name.split("_expanded")[0]
    if base in by_name and len(by_name[base].ops) == 1:
        return by_name[base].ops[0]
    return "+".join(sorted(set(case.ops)))


def mapped_cases():
    """(case, label) of every case in scope."""
    cases = load_cases()
    by_name = {c.name: c for c in cases}
    return [(c, label(c, by_name)) for c in cases if c.mapped]


def check(case, chip="generic"):
    """Run every data set of a case through the backend; raises AssertionError (a wrong output)
    or a SimError (what npusim refuses) on the first failure."""
    rep = NpusimBackend.prepare(case.model, chip=chip)
    for inputs, expected in case.data:
        Runner.assert_similar_outputs(expected, rep.run(inputs), case.rtol, case.atol)
