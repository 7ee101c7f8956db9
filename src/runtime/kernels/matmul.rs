//! Matrix products: a constant right operand packed once at compile time
//! (`Dense`: Gemm and MatMul against weights), or both operands computed by the
//! model (`BatchedMatMul`: attention's Q·Kᵀ and P·V), whose right operand is
//! packed into step scratch at every run. Both run the same register tile:
//! rows of the left operand times one panel of one to `PANEL_VECTORS` vectors
//! of columns, the panel no wider than the product needs and the tile taller
//! where it is narrower, so that a product of few columns (an attention head
//! of 16 or 32) keeps as many independent sums as a wide one.

use super::normalize::dot;
use super::simd::{array_of, run_vectorized, Isa, Lanes, Vector, VectorKernel};
use crate::core::{par, PageBuf};

/// The most vectors of output columns one panel covers.
const PANEL_VECTORS: usize = 4;
/// Sums one register tile keeps (rows times panel vectors): enough
/// independent multiply-adds to hide their latency on two FMA ports.
const TILE_SUMS: usize = 16;
/// The most rows of `a` one register tile covers (a one-vector panel).
const MAX_TILE_ROWS: usize = 8;

/// The extents of one `[m][k] · [k][n]` product and its panel width.
#[derive(Clone, Copy, Debug)]
struct Extents {
    m: usize,
    k: usize,
    n: usize,
    lanes: Lanes,
    /// Vectors of one panel: as few as cover `n`, at most `PANEL_VECTORS`.
    vectors: usize,
}

impl Extents {
    fn new((m, k, n): (usize, usize, usize), isa: Isa) -> Extents {
        let lanes = Lanes::for_block(isa, isa.lanes());
        // 1, 2 or 4 vectors: the tile kernels are compiled for those.
        let vectors = n
            .div_ceil(lanes.count())
            .clamp(1, PANEL_VECTORS)
            .next_power_of_two();
        Extents {
            m,
            k,
            n,
            lanes,
            vectors,
        }
    }

    /// Columns of one panel: `vectors` vectors.
    fn nb(&self) -> usize {
        self.vectors * self.lanes.count()
    }

    /// Rows of `a` one register tile covers.
    fn tile_rows(&self) -> usize {
        (TILE_SUMS / self.vectors).min(MAX_TILE_ROWS)
    }

    fn panels(&self) -> usize {
        self.n.div_ceil(self.nb())
    }

    /// Elements of the packed right operand: `[n / nb][k][nb]`.
    fn packed_len(&self) -> usize {
        self.panels() * self.k * self.nb()
    }

    /// Packs `alpha * b` (logical `[k][n]`, or `[n][k]` when `trans_b`) into
    /// `out` in panels, zero beyond `n` (every element written).
    fn pack(&self, alpha: f32, b: &[f32], trans_b: bool, out: &mut [f32]) {
        let (k, n, nb) = (self.k, self.n, self.nb());
        for (p, panel) in out[..self.packed_len()]
            .chunks_exact_mut(k * nb)
            .enumerate()
        {
            // The panel's columns of b; the rest of its width is zero.
            let j0 = p * nb;
            let width = nb.min(n - j0);
            for (i, row) in panel.chunks_exact_mut(nb).enumerate() {
                let (cols, rest) = row.split_at_mut(width);
                match trans_b {
                    // A run of a row of b: copied whole, at memory speed
                    // (batched products pack at every run).
                    false if alpha == 1.0 => cols.copy_from_slice(&b[i * n + j0..][..width]),
                    false => {
                        for (x, &v) in cols.iter_mut().zip(&b[i * n + j0..]) {
                            *x = alpha * v;
                        }
                    }
                    true => {
                        for (jj, x) in cols.iter_mut().enumerate() {
                            *x = alpha * b[(j0 + jj) * k + i];
                        }
                    }
                }
                rest.fill(0.0);
            }
        }
    }

    /// `y = a · packed (+ c)` for each of `matrices` products, whose operands'
    /// addresses `at` gives, all their tiles over the threads.
    ///
    /// # Safety
    /// For every product, `a` holds `m * k` elements, `b` `packed_len()`, `y`
    /// (and `c`, if given) `m * n`; no two products write the same `y`, and
    /// nothing else writes them meanwhile.
    unsafe fn tiles(&self, matrices: usize, at: impl Fn(usize) -> Operands + Sync) {
        let row_tiles = self.m.div_ceil(self.tile_rows());
        let per_matrix = self.panels() * row_tiles;
        // Panel-major order: a thread's consecutive tiles share one panel of b.
        par::for_each(matrices * per_matrix, |i| {
            let ops = at(i / per_matrix);
            let i = i % per_matrix;
            let tile = DenseTile {
                e: self,
                panel: i / row_tiles,
                row0: (i % row_tiles) * self.tile_rows(),
                a: ops.a as *const f32,
                b: ops.b as *const f32,
                c: ops.c.map(|c| c as *const f32),
                y: ops.y as *mut f32,
            };
            // SAFETY: `lanes` comes from `Lanes::for_block`; each tile writes
            // its own rows and columns of its product's `y`.
            unsafe { run_vectorized(self.lanes, &tile) }
        });
    }
}

/// The addresses of one product's operands (as integers, to cross threads):
/// row 0 of `a`, the packed `b`, row 0 of the added `c` and of `y`.
#[derive(Clone, Copy)]
struct Operands {
    a: usize,
    b: usize,
    c: Option<usize>,
    y: usize,
}

/// A matrix product with a constant right operand: y = alpha * a . b + c, with
/// `alpha * b` packed in panels at compile time and `c` broadcast to `[M][N]`.
pub struct Dense {
    e: Extents,
    b: PageBuf,
    c: Option<Vec<f32>>,
}

impl Dense {
    /// `b` logical `[K][N]` (or `[N][K]` when `trans_b`); `c` of shape `c_shape`
    /// broadcastable to `[M][N]`, already multiplied by beta.
    pub fn new(
        mkn: (usize, usize, usize),
        isa: Isa,
        alpha: f32,
        b: &[f32],
        trans_b: bool,
        c: Option<(&[f32], &[usize])>,
    ) -> Option<Dense> {
        let e = Extents::new(mkn, isa);
        let (m, n) = (e.m, e.n);
        let mut packed = PageBuf::zeroed(e.packed_len());
        e.pack(alpha, b, trans_b, &mut packed);
        let c = match c {
            Some((c, shape)) => {
                if shape.len() > 2 {
                    return None;
                }
                let rows = if shape.len() == 2 { shape[0] } else { 1 };
                let cols = shape.last().copied().unwrap_or(1);
                if !(rows == 1 || rows == m) || !(cols == 1 || cols == n) {
                    return None;
                }
                let full = (0..m * n).map(|at| c[(at / n % rows) * cols + at % n % cols]);
                Some(full.collect())
            }
            None => None,
        };
        Some(Dense { e, b: packed, c })
    }

    /// `y = alpha * a . b + c` for the `[m][k]` matrix `a`.
    pub fn run(&self, a: &[f32], y: &mut [f32]) {
        let e = &self.e;
        assert!(a.len() >= e.m * e.k && y.len() >= e.m * e.n);
        let ops = Operands {
            a: a.as_ptr() as usize,
            b: self.b.as_ptr() as usize,
            c: self.c.as_ref().map(|c| c.as_ptr() as usize),
            y: y.as_mut_ptr() as usize,
        };
        // SAFETY: lengths checked above; `y` is borrowed mutably.
        unsafe { e.tiles(1, |_| ops) }
    }
}

/// `y = a · b` over a batch of matrices, both operands computed by the model,
/// their leading axes broadcast against each other (ONNX MatMul on row-major
/// tensors). Each matrix of `b` is packed into scratch at every run: `k · n`
/// copies against `m · k · n` multiply-adds.
pub struct BatchedMatMul {
    e: Extents,
    /// Per output matrix, the index of the matrix of `a` and of `b` it multiplies.
    pairs: Vec<(usize, usize)>,
    /// Matrices in `b`.
    b_matrices: usize,
}

impl BatchedMatMul {
    /// `a` of shape `a_batch ++ [m, k]`, `b` of shape `b_batch ++ [k, n]`: the
    /// batch shapes broadcast (numpy rules), `None` when they do not.
    pub fn new(
        a_batch: &[usize],
        b_batch: &[usize],
        mkn: (usize, usize, usize),
        isa: Isa,
    ) -> Option<BatchedMatMul> {
        let rank = a_batch.len().max(b_batch.len());
        let aligned = |s: &[usize]| {
            let mut v = vec![1; rank - s.len()];
            v.extend_from_slice(s);
            v
        };
        let (a_dims, b_dims) = (aligned(a_batch), aligned(b_batch));
        let mut out = Vec::with_capacity(rank);
        for (&x, &y) in a_dims.iter().zip(&b_dims) {
            out.push(match (x, y) {
                _ if x == y => x,
                (1, y) => y,
                (x, 1) => x,
                _ => return None,
            });
        }
        // Row-major strides in matrices, 0 along a broadcast axis.
        let strides = |dims: &[usize]| {
            let mut s = vec![0; rank];
            let mut step = 1;
            for ax in (0..rank).rev() {
                s[ax] = if dims[ax] == 1 { 0 } else { step };
                step *= dims[ax];
            }
            s
        };
        let (sa, sb) = (strides(&a_dims), strides(&b_dims));
        // No output element, nothing to pair (and a batch of empty matrices
        // may be long).
        let count: usize = match mkn.0 * mkn.2 {
            0 => 0,
            _ => out.iter().product(),
        };
        let mut pairs = Vec::with_capacity(count);
        let mut idx = vec![0; rank];
        for _ in 0..count {
            let at = |s: &[usize]| idx.iter().zip(s).map(|(i, s)| i * s).sum::<usize>();
            pairs.push((at(&sa), at(&sb)));
            for ax in (0..rank).rev() {
                idx[ax] += 1;
                if idx[ax] < out[ax] {
                    break;
                }
                idx[ax] = 0;
            }
        }
        Some(BatchedMatMul {
            e: Extents::new(mkn, isa),
            pairs,
            b_matrices: b_dims.iter().product(),
        })
    }

    /// The extent each output sums over.
    pub fn inner(&self) -> usize {
        self.e.k
    }

    /// Elements of `a` and of `b` that `run` reads.
    pub fn operand_lens(&self) -> (usize, usize) {
        let a_matrices = self.pairs.iter().map(|p| p.0 + 1).max().unwrap_or(0);
        let e = &self.e;
        (a_matrices * e.m * e.k, self.b_matrices * e.k * e.n)
    }

    /// Elements of working memory `run` needs: every matrix of `b`, packed.
    pub fn scratch_len(&self) -> usize {
        self.b_matrices * self.e.packed_len()
    }

    /// `y = a · b`; `scratch` holds at least `scratch_len()` elements.
    pub fn run(&self, a: &[f32], b: &[f32], y: &mut [f32], scratch: &mut [f32]) {
        let e = &self.e;
        let (a_len, b_len, y_len) = (e.m * e.k, e.k * e.n, e.m * e.n);
        let (a_read, b_read) = self.operand_lens();
        assert!(a.len() >= a_read && b.len() >= b_read);
        assert!(y.len() >= self.pairs.len() * y_len && scratch.len() >= self.scratch_len());
        if e.n < e.lanes.count() {
            return self.narrow(a, b, y, scratch);
        }
        if b_len > 0 {
            let packed = e.packed_len().max(1);
            par::for_each_chunk_mut(&mut scratch[..self.scratch_len()], packed, |i, out| {
                e.pack(1.0, &b[i * b_len..(i + 1) * b_len], false, out)
            });
        }
        let (ap, bp, yp) = (
            a.as_ptr() as usize,
            scratch.as_ptr() as usize,
            y.as_mut_ptr() as usize,
        );
        let f = std::mem::size_of::<f32>();
        let at = |out: usize| {
            let (ia, ib) = self.pairs[out];
            Operands {
                a: ap + ia * a_len * f,
                b: bp + ib * e.packed_len() * f,
                c: None,
                y: yp + out * y_len * f,
            }
        };
        // SAFETY: every offset is inside the lengths checked above, and the
        // output matrices are disjoint.
        unsafe { e.tiles(self.pairs.len(), at) }
    }
}

impl BatchedMatMul {
    /// A right operand of fewer columns than a vector (attention scores of one
    /// query, a matrix times a vector): a panel would leave most lanes idle,
    /// so each output is the dot product of a row of `a` with a column of
    /// `b`, transposed into `scratch` (`n * k` of it per matrix of `b`).
    fn narrow(&self, a: &[f32], b: &[f32], y: &mut [f32], scratch: &mut [f32]) {
        let e = &self.e;
        let (k, n) = (e.k, e.n);
        let (a_len, b_len, y_len) = (e.m * k, k * n, e.m * n);
        if b_len == 0 {
            y[..self.pairs.len() * y_len].fill(0.0);
            return;
        }
        for (bt, b) in scratch
            .chunks_exact_mut(b_len)
            .zip(b.chunks_exact(b_len))
            .take(self.b_matrices)
        {
            for (j, column) in bt.chunks_exact_mut(k).enumerate() {
                for (kk, x) in column.iter_mut().enumerate() {
                    *x = b[kk * n + j];
                }
            }
        }
        let chunks = e.m.div_ceil(NARROW_ROWS);
        let (ap, bp, yp) = (
            a.as_ptr() as usize,
            scratch.as_ptr() as usize,
            y.as_mut_ptr() as usize,
        );
        let f = std::mem::size_of::<f32>();
        par::for_each(self.pairs.len() * chunks, |i| {
            let ((ia, ib), row0) = (self.pairs[i / chunks], (i % chunks) * NARROW_ROWS);
            let task = NarrowRows {
                k,
                n,
                rows: NARROW_ROWS.min(e.m - row0),
                a: (ap + (ia * a_len + row0 * k) * f) as *const f32,
                bt: (bp + ib * b_len * f) as *const f32,
                y: (yp + ((i / chunks) * y_len + row0 * n) * f) as *mut f32,
            };
            // SAFETY: the offsets lie inside the lengths `run` checked; each
            // task writes its own rows of its own product.
            unsafe { run_vectorized(e.lanes, &task) }
        });
    }
}

/// Output rows per task of a narrow product.
const NARROW_ROWS: usize = 64;

/// `rows` rows of a narrow product: row `i`, column `j` is the dot product of
/// row `i` of `a` and row `j` of `bt` (`b` transposed), `k` long.
struct NarrowRows {
    k: usize,
    n: usize,
    rows: usize,
    a: *const f32,
    bt: *const f32,
    y: *mut f32,
}

impl VectorKernel for NarrowRows {
    #[inline(always)]
    unsafe fn run<V: Vector>(&self) {
        for i in 0..self.rows {
            for j in 0..self.n {
                let (a, bt) = (self.a.add(i * self.k), self.bt.add(j * self.k));
                *self.y.add(i * self.n + j) = dot::<V>(a, bt, self.k);
            }
        }
    }
}

/// Rows `row0..row0 + tile_rows` (or fewer at the end) times one panel of columns.
struct DenseTile<'a> {
    e: &'a Extents,
    panel: usize,
    row0: usize,
    /// Row 0 of the left matrix.
    a: *const f32,
    /// The packed right matrix.
    b: *const f32,
    /// Row 0 of the added `[m][n]` matrix, if any.
    c: Option<*const f32>,
    /// Row 0 of the output matrix.
    y: *mut f32,
}

impl VectorKernel for DenseTile<'_> {
    #[inline(always)]
    unsafe fn run<V: Vector>(&self) {
        match self.e.vectors {
            1 => self.tile::<V, 1>(),
            2 => self.tile::<V, 2>(),
            _ => self.tile::<V, PANEL_VECTORS>(),
        }
    }
}

impl DenseTile<'_> {
    /// The tile's rows in runs of 8, 4, 2 and 1 (as many as are left), each
    /// run one register block of `P` vectors per row.
    #[inline(always)]
    unsafe fn tile<V: Vector, const P: usize>(&self) {
        let end = self.e.m.min(self.row0 + self.e.tile_rows());
        let mut row = self.row0;
        while row < end {
            row += match end - row {
                8.. => self.rows::<V, P, 8>(row),
                4.. => self.rows::<V, P, 4>(row),
                2.. => self.rows::<V, P, 2>(row),
                _ => self.rows::<V, P, 1>(row),
            };
        }
    }

    /// Rows `row0..row0 + R` times the panel; returns `R`.
    #[inline(always)]
    unsafe fn rows<V: Vector, const P: usize, const R: usize>(&self, row0: usize) -> usize {
        let (e, nb) = (self.e, self.e.nb());
        let a = self.a.add(row0 * e.k);
        let mut wp = self.b.add(self.panel * e.k * nb);
        let mut acc = [[V::splat(0.0); P]; R];
        for kk in 0..e.k {
            let w: [V; P] = array_of(V::splat(0.0), |v| V::load(wp.add(v * V::LANES)));
            for (r, row) in acc.iter_mut().enumerate() {
                let s = V::splat(*a.add(r * e.k + kk));
                for (x, &wv) in row.iter_mut().zip(&w) {
                    *x = V::fma(s, wv, *x);
                }
            }
            wp = wp.add(nb);
        }
        let j0 = self.panel * nb;
        let cols = (e.n - j0).min(nb);
        for (r, row) in acc.iter().enumerate() {
            let at = (row0 + r) * e.n + j0;
            let out = self.y.add(at);
            let c = self.c.map(|c| c.add(at));
            if cols == nb {
                for (v, &x) in row.iter().enumerate() {
                    let o = v * V::LANES;
                    let x = match c {
                        Some(c) => V::add(x, V::load(c.add(o))),
                        None => x,
                    };
                    x.store(out.add(o));
                }
            } else {
                // The last panel: through a buffer, as its columns end mid-vector.
                let mut buf = [0f32; 64];
                for (v, &x) in row.iter().enumerate() {
                    x.store(buf.as_mut_ptr().add(v * V::LANES));
                }
                for (j, &x) in buf[..cols].iter().enumerate() {
                    *out.add(j) = x + c.map_or(0.0, |c| *c.add(j));
                }
            }
        }
        R
    }
}
