"""RetinaFace with the MobileNet-0.25 backbone (Deng et al., "RetinaFace: Single-stage Dense Face
Localisation in the Wild", 2019) as biubug6/Pytorch_Retinaface builds it (`models/net.py`:
MobileNetV1 x0.25, FPN, SSH; `models/retinaface.py`: class, box and landmark heads of two anchors
per cell; `data/config.py` cfg_mnet: in_channel 32, out_channel 64) and `convert_to_onnx.py`
exports it in the test phase: outputs boxes (N, cells x 2, 4), class scores after a softmax
(N, cells x 2, 2) and landmarks (N, cells x 2, 10). LeakyReLU with slope 0.1, or 0 where the
reference passes leaky=0 (exported as LeakyRelu with alpha 0, as torch writes nn.LeakyReLU(0)).
"""

from onnx_models import Net


def _cbl(net, x, out, k, stride, leaky, name, relu=True, group=1):
    y = net.batch_norm(net.conv(x, out, k, stride, group=group, name=f"{name}.0"), f"{name}.1")
    return net.leaky_relu(y, leaky, f"{name}.2") if relu else y


def _conv_dw(net, x, out, stride, name):
    c = net.shapes[x][1]
    y = _cbl(net, x, c, 3, stride, 0.1, f"{name}.dw", group=c)
    return _cbl(net, y, out, 1, 1, 0.1, f"{name}.pw")


def _ssh(net, x, out, name):
    """SSH context module: a 3x3 branch of out/2 and 5x5, 7x7 branches (stacked 3x3s) of out/4, ReLU."""
    leaky = 0.1 if out <= 64 else 0
    c3 = _cbl(net, x, out // 2, 3, 1, leaky, f"{name}.conv3X3", relu=False)
    c5_1 = _cbl(net, x, out // 4, 3, 1, leaky, f"{name}.conv5X5_1")
    c5 = _cbl(net, c5_1, out // 4, 3, 1, leaky, f"{name}.conv5X5_2", relu=False)
    c7 = _cbl(net, _cbl(net, c5_1, out // 4, 3, 1, leaky, f"{name}.conv7X7_2"), out // 4, 3, 1, leaky, f"{name}.conv7x7_3", relu=False)
    return net.unary("Relu", net.concat([c3, c5, c7], 1, f"{name}.cat"), f"{name}.relu")


def retinaface_mnet025(batch=1, dtype="float32", size=640, seed=0):
    """Input "input" (batch, 3, size, size), size a multiple of 32; outputs "boxes", "scores", "landmarks"."""
    if size % 32:
        raise ValueError(f"size {size}: RetinaFace needs a multiple of 32")
    net = Net("retinaface_mnet025", dtype, seed)
    x = _cbl(net, net.input("input", (batch, 3, size, size)), 8, 3, 2, 0.1, "body.stage1.0")
    stages, index = [], 1
    for name, layers in (("stage1", ((16, 1), (32, 2), (32, 1), (64, 2), (64, 1))),
                         ("stage2", ((128, 2),) + ((128, 1),) * 5), ("stage3", ((256, 2), (256, 1)))):
        for out, stride in layers:
            x = _conv_dw(net, x, out, stride, f"body.{name}.{index}")
            index += 1
        stages.append(x)
        index = 0
    out = 64
    o1, o2, o3 = (_cbl(net, s, out, 1, 1, 0.1, f"fpn.output{i}") for i, s in enumerate(stages, 1))
    o2 = _cbl(net, net.binary("Add", o2, net.upsample2(o3, "fpn.up3"), "fpn.add2"), out, 3, 1, 0.1, "fpn.merge2")
    o1 = _cbl(net, net.binary("Add", o1, net.upsample2(o2, "fpn.up2"), "fpn.add1"), out, 3, 1, 0.1, "fpn.merge1")
    features = [_ssh(net, f, out, f"ssh{i}") for i, f in enumerate((o1, o2, o3), 1)]
    heads = {}
    for head, width in (("BboxHead", 4), ("ClassHead", 2), ("LandmarkHead", 10)):
        parts = []
        for i, f in enumerate(features):
            y = net.conv(f, 2 * width, 1, bias=True, name=f"{head}.{i}.conv1x1")
            n, _, h, w = net.shapes[y]
            y = net.transpose(y, (0, 2, 3, 1), f"{head}.{i}.permute")
            parts.append(net.reshape(y, (n, h * w * 2, width), f"{head}.{i}.view"))
        heads[head] = net.concat(parts, 1, f"{head}.cat")
    net.output(heads["BboxHead"], "boxes")
    net.output(net.softmax(heads["ClassHead"], -1, "softmax"), "scores")
    net.output(heads["LandmarkHead"], "landmarks")
    return net.model(f"RetinaFace MobileNet-0.25 (biubug6/Pytorch_Retinaface), {size}x{size}, random weights (seed {seed})")
