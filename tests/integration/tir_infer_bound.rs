//! The examples of the InferBound document (seeds 000/001/003), one test each: the
//! ranges and realize bounds the document gives, and the lowered loop nest, run by the
//! interpreter, against a direct evaluation of the compute definitions.

use crate::support::tir;
use layoutopt::tir::compute::{ComputeGraph, IterVar, Tensor};
use layoutopt::tir::expr::Expr;
use layoutopt::tir::lower::{lower, schedule_ops, LowerOptions, ScheduledOps};
use layoutopt::tir::schedule::Schedule;

/// C = compute((5, 16), 5); D = compute((5, 16), C[i, j] * 2).
fn c_d() -> (ComputeGraph, Tensor, Tensor) {
    let mut g = ComputeGraph::new();
    let (c, d) = add_c_d(&mut g, ["i", "j"]);
    (g, c, d)
}

/// Adds C = 5 and D = C * 2 (D's axes named `d_axes`), both 5 x 16, to `g`.
fn add_c_d(g: &mut ComputeGraph, d_axes: [&str; 2]) -> (Tensor, Tensor) {
    let c = g
        .compute_named("C", &[("i", 5), ("j", 16)], |_| Expr::Int(5))
        .unwrap();
    let d = g
        .compute_named("D", &[(d_axes[0], 5), (d_axes[1], 16)], |x| {
            c.at(&[x[0].clone(), x[1].clone()]) * Expr::Int(2)
        })
        .unwrap();
    (c, d)
}

/// [`c_d`] with C computed at D's axis `axis`, and the operations scheduled.
fn c_at_d_axis(axis: usize) -> (ComputeGraph, Tensor, Tensor, Schedule, ScheduledOps) {
    let (g, c, d) = c_d();
    let (mut s, dax) = tir::schedule(&g, &d);
    s.compute_at(&c, &d, &dax[axis]).unwrap();
    let ops = schedule_ops(&s).unwrap();
    (g, c, d, s, ops)
}

/// The ranges InferBound gave the axes of `t`, as text.
fn ranges(ops: &ScheduledOps, s: &Schedule, t: &Tensor) -> Vec<String> {
    let axes = s.axis(t).unwrap();
    axes.iter()
        .map(|iv| ops.bounds.range(iv).unwrap().to_string())
        .collect()
}

fn names(v: &[IterVar]) -> Vec<String> {
    v.iter().map(|iv| iv.name().to_string()).collect()
}

#[test]
fn ex1_no_compute_at_needs_all_of_c() {
    let (g, c, d) = c_d();
    let s = Schedule::new(&g, &[d]).unwrap();
    let ops = schedule_ops(&s).unwrap();
    assert_eq!(ranges(&ops, &s, &c), ["[0, 5]", "[0, 16]"]);
    let text = ops.to_text();
    assert!(text.starts_with("realize C([0, 5], [0, 16]) {\n  for (i, 0, 5) {\n    for (j, 0, 16) {\n      C(i, j) = 5\n"), "{text}");
    assert!(text.contains("D(i, j) = (C(i, j) * 2)"), "{text}");
    tir::check(&s, &g, &[d]);
}

#[test]
fn ex2_compute_at_j_needs_one_element() {
    let (g, c, d, s, ops) = c_at_d_axis(1);
    assert_eq!(ranges(&ops, &s, &c), ["[i, 1]", "[j, 1]"]);
    assert_eq!(names(&ops.bounds.attach_path[&c.id]), ["j", "i"]);
    // The document: one element of C computed right before its use.
    let f = lower(&s, &LowerOptions::default()).unwrap();
    let want = "\
for (i, 0, 5) {
  for (j, 0, 16) {
    allocate C[1]
    C[0] = 5
    D[((i * 16) + j)] = (C[0] * 2)
  }
}
";
    assert_eq!(f.to_text(), want);
    let stats = tir::check(&s, &g, &[d]);
    assert_eq!(stats.max_alloc["C"], 1);
    assert_eq!(stats.stores["C"], 80);
}

#[test]
fn ex3_compute_at_i_needs_a_row() {
    let (g, c, d, s, ops) = c_at_d_axis(0);
    assert_eq!(ranges(&ops, &s, &c), ["[i, 1]", "[0, 16]"]);
    assert_eq!(names(&ops.bounds.attach_path[&c.id]), ["i"]);
    let text = ops.to_text();
    // The document: for i { for j { C }; for j { D } } (C's own loops are rebased; the
    // first `i` below is C's rebased axis, the second D's).
    let want = "\
for (i, 0, 5) {
  realize C([i, 1], [0, 16]) {
    for (i, 0, 1) {
      for (j, 0, 16) {
        C((i + i), j) = 5
      }
    }
    for (j, 0, 16) {
      D(i, j) = (C(i, j) * 2)
    }
  }
}
";
    assert_eq!(text, want);
    let stats = tir::check(&s, &g, &[d]);
    assert_eq!(stats.max_alloc["C"], 16);
}

#[test]
fn ex4_attach_path_includes_unused_outer_loop() {
    let mut g = ComputeGraph::new();
    let c = g
        .compute_named("C", &[("i", 5), ("j", 16)], |_| Expr::Int(5))
        .unwrap();
    let d = g
        .compute_named("D", &[("di", 4), ("dj", 5), ("dk", 16)], |x| {
            c.at(&[x[1].clone(), x[2].clone()]) * Expr::Int(2)
        })
        .unwrap();
    let (mut s, dax) = tir::schedule(&g, &d);
    s.compute_at(&c, &d, &dax[2]).unwrap();
    let ops = schedule_ops(&s).unwrap();
    assert_eq!(names(&ops.bounds.attach_path[&c.id]), ["dk", "dj", "di"]);
    // The document's IR after ScheduleOps.
    let want = "\
for (di, 0, 4) {
  for (dj, 0, 5) {
    for (dk, 0, 16) {
      realize C([dj, 1], [dk, 1]) {
        for (i, 0, 1) {
          for (j, 0, 1) {
            C((i + dj), (j + dk)) = 5
          }
        }
        D(di, dj, dk) = (C(dj, dk) * 2)
      }
    }
  }
}
";
    assert_eq!(ops.to_text(), want);
    tir::check(&s, &g, &[d]);
}

#[test]
fn ex5_compute_at_after_split() {
    let (g, c, d) = c_d();
    let (mut s, dax) = tir::schedule(&g, &d);
    let (_jo, ji) = s.split(&d, &dax[1], 8).unwrap();
    s.compute_at(&c, &d, &ji).unwrap();
    let ops = schedule_ops(&s).unwrap();
    assert_eq!(
        names(&ops.bounds.attach_path[&c.id]),
        ["j.inner", "j.outer", "i"]
    );
    assert_eq!(
        ranges(&ops, &s, &c),
        ["[i, 1]", "[((j.outer * 8) + j.inner), 1]"]
    );
    let text = ops.to_text();
    assert!(
        text.contains("realize C([i, 1], [((j.outer * 8) + j.inner), 1])"),
        "{text}"
    );
    // The document: C[i, j_outer*8 + j_inner] and D[...] inside the j_inner loop.
    let f = lower(&s, &LowerOptions::default()).unwrap();
    let want = "\
for (i, 0, 5) {
  for (j.outer, 0, 2) {
    for (j.inner, 0, 8) {
      allocate C[1]
      C[0] = 5
      D[(((i * 16) + (j.outer * 8)) + j.inner)] = (C[0] * 2)
    }
  }
}
";
    assert_eq!(f.to_text(), want);
    let stats = tir::check(&s, &g, &[d]);
    assert_eq!(stats.loop_extents["j.outer"], vec![2; 5]);
    assert_eq!(stats.max_alloc["C"], 1);
}

/// C = 5; D = C * 2; E = D * 4 (the document's chain).
fn c_d_e() -> (ComputeGraph, Tensor, Tensor, Tensor) {
    let mut g = ComputeGraph::new();
    let (c, d) = add_c_d(&mut g, ["di", "dj"]);
    let e = g
        .compute_named("E", &[("ei", 5), ("ej", 16)], |x| {
            d.at(&[x[0].clone(), x[1].clone()]) * Expr::Int(4)
        })
        .unwrap();
    (g, c, d, e)
}

#[test]
fn chain_c_at_d_at_e_attach_paths() {
    let (g, c, d, e) = c_d_e();
    let mut s = Schedule::new(&g, &[e]).unwrap();
    let (dax, eax) = (s.axis(&d).unwrap(), s.axis(&e).unwrap());
    s.compute_at(&c, &d, &dax[1]).unwrap();
    s.compute_at(&d, &e, &eax[1]).unwrap();
    let ops = schedule_ops(&s).unwrap();
    assert_eq!(
        names(&ops.bounds.attach_path[&c.id]),
        ["dj", "di", "ej", "ei"]
    );
    assert_eq!(names(&ops.bounds.attach_path[&d.id]), ["ej", "ei"]);
    let (cax, b) = (s.axis(&c).unwrap(), &ops.bounds);
    assert_eq!(b.range(&dax[0]).unwrap().to_string(), "[ei, 1]");
    assert_eq!(b.range(&dax[1]).unwrap().to_string(), "[ej, 1]");
    assert_eq!(b.range(&cax[0]).unwrap().to_string(), "[ei, 1]");
    assert_eq!(b.range(&cax[1]).unwrap().to_string(), "[ej, 1]");
    // The document's loop nest: C[i + ei, j + ej], D[di + ei, dj + ej], E[ei, ej].
    let text = ops.to_text();
    assert!(text.contains("C((i + ei), (j + ej)) = 5"), "{text}");
    assert!(
        text.contains("D((di + ei), (dj + ej)) = (C((di + ei), (dj + ej)) * 2)"),
        "{text}"
    );
    assert!(text.contains("E(ei, ej) = (D(ei, ej) * 4)"), "{text}");
    let stats = tir::check(&s, &g, &[e]);
    assert_eq!((stats.max_alloc["C"], stats.max_alloc["D"]), (1, 1));
}

#[test]
fn relax_set_when_consumer_is_attached_but_producer_is_not() {
    let (g, c, d, e) = c_d_e();
    let (mut s, eax) = tir::schedule(&g, &e);
    s.compute_at(&d, &e, &eax[1]).unwrap();
    let ops = schedule_ops(&s).unwrap();
    // D's attach path {ej, ei} is relaxed when bounding C: all of C is needed.
    assert_eq!(names(&ops.bounds.attach_path[&d.id]), ["ej", "ei"]);
    assert_eq!(ranges(&ops, &s, &c), ["[0, 5]", "[0, 16]"]);
    let text = ops.to_text();
    assert!(text.starts_with("realize C([0, 5], [0, 16]) {\n  for (i, 0, 5) {\n    for (j, 0, 16) {\n      C(i, j) = 5"), "{text}");
    assert!(text.contains("realize D([ei, 1], [ej, 1])"), "{text}");
    let stats = tir::check(&s, &g, &[e]);
    assert_eq!((stats.max_alloc["C"], stats.max_alloc["D"]), (80, 1));
}
