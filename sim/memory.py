"""Byte-addressed memories: DDR and every on-chip memory are numpy byte arrays.

Only the part a program uses is backed (a 12 GiB DDR costs the bytes the program placed),
and every region an instruction names is checked against the memory's capacity once, when
the program is loaded, so the views made while it runs need no checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from isa import dtypes
from isa.errors import ProgramError

if TYPE_CHECKING:
    import chips.schema
    from isa.instructions import Region


class Memory:
    def __init__(self, spec: chips.schema.Memory, extent: int, functional: bool) -> None:
        if extent > spec.capacity:
            raise ProgramError(f"memory {spec.name}: the program uses {extent} bytes, capacity is {spec.capacity}")
        self.spec = spec
        self.data = np.zeros(extent, np.uint8) if functional else None

    def view(self, region: Region) -> np.ndarray:
        """A writable numpy view of a region (element strides become byte strides; a dimension of
        one element never steps, so its stride, however large, is 0 for numpy)."""
        dt = dtypes.np_dtype(region.dtype)
        strides = tuple(s * dt.itemsize if n > 1 else 0 for n, s in zip(region.shape, region.strides))
        return np.ndarray(region.shape, dt, buffer=self.data, offset=region.addr, strides=strides)

    def write(self, region: Region, array: np.ndarray) -> None:
        self.view(region)[...] = array

    def read(self, region: Region) -> np.ndarray:
        return self.view(region).copy()


def check_region(region: Region, memories: Mapping[str, chips.schema.Memory], where: str) -> int:
    """Raise if region names no memory of the chip or reaches outside it."""
    spec = memories.get(region.mem)
    if spec is None:
        raise ProgramError(f"{where}: unknown memory {region.mem!r} (chip has {', '.join(memories)})")
    lo, hi = region.span()
    if lo < 0:
        raise ProgramError(f"{where}: {region.text()} reaches below address 0 of {region.mem}")
    if hi > spec.capacity:
        raise ProgramError(f"{where}: {region.text()} reaches byte {hi} of {region.mem}, capacity {spec.capacity}")
    return hi
