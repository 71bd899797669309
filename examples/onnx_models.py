"""Real models as ONNX graphs with seeded random weights, built with onnx.helper: no download,
no torch. Each builder returns an `onnx.ModelProto` at opset 17 (OPSET) that passes
`onnx.checker.check_model(model, full_check=True)` (which runs strict shape inference), with
static shapes and every weight an initializer, laid out as torch.onnx.export writes the same
network in eval mode: BatchNormalization stays a BatchNormalization node (not folded into the
convolution), a Linear layer is Gemm (transB=1) after Flatten or MatMul + Add on a 3-D input,
ReLU6 is Clip, SiLU is Sigmoid + Mul, GELU is its Erf form (opset 17 has no Gelu op).

- `resnet50`: He et al., "Deep Residual Learning for Image Recognition", CVPR 2016, Table 1
  (50-layer column), as torchvision builds it (ResNet v1.5: the stride on the 3x3 convolution
  of a bottleneck, a 1x1 convolution + BN projection on the shortcut where the shape changes).
- `mobilenet_v2`: Sandler et al., "MobileNetV2: Inverted Residuals and Linear Bottlenecks",
  CVPR 2018, Table 2, with torchvision's channel rounding (`make_divisible`, a multiple of 8).
- `yolov5s`: ultralytics/yolov5 models/yolov5s.yaml from release v6.0 on (depth_multiple 0.33,
  width_multiple 0.50: a 6x6/2 stem convolution, C3 blocks, SPPF, a PANet neck of nearest
  upsampling + Concat) and its Detect head: a 1x1 convolution per level, Reshape to
  (N, 3, 85, ny, nx), Transpose to (N, 3, ny, nx, 85), Sigmoid. `decode=True` adds the box
  decoding ultralytics exports (Split, grid and anchor arithmetic, Concat) for one
  (N, 25200, 85) output at 640 x 640.
- `bert_encoder_layer`: Devlin et al., "BERT: Pre-training of Deep Bidirectional Transformers
  for Language Understanding", NAACL 2019 (BERT-base: hidden 768, 12 heads, feed-forward 3072),
  one layer as Hugging Face's BertLayer exports: Q/K/V MatMul + Add, Reshape and Transpose into
  heads, scores / sqrt(head size), Softmax, context, output projection, residual +
  LayerNormalization (or its ReduceMean/Sub/Pow/Sqrt/Div decomposition), GELU feed-forward,
  residual + LayerNormalization.

Weights: convolutions He-normal (std sqrt(2 / fan_in)); BatchNormalization scale in [0.5, 1],
bias N(0, 0.05), running mean N(0, 0.05), running variance in [0.5, 1.5]; classifiers and BERT's
dense layers N(0, 0.02), their biases N(0, 0.02). Same arguments and seed, same bytes.

    python examples/onnx_models.py --out out/models                 # all four, default sizes
    python examples/onnx_models.py --out out/models --model yolov5s --size 320 --dtype float16
"""

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

OPSET = 17
DTYPES = ("float32", "float16")  # the builders here: opset 17's Conv takes no bfloat16
PRODUCER = "npusim examples/onnx_models.py"


class Net:
    """An ONNX graph under construction: nodes, initializers and the static shape of every value.
    Each layer method adds its nodes under a node name (the value it produces has the same name)
    and returns that value's name."""

    def __init__(self, name, dtype, seed, constant_nodes=False, dtypes=DTYPES):
        self.constant_nodes = constant_nodes  # weights as Constant nodes (Paddle2ONNX), not initializers
        if str(dtype) not in dtypes:  # the float dtypes the calling builder's ops take
            raise ValueError(f"dtype {dtype!r}: expected one of {', '.join(dtypes)} (these builders write float models)")
        self.name = name
        self.dtype = np.dtype(dtype)
        self.elem = helper.np_dtype_to_tensor_dtype(self.dtype)
        self.rng = np.random.default_rng(seed)
        self.nodes, self.initializers, self.inputs, self.outputs = [], [], [], []
        self.shapes = {}

    # --- graph plumbing ---

    def input(self, name, shape):
        self.inputs.append(helper.make_tensor_value_info(name, self.elem, shape))
        self.shapes[name] = tuple(shape)
        return name

    def output(self, value, name):
        """Make `value` a graph output called `name` (renaming it where it is produced and used)."""
        for node in self.nodes:
            for port in (node.output, node.input):
                for i, v in enumerate(port):
                    if v == value:
                        port[i] = name
        self.shapes[name] = self.shapes.pop(value)
        self.outputs.append(helper.make_tensor_value_info(name, self.elem, self.shapes[name]))
        return name

    def const(self, name, array, dtype=None):
        """An initializer (or a Constant node): `array` in the net's dtype (or `dtype`)."""
        array = np.asarray(array, dtype=dtype or self.dtype)
        if self.constant_nodes:
            self.nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array, name)))
        else:
            self.initializers.append(numpy_helper.from_array(array, name))
        self.shapes[name] = array.shape
        return name

    def node(self, op, inputs, name, shape, **attrs):
        self.nodes.append(helper.make_node(op, list(inputs), [name], name=name, **attrs))
        self.shapes[name] = tuple(shape)
        return name

    def model(self, doc):
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name=PRODUCER, doc_string=doc)
        while self.initializers:  # handed over one at a time: the weights are never held twice (a 14B head is 1.6 GB)
            model.graph.initializer.append(self.initializers.pop(0))
        model.ir_version = 8  # opset 17's IR version: readable by onnxruntime >= 1.13 and older onnx releases
        return model

    def normal(self, shape, std):
        return self.rng.standard_normal(shape) * std

    # --- layers ---

    def conv(self, x, out, k, stride=1, pad=None, group=1, bias=False, name="conv"):
        """A 2-D or 3-D convolution (the input's rank decides). k, stride and pad are one number
        for every spatial axis or one per axis; pad defaults to k // 2."""
        n, c, *sizes = self.shapes[x]
        k, stride = per_axis(k, len(sizes)), per_axis(stride, len(sizes))
        pad = [kk // 2 for kk in k] if pad is None else per_axis(pad, len(sizes))
        fan_in = c // group * math.prod(k)
        inputs = [x, self.const(f"{name}.weight", self.normal((out, c // group, *k), math.sqrt(2 / fan_in)))]
        if bias:
            inputs.append(self.const(f"{name}.bias", self.normal(out, 0.02)))
        spatial = [(d + 2 * p - kk) // s + 1 for d, p, kk, s in zip(sizes, pad, k, stride)]
        return self.node("Conv", inputs, name, (n, out, *spatial), kernel_shape=k, strides=stride, pads=pad * 2, group=group,
                         dilations=[1] * len(sizes))

    def conv_transpose(self, x, out, k, stride, pad=0, bias=True, name="deconv"):
        """nn.ConvTranspose2d(c, out, k, stride, pad): the weight is (in, out, k, k)."""
        n, c, h, w = self.shapes[x]
        inputs = [x, self.const(f"{name}.weight", self.normal((c, out, k, k), math.sqrt(2 / (c * k * k))))]
        if bias:
            inputs.append(self.const(f"{name}.bias", self.normal(out, 0.02)))
        oh, ow = ((d - 1) * stride - 2 * pad + k for d in (h, w))
        return self.node("ConvTranspose", inputs, name, (n, out, oh, ow), kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)

    def batch_norm(self, x, name, eps=1e-5):
        c = self.shapes[x][1]
        params = (self.rng.uniform(0.5, 1.0, c), self.normal(c, 0.05), self.normal(c, 0.05), self.rng.uniform(0.5, 1.5, c))
        names = [self.const(f"{name}.{p}", v) for p, v in zip(("weight", "bias", "running_mean", "running_var"), params)]
        return self.node("BatchNormalization", [x, *names], name, self.shapes[x], epsilon=eps, momentum=0.9)

    def unary(self, op, x, name, **attrs):
        return self.node(op, [x], name, self.shapes[x], **attrs)

    def binary(self, op, a, b, name):
        shape = np.broadcast_shapes(self.shapes[a], self.shapes[b])
        return self.node(op, [a, b], name, shape)

    def scalar(self, name, value):
        return self.const(name, np.array(value))

    def relu6(self, x, name):
        return self.node("Clip", [x, self.scalar(f"{name}.min", 0), self.scalar(f"{name}.max", 6)], name, self.shapes[x])

    def silu(self, x, name):
        return self.binary("Mul", x, self.unary("Sigmoid", x, f"{name}.sigmoid"), name)

    def leaky_relu(self, x, alpha, name):
        return self.unary("LeakyRelu", x, name, alpha=float(alpha))

    def mish(self, x, name):
        """Mish as x * tanh(softplus(x)), the form torch exports before opset 18 has a Mish op."""
        return self.binary("Mul", x, self.unary("Tanh", self.unary("Softplus", x, f"{name}.softplus"), f"{name}.tanh"), name)

    def softmax(self, x, axis, name):
        return self.unary("Softmax", x, name, axis=axis)

    def slice(self, x, starts, ends, axes, name, steps=None):
        """Slice with its starts, ends, axes (and steps) as int64 initializers."""
        shape = list(self.shapes[x])
        steps = list(steps or [1] * len(axes))
        for start, end, axis, step in zip(starts, ends, axes, steps):
            shape[axis] = len(range(*slice(start, end, step).indices(shape[axis])))
        inputs = [x] + [self.const(f"{name}.{what}", v, np.int64) for what, v in
                        (("starts", starts), ("ends", ends), ("axes", axes), ("steps", steps))]
        return self.node("Slice", inputs, name, shape)

    def split(self, x, sizes, axis, name):
        """torch's chunk / split along `axis`: one Split node, its outputs `name`.0, `name`.1, ..."""
        outs = [f"{name}.{i}" for i in range(len(sizes))]
        self.nodes.append(helper.make_node("Split", [x, self.const(f"{name}.split", sizes, np.int64)], outs, name=name, axis=axis))
        for out, size in zip(outs, sizes):
            shape = list(self.shapes[x])
            shape[axis] = size
            self.shapes[out] = tuple(shape)
        return outs

    def reduce(self, op, x, axes, name, keepdims=True):
        """A reduction over `axes` with the axes as an attribute (opset 17's ReduceMean, ReduceL2...)."""
        shape = [1 if i in axes else d for i, d in enumerate(self.shapes[x]) if keepdims or i not in axes]
        return self.node(op, [x], name, shape, axes=list(axes), keepdims=int(keepdims))

    def max_pool(self, x, k, stride, pad, name, ceil=False):
        return self._pool("MaxPool", x, k, stride, pad, name, ceil)

    def avg_pool(self, x, k, stride, pad, name, ceil=False):
        """nn.AvgPool2d with count_include_pad=True (torch's default), as torch exports it."""
        return self._pool("AveragePool", x, k, stride, pad, name, ceil, count_include_pad=1)

    def _pool(self, op, x, k, stride, pad, name, ceil, **attrs):
        """A 2-D or 3-D pooling; k, stride and pad one number or one per spatial axis."""
        n, c, *sizes = self.shapes[x]
        k, stride, pad = (per_axis(v, len(sizes)) for v in (k, stride, pad))
        rounding = math.ceil if ceil else math.floor
        spatial = [rounding((d + 2 * p - kk) / s) + 1 for d, p, kk, s in zip(sizes, pad, k, stride)]
        if ceil:
            attrs["ceil_mode"] = 1
        return self.node(op, [x], name, (n, c, *spatial), kernel_shape=k, strides=stride, pads=pad * 2, **attrs)

    def classifier(self, x, classes, name):
        """torchvision's head: GlobalAveragePool, Flatten, Gemm with the weight (classes, features)."""
        n, c = self.shapes[x][:2]
        x = self.node("GlobalAveragePool", [x], f"{name}.avgpool", (n, c, 1, 1))
        x = self.node("Flatten", [x], f"{name}.flatten", (n, c), axis=1)
        weight = self.const(f"{name}.weight", self.normal((classes, c), 0.02))
        return self.node("Gemm", [x, weight, self.const(f"{name}.bias", self.normal(classes, 0.02))], name, (n, classes), transB=1)

    def concat(self, values, axis, name):
        shape = list(self.shapes[values[0]])
        shape[axis] = sum(self.shapes[v][axis] for v in values)
        return self.node("Concat", values, name, shape, axis=axis)

    def upsample2(self, x, name):
        """nn.Upsample(scale_factor=2, mode="nearest") as torch exports it."""
        n, c, h, w = self.shapes[x]
        scales = self.const(f"{name}.scales", [1, 1, 2, 2], np.float32)
        return self.node("Resize", [x, "", scales], name, (n, c, 2 * h, 2 * w), mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor")

    def reshape(self, x, shape, name):
        assert math.prod(shape) == math.prod(self.shapes[x]), (name, shape, self.shapes[x])
        return self.node("Reshape", [x, self.const(f"{name}.shape", shape, np.int64)], name, shape)

    def transpose(self, x, perm, name):
        return self.node("Transpose", [x], name, [self.shapes[x][p] for p in perm], perm=list(perm))

    def linear(self, x, out, name):
        """A torch Linear on a 3-D input: MatMul by the (in, out) weight, then Add the bias."""
        *lead, k = self.shapes[x]
        y = self.node("MatMul", [x, self.const(f"{name}.weight", self.normal((k, out), 0.02))], f"{name}.matmul", (*lead, out))
        return self.binary("Add", y, self.const(f"{name}.bias", self.normal(out, 0.02)), name)


def per_axis(value, n):
    """A number for every one of n axes, or a list of n numbers, as a list."""
    return [value] * n if isinstance(value, int) else list(value)


def make_divisible(v, divisor=8):
    """torchvision's and ultralytics' channel rounding: the nearest multiple of `divisor`, at least
    `divisor`, and never more than 10% below v."""
    rounded = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * v else rounded


# --- ResNet-50 ---

RESNET50_LAYERS = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (planes, blocks, stride of the first block)


def resnet50(batch=1, dtype="float32", size=224, width=1.0, classes=1000, seed=0):
    """ResNet-50 (He et al. 2016), torchvision's layout: input "input" (batch, 3, size, size),
    output "output" (batch, classes). `width` scales every layer's channels (1.0: the paper's
    64 to 2048)."""
    net = Net("resnet50", dtype, seed)
    ch = lambda c: max(1, round(c * width))  # noqa: E731
    x = net.input("input", (batch, 3, size, size))
    x = net.unary("Relu", net.batch_norm(net.conv(x, ch(64), 7, 2, 3, name="conv1"), "bn1"), "relu")
    x = net.max_pool(x, 3, 2, 1, "maxpool")
    for i, (planes, blocks, stride) in enumerate(RESNET50_LAYERS, 1):
        for j in range(blocks):
            x = _bottleneck(net, x, ch(planes), stride if j == 0 else 1, f"layer{i}.{j}")
    net.output(net.classifier(x, classes, "fc"), "output")
    return net.model(f"ResNet-50 (He et al. 2016), torchvision layout, random weights (seed {seed})")


def _bottleneck(net, x, planes, stride, name):
    out = planes * 4
    y = net.unary("Relu", net.batch_norm(net.conv(x, planes, 1, name=f"{name}.conv1"), f"{name}.bn1"), f"{name}.relu1")
    y = net.unary("Relu", net.batch_norm(net.conv(y, planes, 3, stride, name=f"{name}.conv2"), f"{name}.bn2"), f"{name}.relu2")
    y = net.batch_norm(net.conv(y, out, 1, name=f"{name}.conv3"), f"{name}.bn3")
    if stride != 1 or net.shapes[x][1] != out:
        x = net.batch_norm(net.conv(x, out, 1, stride, name=f"{name}.downsample.0"), f"{name}.downsample.1")
    return net.unary("Relu", net.binary("Add", y, x, f"{name}.add"), f"{name}.relu3")


# --- MobileNetV2 ---

MOBILENET_V2_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                         (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))  # t, c, n, s


def mobilenet_v2(batch=1, dtype="float32", size=224, width=1.0, classes=1000, seed=0):
    """MobileNetV2 (Sandler et al. 2018, Table 2), torchvision's layout: input "input"
    (batch, 3, size, size), output "output" (batch, classes). `width` is the paper's width
    multiplier (channels rounded to multiples of 8)."""
    net = Net("mobilenet_v2", dtype, seed)
    x = net.input("input", (batch, 3, size, size))
    x = _conv_bn_relu6(net, x, make_divisible(32 * width), 3, 2, "features.0")
    index = 1
    for t, c, n, s in MOBILENET_V2_SETTINGS:
        for i in range(n):
            x = _inverted_residual(net, x, make_divisible(c * width), s if i == 0 else 1, t, f"features.{index}")
            index += 1
    x = _conv_bn_relu6(net, x, make_divisible(1280 * max(1.0, width)), 1, 1, f"features.{index}")
    net.output(net.classifier(x, classes, "classifier.1"), "output")
    return net.model(f"MobileNetV2 (Sandler et al. 2018), width {width}, torchvision layout, random weights (seed {seed})")


def _conv_bn_relu6(net, x, out, k, stride, name, group=1):
    y = net.batch_norm(net.conv(x, out, k, stride, group=group, name=f"{name}.0"), f"{name}.1")
    return net.relu6(y, f"{name}.2")


def _inverted_residual(net, x, out, stride, expand, name):
    c = net.shapes[x][1]
    hidden = round(c * expand)
    y, layer = x, 0
    if expand != 1:
        y, layer = _conv_bn_relu6(net, y, hidden, 1, 1, f"{name}.conv.0"), 1
    y = _conv_bn_relu6(net, y, hidden, 3, stride, f"{name}.conv.{layer}", group=hidden)  # depthwise
    y = net.batch_norm(net.conv(y, out, 1, name=f"{name}.conv.{layer + 1}"), f"{name}.conv.{layer + 2}")  # linear bottleneck
    return net.binary("Add", x, y, f"{name}.add") if stride == 1 and c == out else y


# --- YOLOv5s ---

YOLO_ANCHORS = ((10, 13, 16, 30, 33, 23), (30, 61, 62, 45, 59, 119), (116, 90, 156, 198, 373, 326))  # pixels, P3 P4 P5
YOLO_STRIDES = (8, 16, 32)


def yolov5s(batch=1, dtype="float32", size=640, width=0.50, depth=0.33, classes=80, decode=False, sigmoid=True, seed=0):
    """A YOLOv5s detector (ultralytics yolov5s.yaml, v6.0 on): input "images" (batch, 3, size,
    size), size a multiple of 32. Outputs: "p3", "p4", "p5", each (batch, 3, size/stride,
    size/stride, classes + 5) after the Sigmoid, strides 8, 16, 32; with `decode`, one "output0"
    (batch, 3 * (the three levels' cells), classes + 5) of decoded boxes as ultralytics exports it.
    `sigmoid=False` leaves the three heads raw, as the 3-output export of sophon-demo's YOLOv5 sample
    (docs/YOLOv5_Export_Guide.md) writes them. `width` and `depth` are yolov5.yaml's width_multiple
    and depth_multiple (0.50, 0.33: "s")."""
    if size % 32:
        raise ValueError(f"size {size}: YOLOv5 needs a multiple of 32")
    net = Net("yolov5s", dtype, seed)
    ch = lambda c: make_divisible(c * width)  # noqa: E731
    n = lambda k: max(round(k * depth), 1)  # noqa: E731
    x = net.input("images", (batch, 3, size, size))
    layers = []
    # backbone
    for i, (op, args) in enumerate((
        (yolo_conv, (ch(64), 6, 2, 2)),                    # 0-P1/2
        (yolo_conv, (ch(128), 3, 2)),                      # 1-P2/4
        (c3, (ch(128), n(3))),                         # 2
        (yolo_conv, (ch(256), 3, 2)),                      # 3-P3/8
        (c3, (ch(256), n(6))),                         # 4
        (yolo_conv, (ch(512), 3, 2)),                      # 5-P4/16
        (c3, (ch(512), n(9))),                         # 6
        (yolo_conv, (ch(1024), 3, 2)),                     # 7-P5/32
        (c3, (ch(1024), n(3))),                        # 8
        (sppf, (ch(1024), 5)),                         # 9
    )):
        x = op(net, x, *args, name=f"model.{i}")
        layers.append(x)
    # neck (PANet)
    x = yolo_conv(net, x, ch(512), 1, 1, name="model.10")
    layers.append(x)
    x = net.upsample2(x, "model.11")
    layers.append(x)
    x = net.concat([x, layers[6]], 1, "model.12")
    layers.append(x)
    layers.append(c3(net, x, ch(512), n(3), shortcut=False, name="model.13"))
    layers.append(yolo_conv(net, layers[13], ch(256), 1, 1, name="model.14"))
    layers.append(net.upsample2(layers[14], "model.15"))
    layers.append(net.concat([layers[15], layers[4]], 1, "model.16"))
    layers.append(c3(net, layers[16], ch(256), n(3), shortcut=False, name="model.17"))  # P3/8 small
    layers.append(yolo_conv(net, layers[17], ch(256), 3, 2, name="model.18"))
    layers.append(net.concat([layers[18], layers[14]], 1, "model.19"))
    layers.append(c3(net, layers[19], ch(512), n(3), shortcut=False, name="model.20"))  # P4/16 medium
    layers.append(yolo_conv(net, layers[20], ch(512), 3, 2, name="model.21"))
    layers.append(net.concat([layers[21], layers[10]], 1, "model.22"))
    layers.append(c3(net, layers[22], ch(1024), n(3), shortcut=False, name="model.23"))  # P5/32 large
    heads = [_detect(net, layers[i], level, classes, decode, sigmoid) for level, i in enumerate((17, 20, 23))]
    if decode:
        no = classes + 5
        flat = [net.reshape(h, (batch, math.prod(net.shapes[h][1:4]), no), f"model.24.view{i}") for i, h in enumerate(heads)]
        net.output(net.concat(flat, 1, "model.24.cat"), "output0")
    else:
        for level, head in enumerate(heads):
            net.output(head, f"p{level + 3}")
    return net.model(f"YOLOv5s (ultralytics yolov5s.yaml v6), width {width}, depth {depth}, {size}x{size}, "
                     f"{'decoded' if decode else 'three raw heads'}, random weights (seed {seed})")


def yolo_conv(net, x, out, k, stride=1, pad=None, name="conv"):
    """ultralytics Conv: convolution without bias, BatchNorm (eps 0.001), SiLU."""
    y = net.batch_norm(net.conv(x, out, k, stride, pad, name=f"{name}.conv"), f"{name}.bn", eps=1e-3)
    return net.silu(y, f"{name}.act")


def c3(net, x, out, blocks, shortcut=True, name="c3"):
    """CSP bottleneck with three convolutions: cv3(Concat(m(cv1(x)), cv2(x)))."""
    hidden = out // 2
    y = yolo_conv(net, x, hidden, 1, name=f"{name}.cv1")
    for i in range(blocks):
        z = yolo_conv(net, y, hidden, 1, name=f"{name}.m.{i}.cv1")
        z = yolo_conv(net, z, hidden, 3, name=f"{name}.m.{i}.cv2")
        y = net.binary("Add", y, z, f"{name}.m.{i}.add") if shortcut else z
    return yolo_conv(net, net.concat([y, yolo_conv(net, x, hidden, 1, name=f"{name}.cv2")], 1, f"{name}.cat"), out, 1, name=f"{name}.cv3")


def sppf(net, x, out, k, name="sppf"):
    """Spatial pyramid pooling, fast: three chained k x k stride-1 max pools, concatenated."""
    y = yolo_conv(net, x, net.shapes[x][1] // 2, 1, name=f"{name}.cv1")
    pools = [y]
    for i in range(3):
        pools.append(net.max_pool(pools[-1], k, 1, k // 2, f"{name}.m{i}"))
    return yolo_conv(net, net.concat(pools, 1, f"{name}.cat"), out, 1, name=f"{name}.cv2")


def _detect(net, x, level, classes, decode, sigmoid=True):
    """One Detect level: 1x1 conv to 3 * (classes + 5), (N, 3, no, ny, nx) -> (N, 3, ny, nx, no), Sigmoid
    (unless neither `decode` nor `sigmoid`)."""
    n, _, ny, nx = net.shapes[x]
    no, name = classes + 5, f"model.24.m.{level}"
    y = net.conv(x, 3 * no, 1, bias=True, name=name)
    y = net.transpose(net.reshape(y, (n, 3, no, ny, nx), f"{name}.view"), (0, 1, 3, 4, 2), f"{name}.permute")
    if not (decode or sigmoid):
        return y
    y = net.unary("Sigmoid", y, f"{name}.sigmoid")
    if not decode:
        return y
    # xy = (xy * 2 + grid) * stride, wh = (wh * 2) ** 2 * anchor_grid, with grid the cell's corner - 0.5
    split = [f"{name}.xy", f"{name}.wh", f"{name}.conf"]
    sizes = net.const(f"{name}.split", [2, 2, classes + 1], np.int64)
    net.nodes.append(helper.make_node("Split", [y, sizes], split, name=f"{name}.split", axis=4))
    for value, c in zip(split, (2, 2, classes + 1)):
        net.shapes[value] = (n, 3, ny, nx, c)
    yv, xv = np.meshgrid(np.arange(ny), np.arange(nx), indexing="ij")
    grid = np.broadcast_to(np.stack((xv, yv), 2)[None, None] - 0.5, (1, 3, ny, nx, 2))
    anchors = np.broadcast_to(np.array(YOLO_ANCHORS[level], float).reshape(1, 3, 1, 1, 2), (1, 3, ny, nx, 2))
    two, stride = net.scalar(f"{name}.two", 2), net.scalar(f"{name}.stride", YOLO_STRIDES[level])
    xy = net.binary("Mul", split[0], two, f"{name}.xy2")
    xy = net.binary("Mul", net.binary("Add", xy, net.const(f"{name}.grid", grid), f"{name}.xygrid"), stride, f"{name}.xyout")
    wh = net.binary("Pow", net.binary("Mul", split[1], two, f"{name}.wh2"), net.scalar(f"{name}.square", 2), f"{name}.whpow")
    wh = net.binary("Mul", wh, net.const(f"{name}.anchor_grid", anchors), f"{name}.whout")
    return net.concat([xy, wh, split[2]], 4, f"{name}.cat")


# --- BERT ---

def bert_encoder_layer(batch=1, seq=128, hidden=768, heads=12, intermediate=None, dtype="float32", decompose_layernorm=False,
                       mask=False, seed=0):
    """One BERT encoder layer (Devlin et al. 2019; BERT-base: hidden 768, 12 heads, intermediate
    4 * hidden = 3072), as Hugging Face's BertLayer exports: input "hidden_states" (batch, seq,
    hidden) and, with `mask`, "attention_mask" (batch, 1, 1, seq), the additive mask (0 or
    -10000) added to the attention scores; output "output" (batch, seq, hidden).
    `decompose_layernorm` writes each LayerNormalization as ReduceMean, Sub, Pow, ReduceMean, Add,
    Sqrt, Div, Mul, Add (as opsets before 17 export it)."""
    if hidden % heads:
        raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
    net = Net("bert_encoder_layer", dtype, seed)
    d, intermediate = hidden // heads, intermediate or 4 * hidden
    x = net.input("hidden_states", (batch, seq, hidden))
    m = net.input("attention_mask", (batch, 1, 1, seq)) if mask else None

    def heads_of(value, perm, name):
        return net.transpose(net.reshape(value, (batch, seq, heads, d), f"{name}.view"), perm, f"{name}.permute")

    a = "attention.self"
    q = heads_of(net.linear(x, hidden, f"{a}.query"), (0, 2, 1, 3), f"{a}.query")      # (B, heads, S, d)
    k = heads_of(net.linear(x, hidden, f"{a}.key"), (0, 2, 3, 1), f"{a}.key")          # (B, heads, d, S)
    v = heads_of(net.linear(x, hidden, f"{a}.value"), (0, 2, 1, 3), f"{a}.value")      # (B, heads, S, d)
    scores = net.node("MatMul", [q, k], f"{a}.scores", (batch, heads, seq, seq))
    scores = net.binary("Div", scores, net.scalar(f"{a}.sqrt_d", math.sqrt(d)), f"{a}.scale")
    if m:
        scores = net.binary("Add", scores, m, f"{a}.mask")
    probs = net.unary("Softmax", scores, f"{a}.softmax", axis=-1)
    context = net.node("MatMul", [probs, v], f"{a}.context", (batch, heads, seq, d))
    context = net.reshape(net.transpose(context, (0, 2, 1, 3), f"{a}.context.permute"), (batch, seq, hidden), f"{a}.context.view")
    y = net.binary("Add", net.linear(context, hidden, "attention.output.dense"), x, "attention.output.residual")
    y = _layer_norm(net, y, "attention.output.LayerNorm", decompose_layernorm)
    h = net.linear(y, intermediate, "intermediate.dense")
    h = _gelu(net, h, "intermediate.gelu")
    out = net.binary("Add", net.linear(h, hidden, "output.dense"), y, "output.residual")
    net.output(_layer_norm(net, out, "output.LayerNorm", decompose_layernorm), "output")
    return net.model(f"One BERT encoder layer (Devlin et al. 2019), hidden {hidden}, {heads} heads, seq {seq}, "
                     f"random weights (seed {seed})")


def _layer_norm(net, x, name, decompose, eps=1e-12):
    c = net.shapes[x][-1]
    gamma = net.const(f"{name}.weight", 1 + net.normal(c, 0.02))
    beta = net.const(f"{name}.bias", net.normal(c, 0.02))
    if not decompose:
        return net.node("LayerNormalization", [x, gamma, beta], name, net.shapes[x], axis=-1, epsilon=eps)
    shape = (*net.shapes[x][:-1], 1)
    mean = net.node("ReduceMean", [x], f"{name}.mean", shape, axes=[-1], keepdims=1)
    centered = net.binary("Sub", x, mean, f"{name}.sub")
    var = net.node("ReduceMean", [net.binary("Pow", centered, net.scalar(f"{name}.two", 2), f"{name}.pow")], f"{name}.var", shape,
                   axes=[-1], keepdims=1)
    std = net.unary("Sqrt", net.binary("Add", var, net.scalar(f"{name}.eps", eps), f"{name}.add_eps"), f"{name}.sqrt")
    y = net.binary("Div", centered, std, f"{name}.div")
    return net.binary("Add", net.binary("Mul", y, gamma, f"{name}.mul"), beta, name)


def _gelu(net, x, name):
    """GELU as torch exports it before opset 20: x * 0.5 * (1 + erf(x / sqrt(2)))."""
    e = net.unary("Erf", net.binary("Div", x, net.scalar(f"{name}.sqrt2", math.sqrt(2)), f"{name}.div"), f"{name}.erf")
    y = net.binary("Mul", x, net.binary("Add", e, net.scalar(f"{name}.one", 1), f"{name}.add"), f"{name}.mul")
    return net.binary("Mul", y, net.scalar(f"{name}.half", 0.5), name)


# --- a PP-LCNet-style classifier, exported two ways ---

PP_LCNET_BLOCKS = ((1, 3, 1, 2), (2, 3, 2, 2), (2, 3, 1, 4), (4, 5, 2, 4), (4, 5, 1, 8))  # (expansion, kernel, stride, out / stem)


def pp_lcnet(style="paddle", batch=1, size=64, stem=16, classes=4, dtype="float32", seed=0):
    """A PP-LCNet-style classifier (Cui et al., "PP-LCNet: A Lightweight CPU Convolutional Neural
    Network", 2021, as PaddleOCR's direction classifiers use it): a 3x3/2 stem, depthwise
    separable blocks, each convolution followed by BatchNormalization, a learnable scalar affine
    (Mul, Add: PaddleOCR v4's `mobile_one_block` and `whswish` scales) and hardswish, then global
    average pooling and a fully connected layer with Softmax. Input "x" (batch, 3, size, size),
    output "y" (batch, classes).

    The same weights in two exports: style "paddle" as Paddle2ONNX writes them (every weight and
    scalar a Constant node, BatchNormalization nodes, hardswish as Add -> Clip -> Mul -> Div, the
    fully connected layer as MatMul + Add), style "twin" as the network built op by op (initializers,
    each BatchNormalization folded into its convolution's weight and bias in float64, HardSwish
    nodes, Gemm)."""
    if style not in ("paddle", "twin"):
        raise ValueError(f"style {style!r}: expected 'paddle' or 'twin'")
    net = Net("pp_lcnet", dtype, seed, constant_nodes=style == "paddle")
    x = net.input("x", (batch, 3, size, size))
    x = _conv_bn_hswish(net, style, x, stem, 3, 2, 1, "stem")
    for i, (expand, k, stride, out) in enumerate(PP_LCNET_BLOCKS):
        c = net.shapes[x][1]
        x = _conv_bn_hswish(net, style, x, c * expand, k, stride, c, f"blocks.{i}.dw") if expand == 1 else \
            _conv_bn_hswish(net, style, _conv_bn_hswish(net, style, x, c * expand, 1, 1, 1, f"blocks.{i}.expand"), c * expand, k, stride,
                            c * expand, f"blocks.{i}.dw")
        x = _conv_bn_hswish(net, style, x, out * stem, 1, 1, 1, f"blocks.{i}.pw")
    n, c = net.shapes[x][:2]
    x = net.node("Flatten", [net.node("GlobalAveragePool", [x], "avgpool", (n, c, 1, 1))], "flatten", (n, c), axis=1)
    weight, bias = net.normal((c, classes), 0.02), net.normal(classes, 0.02)
    if style == "paddle":
        product = net.node("MatMul", [x, net.const("fc.weight", weight)], "fc.matmul", (n, classes))
        x = net.binary("Add", product, net.const("fc.bias", bias), "fc")
    else:
        x = net.node("Gemm", [x, net.const("fc.weight", weight), net.const("fc.bias", bias)], "fc", (n, classes))
    net.output(net.node("Softmax", [x], "softmax", (n, classes), axis=-1), "y")
    return net.model(f"PP-LCNet-style classifier, {style} export, random weights (seed {seed})")


def _conv_bn_hswish(net, style, x, out, k, stride, group, name):
    """Conv -> BatchNormalization -> x * a + b (learnable scalars) -> hardswish, in one style."""
    n, c, h, w = net.shapes[x]
    weight = net.normal((out, c // group, k, k), math.sqrt(2 / (c // group * k * k)))
    scale, shift, mean, var = net.rng.uniform(0.5, 1.0, out), net.normal(out, 0.05), net.normal(out, 0.05), net.rng.uniform(0.5, 1.5, out)
    a, b = net.rng.uniform(0.8, 1.2), net.normal((), 0.05)
    pad, shape = k // 2, (n, out, (h + 2 * (k // 2) - k) // stride + 1, (w + 2 * (k // 2) - k) // stride + 1)
    attrs = {"kernel_shape": [k, k], "strides": [stride, stride], "pads": [pad] * 4, "group": group, "dilations": [1, 1]}
    if style == "twin":  # BatchNormalization folded (W' = W s, b' = (0 - mean) s + shift), as a compiler does offline
        s = scale / np.sqrt(var + 1e-5)
        inputs = [x, net.const(f"{name}.weight", weight * s[:, None, None, None]), net.const(f"{name}.bias", shift - mean * s)]
        y = net.node("Conv", inputs, name, shape, **attrs)
    else:
        y = net.node("Conv", [x, net.const(f"{name}.weight", weight)], name, shape, **attrs)
        params = [net.const(f"{name}.bn.{p}", v) for p, v in zip(("scale", "offset", "mean", "variance"), (scale, shift, mean, var))]
        y = net.node("BatchNormalization", [y, *params], f"{name}.bn", shape, epsilon=1e-5)
    y = net.binary("Add", net.binary("Mul", net.scalar(f"{name}.a", a), y, f"{name}.mul"), net.scalar(f"{name}.b", b), f"{name}.affine")
    if style == "twin":
        return net.unary("HardSwish", y, f"{name}.hardswish")
    clipped = net.node("Clip", [net.binary("Add", y, net.scalar(f"{name}.three", 3.0), f"{name}.add3"), net.scalar(f"{name}.zero", 0.0),
                                net.scalar(f"{name}.six", 6.0)], f"{name}.clip", shape)
    return net.binary("Div", net.binary("Mul", y, clipped, f"{name}.hswish_mul"), net.scalar(f"{name}.six_", 6.0), f"{name}.hardswish")


MODELS = {"resnet50": resnet50, "mobilenet_v2": mobilenet_v2, "yolov5s": yolov5s, "bert_encoder_layer": bert_encoder_layer}


def random_inputs(model, seed=1):
    """Seeded standard-normal values for every graph input of `model` (a mask input gets zeros:
    nothing masked)."""
    rng = np.random.default_rng(seed)
    out = {}
    for value in model.graph.input:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        out[value.name] = np.zeros(shape, dtype) if value.name == "attention_mask" else rng.standard_normal(shape).astype(dtype)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/models", help="folder for the .onnx files (default: out/models)")
    parser.add_argument("--model", action="append", choices=sorted(MODELS), help="only this model (repeatable; default: all)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--dtype", choices=DTYPES, default="float32")
    parser.add_argument("--size", type=int, help="input height and width of the CNNs (default: 224, YOLOv5s 640)")
    parser.add_argument("--seq", type=int, default=128, help="BERT sequence length (default: 128)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.model or MODELS:
        kwargs = {"batch": args.batch, "dtype": args.dtype, "seed": args.seed}
        if name == "bert_encoder_layer":
            kwargs["seq"] = args.seq
        elif args.size:
            kwargs["size"] = args.size
        model = MODELS[name](**kwargs)
        onnx.checker.check_model(model, full_check=True)
        path = out / f"{name}.onnx"
        onnx.save(model, path)
        print(f"wrote {path}: {len(model.graph.node)} nodes, {path.stat().st_size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
