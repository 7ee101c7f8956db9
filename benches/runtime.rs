//! Latency of the native runtime on the bundled CNNs and, when generated
//! (`python3 scripts/gen_models.py --full`), full-size ResNet-18 and
//! MobileNetV2: planned with `global` for this CPU's NCHWxc, 2 threads, batch 1.
//! Run with `cargo bench --bench runtime`.

use criterion::{criterion_group, criterion_main, Criterion};
use layoutopt::frontend::onnx::{load_onnx, ImportOptions};
use layoutopt::graph::Tensor;
use layoutopt::layout::cost::CostModel;
use layoutopt::layout::plan::plan;
use layoutopt::layout::planners::planner_by_name;
use layoutopt::layout::target::TargetFamily;
use layoutopt::runtime::{CompiledModel, RuntimeOptions};
use std::path::Path;

const MODELS: [&str; 4] = [
    "resnet_small",
    "mobilenet_small",
    "full/resnet18",
    "full/mobilenetv2",
];

fn models(c: &mut Criterion) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    let family = TargetFamily::parse("nchwc").expect("the CPU's block family parses");
    for name in MODELS {
        let path = root.join(name).join("model.onnx");
        if !path.exists() {
            eprintln!("skipping {name}: {} is missing", path.display());
            continue;
        }
        let g = load_onnx(&path, &ImportOptions::default()).expect("model imports");
        let planner = planner_by_name("global").expect("global planner");
        let planned = plan(&g, planner.as_ref(), family, &CostModel::default())
            .expect("model plans")
            .graph;
        let model = CompiledModel::compile(
            &planned,
            &RuntimeOptions {
                threads: 2,
                ..Default::default()
            },
        )
        .expect("model compiles");
        let inputs: Vec<Tensor> = planned
            .inputs()
            .iter()
            .map(|&id| {
                let ty = &planned.node(id).outputs[0].ty;
                let n = ty.numel();
                Tensor::from_f32(
                    ty.shape.clone(),
                    (0..n).map(|i| (i % 255) as f32 / 255.0).collect(),
                )
            })
            .collect();
        c.bench_function(&format!("run {name} (2 threads)"), |b| {
            b.iter(|| model.run(&inputs).expect("model runs"))
        });
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = models
}
criterion_main!(benches);
