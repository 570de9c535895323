"""The `nki.language` (nl) subset: buffers, dtypes, `nl.ndarray`, tile-size constants, program
ids, and the operator tokens that `nki.isa` instructions take as `op=`.

A token is also the tile-level function of the same name: `nl.add(a, b)`, `nl.exp(t)` return a
new SBUF tile (tile_lang.py; experimental wrappers in the SDK). The operators the hardware lacks
(`nl.divide`, `nl.fmod`, `nl.mod`) are rejected wherever they appear (notes/nki.md §2 and §7).
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from . import dtypes as _dt
from .errors import NkiError
from .state import PMAX, PSUM_BANK_BYTES, PSUM_BANKS, current
from .tensor import DynSlice, NkiTensor, allocate, shared_output


def _elementwise(op: Any, args: tuple[Any, ...], dtype: Any) -> Any:
    """`nl.add(x, y)` and friends; tile_lang.py, which builds on this module, replaces this
    on import (the package imports it), so the two modules do not import each other."""
    raise NkiError(f"nl.{op.name}", "the function layer is not loaded", "interpreter",
                   "import kernel_dsl.lowering.nki.interp")


# -- memories --------------------------------------------------------------------------------
sbuf = "sbuf"
psum = "psum"
hbm = "hbm"
private_hbm = "private_hbm"
shared_hbm = "shared_hbm"

# -- dtypes ----------------------------------------------------------------------------------
float32 = _dt.float32
tfloat32 = _dt.tfloat32
bfloat16 = _dt.bfloat16
float16 = _dt.float16
float8_e4m3 = _dt.float8_e4m3
float8_e4m3fn = _dt.float8_e4m3fn
float8_e5m2 = _dt.float8_e5m2
float8_e8m0fnu = _dt.float8_e8m0fnu
float8_e4m3fn_x4 = _dt.float8_e4m3fn_x4
float8_e5m2_x4 = _dt.float8_e5m2_x4
float4_e2m1fn_x4 = _dt.float4_e2m1fn_x4
int8 = _dt.int8
int16 = _dt.int16
int32 = _dt.int32
uint8 = _dt.uint8
uint16 = _dt.uint16
uint32 = _dt.uint32
bool_ = _dt.bool_


class NKIObject:
    """Base class of the classes a kernel may define (the compiler rejects any other class).

    Keyword arguments set attributes. A subclass's plain class attributes (`x = None`, without
    an annotation) also become dataclass fields if it is decorated with `@dataclass`: AWS's
    nki-library builds such classes with keywords (`SectionParams(section_idx=...)` in
    attention_cte), which plain Python dataclasses would reject.
    """

    def __init__(self, **kwargs: Any) -> None:
        for k, v in kwargs.items():
            setattr(self, k, v)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        notes = dict(cls.__dict__.get("__annotations__", {}))
        for k, v in list(cls.__dict__.items()):
            if k.startswith("__") or k in notes or callable(v) or isinstance(
                    v, (property, classmethod, staticmethod, list, dict, set)):
                continue
            notes[k] = "Any"
        cls.__annotations__ = notes


# -- operator tokens -------------------------------------------------------------------------
class Op:
    """An operator for `op=` / `op0=` / `cmp_op=` arguments.

    `kind`: "arith" (ALU arithmetic, float32 math), "bitvec" (integer bit patterns),
    "act" (ScalarE activation only), "tile" (a tile-level nl function only, no instruction
    operator). `act`/`alu` say where the token is accepted.
    """

    def __init__(self, name: str, kind: str, fn: Callable[..., np.ndarray], *, alu: bool = True,
                 act: bool = False, reduce: bool = False, unary: bool = False,
                 valid: tuple[float, float] | None = None, symmetric: bool = False):
        self.name = name
        self.kind = kind
        self.fn = fn
        self.alu = alu
        self.act = act
        self.reduce = reduce
        self.unary = unary
        self.valid = valid  # activation input range; symmetric: ±[lo, hi]
        self.symmetric = symmetric

    def __repr__(self) -> str:
        return f"nl.{self.name}"

    def __call__(self, *args: Any, dtype: Any = None) -> Any:
        return _elementwise(self, args, dtype)


class RejectedOp:
    """An operator the hardware does not support; any use is an error."""

    def __init__(self, name: str, hint: str):
        self.name = name
        self.hint = hint

    def __repr__(self) -> str:
        return f"nl.{self.name}"

    def reject(self, where: str) -> NkiError:
        return NkiError(where, f"nl.{self.name} is not supported on Trainium hardware (it "
                        "works in AWS's simulator but fails when compiled)", "unsupported operators",
                        self.hint)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise self.reject(f"nl.{self.name}(...)")


def _cmp(f: Callable[..., Any]) -> Callable[..., np.ndarray]:
    return lambda a, b: f(a, b).astype(np.float32)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float32])(x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return (1.0 / (1.0 + np.exp(-x))).astype(np.float32)


def _f(fn: Callable[..., Any]) -> Callable[..., np.ndarray]:
    """An activation computed in float32, silent about NaN/Inf (the hardware is)."""

    def run(x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(fn(x.astype(np.float32)), dtype=np.float32)

    return run


add = Op("add", "arith", np.add, reduce=True)
subtract = Op("subtract", "arith", np.subtract, reduce=True)
multiply = Op("multiply", "arith", np.multiply, reduce=True)
maximum = Op("maximum", "arith", np.maximum, reduce=True)
minimum = Op("minimum", "arith", np.minimum, reduce=True)
equal = Op("equal", "arith", _cmp(np.equal))
not_equal = Op("not_equal", "arith", _cmp(np.not_equal))
greater = Op("greater", "arith", _cmp(np.greater))
greater_equal = Op("greater_equal", "arith", _cmp(np.greater_equal))
less = Op("less", "arith", _cmp(np.less))
less_equal = Op("less_equal", "arith", _cmp(np.less_equal))
logical_and = Op("logical_and", "arith", _cmp(np.logical_and), reduce=True)
logical_or = Op("logical_or", "arith", _cmp(np.logical_or), reduce=True)
logical_xor = Op("logical_xor", "arith", _cmp(np.logical_xor), reduce=True)
power = Op("power", "arith", np.power)
abs_max = Op("abs_max", "arith", lambda a, b: np.where(np.abs(a) > np.abs(b), a, b))
abs_min = Op("abs_min", "arith", lambda a, b: np.where(np.abs(a) < np.abs(b), a, b))
bitwise_and = Op("bitwise_and", "bitvec", np.bitwise_and, reduce=True)
bitwise_or = Op("bitwise_or", "bitvec", np.bitwise_or, reduce=True)
bitwise_xor = Op("bitwise_xor", "bitvec", np.bitwise_xor, reduce=True)
invert = Op("invert", "bitvec", np.invert, unary=True)
left_shift = Op("left_shift", "bitvec", np.left_shift)
right_shift = Op("right_shift", "bitvec", np.right_shift)
# unary operators: ALU (tensor_scalar) and ScalarE activations
abs = Op("abs", "arith", _f(np.abs), unary=True, act=True)  # noqa: A001 - NKI's name
square = Op("square", "arith", _f(np.square), unary=True, act=True)
relu = Op("relu", "arith", _f(lambda x: np.maximum(x, 0.0)), unary=True, act=True)
rsqrt = Op("rsqrt", "arith", _f(lambda x: 1.0 / np.sqrt(x)), unary=True, act=True,
           valid=(2.0 ** -87, 2.0 ** 97))
reciprocal = Op("reciprocal", "arith", _f(lambda x: 1.0 / x), unary=True, act=True,
                valid=(2.0 ** -42, 2.0 ** 42), symmetric=True)
# activation-only functions
copy = Op("copy", "act", _f(lambda x: x), alu=False, act=True, unary=True)
exp = Op("exp", "act", _f(np.exp), alu=False, act=True, unary=True)
log = Op("log", "act", _f(np.log), alu=False, act=True, unary=True, valid=(2.0 ** -64, 2.0 ** 64))
sqrt = Op("sqrt", "act", _f(np.sqrt), alu=False, act=True, unary=True,
          valid=(2.0 ** -116, 2.0 ** 118))
tanh = Op("tanh", "act", _f(np.tanh), alu=False, act=True, unary=True)
sigmoid = Op("sigmoid", "act", _sigmoid, alu=False, act=True, unary=True)
sin = Op("sin", "act", _f(np.sin), alu=False, act=True, unary=True, valid=(-math.pi, math.pi))
arctan = Op("arctan", "act", _f(np.arctan), alu=False, act=True, unary=True,
            valid=(-math.pi / 2, math.pi / 2))
sign = Op("sign", "act", _f(np.sign), alu=False, act=True, unary=True)
erf = Op("erf", "act", _erf, alu=False, act=True, unary=True)
gelu = Op("gelu", "act", _f(lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))), alu=False,
          act=True, unary=True)
silu = Op("silu", "act", _f(lambda x: x * _sigmoid(x)), alu=False, act=True, unary=True)
softplus = Op("softplus", "act", _f(lambda x: np.logaddexp(0.0, x)), alu=False, act=True,
              unary=True)

# more activation functions (nki.api.shared.rst, "Supported Activation Functions"); the formulas
# are the standard definitions of the named functions (the SDK gives only the names).
_K_TANH = math.sqrt(2.0 / math.pi)


def _gelu_dx(x: np.ndarray) -> np.ndarray:
    cdf = 0.5 * (1.0 + _erf(x / math.sqrt(2.0)))
    return cdf + x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def _gelu_sig_dx(x: np.ndarray) -> np.ndarray:
    s = _sigmoid(1.702 * x)
    return s + 1.702 * x * s * (1.0 - s)


gelu_apprx_tanh = Op("gelu_apprx_tanh", "act", _f(
    lambda x: 0.5 * x * (1.0 + np.tanh(_K_TANH * (x + 0.044715 * x ** 3)))),
    alu=False, act=True, unary=True)
gelu_apprx_sigmoid = Op("gelu_apprx_sigmoid", "act", _f(lambda x: x * _sigmoid(1.702 * x)),
                        alu=False, act=True, unary=True)
gelu_dx = Op("gelu_dx", "act", _f(_gelu_dx), alu=False, act=True, unary=True)
gelu_apprx_sigmoid_dx = Op("gelu_apprx_sigmoid_dx", "act", _f(_gelu_sig_dx), alu=False, act=True,
                           unary=True)
silu_dx = Op("silu_dx", "act", _f(lambda x: _sigmoid(x) * (1.0 + x * (1.0 - _sigmoid(x)))),
             alu=False, act=True, unary=True)
mish = Op("mish", "act", _f(lambda x: x * np.tanh(np.logaddexp(0.0, x))), alu=False, act=True,
          unary=True)
erf_dx = Op("erf_dx", "act", _f(lambda x: 2.0 / math.sqrt(math.pi) * np.exp(-x * x)), alu=False,
            act=True, unary=True)
# tile-level functions with no instruction-operator form
cos = Op("cos", "tile", _f(np.cos), alu=False, unary=True)
tan = Op("tan", "tile", _f(np.tan), alu=False, unary=True)
ceil = Op("ceil", "tile", _f(np.ceil), alu=False, unary=True)
floor = Op("floor", "tile", _f(np.floor), alu=False, unary=True)
trunc = Op("trunc", "tile", _f(np.trunc), alu=False, unary=True)
logical_not = Op("logical_not", "tile", _f(lambda x: (x == 0).astype(np.float32)), alu=False,
                 unary=True)
# `average` is a reduction operator (mean); `bypass` passes data through (SDK activate2 docs)
average = Op("average", "arith", lambda a, b: (a + b) / 2, alu=True, reduce=True)
bypass = Op("bypass", "arith", lambda a: a, unary=True)
prelu = Op("prelu", "unmodelled", _f(lambda x: x), alu=False, act=True, unary=True)  # needs relu_param

divide = RejectedOp("divide", "multiply by the reciprocal: nisa.reciprocal(dst=r, data=y), then "
                    "nisa.tensor_tensor(dst=out, data1=x, data2=r, op=nl.multiply)")
fmod = RejectedOp("fmod", "compute x - y * floor(x / y) with supported operators")
mod = RejectedOp("mod", "compute x - y * floor(x / y) with supported operators")


# -- tensors ---------------------------------------------------------------------------------
def ndarray(shape: Any, dtype: Any, buffer: Any = sbuf, name: str = "", address: Any = None) -> NkiTensor:
    """A new, uninitialized tensor (the interpreter fills it with NaN, or 4 for integers)."""
    if buffer == shared_hbm:
        return shared_output(shape, dtype, name)
    return allocate(shape, dtype, buffer, name, address)


def ds(start: int, size: int) -> DynSlice:
    return DynSlice(start, size)


def program_id(axis: int = 0) -> int:
    if axis != 0:
        raise NkiError("nl.program_id", f"axis {axis}: the only launch axis is the LNC axis 0",
                       "program model")
    return current().program_id


def num_programs(axes: int = 0) -> int:
    if axes != 0:
        raise NkiError("nl.num_programs", f"axis {axes}: the only launch axis is 0", "program model")
    return current().num_programs


def _range(start: int, stop: int | None = None, step: int = 1) -> range:
    """Deprecated aliases of `range`: every loop unrolls at trace time since NKI 0.3."""
    return range(start, stop, step) if stop is not None else range(start)


affine_range = sequential_range = static_range = _range
range_ = _range  # `nl.range`: not in the SDK's API reference, but AWS's nki-library loops with it


class _TileSize:
    """`nl.tile_size`: hardware limits of the current target."""

    pmax = PMAX
    psum_fmax = 512
    psum_bank_fmax = 512
    psum_bank_fmax_bytes = PSUM_BANK_BYTES
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    bn_stats_fmax = 512
    psum_min_align = 4
    sbuf_min_align = 1
    psum_num_banks = PSUM_BANKS

    @property
    def sbuf_fmax_bytes(self) -> int:
        return current().target.sbuf_bytes

    @property
    def total_available_sbuf_size(self) -> int:
        """Usable SBUF bytes per partition (deprecated alias of sbuf_fmax_bytes in the SDK)."""
        return current().target.sbuf_bytes

    @property
    def sbuf_size_bytes(self) -> int:
        """Total SBUF bytes over all partitions."""
        return current().target.sbuf_bytes * PMAX

    @property
    def sbuf_fmax(self) -> int:
        return current().target.sbuf_bytes // 4


tile_size = _TileSize()

__all__ = [
    "sbuf", "psum", "hbm", "private_hbm", "shared_hbm",
    "float32", "tfloat32", "bfloat16", "float16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2",
    "float8_e8m0fnu", "float8_e4m3fn_x4", "float8_e5m2_x4", "float4_e2m1fn_x4",
    "int8", "int16", "int32", "uint8", "uint16", "uint32", "bool_",
    "NKIObject", "NkiTensor", "ndarray", "ds", "program_id", "num_programs",
    "affine_range", "sequential_range", "static_range", "tile_size",
    "add", "subtract", "multiply", "maximum", "minimum", "equal", "not_equal", "greater",
    "greater_equal", "less", "less_equal", "logical_and", "logical_or", "logical_xor", "power",
    "abs_max", "abs_min", "bitwise_and", "bitwise_or", "bitwise_xor", "invert", "left_shift",
    "right_shift", "abs", "square", "relu", "rsqrt", "reciprocal", "copy", "exp", "log", "sqrt",
    "tanh", "sigmoid", "sin", "arctan", "sign", "erf", "gelu", "silu", "softplus",
    "gelu_apprx_tanh", "gelu_apprx_sigmoid", "gelu_dx", "gelu_apprx_sigmoid_dx", "silu_dx",
    "mish", "erf_dx", "cos", "tan", "ceil", "floor", "trunc", "logical_not", "average", "bypass",
    "prelu", "divide", "fmod", "mod",
]
