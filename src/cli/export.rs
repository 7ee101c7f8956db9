//! `export` (the planned graph as ONNX) and `explore` (the HTML explorer).

use super::{load, CliResult, Planning};
use layoutopt::export::{opset_for, save_model, ExportOptions};
use std::path::Path;

pub fn export(model: &Path, out: &Path, planning: &Planning) -> CliResult {
    let source = load(model)?;
    let planned = planning.plan(&source)?;
    // The exported model keeps the source's output names.
    let opts = ExportOptions {
        output_names: Some(
            source
                .outputs()
                .iter()
                .map(|&v| source.value(v).name.clone())
                .collect(),
        ),
    };
    super::progress::step(&format!("writing {}", out.display()), || {
        save_model(&planned.graph, out, &opts)
    })?;
    outln!(
        "{}: '{}' plan for {} ({} transforms kept) written to {} (ONNX opset {})",
        model.display(),
        planned.report.planner,
        planned.report.family,
        planned.report.transform_count,
        out.display(),
        opset_for(&planned.graph)
    )?;
    Ok(())
}

pub fn explore(model: &Path, out: &Path, planning: &Planning, other: &str) -> CliResult {
    let source = load(model)?;
    let first = planning.plan(&source)?;
    let second = planning.plan_with(&source, other)?;
    let html = super::progress::step("lowering nodes for the explorer", || {
        layoutopt::explorer::render(&source, &[&first, &second])
    })?;
    std::fs::write(out, html).map_err(|e| format!("{}: cannot write: {e}", out.display()))?;
    outln!(
        "{}: explorer of the '{}' and '{}' plans for {} written to {}",
        model.display(),
        first.report.planner,
        second.report.planner,
        first.report.family,
        out.display()
    )?;
    Ok(())
}
