//! The loss functions NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss,
//! as the gathers, selections and reductions their specifications define
//! them by.

use super::context::{NodeCtx, Res};
use super::registry::{Registry, AI_ONNX};
use crate::graph::{BinaryOp, DType, Op, ReduceKind, Tensor, TensorData, UnaryOp, ValueRef};
use crate::ops::{Gather, GatherElements, LogSoftmax, Reduce, Reshape};

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "NegativeLogLikelihoodLoss", |c| {
        let log_prob = c.input(0)?;
        Ok(vec![Some(c.negative_log_likelihood(log_prob)?)])
    });
    reg.add(AI_ONNX, "SoftmaxCrossEntropyLoss", softmax_cross_entropy);
}

/// The loss of log-probabilities scored against labels: `log_prob(softmax(scores))`
/// along the class axis 1, then the negative log-likelihood; the
/// log-probabilities are the optional second output.
fn softmax_cross_entropy(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let scores = c.input(0)?;
    if c.ty(scores).shape.len() < 2 {
        return Err(c.err(format!(
            "scores of shape {:?} have no class axis",
            c.ty(scores).shape
        )));
    }
    let log_prob = c.emit_inner(
        Op::LogSoftmax(LogSoftmax { axis: 1 }),
        &[scores],
        "log_prob",
    )?;
    let loss = c.negative_log_likelihood(log_prob)?;
    Ok(vec![Some(loss), Some(log_prob)])
}

impl NodeCtx<'_> {
    /// `-log_prob[n, target[n, d...], d...]`, times `weight[target]` where input
    /// 2 gives weights, 0 where the target is `ignore_index`, then reduced as
    /// `reduction` says: none, the sum, or the mean (weighted by the gathered
    /// weights where there are any). `log_prob` is `(N, C, d...)` and the target
    /// (input 1) `(N, d...)` of integers.
    fn negative_log_likelihood(&mut self, log_prob: ValueRef) -> Res<ValueRef> {
        let target = self.input(1)?;
        let (xs, ts) = (self.ty(log_prob).shape, self.ty(target).shape);
        let dtype = self.ty(log_prob).dtype;
        let mut expected = xs.clone();
        if xs.len() >= 2 {
            expected.remove(1);
        }
        if xs.len() < 2 || ts != expected {
            return Err(self.err(format!(
                "the target's shape {ts:?} does not fit the input's {xs:?}: expected {expected:?} (the input without its class axis)"
            )));
        }
        if matches!(self.ty(target).dtype, DType::Bool) || self.ty(target).dtype.is_float() {
            return Err(self.err(format!(
                "the target must hold integer class indices, not {}",
                self.ty(target).dtype
            )));
        }
        let reduction = self.string("reduction", "mean")?;
        if !["none", "sum", "mean"].contains(&reduction.as_str()) {
            return Err(self.err(format!(
                "reduction '{reduction}' is not one of none, sum, mean"
            )));
        }
        // Ignored targets may lie outside the classes: they gather class 0,
        // and the selection below drops what they gathered.
        let ignored = match self.attr("ignore_index") {
            Some(_) => {
                let index = self.int("ignore_index", 0)?;
                let t = Tensor::new(
                    vec![],
                    TensorData::from_i128(self.ty(target).dtype, vec![index.into()]),
                );
                let index = self.inner_constant("ignore_index", t);
                let zero = self.scalar("class_0", self.ty(target).dtype, 0.0);
                let ignored =
                    self.emit_inner(Op::Binary(BinaryOp::Equal), &[target, index], "ignored")?;
                Some((ignored, zero))
            }
            None => None,
        };
        let classes = match ignored {
            Some((ignored, zero)) => {
                self.emit_inner(Op::Where, &[ignored, zero, target], "classes")?
            }
            None => target,
        };
        let mut along_classes = xs.clone();
        along_classes[1] = 1;
        let index = self.emit_inner(
            Op::Reshape(Reshape {
                shape: along_classes,
            }),
            &[classes],
            "class_index",
        )?;
        let picked = self.emit_inner(
            Op::GatherElements(GatherElements { axis: 1 }),
            &[log_prob, index],
            "picked",
        )?;
        let picked = self.emit_inner(
            Op::Reshape(Reshape { shape: ts.clone() }),
            &[picked],
            "picked_rows",
        )?;
        let mut loss = self.emit_inner(Op::Unary(UnaryOp::Neg), &[picked], "negated")?;
        let mut weights = match self.opt_input(2) {
            Some(w) => {
                if self.ty(w).shape != [xs[1]] {
                    return Err(self.err(format!(
                        "weight has shape {:?}, expected [{}] (one per class)",
                        self.ty(w).shape,
                        xs[1]
                    )));
                }
                Some(self.emit_inner(Op::Gather(Gather { axis: 0 }), &[w, classes], "weights")?)
            }
            None => None,
        };
        if let Some((ignored, _)) = ignored {
            // Selected, not multiplied: an ignored -inf must not make NaN.
            let zero = self.scalar("zero", dtype, 0.0);
            loss = self.emit_inner(Op::Where, &[ignored, zero, loss], "kept")?;
            let kept = match weights {
                Some(w) => w,
                None => self.scalar("one", dtype, 1.0),
            };
            weights = Some(self.emit_inner(Op::Where, &[ignored, zero, kept], "kept_weights")?);
        }
        if let Some(w) = weights {
            loss = self.emit_inner(Op::Binary(BinaryOp::Mul), &[loss, w], "weighted")?;
        }
        let total = |kind| {
            Op::Reduce(Reduce {
                kind,
                axes: (0..ts.len()).collect(),
                keepdims: false,
            })
        };
        let op = match (reduction.as_str(), weights) {
            ("none", _) => return Ok(loss),
            ("sum", _) => total(ReduceKind::Sum),
            // The mean, weighted where there are weights.
            (_, Some(w)) => {
                let sum = self.emit_inner(total(ReduceKind::Sum), &[loss], "sum")?;
                let weight = self.emit_inner(total(ReduceKind::Sum), &[w], "weight_sum")?;
                return self.emit_inner(Op::Binary(BinaryOp::Div), &[sum, weight], "mean");
            }
            (_, None) => total(ReduceKind::Mean),
        };
        self.emit_inner(op, &[loss], &reduction)
    }
}
