//! Hostile and huge input through the command line (issue 20): every case runs
//! the CLI as a child process and asserts its exit code, a specific message, a
//! wall-time bound and a peak-memory bound (the child's maximum RSS from wait4).
//! A child past three times its time bound or twice its memory bound is killed,
//! so a regression fails the test instead of hanging or swapping the machine.
//!
//! The cases that need ONNX tooling are committed in tests/hostile/ with their
//! expectations in cases.json (written by scripts/gen_hostile.py); the others
//! are built here: FIFOs, devices, links, sparse files, truncated bundled
//! models, thread counts, output paths, unscaled integer TFLite weights, and plan
//! reports compared across runs.

use crate::bundled;
use crate::compare;
use crate::process;
use serde::Deserialize;
use std::io::Read;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One command line and what it must do.
#[derive(Clone, Debug, Deserialize)]
struct Case {
    name: String,
    class: String,
    /// Arguments of `layoutopt`; `{dir}` is the folder holding the case files.
    args: Vec<String>,
    exit: i32,
    /// Substrings stderr and stdout must contain.
    stderr: Option<String>,
    stdout: Option<String>,
    /// Wall-time bound (s) and peak-RSS bound (MB).
    seconds: f64,
    mb: u64,
    /// The largest "max abs error vs recorded output" allowed.
    #[serde(default)]
    max_error: Option<f64>,
    /// Working folder (under `{dir}`), for relative model paths.
    #[serde(default)]
    cwd: Option<String>,
    /// The CLI's cache folder (`XDG_CACHE_HOME`, under `{dir}`) instead of the
    /// user's, for cases whose plans must not see other processes' measurements.
    #[serde(default)]
    cache_home: Option<String>,
}

impl Case {
    fn new(name: &str, class: &str, args: &[&str], exit: i32, stderr: &str) -> Case {
        Case {
            name: name.into(),
            class: class.into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            exit,
            stderr: (!stderr.is_empty()).then(|| stderr.into()),
            stdout: None,
            seconds: 10.0,
            mb: 300,
            max_error: None,
            cwd: None,
            cache_home: None,
        }
    }

    /// A case whose arguments are `line` split at spaces.
    fn line(name: &str, class: &str, line: &str, exit: i32, stderr: &str) -> Case {
        let args: Vec<&str> = line.split(' ').collect();
        Case::new(name, class, &args, exit, stderr)
    }

    fn stdout(mut self, needle: &str) -> Case {
        self.stdout = Some(needle.into());
        self
    }

    fn in_dir(mut self, cwd: &str) -> Case {
        self.cwd = Some(cwd.into());
        self
    }
}

/// What the child did.
struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    seconds: f64,
    peak_mb: f64,
}

fn rss_mb(pid: i32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Runs the CLI for `case`, measuring wall time and the child's peak RSS.
fn spawn(case: &Case, dir: &Path) -> Outcome {
    let dir_text = dir.display().to_string();
    let args: Vec<String> = case
        .args
        .iter()
        .map(|a| a.replace("{dir}", &dir_text))
        .collect();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_layoutopt"));
    cmd.args(&args)
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(cwd) = &case.cwd {
        cmd.current_dir(cwd.replace("{dir}", &dir_text));
    }
    if let Some(cache) = &case.cache_home {
        cmd.env("XDG_CACHE_HOME", cache.replace("{dir}", &dir_text));
    }
    let start = Instant::now();
    // Reaped below by wait4, which also gives its resource usage.
    #[allow(clippy::zombie_processes)]
    let mut child = cmd.spawn().expect("the CLI starts");
    let pid = child.id() as i32;
    let pipe = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = r.read_to_end(&mut s);
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = pipe(Box::new(child.stdout.take().unwrap()));
    let err = pipe(Box::new(child.stderr.take().unwrap()));
    let (kill_after, kill_above) = (case.seconds * 3.0, case.mb as f64 * 2.0);
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 reaps only our own child, by its pid,
    // and the pid cannot be reused before it is reaped.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break;
        }
        assert!(r == 0, "wait4 failed for {}", case.name);
        let over_time = start.elapsed().as_secs_f64() > kill_after;
        if over_time || rss_mb(pid).is_some_and(|mb| mb > kill_above) {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let seconds = start.elapsed().as_secs_f64();
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    Outcome {
        code,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
        seconds,
        peak_mb: usage.ru_maxrss as f64 / 1024.0,
    }
}

/// Checks one case; the error names it and says what went wrong.
fn check(case: &Case, dir: &Path) -> Result<Outcome, String> {
    let o = spawn(case, dir);
    let fail = |what: String| {
        Err(format!(
            "[{}] {}: {what}\n  stderr: {}\n  stdout tail: {}",
            case.class,
            case.name,
            o.stderr.trim(),
            o.stdout.lines().last().unwrap_or("")
        ))
    };
    if o.code != Some(case.exit) {
        return fail(format!("exit {:?}, expected {}", o.code, case.exit));
    }
    if o.stderr.contains("panicked") {
        return fail("panicked".into());
    }
    if let Some(n) = case.stderr.as_ref().filter(|n| !o.stderr.contains(*n)) {
        return fail(format!("stderr lacks {n:?}"));
    }
    if let Some(n) = case.stdout.as_ref().filter(|n| !o.stdout.contains(*n)) {
        return fail(format!("stdout lacks {n:?}"));
    }
    if o.seconds > case.seconds {
        return fail(format!(
            "took {:.1} s (bound {} s)",
            o.seconds, case.seconds
        ));
    }
    if o.peak_mb > case.mb as f64 {
        return fail(format!(
            "peaked at {:.0} MB (bound {} MB)",
            o.peak_mb, case.mb
        ));
    }
    if let Some(max) = case.max_error {
        let err: Option<f64> = o.stdout.lines().find_map(|l| {
            l.trim()
                .strip_prefix("max abs error vs recorded output: ")?
                .parse()
                .ok()
        });
        match err {
            Some(e) if e <= max => {}
            other => return fail(format!("error vs recorded output {other:?}, bound {max}")),
        }
    }
    Ok(o)
}

fn run_cases(cases: &[Case], dir: &Path) -> usize {
    let failures: Vec<String> = cases.iter().filter_map(|c| check(c, dir).err()).collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    cases.len()
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A private copy of tests/hostile/ (the tests add FIFOs and links to it).
fn workdir(name: &str) -> PathBuf {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            let target = to.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                copy(&e.path(), &target);
            } else {
                std::fs::copy(e.path(), target).unwrap();
            }
        }
    }
    let dir = process::scratch_dir(name);
    copy(&root().join("tests/hostile"), &dir);
    dir
}

fn committed_cases() -> Vec<Case> {
    let text = std::fs::read_to_string(root().join("tests/hostile/cases.json")).unwrap();
    serde_json::from_str(&text).expect("cases.json parses")
}

fn committed(class: &str) -> Vec<Case> {
    committed_cases()
        .into_iter()
        .filter(|c| c.class == class)
        .collect()
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

#[test]
fn no_input_panics_or_aborts() {
    let n = run_cases(&committed("no panic"), &workdir("hostile_panics"));
    assert!(n >= 45, "{n} cases");
}

#[test]
fn every_planner_plans_what_the_reference_runs() {
    let n = run_cases(&committed("planners"), &workdir("hostile_planners"));
    assert!(n >= 15, "{n} cases");
}

#[test]
fn recorded_outputs_are_validated_and_nan_is_reported() {
    let n = run_cases(&committed("recorded outputs"), &workdir("hostile_recorded"));
    assert!(n >= 7, "{n} cases");
}

/// Paths that are not regular files, files past the memory budget, external
/// data out of bounds: refused before anything is read.
#[test]
fn reads_are_bounded() {
    let dir = workdir("hostile_reads");
    let d = |p: &str| dir.join(p);
    mkfifo(&d("fifo.onnx"));
    mkfifo(&d("fifo.tflite"));
    mkfifo(&d("fifo.npy"));
    mkfifo(&d("fifo.npz"));
    mkfifo(&d("ext_fifo/w.bin"));
    symlink("/dev/zero", d("zero.onnx")).unwrap();
    symlink("/dev/zero", d("ext_to_dev_zero/w.bin")).unwrap();
    std::fs::create_dir(d("ext_directory/w.bin")).unwrap();
    std::fs::create_dir(d("dir.onnx")).unwrap();
    std::fs::write(d("empty.onnx"), b"").unwrap();
    // Sparse: 1 TiB on paper, nothing on disk.
    let huge = std::fs::File::create(d("huge.onnx")).unwrap();
    huge.set_len(1 << 40).unwrap();
    mkfifo(&d("rules_fifo.rules"));
    std::fs::create_dir(d("rules")).unwrap();
    symlink(d("rules_fifo.rules"), d("rules/fifo.rules")).unwrap();
    let not_regular = "not a regular file";
    let c = |name: &str, line: &str, exit: i32, msg: &str| {
        Case::line(name, "bounded reads", line, exit, msg)
    };
    let cases = vec![
        c("model_fifo", "run {dir}/fifo.onnx", 1, not_regular),
        c("tflite_fifo", "inspect {dir}/fifo.tflite", 1, not_regular),
        c("model_dev_zero", "run /dev/zero", 1, not_regular),
        c("model_dev_urandom", "inspect /dev/urandom", 1, not_regular),
        c(
            "model_link_to_dev_zero",
            "plan {dir}/zero.onnx",
            1,
            not_regular,
        ),
        c(
            "model_directory",
            "export {dir}/dir.onnx -o {dir}/o.onnx",
            1,
            not_regular,
        ),
        c("model_missing", "run {dir}/missing.onnx", 1, "No such file"),
        c("model_empty", "run {dir}/empty.onnx", 1, "has no graph"),
        c(
            "model_sparse_1_tib",
            "inspect {dir}/huge.onnx",
            1,
            "memory budget",
        ),
        c(
            "input_fifo_npy",
            "run {dir}/tiny.onnx --input x={dir}/fifo.npy",
            1,
            not_regular,
        ),
        c(
            "input_fifo_bare",
            "run {dir}/tiny.onnx --input {dir}/fifo.npy",
            1,
            not_regular,
        ),
        c(
            "input_fifo_npz",
            "run {dir}/tiny.onnx --input {dir}/fifo.npz",
            1,
            not_regular,
        ),
        c(
            "input_dev_zero",
            "run {dir}/tiny.onnx --input x=/dev/zero",
            1,
            not_regular,
        ),
        c(
            "input_directory",
            "run {dir}/tiny.onnx --input x={dir}/dir.onnx",
            1,
            not_regular,
        ),
        c(
            "external_fifo",
            "run {dir}/ext_fifo/model.onnx",
            1,
            "is not a regular file",
        ),
        c(
            "external_link_to_dev_zero",
            "run {dir}/ext_to_dev_zero/model.onnx",
            1,
            "outside the model's folder",
        ),
        c(
            "external_directory",
            "run {dir}/ext_directory/model.onnx",
            1,
            "is not a regular file",
        ),
        c(
            "external_absolute",
            "run {dir}/ext_absolute/model.onnx",
            1,
            "leaves the model's folder",
        ),
        c(
            "external_parent",
            "run {dir}/ext_parent/model.onnx",
            1,
            "leaves the model's folder",
        ),
        c("external_beside_relative_model", "run model.onnx", 0, "")
            .stdout("output 'y' f32[2, 4]")
            .in_dir("{dir}/ext_ok"),
        c(
            "external_beside_absolute_model",
            "run {dir}/ext_ok/model.onnx",
            0,
            "",
        )
        .stdout("output 'y' f32[2, 4]"),
        c(
            "rules_folder_with_fifo",
            "plan {dir}/tiny.onnx --rules {dir}/rules",
            0,
            "",
        ),
    ];
    let n = run_cases(&cases, &dir);
    assert!(n >= 20, "{n} cases");
}

#[test]
fn thread_counts_are_checked() {
    let dir = workdir("hostile_threads");
    let max = 4 * std::thread::available_parallelism().map_or(1, |n| n.get());
    let (max_s, over) = (max.to_string(), (max + 1).to_string());
    // The model goes right after the subcommand.
    let c = |name: &str, line: &str, exit: i32, msg: &str| {
        let line = line.replacen(' ', " {dir}/tiny.onnx ", 1);
        Case::line(name, "threads", &line, exit, msg)
    };
    let not_count = "is not a thread count";
    let u64_max = "18446744073709551615";
    let cases = vec![
        c("run_threads_0_all_cores", "run --threads 0", 0, ""),
        c(
            "run_threads_at_max",
            &format!("run --threads {max_s}"),
            0,
            "",
        ),
        c(
            "run_threads_over_max",
            &format!("run --threads {over}"),
            2,
            not_count,
        ),
        c("run_threads_100000", "run --threads 100000", 2, not_count),
        c(
            "run_threads_u64_max",
            &format!("run --threads {u64_max}"),
            2,
            not_count,
        ),
        c("run_threads_negative", "run --threads -1", 2, ""),
        c(
            "bench_threads_100000",
            "bench --threads 100000",
            2,
            not_count,
        ),
        c(
            "bench_threads_0",
            "bench --threads 0 --runs 3 --warmup 0",
            0,
            "",
        ),
        c(
            "bench_runs_u64_max",
            &format!("bench --runs {u64_max}"),
            2,
            "--runs",
        ),
        c("bench_runs_0", "bench --runs 0", 2, "--runs"),
        c(
            "bench_warmup_u64_max",
            &format!("bench --warmup {u64_max}"),
            2,
            "--warmup",
        ),
    ];
    let n = run_cases(&cases, &dir);
    assert!(n >= 10, "{n} cases");
}

/// Files cut short or with lengths past their end are errors, never a model
/// with fewer parts.
#[test]
fn truncated_files_are_errors() {
    let dir = workdir("hostile_truncated");
    let resnet = std::fs::read(root().join("models/resnet_small/model.onnx")).unwrap();
    let tflite = std::fs::read(root().join("models/tflite_cnn/model.tflite")).unwrap();
    let tiny = std::fs::read(root().join("tests/hostile/tiny.onnx")).unwrap();
    let mut cases = Vec::new();
    for cut in [1, 14, 100, 1000, resnet.len() / 2, resnet.len() - 1000] {
        let name = format!("resnet_cut_{cut}_short");
        std::fs::write(
            dir.join(format!("{name}.onnx")),
            &resnet[..resnet.len() - cut],
        )
        .unwrap();
        let args = ["run", &format!("{{dir}}/{name}.onnx")];
        cases.push(Case::new(
            &name,
            "truncated",
            &args,
            1,
            "not a valid ONNX model",
        ));
    }
    for cut in [1, 100, tflite.len() / 2] {
        let name = format!("tflite_cut_{cut}_short");
        std::fs::write(
            dir.join(format!("{name}.tflite")),
            &tflite[..tflite.len() - cut],
        )
        .unwrap();
        let args = ["run", &format!("{{dir}}/{name}.tflite")];
        cases.push(Case::new(&name, "truncated", &args, 1, "tflite"));
    }
    // A graph field (7, length-delimited) claiming 100 bytes where 3 remain.
    let mut nested = tiny.clone();
    nested.extend([0x3a, 100, 0x0a, 0x01, b'g']);
    std::fs::write(dir.join("nested_length_past_end.onnx"), nested).unwrap();
    cases.push(Case::new(
        "nested_length_past_end",
        "truncated",
        &["inspect", "{dir}/nested_length_past_end.onnx"],
        1,
        "a length prefix runs past the end of the file",
    ));
    let garbage: Vec<u8> = (0u32..4096)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(dir.join("garbage.onnx"), garbage).unwrap();
    cases.push(Case::new(
        "garbage",
        "truncated",
        &["run", "{dir}/garbage.onnx"],
        1,
        "not a valid ONNX model",
    ));
    let n = run_cases(&cases, &dir);
    assert!(n >= 10, "{n} cases");
}

/// Protobuf wire format: a varint, and a length-delimited field.
fn varint(mut n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
    out
}

fn field(number: u64, body: &[u8]) -> Vec<u8> {
    let mut out = varint(number << 3 | 2);
    out.extend(varint(body.len() as u64));
    out.extend(body);
    out
}

/// A model (`ir_version` 8, no opset) whose graph holds `nodes`.
fn model_of_nodes(nodes: &[u8]) -> Vec<u8> {
    let mut model = vec![0x08, 0x08];
    model.extend(field(7, nodes));
    model
}

/// Many nodes are counted from the file before the decoder allocates for each:
/// a node without an op type is refused at once, and a node count past the
/// memory limit before it is decoded.
#[test]
fn node_lists_are_checked_before_decoding() {
    let dir = workdir("hostile_node_lists");
    // 10M empty nodes, 20 MB: decoded, about 2.3 GB of empty NodeProtos.
    // (Buffers are dropped before the children start: a child's peak RSS
    // counts this process's pages at the fork.)
    let empty = field(1, &[]).repeat(10_000_000);
    std::fs::write(dir.join("empty_nodes.onnx"), model_of_nodes(&empty)).unwrap();
    drop(empty);
    // An If whose then-branch holds an empty node.
    let mut branch_attr = field(1, b"then_branch");
    branch_attr.extend(field(6, &field(1, &[])));
    let mut if_node = field(4, b"If");
    if_node.extend(field(5, &branch_attr));
    std::fs::write(
        dir.join("empty_subgraph_node.onnx"),
        model_of_nodes(&field(1, &if_node)),
    )
    .unwrap();
    // 3M named Relu nodes, 40 MB: valid nodes, too many for a 1 GiB limit.
    let mut relus = Vec::new();
    for i in 0..3_000_000 {
        let mut node = field(3, format!("r{i}").as_bytes());
        node.extend(field(4, b"Relu"));
        relus.extend(field(1, &node));
    }
    std::fs::write(dir.join("many_relus.onnx"), model_of_nodes(&relus)).unwrap();
    drop(relus);
    let cases = [
        Case::new(
            "ten_million_empty_nodes",
            "huge",
            &["inspect", "{dir}/empty_nodes.onnx"],
            1,
            "node #0 (unnamed) of the graph has no op_type",
        ),
        Case::new(
            "empty_node_in_a_subgraph",
            "huge",
            &["run", "{dir}/empty_subgraph_node.onnx"],
            1,
            "node #0 (unnamed) of a subgraph has no op_type",
        ),
        Case::new(
            "three_million_nodes_past_the_limit",
            "huge",
            &["inspect", "{dir}/many_relus.onnx", "--memory-limit", "1G"],
            1,
            "importing its 3000000 nodes would need",
        ),
    ];
    assert_eq!(run_cases(&cases, &dir), cases.len());
}

/// `-o` never replaces the input model, and writes through a symbolic link
/// only with --force.
#[test]
fn outputs_are_written_only_where_asked() {
    let dir = workdir("hostile_outputs");
    std::fs::hard_link(dir.join("tiny.onnx"), dir.join("tiny_hard_link.onnx")).unwrap();
    symlink(dir.join("target.onnx"), dir.join("link.onnx")).unwrap();
    symlink(dir.join("forced_target.onnx"), dir.join("forced_link.onnx")).unwrap();
    let input = "is the input model: refusing to overwrite it";
    let c =
        |name: &str, line: &str, exit: i32, msg: &str| Case::line(name, "outputs", line, exit, msg);
    let cases = vec![
        c(
            "export_onto_input",
            "export {dir}/tiny.onnx -o {dir}/tiny.onnx",
            1,
            input,
        ),
        c(
            "explore_onto_input",
            "explore {dir}/tiny.onnx -o {dir}/tiny.onnx",
            1,
            input,
        ),
        c(
            "export_onto_hard_link",
            "export {dir}/tiny.onnx -o {dir}/tiny_hard_link.onnx",
            1,
            input,
        ),
        c(
            "export_through_symlink",
            "export {dir}/tiny.onnx -o {dir}/link.onnx",
            1,
            "is a symbolic link",
        ),
        c(
            "export_through_symlink_forced",
            "export {dir}/tiny.onnx -o {dir}/forced_link.onnx --force",
            0,
            "",
        ),
        c(
            "explore_onto_input_forced",
            "explore {dir}/tiny.onnx -o {dir}/tiny.onnx --force",
            1,
            input,
        ),
    ];
    let n = run_cases(&cases, &dir);
    assert!(n >= 6, "{n} cases");
    let tiny = std::fs::read(root().join("tests/hostile/tiny.onnx")).unwrap();
    assert_eq!(
        std::fs::read(dir.join("tiny.onnx")).unwrap(),
        tiny,
        "the input changed"
    );
    assert!(
        !dir.join("target.onnx").exists(),
        "written through the link"
    );
    assert!(
        dir.join("forced_target.onnx").exists(),
        "--force did not write the target"
    );
}

/// Integer weights without a quantization scale, read as float, are refused.
#[test]
fn unscaled_integer_tflite_is_refused() {
    use crate::tfl_conv;
    use crate::tflite::INT8;
    let dir = workdir("hostile_unscaled");
    let mut int8 = tfl_conv(4, 3, 1);
    int8.tensors[1].ttype = INT8;
    int8.tensors[1].data = Some(vec![1u8; 9]);
    let mut uint8 = int8.clone();
    uint8.tensors[1].ttype = 3;
    let mut cases = Vec::new();
    for (name, spec) in [("int8_weights", &int8), ("uint8_weights", &uint8)] {
        std::fs::write(dir.join(format!("{name}.tflite")), spec.build()).unwrap();
        let args = ["run", &format!("{{dir}}/{name}.tflite")];
        let msg = "no quantization scale";
        cases.push(Case::new(name, "unscaled integer tflite", &args, 1, msg));
    }
    let n = run_cases(&cases, &dir);
    assert!(n >= 2, "{n} cases");
}

/// Sparse weights whose layout points outside the dense tensor, or whose dense form is
/// far over the memory budget, and MediaPipe's custom ops with malformed option
/// buffers: each is a clear error naming the layer, within the time
/// and memory bounds.
#[test]
fn hostile_sparse_weights_and_custom_options_are_errors() {
    use crate::tflite::{densify_fc, LevelSpec, ModelSpec, OpSpec, SparsitySpec, TensorSpec};
    let dir = workdir("hostile_tflite_sparse_custom");
    // x [1, K] → FULLY_CONNECTED by the DENSIFY of sparse weights [N, K].
    let densify = |shape: [i32; 2], stored: &[f32], levels: Vec<LevelSpec>| {
        densify_fc(shape, stored, SparsitySpec::new(levels))
    };
    let csr = |segments: &[i32], indices: &[i32]| LevelSpec::Csr {
        segments: segments.to_vec(),
        indices: indices.to_vec(),
    };
    let rows = || LevelSpec::Dense(2);
    let upsample = |options: &[u8]| {
        let tensors = vec![
            TensorSpec::f32("x", &[1, 2, 2, 1]),
            TensorSpec::f32_const("w", &[1, 2, 2, 1], &[1.0; 4]),
            TensorSpec::f32_const("b", &[1], &[0.0]),
            TensorSpec::f32("upsampled", &[1, 4, 4, 1]),
        ];
        let op = OpSpec::custom("Convolution2DTransposeBias", options, &[0, 1, 2], &[3]);
        ModelSpec::new(tensors, vec![op], &[0], &[3])
    };
    // MaxPoolingWithArgmax2D reads six int32 options.
    let pool = |options: &[u8]| {
        let tensors = vec![
            TensorSpec::f32("x", &[1, 4, 4, 1]),
            TensorSpec::f32("pooled", &[1, 2, 2, 1]),
            TensorSpec::f32("indices", &[1, 2, 2, 1]),
        ];
        let op = OpSpec::custom("MaxPoolingWithArgmax2D", options, &[0], &[1, 2]);
        ModelSpec::new(tensors, vec![op], &[0], &[1, 2])
    };
    let huge_stride: Vec<u8> = [1, i32::MAX, i32::MAX]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let densify_layer = "layer 'w_dense' (DENSIFY #0)";
    let custom_layer = "layer 'upsampled' (CUSTOM:Convolution2DTransposeBias #0)";
    let mut cases = Vec::new();
    for (name, spec, layer, msg) in [
        (
            "sparse_index_outside",
            densify(
                [2, 4],
                &[1.0, 2.0],
                vec![rows(), csr(&[0, 1, 2], &[1, 1 << 30])],
            ),
            densify_layer,
            "outside 0..4",
        ),
        (
            "sparse_segment_outside",
            densify(
                [2, 4],
                &[1.0, 2.0],
                vec![rows(), csr(&[0, 1, i32::MAX], &[1, 2])],
            ),
            densify_layer,
            "not non-decreasing",
        ),
        (
            "sparse_negative_segment",
            densify([2, 4], &[1.0, 2.0], vec![rows(), csr(&[0, -1, 2], &[1, 2])]),
            densify_layer,
            "not non-decreasing",
        ),
        (
            // One stored value of a 2^21 x 2^21 matrix: 16 TiB dense.
            "sparse_dense_form_huge",
            densify(
                [1 << 21, 1 << 21],
                &[1.0],
                vec![LevelSpec::Dense(1 << 21), csr(&[0, 1], &[0])],
            ),
            densify_layer,
            "memory limit",
        ),
        (
            "custom_options_short",
            upsample(&[1, 0, 0, 0, 2]),
            custom_layer,
            "custom options are 5 bytes",
        ),
        (
            "custom_options_missing",
            upsample(&[]),
            custom_layer,
            "custom options are 0 bytes",
        ),
        (
            "custom_pool_options_short",
            pool(&[1, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0]),
            "layer 'pooled' (CUSTOM:MaxPoolingWithArgmax2D #0)",
            "custom options are 12 bytes, but MaxPoolingWithArgmax2D needs 24",
        ),
        (
            "custom_stride_huge",
            upsample(&huge_stride),
            custom_layer,
            "overflows",
        ),
    ] {
        std::fs::write(dir.join(format!("{name}.tflite")), spec.build()).unwrap();
        let args = ["run", &format!("{{dir}}/{name}.tflite")];
        cases.push(Case::new(name, "hostile tflite", &args, 1, msg));
        cases.push(Case::new(name, "hostile tflite", &args, 1, layer));
    }
    let n = run_cases(&cases, &dir);
    assert!(n >= 16, "{n} cases");
}

/// `plan --json` is byte-identical across processes once `timings` is dropped
/// (given the same measured kernel times).
#[test]
fn plan_json_is_deterministic_across_runs() {
    let dir = workdir("hostile_determinism");
    let mut compared = 0;
    for model in bundled::bundled_onnx_dirs() {
        for planner in ["local", "greedy", "global"] {
            let path = model.join("model.onnx").display().to_string();
            let name = format!("{}_{planner}", model.file_name().unwrap().to_string_lossy());
            let mut case = Case::new(
                &name,
                "determinism",
                &["plan", &path, "--json", "--planner", planner],
                0,
                "",
            );
            case.stdout = Some("\"timings\"".into());
            // The plan depends on the convolution times measured on this
            // machine: both runs read the ones the first run measured, which
            // no concurrent test process can overwrite in a cache of their own.
            case.cache_home = Some(format!("{{dir}}/cache_{name}"));
            let [a, b] = [(); 2].map(|_| {
                let o = check(&case, &dir).unwrap_or_else(|e| panic!("{e}"));
                let mut v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
                v.as_object_mut().unwrap().remove("timings");
                serde_json::to_string(&v).unwrap()
            });
            assert_eq!(a, b, "{name}: plan reports differ between runs");
            compared += 1;
        }
    }
    assert!(compared >= 9, "{compared} plans compared");
}

/// A model past protobuf's 2 GiB is written with external data; here the
/// threshold is lowered so that a small model takes that path, and the result
/// imports back and computes the same.
#[test]
fn large_exports_keep_tensors_as_external_data() {
    use layoutopt::frontend::onnx::{load_onnx, ImportOptions};
    let dir = process::scratch_dir("hostile_external_export");
    let src = root().join("models/resnet_small/model.onnx");
    let g = load_onnx(&src, &ImportOptions::default()).unwrap();
    let m = layoutopt::export::export_model(&g, &Default::default()).unwrap();
    let out = dir.join("out.onnx");
    let data = layoutopt::export::write_model(m, &out, 0).unwrap();
    assert_eq!(data, Some(dir.join("out.onnx.data")));
    assert!(
        std::fs::metadata(&out).unwrap().len() < 64 * 1024,
        "tensors left inline"
    );
    let back = load_onnx(&out, &ImportOptions::default()).unwrap();
    let (inputs, expected) = bundled::load_test_data(&root().join("models/resnet_small"));
    let got = layoutopt::reference::run(&back, &inputs).unwrap();
    let (err, _) = compare::max_abs_err(&expected[0], &got[0]);
    assert!(err < 1e-3, "error {err} after the round trip");
}

#[test]
fn committed_case_names_are_distinct() {
    let mut names: Vec<String> = committed_cases().into_iter().map(|c| c.name).collect();
    let n = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), n, "duplicate names in cases.json");
}
