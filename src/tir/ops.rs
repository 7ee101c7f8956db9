//! Compute definitions of graph operators and their default schedules: the TIR form
//! of an op, which the runtime lowers and compiles (`codegen`) and the explorer shows
//! primitive by primitive.
//!
//! Ops covered: the unary and binary elementwise ops (not comparisons), Where-free
//! movement (Transpose, Reshape, Concat, Slice, constant Pad, Expand, Tile), Softmax and
//! LogSoftmax, LayerNormalization, ReduceSum/Mean/Max, MatMul and Gemm, 2-D Conv,
//! 2-D pooling, GlobalPool and BatchNorm. Other ops give [`TirError::Unsupported`].
//!
//! Rank-0 tensors are treated as rank 1 of extent 1 (the same flat buffer).

use super::compute::{ComputeGraph, ReduceOp, Tensor};
use super::expr::{Expr, Intrinsic};
use super::layout::{BufferLayout, PhysDim};
use super::lower::{lower, LowerOptions, LoweredFunc};
use super::schedule::Schedule;
use super::TirError;
use crate::graph::{Conv, Op, PadMode, Pool, PoolKind, ReduceKind, ValueType};
use crate::layout::Layout;
use crate::ops::{
    BatchNorm, Concat, Expand, Gemm, GlobalPool, LayerNorm, LogSoftmax, Pad, Reduce, Reshape,
    Slice, Softmax, Tile, Transpose,
};

fn e(v: usize) -> i64 {
    v as i64
}

fn ex(v: usize) -> Expr {
    Expr::Int(v as i64)
}

/// An op as a compute graph, with what its default schedule needs to know.
pub struct OpCompute {
    pub graph: ComputeGraph,
    /// The placeholder of every operand, in the op's input order.
    pub inputs: Vec<Tensor>,
    pub output: Tensor,
    /// Stages inlined into their consumer (padding copies).
    inline: Vec<Tensor>,
    /// Stages computed once per row of the output, attached at the given output
    /// axis (the row statistics of softmax and layer normalization).
    per_row: Vec<(Tensor, usize)>,
    /// Reductions computed where the output needs them, inside its innermost
    /// non-vector loop (so an epilogue works on values still in registers/cache).
    per_element: Vec<Tensor>,
}

/// An op lowered for storage in given layouts.
pub struct LoweredOp {
    pub func: LoweredFunc,
    /// For every placeholder (the operands, for one op), its position in
    /// `func.params` (`None`: never read).
    pub inputs: Vec<Option<usize>>,
    /// The position of the output in `func.params`.
    pub output: usize,
}

/// The storage of a tensor for flattening; `None` when the layout has more than one
/// block on an axis (which `BufferLayout` cannot say).
pub fn buffer_layout(l: &Layout) -> Option<BufferLayout> {
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
fn input_name(op: &Op, i: usize) -> String {
    let names: &[&str] = match op {
        Op::BatchNorm(_) => &["X", "S", "B", "M", "V"],
        Op::LayerNorm(_) => &["X", "S", "B"],
        _ => &["X", "W", "B"],
    };
    names
        .get(i)
        .map_or_else(|| format!("I{i}"), |n| n.to_string())
}

/// A shape as TIR extents; rank 0 becomes `[1]`.
fn extents(shape: &[usize]) -> Vec<i64> {
    if shape.is_empty() {
        vec![1]
    } else {
        shape.iter().map(|&d| e(d)).collect()
    }
}

/// Builds the compute of `op` on operands of `types`.
pub fn op_compute(op: &Op, types: &[ValueType]) -> Result<OpCompute, TirError> {
    chain_compute(&[Link {
        op,
        types,
        prev: None,
    }])
}

/// One op of a fused chain: the op, its operand types, and (after the first op)
/// which operand the previous op's output is.
pub struct Link<'a> {
    pub op: &'a Op,
    pub types: &'a [ValueType],
    pub prev: Option<usize>,
}

/// Builds one compute graph for a chain of ops: each op after the first is
/// elementwise (unary or binary) on the previous op's output, of the same shape.
/// The placeholders (`OpCompute::inputs`) are the first op's operands, then every
/// later op's operands but the chained one. The default schedule inlines the
/// elementwise stages into the last one, so the chain is one pass over memory.
pub fn chain_compute(links: &[Link]) -> Result<OpCompute, TirError> {
    let mut g = ComputeGraph::new();
    let mut inputs = vec![];
    let mut inline = vec![];
    let mut per_row = vec![];
    let mut per_element = vec![];
    let mut prev: Option<Tensor> = None;
    for (k, link) in links.iter().enumerate() {
        if let Some(p) = prev {
            let elementwise = matches!(link.op, Op::Unary(_) | Op::Binary(_));
            if !elementwise || link.prev.is_none() {
                return Err(TirError::Unsupported(format!(
                    "{} cannot be fused after another op (only elementwise ops can)",
                    link.op.kind_name()
                )));
            }
            // The earlier stage feeds this one element for element.
            if reduces(&g, p) {
                per_element.push(p);
            } else {
                inline.push(p);
            }
        }
        let sfx = if k == 0 { String::new() } else { k.to_string() };
        let mut ph = Vec::new();
        for (i, ty) in link.types.iter().enumerate() {
            match prev.filter(|_| link.prev == Some(i)) {
                Some(p) => {
                    let chained = &g.op(p.id).shape;
                    if *chained != extents(&ty.shape) {
                        return Err(TirError::Unsupported(format!(
                            "{} reads the chained value as {:?}, it is {chained:?}",
                            link.op.kind_name(),
                            ty.shape
                        )));
                    }
                    ph.push(p);
                }
                None => {
                    let t = g.placeholder(
                        &format!("{}{sfx}", input_name(link.op, i)),
                        &extents(&ty.shape),
                    )?;
                    inputs.push(t);
                    ph.push(t);
                }
            }
        }
        let first_new = g.ops.len();
        let d = define(&mut g, link.op, &ph, link.types, &sfx)?;
        if let Some(p) = prev {
            if g.op(d.output.id).shape != g.op(p.id).shape {
                return Err(TirError::Unsupported(format!(
                    "{} broadcasts the chained value to a larger shape",
                    link.op.kind_name()
                )));
            }
        }
        // Reductions the op's output reads element for element (a matrix product
        // before its scaling, a convolution before its bias).
        for i in first_new..g.ops.len() {
            let t = g.tensor(super::expr::TensorId(i));
            if reduces(&g, t) && t.id != d.output.id && !d.per_row.iter().any(|(r, _)| r.id == t.id)
            {
                per_element.push(t);
            }
        }
        inline.extend(d.inline);
        per_row.extend(d.per_row);
        prev = Some(d.output);
    }
    Ok(OpCompute {
        graph: g,
        inputs,
        output: prev.ok_or_else(|| TirError::Definition("an empty chain".into()))?,
        inline,
        per_row,
        per_element,
    })
}

/// Whether `t` is a compute stage with reduction axes.
fn reduces(g: &ComputeGraph, t: Tensor) -> bool {
    g.op(t.id)
        .compute()
        .is_some_and(|c| !c.reduce_axis.is_empty())
}

/// The stages one op added to a compute graph.
struct Defined {
    output: Tensor,
    inline: Vec<Tensor>,
    per_row: Vec<(Tensor, usize)>,
}

/// Adds the compute of `op` on operand tensors `ph` (of `types`) to `g`, its stage
/// names suffixed with `sfx`.
fn define(
    g: &mut ComputeGraph,
    op: &Op,
    ph: &[Tensor],
    types: &[ValueType],
    sfx: &str,
) -> Result<Defined, TirError> {
    let no = |why: &str| {
        Err(TirError::Unsupported(format!(
            "{} has no compute definition ({why})",
            op.kind_name()
        )))
    };
    let shape_of = |i: usize| -> Vec<usize> {
        match types[i].shape.as_slice() {
            [] => vec![1],
            s => s.to_vec(),
        }
    };
    let arity = |n: usize| -> Result<(), TirError> {
        if types.len() < n {
            return Err(TirError::Definition(format!(
                "{} needs {n} operands, it has {}",
                op.kind_name(),
                types.len()
            )));
        }
        Ok(())
    };
    let mut inline = vec![];
    let mut per_row = vec![];
    let output = match op {
        Op::Conv(c) if types.len() >= 2 && types[0].shape.len() == 4 => {
            // The padded copy stays a stage of its own (computed once), so the
            // convolution's inner loop reads it without guards and vectorizes.
            conv(g, sfx, c, ph, &shape_of(0), &shape_of(1))?
        }
        Op::Pool(p) if types.len() == 1 && types[0].shape.len() == 4 => {
            let refs: Vec<&ValueType> = types.iter().collect();
            let out = crate::graph::infer_outputs(op, &refs).map_err(TirError::Definition)?;
            let hw = [out[0].shape[2], out[0].shape[3]];
            let (y, pad) = pool(g, sfx, p, ph[0], &shape_of(0), hw)?;
            inline.extend(pad);
            y
        }
        Op::GlobalPool(GlobalPool { kind }) if types.len() == 1 && types[0].shape.len() == 4 => {
            let s = shape_of(0);
            let (h, w) = (s[2], s[3]);
            let x = ph[0];
            let rop = if *kind == PoolKind::Max {
                ReduceOp::Max
            } else {
                ReduceOp::Sum
            };
            let out = [e(s[0]), e(s[1]), 1, 1];
            let r = g.reduce(&format!("R{sfx}"), &out, &[e(h), e(w)], rop, |i, r| {
                x.at(&[i[0].clone(), i[1].clone(), r[0].clone(), r[1].clone()])
            })?;
            if *kind == PoolKind::Avg {
                g.compute(&format!("Y{sfx}"), &out, |i| {
                    r.at(i) / Expr::Float((h * w) as f64)
                })?
            } else {
                r
            }
        }
        Op::BatchNorm(BatchNorm { epsilon }) if types.len() == 5 && types[0].shape.len() >= 2 => {
            let s = extents(&types[0].shape);
            let (x, sc, b, m, v) = (ph[0], ph[1], ph[2], ph[3], ph[4]);
            let eps = *epsilon as f64;
            g.compute(&format!("Y{sfx}"), &s, |i| {
                let c = [i[1].clone()];
                (x.at(i) - m.at(&c)) * sc.at(&c)
                    / Expr::call(Intrinsic::Sqrt, vec![v.at(&c) + Expr::Float(eps)])
                    + b.at(&c)
            })?
        }
        Op::Unary(u) => {
            arity(1)?;
            let (u, x) = (*u, ph[0]);
            g.compute(&format!("Y{sfx}"), &extents(&types[0].shape), |i| {
                u.apply(x.at(i))
            })?
        }
        Op::Binary(b) => {
            arity(2)?;
            let b = *b;
            if b.is_comparison() {
                return no("comparisons give booleans");
            }
            let (sa, sb) = (shape_of(0), shape_of(1));
            let out = crate::graph::broadcast_shapes(&sa, &sb).map_err(TirError::Definition)?;
            let (a, bb) = (ph[0], ph[1]);
            g.compute(&format!("Y{sfx}"), &extents(&out), |i| {
                b.apply(
                    a.at(&broadcast_index(i, &sa)),
                    bb.at(&broadcast_index(i, &sb)),
                )
                .expect("comparisons were refused above")
            })?
        }
        Op::Transpose(Transpose { perm }) => {
            arity(1)?;
            let s: Vec<usize> = perm.iter().map(|&a| types[0].shape[a]).collect();
            let x = ph[0];
            g.compute(&format!("Y{sfx}"), &extents(&s), |i| {
                // Output axis k is input axis perm[k].
                let mut idx = vec![Expr::Int(0); perm.len()];
                for (k, &a) in perm.iter().enumerate() {
                    idx[a] = i[k].clone();
                }
                x.at(&idx)
            })?
        }
        Op::Concat(Concat { axis }) => {
            arity(1)?;
            let a = *axis;
            let mut out = shape_of(0);
            out[a] = types.iter().map(|t| t.shape[a]).sum();
            let parts: Vec<(Tensor, usize)> = ph
                .iter()
                .zip(types)
                .map(|(t, ty)| (*t, ty.shape[a]))
                .collect();
            g.compute(&format!("Y{sfx}"), &extents(&out), |i| {
                // The last part, then each earlier one where the index falls in it;
                // every read is clamped into its part (a select evaluates both sides).
                let mut starts = vec![0usize];
                for (_, n) in &parts {
                    starts.push(starts.last().copied().unwrap_or(0) + n);
                }
                let read = |k: usize| {
                    let (t, n) = parts[k];
                    let mut idx = i.to_vec();
                    idx[a] = (i[a].clone() - ex(starts[k])).max(ex(0)).min(ex(n - 1));
                    t.at(&idx)
                };
                let mut v = read(parts.len() - 1);
                for k in (0..parts.len() - 1).rev() {
                    v = Expr::select(i[a].clone().lt(ex(starts[k + 1])), read(k), v);
                }
                v
            })?
        }
        Op::Slice(Slice { axes }) => {
            arity(1)?;
            let s = shape_of(0);
            let refs: Vec<&ValueType> = types.iter().collect();
            let out = crate::graph::infer_outputs(op, &refs).map_err(TirError::Definition)?;
            let out = out[0].shape.clone();
            for a in axes {
                let last = a.start + (out[a.axis] as i64 - 1) * a.step;
                let inside = |c: i64| (0..s[a.axis] as i64).contains(&c);
                if out[a.axis] > 0 && !(inside(a.start) && inside(last)) {
                    return Err(TirError::Definition(format!(
                        "slice {a:?} reads outside axis extent {}",
                        s[a.axis]
                    )));
                }
            }
            let x = ph[0];
            g.compute(&format!("Y{sfx}"), &extents(&out), |i| {
                let mut idx = i.to_vec();
                for a in axes {
                    idx[a.axis] = Expr::Int(a.start) + i[a.axis].clone() * Expr::Int(a.step);
                }
                x.at(&idx)
            })?
        }
        Op::Pad(Pad {
            begins,
            ends,
            mode: PadMode::Constant(value),
        }) => {
            arity(1)?;
            let s = shape_of(0);
            let out: Vec<i64> = (0..s.len())
                .map(|k| e(s[k]) + begins[k] + ends[k])
                .collect();
            if out.iter().any(|&d| d <= 0) {
                return Err(TirError::Definition(format!(
                    "padding {begins:?}/{ends:?} leaves no element of {s:?}"
                )));
            }
            let x = ph[0];
            g.compute(&format!("Y{sfx}"), &out, |i| {
                let mut inside = Expr::Int(1);
                let mut idx = vec![];
                for (k, &n) in s.iter().enumerate() {
                    let src = i[k].clone() - Expr::Int(begins[k]);
                    inside = inside.and(src.clone().ge(ex(0))).and(src.clone().lt(ex(n)));
                    idx.push(src.max(ex(0)).min(ex(n - 1)));
                }
                Expr::select(inside, x.at(&idx), *value as f64)
            })?
        }
        Op::Expand(Expand { shape }) => {
            arity(1)?;
            let s = shape_of(0);
            let out = crate::graph::broadcast_shapes(&s, shape).map_err(TirError::Definition)?;
            let x = ph[0];
            g.compute(&format!("Y{sfx}"), &extents(&out), |i| {
                x.at(&broadcast_index(i, &s))
            })?
        }
        Op::Reshape(Reshape { shape }) => {
            arity(1)?;
            let s = shape_of(0);
            let x = ph[0];
            g.compute(&format!("Y{sfx}"), &extents(shape), |i| {
                // The row-major position of the output element, then its input index.
                let mut flat = Expr::Int(0);
                for (v, &d) in i.iter().zip(&extents(shape)) {
                    flat = flat * Expr::Int(d) + v.clone();
                }
                let mut idx = vec![Expr::Int(0); s.len()];
                let mut rest = flat;
                for k in (0..s.len()).rev() {
                    idx[k] = rest.clone().floormod(ex(s[k]));
                    rest = rest.floordiv(ex(s[k]));
                }
                x.at(&idx)
            })?
        }
        Op::Identity => {
            arity(1)?;
            let x = ph[0];
            g.compute(&format!("Y{sfx}"), &extents(&types[0].shape), |i| x.at(i))?
        }
        Op::Tile(Tile { repeats }) => {
            arity(1)?;
            let s = shape_of(0);
            let out: Vec<usize> = s.iter().zip(repeats).map(|(d, r)| d * r).collect();
            let x = ph[0];
            g.compute(&format!("Y{sfx}"), &extents(&out), |i| {
                let idx: Vec<Expr> = i
                    .iter()
                    .zip(&s)
                    .map(|(v, &d)| v.clone().floormod(ex(d)))
                    .collect();
                x.at(&idx)
            })?
        }
        Op::Softmax(Softmax { axis }) | Op::LogSoftmax(LogSoftmax { axis }) => {
            arity(1)?;
            let log = matches!(op, Op::LogSoftmax(_));
            let (y, rows) = softmax(g, sfx, ph[0], &shape_of(0), *axis, log)?;
            per_row.extend(rows);
            y
        }
        Op::LayerNorm(LayerNorm { axis, epsilon }) => {
            arity(2)?;
            let (y, rows) = layer_norm(g, sfx, ph, types, *axis, *epsilon as f64)?;
            per_row.extend(rows);
            y
        }
        Op::Reduce(Reduce {
            kind,
            axes,
            keepdims,
        }) => {
            arity(1)?;
            reduce(g, sfx, ph[0], &shape_of(0), *kind, axes, *keepdims)?
        }
        Op::MatMul => {
            arity(2)?;
            matmul(g, sfx, ph[0], ph[1], &types[0].shape, &types[1].shape)?
        }
        Op::Gemm(Gemm {
            alpha,
            beta,
            trans_a,
            trans_b,
        }) => {
            arity(2)?;
            let (sa, sb) = (shape_of(0), shape_of(1));
            if sa.len() != 2 || sb.len() != 2 {
                return no("Gemm operands must be matrices");
            }
            let (m, k) = if *trans_a {
                (sa[1], sa[0])
            } else {
                (sa[0], sa[1])
            };
            let n = if *trans_b { sb[0] } else { sb[1] };
            let (a, b) = (ph[0], ph[1]);
            let (ta, tb) = (*trans_a, *trans_b);
            let ab = g.reduce(
                &format!("AB{sfx}"),
                &[e(m), e(n)],
                &[e(k)],
                ReduceOp::Sum,
                |i, r| {
                    let (i0, i1, rk) = (i[0].clone(), i[1].clone(), r[0].clone());
                    let av = if ta {
                        a.at(&[rk.clone(), i0])
                    } else {
                        a.at(&[i0, rk.clone()])
                    };
                    let bv = if tb { b.at(&[i1, rk]) } else { b.at(&[rk, i1]) };
                    av * bv
                },
            )?;
            let (al, be) = (*alpha as f64, *beta as f64);
            let c = ph.get(2).copied();
            let sc = types.get(2).map(|_| shape_of(2)).unwrap_or_default();
            g.compute(&format!("Y{sfx}"), &[e(m), e(n)], |i| {
                let prod = ab.at(i) * al;
                match c {
                    Some(c) => prod + c.at(&broadcast_index(i, &sc)) * be,
                    None => prod,
                }
            })?
        }
        Op::Conv(_) | Op::Pool(_) | Op::GlobalPool(_) | Op::BatchNorm(_) => {
            return no("only 2-D NCHW is defined")
        }
        _ => return no("not an op of this library"),
    };
    Ok(Defined {
        output,
        inline,
        per_row,
    })
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

/// The row index of `i` with axis `axis` removed (rank 1 rows become `[0]`).
fn drop_axis(i: &[Expr], axis: usize) -> Vec<Expr> {
    let mut r: Vec<Expr> = i.to_vec();
    r.remove(axis);
    if r.is_empty() {
        r.push(Expr::Int(0));
    }
    r
}

/// `i` with the reduced index `k` put back at `axis`.
fn with_axis(i: &[Expr], axis: usize, k: Expr, rank: usize) -> Vec<Expr> {
    let mut r: Vec<Expr> = if rank == 1 { vec![] } else { i.to_vec() };
    r.insert(axis, k);
    r
}

/// Softmax (or log-softmax) over `axis`: the row maximum and the row sum of
/// exponentials are stages of their own, computed per row of the output when the
/// axis is the innermost one.
fn softmax(
    g: &mut ComputeGraph,
    sfx: &str,
    x: Tensor,
    s: &[usize],
    axis: usize,
    log: bool,
) -> Result<(Tensor, Vec<(Tensor, usize)>), TirError> {
    let rank = s.len();
    let rows = extents(&{
        let mut r = s.to_vec();
        r.remove(axis);
        r
    });
    let n = e(s[axis]);
    let mx = g.reduce(&format!("Max{sfx}"), &rows, &[n], ReduceOp::Max, |i, r| {
        x.at(&with_axis(i, axis, r[0].clone(), rank))
    })?;
    let sum = g.reduce(&format!("Sum{sfx}"), &rows, &[n], ReduceOp::Sum, |i, r| {
        let idx = with_axis(i, axis, r[0].clone(), rank);
        Expr::call(Intrinsic::Exp, vec![x.at(&idx) - mx.at(i)])
    })?;
    let y = g.compute(&format!("Y{sfx}"), &extents(s), |i| {
        let row = drop_axis(i, axis);
        let shifted = x.at(i) - mx.at(&row);
        if log {
            shifted - Expr::call(Intrinsic::Log, vec![sum.at(&row)])
        } else {
            Expr::call(Intrinsic::Exp, vec![shifted]) / sum.at(&row)
        }
    })?;
    let attach = if axis + 1 == rank && rank >= 2 {
        vec![(mx, axis - 1), (sum, axis - 1)]
    } else {
        vec![]
    };
    Ok((y, attach))
}

/// Layer normalization over the axes from `axis` on: row mean and variance as
/// stages computed per row.
fn layer_norm(
    g: &mut ComputeGraph,
    sfx: &str,
    ph: &[Tensor],
    types: &[ValueType],
    axis: usize,
    eps: f64,
) -> Result<(Tensor, Vec<(Tensor, usize)>), TirError> {
    let s = extents(&types[0].shape);
    if axis >= s.len() {
        return Err(TirError::Definition(format!(
            "LayerNormalization axis {axis} is out of range for rank {}",
            s.len()
        )));
    }
    let rows: Vec<i64> = if axis == 0 {
        vec![1]
    } else {
        s[..axis].to_vec()
    };
    let norm: Vec<i64> = s[axis..].to_vec();
    let n: i64 = norm.iter().product();
    let x = ph[0];
    let row_of = |i: &[Expr]| -> Vec<Expr> {
        if axis == 0 {
            vec![Expr::Int(0)]
        } else {
            i[..axis].to_vec()
        }
    };
    let full = |i: &[Expr], r: &[Expr]| -> Vec<Expr> {
        let mut idx = if axis == 0 { vec![] } else { i.to_vec() };
        idx.extend(r.iter().cloned());
        idx
    };
    let inv_n = 1.0 / n as f64;
    let mean = g.reduce(
        &format!("Mean{sfx}"),
        &rows,
        &norm,
        ReduceOp::Sum,
        |i, r| x.at(&full(i, r)) * inv_n,
    )?;
    let var = g.reduce(&format!("Var{sfx}"), &rows, &norm, ReduceOp::Sum, |i, r| {
        let d = x.at(&full(i, r)) - mean.at(i);
        d.clone() * d * inv_n
    })?;
    // Scale and bias broadcast to the normalized axes.
    let operand = |k: usize| -> Result<(Tensor, Vec<usize>), TirError> {
        let s = extents(&types[k].shape);
        if s.len() > norm.len() {
            return Err(TirError::Definition(format!(
                "LayerNormalization operand {k} of shape {:?} has more axes than the normalized {norm:?}",
                types[k].shape
            )));
        }
        Ok((ph[k], s.iter().map(|&d| d as usize).collect()))
    };
    let (sc, sc_shape) = operand(1)?;
    let bias = match ph.len() {
        3 => Some(operand(2)?),
        _ => None,
    };
    let y = g.compute(&format!("Y{sfx}"), &s, |i| {
        let row = row_of(i);
        let tail = &i[axis..];
        let inv = Expr::Float(1.0) / Expr::call(Intrinsic::Sqrt, vec![var.at(&row) + eps]);
        let v = (x.at(i) - mean.at(&row)) * inv * sc.at(&broadcast_index(tail, &sc_shape));
        match &bias {
            Some((b, bs)) => v + b.at(&broadcast_index(tail, bs)),
            None => v,
        }
    })?;
    let attach = if axis >= 1 {
        vec![(mean, axis - 1), (var, axis - 1)]
    } else {
        vec![]
    };
    Ok((y, attach))
}

fn reduce(
    g: &mut ComputeGraph,
    sfx: &str,
    x: Tensor,
    s: &[usize],
    kind: ReduceKind,
    axes: &[usize],
    keepdims: bool,
) -> Result<Tensor, TirError> {
    if let Some(a) = axes.iter().find(|&&a| a >= s.len()) {
        return Err(TirError::Definition(format!(
            "reduced axis {a} is out of range for rank {}",
            s.len()
        )));
    }
    let kept: Vec<usize> = (0..s.len()).filter(|a| !axes.contains(a)).collect();
    let reduced: Vec<usize> = (0..s.len()).filter(|a| axes.contains(a)).collect();
    let out: Vec<usize> = if keepdims {
        (0..s.len())
            .map(|a| if axes.contains(&a) { 1 } else { s[a] })
            .collect()
    } else {
        kept.iter().map(|&a| s[a]).collect()
    };
    let rshape: Vec<i64> = reduced.iter().map(|&a| e(s[a])).collect();
    let n: i64 = rshape.iter().product();
    let (rop, scale) = match kind {
        ReduceKind::Sum => (ReduceOp::Sum, None),
        ReduceKind::Mean => (ReduceOp::Sum, Some(1.0 / n as f64)),
        ReduceKind::Max => (ReduceOp::Max, None),
    };
    g.reduce(&format!("Y{sfx}"), &extents(&out), &rshape, rop, |i, r| {
        let mut idx = vec![Expr::Int(0); s.len()];
        for (k, &a) in kept.iter().enumerate() {
            idx[a] = if keepdims { i[a].clone() } else { i[k].clone() };
        }
        for (k, &a) in reduced.iter().enumerate() {
            idx[a] = r[k].clone();
        }
        match scale {
            Some(c) => x.at(&idx) * c,
            None => x.at(&idx),
        }
    })
}

/// MatMul with numpy semantics: batch axes broadcast; a rank-1 operand is a row
/// (left) or a column (right) whose axis the result drops.
fn matmul(
    g: &mut ComputeGraph,
    sfx: &str,
    a: Tensor,
    b: Tensor,
    sa: &[usize],
    sb: &[usize],
) -> Result<Tensor, TirError> {
    if sa.is_empty() || sb.is_empty() {
        return Err(TirError::Definition("MatMul of a scalar".into()));
    }
    let (ra, rb) = (sa.len(), sb.len());
    let k = sa[ra - 1];
    let kb = if rb == 1 { sb[0] } else { sb[rb - 2] };
    if k != kb {
        return Err(TirError::Definition(format!(
            "MatMul inner extents differ: {sa:?} x {sb:?}"
        )));
    }
    let batch_a = if ra >= 2 { &sa[..ra - 2] } else { &[][..] };
    let batch_b = if rb >= 2 { &sb[..rb - 2] } else { &[][..] };
    let batch = crate::graph::broadcast_shapes(batch_a, batch_b).map_err(TirError::Definition)?;
    let nb = batch.len();
    let mut out: Vec<usize> = batch.clone();
    if ra >= 2 {
        out.push(sa[ra - 2]);
    }
    if rb >= 2 {
        out.push(sb[rb - 1]);
    }
    g.reduce(
        &format!("Y{sfx}"),
        &extents(&out),
        &[e(k)],
        ReduceOp::Sum,
        |i, r| {
            let mut pos = nb;
            let mut ia = broadcast_index(&i[..nb], batch_a);
            if ra >= 2 {
                ia.push(i[pos].clone());
                pos += 1;
            }
            ia.push(r[0].clone());
            let mut ib = broadcast_index(&i[..nb], batch_b);
            ib.push(r[0].clone());
            if rb >= 2 {
                ib.push(i[pos].clone());
            }
            a.at(&ia) * b.at(&ib)
        },
    )
}

/// A zero-padded (or `fill`-padded) copy of a 4-D `x`, when the window pads.
fn pad_stage(
    g: &mut ComputeGraph,
    sfx: &str,
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
    g.compute(&format!("Xpad{sfx}"), &shape, |i| {
        let inside = i[2]
            .clone()
            .ge(ex(pt))
            .and(i[2].clone().lt(ex(pt + h)))
            .and(i[3].clone().ge(ex(pl)))
            .and(i[3].clone().lt(ex(pl + w)));
        // Reads clamped into the input, so that no index leaves it even where
        // the select takes the fill (both branches may be evaluated).
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
    sfx: &str,
    c: &Conv,
    ph: &[Tensor],
    xs: &[usize],
    ws: &[usize],
) -> Result<Tensor, TirError> {
    let w = &c.window;
    let pad = pad_stage(g, sfx, ph[0], xs, &w.pads, 0.0)?;
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
    let name = format!("{}{sfx}", if ph.len() > 2 { "conv" } else { "Y" });
    let acc = g.reduce(
        &name,
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
    match ph.get(2) {
        Some(b) => g.compute(&format!("Y{sfx}"), &out, |i| {
            acc.at(i) + b.at(&[i[1].clone()])
        }),
        None => Ok(acc),
    }
}

fn pool(
    g: &mut ComputeGraph,
    sfx: &str,
    p: &Pool,
    x: Tensor,
    xs: &[usize],
    out_hw: [usize; 2],
) -> Result<(Tensor, Option<Tensor>), TirError> {
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
    let pad = pad_stage(g, sfx, x, xs, &pads, fill)?;
    let src = pad.unwrap_or(x);
    let out = [e(xs[0]), e(xs[1]), e(out_hw[0]), e(out_hw[1])];
    let (sh, sw, dh, dw) = (w.strides[0], w.strides[1], w.dilations[0], w.dilations[1]);
    let rop = if is_max { ReduceOp::Max } else { ReduceOp::Sum };
    let name = format!("{}{sfx}", if is_max { "Y" } else { "S" });
    let acc = g.reduce(
        &name,
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
        return Ok((acc, pad));
    }
    // The divisor: the whole window, or only its positions inside the input.
    let (kh, kw) = (w.kernel[0], w.kernel[1]);
    let (pt, pl) = (w.pads[0], w.pads[1]);
    let (h, wd) = (xs[2], xs[3]);
    let include = p.count_include_pad;
    let y = g.compute(&format!("Y{sfx}"), &out, |i| {
        if include {
            return acc.at(i) / Expr::Float((kh * kw) as f64);
        }
        let count = |o: &Expr, s: usize, k: usize, pb: usize, n: usize| {
            let start = o.clone() * ex(s);
            (start.clone() + ex(k)).min(ex(pb + n)) - start.max(ex(pb))
        };
        acc.at(i) / (count(&i[2], sh, kh, pt, h) * count(&i[3], sw, kw, pl, wd))
    })?;
    Ok((y, pad))
}

impl OpCompute {
    /// The default schedule, applied primitive by primitive: padding and chained
    /// elementwise stages inlined, row statistics computed at their row of the
    /// output, the innermost axis split by 8 and vectorized (reductions inside the
    /// spatial loops), producing reductions computed at the loop outside the vector
    /// lanes, the outermost non-trivial axis parallel.
    pub fn default_schedule(&self) -> Result<Schedule, TirError> {
        let y = self.output;
        let mut s = Schedule::new(&self.graph, &[y])?;
        for p in &self.inline {
            s.compute_inline(p)?;
        }
        let axes = s.axis(&y)?;
        for (t, a) in &self.per_row {
            s.compute_at(t, &y, &axes[*a])?;
        }
        let shape = &self.graph.op(y.id).shape;
        // Where element-wise producers are computed: the innermost loop outside the
        // vector lanes.
        let mut element_loop = axes.last().cloned();
        if let (Some(last), Some(&extent)) = (axes.last(), shape.last()) {
            if extent >= 8 {
                let (outer, inner) = s.split(&y, last, 8)?;
                element_loop = Some(outer);
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
        if let Some(at) = element_loop {
            for t in &self.per_element {
                s.compute_at(t, &y, &at)?;
                // Its reduction outside its innermost axis, which is then a run of
                // vector lanes.
                let (axes, reduce) = (s.axis(t)?, s.reduce_axis(t)?);
                if let Some((last, outer)) = axes.split_last() {
                    let mut order = outer.to_vec();
                    order.extend(reduce);
                    order.push(last.clone());
                    s.reorder(t, &order)?;
                    s.vectorize(t, last)?;
                }
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

    /// The storage of the operands (`layouts.0`) and the output (`layouts.1`): for
    /// every non-identity layout, the tensor's name, the layout and its buffer layout
    /// (`None` for nested blocks).
    pub fn storage(
        &self,
        inputs: &[Layout],
        output: &Layout,
    ) -> Vec<(String, Layout, Option<BufferLayout>)> {
        let g = &self.graph;
        self.inputs
            .iter()
            .zip(inputs)
            .chain(std::iter::once((&self.output, output)))
            .filter(|(_, l)| !l.is_identity())
            .map(|(t, l)| (g.op(t.id).name.clone(), l.clone(), buffer_layout(l)))
            .collect()
    }
}

/// Lowers `op` on operands of (logical) `types` with its default schedule; `layouts`
/// gives the storage of the operands and the output for a laid-out op.
pub fn lower_op(
    op: &Op,
    types: &[ValueType],
    layouts: Option<(&[Layout], &Layout)>,
) -> Result<LoweredOp, TirError> {
    let link = Link {
        op,
        types,
        prev: None,
    };
    lower_chain(&[link], layouts)
}

/// Lowers a chain (see [`chain_compute`]) with its default schedule; `layouts` gives
/// the storage of the placeholders (in `OpCompute::inputs` order) and of the output.
pub fn lower_chain(
    links: &[Link],
    layouts: Option<(&[Layout], &Layout)>,
) -> Result<LoweredOp, TirError> {
    let c = chain_compute(links)?;
    let s = c.default_schedule()?;
    let mut opts = LowerOptions::default();
    if let Some((ins, out)) = layouts {
        for (name, l, bl) in c.storage(ins, out) {
            let bl = bl.ok_or_else(|| {
                TirError::Unsupported(format!(
                    "layout {l} of `{name}` nests blocks, which buffer layouts cannot express"
                ))
            })?;
            opts.layouts.insert(name, bl);
        }
    }
    let func = lower(&s, &opts)?;
    let position = |t: &Tensor| func.params.iter().position(|p| *p == t.id);
    let inputs = c.inputs.iter().map(position).collect();
    let output = position(&c.output)
        .ok_or_else(|| TirError::Lower("the output is not a parameter".into()))?;
    Ok(LoweredOp {
        func,
        inputs,
        output,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{BinaryOp, DType, SliceAxis, Tensor as GraphTensor, UnaryOp, Window};
    use crate::tir::interp::Interpreter;
    use std::collections::HashMap;

    /// A deterministic tensor with values in [-1, 1).
    fn tensor(shape: &[usize], seed: u64) -> GraphTensor {
        let n: usize = shape.iter().product();
        let vals = (0..n)
            .map(|i| (((i as u64 * 7919 + seed * 104729) % 2000) as f32) / 1000.0 - 1.0)
            .collect();
        GraphTensor::from_f32(shape.to_vec(), vals)
    }

    fn close(got: &[f64], expected: &[f64], what: &str) {
        assert_eq!(got.len(), expected.len(), "{what}");
        for (k, (a, b)) in got.iter().zip(expected).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                "{what}: element {k}: {a} vs {b}"
            );
        }
    }

    /// The op against the reference executor (tolerance 1e-5 * max(1, |expected|)),
    /// twice: its compute definition evaluated directly, and its default schedule
    /// lowered (in `layouts` when given, padding filled with NaN so that a read of it
    /// shows) and run by the statement-IR interpreter.
    fn agrees_on(op: Op, inputs: Vec<GraphTensor>, layouts: Option<(Vec<Layout>, Layout)>) {
        let types: Vec<ValueType> = inputs
            .iter()
            .map(|t| ValueType::new(DType::F32, t.shape.clone()))
            .collect();
        let refs: Vec<&ValueType> = types.iter().collect();
        let out_types = crate::graph::infer_outputs(&op, &refs).unwrap();
        let ins: Vec<&GraphTensor> = inputs.iter().collect();
        let expected = crate::reference::eval_op(&op, &ins, &out_types).unwrap()[0]
            .data
            .to_f64();
        let c = op_compute(&op, &types).unwrap();
        let feed: HashMap<String, Vec<f64>> = c
            .inputs
            .iter()
            .zip(&inputs)
            .map(|(p, t)| (c.graph.op(p.id).name.clone(), t.data.to_f64()))
            .collect();
        let direct = &c.graph.evaluate(&feed).unwrap()[c.output.id.0];
        close(direct, &expected, &format!("{op:?} (definition)"));

        let lay = layouts.as_ref().map(|(i, o)| (i.as_slice(), o));
        let l = lower_op(&op, &types, lay).unwrap();
        let f = &l.func;
        let shape = |p: usize| f.graph.op(f.params[p]).shape.clone();
        let mut buffers = HashMap::new();
        for (k, t) in inputs.iter().enumerate() {
            let Some(p) = l.inputs[k] else { continue };
            let data = f.layouts[&f.params[p]].pack(&shape(p), &t.data.to_f64(), f64::NAN);
            buffers.insert(f.graph.op(f.params[p]).name.clone(), data);
        }
        let (out, _) = Interpreter::new().run(f, &buffers).unwrap();
        let y = &out[&f.graph.op(f.params[l.output]).name];
        let got = f.layouts[&f.params[l.output]].unpack(&shape(l.output), y);
        close(&got, &expected, &format!("{op:?} (lowered, {layouts:?})"));
    }

    fn agrees_with_reference(op: Op, shapes: &[&[usize]]) {
        let inputs = shapes
            .iter()
            .enumerate()
            .map(|(k, s)| tensor(s, k as u64 + 1))
            .collect();
        agrees_on(op, inputs, None);
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
    fn cnn_ops_match_the_reference_executor() {
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
        agrees_with_reference(
            Op::GlobalPool(GlobalPool {
                kind: PoolKind::Avg,
            }),
            &[&[1, 3, 4, 5]],
        );
        agrees_with_reference(
            Op::GlobalPool(GlobalPool {
                kind: PoolKind::Max,
            }),
            &[&[1, 3, 4, 5]],
        );
        // BatchNorm, with positive variances.
        let var = GraphTensor::from_f32(vec![3], vec![0.5, 1.0, 2.0]);
        let mut bn: Vec<_> = [&[1usize, 3, 2, 2][..], &[3], &[3], &[3]]
            .iter()
            .enumerate()
            .map(|(k, s)| tensor(s, k as u64 + 1))
            .collect();
        bn.push(var);
        agrees_on(Op::BatchNorm(BatchNorm { epsilon: 1e-5 }), bn, None);
    }

    #[test]
    fn elementwise_ops_match_the_reference_executor() {
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
            UnaryOp::Erf,
            UnaryOp::Exp,
            UnaryOp::Neg,
            UnaryOp::Abs,
            UnaryOp::Reciprocal,
            UnaryOp::Gelu { tanh_approx: true },
            UnaryOp::Gelu { tanh_approx: false },
        ] {
            agrees_with_reference(Op::Unary(u), &[&[2, 3, 9]]);
        }
        // Log and Sqrt on positive values.
        let positive =
            GraphTensor::from_f32(vec![2, 5], (1..=10).map(|v| v as f32 * 0.3).collect());
        for u in [UnaryOp::Log, UnaryOp::Sqrt] {
            agrees_on(Op::Unary(u), vec![positive.clone()], None);
        }
        agrees_on(
            Op::Binary(BinaryOp::Pow),
            vec![positive.clone(), tensor(&[5], 3)],
            None,
        );
        for b in [
            BinaryOp::Add,
            BinaryOp::Sub,
            BinaryOp::Mul,
            BinaryOp::Max,
            BinaryOp::Min,
        ] {
            agrees_with_reference(Op::Binary(b), &[&[2, 3, 4], &[3, 1]]);
        }
        agrees_on(
            Op::Binary(BinaryOp::Div),
            vec![tensor(&[2, 5], 1), positive],
            None,
        );
        // A scalar operand.
        agrees_with_reference(Op::Binary(BinaryOp::Mul), &[&[4, 9], &[]]);
    }

    #[test]
    fn movement_ops_match_the_reference_executor() {
        agrees_with_reference(
            Op::Transpose(Transpose {
                perm: vec![2, 0, 1],
            }),
            &[&[2, 3, 4]],
        );
        agrees_with_reference(
            Op::Concat(Concat { axis: 1 }),
            &[&[2, 3, 2], &[2, 1, 2], &[2, 4, 2]],
        );
        agrees_with_reference(
            Op::Slice(Slice {
                axes: vec![
                    SliceAxis {
                        axis: 0,
                        start: 3,
                        end: -1,
                        step: -2,
                    },
                    SliceAxis {
                        axis: 1,
                        start: 1,
                        end: 5,
                        step: 1,
                    },
                ],
            }),
            &[&[4, 6]],
        );
        agrees_with_reference(
            Op::Pad(Pad {
                begins: vec![1, -1],
                ends: vec![0, 2],
                mode: PadMode::Constant(0.5),
            }),
            &[&[3, 4]],
        );
        agrees_with_reference(
            Op::Expand(Expand {
                shape: vec![2, 3, 4],
            }),
            &[&[3, 1]],
        );
        agrees_with_reference(
            Op::Reshape(Reshape {
                shape: vec![3, 2, 4],
            }),
            &[&[2, 12]],
        );
        agrees_on(
            Op::Reshape(Reshape { shape: vec![1, 60] }),
            vec![tensor(&[1, 12, 1, 5], 1)],
            Some((
                vec![Layout::parse("NCHW8c").unwrap()],
                Layout::parse("NC").unwrap(),
            )),
        );
        agrees_with_reference(Op::Identity, &[&[2, 3]]);
        agrees_with_reference(
            Op::Tile(Tile {
                repeats: vec![2, 3],
            }),
            &[&[2, 3]],
        );
    }

    #[test]
    fn normalizations_and_reductions_match_the_reference_executor() {
        for axis in [0, 1, 2] {
            agrees_with_reference(Op::Softmax(Softmax { axis }), &[&[2, 3, 10]]);
            agrees_with_reference(Op::LogSoftmax(LogSoftmax { axis }), &[&[2, 3, 10]]);
        }
        agrees_with_reference(
            Op::LayerNorm(LayerNorm {
                axis: 2,
                epsilon: 1e-5,
            }),
            &[&[2, 3, 12], &[12], &[12]],
        );
        agrees_with_reference(
            Op::LayerNorm(LayerNorm {
                axis: 1,
                epsilon: 1e-3,
            }),
            &[&[2, 3, 4], &[3, 4]],
        );
        agrees_with_reference(
            Op::LayerNorm(LayerNorm {
                axis: 0,
                epsilon: 1e-5,
            }),
            &[&[3, 4], &[4], &[3, 4]],
        );
        for kind in [ReduceKind::Sum, ReduceKind::Mean, ReduceKind::Max] {
            for keepdims in [false, true] {
                let op = Op::Reduce(Reduce {
                    kind,
                    axes: vec![0, 2],
                    keepdims,
                });
                agrees_with_reference(op, &[&[2, 3, 9]]);
            }
            let all = Op::Reduce(Reduce {
                kind,
                axes: vec![0, 1],
                keepdims: false,
            });
            agrees_with_reference(all, &[&[3, 4]]);
        }
    }

    /// A fused chain against the reference executor run op by op (tolerance as
    /// above). Each link: the op, its own operands, and where the previous result
    /// goes among its operands.
    fn chain_agrees(links: Vec<(Op, Vec<GraphTensor>, Option<usize>)>) -> LoweredOp {
        let mut expected: Option<GraphTensor> = None;
        let mut all_types = vec![];
        let mut feeds = vec![];
        for (op, own, prev) in &links {
            let mut operands = own.clone();
            if let (Some(at), Some(e)) = (prev, &expected) {
                operands.insert(*at, e.clone());
            }
            let types: Vec<ValueType> = operands
                .iter()
                .map(|t| ValueType::new(DType::F32, t.shape.clone()))
                .collect();
            let refs: Vec<&ValueType> = types.iter().collect();
            let out = crate::graph::infer_outputs(op, &refs).unwrap();
            let ins: Vec<&GraphTensor> = operands.iter().collect();
            expected = Some(crate::reference::eval_op(op, &ins, &out).unwrap().remove(0));
            all_types.push(types);
            feeds.extend(own.iter().cloned());
        }
        let chain: Vec<Link> = links
            .iter()
            .zip(&all_types)
            .map(|((op, _, prev), types)| Link {
                op,
                types,
                prev: *prev,
            })
            .collect();
        let l = lower_chain(&chain, None).unwrap();
        let f = &l.func;
        let mut buffers = HashMap::new();
        for (k, t) in feeds.iter().enumerate() {
            if let Some(p) = l.inputs[k] {
                buffers.insert(f.graph.op(f.params[p]).name.clone(), t.data.to_f64());
            }
        }
        let (out, _) = Interpreter::new().run(f, &buffers).unwrap();
        let got = &out[&f.graph.op(f.params[l.output]).name];
        close(got, &expected.unwrap().data.to_f64(), &f.to_text());
        l
    }

    #[test]
    fn chains_fuse_elementwise_epilogues_into_one_loop_nest() {
        // MatMul, bias, Gelu: one function, the product computed per 8 columns inside
        // the output's loop nest (an 8-element scratch), the epilogue inlined.
        let l = chain_agrees(vec![
            (
                Op::MatMul,
                vec![tensor(&[2, 5, 6], 1), tensor(&[6, 16], 2)],
                None,
            ),
            (Op::Binary(BinaryOp::Add), vec![tensor(&[16], 3)], Some(0)),
            (
                Op::Unary(UnaryOp::Gelu { tanh_approx: false }),
                vec![],
                Some(0),
            ),
        ]);
        let x: HashMap<String, Vec<f64>> = [("X", 60), ("W", 96), ("W1", 16)]
            .iter()
            .map(|(n, len)| (n.to_string(), vec![0.5; *len]))
            .collect();
        let (_, stats) = Interpreter::new().run(&l.func, &x).unwrap();
        assert_eq!(stats.max_alloc["Y"], 8, "{}", l.func.to_text());
        assert_eq!(stats.stores["Y2"], 2 * 5 * 16, "{}", l.func.to_text());
        assert!(!stats.stores.contains_key("Y1"), "{}", l.func.to_text());
        // Softmax then a scale, the chained value on the right.
        chain_agrees(vec![
            (
                Op::Softmax(Softmax { axis: 1 }),
                vec![tensor(&[3, 12], 1)],
                None,
            ),
            (
                Op::Binary(BinaryOp::Mul),
                vec![tensor(&[3, 12], 2)],
                Some(1),
            ),
        ]);
        // Convolution with bias, then Relu.
        chain_agrees(vec![
            (
                Op::Conv(Conv {
                    window: window(3, 1, 1, [1, 1, 1, 1]),
                    group: 1,
                }),
                vec![
                    tensor(&[1, 2, 5, 9], 1),
                    tensor(&[3, 2, 3, 3], 2),
                    tensor(&[3], 3),
                ],
                None,
            ),
            (Op::Unary(UnaryOp::Relu), vec![], Some(0)),
        ]);
    }

    #[test]
    fn chains_refuse_what_they_cannot_fuse() {
        let t = |s: &[usize]| vec![ValueType::new(DType::F32, s.to_vec())];
        let (a, b) = (t(&[4, 8]), t(&[4, 8]));
        let softmax = Op::Softmax(Softmax { axis: 1 });
        let e = chain_compute(&[
            Link {
                op: &Op::Unary(UnaryOp::Relu),
                types: &a,
                prev: None,
            },
            Link {
                op: &softmax,
                types: &b,
                prev: Some(0),
            },
        ])
        .err()
        .unwrap();
        assert!(matches!(e, TirError::Unsupported(_)), "{e}");
        // A binary op that broadcasts the chained [4, 1] to [4, 8].
        let (small, wide) = (
            t(&[4, 1]),
            vec![t(&[4, 1])[0].clone(), t(&[4, 8])[0].clone()],
        );
        let e = chain_compute(&[
            Link {
                op: &Op::Unary(UnaryOp::Relu),
                types: &small,
                prev: None,
            },
            Link {
                op: &Op::Binary(BinaryOp::Add),
                types: &wide,
                prev: Some(0),
            },
        ])
        .err()
        .unwrap();
        assert!(e.to_string().contains("broadcasts"), "{e}");
    }

    #[test]
    fn row_statistics_are_computed_per_row() {
        // Softmax over the last axis of [4, 6, 10]: the max and the sum live in one
        // element each, computed inside the output's row loop (not 24-element buffers).
        let t = [ValueType::new(DType::F32, vec![4, 6, 10])];
        let l = lower_op(&Op::Softmax(Softmax { axis: 2 }), &t, None).unwrap();
        let x: HashMap<String, Vec<f64>> =
            HashMap::from([("X".to_string(), tensor(&[4, 6, 10], 1).data.to_f64())]);
        let (_, stats) = Interpreter::new().run(&l.func, &x).unwrap();
        assert_eq!(stats.max_alloc["Max"], 1, "{}", l.func.to_text());
        assert_eq!(stats.max_alloc["Sum"], 1, "{}", l.func.to_text());
        assert!(
            l.func.to_text().contains("parallel"),
            "{}",
            l.func.to_text()
        );
    }

    #[test]
    fn matrix_products_match_the_reference_executor() {
        agrees_with_reference(Op::MatMul, &[&[2, 1, 3, 4], &[3, 4, 9]]);
        agrees_with_reference(Op::MatMul, &[&[4], &[3, 4, 5]]);
        agrees_with_reference(Op::MatMul, &[&[2, 3, 4], &[4]]);
        agrees_with_reference(
            Op::Gemm(Gemm {
                alpha: 0.5,
                beta: 2.0,
                trans_a: true,
                trans_b: true,
            }),
            &[&[4, 3], &[9, 4], &[9]],
        );
    }

    #[test]
    fn blocked_storage_with_padding_is_lowered_and_never_read_in_the_padding() {
        // NCHW8c of 12 channels: the second block is half padding (NaN above).
        let blocked = Layout::parse("NCHW8c").unwrap();
        let x = || tensor(&[1, 12, 3, 5], 1);
        agrees_on(
            Op::Unary(UnaryOp::Sigmoid),
            vec![x()],
            Some((vec![blocked.clone()], blocked.clone())),
        );
        agrees_on(
            Op::Binary(BinaryOp::Add),
            vec![x(), tensor(&[1, 12, 3, 5], 2)],
            Some((vec![blocked.clone(), blocked.clone()], blocked.clone())),
        );
        // Softmax over the blocked axis, read in NCHW8c, written in NHWC.
        agrees_on(
            Op::Softmax(Softmax { axis: 1 }),
            vec![x()],
            Some((vec![blocked], Layout::parse("NHWC").unwrap())),
        );
    }

    #[test]
    fn unsupported_ops_and_nested_blocks_say_so() {
        let e = lower_op(&Op::Where, &[], None).err().unwrap();
        assert!(matches!(e, TirError::Unsupported(_)), "{e}");
        assert!(
            e.to_string().contains("Where has no compute definition"),
            "{e}"
        );
        let t = [ValueType::new(DType::F32, vec![1, 32, 2, 2])];
        let nested = Layout::parse("NCHW8c2c").unwrap();
        let e = lower_op(
            &Op::Unary(UnaryOp::Relu),
            &t,
            Some((std::slice::from_ref(&nested), &nested)),
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("nests blocks"), "{e}");
    }
}
