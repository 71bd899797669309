"""YOLO detectors as ONNX graphs (onnx.helper, seeded random weights), layer by layer from their
reference implementations, with the heads as the exports sophon-demo compiles write them:

- `yolov8s` (task "detect", "segment" or "pose"): ultralytics/ultralytics
  `ultralytics/cfg/models/v8/yolov8.yaml` (scale s: depth 0.33, width 0.50, max channels 1024),
  C2f and SPPF (`ultralytics/nn/modules/block.py`), the Detect head with its DFL and box decoding
  (`ultralytics/nn/modules/head.py`, `ultralytics/utils/tal.py` dist2bbox) as `model.export(format=
  "onnx")` of ultralytics 8.1 writes it: output (N, 4 + classes, anchors). Segment adds Proto (a
  transposed 2x2 convolution) and 32 mask coefficients (outputs (N, 116, anchors) and (N, 32,
  H/4, W/4)); Pose has one class and 17 keypoints decoded in the graph (output (N, 56, anchors)).
- `yolox_s`: Megvii-BaseDetection/YOLOX `yolox/models/darknet.py` (CSPDarknet with Focus and SPP),
  `yolo_pafpn.py`, `yolo_head.py` (decoupled head), `exps/default/yolox_s.py` (depth 0.33, width
  0.50), exported by `tools/export_onnx.py`: SiLU as x * sigmoid(x), no box decoding; output
  (N, anchors, 85).
- `yolov7`: WongKinYiu/yolov7 `cfg/deploy/yolov7.yaml` (ELAN blocks, MP, SPPCSPC, RepConv fused to
  one 3x3 convolution for inference), SiLU activations (the released yolov7.pt), exported by
  `export.py` without --grid: three raw outputs (N, 3, H/s, W/s, 85).
- `yolov3`: bubbliiiing/yolo3-pytorch `nets/darknet.py` (Darknet-53) and `nets/yolo.py` (three
  five-convolution heads), LeakyReLU 0.1; outputs the three head convolutions (sophon-demo's
  YOLOv34 scripts cut the graph there: output_names 422,536,650).
- `yolov4`: bubbliiiing/yolov4-pytorch `nets/CSPdarknet.py` (CSPDarknet-53, Mish) and
  `nets/yolo.py` (SPP, PANet, LeakyReLU 0.1), with the reshape and permute of sophon-demo's
  `sample/YOLOv34/docs/YOLOv34_Export_Guide.md`: outputs (N, 3, H/s, W/s, 85).

Convolutions keep their BatchNormalization (the importer folds it), as in examples/onnx_models.py.
"""

import numpy as np
from onnx_models import Net, c3, make_divisible, sppf, yolo_conv

YOLO_STRIDES = (8, 16, 32)


def _check_size(size, multiple=32):
    if size % multiple:
        raise ValueError(f"size {size}: these detectors need a multiple of {multiple}")


# --- YOLOv8 ---

def yolov8s(batch=1, dtype="float32", size=640, task="detect", classes=None, width=0.50, depth=0.33, seed=0):
    """YOLOv8s: input "images" (batch, 3, size, size). task "detect" (80 classes), "segment"
    (80 classes, 32 masks) or "pose" (one class, 17 keypoints); outputs as the module says."""
    _check_size(size)
    if task not in ("detect", "segment", "pose"):
        raise ValueError(f"task {task!r}: expected detect, segment or pose")
    classes = classes or (1 if task == "pose" else 80)
    net = Net(f"yolov8s-{task}", dtype, seed)
    ch = lambda c: make_divisible(min(c, 1024) * width)  # noqa: E731
    n = lambda k: max(round(k * depth), 1)  # noqa: E731
    x = net.input("images", (batch, 3, size, size))
    b = [yolo_conv(net, x, ch(64), 3, 2, name="model.0")]
    b.append(yolo_conv(net, b[-1], ch(128), 3, 2, name="model.1"))
    b.append(c2f(net, b[-1], ch(128), n(3), True, "model.2"))
    b.append(yolo_conv(net, b[-1], ch(256), 3, 2, name="model.3"))
    b.append(c2f(net, b[-1], ch(256), n(6), True, "model.4"))
    b.append(yolo_conv(net, b[-1], ch(512), 3, 2, name="model.5"))
    b.append(c2f(net, b[-1], ch(512), n(6), True, "model.6"))
    b.append(yolo_conv(net, b[-1], ch(1024), 3, 2, name="model.7"))
    b.append(c2f(net, b[-1], ch(1024), n(3), True, "model.8"))
    b.append(sppf(net, b[-1], ch(1024), 5, name="model.9"))
    b.append(net.upsample2(b[9], "model.10"))
    b.append(net.concat([b[10], b[6]], 1, "model.11"))
    b.append(c2f(net, b[11], ch(512), n(3), False, "model.12"))
    b.append(net.upsample2(b[12], "model.13"))
    b.append(net.concat([b[13], b[4]], 1, "model.14"))
    b.append(c2f(net, b[14], ch(256), n(3), False, "model.15"))  # P3/8
    b.append(yolo_conv(net, b[15], ch(256), 3, 2, name="model.16"))
    b.append(net.concat([b[16], b[12]], 1, "model.17"))
    b.append(c2f(net, b[17], ch(512), n(3), False, "model.18"))  # P4/16
    b.append(yolo_conv(net, b[18], ch(512), 3, 2, name="model.19"))
    b.append(net.concat([b[19], b[9]], 1, "model.20"))
    b.append(c2f(net, b[20], ch(1024), n(3), False, "model.21"))  # P5/32
    feats = [b[15], b[18], b[21]]
    det = _v8_detect(net, feats, classes, "model.22")
    if task == "detect":
        net.output(det, "output0")
    elif task == "segment":
        masks, protos = 32, ch(256)
        coeffs = _v8_level_convs(net, feats, max(net.shapes[feats[0]][1] // 4, masks), masks, "model.22.cv4")
        p = yolo_conv(net, feats[0], protos, 3, name="model.22.proto.cv1")
        p = net.conv_transpose(p, protos, 2, 2, name="model.22.proto.upsample")
        p = yolo_conv(net, p, protos, 3, name="model.22.proto.cv2")
        p = yolo_conv(net, p, masks, 1, name="model.22.proto.cv3")
        net.output(net.concat([det, coeffs], 1, "model.22.cat_masks"), "output0")
        net.output(p, "output1")
    else:
        net.output(net.concat([det, _v8_keypoints(net, feats, (17, 3), "model.22")], 1, "model.22.cat_kpt"), "output0")
    return net.model(f"YOLOv8s {task} (ultralytics yolov8.yaml), {size}x{size}, random weights (seed {seed})")


def c2f(net, x, out, blocks, shortcut, name):
    """C2f: cv1 to 2c, split in two halves, `blocks` bottlenecks (3x3, 3x3) chained on the second,
    every half and bottleneck output concatenated into cv2."""
    c = out // 2
    parts = net.split(yolo_conv(net, x, 2 * c, 1, name=f"{name}.cv1"), [c, c], 1, f"{name}.chunk")
    for i in range(blocks):
        y = yolo_conv(net, parts[-1], c, 3, name=f"{name}.m.{i}.cv1")
        y = yolo_conv(net, y, c, 3, name=f"{name}.m.{i}.cv2")
        parts.append(net.binary("Add", parts[-1], y, f"{name}.m.{i}.add") if shortcut else y)
    return yolo_conv(net, net.concat(parts, 1, f"{name}.cat"), out, 1, name=f"{name}.cv2")


def _v8_level_convs(net, feats, hidden, out, name):
    """Per level Conv 3x3, Conv 3x3, 1x1 conv to `out`, viewed (N, out, cells), joined along the cells."""
    flat = []
    for i, x in enumerate(feats):
        y = yolo_conv(net, x, hidden, 3, name=f"{name}.{i}.0")
        y = net.conv(yolo_conv(net, y, hidden, 3, name=f"{name}.{i}.1"), out, 1, bias=True, name=f"{name}.{i}.2")
        n, c, h, w = net.shapes[y]
        flat.append(net.reshape(y, (n, c, h * w), f"{name}.{i}.view"))
    return net.concat(flat, 2, f"{name}.cat")


def _anchor_grid(net, feats):
    """make_anchors(feats, strides, 0.5): cell centres (1, 2, anchors) and strides (1, anchors)."""
    points, strides = [], []
    for x, stride in zip(feats, YOLO_STRIDES):
        h, w = net.shapes[x][2:]
        yv, xv = np.meshgrid(np.arange(h) + 0.5, np.arange(w) + 0.5, indexing="ij")
        points.append(np.stack((xv.ravel(), yv.ravel())))
        strides.append(np.full(h * w, stride))
    return np.concatenate(points, 1)[None], np.concatenate(strides)[None]


def _v8_detect(net, feats, classes, name, reg_max=16):
    """Detect: box (4 x reg_max) and class branches per level, joined (N, 4 x reg_max + classes,
    anchors), DFL (softmax over reg_max bins, a 1x1 conv by 0..reg_max-1), dist2bbox to centre and
    size, times the stride, and the class sigmoid: (N, 4 + classes, anchors)."""
    c0 = net.shapes[feats[0]][1]
    c2, c3_ = max(16, c0 // 4, reg_max * 4), max(c0, min(classes, 100))
    joined = []
    for i, x in enumerate(feats):
        box = yolo_conv(net, yolo_conv(net, x, c2, 3, name=f"{name}.cv2.{i}.0"), c2, 3, name=f"{name}.cv2.{i}.1")
        box = net.conv(box, 4 * reg_max, 1, bias=True, name=f"{name}.cv2.{i}.2")
        cls = yolo_conv(net, yolo_conv(net, x, c3_, 3, name=f"{name}.cv3.{i}.0"), c3_, 3, name=f"{name}.cv3.{i}.1")
        cls = net.conv(cls, classes, 1, bias=True, name=f"{name}.cv3.{i}.2")
        y = net.concat([box, cls], 1, f"{name}.cat{i}")
        n, c, h, w = net.shapes[y]
        joined.append(net.reshape(y, (n, c, h * w), f"{name}.view{i}"))
    x = net.concat(joined, 2, f"{name}.cat")
    n, _, anchors = net.shapes[x]
    box, cls = net.split(x, [4 * reg_max, classes], 1, f"{name}.split")
    d = net.transpose(net.reshape(box, (n, 4, reg_max, anchors), f"{name}.dfl.view"), (0, 2, 1, 3), f"{name}.dfl.transpose")
    d = net.softmax(d, 1, f"{name}.dfl.softmax")
    bins = net.const(f"{name}.dfl.conv.weight", np.arange(reg_max).reshape(1, reg_max, 1, 1))
    d = net.node("Conv", [d, bins], f"{name}.dfl.conv", (n, 1, 4, anchors), kernel_shape=[1, 1])
    d = net.reshape(d, (n, 4, anchors), f"{name}.dfl.out")
    points, strides = _anchor_grid(net, feats)
    lt, rb = net.split(d, [2, 2], 1, f"{name}.dist")
    pts = net.const(f"{name}.anchors", points)
    x1y1 = net.binary("Sub", pts, lt, f"{name}.x1y1")
    x2y2 = net.binary("Add", pts, rb, f"{name}.x2y2")
    cxy = net.binary("Div", net.binary("Add", x1y1, x2y2, f"{name}.sum"), net.scalar(f"{name}.two", 2), f"{name}.cxy")
    wh = net.binary("Sub", x2y2, x1y1, f"{name}.wh")
    dbox = net.binary("Mul", net.concat([cxy, wh], 1, f"{name}.xywh"), net.const(f"{name}.strides", strides), f"{name}.dbox")
    return net.concat([dbox, net.unary("Sigmoid", cls, f"{name}.cls_sigmoid")], 1, f"{name}.out")


def _v8_keypoints(net, feats, kpt_shape, name):
    """Pose keypoints (N, k x dims, anchors), decoded as kpts_decode writes them: xy = (raw * 2 +
    (anchor - 0.5)) * stride, visibility = sigmoid(raw)."""
    k, dims = kpt_shape
    kpt = _v8_level_convs(net, feats, max(net.shapes[feats[0]][1] // 4, k * dims), k * dims, f"{name}.cv4")
    n, _, anchors = net.shapes[kpt]
    y = net.reshape(kpt, (n, k, dims, anchors), f"{name}.kpt.view")
    points, strides = _anchor_grid(net, feats)
    xy = net.binary("Mul", net.slice(y, [0], [2], [2], f"{name}.kpt.xy"), net.scalar(f"{name}.kpt.two", 2), f"{name}.kpt.xy2")
    xy = net.binary("Add", xy, net.const(f"{name}.kpt.grid", points[0] - 0.5), f"{name}.kpt.xygrid")
    xy = net.binary("Mul", xy, net.const(f"{name}.kpt.strides", strides), f"{name}.kpt.xyout")
    vis = net.unary("Sigmoid", net.slice(y, [2], [3], [2], f"{name}.kpt.v"), f"{name}.kpt.vsigmoid")
    return net.reshape(net.concat([xy, vis], 2, f"{name}.kpt.cat"), (n, k * dims, anchors), f"{name}.kpt.out")


# --- YOLOX ---

def yolox_s(batch=1, dtype="float32", size=640, classes=80, depth=0.33, width=0.50, seed=0):
    """YOLOX-s: input "images" (batch, 3, size, size), output "output" (batch, anchors, 5 + classes):
    box (raw), objectness and class scores (sigmoid) per anchor, the three levels joined."""
    _check_size(size)
    net = Net("yolox_s", dtype, seed)
    base, base_depth = int(width * 64), max(round(depth * 3), 1)
    x = net.input("images", (batch, 3, size, size))
    quarters = [net.slice(x, [r, c], [size, size], [2, 3], f"backbone.stem.slice{i}", steps=[2, 2])
                for i, (r, c) in enumerate(((0, 0), (1, 0), (0, 1), (1, 1)))]  # top-left, bottom-left, top-right, bottom-right
    x = yolo_conv(net, net.concat(quarters, 1, "backbone.stem.cat"), base, 3, name="backbone.stem.conv")
    dark = []
    for i, (mult, blocks) in enumerate(((2, base_depth), (4, 3 * base_depth), (8, 3 * base_depth), (16, base_depth)), 2):
        name = f"backbone.dark{i}"
        x = yolo_conv(net, x, base * mult, 3, 2, name=f"{name}.0")
        if i == 5:
            x = _spp(net, x, base * mult, (5, 9, 13), f"{name}.1")
        x = c3(net, x, base * mult, blocks, shortcut=i != 5, name=f"{name}.{2 if i == 5 else 1}")
        dark.append(x)
    x2, x1, x0 = dark[1:]
    c = [int(width * v) for v in (256, 512, 1024)]
    n = round(3 * depth)
    fpn_out0 = yolo_conv(net, x0, c[1], 1, name="lateral_conv0")
    f_out0 = c3(net, net.concat([net.upsample2(fpn_out0, "upsample0"), x1], 1, "cat0"), c[1], n, False, "C3_p4")
    fpn_out1 = yolo_conv(net, f_out0, c[0], 1, name="reduce_conv1")
    pan_out2 = c3(net, net.concat([net.upsample2(fpn_out1, "upsample1"), x2], 1, "cat1"), c[0], n, False, "C3_p3")
    p_out1 = yolo_conv(net, pan_out2, c[0], 3, 2, name="bu_conv2")
    pan_out1 = c3(net, net.concat([p_out1, fpn_out1], 1, "cat2"), c[1], n, False, "C3_n3")
    p_out0 = yolo_conv(net, pan_out1, c[1], 3, 2, name="bu_conv1")
    pan_out0 = c3(net, net.concat([p_out0, fpn_out0], 1, "cat3"), c[2], n, False, "C3_n4")
    hidden, flat = int(256 * width), []
    for k, feat in enumerate((pan_out2, pan_out1, pan_out0)):
        h = f"head.{k}"
        stem = yolo_conv(net, feat, hidden, 1, name=f"head.stems.{k}")
        cls = yolo_conv(net, yolo_conv(net, stem, hidden, 3, name=f"{h}.cls_convs.0"), hidden, 3, name=f"{h}.cls_convs.1")
        reg = yolo_conv(net, yolo_conv(net, stem, hidden, 3, name=f"{h}.reg_convs.0"), hidden, 3, name=f"{h}.reg_convs.1")
        box = net.conv(reg, 4, 1, bias=True, name=f"head.reg_preds.{k}")
        obj = net.unary("Sigmoid", net.conv(reg, 1, 1, bias=True, name=f"head.obj_preds.{k}"), f"{h}.obj_sigmoid")
        cls = net.unary("Sigmoid", net.conv(cls, classes, 1, bias=True, name=f"head.cls_preds.{k}"), f"{h}.cls_sigmoid")
        y = net.concat([box, obj, cls], 1, f"{h}.cat")
        b, c_, hh, ww = net.shapes[y]
        flat.append(net.reshape(y, (b, c_, hh * ww), f"{h}.flatten"))
    net.output(net.transpose(net.concat(flat, 2, "head.cat"), (0, 2, 1), "head.permute"), "output")
    return net.model(f"YOLOX-s (Megvii YOLOX), {size}x{size}, no decoding, random weights (seed {seed})")


def _spp(net, x, out, kernels, name):
    """SPP (YOLOX SPPBottleneck, YOLOv4): 1x1 conv to half, parallel k x k stride-1 max pools of it,
    concatenated with it, 1x1 conv to `out`."""
    y = yolo_conv(net, x, net.shapes[x][1] // 2, 1, name=f"{name}.conv1")
    pools = [net.max_pool(y, k, 1, k // 2, f"{name}.m{i}") for i, k in enumerate(kernels)]
    return yolo_conv(net, net.concat([y] + pools, 1, f"{name}.cat"), out, 1, name=f"{name}.conv2")


# --- YOLOv7 ---

def yolov7(batch=1, dtype="float32", size=640, classes=80, seed=0):
    """YOLOv7 (deploy): input "images" (batch, 3, size, size), outputs "p3", "p4", "p5": (batch, 3,
    size/s, size/s, classes + 5), raw (export without --grid)."""
    _check_size(size)
    net = Net("yolov7", dtype, seed)
    conv = lambda x, c, k, s, i: yolo_conv(net, x, c, k, s, name=f"model.{i}")  # noqa: E731
    x = net.input("images", (batch, 3, size, size))
    x = conv(x, 32, 3, 1, 0)
    x = conv(x, 64, 3, 2, 1)
    x = conv(x, 64, 3, 1, 2)
    x = conv(x, 128, 3, 2, 3)
    x11 = _elan(net, x, 64, 256, 4)
    x24 = _elan(net, _mp(net, x11, 128, 12), 128, 512, 17)
    x37 = _elan(net, _mp(net, x24, 256, 25), 256, 1024, 30)
    x50 = _elan(net, _mp(net, x37, 512, 38), 256, 1024, 43)
    x51 = _sppcspc(net, x50, 512, "model.51")
    up = net.upsample2(conv(x51, 256, 1, 1, 52), "model.53")
    x63 = _elan_h(net, net.concat([conv(x37, 256, 1, 1, 54), up], 1, "model.55"), 256, 128, 256, 56)
    up = net.upsample2(conv(x63, 128, 1, 1, 64), "model.65")
    x75 = _elan_h(net, net.concat([conv(x24, 128, 1, 1, 66), up], 1, "model.67"), 128, 64, 128, 68)
    x88 = _elan_h(net, _mp(net, x75, 128, 76, extra=x63), 256, 128, 256, 81)
    x101 = _elan_h(net, _mp(net, x88, 256, 89, extra=x51), 512, 256, 512, 94)
    for level, (feat, c, i) in enumerate(((x75, 256, 102), (x88, 512, 103), (x101, 1024, 104))):
        y = net.silu(net.conv(feat, c, 3, bias=True, name=f"model.{i}.rbr_reparam"), f"model.{i}.act")  # RepConv, fused
        net.output(_raw_head(net, y, classes, f"model.105.m.{level}"), f"p{level + 3}")
    return net.model(f"YOLOv7 (cfg/deploy/yolov7.yaml), {size}x{size}, three raw outputs, random weights (seed {seed})")


def _elan(net, x, c, out, i):
    """A backbone ELAN block at layer i: two 1x1 branches, four 3x3 convs chained on the second,
    Concat [-1, -3, -5, -6], 1x1 conv to `out`; returns the last layer (i + 7)."""
    a = yolo_conv(net, x, c, 1, name=f"model.{i}")
    chain = [yolo_conv(net, x, c, 1, name=f"model.{i + 1}")]
    for j in range(4):
        chain.append(yolo_conv(net, chain[-1], c, 3, name=f"model.{i + 2 + j}"))
    cat = net.concat([chain[4], chain[2], chain[0], a], 1, f"model.{i + 6}")
    return yolo_conv(net, cat, out, 1, name=f"model.{i + 7}")


def _elan_h(net, x, c, inner, out, i):
    """A head ELAN block at layer i: two 1x1 branches of c, four 3x3 convs of `inner` chained on the
    second, Concat [-1 ... -6], 1x1 conv to `out`."""
    a = yolo_conv(net, x, c, 1, name=f"model.{i}")
    chain = [yolo_conv(net, x, c, 1, name=f"model.{i + 1}")]
    for j in range(4):
        chain.append(yolo_conv(net, chain[-1], inner, 3, name=f"model.{i + 2 + j}"))
    cat = net.concat(chain[::-1] + [a], 1, f"model.{i + 6}")
    return yolo_conv(net, cat, out, 1, name=f"model.{i + 7}")


def _mp(net, x, c, i, extra=None):
    """The MP transition at layer i: max pool 2x2 then 1x1 conv, beside 1x1 conv then 3x3/2 conv,
    concatenated (with `extra` last, in the head)."""
    a = yolo_conv(net, net.max_pool(x, 2, 2, 0, f"model.{i}"), c, 1, name=f"model.{i + 1}")
    b = yolo_conv(net, yolo_conv(net, x, c, 1, name=f"model.{i + 2}"), c, 3, 2, name=f"model.{i + 3}")
    return net.concat([b, a] + ([extra] if extra else []), 1, f"model.{i + 4}")


def _sppcspc(net, x, out, name):
    """SPPCSPC (models/common.py): cv1, cv3 (3x3), cv4, max pools 5/9/13 of it, cv5, cv6 (3x3),
    beside cv2 of the input; cv7 on both."""
    c = out
    x1 = yolo_conv(net, yolo_conv(net, yolo_conv(net, x, c, 1, name=f"{name}.cv1"), c, 3, name=f"{name}.cv3"), c, 1, name=f"{name}.cv4")
    pools = [net.max_pool(x1, k, 1, k // 2, f"{name}.m.{j}") for j, k in enumerate((5, 9, 13))]
    y1 = yolo_conv(net, yolo_conv(net, net.concat([x1] + pools, 1, f"{name}.cat1"), c, 1, name=f"{name}.cv5"), c, 3, name=f"{name}.cv6")
    y2 = yolo_conv(net, x, c, 1, name=f"{name}.cv2")
    return yolo_conv(net, net.concat([y1, y2], 1, f"{name}.cat2"), out, 1, name=f"{name}.cv7")


def _raw_head(net, x, classes, name):
    """A 1x1 conv to 3 x (classes + 5), viewed (N, 3, no, ny, nx) and permuted to (N, 3, ny, nx, no)."""
    y = net.conv(x, 3 * (classes + 5), 1, bias=True, name=name)
    n, _, h, w = net.shapes[y]
    return net.transpose(net.reshape(y, (n, 3, classes + 5, h, w), f"{name}.view"), (0, 1, 3, 4, 2), f"{name}.permute")


# --- YOLOv3 and YOLOv4 (bubbliiiing's PyTorch ports) ---

def _cbl(net, x, out, k, name, stride=1):
    """conv2d of bubbliiiing's nets/yolo.py: convolution, BatchNorm, LeakyReLU(0.1)."""
    y = net.batch_norm(net.conv(x, out, k, stride, name=f"{name}.conv"), f"{name}.bn")
    return net.leaky_relu(y, 0.1, f"{name}.relu")


def yolov3(batch=1, dtype="float32", size=608, classes=80, seed=0):
    """YOLOv3 (Darknet-53): input "images" (batch, 3, size, size), outputs "out0", "out1", "out2":
    the head convolutions (batch, 3 x (classes + 5), size/s, size/s), strides 32, 16, 8."""
    _check_size(size)
    net = Net("yolov3", dtype, seed)
    x = _cbl(net, net.input("images", (batch, 3, size, size)), 32, 3, "backbone.conv1")
    stages = []
    for i, (planes, blocks) in enumerate(zip(((32, 64), (64, 128), (128, 256), (256, 512), (512, 1024)), (1, 2, 8, 8, 4)), 1):
        x = _cbl(net, x, planes[1], 3, f"backbone.layer{i}.ds", stride=2)
        for j in range(blocks):
            name = f"backbone.layer{i}.residual_{j}"
            y = _cbl(net, _cbl(net, x, planes[0], 1, f"{name}.1"), planes[1], 3, f"{name}.2")
            x = net.binary("Add", y, x, f"{name}.add")
        stages.append(x)
    x2, x1, x0 = stages[2:]
    no = 3 * (classes + 5)
    branch, out0 = _last_layers(net, x0, (512, 1024), no, "last_layer0")
    up = net.upsample2(_cbl(net, branch, 256, 1, "last_layer1_conv"), "last_layer1_upsample")
    branch, out1 = _last_layers(net, net.concat([up, x1], 1, "cat1"), (256, 512), no, "last_layer1")
    up = net.upsample2(_cbl(net, branch, 128, 1, "last_layer2_conv"), "last_layer2_upsample")
    _, out2 = _last_layers(net, net.concat([up, x2], 1, "cat2"), (128, 256), no, "last_layer2")
    for i, out in enumerate((out0, out1, out2)):
        net.output(out, f"out{i}")
    return net.model(f"YOLOv3 (bubbliiiing/yolo3-pytorch), {size}x{size}, head convolutions, random weights (seed {seed})")


def _last_layers(net, x, filters, out, name):
    """make_last_layers: 1x1, 3x3, 1x1, 3x3, 1x1 (the branch), then 3x3 and the 1x1 head conv."""
    for j in range(5):
        x = _cbl(net, x, filters[j % 2], 1 if j % 2 == 0 else 3, f"{name}.{j}")
    head = _cbl(net, x, filters[1], 3, f"{name}.5")
    return x, net.conv(head, out, 1, bias=True, name=f"{name}.6")


def yolov4(batch=1, dtype="float32", size=416, classes=80, seed=0):
    """YOLOv4 (CSPDarknet-53, Mish; SPP, PANet): input "images" (batch, 3, size, size), outputs
    "p3", "p4", "p5": (batch, 3, size/s, size/s, classes + 5), strides 8, 16, 32."""
    _check_size(size)
    net = Net("yolov4", dtype, seed)
    x = _cbm(net, net.input("images", (batch, 3, size, size)), 32, 3, "backbone.conv1")
    stages = []
    for i, (out, blocks) in enumerate(zip((64, 128, 256, 512, 1024), (1, 2, 8, 8, 4))):
        x = _csp_stage(net, x, out, blocks, i == 0, f"backbone.stages.{i}")
        stages.append(x)
    x2, x1, x0 = stages[2:]
    p5 = _convs(net, x0, (512, 1024, 512), "conv1")
    pools = [net.max_pool(p5, k, 1, k // 2, f"SPP.maxpools.{j}") for j, k in enumerate((13, 9, 5))]
    p5 = _convs(net, net.concat(pools + [p5], 1, "SPP.cat"), (512, 1024, 512), "conv2")
    p5_up = net.upsample2(_cbl(net, p5, 256, 1, "upsample1.conv"), "upsample1.up")
    p4 = _convs(net, net.concat([_cbl(net, x1, 256, 1, "conv_for_P4"), p5_up], 1, "cat_p4"), (256, 512) * 2 + (256,), "make_five_conv1")
    p4_up = net.upsample2(_cbl(net, p4, 128, 1, "upsample2.conv"), "upsample2.up")
    p3 = _convs(net, net.concat([_cbl(net, x2, 128, 1, "conv_for_P3"), p4_up], 1, "cat_p3"), (128, 256) * 2 + (128,), "make_five_conv2")
    p4 = _convs(net, net.concat([_cbl(net, p3, 256, 3, "down_sample1", 2), p4], 1, "cat_n4"), (256, 512) * 2 + (256,), "make_five_conv3")
    p5 = _convs(net, net.concat([_cbl(net, p4, 512, 3, "down_sample2", 2), p5], 1, "cat_n5"), (512, 1024) * 2 + (512,), "make_five_conv4")
    for level, (feat, c, name) in enumerate(((p3, 256, "yolo_head3"), (p4, 512, "yolo_head2"), (p5, 1024, "yolo_head1"))):
        net.output(_raw_head(net, _cbl(net, feat, c, 3, f"{name}.0"), classes, f"{name}.1"), f"p{level + 3}")
    return net.model(f"YOLOv4 (bubbliiiing/yolov4-pytorch), {size}x{size}, random weights (seed {seed})")


def _cbm(net, x, out, k, name, stride=1):
    """BasicConv of CSPdarknet.py: convolution, BatchNorm, Mish."""
    return net.mish(net.batch_norm(net.conv(x, out, k, stride, name=f"{name}.conv"), f"{name}.bn"), f"{name}.activation")


def _convs(net, x, filters, name):
    """make_three_conv / make_five_conv: LeakyReLU convs alternating 1x1 and 3x3."""
    for j, c in enumerate(filters):
        x = _cbl(net, x, c, 1 if j % 2 == 0 else 3, f"{name}.{j}")
    return x


def _csp_stage(net, x, out, blocks, first, name):
    """Resblock_body: 3x3/2 downsampling conv, two 1x1 splits, residual blocks on one, concat, 1x1."""
    x = _cbm(net, x, out, 3, f"{name}.downsample_conv", stride=2)
    half = out if first else out // 2
    x0 = _cbm(net, x, half, 1, f"{name}.split_conv0")
    x1 = _cbm(net, x, half, 1, f"{name}.split_conv1")
    for j in range(blocks):
        y = _cbm(net, _cbm(net, x1, out // 2 if first else half, 1, f"{name}.blocks_conv.{j}.0"), half, 3, f"{name}.blocks_conv.{j}.1")
        x1 = net.binary("Add", x1, y, f"{name}.blocks_conv.{j}.add")
    x1 = _cbm(net, x1, half, 1, f"{name}.blocks_conv.{blocks}")
    return _cbm(net, net.concat([x1, x0], 1, f"{name}.cat"), out, 1, f"{name}.concat_conv")

