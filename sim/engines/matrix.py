"""The matrix unit: c = a @ b, or c += a @ b, starting from a bias where given (what it costs
is isa/timing/price.py's).

Floats multiply and accumulate in float32 (float64 when an operand is float64), a float32 sum
rounded once from float64 (isa/ops/matrix.py float_product, which the op's reference uses too).
Integers exactly (in int64, or uint64 for uint64 operands), saturated to the accumulator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from isa import dtypes
from isa.ops.matrix import float_product

if TYPE_CHECKING:
    from isa.instructions import Matmul
    from sim.memory import Memory

# Integer products numpy would multiply without BLAS: the operands' largest magnitudes, for
# those whose sums float64 holds exactly (below 2^53) at any K a tile has.
_SMALL_INTS = {"int8": 2**7, "uint8": 2**8 - 1, "int16": 2**15, "uint16": 2**16 - 1}


def execute(instr: Matmul, memories: dict[str, Memory]) -> None:
    M, K, N = instr.dims()
    wide = dtypes.np_dtype(dtypes.compute_dtype(instr.a.dtype, instr.b.dtype, instr.c.dtype))
    a = memories[instr.a.mem].view(instr.a).reshape(M, K)
    b = memories[instr.b.mem].view(instr.b).reshape(K, N)
    c = memories[instr.c.mem].view(instr.c)
    if (instr.a.dtype in _SMALL_INTS and instr.b.dtype in _SMALL_INTS
            and _SMALL_INTS[instr.a.dtype] * _SMALL_INTS[instr.b.dtype] * K < 2**53):
        # the same integers, summed exactly in float64 by BLAS (much faster than int64 matmul)
        product = (a.astype(np.float64) @ b.astype(np.float64)).astype(wide).reshape(c.shape)
    else:
        product = float_product(a, b, wide).reshape(c.shape)
    if instr.accumulate:
        product += c.astype(wide)
    if instr.bias is not None:
        product += memories[instr.bias.mem].view(instr.bias).astype(wide)
    c[...] = dtypes.convert(product, instr.c.dtype)
