"""The shared-bandwidth arbiter (isa/timing/bandwidth.py): its completion cycles against a plain
max-min progressive filling over every transfer, and its work per start or end against the
number of transfers it cannot tell apart."""

import math

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from isa.timing import bandwidth
from isa.timing.bandwidth import Arbiter

EPS = 1e-9


def fair_rates(bandwidths, active):
    """Max-min fair rates by progressive filling, transfer by transfer: all unfrozen rates rise
    by one step, the largest that keeps every cap and memory; a transfer at its cap or touching
    a full memory freezes. active: {i: (cap, use)}."""
    rate = dict.fromkeys(active, 0.0)
    rising = set(active)
    while rising:
        room = {m: bw - sum(rate[i] * use.get(m, 0) for i, (_, use) in active.items()) for m, bw in bandwidths.items()}
        weight = {m: sum(active[i][1].get(m, 0) for i in rising) for m in bandwidths}
        step = min([active[i][0] - rate[i] for i in rising] + [room[m] / weight[m] for m in bandwidths if weight[m]])
        for i in rising:
            rate[i] += step
        room = {m: bw - sum(rate[i] * use.get(m, 0) for i, (_, use) in active.items()) for m, bw in bandwidths.items()}
        full = {m for m in bandwidths if room[m] <= bandwidths[m] * EPS}
        rising = {i for i in rising if active[i][0] - rate[i] > active[i][0] * EPS and not full.intersection(active[i][1])}
    return rate


def reference_ends(bandwidths, transfers):
    """The cycle each transfer (start, nbytes, cap, use) ends: at every start and end the rates
    are shared anew, and the next end is rounded up to a whole cycle (at least one) from then;
    a transfer with less than EPS of a cycle's bytes left is done."""
    ends = [None] * len(transfers)
    pending = sorted(range(len(transfers)), key=lambda i: transfers[i][0])
    left, rate = {}, {}
    now, wake = 0.0, None
    while pending or left:
        then = min(transfers[pending[0]][0] if pending else math.inf, math.inf if wake is None else wake)
        for i in left:
            left[i] -= rate[i] * (then - now)
        now = then
        for i in [i for i in left if left[i] <= rate[i] * EPS]:
            ends[i] = now
            del left[i]
        while pending and transfers[pending[0]][0] == now:
            left[pending[0]] = float(transfers[pending[0]][1])
            pending.pop(0)
        rate = fair_rates(bandwidths, {i: transfers[i][2:] for i in left})
        wake = now + max(1, min(math.ceil(left[i] / rate[i] - EPS) for i in left)) if left else None
    return ends


def arbiter_ends(bandwidths, transfers, arbiter=Arbiter):
    env = simpy.Environment()
    arb = arbiter(env, bandwidths)
    ends = [None] * len(transfers)

    def run(i, start, nbytes, cap, use):
        yield env.timeout(start)
        yield arb.transfer(nbytes, cap, use, "ddr", "l1")
        ends[i] = env.now

    for i, t in enumerate(transfers):
        env.process(run(i, *t))
    env.run()
    return ends


@st.composite
def workloads(draw):
    """1-3 shared memories, and 0-3 cores with a copy of 1-2 per-core memories each (any
    bandwidths: copies need not match), and 1-12 transfers: each uses some shared memories and
    the memories of at most one core, with 1/3 to 2 endpoints in each."""
    rates = st.sampled_from([16.0, 32.0, 51.2, 64.0, 100.0, 110.0, 256.0, 888.8888888888889, 1e9])
    bandwidths = {f"m{k}": draw(rates.filter(lambda r: r < 1e9)) for k in range(draw(st.integers(1, 3)))}
    cores = draw(st.integers(0, 3))
    per_core = ["l1", "l0"][: draw(st.integers(1, 2))]
    for c in range(cores):
        for name in per_core:
            bandwidths[f"c{c}.{name}"] = draw(st.sampled_from([64.0, 256.0, 512.0]))
    ends = st.sampled_from([1 / 3, 0.5, 1, 2])
    transfers = []
    for _ in range(draw(st.integers(1, 12))):
        mine = [m for m in bandwidths if "." not in m]
        if cores:
            c = draw(st.integers(-1, cores - 1))
            mine += [f"c{c}.{name}" for name in per_core] if c >= 0 else []
        use = {m: draw(ends) for m in draw(st.lists(st.sampled_from(mine), min_size=1, max_size=len(mine), unique=True))}
        start = draw(st.integers(0, 60)) + draw(st.sampled_from([0, 0, 0.5]))
        transfers.append((start, draw(st.integers(1, 6000)), draw(rates), use))
    return bandwidths, transfers


@settings(max_examples=300, deadline=None)
@given(workloads())
def test_the_arbiter_ends_transfers_where_plain_progressive_filling_does(workload):
    bandwidths, transfers = workload
    assert arbiter_ends(bandwidths, transfers) == reference_ends(bandwidths, transfers)


def test_the_reference_gives_capped_bandwidth_to_the_others():
    """The reference itself: a 16 B/cycle transfer beside a fast one on 64 B/cycle leaves it 48."""
    assert fair_rates({"ddr": 64.0}, {0: (16.0, {"ddr": 1}), 1: (1e9, {"ddr": 1})}) == {0: 16.0, 1: 48.0}
    assert reference_ends({"ddr": 64.0}, [(0, 1600, 16.0, {"ddr": 1}), (0, 4800, 1e9, {"ddr": 1})]) == [100, 100]


class Counting(Arbiter):
    """An Arbiter that records, per start or end, how many groups it holds and fills, and how
    many active transfers it moves from one group to another."""

    def __init__(self, env, bandwidths, watch="ddr"):
        super().__init__(env, bandwidths, watch)
        self.events = []  # (groups, groups filled, moves) per reschedule
        self.moves = 0

    def _unplace(self, t):
        self.moves += t.active  # an ended transfer leaves its group for good
        super()._unplace(t)

    def _reschedule(self):
        filled = len([g for g in self.groups.values() if g.local or not self.contended.isdisjoint(g.names)]) if self.stale else 0
        super()._reschedule()
        self.events.append((len(self.groups), filled, self.moves))
        self.moves = 0


def work(bandwidths, transfers):
    """The most groups held, groups filled and transfers moved at one start or end, and the
    number of starts and ends."""
    env = simpy.Environment()
    arb = Counting(env, bandwidths)

    def run(start, nbytes, cap, use):
        yield env.timeout(start)
        yield arb.transfer(nbytes, cap, use, "ddr", "l1")

    for t in transfers:
        env.process(run(*t))
    env.run()
    return tuple(max(e[k] for e in arb.events) for k in range(3)) + (len(arb.events),)


@pytest.mark.parametrize("n", [2, 8, 64])
def test_identical_transfers_are_one_group(n):
    """n transfers of one cap and use over a shared DDR, one starting each cycle: the arbiter
    holds one group, fills it alone and moves no transfer from group to group."""
    transfers = [(k, 5000 + 37 * k, 100.0, {"ddr": 1, "lmem": 1}) for k in range(n)]
    bandwidths = {"ddr": 64.0, "lmem": 1024.0}
    groups, filled, moves, events = work(bandwidths, transfers)
    assert (groups, filled, moves) == (1, 1, 0)
    assert events >= n
    assert arbiter_ends(bandwidths, transfers, Counting) == reference_ends(bandwidths, transfers)


@pytest.mark.parametrize("n", [4, 16, 64])
def test_cores_that_contend_alike_share_groups(n):
    """n cores, each with a load from a shared L2 into its L1 and a move from its L1 to its L0A
    that together exceed the L1's bandwidth (as the 910B's MTE2 and MTE1), on an L2 all of them
    contend for: the groups held and filled and the transfers moved at a start or end do not
    grow with n."""
    bandwidths = {"l2": 50.0 * n}
    transfers = []
    for c in range(n):
        bandwidths.update({f"c{c}.l1": 512.0, f"c{c}.l0a": 512.0})
        transfers.append((c, 40000, 110.0, {"l2": 1, f"c{c}.l1": 1}))
        transfers.append((c + 0.5, 60000, 512.0, {f"c{c}.l1": 1, f"c{c}.l0a": 1}))
    groups, filled, moves, events = work(bandwidths, transfers)
    assert (groups, filled, moves) == (3, 3, 2)  # a load alone; a load and a move sharing an L1
    assert events > 3 * n
    assert arbiter_ends(bandwidths, transfers, Counting) == reference_ends(bandwidths, transfers)


def test_the_watched_memorys_traffic_steps_with_the_rates():
    """Two loads share DDR (64 B/cycle), 32 B/cycle each, then the longer runs alone at 64: the
    read traffic stays 64 (no step for float rounding of equal shares) until both are done."""
    env = simpy.Environment()
    arb = Arbiter(env, {"ddr": 64.0, "lmem": 1e9})
    arb.transfer(320, 1e9, {"ddr": 1, "lmem": 1}, "ddr", "lmem")
    arb.transfer(640, 1e9, {"ddr": 1, "lmem": 1}, "ddr", "lmem", cached=0.25)
    env.run()
    assert arb.read == [(0, 32 + 32 * 0.75), (10, 64 * 0.75), (15, 0.0)]  # the cache's share is not DDR traffic
    assert arb.write == [(0.0, 0.0)]


def test_a_group_counts_its_ends_from_its_progress_again_past_a_mebibyte():
    """A group whose members keep moving past _REBASE bytes re-bases its ends and still ends
    each transfer where a lone transfer at its cap would."""
    transfers = [(k * 1000, 3_000_000 + k, 1000.0, {"ddr": 1}) for k in range(3)]
    bandwidths = {"ddr": 1e6}
    assert 1000 * 1000 < bandwidth._REBASE < 2000 * 1000  # the third joins a group past it
    assert arbiter_ends(bandwidths, transfers) == [3000, 4001, 5001] == reference_ends(bandwidths, transfers)
