//! Shared helpers of the tir integration tests.
#![allow(dead_code)]

use std::collections::HashMap;

use layoutopt::tir::compute::{ComputeGraph, Tensor};
use layoutopt::tir::interp::{Interpreter, RunStats};
use layoutopt::tir::lower::{lower, LowerOptions};
use layoutopt::tir::schedule::Schedule;

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

pub fn check(s: &Schedule, g: &ComputeGraph, outputs: &[Tensor]) -> RunStats {
    check_with(s, g, outputs, &Interpreter::new())
}
