//! The reference executor: a plain, obviously correct implementation of every op
//! over the graph IR. It is the oracle for every later stage, so it favours clarity
//! over speed: float ops compute in f64 and round once to the output type, integer
//! ops compute exactly in i64, and data movement works on any dtype by computing
//! source indices and gathering them (`TensorData::gather`).
//!
//! `eval_op` checks its inputs against shape inference before computing, so every
//! op implementation may rely on consistent shapes; what inference cannot know
//! (index values, division by zero) the ops check themselves.

pub mod control;

pub use crate::ops::eval_op;

use crate::graph::{
    checked_numel, format_spans, memory_limit, Graph, GraphError, Op, Span, Tensor, ValueRef,
    ValueType,
};
use std::borrow::Cow;
use std::collections::HashMap;

/// An error running a graph, naming the graph input or the layer at fault.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The number of inputs does not match the graph.
    #[error("the graph has {expected} inputs, {got} were given")]
    InputCount {
        /// The graph's inputs.
        expected: usize,
        /// The inputs given.
        got: usize,
    },
    /// A graph input does not fit its declared type.
    #[error("graph input '{name}': {message}")]
    Input {
        /// The input.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// An op failed.
    #[error("{}: {message}", format_spans(spans))]
    AtNode {
        /// The layers of the node.
        spans: Vec<Span>,
        /// What is wrong.
        message: String,
    },
    /// The graph is malformed.
    #[error(transparent)]
    Graph(#[from] GraphError),
}

impl ExecError {
    /// The layers at fault, none for the inputs.
    pub fn spans(&self) -> Vec<Span> {
        match self {
            ExecError::AtNode { spans, .. } => spans.clone(),
            ExecError::Graph(e) => e.spans(),
            ExecError::InputCount { .. } | ExecError::Input { .. } => vec![],
        }
    }
}

/// Runs `graph` on `inputs` (one per graph input, in order) and returns the graph
/// outputs in order. Intermediate values are dropped after their last reader.
pub fn run(graph: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, ExecError> {
    run_with_limit(graph, inputs, memory_limit())
}

/// [`run`], refusing up front a graph whose live values would exceed `limit` bytes.
pub fn run_with_limit(
    graph: &Graph,
    inputs: &[Tensor],
    limit: u64,
) -> Result<Vec<Tensor>, ExecError> {
    graph.check_memory(limit)?;
    if inputs.len() != graph.inputs().len() {
        return Err(ExecError::InputCount {
            expected: graph.inputs().len(),
            got: inputs.len(),
        });
    }
    let mut values: HashMap<ValueRef, Cow<Tensor>> = HashMap::new();
    for (&id, t) in graph.inputs().iter().zip(inputs) {
        let node = graph.node(id);
        check_input(&node.name, t, &node.outputs[0].ty)?;
        values.insert(ValueRef::new(id, 0), Cow::Borrowed(t));
    }

    let order = graph.topo_order()?;
    // How many reads of each value are still to come.
    let mut reads: HashMap<ValueRef, usize> = HashMap::new();
    for &id in &order {
        for v in graph.node_inputs(id) {
            *reads.entry(v).or_default() += 1;
        }
    }
    let keep = |v: &ValueRef| graph.is_graph_output(*v);

    for &id in &order {
        let node = graph.node(id);
        let at = |message: String| ExecError::AtNode {
            spans: node.spans.clone(),
            message,
        };
        let args = graph.node_inputs(id);
        let results: Vec<Cow<Tensor>> = match &node.op {
            Op::Input => continue,
            Op::Constant(t) => vec![Cow::Borrowed(t)],
            op => {
                let tensors = args
                    .iter()
                    .map(|v| {
                        values.get(v).map(|t| t.as_ref()).ok_or_else(|| {
                            at(format!(
                                "input '{}' has no value (an unfed graph input?)",
                                graph.value(*v).name
                            ))
                        })
                    })
                    .collect::<Result<Vec<&Tensor>, _>>()?;
                let types: Vec<ValueType> = node.outputs.iter().map(|v| v.ty.clone()).collect();
                let out = eval_op(op, &tensors, &types).map_err(|e| at(e.to_string()))?;
                out.into_iter().map(Cow::Owned).collect()
            }
        };
        for (i, t) in results.into_iter().enumerate() {
            let v = ValueRef::new(id, i);
            if reads.contains_key(&v) || keep(&v) {
                values.insert(v, t);
            }
        }
        for v in args {
            let left = reads.get_mut(&v).expect("every read was counted");
            *left -= 1;
            if *left == 0 && !keep(&v) {
                values.remove(&v);
            }
        }
    }

    graph
        .outputs()
        .iter()
        .map(|v| {
            values
                .get(v)
                .map(|t| t.clone().into_owned())
                .ok_or_else(|| {
                    ExecError::Graph(GraphError::Graph(format!(
                        "graph output '{}' was not computed",
                        graph.value(*v).name
                    )))
                })
        })
        .collect()
}

/// Checks that the tensor given for graph input `name` is well formed and has
/// the expected type.
fn check_input(name: &str, t: &Tensor, want: &ValueType) -> Result<(), ExecError> {
    let refuse = |message| {
        Err(ExecError::Input {
            name: name.to_string(),
            message,
        })
    };
    if checked_numel(&t.shape) != Some(t.data.len()) {
        return refuse(format!(
            "shape {:?} does not match its {} elements",
            t.shape,
            t.data.len()
        ));
    }
    if t.dtype() != want.dtype || t.shape != want.shape {
        return refuse(format!(
            "expected {want}, got {}",
            ValueType::new(t.dtype(), t.shape.clone())
        ));
    }
    Ok(())
}
