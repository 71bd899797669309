"""Folding inference BatchNormalization into the Conv, ConvTranspose or Gemm before it (the
`bn_fold` import pass, passes.py).

BatchNormalization in inference is y = x * s + t per channel, s = scale / sqrt(var + epsilon),
t = B - mean * s. After a convolution y = conv(x, W) + b that is a convolution again:

    W' = W * s (per output channel),   b' = (b - mean) * s + B

computed in float64 from the constants and cast to the weight's dtype. Deployment compilers do
this offline: TPU-MLIR's TopBatchNormMergeToConv (lib/Dialect/Top/Canonicalize/BatchNorm.cpp)
and onnxruntime's ConvBNFusion (onnxruntime/core/optimizer/conv_bn_fusion.cc). Only constants
change; every activation is still computed by the simulated machine, now without the per-channel
multiply-add (and the parameters' arithmetic) the BatchNormalization would run.

A BatchNormalization folds when it is in inference mode (training_mode 0, one output), the value
it normalizes is the first output of a Conv, ConvTranspose or Gemm that nothing else reads (no
other node, not a graph output), and the weight, the bias (if any) and its four parameters are
float constants (initializers or Constant nodes) whose shapes fit (one value per output
channel). The folded node keeps the producer's name and takes the BatchNormalization's output.
Otherwise the BatchNormalization stays and maps as it always did (reduce.py).

- Conv: W is (M, C/group, k...): output channel o scales W[o].
- ConvTranspose: W is (C, M/group, k...): output channel g * M/group + j scales W[g * C/group + i, j].
- Gemm: Y = alpha * A' B' + beta * C is (M, N) and the channel is N: B' scales by column, and
  C' = (beta * C - mean) * s + B with beta = 1.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from onnx import helper

from .builder import node_attr
from .registry import DEFAULT_DOMAINS

if TYPE_CHECKING:
    from typing import Any

    from numpy.typing import NDArray
    from onnx import NodeProto

    from .importer import Source
    from .passes import Graph

HEADS = ("Conv", "ConvTranspose", "Gemm")


def fold_batch_norms(source: Source, g: Graph) -> str:
    """Fold every foldable BatchNormalization of the source (g: its passes.Graph); the note."""
    weights = source.weights
    taken = set(weights.names()) | g.inputs | set(g.producer)
    folded = 0
    for bn in list(g.nodes):
        if bn.op_type != "BatchNormalization" or bn.domain not in DEFAULT_DOMAINS or not g.alive(bn) or not _inference(bn):
            continue
        head = g.producer.get(bn.input[0])
        if head is None or head.op_type not in HEADS or head.domain not in DEFAULT_DOMAINS or head.output[0] != bn.input[0]:
            continue
        if not g.private(bn.input[0]) or len(bn.input) < 5:
            continue
        arrays = _arrays(g, head, bn)
        if arrays is None:
            continue
        weight, bias, attrs = _fold(head, bn, arrays)
        names = []
        for key, array in (("weight", weight), ("bias", bias)):
            name = _fresh(f"{head.name or head.output[0]}.{key}_bn_folded", taken)
            weights[name] = array
            names.append(name)
        inputs = [head.input[0], *names]
        new = helper.make_node(head.op_type, inputs, [bn.output[0]], name=head.name, domain=head.domain)
        new.attribute.extend(a for a in head.attribute if a.name not in attrs)
        new.attribute.extend(helper.make_attribute(k, v) for k, v in attrs.items())
        g.replace([head, bn], [new])
        folded += 1
    g.commit()
    return f"{folded} BatchNormalization(s) folded into the convolution or Gemm before them"


def _inference(bn: NodeProto) -> bool:
    """Inference mode: training_mode 0 (opset 14 on) and only Y asked for (before it, more outputs
    meant training)."""
    return not node_attr(bn, "training_mode", 0) and len([o for o in bn.output if o]) == 1


def _arrays(g: Graph, head: NodeProto, bn: NodeProto) -> dict[str, NDArray[Any]] | None:
    """The constants the fold reads, by name, when they are all known floats that fit; else None."""
    names = [n for n in list(head.input[1:3]) + list(bn.input[1:5]) if n]
    if len(head.input) < 2 or not head.input[1]:
        return None
    arrays = {}
    for name in names:
        value = g.value(name)
        if value is None or np.asarray(value).dtype.kind != "f":
            return None
        arrays[name] = np.asarray(value)
    return arrays if _fits(head, bn, arrays) else None


def _fits(head: NodeProto, bn: NodeProto, arrays: dict[str, NDArray[Any]]) -> bool:
    """Whether the BatchNormalization's parameters are one value per output channel of the
    head, and its bias fits."""
    w = arrays[head.input[1]]
    bias = arrays.get(head.input[2]) if len(head.input) > 2 and head.input[2] else None
    if head.op_type == "Gemm":
        if w.ndim != 2:
            return False
        channels = w.shape[0] if node_attr(head, "transB", 0) else w.shape[1]
        if bias is not None and (bias.ndim > 2 or (bias.ndim and bias.shape[-1] not in (1, channels))):
            return False
    else:
        if w.ndim < 3:
            return False
        group = node_attr(head, "group", 1)
        channels = w.shape[0] if head.op_type == "Conv" else w.shape[1] * group
        if head.op_type == "ConvTranspose" and w.shape[0] % group:
            return False
        if bias is not None and bias.shape != (channels,):
            return False
    return all(arrays[name].shape == (channels,) for name in bn.input[1:5])


def _fold(head: NodeProto, bn: NodeProto, arrays: dict[str, NDArray[Any]]) -> tuple[NDArray[Any], NDArray[Any], dict[str, float]]:
    """(new weight, new bias, attributes to set on the head)."""
    scale, shift, mean, var = (np.asarray(arrays[n], np.float64) for n in bn.input[1:5])
    s = scale / np.sqrt(var + float(node_attr(bn, "epsilon", 1e-5)))
    w0 = arrays[head.input[1]]
    w = w0.astype(np.float64)  # a fresh array: scaled in place below
    bias_name = head.input[2] if len(head.input) > 2 and head.input[2] else None
    b = np.asarray(arrays[bias_name], np.float64) if bias_name else np.zeros(1)
    attrs: dict[str, float] = {}
    if head.op_type == "Conv":
        w *= s.reshape((-1,) + (1,) * (w.ndim - 1))
    elif head.op_type == "ConvTranspose":
        group = node_attr(head, "group", 1)
        grouped = w.reshape((group, w.shape[0] // group) + w.shape[1:])  # a view of w
        grouped *= s.reshape((group, 1, w.shape[1]) + (1,) * (w.ndim - 2))
    else:  # Gemm: the channel is Y's column
        w *= s[:, None] if node_attr(head, "transB", 0) else s[None, :]
        b = b * float(node_attr(head, "beta", 1.0))
        attrs["beta"] = 1.0
    b = (b - mean) * s + shift
    return w.astype(w0.dtype), b.astype(w0.dtype), attrs


def _fresh(base: str, taken: set[str]) -> str:
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name
