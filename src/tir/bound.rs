//! InferBound, as described in the InferBound document (seeds 000/001, Chinese 003).
//!
//! `infer_bound` creates the read graph, visits the stages in reverse topological order
//! (consumers before producers) and for each stage calls [`infer_root_bound`] (phases
//! 1–4: leaf IntSets, PassUpDomain, PropBoundToInputs, GatherBound) and then
//! [`pass_down_domain`]. The result maps every iteration variable to a [`Range`]; each
//! range is set once and never changed.
//!
//! Deviations from TVM, all deliberate (see the module docs of `tir`):
//! - PassDownDomain gives the inner loop of a non-divisible split the tight extent
//!   `min(factor, parent_extent - outer * factor)` when the outer loop encloses it.
//! - PassUpDomain of a fuse is exact when the fused interval is aligned to its size and
//!   its size divides (or is a multiple of) the inner extent.
//! - GatherBound reports when its per-dimension union computes elements no consumer reads.

use std::collections::HashMap;

use super::compute::IterVar;
use super::error::TirError;
use super::expr::{Expr, Range, TensorId};
use super::intset::{eval_set, eval_set_in_order, DomMap, IntSet};
use super::schedule::{Attach, Relation, ScheduleState, Split, SplitBy, Stage};
use super::simplify::{const_bounds, prove_equal, simplify_with, Linear, VarBounds};

/// Elements computed by GatherBound's per-dimension union that no consumer requested
/// (limitation (b) of the document, reported rather than fixed).
#[derive(Clone, Debug, PartialEq)]
pub struct Overcompute {
    /// The tensor's name.
    pub tensor: String,
    /// Elements in the realized box.
    pub realized: i64,
    /// Elements in the union of the consumers' requested boxes.
    pub needed: i64,
}

/// The result of InferBound.
#[derive(Clone, Debug, Default)]
pub struct Bounds {
    /// Range of every iteration variable, by variable id.
    pub rmap: HashMap<u64, Range>,
    /// The factor of every split, by the id of its inner variable (nparts splits get
    /// theirs from the parent's extent).
    pub split_factor: HashMap<u64, Expr>,
    /// Attach path of every stage: the enclosing loop variables, innermost first.
    pub attach_path: HashMap<TensorId, Vec<IterVar>>,
    /// Constant bounds of every variable whose range has constant bounds.
    pub var_bounds: VarBounds,
    /// Tensors whose realized box is larger than what their consumers read.
    pub overcompute: Vec<Overcompute>,
}

impl Bounds {
    /// The range InferBound gave iteration variable `iv`.
    pub fn range(&self, iv: &IterVar) -> Result<&Range, TirError> {
        self.rmap
            .get(&iv.var.id)
            .ok_or_else(|| TirError::Bound(format!("no range was inferred for `{}`", iv.name())))
    }

    /// The factor of the split whose inner variable is `inner`.
    pub fn factor(&self, inner: &IterVar) -> Result<Expr, TirError> {
        self.split_factor
            .get(&inner.var.id)
            .cloned()
            .ok_or_else(|| TirError::Bound(format!("no split factor for `{}`", inner.name())))
    }

    /// Sets a range once (property 2 of the document: ranges never change).
    fn set(&mut self, iv: &IterVar, r: Range) {
        let r = Range::new(
            simplify_with(&r.min, &self.var_bounds),
            simplify_with(&r.extent, &self.var_bounds),
        );
        let (lo, _) = const_bounds(&r.min, &self.var_bounds);
        let (_, hi) = const_bounds(&(r.min.clone() + r.extent.clone() - 1), &self.var_bounds);
        if let (Some(lo), Some(hi)) = (lo, hi) {
            self.var_bounds.set(&iv.var, lo, hi);
        }
        debug_assert!(
            !self.rmap.contains_key(&iv.var.id),
            "range of {} set twice",
            iv.name()
        );
        self.rmap.insert(iv.var.id, r);
    }
}

/// `Map<IterVar, Range> InferBound(const Schedule&)`.
pub fn infer_bound(st: &ScheduleState) -> Result<Bounds, TirError> {
    let mut b = Bounds::default();
    for s in &st.stages {
        b.attach_path.insert(s.op, create_attach_path(st, s)?);
    }
    let order = st.topo_order()?;
    for t in order.iter().rev() {
        let s = st.stage_of(*t).expect("topo order holds stages");
        if s.attach == Attach::Inline {
            continue;
        }
        infer_root_bound(st, s, &mut b)?;
        pass_down_domain(s, &mut b)?;
    }
    Ok(b)
}

/// CreateAttachPath: the leaves of the attach stage from the attach variable outwards,
/// then those of the stage it is attached to, and so on.
pub fn create_attach_path(st: &ScheduleState, s: &Stage) -> Result<Vec<IterVar>, TirError> {
    let mut path = Vec::new();
    let mut cur = s;
    let mut hops = 0;
    while let Attach::Scope { stage, ivar } = &cur.attach {
        let parent = st.stage_of(*stage).ok_or_else(|| {
            TirError::Bound(format!(
                "`{}` is computed at a tensor without a stage",
                st.name(s.op)
            ))
        })?;
        let pos = parent.leaf_pos(&ivar.var).ok_or_else(|| {
            TirError::Bound(format!(
                "`{}` is computed at `{}`, which is no longer a leaf of `{}`",
                st.name(cur.op),
                ivar.name(),
                st.name(parent.op)
            ))
        })?;
        path.extend(parent.leaf_iter_vars[..=pos].iter().rev().cloned());
        cur = parent;
        hops += 1;
        if hops > st.stages.len() {
            return Err(TirError::Bound(format!(
                "the compute_at chain of `{}` is a cycle",
                st.name(s.op)
            )));
        }
    }
    Ok(path)
}

/// Sets the ranges of the root iteration variables of a stage.
pub fn infer_root_bound(st: &ScheduleState, s: &Stage, b: &mut Bounds) -> Result<(), TirError> {
    let c = st.compute_op(s.op).expect("stages are compute ops");
    let consumers = st.consumers(s.op);
    let name = st.name(s.op);
    // Outputs (and stages nobody reads) are computed over their whole domain.
    if st.outputs.contains(&s.op) || consumers.is_empty() {
        for iv in c.root_iter_vars() {
            b.set(&iv, dom_of(&iv)?);
        }
        return Ok(());
    }
    let ndim = c.axis.len();
    // tmap: for each dimension of the output tensor, one IntSet per consumer request.
    let mut tmap: Vec<Vec<IntSet>> = vec![vec![]; ndim];
    let stage_attach = b.attach_path.get(&s.op).cloned().unwrap_or_default();
    for cons in consumers {
        let cs = st.stage_of(cons).expect("consumers are stages");
        // Phase 1: IntSets for the consumer's leaves, innermost first.
        let mut up_state: DomMap = HashMap::new();
        let mut found_attach = false;
        let mut relaxed = Vec::new();
        for iv in cs.leaf_iter_vars.iter().rev() {
            if stage_attach.first() == Some(iv) {
                found_attach = true;
            }
            let r = b.range(iv)?.clone();
            let set = if r.extent.as_int() == Some(1) {
                // Case 1: a single iteration, the point at the range's min.
                IntSet::point(r.min.clone())
            } else if found_attach {
                // Case 2: no relaxation, the stage sits inside this loop (the attach
                // variable or a loop enclosing it): one value at a time.
                IntSet::point(iv.expr())
            } else {
                // Case 3: relaxation, the stage is computed outside this loop and must
                // provide for all of its iterations.
                relaxed.push(iv.clone());
                IntSet::from_range(&r, &b.var_bounds)
            };
            up_state.insert(iv.var.id, set);
        }
        // A relaxed leaf's range may depend on an enclosing leaf (tight split tails):
        // evaluate its ends over the other leaves' sets.
        for iv in &relaxed {
            let IntSet::Interval { min, max } = &up_state[&iv.var.id];
            let (Some(min), Some(max)) = (min.clone(), max.clone()) else {
                continue;
            };
            let mut others = up_state.clone();
            others.remove(&iv.var.id);
            let lo = eval_set(&min, &others, &b.var_bounds);
            let hi = eval_set(&max, &others, &b.var_bounds);
            up_state.insert(
                iv.var.id,
                IntSet::Interval {
                    min: lo.min().cloned(),
                    max: hi.max().cloned(),
                },
            );
        }
        // The consumer's own attach path: relaxed unless the stage is attached inside it.
        // Innermost first, as the attach path lists them.
        let mut relax_set: Vec<(u64, IntSet)> = Vec::new();
        for iv in b.attach_path.get(&cons).cloned().unwrap_or_default() {
            if stage_attach.first() == Some(&iv) {
                found_attach = true;
            }
            if !found_attach {
                relax_set.push((iv.var.id, IntSet::from_range(b.range(&iv)?, &b.var_bounds)));
            }
        }
        if !stage_attach.is_empty() && !found_attach {
            return Err(TirError::Bound(format!(
                "cannot find the producer `{name}` along the loop nest given by its compute_at, \
                 seen from its consumer `{}` (compute it at a loop that encloses every consumer)",
                st.name(cons)
            )));
        }
        // Phase 2: PassUpDomain to the consumer's roots.
        pass_up_domain(cs, b, &mut up_state)?;
        let cc = st.compute_op(cons).expect("consumers are compute ops");
        let mut dom_map: DomMap = HashMap::new();
        for iv in cc.root_iter_vars() {
            let dom = dom_of(&iv)?;
            let r = match up_state.get(&iv.var.id) {
                Some(set) => set.cover_range(&dom, &b.var_bounds),
                None => dom,
            };
            let set = if relax_set.is_empty() {
                IntSet::from_range(&r, &b.var_bounds)
            } else {
                let last = r.min.clone() + r.extent.clone() - 1;
                IntSet::Interval {
                    min: eval_set_in_order(&r.min, &relax_set, &b.var_bounds)
                        .min()
                        .cloned(),
                    max: eval_set_in_order(&last, &relax_set, &b.var_bounds)
                        .max()
                        .cloned(),
                }
            };
            dom_map.insert(iv.var.id, set);
        }
        // Phase 3: PropBoundToInputs, for the reads of this stage's tensor.
        prop_bound_to_inputs(cc.body.expr(), s.op, &dom_map, &b.var_bounds, &mut tmap);
    }
    // Phase 4: GatherBound.
    gather_bound(st, s, &tmap, b)
}

fn dom_of(iv: &IterVar) -> Result<Range, TirError> {
    iv.dom
        .clone()
        .ok_or_else(|| TirError::Bound(format!("root variable `{}` has no domain", iv.name())))
}

/// Phase 3: adds one request per read of `tensor` in `body`, per dimension.
pub fn prop_bound_to_inputs(
    body: &Expr,
    tensor: TensorId,
    dom_map: &DomMap,
    vb: &VarBounds,
    tmap: &mut [Vec<IntSet>],
) {
    body.visit(&mut |e| {
        if let Expr::Read { tensor: t, indices } = e {
            if *t == tensor {
                for (j, ix) in indices.iter().enumerate() {
                    tmap[j].push(eval_set(ix, dom_map, vb));
                }
            }
        }
    });
}

/// Phase 4: the union of all requests per dimension, covering the axis domain when a
/// request is unbounded; reduce axes get their domain.
fn gather_bound(
    st: &ScheduleState,
    s: &Stage,
    tmap: &[Vec<IntSet>],
    b: &mut Bounds,
) -> Result<(), TirError> {
    let c = st.compute_op(s.op).expect("stages are compute ops");
    let requests = tmap.first().map_or(0, |d| d.len());
    // Constant request boxes, one per consumer read, for the overcompute report.
    let boxes: Option<Vec<Vec<(i64, i64)>>> = (0..requests)
        .map(|r| {
            tmap.iter()
                .map(|d| Some((d[r].min()?.as_int()?, d[r].max()?.as_int()?)))
                .collect()
        })
        .collect();
    for (i, iv) in c.axis.iter().enumerate() {
        let dom = dom_of(iv)?;
        let mut sets = tmap[i].iter();
        let range = match sets.next() {
            None => dom,
            Some(first) => sets
                .fold(first.clone(), |acc, x| acc.union(x, &b.var_bounds))
                .cover_range(&dom, &b.var_bounds),
        };
        b.set(iv, range);
    }
    for iv in &c.reduce_axis {
        b.set(iv, dom_of(iv)?);
    }
    if let Some(boxes) = boxes.filter(|bx| bx.len() > 1) {
        let needed = union_volume(&boxes);
        let realized: i64 = (0..c.axis.len())
            .map(|d| {
                boxes.iter().map(|bx| bx[d].1).max().unwrap_or(0)
                    - boxes.iter().map(|bx| bx[d].0).min().unwrap_or(0)
                    + 1
            })
            .product();
        if realized > needed {
            b.overcompute.push(Overcompute {
                tensor: st.name(s.op).to_string(),
                realized,
                needed,
            });
        }
    }
    Ok(())
}

/// Number of integer points in a union of boxes (inclusive bounds), by coordinate
/// compression: each compressed cell is either inside some box or not.
fn union_volume(boxes: &[Vec<(i64, i64)>]) -> i64 {
    let ndim = boxes[0].len();
    let cuts: Vec<Vec<i64>> = (0..ndim)
        .map(|d| {
            let mut c: Vec<i64> = boxes.iter().flat_map(|b| [b[d].0, b[d].1 + 1]).collect();
            c.sort();
            c.dedup();
            c
        })
        .collect();
    let mut total = 0;
    let mut idx = vec![0usize; ndim];
    loop {
        if let Some(cell) = (0..ndim)
            .map(|d| cuts[d].get(idx[d] + 1).map(|hi| (cuts[d][idx[d]], *hi)))
            .collect::<Option<Vec<_>>>()
        {
            if boxes
                .iter()
                .any(|b| (0..ndim).all(|d| b[d].0 <= cell[d].0 && cell[d].1 - 1 <= b[d].1))
            {
                total += cell.iter().map(|(lo, hi)| hi - lo).product::<i64>();
            }
        }
        // odometer over cells
        let mut d = ndim;
        loop {
            if d == 0 {
                return total;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] + 1 < cuts[d].len() {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// Phase 2: propagates IntSets from the leaves to the roots, visiting relations from
/// last to first.
pub fn pass_up_domain(s: &Stage, b: &Bounds, up: &mut DomMap) -> Result<(), TirError> {
    let vb = &b.var_bounds;
    let get = |up: &DomMap, iv: &IterVar| -> Result<IntSet, TirError> {
        up.get(&iv.var.id).cloned().ok_or_else(|| {
            TirError::Bound(format!("no IntSet reached `{}` in PassUpDomain", iv.name()))
        })
    };
    for rel in s.relations.iter().rev() {
        match rel {
            Relation::Split(Split {
                parent,
                outer,
                inner,
                ..
            }) => {
                let (so, si) = (get(up, outer)?, get(up, inner)?);
                let pr = b.range(parent)?;
                let set =
                    if so.match_range(b.range(outer)?, vb) && si.match_range(b.range(inner)?, vb) {
                        IntSet::from_range(pr, vb)
                    } else {
                        // TVM uses the inner extent as the factor; with tight tails that extent
                        // may vary, so the split's own factor is used.
                        let f = b.factor(inner)?;
                        let mut m = DomMap::new();
                        m.insert(outer.var.id, so);
                        m.insert(inner.var.id, si);
                        eval_set(&(outer.expr() * f + inner.expr() + pr.min.clone()), &m, vb)
                    };
                up.insert(parent.var.id, set);
            }
            Relation::Fuse {
                outer,
                inner,
                fused,
            } => {
                let sf = get(up, fused)?;
                let (ro, ri) = (b.range(outer)?.clone(), b.range(inner)?.clone());
                let (so, si) = pass_up_fuse(&sf, b.range(fused)?, &ro, &ri, vb);
                up.insert(outer.var.id, so);
                up.insert(inner.var.id, si);
            }
            Relation::Rebase { parent, rebased } => {
                let sr = get(up, rebased)?;
                let pr = b.range(parent)?;
                let set = if sr.match_range(b.range(rebased)?, vb) {
                    IntSet::from_range(pr, vb)
                } else {
                    let mut m = DomMap::new();
                    m.insert(rebased.var.id, sr);
                    eval_set(&(rebased.expr() + pr.min.clone()), &m, vb)
                };
                up.insert(parent.var.id, set);
            }
        }
    }
    Ok(())
}

/// PassUpDomain for a fuse: from the set of the fused variable to those of outer and inner.
fn pass_up_fuse(
    sf: &IntSet,
    rf: &Range,
    ro: &Range,
    ri: &Range,
    vb: &VarBounds,
) -> (IntSet, IntSet) {
    if sf.match_range(rf, vb) {
        return (IntSet::from_range(ro, vb), IntSet::from_range(ri, vb));
    }
    let n = ri.extent.clone();
    if let Some(p) = sf.point_value(vb) {
        return (
            IntSet::point(simplify_with(
                &(p.clone().floordiv(n.clone()) + ro.min.clone()),
                vb,
            )),
            IntSet::point(simplify_with(&(p.clone().floormod(n) + ri.min.clone()), vb)),
        );
    }
    let full = (IntSet::from_range(ro, vb), IntSet::from_range(ri, vb));
    let (Some(lo), Some(hi)) = (sf.min(), sf.max()) else {
        return full;
    };
    // Rows from lo to hi at whole width: sound for any interval (newer TVM's behaviour;
    // the document's version took all rows).
    let row = simplify_with(&(lo.clone().floordiv(n.clone()) + ro.min.clone()), vb);
    let last_row = simplify_with(&(hi.clone().floordiv(n.clone()) + ro.min.clone()), vb);
    let rows = (IntSet::interval(row.clone(), last_row), full.1.clone());
    // Fix of limitation (c): an interval [lo, lo + e) with lo a multiple of e is exact
    // after the fuse when e divides the inner extent n (one row, e columns) or n divides
    // e (e/n whole rows). A split of the fused variable by a factor or nparts that
    // divides the fused extent produces exactly such intervals.
    let e = simplify_with(&(hi.clone() - lo.clone() + 1), vb).as_int();
    let (Some(e), Some(nc)) = (e, n.as_int()) else {
        return rows;
    };
    let aligned =
        |k: i64| Linear::of(lo).terms.iter().all(|t| t.1 % k == 0) && Linear::of(lo).c % k == 0;
    if nc % e == 0 && aligned(e) {
        let col = simplify_with(&(lo.clone().floormod(nc) + ri.min.clone()), vb);
        return (
            IntSet::point(row),
            IntSet::interval(col.clone(), simplify_with(&(col + (e - 1)), vb)),
        );
    }
    if e % nc == 0 && aligned(nc) {
        let last = simplify_with(&(row.clone() + (e / nc - 1)), vb);
        return (IntSet::interval(row, last), full.1);
    }
    rows
}

/// Sets the ranges of all non-root variables of a stage from its roots, visiting the
/// relations in order.
pub fn pass_down_domain(s: &Stage, b: &mut Bounds) -> Result<(), TirError> {
    for rel in &s.relations {
        match rel {
            Relation::Split(Split {
                parent,
                outer,
                inner,
                by,
            }) => {
                let pr = b.range(parent)?.clone();
                let ext = pr.extent.clone();
                let f: Expr = match *by {
                    SplitBy::Factor(f) => Expr::Int(f),
                    SplitBy::Parts(p) => {
                        simplify_with(&(ext.clone() + (p - 1)).floordiv(p), &b.var_bounds)
                    }
                };
                let nouter = simplify_with(
                    &(ext.clone() + f.clone() - 1).floordiv(f.clone()),
                    &b.var_bounds,
                );
                b.set(outer, Range::extent(nouter));
                let divisible = prove_equal(
                    &ext.clone().floormod(f.clone()),
                    &Expr::Int(0),
                    &b.var_bounds,
                );
                // Fix of limitation (a): when the outer loop encloses the inner one, the last
                // outer iteration runs only the remaining `ext - outer*f` inner iterations.
                let outer_encloses = matches!((s.leaf_pos(&outer.var), s.leaf_pos(&inner.var)), (Some(o), Some(i)) if o < i);
                let inner_ext = if !divisible && outer_encloses {
                    f.clone().min(ext - outer.expr() * f.clone())
                } else {
                    f.clone()
                };
                b.set(inner, Range::extent(inner_ext));
                b.split_factor.insert(inner.var.id, f);
            }
            Relation::Fuse {
                outer,
                inner,
                fused,
            } => {
                let e = b.range(outer)?.extent.clone() * b.range(inner)?.extent.clone();
                b.set(fused, Range::extent(e));
            }
            Relation::Rebase { parent, rebased } => {
                let e = b.range(parent)?.extent.clone();
                b.set(rebased, Range::extent(e));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn union_volume_counts_points_once() {
        // The document's example: T[0:2, 0:2] and T[2:4, 2:4].
        assert_eq!(
            union_volume(&[vec![(0, 1), (0, 1)], vec![(2, 3), (2, 3)]]),
            8
        );
        // Overlapping boxes.
        assert_eq!(union_volume(&[vec![(0, 2)], vec![(1, 4)]]), 5);
        assert_eq!(
            union_volume(&[vec![(0, 1), (0, 1)], vec![(1, 2), (1, 2)]]),
            7
        );
    }
}
