//! What the compiler makes of a graph: whole compiled graphs of random
//! convolutions (padding, stride, dilation, groups, fused batch norm, residual
//! and activation) against the reference executor, the fusions, placements and
//! views it finds, and the work each step counts against closed forms.

use crate::graph::{BinaryOp, Conv, DType, Graph, Op, Tensor, UnaryOp, ValueRef, ValueType};
use crate::layout::cost::CostModel;
use crate::layout::plan::plan;
use crate::layout::planners::planner_by_name;
use crate::layout::target::TargetFamily;
use crate::runtime::measure::roofline::StepWork;
use crate::runtime::test_support::{
    after_pointwise_conv, assert_close, compile_on, max_error, planned_for, random_conv_graph,
    strided_conv_graph, Rng, FAMILIES,
};
use crate::runtime::{CompiledModel, RuntimeOptions};

#[test]
fn compiled_random_convs_match_the_reference_executor() {
    let mut rng = Rng(11);
    let families = [
        TargetFamily::Nchwc(16),
        TargetFamily::Nchwc(8),
        TargetFamily::Nhwc,
        TargetFamily::Nchw,
    ];
    let (mut native, mut swish_fused, mut prelu_fused) = (0, 0, 0);
    for case in 0..40 {
        let (g, inputs) = random_conv_graph(&mut rng);
        let expected = crate::reference::run(&g, &inputs).unwrap();
        let family = families[case % families.len()];
        let planned = planned_for(&g, family);
        let m = compile_on(2, &planned);
        let got = m.run(&inputs).unwrap();
        let steps = m.describe();
        native += steps
            .iter()
            .any(|l| l.contains("[Conv") && l.ends_with("native")) as usize;
        swish_fused += steps
            .iter()
            .any(|l| l.contains("[Conv") && l.contains("Sigmoid+Mul") && l.ends_with("native"))
            as usize;
        prelu_fused += steps
            .iter()
            .any(|l| l.contains("[Conv") && l.contains("+PRelu") && l.ends_with("native"))
            as usize;
        let (err, mag) = max_error(&got[0].to_f32(), &expected[0].to_f32());
        assert!(
            err <= 1e-4 * mag.max(1.0),
            "case {case} {family}: error {err} (max {mag})\n{}",
            m.describe().join("\n")
        );
    }
    // Dense, grouped and depthwise convolutions all have native kernels.
    assert_eq!(native, 40, "only {native} of 40 convolutions ran natively");
    assert!(
        swish_fused >= 2,
        "{swish_fused} swishes ran in a conv epilogue"
    );
    assert!(
        prelu_fused >= 2,
        "{prelu_fused} PRelus ran in a conv epilogue"
    );
}

/// A channels-last graph as the TFLite importer writes it: each conv between a
/// transpose to NCHW and one back, the residual add and the activation on the
/// NHWC side. The transpose after the conv only relabels its output, so the
/// add and the swish, relu or PRelu (its slope per channel as TFLite writes it,
/// [1, 1, C] or [C] along the NHWC channels) still run in the conv's epilogue,
/// equal to the reference in every layout family.
#[test]
fn conv_epilogues_look_through_relabelling_transposes() {
    let mut rng = Rng(12);
    let families = [
        TargetFamily::Nchwc(16),
        TargetFamily::Nchwc(8),
        TargetFamily::Nhwc,
        TargetFamily::Nchw,
    ];
    for (case, family) in (0..4).flat_map(|act| families.map(|f| (act, f))) {
        let (h, w, cin, cout) = (9, 7, 5, 24);
        let mut g = Graph::new("channels-last");
        let nhwc = |c: usize| ValueType::new(DType::F32, vec![1, h, w, c]);
        let x = g.add_input("x", nhwc(cin), vec![]);
        let r = g.add_input("r", nhwc(cout), vec![]);
        let inputs =
            [nhwc(cin), nhwc(cout)].map(|t| Tensor::from_f32(t.shape.clone(), rng.f32s(t.numel())));
        let wshape = vec![cout, cin, 3, 3];
        let wt = g.add_constant(
            "w",
            Tensor::from_f32(wshape.clone(), rng.f32s(wshape.iter().product())),
            vec![],
        );
        let conv = Op::Conv(Conv {
            window: crate::ops::testutil::square_window(3, 1, 1),
            group: 1,
        });
        let to_nchw = node(&mut g, transpose([0, 3, 1, 2]), &[x]);
        let y = node(&mut g, conv, &[to_nchw, wt]);
        let back = node(&mut g, transpose([0, 2, 3, 1]), &[y]);
        let sum = node(&mut g, Op::Binary(BinaryOp::Add), &[back, r]);
        let out = match case {
            0 => {
                let s = node(&mut g, Op::Unary(UnaryOp::Sigmoid), &[sum]);
                node(&mut g, Op::Binary(BinaryOp::Mul), &[sum, s])
            }
            1 => node(&mut g, Op::Unary(UnaryOp::Relu), &[sum]),
            _ => {
                let shape = [vec![1, 1, cout], vec![cout]][case - 2].clone();
                let slope = Tensor::from_f32(shape, rng.f32s(cout));
                let slope = g.add_constant("slope", slope, vec![]);
                node(&mut g, Op::Binary(BinaryOp::PRelu), &[sum, slope])
            }
        };
        g.set_outputs(vec![out]);
        let expected = crate::reference::run(&g, &inputs).unwrap()[0].to_f32();
        let planned = planned_for(&g, family);
        // The direct kernel: this checks the fused epilogue to the direct
        // kernel's precision, whichever algorithm measures fastest.
        let direct = crate::runtime::kernels::conv::algo::ConvAlgoOptions {
            choice: crate::runtime::kernels::conv::algo::ConvAlgoChoice::Direct,
            cache: None,
            decided: None,
        };
        let m = CompiledModel::compile(
            &planned,
            &RuntimeOptions {
                threads: 2,
                conv_algo: direct,
                ..Default::default()
            },
        )
        .unwrap();
        let got = m.run(&inputs).unwrap()[0].to_f32();
        assert_close(&got, &expected, &format!("{family} case {case}"));
        let steps = m.describe();
        assert!(
            steps.iter().any(|l| l.contains("[Conv+Transpose+Add+")),
            "{family}: the add and activation were not fused:\n{}",
            steps.join("\n")
        );
    }
}

/// A node of `op` reading `ins`, named by its position, and its output.
fn node(g: &mut Graph, op: Op, ins: &[ValueRef]) -> ValueRef {
    let name = format!("n{}", g.node_count());
    ValueRef::new(g.add_node(op, &name, ins, &[], vec![]).unwrap(), 0)
}

/// A transpose of a 4-d tensor by `perm`.
fn transpose(perm: [usize; 4]) -> Op {
    Op::Transpose(crate::graph::Transpose {
        perm: perm.to_vec(),
    })
}

/// Concats along the outer axis are placements: their inputs are computed in
/// their slice of the output (nested concats too) and no Concat step runs;
/// a concat of a graph input keeps its copy. Outputs match the reference.
#[test]
fn concats_along_the_outer_axis_are_computed_in_place() {
    use crate::graph::ValueRef;
    use crate::ops::Concat;
    let ty = ValueType::new(DType::F32, vec![1, 16, 9, 9]);
    let unary = |g: &mut Graph, op: UnaryOp, x: ValueRef| {
        ValueRef::new(
            g.add_node(Op::Unary(op), op.name(), &[x], &[], vec![])
                .unwrap(),
            0,
        )
    };
    let concat = |g: &mut Graph, name: &str, parts: &[ValueRef]| {
        let op = Op::Concat(Concat { axis: 1 });
        ValueRef::new(g.add_node(op, name, parts, &[], vec![]).unwrap(), 0)
    };
    let mut g = Graph::new("concat");
    let x = g.add_input("x", ty.clone(), vec![]);
    let a = unary(&mut g, UnaryOp::Relu, x);
    let b = unary(&mut g, UnaryOp::Neg, x);
    let c = concat(&mut g, "c", &[a, b]);
    let d = unary(&mut g, UnaryOp::Tanh, c);
    let e = concat(&mut g, "e", &[c, d]);
    let kept = concat(&mut g, "kept", &[x, a]);
    // Two consumers, so that `e` is not fused into an elementwise chain.
    let y = unary(&mut g, UnaryOp::Sigmoid, e);
    let z = unary(&mut g, UnaryOp::Relu, e);
    g.set_outputs(vec![y, z, kept]);
    let m = compile_on(2, &g);
    let steps: Vec<String> = m.describe();
    let named = |n: &str| steps.iter().any(|s| s.starts_with(&format!("{n} [")));
    assert!(!named("c") && !named("e") && named("kept"), "{steps:#?}");
    let mut rng = Rng(5);
    for _ in 0..2 {
        let inputs = vec![Tensor::from_f32(ty.shape.clone(), rng.f32s(ty.numel()))];
        let expected = crate::reference::run(&g, &inputs).unwrap();
        let got = m.run(&inputs).unwrap();
        for (e, a) in expected.iter().zip(&got) {
            assert_eq!(e.shape, a.shape);
            let err = e
                .to_f32()
                .iter()
                .zip(a.to_f32())
                .map(|(p, q)| (p - q).abs())
                .fold(0f32, f32::max);
            assert!(err <= 1e-6, "max abs error {err}");
        }
    }
}

/// A reshape of a value into a concat's part moves nothing either way round:
/// the concat places the reshape's output, and the reshape, a copy of its
/// whole input, puts its input there too, so the values are computed inside
/// the concat's output and neither a Reshape nor a Concat step runs.
/// A rewrite leaves a source layer's span on several nodes (a folded affine
/// op on the convolution and on the transpose it was moved through); the
/// fused step names each layer once, in source order.
#[test]
fn a_fused_step_names_each_source_layer_once() {
    use crate::graph::Span;
    let span = |i: usize| Span::new("m.onnx", &format!("layer{i}"), "Relu", i);
    let ty = ValueType::new(DType::F32, vec![1, 8]);
    let mut g = Graph::new("shared spans");
    let x = g.add_input("x", ty, vec![]);
    let a = g
        .add_node(
            Op::Unary(UnaryOp::Relu),
            "a",
            &[x],
            &[],
            vec![span(1), span(2)],
        )
        .unwrap();
    let b = g
        .add_node(
            Op::Unary(UnaryOp::Neg),
            "b",
            &[ValueRef::new(a, 0)],
            &[],
            vec![span(2), span(1), span(3)],
        )
        .unwrap();
    g.set_outputs(vec![ValueRef::new(b, 0)]);
    let m = compile_on(1, &g);
    let [step] = &m.steps[..] else {
        panic!("one fused step: {:?}", m.describe())
    };
    assert_eq!(step.spans, vec![span(1), span(2), span(3)]);
}

#[test]
fn a_copy_into_a_concat_places_its_input_there() {
    use crate::ops::{Concat, Reshape};
    let ty = ValueType::new(DType::F32, vec![1, 16, 9, 9]);
    let mut g = Graph::new("reshaped parts");
    let x = g.add_input("x", ty.clone(), vec![]);
    let add = |g: &mut Graph, op: Op, name: &str, ins: &[ValueRef]| {
        ValueRef::new(g.add_node(op, name, ins, &[], vec![]).unwrap(), 0)
    };
    let flat = || {
        Op::Reshape(Reshape {
            shape: vec![1, 16, 81],
        })
    };
    let a = add(&mut g, Op::Unary(UnaryOp::Relu), "a", &[x]);
    let b = add(&mut g, Op::Unary(UnaryOp::Neg), "b", &[x]);
    let ra = add(&mut g, flat(), "ra", &[a]);
    let rb = add(&mut g, flat(), "rb", &[b]);
    let c = add(&mut g, Op::Concat(Concat { axis: 1 }), "c", &[ra, rb]);
    // Two readers each, so that no elementwise chain takes them in.
    let y = add(&mut g, Op::Unary(UnaryOp::Sigmoid), "y", &[c]);
    let z = add(&mut g, Op::Unary(UnaryOp::Relu), "z", &[c]);
    let t = add(&mut g, Op::Unary(UnaryOp::Tanh), "t", &[a]);
    g.set_outputs(vec![y, z, t]);
    let m = compile_on(2, &g);
    let kinds: Vec<&str> = m.steps.iter().map(|s| s.kind.as_str()).collect();
    assert!(
        !kinds
            .iter()
            .any(|k| k.starts_with("Reshape") || k.starts_with("Concat")),
        "{kinds:?}"
    );
    let mut rng = Rng(8);
    let inputs = vec![Tensor::from_f32(ty.shape.clone(), rng.f32s(ty.numel()))];
    let expected = crate::reference::run(&g, &inputs).unwrap();
    for _ in 0..2 {
        let got = m.run(&inputs).unwrap();
        for (k, (a, e)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(a.shape, e.shape, "output {k}");
            assert_close(&a.to_f32(), &e.to_f32(), &format!("output {k}"));
        }
    }
}

/// Concats that are not placements (parts that do not fill whole channel
/// blocks, an inner axis, a graph input among the parts) run as one gather
/// from all their inputs, unplanned and in each layout family: exactly the
/// reference's values.
#[test]
fn concats_of_several_inputs_run_as_one_gather() {
    use crate::ops::Concat;
    let mut rng = Rng(6);
    for (axis, family) in [
        (1, TargetFamily::Nchwc(16)),
        (1, TargetFamily::Nhwc),
        (3, TargetFamily::Nchwc(8)),
        (2, TargetFamily::Nchw),
    ] {
        let mut g = Graph::new("concat");
        let (mut parts, mut inputs) = (vec![], vec![]);
        for (k, c) in [5, 11, 16].into_iter().enumerate() {
            let mut shape = vec![1, 7, 6, 4];
            shape[axis] = c;
            let ty = ValueType::new(DType::F32, shape.clone());
            inputs.push(Tensor::from_f32(shape, rng.f32s(ty.numel())));
            let x = g.add_input(&format!("x{k}"), ty, vec![]);
            // One part straight from a graph input, the others computed.
            parts.push(match k {
                0 => x,
                _ => {
                    let id =
                        g.add_node(Op::Unary(UnaryOp::Neg), &format!("n{k}"), &[x], &[], vec![]);
                    ValueRef::new(id.unwrap(), 0)
                }
            });
        }
        let cat = g
            .add_node(Op::Concat(Concat { axis }), "cat", &parts, &[], vec![])
            .unwrap();
        let out = g.add_node(
            Op::Unary(UnaryOp::Relu),
            "relu",
            &[ValueRef::new(cat, 0)],
            &[],
            vec![],
        );
        g.set_outputs(vec![ValueRef::new(out.unwrap(), 0)]);
        let expected = crate::reference::run(&g, &inputs).unwrap()[0].to_f32();
        let planned = planned_for(&g, family);
        for graph in [&g, &planned] {
            let m = compile_on(2, graph);
            assert_eq!(
                m.run(&inputs).unwrap()[0].to_f32(),
                expected,
                "axis {axis} {family}"
            );
            let steps = m.describe();
            assert!(
                steps.iter().any(|s| s.starts_with("cat [Concat (gather)]")),
                "axis {axis} {family}: {steps:#?}"
            );
        }
    }
}

/// Constant Pads (a value of their own, some axes cropped) after a
/// convolution, compiled unplanned and in the planned layouts: equal to the
/// reference; unplanned they run as gathers.
#[test]
fn constant_pads_gather_what_the_reference_pads() {
    use crate::ops::{Pad, PadMode};
    let mut rng = Rng(43);
    for (value, begins, ends) in [
        (1.5, vec![0, 0, 1, 2], vec![0, 0, 2, 0]),
        (0.0, vec![0, 0, 1, 1], vec![0, 0, 1, 1]),
        (-3.0, vec![0, 2, -1, 0], vec![0, 1, 0, -2]),
    ] {
        let pad = Op::Pad(Pad {
            begins,
            ends,
            mode: PadMode::Constant(value),
        });
        let (g, ty) = after_pointwise_conv(pad, [20, 7, 9], Some(&mut rng));
        let inputs = vec![Tensor::from_f32(ty.shape.clone(), rng.f32s(ty.numel()))];
        let expected = crate::reference::run(&g, &inputs).unwrap()[0].to_f32();
        let m = compile_on(2, &g);
        assert!(
            m.describe().iter().any(|s| s.contains("Pad (gather)")),
            "{:?}",
            m.describe()
        );
        assert_close(&m.run(&inputs).unwrap()[0].to_f32(), &expected, "unplanned");
        for family in [TargetFamily::Nchwc(16), TargetFamily::Nchwc(8)] {
            let m = compile_on(2, &planned_for(&g, family));
            let got = m.run(&inputs).unwrap()[0].to_f32();
            assert_close(&got, &expected, &format!("{family} pad {value}"));
        }
    }
}

/// BlazeFace's widening residual: x[1, 16, 32, 32] -> 3x3 Conv + Relu ->
/// 2x2 MaxPool -> (a 3x3 Conv to the wider channels, plus the pooled map
/// zero-padded on C by `begin` and `end`) -> Relu, the graph's output.
fn padded_shortcut_graph(begin: usize, end: usize, rng: &mut Rng) -> (Graph, Tensor) {
    use crate::ops::testutil::{pool_2x2, square_window};
    use crate::ops::{Pad, PadMode, PoolKind};
    let (c, wide) = (16, 16 + begin + end);
    let ty = ValueType::new(DType::F32, vec![1, c, 32, 32]);
    let x_in = Tensor::from_f32(ty.shape.clone(), rng.f32s(ty.numel()));
    let mut g = Graph::new("padded_shortcut");
    let x = g.add_input("x", ty, vec![]);
    let node = |g: &mut Graph, op: Op, name: &str, ins: &[ValueRef]| {
        ValueRef::new(g.add_node(op, name, ins, &[], vec![]).unwrap(), 0)
    };
    let conv = || {
        Op::Conv(Conv {
            window: square_window(3, 1, 1),
            group: 1,
        })
    };
    let w1 = Tensor::from_f32(vec![c, c, 3, 3], rng.f32s(c * c * 9));
    let w1 = g.add_constant("w1", w1, vec![]);
    let w2 = Tensor::from_f32(vec![wide, c, 3, 3], rng.f32s(wide * c * 9));
    let w2 = g.add_constant("w2", w2, vec![]);
    let a = node(&mut g, conv(), "expand", &[x, w1]);
    let a = node(&mut g, Op::Unary(UnaryOp::Relu), "relu1", &[a]);
    let pooled = node(&mut g, pool_2x2(PoolKind::Max), "pool", &[a]);
    let pad = Op::Pad(Pad {
        begins: vec![0, begin as i64, 0, 0],
        ends: vec![0, end as i64, 0, 0],
        mode: PadMode::Constant(0.0),
    });
    let shortcut = node(&mut g, pad, "pad", &[pooled]);
    let main = node(&mut g, conv(), "project", &[pooled, w2]);
    let sum = node(&mut g, Op::Binary(BinaryOp::Add), "add", &[main, shortcut]);
    let y = node(&mut g, Op::Unary(UnaryOp::Relu), "relu2", &[sum]);
    g.set_outputs(vec![y]);
    (g, x_in)
}

/// A zero Pad of channels is a planner decision: where it adds whole channel
/// blocks before an input of whole blocks it runs in the blocked layout, with
/// no transform before or after it, and (batch 1) its input is computed in
/// place inside its output, so the step only writes the zeros, as in NCHW.
/// Other paddings (a begin inside a block) still run, through transforms.
/// Outputs equal the reference executor's in every layout family.
#[test]
fn a_zero_channel_pad_runs_in_the_blocked_layout() {
    let mut rng = Rng(44);
    for (begin, end) in [(0, 16), (16, 8), (0, 8), (4, 12)] {
        let (g, x) = padded_shortcut_graph(begin, end, &mut rng);
        let expected = crate::reference::run(&g, std::slice::from_ref(&x)).unwrap()[0].to_f32();
        for family in FAMILIES {
            let planned = planned_for(&g, family);
            let what = format!("{family} pad {begin}/{end}");
            let m = compile_on(2, &planned);
            // Two stacked 3x3 convolutions of 16 channels: sums of 144 terms
            // in another order than the reference's.
            let got = m.run(std::slice::from_ref(&x)).unwrap()[0].to_f32();
            let (err, mag) = max_error(&got, &expected);
            assert!(
                err <= 1e-5 * mag.max(1.0),
                "{what}: error {err} (max {mag})"
            );
            let block = match family {
                TargetFamily::Nchwc(b) => b,
                TargetFamily::Nchw => 1,
                TargetFamily::Nhwc => continue,
            };
            if begin % block != 0 {
                continue;
            }
            // The pooled map is computed inside the pad's output, which is
            // left to write its zeros.
            let steps = m.describe();
            assert!(
                steps.iter().any(|s| s.starts_with("pad [Pad (fill)]"))
                    && !steps.iter().any(|s| s.contains("(gather)")),
                "{what}: {steps:#?}"
            );
            if family == TargetFamily::Nchw {
                continue;
            }
            let pad = planned
                .node_ids()
                .into_iter()
                .find(|&id| planned.node(id).name == "pad")
                .unwrap();
            let Op::InLayout(laid_out) = &planned.node(pad).op else {
                panic!("{what}: the pad runs row-major");
            };
            assert!(laid_out.inputs[0].0.is_blocked(), "{what}");
            let transform = |id| matches!(planned.node(id).op, Op::LayoutTransform(_));
            let producer = planned.node_inputs(pad)[0].node;
            let consumers = planned.consumers(ValueRef::new(pad, 0));
            assert!(
                !transform(producer) && !consumers.iter().any(|&(id, _)| transform(id)),
                "{what}: a transform next to the pad"
            );
        }
    }
}

/// The one step of `model` whose kind starts with `kind`.
fn step<'m>(model: &'m CompiledModel, kind: &str) -> &'m crate::runtime::model::Step {
    let mut found = model.steps.iter().filter(|s| s.kind.starts_with(kind));
    let step = found.next().unwrap_or_else(|| panic!("no {kind} step"));
    assert!(found.next().is_none(), "more than one {kind} step");
    step
}

#[test]
fn a_conv_step_does_the_closed_form_work_in_every_layout() {
    // (cin, cout, groups, with batch norm, residual and relu)
    for (cin, cout, group, epilogue) in [(8, 24, 1, true), (8, 8, 8, false)] {
        let g = strided_conv_graph(cin, cout, group, epilogue);
        let (kh, kw, oh, ow) = (3, 2, 5, 10);
        // One multiply-add per output element, input channel of its group and tap.
        let flops = (2 * 2 * cout * oh * ow * (cin / group) * kh * kw) as f64;
        let x = 2 * cin * 9 * 11;
        let y = 2 * cout * oh * ow;
        // Data, weights, bias and output, and the residual (as large as the
        // output) when the step adds it; the batch norm's parameters are folded
        // into the weights.
        let elements = |kind: &str| {
            let residual = if kind.contains("Add") { y } else { 0 };
            x + cout * (cin / group) * kh * kw + cout + y + residual
        };
        let m = compile_on(1, &g);
        let conv = step(&m, "Conv");
        assert!(matches!(
            conv.kernel,
            crate::runtime::model::Kernel::Conv(_) | crate::runtime::model::Kernel::Depthwise(_)
        ));
        assert_eq!(conv.kind.contains("Add+Relu"), epilogue, "{}", conv.kind);
        let bytes = 4 * elements(&conv.kind) as u64;
        assert_eq!(conv.work, StepWork { bytes, flops }, "group {group}");
        // Planned, the step counts the logical flops (channels that pad a
        // block compute nothing) and the bytes as stored: as many in
        // channels-last storage, at least as many in blocks.
        for family in [TargetFamily::Nhwc, TargetFamily::Nchwc(16)] {
            let m = compile_on(1, &planned_for(&g, family));
            let conv = step(&m, "Conv");
            let (work, logical) = (conv.work, 4 * elements(&conv.kind) as u64);
            assert_eq!(work.flops, flops, "group {group} {family}");
            match family {
                TargetFamily::Nhwc => assert_eq!(work.bytes, logical, "group {group}"),
                _ => assert!(work.bytes >= logical, "group {group} {family}"),
            }
        }
    }
}

#[test]
fn elementwise_and_dense_steps_count_their_operands_and_products() {
    let mut g = Graph::new("elementwise");
    let ty = ValueType::new(DType::F32, vec![2, 3, 5]);
    let x = g.add_input("x", ty.clone(), vec![]);
    let y = g.add_input("y", ty.clone(), vec![]);
    let sum = Op::Binary(BinaryOp::Add);
    let sum = ValueRef::new(g.add_node(sum, "sum", &[x, y], &[], vec![]).unwrap(), 0);
    // A broadcast constant and a sigmoid: one loop nest, the sum in between unstored.
    let c = g.add_constant("c", Tensor::from_f32(vec![5], vec![0.5; 5]), vec![]);
    let scaled = Op::Binary(BinaryOp::Mul);
    let scaled = ValueRef::new(
        g.add_node(scaled, "scaled", &[sum, c], &[], vec![])
            .unwrap(),
        0,
    );
    let sigmoid = Op::Unary(UnaryOp::Sigmoid);
    let s = ValueRef::new(
        g.add_node(sigmoid, "sigmoid", &[scaled], &[], vec![])
            .unwrap(),
        0,
    );
    // Then a product with [5, 7] weights and a bias, as 30 rows of 5.
    let flat = g.add_node(
        Op::Reshape(crate::ops::Reshape { shape: vec![6, 5] }),
        "flat",
        &[s],
        &[],
        vec![],
    );
    let flat = ValueRef::new(flat.unwrap(), 0);
    let w = g.add_constant("w", Tensor::from_f32(vec![5, 7], vec![0.25; 35]), vec![]);
    let b = g.add_constant("b", Tensor::from_f32(vec![7], vec![1.0; 7]), vec![]);
    let gemm = Op::Gemm(crate::ops::Gemm {
        alpha: 1.0,
        beta: 1.0,
        trans_a: false,
        trans_b: false,
    });
    let out = ValueRef::new(
        g.add_node(gemm, "dense", &[flat, w, b], &[], vec![])
            .unwrap(),
        0,
    );
    g.set_outputs(vec![out]);
    let m = compile_on(1, &g);
    let bytes = |elements: usize| 4 * elements as u64;
    // The chain reads x, y and c and writes its result; the values between its
    // ops stay in registers. Elementwise ops count no flops.
    let chain = step(&m, "Add+Mul+Sigmoid");
    let moved = bytes(30 + 30 + 5 + 30);
    assert_eq!(
        chain.work,
        StepWork {
            bytes: moved,
            flops: 0.0
        }
    );
    assert_eq!(chain.work.intensity(), None);
    // The reshape is a view of the chain's output: no step, nothing moved.
    assert!(m.steps.iter().all(|s| !s.kind.starts_with("Reshape")));
    let dense = step(&m, "Gemm").work;
    assert_eq!(dense.flops, (2 * 6 * 7 * 5) as f64);
    assert_eq!(dense.bytes, bytes(30 + 35 + 7 + 42));
    assert_eq!(dense.intensity(), Some(420.0 / 456.0));
}

/// A value the next op broadcasts ends its chain: a squeeze-excite's
/// sigmoid of one factor per channel is its own step, not computed again
/// for every pixel of the product, in every layout, equal to the reference.
#[test]
fn a_value_the_next_op_broadcasts_ends_its_chain() {
    let mut rng = Rng(9);
    let (c, h, w) = (24, 5, 6);
    let mut g = Graph::new("squeeze-excite");
    let x = g.add_input("x", ValueType::new(DType::F32, vec![1, c, h, w]), vec![]);
    let s = g.add_input("s", ValueType::new(DType::F32, vec![1, c, 1, 1]), vec![]);
    let factor = node(&mut g, Op::Unary(UnaryOp::Sigmoid), &[s]);
    let factor = node(&mut g, Op::Unary(UnaryOp::Neg), &[factor]);
    let excited = node(&mut g, Op::Binary(BinaryOp::Mul), &[x, factor]);
    let y = node(&mut g, Op::Unary(UnaryOp::Relu), &[excited]);
    g.set_outputs(vec![y]);
    let inputs = [
        Tensor::from_f32(vec![1, c, h, w], rng.f32s(c * h * w)),
        Tensor::from_f32(vec![1, c, 1, 1], rng.f32s(c)),
    ];
    let expected = crate::reference::run(&g, &inputs).unwrap()[0].to_f32();
    for family in FAMILIES {
        let m = compile_on(1, &planned_for(&g, family));
        let steps = m.describe();
        let kinds: Vec<&str> = m.steps.iter().map(|s| s.kind.as_str()).collect();
        assert!(
            kinds.contains(&"Sigmoid+Neg") && kinds.contains(&"Mul+Relu"),
            "{family}: {steps:#?}"
        );
        assert!(m.fallback_steps().is_empty(), "{family}: {steps:#?}");
        let got = m.run(&inputs).unwrap()[0].to_f32();
        assert_close(&got, &expected, &format!("{family}"));
    }
}

/// Reshapes, slices and splits along the outermost axis read a contiguous piece
/// of their input: they become views (no step) and compute what the reference
/// computes; one whose input is a graph input or whose output is a graph
/// output keeps its copy.
#[test]
fn contiguous_movements_are_views_of_their_input() {
    use crate::ops::{Reshape, Slice, SliceAxis, Split};
    let mut g = Graph::new("views");
    let x = g.add_input("x", ValueType::new(DType::F32, vec![4, 3, 5]), vec![]);
    let node = |g: &mut Graph, op: Op, name: &str, ins: &[ValueRef]| {
        ValueRef::new(g.add_node(op, name, ins, &[], vec![]).unwrap(), 0)
    };
    let relu = node(&mut g, Op::Unary(UnaryOp::Relu), "relu", &[x]);
    let flat = node(
        &mut g,
        Op::Reshape(Reshape { shape: vec![4, 15] }),
        "flat",
        &[relu],
    );
    let rows = Op::Slice(Slice {
        axes: vec![SliceAxis {
            axis: 0,
            start: 1,
            end: 3,
            step: 1,
        }],
    });
    let rows = node(&mut g, rows, "rows", &[flat]);
    let neg = node(&mut g, Op::Unary(UnaryOp::Neg), "neg", &[rows]);
    let split = Op::Split(Split {
        axis: 0,
        sizes: vec![1, 3],
    });
    let parts = g.add_node(split, "split", &[relu], &[], vec![]).unwrap();
    let (first, rest) = (ValueRef::new(parts, 0), ValueRef::new(parts, 1));
    let tail = node(&mut g, Op::Unary(UnaryOp::Exp), "tail", &[rest]);
    let sum = node(&mut g, Op::Binary(BinaryOp::Add), "sum", &[first, tail]);
    // A graph input and a graph output keep their copies.
    let of_input = node(
        &mut g,
        Op::Reshape(Reshape { shape: vec![60] }),
        "of_input",
        &[x],
    );
    let as_output = node(
        &mut g,
        Op::Reshape(Reshape { shape: vec![12, 5] }),
        "as_output",
        &[relu],
    );
    g.set_outputs(vec![neg, sum, of_input, as_output]);
    let m = compile_on(2, &g);
    let kinds: Vec<&str> = m.steps.iter().map(|s| s.kind.as_str()).collect();
    let movements = kinds
        .iter()
        .filter(|k| {
            ["Reshape", "Slice", "Split"]
                .iter()
                .any(|m| k.starts_with(m))
        })
        .count();
    assert_eq!(
        movements, 2,
        "only the input's and the output's reshapes copy: {kinds:?}"
    );
    let mut rng = Rng(11);
    let input = Tensor::from_f32(vec![4, 3, 5], rng.f32s(60));
    let expected = crate::reference::run(&g, std::slice::from_ref(&input)).unwrap();
    for _ in 0..2 {
        let got = m.run(std::slice::from_ref(&input)).unwrap();
        for (k, (a, e)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(a.shape, e.shape, "output {k}");
            assert_close(&a.to_f32(), &e.to_f32(), &format!("output {k}"));
        }
    }
}

/// A classifier after a pooled, channel-blocked feature map: the planner
/// stores the feature vector NC16c (the bytes of row-major), and the product
/// still runs the packed dense kernel rather than a loop nest.
#[test]
fn a_classifier_on_a_blocked_feature_vector_runs_the_dense_kernel() {
    use crate::graph::{GlobalPool, PoolKind, Reshape};
    let mut rng = Rng(23);
    let (cin, c, classes) = (16, 32, 10);
    let mut g = Graph::new("classifier");
    let x_ty = ValueType::new(DType::F32, vec![1, cin, 6, 6]);
    let x = g.add_input("x", x_ty.clone(), vec![]);
    let mut constant = |g: &mut Graph, name: &str, shape: Vec<usize>| {
        let data = rng.f32s(shape.iter().product());
        g.add_constant(name, Tensor::from_f32(shape, data), vec![])
    };
    let w = constant(&mut g, "w", vec![c, cin, 3, 3]);
    let dense = constant(&mut g, "dense", vec![c, classes]);
    let conv = Op::Conv(Conv {
        window: crate::ops::testutil::square_window(3, 1, 1),
        group: 1,
    });
    let y = node(&mut g, conv, &[x, w]);
    let pooled = Op::GlobalPool(GlobalPool {
        kind: PoolKind::Avg,
    });
    let y = node(&mut g, pooled, &[y]);
    let flat = Op::Reshape(Reshape { shape: vec![1, c] });
    let y = node(&mut g, flat, &[y]);
    let y = node(&mut g, Op::MatMul, &[y, dense]);
    g.set_outputs(vec![y]);
    let inputs = [Tensor::from_f32(x_ty.shape.clone(), rng.f32s(x_ty.numel()))];
    let expected = crate::reference::run(&g, &inputs).unwrap()[0].to_f32();
    let planner = planner_by_name("global").unwrap();
    let planned = plan(
        &g,
        planner.as_ref(),
        TargetFamily::Nchwc(16),
        &CostModel::default(),
    )
    .unwrap()
    .graph;
    let matmul = planned
        .node_ids()
        .into_iter()
        .find(|&id| matches!(crate::fusion::inner(&planned, id).0, Op::MatMul))
        .unwrap();
    let (layout, _) = crate::fusion::input_layout(&planned, matmul, 0).unwrap();
    assert!(
        !layout.is_identity(),
        "the feature vector is stored row-major"
    );
    let m = CompiledModel::compile(&planned, &RuntimeOptions::default()).unwrap();
    assert!(matches!(
        step(&m, "MatMul").kernel,
        crate::runtime::model::Kernel::Dense(_)
    ));
    let got = m.run(&inputs).unwrap()[0].to_f32();
    assert_close(&got, &expected, "classifier");
}

/// x[1, c, h, w] -> `resize` between two depthwise 1x1 Convs of weight 1 (a
/// reason for the planner to block the channels, passing NaN and infinities
/// as they are).
fn resize_graph(resize: crate::ops::Resize, [c, h, w]: [usize; 3]) -> Graph {
    let mut g = Graph::new("resize");
    let x = g.add_input("x", ValueType::new(DType::F32, vec![1, c, h, w]), vec![]);
    let ones = Tensor::from_f32(vec![c, 1, 1, 1], vec![1.0; c]);
    let ones = g.add_constant("ones", ones, vec![]);
    let conv = Op::Conv(Conv {
        window: crate::ops::testutil::square_window(1, 1, 0),
        group: c,
    });
    let mut node = |op: Op, name: &str, ins: &[ValueRef]| {
        ValueRef::new(g.add_node(op, name, ins, &[], vec![]).unwrap(), 0)
    };
    let y = node(conv.clone(), "dw", &[x, ones]);
    let y = node(Op::Resize(resize), "resize", &[y]);
    let y = node(conv, "dw2", &[y, ones]);
    g.set_outputs(vec![y]);
    g
}

/// Random resizes of the spatial axes (up and down, by 2, by 0.5 and by
/// uneven ratios; every mode, coordinate transformation and rounding, with
/// anti-aliasing, exclude_outside and extrapolation), some inputs NaN or
/// infinite, planned in every layout family and compiled for every
/// instruction set: the native kernel (a gather where nearest only copies, a
/// copy where nothing is resized),
/// equal to the reference executor's result, between the convolutions with
/// no transform (in a blocked plan the blocked layout, padding channels
/// included, but for the smallest maps, which stay NCHW).
#[test]
fn compiled_resizes_match_the_reference_executor() {
    use crate::ops::{CoordTransform, NearestMode, Resize, ResizeFilter, ResizeMode};
    use crate::runtime::model::Kernel;
    use crate::runtime::test_support::{compiled_per_isa, FAMILIES};
    let mut rng = Rng(47);
    let coords = [
        CoordTransform::HalfPixel,
        CoordTransform::PytorchHalfPixel,
        CoordTransform::AlignCorners,
        CoordTransform::Asymmetric,
        CoordTransform::HalfPixelSymmetric,
        CoordTransform::TfCropAndResize,
    ];
    let modes = [ResizeMode::Nearest, ResizeMode::Linear, ResizeMode::Cubic];
    let roundings = [
        NearestMode::RoundPreferFloor,
        NearestMode::RoundPreferCeil,
        NearestMode::Floor,
        NearestMode::Ceil,
    ];
    let extents = [(7, 12), (13, 5), (8, 16), (16, 8), (6, 6), (5, 3), (1, 4)];
    for case in 0..72 {
        let family = FAMILIES[case % FAMILIES.len()];
        let (mode, coord) = (modes[case % 3], coords[case / 3 % 6]);
        let c = [16, 24, 8, 5, 32][rng.below(5)];
        let (h, oh) = extents[rng.below(extents.len())];
        let (w, ow) = extents[rng.below(extents.len())];
        let mut window = |n: f32| {
            let start = rng.below(5) as f32 / 10.0 - 0.2;
            (start, start + n / 10.0)
        };
        let crop = (coord == CoordTransform::TfCropAndResize).then(|| {
            let roi = vec![(0.0, 1.0), (0.0, 1.0), window(9.0), window(12.0)];
            (roi, [0.0, 0.5, -2.0][case % 3])
        });
        let resize = Resize {
            mode,
            coord,
            nearest: roundings[rng.below(4)],
            scales: vec![1.0, 1.0, oh as f32 / h as f32, ow as f32 / w as f32],
            sizes: vec![1, c, oh, ow],
            filter: ResizeFilter {
                cubic_a: [-0.75, -0.5][rng.below(2)],
                exclude_outside: rng.below(3) == 0,
                antialias: rng.below(3) == 0,
            },
            crop,
        };
        let what = format!("case {case} {family} {c}x{h}x{w} -> {oh}x{ow} {resize:?}");
        let copies = crate::ops::OpDef::moves_data(&resize);
        let g = resize_graph(resize, [c, h, w]);
        let mut x = rng.f32s(c * h * w);
        if case % 3 == 1 {
            for v in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                let at = rng.below(x.len());
                x[at] = v;
            }
        }
        let inputs = [Tensor::from_f32(vec![1, c, h, w], x)];
        let expected = crate::reference::run(&g, &inputs).unwrap()[0].to_f32();
        let planned = planned_for(&g, family);
        let id = planned
            .node_ids()
            .into_iter()
            .find(|&id| planned.node(id).name == "resize")
            .unwrap();
        let (layout, _) = crate::fusion::input_layout(&planned, id, 0).unwrap();
        let producer = planned.node_inputs(id)[0].node;
        let consumers = planned.consumers(ValueRef::new(id, 0));
        assert!(
            planned.node(producer).name == "dw"
                && consumers
                    .iter()
                    .all(|&(n, _)| planned.node(n).name == "dw2"),
            "{what}: a transform next to the resize in {layout}"
        );
        for (isa, m) in compiled_per_isa(&planned) {
            // A resize that changes no extent is an identity, which the
            // graph passes may remove altogether.
            let native = match m.steps.iter().find(|s| s.kind.contains("Resize")) {
                Some(step) => match step.kernel {
                    Kernel::Resize(_) => !copies,
                    Kernel::Gather(_) => copies,
                    Kernel::Copy => (h, w) == (oh, ow),
                    _ => false,
                },
                None => (h, w) == (oh, ow),
            };
            assert!(native, "{what}: {:?}", m.describe());
            let got = m.run(&inputs).unwrap()[0].to_f32();
            assert_close(&got, &expected, &format!("{what} {isa}"));
        }
    }
}

/// The native kernel also resizes the H and W of a tensor stored NHWC as
/// TFLite models give it (channels innermost of the logical shape), and one
/// axis alone (planes of one row), equal to the reference executor.
#[test]
fn resizes_of_other_axes_run_natively() {
    use crate::ops::{CoordTransform, NearestMode, Resize, ResizeMode};
    use crate::runtime::model::Kernel;
    let mut rng = Rng(48);
    let cases = [
        (vec![1, 9, 7, 6], vec![1, 18, 5, 6], ResizeMode::Linear),
        (vec![2, 9, 7, 3], vec![2, 4, 14, 3], ResizeMode::Cubic),
        (vec![2, 3, 10], vec![2, 3, 25], ResizeMode::Cubic),
        (vec![2, 3, 10, 4], vec![2, 3, 10, 9], ResizeMode::Linear),
    ];
    for (shape, sizes, mode) in cases {
        let resize = Resize {
            mode,
            coord: CoordTransform::HalfPixel,
            nearest: NearestMode::RoundPreferFloor,
            scales: shape
                .iter()
                .zip(&sizes)
                .map(|(&n, &m)| m as f32 / n as f32)
                .collect(),
            sizes: sizes.clone(),
            filter: Default::default(),
            crop: None,
        };
        let mut g = Graph::new("resize");
        let ty = ValueType::new(DType::F32, shape.clone());
        let x = g.add_input("x", ty.clone(), vec![]);
        let y = g.add_node(Op::Resize(resize), "resize", &[x], &[], vec![]);
        g.set_outputs(vec![ValueRef::new(y.unwrap(), 0)]);
        let inputs = [Tensor::from_f32(shape.clone(), rng.f32s(ty.numel()))];
        let expected = crate::reference::run(&g, &inputs).unwrap()[0].to_f32();
        let m = compile_on(2, &g);
        assert!(
            matches!(m.steps[0].kernel, Kernel::Resize(_)),
            "{shape:?} -> {sizes:?}: {:?}",
            m.describe()
        );
        let got = m.run(&inputs).unwrap()[0].to_f32();
        assert_close(&got, &expected, &format!("{shape:?} -> {sizes:?}"));
    }
}

/// A quantized input moved into another layout as bytes, as the planner
/// places the transpose of a full-integer TFLite model's input (before its
/// cast to float: a quarter of the bytes), and cast to f32 there: both run
/// natively, a permutation and a channel-blocked layout whose padding the
/// transform fills, equal to the reference executor.
#[test]
fn quantized_inputs_move_and_cast_natively_in_any_layout() {
    use crate::core::{Layout, PadValue, TensorData};
    use crate::ops::{Cast, LaidOut, LayoutTransform};
    let logical = vec![1, 3, 4, 5];
    let identity = Layout::identity(4).unwrap();
    let transform = |from: &Layout, to: &Layout, pad: PadValue| {
        Op::LayoutTransform(LayoutTransform {
            from: from.clone(),
            to: to.clone(),
            logical: logical.clone(),
            pad,
        })
    };
    let node = |g: &mut Graph, op: Op, name: &str, x: ValueRef| {
        ValueRef::new(g.add_node(op, name, &[x], &[], vec![]).unwrap(), 0)
    };
    let nhwc = Layout::permutation(&[0, 2, 3, 1]).unwrap();
    let blocked = Layout::parse("NCHW2c").unwrap();
    let mut g = Graph::new("moved bytes");
    let x = g.add_input("x", ValueType::new(DType::I8, logical.clone()), vec![]);
    // Bytes to NHWC, cast to f32 there, back to NCHW as floats.
    let moved = node(
        &mut g,
        transform(&identity, &nhwc, PadValue::Undef),
        "to_nhwc",
        x,
    );
    let cast = Op::InLayout(Box::new(LaidOut {
        inner: Op::Cast(Cast {
            to: DType::F32,
            saturate: true,
        }),
        inputs: vec![(nhwc.clone(), logical.clone())],
        outputs: vec![(nhwc.clone(), PadValue::Undef)],
    }));
    let floats = node(&mut g, cast, "cast", moved);
    let back = node(
        &mut g,
        transform(&nhwc, &identity, PadValue::Undef),
        "back",
        floats,
    );
    // Bytes to a blocked layout padded with 5 (3 channels in blocks of 2), and back.
    let padded = node(
        &mut g,
        transform(&identity, &blocked, PadValue::Known(5.0)),
        "pad",
        x,
    );
    let unpadded = node(
        &mut g,
        transform(&blocked, &identity, PadValue::Undef),
        "crop",
        padded,
    );
    g.set_outputs(vec![back, padded, unpadded]);
    let mut rng = Rng(5);
    let bytes: Vec<i8> = (0..60).map(|_| rng.range(0, 255) as i8).collect();
    let input = Tensor::new(logical.clone(), TensorData::I8(bytes));
    let expected = crate::reference::run(&g, std::slice::from_ref(&input)).unwrap();
    let m = compile_on(1, &g);
    assert!(m.fallback_steps().is_empty(), "{}", m.describe().join("\n"));
    let got = m.run(std::slice::from_ref(&input)).unwrap();
    assert_eq!(got.len(), 3);
    for (k, (a, e)) in got.iter().zip(&expected).enumerate() {
        assert_eq!((&a.shape, a.dtype()), (&e.shape, e.dtype()), "output {k}");
        assert_eq!(a.data.to_f64(), e.data.to_f64(), "output {k}");
    }
}

/// A QuantizeDequantize onto a grid of signed bytes.
fn grid(scale: f32, zero_point: f32) -> Op {
    Op::Unary(UnaryOp::QuantizeDequantize {
        scale,
        zero_point,
        min: -128.0,
        max: 127.0,
    })
}

/// Convolution weights of `shape` (OIHW) on a grid of signed bytes of step
/// `step(o)` per output channel `o`: each channel's first weight 127 steps,
/// the others any byte.
fn int8_weights(
    g: &mut Graph,
    rng: &mut Rng,
    shape: [usize; 4],
    step: impl Fn(usize) -> f32,
) -> ValueRef {
    let per_out = shape[1] * shape[2] * shape[3];
    let wt: Vec<f32> = (0..shape[0] * per_out)
        .map(|i| {
            let q = match i % per_out {
                0 => 127.0,
                _ => rng.range(0, 254) as f32 - 127.0,
            };
            q * step(i / per_out)
        })
        .collect();
    g.add_constant("w", Tensor::from_f32(shape.to_vec(), wt), vec![])
}

/// Two quantized convolutions of a channels-last graph as the TFLite
/// importer writes it: each between a transpose to NCHW and one back, its
/// relu before the rounding onto its output grid. Planned, the transposes
/// only relabel: the relu and the rounding run in the first convolution's
/// integer epilogue, and it hands its output to the second as that one's
/// staged bytes, through the relabels. Every scale is a power of two, so
/// the float reference is exact too and the outputs are equal.
#[test]
fn quantized_convs_hand_over_bytes_through_relabelling_transposes() {
    let (h, w, c) = (6, 7, 32);
    let mut rng = Rng(7);
    let mut g = Graph::new("channels-last int8");
    let x = g.add_input("x", ValueType::new(DType::F32, vec![1, h, w, c]), vec![]);
    let mut v = node(&mut g, grid(1.0 / 16.0, 3.0), &[x]);
    for layer in 0..2 {
        // Per output channel a step of 2^-6..2^-8.
        let step = |o: usize| 1.0 / (64 << (o % 3)) as f32;
        let wt = int8_weights(&mut g, &mut rng, [c, c, 3, 3], step);
        let conv = Op::Conv(Conv {
            window: crate::ops::testutil::square_window(3, 1, 1),
            group: 1,
        });
        let to_nchw = node(&mut g, transpose([0, 3, 1, 2]), &[v]);
        let y = node(&mut g, conv, &[to_nchw, wt]);
        let y = node(&mut g, Op::Unary(UnaryOp::Relu), &[y]);
        let back = node(&mut g, transpose([0, 2, 3, 1]), &[y]);
        v = node(&mut g, grid(1.0 / (4 << layer) as f32, -5.0), &[back]);
    }
    g.set_outputs(vec![v]);
    let input = Tensor::from_f32(vec![1, h, w, c], rng.f32s(h * w * c));
    let inputs = std::slice::from_ref(&input);
    let expected = crate::reference::run(&g, inputs).unwrap()[0].to_f32();
    let m = compile_on(1, &planned_for(&g, TargetFamily::Nchwc(16)));
    let steps = m.describe();
    let int8 = "Relu+Transpose+QuantizeDequantize (int8)";
    assert!(
        steps.iter().filter(|s| s.contains(int8)).count() == 2
            && steps.iter().any(|s| s.contains(&format!("{int8} -> u8"))),
        "{steps:#?}"
    );
    assert_eq!(m.run(inputs).unwrap()[0].to_f32(), expected);
}

/// A MobileNet block in int8: a 1x1 expand convolution with relu, a 3x3
/// depthwise one with relu6 (stride 1 and 2), a 1x1 project one, each
/// rounded onto a grid. The depthwise convolution sums its integers and
/// hands its outputs to the project one as bytes; 40 expanded channels
/// leave a partial vector. With
/// power-of-two scales every sum is exact in f32, so the outputs equal the
/// reference's.
#[test]
fn depthwise_convolutions_hand_bytes_to_integer_ones() {
    let (h, w, c, wide) = (9, 11, 12, 40);
    let mut rng = Rng(11);
    for stride in [1, 2] {
        let mut g = Graph::new("int8 inverted residual");
        let x = g.add_input("x", ValueType::new(DType::F32, vec![1, c, h, w]), vec![]);
        let v = node(&mut g, grid(1.0 / 16.0, 3.0), &[x]);
        let conv = |k: usize, stride: usize, group: usize| {
            Op::Conv(Conv {
                window: crate::ops::testutil::square_window(k, stride, k / 2),
                group,
            })
        };
        let expand = int8_weights(&mut g, &mut rng, [wide, c, 1, 1], |_| 1.0 / 64.0);
        let v = node(&mut g, conv(1, 1, 1), &[v, expand]);
        let v = node(&mut g, Op::Unary(UnaryOp::Relu), &[v]);
        let v = node(&mut g, grid(1.0 / 4.0, -128.0), &[v]);
        let depthwise = int8_weights(&mut g, &mut rng, [wide, 1, 3, 3], |_| 1.0 / 64.0);
        let v = node(&mut g, conv(3, stride, wide), &[v, depthwise]);
        let relu6 = UnaryOp::Clip { min: 0.0, max: 6.0 };
        let v = node(&mut g, Op::Unary(relu6), &[v]);
        let v = node(&mut g, grid(1.0 / 32.0, -128.0), &[v]);
        let project = int8_weights(&mut g, &mut rng, [c, wide, 1, 1], |_| 1.0 / 64.0);
        let v = node(&mut g, conv(1, 1, 1), &[v, project]);
        let v = node(&mut g, grid(1.0 / 2.0, 1.0), &[v]);
        g.set_outputs(vec![v]);
        let input = Tensor::from_f32(vec![1, c, h, w], rng.f32s(c * h * w));
        let inputs = std::slice::from_ref(&input);
        let expected = crate::reference::run(&g, inputs).unwrap()[0].to_f32();
        for threads in [1, 2] {
            let m = compile_on(threads, &planned_for(&g, TargetFamily::Nchwc(16)));
            let steps = m.describe();
            let handed = steps
                .iter()
                .any(|s| s.contains("(depthwise, integers) -> u8"));
            assert!(handed, "{steps:#?}");
            assert_eq!(
                m.run(inputs).unwrap()[0].to_f32(),
                expected,
                "stride {stride}"
            );
        }
    }
}

/// An elementwise chain of one quantized value that an integer convolution
/// alone computes (a square rounded onto a grid, then the sum of it and the
/// value, rounded again) runs as a table looked up in that convolution's
/// epilogue, after a 1x1 convolution and after a depthwise one: no step of
/// its own. Power-of-two scales keep every product, sum and rounding exact
/// (no square lands on half a step), so the outputs equal the reference's.
#[test]
fn tables_of_integer_convolution_outputs_run_in_their_epilogues() {
    let (h, w, c, wide) = (7, 9, 8, 24);
    let mut rng = Rng(5);
    let mut g = Graph::new("int8 tables");
    let x = g.add_input("x", ValueType::new(DType::F32, vec![1, c, h, w]), vec![]);
    let v = node(&mut g, grid(1.0 / 16.0, 3.0), &[x]);
    let conv = |k: usize, group: usize| {
        Op::Conv(Conv {
            window: crate::ops::testutil::square_window(k, 1, k / 2),
            group,
        })
    };
    let table = |g: &mut Graph, v: ValueRef, squares: Op, sums: Op| {
        let square = node(g, Op::Binary(BinaryOp::Mul), &[v, v]);
        let square = node(g, squares, &[square]);
        let sum = node(g, Op::Binary(BinaryOp::Add), &[square, v]);
        node(g, sums, &[sum])
    };
    let expand = int8_weights(&mut g, &mut rng, [wide, c, 1, 1], |_| 1.0 / 64.0);
    let v = node(&mut g, conv(1, 1), &[v, expand]);
    let v = node(&mut g, grid(1.0 / 4.0, -10.0), &[v]);
    let v = table(&mut g, v, grid(1.0 / 2.0, -128.0), grid(1.0, -100.0));
    let depthwise = int8_weights(&mut g, &mut rng, [wide, 1, 3, 3], |_| 1.0 / 64.0);
    let v = node(&mut g, conv(3, wide), &[v, depthwise]);
    let v = node(&mut g, grid(1.0 / 8.0, 4.0), &[v]);
    let v = table(&mut g, v, grid(1.0 / 4.0, -128.0), grid(1.0 / 2.0, -20.0));
    g.set_outputs(vec![v]);
    let input = Tensor::from_f32(vec![1, c, h, w], rng.f32s(c * h * w));
    let inputs = std::slice::from_ref(&input);
    let expected = crate::reference::run(&g, inputs).unwrap()[0].to_f32();
    for threads in [1, 2] {
        let m = compile_on(threads, &planned_for(&g, TargetFamily::Nchwc(16)));
        let steps = m.describe();
        let chain = "+Mul+QuantizeDequantize+Add+QuantizeDequantize (table)";
        for conv in ["(int8)", "(depthwise, integers)"] {
            let joined = format!("{conv}{chain}");
            assert!(steps.iter().any(|s| s.contains(&joined)), "{steps:#?}");
        }
        assert_eq!(m.run(inputs).unwrap()[0].to_f32(), expected);
    }
}

/// Integers are boxed row-major at run time, so the planner keeps their
/// transposes and reshapes row-major (a transpose relabelled as a layout
/// would leave both steps on the reference executor): in every family the
/// index arithmetic of a position table runs natively, equal to the
/// reference executor.
#[test]
fn integer_transposes_and_reshapes_stay_row_major_and_native() {
    let mut g = Graph::new("positions");
    let x = g.add_input("x", ValueType::new(DType::I64, vec![2, 3]), vec![]);
    let span = |name: &str| vec![crate::core::Span::new("p.onnx", name, name, 0)];
    let swap = Op::Transpose(crate::ops::Transpose { perm: vec![1, 0] });
    let t = g.add_node(swap, "swap", &[x], &[], span("swap")).unwrap();
    let flat = Op::Reshape(crate::ops::Reshape { shape: vec![6] });
    let t = ValueRef::new(t, 0);
    let r = g.add_node(flat, "flat", &[t], &[], span("flat")).unwrap();
    g.set_outputs(vec![ValueRef::new(r, 0)]);
    let input = Tensor::new(
        vec![2, 3],
        crate::graph::TensorData::I64(vec![1, 2, 3, 4, 5, 6]),
    );
    let expected = crate::reference::run(&g, std::slice::from_ref(&input)).unwrap();
    for family in FAMILIES {
        let m = compile_on(1, &planned_for(&g, family));
        assert!(
            m.fallback_steps().is_empty(),
            "{family}: {}",
            m.describe().join("\n")
        );
        let got = m.run(std::slice::from_ref(&input)).unwrap();
        assert_eq!(*got[0].data, *expected[0].data, "{family}");
    }
}

/// Products by constant matrices on per-column grids of signed bytes, of
/// inputs on a grid of bytes: a MatMul of a batch of rows (rank 3) and a
/// Gemm with its matrix transposed, a scale and a bias per column. Each
/// runs as integer sums (the 1x1 integer convolution over the rows) on
/// every instruction set; with power-of-two steps every float sum is exact
/// too, so the outputs equal the reference executor's.
#[test]
fn products_by_constant_matrices_on_grids_sum_integers() {
    use crate::graph::Gemm;
    use crate::runtime::model::Kernel;
    use crate::runtime::test_support::compiled_per_isa;
    let (rows, k, n) = (10, 40, 24);
    let mut rng = Rng(31);
    // Column `o`'s step: 2^-6..2^-8; any byte but the first of each column.
    let on_grid = |rng: &mut Rng, at: usize, o: usize| {
        let q = match at < n {
            true => 127.0,
            false => rng.range(0, 254) as f32 - 127.0,
        };
        q / (64 << (o % 3)) as f32
    };
    for gemm in [false, true] {
        let mut g = Graph::new("integer products");
        let shape = match gemm {
            false => vec![2, rows / 2, k],
            true => vec![rows, k],
        };
        let x = g.add_input("x", ValueType::new(DType::F32, shape.clone()), vec![]);
        let q = node(&mut g, grid(1.0 / 16.0, 3.0), &[x]);
        let y = match gemm {
            false => {
                // k x n: column `at % n`.
                let w: Vec<f32> = (0..k * n).map(|at| on_grid(&mut rng, at, at % n)).collect();
                let w = g.add_constant("w", Tensor::from_f32(vec![k, n], w), vec![]);
                node(&mut g, Op::MatMul, &[q, w])
            }
            true => {
                // n x k, transposed: column `at / k`.
                let w: Vec<f32> = (0..n * k)
                    .map(|at| on_grid(&mut rng, (at % k) * n + at / k, at / k))
                    .collect();
                let w = g.add_constant("w", Tensor::from_f32(vec![n, k], w), vec![]);
                let bias: Vec<f32> = (0..n).map(|o| o as f32 / 8.0 - 1.0).collect();
                let bias = g.add_constant("b", Tensor::from_f32(vec![n], bias), vec![]);
                let op = Op::Gemm(Gemm {
                    alpha: 0.5,
                    beta: 2.0,
                    trans_a: false,
                    trans_b: true,
                });
                node(&mut g, op, &[q, w, bias])
            }
        };
        g.set_outputs(vec![y]);
        let input = Tensor::from_f32(shape.clone(), rng.f32s(rows * k));
        let inputs = std::slice::from_ref(&input);
        let expected = crate::reference::run(&g, inputs).unwrap()[0].to_f32();
        let planned = planned_for(&g, TargetFamily::Nchwc(16));
        for (isa, m) in compiled_per_isa(&planned) {
            let integer = m
                .steps
                .iter()
                .any(|s| matches!(s.kernel, Kernel::IntegerDense(_)) && s.kind.ends_with("(int8)"));
            assert!(integer, "{isa:?}: {:#?}", m.describe());
            assert_eq!(m.integer_dense_steps(), 1, "{isa:?}");
            assert_eq!(
                m.run(inputs).unwrap()[0].to_f32(),
                expected,
                "{isa:?} gemm {gemm}"
            );
        }
    }
}

/// A TFLite model's average pool between transposes, as its importer writes
/// it: a 2x2 window of values on a grid, rounded back onto that grid. The
/// pool sums the window's integers and rounds halves away from zero (TFLite's
/// integer kernel) where every reader rounds onto its input's grid, through
/// data movement alone: not in an ONNX model (onnxruntime rounds the float
/// mean, as the reference does), not where the mean itself is an output.
#[test]
fn tflite_average_pools_round_their_integers_where_every_reader_rounds() {
    use crate::graph::{PoolKind, QuantizedArithmetic};
    let (h, w, c) = (6, 8, 20);
    let (scale, zero_point) = (0.25, -3.0);
    let mut rng = Rng(5);
    let q: Vec<i64> = (0..h * w * c)
        .map(|_| rng.range(0, 255) as i64 - 128)
        .collect();
    let x: Vec<f32> = q.iter().map(|&v| (v as f32 - zero_point) * scale).collect();
    let input = Tensor::from_f32(vec![1, h, w, c], x);
    // TFLite's integer average of each 2x2 window, NHWC.
    let mut tflite = vec![];
    for (y, x, ch) in
        (0..h / 2).flat_map(|y| (0..w / 2).flat_map(move |x| (0..c).map(move |ch| (y, x, ch))))
    {
        let sum: i64 = [(0, 0), (0, 1), (1, 0), (1, 1)]
            .iter()
            .map(|(dy, dx)| q[((2 * y + dy) * w + 2 * x + dx) * c + ch])
            .sum();
        let rounded = if sum > 0 {
            (sum + 2) / 4
        } else {
            (sum - 2) / 4
        };
        tflite.push((rounded as f32 - zero_point) * scale);
    }
    for (arithmetic, mean_is_output) in [
        (QuantizedArithmetic::Tflite, false),
        (QuantizedArithmetic::Onnxruntime, false),
        (QuantizedArithmetic::Tflite, true),
    ] {
        let mut g = Graph::new("tflite average pool");
        g.quantized_arithmetic = arithmetic;
        let x = g.add_input("x", ValueType::new(DType::F32, vec![1, h, w, c]), vec![]);
        let v = node(&mut g, grid(scale, zero_point), &[x]);
        let v = node(&mut g, transpose([0, 3, 1, 2]), &[v]);
        let mean = node(&mut g, crate::ops::testutil::pool_2x2(PoolKind::Avg), &[v]);
        let v = node(&mut g, transpose([0, 2, 3, 1]), &[mean]);
        let v = node(&mut g, grid(scale, zero_point), &[v]);
        g.set_outputs(if mean_is_output {
            vec![v, mean]
        } else {
            vec![v]
        });
        let inputs = std::slice::from_ref(&input);
        let reference = crate::reference::run(&g, inputs).unwrap()[0].to_f32();
        let m = compile_on(1, &planned_for(&g, TargetFamily::Nchwc(16)));
        let integers = m.steps.iter().any(|s| s.kind == "AveragePool (integers)");
        let what = format!("{arithmetic:?}, mean an output: {mean_is_output}");
        let got = m.run(inputs).unwrap()[0].to_f32();
        let want = match integers {
            true => &tflite,
            false => &reference,
        };
        assert_eq!(
            integers,
            !mean_is_output && arithmetic == QuantizedArithmetic::Tflite,
            "{what}"
        );
        assert_eq!(&got, want, "{what}");
        // Ties are common: the two roundings differ.
        assert_ne!(tflite, reference);
    }
}
