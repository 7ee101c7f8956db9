//! The crate's modules form layers, and a module may use only its own layer and
//! the ones below it (ARCHITECTURE.md draws them). This test reads every source
//! file and fails on any `crate::` path that reaches upwards, so the direction
//! cannot erode silently.

use std::collections::{BTreeMap, BTreeSet};
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

/// The module path of a source file under `src/`: `runtime/compile/mod.rs`
/// is `["runtime", "compile"]`, `core/par.rs` is `["core", "par"]`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .components()
        .filter_map(|c| c.as_os_str().to_str())
        .map(|s| s.trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The code of a file that the crate's modules import through: without
/// comments and without its test module (tests may reach anywhere).
fn import_code(text: &str) -> String {
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    code.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths of a use tree: `a::{b, c::{d, e}}` is `a::b`, `a::c::d`, `a::c::e`.
fn expand_use_tree(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.to_string()];
    };
    let prefix = &tree[..open];
    let inner = tree[open + 1..].trim_end().trim_end_matches('}');
    let (mut depth, mut from, mut parts) = (0, 0, vec![]);
    for (k, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[from..k]);
                from = k + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[from..]);
    parts
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(expand_use_tree)
        .map(|p| format!("{prefix}{p}"))
        .collect()
}

/// The text of the path (or use tree) starting at `text`'s beginning.
fn path_text(text: &str) -> &str {
    let mut depth = 0;
    for (k, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth > 0 => depth -= 1,
            _ if depth > 0 => {}
            c if is_ident(c) || c == ':' => {}
            _ => return &text[..k],
        }
    }
    text
}

/// Every path a file's code names that starts at `crate::`, `super::` or
/// `self::`, resolved against the file's own module `own` into segments
/// from the crate root (item names at the end are left in).
fn named_paths(code: &str, own: &[String]) -> Vec<Vec<String>> {
    let mut paths = vec![];
    for head in ["crate::", "super::", "self::"] {
        for (i, _) in code.match_indices(head) {
            if code[..i].ends_with(|c: char| is_ident(c) || c == ':') {
                continue; // inside a longer path or name
            }
            for path in expand_use_tree(path_text(&code[i..])) {
                let mut resolved: Vec<String> = match head {
                    "crate::" => vec![],
                    "self::" => own.to_vec(),
                    _ => own[..own.len().saturating_sub(1)].to_vec(),
                };
                for segment in path.split("::").skip(1).filter(|s| !s.is_empty()) {
                    match segment {
                        "super" => {
                            resolved.pop();
                        }
                        "self" => {}
                        s => resolved.push(s.to_string()),
                    }
                }
                paths.push(resolved);
            }
        }
    }
    paths
}

/// The longest prefix of `path` that is a module of the crate.
fn module_of(path: &[String], modules: &BTreeSet<Vec<String>>) -> Option<Vec<String>> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| modules.contains(p))
}

/// The modules of `src/` that import each other in a cycle. Each use of one
/// module by another is an edge between the two siblings that hold them
/// under their closest common parent (so `runtime::kernels::conv` using
/// `runtime::model` is an edge from `kernels` to `model`); a parent using its
/// own descendants declares them and is no edge. A cycle at any depth is
/// reported as the siblings on it.
fn import_cycles(src: &Path) -> (usize, Vec<String>) {
    let mut files = vec![];
    rust_files(src, &mut files);
    let sources: Vec<(Vec<String>, String)> = files
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(src).expect("under src");
            let text = std::fs::read_to_string(f).expect("a readable source file");
            (module_path(rel), import_code(&text))
        })
        .filter(|(m, _)| !m.is_empty() && !["lib", "main"].contains(&m[0].as_str()))
        // Test modules reach anywhere, as test code does.
        .filter(|(m, _)| {
            let last = m.last().map_or("", String::as_str);
            !(last == "tests" || last.ends_with("_tests") || last == "test_support")
        })
        .collect();
    let modules: BTreeSet<Vec<String>> = sources.iter().map(|(m, _)| m.clone()).collect();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (own, code) in &sources {
        for path in named_paths(code, own) {
            let Some(used) = module_of(&path, &modules) else {
                continue;
            };
            let common = own.iter().zip(&used).take_while(|(a, b)| a == b).count();
            if common == own.len() || common == used.len() {
                continue; // a module and its own descendant or ancestor
            }
            let (from, to) = (own[..=common].to_vec(), used[..=common].to_vec());
            edges.entry(from).or_default().insert(to);
        }
    }
    // Trim, until nothing changes, every module that uses none of the others
    // left or that none of them uses: what stays lies on a cycle (or on a path
    // from one cycle to another), and a module that only leads into one is
    // trimmed away.
    let mut left: BTreeSet<&Vec<String>> = edges
        .iter()
        .flat_map(|(a, bs)| std::iter::once(a).chain(bs))
        .collect();
    loop {
        let uses_left = |n: &Vec<String>| {
            edges
                .get(n)
                .is_some_and(|u| u.iter().any(|m| left.contains(m)))
        };
        let used_by_left = |n: &Vec<String>| {
            left.iter()
                .any(|m| edges.get(*m).is_some_and(|u| u.contains(n)))
        };
        let trimmed: Vec<&Vec<String>> = left
            .iter()
            .copied()
            .filter(|n| !uses_left(n) || !used_by_left(n))
            .collect();
        if trimmed.is_empty() {
            break;
        }
        for n in trimmed {
            left.remove(n);
        }
    }
    let cycle = left.iter().map(|m| m.join("::")).collect();
    (edges.values().map(BTreeSet::len).sum(), cycle)
}

#[test]
fn no_modules_import_each_other_in_a_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (edges, cycle) = import_cycles(&src);
    assert!(
        edges > 100,
        "only {edges} imports between modules were found"
    );
    assert!(
        cycle.is_empty(),
        "these modules import each other in a cycle (or lead into one): {cycle:?}; \
         move what both sides need below them"
    );
}

#[test]
fn the_cycle_finder_sees_a_cycle_between_siblings() {
    let dir = std::env::temp_dir().join(format!("layering-{}", std::process::id()));
    let file = |rel: &str, text: &str| {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    file("a/mod.rs", "mod x; mod y;");
    file("a/x.rs", "use super::y::f;");
    file("a/y/mod.rs", "fn g() { crate::a::x::h() }");
    file("b.rs", "use crate::a::x;");
    let (edges, cycle) = import_cycles(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(edges, 3);
    assert_eq!(cycle, vec!["a::x", "a::y"]);
}

/// The library's own modules that the command line and the Python package
/// must reach only through `api` (its face).
const BEHIND_THE_FACE: &[&str] = &["runtime", "layout", "frontend", "graph", "core"];

#[test]
fn the_command_line_and_python_use_the_library_only_through_api() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("src/main.rs")];
    rust_files(&root.join("src/cli"), &mut files);
    rust_files(&root.join("python/src"), &mut files);
    assert!(files.len() > 5, "found {files:?}");
    let mut violations = vec![];
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a readable source file");
        for (i, m) in text.match_indices("layoutopt::") {
            let rest = &text[i + m.len()..];
            let module = rest
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()
                .unwrap_or("");
            if module != "api" {
                violations.push(format!("{}: layoutopt::{module}", file.display()));
            }
        }
        // `main.rs` declares the `cli` module; its files must not see the
        // library's modules through `crate::` either (they are a binary's).
        for module in crate_paths(&text) {
            if BEHIND_THE_FACE.contains(&module) {
                violations.push(format!("{}: crate::{module}", file.display()));
            }
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

/// How many `Result<T, String>` types `code` names: each `Result<` read to
/// its closing `>`, its last top-level argument compared, whitespace ignored.
fn string_error_results(code: &str) -> usize {
    let squeezed: String = code.chars().filter(|c| !c.is_whitespace()).collect();
    let bytes = squeezed.as_bytes();
    let mut count = 0;
    for (start, _) in squeezed.match_indices("Result<") {
        let (mut depth, mut last_comma) = (0usize, None);
        for (i, &b) in bytes.iter().enumerate().skip(start + "Result".len()) {
            match b {
                b'<' => depth += 1,
                b',' if depth == 1 => last_comma = Some(i),
                b'>' => {
                    depth -= 1;
                    if depth == 0 {
                        count += usize::from(
                            last_comma.is_some_and(|c| &squeezed[c + 1..i] == "String"),
                        );
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    count
}

#[test]
fn the_string_error_finder_reads_nested_types() {
    let code = "fn a() -> Result<Vec<Vec<usize>>, String> {}\n\
                fn b() -> Result<HashMap<usize, String>, Error> {}\n\
                fn c() -> std::result::Result<(), String> {}";
    assert_eq!(string_error_results(code), 2);
}

/// Errors are typed: no function in `src/` returns `Result<_, String>` (test
/// modules aside).
#[test]
fn no_function_in_src_returns_a_string_error() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![];
    rust_files(&src, &mut files);
    let found: Vec<String> = files
        .iter()
        .filter(|p| !p.ends_with("tests.rs"))
        .filter(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            string_error_results(text.split("#[cfg(test)]").next().unwrap_or("")) > 0
        })
        .map(|p| p.strip_prefix(&src).unwrap().display().to_string())
        .collect();
    assert!(files.len() > 100, "only {} source files found", files.len());
    assert!(found.is_empty(), "Result<_, String> in {found:?}");
}
