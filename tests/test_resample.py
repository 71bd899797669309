"""upsample (one zero-stride DMA) and interpolate (two matrix products per plane block): the
seed's example, the platforms' coordinate conventions on numbers worked by hand, random shapes
on every chip that has the op, and their errors."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from refeval import evaluate

import chips
import isa
import sim
from isa.ops.resample import weights

O = isa.ops
CHIPS = {name: chips.load(name) for name in chips.available()}
SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run(build, inputs, chip="generic"):
    g = isa.Graph("t")
    g.output(build(g), "y")
    res = sim.run(g, chip, inputs)
    assert sim.run(g, chip, mode="timing").cycles == res.cycles
    return res, evaluate(g, inputs, chips.load(chip) if isinstance(chip, str) else chip)["y"]


def test_upsample_gives_the_seeds_example():
    x = np.array([2, 3, 4, 7, 8, 9], np.float32).reshape(1, 1, 2, 3)
    res, _ = run(lambda g: O.upsample(g.input("x", x.shape), 2), {"x": x}, "bm1684")
    np.testing.assert_array_equal(res.outputs["y"].reshape(4, 6), [[2, 2, 3, 3, 4, 4], [2, 2, 3, 3, 4, 4],
                                                                   [7, 7, 8, 8, 9, 9], [7, 7, 8, 8, 9, 9]])
    assert [e.kind for e in res.trace.events if e.kind != "wait"] == ["dma"]  # no compute at all


@pytest.mark.parametrize("chip", [c for c in CHIPS if CHIPS[c].support("upsample")])
@SETTINGS
@given(data=st.data())
def test_upsample_random(chip, data):
    dtype = data.draw(st.sampled_from(sorted(CHIPS[chip].support("upsample").dtypes or ("float32", "int8"))))
    shape = tuple(data.draw(st.integers(1, 6)) for _ in range(4))
    scale = data.draw(st.integers(1, 4))
    x = (np.random.default_rng(data.draw(st.integers(0, 9999))).standard_normal(shape) * 50).astype(dtype)
    res, want = run(lambda g: O.upsample(g.input("x", shape, dtype), scale), {"x": x}, chip)
    np.testing.assert_array_equal(res.outputs["y"], want)
    np.testing.assert_array_equal(want, x.repeat(scale, 2).repeat(scale, 3))


def test_upsample_through_a_staging_memory_in_chunks(three_level):
    """No engine copies DDR to DDR there: the DMA goes round through on-chip memory, in chunks."""
    chip = chips.load(three_level.source, {"memories.lmem.size": "1KiB", "memories.l1.size": "2KiB"})
    x = np.arange(2 * 3 * 9 * 10, dtype=np.float32).reshape(2, 3, 9, 10)
    res, want = run(lambda g: O.upsample(g.input("x", x.shape), 2), {"x": x}, chip)
    np.testing.assert_array_equal(res.outputs["y"], want)
    assert sum(1 for e in res.trace.events if e.dst == "ddr") > 4


@pytest.mark.parametrize("platform, method, align, half, want", [
    # 4 -> 8 along one axis, input 0 10 20 30
    ("TENSORFLOW", "BILINEAR", False, False, [0, 5, 10, 15, 20, 25, 30, 30]),  # x * 0.5
    ("TENSORFLOW", "BILINEAR", False, True, [0, 2.5, 7.5, 12.5, 17.5, 22.5, 27.5, 30]),  # (x + .5) * .5 - .5
    ("TENSORFLOW", "NEAREST", False, False, [0, 0, 10, 10, 20, 20, 30, 30]),
    ("TENSORFLOW", "NEAREST", False, True, [0, 0, 10, 10, 20, 20, 30, 30]),  # floor((x + .5) * .5)
    ("OPENCV", "BILINEAR", False, True, [0, 2.5, 7.5, 12.5, 17.5, 22.5, 27.5, 30]),
])
def test_interpolate_conventions_by_hand(platform, method, align, half, want):
    x = np.array([0, 10, 20, 30], np.float32).reshape(1, 1, 1, 4)
    res, ref = run(lambda g: O.interpolate(g.input("x", x.shape), size=(1, 8), platform=platform, method=method,
                                           align_corners=align, half_pixel_centers=half), {"x": x})
    np.testing.assert_allclose(res.outputs["y"].reshape(-1), want, rtol=1e-6)
    np.testing.assert_allclose(ref.reshape(-1), want, rtol=1e-6)


def test_align_corners_keeps_the_corners():
    x = np.array([0, 10, 20, 30], np.float32).reshape(1, 1, 1, 4)
    res, _ = run(lambda g: O.interpolate(g.input("x", x.shape), size=(1, 7), align_corners=True), {"x": x})
    np.testing.assert_allclose(res.outputs["y"].reshape(-1), [0, 5, 10, 15, 20, 25, 30], rtol=1e-6)  # x * 3/6
    # TF's nearest with align_corners takes roundf of x * 3/6, so halves go up: 0.5 -> 1, 2.5 -> 3.
    assert [t[0][0] for t in weights(4, 7, "TENSORFLOW", "NEAREST", True, False)] == [0, 1, 1, 2, 2, 3, 3]


@pytest.mark.parametrize("chip", ["generic", "bm1686"])
@SETTINGS
@given(data=st.data())
def test_interpolate_random(chip, data):
    dtype = data.draw(st.sampled_from(["float32", "float16"]))
    n, c, h, w = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 4)), data.draw(st.integers(1, 9)), data.draw(st.integers(1, 9)))
    platform = data.draw(st.sampled_from(["TENSORFLOW", "OPENCV"]))
    method = "BILINEAR" if platform == "OPENCV" else data.draw(st.sampled_from(["NEAREST", "BILINEAR"]))
    align = platform == "TENSORFLOW" and data.draw(st.booleans())
    half = not align and data.draw(st.booleans())
    size = (data.draw(st.integers(1, 12)), data.draw(st.integers(1, 12)))
    x = np.random.default_rng(data.draw(st.integers(0, 9999))).standard_normal((n, c, h, w)).astype(dtype)
    res, want = run(lambda g: O.interpolate(g.input("x", x.shape, dtype), size=size, platform=platform, method=method,
                                            align_corners=align, half_pixel_centers=half), {"x": x}, chip)
    tol = 1e-5 if dtype == "float32" else 2e-3
    np.testing.assert_allclose(res.outputs["y"].astype(np.float32), want.astype(np.float32), rtol=tol, atol=tol)


def test_interpolate_in_plane_blocks_on_a_small_memory():
    x = np.random.default_rng(1).standard_normal((2, 5, 6, 7)).astype(np.float32)
    chip = chips.load("generic", {"memories.lmem.size": "256B"})  # 8 KiB over 32 lanes
    res, want = run(lambda g: O.interpolate(g.input("x", x.shape), scale_factor=(2, 2)), {"x": x}, chip)
    np.testing.assert_allclose(res.outputs["y"], want, rtol=1e-5, atol=1e-6)
    assert sum(1 for e in res.trace.events if e.kind == "matrix") > 2


def test_errors():
    g = isa.Graph("t")
    x = g.input("x", (1, 1, 4, 4))
    with pytest.raises(isa.ShapeError, match=r"upsample: scale must be a positive integer, got 0"):
        O.upsample(x, 0)
    with pytest.raises(isa.UnsupportedError, match=r"platform 'CAFFE' is not supported"):
        O.interpolate(x, size=(2, 2), platform="CAFFE")
    with pytest.raises(isa.UnsupportedError, match=r"OPENCV is BILINEAR"):
        O.interpolate(x, size=(2, 2), platform="OPENCV", method="NEAREST")
    with pytest.raises(isa.ShapeError, match=r"either size or scale_factor"):
        O.interpolate(x, size=(2, 2), scale_factor=(2, 2))
    with pytest.raises(isa.UnsupportedError, match=r"interpolate: dtype int8 is not supported"):
        O.interpolate(g.input("i", (1, 1, 4, 4), "int8"), size=(2, 2))
    big = isa.Graph("b")
    big.output(O.interpolate(big.input("x", (1, 1, 300, 300)), size=(300, 300)), "y")
    with pytest.raises(isa.OutOfMemoryError, match=r"one 300x300 plane"):
        isa.lower(big, chips.load("generic", {"memories.lmem.size": "8KiB"}))
    g2 = isa.Graph("u")
    g2.output(O.interpolate(g2.input("x", (1, 1, 4, 4)), size=(2, 2)), "y")
    with pytest.raises(isa.UnsupportedError, match=r"interpolate with float32 -> float32 is not supported on chip bm1684"):
        isa.lower(g2, CHIPS["bm1684"])
