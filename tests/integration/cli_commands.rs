//! The command line end to end: every command on bundled models, `--help`
//! everywhere, exit codes (0 ok, 1 model/stage errors, 2 usage errors), errors
//! on stderr, and never a panic (run with RUST_BACKTRACE=1, stderr checked).

use crate::support::bundled::load_test_data;
use crate::support::compare::max_abs_err;
use crate::support::process;
use crate::support::process::{layoutopt, layoutopt_json, layoutopt_ok, scratch_dir, CliOut};
use crate::support::text::assert_mentions;
use std::path::{Path, PathBuf};
use std::process::Command;

fn model(name: &str, file: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("models")
        .join(name)
        .join(file)
        .display()
        .to_string()
}

fn resnet() -> String {
    model("resnet_small", "model.onnx")
}

/// The stdout of a successful `layoutopt {command} {resnet} {flags}`.
fn on_resnet(command: &str, flags: &[&str]) -> String {
    let resnet = resnet();
    let mut args = vec![command, &resnet];
    args.extend(flags);
    layoutopt_ok(&args)
}

const COMMANDS: [&str; 7] = [
    "inspect", "plan", "compare", "run", "bench", "export", "explore",
];

#[test]
fn help_on_every_command() {
    let top = layoutopt(&["--help"]);
    assert_eq!(top.code, 0);
    for c in COMMANDS {
        assert!(top.stdout.contains(c), "{c} missing from --help");
        let h = layoutopt(&[c, "--help"]);
        assert_eq!(h.code, 0, "{c} --help: {}", h.stderr);
        assert!(h.stdout.contains("Usage: layoutopt"), "{c}: {}", h.stdout);
        assert!(h.stdout.contains("MODEL") || h.stdout.contains("<MODEL>"));
    }
    let export = layoutopt(&["export", "--help"]).stdout;
    assert!(export.contains("--output"));
    // Each purpose of an export is named and explained.
    assert!(export.contains("--for <PURPOSE>"), "{export}");
    assert!(
        export.contains("verification: the plan's layouts"),
        "{export}"
    );
    assert!(
        export.contains("onnxruntime:  the source's NCHW layouts"),
        "{export}"
    );
}

#[test]
fn export_for_onnxruntime_writes_a_model_to_run_and_refuses_a_planner() {
    let dir = process::scratch_dir("cli_export_for");
    let (m, out) = (resnet(), dir.join("ort.onnx").display().to_string());
    let o = layoutopt(&["export", &m, "-o", &out, "--for", "onnxruntime"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("model for onnxruntime"), "{}", o.stdout);
    assert!(std::path::Path::new(&out).exists());
    // --planner and --target choose the verification plan: not silently ignored.
    for extra in [["--planner", "local"], ["--target", "nhwc"]] {
        let mut args = vec!["export", &m, "-o", &out, "--for", "onnxruntime"];
        args.extend(extra);
        let o = layoutopt(&args);
        assert_eq!(o.code, 1, "{args:?}");
        assert!(o
            .stderr
            .contains("--for onnxruntime keeps the source's layouts"));
    }
    let o = layoutopt(&["export", &m, "-o", &out, "--for", "speed"]);
    assert_eq!(o.code, 2, "{}", o.stderr);
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        vec![],
        vec!["frobnicate"],
        vec!["plan"],
        vec!["plan", "m.onnx", "--planner", "best"],
        vec!["plan", "m.onnx", "--target", "nchw0c"],
        vec!["export", "m.onnx"],
        vec!["bench", "m.onnx", "--iterations", "0"],
        // Counts that would start 100,000 threads or allocate 2^64 timings.
        vec!["bench", "m.onnx", "--threads", "100000"],
        vec!["bench", "m.onnx", "--threads", "18446744073709551615"],
        vec!["bench", "m.onnx", "--runs", "18446744073709551615"],
        vec!["bench", "m.onnx", "--warmup", "99999999999"],
        // A re-probe of the peaks only makes sense for a profile.
        vec!["bench", "m.onnx", "--reprobe"],
        vec!["run", "m.onnx", "--threads", "100000"],
    ] {
        let o = layoutopt(&args);
        assert_eq!(o.code, 2, "{args:?}: {}", o.stderr);
        assert!(o.stdout.is_empty(), "{args:?}: usage errors go to stderr");
        assert!(!o.stderr.is_empty());
    }
    let o = layoutopt(&["plan", "m.onnx", "--planner", "best"]);
    assert!(o.stderr.contains("global"), "{}", o.stderr);
    let o = layoutopt(&["run", "m.onnx", "--threads", "100000"]);
    assert!(o.stderr.contains("4 per core"), "{}", o.stderr);
}

#[test]
fn model_errors_exit_1_and_name_the_file() {
    let dir = scratch_dir("cli_model_errors");
    let junk = dir.join("junk.onnx");
    std::fs::write(&junk, b"this is not a model").unwrap();
    let junk_tflite = dir.join("junk.tflite");
    std::fs::write(&junk_tflite, b"short").unwrap();
    let missing = dir.join("missing.onnx");
    for (cmd, file) in [
        ("inspect", &missing),
        ("inspect", &junk),
        ("plan", &junk),
        ("compare", &junk_tflite),
        ("run", &missing),
        ("bench", &junk),
        ("explore", &junk),
    ] {
        let f = file.display().to_string();
        let args: Vec<&str> = if cmd == "explore" {
            vec![cmd, &f, "-o", "x.html"]
        } else {
            vec![cmd, &f]
        };
        let o = layoutopt(&args);
        assert_eq!(o.code, 1, "{args:?}: {}", o.stderr);
        assert!(o.stderr.starts_with("error: "), "{}", o.stderr);
        assert!(o.stderr.contains(&f), "{args:?}: {}", o.stderr);
        assert!(o.stdout.is_empty());
    }
    // Writing into a folder that does not exist.
    let out = dir.join("no/such/dir/out.onnx").display().to_string();
    let o = layoutopt(&["export", &resnet(), "-o", &out]);
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("cannot write"), "{}", o.stderr);
}

#[test]
fn inspect_lists_ops_shapes_layouts_and_spans() {
    let o = layoutopt(&["inspect", &resnet()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    // resnet_small: 8 Conv, 8 BatchNormalization, 7 Relu, 3 Add, ... (models/README.md).
    assert!(o.stdout.contains("Conv 8"), "{}", o.stdout);
    assert!(o.stdout.contains("BatchNormalization 8"));
    assert!(o.stdout.contains("Relu 7"));
    assert!(o.stdout.contains("f32[1, 3, 32, 32]"));
    assert!(o.stdout.contains("row-major"));
    assert!(o.stdout.contains("model.onnx: layer '"));
    let t = layoutopt(&["inspect", &model("tflite_cnn", "model.tflite")]);
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert!(t.stdout.contains("model.tflite: layer '"));
    assert!(t.stdout.contains("Conv"));
}

#[test]
fn plan_prints_text_and_json() {
    let text = on_resnet("plan", &["--planner", "global", "--target", "nchw16c"]);
    assert!(text.starts_with("plan of "), "{text}");
    assert!(text.contains("'global' for NCHW16c"), "{text}");
    let v = layoutopt_json(&[
        "plan",
        &resnet(),
        "--planner",
        "keep",
        "--target",
        "nhwc",
        "--json",
    ]);
    assert_eq!(v["planner"], "keep");
    assert_eq!(v["target"], "NHWC");
    assert_eq!(v["transform_count"], 0); // keep leaves every tensor row-major
    layoutopt_json(&["plan", &model("tflite_cnn", "model.tflite"), "--json"]);
    // Each convolution's algorithm, with the Winograd sizes' errors.
    let v = layoutopt_json(&["plan", &resnet(), "--json", "--conv-algo", "winograd"]);
    let convs = v["timings"]["conv_algorithms"].as_array().unwrap();
    assert!(!convs.is_empty(), "{v}");
    let winograd = convs
        .iter()
        .filter(|c| c["algorithm"].as_str().unwrap().starts_with("winograd-"))
        .inspect(|c| {
            let error = &c["relative_error"][c["algorithm"].as_str().unwrap()];
            assert!(error.as_f64().unwrap() <= 1e-5, "{c}");
        })
        .count();
    assert!(winograd > 0, "{v}");
}

#[test]
fn compare_has_a_row_per_planner() {
    let o = layoutopt(&["compare", &resnet(), "--target", "nchw8c", "--measure"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert!(lines[0].contains("bytes moved") && lines[0].contains("compile (ms)"));
    for (line, planner) in lines[1..].iter().zip(["keep", "local", "greedy", "global"]) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols[0], planner);
        assert_eq!(cols.len(), 9, "{line}");
        // Measured: the compile time, the predicted run and the median run, in ms.
        for col in &cols[6..] {
            assert!(col.parse::<f64>().unwrap() > 0.0, "{line}");
        }
    }
    assert_eq!(lines.len(), 6);
    assert!(lines[5].contains("the median of 10"), "{}", lines[5]);
    // keep moves nothing.
    assert_eq!(lines[1].split_whitespace().nth(1), Some("0"));
}

#[test]
fn run_matches_the_recorded_outputs() {
    for (name, file) in [
        ("resnet_small", "model.onnx"),
        ("tflite_ops", "model.tflite"),
    ] {
        let o = layoutopt(&["run", &model(name, file), "--target", "nchw16c"]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert!(o.stdout.contains("native runtime"), "{}", o.stdout);
        let err: f64 = o
            .stdout
            .lines()
            .find_map(|l| l.trim().strip_prefix("max abs error vs recorded output: "))
            .unwrap_or_else(|| panic!("{}", o.stdout))
            .parse()
            .unwrap();
        assert!(err < 1e-4, "{name}: {err}");
    }
}

/// The process's one machine context starts one worker pool, which
/// calibration, planning with measured costs, compiling and the run share,
/// whatever thread count (0: one per core) the run asks for.
#[test]
fn run_starts_exactly_one_worker_pool() {
    for threads in ["0", "1", "3"] {
        let o = layoutopt(&["run", &resnet(), "--threads", threads, "--json"]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
        assert_eq!(v["execution"]["worker_pools"], 1, "--threads {threads}");
    }
}

#[test]
fn bench_times_the_runs() {
    let text = on_resnet("bench", &["--iterations", "2", "--planner", "greedy"]);
    assert!(text.contains("latency over 2 runs"), "{text}");
    assert!(text.contains("p50"), "{text}");
}

#[test]
fn export_writes_a_model_our_importer_runs() {
    use layoutopt::frontend::onnx::{load_onnx, ImportOptions};
    let dir = scratch_dir("cli_export");
    for (name, file) in [
        ("mobilenet_small", "model.onnx"),
        ("tflite_cnn", "model.tflite"),
    ] {
        let out: PathBuf = dir.join(format!("{name}.onnx"));
        let o = layoutopt(&[
            "export",
            &model(name, file),
            "-o",
            &out.display().to_string(),
            "--target",
            "nchw16c",
        ]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert!(o.stdout.contains("written to"), "{}", o.stdout);
        let g = load_onnx(&out, &ImportOptions::default()).unwrap();
        let (inputs, expected) = load_test_data(Path::new(&model(name, file)).parent().unwrap());
        let outputs = layoutopt::reference::run(&g, &inputs).unwrap();
        let (err, mag) = max_abs_err(&expected[0], &outputs[0]);
        assert!(err <= 1e-4 * mag, "{name}: {err}");
    }
}

#[test]
fn explore_writes_the_page() {
    let dir = scratch_dir("cli_explore");
    let out = dir.join("report.html");
    let o = layoutopt(&[
        "explore",
        &resnet(),
        "-o",
        &out.display().to_string(),
        "--target",
        "nchw16c",
        "--against",
        "keep",
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(html.contains(r#"<section class="plan" id="plan0"><h2>global"#));
    assert!(html.contains(r#"<section class="plan" id="plan1"><h2>keep"#));
    // Self-contained: nothing to fetch.
    for needle in ["src=", "href=\"http", "@import", "url(http"] {
        assert!(!html.contains(needle), "{needle}");
    }
}

/// A binary copied away from the source tree still rewrites with its built-in
/// rules; `--rules` swaps in another folder, and a folder without rules is a
/// warning, never a silent plan without rewriting.
#[test]
fn a_copied_binary_plans_with_its_built_in_rules() {
    let dir = std::env::temp_dir().join(format!("layoutopt-copied-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("layoutopt");
    std::fs::copy(env!("CARGO_BIN_EXE_layoutopt"), &exe).unwrap();
    let model = std::fs::canonicalize(resnet()).unwrap();
    let run = |extra: &[&str]| {
        // A child forked by another test while the copy was open for writing holds
        // the file open until it execs: running it then fails with ETXTBSY, briefly.
        let mut tries = 0;
        let o = loop {
            match Command::new(&exe)
                .current_dir(&dir)
                .env_remove("LAYOUTOPT_RULES")
                .args(["plan", model.to_str().unwrap(), "--json"])
                .args(extra)
                .output()
            {
                Err(e) if e.raw_os_error() == Some(26) && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                other => break other.unwrap(),
            }
        };
        let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&o.stderr));
        });
        (
            json["rewrite"].clone(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    };
    let (rewrite, stderr) = run(&[]);
    assert_eq!(rewrite["skipped"], false, "{rewrite} {stderr}");
    assert_eq!(rewrite["applied"], true, "{rewrite} {stderr}");
    assert!(rewrite["iterations"].as_u64().unwrap() >= 1, "{rewrite}");
    assert!(!stderr.contains("warning"), "{stderr}");

    let empty = dir.join("no-rules");
    std::fs::create_dir_all(&empty).unwrap();
    std::fs::write(empty.join("bad.rules"), "broken line without an arrow\n").unwrap();
    let (rewrite, stderr) = run(&["--rules", empty.to_str().unwrap()]);
    assert_eq!(rewrite["skipped"], true, "{rewrite}");
    assert_mentions(
        &stderr,
        &["warning: e-graph rewriting skipped", "bad.rules:1"],
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Paths that are not regular files are refused before they are opened: a FIFO
/// would block the read forever and a device would never end.
#[test]
fn non_regular_model_paths_are_refused_at_once() {
    let dir = scratch_dir("cli_non_regular");
    let fifo = dir.join("model.onnx");
    let made = Command::new("mkfifo").arg(&fifo).status();
    let link = dir.join("zero.onnx");
    std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
    let mut paths = vec![link, dir.clone(), "/dev/zero".into()];
    if made.is_ok_and(|s| s.success()) {
        paths.push(fifo);
    }
    for p in paths {
        let start = std::time::Instant::now();
        let o = layoutopt(&["inspect", p.to_str().unwrap()]);
        assert_eq!(o.code, 1, "{}: {}", p.display(), o.stderr);
        assert!(o.stderr.contains("not a regular file"), "{}", o.stderr);
        assert!(
            start.elapsed().as_secs() < 10,
            "{} took too long",
            p.display()
        );
    }
}

/// `export -o` and `explore -o` never overwrite the input model, under its own
/// name or another, nor write through a symbolic link.
#[test]
fn outputs_never_replace_the_input_or_follow_links() {
    let dir = scratch_dir("cli_output_safety");
    let model = dir.join("m.onnx");
    std::fs::copy(resnet(), &model).unwrap();
    let before = std::fs::read(&model).unwrap();
    let alias = dir.join("alias.onnx");
    std::fs::hard_link(&model, &alias).unwrap();
    let target = dir.join("target.txt");
    std::fs::write(&target, "keep me").unwrap();
    let link = dir.join("link.onnx");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let m = model.to_str().unwrap();
    for cmd in ["export", "explore"] {
        for (out, needle) in [
            (m, "is the input model"),
            (alias.to_str().unwrap(), "is the input model"),
            (link.to_str().unwrap(), "symbolic link"),
        ] {
            let o = layoutopt(&[cmd, m, "-o", out]);
            assert_eq!(o.code, 1, "{cmd} -o {out}: {}", o.stderr);
            assert!(o.stderr.contains(needle), "{cmd} -o {out}: {}", o.stderr);
        }
    }
    assert_eq!(std::fs::read(&model).unwrap(), before);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me");
    // A fresh path is written.
    let fresh = dir.join("out.onnx");
    let o = layoutopt(&["export", m, "-o", fresh.to_str().unwrap()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(fresh.exists());
}

/// A recorded output of the wrong shape is an error, never compared as if fine.
#[test]
fn recorded_outputs_of_the_wrong_shape_are_refused() {
    use protobuf::Message;
    let dir = scratch_dir("cli_recorded_shape");
    let src = Path::new(resnet().as_str()).parent().unwrap().to_path_buf();
    std::fs::copy(src.join("model.onnx"), dir.join("model.onnx")).unwrap();
    let data = dir.join("test_data_set_0");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::copy(
        src.join("test_data_set_0/input_0.pb"),
        data.join("input_0.pb"),
    )
    .unwrap();
    let wrong = layoutopt::graph::Tensor::from_f32(vec![1, 9], vec![0.0; 9]);
    let proto = layoutopt::frontend::onnx::tensor_to_proto("output", &wrong);
    std::fs::write(data.join("output_0.pb"), proto.write_to_bytes().unwrap()).unwrap();
    let o = layoutopt(&["run", dir.join("model.onnx").to_str().unwrap()]);
    assert_eq!(o.code, 1, "{}", o.stdout);
    assert!(
        o.stderr.contains("recorded output 0 is f32[1, 9]"),
        "{}",
        o.stderr
    );
}

/// `run` and `bench` warn, naming each step, whenever a step falls back to the
/// reference executor (a trilinear Resize of a volume: the native kernel
/// filters two axes at most); a model whose steps are all native gets no warning.
#[test]
fn fallback_steps_are_named_in_a_warning() {
    use crate::support::onnx::{model_bytes, node, str_attr, value_info};
    let mut resize = node("Resize", "upsample3d", &["x", "", "scales"], &["y"]);
    resize.attribute.push(str_attr("mode", "linear"));
    let scales = layoutopt::graph::Tensor::from_f32(vec![5], vec![1.0, 1.0, 2.0, 2.0, 2.0]);
    let volume = crate::support::onnx::model(
        vec![resize],
        vec![value_info("x", 1, &[1, 2, 3, 4, 5])],
        vec![value_info("y", 1, &[1, 2, 6, 8, 10])],
        vec![("scales", scales)],
        13,
    );
    let path = scratch_dir("fallback_warning").join("trilinear.onnx");
    std::fs::write(&path, model_bytes(&volume)).unwrap();
    let path = path.display().to_string();
    for cmd in ["run", "bench"] {
        let mut args = vec![cmd, path.as_str()];
        if cmd == "bench" {
            args.extend(["--runs", "1", "--warmup", "0"]);
        }
        let o = layoutopt(&args);
        assert_eq!(o.code, 0, "{}", o.stderr);
        let warning = o
            .stderr
            .lines()
            .find(|l| l.starts_with("warning: ") && l.contains("reference executor"))
            .unwrap_or_else(|| panic!("{cmd}: no fallback warning in {}", o.stderr));
        assert!(warning.contains("' (Resize;"), "{warning}");
    }
    let o = layoutopt(&["run", &resnet()]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(!o.stderr.contains("reference executor"), "{}", o.stderr);
}

/// Inputs go by name (`--input NAME=FILE`, .npy, .npz or .pb) and outputs are written
/// under the model's own names: an A−B model gives A−B whatever the order of the
/// flags; bare files for a two-input model, an unknown name, a wrong shape and a
/// missing input are refused with the reason.
#[test]
fn inputs_by_name_and_outputs_by_name() {
    use crate::support::onnx::{model as onnx_model, model_bytes, node, value_info};
    use layoutopt::frontend::npy::{read_npy, write_npy};
    use layoutopt::graph::Tensor;
    let dir = scratch_dir("inputs_by_name");
    let m = onnx_model(
        vec![node("Sub", "sub", &["a", "b"], &["a_minus_b"])],
        vec![value_info("a", 1, &[2]), value_info("b", 1, &[2])],
        vec![value_info("a_minus_b", 1, &[2])],
        vec![],
        13,
    );
    let path = dir.join("sub.onnx");
    std::fs::write(&path, model_bytes(&m)).unwrap();
    let file = |name: &str, v: Vec<f32>| {
        let p = dir.join(name);
        std::fs::write(&p, write_npy(&Tensor::from_f32(vec![v.len()], v)).unwrap()).unwrap();
        p.display().to_string()
    };
    let (fa, fb) = (
        file("a.npy", vec![10.0, 4.0]),
        file("b.npy", vec![1.0, 6.0]),
    );
    let out_dir = dir.join("out");
    let model = path.display().to_string();
    let out = out_dir.display().to_string();
    for order in [[&fa, &fb], [&fb, &fa]] {
        let args: Vec<String> = order
            .iter()
            .map(|f| format!("{}={f}", if *f == &fa { "a" } else { "b" }))
            .collect();
        let o = layoutopt(&[
            "run", &model, "--input", &args[0], "--input", &args[1], "--output", &out,
        ]);
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert!(o.stdout.contains("output 'a_minus_b'"), "{}", o.stdout);
        let bytes = std::fs::read(out_dir.join("a_minus_b.npy")).unwrap();
        assert_eq!(read_npy(&bytes).unwrap().to_f32(), vec![9.0, -2.0]);
    }
    // A .npz archive numpy wrote (savez_compressed, a=[10, 4], b=[1, 6]) names both.
    let npz = |name: &str| format!("{}/tests/npz/{name}", env!("CARGO_MANIFEST_DIR"));
    let o = layoutopt(&["run", &model, "--input", &npz("a_b.npz"), "--output", &out]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let bytes = std::fs::read(out_dir.join("a_minus_b.npy")).unwrap();
    assert_eq!(read_npy(&bytes).unwrap().to_f32(), vec![9.0, -2.0]);
    // As b=FILE.npz it gives its array 'b' only.
    let o = layoutopt(&[
        "run",
        &model,
        "--input",
        &format!("b={}", npz("a_b.npz")),
        "--input",
        &format!("a={fa}"),
        "--output",
        &out,
    ]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let bytes = std::fs::read(out_dir.join("a_minus_b.npy")).unwrap();
    assert_eq!(read_npy(&bytes).unwrap().to_f32(), vec![9.0, -2.0]);

    let wrong = file("wrong.npy", vec![1.0, 2.0, 3.0]);
    let refused: [(Vec<String>, &str); 7] = [
        (
            vec![fa.clone(), fb.clone()],
            "give each as --input NAME=FILE",
        ),
        (vec![format!("c={fa}")], "the model has no input 'c'"),
        (vec![format!("a={wrong}"), format!("b={fb}")], "f32[3]"),
        (vec![format!("a={fa}")], "input 'b' is not given"),
        // numpy's positional arr_0 names no input of a two-input model.
        (
            vec![npz("positional.npz")],
            "give each as --input NAME=FILE",
        ),
        (vec![npz("wrong_dtype.npz")], "f64[2]"),
        (vec![format!("c={}", npz("a_b.npz"))], "no array 'c'"),
    ];
    for (files, needle) in refused {
        let mut args = vec!["run", model.as_str()];
        for f in &files {
            args.extend(["--input", f.as_str()]);
        }
        let o = layoutopt(&args);
        assert_eq!(o.code, 1, "{args:?}: {}", o.stdout);
        assert!(o.stderr.contains(needle), "{args:?}: {}", o.stderr);
    }
}

#[test]
fn check_finite_names_the_first_step_with_nan_or_inf() {
    use crate::support::onnx::{model as onnx_model, model_bytes, node, value_info};
    use layoutopt::frontend::npy::write_npy;
    use layoutopt::graph::Tensor;
    let check_line = |o: &CliOut| -> String {
        assert_eq!(o.code, 0, "{}", o.stderr);
        o.stdout
            .lines()
            .find(|l| l.starts_with("check-finite: "))
            .unwrap_or_else(|| panic!("no check line: {}", o.stdout))
            .to_string()
    };
    // A NaN and infinities in the input: the fused Conv+Relu is the first step
    // holding them, named with both source layers (or, where the measured
    // costs block the input first, the transform feeding it, named with the
    // convolution's layer).
    let case = format!(
        "{}/tests/nonfinite/conv_relu/model.onnx",
        env!("CARGO_MANIFEST_DIR")
    );
    for target in ["nchw", "nchw16c"] {
        let o = layoutopt(&["run", &case, "--target", target, "--check-finite"]);
        let line = check_line(&o);
        let step = line.contains("'Relu_1'") || line.contains("(LayoutTransform;");
        assert!(
            step && line.contains("layer 'Conv_0'") && line.contains(" NaN"),
            "{line}"
        );
    }
    // Without the flag nothing is checked, but an output holding NaN has a NaN
    // range (a NaN must not hide behind a finite minimum and maximum).
    let o = layoutopt(&["run", &case]);
    assert!(!o.stdout.contains("check-finite"), "{}", o.stdout);
    assert!(
        o.stdout.contains(": min NaN max NaN mean NaN"),
        "{}",
        o.stdout
    );
    let j = layoutopt(&["run", &case, "--json"]);
    assert_eq!(j.code, 0, "{}", j.stderr);
    let v: serde_json::Value = serde_json::from_str(&j.stdout).unwrap();
    let out = &v["outputs"][0];
    assert!(out["min"].is_null() && out["max"].is_null(), "{out}");
    assert!(out["non_finite"].as_u64().unwrap() > 0, "{out}");
    // Finite values through a conv and a softmax over 20 channels planned for
    // NCHW16c (where the softmax's padding channels hold -inf by design): the
    // check reads logical elements only, so nothing is reported.
    let dir = scratch_dir("check_finite");
    let weights: Vec<f32> = (0..400)
        .map(|i| ((i * 7 % 13) as f32 - 6.0) / 10.0)
        .collect();
    let m = onnx_model(
        vec![
            node("Conv", "conv", &["x", "w"], &["c"]),
            node("Softmax", "softmax", &["c"], &["y"]),
        ],
        vec![value_info("x", 1, &[1, 20, 4, 4])],
        vec![value_info("y", 1, &[1, 20, 4, 4])],
        vec![("w", Tensor::from_f32(vec![20, 20, 1, 1], weights))],
        13,
    );
    let path = dir.join("conv_softmax.onnx");
    std::fs::write(&path, model_bytes(&m)).unwrap();
    let x: Vec<f32> = (0..320).map(|i| (i % 9) as f32 / 4.0 - 1.0).collect();
    let input = dir.join("x.npy");
    std::fs::write(
        &input,
        write_npy(&Tensor::from_f32(vec![1, 20, 4, 4], x)).unwrap(),
    )
    .unwrap();
    let (model, input) = (path.display().to_string(), input.display().to_string());
    let o = layoutopt(&[
        "run",
        &model,
        "--input",
        &input,
        "--target",
        "nchw16c",
        "--check-finite",
    ]);
    assert_eq!(
        check_line(&o),
        "check-finite: every step's output is finite"
    );
}

#[test]
fn kernels_run_on_a_forced_instruction_set() {
    use layoutopt::runtime::Isa;
    let json = |o: &CliOut| -> serde_json::Value {
        assert_eq!(o.code, 0, "{}", o.stderr);
        serde_json::from_str(&o.stdout).unwrap()
    };
    let default = json(&layoutopt(&["run", &resnet(), "--json"]));
    for isa in Isa::ALL {
        let o = layoutopt(&["run", &resnet(), "--isa", &isa.to_string(), "--json"]);
        if !isa.available() {
            assert_eq!(o.code, 1, "{isa}: {}", o.stdout);
            assert!(o.stderr.contains("this CPU cannot run"), "{}", o.stderr);
            continue;
        }
        let v = json(&o);
        assert_eq!(v["execution"]["isa"], isa.to_string(), "{v}");
        // The recorded output, matched on every path.
        for (d, f) in default["outputs"]
            .as_array()
            .unwrap()
            .iter()
            .zip(v["outputs"].as_array().unwrap())
        {
            assert!(f["max_abs_error"].as_f64().unwrap() < 1e-4, "{isa}: {f}");
            assert_eq!(d["shape"], f["shape"]);
        }
    }
    let bad = layoutopt(&["run", &resnet(), "--isa", "sse9"]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(
        bad.stderr.contains("not an instruction set"),
        "{}",
        bad.stderr
    );
}
