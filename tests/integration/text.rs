//! TfIdfVectorizer (issue 43): the models of scripts/gen_text_models.py give
//! exactly what onnxruntime recorded (counts and weights of small integers are
//! exact in f32), on the reference executor and compiled, where the op runs
//! natively.

use crate::support::bundled::{load_test_data, recorded_cases};
use crate::support::compare::assert_outputs_match;
use layoutopt::api::{load_model, Costs, PlanLayouts, PlannerKind, TargetFamily};
use layoutopt::runtime::{CompiledModel, RuntimeOptions};

#[test]
fn recorded_tf_idf_models_match_onnxruntime() {
    let dirs = recorded_cases("text");
    assert_eq!(dirs.len(), 4, "the cases of scripts/gen_text_models.py");
    for dir in dirs {
        let what = dir.file_name().unwrap().to_string_lossy().into_owned();
        let g = load_model(&dir.join("model.onnx")).unwrap_or_else(|e| panic!("{what}: {e}"));
        let (inputs, expected) = load_test_data(&dir);
        let reference = layoutopt::reference::run(&g, &inputs)
            .unwrap_or_else(|e| panic!("{what} (reference): {e}"));
        assert_outputs_match(&format!("{what} (reference)"), &reference, &expected, 0.0);
        let planned = PlanLayouts::new(PlannerKind::Global, TargetFamily::Nchwc(8))
            .with_costs(Costs::BuiltIn)
            .plan(&g)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let m = CompiledModel::compile(&planned.graph, &RuntimeOptions::default())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let steps = m.describe();
        let counted: Vec<_> = (steps.iter())
            .filter(|d| d.contains("[TfIdfVectorizer]"))
            .collect();
        assert_eq!(counted.len(), 1, "{what}: {steps:?}");
        assert!(counted[0].ends_with(" native"), "{what}: {steps:?}");
        let outputs = m.run(&inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_outputs_match(&format!("{what} (compiled)"), &outputs, &expected, 0.0);
    }
}
