//! Sparse TFLite weights (a tensor's `sparsity` table) are made dense at import, and
//! DENSIFY of them is that dense constant: row-major and permuted traversals, CSR
//! levels, 2-D and 1x4 blocks. Every inconsistency of the layout is an error naming
//! the sparse tensor and the DENSIFY layer. Numerical checks against the TFLite
//! interpreter are in tflite_reference.rs.

use crate::support::text::assert_mentions;
use crate::support::tflite::*;
use layoutopt::frontend::tflite::{import_tflite, TfliteError};
use layoutopt::graph::Op;

/// The dense weights the imported FULLY_CONNECTED multiplies by.
fn dense_weights(spec: &ModelSpec) -> Vec<f32> {
    let g = import_tflite(&spec.build(), "sparse.tflite").unwrap_or_else(|e| panic!("{e}"));
    let gemm = g
        .node_ids()
        .into_iter()
        .find(|&n| matches!(g.node(n).op, Op::Gemm(_)))
        .expect("a Gemm");
    let w = g.node_inputs(gemm)[1];
    g.constant(w).expect("constant weights").to_f32()
}

fn csr(segments: &[i32], indices: &[i32]) -> LevelSpec {
    LevelSpec::Csr {
        segments: segments.to_vec(),
        indices: indices.to_vec(),
    }
}

/// [[0, 1, 0, 2], [0, 0, 0, 0], [3, 0, 0, 4]] stored by rows, columns as CSR.
fn rows_csr() -> ModelSpec {
    let sparsity = SparsitySpec::new(vec![LevelSpec::Dense(3), csr(&[0, 2, 2, 4], &[1, 3, 0, 3])]);
    densify_fc([3, 4], &[1., 2., 3., 4.], sparsity)
}

const ROWS_DENSE: [f32; 12] = [0., 1., 0., 2., 0., 0., 0., 0., 3., 0., 0., 4.];

#[test]
fn csr_rows_become_the_dense_matrix() {
    assert_eq!(dense_weights(&rows_csr()), ROWS_DENSE);
}

#[test]
fn column_major_traversal_becomes_the_same_matrix() {
    let sparsity = SparsitySpec {
        traversal_order: vec![1, 0],
        block_map: vec![],
        levels: vec![LevelSpec::Dense(4), csr(&[0, 1, 2, 2, 4], &[2, 0, 0, 2])],
    };
    let spec = densify_fc([3, 4], &[3., 1., 2., 4.], sparsity);
    assert_eq!(dense_weights(&spec), ROWS_DENSE);
}

/// A [4, 4] matrix of 2x2 blocks: block (0, 1) and block (1, 0) are stored.
fn blocks_2x2(inner_order: [i32; 2], stored: &[f32]) -> ModelSpec {
    let sparsity = SparsitySpec {
        traversal_order: vec![0, 1, inner_order[0], inner_order[1]],
        block_map: vec![0, 1],
        levels: vec![
            LevelSpec::Dense(2),
            csr(&[0, 1, 2], &[1, 0]),
            LevelSpec::Dense(2),
            LevelSpec::Dense(2),
        ],
    };
    densify_fc([4, 4], stored, sparsity)
}

const BLOCKS_DENSE: [f32; 16] = [
    0., 0., 1., 2., //
    0., 0., 3., 4., //
    5., 6., 0., 0., //
    7., 8., 0., 0.,
];

#[test]
fn two_dimensional_blocks_land_in_place() {
    let stored = [1., 2., 3., 4., 5., 6., 7., 8.];
    assert_eq!(dense_weights(&blocks_2x2([2, 3], &stored)), BLOCKS_DENSE);
    // Blocks traversed column by column inside.
    let stored = [1., 3., 2., 4., 5., 7., 6., 8.];
    assert_eq!(dense_weights(&blocks_2x2([3, 2], &stored)), BLOCKS_DENSE);
}

#[test]
fn one_by_four_blocks_as_the_converter_writes_them() {
    // [2, 8]: row 0 keeps its second block of four, row 1 its first.
    let sparsity = SparsitySpec {
        traversal_order: vec![0, 1, 2],
        block_map: vec![1],
        levels: vec![
            LevelSpec::Dense(2),
            csr(&[0, 1, 2], &[1, 0]),
            LevelSpec::Dense(4),
        ],
    };
    let spec = densify_fc([2, 8], &[1., 2., 3., 4., 5., 6., 7., 8.], sparsity);
    let expected = [
        0., 0., 0., 0., 1., 2., 3., 4., //
        5., 6., 7., 8., 0., 0., 0., 0.,
    ];
    assert_eq!(dense_weights(&spec), expected);
}

/// Importing `spec` fails in the DENSIFY layer, naming the sparse tensor and `needle`.
fn densify_error(spec: &ModelSpec, needle: &str) {
    let e = match import_tflite(&spec.build(), "bad.tflite") {
        Ok(_) => panic!("a bad sparse layout imported ({needle})"),
        Err(e) => e,
    };
    assert!(matches!(e, TfliteError::Layer { .. }), "{e}");
    assert_mentions(
        &e.to_string(),
        &[
            "layer 'w_dense' (DENSIFY #0)",
            "sparse tensor #1 'w_sparse'",
            needle,
        ],
    );
}

fn with_levels(levels: Vec<LevelSpec>, stored: &[f32]) -> ModelSpec {
    densify_fc([3, 4], stored, SparsitySpec::new(levels))
}

#[test]
fn bad_sparse_layouts_are_errors_naming_tensor_and_layer() {
    let four = [1., 2., 3., 4.];
    let dense3 = || LevelSpec::Dense(3);
    // Column 4 of a 4-column matrix; a negative column.
    let spec = with_levels(vec![dense3(), csr(&[0, 2, 2, 4], &[1, 4, 0, 3])], &four);
    densify_error(&spec, "entry 1 of level 1 is Some(4), outside 0..4");
    let spec = with_levels(vec![dense3(), csr(&[0, 2, 2, 4], &[1, -1, 0, 3])], &four);
    densify_error(&spec, "outside 0..4");
    // Segments that go back, or run past the indices.
    let spec = with_levels(vec![dense3(), csr(&[0, 2, 1, 4], &[1, 3, 0, 3])], &four);
    densify_error(&spec, "not non-decreasing");
    let spec = with_levels(vec![dense3(), csr(&[0, 2, 2, 5], &[1, 3, 0, 3])], &four);
    densify_error(&spec, "not non-decreasing");
    // Too few segments for the three rows.
    let spec = with_levels(vec![dense3(), csr(&[0, 2, 4], &[1, 3, 0, 3])], &four);
    densify_error(&spec, "reads array_segments entry 3, but it has 3");
    // Columns out of order within a row (a repeated column would overwrite).
    let spec = with_levels(vec![dense3(), csr(&[0, 2, 2, 4], &[3, 1, 0, 3])], &four);
    densify_error(&spec, "do not increase within a segment");
    // More or fewer stored values than the layout addresses.
    let spec = with_levels(
        vec![dense3(), csr(&[0, 2, 2, 4], &[1, 3, 0, 3])],
        &[1., 2., 3.],
    );
    densify_error(
        &spec,
        "holds 3 values, but the sparse layout addresses more than 3",
    );
    let spec = with_levels(vec![dense3(), csr(&[0, 2, 2, 4], &[1, 3, 0, 3])], &[1.; 5]);
    densify_error(&spec, "holds 5 values, but the sparse layout addresses 4");
    // A dense level whose size is not the shape's.
    let spec = with_levels(
        vec![LevelSpec::Dense(2), csr(&[0, 2, 4], &[1, 3, 0, 3])],
        &four,
    );
    densify_error(&spec, "dense_size 2, but the dense shape gives it 3");
    // One level for a matrix.
    let spec = with_levels(vec![dense3()], &four);
    densify_error(&spec, "traversal_order [0]");
}

#[test]
fn bad_traversal_orders_and_blocks_are_errors() {
    let stored = [1., 2., 3., 4., 5., 6., 7., 8.];
    let changed = |change: &dyn Fn(&mut SparsitySpec)| {
        let mut spec = blocks_2x2([2, 3], &stored);
        change(spec.tensors[1].sparsity.as_mut().unwrap());
        spec
    };
    // A block dimension among the grid dimensions.
    let spec = changed(&|s| s.traversal_order = vec![0, 2, 1, 3]);
    densify_error(&spec, "not a permutation");
    // Both blocks on dimension 0, a block on dimension 2 of a matrix.
    densify_error(&changed(&|s| s.block_map = vec![0, 0]), "block_map [0, 0]");
    densify_error(&changed(&|s| s.block_map = vec![0, 2]), "block_map [0, 2]");
    // A block size that does not divide the extent.
    let spec = changed(&|s| s.levels[3] = LevelSpec::Dense(3));
    densify_error(&spec, "divides dimension 1 of extent 4; dense_size is 3");
}

#[test]
fn a_dense_form_over_the_memory_limit_is_refused_before_allocating() {
    let sparsity = SparsitySpec::new(vec![LevelSpec::Dense(1 << 20), csr(&[0, 1], &[0])]);
    let mut spec = densify_fc([1 << 20, 1 << 20], &[1.], sparsity);
    spec.tensors[0].shape = vec![1, 1 << 20];
    spec.tensors[3].shape = vec![1, 1 << 20];
    densify_error(&spec, "more than the memory limit");
}
