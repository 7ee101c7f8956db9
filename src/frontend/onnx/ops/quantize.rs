//! Quantized operators, imported as the float arithmetic their specifications
//! define them by.
//!
//! - QuantizeLinear: `saturate(round(x / scale) + zero_point)`, halves to even;
//!   DequantizeLinear: `(x - zero_point) * scale`; per tensor or per axis.
//! - DynamicQuantizeLinear, ConvInteger and MatMulInteger (dynamic
//!   quantization): the range, the integer products on floats that hold them.
//! - The QOperator forms (QLinearConv, QLinearMatMul, and the com.microsoft
//!   QLinearAdd, QLinearMul, QLinearConcat, QLinear pools and activations,
//!   QLinearSoftmax, QLinearWhere, QGemm): their quantized inputs dequantized, the float op,
//!   its result quantized. The runtime computes some of these patterns from
//!   the integers, as onnxruntime's kernels do (adds, multiplies, softmaxes).
//!
//! Quantized tensors keep their integer type. Where a dequantization reads a
//! quantization's output, the round trip through the integer type is the
//! identity on the rounded, clamped values and folds away (`graph::fold`,
//! which also moves a cast below the data movement between two quantized ops),
//! and a dequantization of constant weights folds into float weights. The
//! model then runs in float, every quantized activation on its quantization
//! grid: onnxruntime's result up to float rounding where a value lies at half
//! a step.

use super::context::{NodeCtx, Out, Res};
use super::conv::conv_parts_of;
use super::normalize::softmax_of;
use super::registry::{Registry, AI_ONNX};
use super::window::{kernel_attr, window};
use crate::frontend::onnx::dtype_from_onnx;
use crate::graph::{
    numel, BinaryOp, Concat, Conv, DType, Gemm, Op, Pool, PoolKind, ReduceKind, UnaryOp, ValueRef,
};
use crate::ops::{Cast, Expand, Reduce, Reshape, Slice, SliceAxis};

/// The domain of onnxruntime's contrib operators, which its quantizer emits.
const MICROSOFT: &str = "com.microsoft";

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "QuantizeLinear", quantize_linear);
    reg.add(AI_ONNX, "DequantizeLinear", dequantize_linear);
    reg.add(AI_ONNX, "QLinearConv", qlinear_conv);
    reg.add(AI_ONNX, "QLinearMatMul", qlinear_matmul);
    reg.add(AI_ONNX, "DynamicQuantizeLinear", dynamic_quantize_linear);
    reg.add(AI_ONNX, "ConvInteger", conv_integer);
    reg.add(AI_ONNX, "MatMulInteger", matmul_integer);
    reg.add(MICROSOFT, "QLinearAdd", |c| {
        qlinear_binary(c, BinaryOp::Add)
    });
    reg.add(MICROSOFT, "QLinearMul", |c| {
        qlinear_binary(c, BinaryOp::Mul)
    });
    reg.add(MICROSOFT, "QLinearSigmoid", |c| {
        qlinear_unary(c, UnaryOp::Sigmoid)
    });
    reg.add(MICROSOFT, "QLinearLeakyRelu", |c| {
        let alpha = c.float("alpha", 0.01)?;
        qlinear_unary(c, UnaryOp::LeakyRelu { alpha })
    });
    reg.add(
        MICROSOFT,
        "QLinearGlobalAveragePool",
        qlinear_global_average_pool,
    );
    reg.add(MICROSOFT, "QLinearAveragePool", qlinear_average_pool);
    reg.add(MICROSOFT, "QLinearConcat", qlinear_concat);
    reg.add(MICROSOFT, "QGemm", qgemm);
    reg.add(MICROSOFT, "QLinearSoftmax", qlinear_softmax);
    reg.add(MICROSOFT, "QLinearWhere", qlinear_where);
}

/// The integer types a quantized tensor may have here (float8 types too).
const QUANTIZED: [DType; 7] = [
    DType::I8,
    DType::U8,
    DType::I16,
    DType::U16,
    DType::I32,
    DType::I4,
    DType::U4,
];

/// Where a tensor's scale and zero point are among the node's inputs.
#[derive(Clone, Copy)]
struct Grid {
    scale: usize,
    zero_point: usize,
}

impl Grid {
    /// The scale at input `scale` and the zero point right after it.
    const fn at(scale: usize) -> Grid {
        Grid {
            scale,
            zero_point: scale + 1,
        }
    }
}

/// The parameters of input 0, which follow it.
const INPUT_0: Grid = Grid::at(1);

/// `y = saturate(round(x / scale) + zero_point)`; the zero point's type (else
/// `output_dtype`, else uint8) is the output's.
fn quantize_linear(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let q = match c.opt_input(2) {
        Some(zp) => c.ty(zp).dtype,
        None => match c.int("output_dtype", 0)? {
            0 => DType::U8,
            code => {
                dtype_from_onnx(code as i32).map_err(|m| c.err(format!("output_dtype: {m}")))?
            }
        },
    };
    // Opset 23: `precision` names the type of the division, which must be x's
    // here (the scale's type must be x's too).
    let precision = c.int("precision", 0)?;
    if precision != 0 {
        let p = dtype_from_onnx(precision as i32).map_err(|m| c.err(format!("precision: {m}")))?;
        if p != c.ty(x).dtype {
            return Err(c.err(format!(
                "precision {} differs from the input's {}: a division in another type is not supported",
                p.name(),
                c.ty(x).dtype.name()
            )));
        }
    }
    let axis = c.int("axis", 1)?;
    Ok(vec![Some(c.quantize(x, INPUT_0, axis, q, Out::Node)?)])
}

/// `y = (x - zero_point) * scale`, of the scale's float type.
fn dequantize_linear(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    // Opset 23: `output_dtype` names the output's type, which must be the
    // scale's here (the product is taken in it).
    let output_dtype = c.int("output_dtype", 0)?;
    if output_dtype != 0 {
        let out = dtype_from_onnx(output_dtype as i32)
            .map_err(|m| c.err(format!("output_dtype: {m}")))?;
        let scale = c.ty(c.input(INPUT_0.scale)?).dtype;
        if out != scale {
            return Err(c.err(format!(
                "output_dtype {} differs from the scale's {}: a product in another type is not supported",
                out.name(),
                scale.name()
            )));
        }
    }
    let axis = c.int("axis", 1)?;
    Ok(vec![Some(c.dequantize(x, INPUT_0, axis, Out::Node)?)])
}

/// QLinearConv: x (0-2), w (3-5, per output channel), y (6-7), int32 bias (8).
fn qlinear_conv(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.dequantize(c.input(0)?, INPUT_0, 1, Out::Inner("x"))?;
    let w_grid = Grid::at(4);
    let w = c.dequantize(c.input(3)?, w_grid, 0, Out::Inner("w"))?;
    let bias = match c.opt_input(8) {
        Some(b) => Some(c.bias(b, 1, 4)?),
        None => None,
    };
    let parts = conv_parts_of(c, x, w, bias, false)?;
    let conv = Op::Conv(Conv {
        window: parts.window,
        group: parts.group,
    });
    let y = c.add(conv, &parts.inputs, Out::Inner("conv"))?;
    c.quantize_output(y, 6, 1)
}

/// QLinearMatMul: a (0-2, per row or tensor), b (3-5, per column or tensor), y (6-7).
fn qlinear_matmul(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let a = c.dequantize(c.input(0)?, INPUT_0, -2, Out::Inner("a"))?;
    let b_grid = Grid::at(4);
    let b = c.dequantize(c.input(3)?, b_grid, -1, Out::Inner("b"))?;
    let y = c.add(Op::MatMul, &[a, b], Out::Inner("matmul"))?;
    c.quantize_output(y, 6, -1)
}

/// QLinearAdd and QLinearMul: a (0-2), b (3-5), c (6-7).
fn qlinear_binary(c: &mut NodeCtx, op: BinaryOp) -> Res<Vec<Option<ValueRef>>> {
    let a = c.dequantize(c.input(0)?, INPUT_0, 1, Out::Inner("a"))?;
    let b_grid = Grid::at(4);
    let b = c.dequantize(c.input(3)?, b_grid, 1, Out::Inner("b"))?;
    let y = c.add(Op::Binary(op), &[a, b], Out::Inner("float"))?;
    c.quantize_output(y, 6, 1)
}

/// QLinearSigmoid, QLinearLeakyRelu: x (0-2), y (3-4).
fn qlinear_unary(c: &mut NodeCtx, op: UnaryOp) -> Res<Vec<Option<ValueRef>>> {
    let x = c.dequantize(c.input(0)?, INPUT_0, 1, Out::Inner("x"))?;
    let y = c.add(Op::Unary(op), &[x], Out::Inner("float"))?;
    c.quantize_output(y, 3, 1)
}

/// QLinearSoftmax: x (0-2), y (3-4); `axis`, and the `opset` of the Softmax it
/// stands for (which decides what `axis` means), which onnxruntime requires.
fn qlinear_softmax(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let Some(opset) = c.typed_attr("opset", 2, "an int")?.map(|a| a.i) else {
        return Err(c.err("QLinearSoftmax needs its `opset` attribute"));
    };
    let x = c.dequantize(c.input(0)?, INPUT_0, 1, Out::Inner("x"))?;
    let y = softmax_of(c, x, opset, false, Out::Inner("softmax"))?;
    c.quantize_output(y, 3, 1)
}

/// QLinearWhere: condition (0), x (1-3), y (4-6), z (7-8).
fn qlinear_where(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let condition = c.input(0)?;
    let x = c.dequantize(c.input(1)?, Grid::at(2), 1, Out::Inner("x"))?;
    let y = c.dequantize(c.input(4)?, Grid::at(5), 1, Out::Inner("y"))?;
    let z = c.add(Op::Where, &[condition, x, y], Out::Inner("where"))?;
    c.quantize_output(z, 7, 1)
}

/// QLinearGlobalAveragePool: x (0-2), y (3-4); channels first or last.
fn qlinear_global_average_pool(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.dequantize(c.input(0)?, INPUT_0, 1, Out::Inner("x"))?;
    let rank = c.ty(x).shape.len();
    if rank < 3 {
        return Err(c.err(format!("input of rank {rank} has no spatial axes")));
    }
    let axes = match c.bool_attr("channels_last", false)? {
        true => (1..rank - 1).collect(),
        false => (2..rank).collect(),
    };
    let mean = Op::Reduce(Reduce {
        kind: ReduceKind::Mean,
        axes,
        keepdims: true,
    });
    let y = c.add(mean, &[x], Out::Inner("mean"))?;
    c.quantize_output(y, 3, 1)
}

/// QLinearAveragePool: x (0-2), y (3-4), the attributes of AveragePool.
fn qlinear_average_pool(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    if c.bool_attr("channels_last", false)? {
        return Err(c.err("QLinearAveragePool with channels_last is not supported"));
    }
    let x = c.dequantize(c.input(0)?, INPUT_0, 1, Out::Inner("x"))?;
    let xs = c.ty(x).shape;
    if xs.len() < 3 {
        return Err(c.err(format!("input shape {xs:?} has no spatial axes")));
    }
    let kernel = kernel_attr(c, None)?;
    let pool = Op::Pool(Pool {
        kind: PoolKind::Avg,
        window: window(c, &xs[2..], kernel, false)?,
        ceil_mode: c.bool_attr("ceil_mode", false)?,
        count_include_pad: c.bool_attr("count_include_pad", false)?,
    });
    let y = c.add(pool, &[x], Out::Inner("pool"))?;
    c.quantize_output(y, 3, 1)
}

/// QLinearConcat: y (0-1), then each input with its scale and zero point.
fn qlinear_concat(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let count = c.inputs.len().saturating_sub(2);
    if count == 0 || !count.is_multiple_of(3) {
        return Err(c.err(format!(
            "{} inputs: expected the output's scale and zero point, then triples",
            c.inputs.len()
        )));
    }
    let mut parts = Vec::with_capacity(count / 3);
    for k in 0..count / 3 {
        let at = 2 + 3 * k;
        let grid = Grid::at(at + 1);
        parts.push(c.dequantize(c.input(at)?, grid, 1, Out::Inner("part"))?);
    }
    let rank = c.ty(parts[0]).shape.len();
    let axis = c.axis(c.int("axis", 0)?, rank)?;
    let y = c.add(Op::Concat(Concat { axis }), &parts, Out::Inner("float"))?;
    c.quantize_output(y, 0, 1)
}

/// QGemm: a (0-2), b (3-5, per column or tensor), an int32 bias (6), and the
/// output's scale and zero point (7-8); without them the output is float.
fn qgemm(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let alpha = c.float("alpha", 1.0)?;
    let trans_b = c.bool_attr("transB", false)?;
    let a = c.dequantize(c.input(0)?, INPUT_0, 1, Out::Inner("a"))?;
    let b_grid = Grid::at(4);
    let b = c.dequantize(
        c.input(3)?,
        b_grid,
        if trans_b { 0 } else { 1 },
        Out::Inner("b"),
    )?;
    let mut inputs = vec![a, b];
    if let Some(bias) = c.opt_input(6) {
        // The bias is quantized with the product's scale; a scaled product
        // would leave it ambiguous.
        if alpha != 1.0 {
            return Err(c.err(format!(
                "QGemm with alpha {alpha} and a bias is not supported"
            )));
        }
        inputs.push(c.bias(bias, 1, 4)?);
    }
    let gemm = Op::Gemm(Gemm {
        alpha,
        beta: 1.0,
        trans_a: c.bool_attr("transA", false)?,
        trans_b,
    });
    if c.opt_input(7).is_none() {
        return Ok(vec![Some(c.add(gemm, &inputs, Out::Node)?)]);
    }
    let y = c.add(gemm, &inputs, Out::Inner("gemm"))?;
    c.quantize_output(y, 7, 1)
}

/// DynamicQuantizeLinear: `x` quantized to uint8 on a grid made from its
/// range widened to hold 0: scale `(max - min) / 255`, zero point
/// `saturate(round(-min / scale))`. Outputs y, the scale and the zero point.
fn dynamic_quantize_linear(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let ty = c.ty(x);
    if ty.dtype != DType::F32 {
        return Err(c.err(format!("input is {}, expected f32", ty.dtype.name())));
    }
    let all: Vec<usize> = (0..ty.shape.len()).collect();
    let zero = c.scalar("zero", DType::F32, 0.0);
    let extreme = |c: &mut NodeCtx, kind: ReduceKind, with_zero: BinaryOp, what| {
        let r = Op::Reduce(Reduce {
            kind,
            axes: all.clone(),
            keepdims: false,
        });
        let r = c.emit_inner(r, &[x], what)?;
        c.emit_inner(
            Op::Binary(with_zero),
            &[r, zero],
            &format!("{what}_with_zero"),
        )
    };
    let lo = extreme(c, ReduceKind::Min, BinaryOp::Min, "min")?;
    let hi = extreme(c, ReduceKind::Max, BinaryOp::Max, "max")?;
    let range = c.emit_inner(Op::Binary(BinaryOp::Sub), &[hi, lo], "range")?;
    let levels = c.scalar("levels", DType::F32, 255.0);
    let scale = c.emit_inner(Op::Binary(BinaryOp::Div), &[range, levels], "scale")?;
    let below = c.emit_inner(Op::Unary(UnaryOp::Neg), &[lo], "below_zero")?;
    let zp = c.emit_inner(
        Op::Binary(BinaryOp::Div),
        &[below, scale],
        "zero_point_exact",
    )?;
    let zp = c.emit_inner(Op::Unary(UnaryOp::Round), &[zp], "zero_point_rounded")?;
    let byte = UnaryOp::Clip {
        min: 0.0,
        max: 255.0,
    };
    let zp = c.emit_inner(Op::Unary(byte), &[zp], "zero_point")?;
    let y = c.emit_inner(Op::Binary(BinaryOp::Div), &[x, scale], "scaled")?;
    let y = c.emit_inner(Op::Unary(UnaryOp::Round), &[y], "rounded")?;
    let y = c.emit_inner(Op::Binary(BinaryOp::Add), &[y, zp], "shifted")?;
    let y = c.emit_inner(Op::Unary(byte), &[y], "saturated")?;
    let to_u8 = Op::Cast(Cast {
        to: DType::U8,
        saturate: true,
    });
    let y = c.emit_inner(to_u8.clone(), &[y], "quantized")?;
    let zp = c.emit_inner(to_u8, &[zp], "zero_point_u8")?;
    Ok(vec![Some(y), Some(scale), Some(zp)])
}

/// ConvInteger: the int32 convolution of x (zero point 2) by w (zero point 3,
/// per output channel or tensor), computed on floats that hold the integers.
fn conv_integer(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let (x, w) = (c.input(0)?, c.input(1)?);
    let x_zp = c.zero_point(2, x, 1, DType::F32, Out::Inner("x"))?;
    let x = c.centered(x, x_zp, DType::F32, Out::Inner("x"))?;
    let w_zp = c.zero_point(3, w, 0, DType::F32, Out::Inner("w"))?;
    let w = c.centered(w, w_zp, DType::F32, Out::Inner("w"))?;
    let parts = conv_parts_of(c, x, w, None, false)?;
    let conv = Op::Conv(Conv {
        window: parts.window,
        group: parts.group,
    });
    let y = c.emit_inner(conv, &parts.inputs, "conv")?;
    c.integer_output(y)
}

/// MatMulInteger: the int32 product of a (zero point 2, per row or tensor) and
/// b (zero point 3, per column or tensor), on floats that hold the integers.
fn matmul_integer(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let (a, b) = (c.input(0)?, c.input(1)?);
    let a_zp = c.zero_point(2, a, -2, DType::F32, Out::Inner("a"))?;
    let a = c.centered(a, a_zp, DType::F32, Out::Inner("a"))?;
    let b_zp = c.zero_point(3, b, -1, DType::F32, Out::Inner("b"))?;
    let b = c.centered(b, b_zp, DType::F32, Out::Inner("b"))?;
    let y = c.emit_inner(Op::MatMul, &[a, b], "matmul")?;
    c.integer_output(y)
}

/// The range of quantized integer type `q`; `None` for a float8 type, which
/// rounds as a float; an error for any other type.
fn quantized_range(c: &NodeCtx, q: DType) -> Res<Option<(f64, f64)>> {
    match q.integer_range() {
        Some(range) if QUANTIZED.contains(&q) => Ok(Some(range)),
        _ if crate::core::float8::is_float8(q) => Ok(None),
        _ => Err(c.err(format!(
            "quantization to {} is not supported (8-, 16- and 32-bit and 4-bit integers and float8 are)",
            q.name()
        ))),
    }
}

impl NodeCtx<'_> {
    /// Float `x` quantized with the scale and zero point at `grid` into `q`.
    fn quantize(
        &mut self,
        x: ValueRef,
        grid: Grid,
        axis: i64,
        q: DType,
        out: Out,
    ) -> Res<ValueRef> {
        let float = self.ty(x).dtype;
        if !float.is_float() {
            return Err(self.err(format!(
                "input is {}, expected a float tensor",
                float.name()
            )));
        }
        let range = quantized_range(self, q)?;
        let (scale, zero_point) = self.grid(grid, x, axis, float, out)?;
        let at = |step: &str| format!("{}/{step}", out.label());
        let mut y = self.emit_inner(Op::Binary(BinaryOp::Div), &[x, scale], &at("scaled"))?;
        let Some((lo, hi)) = range else {
            // Float8: the cast rounds (halves to even) and saturates or not.
            if let Some(zp) = zero_point {
                y = self.emit_inner(Op::Binary(BinaryOp::Add), &[y, zp], &at("shifted"))?;
            }
            let saturate = self.bool_attr("saturate", true)?;
            return self.add(Op::Cast(Cast { to: q, saturate }), &[y], out);
        };
        y = self.emit_inner(Op::Unary(UnaryOp::Round), &[y], &at("rounded"))?;
        if let Some(zp) = zero_point {
            y = self.emit_inner(Op::Binary(BinaryOp::Add), &[y, zp], &at("shifted"))?;
        }
        let clip = UnaryOp::Clip {
            min: lo as f32,
            max: hi as f32,
        };
        let y = self.emit_inner(Op::Unary(clip), &[y], &at("saturated"))?;
        let cast = Op::Cast(Cast {
            to: q,
            saturate: true,
        });
        self.add(cast, &[y], out)
    }

    /// The node's output: float `y` quantized with the scale at input `scale`
    /// and the zero point after it, into the zero point's type (uint8 without one).
    fn quantize_output(
        &mut self,
        y: ValueRef,
        scale: usize,
        axis: i64,
    ) -> Res<Vec<Option<ValueRef>>> {
        let grid = Grid::at(scale);
        let q = self
            .opt_input(grid.zero_point)
            .map_or(DType::U8, |zp| self.ty(zp).dtype);
        Ok(vec![Some(self.quantize(y, grid, axis, q, Out::Node)?)])
    }

    /// The node's int32 output: `y`, a sum of products of integers, which a
    /// float holds exactly below 2^24 (above, to float rounding).
    fn integer_output(&mut self, y: ValueRef) -> Res<Vec<Option<ValueRef>>> {
        let cast = Op::Cast(Cast {
            to: DType::I32,
            saturate: true,
        });
        Ok(vec![Some(self.add(cast, &[y], Out::Node)?)])
    }

    /// Quantized `x` as float: `(x - zero_point) * scale`, the parameters at `grid`.
    fn dequantize(&mut self, x: ValueRef, grid: Grid, axis: i64, out: Out) -> Res<ValueRef> {
        let float = self.ty(self.input(grid.scale)?).dtype;
        let (scale, zero_point) = self.grid(grid, x, axis, float, out)?;
        let y = self.centered(x, zero_point, float, out)?;
        self.add(Op::Binary(BinaryOp::Mul), &[y, scale], out)
    }

    /// Quantized `x` minus its zero point (already as `float`), as `float`.
    fn centered(
        &mut self,
        x: ValueRef,
        zero_point: Option<ValueRef>,
        float: DType,
        out: Out,
    ) -> Res<ValueRef> {
        quantized_range(self, self.ty(x).dtype)?;
        let at = |step: &str| format!("{}/{step}", out.label());
        let cast = Op::Cast(Cast {
            to: float,
            saturate: true,
        });
        let y = self.emit_inner(cast, &[x], &at("as_float"))?;
        match zero_point {
            Some(zp) => self.emit_inner(Op::Binary(BinaryOp::Sub), &[y, zp], &at("centered")),
            None => Ok(y),
        }
    }

    /// An int32 bias (zero point 0) as float, its scale the product of the
    /// scales at inputs `a` and `b` (per tensor, or per output channel).
    fn bias(&mut self, bias: ValueRef, a: usize, b: usize) -> Res<ValueRef> {
        let (sa, sb) = (self.input(a)?, self.input(b)?);
        let float = self.ty(sa).dtype;
        let scale = self.emit_inner(Op::Binary(BinaryOp::Mul), &[sa, sb], "bias_scale")?;
        let cast = Op::Cast(Cast {
            to: float,
            saturate: true,
        });
        let b = self.emit_inner(cast, &[bias], "bias_as_float")?;
        self.emit_inner(Op::Binary(BinaryOp::Mul), &[b, scale], "bias")
    }

    /// The scale and the zero point (as `float`) at `grid`, shaped to
    /// broadcast against `x`: one value, or one per index of axis `axis`.
    fn grid(
        &mut self,
        grid: Grid,
        x: ValueRef,
        axis: i64,
        float: DType,
        out: Out,
    ) -> Res<(ValueRef, Option<ValueRef>)> {
        let scale = self.input(grid.scale)?;
        let scale_type = self.ty(scale).dtype;
        if scale_type != float {
            return Err(self.err(format!(
                "scale is {}, expected {}",
                scale_type.name(),
                float.name()
            )));
        }
        if let Some(t) = self.g.constant(scale) {
            if let Some(bad) = t
                .data
                .to_f64()
                .into_iter()
                .find(|s| !(*s > 0.0 && s.is_finite()))
            {
                return Err(self.err(format!("scale {bad} is not a positive finite number")));
            }
        }
        let scale = self.along_axis(scale, x, axis, "scale", out)?;
        let zero_point = self.zero_point(grid.zero_point, x, axis, float, out)?;
        Ok((scale, zero_point))
    }

    /// The zero point at input `at` (if given) as `float`, shaped to broadcast
    /// against `x`; of `x`'s type unless `x` is the float being quantized.
    fn zero_point(
        &mut self,
        at: usize,
        x: ValueRef,
        axis: i64,
        float: DType,
        out: Out,
    ) -> Res<Option<ValueRef>> {
        let Some(zp) = self.opt_input(at) else {
            return Ok(None);
        };
        let (q, zq) = (self.ty(x).dtype, self.ty(zp).dtype);
        if !q.is_float() && zq != q {
            return Err(self.err(format!(
                "zero point is {}, its tensor {}: they must be of one type",
                zq.name(),
                q.name()
            )));
        }
        let cast = Op::Cast(Cast {
            to: float,
            saturate: true,
        });
        let name = format!("{}/zero_point_as_float", out.label());
        let zp = self.emit_inner(cast, &[zp], &name)?;
        Ok(Some(self.along_axis(zp, x, axis, "zero_point", out)?))
    }

    /// Quantization parameter `v` shaped to broadcast against `x`: one value
    /// as it is, one per index of axis `axis`, or with `block_size`, one per
    /// block of that many indices along it.
    fn along_axis(
        &mut self,
        v: ValueRef,
        x: ValueRef,
        axis: i64,
        what: &str,
        out: Out,
    ) -> Res<ValueRef> {
        let (shape, vs) = (self.ty(x).shape, self.ty(v).shape);
        let block = self.int("block_size", 0)?;
        if block != 0 {
            return self.blocked(v, &shape, axis, block, what);
        }
        if numel(&vs) == 1 {
            return Ok(v);
        }
        let axis = self.axis(axis, shape.len())?;
        if vs.len() != 1 || shape[axis] != vs[0] {
            return Err(self.err(format!(
                "{what} of shape {vs:?} for the {} indices of axis {axis}",
                shape[axis]
            )));
        }
        let mut along = vec![1; shape.len()];
        along[axis] = shape[axis];
        let name = format!("{}/{what}", out.label());
        self.emit_inner(Op::Reshape(Reshape { shape: along }), &[v], &name)
    }

    /// Blocked quantization: `v`, of `x_shape` but with axis `axis` cut into
    /// blocks of `block`, repeated over each block's indices (a reshape, an
    /// expand, a reshape and, for a short last block, a slice; folded when
    /// `v` is a constant).
    fn blocked(
        &mut self,
        v: ValueRef,
        x_shape: &[usize],
        axis: i64,
        block: i64,
        what: &str,
    ) -> Res<ValueRef> {
        let axis = self.axis(axis, x_shape.len())?;
        let block = usize::try_from(block)
            .ok()
            .filter(|&b| b > 0)
            .ok_or_else(|| self.err(format!("block_size {block} is not positive")))?;
        let vs = self.ty(v).shape;
        let blocks = x_shape[axis].div_ceil(block);
        let mut want = x_shape.to_vec();
        want[axis] = blocks;
        if vs != want {
            return Err(self.err(format!(
                "blocked {what} has shape {vs:?}, expected {want:?} (blocks of {block} along axis {axis})"
            )));
        }
        self.check_size(self.ty(v).dtype, x_shape)?;
        let layer = self.layer();
        let at = |step: &str| format!("{layer}/{what}_{step}");
        let mut split = want.clone();
        split.insert(axis + 1, 1);
        let v = self.emit_inner(
            Op::Reshape(Reshape {
                shape: split.clone(),
            }),
            &[v],
            &at("split"),
        )?;
        split[axis + 1] = block;
        let v = self.emit_inner(Op::Expand(Expand { shape: split }), &[v], &at("repeated"))?;
        let mut joined = want;
        joined[axis] = blocks * block;
        let v = self.emit_inner(Op::Reshape(Reshape { shape: joined }), &[v], &at("joined"))?;
        if blocks * block == x_shape[axis] {
            return Ok(v);
        }
        let cut = Op::Slice(Slice {
            axes: vec![SliceAxis {
                axis,
                start: 0,
                end: x_shape[axis] as i64,
                step: 1,
            }],
        });
        self.emit_inner(cut, &[v], &at("cut"))
    }
}
