"""isa/lower/replay.py: a model's identical layers emitted for the first blocks and replayed for the
rest give the program that emitting every layer gives: the same instructions, buffers and bindings,
so the same outputs bit for bit in functional mode and the same cycles in timing mode."""

import sys
from pathlib import Path

import numpy as np
import pytest

import chips
import isa
import sim
from isa.instructions import Dma
from isa.onnx import PASSES

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import llm
from test_llm import feeds_for

# enough layers for a replay: blocks of up to 3 layers (a tensor placed at one of two addresses in
# turn comes back every other layer), up to five of them emitted, the rest replayed
DEEP = llm.config("tinyllama-1.1b", layers=16, hidden=64, heads=4, kv_heads=2, mlp=96, vocab=50)


def lowered(graph, chip):
    return {replay: isa.lower(graph, chip, replay=replay) for replay in (True, False)}


def replayed(program):
    return [n for n in program.notes if n.startswith("layers replayed")]


def assert_same_program(replay, every):
    assert replay.streams == every.streams
    assert replay.buffers == every.buffers and replay.bindings == every.bindings
    assert [n for n in replay.notes if not n.startswith("layers replayed")] == every.notes


@pytest.mark.parametrize("chip, dtype", [("generic", "float32"), ("ascend910b", "float16")])
def test_a_replayed_decode_step_is_the_program_of_every_layer_emitted_and_computes_the_same_bits(chip, dtype):
    target = chips.load(chip)
    model = llm.model(DEEP, seq=1, past=3, dtype=dtype)
    programs = lowered(isa.from_onnx(model), target)
    assert replayed(programs[True]) and not replayed(programs[False])
    assert_same_program(programs[True], programs[False])
    feeds = feeds_for(model)
    outs = [sim.execute(programs[r], target, feeds).outputs for r in (True, False)]
    assert outs[0].keys() == outs[1].keys() and "present.15.value" in outs[0]
    for name in outs[1]:
        np.testing.assert_array_equal(outs[0][name], outs[1][name], err_msg=name)
    assert np.isfinite(outs[0]["logits"].astype(np.float64)).all() and np.abs(outs[0]["logits"]).max() > 0


@pytest.mark.parametrize("layers", [3, 4])
def test_too_few_layers_replay_nothing_though_their_cache_reads_repeat(layers):
    """With a KV cache in state, the layers' cache reads come first, 2 a layer, each read by its own
    layer: enough repeats for a replay, but one would give homes to the last read's views alone.
    Fewer than 5 layers, the lowering emits every group, and the program is the one without replay."""
    target = chips.load("ascend910b")
    cfg = llm.config("tinyllama-1.1b", layers=layers, hidden=64, heads=4, kv_heads=2, mlp=96, vocab=50)
    graph = llm.with_kv_cache(isa.from_onnx(llm.model(cfg, seq=1, past=6, dtype="float16", weight_inputs=True)),
                              cfg, 1, 8, past=6, layers=cfg.layers)
    programs = lowered(graph, target)
    assert not replayed(programs[True])
    assert_same_program(programs[True], programs[False])


def test_a_replayed_decode_step_over_a_kv_cache_in_state_takes_the_same_cycles():
    target = chips.load("ascend910b")
    graph = llm.with_kv_cache(isa.from_onnx(llm.model(DEEP, seq=1, past=6, dtype="float16", weight_inputs=True)),
                              DEEP, 1, 8, past=6, layers=DEEP.layers)
    programs = lowered(graph, target)
    assert replayed(programs[True])
    assert_same_program(programs[True], programs[False])
    cycles = [sim.execute(programs[r], target, None, mode="timing").cycles for r in (True, False)]
    assert cycles[0] == cycles[1] > 0


def test_layers_whose_staging_slots_take_turns_replay_one_layer_a_block():
    """A 576-long cache's score rows stage through three slots of a vector core's UB, two copies a
    layer, so a layer's slots are the one before's permuted: blocks of one layer replay with their
    slots permuted as the emission permutes them."""
    target = chips.load("ascend910b")
    cfg = llm.config("tinyllama-1.1b", layers=7, hidden=1024, heads=16, kv_heads=2, mlp=2816, vocab=50)
    unfused = [p for p in PASSES if p != "attention"]  # the score rows of the unfused attention staged
    graph = llm.with_kv_cache(isa.from_onnx(llm.model(cfg, seq=1, past=576, dtype="float16", weight_inputs=True), passes=unfused),
                              cfg, 1, 578, past=576, layers=cfg.layers)
    programs = lowered(graph, target)
    # blocks of 67 groups, a layer each: three emitted, four replayed
    assert [n.split(" are ")[0] for n in replayed(programs[True])] == ["layers replayed: 4 blocks of 67 groups (from group 217)"]
    slots = {x.src.addr for x in programs[False].streams["c4.aiv0_mte3"] if isinstance(x, Dma) and x.op.endswith(".scores")}
    assert len(slots) == 3  # the slots do take turns
    assert_same_program(programs[True], programs[False])


def test_a_replayed_program_does_not_keep_its_emitter(monkeypatch):
    """The replayed streams make their blocks from the emitter's streams, not the emitter: once
    lowered, the emitter's vector clocks (one per wait) are freed, not carried through a run."""
    import weakref

    from isa.lower import emit

    made = []
    init = emit.Emitter.__init__

    def watched(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(weakref.ref(self))

    monkeypatch.setattr(emit.Emitter, "__init__", watched)
    program = isa.lower(isa.from_onnx(llm.model(DEEP, seq=1, past=3, dtype="float16")), chips.load("ascend910b"))
    assert replayed(program) and len(made) == 1 and made[0]() is None
    assert sim.execute(program, chips.load("ascend910b"), None, mode="timing").cycles > 0


def test_too_few_layers_are_all_emitted():
    """Two layers: nothing to replay (blocks 0 to 3 are always emitted), the program is the same."""
    target = chips.load("ascend910b")
    cfg = llm.config("tinyllama-1.1b", layers=2, hidden=64, heads=4, kv_heads=2, mlp=96, vocab=50)
    programs = lowered(isa.from_onnx(llm.model(cfg, seq=1, past=3, dtype="float16")), target)
    assert not replayed(programs[True])
    assert_same_program(programs[True], programs[False])


def test_each_cache_append_runs_in_its_own_layer():
    """with_kv_cache moves each layer's appends from the graph's end into the layer, after its last read of the cache."""
    graph = llm.with_kv_cache(isa.from_onnx(llm.model(DEEP, seq=1, past=6, dtype="float16", weight_inputs=True)),
                              DEEP, 1, 8, past=6, layers=DEEP.layers)
    names = [n.name for n in graph.nodes]
    for i in range(DEEP.layers):
        append = names.index(f"cache.{i}.value.append")
        assert names.index(f"layers.{i}.ctx") < append < names.index(f"layers.{i}.self_attn.o_proj")  # the fused attention
        assert names.index(f"layers.{i}.ctx") < names.index(f"cache.{i}.key.append") < names.index(f"layers.{i}.residual2")


def test_a_float16_deployed_decode_step_replays_layer_by_layer():
    """Deployed in float16 (the casts around SiLU dropped), a vector core of the 910B that gets one
    tile of an MLP row places a second tile's buffer it never touches; released, that buffer gives
    the ranges it lay over back as they were. Released with the union of their histories, it
    carried writes of other addresses on from layer to layer, one overlap a layer, and the layers
    repeated only in pairs."""
    target = chips.load("ascend910b")
    cfg = llm.config("tinyllama-1.1b", layers=8, hidden=1024, heads=16, kv_heads=2, mlp=2816, vocab=50)
    graph = isa.from_onnx(llm.model(cfg, seq=1, past=64, dtype="float16", weight_inputs=True), quantize="float16", chip=target)
    graph = llm.with_kv_cache(graph, cfg, 1, 66, past=64, layers=cfg.layers)
    programs = lowered(graph, target)
    assert [n.split(" are ")[0] for n in replayed(programs[True])] == ["layers replayed: 5 blocks of 55 groups (from group 183)"]
    # layers 1 to 7 are the program's blocks, each the one before moved, waits and all: the first
    # layer, whose first weight tiles go to local slots no instruction used, waits less
    assert programs[True].blocks is not None and programs[True].blocks.count == 7
    assert_same_program(programs[True], programs[False])


def test_every_layer_places_its_intermediates_where_the_first_does():
    """Each layer hands its output on where its input lay (isa/lower/memory/carry.py), the first
    layer's input being the embedding's output: every layer starts with the same buffers live and
    places each intermediate at the first layer's address."""
    target = chips.load("ascend910b")
    graph = llm.with_kv_cache(isa.from_onnx(llm.model(DEEP, seq=1, past=6, dtype="float16", weight_inputs=True)),
                              DEEP, 1, 8, past=6, layers=DEEP.layers)
    program = isa.lower(graph, target, replay=False)
    ddr: dict[str, set[int]] = {}
    for b in program.buffers:
        if b.mem == "ddr" and b.name.startswith("layers."):
            ddr.setdefault(b.name.split(".", 2)[2], set()).add(b.addr)
    assert len(ddr) > 10 and all(len(addrs) == 1 for addrs in ddr.values())
    gather = next(b for b in program.buffers if b.name == "embed" and b.mem == "ddr")
    assert {b.addr for b in program.buffers if b.name.endswith(".residual2")} == {gather.addr}


def test_a_fast_forwarded_timing_run_makes_none_of_the_cut_layers_instructions():
    """The replayed layers' instructions are made when first read (isa/lower/replay.py, _Replayed):
    a timing run that fast-forwards reads the layers it runs and the others' op names, so the
    layers it cuts out are never made; its events name the same ops as the run of the program
    that emits every layer, and the program read whole is that program."""
    target = chips.load("ascend910b")
    graph = llm.with_kv_cache(isa.from_onnx(llm.model(DEEP, seq=1, past=6, dtype="float16", weight_inputs=True)),
                              DEEP, 1, 8, past=6, layers=DEEP.layers)
    programs = lowered(graph, target)
    runs = {r: sim.execute(programs[r], target, None, mode="timing") for r in (True, False)}
    blocks = [s for s in programs[True].streams.values() if hasattr(s, "block")]
    assert blocks and all(len(s.block.made) < s.blocks for s in blocks)
    assert runs[True].cycles == runs[False].cycles
    assert sorted(e.op for e in runs[True].trace.events) == sorted(e.op for e in runs[False].trace.events)
    assert any(e.op.startswith("layers.9.") for e in runs[True].trace.events)
    assert_same_program(programs[True], programs[False])
    assert all(len(s.block.made) == s.blocks for s in blocks)
