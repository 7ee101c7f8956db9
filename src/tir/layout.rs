//! Buffer layouts for storage flattening: an index map from a tensor's logical index to
//! a physical multi-dimensional index, flattened row-major over the physical shape.
//!
//! A layout is a list of physical dimensions, each a whole logical axis, or the outer or
//! inner part of a logical axis blocked by a factor. NCHW16c is
//! `[Axis(0), Outer(1, 16), Axis(2), Axis(3), Inner(1, 16)]`: physical shape
//! `[N, ceil(C/16), H, W, 16]`, the last block padded when 16 does not divide C.

use super::error::TirError;
use super::expr::Expr;

/// One dimension of a physical buffer, derived from a logical axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PhysDim {
    /// The whole logical axis.
    Axis(usize),
    /// `floordiv(index[axis], factor)`.
    Outer(usize, i64),
    /// `floormod(index[axis], factor)`.
    Inner(usize, i64),
}

/// How a logical index maps to the dimensions of a physical buffer, outer first.
#[derive(Clone, Debug, PartialEq)]
pub struct BufferLayout {
    /// The physical dimensions, outer to inner.
    pub dims: Vec<PhysDim>,
}

impl BufferLayout {
    /// The identity (row-major) layout of an `ndim`-dimensional tensor.
    pub fn row_major(ndim: usize) -> BufferLayout {
        BufferLayout {
            dims: (0..ndim).map(PhysDim::Axis).collect(),
        }
    }

    /// Checks that every logical axis of an `ndim`-dimensional tensor is mapped: either
    /// whole once, or once as an outer and once as an inner part with the same factor.
    pub fn validate(&self, ndim: usize, tensor: &str) -> Result<(), TirError> {
        for a in 0..ndim {
            let whole = self.dims.iter().filter(|d| **d == PhysDim::Axis(a)).count();
            // The factors of the dims that are `part` of axis `a`.
            let factors = |part: fn(usize, i64) -> PhysDim| -> Vec<i64> {
                let dims = self.dims.iter();
                dims.filter(|d| **d == part(a, factor(d)))
                    .map(factor)
                    .collect()
            };
            let (outer, inner) = (factors(PhysDim::Outer), factors(PhysDim::Inner));
            let ok = (whole == 1 && outer.is_empty() && inner.is_empty())
                || (whole == 0
                    && outer.len() == 1
                    && inner.len() == 1
                    && outer[0] == inner[0]
                    && outer[0] > 0);
            if !ok {
                return Err(TirError::Lower(format!(
                    "layout of `{tensor}` does not map logical axis {a} exactly once"
                )));
            }
        }
        if let Some(d) = self.dims.iter().find(|d| axis(d) >= ndim) {
            return Err(TirError::Lower(format!(
                "layout of `{tensor}` names axis {} of a {ndim}-d tensor",
                axis(d)
            )));
        }
        Ok(())
    }

    /// The physical extents of a buffer of logical extents `logical`.
    pub fn physical_shape(&self, logical: &[Expr]) -> Vec<Expr> {
        self.dims
            .iter()
            .map(|d| match *d {
                PhysDim::Axis(a) => logical[a].clone(),
                PhysDim::Outer(a, f) => (logical[a].clone() + (f - 1)).floordiv(f),
                PhysDim::Inner(_, f) => Expr::Int(f),
            })
            .collect()
    }

    /// The physical index of logical index `idx`.
    pub fn physical_index(&self, idx: &[Expr]) -> Vec<Expr> {
        self.dims
            .iter()
            .map(|d| match *d {
                PhysDim::Axis(a) => idx[a].clone(),
                PhysDim::Outer(a, f) => idx[a].clone().floordiv(f),
                PhysDim::Inner(a, f) => idx[a].clone().floormod(f),
            })
            .collect()
    }

    /// The flat offset of a logical index in a buffer of logical extents `shape`.
    pub fn flatten(&self, idx: &[Expr], shape: &[Expr]) -> Expr {
        let phys = self.physical_index(idx);
        let pshape = self.physical_shape(shape);
        phys.into_iter()
            .zip(pshape)
            .fold(Expr::Int(0), |acc, (i, e)| acc * e + i)
    }

    /// Number of elements of the physical buffer.
    pub fn size(&self, shape: &[Expr]) -> Expr {
        self.physical_shape(shape)
            .into_iter()
            .fold(Expr::Int(1), |a, e| a * e)
    }

    /// Same as [`Self::flatten`] on constants.
    pub fn flatten_const(&self, idx: &[i64], shape: &[i64]) -> i64 {
        let mut flat = 0;
        for d in &self.dims {
            let (i, e) = match *d {
                PhysDim::Axis(a) => (idx[a], shape[a]),
                PhysDim::Outer(a, f) => (idx[a].div_euclid(f), (shape[a] + f - 1) / f),
                PhysDim::Inner(a, f) => (idx[a].rem_euclid(f), f),
            };
            flat = flat * e + i;
        }
        flat
    }

    /// Elements of the physical buffer of constant logical `shape`.
    pub fn size_const(&self, shape: &[i64]) -> i64 {
        self.dims
            .iter()
            .map(|d| match *d {
                PhysDim::Axis(a) => shape[a],
                PhysDim::Outer(a, f) => (shape[a] + f - 1) / f,
                PhysDim::Inner(_, f) => f,
            })
            .product()
    }

    /// Converts a row-major logical array into this layout (padding is filled with `pad`).
    pub fn pack(&self, shape: &[i64], data: &[f64], pad: f64) -> Vec<f64> {
        let mut out = vec![pad; self.size_const(shape) as usize];
        for (flat, v) in data.iter().enumerate() {
            let idx = super::expr::unflatten(flat as i64, shape);
            out[self.flatten_const(&idx, shape) as usize] = *v;
        }
        out
    }

    /// Converts a buffer in this layout back to a row-major logical array.
    pub fn unpack(&self, shape: &[i64], data: &[f64]) -> Vec<f64> {
        let n: i64 = shape.iter().product();
        (0..n)
            .map(|flat| {
                data[self.flatten_const(&super::expr::unflatten(flat, shape), shape) as usize]
            })
            .collect()
    }
}

fn axis(d: &PhysDim) -> usize {
    match *d {
        PhysDim::Axis(a) | PhysDim::Outer(a, _) | PhysDim::Inner(a, _) => a,
    }
}

fn factor(d: &PhysDim) -> i64 {
    match *d {
        PhysDim::Axis(_) => 1,
        PhysDim::Outer(_, f) | PhysDim::Inner(_, f) => f,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nchw16c_maps_channels_into_blocks() {
        let l = BufferLayout {
            dims: vec![
                PhysDim::Axis(0),
                PhysDim::Outer(1, 16),
                PhysDim::Axis(2),
                PhysDim::Axis(3),
                PhysDim::Inner(1, 16),
            ],
        };
        l.validate(4, "x").unwrap();
        let shape = [1, 20, 2, 3];
        // physical [1, 2, 2, 3, 16]: element (0, 17, 1, 2) is at block 1, lane 1.
        assert_eq!(l.size_const(&shape), 2 * 2 * 3 * 16);
        assert_eq!(
            l.flatten_const(&[0, 17, 1, 2], &shape),
            // block 1 of 2 at batch 0, then h=1 of 2, w=2 of 3, lane 1
            ((2 + 1) * 3 + 2) * 16 + 1
        );
        let data: Vec<f64> = (0..120).map(|v| v as f64).collect();
        assert_eq!(l.unpack(&shape, &l.pack(&shape, &data, 0.0)), data);
        assert!(BufferLayout {
            dims: vec![PhysDim::Axis(0)]
        }
        .validate(2, "y")
        .is_err());
    }
}
