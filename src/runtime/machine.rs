//! The machine context: what a process knows of the machine it runs on, made
//! once and handed to every stage that measures, compiles or runs.
//!
//! Calibration, planning with measured costs, compilation, runs and profiles
//! all take a [`Machine`]: it holds the instruction set, one worker pool per
//! thread count (started when first asked for, then shared by every model
//! compiled for that count), the roofline peaks (read from the cache or
//! probed once per thread count), the kernel-time caches (read once per
//! cache folder, instruction set and thread count, and written back as
//! kernels are measured) and the memory budget. No stage starts threads or
//! reads a measurement cache of its own.

use super::kernels::simd::Isa;
use super::measure::kernel_times::KernelTimes;
use super::measure::load::{metered, Load};
use super::measure::roofline::{self, peaks_cached_in, probe, Roofline};
use super::options::RuntimeOptions;
use super::threads::max_threads;
use super::RuntimeError;
use crate::core::{budget, par};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// The kernel times of one cache folder, instruction set and thread count,
/// shared by the planner's measurements and the compiler's choices.
pub(in crate::runtime) type SharedKernelTimes = Arc<Mutex<KernelTimes>>;

/// Where the kernel times of a cache folder, instruction set and thread count live.
type KernelTimesKey = (Option<PathBuf>, Isa, usize);

/// This machine, as the stages of one process see it.
pub struct Machine {
    isa: Isa,
    cores: usize,
    cache: Option<PathBuf>,
    pools: Mutex<Vec<Arc<par::Pool>>>,
    peaks: Mutex<Vec<Roofline>>,
    kernel_times: Mutex<Vec<(KernelTimesKey, SharedKernelTimes)>>,
}

/// A lock whose holder panicked still guards consistent data here (every
/// update is a push or a replace), so the poison is cleared.
pub(in crate::runtime) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Machine {
    /// This machine, its measurements cached in [`roofline::cache_dir`].
    pub fn new() -> Machine {
        Machine::with_cache(roofline::cache_dir())
    }

    /// This machine, its peaks cached in `dir` (none: probed in every process).
    pub fn with_cache(dir: Option<PathBuf>) -> Machine {
        Machine {
            isa: Isa::detect(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cache: dir,
            pools: Mutex::default(),
            peaks: Mutex::default(),
            kernel_times: Mutex::default(),
        }
    }

    /// The machine context of this process, made on first use: what the
    /// command line, the Python package and the library's defaults share.
    pub fn shared() -> &'static Machine {
        static SHARED: OnceLock<Machine> = OnceLock::new();
        SHARED.get_or_init(Machine::new)
    }

    /// The widest instruction set this CPU runs.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// The kernels' instruction set: `asked` if this CPU has it, else (none
    /// asked) the widest it has.
    pub fn kernel_isa(&self, asked: Option<Isa>) -> Result<Isa, RuntimeError> {
        match asked {
            None => Ok(self.isa),
            Some(isa) if isa.available() => Ok(isa),
            Some(isa) => Err(RuntimeError::Isa(isa)),
        }
    }

    /// The folder measurements are cached in, if any.
    pub fn cache_dir(&self) -> Option<&Path> {
        self.cache.as_deref()
    }

    /// The memory budget every stage asks before it allocates (bytes).
    pub fn memory_limit(&self) -> u64 {
        budget::limit()
    }

    /// The worker threads a count asks for: 0 is one per core; more than
    /// [`max_threads`] is refused.
    pub fn resolve_threads(&self, threads: usize) -> Result<usize, RuntimeError> {
        match threads {
            0 => Ok(self.cores),
            n if n > max_threads() => Err(RuntimeError::Threads {
                threads: n,
                message: format!(
                    "more than {} (4 per core) would only compete for {} cores",
                    max_threads(),
                    self.cores
                ),
            }),
            n => Ok(n),
        }
    }

    /// The pool of `threads` worker threads (0: one per core), started on
    /// first use and shared by every caller that asks for that count.
    pub fn pool(&self, threads: usize) -> Result<Arc<par::Pool>, RuntimeError> {
        let threads = self.resolve_threads(threads)?;
        let mut pools = lock(&self.pools);
        if let Some(pool) = pools.iter().find(|p| p.threads() == threads) {
            return Ok(pool.clone());
        }
        let pool = par::Pool::new(threads).map_err(|e| RuntimeError::Threads {
            threads,
            message: e.to_string(),
        })?;
        pools.push(Arc::new(pool));
        Ok(pools.last().expect("just pushed").clone())
    }

    /// How many worker pools this machine context has started.
    pub fn pools_started(&self) -> usize {
        lock(&self.pools).len()
    }

    /// This machine's peaks on `threads` worker threads (0: one per core):
    /// what this process already has, else read from the cache when it holds
    /// them for this CPU model, instruction set and thread count and
    /// `reprobe` is false, else probed (and cached unless the machine was
    /// busy meanwhile).
    pub fn peaks(&self, threads: usize, reprobe: bool) -> Result<Roofline, RuntimeError> {
        let resolved = self.resolve_threads(threads)?;
        if !reprobe {
            let known = lock(&self.peaks);
            if let Some(r) = known.iter().find(|r| r.peaks.threads == resolved) {
                return Ok(r.clone());
            }
        }
        let pool = self.pool(threads)?;
        let roofline = peaks_cached_in(&pool, self.cache_dir(), reprobe, |pool| {
            let mut load = Load::default();
            let mut peaks = metered(&mut load, || probe(pool));
            if !load.quiet_for(pool.threads()) {
                // Under load, the best of a second probe too.
                let again = metered(&mut load, || probe(pool));
                peaks.copy_gbps = peaks.copy_gbps.max(again.copy_gbps);
                peaks.fma_gflops = peaks.fma_gflops.max(again.fma_gflops);
            }
            (peaks, load)
        });
        let mut known = lock(&self.peaks);
        known.retain(|r| r.peaks.threads != resolved);
        known.push(roofline.clone());
        Ok(roofline)
    }

    /// What kernels compiled or measured under `options` run with: the pool
    /// of its thread count, its instruction set, and the kernel times of its
    /// cache folder for that instruction set and pool.
    pub(in crate::runtime) fn kernel_context(
        &self,
        options: &RuntimeOptions,
    ) -> Result<(Arc<par::Pool>, Isa, SharedKernelTimes), RuntimeError> {
        let pool = self.pool(options.threads)?;
        let isa = self.kernel_isa(options.isa)?;
        let times = self.kernel_times(options.conv_algo.cache.as_deref(), isa, pool.threads());
        Ok((pool, isa, times))
    }

    /// The kernel times cached in `dir` for `isa` on `threads` worker
    /// threads: read from the file the first time, then shared.
    pub(in crate::runtime) fn kernel_times(
        &self,
        dir: Option<&Path>,
        isa: Isa,
        threads: usize,
    ) -> SharedKernelTimes {
        let key = (dir.map(Path::to_path_buf), isa, threads);
        let mut all = lock(&self.kernel_times);
        if let Some((_, times)) = all.iter().find(|(k, _)| *k == key) {
            return times.clone();
        }
        let times = Arc::new(Mutex::new(KernelTimes::open(dir, isa, threads)));
        all.push((key, times.clone()));
        times
    }
}

impl Default for Machine {
    fn default() -> Machine {
        Machine::new()
    }
}

impl std::fmt::Debug for Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "Machine({}, {} cores, {} pools)",
            self.isa,
            self.cores,
            self.pools_started()
        )
    }
}
