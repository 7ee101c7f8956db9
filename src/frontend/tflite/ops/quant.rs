//! Quantized TFLite tensors (full-integer and dynamic-range models). The
//! importer works on each quantized tensor's float meaning,
//! `(q - zero_point) * scale` (per tensor, or per channel along
//! `quantized_dimension`):
//! - a quantized constant (weights, int32 biases) becomes its float values;
//! - a quantized graph input is dequantized by ops, a quantized graph output
//!   quantized back to its stored type;
//! - every operator computes in float, and its quantized outputs are rounded
//!   onto their grid: `(clamp(round(y / scale) + zero_point) - zero_point) * scale`;
//! - QUANTIZE and DEQUANTIZE of integers are then the identity.
//!
//! The model runs in float with every quantized value on its grid. TFLite's
//! integer kernels requantize in fixed point, so a value at half a step may
//! round the other way: results agree within one step, mostly exactly.

use super::super::{Importer, TfliteError};
use super::{Cx, Res};
use crate::graph::fold_node;
use crate::graph::{BinaryOp, DType, Op, Span, Tensor, TensorData, UnaryOp, ValueRef, ValueType};
use crate::ops::Cast;

/// The quantization of an integer tensor.
pub(in crate::frontend::tflite) struct Quantization {
    /// The stored (integer) type.
    dtype: DType,
    scale: Vec<f64>,
    zero_point: Vec<f64>,
    /// The axis the scales run along (when there are several).
    axis: usize,
}

impl Quantization {
    /// Whether the stored integers are 8-bit.
    pub(in crate::frontend::tflite) fn is_bytes(&self) -> bool {
        matches!(self.dtype, DType::I8 | DType::U8)
    }

    /// Whether the scales differ along the axis (equal ones are one
    /// per-tensor scale, as TFLite's kernels read them).
    pub(in crate::frontend::tflite) fn per_channel(&self) -> bool {
        self.scale.iter().any(|&s| s != self.scale[0])
    }

    /// `values` (one, or one per index of the axis) as a constant that
    /// broadcasts against a tensor of shape `shape`; `None` when `shape` has
    /// no such axis of that many indices.
    fn broadcast(&self, values: &[f64], shape: &[usize]) -> Option<Tensor> {
        let data = TensorData::from_f64(DType::F32, values.to_vec());
        if values.len() == 1 {
            return Some(Tensor::new(vec![], data));
        }
        let mut along = vec![1; shape.len()];
        (shape.get(self.axis) == Some(&values.len())).then(|| {
            along[self.axis] = values.len();
            Tensor::new(along, data)
        })
    }
}

impl Importer<'_> {
    /// The quantization of tensor `t`: an integer tensor with scales.
    pub(in crate::frontend::tflite) fn quantization(
        &self,
        t: usize,
    ) -> Result<Option<Quantization>, TfliteError> {
        let tensor = self.tensor(t);
        let Some(dtype) = super::super::dtype_of(tensor.tensor_type()) else {
            return Ok(None);
        };
        let Some(q) = tensor.quantization() else {
            return Ok(None);
        };
        let scale: Vec<f64> = q
            .scale()
            .map_or(vec![], |s| s.iter().map(f64::from).collect());
        let Some((lo, hi)) = dtype.integer_range().filter(|_| !scale.is_empty()) else {
            return Ok(None);
        };
        let bad = |message: String| {
            self.invalid(format!(
                "tensor #{t} '{}' quantization: {message}",
                self.tensor_name(t)
            ))
        };
        if let Some(s) = scale.iter().find(|s| !(**s > 0.0 && s.is_finite())) {
            return Err(bad(format!("scale {s} is not a positive finite number")));
        }
        let mut zero_point: Vec<f64> = q
            .zero_point()
            .map_or(vec![], |z| z.iter().map(|z| z as f64).collect());
        if zero_point.is_empty() {
            zero_point = vec![0.0; scale.len()];
        }
        if zero_point.len() != scale.len() {
            return Err(bad(format!(
                "{} zero points for {} scales",
                zero_point.len(),
                scale.len()
            )));
        }
        if let Some(z) = zero_point.iter().find(|z| **z < lo || **z > hi) {
            return Err(bad(format!("zero point {z} is outside {}", dtype.name())));
        }
        let shape = self.declared_shape(t)?.unwrap_or_default();
        let axis = usize::try_from(q.quantized_dimension()).unwrap_or(usize::MAX);
        if scale.len() > 1 && shape.get(axis) != Some(&scale.len()) {
            return Err(bad(format!(
                "{} scales along axis {} of shape {shape:?}",
                scale.len(),
                q.quantized_dimension()
            )));
        }
        Ok(Some(Quantization {
            dtype,
            scale,
            zero_point,
            axis,
        }))
    }

    /// The type the importer gives tensor `t`: float for a quantized tensor.
    pub(in crate::frontend::tflite) fn logical_type(
        &self,
        t: usize,
    ) -> Result<ValueType, TfliteError> {
        let ty = self.value_type(t)?;
        Ok(match self.quantization(t)? {
            Some(_) => ValueType::new(DType::F32, ty.shape),
            None => ty,
        })
    }

    /// The float meaning of quantized constant `data`.
    pub(in crate::frontend::tflite) fn dequantized(data: &Tensor, q: &Quantization) -> Tensor {
        let values = data.data.to_f64();
        let inner: usize = data.shape.iter().skip(q.axis + 1).product();
        let per = |i: usize| match q.scale.len() {
            1 => 0,
            n => (i / inner.max(1)) % n,
        };
        let out = values
            .iter()
            .enumerate()
            .map(|(i, &v)| (v - q.zero_point[per(i)]) * q.scale[per(i)])
            .collect();
        Tensor::new(data.shape.clone(), TensorData::from_f64(DType::F32, out))
    }

    /// Adds `op` (folded where its inputs are constants).
    fn add_op(&mut self, op: Op, name: &str, inputs: &[ValueRef], span: &Span) -> Res<ValueRef> {
        let id = self
            .graph
            .add_node(op, name, inputs, &[name.to_string()], vec![span.clone()])?;
        Ok(fold_node(&mut self.graph, id)?.map_or(ValueRef::new(id, 0), |c| c[0]))
    }

    /// The zero point and the scale of `q` as constants that broadcast
    /// against `v`, named after it.
    fn parameters(
        &mut self,
        v: ValueRef,
        q: &Quantization,
        span: &Span,
    ) -> Res<(ValueRef, ValueRef)> {
        let shape = self.graph.value_type(v).shape.clone();
        let name = self.graph.value(v).name.clone();
        let mut constant = |what: &str, values: &[f64]| {
            let t = q
                .broadcast(values, &shape)
                .ok_or_else(|| TfliteError::Layer {
                    span: span.clone(),
                    message: format!(
                    "{} quantization {what}s do not fit axis {} of '{name}', of shape {shape:?}",
                    values.len(),
                    q.axis
                ),
                })?;
            let at = format!("{name}/{what}");
            Res::Ok(self.graph.add_constant(&at, t, vec![span.clone()]))
        };
        Ok((
            constant("zero_point", &q.zero_point)?,
            constant("scale", &q.scale)?,
        ))
    }

    /// The float meaning of graph input `x`, stored quantized.
    pub(in crate::frontend::tflite) fn dequantized_input(
        &mut self,
        x: ValueRef,
        q: &Quantization,
        span: &Span,
    ) -> Res<ValueRef> {
        let name = self.graph.value(x).name.clone();
        let (zp, scale) = self.parameters(x, q, span)?;
        let cast = Op::Cast(Cast {
            to: DType::F32,
            saturate: true,
        });
        let y = self.add_op(cast, &format!("{name}/as_float"), &[x], span)?;
        let y = self.add_op(
            Op::Binary(BinaryOp::Sub),
            &format!("{name}/centered"),
            &[y, zp],
            span,
        )?;
        self.add_op(
            Op::Binary(BinaryOp::Mul),
            &format!("{name}/dequantized"),
            &[y, scale],
            span,
        )
    }

    /// Float `y` rounded onto the grid of `q`; with `store`, as its stored
    /// integers (a graph output), else as their float meaning.
    pub(in crate::frontend::tflite) fn onto_grid(
        &mut self,
        y: ValueRef,
        q: &Quantization,
        store: bool,
        span: &Span,
    ) -> Res<ValueRef> {
        let name = self.graph.value(y).name.clone();
        let (lo, hi) = q
            .dtype
            .integer_range()
            .expect("a quantized type is an integer");
        let (zp, scale) = self.parameters(y, q, span)?;
        let mut add = |op, step: &str, inputs: &[ValueRef]| {
            self.add_op(op, &format!("{name}/{step}"), inputs, span)
        };
        let v = add(Op::Binary(BinaryOp::Div), "scaled", &[y, scale])?;
        let v = add(Op::Unary(UnaryOp::Round), "rounded", &[v])?;
        let v = add(Op::Binary(BinaryOp::Add), "shifted", &[v, zp])?;
        let clip = UnaryOp::Clip {
            min: lo as f32,
            max: hi as f32,
        };
        let v = add(Op::Unary(clip), "saturated", &[v])?;
        if store {
            let cast = Op::Cast(Cast {
                to: q.dtype,
                saturate: true,
            });
            return add(cast, "quantized", &[v]);
        }
        let v = add(Op::Binary(BinaryOp::Sub), "centered", &[v, zp])?;
        add(Op::Binary(BinaryOp::Mul), "on_grid", &[v, scale])
    }
}

impl Cx<'_, '_> {
    /// QUANTIZE, and DEQUANTIZE of an integer tensor: the float meaning of
    /// the input, which the output's quantization then rounds onto its grid.
    pub(super) fn requantize(&mut self) -> Res<ValueRef> {
        let x = self.input(0)?;
        self.emit(Op::Identity, "float", &[x])
    }
}
