//! The e-graph rewriter on the bundled models: with a transform into a
//! channel-blocked layout (NCHW16c, or NCW16c / NC16c for other ranks) and
//! back inserted after every value, rewriting leaves no transform pair that
//! cancels, and the reference executor gives the original model's outputs.

use crate::support::bundled;
use crate::support::bundled::load_test_data;
use crate::support::compare::max_abs_err;
use crate::support::plan::plan_by_name;
use crate::support::values::sawtooth;
use layoutopt::frontend::onnx::{load_onnx, ImportOptions};
use layoutopt::graph::{DType, Graph, Op, ValueRef};
use layoutopt::layout::extract::{graph_cost, rewrite_graph, Method, RewriteLimits};
use layoutopt::layout::rules::RuleSource;
use layoutopt::layout::{Layout, PadValue};
use layoutopt::ops::LayoutTransform;
use std::collections::HashMap;
use std::path::Path;

/// The layout blocking axis 1 by 16, for a float tensor of rank 2 to 5.
fn blocked(rank: usize) -> Option<Layout> {
    let name = match rank {
        2 => "NC16c",
        3 => "NCW16c",
        4 => "NCHW16c",
        5 => "NCDHW16c",
        _ => return None,
    };
    Some(Layout::parse(name).unwrap())
}

/// A copy of `g` where every non-constant float value v of rank 2..5 is read
/// through back(to(v)): to the blocked layout (padding 0) and back.
fn with_round_trips(g: &Graph) -> (Graph, usize) {
    let mut out = Graph::new(g.name.clone());
    let mut map: HashMap<ValueRef, ValueRef> = HashMap::new();
    let mut pairs = 0;
    for id in g.topo_order().unwrap() {
        let node = g.node(id);
        let ins: Vec<ValueRef> = g.node_inputs(id).iter().map(|v| map[v]).collect();
        let names: Vec<String> = node.outputs.iter().map(|v| v.name.clone()).collect();
        let new_id = match &node.op {
            Op::Input => {
                out.add_input(&node.name, node.outputs[0].ty.clone(), node.spans.clone())
                    .node
            }
            Op::Constant(t) => {
                out.add_constant(&node.name, t.clone(), node.spans.clone())
                    .node
            }
            op => out
                .add_node(op.clone(), &node.name, &ins, &names, node.spans.clone())
                .unwrap(),
        };
        for (i, v) in node.outputs.iter().enumerate() {
            let mut cur = ValueRef::new(new_id, i);
            let layout = blocked(v.ty.shape.len());
            let float = matches!(v.ty.dtype, DType::F32 | DType::F16);
            if let (Some(l), false, true) = (layout, matches!(node.op, Op::Constant(_)), float) {
                let rank = v.ty.shape.len();
                let (id_layout, shape) = (Layout::identity(rank).unwrap(), v.ty.shape.clone());
                let to = Op::LayoutTransform(LayoutTransform {
                    from: id_layout.clone(),
                    to: l.clone(),
                    logical: shape.clone(),
                    pad: PadValue::Known(0.0),
                });
                let back = Op::LayoutTransform(LayoutTransform {
                    from: l,
                    to: id_layout,
                    logical: shape,
                    pad: PadValue::Undef,
                });
                let t = out
                    .add_node(
                        to,
                        &format!("{}_to16c", v.name),
                        &[cur],
                        &[],
                        node.spans.clone(),
                    )
                    .unwrap();
                let b = out
                    .add_node(
                        back,
                        &format!("{}_back", v.name),
                        &[ValueRef::new(t, 0)],
                        &[],
                        node.spans.clone(),
                    )
                    .unwrap();
                cur = ValueRef::new(b, 0);
                pairs += 1;
            }
            map.insert(ValueRef::new(id, i), cur);
        }
    }
    out.set_outputs(g.outputs().iter().map(|v| map[v]).collect());
    (out, pairs)
}

fn is_transform(op: &Op) -> bool {
    matches!(op, Op::LayoutTransform(_) | Op::PadWith(_) | Op::Crop(_))
}

#[test]
fn round_trips_at_every_boundary_cancel_on_the_bundled_models() {
    let dirs = bundled::bundled_onnx_dirs();
    let rules = RuleSource::Bundled.load().unwrap().layout;
    for dir in dirs {
        let g = load_onnx(&dir.join("model.onnx"), &ImportOptions::default()).unwrap();
        let (inputs, _) = load_test_data(&dir);
        let (instrumented, pairs) = with_round_trips(&g);
        assert!(
            pairs > 10,
            "{}: only {pairs} values instrumented",
            dir.display()
        );
        let (out, report) =
            rewrite_graph(&instrumented, &rules, &RewriteLimits::default()).unwrap();
        println!(
            "{}: {pairs} round trips, e-graph {} nodes after {} iterations ({}), {:?} extraction, cost {:.0} -> {:.0}",
            dir.display(),
            report.egraph_nodes,
            report.iterations,
            report.stop_reason,
            report.extract.method,
            report.cost_before,
            report.extract.cost
        );
        assert_eq!(report.extract.method, Method::Exact);
        // No transform feeds another (those would compose, and a pair would cancel).
        for id in out.node_ids() {
            if is_transform(&out.node(id).op) {
                for v in out.node_inputs(id) {
                    assert!(
                        !is_transform(&out.node(v.node).op),
                        "{}: transforms left back to back",
                        dir.display()
                    );
                }
            }
        }
        let left = out
            .node_ids()
            .into_iter()
            .filter(|&n| is_transform(&out.node(n).op))
            .count();
        assert_eq!(left, 0, "{}: {left} transforms left", dir.display());
        let want = layoutopt::reference::run(&g, &inputs).unwrap();
        let got = layoutopt::reference::run(&out, &inputs).unwrap();
        for (i, (w, o)) in want.iter().zip(&got).enumerate() {
            let (err, mag) = max_abs_err(w, o);
            assert!(
                err <= 1e-5 * mag.max(1.0),
                "{} output {i}: error {err}",
                dir.display()
            );
        }
    }
}

/// The rewriter on what the planner hands out: planned graphs (ops placed in
/// blocked layouts, transforms between) rewrite to graphs that compute the
/// same outputs, with no more transforms than before.
#[test]
fn planned_models_rewrite_to_the_same_outputs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    let rules = RuleSource::Bundled.load().unwrap().layout;
    for name in ["resnet_small", "mobilenet_small", "transformer_block"] {
        let dir = root.join(name);
        let g = load_onnx(&dir.join("model.onnx"), &ImportOptions::default()).unwrap();
        let (inputs, _) = load_test_data(&dir);
        for planner in ["local", "global"] {
            let p = plan_by_name(&g, planner);
            let count = |g: &Graph| {
                g.node_ids()
                    .into_iter()
                    .filter(|&n| is_transform(&g.node(n).op))
                    .count()
            };
            let (out, report) = rewrite_graph(&p.graph, &rules, &RewriteLimits::default()).unwrap();
            println!(
                "{name}: {} -> {} transforms, cost {:.0} -> {:.0} ({:?})",
                count(&p.graph),
                count(&out),
                report.cost_before,
                report.extract.cost,
                report.extract.method
            );
            assert!(count(&out) <= count(&p.graph));
            assert!(report.extract.cost <= report.cost_before);
            let want = layoutopt::reference::run(&p.graph, &inputs).unwrap();
            let got = layoutopt::reference::run(&out, &inputs).unwrap();
            for (i, (w, o)) in want.iter().zip(&got).enumerate() {
                let (err, mag) = max_abs_err(w, o);
                assert!(err <= 1e-5 * mag.max(1.0), "{name} output {i}: error {err}");
            }
        }
    }
}

/// A per-channel constant the plan packs into NCHW16c (a Mul's scale between
/// two convolutions, as a converter writes a batch norm) is, for the rewriting, a blocked tensor of its
/// logical shape: the rewriting runs instead of being skipped, and the rewritten
/// graph computes the source's outputs.
#[test]
fn constants_packed_into_a_blocked_layout_rewrite() {
    use crate::support::onnx::{import_model, int_attr, model, node, value_info};
    use layoutopt::graph::Tensor;
    use layoutopt::layout::cost::CostModel;
    use layoutopt::layout::plan::plan;
    use layoutopt::layout::planners::planner_by_name;
    use layoutopt::layout::target::TargetFamily;

    let c = 32;
    let w: Vec<f32> = sawtooth(c * 3 * 9, 7, 11, 5.0, 1.0);
    let w2: Vec<f32> = sawtooth(c * c, 5, 13, 6.0, 1.0);
    let s: Vec<f32> = (0..c).map(|i| 0.5 + i as f32 / 16.0).collect();
    let mut conv = node("Conv", "conv", &["x", "w"], &["y"]);
    conv.attribute.push(int_attr("group", 1));
    let m = model(
        vec![
            conv,
            // A Relu first, so that the scale does not fold into the conv.
            node("Relu", "relu", &["y"], &["z"]),
            node("Mul", "scale", &["z", "s"], &["r"]),
            node("Conv", "conv2", &["r", "w2"], &["out"]),
        ],
        vec![value_info("x", 1, &[1, 3, 8, 8])],
        vec![value_info("out", 1, &[1, c as i64, 6, 6])],
        vec![
            ("w", Tensor::from_f32(vec![c, 3, 3, 3], w)),
            ("w2", Tensor::from_f32(vec![c, c, 1, 1], w2)),
            ("s", Tensor::from_f32(vec![1, c, 1, 1], s)),
        ],
        13,
    );
    let g = import_model(&m, "scale.onnx").unwrap();
    let p = plan(
        &g,
        planner_by_name("global").unwrap().as_ref(),
        TargetFamily::Nchwc(16),
        &CostModel::default(),
    )
    .unwrap();
    assert!(
        p.report.packed_constants >= 1,
        "the scale is not packed: {}",
        p.report.to_text()
    );
    let rewrite = p.report.rewrite.as_ref().expect("rewriting ran");
    assert!(!rewrite.skipped, "rewriting skipped: {:?}", rewrite.note);
    let x: Vec<f32> = sawtooth(3 * 64, 13, 17, 8.0, 1.0);
    let x = Tensor::from_f32(vec![1, 3, 8, 8], x);
    let want = layoutopt::reference::run(&g, std::slice::from_ref(&x)).unwrap();
    let got = layoutopt::reference::run(&p.graph, &[x]).unwrap();
    let (err, mag) = max_abs_err(&want[0], &got[0]);
    assert!(err <= 1e-5 * mag.max(1.0), "error {err} (magnitude {mag})");
}

/// The bundled and committed real models the rule tests plan.
const RULE_MODELS: [&str; 9] = [
    "models/tflite_cnn/model.tflite",
    "models/tflite_ops/model.tflite",
    "models/tflite_decoder/model.tflite",
    "models/tflite_transformer/model.tflite",
    "models/transformer_block/model.onnx",
    "models/mobilenet_small/model.onnx",
    "models/resnet_small/model.onnx",
    "models/zoo/MobileNetV3Small_onnx/model.onnx",
    "models/zoo/MobileNetV3Small_tflite/model.tflite",
];

/// `g` planned by `planner` for `family`, not rewritten.
fn unrewritten_plan(
    g: &Graph,
    planner: &str,
    family: layoutopt::layout::target::TargetFamily,
) -> Graph {
    use layoutopt::layout::cost::CostModel;
    use layoutopt::layout::plan::{plan_with, PlanOptions};
    use layoutopt::layout::planners::planner_by_name;
    let unrewritten = PlanOptions {
        rules: None,
        ..PlanOptions::default()
    };
    let planner = planner_by_name(planner).unwrap();
    plan_with(
        g,
        planner.as_ref(),
        family,
        &CostModel::default(),
        &unrewritten,
    )
    .unwrap()
    .graph
}

/// Every bundled rule lowers the cost of a plan of a bundled or committed real
/// model: each must be shown on some model, planner and target family, by
/// rewriting that plan with every bundled rule and with every rule but it. The
/// test fails when one of them stops paying on all of them (then it should go).
#[test]
fn rules_pay_on_their_models() {
    use layoutopt::layout::target::TargetFamily;

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rules = RuleSource::Bundled.load().unwrap().layout;
    let paying: Vec<String> = rules.iter().map(|r| r.name.to_string()).collect();
    let without = |name: &str| -> Vec<_> {
        let rest: Vec<_> = RuleSource::Bundled
            .load()
            .unwrap()
            .layout
            .into_iter()
            .filter(|r| r.name.as_str() != name)
            .collect();
        assert_eq!(rest.len() + 1, rules.len(), "no rule {name}");
        rest
    };
    let mut unshown: Vec<&str> = paying.iter().map(String::as_str).collect();
    let mut shown = vec![];
    'cases: for file in RULE_MODELS {
        let g = layoutopt::api::load_model(&root.join(file)).unwrap();
        for (family, planner) in [
            TargetFamily::Nchwc(16),
            TargetFamily::Nhwc,
            TargetFamily::Nchwc(8),
        ]
        .into_iter()
        .flat_map(|f| ["local", "greedy", "global"].map(|p| (f, p)))
        {
            let planned = unrewritten_plan(&g, planner, family);
            let cost = |rules: &[_]| {
                let (out, _) = rewrite_graph(&planned, rules, &RewriteLimits::default()).unwrap();
                graph_cost(&out).unwrap()
            };
            let all = cost(&rules);
            unshown.retain(|name| {
                let pays = all < cost(&without(name));
                if pays {
                    shown.push(format!("{name}: {file} ({planner}, {family:?})"));
                }
                !pays
            });
            if unshown.is_empty() {
                break 'cases;
            }
        }
    }
    eprintln!("{}", shown.join("\n"));
    assert!(
        unshown.is_empty(),
        "rules that pay on no model: {unshown:?} (paying: {shown:?})"
    );
}

/// Rewriting only the region the rules can change (`rewrite_region`) finds
/// what rewriting the whole graph finds: on plans of the bundled and
/// committed real models, and on a model with a round trip after every
/// value, the rewritten graphs cost the same and compute the same outputs.
#[test]
fn the_rewritten_region_matches_the_whole_graph() {
    use layoutopt::layout::target::TargetFamily;

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rules = RuleSource::Bundled.load().unwrap().layout;
    let whole = RewriteLimits {
        whole_graph: true,
        ..RewriteLimits::default()
    };
    let check = |what: &str, g: &Graph| {
        let (region_out, region) = rewrite_graph(g, &rules, &RewriteLimits::default()).unwrap();
        let (whole_out, _) = rewrite_graph(g, &rules, &whole).unwrap();
        let (a, b) = (
            graph_cost(&region_out).unwrap(),
            graph_cost(&whole_out).unwrap(),
        );
        println!(
            "{what}: region of {} e-nodes, cost {a} (whole graph {b})",
            region.egraph_nodes
        );
        assert_eq!(a, b, "{what}");
    };
    for file in RULE_MODELS {
        let g = layoutopt::api::load_model(&root.join(file)).unwrap();
        for family in [TargetFamily::Nchwc(16), TargetFamily::Nhwc] {
            for planner in ["local", "greedy", "global"] {
                let planned = unrewritten_plan(&g, planner, family);
                check(&format!("{file} ({planner}, {family:?})"), &planned);
            }
        }
    }
    let dir = root.join("models/mobilenet_small");
    let g = load_onnx(&dir.join("model.onnx"), &ImportOptions::default()).unwrap();
    let (g, _) = with_round_trips(&g);
    check("mobilenet_small with round trips", &g);
}
