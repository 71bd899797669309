"""nms and nms_v2 on the scalar engine: TensorFlow's semantics worked by hand (IoU strictly
above the threshold suppresses, corners in either order, boxes without area never suppress,
scores strictly above score_threshold kept), stable and unstable ties, random cases against the
plain greedy reference on every chip, the work formula, and every constraint violated once."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from refeval import evaluate

import chips
import isa
import sim
from isa.ops.vision import iou
from sim.kernels.sort import STABLE_COST

O = isa.ops
CHIPS = {name: chips.load(name) for name in ("generic", "bm1682", "bm1684", "bm1686")}
SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run(boxes, scores, chip="generic", v2=None, **params):
    """nms (or nms_v2 with v2 = (score_threshold, max_output_size)) of the given arrays; returns
    (result, the reference's y)."""
    g = isa.Graph("t")
    b, s = g.input("boxes", boxes.shape), g.input("scores", scores.shape)
    if v2 is None:
        g.output(O.nms(b, s, params.pop("threshold", 0.5), **params), "y")
    else:
        g.output(O.nms_v2(b, s, params.pop("threshold", 0.5), *v2, **params), "y")
    inputs = {"boxes": boxes, "scores": scores}
    res = sim.run(g, chip, inputs)
    assert sim.run(g, chip, mode="timing").cycles == res.cycles
    return res, evaluate(g, inputs, CHIPS[chip])["y"]


def f32(values):
    return np.array(values, np.float32)


BOXES = f32([[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 2, 1, 3], [1, 1, 0, 0]])  # box 3 is box 0 with its corners swapped


@pytest.mark.parametrize("chip", list(CHIPS))
def test_nms_by_hand(chip):
    """By score: 3 (0.95) kept; 0 (IoU 1 with 3) suppressed; 1 (IoU 0.9 / 1.1 = 0.82 with 3)
    suppressed; 2 (no overlap) kept."""
    res, ref = run(BOXES, f32([0.9, 0.8, 0.7, 0.95]), chip)
    np.testing.assert_array_equal(res.outputs["y"], [3, 2])
    np.testing.assert_array_equal(ref, [3, 2])
    assert res.outputs["y"].dtype == np.int32
    assert [e.note for e in res.trace.events if e.note] == ["produced [2] of at most [4]"]
    res, _ = run(BOXES, f32([0.9, 0.8, 0.7, 0.95]), chip, threshold=0.85)  # 0.82 is not above 0.85
    np.testing.assert_array_equal(res.outputs["y"], [3, 1, 2])


def test_an_iou_equal_to_the_threshold_does_not_suppress():
    """TensorFlow suppresses when IoU > threshold: [0,0,2,1] and [0,0,1,1] overlap by exactly 1/2."""
    boxes, scores = f32([[0, 0, 2, 1], [0, 0, 1, 1]]), f32([2, 1])
    assert iou(boxes[0], boxes[1]) == np.float32(0.5)
    np.testing.assert_array_equal(run(boxes, scores, threshold=0.5)[0].outputs["y"], [0, 1])
    np.testing.assert_array_equal(run(boxes, scores, threshold=0.4999)[0].outputs["y"], [0])


def test_boxes_without_area_never_suppress():
    """TensorFlow's IOU() is 0 when either box has no area, even for two equal boxes."""
    boxes, scores = f32([[0, 0, 0, 5], [0, 0, 0, 5], [1, 1, 2, 2]]), f32([3, 2, 1])
    assert iou(boxes[0], boxes[1]) == 0
    np.testing.assert_array_equal(run(boxes, scores, threshold=0.0)[0].outputs["y"], [0, 1, 2])


def test_stable_keeps_equal_scores_in_index_order():
    boxes = f32([[i * 2, 0, i * 2 + 1, 1] for i in range(6)])  # no two overlap
    scores = f32([1, 2, 1, 2, 1, 2])
    res, ref = run(boxes, scores, "bm1684", stable=True)
    np.testing.assert_array_equal(res.outputs["y"], [1, 3, 5, 0, 2, 4])
    np.testing.assert_array_equal(ref, [1, 3, 5, 0, 2, 4])
    unstable, _ = run(boxes, scores, "bm1684")
    kept = unstable.outputs["y"]
    assert sorted(kept[:3]) == [1, 3, 5] and sorted(kept[3:]) == [0, 2, 4]  # by score, ties in any order
    np.testing.assert_array_equal(run(boxes, scores, "bm1684")[0].outputs["y"], kept)  # the same every run


def test_nms_v2_keeps_scores_strictly_above_score_threshold_and_at_most_max_output_size():
    boxes = f32([[i * 2, 0, i * 2 + 1, 1] for i in range(5)])
    scores = f32([0.5, 0.9, 0.2, 0.7, 0.3])
    res, ref = run(boxes, scores, "bm1686", v2=(0.3, 10))
    np.testing.assert_array_equal(res.outputs["y"], [1, 3, 0])  # 0.3 is not above 0.3
    np.testing.assert_array_equal(ref, [1, 3, 0])
    res, _ = run(boxes, scores, "bm1686", v2=(-1.0, 2))
    np.testing.assert_array_equal(res.outputs["y"], [1, 3])
    assert [e.note for e in res.trace.events if e.note] == []  # it filled its bound, (min(5, 2),)
    g = isa.Graph("t")
    assert O.nms_v2(g.input("b", (5, 4)), g.input("s", (5,)), 0.5, 0.0, 3).shape == (3,)
    assert O.nms_v2(g.input("c", (5, 4)), g.input("t", (5,)), 0.5, 0.0, 30).shape == (5,)


def test_nothing_above_score_threshold_gives_an_empty_result():
    res, ref = run(BOXES, f32([0.1, 0.2, 0.3, 0.4]), v2=(0.5, 4))
    assert res.outputs["y"].shape == (0,) and ref.shape == (0,)


# ---- random cases ------------------------------------------------------------------------------

@st.composite
def cases(draw):
    """Up to 24 boxes on a small grid (so boxes often overlap), corners in any order; scores
    distinct (any order is then the one order) or, with stable, from a few values."""
    n = draw(st.integers(1, 24))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    corners = rng.integers(0, 8, (n, 4)).astype(np.float32) / 2
    stable = draw(st.booleans())
    scores = rng.integers(0, 4, n) if stable else rng.permutation(n)
    return corners, (scores / 4).astype(np.float32), stable, draw(st.sampled_from([0.0, 0.1, 0.3, 0.5, 0.7]))


@pytest.mark.parametrize("chip", list(CHIPS))
@SETTINGS
@given(case=cases(), v2=st.none() | st.tuples(st.sampled_from([-1.0, 0.0, 0.25, 0.5]), st.integers(1, 30)))
def test_nms_random(chip, case, v2):
    boxes, scores, stable, threshold = case
    res, ref = run(boxes, scores, chip, v2=v2, threshold=threshold, stable=stable)
    np.testing.assert_array_equal(res.outputs["y"], ref)


def test_the_reference_is_a_plain_greedy_loop_checked_by_hand():
    """Three boxes in a row overlapping their neighbours by IoU 1/3: with threshold 0.3 the
    best (middle) suppresses both; with 0.34 none is suppressed."""
    boxes, scores = f32([[0, 0, 1, 2], [0, 1, 1, 3], [0, 2, 1, 4]]), f32([1, 3, 2])
    assert iou(boxes[0], boxes[1]) == np.float32(1) / np.float32(3)
    np.testing.assert_array_equal(run(boxes, scores, threshold=0.3)[1], [1])
    np.testing.assert_array_equal(run(boxes, scores, threshold=0.34)[1], [1, 2, 0])


# ---- work and the program text -----------------------------------------------------------------

@pytest.mark.parametrize("stable", [False, True])
def test_cycles_follow_the_work_formula(stable):
    """N * ceil(log2 N) for the score sort (times STABLE_COST when stable) + M * N IoU tests,
    M the output's bound: N = 10, M = 4 gives 40 + 40."""
    g = isa.Graph("t")
    g.output(O.nms_v2(g.input("b", (10, 4)), g.input("s", (10,)), 0.5, 0.0, 4, stable=stable), "y")
    res = sim.run(g, "bm1682", mode="timing")
    (event,) = [e for e in res.trace.events if e.kind == "scalar"]
    arm = CHIPS["bm1682"].engines_of("scalar")[0]
    assert event.end - event.start == arm.issue_latency + math.ceil(arm.scalar.per_element * (40 * (STABLE_COST if stable else 1) + 40))


def test_the_program_text_round_trips_the_kernels_arguments():
    g = isa.Graph("t")
    g.output(O.nms_v2(g.input("b", (10, 4)), g.input("s", (10,)), 0.45, -0.125, 7, stable=True), "y")
    prog = isa.lower(g, CHIPS["bm1684"])
    assert isa.Program.from_text(prog.to_text()) == prog
    assert "fn=nms" in prog.to_text() and "iou_threshold:0.45" in prog.to_text()


# ---- errors ------------------------------------------------------------------------------------

def test_errors():
    g = isa.Graph("t")
    boxes, scores = g.input("b", (5, 4)), g.input("s", (5,))
    with pytest.raises(isa.ShapeError, match=r"nms: boxes must have shape \[num_boxes, 4\], got \(5, 3\)"):
        O.nms(g.input("b3", (5, 3)), scores, 0.5)
    with pytest.raises(isa.ShapeError, match=r"nms_v2: boxes must have shape \[num_boxes, 4\], got \(20,\)"):
        O.nms_v2(g.input("flat", (20,)), scores, 0.5, 0.0, 3)
    with pytest.raises(isa.ShapeError, match=r"nms: scores must have shape \[num_boxes\] = \[5\], got \(4,\)"):
        O.nms(boxes, g.input("s4", (4,)), 0.5)
    with pytest.raises(isa.UnsupportedError, match=r"nms: boxes must be float32 \(the seed\), got float16"):
        O.nms(g.input("bh", (5, 4), "float16"), scores, 0.5)
    with pytest.raises(isa.UnsupportedError, match=r"nms: scores must be float32 \(the seed\), got int32"):
        O.nms(boxes, g.input("si", (5,), "int32"), 0.5)
    with pytest.raises(isa.UnsupportedError, match=r"nms: threshold must be a number, got '0.5'"):
        O.nms(boxes, scores, "0.5")
    with pytest.raises(isa.ShapeError, match=r"nms_v2: max_output_size must be >= 1, got 0"):
        O.nms_v2(boxes, scores, 0.5, 0.0, 0)
    with pytest.raises(isa.UnsupportedError, match=r"nms_v2: score_threshold must be a number, got None"):
        O.nms_v2(boxes, scores, 0.5, None, 3)
