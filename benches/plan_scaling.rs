//! Planning time and peak memory on synthetic graphs of 1k, 10k and 100k nodes:
//! chains, residual DAGs, branchy concat graphs and convs around LRNs (which
//! stay row-major: a plan that blocks the convs transforms around every LRN,
//! so the rewrite region covers most of the graph), planned by `global` for
//! NCHW16c with the bundled rewrite rules, and the part of it the e-graph
//! rewriting took. Run with `cargo bench --bench plan_scaling` (add `-- --quick`
//! to skip the 100k graphs; `-- residual 100000` runs only the graph kinds and
//! sizes named). Prints one table, one sample per graph; the goals
//! are 10k nodes planned in under 1 s and rewritten in under 1 s, both growing
//! linearly.

use layoutopt::graph::{
    BinaryOp, Conv, DType, Graph, Op, Tensor, UnaryOp, ValueRef, ValueType, Window,
};
use layoutopt::layout::cost::CostModel;
use layoutopt::layout::plan::{plan_with, PlanOptions};
use layoutopt::layout::planners::{Global, Planner};
use layoutopt::layout::rules::RuleSource;
use layoutopt::layout::solver::SolveOptions;
use layoutopt::layout::space::PlanSpace;
use layoutopt::layout::target::TargetFamily;
use layoutopt::ops::{Concat, Lrn};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Counts live and peak heap bytes.
struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const C: usize = 16;

struct Builder {
    g: Graph,
    weight: ValueRef,
    bias: ValueRef,
    n: usize,
}

impl Builder {
    fn new(name: &str) -> (Builder, ValueRef) {
        let mut g = Graph::new(name);
        let x = g.add_input("x", ValueType::new(DType::F32, vec![1, C, 8, 8]), vec![]);
        // One shared weight keeps the graph small in memory; layouts do not care.
        let weight = g.add_constant(
            "w",
            Tensor::from_f32(vec![C, C, 1, 1], vec![0.01; C * C]),
            vec![],
        );
        let bias = g.add_constant("b", Tensor::from_f32(vec![C], vec![0.0; C]), vec![]);
        (
            Builder {
                g,
                weight,
                bias,
                n: 0,
            },
            x,
        )
    }

    fn add(&mut self, op: Op, inputs: &[ValueRef]) -> ValueRef {
        self.n += 1;
        let name = format!("n{}", self.n);
        let id = self
            .g
            .add_node(op, &name, inputs, std::slice::from_ref(&name), vec![])
            .unwrap();
        ValueRef::new(id, 0)
    }

    fn conv(&mut self, x: ValueRef) -> ValueRef {
        let window = Window {
            kernel: vec![1, 1],
            strides: vec![1, 1],
            dilations: vec![1, 1],
            pads: vec![0; 4],
        };
        let (w, b) = (self.weight, self.bias);
        self.add(Op::Conv(Conv { window, group: 1 }), &[x, w, b])
    }

    fn relu(&mut self, x: ValueRef) -> ValueRef {
        self.add(Op::Unary(UnaryOp::Relu), &[x])
    }
}

fn chain(nodes: usize) -> Graph {
    let (mut b, mut x) = Builder::new("chain");
    while b.n + 2 <= nodes {
        x = b.conv(x);
        x = b.relu(x);
    }
    b.g.set_outputs(vec![x]);
    b.g
}

fn residual(nodes: usize) -> Graph {
    let (mut b, mut x) = Builder::new("residual");
    while b.n + 5 <= nodes {
        let y = b.conv(x);
        let y = b.relu(y);
        let y = b.conv(y);
        let s = b.add(Op::Binary(BinaryOp::Add), &[x, y]);
        x = b.relu(s);
    }
    b.g.set_outputs(vec![x]);
    b.g
}

fn branchy(nodes: usize) -> Graph {
    let (mut b, mut x) = Builder::new("branchy");
    let w2 = b.g.add_constant(
        "w2",
        Tensor::from_f32(vec![C, 2 * C, 1, 1], vec![0.01; 2 * C * C]),
        vec![],
    );
    while b.n + 5 <= nodes {
        let l = b.conv(x);
        let r = b.conv(x);
        let r = b.relu(r);
        let cat = b.add(Op::Concat(Concat { axis: 1 }), &[l, r]);
        // Back to C channels so the graph does not grow.
        let window = Window {
            kernel: vec![1, 1],
            strides: vec![1, 1],
            dilations: vec![1, 1],
            pads: vec![0; 4],
        };
        let (w, bias) = (w2, b.bias);
        x = b.add(Op::Conv(Conv { window, group: 1 }), &[cat, w, bias]);
    }
    b.g.set_outputs(vec![x]);
    b.g
}

/// Convs around LRNs, which the planner keeps row-major: a plan that blocks
/// the convs has a transform on each side of every LRN.
fn lrn(nodes: usize) -> Graph {
    let (mut b, mut x) = Builder::new("lrn");
    while b.n + 3 <= nodes {
        x = b.conv(x);
        x = b.relu(x);
        let op = Op::Lrn(Lrn {
            alpha: 1e-4,
            beta: 0.75,
            bias: 1.0,
            size: 5,
        });
        x = b.add(op, &[x]);
    }
    b.g.set_outputs(vec![x]);
    b.g
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let named_sizes: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let sizes: Vec<usize> = if !named_sizes.is_empty() {
        named_sizes
    } else if args.iter().any(|a| a == "--quick") {
        vec![1_000, 10_000]
    } else {
        vec![1_000, 10_000, 100_000]
    };
    let named_kinds: Vec<&String> = args
        .iter()
        .filter(|a| ["chain", "residual", "branchy", "lrn"].contains(&a.as_str()))
        .collect();
    println!(
        "{:<10} {:>8} {:>12} {:>14} {:>14} {:>12} {:>10} {:>12}",
        "graph",
        "nodes",
        "plan (ms)",
        "rewrite (ms)",
        "peak mem (MB)",
        "transforms",
        "gap",
        "regions"
    );
    let options = PlanOptions {
        rules: Some(RuleSource::Bundled),
        ..PlanOptions::default()
    };
    let planner = Global {
        options: SolveOptions::default(),
    };
    for &n in &sizes {
        for (kind, build) in [
            ("chain", chain as fn(usize) -> Graph),
            ("residual", residual),
            ("branchy", branchy),
            ("lrn", lrn),
        ] {
            if !named_kinds.is_empty() && !named_kinds.iter().any(|k| *k == kind) {
                continue;
            }
            let g = build(n);
            let base = LIVE.load(Ordering::Relaxed);
            PEAK.store(base, Ordering::Relaxed);
            let t0 = Instant::now();
            if std::env::var("PLAN_STAGES").is_ok() {
                let t = Instant::now();
                let space =
                    PlanSpace::build(&g, TargetFamily::Nchwc(16), &CostModel::default()).unwrap();
                let t_build = t.elapsed();
                let t = Instant::now();
                planner.assign(&g, &space).unwrap();
                eprintln!("  {kind} {n}: build {:?} solve {:?}", t_build, t.elapsed());
            }
            let p = plan_with(
                &g,
                &planner,
                TargetFamily::Nchwc(16),
                &CostModel::default(),
                &options,
            )
            .unwrap();
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            let peak = (PEAK.load(Ordering::Relaxed) - base) as f64 / 1e6;
            let s = p.report.solver.as_ref().unwrap();
            let rewrite = p.report.rewrite.as_ref().unwrap();
            assert!(!rewrite.skipped, "rewriting skipped: {:?}", rewrite.note);
            println!(
                "{:<10} {:>8} {:>12.1} {:>14.1} {:>14.1} {:>12} {:>9.3}% {:>12}",
                kind,
                g.node_count(),
                ms,
                p.report.timings.rewrite_ms,
                peak,
                p.report.transform_count,
                s.gap * 100.0,
                format!("{:?}", s.methods)
            );
        }
    }
}
