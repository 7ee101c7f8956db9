//! layoutopt: a graph-level layout-planning optimizer for neural-network models.
//!
//! The pipeline, one module per stage (ARCHITECTURE.md draws the layers):
//! `frontend` (ONNX, TFLite) → `graph` (IR, folding) → `layout` (planning, e-graph
//! rewriting) → `fusion` (groups of nodes run as one step) → `lowering` (op
//! computes and schedules) → `tir` (schedules, InferBound, lowering) → `codegen`
//! (Cranelift) → `runtime`. `core` holds the
//! types every stage shares and `ops` every operator's meaning (one `OpDef` per
//! op). `reference` is the plain executor every later stage is checked against.
//! `export` writes a (planned) graph back as ONNX; `api` is the library entry
//! point (load a model, the `Pass` trait, the planner as a pass); `explorer`
//! renders plans as a self-contained HTML page.

#![warn(missing_docs)]

pub mod api;
pub use api::Error;
pub mod codegen;
pub mod core;
pub mod explorer;
pub mod export;
pub mod frontend;
pub mod fusion;
pub mod graph;
pub mod layout;
pub mod lowering;
pub mod ops;
pub mod reference;
pub mod runtime;
pub mod tir;
