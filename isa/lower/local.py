"""The element-wise template: a layer group of local ops, tiled through the vector engine's
memory. Every tile loads the group's inputs, runs each op's vector steps and stores the
tensors needed outside the group; intermediates never leave local memory.

An op says how a tile of its output reads each input (`input_box`): broadcast operands stay
compact (their size-1 dimensions are read back with stride 0), stride ops load every k-th
element, a lookup table is loaded whole. Inputs read the same way share one load.
"""

from dataclasses import dataclass

from ..errors import OutOfMemoryError
from ..instructions import Region, dense
from ..ops import REGISTRY
from .pipeline import pipeline, step_budget
from .route import copy
from .tiling import boxes, broadcast_view, choose_tile, nbytes
from .vector_steps import emit_steps


@dataclass(frozen=True, eq=False)
class _Load:
    """A tensor read from DDR for the group, in one way (see OpDef.load_kind)."""

    tensor: str
    node: object  # the first node reading it this way
    index: int  # its operand position there
    kind: tuple


class _Node:
    """A node of the group with what its op says about it."""

    def __init__(self, graph, node, compute):
        self.node, self.opdef, self.compute = node, REGISTRY[node.op], compute
        ins = [graph.tensors[t] for t in node.inputs]
        self.shapes = [t.shape for t in ins]
        self.out = graph.tensors[node.outputs[0]]
        self.steps = self.opdef.steps(node.params, [t.dtype for t in ins], self.out.dtype)
        self.temps = self.opdef.temps(node.params, [t.dtype for t in ins], self.out.dtype)

    def operand_shape(self, i):
        return self.opdef.operand_shape(i, self.shapes)

    def box(self, i, starts, extents):
        return self.opdef.input_box(i, self.operand_shape(i), starts, extents, self.node.params)


def lower_elementwise(ctx, group):
    graph, em = ctx.graph, ctx.em
    engine = ctx.engine("vector")
    shape = graph.tensors[group.nodes[0].outputs[0]].shape
    nodes = [_Node(graph, n, ctx.compute_map(n)) for n in group.nodes]
    produced = {n.out.name for n in nodes}
    loads, source = _loads(nodes, produced)  # source[(node index, operand)] = _Load or tensor name
    place = _assign_buffers(graph, group, nodes, loads, source, shape)
    zero = (0,) * len(shape)

    def value_bytes(key, tile):
        if isinstance(key, _Load):
            n = next(x for x in nodes if x.node is key.node)
            return nbytes(graph.tensors[key.tensor].dtype, n.box(key.index, zero, tile)[1])
        if isinstance(key, tuple):  # ("tmp", k, dtype)
            return nbytes(key[2], tile)
        return nbytes(graph.tensors[key].dtype, tile)

    classes = sorted(set(place.values()))

    def class_bytes(tile):
        size = dict.fromkeys(classes, 0)
        for key, c in place.items():
            size[c] = max(size[c], value_bytes(key, tile))
        return [size[c] for c in classes]

    def moved(tile):
        return sum(value_bytes(k, tile) for k in loads) + sum(value_bytes(t, tile) for t in group.stores)

    alloc = em.allocators[engine.memory]
    fits = lambda tile: alloc.fits(class_bytes(tile) * ctx.slots)  # noqa: E731
    budget = step_budget(ctx, moved(shape), engine.memory)
    tile = (budget and choose_tile(shape, lambda t: fits(t) and moved(t) <= budget)) or choose_tile(shape, fits)
    if tile is None:
        need = sum(class_bytes((1,) * len(shape))) * ctx.slots
        raise OutOfMemoryError(f"{engine.memory}: layer group {group.nodes[0].name} needs {need} bytes for a one-element tile; {alloc.free_bytes()} free")
    label = {c: next(_label(k) for k, v in place.items() if v == c) for c in classes}
    slots = [
        {c: em.alloc(engine.memory, size, f"{group.nodes[0].name}/{label[c]}.{s}") for c, size in zip(classes, class_bytes(tile))}
        for s in range(ctx.slots)
    ]

    def step(i, starts, extents):
        bufs = slots[i % ctx.slots]
        local = {}  # load or tensor -> its region in this tile

        def load():
            for key in loads:
                n = next(x for x in nodes if x.node is key.node)
                s, e, steps = n.box(key.index, starts, extents)
                buf = bufs[place[key]]
                local[key] = buf.region(graph.tensors[key.tensor].dtype, e)
                src = _strided(ctx.ddr_region(key.tensor).addr, graph.tensors[key.tensor], n.operand_shape(key.index), s, e, steps)
                copy(em, src, ctx.ddr[key.tensor], local[key], buf, key.node.name)

        def compute():
            for k, n in enumerate(nodes):
                operands = []
                for i, t in enumerate(n.node.inputs):
                    src = source[k, i]
                    if isinstance(src, _Load):
                        region = local[src] if i in n.opdef.table_inputs else broadcast_view(local[src], extents)
                    else:
                        region = bufs[place[src]].region(graph.tensors[src].dtype, extents)
                    operands.append((region, bufs[place[src]]))
                out = bufs[place[n.out.name]]
                temps = [(bufs[place[("tmp", j, d)]].region(d, extents), bufs[place[("tmp", j, d)]]) for j, d in enumerate(n.temps)]
                emit_steps(em, engine.name, n.node.name, n.steps, operands, (out.region(n.out.dtype, extents), out), temps, n.compute)

        def store():
            for t in group.stores:
                buf = bufs[place[t]]
                dst = _strided(ctx.ddr[t].addr, graph.tensors[t], shape, starts, extents, (1,) * len(shape))
                copy(em, buf.region(graph.tensors[t].dtype, extents), buf, dst, ctx.ddr[t], graph.producer[t].name)

        return load, compute, store

    pipeline([step(i, s, e) for i, (s, e) in enumerate(boxes(shape, tile))], ctx.policy.double_buffer)
    for bufs in slots:
        for buf in bufs.values():
            em.release(buf)


def _label(key):
    if isinstance(key, _Load):
        return key.tensor
    return f"tmp{key[1]}" if isinstance(key, tuple) else key


def _strided(addr, tensor, shape, starts, extents, steps):
    """The DDR region of `tensor` (viewed with `shape`) that a box with steps covers."""
    full = dense("ddr", addr, tensor.dtype, shape)
    item = full.nbytes // max(full.size, 1)
    offset = sum(s * st for s, st in zip(starts, full.strides)) * item
    return Region("ddr", addr + offset, tensor.dtype, tuple(extents), tuple(st * k for st, k in zip(full.strides, steps)))


def _loads(nodes, produced):
    """The group's distinct loads, and for each (node, operand) its load or in-group tensor."""
    loads, source = {}, {}
    for k, n in enumerate(nodes):
        for i, t in enumerate(n.node.inputs):
            if t in produced:
                source[k, i] = t
                continue
            kind = n.opdef.load_kind(i, n.shapes, n.node.params)
            key = loads.setdefault((t, kind), _Load(t, n.node, i, kind))
            source[k, i] = key
    return list(loads.values()), source


def _assign_buffers(graph, group, nodes, loads, source, shape):
    """value -> buffer class. A node writes in place over an operand of the same shape and width
    that nothing later in the group reads and that isn't stored; scratch tiles are shared by
    position and dtype; everything else gets a class of its own."""
    last_read = {}
    for k, n in enumerate(nodes):
        for i in range(len(n.node.inputs)):
            last_read[source[k, i]] = k
    place, holder = {}, {}

    def new(key):
        place[key] = len(holder)
        holder[place[key]] = key

    for key in loads:
        new(key)
    for k, n in enumerate(nodes):
        for j, dtype in enumerate(n.temps):
            if ("tmp", j, dtype) not in place:
                new(("tmp", j, dtype))
        out = n.out
        reusable = [
            place[src] for i, src in ((i, source[k, i]) for i in range(len(n.node.inputs)))
            if last_read[src] == k and holder[place[src]] == src and not (isinstance(src, str) and src in group.stores)
            and i not in n.opdef.table_inputs and _full_width(graph, src, shape, out)
        ]
        if reusable:
            place[out.name] = reusable[0]
            holder[reusable[0]] = out.name
        else:
            new(out.name)
    return place


def _full_width(graph, src, shape, out):
    """Whether value src fills a whole tile with out's element width."""
    tensor = graph.tensors[src.tensor if isinstance(src, _Load) else src]
    plain = not isinstance(src, _Load) or src.kind == ("view", shape)
    return plain and tensor.shape == shape and tensor.nbytes == out.nbytes

