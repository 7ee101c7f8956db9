//! Shape and dtype inference for every op. Errors are plain messages; the graph
//! wraps them with the span of the layer at fault.

use super::*;
use crate::core::ValueType;
use crate::core::{checked_numel, DType};

type Res<T> = Result<T, String>;

/// Numpy-style broadcast of two shapes.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Res<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i < rank - a.len() {
            1
        } else {
            a[i - (rank - a.len())]
        };
        let db = if i < rank - b.len() {
            1
        } else {
            b[i - (rank - b.len())]
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return Err(format!("shapes {a:?} and {b:?} do not broadcast")),
        };
    }
    Ok(out)
}

fn expect_inputs(inputs: &[&ValueType], min: usize, max: usize) -> Res<()> {
    if inputs.len() < min || inputs.len() > max {
        let want = if min == max {
            format!("{min}")
        } else {
            format!("{min} to {max}")
        };
        return Err(format!("expects {want} inputs, got {}", inputs.len()));
    }
    Ok(())
}

fn expect_float(t: &ValueType, what: &str) -> Res<()> {
    if !t.dtype.is_float() {
        return Err(format!("{what} must be a float tensor, got {}", t.dtype));
    }
    Ok(())
}

/// Output extent of one spatial axis of a sliding window.
pub fn window_output_extent(
    input: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
    pad_begin: usize,
    pad_end: usize,
    ceil_mode: bool,
) -> Res<usize> {
    if stride == 0 || dilation == 0 || kernel == 0 {
        return Err("kernel, stride and dilation must be positive".into());
    }
    // Attributes come from user files: overflow is an error, not a wrapped extent.
    let too_big = || {
        format!("window extents overflow (kernel {kernel}, dilation {dilation}, pads {pad_begin}/{pad_end})")
    };
    let eff = dilation
        .checked_mul(kernel - 1)
        .and_then(|e| e.checked_add(1))
        .ok_or_else(too_big)?;
    let padded = input
        .checked_add(pad_begin)
        .and_then(|p| p.checked_add(pad_end))
        .ok_or_else(too_big)?;
    if padded < eff {
        return Err(format!(
            "kernel extent {eff} is larger than the padded input extent {padded}"
        ));
    }
    let span = padded - eff;
    let mut out = if ceil_mode {
        span.div_ceil(stride) + 1
    } else {
        span / stride + 1
    };
    // With ceil_mode, the last window must start inside the input or the begin padding.
    if ceil_mode && out > 1 && (out - 1) * stride >= input + pad_begin {
        out -= 1;
    }
    Ok(out)
}

fn check_window(w: &Window, spatial: &[usize]) -> Res<()> {
    let r = spatial.len();
    if w.kernel.len() != r
        || w.strides.len() != r
        || w.dilations.len() != r
        || w.pads.len() != 2 * r
    {
        return Err(format!(
            "window attributes do not match {r} spatial axes (kernel {:?}, strides {:?}, dilations {:?}, pads {:?})",
            w.kernel, w.strides, w.dilations, w.pads
        ));
    }
    Ok(())
}

fn window_outputs(w: &Window, spatial: &[usize], ceil_mode: bool) -> Res<Vec<usize>> {
    check_window(w, spatial)?;
    (0..spatial.len())
        .map(|i| {
            window_output_extent(
                spatial[i],
                w.kernel[i],
                w.strides[i],
                w.dilations[i],
                w.pad_begin(i),
                w.pad_end(i),
                ceil_mode,
            )
        })
        .collect()
}

fn check_rank_at_least(t: &ValueType, r: usize, what: &str) -> Res<()> {
    if t.shape.len() < r {
        return Err(format!(
            "{what} must have rank at least {r}, got shape {:?}",
            t.shape
        ));
    }
    Ok(())
}

/// Infers the output types of `op` applied to inputs of the given types.
pub fn infer_outputs(op: &Op, inputs: &[&ValueType]) -> Res<Vec<ValueType>> {
    let out = match op {
        Op::Input | Op::Constant(_) => return Err("sources are not inferred".into()),
        Op::InLayout(l) => {
            if inputs.len() != l.inputs.len() {
                return Err(format!(
                    "expects {} inputs, got {}",
                    l.inputs.len(),
                    inputs.len()
                ));
            }
            let mut logical = Vec::with_capacity(inputs.len());
            for (t, (layout, shape)) in inputs.iter().zip(&l.inputs) {
                let want = layout.physical_shape(shape).map_err(|e| e.to_string())?;
                if t.shape != want {
                    return Err(format!(
                        "input shape {:?} is not {shape:?} laid out in {layout} ({want:?})",
                        t.shape
                    ));
                }
                logical.push(ValueType::new(t.dtype, shape.clone()));
            }
            let refs: Vec<&ValueType> = logical.iter().collect();
            let outs = infer_outputs(&l.inner, &refs)?;
            if outs.len() != l.outputs.len() {
                return Err(format!(
                    "{} output layouts for {} outputs",
                    l.outputs.len(),
                    outs.len()
                ));
            }
            outs.into_iter()
                .zip(&l.outputs)
                .map(|(t, (layout, _))| {
                    let shape = layout.physical_shape(&t.shape).map_err(|e| e.to_string())?;
                    Ok(ValueType::new(t.dtype, shape))
                })
                .collect::<Res<Vec<_>>>()?
        }
        Op::Conv(c) => {
            expect_inputs(inputs, 2, 3)?;
            let (x, w) = (inputs[0], inputs[1]);
            expect_float(x, "input")?;
            check_rank_at_least(x, 3, "input")?;
            if w.shape.len() != x.shape.len() {
                return Err(format!(
                    "weight shape {:?} does not match input shape {:?}",
                    w.shape, x.shape
                ));
            }
            let (cin, cout) = (x.shape[1], w.shape[0]);
            if c.group == 0 || cin % c.group != 0 || cout % c.group != 0 {
                return Err(format!(
                    "group {} does not divide input channels {cin} and output channels {cout}",
                    c.group
                ));
            }
            if w.shape[1] * c.group != cin {
                return Err(format!(
                    "weight shape {:?} expects {} input channels, input has {cin}",
                    w.shape,
                    w.shape[1] * c.group
                ));
            }
            if w.shape[2..] != c.window.kernel[..] {
                return Err(format!(
                    "kernel_shape {:?} does not match weight shape {:?}",
                    c.window.kernel, w.shape
                ));
            }
            if let Some(b) = inputs.get(2) {
                if b.shape != [cout] {
                    return Err(format!("bias shape {:?} is not [{cout}]", b.shape));
                }
            }
            let mut shape = vec![x.shape[0], cout];
            shape.extend(window_outputs(&c.window, &x.shape[2..], false)?);
            vec![ValueType::new(x.dtype, shape)]
        }
        Op::ConvTranspose(c) => {
            expect_inputs(inputs, 2, 3)?;
            let (x, w) = (inputs[0], inputs[1]);
            expect_float(x, "input")?;
            check_rank_at_least(x, 3, "input")?;
            if w.shape.len() != x.shape.len() || w.shape[0] != x.shape[1] {
                return Err(format!(
                    "weight shape {:?} does not match input shape {:?}",
                    w.shape, x.shape
                ));
            }
            if c.group == 0 || x.shape[1] % c.group != 0 {
                return Err(format!(
                    "group {} does not divide input channels {}",
                    c.group, x.shape[1]
                ));
            }
            let cout = w.shape[1] * c.group;
            if let Some(b) = inputs.get(2) {
                if b.shape != [cout] {
                    return Err(format!("bias shape {:?} is not [{cout}]", b.shape));
                }
            }
            check_window(&c.window, &x.shape[2..])?;
            let mut shape = vec![x.shape[0], cout];
            for i in 0..x.shape.len() - 2 {
                let w_ = &c.window;
                let full = w_.strides[i]
                    .checked_mul(x.shape[i + 2].max(1) - 1)
                    .and_then(|f| f.checked_add(c.output_padding.get(i).copied().unwrap_or(0)))
                    .and_then(|f| {
                        f.checked_add(w_.kernel[i].checked_sub(1)?.checked_mul(w_.dilations[i])?)
                    })
                    .and_then(|f| f.checked_add(1))
                    .ok_or_else(|| format!("output extents overflow (window {w_:?})"))?;
                let pads = w_
                    .pad_begin(i)
                    .checked_add(w_.pad_end(i))
                    .ok_or_else(|| format!("pads {:?} overflow", w_.pads))?;
                if full <= pads {
                    return Err(format!("pads {:?} remove the whole output", w_.pads));
                }
                shape.push(full - pads);
            }
            vec![ValueType::new(x.dtype, shape)]
        }
        Op::BatchNorm(_) => {
            expect_inputs(inputs, 5, 5)?;
            let x = inputs[0];
            expect_float(x, "input")?;
            check_rank_at_least(x, 2, "input")?;
            for (i, p) in inputs[1..].iter().enumerate() {
                if p.shape != [x.shape[1]] {
                    return Err(format!(
                        "parameter {} has shape {:?}, expected [{}]",
                        i + 1,
                        p.shape,
                        x.shape[1]
                    ));
                }
            }
            vec![x.clone()]
        }
        Op::Unary(_) => {
            expect_inputs(inputs, 1, 1)?;
            match op {
                Op::Unary(UnaryOp::Abs | UnaryOp::Neg | UnaryOp::Relu | UnaryOp::Clip { .. }) => {}
                _ => expect_float(inputs[0], "input")?,
            }
            vec![inputs[0].clone()]
        }
        Op::Binary(b) => {
            expect_inputs(inputs, 2, 2)?;
            let (x, y) = (inputs[0], inputs[1]);
            if x.dtype != y.dtype && *b != BinaryOp::Pow {
                return Err(format!(
                    "operands have different types {} and {}",
                    x.dtype, y.dtype
                ));
            }
            let shape = broadcast_shapes(&x.shape, &y.shape)?;
            let dtype = if b.is_comparison() {
                DType::Bool
            } else {
                x.dtype
            };
            vec![ValueType::new(dtype, shape)]
        }
        Op::Where => {
            expect_inputs(inputs, 3, 3)?;
            if inputs[0].dtype != DType::Bool {
                return Err(format!("condition must be bool, got {}", inputs[0].dtype));
            }
            if inputs[1].dtype != inputs[2].dtype {
                return Err(format!(
                    "branches have different types {} and {}",
                    inputs[1].dtype, inputs[2].dtype
                ));
            }
            let s = broadcast_shapes(&inputs[0].shape, &inputs[1].shape)?;
            let s = broadcast_shapes(&s, &inputs[2].shape)?;
            vec![ValueType::new(inputs[1].dtype, s)]
        }
        Op::Pool(p) => {
            expect_inputs(inputs, 1, 1)?;
            let x = inputs[0];
            // Max pooling compares, so it also takes integers; averaging needs floats.
            if p.kind == PoolKind::Avg || x.dtype == DType::Bool {
                expect_float(x, "input")?;
            }
            check_rank_at_least(x, 3, "input")?;
            let mut shape = x.shape[..2].to_vec();
            shape.extend(window_outputs(&p.window, &x.shape[2..], p.ceil_mode)?);
            vec![ValueType::new(x.dtype, shape)]
        }
        Op::GlobalPool(_) => {
            expect_inputs(inputs, 1, 1)?;
            let x = inputs[0];
            expect_float(x, "input")?;
            check_rank_at_least(x, 3, "input")?;
            let mut shape = x.shape[..2].to_vec();
            shape.extend(std::iter::repeat_n(1, x.shape.len() - 2));
            vec![ValueType::new(x.dtype, shape)]
        }
        Op::Gemm(Gemm {
            trans_a, trans_b, ..
        }) => {
            expect_inputs(inputs, 2, 3)?;
            let (a, b) = (inputs[0], inputs[1]);
            if a.shape.len() != 2 || b.shape.len() != 2 {
                return Err(format!(
                    "operands must be matrices, got {:?} and {:?}",
                    a.shape, b.shape
                ));
            }
            let (m, ka) = if *trans_a {
                (a.shape[1], a.shape[0])
            } else {
                (a.shape[0], a.shape[1])
            };
            let (kb, n) = if *trans_b {
                (b.shape[1], b.shape[0])
            } else {
                (b.shape[0], b.shape[1])
            };
            if ka != kb {
                return Err(format!(
                    "inner dimensions differ: A {:?} (trans {trans_a}), B {:?} (trans {trans_b})",
                    a.shape, b.shape
                ));
            }
            if let Some(c) = inputs.get(2) {
                let s = broadcast_shapes(&c.shape, &[m, n])?;
                if s != [m, n] {
                    return Err(format!(
                        "C shape {:?} does not broadcast to [{m}, {n}]",
                        c.shape
                    ));
                }
            }
            vec![ValueType::new(a.dtype, vec![m, n])]
        }
        Op::MatMul => {
            expect_inputs(inputs, 2, 2)?;
            let (a, b) = (inputs[0], inputs[1]);
            if a.shape.is_empty() || b.shape.is_empty() {
                return Err("operands must have rank at least 1".into());
            }
            let mut sa = a.shape.clone();
            let mut sb = b.shape.clone();
            let (va, vb) = (sa.len() == 1, sb.len() == 1);
            if va {
                sa.insert(0, 1);
            }
            if vb {
                sb.push(1);
            }
            let (m, k) = (sa[sa.len() - 2], sa[sa.len() - 1]);
            let (k2, n) = (sb[sb.len() - 2], sb[sb.len() - 1]);
            if k != k2 {
                return Err(format!(
                    "inner dimensions differ: {:?} x {:?}",
                    a.shape, b.shape
                ));
            }
            let mut shape = broadcast_shapes(&sa[..sa.len() - 2], &sb[..sb.len() - 2])?;
            if !va {
                shape.push(m);
            }
            if !vb {
                shape.push(n);
            }
            vec![ValueType::new(a.dtype, shape)]
        }
        Op::Reshape(Reshape { shape }) => {
            expect_inputs(inputs, 1, 1)?;
            let x = inputs[0];
            if checked_numel(shape) != Some(x.numel()) {
                return Err(format!(
                    "cannot reshape {:?} ({} elements) to {:?}",
                    x.shape,
                    x.numel(),
                    shape
                ));
            }
            vec![ValueType::new(x.dtype, shape.clone())]
        }
        Op::Transpose(Transpose { perm }) => {
            expect_inputs(inputs, 1, 1)?;
            let x = inputs[0];
            let mut seen = vec![false; x.shape.len()];
            if perm.len() != x.shape.len() || perm.iter().any(|&p| p >= seen.len()) {
                return Err(format!("perm {perm:?} does not fit shape {:?}", x.shape));
            }
            for &p in perm {
                if std::mem::replace(&mut seen[p], true) {
                    return Err(format!("perm {perm:?} repeats axis {p}"));
                }
            }
            vec![ValueType::new(
                x.dtype,
                perm.iter().map(|&p| x.shape[p]).collect(),
            )]
        }
        Op::Concat(Concat { axis }) => {
            if inputs.is_empty() {
                return Err("expects at least one input".into());
            }
            let first = inputs[0];
            if *axis >= first.shape.len() {
                return Err(format!(
                    "axis {axis} out of range for shape {:?}",
                    first.shape
                ));
            }
            let mut shape = first.shape.clone();
            shape[*axis] = 0;
            for t in inputs {
                let same_rest = t.shape.len() == first.shape.len()
                    && (0..t.shape.len()).all(|i| i == *axis || t.shape[i] == first.shape[i]);
                if !same_rest || t.dtype != first.dtype {
                    return Err(format!("inputs {first} and {t} differ outside axis {axis}"));
                }
                shape[*axis] += t.shape[*axis];
            }
            vec![ValueType::new(first.dtype, shape)]
        }
        Op::Split(Split { axis, sizes }) => {
            expect_inputs(inputs, 1, 1)?;
            let x = inputs[0];
            if *axis >= x.shape.len() {
                return Err(format!("axis {axis} out of range for shape {:?}", x.shape));
            }
            if sizes.iter().sum::<usize>() != x.shape[*axis] {
                return Err(format!(
                    "split sizes {sizes:?} do not add up to extent {} of axis {axis}",
                    x.shape[*axis]
                ));
            }
            sizes
                .iter()
                .map(|&s| {
                    let mut shape = x.shape.clone();
                    shape[*axis] = s;
                    ValueType::new(x.dtype, shape)
                })
                .collect()
        }
        Op::Slice(Slice { axes }) => {
            expect_inputs(inputs, 1, 1)?;
            let x = inputs[0];
            let mut shape = x.shape.clone();
            for a in axes {
                if a.axis >= shape.len() || a.step == 0 {
                    return Err(format!("bad slice {a:?} for shape {:?}", x.shape));
                }
                shape[a.axis] = slice_extent(a);
            }
            vec![ValueType::new(x.dtype, shape)]
        }
        Op::Gather(Gather { axis }) => {
            expect_inputs(inputs, 2, 2)?;
            let (x, idx) = (inputs[0], inputs[1]);
            if *axis >= x.shape.len() {
                return Err(format!("axis {axis} out of range for shape {:?}", x.shape));
            }
            if !matches!(idx.dtype, DType::I64 | DType::I32) {
                return Err(format!("indices must be i64 or i32, got {}", idx.dtype));
            }
            let mut shape = x.shape[..*axis].to_vec();
            shape.extend(&idx.shape);
            shape.extend(&x.shape[axis + 1..]);
            vec![ValueType::new(x.dtype, shape)]
        }
        Op::Pad(Pad { begins, ends, mode }) => {
            expect_inputs(inputs, 1, 1)?;
            let x = inputs[0];
            if begins.len() != x.shape.len() || ends.len() != x.shape.len() {
                return Err(format!(
                    "pads {begins:?}/{ends:?} do not match rank of {:?}",
                    x.shape
                ));
            }
            let mut shape = Vec::with_capacity(x.shape.len());
            for i in 0..x.shape.len() {
                let e = (x.shape[i] as i64)
                    .checked_add(begins[i])
                    .and_then(|e| e.checked_add(ends[i]))
                    .ok_or_else(|| format!("pads {begins:?}/{ends:?} overflow"))?;
                if e < 0 {
                    return Err(format!(
                        "pads {begins:?}/{ends:?} crop axis {i} of {:?} below zero",
                        x.shape
                    ));
                }
                if *mode == PadMode::Reflect
                    && (begins[i] >= x.shape[i] as i64 || ends[i] >= x.shape[i] as i64)
                {
                    return Err(format!(
                        "reflect pads {begins:?}/{ends:?} must be smaller than shape {:?}",
                        x.shape
                    ));
                }
                shape.push(e as usize);
            }
            vec![ValueType::new(x.dtype, shape)]
        }
        Op::Resize(r) => {
            expect_inputs(inputs, 1, 1)?;
            let x = inputs[0];
            if r.scales.len() != x.shape.len() || r.sizes.len() != x.shape.len() {
                return Err(format!(
                    "scales {:?} / sizes {:?} do not match shape {:?}",
                    r.scales, r.sizes, x.shape
                ));
            }
            vec![ValueType::new(x.dtype, r.sizes.clone())]
        }
        Op::Softmax(Softmax { axis }) | Op::LogSoftmax(LogSoftmax { axis }) => {
            expect_inputs(inputs, 1, 1)?;
            let x = inputs[0];
            expect_float(x, "input")?;
            if *axis >= x.shape.len() {
                return Err(format!("axis {axis} out of range for shape {:?}", x.shape));
            }
            vec![x.clone()]
        }
        Op::Reduce(Reduce { axes, keepdims, .. }) => {
            expect_inputs(inputs, 1, 1)?;
            let x = inputs[0];
            if axes.iter().any(|&a| a >= x.shape.len()) {
                return Err(format!(
                    "axes {axes:?} out of range for shape {:?}",
                    x.shape
                ));
            }
            let mut shape = Vec::new();
            for (i, &d) in x.shape.iter().enumerate() {
                if axes.contains(&i) {
                    if *keepdims {
                        shape.push(1);
                    }
                } else {
                    shape.push(d);
                }
            }
            vec![ValueType::new(x.dtype, shape)]
        }
        Op::LayerNorm(LayerNorm { axis, .. }) => {
            expect_inputs(inputs, 2, 3)?;
            let x = inputs[0];
            expect_float(x, "input")?;
            if *axis >= x.shape.len() {
                return Err(format!("axis {axis} out of range for shape {:?}", x.shape));
            }
            let norm = &x.shape[*axis..];
            for p in &inputs[1..] {
                if broadcast_shapes(&p.shape, norm)? != norm {
                    return Err(format!(
                        "scale/bias shape {:?} does not broadcast to normalised shape {norm:?}",
                        p.shape
                    ));
                }
            }
            vec![x.clone()]
        }
        Op::Cast(Cast { to }) => {
            expect_inputs(inputs, 1, 1)?;
            vec![ValueType::new(*to, inputs[0].shape.clone())]
        }
        Op::Expand(Expand { shape }) => {
            expect_inputs(inputs, 1, 1)?;
            let s = broadcast_shapes(&inputs[0].shape, shape)?;
            if &s != shape {
                return Err(format!("cannot expand {:?} to {shape:?}", inputs[0].shape));
            }
            vec![ValueType::new(inputs[0].dtype, s)]
        }
        Op::Tile(Tile { repeats }) => {
            expect_inputs(inputs, 1, 1)?;
            let x = inputs[0];
            if repeats.len() != x.shape.len() {
                return Err(format!(
                    "repeats {repeats:?} do not match rank of {:?}",
                    x.shape
                ));
            }
            let shape: Vec<usize> = x.shape.iter().zip(repeats).map(|(a, b)| a * b).collect();
            vec![ValueType::new(x.dtype, shape)]
        }
        Op::Identity => {
            expect_inputs(inputs, 1, 1)?;
            vec![inputs[0].clone()]
        }
        Op::LayoutTransform(LayoutTransform {
            from, to, logical, ..
        }) => {
            expect_inputs(inputs, 1, 1)?;
            let x = inputs[0];
            let want = from.physical_shape(logical).map_err(|e| e.to_string())?;
            if x.shape != want {
                return Err(format!(
                    "input shape {:?} is not {logical:?} laid out in {from} ({want:?})",
                    x.shape
                ));
            }
            let shape = to.physical_shape(logical).map_err(|e| e.to_string())?;
            vec![ValueType::new(x.dtype, shape)]
        }
        Op::PadWith(PadWith { begins, ends, .. }) | Op::Crop(Crop { begins, ends, .. }) => {
            expect_inputs(inputs, 1, 1)?;
            let x = inputs[0];
            if begins.len() != x.shape.len() || ends.len() != x.shape.len() {
                return Err(format!(
                    "amounts {begins:?}/{ends:?} do not match rank of {:?}",
                    x.shape
                ));
            }
            let grow = matches!(op, Op::PadWith(_));
            let mut shape = Vec::with_capacity(x.shape.len());
            for (i, &d) in x.shape.iter().enumerate() {
                let (b, e) = (begins[i], ends[i]);
                let extent = if grow {
                    d.checked_add(b).and_then(|v| v.checked_add(e))
                } else {
                    d.checked_sub(b).and_then(|v| v.checked_sub(e))
                };
                shape.push(extent.ok_or_else(|| {
                    format!(
                        "amounts {begins:?}/{ends:?} do not fit axis {i} of {:?}",
                        x.shape
                    )
                })?);
            }
            vec![ValueType::new(x.dtype, shape)]
        }
    };
    for t in &out {
        if checked_numel(&t.shape).is_none_or(|n| n.checked_mul(t.dtype.size_bytes()).is_none()) {
            return Err(format!("output shape {:?} overflows", t.shape));
        }
    }
    Ok(out)
}

/// Number of elements a clamped slice selects.
pub fn slice_extent(a: &SliceAxis) -> usize {
    if a.step > 0 {
        if a.end > a.start {
            ((a.end - a.start + a.step - 1) / a.step) as usize
        } else {
            0
        }
    } else if a.start > a.end {
        ((a.start - a.end - a.step - 1) / -a.step) as usize
    } else {
        0
    }
}
