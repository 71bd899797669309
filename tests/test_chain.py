"""Multi-layer layer groups (isa/lower/schedule/chain.py): chains of convolutions run slice by slice with
their intermediates in local memory. Every run checks the outputs against the references and
that timing mode gives functional mode's cycles."""

import re
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from refeval import evaluate

import chips
import isa
import sim
from isa.lower.policy import policy_from_overrides

O = isa.ops
CHIPS = {name: chips.load(name) for name in ("generic", "bm1684", "bm1686")}


def chain_graph(x_shape, dtype, layers, shortcut=False, seed=0):
    """Convolutions (out channels, kernel, stride[, dilation]; 0 out channels: depthwise, -1: a
    3x3 max pooling) with bias and relu, one after another, padded to keep the size at stride
    1; with shortcut, the last one's result plus the input (same shape), then relu."""
    rng = np.random.default_rng(seed)
    g = isa.Graph("chain")
    x = h = g.input("x", x_shape, dtype)
    quant = {"scale": 1 / 64} if dtype == "int8" else {}
    for i, (oc, k, stride, *dilation) in enumerate(layers):
        ic, d = h.shape[1], (dilation or [1])[0]
        if oc < 0:
            h = O.active(O.pool(h, stride, stride, 3, 3, pad_h=1, pad_w=1, name=f"pool{i}"), "relu", name=f"relu{i}")
            continue
        groups, oc = (ic, ic) if oc == 0 else (1, oc)
        if dtype == "int8":
            w = g.constant(f"w{i}", rng.integers(-4, 5, (oc, ic // groups, k, k)).astype(np.int8))
            b = g.constant(f"b{i}", rng.integers(-64, 64, (1, oc, 1, 1)).astype(np.int16))
        else:
            w = g.constant(f"w{i}", (rng.standard_normal((oc, ic // groups, k, k)) / np.sqrt(ic // groups * k * k)).astype(dtype))
            b = g.constant(f"b{i}", (rng.standard_normal((1, oc, 1, 1)) * 0.1).astype(dtype))
        pad = d * (k // 2)
        h = O.conv(h, w, b, groups=groups, dh=d, dw=d, pad_h_t=pad, pad_h_b=pad, pad_w_l=pad, pad_w_r=pad, stride_h=stride, stride_w=stride,
                   name=f"conv{i}", **quant)
        if i < len(layers) - 1 or not shortcut:
            h = O.active(h, "relu", name=f"relu{i}")
    if shortcut:
        h = O.active(O.add(h, x, name="shortcut"), "relu", name="out")
    g.output(h, "y")
    return g


def inputs_for(graph, seed=1):
    t = graph.tensors["x"]
    rng = np.random.default_rng(seed)
    if t.dtype == "int8":
        return {"x": rng.integers(-32, 32, t.shape).astype(np.int8)}
    return {"x": rng.standard_normal(t.shape).astype(t.dtype)}


def run(graph, chip, inputs, **knobs):
    res = sim.run(graph, chip, inputs, policy=isa.Policy(**knobs))
    want = evaluate(graph, inputs, chip)["y"]
    if graph.tensors["x"].dtype == "int8":
        np.testing.assert_array_equal(res.outputs["y"], want)
    else:
        tol = 2e-2 if graph.tensors["x"].dtype == "float16" else 1e-4
        np.testing.assert_allclose(res.outputs["y"].astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
    assert sim.execute(res.program, chip, mode="timing").cycles == res.cycles
    return res


def slices(prog):
    """Per layer group note: (first op, slices, weights held)."""
    found = [re.search(r"layer group (\S+)\.\.\S+: \d+ layers in (\d+) slice\(s\).*weights (held|loaded every slice)", n)
             for n in prog.notes]
    return [(m[1], int(m[2]), m[3] == "held") for m in found if m]


def squeezed(chip, free):
    """chip's local memory with all but about `free` bytes (all lanes) reserved."""
    mem = chip.memories["lmem"]
    return {"lmem": mem.capacity - free}


BOTTLENECK = [(16, 1, 1), (16, 3, 1), (64, 1, 1)]


# ---- what a chain changes ------------------------------------------------------------------------

@pytest.mark.parametrize("chip", ["generic", "bm1684", "bm1686"])
def test_a_chain_keeps_its_intermediates_off_ddr(chip):
    g = chain_graph((1, 64, 16, 16), "float32", BOTTLENECK, shortcut=True)
    x = inputs_for(g)
    chained, layered = run(g, CHIPS[chip], x), run(g, CHIPS[chip], x, chain=False)
    assert slices(chained.program) == [("conv0", 1, False)] and slices(layered.program) == []
    out = g.tensors[g.outputs["y"]].nbytes
    inner = 2 * (16 * 16 * 16 * 4)  # relu0's and relu1's results
    assert chained.stats.ddr_write_bytes == out
    assert layered.stats.ddr_write_bytes == out + inner
    assert chained.stats.ddr_read_bytes <= layered.stats.ddr_read_bytes - inner
    assert not [b for b in chained.program.buffers if b.mem == "ddr" and b.name.startswith("relu")]


def split_graph(output_a=False):
    """a -> b (+ a, in b's tail) -> max pool -> d -> e: a is read twice inside the group."""
    g = isa.Graph("split")
    rng = np.random.default_rng(0)
    x = g.input("x", (1, 8, 8, 8), "float32")
    w = [g.constant(f"w{i}", rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.1) for i in range(4)]
    pads = {"pad_h_t": 1, "pad_h_b": 1, "pad_w_l": 1, "pad_w_r": 1}
    a = O.conv(x, w[0], name="a", **pads)
    b = O.conv(a, w[1], name="b", **pads)
    c = O.pool(O.add(b, a, name="sum"), 2, 2, 2, 2, name="pool")
    g.output(O.conv(O.conv(c, w[2], name="d", **pads), w[3], name="e", **pads), "y")
    if output_a:
        g.output(a, "a")
    return g, {"x": rng.standard_normal((1, 8, 8, 8)).astype(np.float32)}


def test_a_chain_holds_a_tensor_its_groups_read_twice_and_takes_a_max_pool():
    g, x = split_graph()
    res = run(g, CHIPS["bm1684"], x)
    assert next(n for n in res.program.notes if n.startswith("layer group")).startswith("layer group a..e: 5 layers in 1 slice(s)")
    assert res.stats.ddr_write_bytes == g.tensors[g.outputs["y"]].nbytes  # a, the sum, the pool's and d's results stay on chip


def test_a_tensor_read_outside_the_chain_ends_it():
    g, x = split_graph(output_a=True)
    res = run(g, CHIPS["bm1684"], x)
    assert slices(res.program) == [("b", 1, False)]
    assert res.stats.ddr_write_bytes == g.tensors[g.outputs["y"]].nbytes + g.tensors[g.outputs["a"]].nbytes


# ---- slicing: less local memory, more slices --------------------------------------------------

def test_less_local_memory_means_more_slices_and_then_weights_reloaded():
    """Squeezing the local memory cuts the group into more slices. While the weights fit beside
    a slice they are held, loaded once; once they do not, every slice loads them again."""
    g = chain_graph((1, 64, 112, 112), "float32", [(64, 1, 1), (64, 3, 1), (256, 1, 1)])
    x = inputs_for(g)
    chip = CHIPS["bm1684"]
    weight_bytes = sum(g.tensors[f"w{i}"].nbytes for i in range(3))
    seen = []
    for free in (16 << 20, 8 << 20, 4 << 20):
        res = run(g, chip, x, reserve=squeezed(chip, free))
        [(_, count, held)] = slices(res.program)
        weight_reads = sum(i.src.nbytes for s in res.program.streams.values() for i in s
                           if i.kind == "dma" and i.src.mem == "ddr" and
                           any(_inside(i.src, b.region) for b in res.program.bindings if b.name.startswith("w")))
        seen.append((count, held, weight_reads))
    assert [(c, h) for c, h, _ in seen] == [(2, True), (4, True), (7, False)]
    for count, held, reads in seen:  # reloaded: every slice loads them (a slice's convolution may cut it in tiles, each loading them)
        assert reads == weight_bytes if held else reads >= count * weight_bytes


def test_a_chain_the_estimate_finds_slower_is_lowered_layer_by_layer():
    g = chain_graph((1, 64, 56, 56), "float32", [(64, 1, 1), (64, 3, 1), (256, 1, 1)])
    chip = CHIPS["bm1684"]
    res = run(g, chip, inputs_for(g), reserve=squeezed(chip, 512 << 10))
    assert slices(res.program) == []
    [note] = [n for n in res.program.notes if n.startswith("layer group")]
    sliced, layered = (int(v.replace(",", "")) for v in re.findall(r"estimated ([\d,]+) cycles in \d+ slice\(s\) against "
                                                                   r"([\d,]+) layer by layer; lowered layer by layer", note)[0])
    assert sliced > layered


def test_a_chain_whose_slice_floors_exceed_layer_by_layer_is_declined_unsearched(monkeypatch):
    """Where each layer's floor bounds its estimate (one unit, no cache of DDR), a chain whose
    slices' floors already exceed layer by layer's estimate is declined before its slices are
    searched: the same program as searching them, which finds them slower still."""
    g = chain_graph((16, 64, 56, 56), "int8", BOTTLENECK * 2 + [(64, 3, 2)])
    chip = CHIPS["bm1684"]
    policy = isa.Policy(reserve=squeezed(chip, 4 << 20))
    quick = isa.lower(g, chip, policy=policy)
    declined = r"at least ([\d,]+) cycles in (\d+) slice\(s\) against ([\d,]+) layer by layer"
    [(least, in_slices, layered)] = [tuple(int(v.replace(",", "")) for v in m) for n in quick.notes for m in re.findall(declined, n)]
    assert least > layered
    chain = sys.modules["isa.lower.schedule.chain"]
    monkeypatch.setattr(chain, "_floors_bound", lambda ctx, plans: False)
    searched = isa.lower(g, chip, policy=policy)
    [sliced] = [int(m.replace(",", "")) for n in searched.notes
                for m in re.findall(rf"estimated ([\d,]+) cycles in {in_slices} slice\(s\) against {layered:,} layer by layer", n)]
    assert sliced >= least
    assert searched.streams == quick.streams


def _inside(region, home):
    lo, hi = home.span()
    return region.mem == home.mem and lo <= region.addr < hi


def test_held_weights_are_multiplied_where_they_are():
    g = chain_graph((1, 16, 64, 32), "float32", [(16, 3, 1), (16, 3, 1), (16, 3, 1)])
    # 16 output channels on the EU side: with them on the lanes the products cost twice, and the
    # estimate takes the chain in one slice
    chip = chips.load("bm1684", {"engines.tiu.matrix.conv_channels_on_m": False})
    res = run(g, chip, inputs_for(g), reserve=squeezed(chip, 768 << 10))
    [(_, count, held)] = slices(res.program)
    assert count > 1 and held
    held_bufs = [b for b in res.program.buffers if b.name.endswith(".held")]
    assert sorted(b.name for b in held_bufs) == ["w0.held", "w1.held", "w2.held"]
    matrix = [i for s in res.program.streams.values() for i in s if i.kind == "matrix"]
    assert matrix and all(any(b.addr <= i.b.addr < b.addr + b.size for b in held_bufs) for i in matrix)
    # the only DMAs reading the weights are the two loads that hold them
    reads = [i for s in res.program.streams.values() for i in s if i.kind == "dma" and i.src.mem == "ddr"
             and any(_inside(i.src, b.region) for b in res.program.bindings if b.name in ("w0", "w1", "w2"))]
    assert len(reads) == 3


def test_a_chain_whose_rows_do_not_fit_is_lowered_layer_by_layer():
    g = chain_graph((1, 64, 4, 256), "float32", [(64, 3, 1), (64, 3, 1)])  # a row of 64 KiB
    chip = CHIPS["bm1684"]
    res = run(g, chip, inputs_for(g), reserve=squeezed(chip, 256 << 10))
    assert slices(res.program) == []
    assert res.stats.ddr_write_bytes == 2 * g.tensors["x"].nbytes  # relu0's result goes out and comes back


def test_chain_policy_key():
    assert policy_from_overrides({"chain": "off"}) == isa.Policy(chain=False)
    with pytest.raises(isa.ConfigError, match=r"policy.chain=maybe: expected true or false"):
        policy_from_overrides({"chain": "maybe"})
    with pytest.raises(isa.ConfigError, match=r"policy.chain: expected true or false, got 1"):
        isa.Policy(chain=1)


# ---- random chains against the references ---------------------------------------------------------

@st.composite
def chain_case(draw):
    chip, dtype = draw(st.sampled_from([("generic", "float32"), ("bm1684", "float32"), ("bm1684", "int8"),
                                        ("bm1686", "float16"), ("bm1686", "int8")]))
    layers, c = [], draw(st.integers(1, 24))
    for _ in range(draw(st.integers(2, 4))):
        layers.append((draw(st.integers(-1, 24)), draw(st.sampled_from([1, 3])), draw(st.sampled_from([1, 1, 2])),  # 0: depthwise, -1: pool
                       draw(st.sampled_from([1, 1, 2]))))
    shape = (draw(st.integers(1, 2)), c, draw(st.integers(4, 64)), draw(st.integers(1, 32)))
    shortcut = draw(st.booleans()) and all(layer[2] == 1 for layer in layers)
    if shortcut and layers[-1][0]:
        layers[-1] = (c,) + layers[-1][1:]
    shortcut = shortcut and (layers[-1][0] == c or all(layer[0] <= 0 for layer in layers))
    squeeze = draw(st.sampled_from([None, 1, 2, 4]))  # the local memory left free: the intermediates' bytes x this
    return chip, dtype, shape, layers, shortcut, squeeze


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=chain_case())
def test_random_chains_match_the_references(case):
    chip, dtype, shape, layers, shortcut, squeeze = case
    chip = CHIPS[chip]
    g = chain_graph(shape, dtype, layers, shortcut)
    knobs = {}
    if squeeze:  # at least what the convolutions' smallest tiles need, about 24 granules
        inner = sum(g.tensors[n.outputs[0]].nbytes for n in g.nodes if n.op == "active")
        knobs["reserve"] = squeezed(chip, max(24 * chip.memories["lmem"].granule, squeeze * inner))
    run(g, chip, inputs_for(g), **knobs)


def test_sliced_groups_of_residual_blocks_match_the_reference():
    """Two ResNet-50 blocks (112 x 112 input) in 4 MiB of local memory: a group runs several
    convolutions in slices while a block's output is read by the next block's first convolution
    (its window's rows with a halo) and by its shortcut add (the slice's rows)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from resnet50 import resnet50_stage

    g = resnet50_stage("float32", 2, blocks=2, size=112)
    chip = CHIPS["bm1684"]
    x = {"x": np.random.default_rng(0).standard_normal(g.tensors["x"].shape).astype(np.float32)}
    res = sim.run(g, chip, x, policy=isa.Policy(reserve=squeezed(chip, 4 << 20)))
    np.testing.assert_allclose(res.outputs["y"], evaluate(g, x, chip)["y"], rtol=1e-4, atol=1e-4)
    assert sim.execute(res.program, chip, mode="timing").cycles == res.cycles
    notes = [n for n in res.program.notes if n.startswith("layer group res2a_c..res2b_c")]
    assert notes and re.search(r": 5 layers in [2-9] slice\(s\)", notes[0])


def inverted_residual(shape, dtype, expand=6, seed=0):
    """MobileNetV2's block: 1x1 expand + relu, 3x3 depthwise + relu, 1x1 project, + the input."""
    rng = np.random.default_rng(seed)
    g = isa.Graph("inverted_residual")
    x = g.input("x", shape, dtype)
    c, wide = shape[1], shape[1] * expand
    def w(name, s):
        return g.constant(name, (rng.standard_normal(s) / np.sqrt(np.prod(s[1:]))).astype(dtype))
    h = O.active(O.conv(x, w("w0", (wide, c, 1, 1)), name="expand"), "relu", name="relu0")
    h = O.active(O.conv(h, w("w1", (wide, 1, 3, 3)), groups=wide, pad_h_t=1, pad_h_b=1, pad_w_l=1, pad_w_r=1, name="dw"),
                 "relu", name="relu1")
    g.output(O.add(O.conv(h, w("w2", (c, wide, 1, 1)), name="project"), x, name="sum"), "y")
    return g


@pytest.mark.parametrize("chip, dtype, free, count", [("bm1684", "float32", None, 1), ("bm1686", "float16", None, 1),
                                                      ("generic", "float32", None, 3), ("bm1684", "float32", 2 << 20, 12)])
def test_a_depthwise_convolution_joins_the_group(chip, dtype, free, count):
    """An inverted-residual block is one layer group, its 6x wider inner activations on chip;
    with less local memory (generic's 8 MiB, or 2 MiB of BM1684's) it runs in slices."""
    g = inverted_residual((1, 32, 56, 56), dtype)
    chip = CHIPS[chip]
    res = run(g, chip, inputs_for(g), **({"reserve": squeezed(chip, free)} if free else {}))
    assert [(first, n) for first, n, _ in slices(res.program)] == [("expand", count)]
    assert res.stats.ddr_write_bytes == g.tensors[g.outputs["y"]].nbytes  # the 6x wide activations never leave
