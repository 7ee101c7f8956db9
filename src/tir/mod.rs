//! Tensor-level IR: compute definitions, schedules, InferBound, lowering.
//!
//! The path from an operator to a loop nest, one file per step:
//! - [`expr`], [`simplify`], [`intset`]: integer/float expressions, an arithmetic
//!   simplifier (constant folding, linear canonical form, floor div/mod rules,
//!   bound-aware `min`/`max`/comparisons), and integer sets (intervals behind an API that
//!   admits strided or modular sets later).
//! - [`compute`]: `placeholder`, `compute(shape, fn)` and `reduce` definitions with
//!   iteration variables carrying a domain; a direct evaluator as the test oracle.
//! - [`schedule`]: stages with split (factor or nparts), fuse, reorder, compute_at,
//!   compute_inline, compute_root, vectorize, parallel, unroll, tensorize, cache_read and
//!   cache_write. Every primitive appends a snapshot to `Schedule::record`
//!   (the schedule record of the TVM Explorer RFC), so the schedule after every step can
//!   be inspected.
//! - [`bound`]: InferBound as the InferBound document describes it (read graph, reverse
//!   topological order, InferRootBound with its four phases, PassUpDomain,
//!   PropBoundToInputs, GatherBound, PassDownDomain, attach paths and the relax set).
//! - ScheduleOps (loop nests, attached stages, realize regions, likely guards) and the
//!   lowering driver in [`lower`]; simplification, trivial-loop removal and loop
//!   partitioning of split tails in [`passes`]; storage flattening under a
//!   [`layout::BufferLayout`] in [`flatten`]; all on the statement IR of [`stmt`].
//! - the compute definitions of graph operators live with the operators
//!   (`crate::ops`), their default schedules in `crate::lowering`.
//! - [`interp`]: an interpreter of the statement IR, for tests.
//!
//! # Example
//!
//! The InferBound document's Ex. 3: C computed at axis `i` of D needs one row of C.
//!
//! ```
//! use layoutopt::tir::compute::ComputeGraph;
//! use layoutopt::tir::expr::Expr;
//! use layoutopt::tir::lower::{lower, schedule_ops, LowerOptions};
//! use layoutopt::tir::schedule::Schedule;
//!
//! let mut g = ComputeGraph::new();
//! let c = g.compute("C", &[5, 16], |_| Expr::Int(5))?;
//! let d = g.compute("D", &[5, 16], |x| c.at(x) * Expr::Int(2))?;
//! let mut s = Schedule::new(&g, &[d])?;
//! let i = s.axis(&d)?[0].clone();
//! s.compute_at(&c, &d, &i)?;
//! let ops = schedule_ops(&s)?;
//! assert!(ops.to_text().contains("realize C([i, 1], [0, 16])"));
//! assert_eq!(s.record.len(), 2); // create_schedule, compute_at
//! let f = lower(&s, &LowerOptions::default())?;
//! assert!(f.to_text().contains("allocate C[16]"));
//! # Ok::<(), layoutopt::tir::TirError>(())
//! ```
//!
//! # Beyond TVM: the limitations the InferBound document names
//!
//! (a) *PassDownDomain and split tails.* TVM gives the inner loop of a split of 20 by 16
//! sixteen iterations on every outer step and guards the body. Here PassDownDomain gives
//! the inner variable the range `[0, min(16, 20 - outer*16))` whenever the split does not
//! divide the extent and the outer loop encloses the inner one (otherwise it falls back
//! to TVM's factor and a guard). Producers computed at the outer loop then realize and
//! compute only the elements of the current step. Loop partitioning splits off the last
//! outer iteration, so the main loop is branch- and `min`-free (with an `assume` of the
//! fact that made it so) and the tail runs its 4 iterations.
//!
//! (c) *PassUpDomain after fuse then split.* TVM turns any non-point set of a fused
//! variable into the full ranges of both fused axes, realizing all 4096 elements of B in
//! the document's example. Here, when the fused interval `[lo, lo + e)` has `lo` a
//! multiple of `e` (which a split of the fused variable guarantees when it divides the
//! fused extent) and `e` divides the inner extent `n`, the set is exactly one row and `e`
//! columns; when `n` divides `e`, exactly `e/n` whole rows. B is realized with 8 elements
//! per outer iteration. Other cases keep the rows `[lo/n, hi/n]` with whole width.
//!
//! (b) *GatherBound's per-dimension union* is kept (a box per tensor is what a realize
//! can allocate), but when all requests are constant boxes, InferBound reports in
//! [`bound::Bounds::overcompute`] how many elements the box holds and how many the
//! consumers need (16 and 8 in the document's T[0:2, 0:2] / T[2:4, 2:4] example).
//!
//! Supporting changes. PassUpDomain of a split uses the split's own factor rather than
//! the inner variable's extent (as TVM does), since with (a) that extent may vary by
//! outer iteration. Tail extents mention the outer variable, so relaxation evaluates
//! variables one at a time from the innermost loop outwards, and expressions are
//! simplified before they are relaxed, with sums distributed into a `min` when that
//! cancels terms (`o*4 + min(4, 10 - o*4)` becomes `min(o*4 + 4, 10)`): producers of a
//! consumer with a tail get exact regions. Guards are emitted for split parents as well
//! as roots (a loop split again by a factor larger than its extent would otherwise
//! revisit elements).
//!
//! Not covered: thread binding and storage scopes (the document's Ex. 6 to 8, GPU
//! only). Loop kinds are annotations; the interpreter runs every loop serially.

pub mod bound;
pub mod compute;
pub mod error;
pub mod eval;
pub mod expr;
pub mod flatten;
pub mod interp;
pub mod intset;
pub mod layout;
pub mod lower;
pub mod passes;
pub mod schedule;
pub mod simplify;
pub mod stmt;

pub use error::{KernelError, TirError};

/// The walk micro-kernel of contractions: tensorized at a leaf of a stage whose
/// body is `sum(a[..] * b[..])` over two tensors, with every index moving by a
/// constant step along each tensorized loop, it computes `out[p] += a[p] * b[p]`
/// at every point `p` of those loops (each argument a view over them, see
/// [`stmt::WalkStep`]). The one kernel whose meaning the IR knows: lowering checks
/// the body, and the interpreter runs it without being given it.
pub const CONTRACT: &str = "contract";

/// [`CONTRACT`] whose sums start at zero: the walk's output points are set to 0
/// before the products are added. Lowering calls it in place of an init loop
/// nest and [`CONTRACT`] where the call computes the whole reduction, so the
/// kernel keeps its first sums in registers instead of reading zeros back.
pub const CONTRACT_INTO: &str = "contract_into";
