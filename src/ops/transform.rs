//! Execution of the transform ops (`LayoutTransform`, `PadWith`, `Crop`), for
//! the reference executor. Undef padding is written as NaN (0 for integer
//! types) so that a read of it shows; a crop checks its assumption, so a wrong
//! assumption is an error here rather than a silently wrong rewrite later.

use super::onnx::*;
use super::shape::*;
use super::{Assumption, PadValue};
use super::{Crop, LayoutTransform, OpDef, OpError, PadWith};
use crate::core::with_fill;
use crate::core::{numel, strides, Tensor, ValueType};

impl OpDef for LayoutTransform {
    fn name(&self) -> &'static str {
        "LayoutTransform"
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let LayoutTransform {
            from, to, logical, ..
        } = self;
        let x = sole_input(inputs)?;
        let want = from.physical_shape(logical)?;
        if x.shape != want {
            return Err(OpError::Shape(format!(
                "input shape {:?} is not {logical:?} laid out in {from} ({want:?})",
                x.shape
            )));
        }
        let shape = to.physical_shape(logical)?;
        Ok(vec![ValueType::new(x.dtype, shape)])
    }

    /// The runtime's native kernel moves f32 data; other types (the bytes
    /// of a quantized input) move by the gathers found from `eval`.
    fn moves_data(&self) -> bool {
        true
    }

    fn eval(&self, x: &[&Tensor], _: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let t = self
            .from
            .from_physical(x[0], &self.logical)
            .and_then(|t| self.to.to_physical(&t, self.pad.fill()))?;
        Ok(vec![t])
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let LayoutTransform {
            from,
            to,
            logical,
            pad,
        } = self;

        // Between two permutations a transform is one Transpose.
        if let (Some(f), Some(t)) = (from.as_permutation(), to.as_permutation()) {
            let perm: Vec<usize> = t
                .iter()
                .map(|a| f.iter().position(|b| b == a).expect("same rank"))
                .collect();
            return cx.single(
                "Transpose",
                cx.inputs,
                vec![("perm", Attr::Ints(i64s(&perm)))],
            );
        }
        let x = cx.input(0);
        let l = from_physical(cx.b, &x, from, logical);
        Ok(vec![to_physical(
            cx.b,
            &l,
            to,
            logical,
            cx.in_types[0].dtype,
            *pad,
        )])
    }
}

/// The shape of `x` grown (`grow`) or shrunk by `begins`/`ends` on each axis.
fn resized(x: &ValueType, begins: &[usize], ends: &[usize], grow: bool) -> Res<Vec<ValueType>> {
    if begins.len() != x.shape.len() || ends.len() != x.shape.len() {
        return Err(OpError::Shape(format!(
            "amounts {begins:?}/{ends:?} do not match rank of {:?}",
            x.shape
        )));
    }
    let mut shape = Vec::with_capacity(x.shape.len());
    for (i, &d) in x.shape.iter().enumerate() {
        let (b, e) = (begins[i], ends[i]);
        let extent = if grow {
            d.checked_add(b).and_then(|v| v.checked_add(e))
        } else {
            d.checked_sub(b).and_then(|v| v.checked_sub(e))
        };
        shape.push(extent.ok_or_else(|| {
            OpError::Shape(format!(
                "amounts {begins:?}/{ends:?} do not fit axis {i} of {:?}",
                x.shape
            ))
        })?);
    }
    Ok(vec![ValueType::new(x.dtype, shape)])
}

impl OpDef for PadWith {
    fn name(&self) -> &'static str {
        "PadWith"
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        resized(sole_input(inputs)?, &self.begins, &self.ends, true)
    }

    fn eval(&self, x: &[&Tensor], _: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        Ok(vec![pad_with(x[0], &self.begins, &self.ends, self.value)])
    }

    fn to_onnx(&self, cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let PadWith {
            begins,
            ends,
            value,
        } = self;
        Ok(vec![pad(
            cx.b,
            &cx.inputs[0],
            cx.in_types[0].dtype,
            &i64s(begins),
            &i64s(ends),
            fill_value(*value),
        )])
    }
}

impl OpDef for Crop {
    fn name(&self) -> &'static str {
        "Crop"
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        resized(sole_input(inputs)?, &self.begins, &self.ends, false)
    }

    /// A crop checks the assumption it carries.
    fn eval(&self, x: &[&Tensor], _: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        Ok(vec![crop(
            x[0],
            &self.begins,
            &self.ends,
            self.assume.as_ref(),
        )?])
    }

    fn to_onnx(&self, cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let Crop { begins, ends, .. } = self;
        Ok({
            let shape = &cx.in_types[0].shape;
            let axes: Vec<usize> = (0..shape.len())
                .filter(|&a| begins[a] != 0 || ends[a] != 0)
                .collect();
            if axes.is_empty() {
                vec![cx.input(0)]
            } else {
                let starts: Vec<i64> = axes.iter().map(|&a| begins[a] as i64).collect();
                let stops: Vec<i64> = axes.iter().map(|&a| (shape[a] - ends[a]) as i64).collect();
                vec![slice(cx.b, &cx.inputs[0], &i64s(&axes), &starts, &stops)]
            }
        })
    }
}

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
) -> Result<Tensor, OpError> {
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
            return Err(OpError::Value(format!(
                "{a} does not hold: element {off} of the cropped tensor is {}",
                values[off]
            )));
        }
    }
    Ok(Tensor::new(shape, x.data.gather(kept.into_iter())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::tests::shape_and_layout;
    use crate::core::{Digit, Layout, ValueType};
    use crate::ops::testutil::eval1;
    use crate::ops::testutil::iota;
    use crate::ops::Op;
    use proptest::prelude::*;

    #[test]
    fn pad_and_crop_by_hand() {
        let x = Tensor::from_f32(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]);
        let pad = Op::PadWith(PadWith {
            begins: vec![1, 0],
            ends: vec![0, 1],
            value: PadValue::Known(9.0),
        });
        let p = eval1(pad.clone(), &[&x]);
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
        assert_eq!(eval1(c, &[&p]), x);
        // A wrong assumption is caught.
        let wrong = Op::Crop(Crop {
            begins: vec![1, 0],
            ends: vec![0, 1],
            assume: Some(Assumption::new(0.0, "test")),
        });
        let e = crate::ops::testutil::try_eval(wrong, &[&p])
            .unwrap_err()
            .to_string();
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
        let y = eval1(t.clone(), &[&x]);
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
        assert!(eval1(undef.clone(), &[&x]).to_f32()[3].is_nan());
    }

    /// Runs one op through the reference executor.
    fn reference(op: Op, x: &Tensor) -> Tensor {
        let ty = ValueType::new(x.dtype(), x.shape.clone());
        let out = crate::ops::infer_outputs(&op, &[&ty]).unwrap();
        crate::ops::eval_op(&op, &[x], &out).unwrap().remove(0)
    }

    /// The physical buffer built from the reference executor's own ops: pad
    /// every blocked axis up to a multiple of its block (constant `fill`),
    /// reshape each axis into its digits, transpose the digits into place.
    fn via_reference_ops(l: &Layout, x: &Tensor, fill: f32) -> Tensor {
        use crate::ops::{Pad, PadMode, Reshape, Transpose};
        let r = l.rank();
        let ends: Vec<i64> = (0..r)
            .map(|a| (l.padded_extent(a, x.shape[a]) - x.shape[a]) as i64)
            .collect();
        let padded = reference(
            Op::Pad(Pad {
                begins: vec![0; r],
                ends,
                mode: PadMode::Constant(fill),
            }),
            x,
        );
        let mut digits = Vec::new();
        let mut shape = Vec::new();
        for a in 0..r {
            let block: usize = l.factors(a).iter().product();
            shape.push(padded.shape[a] / block);
            digits.push(Digit { axis: a, level: 0 });
            for (k, &f) in l.factors(a).iter().enumerate() {
                shape.push(f);
                digits.push(Digit {
                    axis: a,
                    level: k + 1,
                });
            }
        }
        let split = reference(Op::Reshape(Reshape { shape }), &padded);
        let perm = l
            .order()
            .iter()
            .map(|d| digits.iter().position(|e| e == d).unwrap())
            .collect();
        reference(Op::Transpose(Transpose { perm }), &split)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn physical_buffer_agrees_with_the_reference_executor((shape, l) in shape_and_layout()) {
            let x = iota(&shape);
            let want = via_reference_ops(&l, &x, -1.0);
            prop_assert_eq!(&want.shape, &l.physical_shape(&shape).unwrap());
            prop_assert_eq!(l.to_physical(&x, -1.0).unwrap(), want);
        }

    }
}
