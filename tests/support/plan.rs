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
