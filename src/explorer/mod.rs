//! The explorer: one self-contained HTML file (inline CSS, JS and SVG; nothing
//! is fetched when it is viewed) showing plans of a model side by side.
//!
//! Each plan's graph is drawn in layers (a node one layer below its deepest
//! producer), every node labelled with its op and the layout of its output;
//! kept layout transforms are highlighted. Clicking a node (or opening the file
//! with `#node=<id>`) shows its source spans, its layouts, its lowered loop nest
//! and its schedule record step by step with the lines each step changed (see
//! [`tir_view`]). Nodes of the other plan from the same source layer are marked.

pub mod tir_view;

use crate::graph::{format_spans_portable, Graph, GraphError, NodeId, Op, ValueType};
use crate::layout::plan::{Plan, PlanReport};
use crate::layout::Layout;
use crate::ops::LayoutTransform;
use crate::runtime::{CompiledModel, RuntimeOptions};
use serde::Serialize;
use std::collections::HashMap;
use std::fmt::Write as _;
use tir_view::{lower_node, TirView};

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
struct NodeView {
    id: String,
    name: String,
    op: String,
    /// Output values with their types.
    outputs: Vec<String>,
    /// Storage layout of each input and output (logical row-major unless planned).
    input_layouts: Vec<String>,
    output_layouts: Vec<String>,
    spans: Vec<SpanView>,
    transform: bool,
    tir: Option<TirView>,
    tir_note: Option<String>,
    /// The fused step the node runs in, when the fusion pass grouped it.
    fused: Option<String>,
}

const NODE_W: usize = 170;
const NODE_H: usize = 44;
const GAP_X: usize = 24;
const GAP_Y: usize = 34;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let head: String = s.chars().take(n - 1).collect();
        format!("{head}…")
    }
}

fn row_major(ty: &ValueType) -> String {
    Layout::identity(ty.shape.len())
        .map(|l| l.to_string())
        .unwrap_or_default()
}

fn is_transform(op: &Op) -> bool {
    matches!(op, Op::LayoutTransform(_) | Op::PadWith(_) | Op::Crop(_))
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

/// The loop nest of a node, or why there is none. Lowerings are shared by
/// nodes with the same op, types and layouts.
fn node_tir(
    g: &Graph,
    id: NodeId,
    cache: &mut HashMap<String, Result<TirView, String>>,
) -> Result<TirView, String> {
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
        op if is_transform(op) => {
            return Err(format!(
                "{} moves data between layouts; it has no TIR lowering yet",
                op.kind_name()
            ))
        }
        op => (op, in_types, None),
    };
    let key = format!("{op:?}|{types:?}|{layouts:?}");
    cache
        .entry(key)
        .or_insert_with(|| lower_node(op, &types, layouts.as_ref().map(|(i, o)| (i.as_slice(), o))))
        .clone()
}

struct Drawn {
    svg: String,
    nodes: Vec<NodeView>,
}

/// Lays out and draws one plan's graph; node ids are `p<plan>n<index>`.
fn draw(
    g: &Graph,
    plan_index: usize,
    cache: &mut HashMap<String, Result<TirView, String>>,
    options: &RuntimeOptions,
) -> Result<Drawn, ExplorerError> {
    let order: Vec<NodeId> = g
        .topo_order()?
        .into_iter()
        .filter(|&id| !matches!(g.node(id).op, Op::Constant(_)))
        .collect();
    let index: HashMap<NodeId, usize> = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let preds: Vec<Vec<usize>> = order
        .iter()
        .map(|&id| {
            let mut p: Vec<usize> = g
                .node_inputs(id)
                .iter()
                .filter_map(|v| index.get(&v.node).copied())
                .collect();
            p.dedup();
            p
        })
        .collect();
    // Layer: one below the deepest producer. Column: producers' mean column,
    // which keeps chains straight; ties keep topological order.
    let mut layer = vec![0usize; order.len()];
    for i in 0..order.len() {
        layer[i] = preds[i].iter().map(|&p| layer[p] + 1).max().unwrap_or(0);
    }
    let depth = layer.iter().max().map_or(0, |m| m + 1);
    let mut col = vec![0f64; order.len()];
    let mut rows: Vec<Vec<usize>> = vec![Vec::new(); depth];
    for (i, &l) in layer.iter().enumerate() {
        rows[l].push(i);
    }
    for row in &mut rows {
        let want: Vec<(f64, usize)> = row
            .iter()
            .map(|&i| {
                let p = &preds[i];
                let c = if p.is_empty() {
                    i as f64
                } else {
                    p.iter().map(|&q| col[q]).sum::<f64>() / p.len() as f64
                };
                (c, i)
            })
            .collect();
        let mut sorted = want;
        sorted.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        // Columns in wanted order, never two in one slot.
        let mut next = f64::NEG_INFINITY;
        for (c, i) in sorted {
            let slot = c.round().max(next);
            col[i] = slot;
            next = slot + 1.0;
        }
        row.sort_by(|a, b| col[*a].total_cmp(&col[*b]));
    }
    let min_col = col.iter().copied().fold(f64::INFINITY, f64::min);
    let max_col = col.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let cols = if order.is_empty() {
        1
    } else {
        (max_col - min_col) as usize + 1
    };
    let pos = |i: usize| {
        let x = ((col[i] - min_col) as usize) * (NODE_W + GAP_X) + GAP_X;
        let y = layer[i] * (NODE_H + GAP_Y) + GAP_Y;
        (x, y)
    };
    let width = cols * (NODE_W + GAP_X) + GAP_X;
    let height = depth * (NODE_H + GAP_Y) + GAP_Y;

    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg class="graph" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}">"#
    );
    svg.push_str(r#"<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="gray"/></marker></defs>"#);
    for (i, &id) in order.iter().enumerate() {
        let (x2, y2) = pos(i);
        for v in g.node_inputs(id) {
            let Some(&p) = index.get(&v.node) else {
                continue;
            };
            let (x1, y1) = pos(p);
            let (sx, sy) = (x1 + NODE_W / 2, y1 + NODE_H);
            let (tx, ty) = (x2 + NODE_W / 2, y2);
            let mid = (sy + ty) / 2;
            let layout = node_layouts(g, v.node).1.get(v.output).cloned();
            let _ = write!(
                svg,
                r#"<path class="edge" d="M{sx},{sy} C{sx},{mid} {tx},{mid} {tx},{ty}" marker-end="url(#arrow)"><title>{} ({})</title></path>"#,
                esc(&g.value(v).name),
                esc(&layout.unwrap_or_default())
            );
        }
    }
    // The steps the runtime would fuse on this machine; a graph it cannot compile
    // is drawn without them.
    let groups = CompiledModel::fusion_groups(g).unwrap_or_default();
    // Each convolution step's algorithm, by step name.
    let algos: HashMap<String, String> = CompiledModel::conv_algorithms(g, options)
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
    for (i, &id) in order.iter().enumerate() {
        let n = g.node(id);
        let (x, y) = pos(i);
        let (ins, outs) = node_layouts(g, id);
        let transform = is_transform(&n.op);
        let node_id = format!("p{plan_index}n{i}");
        let mut class = String::from("node");
        if transform {
            class.push_str(" transform");
        }
        if matches!(n.op, Op::InLayout(_)) {
            class.push_str(" laidout");
        }
        if matches!(n.op, Op::Input) {
            class.push_str(" input");
        }
        if fused.contains_key(&id) {
            class.push_str(" fused");
        }
        if (0..n.outputs.len()).any(|k| g.is_graph_output(crate::graph::ValueRef::new(id, k))) {
            class.push_str(" output");
        }
        let label = match &n.op {
            Op::LayoutTransform(LayoutTransform { from, to, .. }) => format!("{from} → {to}"),
            op => op.kind_name().to_string(),
        };
        let layers: Vec<String> = n.spans.iter().map(|s| s.layer.to_string()).collect();
        let _ = write!(
            svg,
            r#"<g class="{class}" data-id="{node_id}" data-layers="{}" transform="translate({x},{y})"><title>{}</title><rect width="{NODE_W}" height="{NODE_H}" rx="6"/><text x="8" y="17" class="op">{}</text><text x="8" y="34" class="layout">{}</text></g>"#,
            esc(&layers.join("|")),
            esc(&format!("{} — {}", n.name, format_spans_portable(&n.spans))),
            esc(&short(&label, 24)),
            esc(&short(&outs.join(", "), 26)),
        );
        let (tir, tir_note) = match &n.op {
            Op::Input => (None, Some("a graph input: nothing to compute".to_string())),
            _ => match node_tir(g, id, cache) {
                Ok(v) => (Some(v), None),
                Err(e) => (None, Some(e)),
            },
        };
        nodes.push(NodeView {
            id: node_id,
            name: n.name.clone(),
            op: match &n.op {
                Op::InLayout(_) => format!("{} (laid out)", n.op.kind_name()),
                op => op.kind_name().to_string(),
            },
            outputs: n
                .outputs
                .iter()
                .map(|v| format!("{} {}", v.name, v.ty))
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
            transform,
            tir,
            tir_note,
            fused: fused.get(&id).cloned(),
        });
    }
    svg.push_str("</svg>");
    Ok(Drawn { svg, nodes })
}

/// A row of the summary table: its label and how to read it from a report.
type SummaryRow = (&'static str, fn(&PlanReport) -> String);

fn summary_table(reports: &[&PlanReport]) -> String {
    let mut s = String::from(r#"<table id="summary"><tr><th></th>"#);
    for r in reports {
        let _ = write!(s, "<th>{}</th>", esc(&r.planner));
    }
    s.push_str("</tr>");
    let rows: [SummaryRow; 6] = [
        ("target", |r| r.family.clone()),
        ("transforms kept", |r| r.transform_count.to_string()),
        ("bytes moved", |r| r.transform_bytes.to_string()),
        ("relabels (no data moved)", |r| r.relabels.to_string()),
        ("constants re-packed", |r| r.packed_constants.to_string()),
        ("estimated cost (us)", |r| {
            format!("{:.1}", r.estimated_cost / 1e3)
        }),
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

/// JSON for embedding in a `<script>` element: `<` escaped so no string in it
/// can close the element.
fn script_json<T: Serialize>(v: &T) -> Result<String, ExplorerError> {
    let s = serde_json::to_string(v).map_err(|e| ExplorerError::Invalid(e.to_string()))?;
    Ok(s.replace('<', "\\u003c"))
}

/// The explorer page of `plans` (usually two) of the model `source`; each
/// convolution step names the algorithm `options` choose for it.
pub fn render(
    source: &Graph,
    plans: &[&Plan],
    options: &RuntimeOptions,
) -> Result<String, ExplorerError> {
    if plans.is_empty() {
        return Err(ExplorerError::Invalid("no plan to show".into()));
    }
    let mut cache = HashMap::new();
    let mut columns = String::new();
    let mut all_nodes = Vec::new();
    for (k, p) in plans.iter().enumerate() {
        let d = draw(&p.graph, k, &mut cache, options)?;
        let transforms = d.nodes.iter().filter(|n| n.transform).count();
        let _ = write!(
            columns,
            r#"<section class="plan" id="plan{k}"><h2>{} <small>{} · {} transform nodes</small></h2><div class="scroll">{}</div></section>"#,
            esc(&p.report.planner),
            esc(&p.report.family),
            transforms,
            d.svg
        );
        all_nodes.extend(d.nodes);
    }
    let by_id: HashMap<&str, &NodeView> = all_nodes.iter().map(|n| (n.id.as_str(), n)).collect();
    let reports: Vec<&PlanReport> = plans.iter().map(|p| &p.report).collect();
    let title = format!("layoutopt explorer: {}", source.name);
    Ok(format!(
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>{CSS}</style></head>
<body>
<header><h1>{title}</h1><p>{nodes} source nodes. Click a node for its source spans, loop nest and schedule record. Highlighted nodes are kept layout transforms; nodes from the same source layer in the other plan are outlined.</p>{summary}</header>
<main><div id="plans">{columns}</div>
<aside id="panel"><p class="hint">Select a node.</p></aside></main>
<script id="explorer-data" type="application/json">{data}</script>
<script>{JS}</script>
</body></html>
"#,
        title = esc(&title),
        nodes = source.node_count(),
        summary = summary_table(&reports),
        data = script_json(&by_id)?,
    ))
}

const CSS: &str = r#"
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222}
header{padding:8px 16px;border-bottom:1px solid #ccc}
h1{font-size:18px;margin:4px 0}
#summary{border-collapse:collapse}#summary td,#summary th{border:1px solid #ccc;padding:2px 8px;text-align:right}
main{display:flex;height:calc(100vh - 190px)}
#plans{display:flex;flex:3;overflow:hidden}
.plan{flex:1;display:flex;flex-direction:column;border-right:1px solid #ccc;min-width:0}
.plan h2{font-size:15px;margin:6px 10px}.plan h2 small{color:#666;font-weight:normal}
.scroll{overflow:auto;flex:1}
.node rect{fill:#eef3fb;stroke:#6a8cc7;stroke-width:1.2}
.node.laidout rect{fill:#e6f5e9;stroke:#4a9a5a}
.node.fused rect{stroke-dasharray:4 2}
.node.transform rect{fill:#ffe1d6;stroke:#d9531e;stroke-width:2.5}
.node.input rect{fill:#f4f4f4;stroke:#999}
.node.output rect{stroke-dasharray:4 2}
.node.peer rect{stroke:#8a2be2;stroke-width:3}
.node.selected rect{stroke:#000;stroke-width:3}
.node{cursor:pointer}.node text{font-size:11px;pointer-events:none}.node text.op{font-weight:600}
.node text.layout{fill:#555;font-family:monospace}
.edge{fill:none;stroke:#999;stroke-width:1.2}
#panel{flex:2;overflow:auto;padding:8px 14px;border-left:1px solid #ccc}
#panel pre{background:#f7f7f7;padding:6px;font-size:12px;overflow:auto}
.diff .add{background:#dff5df}.diff .del{background:#fbe0e0;text-decoration:line-through}
.step h4{margin:8px 0 2px;font-family:monospace}
"#;

const JS: &str = r#"
(function(){
const data = JSON.parse(document.getElementById('explorer-data').textContent);
const panel = document.getElementById('panel');
function el(tag, attrs, text){const e=document.createElement(tag);for(const k in attrs||{})e.setAttribute(k,attrs[k]);if(text!==undefined)e.textContent=text;return e;}
function section(title){panel.appendChild(el('h3',{},title));}
function show(id){
  const n = data[id]; if(!n) return;
  document.querySelectorAll('.node').forEach(g=>g.classList.remove('selected','peer'));
  const me = document.querySelector('.node[data-id="'+id+'"]'); if(me) me.classList.add('selected');
  const layers = n.spans.map(s=>s.layer);
  document.querySelectorAll('.node').forEach(g=>{
    if(g.dataset.id.split('n')[0]===id.split('n')[0]) return;
    if(g.dataset.layers.split('|').some(l=>layers.includes(l))) g.classList.add('peer');
  });
  panel.innerHTML='';
  panel.appendChild(el('h2',{id:'node-name'},n.name));
  panel.appendChild(el('p',{id:'node-op'},n.op+(n.transform?' (kept layout transform)':'')));
  section('Source spans');
  const ul=el('ul',{id:'spans'});
  n.spans.forEach(s=>ul.appendChild(el('li',{'class':'span'},"layer '"+s.layer+"' ("+s.op_type+" #"+s.index+") in "+s.file)));
  if(!n.spans.length) ul.appendChild(el('li',{},'(none)'));
  panel.appendChild(ul);
  section('Fusion');
  panel.appendChild(el('p',{id:'fused'},n.fused||'runs as a step of its own'));
  section('Layouts');
  panel.appendChild(el('p',{id:'layouts'},'inputs: '+(n.input_layouts.join(', ')||'-')+' → outputs: '+n.output_layouts.join(', ')));
  panel.appendChild(el('p',{},'outputs: '+n.outputs.join(', ')));
  section('Loop nest');
  if(!n.tir){panel.appendChild(el('p',{id:'tir-note'},n.tir_note||'no loop nest'));return;}
  if(n.tir.layouts.length) panel.appendChild(el('p',{},'buffers: '+n.tir.layouts.join('; ')));
  panel.appendChild(el('pre',{id:'loop-nest'},n.tir.steps[n.tir.steps.length-1].loop_nest));
  section('Schedule record');
  const ol=el('ol',{id:'schedule-record'});
  n.tir.steps.forEach((s,i)=>{
    const li=el('li',{'class':'step'});
    li.appendChild(el('h4',{},s.primitive));
    const changed=s.diff.filter(d=>d.tag!==' ').length;
    li.appendChild(el('p',{},i===0?'the unscheduled loop nest':changed+' lines changed'));
    const pre=el('pre',{'class':'diff'});
    s.diff.forEach(d=>{const c=d.tag==='+'?'add':d.tag==='-'?'del':'same';pre.appendChild(el('div',{'class':c},(d.tag==='+'?'+ ':d.tag==='-'?'- ':'  ')+d.text));});
    li.appendChild(pre);
    ol.appendChild(li);
  });
  panel.appendChild(ol);
}
document.querySelectorAll('.node').forEach(g=>g.addEventListener('click',()=>{show(g.dataset.id);history.replaceState(null,'','#node='+g.dataset.id);}));
const m = location.hash.match(/^#node=(.+)$/);
if(m) show(decodeURIComponent(m[1]));
})();
"#;
