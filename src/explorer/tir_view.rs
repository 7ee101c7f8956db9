//! A node's loop nest for the explorer: the op's TIR compute definition and default
//! schedule (`lowering`), lowered after every primitive of the schedule record.

use crate::graph::{Op, ValueType};
use crate::layout::Layout;
use crate::lowering::op_compute;
use crate::tir::lower::{lower, LowerOptions};
use crate::tir::schedule::Schedule;
use crate::tir::TirError;
use serde::Serialize;

/// One run of the edit script from a loop nest to the next: the page rebuilds
/// each step's text and its line diff from these, so unchanged lines are not
/// stored once per step.
#[derive(Clone, Debug, PartialEq)]
pub enum Edit {
    /// This many lines unchanged.
    Keep(usize),
    /// This many lines removed.
    Drop(usize),
    /// A line added.
    Add(String),
}

/// Compact in the page's JSON: `Keep(n)` is `n`, `Drop(n)` is `-n`, `Add` the line.
impl Serialize for Edit {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Edit::Keep(n) => s.serialize_i64(*n as i64),
            Edit::Drop(n) => s.serialize_i64(-(*n as i64)),
            Edit::Add(line) => s.serialize_str(line),
        }
    }
}

/// The schedule after one primitive and its loop nest.
#[derive(Clone, Debug, Serialize)]
pub struct Step {
    /// The primitive as called, e.g. `split(Y, i, factor=8)`.
    pub primitive: String,
    /// The loop nest lowered from the schedule after this primitive (the page
    /// rebuilds it from the edits).
    #[serde(skip)]
    pub loop_nest: String,
    /// What this step changed in the loop nest against the step before.
    pub edits: Vec<Edit>,
}

/// A node's lowered loop nest and how its schedule built it, step by step.
#[derive(Clone, Debug, Serialize)]
pub struct TirView {
    /// Buffer layouts the loop nest is flattened under (tensor: layout).
    pub layouts: Vec<String>,
    /// One step per schedule primitive, the first being the default schedule.
    pub steps: Vec<Step>,
}

/// Line diff (longest common subsequence) of two texts as an edit script.
fn diff(before: &str, after: &str) -> Vec<Edit> {
    let a: Vec<&str> = before.lines().collect();
    let b: Vec<&str> = after.lines().collect();
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out: Vec<Edit> = Vec::new();
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            match out.last_mut() {
                Some(Edit::Keep(n)) => *n += 1,
                _ => out.push(Edit::Keep(1)),
            }
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            match out.last_mut() {
                Some(Edit::Drop(n)) => *n += 1,
                _ => out.push(Edit::Drop(1)),
            }
            i += 1;
        } else {
            out.push(Edit::Add(b[j].to_string()));
            j += 1;
        }
    }
    out
}

/// Why a node has no loop nest to show.
#[derive(Clone, Debug, thiserror::Error)]
pub enum NoTirView {
    /// A layout transform, which has no compute definition.
    #[error("{0} moves data between layouts; it has no TIR lowering yet")]
    Transform(&'static str),
    /// The op has no compute definition or default schedule.
    #[error(transparent)]
    Compute(#[from] TirError),
    /// Lowering failed after a schedule primitive.
    #[error("lowering after {primitive}: {error}")]
    #[allow(missing_docs)]
    Lowering { primitive: String, error: TirError },
}

/// Lowers `op` (logical) on inputs of `types` after every primitive of its default
/// schedule. `layouts` gives the storage of the inputs and the output for a laid-out op.
pub fn lower_node(
    op: &Op,
    types: &[ValueType],
    layouts: Option<(&[Layout], &Layout)>,
) -> Result<TirView, NoTirView> {
    let c = op_compute(op, types)?;
    let s = c.default_schedule(layouts)?;
    let mut opts = LowerOptions::default();
    let mut shown = Vec::new();
    if let Some((ins, out)) = layouts {
        for (name, l, bl) in c.storage(ins, out) {
            match bl {
                Some(bl) => {
                    shown.push(format!("{name}: {l}"));
                    opts.layouts.insert(name, bl);
                }
                None => shown.push(format!("{name}: {l} (shown row-major: nested blocks)")),
            }
        }
    }
    let mut steps: Vec<Step> = Vec::new();
    for entry in &s.record {
        let at = Schedule {
            state: entry.state.clone(),
            record: vec![],
        };
        let text = lower(&at, &opts)
            .map_err(|error| NoTirView::Lowering {
                primitive: entry.primitive.clone(),
                error,
            })?
            .to_text();
        let before = steps.last().map_or("", |st| st.loop_nest.as_str());
        steps.push(Step {
            primitive: entry.primitive.clone(),
            edits: diff(before, &text),
            loop_nest: text,
        });
    }
    Ok(TirView {
        layouts: shown,
        steps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Conv, DType, Window};

    #[test]
    fn diff_marks_added_and_removed_lines() {
        let d = diff("a\nb\nc\nd", "a\nx\nc\nd");
        assert_eq!(
            d,
            [
                Edit::Keep(1),
                Edit::Drop(1),
                Edit::Add("x".into()),
                Edit::Keep(2)
            ]
        );
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(json, r#"[1,-1,"x",2]"#);
    }

    #[test]
    fn conv_lowering_records_every_primitive() {
        let conv = Op::Conv(Conv {
            window: Window {
                kernel: vec![3, 3],
                strides: vec![1, 1],
                dilations: vec![1, 1],
                pads: vec![1, 1, 1, 1],
            },
            group: 1,
        });
        let types = [
            ValueType::new(DType::F32, vec![1, 4, 8, 8]),
            ValueType::new(DType::F32, vec![8, 4, 3, 3]),
        ];
        let v = lower_node(&conv, &types, None).unwrap();
        let prims: Vec<&str> = v.steps.iter().map(|s| s.primitive.as_str()).collect();
        // Lanes along the row and four output channels side by side; the
        // accumulators (`Y.acc`) stored rows-then-lanes and computed at the loop
        // outside the lanes, their reductions outside the rows and lanes; then
        // the outer channel loop in parallel.
        let expected = [
            "create_schedule",
            "split",
            "vectorize",
            "split",
            "reorder",
            "unroll",
            "storage_layout",
            "compute_at",
            "unroll",
            "reorder",
            "vectorize",
            "parallel",
        ];
        assert_eq!(prims.len(), expected.len(), "{prims:?}");
        for (p, e) in prims.iter().zip(expected) {
            assert!(p.starts_with(e), "{prims:?}");
        }
        let last = &v.steps[expected.len() - 1].loop_nest;
        for kind in ["vectorized", "unrolled", "parallel"] {
            assert!(last.contains(kind), "{last}");
        }
    }

    #[test]
    fn ops_without_lowering_say_so() {
        let e = lower_node(&Op::Where, &[], None).unwrap_err();
        assert!(
            e.to_string().contains("Where has no compute definition"),
            "{e}"
        );
    }
}
