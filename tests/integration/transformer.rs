//! The transformer operators of opset 23 in a decoder block
//! (scripts/gen_transformer_block.py: RMSNormalization, RotaryEmbedding with
//! position ids, Attention with grouped-query heads and a causal mask, a SiLU
//! MLP), imported as compositions of native ops: on the reference executor and
//! compiled, with no step left to the reference executor, the output is
//! onnxruntime 1.31.1's within 1e-4 of max(1, its largest magnitude) (float32
//! sums in another order; the recording agrees with onnx.reference within 5e-7).

use crate::support::bundled::load_test_data;
use crate::support::compare::max_abs_err;
use layoutopt::api::{load_model, Costs, PlanLayouts, PlannerKind, TargetFamily};
use layoutopt::graph::Tensor;
use layoutopt::runtime::{CompiledModel, RuntimeOptions};
use std::path::Path;

fn assert_matches(what: &str, outputs: &[Tensor], expected: &[Tensor]) {
    assert_eq!(outputs.len(), expected.len(), "{what}");
    for (i, (out, exp)) in outputs.iter().zip(expected).enumerate() {
        assert_eq!(out.shape, exp.shape, "{what} output {i}");
        let (err, mag) = max_abs_err(exp, out);
        assert!(
            err <= 1e-4 * mag.max(1.0),
            "{what} output {i}: error {err} against magnitude {mag}"
        );
    }
}

#[test]
fn a_decoder_block_at_opset_23_runs_natively_and_matches_onnxruntime() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/transformer/decoder_block");
    let g = load_model(&dir.join("model.onnx")).unwrap_or_else(|e| panic!("{e}"));
    let (inputs, expected) = load_test_data(&dir);
    let reference = layoutopt::reference::run(&g, &inputs).unwrap_or_else(|e| panic!("{e}"));
    assert_matches("reference", &reference, &expected);

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
    assert_matches("compiled", &outputs, &expected);
}
