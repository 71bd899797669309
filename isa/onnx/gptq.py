"""The gptq import pass: a MatMul whose right operand a GPTQ or AWQ export unpacks in the graph
from int32 words becomes one matrix_mul_a16 (isa/ops/weight_only.py), as the weight_only pass
does for DequantizeLinear (weight_only.py), rather than a float weight computed at import.

Such an export (a quantized torch layer's dequantization traced into ONNX) writes, per product,

    codes  = BitwiseAnd(words >> [0, b, ..., 32 - b], 2^b - 1)                   (b = 4 or 8)
    weight = Mul(scales per row of K, Cast(codes) - zero points per row of K)    ahead of MatMul(x, weight)

with Unsqueeze / Expand / Reshape / Cast around the steps, the zero points unpacked from qzeros
the same way (often + 1: old GPTQ stores them minus one) or one constant, the per-group tables
expanded to rows of K by Unsqueeze / Expand / Tile / Reshape or a Gather by g_idx. The right
shift (SHIFTS) is a BitShift RIGHT of unsigned words; torchlib's (torch.onnx's dynamo exporter)
arithmetic shift of int32 words, Where(Less(words, 0), BitShift | its sign fill, BitShift); or
the TorchScript exporter's (torch.onnx's symbolic_opset11 __rshift_, any signed words, AutoGPTQ's
int32 qweight) Div(words, Cast(Pow(2.0, Cast(shift, FLOAT)), words' type)). Matched here:
MatMul(x, [Reshape | Cast]* Mul(s, [Cast]* Sub(c, z) or c)), either operand order, x float16 or
bfloat16, where c is [Reshape | Cast | Squeeze | Unsqueeze]* BitwiseAnd by 2^b - 1 of such shifts
(through those steps, a Gather or a Transpose: AWQ reorders the fields of a word; or torchlib's
Where, Less, BitwiseOr and BitwiseNot) by exactly the shifts 0, b, ..., 32 - b (a Div's integer
divisors 2^shift), in any order, of words reached from an int32 or uint32 constant, and every
value the weight is computed from is a constant. The codes, zero points and scales are then
computed once by the ONNX reference (onnx.reference: the graph's own semantics, whatever its
reshapes), broadcast together and read as [K, N]; the group is the largest number of rows of K
over which the scales and zero points do not change (even for 4 bits), and the weight the graph
computes must equal (codes - zero points) x scales within its dtype's precision.

A Div truncates toward zero where torch's >> of signed words floors (pytorch issue 191014): the
codes are the words' fields only where no negative word has a bit set below a divisor it is
divided by (_floors, on the words and divisors as computed); elsewhere the graph computes other
codes than its words hold, and it stays as it was. A g_idx that reorders K (act-order GPTQ: the
tables reach rows of K by a Gather of a constant g_idx of K entries, not sorted) is taken as
vLLM's gptq_marlin takes it (g_idx_sort_indices, permute_cols_kernel): the rows of K sorted by
g_idx (stably), the groups then in order, and x's columns gathered in that order ahead of the
product (an ONNX Gather along x's last axis, one for the products of one x in one order); a chip
without a gather of x's dtype refuses it when lowered. Another form (other shifts, divisors or
masks, a graph input in the weight's inputs, a weight the tables do not reproduce) stays as it
was: the constants pass then computes its float weight once, as before.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import ml_dtypes
import numpy as np
import onnx
from onnx import helper

from .. import dtypes
from .builder import node_attr
from .inference import static_shapes
from .registry import DEFAULT_DOMAINS
from .weight_only import FLOATS, a16_node, stored

if TYPE_CHECKING:
    from numpy.typing import NDArray
    from onnx import NodeProto

    from .importer import Source
    from .passes import Graph

WORD_BITS = 32
MASKS = {15: 4, 255: 8}  # the BitwiseAnd's mask -> bits a code
AROUND = ("Reshape", "Cast", "Squeeze", "Unsqueeze")  # steps that move codes without changing them
# steps between the shifts and the mask: a Gather or Transpose reordering fields (AWQ's order), and
# the arithmetic right shift of signed words as torchlib (torch.onnx's dynamo exporter) writes it:
# Where(Less(words, 0), logical shift | ~(0xFFFFFFFF >> shift), logical shift)
SHIFTED = (*AROUND, "Gather", "Transpose", "Where", "Less", "BitwiseOr", "BitwiseNot")
WORDS = ("Cast", "Unsqueeze", "Reshape", "Expand", "Tile")  # steps between the words and the shift
# a right shift: BitShift RIGHT, or the TorchScript exporter's Div by 2^shift (torch.onnx's
# symbolic_opset11 __rshift_, for every signed dtype)
SHIFTS = ("BitShift", "Div")


def rewrite(source: Source, g: Graph) -> str:
    """Rewrite every such product of g (a passes.Graph of source); what changed, for the note."""
    if not any(n.op_type == "BitwiseAnd" for n in g.nodes):
        return "nothing to rewrite"
    shapes, elems = static_shapes(source)
    done, reordered = 0, 0
    gathered: dict[tuple[str, bytes], str] = {}  # (x, order) -> x's columns in that order
    for node in list(g.nodes):
        if node.op_type != "MatMul" or not g.alive(node) or node.domain not in DEFAULT_DOMAINS:
            continue
        x_elem = elems.get(node.input[0])
        if x_elem not in FLOATS or len(shapes.get(node.input[0], ())) < 2 or not g.private(node.input[1]):
            continue
        found = _unpacked(g, node, shapes[node.input[0]][-1], dtypes.np_dtype(FLOATS[x_elem]))
        if found is None:
            continue
        bits, group, arrays, chain, order = found
        a16 = a16_node(source, node, bits, group, arrays)
        made = [a16] if order is None else _reorder(source, a16, order, gathered)
        g.replace([node], made)
        _drop_unread(g, chain)
        done += 1
        reordered += order is not None
    g.commit()
    if not done:
        return "nothing to rewrite"
    orders = f" ({reordered} of them act-order: x's columns gathered in the order of their groups)" if reordered else ""
    return f"{done} MatMul(s) of int32-packed codes unpacked in the graph became matrix_mul_a16{orders}"


def _unpacked(g: Graph, matmul: NodeProto, k: int, dtype: np.dtype) -> \
        tuple[int, int, list[NDArray], list[NodeProto], NDArray[np.int64] | None] | None:
    """(bits, group, [stored weight, scales, zero terms] of the op, the nodes computing the
    weight, the order of K the op takes or None for K in order) for MatMul matmul whose right
    operand is an unpacked weight (the module docstring), else None."""
    weight = matmul.input[1]
    mul = g.producer.get(_through(g, weight, ("Reshape", "Cast")))
    if mul is None or mul.op_type != "Mul" or mul.domain not in DEFAULT_DOMAINS:
        return None
    sides = [(s, _codes_less_zero(g, d)) for s, d in ((mul.input[0], mul.input[1]), (mul.input[1], mul.input[0]))]
    found = next(((s, d) for s, d in sides if d is not None), None)
    chain = _ancestors(g, weight)
    if found is None or chain is None:
        return None
    s_name, (bits, c_name, z_name, divs) = found
    tables = [s_name] + ([z_name] if z_name else [])
    # the words and divisors of each Div, evaluated with the rest to check that it shifts
    values = _evaluate(g, chain, [c_name, weight, *tables, *(i for d in divs for i in d.input[:2])])
    if values is None or not all(_floors(a, d) for a, d in zip(values[2 + len(tables)::2], values[3 + len(tables)::2])):
        return None
    codes, w, scale = values[:3]
    z = values[3] if z_name else np.zeros((), np.float32)
    if w.ndim != 2 or w.shape[0] != k or codes.dtype.kind not in "iu" or codes.size == 0 or codes.min() < 0 or codes.max() >= 2 ** bits:
        return None
    shape = np.broadcast_shapes(codes.shape, scale.shape, z.shape)
    if math.prod(shape) != w.size:
        return None
    c, s, zk = (np.broadcast_to(a, shape).reshape(w.shape) for a in (codes, scale, z))
    order = _act_order(g, tables, k)
    if order is not None:
        c, s, zk, w = c[order], s[order], zk[order], w[order]
    group = _group(s, zk, bits)
    if group is None:
        return None
    s_group, z_group = s[::group].astype(np.float32), zk[::group].astype(np.float32)
    if not _reproduces(w, c, np.repeat(s_group, group, axis=0), np.repeat(z_group, group, axis=0)):
        return None
    return bits, group, stored(c, 128 if bits == 8 else 0, z_group, s_group, dtype, bits), chain, order


def _floors(words: NDArray, divisors: NDArray) -> bool:
    """Whether ONNX's integer Div of words by divisors (powers of two) equals their floor division,
    torch's >> of signed words, whose fields the mask then takes as a logical shift's: Div
    truncates toward 0 (the ONNX spec, onnxruntime), one more than the floor for a negative word
    with a bit set below its divisor, which the mask keeps (a code one more, mod 2^b)."""
    return words.dtype.kind != "i" or not np.any((words < 0) & (words & (divisors - 1) != 0))


def _reproduces(w: NDArray, codes: NDArray, scale: NDArray[np.float32], zero: NDArray[np.float32]) -> bool:
    """Whether w equals (codes - zero) x scale within its dtype's precision (the Casts of the
    graph's steps applied); in place, the arrays being a weight's size."""
    exact = codes.astype(np.float32)
    exact -= zero
    exact *= scale
    err = w.astype(np.float32)
    err -= exact
    np.abs(err, out=err)
    tol = np.abs(exact, out=exact)
    tol *= 2
    tol += np.abs(scale, out=scale)
    tol *= float(ml_dtypes.finfo(w.dtype).eps) if w.dtype.name in dtypes.FLOATS else 0.0
    return bool(np.all(err <= tol))


def _codes_less_zero(g: Graph, name: str) -> tuple[int, str, str | None, list[NodeProto]] | None:
    """(bits, codes, zero points or None, the Divs shifting the words) where `name` is [Cast]*
    Sub(c, z) or c with c unpacked codes (_unpack_bits), else None."""
    d = _through(g, name, ("Cast",))
    sub = g.producer.get(d)
    c_name, z_name = (sub.input[0], sub.input[1]) if sub is not None and sub.op_type == "Sub" else (d, None)
    c_name = _through(g, c_name, ("Cast",))
    found = _unpack_bits(g, c_name)
    return None if found is None else (found[0], c_name, z_name, found[1])


def _through(g: Graph, name: str, kinds: tuple[str, ...]) -> str:
    """The value reached from `name` back through the producers of those kinds."""
    node = g.producer.get(name)
    while node is not None and node.op_type in kinds and node.domain in DEFAULT_DOMAINS and node.input:
        name = node.input[0]
        node = g.producer.get(name)
    return name


def _unpack_bits(g: Graph, codes: str) -> tuple[int, list[NodeProto]] | None:
    """(b, the Divs among the shifts) where `codes` is BitwiseAnd(a right shift of words by [0, b,
    ..., 32 - b], 2^b - 1) (the module docstring), else None."""
    node = g.producer.get(_through(g, codes, AROUND))
    if node is None or node.op_type != "BitwiseAnd":
        return None
    for data, mask_name in ((node.input[0], node.input[1]), (node.input[1], node.input[0])):
        mask = _constant(g, mask_name)
        if mask is None or mask.size == 0 or not np.all(mask == mask.reshape(-1)[0]) or int(mask.reshape(-1)[0]) not in MASKS:
            continue
        bits = MASKS[int(mask.reshape(-1)[0])]
        shifts = _shifts(g, data) or []
        amounts = [_amounts(g, shift) for shift in shifts]
        if not shifts or any(a is None or not np.array_equal(np.unique(a), np.arange(0, WORD_BITS, bits)) for a in amounts):
            return None
        words = [_constant(g, _through(g, shift.input[0], WORDS)) for shift in shifts]
        if not any(w is not None and w.size > 1 and w.dtype in (np.int32, np.uint32) for w in words):
            return None
        return bits, [shift for shift in shifts if shift.op_type == "Div"]
    return None


def _amounts(g: Graph, shift: NodeProto) -> NDArray | None:
    """The amounts right shift `shift` moves its words by: a BitShift RIGHT's, or log2 of the
    divisors of a Div by integer powers of two (the TorchScript exporter's right shift of signed
    words, which shifts them where _floors holds, checked once they are computed), else None."""
    amounts = _constant(g, shift.input[1])
    if amounts is None or amounts.dtype.kind not in "iu":
        return None
    if shift.op_type == "BitShift":
        return amounts if node_attr(shift, "direction") == b"RIGHT" else None
    if amounts.size == 0 or np.any(amounts <= 0) or np.any(amounts & (amounts - 1)):
        return None
    return np.log2(amounts.astype(np.float64)).astype(np.int64)


def _shifts(g: Graph, name: str) -> list[NodeProto] | None:
    """The right shifts (SHIFTS) `name` is computed from through SHIFTED and WORDS steps and
    constants, or None where another kind of step is among them."""
    found: list[NodeProto] = []
    seen: set[int] = set()
    todo = [name]
    while todo:
        value = todo.pop()
        node = g.producer.get(value)
        if node is None or id(node) in seen or g.value(value) is not None:
            continue
        seen.add(id(node))
        if node.domain not in DEFAULT_DOMAINS or node.op_type not in (*SHIFTS, *SHIFTED, *WORDS):
            return None
        if node.op_type in SHIFTS:
            found.append(node)
        else:
            todo.extend(i for i in node.input if i)
    return found


def _constant(g: Graph, name: str) -> NDArray | None:
    """The value of `name` where it is computed from constants alone, else None."""
    value = g.value(name)
    if value is not None:
        return np.asarray(value)
    nodes = _ancestors(g, name)
    values = _evaluate(g, nodes, [name]) if nodes is not None else None
    return values[0] if values is not None else None


def _ancestors(g: Graph, name: str) -> list[NodeProto] | None:
    """The nodes `name` is computed by, in graph order, or None where a graph input (not a
    constant) is among its inputs or a node holds a subgraph or is of another domain."""
    found: dict[int, NodeProto] = {}
    todo = [name]
    while todo:
        value = todo.pop()
        if not value or value in g.source.weights:
            continue
        node = g.producer.get(value)
        if node is None or node.domain not in DEFAULT_DOMAINS or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                                                                     for a in node.attribute):
            return None
        if id(node) not in found:
            found[id(node)] = node
            todo.extend(node.input)
    return [n for n in g.nodes if id(n) in found]


def _evaluate(g: Graph, nodes: list[NodeProto], names: list[str]) -> list[NDArray] | None:
    """The values `names` computed by nodes from their constant inputs by the ONNX reference, or
    None where it cannot compute them."""
    from onnx.reference import ReferenceEvaluator

    made = {o for n in nodes for o in n.output}
    leaves = sorted({i for n in nodes for i in n.input if i and i not in made})
    weights = g.source.weights
    inputs = [helper.make_tensor_value_info(i, weights.type(i)[1], weights.type(i)[0]) for i in leaves]
    graph = helper.make_graph(nodes, "weight", inputs, [helper.make_value_info(n, onnx.TypeProto()) for n in names])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", g.source.opset)])
    try:
        outs = ReferenceEvaluator(model).run(None, {i: weights[i] for i in leaves})
    except Exception:  # noqa: BLE001 - the reference's own errors, of any type
        return None
    return [np.asarray(o) for o in outs]


def _act_order(g: Graph, tables: list[str], k: int) -> NDArray[np.int64] | None:
    """The rows of K sorted by group (stably) where the scales or zero points reach rows of K by a
    Gather along axis 0 of a constant g_idx of K entries that reorders K (act-order GPTQ), else
    None: x @ w is x's columns in that order times w's rows in that order."""
    for node in (n for name in tables for n in _ancestors(g, name) or ()):
        if node.op_type == "Gather" and len(node.input) > 1 and node_attr(node, "axis", 0) == 0:
            idx = _constant(g, node.input[1])
            if idx is not None and idx.size == k and np.any(np.diff(idx.reshape(-1)) < 0):
                return np.argsort(idx.reshape(-1), kind="stable").astype(np.int64)
    return None


def _reorder(source: Source, a16: NodeProto, order: NDArray[np.int64], gathered: dict[tuple[str, bytes], str]) -> list[NodeProto]:
    """[Gather of x's columns in `order`, a16 reading it], or [a16] reading the Gather an earlier
    product of the same x in the same order made (gathered: (x, order) -> the gathered x)."""
    key = (a16.input[0], order.tobytes())
    made = []
    if key not in gathered:
        gathered[key] = f"{a16.name}.a16_x"
        source.weights[f"{a16.name}.a16_order"] = order
        made.append(helper.make_node("Gather", [a16.input[0], f"{a16.name}.a16_order"], [gathered[key]], name=gathered[key], axis=-1))
    a16.input[0] = gathered[key]
    return [*made, a16]


def _drop_unread(g: Graph, chain: list[NodeProto]) -> None:
    """Remove the nodes of chain (in graph order) whose results nothing reads any more."""
    for node in reversed(chain):
        if not any(g.readers[o] or o in g.outputs for o in node.output if o):
            g.replace([node], [])


def _group(scale: NDArray, zero: NDArray, bits: int) -> int | None:
    """The largest number of rows dividing K over which scale and zero ([K, N]) do not change,
    even for 4-bit codes (two a byte), else None."""
    k = scale.shape[0]
    changes = np.flatnonzero(np.any((scale[1:] != scale[:-1]) | (zero[1:] != zero[:-1]), axis=1)) + 1
    group = math.gcd(k, *changes.tolist())
    return None if bits == 4 and group % 2 else group


__all__ = ["rewrite"]
