"""The general timing mechanisms the published times called for (docs/accuracy.md), each shown
on a small program in isolation: the cycles move the way the mechanism says."""

import numpy as np
import pytest

import chips
import isa
import sim
from isa import ops as O

HEAD = (1, 3, 85, 20, 20)  # a YOLOv5 head's (batch, anchors, 5 + classes, H, W), permuted to (..., H, W, 85)


def _permute(chip, dtype):
    x = (np.random.default_rng(0).standard_normal(HEAD) * 10).astype(dtype)
    g = isa.Graph("head_permute")
    with g:
        g.output(O.permute(g.input("x", x.shape, dtype), [0, 1, 3, 4, 2]), "y")
    res = sim.run(g, chip, {"x": x})
    np.testing.assert_array_equal(res.outputs["y"], x.transpose(0, 1, 3, 4, 2))
    return res, x.nbytes


@pytest.mark.parametrize("name", ["bm1684", "bm1686"])
@pytest.mark.parametrize("dtype", ["int8", "float32"])
def test_a_permute_on_a_chip_that_copies_ddr_to_ddr_goes_round_through_local_memory(name, dtype):
    """The GDMA copies DDR to DDR directly; read in the output's order a head permute's source
    comes one element a run, a 64-byte burst each. Through local memory (no bursts) it moves its
    bytes about once each way; without a burst-free local memory it costs a burst per element."""
    chip = chips.load(name)
    res, nbytes = _permute(chip, dtype)
    once = 2 * nbytes / chip.memories["ddr"].bandwidth  # cycles to read and write the bytes at DDR's rate
    assert res.stats.ddr_write_bytes == nbytes
    assert once < res.cycles < 1.3 * once + 2000
    per_element, _ = _permute(chips.load(name, {"memories.lmem.burst": 64}), dtype)
    burst = chip.memories["ddr"].burst
    elements = nbytes // np.dtype(dtype).itemsize
    assert per_element.cycles > elements * burst / chip.engines["gdma"].rate("ddr", "ddr") * 0.9
