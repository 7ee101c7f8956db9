//! The crate's modules form layers, and a module may use only its own layer and
//! the ones below it (ARCHITECTURE.md draws them). This test reads every source
//! file and fails on any `crate::` path that reaches upwards, so the direction
//! cannot erode silently.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Each top-level module of `src/` and its layer, bottom first.
const LAYERS: &[(&str, u32)] = &[
    ("core", 0),
    ("tir", 1),
    ("ops", 2),
    ("graph", 3),
    ("reference", 4),
    ("layout", 5),
    ("lowering", 5),
    ("fusion", 5),
    ("codegen", 6),
    ("runtime", 7),
    ("frontend", 8),
    ("export", 8),
    ("explorer", 8),
    ("api", 8),
    ("cli", 9),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module names that follow `crate::` in `text`.
fn crate_paths(text: &str) -> Vec<&str> {
    text.match_indices("crate::")
        .filter(|(i, _)| {
            // Not part of a longer identifier such as `layoutopt_crate::`.
            text[..*i]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
        })
        .map(|(i, m)| {
            let rest = &text[i + m.len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

#[test]
fn no_module_uses_a_higher_layer() {
    let layer: BTreeMap<&str, u32> = LAYERS.iter().copied().collect();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![];
    rust_files(&src, &mut files);
    let mut checked = 0;
    let mut violations = vec![];
    for file in &files {
        let rel = file.strip_prefix(&src).expect("under src");
        let top = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|s| s.trim_end_matches(".rs"))
            .expect("a file name");
        let Some(&own) = layer.get(top) else {
            // lib.rs and main.rs tie the layers together.
            assert!(
                ["lib", "main"].contains(&top),
                "{} is in no layer: add its module to LAYERS",
                rel.display()
            );
            continue;
        };
        checked += 1;
        let text = std::fs::read_to_string(file).expect("a readable source file");
        // Comments may name higher layers (to point a reader upwards); code may not.
        let code: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for used in crate_paths(&code) {
            if let Some(&theirs) = layer.get(used) {
                if theirs > own {
                    violations.push(format!(
                        "{} (layer {own}) uses crate::{used} (layer {theirs})",
                        rel.display()
                    ));
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} files were checked");
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

#[test]
fn the_path_scanner_sees_uses() {
    let text = "use crate::ops::Op;\nlet x = crate::graph::Graph::new(); my_crate::tir";
    assert_eq!(crate_paths(text), vec!["ops", "graph"]);
}

/// The `super::` modules a file of a flat module folder uses, outside comments
/// and its test module.
fn sibling_uses(text: &str, siblings: &[String]) -> Vec<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    let mut uses = vec![];
    for line in code.lines() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        for (i, m) in line.match_indices("super::") {
            let rest = &line[i + m.len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            let name = &rest[..end];
            if siblings.iter().any(|s| s == name) && !uses.iter().any(|u| u == name) {
                uses.push(name.to_string());
            }
        }
    }
    uses
}

#[test]
fn tir_modules_import_each_other_without_a_cycle() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/tir");
    let mut files = vec![];
    rust_files(&dir, &mut files);
    let names: Vec<String> = files
        .iter()
        .filter_map(|f| f.file_stem()?.to_str().map(str::to_string))
        .filter(|n| n != "mod")
        .collect();
    assert!(names.len() >= 10, "the tir folder has {names:?}");
    let edges: BTreeMap<String, Vec<String>> = files
        .iter()
        .filter_map(|f| {
            let name = f.file_stem()?.to_str()?.to_string();
            let text = std::fs::read_to_string(f).ok()?;
            let uses = sibling_uses(&text, &names)
                .into_iter()
                .filter(|u| *u != name)
                .collect();
            Some((name, uses))
        })
        .collect();
    // Kahn's algorithm: whatever cannot be ordered lies on a cycle.
    let mut pending: BTreeMap<&str, usize> =
        edges.iter().map(|(n, u)| (n.as_str(), u.len())).collect();
    let mut ordered = 0;
    while let Some((&leaf, _)) = pending.iter().find(|(_, &n)| n == 0) {
        pending.remove(leaf);
        ordered += 1;
        for (n, uses) in &edges {
            if uses.iter().any(|u| u == leaf) {
                if let Some(c) = pending.get_mut(n.as_str()) {
                    *c -= 1;
                }
            }
        }
    }
    assert!(
        pending.is_empty(),
        "these tir modules import each other in a cycle: {:?}",
        pending.keys().collect::<Vec<_>>()
    );
    assert_eq!(ordered, edges.len());
}
