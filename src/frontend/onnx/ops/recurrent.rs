//! The recurrent layers LSTM, GRU and RNN, unrolled over their sequence
//! length (static once shapes are bound) into ops the compiler runs natively:
//! the input projection of every step as one MatMul, then per step and
//! direction the recurrent MatMul, gate slices and elementwise cell math,
//! which the fusion pass joins into few kernels. Each layer is one function
//! over the shared reading, projection, masking and output assembly below.

use super::context::{NodeCtx, Res};
use super::registry::{Registry, AI_ONNX};
use crate::graph::{BinaryOp, DType, Op, Tensor, TensorData, UnaryOp, ValueRef};
use crate::ops::{Cast, Concat, Reshape, Slice, SliceAxis, Transpose};
use std::ops::Range;

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "LSTM", lstm);
    reg.add(AI_ONNX, "GRU", gru);
    reg.add(AI_ONNX, "RNN", rnn);
    reg.add(
        "com.microsoft",
        "DynamicQuantizeLSTM",
        dynamic_quantize_lstm,
    );
}

/// The inputs every recurrent layer shares, by position.
const X: usize = 0;
const W: usize = 1;
const R: usize = 2;
const B: usize = 3;
const SEQUENCE_LENS: usize = 4;
const INITIAL_H: usize = 5;

/// An activation function a recurrent layer may name, with its parameters.
#[derive(Clone, Copy, Debug)]
enum Activation {
    /// One of the elementwise ops the graph has.
    Unary(UnaryOp),
    /// alpha·x + beta.
    Affine { alpha: f32, beta: f32 },
    /// alpha·tanh(beta·x).
    ScaledTanh { alpha: f32, beta: f32 },
}

/// A recurrent layer's attributes and inputs, checked against each other.
struct Recurrence {
    /// Gates in the weights (4 LSTM, 3 GRU, 1 RNN).
    gates: usize,
    hidden: usize,
    batch: usize,
    steps: usize,
    /// Whether each direction runs backwards in time (forward, reverse).
    reverse: Vec<bool>,
    /// The axis of time in X, Y's steps and the states: 0, or 1 for layout 1.
    time_axis: usize,
    dtype: DType,
    clip: Option<f32>,
    /// Each direction's activation functions, in the layer's order.
    activations: Vec<Vec<Activation>>,
    /// Per step, which batch entries are still within their sequence; `None`
    /// when every sequence runs all steps.
    masks: Option<Vec<StepMask>>,
}

/// Which batch entries one step updates, as 1 and 0 shaped like a state with
/// one element per row: `within` their sequence, and its complement `past` it.
struct StepMask {
    within: ValueRef,
    past: ValueRef,
}

/// One direction's run: its output at every step (in time order) and its
/// final states (hidden first).
struct Run {
    outputs: Vec<ValueRef>,
    finals: Vec<ValueRef>,
}

impl Recurrence {
    /// Reads the attributes and checks the shapes of X, W, R, B and
    /// sequence_lens; `defaults` are one direction's activation functions.
    fn read(c: &mut NodeCtx, gates: usize, defaults: &[&str]) -> Res<Recurrence> {
        let reverse = match c.string("direction", "forward")?.as_str() {
            "forward" => vec![false],
            "reverse" => vec![true],
            "bidirectional" => vec![false, true],
            other => {
                return Err(c.err(format!(
                    "direction '{other}' is not forward, reverse or bidirectional"
                )))
            }
        };
        let layout = c.int("layout", 0)?;
        if !(0..=1).contains(&layout) {
            return Err(c.err(format!("layout {layout} is not 0 or 1")));
        }
        let time_axis = layout as usize;
        let x = c.input(X)?;
        let xt = c.ty(x);
        let &[a0, a1, input_size] = xt.shape.as_slice() else {
            return Err(c.err(format!(
                "X has shape {:?}, expected 3 axes (sequence, batch, input)",
                xt.shape
            )));
        };
        let (steps, batch) = if layout == 0 { (a0, a1) } else { (a1, a0) };
        if steps == 0 {
            return Err(c.err("X has a sequence length of 0"));
        }
        let dirs = reverse.len();
        let r_shape = c.ty(c.input(R)?).shape;
        let hidden = match c.int("hidden_size", 0)? {
            0 => *r_shape.last().unwrap_or(&0),
            h => usize::try_from(h).map_err(|_| c.err(format!("hidden_size {h} is negative")))?,
        };
        if hidden == 0 {
            return Err(c.err("hidden_size is 0"));
        }
        // B holds 2·G·H values: a hidden_size that overflows it fits no weights.
        let gh = hidden
            .checked_mul(2 * gates)
            .map(|b| b / 2)
            .ok_or_else(|| c.err(format!("hidden_size {hidden} is too large")))?;
        let expect = |c: &NodeCtx, i: usize, what: &str, want: Vec<usize>| -> Res<()> {
            let Some(v) = c.opt_input(i) else {
                return Ok(());
            };
            let have = c.ty(v).shape;
            if have != want {
                return Err(c.err(format!(
                    "{what} has shape {have:?}, expected {want:?} for {dirs} direction(s), \
                     hidden_size {hidden} and input size {input_size}"
                )));
            }
            Ok(())
        };
        c.input(W)?;
        expect(c, W, "W", vec![dirs, gh, input_size])?;
        expect(c, R, "R", vec![dirs, gh, hidden])?;
        expect(c, B, "B", vec![dirs, 2 * gh])?;
        expect(c, SEQUENCE_LENS, "sequence_lens", vec![batch])?;

        let clip = match c.attr("clip") {
            Some(_) => Some(c.float("clip", 0.0)?),
            None => None,
        };
        if clip.is_some_and(|t| t.is_nan() || t < 0.0) {
            return Err(c.err(format!("clip {clip:?} is not a non-negative number")));
        }
        let activations = read_activations(c, defaults, dirs)?;
        let mut r = Recurrence {
            gates,
            hidden,
            batch,
            steps,
            reverse,
            time_axis,
            dtype: xt.dtype,
            clip,
            activations,
            masks: None,
        };
        r.check_state_input(c, INITIAL_H, "initial_h")?;
        r.masks = r.sequence_masks(c)?;
        Ok(r)
    }

    /// Checks that a state input, if given, is [D, B, H] ([B, D, H] for layout 1).
    fn check_state_input(&self, c: &NodeCtx, input: usize, what: &str) -> Res<()> {
        let Some(v) = c.opt_input(input) else {
            return Ok(());
        };
        let have = c.ty(v).shape;
        let mut want = vec![self.directions(), self.batch, self.hidden];
        want.swap(0, self.time_axis);
        if have != want {
            return Err(c.err(format!(
                "{what} has shape {have:?}, expected {want:?} (directions, batch and \
                 hidden_size {} in layout {})",
                self.hidden, self.time_axis
            )));
        }
        Ok(())
    }

    fn directions(&self) -> usize {
        self.reverse.len()
    }

    /// The shape of one step's state: [1, B, H], or [B, 1, H] for layout 1.
    fn state_shape(&self, last: usize) -> Vec<usize> {
        let mut s = vec![1, self.batch, last];
        s.swap(0, self.time_axis);
        s
    }

    /// Per step, whether `t < sequence_lens`; none when sequence_lens is
    /// absent or a constant equal to the sequence length everywhere.
    fn sequence_masks(&self, c: &mut NodeCtx) -> Res<Option<Vec<StepMask>>> {
        let Some(lens) = c.opt_input(SEQUENCE_LENS) else {
            return Ok(None);
        };
        let ty = c.ty(lens);
        if !matches!(ty.dtype, DType::I32 | DType::I64) {
            return Err(c.err(format!(
                "sequence_lens is {:?}, expected an integer type",
                ty.dtype
            )));
        }
        if let Some(t) = c.g.constant(lens) {
            let values = t.data.to_i64();
            if let Some(bad) = values
                .iter()
                .find(|&&l| !(0..=self.steps as i64).contains(&l))
            {
                return Err(c.err(format!(
                    "sequence_lens holds {bad}, outside 0..={} (the sequence length)",
                    self.steps
                )));
            }
            if values.iter().all(|&l| l == self.steps as i64) {
                return Ok(None);
            }
        }
        // Float arithmetic rather than a comparison and Where, so the masking
        // fuses with the cell: `clamp(len - t, 0, 1)` is 1 within, 0 past the end.
        let to = Op::Cast(Cast {
            to: self.dtype,
            saturate: false,
        });
        let lens = c.emit_inner(to, &[lens], "sequence_lens_float")?;
        let row = Op::Reshape(Reshape {
            shape: self.state_shape(1),
        });
        let rows = c.emit_inner(row, &[lens], "sequence_lens_rows")?;
        let one = c.scalar("mask_one", self.dtype, 1.0);
        (0..self.steps)
            .map(|t| {
                let tag = format!("t{t}");
                let step = c.scalar(&format!("{tag}/index"), self.dtype, t as f64);
                let left = c.binary(BinaryOp::Sub, rows, step, &format!("{tag}/left"))?;
                let within = c.emit_inner(
                    Op::Unary(UnaryOp::Clip { min: 0.0, max: 1.0 }),
                    &[left],
                    &format!("{tag}/within"),
                )?;
                let past = c.binary(BinaryOp::Sub, one, within, &format!("{tag}/past"))?;
                Ok(StepMask { within, past })
            })
            .collect::<Res<Vec<_>>>()
            .map(Some)
    }

    /// X times every direction's W^T, plus the biases Wb and Rb (Rb only where
    /// `folded_rb` is 1: GRU keeps one gate's Rb inside its reset product), as one
    /// MatMul over all steps: [T, B, D·G·H], or [B, T, D·G·H] for layout 1.
    fn input_projection(&self, c: &mut NodeCtx, folded_rb: Option<Vec<f64>>) -> Res<ValueRef> {
        let (dirs, gh) = (self.directions(), self.gates * self.hidden);
        let w = c.input(W)?;
        let input_size = c.ty(w).shape[2];
        let wt = c.emit_inner(
            Op::Transpose(Transpose {
                perm: vec![2, 0, 1],
            }),
            &[w],
            "W_transposed",
        )?;
        let wt = c.emit_inner(
            Op::Reshape(Reshape {
                shape: vec![input_size, dirs * gh],
            }),
            &[wt],
            "W_columns",
        )?;
        let xw = c.emit_inner(Op::MatMul, &[c.input(X)?, wt], "projection")?;
        let Some(b) = c.opt_input(B) else {
            return Ok(xw);
        };
        let wb = slice(c, b, &[(1, 0..gh)], "Wb")?;
        let mut rb = slice(c, b, &[(1, gh..2 * gh)], "Rb")?;
        if let Some(keep) = folded_rb {
            let keep = Tensor::new(vec![gh], TensorData::from_f64(self.dtype, keep));
            let keep = c.inner_constant("Rb_folded", keep);
            rb = c.emit_inner(Op::Binary(BinaryOp::Mul), &[rb, keep], "Rb_folded")?;
        }
        let bias = c.emit_inner(Op::Binary(BinaryOp::Add), &[wb, rb], "bias")?;
        let bias = c.emit_inner(
            Op::Reshape(Reshape {
                shape: vec![dirs * gh],
            }),
            &[bias],
            "bias_columns",
        )?;
        c.emit_inner(Op::Binary(BinaryOp::Add), &[xw, bias], "projection_biased")
    }

    /// Rows `rows` of direction `d`'s R, transposed: [H, rows] for `h · R^T`.
    fn recurrent_weights(&self, c: &mut NodeCtx, d: usize, rows: Range<usize>) -> Res<ValueRef> {
        let what = format!("d{d}/R{}_{}", rows.start, rows.end);
        let n = rows.len();
        let r = slice(c, c.input(R)?, &[(0, d..d + 1), (1, rows)], &what)?;
        let r = c.emit_inner(
            Op::Reshape(Reshape {
                shape: vec![n, self.hidden],
            }),
            &[r],
            &format!("{what}/matrix"),
        )?;
        c.emit_inner(
            Op::Transpose(Transpose { perm: vec![1, 0] }),
            &[r],
            &format!("{what}/transposed"),
        )
    }

    /// Elements `range` of row `d` of a per-direction vector input ([D, n]).
    fn direction_vector(
        &self,
        c: &mut NodeCtx,
        input: usize,
        d: usize,
        range: Range<usize>,
        what: &str,
    ) -> Res<ValueRef> {
        let n = range.len();
        let v = slice(c, c.input(input)?, &[(0, d..d + 1), (1, range)], what)?;
        c.emit_inner(
            Op::Reshape(Reshape { shape: vec![n] }),
            &[v],
            &format!("{what}/vector"),
        )
    }

    /// Direction `d`'s initial state from input `input` ([D, B, H], or
    /// [B, D, H] for layout 1), or zeros when the input is absent.
    fn initial(&self, c: &mut NodeCtx, input: usize, what: &str, d: usize) -> Res<ValueRef> {
        let Some(v) = c.opt_input(input) else {
            let shape = self.state_shape(self.hidden);
            let n = shape.iter().product();
            let zeros = Tensor::new(shape, TensorData::zeros(self.dtype, n));
            return Ok(c.inner_constant(&format!("d{d}/{what}_zero"), zeros));
        };
        slice(c, v, &[(self.time_axis, d..d + 1)], &format!("d{d}/{what}"))
    }

    /// The gate `k` (of H columns) of a step's [.., G·H] pre-activations.
    fn gate(&self, c: &mut NodeCtx, v: ValueRef, k: usize, what: &str) -> Res<ValueRef> {
        let h = self.hidden;
        slice(c, v, &[(2, k * h..(k + 1) * h)], what)
    }

    /// `act(clip(x))`: the spec clips the input of every activation.
    fn activate(&self, c: &mut NodeCtx, act: Activation, x: ValueRef, what: &str) -> Res<ValueRef> {
        let x = match self.clip {
            Some(t) => c.emit_inner(
                Op::Unary(UnaryOp::Clip { min: -t, max: t }),
                &[x],
                &format!("{what}/clipped"),
            )?,
            None => x,
        };
        let scaled = |c: &mut NodeCtx, x: ValueRef, by: f32, tag: &str| -> Res<ValueRef> {
            let s = c.scalar(&format!("{what}/{tag}"), self.dtype, by as f64);
            c.emit_inner(Op::Binary(BinaryOp::Mul), &[x, s], &format!("{what}/{tag}"))
        };
        match act {
            Activation::Unary(op) => c.emit_inner(Op::Unary(op), &[x], what),
            Activation::Affine { alpha, beta } => {
                let ax = scaled(c, x, alpha, "alpha")?;
                let b = c.scalar(&format!("{what}/beta"), self.dtype, beta as f64);
                c.emit_inner(Op::Binary(BinaryOp::Add), &[ax, b], what)
            }
            Activation::ScaledTanh { alpha, beta } => {
                let bx = scaled(c, x, beta, "beta")?;
                let t = c.emit_inner(Op::Unary(UnaryOp::Tanh), &[bx], &format!("{what}/tanh"))?;
                scaled(c, t, alpha, "alpha")
            }
        }
    }

    /// Runs direction `d` over every step in its order: `cell` maps a step's
    /// input projection ([.., G·H]) and the states (hidden first) to the new
    /// states. Rows past their sequence length keep their states and output 0.
    fn run(
        &self,
        c: &mut NodeCtx,
        projection: ValueRef,
        d: usize,
        mut states: Vec<ValueRef>,
        mut cell: impl FnMut(&mut NodeCtx, ValueRef, &[ValueRef], &str) -> Res<Vec<ValueRef>>,
    ) -> Res<Run> {
        let gh = self.gates * self.hidden;
        let order: Vec<usize> = match self.reverse[d] {
            false => (0..self.steps).collect(),
            true => (0..self.steps).rev().collect(),
        };
        let mut outputs = vec![None; self.steps];
        for t in order {
            let tag = format!("d{d}/t{t}");
            let xt = slice(
                c,
                projection,
                &[(self.time_axis, t..t + 1), (2, d * gh..(d + 1) * gh)],
                &format!("{tag}/x"),
            )?;
            let next = cell(c, xt, &states, &tag)?;
            let Some(masks) = &self.masks else {
                outputs[t] = Some(next[0]);
                states = next;
                continue;
            };
            let StepMask { within, past } = masks[t];
            let mul = |c: &mut NodeCtx, a: ValueRef, m: ValueRef, what: &str| {
                c.binary(BinaryOp::Mul, a, m, &format!("{tag}/{what}"))
            };
            outputs[t] = Some(mul(c, next[0], within, "output")?);
            // new·within + old·past: exactly one of them, as the masks are 0 or 1.
            states = next
                .iter()
                .zip(&states)
                .enumerate()
                .map(|(k, (&new, &old))| {
                    let new = mul(c, new, within, &format!("updated{k}"))?;
                    let old = mul(c, old, past, &format!("held{k}"))?;
                    c.binary(BinaryOp::Add, new, old, &format!("{tag}/kept{k}"))
                })
                .collect::<Res<Vec<_>>>()?;
        }
        Ok(Run {
            outputs: outputs.into_iter().flatten().collect(),
            finals: states,
        })
    }

    /// The node's outputs from each direction's run: Y [T, D, B, H] (or
    /// [B, T, D, H] for layout 1), then each final state ([D, B, H] or
    /// [B, D, H]); only those the node asks for are built.
    fn outputs(&self, c: &mut NodeCtx, mut runs: Vec<Run>) -> Res<Vec<Option<ValueRef>>> {
        let wanted = |i: usize| c.node.output.get(i).is_some_and(|n| !n.is_empty());
        let ta = self.time_axis;
        let mut out = Vec::new();
        if wanted(0) {
            let mut per_direction = Vec::with_capacity(runs.len());
            for (d, run) in runs.iter_mut().enumerate() {
                let steps = concat(c, &run.outputs, ta, &format!("d{d}/Y"))?;
                // Unmasked, the last step's output is the final hidden state: read
                // back from Y, it leaves the steps' outputs free to be computed in
                // place inside Y (a part that is a graph output itself cannot).
                if self.masks.is_none() && run.outputs.len() > 1 {
                    let last = if self.reverse[d] { 0 } else { self.steps - 1 };
                    let what = format!("d{d}/Y_last");
                    run.finals[0] = slice(c, steps, &[(ta, last..last + 1)], &what)?;
                }
                let mut shape = c.ty(steps).shape;
                shape.insert(ta + 1, 1);
                per_direction.push(c.emit_inner(
                    Op::Reshape(Reshape { shape }),
                    &[steps],
                    &format!("d{d}/Y_direction"),
                )?);
            }
            out.push(Some(concat(c, &per_direction, ta + 1, "Y")?));
        } else {
            out.push(None);
        }
        let state_count = runs.first().map_or(0, |r| r.finals.len());
        for k in 0..state_count {
            if !wanted(1 + k) {
                out.push(None);
                continue;
            }
            let finals: Vec<ValueRef> = runs.iter().map(|r| r.finals[k]).collect();
            out.push(Some(concat(c, &finals, ta, &format!("final{k}"))?));
        }
        Ok(out)
    }
}

/// The `activations` attribute (with `activation_alpha` and `activation_beta`,
/// consumed in order by the functions that take them), one list per direction;
/// `defaults` when absent.
fn read_activations(c: &NodeCtx, defaults: &[&str], dirs: usize) -> Res<Vec<Vec<Activation>>> {
    let floats = |name: &str| -> Res<Vec<f32>> {
        Ok(c.typed_attr(name, 6, "a list of floats")?
            .map_or(Vec::new(), |a| a.floats.clone()))
    };
    let (alphas, betas) = (floats("activation_alpha")?, floats("activation_beta")?);
    let names: Vec<String> = match c.typed_attr("activations", 8, "a list of strings")? {
        Some(a) => a
            .strings
            .iter()
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect(),
        None => (0..dirs)
            .flat_map(|_| defaults.iter().map(|s| s.to_string()))
            .collect(),
    };
    if names.len() != defaults.len() * dirs {
        return Err(c.err(format!(
            "activations lists {} functions, expected {} ({} per direction)",
            names.len(),
            defaults.len() * dirs,
            defaults.len()
        )));
    }
    let (mut alphas, mut betas) = (alphas.into_iter(), betas.into_iter());
    let mut acts = Vec::with_capacity(names.len());
    for name in &names {
        let mut alpha = |default: f32| alphas.next().unwrap_or(default);
        let act = match name.to_ascii_lowercase().as_str() {
            "sigmoid" => Activation::Unary(UnaryOp::Sigmoid),
            "tanh" => Activation::Unary(UnaryOp::Tanh),
            "relu" => Activation::Unary(UnaryOp::Relu),
            "softsign" => Activation::Unary(UnaryOp::Softsign),
            "softplus" => Activation::Unary(UnaryOp::Softplus),
            "leakyrelu" => Activation::Unary(UnaryOp::LeakyRelu { alpha: alpha(0.01) }),
            "thresholdedrelu" => Activation::Unary(UnaryOp::ThresholdedRelu { alpha: alpha(1.0) }),
            "elu" => Activation::Unary(UnaryOp::Elu { alpha: alpha(1.0) }),
            "hardsigmoid" => Activation::Unary(UnaryOp::HardSigmoid {
                alpha: alpha(0.2),
                beta: betas.next().unwrap_or(0.5),
            }),
            "affine" => Activation::Affine {
                alpha: alpha(1.0),
                beta: betas.next().unwrap_or(0.0),
            },
            "scaledtanh" => Activation::ScaledTanh {
                alpha: alpha(1.0),
                beta: betas.next().unwrap_or(1.0),
            },
            _ => {
                return Err(c.err(format!(
                    "activation '{name}' is not one of Sigmoid, Tanh, Relu, LeakyRelu, \
                     ThresholdedRelu, Elu, HardSigmoid, Affine, ScaledTanh, Softsign, Softplus"
                )))
            }
        };
        acts.push(act);
    }
    Ok(acts
        .chunks(defaults.len())
        .map(<[Activation]>::to_vec)
        .collect())
}

/// `v` sliced to `ranges` (axis, range) on the given axes.
fn slice(
    c: &mut NodeCtx,
    v: ValueRef,
    ranges: &[(usize, Range<usize>)],
    what: &str,
) -> Res<ValueRef> {
    let axes = ranges
        .iter()
        .map(|(axis, r)| SliceAxis {
            axis: *axis,
            start: r.start as i64,
            end: r.end as i64,
            step: 1,
        })
        .collect();
    c.emit_inner(Op::Slice(Slice { axes }), &[v], what)
}

/// `parts` joined along `axis` (the part itself when there is one).
fn concat(c: &mut NodeCtx, parts: &[ValueRef], axis: usize, what: &str) -> Res<ValueRef> {
    match parts {
        [one] => Ok(*one),
        _ => c.emit_inner(Op::Concat(Concat { axis }), parts, what),
    }
}

/// LSTM: gates i, o, f, c with activations f, g, h (default Sigmoid, Tanh,
/// Tanh); optional peepholes P (i, o, f), initial cell state and input_forget
/// (f = 1 - i). Outputs Y, Y_h, Y_c.
fn lstm(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    const INITIAL_C: usize = 6;
    const P: usize = 7;
    let r = Recurrence::read(c, 4, &["Sigmoid", "Tanh", "Tanh"])?;
    let (dirs, h) = (r.directions(), r.hidden);
    if let Some(p) = c.opt_input(P) {
        let have = c.ty(p).shape;
        if have != [dirs, 3 * h] {
            return Err(c.err(format!(
                "P has shape {have:?}, expected {:?} for {dirs} direction(s) and hidden_size {h}",
                [dirs, 3 * h]
            )));
        }
    }
    r.check_state_input(c, INITIAL_C, "initial_c")?;
    let input_forget = c.bool_attr("input_forget", false)?;
    let projection = r.input_projection(c, None)?;
    let one = c.scalar("one", r.dtype, 1.0);
    let mut runs = Vec::with_capacity(dirs);
    for d in 0..dirs {
        let rt = r.recurrent_weights(c, d, 0..4 * h)?;
        let peepholes = match c.opt_input(P) {
            Some(_) => Some(
                (0..3)
                    .map(|k| r.direction_vector(c, P, d, k * h..(k + 1) * h, &format!("d{d}/P{k}")))
                    .collect::<Res<Vec<_>>>()?,
            ),
            None => None,
        };
        let acts = &r.activations[d];
        let (f, g, act_h) = (acts[0], acts[1], acts[2]);
        let states = vec![
            r.initial(c, INITIAL_H, "initial_h", d)?,
            r.initial(c, INITIAL_C, "initial_c", d)?,
        ];
        let cell = |c: &mut NodeCtx, xt: ValueRef, s: &[ValueRef], tag: &str| {
            let (hp, cp) = (s[0], s[1]);
            let name = |what: &str| format!("{tag}/{what}");
            let hr = c.emit_inner(Op::MatMul, &[hp, rt], &name("recurrent"))?;
            let pre = c.binary(BinaryOp::Add, xt, hr, &name("gates"))?;
            // P's rows are i, o, f; peep adds P_k ⊙ state to gate k's input.
            let peep = |c: &mut NodeCtx, x: ValueRef, k: usize, state: ValueRef, what: &str| {
                match &peepholes {
                    Some(p) => {
                        let ps =
                            c.binary(BinaryOp::Mul, p[k], state, &name(&format!("{what}_peep")))?;
                        c.binary(BinaryOp::Add, x, ps, &name(&format!("{what}_peeped")))
                    }
                    None => Ok(x),
                }
            };
            let i = r.gate(c, pre, 0, &name("i_in"))?;
            let i = peep(c, i, 0, cp, "i")?;
            let i = r.activate(c, f, i, &name("i"))?;
            let fg = if input_forget {
                c.binary(BinaryOp::Sub, one, i, &name("f"))?
            } else {
                let fg = r.gate(c, pre, 2, &name("f_in"))?;
                let fg = peep(c, fg, 2, cp, "f")?;
                r.activate(c, f, fg, &name("f"))?
            };
            let cand = r.gate(c, pre, 3, &name("c_in"))?;
            let cand = r.activate(c, g, cand, &name("c"))?;
            let kept = c.binary(BinaryOp::Mul, fg, cp, &name("c_kept"))?;
            let added = c.binary(BinaryOp::Mul, i, cand, &name("c_added"))?;
            let cn = c.binary(BinaryOp::Add, kept, added, &name("C"))?;
            let o = r.gate(c, pre, 1, &name("o_in"))?;
            let o = peep(c, o, 1, cn, "o")?;
            let o = r.activate(c, f, o, &name("o"))?;
            let hc = r.activate(c, act_h, cn, &name("h_C"))?;
            let hn = c.binary(BinaryOp::Mul, o, hc, &name("H"))?;
            Ok(vec![hn, cn])
        };
        runs.push(r.run(c, projection, d, states, cell)?);
    }
    r.outputs(c, runs)
}

/// com.microsoft DynamicQuantizeLSTM, which onnxruntime's `quantize_dynamic`
/// makes of an LSTM: W and R are 8-bit integers stored transposed
/// (`[directions, rows, 4 * hidden_size]`) with scales and zero points per
/// direction or per column (inputs 8-11). They are dequantized and transposed
/// into the LSTM's own layout at import (the constants fold), and the layer
/// runs as a float LSTM with those weights. Onnxruntime also quantizes X and
/// the hidden state at every step, so its outputs differ from this float
/// result by that rounding.
fn dynamic_quantize_lstm(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    const W_SCALE: usize = 8;
    const R_SCALE: usize = 10;
    let w = dequantized_weights(c, W, W_SCALE, "W")?;
    let r = dequantized_weights(c, R, R_SCALE, "R")?;
    let mut inputs: Vec<Option<ValueRef>> = c.inputs.iter().take(W_SCALE).copied().collect();
    inputs[W] = Some(w);
    inputs[R] = Some(r);
    lstm(&mut c.with_inputs(&inputs))
}

/// Quantized weights `[directions, rows, columns]` at input `at`, with the
/// scale and zero point at `scale_at` and after it (`[directions]` or
/// `[directions, columns]`), as float `[directions, columns, rows]`.
fn dequantized_weights(c: &mut NodeCtx, at: usize, scale_at: usize, what: &str) -> Res<ValueRef> {
    let q = c.input(at)?;
    let shape = c.ty(q).shape;
    let [dirs, _, cols] = shape[..] else {
        return Err(c.err(format!(
            "{what} has shape {shape:?}, expected [directions, rows, 4 * hidden_size]"
        )));
    };
    if c.ty(q).dtype.is_float() {
        return Err(c.err(format!(
            "{what} is {}, expected 8-bit integers",
            c.ty(q).dtype
        )));
    }
    let as_float = |c: &mut NodeCtx, v: ValueRef, name: &str| {
        let cast = Op::Cast(Cast {
            to: DType::F32,
            saturate: true,
        });
        c.emit_inner(cast, &[v], &format!("{what}/{name}"))
    };
    // A scale or zero point per direction, or per direction and column.
    let broadcast = |c: &mut NodeCtx, v: ValueRef, name: &str| {
        let have = c.ty(v).shape;
        let to = match have[..] {
            [d] if d == dirs => vec![dirs, 1, 1],
            [d, k] if d == dirs && k == cols => vec![dirs, 1, cols],
            _ => {
                return Err(c.err(format!(
                    "{what}'s {name} has shape {have:?}, expected [{dirs}] or [{dirs}, {cols}]"
                )))
            }
        };
        c.reshape_to(v, to, &format!("{what}/{name}"))
    };
    let scale = c.input(scale_at)?;
    let scale = broadcast(c, scale, "scale")?;
    let zero_point = c.input(scale_at + 1)?;
    let zero_point = broadcast(c, zero_point, "zero_point")?;
    let zero_point = as_float(c, zero_point, "zero_point_as_float")?;
    let x = as_float(c, q, "as_float")?;
    let centered = c.binary(BinaryOp::Sub, x, zero_point, &format!("{what}/centered"))?;
    let w = c.binary(
        BinaryOp::Mul,
        centered,
        scale,
        &format!("{what}/dequantized"),
    )?;
    let transpose = Op::Transpose(Transpose {
        perm: vec![0, 2, 1],
    });
    c.emit_inner(transpose, &[w], &format!("{what}/transposed"))
}

/// GRU: gates z, r, h with activations f, g (default Sigmoid, Tanh). With
/// linear_before_reset the reset gate scales `h · Rh^T + Rbh`, else it scales
/// the state before its product with Rh. Outputs Y, Y_h.
fn gru(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let r = Recurrence::read(c, 3, &["Sigmoid", "Tanh"])?;
    let (dirs, h) = (r.directions(), r.hidden);
    let linear_before_reset = c.bool_attr("linear_before_reset", false)?;
    // Rbh stays out of the projection when the reset gate scales it.
    let folded_rb = linear_before_reset.then(|| {
        (0..3 * h)
            .map(|j| if j < 2 * h { 1.0 } else { 0.0 })
            .collect()
    });
    let projection = r.input_projection(c, folded_rb)?;
    let mut runs = Vec::with_capacity(dirs);
    for d in 0..dirs {
        // linear_before_reset: one product with all of R, plus Rbh after it;
        // else z and r share one product, h its own after the reset.
        let (rt, rt_h) = match linear_before_reset {
            true => (r.recurrent_weights(c, d, 0..3 * h)?, None),
            false => (
                r.recurrent_weights(c, d, 0..2 * h)?,
                Some(r.recurrent_weights(c, d, 2 * h..3 * h)?),
            ),
        };
        let rbh = match (linear_before_reset, c.opt_input(B)) {
            (true, Some(_)) => {
                Some(r.direction_vector(c, B, d, 5 * h..6 * h, &format!("d{d}/Rbh"))?)
            }
            _ => None,
        };
        let (f, g) = (r.activations[d][0], r.activations[d][1]);
        let states = vec![r.initial(c, INITIAL_H, "initial_h", d)?];
        let cell = |c: &mut NodeCtx, xt: ValueRef, s: &[ValueRef], tag: &str| {
            let hp = s[0];
            let name = |what: &str| format!("{tag}/{what}");
            let hr = c.emit_inner(Op::MatMul, &[hp, rt], &name("recurrent"))?;
            let gate = |c: &mut NodeCtx, k: usize, act: Activation, what: &str| {
                let x = r.gate(c, xt, k, &name(&format!("{what}_x")))?;
                let hk = r.gate(c, hr, k, &name(&format!("{what}_h")))?;
                let pre = c.binary(BinaryOp::Add, x, hk, &name(&format!("{what}_in")))?;
                r.activate(c, act, pre, &name(what))
            };
            let z = gate(c, 0, f, "z")?;
            let reset = gate(c, 1, f, "r")?;
            let recurrent_h = match rt_h {
                Some(rt_h) => {
                    let scaled = c.binary(BinaryOp::Mul, reset, hp, &name("reset_state"))?;
                    c.emit_inner(Op::MatMul, &[scaled, rt_h], &name("h_recurrent"))?
                }
                None => {
                    let hh = r.gate(c, hr, 2, &name("h_h"))?;
                    let hh = match rbh {
                        Some(b) => c.binary(BinaryOp::Add, hh, b, &name("h_biased"))?,
                        None => hh,
                    };
                    c.binary(BinaryOp::Mul, reset, hh, &name("h_reset"))?
                }
            };
            let x = r.gate(c, xt, 2, &name("h_x"))?;
            let pre = c.binary(BinaryOp::Add, x, recurrent_h, &name("h_in"))?;
            let cand = r.activate(c, g, pre, &name("h"))?;
            // (1 - z) ⊙ candidate + z ⊙ state, as candidate + z ⊙ (state - candidate).
            let diff = c.binary(BinaryOp::Sub, hp, cand, &name("state_delta"))?;
            let kept = c.binary(BinaryOp::Mul, z, diff, &name("state_kept"))?;
            Ok(vec![c.binary(BinaryOp::Add, cand, kept, &name("H"))?])
        };
        runs.push(r.run(c, projection, d, states, cell)?);
    }
    r.outputs(c, runs)
}

/// RNN: H = f(x · W^T + h · R^T + Wb + Rb), f defaulting to Tanh. Outputs Y, Y_h.
fn rnn(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let r = Recurrence::read(c, 1, &["Tanh"])?;
    let projection = r.input_projection(c, None)?;
    let mut runs = Vec::with_capacity(r.directions());
    for d in 0..r.directions() {
        let rt = r.recurrent_weights(c, d, 0..r.hidden)?;
        let f = r.activations[d][0];
        let states = vec![r.initial(c, INITIAL_H, "initial_h", d)?];
        let cell = |c: &mut NodeCtx, xt: ValueRef, s: &[ValueRef], tag: &str| {
            let hr = c.emit_inner(Op::MatMul, &[s[0], rt], &format!("{tag}/recurrent"))?;
            let pre = c.binary(BinaryOp::Add, xt, hr, &format!("{tag}/in"))?;
            Ok(vec![r.activate(c, f, pre, &format!("{tag}/H"))?])
        };
        runs.push(r.run(c, projection, d, states, cell)?);
    }
    r.outputs(c, runs)
}
