//! `plan` and `compare`: the planners' decisions and what they cost.

use super::progress;
use super::run::{execute, model_inputs};
use super::{load, CliResult, InputShapes, Planning, PLANNERS};
use layoutopt::graph::format_spans;
use layoutopt::runtime::conv_algo::ConvAlgo;
use layoutopt::runtime::{CompiledModel, RuntimeOptions};
use std::path::Path;
use std::time::Instant;

/// The plan report and the algorithm each convolution runs with under
/// `options` (as JSON: the report's keys and `conv_algorithms`).
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
        let mut report = serde_json::to_value(&p.report).expect("a plan report serialises");
        let by_algo = |pairs: &[(ConvAlgo, f64)]| {
            let map: serde_json::Map<String, serde_json::Value> = pairs
                .iter()
                .map(|(a, v)| (a.to_string(), (*v).into()))
                .collect();
            serde_json::Value::Object(map)
        };
        let algos: Vec<serde_json::Value> = convs
            .iter()
            .map(|c| {
                serde_json::json!({
                    "step": c.name,
                    "algorithm": c.decision.algo.to_string(),
                    "millis": by_algo(&c.decision.millis),
                    "errors": by_algo(&c.decision.errors),
                    "spans": format_spans(&c.spans),
                })
            })
            .collect();
        report["conv_algorithms"] = algos.into();
        outln!(
            "{}",
            serde_json::to_string_pretty(&report).expect("a plan report serialises")
        )?;
    } else if !convs.is_empty() {
        outln!("convolution algorithms ({}):", convs.len())?;
        for c in convs {
            outln!("  {}: {} [{}]", c.name, c.decision, format_spans(&c.spans))?;
        }
    }
    Ok(())
}

/// Every planner side by side; `measure` also runs each plan once (with the
/// model's recorded input, else random inputs) and reports the time.
pub fn compare(
    model: &Path,
    shapes: &InputShapes,
    planning: &Planning,
    measure: bool,
) -> CliResult {
    let g = load(model, shapes)?;
    let inputs = if measure {
        Some(model_inputs(model, &g, &[], 0)?.0)
    } else {
        None
    };
    let mut rows = Vec::new();
    let pb = progress::bar(PLANNERS.len() as u64, "planning");
    for name in PLANNERS {
        pb.set_message(format!("planning with '{name}'"));
        let p = planning.plan_with(&g, name)?;
        let run_ms = match &inputs {
            Some(x) => {
                let t = Instant::now();
                execute(&p.graph, x)?;
                Some(t.elapsed().as_secs_f64() * 1e3)
            }
            None => None,
        };
        rows.push((name, p.report, run_ms));
        pb.inc(1);
    }
    pb.finish_and_clear();
    outln!(
        "{:<8} {:>10} {:>14} {:>16} {:>12} {:>10} {:>12}",
        "planner",
        "transforms",
        "bytes moved",
        "est. cost (us)",
        "plan (ms)",
        "gap",
        "run (ms)"
    )?;
    for (name, r, run_ms) in rows {
        let gap = r
            .solver
            .as_ref()
            .map_or("-".to_string(), |s| format!("{:.2}%", s.gap * 100.0));
        let run = run_ms.map_or("-".to_string(), |t| format!("{t:.1}"));
        outln!(
            "{:<8} {:>10} {:>14} {:>16.1} {:>12.1} {:>10} {:>12}",
            name,
            r.transform_count,
            r.transform_bytes,
            r.estimated_cost / 1e3,
            r.timings.plan_ms,
            gap,
            run
        )?;
    }
    Ok(())
}
