"""Calibration: the range of each float tensor of a graph, from which INT8 takes its scales.

A table is TPU-MLIR's calibration table (what its `run_calibration.py` writes and
`model_deploy --calibration_table` reads): text lines `name threshold min max`, one per tensor,
`#` starting a comment; the section TPU-MLIR begins with `#int4_th` (INT4 thresholds) and what
follows it are ignored. A tensor's scale is threshold / 127 (symmetric, zero point 0). Names are
the graph's tensor names (for an imported ONNX model, the ONNX value names as
`isa.onnx.tensor_name` writes them: most are unchanged).

`measure` computes a table by running the float graph on the simulator: on the `generic` chip in
functional mode, every float tensor a graph output, once per sample; a tensor's min and max are
over the samples, its threshold the larger magnitude (max-abs, TPU-MLIR's starting point before
its KL-divergence tuning, which npusim does not do).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ConfigError, InputError
from ..graph import Graph
from .rebuild import Rebuild

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from chips.schema import Chip

Sample = dict[str, "NDArray[Any]"]  # one run's feeds: input name -> array

INT4_SECTION = "#int4_th"


@dataclass
class Table:
    """name -> (threshold, min, max); `default`: the threshold of a tensor the table lacks
    (None: such a tensor is an error)."""

    ranges: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    default: float | None = None
    where: str = "calibration"

    def threshold(self, name: str) -> float:
        if name in self.ranges:
            return self.ranges[name][0]
        if self.default is None:
            raise ConfigError(f"{self.where}: no threshold for tensor {name!r} ({len(self.ranges)} tensors in the table); "
                              "calibrate the graph it was quantized from")
        return self.default

    def write(self, path: str | Path) -> None:
        lines = ["# npusim calibration table (TPU-MLIR's format)", "# op_name threshold min max"]
        # 17 significant digits: every float reads back as itself, so a table written and read deploys the same model
        lines += [f"{name} {t:.17g} {lo:.17g} {hi:.17g}" for name, (t, lo, hi) in self.ranges.items()]
        Path(path).write_text("\n".join(lines) + "\n")


def read_table(path: str | Path) -> Table:
    """A calibration table file; a line that is not `name threshold min max` (numbers, a positive
    finite threshold) is a ConfigError naming the file and line."""
    file = Path(path)
    try:
        text = file.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the calibration table ({getattr(exc, 'strerror', None) or exc})") from None
    ranges: dict[str, tuple[float, float, float]] = {}
    for k, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if line.startswith(INT4_SECTION):
            break
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        try:
            if len(parts) != 4:
                raise ValueError
            threshold, low, high = (float(p) for p in parts[1:])
        except ValueError:
            raise ConfigError(f"{path} line {k}: expected `name threshold min max`, got {line[:80]!r}") from None
        if not (np.isfinite(threshold) and threshold > 0 and np.isfinite(low) and np.isfinite(high)):
            raise ConfigError(f"{path} line {k}: tensor {parts[0]!r}: the threshold must be positive and finite and min, max "
                              f"finite, got {threshold}, {low}, {high}")
        ranges[parts[0]] = (threshold, low, high)
    if not ranges:
        raise ConfigError(f"{path}: the calibration table lists no tensor")
    return Table(ranges, where=str(file))


def measure(graph: Graph, samples: Iterable[Mapping[str, NDArray[Any]]], chip: Chip | None = None) -> Table:
    """A Table from running `graph` (float) on each sample (input name -> array) in functional
    mode, every float32 tensor an output (see the module's docstring)."""
    import chips
    import sim

    runs = list(samples)
    if not runs:
        raise InputError("calibration: no sample to run (give at least one dict of input arrays)")
    probe = Graph(graph.name)
    rb = Rebuild(graph, probe, chips.load("generic") if chip is None else chip)
    for node in graph.nodes:
        rb.copy(node)
    rb.finish()
    watched = [n for n, t in graph.tensors.items() if t.dtype == "float32" and n not in graph.constants and n in rb.map
               and not t.bounded]
    for name in watched:
        if rb.map[name].name not in probe.outputs.values():
            probe.output(rb.map[name], rb.fresh(f"calibration/{name}"))
    by_tensor = {t: o for o, t in probe.outputs.items()}
    low: dict[str, float] = {}
    high: dict[str, float] = {}
    for k, feeds in enumerate(runs):
        if not isinstance(feeds, dict) or set(feeds) != set(graph.inputs):
            got = sorted(feeds) if isinstance(feeds, dict) else type(feeds).__name__
            raise InputError(f"calibration sample {k}: expected arrays for the inputs {', '.join(graph.inputs)}, got {got}")
        outputs = sim.run(probe, rb.chip, inputs=feeds).outputs
        for name in watched:
            values = outputs[by_tensor[rb.map[name].name]]
            finite = values[np.isfinite(values)]
            if finite.size:
                low[name] = min(low.get(name, np.inf), float(finite.min()))
                high[name] = max(high.get(name, -np.inf), float(finite.max()))
    ranges: dict[str, tuple[float, float, float]] = {}
    for name in watched:
        if name in low:
            threshold = max(abs(low[name]), abs(high[name]))
            ranges[name] = (threshold if threshold > 0 else 1e-6, low[name], high[name])
    return Table(ranges, where=f"calibration of {graph.name} on {len(runs)} sample(s)")


def random_samples(graph: Graph, count: int, seed: int = 0) -> list[Sample]:
    """`count` seeded standard-normal samples for the graph's float inputs (integers in [0, 10))."""
    from .. import dtypes

    rng = np.random.default_rng(seed)
    out: list[Sample] = []
    for _ in range(count):
        feeds: Sample = {}
        for name in graph.inputs:
            t = graph.tensors[name]
            if dtypes.is_float(t.dtype):
                feeds[name] = rng.standard_normal(t.shape).astype(dtypes.np_dtype(t.dtype))
            else:
                feeds[name] = rng.integers(0, 10, t.shape).astype(dtypes.np_dtype(t.dtype))
        out.append(feeds)
    return out


__all__ = ["Table", "measure", "random_samples", "read_table"]
