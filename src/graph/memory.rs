//! Memory bounds: how many bytes a graph needs, checked before anything is allocated.
//!
//! The limit is the process's memory budget (`core::budget`: `--memory-limit`,
//! `LAYOUTOPT_MEMORY_LIMIT`, else half the machine's available memory). A model
//! whose tensors would not fit is refused with its size in bytes, so a user sees
//! why instead of an allocation abort.

use super::{Graph, GraphError, Op, ValueRef, ValueType};
use std::collections::HashMap;

pub use crate::core::budget::{format_bytes, machine_memory, parse_bytes, MEMORY_LIMIT_ENV};

/// The memory limit in bytes, the one [`crate::core::budget`] holds.
pub fn memory_limit() -> u64 {
    crate::core::budget::limit()
}

/// Bytes a value of this type occupies; `None` when the count overflows.
pub fn checked_size_bytes(ty: &ValueType) -> Option<u64> {
    ty.shape
        .iter()
        .try_fold(ty.dtype.size_bytes() as u64, |acc, &d| {
            acc.checked_mul(d as u64)
        })
}

/// A value too big to count, or to hold within the limit; `what` names it.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[allow(missing_docs)]
pub enum ValueSizeError {
    /// Its dimensions multiply past any count.
    #[error("{what} {ty} has more elements than can be counted (its dimensions overflow)")]
    Uncountable { what: String, ty: ValueType },
    /// It needs more bytes than the limit.
    #[error(
        "{what} {ty} would need {}, more than the memory limit of {}",
        format_bytes(*bytes),
        format_bytes(*limit)
    )]
    OverLimit {
        what: String,
        ty: ValueType,
        bytes: u64,
        limit: u64,
    },
}

/// Checks one value against the limit; used as each node's outputs are inferred.
pub fn check_value_size(ty: &ValueType, what: &str, limit: u64) -> Result<(), ValueSizeError> {
    match checked_size_bytes(ty) {
        None => Err(ValueSizeError::Uncountable {
            what: what.to_string(),
            ty: ty.clone(),
        }),
        Some(bytes) if bytes > limit => Err(ValueSizeError::OverLimit {
            what: what.to_string(),
            ty: ty.clone(),
            bytes,
            limit,
        }),
        Some(_) => Ok(()),
    }
}

impl Graph {
    /// The most bytes live at once when the graph runs in topological order and each
    /// value is dropped after its last reader (what the reference executor does),
    /// with constants and graph inputs live throughout. Returns the peak and the node
    /// being evaluated when it is reached.
    pub fn peak_live_bytes(&self) -> Result<(u64, Option<super::NodeId>), GraphError> {
        let order = self.topo_order()?;
        let size = |v: ValueRef| -> Result<u64, GraphError> {
            checked_size_bytes(self.value_type(v)).ok_or_else(|| {
                GraphError::at(
                    &self.node(v.node).spans,
                    format!(
                        "value '{}' has dimensions that overflow",
                        self.value(v).name
                    ),
                )
            })
        };
        let mut reads: HashMap<ValueRef, usize> = HashMap::new();
        for &id in &order {
            for v in self.node_inputs(id) {
                *reads.entry(v).or_default() += 1;
            }
        }
        let overflow = || GraphError::Graph("the graph's total size overflows".into());
        let mut live = 0u64;
        let mut peak = (0u64, None);
        for &id in &order {
            let node = self.node(id);
            for i in 0..node.outputs.len() {
                live = live
                    .checked_add(size(ValueRef::new(id, i))?)
                    .ok_or_else(overflow)?;
            }
            if live > peak.0 {
                peak = (live, Some(id));
            }
            // Intermediates die after their last reader; constants and inputs stay.
            for v in self.node_inputs(id) {
                let left = reads.get_mut(&v).expect("every read was counted");
                *left -= 1;
                let persistent = matches!(self.node(v.node).op, Op::Input | Op::Constant(_));
                if *left == 0 && !persistent && !self.is_graph_output(v) {
                    live -= size(v)?;
                }
            }
        }
        Ok(peak)
    }

    /// Refuses a graph whose peak live set exceeds `limit` bytes, naming the layer
    /// at the peak and both sizes.
    pub fn check_memory(&self, limit: u64) -> Result<(), GraphError> {
        let (peak, at) = self.peak_live_bytes()?;
        if peak <= limit {
            return Ok(());
        }
        let message = format!(
            "running the model needs {} at its peak, more than the memory limit of {} \
             (set {MEMORY_LIMIT_ENV} to change it)",
            format_bytes(peak),
            format_bytes(limit)
        );
        Err(match at {
            Some(id) => GraphError::at(
                &self.node(id).spans,
                format!("{message}; the peak is reached here"),
            ),
            None => GraphError::Graph(message),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, Span, Tensor};

    #[test]
    fn size_overflow_and_limit_are_reported_with_bytes() {
        let big = ValueType::new(DType::F32, vec![1 << 20, 1 << 20]);
        let e = check_value_size(&big, "output", 1 << 30)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("4398046511104 bytes (4.0 TiB)") && e.contains("1073741824 bytes"),
            "{e}"
        );
        let huge = ValueType::new(DType::F32, vec![usize::MAX, 2]);
        assert!(check_value_size(&huge, "x", u64::MAX)
            .unwrap_err()
            .to_string()
            .contains("overflow"));
        assert!(check_value_size(&ValueType::new(DType::U8, vec![8]), "x", 8).is_ok());
    }

    /// x (input, 400 B) -> relu a (400 B) -> relu b (400 B) -> output.
    /// While b is computed, x, a and b are live: 1200 bytes; a dies after b.
    #[test]
    fn peak_counts_inputs_and_live_intermediates() {
        let mut g = Graph::new("chain");
        let span = |n: &str| vec![Span::new("chain", n, "Relu", 0)];
        let x = g.add_input("x", ValueType::new(DType::F32, vec![100]), span("x"));
        let mut relu = |name: &str, input: ValueRef| {
            let relu = Op::Unary(crate::graph::UnaryOp::Relu);
            let node = g.add_node(relu, name, &[input], &[], span(name)).unwrap();
            ValueRef::new(node, 0)
        };
        let a = relu("a", x);
        let b = relu("b", a);
        let c = relu("c", b);
        g.set_outputs(vec![c]);
        let (peak, at) = g.peak_live_bytes().unwrap();
        assert_eq!(peak, 1200);
        assert_eq!(at, Some(b.node));
        assert!(g.check_memory(1200).is_ok());
        let e = g.check_memory(1199).unwrap_err().to_string();
        assert!(
            e.contains("1200 bytes") && e.contains("1199 bytes") && e.contains("layer 'b'"),
            "{e}"
        );
        // A constant counts once, live from the start.
        let mut g2 = Graph::new("k");
        let k = g2.add_constant("k", Tensor::from_f32(vec![10], vec![0.0; 10]), span("k"));
        g2.set_outputs(vec![k]);
        assert_eq!(g2.peak_live_bytes().unwrap().0, 40);
    }
}
