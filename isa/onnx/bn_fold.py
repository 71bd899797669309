"""Folding inference BatchNormalization into the Conv, ConvTranspose or Gemm before it, on the
ONNX graph before any node is mapped (isa.from_onnx(..., fold=True), the default).

BatchNormalization in inference is y = x * s + t per channel, s = scale / sqrt(var + epsilon),
t = B - mean * s. After a convolution y = conv(x, W) + b that is a convolution again:

    W' = W * s (per output channel),   b' = (b - mean) * s + B

computed in float64 from the initializers and cast to the weight's dtype. Deployment compilers
do this offline: TPU-MLIR's TopBatchNormMergeToConv (lib/Dialect/Top/Canonicalize/BatchNorm.cpp)
and onnxruntime's ConvBNFusion (onnxruntime/core/optimizer/conv_bn_fusion.cc). Only constants
change; every activation is still computed by the simulated machine, now without the per-channel
multiply-add (and the parameters' arithmetic) the BatchNormalization would run.

A BatchNormalization folds when it is in inference mode (training_mode 0, one output), the value
it normalizes is the first output of a Conv, ConvTranspose or Gemm that nothing else reads (no
other node, not a graph output), and the weight, the bias (if any) and its four parameters are
float initializers whose shapes fit (one value per output channel). The folded node keeps the
producer's name and takes the BatchNormalization's output. Otherwise the BatchNormalization stays
and maps as it always did (reduce.py).

- Conv: W is (M, C/group, k...): output channel o scales W[o].
- ConvTranspose: W is (C, M/group, k...): output channel g * M/group + j scales W[g * C/group + i, j].
- Gemm: Y = alpha * A' B' + beta * C is (M, N) and the channel is N: B' scales by column, and
  C' = (beta * C - mean) * s + B with beta = 1.
"""

import numpy as np
import onnx
from onnx import helper, numpy_helper

HEADS = ("Conv", "ConvTranspose", "Gemm")
DEFAULT_DOMAINS = ("", "ai.onnx")


def fold_batch_norms(model):
    """The model with every foldable BatchNormalization folded into the node before it (a copy;
    the model itself when nothing folds)."""
    plans = _plans(model.graph)
    if not plans:
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    model = copy
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    taken = {t.name for t in graph.initializer} | {i.name for i in graph.input} | {o for n in graph.node for o in n.output}
    touched, drop = set(), set()
    by_index = list(graph.node)
    for head_index, bn_index in plans:
        head, bn = by_index[head_index], by_index[bn_index]
        arrays = {}
        for name in list(head.input[1:]) + list(bn.input[1:5]):
            if name and name not in arrays:
                arrays[name] = numpy_helper.to_array(inits[name])
        touched.update(arrays)
        weight, bias, attrs = _fold(head, bn, arrays)
        names = []
        for key, array in (("weight", weight), ("bias", bias)):
            name = _fresh(f"{head.name or head.output[0]}.{key}_bn_folded", taken)
            graph.initializer.append(numpy_helper.from_array(array, name))
            names.append(name)
        while len(head.input) < 3:
            head.input.append("")
        head.input[1], head.input[2] = names
        head.output[0] = bn.output[0]
        for key, value in attrs.items():
            _set_attr(head, key, value)
        drop.add(bn_index)
    for i in sorted(drop, reverse=True):
        del graph.node[i]
    used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output} | {i.name for i in graph.input}
    _remove(graph.initializer, lambda t: t.name in touched and t.name not in used)
    produced = {o for n in graph.node for o in n.output}
    _remove(graph.value_info, lambda v: v.name not in produced)  # the heads' former outputs
    return model


def _remove(repeated, unwanted):
    """Delete the entries of a protobuf repeated field for which unwanted(entry) holds, in place
    (no copy of the others: the initializers are most of a model's bytes)."""
    for i in reversed([i for i, entry in enumerate(repeated) if unwanted(entry)]):
        del repeated[i]


def _plans(graph):
    """[(head node index, BatchNormalization node index)] of the folds to make."""
    inits = {}
    for t in graph.initializer:
        inits.setdefault(t.name, t)
    readers = {}
    for n in graph.node:
        for name in n.input:
            if name:
                readers[name] = readers.get(name, 0) + 1
    graph_outputs = {o.name for o in graph.output}
    producer = {}
    for i, n in enumerate(graph.node):
        for name in n.output:
            if name:
                producer[name] = i
    plans = []
    for i, bn in enumerate(graph.node):
        if bn.op_type != "BatchNormalization" or bn.domain not in DEFAULT_DOMAINS or not _inference(bn):
            continue
        x = bn.input[0]
        if x not in producer or readers.get(x) != 1 or x in graph_outputs:
            continue
        head = graph.node[producer[x]]
        if head.op_type not in HEADS or head.domain not in DEFAULT_DOMAINS or head.output[0] != x:
            continue
        if len(bn.input) < 5 or not all(name in inits for name in bn.input[1:5]):
            continue
        params = [inits[name] for name in bn.input[1:5]]
        if _fits(head, params, inits):
            plans.append((producer[x], i))
    return plans


def _inference(bn):
    """Inference mode: training_mode 0 (opset 14 on) and only Y asked for (before it, more outputs
    meant training)."""
    training = next((helper.get_attribute_value(a) for a in bn.attribute if a.name == "training_mode"), 0)
    return not training and len([o for o in bn.output if o]) == 1


FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE)


def _fits(head, params, inits):
    """Whether the head's weight and bias are float initializers and the BatchNormalization's
    parameters are one value per output channel."""
    if len(head.input) < 2 or head.input[1] not in inits:
        return False
    bias = head.input[2] if len(head.input) > 2 and head.input[2] else None
    if bias is not None and bias not in inits:
        return False
    w = inits[head.input[1]]
    if w.data_type not in FLOATS or any(p.data_type not in FLOATS for p in params):
        return False
    if bias is not None and inits[bias].data_type not in FLOATS:
        return False
    dims = list(w.dims)
    if head.op_type == "Gemm":
        if len(dims) != 2:
            return False
        channels = dims[0] if _attr(head, "transB", 0) else dims[1]
        if bias is not None:
            c = list(inits[bias].dims)
            if len(c) > 2 or (c and c[-1] not in (1, channels)):
                return False
    else:
        if len(dims) < 3:
            return False
        group = _attr(head, "group", 1)
        channels = dims[0] if head.op_type == "Conv" else dims[1] * group
        if head.op_type == "ConvTranspose" and dims[0] % group:
            return False
        if bias is not None and list(inits[bias].dims) != [channels]:
            return False
    return all(list(p.dims) == [channels] for p in params)


def _fold(head, bn, arrays):
    """(new weight, new bias, attributes to set on the head)."""
    scale, shift, mean, var = (np.asarray(arrays[n], np.float64) for n in bn.input[1:5])
    s = scale / np.sqrt(var + float(_attr(bn, "epsilon", 1e-5)))
    w0 = arrays[head.input[1]]
    w = w0.astype(np.float64)  # a fresh array: scaled in place below
    bias_name = head.input[2] if len(head.input) > 2 and head.input[2] else None
    b = np.asarray(arrays[bias_name], np.float64) if bias_name else np.zeros(1)
    attrs = {}
    if head.op_type == "Conv":
        w *= s.reshape((-1,) + (1,) * (w.ndim - 1))
    elif head.op_type == "ConvTranspose":
        group = _attr(head, "group", 1)
        grouped = w.reshape((group, w.shape[0] // group) + w.shape[1:])  # a view of w
        grouped *= s.reshape((group, 1, w.shape[1]) + (1,) * (w.ndim - 2))
    else:  # Gemm: the channel is Y's column
        w *= s[:, None] if _attr(head, "transB", 0) else s[None, :]
        b = b * float(_attr(head, "beta", 1.0))
        attrs["beta"] = 1.0
    b = (b - mean) * s + shift
    return w.astype(w0.dtype), b.astype(w0.dtype), attrs


def _attr(node, name, default):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _set_attr(node, name, value):
    keep = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend(keep + [helper.make_attribute(name, value)])


def _fresh(base, taken):
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name
