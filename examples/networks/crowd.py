"""P2PNet (Song et al., "Rethinking Counting and Localization in Crowds: A Purely Point-Based
Framework", ICCV 2021) as TencentYoutuResearch/CrowdCounting-P2PNet builds it (`models/backbone.py`:
the four blocks of torchvision's VGG-16-BN features up to conv5_3; `models/p2pnet.py`: the Decoder
and the regression and classification heads on its stride-8 map, four anchor points a cell, two
classes). Only what the exported outputs depend on is in the graph, as torch.onnx.export keeps
it: the decoder's P5_2, P3_1 and P3_2 and the heads' conv3 and conv4 (defined, never called)
are not. Outputs "pred_logits" (N, cells x 4, 2) and "pred_points" (N, cells x 4, 2): the
regression times 100 plus the anchor points.
"""

import numpy as np
from onnx_models import Net

VGG16 = ((64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512))


def _vgg_block(net, x, widths, name, index):
    for out in widths:
        y = net.batch_norm(net.conv(x, out, 3, bias=True, name=f"{name}.{index}"), f"{name}.{index + 1}")
        x = net.unary("Relu", y, f"{name}.{index + 2}")
        index += 3
    return x, index


def _head(net, x, out, name):
    y = net.unary("Relu", net.conv(x, 256, 3, bias=True, name=f"{name}.conv1"), f"{name}.act1")
    y = net.unary("Relu", net.conv(y, 256, 3, bias=True, name=f"{name}.conv2"), f"{name}.act2")
    y = net.transpose(net.conv(y, out, 3, bias=True, name=f"{name}.output"), (0, 2, 3, 1), f"{name}.permute")
    n, h, w, c = net.shapes[y]
    return net.reshape(y, (n, h * w * c // 2, 2), f"{name}.view")


def _anchor_points(size, stride=8, rows=2, lines=2):
    """AnchorPoints(pyramid_levels=[3], row=2, line=2): each cell's centre plus 2 x 2 offsets."""
    cells = (size + stride - 1) // stride
    offsets = (np.arange(1, lines + 1) - 0.5) * stride / lines - stride / 2
    ox, oy = np.meshgrid(offsets, (np.arange(1, rows + 1) - 0.5) * stride / rows - stride / 2)
    cx, cy = np.meshgrid((np.arange(cells) + 0.5) * stride, (np.arange(cells) + 0.5) * stride)
    anchors = np.stack((ox.ravel(), oy.ravel()), 1)[None] + np.stack((cx.ravel(), cy.ravel()), 1)[:, None]
    return anchors.reshape(1, -1, 2)


def p2pnet(batch=1, dtype="float32", size=512, seed=0):
    """Input "input" (batch, 3, size, size), size a multiple of 16; outputs as the module says."""
    if size % 16:
        raise ValueError(f"size {size}: P2PNet needs a multiple of 16")
    net = Net("p2pnet", dtype, seed)
    x = net.input("input", (batch, 3, size, size))
    feats, index = [], 0
    for i, widths in enumerate(VGG16):
        if i:
            x = net.max_pool(x, 2, 2, 0, f"backbone.features.{index}")
            index += 1
        x, index = _vgg_block(net, x, widths, "backbone.features", index)
        feats.append(x)
    c4, c5 = feats[3], feats[4]
    p5 = net.conv(c5, 256, 1, bias=True, name="fpn.P5_1")
    p4 = net.binary("Add", net.upsample2(p5, "fpn.P5_upsampled"), net.conv(c4, 256, 1, bias=True, name="fpn.P4_1"), "fpn.P4_add")
    p4 = net.conv(p4, 256, 3, bias=True, name="fpn.P4_2")
    regression = net.binary("Mul", _head(net, p4, 4 * 2, "regression"), net.scalar("regression.scale", 100), "regression.x100")
    anchors = _anchor_points(size)
    points = net.binary("Add", regression, net.const("anchor_points", np.broadcast_to(anchors, (batch, *anchors.shape[1:]))), "points")
    net.output(_head(net, p4, 4 * 2, "classification"), "pred_logits")
    net.output(points, "pred_points")
    return net.model(f"P2PNet (TencentYoutuResearch/CrowdCounting-P2PNet, VGG-16-BN), {size}x{size}, random weights (seed {seed})")
