"""conv, deconv and conv3d on the machine: against direct-loop references written here from the
definitions (not from isa.ops.conv.convolve), against the ops' own references over random shapes
(hypothesis), the seed's three quantized modes on numbers worked out by hand (including where
they lose precision on purpose), fusion of a conv with its element-wise tail, the errors, and
how cycles follow local memory size."""

import itertools
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from refeval import evaluate

import chips
import isa
import sim
from isa import dtypes
from isa.lower.schedule.fusion import groups as layer_groups
from isa.ops import REGISTRY
from sim.run import configure

CHIPS = {name: chips.load(name) for name in ("generic", "bm1684", "bm1686")}
O = isa.ops
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
MODES = ("LowPrecisionSymmetric", "HighPrecisionSymmetric", "HighPrecisionAsymmetric")
TOL = {"float32": 1e-5, "float16": 2e-3}
SCALES = [1.0, 0.5, 0.25, 2.0**-7, 2.0**-12, 2.0**-20, 0.3, 0.1, 0.0123, 0.7, 1.7, 3.0]


# ---- references written from the definitions ---------------------------------------------------

def direct_conv(x, w, bias=None, strides=None, dilations=None, pads=None, groups=1, pad_value=0):
    """out[n, o, p...] = bias[o] + sum over the input channels c of o's group and the kernel
    positions k of x[n, c, p * stride - pad_before + k * dilation] * w[o, c - group start, k],
    where a position outside the input reads pad_value. Any number of spatial dimensions; pads
    are (before, after) per dimension. Integers exactly (Python ints), floats in float64."""
    spatial = x.ndim - 2
    strides, dilations = strides or (1,) * spatial, dilations or (1,) * spatial
    pads = pads or ((0, 0),) * spatial
    exact = x.dtype.kind in "iu" and w.dtype.kind in "iu"
    xs, ws = x.tolist(), w.tolist()
    n, _ic = x.shape[:2]
    oc, icg = w.shape[:2]
    kernel, sizes = w.shape[2:], x.shape[2:]
    ocg = oc // groups
    out_sizes = tuple((sz + b + a - d * (k - 1) - 1) // s + 1 for sz, k, s, d, (b, a) in zip(sizes, kernel, strides, dilations, pads))
    out = np.zeros((n, oc) + out_sizes, np.int64 if exact else np.float64)

    def at(nested, index):
        for i in index:
            nested = nested[i]
        return nested

    for b in range(n):
        for o in range(oc):
            first = (o // ocg) * icg
            for p in itertools.product(*(range(m) for m in out_sizes)):
                acc = 0
                for c in range(icg):
                    for k in itertools.product(*(range(m) for m in kernel)):
                        pos = tuple(pi * s - before + ki * d for pi, ki, s, d, (before, _) in zip(p, k, strides, dilations, pads))
                        inside = all(0 <= q < sz for q, sz in zip(pos, sizes))
                        value = at(xs[b][first + c], pos) if inside else pad_value
                        acc += value * at(ws[o][c], k)
                out[(b, o) + p] = acc
    if bias is not None:
        out = out + np.asarray(bias).reshape((1, oc) + (1,) * spatial).astype(out.dtype)
    return out


def direct_deconv(x, w, bias=None, strides=(1, 1), dilations=(1, 1), pads=((0, 0), (0, 0)), groups=1):
    """Transposed convolution by scattering: every input element x[n, c, i, j] times every
    kernel tap w[c, o, a, b] is added into out[n, group(c) * OC/g + o, i * sh - pad_top + a * dh,
    j * sw - pad_left + b * dw] when that lands inside the output."""
    exact = x.dtype.kind in "iu" and w.dtype.kind in "iu"
    xs, ws = x.tolist(), w.tolist()
    n, ic, h, wd = x.shape
    _, ocg, kh, kw = w.shape
    icg, oc = ic // groups, ocg * groups
    (pt, pb), (pl, pr) = pads
    (sh, sw), (dh, dw) = strides, dilations
    oh, ow = (h - 1) * sh - pt - pb + dh * (kh - 1) + 1, (wd - 1) * sw - pl - pr + dw * (kw - 1) + 1
    out = [[[[0] * ow for _ in range(oh)] for _ in range(oc)] for _ in range(n)]
    for b, c, i, j in itertools.product(range(n), range(ic), range(h), range(wd)):
        v = xs[b][c][i][j]
        for o, a, e in itertools.product(range(ocg), range(kh), range(kw)):
            r, s = i * sh - pt + a * dh, j * sw - pl + e * dw
            if 0 <= r < oh and 0 <= s < ow:
                out[b][(c // icg) * ocg + o][r][s] += v * ws[c][o][a][e]
    out = np.array(out, np.int64 if exact else np.float64).reshape(n, oc, oh, ow)
    if bias is not None:
        out = out + np.asarray(bias).reshape(1, oc, 1, 1).astype(out.dtype)
    return out


def half_up(v):
    """The seed's rounding right shift rounds halves up: floor(v + 1/2)."""
    return np.floor(np.asarray(v, np.float64) + 0.5).astype(np.int64)


def saturate(v, dtype):
    lo, hi = dtypes.int_range(dtype)
    return np.clip(v, lo, hi)


# ---- helpers ----------------------------------------------------------------------------------

def values(rng, shape, dtype, small=False):
    if dtypes.is_int(dtype):
        lo, hi = dtypes.int_range(dtype)
        if small:
            lo, hi = max(lo, -8), min(hi, 8)
        return rng.integers(lo, hi, shape, endpoint=True).astype(dtypes.np_dtype(dtype))
    return (rng.standard_normal(shape) * 2).astype(dtypes.np_dtype(dtype))


def check(graph, chip, inputs, bound=None):
    """Run functional and timing: outputs equal the references (floats within `bound`, an
    array of allowed absolute errors), timing cycles equal functional cycles."""
    program = isa.lower(graph, chip)
    res = sim.execute(program, chip, inputs)
    for name, want in evaluate(graph, inputs, chip).items():
        got = res.outputs[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        if bound is None:
            np.testing.assert_array_equal(got, want, err_msg=name)
        else:
            err = np.abs(got.astype(np.float64) - want.astype(np.float64))
            assert np.all(err <= bound), f"{name}: max error {err.max()} (allowed {bound.flat[np.argmax(err - bound)]})"
    assert sim.execute(program, chip, mode="timing").cycles == res.cycles
    return res.outputs


def float_bound(x, w, b, dtype, conv=direct_conv, **kw):
    """Allowed error: tol * (|x| (*) |w| + |b|), the scale of the rounding in any summation order."""
    mags = conv(np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64)), None if b is None else np.abs(b.astype(np.float64)), **kw)
    return TOL[dtype] * mags + 1e-30


def conv_graph(x_shape, x_dtype, w, b=None, op="conv", weight_input=False, **params):
    g = isa.Graph(op)
    x = g.input("x", x_shape, x_dtype)
    wt = g.input("w", w.shape, dtypes.of_array(w)) if weight_input else g.constant("w", w)
    bt = None if b is None else g.constant("b", b)
    g.output(getattr(O, op)(x, wt, bt, **params), "y")
    return g


def conv_params(case):
    (pt, pb), (pl, pr) = case["pads"]
    return {"dh": case["dilations"][0], "dw": case["dilations"][1], "pad_h_t": pt, "pad_h_b": pb, "pad_w_l": pl, "pad_w_r": pr,
            "stride_h": case["strides"][0], "stride_w": case["strides"][1], "groups": case["groups"]}


def direct_kwargs(params):
    """The direct references' keyword arguments for conv's keyword parameters."""
    p = {"dh": 1, "dw": 1, "pad_h_t": 0, "pad_h_b": 0, "pad_w_l": 0, "pad_w_r": 0, "stride_h": 1, "stride_w": 1, "groups": 1, **params}
    return {"strides": (p["stride_h"], p["stride_w"]), "dilations": (p["dh"], p["dw"]),
            "pads": ((p["pad_h_t"], p["pad_h_b"]), (p["pad_w_l"], p["pad_w_r"])), "groups": p["groups"]}


def ref_kwargs(case):
    return {"strides": case["strides"], "dilations": case["dilations"], "pads": case["pads"], "groups": case["groups"]}


@st.composite
def conv_case(draw, transposed=False, spatial=2, depthwise=True, max_ch=3):
    """N, channels and groups (plain, grouped, depthwise, grouped with a channel multiplier),
    kernel 1-4, stride 1-3, dilation 1-3, each pad 0-3 on its own, sizes giving an output."""
    kinds = ["plain", "grouped", "multiplier"] + (["depthwise"] if depthwise else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "plain":
        groups, icg, ocg = 1, draw(st.integers(1, max_ch)), draw(st.integers(1, max_ch))
    elif kind == "grouped":
        groups, icg, ocg = draw(st.integers(2, 3)), draw(st.integers(1, max_ch)), draw(st.integers(1, max_ch))
        if not depthwise and icg == ocg == 1:
            ocg = 2
    elif kind == "depthwise":
        groups, icg, ocg = draw(st.integers(2, 4)), 1, 1
    else:  # each input channel feeds its own ocg > 1 outputs
        groups, icg, ocg = draw(st.integers(2, 3)), 1, draw(st.integers(2, 3))
    kernel = tuple(draw(st.integers(1, 4 if spatial == 2 else 3)) for _ in range(spatial))
    strides = tuple(draw(st.integers(1, 3)) for _ in range(spatial))
    dilations = tuple(draw(st.integers(1, 3)) for _ in range(spatial))
    sizes, pads = [], []
    for k, s, d in zip(kernel, strides, dilations):
        if transposed:
            n = draw(st.integers(1, 5))
            room = (n - 1) * s + d * (k - 1)  # output = room - pads + 1 >= 1
            before = draw(st.integers(0, min(3, room)))
            pads.append((before, draw(st.integers(0, min(3, room - before)))))
        else:
            pads.append((draw(st.integers(0, 3)), draw(st.integers(0, 3))))
            least = max(1, d * (k - 1) + 1 - sum(pads[-1]))  # the output is at least 1
            n = draw(st.integers(least, least + (6 if spatial == 2 else 3)))
        sizes.append(n)
    return {"n": draw(st.integers(1, 2)), "groups": groups, "ic": groups * icg, "oc": groups * ocg, "icg": icg, "ocg": ocg,
            "kernel": kernel, "strides": strides, "dilations": dilations, "pads": tuple(pads), "sizes": tuple(sizes),
            "bias": draw(st.booleans()), "seed": draw(st.integers(0, 2**32 - 1))}


def case_arrays(case, dtype, w_dtype=None, bias_dtype=None, transposed=False, small=False):
    rng = np.random.default_rng(case["seed"])
    x = values(rng, (case["n"], case["ic"]) + case["sizes"], dtype, small)
    w_shape = ((case["ic"], case["ocg"]) if transposed else (case["oc"], case["icg"])) + case["kernel"]
    w = values(rng, w_shape, w_dtype or dtype, small)
    b = None
    if case["bias"]:
        bias_dtype = bias_dtype or dtype
        shape = (1, case["oc"]) + (1,) * len(case["sizes"])
        if bias_dtype == "int32":
            b = rng.integers(-(2**20), 2**20, shape).astype(np.int32)
        elif bias_dtype == "float32" and dtype != "float32":  # a quantized op's float bias
            b = (rng.standard_normal(shape) * 1000).astype(np.float32)
        else:
            b = values(rng, shape, bias_dtype, small)
    return rng, x, w, b


# ---- 1. hand-picked cases against the direct loops ------------------------------------------------

def test_direct_reference_on_numbers_worked_by_hand():
    """The reference of this file is right before anything is checked against it."""
    x = np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3)
    w = np.ones((1, 1, 2, 2), np.float32)
    np.testing.assert_array_equal(direct_conv(x, w)[0, 0], [[8, 12], [20, 24]])
    # top padding 1: the first output row sees a zero row and the input's first row
    np.testing.assert_array_equal(direct_conv(x, w, pads=((1, 0), (0, 0)))[0, 0], [[1, 3], [8, 12], [20, 24]])
    # dilation 2 over columns: x[i, j] + x[i, j + 2] + x[i+1, j] + x[i+1, j+2]
    np.testing.assert_array_equal(direct_conv(x, w, dilations=(1, 2))[0, 0], [[0 + 2 + 3 + 5], [3 + 5 + 6 + 8]])
    # deconv by scattering: x = [1, 2] through w = [1, 10] with stride 2 -> [1, 10, 2, 20]
    one_row = direct_deconv(np.array([[[[1, 2]]]], np.float32), np.array([[[[1, 10]]]], np.float32), strides=(1, 2))
    np.testing.assert_array_equal(one_row[0, 0], [[1, 10, 2, 20]])


HAND = [
    # (name, x shape, w shape, bias, params)
    ("asymmetric pads", (1, 3, 6, 5), (4, 3, 3, 3), False, {"pad_h_t": 1, "pad_h_b": 2, "pad_w_l": 0, "pad_w_r": 3}),
    ("dilation and stride", (2, 2, 9, 8), (3, 2, 3, 2), True, {"dh": 2, "dw": 3, "stride_h": 2, "stride_w": 1, "pad_h_t": 2, "pad_w_r": 1}),
    ("stride 3, 1x1 kernel", (1, 4, 7, 7), (5, 4, 1, 1), True, {"stride_h": 3, "stride_w": 3}),
    ("groups", (1, 6, 5, 6), (4, 3, 2, 3), True, {"groups": 2, "pad_w_l": 1, "pad_w_r": 1}),
    ("channel multiplier", (1, 3, 5, 5), (6, 1, 3, 3), False, {"groups": 3, "stride_h": 2, "pad_h_t": 1}),
    ("depthwise", (2, 4, 7, 6), (4, 1, 3, 3), True, {"groups": 4, "stride_w": 2, "pad_h_t": 3, "pad_h_b": 1, "pad_w_l": 2, "dh": 2}),
    ("everything", (2, 4, 8, 9), (6, 2, 4, 2), True,
     {"groups": 2, "dh": 2, "dw": 3, "stride_h": 3, "stride_w": 2, "pad_h_t": 3, "pad_h_b": 0, "pad_w_l": 1, "pad_w_r": 2}),
]


@pytest.mark.parametrize("name, x_shape, w_shape, with_bias, params", HAND, ids=[h[0] for h in HAND])
def test_conv_against_direct_loops(name, x_shape, w_shape, with_bias, params):
    rng = np.random.default_rng(len(name))
    x = values(rng, x_shape, "float32")
    w = values(rng, w_shape, "float32")
    b = values(rng, (1, w_shape[0], 1, 1), "float32") if with_bias else None
    kw = direct_kwargs(params)
    want = direct_conv(x, w, b, **kw)
    bound = float_bound(x, w, b, "float32", **kw)
    g = conv_graph(x_shape, "float32", w, b, **params)
    ref = REGISTRY["conv"].reference([x, w] + ([b] if b is not None else []), g.nodes[0].params)[0]
    assert ref.shape == want.shape and ref.dtype == np.float32
    assert np.all(np.abs(ref - want) <= bound)
    for chip in CHIPS.values():
        got = sim.run(g, chip, {"x": x}).outputs["y"]
        assert got.shape == want.shape and got.dtype == np.float32
        assert np.all(np.abs(got - want) <= bound), chip.name
    assert np.abs(want).max() > 1  # not a vacuous all-zero case


# ---- 2. float sweep: machine against the op's reference ------------------------------------------

@pytest.mark.parametrize("chip, dtype", [("generic", "float32"), ("bm1684", "float32"), ("bm1686", "float32"),
                                         ("generic", "float16"), ("bm1686", "float16")])
@SETTINGS
@given(case=conv_case())
def test_conv_float_sweep(chip, dtype, case):
    _, x, w, b = case_arrays(case, dtype)
    g = conv_graph(x.shape, dtype, w, b, **conv_params(case))
    bound = float_bound(x, w, b, dtype, **ref_kwargs(case))
    out = check(g, CHIPS[chip], {"x": x}, bound)["y"]
    assert np.all(np.abs(out.astype(np.float64) - direct_conv(x, w, b, **ref_kwargs(case))) <= bound)


# ---- tiled: small local memories force several output tiles and input-channel blocks --------------

TILED_CHIPS = {f"{name}-{size}": chips.load(name, {"memories.lmem.size": size})
               for name, size in (("bm1684", "2KiB"), ("bm1684", "4KiB"), ("generic", "1KiB"), ("generic", "512B"))}


@st.composite
def tiled_case(draw, transposed=False, depthwise_only=False):
    groups = "depthwise" if depthwise_only else draw(st.sampled_from([1, 2, 3] if transposed else [1, 2, 3, "depthwise"]))
    if groups == "depthwise":
        groups, icg, ocg = draw(st.integers(2, 20)), 1, 1
    else:
        icg, ocg = draw(st.integers(1, 16)), draw(st.integers(1, 16))
        if transposed and groups > 1 and icg == ocg == 1:
            ocg = 2  # not depthwise: see test_depthwise_deconv
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    strides = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    dilations = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pads = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(2))
    sizes = tuple(draw(st.integers(5, 14)) for _ in range(2))
    return {"n": draw(st.integers(1, 2)), "groups": groups, "ic": groups * icg, "oc": groups * ocg, "icg": icg, "ocg": ocg,
            "kernel": kernel, "strides": strides, "dilations": dilations, "pads": pads, "sizes": sizes,
            "bias": draw(st.booleans()), "seed": draw(st.integers(0, 2**32 - 1))}


@pytest.mark.parametrize("chip", ["bm1684-2KiB", "generic-512B"])
@pytest.mark.parametrize("op", ["conv", "deconv"])
@settings(SETTINGS, max_examples=12)
@given(data=st.data())
def test_tiled_float32(chip, op, data):
    case = data.draw(tiled_case(transposed=op == "deconv"))
    _, x, w, b = case_arrays(case, "float32", transposed=op == "deconv")
    g = conv_graph(x.shape, "float32", w, b, op=op, **conv_params(case))
    bound = float_bound(x, w, b, "float32", conv=direct_deconv if op == "deconv" else direct_conv, **ref_kwargs(case))
    check(g, TILED_CHIPS[chip], {"x": x}, bound)


@pytest.mark.parametrize("chip, dtype, cin, cout, side, kernel, pad", [
    ("ascend910b", "float16", 48, 300, 12, 1, 0), ("ascend910b", "float16", 79, 216, 16, 1, 0), ("bm1684", "float32", 70, 300, 8, 3, 1),
    ("bm1686", "float16", 45, 300, 8, 3, 1), ("bm1686", "float16", 40, 260, 10, 3, 0)])
def test_a_kept_input_gives_the_reference_values(chip, dtype, cin, cout, side, kernel, pad):
    """Output tiles of at most 128 channels, so the convolution keeps each spatial tile's input
    while its output-channel blocks walk: on one core and dealt among the 910B's 24, with an
    edge input-channel block and padding."""
    config, policy = configure(chip, {"policy.max_tile": "c=128"})
    rng = np.random.default_rng(cin)
    x, w = values(rng, (1, cin, side, side), dtype), (rng.standard_normal((cout, cin, kernel, kernel)) * 0.05).astype(dtype)
    g = conv_graph(x.shape, dtype, w, pad_h_t=pad, pad_h_b=pad, pad_w_l=pad, pad_w_r=pad)
    program = isa.lower(g, config, policy)
    assert "the input kept across output-channel blocks" in " ".join(program.notes)
    res = sim.execute(program, config, {"x": x})
    # the rounding's scale, tol * (|x| (*) |w|), from the reference evaluator (direct_conv is too slow here)
    magnitudes = evaluate(conv_graph(x.shape, "float32", np.abs(w).astype(np.float32), pad_h_t=pad, pad_h_b=pad, pad_w_l=pad, pad_w_r=pad),
                          {"x": np.abs(x).astype(np.float32)}, CHIPS["generic"])["y"]
    bound = TOL[dtype] * magnitudes.astype(np.float64)
    assert np.all(np.abs(res.outputs["y"].astype(np.float64) - evaluate(g, {"x": x}, config)["y"].astype(np.float64)) <= bound)
    assert sim.execute(program, config, mode="timing").cycles == res.cycles


@pytest.mark.parametrize("chip", ["bm1684-4KiB", "generic-1KiB"])  # the high-precision modes' scratch needs more
@pytest.mark.parametrize("mode", MODES)
@settings(SETTINGS, max_examples=12)
@given(data=st.data())
def test_tiled_quantized(chip, mode, data):
    # the asymmetric mode on the matrix unit: see test_asymmetric_tile_leaves_room_for_the_zero_point
    case = data.draw(tiled_case(depthwise_only=mode == "HighPrecisionAsymmetric"))
    dt = data.draw(st.sampled_from(("int8", "uint8")))
    _, x, w, b = case_arrays(case, dt, dt, "int16" if dt == "int8" else "uint16", small=True)
    params = conv_params(case)
    params.update(scale=data.draw(st.sampled_from(SCALES)), mode=mode, out_dtype=data.draw(st.sampled_from((dt, dt[:-1] + "16"))))
    if mode == "LowPrecisionSymmetric":
        params["out_dtype"] = dt
    elif mode == "HighPrecisionAsymmetric":
        zero = st.integers(0, 3) if dt == "uint8" else st.integers(-3, 3)
        params.update(left_zero_point=data.draw(zero), right_zero_point=data.draw(zero), output_zero_point=data.draw(zero))
    check(conv_graph(x.shape, dt, w, b, **params), TILED_CHIPS[chip], {"x": x})


@pytest.mark.parametrize("dtype, channels, mode", [("float32", 128, None), ("int8", 256, "LowPrecisionSymmetric"),
                                                    ("uint8", 256, "LowPrecisionSymmetric")])
def test_reduction_in_input_channel_blocks(dtype, channels, mode):
    """So many input channels that one weight block does not fit: the matrix unit accumulates
    over channel blocks (acc=1), and the numbers are still the direct loops' (small integers,
    exact in float32 too)."""
    chip = TILED_CHIPS["generic-512B"]
    rng = np.random.default_rng(channels)
    lo, hi = (0, 2) if dtype == "uint8" else (-3, 4)
    x = rng.integers(lo, hi, (1, channels, 5, 4)).astype(dtype)
    w = rng.integers(lo, hi, (3, channels, 3, 3)).astype(dtype)
    b = rng.integers(lo, 9, (1, 3, 1, 1)).astype({"float32": "float32", "int8": "int16", "uint8": "uint16"}[dtype])
    quant = {} if mode is None else {"mode": mode, "scale": 2.0**-3}
    g = conv_graph(x.shape, dtype, w, b, pad_h_t=1, pad_w_l=2, stride_w=2, **quant)
    assert any(" acc=1 " in line for line in isa.lower(g, chip).to_text().splitlines() if " matmul " in line)
    out = check(g, chip, {"x": x})["y"]
    acc = direct_conv(x, w, b, strides=(1, 2), pads=((1, 0), (2, 0)))
    want = acc if mode is None else saturate(half_up(acc / 8), dtype)
    np.testing.assert_array_equal(out, want)
    assert np.mean(np.abs(want) < 100) > 0.5


def test_asymmetric_tile_leaves_room_for_the_zero_point():
    chip = TILED_CHIPS["generic-1KiB"]
    x = np.arange(25, dtype=np.int8).reshape(1, 1, 5, 5)
    g = conv_graph(x.shape, "int8", np.ones((11, 1, 1, 1), np.int8), scale=1.0, mode="HighPrecisionAsymmetric", left_zero_point=1)
    out = check(g, chip, {"x": x})["y"]
    np.testing.assert_array_equal(out, np.broadcast_to(x - 1, (1, 11, 5, 5)))


def test_out_of_memory_message_says_what_does_not_fit():
    g = conv_graph((1, 1, 3, 3), "float32", np.ones((1, 1, 1, 1), np.float32))
    with pytest.raises(isa.OutOfMemoryError, match=r"conv_0: even a one-element output tile needs \d+ bytes") as info:
        isa.lower(g, chips.load("bm1684", {"memories.lmem.size": "512B"}))
    need, free = (int(v) for v in re.search(r"needs (\d+) bytes of lmem \((\d+) free\)", str(info.value)).groups())
    assert need > free, str(info.value)


# ---- 3. the quantized modes --------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("chip", ["generic", "bm1684"])
@SETTINGS
@given(case=conv_case(max_ch=3), data=st.data())
def test_conv_quantized_sweep_is_exact(chip, mode, case, data):
    from isa.ops.quantized import MODES as RULES

    x_dtype, w_dtype = data.draw(st.sampled_from(("int8", "uint8"))), data.draw(st.sampled_from(("int8", "uint8")))
    bias_types, out_types = RULES[mode]
    bias_dtype = data.draw(st.sampled_from(bias_types)) if case["bias"] else None
    out = data.draw(st.sampled_from(out_types))
    if out.startswith("u") and any(d and d.startswith("int") for d in (x_dtype, w_dtype, bias_dtype)):
        out = out[1:]  # an unsigned output needs unsigned inputs
    small = data.draw(st.booleans())
    _, x, w, b = case_arrays(case, x_dtype, w_dtype, bias_dtype, small=small)
    if mode == "HighPrecisionAsymmetric" and bias_dtype == "float32":
        b = np.round(b)  # a fractional float bias: see test_asymmetric_depthwise_float_bias_on_bm1684
    params = conv_params(case)
    params.update(scale=data.draw(st.sampled_from(SCALES)), mode=mode, out_dtype=out)
    if mode == "HighPrecisionAsymmetric":
        for z, t in (("left_zero_point", x_dtype), ("right_zero_point", w_dtype), ("output_zero_point", out)):
            params[z] = data.draw(st.integers(*dtypes.int_range(t)))
    weight_input = mode != "HighPrecisionAsymmetric" and data.draw(st.booleans())
    g = conv_graph(x.shape, x_dtype, w, b, weight_input=weight_input, **params)
    inputs = {"x": x, "w": w} if weight_input else {"x": x}
    check(g, CHIPS[chip], inputs)


def lowp(x, w, scale, b=None, **params):
    return conv_graph(x.shape, dtypes.of_array(x), w, b, scale=scale, mode="LowPrecisionSymmetric", **params)


def test_low_precision_symmetric_loses_precision_unless_the_scale_is_a_power_of_two():
    """scale 0.1: rshift = ceil(log2 10) = 4, the left scale 0.1 * 16 = 1.6 kept as int(1.6 * 128)
    = 204 / 128. acc = 10 * x = [500, 100, -300, 30, 1200, -1280]:
      500: (500 + 8) >> 4 = 31, (31 * 204 + 64) >> 7 = 49     (the formula: round(50.0) = 50)
    -1280: (-1280 + 8) >> 4 = -80, (-80 * 204 + 64) >> 7 = -127 (the formula: -128)
    the others (100, -300, 30, 1200) come out as 10, -30, 3, 120, as the formula says.
    scale 1/16: just the rounding shift, which is the formula rounded half up."""
    x = np.array([[[[50, 10, -30, 3, 120, -128]]]], np.int8)
    w = np.array([[[[10]]]], np.int8)
    acc = direct_conv(x, w)
    for chip in ("generic", "bm1684"):
        out = check(lowp(x, w, 0.1), CHIPS[chip], {"x": x})["y"]
        np.testing.assert_array_equal(out[0, 0, 0], [49, 10, -30, 3, 120, -127])
        ideal = saturate(half_up(acc * np.float64(np.float32(0.1))), "int8")
        np.testing.assert_array_equal(ideal[0, 0, 0], [50, 10, -30, 3, 120, -128])
        assert (out != ideal).sum() == 2
        out = check(lowp(x, w, 1 / 16), CHIPS[chip], {"x": x})["y"]
        np.testing.assert_array_equal(out[0, 0, 0], [31, 6, -19, 2, 75, -80])  # 31.25, 6.25, -18.75, 1.875, 75, -80


@pytest.mark.parametrize("chip", ["generic", "bm1684"])
@pytest.mark.parametrize("m", [1, 3, 5, 8])
def test_low_precision_symmetric_with_scale_two_to_the_minus_m_is_the_formula(chip, m):
    rng = np.random.default_rng(m)
    lim = 4 << (m // 2)  # results of a few tens: not all saturated, not all 0
    x = rng.integers(-lim, lim, (2, 4, 6, 5), endpoint=True).astype(np.int8)
    w = rng.integers(-lim, lim, (3, 4, 3, 3), endpoint=True).astype(np.int8)
    b = rng.integers(-lim * 8, lim * 8, (1, 3, 1, 1)).astype(np.int16)
    params = {"pad_h_t": 1, "pad_h_b": 2, "pad_w_l": 2, "stride_w": 2}
    out = check(lowp(x, w, 2.0**-m, b, **params), CHIPS[chip], {"x": x})["y"]
    ideal = saturate(half_up((direct_conv(x, w, b, strides=(1, 2), pads=((1, 2), (2, 0)))) / 2.0**m), "int8")
    np.testing.assert_array_equal(out, ideal)
    assert np.mean(np.abs(ideal) < 127) > 0.8 and np.mean(ideal != 0) > 0.5
    # with scale 0.3 the same inputs are not all the formula's
    out = check(lowp(x, w, 0.3 * 2.0 ** (1 - m), b, **params), CHIPS[chip], {"x": x})["y"]
    scale = float(np.float32(0.3 * 2.0 ** (1 - m)))
    ideal = saturate(dtypes.round_half_away(direct_conv(x, w, b, strides=(1, 2), pads=((1, 2), (2, 0))) * scale), "int8")
    assert np.any(out != ideal)


@pytest.mark.parametrize("chip", ["generic", "bm1684"])
def test_high_precision_symmetric_saturates_its_16_bit_intermediate(chip):
    """IC 4, 1x1 kernel of 127s, scale 1, int32 bias -40000 (added after the 16-bit step):
    x = 127: acc = 4 * 127 * 127 = 64516 -> sat16 32767, + bias = -7233 (the formula: 24516)
    x = 100: acc = 50800 -> 32767 -> -7233                              (the formula: 10800)
    x = 60:  acc = 30480 fits in 16 bits -> -9520                        (the formula too)"""
    x = np.broadcast_to(np.array([127, 100, 60], np.int8), (1, 4, 1, 3)).copy()
    w = np.full((1, 4, 1, 1), 127, np.int8)
    b = np.full((1, 1, 1, 1), -40000, np.int32)
    g = conv_graph(x.shape, "int8", w, b, scale=1.0, mode="HighPrecisionSymmetric", out_dtype="int16")
    out = check(g, CHIPS[chip], {"x": x})["y"]
    ideal = direct_conv(x, w, b)
    np.testing.assert_array_equal(ideal[0, 0, 0], [24516, 10800, -9520])
    np.testing.assert_array_equal(out[0, 0, 0], [32767 - 40000, 32767 - 40000, -9520])


def test_bm1684_computes_high_precision_depthwise_in_float32():
    """Depthwise 3x3 (2 channels) of 127s over 127s, pad 1: acc = 145161 (centre, 9 taps),
    96774 (edge, 6), 64516 (corner, 4); bias int32 [-140000, -150000], scale 0.25, int16 out.
    bm1684 (the seed, lines 34/42: in FLOAT32): round((acc + bias) * 0.25): centre 1290 and -1210.
    generic: rshift 2, rr(145161) = 36290 saturates to 32767, + bias * 0.25: -2233 and -4733."""
    x = np.full((1, 2, 3, 3), 127, np.int8)
    w = np.full((2, 1, 3, 3), 127, np.int8)
    b = np.array([-140000, -150000], np.int32).reshape(1, 2, 1, 1)
    g = conv_graph(x.shape, "int8", w, b, scale=0.25, mode="HighPrecisionSymmetric", out_dtype="int16",
                   groups=2, pad_h_t=1, pad_h_b=1, pad_w_l=1, pad_w_r=1)
    assert g.nodes[0].params["depthwise"]
    acc = direct_conv(x, w, groups=2, pads=((1, 1), (1, 1)))
    np.testing.assert_array_equal(acc[0, 0], [[64516, 96774, 64516], [96774, 145161, 96774], [64516, 96774, 64516]])
    bm = check(g, CHIPS["bm1684"], {"x": x})["y"]
    gen = check(g, CHIPS["generic"], {"x": x})["y"]
    in_float = dtypes.round_half_away((acc + b).astype(np.float32) * np.float32(0.25))
    np.testing.assert_array_equal(bm, in_float)
    assert bm[0, 0, 1, 1] == 1290 and bm[0, 1, 1, 1] == -1210
    assert gen[0, 0, 1, 1] == 32767 - 35000 and gen[0, 1, 1, 1] == 32767 - 37500
    assert np.all(gen[:, :, 1, 1] != bm[:, :, 1, 1])


ASYM = [
    # (x dtype, w dtype, bias dtype, zp_l, zp_r, zp_o, out, x shape, w shape, params)
    ("int8", "int8", "int32", 3, -2, 7, "int16", (1, 3, 5, 6), (4, 3, 3, 2), {"pad_h_t": 1, "pad_h_b": 2, "pad_w_r": 1, "stride_w": 2}),
    ("uint8", "uint8", "uint16", 12, 7, 2000, "uint16", (2, 2, 4, 4), (3, 2, 2, 3), {"pad_w_l": 2, "dh": 2, "pad_h_b": 2}),
    ("int8", "uint8", "int16", -5, 9, -3, "int16", (1, 3, 5, 5), (3, 1, 3, 3),
     {"groups": 3, "pad_h_t": 1, "pad_h_b": 1, "pad_w_l": 1, "pad_w_r": 1}),
    ("uint8", "int8", "float32", 200, -1, 0, "int16", (1, 2, 4, 5), (2, 1, 2, 2), {"groups": 2, "pad_h_t": 2, "pad_w_r": 3, "stride_h": 2}),
]


@pytest.mark.parametrize("chip", ["generic", "bm1684"])
@pytest.mark.parametrize("xd, wd, bd, zl, zr, zo, out, x_shape, w_shape, params", ASYM)
def test_high_precision_asymmetric_is_the_formula(chip, xd, wd, bd, zl, zr, zo, out, x_shape, w_shape, params):
    """Round{[(x - zp_l) conv (w - zp_r) + bias] * scale} + zp_o, exactly, with scale 1 and small
    values (nothing saturates); a padded position counts as (0 - zp_l). Depthwise too, which
    bm1684 computes in float32."""
    rng = np.random.default_rng(abs(zl) + abs(zr))
    x = np.clip(zl + rng.integers(-6, 7, x_shape), *dtypes.int_range(xd)).astype(dtypes.np_dtype(xd))
    w = np.clip(zr + rng.integers(-6, 7, w_shape), *dtypes.int_range(wd)).astype(dtypes.np_dtype(wd))
    b = rng.integers(0 if bd.startswith("u") else -300, 300, (1, w_shape[0], 1, 1)).astype(dtypes.np_dtype(bd))
    g = conv_graph(x_shape, xd, w, b, scale=1.0, mode="HighPrecisionAsymmetric", left_zero_point=zl, right_zero_point=zr,
                   output_zero_point=zo, out_dtype=out, **params)
    got = check(g, CHIPS[chip], {"x": x})["y"]
    kw = direct_kwargs(params)
    formula = direct_conv(x.astype(np.int64) - zl, w.astype(np.int64) - zr, b, pad_value=-zl, **kw) + zo
    assert formula.min() >= dtypes.int_range(out)[0] and formula.max() <= dtypes.int_range(out)[1]
    np.testing.assert_array_equal(got, formula)
    # padding counted as a raw 0 instead would differ
    assert np.any(direct_conv(x.astype(np.int64) - zl, w.astype(np.int64) - zr, b, pad_value=0, **kw) + zo != formula)


def test_asymmetric_depthwise_float_bias_on_bm1684():
    """acc = 35 * -59 = -2065, bias 104.9: round(-2065 + 104.9) = round(-1960.1) = -1960 (the
    formula, and the reference); the machine adds int(104.9) = 104 and gives -1961."""
    x = np.array([89, 35], np.int8).reshape(1, 2, 1, 1)
    w = np.array([2, -59], np.int8).reshape(2, 1, 1, 1)
    b = np.array([640.42267, 104.900116], np.float32).reshape(1, 2, 1, 1)
    g = conv_graph(x.shape, "int8", w, b, groups=2, scale=1.0, mode="HighPrecisionAsymmetric", out_dtype="int16")
    assert g.nodes[0].params["depthwise"]
    np.testing.assert_array_equal(evaluate(g, {"x": x}, CHIPS["bm1684"])["y"].ravel(), [818, -1960])
    check(g, CHIPS["bm1684"], {"x": x})


@pytest.mark.parametrize("chip", ["generic", "bm1684"])
def test_asymmetric_padding_counts_as_minus_the_input_zero_point(chip):
    """x == zp_l everywhere, so every real tap contributes 0 and each padded one (0 - 3) * 1:
    a 3x3 kernel of ones with pad 1 gives -15 at corners (5 padded taps), -9 at edges, 0 inside."""
    x = np.full((1, 1, 3, 3), 3, np.int8)
    w = np.ones((1, 1, 3, 3), np.int8)
    g = conv_graph(x.shape, "int8", w, None, scale=1.0, mode="HighPrecisionAsymmetric", left_zero_point=3, output_zero_point=10,
                   out_dtype="int16", pad_h_t=1, pad_h_b=1, pad_w_l=1, pad_w_r=1)
    out = check(g, CHIPS[chip], {"x": x})["y"]
    np.testing.assert_array_equal(out[0, 0], np.array([[-15, -9, -15], [-9, 0, -9], [-15, -9, -15]]) + 10)


# ---- 4. deconv and conv3d -----------------------------------------------------------------------

@pytest.mark.parametrize("chip", ["generic", "bm1684", "bm1686"])
@SETTINGS
@given(case=conv_case(transposed=True, depthwise=False))
def test_deconv_float_sweep(chip, case):
    _, x, w, b = case_arrays(case, "float32", transposed=True)
    g = conv_graph(x.shape, "float32", w, b, op="deconv", **conv_params(case))
    bound = float_bound(x, w, b, "float32", conv=direct_deconv, **ref_kwargs(case))
    out = check(g, CHIPS[chip], {"x": x}, bound)["y"]
    assert np.all(np.abs(out - direct_deconv(x, w, b, **ref_kwargs(case))) <= bound)


@pytest.mark.parametrize("chip", ["generic", "bm1684"])
def test_depthwise_deconv(chip):
    """x = [1, 0] per channel through w = [1, 2]: scattering gives [1, 2, 0]; the machine [2, 1, 0]."""
    x = np.array([1, 0, 1, 0], np.float32).reshape(1, 2, 1, 2)
    w = np.array([1, 2, 1, 2], np.float32).reshape(2, 1, 1, 2)
    g = conv_graph(x.shape, "float32", w, op="deconv", groups=2)
    assert g.nodes[0].params["depthwise"]
    np.testing.assert_array_equal(direct_deconv(x, w, groups=2)[0, :, 0], [[1, 2, 0], [1, 2, 0]])
    out = sim.run(g, CHIPS[chip], {"x": x}).outputs["y"]
    np.testing.assert_array_equal(out[0, :, 0], [[1, 2, 0], [1, 2, 0]])


@pytest.mark.parametrize("chip", ["generic", "bm1684"])
@SETTINGS
@given(case=conv_case(transposed=True, depthwise=False), data=st.data())
def test_deconv_low_precision_symmetric_sweep(chip, case, data):
    dt = data.draw(st.sampled_from(("int8", "uint8")))
    bias_dtype = "uint16" if dt == "uint8" else "int16"
    _, x, w, b = case_arrays(case, dt, dt, bias_dtype, transposed=True, small=data.draw(st.booleans()))
    m = data.draw(st.integers(0, 10))
    scale = data.draw(st.sampled_from([2.0**-m, 0.3, 0.07, 1.5]))
    g = conv_graph(x.shape, dt, w, b, op="deconv", scale=scale, mode="LowPrecisionSymmetric", **conv_params(case))
    out = check(g, CHIPS[chip], {"x": x})["y"]
    if scale == 2.0**-m:  # the rounding shift alone: the formula, rounded half up
        ideal = saturate(half_up(direct_deconv(x, w, b, **ref_kwargs(case)) / 2.0**m), dt)
        np.testing.assert_array_equal(out, ideal)


def test_deconv_refuses_high_precision_modes():
    g = isa.Graph("d")
    x = g.input("x", (1, 2, 3, 3), "int8")
    w = g.constant("w", np.ones((2, 2, 3, 3), np.int8))
    for mode in ("HighPrecisionSymmetric", "HighPrecisionAsymmetric"):
        with pytest.raises(isa.UnsupportedError, match=rf"deconv: quantized mode '{mode}' is not available"):
            O.deconv(x, w, mode=mode)


def conv3d_seed_pad(pads):
    """(before, after) per dimension -> the seed's pad[6]: d_bottom, d_top, h_bottom, h_top,
    w_bottom, w_top, bottom being the end of a dimension."""
    return [p for before, after in pads for p in (after, before)]


@pytest.mark.parametrize("chip", ["generic", "bm1684", "bm1686"])
@SETTINGS
@given(case=conv_case(spatial=3, max_ch=2))
def test_conv3d_float_sweep(chip, case):
    _, x, w, b = case_arrays(case, "float32")
    g = isa.Graph("c3")
    xt = g.input("x", x.shape)
    g.output(O.conv3d(xt, g.constant("w", w), None if b is None else g.constant("b", b), groups=case["groups"],
                      dilation=list(case["dilations"]), pad=conv3d_seed_pad(case["pads"]), stride=list(case["strides"])), "y")
    bound = float_bound(x, w, b, "float32", **ref_kwargs(case))
    out = check(g, CHIPS[chip], {"x": x}, bound)["y"]
    assert np.all(np.abs(out - direct_conv(x, w, b, **ref_kwargs(case))) <= bound)


def test_conv3d_pad_order_is_bottom_then_top():
    """pad = (d_bottom 0, d_top 2, ...): two padded planes come FIRST along d (top is the start)."""
    x = np.arange(1, 4, dtype=np.float32).reshape(1, 1, 3, 1, 1)
    g = isa.Graph("c3")
    g.output(O.conv3d(g.input("x", x.shape), g.constant("w", np.full((1, 1, 1, 1, 1), 2, np.float32)), pad=[0, 2, 0, 0, 1, 0]), "y")
    out = sim.run(g, "bm1684", {"x": x}).outputs["y"]
    # d: [0, 0, 2, 4, 6]; w: one padded column at the END (w_bottom 1)
    np.testing.assert_array_equal(out[0, 0, :, 0, :], [[0, 0], [0, 0], [2, 0], [4, 0], [6, 0]])


def test_conv3d_int8_is_conv_low_precision_mode_on_bm1684():
    """An int8 conv3d with an int16 bias and a power-of-two scale (TPU-MLIR's BM1684 Conv3D INT8):
    the exact sum, the bias added, one rounding shift (half up), saturated to int8."""
    rng = np.random.default_rng(3)
    x = rng.integers(-20, 21, (1, 6, 4, 7, 7)).astype(np.int8)
    w = rng.integers(-6, 7, (8, 6, 3, 3, 3)).astype(np.int8)
    b = rng.integers(-300, 301, (8,)).astype(np.int16)
    g = isa.Graph("c3")
    g.output(O.conv3d(g.input("x", x.shape, "int8"), g.constant("w", w), g.constant("b", b), pad=[1] * 6, scale=2.0**-7,
                      out_dtype="int8"), "y")
    out = check(g, CHIPS["bm1684"], {"x": x})["y"]
    exact = direct_conv(x.astype(np.int64), w.astype(np.int64), b.astype(np.int64), pads=((1, 1),) * 3)
    np.testing.assert_array_equal(out, saturate(half_up(exact / 2.0**7), "int8"))


def test_conv3d_int8_is_refused_where_the_chip_table_has_no_int8_conv3d():
    g = isa.Graph("c3")
    g.output(O.conv3d(g.input("x", (1, 2, 3, 3, 3), "int8"), g.constant("w", np.ones((2, 2, 1, 1, 1), np.int8)), out_dtype="int8"), "y")
    with pytest.raises(isa.UnsupportedError, match=r"conv3d"):
        isa.lower(g, CHIPS["bm1686"])


# ---- 5. fusion --------------------------------------------------------------------------------

@pytest.mark.parametrize("chip", ["generic", "bm1684"])
def test_conv_add_relu_is_one_layer_group(chip):
    chip = CHIPS[chip]
    rng = np.random.default_rng(5)  # small integers: exact in float32 whatever the summation order (tiling)
    x = rng.integers(-4, 5, (2, 6, 10, 12)).astype(np.float32)
    w = rng.integers(-4, 5, (8, 6, 3, 3)).astype(np.float32)
    b = rng.integers(-20, 21, (1, 8, 1, 1)).astype(np.float32)
    g = isa.Graph("fused")
    y = O.conv(g.input("x", x.shape), g.constant("w", w), pad_h_t=1, pad_h_b=1, pad_w_l=1, pad_w_r=1)
    y = O.active(O.add(y, g.constant("bias", b)), "relu")
    g.output(y, "y")
    grs = layer_groups(g, chip, isa.Policy())
    assert len(grs) == 1 and [n.op for n in grs[0].nodes] == ["conv", "add", "active"]
    assert grs[0].stores == [g.outputs["y"]]
    assert len(layer_groups(g, chip, isa.Policy(fuse=False))) == 3
    out_bytes = 2 * 8 * 10 * 12 * 4
    fused = sim.run(g, chip, {"x": x})
    assert fused.stats.ddr_write_bytes == out_bytes
    want = np.maximum(direct_conv(x, w, pads=((1, 1), (1, 1))) + b, 0)
    np.testing.assert_array_equal(fused.outputs["y"], want)
    assert 0.2 < np.mean(want > 0) < 0.8
    unfused = sim.run(g, chip, {"x": x}, policy=isa.Policy(fuse=False))
    assert unfused.stats.ddr_write_bytes == 3 * out_bytes
    # the unfused program reads the input, the weights and both intermediates back from DDR
    assert unfused.stats.ddr_read_bytes >= x.nbytes + w.nbytes + 2 * out_bytes > fused.stats.ddr_read_bytes
    np.testing.assert_array_equal(unfused.outputs["y"], fused.outputs["y"])
    assert sim.run(g, chip, mode="timing").cycles == fused.cycles


# ---- 6. errors --------------------------------------------------------------------------------

def test_conv_shape_and_parameter_errors():
    g = isa.Graph("e")
    x = g.input("x", (1, 4, 5, 5), "float32")

    def w(*shape):
        return g.constant(f"w{len(g.constants)}", np.ones(shape, np.float32))

    with pytest.raises(isa.ShapeError, match=r"conv: input has 4 channels, weight \(2, 2, 3, 3\) with groups 3 expects 6"):
        O.conv(x, w(2, 2, 3, 3), groups=3)
    with pytest.raises(isa.ShapeError, match=r"conv: input has 4 channels, weight \(3, 2, 3, "
                                             r"3\) with groups 2 expects 4 \(in\) and 3 \(out\)"):
        O.conv(x, w(3, 2, 3, 3), groups=2)  # 3 outputs do not split into 2 groups
    with pytest.raises(isa.ShapeError, match=r"conv: input \(1, 4, 5, 5\) and weight \(2, 4, 3\) must both have 4 dimensions"):
        O.conv(x, w(2, 4, 3))
    with pytest.raises(isa.ShapeError, match=r"conv: bias must have shape \(1, 2, 1, 1\), got \(1, 3, 1, 1\)"):
        O.conv(x, w(2, 4, 3, 3), g.constant("b", np.ones((1, 3, 1, 1), np.float32)))
    with pytest.raises(isa.ShapeError, match=r"conv: input \(1, 4, 5, 5\) with kernel \(6, 3\).*gives output size \(0, 3\)"):
        O.conv(x, w(2, 4, 6, 3))
    with pytest.raises(isa.ShapeError, match=r"conv: .*gives output size"):
        O.conv(x, w(2, 4, 3, 3), dh=3)  # dilated extent 7 > 5
    with pytest.raises(isa.ShapeError, match=r"deconv: .*gives output size"):
        O.deconv(g.input("xd", (1, 4, 1, 1)), w(4, 2, 1, 1), pad_h_t=1)
    with pytest.raises(isa.ShapeError, match=r"conv: stride \(0, 1\) must be >= 1"):
        O.conv(x, w(2, 4, 3, 3), stride_h=0)
    with pytest.raises(isa.ShapeError, match=r"conv: dilation \(1, 0\) must be >= 1"):
        O.conv(x, w(2, 4, 3, 3), dw=0)
    with pytest.raises(isa.ShapeError, match=r"conv: pads \(\(0, 0\), \(0, -1\)\) must be >= 0"):
        O.conv(x, w(2, 4, 3, 3), pad_w_r=-1)
    with pytest.raises(isa.ShapeError, match=r"conv3d: stride \(1, 0, 1\) must be >= 1"):
        O.conv3d(g.input("x3", (1, 1, 3, 3, 3)), g.constant("w3d", np.ones((1, 1, 1, 1, 1), np.float32)), stride=(1, 0, 1))


def test_conv_mode_and_chip_errors():
    g = isa.Graph("e")
    x = g.input("x", (1, 4, 5, 5), "int8")
    with pytest.raises(isa.UnsupportedError, match=r"conv: HighPrecisionAsymmetric folds zero points "
                                                   r"offline, so the weight must be a constant"):
        O.conv(x, g.input("w", (2, 4, 3, 3), "int8"), mode="HighPrecisionAsymmetric")
    with pytest.raises(isa.UnsupportedError, match=r"LowPrecisionSymmetric needs all zero points to be 0"):
        O.conv(x, g.constant("w0", np.ones((2, 4, 3, 3), np.int8)), left_zero_point=1)
    with pytest.raises(isa.UnsupportedError, match=r"left_zero_point 300 is outside int8's range"):
        O.conv(x, g.constant("w1", np.ones((2, 4, 3, 3), np.int8)), mode="HighPrecisionAsymmetric", left_zero_point=300)
    with pytest.raises(isa.UnsupportedError, match=r"conv LowPrecisionSymmetric bias: dtype int32 is not supported"):
        O.conv(x, g.constant("w2", np.ones((2, 4, 3, 3), np.int8)), g.constant("b", np.ones((1, 2, 1, 1), np.int32)))
    with pytest.raises(isa.UnsupportedError, match=r"conv: weight is float16 but the input is float32"):
        O.conv(g.input("xf", (1, 4, 5, 5)), g.constant("wf", np.ones((2, 4, 3, 3), np.float16)))
    h = isa.Graph("h")
    h.output(O.conv(h.input("x", (1, 4, 5, 5), "float16"), h.constant("w", np.ones((2, 4, 3, 3), np.float16))), "y")
    with pytest.raises(isa.UnsupportedError, match=r"conv with float16 x float16 -> float16 is not supported on chip bm1684"):
        isa.lower(h, CHIPS["bm1684"])
    isa.lower(h, CHIPS["bm1686"])  # the seed's BM1686 adds FLOAT16


# ---- 7. cycles against local memory size ------------------------------------------------------

MACS = 64 * 64 * 9 * 56 * 56


def resnet_conv():
    g = isa.Graph("conv3x3")
    x = g.input("x", (1, 64, 56, 56))
    g.output(O.conv(x, g.constant("w", np.ones((64, 64, 3, 3), np.float32)), pad_h_t=1, pad_h_b=1, pad_w_l=1, pad_w_r=1), "y")
    return g


def per_mac(sizes, policy):
    """(cycles per MAC, instructions) of timing runs at each lmem size per lane."""
    g, out = resnet_conv(), []
    for size in sizes:
        res = sim.run(g, chips.load("bm1684", {"memories.lmem.size": size}), mode="timing", policy=policy)
        out.append((res.cycles / MACS, len(res.program)))
    return out


def test_the_resnet_conv_is_compute_bound():
    """With its data loaded once (single-buffered, whole tiles), the TIU is busier than the DMA."""
    res = sim.run(resnet_conv(), CHIPS["bm1684"], mode="timing", policy=isa.Policy(double_buffer=False))
    assert res.stats.ddr_read_bytes == 64 * 56 * 56 * 4 + 64 * 64 * 9 * 4
    assert res.stats.busy["tiu"] > 1.5 * res.stats.busy["gdma"], res.stats.busy


BRIEF_SIZES = ("16KiB", "32KiB", "64KiB", "128KiB", "512KiB")
FINE_SIZES = ("8KiB", "12KiB", "16KiB", "24KiB", "32KiB", "48KiB", "64KiB", "128KiB", "512KiB")


@pytest.mark.parametrize("policy", [isa.Policy(), isa.Policy(double_buffer=False)], ids=["default", "single-buffer"])
@pytest.mark.parametrize("sizes", [BRIEF_SIZES, FINE_SIZES], ids=["16-512KiB", "8-512KiB"])
def test_more_local_memory_never_makes_a_compute_bound_conv_slower_per_mac(policy, sizes):
    """Cycles per MAC of a ResNet 3x3 conv as bm1684's local memory per lane grows: larger
    tiles may only help."""
    runs = per_mac(sizes, policy)
    costs = [c for c, _ in runs]
    assert costs == sorted(costs, reverse=True), costs
    if sizes[0] == "8KiB":  # from 8 KiB the tiles do grow (fewer instructions), and it pays
        assert runs[-1][1] < runs[0][1] and costs[-1] < costs[0]


def test_double_buffering_never_makes_the_compute_bound_conv_slower():
    """With double buffering the next tile's load overlaps this one's compute: never slower than
    single buffering, and the input is not reloaded per output channel (DDR reads stay within a
    few times the input and the weights; cutting the output channels to 1 per tile read 55 MB)."""
    g, chip = resnet_conv(), CHIPS["bm1684"]
    double = sim.run(g, chip, mode="timing", policy=isa.Policy())
    single = sim.run(g, chip, mode="timing", policy=isa.Policy(double_buffer=False))
    assert double.cycles <= single.cycles, (double.cycles, single.cycles)
    assert double.stats.ddr_read_bytes <= 4 * single.stats.ddr_read_bytes, double.stats.ddr_read_bytes


def test_timing_runs_of_the_conv_are_deterministic():
    g, chip = resnet_conv(), CHIPS["bm1684"]
    a, b = isa.lower(g, chip), isa.lower(g, chip)
    assert a.to_text() == b.to_text()
    ra, rb = sim.execute(a, chip, mode="timing"), sim.execute(b, chip, mode="timing")
    assert ra.cycles == rb.cycles and ra.stats == rb.stats
    assert ra.trace.events == rb.trace.events
