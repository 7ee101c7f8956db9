//! The planner's cost model calibrated on this machine: data movement at the
//! roofline's copy bandwidth, arithmetic at its FMA rate (both probed once and
//! cached, `roofline.rs`), and every convolution and layout transform at the
//! time its kernel takes in the layouts asked, measured at the value's shape on
//! the model's threads and cached with the compiler's algorithm choices
//! (`kernel_times.rs`), so a warm cache plans without running anything.

use crate::core::par;
use crate::graph::{numel, DType, Tensor, ValueType};
use crate::layout::cost::{ConvQuery, CostModel, Estimated, MeasuredCosts, WithinMargin};
use crate::layout::Layout;
use crate::ops::OpDef;
use crate::runtime::kernels::conv::algo::{ConvAlgo, ConvAlgoOptions, ConvSpec, SharedWeights};
use crate::runtime::kernels::conv::depthwise::Depthwise;
use crate::runtime::kernels::conv::direct::ConvGeom;
use crate::runtime::kernels::conv::tile::{ChannelParams, Epilogue};
use crate::runtime::kernels::gather::Gather;
use crate::runtime::kernels::simd::Isa;
use crate::runtime::machine::SharedKernelTimes;
use crate::runtime::measure::conv_times::{self, Pricing};
use crate::runtime::measure::kernel_times::{self, KernelTimes, Priced, Runs, TimedRuns};
use crate::runtime::measure::roofline::{self, FolderLock, MachinePeaks};
use crate::runtime::{CompiledModel, Machine, RuntimeError, RuntimeOptions};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The cost model of `machine` for models run with `options`: unit costs
/// from the roofline peaks, convolutions measured.
pub fn measured_cost_model(
    machine: &Machine,
    options: &RuntimeOptions,
) -> Result<CostModel, RuntimeError> {
    let roofline = machine.peaks(options.threads, false)?;
    let kernels = MeasuredKernels::new(machine, options)?;
    Ok(calibrated(&roofline.peaks, Arc::new(kernels)))
}

/// The cost model with these peaks and measured kernels: a byte moved costs
/// what the copy probe took per byte, a flop what the FMA probe took, and
/// convolution times that measure alike in two pairs of layouts tie.
fn calibrated(peaks: &MachinePeaks, measured: Arc<dyn MeasuredCosts>) -> CostModel {
    CostModel {
        ns_per_byte: 1.0 / peaks.copy_gbps,
        ns_per_flop: 1.0 / peaks.fma_gflops,
        measured: Some(Arc::new(WithinMargin::new(
            measured,
            kernel_times::SAME_TIME,
        ))),
        epilogue_fuses: crate::runtime::kernels::activation::vectorizes,
        ..CostModel::default()
    }
}

/// A convolution whose measured band's buffers are larger than this keeps
/// the estimate: it is not worth the memory to measure (nor are hostile
/// models measured).
const MAX_MEASURED_BYTES: f64 = (256 << 20) as f64;
/// Nor one whose measured band (`conv_times::band`) has more flops than
/// this (tens of milliseconds per run at a desktop core's FMA rate): a cold
/// plan stays within seconds.
const MAX_MEASURED_FLOPS: f64 = 5e9;

/// Convolution and transform times measured on the worker threads a model will run on,
/// cached per machine.
pub struct MeasuredKernels {
    pool: Arc<par::Pool>,
    isa: Isa,
    algo: ConvAlgoOptions,
    times: SharedKernelTimes,
    shared: Mutex<SharedByWeights>,
    /// The kernels asked for whose time is an estimate from a neighbouring
    /// shape: transforms (shape, then layouts) and convolutions (geometry
    /// with its layouts).
    estimated: Mutex<Estimates>,
}

/// The kernels priced from a neighbouring shape, each counted once however
/// often the planner asks.
#[derive(Default)]
struct Estimates {
    transforms: HashSet<(Vec<usize>, String)>,
    convs: HashSet<Vec<usize>>,
}

/// What the kernels built from each weight tensor share
/// (`conv_algo::SharedWeights`), keyed by the address of its elements (the
/// tensor is held, so the address is not reused) and the convolution's
/// geometry without its layouts.
#[derive(Default)]
struct SharedByWeights {
    entries: HashMap<SharedKey, (Tensor, Arc<SharedWeights>)>,
    /// The convolution asked last: the only one that keeps its transformed
    /// weights (the planner asks for one convolution's layouts in a row).
    latest: Option<SharedKey>,
}

type SharedKey = (usize, Vec<usize>);

impl SharedByWeights {
    /// What is shared by kernels of `weights` at `geom`.
    fn of(&mut self, weights: &Tensor, w: &[f32], geom: &ConvGeom) -> Arc<SharedWeights> {
        let layout_free = ConvGeom {
            x_cb: 1,
            y_cb: 1,
            ..geom.clone()
        };
        let key = (w.as_ptr() as usize, layout_free.key());
        if self.latest.as_ref() != Some(&key) {
            if let Some((_, previous)) = self.latest.take().and_then(|k| self.entries.get(&k)) {
                previous.release_made();
            }
            self.latest = Some(key.clone());
        }
        let entry = self
            .entries
            .entry(key)
            .or_insert_with(|| (weights.clone(), Arc::default()));
        entry.1.clone()
    }
}

impl fmt::Debug for MeasuredKernels {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "MeasuredKernels({:?}, {} threads)",
            self.isa,
            self.pool.threads()
        )
    }
}

impl MeasuredKernels {
    /// Measures on `options`' threads, instruction set and convolution
    /// algorithms, on `machine`'s pool and in its kernel-time cache.
    pub fn new(
        machine: &Machine,
        options: &RuntimeOptions,
    ) -> Result<MeasuredKernels, RuntimeError> {
        let (pool, isa, times) = machine.kernel_context(options)?;
        Ok(MeasuredKernels {
            pool,
            isa,
            algo: options.conv_algo.clone(),
            times,
            shared: Mutex::default(),
            estimated: Mutex::default(),
        })
    }

    /// Milliseconds of a depthwise convolution, measured (on its band,
    /// `conv_times::band`: once, and until settled where it contends with
    /// the layer's other blockings) unless cached, and how they were come by.
    fn depthwise_millis(
        &self,
        geom: ConvGeom,
        w: &[f32],
        times: &mut KernelTimes,
    ) -> (f64, Priced) {
        let layer = (&geom, self.pool.threads());
        let pricing = Pricing::Planning;
        conv_times::banded_millis(times, layer, ConvAlgo::Depthwise, pricing, |times, band| {
            let bias = vec![0f32; band.cout];
            let params = ChannelParams::bias_only(&bias);
            let k = Depthwise::new(band.clone(), self.isa, w, params, Epilogue::of(None), None);
            let buffers = (w, band.x_len(), &[band.y_len()][..]);
            let mut runs = TimedRuns::default();
            self.pool.install(|| {
                let run = |x: &[f32], out: &mut [&mut [f32]]| k.run(x, None, out[0]);
                times.time(&mut runs, Runs::First, buffers, run);
                if conv_times::contends(times, band, ConvAlgo::Depthwise, &runs) {
                    times.time(&mut runs, Runs::Settled, buffers, run);
                }
            });
            runs.fastest()
        })
    }
}

/// What was measured is written to the cache once, when planning is done:
/// each write merges with the whole file.
impl Drop for MeasuredKernels {
    fn drop(&mut self) {
        if let Ok(mut times) = self.times.lock() {
            times.save();
        }
    }
}

impl MeasuredCosts for MeasuredKernels {
    fn conv_ns(&self, q: &ConvQuery) -> Option<f64> {
        let ((x, xl), (y, yl)) = (q.x, q.y);
        if x.dtype != DType::F32 || q.weights.dtype() != DType::F32 {
            return None;
        }
        let cout = *q.weights.shape.first()?;
        let geom = ConvGeom::of(
            q.conv,
            &x.shape,
            cout,
            xl.channel_block(&x.shape)?,
            yl.channel_block(&y.shape)?,
        )?;
        let group = q.conv.group;
        let depthwise = group > 1 && group == geom.cin && group == geom.cout;
        // What a measurement allocates and computes: the band it times.
        let (band, scale) = conv_times::band(&geom, self.pool.threads());
        let buffers = (band.x_len() + band.y_len() + q.weights.numel()) as f64 * 4.0;
        let w_type = ValueType::new(DType::F32, q.weights.shape.clone());
        let flops = q.conv.flops(&[x, &w_type], &[y]) / scale;
        if buffers > MAX_MEASURED_BYTES || flops > MAX_MEASURED_FLOPS {
            return None;
        }
        let w = q.weights.f32s();
        let key = geom.key();
        let mut times = self.times.lock().ok()?;
        let (ms, priced) = if depthwise {
            self.depthwise_millis(geom, &w, &mut times)
        } else {
            let shared = self.shared.lock().ok()?.of(q.weights, &w, &geom);
            let bias = vec![0f32; geom.cout];
            let spec = ConvSpec::biased(geom, self.isa, &w, &bias, self.pool.threads());
            let times: &mut KernelTimes = &mut times;
            self.pool
                .install(|| conv_times::expected_millis(&spec, &self.algo, times, &shared))
        };
        if priced == Priced::Estimated {
            self.estimated.lock().ok()?.convs.insert(key);
        }
        Some(ms * 1e6)
    }

    fn transform_ns(&self, t: &ValueType, from: &Layout, to: &Layout) -> Option<f64> {
        if t.dtype != DType::F32 {
            return None;
        }
        let (src, dst) = (
            from.physical_shape(&t.shape).ok()?,
            to.physical_shape(&t.shape).ok()?,
        );
        let (src, dst) = (numel(&src), numel(&dst));
        if (src + dst) as f64 * 4.0 > MAX_MEASURED_BYTES {
            return None;
        }
        let mut guard = self.times.lock().ok()?;
        let times: &mut KernelTimes = &mut guard;
        let known = (times.transform_millis(&t.shape, from, to)).or_else(|| {
            let ms = times.estimate_transform(&t.shape, from, to)?;
            Some((ms, Priced::Estimated))
        });
        if let Some((ms, priced)) = known {
            if priced == Priced::Estimated {
                let transform = (t.shape.clone(), kernel_times::transform_name(from, to));
                self.estimated.lock().ok()?.transforms.insert(transform);
            }
            return Some(ms * 1e6);
        }
        let gather = Gather::new(from, to, &t.shape, 0.0).ok()?;
        let mut ok = true;
        let ms = self.pool.install(|| {
            times.measure(&[], src, &[dst], |x, out| {
                ok &= gather.run(&[x], out[0]).is_ok()
            })
        });
        if !ok {
            return None;
        }
        times.record_transform(&t.shape, from, to, ms);
        Some(ms * 1e6)
    }

    fn estimated(&self) -> Estimated {
        self.estimated
            .lock()
            .map_or(Estimated::default(), |e| Estimated {
                transforms: e.transforms.len(),
                convs: e.convs.len(),
            })
    }
}

/// The time the cost model predicts for one run of each step of `model`, in
/// seconds: the kernel time measured for it (a convolution's by the compiler
/// or the planner, a layout transform's by the planner), as the planner priced
/// it, else the step's bytes at the copy bandwidth plus its flops at the FMA
/// rate of `peaks` (the unit costs the planner uses).
pub fn predicted_step_seconds(model: &CompiledModel, peaks: &MachinePeaks) -> Vec<f64> {
    model
        .step_costs()
        .map(|(work, measured_ms)| match measured_ms {
            Some(ms) => ms / 1e3,
            None => {
                work.bytes as f64 / (peaks.copy_gbps * 1e9) + work.flops / (peaks.fma_gflops * 1e9)
            }
        })
        .collect()
}

/// Removes every cached measurement from the cache folder `dir` (the peaks and
/// the kernel times), so that the next plan and compile measure again; the
/// files removed.
pub fn clear_calibration(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let _lock = FolderLock::take(Some(dir));
    let mut removed = vec![];
    for name in [roofline::CACHE_FILE, kernel_times::CACHE_FILE] {
        let path = dir.join(name);
        match std::fs::remove_file(&path) {
            Ok(()) => removed.push(path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}
