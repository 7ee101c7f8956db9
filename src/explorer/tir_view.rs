//! A node's loop nest for the explorer: a TIR compute definition of the op, a
//! default schedule (pad stage inlined, innermost axis split by 8 and
//! vectorized, reduction loops inside the spatial ones, outermost non-trivial
//! axis parallel), lowered after every primitive of the schedule record.
//!
//! Ops covered: 2-D Conv, 2-D MaxPool/AveragePool, GlobalPool, BatchNorm, the
//! unary and binary elementwise ops with TIR intrinsics, Transpose, MatMul and
//! Gemm. Other ops say so.

use crate::graph::{BinaryOp, Conv, Op, Pool, PoolKind, UnaryOp, ValueType};
use crate::layout::Layout;
use crate::tir::compute::{ComputeGraph, ReduceOp, Tensor};
use crate::tir::expr::{Expr, Intrinsic};
use crate::tir::layout::{BufferLayout, PhysDim};
use crate::tir::lower::{lower, LowerOptions};
use crate::tir::schedule::Schedule;
use crate::tir::TirError;
use serde::Serialize;
use std::collections::HashMap;

/// One line of the difference between two loop nests.
#[derive(Clone, Debug, Serialize)]
pub struct DiffLine {
    /// '+' added, '-' removed, ' ' unchanged.
    pub tag: char,
    pub text: String,
}

/// The schedule after one primitive and its loop nest.
#[derive(Clone, Debug, Serialize)]
pub struct Step {
    pub primitive: String,
    pub loop_nest: String,
    /// What this step changed in the loop nest against the step before.
    pub diff: Vec<DiffLine>,
}

#[derive(Clone, Debug, Serialize)]
pub struct TirView {
    /// Buffer layouts the loop nest is flattened under (tensor: layout).
    pub layouts: Vec<String>,
    pub steps: Vec<Step>,
}

fn e(v: usize) -> i64 {
    v as i64
}

fn ex(v: usize) -> Expr {
    Expr::Int(v as i64)
}

/// The storage of a tensor for flattening; `None` when the layout has more
/// than one block on an axis (which `BufferLayout` cannot say).
fn buffer_layout(l: &Layout) -> Option<BufferLayout> {
    let dims = l
        .order()
        .iter()
        .map(|d| match (l.factors(d.axis), d.level) {
            ([], 0) => Some(PhysDim::Axis(d.axis)),
            ([f], 0) => Some(PhysDim::Outer(d.axis, *f as i64)),
            ([f], 1) => Some(PhysDim::Inner(d.axis, *f as i64)),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    Some(BufferLayout { dims })
}

/// Placeholder names, by input position.
const INPUT_NAMES: [&str; 5] = ["X", "W", "B", "M", "V"];

/// Builds the compute of `op` on inputs of `types`; returns the graph, the
/// output tensor, and a pad stage to inline if one was made.
fn build(op: &Op, types: &[ValueType]) -> Result<(ComputeGraph, Tensor, Option<Tensor>), String> {
    let mut g = ComputeGraph::new();
    let t = |e: TirError| e.to_string();
    let mut ph = Vec::new();
    for (i, ty) in types.iter().enumerate() {
        let name = match op {
            Op::BatchNorm { .. } => ["X", "S", "B", "M", "V"][i],
            _ => INPUT_NAMES.get(i).copied().unwrap_or("I"),
        };
        let shape: Vec<i64> = ty.shape.iter().map(|&d| e(d)).collect();
        ph.push(g.placeholder(name, &shape).map_err(t)?);
    }
    let shape_of = |i: usize| types[i].shape.clone();
    let no = |why: &str| {
        Err(format!(
            "{} has no TIR lowering yet ({why})",
            op.kind_name()
        ))
    };
    match op {
        Op::Conv(c) => conv(&mut g, c, &ph, &shape_of(0), &shape_of(1)).map_err(t),
        Op::Pool(p) if types[0].shape.len() == 4 => {
            let refs: Vec<&ValueType> = types.iter().collect();
            let out = crate::graph::infer_outputs(op, &refs)?;
            let hw = [out[0].shape[2], out[0].shape[3]];
            pool(&mut g, p, ph[0], &shape_of(0), hw).map_err(t)
        }
        Op::GlobalPool(kind) if types[0].shape.len() == 4 => {
            let s = shape_of(0);
            let (h, w) = (s[2], s[3]);
            let x = ph[0];
            let rop = if *kind == PoolKind::Max {
                ReduceOp::Max
            } else {
                ReduceOp::Sum
            };
            let out = [e(s[0]), e(s[1]), 1, 1];
            let r = g
                .reduce("R", &out, &[e(h), e(w)], rop, |i, r| {
                    x.at(&[i[0].clone(), i[1].clone(), r[0].clone(), r[1].clone()])
                })
                .map_err(t)?;
            let y = if *kind == PoolKind::Avg {
                g.compute("Y", &out, |i| r.at(i) / Expr::Float((h * w) as f64))
                    .map_err(t)?
            } else {
                r
            };
            Ok((g, y, None))
        }
        Op::BatchNorm { epsilon } if types[0].shape.len() >= 2 => {
            let s: Vec<i64> = shape_of(0).iter().map(|&d| e(d)).collect();
            let (x, sc, b, m, v) = (ph[0], ph[1], ph[2], ph[3], ph[4]);
            let eps = *epsilon as f64;
            let y = g
                .compute("Y", &s, |i| {
                    let c = [i[1].clone()];
                    (x.at(i) - m.at(&c)) * sc.at(&c)
                        / Expr::call(Intrinsic::Sqrt, vec![v.at(&c) + Expr::Float(eps)])
                        + b.at(&c)
                })
                .map_err(t)?;
            Ok((g, y, None))
        }
        Op::Unary(u) => {
            let Some(f) = unary(*u) else {
                return no("no intrinsic for it");
            };
            let s: Vec<i64> = shape_of(0).iter().map(|&d| e(d)).collect();
            let x = ph[0];
            let y = g.compute("Y", &s, |i| f(x.at(i))).map_err(t)?;
            Ok((g, y, None))
        }
        Op::Binary(b) => {
            let Some(f) = binary(*b) else {
                return no("comparisons and Pow are not lowered");
            };
            let out = crate::graph::broadcast_shapes(&shape_of(0), &shape_of(1))?;
            let (a, bb) = (ph[0], ph[1]);
            let (sa, sb) = (shape_of(0), shape_of(1));
            let s: Vec<i64> = out.iter().map(|&d| e(d)).collect();
            let y = g
                .compute("Y", &s, |i| {
                    f(
                        a.at(&broadcast_index(i, &sa)),
                        bb.at(&broadcast_index(i, &sb)),
                    )
                })
                .map_err(t)?;
            Ok((g, y, None))
        }
        Op::Transpose { perm } => {
            let s: Vec<i64> = perm.iter().map(|&a| e(types[0].shape[a])).collect();
            let x = ph[0];
            let y = g
                .compute("Y", &s, |i| {
                    // Output axis k is input axis perm[k].
                    let mut idx = vec![Expr::Int(0); perm.len()];
                    for (k, &a) in perm.iter().enumerate() {
                        idx[a] = i[k].clone();
                    }
                    x.at(&idx)
                })
                .map_err(t)?;
            Ok((g, y, None))
        }
        Op::MatMul if types[0].shape.len() >= 2 && types[1].shape.len() >= 2 => {
            let (sa, sb) = (shape_of(0), shape_of(1));
            let (ra, rb) = (sa.len(), sb.len());
            let batch = crate::graph::broadcast_shapes(&sa[..ra - 2], &sb[..rb - 2])?;
            let mut out: Vec<i64> = batch.iter().map(|&d| e(d)).collect();
            out.extend([e(sa[ra - 2]), e(sb[rb - 1])]);
            let (a, b) = (ph[0], ph[1]);
            let nb = batch.len();
            let y = g
                .reduce("Y", &out, &[e(sa[ra - 1])], ReduceOp::Sum, |i, r| {
                    let mut ia = broadcast_index(&i[..nb], &sa[..ra - 2]);
                    ia.extend([i[nb].clone(), r[0].clone()]);
                    let mut ib = broadcast_index(&i[..nb], &sb[..rb - 2]);
                    ib.extend([r[0].clone(), i[nb + 1].clone()]);
                    a.at(&ia) * b.at(&ib)
                })
                .map_err(t)?;
            Ok((g, y, None))
        }
        Op::Gemm {
            alpha,
            beta,
            trans_a,
            trans_b,
        } => {
            let (sa, sb) = (shape_of(0), shape_of(1));
            let (m, k) = if *trans_a {
                (sa[1], sa[0])
            } else {
                (sa[0], sa[1])
            };
            let n = if *trans_b { sb[0] } else { sb[1] };
            let (a, b) = (ph[0], ph[1]);
            let (ta, tb) = (*trans_a, *trans_b);
            let ab = g
                .reduce("AB", &[e(m), e(n)], &[e(k)], ReduceOp::Sum, |i, r| {
                    let (i0, i1, rk) = (i[0].clone(), i[1].clone(), r[0].clone());
                    let av = if ta {
                        a.at(&[rk.clone(), i0])
                    } else {
                        a.at(&[i0, rk.clone()])
                    };
                    let bv = if tb { b.at(&[i1, rk]) } else { b.at(&[rk, i1]) };
                    av * bv
                })
                .map_err(t)?;
            let (al, be) = (*alpha as f64, *beta as f64);
            let c = ph.get(2).copied();
            let sc = types.get(2).map(|t| t.shape.clone()).unwrap_or_default();
            let y = g
                .compute("Y", &[e(m), e(n)], |i| {
                    let prod = ab.at(i) * al;
                    match c {
                        Some(c) => prod + c.at(&broadcast_index(i, &sc)) * be,
                        None => prod,
                    }
                })
                .map_err(t)?;
            Ok((g, y, None))
        }
        Op::Pool(_) | Op::GlobalPool(_) | Op::BatchNorm { .. } => no("only 2-D NCHW is lowered"),
        _ => no("no compute definition for this op"),
    }
}

/// The index into an operand of shape `s` that broadcasts to the output index `i`.
fn broadcast_index(i: &[Expr], s: &[usize]) -> Vec<Expr> {
    let off = i.len() - s.len();
    s.iter()
        .enumerate()
        .map(|(k, &d)| {
            if d == 1 {
                Expr::Int(0)
            } else {
                i[off + k].clone()
            }
        })
        .collect()
}

type Unary = Box<dyn Fn(Expr) -> Expr>;

fn unary(u: UnaryOp) -> Option<Unary> {
    let exp = |x: Expr| Expr::call(Intrinsic::Exp, vec![x]);
    Some(match u {
        UnaryOp::Relu => Box::new(|x: Expr| x.max(0.0)),
        UnaryOp::LeakyRelu { alpha } => {
            Box::new(move |x: Expr| Expr::select(x.clone().lt(0.0), x.clone() * alpha as f64, x))
        }
        UnaryOp::Clip { min, max } => Box::new(move |x: Expr| x.max(min as f64).min(max as f64)),
        UnaryOp::Sigmoid => Box::new(move |x: Expr| {
            Expr::Float(1.0) / (Expr::Float(1.0) + exp(Expr::Float(0.0) - x))
        }),
        UnaryOp::HardSigmoid { alpha, beta } => {
            Box::new(move |x: Expr| (x * alpha as f64 + beta as f64).min(1.0).max(0.0))
        }
        UnaryOp::HardSwish => {
            Box::new(|x: Expr| x.clone() * (x * (1.0 / 6.0) + 0.5).min(1.0).max(0.0))
        }
        UnaryOp::Tanh => Box::new(|x: Expr| Expr::call(Intrinsic::Tanh, vec![x])),
        UnaryOp::Exp => Box::new(exp),
        UnaryOp::Sqrt => Box::new(|x: Expr| Expr::call(Intrinsic::Sqrt, vec![x])),
        UnaryOp::Reciprocal => Box::new(|x: Expr| Expr::Float(1.0) / x),
        UnaryOp::Neg => Box::new(|x: Expr| Expr::Float(0.0) - x),
        UnaryOp::Abs => Box::new(|x: Expr| x.clone().max(Expr::Float(0.0) - x)),
        UnaryOp::Gelu { tanh_approx: true } => Box::new(|x: Expr| {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            let inner = (x.clone() + x.clone() * x.clone() * x.clone() * 0.044715) * c;
            x * 0.5 * (Expr::Float(1.0) + Expr::call(Intrinsic::Tanh, vec![inner]))
        }),
        UnaryOp::Gelu { tanh_approx: false } | UnaryOp::Erf | UnaryOp::Log => return None,
    })
}

fn binary(b: BinaryOp) -> Option<fn(Expr, Expr) -> Expr> {
    Some(match b {
        BinaryOp::Add => |a, b| a + b,
        BinaryOp::Sub => |a, b| a - b,
        BinaryOp::Mul => |a, b| a * b,
        BinaryOp::Div => |a, b| a / b,
        BinaryOp::Max => |a: Expr, b| a.max(b),
        BinaryOp::Min => |a: Expr, b| a.min(b),
        _ => return None,
    })
}

/// A zero-padded (or `fill`-padded) copy of a 4-D `x`, when the window pads.
fn pad_stage(
    g: &mut ComputeGraph,
    x: Tensor,
    s: &[usize],
    pads: &[usize],
    fill: f64,
) -> Result<Option<Tensor>, TirError> {
    if pads.iter().all(|&p| p == 0) {
        return Ok(None);
    }
    let (pt, pl, pb, pr) = (pads[0], pads[1], pads[2], pads[3]);
    let shape = [e(s[0]), e(s[1]), e(s[2] + pt + pb), e(s[3] + pl + pr)];
    let (h, w) = (s[2], s[3]);
    g.compute("Xpad", &shape, |i| {
        let inside = i[2]
            .clone()
            .ge(ex(pt))
            .and(i[2].clone().lt(ex(pt + h)))
            .and(i[3].clone().ge(ex(pl)))
            .and(i[3].clone().lt(ex(pl + w)));
        // Reads clamped into the input, so that no index leaves it even where
        // the select takes the fill (both branches are evaluated).
        let clamp = |v: Expr, n: usize| v.max(ex(0)).min(ex(n - 1));
        let read = x.at(&[
            i[0].clone(),
            i[1].clone(),
            clamp(i[2].clone() - ex(pt), h),
            clamp(i[3].clone() - ex(pl), w),
        ]);
        Expr::select(inside, read, fill)
    })
    .map(Some)
}

fn conv(
    g: &mut ComputeGraph,
    c: &Conv,
    ph: &[Tensor],
    xs: &[usize],
    ws: &[usize],
) -> Result<(ComputeGraph, Tensor, Option<Tensor>), TirError> {
    let w = &c.window;
    if xs.len() != 4 {
        return Err(TirError::Definition(
            "only 2-D NCHW convolutions are lowered".into(),
        ));
    }
    let pad = pad_stage(g, ph[0], xs, &w.pads, 0.0)?;
    let src = pad.unwrap_or(ph[0]);
    let oh =
        (xs[2] + w.pads[0] + w.pads[2] - w.dilations[0] * (w.kernel[0] - 1) - 1) / w.strides[0] + 1;
    let ow =
        (xs[3] + w.pads[1] + w.pads[3] - w.dilations[1] * (w.kernel[1] - 1) - 1) / w.strides[1] + 1;
    let out = [e(xs[0]), e(ws[0]), e(oh), e(ow)];
    let cin_per_group = ws[1];
    let oc_per_group = ws[0] / c.group.max(1);
    let weight = ph[1];
    let (sh, sw, dh, dw) = (w.strides[0], w.strides[1], w.dilations[0], w.dilations[1]);
    let name = if ph.len() > 2 { "conv" } else { "Y" };
    let acc = g.reduce(
        name,
        &out,
        &[e(cin_per_group), e(w.kernel[0]), e(w.kernel[1])],
        ReduceOp::Sum,
        |i, r| {
            // The input channel: the group's first channel plus the reduced one.
            let ic = if c.group == 1 {
                r[0].clone()
            } else {
                i[1].clone().floordiv(ex(oc_per_group)) * ex(cin_per_group) + r[0].clone()
            };
            src.at(&[
                i[0].clone(),
                ic,
                i[2].clone() * ex(sh) + r[1].clone() * ex(dh),
                i[3].clone() * ex(sw) + r[2].clone() * ex(dw),
            ]) * weight.at(&[i[1].clone(), r[0].clone(), r[1].clone(), r[2].clone()])
        },
    )?;
    let y = match ph.get(2) {
        Some(b) => g.compute("Y", &out, |i| acc.at(i) + b.at(&[i[1].clone()]))?,
        None => acc,
    };
    Ok((std::mem::take(g), y, pad))
}

fn pool(
    g: &mut ComputeGraph,
    p: &Pool,
    x: Tensor,
    xs: &[usize],
    out_hw: [usize; 2],
) -> Result<(ComputeGraph, Tensor, Option<Tensor>), TirError> {
    let w = &p.window;
    let is_max = p.kind == PoolKind::Max;
    let fill = if is_max { f64::NEG_INFINITY } else { 0.0 };
    let span = |a: usize| w.dilations[a] * (w.kernel[a] - 1) + 1;
    // In ceil mode the last window may run past the end padding: pad further
    // so that every read is inside the padded stage (those positions hold the
    // fill, and the divisor below counts input positions only).
    let mut pads = w.pads.clone();
    for a in 0..2 {
        let needed = (out_hw[a] - 1) * w.strides[a] + span(a);
        let have = xs[a + 2] + w.pads[a] + w.pads[a + 2];
        pads[a + 2] += needed.saturating_sub(have);
    }
    let pad = pad_stage(g, x, xs, &pads, fill)?;
    let src = pad.unwrap_or(x);
    let out = [e(xs[0]), e(xs[1]), e(out_hw[0]), e(out_hw[1])];
    let (sh, sw, dh, dw) = (w.strides[0], w.strides[1], w.dilations[0], w.dilations[1]);
    let rop = if is_max { ReduceOp::Max } else { ReduceOp::Sum };
    let name = if is_max { "Y" } else { "S" };
    let acc = g.reduce(
        name,
        &out,
        &[e(w.kernel[0]), e(w.kernel[1])],
        rop,
        |i, r| {
            src.at(&[
                i[0].clone(),
                i[1].clone(),
                i[2].clone() * ex(sh) + r[0].clone() * ex(dh),
                i[3].clone() * ex(sw) + r[1].clone() * ex(dw),
            ])
        },
    )?;
    if is_max {
        return Ok((std::mem::take(g), acc, pad));
    }
    // The divisor: the whole window, or only its positions inside the input.
    let (kh, kw) = (w.kernel[0], w.kernel[1]);
    let (pt, pl) = (w.pads[0], w.pads[1]);
    let (h, wd) = (xs[2], xs[3]);
    let include = p.count_include_pad;
    let y = g.compute("Y", &out, |i| {
        if include {
            return acc.at(i) / Expr::Float((kh * kw) as f64);
        }
        let count = |o: &Expr, s: usize, k: usize, pb: usize, n: usize| {
            let start = o.clone() * ex(s);
            (start.clone() + ex(k)).min(ex(pb + n)) - start.max(ex(pb))
        };
        acc.at(i) / (count(&i[2], sh, kh, pt, h) * count(&i[3], sw, kw, pl, wd))
    })?;
    Ok((std::mem::take(g), y, pad))
}

/// The default schedule, applied primitive by primitive.
fn default_schedule(
    g: &ComputeGraph,
    y: Tensor,
    pad: Option<Tensor>,
) -> Result<Schedule, TirError> {
    let mut s = Schedule::new(g, &[y])?;
    if let Some(p) = pad {
        s.compute_inline(&p)?;
    }
    let axes = s.axis(&y)?;
    let shape = &g.op(y.id).shape;
    if let (Some(last), Some(&extent)) = (axes.last(), shape.last()) {
        if extent >= 8 {
            let (_, inner) = s.split(&y, last, 8)?;
            if !s.reduce_axis(&y)?.is_empty() {
                // Reductions inside the spatial loops, the vector lane innermost.
                let mut order = s.leaves(&y)?;
                order.retain(|v| v.var != inner.var);
                order.push(inner.clone());
                s.reorder(&y, &order)?;
            }
            s.vectorize(&y, &inner)?;
        }
    }
    let outer = axes
        .iter()
        .zip(shape)
        .find(|(_, &d)| d > 1)
        .map(|(a, _)| a.clone());
    if let Some(a) = outer {
        if s.leaves(&y)?.iter().any(|l| l.var == a.var) {
            s.parallel(&y, &a)?;
        }
    }
    Ok(s)
}

/// Line diff (longest common subsequence) of two texts.
fn diff(before: &str, after: &str) -> Vec<DiffLine> {
    let a: Vec<&str> = before.lines().collect();
    let b: Vec<&str> = after.lines().collect();
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    let line = |tag, text: &str| DiffLine {
        tag,
        text: text.to_string(),
    };
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out.push(line(' ', a[i]));
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            out.push(line('-', a[i]));
            i += 1;
        } else {
            out.push(line('+', b[j]));
            j += 1;
        }
    }
    out
}

/// Lowers `op` (logical) on inputs of `types`. `layouts` gives the storage of
/// the inputs and the output for a laid-out op.
pub fn lower_node(
    op: &Op,
    types: &[ValueType],
    layouts: Option<(&[Layout], &Layout)>,
) -> Result<TirView, String> {
    let (g, y, pad) = build(op, types)?;
    let s = default_schedule(&g, y, pad).map_err(|e| e.to_string())?;
    let mut opts = LowerOptions::default();
    let mut shown = Vec::new();
    if let Some((ins, out)) = layouts {
        let named = g
            .ops
            .iter()
            .filter(|o| o.compute().is_none())
            .map(|o| o.name.clone())
            .zip(ins)
            .chain(std::iter::once((g.op(y.id).name.clone(), out)));
        let mut map = HashMap::new();
        for (name, l) in named {
            if l.is_identity() {
                continue;
            }
            match buffer_layout(l) {
                Some(bl) => {
                    map.insert(name.clone(), bl);
                    shown.push(format!("{name}: {l}"));
                }
                None => shown.push(format!("{name}: {l} (shown row-major: nested blocks)")),
            }
        }
        opts.layouts = map;
    }
    let mut steps: Vec<Step> = Vec::new();
    for entry in &s.record {
        let at = Schedule {
            state: entry.state.clone(),
            record: vec![],
        };
        let text = lower(&at, &opts)
            .map_err(|e| format!("lowering after {}: {e}", entry.primitive))?
            .to_text();
        let before = steps.last().map_or("", |st| st.loop_nest.as_str());
        steps.push(Step {
            primitive: entry.primitive.clone(),
            diff: diff(before, &text),
            loop_nest: text,
        });
    }
    Ok(TirView {
        layouts: shown,
        steps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, Window};
    use std::collections::HashMap;

    #[test]
    fn diff_marks_added_and_removed_lines() {
        let d = diff("a\nb\nc", "a\nx\nc");
        let tags: String = d.iter().map(|l| l.tag).collect();
        assert_eq!(tags, " -+ ");
        assert_eq!(d[1].text, "b");
        assert_eq!(d[2].text, "x");
    }

    #[test]
    fn conv_lowering_records_every_primitive() {
        let conv = Op::Conv(Conv {
            window: Window {
                kernel: vec![3, 3],
                strides: vec![1, 1],
                dilations: vec![1, 1],
                pads: vec![1, 1, 1, 1],
            },
            group: 1,
        });
        let types = [
            ValueType::new(DType::F32, vec![1, 4, 8, 8]),
            ValueType::new(DType::F32, vec![8, 4, 3, 3]),
        ];
        let v = lower_node(&conv, &types, None).unwrap();
        let prims: Vec<&str> = v.steps.iter().map(|s| s.primitive.as_str()).collect();
        assert_eq!(prims.len(), 6, "{prims:?}");
        assert!(prims[0].starts_with("create_schedule"));
        assert!(prims[1].starts_with("compute_inline"));
        assert!(prims[2].starts_with("split"));
        assert!(prims[3].starts_with("reorder"));
        assert!(prims[4].starts_with("vectorize"));
        assert!(prims[5].starts_with("parallel"));
        let last = &v.steps[5].loop_nest;
        assert!(
            last.contains("vectorized") || last.contains("vector"),
            "{last}"
        );
        assert!(last.contains("parallel"), "{last}");
    }

    /// A deterministic tensor with values in [-1, 1).
    fn tensor(shape: &[usize], seed: u64) -> crate::graph::Tensor {
        let n: usize = shape.iter().product();
        let vals = (0..n)
            .map(|i| (((i as u64 * 7919 + seed * 104729) % 2000) as f32) / 1000.0 - 1.0)
            .collect();
        crate::graph::Tensor::from_f32(shape.to_vec(), vals)
    }

    /// The compute definition, evaluated directly, against the reference
    /// executor (tolerance 1e-5 * max(1, |expected|)).
    fn agrees_with_reference(op: Op, shapes: &[&[usize]]) {
        let inputs: Vec<crate::graph::Tensor> = shapes
            .iter()
            .enumerate()
            .map(|(k, s)| tensor(s, k as u64 + 1))
            .collect();
        agrees_on(op, inputs);
    }

    fn agrees_on(op: Op, inputs: Vec<crate::graph::Tensor>) {
        let types: Vec<ValueType> = inputs
            .iter()
            .map(|t| ValueType::new(DType::F32, t.shape.clone()))
            .collect();
        let refs: Vec<&ValueType> = types.iter().collect();
        let out_types = crate::graph::infer_outputs(&op, &refs).unwrap();
        let ins: Vec<&crate::graph::Tensor> = inputs.iter().collect();
        let expected = crate::reference::eval_op(&op, &ins, &out_types).unwrap()[0]
            .data
            .to_f64();
        let (g, y, _) = build(&op, &types).unwrap();
        let feed: HashMap<String, Vec<f64>> = g
            .ops
            .iter()
            .filter(|o| o.compute().is_none())
            .zip(&inputs)
            .map(|(o, t)| (o.name.clone(), t.data.to_f64()))
            .collect();
        let got = &g.evaluate(&feed).unwrap()[y.id.0];
        assert_eq!(g.op(y.id).shape.len(), out_types[0].shape.len(), "{op:?}");
        assert_eq!(got.len(), expected.len(), "{op:?}");
        for (a, b) in got.iter().zip(&expected) {
            assert!(
                (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                "{op:?}: {a} vs {b}"
            );
        }
    }

    fn window(k: usize, s: usize, d: usize, p: [usize; 4]) -> Window {
        Window {
            kernel: vec![k, k],
            strides: vec![s, s],
            dilations: vec![d, d],
            pads: p.to_vec(),
        }
    }

    #[test]
    fn compute_definitions_match_the_reference_executor() {
        use crate::graph::{Pool, PoolKind};
        let conv = |w, group| Op::Conv(Conv { window: w, group });
        agrees_with_reference(
            conv(window(3, 2, 1, [1, 0, 1, 2]), 2),
            &[&[1, 4, 7, 6], &[6, 2, 3, 3], &[6]],
        );
        agrees_with_reference(
            conv(window(2, 1, 2, [0; 4]), 1),
            &[&[2, 3, 5, 5], &[4, 3, 2, 2]],
        );
        for (kind, include, ceil) in [
            (PoolKind::Max, false, false),
            (PoolKind::Avg, false, true),
            (PoolKind::Avg, true, false),
        ] {
            let p = Op::Pool(Pool {
                kind,
                window: window(3, 2, 1, [1, 1, 1, 1]),
                ceil_mode: ceil,
                count_include_pad: include,
            });
            agrees_with_reference(p, &[&[1, 2, 6, 7]]);
        }
        agrees_with_reference(Op::GlobalPool(PoolKind::Avg), &[&[1, 3, 4, 5]]);
        agrees_with_reference(Op::GlobalPool(PoolKind::Max), &[&[1, 3, 4, 5]]);
        // BatchNorm, with positive variances.
        let var = crate::graph::Tensor::from_f32(vec![3], vec![0.5, 1.0, 2.0]);
        let mut bn: Vec<_> = [&[1usize, 3, 2, 2][..], &[3], &[3], &[3]]
            .iter()
            .enumerate()
            .map(|(k, s)| tensor(s, k as u64 + 1))
            .collect();
        bn.push(var);
        agrees_on(Op::BatchNorm { epsilon: 1e-5 }, bn);
        for u in [
            UnaryOp::Relu,
            UnaryOp::LeakyRelu { alpha: 0.1 },
            UnaryOp::Clip {
                min: -0.5,
                max: 0.5,
            },
            UnaryOp::Sigmoid,
            UnaryOp::HardSigmoid {
                alpha: 0.2,
                beta: 0.5,
            },
            UnaryOp::HardSwish,
            UnaryOp::Tanh,
            UnaryOp::Exp,
            UnaryOp::Neg,
            UnaryOp::Abs,
            UnaryOp::Gelu { tanh_approx: true },
        ] {
            agrees_with_reference(Op::Unary(u), &[&[2, 3, 4]]);
        }
        for b in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Max] {
            agrees_with_reference(Op::Binary(b), &[&[2, 3, 4], &[3, 1]]);
        }
        agrees_with_reference(Op::MatMul, &[&[2, 1, 3, 4], &[3, 4, 5]]);
        agrees_with_reference(
            Op::Gemm {
                alpha: 0.5,
                beta: 2.0,
                trans_a: true,
                trans_b: true,
            },
            &[&[4, 3], &[5, 4], &[5]],
        );
        agrees_with_reference(
            Op::Transpose {
                perm: vec![2, 0, 1],
            },
            &[&[2, 3, 4]],
        );
    }

    #[test]
    fn ops_without_lowering_say_so() {
        let e = lower_node(&Op::Identity, &[], None).unwrap_err();
        assert!(e.contains("Identity has no TIR lowering yet"), "{e}");
    }
}
