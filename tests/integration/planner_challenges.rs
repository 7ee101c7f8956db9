//! Graphs on which local and greedy layout planning are known to go wrong (the
//! "Buffer Layout Padding" RFC discussion for TVM), each with the optimum number of data-
//! moving transforms derived by hand under the default cost model, checked against
//! the `global` planner. Every plan is also run by the reference executor against
//! the unplanned graph.
//!
//! Cost model facts the derivations use (src/layout/cost.rs, CostModel::default):
//! a transform costs 0.1 ns per byte read or written; a convolution costs 0.02 ns
//! per flop, times 2.0 in row-major NCHW (sqrt(2) for depthwise), 1.15 in NHWC,
//! 1.0 blocked, times the padding waste of its input and output channels; a first
//! layer with at most 4 input channels reads any layout at no penalty.

use crate::support::compare::assert_rewrite_keeps_outputs;
use layoutopt::graph::{
    Conv, DType, Graph, Op, Pool, PoolKind, Tensor, UnaryOp, ValueRef, ValueType, Window,
};
use layoutopt::layout::cost::CostModel;
use layoutopt::layout::plan::plan;
use layoutopt::layout::planners::planner_by_name;
use layoutopt::layout::report::PlanReport;
use layoutopt::layout::target::TargetFamily;
use layoutopt::ops::{Concat, Reshape, Softmax, Transpose};
use std::ops::RangeBounds;

fn input(g: &mut Graph, shape: &[usize]) -> ValueRef {
    g.add_input("x", ValueType::new(DType::F32, shape.to_vec()), vec![])
}

/// Deterministic weights in [-0.5, 0.5).
fn weights(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let v = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) as f64 / (1u64 << 31) as f64 - 0.5) as f32
        })
        .collect();
    Tensor::from_f32(shape.to_vec(), v)
}

fn conv(g: &mut Graph, x: ValueRef, cout: usize, k: usize, group: usize, name: &str) -> ValueRef {
    let cin = g.value_type(x).shape[1];
    let w = g.add_constant(
        &format!("{name}.w"),
        weights(&[cout, cin / group, k, k], name.len() as u64),
        vec![],
    );
    let b = g.add_constant(
        &format!("{name}.b"),
        weights(&[cout], 7 + name.len() as u64),
        vec![],
    );
    let window = Window {
        kernel: vec![k, k],
        strides: vec![1, 1],
        dilations: vec![1, 1],
        pads: vec![k / 2; 4],
    };
    let id = g
        .add_node(
            Op::Conv(Conv { window, group }),
            name,
            &[x, w, b],
            &[name.to_string()],
            vec![],
        )
        .unwrap();
    ValueRef::new(id, 0)
}

fn op(g: &mut Graph, op: Op, inputs: &[ValueRef], name: &str) -> ValueRef {
    let id = g
        .add_node(op, name, inputs, &[name.to_string()], vec![])
        .unwrap();
    ValueRef::new(id, 0)
}

fn transpose(g: &mut Graph, x: ValueRef, perm: &[usize], name: &str) -> ValueRef {
    let perm = perm.to_vec();
    op(g, Op::Transpose(Transpose { perm }), &[x], name)
}

fn reshape(g: &mut Graph, x: ValueRef, shape: &[usize], name: &str) -> ValueRef {
    let shape = shape.to_vec();
    op(g, Op::Reshape(Reshape { shape }), &[x], name)
}

fn relu(g: &mut Graph, x: ValueRef, name: &str) -> ValueRef {
    op(g, Op::Unary(UnaryOp::Relu), &[x], name)
}

/// Plans with `planner` and checks the planned graph against the source graph.
fn plan_checked(g: &Graph, planner: &str, family: TargetFamily) -> PlanReport {
    let p = plan(
        g,
        planner_by_name(planner).unwrap().as_ref(),
        family,
        &CostModel::default(),
    )
    .unwrap();
    let inputs: Vec<Tensor> = g
        .inputs()
        .iter()
        .enumerate()
        .map(|(i, &id)| weights(&g.node(id).outputs[0].ty.shape, 100 + i as u64))
        .collect();
    assert_rewrite_keeps_outputs(g, &p.graph, &inputs, 1e-5);
    p.report
}

/// Transforms `planner` keeps. For `global`, also checks that it moves no more
/// bytes than `local` and `greedy`, and costs no more than either once rewritten.
fn transforms(g: &Graph, planner: &str, family: TargetFamily) -> usize {
    let r = plan_checked(g, planner, family);
    if planner == "global" {
        for other in ["local", "greedy"] {
            let o = plan_checked(g, other, family);
            assert!(
                r.transform_bytes <= o.transform_bytes,
                "global moves more bytes than {other}"
            );
            assert!(
                r.rewritten_cost <= o.rewritten_cost + 1e-6,
                "global costs {} against {other}'s {} once rewritten",
                r.rewritten_cost,
                o.rewritten_cost
            );
        }
    }
    r.transform_count
}

/// x of `shape` → conv1 → `between(x, conv1)` → conv2, the output; both convs
/// 3x3 with `cout` channels.
fn convs_around(
    name: &str,
    shape: &[usize],
    cout: usize,
    between: impl FnOnce(&mut Graph, ValueRef, ValueRef) -> ValueRef,
) -> Graph {
    let mut g = Graph::new(name);
    let x = input(&mut g, shape);
    let c1 = conv(&mut g, x, cout, 3, 1, "conv1");
    let mid = between(&mut g, x, c1);
    let c2 = conv(&mut g, mid, cout, 3, 1, "conv2");
    g.set_outputs(vec![c2]);
    g
}

/// x [1, `c`, 8, 8] → conv_a (3x3) and conv_b (`kb` x `kb`), concatenated on
/// channels → conv_c (3x3), the output; every conv keeps `c` channels.
fn concat_branches(name: &str, c: usize, kb: usize) -> Graph {
    let mut g = Graph::new(name);
    let x = input(&mut g, &[1, c, 8, 8]);
    let a = conv(&mut g, x, c, 3, 1, "conv_a");
    let b = conv(&mut g, x, c, kb, 1, "conv_b");
    let cat = op(&mut g, Op::Concat(Concat { axis: 1 }), &[a, b], "cat");
    let y = conv(&mut g, cat, c, 3, 1, "conv_c");
    g.set_outputs(vec![y]);
    g
}

/// Asserts that in NCHW16c `global` keeps `global` transforms and `local` a
/// number of them in `local`.
fn assert_nchw16c_transforms(g: &Graph, global: usize, local: impl RangeBounds<usize>) {
    let family = TargetFamily::Nchwc(16);
    assert_eq!(transforms(g, "global", family), global);
    let kept = transforms(g, "local", family);
    assert!(local.contains(&kept), "local keeps {kept}");
}

/// conv → max-pool → conv, 16 channels, NCHW16c.
/// Optimum 2: the image is transformed once into NCHW16c (conv1 reads 16 channels,
/// so reading NCHW would double its 1.2 Mflop cost, 23.6 us, against 3.3 us for the
/// 16 KiB transform), the pool runs blocked between the convs (it is agnostic), and
/// the result is transformed back once for the graph output.
#[test]
fn conv_pool_conv() {
    let g = convs_around("conv_pool_conv", &[1, 16, 16, 16], 16, |g, _, c1| {
        let window = Window {
            kernel: vec![2, 2],
            strides: vec![2, 2],
            dilations: vec![1, 1],
            pads: vec![0; 4],
        };
        let pool = Op::Pool(Pool {
            kind: PoolKind::Max,
            window,
            ceil_mode: false,
            count_include_pad: false,
        });
        op(g, pool, &[c1], "pool")
    });
    assert_nchw16c_transforms(&g, 2, 2..);
}

/// A multi-input op that poisons its other operand: y = conv2(x + conv1(x)).
/// Local planning keeps the Add in the layout of its first operand, the NCHW graph
/// input, so conv1's result goes back to NCHW and the sum forward again: 4.
/// Optimum 2: x is transformed once (shared by conv1 and the Add), everything runs
/// blocked, the output is transformed back once.
#[test]
fn add_that_poisons_its_operand() {
    let g = convs_around("poison", &[1, 16, 8, 8], 16, |g, x, c1| {
        let add = Op::Binary(layoutopt::graph::BinaryOp::Add);
        op(g, add, &[x, c1], "add")
    });
    assert_nchw16c_transforms(&g, 2, 4..=4);
}

/// A^T · B with A [64, 32], B [64, 48]. The transpose can be a relabelling (A^T in
/// column-major is A's bytes) and the matrix product reads a column-major operand
/// at no extra cost. Optimum: 0 transforms and the transpose moves no data, so
/// global saves exactly the transpose's 2 x 8 KiB of traffic (1638.4 ns) over keep.
#[test]
fn a_transposed_times_b() {
    let mut g = Graph::new("atb");
    let a = g.add_input("a", ValueType::new(DType::F32, vec![64, 32]), vec![]);
    let b = g.add_input("b", ValueType::new(DType::F32, vec![64, 48]), vec![]);
    let at = transpose(&mut g, a, &[1, 0], "at");
    let y = op(&mut g, Op::MatMul, &[at, b], "matmul");
    g.set_outputs(vec![y]);
    let keep = plan_checked(&g, "keep", TargetFamily::Nchw);
    let global = plan_checked(&g, "global", TargetFamily::Nchw);
    assert_eq!(global.transform_count, 0);
    let saved = keep.estimated_cost - global.estimated_cost;
    assert!(
        (saved - 2.0 * 64.0 * 32.0 * 4.0 * 0.1).abs() < 1e-6,
        "saved {saved} ns"
    );
}

/// A branch that joins in a concat: x → conv_a, x → conv_b, concat on channels
/// (16 + 16, whole blocks) → conv_c. Optimum 2 (x in, result out): the concat
/// joins whole 16-channel blocks, so it runs blocked with no transform.
#[test]
fn branches_joining_in_a_concat() {
    let g = concat_branches("concat", 16, 1);
    assert_eq!(transforms(&g, "global", TargetFamily::Nchwc(16)), 2);
}

/// The same join with 12 + 12 channels: blocks of 16 would put padding inside the
/// concatenated axis, so the concat cannot run blocked. Under NHWC no padding
/// arises. Optimum 2: x (12 > 4 channels, so reading it row-major would cost conv_a
/// and conv_b 0.85 x 3.3 us each) is transformed once for both, the concat runs in
/// NHWC, and the output goes back once (614 ns, against conv_c's penalty).
#[test]
fn concat_of_unaligned_channels() {
    let g = concat_branches("concat12", 12, 3);
    assert_eq!(transforms(&g, "global", TargetFamily::Nhwc), 2);
    // Blocked: every plan stays correct (checked inside), whatever it keeps.
    plan_checked(&g, "global", TargetFamily::Nchwc(16));
    plan_checked(&g, "local", TargetFamily::Nchwc(16));
}

/// 3- and 17-channel tensors in NCHW16c: image [1,3,16,16] → conv(3→17) → relu →
/// conv(17→17). Blocked, 17 channels pad to 32: conv2 would waste (32/17)^2 = 3.54x
/// its flops against a 2.0x penalty in NCHW, and conv1's blocked output would need a
/// transform back (2 x 17 KiB + 32 KiB...) costing more than its 2.0x penalty saves
/// (conv1: 235 kflop = 4.7 us at 1.0x, 9.4 us at 2.0x, 8.8 us + 5.0 us transform
/// blocked). Optimum: 0 transforms, all NCHW. Local blocks both convs anyway; its
/// plan must still compute the right values through the zero padding (checked).
#[test]
fn three_and_seventeen_channels() {
    let g = convs_around("pad17", &[1, 3, 16, 16], 17, |g, _, c1| relu(g, c1, "relu"));
    assert_nchw16c_transforms(&g, 0, 1..);
}

/// A transformer head split: x [1,16,64] → reshape [1,16,4,16] → transpose
/// [0,2,1,3] → softmax over the last axis → transpose back → reshape [1,16,64].
/// The two transposes relabel each other's bytes and softmax runs in the
/// relabelled layout (its axis stays unblocked), so optimum: 0 transforms and both
/// transposes move no data; keep moves the data twice.
#[test]
fn transformer_head_split_and_merge() {
    let mut g = Graph::new("heads");
    let x = g.add_input("x", ValueType::new(DType::F32, vec![1, 16, 64]), vec![]);
    let r = reshape(&mut g, x, &[1, 16, 4, 16], "split_heads");
    let t = transpose(&mut g, r, &[0, 2, 1, 3], "to_heads");
    let s = op(&mut g, Op::Softmax(Softmax { axis: 3 }), &[t], "softmax");
    let t2 = transpose(&mut g, s, &[0, 2, 1, 3], "from_heads");
    let y = reshape(&mut g, t2, &[1, 16, 64], "merge_heads");
    g.set_outputs(vec![y]);
    let keep = plan_checked(&g, "keep", TargetFamily::Nchw);
    let global = plan_checked(&g, "global", TargetFamily::Nchw);
    assert_eq!(global.transform_count, 0);
    let transpose_traffic = 2.0 * 2.0 * 1024.0 * 4.0 * 0.1;
    assert!(
        (keep.estimated_cost - global.estimated_cost - transpose_traffic).abs() < 1e-6,
        "keep {} global {}",
        keep.estimated_cost,
        global.estimated_cost
    );
}

/// An NHWC input read by two transposes to NCHW (converters write one per
/// reader), each feeding a 3x3 convolution, the two added for the output, in
/// NCHW16c. Both transposes relabel the input, so one transform of the input
/// into NCHW16c serves both convolutions (the same bytes moved once, whether
/// the solver charged it to the input's edges or to the relabelled copies':
/// the materialiser transforms a relabelled value through its source), and
/// one brings the sum back.
/// Optimum 2: each convolution's 1.2 Mflop cost doubles in NCHW (23.6 us more
/// per conv) against 1.6 us for an 8 KiB transform.
#[test]
fn one_tensor_read_through_two_relabels() {
    let mut g = Graph::new("two_relabels");
    let x = input(&mut g, &[1, 8, 8, 32]);
    let a = transpose(&mut g, x, &[0, 3, 1, 2], "a");
    let b = transpose(&mut g, x, &[0, 3, 1, 2], "b");
    let ca = conv(&mut g, a, 32, 3, 1, "conv_a");
    let cb = conv(&mut g, b, 32, 3, 1, "conv_b");
    let y = op(
        &mut g,
        Op::Binary(layoutopt::graph::BinaryOp::Add),
        &[ca, cb],
        "sum",
    );
    g.set_outputs(vec![y]);
    let report = plan_checked(&g, "global", TargetFamily::Nchwc(16));
    assert_eq!(report.transform_count, 2, "{}", report.to_text());
}

/// Splits a [1, 8, 32] tensor into 2 heads of 16: [1, 2, 8, 16], or with
/// `perm` [0, 2, 3, 1] the keys' [1, 2, 16, 8].
fn heads(g: &mut Graph, x: ValueRef, perm: &[usize], name: &str) -> ValueRef {
    let r = reshape(g, x, &[1, 8, 2, 16], &format!("{name}.split"));
    transpose(g, r, perm, &format!("{name}.heads"))
}

fn project(g: &mut Graph, x: ValueRef, name: &str) -> ValueRef {
    let w = g.add_constant(
        &format!("{name}.w"),
        weights(&[32, 32], name.len() as u64),
        vec![],
    );
    op(g, Op::MatMul, &[x, w], name)
}

/// One attention block: x [1, 8, 32] projected to queries, keys and values,
/// split into 2 heads, softmax(q k^T) v, heads merged and projected. The
/// planner's problem does not see what rewriting cancels (transposes composing,
/// transforms meeting their inverse), so the solver's optimum before rewriting
/// may end dearer than a baseline's plan after it; global finishes the baselines'
/// assignments too, so in every family it keeps no more transforms than `local`
/// and costs no more than `local` or `greedy` once rewritten.
#[test]
fn attention_block() {
    let mut g = Graph::new("attention");
    let x = input(&mut g, &[1, 8, 32]);
    let q = project(&mut g, x, "q");
    let k = project(&mut g, x, "k");
    let v = project(&mut g, x, "v");
    let qh = heads(&mut g, q, &[0, 2, 1, 3], "q");
    let kh = heads(&mut g, k, &[0, 2, 3, 1], "k");
    let vh = heads(&mut g, v, &[0, 2, 1, 3], "v");
    let s = op(&mut g, Op::MatMul, &[qh, kh], "scores");
    let p = op(&mut g, Op::Softmax(Softmax { axis: 3 }), &[s], "softmax");
    let o = op(&mut g, Op::MatMul, &[p, vh], "mix");
    let t = transpose(&mut g, o, &[0, 2, 1, 3], "merge");
    let m = reshape(&mut g, t, &[1, 8, 32], "merged");
    let y = project(&mut g, m, "out");
    g.set_outputs(vec![y]);
    for family in [
        TargetFamily::Nchw,
        TargetFamily::Nhwc,
        TargetFamily::Nchwc(8),
        TargetFamily::Nchwc(16),
    ] {
        let global = transforms(&g, "global", family);
        assert!(global <= transforms(&g, "local", family), "{family}");
    }
}
