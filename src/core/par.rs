//! The fork-join pool the compiled model's kernels run their parallel loops on,
//! made for many short loops back to back (a model's steps): the thread that
//! installed the pool runs its steps itself and takes part in every loop as
//! one of the workers; the other workers spin for a short while after a loop
//! before they park, so that the next step's loop finds them awake. Each
//! thread first runs its own contiguous share of a loop's tasks, the same
//! share of every loop, and then takes tasks left in the others' shares; a
//! loop allocates nothing.
//!
//! Kernels ask only [`threads`] and [`for_each`] (and its chunked forms). The
//! caller may cap the threads the loops of a piece of work take part on
//! ([`with_threads`]): a step too small to pay for waking more threads runs
//! on fewer, or inline, while the rest keep waiting. A loop runs inline, on the calling thread, when no pool is installed on it,
//! inside another loop (a worker's task, or a task the caller runs), and when
//! another thread is running a loop on the same pool (a model run from two
//! threads at once): it is never queued behind another caller's loop.

use std::any::Any;
use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a worker spins for the next loop before it parks: longer than the
/// serial work between two steps of a run, short enough that an idle model
/// gives its cores back at once.
const SPIN: Duration = Duration::from_micros(50);

/// Spins between two reads of the clock while spinning.
const SPINS_PER_CLOCK_READ: u32 = 64;

/// Spins of a caller waiting for the workers' last tasks before it yields its
/// core (a worker may have been preempted in the middle of a task).
const SPINS_BEFORE_YIELD: u32 = 1 << 12;

/// Worker threads and the loop they share.
pub struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

/// The state of the current loop, shared by the caller and the workers.
struct Shared {
    threads: usize,
    /// The current loop's generation, published once its shares are written.
    generation: AtomicU32,
    /// Each thread's share of the current loop's tasks: thread `k` of
    /// `active` owns tasks `k * tasks / active .. (k + 1) * tasks / active`.
    /// Kernels number tasks in the order of the memory they write, so a
    /// thread runs the same part of every step's tensor and reads most of a
    /// step's input from its own core's cache, where its share of the step
    /// before was written. (Claimed from one counter, tasks went to threads
    /// at random: a global pool over a tensor the previous step had just
    /// written took 1.7x its one-thread time on two threads.)
    shares: Box<[Share]>,
    /// The current loop's task count and body (a trampoline and its closure),
    /// written before its generation is published and read only by a
    /// participant holding a claimed task (the loop is then still running).
    tasks: AtomicUsize,
    call: AtomicUsize,
    body: AtomicUsize,
    /// Tasks of the current loop not finished yet.
    pending: AtomicUsize,
    /// Threads that take part in the current loop: the caller and workers
    /// `1..active` (written with the loop's body).
    active: AtomicUsize,
    /// Set while a caller runs a loop on the pool.
    busy: AtomicBool,
    /// With one thread per CPU the process may use, those CPUs (else empty):
    /// each worker is pinned to one the caller is not on. Unpinned, a virtual
    /// machine's scheduler often left a worker on the caller's CPU while the
    /// other idled, for the pool's whole life (ResNet-18 ran at 12-13 or
    /// 19-21 ms per process). With fewer threads than CPUs which to take is
    /// not known (two may be one core's hyperthreads), so none is pinned.
    /// The caller is pinned to its CPU while the pool is installed on it:
    /// otherwise the scheduler moved it onto the worker's CPU mid-run, where
    /// the two took turns until the next run (sampled with `ps`, the caller
    /// and the worker of a 2-thread ResNet50 shared one CPU in 5 of 12
    /// samples, the other CPU idle).
    cpus: Vec<usize>,
    /// The CPU the caller last installed the pool on (`usize::MAX`: unknown).
    caller_cpu: AtomicUsize,
    /// The first panic of a task of the current loop.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    /// Workers parked on `wake`.
    sleepers: AtomicUsize,
    park: Mutex<()>,
    wake: Condvar,
    stop: AtomicBool,
}

/// One thread's share of a loop, on a cache line of its own: the loop's
/// generation (high 32 bits) and the share's tasks not yet claimed (low 32
/// bits), taken from the front. A task is claimed by a compare-exchange that
/// keeps the generation, so a thread late for one loop never claims a task of
/// the next.
#[derive(Default)]
#[repr(align(128))]
struct Share {
    claims: AtomicU64,
}

impl Share {
    /// The tasks of thread `k`'s share of a loop of `tasks` on `active` threads.
    fn bounds(k: usize, tasks: usize, active: usize) -> std::ops::Range<usize> {
        k * tasks / active..(k + 1) * tasks / active
    }
}

thread_local! {
    /// The pool installed on this thread, null if none.
    static CURRENT: Cell<*const Shared> = const { Cell::new(std::ptr::null()) };
    /// The most threads a loop started on this thread takes part on
    /// (`usize::MAX`: all of the pool's).
    static CAP: Cell<usize> = const { Cell::new(usize::MAX) };
}

impl Pool {
    /// A pool of `threads` threads in all: the caller and `threads - 1` workers.
    pub fn new(threads: usize) -> std::io::Result<Pool> {
        let threads = threads.max(1);
        let shared = Arc::new(Shared {
            threads,
            generation: AtomicU32::new(0),
            shares: (0..threads).map(|_| Share::default()).collect(),
            tasks: AtomicUsize::new(0),
            call: AtomicUsize::new(0),
            body: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            active: AtomicUsize::new(threads),
            busy: AtomicBool::new(false),
            cpus: Some(affinity::allowed_cpus())
                .filter(|cpus| threads > 1 && cpus.len() == threads)
                .unwrap_or_default(),
            caller_cpu: AtomicUsize::new(usize::MAX),
            panic: Mutex::new(None),
            sleepers: AtomicUsize::new(0),
            park: Mutex::new(()),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let mut pool = Pool {
            shared,
            workers: Vec::with_capacity(threads - 1),
        };
        for k in 1..threads {
            let shared = Arc::clone(&pool.shared);
            // On an error the workers started so far are stopped by `drop`.
            pool.workers.push(
                std::thread::Builder::new()
                    .name(format!("layoutopt-worker-{k}"))
                    .spawn(move || shared.work(k))?,
            );
        }
        Ok(pool)
    }

    /// Threads the pool's loops run on, the caller's included.
    pub fn threads(&self) -> usize {
        self.shared.threads
    }

    /// Runs `f` on the calling thread with the pool installed: the parallel
    /// loops `f` starts run on the pool.
    pub fn install<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Restore(*const Shared);
        impl Drop for Restore {
            fn drop(&mut self) {
                CURRENT.with(|c| c.set(self.0));
            }
        }
        let outer = CURRENT.with(|c| c.replace(Arc::as_ptr(&self.shared)));
        let _restore = Restore(outer);
        let mut _pinned = None;
        if outer.is_null() && !self.shared.cpus.is_empty() {
            // Workers move off the CPU the caller runs on (`Shared::cpus`).
            if let Some(cpu) = affinity::current_cpu() {
                self.shared.caller_cpu.store(cpu, Ordering::Relaxed);
                _pinned = affinity::Pinned::to(cpu);
            }
        }
        f()
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.notify();
        for w in self.workers.drain(..) {
            // A worker catches its tasks' panics, so it ends by returning.
            let _ = w.join();
        }
    }
}

/// Threads a loop started here runs on: the installed pool's (at most the
/// cap of [`with_threads`]), else 1.
pub fn threads() -> usize {
    // SAFETY: an installed pool outlives its `install` call, which resets
    // `CURRENT` when it returns.
    current().map_or(1, |s| s.threads.min(CAP.with(Cell::get)).max(1))
}

/// Runs `f` with the loops it starts on this thread taking part on at most
/// `threads` threads (at least one: the caller).
pub fn with_threads<R>(threads: usize, f: impl FnOnce() -> R) -> R {
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            CAP.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(CAP.with(|c| c.replace(threads.max(1))));
    f()
}

fn current() -> Option<&'static Shared> {
    let at = CURRENT.with(Cell::get);
    // SAFETY: see `threads`; the reference does not leave the caller's frame.
    unsafe { at.as_ref() }
}

/// Runs `f(t)` for every task `t` in `0..tasks`, on the installed pool's
/// threads (inline when there is none, the pool is busy, or inside a loop),
/// and returns when all have finished. A panic of a task is raised here once
/// every task has finished.
pub fn for_each<F: Fn(usize) + Sync>(tasks: usize, f: F) {
    let active = threads();
    if tasks > 1 && active > 1 && u32::try_from(tasks).is_ok() {
        if let Some(shared) = current().filter(|s| s.claim_pool()) {
            return shared.run(tasks, active, &f);
        }
    }
    (0..tasks).for_each(f)
}

/// Runs `f(i)` for every item `i` in `0..items`, in parallel as [`for_each`]
/// does, `per_task` consecutive items per task (fewer in the last).
pub fn for_each_grouped(items: usize, per_task: usize, f: impl Fn(usize) + Sync) {
    let per_task = per_task.max(1);
    for_each(items.div_ceil(per_task), |t| {
        (t * per_task..((t + 1) * per_task).min(items)).for_each(&f)
    })
}

/// Runs `f(i, piece)` for the pieces of `chunk` elements of `data` (the last
/// one shorter), piece `i` starting at element `i * chunk`, in parallel as
/// [`for_each`] does.
pub fn for_each_chunk_mut<T: Send>(
    data: &mut [T],
    chunk: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let (chunk, len) = (chunk.max(1), data.len());
    let at = data.as_mut_ptr() as usize;
    for_each(len.div_ceil(chunk), |i| {
        let start = i * chunk;
        // SAFETY: the pieces are disjoint and inside `data`, which the loop
        // borrows mutably until every task has finished.
        let piece = unsafe {
            std::slice::from_raw_parts_mut((at as *mut T).add(start), chunk.min(len - start))
        };
        f(i, piece)
    })
}

/// Calls the closure at `body` (an `F`) on task `t`.
///
/// # Safety
/// `body` points to a live `F`.
unsafe fn call<F: Fn(usize) + Sync>(body: usize, t: usize) {
    (*(body as *const F))(t)
}

type Call = unsafe fn(usize, usize);

impl Shared {
    /// Takes the pool for one loop of the calling thread; false if another
    /// loop holds it.
    fn claim_pool(&self) -> bool {
        self.busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Runs a loop of `tasks` tasks on `active` threads, the pool taken by
    /// `claim_pool`.
    fn run<F: Fn(usize) + Sync>(&self, tasks: usize, active: usize, f: &F) {
        struct Free<'a>(&'a AtomicBool);
        impl Drop for Free<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        let _free = Free(&self.busy);
        self.tasks.store(tasks, Ordering::Relaxed);
        self.call
            .store(call::<F> as Call as usize, Ordering::Relaxed);
        self.body.store(f as *const F as usize, Ordering::Relaxed);
        self.pending.store(tasks, Ordering::Relaxed);
        self.active.store(active, Ordering::Relaxed);
        let generation = self.generation.load(Ordering::Relaxed).wrapping_add(1);
        for (k, share) in self.shares.iter().enumerate() {
            let owned = if k < active {
                Share::bounds(k, tasks, active).len()
            } else {
                0
            };
            share.claims.store(
                (u64::from(generation) << 32) | owned as u64,
                Ordering::Release,
            );
        }
        // SeqCst with `sleepers`: a worker about to park either sees the new
        // generation or is counted, and then woken.
        self.generation.store(generation, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            self.notify();
        }
        self.run_tasks(generation, 0);
        // The body lives in this frame: wait for the tasks others claimed.
        let mut spins = 0;
        while self.pending.load(Ordering::Acquire) != 0 {
            if spins < SPINS_BEFORE_YIELD {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        let panic = self
            .panic
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(payload) = panic {
            resume_unwind(payload);
        }
    }

    /// Claims and runs tasks of loop `generation` until none is left: those
    /// of thread `own`'s share first, then those left in the others'.
    fn run_tasks(&self, generation: u32, own: usize) {
        let mut ran = 0;
        for k in (own..self.threads).chain(0..own) {
            let claims = &self.shares[k].claims;
            let mut seen = claims.load(Ordering::Acquire);
            loop {
                let left = seen as u32 as usize;
                if (seen >> 32) as u32 != generation || left == 0 {
                    break;
                }
                if let Err(now) = claims.compare_exchange_weak(
                    seen,
                    seen - 1,
                    Ordering::Acquire,
                    Ordering::Acquire,
                ) {
                    seen = now;
                    continue;
                }
                // The loop cannot finish while this task is unfinished, so its
                // fields stay those of `generation`.
                let tasks = self.tasks.load(Ordering::Relaxed);
                let active = self.active.load(Ordering::Relaxed);
                let body = self.body.load(Ordering::Relaxed);
                // SAFETY: `call` was stored from a `Call` for this body.
                let call: Call = unsafe { std::mem::transmute(self.call.load(Ordering::Relaxed)) };
                let task = Share::bounds(k, tasks, active).end - left;
                // SAFETY: the caller waits in `run` until every task has finished.
                if let Err(payload) = catch_unwind(AssertUnwindSafe(|| unsafe { call(body, task) }))
                {
                    let mut first = self.panic.lock().unwrap_or_else(PoisonError::into_inner);
                    first.get_or_insert(payload);
                }
                ran += 1;
                seen = claims.load(Ordering::Acquire);
            }
        }
        if ran > 0 {
            self.pending.fetch_sub(ran, Ordering::Release);
        }
    }

    /// A worker's life: wait for a loop, take part in it, until the pool drops.
    fn work(&self, k: usize) {
        let (mut seen, mut avoided) = (0, usize::MAX);
        while let Some(generation) = self.next_loop(seen) {
            seen = generation;
            // The generation's SeqCst load in `next_loop` orders this read
            // after the loop's `active` was written.
            if k >= self.active.load(Ordering::Relaxed) {
                continue;
            }
            let caller = self.caller_cpu.load(Ordering::Relaxed);
            if !self.cpus.is_empty() && caller != avoided {
                // Worker k takes the k-th CPU of those the caller is not on.
                avoided = caller;
                let mut free = self.cpus.iter().filter(|&&c| c != caller);
                if let Some(&cpu) = free.nth(k - 1) {
                    affinity::pin_current_thread(cpu);
                }
            }
            self.run_tasks(generation, k);
        }
    }

    /// The generation of the first loop after `seen`, spinning for `SPIN`,
    /// then parked; `None` once the pool is dropping.
    fn next_loop(&self, seen: u32) -> Option<u32> {
        let generation = || self.generation.load(Ordering::SeqCst);
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if generation() != seen {
                return Some(generation());
            }
            if self.stop.load(Ordering::Relaxed) {
                return None;
            }
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(SPINS_PER_CLOCK_READ) && start.elapsed() > SPIN {
                break;
            }
        }
        let mut parked = self.park.lock().unwrap_or_else(PoisonError::into_inner);
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        let next = loop {
            if generation() != seen {
                break Some(generation());
            }
            if self.stop.load(Ordering::SeqCst) {
                break None;
            }
            parked = self
                .wake
                .wait(parked)
                .unwrap_or_else(PoisonError::into_inner);
        };
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
        next
    }

    /// Wakes the parked workers.
    fn notify(&self) {
        let _parked = self.park.lock().unwrap_or_else(PoisonError::into_inner);
        self.wake.notify_all();
    }
}

/// Pinning threads to CPUs (Linux; elsewhere threads stay unpinned).
mod affinity {
    /// The CPUs this process may run on, in increasing order (empty where the
    /// system does not say).
    pub fn allowed_cpus() -> Vec<usize> {
        #[cfg(target_os = "linux")]
        // SAFETY: the set is plain data that sched_getaffinity fills in and
        // CPU_ISSET reads.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
                return (0..libc::CPU_SETSIZE as usize)
                    .filter(|&c| libc::CPU_ISSET(c, &set))
                    .collect();
            }
        }
        vec![]
    }

    /// The CPU the calling thread runs on.
    pub fn current_cpu() -> Option<usize> {
        #[cfg(target_os = "linux")]
        // SAFETY: sched_getcpu only reads the calling thread's state.
        return usize::try_from(unsafe { libc::sched_getcpu() }).ok();
        #[cfg(not(target_os = "linux"))]
        None
    }

    /// Pins the calling thread to `cpu` (best effort: where the system
    /// refuses, the thread runs wherever the scheduler puts it).
    pub fn pin_current_thread(cpu: usize) {
        #[cfg(target_os = "linux")]
        // SAFETY: the set is plain data; the call changes only this thread.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
        #[cfg(not(target_os = "linux"))]
        let _ = cpu;
    }

    /// The calling thread pinned to one CPU until this is dropped, when it
    /// gets back the CPUs it had (the caller's thread belongs to the caller).
    pub struct Pinned {
        #[cfg(target_os = "linux")]
        before: libc::cpu_set_t,
    }

    impl Pinned {
        /// Pins the calling thread to `cpu`; `None` (nothing changed) where
        /// its CPUs cannot be read.
        pub fn to(cpu: usize) -> Option<Pinned> {
            #[cfg(target_os = "linux")]
            // SAFETY: the set is plain data that sched_getaffinity fills in.
            unsafe {
                let mut before: libc::cpu_set_t = std::mem::zeroed();
                let len = std::mem::size_of::<libc::cpu_set_t>();
                if libc::sched_getaffinity(0, len, &mut before) != 0 {
                    return None;
                }
                pin_current_thread(cpu);
                Some(Pinned { before })
            }
            #[cfg(not(target_os = "linux"))]
            {
                let _ = cpu;
                None
            }
        }
    }

    impl Drop for Pinned {
        fn drop(&mut self) {
            #[cfg(target_os = "linux")]
            // SAFETY: the set was filled in by sched_getaffinity.
            unsafe {
                let len = std::mem::size_of::<libc::cpu_set_t>();
                libc::sched_setaffinity(0, len, &self.before);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Every task of `tasks` ran exactly once.
    fn each_once(tasks: usize) -> bool {
        let counts: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
        for_each(tasks, |t| {
            counts[t].fetch_add(1, Ordering::Relaxed);
        });
        counts.iter().all(|c| c.load(Ordering::Relaxed) == 1)
    }

    #[test]
    fn every_task_runs_once_on_pools_of_one_to_four_threads() {
        for threads in 1..=4 {
            let pool = Pool::new(threads).unwrap();
            assert_eq!(pool.threads(), threads);
            pool.install(|| {
                assert_eq!(super::threads(), threads);
                for tasks in [0, 1, 2, 3, 7, 64, 1000] {
                    // Back to back, as a model's steps are.
                    for _ in 0..20 {
                        assert!(each_once(tasks), "{threads} threads, {tasks} tasks");
                    }
                }
            });
        }
        assert_eq!(threads(), 1, "no pool is installed after `install`");
    }

    #[test]
    fn loops_run_inline_without_a_pool() {
        let caller = std::thread::current().id();
        for_each(8, |_| assert_eq!(std::thread::current().id(), caller));
    }

    #[test]
    fn a_capped_loop_takes_part_on_at_most_its_cap_of_threads() {
        let pool = Pool::new(4).unwrap();
        pool.install(|| {
            for cap in [1, 2, 3] {
                with_threads(cap, || {
                    assert_eq!(threads(), cap);
                    let seen = Mutex::new(std::collections::HashSet::new());
                    for_each(256, |_| {
                        seen.lock().unwrap().insert(std::thread::current().id());
                        std::thread::sleep(Duration::from_micros(20));
                    });
                    let seen = seen.lock().unwrap().len();
                    assert!((1..=cap).contains(&seen), "cap {cap}: {seen} threads");
                });
                assert_eq!(threads(), 4, "the cap ends with `with_threads`");
                assert!(each_once(1000), "uncapped after a cap of {cap}");
            }
        });
    }

    #[test]
    fn a_loop_uses_the_workers() {
        let pool = Pool::new(2).unwrap();
        let caller = std::thread::current().id();
        // Tasks that wait for another thread to run one finish only if a
        // worker takes part; the flag makes the test end either way.
        let elsewhere = AtomicBool::new(false);
        pool.install(|| {
            for_each(2, |_| {
                if std::thread::current().id() != caller {
                    elsewhere.store(true, Ordering::Relaxed);
                }
                let start = Instant::now();
                while !elsewhere.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(5)
                {
                    std::hint::spin_loop();
                }
            })
        });
        assert!(elsewhere.load(Ordering::Relaxed));
    }

    #[test]
    fn the_caller_runs_the_first_share_and_a_worker_the_second() {
        let pool = Pool::new(2).unwrap();
        let caller = std::thread::current().id();
        pool.install(|| {
            for _ in 0..10 {
                // Each task waits (at most 5 s) for the other to start, so
                // neither thread can take the other's share.
                let started = AtomicUsize::new(0);
                let on_caller: Vec<AtomicBool> = (0..2).map(|_| AtomicBool::new(false)).collect();
                for_each(2, |t| {
                    on_caller[t].store(std::thread::current().id() == caller, Ordering::Relaxed);
                    started.fetch_add(1, Ordering::AcqRel);
                    let start = Instant::now();
                    while started.load(Ordering::Acquire) < 2
                        && start.elapsed() < Duration::from_secs(5)
                    {
                        std::hint::spin_loop();
                    }
                });
                assert!(on_caller[0].load(Ordering::Relaxed), "task 0 on the caller");
                assert!(
                    !on_caller[1].load(Ordering::Relaxed),
                    "task 1 on the worker"
                );
            }
        });
    }

    #[test]
    fn nested_loops_run_inline() {
        let pool = Pool::new(3).unwrap();
        let total = AtomicUsize::new(0);
        pool.install(|| {
            for_each(6, |_| {
                let here = std::thread::current().id();
                for_each(5, |_| {
                    assert_eq!(std::thread::current().id(), here);
                    total.fetch_add(1, Ordering::Relaxed);
                })
            })
        });
        assert_eq!(total.load(Ordering::Relaxed), 30);
    }

    #[test]
    fn a_panicking_task_reaches_the_caller_and_the_pool_still_works() {
        let pool = Pool::new(2).unwrap();
        for _ in 0..10 {
            let caught = catch_unwind(AssertUnwindSafe(|| {
                pool.install(|| {
                    for_each(16, |t| {
                        if t == 5 {
                            panic!("task five");
                        }
                    })
                })
            }));
            let payload = caught.expect_err("the panic propagates");
            assert_eq!(payload.downcast_ref::<&str>(), Some(&"task five"));
            assert_eq!(threads(), 1, "the panic uninstalled the pool");
            pool.install(|| assert!(each_once(100)));
        }
    }

    #[test]
    fn callers_on_several_threads_share_one_pool() {
        let pool = Pool::new(2).unwrap();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    pool.install(|| {
                        for tasks in 1..200 {
                            assert!(each_once(tasks));
                        }
                    })
                });
            }
        });
    }

    #[test]
    fn chunks_cover_the_slice() {
        let pool = Pool::new(2).unwrap();
        let mut data = vec![0usize; 1001];
        pool.install(|| {
            for_each_chunk_mut(&mut data, 100, |i, piece| {
                assert!(piece.len() == 100 || (i == 10 && piece.len() == 1));
                piece.iter_mut().for_each(|x| *x += i + 1);
            })
        });
        assert!(data.iter().enumerate().all(|(k, &x)| x == k / 100 + 1));
    }

    #[test]
    fn dropping_the_pool_stops_parked_and_spinning_workers() {
        for wait in [Duration::ZERO, SPIN * 5] {
            let pool = Pool::new(4).unwrap();
            pool.install(|| assert!(each_once(50)));
            std::thread::sleep(wait);
            drop(pool);
        }
    }
}
