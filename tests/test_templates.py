"""The templates' catalog (isa/lower/templates/catalog.py): every op resolves to a Template, the
layer groups carry it, and each template's homes, fusion role and slicing are as the passes rely on."""

import numpy as np

import chips
import isa
from isa.lower.schedule.fusion import groups
from isa.lower.templates.catalog import CONV, DEPTHWISE, ELEMENTWISE, POOL, TEMPLATES, template_of
from isa.ops import REGISTRY

O = isa.ops


def test_every_op_names_a_template_of_the_catalog():
    assert {t for op in REGISTRY for t in REGISTRY[op].templates} == set(TEMPLATES)
    assert all(template_of(op).name == REGISTRY[op].template for op in REGISTRY)
    assert template_of("conv") is CONV and template_of("pool") is POOL and template_of("active") is ELEMENTWISE
    assert template_of("conv", {"depthwise": True}) is DEPTHWISE and template_of("deconv", {"depthwise": False}) is CONV


def test_each_template_role():
    def having(flag):
        return sorted(t.name for t in TEMPLATES.values() if flag(t))

    assert having(lambda t: t.homes == "ddr") == ["indexed", "scalar"]
    assert having(lambda t: t.head) == ["conv", "depthwise", "elementwise", "pool"]
    assert having(lambda t: t.tail) == ["elementwise"]
    assert having(lambda t: t.places_outputs) == ["cache", "constant", "view"]
    assert having(lambda t: t.slicing is not None) == ["conv", "depthwise", "pool"]


def test_groups_carry_their_template_and_fuse_tails_behind_heads_only():
    g = isa.Graph("roles")
    x = g.input("x", (1, 4, 8, 8))
    w = g.constant("w", np.ones((4, 4, 3, 3), np.float32))
    y = O.active(O.conv(x, w, pad_h_t=1, pad_h_b=1, pad_w_l=1, pad_w_r=1), "relu")
    y = O.active(O.reduce(y, "REDUCE_MEAN", [2, 3]), "relu")
    g.output(y, "y")
    grs = groups(g, chips.load("generic"), isa.Policy())
    assert [([n.op for n in grp.nodes], grp.template.name) for grp in grs] == [
        (["conv", "active"], "conv"), (["reduce"], "reduce"), (["active"], "elementwise")]
    assert all(grp.template is template_of(grp.nodes[0].op) for grp in grs)


def test_sliceable_convolutions_and_max_poolings_only():
    g = isa.Graph("slices")
    x = g.input("x", (1, 4, 8, 8))
    w = g.constant("w", np.ones((4, 4, 3, 3), np.float32))
    c = O.conv(x, w, pad_h_t=1, pad_h_b=1, pad_w_l=1, pad_w_r=1)
    m = O.pool(c, 2, 2, 2, 2)
    a = O.pool(m, 2, 2, 2, 2, pooling_type="AVE")
    whole = O.pool(a, 1, 1, 2, 2)
    g.output(whole, "y")
    grs = groups(g, chips.load("generic"), isa.Policy(fuse=False))
    assert [(grp.template.name, grp.template.slicing.sliceable(g, grp)) for grp in grs] == [
        ("conv", True), ("pool", True), ("pool", False), ("pool", False)]
