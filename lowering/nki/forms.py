"""The forms the generated NKI may use, and where AWS uses each (issue 18; tests/test_nki_forms.py).

A form is an `nl.*` / `nisa.*` call with its set of argument names. Every form the writer emits
must be in FORMS, whose value names a public AWS kernel that makes the same call with the same
arguments (aws-neuron/nki-library `src/nkilib_src/nkilib/...`, aws-neuron/nki-samples
`src/nki_samples/...`), or else the SDK reference that documents it (aws-neuron/aws-neuron-sdk
`nki/api/nki/{isa,language}/__init__.py`, the API docstrings). Operands are also checked for kind:
TENSOR operands are tiles wherever AWS passes tiles, and an infinite literal may only be a memset
value (the user's own constant); masks, pads and comparison immediates are finite, the way AWS
masks with -3.4028235e38 (names.FP32_MAX). Facts were read from nki-library @d2ad3a5,
nki-samples @6905a68 and aws-neuron-sdk @81ce03a; no AWS code is copied here.
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass

LIB = "nki-library src/nkilib_src/nkilib/"


def _f(name: str, *args: str) -> tuple[str, frozenset[str]]:
    return name, frozenset(args)


FORMS: dict[tuple[str, frozenset[str]], str] = {
    _f("nl.ndarray", "shape", "dtype", "buffer"):
        "nki-samples src/nki_samples/tutorials/matrix_multiplication/matrix_multiplication_nki_kernels.py",
    _f("nisa.dma_copy", "dst", "src"): LIB + "core/attention/attention_bwd.py",
    # a gather with `src=hbm.ap(pattern, offset, vector_offset, indirect_dim)` (gather.py)
    _f("nisa.dma_copy", "dst", "src", "oob_mode"): LIB + "experimental/moe/forward/bwmm_shard_on_H.py",
    _f("nisa.memset", "dst", "value"): LIB + "core/attention/attention_cte.py (and -np.inf: "
                                             "core/attention/attention_tkg.py)",
    _f("nisa.tensor_copy", "dst", "src"): LIB + "core/attention/attention_cte.py",
    _f("nisa.nc_transpose", "dst", "data"): LIB + "core/attention/attention_bwd.py",
    _f("nisa.nc_matmul", "dst", "stationary", "moving"):
        "nki-samples src/nki_samples/tutorials/matrix_multiplication/matrix_multiplication_nki_kernels.py",
    _f("nisa.tensor_tensor", "dst", "data1", "data2", "op"): LIB + "core/attention/attention_bwd.py",
    _f("nisa.tensor_scalar", "dst", "data", "op0", "operand0"): LIB + "core/attention/attention_cte.py",
    _f("nisa.tensor_scalar", "dst", "data", "op0", "operand0", "op1", "operand1"):
        LIB + "core/attention/attention_cte.py",
    _f("nisa.activation", "dst", "op", "data"): LIB + "core/attention/attention_tkg.py",
    _f("nisa.activation", "dst", "op", "data", "scale"): LIB + "core/attention/attention_tkg.py",
    _f("nisa.reciprocal", "dst", "data"): LIB + "core/attention/attention_cte.py",
    _f("nisa.tensor_reduce", "dst", "op", "data", "axis", "keepdims"):
        LIB + "core/attention/attention_tkg.py",
    _f("nisa.affine_select", "dst", "pattern", "channel_multiplier", "on_true_tile", "on_false_value",
       "cmp_op", "offset"): LIB + "core/attention/attention_bwd.py",
    _f("nisa.tensor_copy_predicated", "dst", "src", "predicate"): LIB + "core/attention/attention_tkg.py",
    _f("nisa.iota", "dst", "pattern", "offset", "channel_multiplier"):
        LIB + "core/attention/attention_bwd.py",
}

# operators, dtypes, buffers and the decorator, by the AWS kernel that uses each
_NAMES = {
    LIB + "core/attention/attention_bwd.py": "nki.jit nl.add nl.subtract nl.multiply nl.maximum "
    "nl.minimum nl.less nl.greater_equal nl.exp nl.float32 nl.sbuf nl.psum nl.shared_hbm",
    LIB + "core/attention/attention_cte.py": "nl.bfloat16 nl.less_equal",
    LIB + "core/attention/attention_tkg.py": "nl.int32 nl.uint8 nl.sin",
    LIB + "core/attention/gen_mask_tkg.py": "nl.greater",
    LIB + "core/max/cascaded_max.py": "nl.equal",
    LIB + "core/mlp/mlp_parameters.py": "nl.float16 nl.float8_e4m3fn",
    LIB + "core/attention/attention_tkg_utils.py": "nl.float8_e5m2",
    LIB + "core/mlp/mlp_cte/mlp_cte_norm.py": "nl.rsqrt",
    LIB + "core/mlp/mlp_cte/mlp_cte_quantization.py": "nl.abs",
    LIB + "core/moe/moe_cte/moe_cte_mx_utils.py": "nl.int16",
    LIB + "core/router_topk/router_topk.py": "nl.sigmoid",
    LIB + "core/utils/allocator.py": "nl.int8",
    LIB + "experimental/loss/cross_entropy.py": "nl.log",
    LIB + "experimental/moe/bwd/bwmm_bwd_dropless.py": "nl.logical_and",
    # no AWS kernel uses these; the SDK's nki.language reference defines each (operators as
    # `def name(x, y, dtype=None)`, `bool_: DType`) in aws-neuron-sdk nki/api/nki/language/__init__.py
    "aws-neuron-sdk nki/api/nki/language/__init__.py": "nl.not_equal nl.logical_or nl.logical_xor "
    "nl.bitwise_and nl.bitwise_or nl.bitwise_xor nl.left_shift nl.right_shift nl.power nl.sqrt "
    "nl.tanh nl.relu nl.erf nl.bool_",
}
NAMES = {name: where for where, names in _NAMES.items() for name in names.split()}

POSITIONAL = {"nl.ndarray": ("shape",)}  # positional arguments the writer uses, by name
# operands AWS always passes as tiles (tensor_copy_predicated's `src`: core/attention/attention_tkg.py
# and core/moe/moe_cte/bwmm_shard_on_block.py pass tensors, never a number)
TENSOR = {("nisa.tensor_copy_predicated", "src"), ("nisa.tensor_copy_predicated", "predicate"),
          ("nisa.affine_select", "on_true_tile")}
# numbers that may be infinite: a memset of the user's own value (the base of a predicated copy,
# as AWS memsets -np.inf in core/attention/attention_tkg.py); everywhere else they are finite
MAY_BE_INF = {("nisa.memset", "value")}


@dataclass(frozen=True)
class Call:
    name: str  # "nisa.memset"
    args: frozenset[str]
    kinds: tuple[tuple[str, str], ...]  # (argument, kind): tensor | number | inf | nan | expr
    line: int

    def kind(self, arg: str) -> str:
        return dict(self.kinds).get(arg, "")


def _kind(node: ast.expr) -> str:
    if isinstance(node, (ast.Name, ast.Subscript)):
        return "tensor"
    try:
        x = eval(compile(ast.Expression(node), "<form>", "eval"),  # noqa: S307 - generated literal
                 {"__builtins__": {}, "float": float, "int": int})
    except Exception:  # names of the kernel (`tq0 + 100 - tk0`), operators (`nl.add`), lists
        return "expr"
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return "nan" if math.isnan(x) else "inf" if math.isinf(x) else "number"
    return "expr"


def calls(source: str) -> list[Call]:
    """Every `nl.*` / `nisa.*` call of a generated source."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id in ("nl", "nisa")):
            continue
        name = f"{node.func.value.id}.{node.func.attr}"
        pos = POSITIONAL.get(name, ())
        named = [(pos[i] if i < len(pos) else f"<positional {i}>", a) for i, a in enumerate(node.args)]
        named += [(k.arg or "**", k.value) for k in node.keywords]
        out.append(Call(name, frozenset(a for a, _ in named),
                        tuple((a, _kind(v)) for a, v in named), node.lineno))
    return out


def names(source: str) -> set[str]:
    """Every `nl.X` / `nki.X` that is not called (operators, dtypes, buffers, `nki.jit`)."""
    tree = ast.parse(source)
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {f"{n.value.id}.{n.attr}" for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id in ("nl", "nki") and id(n) not in called}


def violations(source: str) -> list[str]:
    """What in `source` is not an allowed form (empty when all is well)."""
    bad = [f"{n}: not in lowering/nki/forms.py NAMES" for n in sorted(names(source) - set(NAMES))]
    for c in calls(source):
        where = f"line {c.line}: {c.name}({', '.join(sorted(c.args))})"
        if (c.name, c.args) not in FORMS:
            bad.append(f"{where}: form not in lowering/nki/forms.py FORMS")
        for arg, kind in c.kinds:
            if (c.name, arg) in TENSOR and kind != "tensor":
                bad.append(f"{where}: `{arg}` is a {kind}; AWS passes a tensor")
            if kind == "inf" and (c.name, arg) not in MAY_BE_INF:
                bad.append(f"{where}: `{arg}` is infinite; AWS masks with finite values")
    return bad
