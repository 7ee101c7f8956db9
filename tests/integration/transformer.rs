//! The transformer operators of opset 23 in a decoder block
//! (scripts/gen_transformer_block.py: RMSNormalization, RotaryEmbedding with
//! position ids, Attention with grouped-query heads and a causal mask, a SiLU
//! MLP), imported as compositions of native ops: on the reference executor and
//! compiled, with no step left to the reference executor, the output is
//! onnxruntime 1.31.1's within 1e-4 of max(1, its largest magnitude) (float32
//! sums in another order; the recording agrees with onnx.reference within 5e-7).

use crate::support::bundled::load_test_data;
use crate::support::compare::assert_outputs_match;
use layoutopt::api::{load_model, Costs, PlanLayouts, PlannerKind, TargetFamily};
use layoutopt::runtime::{CompiledModel, RuntimeOptions};
use std::path::Path;

#[test]
fn a_decoder_block_at_opset_23_runs_natively_and_matches_onnxruntime() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/transformer/decoder_block");
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
