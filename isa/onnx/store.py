"""Reading an ONNX model without holding its weights twice.

A model file is read as a protobuf whose large tensors keep their bytes where they are: each
`raw_data` field of 1 KiB or more inside the .onnx file is cut out of the message while it is
read (a walk over the protobuf wire format, model -> graph -> initializer / node -> attribute ->
tensor) and replaced by an external-data reference to the same bytes of the same file, so a
tensor inside the file and a tensor in an external data file are read the same way: once,
straight into the numpy array the graph keeps (`Weights`). Small tensors (shapes, scalars) stay
in the message, where ONNX shape inference reads their values.

Every reference is checked before a byte is read (`read_external`): the location must be a
relative path without NUL bytes resolving beneath the model's own folder (no `..`, absolute path
or link out of it), name a regular file, and the file must hold the tensor's bytes at the offset
(its length, when given, must be what the tensor's shape and type take).
"""
from __future__ import annotations

import math
import mmap
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import external_data_helper, helper, numpy_helper

from .. import limits
from ..errors import InputError, UnsupportedError

if TYPE_CHECKING:
    from typing import Any

    from numpy.typing import NDArray
    from onnx import NodeProto, TensorProto

INLINE_LIMIT = 1024  # bytes: raw data below this stays in the message (shapes, scalars)

# protobuf field numbers (onnx/onnx.proto) of the messages the walk enters: message -> {field: message}
_MESSAGES = {
    "model": {7: "graph"},
    "graph": {1: "node", 5: "tensor"},
    "node": {5: "attribute"},
    "attribute": {5: "tensor", 10: "tensor", 6: "graph", 11: "graph"},
    "tensor": {},
}
_RAW_DATA, _EXTERNAL_DATA, _DATA_LOCATION = 9, 13, 14


def read_model(path: Path) -> onnx.ModelProto:
    """The model at `path` (a resolved path), its large raw_data fields turned into references to
    their bytes in the file."""
    try:
        with open(path, "rb") as f:
            size = path.stat().st_size
            if size == 0:
                raise InputError(f"{path}: not an ONNX model (the file is empty)")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                stripped = _Walk(data, path.name).message(0, size, "model")
    except OSError as exc:
        raise InputError(f"{path}: cannot read an ONNX model ({exc.strerror or exc})") from None
    except _WireError as exc:
        raise InputError(f"{path}: not an ONNX model ({exc})") from None
    model = onnx.ModelProto()
    try:
        model.ParseFromString(stripped)
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError
        raise InputError(f"{path}: not an ONNX model ({type(exc).__name__}: {exc})") from None
    return model


class _WireError(Exception):
    pass


class _Walk:
    """Re-encodes a message, leaving out large raw_data fields (and recording where they are)."""

    def __init__(self, data: bytes | mmap.mmap, location: str) -> None:
        self.data = data
        self.location = location

    def varint(self, pos: int, end: int) -> tuple[int, int]:
        value, shift = 0, 0
        while True:
            if pos >= end:
                raise _WireError(f"truncated at byte {pos}")
            byte = self.data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value, pos
            shift += 7
            if shift > 63:
                raise _WireError(f"a varint longer than 10 bytes at byte {pos}")

    def message(self, start: int, end: int, kind: str) -> bytes:
        out, pos, cut = [], start, None
        while pos < end:
            tag_start = pos
            tag, pos = self.varint(pos, end)
            tag_end = pos
            field, wire = tag >> 3, tag & 7
            if wire == 0:
                _, pos = self.varint(pos, end)
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            elif wire == 2:
                length, body = self.varint(pos, end)
                pos = body + length
                if pos > end:
                    raise _WireError(f"a field of {length} bytes at byte {body} runs past the end of its message ({end})")
                inner = _MESSAGES[kind].get(field)
                if inner is not None:
                    encoded = self.message(body, pos, inner)
                    out.append(self.data[tag_start:tag_end] + _varint(len(encoded)) + encoded)
                    continue
                if kind == "tensor" and field == _RAW_DATA and length >= INLINE_LIMIT:
                    cut = (body, length)
                    continue
            else:
                raise _WireError(f"wire type {wire} at byte {tag_start} is not used by ONNX")
            if pos > end:
                raise _WireError(f"truncated at byte {end}")
            out.append(self.data[tag_start:pos])
        if cut is not None:
            out.append(_external_reference(self.location, *cut))
        return b"".join(out)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _external_reference(location: str, offset: int, length: int) -> bytes:
    """data_location = EXTERNAL and the external_data entries for bytes [offset, offset+length) of `location`."""
    entries = b"".join(_field(_EXTERNAL_DATA, _field(1, key.encode()) + _field(2, str(value).encode()))
                       for key, value in (("location", location), ("offset", offset), ("length", length)))
    return entries + _varint(_DATA_LOCATION << 3) + _varint(onnx.TensorProto.EXTERNAL)


# ---- tensors ---------------------------------------------------------------------------------------

PACKED: dict[int, int] = {onnx.TensorProto.INT4: 2, onnx.TensorProto.UINT4: 2}  # elements per byte
for _name, _per in (("FLOAT4E2M1", 2), ("INT2", 4), ("UINT2", 4)):
    if hasattr(onnx.TensorProto, _name):
        PACKED[getattr(onnx.TensorProto, _name)] = _per


def nbytes(tensor: TensorProto) -> int:
    """The bytes a tensor's raw data takes."""
    return raw_size(tensor.dims, tensor.data_type)


def raw_size(dims: Iterable[int], elem_type: int) -> int:
    """The bytes of raw data of a shape and an ONNX element type: the elements times the type's
    size (4- and 2-bit types packed two or four to a byte)."""
    count = math.prod(dims)
    if elem_type in PACKED:
        return -(-count // PACKED[elem_type])
    return count * np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).itemsize


def _describe(tensor: TensorProto, where: str) -> str:
    return f"{where}: tensor {tensor.name!r}"


def _check_type(tensor: TensorProto, where: str) -> None:
    if tensor.HasField("segment"):
        raise UnsupportedError(f"{_describe(tensor, where)} is a segment of a tensor; npusim reads whole tensors")
    if tensor.data_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED) or \
            tensor.data_type not in onnx.TensorProto.DataType.values():
        kind = onnx.TensorProto.DataType.Name(tensor.data_type) if tensor.data_type in onnx.TensorProto.DataType.values() \
            else str(tensor.data_type)
        raise UnsupportedError(f"{_describe(tensor, where)} has type {kind}, which has no npusim dtype")
    if any(d < 0 for d in tensor.dims):
        raise InputError(f"{_describe(tensor, where)} has a negative dimension in its shape {tuple(tensor.dims)}")


def _decode(raw: bytes | memoryview, tensor: TensorProto) -> NDArray[Any]:
    """The array of a tensor's raw bytes (little-endian, as ONNX stores them), read-only."""
    if tensor.data_type in PACKED:  # unpacked by onnx's own helper
        array = numpy_helper.to_array(helper.make_tensor(tensor.name, tensor.data_type, tensor.dims, bytes(raw), raw=True))
    else:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
        array = np.frombuffer(raw, dtype=dtype.newbyteorder("<") if dtype.byteorder == "=" else dtype).reshape(tuple(tensor.dims))
        if sys.byteorder == "big" and dtype.itemsize > 1:
            array = array.astype(dtype)
    array.flags.writeable = False
    return array


def to_array(tensor: TensorProto, folder: Path | None, where: str) -> np.ndarray:
    """A tensor's values as a read-only array: external data read from beneath `folder` (None for
    a model given in memory, which must hold its data), raw data checked for its length."""
    _check_type(tensor, where)
    if external_data_helper.uses_external_data(tensor):
        if folder is None:
            raise InputError(f"{_describe(tensor, where)} keeps its data in an external file; give the model's path so the data "
                             "can be read from beneath its folder")
        return read_external(tensor, folder, where)
    if tensor.HasField("raw_data"):
        want, raw = nbytes(tensor), tensor.raw_data  # read once: each read copies the bytes
        if len(raw) != want:
            raise InputError(f"{_describe(tensor, where)} has {len(raw)} bytes of raw data; its shape {tuple(tensor.dims)} "
                             f"of {onnx.TensorProto.DataType.Name(tensor.data_type)} takes {want}")
        return _decode(raw, tensor)
    try:
        array = numpy_helper.to_array(tensor)
    except (ValueError, TypeError) as exc:
        raise InputError(f"{_describe(tensor, where)}: its values do not fit its shape {tuple(tensor.dims)} ({exc})") from None
    array.flags.writeable = False
    return array


def constant_value(node: NodeProto, folder: Path | None, where: str) -> NDArray[Any] | None:
    """The value of a Constant node (any of its value attributes), or None for a string or
    sparse tensor, which npusim has not."""
    for a in node.attribute:
        if a.name == "value":
            return to_array(a.t, folder, where)
        scalar = {"value_float": (a.f, np.float32), "value_int": (a.i, np.int64)}.get(a.name)
        if scalar is None and a.name in ("value_floats", "value_ints"):
            scalar = (list(a.floats), np.float32) if a.name == "value_floats" else (list(a.ints), np.int64)
        if scalar is not None:
            array = np.array(scalar[0], scalar[1])
            array.flags.writeable = False
            return array
    return None


def external_info(tensor: TensorProto, folder: Path, where: str) -> tuple[Path, int, int]:
    """(the file, offset, bytes) of a tensor's external data, every field checked."""
    info = {e.key: e.value for e in tensor.external_data}
    location = info.get("location", "")
    label = _describe(tensor, where)
    if not location:
        raise InputError(f"{label} keeps its data externally but names no location")
    if "\0" in location:
        raise InputError(f"{label} keeps its data at {location!r}, a location holding a NUL byte")
    target = limits.beneath(folder, location)
    if target is None:
        raise InputError(f"{label} keeps its data at {location!r}, outside the model's folder {folder}; "
                         "external data is read only from beneath the model's own folder")
    if not target.exists():
        raise InputError(f"{label} keeps its data in {location!r}, which does not exist (looked for {target})")
    if not target.is_file():
        raise InputError(f"{label} keeps its data in {location!r}, which is not a file ({target} is a directory or a device)")
    fields = {}
    for key in ("offset", "length"):
        if key in info:
            try:
                fields[key] = int(info[key])
            except ValueError:
                raise InputError(f"{label}: external data {key} {info[key]!r} is not an integer") from None
            if fields[key] < 0:
                raise InputError(f"{label}: external data {key} is {fields[key]}, below 0")
    want = nbytes(tensor)
    if "length" in fields and fields["length"] != want:
        raise InputError(f"{label}: its external data is {fields['length']} bytes long; its shape {tuple(tensor.dims)} of "
                         f"{onnx.TensorProto.DataType.Name(tensor.data_type)} takes {want}")
    offset = fields.get("offset", 0)
    size = target.stat().st_size
    if offset + want > size:
        raise InputError(f"{label}: its external data needs bytes {offset}..{offset + want} of {location!r}, which holds {size}")
    return target, offset, want


def read_external(tensor: TensorProto, folder: Path, where: str) -> np.ndarray:
    target, offset, count = external_info(tensor, folder, where)
    try:
        raw = np.fromfile(target, dtype=np.uint8, count=count, offset=offset)
    except OSError as exc:
        raise InputError(f"{_describe(tensor, where)}: cannot read its external data from {target} ({exc})") from None
    if raw.size != count:
        raise InputError(f"{_describe(tensor, where)}: read {raw.size} bytes of its external data from {target}, expected {count}")
    return _decode(raw.data, tensor)


class Weights:
    """A model's constant tensors by ONNX name: read the first time they are asked for, then
    held once, as read-only arrays (a graph constant keeps the same array, not a copy).
    Arrays a pass computes (a folded weight) are held alongside."""

    def __init__(self, folder: Path | None, where: str) -> None:
        self.folder = folder  # the model's folder, None for a model given in memory
        self.where = where
        self._protos: dict[str, TensorProto] = {}  # name -> TensorProto not read yet
        self._arrays: dict[str, NDArray[Any]] = {}

    def add_proto(self, name: str, tensor: TensorProto) -> None:
        """Hold a tensor to read when first asked for; its type and shape are checked now, since
        `type` and `small` answer from them before any data is read."""
        _check_type(tensor, self.where)
        self._arrays.pop(name, None)
        self._protos[name] = tensor

    def __setitem__(self, name: str, array: NDArray[Any]) -> None:
        """Hold an array a pass computed (it becomes read-only)."""
        array = np.asarray(array)
        array.flags.writeable = False
        self._protos.pop(name, None)
        self._arrays[name] = array

    def __contains__(self, name: object) -> bool:
        return name in self._arrays or name in self._protos

    def __getitem__(self, name: str) -> NDArray[Any]:
        if name not in self._arrays:
            self._arrays[name] = to_array(self._protos.pop(name), self.folder, self.where)
        return self._arrays[name]

    def __delitem__(self, name: str) -> None:
        self._arrays.pop(name, None)
        self._protos.pop(name, None)

    def names(self) -> list[str]:
        return list(self._arrays) + list(self._protos)

    def type(self, name: str) -> tuple[tuple[int, ...], int]:
        """(shape, ONNX element type) without reading the data."""
        if name in self._arrays:
            a = self._arrays[name]
            return tuple(a.shape), helper.np_dtype_to_tensor_dtype(a.dtype)
        t = self._protos[name]
        return tuple(t.dims), t.data_type

    def small(self, name: str) -> bool:
        """Whether the tensor is small enough to give its values to shape inference."""
        return raw_size(*self.type(name)) < INLINE_LIMIT

    def proto(self, name: str) -> TensorProto:
        """The tensor as a TensorProto holding its values (for shape inference)."""
        if name in self._protos and not external_data_helper.uses_external_data(self._protos[name]):
            return self._protos[name]
        return numpy_helper.from_array(np.asarray(self[name]), name)
