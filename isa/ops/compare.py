"""Element-wise compare (the seed's gt ... nes): 1 where the comparison holds, else 0, in the
operands' dtype (the seed requires the input and output dtypes to be the same)."""

import numpy as np

from .elementwise import Elementwise, define

gt = define(Elementwise("gt", "gt", np.greater), "tensor_o = tensor_i0 > tensor_i1 ? 1 : 0, with shape broadcast.")
ge = define(Elementwise("ge", "ge", np.greater_equal), "tensor_o = tensor_i0 >= tensor_i1 ? 1 : 0, with shape broadcast.")
lt = define(Elementwise("lt", "lt", np.less), "tensor_o = tensor_i0 < tensor_i1 ? 1 : 0, with shape broadcast.")
le = define(Elementwise("le", "le", np.less_equal), "tensor_o = tensor_i0 <= tensor_i1 ? 1 : 0, with shape broadcast.")
eq = define(Elementwise("eq", "eq", np.equal), "tensor_o = tensor_i0 == tensor_i1 ? 1 : 0, with shape broadcast.")
ne = define(Elementwise("ne", "ne", np.not_equal), "tensor_o = tensor_i0 != tensor_i1 ? 1 : 0, with shape broadcast.")

_S = (("tensor_i0",), ("scalar_i1",))
gts = define(Elementwise("gts", "gt", np.greater, *_S), "tensor_o = tensor_i0 > scalar_i1 ? 1 : 0.")
ges = define(Elementwise("ges", "ge", np.greater_equal, *_S), "tensor_o = tensor_i0 >= scalar_i1 ? 1 : 0.")
lts = define(Elementwise("lts", "lt", np.less, *_S), "tensor_o = tensor_i0 < scalar_i1 ? 1 : 0.")
les = define(Elementwise("les", "le", np.less_equal, *_S), "tensor_o = tensor_i0 <= scalar_i1 ? 1 : 0.")
eqs = define(Elementwise("eqs", "eq", np.equal, *_S), "tensor_o = tensor_i0 == scalar_i1 ? 1 : 0.")
nes = define(Elementwise("nes", "ne", np.not_equal, *_S), "tensor_o = tensor_i0 != scalar_i1 ? 1 : 0.")
