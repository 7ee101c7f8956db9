//! Every command's `--json` output against its schema in
//! `docs/layoutopt.schema.json` (schema version 1), checked by a small
//! validator of the JSON Schema keywords that file uses (an unknown keyword
//! fails the test rather than being skipped), plus what the schema cannot say:
//! no document names a folder of this machine, `bench` keeps every run, and
//! `compare --measure` warms up and times at least 10 runs.

use crate::support::process;
use serde_json::Value;
use std::path::Path;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn schema() -> Value {
    let text = std::fs::read_to_string(repo().join("docs/layoutopt.schema.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The keywords the validator knows; any other in the schema fails the test.
const KEYWORDS: [&str; 15] = [
    "$schema",
    "$id",
    "title",
    "description",
    "$defs",
    "$ref",
    "const",
    "enum",
    "oneOf",
    "type",
    "required",
    "properties",
    "additionalProperties",
    "items",
    "minimum",
];

fn type_matches(name: &str, v: &Value) -> bool {
    match name {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.is_u64() || v.is_i64(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        other => panic!("unknown type '{other}' in the schema"),
    }
}

/// Appends to `errors` every way `v` (at `at`) breaks `schema`.
fn check(root: &Value, schema: &Value, v: &Value, at: &str, errors: &mut Vec<String>) {
    let s = schema.as_object().expect("a schema is an object");
    for k in s.keys() {
        assert!(KEYWORDS.contains(&k.as_str()), "unknown keyword '{k}'");
    }
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        let name = r.strip_prefix("#/$defs/").expect("refs point into $defs");
        check(root, &root["$defs"][name], v, at, errors);
    }
    if let Some(c) = s.get("const") {
        if v != c {
            errors.push(format!("{at}: {v} is not {c}"));
        }
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        if !e.contains(v) {
            errors.push(format!("{at}: {v} is none of {e:?}"));
        }
    }
    if let Some(alts) = s.get("oneOf").and_then(Value::as_array) {
        let passing = alts
            .iter()
            .filter(|alt| {
                let mut e = Vec::new();
                check(root, alt, v, at, &mut e);
                e.is_empty()
            })
            .count();
        if passing != 1 {
            errors.push(format!("{at}: {passing} alternatives of oneOf match"));
        }
    }
    if let Some(t) = s.get("type") {
        let ok = match t {
            Value::String(name) => type_matches(name, v),
            Value::Array(names) => names.iter().any(|n| type_matches(n.as_str().unwrap(), v)),
            _ => panic!("bad type keyword {t}"),
        };
        if !ok {
            errors.push(format!("{at}: {v} is not of type {t}"));
            return;
        }
    }
    if let (Some(min), Some(x)) = (s.get("minimum").and_then(Value::as_f64), v.as_f64()) {
        if x < min {
            errors.push(format!("{at}: {x} < {min}"));
        }
    }
    if let Some(obj) = v.as_object() {
        for key in s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if !obj.contains_key(key.as_str().unwrap()) {
                errors.push(format!("{at}: missing key {key}"));
            }
        }
        let props = s.get("properties").and_then(Value::as_object);
        for (k, x) in obj {
            let at = format!("{at}.{k}");
            match (props.and_then(|p| p.get(k)), s.get("additionalProperties")) {
                (Some(sub), _) => check(root, sub, x, &at, errors),
                (None, Some(Value::Bool(false))) => errors.push(format!("{at}: not in the schema")),
                (None, Some(sub)) if sub.is_object() => check(root, sub, x, &at, errors),
                (None, _) => {}
            }
        }
    }
    if let (Some(items), Some(a)) = (s.get("items"), v.as_array()) {
        for (i, x) in a.iter().enumerate() {
            check(root, items, x, &format!("{at}[{i}]"), errors);
        }
    }
}

/// The document of `layoutopt {command} models/{model} {flags} --json`,
/// checked against the schema of `command`.
fn document(command: &str, model: &str, flags: &[&str]) -> Value {
    let path = repo().join("models").join(model);
    let mut args = vec![command, path.to_str().unwrap()];
    args.extend(flags);
    args.push("--json");
    let stdout = process::layoutopt_ok(&args);
    // Nothing names where the repository sits on this machine.
    assert!(
        !stdout.contains(repo().to_str().unwrap()),
        "{command}: a path of this machine in {stdout}"
    );
    let doc: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{command}: not JSON ({e}): {stdout}"));
    let root = schema();
    let mut errors = Vec::new();
    check(&root, &root["$defs"][command], &doc, command, &mut errors);
    assert!(errors.is_empty(), "{args:?}:\n{}", errors.join("\n"));
    assert_eq!(doc["schema_version"], 3);
    assert_eq!(doc["command"], command);
    doc
}

#[test]
fn inspect_names_model_tensors() {
    let doc = document("inspect", "resnet_small/model.onnx", &[]);
    assert_eq!(doc["model_file"], "model.onnx");
    assert_eq!(doc["inputs"][0]["shape"], serde_json::json!([1, 3, 32, 32]));
    let spans = &doc["nodes"][0]["spans"][0];
    assert_eq!(spans["file"], "model.onnx");
    let tflite = document("inspect", "tflite_cnn/model.tflite", &[]);
    assert_eq!(tflite["model_file"], "model.tflite");
}

#[test]
fn plan_lists_every_tensor_by_model_name() {
    for planner in ["keep", "local", "greedy", "global"] {
        let doc = document(
            "plan",
            "resnet_small/model.onnx",
            &["--planner", planner, "--target", "nchw16c"],
        );
        assert_eq!(doc["planner"], planner);
        assert_eq!(doc["target"], "NCHW16c");
        assert_eq!(doc["solver"].is_null(), planner != "global");
        // Each transformed tensor is a model tensor the plan lists; data-moving
        // transforms and relabels are listed apart.
        for (list, relabel) in [("transforms", false), ("relabels", true)] {
            let list = doc[list].as_array().unwrap();
            for t in list {
                let name = t["tensor"].as_str().unwrap();
                assert!(doc["tensors"].get(name).is_some(), "{planner}: {name}");
                assert_eq!(t["relabel"], relabel, "{planner}: {name}");
                assert_eq!(t["moved_bytes"] == 0, relabel, "{planner}: {name}");
            }
        }
        assert_eq!(
            doc["transform_count"],
            doc["transforms"].as_array().unwrap().len()
        );
        assert_eq!(
            doc["relabel_count"],
            doc["relabels"].as_array().unwrap().len()
        );
    }
    document("plan", "tflite_cnn/model.tflite", &["--target", "nhwc"]);
}

#[test]
fn compare_measures_compile_apart_and_ten_runs() {
    let doc = document(
        "compare",
        "resnet_small/model.onnx",
        &["--target", "nchw8c", "--measure"],
    );
    let rows = doc["planners"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    for row in rows {
        let m = &row["measured"];
        assert!(m["runs_ms"].as_array().unwrap().len() >= 10);
        assert!(m["warmup_runs"].as_u64().unwrap() >= 1);
        assert!(m["compile_ms"].as_f64().unwrap() > 0.0);
    }
    let unmeasured = document("compare", "resnet_small/model.onnx", &[]);
    assert!(unmeasured["planners"][0]["measured"].is_null());
}

#[test]
fn bench_keeps_every_run_and_times_each_stage() {
    let doc = document(
        "bench",
        "resnet_small/model.onnx",
        &["--runs", "12", "--warmup", "1", "--threads", "1"],
    );
    let runs: Vec<f64> = (doc["timing"]["runs_ms"].as_array().unwrap().iter())
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(runs.len(), 12);
    let min = runs.iter().copied().fold(f64::INFINITY, f64::min);
    assert_eq!(doc["timing"]["min_ms"].as_f64().unwrap(), min);
    assert!(doc["profile"].is_null());
    // Import, plan and compile are timed apart, none of them in the runs.
    for stage in [
        &doc["import_ms"],
        &doc["plan_ms"],
        &doc["timing"]["compile_ms"],
    ] {
        assert!(stage.as_f64().is_some_and(|ms| ms > 0.0), "{stage}");
    }
}

#[test]
fn run_reports_its_error_against_the_recorded_output() {
    let doc = document("run", "resnet_small/model.onnx", &["--threads", "1"]);
    let out = &doc["outputs"][0];
    let magnitude = out["max"]
        .as_f64()
        .unwrap()
        .abs()
        .max(out["min"].as_f64().unwrap().abs());
    // The recorded output is onnxruntime's; tolerance 1e-4 of max(1, |output|).
    assert!(out["max_abs_error"].as_f64().unwrap() <= 1e-4 * magnitude.max(1.0));
    assert_eq!(out["mismatched"], 0);
    assert!(doc["execution"]["first_non_finite"].is_null());
}

#[test]
fn export_and_explore_name_their_files_only_in_documents_and_artefacts() {
    let dir = process::scratch_dir("json_schema_outputs");
    let onnx = dir.join("planned.onnx");
    let doc = document(
        "export",
        "mobilenet_small/model.onnx",
        &["-o", onnx.to_str().unwrap()],
    );
    assert_eq!(doc["output_file"], "planned.onnx");
    assert_eq!(doc["for"], "verification");
    assert!(onnx.exists());
    let doc = document(
        "export",
        "mobilenet_small/model.onnx",
        &["-o", onnx.to_str().unwrap(), "--for", "onnxruntime"],
    );
    assert_eq!(doc["for"], "onnxruntime");
    assert_eq!(doc["planner"], "keep");
    let html = dir.join("explorer.html");
    let doc = document(
        "explore",
        "resnet_small/model.onnx",
        &["-o", html.to_str().unwrap()],
    );
    assert_eq!(doc["planners"], serde_json::json!(["global", "local"]));
    // Neither artefact names a folder of this machine (spans name the file only).
    let here = repo().to_str().unwrap().as_bytes();
    for file in [&onnx, &html] {
        let bytes = std::fs::read(file).unwrap();
        assert!(
            !bytes.windows(here.len()).any(|w| w == here),
            "{}",
            file.display()
        );
    }
}
