//! Embedding layoutopt's planner as one pass of another compiler.
//!
//! The "compiler" here has three passes over a layoutopt [`Graph`]: its own
//! clean-up pass, layoutopt's layout planner (told that the compiler's
//! frontend hands images over channels-last, with its own cost model), and a
//! pass of its own after the planner that reads the planned graph through the
//! documented logical view. Then it compiles the result with layoutopt's
//! runtime and checks it against the reference executor on the source graph.
//!
//! `cargo run --release --example embed_planner` prints what each pass saw;
//! `cargo test --examples` builds it and runs its test.

use layoutopt::api::logical::LogicalView;
use layoutopt::api::{
    load_model, CostModel, Error, Layout, Pass, Pipeline, PlanLayouts, PlannerKind, TargetFamily,
};
use layoutopt::graph::{Graph, Tensor, TensorData};
use layoutopt::runtime::{CompiledModel, RuntimeOptions};
use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;

/// The host compiler's own pass before planning: drops nodes no output needs.
struct DeadCode;

impl Pass for DeadCode {
    fn name(&self) -> &str {
        "dead-code"
    }
    fn run(&self, mut g: Graph) -> Result<Graph, Error> {
        g.remove_dead_nodes();
        Ok(g)
    }
}

/// Each computing op's logical kind and the layout it writes, in order.
type Found = Vec<(String, String)>;

/// What the host's post-planning pass found, shared with the caller.
type Findings = Rc<RefCell<Found>>;

/// The host compiler's pass after planning: reads the physical planned graph
/// as logical ops with storage layouts, as `api::logical` documents.
struct StorageReport(Findings);

impl Pass for StorageReport {
    fn name(&self) -> &str {
        "storage-report"
    }
    fn run(&self, g: Graph) -> Result<Graph, Error> {
        let view = LogicalView::new(&g);
        let mut found = self.0.borrow_mut();
        for id in view.compute_nodes()? {
            let layout = match view.storage(id) {
                Some(laid_out) => laid_out.outputs[0].0.to_string(),
                None => "row-major".to_string(),
            };
            found.push((view.op(id).kind_name().to_string(), layout));
        }
        Ok(g)
    }
}

/// Compiles the bundled ResNet-style model through the host's pipeline, runs
/// it on a channels-last input, and returns the largest difference from the
/// reference executor's output of the source graph, with the post-planning
/// findings.
fn compile_and_check() -> Result<(f64, Found), Box<dyn std::error::Error>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/resnet_small/model.onnx");
    let source = load_model(&path)?;
    let input = source.node(source.inputs()[0]).outputs[0].clone();

    // The host's cost model: its memory is twice as slow as the default's.
    let cost = CostModel {
        ns_per_byte: 0.2,
        ..CostModel::default()
    };
    let findings = Findings::default();
    let pipeline = Pipeline::new()
        .with(DeadCode)
        .with(
            PlanLayouts::new(PlannerKind::Global, TargetFamily::Nchwc(8))
                .with_cost_model(cost)
                .with_pinned(&input.name, Layout::parse("NHWC")?),
        )
        .with(StorageReport(findings.clone()));
    let planned = pipeline.run(source.clone())?;

    // Seeded input; the planned model takes it channels-last.
    let n = input.ty.numel();
    let x: Vec<f32> = (0..n)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let x = Tensor::new(input.ty.shape.clone(), TensorData::F32(x));
    let compiled = CompiledModel::compile(&planned, &RuntimeOptions::with_threads(1))?;
    let channels_last = Layout::parse("NHWC")?.to_physical(&x, 0.0)?;
    let got = compiled.run(&[channels_last])?;
    let want = layoutopt::reference::run(&source, &[x])?;
    let err = got[0]
        .data
        .to_f64()
        .iter()
        .zip(want[0].data.to_f64())
        .map(|(a, b)| (a - b).abs() / b.abs().max(1.0))
        .fold(0.0, f64::max);
    let found = findings.borrow().clone();
    Ok((err, found))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (err, found) = compile_and_check()?;
    for (op, layout) in &found {
        println!("{op:<24} writes {layout}");
    }
    println!("largest relative difference from the reference executor: {err:.2e}");
    Ok(())
}

#[test]
fn the_embedded_planner_computes_what_the_source_does() {
    let (err, found) = compile_and_check().unwrap();
    assert!(err <= 1e-4, "relative error {err:.3e}");
    assert!(found.iter().any(|(op, _)| op == "Conv"));
    assert!(found.iter().any(|(_, layout)| layout == "NCHW8c"));
}
