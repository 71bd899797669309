"""The process tests/test_fuzz.py runs fuzzed inputs in: under a limit on its address space, so
input that escapes npusim's bounds fails the test instead of exhausting the machine.

It reads one JSON request a line on stdin, {"kind": "chip" | "graph" | "program" | "onnx", "text": ...}
(an ONNX model's bytes in base64, with "feeds": the seed model's inputs by name, each
{"dtype", "shape", "data"}), loads and runs the text, and answers one JSON line on stdout: {"outcome": "ok" | "error" |
"crash", "detail": ...}. "error" is a SimError (the promised outcome for bad input), "crash"
anything else, with its traceback. npusim's host-memory cap is lowered well inside the limit,
as a user on a small machine would state it.
"""

import base64
import json
import math
import os
import resource
import sys
import tempfile
import traceback
from pathlib import Path

ADDRESS_SPACE = 3 << 30  # bytes of virtual memory the process may map (numpy and its BLAS take some 0.5 GiB)
HOST_MEMORY = 256 << 20  # npusim's host-memory cap here
INSTRUCTION_WORK = 1 << 26  # and the elements one instruction may compute over
FEED_ELEMENTS = 1 << 16  # elements of an input the worker makes up an array for
TINY = Path(__file__).parent / "chips" / "tiny.yaml"


def main():
    sys.path[0] = str(Path(__file__).resolve().parents[1])  # the project, not tests/ (whose chips/ folder would shadow the package)
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything npusim prints goes to stderr, never into the replies
    import numpy as np
    import onnx

    import chips
    import isa
    import sim
    from isa import graphfile, limits
    from isa.errors import SimError

    limits.HOST_MEMORY, limits.INSTRUCTION_WORK = HOST_MEMORY, INSTRUCTION_WORK
    folder = Path(tempfile.mkdtemp(prefix="npusim-fuzz-"))
    tiny, generic = chips.load(TINY), chips.load("generic")

    def probe():
        """A small product and activation, for a fuzzed chip to run."""
        g = isa.Graph("probe")
        x = g.input("x", (4, 8), "float32")
        w = g.constant("w", np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4))
        g.output(isa.ops.active(isa.ops.matrix_mul(x, w), "relu"), "y")
        return g

    def run_chip(text):
        path = folder / "chip.yaml"
        path.write_text(text)
        chip = chips.load(path)
        timing = sim.run(probe(), chip, mode="timing")
        functional = sim.run(probe(), chip, {"x": np.linspace(-2, 2, 32, dtype=np.float32).reshape(4, 8)})
        return f"{chip.name}: {timing.cycles} cycles (timing), {functional.cycles} (functional)"

    def run_graph(text):
        path = folder / "graph.yaml"
        path.write_text(text)
        gf = graphfile.load(path)
        program = isa.lower(gf.graph, generic)
        cycles = sim.execute(program, generic, mode="timing").cycles
        if all(name in gf.defaults for name in gf.graph.inputs):
            sim.execute(program, generic, gf.defaults)
        return f"{gf.graph.name}: {cycles} cycles"

    def run_program(text):
        program = isa.Program.from_text(text)
        inputs = {b.name: np.zeros(b.region.shape, isa.dtypes.np_dtype(b.region.dtype))
                  for b in program.bindings if b.role == "input" and b.region.size <= 1 << 16}
        cycles = sim.execute(program, tiny, mode="timing").cycles
        sim.execute(program, tiny, inputs)
        return f"{len(program)} instructions: {cycles} cycles"

    def onnx_feeds(graph, seeds):
        """An array for each input of the model: the seed's where it fits the input as declared
        (converted to its dtype), else one of the declared shape, its dynamic dimensions 2;
        none for an input of unknown rank or of more than FEED_ELEMENTS elements."""
        feeds = {}
        for name, inp in graph.declared.items():
            try:
                dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(inp.elem_type))
            except (KeyError, ValueError, TypeError):
                continue
            seed = seeds.get(name)
            if seed is not None and inp.dims is not None and len(seed["shape"]) == len(inp.dims) and \
                    all(d is None or d == s for d, s in zip(inp.dims, seed["shape"])):
                feeds[name] = np.array(seed["data"], seed["dtype"]).reshape(seed["shape"]).astype(dtype)
            elif inp.dims is not None and math.prod(d or 2 for d in inp.dims) <= FEED_ELEMENTS:
                shape = tuple(d or 2 for d in inp.dims)
                feeds[name] = (np.arange(math.prod(shape)) % 3).astype(dtype).reshape(shape)
        return feeds

    def run_onnx(text, seeds):
        path = folder / "model.onnx"
        path.write_bytes(base64.b64decode(text))
        graph = isa.from_onnx(path)
        bound = graph.specialise(onnx_feeds(graph, seeds) or None)
        program = isa.lower(bound.graph, generic)
        cycles = sim.execute(program, generic, mode="timing").cycles
        if bound.inputs is not None and set(bound.inputs) == set(bound.graph.inputs):
            sim.execute(program, generic, bound.inputs)
        return f"{bound.graph.name}: {cycles} cycles"

    run = {"chip": run_chip, "graph": run_graph, "program": run_program, "onnx": run_onnx}
    for line in sys.stdin:
        request = json.loads(line)
        try:
            args = (request["text"], request["feeds"]) if request["kind"] == "onnx" else (request["text"],)
            reply = {"outcome": "ok", "detail": run[request["kind"]](*args)}
        except SimError as exc:
            reply = {"outcome": "error", "detail": f"{type(exc).__name__}: {exc}"}
        except Exception:  # noqa: BLE001 - what the fuzz tests look for: anything but a SimError
            reply = {"outcome": "crash", "detail": traceback.format_exc()}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
