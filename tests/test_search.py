"""The tiling search (isa/lower/schedule/tiling.least): candidates weighed by their floors,
made and replayed only while they can still win; whether a candidate fits asked only of those;
and a search whose only output is the winner's reduction block stopped once that is decided."""

import numpy as np
import pytest

import chips
import isa
from isa import costs
from isa.lower.schedule.tiling import least


class _Made:
    """A made candidate: its bound and its cycles, counting replays."""

    def __init__(self, bound, cycles, replays):
        self._bound, self._cycles, self.replays = bound, cycles, replays

    def bound(self):
        return self._bound

    def cycles(self):
        self.replays.append(self)
        return self._cycles


def _instance(seed, n=60):
    """Random candidates: cycles, a bound and a floor below them, a tie and a block each."""
    rng = np.random.default_rng(seed)
    cycles = rng.integers(1000, 1200, n).astype(float)
    bounds = cycles - rng.integers(0, 150, n)
    floors = bounds - rng.integers(0, 100, n)
    ties = (rng.integers(-3, 0, n),)
    blocks = rng.choice([16, 32, 64], n)
    return cycles, bounds, floors, ties, blocks


def sizes(n, t):
    """(extent, how many) of the tiles of t that cut n."""
    return [(t, n // t)] + ([(n % t, 1)] if n % t else [])


def _search(seed, hold, admits=None, blocks=False):
    cycles, bounds, floors, ties, block = _instance(seed)
    replays, asked = [], []

    def admitted(i):
        asked.append(i)
        return admits(i)

    found = least(floors, ties, lambda i: _Made(bounds[i], cycles[i], replays), list(range(len(cycles))), hold,
                  admitted if admits else None, block if blocks else None)
    return found, len(replays), asked, block


@pytest.mark.parametrize("hold", [True, False])
@pytest.mark.parametrize("seed", range(8))
def test_candidates_that_do_not_fit_are_passed_over_as_if_absent(hold, seed):
    """A candidate admits() refuses is as if it were not in the list; admits() is asked only of
    candidates whose floors can still win, fewer than all."""
    cycles, bounds, floors, ties, _ = _instance(seed)
    fits = [i % 3 != 0 for i in range(len(cycles))]
    kept = [i for i in range(len(cycles)) if fits[i]]
    found, _, asked, _ = _search(seed, hold, admits=fits.__getitem__)
    alone = least(floors[kept], tuple(t[kept] for t in ties), lambda j: _Made(bounds[kept[j]], cycles[kept[j]], []), kept, hold)
    assert alone is not None and found == alone
    assert len(set(asked)) < len(cycles)


@pytest.mark.parametrize("hold", [True, False])
def test_a_search_for_the_block_alone_ends_with_the_winners_block_in_fewer_replays(hold):
    """Stopped once every candidate that could still replace the best has the best's block, the
    search gives a choice of the full search's winner's block, never after more replays."""
    fewer = 0
    for seed in range(40):
        (winner, _), replays, _, block = _search(seed, hold)
        (choice, _), block_replays, _, _ = _search(seed, hold, blocks=True)
        assert block[choice] == block[winner]
        assert block_replays <= replays
        fewer += block_replays < replays
    assert fewer > 0


def test_matmul_floors_are_the_products_of_each_candidate(monkeypatch):
    """The matrix template's floors (over an array of candidates, in closed form) are, with
    several units, each candidate's products (costs.matmul_total over its tiles) shared among them."""
    import importlib

    matmul = importlib.import_module("isa.lower.templates.matmul")
    chip = chips.load("ascend910b")
    g = isa.Graph("g")
    g.output(isa.ops.matrix_mul(g.input("a", (200, 300), "float16"), g.input("b", (300, 100), "float16"), name="mm"), "c")
    seen = []
    floors = matmul._Plan._floors

    def checking(self, choices, units):
        out = floors(self, choices, units)
        if units > 1:
            unit = self.matrix_unit
            for (tm, tn, tk, *_), floor in zip(choices, out):
                total = costs.matmul_total(sizes(200, tm), sizes(300, tk), sizes(100, tn), unit, "float16", self.mx.issue_latency)
                assert floor == total / units
                seen.append(floor)
        return out

    monkeypatch.setattr(matmul._Plan, "_floors", checking)
    isa.lower(g, chip)
    assert seen


@pytest.mark.parametrize("chip_name, dtype, m, k, n", [
    ("bm1684", "float32", 300, 512, 200),
    ("ascend910b", "float16", 64, 2048, 1000),
    ("ascend910b", "float16", 3136, 64, 256),
    ("bm1686", "float16", 197, 768, 768),
])
def test_matmul_floors_are_at_most_their_estimates(chip_name, dtype, m, k, n, monkeypatch):
    """The search makes and replays only the candidates whose floor is below the best estimate
    found: a floor above a candidate's estimate would lose it. Checked on the least floors (the
    ones the search weighs) and a spread of the rest, on one unit and on several."""
    import importlib

    matmul = importlib.import_module("isa.lower.templates.matmul")
    floors, checked = matmul._Plan._floors, []

    def checking(self, choices, units):
        out = floors(self, choices, units)
        order = np.argsort(out, kind="stable")
        for i in list(order[:6]) + list(order[6::max(1, len(order) // 6)]):
            if self._fits(*choices[i][:5]):
                cycles = self._schedule(*choices[i], units).cycles()
                assert out[i] <= cycles + 1e-6, (choices[i], units, out[i], cycles)
                checked.append(out[i] / cycles)
        return out

    monkeypatch.setattr(matmul._Plan, "_floors", checking)
    g = isa.Graph("g")
    g.output(isa.ops.matrix_mul(g.input("a", (m, k), dtype), g.input("b", (k, n), dtype), name="mm"), "c")
    isa.lower(g, chips.load(chip_name))
    assert len(checked) >= 6 and max(checked) > 0.3  # the floors were weighed, and some come near their estimates
