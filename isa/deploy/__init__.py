"""Deployment precisions: a float32 graph compiled in FP16, BF16 or INT8, as TPU-MLIR's
`model_deploy --quantize F16|BF16|INT8` compiles a model for a chip.

    g = isa.from_onnx("model.onnx")
    g16 = isa.quantize(g, "float16", chip)                          # floats.py
    g8 = isa.quantize(g, "int8", chip, calibration="model.cali")    # int8.py, a TPU-MLIR table
    g8 = isa.quantize(g, "int8", chip, calibration=[{"x": x1}, ...])  # measured on the simulator
    isa.from_onnx("model.onnx", quantize="int8", chip=chip, calibration=8)   # 8 random samples

The result is a new graph with the source's inputs and outputs (float32 at the edges); the chip
decides which ops take the narrower dtype (its op table), and the graph's notes, which the
lowering copies into the program's, say what went where. Calibration (calibration.py): a table
file, a calibration.Table, a list of samples (input name -> array) run through the simulator,
or a count of seeded random samples.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Union

import numpy as np

from ..errors import ConfigError
from ..graph import Graph
from . import weight_only
from .calibration import Table, measure, random_samples, read_table

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray

    from chips.schema import Chip

# What `calibrate` takes (the module's docstring): a table, its file, samples (input name -> array) or a count of random ones.
Calibration = Union[Table, str, Path, int, "Sequence[Mapping[str, NDArray]]"]

PRECISIONS = {"float16": "float16", "f16": "float16", "fp16": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16",
              "int8": "int8"}


def similarity(got: ArrayLike, want: ArrayLike) -> tuple[float, float]:
    """(cosine similarity, largest absolute error) of a deployed output against the float
    model's, as TPU-MLIR's model_deploy compares them (the cosine of two zero arrays is 1)."""
    a, b = np.asarray(got, np.float64).ravel(), np.asarray(want, np.float64).ravel()
    if a.shape != b.shape:
        raise ConfigError(f"similarity: outputs of {a.size} and {b.size} elements")
    norms = np.linalg.norm(a) * np.linalg.norm(b)
    cosine = float(a @ b / norms) if norms else float(np.array_equal(a, b))
    return cosine, float(np.abs(a - b).max(initial=0.0))


def precision(name: object) -> str:
    """npusim's dtype for a precision as TPU-MLIR (F16, BF16, INT8) or npusim (float16, ...) names
    it; the weight-only schemes keep their names (w8a16, w4a16)."""
    key = str(name).lower()
    if key in weight_only.SCHEMES:
        return key
    if key not in PRECISIONS:
        raise ConfigError(f"quantize {name!r}: not a deployment precision; expected one of F16, BF16, INT8, W8A16, W4A16 "
                          "(or float16, bfloat16, int8)")
    return PRECISIONS[key]


def calibrate(graph: Graph, calibration: Calibration | None, chip: Chip | None = None) -> Table:
    """A Table from what `calibration` is (see the module's docstring)."""
    if isinstance(calibration, Table):
        return calibration
    if isinstance(calibration, (str, Path)):
        return read_table(calibration)
    if isinstance(calibration, int) and not isinstance(calibration, bool):
        if calibration < 1:
            raise ConfigError(f"calibration={calibration}: a count of random samples must be at least 1")
        return measure(graph, random_samples(graph, calibration), chip)
    if isinstance(calibration, (list, tuple)):
        return measure(graph, calibration, chip)
    raise ConfigError("INT8 needs a calibration: a table file (TPU-MLIR's `name threshold min max` lines), a list of samples "
                      f"(input name -> array), or a number of random samples; got {type(calibration).__name__}")


def quantize(graph: Graph, dtype: str, chip: Chip | str | Path, calibration: Calibration | None = None,
             target: Graph | None = None) -> Graph:
    """`graph` compiled for `chip` (a Chip or a shipped chip's name) in `dtype` (F16, BF16, INT8):
    a new graph (or `target`, an empty graph to fill)."""
    import chips

    from . import floats, int8

    dtype = precision(dtype)
    chip = chips.load(str(chip)) if isinstance(chip, (str, Path)) else chip
    if target is None:
        target = Graph(graph.name)
    if dtype == "int8":
        return int8.rewrite(graph, target, chip, calibrate(graph, calibration))
    if calibration is not None:
        raise ConfigError(f"quantize {dtype}: a calibration is for INT8 only")
    if dtype in weight_only.SCHEMES:
        return weight_only.rewrite(graph, target, chip, weight_only.SCHEMES[dtype])
    return floats.rewrite(graph, target, chip, dtype)


__all__ = ["PRECISIONS", "Table", "calibrate", "measure", "precision", "quantize", "random_samples", "read_table"]
