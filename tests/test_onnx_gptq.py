"""The gptq import pass (isa/onnx/gptq.py): a GPTQ-style export that unpacks int32 words of 4- or
8-bit codes in the graph (BitShift or the TorchScript exporter's Div by powers of two, BitwiseAnd,
Cast, Sub of the zero points, Mul by the scales expanded per group, in order or by an act-order
g_idx) ahead of a MatMul imports as one matrix_mul_a16 (after a gather of x's columns for act-order)
and computes what onnxruntime computes; a pattern that deviates imports as before."""

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import chips
import isa
import sim
from isa.errors import UnsupportedError

ELEM = {"float16": TensorProto.FLOAT16, "float32": TensorProto.FLOAT}


def code_type(form, bits):
    """The integer type of the codes an unpacking of that form computes (Export.unpack)."""
    return {"bitshift": np.uint32, "torchlib": np.int32}.get(form, np.int16 if bits == 8 else np.int8)


def pack(codes, bits, axis):
    """int32 words holding codes (0..2^bits - 1) packed low-first along `axis`, as GPTQ packs
    qweight along K (axis 0) and qzeros along N (axis 1)."""
    per = 32 // bits
    c = np.moveaxis(codes.astype(np.uint32), axis, 0)
    c = c.reshape(c.shape[0] // per, per, *c.shape[1:])
    words = np.zeros(c[:, 0].shape, np.uint32)
    for i in range(per):
        words |= c[:, i] << np.uint32(bits * i)
    return np.moveaxis(words.view(np.int32), 0, axis)


class Export:
    """An ONNX graph built as a GPTQ export writes one layer: its nodes, its initializers."""

    def __init__(self):
        self.nodes, self.inits, self.count, self.made = [], [], 0, {}

    def const(self, value):
        """An initializer; equal ones are one, read by every node that needs it, as exporters
        deduplicate constants (the shifts and masks of every layer)."""
        value = np.asarray(value)
        key = (value.dtype.str, value.shape, value.tobytes())
        if key not in self.made:
            self.count += 1
            self.inits.append(numpy_helper.from_array(value, f"c{self.count}"))
            self.made[key] = f"c{self.count}"
        return self.made[key]

    def op(self, kind, *inputs, **attrs):
        self.count += 1
        self.nodes.append(helper.make_node(kind, list(inputs), [f"t{self.count}"], **attrs))
        return f"t{self.count}"

    def unpack(self, words, bits, axis, shift=None, mask=None, form="bitshift", divisors=None):
        """The codes of int32 words [A, B] packed along `axis`: Unsqueeze, a right shift by [0, bits,
        ..., 32 - bits], BitwiseAnd by 2^bits - 1, Reshape to the unpacked [A x 32 / bits, B] or
        [A, B x 32 / bits]. The shift as `form`:
        - "bitshift": the words Cast to uint32 (BitShift takes unsigned words), BitShift RIGHT;
        - "torchlib": the int32 words shifted arithmetically as torchlib (torch.onnx's dynamo
          exporter) writes torch.bitwise_right_shift of int32, the mask int32;
        - "torchscript": as torch.onnx's TorchScript exporter writes AutoGPTQ's
          bitwise_right_shift(unsqueeze(qweight).expand(...), wf).to(int8 or int16) (constants
          folded as it folds them): Expand (expand_shape), Div by Cast(Pow(2.0, Cast(shifts,
          FLOAT)), INT32) (or by the constant `divisors`), Cast to int8 (int16 for 8 bits), the
          mask of that type."""
        per = 32 // bits
        shifts = np.arange(0, 32, bits, dtype=np.uint32) if shift is None else np.asarray(shift, np.uint32)
        shape = [1, 1, 1]
        shape[axis + 1] = per
        axes = self.const(np.array([axis + 1]))
        if form == "torchscript":
            w = self.op("Expand", self.op("Unsqueeze", self.const(words), axes), self.expand_shape([-1 if d == 1 else d for d in shape]))
            if divisors is None:
                two = self.op("Constant", value=numpy_helper.from_array(np.array(2, np.float32)))
                power = self.op("Pow", two, self.op("Cast", self.const(shifts.astype(np.int32).reshape(shape)), to=TensorProto.FLOAT))
                divisor = self.op("Cast", power, to=TensorProto.INT32)
            else:
                divisor = self.const(np.asarray(divisors, np.int32).reshape(shape))
            s = self.op("Cast", self.op("Div", w, divisor), to=TensorProto.INT16 if bits == 8 else TensorProto.INT8)
        elif form == "torchlib":
            w = self.op("Unsqueeze", self.op("Cast", self.const(words), to=TensorProto.INT32), axes)
            other = self.op("Cast", self.const(shifts.astype(np.int32).reshape(shape)), to=TensorProto.UINT32)
            shifted = self.op("BitShift", self.op("Cast", w, to=TensorProto.UINT32), other, direction="RIGHT")
            ones = self.op("Cast", self.const(np.int64(0xFFFFFFFF)), to=TensorProto.UINT32)
            fill = self.op("BitwiseNot", self.op("BitShift", ones, other, direction="RIGHT"))
            s = self.op("Where", self.op("Less", w, self.const(np.int32(0))),
                        self.op("Cast", self.op("BitwiseOr", shifted, fill), to=TensorProto.INT32),
                        self.op("Cast", shifted, to=TensorProto.INT32))
        else:
            w = self.op("Unsqueeze", self.op("Cast", self.const(words), to=TensorProto.UINT32), axes)
            s = self.op("BitShift", w, self.const(shifts.reshape(shape)), direction="RIGHT")
        c = self.op("BitwiseAnd", s, self.const(code_type(form, bits)(2 ** bits - 1 if mask is None else mask)))
        out = list(words.shape)
        out[axis] *= per
        return self.op("Reshape", c, self.const(np.array(out)))

    def expand_shape(self, size):
        """The shape of an Expand to `size` with -1s (dimensions kept), as the TorchScript
        exporter's expand writes it: Where(Equal(size, ones x -1), ones, size), ones a
        ConstantOfShape of size's Shape."""
        size = self.const(np.array(size))
        ones = self.op("ConstantOfShape", self.op("Shape", size), value=numpy_helper.from_array(np.array([1])))
        return self.op("Where", self.op("Equal", size, self.op("Mul", ones, self.const(np.array(-1)))), ones, size)

    def per_row(self, table, k, group, how):
        """A [K / group, N] table expanded to [K, N]: Unsqueeze, Expand (or Tile), Reshape; or a
        Gather by g_idx (arange(K) // group unless `how` is an array)."""
        n = table.shape[1] if not isinstance(table, str) else None
        t = self.const(table) if not isinstance(table, str) else table
        if isinstance(how, np.ndarray) or how == "gather":
            g_idx = np.arange(k) // group if isinstance(how, str) else how
            return self.op("Gather", t, self.const(g_idx.astype(np.int32)), axis=0)
        u = self.op("Unsqueeze", t, self.const(np.array([1])))
        if how == "expand":
            u = self.op("Expand", u, self.const(np.array([k // group, group, 1])))
        else:
            u = self.op("Tile", u, self.const(np.array([1, group, 1])))
        return self.op("Reshape", u, self.const(np.array([k, -1 if n is None else n])))

    def model(self, x, y, k, n, dtype, rows):
        graph = helper.make_graph(self.nodes, "gptq", [helper.make_tensor_value_info(x, ELEM[dtype], [1, rows, k])],
                                  [helper.make_tensor_value_info(y, ELEM[dtype], [1, rows, n])], self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def gptq_model(bits=4, group=64, k=256, n=96, zeros="packed", how="expand", dtype="float16", rows=3, seed=0, layers=1,
               awq=False, shiftable=False, shared=False, **unpack):
    """x (1, rows, K) @ the weight a GPTQ export unpacks in the graph: qweight int32 [K x bits / 32,
    N] packed along K, scales [K / group, N], zero points packed along N in qzeros [K / group,
    N x bits / 32] and stored minus 1 ("packed": old GPTQ's + 1 in the graph), or one zero point
    2^(bits - 1) for every code ("symmetric"); the group expansion written as `how`, the unpacking
    as `unpack` says (Export.unpack's shift, mask, form and divisors; form and divisors for the
    zero points too). shiftable: codes whose negative words hold 0 below their last field
    (shiftable_codes). With layers 2, a second such product [N, N] of the first's result; with
    shared, the sum of two such products of x; with awq, AWQ's layout instead (awq_model)."""
    rng = np.random.default_rng(seed)
    e = Export()
    if awq:
        return awq_model(e, rng, k, n, group, dtype, rows, awq)
    y = "x"
    for layer in range(layers):
        y = unpacked_product(e, rng, y, bits, group, k if layer == 0 else n, n, zeros, how, dtype, shiftable, unpack)
    if shared:
        y = e.op("Add", y, unpacked_product(e, rng, "x", bits, group, k, n, zeros, how, dtype, shiftable, unpack))
    return e.model("x", y, k, n, dtype, rows)


def shiftable_codes(codes, bits, axis):
    """codes whose int32 words (packed along `axis`) are negative only where their other fields
    are 0: ONNX's Div of such words by 2^shift truncates as torch's >> floors."""
    per = 32 // bits
    c = np.moveaxis(codes, axis, 0).copy()
    words = c.reshape(c.shape[0] // per, per, *c.shape[1:])
    words[:, :-1] *= words[:, -1:] < 2 ** (bits - 1)
    return np.moveaxis(c, 0, axis)


AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # AutoAWQ: field i of a word holds column 8j + AWQ_ORDER[i]


def awq_model(e, rng, k, n, group, dtype, rows, awq):
    """x (1, rows, K) @ an AWQ weight unpacked in the graph: 4-bit codes and zero points packed
    along N (qweight int32 [K, N / 8], qzeros [K / group, N / 8]) in AWQ's field order, unpacked by
    shifts [0, 16, 4, 20, 8, 24, 12, 28], which give the columns in order, or (awq "gather", as
    AutoAWQ's dequantization does) by shifts in order, the fields then reordered by a Gather."""
    perm = (np.arange(n) // 8 * 8 + np.array(AWQ_ORDER)[np.arange(n) % 8])
    shifts = 4 * np.argsort(AWQ_ORDER)

    def unpack(table):
        if awq != "gather":
            return e.unpack(pack(table[:, perm], 4, 1), 4, 1, shifts)
        u = e.op("Unsqueeze", e.op("Cast", e.const(pack(table[:, perm], 4, 1)), to=TensorProto.UINT32), e.const(np.array([2])))
        s = e.op("Reshape", e.op("BitShift", u, e.const(np.arange(0, 32, 4, dtype=np.uint32).reshape(1, 1, 8)), direction="RIGHT"),
                 e.const(np.array([table.shape[0], n])))
        s = e.op("Gather", s, e.const(np.argsort(perm)), axis=1)
        return e.op("BitwiseAnd", s, e.const(np.uint32(15)))

    codes, z = rng.integers(0, 16, (k, n)), rng.integers(0, 16, (k // group, n))
    c = e.op("Cast", unpack(codes), to=ELEM[dtype])
    zt = e.per_row(e.op("Cast", unpack(z), to=ELEM[dtype]), k, group, "expand")
    scales = (rng.random((k // group, n)) * 0.02 + 1e-3).astype(dtype)
    y = e.op("MatMul", "x", e.op("Mul", e.op("Sub", c, zt), e.per_row(scales, k, group, "expand")))
    return e.model("x", y, k, n, dtype, rows)


def unpacked_product(e, rng, x, bits, group, k, n, zeros, how, dtype, shiftable, unpack):
    """MatMul(x, the weight unpacked in the graph): see gptq_model."""
    codes = rng.integers(0, 2 ** bits, (k, n))
    codes = shiftable_codes(codes, bits, 0) if shiftable else codes
    c = e.op("Cast", e.unpack(pack(codes, bits, 0), bits, 0, **unpack), to=ELEM[dtype])
    if zeros == "packed":
        z = rng.integers(1, 2 ** bits, (k // group, n)) - 1
        z = shiftable_codes(z, bits, 1) if shiftable else z
        form = {key: v for key, v in unpack.items() if key in ("form", "divisors")}
        zt = e.op("Add", e.unpack(pack(z, bits, 1), bits, 1, **form), e.const(code_type(unpack.get("form", "bitshift"), bits)(1)))
        zt = e.per_row(e.op("Cast", zt, to=ELEM[dtype]), k, group, how)
        c = e.op("Sub", c, zt)
    else:
        c = e.op("Sub", c, e.const(np.array(2 ** (bits - 1), dtype)))
    scales = (rng.random((k // group, n)) * 0.02 + 1e-3).astype(dtype)
    w = e.op("Mul", e.per_row(scales, k, group, how), c)
    return e.op("MatMul", x, w)


def against_onnxruntime(model, chip, dtype="float16", seed=5):
    """The machine's product against onnxruntime's: within float16 precision of sums of K terms
    (onnxruntime rounds its float16 weight and its sums to float16)."""
    g = isa.from_onnx(model)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0].astype(np.float64)
    got = sim.run(g, chips.load(chip), inputs={"x": x}).outputs[model.graph.output[0].name].astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * np.abs(want).max())
    return g


NOTE = "onnx pass gptq: 1 MatMul(s) of int32-packed codes unpacked in the graph became matrix_mul_a16"


def assert_a16(g, bits, group):
    """One matrix_mul_a16 of those bits and group, and nothing of the unpacking left."""
    products = [n for n in g.nodes if n.op == "matrix_mul_a16"]
    assert len(products) == 1 and products[0].params["bits"] == bits and products[0].params["group"] == group
    assert NOTE in g.notes
    assert {n.op for n in g.nodes} == {"reshape", "matrix_mul_a16"}


@pytest.mark.parametrize("chip", ["generic", "bm1686", "ascend910b"])
@pytest.mark.parametrize("bits, group, zeros, how", [
    (4, 64, "packed", "expand"),       # asymmetric: qzeros unpacked along N, + 1
    (4, 128, "symmetric", "gather"),   # codes - 8, scales gathered by g_idx in order
    (8, 64, "packed", "tile"),
    (8, 256, "symmetric", "expand"),   # one group: the zero terms (128 - 128) x scale are all 0
])
def test_an_unpacked_gptq_weight_times_x_imports_as_matrix_mul_a16(chip, bits, group, zeros, how):
    model = gptq_model(bits, group, zeros=zeros, how=how)
    g = against_onnxruntime(model, chip)
    assert_a16(g, bits, group)
    product = next(n for n in g.nodes if n.op == "matrix_mul_a16")
    assert len(product.inputs) == (3 if bits == 8 and zeros == "symmetric" else 4)
    stored = g.tensors[product.inputs[1]]
    assert stored.dtype == ("uint8" if bits == 4 else "int8") and stored.shape == (256 * bits // 8, 96)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bits=st.sampled_from([4, 8]), groups=st.integers(1, 4), group=st.sampled_from([16, 32, 64]), n8=st.integers(1, 6),
       zeros=st.sampled_from(["packed", "symmetric"]), how=st.sampled_from(["expand", "tile", "gather"]), rows=st.integers(1, 5),
       seed=st.integers(0, 100), form=st.sampled_from(["bitshift", "torchscript"]))
def test_random_shapes_import_as_matrix_mul_a16(bits, groups, group, n8, zeros, how, rows, seed, form):
    """K a whole number of groups, N a multiple of 8 (qzeros packs N): the group found is the one
    exported, or a multiple of it where neighbouring groups' scales and zero points coincide
    (then the same weight)."""
    model = gptq_model(bits, group, k=groups * group, n=8 * n8, zeros=zeros, how=how, rows=rows, seed=seed, form=form,
                       shiftable=form == "torchscript")
    g = against_onnxruntime(model, "generic", seed=seed)
    product = next(n for n in g.nodes if n.op == "matrix_mul_a16")
    assert product.params["group"] % group == 0 and NOTE in g.notes


@pytest.mark.parametrize("case", [
    {"shift": [0, 4, 8, 12, 16, 20, 24, 3]},   # a shift of 3: not GPTQ's fields
    {"mask": 7},                               # 3-bit codes out of 4-bit fields
    {"bits": 8, "shift": [0, 4, 8, 12]},       # 8-bit mask, 4-bit shifts
    {"dtype": "float32"},                      # the op's activations are float16 or bfloat16
    {"form": "torchlib", "shift": [0, 4, 8, 12, 16, 20, 24, 3]},
    {"form": "torchscript"},                   # negative words with bits below a divisor: Div truncates, >> floors
    {"form": "torchscript", "shiftable": True, "divisors": [1, 16, 256, 4096, 65536, 1 << 20, 1 << 24, 3 << 26]},
])
def test_a_deviating_unpack_imports_as_before(case):
    """Left to the constants pass, which computes the float weight once (by the ONNX reference):
    a matrix_mul, still onnxruntime's numbers."""
    model = gptq_model(**case)
    g = against_onnxruntime(model, "generic", dtype=case.get("dtype", "float16"))
    assert "onnx pass gptq: nothing to rewrite" in g.notes
    assert not any(n.op == "matrix_mul_a16" for n in g.nodes) and any(n.op == "matrix_mul" for n in g.nodes)


def test_two_products_sharing_their_shifts_and_masks_both_import_as_matrix_mul_a16():
    """A layer's shifts, masks and shapes are the next one's constants too: each product's
    unpacking goes, the shared constants stay while read."""
    model = gptq_model(4, 32, n=64, layers=2)
    g = against_onnxruntime(model, "bm1686")
    assert [n.op for n in g.nodes].count("matrix_mul_a16") == 2
    assert "onnx pass gptq: 2 MatMul(s) of int32-packed codes unpacked in the graph became matrix_mul_a16" in g.notes
    assert {n.op for n in g.nodes} == {"reshape", "matrix_mul_a16"}


@pytest.mark.parametrize("chip", ["generic", "bm1686"])
@pytest.mark.parametrize("bits", [4, 8])
def test_torchlibs_arithmetic_shift_of_int32_words_imports_as_matrix_mul_a16(chip, bits):
    """torch.onnx's dynamo exporter writes an int32 right shift as a Where of two logical shifts
    (the sign filled in above the field, which the mask drops): the same codes."""
    g = against_onnxruntime(gptq_model(bits, 64, form="torchlib"), chip)
    assert_a16(g, bits, 64)


@pytest.mark.parametrize("chip, awq, k", [("generic", "shifts", 256), ("ascend910b", "shifts", 256), ("generic", "gather", 256),
                                          ("generic", "gather", 96)])
def test_an_unpacked_awq_weight_imports_as_matrix_mul_a16(chip, awq, k):
    """AWQ's codes packed along N in its field order: shifts that unpack them in column order, or
    shifts in order and a Gather along N (K = N too: that Gather is no act-order g_idx)."""
    g = against_onnxruntime(gptq_model(group=k // 2, k=k, awq=awq), chip)
    assert_a16(g, 4, k // 2)


@pytest.mark.parametrize("chip", ["generic", "bm1686", "ascend910b"])
@pytest.mark.parametrize("bits, divisors", [(4, None), (8, None), (4, "folded")])
def test_the_torchscript_exporters_div_by_powers_of_two_imports_as_matrix_mul_a16(chip, bits, divisors):
    """torch.onnx's TorchScript exporter writes torch.bitwise_right_shift of int32 words as a Div by
    Cast(Pow(2, shift)) (or that divisor folded to a constant by an optimizer), which truncates
    where torch's >> floors: the same codes where no negative word has a bit set below a divisor
    (shiftable codes), as here."""
    folded = [1 << s for s in range(0, 32, bits)] if divisors else None
    g = against_onnxruntime(gptq_model(bits, 64, form="torchscript", shiftable=True, divisors=folded), chip)
    assert_a16(g, bits, 64)


def a16_constants(model):
    """The stored weight, scales and zero terms of the one matrix_mul_a16 model imports as."""
    g = isa.from_onnx(model)
    product = next(n for n in g.nodes if n.op == "matrix_mul_a16")
    return [np.asarray(g.constants[i]) for i in product.inputs[1:]]


@pytest.mark.parametrize("bits", [4, 8])
def test_every_form_of_the_shift_stores_the_words_fields(bits):
    """The same words unpacked by BitShift, torchlib's arithmetic shift or the TorchScript
    exporter's Div: the same stored codes, scales and zero terms."""
    want = a16_constants(gptq_model(bits, 64, shiftable=True))
    for form in ("torchlib", "torchscript"):
        got = a16_constants(gptq_model(bits, 64, shiftable=True, form=form))
        assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want))


ACT_ORDER = np.random.default_rng(3).permutation(np.arange(256) // 64)  # g_idx of act-order GPTQ: group of each row of K


@pytest.mark.parametrize("chip", ["generic", "ascend910b", "bm1686"])
@pytest.mark.parametrize("shared", [False, True])
def test_act_order_imports_as_a_gather_of_x_and_matrix_mul_a16(chip, shared):
    """A g_idx that reorders K (act-order GPTQ): x's columns gathered in the order of their groups
    times the weight's rows in that order, the groups then in order; products of the same x in
    the same order (shared) read one gather."""
    g = against_onnxruntime(gptq_model(4, 64, how=ACT_ORDER, shared=shared), chip)
    products = [n for n in g.nodes if n.op == "matrix_mul_a16"]
    assert len(products) == 1 + shared and all(p.params["group"] == 64 for p in products)
    assert [n.op for n in g.nodes].count("gather") == 1
    assert (f"onnx pass gptq: {1 + shared} MatMul(s) of int32-packed codes unpacked in the graph became matrix_mul_a16 "
            f"({1 + shared} of them act-order: x's columns gathered in the order of their groups)") in g.notes


def test_act_order_on_a_chip_without_a_gather_is_refused_when_lowered():
    """bm1684's table has no gather: the gather of x's columns is named."""
    with pytest.raises(UnsupportedError, match=r"gather .* not supported on chip bm1684"):
        isa.lower(isa.from_onnx(gptq_model(4, 64, how=ACT_ORDER)), chips.load("bm1684"))
