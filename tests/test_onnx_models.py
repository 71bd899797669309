"""The ONNX model builders of examples/onnx_models.py: valid models (checker with strict shape
inference) with the real architectures' output shapes and parameter counts, and small versions
imported with isa.from_onnx and run on `generic`, against onnx.reference.ReferenceEvaluator."""

import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx.reference import ReferenceEvaluator  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import onnx_models as M  # noqa: E402
from refeval import assert_like_onnx_reference  # noqa: E402

# Small versions: fast to build, check, evaluate and simulate.
SMALL = {
    "resnet50": dict(size=32, width=0.125, classes=10),
    "mobilenet_v2": dict(size=32, width=0.25, classes=10),
    "yolov5s": dict(size=64, width=0.125),
    "yolov5s_decode": dict(size=64, width=0.125, decode=True),
    "bert_encoder_layer": dict(seq=8, hidden=32, heads=4),
    "bert_decomposed": dict(seq=8, hidden=32, heads=4, decompose_layernorm=True, mask=True),
}
BUILDER = {"yolov5s_decode": "yolov5s", "bert_decomposed": "bert_encoder_layer"}


def small(name, **kwargs):
    return M.MODELS[BUILDER.get(name, name)](**SMALL[name], **kwargs)


def output_shapes(model):
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    return {o.name: [d.dim_value for d in o.type.tensor_type.shape.dim] for o in inferred.graph.output}


def op_types(model):
    return {n.op_type for n in model.graph.node}


@pytest.mark.parametrize("name, kwargs, shapes, params", [
    ("resnet50", dict(batch=2), {"output": [2, 1000]}, 25_557_032),  # torchvision resnet50
    ("mobilenet_v2", dict(batch=2), {"output": [2, 1000]}, 3_504_872),  # torchvision mobilenet_v2
    ("yolov5s", dict(batch=1), {"p3": [1, 3, 80, 80, 85], "p4": [1, 3, 40, 40, 85], "p5": [1, 3, 20, 20, 85]}, 7_235_389),  # yolov5s.yaml
    ("bert_encoder_layer", dict(batch=2), {"output": [2, 128, 768]}, 7_087_872),  # BertLayer of bert-base
])
def test_full_size_models_are_valid_with_the_papers_shapes(name, kwargs, shapes, params):
    model = M.MODELS[name](**kwargs)
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == M.OPSET == 17
    assert output_shapes(model) == shapes
    trainable = sum(int(np.prod(t.dims)) for t in model.graph.initializer if t.name.endswith(("weight", "bias")))
    assert trainable == params


def test_exported_op_forms():
    """BatchNormalization stays a node; ReLU6 is Clip, SiLU Sigmoid + Mul, GELU its Erf form."""
    assert {"Conv", "BatchNormalization", "Relu", "MaxPool", "Add", "GlobalAveragePool", "Flatten", "Gemm"} == op_types(small("resnet50"))
    assert {"Conv", "BatchNormalization", "Clip", "Add", "GlobalAveragePool", "Flatten", "Gemm"} == op_types(small("mobilenet_v2"))
    yolo = {"Conv", "BatchNormalization", "Sigmoid", "Mul", "Add", "MaxPool", "Concat", "Resize", "Reshape", "Transpose"}
    assert yolo == op_types(small("yolov5s"))
    assert {"MatMul", "Add", "Reshape", "Transpose", "Div", "Softmax", "LayerNormalization", "Erf", "Mul"} == \
        op_types(small("bert_encoder_layer"))
    assert {"LayerNormalization"} - op_types(small("bert_decomposed")) == {"LayerNormalization"}
    assert {"ReduceMean", "Sub", "Pow", "Sqrt"} <= op_types(small("bert_decomposed"))


def test_yolov5s_decoded_output_is_ultralytics_export_shape():
    model = M.yolov5s(size=64, width=0.125, decode=True)
    onnx.checker.check_model(model, full_check=True)
    assert output_shapes(model) == {"output0": [1, 3 * (8 * 8 + 4 * 4 + 2 * 2), 85]}
    assert output_shapes(M.yolov5s(size=96, width=0.125, classes=3)) == {"p3": [1, 3, 12, 12, 8], "p4": [1, 3, 6, 6, 8],
                                                                         "p5": [1, 3, 3, 3, 8]}


@pytest.mark.parametrize("name", sorted(SMALL))
@pytest.mark.parametrize("dtype", M.DTYPES)
def test_small_models_are_valid_and_evaluate(name, dtype):
    model = small(name, dtype=dtype)
    onnx.checker.check_model(model, full_check=True)
    outs = ReferenceEvaluator(model).run(None, M.random_inputs(model))
    for out in outs:
        assert out.dtype == dtype and np.isfinite(out).all() and np.std(out, dtype=np.float64) > 0


def test_same_seed_same_bytes_other_seed_other_weights():
    a, b, c = (M.mobilenet_v2(size=32, width=0.25, seed=s) for s in (0, 0, 1))
    assert a.SerializeToString() == b.SerializeToString() != c.SerializeToString()


def test_bad_arguments():
    with pytest.raises(ValueError, match="multiple of 32"):
        M.yolov5s(size=100)
    with pytest.raises(ValueError, match="multiple of heads"):
        M.bert_encoder_layer(hidden=100, heads=12)
    with pytest.raises(ValueError, match="dtype 'int8'"):
        M.resnet50(dtype="int8")


def test_cli_writes_the_models(tmp_path, capsys):
    assert M.main(["--out", str(tmp_path), "--model", "bert_encoder_layer", "--seq", "16"]) == 0
    model = onnx.load(tmp_path / "bert_encoder_layer.onnx")
    assert output_shapes(model) == {"output": [1, 16, 768]}
    assert "bert_encoder_layer.onnx" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_models_simulate_like_the_reference_evaluator(name):
    model = small(name)
    assert_like_onnx_reference(model, M.random_inputs(model))
