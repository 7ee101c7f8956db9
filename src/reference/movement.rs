//! Data movement on any dtype: each op computes the source index of every output
//! element and gathers (see `index`).

use super::index::{affine_indices, broadcast_indices, concat_data, gather_axes};
use crate::graph::{strides, PadMode, SliceAxis, Tensor, ValueType};

pub(super) fn transpose(perm: &[usize], x: &Tensor, out: &ValueType) -> Tensor {
    let in_strides = strides(&x.shape);
    let steps: Vec<isize> = perm.iter().map(|&p| in_strides[p] as isize).collect();
    let src = affine_indices(&out.shape, 0, &steps);
    Tensor::new(out.shape.clone(), x.data.gather(src.into_iter()))
}

pub(super) fn expand(x: &Tensor, out: &ValueType) -> Tensor {
    let src = broadcast_indices(&x.shape, &out.shape);
    Tensor::new(out.shape.clone(), x.data.gather(src.into_iter()))
}

fn identity_maps(shape: &[usize]) -> Vec<Vec<Option<usize>>> {
    shape.iter().map(|&n| (0..n).map(Some).collect()).collect()
}

pub(super) fn tile(x: &Tensor, out: &ValueType) -> Result<Tensor, String> {
    let maps: Vec<Vec<Option<usize>>> = x
        .shape
        .iter()
        .zip(&out.shape)
        .map(|(&n, &m)| (0..m).map(|o| Some(o % n)).collect())
        .collect();
    gather_axes(x, &maps, 0.0)
}

pub(super) fn slice(axes: &[SliceAxis], x: &Tensor, out: &ValueType) -> Result<Tensor, String> {
    let mut maps = identity_maps(&x.shape);
    let mut seen = vec![false; x.rank()];
    for a in axes {
        if std::mem::replace(&mut seen[a.axis], true) {
            return Err(format!("axis {} is sliced twice", a.axis));
        }
        let dim = x.shape[a.axis] as i64;
        maps[a.axis] = (0..out.shape[a.axis] as i64)
            .map(|j| {
                let c = a.start + j * a.step;
                (0..dim).contains(&c).then_some(c as usize)
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| format!("slice {a:?} reads outside axis extent {dim}"))?
            .into_iter()
            .map(Some)
            .collect();
    }
    gather_axes(x, &maps, 0.0)
}

pub(super) fn split(
    axis: usize,
    sizes: &[usize],
    x: &Tensor,
    outputs: &[ValueType],
) -> Result<Vec<Tensor>, String> {
    let mut start = 0;
    sizes
        .iter()
        .zip(outputs)
        .map(|(&size, out)| {
            let mut maps = identity_maps(&x.shape);
            maps[axis] = (start..start + size).map(Some).collect();
            start += size;
            let t = gather_axes(x, &maps, 0.0)?;
            debug_assert_eq!(t.shape, out.shape);
            Ok(t)
        })
        .collect()
}

pub(super) fn concat(axis: usize, xs: &[&Tensor], out: &ValueType) -> Result<Tensor, String> {
    // Each input is `outer` blocks of `shape[axis] * inner` elements; the output
    // interleaves the blocks of every input.
    let outer: usize = out.shape[..axis].iter().product();
    let inner: usize = out.shape[axis + 1..].iter().product();
    let mut offsets = Vec::with_capacity(xs.len());
    let mut total = 0;
    for x in xs {
        offsets.push(total);
        total += x.numel();
    }
    let mut src = Vec::with_capacity(out.numel());
    for o in 0..outer {
        for (x, &off) in xs.iter().zip(&offsets) {
            let block = x.shape[axis] * inner;
            src.extend(off + o * block..off + (o + 1) * block);
        }
    }
    let parts: Vec<_> = xs.iter().map(|x| &x.data).collect();
    Ok(Tensor::new(
        out.shape.clone(),
        concat_data(&parts)?.gather(src.into_iter()),
    ))
}

pub(super) fn gather(
    axis: usize,
    x: &Tensor,
    indices: &Tensor,
    out: &ValueType,
) -> Result<Tensor, String> {
    let dim = x.shape[axis];
    let idx = indices
        .data
        .to_i64()
        .into_iter()
        .map(|i| {
            let j = if i < 0 { i + dim as i64 } else { i };
            (0..dim as i64)
                .contains(&j)
                .then_some(j as usize)
                .ok_or_else(|| format!("index {i} is out of range for axis {axis} of extent {dim}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let outer: usize = x.shape[..axis].iter().product();
    let inner: usize = x.shape[axis + 1..].iter().product();
    let mut src = Vec::with_capacity(out.numel());
    for o in 0..outer {
        for &j in &idx {
            let base = (o * dim + j) * inner;
            src.extend(base..base + inner);
        }
    }
    Ok(Tensor::new(
        out.shape.clone(),
        x.data.gather(src.into_iter()),
    ))
}

/// Pad (negative pads crop). Output coordinate `o` reads input `o - begin`; outside
/// the input, constant mode fills, edge clamps, reflect mirrors without repeating
/// the border element.
pub(super) fn pad(
    begins: &[i64],
    mode: PadMode,
    x: &Tensor,
    out: &ValueType,
) -> Result<Tensor, String> {
    let maps = (0..x.rank())
        .map(|ax| {
            let n = x.shape[ax] as i64;
            (0..out.shape[ax] as i64)
                .map(|o| {
                    let c = o - begins[ax];
                    if (0..n).contains(&c) {
                        return Ok(Some(c as usize));
                    }
                    match mode {
                        PadMode::Constant(_) => Ok(None),
                        _ if n == 0 => Err(format!("cannot {mode:?}-pad the empty axis {ax}")),
                        PadMode::Edge => Ok(Some(c.clamp(0, n - 1) as usize)),
                        PadMode::Reflect => Ok(Some(reflect(c, n))),
                    }
                })
                .collect::<Result<Vec<_>, String>>()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let fill = match mode {
        PadMode::Constant(v) => v as f64,
        _ => 0.0,
    };
    gather_axes(x, &maps, fill)
}

/// Mirrors coordinate `c` into `0..n` (n ≥ 1) about the border elements.
fn reflect(c: i64, n: i64) -> usize {
    if n == 1 {
        return 0;
    }
    let period = 2 * (n - 1);
    let m = c.rem_euclid(period);
    (if m < n { m } else { period - m }) as usize
}
