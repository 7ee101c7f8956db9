//! `plan` and `compare`: the planners' decisions and what they cost.

use super::run::model_inputs;
use super::{load, native, progress, CliResult, InputShapes, Planning};
use layoutopt::api::json::{document, plan_document, CompareRow, Comparison, Timing};
use layoutopt::api::Planner;
use layoutopt::graph::format_spans;
use layoutopt::runtime::bench::bench;
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
    let p = planning.plan(&g)?;
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

/// Untimed and timed runs of each plan of `compare --measure`.
const MEASURE_WARMUP: usize = 3;
const MEASURE_RUNS: usize = 10;

/// Every planner side by side; `measure` also compiles each plan (timed apart)
/// and times `MEASURE_RUNS` runs after `MEASURE_WARMUP` untimed ones (with the
/// model's recorded input, else random inputs).
pub fn compare(
    model: &Path,
    shapes: &InputShapes,
    planning: &Planning,
    measure: bool,
    json: bool,
) -> CliResult {
    let g = load(model, shapes)?;
    let inputs = if measure {
        Some(model_inputs(model, &g, &[], 0)?.0)
    } else {
        None
    };
    let mut rows = Vec::new();
    let pb = progress::bar(Planner::ALL.len() as u64, "planning");
    for planner in Planner::ALL {
        pb.set_message(format!("planning with '{planner}'"));
        let p = planning.plan_with(&g, planner)?;
        let measured = match &inputs {
            Some(x) => {
                let t = Instant::now();
                let compiled =
                    native::compile(&p.graph, &native::KernelArgs::default().options(0))?;
                let compile = t.elapsed();
                let report = bench(&compiled, x, MEASURE_WARMUP, MEASURE_RUNS, None)?;
                Some(Timing::of(
                    &report,
                    compile,
                    compiled.threads(),
                    MEASURE_WARMUP,
                ))
            }
            None => None,
        };
        rows.push(CompareRow::of(&p.report, measured));
        pb.inc(1);
    }
    pb.finish_and_clear();
    if json {
        let body = Comparison {
            target: planning.target.to_string(),
            planners: rows,
        };
        outln!("{}", document("compare", model, &body))?;
        return Ok(());
    }
    outln!(
        "{:<8} {:>10} {:>14} {:>16} {:>12} {:>10} {:>14} {:>12}",
        "planner",
        "transforms",
        "bytes moved",
        "est. cost (us)",
        "plan (ms)",
        "gap",
        "compile (ms)",
        "p50 run (ms)"
    )?;
    for r in rows {
        let gap = r
            .solver_gap
            .map_or("-".to_string(), |g| format!("{:.2}%", g * 100.0));
        let figure = |x: Option<f64>| x.map_or("-".to_string(), |t| format!("{t:.2}"));
        let m = r.measured.as_ref();
        outln!(
            "{:<8} {:>10} {:>14} {:>16.1} {:>12.1} {:>10} {:>14} {:>12}",
            r.planner,
            r.transform_count,
            r.transform_bytes,
            r.estimated_cost_ns / 1e3,
            r.plan_ms,
            gap,
            figure(m.map(|m| m.compile_ms)),
            figure(m.map(|m| m.p50_ms))
        )?;
    }
    if inputs.is_some() {
        outln!(
            "runs: the median of {MEASURE_RUNS} after {MEASURE_WARMUP} untimed; compile time apart"
        )?;
    }
    Ok(())
}
