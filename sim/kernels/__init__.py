"""Scalar-engine kernels: what a general-purpose core runs for the global ops a tensor unit
cannot (sort, nms, where, ...), and how much work each is.

A kernel reads its source arrays (copied out of DDR by the scalar engine) and its arguments
and returns one array per destination. A destination whose first dimension the data decide
(where, masked_select, nms) may come back shorter than its region; the engine writes the
rows it got and the machine reports the shape. `work` gives the elements of work from the
shapes alone (worst case where the data would decide), so timing mode, which has no data,
prices a kernel exactly as functional mode does.

Each family registers its kernels from its own module in this package with
`@kernel(name, work)`; every module here is imported when the package is.
"""
from __future__ import annotations

import importlib
import pkgutil
import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from isa.errors import ProgramError
from isa.instructions import CUSTOM_PREFIX

if TYPE_CHECKING:
    from collections.abc import Callable


@dataclass(frozen=True)
class Kernel:
    run: Callable  # (arrays, args: dict) -> list of arrays, one per destination
    work: Callable | None = None  # (src shapes, dst shapes, args) -> elements of work
    cycles: Callable | None = None  # or, for a user's op, its own cost in cycles


KERNELS: dict[str, Kernel] = {}  # name -> Kernel


def kernel(name: str, work: Callable[..., float]) -> Callable[[Callable], Callable]:
    """Register the decorated function as kernel `name` whose work is `work(srcs, dsts, args)`."""
    def register(run: Callable) -> Callable:
        KERNELS[name] = Kernel(run, work)
        return run
    return register


def lookup(fn: str, where: str) -> Kernel:
    """The kernel an instruction names: a built-in one, or a user's op registered with
    isa.ops.register_custom (its compute function and its cost function)."""
    if fn.startswith(CUSTOM_PREFIX):
        from isa.ops.custom import CUSTOM

        custom = CUSTOM.get(fn[len(CUSTOM_PREFIX):])
        if custom is None:
            raise ProgramError(f"{where}: custom op {fn[len(CUSTOM_PREFIX):]!r} is not "
                               "registered in this process (isa.ops.register_custom)")
        return Kernel(custom.compute, cycles=custom.cost)
    if fn not in KERNELS:
        raise ProgramError(f"{where}: scalar kernel {fn!r} has no implementation (known: {', '.join(sorted(KERNELS))})")
    return KERNELS[fn]


for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
