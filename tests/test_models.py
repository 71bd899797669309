"""Whole networks end to end: ResNet-50 (bench/resnet50.py) at a small input size, the machine's
outputs against the references layer by layer, float32 and int8."""

import sys
from pathlib import Path

import numpy as np
import pytest
from refeval import evaluate

import chips
import sim

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from resnet50 import resnet50


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_resnet50_matches_its_references(dtype):
    graph = resnet50(dtype, size=32)
    chip = chips.load("bm1684")
    rng = np.random.default_rng(3)
    image = (rng.integers(-64, 64, (1, 3, 32, 32)).astype(np.int8) if dtype == "int8"
             else rng.standard_normal((1, 3, 32, 32)).astype(np.float32))
    got = sim.run(graph, chip, {"image": image}).outputs["logits"]
    want = evaluate(graph, {"image": image}, chip)["logits"]
    assert got.shape == want.shape == (1, 1000)
    if dtype == "int8":
        np.testing.assert_array_equal(got, want)
        assert len(np.unique(got)) > 10  # not saturated to a constant
    else:
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * np.abs(want).max())
