"""npusim as an ONNX backend (onnx.backend.base.Backend), so tools that take a backend drive the
simulator, and onnx.backend.test.BackendTest runs on it:

    from isa.onnx.backend import NpusimBackend
    outputs = NpusimBackend.run_model(model, [x])                    # on the generic chip
    rep = NpusimBackend.prepare(model, chip="bm1684", mode="timing")
    rep.run([x]); rep.results[-1].cycles                              # the sim.Result of the last run

The device is the host's CPU ("CPU"), on which the simulator runs; the chip it simulates is the
keyword `chip` (a shipped chip's name, a YAML path or a chips.Chip; `generic` by default: every
op, every dtype). `mode` ("functional" by default) and `policy` (an isa.Policy) are sim.run's.
Inputs are a list in the order of the model's inputs that are not initializers, or a dict by
name; outputs are a tuple in the order of the model's outputs, each of its ONNX shape and dtype
(in timing mode, which computes no value, an empty tuple). A model is imported once
(isa.from_onnx) and specialised for each new set of input shapes (OnnxGraph.specialise).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

import chips

from ..errors import InputError, UnsupportedError
from .model import from_onnx

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray
    from onnx import ModelProto, NodeProto, ValueInfoProto

    from chips.schema import Chip
    from sim.machine import Result

    from ..lower.policy import Policy
    from .model import OnnxGraph


class NpusimRep(BackendRep):
    """A prepared model: its OnnxGraph, the chip and how to run it."""

    def __init__(self, graph: OnnxGraph, chip: Chip, mode: str, policy: Policy | None) -> None:
        self.graph = graph
        self.chip = chip
        self.mode = mode
        self.policy = policy
        self.names = list(graph.declared)
        self.outputs = [o.name for o in graph.source.model.graph.output]
        self.results: list[Result] = []  # the sim.Result of each run

    def run(self, inputs: Mapping[str, ArrayLike] | Sequence[ArrayLike], **kwargs: Any) -> tuple:
        import sim

        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            given = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            if len(given) > len(self.names):
                raise InputError(f"{len(given)} inputs given; the model has {len(self.names)}: {', '.join(self.names)}")
            feeds = dict(zip(self.names, given))
        result = sim.run(self.graph, self.chip, inputs=feeds, mode=self.mode, policy=self.policy)
        self.results.append(result)
        if self.mode != "functional":
            return ()
        return namedtupledict("Outputs", self.outputs)(*(result.outputs[name] for name in self.outputs))


class NpusimBackend(Backend):
    """onnx.backend.base.Backend on npusim (see the module's docstring)."""

    @classmethod
    def prepare(cls, model: ModelProto, device: str = "CPU", chip: str | Chip = "generic", mode: str = "functional",
                policy: Policy | None = None, **kwargs: Any) -> NpusimRep:
        if not cls.supports_device(device):
            raise UnsupportedError(f"npusim runs on the host's CPU; device {device!r} is not supported")
        return NpusimRep(from_onnx(model), chips.load(chip) if isinstance(chip, str) else chip, mode, policy)

    @classmethod
    def run_model(cls, model: ModelProto, inputs: Mapping[str, ArrayLike] | Sequence[ArrayLike], device: str = "CPU",
                  **kwargs: Any) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: NodeProto, inputs: Mapping[str, ArrayLike] | Sequence[ArrayLike], device: str = "CPU",
                 outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None, **kwargs: Any) -> tuple:
        """One node run on its own: a model of it, its inputs typed after the arrays given (a
        list in the node's input order, or a dict by name), at opset `opset_version`
        (default: the newest the onnx package knows)."""
        names = [n for n in node.input if n]
        feeds = dict(inputs) if isinstance(inputs, dict) else dict(zip(names, inputs))
        values = [_value_info(name, np.asarray(feeds[name])) for name in names]
        outs = [onnx.helper.make_empty_tensor_value_info(n) for n in node.output if n]
        graph = onnx.helper.make_graph([node], f"node_{node.op_type}", values, outs)
        opset = kwargs.pop("opset_version", onnx.defs.onnx_opset_version())
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
        return cls.run_model(model, {n: feeds[n] for n in names}, device, **kwargs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        try:
            return Device(device).type == DeviceType.CPU
        except (AttributeError, ValueError):
            return False


def _value_info(name: str, array: NDArray[Any]) -> ValueInfoProto:
    return onnx.helper.make_tensor_value_info(name, onnx.helper.np_dtype_to_tensor_dtype(array.dtype), array.shape)


prepare = NpusimBackend.prepare
run_model = NpusimBackend.run_model
run_node = NpusimBackend.run_node
supports_device = NpusimBackend.supports_device

__all__ = ["NpusimBackend", "NpusimRep", "prepare", "run_model", "run_node", "supports_device"]
