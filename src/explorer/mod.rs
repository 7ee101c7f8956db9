//! The explorer: one self-contained HTML file (inline CSS and JS; nothing is
//! fetched when it is viewed) showing plans of a model side by side.
//!
//! The page embeds its data once as JSON (each plan's nodes in topological
//! order, loop nests deduplicated and stored as edit scripts, regions) and its
//! own script draws the SVG: a node one layer below its deepest producer,
//! labelled with its op and the layout of its output; kept layout transforms
//! highlighted. It zooms (wheel, buttons), pans (drag), searches names, ops and
//! source layers, and collapses regions (nodes sharing a source-layer name
//! prefix) into one box. Clicking a node (or opening the file with
//! `#node=<id>`) shows its source spans, its layouts, its lowered loop nest and
//! its schedule record step by step with the lines each step changed (see
//! [`tir_view`]). Nodes of the other plan from the same source layer are marked.

pub mod tir_view;

use crate::graph::{Graph, GraphError, NodeId, Op, ValueType};
use crate::layout::plan::Plan;
use crate::layout::report::PlanReport;
use crate::layout::Layout;
use crate::ops::LayoutTransform;
use crate::runtime::{CompiledModel, Machine, RuntimeOptions};
use serde::Serialize;
use std::collections::HashMap;
use std::fmt::Write as _;
use tir_view::{lower_node, NoTirView, TirView};

/// Why the explorer page could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum ExplorerError {
    /// The plan's graph is malformed.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// The data of the page could not be written.
    #[error("explorer: {0}")]
    Invalid(String),
}

#[derive(Serialize)]
struct SpanView {
    file: String,
    layer: String,
    op_type: String,
    index: usize,
}

#[derive(Serialize)]
struct ValueView {
    name: String,
    ty: String,
}

/// A drawn node; the page lays the graph out and draws it from these. Its id
/// on the page is `p<plan>n<index>`, the index being its place in topological order.
#[derive(Serialize)]
struct NodeView {
    name: String,
    op: String,
    /// The text drawn in its box.
    label: String,
    /// Classes of its box: "transform" (kept layout transform moving data),
    /// "relabel" (one moving none), "laidout", "input", "output", "fused".
    class: String,
    /// Each input as (producer index, producer output); graph constants are not drawn.
    inputs: Vec<(usize, usize)>,
    outputs: Vec<ValueView>,
    /// Storage layout of each input and output (logical row-major unless planned).
    input_layouts: Vec<String>,
    output_layouts: Vec<String>,
    spans: Vec<SpanView>,
    /// Index of its loop nest in the page's `tirs` (shared by identical lowerings).
    #[serde(skip_serializing_if = "Option::is_none")]
    tir: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tir_note: Option<String>,
    /// The fused step the node runs in, when the fusion pass grouped it.
    #[serde(skip_serializing_if = "Option::is_none")]
    fused: Option<String>,
    /// Index of the innermost region it belongs to in the page's `regions`.
    #[serde(skip_serializing_if = "Option::is_none")]
    region: Option<usize>,
}

#[derive(Serialize)]
struct PlanView {
    planner: String,
    family: String,
    nodes: Vec<NodeView>,
}

/// A collapsible group of nodes: those whose source layer name (the first
/// span's, else the node's name) starts with `name` up to a separator, and
/// the nodes on paths between them.
#[derive(Serialize)]
struct RegionView {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent: Option<usize>,
}

/// Everything the page's script draws from, embedded once as JSON.
#[derive(Serialize)]
struct PageData {
    plans: Vec<PlanView>,
    tirs: Vec<TirView>,
    regions: Vec<RegionView>,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn row_major(ty: &ValueType) -> String {
    Layout::identity(ty.shape.len())
        .map(|l| l.to_string())
        .unwrap_or_default()
}

fn is_transform(op: &Op) -> bool {
    matches!(op, Op::LayoutTransform(_) | Op::PadWith(_) | Op::Crop(_))
}

/// A layout transform between layouts with the same bytes: no data moves.
fn is_relabel(op: &Op) -> bool {
    matches!(op, Op::LayoutTransform(t) if t.from != t.to
        && crate::layout::cost::same_bytes(&t.from, &t.to, &t.logical))
}

/// Layouts of a node's inputs and outputs as the plan stores them.
fn node_layouts(g: &Graph, id: NodeId) -> (Vec<String>, Vec<String>) {
    let n = g.node(id);
    match &n.op {
        Op::InLayout(l) => (
            l.inputs.iter().map(|(l, _)| l.to_string()).collect(),
            l.outputs.iter().map(|(l, _)| l.to_string()).collect(),
        ),
        Op::LayoutTransform(LayoutTransform { from, to, .. }) => {
            (vec![from.to_string()], vec![to.to_string()])
        }
        _ => (
            g.node_inputs(id)
                .iter()
                .map(|&v| row_major(g.value_type(v)))
                .collect(),
            n.outputs.iter().map(|v| row_major(&v.ty)).collect(),
        ),
    }
}

/// Lowered loop nests, each kept once: nodes with the same op, types and
/// layouts (DenseNet's 120 convolutions have few distinct shapes) share one.
#[derive(Default)]
struct Tirs {
    by_key: HashMap<String, Result<usize, NoTirView>>,
    views: Vec<TirView>,
}

impl Tirs {
    /// The index of a node's loop nest, or why there is none.
    fn of(&mut self, g: &Graph, id: NodeId) -> Result<usize, NoTirView> {
        let n = g.node(id);
        let in_types: Vec<ValueType> = g
            .node_inputs(id)
            .iter()
            .map(|&v| g.value_type(v).clone())
            .collect();
        let (op, types, layouts) = match &n.op {
            Op::InLayout(l) => {
                let logical: Vec<ValueType> = in_types
                    .iter()
                    .zip(&l.inputs)
                    .map(|(t, (_, s))| ValueType::new(t.dtype, s.clone()))
                    .collect();
                let ins: Vec<Layout> = l.inputs.iter().map(|(l, _)| l.clone()).collect();
                (&l.inner, logical, Some((ins, l.outputs[0].0.clone())))
            }
            op if is_transform(op) => return Err(NoTirView::Transform(op.kind_name())),
            op => (op, in_types, None),
        };
        let key = format!("{op:?}|{types:?}|{layouts:?}");
        let views = &mut self.views;
        self.by_key
            .entry(key)
            .or_insert_with(|| {
                let v = lower_node(op, &types, layouts.as_ref().map(|(i, o)| (i.as_slice(), o)))?;
                views.push(v);
                Ok(views.len() - 1)
            })
            .clone()
    }
}

/// The name a node is grouped into regions by.
fn region_key(g: &Graph, id: NodeId) -> String {
    let n = g.node(id);
    n.spans
        .first()
        .map_or_else(|| n.name.clone(), |s| s.layer.to_string())
}

/// The proper prefixes of `key` that end just before a separator ("a/b_c" gives
/// "a", "a/b"): the candidate regions of a node.
fn prefixes(key: &str) -> impl Iterator<Item = &str> {
    key.char_indices()
        .filter(|&(i, c)| i > 0 && matches!(c, '/' | '.' | '_' | ':'))
        .map(move |(i, _)| &key[..i])
        .filter(|p| !p.ends_with(['/', '.', '_', ':']))
}

/// `members` and every node on a path that leaves them and comes back: the
/// smallest region holding them that can be drawn as one box without an edge
/// into it from below. Nodes are in topological order, so such paths stay
/// between the first and the last member.
fn hull(preds: &[Vec<usize>], members: &[usize]) -> Vec<usize> {
    let (Some(&lo), Some(&hi)) = (members.iter().min(), members.iter().max()) else {
        return Vec::new();
    };
    let inside: std::collections::HashSet<usize> = members.iter().copied().collect();
    // Reached from a member, forwards; reaching one, backwards.
    let mut from = vec![false; hi + 1 - lo];
    for i in lo..=hi {
        from[i - lo] = inside.contains(&i) || preds[i].iter().any(|&p| p >= lo && from[p - lo]);
    }
    let mut to = vec![false; hi + 1 - lo];
    for i in (lo..=hi).rev() {
        if inside.contains(&i) || to[i - lo] {
            to[i - lo] = true;
            for &p in preds[i].iter().filter(|&&p| p >= lo) {
                to[p - lo] = true;
            }
        }
    }
    (lo..=hi).filter(|&i| from[i - lo] && to[i - lo]).collect()
}

/// Nodes sharing a name prefix, per plan.
struct Prefix<'a> {
    members: Vec<Vec<usize>>,
    /// The next longer prefix of every member's key, while they all have the
    /// same one: then that prefix groups the same nodes and names them better.
    next: Option<&'a str>,
    same_next: bool,
}

/// The regions of all plans' nodes: each name prefix shared by two or more
/// nodes of a plan (of prefixes grouping the same nodes the longest), grown to
/// its hull in every plan (MobileNet's `expanded_conv_3` takes in the
/// `activation_1_2` between its convolutions) unless that more than doubles
/// it. Regions nest: from the largest,
/// one is kept if it lies inside a kept one or apart from all, is not the same
/// nodes as one, and is not nearly all nodes (no help to collapse). Returns
/// the regions and each node's innermost one.
fn regions(
    keys: &[Vec<String>],
    preds: &[Vec<Vec<usize>>],
) -> (Vec<RegionView>, Vec<Vec<Option<usize>>>) {
    let mut found: std::collections::BTreeMap<&str, Prefix> = Default::default();
    for (k, plan) in keys.iter().enumerate() {
        for (i, key) in plan.iter().enumerate() {
            let ps: Vec<&str> = prefixes(key).collect();
            for (j, &p) in ps.iter().enumerate() {
                let next = ps.get(j + 1).copied();
                let e = found.entry(p).or_insert_with(|| Prefix {
                    members: vec![Vec::new(); keys.len()],
                    next,
                    same_next: true,
                });
                e.members[k].push(i);
                e.same_next &= e.next == next && next.is_some();
            }
        }
    }
    let mut candidates: Vec<(&str, Vec<Vec<usize>>)> = found
        .iter()
        .filter(|(_, p)| p.members.iter().any(|m| m.len() >= 2) && !p.same_next)
        .map(|(name, p)| {
            let hulls: Vec<Vec<usize>> = p
                .members
                .iter()
                .zip(preds)
                .map(|(m, pr)| hull(pr, m))
                .collect();
            (*name, &p.members, hulls)
        })
        // A prefix whose hull more than doubles it is scattered, not a block.
        .filter(|(_, own, m)| {
            m.iter()
                .zip(*own)
                .zip(keys)
                .all(|((m, own), plan)| m.len() <= 2 * own.len() && m.len() * 10 < plan.len() * 9)
        })
        .map(|(name, _, m)| (name, m))
        .collect();
    let size = |m: &Vec<Vec<usize>>| m.iter().map(Vec::len).sum::<usize>();
    // Largest first (then by name, for stable ids): a region's parent comes first.
    candidates.sort_by(|a, b| size(&b.1).cmp(&size(&a.1)).then(a.0.cmp(b.0)));
    let mut owner: Vec<Vec<Option<usize>>> = keys.iter().map(|p| vec![None; p.len()]).collect();
    let mut views: Vec<RegionView> = Vec::new();
    let mut sizes: Vec<usize> = Vec::new();
    for (name, members) in candidates {
        let mut owners = members
            .iter()
            .enumerate()
            .flat_map(|(k, m)| m.iter().map(move |&i| (k, i)))
            .map(|(k, i)| owner[k][i]);
        let Some(parent) = owners.next() else {
            continue;
        };
        if owners.any(|o| o != parent) || parent.is_some_and(|p| sizes[p] == size(&members)) {
            continue;
        }
        for (k, m) in members.iter().enumerate() {
            for &i in m {
                owner[k][i] = Some(views.len());
            }
        }
        sizes.push(size(&members));
        views.push(RegionView {
            name: name.to_string(),
            parent,
        });
    }
    (views, owner)
}

/// One plan's drawn nodes, with what regions are found from.
struct PlanData {
    view: PlanView,
    /// Each node's producers (indices in topological order).
    preds: Vec<Vec<usize>>,
    /// Each node's region key.
    keys: Vec<String>,
}

/// One plan's nodes in topological order (constants left out), with each
/// node's producers and region key.
fn plan_view(
    g: &Graph,
    report: &PlanReport,
    tirs: &mut Tirs,
    (machine, options): (&Machine, &RuntimeOptions),
) -> Result<PlanData, ExplorerError> {
    let order: Vec<NodeId> = g
        .topo_order()?
        .into_iter()
        .filter(|&id| !matches!(g.node(id).op, Op::Constant(_)))
        .collect();
    let index: HashMap<NodeId, usize> = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    // The steps the runtime would fuse on this machine; a graph it cannot compile
    // is drawn without them.
    let groups = CompiledModel::fusion_groups(g).unwrap_or_default();
    // Each convolution step's algorithm, by step name.
    let algos: HashMap<String, String> = CompiledModel::conv_algorithms(machine, g, options)
        .unwrap_or_default()
        .into_iter()
        .map(|a| (a.name, a.decision.to_string()))
        .collect();
    let mut fused: HashMap<NodeId, String> = HashMap::new();
    for group in &groups {
        let name = &g.node(group.last()).name;
        let algo = algos
            .get(name)
            .map_or(String::new(), |a| format!(", algorithm {a}"));
        let step = format!(
            "step '{name}': {} ({} nodes{algo})",
            group.kinds(g),
            group.nodes.len()
        );
        fused.extend(group.nodes.iter().map(|&n| (n, step.clone())));
    }
    let mut nodes = Vec::with_capacity(order.len());
    let mut preds = Vec::with_capacity(order.len());
    for &id in &order {
        let n = g.node(id);
        let (ins, outs) = node_layouts(g, id);
        let mut class = Vec::new();
        if is_relabel(&n.op) {
            class.push("relabel");
        } else if is_transform(&n.op) {
            class.push("transform");
        }
        if matches!(n.op, Op::InLayout(_)) {
            class.push("laidout");
        }
        if matches!(n.op, Op::Input) {
            class.push("input");
        }
        if fused.contains_key(&id) {
            class.push("fused");
        }
        if (0..n.outputs.len()).any(|k| g.is_graph_output(crate::graph::ValueRef::new(id, k))) {
            class.push("output");
        }
        let inputs: Vec<(usize, usize)> = g
            .node_inputs(id)
            .iter()
            .filter_map(|v| index.get(&v.node).map(|&p| (p, v.output)))
            .collect();
        let mut p: Vec<usize> = inputs.iter().map(|&(p, _)| p).collect();
        p.dedup();
        preds.push(p);
        let (tir, tir_note) = match &n.op {
            Op::Input => (None, Some("a graph input: nothing to compute".to_string())),
            _ => match tirs.of(g, id) {
                Ok(v) => (Some(v), None),
                Err(e) => (None, Some(e.to_string())),
            },
        };
        nodes.push(NodeView {
            name: n.name.clone(),
            op: match &n.op {
                Op::InLayout(_) => format!("{} (laid out)", n.op.kind_name()),
                op => op.kind_name().to_string(),
            },
            label: match &n.op {
                Op::LayoutTransform(LayoutTransform { from, to, .. }) => format!("{from} → {to}"),
                op => op.kind_name().to_string(),
            },
            class: class.join(" "),
            inputs,
            outputs: n
                .outputs
                .iter()
                .map(|v| ValueView {
                    name: v.name.clone(),
                    ty: v.ty.to_string(),
                })
                .collect(),
            input_layouts: ins,
            output_layouts: outs,
            spans: n
                .spans
                .iter()
                .map(|s| SpanView {
                    file: s.file_name().to_string(),
                    layer: s.layer.to_string(),
                    op_type: s.op_type.to_string(),
                    index: s.index,
                })
                .collect(),
            tir,
            tir_note,
            fused: fused.get(&id).cloned(),
            region: None,
        });
    }
    Ok(PlanData {
        view: PlanView {
            planner: report.planner.clone(),
            family: report.family.clone(),
            nodes,
        },
        preds,
        keys: order.iter().map(|&id| region_key(g, id)).collect(),
    })
}

/// A row of the summary table: its label and how to read it from a report.
type SummaryRow = (&'static str, fn(&PlanReport) -> String);

fn summary_table(reports: &[&PlanReport]) -> String {
    let mut s = String::from(r#"<table id="summary"><tr><th></th>"#);
    for r in reports {
        let _ = write!(s, "<th>{}</th>", esc(&r.planner));
    }
    s.push_str("</tr>");
    let rows: [SummaryRow; 7] = [
        ("target", |r| r.family.clone()),
        ("transforms kept (data moved)", |r| {
            r.transform_count.to_string()
        }),
        ("bytes moved", |r| r.transform_bytes.to_string()),
        ("relabels (no data moved)", |r| r.relabel_count.to_string()),
        ("constants re-packed", |r| r.packed_constants.to_string()),
        ("estimated cost (us)", |r| {
            format!("{:.1}", r.estimated_cost / 1e3)
        }),
        ("rules kept (graph, then layout stage)", rules_kept),
    ];
    for (name, f) in rows {
        let _ = write!(s, "<tr><td>{name}</td>");
        for r in reports {
            let _ = write!(s, "<td>{}</td>", esc(&f(r)));
        }
        s.push_str("</tr>");
    }
    s.push_str("</table>");
    s
}

/// The rules whose rewrites a plan keeps, counted by name, graph stage first.
fn rules_kept(r: &PlanReport) -> String {
    let mut counts: Vec<(String, usize)> = vec![];
    let fired = [&r.graph_rewrite, &r.rewrite].into_iter().flatten();
    for f in fired.flat_map(|w| &w.fired) {
        match counts.iter_mut().find(|(n, _)| *n == f.rule) {
            Some((_, k)) => *k += 1,
            None => counts.push((f.rule.clone(), 1)),
        }
    }
    let kept: Vec<String> = counts.iter().map(|(n, k)| format!("{n} ×{k}")).collect();
    match kept.is_empty() {
        true => "none".to_string(),
        false => kept.join(", "),
    }
}

/// JSON for embedding in a `<script>` element: `<` escaped so no string in it
/// can close the element.
fn script_json<T: Serialize>(v: &T) -> Result<String, ExplorerError> {
    let s = serde_json::to_string(v).map_err(|e| ExplorerError::Invalid(e.to_string()))?;
    Ok(s.replace('<', "\\u003c"))
}

/// The explorer page of `plans` (usually two) of the model `source`; each
/// convolution step names the algorithm `options` choose for it on `machine`.
pub fn render(
    machine: &Machine,
    source: &Graph,
    plans: &[&Plan],
    options: &RuntimeOptions,
) -> Result<String, ExplorerError> {
    if plans.is_empty() {
        return Err(ExplorerError::Invalid("no plan to show".into()));
    }
    let mut tirs = Tirs::default();
    let mut views = Vec::new();
    let mut preds = Vec::new();
    let mut keys = Vec::new();
    for p in plans {
        let d = plan_view(&p.graph, &p.report, &mut tirs, (machine, options))?;
        views.push(d.view);
        preds.push(d.preds);
        keys.push(d.keys);
    }
    let (regions, of_nodes) = regions(&keys, &preds);
    for (v, r) in views.iter_mut().zip(of_nodes) {
        for (n, r) in v.nodes.iter_mut().zip(r) {
            n.region = r;
        }
    }
    let mut columns = String::new();
    for (k, v) in views.iter().enumerate() {
        let count = |class: &str| {
            v.nodes
                .iter()
                .filter(|n| n.class.split(' ').any(|c| c == class))
                .count()
        };
        let _ = write!(
            columns,
            r#"<section class="plan" id="plan{k}"><h2>{} <small>{} · {} transform nodes · {} relabels</small></h2><div class="view"></div></section>"#,
            esc(&v.planner),
            esc(&v.family),
            count("transform"),
            count("relabel"),
        );
    }
    let reports: Vec<&PlanReport> = plans.iter().map(|p| &p.report).collect();
    let data = PageData {
        plans: views,
        tirs: tirs.views,
        regions,
    };
    let title = format!("layoutopt explorer: {}", source.name);
    Ok(format!(
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>{CSS}</style></head>
<body>
<header><h1>{title}</h1><p>{nodes} source nodes. Click a node for its source spans, loop nest and schedule record. Highlighted nodes are kept layout transforms; nodes from the same source layer in the other plan are outlined. Wheel or buttons zoom, dragging pans; dashed boxes are collapsed regions (click to open).</p>{summary}
<div id="toolbar"><input id="search" type="search" placeholder="search name, op or layer" size="32"> <button id="search-prev" title="previous match">▲</button><button id="search-next" title="next match">▼</button> <span id="search-count"></span>
<span class="sep"></span><button id="zoom-in" title="zoom in">+</button><button id="zoom-out" title="zoom out">−</button><button id="zoom-fit" title="whole graph">fit</button> <span id="zoom-level"></span>
<span class="sep"></span><label>collapse regions at depth <select id="collapse-depth"><option value="0">none</option></select></label> <button id="expand-all">expand all</button></div></header>
<main><div id="plans">{columns}</div>
<aside id="panel"><p class="hint">Select a node.</p></aside></main>
<script id="explorer-data" type="application/json">{data}</script>
<script>{JS}</script>
</body></html>
"#,
        title = esc(&title),
        nodes = source.node_count(),
        summary = summary_table(&reports),
        data = script_json(&data)?,
    ))
}

/// The page's style and script: plain CSS and JavaScript, written for this page.
const CSS: &str = include_str!("explorer.css");
const JS: &str = include_str!("explorer.js");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_end_before_separators() {
        let p: Vec<&str> = prefixes("/layer1/0/conv_1").collect();
        assert_eq!(p, ["/layer1", "/layer1/0", "/layer1/0/conv"]);
        let p: Vec<&str> = prefixes("a__b.c").collect();
        assert_eq!(p, ["a", "a__b"]);
    }

    #[test]
    fn a_hull_takes_in_paths_that_leave_and_come_back() {
        // 0 -> 1 -> 2 -> 3, and 0 -> 3; 4 hangs off 1.
        let preds = vec![vec![], vec![0], vec![1], vec![2, 0], vec![1]];
        assert_eq!(hull(&preds, &[0, 1]), [0, 1]);
        assert_eq!(hull(&preds, &[1, 2]), [1, 2]);
        assert_eq!(hull(&preds, &[0, 3]), [0, 1, 2, 3]);
        assert_eq!(hull(&preds, &[1, 3]), [1, 2, 3]);
        assert_eq!(hull(&preds, &[1, 4]), [1, 4]);
    }

    #[test]
    fn regions_nest_and_keep_the_longest_name_of_the_same_nodes() {
        let keys = vec![vec![
            "m_1/a/x".to_string(),
            "m_1/a/y".to_string(),
            "m_1/b/x".to_string(),
            "m_1/b/y".to_string(),
            "out".to_string(),
        ]];
        let preds = vec![vec![vec![], vec![0], vec![1], vec![2], vec![3]]];
        let (regions, of) = regions(&keys, &preds);
        let names: Vec<&str> = regions.iter().map(|r| r.name.as_str()).collect();
        // "m" groups the same nodes as "m_1".
        assert_eq!(names, ["m_1", "m_1/a", "m_1/b"]);
        assert_eq!(regions[1].parent, Some(0));
        assert_eq!(of[0], [Some(1), Some(1), Some(2), Some(2), None]);
        // A region of nearly every node is no help to collapse.
        let (regions, _) = super::regions(&[keys[0][..4].to_vec()], &preds);
        let names: Vec<&str> = regions.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["m_1/a", "m_1/b"]);
    }

    #[test]
    fn a_region_takes_in_nodes_between_its_own() {
        // blk_1's two nodes around act_1's, which nest inside; "act" is
        // scattered (its hull more than doubles it) and "blk" nearly all.
        let keys: Vec<String> = [
            "blk_1/a", "act_1/p", "act_1/q", "blk_1/b", "blk_2/a", "blk_2/c", "blk_2/d", "act_2/p",
            "blk_2/b", "out",
        ]
        .map(String::from)
        .to_vec();
        let preds: Vec<Vec<usize>> = (0..10)
            .map(|i| if i == 0 { vec![] } else { vec![i - 1] })
            .collect();
        let (regions, of) = regions(&[keys], &[preds]);
        let names: Vec<&str> = regions.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["blk_2", "blk_1", "act_1"]);
        assert_eq!(regions[2].parent, Some(1));
        let r = |i| Some(i);
        assert_eq!(
            of[0],
            [r(1), r(2), r(2), r(1), r(0), r(0), r(0), r(0), r(0), None]
        );
    }
}
