"""The machine instructions and their one-line text form.

An instruction is a small frozen dataclass. Operands in memory are `Region`s: an N-d strided
view (shape and element strides, a zero stride repeats data, which is how broadcasting is
expressed) of one memory starting at a byte address. Each opcode's meaning:

- `dma`     copy `src` to `dst` element by element (same shape; the dtypes may differ only
            when both are the same width, as a reinterpretation is never what is meant). A
            converting DMA (`fn` set, on an engine that `converts` it, as an Ascend FixPipe
            quantizes, casts and rectifies what leaves L0C) stores fn(src, *args) instead, as
            the vector function of that name computes it in `cdt`: the dtypes may then differ.
- `vector`  dst = fn(*srcs) element-wise: every region source has dst's shape (zero strides
            broadcast), scalars are numbers. Sources are converted to `cdt` (the compute
            dtype), `fn` is applied, and the result is stored into dst's dtype with
            saturation for integers (see isa.dtypes.convert).
- `matmul`  c = a @ b, or c += a @ b when `accumulate`, on N-d regions read as matrices: the
            first `m` dimensions of a and of c are M, the rest of a is K, the rest of c is N,
            and b is K x N (its shape is a's K dimensions then c's N dimensions). So a
            convolution's input patches are a strided view of the input (implicit im2col).
            Floats accumulate in float32 (float64 operands in float64), integers exactly in int32.
            With `bias` (a region of c's shape, zero strides repeating one row: an Ascend
            cube's BiasTable) the product starts from it. A `conv` product is a convolution's
            (a is the window view of its input): a chip may price it at a rate of its own, as
            Sophgo's TIU runs convolutions and matrix products as different instructions
            (chips MatrixUnit.conv_block_cycles).
- `gather`  dst[p, i, q] = table[p, index[p, i, 0..k-1], q]: a DMA whose source rows come from
            indices read from memory (see `IndexedDma`); `scatter` writes rows the same way.
- `scalar`  run a kernel (sort, nms, where, ...) on a general-purpose core: `dsts` =
            kernel(`srcs`, `args`), operands in DDR. A kernel may produce fewer rows than its
            destination holds when the data decide how many (where, nms).
- `wait`    block this engine until every named instruction ("engine.index") has finished.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from . import dtypes, limits, vector_fns
from .errors import ProgramError, SimError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

# Vector functions (isa/vector_fns.py, one table): name -> number of operands (regions or numbers).
VECTOR_FNS = {name: fn.arity for name, fn in vector_fns.FNS.items()}
REDUCTIONS = vector_fns.having(vector_fns.REDUCE)


@dataclass(frozen=True)
class KernelSpec:
    """What a scalar kernel takes: the numbers of sources it may read, the destinations it
    writes, the arguments it needs (name -> kind, as _check_arg reads them), those it may take,
    and those it needs when it reads no sources (a Fill's two parameters, as numbers, or else
    as tensors)."""

    srcs: tuple[int, ...]
    dsts: int
    args: Mapping[str, str] = field(default_factory=dict)
    optional: Mapping[str, str] = field(default_factory=dict)
    sourceless: Mapping[str, str] = field(default_factory=dict)


_SORT_ARGS = {"axis": "axis", "stable": "flag", "descending": "flag"}
# Scalar-engine kernels (sim/kernels/ gives them their meaning and their work); a chip's
# `op_cycles` may price each one. "custom.<name>" runs a user-registered op (isa.ops.custom).
SCALAR_KERNELS = {
    "arg": KernelSpec((1,), 1, {"axis": "axis", "method": "max|min"}),
    "topk": KernelSpec((1,), 2, {"axis": "axis", "k": "k", "descending": "flag"}),
    "sort": KernelSpec((1,), 2, _SORT_ARGS),
    "argsort": KernelSpec((1,), 1, _SORT_ARGS),
    "masked_select": KernelSpec((2,), 1),
    "index_select": KernelSpec((2,), 1, {"dim": "axis"}),
    "where": KernelSpec((1,), 1),
    "nms": KernelSpec((2,), 1, {"iou_threshold": "number", "max_output_size": "count", "stable": "flag"}, {"score_threshold": "number"}),
    "sequence": KernelSpec((1,), 1),
    "linspace": KernelSpec((0, 2), 1, {"shape": "shape"}, {}, {"alpha": "number", "beta": "numbers"}),
    "random_uniform": KernelSpec((0, 2), 1, {"shape": "shape", "seed": "seed"}, {}, {"low": "number", "high": "number"}),
    "random_normal": KernelSpec((0, 2), 1, {"shape": "shape", "seed": "seed"}, {}, {"mean": "number", "scale": "number"}),
    "non_max_suppression": KernelSpec((2,), 1, {"max_output_boxes_per_class": "count", "iou_threshold": "number",
                                                "center_point_box": "flag"}, {"score_threshold": "number"}),
}
SCALAR_FNS = tuple(SCALAR_KERNELS)
CUSTOM_PREFIX = "custom."
# Operands read whole rather than element-wise: fn -> operand positions.
TABLE_OPERANDS = dict.fromkeys(vector_fns.having(vector_fns.TABLE), (1,))
# The functions a converting DMA may apply on the way: element-wise ones of one element each.
STREAM_FNS = tuple(fn for fn in VECTOR_FNS if fn not in REDUCTIONS and fn not in TABLE_OPERANDS)


ScalarArg = int | float | str | tuple[int | float, ...]  # a scalar kernel's argument value


class Region(NamedTuple):
    mem: str
    addr: int  # byte address of element [0, ..., 0]
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements; 0 repeats

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """Bytes of the elements addressed (repeats counted once per element)."""
        return self.size * dtypes.itemsize(self.dtype)

    def span(self) -> tuple[int, int]:
        """(first, last + 1) byte touched; negative strides walk backwards from addr."""
        _, addr, dtype, shape, strides = self
        low = high = 0
        for d, s in zip(shape, strides):
            if d == 0:
                return addr, addr
            if s > 0:
                high += (d - 1) * s
            elif s < 0:
                low += (d - 1) * s
        item = dtypes.itemsize(dtype)
        return addr + low * item, addr + (high + 1) * item

    def text(self) -> str:
        shape = ",".join(map(str, self.shape))
        strides = ",".join(map(str, self.strides))
        return f"{self.mem}@{self.addr:#x}:{self.dtype}[{shape};{strides}]"


def dense(mem: str, addr: int, dtype: str, shape: tuple[int, ...]) -> Region:
    """A row-major region."""
    shape = tuple(shape)
    if len(shape) == 2:  # the most asked for (a tile): its strides without the loop
        strides: tuple[int, ...] = (shape[1], 1)
    else:
        row, step = [1] * len(shape), 1
        for k in range(len(shape) - 1, 0, -1):
            step *= shape[k]
            row[k - 1] = step
        strides = tuple(row)
    return tuple.__new__(Region, (mem, addr, dtype, shape, strides))


Operand = Region | int | float  # a vector function's operand: a region or a number


@dataclass(frozen=True)
class Dma:
    src: Region
    dst: Region
    op: str = ""
    fn: str = ""  # a converting DMA's vector function (the module docstring); "" copies
    args: tuple[int | float, ...] = ()  # its numbers after the source
    cdt: str = ""  # its compute dtype
    kind = "dma"


@dataclass(frozen=True)
class Vector:
    fn: str
    dst: Region
    srcs: tuple[Operand, ...]  # Region or number
    cdt: str
    op: str = ""
    kind = "vector"


@dataclass(frozen=True)
class Matmul:
    a: Region
    b: Region
    c: Region
    accumulate: bool
    op: str = ""
    m: int = 1  # leading dimensions of a and c that make M
    bias: Region | None = None  # added to the product (the module docstring)
    conv: bool = False  # a convolution's product (the module docstring)
    kind = "matrix"

    def dims(self) -> tuple[int, int, int]:
        """(M, K, N)."""
        m, k, n = 1, 1, 1
        for d in self.a.shape[: self.m]:
            m *= d
        for d in self.a.shape[self.m:]:
            k *= d
        for d in self.c.shape[self.m:]:
            n *= d
        return m, k, n


@dataclass(frozen=True)
class IndexedDma:
    """A gather or scatter: rows addressed by indices the DMA engine reads from memory.

    `index` has shape P + (n, k): for each of n rows, k indices into the k dimensions of
    `table` after the prefix P. `table` has shape P + (k indexed dims) + Q and `rows` has shape
    P + (n,) + Q. A gather copies table rows to `rows`; a scatter copies `rows` into the table.
    With `wrap`, a negative index counts from the end of its dimension; an index out of range is
    an error at run time (the engine faults), naming the op, the position and the value.
    """

    table: Region
    index: Region
    rows: Region
    scatter: bool
    wrap: bool = False
    op: str = ""
    kind = "dma"

    @property
    def src(self) -> Region:
        return self.rows if self.scatter else self.table

    @property
    def dst(self) -> Region:
        return self.table if self.scatter else self.rows


@dataclass(frozen=True)
class Scalar:
    fn: str  # a SCALAR_FNS kernel, or CUSTOM_PREFIX + a registered custom op's name
    dsts: tuple[Region, ...]  # Regions written
    srcs: tuple[Region, ...]  # Regions read
    args: tuple[tuple[str, ScalarArg], ...] = ()  # (name, value) pairs: int, float, str (no spaces) or a tuple of numbers
    op: str = ""
    kind = "scalar"


@dataclass(frozen=True)
class Wait:
    on: tuple[str, ...]  # instruction ids "engine.index"
    op: str = ""
    kind = "wait"


Instr = Dma | IndexedDma | Vector | Matmul | Scalar | Wait  # one instruction of an engine's stream


def regions(instr: Instr) -> tuple[tuple[Region, ...], tuple[Region, ...]]:
    """(read regions, written regions) of an instruction."""
    if isinstance(instr, Dma):
        return (instr.src,), (instr.dst,)
    if isinstance(instr, IndexedDma):
        return (instr.src, instr.index), (instr.dst,)
    if isinstance(instr, Vector):
        return tuple(s for s in instr.srcs if isinstance(s, Region)), (instr.dst,)
    if isinstance(instr, Matmul):
        reads = (instr.a, instr.b) + ((instr.c,) if instr.accumulate else ()) + ((instr.bias,) if instr.bias else ())
        return reads, (instr.c,)
    if isinstance(instr, Scalar):
        return instr.srcs, instr.dsts
    return (), ()


# ---- text form ------------------------------------------------------------------------------

def instr_text(ident: str, instr: Instr) -> str:
    """One line: `<engine>.<index> <opcode> key=value ...`."""
    if isinstance(instr, Dma):
        body = f"dma src={instr.src.text()} dst={instr.dst.text()}"
        if instr.fn:
            body += f" fn={instr.fn} cdt={instr.cdt}" + (f" args={','.join(map(repr, instr.args))}" if instr.args else "")
    elif isinstance(instr, Vector):
        srcs = ",".join(s.text() if isinstance(s, Region) else repr(s) for s in instr.srcs)
        body = f"vector fn={instr.fn} cdt={instr.cdt} dst={instr.dst.text()} src={srcs}"
    elif isinstance(instr, Matmul):
        body = f"matmul a={instr.a.text()} b={instr.b.text()} c={instr.c.text()} acc={int(instr.accumulate)}"
        body += f" m={instr.m}" if instr.m != 1 else ""
        body += f" bias={instr.bias.text()}" if instr.bias else ""
        body += " conv=1" if instr.conv else ""
    elif isinstance(instr, IndexedDma):
        body = f"{'scatter' if instr.scatter else 'gather'} table={instr.table.text()} index={instr.index.text()} rows={instr.rows.text()}"
        body += " wrap=1" if instr.wrap else ""
    elif isinstance(instr, Scalar):
        body = f"scalar fn={instr.fn} dst={','.join(r.text() for r in instr.dsts)} src={','.join(r.text() for r in instr.srcs)}"
        body += " args=" + ";".join(f"{k}:{_arg_text(v)}" for k, v in instr.args) if instr.args else ""
    else:
        body = "wait on=" + ",".join(instr.on)
    return f"{ident} {body} op={instr.op}" if instr.op else f"{ident} {body}"


def _arg_text(value: ScalarArg) -> str:
    if isinstance(value, tuple):
        return "[" + "|".join(map(repr, value)) + "]"
    return value if isinstance(value, str) else repr(value)


def _parse_arg(text: str, where: str) -> ScalarArg:
    """A scalar kernel's argument: a list of numbers [a|b|...], a number, or else a word (a
    region is no argument: kernels read regions as their sources)."""
    if text.startswith("[") and text.endswith("]"):
        return tuple(_parse_number(v, where) for v in text[1:-1].split("|") if v)
    try:
        return _parse_number(text, where)
    except ProgramError:
        return text


_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")  # a memory or engine: "lmem", "c3.l1"


def parse_name(text: str, what: str, where: str) -> str:
    """`text`, once it is a name such as a chip YAML gives memories and engines (a core's copy:
    "c3.l1")."""
    if not _NAME.fullmatch(text):
        raise ProgramError(f"{where}: bad {what} {text[:40]!r} (letters, digits, '_', '-' and '.', starting with a letter)")
    return text


def parse_int(text: str, what: str, where: str, low: int | None = None, high: float = limits.QUANTITY_MAX) -> int:
    """The integer `text` writes (decimal, or 0x.. as addresses are), within [low, high]."""
    try:
        value = int(text, 0) if len(text) <= limits.NUMBER_DIGITS else None
    except ValueError:
        value = None
    if value is None or (low is not None and value < low) or abs(value) > high:
        bounds = f"an integer in [{low}, {high}]" if low is not None else f"an integer of magnitude at most {high}"
        raise ProgramError(f"{where}: bad {what} {text[:40]!r}: expected {bounds}")
    return value


def parse_id(text: str, where: str) -> tuple[str, int]:
    """(engine, index) of an instruction id "engine.index" ("c3.cube.12": core 3's cube)."""
    engine, dot, index = text.rpartition(".")
    if not dot:
        raise ProgramError(f"{where}: bad instruction id {text[:40]!r}: expected engine.index, such as tiu.3")
    return parse_name(engine, "engine of instruction id", where), parse_int(index, f"index of instruction id {text[:40]!r}", where, 0)


def parse_region(text: str, where: str) -> Region:
    try:
        head, rest = text.split(":", 1)
        mem, addr = head.split("@")
        dtype, dims = rest.split("[")
        if not dims.endswith("]"):
            raise ValueError("no closing ]")
        shape, strides = dims[:-1].split(";")
    except ValueError as exc:
        raise ProgramError(f"{where}: bad region {text[:80]!r} ({exc}); expected mem@addr:dtype[shape;strides]") from None
    try:
        dtype = dtypes.check(dtype, f"region {text[:80]!r}")
    except SimError as exc:
        raise ProgramError(f"{where}: {exc}") from None
    ints = lambda s, what, low: tuple(parse_int(v, what, where, low) for v in s.split(",")) if s else ()  # noqa: E731
    region = Region(parse_name(mem, "memory", where), parse_int(addr, "address", where, 0), dtype,
                    ints(shape, "dimension", 0), ints(strides, "stride", None))
    if len(region.shape) != len(region.strides):
        raise ProgramError(f"{where}: region {text!r} has {len(region.shape)} dims but {len(region.strides)} strides")
    if len(region.shape) > limits.RANK:
        raise ProgramError(f"{where}: region {text[:80]!r} has {len(region.shape)} dimensions, more than the limit of {limits.RANK}")
    return region


def _parse_operand(text: str, where: str) -> Operand:
    """A region, or a number (_parse_number)."""
    if "@" in text:
        return parse_region(text, where)
    return _parse_number(text, where)


def _parse_number(text: str, where: str) -> int | float:
    """An integer within 64 bits (signed or not), or a float."""
    try:
        return parse_int(text, "number", where, -(2**63), 2**64 - 1)
    except ProgramError:
        try:
            return float(text)
        except ValueError:
            raise ProgramError(f"{where}: bad operand {text[:40]!r}") from None


def _split_operands(text: str) -> list[str]:
    """Split `a,b` at top-level commas (regions contain commas inside brackets)."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return parts + [cur] if cur else parts


def parse_instr(fields: list[str], where: str) -> Instr:
    """Parse the words after the instruction id, and check what it reads and writes (check)."""
    opcode, args = fields[0], {}
    for word in fields[1:]:
        key, sep, value = word.partition("=")
        if not sep:
            raise ProgramError(f"{where}: expected key=value, got {word[:40]!r}")
        if key in args:
            raise ProgramError(f"{where}: field {key}= given twice")
        args[key] = value
    if opcode not in _PARSERS:
        raise ProgramError(f"{where}: unknown opcode {opcode[:40]!r} (known: {', '.join(_PARSERS)})")
    op = args.pop("op", "")
    try:
        instr = _PARSERS[opcode](args, op, where)
    except KeyError as exc:
        raise ProgramError(f"{where}: {opcode} needs {exc.args[0]}=") from None
    if args:
        raise ProgramError(f"{where}: unknown field(s) {', '.join(sorted(args))} for {opcode}")
    check(instr, where)
    return instr


def _flag(args: dict[str, str], key: str, where: str) -> bool:
    value = args.pop(key, "0")
    if value not in ("0", "1"):
        raise ProgramError(f"{where}: {key}= is 0 or 1, got {value[:40]!r}")
    return value == "1"


def _parse_vector(args: dict[str, str], op: str, where: str) -> Vector:
    fn = args.pop("fn")
    if fn not in VECTOR_FNS:
        raise ProgramError(f"{where}: unknown vector function {fn[:40]!r}")
    srcs = tuple(_parse_operand(s, where) for s in _split_operands(args.pop("src")))
    if len(srcs) != VECTOR_FNS[fn]:
        raise ProgramError(f"{where}: vector {fn} takes {VECTOR_FNS[fn]} operand(s), got {len(srcs)}")
    return Vector(fn, parse_region(args.pop("dst"), where), srcs, _dtype(args.pop("cdt"), where), op)


def _dtype(text: str, where: str) -> str:
    try:
        return dtypes.check(text, f"{where}: compute dtype")
    except SimError as exc:
        raise ProgramError(str(exc)) from None


def _parse_scalar(args: dict[str, str], op: str, where: str) -> Scalar:
    fn = args.pop("fn")
    if fn not in SCALAR_FNS and not fn.startswith(CUSTOM_PREFIX):
        raise ProgramError(f"{where}: unknown scalar kernel {fn[:40]!r}")
    regions_of = lambda text: tuple(parse_region(r, where) for r in _split_operands(text))  # noqa: E731
    items = [item.partition(":") for item in args.pop("args", "").split(";") if item]
    if any(not sep or not key for key, sep, _ in items) or len({key for key, _, _ in items}) != len(items):
        raise ProgramError(f"{where}: a scalar kernel's args= are distinct name:value pairs joined by ';'")
    return Scalar(fn, regions_of(args.pop("dst")), regions_of(args.pop("src")), tuple((k, _parse_arg(v, where)) for k, _, v in items), op)


def _parse_dma(args: dict[str, str], op: str, where: str) -> Dma:
    src, dst = parse_region(args.pop("src"), where), parse_region(args.pop("dst"), where)
    fn = args.pop("fn", "")
    if not fn:
        return Dma(src, dst, op)
    if fn not in STREAM_FNS:
        raise ProgramError(f"{where}: a dma converts with an element-wise function ({', '.join(STREAM_FNS)}), not {fn[:40]!r}")
    operands = tuple(_parse_operand(a, where) for a in _split_operands(args.pop("args", "")))
    numbers = tuple(n for n in operands if not isinstance(n, Region))
    if len(numbers) != len(operands):
        raise ProgramError(f"{where}: a converting dma's args are numbers (its only region is its source)")
    return Dma(src, dst, op, fn, numbers, _dtype(args.pop("cdt"), where))


def _parse_indexed(scatter: bool) -> Callable[[dict[str, str], str, str], IndexedDma]:
    def parse(args: dict[str, str], op: str, where: str) -> IndexedDma:
        table, index, rows = (parse_region(args.pop(k), where) for k in ("table", "index", "rows"))
        return IndexedDma(table, index, rows, scatter, _flag(args, "wrap", where), op)
    return parse


def _parse_matmul(args: dict[str, str], op: str, where: str) -> Matmul:
    a, b, c = (parse_region(args.pop(k), where) for k in "abc")
    accumulate = args.pop("acc")
    if accumulate not in ("0", "1"):
        raise ProgramError(f"{where}: acc= is 0 or 1, got {accumulate[:40]!r}")
    m = parse_int(args.pop("m", "1"), "m (leading dimensions of M)", where, 1, max(1, min(len(a.shape), len(c.shape))))
    bias = parse_region(args.pop("bias"), where) if "bias" in args else None
    return Matmul(a, b, c, accumulate == "1", op, m, bias, _flag(args, "conv", where))


def _parse_wait(args: dict[str, str], op: str, where: str) -> Wait:
    on = args.pop("on")
    ids = on.split(",")
    for ident in ids:
        parse_id(ident, where)
    return Wait(tuple(ids), op)


_PARSERS: dict[str, Callable[[dict[str, str], str, str], Instr]] = {
    "dma": _parse_dma,
    "gather": _parse_indexed(False),
    "scatter": _parse_indexed(True),
    "scalar": _parse_scalar,
    "vector": _parse_vector,
    "matmul": _parse_matmul,
    "wait": _parse_wait,
}


# ---- what an instruction's operands may be --------------------------------------------------

def check(instr: Instr, where: str) -> None:
    """Raise a ProgramError unless the instruction's dtypes and operands are ones its unit
    computes with: a matmul multiplies floats by floats or integers by integers, a vector
    function's numbers fit its compute dtype, a LUT has a table of 256 entries, a scalar kernel
    gets the sources, destinations and arguments it reads. Shapes against one another are
    checked by the machine when it loads the program."""
    if isinstance(instr, Matmul):
        kinds = {_kind(r.dtype) for r in (instr.a, instr.b)}
        if len(kinds) != 1 or "bool" in kinds:
            raise ProgramError(f"{where}: matmul of {instr.a.dtype} by {instr.b.dtype}: the unit multiplies floats by floats or "
                               "integers by integers")
    elif isinstance(instr, Vector):
        _check_fn(instr.fn, instr.srcs, instr.cdt, where)
    elif isinstance(instr, Dma) and instr.fn:
        _check_fn(instr.fn, (instr.src,) + instr.args, instr.cdt, where)
    elif isinstance(instr, Scalar) and not instr.fn.startswith(CUSTOM_PREFIX):
        _check_kernel(instr, SCALAR_KERNELS[instr.fn], where)


def _kind(dtype: str) -> str:
    return "float" if dtypes.is_float(dtype) else "int" if dtypes.is_int(dtype) else dtype


_INTEGER_FNS = vector_fns.having(vector_fns.INTEGER)
_BOOL_CANNOT = vector_fns.having(vector_fns.NO_BOOL)
_MODE_FNS = vector_fns.having(vector_fns.MODE)


def _check_fn(fn: str, operands: Sequence[Operand], cdt: str, where: str) -> None:
    if (fn in _INTEGER_FNS and _kind(cdt) == "float") or (cdt == "bool" and fn in _BOOL_CANNOT):
        raise ProgramError(f"{where}: {fn} does not compute in {cdt}")
    if fn in REDUCTIONS and not isinstance(operands[0], Region):
        raise ProgramError(f"{where}: {fn} reduces a region, not the number {operands[0]!r}")
    if fn in _MODE_FNS and operands[-1] not in dtypes.ROUNDING.values():
        raise ProgramError(f"{where}: {fn}'s last operand is a rounding mode ({', '.join(map(str, dtypes.ROUNDING.values()))}), "
                           f"got {operands[-1]!r}")
    for i in TABLE_OPERANDS.get(fn, ()):
        table = operands[i]
        if not isinstance(table, Region) or table.size < 256:
            got = f"{table.size} entries" if isinstance(table, Region) else repr(table)
            raise ProgramError(f"{where}: {fn}'s table is a region of 256 entries (one per value of a byte), got {got}")
    for value in operands:
        if isinstance(value, (int, float)) and not _fits(value, cdt):
            raise ProgramError(f"{where}: the number {value!r} does not fit {fn}'s compute dtype {cdt}")


def _fits(value: float, cdt: str) -> bool:
    """Whether a number operand is one of cdt's values (an integer in range for an integer dtype)."""
    if dtypes.is_int(cdt) or cdt == "bool":
        lo, hi = (0, 1) if cdt == "bool" else dtypes.int_range(cdt)
        return float(value).is_integer() and lo <= value <= hi
    return True  # a float compute dtype rounds a number as it rounds the regions' values


def _check_kernel(instr: Scalar, spec: KernelSpec, where: str) -> None:
    fn, srcs, args = instr.fn, instr.srcs, dict(instr.args)
    if len(srcs) not in spec.srcs or len(instr.dsts) != spec.dsts:
        want = " or ".join(map(str, spec.srcs))
        raise ProgramError(f"{where}: kernel {fn} reads {want} source(s) and writes {spec.dsts} destination(s), "
                           f"got {len(srcs)} and {len(instr.dsts)}")
    empty = next((r for r in srcs if r.size == 0), None)
    if empty is not None:
        raise ProgramError(f"{where}: kernel {fn} reads the empty region {empty.text()}")
    needed = {**spec.args, **(spec.sourceless if not srcs else {})}
    known = {**needed, **spec.optional, **spec.sourceless}
    missing = [k for k in needed if k not in args]
    unknown = [k for k in args if k not in known]
    if missing or unknown:
        raise ProgramError(f"{where}: kernel {fn} takes the args {', '.join(known) or 'none'} ({', '.join(needed) or 'none'} needed); "
                           f"missing {', '.join(missing) or 'none'}, unknown {', '.join(unknown) or 'none'}")
    for key, value in args.items():
        _check_arg(instr, key, value, known[key], where)


def _check_arg(instr: Scalar, key: str, value: ScalarArg, kind: str, where: str) -> None:
    """One kernel argument against its kind."""
    rank = len(instr.srcs[0].shape) if instr.srcs else 0
    whole = value if isinstance(value, int) and not isinstance(value, bool) else None
    ok = {
        "axis": whole is not None and -rank <= whole < rank,
        "flag": value in (0, 1),
        "count": whole is not None and whole >= 0,
        "seed": whole is not None and 0 <= whole < 2**64,
        "number": isinstance(value, (int, float)),
        "numbers": isinstance(value, tuple) and all(isinstance(v, (int, float)) for v in value),
        "shape": isinstance(value, tuple) and value == instr.dsts[0].shape,
        "max|min": value in ("max", "min"),
    }.get(kind)
    if kind == "k":
        axis = dict(instr.args).get("axis")
        n = instr.srcs[0].shape[axis] if isinstance(axis, int) and -rank <= axis < rank else 0
        ok = whole is not None and 1 <= whole <= n
    if not ok:
        want = {"axis": f"an axis of the source (of rank {rank})", "flag": "0 or 1", "count": "an integer >= 0",
                "seed": "an integer in [0, 2^64)", "number": "a number", "numbers": "a list of numbers [a|b|...]",
                "shape": f"the destination's shape {list(instr.dsts[0].shape)}", "max|min": "max or min",
                "k": "an integer from 1 to the length of the source along the axis"}[kind]
        raise ProgramError(f"{where}: kernel {instr.fn}'s arg {key} is {want}, got {value!r}")
