//! Progress display on stderr for steps that can take more than a second.
//! Nothing is drawn when stderr is not a terminal (pipes, logs, tests).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

fn target() -> ProgressDrawTarget {
    if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    }
}

/// Runs `f` under a spinner labelled `msg`, cleared when it finishes.
pub fn step<T>(msg: &str, f: impl FnOnce() -> T) -> T {
    let pb = ProgressBar::with_draw_target(None, target());
    pb.set_style(
        ProgressStyle::with_template("{spinner} {msg} ({elapsed})").expect("a valid template"),
    );
    pb.set_message(msg.to_string());
    pb.enable_steady_tick(Duration::from_millis(100));
    let out = f();
    pb.finish_and_clear();
    out
}

/// A bar over `len` items (planners, benchmark iterations), labelled `msg`.
pub fn bar(len: u64, msg: &str) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(Some(len), target());
    pb.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({elapsed})")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    pb.set_message(msg.to_string());
    pb
}
