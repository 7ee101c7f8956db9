//! The one error type of compiling and running a model.

use super::kernels::simd::Isa;
use super::kernels::tir_step;
use super::kernels::KernelError;
use crate::graph::{format_spans, GraphError, Span};

/// An error compiling or running a model, naming the graph input or layer.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The number of inputs does not match the model.
    #[error("the model has {expected} inputs, {got} were given")]
    InputCount {
        /// The model's inputs.
        expected: usize,
        /// The inputs given.
        got: usize,
    },
    /// A model input does not fit its declared type.
    #[error("model input '{name}': expected {expected}, got {got}")]
    Input {
        /// The input.
        name: String,
        /// Its declared type.
        expected: String,
        /// The type given.
        got: String,
    },
    /// A layer could not be compiled or run.
    #[error("{}: {message}", format_spans(spans))]
    AtNode {
        /// The layers of the step.
        spans: Vec<Span>,
        /// What is wrong.
        message: String,
    },
    /// A native kernel of the layer could not be built or run.
    #[error("{}: {source}", format_spans(spans))]
    Kernel {
        /// The layers of the step.
        spans: Vec<Span>,
        /// What failed.
        source: KernelError,
    },
    /// A TIR step of the layer could not be lowered, compiled or run.
    #[error("{}: {source}", format_spans(spans))]
    Step {
        /// The layers of the step.
        spans: Vec<Span>,
        /// What failed.
        source: tir_step::StepError,
    },
    /// The kernels' instruction set was forced to one this CPU lacks.
    #[error("this CPU cannot run {0} kernels (it has {detected})", detected = Isa::detect())]
    Isa(Isa),
    /// The worker threads could not be started.
    #[error("cannot start {threads} worker threads: {message}")]
    Threads {
        /// How many were asked for.
        threads: usize,
        /// Why not.
        message: String,
    },
    /// The graph is malformed.
    #[error(transparent)]
    Graph(#[from] GraphError),
}

impl RuntimeError {
    /// The layers of the step at fault, none for the inputs or the machine.
    pub fn spans(&self) -> Vec<Span> {
        match self {
            RuntimeError::AtNode { spans, .. }
            | RuntimeError::Kernel { spans, .. }
            | RuntimeError::Step { spans, .. } => spans.clone(),
            RuntimeError::Graph(e) => e.spans(),
            RuntimeError::InputCount { .. }
            | RuntimeError::Input { .. }
            | RuntimeError::Isa(_)
            | RuntimeError::Threads { .. } => vec![],
        }
    }
}
