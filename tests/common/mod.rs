//! Helpers shared by the integration tests: building ONNX models in Rust, and
//! loading models stored in ONNX test-data layout, and measuring a child
//! process's time and peak memory.
#![allow(dead_code)]

pub mod chains;

use layoutopt::frontend::onnx::{load_tensor_pb, tensor_to_proto};
use layoutopt::graph::Tensor;
use onnx_protobuf::{
    tensor_shape_proto, type_proto, AttributeProto, GraphProto, ModelProto, NodeProto,
    OperatorSetIdProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use protobuf::Message;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

pub fn value_info(name: &str, elem_type: i32, dims: &[i64]) -> ValueInfoProto {
    let mut shape = TensorShapeProto::new();
    for &d in dims {
        let mut dim = tensor_shape_proto::Dimension::new();
        dim.value = Some(tensor_shape_proto::dimension::Value::DimValue(d));
        shape.dim.push(dim);
    }
    let mut tt = type_proto::Tensor::new();
    tt.elem_type = elem_type;
    tt.shape = Some(shape).into();
    let mut tp = TypeProto::new();
    tp.value = Some(type_proto::Value::TensorType(tt));
    let mut vi = ValueInfoProto::new();
    vi.name = name.to_string();
    vi.type_ = Some(tp).into();
    vi
}

pub fn node(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    let mut n = NodeProto::new();
    n.op_type = op.to_string();
    n.name = name.to_string();
    n.input = inputs.iter().map(|s| s.to_string()).collect();
    n.output = outputs.iter().map(|s| s.to_string()).collect();
    n
}

pub fn int_attr(name: &str, v: i64) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = name.to_string();
    a.type_ = onnx_protobuf::attribute_proto::AttributeType::INT.into();
    a.i = v;
    a
}

pub fn float_attr(name: &str, v: f32) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = name.to_string();
    a.type_ = onnx_protobuf::attribute_proto::AttributeType::FLOAT.into();
    a.f = v;
    a
}

pub fn ints_attr(name: &str, v: &[i64]) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = name.to_string();
    a.type_ = onnx_protobuf::attribute_proto::AttributeType::INTS.into();
    a.ints = v.to_vec();
    a
}

pub fn model(
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    initializers: Vec<(&str, Tensor)>,
    opset: i64,
) -> ModelProto {
    let mut g = GraphProto::new();
    g.name = "test".into();
    g.node = nodes;
    g.input = inputs;
    g.output = outputs;
    g.initializer = initializers
        .into_iter()
        .map(|(n, t)| tensor_to_proto(n, &t))
        .collect();
    let mut m = ModelProto::new();
    m.ir_version = 8;
    let mut op = OperatorSetIdProto::new();
    op.version = opset;
    m.opset_import.push(op);
    m.graph = Some(g).into();
    m
}

pub fn model_bytes(m: &ModelProto) -> Vec<u8> {
    m.write_to_bytes().expect("a built model encodes")
}

/// A scratch folder under the target dir, fresh for each test name.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// The input and expected output tensors stored in `<dir>/test_data_set_0/`.
pub fn load_test_data(dir: &Path) -> (Vec<Tensor>, Vec<Tensor>) {
    let data = dir.join("test_data_set_0");
    let load = |prefix: &str| -> Vec<Tensor> {
        (0..)
            .map(|i| data.join(format!("{prefix}_{i}.pb")))
            .take_while(|p| p.exists())
            .map(|p| load_tensor_pb(&p).expect("test data tensor loads").1)
            .collect()
    };
    (load("input"), load("output"))
}

/// The relative tolerance for outputs of `expected`'s type: `f32_tol`, and at
/// least 2e-3 for float16 (one f16 rounding is up to 4.9e-4 relative, and the
/// reference executor rounds after every op).
pub fn tolerance(expected: &Tensor, f32_tol: f64) -> f64 {
    match expected.dtype() {
        layoutopt::graph::DType::F16 => f32_tol.max(2e-3),
        _ => f32_tol,
    }
}

/// Asserts that `actual` is `expected` to within [`tolerance`]`(expected,
/// f32_tol)` of the largest expected magnitude; `what` names the case when it
/// is not. Returns the max abs difference and that magnitude.
pub fn assert_close(expected: &Tensor, actual: &Tensor, f32_tol: f64, what: &str) -> (f64, f64) {
    let (err, mag) = max_abs_err(expected, actual);
    let tol = tolerance(expected, f32_tol);
    assert!(err <= tol * mag, "{what}: error {err} > {tol} * {mag}");
    (err, mag)
}

/// Max abs difference, and the max magnitude of the expected values.
pub fn max_abs_err(expected: &Tensor, actual: &Tensor) -> (f64, f64) {
    let (e, a) = (expected.data.to_f64(), actual.data.to_f64());
    assert_eq!(e.len(), a.len(), "element counts differ");
    let err = e
        .iter()
        .zip(&a)
        .map(|(x, y)| {
            if x == y || (x.is_nan() && y.is_nan()) {
                0.0
            } else {
                (x - y).abs()
            }
        })
        .fold(0.0, f64::max);
    let mag = e
        .iter()
        .map(|x| x.abs())
        .filter(|x| x.is_finite())
        .fold(0.0, f64::max);
    (err, mag)
}

/// The bundled model files, `models/*/model.onnx` (and `model.tflite` with
/// `tflite`), sorted.
pub fn bundled_models(tflite: bool) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    let names: &[&str] = if tflite {
        &["model.onnx", "model.tflite"]
    } else {
        &["model.onnx"]
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(root)
        .expect("models/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .flat_map(|d| names.iter().map(move |n| d.join(n)))
        .filter(|p| p.exists())
        .collect();
    files.sort();
    files
}

/// The folders of the bundled ONNX models (model.onnx beside test_data_set_0/).
pub fn bundled_onnx_dirs() -> Vec<PathBuf> {
    bundled_models(false)
        .iter()
        .filter_map(|f| f.parent().map(Path::to_path_buf))
        .collect()
}

/// `vi` with dimension `axis` made symbolic, named `param`.
pub fn symbolic(mut vi: ValueInfoProto, axis: usize, param: &str) -> ValueInfoProto {
    if let Some(type_proto::Value::TensorType(tt)) =
        vi.type_.as_mut().and_then(|t| t.value.as_mut())
    {
        tt.shape.as_mut().unwrap().dim[axis].value = Some(
            tensor_shape_proto::dimension::Value::DimParam(param.to_string()),
        );
    }
    vi
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
