//! Long chains of one kind of node, and the pipeline options they run with:
//! shared by the scaling tests (`tests/integration/scaling.rs`) and the scaling benchmark
//! (`benches/chain_scaling.rs`), so both measure the same graphs.

use super::onnx::{model, model_bytes, node, value_info};
use layoutopt::api::{Costs, PlanLayouts, PlannerKind, TargetFamily};
use layoutopt::graph::{Graph, Tensor};
use layoutopt::layout::plan::Plan;
use layoutopt::runtime::{CompiledModel, RuntimeOptions};
use onnx_protobuf::NodeProto;

const FLOAT: i32 = 1;

/// An ONNX model of `n` nodes of one kind (see the arms).
pub fn chain_model(kind: &str, n: usize) -> Vec<u8> {
    let mut nodes: Vec<NodeProto> = vec![];
    let mut inits = vec![];
    let mut shape = vec![1i64, 8];
    let mut prev = "x".to_string();
    match kind {
        // x -> Relu -> Relu -> ...
        "relu" => {
            for i in 0..n {
                let out = format!("v{i}");
                nodes.push(node("Relu", &out, &[&prev], &[&out]));
                prev = out;
            }
        }
        // x + c * c + ... (one operand from outside the chain per node)
        "add" => {
            inits.push(("c", Tensor::from_f32(vec![1, 8], vec![0.001; 8])));
            for i in 0..n {
                let out = format!("v{i}");
                let op = if i % 2 == 0 { "Add" } else { "Mul" };
                nodes.push(node(op, &out, &[&prev, "c"], &[&out]));
                prev = out;
            }
        }
        // y = x + conv(x), repeated: a residual chain of conv and add.
        "convadd" => {
            shape = vec![1, 8, 4, 4];
            let w: Vec<f32> = (0..64)
                .map(|k| ((k * 7 % 13) as f32 - 6.0) * 0.02)
                .collect();
            inits.push(("w", Tensor::from_f32(vec![8, 8, 1, 1], w)));
            for i in 0..n / 2 {
                let (c, out) = (format!("c{i}"), format!("v{i}"));
                nodes.push(node("Conv", &c, &[&prev, "w"], &[&c]));
                nodes.push(node("Add", &out, &[&c, &prev], &[&out]));
                prev = out;
            }
        }
        // Max of n Relus of x: one node of n inputs.
        "max" => {
            let names: Vec<String> = (0..n).map(|i| format!("r{i}")).collect();
            for r in &names {
                nodes.push(node("Relu", r, &["x"], &[r]));
            }
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            nodes.push(node("Max", "max", &refs, &["y"]));
            prev = "y".into();
        }
        _ => panic!("no chain kind {kind}"),
    }
    let m = model(
        nodes,
        vec![value_info("x", FLOAT, &shape)],
        vec![value_info(&prev, FLOAT, &shape)],
        inits,
        13,
    );
    model_bytes(&m)
}

/// The plan every chain gets: the global planner for the host's blocked layouts.
pub fn plan_chain(g: &Graph) -> Plan {
    PlanLayouts::new(PlannerKind::Global, TargetFamily::host_blocked())
        .with_costs(Costs::BuiltIn)
        .plan(g)
        .expect("plans")
}

/// The compiled plan, on one thread (so that sizes compare, whatever the machine).
pub fn compile_chain(plan: &Plan) -> CompiledModel {
    CompiledModel::compile(
        &plan.graph,
        &RuntimeOptions {
            threads: 1,
            ..Default::default()
        },
    )
    .expect("compiles")
}
