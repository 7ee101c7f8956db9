//! Running TIR schedules: inputs for a compute graph, and checks that the
//! interpreter and the JIT agree with the unscheduled computation.

use std::collections::HashMap;

use layoutopt::codegen::{CodegenStats, JitFunction, KernelTable};
use layoutopt::tir::compute::{ComputeGraph, IterVar, ReduceOp, Tensor};
use layoutopt::tir::expr::Expr;
use layoutopt::tir::interp::{Interpreter, KernelView, RunStats};
use layoutopt::tir::lower::{lower, LowerOptions, LoweredFunc};
use layoutopt::tir::schedule::Schedule;
use layoutopt::tir::{KernelError, TirError};

/// Deterministic pseudo-random inputs for every placeholder of `g`.
pub fn inputs(g: &ComputeGraph) -> HashMap<String, Vec<f64>> {
    let mut seed = 12345u64;
    g.ops
        .iter()
        .filter(|o| o.compute().is_none())
        .map(|o| {
            let n: i64 = o.shape.iter().product();
            let v = (0..n)
                .map(|_| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((seed >> 33) % 1000) as f64 / 100.0 - 5.0
                })
                .collect();
            (o.name.clone(), v)
        })
        .collect()
}

/// Lowers `s`, interprets it and checks every output against the direct evaluation of
/// `g` (the original, unscheduled definitions) to 1e-9 relative tolerance.
pub fn check_with(
    s: &Schedule,
    g: &ComputeGraph,
    outputs: &[Tensor],
    interp: &Interpreter,
) -> RunStats {
    let ins = inputs(g);
    let expected = g.evaluate(&ins).expect("direct evaluation");
    let f = lower(s, &LowerOptions::default()).expect("lowering");
    let (bufs, stats) = interp
        .run(&f, &ins)
        .unwrap_or_else(|e| panic!("{e}\n{}", f.to_text()));
    for o in outputs {
        let name = &g.op(o.id).name;
        let got = &bufs[name];
        let want = &expected[o.id.0];
        assert_eq!(got.len(), want.len());
        for (k, (a, b)) in got.iter().zip(want).enumerate() {
            assert!(
                (a - b).abs() <= 1e-9 * (1.0 + b.abs()),
                "{name}[{k}] = {a}, expected {b}\n{}",
                f.to_text()
            );
        }
    }
    stats
}

/// A new graph whose input is the placeholder `A` of `shape`.
pub fn graph_with_input(shape: &[i64]) -> (ComputeGraph, Tensor) {
    let mut g = ComputeGraph::new();
    let a = g.placeholder("A", shape).unwrap();
    (g, a)
}

/// A schedule primitive that marks one loop: vectorize, parallel or unroll.
pub type Mark = fn(&mut Schedule, &Tensor, &IterVar) -> Result<(), TirError>;

/// `matmul(m, n, k)` in its default schedule with `mark` on the reduction axis.
pub fn matmul_marking_k(m: i64, n: i64, k: i64, mark: Mark) -> (ComputeGraph, Tensor, Schedule) {
    let (g, c) = matmul(m, n, k);
    let mut s = Schedule::new(&g, &[c]).unwrap();
    let rk = s.reduce_axis(&c).unwrap()[0].clone();
    mark(&mut s, &c, &rk).unwrap();
    (g, c, s)
}

/// On the input `A` of `shape`, `B = b(A[x])` and `C = c(A[x], B[x])`
/// elementwise: a producer and its consumer, for the tests that place `B`
/// against `C`'s loops.
pub fn producer_consumer(
    shape: &[i64],
    b: impl FnOnce(Expr) -> Expr,
    c: impl FnOnce(Expr, Expr) -> Expr,
) -> (ComputeGraph, Tensor, Tensor) {
    let (mut g, a) = graph_with_input(shape);
    let producer = g.compute("B", shape, |x| b(a.at(x))).unwrap();
    let consumer = g
        .compute("C", shape, |x| c(a.at(x), producer.at(x)))
        .unwrap();
    (g, producer, consumer)
}

/// An interpreter whose `gemm_update` micro-kernel is [`gemm_update_f64`].
pub fn gemm_interpreter() -> Interpreter {
    Interpreter::new().with_kernel("gemm_update", Box::new(gemm_update_f64))
}

/// `matmul(m, n, k)` with its rows split by `rows` and the inner part of the
/// split tensorized as `gemm_update`.
pub fn tensorized_matmul(m: i64, n: i64, k: i64, rows: i64) -> (ComputeGraph, Tensor, Schedule) {
    let (g, c) = matmul(m, n, k);
    let (mut s, ax) = schedule(&g, &c);
    let (_, ii) = s.split(&c, &ax[0], rows).unwrap();
    s.tensorize(&c, &ii, "gemm_update").unwrap();
    (g, c, s)
}

/// The default schedule of `out` in `g`, and `out`'s axes: where a schedule
/// test starts.
pub fn schedule(g: &ComputeGraph, out: &Tensor) -> (Schedule, Vec<IterVar>) {
    let s = Schedule::new(g, &[*out]).unwrap();
    let axes = s.axis(out).unwrap();
    (s, axes)
}

pub fn check(s: &Schedule, g: &ComputeGraph, outputs: &[Tensor]) -> RunStats {
    check_with(s, g, outputs, &Interpreter::new())
}

/// Lowers `s`, runs it in the interpreter (f64) and as JIT-compiled code (f32) on the
/// same inputs (rounded to f32 for both, in the parameters' layouts), and checks that every element of every
/// parameter buffer agrees to `1e-5 * (1 + m)`, `m` the largest magnitude in that buffer
/// (relative to the buffer's scale: f32 sums that cancel lose digits of their result,
/// not of their terms).
pub fn check_jit(
    s: &Schedule,
    g: &ComputeGraph,
    interp: &Interpreter,
    kernels: &KernelTable,
) -> CodegenStats {
    let f = lower(s, &LowerOptions::default()).expect("lowering");
    check_jit_func(&f, g, interp, kernels)
}

/// [`check_jit`] with a plain interpreter and no micro-kernels.
pub fn check_jit_plain(s: &Schedule, g: &ComputeGraph) -> CodegenStats {
    check_jit(s, g, &Interpreter::new(), &KernelTable::new())
}

pub fn check_jit_func(
    f: &LoweredFunc,
    g: &ComputeGraph,
    interp: &Interpreter,
    kernels: &KernelTable,
) -> CodegenStats {
    // Inputs in each parameter's layout (padding 0), rounded to f32.
    let logical = inputs(g);
    let ins: HashMap<String, Vec<f64>> = f
        .params
        .iter()
        .filter_map(|t| {
            let op = f.graph.op(*t);
            let v = logical.get(&op.name)?;
            let packed = f.layouts[t].pack(&op.shape, v, 0.0);
            Some((
                op.name.clone(),
                packed.iter().map(|x| *x as f32 as f64).collect(),
            ))
        })
        .collect();
    let (want, _) = interp
        .run(f, &ins)
        .unwrap_or_else(|e| panic!("{e}\n{}", f.to_text()));
    let jit = JitFunction::compile(f, kernels).unwrap_or_else(|e| panic!("{e}\n{}", f.to_text()));
    let mut bufs: Vec<Vec<f32>> = jit
        .param_names()
        .iter()
        .zip(jit.param_sizes())
        .map(|(name, n)| match ins.get(name) {
            Some(v) => v.iter().map(|x| *x as f32).collect(),
            None => vec![0.0; *n],
        })
        .collect();
    let mut views: Vec<&mut [f32]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
    jit.call(&mut views)
        .unwrap_or_else(|e| panic!("{e}\n{}", f.to_text()));
    // f32 rounding error grows with the magnitude of the terms summed, not of the
    // result (sums cancel), and carries from stage to stage. The same function
    // run on |inputs| bounds those magnitudes for the sums and products these
    // schedules compute; the tolerance scales with its largest value.
    let abs_ins: HashMap<String, Vec<f64>> = ins
        .iter()
        .map(|(k, v)| (k.clone(), v.iter().map(|x| x.abs()).collect()))
        .collect();
    let (magnitudes, _) = interp
        .run(f, &abs_ins)
        .unwrap_or_else(|e| panic!("{e}\n{}", f.to_text()));
    let scale = want
        .values()
        .chain(magnitudes.values())
        .flatten()
        .fold(1.0f64, |m, x| m.max(1.0 + x.abs()));
    for (name, got) in jit.param_names().iter().zip(&bufs) {
        let want = &want[name];
        assert_eq!(got.len(), want.len());
        for (k, (a, b)) in got.iter().zip(want).enumerate() {
            assert!(
                (*a as f64 - b).abs() <= 1e-5 * scale,
                "{name}[{k}] = {a} (jit), {b} (interpreter)\n{}",
                f.to_text()
            );
        }
    }
    jit.stats().clone()
}

/// `out[i, j] += sum_kk a[i, kk] * b[kk, j]` over the regions it is given: the
/// interpreter's (f64) micro-kernel, and the oracle of the JIT's `gemm_update`.
pub fn gemm_update_f64(views: &mut [KernelView]) -> Result<(), KernelError> {
    let (out, ins) = views.split_at_mut(1);
    let (out, a, b) = (&mut out[0], &ins[0], &ins[1]);
    let (m, n, k) = (out.extents[0], out.extents[1], a.extents[1]);
    if a.extents[0] != m || b.extents != [k, n] {
        return Err(KernelError(format!(
            "regions do not match: {:?} {:?} {:?}",
            out.extents, a.extents, b.extents
        )));
    }
    for i in 0..m {
        for j in 0..n {
            let mut acc = out.get(&[i, j])?;
            for kk in 0..k {
                acc += a.get(&[i, kk])? * b.get(&[kk, j])?;
            }
            out.set(&[i, j], acc)?;
        }
    }
    Ok(())
}

/// C[i, j] = sum_k A[i, k] * B[k, j].
pub fn matmul(m: i64, n: i64, k: i64) -> (ComputeGraph, Tensor) {
    let mut g = ComputeGraph::new();
    let a = g.placeholder("A", &[m, k]).unwrap();
    let b = g.placeholder("B", &[k, n]).unwrap();
    let c = g
        .reduce("C", &[m, n], &[k], ReduceOp::Sum, |x, r| {
            a.at(&[x[0].clone(), r[0].clone()]) * b.at(&[r[0].clone(), x[1].clone()])
        })
        .unwrap();
    (g, c)
}
