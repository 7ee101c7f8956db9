//! The memory budget: one limit in bytes that every stage asks before it
//! allocates what a model's file decides (reading the file, its constants,
//! folded values, the planned graph, the compiled model's arena and values, a
//! run's inputs).
//!
//! The limit is, in order: the value given to [`set_limit`] (the command line's
//! `--memory-limit`), the `LAYOUTOPT_MEMORY_LIMIT` environment variable (bytes,
//! or with a K/M/G/T suffix in powers of 1024), else half the memory the
//! machine has available (`MemAvailable` in /proc/meminfo, or `MemTotal` where
//! that is missing), else no limit. A stage checks its bytes with [`check`]
//! (or [`fits`]) and refuses with an error that names what needed them; constant
//! folding materializes at most [`fold_limit`] bytes per value.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The environment variable that sets the memory limit.
pub const MEMORY_LIMIT_ENV: &str = "LAYOUTOPT_MEMORY_LIMIT";

/// The most bytes one folded constant may take: a bigger fold stays an op of
/// the graph, computed when the model runs.
pub const FOLD_MAX_BYTES: u64 = 64 << 20;

/// The limit set by [`set_limit`]; 0 when none was.
static SET: AtomicU64 = AtomicU64::new(0);

/// Sets the limit for the rest of the process (the command line's
/// `--memory-limit`); it takes precedence over the environment variable.
pub fn set_limit(bytes: u64) {
    SET.store(bytes.max(1), Ordering::Relaxed);
}

/// The memory limit in bytes (see the module documentation).
pub fn limit() -> u64 {
    match SET.load(Ordering::Relaxed) {
        0 => env_or_default(),
        set => set,
    }
}

/// The limit from the environment, else the machine's default; read once.
fn env_or_default() -> u64 {
    static LIMIT: OnceLock<u64> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        std::env::var(MEMORY_LIMIT_ENV)
            .ok()
            .and_then(|v| parse_bytes(&v))
            .unwrap_or_else(default_limit)
    })
}

/// Half the memory available to this process's machine (or of its total
/// memory when the kernel does not say what is available); no limit where
/// /proc/meminfo cannot be read. Half leaves room for what no stage counts
/// (the program, the parsed protobuf, the allocator's slack).
pub fn default_limit() -> u64 {
    meminfo("MemAvailable:")
        .or_else(|| meminfo("MemTotal:"))
        .map_or(u64::MAX, |m| m / 2)
}

/// The most bytes constant folding materializes for one value: the smaller
/// of [`FOLD_MAX_BYTES`] and an eighth of the limit.
pub fn fold_limit() -> u64 {
    FOLD_MAX_BYTES.min(limit() / 8)
}

/// Whether `bytes` fit the limit.
pub fn fits(bytes: u64) -> bool {
    bytes <= limit()
}

/// Something that needs more bytes than the memory limit allows.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} would need {}, more than the memory limit of {} \
     (set --memory-limit or {MEMORY_LIMIT_ENV} to change it)",
    format_bytes(*bytes),
    format_bytes(*limit)
)]
pub struct BudgetError {
    /// What needs the bytes (a layer, a value, a file).
    pub what: String,
    /// How many it needs.
    pub bytes: u64,
    /// The limit it exceeds.
    pub limit: u64,
}

/// Refuses `bytes` above the limit: "`what` would need 123 bytes (…), more
/// than the memory limit of …". `what` names the thing that needs them (a
/// layer, a value, a file).
pub fn check(what: &str, bytes: u64) -> Result<(), BudgetError> {
    check_against(what, bytes, limit())
}

/// [`check`] against a given limit.
pub fn check_against(what: &str, bytes: u64, limit: u64) -> Result<(), BudgetError> {
    if bytes <= limit {
        return Ok(());
    }
    Err(BudgetError {
        what: what.to_string(),
        bytes,
        limit,
    })
}

/// Parses a byte count: digits with an optional K, M, G or T suffix (powers of
/// 1024, an optional trailing B or iB: `512M`, `2GiB`).
pub fn parse_bytes(text: &str) -> Option<u64> {
    let t = text.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (digits, shift) = match t.char_indices().last()? {
        (i, 'k' | 'K') => (&t[..i], 10),
        (i, 'm' | 'M') => (&t[..i], 20),
        (i, 'g' | 'G') => (&t[..i], 30),
        (i, 't' | 'T') => (&t[..i], 40),
        _ => (t, 0),
    };
    digits.trim().parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// A line of /proc/meminfo in bytes (`None` where it cannot be read).
fn meminfo(key: &str) -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with(key))?;
    // "MemTotal:       24567890 kB"
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Total memory of the machine, from /proc/meminfo (`None` where it cannot be read).
pub fn machine_memory() -> Option<u64> {
    meminfo("MemTotal:")
}

/// "1234567 bytes (1.2 MiB)": exact for the user, readable at a glance.
pub fn format_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} bytes")
    } else {
        format!("{n} bytes ({v:.1} {})", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_parse_with_binary_suffixes() {
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_bytes("3K"), Some(3 * 1024));
        assert_eq!(parse_bytes(" 2g "), Some(2 << 30));
        assert_eq!(parse_bytes("512MB"), Some(512 << 20));
        assert_eq!(parse_bytes("2GiB"), Some(2 << 30));
        assert_eq!(parse_bytes("4096B"), Some(4096));
        assert_eq!(parse_bytes("1T"), Some(1 << 40));
        assert_eq!(parse_bytes("x"), None);
        assert_eq!(parse_bytes("B"), None);
        assert_eq!(parse_bytes(""), None);
        assert_eq!(parse_bytes("99999999999T"), None);
    }

    #[test]
    fn the_default_is_half_of_what_the_machine_has() {
        // This crate targets Linux; /proc/meminfo always has MemTotal there.
        let total = machine_memory().expect("MemTotal is readable");
        assert!(total > 64 << 20, "{total} bytes is implausibly small");
        let d = default_limit();
        assert!(d > 0 && d <= total / 2, "{d} of {total}");
    }

    #[test]
    fn a_refusal_names_the_thing_and_both_sizes() {
        assert!(check_against("x", 8, 8).is_ok());
        let e = check_against("layer 'pad'", 3 << 30, 1 << 30)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("layer 'pad' would need 3221225472 bytes (3.0 GiB)")
                && e.contains("1073741824 bytes (1.0 GiB)")
                && e.contains("--memory-limit"),
            "{e}"
        );
    }
}
