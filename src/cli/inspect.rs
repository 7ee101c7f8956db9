//! `inspect`: the imported graph, node by node.

use super::{load, CliResult, InputShapes};
use layoutopt::api::json::{document, Inspection};
use layoutopt::graph::format_spans;
use std::path::Path;

pub fn inspect(model: &Path, shapes: &InputShapes, json: bool) -> CliResult {
    let g = load(model, shapes)?;
    let inspection = Inspection::of(&g)?;
    if json {
        outln!("{}", document("inspect", model, &inspection))?;
        return Ok(());
    }
    outln!(
        "graph '{}': {} nodes ({} constants), {} inputs, {} outputs",
        inspection.graph,
        g.node_count(),
        inspection.constants,
        inspection.inputs.len(),
        inspection.outputs.len()
    )?;
    outln!("  {:<20} {:<44} {:<10} source", "op", "outputs", "layout")?;
    for n in &inspection.nodes {
        let outs: Vec<String> = n
            .outputs
            .iter()
            .map(|v| format!("{} {}{:?}", v.name, v.dtype, v.shape))
            .collect();
        outln!(
            "  {:<20} {:<44} {:<10} {}",
            n.op,
            outs.join(", "),
            n.layout,
            format_spans(&n.spans)
        )?;
    }
    let summary: Vec<String> = inspection
        .op_counts
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    outln!("ops: {}", summary.join(", "))?;
    Ok(())
}
