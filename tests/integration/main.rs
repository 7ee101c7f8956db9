//! The integration tests, one module per subject, in one test binary: the
//! crate is linked once for all of them. Tests that share process-wide state
//! (environment variables, the current folder) must not set it here: a child
//! process gets what it needs (see `support::process`). The tests whose
//! children's peak memory is measured by `wait4` live in small binaries of
//! their own (`tests/budget.rs`, `tests/bad_input/`), since a child's figure
//! includes the pages of the process that spawned it.

#[path = "../support/mod.rs"]
mod support;

mod activations;
mod api;
mod cli_commands;
mod codegen;
mod control_flow;
mod conv_affine;
mod data_dependent;
mod determinism;
mod elementwise_agreement;
mod explorer;
mod export;
mod export_conformance;
mod indexed_ops;
mod json_schema;
mod layering;
mod layout_rewrite;
mod models;
mod nonfinite;
mod normalizations;
mod onnx_conformance;
mod onnx_import;
mod pad_fold;
mod planner;
mod planner_challenges;
mod quantized;
mod recurrent;
mod relabel_roundtrip;
mod runtime_models;
mod scaling;
mod symbolic_shapes;
mod text;
mod tflite_custom;
mod tflite_import;
mod tflite_recurrent;
mod tflite_reference;
mod tflite_sparse;
mod tir_infer_bound;
mod tir_limitations;
mod tir_primitives;
mod tir_property;
mod transformer;
mod zoo_subset;
