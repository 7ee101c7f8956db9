//! The ONNX backend node test cases (exported from the `onnx` package by
//! scripts/export_onnx_conformance.py into tests/onnx_node/) run through the
//! importer and the reference executor.
//!
//! Tolerance: the ONNX backend's own, |actual - expected| <= 1e-7 + 1e-3 * |expected|,
//! with exact match for integer and boolean outputs. Cases that are known to fail
//! are listed with their reason in tests/onnx_node/KNOWN_FAILURES.txt; the test fails
//! when any other case fails, and when a listed case starts passing (so the list
//! stays true).

use crate::support::bundled::load_test_data;
use layoutopt::frontend::onnx::{load_onnx, ImportError, ImportOptions};
use layoutopt::graph::{DType, Graph, Tensor};
use layoutopt::layout::cost::CostModel;
use layoutopt::layout::plan::plan;
use layoutopt::layout::planners::planner_by_name;
use layoutopt::layout::target::TargetFamily;
use layoutopt::runtime::{CompiledModel, RuntimeOptions};
use protobuf::Message;
use std::collections::BTreeMap;
use std::path::Path;

/// A case imported: its graph and the inputs it still takes, or a model cut
/// into stages (an op's output shape depends on values computed at run time).
enum Imported {
    Graph(Graph, Vec<Tensor>),
    Staged,
}

/// Imports a case. Where an op needs a parameter at import time that the case
/// feeds as a graph input (a shape, pads, clip bounds), or computes from graph
/// inputs (a function body's shape arithmetic), those inputs are frozen to the
/// case's values, as a user would freeze them, and the import is tried again.
fn import_case(dir: &Path, inputs: &[Tensor]) -> Result<Imported, String> {
    let model = dir.join("model.onnx");
    let bytes = std::fs::read(&model).map_err(|e| e.to_string())?;
    let proto = onnx_protobuf::ModelProto::parse_from_bytes(&bytes).map_err(|e| e.to_string())?;
    let names: Vec<String> = proto.graph.input.iter().map(|v| v.name.clone()).collect();
    let mut opts = ImportOptions::default();
    loop {
        match load_onnx(&model, &opts) {
            Ok(g) => {
                let remaining = names
                    .iter()
                    .zip(inputs)
                    .filter(|(n, _)| !opts.constant_inputs.contains_key(*n))
                    .map(|(_, t)| t.clone())
                    .collect();
                return Ok(Imported::Graph(g, remaining));
            }
            Err(ImportError::DataDependent { .. }) => return Ok(Imported::Staged),
            Err(e) => {
                let feeding = match &e {
                    ImportError::NotConstant { value, .. } => inputs_feeding(&proto.graph, value),
                    _ => vec![],
                };
                let unfrozen: Vec<&String> = names
                    .iter()
                    .filter(|n| feeding.contains(*n) && !opts.constant_inputs.contains_key(*n))
                    .collect();
                if unfrozen.is_empty() {
                    return Err(e.to_string());
                }
                for n in unfrozen {
                    let i = names.iter().position(|m| m == n).unwrap();
                    opts.constant_inputs.insert(n.clone(), inputs[i].clone());
                }
            }
        }
    }
}

/// The names `value` is computed from, following the producing nodes back
/// through the graph and its subgraphs (a value itself included).
fn inputs_feeding(graph: &onnx_protobuf::GraphProto, value: &str) -> Vec<String> {
    fn nodes(g: &onnx_protobuf::GraphProto, all: &mut Vec<onnx_protobuf::NodeProto>) {
        for n in &g.node {
            all.push(n.clone());
            for a in &n.attribute {
                if let Some(sub) = a.g.as_ref() {
                    nodes(sub, all);
                }
            }
        }
    }
    let mut all = Vec::new();
    nodes(graph, &mut all);
    let mut reached = vec![value.to_string()];
    let mut k = 0;
    while k < reached.len() {
        let v = reached[k].clone();
        for n in all.iter().filter(|n| n.output.contains(&v)) {
            for i in &n.input {
                if !i.is_empty() && !reached.contains(i) {
                    reached.push(i.clone());
                }
            }
        }
        k += 1;
    }
    reached
}

/// Runs a graph on inputs: the reference executor, or the compiled runtime.
type Executor = fn(&Graph, &[Tensor]) -> Result<Vec<Tensor>, String>;

fn reference(g: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, String> {
    layoutopt::reference::run(g, inputs).map_err(|e| e.to_string())
}

/// Planned for NCHW8c (so 4-D ops run on padded blocked tensors), compiled (hand
/// kernels, TIR through codegen, reference fallbacks), run on one thread.
fn compiled(g: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, String> {
    let planner = planner_by_name("global").map_err(|e| e.to_string())?;
    let p = plan(
        g,
        planner.as_ref(),
        TargetFamily::Nchwc(8),
        &CostModel::default(),
    )
    .map_err(|e| e.to_string())?;
    let m = CompiledModel::compile(
        &p.graph,
        &RuntimeOptions {
            threads: 1,
            ..Default::default()
        },
    )
    .map_err(|e| e.to_string())?;
    m.run(inputs).map_err(|e| e.to_string())
}

/// A model cut into stages runs through a session, for either executor: its
/// stages are planned for NCHW8c with the built-in costs and compiled, the
/// op at each cut run on the outputs of the stage before.
fn staged(dir: &Path, inputs: &[Tensor]) -> Result<Vec<Tensor>, String> {
    use layoutopt::api::{Costs, ModelInput, Session, SessionOptions};
    let mut options = SessionOptions::with_threads(1);
    options.costs = Some(Costs::BuiltIn);
    options.target = TargetFamily::Nchwc(8);
    let session = Session::open(&dir.join("model.onnx"), options).map_err(|e| e.to_string())?;
    let inputs: Vec<ModelInput> = inputs.iter().map(ModelInput::Tensor).collect();
    session.run(&inputs).map_err(|e| e.to_string())
}

fn check_case(dir: &Path, run: Executor) -> Result<(), String> {
    let (inputs, expected) = load_test_data(dir);
    let outputs = match import_case(dir, &inputs)? {
        Imported::Graph(g, inputs) => run(&g, &inputs)?,
        Imported::Staged => staged(dir, &inputs)?,
    };
    if outputs.len() != expected.len() {
        return Err(format!(
            "{} outputs, expected {}",
            outputs.len(),
            expected.len()
        ));
    }
    for (i, (a, e)) in outputs.iter().zip(&expected).enumerate() {
        compare(a, e).map_err(|m| format!("output {i}: {m}"))?;
    }
    Ok(())
}

fn compare(actual: &Tensor, expected: &Tensor) -> Result<(), String> {
    if actual.shape != expected.shape {
        return Err(format!(
            "shape {:?}, expected {:?}",
            actual.shape, expected.shape
        ));
    }
    if actual.dtype() != expected.dtype() {
        return Err(format!(
            "dtype {}, expected {}",
            actual.dtype(),
            expected.dtype()
        ));
    }
    if !expected.dtype().is_float() {
        return if actual.data == expected.data {
            Ok(())
        } else {
            Err("integer values differ".into())
        };
    }
    // Half an ulp of the narrower floats, for results rounded from f64.
    let rtol = match expected.dtype() {
        DType::F16 => 4e-3,
        DType::BF16 => 8e-3,
        _ => 1e-3,
    };
    let (a, e) = (actual.data.to_f64(), expected.data.to_f64());
    for (k, (x, y)) in a.iter().zip(&e).enumerate() {
        let ok = (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= 1e-7 + rtol * y.abs();
        if !ok {
            return Err(format!("element {k}: {x} vs expected {y}"));
        }
    }
    Ok(())
}

#[test]
fn onnx_backend_node_cases() {
    run_cases("tests/onnx_node", 100, reference);
}

/// The same cases through the planner and the compiled runtime: every case the
/// reference executor passes must pass compiled too.
#[test]
fn onnx_backend_node_cases_compiled() {
    run_cases("tests/onnx_node", 100, compiled);
}

/// Models in the operator versions of opsets 7 to 10 (scripts/gen_opset_cases.py,
/// expected outputs from onnxruntime), through the reference and compiled.
#[test]
fn old_opset_cases() {
    run_cases("tests/onnx_opsets", 20, reference);
    run_cases("tests/onnx_opsets", 20, compiled);
}

fn run_cases(dir: &str, at_least: usize, run: Executor) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut cases: Vec<_> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{dir}: {e} (a script in scripts/ makes it)"))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("model.onnx").exists())
        .collect();
    cases.sort();
    let known: BTreeMap<String, String> = std::fs::read_to_string(root.join("KNOWN_FAILURES.txt"))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (name, why) = l.split_once(' ').unwrap_or((l, ""));
            (name.to_string(), why.trim().to_string())
        })
        .collect();
    let (mut passed, mut failed) = (0, 0);
    let mut unexpected = Vec::new();
    let mut now_passing = Vec::new();
    for dir in &cases {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let result = std::panic::catch_unwind(|| check_case(dir, run))
            .unwrap_or_else(|_| Err("panicked".to_string()));
        match result {
            Ok(()) => {
                passed += 1;
                if known.contains_key(&name) {
                    now_passing.push(name);
                }
            }
            Err(m) => {
                failed += 1;
                println!("FAIL {name}: {m}");
                if !known.contains_key(&name) {
                    unexpected.push(format!("{name}: {m}"));
                }
            }
        }
    }
    // SKIPPED.md lists every other case of the suite (op, dtype or feature not
    // supported), so the three counts cover the whole suite; some of them are
    // out of scope by design (their reason says so).
    let skipped = std::fs::read_to_string(root.join("SKIPPED.md")).unwrap_or_default();
    let skipped: Vec<&str> = skipped
        .lines()
        .filter(|l| l.starts_with("| test_"))
        .collect();
    let unsupported = skipped.len();
    let out_of_scope = skipped
        .iter()
        .filter(|l| l.contains("out of scope"))
        .count();
    println!(
        "conformance over {} cases: {passed} passed, {failed} failed, {unsupported} unsupported ({out_of_scope} of them out of scope)",
        passed + failed + unsupported
    );
    assert!(cases.len() >= at_least, "only {} cases found", cases.len());
    assert!(
        unexpected.is_empty(),
        "unexpected failures:\n{}",
        unexpected.join("\n")
    );
    assert!(
        now_passing.is_empty(),
        "cases listed in KNOWN_FAILURES.txt now pass; remove them: {now_passing:?}"
    );
}
