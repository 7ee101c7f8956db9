//! The ONNX form of ops: the [`OnnxWriter`] an exporter implements, the
//! attribute values ops hand it, and layouts spelled out as ONNX data movement.
//!
//!
//! A layout splits each logical axis `a` (padded to a multiple of its block) into
//! digits `[outer, f1, f2, ...]`, outer to inner, and orders all digits
//! physically. A row-major Reshape of the padded axis into its digits yields
//! exactly that mixed-radix split, so logical -> physical is Pad, Reshape,
//! Transpose, and physical -> logical the inverse Transpose, Reshape, Slice.
//! Steps that would do nothing are left out.

use super::{OpError, UnaryOp, Window};
use crate::core::{DType, Layout, PadValue, Tensor, TensorData, ValueType};

/// An attribute of a node.
#[allow(missing_docs)]
pub enum Attr {
    Int(i64),
    Ints(Vec<i64>),
    Float(f32),
    Floats(Vec<f32>),
    Str(&'static str),
}

/// Where an op writes its ONNX nodes: an exporter that names values uniquely and
/// keeps constant inputs as initializers.
pub trait OnnxWriter {
    /// The opset the model is written for.
    fn opset(&self) -> i64;
    /// The name of the IR node being written, which names what it adds.
    fn layer(&self) -> &str;
    /// A unique value name starting with `base`.
    fn fresh(&mut self, base: &str) -> String;
    /// A constant input (an initializer) named after the current layer; its name.
    fn constant(&mut self, what: &str, t: &Tensor) -> String;
    /// Adds a node with several outputs, named `outputs`.
    fn node_multi(
        &mut self,
        op_type: &str,
        inputs: &[String],
        attrs: Vec<(&str, Attr)>,
        outputs: &[String],
    );

    /// Adds a node with one output and returns that output's name (`out` when
    /// given, else one after the layer and op type).
    fn node(
        &mut self,
        op_type: &str,
        inputs: &[String],
        attrs: Vec<(&str, Attr)>,
        out: Option<String>,
    ) -> String {
        let out = out.unwrap_or_else(|| {
            let base = format!("{}/{op_type}", self.layer());
            self.fresh(&base)
        });
        self.node_multi(op_type, inputs, attrs, std::slice::from_ref(&out));
        out
    }
    /// The batch the graph was planned for, when the export keeps axis 0 of
    /// the interface symbolic: shape constants then copy axis 0 where it passes
    /// through unchanged, so that other batches run too.
    fn batch(&self) -> Option<usize> {
        None
    }

    /// A Reshape target for a tensor of shape `from`: `to`, with axis 0 as 0
    /// ("copy the input's") when the batch is symbolic and axis 0 passes through.
    fn reshape_target(&mut self, from: &[usize], to: &[usize]) -> String {
        let mut v = as_i64(to);
        if self.batch().is_some() && !from.is_empty() && from.first() == to.first() {
            v[0] = 0;
        }
        self.ints("shape", &v)
    }

    /// A constant 1-D i64 input.
    fn ints(&mut self, what: &str, v: &[i64]) -> String {
        self.constant(what, &Tensor::from_i64(vec![v.len()], v.to_vec()))
    }
}

/// What an op's ONNX form is written with.
pub struct OnnxCx<'a> {
    /// Where the nodes go.
    pub b: &'a mut dyn OnnxWriter,
    /// Names of the op's inputs.
    pub inputs: &'a [String],
    /// Types of the op's inputs.
    pub in_types: &'a [ValueType],
    /// The names the outputs should get where free.
    pub outputs: &'a [String],
}

impl<'a> OnnxCx<'a> {
    /// The writer, the input names and types, and the wanted output names.
    pub fn parts(
        self,
    ) -> (
        &'a mut dyn OnnxWriter,
        &'a [String],
        &'a [ValueType],
        &'a [String],
    ) {
        (self.b, self.inputs, self.in_types, self.outputs)
    }

    /// The name of input `k`.
    pub fn input(&self, k: usize) -> String {
        self.inputs[k].clone()
    }

    /// One node producing the op's single output, named after it.
    pub fn single(
        &mut self,
        op_type: &str,
        inputs: &[String],
        attrs: Vec<(&str, Attr)>,
    ) -> Result<Vec<String>, OpError> {
        Ok(single(self.b, self.outputs, op_type, inputs, attrs))
    }
}

/// One node producing the op's single output, named after it.
pub(super) fn single(
    b: &mut dyn OnnxWriter,
    outputs: &[String],
    op_type: &str,
    inputs: &[String],
    attrs: Vec<(&str, Attr)>,
) -> Vec<String> {
    let out = b.fresh(&outputs[0]);
    vec![b.node(op_type, inputs, attrs, Some(out))]
}

pub(super) fn i64s(v: &[usize]) -> Vec<i64> {
    v.iter().map(|&x| x as i64).collect()
}

pub(super) fn window_attrs(w: &Window, dilations: bool) -> Vec<(&'static str, Attr)> {
    let mut a = vec![
        ("kernel_shape", Attr::Ints(i64s(&w.kernel))),
        ("strides", Attr::Ints(i64s(&w.strides))),
        ("pads", Attr::Ints(i64s(&w.pads))),
    ];
    if dilations {
        a.push(("dilations", Attr::Ints(i64s(&w.dilations))));
    }
    a
}

/// The ONNX attributes of a unary op (Clip takes its bounds as inputs; see its `to_onnx`).
pub(super) fn unary_attrs(u: UnaryOp) -> Vec<(&'static str, Attr)> {
    match u {
        UnaryOp::LeakyRelu { alpha } => vec![("alpha", Attr::Float(alpha))],
        UnaryOp::HardSigmoid { alpha, beta } => {
            vec![("alpha", Attr::Float(alpha)), ("beta", Attr::Float(beta))]
        }
        UnaryOp::Elu { alpha } | UnaryOp::Celu { alpha } | UnaryOp::ThresholdedRelu { alpha } => {
            vec![("alpha", Attr::Float(alpha))]
        }
        UnaryOp::Selu { alpha, gamma } => {
            vec![("alpha", Attr::Float(alpha)), ("gamma", Attr::Float(gamma))]
        }
        UnaryOp::Gelu { tanh_approx } => vec![(
            "approximate",
            Attr::Str(if tanh_approx { "tanh" } else { "none" }),
        )],
        _ => vec![],
    }
}

pub(super) fn scalar(dtype: DType, v: f64) -> TensorData {
    TensorData::from_f64(dtype, vec![v])
}

/// Where each digit of `layout` sits once every logical axis is reshaped into
/// its digits in logical order, and the extents of that reshaped tensor.
fn digit_positions(layout: &Layout, logical: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let mut first = Vec::with_capacity(logical.len());
    let mut split_shape = Vec::new();
    for (a, &extent) in logical.iter().enumerate() {
        first.push(split_shape.len());
        let f = layout.factors(a);
        let padded = layout.padded_extent(a, extent);
        split_shape.push(padded / f.iter().product::<usize>());
        split_shape.extend_from_slice(f);
    }
    let perm = layout
        .order()
        .iter()
        .map(|d| first[d.axis] + d.level)
        .collect();
    (perm, split_shape)
}

fn is_identity_perm(perm: &[usize]) -> bool {
    perm.iter().enumerate().all(|(i, &p)| i == p)
}

fn as_i64(v: &[usize]) -> Vec<i64> {
    v.iter().map(|&x| x as i64).collect()
}

/// The value written into padding: the known value, or 0 where anything goes.
pub(super) fn fill_value(pad: PadValue) -> f64 {
    match pad {
        PadValue::Known(v) => v as f64,
        PadValue::Undef => 0.0,
    }
}

/// A constant Pad of `x` (of `dtype`) by `begins`/`ends` (negative crops).
pub(super) fn pad(
    b: &mut dyn OnnxWriter,
    x: &str,
    dtype: DType,
    begins: &[i64],
    ends: &[i64],
    fill: f64,
) -> String {
    let pads: Vec<i64> = begins.iter().chain(ends).copied().collect();
    let pads = b.ints("pads", &pads);
    let value = b.constant(
        "pad_value",
        &Tensor::new(vec![], TensorData::from_f64(dtype, vec![fill])),
    );
    b.node(
        "Pad",
        &[x.to_string(), pads, value],
        vec![("mode", Attr::Str("constant"))],
        None,
    )
}

/// A Slice of `x` keeping `[starts[i], ends[i])` of axis `axes[i]` (step 1).
pub(super) fn slice(
    b: &mut dyn OnnxWriter,
    x: &str,
    axes: &[i64],
    starts: &[i64],
    ends: &[i64],
) -> String {
    let inputs = [
        x.to_string(),
        b.ints("starts", starts),
        b.ints("ends", ends),
        b.ints("axes", axes),
    ];
    b.node("Slice", &inputs, vec![], None)
}

pub(super) fn reshape(b: &mut dyn OnnxWriter, x: &str, from: &[usize], shape: &[usize]) -> String {
    let s = b.reshape_target(from, shape);
    b.node("Reshape", &[x.to_string(), s], vec![], None)
}

pub(super) fn transpose(b: &mut dyn OnnxWriter, x: &str, perm: &[usize]) -> String {
    b.node(
        "Transpose",
        &[x.to_string()],
        vec![("perm", Attr::Ints(as_i64(perm)))],
        None,
    )
}

/// The physical tensor of layout `layout` holding the logical tensor `x`.
pub(super) fn to_physical(
    b: &mut dyn OnnxWriter,
    x: &str,
    layout: &Layout,
    logical: &[usize],
    dtype: DType,
    pad_value: PadValue,
) -> String {
    if layout.is_identity() {
        return x.to_string();
    }
    let mut x = x.to_string();
    let padded: Vec<usize> = (0..logical.len())
        .map(|a| layout.padded_extent(a, logical[a]))
        .collect();
    if padded != logical {
        let ends: Vec<i64> = padded
            .iter()
            .zip(logical)
            .map(|(p, l)| (p - l) as i64)
            .collect();
        x = pad(
            b,
            &x,
            dtype,
            &vec![0; logical.len()],
            &ends,
            fill_value(pad_value),
        );
    }
    let (perm, split_shape) = digit_positions(layout, logical);
    if layout.is_blocked() {
        x = reshape(b, &x, &padded, &split_shape);
    }
    if !is_identity_perm(&perm) {
        x = transpose(b, &x, &perm);
    }
    x
}

/// The logical tensor of shape `logical` that the physical tensor `x` in
/// `layout` holds.
pub(super) fn from_physical(
    b: &mut dyn OnnxWriter,
    x: &str,
    layout: &Layout,
    logical: &[usize],
) -> String {
    if layout.is_identity() {
        return x.to_string();
    }
    let mut x = x.to_string();
    let (perm, split_shape) = digit_positions(layout, logical);
    if !is_identity_perm(&perm) {
        let mut inverse = vec![0; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            inverse[p] = i;
        }
        x = transpose(b, &x, &inverse);
    }
    let padded: Vec<usize> = (0..logical.len())
        .map(|a| layout.padded_extent(a, logical[a]))
        .collect();
    if layout.is_blocked() {
        x = reshape(b, &x, &split_shape, &padded);
    }
    let cut: Vec<usize> = (0..logical.len())
        .filter(|&a| padded[a] != logical[a])
        .collect();
    if !cut.is_empty() {
        let axes: Vec<i64> = cut.iter().map(|&a| a as i64).collect();
        let starts = vec![0; cut.len()];
        let ends: Vec<i64> = cut.iter().map(|&a| logical[a] as i64).collect();
        x = slice(b, &x, &axes, &starts, &ends);
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nchw16c_digits() {
        // NCHW16c of [1, 17, 2, 3]: C padded to 32 and split into [2, 16];
        // the reshaped tensor is [N, C/16, c16, H, W] and the physical order
        // N C H W c puts digit 2 (c16) last.
        let l = Layout::parse("NCHW16c").unwrap();
        let (perm, shape) = digit_positions(&l, &[1, 17, 2, 3]);
        assert_eq!(shape, vec![1, 2, 16, 2, 3]);
        assert_eq!(perm, vec![0, 1, 3, 4, 2]);
    }

    #[test]
    fn nhwc_is_a_plain_transpose() {
        let l = Layout::parse("NHWC").unwrap();
        let (perm, shape) = digit_positions(&l, &[1, 3, 4, 5]);
        assert_eq!(shape, vec![1, 3, 4, 5]);
        assert_eq!(perm, vec![0, 2, 3, 1]);
    }
}
