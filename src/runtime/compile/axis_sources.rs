//! The sources of a data movement whose index map splits by axis
//! ([`OpDef::axis_reads`]: transposes, slices, pads, broadcasts, tiles,
//! concatenations), worked out from the layouts' offset tables as rows of
//! consecutive output elements (`gather::rows_of_axes`): a few table
//! lookups per row, where evaluating the op on position tensors took
//! several passes over tensors of i64 (on MobileNetV3Large, the blocked
//! transposes were most of the compile time of each new input shape), and
//! a table of per-element sources still took a pass to write and one to
//! cut into runs (DenseNet121's concatenations).
//!
//! [`OpDef::axis_reads`]: crate::ops::OpDef::axis_reads

use crate::core::numel;
use crate::layout::Layout;
use crate::ops::AxisRead;
use crate::runtime::kernels::gather::{rows_of_axes, Row};

/// A tensor as a data movement sees it: its layout and logical shape.
#[derive(Clone, Copy)]
pub(super) struct Placed<'a> {
    pub layout: &'a Layout,
    pub shape: &'a [usize],
}

/// The rows of every input: output elements at their physical offsets,
/// each from input `k`'s physical elements, when the output axes read input
/// `k` by `reads[k]`. `None` when the reads do not fit the shapes.
pub(super) fn rows(reads: &[Vec<AxisRead>], xs: &[Placed], out: Placed) -> Option<Vec<Row>> {
    let out_tables = out.layout.offset_tables(out.shape).ok()?;
    if reads.len() != xs.len() || out.shape.is_empty() {
        return None;
    }
    let mut rows = vec![];
    for (input, (reads, x)) in reads.iter().zip(xs).enumerate() {
        let tables = read_tables(reads, x, out.shape)?;
        rows.extend(rows_of_axes(&out_tables, &tables, input));
    }
    Some(rows)
}

/// The input offset `k` when the output of a one-input movement is that
/// input's elements `k, k + 1, ...` in order, a view of it (a transpose or
/// a layout transform that only relabels, a slice of outermost rows): the
/// output has no padding, and along every output axis the input offset read
/// moves exactly as the output offset does. Found from the offset tables in
/// time linear in the extents, where the sources take a pass over every
/// element. `None` also when `k` plus the output's length would not fit a
/// u32.
pub(super) fn shift(reads: &[Vec<AxisRead>], xs: &[Placed], out: Placed) -> Option<u32> {
    let ([reads], [x]) = (reads, xs) else {
        return None;
    };
    let len = numel(out.shape);
    if out.shape.is_empty() || out.layout.physical_numel(out.shape).ok()? != len {
        return None;
    }
    let out_tables = out.layout.offset_tables(out.shape).ok()?;
    let mut k: i64 = 0;
    for (read, placed) in read_tables(reads, x, out.shape)?.iter().zip(&out_tables) {
        let mut gaps = (read.iter().zip(placed)).map(|(r, &p)| Some(i64::from((*r)?) - p as i64));
        let first = gaps.next()??;
        if !gaps.all(|g| g == Some(first)) {
            return None;
        }
        k += first;
    }
    let k = u32::try_from(k).ok()?;
    (u64::from(k) + len as u64 <= u64::from(u32::MAX)).then_some(k)
}

/// Per output axis and index, the physical offset in `x` it reads (`None`
/// where it reads nothing), when `reads` fit the shapes.
fn read_tables(reads: &[AxisRead], x: &Placed, out: &[usize]) -> Option<Vec<Vec<Option<u32>>>> {
    let fits = reads.len() == out.len()
        && reads.iter().zip(out).all(|(r, &n)| r.index.len() == n)
        // An input axis no output axis walks is read at index 0 only.
        && (0..x.shape.len()).all(|b| x.shape[b] == 1 || reads.iter().any(|r| r.axis == Some(b)));
    if !fits {
        return None;
    }
    let x_tables = x.layout.offset_tables(x.shape).ok()?;
    reads
        .iter()
        .map(|r| {
            (r.index.iter())
                .map(|&j| match (j, r.axis) {
                    (None, _) => Some(None),
                    (Some(0), None) => Some(Some(0)),
                    (Some(_), None) => None,
                    (Some(j), Some(b)) => Some(Some(*x_tables.get(b)?.get(j)? as u32)),
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{DType, PadValue, Tensor, ValueType};
    use crate::ops::{
        Concat, Expand, LaidOut, Op, Pad, PadMode, Slice, SliceAxis, Tile, Transpose,
    };
    use crate::runtime::compile::Sources;

    /// The sources the compiler finds for any data movement: the laid-out op
    /// evaluated on the positions 1, 2, ... of the inputs' physical elements,
    /// one input's after another's (a constant pad pads with position 0, no
    /// source).
    fn evaluated(op: &Op, xs: &[Placed], out: &Placed) -> Vec<u32> {
        let positions_op = match op {
            Op::Pad(
                p @ Pad {
                    mode: PadMode::Constant(_),
                    ..
                },
            ) => Op::Pad(Pad {
                mode: PadMode::Constant(0.0),
                ..p.clone()
            }),
            op => op.clone(),
        };
        let mut first = 1;
        let positions: Vec<Tensor> = (xs.iter())
            .map(|x| {
                let n = x.layout.physical_numel(x.shape).unwrap() as i64;
                first += n;
                let shape = x.layout.physical_shape(x.shape).unwrap();
                Tensor::from_i64(shape, (first - n..first).collect())
            })
            .collect();
        let laid = Op::InLayout(Box::new(LaidOut {
            inner: positions_op,
            inputs: xs
                .iter()
                .map(|x| (x.layout.clone(), x.shape.to_vec()))
                .collect(),
            outputs: vec![(out.layout.clone(), PadValue::Known(0.0))],
        }));
        let ty = ValueType::new(DType::I64, out.layout.physical_shape(out.shape).unwrap());
        let args: Vec<&Tensor> = positions.iter().collect();
        let got = laid.def().eval(&args, &[ty]).unwrap();
        let source = |p: i64| if p >= 1 { (p - 1) as u32 } else { u32::MAX };
        got[0].data.to_i64().into_iter().map(source).collect()
    }

    /// Every op that reads by axis, between plain, channels-last and
    /// channel-blocked layouts (channels padded to the block), finds the
    /// sources evaluation finds.
    #[test]
    fn axis_reads_find_the_sources_evaluation_finds() {
        let shape = vec![2, 20, 5, 6];
        let slice = |axis, start, end, step| SliceAxis {
            axis,
            start,
            end,
            step,
        };
        let one = |op| (op, vec![shape.clone()]);
        let cases = [
            one(Op::Transpose(Transpose {
                perm: vec![0, 2, 3, 1],
            })),
            one(Op::Transpose(Transpose {
                perm: vec![1, 0, 3, 2],
            })),
            one(Op::Slice(Slice {
                axes: vec![slice(1, 3, 19, 2), slice(3, 5, -1, -2)],
            })),
            one(Op::Pad(Pad {
                begins: vec![0, 3, 1, -2],
                ends: vec![0, 0, 2, 1],
                mode: PadMode::Constant(1.5),
            })),
            one(Op::Pad(Pad {
                begins: vec![0, 0, 2, 1],
                ends: vec![1, 0, 3, 0],
                mode: PadMode::Edge,
            })),
            one(Op::Expand(Expand {
                shape: vec![3, 2, 20, 5, 6],
            })),
            one(Op::Tile(Tile {
                repeats: vec![1, 2, 1, 3],
            })),
            (
                Op::Concat(Concat { axis: 1 }),
                vec![vec![2, 5, 5, 6], shape.clone(), vec![2, 16, 5, 6]],
            ),
            (
                Op::Concat(Concat { axis: 3 }),
                vec![vec![2, 20, 5, 1], shape.clone()],
            ),
        ];
        let layout = |name: &str| Layout::parse(name).unwrap();
        let rank5 = Layout::identity(5).unwrap();
        let mut shifts = 0;
        for (op, x_shapes) in &cases {
            let x_types: Vec<ValueType> = (x_shapes.iter())
                .map(|s| ValueType::new(DType::F32, s.clone()))
                .collect();
            let refs: Vec<&ValueType> = x_types.iter().collect();
            let out_shape = op.def().infer(&refs).unwrap()[0].shape.clone();
            let shape_refs: Vec<&[usize]> = x_shapes.iter().map(|s| &s[..]).collect();
            let reads = op.def().axis_reads(&shape_refs, &out_shape).unwrap();
            for x_name in ["NCHW", "NHWC", "NCHW16c", "NCHW8c"] {
                for out_name in ["NCHW", "NHWC", "NCHW16c"] {
                    let x_layout = layout(x_name);
                    let out_layout = match out_shape.len() {
                        5 => rank5.clone(),
                        _ => layout(out_name),
                    };
                    let xs: Vec<Placed> = (x_shapes.iter())
                        .map(|s| Placed {
                            layout: &x_layout,
                            shape: s,
                        })
                        .collect();
                    let out = Placed {
                        layout: &out_layout,
                        shape: &out_shape,
                    };
                    let mut starts = vec![0];
                    for x in &xs {
                        starts.push(
                            starts.last().unwrap() + x.layout.physical_numel(x.shape).unwrap(),
                        );
                    }
                    let expected = evaluated(op, &xs, &out);
                    // A shift claims a view only where the sources are one.
                    if let Some(k) = shift(&reads, &xs, out) {
                        let shifted: Vec<u32> = (k..k + expected.len() as u32).collect();
                        assert_eq!(shifted, expected, "shift {op:?} {x_name} -> {out_name}");
                        shifts += 1;
                    }
                    let rows = rows(&reads, &xs, out).unwrap();
                    let got = Sources::Rows(rows).table(expected.len(), &starts).unwrap();
                    assert_eq!(got, expected, "{op:?} {x_name} -> {out_name}");
                }
            }
        }
        // NHWC data transposed to channels last, row-major: a view.
        assert!(shifts >= 1, "{shifts} shifts found");
    }
}
