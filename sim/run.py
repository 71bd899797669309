"""sim.run = isa.lower + sim.execute; both return the machine's Result."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import chips
import isa
from isa.collect import paused
from isa.lower.policy import policy_from_overrides

from .bounds import check_chip
from .machine import Machine, Result

if TYPE_CHECKING:
    from numpy import ndarray

    from chips.schema import Chip
    from isa.graph import Graph
    from isa.lower.policy import Policy
    from isa.program import Program

POLICY_PREFIX = "policy."


def _chip(chip: Chip | str, overrides: dict[str, Any] | None = None) -> Chip:
    return chips.load(chip, overrides) if isinstance(chip, str) else chip


def configure(chip: str, point: Mapping[str, str]) -> tuple[Chip, Policy]:
    """(Chip, Policy) from overrides (`--set` pairs, a sweep's point): "policy." keys make the
    Policy, the others override the chip (a shipped chip's name or a YAML path).
    A policy value in brackets loses them ("[w1,w2]" -> "w1,w2", as policy_from_overrides reads
    lists); a chip value keeps them (a YAML flow list)."""
    policy = {k[len(POLICY_PREFIX):]: _unbracket(v) for k, v in point.items() if k.startswith(POLICY_PREFIX)}
    overrides = {k: v for k, v in point.items() if not k.startswith(POLICY_PREFIX)}
    return chips.load(chip, overrides), policy_from_overrides(policy)


def _unbracket(value: str) -> str:
    return value[1:-1] if value.startswith("[") and value.endswith("]") else value


def execute(program: Program, chip: Chip, inputs: Mapping[str, ndarray] | None = None, mode: str = "functional",
            state: Mapping[str, ndarray] | None = None) -> Result:
    """Run a lowered program on a chip (a Chip or a shipped chip's name); `state` gives graph
    state's bytes (zeros where not given; sim.Session keeps them between runs)."""
    chip = _chip(chip)
    check_chip(chip, program)  # before the machine checks the program's engines and memories against the chip
    with paused(kept=True):  # a run allocates many long-lived objects and frees none: collections find nothing
        return Machine(chip, program, mode).run(inputs, state)


def run(graph: Graph, chip: str | Chip, inputs: Mapping[str, ndarray] | None = None, mode: str = "functional",
        policy: Policy | None = None) -> Result:
    """Lower a graph for a chip and execute it: exact outputs, cycles, stats and a trace.
    A graph that specialises itself from its feeds (an imported ONNX model, isa.onnx.OnnxGraph)
    takes them by its model's input names and gives its outputs by its model's output names."""
    chip = _chip(chip)
    specialise = getattr(graph, "specialise", None)
    if specialise is None:
        return execute(isa.lower(graph, chip, policy), chip, inputs, mode)
    bound = specialise(inputs)
    result = execute(isa.lower(bound.graph, chip, policy), chip, bound.inputs, mode)
    return dataclasses.replace(result, outputs=bound.outputs(result.outputs))
