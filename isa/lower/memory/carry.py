"""A repeat's carried tensor keeps one home: the tensor a model's layer hands to the next (its
residual stream) is written where the one it was handed lies, as a compiled loop updates its
carried state in place (XLA gives a while loop's body parameter and result one buffer), and that
home is held from the handed tensor's last read until the new one is placed there.

Without it, first fit puts each layer's output wherever the layer's own intermediates left room,
which differs for the first layers (the first one's input, an embedding's output, lies elsewhere)
until it settles: the first layers would place everything elsewhere than the rest and could not
be replayed (isa/lower/replay.py). With it, every layer starts with the same buffers live.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...graph import Graph
    from ..emit import Buf
    from ..replay import Repeat
    from ..schedule.fusion import Group

Slot = tuple[int, int, int]  # (group offset in a repeat, node index in the group, input or output index)


def carried(graph: Graph, groups: list[Group], repeat: Repeat) -> dict[str, str]:
    """{tensor made in a repeat: the tensor it is handed on in place of}: for each input of a
    repeat's node that the repeat before makes, in every repeat (the last one's too, whose output
    goes on to the groups after), the output at that maker's place and the input at that place."""
    where = {n.name: i for i, g in enumerate(groups) for n in g.nodes}
    first, second = repeat.block(0), repeat.block(1)
    pairs: list[tuple[Slot, Slot]] = []  # (the maker's output, the reader's input) by place in a repeat
    for j in range(repeat.period):
        for a, node in enumerate(groups[second + j].nodes):
            for b, t in enumerate(node.inputs):
                maker = graph.producer.get(t)
                if maker is not None and first <= where[maker.name] < second:
                    k = where[maker.name]
                    pairs.append(((k - first, groups[k].nodes.index(maker), maker.outputs.index(t)), (j, a, b)))
    out: dict[str, str] = {}
    for (mj, ma, mo), (rj, ra, rb) in pairs:
        made = [groups[repeat.block(r) + mj].nodes[ma].outputs[mo] for r in range(repeat.count)]
        handed = [groups[repeat.block(r) + rj].nodes[ra].inputs[rb] for r in range(repeat.count)]
        if made[:-1] == handed[1:] and all(graph.tensors[m].nbytes == graph.tensors[h].nbytes for m, h in zip(made, handed)):
            out.update(zip(made, handed))
    return out


class Carry:
    """The homes held for a repeat's carried tensors (`carried`): from the last read of the tensor
    each is handed on in place of until it is placed there, or given back unclaimed once the group
    that makes it has run (a template that places its own outputs)."""

    def __init__(self, carried: dict[str, str], groups: list[Group]) -> None:
        self.replaced = {handed: made for made, handed in carried.items()}  # a tensor -> the one handed on in its place
        self.maker = {t: i for i, g in enumerate(groups) for n in g.nodes for t in n.outputs if t in carried}
        self.held: dict[str, Buf] = {}  # a carried tensor not yet placed -> the home held for it

    def hold(self, t: str, home: Buf, read: int) -> bool:
        """Whether t's home, at t's last read (by group `read`), is held for the tensor handed on
        in its place (made by a later group)."""
        made = self.replaced.get(t)
        if made is None or self.maker[made] <= read:
            return False
        self.held[made] = home
        return True

    def claim(self, t: str) -> Buf | None:
        """The home held for tensor t, now being placed, if one is."""
        return self.held.pop(t, None)

    def unclaimed(self, ran: int) -> list[Buf]:
        """The homes held for tensors whose makers are among the groups before `ran`."""
        done = [t for t in self.held if self.maker[t] < ran]
        return [self.held.pop(t) for t in done]
