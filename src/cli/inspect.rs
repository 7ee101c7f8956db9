//! `inspect`: the imported graph, node by node.

use super::{load, CliResult, InputShapes};
use layoutopt::graph::{format_spans, Op};
use std::collections::BTreeMap;
use std::path::Path;

pub fn inspect(model: &Path, shapes: &InputShapes) -> CliResult {
    let g = load(model, shapes)?;
    let order = g.topo_order()?;
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let constants = order
        .iter()
        .filter(|&&id| matches!(g.node(id).op, Op::Constant(_)))
        .count();
    outln!(
        "graph '{}': {} nodes ({} constants), {} inputs, {} outputs",
        g.name,
        g.node_count(),
        constants,
        g.inputs().len(),
        g.outputs().len()
    )?;
    outln!("  {:<20} {:<44} {:<10} source", "op", "outputs", "layout")?;
    for id in order {
        let n = g.node(id);
        if matches!(n.op, Op::Constant(_)) {
            continue;
        }
        *counts.entry(n.op.kind_name()).or_default() += 1;
        let outs: Vec<String> = n
            .outputs
            .iter()
            .map(|v| format!("{} {}", v.name, v.ty))
            .collect();
        // An imported graph stores every tensor row-major (TFLite activations
        // are NHWC tensors, row-major); a planned op says where its output lives.
        let layout = match &n.op {
            Op::InLayout(l) => l.outputs[0].0.to_string(),
            _ => "row-major".to_string(),
        };
        outln!(
            "  {:<20} {:<44} {:<10} {}",
            n.op.kind_name(),
            outs.join(", "),
            layout,
            format_spans(&n.spans)
        )?;
    }
    let summary: Vec<String> = counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
    outln!("ops: {}", summary.join(", "))?;
    Ok(())
}
