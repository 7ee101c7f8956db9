//! Property: random schedules (split, fuse, reorder, compute_at, inline, plus cache_read,
//! cache_write and loop kinds) of random elementwise and reduction pipelines lower to
//! loop nests whose interpreted result equals the direct evaluation of the unscheduled
//! definitions.

use crate::support::tir;
use crate::support::tir_gen::{pipeline, pipeline_args, random_pipeline};
use layoutopt::tir::schedule::Schedule;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn random_schedules_match_the_unscheduled_result((h, w, kinds, choices) in pipeline_args(8)) {
        let (g, stages, s) = random_pipeline(h, w, &kinds, choices);
        tir::check(&s, &g, &[*stages.last().unwrap()]);
    }
}

/// A schedule found by random search whose nested split tails once made the prover's
/// min/max distribution exponential (lowering never finished).
#[test]
fn nested_tails_under_compute_at_lower_quickly() {
    let (g, st) = pipeline(3, 7, &[0, 1, 1]);
    let (t0, t1, t2) = (st[0], st[1], st[2]);
    let mut s = Schedule::new(&g, &[t2]).unwrap();
    let a = g.find("A").unwrap();
    let ac = s.cache_read(&a, &[t0]).unwrap();
    let ax = s.axis(&t0).unwrap();
    let (io, _) = s.split(&t0, &ax[0], 5).unwrap();
    s.split(&t0, &io, 5).unwrap();
    let ax = s.axis(&t1).unwrap();
    s.reorder(&t1, &[ax[1].clone(), ax[0].clone()]).unwrap();
    let f = s.fuse(&t1, &ax[1], &ax[0]).unwrap();
    let (_, t1_in) = s.split(&t1, &f, 2).unwrap();
    let ax = s.axis(&t2).unwrap();
    let (jo, ji) = s.split_nparts(&t2, &ax[1], 3).unwrap();
    let (joo, joi) = s.split_nparts(&t2, &jo, 3).unwrap();
    s.reorder(&t2, &[ax[0].clone(), ji, joi, joo.clone()])
        .unwrap();
    let cax = s.axis(&ac).unwrap();
    let (co, ci) = s.split_nparts(&ac, &cax[1], 3).unwrap();
    s.fuse(&ac, &co, &ci).unwrap();
    s.compute_inline(&t0).unwrap();
    s.compute_at(&t1, &t2, &joo).unwrap();
    s.compute_at(&ac, &t1, &t1_in).unwrap();
    tir::check(&s, &g, &[t2]);
}
