//! The transformer operators in decoder blocks, imported as compositions of
//! native ops: opset 23's in one (scripts/gen_transformer_block.py:
//! RMSNormalization, RotaryEmbedding with position ids, Attention with
//! grouped-query heads and a causal mask, a SiLU MLP), whose output is
//! onnxruntime 1.31.1's within 1e-4 of max(1, its largest magnitude) (float32
//! sums in another order; the recording agrees with onnx.reference within
//! 5e-7), and opset 27's LinearAttention in another.

use crate::support::bundled::load_test_data;
use crate::support::compare::assert_outputs_match;
use layoutopt::api::{load_model, Costs, PlanLayouts, PlannerKind, TargetFamily};
use layoutopt::runtime::{CompiledModel, RuntimeOptions};
use std::path::Path;

/// The block in `tests/transformer/{name}` on the reference executor and
/// compiled (no step left to the reference executor) gives the recorded
/// outputs within 1e-4 of max(1, their largest magnitude).
fn runs_natively_and_matches_the_recording(name: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/transformer")
        .join(name);
    let g = load_model(&dir.join("model.onnx")).unwrap_or_else(|e| panic!("{e}"));
    let (inputs, expected) = load_test_data(&dir);
    let reference = layoutopt::reference::run(&g, &inputs).unwrap_or_else(|e| panic!("{e}"));
    assert_outputs_match("reference", &reference, &expected, 1e-4);

    let planned = PlanLayouts::new(PlannerKind::Global, TargetFamily::Nchwc(8))
        .with_costs(Costs::BuiltIn)
        .plan(&g)
        .unwrap_or_else(|e| panic!("{e}"));
    let m = CompiledModel::compile(
        &planned.graph,
        &RuntimeOptions {
            threads: 1,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.fallback_steps(), vec![]);
    let outputs = m.run(&inputs).unwrap_or_else(|e| panic!("{e}"));
    assert_outputs_match("compiled", &outputs, &expected, 1e-4);
}

#[test]
fn a_decoder_block_at_opset_23_runs_natively_and_matches_onnxruntime() {
    runs_natively_and_matches_the_recording("decoder_block");
}

/// A Gated DeltaNet-style layer (scripts/gen_linear_attention_block.py): an
/// opset-27 LinearAttention with the gated delta rule, grouped-query heads and
/// a past state, 24 tokens unrolled, recorded by onnx.reference (which agrees
/// with a float64 run of the recurrence within 2e-7); the present state too.
#[test]
fn a_linear_attention_block_at_opset_27_runs_natively_and_matches_the_reference() {
    runs_natively_and_matches_the_recording("gated_deltanet_block");
}
