"""The op set, under the seed's names. Each family is one module; every op registers its
definition in REGISTRY (name -> OpDef) and exposes a function that adds it to a graph."""

from .activation import active, active_param, cos, sin
from .arith import (
    add,
    adds,
    axpy,
    cast,
    ceil,
    clamp,
    copy,
    div,
    divs,
    floor,
    max,
    maxs,
    min,
    mins,
    mul,
    muls,
    rdivs,
    round,
    rsubs,
    sub,
    subs,
)
from .attention import attention
from .axis_shift import clshift, crshift, lshift, rshift
from .base import REGISTRY, OpDef, Spec
from .bits import (
    arith_lshift,
    arith_lshifts,
    arith_rshift,
    arith_rshifts,
    arithmetic_pc_shift,
    arithmetic_shift,
    bit_and,
    bit_ands,
    bit_or,
    bit_ors,
    bit_xor,
    bit_xors,
    logical_pc_shift,
    logical_shift,
    round_rshift,
    round_rshifts,
)
from .cache import cache_append, cache_read
from .compare import eq, eqs, ge, ges, gt, gts, le, les, lt, lts, ne, nes
from .conv import conv, conv3d, conv3d_v2, conv_v2, deconv, deconv3d_v2, deconv_v2
from .custom import customed_ops, register_custom
from .fill import fill, number_like
from .fixed_point import add_shift, adds_shift, mul_shift, muls_shift, rsubs_shift, sub_shift, subs_shift
from .gather import gather, scatter_nd
from .generate import constdata, linspace, random_normal, random_uniform, sequence_gen
from .masked_fill import masked_fill
from .matrix import fc_int, matrix_mul, matrix_mul_v2
from .movement import broadcast, concat, extract, extract_v2, interleave, permute, repeat, split, tile
from .norm import batch_norm
from .onnx_nms import non_max_suppression
from .pad import batch_to_space, pad, pad_v2, space_to_batch
from .pool import pool, pool3d_int, pool_int
from .quant import dequant_int_to_fp32, requant_fp32_to_int, requant_int32
from .reduce import hw_avg, hw_mul, reduce, softmax, softmax_int
from .resample import interpolate, upsample
from .select import condition_select, lut, select
from .selection import index_select, masked_select, where
from .shape import expand_dims, reshape, reshape_v2, shape_fetch, squeeze
from .sorting import arg, argsort, sort, topk
from .stride import (
    stride_add,
    stride_add_offset,
    stride_cpy,
    stride_cpy_offset,
    stride_div,
    stride_div_offset,
    stride_max,
    stride_max_offset,
    stride_min,
    stride_min_offset,
    stride_mul,
    stride_mul_offset,
    stride_sub,
    stride_sub_offset,
)
from .vision import nms, nms_v2
from .weight_only import matrix_mul_a16

__all__ = sorted(name for name in REGISTRY) + ["REGISTRY", "OpDef", "Spec", "register_custom"]  # noqa: PLE0605
