"""Evaluate a graph with each op's numpy reference, or an ONNX model with onnx's reference
evaluator: what the machine's outputs must equal."""

import numpy as np
from onnx.reference import ReferenceEvaluator

import isa
import sim
from isa.ops import REGISTRY


def evaluate(graph, inputs, chip):
    values = dict(inputs)
    values.update(graph.constants)
    for node in graph.nodes:
        opdef = REGISTRY[node.op]
        row = chip.support(opdef.support_key(node.params))
        outs = opdef.reference([values[t] for t in node.inputs], node.params, row.compute)
        values.update(zip(node.outputs, outs))
    return {name: values[t] for name, t in graph.outputs.items()}


def assert_like_onnx_reference(model, inputs):
    """The model imported and run on `generic` gives onnx's reference evaluator's outputs: the
    same names and shapes, within 1e-4 of each value and of the outputs' spread (not their size:
    YOLO's sigmoids sit near 0.5)."""
    want = dict(zip([o.name for o in model.graph.output], ReferenceEvaluator(model).run(None, inputs)))
    got = sim.run(isa.from_onnx(model), "generic", inputs).outputs
    assert set(got) == set(want)
    for key, w in want.items():
        assert got[key].shape == w.shape, key
        np.testing.assert_allclose(got[key], w, rtol=1e-4, atol=1e-4 * max(np.std(w, dtype=np.float64), 1e-6) + 1e-6, err_msg=key)
