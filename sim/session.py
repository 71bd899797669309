"""A session: one chip whose DDR keeps graph state (isa.Graph.state) between runs, as a serving
engine keeps a language model's key and value caches in device memory between decode steps.

Each run is a program of its own (a decode step at position p is a graph of its own: its shapes
and positions are fixed), and every program binds the states it declares first, in declaration
order (isa/lower/templates/cache.py), so they lie at the same DDR addresses in each. The session
holds each state's bytes as the last run left them in the simulated DDR and puts them back there
before the next run; the states' bytes change only by the programs' own instructions. A program
that binds a state elsewhere, or with another shape or dtype, is refused, naming both places.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import isa
from isa.errors import InputError, ProgramError

from .run import _chip, execute

if TYPE_CHECKING:
    from collections.abc import Mapping

    from numpy import ndarray

    from chips.schema import Chip
    from isa.graph import Graph
    from isa.lower.policy import Policy
    from isa.program import Program

    from .machine import Result


class Session:
    """Runs programs on `chip` in `mode` ("functional" or "timing"), keeping graph state between
    them: `state` maps each state's name to its bytes as an array (functional mode), `layout` to
    its region in DDR."""

    def __init__(self, chip: Chip | str, mode: str = "functional", policy: Policy | None = None) -> None:
        if mode not in ("functional", "timing"):
            raise ProgramError(f"mode must be 'functional' or 'timing', got {mode!r}")
        self.chip, self.mode, self.policy = _chip(chip), mode, policy
        self.state: dict[str, ndarray] = {}
        self.layout: dict = {}  # state name -> its Region in DDR

    def lower(self, graph: Graph) -> Program:
        """The Program of a graph of static shapes (an imported ONNX model built for its shapes too)."""
        return isa.lower(graph, self.chip, self.policy)

    def run(self, graph: Graph, inputs: Mapping[str, ndarray] | None = None) -> Result:
        """Lower `graph` and execute it on the session's DDR."""
        return self.execute(self.lower(graph), inputs)

    def execute(self, program: Program, inputs: Mapping[str, ndarray] | None = None) -> Result:
        """Run `program` with the states' bytes where the last run left them; keep them after."""
        bound = [b for b in program.bindings if b.role == "state"]
        for b in bound:
            held = self.layout.get(b.name)
            if held is not None and held != b.region:
                raise InputError(f"state {b.name}: program {program.graph} binds it at {b.region.text()}, and the session holds "
                                 f"it at {held.text()}; the programs of a session declare the same states in the same order")
        result = execute(program, self.chip, inputs, self.mode, {b.name: self.state[b.name] for b in bound if b.name in self.state})
        self.layout.update((b.name, b.region) for b in bound)
        self.state.update(result.state)
        return result
