"""Emitting an op's vector steps (isa.ops.elementwise.Step) for one tile: shared by the
element-wise template and the matrix template's epilogue."""

from ...instructions import Vector
from ...ops.elementwise import OUT, In, Tmp, computed, step_dtype


def emit_steps(em, engine, op, steps, inputs, out, temps, compute=None) -> None:
    """inputs, temps: (Region, Buf) per In(i) and Tmp(k), read at the tile's shape; out: the
    (Region, Buf) of the result; compute: the chip's compute map for the op's inputs."""
    for step in steps:
        srcs, reads, operand_dtypes = [], [], []
        for o in step.operands:
            if isinstance(o, In):
                region, buf = inputs[o.index]
                operand_dtypes.append(computed(region.dtype, compute))
            elif isinstance(o, Tmp):
                region, buf = temps[o.index]
                operand_dtypes.append(region.dtype)
            else:
                srcs.append(o)
                continue
            srcs.append(region)
            reads.append(buf)
        dst, dst_buf = out if step.dst == OUT else temps[step.dst.index]
        cdt = step_dtype(step, operand_dtypes)
        em.emit(engine, Vector(step.fn, dst, tuple(srcs), cdt, op), reads=reads, writes=(dst_buf,))

