//! One IR op as ONNX nodes.

use super::transforms::{fill_value, from_physical, pad, slice, to_physical};
use super::{Attr, Builder};
use crate::frontend::onnx::dtype_to_onnx;
use crate::graph::{
    CoordTransform, NearestMode, Op, PadMode, PoolKind, ReduceKind, ResizeMode, Tensor, UnaryOp,
    Value, ValueType, Window,
};
use crate::ops::{
    BatchNorm, Cast, Concat, Crop, Expand, Gather, Gemm, GlobalPool, LayerNorm, LayoutTransform,
    LogSoftmax, Pad, PadWith, Reduce, Reshape, Slice, Softmax, Split, Tile, Transpose,
};

fn i64s(v: &[usize]) -> Vec<i64> {
    v.iter().map(|&x| x as i64).collect()
}

fn window_attrs(w: &Window, dilations: bool) -> Vec<(&'static str, Attr)> {
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

/// The ONNX attributes of a unary op (Clip takes its bounds as inputs; see `Builder::op`).
fn unary_attrs(u: UnaryOp) -> Vec<(&'static str, Attr)> {
    match u {
        UnaryOp::LeakyRelu { alpha } => vec![("alpha", Attr::Float(alpha))],
        UnaryOp::HardSigmoid { alpha, beta } => {
            vec![("alpha", Attr::Float(alpha)), ("beta", Attr::Float(beta))]
        }
        UnaryOp::Gelu { tanh_approx } => vec![(
            "approximate",
            Attr::Str(if tanh_approx { "tanh" } else { "none" }),
        )],
        _ => vec![],
    }
}

impl Builder {
    /// Emits `op` on `inputs` (of types `in_types`) producing `outputs`; returns
    /// the ONNX names of the outputs.
    pub(super) fn op(
        &mut self,
        op: &Op,
        inputs: &[String],
        in_types: &[ValueType],
        outputs: &[Value],
    ) -> Result<Vec<String>, String> {
        let x = || inputs[0].clone();
        let name = |b: &mut Builder, i: usize| Some(b.fresh(&outputs[i].name));
        let one = |b: &mut Builder, op_type: &str, ins: &[String], attrs| {
            let out = name(b, 0);
            vec![b.node(op_type, ins, attrs, out)]
        };
        Ok(match op {
            Op::Input | Op::Constant(_) => {
                return Err("sources are graph inputs and initializers, not nodes".into())
            }
            Op::Conv(c) => {
                let mut a = window_attrs(&c.window, true);
                a.push(("group", Attr::Int(c.group as i64)));
                one(self, "Conv", inputs, a)
            }
            Op::ConvTranspose(c) => {
                let mut a = window_attrs(&c.window, true);
                a.push(("group", Attr::Int(c.group as i64)));
                a.push(("output_padding", Attr::Ints(i64s(&c.output_padding))));
                one(self, "ConvTranspose", inputs, a)
            }
            Op::BatchNorm(BatchNorm { epsilon }) => one(
                self,
                "BatchNormalization",
                inputs,
                vec![("epsilon", Attr::Float(*epsilon))],
            ),
            Op::Unary(UnaryOp::Clip { min, max }) => {
                let dtype = in_types[0].dtype;
                let bound = |b: &mut Builder, what: &str, v: f32| {
                    if v.is_infinite() {
                        String::new()
                    } else {
                        b.constant(what, &Tensor::new(vec![], scalar(dtype, v as f64)))
                    }
                };
                let lo = bound(self, "min", *min);
                let hi = bound(self, "max", *max);
                let mut ins = vec![x(), lo, hi];
                while ins.last().is_some_and(String::is_empty) {
                    ins.pop();
                }
                one(self, "Clip", &ins, vec![])
            }
            Op::Unary(u) => {
                let (op_type, attrs) = (u.name(), unary_attrs(*u));
                one(self, op_type, inputs, attrs)
            }
            Op::Binary(bop) => one(self, bop.name(), inputs, vec![]),
            Op::Where => one(self, "Where", inputs, vec![]),
            Op::Pool(p) => {
                let is_max = p.kind == PoolKind::Max;
                // AveragePool has dilations only from opset 19 (see `min_opset`).
                let dilated = p.window.dilations.iter().any(|&d| d != 1);
                let mut a = window_attrs(&p.window, is_max || dilated);
                a.push(("ceil_mode", Attr::Int(p.ceil_mode as i64)));
                if !is_max {
                    a.push(("count_include_pad", Attr::Int(p.count_include_pad as i64)));
                }
                one(
                    self,
                    if is_max { "MaxPool" } else { "AveragePool" },
                    inputs,
                    a,
                )
            }
            Op::GlobalPool(GlobalPool { kind: k }) => one(
                self,
                match k {
                    PoolKind::Max => "GlobalMaxPool",
                    PoolKind::Avg => "GlobalAveragePool",
                },
                inputs,
                vec![],
            ),
            Op::Gemm(Gemm {
                alpha,
                beta,
                trans_a,
                trans_b,
            }) => one(
                self,
                "Gemm",
                inputs,
                vec![
                    ("alpha", Attr::Float(*alpha)),
                    ("beta", Attr::Float(*beta)),
                    ("transA", Attr::Int(*trans_a as i64)),
                    ("transB", Attr::Int(*trans_b as i64)),
                ],
            ),
            Op::MatMul => one(self, "MatMul", inputs, vec![]),
            Op::Reshape(Reshape { shape }) => {
                let s = self.ints("shape", &i64s(shape));
                one(self, "Reshape", &[x(), s], vec![])
            }
            Op::Transpose(Transpose { perm }) => one(
                self,
                "Transpose",
                inputs,
                vec![("perm", Attr::Ints(i64s(perm)))],
            ),
            Op::Concat(Concat { axis }) => one(
                self,
                "Concat",
                inputs,
                vec![("axis", Attr::Int(*axis as i64))],
            ),
            Op::Split(Split { axis, sizes }) => {
                let s = self.ints("split", &i64s(sizes));
                let outs: Vec<String> = (0..outputs.len())
                    .map(|i| self.fresh(&outputs[i].name))
                    .collect();
                self.node_multi(
                    "Split",
                    &[x(), s],
                    vec![("axis", Attr::Int(*axis as i64))],
                    &outs,
                );
                outs
            }
            Op::Slice(Slice { axes }) => {
                let extent = |a: usize| in_types[0].shape[a] as i64;
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
                    x(),
                    self.ints("starts", &starts),
                    self.ints("ends", &ends),
                    self.ints("axes", &ax),
                    self.ints("steps", &steps),
                ];
                one(self, "Slice", &ins, vec![])
            }
            Op::Gather(Gather { axis }) => one(
                self,
                "Gather",
                inputs,
                vec![("axis", Attr::Int(*axis as i64))],
            ),
            Op::Pad(Pad { begins, ends, mode }) => {
                let pads: Vec<i64> = begins.iter().chain(ends).copied().collect();
                let p = self.ints("pads", &pads);
                let (mode, value) = match mode {
                    PadMode::Constant(v) => ("constant", Some(*v)),
                    PadMode::Reflect => ("reflect", None),
                    PadMode::Edge => ("edge", None),
                };
                let mut ins = vec![x(), p];
                if let Some(v) = value {
                    let t = Tensor::new(vec![], scalar(in_types[0].dtype, v as f64));
                    ins.push(self.constant("value", &t));
                }
                one(self, "Pad", &ins, vec![("mode", Attr::Str(mode))])
            }
            Op::Resize(r) => {
                let shape = &in_types[0].shape;
                // Scales reproduce the sizes exactly when floor(extent * scale)
                // gives them (as the importer computes them); otherwise sizes.
                let by_scales = shape
                    .iter()
                    .zip(&r.scales)
                    .zip(&r.sizes)
                    .all(|((&d, &s), &n)| (d as f64 * s as f64).floor() as usize == n);
                let mut ins = vec![x(), String::new()];
                if by_scales {
                    let t = Tensor::from_f32(vec![r.scales.len()], r.scales.clone());
                    ins.push(self.constant("scales", &t));
                } else {
                    ins.push(String::new());
                    ins.push(self.ints("sizes", &i64s(&r.sizes)));
                }
                let mode = match r.mode {
                    ResizeMode::Nearest => "nearest",
                    ResizeMode::Linear => "linear",
                };
                let coord = match r.coord {
                    CoordTransform::HalfPixel => "half_pixel",
                    CoordTransform::PytorchHalfPixel => "pytorch_half_pixel",
                    CoordTransform::AlignCorners => "align_corners",
                    CoordTransform::Asymmetric => "asymmetric",
                };
                let nearest = match r.nearest {
                    NearestMode::RoundPreferFloor => "round_prefer_floor",
                    NearestMode::RoundPreferCeil => "round_prefer_ceil",
                    NearestMode::Floor => "floor",
                    NearestMode::Ceil => "ceil",
                };
                one(
                    self,
                    "Resize",
                    &ins,
                    vec![
                        ("mode", Attr::Str(mode)),
                        ("coordinate_transformation_mode", Attr::Str(coord)),
                        ("nearest_mode", Attr::Str(nearest)),
                    ],
                )
            }
            Op::Softmax(Softmax { axis }) => one(
                self,
                "Softmax",
                inputs,
                vec![("axis", Attr::Int(*axis as i64))],
            ),
            Op::LogSoftmax(LogSoftmax { axis }) => one(
                self,
                "LogSoftmax",
                inputs,
                vec![("axis", Attr::Int(*axis as i64))],
            ),
            Op::Reduce(Reduce {
                kind,
                axes,
                keepdims,
            }) => {
                let op_type = match kind {
                    ReduceKind::Sum => "ReduceSum",
                    ReduceKind::Mean => "ReduceMean",
                    ReduceKind::Max => "ReduceMax",
                };
                let mut attrs = vec![("keepdims", Attr::Int(*keepdims as i64))];
                // Axes became an input at opset 13 for ReduceSum, 18 for the others.
                let as_input = self.opset >= if *kind == ReduceKind::Sum { 13 } else { 18 };
                let mut ins = vec![x()];
                if as_input {
                    ins.push(self.ints("axes", &i64s(axes)));
                } else {
                    attrs.push(("axes", Attr::Ints(i64s(axes))));
                }
                one(self, op_type, &ins, attrs)
            }
            Op::LayerNorm(LayerNorm { axis, epsilon }) => one(
                self,
                "LayerNormalization",
                inputs,
                vec![
                    ("axis", Attr::Int(*axis as i64)),
                    ("epsilon", Attr::Float(*epsilon)),
                ],
            ),
            Op::Cast(Cast { to }) => one(
                self,
                "Cast",
                inputs,
                vec![("to", Attr::Int(dtype_to_onnx(*to) as i64))],
            ),
            Op::Expand(Expand { shape }) => {
                let s = self.ints("shape", &i64s(shape));
                one(self, "Expand", &[x(), s], vec![])
            }
            Op::Tile(Tile { repeats }) => {
                let r = self.ints("repeats", &i64s(repeats));
                one(self, "Tile", &[x(), r], vec![])
            }
            Op::Identity => one(self, "Identity", inputs, vec![]),
            Op::LayoutTransform(LayoutTransform {
                from,
                to,
                logical,
                pad,
            }) => {
                // Between two permutations a transform is one Transpose.
                if let (Some(f), Some(t)) = (from.as_permutation(), to.as_permutation()) {
                    let perm: Vec<usize> = t
                        .iter()
                        .map(|a| f.iter().position(|b| b == a).expect("same rank"))
                        .collect();
                    return Ok(one(
                        self,
                        "Transpose",
                        inputs,
                        vec![("perm", Attr::Ints(i64s(&perm)))],
                    ));
                }
                let l = from_physical(self, &x(), from, logical);
                vec![to_physical(self, &l, to, logical, in_types[0].dtype, *pad)]
            }
            Op::PadWith(PadWith {
                begins,
                ends,
                value,
            }) => vec![pad(
                self,
                &x(),
                in_types[0].dtype,
                &i64s(begins),
                &i64s(ends),
                fill_value(*value),
            )],
            Op::Crop(Crop { begins, ends, .. }) => {
                let shape = &in_types[0].shape;
                let axes: Vec<usize> = (0..shape.len())
                    .filter(|&a| begins[a] != 0 || ends[a] != 0)
                    .collect();
                if axes.is_empty() {
                    vec![x()]
                } else {
                    let starts: Vec<i64> = axes.iter().map(|&a| begins[a] as i64).collect();
                    let stops: Vec<i64> =
                        axes.iter().map(|&a| (shape[a] - ends[a]) as i64).collect();
                    vec![slice(self, &x(), &i64s(&axes), &starts, &stops)]
                }
            }
            Op::InLayout(l) => {
                let logical: Vec<String> = inputs
                    .iter()
                    .zip(&l.inputs)
                    .map(|(v, (layout, shape))| from_physical(self, v, layout, shape))
                    .collect();
                let logical_types: Vec<ValueType> = in_types
                    .iter()
                    .zip(&l.inputs)
                    .map(|(t, (_, shape))| ValueType::new(t.dtype, shape.clone()))
                    .collect();
                let refs: Vec<&ValueType> = logical_types.iter().collect();
                let inner_types =
                    crate::graph::infer_outputs(&l.inner, &refs).map_err(|m| m.to_string())?;
                let inner_values: Vec<Value> = inner_types
                    .iter()
                    .zip(outputs)
                    .map(|(ty, v)| Value {
                        name: format!("{}/logical", v.name),
                        ty: ty.clone(),
                    })
                    .collect();
                let results = self.op(&l.inner, &logical, &logical_types, &inner_values)?;
                results
                    .iter()
                    .zip(&l.outputs)
                    .zip(&inner_types)
                    .map(|((r, (layout, pad)), ty)| {
                        to_physical(self, r, layout, &ty.shape, ty.dtype, *pad)
                    })
                    .collect()
            }
        })
    }
}

fn scalar(dtype: crate::graph::DType, v: f64) -> crate::graph::TensorData {
    crate::graph::TensorData::from_f64(dtype, vec![v])
}
