//! The remaining schedule primitives: the schedule record, loop kinds, tensorize,
//! cache_read/cache_write, storage flattening under a blocked layout, and the errors a
//! user can provoke.

use crate::support::tir;
use std::collections::HashMap;

use layoutopt::layout::Layout;
use layoutopt::lowering::buffer_layout;
use layoutopt::tir::compute::{ComputeGraph, ReduceOp, Tensor};
use layoutopt::tir::expr::Expr;
use layoutopt::tir::interp::{Interpreter, RunStats};
use layoutopt::tir::layout::{BufferLayout, PhysDim};
use layoutopt::tir::lower::{lower, LowerOptions};
use layoutopt::tir::schedule::Schedule;
use layoutopt::tir::TirError;

#[test]
fn schedule_record_has_a_snapshot_per_primitive() {
    // The TVM Explorer RFC's example: tile, split k, reorder, vectorize, parallel.
    let (g, c) = tir::matmul(16, 16, 8);
    let mut s = Schedule::new(&g, &[c]).unwrap();
    assert_eq!(s.record.len(), 1);
    let ax = s.axis(&c).unwrap();
    let k = s.reduce_axis(&c).unwrap()[0].clone();
    let [mo, no, mi, ni] = s.tile(&c, &ax[0], &ax[1], 4, 4).unwrap();
    let (ko, ki) = s.split(&c, &k, 2).unwrap();
    s.reorder(&c, &[mo.clone(), ko, no, mi, ki, ni.clone()])
        .unwrap();
    s.vectorize(&c, &ni).unwrap();
    s.parallel(&c, &mo).unwrap();
    let prims: Vec<&str> = s
        .record
        .iter()
        .map(|r| r.primitive.split('(').next().unwrap())
        .collect();
    assert_eq!(
        prims,
        [
            "create_schedule",
            "split",
            "split",
            "reorder",
            "split",
            "reorder",
            "vectorize",
            "parallel"
        ]
    );
    assert_eq!(s.record[1].primitive, "split(C, i, factor=4)");
    // Each snapshot is the schedule after its step.
    let leaves = |k: usize| {
        s.record[k].state.stages[0]
            .leaf_iter_vars
            .iter()
            .map(|v| v.name().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(leaves(1), ["i.outer", "i.inner", "j", "rk"]);
    assert_eq!(
        leaves(3),
        ["i.outer", "j.outer", "i.inner", "j.inner", "rk"]
    );
    assert_eq!(
        leaves(7),
        ["i.outer", "rk.outer", "j.outer", "i.inner", "rk.inner", "j.inner"]
    );
    assert!(s.record[7].state.to_string().contains("i.outer parallel"));
    let text = lower(&s, &LowerOptions::default()).unwrap().to_text();
    assert!(text.contains("parallel for (i.outer, 0, 4)"), "{text}");
    assert!(text.contains("vectorized for (j.inner, 0, 4)"), "{text}");
    tir::check(&s, &g, &[c]);
}

#[test]
fn unroll_marks_the_loop_and_keeps_the_result() {
    let (g, c, s) = tir::matmul_marking_k(6, 5, 3, Schedule::unroll);
    let text = lower(&s, &LowerOptions::default()).unwrap().to_text();
    assert!(text.contains("unrolled for (rk, 0, 3)"), "{text}");
    tir::check(&s, &g, &[c]);
}

/// A 3-wide window over a row padded by one on each side (a pooling window's
/// select and clamp) lowers with the loop over the row peeled: the first and last
/// iterations keep the conditions, the interior has none. The result is the
/// direct evaluation's, and the JIT's.
#[test]
fn peeling_frees_the_interior_of_padding_conditions() {
    let (mut g, a) = tir::graph_with_input(&[4, 20]);
    let c = g
        .reduce("C", &[4, 20], &[3], ReduceOp::Sum, |i, r| {
            let col = i[1].clone() + r[0].clone() - 1;
            let inside = col.clone().ge(0).and(col.clone().lt(20));
            let clamped = col.max(0).min(19);
            Expr::select(inside, a.at(&[i[0].clone(), clamped]), Expr::Float(0.0))
        })
        .unwrap();
    let s = Schedule::new(&g, &[c]).unwrap();
    let f = lower(&s, &LowerOptions::default()).unwrap();
    let text = f.to_text();
    let interior = text
        .split("for (j, 1, 18)")
        .nth(1)
        .and_then(|t| t.split("for (j, 19, 1)").next())
        .unwrap_or_else(|| panic!("no interior loop over j in\n{text}"));
    assert!(text.contains("for (j, 0, 1)"), "{text}");
    assert!(
        !interior.contains("select") && !interior.contains("max("),
        "{text}"
    );
    tir::check(&s, &g, &[c]);
    tir::check_jit_plain(&s, &g);
}

/// Two inputs side by side (a concatenation along rows: a select on the row and
/// clamped reads of both) lower as one loop over each input's rows, with no select
/// or clamp left, the outer loop parallel as it was. The result is the direct
/// evaluation's, and the JIT's.
#[test]
fn segments_of_a_concatenation_read_one_input_each() {
    let (mut g, a) = tir::graph_with_input(&[3, 8]);
    let b = g.placeholder("B", &[5, 8]).unwrap();
    let c = g
        .compute("C", &[8, 8], |i| {
            let (row, col) = (i[0].clone(), i[1].clone());
            let from_a = a.at(&[row.clone().min(2), col.clone()]);
            let from_b = b.at(&[(row.clone() - 3).max(0), col]);
            Expr::select(row.lt(3), from_a, from_b)
        })
        .unwrap();
    let mut s = Schedule::new(&g, &[c]).unwrap();
    let rows = s.axis(&c).unwrap()[0].clone();
    s.parallel(&c, &rows).unwrap();
    let text = lower(&s, &LowerOptions::default()).unwrap().to_text();
    assert!(text.contains("parallel for (i, 0, 3)"), "{text}");
    assert!(text.contains("parallel for (i, 3, 5)"), "{text}");
    assert!(
        !text.contains("select") && !text.contains("min(") && !text.contains("max("),
        "{text}"
    );
    tir::check(&s, &g, &[c]);
    tir::check_jit_plain(&s, &g);
}

/// Lowers `s` and asserts that its text holds `call`, then checks `s` with
/// the gemm micro-kernel and returns what the run did.
fn check_gemm_call(s: &Schedule, g: &ComputeGraph, c: Tensor, call: &str) -> RunStats {
    let text = lower(s, &LowerOptions::default()).unwrap().to_text();
    assert!(text.contains(call), "{text}");
    tir::check_with(s, g, &[c], &tir::gemm_interpreter())
}

#[test]
fn tensorize_replaces_the_inner_block_by_a_kernel_call() {
    let (g, c) = tir::matmul(8, 8, 6);
    let (mut s, ax) = tir::schedule(&g, &c);
    let k = s.reduce_axis(&c).unwrap()[0].clone();
    let [io, jo, ii, ji] = s.tile(&c, &ax[0], &ax[1], 4, 4).unwrap();
    s.reorder(&c, &[io, jo, k, ii.clone(), ji]).unwrap();
    s.tensorize(&c, &ii, "gemm_update").unwrap();
    // A rank-1 update of a 4x4 block per step of k; the init stays a loop nest.
    let call = "call gemm_update(C([(i.outer * 4), 4], [(j.outer * 4), 4]), A([(i.outer * 4), 4], [rk, 1]), B([rk, 1], [(j.outer * 4), 4]))";
    let stats = check_gemm_call(&s, &g, c, call);
    assert_eq!(stats.kernel_calls["gemm_update"], 2 * 2 * 6);
    assert_eq!(
        stats.stores["C"], 64,
        "only the init stores; the kernel does the rest"
    );
}

#[test]
fn tensorize_above_the_reduction_includes_its_init() {
    let (g, c) = tir::matmul(8, 8, 6);
    let (mut s, ax) = tir::schedule(&g, &c);
    let [_, _, ii, _] = s.tile(&c, &ax[0], &ax[1], 4, 4).unwrap();
    s.tensorize(&c, &ii, "gemm_update").unwrap();
    let interp = tir::gemm_interpreter();
    let stats = tir::check_with(&s, &g, &[c], &interp);
    assert_eq!(stats.kernel_calls["gemm_update"], 4);
}

#[test]
fn tensorize_of_a_ragged_block_gets_a_smaller_tail_region() {
    // 6 rows split by 4: with tight tails the last call covers the remaining 2 rows.
    let (g, c, s) = tir::tensorized_matmul(6, 8, 4, 4);
    let stats = check_gemm_call(
        &s,
        &g,
        c,
        "call gemm_update(C([4, 2], [0, 8]), A([4, 2], [0, 4]), B([0, 4], [0, 8]))",
    );
    assert_eq!(stats.kernel_calls["gemm_update"], 2);
}

#[test]
fn tensorize_of_a_region_that_may_overshoot_is_refused() {
    // The inner part of the split is outside the outer one, so no tight tail: the block
    // under `i.outer` would reach past row 5.
    let (g, c) = tir::matmul(6, 8, 4);
    let (mut s, ax) = tir::schedule(&g, &c);
    let (io, ii) = s.split(&c, &ax[0], 4).unwrap();
    s.reorder(&c, &[ii, io.clone()]).unwrap();
    s.tensorize(&c, &io, "gemm_update").unwrap();
    let err = lower(&s, &LowerOptions::default()).unwrap_err();
    assert!(
        matches!(&err, TirError::Lower(m) if m.contains("out of bounds")),
        "{err}"
    );
}

#[test]
fn cache_read_computed_at_a_row() {
    let (mut g, a) = tir::graph_with_input(&[8, 8]);
    let d = g
        .compute("D", &[8, 8], |x| {
            let j1 = (x[1].clone() + 1).min(7);
            a.at(x) * Expr::Float(2.0) + a.at(&[x[0].clone(), j1])
        })
        .unwrap();
    let mut s = Schedule::new(&g, &[d]).unwrap();
    let aa = s.cache_read(&a, &[d]).unwrap();
    let dax = s.axis(&d).unwrap();
    s.compute_at(&aa, &d, &dax[0]).unwrap();
    assert_eq!(
        s.record.last().unwrap().primitive,
        "compute_at(A.cache, D, i)"
    );
    let stats = tir::check(&s, &g, &[d]);
    assert_eq!(stats.max_alloc["A.cache"], 8);
    assert_eq!(stats.stores["A.cache"], 64);
}

#[test]
fn cache_write_of_a_reduction_accumulates_in_a_local_row() {
    let (g, c) = tir::matmul(6, 8, 5);
    let mut s = Schedule::new(&g, &[c]).unwrap();
    let cl = s.cache_write(&c).unwrap();
    let k = s.reduce_axis(&cl).unwrap()[0].clone();
    s.split(&cl, &k, 2).unwrap();
    let cax = s.axis(&c).unwrap();
    s.compute_at(&cl, &c, &cax[0]).unwrap();
    let stats = tir::check(&s, &g, &[c]);
    assert_eq!(stats.max_alloc["C.local"], 8);
    assert_eq!(stats.stores["C"], 48);
}

#[test]
fn compute_root_undoes_compute_at() {
    let (g, b, c) = tir::producer_consumer(&[4, 4], |a| a + Expr::Int(1), |_, b| b * Expr::Int(3));
    let (mut s, cax) = tir::schedule(&g, &c);
    s.compute_at(&b, &c, &cax[1]).unwrap();
    s.compute_root(&b).unwrap();
    let stats = tir::check(&s, &g, &[c]);
    assert_eq!(stats.max_alloc["B"], 16);
}

#[test]
fn blocked_layout_nchw16c_for_input_and_output() {
    let shape = [1, 20, 2, 3];
    let (mut g, a) = tir::graph_with_input(&shape);
    let d = g
        .compute("D", &shape, |x| a.at(x) * Expr::Int(2) + Expr::Int(1))
        .unwrap();
    let s = Schedule::new(&g, &[d]).unwrap();
    // The planner's NCHW16c as the TIR sees it (the bridge of `lowering`).
    let nchw16c = buffer_layout(&Layout::parse("NCHW16c").unwrap()).unwrap();
    let opts = LowerOptions {
        layouts: [
            ("A".to_string(), nchw16c.clone()),
            ("D".to_string(), nchw16c.clone()),
        ]
        .into_iter()
        .collect(),
        ..Default::default()
    };
    let f = lower(&s, &opts).unwrap();
    let text = f.to_text();
    // Physical [1, 2, 2, 3, 16]: channel c lives in block floordiv(c, 16), lane floormod(c, 16).
    assert!(
        text.contains("floordiv(j, 16)") && text.contains("floormod(j, 16)"),
        "{text}"
    );
    let logical = tir::inputs(&g);
    let packed: HashMap<String, Vec<f64>> =
        [("A".to_string(), nchw16c.pack(&shape, &logical["A"], 0.0))]
            .into_iter()
            .collect();
    let (out, _) = Interpreter::new().run(&f, &packed).unwrap();
    assert_eq!(out["D"].len(), 192);
    let got = nchw16c.unpack(&shape, &out["D"]);
    let want = g.evaluate(&logical).unwrap();
    assert_eq!(got, want[d.id.0]);
}

#[test]
fn user_errors_are_reported_not_panics() {
    let (mut g, a) = tir::graph_with_input(&[4, 4]);
    let b = g.compute("B", &[4, 4], |x| a.at(x) + Expr::Int(1)).unwrap();
    let c = g.compute("C", &[4, 4], |x| b.at(x) * Expr::Int(3)).unwrap();
    let e = g.compute("E", &[4, 4], |x| c.at(x) * Expr::Int(2)).unwrap();
    let mut s = Schedule::new(&g, &[e]).unwrap();
    let (bax, eax) = (s.axis(&b).unwrap(), s.axis(&e).unwrap());
    // B is read by C only: computing it inside E's loop cannot serve C.
    s.compute_at(&b, &e, &eax[0]).unwrap();
    let err = lower(&s, &LowerOptions::default()).unwrap_err();
    assert!(
        err.to_string().contains("cannot find the producer `B`"),
        "{err}"
    );
    // Not a leaf of that stage.
    assert!(
        matches!(s.split(&c, &bax[0], 2), Err(TirError::Schedule(m)) if m.contains("not a leaf"))
    );
    assert!(matches!(
        s.split(&c, &s.axis(&c).unwrap()[0], 0),
        Err(TirError::Schedule(_))
    ));
    let cax = s.axis(&c).unwrap();
    assert!(
        matches!(s.fuse(&c, &cax[1], &cax[0]), Err(TirError::Schedule(m)) if m.contains("immediately"))
    );
    assert!(matches!(s.compute_inline(&e), Err(TirError::Schedule(m)) if m.contains("output")));
    assert!(
        s.compute_at(&a, &e, &eax[0]).is_err(),
        "a placeholder has no stage"
    );
    let (mg, mc) = tir::matmul(4, 4, 4);
    let mut ms = Schedule::new(&mg, &[mc]).unwrap();
    assert!(matches!(ms.compute_inline(&mc), Err(TirError::Schedule(_))));
    let bad = LowerOptions {
        layouts: [(
            "A".to_string(),
            BufferLayout {
                dims: vec![PhysDim::Axis(0)],
            },
        )]
        .into_iter()
        .collect(),
        ..Default::default()
    };
    assert!(matches!(lower(&ms, &bad), Err(TirError::Lower(m)) if m.contains("`A`")));
    let f = lower(&ms, &LowerOptions::default()).unwrap();
    assert!(
        matches!(Interpreter::new().run(&f, &HashMap::new()), Err(TirError::Eval(m)) if m.contains("`A`"))
    );
    assert!(
        matches!(g.compute("B", &[2], |_| Expr::Int(0)), Err(TirError::Definition(m)) if m.contains("twice"))
    );
    assert!(matches!(
        g.compute("Z", &[0], |_| Expr::Int(0)),
        Err(TirError::Definition(_))
    ));
}

#[test]
fn layout_of_an_intermediate_applies_to_its_realized_region() {
    // B (20 channels) is realized whole and stored blocked by 16: 2 blocks of 16 lanes.
    let (g, _, c) = tir::producer_consumer(&[3, 20], |a| a + Expr::Int(1), |_, b| b * Expr::Int(2));
    let s = Schedule::new(&g, &[c]).unwrap();
    let blocked = BufferLayout {
        dims: vec![
            PhysDim::Outer(1, 16),
            PhysDim::Axis(0),
            PhysDim::Inner(1, 16),
        ],
    };
    let opts = LowerOptions {
        layouts: [("B".to_string(), blocked)].into_iter().collect(),
        ..Default::default()
    };
    let f = lower(&s, &opts).unwrap();
    let ins = tir::inputs(&g);
    let (out, stats) = Interpreter::new().run(&f, &ins).unwrap();
    assert_eq!(stats.max_alloc["B"], 2 * 3 * 16);
    assert_eq!(out["C"], g.evaluate(&ins).unwrap()[c.id.0]);
    let unknown = LowerOptions {
        layouts: [("Z".to_string(), BufferLayout::row_major(1))]
            .into_iter()
            .collect(),
        ..Default::default()
    };
    assert!(matches!(lower(&s, &unknown), Err(TirError::Lower(m)) if m.contains("`Z`")));
}

#[test]
fn conv2d_relu_with_producers_at_inner_loops() {
    // R = relu(conv(P, W)), P a copy of the input computed per output row block, the
    // convolution accumulated per (row block, column block) with its channel reduction
    // split, and a non-divisible column split (10 = 4 + 4 + 2).
    let mut g = ComputeGraph::new();
    let inp = g.placeholder("In", &[1, 4, 12, 12]).unwrap();
    let w = g.placeholder("W", &[4, 4, 3, 3]).unwrap();
    let p = g
        .compute("P", &[1, 4, 12, 12], |x| inp.at(x) * Expr::Float(1.5))
        .unwrap();
    let o = g
        .reduce("O", &[1, 4, 10, 10], &[4, 3, 3], ReduceOp::Sum, |x, r| {
            let (y, xx) = (x[2].clone() + r[1].clone(), x[3].clone() + r[2].clone());
            p.at(&[x[0].clone(), r[0].clone(), y, xx])
                * w.at(&[x[1].clone(), r[0].clone(), r[1].clone(), r[2].clone()])
        })
        .unwrap();
    let r = g
        .compute("R", &[1, 4, 10, 10], |x| o.at(x).max(Expr::Float(0.0)))
        .unwrap();
    let (mut s, ax) = tir::schedule(&g, &r);
    let (yo, yi) = s.split(&r, &ax[2], 5).unwrap();
    let (xo, xi) = s.split(&r, &ax[3], 4).unwrap();
    s.reorder(&r, &[ax[1].clone(), yo.clone(), xo.clone(), yi, xi.clone()])
        .unwrap();
    s.vectorize(&r, &xi).unwrap();
    s.compute_at(&o, &r, &xo).unwrap();
    let rk = s.reduce_axis(&o).unwrap();
    let oax = s.axis(&o).unwrap();
    let (co, ci) = s.split(&o, &rk[0], 2).unwrap();
    s.reorder(
        &o,
        &[
            co,
            rk[1].clone(),
            rk[2].clone(),
            ci,
            oax[2].clone(),
            oax[3].clone(),
        ],
    )
    .unwrap();
    s.compute_at(&p, &r, &yo).unwrap();
    let stats = tir::check(&s, &g, &[r]);
    // P: 4 channels x (5 + 2) rows x 12 columns per row block: the column blocks 4, 4
    // and the tail of 2, plus the 2 of the kernel window, exactly. It sits inside the
    // output-channel loop, so each of the 4 output channels recomputes it.
    assert_eq!(stats.max_alloc["P"], 4 * 7 * 12);
    assert_eq!(stats.stores["P"], 4 * 2 * (4 * 7 * 12));
    // O: the 5x4 block, then the 5x2 tail.
    assert_eq!(stats.max_alloc["O"], 20);
    assert_eq!(
        stats.loop_extents["l.inner"]
            .iter()
            .filter(|e| **e == 2)
            .count(),
        2 * 4 * 5
    );
}
