//! Child processes and scratch folders: a child's wall time and peak memory,
//! this process's own peak, and a fresh folder per test.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// What one run of the `layoutopt` binary gave.
pub struct CliOut {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the `layoutopt` binary with `args` (with backtraces on) and asserts
/// that it exited on its own and did not panic.
pub fn layoutopt(args: &[&str]) -> CliOut {
    let o = Command::new(env!("CARGO_BIN_EXE_layoutopt"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("the binary runs");
    let out = CliOut {
        code: o.status.code().expect("exited normally"),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    };
    assert!(
        !out.stderr.contains("panicked"),
        "{args:?} panicked: {}",
        out.stderr
    );
    out
}

/// Runs [`layoutopt`], asserts that it succeeded, and gives its stdout.
pub fn layoutopt_ok(args: &[&str]) -> String {
    let out = layoutopt(args);
    assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
    out.stdout
}

/// Runs [`layoutopt`] as [`layoutopt_ok`] does and parses its stdout as JSON.
pub fn layoutopt_json(args: &[&str]) -> serde_json::Value {
    let stdout = layoutopt_ok(args);
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {stdout}"))
}

/// A scratch folder under the target dir, fresh for each test name.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// A command that runs test `name` (its path in this binary, `module::test`)
/// alone in a child copy of this test binary, its output not captured.
pub fn test_in_child(name: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("the test binary's path"));
    command.args([name, "--exact", "--nocapture", "--test-threads=1"]);
    command
}

/// This process's peak RSS in kB (`VmHWM`), 0 where /proc does not tell.
pub fn own_peak_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// What a child reports: its wall time, its peak RSS, its stdout and stderr.
pub struct Child {
    pub ok: bool,
    pub seconds: f64,
    pub peak_kb: u64,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `command` to its end and measures it (`wait4` gives the child's own
/// peak RSS, whatever else this process runs).
// The child is reaped by `wait4`, which std's `Child::wait` cannot report on.
#[allow(clippy::zombie_processes)]
pub fn measure(mut command: Command) -> Child {
    // One child at a time: a child spawned while another runs was seen to
    // report the other's peak.
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let start = Instant::now();
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the child starts");
    let (mut stdout, mut stderr) = (String::new(), String::new());
    let mut err_pipe = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let _ = child
        .stdout
        .take()
        .expect("piped")
        .read_to_string(&mut stdout);
    stderr.push_str(&reader.join().expect("the reader ends"));
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value to be written over.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our child, not yet waited for (std's `Child` is never
    // waited on here); `status` and `usage` are valid for writes.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid, "wait4 on the child");

    Child {
        ok: libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        seconds: start.elapsed().as_secs_f64(),
        peak_kb: usage.ru_maxrss as u64,
        stdout,
        stderr,
    }
}
