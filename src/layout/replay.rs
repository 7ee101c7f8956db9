//! Layout decisions that outlive the input shape they were made at.
//!
//! A layout names how axes are ordered and blocked, never their extents, so
//! the layouts a plan chose for a model at one shape of its free dimensions
//! (a batch, an image size) fit the same model at any other. A session plans
//! the first shape it meets with measured costs, records each planned node's
//! layouts ([`LayoutDecisions`]), and plans every later shape by [`Replay`]:
//! the same layouts, found again in the new shape's plan space, with nothing
//! measured or solved.
//!
//! A replay is refused, never bent, when the graph at the new shape is not the
//! graph decided for: another count or sequence of planned nodes, or a node
//! whose recorded layouts are not among its impls there (an import that
//! folded a shape into the graph, a rule that fired at one shape only). The
//! caller then plans that shape afresh.

use super::candidates::LayoutId;
use super::planners::{Assignment, Planner};
use super::space::PlanSpace;
use super::target::TargetFamily;
use super::{Layout, PlanError};
use crate::graph::{Graph, NodeId, Span};

/// What a plan decided for each planned node, in layouts rather than in the
/// indices of one plan space.
#[derive(Clone, Debug)]
pub struct LayoutDecisions {
    family: TargetFamily,
    nodes: Vec<Decided>,
}

/// One planned node's decision.
#[derive(Clone, Debug, PartialEq)]
struct Decided {
    /// The node, as another shape's graph is checked against it: its op
    /// kind and source layers.
    op: &'static str,
    spans: Vec<Span>,
    /// The layouts of its inputs and outputs.
    inputs: Vec<Layout>,
    outputs: Vec<Layout>,
    /// The layout its output was also transformed to, once, for every reader
    /// wanting it.
    shared: Option<Layout>,
}

impl LayoutDecisions {
    /// The decisions of `choice` (one variant per variable of `space`, the
    /// space of `g`).
    pub(super) fn record(g: &Graph, space: &PlanSpace, choice: &[usize]) -> LayoutDecisions {
        let nodes = (space.nodes.iter().zip(choice).enumerate())
            .map(|(var, (&id, &k))| {
                let variant = space.variants[var][k];
                let imp = &space.impls[var][variant.imp];
                let (op, spans) = identity(g, id);
                Decided {
                    op,
                    spans,
                    inputs: layouts_of(space, &imp.inputs),
                    outputs: layouts_of(space, &imp.outputs),
                    shared: variant.shared.map(|l| space.layouts.get(l).clone()),
                }
            })
            .collect();
        LayoutDecisions {
            family: space.family,
            nodes,
        }
    }

    /// The variant of each variable of `space` (the space of `g`) that makes
    /// the recorded decisions, or why the graph is not the one decided for.
    fn choice_in(&self, g: &Graph, space: &PlanSpace) -> Result<Vec<usize>, PlanError> {
        let refuse = |spans: Vec<Span>, why: String| PlanError::AtLayer {
            spans,
            message: format!("the layouts decided at another input shape do not fit: {why}"),
        };
        if space.family != self.family {
            let why = format!("planned for {}, now for {}", self.family, space.family);
            return Err(refuse(vec![], why));
        }
        if space.nodes.len() != self.nodes.len() {
            let why = format!(
                "{} planned nodes then, {} now",
                self.nodes.len(),
                space.nodes.len()
            );
            return Err(refuse(vec![], why));
        }
        (space.nodes.iter().zip(&self.nodes).enumerate())
            .map(|(var, (&id, decided))| {
                let (op, spans) = identity(g, id);
                if (op, &spans) != (decided.op, &decided.spans) {
                    let why = format!("a {op} node stands where a {} was", decided.op);
                    return Err(refuse(spans, why));
                }
                // The recorded layouts as this space interns them: one it
                // never interned is among no impl of it.
                let ids = |ls: &[Layout]| -> Option<Vec<LayoutId>> {
                    ls.iter().map(|l| space.layouts.find(l)).collect()
                };
                let wanted = (ids(&decided.inputs), ids(&decided.outputs));
                let shared = match &decided.shared {
                    Some(l) => space.layouts.find(l).map(Some),
                    None => Some(None),
                };
                let found = match (wanted, shared) {
                    ((Some(inputs), Some(outputs)), Some(shared)) => (space.variants[var].iter())
                        .position(|v| {
                            let imp = &space.impls[var][v.imp];
                            (imp.inputs == inputs && imp.outputs == outputs) && v.shared == shared
                        }),
                    _ => None,
                };
                found.ok_or_else(|| refuse(spans, "its layouts are not among its impls".into()))
            })
            .collect()
    }
}

/// A node as decisions recognise it across shapes.
fn identity(g: &Graph, id: NodeId) -> (&'static str, Vec<Span>) {
    let n = g.node(id);
    (n.op.kind_name(), n.spans.clone())
}

fn layouts_of(space: &PlanSpace, ids: &[LayoutId]) -> Vec<Layout> {
    ids.iter().map(|&l| space.layouts.get(l).clone()).collect()
}

/// The planner that makes recorded decisions again.
pub struct Replay {
    /// The decisions.
    pub decisions: std::sync::Arc<LayoutDecisions>,
}

impl Planner for Replay {
    fn name(&self) -> &'static str {
        "replay"
    }
    fn assign(&self, g: &Graph, space: &PlanSpace) -> Result<Assignment, PlanError> {
        Ok(Assignment {
            choice: self.decisions.choice_in(g, space)?,
            solver: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, Op, Tensor, UnaryOp, ValueType};
    use crate::layout::cost::CostModel;
    use crate::layout::plan::{plan, Plan};
    use crate::layout::planners::PlannerKind;
    use crate::ops::testutil::conv_3x3;
    use std::sync::Arc;

    /// Two 3x3 convolutions over x[1, 32, side, side], a Relu between them
    /// when `relu`.
    fn convs(side: usize, relu: bool) -> Graph {
        let mut g = Graph::new("convs");
        let ty = ValueType::new(DType::F32, vec![1, 32, side, side]);
        let mut v = g.add_input("x", ty, vec![]);
        for name in ["a", "b"] {
            let w = g.add_constant(
                &format!("{name}_w"),
                Tensor::from_f32(vec![32, 32, 3, 3], vec![0.01; 32 * 32 * 9]),
                vec![],
            );
            let id = g.add_node(conv_3x3(), name, &[v, w], &[name.into()], vec![]);
            v = crate::graph::ValueRef::new(id.unwrap(), 0);
            if relu && name == "a" {
                let id = g.add_node(Op::Unary(UnaryOp::Relu), "r", &[v], &[], vec![]);
                v = crate::graph::ValueRef::new(id.unwrap(), 0);
            }
        }
        g.set_outputs(vec![v]);
        g
    }

    fn planned(g: &Graph, planner: &dyn Planner) -> Result<Plan, PlanError> {
        plan(g, planner, TargetFamily::Nchwc(16), &CostModel::default())
    }

    /// The layouts decided at one image size are made again at another; a
    /// graph with another sequence of nodes is refused, naming why.
    #[test]
    fn decisions_replay_at_another_shape_and_refuse_another_graph() {
        let global = PlannerKind::Global.build();
        let first = planned(&convs(8, false), global.as_ref()).unwrap();
        let replay = Replay {
            decisions: Arc::new(first.decisions.clone()),
        };
        let layouts = |p: &Plan| -> Vec<String> {
            (p.report.tensors.iter())
                .map(|(name, t)| format!("{name}: {}", t.layout))
                .collect()
        };
        let again = planned(&convs(13, false), &replay).unwrap();
        let fresh = planned(&convs(13, false), global.as_ref()).unwrap();
        assert_eq!(layouts(&again), layouts(&first));
        assert_eq!(again.report.planner, "replay");
        // The fresh plan at the new size agrees here: nothing in these
        // layouts depended on the size.
        assert_eq!(layouts(&again), layouts(&fresh));
        let e = planned(&convs(8, true), &replay).err().unwrap().to_string();
        assert!(e.contains("do not fit"), "{e}");
        assert!(e.contains("planned nodes then"), "{e}");
    }
}
