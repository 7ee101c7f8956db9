//! The conditions of the rules that rewrite the op graph before layouts are
//! chosen (`stage: graph` files): what the former hand-written folding passes
//! checked, now named by rules in `rules/`.

use super::{bind_atom, get, refuse, Refusal};
use crate::graph::{BinaryOp, DType, Op, Pad, PadMode, PoolKind, Slice};
use crate::layout::egraph::{entry_of, tensor_of, Atom, LEGraph, Lang, OpEntry};
use crate::layout::Layout;
use crate::ops::{Reshape, Transpose};
use egg::{Id, Subst};

/// The constant fill and amounts of an explicit pad entry.
fn constant_pad(eg: &LEGraph, id: Id) -> Result<(f32, Vec<i64>, Vec<i64>, OpEntry), Refusal> {
    let e = entry_of(eg, id)?;
    match &e.op {
        Op::Pad(Pad {
            begins,
            ends,
            mode: PadMode::Constant(fill),
        }) => Ok((*fill, begins.clone(), ends.clone(), e.clone())),
        _ => refuse("not a constant pad"),
    }
}

/// The lowest value class `x` can hold, when an op of it clamps from below
/// (looking through the transposes and reshapes after that op, which move
/// values without changing them).
fn lower_bound(eg: &LEGraph, x: Id) -> Option<f32> {
    let mut class = x;
    // A class may hold a cycle of movements: a few steps are enough.
    for _ in 0..8 {
        let mut next = None;
        for n in &eg[class].nodes {
            match n {
                Lang::Unary([k, _]) => {
                    if let Op::Unary(u) = entry_of(eg, *k).ok()?.op {
                        if let Some((lo, _)) = u.clamp_bounds() {
                            return Some(lo);
                        }
                    }
                }
                Lang::Transpose([_, y]) | Lang::Reshape([_, y]) => next = Some(*y),
                _ => {}
            }
        }
        class = eg.find(next?);
    }
    None
}

/// window(pad(x)) = window'(x): a constant pad of the spatial axes only, with
/// the fill the window reads in its own padding (0 for a convolution or an
/// average pool that counts pads; for a max pool −∞, or any fill no larger
/// than every value of x while every window still covers an element of x),
/// becomes the window's padding. Binds ?w2, the window with the pads added.
pub(super) fn window_absorbs_pad(eg: &mut LEGraph, s: &mut Subst) -> Result<(), Refusal> {
    let (fill, begins, ends, _) = constant_pad(eg, get(s, "?p"))?;
    let entry = entry_of(eg, get(s, "?w"))?.clone();
    let x = get(s, "?x");
    let rank = begins.len();
    if rank < 3 || begins.iter().chain(&ends).any(|&p| p < 0) {
        return refuse("a crop, or no spatial axes");
    }
    if begins[..2].iter().chain(&ends[..2]).any(|&p| p != 0) {
        return refuse("the pad widens the batch or the channels");
    }
    let spatial = rank - 2;
    let extra = |p: &[i64]| p[2..].iter().map(|&p| p as usize).collect::<Vec<_>>();
    let (extra_begin, extra_end) = (extra(&begins), extra(&ends));
    let mut op = entry.op.clone();
    let window = match &mut op {
        Op::Conv(c) if fill == 0.0 => &mut c.window,
        Op::Pool(p) if !p.ceil_mode => {
            let own_pads = p.window.pads.iter().any(|&x| x > 0);
            let fits = match p.kind {
                PoolKind::Avg => fill == 0.0 && (p.count_include_pad || !own_pads),
                PoolKind::Max => {
                    fill == f32::NEG_INFINITY
                        || (lower_bound(eg, x).is_some_and(|lo| fill <= lo)
                            && (0..spatial.min(p.window.spatial_rank())).all(|i| {
                                let span = p.window.dilations[i] * (p.window.kernel[i] - 1) + 1;
                                p.window.pad_begin(i) + extra_begin[i] < span
                                    && p.window.pad_end(i) + extra_end[i] < span
                            }))
                }
            };
            if !fits {
                return refuse("the fill is not what the pool reads in its padding");
            }
            if p.kind == PoolKind::Avg {
                p.count_include_pad = true;
            }
            &mut p.window
        }
        _ => return refuse("not a window that pads with this fill"),
    };
    if window.spatial_rank() != spatial {
        return refuse("the window's rank is not the pad's");
    }
    for i in 0..spatial {
        window.pads[i] += extra_begin[i];
        window.pads[spatial + i] += extra_end[i];
    }
    let k = eg.analysis.intern(OpEntry {
        op,
        outputs: entry.outputs,
    });
    bind_atom(eg, s, "?w2", Atom::Op(k));
    Ok(())
}

/// transpose(t, pad(p, x)) = pad(p2, transpose(t2, x)): the pad amounts
/// permuted as the axes are. Binds ?t2 (the transpose of x) and ?p2.
pub(super) fn pad_through_transpose(eg: &mut LEGraph, s: &mut Subst) -> Result<(), Refusal> {
    let (_, begins, ends, pad) = constant_pad(eg, get(s, "?p"))?;
    let outer = entry_of(eg, get(s, "?t"))?.clone();
    let Op::Transpose(Transpose { perm }) = &outer.op else {
        return refuse("not a transpose");
    };
    let x = tensor_of(eg, get(s, "?x"))?;
    let rank = x.logical.len();
    if perm.len() != rank || begins.len() != rank {
        return Err(Refusal::Failed(format!(
            "a transpose {perm:?} of a pad of rank {}",
            begins.len()
        )));
    }
    let shape: Vec<usize> = perm.iter().map(|&a| x.logical[a]).collect();
    let t2 = row_major_op(eg, outer.op.clone(), shape)?;
    let Op::Pad(Pad { mode, .. }) = pad.op else {
        return refuse("not a pad");
    };
    let p2 = eg.analysis.intern(OpEntry {
        op: Op::Pad(Pad {
            begins: perm.iter().map(|&a| begins[a]).collect(),
            ends: perm.iter().map(|&a| ends[a]).collect(),
            mode,
        }),
        outputs: outer.outputs,
    });
    bind_atom(eg, s, "?t2", t2);
    bind_atom(eg, s, "?p2", Atom::Op(p2));
    Ok(())
}

/// op(k, x) = x: the op's one output has x's shape and element type (a
/// reshape to the shape it reads).
pub(super) fn keeps_shape(eg: &mut LEGraph, s: &mut Subst) -> Result<(), Refusal> {
    let entry = entry_of(eg, get(s, "?k"))?;
    let x = tensor_of(eg, get(s, "?x"))?;
    let same = matches!(&entry.op, Op::Reshape(_))
        && matches!(&entry.outputs[..], [(shape, _)] if *shape == x.logical)
        && x.layout.is_identity();
    match same {
        true => Ok(()),
        false => refuse("the op changes the shape"),
    }
}

/// The binary op of entry `id`.
pub(super) fn binary_op(eg: &LEGraph, id: Id) -> Result<BinaryOp, Refusal> {
    match entry_of(eg, id)?.op {
        Op::Binary(b) => Ok(b),
        _ => refuse("not a binary op"),
    }
}

/// `op` writing one row-major output of `shape`, as an op atom.
pub(super) fn row_major_op(eg: &mut LEGraph, op: Op, shape: Vec<usize>) -> Result<Atom, Refusal> {
    let layout = Layout::identity(shape.len()).map_err(|e| e.to_string())?;
    let k = eg.analysis.intern(OpEntry {
        op,
        outputs: vec![(shape, layout)],
    });
    Ok(Atom::Op(k))
}

/// A reshape of a tensor to `shape`, as an op atom.
pub(super) fn reshape_to(eg: &mut LEGraph, shape: Vec<usize>) -> Result<Atom, Refusal> {
    let op = Op::Reshape(Reshape {
        shape: shape.clone(),
    });
    row_major_op(eg, op, shape)
}

/// Whether class `id` is an f32 constant of the graph, or one that an
/// earlier fold computed from it (a product, a sum, a reshape of constants):
/// not a dequantized tensor, whose grid the int8 kernels read.
fn f32_constant(eg: &LEGraph, id: Id, depth: usize) -> bool {
    let constant = |x: &Id| matches!(tensor_of(eg, *x), Ok(t) if t.is_const);
    depth > 0
        && eg[id].nodes.iter().any(|n| match n {
            Lang::Atom(Atom::Source(k)) => {
                let info = &eg.analysis.sources[*k].info;
                info.is_const && info.dtype == DType::F32
            }
            Lang::Binary([_, a, b]) => f32_constant(eg, *a, depth - 1) && constant(b),
            Lang::Reshape([_, x]) => f32_constant(eg, *x, depth - 1),
            _ => false,
        })
}

/// Whether the constant class ?s holds one value per output channel of the
/// convolution ?c (or one for all): an f32 constant that broadcasts against
/// the conv's output along the channels only and leaves its shape as it is,
/// after a conv whose weights ?w are f32 constants of the graph (dequantized
/// weights stay on their grid for the int8 kernels). Binds ?rb, ?s reshaped
/// to one value per channel (or one for all), and ?rw, the same with the
/// rank of the conv's weights.
fn channel_constant(eg: &mut LEGraph, s: &mut Subst) -> Result<(), Refusal> {
    // A few folds deep: a chain of scales and shifts is that long.
    if !f32_constant(eg, get(s, "?w"), 8) {
        return refuse("the weights are computed (dequantized), not f32 constants");
    }
    let conv = entry_of(eg, get(s, "?c"))?;
    let (Op::Conv(_), [(y, _)]) = (&conv.op, &conv.outputs[..]) else {
        return refuse("not a convolution");
    };
    let y = y.clone();
    let c = tensor_of(eg, get(s, "?s"))?;
    if !c.is_const || c.dtype != DType::F32 || c.logical.len() > y.len() || y.len() < 3 {
        return refuse("not an f32 constant of at most the conv's rank");
    }
    let lead = y.len() - c.logical.len();
    let per_channel = c
        .logical
        .iter()
        .enumerate()
        .all(|(i, &d)| d == 1 || (i + lead == 1 && d == y[1]));
    if !per_channel {
        return refuse("the constant is not one value per output channel");
    }
    let n: usize = c.logical.iter().product();
    let mut weights = vec![1; y.len()];
    weights[0] = n;
    let (rb, rw) = (reshape_to(eg, vec![n])?, reshape_to(eg, weights)?);
    bind_atom(eg, s, "?rb", rb);
    bind_atom(eg, s, "?rw", rw);
    Ok(())
}

/// conv(x, w, b) * s = conv(x, w * s, b * s) for a per-channel constant s
/// (`channel_constant`): ?m must be a Mul.
pub(super) fn channel_scale(eg: &mut LEGraph, s: &mut Subst) -> Result<(), Refusal> {
    if binary_op(eg, get(s, "?m"))? != BinaryOp::Mul {
        return refuse("not a product");
    }
    channel_constant(eg, s)
}

/// conv(x, w, b) ± s = conv(x, w, b ± s) for a per-channel constant s
/// (`channel_constant`): ?a must be an Add or a Sub.
pub(super) fn channel_shift(eg: &mut LEGraph, s: &mut Subst) -> Result<(), Refusal> {
    if !matches!(binary_op(eg, get(s, "?a"))?, BinaryOp::Add | BinaryOp::Sub) {
        return refuse("not a sum or difference");
    }
    channel_constant(eg, s)
}

/// ?a is an Add (a conv without bias takes the shift as its bias).
pub(super) fn adds(eg: &mut LEGraph, s: &mut Subst) -> Result<(), Refusal> {
    match binary_op(eg, get(s, "?a"))? {
        BinaryOp::Add => Ok(()),
        _ => refuse("not a sum"),
    }
}

/// k ∘ y = y ∘ k for a commutative ?m (Add, Mul) and a constant ?k, so that
/// rules may name the constant second.
pub(super) fn constant_commutes(eg: &mut LEGraph, s: &mut Subst) -> Result<(), Refusal> {
    let commutes = matches!(binary_op(eg, get(s, "?m"))?, BinaryOp::Add | BinaryOp::Mul);
    let (k, y) = (tensor_of(eg, get(s, "?k"))?, tensor_of(eg, get(s, "?y"))?);
    match commutes && k.is_const && !y.is_const {
        true => Ok(()),
        false => refuse("not a commutative op of a constant"),
    }
}

/// transpose(t, y) ∘ s = transpose(t, y ∘ s') for a constant ?s: s' is s
/// brought to y's rank (?rs, leading ones) and transposed back (?ti, the
/// inverse permutation), which folds at compile time.
pub(super) fn constant_through_transpose(eg: &mut LEGraph, s: &mut Subst) -> Result<(), Refusal> {
    let t = entry_of(eg, get(s, "?t"))?;
    let Op::Transpose(Transpose { perm }) = &t.op else {
        return refuse("not a transpose");
    };
    let perm = perm.clone();
    let c = tensor_of(eg, get(s, "?s"))?;
    if !c.is_const || c.logical.len() > perm.len() {
        return refuse("not a constant of at most the transpose's rank");
    }
    let mut full = vec![1; perm.len() - c.logical.len()];
    full.extend(&c.logical);
    // Axis perm[i] of the input is axis i of the output.
    let mut inverse = vec![0; perm.len()];
    let mut back = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p] = i;
        back[p] = full[i];
    }
    let rs = reshape_to(eg, full)?;
    let ti = row_major_op(eg, Op::Transpose(Transpose { perm: inverse }), back)?;
    bind_atom(eg, s, "?rs", rs);
    bind_atom(eg, s, "?ti", ti);
    Ok(())
}

/// slice(pad(x)) = x: a constant pad at the ends only, and a slice from 0 in
/// steps of 1 up to each padded axis's original extent (exported plans spell
/// a blocked layout's padding so).
pub(super) fn slice_cuts_back(eg: &mut LEGraph, s: &mut Subst) -> Result<(), Refusal> {
    let (_, begins, ends, _) = constant_pad(eg, get(s, "?p"))?;
    let Op::Slice(Slice { axes }) = &entry_of(eg, get(s, "?s"))?.op else {
        return refuse("not a slice");
    };
    let x = tensor_of(eg, get(s, "?x"))?;
    if begins.iter().any(|&b| b != 0) || ends.len() != x.logical.len() {
        return refuse("the pad is not at the ends");
    }
    let cuts_back = (0..x.logical.len()).all(|a| {
        let original = x.logical[a] as i64;
        match axes.iter().find(|s| s.axis == a) {
            Some(s) => s.start == 0 && s.step == 1 && s.end == original && ends[a] >= 0,
            None => ends[a] == 0,
        }
    });
    match cuts_back {
        true => Ok(()),
        false => refuse("the slice keeps more or less than the pad's input"),
    }
}
