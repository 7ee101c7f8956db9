//! The fuzz targets' checks in `cargo test`: every committed corpus and regression
//! input (fuzz/corpus, fuzz/regressions) is replayed, and a bounded, seeded mutation
//! fuzzer runs over the bundled models and rule files. Every input must give `Ok` or
//! an error, never a panic. Longer coverage-guided runs: `scripts/fuzz.sh`.

#[path = "../../fuzz/harness.rs"]
mod harness;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

type Target = fn(&[u8]);

const TARGETS: [(&str, Target); 3] = [
    ("onnx_import", harness::onnx),
    ("tflite_import", harness::tflite),
    ("rules_parse", harness::rules),
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.is_file());
    files.sort();
    files
}

/// Runs `target` on `data`; a panic becomes an error naming the input.
fn survives(target: Target, data: &[u8], what: &str) -> Result<(), String> {
    catch_unwind(AssertUnwindSafe(|| target(data))).map_err(|e| {
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        format!("{what} ({} bytes) panicked: {msg}", data.len())
    })
}

#[test]
fn committed_corpus_and_regressions_never_panic() {
    let mut failures = Vec::new();
    let mut replayed = 0;
    for (name, target) in TARGETS {
        for sub in ["corpus", "regressions"] {
            for file in files_in(&root().join("fuzz").join(sub).join(name)) {
                let data = std::fs::read(&file).unwrap();
                replayed += 1;
                if let Err(e) = survives(target, &data, &file.display().to_string()) {
                    failures.push(e);
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(replayed >= 3, "only {replayed} committed inputs were found");
}

/// xorshift64: a fixed seed gives the same mutations on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One random edit of the kinds that break parsers: overwrite bytes, set a byte to an
/// edge value, cut the tail, delete or duplicate a range.
fn mutate(data: &mut Vec<u8>, rng: &mut Rng) {
    let len = data.len();
    match rng.below(5) {
        0 => {
            for _ in 0..=rng.below(8) {
                let at = rng.below(len);
                if let Some(b) = data.get_mut(at) {
                    *b = rng.next() as u8;
                }
            }
        }
        1 => {
            let at = rng.below(len);
            if let Some(b) = data.get_mut(at) {
                *b = [0x00, 0x01, 0x7f, 0x80, 0xff][rng.below(5)];
            }
        }
        2 => data.truncate(rng.below(len)),
        3 => {
            let start = rng.below(len);
            let end = (start + rng.below(64)).min(len);
            data.drain(start..end);
        }
        _ => {
            let start = rng.below(len);
            let end = (start + rng.below(64)).min(len);
            let chunk = data[start..end].to_vec();
            let at = rng.below(len);
            data.splice(at..at, chunk);
        }
    }
}

/// Mutants of every seed file: `per_seed` of them, each one to three edits.
fn fuzz_seeds(target: Target, seeds: &[PathBuf], per_seed: usize, seed: u64) -> usize {
    let mut rng = Rng(seed);
    let mut failures = Vec::new();
    let mut tried = 0;
    for path in seeds {
        let original = std::fs::read(path).unwrap();
        for i in 0..per_seed {
            let mut data = original.clone();
            for _ in 0..=rng.below(3) {
                mutate(&mut data, &mut rng);
            }
            tried += 1;
            let what = format!("mutant {i} of {}", path.display());
            if let Err(e) = survives(target, &data, &what) {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    tried
}

fn bundled(ext: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = files_in(&root().join("models"))
        .into_iter()
        .chain(
            std::fs::read_dir(root().join("models"))
                .unwrap()
                .filter_map(|e| e.ok())
                .flat_map(|e| files_in(&e.path())),
        )
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    out.sort();
    out
}

/// Asserts there are at least three `seeds` (the bundled files of a kind) and
/// that [`fuzz_seeds`] tried `per_seed` mutations of each.
fn fuzz_each_of_three_or_more(target: Target, seeds: &[PathBuf], per_seed: usize, seed: u64) {
    assert!(seeds.len() >= 3, "bundled seeds: {seeds:?}");
    assert_eq!(
        fuzz_seeds(target, seeds, per_seed, seed),
        per_seed * seeds.len()
    );
}

#[test]
fn mutated_onnx_models_never_panic() {
    fuzz_each_of_three_or_more(harness::onnx, &bundled("onnx"), 60, 0x9e37_79b9);
}

#[test]
fn mutated_tflite_models_never_panic() {
    fuzz_each_of_three_or_more(harness::tflite, &bundled("tflite"), 100, 0x51ed_270b);
}

#[test]
fn mutated_rule_files_never_panic() {
    let seeds = files_in(&root().join("rules"));
    fuzz_each_of_three_or_more(harness::rules, &seeds, 300, 0x2545_f491);
}

/// The stable-Rust fallback of `scripts/fuzz.sh` (cargo-fuzz needs nightly):
/// mutates the corpus, regressions and bundled seeds of each target for
/// `LAYOUTOPT_FUZZ_SECONDS` seconds, prints the executions, and saves any input
/// that panics under fuzz/artifacts/<target>/ before failing.
#[test]
#[ignore = "run by scripts/fuzz.sh"]
fn timed_mutation_fuzzing() {
    let secs: u64 = std::env::var("LAYOUTOPT_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let only = std::env::var("LAYOUTOPT_FUZZ_TARGETS").unwrap_or_default();
    // Panics are caught and counted; the default hook would print each one.
    std::panic::set_hook(Box::new(|_| {}));
    let mut crashes = Vec::new();
    for (name, target) in TARGETS {
        if !only.is_empty() && !only.split(',').any(|t| t == name) {
            continue;
        }
        let mut seeds: Vec<PathBuf> = ["corpus", "regressions"]
            .iter()
            .flat_map(|sub| files_in(&root().join("fuzz").join(sub).join(name)))
            .collect();
        seeds.extend(match name {
            "onnx_import" => bundled("onnx"),
            "tflite_import" => bundled("tflite"),
            _ => files_in(&root().join("rules")),
        });
        let seeds: Vec<Vec<u8>> = seeds.iter().filter_map(|p| std::fs::read(p).ok()).collect();
        let mut rng = Rng(0x853c_49e6_748f_ea9b ^ secs);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        let (mut execs, mut found) = (0u64, 0);
        while std::time::Instant::now() < deadline && !seeds.is_empty() {
            let mut data = seeds[rng.below(seeds.len())].clone();
            for _ in 0..=rng.below(4) {
                mutate(&mut data, &mut rng);
            }
            execs += 1;
            if let Err(e) = survives(target, &data, name) {
                let dir = root().join("fuzz/artifacts").join(name);
                let _ = std::fs::create_dir_all(&dir);
                let file = dir.join(format!("crash-{execs}"));
                let _ = std::fs::write(&file, &data);
                crashes.push(format!("{e} (saved as {})", file.display()));
                found += 1;
            }
        }
        println!("{name}: {execs} executions in {secs} s, {found} crashes");
    }
    let _ = std::panic::take_hook();
    assert!(crashes.is_empty(), "{}", crashes.join("\n"));
}
