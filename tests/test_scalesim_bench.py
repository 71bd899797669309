"""bench/scalesim.py: its 54 layers derived from ResNet-50 are SCALE-Sim's topology rows, each
row's GEMM is SCALE-Sim's (no padding), and the matrix engine of bench/scalesim_os32.yaml spends
SCALE-Sim's count of cycles on a layer (its figure, the last cycle's index, plus one), the
deepest reduction included."""

import sys
from pathlib import Path

import pytest

import chips
import sim

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import scalesim

ROWS = {row[0]: row for row in scalesim.scalesim_rows()}


def test_the_derived_layers_are_scalesims_rows():
    assert len(ROWS) == 54
    assert scalesim.layers() == scalesim.scalesim_rows()


@pytest.mark.parametrize("name, mnk", [
    ("Conv1", (109 * 109, 64, 7 * 7 * 3)),  # (224 - 7) // 2 + 1 = 109: no padding
    ("CB2a_2", (54 * 54, 64, 3 * 3 * 64)),
    ("CB3s", (28 * 28, 512, 256)),  # a 1x1 convolution of stride 2 on 56 x 56
    ("FC6", (1, 1000, 2048)),
])
def test_a_rows_gemm_is_scalesims(name, mnk):
    assert scalesim.gemm(ROWS[name]) == mnk


def test_scalesims_count():
    # CB5a_2: ceil(25/32) * ceil(512/32) folds of 4608 + 62 cycles, less one
    assert scalesim.scalesim_cycles(25, 512, 4608) == 1 * 16 * (4608 + 62) - 1 == 74_719


@pytest.mark.parametrize("name", ["FC6", "CB5a_2", "IB4b_3"])
def test_the_matrix_engine_spends_scalesims_cycles(name):
    chip = chips.load(scalesim.CHIP)
    m, n, k = scalesim.gemm(ROWS[name])
    res = sim.run(scalesim.product(name, m, n, k), chip, mode="timing")
    assert res.stats.busy["mxu"] == scalesim.scalesim_cycles(m, n, k) + 1
