"""Is every op of the graph supported by the chip, for its dtypes? (the seed's per-chip lines)"""
from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from ..errors import OutOfMemoryError, UnsupportedError
from ..instructions import Vector
from ..ops import REGISTRY
from ..timing.price import vector_dtype

if TYPE_CHECKING:
    from chips.schema import Chip, OpSupport

    from ..graph import Graph, Node
    from ..instructions import Instr


def support_row(chip: Chip, node: Node) -> OpSupport:
    """The chip's op-table row for node, or an error naming the op and the chip."""
    key = REGISTRY[node.op].support_key(node.params)
    row = chip.support(key)
    if row is None:
        raise UnsupportedError(f"op {node.name}: {key} is not supported on chip {chip.name}")
    return row


def engine_runs(chip: Chip, engine: str, instr: Instr) -> None:
    """A vector instruction the lowering emits is in a dtype the engine's vector unit has: a
    mode that computes in a dtype the chip's vectors lack (a TPU v1's float32) is refused by the
    op it serves, before anything is priced or run."""
    unit = chip.engines[engine].vector if isinstance(instr, Vector) else None
    if unit is None or not isinstance(instr, Vector):  # not a vector instruction, or an engine without a vector unit (the machine says so)
        return
    dtype = vector_dtype(instr)
    if dtype not in unit.per_lane:
        raise UnsupportedError(f"op {instr.op}: its {instr.fn} in {dtype} is not supported on chip {chip.name} "
                               f"(the vector unit of engine {engine} computes in {', '.join(unit.per_lane)})")


def _dtypes(graph: Graph, node: Node) -> tuple[list[str], str]:
    """(input dtypes, output dtype) the chip's table judges: the op's data operands only."""
    inputs = node.inputs[: REGISTRY[node.op].checked_inputs(node)]
    return [graph.tensors[t].dtype for t in inputs], graph.tensors[node.outputs[0]].dtype


def kind(graph: Graph, chip: Chip, node: Node) -> str:
    """"local" or "global": the chip's table may override the seed's class, for all dtypes or
    for some signatures (the seed's limited local ops, such as cast)."""
    row = support_row(chip, node)
    ins, out = _dtypes(graph, node)
    if any(sig.matches(ins, out) for sig in row.global_for):
        return "global"
    return row.kind or REGISTRY[node.op].kind


def allows(row: OpSupport | None, ins: list[str], out: str) -> bool:
    """Whether an op-table row accepts these input dtypes and this result dtype."""
    if row is None:
        return False
    if len(set(ins + [out])) == 1:
        if row.dtypes is None or out in row.dtypes:
            return True
    elif _within(ins, row.mixed_in) and _within([out], row.mixed_out):
        return True
    return any(sig.matches(ins, out) for sig in row.signatures)


def check_graph(graph: Graph, chip: Chip) -> None:
    for node in graph.nodes:
        if not REGISTRY[node.op].table:
            continue
        key = REGISTRY[node.op].support_key(node.params)
        row = chip.support(key)
        ins, out = _dtypes(graph, node)
        if not allows(row, ins, out):
            what = describe(row) if row else f"the chip has no {key}; `npusim ops --chip {chip.name}` lists what it has"
            given = f"{' x '.join(ins)} -> {out}" if ins else f"no input -> {out}"
            raise UnsupportedError(f"op {node.name}: {key} with {given} is not supported on chip {chip.name} ({what})")


def check_sizes(graph: Graph, chip: Chip) -> None:
    """Every tensor of the graph fits the chip's largest memory: checked before any group is
    formed, since the lowering's searches and slicing take time that grows with the extents
    (an intermediate of 2**63 rows, made by a huge pad, would never be sliced)."""
    mem = max(chip.memories.values(), key=lambda m: m.capacity)
    for t in graph.tensors.values():
        if t.nbytes > mem.capacity:
            what = "input" if t.name in graph.inputs else "constant" if t.name in graph.constants else "tensor"
            made = f" (made by op {graph.producer[t.name].name})" if t.name in graph.producer else ""
            raise OutOfMemoryError(f"{what} {t.name}{made}: {list(t.shape)} of {t.dtype} takes {t.nbytes} bytes, more than "
                                   f"chip {chip.name}'s largest memory ({mem.name} capacity {mem.capacity} bytes)")


def describe(row: OpSupport) -> str:
    """What an op-table row allows, in words."""
    parts = [f"same-dtype: {'any dtype' if row.dtypes is None else ', '.join(sorted(row.dtypes)) or 'none'}"]
    if row.mixed_in:
        parts.append(f"mixed: inputs {', '.join(sorted(row.mixed_in))} -> outputs {', '.join(sorted(row.mixed_out or ()))}")
    elif row.mixed_in is not None:
        parts.append("no mixed dtypes")
    parts += [
        "signature: " + ", ".join("|".join(sorted(s)) for s in sig.inputs) + " -> " + "|".join(sorted(sig.output))
        for sig in row.signatures
    ]
    return "; ".join(parts)


def _within(values: Sequence[str], allowed: Collection[str] | None) -> bool:
    return allowed is None or all(v in allowed for v in values)
