"""The lowering's estimate of a tiled op's cycles, to choose its tiling by (isa/lower/conv.py,
isa/lower/matmul.py).

A tiling is a run of pipeline steps (isa/lower/pipeline.py). A step loads its operands into a
buffer slot and multiplies them; the last step of an output tile then finishes it (epilogue,
fused tail) and stores it. Each part is a chain of operations (`Op`) on the chip's engines,
priced as the machine prices them (`Pricer`, with isa/costs.py's arithmetic): a DMA transfer
hop by hop along its route, its bytes rounded up to the bursts of its runs, its latency and the
least bandwidth on the way; matrix and vector instructions by DESIGN.md's formulas with their
issue latency.

`Estimate` replays the steps in the order the pipeline emits them on in-order engine queues,
with the waits the emitter infers (isa/lower/emit.py):
- with double buffering step i+1's loads are emitted before step i's product, so the DMA
  fetches ahead; a step's loads wait for the product that last read their slot (step
  i - slots), a tile's fills (the tail's operands, into the tile's slot) for the store of the
  tile `slots` before (a kept block's load waits for no later product than the step's: the
  slot it refills was last read a row before);
- a tile's first product waits for the tile `acc_slots` before (the accumulators the tiles
  rotate, `slots` unless the plan says) to be finished (or stored, where the store reads the
  accumulator); with the accumulator in `acc_parts` parts, each stored as the last product
  fills it, as long as the parts' stores keep it waiting (`drain_stall`, isa/lower/matmul.py);
  stores queue behind the loads emitted before them;
- DDR is one more queue: each transfer's bytes pass through it at its bandwidth (shared by the
  units at work) once the transfer's latency is over, so engines moving data at once share it;
  a transfer replayed after another but ready before it fills DDR's idle time first (_Channel);
- on a chip whose cache of DDR holds the op's DDR inputs whole (sim/cache.py), the loads take
  DDR bandwidth for each byte once, the first loads replayed, and the later ones the cache's
  bandwidth (`read_once`); a hop through the cache memory takes its bandwidth too;
- within a chain, a copy's hop waits for the hop before it, a copy's first hop for the
  computing before it (not for other copies' hops), and only a hop into the step's buffers
  for the chain to be ready: one into a staging buffer runs ahead, as far as the buffers a
  memory rotates allow (route.stage_buffer; the plan says how many fit); a DMA engine that
  keeps several transfers in flight starts one's latency while those before it move their
  bytes, as the machine's queue does (sim/machine.py, _Flight).
The estimate is the makespan; `bound` is a lower bound of it (the busiest engine's or DDR's
total) and `floor` a cheaper lower bound of that (the products and the operands' bytes), so a
search (isa/lower/tiling.py, `least`) prices and replays only the candidates that can still
win. The machine's cycles are what count: tests/test_estimate.py holds the estimate to them.
"""

import collections
import itertools
import math
from typing import NamedTuple

from .. import dtypes
from ..costs import matmul_cycles, ports, side_shares, transfer_bandwidth, transfer_bytes, transfer_latency, vector_cycles
from ..instructions import TABLE_OPERANDS, dense
from ..ops.elementwise import OUT, In, Tmp
from .local import _Load, _strided
from .route import STAGE_SLOTS, route


class Op(NamedTuple):
    engine: str
    cycles: float  # the engine's time for it alone
    lead: float = 0  # a transfer's latency, before its bytes reach DDR
    ddr: float = 0  # cycles of DDR bandwidth its bytes take
    in_flight: int = 1  # a DMA engine's transfers under way at once (chips.Engine.in_flight)
    hop: int = -1  # a transfer's hop along its copy's route (0: the first); -1: not a transfer
    via: str = ""  # a hop into a staging buffer (not the copy's last): the memory of that buffer
    cache: float = 0  # cycles of the bandwidth of the chip's cache of DDR its bytes take (a staging hop's, a hit's)


class Work(NamedTuple):
    """A step's chains of Ops: load (into its slot), product (reads the slot), and on a tile's
    last step finish (reads the accumulator) and store; on its first, fills: the loads into the
    tile's own buffers (a bias, a fused tail's operands), emitted after the step's loads; kept:
    the loads into a part of a kept buffer (a convolution's input block, tiled's reuse_blocks),
    emitted before the step's loads, which wait for the products that last read that part
    rather than for the slot."""

    load: tuple
    product: tuple
    finish: tuple = ()
    store: tuple = ()
    fills: tuple = ()
    kept: tuple = ()


def chain(ops):
    """ops as a tuple, consecutive ones on one engine merged (they run back to back anyway),
    except an engine's that overlaps its transfers."""
    out = []
    for op in ops:
        if out and out[-1].engine == op.engine and op.in_flight == 1:
            last = out[-1]
            lead = last.lead if last.ddr or last.cache else last.cycles + op.lead
            out[-1] = Op(op.engine, last.cycles + op.cycles, lead, last.ddr + op.ddr, 1, last.hop, last.via, last.cache + op.cache)
        else:
            out.append(op)
    return tuple(out)


class Pricer:
    """Ops of instructions on a chip, DDR shared by `busy` units working at once. A search
    prices the same transfers for many candidates, so copies are remembered by what their cost
    depends on (not the addresses)."""

    def __init__(self, chip, busy=1):
        self.chip, self.memories = chip, chip.memories
        self.ddr_rate = chip.memories["ddr"].bandwidth / busy
        cache = chip.cache
        self.cache, self.cache_rate = (cache.name, cache.bandwidth / busy) if cache else (None, 1)
        self._copies = {}

    def copy(self, src, dst):
        """The Ops of a copy from region src to region dst along its route: the first hop
        reads src, the last writes dst, those between stage through dense buffers."""
        key = (src.mem, src.dtype, src.shape, src.strides, dst.mem, dst.dtype, dst.shape, dst.strides)
        if key not in self._copies:
            self._copies[key] = self._copy(src, dst)
        return list(self._copies[key])

    def _copy(self, src, dst):
        ops, here = [], src
        hops = route(self.chip, src.mem, dst.mem)
        for k, (name, a, b) in enumerate(hops):
            there = dst if k == len(hops) - 1 else dense(b, 0, here.dtype, here.shape)
            engine = self.chip.engines[name]
            moved = transfer_bytes(here, there, self.memories)
            lead = transfer_latency(engine, self.memories, (a, b))
            shares = side_shares(here, there)
            cycles = lead + math.ceil(moved / transfer_bandwidth(engine, self.memories, (a, b), shares))
            use = ports((a, b), shares)
            ddr = moved * use.get("ddr", 0) / self.ddr_rate
            cached = moved * use.get(self.cache, 0) / self.cache_rate
            ops.append(Op(name, cycles, lead, ddr, engine.in_flight, k, b if k < len(hops) - 1 else "", cached))
            here = there
        return ops

    def matmul(self, engine, M, K, N, dtype, conv=False):
        e = self.chip.engines[engine]
        return Op(engine, matmul_cycles(M, K, N, e.matrix, dtype, e.issue_latency, conv))

    def vector(self, engine, elements, dtype, fn):
        e = self.chip.engines[engine]
        return Op(engine, vector_cycles(elements, dtype, fn, e.vector, e.issue_latency))

    def steps(self, engine, steps, inputs, out, temps, elements):
        """The Ops of emit_steps (isa/lower/vector_steps.py) on tiles of `elements`: inputs,
        out and temps the dtypes of In(i), OUT and Tmp(k); each instruction is priced in its
        widest region operand's dtype, as the machine does."""
        ops = []
        for step in steps:
            widths = [out if step.dst == OUT else temps[step.dst.index]]
            tables = TABLE_OPERANDS.get(step.fn, ())
            for i, o in enumerate(step.operands):
                if i not in tables and isinstance(o, (In, Tmp)):
                    widths.append(inputs[o.index] if isinstance(o, In) else temps[o.index])
            ops.append(self.vector(engine, elements, max(widths, key=dtypes.itemsize), step.fn))
        return ops

    def tail(self, tail, engine, starts, extents):
        """(loads, compute, stores) Ops of a layer group's Tail (isa/lower/local.py) on one
        output tile: its operands' loads from their homes, its nodes' vector steps, its stores
        (none for what lives in the vector memory: the tail reads and writes it in place)."""
        graph, home = tail.graph, tail.ctx.home
        loads, compute, stores = [], [], []
        for key in tail.loads:
            if home[key.tensor].mem == engine.memory:
                continue  # read where it lives
            s, e, steps = key.node.box(key.index, starts, extents)
            tensor = graph.tensors[key.tensor]
            src = _strided(home[key.tensor], tensor, key.node.operand_shape(key.index), s, e, steps)
            loads += self.copy(src, dense(engine.memory, 0, tensor.dtype, e))
        elements = math.prod(extents)
        for k, n in enumerate(tail.nodes):
            source = [tail.source[k, i] for i in range(len(n.node.inputs))]
            inputs = [graph.tensors[src.tensor if isinstance(src, _Load) else src].dtype for src in source]
            compute += self.steps(engine.name, n.steps, inputs, n.out.dtype, n.temps, elements)
        in_place = tail.stored_in_place(engine.memory)
        for t in tail.stores:
            if t in in_place:
                continue  # computed there
            tensor = graph.tensors[t]
            dst = _strided(home[t], tensor, tail.shape, starts, extents, (1,) * len(extents))
            stores += self.copy(dense(engine.memory, 0, tensor.dtype, extents), dst)
        return loads, compute, stores


class Priced:
    """A template's plan that prices its candidate tilings' steps (a mixin): `piece` remembers
    the Ops of a part of a step by the extents it depends on, since a search meets the same
    input tile, weight block or epilogue in many candidates. Pieces are methods named
    `_price_<name>(pricer, *args)`."""

    def pricer(self, busy):
        """The Pricer for `busy` units at work (one per plan, so it remembers its copies)."""
        pricers = self.__dict__.setdefault("_pricers", {})
        if busy not in pricers:
            pricers[busy] = Pricer(self.ctx.chip, busy)
        return pricers[busy]

    def once(self, *tensors):
        """Estimate's `once` (read_once) for those of the op's inputs `tensors` that live in DDR."""
        return read_once(self.ctx.chip, [t for t in tensors if self.ctx.home[t.name].mem == "ddr"])

    def piece(self, busy, name, *args):
        cache = self.__dict__.setdefault("_pieces", {})
        key = (busy, name) + args
        if key not in cache:
            cache[key] = getattr(self, "_price_" + name)(self.pricer(busy), *args)
        return cache[key]

    def _price_tail(self, price, starts, extents):
        """(loads, compute, stores) of the plan's fused Tail (self.tail on self.vx) on a tile."""
        return tuple(tuple(ops) for ops in price.tail(self.tail, self.vx, starts, extents))


class Estimate:
    """The makespan of a run of steps (module docstring).

    work(key): a step's Work; counts: key -> how many steps do it; sequence(): the steps in
    order as (key, tile, first, last, after), tile numbering the unit's output tiles from 0,
    first and last whether the step is its tile's first and last, after the step whose products
    its Work.kept loads wait for (None: none)."""

    def __init__(self, work, counts, sequence, slots, store_reads_acc=False, floor=None, stage_slots=None, once=None, acc_slots=None,
                 acc_parts=1):
        self.work, self.counts, self.sequence = work, counts, sequence
        self.slots, self.store_reads_acc = slots, store_reads_acc
        self.acc_slots, self.acc_parts = acc_slots or slots, acc_parts
        self.stage_slots = stage_slots or {}  # memory -> the staging buffers a hop rotates there (default STAGE_SLOTS)
        self.once = once  # where a cache keeps the inputs: (DDR cycles of their bytes each read once, ddr / cache bandwidth) (read_once)
        self._floor, self._works, self._cycles = floor, None, None

    @property
    def works(self):
        if self._works is None:
            self._works = {key: self.work(key) for key in self.counts}
        return self._works

    def floor(self):
        """A lower bound of `bound`, cheaper to work out: from floor(key), some of a step's
        Ops (exact) and a lower bound of its DDR cycles; without one, `bound` itself."""
        if self._floor is None:
            return self.bound()
        busy = {"ddr": 0.0}
        for key, n in self.counts.items():
            ops, ddr = self._floor(key)
            for op in ops:
                busy[op.engine] = busy.get(op.engine, 0.0) + n * op.cycles
            busy["ddr"] += n * ddr
        if self.once is not None:
            busy["ddr"] = min(busy["ddr"], self.once[0])
        return max(busy.values())

    def bound(self):
        """A lower bound of the makespan: the busiest engine's total, or DDR's."""
        busy = {"ddr": 0.0, "cache": 0.0}
        reads = 0.0  # the loads' DDR cycles
        for key, n in self.counts.items():
            work = self.works[key]
            for op in (op for part in work for op in part):
                own = op.cycles - op.lead if op.in_flight > 1 else op.cycles  # an overlapped latency may cost nothing
                busy[op.engine] = busy.get(op.engine, 0.0) + n * own
                busy["ddr"] += n * op.ddr
                busy["cache"] += n * op.cache
            reads += n * sum(op.ddr for op in (*work.load, *work.fills))
        if self.once is not None and reads > self.once[0]:  # the rest hit
            busy["ddr"] -= reads - self.once[0]
            busy["cache"] += (reads - self.once[0]) * self.once[1]
        return max(busy.values())

    def cycles(self):
        if self._cycles is None:
            self._cycles = self._replay()
        return self._cycles

    def _replay(self):
        ddr, cache = _Channel(), _Channel()
        readers = {}  # memory -> the ends of the hops that read its staging buffers, latest last
        queued = {}  # engine -> (when its next Op's latency may start, the ends of its latest in_flight Ops)
        misses, ratio = self.once or (math.inf, 0.0)  # the loads' DDR cycles still to miss; DDR over cache bandwidth

        def run(ops, ready, reads=False):
            """Run a chain ready at `ready`; its end. An Op starts once its engine is free and
            the Op before it has ended, but a copy's first hop once the computing before it in
            the chain is done (not other copies' hops: its engine's queue orders it behind
            those on the same engine); only what writes the step's buffers waits for `ready`.
            Loads (reads) miss the cache until the inputs' bytes have each been read once."""
            nonlocal misses
            t = last = ready
            computed = 0.0  # the end of the computing in the chain so far
            staged = ""  # the memory the hop before staged into
            for engine, cycles, lead, need, in_flight, hop, via, cached in ops:
                if reads:
                    hit = max(0.0, need - misses)
                    need, cached, misses = need - hit, cached + hit * ratio, misses - (need - hit)
                if hop == 0:
                    t = computed
                if via:  # it waits for its staging buffer's last reader
                    read = readers.setdefault(via, collections.deque(maxlen=self.stage_slots.get(via, STAGE_SLOTS)))
                    if len(read) == read.maxlen:
                        t = max(t, read[0])
                else:
                    t = max(t, ready)
                t = queue(engine, cycles, lead, need, in_flight, cached, t)
                if hop < 0:
                    computed = t
                if staged and hop > 0:
                    readers[staged].append(t)
                staged = via
                if t > last:
                    last = t
            return last

        def queue(engine, cycles, lead, need, in_flight, cached, t):
            """An Op ready at t on its engine's in-order queue; its end. As the machine's DMA
            queue (sim/machine.py, _Flight): a transfer's latency starts after the previous
            one's and once fewer than in_flight transfers are under way, its bytes move after
            the previous transfer's (with in_flight 1: the Op starts when the last has ended)."""
            next_lead, ends = queued.get(engine) or queued.setdefault(engine, (0.0, collections.deque(maxlen=in_flight)))
            start = max(t, next_lead, ends[0] if len(ends) == in_flight else 0.0)
            begin = max(start + lead, ends[-1] if ends else 0.0)
            end = begin + cycles - lead
            if need:
                end = max(end, ddr.take(begin, need))
            if cached:
                end = max(end, cache.take(begin, cached))
            ends.append(end)
            queued[engine] = (start + lead, ends)
            return end

        works, slots, accs, parts = self.works, self.slots, self.acc_slots, self.acc_parts
        seq = list(self.sequence())
        loaded, product, stored, freed = [0.0] * len(seq), [0.0] * len(seq), {}, {}  # freed: when a tile's accumulator may be written again

        def load(i):
            key, tile, first, _, after = seq[i]
            ready = product[i - slots] if i >= slots else 0.0
            if works[key].kept:
                loaded[i] = run(works[key].kept, product[after] if after is not None else 0.0, True)
            loaded[i] = max(loaded[i], run(works[key].load, ready, True))
            if first and works[key].fills:
                filled = max(ready, stored[tile - slots]) if tile >= slots else ready
                loaded[i] = max(loaded[i], run(works[key].fills, filled, True))

        double = slots > 1
        if double and seq:
            load(0)
        for i, (key, tile, first, last, _) in enumerate(seq):
            if not double:
                load(i)
            elif i + 1 < len(seq):
                load(i + 1)
            ready = loaded[i]
            if first and tile >= accs:
                ready = max(ready, freed[tile - accs])
            work = works[key]
            product[i] = run(work.product, ready)
            if last:
                finished = run(work.finish, product[i])
                stored[tile] = run(work.store, finished)
                stall = drain_stall(sum(op.cycles for op in work.product), stored[tile] - finished, parts)
                freed[tile] = finished + stall if self.store_reads_acc else finished
        return max((ends[-1] for _, ends in queued.values()), default=0.0)



def drain_stall(product, store, parts):
    """How long after a tile's last product ends the next tile's first product, of as many
    cycles, must wait to start, where the accumulator both use is filled and stored in `parts`
    equal parts of rows: part j is stored once the last product has done it and the store of
    part j - 1 is over, and the next product may write part j once that store is over. One
    part: the whole store."""
    start, stored, stall = -product, -product, 0.0  # cycles from the last product's end
    for j in range(parts):
        stored = max(stored, start + (j + 1) * product / parts) + store / parts
        stall = max(stall, stored - j * product / parts)
    return stall


def read_once(chip, tensors):
    """Estimate's `once` for an op whose DDR inputs are `tensors`: on a chip whose cache of DDR
    can hold them whole, (the DDR cycles reading each of their bytes once takes, at the whole DDR
    bandwidth: the units' loads together; DDR's bandwidth over the cache's); None on a chip
    without one, or where they do not fit."""
    cache = chip.cache
    if cache is None:
        return None
    nbytes = sum(t.nbytes for t in tensors)
    if nbytes > cache.capacity:
        return None
    ddr = chip.memories["ddr"].bandwidth
    return nbytes / ddr, ddr / cache.bandwidth


class _Channel:
    """DDR as the estimate sees it: transfers take its bandwidth one after another, in the order
    they are replayed, but one replayed later whose bytes could begin earlier first fills the
    time DDR stood idle before (as transfers that overlap in the machine share the bandwidth and
    both progress). Only the latest GAPS idle spans are kept."""

    GAPS = 16

    def __init__(self):
        self.end = 0.0  # when the bandwidth taken so far is done
        self.gaps = []  # idle (start, end) spans before self.end, in order

    def take(self, begin, need):
        """When `need` cycles of bandwidth, taken from cycle `begin` on, are done."""
        kept = []
        for a, b in self.gaps:
            start = max(a, begin)
            if need and start < b:
                use = min(b - start, need)
                need -= use
                done = start + use
                kept += [g for g in ((a, start), (done, b)) if g[1] > g[0]]
            else:
                kept.append((a, b))
        if not need:
            self.gaps = kept
            return done
        if begin > self.end:
            kept.append((self.end, begin))
        self.gaps = kept[-self.GAPS:]
        self.end = max(self.end, begin) + need
        return self.end


def tiled(work, axes, reduction, block, units, slots, store_reads_acc=False, repeat=1, floor=None, reuse=None, stage_slots=None, once=None,
          acc_slots=None, acc_parts=1, reuse_blocks=False):
    """The Estimate of a tiled op's steps on the first (busiest) of `units` units, the output
    tiles dealt among them in runs of consecutive ones (isa/lower/pipeline.deal).

    axes: per dimension of the output, a class per tile position in order (tiles of one class
    in every dimension do the same work); repeat: how many times the whole grid of tiles is
    walked (groups, batch), outermost; each tile walks a reduction of `reduction` in blocks of
    `block`; work(busy, kind, block, first, last): the Work of one step, kind the tuple of the
    tile's classes, busy the units at work (they share DDR); floor(busy, kind, block, first,
    last): the step's Estimate.floor terms, or None.

    reuse: an operand that depends only on the tile's position along the first `reuse` axes
    (and the repeat) is loaded whole with a tile's first block and stays while consecutive
    tiles share it (a matrix product's left row block): the steps then carry one more argument
    for work and floor, fresh, whether they load it (a unit's first tile does); with
    reuse_blocks, block by block with every step of the tile that loads it (a convolution's
    input, channel block by channel block). stage_slots, once, acc_slots and acc_parts:
    Estimate's."""
    count = repeat * math.prod(len(a) for a in axes)
    # the units share DDR in proportion to their tiles: the busiest has ceil(count / units) of
    # them, and DDR moves every unit's bytes meanwhile
    busy = count / -(-count // units)
    blocks = -(-reduction // block)
    edge = reduction - (blocks - 1) * block
    reusing = reuse is not None

    def part(k):
        return (edge if k == blocks - 1 else block, k == 0, k == blocks - 1)

    # the parts of a tile's walk: its first and last block, and those between (all whole)
    parts = {part(0): 1}
    if blocks > 1:
        parts[part(blocks - 1)] = 1
    if blocks > 2:
        parts[part(1)] = blocks - 2

    def tiles():
        """(kind, fresh) of the unit's tiles in order."""
        positions = itertools.product(range(repeat), *(range(len(a)) for a in axes))
        before = None
        for at in itertools.islice(positions, -(-count // units)):
            shared = at[:1 + reuse] if reusing else None
            yield tuple(a[i] for a, i in zip(axes, at[1:])), shared is None or shared != before
            before = shared

    if units > 1:
        mine = collections.Counter(tiles())
    else:  # the classes per dimension combined in every way, without walking every tile
        per_axis = [collections.Counter(a) for a in axes]
        mine = {}
        for kind in itertools.product(*per_axis):
            n = repeat * math.prod(c[k] for c, k in zip(per_axis, kind))
            # fresh: the tiles first along every axis past `reuse`
            fresh = n if not reusing else repeat * math.prod(per_axis[d][k] for d, k in enumerate(kind[:reuse])) * all(
                k == axes[d][0] for d, k in enumerate(kind) if d >= reuse)
            mine[kind, True] = fresh
            mine[kind, False] = n - fresh
    def key(kind, p, fresh):
        """A step's key: its tile's classes, its block, and where an operand is reused whether
        the step loads it."""
        return (kind,) + p + ((fresh and (p[1] or reuse_blocks),) if reusing else ())

    counts = {}
    for (kind, fresh), n in mine.items():
        if n:
            for p, m in parts.items():
                step = key(kind, p, fresh)
                counts[step] = counts.get(step, 0) + n * m

    def sequence():
        """(key, tile, first, last, after): after, for a step that loads a kept part (reuse_blocks),
        the last step that read that part (the kept buffers rotate over `slots`, one per loaded
        tile), else None."""
        read, loaded = {}, 0  # (kept buffer, block) -> the last step reading it; tiles that loaded one
        for t, (kind, fresh) in enumerate(tiles()):
            loaded += fresh
            for k in range(blocks):
                p, part_of = part(k), ((loaded - 1) % slots, k)
                step = key(kind, p, fresh)
                yield step, t, p[1], p[2], read.get(part_of) if reuse_blocks and step[-1] else None
                if reuse_blocks:
                    read[part_of] = t * blocks + k

    return Estimate(lambda key: work(busy, *key), counts, sequence, slots, store_reads_acc,
                    floor and (lambda key: floor(busy, *key)), stage_slots, once, acc_slots, acc_parts)
