//! Tensor-level IR: compute definitions, schedules, InferBound, lowering.
