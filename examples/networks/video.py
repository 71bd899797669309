"""C3D (Tran et al., "Learning Spatiotemporal Features with 3D Convolutional Networks", ICCV 2015,
Table/Figure 3: eight 3x3x3 convolutions, five max poolings, two 4096-wide fully connected
layers) as sophon-demo's `sample/C3D/tools/c3d_transform.py` builds it for UCF-101 (101 classes)
and exports it: Conv (3-D, bias) + Relu, MaxPool (3-D; pool1 1x2x2, pool5 padded 0,1,1),
Reshape to (N, 8192), Gemm + Relu twice, Gemm. Input (N, 3, 16, 112, 112): one clip of 16 frames.
"""

from onnx_models import Net


def c3d(batch=1, dtype="float32", frames=16, size=112, classes=101, seed=0):
    """Input "input" (batch, 3, frames, size, size), output "output" (batch, classes)."""
    if (frames, size) != (16, 112):
        raise ValueError(f"{frames} frames of {size}x{size}: C3D's classifier takes 16 x 112 x 112 clips (8192 features)")
    net = Net("c3d", dtype, seed)
    x = net.input("input", (batch, 3, frames, size, size))
    pools = {"conv1": ((1, 2, 2), 0), "conv2": (2, 0), "conv3b": (2, 0), "conv4b": (2, 0), "conv5b": (2, (0, 1, 1))}
    for name, out in (("conv1", 64), ("conv2", 128), ("conv3a", 256), ("conv3b", 256), ("conv4a", 512), ("conv4b", 512),
                      ("conv5a", 512), ("conv5b", 512)):
        x = net.unary("Relu", net.conv(x, out, 3, bias=True, name=name), f"{name}.relu")
        if name in pools:
            k, pad = pools[name]
            x = net.max_pool(x, k, k, pad if pad else 0, f"pool{name[4]}")
    x = net.reshape(x, (batch, 8192), "view")
    for name, out in (("fc6", 4096), ("fc7", 4096)):
        x = net.unary("Relu", _gemm(net, x, out, name), f"{name}.relu")
    net.output(_gemm(net, x, classes, "fc_cls"), "output")
    return net.model(f"C3D (sophon-demo c3d_transform.py, UCF-101), 16x112x112 clips, random weights (seed {seed})")


def _gemm(net, x, out, name):
    """nn.Linear on a 2-D input: Gemm with the (out, in) weight, transB=1."""
    n, k = net.shapes[x]
    weight = net.const(f"{name}.weight", net.normal((out, k), 0.02))
    return net.node("Gemm", [x, weight, net.const(f"{name}.bias", net.normal(out, 0.02))], name, (n, out), transB=1)
