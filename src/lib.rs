//! layoutopt: a graph-level layout-planning optimizer for neural-network models.
//!
//! The pipeline, one module per stage (see DESIGN.md):
//! `frontend` (ONNX, TFLite) → `graph` (IR, shapes, folding) → `layout` (algebra,
//! planning, e-graph rewriting) → `tir` (compute, schedules, InferBound, lowering).
//! `reference` is the plain executor every later stage is checked against.
//! `export` writes a (planned) graph back as ONNX; `api` is the library entry
//! point (load a model, the `Pass` trait, the planner as a pass); `explorer`
//! renders plans as a self-contained HTML page.

pub mod api;
pub mod codegen;
pub mod core;
pub mod explorer;
pub mod export;
pub mod frontend;
pub mod graph;
pub mod layout;
pub mod lowering;
pub mod ops;
pub mod reference;
pub mod runtime;
pub mod tir;
