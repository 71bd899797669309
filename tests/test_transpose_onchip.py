"""A transpose through local memory on the Sophgo chips, whose GDMA copies DDR to DDR directly
(isa/lower/templates/transpose.py): a GDMA load in the source's memory order, a TIU copy into the
output's order, a GDMA store; taken where it is cheaper than the direct DMA, exact to the bit."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import chips
import isa
import sim

O = isa.ops
SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DTYPES = {"bm1686": ["float32", "float16", "int8", "int16", "int32"], "bm1684": ["float32", "int8", "int16", "int32"]}


def transpose(shape, order, dtype):
    g = isa.Graph("transpose")
    with g:
        g.output(O.permute(g.input("x", shape, dtype), list(order)), "y")
    return g


def values(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if dtype.startswith("float"):
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(-100, 100, shape).astype(dtype)


def copies(res):
    return [e for e in res.trace.events if e.name == "copy"]


@pytest.mark.parametrize("chip", sorted(DTYPES))
@SETTINGS
@given(data=st.data())
def test_random_transposes_are_exact_and_go_round_only_where_that_is_faster(chip, data):
    """Random shapes and orders: the output is the input's elements moved, bit for bit; where the
    lowering goes round through local memory, the machine takes fewer cycles than the direct DMA
    it left (the same graph on the chip with a burst on local memory, which rules the detour out)."""
    rank = data.draw(st.integers(2, 4))
    shape = tuple(data.draw(st.lists(st.integers(1, 96), min_size=rank, max_size=rank)))
    order = data.draw(st.permutations(range(rank)))
    dtype = data.draw(st.sampled_from(DTYPES[chip]))
    x = values(shape, dtype)
    g = transpose(shape, order, dtype)
    res = sim.run(g, chips.load(chip), {"x": x})
    np.testing.assert_array_equal(res.outputs["y"], x.transpose(order))
    direct = sim.run(g, chips.load(chip, {"memories.lmem.burst": "64B"}), mode="timing")
    assert not copies(direct)
    if copies(res):
        assert res.cycles < direct.cycles
    else:
        assert res.cycles == direct.cycles


@pytest.mark.parametrize("chip", sorted(DTYPES))
def test_a_small_transpose_goes_direct_and_a_large_one_round(chip):
    """A few elements: three instructions' latencies cost more than the bursts saved, so one DMA;
    a prefill's key transpose: the detour, far faster than a burst per element."""
    small = sim.run(transpose((1, 3, 5), (0, 2, 1), "float32"), chips.load(chip), mode="timing")
    assert not copies(small) and len([e for e in small.trace.events if e.kind == "dma"]) == 1
    g = transpose((8, 512, 128), (0, 2, 1), "float32")
    large, direct = (sim.run(g, chips.load(chip, changes), mode="timing") for changes in ({}, {"memories.lmem.burst": "64B"}))
    assert len(copies(large)) >= 1 and large.cycles * 10 < direct.cycles


def test_chunks_that_local_memory_holds_overlap_the_tiu_with_the_gdma():
    """Local memory cut to 4 KiB a lane: the key transpose goes in many chunks, the TIU putting one
    chunk in order while the GDMA moves another; still exact and within 1.1x of its GDMA time."""
    chip = chips.load("bm1686", {"memories.lmem.size": "4KiB"})
    x = values((8, 512, 128), "float32")
    res = sim.run(transpose(x.shape, (0, 2, 1), "float32"), chip, {"x": x})
    np.testing.assert_array_equal(res.outputs["y"], x.transpose(0, 2, 1))
    tiu, gdma = copies(res), [e for e in res.trace.events if e.kind == "dma"]
    assert len(tiu) >= 8 and len(gdma) == 2 * len(tiu)
    assert any(d.start < t.end and t.start < d.end for t in tiu for d in gdma)
    assert res.cycles < 1.1 * sum(e.end - e.start for e in gdma)
