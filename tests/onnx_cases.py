"""The ONNX backend node tests, run on npusim: shared by tests/test_onnx_conformance.py and
bench/conformance.py.

The cases come from the installed onnx package: its test data (onnx/backend/test/data/node,
shipped up to onnx 1.22.0) when present, else `onnx.backend.test.loader.load_model_tests(
kind="node")`. A case is "of a mapped op" when every node of its model has an op type the
importer maps (isa.onnx.OPS): single-node cases, and the `_expanded` cases (an op's function
body) whose nodes are all mapped. Each case runs on the `generic` chip in functional mode:
from_onnx (the inputs a shape depends on given as values, the rest as run inputs), isa.lower,
sim.execute, and every output compared with the expected one as the ONNX backend runner does
(same shape, where npusim's one-element (1,) stands for ONNX's scalar (), same dtype, and
np.testing.assert_allclose with the case's rtol and atol, 1e-3 and 1e-7 by default).
"""

import glob
import os
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

import chips
import isa
import sim
from isa.onnx import OPS, static_inputs

DEFAULT_DOMAINS = ("", "ai.onnx")


def node_dir():
    """The node test data shipped in the installed onnx, or None."""
    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
    return path if os.path.isdir(path) else None


@dataclass
class Case:
    name: str
    model: onnx.ModelProto
    source: object  # the case's folder, or its data sets [(inputs, outputs)] as lists of arrays
    rtol: float = 1e-3
    atol: float = 1e-7
    ops: tuple = field(default=())

    @property
    def mapped(self):
        return all(n.domain in DEFAULT_DOMAINS and n.op_type in OPS for n in self.model.graph.node)

    def data_sets(self):
        """[(inputs, outputs)], each a list of (ONNX name, array) in the model's order."""
        ins, outs = [i.name for i in self.model.graph.input], [o.name for o in self.model.graph.output]
        inits = {t.name for t in self.model.graph.initializer}
        ins = [n for n in ins if n not in inits]
        if not isinstance(self.source, str):  # generated cases: arrays, or TensorProtos for some types
            return [(list(zip(ins, map(_array, a))), list(zip(outs, map(_array, b)))) for a, b in self.source]
        sets = []
        for data_dir in sorted(glob.glob(os.path.join(self.source, "test_data_set_*"))):
            a = [_read_tensor(p) for p in sorted(glob.glob(os.path.join(data_dir, "input_*.pb")), key=_number)]
            b = [_read_tensor(p) for p in sorted(glob.glob(os.path.join(data_dir, "output_*.pb")), key=_number)]
            sets.append((list(zip(ins, a)), list(zip(outs, b))))
        return sets


def _array(value):
    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)


def _read_tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def _from_dir(case_dir, name, rtol=1e-3, atol=1e-7):
    model = onnx.load(os.path.join(case_dir, "model.onnx"))
    return Case(name, model, case_dir, rtol, atol, tuple(n.op_type for n in model.graph.node))


def _number(path):
    return int(os.path.basename(path).split("_")[1].split(".")[0])


def load_cases():
    """Every node test case, sorted by name."""
    root = node_dir()
    if root is not None:
        names = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
        return [_from_dir(os.path.join(root, d), d) for d in names]
    from onnx.backend.test.loader import load_model_tests

    cases = []
    for tc in sorted(load_model_tests(kind="node"), key=lambda t: t.name):
        if tc.model_dir and os.path.exists(os.path.join(tc.model_dir, "model.onnx")):
            cases.append(_from_dir(tc.model_dir, tc.name, tc.rtol, tc.atol))
        elif tc.model is not None and tc.data_sets:
            cases.append(Case(tc.name, tc.model, list(tc.data_sets), tc.rtol, tc.atol, tuple(n.op_type for n in tc.model.graph.node)))
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
    """(case, label) of every case of a mapped op."""
    cases = load_cases()
    by_name = {c.name: c for c in cases}
    return [(c, label(c, by_name)) for c in cases if c.mapped]


def run(case, chip=None):
    """Run every data set of a case on the chip (generic by default); raises AssertionError
    (a wrong output) or a SimError (a feature npusim rejects) on the first failure."""
    chip = chip or chips.load("generic")
    needed = set(static_inputs(case.model))
    graph = None if needed else isa.from_onnx(case.model)  # before the data: a model npusim refuses fails here
    for inputs, expected in case.data_sets():
        given = dict(inputs)
        if needed:
            graph = isa.from_onnx(case.model, values={k: v for k, v in given.items() if k in needed})
        feeds = {isa.onnx.tensor_name(k): v for k, v in given.items() if k not in needed}
        feeds = {k: v.reshape(graph.tensors[k].shape) for k, v in feeds.items() if k in graph.inputs}
        result = sim.run(graph, chip, inputs=feeds, mode="functional")
        outs = list(graph.outputs)
        assert len(outs) == len(expected), f"{len(outs)} outputs, expected {len(expected)}"
        for name, (ename, want) in zip(outs, expected):
            got = result.outputs[name]
            compare(got, want, case.rtol, case.atol, ename)


def compare(got, want, rtol, atol, what):
    if want.shape == () and got.shape == (1,):
        got = got.reshape(())
    assert got.shape == want.shape, f"output {what}: shape {got.shape}, expected {want.shape}"
    assert got.dtype == want.dtype, f"output {what}: dtype {got.dtype}, expected {want.dtype}"
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"output {what}")
