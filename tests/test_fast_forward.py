"""sim/forward.py: timing mode fast-forwards through a program's replayed blocks and gives what
running every instruction gives: the same cycles, events, buffer lifetimes and ddr traffic; where
the blocks around the cut do not repeat, or the cache could tell the blocks apart, it runs whole."""

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

import chips
import isa
import sim
import sim.machine
from isa.instructions import Region, Vector
from sim import forward
from traces.records import Repeated

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import llm
from test_llm_replay import DEEP


def stack(layers, rows, width=256):
    """x (rows, width) through `layers` products with weights of their own (graph inputs) and a relu:
    a decode step's projections at rows=1, a prefill's at more."""
    g = isa.Graph("stack")
    x = g.input("x", (rows, width), "float16")
    for i in range(layers):
        x = isa.ops.active(isa.ops.matrix_mul(x, g.input(f"w{i}", (width, width), "float16")), "relu")
    g.output(x, "y")
    return g


def decode_step(cfg, past=6):
    graph = isa.from_onnx(llm.model(cfg, seq=1, past=past, dtype="float16", weight_inputs=True))
    return llm.with_kv_cache(graph, cfg, 1, past + 2, past=past, layers=cfg.layers)


@pytest.fixture
def forwarded(monkeypatch):
    """Runs a program in timing mode twice, fast-forwarded where it can be and whole; gives both
    Results and whether the first was fast-forwarded."""
    def run(program, chip):
        ran = []
        real = sim.machine.fast_forward

        def watch(machine, cache):
            ran.append(real(machine, cache))
            return ran[-1]

        monkeypatch.setattr(sim.machine, "fast_forward", watch)
        fast = sim.execute(program, chip, None, mode="timing")
        monkeypatch.setattr(sim.machine, "fast_forward", lambda machine, cache: None)
        whole = sim.execute(program, chip, None, mode="timing")
        return fast, whole, ran == [ran[0]] and ran[0] is not None
    return run


def assert_same_run(fast, whole):
    assert fast.cycles == whole.cycles > 0
    key = lambda e: (e.engine, e.index)  # noqa: E731
    assert sorted(fast.trace.events, key=key) == sorted(whole.trace.events, key=key)
    assert fast.trace.buffers == whole.trace.buffers
    assert fast.trace.syncs == whole.trace.syncs  # the cut blocks' waits made from the first's (forward.Moved), the whole run's read
    assert fast.trace.counters == whole.trace.counters
    assert fast.trace.op_dtypes == whole.trace.op_dtypes and fast.trace.op_dtypes  # the cut blocks' counted as the block before's
    assert fast.stats == whole.stats and fast.stats.slowest(5) == whole.stats.slowest(5)


@pytest.mark.parametrize("chip, graph", [
    ("ascend910b", lambda: decode_step(DEEP)),  # blocks of three layers, a KV cache in state, the cache of ddr
    ("generic", lambda: decode_step(DEEP)),
    ("ascend910b", lambda: stack(20, 8, 96)),
    ("bm1686", lambda: stack(12, 1)),  # a decode step's matrix-vector products
    ("bm1686", lambda: stack(12, 64)),  # a prefill's products
])
def test_a_fast_forwarded_run_is_the_whole_run(forwarded, chip, graph):
    target = chips.load(chip)
    program = isa.lower(graph(), target)
    assert program.blocks is not None and program.blocks.count >= 5
    fast, whole, skipped = forwarded(program, target)
    assert skipped
    assert isinstance(fast.trace.events, Repeated)  # its copies summarised as columns, made as Events when read
    assert_same_run(fast, whole)
    assert len(fast.trace.events) == len(whole.trace.events)


def test_blocks_whose_own_lines_another_block_shares_run_whole(forwarded):
    """A line of one block's own tensors that the next block's also lie on could hit in the cache
    in the whole run and not in the shorter one: the run is not fast-forwarded."""
    target = chips.load("ascend910b")
    program = isa.lower(stack(20, 8, 96), target)
    blocks = program.blocks
    owned = list(blocks.owned)  # as if block 4's first tensor began on block 3's last line
    owned[4] = ((blocks.owned[3][-1][1] - 1, blocks.owned[4][0][1]), *blocks.owned[4][1:])
    shared = dataclasses.replace(program, blocks=dataclasses.replace(blocks, owned=tuple(owned)))
    fast, whole, skipped = forwarded(shared, target)
    assert not skipped
    assert_same_run(fast, whole)


def test_blocks_whose_times_do_not_repeat_run_whole(forwarded):
    """The last block before the cut made slower than the others (one of its vector instructions
    on twice the rows): the blocks around the cut are not copies of one another, and the run is
    not fast-forwarded."""
    target = chips.load("ascend910b")
    program = isa.lower(stack(20, 8, 96), target)
    blocks, streams = program.blocks, {e: list(s) for e, s in program.streams.items()}
    e, i = next((e, i) for e in streams for i in range(blocks.start[e] + forward.KEEP * blocks.size[e] - blocks.size[e],
                                                       blocks.start[e] + forward.KEEP * blocks.size[e])
                if isinstance(streams[e][i], Vector))
    grow = lambda r: r._replace(shape=(2 * r.shape[0], *r.shape[1:])) if isinstance(r, Region) else r  # noqa: E731
    x = streams[e][i]
    streams[e][i] = dataclasses.replace(x, dst=grow(x.dst), srcs=tuple(grow(r) for r in x.srcs))
    fast, whole, skipped = forwarded(dataclasses.replace(program, streams=streams), target)
    assert not skipped
    assert_same_run(fast, whole)


def test_functional_mode_and_a_program_read_from_text_run_every_instruction(monkeypatch):
    target = chips.load("bm1686")
    program = isa.lower(stack(8, 1), target)
    assert program.blocks is not None
    again = isa.Program.from_text(program.to_text())
    assert again.blocks is None and again.to_text() == program.to_text()

    def refuse(machine, cache):
        raise AssertionError("functional mode runs every instruction")

    monkeypatch.setattr(sim.machine, "fast_forward", refuse)
    x = (np.arange(256, dtype=np.float16) / 256).reshape(1, 256)
    weights = {f"w{i}": np.eye(256, dtype=np.float16) for i in range(8)}
    np.testing.assert_array_equal(sim.execute(program, target, {"x": x, **weights}).outputs["y"], x)
    monkeypatch.undo()
    assert sim.execute(again, target, None, mode="timing").cycles == sim.execute(program, target, None, mode="timing").cycles


@pytest.mark.parametrize("chip, rows", [("bm1686", 1), ("ascend910b", 64)])
def test_a_last_layer_whose_output_is_the_graphs_is_emitted_not_replayed(chip, rows):
    """The stack's last product writes the graph's output, where the layers before it write a
    tensor the next one reads: it is emitted (isa/lower/replay.py), and the program is the one of
    every layer emitted, computing the same values."""
    target = chips.load(chip)
    graph = stack(12, rows)
    replayed, every = isa.lower(graph, target), isa.lower(graph, target, replay=False)
    assert replayed.blocks is not None and replayed.streams == every.streams and replayed.buffers == every.buffers
    x = (np.arange(256 * rows, dtype=np.float16) / 256 / rows).reshape(rows, 256)
    weights = {f"w{i}": np.eye(256, dtype=np.float16) for i in range(12)}
    np.testing.assert_array_equal(sim.execute(replayed, target, {"x": x, **weights}).outputs["y"], x)
