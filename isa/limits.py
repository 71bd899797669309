"""The bounds npusim puts on what it reads, in one place (docs/security.md lists them).

No input is trusted: a chip or graph YAML, a `--set` value, program text, an `.npz` of inputs
or a saved trace may be written to exhaust memory or time. Each reader checks what it is given
against these bounds before it expands or allocates anything, and a value beyond one is a
SimError naming the limit and the value. The bounds sit far above what any real chip or model
needs, so they only ever stop input that would otherwise hang the run or fill the host.
"""
from __future__ import annotations

import fcntl
import math
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from . import dtypes
from .errors import OutOfMemoryError, ShapeError

if TYPE_CHECKING:
    from collections.abc import Sequence
    from io import BufferedReader

YAML_BYTES = 16 << 20  # a YAML file's size (some 40 s to read at most): larger data belongs in .npy files (a graph file's `file:`)
YAML_DEPTH = 40  # collections nested in a YAML document (a chip's deepest is 5; an inline 8-d constant is 12)
YAML_ALIAS_NODES = 100_000  # values an alias may repeat in one YAML document, counted as they expand
NUMBER_DIGITS = 40  # digits a written number has (mantissa and exponent); more is no measurement
NUMBER_EXPONENT = 30  # the decimal exponent a written number may carry: 1e30, 1e-30
QUANTITY_MAX = 10**18  # a chip quantity in its unit (bytes, Hz, cycles, bytes per cycle), and 1/QUANTITY_MAX the smallest
CORES = 1024  # cores of one chip
HOST_MEMORY = 8 << 30  # bytes the host gives the values of one run's tensors (a graph file's, an .npz's, a memory's)
INSTRUCTION_WORK = 1 << 28  # elements one instruction of a functional run computes over (a matmul: multiply-adds): 2 GiB in float64
RANK = 16  # dimensions of a tensor or a region
PROGRAM_BYTES = 1 << 30  # a program text file `npusim exec` reads: some ten million instructions, or 700 MB of constants


def check_shape(shape: Sequence[int], dtype: str, where: str, limit: int | None = None, what: str = "the host-memory cap") -> int:
    """The bytes of a tensor of `shape` and `dtype`, once its rank and size are known to be in
    bounds: at most RANK dimensions and `limit` bytes (by default the host's cap; a caller that
    knows the chip passes its memory's capacity and names it in `what`)."""
    if len(shape) > RANK:
        raise ShapeError(f"{where}: {len(shape)} dimensions, more than the limit of {RANK}")
    nbytes = math.prod(shape) * dtypes.itemsize(dtype)
    limit = HOST_MEMORY if limit is None else limit
    if nbytes > limit:
        raise OutOfMemoryError(f"{where}: {list(shape)} of {dtype} takes {nbytes} bytes, more than {what} ({limit} bytes)")
    return nbytes


def beneath(folder: Path, name: str) -> Path | None:
    """`folder / name` resolved, when it stays beneath `folder` (itself resolved): None for an
    empty or absolute name, one with a NUL, or one that `..` or a link takes out of it. Files a
    document names (a graph file's constants) are read only from beneath its own folder."""
    if not isinstance(name, str) or not name or "\0" in name or Path(name).is_absolute():
        return None
    try:
        target = (folder / name).resolve()
    except (OSError, RuntimeError):  # a loop of links
        return None
    return target if target.is_relative_to(folder) else None


def open_input(path: str | Path, regular: bool = False) -> BufferedReader:
    """`path` opened for reading in binary, without the wait for a writer that opening a FIFO
    makes (one with no writer then reads as empty); with `regular`, a FileNotFoundError-like
    OSError unless it is a regular file (a device or a FIFO named where a data file belongs).
    Raises OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if regular and not stat.S_ISREG(mode):
            raise OSError(0, "not a regular file")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
