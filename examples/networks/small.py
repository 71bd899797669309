"""Small networks of sophon-demo's samples as ONNX graphs (onnx.helper, seeded random weights):

- `deepsort_extractor`: the re-identification feature extractor of ZQPei/deep_sort_pytorch
  (`deep_sort/deep/model.py`, Net(reid=True)) as sophon-demo's `sample/DeepSORT/tools/
  extractor_transform.py` exports it: a 3x3 stem and max pool, four stages of two basic residual
  blocks (64, 128, 256, 512 channels), an 8x4 average pool and the L2-normalised 512-d feature
  (ReduceL2 and Div). Input 128 x 64 (height x width).
- `lprnet`: LPRNet (Zherzdev and Gruzdev 2018) as sophon-demo's `sample/LPRNet/tools/LPRNet.py`
  writes sirius-ai/LPRNet_Pytorch's `model/LPRNet.py` for export: its 3-D max poolings as a 2-D
  max pool and a channel subsampling (Transpose, MaxPool, Transpose), small basic blocks of 1x1,
  3x1, 1x3, 1x1 convolutions, the global context of four feature maps (average pools, each divided
  by the mean of its square) concatenated into a 1x1 convolution, and the mean over the height:
  output (N, 68, 18). Input 24 x 94.
"""

from onnx_models import Net


def _conv_bn(net, x, out, k, stride, name, relu=True, bias=False, pad=None):
    y = net.batch_norm(net.conv(x, out, k, stride, pad, bias=bias, name=f"{name}.conv"), f"{name}.bn")
    return net.unary("Relu", y, f"{name}.relu") if relu else y


def _bn_relu(net, x, name):
    return net.unary("Relu", net.batch_norm(x, f"{name}.bn"), f"{name}.relu")


def deepsort_extractor(batch=1, dtype="float32", seed=0):
    """Input "input" (batch, 3, 128, 64), output "output" (batch, 512), unit length rows (the 8x4
    average pool takes the whole 128x64 input's last map)."""
    net = Net("deepsort_extractor", dtype, seed)
    x = _conv_bn(net, net.input("input", (batch, 3, 128, 64)), 64, 3, 1, "conv.0", bias=True)
    x = net.max_pool(x, 3, 2, 1, "conv.3")
    for i, (c_in, c_out, down) in enumerate(((64, 64, False), (64, 128, True), (128, 256, True), (256, 512, True)), 1):
        for j in range(2):
            name = f"layer{i}.{j}"
            first = j == 0
            stride = 2 if first and down else 1
            y = _conv_bn(net, x, c_out, 3, stride, f"{name}.1")
            y = _conv_bn(net, y, c_out, 3, 1, f"{name}.2", relu=False)
            shortcut = _conv_bn(net, x, c_out, 1, stride, f"{name}.downsample", relu=False) if first and (down or c_in != c_out) else x
            x = net.unary("Relu", net.binary("Add", shortcut, y, f"{name}.add"), f"{name}.relu")
    x = net.avg_pool(x, (8, 4), 1, 0, "avgpool")
    x = net.reshape(x, (batch, 512), "view")
    norm = net.reduce("ReduceL2", x, [1], "norm")
    net.output(net.binary("Div", x, norm, "div"), "output")
    return net.model(f"DeepSORT re-id extractor (ZQPei/deep_sort_pytorch Net, reid), 128x64, random weights (seed {seed})")


def lprnet(batch=1, dtype="float32", classes=68, seed=0):
    """Input "input" (batch, 3, 24, 94), output "output" (batch, classes, 18)."""
    net = Net("lprnet", dtype, seed)
    x = net.input("input", (batch, 3, 24, 94))
    keep = []
    x = _conv_bn(net, x, 64, 3, 1, "backbone.0", bias=True, pad=0)  # 22 x 92
    keep.append(x)
    x = net.max_pool(x, 3, 1, 0, "backbone.3")
    x = _bn_relu(net, _small_basic_block(net, x, 128, "backbone.4"), "backbone.5")
    keep.append(x)
    x = _maxpool_3d(net, x, 2, "backbone.7")
    x = _bn_relu(net, _small_basic_block(net, x, 256, "backbone.8"), "backbone.9")
    x = _bn_relu(net, _small_basic_block(net, x, 256, "backbone.11"), "backbone.12")
    keep.append(x)
    x = _maxpool_3d(net, x, 4, "backbone.14")
    x = _conv_bn(net, x, 256, (1, 4), 1, "backbone.16", bias=True, pad=0)
    x = _conv_bn(net, x, classes, (13, 1), 1, "backbone.20", bias=True, pad=0)
    keep.append(x)
    context = []
    for i, f in enumerate(keep):
        if i < 2:
            f = net.avg_pool(f, 5, 5, 0, f"context.{i}.pool")
        elif i == 2:
            f = net.avg_pool(f, (4, 10), (4, 2), 0, f"context.{i}.pool")
        mean = net.reduce("ReduceMean", net.binary("Pow", f, net.scalar(f"context.{i}.two", 2), f"context.{i}.pow"), [0, 1, 2, 3],
                          f"context.{i}.mean", keepdims=False)
        context.append(net.binary("Div", f, mean, f"context.{i}.div"))
    x = net.conv(net.concat(context, 1, "context.cat"), classes, 1, bias=True, name="container.0")
    net.output(net.reduce("ReduceMean", x, [2], "logits", keepdims=False), "output")
    return net.model(f"LPRNet (sophon-demo's export of sirius-ai/LPRNet_Pytorch), 24x94, random weights (seed {seed})")


def _small_basic_block(net, x, out, name):
    q = out // 4
    y = net.unary("Relu", net.conv(x, q, 1, bias=True, name=f"{name}.block.0"), f"{name}.block.1")
    y = net.unary("Relu", net.conv(y, q, (3, 1), pad=(1, 0), bias=True, name=f"{name}.block.2"), f"{name}.block.3")
    y = net.unary("Relu", net.conv(y, q, (1, 3), pad=(0, 1), bias=True, name=f"{name}.block.4"), f"{name}.block.5")
    return net.conv(y, out, 1, bias=True, name=f"{name}.block.6")


def _maxpool_3d(net, x, channel_stride, name):
    """maxpool_3d: a 3x3 max pool with strides (1, 2), then every `channel_stride`-th channel through
    a 1x1 max pool of stride (1, channel_stride) between two Transposes of axes 1 and 3."""
    y = net.max_pool(x, 3, (1, 2), 0, f"{name}.maxpool1")
    y = net.transpose(y, (0, 3, 2, 1), f"{name}.transpose1")
    y = net.max_pool(y, 1, (1, channel_stride), 0, f"{name}.maxpool2")
    return net.transpose(y, (0, 3, 2, 1), f"{name}.transpose2")
