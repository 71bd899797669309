"""bench/roofline.py's measurement: the roofline, a point's intensity and throughput from a run,
the knee, and on `generic` a memory-bound and a compute-bound product within 5% of the roof."""

import sys
from pathlib import Path

import pytest

import chips
import sim

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import roofline


def test_the_roof_is_the_lesser_of_bandwidth_times_intensity_and_the_peak():
    assert roofline.roof(100.0, 10.0, 2.0) == 20.0  # memory-bound
    assert roofline.roof(100.0, 10.0, 50.0) == 100.0  # compute-bound
    assert roofline.roof(100.0, 10.0, 10.0) == 100.0  # the ridge: peak / bandwidth


def test_a_points_figures_come_from_the_run(tiny):
    """tiny: 1 GHz, DDR 4 B/cycle, a 4 x 4 float32 array: peak 32 ops/cycle, ridge 8 ops/byte."""
    m, k, n = 8, 16, 8
    graph = roofline.matmul_graph(m, k, n, "float32")
    p = roofline.measure("batch", "8x16x8", graph, tiny, "float32")
    res = sim.run(roofline.matmul_graph(m, k, n, "float32"), tiny, mode="timing")
    assert (p.peak, p.bandwidth) == (32e9, 4e9)
    assert p.ops == 2 * m * k * n  # the machine's count: 2 per multiply-accumulate
    assert p.ddr_bytes == res.stats.ddr_read_bytes + res.stats.ddr_write_bytes >= 4 * (m * k + k * n + m * n)
    assert p.seconds == res.seconds == res.cycles / 1e9
    assert p.intensity == p.ops / p.ddr_bytes
    assert p.achieved == p.ops / p.seconds
    assert p.roof == min(32e9, 4e9 * p.intensity)
    assert p.ratio == p.achieved / p.roof
    assert p.memory_bound == (p.intensity < 8)
    matrix = sum(e.end - e.start for e in res.trace.events if e.kind == "matrix")
    assert p.mxu_seconds == matrix / 1e9
    assert p.mxu_efficiency == p.ops / (32 * matrix)
    assert p.ddr_use == p.ddr_bytes / (4 * res.cycles)
    assert p.busiest == max(res.stats.utilization.items(), key=lambda item: item[1])


def point(intensity, achieved):
    """A Point of 1e6 ops at `intensity` taking the time that makes it `achieved` ops/s."""
    ops = 10**6
    return roofline.Point("batch", "", ops, ops / intensity, ops / achieved, 0.0, peak=100.0, bandwidth=10.0, busiest=("dma", 1.0))


def test_the_knee_is_the_highest_throughput_over_the_lowest_points_bandwidth():
    low, mid, high = point(1.0, 9.0), point(5.0, 45.0), point(40.0, 90.0)  # 9 bytes/s effective, a 90 ops/s plateau
    assert roofline.knee([high, low, mid]) == pytest.approx(10.0)  # the ridge is 100 / 10 = 10
    assert roofline.ends([mid, high, low]) == {roofline.MEMORY_END: low, roofline.COMPUTE_END: high}
    assert (low.ratio, high.ratio) == (pytest.approx(0.9), pytest.approx(0.9))


def test_generic_reaches_both_roofs_within_5_percent():
    """A 32-row product fills the 32 x 32 array and is memory-bound in float16 (16 ops per DDR
    byte, under the ridge of 32); a long reduction into a 512 x 512 result is compute-bound in
    int8 (ridge 64). K is long in both, so the array's fill and drain and the first load are a
    small part."""
    chip = chips.load("generic")
    memory = roofline.measure("batch", "", roofline.matmul_graph(32, 1 << 20, 32, "float16"), chip, "float16")
    compute = roofline.measure("batch", "", roofline.matmul_graph(512, 1 << 14, 512, "int8"), chip, "int8")
    assert memory.memory_bound and memory.intensity == pytest.approx(16, rel=0.01)
    assert not compute.memory_bound
    assert memory.ratio == pytest.approx(1, abs=roofline.TARGET)
    assert compute.ratio == pytest.approx(1, abs=roofline.TARGET)


def test_the_conv_image_grows_until_the_largest_convolution_is_past_the_ridge():
    """A 1,024-channel 3x3 convolution on a 34 x 34 image is 3.2 times BM1684X's float16 ridge
    (256 ops a byte): it takes 66 x 66 (8.4 times). generic's is far past at 34 x 34. The TPU
    v1's (ridge 2,699 ops a weight-memory byte) stays under 3.5 times on every side: it takes the
    largest."""
    ridge = {}
    for name, dtype in (("bm1686", "float16"), ("generic", "float32"), ("tpu_v1", "int8")):
        chip = chips.load(name)
        ridge[name] = roofline.peak(chip, dtype) / roofline.bandwidth(chip)
        assert roofline.conv_side(chip, dtype) == {"bm1686": 66, "generic": 34, "tpu_v1": 258}[name]

    def past(name, side, dtype):
        g = roofline.conv_graph(1024, dtype, side=side)
        return 2 * 9 * 1024 * 1024 * (side - 2) ** 2 / roofline.least_bytes(g) / ridge[name]

    assert 3 < past("bm1686", 34, "float16") < roofline.PAST_RIDGE < past("bm1686", 66, "float16")
    assert all(past("tpu_v1", side, "int8") < roofline.PAST_RIDGE for side in roofline.CONV_SIDES)
