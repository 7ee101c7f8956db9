//! Elementwise ops on integer and boolean tensors, and comparisons of any
//! numbers: the masks, position ids and index arithmetic of language models
//! (a padding mask compared, negated, cast and multiplied before it reaches
//! the attention scores). Each runs one typed loop over the output, operands
//! broadcast by strides fixed when the kernel is built.
//!
//! The values are the boxed tensors of the runtime's non-f32 world (f32
//! operands of a comparison are read row-major); the semantics are the
//! reference's: integer arithmetic wraps, comparisons of NaN are false.

use super::gather::Picking;
use super::KernelError;
use crate::core::{strides, DType, Tensor, TensorData};
use crate::graph::BinaryOp;
use crate::ops::{
    ArgKind, ArgReduce, Cumulative, IntegerArith, Logical, Reduce, ReduceKind, Running, TopK,
};
use std::collections::BinaryHeap;

/// What a typed kernel computes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TypedOp {
    /// Add, Sub, Mul, Div, Min or Max of two integers of one type.
    Arith(BinaryOp),
    /// Mod, BitShift and the bitwise ops of two integers of one type.
    Integer(IntegerArith),
    /// Equal, Less, Greater, LessOrEqual or GreaterOrEqual: booleans.
    Compare(BinaryOp),
    /// And, Or, Xor or Not of booleans.
    Logical(Logical),
    /// A boolean mask picks operand 1 or 2 (integers or booleans).
    Where,
}

/// One typed elementwise op, its operands broadcast to `shape`.
#[derive(Clone, Debug)]
pub struct Typed {
    op: TypedOp,
    shape: Vec<usize>,
    /// Per operand, the element stride of each output axis (0 where broadcast).
    strides: Vec<Vec<usize>>,
    /// Per operand, its element count.
    lens: Vec<usize>,
}

/// The integer types the arithmetic runs on: every one stored a value a
/// machine word (the 4-bit types are packed bits).
fn integer(d: DType) -> bool {
    matches!(
        d,
        DType::I8
            | DType::I16
            | DType::I32
            | DType::I64
            | DType::U8
            | DType::U16
            | DType::U32
            | DType::U64
    )
}

/// The types a comparison reads.
fn comparable(d: DType) -> bool {
    integer(d) || matches!(d, DType::F32 | DType::F64 | DType::Bool)
}

/// `$body` with `$x` and `$y` bound to the two operands' vectors and `$v`
/// to the constructor of their variant, for every integer variant; `None`
/// for others.
macro_rules! each_integer {
    ($a:expr, $b:expr, |$x:ident, $y:ident, $v:ident| $body:expr) => {
        each_integer!(@ ($a, $b), $x, $y, $v, $body, I8 I16 I32 I64 U8 U16 U32 U64)
    };
    (@ $pair:expr, $x:ident, $y:ident, $v:ident, $body:expr, $($t:ident)*) => {
        match $pair {
            $((TensorData::$t($x), TensorData::$t($y)) => {
                let $v = TensorData::$t;
                Some($body)
            })*
            _ => None,
        }
    };
}

impl TypedOp {
    /// The op a node computes here, when its operand types have a typed loop.
    pub fn of_binary(b: BinaryOp, operand: DType) -> Option<TypedOp> {
        use BinaryOp::*;
        match b {
            Add | Sub | Mul | Div | Min | Max if integer(operand) => Some(TypedOp::Arith(b)),
            Equal | Less | Greater | LessOrEqual | GreaterOrEqual if comparable(operand) => {
                Some(TypedOp::Compare(b))
            }
            _ => None,
        }
    }
}

impl Typed {
    /// The kernel for `op` on operands of these types and shapes, giving `out`
    /// (row-major); none when the types have no typed loop.
    pub fn new(op: TypedOp, operands: &[(DType, &[usize])], out: &[usize]) -> Option<Typed> {
        let types: Vec<DType> = operands.iter().map(|o| o.0).collect();
        let fits = match (op, &types[..]) {
            (TypedOp::Arith(_) | TypedOp::Compare(_), [a, b]) => a == b,
            (TypedOp::Integer(_), [a, b]) => a == b && integer(*a),
            (TypedOp::Logical(Logical::Not), [DType::Bool]) => true,
            (TypedOp::Logical(_), [DType::Bool, DType::Bool]) => true,
            (TypedOp::Where, [DType::Bool, x, y]) => x == y && (integer(*x) || *x == DType::Bool),
            _ => false,
        };
        if !fits {
            return None;
        }
        let strides = (operands.iter())
            .map(|(_, shape)| broadcast(shape, out))
            .collect::<Option<Vec<_>>>()?;
        Some(Typed {
            op,
            shape: out.to_vec(),
            strides,
            lens: operands.iter().map(|o| o.1.iter().product()).collect(),
        })
    }

    /// The output of the op on `xs` (the types and shapes it was built for).
    pub fn run(&self, xs: &[&Tensor]) -> Result<Tensor, KernelError> {
        if xs.len() != self.lens.len() || xs.iter().zip(&self.lens).any(|(x, &n)| x.numel() != n) {
            return Err(KernelError::Buffers {
                kernel: "typed elementwise",
                given: xs.iter().map(|x| x.numel()).collect(),
                expected: self.lens.clone(),
            });
        }
        let data = match self.op {
            TypedOp::Arith(b) => self.arith(b, &xs[0].data, &xs[1].data)?,
            TypedOp::Integer(op) => return self.integer(op, xs[0], xs[1]),
            TypedOp::Compare(b) => self.compare(b, &xs[0].data, &xs[1].data),
            TypedOp::Logical(l) => self.logical(l, xs),
            TypedOp::Where => self.select(xs),
        };
        data.map(|d| Tensor::new(self.shape.clone(), d))
            .ok_or_else(|| {
                let types: Vec<String> = xs.iter().map(|x| x.dtype().to_string()).collect();
                KernelError::Value(format!(
                    "{:?} has no loop for operands of {types:?}",
                    self.op
                ))
            })
    }

    /// Division truncates, as in C; a zero divisor is an error naming it.
    fn arith(
        &self,
        b: BinaryOp,
        x: &TensorData,
        y: &TensorData,
    ) -> Result<Option<TensorData>, KernelError> {
        let mut by_zero = false;
        let v = each_integer!(x, y, |x, y, variant| variant(self.map2(
            x,
            y,
            |a, c| match b {
                BinaryOp::Add => a.wrapping_add(c),
                BinaryOp::Sub => a.wrapping_sub(c),
                BinaryOp::Mul => a.wrapping_mul(c),
                BinaryOp::Div if c == 0 => {
                    by_zero = true;
                    a
                }
                BinaryOp::Div => a.wrapping_div(c),
                BinaryOp::Min => a.min(c),
                _ => a.max(c),
            }
        )));
        match by_zero {
            true => Err(KernelError::Value("integer division by zero".into())),
            false => Ok(v),
        }
    }

    /// The op's own definition on each pair, exact in i128 and wrapped back
    /// to the type; a zero divisor of Mod is an error naming it.
    fn integer(&self, op: IntegerArith, x: &Tensor, y: &Tensor) -> Result<Tensor, KernelError> {
        let dtype = x.dtype();
        let bits = 8 * dtype.size_bytes() as i128;
        let (a, b) = (x.data.to_i128(), y.data.to_i128());
        let mut failed = None;
        let v = self.map2(&a, &b, |a, b| {
            op.apply_int(a, b, bits).unwrap_or_else(|e| {
                failed = Some(e);
                0
            })
        });
        if let Some(e) = failed {
            return Err(KernelError::Value(e.to_string()));
        }
        Ok(Tensor::new(
            self.shape.clone(),
            TensorData::from_i128(dtype, v),
        ))
    }

    fn compare(&self, b: BinaryOp, x: &TensorData, y: &TensorData) -> Option<TensorData> {
        let v = match (x, y) {
            (TensorData::F32(x), TensorData::F32(y)) => self.compare_as(b, x, y),
            (TensorData::F64(x), TensorData::F64(y)) => self.compare_as(b, x, y),
            (TensorData::Bool(x), TensorData::Bool(y)) => self.compare_as(b, x, y),
            _ => each_integer!(x, y, |x, y, _v| self.compare_as(b, x, y))?,
        };
        Some(TensorData::Bool(v))
    }

    /// `b` on each pair by `BinaryOp::compare`, the op matched once rather
    /// than per element (a jump per element took a float Greater to 2.5 ns
    /// an element): each arm names its op, so `compare` resolves out of the
    /// loop.
    fn compare_as<T: PartialOrd + Copy>(&self, b: BinaryOp, x: &[T], y: &[T]) -> Vec<bool> {
        macro_rules! go {
            ($b:expr) => {
                self.map2(x, y, |a, c| $b.compare(a, c) == Some(true))
            };
        }
        match b {
            BinaryOp::Equal => go!(BinaryOp::Equal),
            BinaryOp::Less => go!(BinaryOp::Less),
            BinaryOp::Greater => go!(BinaryOp::Greater),
            BinaryOp::LessOrEqual => go!(BinaryOp::LessOrEqual),
            _ => go!(BinaryOp::GreaterOrEqual),
        }
    }

    fn logical(&self, l: Logical, xs: &[&Tensor]) -> Option<TensorData> {
        let TensorData::Bool(x) = &*xs[0].data else {
            return None;
        };
        if l == Logical::Not {
            return Some(TensorData::Bool(self.map2(x, x, |a, _| !a)));
        }
        let TensorData::Bool(y) = &*xs[1].data else {
            return None;
        };
        Some(TensorData::Bool(self.map2(x, y, |a, c| match l {
            Logical::And => a & c,
            Logical::Or => a | c,
            _ => a ^ c,
        })))
    }

    fn select(&self, xs: &[&Tensor]) -> Option<TensorData> {
        let TensorData::Bool(mask) = &*xs[0].data else {
            return None;
        };
        match (&*xs[1].data, &*xs[2].data) {
            (TensorData::Bool(x), TensorData::Bool(y)) => {
                Some(TensorData::Bool(self.pick(mask, x, y)))
            }
            (x, y) => each_integer!(x, y, |x, y, variant| variant(self.pick(mask, x, y))),
        }
    }

    /// `f` of operands 0 and 1 at each output position (a unary op passes its
    /// operand twice). Rows where each operand walks its elements in order or
    /// repeats one go through slices, which the compiler vectorizes.
    fn map2<T: Copy, U>(&self, x: &[T], y: &[T], mut f: impl FnMut(T, T) -> U) -> Vec<U> {
        let last = self.strides.len().min(2) - 1;
        let (sx, sy) = (&self.strides[0], &self.strides[last]);
        let mut out = Vec::with_capacity(self.shape.iter().product());
        for_each_row(&self.shape, &[sx, sy], |at, n, step| match *step {
            [1, 1] => {
                let pairs = x[at[0]..at[0] + n].iter().zip(&y[at[1]..at[1] + n]);
                out.extend(pairs.map(|(&a, &c)| f(a, c)))
            }
            [1, 0] => {
                let c = y[at[1]];
                out.extend(x[at[0]..at[0] + n].iter().map(|&a| f(a, c)))
            }
            [0, 1] => {
                let a = x[at[0]];
                out.extend(y[at[1]..at[1] + n].iter().map(|&c| f(a, c)))
            }
            _ => {
                for k in 0..n {
                    out.push(f(x[at[0] + k * step[0]], y[at[1] + k * step[1]]));
                }
            }
        });
        out
    }

    fn pick<T: Copy>(&self, mask: &[bool], x: &[T], y: &[T]) -> Vec<T> {
        let s = &self.strides;
        let mut out = Vec::with_capacity(self.shape.iter().product());
        for_each_row(&self.shape, &[&s[0], &s[1], &s[2]], |at, n, step| {
            for k in 0..n {
                out.push(match mask[at[0] + k * step[0]] {
                    true => x[at[1] + k * step[1]],
                    false => y[at[2] + k * step[2]],
                });
            }
        });
        out
    }
}

/// Calls `row(offsets, n, steps)` for each row of `shape`'s last axis, in
/// order: each operand's offset of the row's first element, the row's length
/// and each operand's step along it (operand strides per axis of `shape`).
fn for_each_row<const N: usize>(
    shape: &[usize],
    strides: &[&Vec<usize>; N],
    mut row: impl FnMut(&[usize; N], usize, &[usize; N]),
) {
    let rank = shape.len();
    if shape.contains(&0) {
        return;
    }
    let (n, step) = match rank {
        0 => (1, [0; N]),
        _ => (shape[rank - 1], strides.map(|s| s[rank - 1])),
    };
    let outer = rank.saturating_sub(1);
    let mut index = vec![0usize; outer];
    let mut at = [0usize; N];
    loop {
        row(&at, n, &step);
        // The odometer over the outer axes, offsets kept in step.
        let mut axis = outer;
        loop {
            if axis == 0 {
                return;
            }
            axis -= 1;
            index[axis] += 1;
            for (o, s) in at.iter_mut().zip(strides) {
                *o += s[axis];
            }
            if index[axis] < shape[axis] {
                break;
            }
            for (o, s) in at.iter_mut().zip(strides) {
                *o -= s[axis] * shape[axis];
            }
            index[axis] = 0;
        }
    }
}

/// ReduceSum, ReduceMean, ReduceMax, ReduceMin or ReduceProd of row-major
/// integers over any axes, exact in i128 and wrapped back to the type (an
/// integer mean truncates), or ReduceMax/ReduceMin of booleans (any, all):
/// the reference's semantics, in one pass over the input.
#[derive(Clone, Debug)]
pub struct Reduced {
    kind: ReduceKind,
    shape: Vec<usize>,
    /// The input's row-major strides, and per input axis the output's stride
    /// (0 on a reduced axis).
    strides: [Vec<usize>; 2],
    out: Vec<usize>,
}

impl Reduced {
    /// The kernel for `op` on `dtype` input of `shape`, giving `out`; none
    /// for types without an exact loop here.
    pub fn new(op: &Reduce, dtype: DType, shape: &[usize], out: &[usize]) -> Option<Reduced> {
        let boolean = matches!(op.kind, ReduceKind::Max | ReduceKind::Min) && dtype == DType::Bool;
        if !(integer(dtype) || boolean) || op.axes.iter().any(|&a| a >= shape.len()) {
            return None;
        }
        let kept: Vec<usize> = (0..shape.len())
            .map(|a| if op.axes.contains(&a) { 1 } else { shape[a] })
            .collect();
        let mut to_out = strides(&kept);
        op.axes.iter().for_each(|&a| to_out[a] = 0);
        Some(Reduced {
            kind: op.kind,
            shape: shape.to_vec(),
            strides: [strides(shape), to_out],
            out: out.to_vec(),
        })
    }

    /// The reduction of `x` (the type and shape it was built for).
    pub fn run(&self, x: &Tensor) -> Result<Tensor, KernelError> {
        let n: usize = self.shape.iter().product();
        KernelError::check_len("integer reduction", x.numel(), n)?;
        let n_out: usize = self.out.iter().product();
        let data = match &*x.data {
            TensorData::Bool(v) => {
                let all = self.kind == ReduceKind::Min;
                let mut acc = vec![all; n_out];
                self.fold(v, &mut acc, |a, v| if all { a && v } else { a || v });
                TensorData::Bool(acc)
            }
            data => {
                let (init, take) = self.kind.integer_fold();
                let mut acc = vec![init; n_out];
                each_integer!(data, data, |v, _same, _variant| {
                    self.fold(v, &mut acc, |a, v| take(a, i128::from(v)))
                })
                .ok_or_else(|| KernelError::Value(format!("no reduction of {}", x.dtype())))?;
                if self.kind == ReduceKind::Mean {
                    let count = (n / n_out.max(1)) as i128;
                    if count == 0 {
                        return Err(KernelError::Value("integer mean over no elements".into()));
                    }
                    acc.iter_mut().for_each(|a| *a /= count);
                }
                TensorData::from_i128(x.dtype(), acc)
            }
        };
        Ok(Tensor::new(self.out.clone(), data))
    }

    /// Folds every input element into its output's accumulator.
    fn fold<T: Copy, A: Copy>(&self, x: &[T], acc: &mut [A], f: impl Fn(A, T) -> A) {
        let [sx, so] = &self.strides;
        for_each_row(&self.shape, &[sx, so], |at, n, step| {
            for k in 0..n {
                let o = at[1] + k * step[1];
                acc[o] = f(acc[o], x[at[0] + k * step[0]]);
            }
        });
    }
}

/// CumSum or CumProd of row-major integers along one axis, wrapping in the
/// type (the reference's exact i128 result narrowed is the same value), by
/// the op's own scan.
#[derive(Clone, Debug)]
pub struct Scanned {
    op: Cumulative,
    shape: Vec<usize>,
}

impl Scanned {
    /// The kernel for `op` on `dtype` input of `shape`; none for types other
    /// than integers.
    pub fn new(op: &Cumulative, dtype: DType, shape: &[usize]) -> Option<Scanned> {
        (integer(dtype) && op.axis < shape.len()).then(|| Scanned {
            op: op.clone(),
            shape: shape.to_vec(),
        })
    }

    /// The running sums or products of `x` (the type and shape it was built for).
    pub fn run(&self, x: &Tensor) -> Result<Tensor, KernelError> {
        KernelError::check_len(
            "integer running sum",
            x.numel(),
            self.shape.iter().product(),
        )?;
        let shape = &self.shape;
        let data = each_integer!(&*x.data, &*x.data, |v, _same, variant| variant(
            match self.op.op {
                Running::Sum => self.op.scan(v, shape, (0, |a, b| a.wrapping_add(b))),
                Running::Prod => self.op.scan(v, shape, (1, |a, b| a.wrapping_mul(b))),
            }
        ))
        .ok_or_else(|| KernelError::Value(format!("no running sum of {}", x.dtype())))?;
        Ok(Tensor::new(self.shape.clone(), data))
    }
}

/// Whether ArgBest and TopKBest rank values of `dtype`: f32 and integers.
pub fn ranked(dtype: DType) -> bool {
    dtype == DType::F32 || integer(dtype)
}

/// ArgMax or ArgMin of row-major f32 or integer values along one axis: i64
/// indices. NaN wins either, as ReduceMax/ReduceMin propagate it; ties go to
/// the first index, or the last when asked (the reference's order).
#[derive(Clone, Debug)]
pub struct ArgBest {
    largest: bool,
    last: bool,
    /// The extents before, of and after the axis.
    outer: usize,
    n: usize,
    inner: usize,
    shape: Vec<usize>,
}

impl ArgBest {
    /// The kernel for `op` on f32 or integer input of `shape`, giving `out`.
    pub fn new(op: &ArgReduce, shape: &[usize], out: &[usize]) -> Option<ArgBest> {
        let n = *shape.get(op.axis)?;
        (n > 0).then(|| ArgBest {
            largest: op.kind == ArgKind::Max,
            last: op.select_last_index,
            outer: shape[..op.axis].iter().product(),
            n,
            inner: shape[op.axis + 1..].iter().product(),
            shape: out.to_vec(),
        })
    }

    /// The indices for f32 `x`.
    pub fn run(&self, x: &[f32]) -> Result<Tensor, KernelError> {
        self.check(x.len())?;
        Ok(self.indices(x, |v, b| match (v.is_nan(), b.is_nan()) {
            (true, true) => self.last,
            (true, false) => true,
            (false, true) => false,
            _ => self.better(v, b),
        }))
    }

    /// The indices for integer `x`.
    pub fn run_integers(&self, x: &Tensor) -> Result<Tensor, KernelError> {
        self.check(x.numel())?;
        each_integer!(&*x.data, &*x.data, |v, _same, _variant| {
            self.indices(v, |a, b| self.better(a, b))
        })
        .ok_or_else(|| KernelError::Value(format!("no ArgMax/ArgMin of {}", x.dtype())))
    }

    fn check(&self, len: usize) -> Result<(), KernelError> {
        KernelError::check_len("ArgMax/ArgMin", len, self.outer * self.n * self.inner)
    }

    /// Whether `v` takes the place of `b` (neither NaN).
    #[inline(always)]
    fn better<T: PartialOrd>(&self, v: T, b: T) -> bool {
        match v == b {
            true => self.last,
            false => (v > b) == self.largest,
        }
    }

    /// The indices for `x`, `better(v, b)` saying when `v` takes the place
    /// of the best so far. Each line is scanned along the axis with the
    /// best value of every inner position kept beside its index, so the
    /// loops run over contiguous rows.
    fn indices<T: Copy>(&self, x: &[T], better: impl Fn(T, T) -> bool) -> Tensor {
        let (n, inner) = (self.n, self.inner);
        let mut out = Vec::with_capacity(self.outer * inner);
        let mut best = Vec::with_capacity(inner);
        let mut at = vec![0i64; inner];
        for block in x.chunks_exact(n * inner) {
            best.clear();
            best.extend_from_slice(&block[..inner]);
            at.fill(0);
            for (k, row) in block.chunks_exact(inner).enumerate().skip(1) {
                for ((b, i), &v) in best.iter_mut().zip(at.iter_mut()).zip(row) {
                    if better(v, *b) {
                        (*b, *i) = (v, k as i64);
                    }
                }
            }
            out.extend_from_slice(&at);
        }
        Tensor::from_i64(self.shape.clone(), out)
    }
}

/// TopK of row-major f32 or integer values along one axis: the `k` best values in order
/// and their i64 indices, ranked as the reference ranks them (NaN above every
/// number, ties to the lower index). Each line is gathered once as integer
/// keys, the best `k` found by selection and only they sorted: O(n + k log k)
/// per line, where sorting whole lines was O(n log n).
#[derive(Clone, Debug)]
pub struct TopKBest {
    op: TopK,
    /// The extents before, of and after the axis.
    outer: usize,
    n: usize,
    inner: usize,
    /// The outputs' shape.
    shape: Vec<usize>,
}

impl TopKBest {
    /// The kernel for `op` on f32 or integer input of `shape`.
    pub fn new(op: &TopK, shape: &[usize]) -> Option<TopKBest> {
        let n = *shape.get(op.axis)?;
        // An index must fit the key's low 32 bits.
        (op.k <= n && n <= u32::MAX as usize).then(|| TopKBest {
            op: op.clone(),
            outer: shape[..op.axis].iter().product(),
            n,
            inner: shape[op.axis + 1..].iter().product(),
            shape: [&shape[..op.axis], &[op.k], &shape[op.axis + 1..]].concat(),
        })
    }

    /// The values and indices for f32 `x`.
    pub fn run(&self, x: &[f32]) -> Result<Vec<Tensor>, KernelError> {
        KernelError::check_len("TopK", x.len(), self.outer * self.n * self.inner)?;
        let largest = self.op.largest;
        // Each element as one integer that orders as the reference ranks:
        // its rank key above, its index below (ties to the lower index).
        let (values, indices) = self.select(
            x,
            |v, j| (rank_key(v, largest) << 32) | j as u64,
            |key| (key & 0xffff_ffff) as usize,
        );
        Ok(vec![
            Tensor::from_f32(self.shape.clone(), values),
            Tensor::from_i64(self.shape.clone(), indices),
        ])
    }

    /// The values and indices for integer `x`: ranked by value (negated for
    /// the largest), ties to the lower index.
    pub fn run_integers(&self, x: &Tensor) -> Result<Vec<Tensor>, KernelError> {
        KernelError::check_len("TopK", x.numel(), self.outer * self.n * self.inner)?;
        let largest = self.op.largest;
        let (values, indices) = each_integer!(&*x.data, &*x.data, |v, _same, variant| {
            let (values, indices) = self.select(
                v,
                |v, j| {
                    let v = i128::from(v);
                    (if largest { -v } else { v }, j as u32)
                },
                |(_, j)| j as usize,
            );
            (variant(values), indices)
        })
        .ok_or_else(|| KernelError::Value(format!("no TopK of {}", x.dtype())))?;
        Ok(vec![
            Tensor::new(self.shape.clone(), values),
            Tensor::from_i64(self.shape.clone(), indices),
        ])
    }

    /// The `k` best of every line of `x` in order, with their indices: each
    /// element gets a key (`key(value, index)`, lowest best, unique per line,
    /// `index_of` reading the index back); the best `k` are found by selection
    /// and only they sorted.
    fn select<T: Copy, K: Ord + Copy>(
        &self,
        x: &[T],
        key: impl Fn(T, usize) -> K,
        index_of: impl Fn(K) -> usize,
    ) -> (Vec<T>, Vec<i64>) {
        let (n, inner, k) = (self.n, self.inner, self.op.k);
        let mut values = Vec::with_capacity(self.outer * k * inner);
        let mut indices = vec![0i64; self.outer * k * inner];
        let mut line: Vec<K> = Vec::with_capacity(n);
        for o in 0..self.outer {
            let block = &x[o * n * inner..(o + 1) * n * inner];
            for i in 0..inner {
                let keys = (0..n).map(|j| key(block[j * inner + i], j));
                line.clear();
                if k * HEAP_BELOW <= n {
                    // A few best of many: a heap of the k best so far, which
                    // most elements pass by one comparison with its worst.
                    let mut heap = BinaryHeap::from(std::mem::take(&mut line));
                    for key in keys {
                        if heap.len() < k {
                            heap.push(key);
                        } else if let Some(mut worst) = heap.peek_mut().filter(|w| key < **w) {
                            *worst = key;
                        }
                    }
                    line = heap.into_vec();
                } else {
                    line.extend(keys);
                    if k > 0 && k < n {
                        line.select_nth_unstable(k - 1);
                    }
                    line.truncate(k);
                }
                line.sort_unstable();
                for (r, &e) in line.iter().enumerate() {
                    let j = index_of(e);
                    indices[(o * k + r) * inner + i] = j as i64;
                }
            }
        }
        // The values in output order: row-major over (outer, rank, inner).
        for (at, &j) in indices.iter().enumerate() {
            let (o, i) = (at / (k * inner), at % inner);
            values.push(x[(o * n + j as usize) * inner + i]);
        }
        (values, indices)
    }
}

/// TopK keeps a heap of its best elements where it takes at most one in this
/// many (a detector's 100 best of 8400 boxes); otherwise it selects.
const HEAP_BELOW: usize = 8;

/// `v`'s place in TopK's order as an unsigned integer, lowest first: the
/// float's bits mapped to an order that compares as the numbers do, -0 as 0,
/// every NaN above every number (the reference's `rank`), reversed for the
/// largest.
fn rank_key(v: f32, largest: bool) -> u64 {
    let key = if v.is_nan() {
        u32::MAX
    } else {
        // Negative numbers flip every bit, others the sign bit: without a
        // branch, which random signs would mispredict half the time.
        let bits = (v + 0.0).to_bits();
        bits ^ (((bits as i32 >> 31) as u32) | 1 << 31)
    };
    (if largest { !key } else { key }) as u64
}

/// Rows or elements of a tensor that is not f32 picked by run-time indices
/// (ids looked up in a table of ids or positions): the f32 gathers on its own
/// elements.
#[derive(Clone, Debug)]
pub struct Gathered {
    picking: Picking,
    shape: Vec<usize>,
}

impl Gathered {
    /// The gather `picking` from `dtype` values into an output of `shape`;
    /// none for the types stored as packed bits (float8, 4-bit integers).
    pub fn new(picking: Picking, dtype: DType, shape: Vec<usize>) -> Option<Gathered> {
        let packed =
            crate::core::float8::is_float8(dtype) || matches!(dtype, DType::I4 | DType::U4);
        (!packed).then_some(Gathered { picking, shape })
    }

    /// What `indices` pick from `x`.
    pub fn run(&self, x: &Tensor, indices: &Tensor) -> Result<Tensor, KernelError> {
        let indices = indices.data.to_i64();
        let n = self.shape.iter().product();
        macro_rules! pick {
            ($v:expr, $variant:path, $zero:expr) => {{
                let mut y = vec![$zero; n];
                self.picking.run($v, &indices, &mut y)?;
                $variant(y)
            }};
        }
        let data = match &*x.data {
            TensorData::I8(v) => pick!(v, TensorData::I8, 0),
            TensorData::I16(v) => pick!(v, TensorData::I16, 0),
            TensorData::I32(v) => pick!(v, TensorData::I32, 0),
            TensorData::I64(v) => pick!(v, TensorData::I64, 0),
            TensorData::U8(v) => pick!(v, TensorData::U8, 0),
            TensorData::U16(v) => pick!(v, TensorData::U16, 0),
            TensorData::U32(v) => pick!(v, TensorData::U32, 0),
            TensorData::U64(v) => pick!(v, TensorData::U64, 0),
            TensorData::Bool(v) => pick!(v, TensorData::Bool, false),
            TensorData::F64(v) => pick!(v, TensorData::F64, 0.0),
            TensorData::F16(v) => pick!(v, TensorData::F16, Default::default()),
            TensorData::BF16(v) => pick!(v, TensorData::BF16, Default::default()),
            other => {
                return Err(KernelError::Value(format!(
                    "no gather of {} values",
                    other.dtype()
                )))
            }
        };
        Ok(Tensor::new(self.shape.clone(), data))
    }
}

/// A data movement of integers or booleans: each output element is an element
/// of the moved inputs (joined end to end), or the fill (a constant pad).
#[derive(Clone, Debug)]
pub struct Moved {
    /// Per output element, its source; `u32::MAX` for the fill.
    sources: Vec<u32>,
    /// The largest source but the fill's, found once: the inputs must hold
    /// it (scanning the sources on every run took as long as moving them).
    highest: Option<u32>,
    fill: f32,
    shape: Vec<usize>,
}

impl Moved {
    /// The movement of these sources into an output of `shape`.
    pub fn new(sources: Vec<u32>, fill: f32, shape: Vec<usize>) -> Moved {
        let highest = sources.iter().copied().filter(|&s| s != u32::MAX).max();
        Moved {
            sources,
            highest,
            fill,
            shape,
        }
    }

    /// The output, from the moved inputs `xs` (of one type).
    pub fn run(&self, xs: &[&Tensor]) -> Result<Tensor, KernelError> {
        let dtype = xs.first().map_or(DType::F32, |x| x.dtype());
        let fill = TensorData::from_f64(dtype, vec![self.fill as f64]);
        let mut parts: Vec<&TensorData> = xs.iter().map(|x| &*x.data).collect();
        parts.push(&fill);
        let joined = TensorData::concat(&parts).map_err(|e| KernelError::Value(e.to_string()))?;
        let last = joined.len() - 1;
        if let Some(s) = self.highest.filter(|&s| s as usize >= last) {
            return Err(KernelError::Index {
                index: s as i64,
                extent: last,
            });
        }
        let at = self.sources.iter().map(|&s| match s {
            u32::MAX => last,
            s => s as usize,
        });
        Ok(Tensor::new(self.shape.clone(), joined.gather(at)))
    }
}

/// The element strides of an operand of `shape` broadcast (numpy rules) to
/// `out`: 0 along axes it repeats.
fn broadcast(shape: &[usize], out: &[usize]) -> Option<Vec<usize>> {
    let lead = out.len().checked_sub(shape.len())?;
    let mut strides = vec![0; out.len()];
    let mut stride = 1;
    for (a, &d) in shape.iter().enumerate().rev() {
        let o = out[lead + a];
        if d != o && d != 1 {
            return None;
        }
        strides[lead + a] = if d == 1 { 0 } else { stride };
        stride *= d;
    }
    Some(strides)
}

#[cfg(test)]
mod tests {
    use super::super::gather::{Elements, Rows};
    use super::*;
    use crate::core::ValueType;
    use crate::ops::{eval_op, Op};

    fn i64s(shape: &[usize], v: &[i64]) -> Tensor {
        Tensor::new(shape.to_vec(), TensorData::I64(v.to_vec()))
    }

    fn i8s(shape: &[usize], v: &[i8]) -> Tensor {
        Tensor::new(shape.to_vec(), TensorData::I8(v.to_vec()))
    }

    fn bools(shape: &[usize], v: &[bool]) -> Tensor {
        Tensor::new(shape.to_vec(), TensorData::Bool(v.to_vec()))
    }

    /// The typed kernel and the reference give the same tensor.
    fn agree(op: Op, typed: TypedOp, xs: &[Tensor], out: ValueType) {
        let refs: Vec<&Tensor> = xs.iter().collect();
        let want = eval_op(&op, &refs, std::slice::from_ref(&out))
            .unwrap()
            .remove(0);
        let operands: Vec<(DType, &[usize])> =
            xs.iter().map(|x| (x.dtype(), &x.shape[..])).collect();
        let k = Typed::new(typed, &operands, &out.shape).expect("a typed loop");
        let got = k.run(&refs).unwrap();
        assert_eq!(got.shape, want.shape, "{op:?}");
        assert_eq!(*got.data, *want.data, "{op:?}");
    }

    #[test]
    fn typed_ops_broadcast_as_the_reference_does() {
        let a = i64s(&[2, 1, 3], &[i64::MAX, -4, 0, 7, 1, -1]);
        let b = i64s(&[4, 1], &[1, -2, 3, i64::MIN]);
        let out = |d| ValueType::new(d, vec![2, 4, 3]);
        for bin in [
            BinaryOp::Add,
            BinaryOp::Sub,
            BinaryOp::Mul,
            BinaryOp::Min,
            BinaryOp::Max,
        ] {
            let t = TypedOp::of_binary(bin, DType::I64).unwrap();
            agree(Op::Binary(bin), t, &[a.clone(), b.clone()], out(DType::I64));
        }
        let cmp = [
            BinaryOp::Equal,
            BinaryOp::Less,
            BinaryOp::Greater,
            BinaryOp::LessOrEqual,
            BinaryOp::GreaterOrEqual,
        ];
        let fa = Tensor::from_f32(vec![3], vec![f32::NAN, 1.0, -0.0]);
        let fb = Tensor::from_f32(vec![2, 1], vec![0.0, f32::NAN]);
        for bin in cmp {
            let t = TypedOp::of_binary(bin, DType::I64).unwrap();
            agree(
                Op::Binary(bin),
                t,
                &[a.clone(), b.clone()],
                out(DType::Bool),
            );
            let f = ValueType::new(DType::Bool, vec![2, 3]);
            agree(Op::Binary(bin), t, &[fa.clone(), fb.clone()], f);
        }
        let m = bools(&[2, 1, 1], &[true, false]);
        let n = bools(&[3], &[true, false, true]);
        let vb = ValueType::new(DType::Bool, vec![2, 1, 3]);
        for l in [Logical::And, Logical::Or, Logical::Xor] {
            let t = TypedOp::Logical(l);
            agree(Op::Logical(l), t, &[m.clone(), n.clone()], vb.clone());
        }
        let not = ValueType::new(DType::Bool, vec![3]);
        agree(
            Op::Logical(Logical::Not),
            TypedOp::Logical(Logical::Not),
            std::slice::from_ref(&n),
            not,
        );
        agree(
            Op::Where,
            TypedOp::Where,
            &[m.clone(), a, b],
            out(DType::I64),
        );
        let (p, q) = (i8s(&[1, 1, 3], &[-128, 0, 127]), i8s(&[2, 1, 1], &[5, -5]));
        let w = ValueType::new(DType::I8, vec![2, 2, 3]);
        agree(
            Op::Where,
            TypedOp::Where,
            &[bools(&[2, 1], &[false, true]), p, q],
            w,
        );
        // A scalar operand and a rank-0 output.
        let s = i64s(&[], &[5]);
        let r0 = ValueType::new(DType::I64, vec![]);
        let add = TypedOp::Arith(BinaryOp::Add);
        agree(Op::Binary(BinaryOp::Add), add, &[s.clone(), s], r0);
    }

    #[test]
    fn integer_ops_of_every_width_agree_with_the_reference() {
        let ints = |d: DType, shape: &[usize], v: &[i128]| {
            Tensor::new(shape.to_vec(), TensorData::from_i128(d, v.to_vec()))
        };
        let ops = [
            IntegerArith::Mod { fmod: false },
            IntegerArith::Mod { fmod: true },
            IntegerArith::BitShift { left: true },
            IntegerArith::BitShift { left: false },
            IntegerArith::BitwiseAnd,
            IntegerArith::BitwiseOr,
            IntegerArith::BitwiseXor,
        ];
        for d in [DType::I8, DType::U8, DType::I16, DType::U32, DType::I64] {
            let signed = d.integer_range().unwrap().0 < 0.0;
            let a = ints(
                d,
                &[2, 3],
                &[7, if signed { -7 } else { 250 }, 0, 5, 100, 1],
            );
            let b = ints(d, &[3], &[3, if signed { -2 } else { 9 }, 1]);
            let out = ValueType::new(d, vec![2, 3]);
            for op in ops {
                let t = TypedOp::Integer(op);
                agree(
                    Op::IntegerArith(op),
                    t,
                    &[a.clone(), b.clone()],
                    out.clone(),
                );
            }
            for bin in [
                BinaryOp::Add,
                BinaryOp::Mul,
                BinaryOp::Div,
                BinaryOp::Max,
                BinaryOp::Less,
            ] {
                let t = TypedOp::of_binary(bin, d).unwrap();
                let ty = if bin == BinaryOp::Less {
                    DType::Bool
                } else {
                    d
                };
                let out = ValueType::new(ty, vec![2, 3]);
                agree(Op::Binary(bin), t, &[a.clone(), b.clone()], out);
            }
        }
        // Mod by zero is an error, never a panic.
        let a = ints(DType::I32, &[2], &[1, 2]);
        let z = ints(DType::I32, &[1], &[0]);
        let operands = [(DType::I32, &[2usize][..]), (DType::I32, &[1][..])];
        let k = Typed::new(TypedOp::Integer(ops[0]), &operands, &[2]).unwrap();
        assert!(matches!(k.run(&[&a, &z]), Err(KernelError::Value(_))));
        let div = TypedOp::Arith(BinaryOp::Div);
        let k = Typed::new(div, &operands, &[2]).unwrap();
        assert!(matches!(k.run(&[&a, &z]), Err(KernelError::Value(_))));
    }

    #[test]
    fn integer_and_boolean_reductions_agree_with_the_reference() {
        // Values near each type's ends, so that sums and products wrap.
        let v: Vec<i128> = (0..24)
            .map(|i| (i * 37 % 11 - 5) * (1 << (i % 5 * 15)))
            .collect();
        let flags: Vec<bool> = (0..24).map(|i| i % 3 == 0 || i % 7 == 1).collect();
        let kinds = [
            ReduceKind::Sum,
            ReduceKind::Mean,
            ReduceKind::Max,
            ReduceKind::Min,
            ReduceKind::Prod,
        ];
        for dtype in [
            DType::I8,
            DType::I32,
            DType::I64,
            DType::U16,
            DType::U64,
            DType::Bool,
        ] {
            let x = match dtype {
                DType::Bool => bools(&[2, 3, 4], &flags),
                d => Tensor::new(vec![2, 3, 4], TensorData::from_i128(d, v.clone())),
            };
            let ty = ValueType::new(dtype, x.shape.clone());
            for axes in [vec![0], vec![1], vec![2], vec![0, 2], vec![0, 1, 2]] {
                for (kind, keepdims) in kinds.iter().flat_map(|&k| [(k, false), (k, true)]) {
                    let op = Reduce {
                        kind,
                        axes: axes.clone(),
                        keepdims,
                    };
                    let node = Op::Reduce(op.clone());
                    let out = node.def().infer(&[&ty]).unwrap();
                    let Ok(want) = eval_op(&node, &[&x], &out) else {
                        // Not defined on this type (a sum of booleans).
                        assert!(Reduced::new(&op, dtype, &x.shape, &out[0].shape).is_none());
                        continue;
                    };
                    let k = Reduced::new(&op, dtype, &x.shape, &out[0].shape).expect("a loop");
                    let got = k.run(&x).unwrap();
                    assert_eq!((&got.shape, &*got.data), (&want[0].shape, &*want[0].data));
                }
            }
        }
    }

    #[test]
    fn integer_running_sums_and_products_agree_with_the_reference() {
        let v: Vec<i128> = (0..30)
            .map(|i| (i * 53 % 17 - 8) * (1 << (i % 4 * 20)))
            .collect();
        for dtype in [DType::I8, DType::I32, DType::I64, DType::U8, DType::U64] {
            let x = Tensor::new(vec![2, 3, 5], TensorData::from_i128(dtype, v.clone()));
            for (axis, op, exclusive, reverse) in [
                (0, Running::Sum, false, false),
                (1, Running::Sum, true, false),
                (2, Running::Sum, false, true),
                (2, Running::Prod, true, true),
                (1, Running::Prod, false, false),
            ] {
                let op = Cumulative {
                    op,
                    axis,
                    exclusive,
                    reverse,
                };
                let node = Op::Cumulative(op.clone());
                let ty = ValueType::new(dtype, x.shape.clone());
                let out = node.def().infer(&[&ty]).unwrap();
                let want = eval_op(&node, &[&x], &out).unwrap();
                let got = Scanned::new(&op, dtype, &x.shape).unwrap().run(&x).unwrap();
                assert_eq!(
                    (&got.shape, &*got.data),
                    (&want[0].shape, &*want[0].data),
                    "{op:?}"
                );
            }
        }
        let op = Cumulative {
            op: Running::Sum,
            axis: 0,
            exclusive: false,
            reverse: false,
        };
        assert!(Scanned::new(&op, DType::F64, &[3]).is_none());
    }

    #[test]
    fn arg_max_and_min_agree_with_the_reference_on_nan_and_ties() {
        let v = [
            1.0,
            f32::NAN,
            3.0,
            3.0,
            -1.0,
            2.0,
            2.0,
            0.0,
            f32::NAN,
            -1.0,
            3.0,
            0.5,
        ];
        let x = Tensor::from_f32(vec![2, 3, 2], v.to_vec());
        for (kind, axis, keepdims, last) in [
            (ArgKind::Max, 1, true, false),
            (ArgKind::Max, 1, false, true),
            (ArgKind::Min, 0, false, false),
            (ArgKind::Min, 2, true, true),
            (ArgKind::Max, 2, false, false),
        ] {
            let op = ArgReduce {
                kind,
                axis,
                keepdims,
                select_last_index: last,
            };
            let ty = ValueType::new(DType::F32, x.shape.clone());
            let out = Op::ArgReduce(op.clone()).def().infer(&[&ty]).unwrap();
            let want = eval_op(&Op::ArgReduce(op.clone()), &[&x], &out)
                .unwrap()
                .remove(0);
            let k = ArgBest::new(&op, &x.shape, &out[0].shape).unwrap();
            let got = k.run(&x.to_f32()).unwrap();
            assert_eq!((got.shape, &*got.data), (want.shape, &*want.data), "{op:?}");
            // Integers, with ties, of each width and sign.
            let ints: Vec<i128> = vec![3, -7, 3, 120, -7, 0, 5, 5, 127, -128, 0, 2];
            for dtype in [DType::I8, DType::U8, DType::I32, DType::I64, DType::U16] {
                let fit = ints.iter().map(|&v| {
                    if dtype.name().starts_with('u') {
                        v.abs()
                    } else {
                        v
                    }
                });
                let xi = Tensor::new(vec![2, 3, 2], TensorData::from_i128(dtype, fit.collect()));
                let want = eval_op(&Op::ArgReduce(op.clone()), &[&xi], &out)
                    .unwrap()
                    .remove(0);
                let got = k.run_integers(&xi).unwrap();
                assert_eq!(
                    (got.shape, &*got.data),
                    (want.shape, &*want.data),
                    "{op:?} {dtype:?}"
                );
            }
        }
    }

    #[test]
    fn top_k_agrees_with_the_reference_on_nan_and_ties() {
        // Ties (3.0 twice, 2.0 three times), a NaN, a -0.0 beside 0.0, along
        // each axis of a [3, 4, 5] tensor.
        let v: Vec<f32> = (0..60)
            .map(|i| match i % 13 {
                0 => f32::NAN,
                1 | 7 => 3.0,
                2 | 5 | 11 => 2.0,
                3 => -0.0,
                4 => 0.0,
                r => (r as f32 * 0.37).sin(),
            })
            .collect();
        let x = Tensor::from_f32(vec![3, 4, 5], v);
        let ty = ValueType::new(DType::F32, x.shape.clone());
        for (axis, k, largest) in [
            (0, 2, true),
            (1, 4, false),
            (2, 3, true),
            (2, 0, false),
            (1, 1, true),
        ] {
            let op = TopK { axis, k, largest };
            let out = Op::TopK(op.clone()).def().infer(&[&ty]).unwrap();
            let want = eval_op(&Op::TopK(op.clone()), &[&x], &out).unwrap();
            let got = TopKBest::new(&op, &x.shape)
                .unwrap()
                .run(&x.to_f32())
                .unwrap();
            assert_eq!(got[1], want[1], "indices, {op:?}");
            assert_eq!(got[0].shape, want[0].shape, "{op:?}");
            let bits = |t: &Tensor| t.to_f32().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got[0]), bits(&want[0]), "values, {op:?}");
        }
        // Integers of each width and sign, with ties; a few of many (the heap).
        let ints: Vec<i128> = (0..80).map(|i| (i * 37 % 23) as i128 - 11).collect();
        for dtype in [DType::I8, DType::U8, DType::I32, DType::I64, DType::U64] {
            let unsigned = dtype.name().starts_with('u');
            let fit = ints.iter().map(|&v| if unsigned { v.abs() } else { v });
            let x = Tensor::new(vec![2, 40], TensorData::from_i128(dtype, fit.collect()));
            let ty = ValueType::new(dtype, x.shape.clone());
            for (axis, k, largest) in [(1, 3, true), (1, 3, false), (0, 2, true), (1, 17, false)] {
                let op = TopK { axis, k, largest };
                let out = Op::TopK(op.clone()).def().infer(&[&ty]).unwrap();
                let want = eval_op(&Op::TopK(op.clone()), &[&x], &out).unwrap();
                let k = TopKBest::new(&op, &x.shape).unwrap();
                assert_eq!(k.run_integers(&x).unwrap(), want, "{op:?} {dtype:?}");
            }
        }
    }

    #[test]
    fn elements_gather_as_the_reference_does() {
        let table = i64s(&[2, 3, 2], &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        let floats = Tensor::new(
            vec![2, 3, 2],
            TensorData::F64((1..=12).map(|v| v as f64 / 4.0).collect()),
        );
        // Indices smaller than the data on the other axes, negative ones too.
        let ids = i64s(&[2, 3, 1], &[1, -1, 0, 2, -3, 1]);
        let along_2 = i64s(&[1, 3, 2], &[1, 0, 0, 1, -1, -2]);
        for (x, axis, ids) in [(&table, 1, &ids), (&floats, 1, &ids), (&table, 2, &along_2)] {
            let op = Op::GatherElements(crate::ops::GatherElements { axis });
            let types = [
                ValueType::new(x.dtype(), x.shape.clone()),
                ValueType::new(DType::I64, ids.shape.clone()),
            ];
            let ins: Vec<&ValueType> = types.iter().collect();
            let out = op.def().infer(&ins).unwrap();
            let want = eval_op(&op, &[x, ids], &out).unwrap().remove(0);
            let elements = Elements {
                data: x.shape.clone(),
                indices: ids.shape.clone(),
                axis,
            };
            let k = Gathered::new(Picking::Elements(elements), x.dtype(), out[0].shape.clone())
                .unwrap();
            let got = k.run(x, ids).unwrap();
            assert_eq!(
                (got.shape, &*got.data),
                (want.shape, &*want.data),
                "axis {axis}"
            );
        }
        let elements = Elements {
            data: vec![2, 3, 2],
            indices: vec![1, 1, 1],
            axis: 1,
        };
        let k = Gathered::new(Picking::Elements(elements), DType::I64, vec![1, 1, 1]).unwrap();
        assert!(matches!(
            k.run(&table, &i64s(&[1, 1, 1], &[3])),
            Err(KernelError::Index { .. })
        ));
    }

    #[test]
    fn rows_of_integers_and_booleans_gather_as_the_reference_does() {
        let table = i64s(&[2, 3, 2], &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        let flags = bools(&[3, 2], &[true, false, false, false, true, true]);
        let ids = i64s(&[2, 2], &[1, -2, 0, 1]);
        for (x, axis) in [(&table, 1), (&table, 0), (&flags, 0)] {
            let op = Op::Gather(crate::ops::Gather { axis });
            let types = [
                ValueType::new(x.dtype(), x.shape.clone()),
                ValueType::new(DType::I64, ids.shape.clone()),
            ];
            let ins: Vec<&ValueType> = types.iter().collect();
            let out = op.def().infer(&ins).unwrap();
            let want = eval_op(&op, &[x, &ids], &out).unwrap().remove(0);
            let rows = Rows {
                outer: x.shape[..axis].iter().product(),
                extent: x.shape[axis],
                inner: x.shape[axis + 1..].iter().product(),
            };
            let k = Gathered::new(Picking::Rows(rows), x.dtype(), out[0].shape.clone()).unwrap();
            let got = k.run(x, &ids).unwrap();
            assert_eq!(
                (got.shape, &*got.data),
                (want.shape, &*want.data),
                "axis {axis}"
            );
        }
        // An index outside the axis is an error, never a read past it.
        let rows = Rows {
            outer: 1,
            extent: 3,
            inner: 2,
        };
        let k = Gathered::new(Picking::Rows(rows), DType::Bool, vec![1, 2]).unwrap();
        let bad = i64s(&[1], &[3]);
        assert!(matches!(
            k.run(&flags, &bad),
            Err(KernelError::Index { .. })
        ));
    }

    #[test]
    fn operands_the_loops_do_not_cover_get_no_kernel() {
        let i = [(DType::I32, &[2usize][..]), (DType::I64, &[2][..])];
        assert!(Typed::new(TypedOp::Arith(BinaryOp::Add), &i, &[2]).is_none());
        assert!(TypedOp::of_binary(BinaryOp::Pow, DType::I64).is_none());
        assert!(TypedOp::of_binary(BinaryOp::Add, DType::F16).is_none());
        let mismatch = [(DType::I64, &[3usize][..]), (DType::I64, &[2][..])];
        assert!(Typed::new(TypedOp::Arith(BinaryOp::Add), &mismatch, &[3]).is_none());
    }
}
