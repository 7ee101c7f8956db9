//! Tests of the e-graph rewriter: rule loading, the rules' effect on small
//! graphs (which transforms remain), spans, and extraction.

use super::egraph::graph_to_egraph;
use super::extract::{extract, rewrite_graph, Method, RewriteLimits};
use super::rules::{load_rules, parse_rules, RuleError, RuleSet, RuleSource, Stage};
use super::{Layout, PadValue};
use crate::graph::{DType, Graph, Op, Span, Tensor, UnaryOp, ValueRef, ValueType};
use crate::ops::testutil::conv_3x3;
use crate::ops::{LayoutTransform, Reshape, Split, Transpose};

fn span(layer: &str, op: &str, index: usize) -> Vec<Span> {
    vec![Span::new("test.onnx", layer, op, index)]
}

fn lt(from: &str, to: &str, logical: &[usize], pad: PadValue) -> Op {
    Op::LayoutTransform(LayoutTransform {
        from: Layout::parse(from).unwrap(),
        to: Layout::parse(to).unwrap(),
        logical: logical.to_vec(),
        pad,
    })
}

/// Adds the f32 graph input "x" of `shape`.
fn input_x(g: &mut Graph, shape: &[usize]) -> ValueRef {
    g.add_input(
        "x",
        ValueType::new(DType::F32, shape.to_vec()),
        span("x", "Input", 0),
    )
}

/// Adds a one-output node.
fn add(g: &mut Graph, op: Op, name: &str, ins: &[ValueRef], index: usize) -> ValueRef {
    let kind = op.kind_name();
    let id = g
        .add_node(op, name, ins, &[name.to_string()], span(name, kind, index))
        .unwrap();
    ValueRef::new(id, 0)
}

/// Adds a transform of a `SHAPE` tensor from layout `from` to `to`.
fn add_xform(
    g: &mut Graph,
    (from, to): (&str, &str),
    pad: PadValue,
    name: &str,
    input: ValueRef,
    index: usize,
) -> ValueRef {
    add(g, lt(from, to, &SHAPE, pad), name, &[input], index)
}

/// A rule the bundle dropped once it paid on no model (the planner puts
/// transforms after activations itself); its condition remains for rule files.
const UNARY_HOIST: &str =
    "unary-hoist: (xform ?a ?b ?q (unary ?f ?x)) => (unary ?f (xform ?a ?b ?p ?x)) if pad-before-unary";

/// The bundled rules and `UNARY_HOIST`.
fn rewrite(g: &Graph) -> (Graph, super::extract::RewriteReport) {
    let mut rules = RuleSource::Bundled.load().unwrap().layout;
    rules.extend(parse_rules(UNARY_HOIST, "hoist.rules").unwrap().layout);
    rewrite_graph(g, &rules, &RewriteLimits::default()).unwrap()
}

fn transforms(g: &Graph) -> Vec<Op> {
    g.node_ids()
        .into_iter()
        .map(|n| g.node(n).op.clone())
        .filter(|op| matches!(op, Op::LayoutTransform(_) | Op::PadWith(_) | Op::Crop(_)))
        .collect()
}

/// Deterministic inputs in [-2, 2) for each graph input.
fn inputs_for(g: &Graph) -> Vec<Tensor> {
    let mut state = 0x2545_f491_u32;
    g.inputs()
        .iter()
        .map(|&n| {
            let shape = g.node(n).outputs[0].ty.shape.clone();
            let v = (0..crate::graph::numel(&shape))
                .map(|_| {
                    state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (state >> 8) as f32 / (1u32 << 24) as f32 * 4.0 - 2.0
                })
                .collect();
            Tensor::from_f32(shape, v)
        })
        .collect()
}

/// The reference executor gives the same outputs for both graphs, within
/// `tol`, padding positions included (NaN, the undef fill, only matches NaN).
fn assert_same_outputs(before: &Graph, after: &Graph, tol: f32) {
    let inputs = inputs_for(before);
    let want = crate::reference::run(before, &inputs).unwrap();
    let got = crate::reference::run(after, &inputs).unwrap();
    assert_eq!(want.len(), got.len());
    for (w, g) in want.iter().zip(&got) {
        assert_eq!(w.shape, g.shape);
        for (i, (a, b)) in w.to_f32().iter().zip(g.to_f32()).enumerate() {
            let same = (a.is_nan() && b.is_nan()) || (a - b).abs() <= tol;
            assert!(same, "element {i}: {a} before, {b} after");
        }
    }
}

const ZERO: PadValue = PadValue::Known(0.0);
const SHAPE: [usize; 4] = [1, 17, 3, 3];

#[test]
fn bundled_rules_load() {
    let rules = RuleSource::Bundled.load().unwrap();
    let names = |rules: &[egg::Rewrite<_, _>]| -> Vec<String> {
        rules.iter().map(|r| r.name.to_string()).collect()
    };
    let (graph, layout) = (names(&rules.graph), names(&rules.layout));
    for want in [
        "compose",
        "same-layout",
        "reshape-sink",
        "transpose-compose",
        "transpose-identity",
    ] {
        assert!(
            layout.iter().any(|n| n == want),
            "missing layout rule {want}: {layout:?}"
        );
    }
    for want in ["pad-into-conv", "pad-into-pool", "pad-after-transpose"] {
        assert!(
            graph.iter().any(|n| n == want),
            "missing graph rule {want}: {graph:?}"
        );
    }
}

/// A `stage:` line puts a file's rules in the stages it names, and must come
/// before the first rule.
#[test]
fn stage_lines_place_rules() {
    let rule = "t: (transpose ?p ?x) => ?x if identity-perm";
    let both = parse_rules(&format!("stage: graph, layout\n{rule}\n"), "b.rules").unwrap();
    assert_eq!((both.graph.len(), both.layout.len()), (1, 1));
    let plain = parse_rules(rule, "p.rules").unwrap();
    assert_eq!((plain.graph.len(), plain.layout.len()), (0, 1));
    for (bad, what) in [
        (
            format!("{rule}\nstage: graph\n"),
            "before the file's first rule",
        ),
        ("stage: later\n".to_string(), "unknown stage 'later'"),
    ] {
        let e = parse_rules(&bad, "s.rules").unwrap_err().to_string();
        assert!(e.contains(what), "{e}");
    }
}

#[test]
fn rule_file_errors_name_file_and_line() {
    let text = "# fine\ninverse: (xform ?b ?a ?q (xform ?a ?b ?p ?x)) => ?x if restores-padding\n\nbroken: (xform ?a => ?x\n";
    let e = parse_rules(text, "mine.rules").unwrap_err();
    assert!(matches!(&e, RuleError::Syntax { line: 4, .. }), "{e}");
    assert!(e.to_string().starts_with("mine.rules:4:"), "{e}");
    for (bad, what) in [
        (
            "r: (xform ?a ?b ?p ?x) => ?x if no-such-check",
            "unknown condition",
        ),
        ("r: (xform ?a ?b ?p ?x) => ?y", "?y"),
        ("r: (unary ?f ?x) => ?x if pad-before-unary", "reads"),
        ("no rule here", "expected"),
        (
            "r: (unary ?f $undefined) => ?x",
            "'$undefined' is not defined",
        ),
        ("$ = (unary ?f ?x)", "definition's name"),
        ("$m = (unary ?f", "bad pattern for '$m'"),
    ] {
        let e = parse_rules(bad, "x.rules").unwrap_err().to_string();
        assert!(e.starts_with("x.rules:1:") && e.contains(what), "{e}");
    }
    // Through the directory loader, the path is named.
    let dir = std::env::temp_dir().join(format!("layoutopt-rules-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("a.rules"),
        "ok: (xform ?a ?a ?q ?x) => ?x if restores-padding\n",
    )
    .unwrap();
    std::fs::write(dir.join("b.rules"), "\n\nbad: (pad ?b\n").unwrap();
    let e = load_rules(&dir).unwrap_err().to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(e.contains("b.rules:3:"), "{e}");
}

/// A definition stands for its pattern in the lines below it, and may use
/// the definitions above it.
#[test]
fn definitions_expand_into_later_lines() {
    let text =
        "$inner = (unary ?f ?x)\n$outer = (unary ?g $inner)\nr: (binary ?m $outer $inner) => ?x\n";
    let spelled_out = "r: (binary ?m (unary ?g (unary ?f ?x)) (unary ?f ?x)) => ?x\n";
    let (a, b) = (
        parse_rules(text, "d.rules"),
        parse_rules(spelled_out, "e.rules"),
    );
    let lhs = |set: RuleSet| {
        set.stage(Stage::Layout)[0]
            .searcher
            .get_pattern_ast()
            .cloned()
    };
    assert_eq!(lhs(a.unwrap()), lhs(b.unwrap()));
}

/// A typed variable matches only an op of its kind: of sigmoid(relu(x)),
/// a rule that drops `?Relu` drops the relu alone.
#[test]
fn typed_variables_match_their_op_kind_only() {
    let mut g = Graph::new("t");
    let x = input_x(&mut g, &[2, 3]);
    let r = add(&mut g, Op::Unary(UnaryOp::Relu), "relu", &[x], 1);
    let y = add(&mut g, Op::Unary(UnaryOp::Sigmoid), "sigmoid", &[r], 2);
    g.set_outputs(vec![y]);
    let rules = parse_rules("drop-relu: (unary ?Relu ?x) => ?x", "t.rules").unwrap();
    let (out, report) =
        rewrite_graph(&g, rules.stage(Stage::Layout), &RewriteLimits::default()).unwrap();
    let kinds: Vec<&str> = (out.node_ids().into_iter())
        .map(|id| out.node(id).op.kind_name())
        .collect();
    assert_eq!(kinds, ["Input", "Sigmoid"]);
    assert_eq!(report.fired.len(), 1);
}

/// x -> to NCHW16c -> back -> relu -> to NCHW16c -> back: every pair cancels,
/// and the relu carries the spans of the transforms it absorbed.
#[test]
fn inverse_pairs_cancel_and_keep_spans() {
    let mut g = Graph::new("t");
    let x = input_x(&mut g, &SHAPE);
    let a = add_xform(&mut g, ("NCHW", "NCHW16c"), ZERO, "to1", x, 1);
    let b = add_xform(&mut g, ("NCHW16c", "NCHW"), ZERO, "back1", a, 2);
    let r = add(&mut g, Op::Unary(UnaryOp::Relu), "relu", &[b], 3);
    let c = add_xform(&mut g, ("NCHW", "NCHW16c"), ZERO, "to2", r, 4);
    let d = add_xform(&mut g, ("NCHW16c", "NCHW"), ZERO, "back2", c, 5);
    g.set_outputs(vec![d]);
    let (out, report) = rewrite(&g);
    assert!(transforms(&out).is_empty(), "{:?}", transforms(&out));
    assert_eq!(out.node_count(), 2);
    let relu = out.outputs()[0];
    assert!(matches!(out.node(relu.node).op, Op::Unary(UnaryOp::Relu)));
    assert_eq!(out.value(relu).name, "back2");
    // No source layer is lost; the relu carries at least the pair it absorbed.
    let layers = |n| -> Vec<String> {
        out.node(n)
            .spans
            .iter()
            .map(|s| s.layer.to_string())
            .collect()
    };
    for want in ["relu", "to2", "back2"] {
        assert!(
            layers(relu.node).iter().any(|l| l == want),
            "{:?}",
            layers(relu.node)
        );
    }
    assert_same_outputs(&g, &out, 0.0);
    let all: Vec<String> = out.node_ids().into_iter().flat_map(layers).collect();
    for want in ["x", "to1", "back1", "relu", "to2", "back2"] {
        assert!(all.iter().any(|l| l == want), "{all:?}");
    }
    assert_eq!(report.extract.method, Method::Exact);
    assert!(report.extract.cost < report.cost_before);
}

/// relu on the blocked tensor: the transform after it moves above it and
/// cancels the one before.
#[test]
fn transform_hoists_above_relu() {
    let mut g = Graph::new("t");
    let x = input_x(&mut g, &SHAPE);
    let a = add_xform(&mut g, ("NCHW", "NCHW16c"), ZERO, "to", x, 1);
    let r = add(&mut g, Op::Unary(UnaryOp::Relu), "relu", &[a], 2);
    let b = add_xform(&mut g, ("NCHW16c", "NCHW"), ZERO, "back", r, 3);
    g.set_outputs(vec![b]);
    let (out, _) = rewrite(&g);
    assert!(transforms(&out).is_empty());
    assert_eq!(out.node_count(), 2);
}

/// Back into the blocked layout: x's padding cancels only when it is known to
/// hold the value the last transform writes (exp turns 0 into 1).
#[test]
fn round_trip_cancels_only_under_known_padding() {
    let build = |first: PadValue, last: PadValue| {
        let mut g = Graph::new("t");
        let x = input_x(&mut g, &SHAPE);
        let a = add_xform(&mut g, ("NCHW", "NCHW16c"), first, "to", x, 1);
        let e = add(&mut g, Op::Unary(UnaryOp::Exp), "exp", &[a], 2);
        let b = add_xform(&mut g, ("NCHW16c", "NCHW"), ZERO, "back", e, 3);
        let c = add_xform(&mut g, ("NCHW", "NCHW16c"), last, "again", b, 4);
        g.set_outputs(vec![c]);
        g
    };
    // Every case ends in one transform (exp runs on the 153 logical elements,
    // then one transform writes the padding), and each output, padding
    // included, is what the original computes: 1 where exp(0) was kept, 0
    // where the last transform overwrote it. A rule that cancelled the last
    // transform against padding that holds 1 would fail the ZERO cases.
    for (first, last) in [
        (ZERO, PadValue::Known(1.0)),
        (ZERO, ZERO),
        (PadValue::Undef, ZERO),
    ] {
        let g = build(first, last);
        let (out, report) = rewrite(&g);
        assert_eq!(transforms(&out).len(), 1, "{:?}", transforms(&out));
        assert!(report.extract.cost < report.cost_before);
        assert_same_outputs(&g, &out, 1e-6);
        // Physical [1, 2, 3, 3, 16]: (0, 1, 0, 0, 1) is channel 17, padding.
        let padding = crate::reference::run(&out, &inputs_for(&g)).unwrap()[0].to_f32()[145];
        assert_eq!(padding, last.known().unwrap());
    }
}

/// Exact extraction pays a class shared by two users once, where the greedy
/// (tree-cost) choice counts it for each. Output 1 is relu(relu(T)) with T = x
/// transformed; output 2 is one relu more, which (relu being idempotent) equals
/// relu(x) transformed: cheaper on its own (2 steps against 4 with T's chain),
/// dearer once output 1's chain is paid anyway.
#[test]
fn exact_extraction_pays_shared_classes_once() {
    use super::egraph::{LEGraph, Lang};
    let shape = [1, 16, 4, 4];
    let mut g = Graph::new("t");
    let x = input_x(&mut g, &shape);
    let t = add(
        &mut g,
        lt("NCHW", "NHWC", &shape, PadValue::Undef),
        "to",
        &[x],
        1,
    );
    let s1 = add(&mut g, Op::Unary(UnaryOp::Relu), "s1", &[t], 2);
    let s2 = add(&mut g, Op::Unary(UnaryOp::Relu), "s2", &[s1], 3);
    let r2 = add(&mut g, Op::Unary(UnaryOp::Relu), "r2", &[s2], 4);
    g.set_outputs(vec![s2, r2]);
    let mut ge = graph_to_egraph(&g).unwrap();
    let eg: &mut LEGraph = &mut ge.egraph;
    let [out1, out2] = [ge.roots[0], ge.roots[1]];
    let Some(Lang::Unary([relu, _])) = eg[out2].nodes.first().cloned() else {
        panic!("output 2 is a relu");
    };
    let Some(Lang::Xform([from, to, pad, _])) = eg[t_class(eg, out1)].nodes.first().cloned() else {
        panic!("output 1 reads a transform");
    };
    let x_class = ge.classes[&x];
    let rx = eg.add(Lang::Unary([relu, x_class]));
    let alt = eg.add(Lang::Xform([from, to, pad, rx]));
    eg.union(alt, out2);
    eg.rebuild();
    let roots: Vec<_> = ge.roots.iter().map(|&r| ge.egraph.find(r)).collect();
    let (choice, report) = extract(&ge.egraph, &roots);
    assert_eq!(report.method, Method::Exact, "{:?}", report.note);
    let bytes = (shape.iter().product::<usize>() * 4) as f64;
    // T, s1, s2 and relu(s2): each reads and writes the tensor once.
    assert_eq!(report.cost, 4.0 * 2.0 * bytes);
    assert!(matches!(choice[&roots[1]], Lang::Unary(_)));
}

/// The class of the transform under output 1's two relus.
fn t_class(eg: &super::egraph::LEGraph, out1: egg::Id) -> egg::Id {
    let mut class = out1;
    for _ in 0..2 {
        let Some(super::egraph::Lang::Unary([_, below])) = eg[class].nodes.first() else {
            panic!("a relu");
        };
        class = eg.find(*below);
    }
    class
}

/// Deterministic weights in [-0.5, 0.5).
fn weights(shape: Vec<usize>, seed: u32) -> Tensor {
    let mut state = seed;
    let n = crate::graph::numel(&shape);
    let v = (0..n)
        .map(|_| {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (state >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        })
        .collect();
    Tensor::from_f32(shape, v)
}

/// A 3x3 conv (pad 1) placed in NCHW16c, as the planner places a layout-
/// constrained op: input and output blocked, output padding 0.
fn conv16c(
    g: &mut Graph,
    x: ValueRef,
    logical: &[usize],
    cout: usize,
    name: &str,
    index: usize,
) -> ValueRef {
    let cin = logical[1];
    let w = g.add_constant(
        &format!("{name}_w"),
        weights(vec![cout, cin, 3, 3], index as u32),
        vec![],
    );
    let b = g.add_constant(
        &format!("{name}_b"),
        weights(vec![cout], index as u32 + 7),
        vec![],
    );
    let inner = conv_3x3();
    let laid = crate::graph::LaidOut {
        inner,
        inputs: vec![
            (Layout::parse("NCHW16c").unwrap(), logical.to_vec()),
            (Layout::identity(4).unwrap(), vec![cout, cin, 3, 3]),
            (Layout::identity(1).unwrap(), vec![cout]),
        ],
        outputs: vec![(Layout::parse("NCHW16c").unwrap(), ZERO)],
    };
    add(g, Op::InLayout(Box::new(laid)), name, &[x, w, b], index)
}

fn count_transforms(g: &Graph) -> usize {
    transforms(g).len()
}

fn has_placed(g: &Graph, kind: &str) -> bool {
    g.node_ids()
        .into_iter()
        .any(|n| matches!(&g.node(n).op, Op::InLayout(l) if l.inner.kind_name() == kind))
}

/// A reshape that keeps the blocked channel axis whole ([1,17,4,4] ->
/// [1,17,16]) runs on the NCHW16c buffer and hands out NCW16c; one that
/// merges channels into another axis does not move.
#[test]
fn transforms_sink_across_a_reshape_that_keeps_the_block() {
    let build = |target: Vec<usize>, out_layout: &str| {
        let mut g = Graph::new("reshape");
        let s = [1, 17, 4, 4];
        let x = input_x(&mut g, &s);
        let t = add(&mut g, lt("NCHW", "NCHW16c", &s, ZERO), "to", &[x], 1);
        let c = conv16c(&mut g, t, &s, 17, "conv", 2);
        let b = add(
            &mut g,
            lt("NCHW16c", "NCHW", &s, PadValue::Undef),
            "back",
            &[c],
            3,
        );
        let r = add(
            &mut g,
            Op::Reshape(Reshape {
                shape: target.clone(),
            }),
            "reshape",
            &[b],
            4,
        );
        let id = Layout::identity(target.len()).unwrap().to_string();
        let out = add(
            &mut g,
            lt(&id, out_layout, &target, ZERO),
            "to_out",
            &[r],
            5,
        );
        g.set_outputs(vec![out]);
        g
    };
    let g = build(vec![1, 17, 16], "NCW16c");
    let (out, _) = rewrite(&g);
    assert_eq!(count_transforms(&out), 1, "{:?}", transforms(&out));
    assert!(has_placed(&out, "Reshape"));
    assert_same_outputs(&g, &out, 1e-5);
    let g = build(vec![1, 272], "NC16c");
    let (out, _) = rewrite(&g);
    assert_eq!(count_transforms(&out), 3);
    assert_same_outputs(&g, &out, 1e-5);
}

/// Two transposes compose into one; a pair that is the identity vanishes.
#[test]
fn transposes_compose() {
    let build = |p1: Vec<usize>, p2: Vec<usize>| {
        let mut g = Graph::new("tt");
        let x = input_x(&mut g, &[2, 3, 4]);
        let a = add(&mut g, Op::Transpose(Transpose { perm: p1 }), "t1", &[x], 1);
        let b = add(&mut g, Op::Transpose(Transpose { perm: p2 }), "t2", &[a], 2);
        g.set_outputs(vec![b]);
        g
    };
    let count = |g: &Graph| {
        g.node_ids()
            .into_iter()
            .filter(|&n| matches!(g.node(n).op, Op::Transpose(_)))
            .count()
    };
    let g = build(vec![1, 2, 0], vec![2, 0, 1]);
    let (out, _) = rewrite(&g);
    assert_eq!(count(&out), 0);
    assert_same_outputs(&g, &out, 0.0);
    let g = build(vec![1, 2, 0], vec![1, 0, 2]);
    let (out, _) = rewrite(&g);
    assert_eq!(count(&out), 1);
    assert_same_outputs(&g, &out, 0.0);
}

/// A multi-output op goes through the e-graph (as an op and one `get` per
/// output) and comes back computing the same values.
#[test]
fn multi_output_ops_round_trip() {
    let mut g = Graph::new("split");
    let s = [1, 6, 2, 2];
    let x = input_x(&mut g, &s);
    let t = add(&mut g, lt("NCHW", "NHWC", &s, ZERO), "to", &[x], 1);
    let b = add(&mut g, lt("NHWC", "NCHW", &s, ZERO), "back", &[t], 2);
    let split = Op::Split(Split {
        axis: 1,
        sizes: vec![2, 4],
    });
    let names = ["lo".to_string(), "hi".to_string()];
    let id = g
        .add_node(split, "split", &[b], &names, span("split", "Split", 3))
        .unwrap();
    let lo = add(
        &mut g,
        Op::Unary(UnaryOp::Relu),
        "relu",
        &[ValueRef::new(id, 0)],
        4,
    );
    g.set_outputs(vec![lo, ValueRef::new(id, 1)]);
    let (out, _) = rewrite(&g);
    assert_eq!(count_transforms(&out), 0);
    assert_eq!(out.value(out.outputs()[1]).name, "hi");
    assert_same_outputs(&g, &out, 0.0);
}

/// `lang_name`, which picks the rewrite region, names the e-node that graph
/// conversion builds for each kind of op.
#[test]
fn lang_names_are_the_nodes_conversion_builds() {
    use super::egraph::lang_name;
    use crate::graph::{BinaryOp, PoolKind};
    use crate::ops::{Concat, Crop, PadWith, Pool};
    let mut g = Graph::new("kinds");
    let x = input_x(&mut g, &SHAPE);
    let pool = Op::Pool(Pool {
        kind: PoolKind::Max,
        window: crate::ops::testutil::square_window(3, 1, 1),
        ceil_mode: false,
        count_include_pad: false,
    });
    let ops = [
        lt("NCHW", "NCHW16c", &SHAPE, ZERO),
        Op::Unary(UnaryOp::Relu),
        Op::Binary(BinaryOp::Add),
        pool,
        Op::Reshape(Reshape {
            shape: vec![1, 17, 9],
        }),
        Op::Transpose(Transpose {
            perm: vec![0, 2, 3, 1],
        }),
        Op::Concat(Concat { axis: 1 }),
        Op::PadWith(PadWith {
            begins: vec![0, 0, 1, 1],
            ends: vec![0, 0, 1, 1],
            value: ZERO,
        }),
        Op::Crop(Crop {
            begins: vec![0, 0, 1, 1],
            ends: vec![0, 0, 1, 1],
            assume: None,
        }),
        Op::Softmax(crate::ops::Softmax { axis: 1 }),
    ];
    let mut outs = vec![];
    for (i, op) in ops.into_iter().enumerate() {
        let ins: &[ValueRef] = match op {
            Op::Binary(_) | Op::Concat(_) => &[x, x],
            _ => &[x],
        };
        outs.push((
            lang_name(&op).unwrap(),
            add(&mut g, op, &format!("n{i}"), ins, i + 1),
        ));
    }
    g.set_outputs(outs.iter().map(|&(_, v)| v).collect());
    let ge = graph_to_egraph(&g).unwrap();
    for (name, v) in outs {
        let class = ge.egraph.find(ge.classes[&v]);
        let built: Vec<String> = ge.egraph[class]
            .nodes
            .iter()
            .map(|n| n.to_string())
            .collect();
        assert_eq!(built, [name], "{:?}", g.node(v.node).op);
    }
    assert_eq!(lang_name(&Op::Input), None);
}
