//! Ops that read or write at positions computed at run time (GridSample,
//! ScatterND, ScatterElements, and Col2Im through its transposed convolution)
//! run natively, as the reference executor computes them, and refuse what
//! does not fit naming their layer.

use crate::support::compare::max_abs_err;
use crate::support::onnx::*;
use crate::support::plan::plan_by_name;
use crate::support::text::assert_mentions;
use layoutopt::graph::Tensor;
use layoutopt::runtime::{CompiledModel, RuntimeOptions};

const F32: i32 = 1;
const I64: i32 = 7;

fn ramp(n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 37 % 23) as f32 - 11.0) * scale)
        .collect()
}

#[test]
fn grid_samples_and_scatters_run_natively_as_the_reference_does() {
    let mut sample = node("GridSample", "warp", &["x", "grid"], &["y"]);
    sample.attribute.push(str_attr("mode", "bicubic"));
    sample
        .attribute
        .push(str_attr("padding_mode", "reflection"));
    let mut scatter = node(
        "ScatterND",
        "accumulate",
        &["data", "rows", "updates"],
        &["z"],
    );
    scatter.attribute.push(str_attr("reduction", "add"));
    let mut elements = node(
        "ScatterElements",
        "place",
        &["data", "cols", "picked"],
        &["w"],
    );
    elements.attribute.push(int_attr("axis", 1));
    let m = model(
        vec![sample, scatter, elements],
        vec![
            value_info("x", F32, &[2, 3, 6, 5]),
            value_info("grid", F32, &[2, 4, 7, 2]),
            value_info("data", F32, &[5, 4]),
            value_info("rows", I64, &[3, 1]),
            value_info("updates", F32, &[3, 4]),
            value_info("cols", I64, &[2, 2]),
            value_info("picked", F32, &[2, 2]),
        ],
        vec![
            value_info("y", F32, &[2, 3, 4, 7]),
            value_info("z", F32, &[5, 4]),
            value_info("w", F32, &[5, 4]),
        ],
        vec![],
        16,
    );
    let g = import_model(&m, "indexed.onnx").unwrap();
    let inputs = vec![
        Tensor::from_f32(vec![2, 3, 6, 5], ramp(180, 0.25)),
        Tensor::from_f32(vec![2, 4, 7, 2], ramp(112, 0.13)),
        Tensor::from_f32(vec![5, 4], ramp(20, 1.0)),
        // Row 4 twice, and -1 (row 4 again): the additions accumulate.
        Tensor::from_i64(vec![3, 1], vec![4, 0, -1]),
        Tensor::from_f32(vec![3, 4], ramp(12, 0.5)),
        Tensor::from_i64(vec![2, 2], vec![3, 0, -2, 1]),
        Tensor::from_f32(vec![2, 2], ramp(4, 2.0)),
    ];
    let expected = layoutopt::reference::run(&g, &inputs).unwrap();
    let planned = plan_by_name(&g, "global");
    let compiled = CompiledModel::compile(&planned.graph, &RuntimeOptions::default()).unwrap();
    assert_eq!(compiled.fallback_steps(), vec![]);
    let got = compiled.run(&inputs).unwrap();
    for (e, a) in expected.iter().zip(&got) {
        let (err, mag) = max_abs_err(e, a);
        assert!(err <= 1e-5 * mag.max(1.0), "{err} on outputs up to {mag}");
    }
    // An index out of range is an error of the layer, not a write past the data.
    let mut bad = inputs.clone();
    bad[3] = Tensor::from_i64(vec![3, 1], vec![4, 0, 5]);
    let e = compiled.run(&bad).expect_err("row 5 of 5 is refused");
    assert_mentions(&e.to_string(), &["accumulate", "out of range"]);
}

#[test]
fn samples_and_blocks_that_do_not_fit_are_refused_naming_their_layer() {
    // A grid of 3 coordinates for an image of 2 axes.
    let m = model(
        vec![node("GridSample", "warp", &["x", "grid"], &["y"])],
        vec![
            value_info("x", F32, &[1, 3, 6, 5]),
            value_info("grid", F32, &[1, 4, 4, 3]),
        ],
        vec![value_info("y", F32, &[1, 3, 4, 4])],
        vec![],
        16,
    );
    let e = import_model(&m, "grid.onnx").expect_err("a 3-d grid for an image is refused");
    assert_mentions(&e.to_string(), &["warp", "grid [1, 4, 4, 3]"]);

    // 2x2 blocks of a 4x4 image at stride 1 are 9, not the 8 the input holds.
    let m = model(
        vec![node("Col2Im", "fold", &["x", "image", "block"], &["y"])],
        vec![value_info("x", F32, &[1, 8, 8])],
        vec![value_info("y", F32, &[1, 2, 4, 4])],
        vec![
            ("image", Tensor::from_i64(vec![2], vec![4, 4])),
            ("block", Tensor::from_i64(vec![2], vec![2, 2])),
        ],
        18,
    );
    let e = import_model(&m, "fold.onnx").expect_err("8 blocks for 9 places are refused");
    assert_mentions(&e.to_string(), &["fold", "holds 8 blocks", "[3, 3]"]);
}
