//! `export` (the planned graph as ONNX) and `explore` (the HTML explorer).

use super::{load, CliResult, InputShapes, Planning};
use layoutopt::api::json::{document, Exploration, Export};
use layoutopt::api::{self, ExportFor, PlanLayouts, PlannerKind};
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

/// Parses an `export --for` value, each purpose explained in `--help`.
pub fn purpose_parser() -> impl clap::builder::TypedValueParser<Value = ExportFor> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser as _};
    PossibleValuesParser::new(ExportFor::ALL.map(|f| PossibleValue::new(f.name()).help(f.help())))
        .try_map(|s| s.parse::<ExportFor>())
}

pub fn export(
    model: &Path,
    shapes: &InputShapes,
    output: &OutputFile,
    (planning, purpose): (&Planning, ExportFor),
    json: bool,
) -> CliResult {
    let out = output.output.as_path();
    let default_target = super::parse_target("nchwc")?;
    if purpose == ExportFor::Onnxruntime
        && (planning.planner != PlannerKind::Global || planning.target != default_target)
    {
        return Err(
            "--planner and --target choose the plan of --for verification: \
                    --for onnxruntime keeps the source's layouts"
                .into(),
        );
    }
    // Refused before the model is read, not after planning it.
    api::check_output(model, out, output.force)?;
    let source = load(model, shapes)?;
    let planned = match purpose {
        ExportFor::Verification => planning.plan(
            &source,
            &layoutopt::runtime::RuntimeOptions::with_threads(0),
        )?,
        ExportFor::Onnxruntime => super::progress::step("simplifying for onnxruntime", || {
            PlanLayouts::for_onnxruntime()
                .with_rules(Some(planning.rule_source()))
                .plan(&source)
        })?,
    };
    let written = super::progress::step(&format!("writing {}", out.display()), || {
        api::export_plan(model, &source, &planned, out, output.force)
    })?;
    if json {
        let doc = Export::of(purpose, &planned.report, &written);
        outln!("{}", document("export", model, &doc))?;
        return Ok(());
    }
    let batch = match (&written.symbolic_batch, written.batch_kept_symbolic) {
        (Some(name), true) => format!(", batch '{name}' symbolic"),
        (Some(name), false) => format!(", batch '{name}' fixed: the plan depends on its value"),
        (None, _) => String::new(),
    };
    let data = (written.data_file.as_ref())
        .map(|d| format!(", tensors in {}", d.display()))
        .unwrap_or_default();
    let what = match purpose {
        ExportFor::Verification => format!(
            "'{}' plan for {} ({} transforms kept)",
            planned.report.planner, planned.report.family, planned.report.transform_count
        ),
        ExportFor::Onnxruntime => "model for onnxruntime (source layouts)".to_string(),
    };
    outln!(
        "{}: {what} written to {} (ONNX opset {}{batch}{data})",
        model.display(),
        out.display(),
        written.opset
    )?;
    Ok(())
}

pub fn explore(
    model: &Path,
    shapes: &InputShapes,
    output: &OutputFile,
    planning: &Planning,
    (other, json): (PlannerKind, bool),
    options: &layoutopt::runtime::RuntimeOptions,
) -> CliResult {
    let out = output.output.as_path();
    api::check_output(model, out, output.force)?;
    let source = load(model, shapes)?;
    let first = planning.plan(&source, options)?;
    let costs = layoutopt::runtime::calibrate::measured_cost_model(options)?;
    let second = planning.plan_with(&source, other, &costs)?;
    super::progress::step("lowering nodes for the explorer", || {
        api::explore_plans(
            model,
            &source,
            &[&first, &second],
            out,
            output.force,
            options,
        )
    })?;
    if json {
        let doc = Exploration::of(&[&first.report, &second.report], out);
        outln!("{}", document("explore", model, &doc))?;
        return Ok(());
    }
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
