"""The network builders of examples/networks/: valid models (checker with strict shape inference)
with the reference implementations' output shapes, parameter counts and operation counts where
their authors publish them, the ops the exporters write, and small versions imported with
isa.from_onnx and run on `generic` against onnx.reference.ReferenceEvaluator."""

import math
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")


sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import onnx_models as M  # noqa: E402
from networks import crowd, faces, pose, small, tpu_v1, video, yolo  # noqa: E402
from refeval import assert_like_onnx_reference  # noqa: E402


def output_shapes(model):
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    return {o.name: [d.dim_value for d in o.type.tensor_type.shape.dim] for o in inferred.graph.output}


def params(model):
    return sum(int(np.prod(t.dims)) for t in model.graph.initializer if t.name.endswith(("weight", "bias")))


def gmacs(model):
    """Multiply-accumulates of the convolutions and Gemms, in billions. A transposed convolution
    counts every output element times in_channels x k x k, as thop (which ultralytics' GFLOPs come
    from) counts it."""
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in (*inferred.graph.value_info, *inferred.graph.output)}
    weights = {t.name: tuple(t.dims) for t in model.graph.initializer}
    total = 0
    for n in model.graph.node:
        if n.op_type == "Conv":
            total += math.prod(shapes[n.output[0]]) * math.prod(weights[n.input[1]][1:])
        elif n.op_type == "ConvTranspose":
            w = weights[n.input[1]]
            total += math.prod(shapes[n.output[0]]) * w[0] * math.prod(w[2:])
        elif n.op_type == "Gemm":
            total += math.prod(weights[n.input[1]]) * shapes[n.output[0]][0]
    return total / 1e9


# (builder, kwargs, output shapes, parameters, published parameters in millions or None, published
# multiply-accumulates in billions or None: ultralytics, YOLOX and YOLOv7 give GFLOPs, twice these).
FULL = {
    "yolov8s": (yolo.yolov8s, {}, {"output0": [1, 84, 8400]}, 11_166_560, 11.2, 14.3),  # ultralytics docs, YOLOv8 table
    "yolov8s_seg": (yolo.yolov8s, dict(task="segment"), {"output0": [1, 116, 8400], "output1": [1, 32, 160, 160]}, 11_821_056, 11.8, 21.3),
    "yolov8s_pose": (yolo.yolov8s, dict(task="pose"), {"output0": [1, 56, 8400]}, 11_626_046, 11.6, 15.1),
    "yolox_s": (yolo.yolox_s, {}, {"output": [1, 8400, 85]}, 8_968_255, 9.0, 13.4),  # YOLOX README, standard models table
    "yolov7": (yolo.yolov7, {}, {f"p{i}": [1, 3, 640 >> i, 640 >> i, 85] for i in (3, 4, 5)}, 36_926_621, 36.9, 52.35),  # yolov7 README
    "yolov3": (yolo.yolov3, {}, {"out0": [1, 255, 19, 19], "out1": [1, 255, 38, 38], "out2": [1, 255, 76, 76]}, 61_949_149, 61.9, None),
    "yolov4": (yolo.yolov4, {}, {f"p{i}": [1, 3, 416 >> i, 416 >> i, 85] for i in (3, 4, 5)}, 64_363_101, None, None),
    "deepsort_extractor": (small.deepsort_extractor, {}, {"output": [1, 512]}, 11_168_896, None, None),
    "lprnet": (small.lprnet, {}, {"output": [1, 68, 18]}, 446_976, None, 0.14875),  # sophon-demo LPRNet README: "148.75 MFlops"
    "retinaface_mnet025": (faces.retinaface_mnet025, {}, {"boxes": [1, 16800, 4], "scores": [1, 16800, 2], "landmarks": [1, 16800, 10]},
                           426_608, 0.43, None),  # biubug6 README: "model size only 1.7M" (float32 bytes)
    "openpose_coco": (pose.openpose_coco, {}, {"net_output": [1, 57, 46, 46]}, 52_311_446, None, None),
    "c3d": (video.c3d, {}, {"output": [1, 101]}, 78_409_573, None, None),
    "p2pnet": (crowd.p2pnet, {}, {"pred_logits": [1, 16384, 2], "pred_points": [1, 16384, 2]}, 17_973_072, None, None),
}


@pytest.mark.parametrize("name", sorted(FULL))
def test_full_size_models_have_the_published_shapes_and_counts(name):
    fn, kwargs, shapes, count, published_m, published_gmacs = FULL[name]
    model = fn(**kwargs)
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == M.OPSET
    assert output_shapes(model) == shapes
    assert EXPORTED_OPS.get(name, set()) <= {n.op_type for n in model.graph.node}
    assert params(model) == count
    if published_m:
        assert round(count / 1e6, 1) == pytest.approx(published_m, abs=0.051)
    if published_gmacs:  # the convolutions' and products' share; LPRNet's figure counts its poolings too (3% more)
        assert gmacs(model) == pytest.approx(published_gmacs, rel=0.01 if published_gmacs > 1 else 0.05)


# The ops the exporters write: SiLU as Sigmoid and Mul, Mish as Softplus, Tanh and Mul, LeakyReLU a
# LeakyRelu (even with slope 0), YOLOv8's DFL a Softmax and a 1x1 Conv, C3D's 3-D Conv and MaxPool.
EXPORTED_OPS = {
    "yolov8s": {"Sigmoid", "Mul", "Split", "Softmax", "Sub", "Div", "Resize", "Concat"},
    "yolov8s_seg": {"ConvTranspose"},
    "yolox_s": {"Slice", "Sigmoid", "Mul", "Transpose"},
    "yolov7": {"Sigmoid", "Mul", "MaxPool"},
    "yolov3": {"LeakyRelu", "Resize"},
    "yolov4": {"Softplus", "Tanh", "Mul", "LeakyRelu", "MaxPool"},
    "deepsort_extractor": {"ReduceL2", "Div", "AveragePool"},
    "lprnet": {"AveragePool", "Pow", "ReduceMean", "Transpose"},
    "retinaface_mnet025": {"LeakyRelu", "Softmax"},
    "c3d": {"Conv", "Relu", "MaxPool", "Reshape", "Gemm"},
}


def test_exported_op_forms():
    """YOLOX's Focus is four strided Slices; YOLOv8 has no Relu; C3D's convolutions and poolings are 3-D."""
    focus = [n for n in yolo.yolox_s(size=64, width=0.125).graph.node if n.op_type == "Slice"]
    assert len(focus) == 4
    assert "Relu" not in {n.op_type for n in yolo.yolov8s(size=64, width=0.125).graph.node}
    c3d = video.c3d()
    assert {n.op_type for n in c3d.graph.node} == EXPORTED_OPS["c3d"]
    assert all(len(a.ints) == 3 for n in c3d.graph.node for a in n.attribute if a.name == "kernel_shape")


def test_yolov5s_raw_heads_leave_out_the_sigmoid():
    raw = M.yolov5s(size=64, width=0.125, sigmoid=False)
    assert "Sigmoid" not in {n.op_type for n in raw.graph.node if n.name.startswith("model.24")}
    assert output_shapes(raw) == output_shapes(M.yolov5s(size=64, width=0.125))


# Small versions: fast to build, evaluate and simulate.
SMALL = {
    "yolov8s": lambda: yolo.yolov8s(size=64, width=0.125),
    "yolov8s_seg": lambda: yolo.yolov8s(size=64, width=0.125, task="segment"),
    "yolov8s_pose": lambda: yolo.yolov8s(size=64, width=0.125, task="pose"),
    "yolox_s": lambda: yolo.yolox_s(size=64, width=0.125),
    "lprnet": lambda: small.lprnet(classes=8),
    "retinaface_mnet025": lambda: faces.retinaface_mnet025(size=64),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_models_simulate_like_the_reference_evaluator(name):
    model = SMALL[name]()
    onnx.checker.check_model(model, full_check=True)
    assert_like_onnx_reference(model, M.random_inputs(model))


@pytest.mark.parametrize("fn, weights, batch, layers, vector", [
    (tpu_v1.mlp0, 20_000_000, 200, 5, 0), (tpu_v1.mlp1, 4_999_696, 168, 4, 0), (tpu_v1.cnn0, 8_020_224, 8, 16, 0),
    (tpu_v1.lstm0, 52_002_816, 64, 24, 34), (tpu_v1.lstm1, 34_028_197, 96, 37, 19)])
def test_tpu_applications_hold_the_papers_weights_and_layers(fn, weights, batch, layers, vector):
    """Table 1's weights (to within the square layers' rounding), layers and batch; CNN0's 2888
    multiply-adds per weight byte, 8 x 19 x 19."""
    g = fn()
    consts = [g.tensors[n] for n in g.tensors if n.endswith(".weight")]
    assert sum(t.size for t in consts) == weights and len(consts) == layers
    assert g.tensors[g.inputs[0]].shape[0] == batch and {t.dtype for t in consts} == {"int8"}
    assert sum(node.op == "mul" for node in g.nodes) == vector
    if fn is tpu_v1.cnn0:
        convs = [node.op for node in g.nodes if node.name.startswith("conv") and "." not in node.name]
        assert batch * 19 * 19 == 2888 and convs == ["conv"] * layers
    with pytest.raises(ValueError, match="int8 only"):
        fn(dtype="float32")


def test_bad_arguments():
    with pytest.raises(ValueError, match="multiple of 32"):
        yolo.yolov8s(size=100)
    with pytest.raises(ValueError, match="task 'obb'"):
        yolo.yolov8s(task="obb")
    with pytest.raises(ValueError, match="16 x 112 x 112"):
        video.c3d(frames=8)
    with pytest.raises(ValueError, match="multiple of 8"):
        pose.openpose_coco(size=100)
