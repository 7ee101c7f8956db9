//! Schedules: one stage per compute operation, iteration-variable relations (split, fuse,
//! rebase), attachments (compute_at / inline / root), loop annotations, and a record of
//! the schedule after every primitive (the "schedule record" of the TVM Explorer RFC).

use std::collections::HashMap;
use std::fmt;

use super::compute::{Body, ComputeGraph, ComputeOp, IterKind, IterVar, OpKind, Operation, Tensor};
use super::error::TirError;
use super::expr::{Expr, Range, TensorId, Var};
use super::layout::BufferLayout;
pub use super::stmt::ForKind;

/// What fixes the extents of a split.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SplitBy {
    /// The inner loop has this many iterations.
    Factor(i64),
    /// The outer loop has this many iterations.
    Parts(i64),
}

impl std::fmt::Display for SplitBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SplitBy::Factor(v) => write!(f, "factor={v}"),
            SplitBy::Parts(v) => write!(f, "nparts={v}"),
        }
    }
}

/// `parent = outer * factor + inner + parent.min`.
#[derive(Clone, Debug, PartialEq)]
pub struct Split {
    /// The variable that was split.
    pub parent: IterVar,
    /// The variable counting blocks of `factor` iterations.
    pub outer: IterVar,
    /// The variable inside one block.
    pub inner: IterVar,
    /// The factor, or the number of outer iterations it is derived from.
    pub by: SplitBy,
}

/// How a relation derives iteration variables from others.
#[derive(Clone, Debug, PartialEq)]
pub enum Relation {
    /// One variable split in two (see [`Split`]).
    Split(Split),
    /// `fused = (outer - outer.min) * extent(inner) + (inner - inner.min)`.
    Fuse {
        /// The outer variable.
        outer: IterVar,
        /// The inner variable.
        inner: IterVar,
        /// The variable replacing both.
        fused: IterVar,
    },
    /// `parent = rebased + parent.min`: made by normalization of compute_at stages so that
    /// every loop starts at zero.
    Rebase {
        /// The variable replaced.
        parent: IterVar,
        /// The variable starting at zero.
        rebased: IterVar,
    },
}

/// Where a stage is computed.
#[derive(Clone, Debug, PartialEq)]
pub enum Attach {
    /// Computed at the top level of the function.
    Root,
    /// Substituted into its consumers.
    Inline,
    /// Computed inside the loop of `ivar`, a leaf of the stage of `stage` (compute_at).
    Scope {
        /// The consumer stage.
        stage: TensorId,
        /// The leaf of that stage the loop of which encloses this one.
        ivar: IterVar,
    },
}

/// The schedule of one compute operation.
#[derive(Clone, Debug, PartialEq)]
pub struct Stage {
    /// The operation scheduled.
    pub op: TensorId,
    /// Every iteration variable, roots first, then those split and fuse made.
    pub all_iter_vars: Vec<IterVar>,
    /// The loops, outer to inner.
    pub leaf_iter_vars: Vec<IterVar>,
    /// How the variables derive from each other, in the order made.
    pub relations: Vec<Relation>,
    /// Where the stage is computed.
    pub attach: Attach,
    /// Loop kinds of annotated leaves, by variable id.
    pub for_kinds: HashMap<u64, ForKind>,
    /// The loop nest from this leaf inwards is replaced by a call to the named micro-kernel.
    pub tensorize: Option<(IterVar, String)>,
    /// How the region the stage realizes inside the function is stored (row-major
    /// when `None`).
    pub storage: Option<BufferLayout>,
}

impl Stage {
    fn new(op: TensorId, c: &ComputeOp) -> Stage {
        let roots = c.root_iter_vars();
        Stage {
            op,
            all_iter_vars: roots.clone(),
            leaf_iter_vars: roots,
            relations: vec![],
            attach: Attach::Root,
            for_kinds: HashMap::new(),
            tensorize: None,
            storage: None,
        }
    }

    /// The loop position of leaf `v`.
    pub fn leaf_pos(&self, v: &Var) -> Option<usize> {
        self.leaf_iter_vars.iter().position(|iv| iv.var == *v)
    }

    /// The loop kind of leaf `v` (serial unless annotated).
    pub fn for_kind(&self, v: &Var) -> ForKind {
        self.for_kinds
            .get(&v.id)
            .copied()
            .unwrap_or(ForKind::Serial)
    }
}

/// The state a schedule primitive acts on: the (possibly rewritten) compute graph, the
/// outputs and the stages.
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduleState {
    /// The compute graph (rewritten by primitives that add stages).
    pub graph: ComputeGraph,
    /// The tensors the function produces.
    pub outputs: Vec<TensorId>,
    /// One stage per compute operation.
    pub stages: Vec<Stage>,
}

/// One entry of the schedule record: the primitive applied and the schedule after it.
#[derive(Clone, Debug)]
pub struct RecordEntry {
    /// The primitive as called.
    pub primitive: String,
    /// The schedule after it.
    pub state: ScheduleState,
}

/// A schedule being built, with the record of every primitive applied.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// The current schedule.
    pub state: ScheduleState,
    /// The schedule after every primitive; the first entry is the unscheduled one.
    pub record: Vec<RecordEntry>,
}

impl ScheduleState {
    /// The position of the stage of `t`.
    pub fn stage_index(&self, t: TensorId) -> Option<usize> {
        self.stages.iter().position(|s| s.op == t)
    }
    /// The stage of `t`.
    pub fn stage_of(&self, t: TensorId) -> Option<&Stage> {
        self.stage_index(t).map(|i| &self.stages[i])
    }
    /// The name of tensor `t`.
    pub fn name(&self, t: TensorId) -> &str {
        self.graph
            .ops
            .get(t.0)
            .map_or("<tensor of another graph>", |o| o.name.as_str())
    }
    /// The compute definition of `t`, unless it is a placeholder.
    pub fn compute_op(&self, t: TensorId) -> Option<&ComputeOp> {
        self.graph.ops.get(t.0).and_then(|o| o.compute())
    }

    /// The operation of a tensor handle, which must belong to this schedule's graph.
    pub fn operation(&self, t: TensorId) -> Result<&Operation, TirError> {
        self.graph
            .ops
            .get(t.0)
            .ok_or_else(|| TirError::Schedule("a tensor of another graph was given".into()))
    }

    /// Stages that read the tensor of `t` (excluding inlined stages, which are
    /// substituted into their readers).
    pub fn consumers(&self, t: TensorId) -> Vec<TensorId> {
        self.stages
            .iter()
            .filter(|s| {
                s.attach != Attach::Inline && self.graph.op(s.op).input_tensors().contains(&t)
            })
            .map(|s| s.op)
            .collect()
    }

    /// Compute stages in an order where producers come before consumers.
    pub fn topo_order(&self) -> Result<Vec<TensorId>, TirError> {
        let n = self.graph.ops.len();
        let mut state = vec![0u8; n]; // 0 new, 1 visiting, 2 done
        let mut out = Vec::new();
        fn visit(
            g: &ComputeGraph,
            t: usize,
            st: &mut [u8],
            out: &mut Vec<TensorId>,
        ) -> Result<(), TirError> {
            match st[t] {
                2 => return Ok(()),
                1 => {
                    return Err(TirError::Schedule(format!(
                        "tensor `{}` depends on itself",
                        g.ops[t].name
                    )))
                }
                _ => {}
            }
            st[t] = 1;
            for i in g.ops[t].input_tensors() {
                visit(g, i.0, st, out)?;
            }
            st[t] = 2;
            out.push(TensorId(t));
            Ok(())
        }
        for t in 0..n {
            visit(&self.graph, t, &mut state, &mut out)?;
        }
        out.retain(|t| self.stage_index(*t).is_some());
        Ok(out)
    }
}

impl Schedule {
    /// A schedule with one root stage per compute operation of `graph`.
    pub fn new(graph: &ComputeGraph, outputs: &[Tensor]) -> Result<Schedule, TirError> {
        let stages = graph
            .ops
            .iter()
            .enumerate()
            .filter_map(|(i, op)| op.compute().map(|c| Stage::new(TensorId(i), c)))
            .collect();
        for o in outputs {
            if graph.ops.get(o.id.0).is_none() {
                return Err(TirError::Schedule(
                    "an output is not a tensor of this graph".into(),
                ));
            }
            if graph.op(o.id).compute().is_none() {
                return Err(TirError::Schedule(format!(
                    "output `{}` is a placeholder",
                    graph.op(o.id).name
                )));
            }
        }
        let state = ScheduleState {
            graph: graph.clone(),
            outputs: outputs.iter().map(|t| t.id).collect(),
            stages,
        };
        Ok(Schedule {
            record: vec![RecordEntry {
                primitive: "create_schedule".into(),
                state: state.clone(),
            }],
            state,
        })
    }

    fn record(&mut self, primitive: String) {
        self.record.push(RecordEntry {
            primitive,
            state: self.state.clone(),
        });
    }

    fn stage_mut(&mut self, t: &Tensor) -> Result<&mut Stage, TirError> {
        let i = self.stage_idx(t)?;
        Ok(&mut self.state.stages[i])
    }

    fn stage_idx(&self, t: &Tensor) -> Result<usize, TirError> {
        self.state.stage_index(t.id).ok_or_else(|| {
            TirError::Schedule(format!(
                "`{}` has no stage (it is a placeholder)",
                self.state.name(t.id)
            ))
        })
    }

    /// The stage of `t`; an error when it has none.
    pub fn stage(&self, t: &Tensor) -> Result<&Stage, TirError> {
        Ok(&self.state.stages[self.stage_idx(t)?])
    }

    fn leaf_pos(&self, t: &Tensor, iv: &IterVar) -> Result<usize, TirError> {
        self.stage(t)?.leaf_pos(&iv.var).ok_or_else(|| {
            TirError::Schedule(format!(
                "`{}` is not a leaf iteration variable of stage `{}`",
                iv.name(),
                self.state.name(t.id)
            ))
        })
    }

    /// The leaf iteration variables of a stage (the axes, for an unscheduled stage).
    pub fn leaves(&self, t: &Tensor) -> Result<Vec<IterVar>, TirError> {
        Ok(self.stage(t)?.leaf_iter_vars.clone())
    }

    /// Whether leaf `leaf` of `t` derives from any of the variables `sources`
    /// through the stage's splits, fuses and rebases.
    pub fn derives_from(
        &self,
        t: &Tensor,
        leaf: &IterVar,
        sources: &[IterVar],
    ) -> Result<bool, TirError> {
        let mut reached = vec![leaf.var.id];
        for r in self.stage(t)?.relations.iter().rev() {
            let (from, made): (Vec<&IterVar>, Vec<&IterVar>) = match r {
                Relation::Split(s) => (vec![&s.parent], vec![&s.outer, &s.inner]),
                Relation::Fuse {
                    outer,
                    inner,
                    fused,
                } => (vec![outer, inner], vec![fused]),
                Relation::Rebase { parent, rebased } => (vec![parent], vec![rebased]),
            };
            if made.iter().any(|m| reached.contains(&m.var.id)) {
                reached.extend(from.iter().map(|f| f.var.id));
            }
        }
        Ok(sources.iter().any(|s| reached.contains(&s.var.id)))
    }

    /// The axes of a compute definition.
    pub fn axis(&self, t: &Tensor) -> Result<Vec<IterVar>, TirError> {
        self.op_compute(t).map(|c| c.axis.clone())
    }

    /// The reduce axes of a compute definition.
    pub fn reduce_axis(&self, t: &Tensor) -> Result<Vec<IterVar>, TirError> {
        self.op_compute(t).map(|c| c.reduce_axis.clone())
    }

    fn op_compute(&self, t: &Tensor) -> Result<&ComputeOp, TirError> {
        self.state.compute_op(t.id).ok_or_else(|| {
            TirError::Schedule(format!("`{}` is a placeholder", self.state.name(t.id)))
        })
    }

    /// Splits a leaf so that the inner loop has `factor` iterations.
    pub fn split(
        &mut self,
        t: &Tensor,
        iv: &IterVar,
        factor: i64,
    ) -> Result<(IterVar, IterVar), TirError> {
        self.split_impl(t, iv, SplitBy::Factor(factor))
    }

    /// Splits a leaf so that the outer loop has `nparts` iterations.
    pub fn split_nparts(
        &mut self,
        t: &Tensor,
        iv: &IterVar,
        nparts: i64,
    ) -> Result<(IterVar, IterVar), TirError> {
        self.split_impl(t, iv, SplitBy::Parts(nparts))
    }

    fn split_impl(
        &mut self,
        t: &Tensor,
        iv: &IterVar,
        by: SplitBy,
    ) -> Result<(IterVar, IterVar), TirError> {
        let pos = self.leaf_pos(t, iv)?;
        let (SplitBy::Factor(amount) | SplitBy::Parts(amount)) = by;
        if amount <= 0 {
            return Err(TirError::Schedule(format!(
                "split of `{}` needs a positive factor, got {amount}",
                iv.name()
            )));
        }
        let outer = IterVar::new(&format!("{}.outer", iv.name()), None, iv.kind);
        let inner = IterVar::new(&format!("{}.inner", iv.name()), None, iv.kind);
        let st = self.stage_mut(t)?;
        st.leaf_iter_vars
            .splice(pos..pos + 1, [outer.clone(), inner.clone()]);
        st.all_iter_vars.extend([outer.clone(), inner.clone()]);
        st.relations.push(Relation::Split(Split {
            parent: iv.clone(),
            outer: outer.clone(),
            inner: inner.clone(),
            by,
        }));
        let name = self.state.name(t.id).to_string();
        self.record(format!("split({name}, {}, {by})", iv.name()));
        Ok((outer, inner))
    }

    /// Fuses two adjacent leaves (`outer` immediately before `inner`) into one.
    pub fn fuse(
        &mut self,
        t: &Tensor,
        outer: &IterVar,
        inner: &IterVar,
    ) -> Result<IterVar, TirError> {
        let po = self.leaf_pos(t, outer)?;
        let pi = self.leaf_pos(t, inner)?;
        if pi != po + 1 {
            return Err(TirError::Schedule(format!(
                "fuse needs `{}` immediately outside `{}` in stage `{}`",
                outer.name(),
                inner.name(),
                self.state.name(t.id)
            )));
        }
        if outer.kind != inner.kind {
            return Err(TirError::Schedule(format!(
                "cannot fuse a data axis with a reduce axis (`{}`, `{}`)",
                outer.name(),
                inner.name()
            )));
        }
        let fused = IterVar::new(
            &format!("{}.{}.fused", outer.name(), inner.name()),
            None,
            outer.kind,
        );
        let st = self.stage_mut(t)?;
        st.leaf_iter_vars.splice(po..pi + 1, [fused.clone()]);
        st.all_iter_vars.push(fused.clone());
        st.relations.push(Relation::Fuse {
            outer: outer.clone(),
            inner: inner.clone(),
            fused: fused.clone(),
        });
        let name = self.state.name(t.id).to_string();
        self.record(format!("fuse({name}, {}, {})", outer.name(), inner.name()));
        Ok(fused)
    }

    /// Tiles two leaves: split both, then order `x.outer, y.outer, x.inner, y.inner`.
    /// Recorded as its three primitives. Returns the four new leaves in that order.
    pub fn tile(
        &mut self,
        t: &Tensor,
        x: &IterVar,
        y: &IterVar,
        fx: i64,
        fy: i64,
    ) -> Result<[IterVar; 4], TirError> {
        let (xo, xi) = self.split(t, x, fx)?;
        let (yo, yi) = self.split(t, y, fy)?;
        let order = [xo, yo, xi, yi];
        self.reorder(t, &order)?;
        Ok(order)
    }

    /// Permutes the given leaves among the positions they occupy.
    pub fn reorder(&mut self, t: &Tensor, order: &[IterVar]) -> Result<(), TirError> {
        let mut pos = order
            .iter()
            .map(|iv| self.leaf_pos(t, iv))
            .collect::<Result<Vec<_>, _>>()?;
        let mut seen = pos.clone();
        seen.sort();
        seen.dedup();
        if seen.len() != pos.len() {
            return Err(TirError::Schedule("reorder lists a variable twice".into()));
        }
        pos.sort();
        let st = self.stage_mut(t)?;
        for (p, iv) in pos.iter().zip(order) {
            st.leaf_iter_vars[*p] = iv.clone();
        }
        let names: Vec<&str> = order.iter().map(|v| v.name()).collect();
        let name = self.state.name(t.id).to_string();
        self.record(format!("reorder({name}, {})", names.join(", ")));
        Ok(())
    }

    /// Computes `t` inside the loop of `iv`, a leaf of the stage of `consumer`.
    pub fn compute_at(
        &mut self,
        t: &Tensor,
        consumer: &Tensor,
        iv: &IterVar,
    ) -> Result<(), TirError> {
        self.leaf_pos(consumer, iv)?;
        if self.state.outputs.contains(&t.id) {
            return Err(TirError::Schedule(format!(
                "output `{}` is computed over its whole domain; it cannot be computed at `{}`",
                self.state.name(t.id),
                self.state.name(consumer.id)
            )));
        }
        if t.id == consumer.id {
            return Err(TirError::Schedule(format!(
                "cannot compute `{}` at itself",
                self.state.name(t.id)
            )));
        }
        self.stage_mut(t)?.attach = Attach::Scope {
            stage: consumer.id,
            ivar: iv.clone(),
        };
        let (a, b) = (
            self.state.name(t.id).to_string(),
            self.state.name(consumer.id).to_string(),
        );
        self.record(format!("compute_at({a}, {b}, {})", iv.name()));
        Ok(())
    }

    /// Substitutes `t` into its consumers.
    pub fn compute_inline(&mut self, t: &Tensor) -> Result<(), TirError> {
        let name = self.state.name(t.id).to_string();
        if self.state.outputs.contains(&t.id) {
            return Err(TirError::Schedule(format!("cannot inline output `{name}`")));
        }
        if matches!(self.op_compute(t)?.body, Body::Reduce { .. }) {
            return Err(TirError::Schedule(format!(
                "cannot inline reduction `{name}`"
            )));
        }
        self.stage_mut(t)?.attach = Attach::Inline;
        self.record(format!("compute_inline({name})"));
        Ok(())
    }

    /// Computes `t` at the top level again.
    pub fn compute_root(&mut self, t: &Tensor) -> Result<(), TirError> {
        self.stage_mut(t)?.attach = Attach::Root;
        let name = self.state.name(t.id).to_string();
        self.record(format!("compute_root({name})"));
        Ok(())
    }

    fn annotate(
        &mut self,
        t: &Tensor,
        iv: &IterVar,
        kind: ForKind,
        what: &str,
    ) -> Result<(), TirError> {
        self.leaf_pos(t, iv)?;
        self.stage_mut(t)?.for_kinds.insert(iv.var.id, kind);
        let name = self.state.name(t.id).to_string();
        self.record(format!("{what}({name}, {})", iv.name()));
        Ok(())
    }

    /// Marks leaf `iv` of `t` to run as a vector loop.
    pub fn vectorize(&mut self, t: &Tensor, iv: &IterVar) -> Result<(), TirError> {
        self.annotate(t, iv, ForKind::Vectorized, "vectorize")
    }
    /// Marks leaf `iv` of `t` to run in parallel.
    pub fn parallel(&mut self, t: &Tensor, iv: &IterVar) -> Result<(), TirError> {
        self.annotate(t, iv, ForKind::Parallel, "parallel")
    }
    /// Marks leaf `iv` of `t` to be unrolled.
    pub fn unroll(&mut self, t: &Tensor, iv: &IterVar) -> Result<(), TirError> {
        self.annotate(t, iv, ForKind::Unrolled, "unroll")
    }

    /// Replaces the loop nest from `iv` inwards by a call to the micro-kernel `kernel`,
    /// which receives the regions of the output and inputs that nest touches.
    pub fn tensorize(&mut self, t: &Tensor, iv: &IterVar, kernel: &str) -> Result<(), TirError> {
        self.leaf_pos(t, iv)?;
        self.stage_mut(t)?.tensorize = Some((iv.clone(), kernel.to_string()));
        let name = self.state.name(t.id).to_string();
        self.record(format!("tensorize({name}, {}, {kernel})", iv.name()));
        Ok(())
    }

    /// Stores the region `t` realizes as `layout` (TVM's `transform_layout` on a
    /// scratch buffer): a stage computed at a loop of its consumer keeps its vector
    /// lanes contiguous, whatever the order of its logical axes. An output keeps
    /// the storage its caller gives it.
    pub fn storage_layout(&mut self, t: &Tensor, layout: BufferLayout) -> Result<(), TirError> {
        let name = self.state.name(t.id).to_string();
        if self.state.outputs.contains(&t.id) {
            return Err(TirError::Schedule(format!(
                "output `{name}` is stored as its caller lays it out"
            )));
        }
        layout.validate(self.op_compute(t)?.axis.len(), &name)?;
        let dims = format!("{:?}", layout.dims);
        self.stage_mut(t)?.storage = Some(layout);
        self.record(format!("storage_layout({name}, {dims})"));
        Ok(())
    }

    /// Adds a stage `<t>.cache` that copies `t`, and makes `readers` read the copy.
    pub fn cache_read(&mut self, t: &Tensor, readers: &[Tensor]) -> Result<Tensor, TirError> {
        let src = self.state.operation(t.id)?.clone();
        for r in readers {
            if !self.state.operation(r.id)?.input_tensors().contains(&t.id) {
                return Err(TirError::Schedule(format!(
                    "`{}` does not read `{}`",
                    self.state.name(r.id),
                    src.name
                )));
            }
        }
        let cache_name = format!("{}.cache", src.name);
        let cache = self.add_copy_op(&cache_name, t.id, &src.shape)?;
        for r in readers {
            let op = &mut self.state.graph.ops[r.id.0];
            if let OpKind::Compute(c) = &mut op.kind {
                c.body = c.body.map(|e| retarget(e, t.id, cache.id));
            }
        }
        let names: Vec<&str> = readers.iter().map(|r| self.state.name(r.id)).collect();
        self.record(format!("cache_read({}, [{}])", src.name, names.join(", ")));
        Ok(cache)
    }

    /// Moves the computation of `t` into a new stage `<t>.local`; `t` becomes a copy of it.
    /// Must be applied before the stage of `t` is split or fused.
    pub fn cache_write(&mut self, t: &Tensor) -> Result<Tensor, TirError> {
        let op = self.state.operation(t.id)?.clone();
        let c = self.op_compute(t)?.clone();
        if !self.stage(t)?.relations.is_empty() {
            return Err(TirError::Schedule(format!(
                "cache_write of `{}` must come before its split/fuse",
                op.name
            )));
        }
        // The new stage computes the original body over fresh variables.
        let fresh = |ivs: &[IterVar]| -> Vec<IterVar> {
            ivs.iter()
                .map(|iv| IterVar::new(iv.name(), iv.dom.clone(), iv.kind))
                .collect()
        };
        let (axis, raxis) = (fresh(&c.axis), fresh(&c.reduce_axis));
        let map: HashMap<u64, Expr> = c
            .axis
            .iter()
            .chain(&c.reduce_axis)
            .zip(axis.iter().chain(&raxis))
            .map(|(o, n)| (o.var.id, n.expr()))
            .collect();
        let body = c.body.map(|e| e.substitute(&|v| map.get(&v.id).cloned()));
        let local_name = format!("{}.local", op.name);
        let local = self.push_op(
            &local_name,
            &op.shape,
            ComputeOp {
                axis,
                reduce_axis: raxis,
                body,
            },
        )?;
        // `t` keeps its axes (so its leaves stay valid) and copies the cache.
        let read = Expr::Read {
            tensor: local.id,
            indices: c.axis.iter().map(IterVar::expr).collect(),
        };
        let new_c = ComputeOp {
            axis: c.axis.clone(),
            reduce_axis: vec![],
            body: Body::Plain(read),
        };
        self.state.graph.ops[t.id.0].kind = OpKind::Compute(new_c.clone());
        let st = self.stage_mut(t)?;
        st.leaf_iter_vars.retain(|iv| iv.kind == IterKind::Data);
        st.all_iter_vars.retain(|iv| iv.kind == IterKind::Data);
        self.record(format!("cache_write({})", op.name));
        Ok(local)
    }

    fn add_copy_op(
        &mut self,
        name: &str,
        src: TensorId,
        shape: &[i64],
    ) -> Result<Tensor, TirError> {
        let axis: Vec<IterVar> = shape
            .iter()
            .enumerate()
            .map(|(k, e)| IterVar::new(&format!("ax{k}"), Some(Range::extent(*e)), IterKind::Data))
            .collect();
        let body = Body::Plain(Expr::Read {
            tensor: src,
            indices: axis.iter().map(IterVar::expr).collect(),
        });
        self.push_op(
            name,
            shape,
            ComputeOp {
                axis,
                reduce_axis: vec![],
                body,
            },
        )
    }

    fn push_op(&mut self, name: &str, shape: &[i64], c: ComputeOp) -> Result<Tensor, TirError> {
        if self.state.graph.find(name).is_some() {
            return Err(TirError::Schedule(format!(
                "a tensor named `{name}` already exists"
            )));
        }
        let id = TensorId(self.state.graph.ops.len());
        let stage = Stage::new(id, &c);
        self.state.graph.ops.push(Operation {
            name: name.to_string(),
            shape: shape.to_vec(),
            kind: OpKind::Compute(c),
        });
        self.state.stages.push(stage);
        Ok(self.state.graph.tensor(id))
    }

    /// The schedule prepared for bound inference: inlined stages substituted into their
    /// consumers, and the leaves of compute_at stages rebased to start at zero.
    pub fn normalized(&self) -> Result<ScheduleState, TirError> {
        let mut st = self.state.clone();
        inject_inline(&mut st)?;
        rebase_attached(&mut st);
        Ok(st)
    }
}

fn retarget(e: &Expr, from: TensorId, to: TensorId) -> Expr {
    e.rewrite(&mut |n| match n {
        Expr::Read { tensor, indices } if *tensor == from => Some(Expr::Read {
            tensor: to,
            indices: indices.clone(),
        }),
        _ => None,
    })
}

fn inject_inline(st: &mut ScheduleState) -> Result<(), TirError> {
    for t in st.topo_order()? {
        let si = st.stage_index(t).expect("topo order holds stages");
        if st.stages[si].attach != Attach::Inline {
            continue;
        }
        let c = st.compute_op(t).expect("stages are compute ops").clone();
        let Body::Plain(def) = c.body else {
            return Err(TirError::Schedule(format!(
                "cannot inline reduction `{}`",
                st.name(t)
            )));
        };
        if st
            .stages
            .iter()
            .any(|s| matches!(&s.attach, Attach::Scope { stage, .. } if *stage == t))
        {
            return Err(TirError::Schedule(format!(
                "`{}` is inlined but other stages are computed at it",
                st.name(t)
            )));
        }
        for op in &mut st.graph.ops {
            if let OpKind::Compute(oc) = &mut op.kind {
                oc.body = oc.body.map(|e| {
                    e.rewrite(&mut |n| match n {
                        Expr::Read { tensor, indices } if *tensor == t => {
                            let m: HashMap<u64, Expr> = c
                                .axis
                                .iter()
                                .map(|a| a.var.id)
                                .zip(indices.iter().cloned())
                                .collect();
                            Some(def.substitute(&|v| m.get(&v.id).cloned()))
                        }
                        _ => None,
                    })
                });
            }
        }
    }
    Ok(())
}

/// Gives every leaf of a compute_at stage a rebased copy starting at zero (TVM's
/// RebaseNonZeroMinLoop), and moves annotations and attachments to the copies.
fn rebase_attached(st: &mut ScheduleState) {
    let mut renamed: HashMap<u64, IterVar> = HashMap::new();
    for s in &mut st.stages {
        if !matches!(s.attach, Attach::Scope { .. }) {
            continue;
        }
        for leaf in s.leaf_iter_vars.iter_mut() {
            let rebased = IterVar::new(leaf.name(), None, leaf.kind);
            s.relations.push(Relation::Rebase {
                parent: leaf.clone(),
                rebased: rebased.clone(),
            });
            s.all_iter_vars.push(rebased.clone());
            if let Some(k) = s.for_kinds.remove(&leaf.var.id) {
                s.for_kinds.insert(rebased.var.id, k);
            }
            renamed.insert(leaf.var.id, rebased.clone());
            *leaf = rebased;
        }
        if let Some((iv, _)) = &mut s.tensorize {
            if let Some(n) = renamed.get(&iv.var.id) {
                *iv = n.clone();
            }
        }
    }
    for s in &mut st.stages {
        if let Attach::Scope { ivar, .. } = &mut s.attach {
            if let Some(n) = renamed.get(&ivar.var.id) {
                *ivar = n.clone();
            }
        }
    }
}

impl fmt::Display for ScheduleState {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        for s in &self.stages {
            let name = self.name(s.op);
            let attach = match &s.attach {
                Attach::Root => "root".to_string(),
                Attach::Inline => "inline".to_string(),
                Attach::Scope { stage, ivar } => {
                    format!("at {}.{}", self.name(*stage), ivar.name())
                }
            };
            write!(f, "stage {name} ({attach}): leaves [")?;
            for (k, iv) in s.leaf_iter_vars.iter().enumerate() {
                let kind = match s.for_kind(&iv.var) {
                    ForKind::Serial => "",
                    ForKind::Parallel => " parallel",
                    ForKind::Vectorized => " vectorized",
                    ForKind::Unrolled => " unrolled",
                };
                write!(f, "{}{}{kind}", if k > 0 { ", " } else { "" }, iv.name())?;
            }
            write!(f, "]")?;
            for r in &s.relations {
                match r {
                    Relation::Split(sp) => write!(
                        f,
                        "; split {} -> {}, {} ({})",
                        sp.parent.name(),
                        sp.outer.name(),
                        sp.inner.name(),
                        sp.by
                    )?,
                    Relation::Fuse {
                        outer,
                        inner,
                        fused,
                    } => write!(
                        f,
                        "; fuse {}, {} -> {}",
                        outer.name(),
                        inner.name(),
                        fused.name()
                    )?,
                    Relation::Rebase { parent, rebased } => {
                        write!(f, "; rebase {} -> {}", parent.name(), rebased.name())?
                    }
                }
            }
            if let Some((iv, k)) = &s.tensorize {
                write!(f, "; tensorize {} with {k}", iv.name())?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}
