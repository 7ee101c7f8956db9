//! `export` (the planned graph as ONNX) and `explore` (the HTML explorer).

use super::{load, CliResult, InputShapes, Planning};
use layoutopt::export::{
    export_model, keeps_symbolic_batch, opset_for, write_model, ExportError, ExportOptions,
    PROTOBUF_LIMIT,
};
use std::path::{Path, PathBuf};

/// The file a command writes (`-o`), and whether it may write through a
/// symbolic link.
#[derive(clap::Args)]
pub struct OutputFile {
    /// The file to write. It is never the input model; a symbolic link is
    /// refused unless --force is given.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Write through a symbolic link at the output path (replacing its target).
    #[arg(long)]
    pub force: bool,
}

impl OutputFile {
    /// Refuses to write `path` (the output or a file beside it) when it is the
    /// input model under any name, or a symbolic link without --force, whose
    /// target the write would silently replace.
    fn check(&self, model: &Path, path: &Path) -> CliResult {
        if !self.force && std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
        {
            return Err(format!(
                "{} is a symbolic link: refusing to write through it (--force writes its target)",
                path.display()
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
        if same(model, path) {
            return Err(format!(
                "{} is the input model: refusing to overwrite it",
                path.display()
            )
            .into());
        }
        Ok(())
    }
}

pub fn export(
    model: &Path,
    shapes: &InputShapes,
    output: &OutputFile,
    planning: &Planning,
) -> CliResult {
    let out = output.output.as_path();
    output.check(model, out)?;
    // Where the tensors go when the model passes protobuf's 2 GiB.
    let data_file = out.with_file_name(format!(
        "{}.data",
        out.file_name().unwrap_or_default().to_string_lossy()
    ));
    output.check(model, &data_file)?;
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
    let (kept_batch, written) =
        super::progress::step(&format!("writing {}", out.display()), || {
            let m = export_model(&planned.graph, &opts)?;
            let kept = (source.symbolic_batch.as_ref()).map(|name| keeps_symbolic_batch(&m, name));
            Ok::<_, ExportError>((kept, write_model(m, out, PROTOBUF_LIMIT)?))
        })?;
    let batch = match (&source.symbolic_batch, kept_batch) {
        (Some(name), Some(true)) => format!(", batch '{name}' symbolic"),
        (Some(name), _) => format!(", batch '{name}' fixed: the plan depends on its value"),
        (None, _) => String::new(),
    };
    let data = written
        .map(|d| format!(", tensors in {}", d.display()))
        .unwrap_or_default();
    outln!(
        "{}: '{}' plan for {} ({} transforms kept) written to {} (ONNX opset {}{batch}{data})",
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
    output: &OutputFile,
    planning: &Planning,
    other: &str,
    options: &layoutopt::runtime::RuntimeOptions,
) -> CliResult {
    let out = output.output.as_path();
    output.check(model, out)?;
    let source = load(model, shapes)?;
    let first = planning.plan(&source)?;
    let second = planning.plan_with(&source, other)?;
    let html = super::progress::step("lowering nodes for the explorer", || {
        layoutopt::explorer::render(&source, &[&first, &second], options)
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
