//! ONNX operators to typed graph ops. Inputs that parameterise an op (shapes,
//! axes, pads, bounds) must be constants here and become attributes.

use super::{add_and_fold, dtype_from_onnx, tensor_from_proto, ImportError};
use crate::graph::{
    broadcast_shapes, numel, BinaryOp, Conv, ConvTranspose, CoordTransform, DType, Graph,
    NearestMode, Op, PadMode, Pool, PoolKind, ReduceKind, Resize, ResizeFilter, ResizeMode,
    SliceAxis, Span, Tensor, TensorData, UnaryOp, ValueRef, ValueType, Window,
};
use crate::ops::{
    ArgKind, ArgReduce, BatchNorm, Cast, Concat, CumSum, Expand, Gather, GatherElements, Gemm,
    GlobalPool, LayerNorm, LogSoftmax, Logical, Lrn, MaxPoolIndices, Pad, Reduce, Reshape, Slice,
    Softmax, Split, Tile, TopK, Transpose,
};
use onnx_protobuf::{AttributeProto, NodeProto};

mod composite;

type Res<T> = Result<T, ImportError>;

pub(super) struct NodeCtx<'a> {
    pub node: &'a NodeProto,
    pub span: &'a Span,
    pub opset: i64,
    pub inputs: &'a [Option<ValueRef>],
    pub g: &'a mut Graph,
    pub file: &'a str,
}

impl NodeCtx<'_> {
    fn err(&self, message: impl Into<String>) -> ImportError {
        ImportError::layer(self.span, message)
    }

    fn attr(&self, name: &str) -> Option<&AttributeProto> {
        self.node.attribute.iter().find(|a| a.name == name)
    }

    /// Checks that attribute `name`, if present, has ONNX attribute type `want`.
    fn typed_attr(&self, name: &str, want: i32, what: &str) -> Res<Option<&AttributeProto>> {
        match self.attr(name) {
            Some(a) if a.type_.value() != want => Err(self.err(format!(
                "attribute '{name}' must be {what} (attribute type {want}), got type {}",
                a.type_.value()
            ))),
            other => Ok(other),
        }
    }

    fn int(&self, name: &str, default: i64) -> Res<i64> {
        Ok(self.typed_attr(name, 2, "an int")?.map_or(default, |a| a.i))
    }

    fn float(&self, name: &str, default: f32) -> Res<f32> {
        Ok(self
            .typed_attr(name, 1, "a float")?
            .map_or(default, |a| a.f))
    }

    fn ints(&self, name: &str) -> Res<Option<Vec<i64>>> {
        Ok(self
            .typed_attr(name, 7, "a list of ints")?
            .map(|a| a.ints.clone()))
    }

    fn string(&self, name: &str, default: &str) -> Res<String> {
        Ok(self
            .typed_attr(name, 3, "a string")?
            .map_or(default.to_string(), |a| {
                String::from_utf8_lossy(&a.s).into_owned()
            }))
    }

    fn bool_attr(&self, name: &str, default: bool) -> Res<bool> {
        Ok(self.int(name, default as i64)? != 0)
    }

    fn input(&self, i: usize) -> Res<ValueRef> {
        self.inputs.get(i).copied().flatten().ok_or_else(|| {
            self.err(format!(
                "{} needs input {i}, which is missing",
                self.node.op_type
            ))
        })
    }

    fn opt_input(&self, i: usize) -> Option<ValueRef> {
        self.inputs.get(i).copied().flatten()
    }

    fn ty(&self, v: ValueRef) -> ValueType {
        self.g.value_type(v).clone()
    }

    /// The value of an optional parameter input, which must be a constant.
    fn const_input(&self, i: usize) -> Res<Option<Tensor>> {
        let Some(v) = self.opt_input(i) else {
            return Ok(None);
        };
        match self.g.constant(v) {
            Some(t) => Ok(Some(t.clone())),
            None => Err(ImportError::NotConstant {
                spans: vec![self.span.clone()],
                value: self.node.input[i].clone(),
                message: format!(
                    "input {i} ('{}') must be a constant (computable at import time); dynamic values are not supported",
                    self.node.input[i]
                ),
            }),
        }
    }

    fn const_ints(&self, i: usize) -> Res<Option<Vec<i64>>> {
        Ok(self.const_input(i)?.map(|t| t.data.to_i64()))
    }

    /// A rank-relative axis (negative counts from the end) as an index.
    fn axis(&self, a: i64, rank: usize) -> Res<usize> {
        let r = rank as i64;
        if a < -r || a >= r {
            return Err(self.err(format!("axis {a} is out of range for rank {rank}")));
        }
        Ok(if a < 0 { (a + r) as usize } else { a as usize })
    }

    fn axes(&self, axes: &[i64], rank: usize) -> Res<Vec<usize>> {
        let mut out = Vec::with_capacity(axes.len());
        for &a in axes {
            let a = self.axis(a, rank)?;
            if out.contains(&a) {
                return Err(self.err(format!("axis {a} is repeated in {axes:?}")));
            }
            out.push(a);
        }
        Ok(out)
    }

    fn layer(&self) -> String {
        self.span.layer.to_string()
    }

    /// Adds the node's (single or multi-output) op, named after the node's outputs.
    fn emit(&mut self, op: Op, inputs: &[ValueRef]) -> Res<Vec<Option<ValueRef>>> {
        let names = self.node.output.clone();
        let layer = self.layer();
        Ok(add_and_fold(self.g, op, &layer, inputs, &names, self.span)?
            .into_iter()
            .map(Some)
            .collect())
    }

    /// Adds an intermediate node of a one-to-many conversion.
    fn emit_inner(&mut self, op: Op, inputs: &[ValueRef], suffix: &str) -> Res<ValueRef> {
        let name = format!("{}/{suffix}", self.layer());
        Ok(add_and_fold(
            self.g,
            op,
            &name,
            inputs,
            std::slice::from_ref(&name),
            self.span,
        )?[0])
    }

    /// Refuses a tensor this conversion is about to allocate when it could not fit.
    fn check_size(&self, dtype: DType, shape: &[usize]) -> Res<()> {
        let ty = ValueType::new(dtype, shape.to_vec());
        crate::graph::check_value_size(&ty, "the constant", crate::graph::memory_limit())
            .map_err(|e| self.err(e.to_string()))
    }

    fn constant(&mut self, t: Tensor) -> Vec<Option<ValueRef>> {
        let name = self
            .node
            .output
            .first()
            .cloned()
            .unwrap_or_else(|| self.layer());
        vec![Some(self.g.add_constant(&name, t, vec![self.span.clone()]))]
    }
}

/// The operator types of the default domain `convert` knows (any opset it imports).
pub(super) const SUPPORTED: &[&str] = &[
    "Abs",
    "Add",
    "And",
    "ArgMax",
    "ArgMin",
    "AveragePool",
    "BatchNormalization",
    "Cast",
    "CastLike",
    "Celu",
    "Clip",
    "Concat",
    "Constant",
    "ConstantOfShape",
    "Conv",
    "ConvTranspose",
    "CumSum",
    "DepthToSpace",
    "Div",
    "Dropout",
    "Einsum",
    "Elu",
    "Equal",
    "Erf",
    "Exp",
    "Expand",
    "Flatten",
    "Gather",
    "GatherElements",
    "Gelu",
    "Gemm",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "Greater",
    "GreaterOrEqual",
    "GroupNormalization",
    "HardSigmoid",
    "HardSwish",
    "Hardmax",
    "Identity",
    "InstanceNormalization",
    "LRN",
    "LayerNormalization",
    "LeakyRelu",
    "Less",
    "LessOrEqual",
    "Log",
    "LogSoftmax",
    "MatMul",
    "Max",
    "MaxPool",
    "Mean",
    "Min",
    "Mish",
    "Mul",
    "Neg",
    "Not",
    "Or",
    "PRelu",
    "Pad",
    "Pow",
    "Range",
    "Reciprocal",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceProd",
    "ReduceSum",
    "Relu",
    "Reshape",
    "Resize",
    "Selu",
    "Shape",
    "Sigmoid",
    "Slice",
    "Softmax",
    "Softplus",
    "Softsign",
    "SpaceToDepth",
    "Split",
    "Sqrt",
    "Squeeze",
    "Sub",
    "Sum",
    "Tanh",
    "ThresholdedRelu",
    "Tile",
    "TopK",
    "Transpose",
    "Unsqueeze",
    "Upsample",
    "Where",
    "Xor",
];

/// Converts one node of a type in [`SUPPORTED`].
pub(super) fn convert(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let op_type = c.node.op_type.clone();
    let unary = |u| Op::Unary(u);
    let op = match op_type.as_str() {
        "Conv" => return conv(c),
        "ConvTranspose" => return conv_transpose(c),
        "MaxPool" | "AveragePool" => return pool(c),
        "Constant" => return constant_node(c),
        "Shape" => return shape_node(c),
        "ConstantOfShape" => return constant_of_shape(c),
        "Range" => return range(c),
        "Max" | "Min" | "Sum" | "Mean" => return variadic(c),
        "Softmax" | "LogSoftmax" => return softmax(c),
        "Dropout" => return dropout(c),
        "Split" => return split(c),
        "Resize" | "Upsample" => return resize(c),
        "InstanceNormalization" => return composite::instance_norm(c),
        "GroupNormalization" => return composite::group_norm(c),
        "Hardmax" => return composite::hardmax(c),
        "Einsum" => return composite::einsum(c),
        "ArgMax" | "ArgMin" => {
            let x = c.input(0)?;
            let rank = c.ty(x).shape.len();
            Op::ArgReduce(ArgReduce {
                kind: match op_type.as_str() {
                    "ArgMax" => ArgKind::Max,
                    _ => ArgKind::Min,
                },
                axis: c.axis(c.int("axis", 0)?, rank)?,
                keepdims: c.bool_attr("keepdims", true)?,
                select_last_index: c.bool_attr("select_last_index", false)?,
            })
        }
        "TopK" => return top_k(c),
        "CumSum" => {
            let x = c.input(0)?;
            let rank = c.ty(x).shape.len();
            let axis = match c.const_ints(1)?.as_deref() {
                Some([a]) => c.axis(*a, rank)?,
                _ => return Err(c.err("CumSum needs its axis input: one integer")),
            };
            let op = Op::CumSum(CumSum {
                axis,
                exclusive: c.bool_attr("exclusive", false)?,
                reverse: c.bool_attr("reverse", false)?,
            });
            return c.emit(op, &[x]);
        }
        "GatherElements" => {
            let x = c.input(0)?;
            let rank = c.ty(x).shape.len();
            Op::GatherElements(GatherElements {
                axis: c.axis(c.int("axis", 0)?, rank)?,
            })
        }
        "And" => Op::Logical(Logical::And),
        "Or" => Op::Logical(Logical::Or),
        "Xor" => Op::Logical(Logical::Xor),
        "Not" => Op::Logical(Logical::Not),
        "DepthToSpace" | "SpaceToDepth" => return depth_space(c),
        "BatchNormalization" => {
            if c.bool_attr("training_mode", false)?
                || c.node.output.iter().skip(1).any(|o| !o.is_empty())
            {
                return Err(c.err("BatchNormalization in training mode is not supported"));
            }
            // Opsets 7 and 8: `spatial` 0 normalises every element with its own statistics.
            if c.opset < 9 && !c.bool_attr("spatial", true)? {
                return Err(c.err(
                    "BatchNormalization with spatial=0 (statistics per element) is not supported",
                ));
            }
            Op::BatchNorm(BatchNorm {
                epsilon: c.float("epsilon", 1e-5)?,
            })
        }
        "Relu" => unary(UnaryOp::Relu),
        "LeakyRelu" => unary(UnaryOp::LeakyRelu {
            alpha: c.float("alpha", 0.01)?,
        }),
        "Sigmoid" => unary(UnaryOp::Sigmoid),
        "HardSigmoid" => unary(UnaryOp::HardSigmoid {
            alpha: c.float("alpha", 0.2)?,
            beta: c.float("beta", 0.5)?,
        }),
        "HardSwish" => unary(UnaryOp::HardSwish),
        "Elu" => unary(UnaryOp::Elu {
            alpha: c.float("alpha", 1.0)?,
        }),
        "Selu" => unary(UnaryOp::Selu {
            alpha: c.float("alpha", 1.673_263_2)?,
            gamma: c.float("gamma", 1.050_701)?,
        }),
        "Celu" => unary(UnaryOp::Celu {
            alpha: c.float("alpha", 1.0)?,
        }),
        "ThresholdedRelu" => unary(UnaryOp::ThresholdedRelu {
            alpha: c.float("alpha", 1.0)?,
        }),
        "Softplus" => unary(UnaryOp::Softplus),
        "Softsign" => unary(UnaryOp::Softsign),
        "Mish" => unary(UnaryOp::Mish),
        "Tanh" => unary(UnaryOp::Tanh),
        "Erf" => unary(UnaryOp::Erf),
        "Gelu" => unary(UnaryOp::Gelu {
            tanh_approx: match c.string("approximate", "none")?.as_str() {
                "none" => false,
                "tanh" => true,
                other => return Err(c.err(format!("Gelu approximate '{other}' is not known"))),
            },
        }),
        "Exp" => unary(UnaryOp::Exp),
        "Log" => unary(UnaryOp::Log),
        "Sqrt" => unary(UnaryOp::Sqrt),
        "Reciprocal" => unary(UnaryOp::Reciprocal),
        "Neg" => unary(UnaryOp::Neg),
        "Abs" => unary(UnaryOp::Abs),
        "Clip" => {
            let bound = |t: Option<Tensor>, default: f32| -> Res<f32> {
                match t {
                    None => Ok(default),
                    Some(t) if t.numel() == 1 => Ok(t.data.to_f64()[0] as f32),
                    Some(t) => Err(c.err(format!(
                        "Clip bound must be a scalar, got shape {:?}",
                        t.shape
                    ))),
                }
            };
            // The bounds became inputs at opset 11.
            let (min, max) = if c.opset >= 11 {
                (
                    bound(c.const_input(1)?, f32::NEG_INFINITY)?,
                    bound(c.const_input(2)?, f32::INFINITY)?,
                )
            } else {
                (
                    c.float("min", f32::NEG_INFINITY)?,
                    c.float("max", f32::INFINITY)?,
                )
            };
            let x = c.input(0)?;
            return c.emit(unary(UnaryOp::Clip { min, max }), &[x]);
        }
        "Add" => Op::Binary(BinaryOp::Add),
        "Sub" => Op::Binary(BinaryOp::Sub),
        "Mul" => Op::Binary(BinaryOp::Mul),
        "Div" => Op::Binary(BinaryOp::Div),
        "Pow" => Op::Binary(BinaryOp::Pow),
        "PRelu" => Op::Binary(BinaryOp::PRelu),
        "Equal" => Op::Binary(BinaryOp::Equal),
        "Less" => Op::Binary(BinaryOp::Less),
        "Greater" => Op::Binary(BinaryOp::Greater),
        "LessOrEqual" => Op::Binary(BinaryOp::LessOrEqual),
        "GreaterOrEqual" => Op::Binary(BinaryOp::GreaterOrEqual),
        "Where" => Op::Where,
        "GlobalAveragePool" => Op::GlobalPool(GlobalPool {
            kind: PoolKind::Avg,
        }),
        "GlobalMaxPool" => Op::GlobalPool(GlobalPool {
            kind: PoolKind::Max,
        }),
        "Gemm" => Op::Gemm(Gemm {
            alpha: c.float("alpha", 1.0)?,
            beta: c.float("beta", 1.0)?,
            trans_a: c.bool_attr("transA", false)?,
            trans_b: c.bool_attr("transB", false)?,
        }),
        "MatMul" => Op::MatMul,
        "Reshape" => {
            let x = c.input(0)?;
            let target = c
                .const_ints(1)?
                .ok_or_else(|| c.err("Reshape needs its shape input"))?;
            let shape =
                reshape_target(c, &c.ty(x).shape, &target, c.bool_attr("allowzero", false)?)?;
            return c.emit(Op::Reshape(Reshape { shape }), &[x]);
        }
        "Flatten" => {
            let x = c.input(0)?;
            let s = c.ty(x).shape;
            // Flatten's axis ranges over [-rank, rank].
            let r = s.len() as i64;
            let axis = c.int("axis", 1)?;
            let axis = match axis {
                a if (0..=r).contains(&a) => a as usize,
                a if (-r..0).contains(&a) => (a + r) as usize,
                a => return Err(c.err(format!("axis {a} is out of range for rank {r}"))),
            };
            let shape = vec![numel(&s[..axis]), numel(&s[axis..])];
            return c.emit(Op::Reshape(Reshape { shape }), &[x]);
        }
        "Squeeze" | "Unsqueeze" => return squeeze(c),
        "Transpose" => {
            let x = c.input(0)?;
            let rank = c.ty(x).shape.len();
            let perm = match c.ints("perm")? {
                Some(p) => p
                    .iter()
                    .map(|&a| {
                        usize::try_from(a)
                            .map_err(|_| c.err(format!("perm {p:?} has a negative axis")))
                    })
                    .collect::<Res<Vec<_>>>()?,
                None => (0..rank).rev().collect(),
            };
            Op::Transpose(Transpose { perm })
        }
        "Concat" => {
            let x = c.input(0)?;
            let axis = c.int("axis", i64::MIN)?;
            if axis == i64::MIN {
                return Err(c.err("Concat needs the 'axis' attribute"));
            }
            Op::Concat(Concat {
                axis: c.axis(axis, c.ty(x).shape.len())?,
            })
        }
        "Slice" => return slice(c),
        "Gather" => {
            let x = c.input(0)?;
            Op::Gather(Gather {
                axis: c.axis(c.int("axis", 0)?, c.ty(x).shape.len())?,
            })
        }
        "Pad" => return pad(c),
        "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceProd" => return reduce(c),
        "LRN" => Op::Lrn(Lrn {
            alpha: c.float("alpha", 1e-4)?,
            beta: c.float("beta", 0.75)?,
            bias: c.float("bias", 1.0)?,
            size: usize::try_from(c.int("size", 0)?).map_err(|_| c.err("size must be positive"))?,
        }),
        "LayerNormalization" => {
            if c.node.output.iter().skip(1).any(|o| !o.is_empty()) {
                return composite::layer_norm_with_statistics(c);
            }
            let x = c.input(0)?;
            Op::LayerNorm(LayerNorm {
                axis: c.axis(c.int("axis", -1)?, c.ty(x).shape.len())?,
                epsilon: c.float("epsilon", 1e-5)?,
            })
        }
        "Cast" => Op::Cast(Cast {
            to: dtype_from_onnx(c.int("to", 0)? as i32).map_err(|m| c.err(format!("Cast: {m}")))?,
            saturate: c.bool_attr("saturate", true)?,
        }),
        // CastLike casts to the element type of its second input. Types are
        // static here, so it is a Cast: one op to run, fold and export, and no
        // edge to a tensor whose values it never reads.
        "CastLike" => {
            let (x, like) = (c.input(0)?, c.input(1)?);
            let to = c.ty(like).dtype;
            let saturate = c.bool_attr("saturate", true)?;
            return c.emit(Op::Cast(Cast { to, saturate }), &[x]);
        }
        "Identity" => Op::Identity,
        "Expand" => {
            let x = c.input(0)?;
            let target = c
                .const_ints(1)?
                .ok_or_else(|| c.err("Expand needs its shape input"))?;
            let target = dims(c, &target, "shape")?;
            let shape = broadcast_shapes(&c.ty(x).shape, &target).map_err(|m| c.err(m))?;
            return c.emit(Op::Expand(Expand { shape }), &[x]);
        }
        "Tile" => {
            let x = c.input(0)?;
            let repeats = c
                .const_ints(1)?
                .ok_or_else(|| c.err("Tile needs its repeats input"))?;
            let repeats = dims(c, &repeats, "repeats")?;
            return c.emit(Op::Tile(Tile { repeats }), &[x]);
        }
        other => {
            return Err(c.err(format!(
                "unsupported operator '{other}' (node '{}' in {})",
                c.span.layer, c.file
            )))
        }
    };
    let inputs = c
        .inputs
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.ok_or_else(|| c.err(format!("{op_type} needs input {i}, which is missing")))
        })
        .collect::<Res<Vec<_>>>()?;
    c.emit(op, &inputs)
}

/// Non-negative dimensions from i64 values.
fn dims(c: &NodeCtx, v: &[i64], what: &str) -> Res<Vec<usize>> {
    v.iter()
        .map(|&d| {
            usize::try_from(d).map_err(|_| c.err(format!("{what} {v:?} has a negative entry")))
        })
        .collect()
}

/// Resolves a Reshape target: 0 copies the input dim (unless allowzero), -1 is inferred.
fn reshape_target(
    c: &NodeCtx,
    input: &[usize],
    target: &[i64],
    allowzero: bool,
) -> Res<Vec<usize>> {
    let mut shape = Vec::with_capacity(target.len());
    let mut infer = None;
    for (i, &t) in target.iter().enumerate() {
        shape.push(match t {
            -1 if infer.is_none() => {
                infer = Some(i);
                1
            }
            0 if !allowzero => *input.get(i).ok_or_else(|| {
                c.err(format!(
                    "shape {target:?}: 0 at axis {i} has no input axis to copy"
                ))
            })?,
            t if t >= 0 => t as usize,
            _ => return Err(c.err(format!("shape {target:?} is not a valid reshape target"))),
        });
    }
    if let Some(i) = infer {
        let known = numel(&shape);
        let total = numel(input);
        if known == 0 || !total.is_multiple_of(known) {
            return Err(c.err(format!(
                "cannot reshape {input:?} ({total} elements) to {target:?}"
            )));
        }
        shape[i] = total / known;
    }
    Ok(shape)
}

/// Kernel, strides, dilations and pads of a conv or pool, with auto_pad resolved.
fn window(c: &NodeCtx, spatial: &[usize], kernel: Vec<usize>, transposed: bool) -> Res<Window> {
    let r = spatial.len();
    let list = |name: &str, default: usize| -> Res<Vec<usize>> {
        match c.ints(name)? {
            Some(v) => dims(c, &v, name),
            None => Ok(vec![default; if name == "pads" { 2 * r } else { r }]),
        }
    };
    let strides = list("strides", 1)?;
    let dilations = list("dilations", 1)?;
    let mut pads = list("pads", 0)?;
    if strides.len() != r || dilations.len() != r || pads.len() != 2 * r || kernel.len() != r {
        return Err(c.err(format!(
            "kernel_shape {kernel:?}, strides {strides:?}, dilations {dilations:?} and pads {pads:?} do not fit {r} spatial axes"
        )));
    }
    if strides.contains(&0) || dilations.contains(&0) || kernel.contains(&0) {
        return Err(c.err(format!(
            "kernel_shape {kernel:?}, strides {strides:?} and dilations {dilations:?} must be positive"
        )));
    }
    let auto_pad = c.string("auto_pad", "NOTSET")?;
    match auto_pad.as_str() {
        "NOTSET" => {}
        "VALID" => pads = vec![0; 2 * r],
        "SAME_UPPER" | "SAME_LOWER" if !transposed => {
            for i in 0..r {
                let out = spatial[i].div_ceil(strides[i]).max(1);
                let covered = dilations[i]
                    .checked_mul(kernel[i] - 1)
                    .and_then(|e| e.checked_add(1))
                    .and_then(|e| e.checked_add((out - 1).checked_mul(strides[i])?))
                    .ok_or_else(|| {
                        c.err(format!(
                            "{auto_pad} padding overflows (kernel_shape {kernel:?}, strides {strides:?}, dilations {dilations:?})"
                        ))
                    })?;
                let total = covered.saturating_sub(spatial[i]);
                let (small, big) = (total / 2, total - total / 2);
                (pads[i], pads[i + r]) = if auto_pad == "SAME_UPPER" {
                    (small, big)
                } else {
                    (big, small)
                };
            }
        }
        "SAME_UPPER" | "SAME_LOWER" => {} // ConvTranspose resolves these itself.
        other => return Err(c.err(format!("auto_pad '{other}' is not known"))),
    }
    Ok(Window {
        kernel,
        strides,
        dilations,
        pads,
    })
}

fn kernel_attr(c: &NodeCtx, from_weight: Option<&[usize]>) -> Res<Vec<usize>> {
    match (c.ints("kernel_shape")?, from_weight) {
        (Some(k), _) => dims(c, &k, "kernel_shape"),
        (None, Some(w)) => Ok(w.to_vec()),
        (None, None) => Err(c.err("needs the 'kernel_shape' attribute")),
    }
}

fn conv(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let (x, w) = (c.input(0)?, c.input(1)?);
    let (xs, ws) = (c.ty(x).shape, c.ty(w).shape);
    if xs.len() < 3 || ws.len() != xs.len() {
        return Err(c.err(format!(
            "input {xs:?} and weight {ws:?} do not form a convolution"
        )));
    }
    let kernel = kernel_attr(c, Some(&ws[2..]))?;
    let window = window(c, &xs[2..], kernel, false)?;
    let group = usize::try_from(c.int("group", 1)?).map_err(|_| c.err("group must be positive"))?;
    let mut inputs = vec![x, w];
    inputs.extend(c.opt_input(2));
    c.emit(Op::Conv(Conv { window, group }), &inputs)
}

fn conv_transpose(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let (x, w) = (c.input(0)?, c.input(1)?);
    let (xs, ws) = (c.ty(x).shape, c.ty(w).shape);
    if xs.len() < 3 || ws.len() != xs.len() {
        return Err(c.err(format!(
            "input {xs:?} and weight {ws:?} do not form a convolution"
        )));
    }
    let r = xs.len() - 2;
    let kernel = kernel_attr(c, Some(&ws[2..]))?;
    let mut window = window(c, &xs[2..], kernel, true)?;
    let group = usize::try_from(c.int("group", 1)?).map_err(|_| c.err("group must be positive"))?;
    let mut output_padding = match c.ints("output_padding")? {
        Some(v) => dims(c, &v, "output_padding")?,
        None => vec![0; r],
    };
    if output_padding.len() != r {
        return Err(c.err(format!(
            "output_padding {output_padding:?} does not fit {r} spatial axes"
        )));
    }
    let auto_pad = c.string("auto_pad", "NOTSET")?;
    let output_shape = c.ints("output_shape")?;
    // An explicit output shape, or SAME auto padding, fixes the pads (ONNX spec formula).
    let target: Option<Vec<usize>> = match (&output_shape, auto_pad.as_str()) {
        (Some(s), _) => {
            let s = dims(c, s, "output_shape")?;
            Some(s[s.len().saturating_sub(r)..].to_vec())
        }
        (None, "SAME_UPPER" | "SAME_LOWER") => {
            Some((0..r).map(|i| xs[i + 2] * window.strides[i]).collect())
        }
        _ => None,
    };
    if let Some(target) = target {
        if target.len() != r {
            return Err(c.err(format!(
                "output_shape {target:?} does not fit {r} spatial axes"
            )));
        }
        for i in 0..r {
            let full = window.strides[i] * (xs[i + 2] - 1)
                + output_padding[i]
                + (window.kernel[i] - 1) * window.dilations[i]
                + 1;
            if full < target[i] {
                // The spec allows growing through output_padding when the target is larger.
                output_padding[i] += target[i] - full;
                window.pads[i] = 0;
                window.pads[i + r] = 0;
                continue;
            }
            let total = full - target[i];
            let (small, big) = (total / 2, total - total / 2);
            (window.pads[i], window.pads[i + r]) = if auto_pad == "SAME_UPPER" {
                (small, big)
            } else {
                (big, small)
            };
        }
    }
    let mut inputs = vec![x, w];
    inputs.extend(c.opt_input(2));
    c.emit(
        Op::ConvTranspose(ConvTranspose {
            window,
            group,
            output_padding,
        }),
        &inputs,
    )
}

fn pool(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let indices = c.node.output.get(1).filter(|o| !o.is_empty()).cloned();
    let column_major = match c.int("storage_order", 0)? {
        0 => false,
        1 => true,
        s => return Err(c.err(format!("storage_order {s} is neither 0 nor 1"))),
    };
    let x = c.input(0)?;
    let xs = c.ty(x).shape;
    if xs.len() < 3 {
        return Err(c.err(format!("input shape {xs:?} has no spatial axes")));
    }
    let kernel = kernel_attr(c, None)?;
    let window = window(c, &xs[2..], kernel, false)?;
    let kind = if c.node.op_type == "MaxPool" {
        PoolKind::Max
    } else {
        PoolKind::Avg
    };
    let pool = Pool {
        kind,
        window,
        ceil_mode: c.bool_attr("ceil_mode", false)?,
        count_include_pad: c.bool_attr("count_include_pad", false)?,
    };
    let mut outs = c.emit(Op::Pool(pool.clone()), &[x])?;
    outs.truncate(1);
    if let Some(name) = indices {
        if kind != PoolKind::Max {
            return Err(c.err("AveragePool has one output"));
        }
        let op = Op::MaxPoolIndices(MaxPoolIndices {
            window: pool.window,
            ceil_mode: pool.ceil_mode,
            column_major,
        });
        let layer = c.layer();
        outs.extend(
            add_and_fold(c.g, op, &layer, &[x], &[name], c.span)?
                .into_iter()
                .map(Some),
        );
    }
    Ok(outs)
}

fn constant_node(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let a = c
        .node
        .attribute
        .first()
        .ok_or_else(|| c.err("Constant has no value attribute"))?;
    let t = match a.name.as_str() {
        "value" => {
            let tp =
                a.t.as_ref()
                    .ok_or_else(|| c.err("Constant 'value' holds no tensor"))?;
            tensor_from_proto(tp, None).map_err(|m| c.err(format!("Constant value {m}")))?
        }
        "value_float" => Tensor::scalar_f32(a.f),
        "value_floats" => Tensor::from_f32(vec![a.floats.len()], a.floats.clone()),
        "value_int" => Tensor::from_i64(vec![], vec![a.i]),
        "value_ints" => Tensor::from_i64(vec![a.ints.len()], a.ints.clone()),
        other => return Err(c.err(format!("Constant attribute '{other}' is not supported"))),
    };
    Ok(c.constant(t))
}

fn shape_node(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let s = c.ty(c.input(0)?).shape;
    let r = s.len() as i64;
    let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    let start = clamp(c.int("start", 0)?);
    let end = clamp(c.int("end", r)?);
    let dims: Vec<i64> = s[start..end.max(start)].iter().map(|&d| d as i64).collect();
    Ok(c.constant(Tensor::from_i64(vec![dims.len()], dims)))
}

fn constant_of_shape(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let shape = c
        .const_ints(0)?
        .ok_or_else(|| c.err("ConstantOfShape needs its shape input"))?;
    let shape = dims(c, &shape, "shape")?;
    let value = match c.attr("value").and_then(|a| a.t.as_ref()) {
        Some(tp) => tensor_from_proto(tp, None).map_err(|m| c.err(format!("value {m}")))?,
        None => Tensor::scalar_f32(0.0),
    };
    if value.numel() != 1 {
        return Err(c.err("ConstantOfShape value must hold one element"));
    }
    c.check_size(value.dtype(), &shape)?;
    let bytes = (numel(&shape) as u64).saturating_mul(value.dtype().size_bytes() as u64);
    if bytes > crate::core::budget::fold_limit() {
        // Too big to hold as a constant: the value expanded when the model runs.
        let name = format!("{}/value", c.layer());
        let rank = shape.len();
        let one = value.reshaped(vec![1; rank]);
        let one = c.g.add_constant(&name, one, vec![c.span.clone()]);
        return c.emit(Op::Expand(Expand { shape }), &[one]);
    }
    let data = value.data.gather(std::iter::repeat_n(0, numel(&shape)));
    Ok(c.constant(Tensor::new(shape, data)))
}

fn range(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let get = |i| -> Res<Tensor> {
        c.const_input(i)?
            .filter(|t| t.numel() == 1)
            .ok_or_else(|| c.err(format!("Range input {i} must be a constant scalar")))
    };
    let (start, limit, delta) = (get(0)?, get(1)?, get(2)?);
    let dtype = start.dtype();
    let t = if dtype.is_float() {
        let (s, l, d) = (
            start.data.to_f64()[0],
            limit.data.to_f64()[0],
            delta.data.to_f64()[0],
        );
        let n = range_len(c, (l - s) / d, d == 0.0)?;
        // Computed in the element type, as the spec's loop accumulates it.
        let vals: Vec<f64> = (0..n).map(|i| s + i as f64 * d).collect();
        Tensor::new(vec![n], TensorData::from_f64(dtype, vals))
    } else {
        let (s, l, d) = (
            start.data.to_i64()[0],
            limit.data.to_i64()[0],
            delta.data.to_i64()[0],
        );
        let n = range_len(c, (l - s) as f64 / d as f64, d == 0)?;
        Tensor::new(
            vec![n],
            TensorData::from_i128(dtype, (0..n as i64).map(|i| (s + i * d).into()).collect()),
        )
    };
    Ok(c.constant(t))
}

fn range_len(c: &NodeCtx, steps: f64, zero_delta: bool) -> Res<usize> {
    if zero_delta {
        return Err(c.err("Range delta must not be zero"));
    }
    let n = steps.ceil().max(0.0);
    if n > 1e9 {
        return Err(c.err(format!("Range would produce {n} elements")));
    }
    c.check_size(DType::I64, &[n as usize])?;
    Ok(n as usize)
}

/// Max, Min, Sum and Mean take any number of (broadcasting) inputs: a chain of
/// binary ops, and for Mean a division by their count.
fn variadic(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let (b, mean) = match c.node.op_type.as_str() {
        "Max" => (BinaryOp::Max, false),
        "Min" => (BinaryOp::Min, false),
        "Sum" => (BinaryOp::Add, false),
        _ => (BinaryOp::Add, true),
    };
    let inputs: Vec<ValueRef> = (0..c.inputs.len())
        .map(|i| c.input(i))
        .collect::<Res<_>>()?;
    let Some((&first, rest)) = inputs.split_first() else {
        return Err(c.err("needs at least one input"));
    };
    if rest.is_empty() {
        return c.emit(Op::Identity, &[first]);
    }
    let mut acc = first;
    for (k, &v) in rest[..rest.len() - 1].iter().enumerate() {
        acc = c.emit_inner(Op::Binary(b), &[acc, v], &k.to_string())?;
    }
    let last = rest[rest.len() - 1];
    if !mean {
        return c.emit(Op::Binary(b), &[acc, last]);
    }
    let sum = c.emit_inner(Op::Binary(b), &[acc, last], "sum")?;
    let dtype = c.ty(sum).dtype;
    let n = Tensor::new(
        vec![],
        TensorData::from_f64(dtype, vec![inputs.len() as f64]),
    );
    let name = format!("{}/count", c.layer());
    let n = c.g.add_constant(&name, n, vec![c.span.clone()]);
    c.emit(Op::Binary(BinaryOp::Div), &[sum, n])
}

/// DepthToSpace and SpaceToDepth as the Reshape, Transpose, Reshape their
/// definitions are written in (DCR and CRD orders for DepthToSpace).
fn depth_space(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let s = c.ty(x).shape;
    let b = usize::try_from(c.int("blocksize", 0)?)
        .ok()
        .filter(|&b| b > 0)
        .ok_or_else(|| c.err("blocksize must be a positive integer"))?;
    let [n, ch, h, w] = s[..] else {
        return Err(c.err(format!("input shape {s:?} is not 4-D (NCHW)")));
    };
    let (split, perm, out) = if c.node.op_type == "DepthToSpace" {
        if ch % (b * b) != 0 {
            return Err(c.err(format!(
                "{ch} channels do not divide by blocksize² {}",
                b * b
            )));
        }
        let co = ch / (b * b);
        match c.string("mode", "DCR")?.as_str() {
            "DCR" => (
                vec![n, b, b, co, h, w],
                vec![0, 3, 4, 1, 5, 2],
                vec![n, co, h * b, w * b],
            ),
            "CRD" => (
                vec![n, co, b, b, h, w],
                vec![0, 1, 4, 2, 5, 3],
                vec![n, co, h * b, w * b],
            ),
            other => return Err(c.err(format!("DepthToSpace mode '{other}' is not known"))),
        }
    } else {
        if h % b != 0 || w % b != 0 {
            return Err(c.err(format!(
                "spatial extents {h}x{w} do not divide by blocksize {b}"
            )));
        }
        (
            vec![n, ch, h / b, b, w / b, b],
            vec![0, 3, 5, 1, 2, 4],
            vec![n, ch * b * b, h / b, w / b],
        )
    };
    let split = c.emit_inner(Op::Reshape(Reshape { shape: split }), &[x], "split")?;
    let moved = c.emit_inner(Op::Transpose(Transpose { perm }), &[split], "moved")?;
    c.emit(Op::Reshape(Reshape { shape: out }), &[moved])
}

/// TopK: `k` is an attribute before opset 10, a constant input after.
fn top_k(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let rank = c.ty(x).shape.len();
    let k = if c.opset >= 10 {
        match c.const_ints(1)?.as_deref() {
            Some([k]) => *k,
            _ => return Err(c.err("TopK needs its k input: one integer")),
        }
    } else {
        c.int("k", -1)?
    };
    let k = usize::try_from(k).map_err(|_| c.err(format!("k = {k} is negative")))?;
    let op = Op::TopK(TopK {
        axis: c.axis(c.int("axis", -1)?, rank)?,
        k,
        largest: c.bool_attr("largest", true)?,
    });
    c.emit(op, &[x])
}

fn softmax(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let s = c.ty(x).shape;
    let log = c.node.op_type == "LogSoftmax";
    let make = |axis| {
        if log {
            Op::LogSoftmax(LogSoftmax { axis })
        } else {
            Op::Softmax(Softmax { axis })
        }
    };
    if c.opset >= 13 {
        let axis = c.axis(c.int("axis", -1)?, s.len())?;
        return c.emit(make(axis), &[x]);
    }
    // Before opset 13 the input is coerced to 2-D at `axis` and normalised per row.
    let axis = c.axis(c.int("axis", 1)?, s.len())?;
    if axis + 1 == s.len() {
        return c.emit(make(axis), &[x]);
    }
    let flat = vec![numel(&s[..axis]), numel(&s[axis..])];
    let x2 = c.emit_inner(Op::Reshape(Reshape { shape: flat }), &[x], "flatten")?;
    let y2 = c.emit_inner(make(1), &[x2], "softmax")?;
    c.emit(Op::Reshape(Reshape { shape: s }), &[y2])
}

fn dropout(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    if let Some(t) = c.const_input(2)? {
        if t.data.to_bool().first() == Some(&true) {
            return Err(c.err("Dropout in training mode is not supported"));
        }
    } else if c.opt_input(2).is_some() {
        return Err(c.err("Dropout training_mode must be a constant"));
    }
    let x = c.input(0)?;
    let mut outs = c.emit(Op::Identity, &[x])?;
    if c.node.output.len() > 1 {
        // In inference every element is kept: the mask is all true.
        let shape = c.ty(x).shape;
        c.check_size(DType::Bool, &shape)?;
        let mask = Tensor::new(shape.clone(), TensorData::Bool(vec![true; numel(&shape)]));
        let name = c.node.output[1].clone();
        outs.push(Some(c.g.add_constant(&name, mask, vec![c.span.clone()])));
    }
    Ok(outs)
}

fn split(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let s = c.ty(x).shape;
    let axis = c.axis(c.int("axis", 0)?, s.len())?;
    let n_out = c.node.output.len();
    let given = if c.opset >= 13 {
        c.const_ints(1)?
    } else {
        c.ints("split")?
    };
    let sizes = match given {
        Some(v) => dims(c, &v, "split")?,
        None => {
            let n = if c.opset >= 18 {
                // Absent, it is the node's output count; given, it must be that.
                match c
                    .attr("num_outputs")
                    .map(|_| c.int("num_outputs", 0))
                    .transpose()?
                {
                    None => n_out,
                    Some(k) if usize::try_from(k) == Ok(n_out) => n_out,
                    Some(k) => {
                        return Err(c.err(format!(
                            "num_outputs is {k}, but the node has {n_out} outputs"
                        )))
                    }
                }
            } else {
                n_out
            };
            if n == 0 {
                return Err(c.err("Split has no outputs"));
            }
            // Opset 18: uneven splits give ceil-sized chunks and a smaller last one.
            let chunk = s[axis].div_ceil(n);
            if c.opset < 18 && !s[axis].is_multiple_of(n) {
                return Err(c.err(format!(
                    "axis extent {} does not split evenly into {n}",
                    s[axis]
                )));
            }
            (0..n)
                .map(|i| chunk.min(s[axis].saturating_sub(i * chunk)))
                .collect()
        }
    };
    if sizes.len() != n_out {
        return Err(c.err(format!("{} split sizes for {n_out} outputs", sizes.len())));
    }
    c.emit(Op::Split(Split { axis, sizes }), &[x])
}

fn squeeze(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let s = c.ty(x).shape;
    let axes = if c.opset >= 13 {
        c.const_ints(1)?
    } else {
        c.ints("axes")?
    };
    let shape = if c.node.op_type == "Squeeze" {
        let axes = match axes {
            Some(a) => c.axes(&a, s.len())?,
            None => (0..s.len()).filter(|&i| s[i] == 1).collect(),
        };
        if let Some(&a) = axes.iter().find(|&&a| s[a] != 1) {
            return Err(c.err(format!(
                "cannot squeeze axis {a} of shape {s:?}: its extent is not 1"
            )));
        }
        s.iter()
            .enumerate()
            .filter(|(i, _)| !axes.contains(i))
            .map(|(_, &d)| d)
            .collect()
    } else {
        let axes = axes.ok_or_else(|| c.err("Unsqueeze needs axes"))?;
        let out_rank = s.len() + axes.len();
        let axes = c.axes(&axes, out_rank)?;
        let mut rest = s.iter();
        (0..out_rank)
            .map(|i| {
                if axes.contains(&i) {
                    1
                } else {
                    *rest.next().expect("rank adds up")
                }
            })
            .collect()
    };
    c.emit(Op::Reshape(Reshape { shape }), &[x])
}

fn slice(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let s = c.ty(x).shape;
    // Before opset 10 starts, ends and axes are attributes and there are no steps.
    let (starts, ends, axes, steps) = if c.opset >= 10 {
        (
            c.const_ints(1)?,
            c.const_ints(2)?,
            c.const_ints(3)?,
            c.const_ints(4)?,
        )
    } else {
        (c.ints("starts")?, c.ints("ends")?, c.ints("axes")?, None)
    };
    let starts = starts.ok_or_else(|| c.err("Slice needs starts"))?;
    let ends = ends.ok_or_else(|| c.err("Slice needs ends"))?;
    let axes = match axes {
        Some(a) => c.axes(&a, s.len())?,
        None => (0..starts.len()).collect(),
    };
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(c.err(format!(
            "starts {starts:?}, ends {ends:?}, axes {axes:?} and steps {steps:?} differ in length"
        )));
    }
    let mut out = Vec::with_capacity(axes.len());
    for i in 0..axes.len() {
        let (axis, step) = (axes[i], steps[i]);
        if step == 0 {
            return Err(c.err("Slice step must not be zero"));
        }
        let d = s[axis] as i64;
        let norm = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
        // Clamp as the spec says: [0, d] going forward, [-1, d-1] going backward.
        let (start, end) = if step > 0 {
            (norm(starts[i]).clamp(0, d), norm(ends[i]).clamp(0, d))
        } else {
            (
                norm(starts[i]).clamp(0, d - 1),
                norm(ends[i]).clamp(-1, d - 1),
            )
        };
        out.push(SliceAxis {
            axis,
            start,
            end,
            step,
        });
    }
    c.emit(Op::Slice(Slice { axes: out }), &[x])
}

fn pad(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let s = c.ty(x).shape;
    let r = s.len();
    // Before opset 11 pads and value are attributes.
    let (pads, value) = if c.opset >= 11 {
        let value = c
            .const_input(2)?
            .map(|t| t.data.to_f64().first().copied().unwrap_or(0.0))
            .unwrap_or(0.0) as f32;
        (c.const_ints(1)?, value)
    } else {
        (c.ints("pads")?, c.float("value", 0.0)?)
    };
    let pads = pads.ok_or_else(|| c.err("Pad needs its pads"))?;
    let axes = match c.const_ints(3)? {
        Some(a) => c.axes(&a, r)?,
        None => (0..r).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return Err(c.err(format!("pads {pads:?} do not fit {} axes", axes.len())));
    }
    let (mut begins, mut ends) = (vec![0; r], vec![0; r]);
    for (k, &a) in axes.iter().enumerate() {
        begins[a] = pads[k];
        ends[a] = pads[k + axes.len()];
    }
    let mode = match c.string("mode", "constant")?.as_str() {
        "constant" => PadMode::Constant(value),
        "reflect" => PadMode::Reflect,
        "edge" => PadMode::Edge,
        "wrap" => PadMode::Wrap,
        other => return Err(c.err(format!("Pad mode '{other}' is not supported"))),
    };
    c.emit(Op::Pad(Pad { begins, ends, mode }), &[x])
}

fn reduce(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let s = c.ty(x).shape;
    let kind = match c.node.op_type.as_str() {
        "ReduceSum" => ReduceKind::Sum,
        "ReduceMean" => ReduceKind::Mean,
        "ReduceMin" => ReduceKind::Min,
        "ReduceProd" => ReduceKind::Prod,
        _ => ReduceKind::Max,
    };
    // Axes moved from attribute to input at opset 13 for ReduceSum, 18 for the others.
    let axes_as_input = c.opset >= if kind == ReduceKind::Sum { 13 } else { 18 };
    let axes = if axes_as_input {
        c.const_ints(1)?
    } else {
        c.ints("axes")?
    };
    let keepdims = c.bool_attr("keepdims", true)?;
    let axes = match axes {
        Some(a) if !a.is_empty() => c.axes(&a, s.len())?,
        _ if c.bool_attr("noop_with_empty_axes", false)? => return c.emit(Op::Identity, &[x]),
        _ => (0..s.len()).collect(),
    };
    c.emit(
        Op::Reduce(Reduce {
            kind,
            axes,
            keepdims,
        }),
        &[x],
    )
}

fn resize(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let s = c.ty(x).shape;
    let r = s.len();
    // Upsample, and Resize before opset 11, map output to input coordinates by
    // dividing by the scale (asymmetric) and round down for nearest; their scales
    // are an attribute (Upsample 7) or input 1, and they have no sizes.
    let legacy = c.node.op_type == "Upsample" || c.opset < 11;
    let mode = match c.string("mode", "nearest")?.as_str() {
        "nearest" => ResizeMode::Nearest,
        "linear" => ResizeMode::Linear,
        "bilinear" if legacy => ResizeMode::Linear,
        "cubic" if !legacy => ResizeMode::Cubic,
        other => {
            return Err(c.err(format!(
                "{} mode '{other}' is not supported",
                c.node.op_type
            )))
        }
    };
    let default_coord = if legacy { "asymmetric" } else { "half_pixel" };
    let coord = match c
        .string("coordinate_transformation_mode", default_coord)?
        .as_str()
    {
        "half_pixel" => CoordTransform::HalfPixel,
        "pytorch_half_pixel" => CoordTransform::PytorchHalfPixel,
        "align_corners" => CoordTransform::AlignCorners,
        "asymmetric" => CoordTransform::Asymmetric,
        "half_pixel_symmetric" => CoordTransform::HalfPixelSymmetric,
        "tf_crop_and_resize" => CoordTransform::TfCropAndResize,
        other => {
            return Err(c.err(format!(
                "Resize coordinate_transformation_mode '{other}' is not supported"
            )))
        }
    };
    let default_nearest = if legacy {
        "floor"
    } else {
        "round_prefer_floor"
    };
    let nearest = match c.string("nearest_mode", default_nearest)?.as_str() {
        "round_prefer_floor" => NearestMode::RoundPreferFloor,
        "round_prefer_ceil" => NearestMode::RoundPreferCeil,
        "floor" => NearestMode::Floor,
        "ceil" => NearestMode::Ceil,
        other => return Err(c.err(format!("Resize nearest_mode '{other}' is not known"))),
    };
    let filter = ResizeFilter {
        cubic_a: c.float("cubic_coeff_a", -0.75)?,
        exclude_outside: c.bool_attr("exclude_outside", false)?,
        antialias: c.bool_attr("antialias", false)?,
    };
    let axes = match c.ints("axes")? {
        Some(a) => c.axes(&a, r)?,
        None => (0..r).collect(),
    };
    // The region of interest: starts, then ends, of the resized axes.
    let crop = match coord {
        CoordTransform::TfCropAndResize => {
            let roi = c
                .const_input(1)?
                .map(|t| t.data.to_f64())
                .filter(|v| v.len() == 2 * axes.len())
                .ok_or_else(|| {
                    c.err(format!(
                        "tf_crop_and_resize needs a roi of {} values (starts, then ends)",
                        2 * axes.len()
                    ))
                })?;
            let mut per_axis = vec![(0.0, 1.0); r];
            for (k, &a) in axes.iter().enumerate() {
                per_axis[a] = (roi[k] as f32, roi[k + axes.len()] as f32);
            }
            Some((per_axis, c.float("extrapolation_value", 0.0)?))
        }
        _ => None,
    };
    let (scales_in, sizes_in) = if !legacy {
        let scales = c.const_input(2)?.map(|t| t.data.to_f64());
        (scales, c.const_ints(3)?)
    } else if c.node.op_type == "Upsample" && c.opset < 9 {
        let scales = c.typed_attr("scales", 6, "a list of floats")?;
        (
            scales.map(|a| a.floats.iter().map(|&v| v as f64).collect()),
            None,
        )
    } else {
        (c.const_input(1)?.map(|t| t.data.to_f64()), None)
    };
    let scales_in = scales_in.filter(|v| !v.is_empty());
    let sizes_in = sizes_in.filter(|v| !v.is_empty());
    let (mut scales, mut sizes): (Vec<f32>, Vec<usize>) = (vec![1.0; r], s.clone());
    match (scales_in, sizes_in) {
        (Some(sc), None) => {
            if sc.len() != axes.len() {
                return Err(c.err(format!("scales {sc:?} do not fit {} axes", axes.len())));
            }
            for (k, &a) in axes.iter().enumerate() {
                if sc[k] <= 0.0 {
                    return Err(c.err(format!("scale {} must be positive", sc[k])));
                }
                scales[a] = sc[k] as f32;
                sizes[a] = (s[a] as f64 * sc[k] as f32 as f64).floor() as usize;
            }
        }
        (None, Some(sz)) => {
            if sz.len() != axes.len() {
                return Err(c.err(format!("sizes {sz:?} do not fit {} axes", axes.len())));
            }
            let sz = dims(c, &sz, "sizes")?;
            let ratios: Vec<f32> = axes
                .iter()
                .zip(&sz)
                .map(|(&a, &n)| n as f32 / s[a] as f32)
                .collect();
            let policy = c.string("keep_aspect_ratio_policy", "stretch")?;
            let uniform = match policy.as_str() {
                "stretch" => None,
                "not_larger" => Some(ratios.iter().copied().fold(f32::INFINITY, f32::min)),
                "not_smaller" => Some(ratios.iter().copied().fold(0.0, f32::max)),
                other => {
                    return Err(c.err(format!("keep_aspect_ratio_policy '{other}' is not known")))
                }
            };
            for (k, &a) in axes.iter().enumerate() {
                match uniform {
                    None => {
                        scales[a] = ratios[k];
                        sizes[a] = sz[k];
                    }
                    Some(u) => {
                        scales[a] = u;
                        sizes[a] = (s[a] as f32 * u).round() as usize;
                    }
                }
            }
        }
        _ => return Err(c.err("Resize needs exactly one of scales and sizes")),
    }
    c.emit(
        Op::Resize(Resize {
            mode,
            coord,
            nearest,
            scales,
            sizes,
            filter,
            crop,
        }),
        &[x],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The prescan's list and the converter agree: no listed type reaches the
    /// converter's unsupported arm (here each runs without inputs and fails on them).
    #[test]
    fn every_supported_type_has_a_conversion() {
        for &op in SUPPORTED {
            let mut node = NodeProto::new();
            node.op_type = op.to_string();
            node.output = vec!["y".into()];
            let span = Span::new("t.onnx", "layer", op, 0);
            let mut g = Graph::new("t");
            let mut c = NodeCtx {
                node: &node,
                span: &span,
                opset: 13,
                inputs: &[],
                g: &mut g,
                file: "t.onnx",
            };
            if let Err(e) = convert(&mut c) {
                assert!(
                    !e.to_string().contains("unsupported operator '"),
                    "{op}: {e}"
                );
            }
        }
    }
}
