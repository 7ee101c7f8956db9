//! TFLite's recurrent layers UNIDIRECTIONAL_SEQUENCE_LSTM,
//! BIDIRECTIONAL_SEQUENCE_LSTM and UNIDIRECTIONAL_SEQUENCE_RNN, unrolled over
//! their (static) sequence length into ops the compiler runs natively, as the
//! ONNX importer does its LSTM, GRU and RNN: the input projection of every
//! step as one MatMul, then per step the recurrent MatMul, gate slices and
//! elementwise cell math, following TFLite's float reference kernels
//! (lstm_eval.cc, unidirectional_sequence_rnn.cc).
//!
//! The state inputs are variable tensors: TFLite zeroes them when it allocates
//! and keeps them across invocations. The import starts every run from their
//! initial contents (zeros unless the file gives them data), which is what the
//! interpreter's first invocation computes.

use super::{Cx, Res};
use crate::graph::{BinaryOp, DType, Op, SliceAxis, Tensor, TensorData, UnaryOp, ValueRef};
use crate::ops::{Concat, LayerNorm, Reshape, Slice, Transpose};

/// TFLite's gates, in the order of its weight inputs.
const GATES: [&str; 4] = ["input", "forget", "cell", "output"];
const INPUT_GATE: usize = 0;
const FORGET_GATE: usize = 1;
const CELL_GATE: usize = 2;
const OUTPUT_GATE: usize = 3;

/// TFLite's `MeanStddevNormalization` adds this to the variance.
const LAYER_NORM_EPSILON: f32 = 1e-8;

/// Where one direction's tensors are among an LSTM operator's inputs.
struct LstmInputs {
    /// The direction's tag in node names and messages ("" for a unidirectional layer).
    tag: &'static str,
    /// input-to-{input, forget, cell, output} weights [H, I].
    input_weights: [usize; 4],
    /// recurrent-to-{input, forget, cell, output} weights [H, P].
    recurrent_weights: [usize; 4],
    /// cell-to-{input, forget, output} peephole weights [H].
    peepholes: [usize; 3],
    /// {input, forget, cell, output} gate biases [H].
    biases: [usize; 4],
    /// Projection weights [P, H] and bias [P].
    projection: [usize; 2],
    /// The output (activation) state [B, P] and cell state [B, H].
    states: [usize; 2],
    /// {input, forget, cell, output} layer-norm coefficients [H], where the
    /// operator has them.
    layer_norm: Option<[usize; 4]>,
}

const UNIDIRECTIONAL: LstmInputs = LstmInputs {
    tag: "",
    input_weights: [1, 2, 3, 4],
    recurrent_weights: [5, 6, 7, 8],
    peepholes: [9, 10, 11],
    biases: [12, 13, 14, 15],
    projection: [16, 17],
    states: [18, 19],
    layer_norm: Some([20, 21, 22, 23]),
};

const FORWARD: LstmInputs = LstmInputs {
    tag: "fw_",
    input_weights: [1, 2, 3, 4],
    recurrent_weights: [5, 6, 7, 8],
    peepholes: [9, 10, 11],
    biases: [12, 13, 14, 15],
    projection: [16, 17],
    states: [35, 36],
    layer_norm: None,
};

const BACKWARD: LstmInputs = LstmInputs {
    tag: "bw_",
    input_weights: [18, 19, 20, 21],
    recurrent_weights: [22, 23, 24, 25],
    peepholes: [26, 27, 28],
    biases: [29, 30, 31, 32],
    projection: [33, 34],
    states: [37, 38],
    layer_norm: None,
};

/// BIDIRECTIONAL_SEQUENCE_LSTM's auxiliary input and its weights.
const AUX_INPUTS: std::ops::RangeInclusive<usize> = 39..=47;

/// The options every LSTM operator shares.
struct LstmOptions {
    activation: Option<UnaryOp>,
    cell_clip: f32,
    proj_clip: f32,
}

/// The sequence input's extents and where time is in it.
#[derive(Clone, Copy)]
struct Sequence {
    batch: usize,
    steps: usize,
    input: usize,
    /// 0 when time major ([T, B, I]), else 1 ([B, T, I]).
    time_axis: usize,
}

impl Sequence {
    /// A [B, n] per-step value as one step of a sequence: [1, B, n] or [B, 1, n].
    fn step_shape(&self, n: usize) -> Vec<usize> {
        let mut s = vec![1, self.batch, n];
        s.swap(0, self.time_axis);
        s
    }
}

/// One LSTM direction's tensors, read and checked.
struct LstmWeights {
    hidden: usize,
    /// The output size: the projection's, else `hidden`.
    output: usize,
    /// Without an input gate (CIFG): i = 1 - f.
    cifg: bool,
    /// The input weights of the gates that have them, transposed and joined:
    /// [I, G·H] in TFLite's gate order.
    input_columns: ValueRef,
    /// Likewise the recurrent weights: [P, G·H].
    recurrent_columns: ValueRef,
    /// The gate biases joined, [G·H]; `None` with layer norm, which adds each
    /// gate's bias after normalizing.
    bias_columns: Option<ValueRef>,
    /// The gate biases one by one (input gate `None` under CIFG).
    biases: [Option<ValueRef>; 4],
    /// cell-to-{input, forget, output}, when the layer has peepholes.
    peepholes: Option<[Option<ValueRef>; 3]>,
    /// Layer-norm coefficients by gate, when the layer normalizes.
    layer_norm: Option<[Option<ValueRef>; 4]>,
    /// Projection weights transposed ([H, P]) and bias.
    projection: Option<(ValueRef, Option<ValueRef>)>,
}

impl Cx<'_, '_> {
    /// UNIDIRECTIONAL_SEQUENCE_LSTM: output [B, T, P] (or [T, B, P] time major).
    pub(super) fn unidirectional_lstm(&mut self) -> Res<ValueRef> {
        let o: Option<super::schema::UnidirectionalSequenceLSTMOptions> = self.options();
        if o.is_some_and(|o| o.diagonal_recurrent_tensors()) {
            return Err(self.unsupported(
                "UNIDIRECTIONAL_SEQUENCE_LSTM with diagonal recurrent weights is not supported",
            ));
        }
        let opts = self.lstm_options(
            o.map_or(0, |o| o.fused_activation_function()),
            o.map_or(0.0, |o| o.cell_clip()),
            o.map_or(0.0, |o| o.proj_clip()),
        )?;
        let (x, seq) = self.sequence_input(o.is_some_and(|o| o.time_major()))?;
        let w = self.lstm_weights(&UNIDIRECTIONAL, &seq)?;
        let steps = self.lstm_direction(x, &seq, &UNIDIRECTIONAL, &w, &opts, false)?;
        self.join_steps(&steps, &seq, "output")
    }

    /// BIDIRECTIONAL_SEQUENCE_LSTM: the forward and backward outputs, each in
    /// time order; joined on the last axis into one output with merge_outputs.
    pub(super) fn bidirectional_lstm(&mut self) -> Res<Vec<ValueRef>> {
        let o: Option<super::schema::BidirectionalSequenceLSTMOptions> = self.options();
        if let Some(i) = AUX_INPUTS.clone().find(|&i| self.has_input(i)) {
            return Err(self.unsupported(format!(
                "BIDIRECTIONAL_SEQUENCE_LSTM with an auxiliary input (input {i}) is not supported"
            )));
        }
        let opts = self.lstm_options(
            o.map_or(0, |o| o.fused_activation_function()),
            o.map_or(0.0, |o| o.cell_clip()),
            o.map_or(0.0, |o| o.proj_clip()),
        )?;
        // TFLite's default for this operator is time major.
        let (x, seq) = self.sequence_input(o.is_none_or(|o| o.time_major()))?;
        let mut outputs = Vec::with_capacity(2);
        for (inputs, reverse) in [(&FORWARD, false), (&BACKWARD, true)] {
            let w = self.lstm_weights(inputs, &seq)?;
            let steps = self.lstm_direction(x, &seq, inputs, &w, &opts, reverse)?;
            let what = format!("{}output", inputs.tag);
            outputs.push(self.join_steps(&steps, &seq, &what)?);
        }
        if o.is_some_and(|o| o.merge_outputs()) {
            let merged = self.emit(Op::Concat(Concat { axis: 2 }), "merged", &outputs)?;
            return Ok(vec![merged]);
        }
        Ok(outputs)
    }

    /// UNIDIRECTIONAL_SEQUENCE_RNN: h = act(x·Wᵀ + h·Rᵀ + b) per step; inputs
    /// x, W [H, I], R [H, H], b [H], hidden state [B, H].
    pub(super) fn unidirectional_rnn(&mut self) -> Res<ValueRef> {
        let o: Option<super::schema::SequenceRNNOptions> = self.options();
        let act = self.cell_activation(o.map_or(0, |o| o.fused_activation_function()))?;
        let (x, seq) = self.sequence_input(o.is_some_and(|o| o.time_major()))?;
        let w = self.input(1)?;
        let hidden = match self.ty(w).shape[..] {
            [h, _] if h > 0 => h,
            _ => {
                return Err(self.err(format!(
                    "input_weights (input 1) has shape {:?}, expected [hidden size, {}]",
                    self.ty(w).shape,
                    seq.input
                )))
            }
        };
        let w = self.matrix(1, "input_weights", [hidden, seq.input], "the input size")?;
        let r = self.matrix(2, "recurrent_weights", [hidden, hidden], "hidden size")?;
        let b = self.vector(3, "bias", hidden)?;
        let wt = self.transposed(w, "input_columns")?;
        let rt = self.transposed(r, "recurrent_columns")?;
        let projection = self.input_projection(x, wt, Some(b), "")?;
        let h0 = self.initial_state(4, "hidden_state", [seq.batch, hidden])?;
        let steps = self.unroll(
            projection,
            &seq,
            hidden,
            vec![h0],
            false,
            |cx, xt, s, tag| {
                let hr = cx.emit(Op::MatMul, &format!("{tag}/recurrent"), &[s[0], rt])?;
                let pre = cx.emit(Op::Binary(BinaryOp::Add), &format!("{tag}/gate"), &[xt, hr])?;
                Ok(vec![cx.apply(act, pre, &format!("{tag}/hidden"))?])
            },
        )?;
        self.join_steps(&steps, &seq, "output")
    }

    /// REVERSE_V2: the input reversed along the constant axes.
    pub(super) fn reverse(&mut self) -> Res<ValueRef> {
        let x = self.input(0)?;
        let shape = self.ty(x).shape.clone();
        let mut axes = self.const_axes(1, shape.len())?;
        axes.sort_unstable();
        axes.dedup();
        let axes = axes
            .into_iter()
            .map(|axis| SliceAxis {
                axis,
                start: shape[axis] as i64 - 1,
                end: -1,
                step: -1,
            })
            .collect();
        self.emit(Op::Slice(Slice { axes }), "reverse", &[x])
    }

    fn has_input(&self, i: usize) -> bool {
        self.inputs.get(i).copied().flatten().is_some()
    }

    /// The cell and output activation of an LSTM or RNN: the fused activation
    /// function, applied by TFLite's kernels even when it is NONE (identity).
    fn cell_activation(&self, code: i8) -> Res<Option<UnaryOp>> {
        Ok(match code {
            0 => None,
            1 => Some(UnaryOp::Relu),
            2 => Some(UnaryOp::Clip {
                min: -1.0,
                max: 1.0,
            }),
            3 => Some(UnaryOp::Clip { min: 0.0, max: 6.0 }),
            4 => Some(UnaryOp::Tanh),
            _ => {
                return Err(self.unsupported(format!(
                    "fused activation function {code} is not supported as the cell activation"
                )))
            }
        })
    }

    fn lstm_options(&self, activation: i8, cell_clip: f32, proj_clip: f32) -> Res<LstmOptions> {
        for (what, v) in [("cell_clip", cell_clip), ("proj_clip", proj_clip)] {
            if v.is_nan() || v < 0.0 {
                return Err(self.err(format!("{what} {v} is not a non-negative number")));
            }
        }
        Ok(LstmOptions {
            activation: self.cell_activation(activation)?,
            cell_clip,
            proj_clip,
        })
    }

    /// Input 0, a float32 [B, T, I] (or [T, B, I] time major) sequence.
    fn sequence_input(&mut self, time_major: bool) -> Res<(ValueRef, Sequence)> {
        let x = self.input(0)?;
        let ty = self.ty(x).clone();
        let &[a0, a1, input] = ty.shape.as_slice() else {
            return Err(self.err(format!(
                "input has type {ty}, expected 3 axes ({})",
                if time_major {
                    "time, batch, input"
                } else {
                    "batch, time, input"
                }
            )));
        };
        if ty.dtype != DType::F32 {
            return Err(self.unsupported(format!(
                "input has type {ty}: only float32 recurrent layers are supported"
            )));
        }
        let (steps, batch) = if time_major { (a0, a1) } else { (a1, a0) };
        if steps == 0 || input == 0 {
            return Err(self.err(format!(
                "input has shape {:?}, with no steps or no inputs",
                ty.shape
            )));
        }
        let time_axis = usize::from(!time_major);
        Ok((
            x,
            Sequence {
                batch,
                steps,
                input,
                time_axis,
            },
        ))
    }

    /// Input `i`, which must be a float32 matrix of shape `want`; `why` names
    /// where its columns come from in the message.
    fn matrix(&mut self, i: usize, what: &str, want: [usize; 2], why: &str) -> Res<ValueRef> {
        if !self.has_input(i) {
            return Err(self.err(format!("{what} (input {i}) is missing")));
        }
        let v = self.input(i)?;
        let ty = self.ty(v).clone();
        if ty.shape != want || ty.dtype != DType::F32 {
            return Err(self.err(format!(
                "{what} (input {i}) has type {ty}, expected float32 {want:?} (hidden size {} by {why} {})",
                want[0], want[1]
            )));
        }
        Ok(v)
    }

    /// Optional input `i`, which must be a float32 vector of `n` elements.
    fn optional_vector(&mut self, i: usize, what: &str, n: usize) -> Res<Option<ValueRef>> {
        let Some(v) = self.optional_input(i)? else {
            return Ok(None);
        };
        let ty = self.ty(v).clone();
        if ty.shape != [n] || ty.dtype != DType::F32 {
            return Err(self.err(format!(
                "{what} (input {i}) has type {ty}, expected float32 [{n}] (one per unit)"
            )));
        }
        Ok(Some(v))
    }

    fn vector(&mut self, i: usize, what: &str, n: usize) -> Res<ValueRef> {
        self.optional_vector(i, what, n)?
            .ok_or_else(|| self.err(format!("{what} (input {i}) is missing")))
    }

    fn transposed(&mut self, m: ValueRef, step: &str) -> Res<ValueRef> {
        self.emit(Op::Transpose(Transpose { perm: vec![1, 0] }), step, &[m])
    }

    /// The state input `i` of shape `shape`: a variable tensor starts at its
    /// data, or zeros without any; a state another operator computes is read.
    fn initial_state(&mut self, i: usize, what: &str, shape: [usize; 2]) -> Res<ValueRef> {
        let zeros = |cx: &mut Self| {
            let n = shape[0] * shape[1];
            let t = Tensor::new(shape.to_vec(), TensorData::zeros(DType::F32, n));
            let name = format!("{}/{what}_initial", cx.layer);
            cx.imp.graph.add_constant(&name, t, vec![cx.span.clone()])
        };
        let Some(t) = self.inputs.get(i).copied().flatten() else {
            return Ok(zeros(self));
        };
        let v = match self.imp.values[t] {
            Some(v) => Some(v),
            None => match self.imp.constant_data(t, Some(&self.span))? {
                Some(_) => Some(self.input(i)?),
                None => None,
            },
        };
        // Without data, the tensor's declared type, where the file gives one.
        let ty = match v {
            Some(v) => Some(self.ty(v).clone()),
            None => match self.imp.declared_shape(t)? {
                Some(_) => Some(self.imp.value_type(t)?),
                None => None,
            },
        };
        if let Some(ty) = ty.filter(|ty| ty.shape != shape || ty.dtype != DType::F32) {
            return Err(self.err(format!(
                "{what} (input {i}) has type {ty}, expected float32 {shape:?} (batch by units)"
            )));
        }
        Ok(v.unwrap_or_else(|| zeros(self)))
    }

    /// Reads and checks one LSTM direction's weights: the hidden size H from
    /// the input-to-output weights, the output size P from the
    /// recurrent-to-output weights.
    fn lstm_weights(&mut self, at: &LstmInputs, seq: &Sequence) -> Res<LstmWeights> {
        let tag = at.tag;
        let name = |kind: &str, gate: usize| format!("{tag}{kind}_to_{}_weights", GATES[gate]);
        let shape_of = |cx: &mut Self, i: usize, what: &str| -> Res<Vec<usize>> {
            if !cx.has_input(i) {
                return Err(cx.err(format!("{what} (input {i}) is missing")));
            }
            let v = cx.input(i)?;
            Ok(cx.ty(v).shape.clone())
        };
        let io = at.input_weights[OUTPUT_GATE];
        let hidden = match shape_of(self, io, &name("input", OUTPUT_GATE))?[..] {
            [h, _] if h > 0 => h,
            ref s => {
                return Err(self.err(format!(
                    "{} (input {io}) has shape {s:?}, expected [hidden size, {}]",
                    name("input", OUTPUT_GATE),
                    seq.input
                )))
            }
        };
        let ro = at.recurrent_weights[OUTPUT_GATE];
        let output = match shape_of(self, ro, &name("recurrent", OUTPUT_GATE))?[..] {
            [_, p] if p > 0 => p,
            ref s => {
                return Err(self.err(format!(
                    "{} (input {ro}) has shape {s:?}, expected [{hidden}, output size]",
                    name("recurrent", OUTPUT_GATE)
                )))
            }
        };
        let cifg = !self.has_input(at.input_weights[INPUT_GATE]);
        let gates: Vec<usize> = (0..4).filter(|&g| g != INPUT_GATE || !cifg).collect();
        let mut input_rows = Vec::with_capacity(4);
        let mut recurrent_rows = Vec::with_capacity(4);
        for &g in &gates {
            input_rows.push(self.matrix(
                at.input_weights[g],
                &name("input", g),
                [hidden, seq.input],
                "the input size",
            )?);
            recurrent_rows.push(self.matrix(
                at.recurrent_weights[g],
                &name("recurrent", g),
                [hidden, output],
                "the output size",
            )?);
        }
        if cifg && self.has_input(at.recurrent_weights[INPUT_GATE]) {
            return Err(self.err(format!(
                "{} is given without {} (input {})",
                name("recurrent", INPUT_GATE),
                name("input", INPUT_GATE),
                at.input_weights[INPUT_GATE]
            )));
        }

        let mut biases = [None; 4];
        for (g, b) in biases.iter_mut().enumerate() {
            let what = format!("{tag}{}_gate_bias", GATES[g]);
            *b = self.optional_vector(at.biases[g], &what, hidden)?;
            if b.is_none() && (g != INPUT_GATE || !cifg) {
                return Err(self.err(format!("{what} (input {}) is missing", at.biases[g])));
            }
        }

        let peephole_gates = [INPUT_GATE, FORGET_GATE, OUTPUT_GATE];
        let mut peephole = [None; 3];
        for (k, p) in peephole.iter_mut().enumerate() {
            let what = format!("{tag}cell_to_{}_weights", GATES[peephole_gates[k]]);
            *p = self.optional_vector(at.peepholes[k], &what, hidden)?;
        }
        let peepholes = match peephole {
            [None, None, None] => None,
            [i, Some(_), Some(_)] if i.is_some() != cifg => Some(peephole),
            _ => {
                return Err(self.err(format!(
                    "{tag}cell_to_*_weights (inputs {:?}) must be all given (the input gate's \
                     only with an input gate) or all omitted",
                    at.peepholes
                )))
            }
        };

        let layer_norm = match at.layer_norm {
            Some(ln) => {
                let mut coeffs = [None; 4];
                for (g, c) in coeffs.iter_mut().enumerate() {
                    let what = format!("{tag}{}_layer_norm_coefficients", GATES[g]);
                    *c = self.optional_vector(ln[g], &what, hidden)?;
                }
                let wanted = gates.iter().filter(|&&g| coeffs[g].is_some()).count();
                match wanted {
                    0 => None,
                    n if n == gates.len() => Some(coeffs),
                    _ => {
                        return Err(self.err(format!(
                            "layer-norm coefficients (inputs {ln:?}) must be given for every \
                             gate with weights or for none"
                        )))
                    }
                }
            }
            None => None,
        };

        let projection = match self.optional_input(at.projection[0])? {
            Some(_) => {
                let what = format!("{tag}projection_weights");
                let p = self.matrix(at.projection[0], &what, [output, hidden], "hidden size")?;
                let what = format!("{tag}projection_bias");
                let b = self.optional_vector(at.projection[1], &what, output)?;
                Some((self.transposed(p, &format!("{tag}projection_columns"))?, b))
            }
            None if output != hidden => {
                return Err(self.err(format!(
                    "{} (input {ro}) has {output} columns, but without projection weights \
                     (input {}) the output size must be the hidden size {hidden}",
                    name("recurrent", OUTPUT_GATE),
                    at.projection[0]
                )))
            }
            None if self.has_input(at.projection[1]) => {
                return Err(self.err(format!(
                    "{tag}projection_bias (input {}) is given without projection weights",
                    at.projection[1]
                )))
            }
            None => None,
        };

        let joined_in = self.emit(
            Op::Concat(Concat { axis: 0 }),
            &format!("{tag}input_weights"),
            &input_rows,
        )?;
        let input_columns = self.transposed(joined_in, &format!("{tag}input_columns"))?;
        let joined_rec = self.emit(
            Op::Concat(Concat { axis: 0 }),
            &format!("{tag}recurrent_weights"),
            &recurrent_rows,
        )?;
        let recurrent_columns = self.transposed(joined_rec, &format!("{tag}recurrent_columns"))?;
        let bias_columns = match layer_norm {
            Some(_) => None,
            None => {
                let parts: Vec<ValueRef> = gates.iter().filter_map(|&g| biases[g]).collect();
                Some(self.emit(
                    Op::Concat(Concat { axis: 0 }),
                    &format!("{tag}biases"),
                    &parts,
                )?)
            }
        };
        Ok(LstmWeights {
            hidden,
            output,
            cifg,
            input_columns,
            recurrent_columns,
            bias_columns,
            biases,
            peepholes,
            layer_norm,
            projection,
        })
    }

    /// x · W (W [I, N]) over every step at once, plus `bias` ([N]) if any.
    fn input_projection(
        &mut self,
        x: ValueRef,
        w: ValueRef,
        bias: Option<ValueRef>,
        tag: &str,
    ) -> Res<ValueRef> {
        let xw = self.emit(Op::MatMul, &format!("{tag}projection"), &[x, w])?;
        match bias {
            Some(b) => self.emit(
                Op::Binary(BinaryOp::Add),
                &format!("{tag}projection_biased"),
                &[xw, b],
            ),
            None => Ok(xw),
        }
    }

    /// One LSTM direction over every step, as TFLite's float kernel computes
    /// it: each gate's pre-activation (input and recurrent products, peephole,
    /// then layer norm and bias, or the bias in the products), the cell
    /// c = f·c + i·act(g) clipped to cell_clip, the output o·act(c), projected
    /// and clipped to proj_clip. Returns the output of each step, in time order.
    fn lstm_direction(
        &mut self,
        x: ValueRef,
        seq: &Sequence,
        at: &LstmInputs,
        w: &LstmWeights,
        opts: &LstmOptions,
        reverse: bool,
    ) -> Res<Vec<ValueRef>> {
        let (tag, h) = (at.tag, w.hidden);
        let projection = self.input_projection(x, w.input_columns, w.bias_columns, tag)?;
        let states = vec![
            self.initial_state(
                at.states[0],
                &format!("{tag}output_state"),
                [seq.batch, w.output],
            )?,
            self.initial_state(at.states[1], &format!("{tag}cell_state"), [seq.batch, h])?,
        ];
        // Column block of each gate in the joined weights (none for a CIFG input gate).
        let mut block = [None; 4];
        let mut next = 0;
        for (g, b) in block.iter_mut().enumerate() {
            if g != INPUT_GATE || !w.cifg {
                *b = Some(next);
                next += 1;
            }
        }
        let one = w.cifg.then(|| {
            self.imp.graph.add_constant(
                &format!("{}/{tag}one", self.layer),
                Tensor::scalar_f32(1.0),
                vec![self.span.clone()],
            )
        });
        let clip = |limit: f32| {
            (limit > 0.0).then_some(UnaryOp::Clip {
                min: -limit,
                max: limit,
            })
        };
        let (cell_clip, proj_clip) = (clip(opts.cell_clip), clip(opts.proj_clip));
        let rt = w.recurrent_columns;
        let cell = |cx: &mut Self, xt: ValueRef, s: &[ValueRef], step: &str| {
            let (hp, cp) = (s[0], s[1]);
            let name = |what: &str| format!("{step}/{what}");
            let hr = cx.emit(Op::MatMul, &name("recurrent"), &[hp, rt])?;
            let pre = cx.emit(Op::Binary(BinaryOp::Add), &name("gates"), &[xt, hr])?;
            // Gate g's activation input, its peephole reading `state`.
            let gate = |cx: &mut Self, g: usize, peephole: Option<(usize, ValueRef)>| {
                let gname = GATES[g];
                let k = block[g].expect("a gate with weights");
                let mut v = cx.emit(
                    Op::Slice(Slice {
                        axes: vec![SliceAxis {
                            axis: 1,
                            start: (k * h) as i64,
                            end: ((k + 1) * h) as i64,
                            step: 1,
                        }],
                    }),
                    &name(&format!("{gname}_in")),
                    &[pre],
                )?;
                if let (Some(ps), Some((p, state))) = (&w.peepholes, peephole) {
                    let weights = ps[p].expect("checked: peepholes of every gate with weights");
                    let peep = cx.emit(
                        Op::Binary(BinaryOp::Mul),
                        &name(&format!("{gname}_peephole")),
                        &[weights, state],
                    )?;
                    v = cx.emit(
                        Op::Binary(BinaryOp::Add),
                        &name(&format!("{gname}_peeped")),
                        &[v, peep],
                    )?;
                }
                if let Some(coeffs) = &w.layer_norm {
                    let scale = coeffs[g].expect("checked: coefficients of every gate");
                    let bias = w.biases[g].expect("checked: biases of every gate");
                    let norm = Op::LayerNorm(LayerNorm {
                        axis: 1,
                        epsilon: LAYER_NORM_EPSILON,
                        centered: true,
                    });
                    v = cx.emit(
                        norm,
                        &name(&format!("{gname}_normalized")),
                        &[v, scale, bias],
                    )?;
                }
                Ok::<_, crate::frontend::tflite::TfliteError>(v)
            };
            let sigmoid = |cx: &mut Self, v: ValueRef, what: &str| {
                cx.emit(Op::Unary(UnaryOp::Sigmoid), &name(what), &[v])
            };
            let f = gate(cx, FORGET_GATE, Some((1, cp)))?;
            let f = sigmoid(cx, f, "forget")?;
            let i = if let Some(one) = one {
                cx.emit(Op::Binary(BinaryOp::Sub), &name("input"), &[one, f])?
            } else {
                let i = gate(cx, INPUT_GATE, Some((0, cp)))?;
                sigmoid(cx, i, "input")?
            };
            let g = gate(cx, CELL_GATE, None)?;
            let g = cx.apply(opts.activation, g, &name("cell"))?;
            let kept = cx.emit(Op::Binary(BinaryOp::Mul), &name("cell_kept"), &[f, cp])?;
            let added = cx.emit(Op::Binary(BinaryOp::Mul), &name("cell_added"), &[i, g])?;
            let mut c = cx.emit(
                Op::Binary(BinaryOp::Add),
                &name("cell_state"),
                &[kept, added],
            )?;
            if let Some(clip) = cell_clip {
                c = cx.emit(Op::Unary(clip), &name("cell_clipped"), &[c])?;
            }
            let o = gate(cx, OUTPUT_GATE, Some((2, c)))?;
            let o = sigmoid(cx, o, "output_gate")?;
            let ac = cx.apply(opts.activation, c, &name("cell_activated"))?;
            let mut out = cx.emit(Op::Binary(BinaryOp::Mul), &name("output"), &[o, ac])?;
            if let Some((pw, pb)) = w.projection {
                out = cx.emit(Op::MatMul, &name("projected"), &[out, pw])?;
                if let Some(pb) = pb {
                    out = cx.emit(
                        Op::Binary(BinaryOp::Add),
                        &name("projected_biased"),
                        &[out, pb],
                    )?;
                }
                if let Some(clip) = proj_clip {
                    out = cx.emit(Op::Unary(clip), &name("projection_clipped"), &[out])?;
                }
            }
            Ok(vec![out, c])
        };
        let width = block.iter().flatten().count() * h;
        self.unroll(projection, seq, width, states, reverse, cell)
    }

    /// `act(v)`, or `v` itself without an activation.
    fn apply(&mut self, act: Option<UnaryOp>, v: ValueRef, step: &str) -> Res<ValueRef> {
        match act {
            Some(u) => self.emit(Op::Unary(u), step, &[v]),
            None => Ok(v),
        }
    }

    /// Runs `cell` over every step of `projection` ([B, T, width] or [T, B,
    /// width]), backwards in time when `reverse`: it maps a step's projection
    /// ([B, width]) and the states (output first) to the new states. Returns
    /// each step's output ([B, n]), in time order.
    fn unroll(
        &mut self,
        projection: ValueRef,
        seq: &Sequence,
        width: usize,
        mut states: Vec<ValueRef>,
        reverse: bool,
        mut cell: impl FnMut(&mut Self, ValueRef, &[ValueRef], &str) -> Res<Vec<ValueRef>>,
    ) -> Res<Vec<ValueRef>> {
        let mut outputs = vec![None; seq.steps];
        let prefix = if reverse { "bw_" } else { "" };
        for k in 0..seq.steps {
            let t = if reverse { seq.steps - 1 - k } else { k };
            let step = format!("{prefix}t{t}");
            let xt = self.emit(
                Op::Slice(Slice {
                    axes: vec![SliceAxis {
                        axis: seq.time_axis,
                        start: t as i64,
                        end: t as i64 + 1,
                        step: 1,
                    }],
                }),
                &format!("{step}/x"),
                &[projection],
            )?;
            let xt = self.emit(
                Op::Reshape(Reshape {
                    shape: vec![seq.batch, width],
                }),
                &format!("{step}/x_rows"),
                &[xt],
            )?;
            states = cell(self, xt, &states, &step)?;
            outputs[t] = Some(states[0]);
        }
        Ok(outputs.into_iter().flatten().collect())
    }

    /// Each step's [B, n] output joined into the sequence [B, T, n] ([T, B, n]
    /// time major).
    fn join_steps(&mut self, steps: &[ValueRef], seq: &Sequence, what: &str) -> Res<ValueRef> {
        let n = self.ty(steps[0]).shape[1];
        let parts = steps
            .iter()
            .enumerate()
            .map(|(t, &v)| {
                let shape = seq.step_shape(n);
                self.emit(
                    Op::Reshape(Reshape { shape }),
                    &format!("t{t}/{what}_step"),
                    &[v],
                )
            })
            .collect::<Res<Vec<_>>>()?;
        self.emit(
            Op::Concat(Concat {
                axis: seq.time_axis,
            }),
            what,
            &parts,
        )
    }
}
