//! ONNX LSTM, GRU and RNN layers, imported unrolled into native ops: the small
//! models of scripts/gen_recurrent_models.py (bidirectional with peepholes and
//! initial states, layout 1, per-entry sequence_lens fed at run time, clip,
//! input_forget, non-default activations) run with no reference fallback and
//! reproduce what onnxruntime recorded within 1e-4 of max(1, largest magnitude),
//! on the reference executor and compiled. Malformed layers are refused naming
//! the layer.

use crate::support::bundled::{load_test_data, recorded_cases};
use crate::support::compare::assert_outputs_match;
use crate::support::onnx::*;
use layoutopt::api::{load_model, Costs, PlanLayouts, PlannerKind, TargetFamily};
use layoutopt::frontend::onnx::ImportOptions;
use layoutopt::graph::Tensor;
use layoutopt::runtime::{CompiledModel, RuntimeOptions};
use onnx_protobuf::AttributeProto;
use std::collections::HashMap;

#[test]
fn recorded_recurrent_layers_run_natively_and_match_onnxruntime() {
    let dirs = recorded_cases("recurrent");
    assert_eq!(
        dirs.len(),
        6,
        "the cases of scripts/gen_recurrent_models.py"
    );
    for dir in dirs {
        let what = dir.file_name().unwrap().to_string_lossy().into_owned();
        let g = load_model(&dir.join("model.onnx")).unwrap_or_else(|e| panic!("{what}: {e}"));
        let (inputs, expected) = load_test_data(&dir);
        let reference = layoutopt::reference::run(&g, &inputs)
            .unwrap_or_else(|e| panic!("{what} (reference): {e}"));
        assert_outputs_match(&format!("{what} (reference)"), &reference, &expected, 1e-4);

        let planned = PlanLayouts::new(PlannerKind::Global, TargetFamily::Nchwc(8))
            .with_costs(Costs::BuiltIn)
            .plan(&g)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let m = CompiledModel::compile(
            &planned.graph,
            &RuntimeOptions {
                threads: 1,
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(m.fallback_steps(), vec![], "{what}");
        let outputs = m.run(&inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_outputs_match(&format!("{what} (compiled)"), &outputs, &expected, 1e-4);
    }
}

const F32: i32 = 1;

fn string_attr(name: &str, v: &str) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = name.to_string();
    a.type_ = onnx_protobuf::attribute_proto::AttributeType::STRING.into();
    a.s = v.as_bytes().to_vec();
    a
}

fn strings_attr(name: &str, v: &[&str]) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = name.to_string();
    a.type_ = onnx_protobuf::attribute_proto::AttributeType::STRINGS.into();
    a.strings = v.iter().map(|s| s.as_bytes().to_vec()).collect();
    a
}

/// A forward LSTM layer 'lstm_1' over x [T=3, B=2, I=2] whose W and R hold
/// `hidden` units while the attribute says `hidden_size`.
fn lstm_model(
    hidden: usize,
    hidden_size: i64,
    attrs: Vec<AttributeProto>,
) -> onnx_protobuf::ModelProto {
    let w = Tensor::from_f32(vec![1, 4 * hidden, 2], vec![0.1; 8 * hidden]);
    let r = Tensor::from_f32(vec![1, 4 * hidden, hidden], vec![0.1; 4 * hidden * hidden]);
    let mut n = node("LSTM", "lstm_1", &["x", "w", "r"], &["y"]);
    n.attribute = attrs;
    n.attribute.push(int_attr("hidden_size", hidden_size));
    model(
        vec![n],
        vec![value_info("x", F32, &[3, 2, 2])],
        vec![value_info("y", F32, &[3, 1, 2, hidden as i64])],
        vec![("w", w), ("r", r)],
        14,
    )
}

#[test]
fn weights_that_do_not_match_hidden_size_are_refused_naming_the_layer() {
    let e = import_model(&lstm_model(4, 5, vec![]), "lstm.onnx")
        .unwrap_err()
        .to_string();
    for needle in [
        "lstm_1",
        "W has shape [1, 16, 2], expected [1, 20, 2]",
        "hidden_size 5",
    ] {
        assert!(e.contains(needle), "{e}");
    }
    assert!(import_model(&lstm_model(4, 4, vec![]), "lstm.onnx").is_ok());
}

#[test]
fn unknown_activations_and_directions_are_refused_naming_the_layer() {
    let acts = strings_attr("activations", &["Sigmoid", "Swish", "Tanh"]);
    let e = import_model(&lstm_model(4, 4, vec![acts]), "lstm.onnx")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("lstm_1") && e.contains("activation 'Swish'"),
        "{e}"
    );

    let two = strings_attr("activations", &["Sigmoid", "Tanh"]);
    let e = import_model(&lstm_model(4, 4, vec![two]), "lstm.onnx")
        .unwrap_err()
        .to_string();
    assert!(e.contains("lstm_1") && e.contains("expected 3"), "{e}");

    let sideways = string_attr("direction", "sideways");
    let e = import_model(&lstm_model(4, 4, vec![sideways]), "lstm.onnx")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("lstm_1") && e.contains("direction 'sideways'"),
        "{e}"
    );
}

/// The unrolling needs the sequence length: a symbolic one is refused at the
/// graph input until bound, then the layer imports at that length.
#[test]
fn a_symbolic_sequence_length_must_be_bound() {
    let mut m = lstm_model(4, 4, vec![]);
    let g = m.graph.as_mut().unwrap();
    g.input[0] = symbolic(g.input[0].clone(), 0, "T");
    g.output[0] = symbolic(g.output[0].clone(), 0, "T");
    let e = import_model(&m, "lstm.onnx").unwrap_err().to_string();
    assert!(e.contains("dimension 0 is symbolic ('T')"), "{e}");

    let bound = ImportOptions {
        input_shapes: HashMap::from([("x".to_string(), vec![7, 2, 2])]),
        ..ImportOptions::default()
    };
    let g = layoutopt::frontend::onnx::import_onnx(&model_bytes(&m), "lstm.onnx", None, &bound)
        .unwrap_or_else(|e| panic!("{e}"));
    let x = Tensor::from_f32(vec![7, 2, 2], vec![0.5; 28]);
    let y = layoutopt::reference::run(&g, &[x]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(y[0].shape, vec![7, 1, 2, 4]);
}
