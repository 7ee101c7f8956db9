//! The layout planners: each chooses one implementation per op of a plan
//! space. Four planners share the problem, so their plans compare on one cost
//! scale:
//! - `keep`: every op in its source (row-major) layout: no transforms;
//! - `local`: each layout source takes the family's layout, agnostic ops follow
//!   their first operand, everything else converts back (TVM ConvertLayout style;
//!   only back-to-back pairs cancel, because transforms are inserted per edge
//!   between differing layouts);
//! - `greedy`: `local`, then transforms sunk and hoisted through agnostic ops by
//!   moving one op at a time to its best layout given its neighbours, until no
//!   single move helps;
//! - `global`: the whole graph at once with `solver::solve`, with a lower bound.

use super::candidates::{op_kind, OpKind};
use super::report::SolverInfo;
use super::solver::{self, Method, SolveOptions};
use super::space::PlanSpace;
use super::PlanError;
use crate::graph::{Graph, NodeId};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// What a planner decided, with the solver's account when there was one.
pub struct Assignment {
    /// The impl chosen for each node of the space.
    pub choice: Vec<usize>,
    /// The solver's account, for the global planner.
    pub solver: Option<SolverInfo>,
}

/// A layout planner.
pub trait Planner: Send + Sync {
    /// The planner's name as the command line spells it.
    fn name(&self) -> &'static str;
    /// Chooses an impl for each node of `space`.
    fn assign(&self, g: &Graph, space: &PlanSpace) -> Result<Assignment, PlanError>;
    /// Other assignments to finish as well: the solver does not see what the
    /// rewriting after materialisation removes, so another assignment may end
    /// cheaper; the plan keeps the cheapest once rewritten. None by default.
    fn alternatives(&self, _g: &Graph, _space: &PlanSpace) -> Vec<Vec<usize>> {
        Vec::new()
    }
}

/// Every op in its source layout.
pub struct Keep;
/// Per-op preferences, transforms between disagreeing neighbours.
pub struct Local;
/// `Local`, then single-op moves while they lower the cost.
pub struct Greedy;
/// The whole graph at once.
pub struct Global {
    /// Limits of the solver.
    pub options: SolveOptions,
}

impl Planner for Keep {
    fn name(&self) -> &'static str {
        "keep"
    }
    fn assign(&self, _: &Graph, space: &PlanSpace) -> Result<Assignment, PlanError> {
        Ok(Assignment {
            choice: space.lift(&vec![0; space.nodes.len()]),
            solver: None,
        })
    }
}

impl Planner for Local {
    fn name(&self) -> &'static str {
        "local"
    }
    fn assign(&self, g: &Graph, space: &PlanSpace) -> Result<Assignment, PlanError> {
        Ok(Assignment {
            choice: space.lift(&local_choice(g, space)),
            solver: None,
        })
    }
}

fn local_choice(g: &Graph, space: &PlanSpace) -> Vec<usize> {
    let target = space.family.activation_layout();
    let var_of: HashMap<NodeId, usize> = space
        .nodes
        .iter()
        .enumerate()
        .map(|(i, &n)| (n, i))
        .collect();
    let mut choice = vec![0; space.nodes.len()];
    for (var, &id) in space.nodes.iter().enumerate() {
        let impls = &space.impls[var];
        let pick = match op_kind(&g.node(id).op) {
            OpKind::Source => impls.iter().position(|i| {
                let l = |id| Some(space.layouts.get(id));
                l(i.outputs[0]) == target.as_ref() && l(i.inputs[0]) == target.as_ref()
            }),
            OpKind::Agnostic => g.node_inputs(id).first().and_then(|v| {
                let have = var_of
                    .get(&v.node)
                    .map(|&pv| &space.impls[pv][choice[pv]].outputs[v.output])?;
                impls.iter().position(|i| &i.inputs[0] == have)
            }),
            _ => None,
        };
        choice[var] = pick.unwrap_or(0);
    }
    choice
}

impl Planner for Greedy {
    fn name(&self) -> &'static str {
        "greedy"
    }
    fn assign(&self, g: &Graph, space: &PlanSpace) -> Result<Assignment, PlanError> {
        let start = space.lift(&local_choice(g, space));
        Ok(Assignment {
            choice: solver::improve_locally(&space.problem, start),
            solver: None,
        })
    }
}

impl Planner for Global {
    fn name(&self) -> &'static str {
        "global"
    }
    /// The local and greedy assignments: after rewriting, global is never
    /// worse than either.
    fn alternatives(&self, g: &Graph, space: &PlanSpace) -> Vec<Vec<usize>> {
        let local = space.lift(&local_choice(g, space));
        let greedy = solver::improve_locally(&space.problem, local.clone());
        vec![local, greedy]
    }
    fn assign(&self, _: &Graph, space: &PlanSpace) -> Result<Assignment, PlanError> {
        let s = solver::solve(&space.problem, &self.options)?;
        let mut methods = BTreeMap::new();
        for r in &s.regions {
            let name = match r.method {
                Method::Elimination { .. } => "elimination",
                Method::LpIntegral => "lp-integral",
                Method::Integer => "integer",
                Method::Fallback { .. } => "fallback",
            };
            *methods.entry(name.to_string()).or_insert(0) += 1;
        }
        Ok(Assignment {
            solver: Some(SolverInfo {
                objective: s.objective,
                lower_bound: s.lower_bound,
                gap: s.gap(),
                regions: s.regions.len(),
                fixed_variables: s.fixed_variables,
                methods,
                fallback_used: s.used_fallback(),
            }),
            choice: s.choice,
        })
    }
}

/// The planner of a name: keep, local, greedy or global.
pub fn planner_by_name(name: &str) -> Result<Box<dyn Planner>, PlanError> {
    Ok(name.parse::<PlannerKind>()?.build())
}

/// The planners by name: the typed choice of the library API (`api::Planner`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PlannerKind {
    /// Every op in its source (row-major) layout: no transforms.
    Keep,
    /// Each op in its preferred layout, transforms between disagreeing neighbours.
    Local,
    /// `Local`, then single-op moves while they lower the cost.
    Greedy,
    /// The whole graph as one assignment problem, solved with a lower bound.
    Global,
}

impl PlannerKind {
    /// Every planner, in the order the command line's `compare` lists them.
    pub const ALL: [PlannerKind; 4] = [
        PlannerKind::Keep,
        PlannerKind::Local,
        PlannerKind::Greedy,
        PlannerKind::Global,
    ];

    /// The planner's name as the command line spells it.
    pub fn name(self) -> &'static str {
        match self {
            PlannerKind::Keep => "keep",
            PlannerKind::Local => "local",
            PlannerKind::Greedy => "greedy",
            PlannerKind::Global => "global",
        }
    }

    /// The planner itself.
    pub fn build(self) -> Box<dyn Planner> {
        match self {
            PlannerKind::Keep => Box::new(Keep),
            PlannerKind::Local => Box::new(Local),
            PlannerKind::Greedy => Box::new(Greedy),
            PlannerKind::Global => Box::new(Global {
                options: Default::default(),
            }),
        }
    }
}

impl std::str::FromStr for PlannerKind {
    type Err = PlanError;
    fn from_str(s: &str) -> Result<PlannerKind, PlanError> {
        PlannerKind::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| PlanError::UnknownPlanner(s.to_string()))
    }
}

impl std::fmt::Display for PlannerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
