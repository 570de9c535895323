"""`scan op="combine"`: a user's combine function (a region of `[]` values, docs/ir.md "Scans") as
the log-step scan lower_scan.py runs for one ALU op. Step k evaluates the region once on two
shifted free-axis slices of the operands (forward: partner lanes 0:n-k, current lanes k:n;
reverse: partner k:n, current 0:n-k), one NKI instruction per region op into a scratch tile of
the operands' shape, and copies the yields into the lanes that have a partner; the other lanes
are copied. Every operand and result is one SBUF tile with the scanned dim on the free axis.

Region values are f32, i32 or bool (the scan's working dtypes): int32 `tensor_tensor` runs on
GpSimd's exact integer ALU (wrapping, as lower_elementwise.int_arith relies on), f32 on VectorE.
An op with no slice form here (`//`, `%`, a bit view, ...) is a BackendError naming it.
"""
from __future__ import annotations

from kernel_dsl.errors import BackendError
from kernel_dsl.ir import Op, Value

from .layout import orient_with
from .writer import CMP, Tile, Writer

FLOAT_OPS = {"add": "nl.add", "sub": "nl.subtract", "mul": "nl.multiply", "max": "nl.maximum",
             "min": "nl.minimum", "pow": "nl.power", **CMP}
INT_OPS = {"add": "nl.add", "sub": "nl.subtract", "mul": "nl.multiply", "max": "nl.maximum",
           "min": "nl.minimum", "and": "nl.bitwise_and", "or": "nl.bitwise_or",
           "xor": "nl.bitwise_xor", "shl": "nl.left_shift", "shr": "nl.right_shift", **CMP}
BOOL_OPS = {"and": "nl.logical_and", "or": "nl.logical_or", "xor": "nl.logical_xor",
            "max": "nl.maximum", "min": "nl.minimum", **CMP}
ACTIVATION = {"exp": "nl.exp", "log": "nl.log", "sqrt": "nl.sqrt", "rsqrt": "nl.rsqrt",
              "tanh": "nl.tanh", "sigmoid": "nl.sigmoid", "abs": "nl.abs", "relu": "nl.relu"}


def log_steps(n: int) -> list[int]:
    """The Hillis-Steele distances 1, 2, 4, ... < n."""
    steps, k = [], 1
    while k < n:
        steps.append(k)
        k *= 2
    return steps


def _refuse(op: Op, scan: Op, why: str) -> BackendError:
    return BackendError(f"`{op.kind}` in a scan's combine function on the NKI backend", scan.loc,
                        f"{why}; write the combine with + - * max min, comparisons, "
                        "torch.where, casts and & | ^ << >>, or use the pallas or triton backend")


def _binary_table(dtype: str) -> dict[str, str]:
    return FLOAT_OPS if dtype in ("f32", "bf16", "f16") else BOOL_OPS if dtype == "bool" else INT_OPS


def _check(scan: Op) -> None:
    for o in scan.attrs["combine"].ops:
        k = o.kind
        if k in ("const", "where", "cast") or k in ACTIVATION or k in ("neg", "not", "div"):
            continue
        if len(o.operands) == 2 and k in _binary_table(o.operands[0].dtype):
            continue
        raise _refuse(o, scan, "it has no NKI instruction on lane slices here")


def combine_scan(w: Writer, op: Op) -> None:
    _check(op)
    region = op.attrs["combine"]
    rev, xs, rs = op.attrs["reverse"], op.operands, op.results
    m = len(xs)
    xc = w.core(xs[0])
    pos = xc.pos_of(op.attrs["axis"])
    if pos is None or xc.sizes[pos] == 1:  # one lane: every value is its own scan
        for r, x in zip(rs, xs):
            w.alias(r, x, w.orient[r.id], w.orient.get(x.id, "N"))
        return
    o = orient_with(pos, on_partitions=False)
    srcs = [w.get(x, o) for x in xs]
    ress = [w.new_result(r) for r in rs]
    phys = srcs[0].phys
    assert all(t.phys == phys for t in srcs + ress), [t.phys for t in srcs + ress]
    n = phys[1]
    tmps = []
    for res in ress:
        t = Tile(w.fresh(f"{res.name}_scan"), phys, res.dtype, res.dims)
        w.alloc(t.name, phys, t.dtype, dims=t.dims)
        tmps.append(t)
    # one scratch tile per region value, and the constants, made once before the steps
    scratch: dict[int, str] = {}
    for ro in region.ops:
        v = ro.result
        if ro.kind == "const":
            scratch[v.id] = w.splat(repr(ro.attrs["value"]), phys, v.dtype).name
        else:
            scratch[v.id] = w.fresh(f"comb{v.id}")
            w.alloc(scratch[v.id], phys, v.dtype)
            if ro.kind == "div":
                w.alloc(scratch[v.id] + "_r", phys, "f32")
    steps = log_steps(n)
    cur = [t.name for t in srcs]
    for s, k in enumerate(steps):
        dst = [(ress if (len(steps) - 1 - s) % 2 == 0 else tmps)[i].name for i in range(m)]
        keep = f"{n - k}:{n}" if rev else f"0:{k}"  # lanes with no partner k away
        out = f"0:{n - k}" if rev else f"{k}:{n}"
        partner = f"{k}:{n}" if rev else f"0:{n - k}"
        for i in range(m):
            w.line(f"nisa.tensor_copy(dst={dst[i]}[:, {keep}], src={cur[i]}[:, {keep}])",
                   comment=f"combine scan step {k}" + (" (reverse)" if rev else "") if i == 0 else "")
        env = {a.id: f"{cur[i % m]}[:, {partner if i < m else out}]" for i, a in enumerate(region.args)}
        for ro in region.ops:
            _emit(w, ro, env, scratch, n - k)
        for i, y in enumerate(region.yields):
            w.line(f"nisa.tensor_copy(dst={dst[i]}[:, {out}], src={env[y.id]})")
        cur = dst
    for r, res in zip(rs, ress):
        w.define(r, res)


def _emit(w: Writer, op: Op, env: dict[int, str], scratch: dict[int, str], width: int) -> None:
    """One region op on slices of `width` lanes; its value's slice goes into `env`."""
    v: Value = op.result
    if op.kind == "const":
        env[v.id] = f"{scratch[v.id]}[:, 0:{width}]"
        return
    d = f"{scratch[v.id]}[:, 0:{width}]"
    a = [env[x.id] for x in op.operands]
    k = op.kind
    if k == "where":
        w.line(f"nisa.tensor_copy(dst={d}, src={a[2]})")
        w.line(f"nisa.tensor_copy_predicated(dst={d}, src={a[1]}, predicate={a[0]})")
    elif k == "cast":
        if v.dtype == "bool":
            w.line(f"nisa.tensor_scalar(dst={d}, data={a[0]}, op0=nl.not_equal, operand0=0.0)")
        else:
            w.line(f"nisa.tensor_copy(dst={d}, src={a[0]})")
    elif k == "div":
        r = f"{scratch[v.id]}_r[:, 0:{width}]"
        w.line(f"nisa.reciprocal(dst={r}, data={a[1]})")
        w.line(f"nisa.tensor_tensor(dst={d}, data1={a[0]}, data2={r}, op=nl.multiply)")
    elif k in ACTIVATION:
        w.line(f"nisa.activation(dst={d}, op={ACTIVATION[k]}, data={a[0]})")
    elif k == "neg" and v.dtype == "f32":
        w.line(f"nisa.tensor_scalar(dst={d}, data={a[0]}, op0=nl.multiply, operand0=-1.0)")
    elif k == "neg":  # 0 - x on the integer ALU: wraps as torch does
        w.line(f"nisa.memset(dst={d}, value=0)")
        w.line(f"nisa.tensor_tensor(dst={d}, data1={d}, data2={a[0]}, op=nl.subtract)")
    elif k == "not" and v.dtype == "bool":
        w.line(f"nisa.tensor_scalar(dst={d}, data={a[0]}, op0=nl.equal, operand0=0.0)")
    elif k == "not":  # ~x is -1 - x
        w.line(f"nisa.memset(dst={d}, value=-1)")
        w.line(f"nisa.tensor_tensor(dst={d}, data1={d}, data2={a[0]}, op=nl.subtract)")
    else:
        fn = _binary_table(op.operands[0].dtype)[k]
        w.line(f"nisa.tensor_tensor(dst={d}, data1={a[0]}, data2={a[1]}, op={fn})")
    env[v.id] = d
