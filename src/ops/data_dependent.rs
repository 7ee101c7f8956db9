//! The ONNX operators whose output shape depends on the values of their
//! inputs: NonZero, NonMaxSuppression and Unique. No type inference can size
//! their outputs before the inputs are known, so they are host functions on
//! whole tensors, with the semantics of the ONNX specification and its
//! reference implementation (onnx/reference/ops).

use super::OpError;
use crate::core::{numel, strides, DType, Tensor, TensorData};
use std::cmp::Ordering;

/// An operator whose output shape depends on its input values: evaluated on
/// the host once its inputs are known, never compiled to a kernel.
#[derive(Clone, Debug, PartialEq)]
pub enum DataDependent {
    /// ONNX NonZero: int64 [rank, count] indices of the non-zero elements, row-major order.
    NonZero,
    /// ONNX NonMaxSuppression (opset 10/11): int64 [count, 3] (batch, class, box).
    NonMaxSuppression {
        /// Boxes are [x_center, y_center, width, height] (else [y1, x1, y2, x2],
        /// either pair of opposite corners).
        center_point_box: bool,
    },
    /// ONNX Unique (opset 11): Y, indices, inverse_indices, counts.
    Unique {
        /// Unique slices along this axis (negative counts from the back);
        /// `None`: unique elements of the flattened input.
        axis: Option<i64>,
        /// Ascending order, else the order of first occurrence.
        sorted: bool,
    },
}

impl DataDependent {
    /// The ONNX op type: "NonZero", "NonMaxSuppression", "Unique".
    pub fn op_type(&self) -> &'static str {
        match self {
            DataDependent::NonZero => "NonZero",
            DataDependent::NonMaxSuppression { .. } => "NonMaxSuppression",
            DataDependent::Unique { .. } => "Unique",
        }
    }

    /// How many outputs it gives (1, 1, 4).
    pub fn output_count(&self) -> usize {
        match self {
            DataDependent::NonZero | DataDependent::NonMaxSuppression { .. } => 1,
            DataDependent::Unique { .. } => 4,
        }
    }

    /// Applies the op. `inputs[i]` is `None` for an omitted optional input
    /// (NMS's max_output_boxes_per_class, iou_threshold, score_threshold may
    /// be omitted or empty-named). Errors name the op.
    pub fn evaluate(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        self.apply(inputs).map_err(|e| e.in_op(self.op_type()))
    }

    fn apply(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, OpError> {
        match self {
            DataDependent::NonZero => {
                check_count(inputs, 1)?;
                Ok(vec![non_zero(required(inputs, 0, "X")?)?])
            }
            DataDependent::NonMaxSuppression { center_point_box } => {
                Ok(vec![non_max_suppression(inputs, *center_point_box)?])
            }
            DataDependent::Unique { axis, sorted } => {
                check_count(inputs, 1)?;
                unique(required(inputs, 0, "X")?, *axis, *sorted)
            }
        }
    }
}

/// Refuses more inputs than the op has.
fn check_count(inputs: &[Option<&Tensor>], most: usize) -> Result<(), OpError> {
    match inputs.len() <= most {
        true => Ok(()),
        false => Err(OpError::Arity(format!(
            "takes at most {most} inputs, got {}",
            inputs.len()
        ))),
    }
}

/// Input `index`, which the op cannot do without.
fn required<'a>(
    inputs: &[Option<&'a Tensor>],
    index: usize,
    name: &str,
) -> Result<&'a Tensor, OpError> {
    inputs
        .get(index)
        .copied()
        .flatten()
        .ok_or_else(|| OpError::Arity(format!("input {index} ({name}) is missing")))
}

/// Optional scalar input `index` (one element: shape [] or [1]); `None` when
/// omitted or empty, which the reference treats alike.
fn optional_scalar<'a>(
    inputs: &[Option<&'a Tensor>],
    index: usize,
    name: &str,
) -> Result<Option<&'a Tensor>, OpError> {
    match inputs.get(index).copied().flatten() {
        Some(t) if t.numel() > 1 => Err(OpError::Shape(format!(
            "{name} is {:?}, expected a scalar",
            t.shape
        ))),
        Some(t) if t.numel() == 1 => Ok(Some(t)),
        _ => Ok(None),
    }
}

/// Row-major positions of the non-zero elements, one row per axis. NaN is
/// non-zero and -0 is zero, as in numpy. A scalar has no axes, so it gives
/// [0, count]: the spec says so, where old numpy gave [1, count] (and
/// current numpy refuses).
/// Its output (8 bytes per axis per element, of an input of perhaps one
/// byte each) is checked against the memory budget before it is made.
fn non_zero(x: &Tensor) -> Result<Tensor, OpError> {
    let positions: Vec<usize> = (x.data.to_bool().into_iter().enumerate())
        .filter_map(|(i, non_zero)| non_zero.then_some(i))
        .collect();
    let bytes = (x.rank() as u64).saturating_mul(positions.len() as u64 * 8);
    crate::core::budget::check("the output", bytes)
        .map_err(|e| OpError::TooLarge(e.to_string()))?;
    let mut indices = Vec::with_capacity(x.rank() * positions.len());
    // With any position, every extent and stride is at least 1.
    for (&extent, stride) in x.shape.iter().zip(strides(&x.shape)) {
        indices.extend(positions.iter().map(|&p| (p / stride % extent) as i64));
    }
    Ok(Tensor::from_i64(vec![x.rank(), positions.len()], indices))
}

/// Greedy NMS per batch and class, as the reference runs it: boxes whose
/// score is strictly above score_threshold (all boxes without one; the
/// spec's text says "less than ... removed", but the reference and
/// onnxruntime drop a score equal to it), highest score first and the lower
/// index first on ties, each kept unless its IoU with a box already kept for
/// the class is strictly above iou_threshold, until max_output_boxes_per_class
/// are kept. A NaN score ranks below every number (the reference's order is
/// undefined there); a NaN score threshold keeps nothing.
fn non_max_suppression(
    inputs: &[Option<&Tensor>],
    center_point_box: bool,
) -> Result<Tensor, OpError> {
    check_count(inputs, 5)?;
    let boxes = required(inputs, 0, "boxes")?;
    let scores = required(inputs, 1, "scores")?;
    for (name, t) in [("boxes", boxes), ("scores", scores)] {
        if !t.dtype().is_float() {
            return Err(OpError::DType(format!(
                "{name} are {}, expected a float type",
                t.dtype()
            )));
        }
    }
    let &[batches, box_count, 4] = boxes.shape.as_slice() else {
        return Err(OpError::Shape(format!(
            "boxes are {:?}, expected [batch, boxes, 4]",
            boxes.shape
        )));
    };
    let &[score_batches, classes, scored_boxes] = scores.shape.as_slice() else {
        return Err(OpError::Shape(format!(
            "scores are {:?}, expected [batch, classes, boxes]",
            scores.shape
        )));
    };
    if (score_batches, scored_boxes) != (batches, box_count) {
        return Err(OpError::Shape(format!(
            "scores are {:?} for boxes {:?}, expected [{batches}, classes, {box_count}]",
            scores.shape, boxes.shape
        )));
    }
    // Omitted means 0, no boxes. A negative count selects none either: the
    // reference means max(count, 0) (though it then fails on the int that
    // gives) and onnxruntime clamps so.
    let max_per_class = match optional_scalar(inputs, 2, "max_output_boxes_per_class")? {
        None => 0,
        Some(t) if t.dtype().integer_range().is_none() => {
            return Err(OpError::DType(format!(
                "max_output_boxes_per_class is {}, expected an integer type",
                t.dtype()
            )))
        }
        Some(t) => t.data.to_i128()[0].clamp(0, usize::MAX as i128) as usize,
    };
    // Any value is taken, as the reference does, though the spec asks for [0, 1].
    let iou_threshold = float_scalar(inputs, 3, "iou_threshold")?.unwrap_or(0.0);
    let score_threshold = float_scalar(inputs, 4, "score_threshold")?;

    let round = iou_precision(boxes.dtype());
    let extents: Vec<Extent> = (boxes.data.to_f64().chunks_exact(4))
        .map(|b| Extent::of([b[0], b[1], b[2], b[3]], center_point_box, round))
        .collect();
    let scores = scores.data.to_f64();
    let mut selected = Vec::new();
    for batch in 0..batches {
        let extents = &extents[batch * box_count..][..box_count];
        for class in 0..classes {
            let scores = &scores[(batch * classes + class) * box_count..][..box_count];
            let mut candidates: Vec<usize> = (0..box_count)
                .filter(|&i| score_threshold.is_none_or(|t| scores[i] > t))
                .collect();
            candidates.sort_by(|&i, &j| highest_first(scores[i], scores[j]).then(i.cmp(&j)));
            let mut kept: Vec<usize> = Vec::new();
            for candidate in candidates {
                if kept.len() == max_per_class {
                    break;
                }
                let suppressed = (kept.iter())
                    .any(|&k| overlaps(&extents[k], &extents[candidate], iou_threshold, round));
                if !suppressed {
                    kept.push(candidate);
                }
            }
            selected.extend(
                kept.iter()
                    .flat_map(|&k| [batch as i64, class as i64, k as i64]),
            );
        }
    }
    Ok(Tensor::from_i64(vec![selected.len() / 3, 3], selected))
}

/// Optional float scalar input `index`.
fn float_scalar(
    inputs: &[Option<&Tensor>],
    index: usize,
    name: &str,
) -> Result<Option<f64>, OpError> {
    match optional_scalar(inputs, index, name)? {
        Some(t) if !t.dtype().is_float() => Err(OpError::DType(format!(
            "{name} is {}, expected a float type",
            t.dtype()
        ))),
        t => Ok(t.map(|t| t.data.to_f64()[0])),
    }
}

/// Orders scores highest first, NaN after every number.
fn highest_first(a: f64, b: f64) -> Ordering {
    b.partial_cmp(&a)
        .unwrap_or_else(|| a.is_nan().cmp(&b.is_nan()))
}

/// The rounding of every step of the IoU arithmetic: to f32 unless the
/// boxes are f64. The reference computes in the boxes' type and onnxruntime
/// in f32 (the spec's only box type), so ties at the threshold fall as there;
/// one step in f64 rounded to f32 is the f32 step, exactly.
fn iou_precision(dtype: DType) -> fn(f64) -> f64 {
    match dtype {
        DType::F64 => |x| x,
        _ => |x| x as f32 as f64,
    }
}

/// A box as the interval it spans on each axis, (low, high).
struct Extent {
    y: (f64, f64),
    x: (f64, f64),
}

impl Extent {
    fn of(b: [f64; 4], center_point_box: bool, round: fn(f64) -> f64) -> Extent {
        let around = |center: f64, size: f64| {
            let half = round(size / 2.0);
            (round(center - half), round(center + half))
        };
        match center_point_box {
            true => Extent {
                x: around(b[0], b[2]),
                y: around(b[1], b[3]),
            },
            false => Extent {
                y: ascending(b[0], b[2]),
                x: ascending(b[1], b[3]),
            },
        }
    }

    fn area(&self, round: fn(f64) -> f64) -> f64 {
        round(round(self.x.1 - self.x.0) * round(self.y.1 - self.y.0))
    }
}

fn ascending(a: f64, b: f64) -> (f64, f64) {
    match a >= b {
        true => (b, a),
        false => (a, b),
    }
}

/// Whether the IoU of two boxes is strictly above the threshold, by the
/// reference's steps: boxes that do not intersect, or of no positive area,
/// never suppress each other. A NaN coordinate makes its box's area NaN and
/// so every test false: such a box neither suppresses nor is suppressed.
fn overlaps(a: &Extent, b: &Extent, iou_threshold: f64, round: fn(f64) -> f64) -> bool {
    let (x_low, x_high) = (a.x.0.max(b.x.0), a.x.1.min(b.x.1));
    let (y_low, y_high) = (a.y.0.max(b.y.0), a.y.1.min(b.y.1));
    if x_high <= x_low || y_high <= y_low {
        return false;
    }
    let intersection = round(round(x_high - x_low) * round(y_high - y_low));
    let (area_a, area_b) = (a.area(round), b.area(round));
    let union = round(round(area_a + area_b) - intersection);
    if intersection <= 0.0 || area_a <= 0.0 || area_b <= 0.0 || union <= 0.0 {
        return false;
    }
    round(intersection / union) > iou_threshold
}

/// Unique elements (no axis) or slices along `axis`, as numpy.unique finds
/// them, which the reference calls: ascending, or by first occurrence when
/// not `sorted`; each with the index of its first occurrence and its count,
/// and every element or slice with the index of its unique entry. Floats
/// sort with -0 equal to 0 and NaN after every number; without an axis, or
/// along the axis of a 1-D input, all NaNs are one entry (numpy's
/// equal_nan), while slices of a higher rank holding a NaN are each unique,
/// as numpy compares them element by element.
fn unique(x: &Tensor, axis: Option<i64>, sorted: bool) -> Result<Vec<Tensor>, OpError> {
    let axis = axis
        .map(|axis| normalized_axis(axis, &x.shape))
        .transpose()?;
    let slices = match axis {
        None => Slices {
            outer: 1,
            count: x.numel(),
            inner: 1,
        },
        Some(axis) => Slices {
            outer: numel(&x.shape[..axis]),
            count: x.shape[axis],
            inner: numel(&x.shape[axis + 1..]),
        },
    };
    let values = Values::of(&x.data);
    let compare = |a: usize, b: usize| {
        (slices.positions(a).zip(slices.positions(b)))
            .map(|(i, j)| values.order(i, j))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    };
    // numpy takes a 1-D input along its axis as flattened.
    let nans_are_one = axis.is_none() || x.rank() == 1;
    let same = |a: usize, b: usize| match nans_are_one {
        true => compare(a, b).is_eq(),
        false => (slices.positions(a).zip(slices.positions(b))).all(|(i, j)| values.equal(i, j)),
    };
    // Stable, so each run of equal slices starts at its first occurrence.
    let mut order: Vec<usize> = (0..slices.count).collect();
    order.sort_by(|&a, &b| compare(a, b));
    // Per unique entry: its first occurrence and its count.
    let mut entries: Vec<(usize, usize)> = Vec::new();
    let mut inverse = vec![0; slices.count];
    for s in order {
        match entries.last_mut() {
            Some((first, count)) if same(*first, s) => *count += 1,
            _ => entries.push((s, 1)),
        }
        inverse[s] = entries.len() - 1;
    }
    if !sorted {
        let mut by_first: Vec<usize> = (0..entries.len()).collect();
        by_first.sort_by_key(|&e| entries[e].0);
        let mut renumbered = vec![0; entries.len()];
        for (new, &old) in by_first.iter().enumerate() {
            renumbered[old] = new;
        }
        entries = by_first.iter().map(|&e| entries[e]).collect();
        inverse.iter_mut().for_each(|e| *e = renumbered[*e]);
    }

    let y_shape = match axis {
        None => vec![entries.len()],
        Some(axis) => {
            let mut shape = x.shape.clone();
            shape[axis] = entries.len();
            shape
        }
    };
    // Row-major over Y: every outer index, then every entry's slice part.
    let y_positions = (0..slices.outer).flat_map(|o| {
        entries.iter().flat_map(move |&(first, _)| {
            let start = (o * slices.count + first) * slices.inner;
            start..start + slices.inner
        })
    });
    let y = Tensor::new(y_shape, x.data.gather(y_positions));
    let int64s = |v: Vec<i64>| Tensor::from_i64(vec![v.len()], v);
    Ok(vec![
        y,
        int64s(entries.iter().map(|&(first, _)| first as i64).collect()),
        int64s(inverse.into_iter().map(|e| e as i64).collect()),
        int64s(entries.iter().map(|&(_, count)| count as i64).collect()),
    ])
}

/// `axis` of a tensor of `shape`, counted from the back when negative.
fn normalized_axis(axis: i64, shape: &[usize]) -> Result<usize, OpError> {
    let rank = shape.len() as i64;
    match (-rank..rank).contains(&axis) {
        true => Ok(axis.rem_euclid(rank) as usize),
        false => Err(OpError::Attribute(format!(
            "axis {axis} is out of range for input {shape:?}"
        ))),
    }
}

/// A tensor seen as `count` slices along one axis: slice `s` holds, for
/// every index `o` before the axis, the `inner` elements after it. Without
/// an axis each element is a slice (outer = inner = 1).
struct Slices {
    outer: usize,
    count: usize,
    inner: usize,
}

impl Slices {
    /// Flat positions of slice `s`'s elements, row-major.
    fn positions(&self, s: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.outer).flat_map(move |o| {
            let start = (o * self.count + s) * self.inner;
            start..start + self.inner
        })
    }
}

/// Elements as values that compare exactly: integers as i128 (f64 would
/// merge i64 values beyond 2^53), floats as f64.
enum Values {
    Integer(Vec<i128>),
    Float(Vec<f64>),
}

impl Values {
    fn of(data: &TensorData) -> Values {
        match data.dtype().is_float() {
            true => Values::Float(data.to_f64()),
            false => Values::Integer(data.to_i128()),
        }
    }

    /// numpy's sort order: ascending, -0 equal to 0, NaN after every number
    /// and equal to NaN.
    fn order(&self, i: usize, j: usize) -> Ordering {
        match self {
            Values::Integer(v) => v[i].cmp(&v[j]),
            Values::Float(v) => {
                (v[i].partial_cmp(&v[j])).unwrap_or_else(|| v[i].is_nan().cmp(&v[j].is_nan()))
            }
        }
    }

    /// Whether two elements are equal (NaN equals nothing).
    fn equal(&self, i: usize, j: usize) -> bool {
        match self {
            Values::Integer(v) => v[i] == v[j],
            Values::Float(v) => v[i] == v[j],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testutil::{f32s, i64s};

    fn run(op: DataDependent, inputs: &[&Tensor]) -> Vec<Tensor> {
        let inputs: Vec<Option<&Tensor>> = inputs.iter().copied().map(Some).collect();
        op.evaluate(&inputs).unwrap_or_else(|e| panic!("{e}"))
    }

    fn error(op: DataDependent, inputs: &[Option<&Tensor>]) -> String {
        match op.evaluate(inputs) {
            Ok(out) => panic!("expected an error, got {out:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn nonzero_example() {
        let x = Tensor::new(vec![2, 2], TensorData::Bool(vec![true, false, true, true]));
        let y = run(DataDependent::NonZero, &[&x]);
        assert_eq!(y, vec![i64s(&[2, 3], &[0, 1, 1, 0, 0, 1])]);
    }

    /// NaN is non-zero, -0 is zero, and integers are read exactly.
    #[test]
    fn nonzero_reads_every_dtype() {
        let x = f32s(&[2, 2], &[f32::NAN, -0.0, 0.0, 2.5]);
        let y = run(DataDependent::NonZero, &[&x]);
        assert_eq!(y, vec![i64s(&[2, 2], &[0, 1, 0, 1])]);
        let x = Tensor::new(vec![3], TensorData::U64(vec![0, u64::MAX, 1]));
        let y = run(DataDependent::NonZero, &[&x]);
        assert_eq!(y, vec![i64s(&[1, 2], &[1, 2])]);
    }

    /// A scalar has no axes: [0, count], as the spec says.
    #[test]
    fn nonzero_of_a_scalar_and_of_an_empty_tensor() {
        let y = run(DataDependent::NonZero, &[&f32s(&[], &[3.0])]);
        assert_eq!(y[0].shape, [0, 1]);
        let y = run(DataDependent::NonZero, &[&i64s(&[], &[0])]);
        assert_eq!(y[0].shape, [0, 0]);
        let y = run(DataDependent::NonZero, &[&f32s(&[0, 3], &[])]);
        assert_eq!(y, vec![i64s(&[2, 0], &[])]);
    }

    #[test]
    fn nonzero_takes_one_input() {
        let x = f32s(&[1], &[1.0]);
        let msg = error(DataDependent::NonZero, &[Some(&x), Some(&x)]);
        assert_eq!(msg, "NonZero: takes at most 1 inputs, got 2");
        let msg = error(DataDependent::NonZero, &[None]);
        assert_eq!(msg, "NonZero: input 0 (X) is missing");
    }

    /// The boxes of the ONNX node tests: three near (0, 0), two near (0, 10),
    /// one at (0, 100), [y1, x1, y2, x2].
    const BOXES: [[f32; 4]; 6] = [
        [0.0, 0.0, 1.0, 1.0],
        [0.0, 0.1, 1.0, 1.1],
        [0.0, -0.1, 1.0, 0.9],
        [0.0, 10.0, 1.0, 11.0],
        [0.0, 10.1, 1.0, 11.1],
        [0.0, 100.0, 1.0, 101.0],
    ];
    const SCORES: [f32; 6] = [0.9, 0.75, 0.6, 0.95, 0.5, 0.3];

    /// Boxes [batches, n, 4] from one list per batch.
    fn boxes(batches: &[&[[f32; 4]]]) -> Tensor {
        let n = batches.first().map_or(0, |b| b.len());
        let v: Vec<f32> = batches
            .iter()
            .flat_map(|b| b.iter().flatten())
            .copied()
            .collect();
        f32s(&[batches.len(), n, 4], &v)
    }

    /// Scores [batches, classes, n] from one list per batch and class.
    fn scores(batches: &[&[&[f32]]]) -> Tensor {
        let classes = batches.first().map_or(0, |b| b.len());
        let n = batches
            .first()
            .and_then(|b| b.first())
            .map_or(0, |c| c.len());
        let v: Vec<f32> = batches
            .iter()
            .flat_map(|b| b.iter().copied().flatten())
            .copied()
            .collect();
        f32s(&[batches.len(), classes, n], &v)
    }

    /// NMS with every input given, as the ONNX node tests give them.
    fn nms(
        center: bool,
        boxes: &Tensor,
        scores: &Tensor,
        max: i64,
        iou: f32,
        score: f32,
    ) -> Tensor {
        let op = DataDependent::NonMaxSuppression {
            center_point_box: center,
        };
        let (max, iou, score) = (i64s(&[1], &[max]), f32s(&[1], &[iou]), f32s(&[1], &[score]));
        run(op, &[boxes, scores, &max, &iou, &score]).remove(0)
    }

    fn selected(rows: &[[i64; 3]]) -> Tensor {
        i64s(&[rows.len(), 3], rows.as_flattened())
    }

    #[test]
    fn nms_suppress_by_iou() {
        let y = nms(
            false,
            &boxes(&[&BOXES]),
            &scores(&[&[&SCORES]]),
            3,
            0.5,
            0.0,
        );
        assert_eq!(y, selected(&[[0, 0, 3], [0, 0, 0], [0, 0, 5]]));
    }

    #[test]
    fn nms_suppress_by_iou_and_scores() {
        let y = nms(
            false,
            &boxes(&[&BOXES]),
            &scores(&[&[&SCORES]]),
            3,
            0.5,
            0.4,
        );
        assert_eq!(y, selected(&[[0, 0, 3], [0, 0, 0]]));
    }

    #[test]
    fn nms_flipped_coordinates() {
        let flipped = [
            [1.0, 1.0, 0.0, 0.0],
            [0.0, 0.1, 1.0, 1.1],
            [0.0, 0.9, 1.0, -0.1],
            [0.0, 10.0, 1.0, 11.0],
            [1.0, 10.1, 0.0, 11.1],
            [1.0, 101.0, 0.0, 100.0],
        ];
        let y = nms(
            false,
            &boxes(&[&flipped]),
            &scores(&[&[&SCORES]]),
            3,
            0.5,
            0.0,
        );
        assert_eq!(y, selected(&[[0, 0, 3], [0, 0, 0], [0, 0, 5]]));
    }

    #[test]
    fn nms_center_point_box_format() {
        let centered = [
            [0.5, 0.5, 1.0, 1.0],
            [0.5, 0.6, 1.0, 1.0],
            [0.5, 0.4, 1.0, 1.0],
            [0.5, 10.5, 1.0, 1.0],
            [0.5, 10.6, 1.0, 1.0],
            [0.5, 100.5, 1.0, 1.0],
        ];
        let y = nms(
            true,
            &boxes(&[&centered]),
            &scores(&[&[&SCORES]]),
            3,
            0.5,
            0.0,
        );
        assert_eq!(y, selected(&[[0, 0, 3], [0, 0, 0], [0, 0, 5]]));
    }

    #[test]
    fn nms_identical_boxes() {
        let y = nms(
            false,
            &boxes(&[&[[0.0, 0.0, 1.0, 1.0]; 10]]),
            &scores(&[&[&[0.9; 10]]]),
            3,
            0.5,
            0.0,
        );
        assert_eq!(y, selected(&[[0, 0, 0]]));
    }

    #[test]
    fn nms_limit_output_size() {
        let y = nms(
            false,
            &boxes(&[&BOXES]),
            &scores(&[&[&SCORES]]),
            2,
            0.5,
            0.0,
        );
        assert_eq!(y, selected(&[[0, 0, 3], [0, 0, 0]]));
    }

    #[test]
    fn nms_single_box() {
        let y = nms(
            false,
            &boxes(&[&[[0.0, 0.0, 1.0, 1.0]]]),
            &scores(&[&[&[0.9]]]),
            3,
            0.5,
            0.0,
        );
        assert_eq!(y, selected(&[[0, 0, 0]]));
    }

    #[test]
    fn nms_two_batches() {
        let y = nms(
            false,
            &boxes(&[&BOXES, &BOXES]),
            &scores(&[&[&SCORES], &[&SCORES]]),
            2,
            0.5,
            0.0,
        );
        assert_eq!(y, selected(&[[0, 0, 3], [0, 0, 0], [1, 0, 3], [1, 0, 0]]));
    }

    #[test]
    fn nms_two_classes() {
        let y = nms(
            false,
            &boxes(&[&BOXES]),
            &scores(&[&[&SCORES, &SCORES]]),
            2,
            0.5,
            0.0,
        );
        assert_eq!(y, selected(&[[0, 0, 3], [0, 0, 0], [0, 1, 3], [0, 1, 0]]));
    }

    /// A score equal to the threshold is dropped, an IoU equal to the
    /// threshold suppresses nothing, and equal scores go lower index first.
    #[test]
    fn nms_thresholds_are_strict() {
        let b = boxes(&[&[
            [0.0, 0.0, 1.0, 1.0],
            [0.0, 0.0, 1.0, 2.0],
            [5.0, 5.0, 6.0, 6.0],
        ]]);
        let s = scores(&[&[&[0.5, 0.5, 0.25]]]);
        // Boxes 0 and 1 overlap with IoU exactly 0.5.
        assert_eq!(
            nms(false, &b, &s, 10, 0.5, 0.0),
            selected(&[[0, 0, 0], [0, 0, 1], [0, 0, 2]])
        );
        assert_eq!(
            nms(false, &b, &s, 10, 0.25, 0.0),
            selected(&[[0, 0, 0], [0, 0, 2]])
        );
        assert_eq!(
            nms(false, &b, &s, 10, 0.5, 0.25),
            selected(&[[0, 0, 0], [0, 0, 1]])
        );
        assert_eq!(nms(false, &b, &s, 10, 0.5, 0.5), selected(&[]));
    }

    /// IoU computes in f32 for f32 boxes, as the reference does: 0.6 / 0.8
    /// rounds below 0.75 there, where f64 arithmetic on the same f32 inputs
    /// would come out above and suppress.
    #[test]
    fn nms_iou_computes_in_the_boxes_precision() {
        let b = boxes(&[&[[0.0, 0.0, 1.0, 0.6], [0.0, 0.0, 1.0, 0.8]]]);
        let s = scores(&[&[&[0.9, 0.8]]]);
        assert_eq!(
            nms(false, &b, &s, 10, 0.75, 0.0),
            selected(&[[0, 0, 0], [0, 0, 1]])
        );
        let b64 = b.cast(DType::F64);
        let y = DataDependent::NonMaxSuppression {
            center_point_box: false,
        }
        .evaluate(&[
            Some(&b64),
            Some(&s),
            Some(&i64s(&[], &[10])),
            Some(&f32s(&[], &[0.75])),
        ])
        .unwrap();
        assert_eq!(y, vec![selected(&[[0, 0, 0]])]);
    }

    /// Omitted, empty or negative max_output_boxes_per_class selects nothing;
    /// omitted thresholds are iou 0 and no score filter; scalars may be [].
    #[test]
    fn nms_optional_inputs() {
        let op = DataDependent::NonMaxSuppression {
            center_point_box: false,
        };
        let (b, s) = (boxes(&[&BOXES]), scores(&[&[&SCORES]]));
        let none = selected(&[]);
        assert_eq!(
            op.evaluate(&[Some(&b), Some(&s)]).unwrap(),
            vec![none.clone()]
        );
        let empty = i64s(&[0], &[]);
        assert_eq!(
            op.evaluate(&[Some(&b), Some(&s), Some(&empty)]).unwrap(),
            vec![none.clone()]
        );
        let negative = i64s(&[], &[-1]);
        assert_eq!(
            op.evaluate(&[Some(&b), Some(&s), Some(&negative)]).unwrap(),
            vec![none]
        );
        // iou 0: any overlap suppresses; every score passes.
        let max = i64s(&[], &[i64::MAX]);
        let y = op
            .evaluate(&[Some(&b), Some(&s), Some(&max), None, None])
            .unwrap();
        assert_eq!(y, vec![selected(&[[0, 0, 3], [0, 0, 0], [0, 0, 5]])]);
        let low = f32s(&[], &[0.4]);
        let y = op
            .evaluate(&[Some(&b), Some(&s), Some(&max), None, Some(&low)])
            .unwrap();
        assert_eq!(y, vec![selected(&[[0, 0, 3], [0, 0, 0]])]);
    }

    /// NaN scores rank after every number; a NaN box suppresses nothing.
    #[test]
    fn nms_nan_scores_and_boxes() {
        let b = boxes(&[&[
            [0.0, 0.0, 1.0, 1.0],
            [0.0, 0.0, 1.0, 1.0],
            [f32::NAN, 0.0, 1.0, 1.0],
        ]]);
        let s = scores(&[&[&[f32::NAN, 0.1, 0.9]]]);
        let op = DataDependent::NonMaxSuppression {
            center_point_box: false,
        };
        let (max, iou) = (i64s(&[1], &[10]), f32s(&[1], &[0.5]));
        let y = op
            .evaluate(&[Some(&b), Some(&s), Some(&max), Some(&iou)])
            .unwrap();
        assert_eq!(y, vec![selected(&[[0, 0, 2], [0, 0, 1]])]);
        // With a score threshold, NaN fails it.
        assert_eq!(
            nms(false, &b, &s, 10, 0.5, 0.0),
            selected(&[[0, 0, 2], [0, 0, 1]])
        );
    }

    #[test]
    fn nms_empty_inputs() {
        let y = nms(
            false,
            &f32s(&[2, 0, 4], &[]),
            &f32s(&[2, 3, 0], &[]),
            5,
            0.5,
            0.0,
        );
        assert_eq!(y, selected(&[]));
        let y = nms(
            false,
            &boxes(&[&BOXES]),
            &f32s(&[1, 0, 6], &[]),
            5,
            0.5,
            0.0,
        );
        assert_eq!(y, selected(&[]));
    }

    #[test]
    fn nms_refuses_bad_inputs() {
        let op = || DataDependent::NonMaxSuppression {
            center_point_box: false,
        };
        let s = scores(&[&[&SCORES]]);
        let b3 = f32s(&[1, 6, 3], &[0.0; 18]);
        assert_eq!(
            error(op(), &[Some(&b3), Some(&s)]),
            "NonMaxSuppression: boxes are [1, 6, 3], expected [batch, boxes, 4]"
        );
        let b = boxes(&[&BOXES]);
        let s5 = f32s(&[1, 1, 5], &[0.5; 5]);
        assert_eq!(
            error(op(), &[Some(&b), Some(&s5)]),
            "NonMaxSuppression: scores are [1, 1, 5] for boxes [1, 6, 4], expected [1, classes, 6]"
        );
        let s2 = f32s(&[1, 6], &[0.5; 6]);
        assert_eq!(
            error(op(), &[Some(&b), Some(&s2)]),
            "NonMaxSuppression: scores are [1, 6], expected [batch, classes, boxes]"
        );
        let int_boxes = b.cast(DType::I64);
        assert_eq!(
            error(op(), &[Some(&int_boxes), Some(&s)]),
            "NonMaxSuppression: boxes are i64, expected a float type"
        );
        let two = i64s(&[2], &[1, 2]);
        assert_eq!(
            error(op(), &[Some(&b), Some(&s), Some(&two)]),
            "NonMaxSuppression: max_output_boxes_per_class is [2], expected a scalar"
        );
        let float_max = f32s(&[], &[3.0]);
        assert_eq!(
            error(op(), &[Some(&b), Some(&s), Some(&float_max)]),
            "NonMaxSuppression: max_output_boxes_per_class is f32, expected an integer type"
        );
        let int_iou = i64s(&[], &[0]);
        assert_eq!(
            error(op(), &[Some(&b), Some(&s), None, Some(&int_iou)]),
            "NonMaxSuppression: iou_threshold is i64, expected a float type"
        );
        assert_eq!(
            error(op(), &[Some(&b), None]),
            "NonMaxSuppression: input 1 (scores) is missing"
        );
        assert_eq!(
            error(op(), &[Some(&b), Some(&s), None, None, None, None]),
            "NonMaxSuppression: takes at most 5 inputs, got 6"
        );
    }

    fn unique(x: &Tensor, axis: Option<i64>, sorted: bool) -> Vec<Tensor> {
        run(DataDependent::Unique { axis, sorted }, &[x])
    }

    #[track_caller]
    fn assert_unique(got: &[Tensor], y: Tensor, indices: &[i64], inverse: &[i64], counts: &[i64]) {
        let int64s = |v: &[i64]| i64s(&[v.len()], v);
        assert_eq!(got, [y, int64s(indices), int64s(inverse), int64s(counts)]);
    }

    #[test]
    fn unique_sorted_without_axis() {
        let x = f32s(&[6], &[2.0, 1.0, 1.0, 3.0, 4.0, 3.0]);
        let y = f32s(&[4], &[1.0, 2.0, 3.0, 4.0]);
        assert_unique(
            &unique(&x, None, true),
            y,
            &[1, 0, 3, 4],
            &[1, 0, 0, 2, 3, 2],
            &[2, 1, 2, 1],
        );
    }

    #[test]
    fn unique_not_sorted_without_axis() {
        let x = f32s(&[6], &[2.0, 1.0, 1.0, 3.0, 4.0, 3.0]);
        let y = f32s(&[4], &[2.0, 1.0, 3.0, 4.0]);
        assert_unique(
            &unique(&x, None, false),
            y,
            &[0, 1, 3, 4],
            &[0, 1, 1, 2, 3, 2],
            &[1, 2, 2, 1],
        );
    }

    /// Without an axis the input is flattened (the spec's example 2).
    #[test]
    fn unique_flattens_without_axis() {
        let x = i64s(&[2, 2], &[1, 3, 2, 3]);
        assert_unique(
            &unique(&x, None, true),
            i64s(&[3], &[1, 2, 3]),
            &[0, 2, 1],
            &[0, 2, 1, 2],
            &[1, 1, 2],
        );
    }

    #[test]
    fn unique_sorted_with_axis() {
        let x = f32s(&[3, 3], &[1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 2.0, 3.0, 4.0]);
        let y = f32s(&[2, 3], &[1.0, 0.0, 0.0, 2.0, 3.0, 4.0]);
        assert_unique(&unique(&x, Some(0), true), y, &[0, 2], &[0, 0, 1], &[2, 1]);
    }

    #[test]
    fn unique_sorted_with_axis_3d() {
        let slices = [[1.0, 1.0], [0.0, 1.0], [2.0, 1.0], [0.0, 1.0]];
        let x = f32s(&[2, 4, 2], [slices, slices].as_flattened().as_flattened());
        let unique_slices = [[0.0, 1.0], [1.0, 1.0], [2.0, 1.0]];
        let y = f32s(
            &[2, 3, 2],
            [unique_slices, unique_slices].as_flattened().as_flattened(),
        );
        assert_unique(
            &unique(&x, Some(1), true),
            y,
            &[1, 0, 2],
            &[1, 0, 2, 0],
            &[2, 1, 1],
        );
    }

    #[test]
    fn unique_sorted_with_negative_axis() {
        let x = f32s(&[3, 3], &[1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 2.0, 3.0, 3.0]);
        let y = f32s(&[3, 2], &[0.0, 1.0, 0.0, 1.0, 3.0, 2.0]);
        assert_unique(&unique(&x, Some(-1), true), y, &[1, 0], &[1, 0, 0], &[2, 1]);
    }

    #[test]
    fn unique_length_1() {
        let x = i64s(&[1], &[0]);
        assert_unique(&unique(&x, None, true), i64s(&[1], &[0]), &[0], &[0], &[1]);
    }

    /// Unsorted slices keep their first occurrence order and are gathered
    /// along the axis.
    #[test]
    fn unique_not_sorted_with_axis() {
        let x = i64s(&[2, 3], &[2, 1, 2, 4, 3, 4]);
        let y = i64s(&[2, 2], &[2, 1, 4, 3]);
        assert_unique(&unique(&x, Some(1), false), y, &[0, 1], &[0, 1, 0], &[2, 1]);
        let y = i64s(&[2, 2], &[1, 2, 3, 4]);
        assert_unique(&unique(&x, Some(1), true), y, &[1, 0], &[1, 0, 1], &[1, 2]);
    }

    /// Integers compare exactly, beyond f64's 2^53.
    #[test]
    fn unique_integers_are_exact() {
        let big = 1i64 << 53;
        let x = i64s(&[3], &[big + 1, big, big + 1]);
        assert_unique(
            &unique(&x, None, true),
            i64s(&[2], &[big, big + 1]),
            &[1, 0],
            &[1, 0, 1],
            &[1, 2],
        );
        let x = Tensor::new(vec![3], TensorData::U64(vec![u64::MAX, 0, u64::MAX - 1]));
        let got = unique(&x, None, true);
        assert_eq!(
            *got[0].data,
            TensorData::U64(vec![0, u64::MAX - 1, u64::MAX])
        );
        let x = Tensor::new(vec![3], TensorData::Bool(vec![true, false, true]));
        let got = unique(&x, None, false);
        assert_eq!(*got[0].data, TensorData::Bool(vec![true, false]));
    }

    /// As numpy: without an axis every NaN is one entry, sorted last, and -0
    /// equals 0; slices holding a NaN are each unique.
    #[test]
    fn unique_nan_and_negative_zero() {
        let nan = f32::NAN;
        let x = f32s(&[5], &[nan, 1.0, nan, 0.0, -0.0]);
        let got = unique(&x, None, true);
        let y = got[0].data.to_f64();
        assert!(
            y.len() == 3 && y[0] == 0.0 && y[1] == 1.0 && y[2].is_nan(),
            "{y:?}"
        );
        assert_eq!(
            got[1..],
            [
                i64s(&[3], &[3, 1, 0]),
                i64s(&[5], &[2, 1, 2, 0, 0]),
                i64s(&[3], &[2, 1, 2])
            ]
        );

        let x = f32s(
            &[5, 2],
            &[nan, 1.0, 0.0, 2.0, nan, 1.0, -0.0, 2.0, nan, 0.5],
        );
        let got = unique(&x, Some(0), true);
        assert_eq!(got[0].shape, [4, 2]);
        let y = got[0].data.to_f64();
        assert_eq!([y[0], y[1], y[3], y[5], y[7]], [0.0, 2.0, 0.5, 1.0, 1.0]);
        assert!(y[2].is_nan() && y[4].is_nan() && y[6].is_nan());
        let want = [
            i64s(&[4], &[1, 4, 0, 2]),
            i64s(&[5], &[2, 0, 3, 0, 1]),
            i64s(&[4], &[2, 1, 1, 1]),
        ];
        assert_eq!(got[1..], want);
        // numpy takes a 1-D input along its axis as flattened.
        let got = unique(&f32s(&[2], &[nan, nan]), Some(0), true);
        assert_eq!(got[3], i64s(&[1], &[2]));
    }

    #[test]
    fn unique_of_empty_and_scalar_inputs() {
        let x = f32s(&[0, 3], &[]);
        assert_unique(&unique(&x, None, true), f32s(&[0], &[]), &[], &[], &[]);
        assert_unique(
            &unique(&x, Some(0), true),
            f32s(&[0, 3], &[]),
            &[],
            &[],
            &[],
        );
        // Three empty slices are equal.
        assert_unique(
            &unique(&x, Some(1), false),
            f32s(&[0, 1], &[]),
            &[0],
            &[0, 0, 0],
            &[3],
        );
        let x = f32s(&[], &[7.0]);
        assert_unique(
            &unique(&x, None, true),
            f32s(&[1], &[7.0]),
            &[0],
            &[0],
            &[1],
        );
    }

    #[test]
    fn unique_refuses_an_axis_out_of_range() {
        let x = f32s(&[2, 3], &[0.0; 6]);
        let msg = error(
            DataDependent::Unique {
                axis: Some(2),
                sorted: true,
            },
            &[Some(&x)],
        );
        assert_eq!(msg, "Unique: axis 2 is out of range for input [2, 3]");
        let msg = error(
            DataDependent::Unique {
                axis: Some(-3),
                sorted: true,
            },
            &[Some(&x)],
        );
        assert_eq!(msg, "Unique: axis -3 is out of range for input [2, 3]");
        let scalar = f32s(&[], &[1.0]);
        let msg = error(
            DataDependent::Unique {
                axis: Some(0),
                sorted: true,
            },
            &[Some(&scalar)],
        );
        assert_eq!(msg, "Unique: axis 0 is out of range for input []");
    }

    #[test]
    fn names_and_output_counts() {
        let nms = DataDependent::NonMaxSuppression {
            center_point_box: true,
        };
        let unique = DataDependent::Unique {
            axis: None,
            sorted: true,
        };
        assert_eq!(
            (nms.op_type(), nms.output_count()),
            ("NonMaxSuppression", 1)
        );
        assert_eq!((unique.op_type(), unique.output_count()), ("Unique", 4));
        let nonzero = DataDependent::NonZero;
        assert_eq!((nonzero.op_type(), nonzero.output_count()), ("NonZero", 1));
    }
}
