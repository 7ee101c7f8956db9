//! TensorFlow ops the converter emits as builtins of their own, each as the
//! IR ops it composes: index selection (ARG_MAX, TOPK_V2, GATHER_ND,
//! SCATTER_ND, EMBEDDING_LOOKUP), filled tensors (FILL, ZEROS_LIKE,
//! ONES_LIKE), running sums, floored division, and the normalizations over
//! the last axis or the channels (L2_NORMALIZATION,
//! LOCAL_RESPONSE_NORMALIZATION, LOG_SOFTMAX), encodings and sequences
//! (ONE_HOT, RANGE) and ATAN2.

use super::{schema, Cx, Res};
use crate::core::scalar::MathFn;
use crate::frontend::compose::{one_hot_mask, range_values, LayerBuilder, NegativeIndices};
use crate::frontend::tflite::TfliteError;
use crate::graph::{
    BinaryOp, DType, Op, ReduceKind, Tensor, TensorData, UnaryOp, ValueRef, ValueType,
};
use crate::ops::{
    ArgKind, ArgReduce, Cast, Cumulative, Expand, Gather, GatherNd, IntegerArith, LogSoftmax, Lrn,
    Reduce, Running, ScatterNd, ScatterReduction, TopK,
};

/// The floor of the L2 norm L2_NORMALIZATION divides by (TFLite's kernel).
const L2_NORM_EPSILON: f32 = 1e-6;

impl Cx<'_, '_> {
    /// `v` converted to the type output `k` declares, when it has another
    /// (indices come out of the IR as int64, TFLite's are often int32).
    fn as_declared(&mut self, v: ValueRef, k: usize) -> Res<ValueRef> {
        let out = *self
            .outputs
            .get(k)
            .ok_or_else(|| self.err("has too few outputs"))?;
        let to = self.imp.logical_type(out)?.dtype;
        match self.ty(v).dtype == to {
            true => Ok(v),
            false => self.emit(Op::Cast(Cast { to, saturate: true }), "cast", &[v]),
        }
    }

    /// The one axis given by constant input `i`, for a tensor of rank `rank`.
    fn const_axis(&mut self, i: usize, rank: usize) -> Res<usize> {
        match self.const_ints(i, "axis")?[..] {
            [a] => self.axis(a, rank),
            ref v => Err(self.err(format!("the axis must be one integer, got {v:?}"))),
        }
    }

    /// A scalar constant of `dtype`.
    fn scalar(&mut self, what: &str, dtype: DType, v: f64) -> ValueRef {
        let t = Tensor::new(vec![], TensorData::from_f64(dtype, vec![v]));
        self.constant_value(what, t)
    }

    /// ARG_MAX or ARG_MIN along a constant axis, which goes; ties go to the
    /// first index.
    pub(super) fn arg(&mut self, kind: ArgKind) -> Res<ValueRef> {
        let x = self.input(0)?;
        let axis = self.const_axis(1, self.rank(x))?;
        let op = Op::ArgReduce(ArgReduce {
            kind,
            axis,
            keepdims: false,
            select_last_index: false,
        });
        let y = self.emit(op, "arg", &[x])?;
        self.as_declared(y, 0)
    }

    /// TOPK_V2: the k (a constant) largest along the last axis, sorted, and
    /// their indices.
    pub(super) fn top_k(&mut self) -> Res<Vec<ValueRef>> {
        let x = self.input(0)?;
        let axis = (self.rank(x).checked_sub(1)).ok_or_else(|| self.err("input is a scalar"))?;
        let k = match self.const_extents(1, "k")?[..] {
            [k] => k,
            ref v => return Err(self.err(format!("k must be one count, got {v:?}"))),
        };
        let op = Op::TopK(TopK {
            axis,
            k,
            largest: true,
        });
        let ys = self.emit_all(op, "top_k", &[x])?;
        Ok(vec![ys[0], self.as_declared(ys[1], 1)?])
    }

    /// GATHER_ND(params, indices): the slices of params at the index tuples
    /// along the indices' last axis.
    pub(super) fn gather_nd(&mut self) -> Res<ValueRef> {
        let (params, indices) = (self.input(0)?, self.input(1)?);
        let op = Op::GatherNd(GatherNd { batch_dims: 0 });
        self.emit(op, "gather_nd", &[params, indices])
    }

    /// SCATTER_ND(indices, updates, shape): zeros of the constant shape with
    /// the updates summed in at the index tuples (duplicates add up, as in
    /// TensorFlow).
    pub(super) fn scatter_nd(&mut self) -> Res<ValueRef> {
        let (indices, updates) = (self.input(0)?, self.input(1)?);
        let shape = self.const_extents(2, "shape")?;
        let zero = self.scalar("zero", self.ty(updates).dtype, 0.0);
        let zeros = self.emit(Op::Expand(Expand { shape }), "zeros", &[zero])?;
        let op = Op::ScatterNd(ScatterNd {
            reduction: ScatterReduction::Add,
        });
        self.emit(op, "scatter_nd", &[zeros, indices, updates])
    }

    /// EMBEDDING_LOOKUP(ids, table): the table's rows at the ids.
    pub(super) fn embedding_lookup(&mut self) -> Res<ValueRef> {
        let (ids, table) = (self.input(0)?, self.input(1)?);
        self.emit(Op::Gather(Gather { axis: 0 }), "lookup", &[table, ids])
    }

    /// FILL(dims, value): the scalar value broadcast to the constant dims.
    pub(super) fn fill(&mut self) -> Res<ValueRef> {
        let shape = self.const_extents(0, "dims")?;
        let value = self.input(1)?;
        self.emit(Op::Expand(Expand { shape }), "fill", &[value])
    }

    /// ZEROS_LIKE or ONES_LIKE: `value` in x's type and shape.
    pub(super) fn filled_like(&mut self, value: f64) -> Res<ValueRef> {
        let x = self.input(0)?;
        let ValueType { dtype, shape } = self.ty(x).clone();
        let v = self.scalar("value", dtype, value);
        self.emit(Op::Expand(Expand { shape }), "fill", &[v])
    }

    /// CUMSUM along a constant axis.
    pub(super) fn cumsum(&mut self) -> Res<ValueRef> {
        let x = self.input(0)?;
        let axis = self.const_axis(1, self.rank(x))?;
        let o = self.options::<schema::CumsumOptions>();
        let op = Op::Cumulative(Cumulative {
            op: Running::Sum,
            axis,
            exclusive: o.is_some_and(|o| o.exclusive()),
            reverse: o.is_some_and(|o| o.reverse()),
        });
        self.emit(op, "cumsum", &[x])
    }

    /// FLOOR_DIV, or FLOOR_MOD (`remainder`): division rounded towards
    /// negative infinity, and the remainder with the divisor's sign. Integers
    /// take the floored remainder, floats the floor of the quotient.
    pub(super) fn floored(&mut self, remainder: bool) -> Res<ValueRef> {
        let (a, b) = (self.input(0)?, self.input(1)?);
        if !self.ty(a).dtype.is_float() {
            let modulo = Op::IntegerArith(IntegerArith::Mod { fmod: false });
            let r = self.emit(modulo, "floor_mod", &[a, b])?;
            if remainder {
                return Ok(r);
            }
            // a − r is a multiple of b, so the truncating division is exact.
            let multiple = self.emit(Op::Binary(BinaryOp::Sub), "multiple", &[a, r])?;
            return self.emit(Op::Binary(BinaryOp::Div), "floor_div", &[multiple, b]);
        }
        let q = self.emit(Op::Binary(BinaryOp::Div), "quotient", &[a, b])?;
        let q = self.emit(Op::Unary(UnaryOp::Floor), "floor", &[q])?;
        if !remainder {
            return Ok(q);
        }
        let whole = self.emit(Op::Binary(BinaryOp::Mul), "whole", &[q, b])?;
        self.emit(Op::Binary(BinaryOp::Sub), "floor_mod", &[a, whole])
    }

    /// ADD_N: the sum of all inputs.
    pub(super) fn add_n(&mut self) -> Res<ValueRef> {
        let mut sum = self.input(0)?;
        for i in 1..self.inputs.len() {
            let x = self.input(i)?;
            sum = self.emit(Op::Binary(BinaryOp::Add), "add", &[sum, x])?;
        }
        match self.inputs.len() {
            1 => self.emit(Op::Identity, "identity", &[sum]),
            _ => Ok(sum),
        }
    }

    /// L2_NORMALIZATION over the last axis: x / max(‖x‖, 1e-6).
    pub(super) fn l2_normalization(&mut self) -> Res<ValueRef> {
        let x = self.input(0)?;
        let axis = (self.rank(x).checked_sub(1)).ok_or_else(|| self.err("input is a scalar"))?;
        let squares = self.emit(Op::Binary(BinaryOp::Mul), "square", &[x, x])?;
        let sum = Op::Reduce(Reduce {
            kind: ReduceKind::Sum,
            axes: vec![axis],
            keepdims: true,
        });
        let sum = self.emit(sum, "sum", &[squares])?;
        let norm = self.emit(Op::Unary(UnaryOp::Sqrt), "norm", &[sum])?;
        let epsilon = self.scalar("epsilon", DType::F32, L2_NORM_EPSILON as f64);
        let norm = self.emit(Op::Binary(BinaryOp::Max), "floor", &[norm, epsilon])?;
        let y = self.emit(Op::Binary(BinaryOp::Div), "normalized", &[x, norm])?;
        let act =
            (self.options::<schema::L2NormOptions>()).map_or(0, |o| o.fused_activation_function());
        self.activation(y, act)
    }

    /// LOCAL_RESPONSE_NORMALIZATION of NHWC x over the `radius` channels on
    /// either side: x / (bias + alpha·Σ x²)^beta, the IR's LRN over a window
    /// of 2·radius + 1 channels, whose alpha is divided by the window.
    pub(super) fn local_response_normalization(&mut self) -> Res<ValueRef> {
        let o: schema::LocalResponseNormalizationOptions =
            self.required_options("LocalResponseNormalizationOptions")?;
        let radius = usize::try_from(o.radius())
            .map_err(|_| self.err(format!("radius {} must not be negative", o.radius())))?;
        let x = self.nhwc_input_as_nchw()?;
        let size = 2 * radius + 1;
        let op = Op::Lrn(Lrn {
            alpha: o.alpha() * size as f32,
            beta: o.beta(),
            bias: o.bias(),
            size,
        });
        let y = self.emit(op, "lrn", &[x])?;
        self.activated_as_nhwc(y, 0)
    }

    /// LOG_SOFTMAX over the last axis.
    pub(super) fn log_softmax(&mut self) -> Res<ValueRef> {
        let x = self.input(0)?;
        let axis = (self.rank(x).checked_sub(1)).ok_or_else(|| self.err("input is a scalar"))?;
        self.emit(Op::LogSoftmax(LogSoftmax { axis }), "log_softmax", &[x])
    }

    /// ONE_HOT(indices, depth, on, off): `on` where an index equals the
    /// position along the new axis, else `off`; an index outside
    /// `[0, depth)` is hot nowhere, as in TensorFlow.
    pub(super) fn one_hot(&mut self) -> Res<ValueRef> {
        let indices = self.input(0)?;
        let depth = match self.const_extents(1, "depth")?[..] {
            [d] => d,
            ref v => return Err(self.err(format!("depth must be one count, got {v:?}"))),
        };
        let (on, off) = (self.input(2)?, self.input(3)?);
        let rank = self.rank(indices) + 1;
        let axis = match self
            .options::<schema::OneHotOptions>()
            .map_or(-1, |o| o.axis())
        {
            -1 => rank - 1,
            a => self.axis(a.into(), rank)?,
        };
        let hot = one_hot_mask(self, indices, depth, axis, NegativeIndices::Nowhere)?;
        self.emit(Op::Where, "one_hot", &[hot, on, off])
    }

    /// RANGE(start, limit, delta) of constant scalars: a constant.
    pub(super) fn range(&mut self) -> Res<ValueRef> {
        let [start, limit, delta] =
            [(0, "start"), (1, "limit"), (2, "delta")].map(|(i, what)| self.constant(i, what));
        let t = range_values(&*self, &start?, &limit?, &delta?)?;
        Ok(self.layer_output_constant(t))
    }

    /// ATAN2(y, x), the angle of the point (x, y), as atan(y / x) moved by ±π
    /// where x < 0 (+π where y ≥ 0). A zero y counts as a zero quotient, so the
    /// origin gives 0; the signs of zeros and two infinite operands are not
    /// told apart (atan2(−0, −1) gives π, atan2(∞, ∞) NaN).
    pub(super) fn atan2(&mut self) -> Res<ValueRef> {
        let (y, x) = (self.input(0)?, self.input(1)?);
        let dtype = self.ty(y).dtype;
        let [zero, pi, minus_pi] = [0.0, std::f64::consts::PI, -std::f64::consts::PI]
            .map(|v| self.scalar("constant", dtype, v));
        let binary = |b| Op::Binary(b);
        let quotient = self.emit(binary(BinaryOp::Div), "quotient", &[y, x])?;
        let y_zero = self.emit(binary(BinaryOp::Equal), "y_zero", &[y, zero])?;
        let quotient = self.emit(Op::Where, "quotient_at_zero", &[y_zero, zero, quotient])?;
        let atan = Op::Unary(UnaryOp::Math(MathFn::Atan));
        let angle = self.emit(atan, "atan", &[quotient])?;
        let upper = self.emit(binary(BinaryOp::GreaterOrEqual), "upper", &[y, zero])?;
        let turn = self.emit(Op::Where, "half_turn", &[upper, pi, minus_pi])?;
        let turned = self.emit(binary(BinaryOp::Add), "turned", &[angle, turn])?;
        let left = self.emit(binary(BinaryOp::Less), "left", &[x, zero])?;
        self.emit(Op::Where, "atan2", &[left, turned, angle])
    }
}

impl LayerBuilder for Cx<'_, '_> {
    type Error = TfliteError;
    fn step(&mut self, op: Op, inputs: &[ValueRef], what: &str) -> Res<ValueRef> {
        self.emit(op, what, inputs)
    }
    fn layer_constant(&mut self, what: &str, t: Tensor) -> ValueRef {
        self.constant_value(what, t)
    }
    fn value_type(&self, v: ValueRef) -> ValueType {
        self.ty(v).clone()
    }
    fn layer_error(&self, message: String) -> TfliteError {
        self.err(message)
    }
}
