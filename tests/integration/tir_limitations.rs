//! The three limitations the InferBound document names, and the behaviour here: (a) tight
//! split tails, (b) GatherBound's overcompute reported, (c) exact PassUpDomain after a
//! fuse then a split.

use crate::support::tir;
use layoutopt::tir::bound::Overcompute;
use layoutopt::tir::compute::{ComputeGraph, IterVar, Tensor};
use layoutopt::tir::expr::Expr;
use layoutopt::tir::lower::{lower, schedule_ops, LowerOptions};
use layoutopt::tir::schedule::Schedule;

/// B (64x64, from its indices) computed at the loop `outer` picks from C = `c_of_b`(B)
/// with C's two axes fused: the document's setting for (c).
fn b_at_fused_c(
    b_def: impl FnOnce(&[Expr]) -> Expr,
    c_of_b: impl FnOnce(Expr) -> Expr,
    outer: impl FnOnce(&mut Schedule, &Tensor, &IterVar) -> IterVar,
) -> (ComputeGraph, Tensor, Schedule) {
    let mut g = ComputeGraph::new();
    let b = g.compute("B", &[64, 64], b_def).unwrap();
    let c = g.compute("C", &[64, 64], |x| c_of_b(b.at(x))).unwrap();
    let (mut s, ax) = tir::schedule(&g, &c);
    let f = s.fuse(&c, &ax[0], &ax[1]).unwrap();
    let o = outer(&mut s, &c, &f);
    s.compute_at(&b, &c, &o).unwrap();
    (g, c, s)
}

#[test]
fn c_fuse_then_split_realizes_eight_elements_of_b_not_4096() {
    // The document's example: B = i + j (64x64), C = B, fuse C's axes, split nparts=512,
    // B computed at the outer loop.
    let (g, c, s) = b_at_fused_c(
        |x| x[0].clone() + x[1].clone(),
        |b| b,
        |s, c, f| s.split_nparts(c, f, 512).unwrap().0,
    );
    let ops = schedule_ops(&s).unwrap();
    let text = ops.to_text();
    // One row (floordiv(o, 8)) and eight columns (floormod(o, 8) * 8 ...) per outer step.
    assert!(
        text.contains(
            "realize B([floordiv(i.j.fused.outer, 8), 1], [(floormod(i.j.fused.outer, 8) * 8), 8])"
        ),
        "{text}"
    );
    let stats = tir::check(&s, &g, &[c]);
    assert_eq!(stats.max_alloc["B"], 8);
    // Every element of B is computed exactly once.
    assert_eq!(stats.stores["B"], 4096);
    assert_eq!(stats.loop_extents["i.j.fused.outer"], vec![512]);
}

#[test]
fn c_fuse_then_split_by_whole_rows_is_exact_too() {
    // A split of 128 (two rows of 64) after the fuse: two whole rows per outer step.
    let (g, c, s) = b_at_fused_c(
        |x| x[0].clone() * Expr::Int(64) + x[1].clone(),
        |b| b + Expr::Int(1),
        |s, c, f| s.split(c, f, 128).unwrap().0,
    );
    let stats = tir::check(&s, &g, &[c]);
    assert_eq!(stats.max_alloc["B"], 128);
    assert_eq!(stats.stores["B"], 4096);
}

#[test]
fn a_split_tail_runs_four_iterations_not_sixteen() {
    let (mut g, a) = tir::graph_with_input(&[20]);
    let p = g.compute("P", &[20], |x| a.at(x) * Expr::Int(3)).unwrap();
    let d = g.compute("D", &[20], |x| p.at(x) + Expr::Int(1)).unwrap();
    let (mut s, ax) = tir::schedule(&g, &d);
    let (o, _i) = s.split(&d, &ax[0], 16).unwrap();
    s.compute_at(&p, &d, &o).unwrap();
    let stats = tir::check(&s, &g, &[d]);
    // The inner loop of D runs 16 then 4 times; P is realized and computed for exactly
    // the 16 and then 4 elements D needs.
    assert_eq!(stats.loop_extents["i.inner"], vec![16, 4]);
    assert_eq!(stats.stores["P"], 20);
    assert_eq!(stats.max_alloc["P"], 16);
    // Loop partitioning: a branch-free main body and a separate tail, no min() left.
    let f = lower(&s, &LowerOptions::default()).unwrap();
    let text = f.to_text();
    assert!(!text.contains("if (") && !text.contains("min("), "{text}");
    assert!(text.contains("for (i.outer, 0, 1)"), "{text}");
    assert!(text.contains("allocate P[4]"), "{text}");
    // The main part records the fact its simplification used.
    assert!(
        text.contains("assume(") && text.contains("(16 <= (20 - (i.outer * 16)))"),
        "{text}"
    );
}

#[test]
fn a_without_partitioning_the_tail_extent_is_a_min() {
    let (mut g, a) = tir::graph_with_input(&[20]);
    let d = g.compute("D", &[20], |x| a.at(x) * Expr::Int(2)).unwrap();
    let (mut s, ax) = tir::schedule(&g, &d);
    s.split(&d, &ax[0], 16).unwrap();
    let ops = schedule_ops(&s).unwrap();
    let text = ops.to_text();
    assert!(
        text.contains("for (i.inner, 0, min(16, (20 - (i.outer * 16))))"),
        "{text}"
    );
    assert!(!text.contains("if ("), "{text}");
    let opts = LowerOptions {
        partition_loops: false,
        ..Default::default()
    };
    let f = lower(&s, &opts).unwrap();
    let (_, stats) = layoutopt::tir::interp::Interpreter::new()
        .run(&f, &tir::inputs(&g))
        .unwrap();
    assert_eq!(stats.loop_extents["i.inner"], vec![16, 4]);
}

#[test]
fn b_gather_bound_overcompute_is_reported() {
    // T is 4x4; consumer P needs T[0:2, 0:2], consumer Q needs T[2:4, 2:4].
    let (mut g, a) = tir::graph_with_input(&[4, 4]);
    let t = g.compute("T", &[4, 4], |x| a.at(x) * Expr::Int(2)).unwrap();
    let p = g.compute("P", &[2, 2], |x| t.at(x)).unwrap();
    let q = g
        .compute("Q", &[2, 2], |x| {
            t.at(&[x[0].clone() + 2, x[1].clone() + 2])
        })
        .unwrap();
    let s = Schedule::new(&g, &[p, q]).unwrap();
    let ops = schedule_ops(&s).unwrap();
    assert_eq!(
        ops.bounds.overcompute,
        vec![Overcompute {
            tensor: "T".into(),
            realized: 16,
            needed: 8
        }]
    );
    tir::check(&s, &g, &[p, q]);
}

#[test]
fn c_unaligned_split_after_fuse_falls_back_to_whole_rows() {
    // 48 neither divides nor is a multiple of the row length 64: each outer step needs
    // parts of at most two rows, realized at full width.
    let (g, c, s) = b_at_fused_c(
        |x| x[0].clone() - x[1].clone(),
        |b| b * Expr::Int(2),
        |s, c, f| s.split(c, f, 48).unwrap().0,
    );
    let stats = tir::check(&s, &g, &[c]);
    assert_eq!(stats.max_alloc["B"], 128);
}
