//! `run` and `bench`: execute a planned model on the native runtime.

use super::{load, native, progress, CliResult, InputShapes, Planning};
use layoutopt::frontend::onnx::load_tensor_pb;
use layoutopt::graph::{DType, Graph, Tensor, TensorData};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Compiles and runs a planned graph once (for `compare --measure`).
pub fn execute(g: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, Box<dyn std::error::Error>> {
    Ok(native::run_native(g, inputs, 0)?.0)
}

/// Reference tensors stored beside a model in ONNX test-data layout.
fn test_data(model: &Path, prefix: &str) -> Vec<PathBuf> {
    let dir = model.with_file_name("test_data_set_0");
    (0..)
        .map(|i| dir.join(format!("{prefix}_{i}.pb")))
        .take_while(|p| p.exists())
        .collect()
}

fn read_tensors(files: &[PathBuf]) -> Result<Vec<Tensor>, Box<dyn std::error::Error>> {
    Ok(files
        .iter()
        .map(|p| load_tensor_pb(p).map(|(_, t)| t))
        .collect::<Result<_, _>>()?)
}

/// A reproducible pseudo-random tensor (splitmix64, uniform in [-1, 1)).
fn random_tensor(shape: &[usize], dtype: DType, seed: u64) -> Tensor {
    let mut state = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let n = shape.iter().product();
    let vals: Vec<f64> = (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        })
        .collect();
    Tensor::new(shape.to_vec(), TensorData::from_f64(dtype, vals))
}

/// Inputs to run a model on, and the outputs recorded for them if any.
pub type Inputs = (Vec<Tensor>, Option<Vec<Tensor>>);

/// The inputs to run `g` on: `--input` files, else the model's
/// `test_data_set_0/` (with its recorded outputs), else seeded random tensors.
pub fn model_inputs(
    model: &Path,
    g: &Graph,
    files: &[PathBuf],
    seed: u64,
) -> Result<Inputs, Box<dyn std::error::Error>> {
    if !files.is_empty() {
        return Ok((read_tensors(files)?, None));
    }
    let recorded = test_data(model, "input");
    if !recorded.is_empty() {
        let expected = read_tensors(&test_data(model, "output"))?;
        return Ok((read_tensors(&recorded)?, Some(expected)));
    }
    let inputs = g
        .inputs()
        .iter()
        .enumerate()
        .map(|(i, &id)| {
            let ty = &g.node(id).outputs[0].ty;
            random_tensor(&ty.shape, ty.dtype, seed + i as u64)
        })
        .collect();
    Ok((inputs, None))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub fn run(
    model: &Path,
    shapes: &InputShapes,
    input_files: &[PathBuf],
    seed: u64,
    planning: &Planning,
    threads: usize,
) -> CliResult {
    let t0 = Instant::now();
    let source = load(model, shapes)?;
    let import_time = t0.elapsed();
    let planned = planning.plan(&source)?;
    let g = planned.graph;
    let (inputs, expected) = model_inputs(model, &g, input_files, seed)?;
    let (outputs, ran) = progress::step("compiling and running", || {
        native::run_native(&g, &inputs, threads)
    })?;
    outln!(
        "{}: {} nodes, imported in {:.1} ms, planned ('{}', {}) in {:.1} ms: {} transforms kept; {ran}",
        model.display(),
        g.node_count(),
        ms(import_time),
        planned.report.planner,
        planned.report.family,
        planned.report.plan_time_ms,
        planned.report.transform_count,
    )?;
    for (i, (out, v)) in outputs.iter().zip(g.outputs()).enumerate() {
        let vals = out.data.to_f64();
        let (min, max) = vals
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
                (a.min(x), b.max(x))
            });
        let mean = vals.iter().sum::<f64>() / vals.len().max(1) as f64;
        let head: Vec<String> = vals.iter().take(5).map(|x| format!("{x:.5}")).collect();
        outln!(
            "output '{}' {}{:?}: min {min:.5} max {max:.5} mean {mean:.5} [{}{}]",
            g.value(*v).name,
            out.dtype(),
            out.shape,
            head.join(", "),
            if vals.len() > 5 { ", ..." } else { "" }
        )?;
        if let Some(exp) = expected.as_ref().and_then(|e| e.get(i)) {
            if exp.dtype() != out.dtype() || exp.shape != out.shape {
                return Err(format!(
                    "recorded output {i} is {}{:?}, but output '{}' is {}{:?}",
                    exp.dtype(),
                    exp.shape,
                    g.value(*v).name,
                    out.dtype(),
                    out.shape
                )
                .into());
            }
            let (err, mismatched) = compare_values(&exp.data.to_f64(), &vals);
            outln!("  max abs error vs recorded output: {err:.3e}")?;
            if mismatched > 0 {
                outln!(
                    "  {mismatched} element(s) are NaN or infinite on one side only (counted apart from the error)"
                )?;
            }
        }
        let nonfinite = vals.iter().filter(|x| !x.is_finite()).count();
        if nonfinite > 0 {
            outln!("  {nonfinite} element(s) are NaN or infinite")?;
        }
    }
    if let Some(exp) = &expected {
        if exp.len() != outputs.len() {
            return Err(format!(
                "{} recorded outputs for a model with {} outputs",
                exp.len(),
                outputs.len()
            )
            .into());
        }
    }
    Ok(())
}

/// The largest absolute difference over the elements finite on both sides, and
/// how many elements differ in kind: NaN, +inf or -inf on one side but not the
/// same on the other. A NaN never hides in a maximum (`f64::max` skips NaN).
fn compare_values(expected: &[f64], got: &[f64]) -> (f64, usize) {
    let mut err = 0.0f64;
    let mut mismatched = 0;
    for (&a, &b) in expected.iter().zip(got) {
        if a.is_finite() && b.is_finite() {
            err = err.max((a - b).abs());
        } else if !(a.is_nan() && b.is_nan() || a == b) {
            mismatched += 1;
        }
    }
    (err, mismatched)
}

/// Compiles the planned model and prints latency percentiles over the runs
/// (and, on request, the time of every kernel).
pub fn bench(
    model: &Path,
    shapes: &InputShapes,
    planning: &Planning,
    args: &native::BenchArgs,
) -> CliResult {
    let source = load(model, shapes)?;
    let planned = planning.plan(&source)?;
    let (inputs, _) = model_inputs(model, &planned.graph, &[], args.seed)?;
    outln!(
        "{}: '{}' plan for {}",
        model.display(),
        planned.report.planner,
        planned.report.family
    )?;
    native::bench_native(&planned.graph, &inputs, args)
}

#[cfg(test)]
mod tests {
    use super::compare_values;

    #[test]
    fn nan_and_inf_never_hide_in_the_error() {
        let nan = f64::NAN;
        let inf = f64::INFINITY;
        // Same non-finite values agree; a NaN against a number is a mismatch.
        assert_eq!(compare_values(&[1.0, nan, inf], &[1.5, nan, inf]), (0.5, 0));
        assert_eq!(compare_values(&[1.0, 2.0], &[nan, 2.0]), (0.0, 1));
        assert_eq!(compare_values(&[nan, -inf], &[0.0, inf]), (0.0, 2));
    }
}
