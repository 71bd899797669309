"""A float bias the matrix unit starts its products from (an Ascend cube's BiasTable).

Where the matrix engine names a bias memory (`matrix.bias` in the chip YAML), the matrix and
convolution templates load each output tile's bias row into it with the tile's first step,
converted to the accumulator's dtype by the last hop (MTE1's copy_cbuf_to_bt turns float16 into
float32), and the tile's first product starts from it (`Matmul.bias`): the epilogue then has no
bias to add, and is a cast that FixPipe does on the way out (isa/lower/templates/in_flight.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ...instructions import Dma, Region
from ..memory.route import copy, route
from ..schedule.tiling import nbytes, sub_region
from .staging import stages

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from chips.schema import Chip

    from ..context import Unit
    from ..emit import Buf, Emits


def bias_memory(unit: Unit, bias: tuple[Buf, str] | None, integer: bool) -> str | None:
    """The memory of unit's matrix engine a float bias goes to, or None (no bias, an integer
    op's, a unit without one)."""
    if bias is None or integer or unit.matrix is None or unit.matrix.matrix is None:
        return None
    return unit.matrix.matrix.bias


def needs(chip: Chip, home: Buf, dtype: str, acc_dtype: str, table: str, n: int) -> list[tuple[str, str, int]]:
    """(buffer key, memory, bytes) of a tile's bias row of n in `table`, and the stages of its
    way there from `home` (a Buf) in its own dtype."""
    out = [("bias", table, nbytes(acc_dtype, (n,)))]
    return out + [(f"bias.stage{k}", mem, nbytes(dtype, (n,))) for k, mem in enumerate(stages(chip, home.mem, table))]


def load(em: Emits, buf: Callable[[str], Buf], home: Buf, dtype: str, length: int, start: int, n: int, acc_dtype: str,
         core: int | None, op: str) -> None:
    """Emit the loads of elements start..start+n of the bias (a Buf of `length` in `dtype`)
    into buf("bias"), through buf("bias.stage<k>") (buf: a tile's Buf by its `needs` key)."""
    table = buf("bias")
    src = sub_region(home.region(dtype, (length,)), (start,), (n,))
    hops = route(em.chip, home.mem, table.mem, core)
    here, here_buf = src, home
    if len(hops) > 1:
        here_buf = buf(f"bias.stage{len(hops) - 2}")
        here = here_buf.region(dtype, (n,))
        copy(em, src, home, here, here_buf, op, stages=[buf(f"bias.stage{k}") for k in range(len(hops) - 2)])
    convert = ("copy", (), acc_dtype) if dtype != acc_dtype else ()
    em.emit(hops[-1][0], Dma(here, table.region(acc_dtype, (n,)), op, *convert), reads=(here_buf,), writes=(table,))


def row(table: Buf, shape: Sequence[int], dtype: str) -> Region:
    """The bias row in the Buf `table` read as a product's result of `shape`: its last
    dimension, repeated along the others."""
    return Region(table.mem, table.addr, dtype, tuple(shape), (0,) * (len(shape) - 1) + (1,))
