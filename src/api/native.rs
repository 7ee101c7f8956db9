//! The native runtime through the library's face: compiling a planned graph
//! for this CPU, running and profiling it, and the measurements of this
//! machine (peaks, kernel times) that price plans and choose kernels.
//!
//! ```
//! use layoutopt::api::{self, Machine, PlanLayouts, PlannerKind, RuntimeOptions, TargetFamily};
//! use std::path::Path;
//!
//! # fn main() -> Result<(), api::Error> {
//! let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/resnet_small/model.onnx");
//! let graph = api::load_model(&path)?;
//! let plan = PlanLayouts::new(PlannerKind::Global, TargetFamily::host_blocked()).plan(&graph)?;
//! let model = api::compile(Machine::shared(), &plan.graph, &RuntimeOptions::with_threads(1))?;
//! let input = api::Tensor::from_f32(vec![1, 3, 32, 32], vec![0.5; 3 * 32 * 32]);
//! let outputs = model.run(&[input])?;
//! assert_eq!(outputs[0].shape, vec![1, 10]);
//! # Ok(())
//! # }
//! ```

use super::{CostModel, Error};
use crate::graph::{Graph, Tensor};
use crate::runtime::measure::load;
use crate::runtime::profile::{bench as timing, calibrate};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use crate::runtime::measure::roofline::{MachinePeaks, Roofline};
pub use crate::runtime::profile::bench::{BenchReport, Profile};
pub use crate::runtime::{
    max_threads, CompiledModel, ConvAlgo, ConvAlgoChoice, Isa, KernelPath, LayerAlgo, Machine,
    ModelInput, NonFinite, RuntimeError, RuntimeOptions, StepProfile,
};

/// Compiles a planned graph for `machine` with `options` (threads, kernels).
pub fn compile(
    machine: &Machine,
    graph: &Graph,
    options: &RuntimeOptions,
) -> Result<CompiledModel, Error> {
    Ok(CompiledModel::compile_on(machine, graph, options)?)
}

/// The algorithm of every convolution of a planned graph, chosen as
/// [`compile`] would choose it, without compiling the other steps.
pub fn conv_algorithms(
    machine: &Machine,
    graph: &Graph,
    options: &RuntimeOptions,
) -> Result<Vec<LayerAlgo>, Error> {
    Ok(CompiledModel::conv_algorithms(machine, graph, options)?)
}

/// The cost model of `machine` for models run with `options`: data
/// movement and arithmetic at the measured peaks, convolutions and layout
/// transforms at their measured kernel times (cached per CPU).
pub fn measured_costs(machine: &Machine, options: &RuntimeOptions) -> Result<CostModel, Error> {
    Ok(calibrate::measured_cost_model(machine, options)?)
}

/// Times `runs` runs of `model` after `warmup` untimed ones, and with a
/// roofline as many more profiled runs, each step against it.
pub fn bench(
    model: &CompiledModel,
    inputs: &[Tensor],
    (warmup, runs): (usize, usize),
    roofline: Option<Roofline>,
) -> Result<BenchReport, Error> {
    Ok(timing::bench(model, inputs, warmup, runs, roofline)?)
}

/// The time of one run of `model`.
pub fn time_run(model: &CompiledModel, inputs: &[Tensor]) -> Result<Duration, Error> {
    Ok(timing::time_run(model, inputs)?)
}

/// The time the cost model predicts for one run of each step of `model`,
/// in seconds.
pub fn predicted_step_seconds(model: &CompiledModel, peaks: &MachinePeaks) -> Vec<f64> {
    calibrate::predicted_step_seconds(model, peaks)
}

/// Removes every cached measurement (peaks and kernel times) from `dir`; the
/// files removed.
pub fn clear_measurements(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    calibrate::clear_calibration(dir)
}

/// What to tell the user when this process measured under load: those
/// measurements are cached, and plans follow them until measured again.
pub fn measured_under_load_note() -> Option<String> {
    load::measured_under_load_note()
}
