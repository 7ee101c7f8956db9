//! Measured kernel times, cached per machine: one file (`kernel_times.json`,
//! in the roofline's cache folder) serves the compiler, which chooses each
//! convolution's algorithm by them, and the planner, which compares a
//! convolution's layouts by them (`calibrate.rs`). An entry is keyed by CPU
//! model, instruction set, thread count, kernel kind and geometry, and holds
//! the milliseconds of each algorithm measured there.
//!
//! Times measured while other processes kept the cores busy (`load.rs`) are
//! written too, with the load they were measured under: every process on the
//! machine then plans from the same times.

use super::load::{metered, note_measured_under_load, Load};
use super::roofline::{cpu_name, CacheFile, FolderLock};
use crate::graph::numel;
use crate::layout::Layout;
use crate::runtime::kernels::conv::algo::{ConvAlgo, ErrorsStore};
use crate::runtime::kernels::simd::Isa;
use serde::{Deserialize, Serialize};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

/// The file in the cache folder that holds the measured times.
pub(in crate::runtime) const CACHE_FILE: &str = "kernel_times.json";

/// How today's entries were timed (see [`time_kernel`]), and the revision of
/// the timed kernels; entries timed otherwise, or of older kernels, are not
/// used. Revision 2: the Winograd transforms written out per tile size.
/// Revision 3: weights prefetched ahead in the tiles and on huge pages.
/// Revision 4: depthwise convolutions in NCHW with output columns in the
/// lanes. Revision 5: inputs read from memory of their own (a fresh zeroed
/// allocation read as the one zero page the system maps everywhere, so every
/// input below the huge-page threshold looked cached).
/// A convolution's algorithm far behind another in its first run is timed
/// once (`conv_times::millis_in`), and so is a planner's layout pair far
/// behind the layer's fastest in another blocking (`conv_times::contends`):
/// an entry settled before is as good, so the string stays.
const TIMING: &str =
    "weights, output and scratch flushed, best of 2 settled or 4, one run far behind; kernels r5";

/// The measured times of one kernel geometry on one machine.
#[derive(Clone, Serialize, Deserialize)]
struct Entry {
    cpu: String,
    isa: String,
    threads: usize,
    /// "conv", "depthwise" or "transform"; "winograd-errors" for the
    /// relative errors of Winograd sizes (in `millis`) on a layer's weights.
    kernel: String,
    /// `ConvGeom::key` for convolutions.
    geom: Vec<usize>,
    timing: String,
    /// Milliseconds per algorithm name.
    millis: Vec<(String, f64)>,
    /// Cores other processes kept busy while they were measured, where they
    /// did not fit beside the measurement (`Load::quiet_for`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    others_cores: Option<f64>,
}

impl Entry {
    /// What an entry is looked up by: machine, kernel, geometry and how it
    /// was timed (everything but the times).
    fn key(&self) -> (&str, &str, usize, &str, &[usize], &str) {
        (
            &self.cpu,
            &self.isa,
            self.threads,
            &self.kernel,
            &self.geom,
            &self.timing,
        )
    }
}

/// What an entry is looked up by, hashed.
fn key_hash(key: (&str, &str, usize, &str, &[usize], &str)) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    key.hash(&mut h);
    h.finish()
}

/// The cache file's entries, indexed by their keys: a compile looks a time
/// up per convolution and layout pair, and scanning a file of thousands of
/// entries for each was a fifth of compiling a new input shape.
#[derive(Default)]
struct Entries {
    /// The entries, each key once (`merge` keeps them so).
    list: Vec<Entry>,
    /// The positions in `list` of the entries whose key has each hash.
    index: rustc_hash::FxHashMap<u64, Vec<usize>>,
}

impl Entries {
    fn new(list: Vec<Entry>) -> Entries {
        let mut index: rustc_hash::FxHashMap<u64, Vec<usize>> = Default::default();
        for (i, e) in list.iter().enumerate() {
            index.entry(key_hash(e.key())).or_default().push(i);
        }
        Entries { list, index }
    }

    /// The entry of `key`, if there is one.
    fn find(&self, key: (&str, &str, usize, &str, &[usize], &str)) -> Option<&Entry> {
        let at = self.index.get(&key_hash(key))?;
        at.iter().map(|&i| &self.list[i]).find(|e| e.key() == key)
    }

    /// Adds `new` entries, a new time of an algorithm replacing the old.
    fn merge(&mut self, new: impl IntoIterator<Item = Entry>) {
        for new in new {
            let hash = key_hash(new.key());
            let at = self.index.entry(hash).or_default();
            match at.iter().find(|&&i| self.list[i].key() == new.key()) {
                Some(&i) => {
                    let e = &mut self.list[i];
                    e.millis
                        .retain(|(name, _)| !new.millis.iter().any(|m| &m.0 == name));
                    e.millis.extend(new.millis);
                }
                None => {
                    at.push(self.list.len());
                    self.list.push(new);
                }
            }
        }
    }
}

/// The kernel name transforms are cached under.
const TRANSFORM_KERNEL: &str = "transform";
/// A measured kernel prices the same kernel and algorithm at a neighbouring
/// geometry ([`KernelTimes::estimate`]) whose one differing extent is at most
/// this factor from its own: a model's values come in families (a dense
/// block's concatenations grow by 32 channels at one resolution, and so do
/// the 1x1 convolutions that read them), which run at one rate per byte or
/// per flop, and measuring each member was most of a cold plan's
/// measurements (806 transforms and 366 convolutions of DenseNet121's 1250).
const NEIGHBOUR_RATIO: f64 = 1.5;
/// The kind of the entries that keep Winograd errors, not times.
const WINOGRAD_ERRORS: &str = "winograd-errors";

/// Winograd errors are kept beside the times: computed once per layer's
/// weights on this machine, as a kernel is timed once per geometry.
impl ErrorsStore for KernelTimes {
    fn error(&self, key: &[usize], algo: ConvAlgo) -> Option<f64> {
        self.get(WINOGRAD_ERRORS, key, &algo.to_string())
    }

    fn keep_error(&mut self, key: &[usize], algo: ConvAlgo, error: f64) {
        self.record(WINOGRAD_ERRORS, key, &algo.to_string(), error);
    }
}

/// The name a transform's time is cached under, beside its logical shape
/// (layout names are unambiguous).
pub(in crate::runtime) fn transform_name(from: &Layout, to: &Layout) -> String {
    format!("{from} -> {to}")
}

/// A layout transform as the data movement it is, however its logical axes
/// are numbered: `shape` and both layouts renumbered (`Layout::transposed`,
/// which keeps the bytes where they are) so that `from`'s outermost digits
/// come in axis order, with the default letters. A TFLite model's
/// channels-last tensors and their channels-first twins across a transpose
/// then share one measurement: [1,112,112,96] from row-major to (0,3,1,2) is
/// [1,96,112,112] from NHWC to NCHW.
fn movement(shape: &[usize], from: &Layout, to: &Layout) -> (Vec<usize>, Layout, Layout) {
    let perm = from.outer_order();
    let renumber = |l: &Layout| l.transposed(&perm).and_then(|l| l.with_default_letters());
    match (renumber(from), renumber(to)) {
        (Ok(f), Ok(t)) if perm.len() == shape.len() => {
            (perm.iter().map(|&a| shape[a]).collect(), f, t)
        }
        _ => (shape.to_vec(), from.clone(), to.clone()),
    }
}

/// The kind under which times of `kernel` priced from a measured neighbour
/// are recorded: apart from the measured ones, so that no estimate prices
/// another.
fn estimate_kind(kernel: &str) -> String {
    format!("{kernel}-estimate")
}

/// How a kernel's time was come by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::runtime) enum Priced {
    /// Timed at its own geometry.
    Measured,
    /// Priced from a neighbouring geometry ([`KernelTimes::estimate`]).
    Estimated,
}

/// A measured entry seen from a geometry to be priced: how far apart the
/// two are (the ratio, at least 1, of the one extent in which they differ)
/// and what the measured time is multiplied by to price the other.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(in crate::runtime) struct Neighbour {
    pub ratio: f64,
    pub scale: f64,
}

/// The kernel times of this machine for one instruction set and thread
/// count, read from the cache folder (none without one).
pub(in crate::runtime) struct KernelTimes {
    /// The cache file, if there is a folder.
    path: Option<PathBuf>,
    /// Its entries as read.
    entries: Arc<Entries>,
    cpu: String,
    isa: String,
    threads: usize,
    /// Entries measured since the file was read.
    added: Vec<Entry>,
    /// What other processes took while they were measured.
    load: Load,
    /// The buffers measured kernels write (output, working memory), kept
    /// from one measurement to the next until the times are saved: a cold
    /// plan measures hundreds of kernels, and mapping fresh pages for each
    /// was a tenth of it.
    written: Vec<Vec<f32>>,
    /// The zeros measured kernels read as their input, grown as needed and
    /// kept until the times are saved: allocated per measurement, the pages
    /// were mapped again each time.
    zeros: Vec<f32>,
}

impl KernelTimes {
    /// The times cached in `dir` for `isa` on `threads` worker threads.
    pub(in crate::runtime) fn open(dir: Option<&Path>, isa: Isa, threads: usize) -> KernelTimes {
        let path = dir.map(|d| d.join(CACHE_FILE));
        let entries = read_entries(path.as_deref());
        KernelTimes {
            path,
            entries,
            cpu: cpu_name(),
            isa: format!("{isa:?}"),
            threads,
            added: vec![],
            load: Load::default(),
            written: vec![],
            zeros: vec![],
        }
    }

    /// The key of this machine's entry of `kernel` at geometry `geom`.
    fn key<'a>(
        &'a self,
        kernel: &'a str,
        geom: &'a [usize],
    ) -> (&'a str, &'a str, usize, &'a str, &'a [usize], &'a str) {
        (&self.cpu, &self.isa, self.threads, kernel, geom, TIMING)
    }

    /// The cached milliseconds of `algo` on `kernel` at geometry `geom` (for
    /// a convolution, its `ConvGeom::key`).
    pub(in crate::runtime) fn get(&self, kernel: &str, geom: &[usize], algo: &str) -> Option<f64> {
        let key = self.key(kernel, geom);
        self.added
            .iter()
            .filter(|e| e.key() == key)
            .chain(self.entries.find(key))
            .flat_map(|e| &e.millis)
            .find(|(name, ms)| name == algo && ms.is_finite() && *ms >= 0.0)
            .map(|m| m.1)
    }

    /// Milliseconds of `run` on an input of `input_len` zeros and on buffers
    /// of `written_lens` elements it writes, settled ([`KernelTimes::time`]).
    pub(in crate::runtime) fn measure(
        &mut self,
        weights: &[f32],
        input_len: usize,
        written_lens: &[usize],
        run: impl FnMut(&[f32], &mut [&mut [f32]]),
    ) -> f64 {
        let mut timing = TimedRuns::default();
        let buffers = (weights, input_len, written_lens);
        self.time(&mut timing, Runs::Settled, buffers, run);
        timing.fastest()
    }

    /// Takes the timed `runs` of `run` on the `buffers` (weights flushed
    /// before each, an input of `input_len` zeros, buffers of `written_lens`
    /// elements it writes: [`time_kernel`]; their contents are whatever the
    /// last kernel left, zeros where the kernels read zeros), after those
    /// `timing` holds, noting how busy the machine was meanwhile.
    pub(in crate::runtime) fn time(
        &mut self,
        timing: &mut TimedRuns,
        runs: Runs,
        (weights, input_len, written_lens): (&[f32], usize, &[usize]),
        mut run: impl FnMut(&[f32], &mut [&mut [f32]]),
    ) {
        let mut zeros = std::mem::take(&mut self.zeros);
        if zeros.len() < input_len {
            zeros.resize(input_len, 0.0);
        }
        let input = &zeros[..input_len];
        let mut run = |written: &mut [&mut [f32]]| run(input, written);
        let mut buffers = std::mem::take(&mut self.written);
        if buffers.len() < written_lens.len() {
            buffers.resize_with(written_lens.len(), Vec::new);
        }
        let mut written: Vec<&mut [f32]> = buffers
            .iter_mut()
            .zip(written_lens)
            .map(|(b, &len)| {
                if b.len() < len {
                    // Written now, so that no timed run maps the pages.
                    b.resize(len, 0.0);
                }
                &mut b[..len]
            })
            .collect();
        let mut window = Load::default();
        let times = &mut timing.runs;
        let (last, settle) = match runs {
            Runs::First => (times.len().max(1), false),
            Runs::Settled => (times.len().max(RUNS), true),
        };
        metered(&mut window, || {
            time_kernel(weights, &mut written, &mut run, times, last, settle)
        });
        timing.quiet = window.quiet_for(self.threads);
        if runs == Runs::Settled && !timing.quiet {
            // Under load, the fastest of more runs: those no other process interrupted.
            let last = times.len() + RUNS_UNDER_LOAD;
            metered(&mut window, || {
                time_kernel(weights, &mut written, &mut run, times, last, false)
            });
        }
        self.load.join(window);
        self.written = buffers;
        self.zeros = zeros;
    }

    /// Records the milliseconds of `algo` on `kernel` at geometry `geom`.
    pub(in crate::runtime) fn record(&mut self, kernel: &str, geom: &[usize], algo: &str, ms: f64) {
        let at = self
            .added
            .iter()
            .position(|e| e.key() == self.key(kernel, geom));
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
                    others_cores: None,
                });
                self.added.last_mut().expect("just pushed")
            }
        };
        entry.millis.retain(|(name, _)| name != algo);
        entry.millis.push((algo.to_string(), ms));
    }

    /// The milliseconds of `algo` on `kernel` at `geom` as the planner priced
    /// them, and how: an estimate recorded for the geometry comes first, so
    /// that a later plan prices it as the first did even where a compile has
    /// since timed the kernel chosen there (which would price one layout pair
    /// apart from the others of the same layer).
    pub(in crate::runtime) fn priced(
        &self,
        kernel: &str,
        geom: &[usize],
        algo: &str,
    ) -> Option<(f64, Priced)> {
        let estimated = self.get(&estimate_kind(kernel), geom, algo);
        (estimated.map(|ms| (ms, Priced::Estimated)))
            .or_else(|| Some((self.get(kernel, geom, algo)?, Priced::Measured)))
    }

    /// The milliseconds of `algo` on `kernel` at `geom`, priced from the
    /// measured entry of the same kernel and algorithm on this machine that
    /// `neighbour` finds nearest (a ratio of at most [`NEIGHBOUR_RATIO`]; ties
    /// to the smaller geometry), times its scale; `None` without one. The
    /// estimate is recorded, so that later plans on this machine price the
    /// geometry the same whatever else they measured.
    pub(in crate::runtime) fn estimate(
        &mut self,
        kernel: &str,
        geom: &[usize],
        algo: &str,
        neighbour: impl Fn(&[usize]) -> Option<Neighbour>,
    ) -> Option<f64> {
        let mut nearest: Option<(Neighbour, &[usize], f64)> = None;
        for e in self.entries_of(kernel) {
            let Some(&(_, ms)) = (e.millis.iter()).find(|(n, ms)| n == algo && ms.is_finite())
            else {
                continue;
            };
            let Some(n) = neighbour(&e.geom).filter(|n| n.ratio <= NEIGHBOUR_RATIO) else {
                continue;
            };
            let closer = nearest.is_none_or(|(best, g, _)| {
                n.ratio < best.ratio || (n.ratio == best.ratio && e.geom.as_slice() < g)
            });
            if closer {
                nearest = Some((n, &e.geom, ms));
            }
        }
        let (n, _, ms) = nearest?;
        let ms = ms * n.scale;
        self.record(&estimate_kind(kernel), geom, algo, ms);
        Some(ms)
    }

    /// This machine's entries of `kernel`, timed as this build times.
    fn entries_of<'a>(&'a self, kernel: &'a str) -> impl Iterator<Item = &'a Entry> + 'a {
        // Most entries are another kernel's: the name sorts them out first.
        (self.added.iter().chain(&self.entries.list))
            .filter(move |e| e.kernel == kernel && e.key() == self.key(kernel, &e.geom))
    }

    /// The fastest time of any algorithm on `kernel` at the geometries
    /// `wanted` accepts, on this machine; `None` without one.
    pub(in crate::runtime) fn fastest_at(
        &self,
        kernel: &str,
        wanted: impl Fn(&[usize]) -> bool,
    ) -> Option<f64> {
        (self.entries_of(kernel))
            .filter(|e| wanted(&e.geom))
            .flat_map(|e| e.millis.iter().map(|m| m.1))
            .filter(|ms| ms.is_finite() && *ms >= 0.0)
            .reduce(f64::min)
    }

    /// The milliseconds of transforming `shape` from `from` to `to`, as the
    /// planner measured or estimated them, and which.
    pub(in crate::runtime) fn transform_millis(
        &self,
        shape: &[usize],
        from: &Layout,
        to: &Layout,
    ) -> Option<(f64, Priced)> {
        let (shape, from, to) = movement(shape, from, to);
        self.priced(TRANSFORM_KERNEL, &shape, &transform_name(&from, &to))
    }

    /// The milliseconds of transforming `shape` from `from` to `to`, priced
    /// from the measured transform between the same layouts of the nearest
    /// shape that differs in one axis ([`KernelTimes::estimate`]), scaled by
    /// the elements both layouts store.
    pub(in crate::runtime) fn estimate_transform(
        &mut self,
        shape: &[usize],
        from: &Layout,
        to: &Layout,
    ) -> Option<f64> {
        let (shape, from, to) = movement(shape, from, to);
        let (shape, from, to) = (&shape[..], &from, &to);
        let stored = |s: &[usize]| -> Option<f64> {
            let (a, b) = (from.physical_shape(s).ok()?, to.physical_shape(s).ok()?);
            Some((numel(&a) + numel(&b)) as f64)
        };
        let name = transform_name(from, to);
        self.estimate(TRANSFORM_KERNEL, shape, &name, |measured| {
            Some(Neighbour {
                ratio: one_axis_ratio(measured, shape)?,
                scale: stored(shape)? / stored(measured)?,
            })
        })
    }

    /// Records the milliseconds of transforming `shape` from `from` to `to`.
    pub(in crate::runtime) fn record_transform(
        &mut self,
        shape: &[usize],
        from: &Layout,
        to: &Layout,
        ms: f64,
    ) {
        let (shape, from, to) = movement(shape, from, to);
        self.record(TRANSFORM_KERNEL, &shape, &transform_name(&from, &to), ms);
    }

    /// Writes the entries measured since the last save into the file, merged
    /// with what other processes wrote there meanwhile, marked with the load
    /// they were measured under where it was not quiet. Measuring is done
    /// for now: the buffers it wrote are let go.
    pub(in crate::runtime) fn save(&mut self) {
        self.written = vec![];
        self.zeros = vec![];
        if self.added.is_empty() {
            return;
        }
        let load = std::mem::take(&mut self.load);
        if !load.quiet_for(self.threads) {
            note_measured_under_load(load);
            let others = Some(load.others_cores());
            self.added.iter_mut().for_each(|e| e.others_cores = others);
        }
        if self.path.is_none() {
            // No file: they stay with this process.
            return;
        }
        let dir = self.path.as_deref().and_then(Path::parent);
        let _lock = FolderLock::take(dir);
        let mut current: CacheFile<Entry> = CacheFile::open(dir, CACHE_FILE);
        let mut entries = Entries::new(std::mem::take(&mut current.entries));
        entries.merge(self.added.drain(..));
        current.entries = std::mem::take(&mut entries.list);
        current.save();
        entries.list = std::mem::take(&mut current.entries);
        let entries = Arc::new(entries);
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
    entries: Arc<Entries>,
}

static LAST_READ: Mutex<Option<Snapshot>> = Mutex::new(None);

/// The size and modification time of the file at `path`.
fn stamp(path: &Path) -> Option<(u64, SystemTime)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.len(), meta.modified().ok()?))
}

/// The entries of the cache file at `path` (none without one), parsed again
/// only when the file changed since this process last read it.
fn read_entries(path: Option<&Path>) -> Arc<Entries> {
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
    let entries = Arc::new(Entries::new(
        CacheFile::open(path.parent(), CACHE_FILE).entries,
    ));
    *last = now.map(|stamp| Snapshot {
        path: path.to_path_buf(),
        stamp,
        entries: entries.clone(),
    });
    entries
}

/// Records `entries` as the contents of the file at `path`, just written.
fn remember(path: &Path, entries: &Arc<Entries>) {
    let mut last = LAST_READ.lock().unwrap_or_else(|e| e.into_inner());
    *last = stamp(path).map(|stamp| Snapshot {
        path: path.to_path_buf(),
        stamp,
        entries: entries.clone(),
    });
}

/// Timed runs of a kernel at most; the fastest counts. There is no untimed
/// run before them (the written pages are mapped before, `measure`), so the
/// first may find the kernel's code and tables cold: it then disagrees with
/// the next two, which settle.
const RUNS: usize = 4;
/// Timed runs, all taken, when the first ones ran under load.
const RUNS_UNDER_LOAD: usize = 6;
/// Two times within this fraction of each other are one time, measurement
/// noise apart: two timed runs that agree so settle a kernel's time (a third
/// run is taken only when they disagree; a cold plan measures every
/// convolution of a model in several layouts, so each run saved counts), and
/// two algorithms or two layout pairs measured so tie, the tie broken the
/// same way in every process (`conv_times::build`, `cost::WithinMargin`).
pub(in crate::runtime) const SAME_TIME: f64 = 0.05;

/// How far [`KernelTimes::time`] times a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::runtime) enum Runs {
    /// One timed run, if none was taken: enough to tell a candidate far
    /// behind another (`conv_times::millis_in`).
    First,
    /// Until two runs agree, up to [`RUNS`] with those taken before, and
    /// [`RUNS_UNDER_LOAD`] more where other processes kept the cores busy.
    Settled,
}

/// The timed runs of one kernel so far, and whether the machine was quiet
/// during the last of them.
#[derive(Clone, Debug, Default)]
pub(in crate::runtime) struct TimedRuns {
    runs: Vec<f64>,
    quiet: bool,
}

impl TimedRuns {
    /// Milliseconds of the fastest run (infinite before any).
    pub(in crate::runtime) fn fastest(&self) -> f64 {
        self.runs.iter().copied().fold(f64::INFINITY, f64::min)
    }

    /// Whether the machine was quiet during the last runs taken.
    pub(in crate::runtime) fn quiet(&self) -> bool {
        self.quiet
    }

    /// Runs of the given milliseconds, as if taken (for tests of what they decide).
    #[cfg(test)]
    pub(in crate::runtime) fn taken(runs: &[f64], quiet: bool) -> TimedRuns {
        TimedRuns {
            runs: runs.to_vec(),
            quiet,
        }
    }
}

/// Milliseconds of calls of `run` on the buffers it writes, pushed to
/// `times` until it holds `last`, or stopping once two agree ([`settled`])
/// where `settle`, each with
/// `weights` and the `written` buffers (output, working memory) flushed from
/// the caches: in a model, a layer's weights were
/// last read a whole run before, and a model's weights outgrow the caches
/// (Winograd's transformed weights are 1.8x or 4x the direct ones, which on
/// deep layers can cost more than the multiplies it saves); the arena ranges
/// a step writes were last used by other steps, with other weights streamed
/// through the caches since (written over and over in place, they stayed in
/// the caches, and a model's deep 3x3 layers ran 1.4-1.7x their measured time
/// where its 1x1 layers ran 1.1-1.3x); its input was just written by the step
/// before.
fn time_kernel(
    weights: &[f32],
    written: &mut [&mut [f32]],
    mut run: impl FnMut(&mut [&mut [f32]]),
    times: &mut Vec<f64>,
    last: usize,
    settle: bool,
) {
    while times.len() < last && !(settle && settled(times)) {
        flush(weights);
        written.iter().for_each(|b| flush(b));
        let t = Instant::now();
        run(written);
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
}

/// The ratio (at least 1) of the extents of the one axis in which shapes `a`
/// and `b` differ; `None` unless they differ in exactly one, both non-zero.
fn one_axis_ratio(a: &[usize], b: &[usize]) -> Option<f64> {
    if a.len() != b.len() {
        return None;
    }
    let mut differing = a.iter().zip(b).filter(|(x, y)| x != y);
    let (&x, &y) = differing.next()?;
    if differing.next().is_some() || x == 0 || y == 0 {
        return None;
    }
    Some(x.max(y) as f64 / x.min(y) as f64)
}

/// Whether the two fastest of `times` lie within [`SAME_TIME`] of each other.
fn settled(times: &[f64]) -> bool {
    let mut fastest = [f64::INFINITY; 2];
    for &t in times {
        if t < fastest[0] {
            fastest = [t, fastest[0]];
        } else if t < fastest[1] {
            fastest[1] = t;
        }
    }
    times.len() >= 2 && fastest[1] <= fastest[0] * (1.0 + SAME_TIME)
}

/// Writes `data` back to memory and drops it from every cache level.
fn flush(data: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_clflush, _mm_mfence};
        // `clflushopt` evicts many lines at once where `clflush` evicts them
        // one after another: 4 MB took 3.8 ms by `clflush` and 0.21 ms by
        // `clflushopt` on a 2-core Intel Xeon (family 6, model 167), where
        // `clflush` was more than half of a cold plan.
        if has_clflushopt() {
            for line in data.chunks(16) {
                // SAFETY: the address lies inside `data`, and the CPU has
                // CLFLUSHOPT; the instruction writes no register or flag.
                unsafe {
                    std::arch::asm!(
                        "clflushopt [{line}]",
                        line = in(reg) line.as_ptr(),
                        options(nostack, preserves_flags)
                    )
                }
            }
        } else {
            // One address per 64-byte line.
            for line in data.chunks(16) {
                // SAFETY: the address lies inside `data`; SSE2 is part of x86-64.
                unsafe { _mm_clflush(line.as_ptr().cast()) }
            }
        }
        // Every eviction is done before the timed run starts.
        // SAFETY: SSE2 is part of x86-64.
        unsafe { _mm_mfence() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = data;
}

/// Whether the CPU has CLFLUSHOPT (CPUID leaf 7, EBX bit 23).
#[cfg(target_arch = "x86_64")]
fn has_clflushopt() -> bool {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| __cpuid(0).eax >= 7 && __cpuid_count(7, 0).ebx & (1 << 23) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The figures `measure` would have noted, given instead of measured.
    fn measured_under(times: &mut KernelTimes, others_cores: f64, geom: &[usize], ms: f64) {
        times.load = Load {
            others: others_cores * 100.0,
            elapsed: 100.0,
            cpus: 2,
            span: None,
        };
        times.record("conv", geom, "direct", ms);
        times.save();
    }

    #[test]
    fn two_agreeing_runs_settle_a_time_and_an_outlier_does_not() {
        assert!(!settled(&[]));
        assert!(!settled(&[1.0]));
        assert!(settled(&[1.0, 1.04]));
        assert!(!settled(&[1.0, 1.2]));
        // The two fastest decide, whatever came first.
        assert!(settled(&[3.0, 1.02, 1.0]));
        let mut calls = 0;
        let mut times = vec![];
        time_kernel(&[], &mut [], |_| calls += 1, &mut times, RUNS, true);
        assert!((2..=RUNS).contains(&calls), "{calls} calls");
        assert_eq!(times.len(), calls);
        // Under load, all the runs asked for, after those taken.
        let last = calls + 3;
        time_kernel(&[], &mut [], |_| calls += 1, &mut times, last, false);
        assert_eq!(times.len(), calls);
        // Runs taken before count: two that agree take no more.
        let mut times = vec![5.0, 5.1];
        time_kernel(&[], &mut [], |_| calls += 1, &mut times, RUNS, true);
        assert_eq!(times, [5.0, 5.1]);
    }

    #[test]
    fn times_measured_under_load_are_cached_with_their_load() {
        let dir = std::env::temp_dir().join(format!("layoutopt-times-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let open = || KernelTimes::open(Some(&dir), Isa::Portable, 2);
        let (busy, quiet) = ([9001, 1], [9001, 2]);
        let mut times = open();
        measured_under(&mut times, 1.5, &busy, 4.0);
        measured_under(&mut times, 0.05, &quiet, 1.0);
        // A new reader (another process) finds both, and which was measured under load.
        let reread = open();
        assert_eq!(reread.get("conv", &busy, "direct"), Some(4.0));
        assert_eq!(reread.get("conv", &quiet, "direct"), Some(1.0));
        let loads: Vec<_> = reread
            .entries
            .list
            .iter()
            .map(|e| (e.geom.clone(), e.others_cores))
            .collect();
        assert_eq!(loads, [(busy.to_vec(), Some(1.5)), (quiet.to_vec(), None)]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn one_data_movement_is_one_measurement_however_its_axes_are_numbered() {
        let l = |s: &str| Layout::parse(s).unwrap();
        let mut times = KernelTimes::open(None, Isa::Portable, 1);
        // Channels-first logical axes, stored channels-last, into blocks of 8.
        times.record_transform(&[1, 96, 112, 112], &l("NHWC"), &l("NCHW8c"), 2.0);
        // The same bytes as channels-last logical axes stored row-major.
        let (nhwc, blocked) = (l("NCHW"), l("(0,3,1,2,8@3)"));
        let twin = times.transform_millis(&[1, 112, 112, 96], &nhwc, &blocked);
        assert_eq!(twin, Some((2.0, Priced::Measured)));
        // And back, recorded from the other side.
        times.record_transform(&[1, 112, 112, 96], &blocked, &nhwc, 3.0);
        let back = times.transform_millis(&[1, 96, 112, 112], &l("NCHW8c"), &l("NHWC"));
        assert_eq!(back, Some((3.0, Priced::Measured)));
        // Another movement of the same shape is not it.
        let other = times.transform_millis(&[1, 96, 112, 112], &l("NCHW"), &l("NCHW8c"));
        assert_eq!(other, None);
        // Its neighbour at 104 channels is priced from it, renumbered alike.
        let est = times.estimate_transform(&[1, 112, 112, 104], &nhwc, &blocked);
        assert_eq!(est, Some(2.0 * 104.0 / 96.0));
    }

    #[test]
    fn a_transform_is_priced_from_its_nearest_measured_neighbour() {
        let l = |s: &str| Layout::parse(s).unwrap();
        let (nchw, blocked) = (l("NCHW"), l("NCHW8c"));
        let mut times = KernelTimes::open(None, Isa::Portable, 1);
        times.record_transform(&[1, 64, 8, 8], &nchw, &blocked, 1.0);
        times.record_transform(&[1, 96, 8, 8], &nchw, &blocked, 3.0);
        // 88 channels are nearer 96 (x1.09) than 64 (x1.38): 3 ms for 96 scaled to 88.
        let est = times.estimate_transform(&[1, 88, 8, 8], &nchw, &blocked);
        assert_eq!(est, Some(3.0 * 88.0 / 96.0));
        // Recorded: read back as the transform's time, not estimated again.
        let read = times.transform_millis(&[1, 88, 8, 8], &nchw, &blocked);
        assert_eq!(read, est.map(|ms| (ms, Priced::Estimated)));
        let measured = times.transform_millis(&[1, 96, 8, 8], &nchw, &blocked);
        assert_eq!(measured, Some((3.0, Priced::Measured)));
        // Padding counts: NCHW8c stores 4 and 5 channels alike, as 8.
        times.record_transform(&[1, 4, 8, 8], &blocked, &nchw, 1.0);
        let padded = times.estimate_transform(&[1, 5, 8, 8], &blocked, &nchw);
        assert_eq!(padded, Some((8.0 + 5.0) / (8.0 + 4.0)));
        // No neighbour: another layout pair, two axes apart, an estimate, too far.
        let none = [
            (vec![1, 72, 8, 8], &blocked, &nchw),
            (vec![1, 72, 9, 9], &nchw, &blocked),
            (vec![1, 7, 8, 8], &blocked, &nchw),
            (vec![1, 150, 8, 8], &nchw, &blocked),
        ];
        for (shape, from, to) in none {
            assert_eq!(
                times.estimate_transform(&shape, from, to),
                None,
                "{shape:?}"
            );
        }
    }

    /// The writer processes of the test below: each records and saves
    /// `ENTRIES` times of its own, one save per time.
    const WRITER_ENV: &str = "LAYOUTOPT_TEST_CACHE_WRITER";
    const ENTRIES: usize = 25;

    #[test]
    #[ignore = "run by processes_writing_at_once_keep_every_entry"]
    fn cache_writer_process() {
        let Some(arg) = std::env::var_os(WRITER_ENV) else {
            return;
        };
        let arg = arg.to_string_lossy().into_owned();
        let (dir, id) = arg.rsplit_once(',').unwrap();
        let id: usize = id.parse().unwrap();
        let mut times = KernelTimes::open(Some(Path::new(dir)), Isa::Portable, 1);
        for i in 0..ENTRIES {
            times.record("conv", &[9002, id, i], "direct", 1.0);
            times.save();
        }
    }

    #[test]
    fn processes_writing_at_once_keep_every_entry() {
        let dir = std::env::temp_dir().join(format!("layoutopt-writers-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let writers = 4;
        let children: Vec<_> = (0..writers)
            .map(|id| {
                std::process::Command::new(std::env::current_exe().unwrap())
                    .args(["--ignored", "--exact", "--quiet"])
                    .arg("runtime::measure::kernel_times::tests::cache_writer_process")
                    .env(WRITER_ENV, format!("{},{id}", dir.display()))
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success() && text.contains("1 passed"), "{text}");
        }
        let times = KernelTimes::open(Some(&dir), Isa::Portable, 1);
        for id in 0..writers {
            for i in 0..ENTRIES {
                assert_eq!(
                    times.get("conv", &[9002, id, i], "direct"),
                    Some(1.0),
                    "{id} {i}"
                );
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
