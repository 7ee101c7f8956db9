//! Plans made with the built-in cost estimate, which measures nothing: the
//! same plan on every machine.

use layoutopt::api::{Costs, PlanLayouts, PlannerKind, TargetFamily};
use layoutopt::graph::Graph;
use layoutopt::layout::cost::CostModel;
use layoutopt::layout::plan::plan;
use layoutopt::layout::plan::Plan;
use layoutopt::layout::planners::planner_by_name;

/// `g` planned by `planner` for `target` with the built-in costs.
pub fn plan_builtin(g: &Graph, planner: PlannerKind, target: TargetFamily) -> Plan {
    PlanLayouts::new(planner, target)
        .with_costs(Costs::BuiltIn)
        .plan(g)
        .unwrap()
}

/// `g` planned by the planner named `planner` for 16-channel blocks, with
/// the default cost model.
pub fn plan_by_name(g: &Graph, planner: &str) -> Plan {
    let planner = planner_by_name(planner).unwrap();
    plan(
        g,
        planner.as_ref(),
        TargetFamily::Nchwc(16),
        &CostModel::default(),
    )
    .unwrap()
}

/// `g` rewritten by the bundled graph-stage rules, and the names of the rules
/// the result keeps for which `keep` holds.
pub fn graph_rules_fired(g: &Graph, keep: impl Fn(&str) -> bool) -> (Graph, Vec<String>) {
    use layoutopt::layout::extract::{rewrite_graph, RewriteLimits};
    use layoutopt::layout::rules::RuleSource;
    let rules = RuleSource::Bundled.load().unwrap();
    let (out, report) = rewrite_graph(g, &rules.graph, &RewriteLimits::default()).unwrap();
    let fired = (report.fired.iter())
        .map(|f| f.rule.clone())
        .filter(|r| keep(r))
        .collect();
    (out, fired)
}

/// `g` planned by the global planner for NCHW16c and for NHWC, compiled and
/// run on `x`: per target, its compiled steps (`CompiledModel::describe`),
/// after checking that the first output is the reference executor's within
/// `tol` of its magnitude.
pub fn steps_per_target(
    g: &Graph,
    x: &layoutopt::graph::Tensor,
    tol: f64,
) -> Vec<(layoutopt::layout::target::TargetFamily, Vec<String>)> {
    use layoutopt::layout::target::TargetFamily;
    use layoutopt::runtime::{CompiledModel, RuntimeOptions};
    let expected = layoutopt::reference::run(g, std::slice::from_ref(x)).unwrap();
    let planner = planner_by_name("global").unwrap();
    [TargetFamily::Nchwc(16), TargetFamily::Nhwc]
        .into_iter()
        .map(|family| {
            let p = plan(g, planner.as_ref(), family, &CostModel::default()).unwrap();
            let m = CompiledModel::compile(&p.graph, &RuntimeOptions::default()).unwrap();
            let got = m.run(std::slice::from_ref(x)).unwrap();
            let (err, mag) = crate::support::compare::max_abs_err(&expected[0], &got[0]);
            assert!(err <= tol * mag.max(1.0), "{family}: error {err} at {mag}");
            (family, m.describe())
        })
        .collect()
}
