"""Tiles of a matrix-vector product (a decoder's projections for one new token): the left
operand is a few rows, so the right operand (the weights) is read once whatever the tiling and
there is no reuse for small tiles to win. A serving compiler streams it: each unit takes a
share of the columns (equal tiles) and walks K in the largest blocks that fit, so the product is a few long
DMA streams per core. The least-estimate search over every size would take the smallest blocks
(they fill the pipeline a few hundred cycles sooner) at hundreds of times the instructions,
which cost the lowering and the simulation their time and buy no accuracy: the stream runs at
the DDR's bandwidth either way. So only the column widths are weighed by the estimate, each
with the largest K block that fits."""

import math

from .tiling import halvings


def is_gemv(rows: int, unit_rows: int) -> bool:
    """Whether a product of `rows` left rows (all its batch's) leaves part of one block of the
    matrix unit's rows empty: a matrix-vector product (a block of full rows is a matrix's)."""
    return rows < unit_rows


def widths(n_limit: int, unit_n: int, line: int) -> list:
    """The column widths (tn) to weigh, largest first: those that cut N into equal tiles, in
    multiples of the unit's n and of `line` columns (a burst of DDR: no two tiles read parts of
    one line, which a cache of DDR would fetch once for both); where none does, N and its halvings
    in whole lines."""
    step = math.lcm(unit_n, line)
    equal = {tn for tn in range(step, n_limit, step) if n_limit % tn == 0}
    if not equal:  # no equal cut: halvings in whole lines, the last tile shorter (N itself may not fit with a deep K block)
        equal = {tn for tn in halvings(n_limit, step) if tn % step == 0}
    return sorted({n_limit} | equal, reverse=True)


def blocks(k_limit: int, depth: int) -> list:
    """The K blocks (tk), largest first: halvings of K in multiples of the unit's depth and the
    depth's powers-of-two multiples below K, none smaller than the depth. A K of 11008 (43 x 256),
    whose halvings below 176 are 96 and 48, is then cut in 64s where 64 is the most that fits
    beside a column block: a quarter fewer steps than in 48s, the same bytes."""
    halves = {k for k in halvings(k_limit, depth) if k >= min(depth, k_limit)}
    powers = {depth << s for s in range(k_limit.bit_length()) if depth << s < k_limit}
    return sorted(halves | powers, reverse=True)
