//! `inspect`: the imported graph, node by node.

use super::{CliResult, ModelArgs};
use layoutopt::api::format_spans;
use layoutopt::api::json::{document, Inspection};

/// Options of `layoutopt inspect`.
#[derive(clap::Args)]
pub struct InspectArgs {
    #[command(flatten)]
    pub source: ModelArgs,
}

pub fn inspect(args: &InspectArgs, json: bool) -> CliResult {
    let model = args.source.path();
    let g = args.source.load()?;
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
