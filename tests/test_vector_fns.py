"""The one table of vector functions (isa/vector_fns.py): what the instruction set, the machine's
vector engine and its operand checks read from it, and each function's meaning against values
worked out by hand (not by the table's own numpy); the element-wise ops' references against the
same values, so a reference that mirrors the table's formula cannot share its mistake unseen."""

import inspect
import math

import numpy as np
import pytest

from isa import instructions, vector_fns
from isa.dtypes import ROUNDING
from isa.ops import REGISTRY
from isa.ops.activation import ACTIVE_TYPES
from isa.ops.elementwise import Elementwise
from sim.engines import vector

AWAY = ROUNDING["ROUNDING_HALF_AWAY_FROM_ZERO"]
TABLE = np.arange(256, dtype=np.int64)[::-1]  # table[i] = 255 - i

BY_HAND = {  # fn -> (operands, the result)
    "copy": ((3.5,), 3.5),
    "add": ((2.0, 3.0), 5.0),
    "sub": ((2.0, 3.0), -1.0),
    "mul": ((2.0, 3.0), 6.0),
    "div": ((2.0, 4.0), 0.5),
    "max": ((2.0, -3.0), 2.0),
    "min": ((2.0, -3.0), -3.0),
    "mul_add": ((2.0, 3.0, 4.0), 10.0),
    "clamp": ((5.0, 0.0, 3.0), 3.0),
    "relu": ((-1.0,), 0.0),
    "leaky_relu": ((-2.0, 0.5), -1.0),
    "abs": ((-3.0,), 3.0),
    "tanh": ((0.0,), 0.0),
    "sigmoid": ((0.0,), 0.5),
    "exp": ((0.0,), 1.0),
    "elu": ((-1.0,), math.exp(-1) - 1),
    "sqrt": ((4.0,), 2.0),
    "square": ((-3.0,), 9.0),
    "rsqrt": ((4.0,), 0.5),
    "ln": ((1.0,), 0.0),
    "round": ((-2.5,), -3.0),
    "ceil": ((1.2,), 2.0),
    "floor": ((-1.2,), -2.0),
    "sin": ((0.0,), 0.0),
    "cos": ((0.0,), 1.0),
    "gt": ((2.0, 1.0), 1),
    "ge": ((1.0, 1.0), 1),
    "lt": ((2.0, 1.0), 0),
    "le": ((2.0, 1.0), 0),
    "eq": ((2.0, 2.0), 1),
    "ne": ((2.0, 2.0), 0),
    "select_gt": ((2.0, 1.0, 7.0, 8.0), 7.0),
    "select_ge": ((0.0, 1.0, 7.0, 8.0), 8.0),
    "and": ((6, 3), 2),
    "or": ((6, 3), 7),
    "xor": ((6, 3), 5),
    "lshift": ((np.int64(3), 2, AWAY), 12),
    "rshift": ((np.int64(10), 2, AWAY), 3),  # 2.5 rounds away from zero
    "mul_rshift": ((np.int64(5), 3, 1, AWAY), 8),  # 15 / 2 = 7.5 -> 8
    "lut": ((np.int64(258), TABLE), 253),  # 258's low byte is 2
    "reduce_sum": ((np.array([[1.0, 2.0], [3.0, 4.0]]), (1,)), [3.0, 7.0]),
    "reduce_max": ((np.array([[1.0, 2.0], [3.0, 4.0]]), (1,)), [2.0, 4.0]),
    "reduce_min": ((np.array([[1.0, 2.0], [3.0, 4.0]]), (1,)), [1.0, 3.0]),
    "reduce_prod": ((np.array([[1.0, 2.0], [3.0, 4.0]]), (1,)), [2.0, 12.0]),
}


def test_every_function_is_checked_here():
    assert set(BY_HAND) == set(vector_fns.FNS)


@pytest.mark.parametrize("name", sorted(vector_fns.FNS))
def test_each_meaning_gives_the_value_worked_out_by_hand(name):
    operands, expected = BY_HAND[name]
    np.testing.assert_allclose(vector_fns.FNS[name].meaning(*operands), expected, rtol=1e-12)


@pytest.mark.parametrize("name", sorted(vector_fns.FNS))
def test_the_arity_is_what_the_meaning_takes(name):
    fn = vector_fns.FNS[name]
    takes = fn.meaning.nin if isinstance(fn.meaning, np.ufunc) else len(inspect.signature(fn.meaning).parameters)
    assert takes == fn.arity + (vector_fns.REDUCE in fn.flags)  # a reduction is also given its axes


def test_the_instruction_set_and_the_engine_read_the_table():
    assert {name: fn.arity for name, fn in vector_fns.FNS.items()} == instructions.VECTOR_FNS
    assert set(instructions.REDUCTIONS) == {n for n, fn in vector_fns.FNS.items() if vector_fns.REDUCE in fn.flags}
    assert set(instructions.TABLE_OPERANDS) == {n for n, fn in vector_fns.FNS.items() if vector_fns.TABLE in fn.flags}
    assert vector.FNS is vector_fns.FNS


PLAIN = sorted(op.name for op in REGISTRY.values() if isinstance(op, Elementwise) and op.ref is not None
               and type(op).steps is Elementwise.steps and type(op).ref_fn is Elementwise.ref_fn)


def test_the_plain_element_wise_ops_are_found():
    assert len(PLAIN) == 54 and {"add", "axpy", "clamp", "rsubs", "bit_xor", "nes", "stride_cpy_offset"} <= set(PLAIN)


@pytest.mark.parametrize("name", PLAIN)
def test_each_op_reference_gives_the_value_worked_out_by_hand(name):
    """An op's reference (for the tests) runs its vector function's operands in the same order;
    it is written apart from the table, so both answer to the values worked out by hand."""
    op = REGISTRY[name]
    operands, expected = BY_HAND[op.fn]
    np.testing.assert_allclose(op.ref(*operands), expected, rtol=1e-12)


ON_THE_OTHER_SIDE = {  # activation -> (x, its value): a second point, away from BY_HAND's (sigmoid's 0 is symmetric)
    "tanh": (1.0, math.tanh(1.0)), "sigmoid": (2.0, 1 / (1 + math.exp(-2.0))), "relu": (2.0, 2.0), "exp": (1.0, math.e),
    "elu": (1.5, 1.5), "sqrt": (9.0, 3.0), "square": (1.5, 2.25), "rsqrt": (16.0, 0.25), "absval": (2.0, 2.0),
    "ln": (math.e, 1.0), "round": (2.5, 3.0), "ceil": (-1.5, -1.0), "floor": (1.5, 1.0), "sin": (math.pi / 2, 1.0),
    "cos": (math.pi, -1.0), "leaky_relu": (3.0, 3.0),
}


@pytest.mark.parametrize("kind", sorted(ACTIVE_TYPES))
def test_each_activation_reference_gives_the_values_worked_out_by_hand(kind):
    fn = ACTIVE_TYPES[kind][0]
    operands, expected = BY_HAND[fn]
    ref = REGISTRY["active_param"].ref_fn({"active_type": kind, "slope": operands[1] if fn == "leaky_relu" else 0.0})
    np.testing.assert_allclose(ref(np.float64(operands[0])), expected, rtol=1e-12)
    x, value = ON_THE_OTHER_SIDE[kind]
    np.testing.assert_allclose(ref(np.float64(x)), value, rtol=1e-12)


def test_the_select_references_by_hand():
    cond = REGISTRY["condition_select"].ref_fn({})
    assert [cond(c, 1.0, 2.0) for c in (1.0, 0.0, -1.0)] == [1.0, 2.0, 2.0]
    gt, ge = (REGISTRY["select"].ref_fn({"select_type": t}) for t in ("GREATER_THAN", "GREATER_EQUAL"))
    assert [gt(a, 2.0, 1.0, 0.0) for a in (3.0, 2.0, 1.0)] == [1.0, 0.0, 0.0]
    assert [ge(a, 2.0, 1.0, 0.0) for a in (3.0, 2.0, 1.0)] == [1.0, 1.0, 0.0]
