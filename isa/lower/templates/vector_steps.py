"""Emitting an op's vector steps (isa.ops.elementwise.Step) for one tile: shared by the
element-wise template and the matrix template's epilogue."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ...instructions import Vector
from ...ops.elementwise import In, Tmp, computed, step_dtype

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ...instructions import Region
    from ...ops.elementwise import Step
    from ..emit import Buf, Emits

    Operand = tuple[Region, Buf]  # a tile's region and the buffer holding it


def emit_steps(em: Emits, engine: str, op: str, steps: Sequence[Step], inputs: Sequence[Operand], out: Operand,
               temps: Sequence[Operand], compute: Mapping[str, str] | None = None) -> None:
    """inputs, temps: (Region, Buf) per In(i) and Tmp(k), read at the tile's shape; out: the
    (Region, Buf) of the result; compute: the chip's compute map for the op's inputs."""
    for step in steps:
        srcs: list[Region | float] = []
        reads: list[Buf] = []
        operand_dtypes: list[str] = []
        for o in step.operands:
            if isinstance(o, In):
                region, buf = inputs[o.index]
                operand_dtypes.append(computed(region.dtype, compute))  # type: ignore[arg-type]  # isa/ops asks a dict; the map is read only
            elif isinstance(o, Tmp):
                region, buf = temps[o.index]
                operand_dtypes.append(region.dtype)
            else:
                srcs.append(o)
                continue
            srcs.append(region)
            reads.append(buf)
        dst, dst_buf = temps[step.dst.index] if isinstance(step.dst, Tmp) else out  # else OUT
        cdt = step_dtype(step, operand_dtypes)
        em.emit(engine, Vector(step.fn, dst, tuple(srcs), cdt, op), reads=reads, writes=(dst_buf,))

