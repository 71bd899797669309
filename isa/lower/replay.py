"""Identical layers emitted once and replayed: a model's decoder layers, lowered one after another,
give the same instructions at their own addresses (their weights, caches and outputs), so the
lowering emits a few and copies the last one's stream for the rest, with its addresses, names and
instruction ids moved. The machine still runs every instruction; only the emission is saved.

A run of `count` repeats of `period` groups alike in ops, parameters, shapes and dtypes (`find`, a
decoder layer each) is cut into blocks of one repeat, or where that is not periodic (a tensor placed
elsewhere every other layer) of 2, 3, 4 or 6. The first blocks are emitted, and block k - 1 is
replayed for blocks k on if it is block k - 2 moved (`Replayer.congruent`), k being 3, else 4
(blocks 0 and 1, after the model's first groups, may leave the emitter otherwise), else for blocks
of one repeat 5 (a layer's waits may reach two layers back). Block c is block c - 1 moved when it
has per engine the same number of instructions, each block c - 1's with the block's bound tensors
(inputs, constants, states, outputs) at the next block's addresses, its staging slots at the next
block's (`Replayer._rotation`), its op and buffer names the next block's, every other address
(tiles, tensors passed between groups) the same, and a wait a wait for the same op; the same buffers
and notes, no binding added; and the emitter's state after block c (its engines' vector clocks, the
histories of released and live buffers, the allocators' live buffers) is that after block c - 1
moved on by a block, but for a released range no placement of block c touched, which may keep a
history older than block c - 1 (no later block touches it either). The emission being a function of
that state and the groups, each later block is then block c moved on again, and the state after the
last is block c's moved on as far. Which instructions a wait names is the sync rule's
(isa/lower/schedule/sync.py) answer from that state's histories and clocks, so block c's waits may
name others than block c - 1's moved on where the state before block c - 1 was not yet periodic;
block c is then replayed all the same. Block c - 2 may differ from the others (a decoder's first
layer stages its first weight tiles in local slots no instruction used before, so it waits once less
on some engines): the check moves the ids that block c - 1's waits name there by a block, as any
other, and where block c's waits are those moved, block c - 1 is a block of the program too. A
decoder's layers place their DDR intermediates alike from the first on, each handing its output on
where its input lay (isa/lower/memory/carry.py), so a Llama decoder's third layer is its second
moved, waits and all, and is replayed for the fourth on.

Staging slots (Emitter.stage_buffer) take turns: a copy stages in the slot its engine wrote
longest ago, so two staged copies a layer over three slots come back to the same slots every third
layer. Block c's slots are block c - 1's permuted, the permutation found from the two blocks'
buffers; the emitter treats the slots alike (it places all of them where they lie and picks one by
its history), so a state whose slots' histories are permuted gives the blocks' instructions with
their slots permuted, as long as that pick has no tie to break (checked) and no other buffer
overlaps a slot (checked). Block c + n's slots are then block c's permuted n times.
Anything else (a layer that binds a constant of its own, a tensor placed elsewhere in every layer)
emits every block. A block whose tensors are bound where block c's are not (a last layer writing
the graph's output where the others pass theirs on) ends the replay: it and the blocks after it
are emitted.

The blocks replayed, block c and, where block c is it moved waits and all, the one it was checked
against are the program's `blocks` (isa/program.py's Blocks: each block the one before it moved,
waits and all), through which timing mode fast-forwards (sim/forward.py). Their buffers are
appended at once, their instructions made when first read (_Replayed): a fast-forwarded timing
run reads only the blocks it runs and the others' op names (isa/program.py's op_names).
"""

from __future__ import annotations

import bisect
import collections
import functools
import itertools
import operator
import re
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, SupportsIndex, overload

import numpy as np

from ..instructions import Dma, IndexedDma, Instr, Matmul, Region, Scalar, Vector, Wait
from ..program import Blocks, Buffer

if TYPE_CHECKING:
    from ..graph import Graph, Node
    from .context import Lowering
    from .emit import Buf, Emitter
    from .schedule.fusion import Group
    from .schedule.sync import Clocks

History = tuple[dict, dict, dict, Any]  # a Buf's writes, reads, last accesses and first access
Slots = dict[str, tuple[int, dict[int, int]]]  # memory -> (a staging slot's size, {its address: the next block's})

EMITTED = 5  # blocks emitted at most before a replay
FEWEST = 5  # repeats worth a replay: blocks 3 and 4 can be checked
# the blocks a replay may start at, by the repeats a block holds: block k - 1 is compared with block
# k - 2 (and k - 3 for the waits they share); blocks of one repeat also at 5 (a layer's waits may
# reach back two layers, so block 2 may still wait on block 0's instructions)
CHECKED = {1: (3, 4, 5)}
CHECKED_LARGER = (3, 4)


class Repeat:
    """`count` consecutive repeats of `period` groups from group `start`."""

    def __init__(self, start: int, period: int, count: int) -> None:
        self.start, self.period, self.count = start, period, count

    def block(self, r: int) -> int:
        """The index of repeat r's first group."""
        return self.start + r * self.period


def find(graph: Graph, groups: list[Group], starts: set[int], bound: set[str]) -> Repeat | None:
    """The longest run of repeats of groups worth a replay (FEWEST or more), their
    edges at `starts` (the groups the driver's spans begin at), each handing on what it makes
    only to the next (`_handed_on`); None where there is none."""
    keys: list[int] = []
    ids: dict[tuple, int] = {}  # a group's ops, parameters, shapes and dtypes -> its number
    for g in groups:
        key = (g.template.name, tuple((n.op, repr(sorted(n.params.items())),
                                       tuple((graph.tensors[t].shape, graph.tensors[t].dtype) for t in n.inputs),
                                       tuple((graph.tensors[t].shape, graph.tensors[t].dtype) for t in n.outputs)) for n in g.nodes))
        keys.append(ids.setdefault(key, len(ids)))
    a, best = np.array(keys), None
    for period in range(1, len(a) // FEWEST + 1):
        same = np.concatenate(([False], a[:-period] == a[period:], [False]))
        edges = np.flatnonzero(np.diff(same.astype(np.int8)))
        for lo, hi in zip(edges[::2], edges[1::2]):
            count = (hi - lo) // period + 1
            if count >= FEWEST and (best is None or count * period > best.count * best.period):
                best = Repeat(int(lo), period, int(count))
    if best is None:
        return None
    end = best.block(best.count)
    for start in range(best.start, best.start + best.period):  # the blocks' edges where the driver's spans start
        blocks = Repeat(start, best.period, (end - start) // best.period)
        if blocks.count >= FEWEST and all(blocks.block(b) in starts for b in range(blocks.count + 1)) \
                and _handed_on(groups, blocks, bound):
            return blocks
    return None


def _handed_on(groups: list[Group], rep: Repeat, bound: set[str]) -> bool:
    """Whether each repeat's tensors homed while lowering (not in `bound`) are read only by it
    and the next one, or, the last repeat's, after it: a replay gives homes to the last block's
    tensors alone. Not so for the KV cache's reads, 2 a layer ahead of the layers, each read by
    its own layer: with fewer than FEWEST layers they are the longest run of repeats."""
    end, made = rep.block(rep.count), dict[str, int]()
    for r in range(rep.count):
        for g in groups[rep.block(r):rep.block(r + 1)]:
            made.update((t, r) for n in g.nodes for t in n.outputs if t not in bound)
    for i, g in enumerate(groups[rep.start:], rep.start):
        reader = (i - rep.start) // rep.period if i < end else rep.count
        if any(made.get(t, reader) + 1 < reader for n in g.nodes for t in n.inputs):
            return False
    return True


class Replayer:
    """Snapshots the emitter at the first blocks' edges; at block k's (`checked`), checks block
    k - 1 against block k - 2, and replays the first that is congruent for the rest (`at`). A block
    is one repeat or, where one is not the one before it moved (a tensor placed elsewhere every
    other layer), two or more."""

    MULTIPLES = (1, 2, 3, 4, 6)

    def __init__(self, ctx: Lowering, em: Emitter, groups: list[Group], repeat: Repeat) -> None:
        self.ctx, self.em, self.groups, self.rep = ctx, em, groups, repeat  # em: ctx's, whose streams it snapshots
        self.engines = list(self.em.streams)
        self.snaps: dict[int, dict] = {}  # group index -> the emitter there
        self.multiple = 1  # repeats a block
        self.slots: Slots = {}  # the staging slots the blocks take turns over (_rotation)
        self.found: Blocks | None = None  # the blocks replayed, from the last one checked on (the Program's `blocks`)
        self.exact = False  # whether the block checked is the one before it moved, waits and all (`congruent`)

    def edge(self, b: int) -> int:
        """The index of block b's first group."""
        return self.rep.block(b * self.multiple)

    @property
    def blocks(self) -> int:
        return self.rep.count // self.multiple

    @property
    def checked(self) -> list[int]:
        """The blocks a replay may start at, with this many repeats a block."""
        return [k for k in CHECKED.get(self.multiple, CHECKED_LARGER) if k < self.blocks]

    def at(self, i: int, placed: set) -> int | None:
        """Called before the driver lowers the span at group i: the group to go on from where it
        replayed the rest of the repeat there, else None (lower it)."""
        if not self.rep.count or i not in {self.rep.block(b * m) for m in self.MULTIPLES for b in range(EMITTED + 1)}:
            return None
        self.snaps[i] = self._snapshot()
        while self.checked and i in {self.edge(k) for k in self.checked}:
            k = next(k for k in self.checked if i == self.edge(k))
            if self.congruent(k):
                end = next((j for j in range(k, self.blocks) if not self._alike(k - 1, j)), self.blocks)
                if end == k:  # block k's tensors are bound where the block before's are not: every block emitted
                    self.rep.count = 0
                    return None
                self._replay(k, placed, end)
                return self.edge(end)
            larger = [m for m in self.MULTIPLES if m > self.multiple]
            if k < self.checked[-1] or not larger:  # each check is made before a larger block is tried
                break
            self.multiple = larger[0]
        if not self.checked or i == self.edge(self.checked[-1]):
            self.em.notes.append(f"layers not replayed: groups {self.edge(3)}..{self.edge(4) - 1} are not those before them moved "
                                 f"to their own addresses; all {self.rep.count} repeats of {self.rep.period} groups emitted")
            self.rep.count = 0  # nothing more to look at
        return None

    # ---- what a block is ----------------------------------------------------------------------

    def _nodes(self, b: int) -> list[Node]:
        return [n for g in self.groups[self.edge(b):self.edge(b + 1)] for n in g.nodes]

    def _pairs(self, b: int, c: int) -> tuple[dict[str, str], dict[int, tuple[Buf, Buf]]]:
        """(names of block b -> those of block c, their bound homes' Bufs b -> c), by position."""
        names, homes, ctx = {}, {}, self.ctx
        for m, n in zip(self._nodes(b), self._nodes(c)):
            names[m.name] = n.name
            for s, t in (*zip(m.inputs, n.inputs), *zip(m.outputs, n.outputs)):
                names.setdefault(s, t)
                if s in ctx.bound and s != t:
                    homes[id(ctx.home[s])] = (ctx.home[s], ctx.home[t])
        return names, homes

    def _alike(self, c: int, j: int) -> bool:
        """Whether block j's tensors are bound (inputs, outputs, constants, states) where block c's
        are: a last layer's output may be the graph's, where the others' pass on to the next."""
        bound = self.ctx.bound
        return all((s in bound) == (t in bound) for m, n in zip(self._nodes(c), self._nodes(j))
                   for s, t in (*zip(m.inputs, n.inputs), *zip(m.outputs, n.outputs)))

    def _snapshot(self) -> dict:
        em = self.em
        return {"len": {e: len(s) for e, s in em.streams.items()}, "buffers": len(em.buffers), "notes": len(em.notes),
                "bindings": len(em.bindings), "known": dict(em.clocks.known),
                "live": {m: dict(a.live) for m, a in em.allocators.items()},
                "released": {m: [(lo, hi, _history(b), b) for lo, hi, b in r.ranges] for m, r in em.released.items()},
                "homes": {t: _history(b) for t, b in self._passed().items()}}

    def _passed(self) -> dict[str, Buf]:
        """tensor -> its home, for the tensors passed between groups (not bound, nor a view of a bound one)."""
        ctx = self.ctx
        bound = {id(ctx.home[t]) for t in ctx.bound}
        return {t: b for t, b in ctx.home.items() if id(b) not in bound}

    # ---- the check ----------------------------------------------------------------------------

    def congruent(self, k: int) -> bool:
        """Whether block c = k - 1 (emitted up to block k's edge) is block c - 1 moved."""
        c = k - 1
        s = {b: self.snaps[self.edge(b)] for b in range(c - 2, k + 1)}
        delta = {e: s[k]["len"][e] - s[c]["len"][e] for e in self.engines}
        if any(s[c]["len"][e] - s[c - 1]["len"][e] != delta[e] for e in self.engines):
            return False
        if s[k]["bindings"] != s[c - 1]["bindings"] or s[k]["buffers"] - s[c]["buffers"] != s[c]["buffers"] - s[c - 1]["buffers"]:
            return False
        if s[k]["notes"] - s[c]["notes"] != s[c]["notes"] - s[c - 1]["notes"]:
            return False
        slots = self._rotation(c)
        if slots is None:
            return False
        self.slots = slots
        move = _Move(self, c - 1, c, {e: s[c - 2]["len"][e] for e in self.engines}, delta, slots)
        em, exact = self.em, True
        for e in self.engines:
            stream, lo, hi = em.streams[e], s[c - 1]["len"][e], s[c]["len"][e]
            moved, actual = list(map(move.instr, stream[lo:hi])), stream[lo + delta[e]:hi + delta[e]]
            if moved != actual:
                if not all(map(_same, moved, actual)):
                    return False
                exact = False
        buffers, shift = em.buffers, s[c]["buffers"] - s[c - 1]["buffers"]
        if any(move.buffer(buffers[j]) != buffers[j + shift] for j in range(s[c - 1]["buffers"], s[c]["buffers"])):
            return False
        shift = s[c]["notes"] - s[c - 1]["notes"]
        if any(move.text(em.notes[j]) != em.notes[j + shift] for j in range(s[c - 1]["notes"], s[c]["notes"])):
            return False
        self.exact = exact
        return self._state_congruent(move, k)

    def _rotation(self, c: int) -> Slots | None:
        """The staging slots block c takes turns over (Emitter.stage_buffer): memory -> {a slot's
        address in block c - 1: its address in block c}, a permutation of equal slots found from the
        two blocks' buffers placed at other addresses; None where those do not make one, or where
        any other buffer of the two blocks overlaps a slot."""
        s, em = self.snaps, self.em
        bound = {(b.mem, b.addr) for b in (self.ctx.home[t] for t in self.ctx.bound)}
        lo, mid, hi = (s[self.edge(b)]["buffers"] for b in (c - 1, c, c + 1))
        if hi - mid != mid - lo:
            return None
        slots: dict[str, dict[int, int]] = {}
        sizes: dict[str, int] = {}
        for x, y in zip(em.buffers[lo:mid], em.buffers[mid:hi]):
            if x.mem != y.mem or x.addr == y.addr or (x.mem, x.addr) in bound:
                continue
            if x.size != y.size or sizes.setdefault(x.mem, x.size) != x.size:
                return None
            if slots.setdefault(x.mem, {}).setdefault(x.addr, y.addr) != y.addr:
                return None
        placed: dict[str, list[Buffer]] = {}  # the two blocks' buffers in the slots' memories
        for b in em.buffers[lo:hi]:
            if b.mem in slots:
                placed.setdefault(b.mem, []).append(b)
        for mem, perm in slots.items():  # the slots no buffer moved from take the places none moved to
            sources, targets = sorted(set(perm.values()) - set(perm)), sorted(set(perm) - set(perm.values()))
            perm.update(zip(sources, targets))
            if len(set(perm.values())) != len(perm):
                return None
            size, starts = sizes[mem], sorted(perm)
            if any(b - a < size for a, b in itertools.pairwise(starts)):
                return None
            if any((b.addr, b.size) != (a, size) and b.addr < a + size and a < b.addr + b.size for b in placed[mem] for a in starts):
                return None
        return {m: (sizes[m], perm) for m, perm in slots.items()}

    def _state_congruent(self, move: _Move, k: int) -> bool:
        before, after = self.snaps[self.edge(k - 1)], self.snaps[self.edge(k)]
        if any(not np.array_equal(move.clock(before["known"][e]), after["known"][e]) for e in self.engines):
            return False
        if any(sorted((a, n) for a, (n, _) in before["live"][m].items()) != sorted((a, n) for a, (n, _) in live.items())
               for m, live in after["live"].items()):
            return False
        replayed = self.snaps[self.edge(k - 2)]["len"]  # the replay moves ids from block k - 2 on
        for m, ranges in after["released"].items():
            old = before["released"][m]
            perm = move.slots.get(m, (0, {}))[1]
            histories = {perm.get(o[0], o[0]): (o[1] - o[0], move.history(o[2]), o[3]) for o in old}
            if len(old) != len(ranges) or any(histories.get(r[0], (0,))[0] != r[1] - r[0] for r in ranges):
                return False
            for lo, _, hist, buf in ranges:
                _, then, was = histories[lo]
                # a range no placement of block k - 1 touched keeps its history; one older than block
                # k - 2 no placement of the later blocks touches either, and the replay leaves it
                if then != hist and not (was is buf and lo not in perm and _older(hist, replayed)):
                    return False
            for e in {e for r in ranges if r[0] in perm for e in r[2][0]}:  # the slots' oldest is one: no tie to break
                written = [r[2][0].get(e, -1) for r in ranges if r[0] in perm]
                if len(set(written)) != len(written):
                    return False
        names = move.names
        for t, hist in before["homes"].items():
            moved = names.get(t)
            if moved is not None and moved != t and moved in after["homes"] and move.history(hist) != after["homes"][moved]:
                return False
        return True

    # ---- the replay ---------------------------------------------------------------------------

    def _replay(self, k: int, placed: set, end: int) -> None:
        """Block c = k - 1 replayed for blocks k to end - 1."""
        rep, em, c = self.rep, self.em, k - 1
        s = {b: self.snaps[self.edge(b)] for b in range(c - 1, k + 1)}
        first = {e: s[c - 1]["len"][e] for e in self.engines}  # ids from here on move with the blocks
        delta = {e: s[k]["len"][e] - s[c]["len"][e] for e in self.engines}
        b3, n3 = (s[c]["buffers"], s[k]["buffers"]), (s[c]["notes"], s[k]["notes"])
        pairs = self._pairs(c - 1, c)[1].values()
        owned = [_owned(old for old, _ in pairs), _owned(new for _, new in pairs)]
        mems = {old.mem for old, _ in pairs} | set(self.slots)  # the memories some block's addresses move in
        block, shifts = _Block(em, s[c]["len"], delta, range(*b3), first, mems), []
        for e in self.engines:  # the replayed blocks' instructions are made when read (_Replayed)
            em.streams[e] = _Replayed(em.streams[e], block, e, end - k)
        for j in range(k, end):
            shift = {e: (j - c) * d for e, d in delta.items()}
            move = _Move(self, c, j, first, shift, _power(self.slots, j - c))
            owned.append(_owned(new for _, new in move.homes.values()))
            block.append(move, shift)
            shifts.append(shift)
            em.notes.extend(move.text(em.notes[x]) for x in range(*n3))
            for old, new in move.homes.values():
                for field in ("writes", "reads", "last"):
                    setattr(new, field, move.ids(getattr(old, field)))
                new.first = old.first and move.ident(old.first)
        block.knowledge(em.clocks, shifts)
        b0 = c - 1 if self.exact else c  # the program's blocks start at the one block c was checked against where it is that one moved
        self.found = Blocks(dict(s[b0]["len"]), delta, end - b0, s[b0]["buffers"], b3[1] - b3[0], tuple(owned[b0 - c + 1:]))
        last = _Move(self, c, end - 1, first, {e: (end - k) * d for e, d in delta.items()}, _power(self.slots, end - k))
        self._move_state(last, placed)
        em.notes.append(f"layers replayed: {end - k} blocks of {rep.period * self.multiple} groups (from group "
                        f"{self.edge(k)}) are groups {self.edge(c)}..{self.edge(k) - 1}'s instructions at their own addresses")

    def _move_state(self, move: _Move, placed: set) -> None:
        """The emitter as the last block leaves it: block 3's state moved on to it."""
        em, ctx = self.em, self.ctx
        em.clocks.known = {e: move.clock(v) for e, v in em.clocks.known.items()}
        bufs = {id(b): b for r in em.released.values() for _, _, b in r.ranges}
        bufs.update((id(b), b) for b in self._passed().values())
        bufs.update((id(ctx.home[t]), ctx.home[t]) for t in ctx.bound if move.names.get(t) == t)  # every block's alike
        for b in list(bufs.values()):
            bufs.update((id(p), p) for p in b.parts)
        for b in bufs.values():
            b.writes, b.reads, b.last = move.ids(b.writes), move.ids(b.reads), move.ids(b.last)
            b.first = b.first and move.ident(b.first)
        for m, (_, perm) in move.slots.items():  # a slot's history is that of the slot it was blocks before
            released = em.released[m]
            held = {perm[lo]: buf for lo, _, buf in released.ranges if lo in perm}
            released.ranges = [(lo, hi, held.get(lo, b)) for lo, hi, b in released.ranges]
        for t, buf in list(self._passed().items()):  # block 3's tensors passed on are the last block's
            new = move.names.get(t)
            if new is not None and new != t and new not in ctx.home:
                ctx.home[new] = buf
                if t in placed:
                    placed.add(new)
                live = em.allocators[buf.mem].live.get(buf.addr)
                if live is not None and live[1] == buf.name:
                    buf.name = move.text(buf.name)
                    em.allocators[buf.mem].live[buf.addr] = (live[0], buf.name)


def _same(moved: Instr, actual: Instr) -> bool:
    """Whether an instruction of block c - 1 moved on is block c's: equal, or a wait for the same op
    (the instructions a wait names follow from the emitter's state, compared apart)."""
    return moved == actual or (type(moved) is Wait and type(actual) is Wait and moved.op == actual.op)


def _owned(bufs: Any) -> tuple[tuple[int, int], ...]:
    """The ddr spans of a block's own bound tensors' homes, sorted."""
    return tuple(sorted((b.addr, b.addr + b.size) for b in bufs if b.mem == "ddr"))


def _power(slots: Slots, n: int) -> Slots:
    """The slots' permutation applied n times: block c's addresses in block c + n."""
    powers = {}
    for m, (size, perm) in slots.items():
        moved = {}
        for a in perm:
            orbit = [a]
            while perm[orbit[-1]] != a:
                orbit.append(perm[orbit[-1]])
            moved[a] = orbit[n % len(orbit)]
        powers[m] = (size, moved)
    return powers


def _older(h: History, starts: dict[str, int]) -> bool:
    """Whether history h names only instructions before `starts` (per engine)."""
    first = h[3] and h[3].rsplit(".", 1)
    return all(i < starts[e] for d in h[:3] for e, i in d.items()) and (not first or int(first[1]) < starts[first[0]])


def _history(buf: Buf) -> History:
    return (dict(buf.writes), dict(buf.reads), dict(buf.last), buf.first)


class _Block:
    """The block replayed, made ready to be moved to each later block at a few steps per
    instruction, most of them in bulk (map over the block): each instruction as its fields' dict,
    its op's index in the block's distinct ops, and the fields that may move (regions, as indices
    into the block's distinct regions in a memory whose addresses move); the waits' and buffers'
    ids parsed (_Ids); each engine's distinct vector clocks stacked. A moved instruction is a
    copy of its fields' dict with the moved ones replaced, set on a new object of its class: what
    the class's (frozen dataclass) constructor makes, without its checks of frozenness per field.
    It keeps the emitter's streams and buffers, not the emitter: the streams hold it once replayed,
    and the emitter's vector clocks are of no use once the program is lowered."""

    def __init__(self, em: Emitter, lo: dict[str, int], n: dict[str, int], buffers: range, first: dict[str, int], mems: set[str]) -> None:
        self.streams, self.program_buffers = em.streams, em.buffers
        self.buffers, self.mems, self.sizes = buffers, mems, n
        self.column = {e: k for k, e in enumerate(em.clocks.known)}
        instrs = [x for e, stream in em.streams.items() for x in stream[lo[e]:lo[e] + n[e]]]  # engine after engine
        self.ends = dict(zip(em.streams, itertools.accumulate(n[e] for e in em.streams)))
        self.planned: list[tuple[_Move, dict[str, int], list[int]]] = []  # each block appended: its move, ids' shift, addresses
        self.made: set[int] = set()  # the blocks whose instructions are made
        self.ons: dict[int, list[tuple[str, ...]]] = {}  # block -> its waits' ids, where read unmade (waits_of)
        self.texts: dict[int, np.ndarray] = {}  # block -> its distinct ops' names
        self.indexes: dict[str, np.ndarray] = {}  # engine -> its instructions' op indices (op_index)
        self.classes = [type(x) for x in instrs]
        self.fields = [x.__dict__ for x in instrs]
        self.ops, self.op = _indexed([x.op for x in instrs])
        self.waits = [k for k, x in enumerate(instrs) if type(x) is Wait]
        self.regions: dict[Region, int] = {}  # a region in a memory some block's addresses move in -> its index
        # the fields that move: a region's, by field name (its instructions and regions, set in bulk), and tuples of operands
        self.moving: dict[str, tuple[list[int], list[int]]] = {}
        self.tuples: list[tuple[int, str, tuple, tuple]] = []
        for k, x in enumerate(instrs):
            if type(x) is not Wait:
                for key, to in self._changes(x):
                    if type(to) is int:
                        at, tos = self.moving.setdefault(key, ([], []))
                        at.append(k)
                        tos.append(to)
                    else:
                        self.tuples.append((k, key, *to))
        self.known: dict[str, tuple[list[int], np.ndarray, np.ndarray]] = {}  # engine -> rows, distinct clocks, entries that move
        starts = np.array([first[e] for e in self.column])
        for e in em.streams:
            rows: dict[int, int] = {}
            known = em.clocks.knowledge[e][lo[e]:lo[e] + n[e]]
            order = [rows.setdefault(id(v), len(rows)) for v in known]
            distinct = list({id(v): v for v in known}.values())
            clocks = np.stack(distinct) if distinct else np.zeros((0, len(self.column)), np.int32)
            self.known[e] = (order, clocks, clocks >= starts)
        bufs = em.buffers[buffers.start:buffers.stop]
        self.names, self.name = _indexed([b.name for b in bufs])
        self.mem, self.size = [b.mem for b in bufs], [b.size for b in bufs]
        self.places = _Places([*((r.mem, r.addr) for r in self.regions), *((b.mem, b.addr) for b in bufs)])
        self.wait_ids = _Ids([[x.on for x in instrs if isinstance(x, Wait)]], first, self.column)
        self.buffer_ids = _Ids([[(b.first,) for b in bufs], [b.last for b in bufs]], first, self.column)

    def _changes(self, x: Instr) -> list[tuple[str, Any]]:
        """(field, what it becomes) of instruction x's fields that may move: a region (its index),
        or a tuple of operands with regions among them ((the tuple, ((position, region index), ...)))."""
        changes: list[tuple[str, Any]] = []
        for key, v in x.__dict__.items():
            if type(v) is Region:
                if v.mem in self.mems:
                    changes.append((key, self.regions.setdefault(v, len(self.regions))))
            elif type(v) is tuple:
                at = tuple((p, self.regions.setdefault(u, len(self.regions)))
                           for p, u in enumerate(v) if type(u) is Region and u.mem in self.mems)
                if at:
                    changes.append((key, (v, at)))
        return changes

    def append(self, move: _Move, shift: dict[str, int]) -> None:
        """The block moved by `move` (its ids by `shift`) appended: its buffers now, its
        instructions when first read (make; the streams hold their places)."""
        addrs = self.places.moved(move)
        self.planned.append((move, shift, addrs))
        firsts, lasts = self.buffer_ids.moved(np.array([shift[e] for e in self.column], np.int64))
        names = [move.text(name) for name in self.names]
        moved = zip(map(names.__getitem__, self.name), self.mem, addrs[len(self.regions):], self.size,
                    map(operator.itemgetter(0), firsts), lasts)
        made = list(map(object.__new__, itertools.repeat(Buffer, len(self.size))))
        _run(map(object.__setattr__, made, itertools.repeat("__dict__"), map(dict, map(zip, itertools.repeat(_BUFFER), moved))))
        self.program_buffers.extend(made)

    def make(self, j: int) -> None:
        """Block j (of those appended) made: its instructions in their places in the streams."""
        if j in self.made:
            return
        self.made.add(j)
        addrs = self.planned[j][2]
        setitem, new, set_dict = dict.__setitem__, object.__new__, object.__setattr__
        ops = self.op_texts(j).tolist()
        regions = [r if a == r.addr else tuple.__new__(Region, (r.mem, a, r.dtype, r.shape, r.strides))
                   for r, a in zip(self.regions, addrs)]
        fields = list(map(dict.copy, self.fields))
        _run(map(setitem, fields, itertools.repeat("op"), map(ops.__getitem__, self.op)))
        _run(map(setitem, [fields[k] for k in self.waits], itertools.repeat("on"), self._ons(j)))
        self.ons.pop(j, None)
        for key, (at, tos) in self.moving.items():
            _run(map(setitem, map(fields.__getitem__, at), itertools.repeat(key), map(regions.__getitem__, tos)))
        for k, key, operands, positions in self.tuples:
            values = list(operands)
            for p, r in positions:
                values[p] = regions[r]
            fields[k][key] = tuple(values)
        instrs = list(map(new, self.classes))
        _run(map(set_dict, instrs, itertools.repeat("__dict__"), fields))
        start = 0
        for e, end in self.ends.items():
            stream = self.streams[e]
            assert isinstance(stream, _Replayed)
            place = stream.lo + j * self.sizes[e]
            list.__setitem__(stream, slice(place, place + self.sizes[e]), instrs[start:end])
            start = end

    def _ons(self, j: int) -> list[tuple[str, ...]]:
        """Block j's waits' ids (each a tuple of "engine.index"), its counterparts' moved on."""
        if j not in self.ons:
            (self.ons[j],) = self.wait_ids.moved(np.array([self.planned[j][1][e] for e in self.column], np.int64))
        return self.ons[j]

    def waits_of(self, j: int, engine: str) -> tuple[list[int], list[tuple[str, ...]]]:
        """Engine's waits in block j, unmade: their places in its part of the block and their ids."""
        start, end = self.ends[engine] - self.sizes[engine], self.ends[engine]
        lo, hi = bisect.bisect_left(self.waits, start), bisect.bisect_left(self.waits, end)
        return [k - start for k in self.waits[lo:hi]], self._ons(j)[lo:hi]

    def op_texts(self, j: int) -> np.ndarray:
        """Block j's distinct op names (self.ops moved to it), an array of str objects."""
        if j not in self.texts:
            self.texts[j] = np.array([self.planned[j][0].text(op) for op in self.ops], object)
        return self.texts[j]

    def op_index(self, engine: str) -> np.ndarray:
        """Each of engine's instructions in the block: its op's index in self.ops."""
        if engine not in self.indexes:
            self.indexes[engine] = np.array(self.op[self.ends[engine] - self.sizes[engine]:self.ends[engine]], np.intp)
        return self.indexes[engine]

    def knowledge(self, emitted: Clocks, shifts: list[dict[str, int]]) -> None:
        """The engines' vector clocks of the blocks appended, moved by `shifts` (one a block): _Knowledge."""
        knowledge = emitted.knowledge
        by = [np.array([s[e] for e in self.column], np.int32) for s in shifts]
        for e, (order, clocks, moves) in self.known.items():
            knowledge[e] = _Knowledge(knowledge[e], order, clocks, moves, by)


_BUFFER = ("name", "mem", "addr", "size", "first", "last")  # Buffer's fields


class _Knowledge(list):
    """An engine's vector clocks per instruction (Clocks.knowledge) where the replayed blocks'
    entries are worked out when read, each its counterpart's in the block replayed moved on by
    whole blocks: an emission after the replay reads a few (its waits on the last blocks), and
    made for all they would take a gigabyte for a 7B model."""

    def __init__(self, emitted: list[np.ndarray], rows: list[int], clocks: np.ndarray, moves: np.ndarray, by: list[np.ndarray]) -> None:
        super().__init__(emitted)
        self.lo, self.rows, self.clocks, self.moves, self.by = len(emitted), rows, clocks, moves, by
        self.extend(itertools.repeat(None, len(rows) * len(by)))

    @overload
    def __getitem__(self, i: SupportsIndex) -> np.ndarray: ...

    @overload
    def __getitem__(self, i: slice) -> list[np.ndarray]: ...

    def __getitem__(self, i: SupportsIndex | slice) -> np.ndarray | list[np.ndarray]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        k = operator.index(i)
        k += len(self) if k < 0 else 0
        v = super().__getitem__(k)
        if v is None:
            b, p = divmod(k - self.lo, len(self.rows))
            r = self.rows[p]
            v = self.clocks[r] + self.moves[r] * self.by[b]
            self[k] = v
        return v

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[k] for k in range(len(self)))


class _Replayed(list[Any]):
    """An engine's stream whose replayed blocks' instructions are made when first read
    (_Block.make), each block at once: a timing run that fast-forwards through them reads the
    blocks it runs and the others' op names (op_names), so a 7B decode step's 3 million replayed
    instructions are not made there; reading the stream whole (a functional run, a listing,
    equality) makes them all. An unmade place holds None."""

    def __init__(self, emitted: list[Instr], block: _Block, engine: str, count: int) -> None:
        super().__init__(emitted)
        self.block, self.engine = block, engine
        self.lo: int = len(emitted)  # the first replayed place
        self.n: int = block.sizes[engine]  # places a block
        self.blocks = count
        self.extend(itertools.repeat(None, self.n * count))

    def _make(self, lo: int, hi: int) -> None:
        """Make the blocks with a place in [lo, hi)."""
        if self.n and lo < hi:
            first, last = max(lo - self.lo, 0) // self.n, min(hi - self.lo, self.n * self.blocks)
            for j in range(first, -(-last // self.n)):
                self.block.make(j)

    def op_names(self, indices: Iterable[int]) -> list[str]:
        """The op names of the instructions at `indices`, an unmade block's from its names."""
        at = np.fromiter(indices, np.int64)
        names = np.empty(len(at), object)
        block = (at - self.lo) // max(self.n, 1)
        unmade = (at >= self.lo) & (block < self.blocks) & (self.n > 0) & ~np.isin(block, list(self.block.made))
        where = np.flatnonzero(unmade)
        cuts = np.flatnonzero(np.diff(block[where])) + 1  # runs of one block
        ops = self.block.op_index(self.engine)
        for run in np.split(where, cuts) if len(where) else ():
            j = int(block[run[0]])
            names[run] = self.block.op_texts(j)[ops[at[run] - self.lo - j * self.n]]
        rest = np.flatnonzero(~unmade)
        names[rest] = [x.op for x in map(functools.partial(list.__getitem__, self), at[rest].tolist())]  # made: read as they are
        return names.tolist()

    def waits_in(self, lo: int, hi: int) -> tuple[list[int], list[tuple[str, ...]]]:
        """isa/program.py's waits_in: an unmade block's from its ids (_Block.waits_of), the rest read."""
        at: list[int] = []
        ons: list[tuple[str, ...]] = []
        edges = {lo, hi, *(self.lo + j * self.n for j in range(self.blocks + 1) if self.n)}
        for a, b in itertools.pairwise(sorted(e for e in edges if lo <= e <= hi)):
            j = (a - self.lo) // self.n if self.n and a >= self.lo else -1
            if 0 <= j < self.blocks and j not in self.block.made:
                base = self.lo + j * self.n
                found, named = self.block.waits_of(j, self.engine)
                pairs = [(base + p, on) for p, on in zip(found, named) if a <= base + p < b]
            else:
                pairs = [(i, x.on) for i, x in enumerate(list.__getitem__(self, slice(a, b)), a) if type(x) is Wait]
            at += map(operator.itemgetter(0), pairs)
            ons += map(operator.itemgetter(1), pairs)
        return at, ons

    @overload
    def __getitem__(self, i: SupportsIndex) -> Instr: ...

    @overload
    def __getitem__(self, i: slice) -> list[Instr]: ...

    def __getitem__(self, i: SupportsIndex | slice) -> Instr | list[Instr]:
        if type(i) is slice:
            lo, hi, step = i.indices(len(self))
            self._make(*((lo, hi) if step > 0 else (0, len(self))))
            return list.__getitem__(self, i)
        v = list.__getitem__(self, i)
        if v is None:
            k = operator.index(i)
            k += len(self) if k < 0 else 0
            self._make(k, k + 1)
            v = list.__getitem__(self, k)
        return v

    def _whole(self) -> _Replayed:
        self._make(0, len(self))
        return self

    def __iter__(self) -> Iterator[Instr]:
        return list.__iter__(self._whole())

    def __reversed__(self) -> Iterator[Instr]:
        return list.__reversed__(self._whole())

    def __contains__(self, x: object) -> bool:
        return list.__contains__(self._whole(), x)

    def __eq__(self, other: object) -> bool:
        return list.__eq__(self._whole(), other._whole() if isinstance(other, _Replayed) else other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None

    def __add__(self, other: list) -> list:
        return [*self, *other]

    def __repr__(self) -> str:
        return list.__repr__(self._whole())

    def __reduce__(self) -> tuple:
        return list, (list(self),)  # pickled as the list it reads as


def _run(it: Any) -> None:
    """Exhaust an iterator of calls made for their effect."""
    collections.deque(it, 0)


def _indexed(values: list[str]) -> tuple[list[str], list[int]]:
    """(the distinct values in order, each value's index among them)."""
    index: dict[str, int] = {}
    at = [index.setdefault(v, len(index)) for v in values]
    return list(index), at


class _Places:
    """(memory, address) pairs made ready to be moved: their addresses by memory, as arrays."""

    def __init__(self, places: list[tuple[str, int]]) -> None:
        self.n = len(places)
        self.by_mem: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # memory -> (positions, addresses)
        at: dict[str, list[int]] = {}
        for k, (mem, _) in enumerate(places):
            at.setdefault(mem, []).append(k)
        for mem, positions in at.items():
            self.by_mem[mem] = (np.array(positions, np.intp), np.array([places[k][1] for k in positions], np.int64))

    def moved(self, move: _Move) -> list[int]:
        """The addresses as `move` moves them (as _Move.region does)."""
        out = np.zeros(self.n, np.int64)
        for mem, (positions, addrs) in self.by_mem.items():
            out[positions] = move.addresses(mem, addrs)
        return out.tolist()


class _Ids:
    """Lists of tuples of instruction ids ("engine.index": the waits', the buffers' first and last
    ones) made ready to be moved by whole blocks: the block's distinct ids, their engines' prefixes,
    indices and whether they move (from `first` on) as arrays, and each list as _Tuples of them.
    Ids distinct in the block are distinct moved (one that moves lands past every one that does
    not), so each is made once a block."""

    def __init__(self, lists: list[list[tuple[str, ...]]], first: dict[str, int], column: dict[str, int]) -> None:
        at: dict[str, int] = {}
        self.lists = [_Tuples([[at.setdefault(i, len(at)) for i in t] for t in tuples]) for tuples in lists]
        parts = [i.rsplit(".", 1) for i in at]
        self.prefixes = [e + "." for e, _ in parts]
        self.index = np.array([int(i) for _, i in parts], np.int64)
        self.engine = np.array([column[e] for e, _ in parts], np.intp)
        self.moves = self.index >= np.array([first[e] for e in column], np.int64)[self.engine]

    def moved(self, by: np.ndarray) -> list[list[tuple[str, ...]]]:
        """Each list of tuples, their ids that move on by `by` (per engine column)."""
        index = self.index + self.moves * by[self.engine]
        ids = list(map(operator.add, self.prefixes, map(str, index.tolist())))
        return [t.made(ids) for t in self.lists]


class _Tuples:
    """Tuples of ids as their positions among a block's distinct ids, grouped by length so that
    each group's tuples are made at once (zip)."""

    def __init__(self, tuples: list[list[int]]) -> None:
        lengths: dict[int, list[int]] = {}
        for k, t in enumerate(tuples):
            lengths.setdefault(len(t), []).append(k)
        self.n = len(tuples)
        self.groups: list[tuple[int, list[int], int, int]] = []  # (length, the tuples' positions, their ids' [start, end) in `flat`)
        self.flat: list[int] = []
        for m, positions in lengths.items():
            self.groups.append((m, positions, len(self.flat), len(self.flat) + m * len(positions)))
            self.flat += [i for k in positions for i in tuples[k]]

    def made(self, ids: list[str]) -> list[tuple[str, ...]]:
        flat = list(map(ids.__getitem__, self.flat))
        out: list[tuple[str, ...]] = [()] * self.n
        for m, positions, lo, hi in self.groups:
            _run(map(operator.setitem, itertools.repeat(out), positions, zip(*[iter(flat[lo:hi])] * m)))
        return out


class _Move:
    """Block b's instructions, buffers, notes and ids moved to block c: its bound tensors' addresses
    to c's, its names to c's, and instruction ids from `first` on (per engine) by `shift`."""

    def __init__(self, replayer: Replayer, b: int, c: int, first: dict[str, int], shift: dict[str, int], slots: Slots) -> None:
        self.names, self.homes = replayer._pairs(b, c)
        self.first, self.shift, self.slots = first, shift, slots
        self.column = {e: k for k, e in enumerate(replayer.em.clocks.known)}
        self._lo = np.array([first[e] for e in self.column])
        self._by = np.array([shift[e] for e in self.column], np.int32)
        self.spans: dict[str, list[tuple[int, int, int]]] = {}  # memory -> sorted (addr, end, new addr) of the bound homes that move
        for old, new in self.homes.values():
            self.spans.setdefault(old.mem, []).append((old.addr, old.addr + old.size, new.addr))
        for m, (size, perm) in slots.items():
            self.spans.setdefault(m, []).extend((a, a + size, to) for a, to in perm.items() if a != to)
        for v in self.spans.values():
            v.sort()
        self.starts = {m: [lo for lo, _, _ in v] for m, v in self.spans.items()}
        words = sorted(self.names, key=len, reverse=True)
        self.pattern = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, words)) + r")(?![\w])") if words else None
        self.texts: dict[str, str] = {}
        self.idents: dict[str, str] = {}
        self.regions: dict[Region, Region] = {}

    def text(self, s: str) -> str:
        """s with block b's names as block c's."""
        if s not in self.texts:
            self.texts[s] = self.pattern.sub(lambda m: self.names[m.group(1)], s) if self.pattern and s else s
        return self.texts[s]

    def ident(self, ident: str) -> str:
        if ident not in self.idents:
            e, k = ident.rsplit(".", 1)
            i = int(k)
            self.idents[ident] = f"{e}.{i + self.shift[e]}" if i >= self.first[e] else ident
        return self.idents[ident]

    def ids(self, d: dict) -> dict:
        return {e: i + self.shift[e] if i >= self.first[e] else i for e, i in d.items()}

    def history(self, h: History) -> History:
        return (self.ids(h[0]), self.ids(h[1]), self.ids(h[2]), h[3] and self.ident(h[3]))

    def clock(self, v: np.ndarray) -> np.ndarray:
        return np.where(v >= self._lo, v + self._by, v).astype(v.dtype)

    def region(self, r: Any) -> Any:  # a vector operand: a Region or a number
        if not isinstance(r, Region) or r.mem not in self.spans:
            return r
        moved = self.regions.get(r)
        if moved is None:
            k = bisect.bisect_right(self.starts[r.mem], r.addr) - 1
            moved = r
            if k >= 0:
                lo, hi, new = self.spans[r.mem][k]
                if r.addr < hi:
                    moved = r._replace(addr=r.addr - lo + new)
            self.regions[r] = moved
        return moved

    def addresses(self, mem: str, addrs: np.ndarray) -> np.ndarray:
        """Addresses in `mem` moved as `region` moves a region at each."""
        spans = self.spans.get(mem)
        if not spans:
            return addrs
        lo, hi, new = (np.array(v, np.int64) for v in zip(*spans))
        k = np.searchsorted(lo, addrs, side="right") - 1
        at = np.maximum(k, 0)
        return np.where((k >= 0) & (addrs < hi[at]), addrs - lo[at] + new[at], addrs)

    def instr(self, x: Instr) -> Instr:
        op, rg = self.text(x.op), self.region
        if type(x) is Wait:
            return Wait(tuple(self.ident(i) for i in x.on), op)
        if type(x) is Dma:
            return Dma(rg(x.src), rg(x.dst), op, x.fn, x.args, x.cdt)
        if type(x) is Matmul:
            return Matmul(rg(x.a), rg(x.b), rg(x.c), x.accumulate, op, x.m, x.bias and rg(x.bias), x.conv)
        if type(x) is Vector:
            return Vector(x.fn, rg(x.dst), tuple(rg(v) for v in x.srcs), x.cdt, op)
        if type(x) is IndexedDma:
            return IndexedDma(rg(x.table), rg(x.index), rg(x.rows), x.scatter, x.wrap, op)
        if type(x) is Scalar:
            return Scalar(x.fn, tuple(rg(v) for v in x.dsts), tuple(rg(v) for v in x.srcs), x.args, op)
        raise TypeError(f"lowering bug: no replay of {type(x).__name__}")

    def buffer(self, b: Buffer) -> Buffer:
        r = self.region(Region(b.mem, b.addr, "uint8", (b.size,), (1,)))
        return Buffer(self.text(b.name), b.mem, r.addr, b.size, self.ident(b.first), tuple(self.ident(i) for i in b.last))
