"""Reading .npy and .npz files whose sizes are checked before anything is allocated.

numpy's own np.load allocates what a .npy header promises before it reads a byte, and reads a
.npz member whole: a header of shape [1e9, 1e9], or a small .npz that inflates to gigabytes,
exhausts the host. Here a header's shape is checked against a byte limit (isa/limits.py) first,
a member that is no .npy is refused unread, and the data must be as long as the header says.
Pickled (object) arrays are never read. Errors are InputErrors naming the file and member.
"""

from __future__ import annotations

import zipfile
from typing import IO, TYPE_CHECKING, Any

import numpy as np
from numpy.lib import format as npy

from . import dtypes, limits
from .errors import InputError, SimError

if TYPE_CHECKING:
    from pathlib import Path

    from numpy.typing import NDArray

NPY_HEADER_BYTES = 10_000  # numpy's own default bound on a .npy header


def read_npy(path: str | Path, limit: int | None = None, what: str = "the host-memory cap") -> NDArray[Any]:
    """The array saved in the .npy file at `path`, of at most `limit` bytes (by default the
    host-memory cap; `what` names the limit)."""
    try:
        with limits.open_input(path, regular=True) as f:
            return _array(f, str(path), limits.HOST_MEMORY if limit is None else limit, what)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None


def read_npz(path: str | Path, limit: int | None = None, what: str = "the host-memory cap") -> dict[str, NDArray[Any]]:
    """{name: array} of the .npz file at `path`: each array, and all of them together, at most
    `limit` bytes (by default the host-memory cap)."""
    cap = limits.HOST_MEMORY if limit is None else limit
    try:
        archive = zipfile.ZipFile(limits.open_input(path, regular=True))
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except (zipfile.BadZipFile, ValueError) as exc:
        with limits.open_input(path) as f:
            one_array = f.read(len(npy.MAGIC_PREFIX)) == npy.MAGIC_PREFIX
        hint = ": a .npy holds one array; save inputs with np.savez" if one_array else ""
        raise InputError(f"{path}: not an .npz (zip) file{hint} ({exc})") from None
    arrays: dict[str, NDArray[Any]] = {}
    total = 0
    with archive:
        for info in archive.infolist():
            name, is_npy, _ = info.filename.rpartition(".npy")
            where = f"{path}: member {info.filename!r}"
            if not is_npy or not name or info.is_dir():
                raise InputError(f"{where} is not a .npy array (an .npz holds only arrays, as np.savez writes them)")
            if name in arrays:
                raise InputError(f"{where} repeats the array {name!r}")
            try:
                with archive.open(info) as f:
                    arrays[name] = _array(f, where, cap - total, what)
            except (OSError, zipfile.BadZipFile, ValueError, EOFError, NotImplementedError, RuntimeError) as exc:  # zipfile's own errors
                raise InputError(f"{where}: cannot read ({exc})") from None
            total += arrays[name].nbytes
    return arrays


def _array(f: IO[bytes], where: str, limit: int, what: str) -> NDArray[Any]:
    """The array a .npy stream holds, its header and size checked before its data is read."""
    try:
        version = npy.read_magic(f)
        header = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}.get(version)
        if header is None:
            raise ValueError(f".npy format version {version} (this reads 1.0 and 2.0)")
        shape, fortran, dtype = header(f, max_header_size=NPY_HEADER_BYTES)
    except (ValueError, SyntaxError, TypeError, EOFError) as exc:
        raise InputError(f"{where}: not a .npy array ({exc})") from None
    try:
        name = dtypes.of_array(np.empty(0, dtype.newbyteorder("=")))
    except SimError:
        raise InputError(f"{where}: numpy dtype {dtype} is no npusim dtype (arrays of it are not read)") from None
    try:
        nbytes = limits.check_shape(shape, name, where, limit, what)
    except SimError as exc:
        raise InputError(str(exc)) from None
    flat = np.empty(nbytes // dtype.itemsize if dtype.itemsize else 0, dtype)
    got = f.readinto(flat.view(np.uint8)) if nbytes else 0  # type: ignore[attr-defined]  # a file or zip member: typeshed's IO lacks readinto
    if got != nbytes:
        raise InputError(f"{where}: holds {got} bytes of data where its header, {dtype}{list(shape)}, says {nbytes}")
    return flat.reshape(shape, order="F" if fortran else "C").astype(dtype.newbyteorder("="), copy=False)
