//! The typed library API: planners and targets as enums, `Plan::layout_of`,
//! pinned input and output layouts, a settable cost model and the logical view
//! of a planned graph. Results are checked against the recorded onnxruntime
//! outputs of the bundled models (tolerance 1e-4 relative to max(1, |output|)).

use crate::support::bundled::load_test_data;
use crate::support::compare::max_abs_err;
use crate::support::plan::plan_builtin;
use layoutopt::api::logical::LogicalView;
use layoutopt::api::{
    load_model, ConvQuery, CostModel, Costs, Layout, Machine, MeasuredCosts, PlanLayouts,
    PlannerKind, TargetFamily, WithinMargin,
};
use layoutopt::graph::{Graph, Tensor, ValueType};
use layoutopt::runtime::{CompiledModel, RuntimeOptions};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn bundled(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("models")
        .join(name)
}

fn run(g: &Graph, inputs: &[Tensor]) -> Vec<Tensor> {
    let model = CompiledModel::compile(
        g,
        &RuntimeOptions {
            threads: 1,
            ..Default::default()
        },
    )
    .unwrap();
    model.run(inputs).unwrap()
}

fn assert_close(expected: &Tensor, actual: &Tensor) {
    assert_eq!(expected.shape, actual.shape);
    let (err, mag) = max_abs_err(expected, actual);
    assert!(err <= 1e-4 * mag.max(1.0), "max abs error {err:.3e}");
}

#[test]
fn planners_and_targets_parse_from_their_names() {
    for p in PlannerKind::ALL {
        assert_eq!(p.name().parse::<PlannerKind>().unwrap(), p);
        assert_eq!(p.to_string(), p.name());
    }
    let err = "fastest".parse::<PlannerKind>().unwrap_err().to_string();
    assert!(err.contains("unknown planner 'fastest'"), "{err}");
    assert_eq!("nhwc".parse::<TargetFamily>().unwrap(), TargetFamily::Nhwc);
    assert_eq!(
        "nchw8c".parse::<TargetFamily>().unwrap(),
        TargetFamily::Nchwc(8)
    );
    assert_eq!(
        "nchwc".parse::<TargetFamily>().unwrap(),
        TargetFamily::host_blocked()
    );
    assert!("nchw0c".parse::<TargetFamily>().is_err());
}

#[test]
fn layout_of_names_model_tensors() {
    let g = load_model(&bundled("resnet_small/model.onnx")).unwrap();
    let plan = plan_builtin(&g, PlannerKind::Global, TargetFamily::Nchwc(16));
    let input = g.value(layoutopt::graph::ValueRef::new(g.inputs()[0], 0));
    assert_eq!(
        plan.layout_of(&input.name).unwrap(),
        Layout::identity(4).unwrap()
    );
    assert_eq!(plan.layout_of("no such tensor"), None);
    // The report lists every kept model tensor, and agrees with layout_of.
    let blocked = Layout::parse("NCHW16c").unwrap();
    assert!(plan.report.tensors.values().any(|t| t.layout == "NCHW16c"));
    for (name, t) in &plan.report.tensors {
        let l = plan.layout_of(name).unwrap();
        assert_eq!(l.to_string(), t.layout, "{name}");
        assert_eq!(t.row_major, l.is_identity(), "{name}");
        if t.layout == "NCHW16c" {
            assert_eq!(l, blocked);
        }
    }
}

#[test]
fn a_pinned_input_arrives_in_its_layout_and_a_pinned_output_leaves_in_its() {
    let dir = bundled("resnet_small");
    let g = load_model(&dir.join("model.onnx")).unwrap();
    let (inputs, expected) = load_test_data(&dir);
    let input = g.value(layoutopt::graph::ValueRef::new(g.inputs()[0], 0));
    let output = g.value(g.outputs()[0]).name.clone();
    let plan = PlanLayouts::new(PlannerKind::Global, TargetFamily::Nchwc(8))
        .with_costs(Costs::BuiltIn)
        .with_pinned(&input.name, Layout::parse("NHWC").unwrap())
        .with_pinned(&output, Layout::parse("CN").unwrap())
        .plan(&g)
        .unwrap();
    let planned_input = plan.graph.node(plan.graph.inputs()[0]).outputs[0]
        .ty
        .clone();
    assert_eq!(planned_input.shape, vec![1, 32, 32, 3]);
    let nhwc = Layout::parse("NHWC")
        .unwrap()
        .to_physical(&inputs[0], 0.0)
        .unwrap();
    let got = run(&plan.graph, &[nhwc]);
    // The [1, 10] logits come back transposed: [10, 1] in memory.
    assert_eq!(got[0].shape, vec![10, 1]);
    assert_close(&expected[0].reshaped(vec![10, 1]), &got[0]);
}

#[test]
fn pins_that_do_not_fit_are_refused() {
    let g = load_model(&bundled("resnet_small/model.onnx")).unwrap();
    let plan = |name: &str, layout: &str| {
        PlanLayouts::new(PlannerKind::Global, TargetFamily::Nchwc(8))
            .with_costs(Costs::BuiltIn)
            .with_pinned(name, Layout::parse(layout).unwrap())
            .plan(&g)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let no_such = plan("no_such_input", "NHWC");
    assert!(
        no_such.contains("'no_such_input' is no graph input or output"),
        "{no_such}"
    );
    let input = g
        .value(layoutopt::graph::ValueRef::new(g.inputs()[0], 0))
        .name
        .clone();
    let wrong_rank = plan(&input, "NC");
    assert!(wrong_rank.contains("pinned layout"), "{wrong_rank}");
}

#[test]
fn the_cost_model_steers_the_plan() {
    let g = load_model(&bundled("resnet_small/model.onnx")).unwrap();
    let default = plan_builtin(&g, PlannerKind::Global, TargetFamily::Nchwc(16));
    assert!(default.report.transform_count > 0);
    // Moving a byte costs more than any convolution could win: nothing moves.
    let dear_bytes = CostModel {
        ns_per_byte: 1e6,
        ..CostModel::default()
    };
    let plan = PlanLayouts::new(PlannerKind::Global, TargetFamily::Nchwc(16))
        .with_cost_model(dear_bytes)
        .plan(&g)
        .unwrap();
    assert_eq!(plan.report.transform_bytes, 0);
    let (inputs, expected) = load_test_data(&bundled("resnet_small"));
    assert_close(&expected[0], &run(&plan.graph, &inputs)[0]);
}

/// The logical ops of a graph's compute nodes, counted by kind.
fn logical_ops(g: &Graph) -> BTreeMap<&'static str, usize> {
    let view = LogicalView::new(g);
    let mut counts = BTreeMap::new();
    for id in view.compute_nodes().unwrap() {
        *counts.entry(view.op(id).kind_name()).or_default() += 1;
    }
    counts
}

#[test]
fn the_logical_view_sees_the_same_ops_in_every_plan() {
    for model in ["resnet_small/model.onnx", "mobilenet_small/model.onnx"] {
        let g = load_model(&bundled(model)).unwrap();
        let keep = plan_builtin(&g, PlannerKind::Keep, TargetFamily::Nchwc(16));
        let global = plan_builtin(&g, PlannerKind::Global, TargetFamily::Nchwc(16));
        assert_eq!(
            logical_ops(&keep.graph),
            logical_ops(&global.graph),
            "{model}"
        );
        let view = LogicalView::new(&global.graph);
        let mut blocked = 0;
        for id in view.compute_nodes().unwrap() {
            // Logical inputs come from compute nodes, inputs or constants.
            for v in view.inputs(id) {
                assert!(!view.is_storage(v.node), "{model}");
            }
            blocked += usize::from(view.storage(id).is_some());
        }
        assert!(blocked > 0, "{model}: the global plan blocks some ops");
    }
}

/// Convolutions timed by a rule instead of a clock: those writing a blocked
/// layout cost `blocked_ns`, the others `row_major_ns`.
#[derive(Debug)]
struct FixedConvTimes {
    blocked_ns: f64,
    row_major_ns: f64,
}

impl MeasuredCosts for FixedConvTimes {
    fn conv_ns(&self, q: &ConvQuery) -> Option<f64> {
        Some(match q.y.1.is_blocked() {
            true => self.blocked_ns,
            false => self.row_major_ns,
        })
    }
    fn transform_ns(&self, _: &ValueType, _: &Layout, _: &Layout) -> Option<f64> {
        None
    }
}

#[test]
fn measured_conv_times_replace_the_estimate() {
    let g = load_model(&bundled("resnet_small/model.onnx")).unwrap();
    let (inputs, expected) = load_test_data(&bundled("resnet_small"));
    let plan_with = |blocked_ns, row_major_ns| {
        let times = FixedConvTimes {
            blocked_ns,
            row_major_ns,
        };
        let cost = CostModel {
            measured: Some(std::sync::Arc::new(times)),
            ..CostModel::default()
        };
        let plan = PlanLayouts::new(PlannerKind::Global, TargetFamily::Nchwc(16))
            .with_cost_model(cost)
            .plan(&g)
            .unwrap();
        assert_close(&expected[0], &run(&plan.graph, &inputs)[0]);
        plan
    };
    // Blocked convolutions measured slow: the plan keeps every tensor row-major,
    // although the estimate alone blocks them (`the_cost_model_steers_the_plan`).
    let slow_blocked = plan_with(1e9, 1.0);
    assert_eq!(slow_blocked.report.transform_bytes, 0);
    assert!(slow_blocked.report.estimated_cost < 1e9);
    // Measured fast: they are blocked, and the measured time is the cost.
    let fast_blocked = plan_with(1.0, 1e9);
    assert!(fast_blocked.report.transform_count > 0);
    assert!(fast_blocked.report.estimated_cost < 1e9);
}

/// Convolutions that take the same time in every pair of layouts, measured
/// with up to 2% of noise drawn from `seed`: the noise alone tells the
/// layouts apart.
#[derive(Debug)]
struct NoisyEqualConvTimes {
    seed: u64,
}

impl MeasuredCosts for NoisyEqualConvTimes {
    fn conv_ns(&self, q: &ConvQuery) -> Option<f64> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (
            self.seed,
            q.x.1.to_string(),
            q.y.1.to_string(),
            &q.y.0.shape,
        )
            .hash(&mut h);
        let noise = (h.finish() % 2001) as f64 / 1000.0 - 1.0;
        Some(1e5 * (1.0 + 0.02 * noise))
    }
    fn transform_ns(&self, _: &ValueType, _: &Layout, _: &Layout) -> Option<f64> {
        None
    }
}

#[test]
fn measurement_noise_within_the_margin_never_changes_the_plan() {
    let g = load_model(&bundled("resnet_small/model.onnx")).unwrap();
    let plan = |seed: u64, margin: Option<f64>| {
        let noisy = std::sync::Arc::new(NoisyEqualConvTimes { seed });
        let measured: std::sync::Arc<dyn MeasuredCosts> = match margin {
            Some(m) => std::sync::Arc::new(WithinMargin::new(noisy, m)),
            None => noisy,
        };
        let cost = CostModel {
            measured: Some(measured),
            ..CostModel::default()
        };
        let report = PlanLayouts::new(PlannerKind::Global, TargetFamily::Nchwc(16))
            .with_cost_model(cost)
            .plan(&g)
            .unwrap()
            .report;
        assert_eq!(report.cost_margin, margin.unwrap_or(0.0));
        report.tensors
    };
    // Taken as measured, the noise decides some layouts: the plans differ.
    let raw: Vec<_> = (0..8).map(|seed| plan(seed, None)).collect();
    assert!(raw.iter().any(|p| p != &raw[0]), "the noise never mattered");
    // Within a 5% margin, every process plans alike.
    let first = plan(0, Some(0.05));
    for seed in 1..8 {
        assert_eq!(plan(seed, Some(0.05)), first, "seed {seed}");
    }
}

/// Convolutions measured only where they write a row-major layout.
#[derive(Debug)]
struct RowMajorOutputsOnly;

impl MeasuredCosts for RowMajorOutputsOnly {
    fn conv_ns(&self, q: &ConvQuery) -> Option<f64> {
        (!q.y.1.is_blocked()).then_some(1e5)
    }
    fn transform_ns(&self, _: &ValueType, _: &Layout, _: &Layout) -> Option<f64> {
        None
    }
}

#[test]
fn the_plan_counts_the_convolutions_it_had_to_estimate() {
    use layoutopt::graph::Op;
    let g = load_model(&bundled("resnet_small/model.onnx")).unwrap();
    let convs = (g.node_ids().iter())
        .filter(|&&id| matches!(g.node(id).op, Op::Conv(_)))
        .count();
    let plan = |measured: std::sync::Arc<dyn MeasuredCosts>| {
        let cost = CostModel {
            measured: Some(std::sync::Arc::new(WithinMargin::new(measured, 0.05))),
            ..CostModel::default()
        };
        PlanLayouts::new(PlannerKind::Global, TargetFamily::Nchwc(16))
            .with_cost_model(cost)
            .plan(&g)
            .unwrap()
            .report
    };
    // Every convolution is asked for a blocked output too, which is not measured.
    let partly = plan(std::sync::Arc::new(RowMajorOutputsOnly));
    assert!(convs > 0);
    assert_eq!(partly.unmeasured_convs, convs);
    assert!(partly
        .to_text()
        .contains(&format!("{convs} convolutions could not be measured")));
    let fully = plan(std::sync::Arc::new(FixedConvTimes {
        blocked_ns: 1.0,
        row_major_ns: 1.0,
    }));
    assert_eq!(fully.unmeasured_convs, 0);
}

/// Options for one thread measuring into an empty cache directory of its own
/// (named after `test`), that directory, and a machine caching into it.
fn one_thread_with_empty_cache(test: &str) -> (PathBuf, RuntimeOptions, Machine) {
    let dir = std::env::temp_dir().join(format!("layoutopt-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut options = RuntimeOptions::with_threads(1);
    options.conv_algo.cache = Some(dir.clone());
    let machine = Machine::with_cache(Some(dir.clone()));
    (dir, options, machine)
}

#[test]
fn the_measured_cost_model_is_cached_and_predicts_the_steps() {
    use layoutopt::runtime::profile::calibrate::{measured_cost_model, predicted_step_seconds};
    let test = "the_measured_cost_model_is_cached_and_predicts_the_steps";
    let (dir, options, machine) = one_thread_with_empty_cache(test);
    let g = load_model(&bundled("resnet_small/model.onnx")).unwrap();
    let plan = |options: &RuntimeOptions| {
        PlanLayouts::new(PlannerKind::Global, TargetFamily::Nchwc(16))
            .with_cost_model(measured_cost_model(&machine, options).unwrap())
            .plan(&g)
            .unwrap()
    };
    let first = plan(&options);
    let times = dir.join("kernel_times.json");
    let written = std::fs::read(&times).unwrap();
    // A second planning reads every time from the cache: the same objective,
    // and nothing measured or written.
    let second = plan(&options);
    assert_eq!(first.report.estimated_cost, second.report.estimated_cost);
    assert_eq!(std::fs::read(&times).unwrap(), written);
    // The compiled model's convolutions are predicted by those times.
    let model = CompiledModel::compile_on(&machine, &second.graph, &options).unwrap();
    let peaks = machine.peaks(1, false).unwrap().peaks;
    let predicted = predicted_step_seconds(&model, &peaks);
    let convs = model.conv_steps();
    assert!(!convs.is_empty());
    for c in convs {
        let ms = c
            .decision
            .millis
            .iter()
            .find(|(a, _)| *a == c.decision.algo);
        assert!(ms.is_some(), "{}: {}", c.name, c.decision);
    }
    assert!(predicted.iter().all(|&s| s.is_finite() && s > 0.0));
    let (inputs, expected) = load_test_data(&bundled("resnet_small"));
    assert_close(&expected[0], &model.run(&inputs).unwrap()[0]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_transform_near_a_measured_shape_is_priced_from_it_and_counted() {
    use layoutopt::graph::DType;
    use layoutopt::layout::Layout;
    use layoutopt::runtime::profile::calibrate::measured_cost_model;
    let test = "a_transform_near_a_measured_shape_is_priced_from_it_and_counted";
    let (dir, options, machine) = one_thread_with_empty_cache(test);
    let (nchw, blocked) = (
        Layout::parse("NCHW").unwrap(),
        Layout::parse("NCHW16c").unwrap(),
    );
    let channels = |c: usize| ValueType::new(DType::F32, vec![1, c, 8, 8]);
    let price = |c: usize| {
        let costs = measured_cost_model(&machine, &options).unwrap();
        let ns = (costs.measured.as_ref().unwrap())
            .transform_ns(&channels(c), &nchw, &blocked)
            .unwrap();
        (ns, costs.estimated().transforms)
    };
    // 16 channels measured; 20 (x1.25) priced from them by the elements both
    // layouts store: 16 + 16 per pixel there, 20 + 32 (padded) here.
    let (measured, none) = price(16);
    assert_eq!(none, 0);
    let (near, one) = price(20);
    assert_eq!(one, 1);
    let want = measured * 52.0 / 32.0;
    assert!((near - want).abs() <= 1e-9 * want, "{near} vs {want}");
    // Kept in the cache: a later plan prices it the same, still as an estimate.
    assert_eq!(price(20), (near, 1));
    // 28 channels are 1.75x the measured 16, and only the estimate at 20 is
    // nearer (no estimate prices another): measured.
    assert_eq!(price(28).1, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_layout_transform_is_predicted_by_the_time_the_planner_measured_for_it() {
    use layoutopt::graph::{DType, Op, ValueRef};
    use layoutopt::layout::{Layout, PadValue};
    use layoutopt::ops::LayoutTransform;
    use layoutopt::runtime::profile::calibrate::{measured_cost_model, predicted_step_seconds};
    let test = "a_layout_transform_is_predicted_by_the_time_the_planner_measured_for_it";
    let (dir, options, machine) = one_thread_with_empty_cache(test);
    let t = ValueType::new(DType::F32, vec![1, 17, 8, 8]);
    let (nchw, blocked) = (
        Layout::parse("NCHW").unwrap(),
        Layout::parse("NCHW16c").unwrap(),
    );
    // The planner's measured costs of both transforms, cached when dropped.
    let measured_ns: Vec<f64> = {
        let costs = measured_cost_model(&machine, &options).unwrap();
        let m = costs.measured.as_ref().unwrap();
        [(&nchw, &blocked), (&blocked, &nchw)]
            .iter()
            .map(|(from, to)| m.transform_ns(&t, from, to).unwrap())
            .collect()
    };
    let mut g = Graph::new("transforms");
    let mut v = g.add_input("x", t.clone(), vec![]);
    for (name, from, to, pad) in [
        ("to", &nchw, &blocked, PadValue::Known(0.0)),
        ("back", &blocked, &nchw, PadValue::Undef),
    ] {
        let op = Op::LayoutTransform(LayoutTransform {
            from: from.clone(),
            to: to.clone(),
            logical: t.shape.clone(),
            pad,
        });
        v = ValueRef::new(g.add_node(op, name, &[v], &[], vec![]).unwrap(), 0);
    }
    g.set_outputs(vec![v]);
    let model = CompiledModel::compile_on(&machine, &g, &options).unwrap();
    let peaks = machine.peaks(1, false).unwrap().peaks;
    let predicted = predicted_step_seconds(&model, &peaks);
    assert_eq!(predicted.len(), 2);
    for (seconds, ns) in predicted.iter().zip(&measured_ns) {
        assert!(
            (seconds * 1e9 - ns).abs() <= 1e-9 * ns,
            "{seconds} s, measured {ns} ns"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
