"""The TPU v1 paper's applications (Jouppi et al., "In-Datacenter Performance Analysis of a Tensor
Processing Unit", ISCA 2017, Table 1) as INT8 isa graphs, where a chain of matrix products and
convolutions expresses them: the two MLPs, CNN0 and the two LSTMs' one pass over their weights.

Table 1 gives each application's layers by kind, its weights, its batch and its operations per
weight byte (multiply-adds: the paper's ridge point of 1350 is 92 T / 2 / 34 GB/s), not layer
sizes. These builders take every layer of a kind equal, square, and as wide as the paper's weight
count allows:

- MLP0: 5 fully connected layers, 20 M weights, batch 200: 5 x 2000 x 2000 = 20,000,000; MLP1: 4
  layers, 5 M weights, batch 168: 4 x 1118 x 1118 = 4,999,696. ReLU after each. Each weight is
  used once an example (200 and 168 operations per weight byte are the batches).
- CNN0: 16 convolutions, 8 M weights, batch 8, 2888 operations per weight byte: 2888 / 8 = 361
  = 19 x 19 uses of each weight an example, the output positions of a stride-1 convolution on a
  19 x 19 map, so every layer here is one, 3 x 3 (the kernel is an assumption) with 236 channels
  in and out: 16 x 236 x 236 x 9 = 8,020,224 weights. ReLU after each.
- LSTM0: 24 fully connected layers and 34 vector layers, 52 M weights, batch 64; LSTM1: 37 and 19,
  34 M weights, batch 96; sigmoid and tanh. Their operations per weight byte are their batches,
  so an LSTM's time step reads every weight once: one time step is the chain of its fully
  connected layers, 24 x 1472 x 1472 = 52,002,816 and 37 x 959 x 959 = 34,028,197 weights, each
  layer followed by a sigmoid (tanh after every fourth, an LSTM cell's four gates), and the vector
  layers as element-wise products of a layer's output with the one before it (a gate applied),
  spread evenly after the fully connected layers. The recurrence across time steps is not built.

A fully connected layer's time on the TPU depends on its weight bytes and the batch (its weights
stream from DRAM once a batch, paper section 4), so the widths move the time little; they are
assumptions all the same. Each product is the seed's matrix_mul (or conv) in
LowPrecisionSymmetric mode (int8 operands, an int16 bias), with seeded random values: timing does
not depend on them.
"""

import numpy as np

import isa

ops = isa.ops
MLPS = {"mlp0": (5, 2000), "mlp1": (4, 1118)}  # layers, width
CNN0 = (16, 236, 19, 3)  # layers, channels, map side, kernel
LSTMS = {"lstm0": (24, 34, 1472), "lstm1": (37, 19, 959)}  # fully connected layers, vector layers, width


def _int8_only(dtype):
    if dtype != "int8":
        raise ValueError(f"dtype {dtype!r}: the TPU v1 runs int8 only")


def _fc(g, rng, x, width, name, function):
    """A fully connected layer width -> width with an int16 bias, then `function`."""
    w = g.constant(f"{name}.weight", rng.integers(-8, 8, (width, width), endpoint=True).astype(np.int8))
    b = g.constant(f"{name}.bias", rng.integers(-64, 64, (1, width)).astype(np.int16))
    return ops.active(ops.matrix_mul(x, w, b, scale=1 / 128, name=name), function, name=f"{name}.{function}")


def tpu_mlp(batch=200, dtype="int8", layers=5, width=2000, name="mlp0", seed=0):
    """An INT8 MLP graph: input "x" (batch, width) int8, output "y" (batch, width) int8."""
    _int8_only(dtype)
    g = isa.Graph(name)
    rng = np.random.default_rng(seed)
    x = g.input("x", (batch, width), "int8")
    for i in range(layers):
        x = _fc(g, rng, x, width, f"fc{i}", "relu")
    g.output(x, "y")
    return g


def mlp0(batch=200, dtype="int8", seed=0):
    """MLP0 of the paper's Table 1: 5 layers, 20 M weights."""
    layers, width = MLPS["mlp0"]
    return tpu_mlp(batch, dtype, layers, width, "mlp0", seed)


def mlp1(batch=168, dtype="int8", seed=0):
    """MLP1 of the paper's Table 1: 4 layers, 5 M weights."""
    layers, width = MLPS["mlp1"]
    return tpu_mlp(batch, dtype, layers, width, "mlp1", seed)


def cnn0(batch=8, dtype="int8", seed=0):
    """CNN0 of the paper's Table 1: 16 convolutions, 8 M weights, each weight used 19 x 19 times an
    example. Input "x" (batch, 236, 19, 19) int8, output "y" of the same shape."""
    _int8_only(dtype)
    layers, channels, side, kernel = CNN0
    g = isa.Graph("cnn0")
    rng = np.random.default_rng(seed)
    x = g.input("x", (batch, channels, side, side), "int8")
    pad = kernel // 2
    for i in range(layers):
        w = g.constant(f"conv{i}.weight", rng.integers(-4, 4, (channels, channels, kernel, kernel), endpoint=True).astype(np.int8))
        b = g.constant(f"conv{i}.bias", rng.integers(-64, 64, (channels,)).astype(np.int16))
        y = ops.conv(x, w, b, pad_h_t=pad, pad_h_b=pad, pad_w_l=pad, pad_w_r=pad, scale=1 / 256, name=f"conv{i}")
        x = ops.active(y, "relu", name=f"conv{i}.relu")
    g.output(x, "y")
    return g


def tpu_lstm(batch=64, dtype="int8", fc=24, vector=34, width=1472, name="lstm0", seed=0):
    """One time step of an LSTM as the paper's Table 1 counts its layers: `fc` fully connected
    layers (sigmoid, tanh after every fourth) and `vector` element-wise products, the k-th after
    fully connected layer k * fc // vector. Input "x" (batch, width) int8, output "y" the same."""
    _int8_only(dtype)
    g = isa.Graph(name)
    rng = np.random.default_rng(seed)
    x = g.input("x", (batch, width), "int8")
    after = [k * fc // vector for k in range(vector)]
    for i in range(fc):
        before, x = x, _fc(g, rng, x, width, f"fc{i}", "tanh" if i % 4 == 3 else "sigmoid")
        for k in range(after.count(i)):
            x = ops.mul(x, before, name=f"fc{i}.gate{k}")
    g.output(x, "y")
    return g


def lstm0(batch=64, dtype="int8", seed=0):
    """LSTM0 of the paper's Table 1: 24 fully connected and 34 vector layers, 52 M weights."""
    fc, vector, width = LSTMS["lstm0"]
    return tpu_lstm(batch, dtype, fc, vector, width, "lstm0", seed)


def lstm1(batch=96, dtype="int8", seed=0):
    """LSTM1 of the paper's Table 1: 37 fully connected and 19 vector layers, 34 M weights."""
    fc, vector, width = LSTMS["lstm1"]
    return tpu_lstm(batch, dtype, fc, vector, width, "lstm1", seed)
