"""Shared memory bandwidth: overlapping DMA transfers share each memory they move data through.

A fluid model with one SimPy event per change of contention. The active transfers share each
memory's bandwidth max-min fairly (progressive filling, `_shares`): all rates rise together
until a transfer reaches its engine's bandwidth or a memory it touches is saturated (a transfer
with both endpoints in one memory using it twice), and the rest go on rising, so bandwidth one
transfer cannot use goes to the others. Whenever a transfer starts or ends, the bytes left of
every other are brought up to date and the next completion is scheduled; completions fall on
whole cycles (rounded up), so a lone transfer takes exactly ceil(bytes / bandwidth).
"""

import math

# A transfer with less than this fraction of a cycle's worth of bytes left is done (float
# rounding of shared progress must not cost a whole extra cycle).
_EPS = 1e-9


class _Transfer:
    __slots__ = ("left", "cap", "use", "rate", "done", "src", "dst", "read", "written")

    def __init__(self, nbytes, cap, use, done, src, dst, cached, shares):
        self.left, self.cap, self.use, self.done = float(nbytes), cap, use, done
        self.src, self.dst, self.rate = src, dst, 0.0
        self.read = shares[0] - cached  # the share of its bytes read from src itself
        self.written = shares[1]


class Arbiter:
    def __init__(self, env, bandwidths, watch="ddr"):
        self.env = env
        self.bandwidths = bandwidths  # memory -> bytes per cycle
        self.active = []
        self.since = 0.0
        self.timer = None  # the one completion timer that counts; earlier ones are stale
        self.watch = watch
        # (cycle, bytes per cycle) steps of the watched memory's read and write traffic
        self.read, self.write = [(0.0, 0.0)], [(0.0, 0.0)]

    def transfer(self, nbytes, cap, use, src, dst, cached=0.0, shares=(1.0, 1.0)):
        """An event that fires when nbytes have moved; use maps memory -> endpoints in it (a
        share of one for a source partly read from a cache, isa/timing/cache.py, or the narrower side
        of a converting DMA); shares: the (read, written) shares of nbytes on each side; cached:
        the share of them the cache serves, which the watched memory's read traffic leaves out."""
        done = self.env.event()
        if nbytes <= 0:
            done.succeed()
            return done
        self._advance()
        self.active.append(_Transfer(nbytes, cap, use, done, src, dst, cached, shares))
        self._reschedule()
        return done

    def _advance(self):
        elapsed = self.env.now - self.since
        if elapsed:
            for t in self.active:
                t.left -= t.rate * elapsed
        self.since = self.env.now

    def _reschedule(self):
        """Finish the transfers that are done, share bandwidth among the rest, record the
        watched memory's traffic and schedule the next completion: one pass over the active."""
        still = []
        for t in self.active:
            if t.left <= t.rate * _EPS:
                t.done.succeed()
            else:
                still.append(t)
        self.active = still
        _shares(still, self.bandwidths)
        watch = self.watch
        read = write = 0
        delay = None
        for t in still:
            rate = t.rate
            if t.src == watch:
                read += rate * t.read
            if t.dst == watch:
                write += rate * t.written
            wait = math.ceil(t.left / rate - _EPS)  # not a whole extra cycle for float rounding
            if delay is None or wait < delay:
                delay = wait
        now = self.env.now
        for series, rate in ((self.read, read), (self.write, write)):
            if series[-1][1] != rate:
                if series[-1][0] == now:
                    series[-1] = (now, rate)
                else:
                    series.append((now, rate))
        self.timer = None
        if still:
            self.timer = self.env.timeout(max(delay, 1))
            self.timer.callbacks.append(self._tick)

    def _tick(self, timer):
        if timer is self.timer:  # otherwise a later change already rescheduled
            self._advance()
            self._reschedule()


def _shares(transfers, bandwidths):
    """Set each transfer's rate: max-min fair shares of the memories' bandwidths, each at most
    its cap. Equal shares (a memory's bandwidth over its endpoints) are that already unless a
    memory has bandwidth left that a transfer it limits could take; then progressive filling."""
    endpoints = {}
    for t in transfers:
        for mem, n in t.use.items():
            endpoints[mem] = endpoints.get(mem, 0) + n
    for t in transfers:
        rate = t.cap
        for mem in t.use:
            share = bandwidths[mem] / endpoints[mem]
            if share < rate:
                rate = share
        t.rate = rate
    if len(transfers) > 1 and _slack(transfers, bandwidths, endpoints):
        _fill(transfers, bandwidths)


def _slack(transfers, bandwidths, endpoints):
    """Whether some transfer held to a memory's equal share could have more of it."""
    used = {}
    for t in transfers:
        for mem, n in t.use.items():
            used[mem] = used.get(mem, 0.0) + t.rate * n
    return any(used[m] < bandwidths[m] * (1 - _EPS) and t.rate >= bandwidths[m] / endpoints[m] * (1 - _EPS)
               for t in transfers for m in t.use)


def _fill(transfers, bandwidths):
    """Progressive filling: every rate rises together until a transfer reaches its cap or a
    memory it touches is saturated; those stop, the others go on."""
    left = {}  # memory -> bandwidth not yet given out
    for t in transfers:
        t.rate = 0.0
        for mem in t.use:
            left[mem] = bandwidths[mem]
    rising = list(transfers)
    while rising:
        load = {}  # memory -> endpoints of the rising transfers in it
        for t in rising:
            for mem, n in t.use.items():
                load[mem] = load.get(mem, 0) + n
        step = min(min(t.cap - t.rate for t in rising), min(left[m] / n for m, n in load.items()))
        for t in rising:
            t.rate += step
        for mem, n in load.items():
            left[mem] -= step * n
        full = {m for m in load if left[m] <= bandwidths[m] * _EPS}
        rising = [t for t in rising if t.cap - t.rate > t.cap * _EPS and not full.intersection(t.use)]
