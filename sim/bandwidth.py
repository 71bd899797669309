"""Shared memory bandwidth: overlapping DMA transfers share each memory they move data through.

A fluid model with one SimPy event per change of contention. Each active transfer moves at
min(its engine's bandwidth, and for every memory it touches, that memory's bandwidth divided by
the endpoints of all active transfers in it). Whenever a transfer starts or ends, the bytes
left of every other are brought up to date and the next completion is scheduled; completions
fall on whole cycles (rounded up), so a lone transfer takes exactly ceil(bytes / bandwidth).
"""

import math

# A transfer with less than this fraction of a cycle's worth of bytes left is done (float
# rounding of shared progress must not cost a whole extra cycle).
_EPS = 1e-9


class _Transfer:
    __slots__ = ("left", "cap", "use", "rate", "done", "src", "dst")

    def __init__(self, nbytes, cap, use, done, src, dst):
        self.left, self.cap, self.use, self.done = float(nbytes), cap, use, done
        self.src, self.dst, self.rate = src, dst, 0.0


class Arbiter:
    def __init__(self, env, bandwidths, watch="ddr"):
        self.env = env
        self.bandwidths = bandwidths  # memory -> bytes per cycle
        self.active = []
        self.since = 0.0
        self.version = 0
        self.watch = watch
        # (cycle, bytes per cycle) steps of the watched memory's read and write traffic
        self.read, self.write = [(0.0, 0.0)], [(0.0, 0.0)]

    def transfer(self, nbytes, cap, use, src, dst):
        """An event that fires when nbytes have moved; use maps memory -> endpoints in it."""
        done = self.env.event()
        if nbytes <= 0:
            done.succeed()
            return done
        self._advance()
        self.active.append(_Transfer(nbytes, cap, use, done, src, dst))
        self._reschedule()
        return done

    def _advance(self):
        elapsed = self.env.now - self.since
        if elapsed:
            for t in self.active:
                t.left -= t.rate * elapsed
        self.since = self.env.now

    def _reschedule(self):
        still = []
        for t in self.active:
            if t.left <= t.rate * _EPS:
                t.done.succeed()
            else:
                still.append(t)
        self.active = still
        endpoints = {}
        for t in still:
            for mem, n in t.use.items():
                endpoints[mem] = endpoints.get(mem, 0) + n
        for t in still:
            t.rate = min([t.cap] + [self.bandwidths[m] / endpoints[m] for m in t.use])
        self._record()
        self.version += 1
        if still:
            delay = min(math.ceil(t.left / t.rate) for t in still)
            timer = self.env.timeout(max(delay, 1))
            timer.callbacks.append(lambda _, v=self.version: self._tick(v))

    def _tick(self, version):
        if version == self.version:  # otherwise a later change already rescheduled
            self._advance()
            self._reschedule()

    def _record(self):
        now = self.env.now
        for series, side in ((self.read, "src"), (self.write, "dst")):
            rate = sum(t.rate for t in self.active if getattr(t, side) == self.watch)
            if series[-1][1] != rate:
                if series[-1][0] == now:
                    series[-1] = (now, rate)
                else:
                    series.append((now, rate))
