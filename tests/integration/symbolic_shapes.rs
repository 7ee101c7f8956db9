//! Symbolic dimensions: never guessed. An input with an unbound symbolic dimension
//! is an error naming the input and the dimension; `--input-shape` (and
//! `ImportOptions::input_shapes`) binds it, and the model then really runs at
//! that shape.

use crate::support::compare::max_abs_err;
use crate::support::onnx::*;
use crate::support::plan::plan_builtin;
use crate::support::process::{layoutopt, layoutopt_ok, scratch_dir};
use layoutopt::frontend::onnx::{load_onnx, ImportOptions};
use layoutopt::graph::Tensor;
use layoutopt::runtime::{CompiledModel, RuntimeOptions};
use std::collections::HashMap;
use std::path::PathBuf;

/// y = relu(x . W) with x of shape [batch, 3].
fn batch_model(dir: &str) -> PathBuf {
    let w = Tensor::from_f32(vec![3, 2], vec![0.5, -1.0, 2.0, 0.25, -0.75, 1.5]);
    let m = model(
        vec![
            node("MatMul", "mm", &["x", "w"], &["h"]),
            node("Relu", "relu", &["h"], &["y"]),
        ],
        vec![symbolic(value_info("x", 1, &[1, 3]), 0, "batch")],
        vec![symbolic(value_info("y", 1, &[1, 2]), 0, "batch")],
        vec![("w", w)],
        13,
    );
    let path = scratch_dir(dir).join("batch.onnx");
    std::fs::write(&path, model_bytes(&m)).unwrap();
    path
}

fn with_shape(name: &str, shape: &[usize]) -> ImportOptions {
    ImportOptions {
        input_shapes: HashMap::from([(name.to_string(), shape.to_vec())]),
        ..ImportOptions::default()
    }
}

#[test]
fn an_unbound_symbolic_dimension_is_an_error_naming_input_and_dimension() {
    let path = batch_model("sym_unbound");
    let e = load_onnx(&path, &ImportOptions::default())
        .unwrap_err()
        .to_string();
    for needle in [
        "graph input 'x'",
        "dimension 0 is symbolic ('batch')",
        "--input-shape x=",
    ] {
        assert!(e.contains(needle), "{e}");
    }
}

#[test]
fn a_given_shape_must_fit_the_static_dimensions() {
    let path = batch_model("sym_misfit");
    let e = load_onnx(&path, &with_shape("x", &[4, 5]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("static dimension 1 (3)"), "{e}");
    let e = load_onnx(&path, &with_shape("x", &[4, 3, 1]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("rank 3") && e.contains("rank 2"), "{e}");
}

/// Batch 4 runs as four independent rows: each row of the batched output equals
/// the model run on that row alone, in the reference and compiled.
#[test]
fn batch_four_runs_when_bound() {
    let path = batch_model("sym_batch4");
    let g4 = load_onnx(&path, &with_shape("x", &[4, 3])).unwrap();
    let g1 = load_onnx(&path, &with_shape("x", &[1, 3])).unwrap();
    let rows: Vec<f32> = (0..12).map(|i| (i as f32 - 5.5) * 0.3).collect();
    let x4 = Tensor::from_f32(vec![4, 3], rows.clone());
    let y4 = layoutopt::reference::run(&g4, std::slice::from_ref(&x4)).unwrap();
    assert_eq!(y4[0].shape, vec![4, 2]);
    let compiled = CompiledModel::compile(&g4, &RuntimeOptions::default()).unwrap();
    let c4 = compiled.run(&[x4]).unwrap();
    for r in 0..4 {
        let x1 = Tensor::from_f32(vec![1, 3], rows[3 * r..3 * r + 3].to_vec());
        let y1 = layoutopt::reference::run(&g1, &[x1]).unwrap()[0].to_f32();
        assert_eq!(&y4[0].to_f32()[2 * r..2 * r + 2], &y1[..], "row {r}");
        for (a, b) in c4[0].to_f32()[2 * r..2 * r + 2].iter().zip(&y1) {
            assert!(
                (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                "row {r}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn the_cli_refuses_unbound_dimensions_and_takes_input_shape() {
    let path = batch_model("sym_cli");
    let path = path.to_str().unwrap();
    let o = layoutopt(&["run", path]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.contains("dimension 0 is symbolic ('batch')"),
        "{}",
        o.stderr
    );
    let out = layoutopt_ok(&["run", path, "--input-shape", "x=4,3"]);
    assert!(out.contains("[4, 2]"), "{out}");
    let o = layoutopt(&["run", path, "--input-shape", "x=4;3"]);
    assert_eq!(o.code, 2, "a malformed --input-shape is a usage error");
}

/// The bundled ResNet with a symbolic batch 'N': planned at N=1 (blocked
/// NCHW16c, so the exported model holds layout Reshapes), exported with N kept
/// symbolic, it runs at N=3 and gives what the source model gives at N=3 (the
/// reference executor on both, within 1e-5 of the largest magnitude). A model
/// whose computation fixes the batch (a Reshape to [4]) is exported with it fixed.
#[test]
fn export_keeps_a_symbolic_batch_where_the_plan_allows() {
    use layoutopt::api::{PlannerKind, TargetFamily};
    use layoutopt::export::{export_bytes, ExportOptions};
    use layoutopt::frontend::onnx::import_onnx;
    use protobuf::Message;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(root.join("models/resnet_small/model.onnx")).unwrap();
    let mut m = onnx_protobuf::ModelProto::parse_from_bytes(&bytes).unwrap();
    let g = m.graph.as_mut().unwrap();
    g.input[0] = symbolic(g.input[0].clone(), 0, "N");
    g.output[0] = symbolic(g.output[0].clone(), 0, "N");
    let source = m.write_to_bytes().unwrap();
    let at = |n: usize| ImportOptions {
        dim_values: HashMap::from([("N".to_string(), n)]),
        ..ImportOptions::default()
    };
    let planned_graph = import_onnx(&source, "resnet_n.onnx", None, &at(1)).unwrap();
    assert_eq!(planned_graph.symbolic_batch.as_deref(), Some("N"));
    let planned = plan_builtin(&planned_graph, PlannerKind::Global, TargetFamily::Nchwc(16));
    let opts = ExportOptions {
        output_names: Some(vec!["output".into()]),
        symbolic_batch: Some("N".into()),
    };
    let exported = export_bytes(&planned.graph, &opts).unwrap();
    let back = import_onnx(&exported, "exported.onnx", None, &at(3)).unwrap();
    let reference = import_onnx(&source, "resnet_n.onnx", None, &at(3)).unwrap();
    let x = Tensor::from_f32(
        vec![3, 3, 32, 32],
        (0..3 * 3 * 32 * 32)
            .map(|i| ((i * 37 % 101) as f32 / 50.0) - 1.0)
            .collect(),
    );
    let want = layoutopt::reference::run(&reference, std::slice::from_ref(&x)).unwrap();
    let got = layoutopt::reference::run(&back, &[x]).unwrap();
    assert_eq!(got[0].shape, vec![3, 10]);
    let (err, mag) = max_abs_err(&want[0], &got[0]);
    assert!(err <= 1e-5 * mag, "error {err} (magnitude {mag})");

    // y = Reshape(x, [4]) for x of shape [N, 4]: only N = 1 fits.
    let fixed = model(
        vec![node("Reshape", "flat", &["x", "shape"], &["y"])],
        vec![symbolic(value_info("x", 1, &[1, 4]), 0, "N")],
        vec![value_info("y", 1, &[4])],
        vec![("shape", Tensor::from_i64(vec![1], vec![4]))],
        13,
    );
    let g = import_onnx(&model_bytes(&fixed), "fixed.onnx", None, &at(1)).unwrap();
    let opts = ExportOptions {
        output_names: None,
        symbolic_batch: g.symbolic_batch.clone(),
    };
    let m = layoutopt::export::export_model(&g, &opts).unwrap();
    assert!(!layoutopt::export::keeps_symbolic_batch(&m, "N"));
    let exported = m.write_to_bytes().unwrap();
    assert!(import_onnx(&exported, "fixed.onnx", None, &ImportOptions::default()).is_ok());
}

/// A dimension declared as -1, as some exporters write a free one (and
/// onnxruntime reads it): unbound it is an error naming the input; bound by
/// `--input-shape` the model runs at that shape.
#[test]
fn a_dimension_declared_minus_one_is_free() {
    let m = model(
        vec![node("Relu", "relu", &["x"], &["y"])],
        vec![value_info("x", 1, &[-1, 3, 8, 8])],
        vec![value_info("y", 1, &[-1, 3, 8, 8])],
        vec![],
        13,
    );
    let path = scratch_dir("sym_minus_one").join("free.onnx");
    std::fs::write(&path, model_bytes(&m)).unwrap();
    let path = path.to_str().unwrap();
    let o = layoutopt(&["run", path]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    for needle in [
        "graph input 'x'",
        "dimension 0 has no value",
        "--input-shape x=",
    ] {
        assert!(o.stderr.contains(needle), "{}", o.stderr);
    }
    let out = layoutopt_ok(&["run", path, "--input-shape", "x=2,3,8,8"]);
    assert!(out.contains("[2, 3, 8, 8]"), "{out}");
}

/// A session runs the batch model at every batch it is given, each compiled
/// once: outputs equal the reference executor's on the model imported at that
/// batch; the cache keeps the most recent shapes; a shape the model does not
/// declare is an error naming the input and dimension.
#[test]
fn a_session_runs_a_symbolic_batch_at_every_size() {
    use layoutopt::api::{Costs, Dim, ModelInput, Session, SessionOptions};
    let path = batch_model("sym_session");
    let mut options = SessionOptions::with_threads(1);
    options.costs = Some(Costs::BuiltIn);
    options.max_shapes = 2;
    let session = Session::open(&path, options).unwrap();
    let declared = &session.interface().inputs[0];
    assert_eq!(
        declared.dims,
        Some(vec![Dim::Symbolic("batch".into()), Dim::Static(3)])
    );
    assert!(
        session.compiled_shapes().is_empty(),
        "nothing to compile yet"
    );
    for batch in [1, 4, 7, 4] {
        let x = Tensor::from_f32(
            vec![batch, 3],
            (0..3 * batch).map(|i| (i as f32 - 4.0) * 0.37).collect(),
        );
        let got = session.run(&[ModelInput::Tensor(&x)]).unwrap();
        let g = load_onnx(&path, &with_shape("x", &[batch, 3])).unwrap();
        let want = layoutopt::reference::run(&g, std::slice::from_ref(&x)).unwrap();
        let (err, mag) = max_abs_err(&want[0], &got[0]);
        assert!(err <= 1e-6 * mag.max(1.0), "batch {batch}: error {err}");
    }
    assert_eq!(
        session.compiled_shapes(),
        vec![vec![vec![7, 3]], vec![vec![4, 3]]],
        "two shapes kept, the most recently used last"
    );
    let (_, compiled_now) = session.model_for(&[&[7, 3]]).unwrap();
    assert!(!compiled_now, "a kept shape is not compiled again");
    let e = session.model_for(&[&[2, 5]]).err().unwrap().to_string();
    assert!(
        e.contains("input 'x': dimension 1 is 5, the model declares 3"),
        "{e}"
    );
    let e = session.model_for(&[&[2, 3, 1]]).err().unwrap().to_string();
    assert!(e.contains("input 'x': the array has rank 3"), "{e}");
}

#[test]
fn bench_times_several_shapes_in_one_process() {
    let path = batch_model("sym_bench_shapes");
    let path = path.to_str().unwrap();
    let args = [
        "bench",
        path,
        "--runs",
        "3",
        "--warmup",
        "1",
        "--threads",
        "1",
    ];
    let shapes = ["--shapes", "1x3,4x3,1x3"];
    let json = layoutopt_ok(&[&args[..], &shapes[..], &["--json"]].concat());
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(doc["command"], "bench_shapes");
    let rows = doc["shapes"].as_array().unwrap();
    let seen: Vec<(serde_json::Value, bool)> = (rows.iter())
        .map(|r| (r["shapes"].clone(), r["compiled_now"].as_bool().unwrap()))
        .collect();
    // Each new shape compiled when first met; the first again from the session.
    assert_eq!(
        seen,
        [
            (serde_json::json!([[1, 3]]), true),
            (serde_json::json!([[4, 3]]), true),
            (serde_json::json!([[1, 3]]), false),
        ]
    );
    for r in rows {
        assert!(r["timing"]["compile_ms"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["timing"]["runs_ms"].as_array().unwrap().len(), 3, "{r}");
    }
    let text = layoutopt_ok(&[&args[..], &shapes[..]].concat());
    assert_eq!(
        text.lines().filter(|l| l.contains("latency p50")).count(),
        3,
        "{text}"
    );
    // A shape the model does not declare names the input and dimension.
    let o = layoutopt(&[&args[..], &["--shapes", "1x5"]].concat());
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("dimension 1"), "{}", o.stderr);
    let o = layoutopt(&[&args[..], &["--shapes", "1xx3"]].concat());
    assert_eq!(o.code, 2, "a malformed --shapes is a usage error");
}

/// A small CNN over x[batch, 3, height, width]: a padded 3x3 conv to 16
/// channels, relu, a stride-2 3x3 conv, a max pool, a residual add of a 1x1
/// conv, a global average pool and a Gemm to 5 classes.
fn free_image_model(dir: &str) -> PathBuf {
    let weights = |shape: Vec<usize>, seed: f32| {
        let n: usize = shape.iter().product();
        let v = (0..n)
            .map(|i| ((i as f32 * 0.37 + seed).sin()) * 0.3)
            .collect();
        Tensor::from_f32(shape, v)
    };
    let conv = |name: &str, ins: &[&str], out: &str, k: i64, stride: i64| {
        let mut c = node("Conv", name, ins, &[out]);
        let p = k / 2;
        c.attribute = vec![
            ints_attr("kernel_shape", &[k, k]),
            ints_attr("strides", &[stride, stride]),
            ints_attr("pads", &[p, p, p, p]),
        ];
        c
    };
    let mut pool = node("MaxPool", "pool", &["h2"], &["h3"]);
    pool.attribute = vec![
        ints_attr("kernel_shape", &[2, 2]),
        ints_attr("strides", &[1, 1]),
        ints_attr("pads", &[0, 0, 1, 1]),
    ];
    let mut flat = node("Flatten", "flat", &["g"], &["f"]);
    flat.attribute = vec![int_attr("axis", 1)];
    let mut gemm = node("Gemm", "fc", &["f", "wf", "bf"], &["y"]);
    gemm.attribute = vec![int_attr("transB", 1)];
    let free = |vi| symbolic(symbolic(symbolic(vi, 0, "batch"), 2, "height"), 3, "width");
    let m = model(
        vec![
            conv("c1", &["x", "w1", "b1"], "h1", 3, 1),
            node("Relu", "r1", &["h1"], &["a1"]),
            conv("c2", &["a1", "w2", "b2"], "h2", 3, 2),
            pool,
            conv("c3", &["h3", "w3"], "h4", 1, 1),
            node("Add", "add", &["h3", "h4"], &["s"]),
            node("GlobalAveragePool", "gap", &["s"], &["g"]),
            flat,
            gemm,
        ],
        vec![free(value_info("x", 1, &[1, 3, 8, 8]))],
        vec![symbolic(value_info("y", 1, &[1, 5]), 0, "batch")],
        vec![
            ("w1", weights(vec![16, 3, 3, 3], 0.1)),
            ("b1", weights(vec![16], 0.2)),
            ("w2", weights(vec![16, 16, 3, 3], 0.3)),
            ("b2", weights(vec![16], 0.4)),
            ("w3", weights(vec![16, 16, 1, 1], 0.5)),
            ("wf", weights(vec![5, 16], 0.6)),
            ("bf", weights(vec![5], 0.7)),
        ],
        13,
    );
    let path = scratch_dir(dir).join("free_image.onnx");
    std::fs::write(&path, model_bytes(&m)).unwrap();
    path
}

/// A session plans the first shape of a model with a free batch and image
/// size, and makes the same layout decisions again at every later shape
/// (nothing planned or measured): each output equals the reference
/// executor's on the model imported at that shape.
#[test]
fn a_session_plans_the_first_shape_and_replays_its_layouts_at_the_others() {
    use layoutopt::api::{ModelInput, Session, SessionOptions, TargetFamily};
    let path = free_image_model("sym_replay");
    let mut options = SessionOptions::with_threads(1);
    options.target = TargetFamily::Nchwc(8);
    let session = Session::open(&path, options).unwrap();
    let shapes: [[usize; 4]; 4] = [
        [1, 3, 20, 24],
        [2, 3, 17, 31],
        [1, 3, 32, 9],
        [3, 3, 11, 11],
    ];
    for (i, shape) in shapes.iter().enumerate() {
        let n: usize = shape.iter().product();
        let x = Tensor::from_f32(
            shape.to_vec(),
            (0..n)
                .map(|k| ((k * 7919 % 113) as f32 - 56.0) * 0.02)
                .collect(),
        );
        let (compiled, now) = session.model_for(&[&shape[..]]).unwrap();
        assert!(now, "{shape:?} is new");
        assert_eq!(
            compiled.replayed,
            i > 0,
            "only the first shape is planned: {shape:?}"
        );
        let got = compiled
            .model
            .run_inputs(&[ModelInput::Tensor(&x)])
            .unwrap();
        let g = load_onnx(&path, &with_shape("x", shape)).unwrap();
        let want = layoutopt::reference::run(&g, std::slice::from_ref(&x)).unwrap();
        assert_eq!(got[0].shape, vec![shape[0], 5]);
        let (err, mag) = max_abs_err(&want[0], &got[0]);
        assert!(
            err <= 1e-4 * mag.max(1.0),
            "{shape:?}: error {err} of {mag}"
        );
    }
}

/// `--input-shape` ranges: `bench --shapes` plans ahead at the largest shape
/// they allow and makes that plan again for each shape inside them, refusing
/// one outside naming the input and dimension; `run` takes a ranged extent
/// from its `--input` file and matches the reference executor there.
#[test]
fn input_shape_ranges_bound_the_shapes_run() {
    use layoutopt::frontend::npy::{read_npy, write_npy};
    let path = free_image_model("sym_ranges");
    let model = path.to_str().unwrap();
    let bench = [
        "bench",
        model,
        "--runs",
        "2",
        "--warmup",
        "0",
        "--threads",
        "1",
    ];
    let bounds = ["--input-shape", "x=1..2,3,8..40,8..40"];
    let shapes = ["--shapes", "1x3x20x24,2x3x9x40", "--json"];
    let json = layoutopt_ok(&[&bench[..], &bounds[..], &shapes[..]].concat());
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let rows = doc["shapes"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{json}");
    for r in rows {
        assert_eq!(
            r["replayed"], true,
            "the largest shape was planned ahead: {r}"
        );
    }
    let text = layoutopt_ok(&[&bench[..], &bounds[..], &["--shapes", "1x3x20x24"]].concat());
    assert!(
        text.contains("2x3x40x40: planned and compiled ahead"),
        "{text}"
    );
    let o = layoutopt(&[&bench[..], &bounds[..], &["--shapes", "1x3x41x8"]].concat());
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr
            .contains("input 'x': dimension 2 is 41, outside the bounds 8..40"),
        "{}",
        o.stderr
    );
    // A range may not loosen a static dimension.
    let loose = ["--input-shape", "x=1,2..3,8,8"];
    let o = layoutopt(&[&bench[..], &loose[..], &["--shapes", "1x3x8x8"]].concat());
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(
        o.stderr.contains("dimension 1 is bounded by 2..3"),
        "{}",
        o.stderr
    );

    let dir = path.parent().unwrap();
    let x = Tensor::from_f32(
        vec![1, 3, 13, 17],
        (0..3 * 13 * 17)
            .map(|k| (k % 29) as f32 * 0.05 - 0.7)
            .collect(),
    );
    let input = dir.join("x.npy");
    std::fs::write(&input, write_npy(&x).unwrap()).unwrap();
    let out = dir.join("out");
    let run = [
        "run",
        model,
        "--threads",
        "1",
        "--input-shape",
        "x=1,3,8..40,8..40",
        "--input",
        input.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
    ];
    layoutopt_ok(&run);
    let got = read_npy(&std::fs::read(out.join("y.npy")).unwrap()).unwrap();
    let g = load_onnx(&path, &with_shape("x", &[1, 3, 13, 17])).unwrap();
    let want = layoutopt::reference::run(&g, std::slice::from_ref(&x)).unwrap();
    let (err, mag) = max_abs_err(&want[0], &got);
    assert!(err <= 1e-4 * mag.max(1.0), "error {err} of {mag}");
    let mut small = run.to_vec();
    small[5] = "x=1,3,14..40,8..40";
    let o = layoutopt(&small);
    assert_ne!(o.code, 0);
    assert!(
        o.stderr
            .contains("dimension 2 is 13, outside the bounds 14..40"),
        "{}",
        o.stderr
    );
}
