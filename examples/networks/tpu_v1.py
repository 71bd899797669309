"""The TPU v1 paper's multi-layer perceptrons (Jouppi et al., "In-Datacenter Performance Analysis
of a Tensor Processing Unit", ISCA 2017, Table 1) as INT8 isa graphs: MLP0 has 5 fully connected
layers and 20 M weights (batch 200), MLP1 4 layers and 5 M weights (batch 168), ReLU after each.
The paper gives neither layer widths nor input sizes; these builders take every layer square and
equally wide, the width that holds the paper's weight count (MLP0: 5 x 2000 x 2000 = 20,000,000;
MLP1: 4 x 1118 x 1118 = 4,999,696). A fully connected layer's time on the TPU depends on its weight
bytes and the batch (its weights stream from DRAM once a batch, paper section 4), so the widths
move the time little; they are an assumption all the same.

Each layer is the seed's matrix_mul in LowPrecisionSymmetric mode (int8 operands, an int16 bias,
scale 1/128), then relu on int8, with seeded random values: timing does not depend on them.
"""

import numpy as np

import isa

MLPS = {"mlp0": (5, 2000), "mlp1": (4, 1118)}  # layers, width


def tpu_mlp(batch=200, dtype="int8", layers=5, width=2000, name="mlp0", seed=0):
    """An INT8 MLP graph: input "x" (batch, width) int8, output "y" (batch, width) int8."""
    if dtype != "int8":
        raise ValueError(f"dtype {dtype!r}: the TPU v1 runs int8 only")
    g = isa.Graph(name)
    rng = np.random.default_rng(seed)
    x = g.input("x", (batch, width), "int8")
    for i in range(layers):
        w = g.constant(f"fc{i}.weight", rng.integers(-8, 8, (width, width), endpoint=True).astype(np.int8))
        b = g.constant(f"fc{i}.bias", rng.integers(-64, 64, (1, width)).astype(np.int16))
        x = isa.ops.active(isa.ops.matrix_mul(x, w, b, scale=1 / 128, name=f"fc{i}"), "relu", name=f"fc{i}.relu")
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
