"""The element-wise template: a layer group of local ops, tiled through the vector engine's
memory. Every tile loads the group's inputs (broadcast operands stay compact: their size-1
dimensions are read back with stride 0), runs each op's vector steps and stores the tensors
needed outside the group; intermediates never leave local memory.
"""

from ..errors import OutOfMemoryError
from ..instructions import Vector
from ..ops import REGISTRY
from ..ops.elementwise import In, compute_dtype
from .pipeline import pipeline, step_budget
from .route import copy
from .tiling import boxes, broadcast_view, choose_tile, nbytes, operand_box, sub_region


def lower_elementwise(ctx, group):
    graph, em = ctx.graph, ctx.em
    engine = ctx.engine("vector")
    shape = graph.tensors[group.nodes[0].outputs[0]].shape
    place = _assign_buffers(graph, group, shape)
    classes = sorted(set(place.values()))

    def tile_bytes(t, tile):
        tensor = graph.tensors[t]
        return nbytes(tensor.dtype, operand_box(tensor.shape, (0,) * len(tile), tile)[1])

    def class_bytes(tile):
        size = dict.fromkeys(classes, 0)
        for t, c in place.items():
            size[c] = max(size[c], tile_bytes(t, tile))
        return [size[c] for c in classes]

    def moved(tile):
        return sum(tile_bytes(t, tile) for t in group.loads + group.stores)

    alloc = em.allocators[engine.memory]
    fits = lambda tile: alloc.fits(class_bytes(tile) * ctx.slots)  # noqa: E731
    budget = step_budget(ctx, moved(shape), engine.memory)
    tile = (budget and choose_tile(shape, lambda t: fits(t) and moved(t) <= budget)) or choose_tile(shape, fits)
    if tile is None:
        raise OutOfMemoryError(f"{engine.memory}: group {group.nodes[0].name} needs {sum(class_bytes((1,) * len(shape))) * ctx.slots} bytes for a one-element tile; {alloc.free_bytes()} free")
    first = {c: next(t for t, k in place.items() if k == c) for c in classes}
    slots = [
        {c: em.alloc(engine.memory, size, f"{group.nodes[0].name}/{first[c]}.{s}") for c, size in zip(classes, class_bytes(tile))}
        for s in range(ctx.slots)
    ]
    users = {t: next(n.name for n in group.nodes if t in n.inputs) for t in group.loads}

    def region(t, bufs, extents):
        tensor = graph.tensors[t]
        return bufs[place[t]].region(tensor.dtype, operand_box(tensor.shape, (0,) * len(extents), extents)[1])

    def step(i, starts, extents):
        bufs = slots[i % ctx.slots]

        def load():
            for t in group.loads:
                s, e = operand_box(graph.tensors[t].shape, starts, extents)
                copy(em, sub_region(ctx.ddr_region(t), s, e), ctx.ddr[t], region(t, bufs, extents), bufs[place[t]], users[t])

        def compute():
            for node in group.nodes:
                opdef = REGISTRY[node.op]
                out = node.outputs[0]
                cdt = compute_dtype([graph.tensors[t].dtype for t in node.inputs], ctx.compute_map(node))
                ins = [bufs[place[t]] for t in node.inputs]
                for fn, operands in opdef.steps(node.params):
                    srcs = tuple(
                        broadcast_view(region(node.inputs[o.index], bufs, extents), extents) if isinstance(o, In) else o
                        for o in operands
                    )
                    instr = Vector(fn, region(out, bufs, extents), srcs, cdt, node.name)
                    em.emit(engine.name, instr, reads=ins, writes=(bufs[place[out]],))

        def store():
            for t in group.stores:
                copy(em, region(t, bufs, extents), bufs[place[t]], sub_region(ctx.ddr_region(t), starts, extents), ctx.ddr[t], graph.producer[t].name)

        return load, compute, store

    pipeline([step(i, s, e) for i, (s, e) in enumerate(boxes(shape, tile))], ctx.policy.double_buffer)
    for bufs in slots:
        for buf in bufs.values():
            em.release(buf)


def _assign_buffers(graph, group, shape):
    """tensor -> buffer class. An op writes in place over an input of the same shape and width
    that nothing later in the group reads and that isn't stored; otherwise it gets a new class."""
    last_read = {}
    for k, node in enumerate(group.nodes):
        for t in node.inputs:
            last_read[t] = k
    place, holder = {}, {}
    for t in group.loads:
        place[t] = holder_key = len(holder)
        holder[holder_key] = t
    for k, node in enumerate(group.nodes):
        out = graph.tensors[node.outputs[0]]
        reusable = [
            place[t] for t in node.inputs
            if last_read[t] == k and t not in group.stores and holder[place[t]] == t
            and graph.tensors[t].shape == shape and graph.tensors[t].nbytes == out.nbytes
        ]
        c = reusable[0] if reusable else len(holder)
        place[out.name] = c
        holder[c] = out.name
    return place
