"""Program: what lowering hands to the machine. One instruction stream per engine, the tensors
bound for the whole run (graph state, inputs, outputs and constants in DDR, constants pinned in
on-chip memory; a constant's bytes travel with the program; a state's stay in DDR between runs,
sim.Session), the buffers the memory planner placed,
each with the instructions that open and close its lifetime, and notes on placement choices.

Its text form has one item per line, so a program can be read, diffed, edited and run again
(`Program.from_text` checks every field it reads, each error a ProgramError naming the line):

    .program chip=bm1684 graph=mlp
    .engine gdma
    .input x ddr@0x0:float32[8,256;256,1]
    .const w ddr@0x2000:float32[256,128;128,1] <base64 of zlib-compressed bytes>
    .output y ddr@0x22000:float32[8,128;128,1]
    .buffer lmem@0x0 size=8192 name=matrix_mul_0/a.0 first=gdma.0 last=tiu.1
    .note intermediate fc1 (4096 bytes) stays in ddr: lmem has 1024 bytes free
    gdma.0 dma src=ddr@0x0:float32[8,256;256,1] dst=lmem@0x0:float32[8,256;256,1] op=matrix_mul_0
    tiu.0 wait on=gdma.0
"""

import base64
import binascii
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path

from . import limits
from .errors import ProgramError
from .instructions import Instr, Region, Wait, instr_text, parse_id, parse_instr, parse_int, parse_name, parse_region


@dataclass(frozen=True)
class Binding:
    """A graph tensor placed for the whole run: role is "state", "input", "output" or "const" (with
    its bytes). States, inputs and outputs are in DDR; a constant is in DDR or pinned in on-chip
    memory."""

    name: str
    role: str
    region: Region
    data: bytes = b""


@dataclass(frozen=True)
class Buffer:
    """A planned allocation, live from the start of `first` to the end of every id in `last`."""

    name: str
    mem: str
    addr: int
    size: int
    first: str
    last: tuple[str, ...]


@dataclass(frozen=True)
class Blocks:
    """Where a program repeats itself: `count` consecutive blocks, block b being each engine e's
    instructions [start[e] + b * size[e], start[e] + (b + 1) * size[e]) and buffers [buffers +
    b * per_block, buffers + (b + 1) * per_block), each block the one before it moved
    (isa/lower/replay.py): the same instructions but for the addresses of the block's own bound
    tensors and staging slots, its op and buffer names, and its waits on the two blocks before it
    moved on by a block. `owned[b]`: block b's own ddr bytes (its bound tensors the replay moves),
    as (first byte, last byte + 1) spans. Timing mode may fast-forward through them (sim/forward.py)."""

    start: dict[str, int]
    size: dict[str, int]
    count: int
    buffers: int
    per_block: int
    owned: tuple[tuple[tuple[int, int], ...], ...]


def op_names(stream: Sequence[Instr], indices: Iterable[int]) -> list[str]:
    """The op names of a stream's instructions at `indices`. A stream whose replayed blocks are
    made when read (isa/lower/replay.py) names those without making them."""
    named = getattr(stream, "op_names", None)
    return named(indices) if named is not None else list(map(attrgetter("op"), map(stream.__getitem__, indices)))


def waits_in(stream: Sequence[Instr], lo: int, hi: int) -> tuple[list[int], list[tuple[str, ...]]]:
    """The places of the waits among a stream's instructions [lo, hi), and the ids each names. A
    stream whose replayed blocks are made when read answers for those from their ids, unmade."""
    found = getattr(stream, "waits_in", None)
    if found is not None:
        return found(lo, hi)
    at = [i for i, x in enumerate(stream[lo:hi], lo) if type(x) is Wait]
    return at, [stream[i].on for i in at]  # type: ignore[union-attr]  # a Wait's


@dataclass
class Program:
    chip: str
    graph: str
    streams: dict[str, list[Instr]]  # engine name -> its instructions, in engine order
    bindings: list[Binding]
    buffers: list[Buffer]
    notes: list[str] = field(default_factory=list)  # lines of text: placement decisions (e.g. a fallback to DDR)
    # the blocks the lowering replayed: where the program repeats itself, not what it is (a program
    # read from text has none and runs whole; equal programs may differ in them)
    blocks: Blocks | None = field(default=None, compare=False)

    def __len__(self) -> int:
        return sum(len(s) for s in self.streams.values())

    def to_text(self) -> str:
        lines = [f".program chip={self.chip} graph={self.graph}"]
        lines += [f".engine {e}" for e in self.streams]
        for b in self.bindings:
            tag = {"state": ".state", "input": ".input", "output": ".output", "const": ".const"}[b.role]
            data = " " + base64.b64encode(zlib.compress(b.data)).decode() if b.role == "const" else ""
            lines.append(f"{tag} {b.name} {b.region.text()}{data}")
        for buf in self.buffers:
            lines.append(f".buffer {buf.mem}@{buf.addr:#x} size={buf.size} name={buf.name} first={buf.first} last={','.join(buf.last)}")
        lines += [f".note {note}" for note in self.notes]
        for engine, stream in self.streams.items():
            lines += [instr_text(f"{engine}.{i}", instr) for i, instr in enumerate(stream)]
        return "\n".join(lines) + "\n"

    @classmethod
    def from_text(cls, text: str) -> "Program":
        prog = cls("", "", {}, [], [])
        seen = _Seen()
        for lineno, line in enumerate(text.splitlines(), 1):
            words = line.split()
            if words and not line.startswith("#"):
                _parse_line(prog, words, f"program line {lineno}", seen)
        if not prog.chip:
            raise ProgramError("a program's first line is `.program chip=NAME graph=NAME`, and this one has none")
        return prog


def read_program(path: str | Path) -> Program:
    """The Program in a text file (`npusim lower -o`, `run --program`, or one edited by hand), read
    up to PROGRAM_BYTES (isa/limits.py) and parsed by Program.from_text."""
    try:
        with limits.open_input(path, regular=True) as f:
            data = f.read(limits.PROGRAM_BYTES + 1)
    except OSError as exc:
        raise ProgramError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(data) > limits.PROGRAM_BYTES:
        raise ProgramError(f"{path}: larger than the limit of {limits.PROGRAM_BYTES} bytes for a program file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProgramError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        return Program.from_text(text)
    except ProgramError as exc:
        raise ProgramError(f"{path}: {exc}") from None


class _Seen:
    """What the lines read so far bound: (role, name) of the bindings, and the host bytes the
    constants may still take (all of them together at most the host-memory cap)."""

    def __init__(self) -> None:
        self.names: set[tuple[str, str]] = set()
        self.left = limits.HOST_MEMORY


def _parse_line(prog: Program, words: list[str], where: str, seen: _Seen) -> None:
    head = words[0]
    if head != ".program" and not prog.chip:
        raise ProgramError(f"{where}: a program's first line is `.program chip=NAME graph=NAME`, not {head[:40]!r}")
    if head == ".program":
        if prog.chip:
            raise ProgramError(f"{where}: a second .program line")
        fields = _fields(words[1:], ("chip", "graph"), where)
        prog.chip, prog.graph = parse_name(fields["chip"], "chip name", where), fields["graph"]
    elif head == ".engine":
        _count(words, 2, "`.engine NAME`", where)
        engine = parse_name(words[1], "engine name", where)
        if engine in prog.streams:
            raise ProgramError(f"{where}: engine {engine} declared twice")
        prog.streams[engine] = []
    elif head in (".state", ".input", ".output", ".const"):
        role = head[1:]
        _count(words, 4 if role == "const" else 3, f"`{head} NAME REGION" + (" DATA`" if role == "const" else "`"), where)
        if (role, words[1]) in seen.names:  # a constant may also be an output, but not two constants
            raise ProgramError(f"{where}: {role} {words[1]!r} is bound twice")
        seen.names.add((role, words[1]))
        region = parse_region(words[2], where)
        data = _const_data(words[1], region, words[3], where, seen) if role == "const" else b""
        prog.bindings.append(Binding(words[1], role, region, data))
    elif head == ".note":
        prog.notes.append(" ".join(words[1:]))
    elif head == ".buffer":
        mem, at, addr = words[1].partition("@") if len(words) > 1 else ("", "", "")
        if not at:
            raise ProgramError(f"{where}: expected `.buffer MEM@ADDR size=N name=NAME first=ID last=ID,...`")
        f = _fields(words[2:], ("size", "name", "first", "last"), where)
        first, last = f["first"], tuple(f["last"].split(","))
        for ident in (first, *last):
            parse_id(ident, f"{where}: buffer {f['name']!r}'s lifetime")
        prog.buffers.append(Buffer(f["name"], parse_name(mem, "memory", where), parse_int(addr, "address", where, 0),
                                   parse_int(f["size"], "size", where, 0), first, last))
    elif head.startswith("."):
        raise ProgramError(f"{where}: unknown directive {head[:40]!r} "
                           "(known: .program, .engine, .state, .input, .output, .const, .buffer, .note)")
    else:
        engine, index = parse_id(head, where)
        stream = prog.streams.get(engine)
        if stream is None:
            raise ProgramError(f"{where}: instruction for undeclared engine {engine!r}")
        if index != len(stream):
            raise ProgramError(f"{where}: {head} out of order, expected {engine}.{len(stream)}")
        if len(words) < 2:
            raise ProgramError(f"{where}: {head} has no opcode")
        stream.append(parse_instr(words[1:], where))


def _count(words: list[str], n: int, form: str, where: str) -> None:
    if len(words) != n:
        raise ProgramError(f"{where}: expected {form}, got {len(words)} words")


def _fields(words: list[str], keys: tuple[str, ...], where: str) -> dict[str, str]:
    """{key: value} of `key=value` words: each of `keys` exactly once, no other."""
    fields: dict[str, str] = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or key not in keys or key in fields or not value:
            raise ProgramError(f"{where}: bad field {word[:40]!r}: expected each of {', '.join(k + '=' for k in keys)} once, with a value")
        fields[key] = value
    missing = [k for k in keys if k not in fields]
    if missing:
        raise ProgramError(f"{where}: missing {', '.join(k + '=' for k in missing)}")
    return fields


def _const_data(tensor: str, region: Region, text: str, where: str, seen: _Seen) -> bytes:
    """A constant's bytes: base64 of zlib-compressed data, exactly as many bytes as its region
    holds. The region's size is checked before anything is inflated, against what the constants
    before it left of the host-memory cap, so no text inflates beyond it."""
    nbytes = limits.check_shape(region.shape, region.dtype, f"{where}: constant {tensor!r}", seen.left,
                                "what the program's constants may take together (the host-memory cap)")
    seen.left -= nbytes
    try:
        inflate = zlib.decompressobj()
        data = inflate.decompress(base64.b64decode(text, validate=True), nbytes + 1)
    except (binascii.Error, ValueError, zlib.error) as exc:
        raise ProgramError(f"{where}: constant {tensor!r}: its data is not base64 of zlib-compressed bytes ({exc})") from None
    if len(data) != nbytes or not inflate.eof:
        got = f"{len(data)} bytes" if len(data) <= nbytes else f"more than {nbytes} bytes"
        raise ProgramError(f"{where}: constant {tensor!r} holds {got} of data, and its region {region.text()} takes {nbytes}")
    return data
