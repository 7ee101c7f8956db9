//! Every elementwise function is defined once (`core::scalar`) and reaches the
//! machine through four paths: the reference executor (f64), pad-value flow (f32),
//! the TIR interpreter (f64) and the Cranelift-compiled TIR (f32). This test runs
//! every unary and binary op through all four on NaN, ±inf, ±0, subnormals and
//! ordinary values, and checks that they agree: the same NaN positions, the same
//! infinities, and finite values within a stated tolerance (1e-5 relative, for the
//! compiled code's approximations of exp, tanh and erf).

use layoutopt::codegen::{JitFunction, KernelTable};
use layoutopt::core::{PadValue, Tensor, ValueType};
use layoutopt::lowering::{lower_op, LoweredOp};
use layoutopt::ops::{binary_flow, eval_op, infer_outputs, unary_flow, BinaryOp, Op, UnaryOp};
use layoutopt::tir::interp::Interpreter;
use std::collections::HashMap;

const SUBNORMAL: f32 = f32::MIN_POSITIVE / 4.0;

const VALUES: [f32; 14] = [
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    0.0,
    -0.0,
    SUBNORMAL,
    -SUBNORMAL,
    1.0,
    -1.0,
    0.5,
    -2.5,
    3.0,
    7.25,
    -7.25,
];

/// Whether `got` agrees with `want`: both NaN, the same infinity, or close.
fn agree(want: f64, got: f64) -> bool {
    if want.is_nan() || got.is_nan() {
        return want.is_nan() && got.is_nan();
    }
    if want.is_infinite() || got.is_infinite() {
        return want == got;
    }
    (want - got).abs() <= 1e-5 * (1.0 + want.abs())
}

/// The op's output through the TIR interpreter and through compiled code.
fn tir_paths(op: &Op, inputs: &[&Tensor]) -> (Vec<f64>, Vec<f32>) {
    let types: Vec<ValueType> = inputs
        .iter()
        .map(|t| ValueType::new(t.dtype(), t.shape.clone()))
        .collect();
    let LoweredOp {
        func,
        inputs: params_of,
        output,
    } = lower_op(op, &types, None).unwrap_or_else(|e| panic!("{op:?}: {e}"));
    let name = |p: usize| func.graph.op(func.params[p]).name.clone();
    let mut given: HashMap<String, Vec<f64>> = HashMap::new();
    for (k, p) in params_of.iter().enumerate() {
        if let Some(p) = p {
            given.insert(name(*p), inputs[k].data.to_f64());
        }
    }
    let (bufs, _) = Interpreter::new()
        .run(&func, &given)
        .unwrap_or_else(|e| panic!("{op:?}: {e}"));
    // The interpreter computes in f64; the tensor holds f32, as the reference's.
    let interpreted = bufs[&name(output)]
        .iter()
        .map(|&v| v as f32 as f64)
        .collect();
    let jit = JitFunction::compile(&func, &KernelTable::standard())
        .unwrap_or_else(|e| panic!("{op:?}: {e}"));
    let mut buffers: Vec<Vec<f32>> = jit
        .param_names()
        .iter()
        .zip(jit.param_sizes())
        .map(|(n, &size)| match given.get(n) {
            Some(v) => v.iter().map(|&x| x as f32).collect(),
            None => vec![0.0; size],
        })
        .collect();
    let out_at = jit
        .param_names()
        .iter()
        .position(|n| *n == name(output))
        .expect("the output is a parameter");
    let mut views: Vec<&mut [f32]> = buffers.iter_mut().map(|b| b.as_mut_slice()).collect();
    jit.call(&mut views).unwrap();
    (interpreted, buffers.swap_remove(out_at))
}

/// The reference executor's output (computed in f64, rounded to f32).
fn reference(op: &Op, inputs: &[&Tensor]) -> Vec<f64> {
    let types: Vec<ValueType> = inputs
        .iter()
        .map(|t| ValueType::new(t.dtype(), t.shape.clone()))
        .collect();
    let refs: Vec<&ValueType> = types.iter().collect();
    let out = infer_outputs(op, &refs).unwrap();
    eval_op(op, inputs, &out).unwrap().remove(0).data.to_f64()
}

fn check_all(what: &str, inputs: &[Vec<f32>], want: &[f64], interp: &[f64], jit: &[f32]) {
    for i in 0..want.len() {
        let args: Vec<f32> = inputs.iter().map(|v| v[i]).collect();
        assert!(
            agree(want[i], interp[i]),
            "{what}{args:?}: reference {} but TIR interpreter {}",
            want[i],
            interp[i]
        );
        assert!(
            agree(want[i], jit[i] as f64),
            "{what}{args:?}: reference {} but compiled code {}",
            want[i],
            jit[i]
        );
    }
}

#[test]
fn every_unary_op_agrees_on_every_path() {
    let x = Tensor::from_f32(vec![VALUES.len()], VALUES.to_vec());
    for u in UnaryOp::EVERY {
        let op = Op::Unary(u);
        let want = reference(&op, &[&x]);
        let (interp, jit) = tir_paths(&op, &[&x]);
        check_all(u.name(), &[VALUES.to_vec()], &want, &interp, &jit);
        // Pad-value flow may decline to promise a value; what it promises holds.
        for (v, w) in VALUES.iter().zip(&want) {
            if let Some(p) = unary_flow(u, PadValue::Known(*v)).known() {
                assert!(
                    agree(*w, p as f64),
                    "{u:?}({v}): pad flow {p}, reference {w}"
                );
            }
        }
    }
}

#[test]
fn every_binary_op_agrees_on_every_path() {
    let n = VALUES.len();
    let a: Vec<f32> = (0..n * n).map(|i| VALUES[i / n]).collect();
    let b: Vec<f32> = (0..n * n).map(|i| VALUES[i % n]).collect();
    let (ta, tb) = (
        Tensor::from_f32(vec![n * n], a.clone()),
        Tensor::from_f32(vec![n * n], b.clone()),
    );
    for op_kind in BinaryOp::ARITHMETIC {
        let op = Op::Binary(op_kind);
        let want = reference(&op, &[&ta, &tb]);
        let (interp, jit) = tir_paths(&op, &[&ta, &tb]);
        check_all(
            op_kind.name(),
            &[a.clone(), b.clone()],
            &want,
            &interp,
            &jit,
        );
        for i in 0..n * n {
            let flow = binary_flow(op_kind, PadValue::Known(a[i]), PadValue::Known(b[i]));
            if let Some(p) = flow.known() {
                assert!(
                    agree(want[i], p as f64),
                    "{op_kind:?}({}, {}): pad flow {p}, reference {}",
                    a[i],
                    b[i],
                    want[i]
                );
            }
        }
    }
}
