"""Builders of the networks whose published times docs/data/published.csv records, one module per
family, beside examples/onnx_models.py (whose Net and layers they use: put examples/ on sys.path,
as bench/validate.py and the tests do). Each builder returns an onnx.ModelProto (float32 or
float16, seeded random weights, static shapes, every weight an initializer), except the TPU v1
applications (tpu_v1.py), which are INT8 isa graphs.
"""
