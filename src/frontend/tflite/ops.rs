//! TFLite operators to IR nodes. One TFLite operator may become several nodes (layout
//! transposes, the op, a fused activation); all of them carry the operator's span.

use super::schema::{self, BuiltinOptions};
use super::{Importer, TfliteError};
use crate::core::scalar::MathFn;
use crate::graph::{
    fold_node, numel, BinaryOp, Conv, CoordTransform, DType, NearestMode, NodeId, Op, PadMode,
    Pool, PoolKind, ReduceKind, Resize, ResizeMode, SliceAxis, Span, Tensor, TensorData, UnaryOp,
    ValueRef, ValueType, Window,
};
use crate::ops::{
    ArgKind, BitCast, Cast, Concat, DynamicQuantize, Expand, Gemm, IntegerArith, Logical, Pad,
    Reduce, Reshape, Slice, Softmax, Tile, Transpose,
};

/// NHWC → NCHW and back, for ops the IR defines on NCHW tensors.
const TO_NCHW: [usize; 4] = [0, 3, 1, 2];
const TO_NHWC: [usize; 4] = [0, 2, 3, 1];

type Res<T> = Result<T, TfliteError>;

mod detection;
mod mediapipe;
mod quant;
mod recurrent;
mod spatial;
mod tensorflow;

/// Imports operator `index` of subgraph 0.
pub(super) fn import_operator<'a>(
    imp: &mut Importer<'a>,
    index: usize,
    op: schema::Operator<'a>,
) -> Res<()> {
    let outputs: Vec<usize> = op
        .outputs()
        .unwrap_or_default()
        .iter()
        .map(|t| imp.tensor_index(t, &format!("operator #{index} output")))
        .collect::<Res<_>>()?;
    let Some(&out) = outputs.first() else {
        return Err(imp.invalid(format!("operator #{index} has no outputs")));
    };
    let (code, op_name) = opcode(imp, index, op)?;
    let layer = imp.tensor_name(out);
    let span = Span::new(&imp.file, &layer, &op_name, index);
    let inputs = op
        .inputs()
        .unwrap_or_default()
        .iter()
        .map(|t| match t {
            -1 => Ok(None), // an omitted optional input
            t => imp
                .tensor_index(t, &format!("operator #{index} input"))
                .map(Some),
        })
        .collect::<Res<_>>()?;
    let mut cx = Cx {
        imp,
        op,
        span,
        layer,
        inputs,
        outputs: outputs.clone(),
        emitted: Vec::new(),
    };
    let values = match code {
        SPLIT | SPLIT_V => cx.split(code == SPLIT_V)?,
        CUSTOM if *cx.span.op_type == *mediapipe::MAX_POOLING_WITH_ARGMAX_2D => {
            cx.max_pool_argmax()?
        }
        CUSTOM if *cx.span.op_type == *detection::DETECTION_POST_PROCESS => {
            cx.detection_post_process()?
        }
        NON_MAX_SUPPRESSION_V4 | NON_MAX_SUPPRESSION_V5 => {
            cx.nms_padded(code == NON_MAX_SUPPRESSION_V5)?
        }
        UNPACK => cx.unpack()?,
        TOPK_V2 => cx.top_k()?,
        BIDIRECTIONAL_SEQUENCE_LSTM => cx.bidirectional_lstm()?,
        _ => vec![cx.convert(code)?],
    };
    if outputs.len() != values.len() {
        return Err(cx.err(format!(
            "has {} outputs, expected {}",
            outputs.len(),
            values.len()
        )));
    }
    cx.finish(&values, &outputs)
}

/// The operator's builtin code and its name for spans.
fn opcode(imp: &Importer, index: usize, op: schema::Operator) -> Res<(i32, String)> {
    let codes = imp.codes.unwrap_or_default();
    let i = op.opcode_index() as usize;
    if i >= codes.len() {
        return Err(imp.invalid(format!(
            "operator #{index} uses opcode index {i}, but the model has {} operator codes",
            codes.len()
        )));
    }
    let oc = codes.get(i);
    let code = oc.code();
    let name = match (code, oc.custom_code()) {
        (CUSTOM, Some(custom)) => format!("CUSTOM:{custom}"),
        _ => schema::builtin_name(code).map_or_else(|| format!("BUILTIN_{code}"), str::to_string),
    };
    Ok((code, name))
}

// Builtin operator codes (BuiltinOperator in schema.fbs) that we import.
const ADD: i32 = 0;
const AVERAGE_POOL_2D: i32 = 1;
const CONCATENATION: i32 = 2;
const CONV_2D: i32 = 3;
const DEPTHWISE_CONV_2D: i32 = 4;
const DEPTH_TO_SPACE: i32 = 5;
const DEQUANTIZE: i32 = 6;
const QUANTIZE: i32 = 114;
const FULLY_CONNECTED: i32 = 9;
const LOGISTIC: i32 = 14;
const MAX_POOL_2D: i32 = 17;
const MUL: i32 = 18;
const RELU: i32 = 19;
const RELU_N1_TO_1: i32 = 20;
const RELU6: i32 = 21;
const RESHAPE: i32 = 22;
const RESIZE_BILINEAR: i32 = 23;
const SOFTMAX: i32 = 25;
const TANH: i32 = 28;
const CUSTOM: i32 = 32;
const PAD: i32 = 34;
const TRANSPOSE: i32 = 39;
const MEAN: i32 = 40;
const SUB: i32 = 41;
const DIV: i32 = 42;
const SQUEEZE: i32 = 43;
const STRIDED_SLICE: i32 = 45;
const SHAPE: i32 = 77;
const PACK: i32 = 83;
const EXP: i32 = 47;
const MAXIMUM: i32 = 55;
const MINIMUM: i32 = 57;
const NEG: i32 = 59;
const PADV2: i32 = 60;
const LOG: i32 = 73;
const SUM: i32 = 74;
const SQRT: i32 = 75;
const RSQRT: i32 = 76;
const REDUCE_PROD: i32 = 81;
const REDUCE_MAX: i32 = 82;
const REDUCE_MIN: i32 = 89;
const RESIZE_NEAREST_NEIGHBOR: i32 = 97;
const LEAKY_RELU: i32 = 98;
const SQUARED_DIFFERENCE: i32 = 99;
const ABS: i32 = 101;
const FLOOR: i32 = 8;
const CEIL: i32 = 104;
const ROUND: i32 = 116;
const HARD_SWISH: i32 = 117;
const BATCH_MATMUL: i32 = 126;
const GELU: i32 = 150;
const GATHER: i32 = 36;
const SPLIT: i32 = 49;
const PRELU: i32 = 54;
const TRANSPOSE_CONV: i32 = 67;
const UNPACK: i32 = 88;
const SPLIT_V: i32 = 102;
const DENSIFY: i32 = 124;
const UNIDIRECTIONAL_SEQUENCE_RNN: i32 = 35;
const UNIDIRECTIONAL_SEQUENCE_LSTM: i32 = 44;
const BIDIRECTIONAL_SEQUENCE_LSTM: i32 = 52;
const REVERSE_V2: i32 = 105;
const CAST: i32 = 53;
const LESS: i32 = 58;
const GREATER: i32 = 61;
const GREATER_EQUAL: i32 = 62;
const LESS_EQUAL: i32 = 63;
const SELECT: i32 = 64;
const SLICE: i32 = 65;
const SIN: i32 = 66;
const TILE: i32 = 69;
const EXPAND_DIMS: i32 = 70;
const EQUAL: i32 = 71;
const NOT_EQUAL: i32 = 72;
const POW: i32 = 78;
const LOGICAL_OR: i32 = 84;
const LOGICAL_AND: i32 = 86;
const LOGICAL_NOT: i32 = 87;
const SQUARE: i32 = 92;
const COS: i32 = 108;
const SELECT_V2: i32 = 123;
const BROADCAST_TO: i32 = 130;
const EMBEDDING_LOOKUP: i32 = 7;
const L2_NORMALIZATION: i32 = 11;
const LOCAL_RESPONSE_NORMALIZATION: i32 = 13;
const SPACE_TO_DEPTH: i32 = 26;
const BATCH_TO_SPACE_ND: i32 = 37;
const SPACE_TO_BATCH_ND: i32 = 38;
const TOPK_V2: i32 = 48;
const LOG_SOFTMAX: i32 = 50;
const ARG_MAX: i32 = 56;
const ARG_MIN: i32 = 79;
const FLOOR_DIV: i32 = 90;
const REDUCE_ANY: i32 = 91;
const ZEROS_LIKE: i32 = 93;
const FILL: i32 = 94;
const FLOOR_MOD: i32 = 95;
const MIRROR_PAD: i32 = 100;
const ADD_N: i32 = 106;
const GATHER_ND: i32 = 107;
const ELU: i32 = 111;
const SCATTER_ND: i32 = 122;
const CUMSUM: i32 = 128;
const ONE_HOT: i32 = 85;
const RANGE: i32 = 96;
const ATAN2: i32 = 156;
const REDUCE_ALL: i32 = 140;
const ONES_LIKE: i32 = 146;
const SIGN: i32 = 158;
const BITCAST: i32 = 159;
const BITWISE_XOR: i32 = 160;
const RIGHT_SHIFT: i32 = 161;
const NON_MAX_SUPPRESSION_V4: i32 = 120;
const NON_MAX_SUPPRESSION_V5: i32 = 121;

/// The conversion of one operator.
struct Cx<'i, 'a> {
    imp: &'i mut Importer<'a>,
    op: schema::Operator<'a>,
    span: Span,
    layer: String,
    /// Tensor index of each input; `None` for an omitted optional input.
    inputs: Vec<Option<usize>>,
    /// Tensor index of each output.
    outputs: Vec<usize>,
    /// Nodes made so far for this operator, in order.
    emitted: Vec<NodeId>,
}

impl<'a> Cx<'_, 'a> {
    fn err(&self, message: impl Into<String>) -> TfliteError {
        TfliteError::Layer {
            span: self.span.clone(),
            message: message.into(),
        }
    }

    fn unsupported(&self, message: impl Into<String>) -> TfliteError {
        TfliteError::Unsupported {
            span: self.span.clone(),
            message: message.into(),
        }
    }

    fn convert(&mut self, code: i32) -> Res<ValueRef> {
        match code {
            CONV_2D => self.conv2d(),
            DEPTHWISE_CONV_2D => self.depthwise_conv2d(),
            AVERAGE_POOL_2D => self.pool(PoolKind::Avg),
            MAX_POOL_2D => self.pool(PoolKind::Max),
            FULLY_CONNECTED => self.fully_connected(),
            ADD => self.binary(BinaryOp::Add),
            SUB => self.binary(BinaryOp::Sub),
            MUL => self.binary(BinaryOp::Mul),
            DIV => self.binary(BinaryOp::Div),
            MAXIMUM => self.binary(BinaryOp::Max),
            MINIMUM => self.binary(BinaryOp::Min),
            SQUARED_DIFFERENCE => {
                let d = self.binary(BinaryOp::Sub)?;
                self.emit(Op::Binary(BinaryOp::Mul), "square", &[d, d])
            }
            RELU => self.unary(UnaryOp::Relu),
            RELU6 => self.unary(UnaryOp::Clip { min: 0.0, max: 6.0 }),
            RELU_N1_TO_1 => self.unary(UnaryOp::Clip {
                min: -1.0,
                max: 1.0,
            }),
            LOGISTIC => self.unary(UnaryOp::Sigmoid),
            TANH => self.unary(UnaryOp::Tanh),
            HARD_SWISH => self.unary(UnaryOp::HardSwish),
            EXP => self.unary(UnaryOp::Exp),
            LOG => self.unary(UnaryOp::Log),
            SQRT => self.unary(UnaryOp::Sqrt),
            NEG => self.unary(UnaryOp::Neg),
            ABS => self.unary(UnaryOp::Abs),
            FLOOR => self.unary(UnaryOp::Floor),
            CEIL => self.unary(UnaryOp::Ceil),
            ROUND => self.unary(UnaryOp::Round),
            RSQRT => {
                let s = self.unary(UnaryOp::Sqrt)?;
                self.emit(Op::Unary(UnaryOp::Reciprocal), "reciprocal", &[s])
            }
            LEAKY_RELU => {
                let alpha = self
                    .options::<schema::LeakyReluOptions>()
                    .map_or(0.0, |o| o.alpha());
                self.unary(UnaryOp::LeakyRelu { alpha })
            }
            GELU => {
                let tanh_approx = self
                    .options::<schema::GeluOptions>()
                    .is_some_and(|o| o.approximate());
                self.unary(UnaryOp::Gelu { tanh_approx })
            }
            MEAN => self.reduce(ReduceKind::Mean),
            SUM => self.reduce(ReduceKind::Sum),
            REDUCE_MAX => self.reduce(ReduceKind::Max),
            REDUCE_MIN => self.reduce(ReduceKind::Min),
            REDUCE_PROD => self.reduce(ReduceKind::Prod),
            RESHAPE => self.reshape(),
            SQUEEZE => self.squeeze(),
            SOFTMAX => self.softmax(),
            CONCATENATION => self.concatenation(),
            PAD | PADV2 => self.pad(code == PADV2),
            TRANSPOSE => {
                let x = self.input(0)?;
                let perm = self.const_axes(1, self.rank(x))?;
                self.emit(Op::Transpose(Transpose { perm }), "transpose", &[x])
            }
            STRIDED_SLICE => self.strided_slice(),
            SHAPE => self.shape(),
            PACK => self.pack(),
            RESIZE_BILINEAR => self.resize(ResizeMode::Linear),
            RESIZE_NEAREST_NEIGHBOR => self.resize(ResizeMode::Nearest),
            BATCH_MATMUL => self.batch_matmul(),
            PRELU => self.binary(BinaryOp::PRelu),
            GATHER => self.gather(),
            TRANSPOSE_CONV => self.transpose_conv(),
            DEQUANTIZE => self.dequantize(),
            QUANTIZE => self.requantize(),
            DENSIFY => self.densify(),
            DEPTH_TO_SPACE => self.depth_space(true),
            SPACE_TO_DEPTH => self.depth_space(false),
            SPACE_TO_BATCH_ND => self.space_to_batch(),
            BATCH_TO_SPACE_ND => self.batch_to_space(),
            MIRROR_PAD => self.mirror_pad(),
            ARG_MAX => self.arg(ArgKind::Max),
            ARG_MIN => self.arg(ArgKind::Min),
            GATHER_ND => self.gather_nd(),
            SCATTER_ND => self.scatter_nd(),
            EMBEDDING_LOOKUP => self.embedding_lookup(),
            FILL => self.fill(),
            ZEROS_LIKE => self.filled_like(0.0),
            ONES_LIKE => self.filled_like(1.0),
            CUMSUM => self.cumsum(),
            ONE_HOT => self.one_hot(),
            RANGE => self.range(),
            ATAN2 => self.atan2(),
            FLOOR_DIV => self.floored(false),
            FLOOR_MOD => self.floored(true),
            ADD_N => self.add_n(),
            L2_NORMALIZATION => self.l2_normalization(),
            LOCAL_RESPONSE_NORMALIZATION => self.local_response_normalization(),
            LOG_SOFTMAX => self.log_softmax(),
            ELU => self.unary(UnaryOp::Elu { alpha: 1.0 }),
            SIGN => self.unary(UnaryOp::Sign),
            // The maximum of booleans is any, the minimum all.
            REDUCE_ANY => self.reduce(ReduceKind::Max),
            REDUCE_ALL => self.reduce(ReduceKind::Min),
            BITWISE_XOR => self.plain(Op::IntegerArith(IntegerArith::BitwiseXor)),
            RIGHT_SHIFT => self.plain(Op::IntegerArith(IntegerArith::BitShift { left: false })),
            BITCAST => self.bitcast(),
            UNIDIRECTIONAL_SEQUENCE_LSTM => self.unidirectional_lstm(),
            UNIDIRECTIONAL_SEQUENCE_RNN => self.unidirectional_rnn(),
            REVERSE_V2 => self.reverse(),
            CAST => self.cast(),
            LESS => self.plain(Op::Binary(BinaryOp::Less)),
            LESS_EQUAL => self.plain(Op::Binary(BinaryOp::LessOrEqual)),
            GREATER => self.plain(Op::Binary(BinaryOp::Greater)),
            GREATER_EQUAL => self.plain(Op::Binary(BinaryOp::GreaterOrEqual)),
            EQUAL => self.plain(Op::Binary(BinaryOp::Equal)),
            NOT_EQUAL => {
                let same = self.plain(Op::Binary(BinaryOp::Equal))?;
                self.emit(Op::Logical(Logical::Not), "not", &[same])
            }
            LOGICAL_AND => self.plain(Op::Logical(Logical::And)),
            LOGICAL_OR => self.plain(Op::Logical(Logical::Or)),
            LOGICAL_NOT => self.plain(Op::Logical(Logical::Not)),
            POW => self.plain(Op::Binary(BinaryOp::Pow)),
            SQUARE => {
                let x = self.input(0)?;
                self.emit(Op::Binary(BinaryOp::Mul), "square", &[x, x])
            }
            SIN => self.unary(UnaryOp::Math(MathFn::Sin)),
            COS => self.unary(UnaryOp::Math(MathFn::Cos)),
            SELECT | SELECT_V2 => self.select(code == SELECT),
            TILE => {
                let x = self.input(0)?;
                let repeats = self.const_extents(1, "multiples")?;
                self.emit(Op::Tile(Tile { repeats }), "tile", &[x])
            }
            EXPAND_DIMS => {
                let x = self.input(0)?;
                let mut shape = self.ty(x).shape.clone();
                let axis = match self.const_ints(1, "axis")?[..] {
                    [a] => self.axis(a, shape.len() + 1)?,
                    _ => return Err(self.err("the axis must be one integer")),
                };
                shape.insert(axis, 1);
                self.emit(Op::Reshape(Reshape { shape }), "expand_dims", &[x])
            }
            BROADCAST_TO => {
                let x = self.input(0)?;
                let shape = self.const_extents(1, "shape")?;
                self.emit(Op::Expand(Expand { shape }), "broadcast_to", &[x])
            }
            SLICE => self.slice(),
            CUSTOM if *self.span.op_type == *mediapipe::CONVOLUTION_2D_TRANSPOSE_BIAS => {
                self.transpose_conv_bias()
            }
            CUSTOM if *self.span.op_type == *mediapipe::MAX_UNPOOLING_2D => self.max_unpooling(),
            _ => Err(self.unsupported(format!(
                "TFLite operator {} (builtin code {code}) is not supported by the importer",
                self.span.op_type
            ))),
        }
    }

    /// Names the operator's last node after the layer and each value after its
    /// TFLite output tensor, checks it against the declared type, and records it.
    fn finish(self, values: &[ValueRef], outs: &[usize]) -> Res<()> {
        let last = *self.emitted.last().expect("every conversion emits a node");
        debug_assert!(
            values.iter().all(|v| self.emitted.contains(&v.node)),
            "a conversion must end with its own nodes"
        );
        self.imp.graph.node_mut(last).name = self.layer.clone();
        for (&value, &out) in values.iter().zip(outs) {
            let value = match self.imp.quantization(out)? {
                Some(q) => self.imp.onto_grid(value, &q, false, &self.span)?,
                None => value,
            };
            let name = self.imp.tensor_name(out);
            self.imp.graph.node_mut(value.node).outputs[value.output].name = name.clone();
            let got = self.imp.graph.value_type(value).clone();
            let declared = self.imp.logical_type(out)?;
            // A custom operator's kernel sizes its outputs when the model is
            // prepared; the converter declares what it knew, often a scalar
            // placeholder (TFLite_Detection_PostProcess), so only the type holds.
            let custom = self.span.op_type.starts_with("CUSTOM:");
            let shape_known = !custom && self.imp.declared_shape(out)?.is_some();
            if got.dtype != declared.dtype || (shape_known && got.shape != declared.shape) {
                return Err(self.err(format!(
                    "imports as {got}, but the file declares output tensor '{name}' as {declared}"
                )));
            }
            self.imp.values[out] = Some(value);
        }
        Ok(())
    }

    /// Adds a node for this operator; `step` names it within the layer.
    /// A node whose inputs are all constants is folded into a constant at once, so
    /// shape arithmetic (SHAPE, STRIDED_SLICE, PACK feeding a RESHAPE) is known here.
    fn emit(&mut self, op: Op, step: &str, inputs: &[ValueRef]) -> Res<ValueRef> {
        Ok(self.emit_all(op, step, inputs)?[0])
    }

    /// As `emit`, for an op of several outputs: all of them.
    fn emit_all(&mut self, op: Op, step: &str, inputs: &[ValueRef]) -> Res<Vec<ValueRef>> {
        let name = format!("{}/{step}", self.layer);
        let n = op.num_outputs();
        let id = self.imp.graph.add_node(
            op,
            &name,
            inputs,
            std::slice::from_ref(&name),
            vec![self.span.clone()],
        )?;
        let vs = match fold_node(&mut self.imp.graph, id)? {
            Some(constants) => constants,
            None => (0..n).map(|k| ValueRef::new(id, k)).collect(),
        };
        self.emitted.extend(vs.iter().map(|v| v.node));
        Ok(vs)
    }

    /// SHAPE of a tensor whose shape is static: a constant (int32 unless the
    /// options say int64).
    fn shape(&mut self) -> Res<ValueRef> {
        let x = self.input(0)?;
        let dims: Vec<i64> = self.ty(x).shape.iter().map(|&d| d as i64).collect();
        let n = vec![dims.len()];
        let t = match self
            .options::<schema::ShapeOptions>()
            .map_or(2, |o| o.out_type())
        {
            2 => Tensor::new(n, TensorData::I32(dims.iter().map(|&d| d as i32).collect())),
            4 => Tensor::from_i64(n, dims),
            other => return Err(self.err(format!("SHAPE out_type {other} is not int32 or int64"))),
        };
        Ok(self.layer_output_constant(t))
    }

    /// A constant that is the operator's result, named after the layer.
    fn layer_output_constant(&mut self, t: Tensor) -> ValueRef {
        let v = self
            .imp
            .graph
            .add_constant(&self.layer, t, vec![self.span.clone()]);
        self.emitted.push(v.node);
        v
    }

    /// SPLIT (axis, input; `num_splits` equal parts) and SPLIT_V (input,
    /// size_splits with at most one -1, axis).
    fn split(&mut self, sizes_given: bool) -> Res<Vec<ValueRef>> {
        let (x_at, axis_at) = if sizes_given { (0, 2) } else { (1, 0) };
        let x = self.input(x_at)?;
        let shape = self.ty(x).shape.clone();
        let axis = match self.const_ints(axis_at, "axis")?[..] {
            [a] => self.axis(a, shape.len())?,
            _ => return Err(self.err("the axis must be one integer")),
        };
        let extent = shape[axis];
        let parts = self
            .options::<schema::SplitOptions>()
            .map_or(0, |o| o.num_splits());
        let sizes: Vec<usize> = if sizes_given {
            let given = self.const_ints(1, "size_splits")?;
            let known: i64 = given.iter().filter(|&&s| s >= 0).sum();
            let fill = extent as i64 - known;
            let sizes: Vec<i64> = given
                .iter()
                .map(|&s| if s == -1 { fill } else { s })
                .collect();
            if given.iter().filter(|&&s| s == -1).count() > 1
                || sizes.iter().any(|&s| s < 0)
                || sizes.iter().sum::<i64>() != extent as i64
            {
                return Err(self.err(format!(
                    "size_splits {given:?} do not divide axis {axis} of extent {extent}"
                )));
            }
            sizes.into_iter().map(|s| s as usize).collect()
        } else {
            match usize::try_from(parts) {
                Ok(n) if n > 0 && extent.is_multiple_of(n) => vec![extent / n; n],
                _ => {
                    return Err(self.err(format!(
                        "num_splits {parts} does not divide axis {axis} of extent {extent}"
                    )))
                }
            }
        };
        let split = Op::Split(crate::ops::Split { axis, sizes });
        self.emit_all(split, "split", &[x])
    }

    /// UNPACK: `num` slices along `axis`, each without that axis.
    fn unpack(&mut self) -> Res<Vec<ValueRef>> {
        let x = self.input(0)?;
        let shape = self.ty(x).shape.clone();
        let o = self.options::<schema::UnpackOptions>();
        let axis = self.axis(o.map_or(0, |o| o.axis()) as i64, shape.len())?;
        let n = shape[axis];
        if o.is_some_and(|o| o.num() as usize != n) {
            return Err(self.err(format!(
                "num {} is not the extent {n} of axis {axis}",
                o.map_or(0, |o| o.num())
            )));
        }
        let split = Op::Split(crate::ops::Split {
            axis,
            sizes: vec![1; n],
        });
        let slices = self.emit_all(split, "split", &[x])?;
        let mut squeezed = shape;
        squeezed.remove(axis);
        slices
            .into_iter()
            .enumerate()
            .map(|(k, v)| {
                let reshape = Op::Reshape(Reshape {
                    shape: squeezed.clone(),
                });
                self.emit(reshape, &format!("unpack_{k}"), &[v])
            })
            .collect()
    }

    /// GATHER along `axis` (batch_dims 0 only); negative indices count from the end.
    fn gather(&mut self) -> Res<ValueRef> {
        let (x, idx) = (self.input(0)?, self.input(1)?);
        let o = self.options::<schema::GatherOptions>();
        if o.is_some_and(|o| o.batch_dims() != 0) {
            return Err(self.unsupported("GATHER with batch_dims is not supported"));
        }
        let axis = self.axis(o.map_or(0, |o| o.axis()) as i64, self.rank(x))?;
        self.emit(Op::Gather(crate::ops::Gather { axis }), "gather", &[x, idx])
    }

    /// TRANSPOSE_CONV (output_shape, weights OHWI, input NHWC, optional bias).
    fn transpose_conv(&mut self) -> Res<ValueRef> {
        let o: schema::TransposeConvOptions = self.required_options("TransposeConvOptions")?;
        let target = self.const_ints(0, "output_shape")?;
        let stride = [o.stride_h(), o.stride_w()];
        let y = self.conv_transpose_nhwc([2, 1, 3], o.padding() == 0, stride, &target)?;
        self.activated_as_nhwc(y, o.fused_activation_function())
    }

    /// A ConvTranspose on NCHW of NHWC input `at[0]`, OHWI weights `at[1]` and
    /// optional bias `at[2]`, whose pads give exactly the `target` (NHWC) extents.
    /// SAME splits the excess as the forward convolution pads (the odd pixel at the
    /// end); any extent the pads cannot reach becomes output padding.
    fn conv_transpose_nhwc(
        &mut self,
        at: [usize; 3],
        same: bool,
        stride: [i32; 2],
        target: &[i64],
    ) -> Res<ValueRef> {
        let x = self.nhwc_as_nchw(at[0])?;
        let w = self.weights(at[1], &[3, 0, 1, 2])?; // OHWI -> IOHW
        let bias = self.optional_input(at[2])?;
        let (xs, ws) = (self.ty(x).shape.clone(), self.ty(w).shape.clone());
        if ws[0] != xs[1] || target.len() != 4 || target[3] as usize != ws[1] {
            return Err(self.err(format!(
                "weights {ws:?} (IOHW), input {xs:?} (NCHW) and output_shape {target:?} (NHWC) do not fit"
            )));
        }
        let kernel = [ws[2] as i64, ws[3] as i64];
        let mut window = self.window(1, [xs[2], xs[3]], kernel, stride, [1, 1])?;
        let mut output_padding = vec![0; 2];
        for a in 0..2 {
            let out = usize::try_from(target[a + 1])
                .map_err(|_| self.err(format!("output_shape {target:?} is negative")))?;
            let full = (xs[a + 2] - 1) * window.strides[a] + window.kernel[a];
            let total = if same { full.saturating_sub(out) } else { 0 };
            window.pads[a] = total / 2;
            window.pads[a + 2] = total - total / 2;
            output_padding[a] = out
                .checked_sub(full - total)
                .filter(|&p| p < window.strides[a])
                .ok_or_else(|| {
                    self.err(format!(
                        "output extent {out} on axis {a} is out of reach of input {} with stride {} and kernel {}",
                        xs[a + 2], window.strides[a], window.kernel[a]
                    ))
                })?;
        }
        let mut ins = vec![x, w];
        ins.extend(bias);
        let op = Op::ConvTranspose(crate::ops::ConvTranspose {
            window,
            group: 1,
            output_padding,
        });
        self.emit(op, "conv_transpose", &ins)
    }

    /// PACK: the inputs, each given a new axis of extent 1 at `axis`, concatenated
    /// along it.
    fn pack(&mut self) -> Res<ValueRef> {
        let xs = (0..self.inputs.len())
            .map(|i| self.input(i))
            .collect::<Res<Vec<_>>>()?;
        let first = *xs.first().ok_or_else(|| self.err("has no inputs"))?;
        let shape = self.ty(first).shape.clone();
        let axis = self
            .options::<schema::PackOptions>()
            .map_or(0, |o| o.axis());
        let axis = self.axis(axis as i64, shape.len() + 1)?;
        let mut expanded = shape.clone();
        expanded.insert(axis, 1);
        let mut parts = Vec::with_capacity(xs.len());
        for (k, &x) in xs.iter().enumerate() {
            if self.ty(x).shape != shape {
                return Err(self.err(format!(
                    "input {k} has shape {:?}, input 0 {shape:?}: PACK needs equal shapes",
                    self.ty(x).shape
                )));
            }
            let reshape = Op::Reshape(Reshape {
                shape: expanded.clone(),
            });
            parts.push(self.emit(reshape, &format!("expand_{k}"), &[x])?);
        }
        self.emit(Op::Concat(Concat { axis }), "pack", &parts)
    }

    fn options<O: BuiltinOptions<'a>>(&self) -> Option<O> {
        self.op.options::<O>()
    }

    /// Options the operator cannot do without.
    fn required_options<O: BuiltinOptions<'a>>(&self, what: &str) -> Res<O> {
        self.options()
            .ok_or_else(|| self.err(format!("has no {what} options")))
    }

    fn tensor_input(&self, i: usize) -> Res<usize> {
        self.inputs
            .get(i)
            .copied()
            .flatten()
            .ok_or_else(|| self.err(format!("is missing input {i}")))
    }

    /// Data input `i`.
    fn input(&mut self, i: usize) -> Res<ValueRef> {
        let t = self.tensor_input(i)?;
        self.imp.value(t, Some(&self.span))
    }

    /// Optional input `i` (absent, or given as tensor -1).
    fn optional_input(&mut self, i: usize) -> Res<Option<ValueRef>> {
        match self.inputs.get(i).copied().flatten() {
            Some(t) => self.imp.value(t, Some(&self.span)).map(Some),
            None => Ok(None),
        }
    }

    fn ty(&self, v: ValueRef) -> &ValueType {
        self.imp.graph.value_type(v)
    }

    fn rank(&self, v: ValueRef) -> usize {
        self.ty(v).shape.len()
    }

    /// The constant tensor behind input `i`, if it is one (read without adding a node).
    fn constant_or_none(&mut self, i: usize) -> Res<Option<Tensor>> {
        let t = self.tensor_input(i)?;
        match self.imp.values[t] {
            Some(v) => Ok(self.imp.graph.constant(v).cloned()),
            None => self.imp.constant_data(t, Some(&self.span)),
        }
    }

    /// Input `i` as an attribute such as a shape or axes: it must be a constant.
    fn constant(&mut self, i: usize, what: &str) -> Res<Tensor> {
        self.constant_or_none(i)?
            .ok_or_else(|| self.err(format!("{what} (input {i}) must be a constant tensor")))
    }

    fn const_ints(&mut self, i: usize, what: &str) -> Res<Vec<i64>> {
        let t = self.constant(i, what)?;
        if !matches!(t.dtype(), DType::I32 | DType::I64) {
            return Err(self.err(format!(
                "{what} (input {i}) must be int32 or int64, got {}",
                t.dtype()
            )));
        }
        Ok(t.data.to_i64())
    }

    /// Extents or counts given by constant input `i`: none may be negative.
    fn const_extents(&mut self, i: usize, what: &str) -> Res<Vec<usize>> {
        let v = self.const_ints(i, what)?;
        (v.iter().map(|&d| usize::try_from(d).ok()))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| self.err(format!("{what} {v:?} must not be negative")))
    }

    /// Axes given by constant input `i`, negative values counted from the end.
    fn const_axes(&mut self, i: usize, rank: usize) -> Res<Vec<usize>> {
        let axes = self.const_ints(i, "axes")?;
        axes.iter().map(|&a| self.axis(a, rank)).collect()
    }

    fn axis(&self, a: i64, rank: usize) -> Res<usize> {
        let r = rank as i64;
        if a < -r || a >= r {
            return Err(self.err(format!("axis {a} is out of range for rank {rank}")));
        }
        Ok(a.rem_euclid(r) as usize)
    }

    /// A fused activation (ActivationFunctionType) as its own node, if any.
    fn activation(&mut self, v: ValueRef, code: i8) -> Res<ValueRef> {
        let (u, step) = match code {
            0 => return Ok(v),
            1 => (UnaryOp::Relu, "relu"),
            2 => (
                UnaryOp::Clip {
                    min: -1.0,
                    max: 1.0,
                },
                "relu_n1_to_1",
            ),
            3 => (UnaryOp::Clip { min: 0.0, max: 6.0 }, "relu6"),
            4 => (UnaryOp::Tanh, "tanh"),
            _ => {
                return Err(
                    self.unsupported(format!("fused activation function {code} is not supported"))
                )
            }
        };
        self.emit(Op::Unary(u), step, &[v])
    }

    /// A constant named within the layer.
    fn constant_value(&mut self, step: &str, t: Tensor) -> ValueRef {
        let name = format!("{}/{step}", self.layer);
        self.imp
            .graph
            .add_constant(&name, t, vec![self.span.clone()])
    }

    fn unary(&mut self, u: UnaryOp) -> Res<ValueRef> {
        let x = self.input(0)?;
        let step = Op::Unary(u).kind_name().to_lowercase();
        self.emit(Op::Unary(u), &step, &[x])
    }

    /// An op of the operator's inputs as they are, with no options.
    fn plain(&mut self, op: Op) -> Res<ValueRef> {
        let inputs = (0..self.inputs.len())
            .map(|i| self.input(i))
            .collect::<Res<Vec<_>>>()?;
        let step = op.kind_name().to_lowercase();
        self.emit(op, &step, &inputs)
    }

    /// CAST to the type the output tensor declares.
    fn cast(&mut self) -> Res<ValueRef> {
        let x = self.input(0)?;
        let to = self.imp.logical_type(self.outputs[0])?.dtype;
        self.emit(Op::Cast(Cast { to, saturate: true }), "cast", &[x])
    }

    /// BITCAST to the type the output tensor declares, of the same width
    /// (TensorFlow's bitcast to a narrower or wider type reshapes the last
    /// axis, which is not supported).
    fn bitcast(&mut self) -> Res<ValueRef> {
        let x = self.input(0)?;
        let (from, to) = (
            self.ty(x).dtype,
            self.imp.logical_type(self.outputs[0])?.dtype,
        );
        if from.size_bytes() != to.size_bytes() {
            return Err(self.unsupported(format!(
                "BITCAST from {from} to {to} changes the element width, which is not supported"
            )));
        }
        self.emit(Op::BitCast(BitCast { to }), "bitcast", &[x])
    }

    /// SELECT_V2 broadcasts like Where. SELECT also takes a condition of rank 1
    /// that picks whole rows of higher-rank operands.
    fn select(&mut self, rows: bool) -> Res<ValueRef> {
        let (mut cond, x, y) = (self.input(0)?, self.input(1)?, self.input(2)?);
        let xs = self.ty(x).shape.clone();
        if rows && self.rank(cond) == 1 && xs.len() > 1 && self.ty(cond).shape[0] == xs[0] {
            let mut shape = vec![1; xs.len()];
            shape[0] = xs[0];
            cond = self.emit(Op::Reshape(Reshape { shape }), "rows", &[cond])?;
        }
        self.emit(Op::Where, "select", &[cond, x, y])
    }

    /// SLICE by constant begin and size (-1: to the end).
    fn slice(&mut self) -> Res<ValueRef> {
        let x = self.input(0)?;
        let xs = self.ty(x).shape.clone();
        let begin = self.const_ints(1, "begin")?;
        let size = self.const_ints(2, "size")?;
        if begin.len() != xs.len() || size.len() != xs.len() {
            return Err(self.err(format!(
                "begin {begin:?} and size {size:?} do not fit shape {xs:?}"
            )));
        }
        let mut axes = Vec::new();
        for (axis, (&d, (&b, &n))) in xs.iter().zip(begin.iter().zip(&size)).enumerate() {
            let d = d as i64;
            let end = if n == -1 { d } else { b.saturating_add(n) };
            if b < 0 || n < -1 || end > d {
                return Err(self.err(format!(
                    "begin {b} and size {n} do not fit axis {axis} of extent {d}"
                )));
            }
            axes.push(SliceAxis {
                axis,
                start: b,
                end,
                step: 1,
            });
        }
        self.emit(Op::Slice(Slice { axes }), "slice", &[x])
    }

    fn binary(&mut self, b: BinaryOp) -> Res<ValueRef> {
        let (x, y) = (self.input(0)?, self.input(1)?);
        let step = Op::Binary(b).kind_name().to_lowercase();
        let v = self.emit(Op::Binary(b), &step, &[x, y])?;
        let act = self
            .options::<schema::ArithmeticOptions>()
            .map_or(0, |o| o.fused_activation_function());
        self.activation(v, act)
    }

    /// The fused activation `act` of NCHW `y`, transposed back to NHWC.
    fn activated_as_nhwc(&mut self, y: ValueRef, act: i8) -> Res<ValueRef> {
        let y = self.activation(y, act)?;
        self.emit(
            Op::Transpose(Transpose {
                perm: TO_NHWC.to_vec(),
            }),
            "to_nhwc",
            &[y],
        )
    }

    /// Input 0 as an NHWC tensor, transposed to NCHW.
    fn nhwc_input_as_nchw(&mut self) -> Res<ValueRef> {
        self.nhwc_as_nchw(0)
    }

    /// Input `i` as an NHWC tensor, transposed to NCHW.
    fn nhwc_as_nchw(&mut self, i: usize) -> Res<ValueRef> {
        let x = self.input(i)?;
        if self.rank(x) != 4 {
            return Err(self.err(format!("input must be NHWC (rank 4), got {}", self.ty(x))));
        }
        self.emit(
            Op::Transpose(Transpose {
                perm: TO_NCHW.to_vec(),
            }),
            "to_nchw",
            &[x],
        )
    }

    /// Weights from input `i` laid out by `perm`: a constant is re-laid at import,
    /// anything else (such as dequantized float16 weights) gets a Transpose node.
    fn weights(&mut self, i: usize, perm: &[usize]) -> Res<ValueRef> {
        let t = self.tensor_input(i)?;
        // The shape of a constant: a graph value's, else the file's.
        let stored = match self.imp.values[t] {
            Some(v) => (self.imp.graph.constant(v)).map(|c| c.shape.clone()),
            None => Some(self.imp.value_type(t)?.shape),
        };
        if let Some(shape) = stored.filter(|s| s.len() != perm.len()) {
            return Err(self.err(format!(
                "weights (input {i}) must have rank {}, got shape {shape:?}",
                perm.len(),
            )));
        }
        let permuted = match self.imp.values[t] {
            Some(v) => (self.imp.graph.constant(v)).map(|c| crate::ops::transpose(perm, c)),
            None => (self.imp).constant_permuted(t, Some(&self.span), Some(perm))?,
        };
        let Some(c) = permuted else {
            let w = self.input(i)?;
            return self.emit(
                Op::Transpose(Transpose {
                    perm: perm.to_vec(),
                }),
                "weights",
                &[w],
            );
        };
        let name = format!("{}/weights", self.layer);
        Ok(self
            .imp
            .graph
            .add_constant(&name, c, vec![self.span.clone()]))
    }

    /// Where the operator is a hybrid one (float input 0, weights quantized
    /// to 8 bits), whether the weights' scales differ per channel. TFLite's
    /// hybrid kernels quantize their input at every run.
    fn hybrid_weights(&self) -> Res<Option<bool>> {
        let (x, w) = (self.tensor_input(0)?, self.tensor_input(1)?);
        let float_input = self.imp.quantization(x)?.is_none()
            && super::dtype_of(self.imp.tensor(x).tensor_type()) == Some(DType::F32);
        Ok(match self.imp.quantization(w)? {
            Some(q) if float_input && q.is_bytes() => Some(q.per_channel()),
            _ => None,
        })
    }

    /// `x` rounded onto a grid fitted to its values at every run, one per
    /// index of the axes before `axis` (`ops::DynamicQuantize`).
    fn quantized_per_run(&mut self, x: ValueRef, axis: usize, symmetric: bool) -> Res<ValueRef> {
        let op = Op::DynamicQuantize(DynamicQuantize { axis, symmetric });
        self.emit(op, "quantized_per_run", &[x])
    }

    /// A 2-D window from TFLite padding, filter size, strides and dilations over the
    /// spatial extents `hw`. SAME pads so that out = ceil(in / stride), putting the odd
    /// pixel at the end; VALID does not pad.
    fn window(
        &self,
        padding: i8,
        hw: [usize; 2],
        kernel: [i64; 2],
        stride: [i32; 2],
        dilation: [i32; 2],
    ) -> Res<Window> {
        let positive = |v: [i64; 2], what: &str| -> Res<[usize; 2]> {
            match v.map(usize::try_from) {
                [Ok(a), Ok(b)] if a > 0 && b > 0 => Ok([a, b]),
                _ => Err(self.err(format!("{what} {v:?} must be positive"))),
            }
        };
        let (k, s, d) = (
            positive(kernel, "filter size")?,
            positive(stride.map(i64::from), "strides")?,
            positive(dilation.map(i64::from), "dilations")?,
        );
        let mut pads = vec![0; 4];
        for a in 0..2 {
            let extent = d[a] * (k[a] - 1) + 1;
            let total = match padding {
                0 => ((hw[a].div_ceil(s[a]).max(1) - 1) * s[a] + extent).saturating_sub(hw[a]),
                1 => 0,
                p => return Err(self.err(format!("unknown padding type {p}"))),
            };
            pads[a] = total / 2;
            pads[a + 2] = total - total / 2;
        }
        Ok(Window {
            kernel: k.to_vec(),
            strides: s.to_vec(),
            dilations: d.to_vec(),
            pads,
        })
    }

    /// NHWC conv: to NCHW, Conv with OIHW weights, fused activation, back to NHWC.
    fn conv_nhwc(
        &mut self,
        w_perm: &[usize],
        depthwise: bool,
        padding: i8,
        stride: [i32; 2],
        dilation: [i32; 2],
        act: i8,
    ) -> Res<ValueRef> {
        let x = self.nhwc_input_as_nchw()?;
        // Each batch item quantized on a grid of its own range: asymmetric
        // where the weights' scales differ per channel, else symmetric
        // (TFLite's conv kernels).
        let x = match self.hybrid_weights()? {
            Some(per_channel) => self.quantized_per_run(x, 1, !per_channel)?,
            None => x,
        };
        let w = self.weights(1, w_perm)?;
        let bias = self.optional_input(2)?;
        let (xs, ws) = (self.ty(x).shape.clone(), self.ty(w).shape.clone());
        let (c, in_per_group) = (xs[1], ws[1]);
        if in_per_group == 0 || c % in_per_group != 0 {
            return Err(self.err(format!(
                "weights {ws:?} (OIHW) do not fit {c} input channels"
            )));
        }
        let group = if depthwise { c } else { c / in_per_group };
        let kernel = [ws[2] as i64, ws[3] as i64];
        let window = self.window(padding, [xs[2], xs[3]], kernel, stride, dilation)?;
        let mut ins = vec![x, w];
        ins.extend(bias);
        let y = self.emit(Op::Conv(Conv { window, group }), "conv", &ins)?;
        self.activated_as_nhwc(y, act)
    }

    fn conv2d(&mut self) -> Res<ValueRef> {
        let o: schema::Conv2DOptions = self.required_options("Conv2DOptions")?;
        self.conv_nhwc(
            &TO_NCHW, // OHWI → OIHW is the same permutation as NHWC → NCHW
            false,
            o.padding(),
            [o.stride_h(), o.stride_w()],
            [o.dilation_h_factor(), o.dilation_w_factor()],
            o.fused_activation_function(),
        )
    }

    /// Depthwise weights are [1, KH, KW, C*M]; output channel c*M + m reads input
    /// channel c, which is a grouped conv with group = C and OIHW weights [C*M, 1, KH, KW].
    fn depthwise_conv2d(&mut self) -> Res<ValueRef> {
        let o: schema::DepthwiseConv2DOptions = self.required_options("DepthwiseConv2DOptions")?;
        let t = self.tensor_input(1)?;
        let ws = self.imp.value_type(t)?.shape;
        if ws.len() != 4 || ws[0] != 1 {
            return Err(self.err(format!(
                "depthwise weights must be [1, KH, KW, C*M], got {ws:?}"
            )));
        }
        self.conv_nhwc(
            &[3, 0, 1, 2],
            true,
            o.padding(),
            [o.stride_h(), o.stride_w()],
            [o.dilation_h_factor(), o.dilation_w_factor()],
            o.fused_activation_function(),
        )
    }

    /// TFLite pooling ignores padded positions: max over real pixels, averages divide
    /// by the number of real pixels in the window.
    fn pool(&mut self, kind: PoolKind) -> Res<ValueRef> {
        let o: schema::Pool2DOptions = self.required_options("Pool2DOptions")?;
        let x = self.nhwc_input_as_nchw()?;
        let xs = self.ty(x).shape.clone();
        let window = self.window(
            o.padding(),
            [xs[2], xs[3]],
            [o.filter_height(), o.filter_width()].map(i64::from),
            [o.stride_h(), o.stride_w()],
            [1, 1],
        )?;
        let pool = Pool {
            kind,
            window,
            ceil_mode: false,
            count_include_pad: false,
        };
        let y = self.emit(Op::Pool(pool), "pool", &[x])?;
        self.activated_as_nhwc(y, o.fused_activation_function())
    }

    /// y = x · Wᵀ + b over the last axis of x (W is [N, K]); leading axes are flattened
    /// into rows, and kept when `keep_num_dims`.
    fn fully_connected(&mut self) -> Res<ValueRef> {
        let o: Option<schema::FullyConnectedOptions> = self.options();
        let (act, keep, asymmetric) = o.map_or((0, false, false), |o| {
            (
                o.fused_activation_function(),
                o.keep_num_dims(),
                o.asymmetric_quantize_inputs(),
            )
        });
        if o.is_some_and(|o| o.weights_format() != 0) {
            return Err(self.unsupported("shuffled FULLY_CONNECTED weights are not supported"));
        }
        let x = self.input(0)?;
        let w = self.input(1)?;
        let bias = self.optional_input(2)?;
        let (xs, ws) = (self.ty(x).shape.clone(), self.ty(w).shape.clone());
        if ws.len() != 2 || ws[1] == 0 || !numel(&xs).is_multiple_of(ws[1]) {
            return Err(self.err(format!(
                "weights {ws:?} (expected [N, K]) do not fit input {xs:?}"
            )));
        }
        let (k, n) = (ws[1], ws[0]);
        let rows = numel(&xs) / k;
        let x2 = if xs.len() == 2 && xs[1] == k {
            x
        } else {
            self.emit(
                Op::Reshape(Reshape {
                    shape: vec![rows, k],
                }),
                "flatten",
                &[x],
            )?
        };
        // Each row quantized on a grid of its own range.
        let x2 = match self.hybrid_weights()? {
            Some(_) => self.quantized_per_run(x2, 1, !asymmetric)?,
            None => x2,
        };
        let mut ins = vec![x2, w];
        ins.extend(bias);
        let gemm = Op::Gemm(Gemm {
            alpha: 1.0,
            beta: 1.0,
            trans_a: false,
            trans_b: true,
        });
        let y = self.emit(gemm, "gemm", &ins)?;
        let y = self.activation(y, act)?;
        if keep && xs.len() != 2 {
            let mut shape = xs[..xs.len() - 1].to_vec();
            shape.push(n);
            return self.emit(Op::Reshape(Reshape { shape }), "unflatten", &[y]);
        }
        Ok(y)
    }

    fn reduce(&mut self, kind: ReduceKind) -> Res<ValueRef> {
        let x = self.input(0)?;
        let mut axes = self.const_axes(1, self.rank(x))?;
        axes.sort_unstable();
        axes.dedup();
        let keepdims = self
            .options::<schema::ReducerOptions>()
            .is_some_and(|o| o.keep_dims());
        let step = match kind {
            ReduceKind::Mean => "mean",
            ReduceKind::Sum => "sum",
            ReduceKind::Max => "max",
            ReduceKind::Min => "min",
            ReduceKind::Prod => "prod",
        };
        self.emit(
            Op::Reduce(Reduce {
                kind,
                axes,
                keepdims,
            }),
            step,
            &[x],
        )
    }

    /// The target shape comes from the shape input, else from the options, with one
    /// -1 inferred from the element count.
    fn reshape(&mut self) -> Res<ValueRef> {
        let x = self.input(0)?;
        let dims = if self.inputs.get(1).copied().flatten().is_some() {
            self.const_ints(1, "shape")?
        } else if let Some(s) = self
            .options::<schema::ReshapeOptions>()
            .and_then(|o| o.new_shape())
        {
            s.iter().map(i64::from).collect()
        } else {
            return Err(self.err("has neither a shape input nor new_shape options"));
        };
        // One -1 takes what the other extents leave of the element count.
        let count = self.ty(x).numel();
        let inferred = dims.iter().filter(|&&d| d == -1).count();
        let known = dims
            .iter()
            .filter(|&&d| d != -1)
            .try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?));
        let shape = match known {
            Some(k) if inferred == 0 || (inferred == 1 && k > 0 && count.is_multiple_of(k)) => dims
                .iter()
                .map(|&d| if d == -1 { count / k } else { d as usize })
                .collect(),
            _ => return Err(self.err(format!("cannot reshape {} to {dims:?}", self.ty(x)))),
        };
        self.emit(Op::Reshape(Reshape { shape }), "reshape", &[x])
    }

    fn squeeze(&mut self) -> Res<ValueRef> {
        let x = self.input(0)?;
        let xs = self.ty(x).shape.clone();
        let dims: Vec<i32> = self
            .options::<schema::SqueezeOptions>()
            .and_then(|o| o.squeeze_dims())
            .map(|d| d.iter().collect())
            .unwrap_or_default();
        let squeezed: Vec<usize> = if dims.is_empty() {
            (0..xs.len()).filter(|&a| xs[a] == 1).collect()
        } else {
            dims.iter()
                .map(|&a| self.axis(a as i64, xs.len()))
                .collect::<Res<_>>()?
        };
        if let Some(&a) = squeezed.iter().find(|&&a| xs[a] != 1) {
            return Err(self.err(format!("cannot squeeze axis {a} of shape {xs:?}")));
        }
        let shape = (0..xs.len())
            .filter(|a| !squeezed.contains(a))
            .map(|a| xs[a])
            .collect();
        self.emit(Op::Reshape(Reshape { shape }), "squeeze", &[x])
    }

    /// softmax(beta · x) over the last axis.
    fn softmax(&mut self) -> Res<ValueRef> {
        let mut x = self.input(0)?;
        let beta = self
            .options::<schema::SoftmaxOptions>()
            .map_or(1.0, |o| o.beta());
        if beta != 1.0 {
            let b = self.imp.graph.add_constant(
                &format!("{}/beta", self.layer),
                Tensor::scalar_f32(beta),
                vec![self.span.clone()],
            );
            x = self.emit(Op::Binary(BinaryOp::Mul), "scale", &[x, b])?;
        }
        let axis = self
            .rank(x)
            .checked_sub(1)
            .ok_or_else(|| self.err("input must not be a scalar"))?;
        self.emit(Op::Softmax(Softmax { axis }), "softmax", &[x])
    }

    fn concatenation(&mut self) -> Res<ValueRef> {
        let o: schema::ConcatenationOptions = self.required_options("ConcatenationOptions")?;
        let xs = (0..self.inputs.len())
            .map(|i| self.input(i))
            .collect::<Res<Vec<_>>>()?;
        let first = *xs.first().ok_or_else(|| self.err("has no inputs"))?;
        let axis = self.axis(o.axis() as i64, self.rank(first))?;
        let y = self.emit(Op::Concat(Concat { axis }), "concat", &xs)?;
        self.activation(y, o.fused_activation_function())
    }

    /// Paddings are an int [rank, 2] constant; PADV2 adds a constant pad value.
    fn pad(&mut self, has_value: bool) -> Res<ValueRef> {
        let x = self.input(0)?;
        let rank = self.rank(x);
        let p = self.const_ints(1, "paddings")?;
        if p.len() != 2 * rank || p.iter().any(|&v| v < 0) {
            return Err(self.err(format!(
                "paddings {p:?} must be [{rank}, 2] non-negative values"
            )));
        }
        let value = if has_value && self.inputs.get(2).copied().flatten().is_some() {
            let t = self.constant(2, "pad value")?;
            match t.to_f32()[..] {
                [v] => v,
                _ => return Err(self.err("pad value must be a scalar")),
            }
        } else {
            0.0
        };
        let op = Op::Pad(Pad {
            begins: p.iter().step_by(2).copied().collect(),
            ends: p.iter().skip(1).step_by(2).copied().collect(),
            mode: PadMode::Constant(value),
        });
        self.emit(op, "pad", &[x])
    }

    /// TensorFlow strided slice: begin/end/strides per leading axis, with masks. Begin
    /// and end clamp to the axis; a shrunk axis takes one element and is removed.
    fn strided_slice(&mut self) -> Res<ValueRef> {
        let (begin_mask, end_mask, ellipsis_mask, new_axis_mask, shrink, offset) = self
            .options::<schema::StridedSliceOptions>()
            .map_or((0, 0, 0, 0, 0, false), |o| {
                let (b, e, el) = (o.begin_mask(), o.end_mask(), o.ellipsis_mask());
                (
                    b,
                    e,
                    el,
                    o.new_axis_mask(),
                    o.shrink_axis_mask(),
                    o.offset(),
                )
            });
        if ellipsis_mask != 0 || new_axis_mask != 0 {
            return Err(self.unsupported(
                "STRIDED_SLICE with ellipsis_mask or new_axis_mask is not supported",
            ));
        }
        let x = self.input(0)?;
        let xs = self.ty(x).shape.clone();
        let begin = self.const_ints(1, "begin")?;
        let end = self.const_ints(2, "end")?;
        let stride = if self.inputs.get(3).copied().flatten().is_some() {
            self.const_ints(3, "strides")?
        } else {
            vec![1; begin.len()]
        };
        if begin.len() != end.len() || begin.len() != stride.len() || begin.len() > xs.len() {
            return Err(self.err(format!(
                "begin {begin:?}, end {end:?} and strides {stride:?} do not fit shape {xs:?}"
            )));
        }
        let bit = |m: i32, a: usize| a < 32 && m & (1 << a) != 0;
        let mut axes = Vec::new();
        for (a, &dim) in xs.iter().enumerate().take(begin.len()) {
            let bit = |m: i32| bit(m, a);
            let d = dim as i64;
            let norm = |v: i64| if v < 0 { v + d } else { v };
            let raw_end = if offset { begin[a] + end[a] } else { end[a] };
            let sa = if bit(shrink) {
                let start = if bit(begin_mask) { 0 } else { norm(begin[a]) };
                if !(0..d).contains(&start) {
                    return Err(self.err(format!(
                        "index {} is out of range for axis {a} of shape {xs:?}",
                        begin[a]
                    )));
                }
                SliceAxis {
                    axis: a,
                    start,
                    end: start + 1,
                    step: 1,
                }
            } else if stride[a] > 0 {
                let start = if bit(begin_mask) {
                    0
                } else {
                    norm(begin[a]).clamp(0, d)
                };
                let stop = if bit(end_mask) {
                    d
                } else {
                    norm(raw_end).clamp(0, d)
                };
                SliceAxis {
                    axis: a,
                    start,
                    end: stop,
                    step: stride[a],
                }
            } else if stride[a] < 0 {
                let start = if bit(begin_mask) {
                    d - 1
                } else {
                    norm(begin[a]).clamp(-1, d - 1)
                };
                let stop = if bit(end_mask) {
                    -1
                } else {
                    norm(raw_end).clamp(-1, d - 1)
                };
                SliceAxis {
                    axis: a,
                    start,
                    end: stop,
                    step: stride[a],
                }
            } else {
                return Err(self.err(format!("stride of axis {a} is zero")));
            };
            if !(sa.step == 1 && sa.start == 0 && sa.end == d) {
                axes.push(sa);
            }
        }
        let y = self.emit(Op::Slice(Slice { axes }), "slice", &[x])?;
        if shrink == 0 {
            return Ok(y);
        }
        let shape = self
            .ty(y)
            .shape
            .iter()
            .enumerate()
            .filter(|&(a, _)| !bit(shrink, a))
            .map(|(_, &d)| d)
            .collect();
        self.emit(Op::Reshape(Reshape { shape }), "shrink", &[y])
    }

    /// TFLite resizes the H and W axes of an NHWC tensor to the constant size [H', W'].
    fn resize(&mut self, mode: ResizeMode) -> Res<ValueRef> {
        let x = self.input(0)?;
        let xs = self.ty(x).shape.clone();
        let size = self.const_ints(1, "size")?;
        let (align, half_pixel) = match mode {
            ResizeMode::Linear | ResizeMode::Cubic => self
                .options::<schema::ResizeBilinearOptions>()
                .map_or((false, false), |o| {
                    (o.align_corners(), o.half_pixel_centers())
                }),
            ResizeMode::Nearest => self
                .options::<schema::ResizeNearestNeighborOptions>()
                .map_or((false, false), |o| {
                    (o.align_corners(), o.half_pixel_centers())
                }),
        };
        let [h, w] = size[..] else {
            return Err(self.err(format!("size {size:?} must be [height, width]")));
        };
        if xs.len() != 4 || h <= 0 || w <= 0 || xs[1] == 0 || xs[2] == 0 {
            return Err(self.err(format!("cannot resize {xs:?} to [{h}, {w}]")));
        }
        let sizes = vec![xs[0], h as usize, w as usize, xs[3]];
        let scales = vec![1.0, h as f32 / xs[1] as f32, w as f32 / xs[2] as f32, 1.0];
        let coord = if align {
            CoordTransform::AlignCorners
        } else if half_pixel {
            CoordTransform::HalfPixel
        } else {
            CoordTransform::Asymmetric
        };
        // TFLite's nearest index is floor(x · in/out) when asymmetric and
        // floor((x + 0.5) · in/out) with half-pixel centers, which is the half-pixel
        // source coordinate rounded half up; with aligned corners it rounds half up.
        let nearest = match coord {
            CoordTransform::Asymmetric => NearestMode::Floor,
            _ => NearestMode::RoundPreferCeil,
        };
        let r = Resize {
            mode,
            coord,
            nearest,
            scales,
            sizes,
            filter: Default::default(),
            crop: None,
        };
        self.emit(Op::Resize(r), "resize", &[x])
    }

    /// adj_x / adj_y transpose the last two axes of an operand before the product.
    fn batch_matmul(&mut self) -> Res<ValueRef> {
        let (adj_x, adj_y) = self
            .options::<schema::BatchMatMulOptions>()
            .map_or((false, false), |o| (o.adj_x(), o.adj_y()));
        let mut operands = [self.input(0)?, self.input(1)?];
        for (v, adj, step) in [(0, adj_x, "adj_x"), (1, adj_y, "adj_y")] {
            if !adj {
                continue;
            }
            let r = self.rank(operands[v]);
            if r < 2 {
                return Err(self.err(format!(
                    "{step} needs rank 2 or more, got {}",
                    self.ty(operands[v])
                )));
            }
            let mut perm: Vec<usize> = (0..r).collect();
            perm.swap(r - 2, r - 1);
            operands[v] = self.emit(Op::Transpose(Transpose { perm }), step, &[operands[v]])?;
        }
        self.emit(Op::MatMul, "matmul", &operands)
    }

    /// DENSIFY of a constant: the importer made it dense when it read it, so the
    /// layer is that dense constant.
    fn densify(&mut self) -> Res<ValueRef> {
        let dense = self.constant(0, "the sparse tensor")?;
        let v = self
            .imp
            .graph
            .add_constant(&self.layer, dense, vec![self.span.clone()]);
        self.emitted.push(v.node);
        Ok(v)
    }

    /// DEQUANTIZE of float16 weights (models converted with float16 weights): a
    /// constant is converted at import, like other weight re-layouts; anything else
    /// becomes a Cast.
    fn dequantize(&mut self) -> Res<ValueRef> {
        let x = self.input(0)?;
        // A quantized integer input is already its float meaning here.
        if self.ty(x).dtype == DType::F32 {
            return self.requantize();
        }
        if self.ty(x).dtype != DType::F16 {
            return Err(self.unsupported(format!(
                "DEQUANTIZE of {} is not supported (only float16 weights)",
                self.ty(x)
            )));
        }
        if let Some(c) = self.imp.graph.constant(x) {
            let f32_weights = c.cast(DType::F32);
            let v = self
                .imp
                .graph
                .add_constant(&self.layer, f32_weights, vec![self.span.clone()]);
            self.emitted.push(v.node);
            return Ok(v);
        }
        self.emit(
            Op::Cast(Cast {
                to: DType::F32,
                saturate: true,
            }),
            "cast",
            &[x],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose_permutes_axes() {
        // [2, 3] → [3, 2]: element (i, j) moves to (j, i).
        let t = Tensor::from_f32(vec![2, 3], vec![0., 1., 2., 3., 4., 5.]);
        let u = crate::ops::transpose(&[1, 0], &t);
        assert_eq!(u.shape, vec![3, 2]);
        assert_eq!(u.to_f32(), vec![0., 3., 1., 4., 2., 5.]);
    }
}
