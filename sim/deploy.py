"""`npusim run ... --quantize F16|BF16|INT8 [--calibration FILE]`: the run's graph deployed in that
precision for the run's chip (isa.quantize, isa/deploy/) before it is lowered.

--calibration is a TPU-MLIR calibration table (text: `name threshold min max` lines) or an .npz
of one sample (an array per input, by the model's input names), run through the simulator to
measure each tensor's range. Without it, INT8 calibrates on the run's own inputs (--inputs, or
the random ones drawn with --seed). A functional run then prints each output's cosine
similarity and largest absolute error against the float model's.
"""
from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import chips
import isa
from isa import npyfile
from isa.errors import ConfigError, InputError

from .run import execute

if TYPE_CHECKING:
    import numpy as np

    from chips.schema import Chip
    from isa.deploy.calibration import Table
    from isa.graph import Graph
    from isa.graphfile import GraphFile


def deploy(gf: GraphFile, args: argparse.Namespace, chip: Chip) -> Graph:
    """Replace gf.graph by its deployment in args.quantize for `chip`; print what went where.
    Returns the float graph it replaced (what `compared` measures the deployment against)."""
    dtype = isa.deploy.precision(args.quantize)
    calibration = None
    if args.calibration and dtype != "int8":
        raise ConfigError(f"--calibration {args.calibration}: a calibration is for --quantize INT8 only")
    if dtype == "int8":
        calibration = _calibration(gf, args)
    float_graph, gf.graph = gf.graph, isa.quantize(gf.graph, dtype, chip, calibration)
    for note in gf.graph.notes:
        if note.startswith("quantize "):
            print(note.removeprefix("quantize ").replace(":", " deployment:", 1))
    return float_graph


def compared(float_graph: Graph, inputs: Mapping[str, np.ndarray] | None, outputs: Mapping[str, np.ndarray]) -> list[str]:
    """What the deployment costs in accuracy: per output, its cosine similarity and largest
    absolute error against the float model's, run on `generic` in functional mode (as
    calibration runs it) on the same inputs."""
    generic = chips.load("generic")
    want = execute(isa.lower(float_graph, generic), generic, inputs).outputs
    lines = []
    for name, got in outputs.items():
        cosine, error = isa.deploy.similarity(got, want[name])
        lines.append(f"{name}: cosine similarity {cosine:.6f}, max abs error {error:.4g} against the float model")
    return lines


def _calibration(gf: GraphFile, args: argparse.Namespace) -> list[dict[str, np.ndarray]] | Table:
    if not args.calibration:
        if args.inputs:
            return [_sample(gf, args.inputs, "--inputs")]
        missing = [n for n in gf.graph.inputs if n not in gf.defaults]
        if missing:
            raise InputError(f"--quantize INT8: no value for input(s) {', '.join(missing)} to calibrate on: pass --calibration "
                             "(a table or an .npz sample) or --inputs")
        return [{n: gf.defaults[n] for n in gf.graph.inputs}]
    path = Path(args.calibration)
    if path.suffix.lower() == ".npz":
        return [_sample(gf, path, "--calibration")]
    return isa.deploy.read_table(path)


def _sample(gf: GraphFile, path: str | Path, what: str) -> dict[str, np.ndarray]:
    try:
        arrays = npyfile.read_npz(str(path))
    except InputError as exc:
        raise InputError(f"{what} {exc}") from None
    sample = gf.rename(arrays) if hasattr(gf, "rename") else arrays
    missing = [n for n in gf.graph.inputs if n not in sample]
    if missing:
        raise InputError(f"{what} {path}: no array for input(s) {', '.join(missing)}, which the calibration runs need")
    return {n: sample[n] for n in gf.graph.inputs}


__all__ = ["compared", "deploy"]
