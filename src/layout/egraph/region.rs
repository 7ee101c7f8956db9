//! The region of a graph that rewriting can change.
//!
//! A rule matches only nodes of the kinds its left side names (a transform, a
//! reshape, ...) and reads the layout and padding facts of their inputs.
//! Those facts flow through elementwise ops, transforms, pads and crops from
//! the op that fixed them (an op placed in a layout, a pool, a concat...). The
//! region is the nodes of the named kinds and, upstream of each, the nodes
//! the facts of its inputs flow through, down to and including the op that
//! fixed them; that op's own inputs are taken as given. The e-graph then holds
//! a few nodes around each transform instead of the whole graph, so rewriting
//! costs in proportion to what it can change.

use super::{Lang, LayoutAnalysis};
use crate::graph::{Graph, NodeId, Op};
use egg::{ENodeOrVar, Rewrite};
use rustc_hash::FxHashSet;

/// The e-graph node an op becomes; `None` for an input or a constant (a
/// source). Graph conversion builds exactly these (a test checks it).
pub fn lang_name(op: &Op) -> Option<&'static str> {
    Some(match op {
        Op::Input | Op::Constant(_) => return None,
        Op::LayoutTransform(_) => "xform",
        Op::PadWith(_) => "pad",
        Op::Crop(_) => "crop",
        Op::Unary(_) => "unary",
        Op::Binary(_) => "binary",
        Op::Pool(_) | Op::GlobalPool(_) => "pool",
        Op::Reshape(_) => "reshape",
        Op::Transpose(_) => "transpose",
        Op::Concat(_) => "concat",
        Op::Conv(_) => "conv",
        Op::Pad(_) => "padding",
        Op::Slice(_) => "slice",
        _ => "op",
    })
}

/// Whether the layout and padding facts of an op's output follow from its
/// inputs' (the analysis carries them through) rather than from the op.
fn facts_flow_through(op: &Op) -> bool {
    matches!(
        op,
        Op::Unary(_) | Op::Binary(_) | Op::LayoutTransform(_) | Op::PadWith(_) | Op::Crop(_)
    )
}

/// The node kinds the left sides of `rules` name; `None` when a left side is
/// not a pattern, so that any node might match.
fn matched_kinds(rules: &[Rewrite<Lang, LayoutAnalysis>]) -> Option<FxHashSet<String>> {
    let mut kinds = FxHashSet::default();
    for rule in rules {
        for n in rule.searcher.get_pattern_ast()?.as_ref() {
            if let ENodeOrVar::ENode(e) = n {
                if !matches!(e, Lang::Atom(_)) {
                    kinds.insert(e.to_string());
                }
            }
        }
    }
    Some(kinds)
}

/// The nodes of `g` that rewriting with `rules` may change or whose facts it
/// reads; `None` for the whole graph.
pub fn rewrite_region(
    g: &Graph,
    rules: &[Rewrite<Lang, LayoutAnalysis>],
) -> Option<FxHashSet<NodeId>> {
    let kinds = matched_kinds(rules)?;
    let matched = |id: NodeId| {
        let n = g.node(id);
        lang_name(&n.op).is_some_and(|k| kinds.contains(k))
            || (n.outputs.len() > 1 && kinds.contains("get"))
    };
    let mut stack: Vec<NodeId> = g.node_ids().into_iter().filter(|&id| matched(id)).collect();
    let mut region: FxHashSet<NodeId> = stack.iter().copied().collect();
    while let Some(id) = stack.pop() {
        if !matched(id) && !facts_flow_through(&g.node(id).op) {
            continue;
        }
        for v in g.node_inputs(id) {
            if region.insert(v.node) {
                stack.push(v.node);
            }
        }
    }
    Some(region)
}
