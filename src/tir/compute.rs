//! Tensor-expression compute definitions: placeholders and `compute(shape, fn)` with
//! optional reduce axes, plus a direct evaluator used as the oracle in tests.

use std::collections::HashMap;

use super::error::TirError;
use super::expr::{unflatten, BinOp, Expr, Range, TensorId, Var};
use crate::core::scalar::Scalar;

/// The role of an iteration variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IterKind {
    /// A data-parallel axis of a compute definition (or a variable derived from one).
    Data,
    /// A reduction axis.
    Reduce,
}

/// An iteration variable: a variable with a domain. The domain is meaningful for the axes
/// of compute definitions; variables created by split/fuse have none (InferBound sizes them).
#[derive(Clone, Debug, PartialEq)]
pub struct IterVar {
    /// The variable.
    pub var: Var,
    /// Its domain (none for variables made by split and fuse).
    pub dom: Option<Range>,
    /// Data (parallel) or reduction axis.
    pub kind: IterKind,
}

impl IterVar {
    /// A fresh iteration variable named `name`.
    pub fn new(name: &str, dom: Option<Range>, kind: IterKind) -> IterVar {
        IterVar {
            var: Var::new(name),
            dom,
            kind,
        }
    }
    /// The variable as an expression.
    pub fn expr(&self) -> Expr {
        self.var.expr()
    }
    /// The variable's name.
    pub fn name(&self) -> &str {
        &self.var.name
    }
}

/// How a reduction combines its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    /// Their sum.
    Sum,
    /// Their product.
    Prod,
    /// Their maximum; NaN if any is NaN.
    Max,
    /// Their minimum; NaN if any is NaN.
    Min,
    /// Their maximum with NaN values skipped, NaN only when all are (IEEE 754
    /// maximumNumber): the window of a MaxPool (ARCHITECTURE.md, "NaN and
    /// infinities").
    MaxNumber,
}

impl ReduceOp {
    /// The value the accumulator starts from.
    pub fn identity(self) -> f64 {
        match self {
            ReduceOp::Sum => 0.0,
            ReduceOp::Prod => 1.0,
            ReduceOp::Max => f64::NEG_INFINITY,
            ReduceOp::Min => f64::INFINITY,
            // Not -inf: a window of NaN only must give NaN, not -inf.
            ReduceOp::MaxNumber => f64::NAN,
        }
    }
    /// The combined value of an accumulator and a new value.
    pub fn combine(self, acc: Expr, v: Expr) -> Expr {
        match self {
            ReduceOp::Sum => acc + v,
            ReduceOp::Prod => acc * v,
            ReduceOp::Max => Scalar::max(acc, v),
            ReduceOp::Min => Scalar::min(acc, v),
            // v is NaN ? acc : (v <= acc ? acc : v); a NaN acc (nothing seen yet)
            // fails the comparison and takes v.
            ReduceOp::MaxNumber => {
                let is_nan = Expr::Bin(BinOp::Ne, Box::new(v.clone()), Box::new(v.clone()));
                let keep = Expr::Bin(
                    BinOp::Or,
                    Box::new(is_nan),
                    Box::new(v.clone().le(acc.clone())),
                );
                Expr::select(keep, acc, v)
            }
        }
    }
    /// The reduction and the new value of an update `value` that `combine` built,
    /// its accumulator being the expressions `is_acc` accepts (a read or, after
    /// storage flattening, a load of the element being updated); `None` for any
    /// other expression or where the new value reads the accumulator too.
    pub fn split(value: &Expr, is_acc: impl Fn(&Expr) -> bool) -> Option<(ReduceOp, &Expr)> {
        let (op, v) = match value {
            Expr::Bin(BinOp::Add, a, v) if is_acc(a) => (ReduceOp::Sum, &**v),
            Expr::Bin(BinOp::Mul, a, v) if is_acc(a) => (ReduceOp::Prod, &**v),
            Expr::Bin(BinOp::Max, a, v) if is_acc(a) => (ReduceOp::Max, &**v),
            Expr::Bin(BinOp::Min, a, v) if is_acc(a) => (ReduceOp::Min, &**v),
            Expr::Select(keep, a, v) if is_acc(a) => match &**keep {
                Expr::Bin(BinOp::Or, nan, le) => match (&**nan, &**le) {
                    (Expr::Bin(BinOp::Ne, x, y), Expr::Bin(BinOp::Le, z, b))
                        if [x, y, z].iter().all(|e| ***e == **v) && is_acc(b) =>
                    {
                        (ReduceOp::MaxNumber, &**v)
                    }
                    _ => return None,
                },
                _ => return None,
            },
            _ => return None,
        };
        let mut reads_acc = false;
        v.visit(&mut |e| reads_acc |= is_acc(e));
        (!reads_acc).then_some((op, v))
    }
    /// The combined value of an accumulator and a new value, on numbers.
    pub fn apply(self, acc: f64, v: f64) -> f64 {
        match self {
            ReduceOp::Sum => acc + v,
            ReduceOp::Prod => acc * v,
            ReduceOp::Max => Scalar::max(acc, v),
            ReduceOp::Min => Scalar::min(acc, v),
            // f64::max is maximumNumber.
            ReduceOp::MaxNumber => acc.max(v),
        }
    }
}

/// What a compute definition computes per output element.
#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    /// An expression of the axes.
    Plain(Expr),
    /// A reduction of `source` over the reduce axes.
    Reduce {
        /// How the values combine.
        op: ReduceOp,
        /// The value per point of the reduce axes.
        source: Expr,
    },
}

impl Body {
    /// The expression computed per element (the source, for a reduction).
    pub fn expr(&self) -> &Expr {
        match self {
            Body::Plain(e) | Body::Reduce { source: e, .. } => e,
        }
    }
    /// The same body with its expression replaced by `f` of it.
    pub fn map(&self, f: impl Fn(&Expr) -> Expr) -> Body {
        match self {
            Body::Plain(e) => Body::Plain(f(e)),
            Body::Reduce { op, source } => Body::Reduce {
                op: *op,
                source: f(source),
            },
        }
    }
}

/// A compute definition: its axes, its reduce axes and its body.
#[derive(Clone, Debug, PartialEq)]
pub struct ComputeOp {
    /// One axis per output dimension.
    pub axis: Vec<IterVar>,
    /// The axes reduced over (empty unless the body is a reduction).
    pub reduce_axis: Vec<IterVar>,
    /// The value of each output element.
    pub body: Body,
}

impl ComputeOp {
    /// Axis variables followed by reduce axis variables.
    pub fn root_iter_vars(&self) -> Vec<IterVar> {
        self.axis.iter().chain(&self.reduce_axis).cloned().collect()
    }
}

/// Whether an operation is an input or computed.
#[derive(Clone, Debug, PartialEq)]
pub enum OpKind {
    /// An input of the function (a buffer it is given).
    Placeholder,
    /// A computed tensor.
    Compute(ComputeOp),
}

/// One operation; it produces the tensor with the same [`TensorId`] as its index.
#[derive(Clone, Debug, PartialEq)]
pub struct Operation {
    /// The tensor's name.
    pub name: String,
    /// Its shape.
    pub shape: Vec<i64>,
    /// Input or computed.
    pub kind: OpKind,
}

impl Operation {
    /// The compute definition, unless this is a placeholder.
    pub fn compute(&self) -> Option<&ComputeOp> {
        match &self.kind {
            OpKind::Compute(c) => Some(c),
            OpKind::Placeholder => None,
        }
    }
    /// The tensors this operation reads, in order of first appearance.
    pub fn input_tensors(&self) -> Vec<TensorId> {
        self.compute()
            .map(|c| c.body.expr().tensors_read())
            .unwrap_or_default()
    }
}

/// A handle to a tensor of a graph, used to build expressions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tensor {
    /// The operation producing the tensor.
    pub id: TensorId,
    /// Its number of dimensions.
    pub ndim: usize,
}

impl Tensor {
    /// The element at `indices` (as an expression). The number of indices is checked
    /// when the definition using it is added to a graph.
    pub fn at(&self, indices: &[Expr]) -> Expr {
        Expr::Read {
            tensor: self.id,
            indices: indices.to_vec(),
        }
    }
}

/// The operations of one operator's tensor program, in definition order (which is a
/// topological order: an operation can only read tensors defined before it).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ComputeGraph {
    /// The operations, in definition order.
    pub ops: Vec<Operation>,
}

impl ComputeGraph {
    /// An empty graph.
    pub fn new() -> ComputeGraph {
        ComputeGraph::default()
    }

    /// The operation producing tensor `t`.
    pub fn op(&self, t: TensorId) -> &Operation {
        &self.ops[t.0]
    }

    /// The handle of tensor `t`.
    pub fn tensor(&self, t: TensorId) -> Tensor {
        Tensor {
            id: t,
            ndim: self.ops[t.0].shape.len(),
        }
    }

    /// The tensor named `name`.
    pub fn find(&self, name: &str) -> Option<Tensor> {
        self.ops
            .iter()
            .position(|o| o.name == name)
            .map(|i| self.tensor(TensorId(i)))
    }

    fn push(&mut self, op: Operation) -> Result<Tensor, TirError> {
        if self.ops.iter().any(|o| o.name == op.name) {
            return Err(TirError::Definition(format!(
                "tensor name `{}` is defined twice",
                op.name
            )));
        }
        if let Some(d) = op.shape.iter().find(|d| **d <= 0) {
            return Err(TirError::Definition(format!(
                "tensor `{}` has a non-positive extent {d}",
                op.name
            )));
        }
        self.ops.push(op);
        Ok(self.tensor(TensorId(self.ops.len() - 1)))
    }

    /// Adds an input tensor of `shape` named `name`.
    pub fn placeholder(&mut self, name: &str, shape: &[i64]) -> Result<Tensor, TirError> {
        self.push(Operation {
            name: name.to_string(),
            shape: shape.to_vec(),
            kind: OpKind::Placeholder,
        })
    }

    /// `name[i...] = f(i...)`.
    pub fn compute(
        &mut self,
        name: &str,
        shape: &[i64],
        f: impl FnOnce(&[Expr]) -> Expr,
    ) -> Result<Tensor, TirError> {
        let axis = make_axes(shape, IterKind::Data, &["i", "j", "k", "l", "m", "n"]);
        let idx: Vec<Expr> = axis.iter().map(IterVar::expr).collect();
        let body = Body::Plain(f(&idx));
        self.push_compute(name, shape, axis, vec![], body)
    }

    /// `name[i...] = reduce_{k...} f(i..., k...)` over the reduce axes of `reduce_shape`.
    pub fn reduce(
        &mut self,
        name: &str,
        shape: &[i64],
        reduce_shape: &[i64],
        op: ReduceOp,
        f: impl FnOnce(&[Expr], &[Expr]) -> Expr,
    ) -> Result<Tensor, TirError> {
        let axis = make_axes(shape, IterKind::Data, &["i", "j", "k", "l", "m", "n"]);
        let raxis = make_axes(reduce_shape, IterKind::Reduce, &["rk", "rl", "rm", "rn"]);
        let idx: Vec<Expr> = axis.iter().map(IterVar::expr).collect();
        let ridx: Vec<Expr> = raxis.iter().map(IterVar::expr).collect();
        let body = Body::Reduce {
            op,
            source: f(&idx, &ridx),
        };
        self.push_compute(name, shape, axis, raxis, body)
    }

    /// A compute definition with explicitly named axes (the document's examples name them).
    pub fn compute_named(
        &mut self,
        name: &str,
        axes: &[(&str, i64)],
        f: impl FnOnce(&[Expr]) -> Expr,
    ) -> Result<Tensor, TirError> {
        let axis: Vec<IterVar> = axes
            .iter()
            .map(|(n, e)| IterVar::new(n, Some(Range::extent(*e)), IterKind::Data))
            .collect();
        let idx: Vec<Expr> = axis.iter().map(IterVar::expr).collect();
        let body = Body::Plain(f(&idx));
        let shape: Vec<i64> = axes.iter().map(|a| a.1).collect();
        self.push_compute(name, &shape, axis, vec![], body)
    }

    pub(crate) fn push_compute(
        &mut self,
        name: &str,
        shape: &[i64],
        axis: Vec<IterVar>,
        reduce_axis: Vec<IterVar>,
        body: Body,
    ) -> Result<Tensor, TirError> {
        let next = self.ops.len();
        let mut err = None;
        body.expr().visit(&mut |e| {
            if let Expr::Read { tensor, indices } = e {
                if tensor.0 >= next {
                    err = Some(format!(
                        "`{name}` reads a tensor that is not defined before it"
                    ));
                } else if self.ops[tensor.0].shape.len() != indices.len() {
                    err = Some(format!(
                        "`{name}` reads `{}` with {} indices, it has {} dimensions",
                        self.ops[tensor.0].name,
                        indices.len(),
                        self.ops[tensor.0].shape.len()
                    ));
                }
            }
        });
        if let Some(m) = err {
            return Err(TirError::Definition(m));
        }
        self.push(Operation {
            name: name.to_string(),
            shape: shape.to_vec(),
            kind: OpKind::Compute(ComputeOp {
                axis,
                reduce_axis,
                body,
            }),
        })
    }

    /// Evaluates every operation directly from its definition, in definition order: the
    /// oracle for lowered and interpreted loop nests. Tensors are row-major `f64` arrays.
    pub fn evaluate(&self, inputs: &HashMap<String, Vec<f64>>) -> Result<Vec<Vec<f64>>, TirError> {
        let mut vals: Vec<Vec<f64>> = Vec::with_capacity(self.ops.len());
        for op in &self.ops {
            let size: i64 = op.shape.iter().product();
            let data = match &op.kind {
                OpKind::Placeholder => {
                    let d = inputs.get(&op.name).ok_or_else(|| {
                        TirError::Eval(format!("no input given for placeholder `{}`", op.name))
                    })?;
                    if d.len() as i64 != size {
                        return Err(TirError::Eval(format!(
                            "input `{}` has {} elements, its shape needs {size}",
                            op.name,
                            d.len()
                        )));
                    }
                    d.clone()
                }
                OpKind::Compute(c) => {
                    let mut out = Vec::with_capacity(size as usize);
                    for flat in 0..size {
                        let mut env = HashMap::new();
                        for (iv, v) in c.axis.iter().zip(unflatten(flat, &op.shape)) {
                            env.insert(iv.var.id, v);
                        }
                        let v = match &c.body {
                            Body::Plain(e) => eval_value(e, &mut env, &vals, self)?,
                            Body::Reduce { op: rop, source } => {
                                let rshape: Vec<i64> = c
                                    .reduce_axis
                                    .iter()
                                    .map(dom_extent)
                                    .collect::<Result<_, _>>()?;
                                let mut acc = rop.identity();
                                for rflat in 0..rshape.iter().product::<i64>() {
                                    for (iv, v) in
                                        c.reduce_axis.iter().zip(unflatten(rflat, &rshape))
                                    {
                                        env.insert(iv.var.id, v);
                                    }
                                    acc =
                                        rop.apply(acc, eval_value(source, &mut env, &vals, self)?);
                                }
                                acc
                            }
                        };
                        out.push(v);
                    }
                    out
                }
            };
            vals.push(data);
        }
        Ok(vals)
    }
}

fn dom_extent(iv: &IterVar) -> Result<i64, TirError> {
    iv.dom
        .as_ref()
        .and_then(|d| d.extent.as_int())
        .ok_or_else(|| TirError::Definition(format!("axis `{}` has no constant extent", iv.name())))
}

fn make_axes(shape: &[i64], kind: IterKind, names: &[&str]) -> Vec<IterVar> {
    shape
        .iter()
        .enumerate()
        .map(|(k, e)| {
            let name = names
                .get(k)
                .map(|s| s.to_string())
                .unwrap_or_else(|| format!("ax{k}"));
            IterVar::new(&name, Some(Range::extent(*e)), kind)
        })
        .collect()
}

fn eval_value(
    e: &Expr,
    env: &mut HashMap<u64, i64>,
    vals: &[Vec<f64>],
    g: &ComputeGraph,
) -> Result<f64, TirError> {
    let mut reads = Vec::new();
    // Tensor reads are resolved first; the rest is plain scalar evaluation.
    let resolved = e.rewrite(&mut |n| match n {
        Expr::Read { tensor, indices } => {
            let op = g.op(*tensor);
            let mut flat = 0i64;
            for (ix, d) in indices.iter().zip(&op.shape) {
                let v = match super::eval::eval_scalar(ix, &|v| env.get(&v.id).copied(), &|_, _| {
                    None
                }) {
                    Ok(x) => x.as_i64(),
                    Err(e) => {
                        reads.push(e.to_string());
                        return Some(Expr::Float(0.0));
                    }
                };
                if v < 0 || v >= *d {
                    reads.push(format!(
                        "`{}` read out of bounds at index {v} (extent {d})",
                        op.name
                    ));
                    return Some(Expr::Float(0.0));
                }
                flat = flat * d + v;
            }
            Some(Expr::Float(vals[tensor.0][flat as usize]))
        }
        _ => None,
    });
    if let Some(m) = reads.into_iter().next() {
        return Err(TirError::Eval(m));
    }
    super::eval::eval_scalar(&resolved, &|v| env.get(&v.id).copied(), &|_, _| None)
        .map(|v| v.as_f64())
        .map_err(TirError::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tir::expr::Var;

    /// `split` takes apart every update `combine` builds, and nothing that reads the
    /// accumulator twice.
    #[test]
    fn split_inverts_combine() {
        let acc = Expr::Var(Var::new("acc"));
        let v = Expr::Var(Var::new("x")) * Expr::Float(2.0);
        let is_acc = |e: &Expr| *e == acc;
        for op in [
            ReduceOp::Sum,
            ReduceOp::Prod,
            ReduceOp::Max,
            ReduceOp::Min,
            ReduceOp::MaxNumber,
        ] {
            let update = op.combine(acc.clone(), v.clone());
            assert_eq!(ReduceOp::split(&update, is_acc), Some((op, &v)), "{op:?}");
            let twice = op.combine(acc.clone(), acc.clone() + v.clone());
            assert_eq!(ReduceOp::split(&twice, is_acc), None, "{op:?}");
        }
        assert_eq!(ReduceOp::split(&(acc.clone() - v.clone()), is_acc), None);
        assert_eq!(ReduceOp::split(&(v.clone() + acc.clone()), is_acc), None);
    }
}
