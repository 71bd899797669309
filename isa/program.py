"""Program: what lowering hands to the machine. One instruction stream per engine, the tensors
bound for the whole run (inputs, outputs and constants in DDR, constants pinned in on-chip
memory; a constant's bytes travel with the program), the buffers the memory planner placed,
each with the instructions that open and close its lifetime, and notes on placement choices.

Its text form has one item per line, so a program can be read, diffed, edited and run again:

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
import zlib
from dataclasses import dataclass, field

from .errors import ProgramError
from .instructions import instr_text, parse_instr, parse_region


@dataclass(frozen=True)
class Binding:
    """A graph tensor placed for the whole run: role is "input", "output" or "const" (with its
    bytes). Inputs and outputs are in DDR; a constant is in DDR or pinned in on-chip memory."""

    name: str
    role: str
    region: object  # instructions.Region
    data: bytes = b""


@dataclass(frozen=True)
class Buffer:
    """A planned allocation, live from the start of `first` to the end of every id in `last`."""

    name: str
    mem: str
    addr: int
    size: int
    first: str
    last: tuple


@dataclass
class Program:
    chip: str
    graph: str
    streams: dict  # engine name -> list of instructions, in engine order
    bindings: list
    buffers: list
    notes: list = field(default_factory=list)  # lines of text: placement decisions (e.g. a fallback to DDR)

    def __len__(self):
        return sum(len(s) for s in self.streams.values())

    def to_text(self):
        lines = [f".program chip={self.chip} graph={self.graph}"]
        lines += [f".engine {e}" for e in self.streams]
        for b in self.bindings:
            tag = {"input": ".input", "output": ".output", "const": ".const"}[b.role]
            data = " " + base64.b64encode(zlib.compress(b.data)).decode() if b.role == "const" else ""
            lines.append(f"{tag} {b.name} {b.region.text()}{data}")
        for b in self.buffers:
            lines.append(f".buffer {b.mem}@{b.addr:#x} size={b.size} name={b.name} first={b.first} last={','.join(b.last)}")
        lines += [f".note {note}" for note in self.notes]
        for engine, stream in self.streams.items():
            lines += [instr_text(f"{engine}.{i}", instr) for i, instr in enumerate(stream)]
        return "\n".join(lines) + "\n"

    @classmethod
    def from_text(cls, text):
        prog = cls("", "", {}, [], [])
        for lineno, line in enumerate(text.splitlines(), 1):
            words = line.split()
            if words and not line.startswith("#"):
                _parse_line(prog, words, f"program line {lineno}")
        return prog


def _parse_line(prog, words, where):
    head = words[0]
    try:
        if head == ".program":
            fields = dict(w.split("=", 1) for w in words[1:])
            prog.chip, prog.graph = fields["chip"], fields["graph"]
        elif head == ".engine":
            prog.streams[words[1]] = []
        elif head in (".input", ".output", ".const"):
            role = head[1:]
            data = zlib.decompress(base64.b64decode(words[3])) if role == "const" else b""
            prog.bindings.append(Binding(words[1], role, parse_region(words[2], where), data))
        elif head == ".note":
            prog.notes.append(" ".join(words[1:]))
        elif head == ".buffer":
            mem, addr = words[1].split("@")
            f = dict(w.split("=", 1) for w in words[2:])
            prog.buffers.append(Buffer(f["name"], mem, int(addr, 0), int(f["size"]), f["first"], tuple(f["last"].split(","))))
        else:
            engine, _, index = head.rpartition(".")
            stream = prog.streams.get(engine)
            if stream is None:
                raise ProgramError(f"{where}: instruction for undeclared engine {engine!r}")
            if int(index) != len(stream):
                raise ProgramError(f"{where}: {head} out of order, expected {engine}.{len(stream)}")
            stream.append(parse_instr(words[1:], where))
    except (KeyError, IndexError, ValueError, zlib.error) as exc:
        raise ProgramError(f"{where}: cannot parse {' '.join(words)[:80]!r} ({type(exc).__name__}: {exc})") from None
