//! `plan` and `compare`: the planners' decisions and what they cost.

use super::run::model_inputs;
use super::{load, native, progress, CliResult, InputShapes, Planning};
use layoutopt::api::json::{document, plan_document, CompareRow, Comparison, Timing};
use layoutopt::api::PlannerKind;
use layoutopt::graph::format_spans;
use layoutopt::layout::plan::Plan;
use layoutopt::runtime::bench::{time_run, BenchReport};
use layoutopt::runtime::calibrate::{measured_cost_model, predicted_step_seconds};
use layoutopt::runtime::roofline::machine_peaks;
use layoutopt::runtime::{CompiledModel, RuntimeOptions};
use std::path::Path;
use std::time::Instant;

/// The plan report and the algorithm each convolution runs with under
/// `options` (in JSON, under `timings`: it is chosen by measuring).
pub fn plan(
    model: &Path,
    shapes: &InputShapes,
    planning: &Planning,
    json: bool,
    options: &RuntimeOptions,
) -> CliResult {
    let g = load(model, shapes)?;
    let p = planning.plan(&g, options)?;
    if !json {
        out!("{}", p.report.to_text())?;
    }
    let convs = progress::step("choosing convolution algorithms", || {
        CompiledModel::conv_algorithms(&p.graph, options)
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
pub fn compare(
    model: &Path,
    shapes: &InputShapes,
    planning: &Planning,
    measure: bool,
    json: bool,
) -> CliResult {
    let g = load(model, shapes)?;
    let runtime = native::KernelArgs::default().options(0);
    let costs = measured_cost_model(&runtime)?;
    let mut plans = Vec::new();
    let pb = progress::bar(PlannerKind::ALL.len() as u64, "planning");
    for planner in PlannerKind::ALL {
        pb.set_message(format!("planning with '{planner}'"));
        plans.push(planning.plan_with(&g, planner, &costs)?);
        pb.inc(1);
    }
    pb.finish_and_clear();
    let measured = match measure {
        true => measure_plans(model, &g, &plans, &runtime)?
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
    model: &Path,
    g: &layoutopt::graph::Graph,
    plans: &[Plan],
    runtime: &RuntimeOptions,
) -> Result<Vec<Timing>, Box<dyn std::error::Error>> {
    let inputs = model_inputs(model, g, &[], 0)?.0;
    let peaks = machine_peaks(runtime.threads, runtime.conv_algo.cache.as_deref(), false)?.peaks;
    let mut compiled = Vec::new();
    for p in plans {
        let t = Instant::now();
        let c = native::compile(&p.graph, runtime)?;
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
            times[i].push(time_run(&compiled[i].1, &inputs)?);
        }
    }
    Ok(compiled
        .iter()
        .zip(times)
        .map(|((compile, c), times)| {
            let report = BenchReport::of_times(times);
            Timing {
                predicted_ms: Some(predicted_step_seconds(c, &peaks).iter().sum::<f64>() * 1e3),
                ..Timing::of(&report, *compile, c.threads(), MEASURE_WARMUP)
            }
        })
        .collect())
}
