"""How long the lowering (isa.lower: tiling searches, layer groups, placement) takes on the
networks its targets name, in CPU seconds of this process (wall time swings with whatever else
the machine runs), beside the target for each; the 24-core ascend910b's timing-mode simulation
too.

- ResNet-50 (bench/resnet50.py) float32 on bm1684, batch 1; int8 on bm1684 at batch 1, 4 and
  16 (the lowering should grow no faster than the program);
- a Llama-7B-shaped decoder layer (hidden 4096, 32 heads, MLP 11008; bench/onnx_import_memory.py
  builds it) imported from ONNX, prefill at sequence 512 on bm1686 in float32;
- ResNet-50 float16 on ascend910b: lowering, and the simulation in timing mode.

    python bench/lower_speed.py                 # every case
    python bench/lower_speed.py --case r50      # one case: r50, int8, llama, 910b
"""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx
from onnx_import_memory import layer
from resnet50 import resnet50

import chips
import isa
import sim


def cpu(fn):
    """(CPU seconds of this process, value) of fn()."""
    start = time.process_time()
    value = fn()
    return time.process_time() - start, value


def line(what, seconds, target=None, extra=""):
    verdict = "" if target is None else f"  (target <= {target:g}: {'met' if seconds <= target else 'NOT met'})"
    print(f"{what:<46} {seconds:7.2f} CPU-s{verdict}{extra}")


def lowered(graph, chip):
    seconds, program = cpu(lambda: isa.lower(graph, chip))
    return seconds, program


def resnet(args):
    seconds, program = lowered(resnet50("float32"), chips.load("bm1684"))
    line("ResNet-50 float32 bm1684: lower", seconds, 2.0, f"  {len(program):,} instructions")


def int8(args):
    chip = chips.load("bm1684")
    for batch in (1, 4, 16):
        seconds, program = lowered(resnet50("int8", batch=batch), chip)
        line(f"ResNet-50 int8 bm1684 batch {batch}: lower", seconds, 6.0 if batch == 16 else None,
             f"  {len(program):,} instructions")


def llama(args):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "layer.onnx"
        onnx.save(layer(4096, 32, 11008, 512), path)
        graph = isa.from_onnx(str(path))
    seconds, program = lowered(graph, chips.load("bm1686"))
    line("Llama-7B layer prefill 512 bm1686: lower", seconds, 2.0, f"  {len(program):,} instructions")


def ascend(args):
    chip = chips.load("ascend910b")
    seconds, program = lowered(resnet50("float16"), chip)
    line("ResNet-50 float16 ascend910b: lower", seconds, 10.0, f"  {len(program):,} instructions")
    seconds, result = cpu(lambda: sim.execute(program, chip, mode="timing"))
    line("ResNet-50 float16 ascend910b: timing mode", seconds, 5.0, f"  {result.cycles:,} cycles")


CASES = {"r50": resnet, "int8": int8, "llama": llama, "910b": ascend}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=sorted(CASES), action="append", help="run only these cases (default: all)")
    args = parser.parse_args()
    cases = args.case or list(CASES)
    if len(cases) == 1:
        CASES[cases[0]](args)
        return
    for name in cases:  # each in a process of its own, as a user's run is: the heap an earlier case leaves slows the next
        subprocess.run([sys.executable, __file__, "--case", name], check=True)


if __name__ == "__main__":
    main()
