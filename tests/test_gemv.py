"""A matrix-vector product (a decoder's projection for one token) streams its weights in large
blocks (isa/lower/schedule/gemv.py): equal column tiles on whole lines of DDR, K in the largest
blocks that fit, and the numbers are the product's."""

import re

import numpy as np
import pytest

import chips
import isa
import sim
from isa.lower.schedule import gemv


def test_widths_cut_n_into_equal_tiles_of_whole_lines():
    assert gemv.widths(4096, 16, 64) == [4096, 2048, 1024, 512, 256, 128, 64]
    widths = gemv.widths(11008, 16, 64)
    assert widths[0] == 11008 and all(11008 % w == 0 and w % 64 == 0 for w in widths[1:])
    assert gemv.widths(40, 16, 64) == [40]  # narrower than a line: the whole of N


def test_blocks_are_halvings_and_powers_of_two_no_smaller_than_the_depth():
    assert gemv.blocks(4096, 16) == [4096, 2048, 1024, 512, 256, 128, 64, 32, 16]
    assert gemv.blocks(8, 16) == [8]  # a K below the depth: whole
    assert gemv.blocks(11008, 16)[-6:] == [128, 96, 64, 48, 32, 16]  # 11008 = 43 x 256: the powers of two between the halvings


@pytest.mark.parametrize("chip_name,k,n", [("ascend910b", 1024, 2048), ("bm1686", 512, 512)])
def test_a_gemv_streams_its_weights_in_few_large_products(chip_name, k, n):
    rng = np.random.default_rng(0)
    g = isa.Graph("gemv")
    with g:
        x = g.input("x", (1, k), "float16")
        w = g.constant("w", (rng.standard_normal((k, n)) * 0.05).astype(np.float16))
        g.output(isa.ops.matrix_mul(x, w), "y")
    chip = chips.load(chip_name, {"ops.matrix_mul": {"dtypes": ["float16"]}} if chip_name.startswith("ascend") else None)
    prog = isa.lower(g, chip)
    (note,) = [line for line in prog.notes if line.startswith("tiling")]
    tm, tn, tk = map(int, re.search(r"output tile (\d+)x(\d+), K (\d+) a step", note).groups())
    unit = chip.engines_of("matrix")[0].matrix
    assert tm == 1 and n % tn == 0 and tk >= unit.depth("float16")
    products = sum(type(i).__name__ == "Matmul" for s in prog.streams.values() for i in s)
    assert products == (n // tn) * -(-k // tk)  # one product a block: no tile smaller than it must be
    xv = rng.standard_normal((1, k)).astype(np.float16)
    y = sim.execute(prog, chip, {"x": xv}).outputs["y"].astype(np.float32)
    expected = xv.astype(np.float32) @ g.constants["w"].astype(np.float32)
    np.testing.assert_allclose(y, expected, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("bits", [None, 4])
def test_a_right_tile_recorded_once_and_moved_estimates_as_each_recorded(monkeypatch, bits):
    """The estimate records a right tile's load at the first place of its shape and moves it to
    each other's ddr bytes (matmul.py's _right_piece): on the 910B, whose L2 caches ddr by line,
    every candidate's estimate is the one recording each tile at its own place gives."""
    from isa.deploy import weight_only
    from isa.lower.templates import matmul

    rng = np.random.default_rng(1)
    g = isa.Graph("gemv")
    with g:
        x = g.input("x", (1, 2048), "float16")
        w = (rng.standard_normal((2048, 4096)) * 0.05).astype(np.float16)
        if bits:
            stored, scale, zero = weight_only.quantize_weight(w.astype(np.float32), bits, 128)
            terms = [g.constant("s", scale.astype(np.float16))] + ([g.constant("z", zero.astype(np.float16))] if zero is not None else [])
            y = isa.ops.matrix_mul_a16(x, g.constant("w", stored), *terms, bits=bits, group=128)
        else:
            y = isa.ops.matrix_mul(x, g.constant("w", w))
        g.output(y, "y")
    chip = chips.load("ascend910b")
    moved = [n for n in isa.lower(g, chip).notes if n.startswith("tiling")]
    monkeypatch.setattr(matmul._Plan, "_right_piece", lambda self, tk, tn, k0, n0: self.piece("right", tk, tn, k0, n0))
    each = [n for n in isa.lower(g, chip).notes if n.startswith("tiling")]
    assert moved == each and "estimated" in moved[0]
