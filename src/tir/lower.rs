//! Lowering a schedule to a loop nest: ScheduleOps (MakeLoopNest per stage, attached
//! stages injected at their attach loops, realize regions from InferBound, bound-check
//! guards with a likely hint), simplification, loop partitioning of split tails, and
//! storage flattening under buffer layouts.

use std::collections::HashMap;

use super::bound::{infer_bound, Bounds};
use super::compute::{Body, ComputeGraph, ComputeOp, IterKind, IterVar, OpKind};
use super::error::TirError;
use super::expr::{BinOp, Expr, Range, TensorId, Var};
use super::intset::{eval_set_in_order, DomMap, IntSet};
use super::layout::BufferLayout;
use super::schedule::{Attach, Relation, Schedule, ScheduleState, Stage};
use super::simplify::{
    const_bounds, prove_ge_zero, prove_le_zero, simplify, simplify_with, VarBounds,
};
use super::stmt::{BufferView, KernelArg, Stmt};

#[derive(Clone, Debug)]
pub struct LowerOptions {
    /// Buffer layouts by tensor name (row-major otherwise). For a tensor realized inside
    /// the function, the layout applies to the realized region.
    pub layouts: HashMap<String, BufferLayout>,
    /// Partition loops whose last iteration is a split tail or needs a guard.
    pub partition_loops: bool,
    /// Keep loops of one iteration (TVM's `debug_keep_trivial_loop`, which the
    /// InferBound document's listings use); otherwise their variable is substituted.
    pub keep_trivial_loops: bool,
}

impl Default for LowerOptions {
    fn default() -> Self {
        LowerOptions {
            layouts: HashMap::new(),
            partition_loops: true,
            keep_trivial_loops: false,
        }
    }
}

/// The output of ScheduleOps, before flattening.
#[derive(Clone, Debug)]
pub struct ScheduledOps {
    pub state: ScheduleState,
    pub bounds: Bounds,
    pub body: Stmt,
}

impl ScheduledOps {
    pub fn to_text(&self) -> String {
        let g = &self.state.graph;
        self.body.display(&|t| g.op(t).name.clone()).to_string()
    }
}

/// A lowered function: flat buffers for the placeholders it reads and the outputs.
#[derive(Clone, Debug)]
pub struct LoweredFunc {
    pub graph: ComputeGraph,
    pub params: Vec<TensorId>,
    pub layouts: HashMap<TensorId, BufferLayout>,
    pub body: Stmt,
    pub bounds: Bounds,
}

impl LoweredFunc {
    pub fn to_text(&self) -> String {
        let g = &self.graph;
        self.body.display(&|t| g.op(t).name.clone()).to_string()
    }
}

/// ScheduleOps: normalizes the schedule, runs InferBound and builds the loop nest with
/// realize regions.
pub fn schedule_ops(s: &Schedule) -> Result<ScheduledOps, TirError> {
    let state = s.normalized()?;
    let bounds = infer_bound(&state)?;
    let order = state.topo_order()?;
    let mut attached: HashMap<u64, Vec<TensorId>> = HashMap::new();
    for t in &order {
        if let Some(Attach::Scope { ivar, .. }) = state.stage_of(*t).map(|s| &s.attach) {
            attached.entry(ivar.var.id).or_default().push(*t);
        }
    }
    let ctx = Ctx {
        st: &state,
        b: &bounds,
        attached,
    };
    let roots: Vec<TensorId> = order
        .iter()
        .copied()
        .filter(|t| state.stage_of(*t).map(|s| &s.attach) == Some(&Attach::Root))
        .collect();
    let mut body = Stmt::seq(
        roots
            .iter()
            .map(|t| ctx.make_pipeline(*t))
            .collect::<Result<_, _>>()?,
    );
    for t in roots.iter().rev() {
        if !state.outputs.contains(t) {
            body = ctx.realize(*t, body)?;
        }
    }
    let body = simplify_stmt(&body, &mut bounds.var_bounds.clone());
    Ok(ScheduledOps {
        state,
        bounds,
        body,
    })
}

/// Lowers a schedule to a flattened loop nest.
pub fn lower(s: &Schedule, opts: &LowerOptions) -> Result<LoweredFunc, TirError> {
    let ops = schedule_ops(s)?;
    let st = &ops.state;
    let mut vb = ops.bounds.var_bounds.clone();
    let body = if opts.keep_trivial_loops {
        ops.body.clone()
    } else {
        remove_trivial_loops(&ops.body)
    };
    let body = if opts.partition_loops {
        partition_loops(&body, &mut vb)
    } else {
        body
    };
    // A layout for every tensor: the given one, or row-major.
    let mut layouts = HashMap::new();
    for (name, layout) in &opts.layouts {
        let t = st.graph.find(name).ok_or_else(|| {
            TirError::Lower(format!(
                "a layout is given for `{name}`, which is not a tensor of the function"
            ))
        })?;
        layout.validate(t.ndim, name)?;
        layouts.insert(t.id, layout.clone());
    }
    for (i, op) in st.graph.ops.iter().enumerate() {
        layouts
            .entry(TensorId(i))
            .or_insert_with(|| BufferLayout::row_major(op.shape.len()));
    }
    // Parameters: placeholders that are read, then outputs.
    let mut params: Vec<TensorId> = Vec::new();
    for (i, op) in st.graph.ops.iter().enumerate() {
        let t = TensorId(i);
        if op.kind == OpKind::Placeholder
            && st.stages.iter().any(|s| {
                s.attach != Attach::Inline && st.graph.op(s.op).input_tensors().contains(&t)
            })
        {
            params.push(t);
        }
    }
    params.extend(st.outputs.iter().copied());
    let mut views = HashMap::new();
    for t in &params {
        let op = st.graph.op(*t);
        views.insert(
            *t,
            BufferView {
                origin: vec![Expr::Int(0); op.shape.len()],
                extents: op.shape.iter().map(|e| Expr::Int(*e)).collect(),
                layout: layouts[t].clone(),
            },
        );
    }
    let flat = storage_flatten(&body, &layouts, &mut views)?;
    let body = simplify_stmt(&flat, &mut ops.bounds.var_bounds.clone());
    Ok(LoweredFunc {
        graph: st.graph.clone(),
        params,
        layouts,
        body,
        bounds: ops.bounds,
    })
}

struct Ctx<'a> {
    st: &'a ScheduleState,
    b: &'a Bounds,
    /// Stages attached at each loop variable, producers first.
    attached: HashMap<u64, Vec<TensorId>>,
}

impl Ctx<'_> {
    fn stage(&self, t: TensorId) -> &Stage {
        self.st.stage_of(t).expect("pipelines are built for stages")
    }

    fn compute(&self, t: TensorId) -> &ComputeOp {
        self.st.compute_op(t).expect("stages are compute ops")
    }

    fn realize(&self, t: TensorId, body: Stmt) -> Result<Stmt, TirError> {
        let bounds = self
            .compute(t)
            .axis
            .iter()
            .map(|iv| self.b.range(iv).cloned())
            .collect::<Result<_, _>>()?;
        Ok(Stmt::Realize {
            tensor: t,
            bounds,
            body: Box::new(body),
        })
    }

    /// MakeLoopNest for one stage, with the stages attached to its loops.
    fn make_pipeline(&self, t: TensorId) -> Result<Stmt, TirError> {
        let s = self.stage(t);
        let c = self.compute(t);
        let values = pass_up_index(s, self.b)?;
        let leaf_sets: DomMap = s
            .leaf_iter_vars
            .iter()
            .map(|iv| {
                Ok((
                    iv.var.id,
                    IntSet::from_range(self.b.range(iv)?, &self.b.var_bounds),
                ))
            })
            .collect::<Result<_, TirError>>()?;
        let sub = |e: &Expr| e.substitute(&|v| values.get(&v.id).cloned());
        let idx: Vec<Expr> = c.axis.iter().map(|iv| values[&iv.var.id].clone()).collect();
        // Roots, and the parents of splits: a split whose outer*inner overshoots its parent
        // (say an inner loop split again by a larger factor) would otherwise revisit
        // elements, which for a reduction means accumulating them twice.
        let mut checked = c.root_iter_vars();
        for r in &s.relations {
            if let Relation::Split { parent, .. } = r {
                if !checked.contains(parent) {
                    checked.push(parent.clone());
                }
            }
        }
        let data: Vec<IterVar> = checked
            .iter()
            .filter(|iv| iv.kind == IterKind::Data)
            .cloned()
            .collect();
        let data_guard = self.guard(&data, &values, &s.leaf_iter_vars, &leaf_sets);
        let all_guard = self.guard(&checked, &values, &s.leaf_iter_vars, &leaf_sets);
        let (update, init) = match &c.body {
            Body::Plain(e) => (
                Stmt::Provide {
                    tensor: t,
                    indices: idx.clone(),
                    value: sub(e),
                },
                None,
            ),
            Body::Reduce { op, source } => {
                let acc = Expr::Read {
                    tensor: t,
                    indices: idx.clone(),
                };
                let upd = Stmt::Provide {
                    tensor: t,
                    indices: idx.clone(),
                    value: op.combine(acc, sub(source)),
                };
                let init = Stmt::Provide {
                    tensor: t,
                    indices: idx.clone(),
                    value: Expr::Float(op.identity()),
                };
                (upd, Some(guarded(init, data_guard)))
            }
        };
        let update = guarded(update, all_guard);
        let n = s.leaf_iter_vars.len();
        let tz = match &s.tensorize {
            Some((iv, name)) => Some((
                s.leaf_pos(&iv.var).ok_or_else(|| {
                    TirError::Lower(format!("tensorize variable `{}` is not a leaf", iv.name()))
                })?,
                name.clone(),
            )),
            None => None,
        };
        let init_pos = s
            .leaf_iter_vars
            .iter()
            .position(|iv| iv.kind == IterKind::Reduce)
            .unwrap_or(n);
        let nest = NestBuilder {
            ctx: self,
            s,
            update,
            init,
            init_pos,
            tz,
            values: &values,
        };
        nest.build(0)
    }

    /// Conditions under which the root values stay inside their inferred ranges and
    /// their domains; omitted when provable from the loop ranges.
    fn guard(
        &self,
        roots: &[IterVar],
        values: &HashMap<u64, Expr>,
        leaves: &[IterVar],
        leaf_sets: &DomMap,
    ) -> Option<Expr> {
        let vb = &self.b.var_bounds;
        let mut conds: Vec<Expr> = Vec::new();
        for iv in roots {
            let v = &values[&iv.var.id];
            let mut check = |r: &Range| {
                let (lo, hi) = relax_leaves(&(v.clone() - r.min.clone()), leaves, leaf_sets, vb);
                let mut add = |c: Expr| {
                    if !conds.contains(&c) {
                        conds.push(c);
                    }
                };
                if !lo.is_some_and(|m| prove_ge_zero(&m, vb)) {
                    add(r.min.clone().le(v.clone()));
                }
                if !hi.is_some_and(|m| prove_le_zero(&(m - r.extent.clone() + 1), vb)) {
                    add(v.clone().lt(r.min.clone() + r.extent.clone()));
                }
            };
            if let Ok(r) = self.b.range(iv) {
                check(r);
            }
            if let Some(d) = &iv.dom {
                check(d);
            }
        }
        let mut simplified: Vec<Expr> = Vec::new();
        for c in conds {
            let c = simplify_with(&c, vb);
            if !simplified.contains(&c) {
                simplified.push(c);
            }
        }
        simplified.into_iter().reduce(|a, b| a.and(b))
    }

    fn kernel_call(
        &self,
        s: &Stage,
        pos: usize,
        name: &str,
        values: &HashMap<u64, Expr>,
    ) -> Result<Stmt, TirError> {
        let vb = &self.b.var_bounds;
        // The loops inside the call, innermost first.
        let mut inner: Vec<(u64, IntSet)> = Vec::new();
        for iv in s.leaf_iter_vars[pos..].iter().rev() {
            inner.push((iv.var.id, IntSet::from_range(self.b.range(iv)?, vb)));
        }
        let c = self.compute(s.op);
        let stage_name = self.st.name(s.op);
        let region = |t: TensorId, idx: &[Expr]| -> Result<Vec<Range>, TirError> {
            let shape = &self.st.graph.op(t).shape;
            idx.iter()
                .zip(shape)
                .map(|(e, dim)| {
                    let e = e.substitute(&|v| values.get(&v.id).cloned());
                    let set = eval_set_in_order(&e, &inner, vb);
                    let (Some(a), Some(b)) = (set.min(), set.max()) else {
                        return Err(TirError::Lower(format!(
                            "cannot bound the region micro-kernel `{name}` touches in `{stage_name}`"
                        )));
                    };
                    // The kernel has no guards: its region must lie inside the tensor.
                    if !prove_ge_zero(a, vb) || !prove_le_zero(&(b.clone() - (dim - 1)), vb) {
                        return Err(TirError::Lower(format!(
                            "micro-kernel `{name}` of `{stage_name}` may access `{}` out of bounds \
                             (split the tensorized loops by factors that divide their extents)",
                            self.st.name(t)
                        )));
                    }
                    Ok(Range::new(a.clone(), simplify_with(&(b.clone() - a.clone() + 1), vb)))
                })
                .collect()
        };
        let out_idx: Vec<Expr> = c.axis.iter().map(IterVar::expr).collect();
        let mut args = vec![KernelArg {
            tensor: s.op,
            region: region(s.op, &out_idx)?,
            buffer: None,
        }];
        let mut err = None;
        c.body.exprs().visit(&mut |e| {
            if let Expr::Read { tensor, indices } = e {
                match region(*tensor, indices) {
                    Ok(r) => {
                        let vb = &self.b.var_bounds;
                        match args.iter_mut().find(|a| a.tensor == *tensor) {
                            // Several reads of one tensor: the hull of their regions.
                            Some(a) => {
                                for (x, y) in a.region.iter_mut().zip(r) {
                                    let u = IntSet::from_range(x, vb)
                                        .union(&IntSet::from_range(&y, vb), vb);
                                    *x = u.cover_range(x, vb);
                                }
                            }
                            None => args.push(KernelArg {
                                tensor: *tensor,
                                region: r,
                                buffer: None,
                            }),
                        }
                    }
                    Err(e) => err = Some(e),
                }
            }
        });
        if let Some(e) = err {
            return Err(e);
        }
        Ok(Stmt::KernelCall {
            name: name.to_string(),
            args,
        })
    }
}

struct NestBuilder<'a> {
    ctx: &'a Ctx<'a>,
    s: &'a Stage,
    update: Stmt,
    init: Option<Stmt>,
    /// Position of the first reduce leaf: the reduction's init nest goes before it.
    init_pos: usize,
    tz: Option<(usize, String)>,
    values: &'a HashMap<u64, Expr>,
}

impl NestBuilder<'_> {
    fn for_loop(&self, iv: &IterVar, body: Stmt) -> Result<Stmt, TirError> {
        let r = self.ctx.b.range(iv)?;
        Ok(Stmt::For {
            var: iv.var.clone(),
            min: r.min.clone(),
            extent: r.extent.clone(),
            kind: self.s.for_kind(&iv.var),
            body: Box::new(body),
        })
    }

    /// The init of a reduction: loops over the data leaves from position `k` inwards.
    fn init_nest(&self, k: usize) -> Result<Option<Stmt>, TirError> {
        let Some(init) = &self.init else {
            return Ok(None);
        };
        let mut body = init.clone();
        for iv in self.s.leaf_iter_vars[k..].iter().rev() {
            if iv.kind == IterKind::Data {
                body = self.for_loop(iv, body)?;
            }
        }
        Ok(Some(body))
    }

    fn build(&self, k: usize) -> Result<Stmt, TirError> {
        let n = self.s.leaf_iter_vars.len();
        if let Some((pos, name)) = &self.tz {
            if k == *pos {
                let call = self.ctx.kernel_call(self.s, k, name, self.values)?;
                let init = if self.init_pos >= k {
                    self.init_nest(k)?
                } else {
                    None
                };
                return Ok(Stmt::seq(init.into_iter().chain([call]).collect()));
            }
        }
        let mut body = if k == n {
            self.update.clone()
        } else {
            self.build(k + 1)?
        };
        if k < n {
            let iv = &self.s.leaf_iter_vars[k];
            body = self.inject_attached(iv, body)?;
            body = self.for_loop(iv, body)?;
        }
        if k == self.init_pos {
            if let Some(init) = self.init_nest(k)? {
                body = Stmt::seq(vec![init, body]);
            }
        }
        Ok(body)
    }

    fn inject_attached(&self, iv: &IterVar, body: Stmt) -> Result<Stmt, TirError> {
        let Some(stages) = self.ctx.attached.get(&iv.var.id) else {
            return Ok(body);
        };
        if let Some((pos, _)) = &self.tz {
            if self.s.leaf_pos(&iv.var).is_some_and(|p| p >= *pos) {
                return Err(TirError::Lower(format!(
                    "a stage is computed at `{}`, inside a tensorized loop nest",
                    iv.name()
                )));
            }
        }
        let mut items: Vec<Stmt> = stages
            .iter()
            .map(|t| self.ctx.make_pipeline(*t))
            .collect::<Result<_, _>>()?;
        items.push(body);
        let mut out = Stmt::seq(items);
        for t in stages.iter().rev() {
            out = self.ctx.realize(*t, out)?;
        }
        Ok(out)
    }
}

/// Lower and upper bounds of `e` over the leaves whose ranges are symbolic (split tails,
/// ranges depending on enclosing loops), innermost first. Leaves with constant ranges
/// stay symbolic: the prover bounds them, and keeping them lets `o*16 + min(16, 20 -
/// o*16)` cancel the two occurrences of `o` where interval arithmetic could not.
fn relax_leaves(
    e: &Expr,
    leaves: &[IterVar],
    sets: &DomMap,
    vb: &VarBounds,
) -> (Option<Expr>, Option<Expr>) {
    let symbolic: Vec<(u64, IntSet)> = leaves
        .iter()
        .rev()
        .filter_map(|iv| sets.get(&iv.var.id).map(|s| (iv.var.id, s.clone())))
        .filter(|(_, s)| s.const_size().is_none())
        .collect();
    let set = eval_set_in_order(e, &symbolic, vb);
    (set.min().cloned(), set.max().cloned())
}

fn guarded(s: Stmt, cond: Option<Expr>) -> Stmt {
    match cond {
        Some(c) => Stmt::IfThenElse {
            cond: c,
            then_case: Box::new(s),
            else_case: None,
            likely: true,
        },
        None => s,
    }
}

/// PassUpIndex: the value of every root variable as an expression of the leaves.
pub fn pass_up_index(s: &Stage, b: &Bounds) -> Result<HashMap<u64, Expr>, TirError> {
    let mut v: HashMap<u64, Expr> = s
        .leaf_iter_vars
        .iter()
        .map(|iv| (iv.var.id, iv.expr()))
        .collect();
    let get = |v: &HashMap<u64, Expr>, iv: &IterVar| {
        v.get(&iv.var.id).cloned().ok_or_else(|| {
            TirError::Lower(format!(
                "`{}` is neither a leaf nor derived from one",
                iv.name()
            ))
        })
    };
    for rel in s.relations.iter().rev() {
        match rel {
            Relation::Split {
                parent,
                outer,
                inner,
                ..
            } => {
                let f = b.factor(inner)?;
                let e = get(&v, outer)? * f + get(&v, inner)? + b.range(parent)?.min.clone();
                v.insert(parent.var.id, e);
            }
            Relation::Fuse {
                outer,
                inner,
                fused,
            } => {
                let fv = get(&v, fused)?;
                let n = b.range(inner)?.extent.clone();
                v.insert(
                    outer.var.id,
                    fv.clone().floordiv(n.clone()) + b.range(outer)?.min.clone(),
                );
                v.insert(inner.var.id, fv.floormod(n) + b.range(inner)?.min.clone());
            }
            Relation::Rebase { parent, rebased } => {
                let e = get(&v, rebased)? + b.range(parent)?.min.clone();
                v.insert(parent.var.id, e);
            }
        }
    }
    let vb = &b.var_bounds;
    Ok(v.into_iter()
        .map(|(k, e)| (k, simplify_with(&e, vb)))
        .collect())
}

/// Simplifies every expression with the bounds of the enclosing loops; drops guards that
/// became constant and loops that run zero times.
pub fn simplify_stmt(s: &Stmt, vb: &mut VarBounds) -> Stmt {
    match s {
        Stmt::For {
            var,
            min,
            extent,
            kind,
            body,
        } => {
            let min = simplify_with(min, vb);
            let extent = simplify_with(extent, vb);
            if matches!(const_bounds(&extent, vb).1, Some(h) if h <= 0) {
                return Stmt::Seq(vec![]);
            }
            let saved = vb.get(var);
            if let (Some(lo), Some(hi)) = (
                const_bounds(&min, vb).0,
                const_bounds(&(min.clone() + extent.clone() - 1), vb).1,
            ) {
                vb.set(var, lo, hi);
            }
            let body = simplify_stmt(body, vb);
            restore(vb, var, saved);
            if body == Stmt::Seq(vec![]) {
                return body;
            }
            Stmt::For {
                var: var.clone(),
                min,
                extent,
                kind: *kind,
                body: Box::new(body),
            }
        }
        Stmt::IfThenElse {
            cond,
            then_case,
            else_case,
            likely,
        } => {
            let cond = simplify_with(cond, vb);
            match cond.as_int() {
                Some(0) => else_case
                    .as_ref()
                    .map(|e| simplify_stmt(e, vb))
                    .unwrap_or(Stmt::Seq(vec![])),
                Some(_) => simplify_stmt(then_case, vb),
                None => Stmt::IfThenElse {
                    cond,
                    then_case: Box::new(simplify_stmt(then_case, vb)),
                    else_case: else_case.as_ref().map(|e| Box::new(simplify_stmt(e, vb))),
                    likely: *likely,
                },
            }
        }
        Stmt::Seq(v) => Stmt::seq(v.iter().map(|x| simplify_stmt(x, vb)).collect()),
        Stmt::Realize {
            tensor,
            bounds,
            body,
        } => Stmt::Realize {
            tensor: *tensor,
            bounds: bounds
                .iter()
                .map(|r| Range::new(simplify_with(&r.min, vb), simplify_with(&r.extent, vb)))
                .collect(),
            body: Box::new(simplify_stmt(body, vb)),
        },
        Stmt::Allocate { buffer, size, body } => Stmt::Allocate {
            buffer: *buffer,
            size: simplify_with(size, vb),
            body: Box::new(simplify_stmt(body, vb)),
        },
        // The condition of an assume is a fact for later passes: it is not simplified with
        // the loop bounds, which would turn it into a bare `1`.
        Stmt::Assume { cond, body } => Stmt::Assume {
            cond: simplify(cond),
            body: Box::new(simplify_stmt(body, vb)),
        },
        leaf => leaf.rewrite(&mut |x| x, &mut |e| simplify_with(e, vb)),
    }
}

fn restore(vb: &mut VarBounds, v: &Var, saved: Option<(i64, i64)>) {
    match saved {
        Some((l, h)) => vb.set(v, l, h),
        None => vb.remove(v),
    }
}

/// Expressions in `s` that make its body depend on `var` in a way the last iteration of a
/// split leaves special: `min` in loop or realize extents, and likely guards.
fn partition_candidates(s: &Stmt, var: &Var) -> usize {
    let mut n = 0;
    let has_min = |e: &Expr| {
        let mut found = false;
        e.visit(&mut |x| {
            found |= matches!(x, Expr::Bin(BinOp::Min | BinOp::Max, ..)) && x.uses_var(var)
        });
        found
    };
    s.visit(&mut |x| match x {
        Stmt::For { extent, .. } => n += has_min(extent) as usize,
        Stmt::Realize { bounds, .. } => n += bounds.iter().filter(|r| has_min(&r.extent)).count(),
        Stmt::IfThenElse {
            cond, likely: true, ..
        } => n += conjuncts(cond).iter().filter(|c| c.uses_var(var)).count(),
        _ => {}
    });
    n
}

/// The facts that hold in the main part of a partitioned loop over `var` (bounds in
/// `vb`): which side of each `min`/`max` extent wins, and the likely guards.
fn partition_facts(s: &Stmt, var: &Var, vb: &VarBounds) -> Vec<Expr> {
    let mut facts: Vec<Expr> = Vec::new();
    let mut add = |c: Expr| {
        if !facts.contains(&c) {
            facts.push(c);
        }
    };
    let from_extent = |e: &Expr, add: &mut dyn FnMut(Expr)| {
        e.visit(&mut |x| {
            if let Expr::Bin(op @ (BinOp::Min | BinOp::Max), a, b) = x {
                if x.uses_var(var) {
                    let a_le_b = (**a).clone().le((**b).clone());
                    let b_le_a = (**b).clone().le((**a).clone());
                    let (first, second) = if *op == BinOp::Min {
                        (a_le_b, b_le_a)
                    } else {
                        (b_le_a, a_le_b)
                    };
                    // `first`: the left operand wins.
                    for c in [first, second] {
                        if simplify_with(&c, vb) == Expr::Int(1) {
                            add(simplify(&c));
                            break;
                        }
                    }
                }
            }
        })
    };
    s.visit(&mut |x| match x {
        Stmt::For { extent, .. } => from_extent(extent, &mut add),
        Stmt::Realize { bounds, .. } => {
            bounds.iter().for_each(|r| from_extent(&r.extent, &mut add))
        }
        Stmt::IfThenElse {
            cond, likely: true, ..
        } => {
            for c in conjuncts(cond) {
                if c.uses_var(var) && simplify_with(&c, vb) == Expr::Int(1) {
                    add(c);
                }
            }
        }
        _ => {}
    });
    // Only facts about variables bound outside `s` can stand at its top.
    let mut inner_vars = Vec::new();
    s.visit(&mut |x| {
        if let Stmt::For { var, .. } = x {
            inner_vars.push(var.clone());
        }
    });
    facts.retain(|f| !inner_vars.iter().any(|v| f.uses_var(v)));
    facts
}

fn conjuncts(e: &Expr) -> Vec<Expr> {
    match e {
        Expr::Bin(BinOp::And, a, b) => {
            let mut v = conjuncts(a);
            v.extend(conjuncts(b));
            v
        }
        _ => vec![e.clone()],
    }
}

/// Loop partitioning: a loop whose body has a split tail (a `min` extent) or a likely
/// guard depending on the loop variable is split into a main loop over all but the last
/// iteration, simplified until it is free of them, and the last iteration on its own.
pub fn partition_loops(s: &Stmt, vb: &mut VarBounds) -> Stmt {
    match s {
        Stmt::For {
            var,
            min,
            extent,
            kind,
            body,
        } => {
            let saved = vb.get(var);
            let (Some(lo), Some(ext)) = (min.as_int(), extent.as_int()) else {
                let body = with_bound(vb, var, None, |vb| partition_loops(body, vb));
                return Stmt::For {
                    var: var.clone(),
                    min: min.clone(),
                    extent: extent.clone(),
                    kind: *kind,
                    body: Box::new(body),
                };
            };
            let body = with_bound(vb, var, Some((lo, lo + ext - 1)), |vb| {
                partition_loops(body, vb)
            });
            let rebuilt = |b: Stmt, lo: i64, ext: i64| Stmt::For {
                var: var.clone(),
                min: Expr::Int(lo),
                extent: Expr::Int(ext),
                kind: *kind,
                body: Box::new(b),
            };
            if ext >= 2 && partition_candidates(&body, var) > 0 {
                let (main, facts) = with_bound(vb, var, Some((lo, lo + ext - 2)), |vb| {
                    (simplify_stmt(&body, vb), partition_facts(&body, var, vb))
                });
                if partition_candidates(&main, var) == 0 {
                    let last = Expr::Int(lo + ext - 1);
                    let tail = body.rewrite(&mut |x| x, &mut |e| {
                        e.substitute(&|v| (v == var).then(|| last.clone()))
                    });
                    let tail = simplify_stmt(&tail, vb);
                    restore(vb, var, saved);
                    // What the main part's simplification relied on, for later passes.
                    let main = match facts.into_iter().reduce(|a, b| a.and(b)) {
                        Some(cond) => Stmt::Assume {
                            cond,
                            body: Box::new(main),
                        },
                        None => main,
                    };
                    return Stmt::seq(vec![rebuilt(main, lo, ext - 1), tail]);
                }
            }
            rebuilt(body, lo, ext)
        }
        Stmt::Seq(v) => Stmt::seq(v.iter().map(|x| partition_loops(x, vb)).collect()),
        Stmt::Realize {
            tensor,
            bounds,
            body,
        } => Stmt::Realize {
            tensor: *tensor,
            bounds: bounds.clone(),
            body: Box::new(partition_loops(body, vb)),
        },
        Stmt::IfThenElse {
            cond,
            then_case,
            else_case,
            likely,
        } => Stmt::IfThenElse {
            cond: cond.clone(),
            then_case: Box::new(partition_loops(then_case, vb)),
            else_case: else_case.as_ref().map(|e| Box::new(partition_loops(e, vb))),
            likely: *likely,
        },
        Stmt::Assume { cond, body } => Stmt::Assume {
            cond: cond.clone(),
            body: Box::new(partition_loops(body, vb)),
        },
        Stmt::Allocate { buffer, size, body } => Stmt::Allocate {
            buffer: *buffer,
            size: size.clone(),
            body: Box::new(partition_loops(body, vb)),
        },
        leaf => leaf.clone(),
    }
}

fn with_bound<T>(
    vb: &mut VarBounds,
    v: &Var,
    b: Option<(i64, i64)>,
    f: impl FnOnce(&mut VarBounds) -> T,
) -> T {
    let saved = vb.get(v);
    match b {
        Some((l, h)) => vb.set(v, l, h),
        None => vb.remove(v),
    }
    let out = f(vb);
    restore(vb, v, saved);
    out
}

/// Replaces loops of one iteration by their body with the variable set to the loop's min.
pub fn remove_trivial_loops(s: &Stmt) -> Stmt {
    // Bottom-up: each loop's body has already lost its own trivial loops.
    s.rewrite(
        &mut |x| match x {
            Stmt::For {
                var,
                min,
                extent: Expr::Int(1),
                body,
                ..
            } => body.rewrite(&mut |y| y, &mut |e| {
                e.substitute(&|v| (*v == var).then(|| min.clone()))
            }),
            other => other,
        },
        &mut |e| e.clone(),
    )
}

/// Storage flattening: realize regions become flat allocations, multi-dimensional reads
/// and writes become flat loads and stores through each buffer's layout.
pub fn storage_flatten(
    s: &Stmt,
    layouts: &HashMap<TensorId, BufferLayout>,
    views: &mut HashMap<TensorId, BufferView>,
) -> Result<Stmt, TirError> {
    Ok(match s {
        Stmt::Realize {
            tensor,
            bounds,
            body,
        } => {
            let extents: Vec<Expr> = bounds.iter().map(|r| r.extent.clone()).collect();
            // The layout applies to the realized region (indices relative to its origin).
            let layout = layouts
                .get(tensor)
                .cloned()
                .unwrap_or_else(|| BufferLayout::row_major(bounds.len()));
            let size = layout.size(&extents);
            views.insert(
                *tensor,
                BufferView {
                    origin: bounds.iter().map(|r| r.min.clone()).collect(),
                    extents,
                    layout,
                },
            );
            Stmt::Allocate {
                buffer: *tensor,
                size,
                body: Box::new(storage_flatten(body, layouts, views)?),
            }
        }
        Stmt::Provide {
            tensor,
            indices,
            value,
        } => Stmt::Store {
            buffer: *tensor,
            index: flat_index(*tensor, indices, views)?,
            value: flatten_expr(value, views)?,
        },
        Stmt::For {
            var,
            min,
            extent,
            kind,
            body,
        } => Stmt::For {
            var: var.clone(),
            min: min.clone(),
            extent: extent.clone(),
            kind: *kind,
            body: Box::new(storage_flatten(body, layouts, views)?),
        },
        Stmt::Seq(v) => Stmt::seq(
            v.iter()
                .map(|x| storage_flatten(x, layouts, views))
                .collect::<Result<_, _>>()?,
        ),
        Stmt::IfThenElse {
            cond,
            then_case,
            else_case,
            likely,
        } => Stmt::IfThenElse {
            cond: flatten_expr(cond, views)?,
            then_case: Box::new(storage_flatten(then_case, layouts, views)?),
            else_case: match else_case {
                Some(e) => Some(Box::new(storage_flatten(e, layouts, views)?)),
                None => None,
            },
            likely: *likely,
        },
        Stmt::Assume { cond, body } => Stmt::Assume {
            cond: cond.clone(),
            body: Box::new(storage_flatten(body, layouts, views)?),
        },
        Stmt::KernelCall { name, args } => Stmt::KernelCall {
            name: name.clone(),
            args: args
                .iter()
                .map(|a| {
                    let view = views.get(&a.tensor).ok_or_else(|| {
                        TirError::Lower(format!("kernel `{name}` uses a tensor with no buffer"))
                    })?;
                    Ok(KernelArg {
                        tensor: a.tensor,
                        region: a.region.clone(),
                        buffer: Some(view.clone()),
                    })
                })
                .collect::<Result<_, TirError>>()?,
        },
        other @ (Stmt::Allocate { .. } | Stmt::Store { .. }) => other.clone(),
    })
}

fn flat_index(
    t: TensorId,
    indices: &[Expr],
    views: &HashMap<TensorId, BufferView>,
) -> Result<Expr, TirError> {
    let v = views.get(&t).ok_or_else(|| {
        TirError::Lower(format!(
            "tensor t{} is used outside the region where it is realized",
            t.0
        ))
    })?;
    let rel: Vec<Expr> = indices
        .iter()
        .zip(&v.origin)
        .map(|(i, o)| flatten_expr(i, views).map(|i| i - o.clone()))
        .collect::<Result<_, _>>()?;
    Ok(v.layout.flatten(&rel, &v.extents))
}

fn flatten_expr(e: &Expr, views: &HashMap<TensorId, BufferView>) -> Result<Expr, TirError> {
    let mut err = None;
    let out = e.rewrite(&mut |n| match n {
        Expr::Read { tensor, indices } => match flat_index(*tensor, indices, views) {
            Ok(ix) => Some(Expr::Load {
                buffer: *tensor,
                index: Box::new(ix),
            }),
            Err(x) => {
                err = Some(x);
                None
            }
        },
        _ => None,
    });
    err.map_or(Ok(out), Err)
}
