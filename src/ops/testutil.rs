//! Helpers for the reference executor's unit tests.

use super::eval_op;
use crate::core::{Tensor, TensorData, ValueType};
use crate::ops::{infer_outputs, Conv, Op, OpError, Pool, PoolKind, Window};

/// An f32 tensor.
pub fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::from_f32(shape.to_vec(), v.to_vec())
}

/// An i64 tensor.
pub fn i64s(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_i64(shape.to_vec(), v.to_vec())
}

/// The f32 tensor with elements 0, 1, 2, ...
pub fn iota(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    f32s(shape, &(0..n).map(|i| i as f32).collect::<Vec<_>>())
}

/// Evaluates `op` with its inferred output types; panics on error (tests only).
pub fn eval(op: Op, inputs: &[&Tensor]) -> Vec<Tensor> {
    try_eval(op, inputs).unwrap_or_else(|e| panic!("{e}"))
}

pub fn eval1(op: Op, inputs: &[&Tensor]) -> Tensor {
    eval(op, inputs).remove(0)
}

pub fn try_eval(op: Op, inputs: &[&Tensor]) -> Result<Vec<Tensor>, OpError> {
    let types: Vec<ValueType> = inputs
        .iter()
        .map(|t| ValueType::new(t.dtype(), t.shape.clone()))
        .collect();
    let refs: Vec<&ValueType> = types.iter().collect();
    let outs = infer_outputs(&op, &refs)?;
    eval_op(&op, inputs, &outs)
}

/// Asserts shape and every element within `tol` (absolute) of `want`.
#[track_caller]
pub fn assert_close(got: &Tensor, shape: &[usize], want: &[f64], tol: f64) {
    assert_eq!(got.shape, shape, "shape");
    let g = got.data.to_f64();
    assert_eq!(g.len(), want.len(), "element count");
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        let ok = (a - b).abs() <= tol || (a.is_nan() && b.is_nan()) || a == b;
        assert!(
            ok,
            "element {i}: got {a}, want {b} (tol {tol})\n got: {g:?}"
        );
    }
}

/// Asserts an exact i64 result.
#[track_caller]
pub fn assert_i64(got: &Tensor, shape: &[usize], want: &[i64]) {
    assert_eq!(got.shape, shape, "shape");
    assert_eq!(*got.data, TensorData::I64(want.to_vec()));
}

/// A square 2-D window, undilated, with the same padding on every side.
pub fn square_window(kernel: usize, stride: usize, pad: usize) -> Window {
    Window {
        kernel: vec![kernel; 2],
        strides: vec![stride; 2],
        dilations: vec![1, 1],
        pads: vec![pad; 4],
    }
}

/// A 2x2, stride-2 pool without padding.
pub fn pool_2x2(kind: PoolKind) -> Op {
    Op::Pool(Pool {
        kind,
        window: square_window(2, 2, 0),
        ceil_mode: false,
        count_include_pad: false,
    })
}

/// A 3x3 convolution keeping the spatial size (stride 1, padding 1).
pub fn conv_3x3() -> Op {
    Op::Conv(Conv {
        window: square_window(3, 1, 1),
        group: 1,
    })
}
