//! Measured kernel times, cached per machine: one file (`kernel_times.json`,
//! in the roofline's cache folder) serves the compiler, which chooses each
//! convolution's algorithm by them, and the planner, which compares a
//! convolution's layouts by them (`calibrate.rs`). An entry is keyed by CPU
//! model, instruction set, thread count, kernel kind and geometry, and holds
//! the milliseconds of each algorithm measured there.

use super::conv::ConvGeom;
use super::roofline::{cpu_name, CacheFile};
use super::simd::Isa;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

/// The file in the cache folder that holds the measured times.
const CACHE_FILE: &str = "kernel_times.json";

/// How today's entries were timed (see [`time_kernel`]), and the revision of
/// the timed kernels; entries timed otherwise, or of older kernels, are not
/// used. Revision 2: the Winograd transforms written out per tile size.
const TIMING: &str = "weights flushed, best of 3; kernels r2";

/// The measured times of one kernel geometry on one machine.
#[derive(Clone, Serialize, Deserialize)]
struct Entry {
    cpu: String,
    isa: String,
    threads: usize,
    /// "conv", "depthwise" or "transform".
    kernel: String,
    /// [`conv_key`] for convolutions.
    geom: Vec<usize>,
    timing: String,
    /// Milliseconds per algorithm name.
    millis: Vec<(String, f64)>,
}

/// One process's reads and writes of the cache go through one lock: models
/// compiled or planned on several threads at once then do not lose each
/// other's entries.
static CACHE_LOCK: Mutex<()> = Mutex::new(());

/// The geometry of a convolution as a cache key: every extent, the window,
/// and the channel block of both operands.
pub(super) fn conv_key(g: &ConvGeom) -> Vec<usize> {
    vec![
        g.n,
        g.cin,
        g.h,
        g.w,
        g.cout,
        g.oh,
        g.ow,
        g.k.0,
        g.k.1,
        g.stride.0,
        g.stride.1,
        g.dilation.0,
        g.dilation.1,
        g.pad.0,
        g.pad.1,
        g.x_cb,
        g.y_cb,
    ]
}

/// The kernel times of this machine for one instruction set and thread
/// count, read from the cache folder (none without one).
pub(super) struct KernelTimes {
    /// The cache file, if there is a folder.
    path: Option<PathBuf>,
    /// Its entries as read.
    entries: Arc<Vec<Entry>>,
    cpu: String,
    isa: String,
    threads: usize,
    /// Entries measured since the file was read.
    added: Vec<Entry>,
}

impl KernelTimes {
    /// The times cached in `dir` for `isa` on `threads` worker threads.
    pub(super) fn open(dir: Option<&Path>, isa: Isa, threads: usize) -> KernelTimes {
        let path = dir.map(|d| d.join(CACHE_FILE));
        let entries = {
            let _lock = CACHE_LOCK.lock();
            read_entries(path.as_deref())
        };
        KernelTimes {
            path,
            entries,
            cpu: cpu_name(),
            isa: format!("{isa:?}"),
            threads,
            added: vec![],
        }
    }

    fn matches(&self, e: &Entry, kernel: &str, geom: &[usize]) -> bool {
        (
            &e.cpu,
            &e.isa,
            e.threads,
            e.kernel.as_str(),
            e.geom.as_slice(),
        ) == (&self.cpu, &self.isa, self.threads, kernel, geom)
            && e.timing == TIMING
    }

    /// The cached milliseconds of `algo` on `kernel` at geometry `geom` (for
    /// a convolution, its [`conv_key`]).
    pub(super) fn get(&self, kernel: &str, geom: &[usize], algo: &str) -> Option<f64> {
        self.added
            .iter()
            .chain(self.entries.iter())
            .filter(|e| self.matches(e, kernel, geom))
            .flat_map(|e| &e.millis)
            .find(|(name, ms)| name == algo && ms.is_finite() && *ms >= 0.0)
            .map(|m| m.1)
    }

    /// Records the milliseconds of `algo` on `kernel` at geometry `geom`.
    pub(super) fn record(&mut self, kernel: &str, geom: &[usize], algo: &str, ms: f64) {
        let at = self
            .added
            .iter()
            .position(|e| self.matches(e, kernel, geom));
        let entry = match at {
            Some(i) => &mut self.added[i],
            None => {
                self.added.push(Entry {
                    cpu: self.cpu.clone(),
                    isa: self.isa.clone(),
                    threads: self.threads,
                    kernel: kernel.to_string(),
                    geom: geom.to_vec(),
                    timing: TIMING.to_string(),
                    millis: vec![],
                });
                self.added.last_mut().expect("just pushed")
            }
        };
        entry.millis.retain(|(name, _)| name != algo);
        entry.millis.push((algo.to_string(), ms));
    }

    /// Writes the entries measured since the last save into the file, merged
    /// with what other processes wrote there meanwhile.
    pub(super) fn save(&mut self) {
        if self.added.is_empty() || self.path.is_none() {
            return;
        }
        let _lock = CACHE_LOCK.lock();
        let dir = self.path.as_deref().and_then(Path::parent);
        let mut current: CacheFile<Entry> = CacheFile::open(dir, CACHE_FILE);
        for new in self.added.drain(..) {
            let same = |e: &Entry| {
                (&e.cpu, &e.isa, e.threads, &e.kernel, &e.geom, &e.timing)
                    == (
                        &new.cpu,
                        &new.isa,
                        new.threads,
                        &new.kernel,
                        &new.geom,
                        &new.timing,
                    )
            };
            match current.entries.iter_mut().find(|e| same(e)) {
                Some(e) => {
                    e.millis
                        .retain(|(name, _)| !new.millis.iter().any(|m| &m.0 == name));
                    e.millis.extend(new.millis);
                }
                None => current.entries.push(new),
            }
        }
        current.save();
        let entries = Arc::new(current.entries);
        if let Some(path) = &self.path {
            remember(path, &entries);
        }
        self.entries = entries;
    }
}

/// The cache file as this process last read or wrote it, with its size and
/// modification time then: a compile opens the cache once per convolution,
/// and parsing a file of thousands of entries each time was a tenth of a
/// warm ResNet50 compile.
struct Snapshot {
    path: PathBuf,
    stamp: (u64, SystemTime),
    entries: Arc<Vec<Entry>>,
}

static LAST_READ: Mutex<Option<Snapshot>> = Mutex::new(None);

/// The size and modification time of the file at `path`.
fn stamp(path: &Path) -> Option<(u64, SystemTime)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.len(), meta.modified().ok()?))
}

/// The entries of the cache file at `path` (none without one), parsed again
/// only when the file changed since this process last read it.
fn read_entries(path: Option<&Path>) -> Arc<Vec<Entry>> {
    let Some(path) = path else {
        return Arc::default();
    };
    let mut last = LAST_READ.lock().unwrap_or_else(|e| e.into_inner());
    let now = stamp(path);
    if let Some(snap) = last.as_ref() {
        if snap.path == path && Some(snap.stamp) == now {
            return snap.entries.clone();
        }
    }
    let entries = Arc::new(CacheFile::open(path.parent(), CACHE_FILE).entries);
    *last = now.map(|stamp| Snapshot {
        path: path.to_path_buf(),
        stamp,
        entries: entries.clone(),
    });
    entries
}

/// Records `entries` as the contents of the file at `path`, just written.
fn remember(path: &Path, entries: &Arc<Vec<Entry>>) {
    let mut last = LAST_READ.lock().unwrap_or_else(|e| e.into_inner());
    *last = stamp(path).map(|stamp| Snapshot {
        path: path.to_path_buf(),
        stamp,
        entries: entries.clone(),
    });
}

/// Timed runs of a kernel; the fastest counts.
const RUNS: usize = 3;

/// Milliseconds of the fastest of [`RUNS`] calls of `run` (after one that
/// maps the pages), each with `weights` flushed from the caches: in a model, a
/// layer's weights were last read a whole run before, and a model's weights
/// outgrow the caches (Winograd's transformed weights are 1.8x or 4x the
/// direct ones, which on deep layers can cost more than the multiplies it
/// saves), while its input was just written by the step before.
pub(super) fn time_kernel(weights: &[f32], mut run: impl FnMut()) -> f64 {
    run();
    (0..RUNS)
        .map(|_| {
            flush(weights);
            let t = Instant::now();
            run();
            t.elapsed().as_secs_f64() * 1e3
        })
        .fold(f64::INFINITY, f64::min)
}

/// Writes `data` back to memory and drops it from every cache level.
fn flush(data: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_clflush, _mm_mfence};
        // One address per 64-byte line.
        for line in data.chunks(16) {
            // SAFETY: the address lies inside `data`; SSE2 is part of x86-64.
            unsafe { _mm_clflush(line.as_ptr().cast()) }
        }
        // SAFETY: as above.
        unsafe { _mm_mfence() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = data;
}
