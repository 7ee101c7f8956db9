//! The fuzz targets' checks in `cargo test`: every committed corpus and regression
//! input (fuzz/corpus, fuzz/regressions) is replayed, and a bounded, seeded mutation
//! fuzzer runs over the bundled models and rule files. Every input must give `Ok` or
//! an error, never a panic. Longer coverage-guided runs: `scripts/fuzz.sh`.

#[path = "../fuzz/harness.rs"]
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

#[test]
fn mutated_onnx_models_never_panic() {
    let seeds = bundled("onnx");
    assert!(seeds.len() >= 3, "bundled ONNX models: {seeds:?}");
    assert_eq!(
        fuzz_seeds(harness::onnx, &seeds, 60, 0x9e37_79b9),
        60 * seeds.len()
    );
}

#[test]
fn mutated_tflite_models_never_panic() {
    let seeds = bundled("tflite");
    assert!(seeds.len() >= 3, "bundled TFLite models: {seeds:?}");
    assert_eq!(
        fuzz_seeds(harness::tflite, &seeds, 100, 0x51ed_270b),
        100 * seeds.len()
    );
}

#[test]
fn mutated_rule_files_never_panic() {
    let seeds = files_in(&root().join("rules"));
    assert!(seeds.len() >= 4, "bundled rule files: {seeds:?}");
    assert_eq!(
        fuzz_seeds(harness::rules, &seeds, 300, 0x2545_f491),
        300 * seeds.len()
    );
}
