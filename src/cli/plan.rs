//! `plan` and `compare`: the planners' decisions and what they cost.

use super::run::{graph_inputs, model_inputs};
use super::{native, progress, CliResult, ModelArgs, Planning};
use layoutopt::api::json::{document, plan_document, CompareRow, Comparison, Timing};
use layoutopt::api::{
    self, format_spans, BenchReport, Graph, Machine, Plan, PlannerKind, RuntimeOptions,
    TargetFamily,
};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Options of `layoutopt plan`.
#[derive(clap::Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub source: ModelArgs,
    #[command(flatten)]
    pub planning: Planning,
    #[command(flatten)]
    pub kernels: native::KernelArgs,
}

/// Options of `layoutopt compare`.
#[derive(clap::Args)]
pub struct CompareArgs {
    #[command(flatten)]
    pub source: ModelArgs,
    /// TargetFamily layout family: nchw, nhwc, nchwc (block width from this CPU) or nchw<x>c.
    #[arg(long, default_value = "nchwc", value_parser = super::parse_target)]
    pub target: TargetFamily,
    /// Folder of `*.rules` files to rewrite with instead of the built-in rules
    /// (also LAYOUTOPT_RULES).
    #[arg(long, value_name = "DIR")]
    pub rules: Option<PathBuf>,
    /// Also compile every plan (timed apart) and time 10 runs after 3
    /// untimed ones.
    #[arg(long)]
    pub measure: bool,
}

/// The plan report and the algorithm each convolution runs with under
/// `options` (in JSON, under `timings`: it is chosen by measuring).
pub fn plan(machine: &Machine, args: &PlanArgs, json: bool) -> CliResult {
    let (model, options) = (args.source.path(), &args.kernels.options(0));
    let g = args.source.load()?;
    let p = args.planning.plan(machine, &g, options)?;
    if !json {
        out!("{}", p.report.to_text())?;
    }
    let convs = progress::step("choosing convolution algorithms", || {
        api::conv_algorithms(machine, &p.graph, options)
    })?;
    if json {
        outln!("{}", plan_document(model, &p.report, Some(&convs)))?;
    } else if !convs.is_empty() {
        outln!("convolution algorithms ({}):", convs.len())?;
        for c in convs {
            outln!("  {}: {} [{}]", c.name, c.decision, format_spans(&c.spans))?;
        }
    }
    Ok(())
}

/// Untimed runs of each plan of `compare --measure`, then timed rounds: each
/// round runs every plan once, the plans in turn first, so that a change of
/// load on the machine falls on all of them alike.
const MEASURE_WARMUP: usize = 3;
const MEASURE_ROUNDS: usize = 10;

/// Every planner side by side, under the cost model measured on this
/// machine; `measure` also compiles each plan (timed apart), predicts its run
/// time and times `MEASURE_ROUNDS` interleaved runs after `MEASURE_WARMUP`
/// untimed ones (with the model's recorded input, else random inputs).
pub fn compare(machine: &Machine, args: &CompareArgs, json: bool) -> CliResult {
    let (model, measure) = (args.source.path(), args.measure);
    let planning = Planning {
        planner: PlannerKind::Global,
        target: args.target,
        rules: args.rules.clone(),
    };
    let g = args.source.load()?;
    let runtime = native::KernelArgs::default().options(0);
    let costs = api::measured_costs(machine, &runtime)?;
    let mut plans = Vec::new();
    let pb = progress::bar(PlannerKind::ALL.len() as u64, "planning");
    for planner in PlannerKind::ALL {
        pb.set_message(format!("planning with '{planner}'"));
        plans.push(planning.plan_with(&g, planner, &costs)?);
        pb.inc(1);
    }
    pb.finish_and_clear();
    let measured = match measure {
        true => measure_plans(machine, (model, &g), &plans, &runtime)?
            .into_iter()
            .map(Some)
            .collect(),
        false => vec![None; plans.len()],
    };
    let rows: Vec<CompareRow> = plans
        .iter()
        .zip(measured)
        .map(|(p, m)| CompareRow::of(&p.report, m))
        .collect();
    if json {
        let body = Comparison {
            target: planning.target.to_string(),
            planners: rows,
        };
        outln!("{}", document("compare", model, &body))?;
        return Ok(());
    }
    outln!(
        "{:<8} {:>10} {:>14} {:>16} {:>12} {:>10} {:>14} {:>14} {:>12}",
        "planner",
        "transforms",
        "bytes moved",
        "est. cost (us)",
        "plan (ms)",
        "gap",
        "compile (ms)",
        "predicted (ms)",
        "p50 run (ms)"
    )?;
    for r in rows {
        let gap = r
            .solver_gap
            .map_or("-".to_string(), |g| format!("{:.2}%", g * 100.0));
        let figure = |x: Option<f64>| x.map_or("-".to_string(), |t| format!("{t:.2}"));
        let m = r.measured.as_ref();
        outln!(
            "{:<8} {:>10} {:>14} {:>16.1} {:>12.1} {:>10} {:>14} {:>14} {:>12}",
            r.planner,
            r.transform_count,
            r.transform_bytes,
            r.estimated_cost_ns / 1e3,
            r.plan_ms,
            gap,
            figure(m.map(|m| m.compile_ms)),
            figure(m.and_then(|m| m.predicted_ms)),
            figure(m.map(|m| m.p50_ms))
        )?;
    }
    if measure {
        outln!(
            "runs: the median of {MEASURE_ROUNDS} rounds, the plans in turn, after \
             {MEASURE_WARMUP} untimed runs each; compile time apart; predicted: \
             the cost model's sum over the compiled steps"
        )?;
    }
    Ok(())
}

/// Compiles each plan (timed), predicts one run of it, and times its runs
/// in interleaved rounds.
fn measure_plans(
    machine: &Machine,
    (model, g): (&Path, &Graph),
    plans: &[Plan],
    runtime: &RuntimeOptions,
) -> Result<Vec<Timing>, Box<dyn std::error::Error>> {
    let inputs = model_inputs(model, &graph_inputs(g), &[], 0)?.0;
    let peaks = machine.peaks(runtime.threads, false)?.peaks;
    let mut compiled = Vec::new();
    for p in plans {
        let t = Instant::now();
        let c = native::compile(machine, &p.graph, runtime)?;
        compiled.push((t.elapsed(), c));
    }
    for (_, c) in &compiled {
        for _ in 0..MEASURE_WARMUP {
            c.run(&inputs)?;
        }
    }
    let mut times = vec![Vec::with_capacity(MEASURE_ROUNDS); compiled.len()];
    for round in 0..MEASURE_ROUNDS {
        for k in 0..compiled.len() {
            let i = (round + k) % compiled.len();
            times[i].push(api::time_run(&compiled[i].1, &inputs)?);
        }
    }
    Ok(compiled
        .iter()
        .zip(times)
        .map(|((compile, c), times)| {
            let report = BenchReport::of_times(times);
            Timing {
                predicted_ms: Some(
                    api::predicted_step_seconds(c, &peaks).iter().sum::<f64>() * 1e3,
                ),
                ..Timing::of(&report, *compile, c.threads(), MEASURE_WARMUP)
            }
        })
        .collect())
}
