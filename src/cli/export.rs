//! `export` (the planned graph as ONNX) and `explore` (the HTML explorer).

use super::{native, CliResult, ModelArgs, Planning};
use layoutopt::api::json::{document, Exploration, Export};
use layoutopt::api::{self, ExportFor, Graph, Machine, PlanLayouts, PlannerKind};
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

/// What `export` and `explore` share: the model they read, how they plan it, and
/// the file they write.
#[derive(clap::Args)]
pub struct PlanToFile {
    #[command(flatten)]
    pub source: ModelArgs,
    #[command(flatten)]
    pub output: OutputFile,
    #[command(flatten)]
    pub planning: Planning,
}

impl PlanToFile {
    /// The model file.
    fn model(&self) -> &Path {
        self.source.path()
    }

    /// The output file.
    fn out(&self) -> &Path {
        &self.output.output
    }

    /// The model, imported once the output path is accepted: a refused path is
    /// reported before the model is read.
    fn load(&self) -> Result<Graph, api::Error> {
        api::check_output(self.model(), self.out(), self.output.force)?;
        self.source.load()
    }
}

/// Options of `layoutopt export`.
#[derive(clap::Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub job: PlanToFile,
    /// What the model is for.
    #[arg(long = "for", value_name = "PURPOSE", default_value = "verification",
          value_parser = purpose_parser())]
    pub purpose: ExportFor,
}

/// Options of `layoutopt explore`.
#[derive(clap::Args)]
pub struct ExploreArgs {
    #[command(flatten)]
    pub job: PlanToFile,
    /// The planner shown beside `--planner`.
    #[arg(long, default_value = "local", value_parser = super::planner_parser())]
    pub against: PlannerKind,
    #[command(flatten)]
    pub kernels: native::KernelArgs,
}

pub fn export(machine: &Machine, args: &ExportArgs, json: bool) -> CliResult {
    let (job, purpose) = (&args.job, args.purpose);
    let (model, out, planning) = (job.model(), job.out(), &job.planning);
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
    // The output is refused before the model is read, not after planning it.
    let source = job.load()?;
    let planned = match purpose {
        ExportFor::Verification => {
            planning.plan(machine, &source, &api::RuntimeOptions::with_threads(0))?
        }
        ExportFor::Onnxruntime => super::progress::step("simplifying for onnxruntime", || {
            PlanLayouts::for_onnxruntime()
                .with_rules(Some(planning.rule_source()))
                .plan(&source)
        })?,
    };
    let written = super::progress::step(&format!("writing {}", out.display()), || {
        api::export_plan(model, &source, &planned, out, job.output.force)
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

pub fn explore(machine: &Machine, args: &ExploreArgs, json: bool) -> CliResult {
    let (job, other) = (&args.job, args.against);
    let (model, out, planning) = (job.model(), job.out(), &job.planning);
    let options = &args.kernels.options(0);
    let source = job.load()?;
    let first = planning.plan(machine, &source, options)?;
    let costs = api::measured_costs(machine, options)?;
    let second = planning.plan_with(&source, other, &costs)?;
    super::progress::step("lowering nodes for the explorer", || {
        api::explore_plans(
            machine,
            model,
            &source,
            &[&first, &second],
            out,
            job.output.force,
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
