"""A graph rewritten node by node into another: the machinery the precision rewrites share.

The source graph is read, never changed. Each of its nodes is added again to the target graph
(`emit`, by the op's registry entry and params, under the node's own name), its operands being
the target tensors that stand for the source's, converted where the rewrite wants another dtype
(`as_dtype`: a constant is converted when the graph is built, any other tensor by a `cast`
node, one per tensor and dtype). The graph's inputs keep their names, shapes and dtypes, and
its outputs their names and dtypes (`finish` casts back what the rewrite changed), so feeds
and outputs are those of the source graph.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import dtypes, ops
from ..errors import SimError, UnsupportedError
from ..graph import Graph
from ..lower.check import allows
from ..ops import REGISTRY
from ..ops.base import Spec, apply

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from chips.schema import Chip

    from ..graph import Node, Tensor


class Rebuild:
    def __init__(self, source: Graph, target: Graph, chip: Chip) -> None:
        self.source, self.g, self.chip = source, target, chip
        self.map: dict[str, Tensor] = {}  # source tensor name -> target Tensor
        self.converted: dict[tuple[str, str], Tensor] = {}  # (target tensor name, dtype) -> Tensor
        self.casts = 0  # cast nodes added
        target.notes.extend(source.notes)
        for name in source.inputs:
            t = source.tensors[name]
            self.map[name] = target.input(name, t.shape, t.dtype)

    def tensor(self, name: str) -> Tensor:
        """The target tensor standing for source tensor `name` (a constant copied when first used)."""
        if name not in self.map:
            self.map[name] = self.g.constant(name, self.source.constants[name], self.source.tensors[name].dtype)
        return self.map[name]

    def is_constant(self, name: str) -> bool:
        return name in self.source.constants

    def constant(self, base: str, array: ArrayLike, dtype: str) -> Tensor:
        """A new constant of the target graph, named after `base`."""
        name, k = f"{base}_{dtype}", 0
        while name in self.g.tensors:
            k += 1
            name = f"{base}_{dtype}_{k}"
        return self.g.constant(name, dtypes.convert(np.asarray(array), dtype), dtype)

    def as_dtype(self, t: Tensor, dtype: str) -> Tensor:
        """Target tensor t as `dtype`: itself, a converted constant, or a cast node's output."""
        if t.dtype == dtype:
            return t
        key = (t.name, dtype)
        if key not in self.converted:
            if t.name in self.g.constants:
                self.converted[key] = self.constant(t.name, self.g.constants[t.name], dtype)
            else:
                if not self.supported("cast", {"out_dtype": dtype}, [t.dtype], dtype):
                    raise UnsupportedError(f"chip {self.chip.name} has no cast {t.dtype} -> {dtype}, which the rewrite of "
                                           f"{t.name!r} needs")
                self.converted[key] = ops.cast(t, out_dtype=dtype, name=self.fresh(f"{t.name}/to_{dtype}"))
                self.casts += 1
        return self.converted[key]

    def fresh(self, base: str) -> str:
        name, k = base, 0
        while name in self.g.tensors or name in self.g._node_names:
            k += 1
            name = f"{base}_{k}"
        return name

    def supported(self, op: str, params: Mapping[str, Any], ins: Iterable[str], out: str) -> bool:
        """Whether the chip's op table takes op (with these params) on these dtypes."""
        opdef = REGISTRY[op]
        return allows(self.chip.support(opdef.support_key(params)), list(ins), out)

    def fits(self, node: Node, in_dtypes: Sequence[str], params: Mapping[str, Any]) -> list[str] | None:
        """The output dtypes node would have with these input dtypes and params, if the op itself
        and the chip's table take them; else None."""
        opdef = REGISTRY[node.op]
        specs = [Spec(self.source.tensors[n].shape, d) for n, d in zip(node.inputs, in_dtypes)]
        try:
            outs = opdef.infer(specs, params)
        except SimError:  # the op refuses these dtypes or params: that is the answer
            return None
        checked = len(node.inputs[: opdef.checked_inputs(node)])
        if not self.supported(node.op, params, in_dtypes[:checked], outs[0].dtype):
            return None
        return [s.dtype for s in outs]

    def emit(self, node: Node, operands: Sequence[Tensor], params: dict[str, Any], name: str | None = None) -> tuple[Tensor, ...]:
        """Add node's op to the target with these operands and params; the outputs as a tuple."""
        outs = apply(REGISTRY[node.op], operands, params, name=name or self.fresh(node.name), graph=self.g)
        return outs if isinstance(outs, tuple) else (outs,)

    def copy(self, node: Node, params: dict[str, Any] | None = None, operands: Sequence[Tensor] | None = None) -> tuple[Tensor, ...]:
        """Node added again, its operands of the source's dtypes; its outputs stand for the source's."""
        if operands is None:
            operands = [self.as_dtype(self.tensor(i), self.source.tensors[i].dtype) for i in node.inputs]
        outs = self.emit(node, operands, node.params if params is None else params, name=node.name)
        self.map.update(zip(node.outputs, outs))
        return outs

    def finish(self, value: Callable[[str], Tensor] | None = None) -> Graph:
        """Declare the outputs under the source's names and dtypes; `value(name)` gives the target
        tensor of a source tensor (default: the mapped one)."""
        for out_name, tname in self.source.outputs.items():
            t = value(tname) if value else self.tensor(tname)
            self.g.output(self.as_dtype(t, self.source.tensors[tname].dtype), out_name)
        return self.g


def float_params(params: Mapping[str, Any], old: str, new: str) -> dict[str, Any]:
    """params with every dtype param that names `old` naming `new` (out_dtype and the like)."""
    return {k: (new if isinstance(v, str) and v == old and "dtype" in k else v) for k, v in params.items()}


__all__ = ["Rebuild", "float_params"]
