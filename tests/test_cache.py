"""The machine's cache of DDR (isa/timing/cache.py): which lines a region touches, least-recently-used
replacement by transfer, and what a hit changes in a run: DDR traffic, the trace, the cycles."""

from unittest import mock

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

import chips
import isa
import sim
from isa.errors import ConfigError
from isa.instructions import Region
from isa.timing import Arbiter, Cache, touched_lines
from isa.timing import cache as cache_module
from traces.summary import format_summary


def brute_lines(region, line):
    """Every element's bytes, one by one."""
    item = isa.dtypes.itemsize(region.dtype)
    offsets = np.zeros(1, np.int64)
    for n, s in zip(region.shape, region.strides):
        offsets = (offsets[:, None] + np.arange(n) * s).reshape(-1)
    if not all(region.shape):
        return np.zeros(0, np.int64)
    starts = region.addr + offsets * item
    return np.unique(np.concatenate([(starts + b) // line for b in range(item)]))


@pytest.mark.parametrize("region", [
    Region("ddr", 0, "float16", (4, 64), (64, 1)),  # contiguous: 512 bytes
    Region("ddr", 100, "float16", (4, 8), (1000, 1)),  # rows of 16 bytes, far apart
    Region("ddr", 4096, "float32", (3, 5), (-7, 1)),  # walking backwards
    Region("ddr", 64, "int8", (8, 2, 3), (0, 50, 1)),  # a broadcast dimension
    Region("ddr", 0, "float32", (2, 0), (4, 1)),  # empty
])
def test_touched_lines_are_every_elements_line(region):
    np.testing.assert_array_equal(touched_lines(region, 32), brute_lines(region, 32))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5), st.integers(-40, 40)), min_size=1, max_size=3),
       st.sampled_from(["int8", "float16", "float32"]), st.sampled_from([8, 32, 128]))
def test_touched_lines_random_regions(dims, dtype, line):
    shape, strides = zip(*dims)
    low = -sum((n - 1) * s for n, s in dims if s < 0)
    region = Region("ddr", low * isa.dtypes.itemsize(dtype) + 3, dtype, shape, strides)
    np.testing.assert_array_equal(touched_lines(region, line), brute_lines(region, line))


def dense(addr, nbytes):
    return Region("ddr", addr, "int8", (nbytes,), (1,))


def test_least_recently_used_transfers_leave_whole():
    cache = Cache("l2", 32, capacity=4 * 32, ddr_extent=1024, accesses=16)
    a, b, c = dense(0, 64), dense(64, 64), dense(128, 64)  # two lines each; four fit
    assert cache.access(a) == 0.0
    assert cache.access(a) == 1.0
    assert cache.access(b) == 0.0  # a and b: four lines
    assert cache.access(a) == 1.0  # a is now the most recent
    assert cache.access(c) == 0.0  # six lines: b, the least recent, leaves
    assert cache.access(a) == 1.0
    assert cache.access(b) == 0.0
    cache.access(dense(32, 64))  # a write keeps its lines (a's second, b's first), as the latest
    assert cache.access(c) == 0.0  # c left when b came; now a's first line, then b's second leave
    assert cache.access(dense(0, 96)) == pytest.approx(2 / 3)  # lines 1 and 2 (the write's) are held


def test_a_transfer_larger_than_the_cache_keeps_nothing():
    cache = Cache("l2", 32, capacity=2 * 32, ddr_extent=1024, accesses=4)
    big = dense(0, 96)
    assert cache.access(big) == 0.0
    assert cache.access(big) == 0.0


def reference_hits(regions, line, capacity):
    """What Cache.access returns for each region in turn, from a plain model: every line holds
    the number of the last access that touched it, and while more lines are held than fit, the
    oldest access's lines leave."""
    stamp, oldest, now, hits = {}, 0, 0, []
    for region in regions:
        lines = set(brute_lines(region, line).tolist())
        if not lines:
            hits.append(0.0)
            continue
        hits.append(sum(stamp.get(k, -1) >= oldest for k in lines) / len(lines))
        stamp.update(dict.fromkeys(lines, now))
        now += 1
        while sum(s >= oldest for s in stamp.values()) > capacity // line:
            oldest += 1
    return hits


@st.composite
def accesses(draw):
    """A sequence of up to 30 accesses to a few random regions (repeats, overlaps and strides
    of either sign), a line and a capacity of 1 to 24 lines."""
    regions = []
    for _ in range(draw(st.integers(1, 6))):
        dims = draw(st.lists(st.tuples(st.integers(1, 6), st.integers(-70, 70)), min_size=1, max_size=3))
        dtype = draw(st.sampled_from(["int8", "float16", "float32"]))
        shape, strides = zip(*dims)
        low = -sum((n - 1) * s for n, s in dims if s < 0)
        regions.append(Region("ddr", draw(st.integers(0, 300)) + low * isa.dtypes.itemsize(dtype), dtype, shape, strides))
    line = draw(st.sampled_from([8, 32, 128]))
    return draw(st.lists(st.sampled_from(regions), min_size=1, max_size=30)), line, line * draw(st.integers(1, 24))


@settings(max_examples=150, deadline=None)
@given(accesses())
def test_hit_fractions_are_the_plain_models(case):
    sequence, line, capacity = case
    cache = Cache("l2", line, capacity, ddr_extent=1 << 16, accesses=len(sequence))
    assert [cache.access(r) for r in sequence] == reference_hits(sequence, line, capacity)


@settings(max_examples=100, deadline=None)
@given(accesses())
def test_hit_fractions_are_the_plain_models_with_pages_taken_back(case):
    sequence, line, capacity = case
    with mock.patch.object(cache_module._Stamps, "PAGE", 2):  # pages of two lines: many leave and are placed again
        cache = Cache("l2", line, capacity, ddr_extent=1 << 16, accesses=len(sequence))
        assert [cache.access(r) for r in sequence] == reference_hits(sequence, line, capacity)


def test_a_stream_larger_than_the_cache_keeps_about_the_cache_in_pages():
    with mock.patch.object(cache_module._Stamps, "PAGE", 2):
        cache = Cache("l2", 32, capacity=4 * 32, ddr_extent=1 << 16, accesses=200)
        hits = [cache.access(dense(64 * k, 64)) for k in range(100)]  # 100 pages of two lines, each read once
        assert hits == [0.0] * 100
        assert cache.access(dense(64 * 99, 64)) == 1.0 and cache.access(dense(64 * 98, 64)) == 1.0
        assert cache.access(dense(0, 64)) == 0.0
        assert cache.stamp.used <= 8  # the places of pages that left are given again, not 100 new ones


PROGRAM = """.program chip=ascend310b graph=t
.input x ddr@0x0:float16[64,64;64,1]
.engine mte2
mte2.0 dma src=ddr@0x0:float16[64,64;64,1] dst=l1@0x0:float16[64,64;64,1]
mte2.1 dma src=ddr@0x0:float16[32,64;64,1] dst=l1@0x2000:float16[32,64;64,1]
mte2.2 dma src=ddr@0x1000:float16[32,64;64,1] dst=l1@0x4000:float16[32,64;64,1]
"""


@pytest.mark.parametrize("cache", [True, False])
def test_a_second_read_of_the_same_bytes_comes_from_the_cache(cache):
    chip = chips.load("ascend310b", {"memories.l2.cache": cache})
    program = isa.Program.from_text(PROGRAM)
    x = np.arange(64 * 64, dtype=np.float16).reshape(64, 64)
    functional = sim.execute(program, chip, {"x": x})
    timing = sim.execute(program, chip, {"x": x}, mode="timing")
    assert functional.cycles == timing.cycles
    dma = [e for e in functional.trace.events if e.kind == "dma"]
    assert [e.cached for e in dma] == ([0, 4096, 4096] if cache else [0, 0, 0])
    assert functional.stats.ddr_read_bytes == (8192 if cache else 16384)
    assert functional.stats.cache_hit_bytes == (8192 if cache else 0)
    assert ("ddr: read 8.0 KiB, write 0 B (and 8.0 KiB of ddr read from its cache)" if cache else "ddr: read 16.0 KiB, write 0 B") \
        in format_summary(functional.stats).splitlines()
    assert sum(v * (b - a) for (a, v), (b, _) in zip(timing.trace.counters["ddr.read"], timing.trace.counters["ddr.read"][1:])) \
        == pytest.approx(functional.stats.ddr_read_bytes, rel=0.01)
    # the hits move at the L2's bandwidth, past DDR's: the cached run is the faster
    uncached = sim.execute(program, chips.load("ascend310b", {"memories.l2.cache": False}), mode="timing")
    assert (timing.cycles < uncached.cycles) == cache


def test_a_matrix_product_on_24_cores_reads_each_ddr_byte_once():
    """On the 910B the cores share the L2: the right operand every row block reads, and the
    left row blocks several cores read, come from DDR once; values are the product's."""
    chip = chips.load("ascend910b")
    rng = np.random.default_rng(5)
    g = isa.Graph("mm")
    with g:
        x = g.input("x", (256, 512), "float16")
        w = g.input("w", (512, 512), "float16")
        g.output(isa.ops.matrix_mul(x, w), "y")
    xv, wv = (rng.standard_normal(s).astype(np.float16) for s in ((256, 512), (512, 512)))
    res = sim.run(g, chip, {"x": xv, "w": wv})
    assert res.stats.ddr_read_bytes == xv.nbytes + wv.nbytes
    assert res.stats.cache_hit_bytes > 0
    np.testing.assert_allclose(res.outputs["y"].astype(np.float32), xv.astype(np.float32) @ wv.astype(np.float32), rtol=2e-2, atol=5e-2)
    assert sim.run(g, chip, {"x": xv, "w": wv}, mode="timing").cycles == res.cycles


@pytest.mark.parametrize("override, message", [
    ({"memories.ddr.cache": True}, "only a shared local memory"),
    ({"memories.l1.cache": True}, "only a shared local memory"),
])
def test_only_a_shared_on_chip_memory_caches_ddr(override, message):
    with pytest.raises(ConfigError, match=message):
        chips.load("ascend910b", override)


def test_one_memory_caches_ddr():
    extra = {"kind": "local", "shared": True, "size": "1MiB", "bandwidth": 64, "cache": True}
    with pytest.raises(ConfigError, match="one memory caches ddr, and l2 already does"):
        chips.load("ascend310b", {"memories.l3": extra})


@pytest.mark.parametrize("b_cap, rates", [(300, (80, 80)), (40, (240, 40))])
def test_a_partly_cached_transfer_takes_ddr_bandwidth_for_its_misses_only(b_cap, rates):
    """Transfer a reads a quarter of its bytes from DDR and the rest from the L2; b reads DDR
    only. Max-min fair shares: both rise until DDR (1.25 x the rate) is full; with b capped at
    40, a rises on until its quarter fills what b leaves of DDR: 0.25 x 240 + 40 = 100."""
    env = simpy.Environment()
    arbiter = Arbiter(env, {"ddr": 100, "l2": 400, "l1": 1000})
    ends = {}

    def ended(name):  # waited on at once, as the arbiter asks
        return lambda _: ends.setdefault(name, env.now)

    arbiter.transfer(rates[0] * 10 + 1, 300, {"ddr": 0.25, "l2": 0.75, "l1": 1}, "ddr", "l1", cached=0.75).callbacks.append(ended("a"))
    arbiter.transfer(rates[1] * 10, b_cap, {"ddr": 1, "l1": 1}, "ddr", "l1").callbacks.append(ended("b"))
    env.run()
    # each moves 10 cycles' worth at its rate; a's extra byte, alone, takes one more cycle
    assert ends == {"a": 11, "b": 10}
    # the DDR read traffic counts a's misses only: a quarter of its rate, then of its cap alone
    assert arbiter.read == [(0, pytest.approx(0.25 * rates[0] + rates[1])), (10, 0.25 * 300), (11, 0)]
