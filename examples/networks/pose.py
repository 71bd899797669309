"""OpenPose's COCO body model (Cao et al., "Realtime Multi-Person 2D Pose Estimation using Part
Affinity Fields", CVPR 2017) as CMU-Perceptual-Computing-Lab/openpose
`models/pose/coco/pose_deploy_linevec.prototxt` defines it: the first ten convolutions of VGG-19
with conv4_3_CPM and conv4_4_CPM, stage 1 of two branches (part affinity fields, 38 maps, and
heatmaps, 19 maps) of three 3x3 and two 1x1 convolutions, and five refinement stages of two
branches of five 7x7 and two 1x1 convolutions on the concatenation of the previous stage's maps
and the features; every convolution has a bias and (but the last of a branch) a ReLU. Output
"net_output" concatenates the last stage's heatmaps and fields: (N, 57, H/8, W/8).
"""

from onnx_models import Net


def _conv_relu(net, x, out, k, name, relu=True):
    y = net.conv(x, out, k, bias=True, name=name)
    return net.unary("Relu", y, f"{name}.relu") if relu else y


def openpose_coco(batch=1, dtype="float32", size=368, stages=6, seed=0):
    """Input "image" (batch, 3, size, size), size a multiple of 8; output "net_output"."""
    if size % 8:
        raise ValueError(f"size {size}: OpenPose needs a multiple of 8")
    net = Net("openpose_coco", dtype, seed)
    x = net.input("image", (batch, 3, size, size))
    for block, (out, count) in enumerate(((64, 2), (128, 2), (256, 4), (512, 2)), 1):
        for i in range(1, count + 1):
            x = _conv_relu(net, x, out, 3, f"conv{block}_{i}")
        if block < 4:
            x = net.max_pool(x, 2, 2, 0, f"pool{block}_stage1")
    features = _conv_relu(net, _conv_relu(net, x, 256, 3, "conv4_3_CPM"), 128, 3, "conv4_4_CPM")
    maps = {}
    for branch, out in (("L1", 38), ("L2", 19)):
        y = features
        for i, (c, k) in enumerate(((128, 3), (128, 3), (128, 3), (512, 1)), 1):
            y = _conv_relu(net, y, c, k, f"conv5_{i}_CPM_{branch}")
        maps[branch] = _conv_relu(net, y, out, 1, f"conv5_5_CPM_{branch}", relu=False)
    for stage in range(2, stages + 1):
        x = net.concat([maps["L1"], maps["L2"], features], 1, f"concat_stage{stage}")
        for branch, out in (("L1", 38), ("L2", 19)):
            y = x
            for i in range(1, 6):
                y = _conv_relu(net, y, 128, 7, f"Mconv{i}_stage{stage}_{branch}")
            y = _conv_relu(net, y, 128, 1, f"Mconv6_stage{stage}_{branch}")
            maps[branch] = _conv_relu(net, y, out, 1, f"Mconv7_stage{stage}_{branch}", relu=False)
    net.output(net.concat([maps["L2"], maps["L1"]], 1, f"concat_stage{stages + 1}"), "net_output")
    return net.model(f"OpenPose COCO (pose_deploy_linevec.prototxt), {size}x{size}, random weights (seed {seed})")
