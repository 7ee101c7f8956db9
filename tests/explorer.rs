//! The explorer page: the graph of each plan is drawn (one SVG node per
//! non-constant node, kept transforms highlighted), and a node's data holds its
//! source spans and its schedule record with a loop nest after each primitive.
//! `scripts/check_explorer.py` checks the same page through Chromium's DOM.

use layoutopt::api::{load_model, PlanLayouts, Planner, Target};
use layoutopt::graph::Op;
use std::path::Path;

fn page() -> (layoutopt::graph::Graph, String, [usize; 2], usize) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/resnet_small/model.onnx");
    let g = load_model(&path).unwrap();
    let a = PlanLayouts::new(Planner::Global, Target::Nchwc(16))
        .plan(&g)
        .unwrap();
    let b = PlanLayouts::new(Planner::Local, Target::Nchwc(16))
        .plan(&g)
        .unwrap();
    let drawn = |p: &layoutopt::layout::plan::Plan| {
        p.graph
            .node_ids()
            .iter()
            .filter(|&&id| !matches!(p.graph.node(id).op, Op::Constant(_)))
            .count()
    };
    let transforms = |p: &layoutopt::layout::plan::Plan| {
        p.graph
            .node_ids()
            .iter()
            .filter(|&&id| {
                matches!(
                    p.graph.node(id).op,
                    Op::LayoutTransform(_) | Op::PadWith(_) | Op::Crop(_)
                )
            })
            .count()
    };
    let transforms = transforms(&a) + transforms(&b);
    let html = layoutopt::explorer::render(&g, &[&a, &b], &Default::default()).unwrap();
    (g, html, [drawn(&a), drawn(&b)], transforms)
}

fn data(html: &str) -> serde_json::Value {
    let start = html
        .find(r#"<script id="explorer-data" type="application/json">"#)
        .unwrap();
    let rest = &html[start..];
    let body = &rest[rest.find('>').unwrap() + 1..rest.find("</script>").unwrap()];
    serde_json::from_str(body).unwrap()
}

#[test]
fn the_page_draws_both_plans() {
    let (_, html, drawn, transforms) = page();
    for (k, n) in drawn.iter().enumerate() {
        let count = html.matches(&format!(r#"data-id="p{k}n"#)).count();
        assert_eq!(count, *n, "plan {k}");
    }
    // The plans keep transforms; each is drawn highlighted.
    assert!(transforms > 0);
    assert_eq!(
        html.matches(r#"<g class="node transform"#).count(),
        transforms
    );
    assert!(html.contains("NCHW16c"));
    assert!(html.contains(r#"<table id="summary">"#));
}

#[test]
fn a_conv_node_has_its_spans_and_schedule_record() {
    let (g, html, _, _) = page();
    let d = data(&html);
    let nodes = d.as_object().unwrap();
    // Source conv layers, by name.
    let conv_layers: Vec<String> = g
        .node_ids()
        .iter()
        .filter(|&&id| matches!(g.node(id).op, Op::Conv(_)))
        .flat_map(|&id| g.node(id).spans.iter().map(|s| s.layer.to_string()))
        .collect();
    assert_eq!(conv_layers.len(), 8);
    let conv = nodes
        .values()
        .find(|n| n["id"].as_str().unwrap().starts_with("p0") && n["op"] == "Conv (laid out)")
        .expect("a laid-out conv in the global plan");
    let layer = conv["spans"][0]["layer"].as_str().unwrap();
    assert!(conv_layers.iter().any(|l| l == layer), "{layer}");
    assert_eq!(conv["spans"][0]["op_type"], "Conv");
    let steps = conv["tir"]["steps"].as_array().unwrap();
    let prims: Vec<&str> = steps
        .iter()
        .map(|s| s["primitive"].as_str().unwrap())
        .collect();
    assert_eq!(prims[0], "create_schedule");
    assert!(prims.iter().any(|p| p.starts_with("split(")), "{prims:?}");
    assert!(
        prims.iter().any(|p| p.starts_with("vectorize(")),
        "{prims:?}"
    );
    // The lowered nest reads the blocked input buffer and writes the blocked output.
    assert!(conv["tir"]["layouts"].to_string().contains("NCHW16c"));
    let last = steps.last().unwrap()["loop_nest"].as_str().unwrap();
    assert!(last.contains("for "), "{last}");
    // Every step after the first changed something, and says what.
    for s in &steps[1..] {
        let changed = s["diff"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["tag"] != " ")
            .count();
        assert!(changed > 0, "{}", s["primitive"]);
    }
    // A kept transform says it has no lowering.
    let t = nodes
        .values()
        .find(|n| n["transform"] == true)
        .expect("a transform node");
    assert!(t["tir_note"]
        .as_str()
        .unwrap()
        .contains("no TIR lowering yet"));
}

/// Fusion is a graph pass: its groups are the compiled model's fused steps, and
/// the explorer marks every node of a group with that step.
#[test]
fn fused_groups_are_the_compiled_steps_and_shown_on_their_nodes() {
    use layoutopt::runtime::{CompiledModel, RuntimeOptions};
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/resnet_small/model.onnx");
    let g = load_model(&path).unwrap();
    let plan = PlanLayouts::new(Planner::Global, Target::Nchwc(16))
        .plan(&g)
        .unwrap();
    let groups = CompiledModel::fusion_groups(&plan.graph).unwrap();
    assert!(
        groups
            .iter()
            .any(|f| f.kinds(&plan.graph).starts_with("Conv+")),
        "resnet's convolutions fuse their epilogues"
    );
    let model = CompiledModel::compile(&plan.graph, &RuntimeOptions::default()).unwrap();
    let steps = model.describe();
    for f in &groups {
        let name = &plan.graph.node(f.last()).name;
        let kinds = f.kinds(&plan.graph);
        assert!(
            steps
                .iter()
                .any(|s| s.starts_with(&format!("{name} [{kinds}"))),
            "group {kinds} ending at {name} is no step of {steps:#?}"
        );
    }
    // Each step of several nodes is a group.
    let fused_steps = steps.iter().filter(|s| s.contains('+')).count();
    assert_eq!(fused_steps, groups.len(), "{steps:#?}");

    let html = layoutopt::explorer::render(&g, &[&plan], &Default::default()).unwrap();
    let d = data(&html);
    let marked: Vec<&str> = d
        .as_object()
        .unwrap()
        .values()
        .filter_map(|n| n["fused"].as_str())
        .collect();
    let members: usize = groups.iter().map(|f| f.nodes.len()).sum();
    assert_eq!(marked.len(), members);
    for f in &groups {
        let name = &plan.graph.node(f.last()).name;
        let in_step = marked
            .iter()
            .filter(|m| m.starts_with(&format!("step '{name}'")))
            .count();
        assert_eq!(in_step, f.nodes.len(), "{name}");
    }
}
