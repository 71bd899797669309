"""The lowering's estimate of a tiled op (isa/lower/schedule/estimate.py) against the machine.

The conv and matrix templates choose their tiling by it (and the layer groups price max poolings
with it) and note the choice with its estimate in the program ("tiling <op>: ... estimated N
cycles"). The estimate runs the candidate's instructions on the machine's own timing core
(isa/timing), so for an op alone it is the machine's cycles, on every chip.
"""

import re

import numpy as np
import pytest

import chips
import isa
import sim
from isa import ops as O
from isa.lower import policy_from_overrides


def conv(shape, oc, k, dtype, stride=1, groups=1):
    g = isa.Graph("conv")
    with g:
        x = g.input("x", shape, dtype)
        w = g.constant("w", np.ones((oc, shape[1] // groups, k, k), dtype=dtype))
        p = k // 2
        g.output(O.conv(x, w, groups=groups, pad_h_t=p, pad_h_b=p, pad_w_l=p, pad_w_r=p, stride_h=stride, stride_w=stride), "y")
    return g


def max_pool(shape, k, stride, pad, dtype):
    g = isa.Graph("pool")
    with g:
        g.output(O.active(O.pool(g.input("x", shape, dtype), stride, stride, k, k, pad_h=pad, pad_w=pad), "relu"), "y")
    return g


def matmul(m, k, n, dtype):
    g = isa.Graph("matmul")
    with g:
        g.output(O.matrix_mul(g.input("x", (m, k), dtype), g.input("w", (k, n), dtype)), "y")
    return g


def chip(name):
    """A shipped chip; the Ascend ones and the TPU get a matrix_mul row (they ship ATB's ops or
    their own CISC ones), as bench/roofline.py gives them."""
    if name.startswith(("ascend", "tpu")):
        return chips.load(name, {"ops.matrix_mul": {"dtypes": ["float16", "int8"]}})
    return chips.load(name)


def estimate_and_cycles(graph, chip, policy=None):
    prog = isa.lower(graph, chip, policy)
    (note,) = [n for n in prog.notes if n.startswith("tiling")]
    estimated = int(re.search(r"estimated ([\d,]+) cycles", note).group(1).replace(",", ""))
    return estimated, sim.execute(prog, chip, mode="timing").cycles


ONE_HOP = [
    ("bm1684", conv((1, 64, 56, 56), 64, 3, "float32")),
    ("bm1684", conv((1, 256, 14, 14), 512, 1, "float32")),
    ("bm1684", conv((1, 64, 56, 56), 128, 3, "float32", stride=2)),
    ("bm1684", conv((4, 128, 28, 28), 128, 3, "int8")),
    ("bm1684", conv((1, 64, 28, 28), 64, 3, "int8")),  # multiplied as 4 batch items (4N)
    ("bm1686", conv((1, 64, 56, 56), 64, 3, "float16")),
    ("bm1686", conv((1, 128, 28, 28), 128, 3, "float32")),  # a float32 convolution's own rate (conv_block_cycles)
    ("bm1682", conv((2, 32, 20, 20), 48, 3, "float32")),
    ("generic", conv((1, 16, 32, 32), 16, 3, "float32")),
    ("bm1684", conv((1, 64, 56, 56), 64, 3, "float32", groups=64)),  # depthwise, on the vector unit
    ("bm1686", conv((1, 96, 28, 28), 96, 3, "float16", stride=2, groups=96)),
    ("bm1684", max_pool((1, 64, 112, 112), 3, 2, 1, "float32")),  # a max pooling, with a relu behind it
    ("bm1686", max_pool((2, 32, 28, 28), 2, 2, 0, "int8")),
    ("bm1684", matmul(256, 1024, 1024, "float32")),
    ("bm1686", matmul(64, 4096, 4096, "float16")),
    ("bm1686", matmul(64, 512, 512, "float16")),  # the left row block kept across column blocks
    ("bm1686", matmul(128, 1024, 1024, "float32")),  # loads and stores at their links' own rates
]


@pytest.mark.parametrize("name,graph", ONE_HOP, ids=[f"{n}-{g.name}-{i}" for i, (n, g) in enumerate(ONE_HOP)])
def test_exact_where_every_transfer_is_one_hop(name, graph):
    estimated, cycles = estimate_and_cycles(graph, chip(name))
    assert estimated == cycles


@pytest.mark.parametrize("in_flight", [2, 4])
@pytest.mark.parametrize("name,graph", ONE_HOP[::3], ids=[f"{n}-{g.name}-{i}" for i, (n, g) in enumerate(ONE_HOP[::3])])
def test_exact_when_the_dma_engine_overlaps_its_transfers(name, graph, in_flight):
    overlapped = chips.load(name, {"engines.gdma.in_flight": in_flight})
    estimated, cycles = estimate_and_cycles(graph, overlapped)
    assert estimated == cycles
    assert cycles < estimate_and_cycles(graph, chip(name))[1]  # the latencies hidden are cycles saved


def test_exact_where_two_dma_engines_share_ddr():
    """generic's loads and stores overlap and share DDR as they go, in the estimate as in the machine."""
    estimated, cycles = estimate_and_cycles(matmul(100, 300, 200, "float32"), chip("generic"))
    assert estimated == cycles


STAGED = [  # transfers staged through on-chip memories, and several cores at once
    ("ascend310b", matmul(512, 512, 512, "float16")),
    ("ascend910b", matmul(1024, 1024, 1024, "float16")),
    ("ascend910b", matmul(8, 8192, 8192, "float16")),
    ("tpu_v1", matmul(256, 1024, 1024, "int8")),
]


@pytest.mark.parametrize("name,graph", STAGED, ids=[f"{n}-{i}" for i, (n, _) in enumerate(STAGED)])
def test_exact_where_transfers_stage_and_cores_share_ddr(name, graph):
    """The 910B's 24 cores each run their tiles, sharing DDR and the L2's cache of it, as in
    the machine."""
    estimated, cycles = estimate_and_cycles(graph, chip(name))
    assert estimated == cycles


@pytest.mark.parametrize("graph,limits", [
    (conv((1, 64, 56, 56), 64, 3, "float32"), ["h=8", "h=28", "c=32", "h=56"]),
    (matmul(256, 1024, 1024, "float32"), ["n=64", "c=256", "k=1024", "n=128,c=128"]),
])
def test_no_tile_limit_beats_the_choice(graph, limits):
    """The choice is the least estimate of every candidate; a policy.max_tile only takes
    candidates away, so on a chip where the estimate is exact none can be faster."""
    bm1684 = chips.load("bm1684")
    _, chosen = estimate_and_cycles(graph, bm1684)
    for limit in limits:
        _, cycles = estimate_and_cycles(graph, bm1684, policy_from_overrides({"max_tile": limit}))
        assert cycles >= chosen, limit


@pytest.mark.parametrize("name", ["bm1684", "ascend910b"])
def test_a_search_cache_hit_gives_the_plan_a_search_gives(name, monkeypatch):
    """Two identical convolutions in a row: the second's tiling comes from the first's search
    (isa/lower/schedule/searches.py), also where a cache of DDR makes hits depend on where the tensors
    lie (at other addresses, the same offsets in the cache's lines), and is the one its own
    search would choose."""
    from isa.lower.context import Lowering

    dtype = "float16" if name == "ascend910b" else "float32"
    g = isa.Graph("twice")
    with g:
        x = g.input("x", (1, 64, 28, 28), dtype)
        w = g.constant("w", np.ones((64, 64, 3, 3), dtype))
        y = O.conv(O.conv(x, w, pad_h_t=1, pad_h_b=1, pad_w_l=1, pad_w_r=1), w, pad_h_t=1, pad_h_b=1, pad_w_l=1, pad_w_r=1)
        g.output(y, "y")
    target = chips.load(name)
    policy = policy_from_overrides({"fuse": "false"})
    searched = []
    search = Lowering.search
    monkeypatch.setattr(Lowering, "search", lambda self, nodes, stores, extra, work: search(
        self, nodes, stores, extra, lambda: searched.append(nodes[0].name) or work()))
    notes = [n.split(": ", 1)[1] for n in isa.lower(g, target, policy).notes if n.startswith("tiling")]
    assert len(notes) == 2 and notes[0] == notes[1]
    assert len(searched) == 1
    alone = [n.split(": ", 1)[1] for n in isa.lower(conv((1, 64, 28, 28), 64, 3, dtype), target, policy).notes if n.startswith("tiling")]
    assert alone == notes[:1]


def test_steady_state_is_priced_as_a_whole_replay_would():
    """A product of 32 x 16 tiles of 8 K blocks: runs of like positions replayed only in part,
    the rest priced by their settled period, give the cycles of replaying every step."""
    from isa.lower.schedule import estimate

    graph, bm1684 = matmul(512, 1024, 1024, "float32"), chips.load("bm1684")
    policy = policy_from_overrides({"max_tile": "n=16,c=64,k=128"})
    compressed, cycles = estimate_and_cycles(graph, bm1684, policy)
    repeats = estimate.REPEATS
    estimate.REPEATS = 10**6
    try:
        whole, _ = estimate_and_cycles(graph, bm1684, policy)
    finally:
        estimate.REPEATS = repeats
    assert compressed == whole == cycles


def test_a_loop_whose_periods_jitter_with_the_other_units_is_priced_at_their_mean(monkeypatch):
    """A weight-only GEMV (1 x 2048 times 2048 x 11008 int8) on the 910B's 24 cores: each core's K
    blocks share HBM and the L2 with the other cores', and their periods never repeat exactly;
    once JITTERED times REPEATS positions have run, a loop is priced at their mean period (_jittered), not
    by replaying every position: within 0.5% of the whole replay, and of the machine's cycles (35,368
    against 35,453). The antiquant kernel's: the msd kernel, which the estimates would choose for a
    GEMV (isa/lower/templates/msd.py), is kept out."""
    from test_weight_only import a16_gemv

    from isa.lower.schedule import estimate
    from isa.lower.templates import msd

    monkeypatch.setattr(msd, "candidate", lambda plan: False)

    graph, _ = a16_gemv(np.random.default_rng(0).standard_normal((2048, 11008)).astype(np.float32), 8)
    ascend = chips.load("ascend910b")
    jittered, mean = [], estimate._jittered
    monkeypatch.setattr(estimate, "_jittered", lambda times, left: jittered.append(left) or mean(times, left))
    compressed, cycles = estimate_and_cycles(graph, ascend)
    assert jittered
    monkeypatch.setattr(estimate, "REPEATS", 10**6)
    whole, _ = estimate_and_cycles(graph, ascend)
    assert compressed == pytest.approx(whole, rel=0.005) and compressed == pytest.approx(cycles, rel=0.005)


def test_a_residual_add_in_either_operand_order_is_one_search(monkeypatch):
    """A convolution with its residual add, as add(conv, x) and as add(x, conv): the two groups'
    searches have one signature (the add commutes, isa/vector_fns.py), so a network's blocks that
    write it either way share a search, and both choose the same tiling."""
    from isa.lower import context

    def block(residual_first):
        g = isa.Graph("residual")
        with g:
            x = g.input("x", (1, 64, 28, 28), "float32")
            y = O.conv(x, g.constant("w", np.ones((64, 64, 3, 3), np.float32)), pad_h_t=1, pad_h_b=1, pad_w_l=1, pad_w_r=1)
            g.output(O.add(x, y) if residual_first else O.add(y, x), "y")
        return g

    signatures = []
    signature = context.signature
    monkeypatch.setattr(context, "signature", lambda *args: signatures.append(signature(*args)) or signatures[-1])
    bm1684 = chips.load("bm1684")
    notes = [[n for n in isa.lower(block(first), bm1684).notes if n.startswith("tiling")] for first in (False, True)]
    assert notes[0] == notes[1] and len(notes[0]) == 1
    half = len(signatures) // 2
    assert half and signatures[:half] == signatures[half:]


@pytest.mark.parametrize("periods,left,expected", [
    ([500, 500], 10, 5000),  # one period, settled
    ([500, 501], 10, 5010),  # within a rounding: the last
    ([300, 700, 300, 700, 300, 700], 5, 300 + 700 + 300 + 700 + 300),  # two slots: the pair repeats, the odd one is the first of it
    ([1463, 1463, 1720] * 3, 4, 1463 + 1463 + 1720 + 1463),  # three slots, not taken for two
    ([2179, 2663, 2226] * 3, 3, 2179 + 2663 + 2226),
    ([1463, 1720, 1463, 1463, 1720, 1463], 4, None),  # pairs alike in sum but not three runs of the same
    ([3822, 3850, 3822, 3849, 3822, 3849], 4, None),  # not yet the very same: more positions run
    ([770, 840, 3036, 1463, 1463, 1720], 6, None),
    ([100, 400], 3, None),
])
def test_a_loop_is_priced_once_its_positions_repeat_their_times(periods, left, expected):
    """A loop's positions left out cost what the last positions run took once they repeat: one
    position alike the one before, or (steps rotating among slots) runs of two to four positions
    the very same three times; otherwise the replay runs more of them."""
    from itertools import accumulate

    from isa.lower.schedule.estimate import _left_out

    assert _left_out(list(accumulate(periods, initial=1000)), left) == expected


def test_a_tail_loads_its_operands_after_the_tile_before_has_computed():
    """With double buffering the pipeline emits a step's fill (a fused tail's operand loads)
    after the step before has computed and before it stores: an Ascend vector core's queue then
    loads tile t's accumulator before tile t+1's residual, and the tails of tiles overlap."""
    from isa.lower.schedule.pipeline import pipeline

    order = []
    steps = [tuple((lambda what=what, i=i: order.append(f"{what}{i}")) for what in ("load", "compute", "store", "fill"))
             for i in range(3)]
    pipeline(steps, double_buffer=True)
    assert order == ["load0", "fill0", "load1", "compute0", "fill1", "store0", "load2", "compute1", "fill2", "store1",
                     "compute2", "store2"]
    order.clear()
    pipeline(steps, double_buffer=False)
    assert order == [f"{what}{i}" for i in range(3) for what in ("load", "fill", "compute", "store")]


def test_on_the_910b_a_convolutions_residual_tails_overlap(monkeypatch):
    """A 1x1 convolution with a residual add on one Ascend 910B core: the vector core's queue
    loads each tile's accumulator before the next tile's residual, so the tail's loads, adds and
    stores of consecutive tiles overlap and the estimate stays within 1.3x of its bound (1.6x
    when each tail waited for the one before to store)."""
    g = isa.Graph("residual")
    with g:
        x, residual = g.input("x", (1, 128, 28, 28), "float16"), g.input("r", (1, 512, 28, 28), "float16")
        y = O.conv(x, g.constant("w", np.ones((512, 128, 1, 1), np.float16)))
        g.output(O.add(y, residual), "y")
    import importlib

    chip = chips.load("ascend910b")
    conv_template = importlib.import_module("isa.lower.templates.conv")
    plans = []
    cheapest = conv_template._Matrix._cheapest

    def one_unit(self, shape, granules, limits, blocks, units, only=None):
        found = cheapest(self, shape, granules, limits, blocks, units)  # the one unit's least in full, not its block alone
        if units == 1:
            (tile, tic, keep), cycles = found
            est = self._schedule(tile, tic, 1, keep)
            assert est.cycles() == cycles
            plans.append((est.bound(), cycles))
        return found

    monkeypatch.setattr(conv_template._Matrix, "_cheapest", one_unit)
    isa.lower(g, chip)
    ((bound, cycles),) = plans
    assert cycles <= 1.3 * bound


@pytest.mark.parametrize("chip_name, dtype, shape, oc, k, stride", [
    ("bm1684", "int8", (4, 64, 28, 28), 64, 3, 1),
    ("bm1684", "float32", (1, 256, 14, 14), 512, 1, 2),
    ("bm1686", "float16", (1, 3, 56, 56), 64, 7, 2),
    ("tpu_v1", "int8", (1, 96, 14, 14), 128, 3, 1),
    ("ascend910b", "float16", (1, 64, 28, 28), 128, 3, 1),  # a cache of DDR no faster than one core's reads
])
def test_a_candidates_floor_is_at_most_its_estimate(chip_name, dtype, shape, oc, k, stride, monkeypatch):
    """The search makes and replays only the candidates whose closed-form floor (conv._floors,
    with the matrix unit's path where the bounds hold) is below the best estimate found: a floor
    above a candidate's estimate would lose it. Checked on the least floors (the ones the search
    weighs) and a spread of the rest."""
    import importlib

    conv_template = importlib.import_module("isa.lower.templates.conv")
    tiling = importlib.import_module("isa.lower.schedule.tiling")
    estimate = importlib.import_module("isa.lower.schedule.estimate")
    cheapest, checked = conv_template._Matrix._cheapest, []

    def checking(self, shape_, granules, limits, blocks, units, only=None):
        for keep in (False, True) if self.keepable else (False,):
            found = tiling.candidates(shape_, self.icg, granules, lambda t, tic: self._fits(t, tic, keep), limits, blocks, area=self.k)  # noqa: B023
            floors = self._floors(found, keep, units, path=True)
            order = np.argsort(floors, kind="stable")
            for i in list(order[:6]) + list(order[6::max(1, len(order) // 6)]):
                tile, tic = found[i]
                made = self._schedule(tile, tic, units, keep)
                cycles = made.cycles()
                assert floors[i] <= cycles + 1e-6, (tile, tic, keep, floors[i], cycles)
                if estimate.bounds_hold(self.ctx.chip, units):  # where the search trusts the bound as a floor too
                    assert made.bound() <= cycles + 1e-6, (tile, tic, keep, made.bound(), cycles)
                checked.append(floors[i] / cycles)
        return cheapest(self, shape_, granules, limits, blocks, units, only)

    monkeypatch.setattr(conv_template._Matrix, "_cheapest", checking)
    isa.lower(conv(shape, oc, k, dtype, stride), chips.load(chip_name))
    assert len(checked) >= 6 and max(checked) > 0.5  # the floors were weighed, and some are near their estimates


@pytest.mark.parametrize("chip_name, one_unit", [("bm1684", True), ("ascend910b", True), ("ascend310b", False)])
def test_the_bound_is_trusted_on_one_unit_unless_a_cache_outpaces_ddr(chip_name, one_unit):
    """ascend910b's MTE2 reads 110 B a cycle, below both HBM and its L2: a hit moves no faster than
    a miss, so one core's bound holds. ascend310b's movers read faster than its DDR, so an L2 hit
    beats the bound's DDR price. Several units share DDR otherwise than the bound's fixed share."""
    from isa.lower.schedule import estimate

    chip = chips.load(chip_name)
    assert estimate.bounds_hold(chip, 1) is one_unit
    assert not estimate.bounds_hold(chip, 2)
