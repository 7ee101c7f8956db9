//! Data movement on any dtype: each op computes the source index of every output
//! element and gathers (see `index`).

use super::index::{broadcast_indices, gather_axes, PermuteAxes};
use super::onnx::*;
use super::pad_flow::*;
use super::shape::*;
use super::te::*;
use super::*;
use crate::core::float8::is_float8;
use crate::core::{Rearrange, Tensor, TensorData, ValueType};
use crate::ops::{PadMode, SliceAxis};

impl OpDef for Reshape {
    fn name(&self) -> &'static str {
        "Reshape"
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let Reshape { shape } = self;

        let x = sole_input(inputs)?;
        if checked_numel(shape) != Some(x.numel()) {
            return Err(OpError::Shape(format!(
                "cannot reshape {:?} ({} elements) to {:?}",
                x.shape,
                x.numel(),
                shape
            )));
        }
        Ok(vec![ValueType::new(x.dtype, shape.clone())])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let out = &outputs[0];
        Ok(vec![x[0].reshaped(out.shape.clone())])
    }

    fn pad_flow(&self, inputs: &[PadValue], _: &[usize]) -> PadFlow {
        // It reads logical elements only; its output's padding holds what the
        // input's did (a relabelling keeps the bytes, a gather writes the
        // output's declared padding value, which the planner sets to this).
        pass_through(inputs)
    }

    fn compute(&self, cx: ComputeCx) -> Result<Defined, TirError> {
        let Reshape { shape } = self;

        let (ph, types) = cx.operands(self.name(), 1)?;
        let s = operand_shape(types, 0);
        let x = ph[0];
        cx.stage(shape, |i| {
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
        })
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let Reshape { shape } = self;

        let s = cx.b.reshape_target(&cx.in_types[0].shape, shape);
        cx.single("Reshape", &[cx.input(0), s], vec![])
    }
}

impl OpDef for Transpose {
    fn name(&self) -> &'static str {
        "Transpose"
    }

    fn moves_data(&self) -> bool {
        true
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let Transpose { perm } = self;

        let x = sole_input(inputs)?;
        let mut seen = vec![false; x.shape.len()];
        if perm.len() != x.shape.len() || perm.iter().any(|&p| p >= seen.len()) {
            return Err(OpError::Attribute(format!(
                "perm {perm:?} does not fit shape {:?}",
                x.shape
            )));
        }
        for &p in perm {
            if std::mem::replace(&mut seen[p], true) {
                return Err(OpError::Attribute(format!(
                    "perm {perm:?} repeats axis {p}"
                )));
            }
        }
        Ok(vec![ValueType::new(
            x.dtype,
            perm.iter().map(|&p| x.shape[p]).collect(),
        )])
    }

    fn eval(&self, x: &[&Tensor], _: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        Ok(vec![transpose(&self.perm, x[0])])
    }

    fn axis_reads(&self, _: &[&[usize]], out: &[usize]) -> Option<Vec<Vec<AxisRead>>> {
        let reads = self.perm.iter().zip(out);
        Some(vec![reads
            .map(|(&p, &n)| AxisRead::along(p, n, Some))
            .collect()])
    }

    fn pad_flow(&self, inputs: &[PadValue], _: &[usize]) -> PadFlow {
        // A transpose moves the padding with its axis.
        pass_through(inputs)
    }

    fn layout_role(&self) -> LayoutRole {
        LayoutRole::Sink
    }

    fn compute(&self, cx: ComputeCx) -> Result<Defined, TirError> {
        let Transpose { perm } = self;

        let (ph, types) = cx.operands(self.name(), 1)?;
        let s: Vec<usize> = perm.iter().map(|&a| types[0].shape[a]).collect();
        let x = ph[0];
        cx.stage(&s, |i| {
            // Output axis k is input axis perm[k].
            let mut idx = vec![Expr::Int(0); perm.len()];
            for (k, &a) in perm.iter().enumerate() {
                idx[a] = i[k].clone();
            }
            x.at(&idx)
        })
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let Transpose { perm } = self;
        cx.single(
            "Transpose",
            cx.inputs,
            vec![("perm", Attr::Ints(i64s(perm)))],
        )
    }
}

impl OpDef for Concat {
    fn name(&self) -> &'static str {
        "Concat"
    }

    fn moves_data(&self) -> bool {
        true
    }

    fn moved_inputs(&self, inputs: usize) -> usize {
        inputs
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let Concat { axis } = self;

        if inputs.is_empty() {
            return Err(OpError::Arity("expects at least one input".into()));
        }
        let first = inputs[0];
        if *axis >= first.shape.len() {
            return Err(OpError::Attribute(format!(
                "axis {axis} out of range for shape {:?}",
                first.shape
            )));
        }
        let mut shape = first.shape.clone();
        shape[*axis] = 0;
        for t in inputs {
            let same_rest = t.shape.len() == first.shape.len()
                && (0..t.shape.len()).all(|i| i == *axis || t.shape[i] == first.shape[i]);
            if !same_rest || t.dtype != first.dtype {
                return Err(OpError::Shape(format!(
                    "inputs {first} and {t} differ outside axis {axis}"
                )));
            }
            shape[*axis] += t.shape[*axis];
        }
        Ok(vec![ValueType::new(first.dtype, shape)])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let out = &outputs[0];
        let Concat { axis } = self;
        Ok(vec![concat(*axis, x, out)?])
    }

    /// Each input reads its own stretch of the joined axis.
    fn axis_reads(&self, xs: &[&[usize]], out: &[usize]) -> Option<Vec<Vec<AxisRead>>> {
        let mut first = 0;
        let reads = |x: &&[usize]| {
            let (lo, n) = (first, *x.get(self.axis)?);
            first += n;
            let read = |(a, &extent): (usize, &usize)| match a == self.axis {
                true => AxisRead::along(a, extent, |i| (lo..lo + n).contains(&i).then(|| i - lo)),
                false => AxisRead::along(a, extent, Some),
            };
            Some(out.iter().enumerate().map(read).collect())
        };
        xs.iter().map(reads).collect()
    }

    fn pad_flow(&self, inputs: &[PadValue], padded: &[usize]) -> PadFlow {
        pieces_pad_flow(self.axis, inputs, padded)
    }

    fn layout_role(&self) -> LayoutRole {
        LayoutRole::Agnostic
    }

    fn runs_in(&self, l: &Layout, ins: &[&ValueType]) -> bool {
        let Concat { axis } = self;

        unblocked(l, &[*axis])
            || blocks_divide(
                l,
                *axis,
                &ins.iter().map(|t| t.shape[*axis]).collect::<Vec<_>>(),
            )
    }

    fn compute(&self, cx: ComputeCx) -> Result<Defined, TirError> {
        let Concat { axis } = self;

        let (ph, types) = cx.operands(self.name(), 1)?;
        let a = *axis;
        let mut out = operand_shape(types, 0);
        out[a] = types.iter().map(|t| t.shape[a]).sum();
        let parts: Vec<(TeTensor, usize)> = ph
            .iter()
            .zip(types)
            .map(|(t, ty)| (*t, ty.shape[a]))
            .collect();
        cx.stage(&out, |i| {
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
        })
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let Concat { axis } = self;
        cx.single("Concat", cx.inputs, vec![("axis", Attr::Int(*axis as i64))])
    }
}

impl OpDef for Split {
    fn name(&self) -> &'static str {
        "Split"
    }

    fn moves_data(&self) -> bool {
        true
    }

    fn num_outputs(&self) -> usize {
        self.sizes.len()
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let Split { axis, sizes } = self;

        let x = sole_input(inputs)?;
        if *axis >= x.shape.len() {
            return Err(OpError::Attribute(format!(
                "axis {axis} out of range for shape {:?}",
                x.shape
            )));
        }
        if sizes.iter().sum::<usize>() != x.shape[*axis] {
            return Err(OpError::Attribute(format!(
                "split sizes {sizes:?} do not add up to extent {} of axis {axis}",
                x.shape[*axis]
            )));
        }
        Ok(sizes
            .iter()
            .map(|&s| {
                let mut shape = x.shape.clone();
                shape[*axis] = s;
                ValueType::new(x.dtype, shape)
            })
            .collect())
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let Split { axis, sizes } = self;
        split(*axis, sizes, x[0], outputs)
    }

    fn pad_flow(&self, inputs: &[PadValue], padded: &[usize]) -> PadFlow {
        pieces_pad_flow(self.axis, inputs, padded)
    }

    fn layout_role(&self) -> LayoutRole {
        LayoutRole::Agnostic
    }

    fn runs_in(&self, l: &Layout, _: &[&ValueType]) -> bool {
        let Split { axis, sizes } = self;

        unblocked(l, &[*axis]) || blocks_divide(l, *axis, sizes)
    }

    fn to_onnx(&self, cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let Split { axis, sizes } = self;

        let s = cx.b.ints("split", &i64s(sizes));
        let outs: Vec<String> = (0..cx.outputs.len())
            .map(|i| cx.b.fresh(&cx.outputs[i]))
            .collect();
        cx.b.node_multi(
            "Split",
            &[cx.input(0), s],
            vec![("axis", Attr::Int(*axis as i64))],
            &outs,
        );
        Ok(outs)
    }
}

impl OpDef for Slice {
    fn name(&self) -> &'static str {
        "Slice"
    }

    fn moves_data(&self) -> bool {
        true
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let Slice { axes } = self;

        let x = sole_input(inputs)?;
        let mut shape = x.shape.clone();
        for a in axes {
            if a.axis >= shape.len() || a.step == 0 {
                return Err(OpError::Attribute(format!(
                    "bad slice {a:?} for shape {:?}",
                    x.shape
                )));
            }
            shape[a.axis] = slice_extent(a);
        }
        Ok(vec![ValueType::new(x.dtype, shape)])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let out = &outputs[0];
        let Slice { axes } = self;
        Ok(vec![slice(axes, x[0], out)?])
    }

    fn axis_reads(&self, xs: &[&[usize]], out: &[usize]) -> Option<Vec<Vec<AxisRead>>> {
        let [x] = xs else { return None };
        let mut reads: Vec<AxisRead> = (out.iter().enumerate())
            .map(|(a, &n)| AxisRead::along(a, n, Some))
            .collect();
        for s in &self.axes {
            let read = AxisRead::along(s.axis, out[s.axis], |i| {
                let j = s.start + i as i64 * s.step;
                usize::try_from(j).ok().filter(|&j| j < x[s.axis])
            });
            // A slice reads inside its input; anything else is left to
            // evaluation.
            if read.index.contains(&None) {
                return None;
            }
            reads[s.axis] = read;
        }
        Some(vec![reads])
    }

    fn pad_flow(&self, inputs: &[PadValue], padded: &[usize]) -> PadFlow {
        let padded_in = |axes: &[usize]| padded.iter().any(|a| axes.contains(a));
        let Slice { axes } = self;

        let sliced: Vec<usize> = axes.iter().map(|a| a.axis).collect();
        let mut flow = pass_through(inputs);
        if padded_in(&sliced) {
            flow.inputs[0] = Requirement::Unsupported;
        }
        flow
    }

    fn layout_role(&self) -> LayoutRole {
        LayoutRole::Agnostic
    }

    fn runs_in(&self, l: &Layout, _: &[&ValueType]) -> bool {
        let Slice { axes } = self;
        axes.iter().all(|s| {
            unblocked(l, &[s.axis])
                || (s.step == 1 && blocks_divide(l, s.axis, &[s.start as usize, s.end as usize]))
        })
    }

    fn compute(&self, cx: ComputeCx) -> Result<Defined, TirError> {
        let Slice { axes } = self;

        let (ph, types) = cx.operands(self.name(), 1)?;
        let s = operand_shape(types, 0);
        let refs: Vec<&ValueType> = types.iter().collect();
        let out = self.infer(&refs)?;
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
        cx.stage(&out, |i| {
            let mut idx = i.to_vec();
            for a in axes {
                idx[a.axis] = Expr::Int(a.start) + i[a.axis].clone() * Expr::Int(a.step);
            }
            x.at(&idx)
        })
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let Slice { axes } = self;

        let extent = |a: usize| cx.in_types[0].shape[a] as i64;
        let ax: Vec<i64> = axes.iter().map(|s| s.axis as i64).collect();
        let starts: Vec<i64> = axes.iter().map(|s| s.start).collect();
        // End -1 with a negative step runs to the front: ONNX reads -1 as
        // the last element, so write a value below -extent instead.
        let ends: Vec<i64> = axes
            .iter()
            .map(|s| {
                if s.end < 0 {
                    -extent(s.axis) - 1
                } else {
                    s.end
                }
            })
            .collect();
        let steps: Vec<i64> = axes.iter().map(|s| s.step).collect();
        let ins = [
            cx.input(0),
            cx.b.ints("starts", &starts),
            cx.b.ints("ends", &ends),
            cx.b.ints("axes", &ax),
            cx.b.ints("steps", &steps),
        ];
        cx.single("Slice", &ins, vec![])
    }
}

impl OpDef for Gather {
    fn name(&self) -> &'static str {
        "Gather"
    }

    fn moves_data(&self) -> bool {
        true
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let Gather { axis } = self;

        expect_inputs(inputs, 2, 2)?;
        let (x, idx) = (inputs[0], inputs[1]);
        if *axis >= x.shape.len() {
            return Err(OpError::Attribute(format!(
                "axis {axis} out of range for shape {:?}",
                x.shape
            )));
        }
        if !matches!(idx.dtype, DType::I64 | DType::I32) {
            return Err(OpError::DType(format!(
                "indices must be i64 or i32, got {}",
                idx.dtype
            )));
        }
        let mut shape = x.shape[..*axis].to_vec();
        shape.extend(&idx.shape);
        shape.extend(&x.shape[axis + 1..]);
        Ok(vec![ValueType::new(x.dtype, shape)])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let out = &outputs[0];
        let Gather { axis } = self;
        Ok(vec![gather(*axis, x[0], x[1], out)?])
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let Gather { axis } = self;
        cx.single("Gather", cx.inputs, vec![("axis", Attr::Int(*axis as i64))])
    }
}

impl OpDef for Pad {
    fn name(&self) -> &'static str {
        "Pad"
    }

    /// Reflect, edge and wrap padding copy input elements; constant padding
    /// writes a value of its own.
    fn moves_data(&self) -> bool {
        !matches!(self.mode, PadMode::Constant(_))
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let Pad { begins, ends, mode } = self;

        let x = sole_input(inputs)?;
        if begins.len() != x.shape.len() || ends.len() != x.shape.len() {
            return Err(OpError::Attribute(format!(
                "pads {begins:?}/{ends:?} do not match rank of {:?}",
                x.shape
            )));
        }
        let mut shape = Vec::with_capacity(x.shape.len());
        for i in 0..x.shape.len() {
            let e = (x.shape[i] as i64)
                .checked_add(begins[i])
                .and_then(|e| e.checked_add(ends[i]))
                .ok_or_else(|| OpError::TooLarge(format!("pads {begins:?}/{ends:?} overflow")))?;
            if e < 0 {
                return Err(OpError::Attribute(format!(
                    "pads {begins:?}/{ends:?} crop axis {i} of {:?} below zero",
                    x.shape
                )));
            }
            if *mode == PadMode::Reflect
                && (begins[i] >= x.shape[i] as i64 || ends[i] >= x.shape[i] as i64)
            {
                return Err(OpError::Attribute(format!(
                    "reflect pads {begins:?}/{ends:?} must be smaller than shape {:?}",
                    x.shape
                )));
            }
            shape.push(e as usize);
        }
        Ok(vec![ValueType::new(x.dtype, shape)])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let out = &outputs[0];
        let Pad {
            begins,
            ends: _,
            mode,
        } = self;
        Ok(vec![pad(begins, *mode, x[0], out)?])
    }

    /// Constant padding reads nothing at the border; edge padding reads the
    /// nearest input index.
    fn axis_reads(&self, xs: &[&[usize]], out: &[usize]) -> Option<Vec<Vec<AxisRead>>> {
        let [x] = xs else { return None };
        let edge = match self.mode {
            PadMode::Constant(_) => false,
            PadMode::Edge => true,
            _ => return None,
        };
        let read = |a: usize| {
            AxisRead::along(a, out[a], |i| {
                let j = i as i64 - self.begins[a];
                match usize::try_from(j) {
                    Ok(j) if j < x[a] => Some(j),
                    _ if !edge || x[a] == 0 => None,
                    _ => Some(j.clamp(0, x[a] as i64 - 1) as usize),
                }
            })
        };
        Some(vec![(0..out.len()).map(read).collect()])
    }

    fn layout_role(&self) -> LayoutRole {
        LayoutRole::Agnostic
    }

    /// Any axis the layout does not block; a blocked one too when a constant
    /// is added there in whole blocks before the input, whose extent fills
    /// whole blocks (a zero channel padding in NCHW16c: the input's blocks
    /// keep their bytes, and the new channels are new blocks and the tail of
    /// the last one).
    fn runs_in(&self, l: &Layout, ins: &[&ValueType]) -> bool {
        let Pad { begins, ends, mode } = self;

        let whole_blocks = |a: usize| {
            let extent = ins.first().map(|x| x.shape[a]);
            matches!(mode, PadMode::Constant(_))
                && begins[a] >= 0
                && ends[a] >= 0
                && extent.is_some_and(|n| blocks_divide(l, a, &[begins[a] as usize, n]))
        };
        (0..begins.len())
            .all(|a| (begins[a] == 0 && ends[a] == 0) || unblocked(l, &[a]) || whole_blocks(a))
    }

    /// The layout's padding on an axis this op leaves alone (channels, while the
    /// op pads H and W) goes through: at the new border it holds what every mode
    /// writes there, the constant for `Constant` and the padding itself otherwise.
    /// An input without layout padding leaves the op to write all of the
    /// output's (the tail of the last block of an axis it pads): the constant.
    fn pad_flow(&self, inputs: &[PadValue], padded: &[usize]) -> PadFlow {
        let touched = |a: usize| self.begins[a] != 0 || self.ends[a] != 0;
        if padded.iter().any(|&a| touched(a)) {
            return refuse_padded(inputs, padded);
        }
        let flow = pass_through(inputs);
        let output = match self.mode {
            PadMode::Constant(v) if padded.is_empty() => PadValue::Known(v),
            PadMode::Constant(v) if flow.output != PadValue::Known(v) => PadValue::Undef,
            _ => flow.output,
        };
        PadFlow { output, ..flow }
    }

    fn compute(&self, cx: ComputeCx) -> Result<Defined, TirError> {
        let (g, ph, types, sfx) = cx.parts();
        let arity = |n: usize| check_arity(self.name(), types, n);
        match self {
            Pad {
                begins,
                ends,
                mode: PadMode::Constant(value),
            } => {
                arity(1)?;
                let s = operand_shape(types, 0);
                let out: Vec<i64> = (0..s.len())
                    .map(|k| e(s[k]) + begins[k] + ends[k])
                    .collect();
                if out.iter().any(|&d| d <= 0) {
                    return Err(TirError::Definition(format!(
                        "padding {begins:?}/{ends:?} leaves no element of {s:?}"
                    )));
                }
                let x = ph[0];
                Ok(Defined::output(g.compute(
                    &format!("Y{sfx}"),
                    &out,
                    |i| {
                        let mut inside = Expr::Int(1);
                        let mut idx = vec![];
                        for (k, &n) in s.iter().enumerate() {
                            let src = i[k].clone() - Expr::Int(begins[k]);
                            inside = inside.and(src.clone().ge(ex(0))).and(src.clone().lt(ex(n)));
                            idx.push(src.max(ex(0)).min(ex(n - 1)));
                        }
                        Expr::select(inside, x.at(&idx), *value as f64)
                    },
                )?))
            }
            _ => Err(unsupported(self.name(), "not an op of this library")),
        }
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let Pad { begins, ends, mode } = self;

        let pads: Vec<i64> = begins.iter().chain(ends).copied().collect();
        let p = cx.b.ints("pads", &pads);
        let (mode, value) = match mode {
            PadMode::Constant(v) => ("constant", Some(*v)),
            PadMode::Reflect => ("reflect", None),
            PadMode::Edge => ("edge", None),
            PadMode::Wrap => ("wrap", None),
        };
        let mut ins = vec![cx.input(0), p];
        if let Some(v) = value {
            let t = Tensor::new(vec![], scalar(cx.in_types[0].dtype, v as f64));
            ins.push(cx.b.constant("value", &t));
        }
        cx.single("Pad", &ins, vec![("mode", Attr::Str(mode))])
    }
}

impl OpDef for Cast {
    fn name(&self) -> &'static str {
        "Cast"
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let Cast { to, .. } = self;

        Ok(vec![ValueType::new(*to, sole_input(inputs)?.shape.clone())])
    }

    fn eval(&self, x: &[&Tensor], _: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let Cast { to, saturate } = self;
        Ok(vec![x[0].cast_saturating(*to, *saturate)])
    }

    /// A cast between float types keeps the padding value (exactly, for the
    /// values a pad holds: 0, ±inf, NaN); other casts refuse padded axes, and
    /// so do casts to float8, where ±inf may saturate.
    fn pad_flow(&self, inputs: &[PadValue], padded: &[usize]) -> PadFlow {
        if !self.to.is_float() || is_float8(self.to) {
            return refuse_padded(inputs, padded);
        }
        pass_through(inputs)
    }

    fn layout_role(&self) -> LayoutRole {
        LayoutRole::Agnostic
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let Cast { to, saturate } = self;
        let mut attrs = vec![("to", Attr::Int(to.onnx_code() as i64))];
        if !saturate && is_float8(*to) {
            attrs.push(("saturate", Attr::Int(0)));
        }
        cx.single("Cast", cx.inputs, attrs)
    }

    /// Float8 and `saturate` came in opset 19.
    fn min_onnx_opset(&self) -> i64 {
        if is_float8(self.to) {
            19
        } else {
            17
        }
    }
}

impl OpDef for BitCast {
    fn name(&self) -> &'static str {
        "BitCast"
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let x = sole_input(inputs)?;
        // 4-bit integers are stored a byte each here, but are half as wide.
        let bits = |d: DType| match d {
            DType::I4 | DType::U4 => 4,
            d => 8 * d.size_bytes(),
        };
        if bits(x.dtype) != bits(self.to) {
            return Err(OpError::DType(format!(
                "BitCast reads each element's bits as another type of the same width: {} is {} bits, {} is {}",
                x.dtype.name(),
                bits(x.dtype),
                self.to.name(),
                bits(self.to)
            )));
        }
        Ok(vec![ValueType::new(self.to, x.shape.clone())])
    }

    fn eval(&self, x: &[&Tensor], _: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let y = x[0]
            .bitcast(self.to)
            .map_err(|e| OpError::DType(e.to_string()))?;
        Ok(vec![y])
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let to = ("to", Attr::Int(self.to.onnx_code() as i64));
        cx.single("BitCast", cx.inputs, vec![to])
    }

    /// BitCast came in opset 26.
    fn min_onnx_opset(&self) -> i64 {
        26
    }
}

impl OpDef for Expand {
    fn name(&self) -> &'static str {
        "Expand"
    }

    fn moves_data(&self) -> bool {
        true
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let Expand { shape } = self;

        let s = broadcast_shapes(&sole_input(inputs)?.shape, shape)?;
        if &s != shape {
            return Err(OpError::Shape(format!(
                "cannot expand {:?} to {shape:?}",
                inputs[0].shape
            )));
        }
        Ok(vec![ValueType::new(inputs[0].dtype, s)])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let out = &outputs[0];
        Ok(vec![expand(x[0], out)])
    }

    /// Numpy broadcasting: a unit input axis reads index 0, and the leading
    /// output axes walk none.
    fn axis_reads(&self, xs: &[&[usize]], out: &[usize]) -> Option<Vec<Vec<AxisRead>>> {
        let [x] = xs else { return None };
        let lead = out.len().checked_sub(x.len())?;
        let read = |(a, &n): (usize, &usize)| match a.checked_sub(lead) {
            None => AxisRead {
                axis: None,
                index: vec![Some(0); n],
            },
            Some(b) if x[b] == 1 => AxisRead::along(b, n, |_| Some(0)),
            Some(b) => AxisRead::along(b, n, Some),
        };
        Some(vec![out.iter().enumerate().map(read).collect()])
    }

    fn compute(&self, cx: ComputeCx) -> Result<Defined, TirError> {
        let Expand { shape } = self;

        let (ph, types) = cx.operands(self.name(), 1)?;
        let s = operand_shape(types, 0);
        let out = broadcast_shapes(&s, shape)?;
        let x = ph[0];
        cx.stage(&out, |i| x.at(&broadcast_index(i, &s)))
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let Expand { shape } = self;

        // With a symbolic batch, an axis 0 that passes through is 1: broadcasting
        // keeps the input's.
        let mut target = i64s(shape);
        let from = &cx.in_types[0].shape;
        if cx.b.batch().is_some() && from.len() == shape.len() && from.first() == shape.first() {
            target[0] = 1;
        }
        let s = cx.b.ints("shape", &target);
        cx.single("Expand", &[cx.input(0), s], vec![])
    }
}

impl OpDef for Tile {
    fn name(&self) -> &'static str {
        "Tile"
    }

    fn moves_data(&self) -> bool {
        true
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let Tile { repeats } = self;

        let x = sole_input(inputs)?;
        if repeats.len() != x.shape.len() {
            return Err(OpError::Attribute(format!(
                "repeats {repeats:?} do not match rank of {:?}",
                x.shape
            )));
        }
        let shape: Vec<usize> = x.shape.iter().zip(repeats).map(|(a, b)| a * b).collect();
        Ok(vec![ValueType::new(x.dtype, shape)])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let out = &outputs[0];
        Ok(vec![tile(x[0], out)?])
    }

    fn axis_reads(&self, xs: &[&[usize]], out: &[usize]) -> Option<Vec<Vec<AxisRead>>> {
        let [x] = xs else { return None };
        let read = |(a, &n): (usize, &usize)| AxisRead::along(a, n, |i| Some(i % x[a]));
        (x.len() == out.len() && !x.contains(&0))
            .then(|| vec![out.iter().enumerate().map(read).collect()])
    }

    fn compute(&self, cx: ComputeCx) -> Result<Defined, TirError> {
        let Tile { repeats } = self;

        let (ph, types) = cx.operands(self.name(), 1)?;
        let s = operand_shape(types, 0);
        let out: Vec<usize> = s.iter().zip(repeats).map(|(d, r)| d * r).collect();
        let x = ph[0];
        cx.stage(&out, |i| {
            let idx: Vec<Expr> = i
                .iter()
                .zip(&s)
                .map(|(v, &d)| v.clone().floormod(ex(d)))
                .collect();
            x.at(&idx)
        })
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let Tile { repeats } = self;

        let r = cx.b.ints("repeats", &i64s(repeats));
        cx.single("Tile", &[cx.input(0), r], vec![])
    }
}

impl OpDef for Identity {
    fn name(&self) -> &'static str {
        "Identity"
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        Ok(vec![sole_input(inputs)?.clone()])
    }

    fn eval(&self, x: &[&Tensor], _: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        Ok(vec![x[0].clone()])
    }

    fn pad_flow(&self, inputs: &[PadValue], _: &[usize]) -> PadFlow {
        pass_through(inputs)
    }

    fn layout_role(&self) -> LayoutRole {
        LayoutRole::Agnostic
    }

    fn compute(&self, cx: ComputeCx) -> Result<Defined, TirError> {
        let (ph, types) = cx.operands(self.name(), 1)?;
        let x = ph[0];
        cx.stage(&types[0].shape, |i| x.at(i))
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        cx.single("Identity", cx.inputs, vec![])
    }
}

/// The elements `values` of a tensor of `shape` with its axes permuted by
/// `perm`: [`transpose`] of elements not yet in a tensor (weights read
/// straight from a mapped file).
pub fn transposed_values<T: Copy>(perm: &[usize], shape: &[usize], values: &[T]) -> Vec<T> {
    PermuteAxes { shape, perm }.apply(values)
}

/// `x` with its axes permuted: output axis k is input axis `perm[k]`.
pub fn transpose(perm: &[usize], x: &Tensor) -> Tensor {
    let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
    let data = x.data.rearrange(PermuteAxes {
        shape: &x.shape,
        perm,
    });
    Tensor::new(shape, data)
}

pub(super) fn expand(x: &Tensor, out: &ValueType) -> Tensor {
    let src = broadcast_indices(&x.shape, &out.shape);
    Tensor::new(out.shape.clone(), x.data.gather(src.into_iter()))
}

fn identity_maps(shape: &[usize]) -> Vec<Vec<Option<usize>>> {
    shape.iter().map(|&n| (0..n).map(Some).collect()).collect()
}

pub(super) fn tile(x: &Tensor, out: &ValueType) -> Result<Tensor, OpError> {
    let maps: Vec<Vec<Option<usize>>> = x
        .shape
        .iter()
        .zip(&out.shape)
        .map(|(&n, &m)| (0..m).map(|o| Some(o % n)).collect())
        .collect();
    gather_axes(x, &maps, 0.0)
}

pub(super) fn slice(axes: &[SliceAxis], x: &Tensor, out: &ValueType) -> Result<Tensor, OpError> {
    let mut maps = identity_maps(&x.shape);
    let mut seen = vec![false; x.rank()];
    for a in axes {
        if std::mem::replace(&mut seen[a.axis], true) {
            return Err(OpError::Attribute(format!(
                "axis {} is sliced twice",
                a.axis
            )));
        }
        let dim = x.shape[a.axis] as i64;
        maps[a.axis] = (0..out.shape[a.axis] as i64)
            .map(|j| {
                let c = a.start + j * a.step;
                (0..dim).contains(&c).then_some(c as usize)
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                OpError::Attribute(format!("slice {a:?} reads outside axis extent {dim}"))
            })?
            .into_iter()
            .map(Some)
            .collect();
    }
    gather_axes(x, &maps, 0.0)
}

pub(super) fn split(
    axis: usize,
    sizes: &[usize],
    x: &Tensor,
    outputs: &[ValueType],
) -> Result<Vec<Tensor>, OpError> {
    let mut start = 0;
    sizes
        .iter()
        .zip(outputs)
        .map(|(&size, out)| {
            let mut maps = identity_maps(&x.shape);
            maps[axis] = (start..start + size).map(Some).collect();
            start += size;
            let t = gather_axes(x, &maps, 0.0)?;
            debug_assert_eq!(t.shape, out.shape);
            Ok(t)
        })
        .collect()
}

pub(super) fn concat(axis: usize, xs: &[&Tensor], out: &ValueType) -> Result<Tensor, OpError> {
    // Each input is `outer` blocks of `shape[axis] * inner` elements; the output
    // interleaves the blocks of every input.
    let outer: usize = out.shape[..axis].iter().product();
    let inner: usize = out.shape[axis + 1..].iter().product();
    let mut offsets = Vec::with_capacity(xs.len());
    let mut total = 0;
    for x in xs {
        offsets.push(total);
        total += x.numel();
    }
    let mut src = Vec::with_capacity(out.numel());
    for o in 0..outer {
        for (x, &off) in xs.iter().zip(&offsets) {
            let block = x.shape[axis] * inner;
            src.extend(off + o * block..off + (o + 1) * block);
        }
    }
    let parts: Vec<_> = xs.iter().map(|x| &*x.data).collect();
    Ok(Tensor::new(
        out.shape.clone(),
        TensorData::concat(&parts)?.gather(src.into_iter()),
    ))
}

pub(super) fn gather(
    axis: usize,
    x: &Tensor,
    indices: &Tensor,
    out: &ValueType,
) -> Result<Tensor, OpError> {
    let dim = x.shape[axis];
    let idx = indices
        .data
        .to_i64()
        .into_iter()
        .map(|i| {
            let j = if i < 0 { i + dim as i64 } else { i };
            (0..dim as i64)
                .contains(&j)
                .then_some(j as usize)
                .ok_or_else(|| {
                    OpError::Value(format!(
                        "index {i} is out of range for axis {axis} of extent {dim}"
                    ))
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let outer: usize = x.shape[..axis].iter().product();
    let inner: usize = x.shape[axis + 1..].iter().product();
    let mut src = Vec::with_capacity(out.numel());
    for o in 0..outer {
        for &j in &idx {
            let base = (o * dim + j) * inner;
            src.extend(base..base + inner);
        }
    }
    Ok(Tensor::new(
        out.shape.clone(),
        x.data.gather(src.into_iter()),
    ))
}

/// Pad (negative pads crop). Output coordinate `o` reads input `o - begin`; outside
/// the input, constant mode fills, edge clamps, reflect mirrors without repeating
/// the border element.
pub(super) fn pad(
    begins: &[i64],
    mode: PadMode,
    x: &Tensor,
    out: &ValueType,
) -> Result<Tensor, OpError> {
    let maps = (0..x.rank())
        .map(|ax| {
            let n = x.shape[ax] as i64;
            (0..out.shape[ax] as i64)
                .map(|o| {
                    let c = o - begins[ax];
                    if (0..n).contains(&c) {
                        return Ok(Some(c as usize));
                    }
                    match mode {
                        PadMode::Constant(_) => Ok(None),
                        _ if n == 0 => Err(OpError::Shape(format!(
                            "cannot {mode:?}-pad the empty axis {ax}"
                        ))),
                        PadMode::Edge => Ok(Some(c.clamp(0, n - 1) as usize)),
                        PadMode::Reflect => Ok(Some(reflect(c, n))),
                        PadMode::Wrap => Ok(Some(c.rem_euclid(n) as usize)),
                    }
                })
                .collect::<Result<Vec<_>, OpError>>()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let fill = match mode {
        PadMode::Constant(v) => v as f64,
        _ => 0.0,
    };
    gather_axes(x, &maps, fill)
}

/// Mirrors coordinate `c` into `0..n` (n ≥ 1) about the border elements.
fn reflect(c: i64, n: i64) -> usize {
    if n == 1 {
        return 0;
    }
    let period = 2 * (n - 1);
    let m = c.rem_euclid(period);
    (if m < n { m } else { period - m }) as usize
}

/// Concat and Split: padding between pieces along their axis would land inside
/// the tensor, so that axis must not be padded; the output holds the inputs'
/// padding when they all agree.
fn pieces_pad_flow(axis: usize, inputs: &[PadValue], padded: &[usize]) -> PadFlow {
    let p = inputs.first().copied().unwrap_or(PadValue::Undef);
    let refuse = padded.contains(&axis);
    PadFlow {
        inputs: inputs
            .iter()
            .map(|_| {
                if refuse {
                    Requirement::Unsupported
                } else {
                    Requirement::Any
                }
            })
            .collect(),
        output: if inputs.iter().all(|&q| q == p) {
            p
        } else {
            PadValue::Undef
        },
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::core::{DType, Tensor, TensorData, ValueType};
    use crate::ops::*;
    use crate::ops::{Op, PadMode, SliceAxis};

    #[test]
    fn bitcast_reads_the_same_bytes_as_another_type() {
        // 1.0f32 is 0x3f800000; -2.0 is 0xc0000000.
        let x = f32s(&[2], &[1.0, -2.0]);
        let to_i32 = Op::BitCast(BitCast { to: DType::I32 });
        let y = eval1(to_i32, &[&x]);
        assert_eq!(
            *y.data,
            TensorData::I32(vec![0x3f80_0000, 0xc000_0000u32 as i32])
        );
        let back = eval1(Op::BitCast(BitCast { to: DType::F32 }), &[&y]);
        assert_eq!(back, x);
        let flags = Tensor::new(vec![2], TensorData::Bool(vec![true, false]));
        let bytes = eval1(Op::BitCast(BitCast { to: DType::U8 }), &[&flags]);
        assert_eq!(*bytes.data, TensorData::U8(vec![1, 0]));
        // Types of different widths are refused, naming both.
        let wide = ValueType::new(DType::F64, vec![2]);
        let err = Op::BitCast(BitCast { to: DType::I32 })
            .def()
            .infer(&[&wide]);
        assert!(err.is_err_and(|e| e.to_string().contains("f64 is 64 bits, i32 is 32")));
    }

    #[test]
    fn transpose_matches_explicit_loops() {
        let y = eval1(
            Op::Transpose(Transpose { perm: vec![1, 0] }),
            &[&iota(&[2, 3])],
        );
        assert_close(&y, &[3, 2], &[0.0, 3.0, 1.0, 4.0, 2.0, 5.0], 0.0);
        // out[k][i][j] = x[i][j][k] = 12i + 4j + k
        let y = eval1(
            Op::Transpose(Transpose {
                perm: vec![2, 0, 1],
            }),
            &[&iota(&[2, 3, 4])],
        );
        let mut want = vec![];
        for k in 0..4 {
            for i in 0..2 {
                for j in 0..3 {
                    want.push((12 * i + 4 * j + k) as f64);
                }
            }
        }
        assert_close(&y, &[4, 2, 3], &want, 0.0);
        // Any dtype.
        let b = Tensor::new(vec![1, 3], TensorData::Bool(vec![true, false, true]));
        let y = eval1(Op::Transpose(Transpose { perm: vec![1, 0] }), &[&b]);
        assert_eq!((y.shape, y.data), (vec![3, 1], b.data));
    }

    #[test]
    fn concat_and_split_are_inverse() {
        let a = iota(&[2, 2]);
        let b = f32s(&[2, 1], &[10.0, 11.0]);
        let y = eval1(Op::Concat(Concat { axis: 1 }), &[&a, &b]);
        assert_close(&y, &[2, 3], &[0.0, 1.0, 10.0, 2.0, 3.0, 11.0], 0.0);
        let y = eval1(Op::Concat(Concat { axis: 0 }), &[&a, &iota(&[1, 2])]);
        assert_close(&y, &[3, 2], &[0.0, 1.0, 2.0, 3.0, 0.0, 1.0], 0.0);
        let parts = eval(
            Op::Split(Split {
                axis: 1,
                sizes: vec![2, 0, 3],
            }),
            &[&iota(&[2, 5])],
        );
        assert_close(&parts[0], &[2, 2], &[0.0, 1.0, 5.0, 6.0], 0.0);
        assert_close(&parts[1], &[2, 0], &[], 0.0);
        assert_close(&parts[2], &[2, 3], &[2.0, 3.0, 4.0, 7.0, 8.0, 9.0], 0.0);
        let refs: Vec<&Tensor> = parts.iter().collect();
        let back = eval1(Op::Concat(Concat { axis: 1 }), &refs);
        assert_eq!(back, iota(&[2, 5]));
    }

    #[test]
    fn slice_with_negative_steps() {
        // Rows 2, 1, 0 (end -1 means "through the front"), columns 1 and 3.
        let op = Op::Slice(Slice {
            axes: vec![
                SliceAxis {
                    axis: 0,
                    start: 2,
                    end: -1,
                    step: -1,
                },
                SliceAxis {
                    axis: 1,
                    start: 1,
                    end: 4,
                    step: 2,
                },
            ],
        });
        let y = eval1(op, &[&iota(&[3, 4])]);
        assert_close(&y, &[3, 2], &[9.0, 11.0, 5.0, 7.0, 1.0, 3.0], 0.0);
        let bad = Op::Slice(Slice {
            axes: vec![SliceAxis {
                axis: 0,
                start: 5,
                end: 7,
                step: 1,
            }],
        });
        let err = try_eval(bad, &[&iota(&[3])]).unwrap_err();
        assert!(err.to_string().contains("outside"), "{err}");
    }

    #[test]
    fn gather_follows_the_onnx_examples() {
        // ONNX Gather examples (axis 0 and axis 1).
        let data = f32s(&[3, 2], &[1.0, 1.2, 2.3, 3.4, 4.5, 5.7]);
        let y = eval1(
            Op::Gather(Gather { axis: 0 }),
            &[&data, &i64s(&[2, 2], &[0, 1, 1, 2])],
        );
        let want = [1.0, 1.2, 2.3, 3.4, 2.3, 3.4, 4.5, 5.7];
        assert_close(&y, &[2, 2, 2], &want, 1e-6);
        let data = f32s(&[3, 3], &[1.0, 1.2, 1.9, 2.3, 3.4, 3.9, 4.5, 5.7, 5.9]);
        let y = eval1(
            Op::Gather(Gather { axis: 1 }),
            &[&data, &i64s(&[1, 2], &[0, 2])],
        );
        assert_close(&y, &[3, 1, 2], &[1.0, 1.9, 2.3, 3.9, 4.5, 5.9], 1e-6);
        // Negative indices count from the end; i32 indices work too.
        let idx = Tensor::new(vec![2], TensorData::I32(vec![-1, 0]));
        let y = eval1(Op::Gather(Gather { axis: 1 }), &[&data, &idx]);
        assert_close(&y, &[3, 2], &[1.9, 1.0, 3.9, 2.3, 5.9, 4.5], 1e-6);
        // A scalar index drops the axis.
        let y = eval1(
            Op::Gather(Gather { axis: 0 }),
            &[&i64s(&[3], &[7, 8, 9]), &i64s(&[], &[1])],
        );
        assert_i64(&y, &[], &[8]);
        for bad in [3, -4] {
            let err = try_eval(
                Op::Gather(Gather { axis: 0 }),
                &[&data, &i64s(&[1], &[bad])],
            )
            .unwrap_err();
            assert!(err.to_string().contains("out of range"), "{err}");
        }
    }

    fn pad(begins: &[i64], ends: &[i64], mode: PadMode) -> Op {
        Op::Pad(Pad {
            begins: begins.to_vec(),
            ends: ends.to_vec(),
            mode,
        })
    }

    #[test]
    fn pad_modes_follow_the_onnx_examples() {
        // ONNX Pad examples: pads [0, 2, 0, 0] on a 3x2 input.
        let x = f32s(&[3, 2], &[1.0, 1.2, 2.3, 3.4, 4.5, 5.7]);
        let y = eval1(pad(&[0, 2], &[0, 0], PadMode::Constant(0.0)), &[&x]);
        let want = [0.0, 0.0, 1.0, 1.2, 0.0, 0.0, 2.3, 3.4, 0.0, 0.0, 4.5, 5.7];
        assert_close(&y, &[3, 4], &want, 1e-6);
        // (Shape inference refuses reflect pads as large as the axis, which the
        // spec's reflect example uses, so that one pads by 1 here.)
        let y = eval1(pad(&[0, 1], &[0, 0], PadMode::Reflect), &[&x]);
        let want = [1.2, 1.0, 1.2, 3.4, 2.3, 3.4, 5.7, 4.5, 5.7];
        assert_close(&y, &[3, 3], &want, 1e-6);
        let y = eval1(pad(&[0, 2], &[0, 0], PadMode::Edge), &[&x]);
        let want = [1.0, 1.0, 1.0, 1.2, 2.3, 2.3, 2.3, 3.4, 4.5, 4.5, 4.5, 5.7];
        assert_close(&y, &[3, 4], &want, 1e-6);
        // Reflect does not repeat the border: [1,2,3] → [3,2,1,2,3,2,1].
        let y = eval1(
            pad(&[2], &[2], PadMode::Reflect),
            &[&f32s(&[3], &[1.0, 2.0, 3.0])],
        );
        assert_close(&y, &[7], &[3.0, 2.0, 1.0, 2.0, 3.0, 2.0, 1.0], 0.0);
        // Far coordinates fold back periodically (numpy's reflect): n = 3, c = -4..6.
        let folded: Vec<usize> = (-4..6).map(|c| super::reflect(c, 3)).collect();
        assert_eq!(folded, vec![0, 1, 2, 1, 0, 1, 2, 1, 0, 1]);
        // Negative pads crop; the constant fills integer tensors too.
        let y = eval1(
            pad(&[-1], &[2], PadMode::Constant(9.0)),
            &[&i64s(&[4], &[0, 1, 2, 3])],
        );
        assert_i64(&y, &[5], &[1, 2, 3, 9, 9]);
    }

    #[test]
    fn tile_expand_reshape_identity_cast() {
        // ONNX Tile example.
        let x = iota(&[2, 2]);
        let y = eval1(
            Op::Tile(Tile {
                repeats: vec![2, 2],
            }),
            &[&x],
        );
        let want = [
            0., 1., 0., 1., 2., 3., 2., 3., 0., 1., 0., 1., 2., 3., 2., 3.,
        ];
        assert_close(&y, &[4, 4], &want, 0.0);
        let y = eval1(
            Op::Expand(Expand {
                shape: vec![2, 3, 2],
            }),
            &[&f32s(&[3, 1], &[1.0, 2.0, 3.0])],
        );
        let want = [1., 1., 2., 2., 3., 3., 1., 1., 2., 2., 3., 3.];
        assert_close(&y, &[2, 3, 2], &want, 0.0);
        let y = eval1(
            Op::Reshape(Reshape { shape: vec![3, 2] }),
            &[&iota(&[2, 3])],
        );
        assert_close(&y, &[3, 2], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], 0.0);
        let big = i64s(&[1], &[i64::MAX]);
        assert_eq!(eval1(Op::Identity, &[&big]), big);
        // Cast float → int truncates toward zero.
        let y = eval1(
            Op::Cast(Cast {
                to: DType::I64,
                saturate: true,
            }),
            &[&f32s(&[3], &[-1.7, 2.9, 0.5])],
        );
        assert_i64(&y, &[3], &[-1, 2, 0]);
        let y = eval1(
            Op::Cast(Cast {
                to: DType::Bool,
                saturate: true,
            }),
            &[&f32s(&[2], &[0.0, -0.5])],
        );
        assert_eq!(*y.data, TensorData::Bool(vec![false, true]));
    }
}
