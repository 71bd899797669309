"""Lowering: the MLP end to end on both chips, the program text, and what each placement
choice does to cycles, tiling and numbers."""

import re

import numpy as np
import pytest
from refeval import evaluate

import chips
import isa
import sim
from isa import graphfile

EXAMPLES = ["examples/mlp.yaml", "examples/mlp_int8.yaml"]


@pytest.mark.parametrize("chip", ["bm1684", "generic"])
@pytest.mark.parametrize("path", EXAMPLES)
def test_mlp_outputs_equal_numpy(path, chip):
    chip = chips.load(chip)
    gf = graphfile.load(path)
    res = sim.run(gf.graph, chip, gf.defaults)
    want = evaluate(gf.graph, gf.defaults, chip)["y"]
    got = res.outputs["y"]
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype == np.float32:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, want)
    assert 0.2 < np.mean(want > 0) < 0.8  # relu cuts some values and keeps others: a real test


def test_mlp_float_matches_plain_numpy():
    gf = graphfile.load("examples/mlp.yaml")
    c, x = gf.graph.constants, gf.defaults["x"]
    h = x
    for i in (1, 2, 3):
        h = np.maximum(h @ c[f"w{i}"] + c[f"b{i}"], 0)
    res = sim.run(gf.graph, "bm1684", gf.defaults)
    np.testing.assert_allclose(res.outputs["y"], h, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("path", EXAMPLES)
def test_program_text_round_trips(path):
    gf = graphfile.load(path)
    prog = isa.lower(gf.graph, chips.load("bm1684"))
    text = prog.to_text()
    again = isa.Program.from_text(text)
    assert again == prog
    assert again.to_text() == text
    a = sim.execute(prog, "bm1684", gf.defaults)
    b = sim.execute(again, "bm1684", gf.defaults)
    assert a.cycles == b.cycles
    np.testing.assert_array_equal(a.outputs["y"], b.outputs["y"])


def heavy_graph(n=1 << 16):
    """Loads and compute both heavy: a chain of transcendental ops on a large tensor."""
    g = isa.Graph("heavy")
    y = isa.ops.adds(g.input("x", (n // 256, 256), "float32"), 1.0)
    for kind in ("tanh", "sigmoid", "exp", "sin", "cos"):
        y = isa.ops.active(y, kind)
    g.output(isa.ops.muls(y, 2.0), "y")
    return g


def test_double_buffering_lowers_cycles():
    g = heavy_graph()
    chip = chips.load("generic")
    single = sim.run(g, chip, mode="timing", policy=isa.Policy(double_buffer=False))
    double = sim.run(g, chip, mode="timing", policy=isa.Policy(double_buffer=True))
    assert double.cycles < 0.8 * single.cycles
    # without a second slot, loading and computing take turns; with one, they overlap
    assert single.cycles >= single.stats.busy["vpu"] + single.stats.busy["dma_in"]
    assert double.cycles < double.stats.busy["vpu"] + double.stats.busy["dma_in"]


def test_fusion_keeps_intermediates_on_chip():
    g = heavy_graph()
    fused = sim.run(g, "generic", mode="timing", policy=isa.Policy(fuse=True))
    unfused = sim.run(g, "generic", mode="timing", policy=isa.Policy(fuse=False))
    tensor = 4 * (1 << 16)
    assert fused.stats.ddr_read_bytes == tensor and fused.stats.ddr_write_bytes == tensor
    assert unfused.stats.ddr_read_bytes == 7 * tensor and unfused.stats.ddr_write_bytes == 7 * tensor
    assert fused.cycles < unfused.cycles


def memory_bound_graph():
    g = isa.Graph("copyish")
    x = g.input("x", (512, 512), "float32")
    g.output(isa.ops.adds(x, 1.0), "y")
    return g


def test_more_ddr_bandwidth_never_costs_cycles():
    g = memory_bound_graph()
    cycles = [
        sim.run(g, chips.load("bm1684", {"memories.ddr.bandwidth": f"{bw}GB/s", "engines.gdma.bandwidth": "1TB/s"}), mode="timing").cycles
        for bw in (4, 8, 16, 32, 64, 128)
    ]
    assert cycles == sorted(cycles, reverse=True)
    assert cycles[0] > 4 * cycles[3]  # memory-bound: 8x less bandwidth, much slower


@pytest.mark.parametrize("chip, sizes", [("bm1684", ("512KiB", "8KiB", "2KiB")), ("generic", ("256KiB", "4KiB", "2KiB"))])
def test_smaller_local_memory_changes_tiling_not_numbers(chip, sizes):
    gf = graphfile.load("examples/mlp.yaml")
    counts, outputs = [], []
    for size in sizes:
        c = chips.load(chip, {"memories.lmem.size": size})
        prog = isa.lower(gf.graph, c)
        counts.append(len(prog))
        outputs.append(sim.execute(prog, c, gf.defaults).outputs["y"])
    assert counts[0] < counts[1] < counts[2]
    for y in outputs[1:]:
        np.testing.assert_allclose(y, outputs[0], rtol=1e-5, atol=1e-6)


def test_int8_mlp_tiles_are_bit_exact_at_any_local_memory_size():
    gf = graphfile.load("examples/mlp_int8.yaml")
    want = evaluate(gf.graph, gf.defaults, chips.load("bm1684"))["y"]
    for size in ("512KiB", "4KiB"):
        got = sim.run(gf.graph, chips.load("bm1684", {"memories.lmem.size": size}), gf.defaults).outputs["y"]
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("path", EXAMPLES)
def test_operands_route_through_staging_and_operand_memories(three_level, path):
    gf = graphfile.load(path)
    res = sim.run(gf.graph, three_level, gf.defaults)
    want = evaluate(gf.graph, gf.defaults, three_level)["y"]
    np.testing.assert_allclose(res.outputs["y"], want, rtol=1e-5, atol=1e-6)
    hops = {(e.engine, e.src, e.dst) for e in res.trace.events if e.kind == "dma"}
    assert hops == {
        ("mte2", "ddr", "l1"), ("mte1", "l1", "lmem"), ("mte1", "l1", "l0a"), ("mte1", "l1", "l0b"),
        ("fixpipe", "l0c", "lmem"), ("mte3", "lmem", "ddr"),
    }
    assert {e.dst for e in res.trace.events if e.kind == "matrix"} == {"l0c"}


def test_outputs_that_alias_inputs_are_copied():
    g = isa.Graph("alias")
    x = g.input("x", (3, 5), "int16")
    g.output(x, "same")
    g.output(isa.ops.adds(x, 1), "plus")
    g.output(g.tensors["adds_0"], "plus_again")
    xv = np.arange(15, dtype=np.int16).reshape(3, 5)
    out = sim.run(g, "generic", {"x": xv}).outputs
    np.testing.assert_array_equal(out["same"], xv)
    np.testing.assert_array_equal(out["plus"], xv + 1)
    np.testing.assert_array_equal(out["plus_again"], xv + 1)


@pytest.mark.parametrize("case", ["input", "view", "constant"])
def test_an_output_copied_from_another_home_moves_in_chunks_its_route_holds(case):
    """An output that is an input, a constant or a reshape of a tensor is copied from that home; on
    ascend910b no engine links DDR to DDR, so the copy stages through a 192 KB UB: a row of 400 KB
    (a Qwen2 head's logits) goes in chunks."""
    target, n = chips.load("ascend910b"), 200_000
    xv = np.random.default_rng(0).standard_normal((1, n)).astype(np.float16)
    g = isa.Graph(case)
    x = g.input("x", (1, n), "float16")
    if case == "input":
        g.output(x, "y")
        want = xv
    elif case == "view":
        g.output(isa.ops.reshape(isa.ops.adds(x, 1.0), (1, 1, n)), "y")
        want = (xv + np.float16(1)).reshape(1, 1, n)
    else:
        want = (np.arange(n) % 2048).astype(np.float16).reshape(1, n)
        g.output(g.constant("c", want), "y")
    res = sim.run(g, target, {"x": xv})
    np.testing.assert_array_equal(res.outputs["y"], want)
    staged = [e for e in res.trace.events if e.kind == "dma" and e.dst.startswith("c0.ub") and e.op != "adds_0"]
    assert len(staged) >= 3 and res.cycles == sim.run(g, target, mode="timing").cycles


def test_a_tensor_too_big_for_ddr_is_out_of_memory():
    g = isa.Graph("big")
    g.output(isa.ops.adds(g.input("x", (1 << 17, 1 << 16), "float32"), 1.0), "y")
    with pytest.raises(isa.OutOfMemoryError, match=r"input x: \[131072, 65536\] of float32 takes 34359738368 bytes, more than chip "
                                                   r"generic's largest memory \(ddr capacity 17179869184 bytes\)"):
        isa.lower(g, chips.load("generic"))


def test_a_matrix_tile_that_cannot_fit_is_out_of_memory():
    g = isa.Graph("mm")
    x = g.input("x", (64, 64), "float32")
    g.output(isa.ops.matrix_mul(x, np.ones((64, 64), np.float32)), "y")
    with pytest.raises(isa.OutOfMemoryError, match=r"matrix_mul_0: even a 32x32x2 matrix tile needs \d+ bytes"):
        isa.lower(g, chips.load("generic", {"memories.lmem.size": "32B"}))


def test_ops_a_chip_lacks_are_rejected_with_op_dtype_and_chip():
    g = isa.Graph("u")
    x = g.input("x", (4, 4), "int8")
    g.output(isa.ops.active(x, "tanh"), "y")
    with pytest.raises(isa.UnsupportedError, match=r"op active_0: active.tanh with int8 -> int8 is not supported "
                                                   r"on chip bm1684 \(same-dtype: float32; no mixed dtypes\)"):
        isa.lower(g, chips.load("bm1684"))
    g = isa.Graph("f16")
    g.output(isa.ops.adds(g.input("x", (4, 4), "float16"), 1.0), "y")
    with pytest.raises(isa.UnsupportedError, match=r"adds with float16 -> float16 is not supported on chip bm1684"):
        isa.lower(g, chips.load("bm1684"))
    isa.lower(g, chips.load("generic"))  # the reference NPU takes every dtype


def test_bm1684_computes_int32_through_float32():
    """The seed: BM1684 'INT32会被转成FLOAT32来计算': 2^24 + 1 is not a float32."""
    g = isa.Graph("i32")
    x = g.input("x", (1, 4), "int32")
    g.output(isa.ops.adds(x, 0), "y")
    xv = np.array([[16777217, -16777217, 3, 2**31 - 1]], np.int32)
    on_bm1684 = sim.run(g, "bm1684", {"x": xv}).outputs["y"]
    np.testing.assert_array_equal(on_bm1684, [[16777216, -16777216, 3, 2**31 - 1]])
    np.testing.assert_array_equal(sim.run(g, "generic", {"x": xv}).outputs["y"], xv)


def test_a_kept_left_row_block_is_read_once_across_column_blocks():
    """matrix_mul's tiling may keep a row's left block (tm x K) while the row's output tiles
    walk N; here every byte of both operands then crosses DDR once, and the values are right."""
    rng = np.random.default_rng(1)
    g = isa.Graph("kept")
    with g:
        x = g.input("x", (64, 512), "float16")
        w = g.constant("w", (rng.standard_normal((512, 512)) * 0.05).astype(np.float16))
        g.output(isa.ops.matrix_mul(x, w), "y")
    chip = chips.load("bm1686")
    prog = isa.lower(g, chip)
    (note,) = [n for n in prog.notes if n.startswith("tiling")]
    assert "the left row block kept" in note
    assert int(re.search(r"output tile 64x(\d+),", note).group(1)) < 512  # several column blocks (measured: 4)
    xv = rng.standard_normal((64, 512)).astype(np.float16)
    result = sim.execute(prog, chip, {"x": xv})
    assert result.stats.ddr_read_bytes == xv.nbytes + g.constants["w"].nbytes
    expected = (xv.astype(np.float32) @ g.constants["w"].astype(np.float32)).astype(np.float16)
    np.testing.assert_allclose(result.outputs["y"].astype(np.float32), expected.astype(np.float32), rtol=2e-2, atol=2e-2)


def test_binding_a_name_again_gives_the_first_buffer_or_says_it_differs():
    """A template planned twice (a layer group tried, then its layers one by one) derives its
    constants once: the same name and contents give the same Buf; other contents are a bug."""
    from isa.lower.emit import Emitter

    em = Emitter(chips.load("bm1684"), "g")
    data = np.arange(4, dtype=np.int32).tobytes()
    first = em.bind("conv.bias_v2", "const", "int32", (4,), data)
    assert em.bind("conv.bias_v2", "const", "int32", (4,), data) is first and len(em.bindings) == 1
    assert em.bind("conv.bias_v2", "output", "int32", (4,)) is not first  # another role: its own buffer
    with pytest.raises(isa.ProgramError, match=r"lowering bug: const conv.bias_v2 bound twice with different contents"):
        em.bind("conv.bias_v2", "const", "int32", (4,), np.zeros(4, np.int32).tobytes())


def test_a_split_buffers_parts_are_tracked_apart_and_an_instruction_may_span_them():
    """One engine writes a buffer's second part while another reads its first: only what
    touches the same part waits. A region over both parts must name both; one past them is a
    lowering bug."""
    from isa.instructions import Vector
    from isa.lower.emit import Emitter

    em = Emitter(chips.load("bm1684"), "g")
    dma, tiu = "gdma", "tiu"
    buf = em.alloc("lmem", 2 * 64 * 128, "acc")
    first, second = em.split(buf, (64 * 128,))
    whole = buf.region("float32", (64, 64))
    half = lambda part: part.region("float32", (32, 64))  # noqa: E731
    em.emit(tiu, Vector("copy", whole, (1.0,), "float32", "fill"), writes=(first, second))
    drain = em.emit(dma, Vector("copy", half(first), (half(first),), "float32", "drain"), reads=(first,), writes=(first,))
    em.emit(tiu, Vector("copy", half(second), (2.0,), "float32", "go on"), writes=(second,))  # no wait for the drain
    em.emit(tiu, Vector("copy", half(first), (3.0,), "float32", "refill"), writes=(first,))  # waits for it
    waits = [i for i in em.streams[tiu] if i.kind == "wait"]
    assert [w.op for w in waits] == ["refill"] and waits[0].on == (drain,)
    with pytest.raises(isa.ProgramError, match=r"lies outside the buffers it names \(acc\[0\]"):
        em.emit(tiu, Vector("copy", whole, (1.0,), "float32", "fill"), writes=(first,))
    em.release(buf)
    assert [b.name for b in em.buffers] == ["acc[0]", "acc[1]"]


def test_a_buffer_placed_over_part_of_a_released_one_leaves_its_rest_the_history():
    """Placing a buffer over part of a released one hands it that one's history; the rest keeps
    it for the next buffer placed there, and a buffer placed over the first, once it is
    released, hands on its own newer history."""
    from isa.lower.emit import Buf, _Released

    released = _Released()
    a = Buf("a", "lmem", 0, 1024)
    a.writes = {"tiu": 0}
    released.add(a)
    low = Buf("low", "lmem", 0, 512)
    released.hand_on(low)
    assert low.writes == {"tiu": 0}
    low.writes, low.reads = {"gdma": 1}, {}  # written again: its history now
    high = Buf("high", "lmem", 512, 512)
    released.hand_on(high)
    assert high.writes == {"tiu": 0}  # a's rest
    released.add(low)
    again, beyond = Buf("again", "lmem", 0, 512), Buf("beyond", "lmem", 1024, 64)
    released.hand_on(again)
    released.hand_on(beyond)
    assert again.writes == {"gdma": 1} and beyond.writes == {}


def test_a_buffer_no_instruction_touched_gives_back_the_histories_it_lay_over():
    """Released untouched, a buffer over two released ranges leaves each its own history, not the
    union it inherited: a buffer placed later over one of them waits only for that one's writes."""
    from isa.lower.emit import Buf, _Released

    released = _Released()
    a, b = Buf("a", "lmem", 0, 512), Buf("b", "lmem", 512, 512)
    a.writes, b.writes = {"tiu": 3}, {"gdma": 5}
    released.add(a)
    released.add(b)
    spare = Buf("spare", "lmem", 256, 512)  # over a's upper half and b's lower half, never accessed
    released.hand_on(spare)
    assert spare.writes == {"tiu": 3, "gdma": 5}
    released.add(spare, untouched=True)
    low, high = Buf("low", "lmem", 0, 512), Buf("high", "lmem", 512, 512)
    released.hand_on(low)
    released.hand_on(high)
    assert low.writes == {"tiu": 3} and high.writes == {"gdma": 5}
    released.add(low, untouched=True)
    released.add(high, untouched=True)
    used = Buf("used", "lmem", 256, 512)  # the same, released as one: the union stays
    released.hand_on(used)
    released.add(used)
    later = Buf("later", "lmem", 0, 512)
    released.hand_on(later)
    assert later.writes == {"tiu": 3, "gdma": 5}
