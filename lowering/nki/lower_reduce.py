"""Reductions, ragged-edge masks and selects.

- `reduce`: `nisa.tensor_reduce` over the free axis only; when the IR reduces the dim that lies on
  partitions, the operand is transposed first (the layout puts reduced dims on the free axis
  wherever it can).
- `pad_fill`: `nisa.affine_select` keeps lanes whose global index `t0 + lane` is below the extent
  (`extent - 1 - t0 - lane >= 0`): lane runs along the partitions (channel_multiplier=-1) or the
  free axis (pattern [[-1, F]]). Emitted only for tiles that are ragged under the config. A max's
  -inf identity is the finite -3.4028235e38 (names.FP32_MAX), the value AWS masks with; it is
  still the identity for any row with one real lane, and comparisons against -inf count it as
  -inf (lower_elementwise.inf_compare), so `m == -inf` guards see fully masked rows.
- `where`: with an affine predicate (e.g. the causal mask `q_idx + c >= k_idx`) and a scalar
  branch it is one `affine_select`, whose scalar `on_false_value` is made finite as above (AWS's
  masks are finite: a user's `float("-inf")` mask becomes -3.4028235e38); otherwise the result
  starts as the false branch and `tensor_copy_predicated` copies the true branch, always a tile
  (AWS passes `src` as a tensor), where the uint8 predicate is set. Those branch tiles are memsets
  of the user's own value, -inf included: AWS memsets -inf under a predicated copy the same way
  (nki-library core/attention/attention_tkg.py), and it is a value the kernel may store (an lse of
  -inf), not a mask.
"""
from __future__ import annotations

from kernel_dsl.ir import Op, TileVar

from .affine import FLIP, Pred, Scalar, Splat
from .layout import orient_with
from .names import finite, lit
from .writer import CMP, Writer, at

I32_IN_F32_MAX = float(2**31 - 128)  # the largest float32 below 2**31

# max/min propagate NaN as torch's do, with no fix-up: the SDK documents nl.maximum/nl.max as
# "similar to numpy.maximum/numpy.max" (NaN-propagating), AWS's simulator computes them with
# NumPy, and nothing in the SDK says VectorE drops NaN. Unverified on hardware: if it does, this
# (and ALU's max/min) is the place for an explicit `x != x` check.
REDUCE = {"sum": "nl.add", "max": "nl.maximum", "min": "nl.minimum", "prod": "nl.multiply"}


def reduce(w: Writer, op: Op) -> None:
    r, x = op.result, op.operands[0]
    xc = w.core(x)
    pos = xc.pos_of(op.attrs["axis"])
    ro = w.orient[r.id]
    if pos is None or xc.sizes[pos] == 1:  # reducing a dim of size 1 changes no value
        so = w.orient.get(x.id, "N")
        want = w.core(r).phys(ro)
        so = so if xc.phys(so) == want else ("T" if so == "N" else "N")
        w.alias(r, x, ro, so)
        return
    src = w.get(x, orient_with(pos, on_partitions=False))
    res = w.new_result(r)
    assert res.phys == (src.phys[0], 1), (res.phys, src.phys)
    w.line(f"nisa.tensor_reduce(dst={res.name}, op={REDUCE[op.attrs['op']]}, data={src.name}, "
           "axis=1, keepdims=True)")
    w.define(r, res)


def pad_fill(w: Writer, op: Op) -> None:
    r, x = op.result, op.operands[0]
    t: TileVar = op.attrs["tile"]
    ro = w.orient[r.id]
    if not w.ragged(t):
        w.alias(r, x, ro, ro)
        return
    xc = w.core(x)
    pos = xc.pos_of(op.attrs["axis"])
    assert pos is not None, "a ragged tile dim is never a dropped unit dim"
    fill = float(op.attrs["fill"])
    if r.dtype == "i32":  # the engines carry int32 in f32: 2**31 - 1 would round to 2**31 and wrap
        fill = min(fill, I32_IN_F32_MAX)  # (to -2**31), so a min's pad would win every row
    key = (f"%{x.id}", f"pad {ro} {pos} {fill!r}")
    if key not in w.converted:  # written next to `x`: the IR repeats it before each consumer
        with at(w, x):
            src = w.get(x, ro)
            res = w.new_result(r)
            f = res.phys[1]
            on_part = pos == xc.part_pos(ro)
            pattern, cm = (f"[[0, {f}]]", -1) if on_part else (f"[[-1, {f}]]", 0)
            value = finite(lit(fill))
            end = w.end(t)  # the last in-range index: a literal unless the end is a value
            last = str(int(end) - 1) if end.isdigit() else f"{end} - 1"
            w.line(f"nisa.affine_select(dst={res.name}, pattern={pattern}, channel_multiplier={cm}, "
                   f"on_true_tile={src.name}, on_false_value={value}, cmp_op=nl.greater_equal, "
                   f"offset={last} - {w.begin(t)})",
                   comment=f"lanes of {t!r} past {w.end(t)} -> {value}")
        w.converted[key] = res
    w.tiles[(r.id, ro)] = w.converted[key]
    w.slots[r.id] = w.em.slot()


def where(w: Writer, op: Op) -> None:
    r = op.result
    c_v, a_v, b_v = op.operands
    rc, ro = w.core(r), w.orient[r.id]
    pred = w.virt.get(c_v.id)
    a_s, b_s = (isinstance(w.virt.get(v.id), (Scalar, Splat)) for v in (a_v, b_v))
    if isinstance(pred, Pred) and (a_s or b_s):
        keep, other, cmp = (a_v, b_v, pred.cmp) if b_s else (b_v, a_v, FLIP[pred.cmp])
        if a_s and b_s:
            on_true = w.fill(w.virt[a_v.id].expr, rc.phys(ro), r.dtype)  # type: ignore[union-attr]
        else:
            with at(w, keep):
                on_true = w.full(keep, rc, ro)
        fv = w.virt[other.id]
        assert isinstance(fv, (Scalar, Splat))
        false_expr = fv.expr if fv.dtype in ("f32", "bf16", "f16") else f"float({fv.expr})"
        false_expr = finite(false_expr)
        pos = rc.part_pos(ro)
        d = pred.diff
        res = w.new_result(r)
        w.line(f"nisa.affine_select(dst={res.name}, pattern=[[{d.c(-1 - pos)}, {res.phys[1]}]], "
               f"channel_multiplier={d.c(-2 + pos)}, on_true_tile={on_true.name}, "
               f"on_false_value={false_expr}, cmp_op={CMP[cmp]}, offset={d.const})")
        w.define(r, res)
        return
    res = w.new_result(r)
    if b_s:
        value = w.virt[b_v.id].expr  # type: ignore[union-attr]
        value = value if r.dtype in ("f32", "bf16", "f16") else f"int({value})"
        w.line(f"nisa.memset(dst={res.name}, value={value})")
    else:
        with at(w, b_v):
            bt = w.cast(w.full(b_v, rc, ro), r.dtype)
        w.line(f"nisa.tensor_copy(dst={res.name}, src={bt.name})")
    with at(w, c_v):
        mask = w.full(c_v, rc, ro)
    if a_s:  # AWS's src is a tensor: a tile filled with the value
        src = w.fill(w.virt[a_v.id].expr, rc.phys(ro), r.dtype)  # type: ignore[union-attr]
    else:
        with at(w, a_v):
            src = w.cast(w.full(a_v, rc, ro), r.dtype)
    w.line(f"nisa.tensor_copy_predicated(dst={res.name}, src={src.name}, predicate={mask.name})")
    w.define(r, res)


RULES = {"reduce": reduce, "pad_fill": pad_fill, "where": where}
