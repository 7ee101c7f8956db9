//! ONNX operators whose specification defines them by other operators: they
//! import as those ops, so every later stage (planning, kernels, export) sees
//! only ops it knows.

use super::context::{dims, NodeCtx, Res};
use super::registry::{Registry, AI_ONNX};
use crate::graph::{numel, BinaryOp, DType, Op, ReduceKind, Tensor, TensorData, UnaryOp, ValueRef};
use crate::ops::{ArgKind, ArgReduce, Cast, Reduce, Reshape, Slice, SliceAxis, Transpose};

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "InstanceNormalization", instance_norm);
    reg.add(AI_ONNX, "GroupNormalization", group_norm);
    reg.add(AI_ONNX, "Hardmax", hardmax);
    reg.add(AI_ONNX, "Einsum", einsum);
    reg.add(AI_ONNX, "AffineGrid", affine_grid);
}

/// AffineGrid: the sampling grid of `size` (input 1, a constant N, C, then 2 or
/// 3 spatial extents) moved by each batch's affine matrix `theta` (N, k, k + 1):
/// the constant homogeneous positions `(x, y[, z], 1)`, evenly spaced in
/// [-1, 1] with x along the last axis, times the transposed matrices.
fn affine_grid(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let theta = c.input(0)?;
    let size = c
        .const_ints(1)?
        .ok_or_else(|| c.err("AffineGrid needs its size input"))?;
    let size = dims(c, &size, "size")?;
    let ty = c.ty(theta);
    let k = size.len().saturating_sub(2);
    if !(k == 2 || k == 3) || ty.shape != [size[0], k, k + 1] {
        return Err(c.err(format!(
            "theta of shape {:?} does not fit size {size:?}: expected size N, C and 2 or 3 extents, and theta [N, k, k + 1]",
            ty.shape
        )));
    }
    let spatial = &size[2..];
    c.check_size(ty.dtype, &[numel(spatial), k + 1])?;
    let align_corners = c.bool_attr("align_corners", false)?;
    let coordinate = |i: usize, extent: usize| match (align_corners, extent) {
        (true, 1) => -1.0,
        (true, _) => -1.0 + 2.0 * i as f64 / (extent - 1) as f64,
        (false, _) => -1.0 + (2 * i + 1) as f64 / extent as f64,
    };
    let mut positions = Vec::with_capacity(numel(spatial) * (k + 1));
    let mut at = vec![0; k];
    for _ in 0..numel(spatial) {
        // x is the last spatial axis, then y (and z).
        positions.extend((0..k).rev().map(|a| coordinate(at[a], spatial[a])));
        positions.push(1.0);
        crate::core::next_index(&mut at, spatial);
    }
    let base = Tensor::new(
        vec![numel(spatial), k + 1],
        TensorData::from_f64(ty.dtype, positions),
    );
    let base = c.inner_constant("positions", base);
    let transposed = c.emit_inner(
        Op::Transpose(Transpose {
            perm: vec![0, 2, 1],
        }),
        &[theta],
        "theta_t",
    )?;
    let moved = c.emit_inner(Op::MatMul, &[base, transposed], "moved")?;
    let mut shape = vec![size[0]];
    shape.extend_from_slice(spatial);
    shape.push(k);
    c.emit(Op::Reshape(Reshape { shape }), &[moved])
}

/// Statistics over some axes of a tensor, kept as axes of extent 1.
pub(super) struct Statistics {
    pub(super) mean: ValueRef,
    /// `x - mean`.
    pub(super) centered: ValueRef,
    /// The population variance (divided by the count, not count - 1).
    pub(super) var: ValueRef,
    /// `sqrt(var + epsilon)`.
    pub(super) std: ValueRef,
}

impl NodeCtx<'_> {
    /// A scalar constant of `dtype` for this layer.
    pub(super) fn scalar(&mut self, what: &str, dtype: DType, v: f64) -> ValueRef {
        self.inner_constant(
            what,
            Tensor::new(vec![], TensorData::from_f64(dtype, vec![v])),
        )
    }

    /// The statistics of `x` over `axes` (kept).
    pub(super) fn statistics(
        &mut self,
        x: ValueRef,
        axes: Vec<usize>,
        eps: f32,
    ) -> Res<Statistics> {
        let mean_over = Op::Reduce(Reduce {
            kind: ReduceKind::Mean,
            axes,
            keepdims: true,
        });
        let mean = self.emit_inner(mean_over.clone(), &[x], "mean")?;
        let centered = self.emit_inner(Op::Binary(BinaryOp::Sub), &[x, mean], "centered")?;
        let d2 = self.emit_inner(Op::Binary(BinaryOp::Mul), &[centered, centered], "squared")?;
        let var = self.emit_inner(mean_over, &[d2], "var")?;
        let eps = self.scalar("epsilon", self.ty(x).dtype, eps as f64);
        let var_eps = self.emit_inner(Op::Binary(BinaryOp::Add), &[var, eps], "var_eps")?;
        let std = self.emit_inner(Op::Unary(UnaryOp::Sqrt), &[var_eps], "std")?;
        Ok(Statistics {
            mean,
            centered,
            var,
            std,
        })
    }

    /// `(x - mean) / sqrt(var + epsilon)`, the statistics taken over `axes`.
    fn standardize(&mut self, x: ValueRef, axes: Vec<usize>, eps: f32) -> Res<ValueRef> {
        let st = self.statistics(x, axes, eps)?;
        self.emit_inner(
            Op::Binary(BinaryOp::Div),
            &[st.centered, st.std],
            "normalized",
        )
    }

    /// `y * scale + bias`, with scale and bias (of `extent` elements) along
    /// axis 1 of a rank-`rank` tensor.
    fn affine(
        &mut self,
        y: ValueRef,
        (scale, bias): (ValueRef, ValueRef),
        rank: usize,
        last: bool,
    ) -> Res<Vec<Option<ValueRef>>> {
        let mut along_1 = vec![1; rank - 1];
        along_1[0] = numel(&self.ty(scale).shape);
        let reshape = Op::Reshape(Reshape { shape: along_1 });
        let scale = self.emit_inner(reshape.clone(), &[scale], "scale")?;
        let bias = self.emit_inner(reshape, &[bias], "bias")?;
        let scaled = self.emit_inner(Op::Binary(BinaryOp::Mul), &[y, scale], "scaled")?;
        match last {
            true => self.emit(Op::Binary(BinaryOp::Add), &[scaled, bias]),
            false => Ok(vec![Some(self.emit_inner(
                Op::Binary(BinaryOp::Add),
                &[scaled, bias],
                "affine",
            )?)]),
        }
    }

    /// Checks that scale and bias hold `extent` elements each.
    fn per(&self, extent: usize, what: &str) -> Res<(ValueRef, ValueRef)> {
        let (scale, bias) = (self.input(1)?, self.input(2)?);
        for (v, name) in [(scale, "scale"), (bias, "bias")] {
            let s = self.ty(v).shape;
            if s != [extent] {
                return Err(self.err(format!(
                    "{name} has shape {s:?}, expected [{extent}] (one per {what})"
                )));
            }
        }
        Ok((scale, bias))
    }
}

/// InstanceNormalization: per sample and channel, standardized over the
/// spatial axes, then `* scale[c] + bias[c]`.
fn instance_norm(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let s = c.ty(x).shape;
    if s.len() < 3 {
        return Err(c.err(format!("input shape {s:?} has no spatial axes")));
    }
    let params = c.per(s[1], "channel")?;
    let eps = c.float("epsilon", 1e-5)?;
    let y = c.standardize(x, (2..s.len()).collect(), eps)?;
    c.affine(y, params, s.len(), true)
}

/// LayerNormalization asked for its Mean and InvStdDev outputs too: the ops it
/// is defined by, over the axes from `axis` on, each statistic an output.
pub(super) fn layer_norm_with_statistics(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let (x, scale) = (c.input(0)?, c.input(1)?);
    let rank = c.ty(x).shape.len();
    let axis = c.axis(c.int("axis", -1)?, rank)?;
    let eps = c.float("epsilon", 1e-5)?;
    let st = c.statistics(x, (axis..rank).collect(), eps)?;
    let inv = c.emit_inner(Op::Unary(UnaryOp::Reciprocal), &[st.std], "inv_std_dev")?;
    let y = c.emit_inner(Op::Binary(BinaryOp::Mul), &[st.centered, inv], "normalized")?;
    let mut y = c.emit_inner(Op::Binary(BinaryOp::Mul), &[y, scale], "scaled")?;
    if let Some(bias) = c.opt_input(2) {
        y = c.emit_inner(Op::Binary(BinaryOp::Add), &[y, bias], "biased")?;
    }
    Ok(vec![Some(y), Some(st.mean), Some(inv)])
}

/// BatchNormalization in training mode (opset 14 on): normalized with the
/// batch's own statistics, the mean and the population variance over every
/// axis but the channels, and the running statistics given as inputs 3 and 4
/// moved towards them: `running * momentum + batch * (1 - momentum)`.
pub(super) fn batch_norm_training(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let s = c.ty(x).shape;
    if s.len() < 2 {
        return Err(c.err(format!("input shape {s:?} has no channel axis")));
    }
    let params = c.per(s[1], "channel")?;
    let (eps, momentum) = (c.float("epsilon", 1e-5)?, c.float("momentum", 0.9)?);
    let axes = std::iter::once(0).chain(2..s.len()).collect();
    let st = c.statistics(x, axes, eps)?;
    let normalized = c.emit_inner(
        Op::Binary(BinaryOp::Div),
        &[st.centered, st.std],
        "normalized",
    )?;
    let mut outputs = c.affine(normalized, params, s.len(), false)?;
    let dtype = c.ty(x).dtype;
    let kept = c.scalar("momentum", dtype, momentum as f64);
    let moved = c.scalar("one_minus_momentum", dtype, 1.0 - momentum as f64);
    for (input, batch, name) in [(3, st.mean, "running_mean"), (4, st.var, "running_var")] {
        let running = c.input(input)?;
        if c.ty(running).shape != [s[1]] {
            return Err(c.err(format!(
                "{name} has shape {:?}, expected [{}] (one per channel)",
                c.ty(running).shape,
                s[1]
            )));
        }
        let batch = c.emit_inner(Op::Reshape(Reshape { shape: vec![s[1]] }), &[batch], name)?;
        let old = c.emit_inner(
            Op::Binary(BinaryOp::Mul),
            &[running, kept],
            &format!("{name}_kept"),
        )?;
        let new = c.emit_inner(
            Op::Binary(BinaryOp::Mul),
            &[batch, moved],
            &format!("{name}_moved"),
        )?;
        let updated = c.emit_inner(
            Op::Binary(BinaryOp::Add),
            &[old, new],
            &format!("{name}_updated"),
        )?;
        outputs.push(Some(updated));
    }
    Ok(outputs)
}

/// GroupNormalization: the channels split into `num_groups` groups, each
/// standardized over its channels and the spatial axes. Scale and bias are per
/// group at opset 18 and per channel from opset 21.
fn group_norm(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let s = c.ty(x).shape;
    if s.len() < 3 {
        return Err(c.err(format!("input shape {s:?} has no spatial axes")));
    }
    let groups = usize::try_from(c.int("num_groups", 0)?)
        .ok()
        .filter(|&g| g > 0 && s[1].is_multiple_of(g))
        .ok_or_else(|| {
            c.err(format!(
                "num_groups must be a positive divisor of the {} channels",
                s[1]
            ))
        })?;
    let eps = c.float("epsilon", 1e-5)?;
    let grouped = vec![s[0], groups, numel(&s[1..]) / groups];
    let xg = c.emit_inner(Op::Reshape(Reshape { shape: grouped }), &[x], "grouped")?;
    let yg = c.standardize(xg, vec![2], eps)?;
    let back = Op::Reshape(Reshape { shape: s.clone() });
    if c.opset < 21 {
        let params = c.per(groups, "group")?;
        let yg = c.affine(yg, params, 3, false)?[0].expect("affine gives a value");
        return c.emit(back, &[yg]);
    }
    let params = c.per(s[1], "channel")?;
    let y = c.emit_inner(back, &[yg], "ungrouped")?;
    c.affine(y, params, s.len(), true)
}

/// Hardmax: 1 where an element is the first maximum along `axis`, else 0 — an
/// ArgMax compared with the positions along the axis. Before opset 13 the input
/// is coerced to 2-D at `axis` first.
fn hardmax(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let ty = c.ty(x);
    let s = ty.shape.clone();
    let (x2, axis, shape) = if c.opset >= 13 {
        (x, c.axis(c.int("axis", -1)?, s.len())?, s.clone())
    } else {
        let axis = c.axis(c.int("axis", 1)?, s.len())?;
        let flat = vec![numel(&s[..axis]), numel(&s[axis..])];
        let x2 = c.emit_inner(
            Op::Reshape(Reshape {
                shape: flat.clone(),
            }),
            &[x],
            "flatten",
        )?;
        (x2, 1, flat)
    };
    let arg = Op::ArgReduce(ArgReduce {
        kind: ArgKind::Max,
        axis,
        keepdims: true,
        select_last_index: false,
    });
    let best = c.emit_inner(arg, &[x2], "argmax")?;
    let mut along = vec![1; shape.len()];
    along[axis] = shape[axis];
    let positions = Tensor::from_i64(along, (0..shape[axis] as i64).collect());
    let positions = c.inner_constant("positions", positions);
    let hit = c.emit_inner(Op::Binary(BinaryOp::Equal), &[positions, best], "hit")?;
    let to = Op::Cast(Cast {
        to: ty.dtype,
        saturate: true,
    });
    if shape == s {
        return c.emit(to, &[hit]);
    }
    let y2 = c.emit_inner(to, &[hit], "one_hot")?;
    c.emit(Op::Reshape(Reshape { shape: s }), &[y2])
}

/// One operand of an einsum: its value and the label of each axis.
#[derive(Clone)]
struct Term {
    value: ValueRef,
    labels: Vec<char>,
}

/// Einsum as Transpose, Reshape, Slice, ReduceSum and MatMul: a label repeated
/// within one operand takes its diagonal first; operands then combine left to
/// right, each pair as one batched matrix product over the labels they share.
/// Labels seen in one operand only and needed nowhere else are summed first.
fn einsum(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let equation: String = c
        .string("equation", "")?
        .chars()
        .filter(|ch| !ch.is_whitespace())
        .collect();
    let (lhs, rhs) = match equation.split_once("->") {
        Some((l, r)) => (l.to_string(), Some(r.to_string())),
        None => (equation.clone(), None),
    };
    let specs: Vec<&str> = lhs.split(',').collect();
    if specs.len() != c.inputs.len() {
        return Err(c.err(format!(
            "equation '{equation}' has {} operands, the node {} inputs",
            specs.len(),
            c.inputs.len()
        )));
    }
    // The ellipsis stands for the same broadcast axes in every operand: give
    // them labels no equation uses (digits), aligned from the right.
    let ellipsis_rank = specs
        .iter()
        .enumerate()
        .filter(|(_, s)| s.contains("..."))
        .map(|(i, s)| Ok(c.ty(c.input(i)?).shape.len().saturating_sub(s.len() - 3)))
        .collect::<Res<Vec<usize>>>()?
        .into_iter()
        .max()
        .unwrap_or(0);
    if ellipsis_rank > 10 {
        return Err(c.err("an ellipsis of more than 10 axes is not supported"));
    }
    let ellipsis: Vec<char> = (0..ellipsis_rank)
        .map(|k| char::from(b'0' + k as u8))
        .collect();
    let expand = |spec: &str, rank: Option<usize>| -> Res<Vec<char>> {
        let Some((before, after)) = spec.split_once("...") else {
            return Ok(spec.chars().collect());
        };
        let named = before.len() + after.len();
        let k = rank.map_or(ellipsis_rank, |r| r.saturating_sub(named));
        let mut labels: Vec<char> = before.chars().collect();
        labels.extend(&ellipsis[ellipsis_rank - k.min(ellipsis_rank)..]);
        labels.extend(after.chars());
        Ok(labels)
    };
    let mut terms = Vec::with_capacity(specs.len());
    for (i, spec) in specs.iter().enumerate() {
        let value = c.input(i)?;
        let rank = c.ty(value).shape.len();
        let labels = expand(spec, Some(rank))?;
        let letters = spec.replacen("...", "", 1);
        if labels.len() != rank || !letters.chars().all(|l| l.is_ascii_alphabetic()) {
            return Err(c.err(format!(
                "operand {i} ('{spec}') does not label the {rank} axes of its input"
            )));
        }
        terms.push(Term { value, labels });
    }
    let output: Vec<char> = match rhs {
        Some(r) => expand(&r, None)?,
        // Implicit output: the ellipsis, then the labels seen once, in order.
        None => {
            let mut once: Vec<char> = terms
                .iter()
                .flat_map(|t| t.labels.iter().copied())
                .filter(|l| l.is_ascii_alphabetic())
                .collect();
            once.sort_unstable();
            let single: Vec<char> = once
                .iter()
                .copied()
                .filter(|l| once.iter().filter(|m| *m == l).count() == 1)
                .collect();
            ellipsis.iter().copied().chain(single).collect()
        }
    };
    if let Some(l) = output
        .iter()
        .find(|l| !terms.iter().any(|t| t.labels.contains(l)))
    {
        return Err(c.err(format!("output label '{l}' is in no operand")));
    }
    if let Some(l) = output
        .iter()
        .find(|l| output.iter().filter(|m| m == l).count() > 1)
    {
        return Err(c.err(format!("output label '{l}' repeats")));
    }
    let terms = terms
        .into_iter()
        .enumerate()
        .map(|(i, t)| diagonals(c, t, i))
        .collect::<Res<Vec<Term>>>()?;

    let mut terms = terms.into_iter();
    let first = terms.next().expect("the equation has an operand");
    let rest: Vec<Term> = terms.collect();
    let needed_after =
        |k: usize, l: char| output.contains(&l) || rest[k..].iter().any(|t| t.labels.contains(&l));
    let mut acc = sum_unneeded(c, first, |l| needed_after(0, l))?;
    for (k, t) in rest.iter().enumerate() {
        let t = sum_unneeded(c, t.clone(), |l| {
            needed_after(k + 1, l) || acc.labels.contains(&l)
        })?;
        acc = contract(c, acc, t, |l| needed_after(k + 1, l))?;
    }
    match reordering(&acc, &output) {
        Some(perm) => c.emit(Op::Transpose(Transpose { perm }), &[acc.value]),
        None => c.emit(Op::Identity, &[acc.value]),
    }
}

/// `t` with each label that repeats in it reduced to its diagonal, one axis
/// labelled once: the repeated axes moved last and flattened, the diagonal of
/// k axes of extent n is every (1 + n + ... + n^(k-1))-th element of them.
fn diagonals(c: &mut NodeCtx, mut t: Term, operand: usize) -> Res<Term> {
    while let Some(&l) = t
        .labels
        .iter()
        .find(|&&l| t.labels.iter().filter(|&&m| m == l).count() > 1)
    {
        let shape = c.ty(t.value).shape;
        let (repeated, kept): (Vec<usize>, Vec<usize>) =
            (0..t.labels.len()).partition(|&a| t.labels[a] == l);
        let n = shape[repeated[0]];
        if let Some(&a) = repeated.iter().find(|&&a| shape[a] != n) {
            return Err(c.err(format!(
                "label '{l}' of operand {operand} has extents {n} and {}",
                shape[a]
            )));
        }
        let perm: Vec<usize> = kept.iter().chain(&repeated).copied().collect();
        let moved = match perm.iter().enumerate().all(|(i, &p)| i == p) {
            true => t.value,
            false => {
                let transpose = Op::Transpose(Transpose { perm });
                c.emit_inner(transpose, &[t.value], "diagonal_axes")?
            }
        };
        let mut flat: Vec<usize> = kept.iter().map(|&a| shape[a]).collect();
        let (mut block, mut step) = (1usize, 0usize);
        for _ in &repeated {
            step += block;
            block *= n;
        }
        flat.push(block);
        let flattened = reshaped(c, moved, flat, "diagonal_block")?;
        let slice = Op::Slice(Slice {
            axes: vec![SliceAxis {
                axis: kept.len(),
                start: 0,
                end: block as i64,
                step: step.max(1) as i64,
            }],
        });
        let value = c.emit_inner(slice, &[flattened], "diagonal")?;
        let mut labels: Vec<char> = kept.iter().map(|&a| t.labels[a]).collect();
        labels.push(l);
        t = Term { value, labels };
    }
    Ok(t)
}

/// Sums away the axes of `t` whose labels are not `needed`.
fn sum_unneeded(c: &mut NodeCtx, t: Term, needed: impl Fn(char) -> bool) -> Res<Term> {
    let axes: Vec<usize> = (0..t.labels.len())
        .filter(|&a| !needed(t.labels[a]))
        .collect();
    if axes.is_empty() {
        return Ok(t);
    }
    let labels = t.labels.iter().copied().filter(|&l| needed(l)).collect();
    let sum = Op::Reduce(Reduce {
        kind: ReduceKind::Sum,
        axes,
        keepdims: false,
    });
    let value = c.emit_inner(sum, &[t.value], "sum")?;
    Ok(Term { value, labels })
}

/// `value` with its axes in the order of `labels` (a transpose unless already so).
fn arrange(c: &mut NodeCtx, t: &Term, labels: &[char], what: &str) -> Res<ValueRef> {
    match reordering(t, labels) {
        Some(perm) => c.emit_inner(Op::Transpose(Transpose { perm }), &[t.value], what),
        None => Ok(t.value),
    }
}

/// The permutation that puts the axes of `t` in the order of `labels` (each a
/// label of `t`); `None` when they are in that order already.
fn reordering(t: &Term, labels: &[char]) -> Option<Vec<usize>> {
    let perm: Vec<usize> = labels
        .iter()
        .map(|l| {
            t.labels
                .iter()
                .position(|m| m == l)
                .expect("a label of the term")
        })
        .collect();
    let in_order = perm.iter().enumerate().all(|(i, &p)| i == p);
    (!in_order).then_some(perm)
}

/// `value` reshaped to `shape` (nothing when it has that shape).
fn reshaped(c: &mut NodeCtx, value: ValueRef, shape: Vec<usize>, what: &str) -> Res<ValueRef> {
    if c.ty(value).shape == shape {
        return Ok(value);
    }
    c.emit_inner(Op::Reshape(Reshape { shape }), &[value], what)
}

/// Two operands as one batched matrix product: labels in both that are still
/// `needed` are batch axes, the others in both are summed; the rest stay as
/// rows (from `a`) and columns (from `b`). The result's labels are batch, rows,
/// columns.
fn contract(c: &mut NodeCtx, a: Term, b: Term, needed: impl Fn(char) -> bool) -> Res<Term> {
    let in_b = |l: &char| b.labels.contains(l);
    let batch: Vec<char> = a
        .labels
        .iter()
        .copied()
        .filter(|l| in_b(l) && needed(*l))
        .collect();
    let summed: Vec<char> = a
        .labels
        .iter()
        .copied()
        .filter(|l| in_b(l) && !needed(*l))
        .collect();
    let rows: Vec<char> = a.labels.iter().copied().filter(|l| !in_b(l)).collect();
    let cols: Vec<char> = b
        .labels
        .iter()
        .copied()
        .filter(|l| !a.labels.contains(l))
        .collect();
    let extent = |t: &Term, c: &NodeCtx, l: char| {
        let at = t
            .labels
            .iter()
            .position(|&m| m == l)
            .expect("a label of the term");
        c.ty(t.value).shape[at]
    };
    let extents = |t: &Term, c: &NodeCtx, ls: &[char]| -> Vec<usize> {
        ls.iter().map(|&l| extent(t, c, l)).collect()
    };
    let mut batch_shape = Vec::with_capacity(batch.len());
    for &l in &batch {
        let (x, y) = (extent(&a, c, l), extent(&b, c, l));
        if x != y && x != 1 && y != 1 {
            return Err(c.err(format!("label '{l}' has extents {x} and {y}")));
        }
        batch_shape.push(x.max(y));
    }
    for &l in &summed {
        let (x, y) = (extent(&a, c, l), extent(&b, c, l));
        if x != y {
            return Err(c.err(format!("summed label '{l}' has extents {x} and {y}")));
        }
    }
    let (row_shape, col_shape) = (extents(&a, c, &rows), extents(&b, c, &cols));
    let k = numel(&extents(&a, c, &summed));

    let a_order: Vec<char> = [&batch[..], &rows, &summed].concat();
    let mut a_shape = extents(&a, c, &batch);
    a_shape.extend([numel(&row_shape), k]);
    let av = arrange(c, &a, &a_order, "lhs")?;
    let av = reshaped(c, av, a_shape, "lhs_matrix")?;

    let b_order: Vec<char> = [&batch[..], &summed, &cols].concat();
    let mut b_shape = extents(&b, c, &batch);
    b_shape.extend([k, numel(&col_shape)]);
    let bv = arrange(c, &b, &b_order, "rhs")?;
    let bv = reshaped(c, bv, b_shape, "rhs_matrix")?;

    let product = c.emit_inner(Op::MatMul, &[av, bv], "matmul")?;
    let shape = [batch_shape, row_shape, col_shape].concat();
    let value = reshaped(c, product, shape, "product")?;
    Ok(Term {
        value,
        labels: [batch, rows, cols].concat(),
    })
}
