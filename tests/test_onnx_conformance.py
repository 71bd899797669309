"""The ONNX backend node tests of every op the importer maps, on the `generic` chip in
functional mode (tests/onnx_cases.py: the cases, their runner and the comparison).

A case npusim cannot run (a float64 op whose npusim op takes no float64, a string, a feature
it rejects) or runs with other numbers (a Cast out of range, which ONNX leaves undefined; random
draws) fails: those are listed in KNOWN_FAILURES, each with its reason, as strict xfails, so the
count stays visible and a case that starts passing must leave the list.
`python bench/conformance.py` prints the same cases as a table per op.
"""

import onnx_cases
import pytest

import chips
from isa import SimError

GENERIC = chips.load("generic")

# reasons shared by many cases
WRAPS = "ONNX leaves a float Cast out of an integer type's range undefined; the case expects wrap-around, npusim saturates"
F64_REDUCE = "a float64 reduction: npusim's reduce takes float32, float16, bfloat16 and 8- and 16-bit integers"

KNOWN_FAILURES = {
    # Casts to the 4- and 2-bit integers out of their range, which ONNX leaves undefined: 24
    "test_cast_FLOAT16_to_INT2": WRAPS,
    "test_cast_FLOAT16_to_INT4": WRAPS,
    "test_cast_FLOAT16_to_UINT2": WRAPS,
    "test_cast_FLOAT16_to_UINT4": WRAPS,
    "test_cast_FLOAT_to_INT2": WRAPS,
    "test_cast_FLOAT_to_INT4": WRAPS,
    "test_cast_FLOAT_to_UINT2": WRAPS,
    "test_cast_FLOAT_to_UINT4": WRAPS,
    "test_castlike_FLOAT16_to_INT2": WRAPS,
    "test_castlike_FLOAT16_to_INT2_expanded": WRAPS,
    "test_castlike_FLOAT16_to_INT4": WRAPS,
    "test_castlike_FLOAT16_to_INT4_expanded": WRAPS,
    "test_castlike_FLOAT16_to_UINT2": WRAPS,
    "test_castlike_FLOAT16_to_UINT2_expanded": WRAPS,
    "test_castlike_FLOAT16_to_UINT4": WRAPS,
    "test_castlike_FLOAT16_to_UINT4_expanded": WRAPS,
    "test_castlike_FLOAT_to_INT2": WRAPS,
    "test_castlike_FLOAT_to_INT2_expanded": WRAPS,
    "test_castlike_FLOAT_to_INT4": WRAPS,
    "test_castlike_FLOAT_to_INT4_expanded": WRAPS,
    "test_castlike_FLOAT_to_UINT2": WRAPS,
    "test_castlike_FLOAT_to_UINT2_expanded": WRAPS,
    "test_castlike_FLOAT_to_UINT4": WRAPS,
    "test_castlike_FLOAT_to_UINT4_expanded": WRAPS,
    # float64 where npusim's op does not take it: 17
    "test_flexattention_double_expanded_ver26": "a float64 Softmax: npusim's softmax takes float32, float16 and bfloat16",
    "test_reduce_log_sum_exp_default_axes_keepdims_example": F64_REDUCE,
    "test_reduce_log_sum_exp_default_axes_keepdims_example_expanded": F64_REDUCE,
    "test_reduce_log_sum_exp_default_axes_keepdims_random": F64_REDUCE,
    "test_reduce_log_sum_exp_default_axes_keepdims_random_expanded": F64_REDUCE,
    "test_reduce_log_sum_exp_do_not_keepdims_example": F64_REDUCE,
    "test_reduce_log_sum_exp_do_not_keepdims_example_expanded": F64_REDUCE,
    "test_reduce_log_sum_exp_do_not_keepdims_random": F64_REDUCE,
    "test_reduce_log_sum_exp_do_not_keepdims_random_expanded": F64_REDUCE,
    "test_reduce_log_sum_exp_keepdims_example": F64_REDUCE,
    "test_reduce_log_sum_exp_keepdims_example_expanded": F64_REDUCE,
    "test_reduce_log_sum_exp_keepdims_random": F64_REDUCE,
    "test_reduce_log_sum_exp_keepdims_random_expanded": F64_REDUCE,
    "test_reduce_log_sum_exp_negative_axes_keepdims_example": F64_REDUCE,
    "test_reduce_log_sum_exp_negative_axes_keepdims_example_expanded": F64_REDUCE,
    "test_reduce_log_sum_exp_negative_axes_keepdims_random": F64_REDUCE,
    "test_reduce_log_sum_exp_negative_axes_keepdims_random_expanded": F64_REDUCE,
    # other: 15
    "test_bernoulli_double_expanded": "RandomUniformLike draws npusim's own random numbers (Philox), not the reference's",
    "test_bernoulli_expanded": "RandomUniformLike of float64: npusim's random_uniform takes float16 and float32",
    "test_bernoulli_seed_expanded": "RandomUniformLike draws npusim's own random numbers (Philox), not the reference's",
    "test_compress_0": "Compress along an axis: npusim's data-sized results are 1-D",
    "test_compress_1": "Compress along an axis: npusim's data-sized results are 1-D",
    "test_compress_negative_axis": "Compress along an axis: npusim's data-sized results are 1-D",
    "test_convtranspose_3d": "a 3-d float ConvTranspose (npusim's deconv is 2-d)",
    "test_equal_string": "ONNX type STRING has no npusim dtype",
    "test_equal_string_broadcast": "ONNX type STRING has no npusim dtype",
    "test_identity_opt": "a sequence or optional input",
    "test_identity_sequence": "a sequence or optional input",
    "test_training_dropout": "training-mode Dropout (random dropout)",
    "test_training_dropout_default": "training-mode Dropout (random dropout)",
    "test_training_dropout_default_mask": "training-mode Dropout (random dropout)",
    "test_training_dropout_mask": "training-mode Dropout (random dropout)",
}

# Cases only newer onnx packages generate (onnx 1.23, opset 28; `make test` in a fresh venv
# installs the newest onnx, whose node tests come from onnx.backend.test.loader)
NEWER_KNOWN_FAILURES = {
    "test_attention_3d_causal_bf16_expanded": "bfloat16 intermediates round one ulp apart from the reference's",
    "test_attention_4d_attn_mask_causal_bf16_expanded": "bfloat16 intermediates round one ulp apart from the reference's",
    "test_attention_4d_causal_bf16_expanded": "bfloat16 intermediates round one ulp apart from the reference's",
    "test_attention_4d_causal_fp16_expanded": "float16 intermediates round one ulp apart from the reference's",
    "test_attention_4d_causal_padded_kv_bf16_expanded": "bfloat16 intermediates round one ulp apart from the reference's",
    "test_attention_4d_padded_kv_bf16_expanded": "bfloat16 intermediates round one ulp apart from the reference's",
    "test_attention_local_window_gqa_rank4_mask_expanded": "a float64 Softmax: npusim's softmax takes float32, float16 and bfloat16",
    "test_bitshift_left_int32_overflow": "a left shift saturates where ONNX drops the bits shifted out",
    "test_bitshift_left_int8_overflow": "a left shift saturates where ONNX drops the bits shifted out",
    "test_compress_bfloat16": "Compress along an axis: npusim's data-sized results are 1-D",
}

CASES = onnx_cases.mapped_cases()


def _param(case, op):
    marks = ()
    reason = KNOWN_FAILURES.get(case.name) or NEWER_KNOWN_FAILURES.get(case.name)
    if reason:
        marks = pytest.mark.xfail(strict=True, raises=(AssertionError, SimError), reason=reason)
    return pytest.param(case, id=case.name, marks=marks)


@pytest.mark.parametrize("case", [_param(c, op) for c, op in CASES])
def test_node_case(case):
    onnx_cases.run(case, GENERIC)


def test_known_failures_are_cases_of_mapped_ops():
    """Every entry names a case (onnx 1.22.0's; newer packages keep them), so none goes stale."""
    assert set(KNOWN_FAILURES) <= {c.name for c, _ in CASES}


def test_there_are_node_tests_to_run():
    assert len(CASES) > 1000
