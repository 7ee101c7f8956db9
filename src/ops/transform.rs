//! Execution of the transform ops (`LayoutTransform`, `PadWith`, `Crop`), for
//! the reference executor. Undef padding is written as NaN (0 for integer
//! types) so that a read of it shows; a crop checks its assumption, so a wrong
//! assumption is an error here rather than a silently wrong rewrite later.

use super::{Assumption, PadValue};
use crate::core::with_fill;
use crate::graph::{numel, strides, Op, Tensor};
use crate::ops::{Crop, LayoutTransform, PadWith};

/// Row-major offsets, in `outer`, of every element of a box of shape `inner`
/// placed at `begins`.
fn box_offsets(outer: &[usize], inner: &[usize], begins: &[usize]) -> Vec<usize> {
    let st = strides(outer);
    let n = numel(inner);
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; inner.len()];
    for _ in 0..n {
        out.push(
            idx.iter()
                .zip(begins)
                .zip(&st)
                .map(|((i, b), s)| (i + b) * s)
                .sum(),
        );
        for a in (0..idx.len()).rev() {
            idx[a] += 1;
            if idx[a] < inner[a] {
                break;
            }
            idx[a] = 0;
        }
    }
    out
}

fn pad_with(x: &Tensor, begins: &[usize], ends: &[usize], value: PadValue) -> Tensor {
    let shape: Vec<usize> = (0..x.rank())
        .map(|i| x.shape[i] + begins[i] + ends[i])
        .collect();
    let n = x.numel();
    let mut src = vec![n; numel(&shape)];
    for (i, off) in box_offsets(&shape, &x.shape, begins)
        .into_iter()
        .enumerate()
    {
        src[off] = i;
    }
    Tensor::new(
        shape,
        with_fill(&x.data, value.fill()).gather(src.into_iter()),
    )
}

fn crop(
    x: &Tensor,
    begins: &[usize],
    ends: &[usize],
    assume: Option<&Assumption>,
) -> Result<Tensor, String> {
    let shape: Vec<usize> = (0..x.rank())
        .map(|i| x.shape[i] - begins[i] - ends[i])
        .collect();
    let kept = box_offsets(&x.shape, &shape, begins);
    if let Some(a) = assume {
        let mut inside = vec![false; x.numel()];
        kept.iter().for_each(|&o| inside[o] = true);
        let values = x.data.to_f64();
        let holds = |v: f64| v == a.value as f64 || (v.is_nan() && a.value.is_nan());
        if let Some(off) = (0..values.len()).find(|&o| !inside[o] && !holds(values[o])) {
            return Err(format!(
                "{a} does not hold: element {off} of the cropped tensor is {}",
                values[off]
            ));
        }
    }
    Ok(Tensor::new(shape, x.data.gather(kept.into_iter())))
}

/// Runs a transform op on its input; `None` when `op` is not a transform.
pub fn eval_transform(op: &Op, x: &Tensor) -> Option<Result<Tensor, String>> {
    Some(match op {
        Op::LayoutTransform(LayoutTransform {
            from,
            to,
            logical,
            pad,
        }) => from
            .from_physical(x, logical)
            .and_then(|t| to.to_physical(&t, pad.fill()))
            .map_err(|e| e.to_string()),
        Op::PadWith(PadWith {
            begins,
            ends,
            value,
        }) => Ok(pad_with(x, begins, ends, *value)),
        Op::Crop(Crop {
            begins,
            ends,
            assume,
        }) => crop(x, begins, ends, assume.as_ref()),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Layout;

    #[test]
    fn pad_and_crop_by_hand() {
        let x = Tensor::from_f32(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]);
        let pad = Op::PadWith(PadWith {
            begins: vec![1, 0],
            ends: vec![0, 1],
            value: PadValue::Known(9.0),
        });
        let p = eval_transform(&pad, &x).unwrap().unwrap();
        assert_eq!(p.shape, vec![3, 3]);
        assert_eq!(
            p.to_f32(),
            vec![9.0, 9.0, 9.0, 1.0, 2.0, 9.0, 3.0, 4.0, 9.0]
        );
        // crop(pad(x)) = x, and the crop may assume the 9s.
        let c = Op::Crop(Crop {
            begins: vec![1, 0],
            ends: vec![0, 1],
            assume: Some(Assumption::new(9.0, "test")),
        });
        assert_eq!(eval_transform(&c, &p).unwrap().unwrap(), x);
        // A wrong assumption is caught.
        let wrong = Op::Crop(Crop {
            begins: vec![1, 0],
            ends: vec![0, 1],
            assume: Some(Assumption::new(0.0, "test")),
        });
        let e = eval_transform(&wrong, &p).unwrap().unwrap_err();
        assert!(e.contains("does not hold") && e.contains("test"), "{e}");
    }

    #[test]
    fn layout_transform_pads_with_its_value() {
        let x = Tensor::from_f32(vec![1, 3, 1, 1], vec![1.0, 2.0, 3.0]);
        let t = Op::LayoutTransform(LayoutTransform {
            from: Layout::parse("NCHW").unwrap(),
            to: Layout::parse("NCHW4c").unwrap(),
            logical: vec![1, 3, 1, 1],
            pad: PadValue::Known(0.0),
        });
        let y = eval_transform(&t, &x).unwrap().unwrap();
        assert_eq!(y.shape, vec![1, 1, 1, 1, 4]);
        assert_eq!(y.to_f32(), vec![1.0, 2.0, 3.0, 0.0]);
        let Op::LayoutTransform(LayoutTransform {
            from, to, logical, ..
        }) = t
        else {
            unreachable!()
        };
        let undef = Op::LayoutTransform(LayoutTransform {
            from,
            to,
            logical,
            pad: PadValue::Undef,
        });
        assert!(eval_transform(&undef, &x).unwrap().unwrap().to_f32()[3].is_nan());
    }
}
