"""Which waits an instruction needs, from the buffers it reads and writes: the one rule both
the emitter (isa/lower/emit.py) and the lowering's estimate (isa/lower/schedule/estimate.py) sync by.

Each buffer keeps its last writer and its readers since, per engine. Before an instruction on
engine E, it needs the latest instruction of each other engine that E must follow (a read
after a write, or a write after reads and writes) and that E does not already know finished.
What E knows is a vector clock (the last index known finished, per engine): waiting on F.k
teaches E everything F.k knew, so the waits stay minimal.

A buffer is any object with `writes` and `reads` dicts (engine -> index) and a `section`
(None, or what `Emitter.disjoint` keeps while engines write disjoint bytes of it).
"""

from collections.abc import Iterable
from typing import Any, TypeAlias

import numpy as np

Clock: TypeAlias = np.ndarray  # int32, one entry per engine: the last index known finished
Synced: TypeAlias = Any  # a buffer as the module docstring says (writes, reads, section)


class Clocks:
    """The engines' vector clocks and what each instruction knew when it was appended."""

    def __init__(self, engines: Iterable[str]) -> None:
        self._column = {name: k for k, name in enumerate(engines)}
        none = np.full(len(self._column), -1, np.int32)
        self.known: dict[str, Clock] = dict.fromkeys(self._column, none)  # engine -> its vector clock (never written in place)
        # engine -> per instruction, what it knew (a replay extends it)
        self.knowledge: dict[str, list[Clock]] = {name: [] for name in self._column}

    def need(self, engine: str, reads: Iterable[Synced], writes: Iterable[Synced]) -> dict[str, int]:
        """{other engine: index} the next instruction of `engine` must wait for."""
        deps: dict[str, int] = {}
        get = deps.get
        # what each buffer read was last written by, and each buffer written by and read since
        for b in reads:
            for e, i in (b.writes if b.section is None else b.section[0]).items():
                if get(e, -1) < i:
                    deps[e] = i
        for b in writes:
            for accesses in (b.writes, b.reads) if b.section is None else b.section[:2]:
                for e, i in accesses.items():
                    if get(e, -1) < i:
                        deps[e] = i
        if not deps:
            return deps
        known, column = self.known[engine], self._column
        return {e: i for e, i in deps.items() if e != engine and known[column[e]] < i}

    def learn(self, engine: str, need: dict[str, int]) -> None:
        """`engine` waited for `need`: it now knows what those instructions knew."""
        learned = None
        column, knowledge = self._column, self.knowledge
        for e, i in need.items():
            if learned is None:  # a new clock: the ones appended keep theirs
                learned = np.maximum(self.known[engine], knowledge[e][i])
            else:
                np.maximum(learned, knowledge[e][i], out=learned)
            c = column[e]
            learned[c] = max(learned[c], i)
        if learned is not None:
            self.known[engine] = learned

    def appended(self, engine: str) -> None:
        """An instruction was appended to engine's stream: it knows what its engine knows."""
        self.knowledge[engine].append(self.known[engine])


def accessed(engine: str, index: int, reads: Iterable[Synced], writes: Iterable[Synced]) -> None:
    """Instruction `index` of `engine` read `reads` and wrote `writes`."""
    for b in reads:
        (b.reads if b.section is None else b.section[3])[engine] = index
    for b in writes:
        if b.section is None:
            b.writes, b.reads = {engine: index}, {}
        else:
            b.section[2][engine] = index
