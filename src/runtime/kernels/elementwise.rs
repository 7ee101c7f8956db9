//! Elementwise chains (a fusion group of unary and binary ops, or one such op)
//! as one pass over the output's physical buffer, in vectors of the widest
//! instruction set. Each op is evaluated from its one scalar definition
//! (`UnaryOp::apply`, `BinaryOp::apply`) on whole vectors (`Lanewise`).
//!
//! Operands broadcast: each has an element stride per physical axis of the
//! output, 0 along the axes it is repeated over. Adjacent axes that every
//! buffer walks alike are merged, so the innermost axis is the longest run in
//! which each operand is either contiguous or one repeated value. The output is
//! cut into blocks of at most `BLOCK` elements of that run; every pass of the
//! chain runs over a whole block before the next (its result in a block-sized
//! register on the stack), so each op is dispatched once per block, not per
//! element. A pass is one op, or an arithmetic op with the Relu, Clip or
//! rounding onto a quantization grid after it, or a product and the sum after
//! it (a batch norm's `x * scale + shift`): each pass stores its block, which
//! costs as much as the arithmetic, so a batch norm and relu take one pass
//! instead of three, and a QDQ model's op and rounding one instead of two.
//!
//! A chain that reads one operand whose values lie on a grid of bytes is a
//! function of the byte: it is computed once, by the chain itself, at each
//! of the grid's values, and runs as a lookup per element (`tabulate`).

use super::activation::Lanewise;
use super::quantized::{Grid, QuantizedAdd, QuantizedHardSwish, QuantizedMul};
use super::simd::{
    load_part, run_vectorized, store_part, Isa, Lanes, LookUpTable, Pair, Vector, VectorKernel,
    ELEMENTS_PER_TASK, MAX_LANES,
};
use super::KernelError;
use crate::core::par;
use crate::core::scalar::{BinaryOp, UnaryOp};
use crate::layout::Layout;
use std::mem::MaybeUninit;

/// Elements of a block: the registers hold this many.
const BLOCK: usize = 256;

/// Bytes of a cache line: a vector store within one line is not split.
const CACHE_LINE: usize = 64;

/// Most operands a chain may read (they are passed without allocating).
pub const MAX_OPERANDS: usize = 8;

/// What one op of a chain reads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg {
    /// The previous op's result.
    Prev,
    /// Operand `k` of the step.
    Operand(usize),
    /// Constant `k` the kernel holds (computed at compile time, e.g. a batch
    /// norm's per-channel scale).
    Packed(usize),
}

/// One op of a chain.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Func {
    Unary(UnaryOp, Arg),
    Binary(BinaryOp, Arg, Arg),
    /// An add of values on two quantization grids rounded onto a third.
    QuantizedAdd(QuantizedAdd, Arg, Arg),
    /// A product of values on two quantization grids rounded onto a third.
    QuantizedMul(QuantizedMul, Arg, Arg),
    /// A hard-swish of values on one grid rounded onto another.
    QuantizedHardSwish(QuantizedHardSwish, Arg),
}

impl Func {
    /// The grid the op rounds its results onto, where it ends on one.
    fn result_grid(&self) -> Option<Grid> {
        match *self {
            Func::Unary(u, _) => Grid::of(u),
            Func::QuantizedAdd(add, ..) => Some(add.output_grid()),
            Func::QuantizedMul(mul, ..) => Some(mul.output_grid()),
            Func::QuantizedHardSwish(hard_swish, _) => Some(hard_swish.output_grid()),
            Func::Binary(..) => None,
        }
    }

    /// Whether the op maps f32 to f32 (comparisons make booleans).
    pub fn supported(&self) -> bool {
        match self {
            Func::Unary(..)
            | Func::QuantizedAdd(..)
            | Func::QuantizedMul(..)
            | Func::QuantizedHardSwish(..) => true,
            Func::Binary(b, ..) => !b.is_comparison(),
        }
    }
}

/// What one pass over a block computes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Pass {
    /// One op.
    Op(Func),
    /// An arithmetic op, then finished.
    Finished(BinaryOp, Arg, Arg, Finish),
    /// `a * b + c`, rounded after the product and after the sum as the two
    /// ops are, then finished.
    Affine(Arg, Arg, Arg, Finish),
}

/// What a pass does to each result before storing it: the unary op that
/// reads it, when that op is cheap beside a store (a clamp, a rounding onto
/// a quantization grid, which QDQ models put after every op).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Finish {
    Nothing,
    /// `UnaryOp::Clip`'s clamp to `[lo, hi]`: a Relu is `[0, inf]` (NaN
    /// passes through).
    Clamp(f32, f32),
    /// `UnaryOp::QuantizeDequantize` with these parameters.
    Grid(UnaryOp),
}

impl Finish {
    /// The finish that the first of `rest` makes, when it is a unary op
    /// reading the op before it; taken from `rest`.
    fn take(rest: &mut &[Func]) -> Finish {
        let finish = match rest.first() {
            Some(&Func::Unary(u @ UnaryOp::QuantizeDequantize { .. }, Arg::Prev)) => {
                Finish::Grid(u)
            }
            Some(&Func::Unary(u, Arg::Prev)) => match u.clamp_bounds() {
                Some((lo, hi)) => Finish::Clamp(lo, hi),
                None => return Finish::Nothing,
            },
            _ => return Finish::Nothing,
        };
        *rest = &rest[1..];
        finish
    }
}

/// A `Finish` of one kind, applied to vectors: one type per kind, so a
/// loop generic over it holds no branch on the kind.
trait Finisher: Copy {
    fn apply<V: Vector>(self, v: V) -> V;
}

#[derive(Clone, Copy)]
struct Unfinished;

impl Finisher for Unfinished {
    #[inline(always)]
    fn apply<V: Vector>(self, v: V) -> V {
        v
    }
}

#[derive(Clone, Copy)]
struct Clamped(f32, f32);

impl Finisher for Clamped {
    #[inline(always)]
    fn apply<V: Vector>(self, v: V) -> V {
        let Clamped(min, max) = self;
        UnaryOp::Clip { min, max }.apply(Lanewise(v)).0
    }
}

#[derive(Clone, Copy)]
struct Gridded(UnaryOp);

impl Finisher for Gridded {
    #[inline(always)]
    fn apply<V: Vector>(self, v: V) -> V {
        self.0.apply(Lanewise(v)).0
    }
}

/// Expands `$body` with `$f` bound to `$finish` as its `Finisher`, once
/// per kind of finish.
macro_rules! with_finish {
    ($finish:expr, |$f:ident| $body:expr) => {
        match $finish {
            Finish::Nothing => {
                let $f = Unfinished;
                $body
            }
            Finish::Clamp(min, max) => {
                let $f = Clamped(min, max);
                $body
            }
            Finish::Grid(u) => {
                let $f = Gridded(u);
                $body
            }
        }
    };
}

/// The chain `funcs` as passes: a product with the sum that reads it, and an
/// arithmetic op (or that pair) with the clamp or rounding that reads it,
/// joined.
fn passes(funcs: &[Func]) -> Vec<Pass> {
    let mut passes = vec![];
    let mut rest = funcs;
    while let Some((&f, after)) = rest.split_first() {
        rest = after;
        passes.push(match (f, rest.first()) {
            (
                Func::Binary(BinaryOp::Mul, a, b),
                Some(
                    &Func::Binary(BinaryOp::Add, Arg::Prev, c)
                    | &Func::Binary(BinaryOp::Add, c, Arg::Prev),
                ),
            ) if c != Arg::Prev => {
                rest = &rest[1..];
                Pass::Affine(a, b, c, Finish::take(&mut rest))
            }
            (Func::Binary(b, p, q), _) => match Finish::take(&mut rest) {
                Finish::Nothing => Pass::Op(f),
                finish => Pass::Finished(b, p, q, finish),
            },
            (f, _) => Pass::Op(f),
        });
    }
    passes
}

/// A compiled chain: the ops and how each operand lines up with the output.
#[derive(Clone, Debug)]
pub struct Elementwise {
    funcs: Vec<Func>,
    /// `funcs` as the passes that compute them.
    passes: Vec<Pass>,
    /// Extents of the merged output axes, outermost first; the last is the run.
    extents: Vec<usize>,
    /// Per operand, its element stride along each merged axis.
    strides: Vec<Vec<usize>>,
    /// Per operand, how it is read along the run.
    reads: Vec<Read>,
    /// Per operand, the length of its buffer.
    lens: Vec<usize>,
    /// The constants the kernel holds: the last operands.
    packed: Vec<Vec<f32>>,
    lanes: Lanes,
    /// The chain's results at every value its operand may hold, looked up
    /// instead of running the passes (`tabulate`).
    table: Option<Table>,
}

/// A chain's results at each value of its operand's grid of bytes.
#[derive(Clone, Debug)]
struct Table {
    /// The grid of the operand.
    grid: Grid,
    /// The chain's result at each of the grid's values, from its least,
    /// then at NaN.
    results: LookUpTable,
}

/// How an operand is read along the run.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Read {
    /// One value, repeated.
    Repeat,
    /// Consecutive elements.
    Walk,
    /// Its first `p` elements over and over (`p` < `BLOCK`): a per-channel
    /// operand of a channel-blocked output, or of a row-major output whose
    /// channel axis is innermost and short (NHWC with 3 channels).
    Periodic(usize),
}

/// An operand as it is stored: its layout and logical shape.
pub struct Stored<'a> {
    pub layout: &'a Layout,
    pub shape: &'a [usize],
}

impl Stored<'_> {
    fn physical(&self) -> Option<Vec<usize>> {
        self.layout.physical_shape(self.shape).ok()
    }
}

/// The element strides of `operand` along each physical axis of `out`, 0 where
/// it is repeated; `None` when its storage does not line up with the output's:
/// - one element: repeated everywhere;
/// - the output's layout and rank, each logical extent the output's or 1 on an
///   axis the layout does not block (so the physical shapes broadcast);
/// - both row-major, the operand's shape broadcasting from the right.
pub fn broadcast_strides(out: &Stored, operand: &Stored) -> Option<Vec<usize>> {
    let out_physical = out.physical()?;
    let physical = if operand.shape.iter().product::<usize>() == 1 {
        vec![1; out_physical.len()]
    } else if operand.layout == out.layout && operand.shape.len() == out.shape.len() {
        let lines_up = (0..out.shape.len()).all(|a| {
            operand.shape[a] == out.shape[a]
                || (operand.shape[a] == 1 && operand.layout.factors(a).is_empty())
        });
        lines_up.then_some(())?;
        operand.physical()?
    } else if operand.layout.is_identity()
        && out.layout.is_identity()
        && operand.shape.len() <= out.shape.len()
    {
        let mut padded = vec![1; out.shape.len() - operand.shape.len()];
        padded.extend_from_slice(operand.shape);
        padded
    } else {
        return None;
    };
    let fits = physical.len() == out_physical.len()
        && physical
            .iter()
            .zip(&out_physical)
            .all(|(&p, &o)| p == o || p == 1);
    fits.then_some(())?;
    let mut strides = vec![0; physical.len()];
    let mut step = 1;
    for a in (0..physical.len()).rev() {
        if physical[a] == out_physical[a] && physical[a] > 1 {
            strides[a] = step;
        }
        step *= physical[a];
    }
    Some(strides)
}

impl Elementwise {
    /// The chain `funcs` writing an output of physical shape `out`, reading
    /// the step's operands and then the constants `packed` (in the output's
    /// physical order), with `strides` (from [`broadcast_strides`]) over
    /// buffers of `lens` elements, both listing the operands then the
    /// constants. `None` for a chain this kernel does not run.
    pub fn new(
        mut funcs: Vec<Func>,
        out: &[usize],
        strides: Vec<Vec<usize>>,
        lens: Vec<usize>,
        packed: Vec<Vec<f32>>,
        isa: Isa,
    ) -> Option<Elementwise> {
        let operands = strides.len().checked_sub(packed.len())?;
        let arg_ok = |a: &Arg, k: usize| match a {
            Arg::Prev => k > 0,
            Arg::Operand(i) => *i < operands,
            Arg::Packed(i) => *i < packed.len(),
        };
        let ok = !funcs.is_empty()
            && strides.len() <= MAX_OPERANDS
            && lens.len() == strides.len()
            && packed
                .iter()
                .zip(&lens[operands..])
                .all(|(p, &l)| p.len() == l)
            && strides.iter().all(|s| s.len() == out.len())
            && funcs.iter().enumerate().all(|(k, f)| {
                f.supported()
                    && match f {
                        Func::Unary(_, a) | Func::QuantizedHardSwish(_, a) => arg_ok(a, k),
                        Func::Binary(_, a, b)
                        | Func::QuantizedAdd(_, a, b)
                        | Func::QuantizedMul(_, a, b) => arg_ok(a, k) && arg_ok(b, k),
                    }
            });
        ok.then_some(())?;
        // The constants are read as the operands after the step's.
        let unpack = |a: &mut Arg| {
            if let Arg::Packed(i) = *a {
                *a = Arg::Operand(operands + i);
            }
        };
        for f in &mut funcs {
            match f {
                Func::Unary(_, a) | Func::QuantizedHardSwish(_, a) => unpack(a),
                Func::Binary(_, a, b)
                | Func::QuantizedAdd(_, a, b)
                | Func::QuantizedMul(_, a, b) => {
                    unpack(a);
                    unpack(b);
                }
            }
        }
        let (extents, strides) = merge_axes(out, strides);
        // Within a run an operand is contiguous or repeated (see `Source`).
        strides
            .iter()
            .all(|s| s.last().is_some_and(|&inner| inner <= 1))
            .then_some(())?;
        let (extents, strides, reads) = periodic_runs(extents, strides);
        Some(Elementwise {
            passes: passes(&funcs),
            funcs,
            extents,
            strides,
            reads,
            lens,
            packed,
            lanes: Lanes::for_block(isa, isa.lanes()),
            table: None,
        })
    }

    /// Runs the chain as a lookup of its results at the values of `grid`
    /// and at NaN (which a rounding onto a grid passes through), when it
    /// reads one operand, which lies on `grid` (of bytes); whether it will.
    /// The results are the chain's own, computed with `isa` as the passes
    /// compute them, so each element is what the passes would give: a swish
    /// (sigmoid, rounding, product, rounding) of a quantized EfficientNet
    /// ran its passes at half the copy bandwidth.
    pub(in crate::runtime) fn tabulate(&mut self, grid: Grid, isa: Isa) -> bool {
        if self.lens.len() != 1 || !grid.fits_a_byte() {
            return false;
        }
        let count = (grid.max - grid.min) as usize + 1;
        let mut values: Vec<f32> = (0..count)
            .map(|i| (grid.min + i as f32 - grid.zero_point) * grid.scale)
            .collect();
        values.push(f32::NAN);
        let at_values = Elementwise::new(
            self.funcs.clone(),
            &[count + 1],
            vec![vec![1]],
            vec![count + 1],
            vec![],
            isa,
        );
        let mut results = vec![0f32; count + 1];
        if at_values.is_none_or(|k| k.run(&[&values], &mut results).is_err()) {
            return false;
        }
        let onto = self.funcs.last().and_then(Func::result_grid);
        let results = LookUpTable::new(results, onto.map(|g| (g.zero_point - g.min, g.scale)));
        self.table = Some(Table { grid, results });
        true
    }

    /// Whether the chain runs as a lookup (`tabulate`).
    pub(in crate::runtime) fn is_table(&self) -> bool {
        self.table.is_some()
    }

    /// The grid of the operand and the results looked up at each of its
    /// integers from the least (then at NaN), when the chain runs as a
    /// lookup and reads its operand as its output is stored: what the
    /// integer convolution computing the operand can look up instead.
    pub(in crate::runtime) fn as_table(&self) -> Option<(Grid, &LookUpTable)> {
        let table = self.table.as_ref()?;
        self.reads_like_output(0)
            .then_some((table.grid, &table.results))
    }

    /// The quantized add this kernel is, with the operands it reads as `a`
    /// and `b`, when it computes nothing else and reads both as its output
    /// is stored (element `k` of each for output element `k`).
    pub(in crate::runtime) fn as_quantized_add(&self) -> Option<(QuantizedAdd, usize, usize)> {
        let [Func::QuantizedAdd(add, Arg::Operand(a), Arg::Operand(b))] = self.funcs[..] else {
            return None;
        };
        (self.packed.is_empty() && a != b && self.reads_like_output(a) && self.reads_like_output(b))
            .then_some((add, a, b))
    }

    /// Whether operand `i` holds element `k` of the output's order at `k`.
    fn reads_like_output(&self, i: usize) -> bool {
        let out_len: usize = self.extents.iter().product();
        self.strides[i] == crate::core::strides(&self.extents)
            && self.lens[i] == out_len
            && self.reads[i] == Read::Walk
    }

    /// Runs the chain over `operands` (in the order of the strides) into `y`.
    pub fn run(&self, operands: &[&[f32]], y: &mut [f32]) -> Result<(), KernelError> {
        let lens_ok = operands.len() + self.packed.len() == self.lens.len()
            && operands.iter().zip(&self.lens).all(|(o, &l)| o.len() == l);
        let out_len: usize = self.extents.iter().product();
        if !lens_ok || y.len() != out_len {
            return Err(KernelError::Buffers {
                kernel: "elementwise",
                given: operands.iter().map(|o| o.len()).chain([y.len()]).collect(),
                expected: self.lens.iter().copied().chain([out_len]).collect(),
            });
        }
        let run = *self.extents.last().expect("at least one axis");
        if run == 0 {
            return Ok(());
        }
        // Blocks are laid out from the first cache line boundary of `y` when
        // every run starts at the same place in a line, so that their stores
        // (the step's whole output) are aligned: a graph output's buffer is
        // the caller's, aligned as the allocator placed it.
        let line = CACHE_LINE / std::mem::size_of::<f32>();
        let skew = match out_len == run || run.is_multiple_of(line) {
            true => y.as_ptr().align_offset(CACHE_LINE).min(line) % line,
            false => 0,
        };
        let blocks_per_run = (run + skew).div_ceil(BLOCK);
        let blocks = out_len / run * blocks_per_run;
        let per_task = (ELEMENTS_PER_TASK / run.min(BLOCK)).max(1);
        let mut all: [&[f32]; MAX_OPERANDS] = [&[]; MAX_OPERANDS];
        for (a, o) in all.iter_mut().zip(
            operands
                .iter()
                .copied()
                .chain(self.packed.iter().map(|p| &p[..])),
        ) {
            *a = o;
        }
        let operands = &all[..self.lens.len()];
        let y_at = y.as_mut_ptr() as usize;
        par::for_each(blocks.div_ceil(per_task), |task| {
            let task = Blocks {
                chain: self,
                operands,
                y: y_at as *mut f32,
                blocks: task * per_task..((task + 1) * per_task).min(blocks),
                blocks_per_run,
                skew,
            };
            // SAFETY: `lanes` comes from `Lanes::for_block`; the lengths of
            // the operands and the output were checked against the strides,
            // and the tasks write disjoint blocks of `y`.
            unsafe { run_vectorized(self.lanes, &task) }
        });
        Ok(())
    }
}

/// Adds to `at` each operand's element offset at the start of run `r`, the
/// runs counted row-major over the `outer` extents (every axis but the last).
#[inline]
pub(in crate::runtime) fn run_offsets(
    outer: &[usize],
    strides: &[Vec<usize>],
    r: usize,
    at: &mut [usize],
) {
    let mut rest = r;
    for (axis, &e) in outer.iter().enumerate().rev() {
        let i = rest % e;
        rest /= e;
        for (k, s) in strides.iter().enumerate() {
            at[k] += i * s[axis];
        }
    }
}

/// Joins a short run (a channel block, or the few channels of an NHWC image)
/// with the axis above it when every operand either continues along that axis
/// or repeats its run there: a per-channel scale then reads its values
/// periodically over runs of a whole plane instead of in runs of a few
/// elements, each of which would pay a block's dispatch. Returns the extents,
/// strides and how each operand is read.
fn periodic_runs(
    mut extents: Vec<usize>,
    mut strides: Vec<Vec<usize>>,
) -> (Vec<usize>, Vec<Vec<usize>>, Vec<Read>) {
    let n = extents.len();
    let run = extents[n - 1];
    let joins = n >= 2
        && run < BLOCK
        && strides
            .iter()
            .all(|s| s[n - 2] == 0 || (s[n - 2] == run && s[n - 1] == 1));
    let mut reads: Vec<Read> = strides
        .iter()
        .map(|s| {
            if s[n - 1] == 0 {
                Read::Repeat
            } else {
                Read::Walk
            }
        })
        .collect();
    if joins {
        extents[n - 2] *= run;
        extents.pop();
        for (s, r) in strides.iter_mut().zip(&mut reads) {
            if s[n - 2] == 0 && s[n - 1] == 1 {
                *r = Read::Periodic(run);
            }
            s[n - 2] = s[n - 1];
            s.pop();
        }
    }
    (extents, strides, reads)
}

/// Drops the axes of extent 1 and merges each axis into the next where every
/// buffer (the output, row-major, and each operand) walks them as one.
pub(in crate::runtime) fn merge_axes(
    out: &[usize],
    strides: Vec<Vec<usize>>,
) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut extents: Vec<usize> = vec![];
    let mut merged: Vec<Vec<usize>> = vec![vec![]; strides.len()];
    for a in 0..out.len() {
        if out[a] == 1 {
            continue;
        }
        let joins = !extents.is_empty()
            && strides
                .iter()
                .zip(&merged)
                .all(|(s, m)| *m.last().expect("an axis was kept") == s[a] * out[a]);
        if joins {
            *extents.last_mut().expect("an axis was kept") *= out[a];
            for (s, m) in strides.iter().zip(&mut merged) {
                *m.last_mut().expect("an axis was kept") = s[a];
            }
        } else {
            extents.push(out[a]);
            for (s, m) in strides.iter().zip(&mut merged) {
                m.push(s[a]);
            }
        }
    }
    if extents.is_empty() {
        extents.push(1);
        merged.iter_mut().for_each(|m| m.push(0));
    }
    (extents, merged)
}

/// A range of blocks, written through `y` (the whole output).
struct Blocks<'a> {
    chain: &'a Elementwise,
    operands: &'a [&'a [f32]],
    y: *mut f32,
    blocks: std::ops::Range<usize>,
    blocks_per_run: usize,
    /// Elements before the first block boundary of each run (the first
    /// block of a run is this much shorter).
    skew: usize,
}

/// Where an op reads one argument within a block: vector `i` is at
/// `at + (i & step)`, so `step` all ones walks consecutive floats (a register,
/// an operand's run) and 0 rereads one vector of a repeated value.
#[derive(Clone, Copy)]
struct Source {
    at: *const f32,
    step: usize,
}

/// `map` of the arithmetic op `$b` over two sources, each result `$v` then
/// `$finish`ed; each arm knows its op, so `apply` is resolved out of the loop.
/// Expanded where `V` and `map` are in scope.
macro_rules! map_binary {
    ($len:expr, $dest:expr, $b:expr, $p:expr, $q:expr, |$v:ident| $finish:expr) => {
        match $b {
            b @ BinaryOp::Add => map_binary!(@op b, $len, $dest, $p, $q, |$v| $finish),
            b @ BinaryOp::Sub => map_binary!(@op b, $len, $dest, $p, $q, |$v| $finish),
            b @ BinaryOp::Mul => map_binary!(@op b, $len, $dest, $p, $q, |$v| $finish),
            b @ BinaryOp::Div => map_binary!(@op b, $len, $dest, $p, $q, |$v| $finish),
            b @ BinaryOp::Max => map_binary!(@op b, $len, $dest, $p, $q, |$v| $finish),
            b @ BinaryOp::Min => map_binary!(@op b, $len, $dest, $p, $q, |$v| $finish),
            b @ BinaryOp::PRelu => map_binary!(@op b, $len, $dest, $p, $q, |$v| $finish),
            b => map_binary!(@op b, $len, $dest, $p, $q, |$v| $finish),
        }
    };
    (@op $b:ident, $len:expr, $dest:expr, $p:expr, $q:expr, |$v:ident| $finish:expr) => {
        map::<Pair<V>>(
            $len,
            $dest,
            $p,
            $q,
            #[inline(always)]
            |x, y| {
                let $v = $b
                    .apply(Lanewise(x), Lanewise(y))
                    .expect("only arithmetic ops are compiled")
                    .0;
                $finish
            },
        )
    };
}

impl VectorKernel for Blocks<'_> {
    #[inline(always)]
    unsafe fn run<V: Vector>(&self) {
        let chain = self.chain;
        let run = *chain.extents.last().expect("at least one axis");
        let outer = &chain.extents[..chain.extents.len() - 1];
        // The registers and tiles are left uninitialized (clearing them took
        // as long as a tenth of a Relu's pass): each is read only where it
        // was written before, by the previous op or when its tile was filled.
        let mut registers = [[MaybeUninit::<f32>::uninit(); BLOCK]; 2];
        let mut repeated = [[0f32; 2 * MAX_LANES]; MAX_OPERANDS];
        // A periodic operand's values laid out past a block's end, so any block
        // reads them contiguously from its phase; refilled when its run moves.
        let mut tiles = [[MaybeUninit::<f32>::uninit(); 2 * BLOCK]; MAX_OPERANDS];
        let mut tiled_from = [usize::MAX; MAX_OPERANDS];
        for block in self.blocks.clone() {
            let (r, part) = (block / self.blocks_per_run, block % self.blocks_per_run);
            let start = (part * BLOCK).saturating_sub(self.skew);
            let len = ((part + 1) * BLOCK - self.skew).min(run) - start;
            // Each operand's first element of this block.
            let mut at = [0usize; MAX_OPERANDS];
            run_offsets(outer, &chain.strides, r, &mut at);
            let mut operands = [Source {
                at: std::ptr::null(),
                step: 0,
            }; MAX_OPERANDS];
            for (k, o) in self.operands.iter().enumerate() {
                operands[k] = match chain.reads[k] {
                    Read::Repeat => {
                        repeated[k] = [o[at[k]]; 2 * MAX_LANES];
                        Source {
                            at: repeated[k].as_ptr(),
                            step: 0,
                        }
                    }
                    Read::Walk => Source {
                        at: o.as_ptr().add(at[k] + start),
                        step: usize::MAX,
                    },
                    Read::Periodic(p) => {
                        if tiled_from[k] != at[k] {
                            fill_periodic(&o[at[k]..at[k] + p], &mut tiles[k][..BLOCK + p]);
                            tiled_from[k] = at[k];
                        }
                        Source {
                            at: tiles[k].as_ptr().add(start % p).cast(),
                            step: usize::MAX,
                        }
                    }
                };
            }
            if let Some(table) = &chain.table {
                look_up::<Pair<V>>(len, self.y.add(r * run + start), operands[0], table);
                continue;
            }
            let last = chain.passes.len() - 1;
            for (n, pass) in chain.passes.iter().enumerate() {
                let [into, from] = registers
                    .get_disjoint_mut([n % 2, (n + 1) % 2])
                    .expect("two registers");
                let source = |arg: Arg| match arg {
                    Arg::Prev => Source {
                        at: from.as_ptr().cast(),
                        step: usize::MAX,
                    },
                    Arg::Operand(k) => operands[k],
                    Arg::Packed(_) => unreachable!("`new` reads constants as operands"),
                };
                let dest = match n == last {
                    true => self.y.add(r * run + start),
                    false => into.as_mut_ptr().cast(),
                };
                let f = match *pass {
                    Pass::Op(f) => f,
                    Pass::Finished(b, p, q, finish) => {
                        let (p, q) = (source(p), source(q));
                        with_finish!(finish, |f| map_binary!(len, dest, b, p, q, |v| f.apply(v)));
                        continue;
                    }
                    Pass::Affine(a, b, c, finish) => {
                        let sources = [source(a), source(b), source(c)];
                        with_finish!(finish, |f| affine::<Pair<V>>(len, dest, sources, f));
                        continue;
                    }
                };
                match f {
                    Func::Unary(u, a) => {
                        let a = source(a);
                        // Each arm knows its op, so `apply` is resolved out of the loop.
                        macro_rules! go {
                            ($u:ident) => {
                                map::<Pair<V>>(
                                    len,
                                    dest,
                                    a,
                                    a,
                                    #[inline(always)]
                                    |x, _| $u.apply(Lanewise(x)).0,
                                )
                            };
                        }
                        match u {
                            u @ UnaryOp::Relu => go!(u),
                            u @ UnaryOp::LeakyRelu { .. } => go!(u),
                            u @ UnaryOp::Clip { .. } => go!(u),
                            u @ UnaryOp::Sigmoid => go!(u),
                            u @ UnaryOp::HardSigmoid { .. } => go!(u),
                            u @ UnaryOp::HardSwish => go!(u),
                            u @ UnaryOp::Tanh => go!(u),
                            u @ UnaryOp::Erf => go!(u),
                            u @ UnaryOp::Gelu { .. } => go!(u),
                            u @ UnaryOp::Exp => go!(u),
                            u @ UnaryOp::Neg => go!(u),
                            u @ UnaryOp::Abs => go!(u),
                            u @ UnaryOp::Elu { .. } => go!(u),
                            u @ UnaryOp::Selu { .. } => go!(u),
                            u @ UnaryOp::Celu { .. } => go!(u),
                            u @ UnaryOp::Reciprocal => go!(u),
                            u @ UnaryOp::Round => go!(u),
                            u @ UnaryOp::QuantizeDequantize { .. } => go!(u),
                            // Lane by lane or rare: one loop for all.
                            u => go!(u),
                        }
                    }
                    Func::Binary(b, p, q) => {
                        map_binary!(len, dest, b, source(p), source(q), |v| v)
                    }
                    Func::QuantizedAdd(add, p, q) => map::<Pair<V>>(
                        len,
                        dest,
                        source(p),
                        source(q),
                        #[inline(always)]
                        |x, y| add.apply(x, y),
                    ),
                    Func::QuantizedMul(mul, p, q) => map::<Pair<V>>(
                        len,
                        dest,
                        source(p),
                        source(q),
                        #[inline(always)]
                        |x, y| mul.apply(x, y),
                    ),
                    Func::QuantizedHardSwish(hard_swish, a) => {
                        let a = source(a);
                        map::<Pair<V>>(
                            len,
                            dest,
                            a,
                            a,
                            #[inline(always)]
                            |x, _| hard_swish.apply(x),
                        )
                    }
                }
            }
        }
    }
}

/// Fills `tile` with `values` over and over, in doubling copies: a run of a
/// channel-blocked plane refills it, and an element at a time that cost as
/// much as the chain's own pass on a 7x7 plane.
#[inline(always)]
fn fill_periodic(values: &[f32], tile: &mut [MaybeUninit<f32>]) {
    let first = values.len().min(tile.len());
    for (t, &v) in tile.iter_mut().zip(&values[..first]) {
        t.write(v);
    }
    let mut filled = first;
    while filled < tile.len() {
        let n = filled.min(tile.len() - filled);
        tile.copy_within(..n, filled);
        filled += n;
    }
}

/// `f` over the `len` elements of two sources into `dest`, a vector at a
/// time; a partial last vector is staged so nothing past `len` is touched.
#[inline(always)]
unsafe fn map<V: Vector>(len: usize, dest: *mut f32, p: Source, q: Source, f: impl Fn(V, V) -> V) {
    let full = len - len % V::LANES;
    let mut i = 0;
    while i < full {
        let v = f(V::load(p.at.add(i & p.step)), V::load(q.at.add(i & q.step)));
        v.store(dest.add(i));
        i += V::LANES;
    }
    if i < len {
        let k = len - i;
        let v = f(load_tail::<V>(p, i, k), load_tail::<V>(q, i, k));
        store_part(v, dest.add(i), k);
    }
}

/// The table's result at each of the `len` elements of `x` into `dest`,
/// as `map`: the element's index on the grid, the entry after the grid's
/// for NaN (the clamp passes NaN, the `min` after it returns its second
/// operand for it).
#[inline(always)]
unsafe fn look_up<V: Vector>(len: usize, dest: *mut f32, x: Source, table: &Table) {
    let grid = table.grid;
    let last = grid.max - grid.min;
    let (inverse_step, zero, at_nan) = (
        V::splat(1.0 / grid.scale),
        V::splat(grid.zero_point - grid.min),
        V::splat(last + 1.0),
    );
    let last = V::splat(last);
    let results = V::hold(&table.results);
    map::<V>(
        len,
        dest,
        x,
        x,
        #[inline(always)]
        |v, _| {
            let index = V::add(V::round(V::mul(v, inverse_step)), zero);
            let index = V::min(V::clamp(index, V::splat(0.0), last), at_nan);
            V::look_up_held(results, index)
        },
    )
}

/// `a * b + c`, finished by `f`, over the `len` elements of the three
/// sources into `dest`, as `map`.
#[inline(always)]
unsafe fn affine<V: Vector>(len: usize, dest: *mut f32, [a, b, c]: [Source; 3], f: impl Finisher) {
    let full = len - len % V::LANES;
    let mut i = 0;
    while i < full {
        let (x, y, z) = (
            V::load(a.at.add(i & a.step)),
            V::load(b.at.add(i & b.step)),
            V::load(c.at.add(i & c.step)),
        );
        f.apply(V::add(V::mul(x, y), z)).store(dest.add(i));
        i += V::LANES;
    }
    if i < len {
        let k = len - i;
        let (x, y, z) = (
            load_tail::<V>(a, i, k),
            load_tail::<V>(b, i, k),
            load_tail::<V>(c, i, k),
        );
        store_part(f.apply(V::add(V::mul(x, y), z)), dest.add(i), k);
    }
}

/// The last `k` (fewer than a vector) elements of `s` from `i` on.
#[inline(always)]
unsafe fn load_tail<V: Vector>(s: Source, i: usize, k: usize) -> V {
    match s.step {
        0 => V::load(s.at),
        _ => load_part(s.at.add(i & s.step), k, 0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, Graph, Op, Tensor, ValueRef, ValueType};
    use crate::layout::target::TargetFamily;
    use crate::runtime::test_support::{
        assert_close, compile_on, compiled_per_isa, planned_for, Rng, FAMILIES,
    };

    /// `got` against the f64 definition `e`: within 2e-6 relative (1e-6 of
    /// it for values below 1), the same infinity (or an overflow to it), NaN
    /// for NaN.
    fn close(got: f32, e: f64) -> bool {
        let got = got as f64;
        if e.is_nan() {
            got.is_nan()
        } else if e.is_infinite() || e.abs() > f32::MAX as f64 {
            got.is_infinite() && got.signum() == e.signum()
        } else {
            (got - e).abs() <= 2e-6 * e.abs().max(1.0)
        }
    }

    /// A chain of one operand on a grid of bytes, looked up by the byte,
    /// gives what its passes give, bit for bit, NaN included: a swish of
    /// signed bytes (its product rounded in float, and computed from the
    /// integers as the compiler makes it, which gives no NaN for NaN), a
    /// TFLite hard-swish of them (computed lane by lane) and a sigmoid of
    /// unsigned ones, on every instruction set, at lengths with
    /// tails and over several blocks, the results packed as bytes (each
    /// chain ends on a grid). A chain of two operands is not a table.
    #[test]
    fn chains_of_one_quantized_operand_look_up_what_their_passes_compute() {
        let qdq = |scale, zero_point, min, max| UnaryOp::QuantizeDequantize {
            scale,
            zero_point,
            min,
            max,
        };
        let signed = (0.047, -9.0, -128.0, 127.0);
        let unsigned = (0.0213, 131.0, 0.0, 255.0);
        let swish = vec![
            Func::Unary(UnaryOp::Sigmoid, Arg::Operand(0)),
            Func::Unary(qdq(1.0 / 256.0, -128.0, -128.0, 127.0), Arg::Prev),
            Func::Binary(BinaryOp::Mul, Arg::Operand(0), Arg::Prev),
            Func::Unary(qdq(0.031, -3.0, -128.0, 127.0), Arg::Prev),
        ];
        let sigmoid = vec![
            Func::Unary(UnaryOp::Sigmoid, Arg::Operand(0)),
            Func::Unary(qdq(1.0 / 256.0, 0.0, 0.0, 255.0), Arg::Prev),
        ];
        let grid = |(scale, zero_point, min, max)| Grid {
            scale,
            zero_point,
            min,
            max,
        };
        let integer_product = QuantizedMul::new(
            grid(signed),
            grid((1.0 / 256.0, -128.0, -128.0, 127.0)),
            grid((0.031, -3.0, -128.0, 127.0)),
        );
        let integer_swish = vec![
            swish[0],
            swish[1],
            Func::QuantizedMul(integer_product.unwrap(), Arg::Operand(0), Arg::Prev),
        ];
        let hard_swish = QuantizedHardSwish::new(grid(signed), grid((0.02, -100.0, -128.0, 127.0)));
        let hard_swish = vec![Func::QuantizedHardSwish(
            hard_swish.unwrap(),
            Arg::Operand(0),
        )];
        let mut rng = Rng(41);
        let isas = [Isa::Avx512, Isa::Avx2, Isa::Portable]
            .into_iter()
            .filter(|i| i.available());
        for isa in isas {
            let chains = [
                (&swish, signed),
                (&integer_swish, signed),
                (&hard_swish, signed),
                (&sigmoid, unsigned),
            ];
            for (funcs, on) in chains {
                let (scale, zero_point, min, _) = on;
                for len in [1, 13, 300, 1000] {
                    let mut x: Vec<f32> = (0..len)
                        .map(|_| (min + rng.below(256) as f32 - zero_point) * scale)
                        .collect();
                    x[len / 2] = f32::NAN;
                    let chain = || {
                        let k = Elementwise::new(
                            funcs.clone(),
                            &[len],
                            vec![vec![1]],
                            vec![len],
                            vec![],
                            isa,
                        );
                        k.expect("an elementwise chain")
                    };
                    let mut table = chain();
                    assert!(table.tabulate(grid(on), isa), "{isa:?}: a table");
                    let packed = table
                        .table
                        .as_ref()
                        .is_some_and(|t| t.results.packs_bytes());
                    assert!(packed, "{isa:?}: results on a grid are packed as bytes");
                    let (mut want, mut got) = (vec![0f32; len], vec![0f32; len]);
                    chain().run(&[&x], &mut want).unwrap();
                    table.run(&[&x], &mut got).unwrap();
                    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
                        assert!(
                            w.to_bits() == g.to_bits() || (w.is_nan() && g.is_nan()),
                            "{isa:?} len {len}: f({}) = {g}, passes give {w}",
                            x[i]
                        );
                    }
                }
            }
            let product = vec![Func::Binary(
                BinaryOp::Mul,
                Arg::Operand(0),
                Arg::Operand(1),
            )];
            let mut two = Elementwise::new(
                product,
                &[8],
                vec![vec![1], vec![1]],
                vec![8, 8],
                vec![],
                isa,
            )
            .unwrap();
            assert!(!two.tabulate(grid(signed), isa), "{isa:?}: two operands");
        }
    }

    /// Every op on its own, on every instruction set, at lengths that leave
    /// tails of 1 to 15 lanes and span several blocks, over values where the
    /// functions bend, saturate and overflow, subnormals, NaN and the
    /// infinities; the
    /// second operand of a binary op either a second buffer or one repeated
    /// value.
    #[test]
    fn every_op_on_every_isa_matches_its_scalar_definition() {
        let mut x: Vec<f32> = (0..600).map(|i| (i as f32 - 300.0) * 0.05).collect();
        x.extend([
            90.0,
            -90.0,
            88.5,
            -87.5,
            1e-6,
            -1e-6,
            0.0,
            -0.0,
            f32::MIN_POSITIVE / 4.0,
            -f32::MIN_POSITIVE / 4.0,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            2.0,
            -2.0,
            0.5,
        ]);
        // Every value of x meets a small and a large one, of both signs.
        let y: Vec<f32> = x.iter().rev().map(|v| v * 0.3).collect();
        let isas = [Isa::Avx512, Isa::Avx2, Isa::Portable]
            .into_iter()
            .filter(|i| i.available());
        for isa in isas {
            for len in [1, 7, 17, 33, 300, x.len()] {
                // The tail of x, where the special values are.
                let (x, y) = (&x[x.len() - len..], &y[y.len() - len..]);
                let run = |f: Func, operands: &[&[f32]], strides: Vec<Vec<usize>>| {
                    let lens = operands.iter().map(|o| o.len()).collect();
                    let k = Elementwise::new(vec![f], &[len], strides, lens, vec![], isa).unwrap();
                    let mut out = vec![0f32; len];
                    k.run(operands, &mut out).unwrap();
                    out
                };
                for u in UnaryOp::EVERY {
                    let out = run(Func::Unary(u, Arg::Operand(0)), &[x], vec![vec![1]]);
                    for (&v, &got) in x.iter().zip(&out) {
                        let e = u.apply(v as f64);
                        assert!(
                            close(got, e),
                            "{u:?} {isa:?} len {len}: f({v}) = {got}, expected {e}"
                        );
                    }
                }
                for b in BinaryOp::ARITHMETIC {
                    let f = Func::Binary(b, Arg::Operand(0), Arg::Operand(1));
                    let expect = |p: f32, q: f32| b.apply(p as f64, q as f64).unwrap();
                    let out = run(f, &[x, y], vec![vec![1], vec![1]]);
                    for ((&p, &q), &got) in x.iter().zip(y).zip(&out) {
                        let e = expect(p, q);
                        assert!(
                            close(got, e),
                            "{b:?} {isa:?} len {len}: f({p}, {q}) = {got}, expected {e}"
                        );
                    }
                    for q in [1.5, -0.25, 0.0, f32::NAN] {
                        let out = run(f, &[x, &[q]], vec![vec![1], vec![0]]);
                        for (&p, &got) in x.iter().zip(&out) {
                            let e = expect(p, q);
                            assert!(
                                close(got, e),
                                "{b:?} {isa:?} len {len}: f({p}, {q}) = {got}, expected {e}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// A product and the sum reading it, and an arithmetic op and the Relu
    /// or Clip after it, run as one pass each; a sum of the product with
    /// itself or a clamp of anything else does not join. The joined passes
    /// equal the ops one after the other on every instruction set, at
    /// lengths with tails, NaN and the infinities among the inputs.
    #[test]
    fn joined_passes_match_the_ops_one_after_the_other() {
        let (op, prev) = (Arg::Operand, Arg::Prev);
        let clip = UnaryOp::Clip {
            min: -0.5,
            max: 0.5,
        };
        let bn_relu = vec![
            Func::Binary(BinaryOp::Mul, op(0), op(1)),
            Func::Binary(BinaryOp::Add, op(2), prev),
            Func::Unary(UnaryOp::Relu, prev),
        ];
        let sub_clip = vec![
            Func::Binary(BinaryOp::Sub, op(0), op(1)),
            Func::Unary(clip, prev),
            Func::Binary(BinaryOp::Mul, prev, op(2)),
        ];
        let unjoined = vec![
            Func::Binary(BinaryOp::Mul, op(0), op(1)),
            Func::Binary(BinaryOp::Add, prev, prev),
            Func::Unary(UnaryOp::Tanh, prev),
            Func::Unary(UnaryOp::Relu, prev),
        ];
        // A QDQ model's hard swish and rescaling: each op rounded onto a grid.
        let grid = UnaryOp::QuantizeDequantize {
            scale: 0.0235,
            zero_point: 3.0,
            min: 0.0,
            max: 255.0,
        };
        let rounded = vec![
            Func::Binary(BinaryOp::Add, op(0), op(1)),
            Func::Unary(grid, prev),
            Func::Binary(BinaryOp::Mul, prev, op(2)),
            Func::Unary(grid, prev),
            Func::Binary(BinaryOp::Mul, prev, op(1)),
            Func::Binary(BinaryOp::Add, prev, op(2)),
            Func::Unary(grid, prev),
        ];
        assert_eq!(passes(&bn_relu).len(), 1);
        assert_eq!(passes(&sub_clip).len(), 2);
        assert_eq!(passes(&unjoined).len(), 4);
        assert_eq!(passes(&rounded).len(), 3);
        fn fold<T: crate::core::scalar::Scalar>(fs: &[Func], x: [T; 3]) -> T {
            fs.iter().fold(x[0].clone(), |v, f| {
                let at = |a: Arg| match a {
                    Arg::Operand(k) => x[k].clone(),
                    _ => v.clone(),
                };
                match *f {
                    Func::Unary(u, a) => u.apply(at(a)),
                    Func::Binary(b, p, q) => b.apply(at(p), at(q)).unwrap(),
                    _ => unreachable!("no quantized ops here"),
                }
            })
        }
        let mut rng = Rng(41);
        for len in [1, 15, 16, 17, 300, 531] {
            let mut x: Vec<Vec<f32>> = (0..3).map(|_| rng.f32s(len)).collect();
            for (k, special) in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY]
                .iter()
                .enumerate()
            {
                x[k][len - 1] = *special;
            }
            for fs in [&bn_relu, &sub_clip, &unjoined, &rounded] {
                for isa in Isa::ALL.into_iter().filter(|i| i.available()) {
                    let strides = vec![vec![1]; 3];
                    let k =
                        Elementwise::new(fs.clone(), &[len], strides, vec![len; 3], vec![], isa)
                            .unwrap();
                    let mut y = vec![0f32; len];
                    k.run(&[&x[0], &x[1], &x[2]], &mut y).unwrap();
                    for (i, &got) in y.iter().enumerate() {
                        // A rounding onto a grid is exact in f32 (one step
                        // apart from f64's at ties); the rest within `close`.
                        let (e, ok) = match fs == &rounded {
                            true => {
                                let e = fold(fs, [0, 1, 2].map(|k| x[k][i]));
                                (
                                    e as f64,
                                    got.to_bits() == e.to_bits() || got.is_nan() && e.is_nan(),
                                )
                            }
                            false => {
                                let e = fold(fs, [0, 1, 2].map(|k| x[k][i] as f64));
                                (e, close(got, e))
                            }
                        };
                        assert!(
                            ok,
                            "{fs:?} {isa:?} len {len}: element {i} = {got}, expected {e}"
                        );
                    }
                }
            }
        }
    }

    /// A chain writes every element of an output wherever it starts in a
    /// cache line (its blocks then start at the line's boundary): at each
    /// offset into a larger buffer, for one run of several blocks, for runs
    /// of a multiple of a line and for runs of another length (a per-row
    /// operand keeps the rows apart), and nothing outside the output.
    #[test]
    fn outputs_at_every_offset_in_a_cache_line_are_written_exactly() {
        let n = 1200;
        let x: Vec<f32> = (0..n).map(|i| (i as f32 - 600.0) * 0.01).collect();
        let funcs = vec![
            Func::Unary(UnaryOp::Tanh, Arg::Operand(0)),
            Func::Binary(BinaryOp::Add, Arg::Prev, Arg::Operand(1)),
        ];
        for isa in Isa::ALL.into_iter().filter(|i| i.available()) {
            for (rows, run) in [(1, n), (3, n / 3), (n / 16, 16), (40, 30)] {
                let bias: Vec<f32> = (0..rows).map(|r| r as f32 * 0.5).collect();
                let strides = vec![vec![run, 1], vec![1, 0]];
                let lens = vec![n, rows];
                let k = Elementwise::new(funcs.clone(), &[rows, run], strides, lens, vec![], isa)
                    .unwrap();
                for offset in 0..16 {
                    let mut buffer = vec![-7f32; n + 32];
                    k.run(&[&x, &bias], &mut buffer[offset..offset + n])
                        .unwrap();
                    let mut outside = buffer[..offset].iter().chain(&buffer[offset + n..]);
                    assert!(outside.all(|&v| v == -7.0), "written outside the output");
                    for (i, (&v, &got)) in x.iter().zip(&buffer[offset..]).enumerate() {
                        let e = UnaryOp::Tanh.apply(v as f64) + bias[i / run] as f64;
                        assert!(
                            close(got, e),
                            "{isa:?} {rows}x{run} offset {offset}: element {i} = {got}, expected {e}"
                        );
                    }
                }
            }
        }
    }

    /// Compiles `compiled` (`g` or a plan of it), runs it and compares it
    /// with the reference executor on `g` (`assert_close`). Returns the
    /// compiled steps.
    fn check(g: &Graph, compiled: &Graph, inputs: &[Tensor]) -> Vec<String> {
        let expected = crate::reference::run(g, inputs).unwrap()[0].to_f32();
        let m = compile_on(2, compiled);
        let got = m.run(inputs).unwrap()[0].to_f32();
        assert_close(&got, &expected, &g.name);
        m.describe()
    }

    /// Adds `op` reading `ins` and returns its output.
    fn add(g: &mut Graph, op: Op, ins: &[ValueRef]) -> ValueRef {
        let name = format!("n{}", g.node_count());
        ValueRef::new(g.add_node(op, &name, ins, &[], vec![]).unwrap(), 0)
    }

    /// A 3x3 or 1x1 window of stride 1, padded to keep the extents.
    fn same_window(k: usize) -> crate::ops::Window {
        crate::ops::Window {
            kernel: vec![k, k],
            strides: vec![1, 1],
            dilations: vec![1, 1],
            pads: vec![k / 2; 4],
        }
    }

    /// `v` (NCHW) through a 1x1 convolution of random weights keeping its channels.
    fn pointwise_conv(g: &mut Graph, v: ValueRef, rng: &mut Rng) -> ValueRef {
        let c = g.value_type(v).shape[1];
        let weights = Tensor::from_f32(vec![c, c, 1, 1], rng.f32s(c * c));
        let weights = g.add_constant(&format!("w{}", g.node_count()), weights, vec![]);
        let op = Op::Conv(crate::ops::Conv {
            window: same_window(1),
            group: 1,
        });
        add(g, op, &[v, weights])
    }

    /// A graph with inputs x and r of [1, c, h, w], x through a 1x1 convolution
    /// and a 3x3 pool of `kind` (so that the planner may block what follows):
    /// the graph, r and the pool's output.
    fn conv_then_pool(
        name: &str,
        (c, h, w): (usize, usize, usize),
        kind: crate::graph::PoolKind,
        rng: &mut Rng,
    ) -> (Graph, ValueRef, ValueRef) {
        let mut g = Graph::new(name);
        let ty = ValueType::new(DType::F32, vec![1, c, h, w]);
        let x = g.add_input("x", ty.clone(), vec![]);
        let r = g.add_input("r", ty, vec![]);
        let v = pointwise_conv(&mut g, x, rng);
        let pool = Op::Pool(crate::ops::Pool {
            kind,
            window: same_window(3),
            ceil_mode: false,
            count_include_pad: false,
        });
        let v = add(&mut g, pool, &[v]);
        (g, r, v)
    }

    /// Chains of one to five ops on row-major tensors of rank 1 to 4, each
    /// binary op reading the chain on either side and, on the other, a
    /// constant or an input that broadcasts from the right (a scalar, a
    /// suffix of the shape with some extents 1, or the whole shape): one
    /// native step, equal to the reference.
    #[test]
    fn random_chains_with_broadcast_operands_match_the_reference_executor() {
        let unary = [
            UnaryOp::Tanh,
            UnaryOp::Sigmoid,
            UnaryOp::Relu,
            UnaryOp::Neg,
            UnaryOp::Erf,
        ];
        // Pow would overflow; its accuracy is checked above.
        let binary: Vec<BinaryOp> = BinaryOp::ARITHMETIC
            .into_iter()
            .filter(|&b| b != BinaryOp::Pow)
            .collect();
        let mut rng = Rng(31);
        for case in 0..60 {
            let extents = [1, 2, 3, 5, 7, 16, 17, 33];
            let rank = rng.range(1, 4);
            let shape: Vec<usize> = (0..rank)
                .map(|_| extents[rng.below(extents.len())])
                .collect();
            let numel = |s: &[usize]| s.iter().product::<usize>();
            let mut g = Graph::new("chain");
            let ty = ValueType::new(DType::F32, shape.clone());
            let mut inputs = vec![Tensor::from_f32(shape.clone(), rng.f32s(numel(&shape)))];
            let mut v = g.add_input("x", ty, vec![]);
            for _ in 0..rng.range(1, 5) {
                if rng.below(3) == 0 {
                    let u = unary[rng.below(unary.len())];
                    v = add(&mut g, Op::Unary(u), &[v]);
                    continue;
                }
                let b = binary[rng.below(binary.len())];
                let operand_shape: Vec<usize> = match rng.below(3) {
                    0 => vec![1; rng.below(2)],
                    1 => shape[rng.below(rank)..]
                        .iter()
                        .map(|&e| if rng.below(2) == 0 { 1 } else { e })
                        .collect(),
                    _ => shape.clone(),
                };
                // Divisors in [0.5, 1.5], slopes and the rest in [-1, 1].
                let data = rng
                    .f32s(numel(&operand_shape))
                    .into_iter()
                    .map(|r| if b == BinaryOp::Div { 1.0 + r / 2.0 } else { r })
                    .collect();
                let data = Tensor::from_f32(operand_shape.clone(), data);
                let operand = if rng.below(2) == 0 {
                    g.add_constant(&format!("c{}", inputs.len()), data, vec![])
                } else {
                    let ty = ValueType::new(DType::F32, operand_shape.clone());
                    let name = format!("in{}", inputs.len());
                    inputs.push(data);
                    g.add_input(&name, ty, vec![])
                };
                // Only the chain may be a divisor or a PRelu's data (so they stay finite).
                let chain_first = matches!(b, BinaryOp::Div | BinaryOp::PRelu) || rng.below(2) == 0;
                let ins = if chain_first {
                    [v, operand]
                } else {
                    [operand, v]
                };
                v = add(&mut g, Op::Binary(b), &ins);
            }
            g.set_outputs(vec![v]);
            let steps = check(&g, &g, &inputs);
            assert_eq!(steps.len(), 1, "case {case} {shape:?}: {steps:?}");
            assert!(
                steps[0].ends_with("] native") && !steps[0].contains("(tir)"),
                "case {case}: {steps:?}"
            );
        }
    }

    /// An image normalization as converters write it (NHWC, per-channel
    /// constants over the innermost few channels): the short run is read
    /// periodically across block boundaries at every phase, in one native
    /// step equal to the reference. Channel counts that are not a power of two
    /// and one longer than a vector cover both tile paths.
    #[test]
    fn per_channel_operands_of_short_innermost_runs_match_the_reference() {
        let mut rng = Rng(33);
        for channels in [3, 5, 16, 24] {
            let shape = vec![1, 37, 29, channels];
            let mut g = Graph::new("normalize");
            let numel = shape.iter().product();
            let inputs = vec![Tensor::from_f32(shape.clone(), rng.f32s(numel))];
            let mut v = g.add_input("x", ValueType::new(DType::F32, shape.clone()), vec![]);
            for (k, b) in [BinaryOp::Mul, BinaryOp::Add, BinaryOp::Mul]
                .into_iter()
                .enumerate()
            {
                let per_channel = Tensor::from_f32(vec![channels], rng.f32s(channels));
                let c = g.add_constant(&format!("c{k}"), per_channel, vec![]);
                v = add(&mut g, Op::Binary(b), &[v, c]);
            }
            g.set_outputs(vec![v]);
            let steps = check(&g, &g, &inputs);
            assert_eq!(steps.len(), 1, "{channels} channels: {steps:?}");
            assert!(steps[0].ends_with("] native"), "{steps:?}");
        }
    }

    /// A chain between two convolutions (and after a pool), in the blocked
    /// layouts the global plan picks, reading per-channel and scalar constants
    /// and a second input of the whole shape: native steps, equal to the
    /// reference.
    #[test]
    fn chains_in_blocked_layouts_match_the_reference_executor() {
        use crate::graph::PoolKind;
        let mut rng = Rng(32);
        let (c, h, w) = (32, 6, 9);
        let (mut g, r, mut v) = conv_then_pool("blocked", (c, h, w), PoolKind::Max, &mut rng);
        let per_channel = |rng: &mut Rng| Tensor::from_f32(vec![1, c, 1, 1], rng.f32s(c));
        let bias = g.add_constant("bias", per_channel(&mut rng), vec![]);
        let scale = g.add_constant("scale", Tensor::from_f32(vec![], vec![0.7]), vec![]);
        let slope = g.add_constant("slope", per_channel(&mut rng), vec![]);
        v = add(&mut g, Op::Binary(BinaryOp::Add), &[v, bias]);
        v = add(&mut g, Op::Binary(BinaryOp::Mul), &[scale, v]);
        v = add(&mut g, Op::Unary(UnaryOp::Tanh), &[v]);
        v = add(&mut g, Op::Binary(BinaryOp::Sub), &[r, v]);
        v = add(&mut g, Op::Binary(BinaryOp::PRelu), &[v, slope]);
        let chain_end = v.node;
        v = pointwise_conv(&mut g, v, &mut rng);
        g.set_outputs(vec![v]);
        let inputs: Vec<Tensor> = (0..2)
            .map(|_| Tensor::from_f32(vec![1, c, h, w], rng.f32s(c * h * w)))
            .collect();
        for (family, block) in [
            (TargetFamily::Nchw, 1),
            (TargetFamily::Nchwc(16), 16),
            (TargetFamily::Nchwc(8), 8),
        ] {
            let planned = planned_for(&g, family);
            let (layout, _) = crate::fusion::output_layout(&planned, chain_end).unwrap();
            let blocked: usize = layout.factors(1).iter().product();
            assert_eq!(
                blocked, block,
                "{family}: the chain is stored in {layout:?}"
            );
            let steps = check(&g, &planned, &inputs);
            assert!(
                steps
                    .iter()
                    .all(|s| s.ends_with("] native") && !s.contains("(tir)")),
                "{family}: {steps:?}"
            );
            assert!(
                steps.iter().any(|s| s.contains("Add+Mul+Tanh+Sub+PRelu")),
                "{family}: {steps:?}"
            );
        }
    }

    /// The activations of MediaPipe-style models between a pool and a
    /// convolution, as the TFLite importer writes them (on a transposed,
    /// logical NHWC tensor; a PRelu's slope [1, 1, C], lower in rank than its
    /// data) and as ONNX does (NCHW; slope [C, 1, 1]), 20 channels so that the
    /// channel blocks pad: in every family's plan each runs as a native step,
    /// equal to the reference.
    #[test]
    fn activations_run_natively_in_every_layout() {
        use crate::graph::PoolKind;
        use crate::ops::Transpose;
        let (c, h, w) = (20, 5, 7);
        let slope = |rng: &mut Rng, shape: Vec<usize>| {
            let values = rng.f32s(c).iter().map(|v| 0.3 * v + 0.1).collect();
            Tensor::from_f32(shape, values)
        };
        let unary = [
            UnaryOp::LeakyRelu { alpha: 0.1 },
            UnaryOp::HardSwish,
            UnaryOp::HardSigmoid {
                alpha: 0.2,
                beta: 0.5,
            },
        ];
        let ops = unary.into_iter().map(Some).chain([None]);
        for (op, nhwc) in ops.flat_map(|op| [(op, true), (op, false)]) {
            let mut rng = Rng(41);
            let name = format!("{op:?} nhwc {nhwc}");
            let (mut g, _, mut v) = conv_then_pool(&name, (c, h, w), PoolKind::Max, &mut rng);
            let transpose = |perm: [usize; 4]| Op::Transpose(Transpose { perm: perm.into() });
            if nhwc {
                v = add(&mut g, transpose([0, 2, 3, 1]), &[v]);
            }
            v = match op {
                Some(u) => add(&mut g, Op::Unary(u), &[v]),
                None => {
                    let shape = if nhwc { vec![1, 1, c] } else { vec![c, 1, 1] };
                    let s = g.add_constant("slope", slope(&mut rng, shape), vec![]);
                    add(&mut g, Op::Binary(BinaryOp::PRelu), &[v, s])
                }
            };
            if nhwc {
                v = add(&mut g, transpose([0, 3, 1, 2]), &[v]);
            }
            v = pointwise_conv(&mut g, v, &mut rng);
            g.set_outputs(vec![v]);
            let inputs: Vec<Tensor> = (0..2)
                .map(|_| Tensor::from_f32(vec![1, c, h, w], rng.f32s(c * h * w)))
                .collect();
            for family in FAMILIES {
                let steps = check(&g, &planned_for(&g, family), &inputs);
                assert!(
                    steps
                        .iter()
                        .all(|s| s.ends_with("] native") && !s.contains("(tir)")),
                    "{name} {family}: {steps:?}"
                );
            }
        }
    }

    /// A batch norm in a chain (a residual add before it, a relu after),
    /// between a pool and a convolution, in the layouts the global plan picks
    /// and on every instruction set, the residual holding NaN and both
    /// infinities: one native step, its parameters held by the kernel, equal
    /// to the reference.
    #[test]
    fn batch_norms_in_chains_match_the_reference_executor() {
        use crate::graph::PoolKind;
        use crate::ops::BatchNorm;
        let mut rng = Rng(33);
        let (c, h, w) = (32, 5, 7);
        let (mut g, r, mut v) = conv_then_pool("batch norm", (c, h, w), PoolKind::Avg, &mut rng);
        v = add(&mut g, Op::Binary(BinaryOp::Add), &[v, r]);
        let mut params = vec![v];
        for (k, lo) in [0.5f32, -0.5, -0.5, 0.1].into_iter().enumerate() {
            let values = rng.f32s(c).iter().map(|x| lo + x.abs()).collect();
            let t = Tensor::from_f32(vec![c], values);
            params.push(g.add_constant(&format!("bn{k}"), t, vec![]));
        }
        v = add(&mut g, Op::BatchNorm(BatchNorm { epsilon: 1e-5 }), &params);
        v = add(&mut g, Op::Unary(UnaryOp::Relu), &[v]);
        v = pointwise_conv(&mut g, v, &mut rng);
        g.set_outputs(vec![v]);
        let mut residual = rng.f32s(c * h * w);
        for (k, special) in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY]
            .iter()
            .enumerate()
        {
            residual[k * 37] = *special;
        }
        let inputs = vec![
            Tensor::from_f32(vec![1, c, h, w], rng.f32s(c * h * w)),
            Tensor::from_f32(vec![1, c, h, w], residual),
        ];
        let expected = crate::reference::run(&g, &inputs).unwrap()[0].to_f32();
        for family in FAMILIES {
            let planned = planned_for(&g, family);
            for (isa, m) in compiled_per_isa(&planned) {
                let steps = m.describe();
                let chain = steps.iter().find(|s| s.contains("BatchNormalization"));
                assert!(
                    chain.is_some_and(|s| s.contains("Add+BatchNormalization+Relu] native")),
                    "{family} {isa}: {steps:?}"
                );
                let got = m.run(&inputs).unwrap()[0].to_f32();
                assert_close(&got, &expected, &format!("{family} {isa}"));
            }
        }
    }

    /// The chain of a blocked model on buffers laid out by the layout algebra,
    /// the channels padded (20 in blocks of 16 and of 8), channels second or
    /// last: each logical element equals the reference's.
    #[test]
    fn padded_blocked_buffers_line_up_with_their_logical_elements() {
        let mut rng = Rng(33);
        for (logical, physical) in [
            ("NCHW", "NCHW"),
            ("NCHW", "NCHW16c"),
            ("NCHW", "NCHW8c"),
            ("NHWC", "NCHW16c"),
            ("NHWC", "NHWC"),
        ] {
            let layout = Layout::parse_with(logical, physical).unwrap();
            let channel = logical.find('C').unwrap();
            let mut shape = vec![2, 5, 7];
            shape.insert(channel, 20);
            let mut per_channel = vec![1; 4];
            per_channel[channel] = 20;
            let numel = |s: &[usize]| s.iter().product::<usize>();
            let tensor =
                |s: &[usize], rng: &mut Rng| Tensor::from_f32(s.to_vec(), rng.f32s(numel(s)));
            let (x, full, bias) = (
                tensor(&shape, &mut rng),
                tensor(&shape, &mut rng),
                tensor(&per_channel, &mut rng),
            );
            let scale = Tensor::from_f32(vec![], vec![0.7]);
            // The logical graph: ((x + bias) * 0.7) then sigmoid, subtracted from full.
            let mut g = Graph::new(physical);
            let ty = ValueType::new(DType::F32, shape.clone());
            let xv = g.add_input("x", ty.clone(), vec![]);
            let fv = g.add_input("full", ty, vec![]);
            let bv = g.add_constant("bias", bias.clone(), vec![]);
            let sv = g.add_constant("scale", scale.clone(), vec![]);
            let mut v = add(&mut g, Op::Binary(BinaryOp::Add), &[xv, bv]);
            v = add(&mut g, Op::Binary(BinaryOp::Mul), &[v, sv]);
            v = add(&mut g, Op::Unary(UnaryOp::Sigmoid), &[v]);
            v = add(&mut g, Op::Binary(BinaryOp::Sub), &[fv, v]);
            g.set_outputs(vec![v]);
            let expected =
                crate::reference::run(&g, &[x.clone(), full.clone()]).unwrap()[0].to_f32();
            let scalar_layout = Layout::identity(0).unwrap();
            let operands = [
                (&x, &layout),
                (&bias, &layout),
                (&scale, &scalar_layout),
                (&full, &layout),
            ];
            let out = Stored {
                layout: &layout,
                shape: &shape,
            };
            let strides = operands
                .iter()
                .map(|(t, l)| {
                    broadcast_strides(
                        &out,
                        &Stored {
                            layout: l,
                            shape: &t.shape,
                        },
                    )
                    .unwrap()
                })
                .collect();
            let buffers: Vec<Vec<f32>> = operands
                .iter()
                .map(|(t, l)| l.to_physical(t, 0.0).unwrap().to_f32())
                .collect();
            let funcs = vec![
                Func::Binary(BinaryOp::Add, Arg::Operand(0), Arg::Operand(1)),
                Func::Binary(BinaryOp::Mul, Arg::Prev, Arg::Operand(2)),
                Func::Unary(UnaryOp::Sigmoid, Arg::Prev),
                Func::Binary(BinaryOp::Sub, Arg::Operand(3), Arg::Prev),
            ];
            let out_physical = layout.physical_shape(&shape).unwrap();
            let lens = buffers.iter().map(|b| b.len()).collect();
            let isa = [Isa::Avx512, Isa::Avx2, Isa::Portable]
                .into_iter()
                .find(|i| i.available())
                .unwrap();
            let kernel =
                Elementwise::new(funcs, &out_physical, strides, lens, vec![], isa).unwrap();
            let mut y = vec![f32::NAN; numel(&out_physical)];
            let refs: Vec<&[f32]> = buffers.iter().map(|b| b.as_slice()).collect();
            kernel.run(&refs, &mut y).unwrap();
            let y = Tensor::from_f32(out_physical, y);
            let got = layout.from_physical(&y, &shape).unwrap().to_f32();
            assert_close(&got, &expected, &format!("{logical} stored {physical}"));
        }
    }
}
