//! Lowering a schedule to a loop nest. ScheduleOps builds one loop nest per stage
//! (MakeLoopNest), injects attached stages at their attach loops inside realize regions
//! sized by InferBound, and guards bodies whose indices may leave their ranges (with a
//! likely hint). `lower` then removes one-iteration loops, partitions split tails
//! ([`super::passes`]) and flattens storage under buffer layouts ([`super::flatten`]).

use std::collections::HashMap;

use super::bound::{infer_bound, Bounds};
use super::compute::{Body, ComputeGraph, ComputeOp, IterKind, IterVar, OpKind, ReduceOp};
use super::error::TirError;
use super::expr::{BinOp, Expr, Range, TensorId};
use super::flatten::storage_flatten;
use super::intset::{eval_set_in_order, DomMap, IntSet};
use super::layout::BufferLayout;
use super::passes::{partition_loops, peel_conditions, remove_trivial_loops, simplify_stmt};
use super::schedule::{Attach, Relation, Schedule, ScheduleState, Split, Stage};
use super::simplify::{prove_ge_zero, prove_le_zero, simplify_with, VarBounds};
use super::stmt::{BufferView, KernelArg, Loop, Stmt, WalkStep};
use super::{CONTRACT, CONTRACT_INTO};

/// How to lower a schedule.
#[derive(Clone, Debug)]
pub struct LowerOptions {
    /// Buffer layouts by tensor name (row-major otherwise). For a tensor realized inside
    /// the function, the layout applies to the realized region.
    pub layouts: HashMap<String, BufferLayout>,
    /// Partition loops whose last iteration is a split tail or needs a guard, and
    /// peel the iterations of a loop where selects and clamps do not settle.
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
    /// The schedule lowered.
    pub state: ScheduleState,
    /// Its bounds.
    pub bounds: Bounds,
    /// The statement, with realize and provide (before flattening).
    pub body: Stmt,
}

impl ScheduledOps {
    /// The statement as text.
    pub fn to_text(&self) -> String {
        let g = &self.state.graph;
        self.body.display(&|t| g.op(t).name.clone()).to_string()
    }
}

/// A lowered function: flat buffers for the placeholders it reads and the outputs.
#[derive(Clone, Debug)]
pub struct LoweredFunc {
    /// The compute graph, for tensor names and shapes.
    pub graph: ComputeGraph,
    /// The function's parameters: placeholders read, then outputs.
    pub params: Vec<TensorId>,
    /// The layout of each buffer that is not row-major.
    pub layouts: HashMap<TensorId, BufferLayout>,
    /// The flattened statement.
    pub body: Stmt,
    /// The bounds InferBound gave.
    pub bounds: Bounds,
}

impl LoweredFunc {
    /// The function as text.
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
    for stage in &st.stages {
        if let Some(l) = &stage.storage {
            layouts.entry(stage.op).or_insert_with(|| l.clone());
        }
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
    let mut vb = ops.bounds.var_bounds.clone();
    let mut body = simplify_stmt(&flat, &mut vb);
    if opts.partition_loops {
        body = peel_conditions(&body, &mut vb);
    }
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
            if let Relation::Split(Split { parent, .. }) = r {
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
        if name == CONTRACT || name == CONTRACT_INTO {
            let leaves = &s.leaf_iter_vars[pos..];
            let walk = |t: TensorId, idx: &[Expr]| -> Result<KernelArg, TirError> {
                Ok(KernelArg {
                    tensor: t,
                    region: region(t, idx)?,
                    buffer: None,
                    walk: self.walk(leaves, idx, values, stage_name)?,
                })
            };
            let (a, b) = contracted(c).ok_or_else(|| {
                TirError::Lower(format!(
                    "micro-kernel `{name}` needs a sum of products of two tensors, \
                     `{stage_name}` computes another expression"
                ))
            })?;
            return Ok(Stmt::KernelCall {
                name: name.to_string(),
                args: vec![walk(s.op, &out_idx)?, walk(a.0, a.1)?, walk(b.0, b.1)?],
            });
        }
        let mut args = vec![KernelArg {
            tensor: s.op,
            region: region(s.op, &out_idx)?,
            buffer: None,
            walk: vec![],
        }];
        let mut err = None;
        c.body.expr().visit(&mut |e| {
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
                                walk: vec![],
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

impl Ctx<'_> {
    /// The walk of a tensor read at `idx` over the tensorized loops `leaves`: each
    /// loop's extent, which must be constant, and the constant step each index
    /// takes along it, which must not be negative (the region's origin is then
    /// the point where every loop starts).
    fn walk(
        &self,
        leaves: &[IterVar],
        idx: &[Expr],
        values: &HashMap<u64, Expr>,
        stage: &str,
    ) -> Result<Vec<WalkStep>, TirError> {
        let vb = &self.b.var_bounds;
        // Simplified under the loops' bounds first: a group's `floordiv` of a loop
        // that stays in one multiple goes, where it would not at the next step.
        let idx: Vec<Expr> = idx
            .iter()
            .map(|e| simplify_with(&e.substitute(&|v| values.get(&v.id).cloned()), vb))
            .collect();
        let fail =
            |m: String| TirError::Lower(format!("micro-kernel `{CONTRACT}` of `{stage}`: {m}"));
        leaves
            .iter()
            .map(|iv| {
                let r = self.b.range(iv)?;
                let extent = simplify_with(&r.extent, vb)
                    .as_int()
                    .ok_or_else(|| fail(format!("loop `{}` has no constant extent", iv.name())))?;
                let moves = idx
                    .iter()
                    .map(|e| {
                        let next = e.substitute(&|v| (v.id == iv.var.id).then(|| v.expr() + 1));
                        simplify_with(&(next - e.clone()), vb)
                            .as_int()
                            .filter(|m| *m >= 0)
                            .ok_or_else(|| {
                                fail(format!(
                                    "index `{e}` does not move by a constant step along `{}`",
                                    iv.name()
                                ))
                            })
                    })
                    .collect::<Result<_, _>>()?;
                Ok(WalkStep { extent, moves })
            })
            .collect()
    }
}

/// A tensor read at its indices.
pub type TensorRead<'a> = (TensorId, &'a [Expr]);

/// The two reads a contraction multiplies: `sum(a[..] * b[..])` of two tensors.
pub fn contracted(c: &ComputeOp) -> Option<(TensorRead<'_>, TensorRead<'_>)> {
    let Body::Reduce {
        op: ReduceOp::Sum,
        source: Expr::Bin(BinOp::Mul, x, y),
    } = &c.body
    else {
        return None;
    };
    match (&**x, &**y) {
        (
            Expr::Read {
                tensor: a,
                indices: ia,
            },
            Expr::Read {
                tensor: b,
                indices: ib,
            },
        ) if a != b => Some(((*a, ia.as_slice()), (*b, ib.as_slice()))),
        _ => None,
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
        let kind = self.s.for_kind(&iv.var);
        Ok(Loop::stmt(
            iv.var.clone(),
            r.min.clone(),
            r.extent.clone(),
            kind,
            body,
        ))
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
                let whole_reduction = self.init_pos >= k;
                // A contraction over the whole reduction with an unguarded init
                // starts its sums at zero itself.
                if name == CONTRACT
                    && whole_reduction
                    && matches!(self.init, Some(Stmt::Provide { .. }))
                {
                    return self.ctx.kernel_call(self.s, k, CONTRACT_INTO, self.values);
                }
                let call = self.ctx.kernel_call(self.s, k, name, self.values)?;
                let init = if whole_reduction {
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
            Relation::Split(sp) => {
                let f = b.factor(&sp.inner)?;
                let parent_min = b.range(&sp.parent)?.min.clone();
                let e = get(&v, &sp.outer)? * f + get(&v, &sp.inner)? + parent_min;
                v.insert(sp.parent.var.id, e);
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
