"""Triton spellings of the IR's dtypes, literals and elementwise ops, and the helper functions the
generated source defines where an op has no `tl` builtin that works in the interpreter too.

Float math builtins (`tl.exp`, `tl.log`, ...) accept only f32, so 16-bit floats are computed in
f32 and rounded back, as PyTorch does. `tl.maximum` and the float reductions propagate NaN as
`torch.maximum`/`amax` do (Triton's default drops NaN).
"""
from __future__ import annotations

import math
from typing import Any

TL = {"f32": "tl.float32", "bf16": "tl.bfloat16", "f16": "tl.float16", "i32": "tl.int32",
      "i16": "tl.int16", "i8": "tl.int8", "u8": "tl.uint8", "bool": "tl.int1",
      "f8e4m3fn": "tl.float8e4nv", "f8e5m2": "tl.float8e5"}
TORCH = {"f32": "torch.float32", "bf16": "torch.bfloat16", "f16": "torch.float16",
         "i32": "torch.int32", "i16": "torch.int16", "i8": "torch.int8", "u8": "torch.uint8",
         "bool": "torch.bool", "f8e4m3fn": "torch.float8_e4m3fn", "f8e5m2": "torch.float8_e5m2"}
SIG = {"f32": "fp32", "bf16": "bf16", "f16": "fp16", "i32": "i32", "i16": "i16", "i8": "i8",
       "u8": "u8", "bool": "i1", "f8e4m3fn": "fp8e4nv", "f8e5m2": "fp8e5"}  # pointer element
# types in a Triton kernel signature
FP8 = ("f8e4m3fn", "f8e5m2")
FLOATS = ("f32", "bf16", "f16")
HALF = ("bf16", "f16")
# ops whose builtin takes f32 only: 16-bit inputs go through f32
F32_ONLY = {"exp": "tl.exp({})", "exp2": "tl.exp2({})", "log": "tl.log({})",
            "sqrt": "tl.sqrt_rn({})", "rsqrt": "tl.rsqrt({})", "tanh": "_tanh({})",
            "sigmoid": "tl.sigmoid({})", "sin": "tl.sin({})", "cos": "tl.cos({})",
            "erf": "tl.erf({})", "pow": "_pow({}, {})", "floor": "tl.floor({})",
            "ceil": "tl.ceil({})", "round": "_round({})", "log1p": "_log1p({})",
            "expm1": "_expm1({})"}
UNARY = {"abs": "tl.abs({})", "neg": "-{}", "not": "({} == 0)", "relu": "tl.where({0} < 0, 0, {0})"}
BINARY = {"add": "{} + {}", "sub": "{} - {}", "mul": "{} * {}", "div": "{} / {}",
          "and": "{} & {}", "or": "{} | {}", "xor": "{} ^ {}", "shl": "{} << {}",
          "shr": "{} >> {}", "floordiv": "_floordiv({}, {})", "mod": "_mod({}, {})",
          "lt": "{} < {}", "le": "{} <= {}", "gt": "{} > {}", "ge": "{} >= {}", "eq": "{} == {}",
          "ne": "{} != {}"}
INT_LIMITS = {"i32": (-2**31, 2**31 - 1), "i16": (-2**15, 2**15 - 1), "i8": (-128, 127),
              "u8": (0, 255), "bool": (0, 1)}

HELPERS = {
    "_maximum": '''
@triton.jit
def _maximum(a, b):
    """torch.maximum: NaN wins (tl.maximum's default lets the other operand win)."""
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
''',
    "_minimum": '''
@triton.jit
def _minimum(a, b):
    """torch.minimum: NaN wins."""
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)
''',
    "_mul": '''
@triton.jit
def _mul(a, b):
    """The combine function of a product reduction (Triton has no tl.prod)."""
    return a * b
''',
    **{f"_{k}": f'''
@triton.jit
def _{k}(a, b):
    """The combine function of an `{k}` scan."""
    return a {sym} b
''' for k, sym in (("add", "+"), ("and", "&"), ("or", "|"), ("xor", "^"))},
    "_amax": '''
@triton.jit
def _amax(x, axis: tl.constexpr, keep_dims: tl.constexpr):
    """torch.amax: tl.max skips NaN; a NaN anywhere along the axis makes the result NaN."""
    r = tl.max(x, axis=axis, keep_dims=keep_dims)
    nan = tl.max((x != x).to(tl.int32), axis=axis, keep_dims=keep_dims)
    return tl.where(nan != 0, float("nan"), r)
''',
    "_amin": '''
@triton.jit
def _amin(x, axis: tl.constexpr, keep_dims: tl.constexpr):
    """torch.amin: tl.min skips NaN; a NaN anywhere along the axis makes the result NaN."""
    r = tl.min(x, axis=axis, keep_dims=keep_dims)
    nan = tl.max((x != x).to(tl.int32), axis=axis, keep_dims=keep_dims)
    return tl.where(nan != 0, float("nan"), r)
''',
    "_to_bf16": '''
@triton.jit
def _to_bf16(x):
    """f32 -> bf16 rounding to nearest even on the bits (the interpreter's cast truncates)."""
    bits = x.to(tl.uint32, bitcast=True)
    bits = bits + 0x7FFF + ((bits >> 16) & 1)
    r = (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    return tl.where(x != x, x.to(tl.bfloat16), r)  # NaN stays NaN (no bf16 literal: Triton 3.7)
''',
    "_f8_bits": '''
@triton.jit
def _f8_bits(x, MBITS: tl.constexpr, BIAS: tl.constexpr, LARGEST: tl.constexpr,
             TINY: tl.constexpr, SMALLEST_NORMAL: tl.constexpr):
    """The bits (int32, sign included) of the float8 value nearest to f32 `x` (ties to even),
    |x| at most LARGEST; TINY is the subnormal spacing. Done on f32 bits: Triton's interpreter
    converts to float8 wrongly."""
    a = tl.minimum(tl.abs(x), LARGEST)
    e = tl.maximum(((a.to(tl.int32, bitcast=True) >> 23) & 255) - 127, 1 - BIAS)
    step = ((e - MBITS + 127) << 23).to(tl.float32, bitcast=True)  # the spacing at a: 2**k
    q = ((a / step + 8388608.0) - 8388608.0) * step  # a / step is exact; + 2**23 rounds it
    qb = q.to(tl.int32, bitcast=True)
    normal = (((qb >> 23) & 255) - 127 + BIAS) << MBITS | ((qb >> (23 - MBITS)) & ((1 << MBITS) - 1))
    b = tl.where(q >= SMALLEST_NORMAL, normal, (q / TINY).to(tl.int32))
    return b | ((x.to(tl.int32, bitcast=True) >> 24) & 128)
''',
    "_from_f8e4m3fn": '''
@triton.jit
def _from_f8e4m3fn(x):
    """float8_e4m3fn -> f32: its all-ones patterns are NaN (Triton 3.7's interpreter reads 480)."""
    b = x.to(tl.uint8, bitcast=True)
    return tl.where((b & 127) == 127, float("nan"), x.to(tl.float32))
''',
    "_from_f8e5m2": '''
@triton.jit
def _from_f8e5m2(x):
    """float8_e5m2 -> f32: an all-ones exponent is inf or NaN (Triton 3.7's interpreter reads
    65536 and up)."""
    b = x.to(tl.uint8, bitcast=True)
    inf = tl.where((b & 128) != 0, -float("inf"), float("inf"))
    special = tl.where((b & 3) == 0, inf, float("nan"))
    return tl.where((b & 124) == 124, special, x.to(tl.float32))
''',
    "_to_f8e4m3fn": '''
@triton.jit
def _to_f8e4m3fn(x):
    """f32 -> float8_e4m3fn as torch converts: ties to even, saturating at +-448, NaN kept."""
    b = tl.where(x != x, 127, _f8_bits(x, 3, 7, 448.0, 0.001953125, 0.015625))
    return b.to(tl.uint8).to(tl.float8e4nv, bitcast=True)
''',
    "_to_f8e5m2": '''
@triton.jit
def _to_f8e5m2(x):
    """f32 -> float8_e5m2 as torch converts: ties to even, |x| >= 61440 to inf, NaN kept."""
    b = _f8_bits(x, 2, 15, 57344.0, 0.0000152587890625, 0.00006103515625)
    b = tl.where(tl.abs(x) >= 61440.0, (b & 128) | 124, b)
    b = tl.where(x != x, 127, b)
    return b.to(tl.uint8).to(tl.float8e5, bitcast=True)
''',
    "_tanh": '''
@triton.jit
def _tanh(x):
    """tanh in f32 from exp; a short Taylor series near 0, where 1 - exp(-2|x|) cancels."""
    ax = tl.abs(x)
    e = tl.exp(-2.0 * ax)
    far = (1.0 - e) / (1.0 + e)
    x2 = ax * ax
    near = ax * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0))))
    t = tl.where(ax < 0.0625, near, far)
    return tl.where(x < 0, -t, t)
''',
    "_round": '''
@triton.jit
def _round(x):
    """torch.round, half to even: |x| + 2^23 - 2^23 rounds in f32 arithmetic (already whole
    above 2^23); the sign is put back, so -0.3 gives -0.0 as in torch."""
    ax = tl.abs(x)
    r = (ax + 8388608.0) - 8388608.0
    r = tl.where(ax < 8388608.0, r, ax)
    return tl.where(x < 0, -r, r)
''',
    "_log1p": '''
@triton.jit
def _log1p(x):
    """log(1 + x), accurate near 0 (Kahan: the rounding of 1 + x is divided back out)."""
    u = 1.0 + x
    d = u - 1.0
    r = tl.log(u) * (x / tl.where(d == 0, 1.0, d))
    return tl.where(d == 0, x, tl.where(u == float("inf"), u, r))
''',
    "_expm1": '''
@triton.jit
def _expm1(x):
    """exp(x) - 1, accurate near 0 (Kahan: (u - 1) * x / log(u) with u = exp(x))."""
    u = tl.exp(x)
    d = u - 1.0
    lu = tl.log(u)
    r = d * (x / tl.where(lu == 0, 1.0, lu))
    r = tl.where(u == float("inf"), u, r)
    return tl.where(u == 1.0, x, tl.where(d == -1.0, -1.0, r))
''',
    "_floordiv": '''
@triton.jit
def _floordiv(a, b):
    """torch's integer a // b (floor); Triton's // truncates toward zero, as C does. A zero
    divisor is taken as 1 (no trap, no undefined value): a // 0 is a."""
    b = tl.where(b == 0, 1, b)
    q = a // b
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), q - 1, q)
''',
    "_mod": '''
@triton.jit
def _mod(a, b):
    """torch's integer a % b (the sign of b); Triton's % takes the sign of a, as C does.
    a % 0 is 0 (see _floordiv)."""
    b = tl.where(b == 0, 1, b)
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
''',
    "_pow": '''
@triton.jit
def _pow(a, b):
    """torch.pow for f32: exp2(b * log2|a|), with the sign of odd integer powers of a < 0."""
    r = tl.exp2(b * tl.log2(tl.abs(a)))
    bi = tl.floor(b)
    odd = (bi == b) & (bi - 2.0 * tl.floor(0.5 * bi) == 1.0)
    r = tl.where(a < 0, tl.where(bi == b, tl.where(odd, -r, r), float("nan")), r)
    return tl.where(b == 0, 1.0, r)
''',
}


def lit(x: Any) -> str:
    """A Python literal the Triton frontend accepts (also inf and nan)."""
    if isinstance(x, bool):
        return repr(x)
    if isinstance(x, float):
        if math.isinf(x):
            return 'float("-inf")' if x < 0 else 'float("inf")'
        if math.isnan(x):
            return 'float("nan")'
    return repr(x)


def bf16_full(shape: str, literal: str) -> str:
    """`tl.full` of a nonzero bf16 literal (one bf16 holds exactly), made in f32 and cast:
    Triton 3.7's interpreter has no bf16 constants (no `get_bf16`)."""
    return f"tl.full({shape}, {literal}, tl.float32).to(tl.bfloat16)"


def fill_lit(value: Any, dtype: str) -> str:
    """A fill value as a literal of `dtype`'s kind (a float literal would promote an int tile)."""
    if dtype in FP8:  # only matmul padding fills float8 (no other op takes it): a float8 zero
        assert float(value) == 0, value
        return f"tl.zeros([], {TL[dtype]})"
    if dtype == "bf16" and float(value) != 0:  # fills are 0, +-inf, NaN: exact in bf16
        return bf16_full("[]", lit(float(value)))
    if dtype in FLOATS:
        return lit(float(value))
    if isinstance(value, float) and math.isinf(value):
        lo, hi = INT_LIMITS[dtype]
        return str(lo if value < 0 else hi)
    return str(int(value))


# `scan` ops: tl.associative_scan with these combine functions (NaN wins a max, as in torch)
SCAN_COMBINE = {"add": "_add", "mul": "_mul", "max": "_maximum", "min": "_minimum", "and": "_and",
                "or": "_or", "xor": "_xor"}
SCAN_IDENTITY = {"add": "sum", "mul": "prod", "max": "max", "min": "min"}


def identity(op: str, dtype: str) -> str:
    """The value a padded lane must hold so that a reduction ignores it."""
    if op in ("and", "or", "xor"):  # scans of int32
        return "-1" if op == "and" else "0"
    op = SCAN_IDENTITY.get(op, op)
    if op == "sum":
        return "0"
    if op == "prod":
        return "1.0" if dtype in FLOATS else "1"
    if dtype in FLOATS:
        return lit(float("-inf") if op == "max" else float("inf"))
    lo, hi = INT_LIMITS[dtype]
    return str(lo if op == "max" else hi)


def up(x: str, dtype: str) -> str:
    """`x` widened to f32 when it is a 16-bit float."""
    return f"{x}.to(tl.float32)" if dtype in HALF else x


def narrow(x: str, dst: str, cpu: bool, helpers: set[str]) -> str:
    """An f32 expression converted to `dst`, rounding to nearest even. The interpreter's own
    f32 -> bf16 conversion truncates, so CPU kernels round through `_to_bf16`; float8 always
    goes through `_to_f8*`: torch saturates e4m3fn at +-448, and the interpreter's conversion is
    wrong (Triton 3.7: 1000 -> 256, NaN -> 384)."""
    if dst in FP8:
        helpers.update(("_f8_bits", f"_to_{dst}"))
        return f"_to_{dst}({x})"
    if dst == "bf16" and cpu:
        helpers.add("_to_bf16")
        return f"_to_bf16({x})"
    return f"{x}.to({TL[dst]})" if dst != "f32" else x


def elementwise(kind: str, ins: list[str], in_dtype: str, out_dtype: str, cpu: bool,
                helpers: set[str]) -> str | None:
    """The expression of an elementwise op, or None when `kind` is not elementwise.

    16-bit floats are computed in f32 and rounded once per op, which is what PyTorch does; it is
    also the only way the interpreter gets them right (NumPy has no bf16: it holds the bits)."""
    if in_dtype in HALF and kind not in ("abs", "not", "and", "or"):
        e = elementwise(kind, [up(x, in_dtype) for x in ins], "f32",
                        "bool" if out_dtype == "bool" else "f32", cpu, helpers)
        return e if e is None or out_dtype == "bool" else narrow(f"({e})", out_dtype, cpu, helpers)
    if kind in F32_ONLY:
        if F32_ONLY[kind].startswith("_"):
            helpers.add(f"_{kind}")
        if in_dtype == "f32":
            return F32_ONLY[kind].format(*ins)
        e = F32_ONLY[kind].format(*[f"{x}.to(tl.float32)" for x in ins])
        if kind == "pow":  # integer powers: exact results come back as 7.99..., round them
            e = f"tl.floor({e} + 0.5)"
        return f"{e}.to({TL[out_dtype]})"
    if kind == "not" and in_dtype == "u8":  # Triton 3.7's interpreter builds ~ from a -1 fill
        return f"({ins[0]} ^ 255)"
    if kind == "not" and in_dtype != "bool":
        return f"~{ins[0]}"  # bitwise on integers, as torch's ~
    if kind in UNARY:
        return UNARY[kind].format(*ins)
    if kind in ("max", "min"):
        if in_dtype == "f32":
            helpers.add(f"_{kind}imum")
            return f"_{kind}imum({ins[0]}, {ins[1]})"
        return f"tl.{kind}imum({ins[0]}, {ins[1]})"
    if kind == "div" and in_dtype != "f32":
        return f"({ins[0]}.to(tl.float32) / {ins[1]}.to(tl.float32)).to({TL[out_dtype]})"
    if kind in BINARY:
        if BINARY[kind].startswith("_"):
            helpers.add(BINARY[kind].split("(")[0])
        return BINARY[kind].format(*ins)
    return None


def cast(x: str, src: str, dst: str, cpu: bool, helpers: set[str]) -> str:
    """`x.to(dst)`; a 16-bit float to or from a non-float goes through f32 (the interpreter
    converts only between float types correctly), and bf16 results round to nearest even."""
    if src == dst:
        return x
    if src in FP8 or dst in FP8:  # through f32: exact from float8, one rounding into it
        if src in FP8:
            helpers.add(f"_from_{src}")
            wide = f"_from_{src}({x})"
        else:
            wide = cast(x, src, "f32", cpu, helpers)
        if dst in FLOATS or dst in FP8:
            return narrow(wide, dst, cpu, helpers)
        return f"{wide}.to({TL[dst]})"
    if src in HALF and dst not in FLOATS:
        return f"{x}.to(tl.float32).to({TL[dst]})"
    if dst == "bf16":
        return narrow(up(x, src) if src in FLOATS else f"{x}.to(tl.float32)", dst, cpu, helpers)
    if dst in HALF and src not in FLOATS:
        return f"{x}.to(tl.float32).to({TL[dst]})"
    return f"{x}.to({TL[dst]})"
