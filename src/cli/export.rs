//! `export` (the planned graph as ONNX) and `explore` (the HTML explorer).

use super::{load, CliResult, InputShapes, Planning};
use layoutopt::export::{
    export_model, keeps_symbolic_batch, opset_for, ExportError, ExportOptions,
};
use protobuf::Message;
use std::path::Path;

/// Refuses an output path that is the input model itself (under any name) or a
/// symbolic link, whose target the write would silently replace.
fn check_output(model: &Path, out: &Path) -> CliResult {
    if std::fs::symlink_metadata(out).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(format!(
            "{} is a symbolic link: refusing to write through it (remove it or pick another path)",
            out.display()
        )
        .into());
    }
    // The same file under any name (a hard link included): same device and inode.
    let same = |a: &Path, b: &Path| {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
            _ => false,
        }
    };
    if same(model, out) {
        return Err(format!(
            "{} is the input model: refusing to overwrite it",
            out.display()
        )
        .into());
    }
    Ok(())
}

pub fn export(model: &Path, shapes: &InputShapes, out: &Path, planning: &Planning) -> CliResult {
    check_output(model, out)?;
    let source = load(model, shapes)?;
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
        symbolic_batch: source.symbolic_batch.clone(),
    };
    let m = super::progress::step(&format!("writing {}", out.display()), || {
        let m = export_model(&planned.graph, &opts)?;
        let bytes = m
            .write_to_bytes()
            .map_err(|e| format!("protobuf encoding failed: {e}"))?;
        std::fs::write(out, bytes).map_err(|source| ExportError::Io {
            path: out.display().to_string(),
            source,
        })?;
        Ok::<_, Box<dyn std::error::Error>>(m)
    })?;
    let batch = match &source.symbolic_batch {
        Some(name) if keeps_symbolic_batch(&m, name) => format!(", batch '{name}' symbolic"),
        Some(name) => format!(", batch '{name}' fixed: the plan depends on its value"),
        None => String::new(),
    };
    outln!(
        "{}: '{}' plan for {} ({} transforms kept) written to {} (ONNX opset {}{batch})",
        model.display(),
        planned.report.planner,
        planned.report.family,
        planned.report.transform_count,
        out.display(),
        opset_for(&planned.graph)
    )?;
    Ok(())
}

pub fn explore(
    model: &Path,
    shapes: &InputShapes,
    out: &Path,
    planning: &Planning,
    other: &str,
) -> CliResult {
    check_output(model, out)?;
    let source = load(model, shapes)?;
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
