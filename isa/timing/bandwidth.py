"""Shared memory bandwidth: overlapping DMA transfers share each memory they move data through.

A fluid model with one SimPy event per change of contention. The active transfers share each
memory's bandwidth max-min fairly (progressive filling, `_fill`): all rates rise together until
a transfer reaches its engine's bandwidth or a memory it touches is saturated (a transfer with
both endpoints in one memory using it twice), and the rest go on rising, so bandwidth one
transfer cannot use goes to the others. Completions fall on whole cycles (rounded up), so a lone
transfer takes exactly ceil(bytes / bandwidth).

The work per start or end does not grow with the number of transfers that share a rate. Only a
contended memory can hold a transfer below its cap, once the cap is lowered to what each memory
could give the transfer alone: a memory is contended when two or more transfers use it and
their caps could together exceed its bandwidth. Max-min shares are unique, so transfers that
the model cannot tell apart run at one rate and form one `_Group`:
- transfers with one cap and one use of the shared memories, and no contended memory of a
  core (a per-core copy such as "c3.l1", chips.schema.base_name), whichever core they are on;
- and, across cores, transfers whose cores' contended memories are used alike: a `cluster`
  (the transfers joined through contended per-core memories) that differs from another only
  in its core is a copy of it, and a member of one has the rate of its counterpart in the other.
Progressive filling runs over groups (one copy of each cluster's memories standing for all),
only after a change to a group that uses a contended memory or a change of contention, and
once per set of groups, counts and contended memories (pipelined tiles meet the same ones again
and again: the rates it gave are kept). Each group keeps its members' ends in a heap, as bytes
of the group's progress (what each member has moved since the group began), so time advances
group by group.

A transfer that starts while no other moves runs alone (`_Solo`) without any of this: one timer
at its uncontended end. Should another start before that end, the lone one is grouped first as
it would have been at its start, and the model goes on from there as above.
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING

from chips.schema import base_name

if TYPE_CHECKING:
    from simpy import Environment
    from simpy.events import Event, Timeout

Use = tuple[tuple[str, float], ...]  # sorted (memory, endpoints) pairs
Form = tuple[float, Use, Use, Use]  # a transfer's cap, its use, and its use of shared memories and of a core's (_form)
Key = tuple[tuple[float, Use, tuple], tuple | None]  # a _Group's: (cap, shared use, contended per-core use), cluster signature
Entry = tuple[float, int, "_Transfer"]  # a transfer's end in its group's heap: (progress, seq, transfer)
Series = list[tuple[float, float]]  # (cycle, bytes per cycle) steps of a memory's traffic

# A transfer with less than this fraction of a cycle's worth of bytes left is done (float
# rounding of shared progress must not cost a whole extra cycle); also the relative margin by
# which a rate reaches its cap, a memory is full or a traffic rate is unchanged.
_EPS = 1e-9
# A group's progress past this many bytes is subtracted from its members' ends, so their bytes
# left keep the precision of their own size.
_REBASE = float(1 << 20)


class _Transfer:
    __slots__ = ("active", "cap", "done", "dst", "entry", "group", "nbytes", "own", "read", "seq", "shared", "src", "use", "written")

    def __init__(self, seq: int, nbytes: float, form: Form, src: str, dst: str, cached: float, shares: tuple[float, float]) -> None:
        self.seq, self.nbytes, self.src, self.dst = seq, nbytes, src, dst
        self.done: Event | None = None  # fires when it has moved its bytes; a lone one's waiters may wait on its timer instead (_Solo)
        self.cap, self.use, self.shared, self.own = form
        self.read = shares[0] - cached  # the share of its bytes read from src itself
        self.written = shares[1]
        self.active = True
        self.group: _Group | None = None
        self.entry: Entry | None = None  # its (end, seq, transfer) in its group's heap; other entries of it are stale


class _Group:
    """Active transfers the model cannot tell apart: one rate. key: ((cap, shared memories'
    use, contended per-core memories' use), its cluster's signature or None)."""

    __slots__ = ("cap", "copy", "count", "heap", "ident", "key", "local", "names", "progress", "rate", "read",
                 "reads", "shared", "writes", "written")

    def __init__(self, key: Key, ident: int, bandwidths: dict[str, float]) -> None:
        self.key, self.ident = key, ident
        desc, signature = key
        self.cap, self.shared, local = desc  # shared: ((memory, endpoints), ...)
        self.names = frozenset(m for m, _ in self.shared)
        self.copy = signature.count(desc) if signature else 1  # members in each copy of the cluster
        # (one copy's memory: (signature, its name in the cluster), endpoints, bandwidth)
        self.local = tuple(((signature, name), n, name[1] if isinstance(name, tuple) else bandwidths[name]) for name, n in local)
        self.count = 0
        self.restart()

    def restart(self) -> None:
        """The group forms (again: pipelined tiles form the same groups over and over, and
        Arbiter.known keeps them), with no members yet."""
        self.rate = self.cap  # an uncontended group runs at its cap; others are filled
        self.progress = 0.0
        self.heap: list[Entry] = []
        self.reads: dict[float, int] = {}
        self.writes: dict[float, int] = {}  # share -> members reading (writing) that share of their bytes in the watched memory
        self.read = self.written = 0.0  # the sums of those shares


class Arbiter:
    def __init__(self, env: Environment, bandwidths: dict[str, float], watch: str = "ddr") -> None:
        self.env = env
        self.bandwidths = bandwidths  # memory -> bytes per cycle
        self.watch = watch
        # a core's copy of a memory -> its role in a cluster: (YAML name, bandwidth)
        self.local = {m: (base_name(m), bw) for m, bw in bandwidths.items() if base_name(m) != m}
        self.forms: dict[tuple, Form] = {}  # (cap, use items) as given -> a transfer's Form (see _form)
        self.groups: dict[Key, _Group] = {}
        self.known: dict[Key, _Group] = {}  # every group formed so far (its ident: its place here), active or not
        # (each filled group's ident and count, the contended memories) -> the rates _fill gives them
        self.rates: dict[tuple, list[float]] = {}
        self.users: dict[str, set[_Transfer]] = {m: set() for m in bandwidths}  # memory -> the active transfers using it
        self.demand = dict.fromkeys(bandwidths, 0.0)  # memory -> sum of its users' caps x endpoints
        self.contended: set[str] = set()
        self.moved: set[_Transfer] = set()  # transfers whose group may have changed since they were last grouped
        self.stale = False  # whether a group using a contended memory changed since the last filling
        self.seq = 0
        self.since = 0.0
        self.due: float | None = None  # when the next transfer ends, as last scheduled
        self.timer: Timeout | None = None  # the one completion timer that counts; earlier ones are stale
        # (cycle, bytes per cycle) steps of the watched memory's read and write traffic
        self.read: Series = [(0.0, 0.0)]
        self.write: Series = [(0.0, 0.0)]
        self.solo: _Solo | None = None  # the _Solo moving alone, if one is

    def transfer(self, nbytes: float, cap: float, use: dict[str, float], src: str, dst: str, cached: float = 0.0,
                 shares: tuple[float, float] = (1.0, 1.0)) -> Event:
        """An event that fires when nbytes have moved; use maps memory -> endpoints in it (a
        share of one for a source partly read from a cache, isa/timing/cache.py, or the narrower side
        of a converting DMA); shares: the (read, written) shares of nbytes on each side; cached:
        the share of them the cache serves, which the watched memory's read traffic leaves out.
        Wait on the event before the next transfer starts (as a process does that yields it):
        a transfer moving alone hands out its timer, whose waiters a later one moves."""
        if nbytes <= 0:
            return self.env.event().succeed()
        given = cap, tuple(use.items())
        form = self.forms.get(given)
        if form is None:
            form = self.forms[given] = _form(cap, use, self.bandwidths, self.local)
        t = _Transfer(self.seq, float(nbytes), form, src, dst, cached, shares)
        self.seq += 1
        if self.solo is not None:
            self._join()
        elif not self.groups:
            self.solo = _Solo(self, t)
            return self.solo.waiter
        t.done = done = self.env.event()
        self._advance()
        if self.due is not None and self.env.now >= self.due - 1:  # earlier, nothing can end (see _reschedule)
            self._finish()
        self._enter(t)
        self._reschedule()
        return done

    def _enter(self, t: _Transfer) -> None:
        """Count t among its memories' users and put it in its group."""
        self._count(t, True)
        if self.moved:
            self.moved.add(t)
            self._regroup()
        else:  # nothing else changes group, and t uses no contended memory of a core
            self._place(t, ((t.cap, t.shared, ()), None), t.nbytes)

    def _join(self) -> None:
        """Another transfer starts while the solo one moves: group the solo one as it would have
        been grouped at its start, with the completion it scheduled then."""
        solo, self.solo = self.solo, None
        assert solo is not None
        if solo.waiter is solo.timer:  # its waiters now wait for its own event, as one of the many
            solo.forward()
        self._enter(solo.transfer)
        self.since, self.due, self.timer = solo.start, solo.due, solo.timer

    def _advance(self) -> None:
        elapsed = self.env.now - self.since
        if elapsed:
            for g in self.groups.values():
                g.progress += g.rate * elapsed
        self.since = self.env.now

    def _finish(self) -> None:
        """Complete the transfers with (next to) nothing left, in the order they started."""
        ended = []
        for g in self.groups.values():
            heap, progress, least = g.heap, g.progress, g.rate * _EPS
            while heap:
                entry = heap[0]
                if entry[2].entry is entry and entry[0] - progress > least:
                    break
                heapq.heappop(heap)
                if entry[2].entry is entry:
                    ended.append(entry[2])
        if not ended:
            return
        ended.sort(key=lambda t: t.seq)
        for t in ended:
            t.active = False
            self._unplace(t)
            self._count(t, False)
            assert t.done is not None  # a grouped transfer's (_Solo.forward gives a lone one's)
            t.done.succeed()
        if self.moved:
            self._regroup()

    def _count(self, t: _Transfer, joins: bool) -> None:
        """t starts (joins) or ends: count it among its memories' users, and update whether each
        is contended (which changes rates). When one is a core's memory, contended now or before,
        the clusters through it change: its users (and with them, in _regroup, the rest of their
        clusters) may change group."""
        users, demand, bandwidths, contended, cap = self.users, self.demand, self.bandwidths, self.contended, t.cap
        for m, n in t.use:
            mine = users[m]
            if joins:
                mine.add(t)
                demand[m] += cap * n
            else:
                mine.discard(t)
                demand[m] = demand[m] - cap * n if mine else 0.0
            now = len(mine) > 1 and demand[m] > bandwidths[m] * (1 - _EPS)
            if now != (m in contended):
                if now:
                    contended.add(m)
                else:
                    contended.discard(m)
                self.stale = True
            elif not now:
                continue
            if m in self.local:
                self.moved.update(mine)

    def _regroup(self) -> None:
        """Move each transfer in `moved` (and the rest of its cluster) to its group, after
        transfers started or ended."""
        moved, self.moved = self.moved, set()
        done = set()
        for t in sorted(moved, key=lambda t: t.seq) if len(moved) > 1 else moved:
            if t in done or not t.active:
                continue
            cluster = self._cluster(t)
            for u, key in self._keys(cluster):
                done.add(u)
                g = u.group
                if g is None:
                    self._place(u, key, u.nbytes)
                elif key != g.key:
                    assert u.entry is not None  # a grouped transfer's
                    left = u.entry[0] - g.progress
                    self._unplace(u)
                    self._place(u, key, left)

    def _cluster(self, t: _Transfer) -> list[_Transfer]:
        """t and the transfers joined to it through contended per-core memories, in the order
        they started."""
        contended, users = self.contended, self.users
        if not any(m in contended for m, _ in t.own):
            return [t]
        cluster, todo = {t}, [t]
        while todo:
            for m, _ in todo.pop().own:
                if m in contended:
                    for u in users[m]:
                        if u not in cluster:
                            cluster.add(u)
                            todo.append(u)
        return sorted(cluster, key=lambda u: u.seq)

    def _keys(self, cluster: list[_Transfer]) -> list[tuple[_Transfer, Key]]:
        """(transfer, its group's key) for each of a cluster's transfers. A cluster names its
        per-core memories by role (YAML name and bandwidth) when no two share one, so that
        clusters on different cores that use their memories alike have one signature."""
        contended, local = self.contended, self.local
        if len(cluster) == 1:
            (t,) = cluster
            return [(t, ((t.cap, t.shared, ()), None))]
        roles: dict[tuple[str, float], set[str]] = {}
        for t in cluster:
            for m, _ in t.own:
                if m in contended:
                    roles.setdefault(local[m], set()).add(m)
        alike = all(len(ms) == 1 for ms in roles.values())
        descs = []
        for t in cluster:
            mine = tuple(sorted((local[m] if alike else m, n) for m, n in t.own if m in contended))
            descs.append((t.cap, t.shared, mine))
        signature = tuple(sorted(descs))
        return [(t, (desc, signature)) for t, desc in zip(cluster, descs)]

    def _place(self, t: _Transfer, key: Key, left: float) -> None:
        g = self.groups.get(key)
        if g is None:
            g = self.known.get(key)
            if g is None:
                g = self.known[key] = _Group(key, len(self.known), self.bandwidths)
            else:
                g.restart()
            self.groups[key] = g
        elif g.progress > _REBASE:
            _rebase(g)
        t.group, t.entry = g, (left + g.progress, t.seq, t)
        heapq.heappush(g.heap, t.entry)
        g.count += 1
        if t.src == self.watch and t.read:
            g.read = _tally(g.reads, t.read, 1)
        if t.dst == self.watch and t.written:
            g.written = _tally(g.writes, t.written, 1)
        if g.local or not self.contended.isdisjoint(g.names):
            self.stale = True

    def _unplace(self, t: _Transfer) -> None:
        g = t.group
        assert g is not None  # a grouped transfer's
        t.group = t.entry = None
        g.count -= 1
        if not g.count:
            del self.groups[g.key]
        else:
            if t.src == self.watch and t.read:
                g.read = _tally(g.reads, t.read, -1)
            if t.dst == self.watch and t.written:
                g.written = _tally(g.writes, t.written, -1)
        if g.local or not self.contended.isdisjoint(g.names):
            self.stale = True

    def _reschedule(self) -> None:
        """Share bandwidth among the groups if a contended one changed, record the watched
        memory's traffic and schedule the next completion: one pass over the groups. The next
        completion is `due`: no transfer ends a whole cycle or more before it, as long as no
        rate changes (each change reschedules)."""
        groups = self.groups
        if self.stale:
            self._share()
        read = write = 0.0
        soonest = math.inf  # cycles to the first end; ceil(x - _EPS) rises with x, so it is taken once, of the least
        for g in groups.values():
            rate, heap = g.rate, g.heap
            read += rate * g.read
            write += rate * g.written
            while heap[0][2].entry is not heap[0]:
                heapq.heappop(heap)
            if (end := (heap[0][0] - g.progress) / rate) < soonest:
                soonest = end
        now = self.env.now
        _step(self.read, read, now)
        _step(self.write, write, now)
        self.timer = self.due = None
        if groups:
            after = max(math.ceil(soonest - _EPS), 1)  # not a whole extra cycle for float rounding
            self.due = now + after
            self.timer = self.env.timeout(after)
            self.timer.callbacks.append(self._tick)

    def _share(self) -> None:
        """Give each group its rate: its cap, or for a group using a contended memory, what
        progressive filling gives it. Pipelined tiles meet the same groups, counts and contention
        again and again, so the filled rates are kept by those (filling is a function of them)."""
        filled, contended = [], self.contended
        for g in self.groups.values():
            if g.local or not contended.isdisjoint(g.names):
                filled.append(g)
            else:
                g.rate = g.cap
        key = (tuple([(g.ident, g.count) for g in filled]), frozenset(contended))
        rates = self.rates.get(key)
        if rates is None:
            _fill(filled, self.bandwidths, contended)
            self.rates[key] = [g.rate for g in filled]
        else:
            for g, rate in zip(filled, rates):
                g.rate = rate
        self.stale = False

    def _tick(self, timer: Event) -> None:
        solo = self.solo
        if solo is not None and timer is solo.timer:
            solo.tick()
        elif timer is self.timer:  # otherwise a later change already rescheduled
            self._advance()
            self._finish()
            self._reschedule()


class _Solo:
    """A transfer moving alone, at its cap, and what the arbiter would have recorded for it: its
    traffic from its start and the timer of its end. The caller waits on that timer itself
    (`waiter`) when the transfer will have moved its bytes by then, as it does unless float
    rounding leaves a sliver: one SimPy event per transfer. The timer's first callback
    (Arbiter._tick) ends the transfer before the waiters see it; if another transfer joins it
    first, the waiters move to the transfer's own event (`forward`)."""

    __slots__ = ("arbiter", "callbacks", "due", "start", "timer", "transfer", "waiter")

    def __init__(self, arbiter: Arbiter, t: _Transfer) -> None:
        self.arbiter, self.transfer = arbiter, t
        self.start = now = arbiter.env.now
        watch = arbiter.watch
        _step(arbiter.read, t.cap * t.read if t.src == watch and t.read else 0.0, now)
        _step(arbiter.write, t.cap * t.written if t.dst == watch and t.written else 0.0, now)
        delay = self._schedule(t.nbytes)
        if self._left(now + delay) <= t.cap * _EPS:
            self.waiter: Event = self.timer
        else:
            self.waiter = t.done = arbiter.env.event()

    def _left(self, now: float) -> float:
        """The bytes it has left to move at cycle `now`, as tick() works them out."""
        return self.transfer.nbytes - self.transfer.cap * (now - self.start)

    def _schedule(self, left: float) -> int:
        delay = max(math.ceil(left / self.transfer.cap - _EPS), 1)  # as _reschedule words it
        self.due = self.arbiter.env.now + delay
        self.timer = self.arbiter.env.timeout(delay)
        self.callbacks = self.timer.callbacks  # the list SimPy runs when the timer fires
        self.callbacks.append(self.arbiter._tick)
        return delay

    def forward(self) -> None:
        """Another transfer joins it: the timer's callbacks after the arbiter's (its waiters) go
        to the transfer's own event, which fires when it has moved its bytes among the many."""
        self.transfer.done = done = self.arbiter.env.event()
        done.callbacks.extend(self.callbacks[1:])
        del self.callbacks[1:]

    def tick(self) -> None:
        """Its timer fired: it has moved its bytes (or, for float rounding, it waits on)."""
        arbiter, t = self.arbiter, self.transfer
        now = arbiter.env.now
        left = self._left(now)
        if left > t.cap * _EPS:
            self._schedule(left)
            return
        arbiter.solo = None
        arbiter.since = now
        t.active = False
        if self.waiter is not self.timer:
            assert t.done is not None  # its waiters' (__init__)
            t.done.succeed()
        _step(arbiter.read, 0.0, now)
        _step(arbiter.write, 0.0, now)


def _form(cap: float, use: dict[str, float], bandwidths: dict[str, float], local: dict[str, tuple[str, float]]) -> Form:
    """(cap, use, shared use, own use) of a transfer: its cap lowered to what each memory could
    give it alone, its use as sorted (memory, endpoints) pairs, and those of them in shared
    memories and in a core's own."""
    used = tuple(sorted((m, n) for m, n in use.items() if n > 0))
    for m, n in used:
        share = bandwidths[m] / n
        cap = min(cap, share)
    return cap, used, tuple(u for u in used if u[0] not in local), tuple(u for u in used if u[0] in local)


def _step(series: Series, rate: float, now: float) -> None:
    """Record the traffic `rate` from cycle `now` on, unless it is the rate already (a
    difference of float rounding is none); a second change at one cycle replaces the first."""
    last = series[-1][1]
    if rate == last or abs(rate - last) <= _EPS * (rate + last):  # _same, spelled out: twice per transfer
        return
    if series[-1][0] != now:
        series.append((now, rate))
    elif len(series) > 1 and _same(rate, series[-2][1]):
        series.pop()
    else:
        series[-1] = (now, rate)


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= _EPS * (a + b)


def _tally(counts: dict[float, int], share: float, change: int) -> float:
    """Count one more (change 1) or one fewer (-1) member with this share; their sum (of one
    share, as a group's members mostly have, its product: the sum's, without summing)."""
    n = counts.get(share, 0) + change
    if n:
        counts[share] = n
    else:
        del counts[share]
    if len(counts) == 1:
        ((s, k),) = counts.items()
        return s * k
    return sum([s * k for s, k in counts.items()])


def _rebase(g: _Group) -> None:
    """Count g's ends from its progress now."""
    progress = g.progress
    heap = []
    for entry in g.heap:
        t = entry[2]
        if t.entry is entry:
            t.entry = (entry[0] - progress, entry[1], t)
            heap.append(t.entry)
    heapq.heapify(heap)
    g.heap, g.progress = heap, 0.0


def _fill(groups: list[_Group], bandwidths: dict[str, float], contended: set[str]) -> None:
    """Progressive filling: every group's rate rises together until it reaches its cap or a
    contended memory it touches is saturated; those stop, the others go on. A shared memory
    carries all of a group's members; a cluster's memory, one copy's."""
    # a memory: a shared one's name, or one copy of a cluster's (_Group.local)
    left: dict[object, float] = {}  # memory -> bandwidth not yet given out
    size: dict[object, float] = {}  # memory -> its bandwidth
    ports: dict[_Group, list[tuple[object, float]]] = {}  # group -> (memory, endpoints)
    for g in groups:
        g.rate = 0.0
        ports[g] = [(m, g.count * n) for m, n in g.shared if m in contended] + [(m, g.copy * n) for m, n, _ in g.local]
        for name, _ in g.shared:
            left[name] = size[name] = bandwidths[name]
        for copy, _, bw in g.local:
            left[copy] = size[copy] = bw
    rising = groups
    while rising:
        load: dict[object, float] = {}  # memory -> endpoints of the rising transfers in it
        for g in rising:
            for mem, n in ports[g]:
                load[mem] = load.get(mem, 0) + n
        step = min(min(g.cap - g.rate for g in rising), min(left[m] / n for m, n in load.items()))
        for g in rising:
            g.rate += step
        for mem, n in load.items():
            left[mem] -= step * n
        full = {mem for mem in load if left[mem] <= size[mem] * _EPS}
        rising = [g for g in rising if g.cap - g.rate > g.cap * _EPS and not any(mem in full for mem, _ in ports[g])]
