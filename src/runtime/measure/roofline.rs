//! The roofline of this machine, and where each step of a model stands under
//! it. Two short probes measure the peaks on the model's number of worker
//! threads: a parallel copy of a buffer beyond the private caches (bandwidth)
//! and independent FMA chains in the widest vectors the CPU has (arithmetic).
//! The peaks are cached per CPU model, instruction set and thread count, so a
//! profile costs no probe after the first and compares against the same roof.
//! Peaks probed while other processes kept the cores busy (`load.rs`) are
//! the best of two probes, cached too; the probe's `PeaksSource` says so.

use super::load::{note_measured_under_load, Load};
use crate::core::par;
use crate::runtime::kernels::simd::{run_vectorized, Isa, Lanes, Vector, VectorKernel};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::cell::Cell;
use std::fmt;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

/// What one step does in one run, counted at compile time from its graph nodes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepWork {
    /// Bytes of every value the step reads or writes, each once at its stored
    /// size (padding of its layout included): activations, weights and other
    /// constants, and non-f32 tensors at their element size.
    pub bytes: u64,
    /// Floating-point operations of its ops (`OpDef::flops`): 2 per multiply-add
    /// of convolutions and matrix products, on the logical tensors. Elementwise
    /// ops, batch norms, pools and data movement count none: they are taken as
    /// memory-bound.
    pub flops: f64,
}

impl StepWork {
    /// Flops per byte moved, for a step that computes.
    pub fn intensity(&self) -> Option<f64> {
        (self.flops > 0.0 && self.bytes > 0).then(|| self.flops / self.bytes as f64)
    }
}

/// This machine's peaks on a number of worker threads.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MachinePeaks {
    /// Copy bandwidth in GB/s (10^9 bytes), bytes read and bytes written both counted.
    pub copy_gbps: f64,
    /// Arithmetic throughput in GFLOP/s, 2 flops per lane of an FMA.
    pub fma_gflops: f64,
    /// Worker threads both probes ran on.
    pub threads: usize,
}

impl MachinePeaks {
    /// The least time `work` takes here: its bytes at copy bandwidth or its
    /// flops at FMA throughput, whichever is longer. This is the roofline's
    /// attainable performance, min(peak flops, intensity × peak bandwidth),
    /// written as a time, so that it covers steps without flops too.
    pub fn roof_seconds(&self, work: &StepWork) -> f64 {
        let memory = work.bytes as f64 / (self.copy_gbps * 1e9);
        let compute = work.flops / (self.fma_gflops * 1e9);
        memory.max(compute)
    }

    /// How close a step that did `work` in `seconds` came to the roof: 1 is on
    /// it (for a memory-bound step, its GB/s over the copy probe's).
    pub fn fraction_of_roof(&self, work: &StepWork, seconds: f64) -> Option<f64> {
        (seconds > 0.0).then(|| self.roof_seconds(work) / seconds)
    }

    /// Whether the figures can be peaks at all (a cache file may hold anything).
    fn plausible(&self) -> bool {
        let positive = |x: f64| x.is_finite() && x > 0.0;
        positive(self.copy_gbps) && positive(self.fma_gflops) && self.threads > 0
    }
}

/// Bytes of each of the two buffers of the copy probe: beyond the private
/// caches of any current core, so the copy streams from the shared cache or memory.
const COPY_BUFFER_BYTES: usize = 64 << 20;
/// Timed copies; the best one counts.
const COPY_REPETITIONS: usize = 6;
/// Independent accumulators per thread: enough to hide the FMA latency on two
/// ports (4 cycles × 2 needs 8), few enough to stay in 16 registers.
const FMA_CHAINS: usize = 12;
/// Steps of every chain per repetition: a few milliseconds on a current core.
const FMA_STEPS: usize = 1 << 21;
/// Timed FMA runs; the best one counts.
const FMA_REPETITIONS: usize = 5;

/// Measures the peaks on the threads of `pool`.
pub(in crate::runtime) fn probe(pool: &par::Pool) -> MachinePeaks {
    MachinePeaks {
        copy_gbps: copy_gbps(pool),
        fma_gflops: fma_gflops(pool, Isa::detect()),
        threads: pool.threads(),
    }
}

/// The fastest of `repetitions` timed calls of `f`, in seconds, after one
/// untimed call that maps pages and wakes the threads.
fn best_seconds(repetitions: usize, mut f: impl FnMut()) -> f64 {
    f();
    (0..repetitions)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// Copy bandwidth: every thread of `pool` copies its share of one buffer into another.
fn copy_gbps(pool: &par::Pool) -> f64 {
    let len = COPY_BUFFER_BYTES / 4;
    let share = len.div_ceil(pool.threads());
    // Written before timing: untouched pages would all read as the one zero page.
    let source = vec![1.0f32; len];
    let mut target = vec![0.0f32; len];
    let shares: Vec<Mutex<&mut [f32]>> = target.chunks_mut(share).map(Mutex::new).collect();
    let seconds = best_seconds(COPY_REPETITIONS, || {
        // One task per thread.
        pool.install(|| {
            par::for_each(pool.threads(), |i| {
                if let Some(Ok(mut to)) = shares.get(i).map(|s| s.lock()) {
                    let from = &source[i * share..][..to.len()];
                    to.copy_from_slice(from);
                }
            })
        });
    });
    black_box(&shares);
    2.0 * COPY_BUFFER_BYTES as f64 / seconds / 1e9
}

/// `FMA_CHAINS` independent chains x ← x·m + a on vectors of one instruction set.
struct FmaChains {
    /// The lanes summed at the end, so the chains are not optimised away.
    sum: Cell<f32>,
}

impl VectorKernel for FmaChains {
    #[inline(always)]
    unsafe fn run<V: Vector>(&self) {
        // x ← 0.5·x + 0.5 stays at 1: no overflow, no subnormal slow path.
        let m = V::splat(black_box(0.5));
        let a = V::splat(black_box(0.5));
        let mut chains = [V::splat(1.0); FMA_CHAINS];
        for _ in 0..FMA_STEPS {
            for x in &mut chains {
                *x = V::fma(*x, m, a);
            }
        }
        let total = chains.iter().fold(V::splat(0.0), |s, &x| V::add(s, x));
        let mut lanes = vec![0.0f32; V::LANES];
        total.store(lanes.as_mut_ptr());
        self.sum.set(lanes.iter().sum());
    }
}

/// FMA throughput: every thread of `pool` runs its own chains in `isa`'s vectors.
fn fma_gflops(pool: &par::Pool, isa: Isa) -> f64 {
    let lanes = Lanes::for_block(isa, isa.lanes());
    let seconds = best_seconds(FMA_REPETITIONS, || {
        pool.install(|| {
            par::for_each(pool.threads(), |_| {
                let chains = FmaChains {
                    sum: Cell::new(0.0),
                };
                // SAFETY: `Lanes::for_block` picks an instruction set this CPU has.
                unsafe { run_vectorized(lanes, &chains) };
                black_box(chains.sum.get());
            })
        });
    });
    let fmas = pool.threads() * FMA_STEPS * FMA_CHAINS * lanes.count();
    2.0 * fmas as f64 / seconds / 1e9
}

/// Where the peaks of a [`Roofline`] come from.
#[derive(Clone, Debug, PartialEq)]
pub enum PeaksSource {
    /// Read from this cache file.
    Cached(PathBuf),
    /// Probed now; written to this cache file when it could be.
    Probed(Option<PathBuf>),
    /// Probed now while other processes took this much of the machine;
    /// written to this cache file when it could be.
    ProbedUnderLoad(Option<PathBuf>, Load),
}

/// The peaks a profile is measured against, and where they come from.
#[derive(Clone, Debug, PartialEq)]
pub struct Roofline {
    /// The peaks.
    pub peaks: MachinePeaks,
    /// A cache file or a probe.
    pub source: PeaksSource,
}

impl fmt::Display for Roofline {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let p = &self.peaks;
        write!(
            f,
            "machine: copy {:.1} GB/s, FMA {:.1} GFLOP/s (threads {}, ",
            p.copy_gbps, p.fma_gflops, p.threads
        )?;
        match &self.source {
            PeaksSource::Cached(path) => write!(f, "cached in {})", path.display()),
            PeaksSource::Probed(Some(path)) => {
                write!(f, "probed now, cached in {})", path.display())
            }
            PeaksSource::Probed(None) => write!(f, "probed now, no cache)"),
            PeaksSource::ProbedUnderLoad(path, load) => {
                write!(f, "probed now while {}", load.describe())?;
                match path {
                    Some(path) => write!(f, ", cached in {})", path.display()),
                    None => write!(f, ", no cache)"),
                }
            }
        }
    }
}

/// The folder of the peaks cache: `$XDG_CACHE_HOME/layoutopt`, else
/// `$HOME/.cache/layoutopt` (relative paths are ignored, as the XDG base
/// directory specification says).
pub fn cache_dir() -> Option<PathBuf> {
    let absolute = |var: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    absolute("XDG_CACHE_HOME")
        .or_else(|| absolute("HOME").map(|home| home.join(".cache")))
        .map(|cache| cache.join("layoutopt"))
}

/// The file in a cache folder that holds the peaks.
pub(in crate::runtime) const CACHE_FILE: &str = "peaks.json";

/// One machine's peaks in the cache file.
#[derive(Serialize, Deserialize)]
struct CacheEntry {
    cpu: String,
    isa: String,
    peaks: MachinePeaks,
}

/// The CPU model as `/proc/cpuinfo` names it, with its family, model and
/// stepping numbers where given (cloud machines of two generations both call
/// themselves "AMD EPYC", and a cache moved between them would carry one's
/// times to the other), else the architecture.
pub(in crate::runtime) fn cpu_name() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    cpu_name_of(&cpuinfo)
}

fn cpu_name_of(cpuinfo: &str) -> String {
    // The first processor's block.
    let first = cpuinfo.split("\n\n").next().unwrap_or_default();
    let field = |name: &str| {
        first
            .lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(key, _)| key.trim() == name)
            .map(|(_, value)| value.trim())
    };
    let Some(name) = field("model name") else {
        return std::env::consts::ARCH.to_string();
    };
    match (field("cpu family"), field("model"), field("stepping")) {
        (Some(f), Some(m), Some(s)) => format!("{name} (family {f}, model {m}, stepping {s})"),
        _ => name.to_string(),
    }
}

/// One JSON file of measurements in the cache folder: a list of entries, each
/// keyed by the machine it was measured on. A file that cannot be read or
/// parsed reads as empty (and is rewritten by the next `save`).
pub(in crate::runtime) struct CacheFile<E> {
    path: Option<PathBuf>,
    /// The entries read, and those added since.
    pub(in crate::runtime) entries: Vec<E>,
}

impl<E: Serialize + DeserializeOwned> CacheFile<E> {
    /// The file `name` in `dir` (no file without a folder).
    pub(in crate::runtime) fn open(dir: Option<&Path>, name: &str) -> CacheFile<E> {
        let path = dir.map(|d| d.join(name));
        let entries = path
            .as_ref()
            .and_then(|p| std::fs::read(p).ok())
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
        CacheFile { path, entries }
    }

    /// The file, if there is one.
    pub(in crate::runtime) fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Writes the entries; the file's path when it could be written.
    pub(in crate::runtime) fn save(&self) -> Option<PathBuf> {
        let path = self.path.as_ref()?;
        write_cache(path, &self.entries).ok()?;
        Some(path.clone())
    }
}

/// The peaks on the threads of `pool` (`Machine::peaks`): read from the
/// cache file in `dir` when it holds them for this CPU model, instruction set
/// and thread count and `reprobe` is false, else measured by `probe` (the
/// peaks and the load meanwhile) and cached.
pub(in crate::runtime) fn peaks_cached_in(
    pool: &par::Pool,
    dir: Option<&Path>,
    reprobe: bool,
    probe: impl FnOnce(&par::Pool) -> (MachinePeaks, Load),
) -> Roofline {
    let threads = pool.threads();
    let (cpu, isa) = (cpu_name(), format!("{:?}", Isa::detect()));
    let same = |e: &CacheEntry| e.cpu == cpu && e.isa == isa && e.peaks.threads == threads;
    let cache: CacheFile<CacheEntry> = CacheFile::open(dir, CACHE_FILE);
    let hit = cache
        .entries
        .iter()
        .find(|e| same(e) && e.peaks.plausible());
    if let (Some(path), Some(hit), false) = (cache.path(), hit, reprobe) {
        return Roofline {
            peaks: hit.peaks,
            source: PeaksSource::Cached(path.to_path_buf()),
        };
    }
    let (peaks, load) = probe(pool);
    // Read again under the lock: another process may have written meanwhile.
    let _lock = FolderLock::take(dir);
    let mut cache: CacheFile<CacheEntry> = CacheFile::open(dir, CACHE_FILE);
    cache.entries.retain(|e| e.peaks.plausible() && !same(e));
    cache.entries.push(CacheEntry { cpu, isa, peaks });
    let saved = cache.save();
    let source = match load.quiet_for(threads) {
        true => PeaksSource::Probed(saved),
        false => {
            note_measured_under_load(load);
            PeaksSource::ProbedUnderLoad(saved, load)
        }
    };
    Roofline { peaks, source }
}

/// The lock file of a cache folder.
const LOCK_FILE: &str = ".lock";

/// An exclusive lock on a cache folder, across processes, held until
/// dropped: processes that merge their entries into one file take turns, so
/// none writes over the entries another just added. Where it cannot be taken
/// (a read-only folder, a file system without locks) each write is still
/// whole (`write_cache`); only a concurrent writer's new entries may be lost.
pub(in crate::runtime) struct FolderLock {
    _file: Option<std::fs::File>,
}

impl FolderLock {
    /// Waits for the lock on `dir` (made if missing); none without a folder.
    pub(in crate::runtime) fn take(dir: Option<&Path>) -> FolderLock {
        let file = dir.and_then(|dir| {
            std::fs::create_dir_all(dir).ok()?;
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(dir.join(LOCK_FILE))
                .ok()?;
            file.lock().ok()?;
            Some(file)
        });
        FolderLock { _file: file }
    }
}

/// Writes the cache file through a temporary one, so a concurrent reader never
/// sees half of it. Compact: every process reads the kernel times whole
/// (thousands of entries, 3 MB pretty-printed, whose parsing was a fifth of
/// a warm MobileNetV3Small process).
fn write_cache<E: Serialize>(path: &Path, entries: &[E]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let json = serde_json::to_vec(entries).map_err(std::io::Error::other)?;
    let partial = path.with_extension(format!("{}.tmp", std::process::id()));
    std::fs::write(&partial, json)?;
    std::fs::rename(&partial, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&partial);
    })
}

#[cfg(test)]
mod tests {
    use super::cpu_name_of;

    #[test]
    fn the_cpu_name_carries_the_first_processors_family_model_and_stepping() {
        let block = |n: usize, model: usize| {
            format!(
                "processor\t: {n}\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: {model}\n\
                 model name\t: AMD EPYC\nstepping\t: 1\n"
            )
        };
        let info = format!("{}\n{}", block(0, 2), block(1, 9));
        assert_eq!(
            cpu_name_of(&info),
            "AMD EPYC (family 26, model 2, stepping 1)"
        );
        // Without the numbers (other architectures), the name alone.
        assert_eq!(cpu_name_of("model name : Some CPU\n"), "Some CPU");
        assert_eq!(cpu_name_of(""), std::env::consts::ARCH);
    }
}
