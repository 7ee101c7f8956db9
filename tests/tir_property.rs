//! Property: random schedules (split, fuse, reorder, compute_at, inline) of random
//! elementwise and reduction pipelines lower to loop nests whose interpreted result
//! equals the direct evaluation of the unscheduled definitions.

mod tir_util;

use layoutopt::tir::compute::{ComputeGraph, ReduceOp, Tensor};
use layoutopt::tir::expr::Expr;
use layoutopt::tir::schedule::Schedule;
use proptest::prelude::*;

/// Draws small numbers from a list of choices made by proptest.
struct Choices(Vec<u32>, usize);

impl Choices {
    fn pick(&mut self, n: usize) -> usize {
        let v = self.0[self.1 % self.0.len()];
        self.1 += 1;
        v as usize % n.max(1)
    }
}

/// A chain A -> T1 -> ... -> Tn of 2-d stages: elementwise (possibly reading a shifted,
/// clamped neighbour) or a sum over the row of the previous stage.
fn pipeline(h: i64, w: i64, kinds: &[u8]) -> (ComputeGraph, Vec<Tensor>) {
    let mut g = ComputeGraph::new();
    let a = g.placeholder("A", &[h, w]).unwrap();
    let mut prev = a;
    let mut stages = vec![];
    for (n, k) in kinds.iter().enumerate() {
        let name = format!("T{n}");
        let t = match k % 3 {
            0 => g
                .compute(&name, &[h, w], |x| prev.at(x) * Expr::Float(0.5) + a.at(x))
                .unwrap(),
            1 => g
                .compute(&name, &[h, w], |x| {
                    // A clamped right neighbour: consumers need a shifted window.
                    let j1 = (x[1].clone() + 1).min(w - 1);
                    prev.at(x) + prev.at(&[x[0].clone(), j1])
                })
                .unwrap(),
            _ => g
                .reduce(&name, &[h, w], &[w], ReduceOp::Sum, |x, r| {
                    prev.at(&[x[0].clone(), r[0].clone()]) * a.at(x)
                })
                .unwrap(),
        };
        stages.push(t);
        prev = t;
    }
    (g, stages)
}

fn random_schedule(g: &ComputeGraph, stages: &[Tensor], c: &mut Choices) -> Schedule {
    let out = *stages.last().unwrap();
    let mut s = Schedule::new(g, &[out]).unwrap();
    // Loop transformations first: compute_at targets must stay leaves afterwards.
    for t in stages {
        for _ in 0..c.pick(4) {
            let leaves = s.leaves(t).unwrap();
            let l = leaves[c.pick(leaves.len())].clone();
            match c.pick(4) {
                0 => {
                    s.split(t, &l, 2 + c.pick(4) as i64).unwrap();
                }
                1 => {
                    s.split_nparts(t, &l, 2 + c.pick(3) as i64).unwrap();
                }
                2 => {
                    let p = leaves.iter().position(|x| *x == l).unwrap();
                    if p + 1 < leaves.len() && leaves[p].kind == leaves[p + 1].kind {
                        s.fuse(t, &leaves[p], &leaves[p + 1]).unwrap();
                    }
                }
                _ => {
                    let mut order = leaves.clone();
                    for i in (1..order.len()).rev() {
                        order.swap(i, c.pick(i + 1));
                    }
                    s.reorder(t, &order).unwrap();
                }
            }
        }
    }
    // Placement, from the output backwards, so a producer knows whether its consumer is
    // inlined (then it is attached to the next consumer downstream).
    let mut inlined = vec![false; stages.len()];
    for i in (0..stages.len() - 1).rev() {
        let t = &stages[i];
        let is_reduce = !s.reduce_axis(t).unwrap().is_empty();
        match c.pick(3) {
            0 if !is_reduce => {
                s.compute_inline(t).unwrap();
                inlined[i] = true;
            }
            1 => {
                // The first consumer downstream that is not inlined.
                let consumer = (i + 1..stages.len()).find(|k| !inlined[*k]).unwrap();
                let leaves = s.leaves(&stages[consumer]).unwrap();
                let l = leaves[c.pick(leaves.len())].clone();
                s.compute_at(t, &stages[consumer], &l).unwrap();
            }
            _ => {}
        }
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn random_schedules_match_the_unscheduled_result(
        h in 2i64..7,
        w in 2i64..8,
        kinds in prop::collection::vec(0u8..3, 1..4),
        choices in prop::collection::vec(any::<u32>(), 48),
    ) {
        let (g, stages) = pipeline(h, w, &kinds);
        let s = random_schedule(&g, &stages, &mut Choices(choices, 0));
        tir_util::check(&s, &g, &[*stages.last().unwrap()]);
    }
}
