//! The files a plan can be written as: an ONNX model (`export`) and an HTML
//! explorer (`explore`). The command line and the Python package both write
//! them through here, with the same refusals.

use super::Error;
use crate::core::{parse_choice, UnknownChoice};
use crate::explorer;
use crate::export::{
    export_model, keeps_symbolic_batch, opset_for, write_model, ExportOptions, PROTOBUF_LIMIT,
};
use crate::graph::Graph;
use crate::layout::plan::Plan;
use std::path::{Path, PathBuf};

/// Refuses to write `path` when it is the input model under any name (a hard
/// link included), or a symbolic link unless `force` (the write would replace
/// its target).
pub fn check_output(model: &Path, path: &Path, force: bool) -> Result<(), Error> {
    if !force && std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(Error::Output(format!(
            "{} is a symbolic link: refusing to write through it (--force writes its target)",
            path.display()
        )));
    }
    // The same file under any name: same device and inode.
    let same = |a: &Path, b: &Path| {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
            _ => false,
        }
    };
    if same(model, path) {
        return Err(Error::Output(format!(
            "{} is the input model: refusing to overwrite it",
            path.display()
        )));
    }
    Ok(())
}

/// What an exported model is for (`export --for`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExportFor {
    /// The plan's layouts spelled out in standard ONNX ops, to check the plan
    /// in another runtime; it runs slower there than the source model.
    #[default]
    Verification,
    /// The source's layouts with layoutopt's graph simplifications
    /// ([`super::PlanLayouts::for_onnxruntime`]), to run in onnxruntime.
    Onnxruntime,
}

impl ExportFor {
    /// Every purpose, in the order `--help` lists them.
    pub const ALL: [ExportFor; 2] = [ExportFor::Verification, ExportFor::Onnxruntime];

    /// The purpose as the command line spells it.
    pub fn name(self) -> &'static str {
        match self {
            ExportFor::Verification => "verification",
            ExportFor::Onnxruntime => "onnxruntime",
        }
    }

    /// What a model exported for this purpose is, in one line.
    pub fn help(self) -> &'static str {
        match self {
            ExportFor::Verification => {
                "the plan's layouts as Transpose/Reshape/Pad/Slice nodes: checks the plan \
                 in another runtime, runs slower there than the source model"
            }
            ExportFor::Onnxruntime => {
                "the source's NCHW layouts (onnxruntime blocks channels itself) with \
                 layoutopt's graph simplifications (folded constants, batch norms and pads \
                 folded into convs): to run in onnxruntime, at least as fast as the source"
            }
        }
    }
}

impl std::str::FromStr for ExportFor {
    type Err = UnknownChoice;
    fn from_str(s: &str) -> Result<ExportFor, UnknownChoice> {
        parse_choice(s, "an export purpose", &ExportFor::ALL, ExportFor::name)
    }
}

/// What an export wrote (its JSON document is `json::Export`, which names
/// the files without their folders).
#[derive(Clone, Debug)]
pub struct Exported {
    /// The ONNX model written.
    pub path: PathBuf,
    /// Its opset.
    pub opset: i64,
    /// The source's symbolic batch, if it has one.
    pub symbolic_batch: Option<String>,
    /// Whether that batch stayed symbolic (else the plan fixed it).
    pub batch_kept_symbolic: bool,
    /// The external data file holding the tensors (a model past 2 GiB).
    pub data_file: Option<PathBuf>,
}

/// Writes `plan` of the model `source` (imported from `model`) as an ONNX
/// model at `out`, with the source's output names; its tensors go to
/// `<out>.data` past protobuf's 2 GiB. Neither file may be the input model.
pub fn export_plan(
    model: &Path,
    source: &Graph,
    plan: &Plan,
    out: &Path,
    force: bool,
) -> Result<Exported, Error> {
    let data_file = out.with_file_name(format!(
        "{}.data",
        out.file_name().unwrap_or_default().to_string_lossy()
    ));
    check_output(model, out, force)?;
    check_output(model, &data_file, force)?;
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
    let m = export_model(&plan.graph, &opts)?;
    let kept = (source.symbolic_batch.as_ref()).is_some_and(|name| keeps_symbolic_batch(&m, name));
    let data_file = write_model(m, out, PROTOBUF_LIMIT)?;
    Ok(Exported {
        path: out.to_path_buf(),
        opset: opset_for(&plan.graph),
        symbolic_batch: source.symbolic_batch.clone(),
        batch_kept_symbolic: kept,
        data_file,
    })
}

/// Writes the HTML explorer of `plans` of the model `source` (imported from
/// `model`) at `out`, which may not be the input model.
pub fn explore_plans(
    machine: &crate::runtime::Machine,
    model: &Path,
    source: &Graph,
    plans: &[&Plan],
    out: &Path,
    force: bool,
    options: &crate::runtime::RuntimeOptions,
) -> Result<(), Error> {
    check_output(model, out, force)?;
    let html = explorer::render(machine, source, plans, options)?;
    std::fs::write(out, html)
        .map_err(|e| Error::Output(format!("{}: cannot write: {e}", out.display())))
}
