"""npusim's ONNX backend (isa.onnx.backend) under onnx's own backend test runner:
onnx.backend.test.BackendTest runs every node test case of a mapped op (tests/onnx_cases.py)
on the `generic` chip in functional mode, through prepare and run as any backend.

A case npusim cannot run (a float64 op whose npusim op takes no float64, a string, a feature it
rejects) or runs with other numbers (random draws) fails: KNOWN_FAILURES lists each with its
reason, and BackendTest marks them expected failures, so a case that starts passing fails the
run and must leave the list. `python bench/conformance.py` prints the same cases as a table per op.
"""

import re

import numpy as np
import onnx
import onnx_cases
import pytest
from onnx import TensorProto, helper
from onnx.backend.test import BackendTest

import isa
from isa.onnx import backend
from isa.onnx.backend import NpusimBackend

F64_REDUCE = "a float64 reduction: npusim's reduce takes float32, float16, bfloat16 and 8- and 16-bit integers"
F64_SOFTMAX = "a float64 Softmax: npusim's softmax takes float32, float16 and bfloat16"
RANDOM = "RandomUniformLike draws npusim's own random numbers (Philox), not the reference's"
COMPRESS = "Compress along an axis: npusim's data-sized results are 1-D"
DROPOUT = "training-mode Dropout (random dropout)"
SEQUENCE = "a sequence or optional input: npusim takes tensors only"
STRING = "ONNX type STRING has no npusim dtype"

KNOWN_FAILURES = {
    "test_bernoulli_double_expanded": RANDOM,
    "test_bernoulli_expanded": "RandomUniformLike of float64: npusim's random_uniform takes float16 and float32",
    "test_bernoulli_seed_expanded": RANDOM,
    "test_compress_0": COMPRESS,
    "test_compress_1": COMPRESS,
    "test_compress_negative_axis": COMPRESS,
    "test_convtranspose_3d": "a 3-d float ConvTranspose (npusim's deconv is 2-d)",
    "test_equal_string": STRING,
    "test_equal_string_broadcast": STRING,
    "test_flexattention_double_expanded_ver26": F64_SOFTMAX,
    "test_identity_opt": SEQUENCE,
    "test_identity_sequence": SEQUENCE,
    "test_training_dropout": DROPOUT,
    "test_training_dropout_default": DROPOUT,
    "test_training_dropout_default_mask": DROPOUT,
    "test_training_dropout_mask": DROPOUT,
    **{f"test_reduce_log_sum_exp_{form}{expanded}": F64_REDUCE
       for form in ("default_axes_keepdims_example", "default_axes_keepdims_random", "do_not_keepdims_example",
                    "do_not_keepdims_random", "keepdims_example", "keepdims_random", "negative_axes_keepdims_example",
                    "negative_axes_keepdims_random") for expanded in ("", "_expanded")},
}

# Cases only newer onnx packages have (onnx 1.23, opset 28)
NEWER_KNOWN_FAILURES = {
    "test_attention_4d_causal_fp16_expanded": "float16 intermediates round one ulp apart from the reference's",
    "test_attention_local_window_gqa_rank4_mask_expanded": F64_SOFTMAX,
    "test_compress_bfloat16": COMPRESS,
}

CASES = onnx_cases.mapped_cases()
IN_SCOPE = {c.name for c, _ in CASES}

backend_test = BackendTest(NpusimBackend, __name__)
backend_test.include("^(" + "|".join(map(re.escape, sorted(IN_SCOPE))) + ")_cpu$")
for _name in sorted({**KNOWN_FAILURES, **NEWER_KNOWN_FAILURES}.keys() & IN_SCOPE):
    backend_test.xfail(f"^{re.escape(_name)}_cpu$")

# BackendTest makes one unittest class per category; the node tests are run here, without the
# cases it skips (other ops, the CUDA device), so that pytest counts the cases in scope only.
OnnxBackendNodeModelTest = backend_test.test_cases["OnnxBackendNodeModelTest"]
for _attr in [a for a, f in vars(OnnxBackendNodeModelTest).items() if a.startswith("test_") and getattr(f, "__unittest_skip__", False)]:
    delattr(OnnxBackendNodeModelTest, _attr)


def test_known_failures_are_cases_in_scope():
    """Every entry names a case in scope (newer packages keep the older cases), so none goes stale."""
    assert set(KNOWN_FAILURES) <= IN_SCOPE


def test_at_least_97_percent_of_the_cases_in_scope_are_expected_to_pass():
    failing = ({**KNOWN_FAILURES, **NEWER_KNOWN_FAILURES}.keys() & IN_SCOPE)
    assert len(CASES) > 1000
    assert 1 - len(failing) / len(CASES) >= 0.97, f"{len(failing)} of {len(CASES)} expected to fail"


# ---- the backend's own entry points ---------------------------------------------------------------

def _add_model():
    node = helper.make_node("Add", ["a", "b"], ["c"])
    graph = helper.make_graph([node], "add", [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N"]),
                                               helper.make_tensor_value_info("b", TensorProto.FLOAT, [])],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, ["N"])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_run_model_takes_a_list_or_a_dict_and_gives_the_outputs_by_position_and_name():
    a, b = np.arange(5, dtype=np.float32), np.array(0.5, np.float32)
    out = backend.run_model(_add_model(), [a, b])
    np.testing.assert_array_equal(out[0], a + b)
    np.testing.assert_array_equal(out["c"], a + b)
    np.testing.assert_array_equal(backend.run_model(_add_model(), {"b": b, "a": a[:3]})[0], a[:3] + b)


def test_run_node_types_the_node_after_its_inputs():
    node = helper.make_node("Clip", ["x", "lo", "hi"], ["y"])
    x = np.array([-2.0, 0.5, 3.0], np.float32)
    (y,) = backend.run_node(node, [x, np.array(0.0, np.float32), np.array(1.0, np.float32)])
    np.testing.assert_array_equal(y, [0.0, 0.5, 1.0])


def test_prepare_on_another_chip_in_timing_mode_keeps_the_result():
    rep = backend.prepare(_add_model(), chip="bm1684", mode="timing")
    assert rep.run([np.zeros(4096, np.float32), np.zeros((), np.float32)]) == ()
    assert rep.results[-1].cycles > 0


def test_only_the_cpu_device_is_supported():
    assert backend.supports_device("CPU") and not backend.supports_device("CUDA") and not backend.supports_device("TPU")
    with pytest.raises(isa.UnsupportedError, match="device 'CUDA'"):
        backend.prepare(_add_model(), device="CUDA")


def test_too_many_inputs_are_an_input_error():
    with pytest.raises(isa.InputError, match="3 inputs given; the model has 2: a, b"):
        backend.run_model(_add_model(), [np.zeros(1, np.float32)] * 3)


def test_onnx_checker_accepts_the_models_run_node_builds():
    node = helper.make_node("Relu", ["x"], ["y"])
    (y,) = backend.run_node(node, {"x": np.array([[-1.0, 2.0]], np.float32)})
    assert y.shape == (1, 2) and y.tolist() == [[0.0, 2.0]]
    onnx.checker.check_node(node)
