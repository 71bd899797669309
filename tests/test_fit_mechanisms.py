"""The op-table mechanism bench/fit.py fits (docs/accuracy.md): an activation the chip runs as a
layer of its own (`kind: global`) instead of in a convolution's layer group (`local`) moves its
operands through DDR, shown on a convolution and a leaky ReLU."""

import numpy as np
import pytest

import chips
import isa
import sim
from isa import ops as O

SHAPE = (1, 16, 16, 16)


def conv_leaky():
    rng = np.random.default_rng(0)
    g = isa.Graph("conv_leaky")
    with g:
        x = g.input("x", SHAPE, "float32")
        w = g.constant("w", (rng.standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32))
        h = O.conv(x, w, pad_h_t=1, pad_h_b=1, pad_w_l=1, pad_w_r=1, name="conv")
        g.output(O.active_param(h, "leaky_relu", [0.1], name="leaky"), "y")
    return g, {"x": rng.standard_normal(SHAPE).astype(np.float32)}


@pytest.mark.parametrize("name", ["bm1684", "bm1686"])
def test_a_global_activation_is_a_layer_of_its_own_through_ddr(name):
    g, x = conv_leaky()
    fused = sim.run(g, chips.load(name, {"ops.active_param.leaky_relu.kind": "local"}), x)
    alone = sim.run(g, chips.load(name, {"ops.active_param.leaky_relu.kind": "global"}), x)
    np.testing.assert_array_equal(alone.outputs["y"], fused.outputs["y"])
    h = fused.outputs["y"]
    assert (h[h < 0] != 0).any()  # the negative slope is applied, not a relu
    nbytes = int(np.prod(SHAPE)) * 4
    assert fused.stats.ddr_write_bytes == nbytes  # the activation's result only
    assert alone.stats.ddr_write_bytes == 2 * nbytes  # the convolution's result too
    assert alone.stats.ddr_read_bytes >= fused.stats.ddr_read_bytes + nbytes  # and read back
    assert alone.cycles > fused.cycles
