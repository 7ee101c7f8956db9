//! Runs of a compiled model: a wrong input, inputs and outputs read and
//! written in place, and runs from several threads at once.

use crate::graph::{DType, Graph, Op, Tensor, UnaryOp, ValueType};
use crate::runtime::test_support::{
    assert_close, compile_on, random_conv_graph, strided_conv_graph, Rng,
};

#[test]
fn a_wrong_input_is_an_error_naming_the_input() {
    let mut rng = Rng(3);
    let (g, _) = random_conv_graph(&mut rng);
    let m = compile_on(1, &g);
    let bad = vec![Tensor::from_f32(vec![1, 1, 1, 1], vec![0.0]); g.inputs().len()];
    let e = m.run(&bad).unwrap_err().to_string();
    assert!(e.contains("model input 'x'"), "{e}");
    let e = m.run(&[]).unwrap_err().to_string();
    assert!(e.contains("inputs"), "{e}");
}

/// Graph inputs are read in place and graph outputs written in place: an input
/// that is also an output, an output that later steps read, and an output
/// listed twice all come back as the reference executor computes them, run
/// after run (a second run must not see the first one's buffers).
#[test]
fn inputs_and_outputs_in_place_match_the_reference_executor() {
    use crate::graph::{BinaryOp, ValueRef};
    let ty = ValueType::new(DType::F32, vec![1, 3, 40, 40]);
    let mut g = Graph::new("io");
    let x = g.add_input("x", ty.clone(), vec![]);
    let relu = g.add_node(Op::Unary(UnaryOp::Relu), "relu", &[x], &[], vec![]);
    let y = ValueRef::new(relu.unwrap(), 0);
    let add = g.add_node(Op::Binary(BinaryOp::Add), "add", &[y, x], &[], vec![]);
    let z = ValueRef::new(add.unwrap(), 0);
    g.set_outputs(vec![y, z, y, x]);
    let m = compile_on(2, &g);
    let mut rng = Rng(11);
    let mut run = || {
        let inputs = vec![Tensor::from_f32(ty.shape.clone(), rng.f32s(ty.numel()))];
        (
            m.run(&inputs).unwrap(),
            crate::reference::run(&g, &inputs).unwrap(),
        )
    };
    // Outputs still held are not written by the next run.
    let (first, first_expected) = run();
    let (second, second_expected) = run();
    assert_eq!(first, first_expected);
    assert_eq!(second, second_expected);
    // Once dropped, the next run writes its outputs into the same buffers.
    let buffer = |outs: &[Tensor]| outs[1].f32s().as_ptr() as usize;
    let reused = buffer(&second);
    drop((first, second));
    let (third, third_expected) = run();
    assert_eq!(third, third_expected);
    assert_eq!(buffer(&third), reused);
}

/// A model run from several threads at once (its pool and its scratch busy
/// with another thread's run) computes every run's own outputs.
#[test]
fn runs_from_several_threads_at_once_match_the_reference_executor() {
    let g = strided_conv_graph(16, 32, 1, true);
    let m = compile_on(2, &g);
    let mut rng = Rng(23);
    let cases: Vec<(Vec<Tensor>, Vec<f32>)> = (0..4)
        .map(|_| {
            let inputs: Vec<Tensor> = g
                .inputs()
                .iter()
                .map(|&id| {
                    let shape = g.node(id).outputs[0].ty.shape.clone();
                    let n = shape.iter().product();
                    Tensor::from_f32(shape, rng.f32s(n))
                })
                .collect();
            let expected = crate::reference::run(&g, &inputs).unwrap()[0].to_f32();
            (inputs, expected)
        })
        .collect();
    std::thread::scope(|s| {
        for (k, (inputs, expected)) in cases.iter().enumerate() {
            let m = &m;
            s.spawn(move || {
                for run in 0..20 {
                    let got = m.run(inputs).unwrap()[0].to_f32();
                    assert_close(&got, expected, &format!("thread {k}, run {run}"));
                }
            });
        }
    });
}
