//! Micro-kernels: Rust functions that generated code calls for a tensorized block.
//!
//! The ABI is one [`KernelRegion`] per argument (output first, then inputs, the order of
//! `Stmt::KernelCall`), filled on the stack by generated code: the flat buffer's base
//! pointer, the flat offset of the region's origin, and per logical axis the region's
//! extent and the buffer's stride. Only strided (permuted row-major) buffers have such a
//! description; a blocked layout is refused at compile time.

use std::collections::HashMap;
use std::sync::Arc;

use crate::tir::KernelError;

/// Largest tensor rank a kernel argument may have.
pub const MAX_RANK: usize = 8;

/// A region of a flat f32 buffer handed to a micro-kernel. Only generated code creates
/// regions, and it proves (or checks before the call) that every element of the region
/// lies inside its buffer; that is what makes the accessors below sound.
#[repr(C)]
#[derive(Debug)]
pub struct KernelRegion {
    base: *mut f32,
    offset: i64,
    rank: i64,
    extents: [i64; MAX_RANK],
    strides: [i64; MAX_RANK],
}

/// Byte offsets of the fields, for the code generator.
pub(crate) mod layout {
    pub const BASE: i32 = 0;
    pub const OFFSET: i32 = 8;
    pub const RANK: i32 = 16;
    pub const EXTENTS: i32 = 24;
    pub const STRIDES: i32 = EXTENTS + 8 * super::MAX_RANK as i32;
    pub const SIZE: u32 = STRIDES as u32 + 8 * super::MAX_RANK as u32;
}

impl KernelRegion {
    /// The number of axes of the region.
    pub fn rank(&self) -> usize {
        self.rank as usize
    }
    /// The extent of each axis of the region.
    pub fn extents(&self) -> &[i64] {
        &self.extents[..self.rank()]
    }
    /// Element strides of the buffer along each logical axis.
    pub fn strides(&self) -> &[i64] {
        &self.strides[..self.rank()]
    }

    fn element(&self, idx: &[i64]) -> Result<*mut f32, KernelError> {
        if idx.len() != self.rank()
            || idx
                .iter()
                .zip(self.extents())
                .any(|(i, e)| *i < 0 || i >= e)
        {
            return Err(KernelError(format!(
                "kernel access {idx:?} is outside its region {:?}",
                self.extents()
            )));
        }
        let off = self.offset
            + idx
                .iter()
                .zip(self.strides())
                .map(|(i, s)| i * s)
                .sum::<i64>();
        // SAFETY: inside the region, which generated code proved inside the buffer.
        Ok(unsafe { self.base.offset(off as isize) })
    }

    /// The element at `idx` (relative to the region's origin).
    pub fn get(&self, idx: &[i64]) -> Result<f32, KernelError> {
        // SAFETY: `element` checked the index against the region.
        self.element(idx).map(|p| unsafe { *p })
    }

    /// Writes element `idx` of the region; an error when it lies outside.
    pub fn set(&mut self, idx: &[i64], v: f32) -> Result<(), KernelError> {
        // SAFETY: as in `get`; the region's buffer is not shared with another argument.
        self.element(idx).map(|p| unsafe { *p = v })
    }

    /// A view of `base` with the given extents and strides, for tests of kernels.
    #[cfg(test)]
    pub(crate) fn view(base: *mut f32, extents: &[i64], strides: &[i64]) -> KernelRegion {
        let mut r = KernelRegion {
            base,
            offset: 0,
            rank: extents.len() as i64,
            extents: [0; MAX_RANK],
            strides: [0; MAX_RANK],
        };
        r.extents[..extents.len()].copy_from_slice(extents);
        r.strides[..strides.len()].copy_from_slice(strides);
        r
    }

    /// Pointer to the region's origin, for kernels that do their own indexing with
    /// [`Self::strides`] inside [`Self::extents`].
    pub fn origin_ptr(&self) -> *mut f32 {
        // SAFETY: the origin is inside the buffer whenever the region is not empty; for
        // an empty region the pointer is not dereferenced by a correct kernel.
        self.base.wrapping_offset(self.offset as isize)
    }
}

/// A micro-kernel: gets the output region first, then the input regions.
pub type Kernel = Arc<dyn Fn(&mut [KernelRegion]) -> Result<(), KernelError> + Send + Sync>;

/// Micro-kernels by name, as `tensorize` names them.
#[derive(Clone, Default)]
pub struct KernelTable {
    kernels: HashMap<String, Kernel>,
}

impl KernelTable {
    /// An empty table.
    pub fn new() -> KernelTable {
        KernelTable::default()
    }

    /// The kernels this crate provides: `gemm_update`.
    pub fn standard() -> KernelTable {
        KernelTable::new().with("gemm_update", Arc::new(gemm_update))
    }

    /// The table with kernel `k` registered as `name`.
    pub fn with(mut self, name: &str, k: Kernel) -> KernelTable {
        self.kernels.insert(name.to_string(), k);
        self
    }

    /// The kernel registered as `name`.
    pub fn get(&self, name: &str) -> Option<&Kernel> {
        self.kernels.get(name)
    }
}

/// `out[i, j] += sum_kk a[i, kk] * b[kk, j]` on 2-d regions (`out` m×n, `a` m×k, `b`
/// k×n). Rows of `out` and `b` with unit stride go through an AVX2+FMA loop when the CPU
/// has it (8 columns per step), everything else through the scalar loop.
pub fn gemm_update(r: &mut [KernelRegion]) -> Result<(), KernelError> {
    let [out, a, b] = r else {
        return Err(KernelError(format!(
            "gemm_update takes 3 regions, got {}",
            r.len()
        )));
    };
    if out.rank() != 2 || a.rank() != 2 || b.rank() != 2 {
        return Err(KernelError("gemm_update takes 2-d regions".into()));
    }
    let (m, n, k) = (out.extents[0], out.extents[1], a.extents[1]);
    if a.extents[0] != m || b.extents() != [k, n] {
        return Err(KernelError(format!(
            "regions do not match: out {:?}, a {:?}, b {:?}",
            out.extents(),
            a.extents(),
            b.extents()
        )));
    }
    let g = Gemm {
        m,
        n,
        k,
        out: out.origin_ptr(),
        os: (out.strides[0], out.strides[1]),
        a: a.origin_ptr(),
        as_: (a.strides[0], a.strides[1]),
        b: b.origin_ptr(),
        bs: (b.strides[0], b.strides[1]),
    };
    #[cfg(target_arch = "x86_64")]
    if g.os.1 == 1
        && g.bs.1 == 1
        && std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma")
    {
        // SAFETY: the CPU has the features; the regions are inside their buffers.
        unsafe { g.avx2() };
        return Ok(());
    }
    // SAFETY: the regions are inside their buffers (see `KernelRegion`).
    unsafe { g.scalar(0) };
    Ok(())
}

/// The operands of one `gemm_update`, as origin pointers and (row, column) strides.
struct Gemm {
    m: i64,
    n: i64,
    k: i64,
    out: *mut f32,
    os: (i64, i64),
    a: *const f32,
    as_: (i64, i64),
    b: *const f32,
    bs: (i64, i64),
}

impl Gemm {
    /// Columns `j0..n`, one element at a time.
    unsafe fn scalar(&self, j0: i64) {
        for i in 0..self.m {
            for j in j0..self.n {
                let o = self.out.offset((i * self.os.0 + j * self.os.1) as isize);
                let mut acc = *o;
                for kk in 0..self.k {
                    acc += *self.a.offset((i * self.as_.0 + kk * self.as_.1) as isize)
                        * *self.b.offset((kk * self.bs.0 + j * self.bs.1) as isize);
                }
                *o = acc;
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn avx2(&self) {
        use std::arch::x86_64::*;
        let full = self.n / 8 * 8;
        for i in 0..self.m {
            let orow = self.out.offset((i * self.os.0) as isize);
            let mut j = 0;
            while j < full {
                let mut acc = _mm256_loadu_ps(orow.offset(j as isize));
                for kk in 0..self.k {
                    let av =
                        _mm256_set1_ps(*self.a.offset((i * self.as_.0 + kk * self.as_.1) as isize));
                    let bv = _mm256_loadu_ps(self.b.offset((kk * self.bs.0 + j) as isize));
                    acc = _mm256_fmadd_ps(av, bv, acc);
                }
                _mm256_storeu_ps(orow.offset(j as isize), acc);
                j += 8;
            }
        }
        self.scalar(full);
    }
}
