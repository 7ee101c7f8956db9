//! How busy the rest of the machine was while something was measured: a
//! measurement taken under load is cached all the same (every process on the
//! machine then plans from the same times, where measuring again in each one
//! gave each its own plan), marked with the load and reported, so that a user
//! can measure again on a quiet machine (`layoutopt calibrate --clear`).
//!
//! A window's load is read from `/proc/stat` (CPU time of the whole machine,
//! steal included) less `/proc/self/stat` (this process's own threads) at both
//! ends: what other processes, or the hypervisor, took while we measured.
//! Both count clock ticks, so short windows are summed over a calibration
//! before anything is judged. Where the files do not exist (not Linux) the
//! load is unknown and taken as quiet.

use std::sync::Mutex;

/// The most of each measuring thread's core that other work may have taken
/// for the measurement still to count as quiet (a desktop's background
/// daemons take a few percent).
pub const QUIET_SHARE: f64 = 0.1;

/// CPU time of the whole machine and of this process at one moment, in clock ticks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CpuTimes {
    /// Ticks every CPU spent on anything but idling (steal included).
    busy: u64,
    /// Ticks every CPU spent in all, idle included.
    total: u64,
    /// CPUs the machine counts.
    cpus: usize,
    /// Ticks this process's threads ran (user and system).
    own: u64,
}

impl CpuTimes {
    /// Now, from `/proc`; `None` where it cannot be read.
    pub fn now() -> Option<CpuTimes> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let own = std::fs::read_to_string("/proc/self/stat").ok()?;
        CpuTimes::parse(&stat, &own)
    }

    /// From the text of `/proc/stat` and `/proc/self/stat`.
    fn parse(stat: &str, own: &str) -> Option<CpuTimes> {
        let all = stat.lines().find(|l| l.starts_with("cpu "))?;
        let ticks: Vec<u64> = all
            .split_whitespace()
            .skip(1)
            .map(|t| t.parse().ok())
            .collect::<Option<_>>()?;
        // user nice system idle iowait irq softirq steal (guest time is in user).
        let [user, nice, system, idle, iowait, irq, softirq, steal, ..] = ticks[..] else {
            return None;
        };
        let cpus = stat
            .lines()
            .filter(|l| {
                l.strip_prefix("cpu")
                    .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
            })
            .count();
        // Fields after the command name (which may hold spaces and parentheses):
        // state is field 3, utime 14 and stime 15.
        let fields: Vec<&str> = own.rsplit_once(')')?.1.split_whitespace().collect();
        let tick = |i: usize| fields.get(i)?.parse::<u64>().ok();
        let busy = user + nice + system + irq + softirq + steal;
        Some(CpuTimes {
            busy,
            total: busy + idle + iowait,
            cpus: cpus.max(1),
            own: tick(11)? + tick(12)?,
        })
    }
}

/// What other processes took of the machine over the span of one or more windows.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Load {
    /// Ticks of CPU time others used (the hypervisor's steal included); may
    /// read below 0 (see `between`).
    pub others: f64,
    /// Ticks the windows lasted (wall time, per CPU).
    pub elapsed: f64,
    /// CPUs of the machine (0 while nothing was read).
    pub cpus: usize,
    /// The readings before the first window `metered` took and after the
    /// latest: the windows are judged over their whole span, so that only
    /// its two ends carry the error of sampled ticks (a window of a few
    /// milliseconds is shorter than a tick; a sum of many such windows read
    /// an idle machine as up to 0.3 cores busy).
    pub(in crate::runtime) span: Option<(CpuTimes, CpuTimes)>,
}

impl Load {
    /// The load between two readings.
    pub fn between(a: CpuTimes, b: CpuTimes) -> Load {
        let ticks = |x: u64, y: u64| y.saturating_sub(x) as f64;
        let own = ticks(a.own, b.own);
        Load {
            // Per-CPU ticks are sampled and the process's are not, so a
            // window may show less than this process took.
            others: ticks(a.busy, b.busy) - own,
            elapsed: ticks(a.total, b.total) / b.cpus as f64,
            cpus: b.cpus,
            span: None,
        }
    }

    /// Takes in the window from reading `a` to reading `b`: the load is
    /// that of the span from the first window's start to `b`.
    fn extend(&mut self, a: CpuTimes, b: CpuTimes) {
        let first = self.span.map_or(a, |(first, _)| first);
        *self = Load {
            span: Some((first, b)),
            ..Load::between(first, b)
        };
    }

    /// Takes in the windows of `other`, taken after this one's.
    pub fn join(&mut self, other: Load) {
        if let Some((a, b)) = other.span {
            self.extend(a, b);
        }
    }

    /// Cores other processes kept busy on average.
    pub fn others_cores(&self) -> f64 {
        // A span shorter than a tick still shows a tick of others' work as load.
        self.others.max(0.0) / self.elapsed.max(1.0)
    }

    /// Whether something measured on `threads` threads during the windows
    /// had the cores to itself: other work fits on the cores the measurement
    /// left free, up to [`QUIET_SHARE`] of each measuring thread's core. An
    /// unknown load (nothing read) counts as quiet.
    pub fn quiet_for(&self, threads: usize) -> bool {
        if self.cpus == 0 {
            return true;
        }
        let used = threads.clamp(1, self.cpus);
        let spare = (self.cpus - used) as f64;
        self.others_cores() - spare <= QUIET_SHARE * used as f64
    }

    /// E.g. "other processes kept 1.3 of 2 cores busy".
    pub fn describe(&self) -> String {
        format!(
            "other processes kept {:.1} of {} cores busy",
            self.others_cores(),
            self.cpus
        )
    }
}

/// Runs `f`, adding the window it took to `load`.
pub fn metered<T>(load: &mut Load, f: impl FnOnce() -> T) -> T {
    let before = CpuTimes::now();
    let out = f();
    if let (Some(a), Some(b)) = (before, CpuTimes::now()) {
        load.extend(a, b);
    }
    out
}

/// The heaviest load under which this process measured something it cached.
static MEASURED_UNDER_LOAD: Mutex<Option<Load>> = Mutex::new(None);

/// Notes that measurements taken under `load` were cached.
pub(in crate::runtime) fn note_measured_under_load(load: Load) {
    if let Ok(mut worst) = MEASURED_UNDER_LOAD.lock() {
        if worst.is_none_or(|w| w.others_cores() < load.others_cores()) {
            *worst = Some(load);
        }
    }
}

/// What the command line tells the user when this process measured kernel
/// times or peaks under load: they are cached, and every later plan on this
/// machine follows them.
pub fn measured_under_load_note() -> Option<String> {
    let load = (*MEASURED_UNDER_LOAD.lock().ok()?)?;
    Some(format!(
        "kernel times or peaks measured while {} are cached and plans on this \
         machine follow them; `layoutopt calibrate --clear` on a quiet machine measures again",
        load.describe()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(others_cores: f64, cpus: usize) -> Load {
        Load {
            others: others_cores * 100.0,
            elapsed: 100.0,
            cpus,
            span: None,
        }
    }

    #[test]
    fn quiet_means_others_fit_on_the_cores_left_free() {
        // Two cores, both measuring: a few percent of background work is quiet,
        // another process's build is not.
        assert!(load(0.05, 2).quiet_for(2));
        assert!(load(0.2, 2).quiet_for(2));
        assert!(!load(0.25, 2).quiet_for(2));
        assert!(!load(1.5, 2).quiet_for(2));
        // Eight cores, two measuring: six may be busy elsewhere.
        assert!(load(6.0, 8).quiet_for(2));
        assert!(!load(7.0, 8).quiet_for(2));
        // More threads than cores leave none free.
        assert!(!load(0.5, 2).quiet_for(8));
        // Nothing read: unknown, taken as quiet.
        assert!(Load::default().quiet_for(2));
    }

    #[test]
    fn windows_are_judged_over_their_whole_span() {
        // Two busy CPUs, all this process's, in short windows: the machine's
        // sampled ticks read 2 in the first window and 0 in the second, and
        // the process took a tick in each. Alone, the first window reads as
        // others' work; over the span from its start to the second's end,
        // the ticks agree.
        let at = |busy: u64, own: u64| CpuTimes {
            busy,
            total: busy + 1000,
            cpus: 2,
            own,
        };
        let mut load = Load::default();
        load.extend(at(100, 40), at(102, 41));
        assert!(!load.quiet_for(2), "{load:?}");
        load.extend(at(102, 45), at(102, 46));
        assert_eq!(load.others, -4.0, "{load:?}");
        assert!(load.quiet_for(2));
        // Others' work between the windows counts too.
        load.extend(at(110, 46), at(110, 47));
        assert_eq!(load.others, 3.0, "{load:?}");
    }

    #[test]
    fn others_are_the_machine_less_this_process() {
        let stat = |user: u64, idle: u64, steal: u64| {
            format!(
                "cpu  {user} 0 10 {idle} 0 0 0 {steal} 0 0\n\
                 cpu0 1 0 0 1 0 0 0 0 0 0\ncpu1 1 0 0 1 0 0 0 0 0 0\nintr 5\n"
            )
        };
        // A command name with spaces and parentheses; utime 40, stime 2.
        let own = |utime: u64| format!("12 (a (b) c) R 1 2 3 4 5 6 7 8 9 10 {utime} 2 0 0 20");
        let a = CpuTimes::parse(&stat(100, 1000, 0), &own(40)).unwrap();
        assert_eq!(a.cpus, 2);
        assert_eq!(a.own, 42);
        // 200 ticks of wall time on 2 CPUs: 100 busy (50 ours, 30 user and
        // 20 steal others'), 300 idle.
        let b = CpuTimes::parse(&stat(180, 1300, 20), &own(90)).unwrap();
        let l = Load::between(a, b);
        assert_eq!(l.elapsed, 200.0);
        assert_eq!(l.others, 50.0);
        assert_eq!(l.others_cores(), 0.25);
        assert!(!l.quiet_for(2));
        assert!(l.quiet_for(1));
        assert!(CpuTimes::parse("intr 5\n", &own(1)).is_none());
    }
}
