//! TFLite recurrent layers (UNIDIRECTIONAL_SEQUENCE_LSTM, BIDIRECTIONAL_SEQUENCE_LSTM,
//! UNIDIRECTIONAL_SEQUENCE_RNN, and the REVERSE_V2 Keras puts around a backward
//! LSTM), imported unrolled into native ops: the cases of
//! scripts/gen_tflite_recurrent.py (Keras 2 LSTMs as the converter emits them,
//! stacked, bidirectional and backwards; hand-built CIFG, peephole, projection,
//! clip, layer-norm and time-major variants, an RNN and a merged bidirectional
//! LSTM) run compiled with no reference fallback step and reproduce what the TFLite
//! interpreter recorded within 1e-4 of the output's largest magnitude. Malformed
//! or unsupported layers are refused naming the layer.

use crate::support::bundled::{load_test_data, recorded_cases};
use crate::support::compare::max_abs_err;
use crate::support::text::assert_mentions;
use crate::support::tflite::*;
use layoutopt::api::{Costs, PlanLayouts, PlannerKind, TargetFamily};
use layoutopt::frontend::tflite::{import_tflite, load_tflite, TfliteError};
use layoutopt::graph::{Op, Tensor};
use layoutopt::runtime::{CompiledModel, RuntimeOptions};

fn assert_matches(what: &str, outputs: &[Tensor], expected: &[Tensor]) {
    assert_eq!(outputs.len(), expected.len(), "{what}");
    for (i, (out, exp)) in outputs.iter().zip(expected).enumerate() {
        assert_eq!(out.shape, exp.shape, "{what} output {i}");
        let (err, mag) = max_abs_err(exp, out);
        println!("{what} output {i}: max abs err {err:.3e}, max magnitude {mag:.3e}");
        assert!(
            err <= 1e-4 * mag,
            "{what} output {i}: error {err} > 1e-4 * {mag}"
        );
    }
}

#[test]
fn recorded_tflite_recurrent_layers_run_natively_and_match_the_interpreter() {
    let dirs = recorded_cases("tflite_recurrent");
    assert_eq!(
        dirs.len(),
        8,
        "the cases of scripts/gen_tflite_recurrent.py"
    );
    for dir in dirs {
        let what = dir.file_name().unwrap().to_string_lossy().into_owned();
        let g = load_tflite(&dir.join("model.tflite")).unwrap_or_else(|e| panic!("{what}: {e}"));
        // Unrolled: one recurrent MatMul per step and direction, no loop.
        assert!(
            g.node_ids()
                .iter()
                .filter(|&&n| matches!(g.node(n).op, Op::MatMul))
                .count()
                >= 5,
            "{what}"
        );
        let (inputs, expected) = load_test_data(&dir);
        let reference = layoutopt::reference::run(&g, &inputs)
            .unwrap_or_else(|e| panic!("{what} (reference): {e}"));
        assert_matches(&format!("{what} (reference)"), &reference, &expected);

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
        assert_matches(&format!("{what} (compiled)"), &outputs, &expected);
    }
}

const UNIDIRECTIONAL_SEQUENCE_RNN: i32 = 35;
const UNIDIRECTIONAL_SEQUENCE_LSTM: i32 = 44;
const SEQUENCE_RNN_OPTIONS: u8 = 31;
const UNIDIRECTIONAL_LSTM_OPTIONS: u8 = 71;
const ACT_TANH: i8 = 4;

/// A batch-major UNIDIRECTIONAL_SEQUENCE_LSTM 'lstm_1' over x [B=1, T=2, I=2]
/// with 3 units and no peepholes, projection or layer norm, whose tensor named
/// `bad` has shape `bad_shape` instead.
fn lstm_spec(bad: &str, bad_shape: &[i32], options: Vec<(u16, Field)>) -> ModelSpec {
    let gates = ["input", "forget", "cell", "output"];
    // In input order: (name, shape, whether constant); None for an omitted input.
    let mut layout: Vec<Option<(String, Vec<i32>, bool)>> = Vec::new();
    let weights = |kind: &str, cols: i32| {
        gates.map(|g| Some((format!("{kind}_to_{g}_weights"), vec![3, cols], true)))
    };
    layout.extend(weights("input", 2));
    layout.extend(weights("recurrent", 3));
    layout.extend([None, None, None]);
    layout.extend(gates.map(|g| Some((format!("{g}_gate_bias"), vec![3], true))));
    layout.extend([None, None]);
    layout.push(Some(("output_state".into(), vec![1, 3], false)));
    layout.push(Some(("cell_state".into(), vec![1, 3], false)));
    layout.extend([None, None, None, None]);

    let mut tensors = vec![TensorSpec::f32("x", &[1, 2, 2])];
    let mut ins = vec![0];
    for entry in layout {
        let Some((name, mut shape, constant)) = entry else {
            ins.push(-1);
            continue;
        };
        if name == bad {
            shape = bad_shape.to_vec();
        }
        let n = shape.iter().product::<i32>() as usize;
        tensors.push(match constant {
            true => TensorSpec::f32_const(&name, &shape, &vec![0.1; n]),
            false => TensorSpec::f32(&name, &shape),
        });
        ins.push(tensors.len() as i32 - 1);
    }
    tensors.push(TensorSpec::f32("lstm_1", &[1, 2, 3]));
    let out = tensors.len() as i32 - 1;
    let mut fields = vec![(0, Field::I8(ACT_TANH))];
    fields.extend(options);
    let op = OpSpec::new(UNIDIRECTIONAL_SEQUENCE_LSTM, &ins, &[out])
        .options(UNIDIRECTIONAL_LSTM_OPTIONS, &fields);
    ModelSpec::new(tensors, vec![op], &[0], &[out])
}

fn import_err(spec: &ModelSpec, needles: &[&str]) -> TfliteError {
    let e = match import_tflite(&spec.build(), "recurrent.tflite") {
        Ok(_) => panic!("import of a bad recurrent layer succeeded"),
        Err(e) => e,
    };
    assert_mentions(&e.to_string(), needles);
    e
}

#[test]
fn lstm_weights_that_do_not_match_the_hidden_size_are_refused_naming_the_layer() {
    let ok = import_tflite(&lstm_spec("", &[], vec![]).build(), "recurrent.tflite")
        .unwrap_or_else(|e| panic!("{e}"));
    let y = layoutopt::reference::run(&ok, &[Tensor::from_f32(vec![1, 2, 2], vec![1.0; 4])])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(y[0].shape, vec![1, 2, 3]);

    let e = import_err(
        &lstm_spec("recurrent_to_forget_weights", &[3, 4], vec![]),
        &[
            "layer 'lstm_1'",
            "UNIDIRECTIONAL_SEQUENCE_LSTM",
            "recurrent_to_forget_weights (input 6)",
            "expected float32 [3, 3]",
        ],
    );
    assert!(matches!(e, TfliteError::Layer { .. }), "{e}");
    import_err(
        &lstm_spec("input_to_cell_weights", &[4, 2], vec![]),
        &[
            "layer 'lstm_1'",
            "input_to_cell_weights (input 3)",
            "[3, 2]",
        ],
    );
    import_err(
        &lstm_spec("forget_gate_bias", &[2], vec![]),
        &["layer 'lstm_1'", "forget_gate_bias (input 13)", "[3]"],
    );
    // A state the batch does not fit.
    import_err(
        &lstm_spec("cell_state", &[2, 3], vec![]),
        &["layer 'lstm_1'", "cell_state (input 19)", "[1, 3]"],
    );
}

#[test]
fn unsupported_recurrent_options_are_refused_naming_the_layer() {
    let e = import_err(
        &lstm_spec("", &[], vec![(5, Field::Bool(true))]),
        &["layer 'lstm_1'", "diagonal recurrent weights"],
    );
    assert!(matches!(e, TfliteError::Unsupported { .. }), "{e}");
    // SIGN_BIT (5) is no cell activation.
    let e = import_err(
        &lstm_spec("", &[], vec![(0, Field::I8(5))]),
        &["layer 'lstm_1'", "fused activation function 5"],
    );
    assert!(matches!(e, TfliteError::Unsupported { .. }), "{e}");
}

#[test]
fn rnn_bias_of_the_wrong_size_is_refused_naming_the_layer() {
    let spec = |bias: usize| {
        let tensors = vec![
            TensorSpec::f32("x", &[1, 2, 2]),
            TensorSpec::f32_const("w", &[3, 2], &[0.1; 6]),
            TensorSpec::f32_const("r", &[3, 3], &[0.1; 9]),
            TensorSpec::f32_const("b", &[bias as i32], &vec![0.0; bias]),
            TensorSpec::f32("h", &[1, 3]),
            TensorSpec::f32("rnn_1", &[1, 2, 3]),
        ];
        let op = OpSpec::new(UNIDIRECTIONAL_SEQUENCE_RNN, &[0, 1, 2, 3, 4], &[5])
            .options(SEQUENCE_RNN_OPTIONS, &[(1, Field::I8(ACT_TANH))]);
        ModelSpec::new(tensors, vec![op], &[0], &[5])
    };
    import_tflite(&spec(3).build(), "rnn.tflite").unwrap_or_else(|e| panic!("{e}"));
    import_err(
        &spec(4),
        &[
            "layer 'rnn_1'",
            "UNIDIRECTIONAL_SEQUENCE_RNN",
            "bias (input 3)",
            "[3]",
        ],
    );
}
