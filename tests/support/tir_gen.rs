//! The random schedules of the property tests: chains of elementwise and reduction
//! stages, scheduled by choices proptest draws.

use layoutopt::tir::compute::{ComputeGraph, ReduceOp, Tensor};
use layoutopt::tir::expr::Expr;
use layoutopt::tir::schedule::Schedule;
use proptest::prelude::*;

/// Draws small numbers from a list of choices made by proptest.
pub struct Choices(pub Vec<u32>, pub usize);

impl Choices {
    pub fn pick(&mut self, n: usize) -> usize {
        let v = self.0[self.1 % self.0.len()];
        self.1 += 1;
        v as usize % n.max(1)
    }
}

/// A chain A -> T1 -> ... -> Tn of 2-d stages: elementwise (possibly reading a shifted,
/// clamped neighbour) or a sum over the row of the previous stage.
pub fn pipeline(h: i64, w: i64, kinds: &[u8]) -> (ComputeGraph, Vec<Tensor>) {
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

pub fn random_schedule(g: &ComputeGraph, stages: &[Tensor], c: &mut Choices) -> Schedule {
    let out = *stages.last().unwrap();
    let mut s = Schedule::new(g, &[out]).unwrap();
    // The chain of stages, producers first; each one's consumer is the next that is not
    // inlined. cache_read of A for the first stage and cache_write of reductions add
    // stages to it.
    let mut chain = Vec::new();
    if c.pick(3) == 0 {
        let a = g.find("A").unwrap();
        chain.push(s.cache_read(&a, &stages[..1]).unwrap());
    }
    for t in stages {
        if !s.reduce_axis(t).unwrap().is_empty() && c.pick(3) == 0 {
            chain.push(s.cache_write(t).unwrap());
        }
        chain.push(*t);
    }
    // Loop transformations first: compute_at targets must stay leaves afterwards.
    for t in &chain {
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
        // Loop kinds do not change the result.
        let leaves = s.leaves(t).unwrap();
        let l = leaves[c.pick(leaves.len())].clone();
        match c.pick(4) {
            0 => s.vectorize(t, &l).unwrap(),
            1 => s.parallel(t, &l).unwrap(),
            2 => s.unroll(t, &l).unwrap(),
            _ => {}
        }
        // Vectorizing the innermost loop is the case code generation turns into SIMD.
        if c.pick(2) == 0 {
            s.vectorize(t, leaves.last().unwrap()).unwrap();
        }
    }
    // Placement, from the output backwards, so a producer knows whether its consumer is
    // inlined (then it is attached to the next consumer downstream).
    let mut inlined = vec![false; chain.len()];
    for i in (0..chain.len() - 1).rev() {
        let t = &chain[i];
        let is_reduce = !s.reduce_axis(t).unwrap().is_empty();
        match c.pick(3) {
            0 if !is_reduce => {
                s.compute_inline(t).unwrap();
                inlined[i] = true;
            }
            1 => {
                let consumer = (i + 1..chain.len()).find(|k| !inlined[*k]).unwrap();
                let leaves = s.leaves(&chain[consumer]).unwrap();
                let l = leaves[c.pick(leaves.len())].clone();
                s.compute_at(t, &chain[consumer], &l).unwrap();
            }
            _ => {}
        }
    }
    s
}

/// A random pipeline of `kinds` stages on an `h` x `w` input, its stages,
/// and a random schedule of it drawn from `choices`.
pub fn random_pipeline(
    h: i64,
    w: i64,
    kinds: &[u8],
    choices: Vec<u32>,
) -> (ComputeGraph, Vec<Tensor>, Schedule) {
    let (g, stages) = pipeline(h, w, kinds);
    let s = random_schedule(&g, &stages, &mut Choices(choices, 0));
    (g, stages, s)
}

/// Arguments of `random_pipeline` for proptest: an input of 2 to 6 rows and 2
/// to `max_w - 1` columns, 1 to 3 stages, 64 schedule choices.
pub fn pipeline_args(max_w: i64) -> impl Strategy<Value = (i64, i64, Vec<u8>, Vec<u32>)> {
    (
        2i64..7,
        2i64..max_w,
        prop::collection::vec(0u8..3, 1..4),
        prop::collection::vec(any::<u32>(), 64),
    )
}
