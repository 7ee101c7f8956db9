//! Detection post-processing as TFLite defines it: NON_MAX_SUPPRESSION_V4/V5
//! with outputs padded to their most boxes ([`NmsPadded`]), and the custom
//! operator `TFLite_Detection_PostProcess` that ends every SSD export of the
//! TensorFlow Object Detection API ([`DetectionPostProcess`]). Both have static
//! output shapes: what is not selected is zeros, and a count says how much is.
//!
//! The selection is sequential (each box kept depends on the ones kept before),
//! so one host function per op is both the reference semantics and the runtime's
//! kernel: it reads the f32 inputs in place and computes in f32 as TFLite's
//! kernels do (the box decoding in f64, as theirs), so that the boxes a threshold
//! keeps are the ones the interpreter keeps. Where TFLite sorts without a stable
//! order (a partial sort, a priority queue), ties go to the lower index here.

use super::shape::expect_inputs;
use super::*;
use crate::core::{Tensor, TensorData, ValueType};
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// NON_MAX_SUPPRESSION_V4 (hard NMS) and _V5 (soft NMS): boxes [n, 4] as
/// corners (y1, x1, y2, x2, either corner first), scores [n] ->
/// selected indices (int32, [max_output]), for V5 their scores (f32,
/// [max_output]), and how many were selected (int32 scalar).
#[derive(Clone, Debug, PartialEq)]
pub struct NmsPadded {
    /// The most boxes selected: the length of the padded outputs.
    pub max_output: usize,
    /// A candidate overlapping a selected box by at least this IoU is dropped.
    pub iou_threshold: f32,
    /// Candidates must score above this (and stay above it once decayed).
    pub score_threshold: f32,
    /// V5's Gaussian decay `exp(-iou² / (2 sigma))` of overlapping scores;
    /// `None` for V4 (0 in V5 is hard NMS with a scores output).
    pub soft_nms_sigma: Option<f32>,
}

/// `TFLite_Detection_PostProcess`: box encodings [1, n, >= 4] (y, x, h, w
/// relative to the anchors), class scores [1, n, classes (+ 1 background)],
/// anchors [n, 4] (y, x, h, w) -> boxes [1, d, 4] (ymin, xmin, ymax, xmax),
/// classes [1, d], scores [1, d], the detection count [1], all f32, with
/// d = `max_detections * max_classes_per_detection`.
#[derive(Clone, Debug, PartialEq)]
pub struct DetectionPostProcess {
    /// Boxes kept after NMS.
    pub max_detections: usize,
    /// Fast NMS: classes reported per kept box (its best ones).
    pub max_classes_per_detection: usize,
    /// Regular NMS: boxes kept per class before the classes are merged.
    pub detections_per_class: usize,
    /// NMS per class and a merge (regular), else one NMS on each box's best
    /// class score (fast).
    pub use_regular_nms: bool,
    /// Scores at or above it are candidates.
    pub score_threshold: f32,
    /// A candidate overlapping a kept box by more than this IoU is dropped.
    pub iou_threshold: f32,
    /// Classes, the background class not counted.
    pub num_classes: usize,
    /// The encodings' divisors: y, x, h, w.
    pub scale: [f32; 4],
}

/// The two ops, one variant of [`Op`].
#[derive(Clone, Debug, PartialEq)]
pub enum Detection {
    /// NON_MAX_SUPPRESSION_V4 / V5 with padded outputs.
    Nms(NmsPadded),
    /// TFLite_Detection_PostProcess.
    PostProcess(DetectionPostProcess),
}

impl Detection {
    /// The outputs for f32 inputs `x` of shapes `shapes`: the runtime's kernel
    /// and the reference executor both call it.
    pub fn run(&self, x: &[&[f32]], shapes: &[&[usize]]) -> Result<Vec<Tensor>, OpError> {
        match self {
            Detection::Nms(op) => Ok(op.run(x[0], x[1])),
            Detection::PostProcess(op) => op.run(x, shapes),
        }
    }
}

fn check_f32(what: &str, t: &ValueType) -> Result<(), OpError> {
    match t.dtype {
        DType::F32 => Ok(()),
        d => Err(OpError::DType(format!("{what} must be float32, got {d}"))),
    }
}

impl OpDef for Detection {
    fn name(&self) -> &'static str {
        match self {
            Detection::Nms(n) if n.soft_nms_sigma.is_some() => "NonMaxSuppressionV5",
            Detection::Nms(_) => "NonMaxSuppressionV4",
            Detection::PostProcess(_) => "TFLite_Detection_PostProcess",
        }
    }

    fn num_outputs(&self) -> usize {
        match self {
            Detection::Nms(n) => 2 + n.soft_nms_sigma.is_some() as usize,
            Detection::PostProcess(_) => 4,
        }
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        match self {
            Detection::Nms(op) => op.infer(inputs),
            Detection::PostProcess(op) => op.infer(inputs),
        }
    }

    fn eval(&self, x: &[&Tensor], _: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let data: Vec<_> = x.iter().map(|t| t.f32s()).collect();
        let slices: Vec<&[f32]> = data.iter().map(|d| d.as_ref()).collect();
        let shapes: Vec<&[usize]> = x.iter().map(|t| t.shape.as_slice()).collect();
        self.run(&slices, &shapes)
    }
}

impl NmsPadded {
    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        expect_inputs(inputs, 2, 2)?;
        let (boxes, scores) = (inputs[0], inputs[1]);
        check_f32("boxes", boxes)?;
        check_f32("scores", scores)?;
        match (&boxes.shape[..], &scores.shape[..]) {
            (&[n, 4], &[m]) if n == m => {}
            _ => {
                return Err(OpError::Shape(format!(
                    "boxes must be [n, 4] and scores [n], got {boxes} and {scores}"
                )))
            }
        }
        let m = self.max_output;
        if m > MOST_ROWS {
            return Err(OpError::TooLarge(format!(
                "max_output_size {m} is more than {MOST_ROWS} boxes"
            )));
        }
        let mut out = vec![ValueType::new(DType::I32, vec![m])];
        if self.soft_nms_sigma.is_some() {
            out.push(ValueType::new(DType::F32, vec![m]));
        }
        out.push(ValueType::new(DType::I32, vec![]));
        Ok(out)
    }

    /// TFLite's NonMaxSuppression: candidates above the score threshold from
    /// the highest score down; one whose IoU with a selected box reaches the
    /// threshold is dropped, else (soft NMS) its score decays by each selected
    /// box it has not yet met, and it is selected if nothing decayed it, or goes
    /// back to the queue while it still scores above the threshold.
    fn run(&self, boxes: &[f32], scores: &[f32]) -> Vec<Tensor> {
        let sigma = self.soft_nms_sigma.unwrap_or(0.0);
        let scale = if sigma > 0.0 { -0.5 / sigma } else { 0.0 };
        let mut queue: BinaryHeap<Candidate> = (scores.iter().enumerate())
            .filter(|&(_, &s)| s > self.score_threshold)
            .map(|(index, &score)| Candidate {
                index,
                score,
                met: 0,
            })
            .collect();
        let wanted = queue.len().min(self.max_output);
        let (mut selected, mut selected_scores) = (Vec::new(), Vec::new());
        while selected.len() < wanted {
            let Some(mut c) = queue.pop() else { break };
            let original = c.score;
            let mut hard = false;
            for &s in selected[c.met..].iter().rev() {
                let iou = corner_iou(boxes, c.index, s);
                if iou >= self.iou_threshold {
                    hard = true;
                    break;
                }
                if sigma > 0.0 {
                    c.score *= (scale * iou * iou).exp();
                }
                if c.score <= self.score_threshold {
                    break;
                }
            }
            c.met = selected.len();
            if !hard {
                if c.score == original {
                    selected.push(c.index);
                    selected_scores.push(c.score);
                }
                // As TFLite's kernel does, a selected candidate goes back to the
                // queue too: met again, it overlaps itself and is dropped.
                if c.score > self.score_threshold {
                    queue.push(c);
                }
            }
        }
        let count = selected.len();
        let mut indices: Vec<i32> = selected.iter().map(|&i| i as i32).collect();
        indices.resize(self.max_output, 0);
        selected_scores.resize(self.max_output, 0.0);
        let mut out = vec![Tensor::new(vec![self.max_output], TensorData::I32(indices))];
        if self.soft_nms_sigma.is_some() {
            out.push(Tensor::from_f32(vec![self.max_output], selected_scores));
        }
        out.push(Tensor::new(vec![], TensorData::I32(vec![count as i32])));
        out
    }
}

/// A box waiting in [`NmsPadded`]'s queue: the highest score first, the lower
/// index on ties; `met` counts the selected boxes its score has met.
#[derive(Clone, Copy)]
struct Candidate {
    index: usize,
    score: f32,
    met: usize,
}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.score.total_cmp(&other.score)).then(other.index.cmp(&self.index))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Candidate {}

/// The IoU of boxes `i` and `j` of corner boxes (y1, x1, y2, x2, either corner
/// first), 0 where either has no area, in f32 as TFLite computes it.
fn corner_iou(boxes: &[f32], i: usize, j: usize) -> f32 {
    let corners = |k: usize| {
        let b = &boxes[4 * k..4 * k + 4];
        [
            b[0].min(b[2]),
            b[1].min(b[3]),
            b[0].max(b[2]),
            b[1].max(b[3]),
        ]
    };
    let (a, b) = (corners(i), corners(j));
    let area = |c: [f32; 4]| (c[2] - c[0]) * (c[3] - c[1]);
    let (area_a, area_b) = (area(a), area(b));
    if area_a <= 0.0 || area_b <= 0.0 {
        return 0.0;
    }
    let intersection =
        (a[2].min(b[2]) - a[0].max(b[0])).max(0.0) * (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let union = area_a + area_b - intersection;
    if union == 0.0 {
        0.0
    } else {
        intersection / union
    }
}

/// The most output rows a post-process may ask for (TFLite's own models ask
/// for tens to hundreds): a file's option cannot make the outputs huge.
const MOST_ROWS: usize = 1 << 20;

impl DetectionPostProcess {
    /// Rows of every output: boxes per detection times classes per box.
    fn rows(&self) -> usize {
        self.max_detections * self.max_classes_per_detection
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        self.check_attributes()?;
        expect_inputs(inputs, 3, 3)?;
        let (enc, cls, anchors) = (inputs[0], inputs[1], inputs[2]);
        for (what, t) in [
            ("box encodings", enc),
            ("class scores", cls),
            ("anchors", anchors),
        ] {
            check_f32(what, t)?;
        }
        match (&enc.shape[..], &cls.shape[..], &anchors.shape[..]) {
            (&[1, n, code], &[1, m, c], &[a, 4]) if n == m && n == a && code >= 4 => {
                if c != self.num_classes && c != self.num_classes + 1 {
                    return Err(OpError::Shape(format!(
                        "class scores {cls} must have num_classes = {} classes, or one more for the background",
                        self.num_classes
                    )));
                }
            }
            _ => {
                return Err(OpError::Shape(format!(
                    "box encodings must be [1, n, >= 4], class scores [1, n, classes] and anchors [n, 4], got {enc}, {cls} and {anchors}"
                )))
            }
        }
        let d = self.rows();
        Ok(vec![
            ValueType::new(DType::F32, vec![1, d, 4]),
            ValueType::new(DType::F32, vec![1, d]),
            ValueType::new(DType::F32, vec![1, d]),
            ValueType::new(DType::F32, vec![1]),
        ])
    }

    /// The limits TFLite's kernel checks, checked once here.
    fn check_attributes(&self) -> Result<(), OpError> {
        let bad = |what: String| Err(OpError::Attribute(what));
        if self.num_classes == 0 || self.max_classes_per_detection == 0 {
            return bad("num_classes and max_classes_per_detection must be positive".into());
        }
        if self.use_regular_nms && self.detections_per_class == 0 {
            return bad("detections_per_class must be positive for regular NMS".into());
        }
        if !(self.iou_threshold > 0.0 && self.iou_threshold <= 1.0) {
            return bad(format!(
                "nms_iou_threshold {} is not in (0, 1]",
                self.iou_threshold
            ));
        }
        if self.scale.iter().any(|&s| s == 0.0 || !s.is_finite()) {
            return bad(format!(
                "the scales {:?} must be finite and nonzero",
                self.scale
            ));
        }
        self.max_detections
            .checked_mul(self.max_classes_per_detection)
            .filter(|&d| d <= MOST_ROWS)
            .map(|_| ())
            .ok_or_else(|| {
                OpError::TooLarge(format!(
                    "{} detections of {} classes each are more than {MOST_ROWS} rows",
                    self.max_detections, self.max_classes_per_detection
                ))
            })
    }

    fn run(&self, x: &[&[f32]], shapes: &[&[usize]]) -> Result<Vec<Tensor>, OpError> {
        let (n, code, with_background) = (shapes[0][1], shapes[0][2], shapes[1][2]);
        let boxes = self.decode(x[0], x[2], n, code)?;
        let offset = with_background - self.num_classes;
        let score = |anchor: usize, class: usize| x[1][anchor * with_background + offset + class];
        let d = self.rows();
        let mut out_boxes = vec![0f32; d * 4];
        let (mut out_classes, mut out_scores) = (vec![0f32; d], vec![0f32; d]);
        let mut write = |row: usize, anchor: usize, class: usize, s: f32| {
            out_boxes[4 * row..4 * row + 4].copy_from_slice(&boxes[4 * anchor..4 * anchor + 4]);
            out_classes[row] = class as f32;
            out_scores[row] = s;
        };
        let count = if self.use_regular_nms {
            // NMS per class, each class's kept boxes merged with the best so far.
            let mut best: Vec<(usize, usize, f32)> = Vec::new();
            for class in 0..self.num_classes {
                let scores: Vec<f32> = (0..n).map(|a| score(a, class)).collect();
                let kept = self.nms(&boxes, &scores, self.detections_per_class);
                best.extend(kept.into_iter().map(|a| (a, class, scores[a])));
                // Stable: on ties the earlier class and box stay first.
                best.sort_by(|a, b| b.2.total_cmp(&a.2));
                best.truncate(self.max_detections);
            }
            for (row, &(anchor, class, s)) in best.iter().enumerate() {
                write(row, anchor, class, s);
            }
            best.len()
        } else {
            // One NMS on each box's best class score, each kept box reported
            // with its best classes.
            let per_box = self.max_classes_per_detection.min(self.num_classes);
            let ranked: Vec<Vec<usize>> = (0..n)
                .map(|a| {
                    let mut classes: Vec<usize> = (0..self.num_classes).collect();
                    classes.sort_by(|&i, &j| score(a, j).total_cmp(&score(a, i)));
                    classes.truncate(per_box);
                    classes
                })
                .collect();
            let best: Vec<f32> = (0..n).map(|a| score(a, ranked[a][0])).collect();
            let kept = self.nms(&boxes, &best, self.max_detections);
            for (k, &anchor) in kept.iter().enumerate() {
                for (col, &class) in ranked[anchor].iter().enumerate() {
                    let row = self.max_classes_per_detection * k + col;
                    write(row, anchor, class, score(anchor, class));
                }
            }
            kept.len()
        };
        Ok(vec![
            Tensor::from_f32(vec![1, d, 4], out_boxes),
            Tensor::from_f32(vec![1, d], out_classes),
            Tensor::from_f32(vec![1, d], out_scores),
            Tensor::from_f32(vec![1], vec![count as f32]),
        ])
    }

    /// The boxes as corners (ymin, xmin, ymax, xmax) from the encodings (y, x,
    /// h, w first in each row of `code`) and the anchors (y, x, h, w), in f64 as
    /// TFLite decodes them. A box whose corners come out swapped (a negative
    /// anchor extent) is an error, as in TFLite.
    fn decode(
        &self,
        enc: &[f32],
        anchors: &[f32],
        n: usize,
        code: usize,
    ) -> Result<Vec<f32>, OpError> {
        let [ys, xs, hs, ws] = self.scale.map(f64::from);
        let mut boxes = Vec::with_capacity(4 * n);
        for i in 0..n {
            let [y, x, h, w] = [0, 1, 2, 3].map(|k| f64::from(enc[i * code + k]));
            let [ay, ax, ah, aw] = [0, 1, 2, 3].map(|k| f64::from(anchors[i * 4 + k]));
            let yc = (y / ys * ah + ay) as f32;
            let xc = (x / xs * aw + ax) as f32;
            let half_h = (0.5 * (h / hs).exp() * ah) as f32;
            let half_w = (0.5 * (w / ws).exp() * aw) as f32;
            let b = [yc - half_h, xc - half_w, yc + half_h, xc + half_w];
            if b[0] > b[2] || b[1] > b[3] {
                return Err(OpError::Value(format!(
                    "anchor {i} decodes to the box {b:?}, whose corners are swapped (a negative anchor extent)"
                )));
            }
            boxes.extend(b);
        }
        Ok(boxes)
    }

    /// The post-process's single-class NMS: the boxes scoring at least the
    /// threshold, highest first (ties: the lower index), each kept unless a kept
    /// box overlaps it by more than the IoU threshold; at most `most`.
    fn nms(&self, boxes: &[f32], scores: &[f32], most: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..scores.len())
            .filter(|&i| scores[i] >= self.score_threshold)
            .collect();
        order.sort_by(|&i, &j| scores[j].total_cmp(&scores[i]));
        let mut active = vec![true; order.len()];
        let mut kept = Vec::new();
        for i in 0..order.len() {
            if kept.len() >= most {
                break;
            }
            if !active[i] {
                continue;
            }
            kept.push(order[i]);
            for j in i + 1..order.len() {
                if active[j] && corner_iou(boxes, order[i], order[j]) > self.iou_threshold {
                    active[j] = false;
                }
            }
        }
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nms(boxes: &[[f32; 4]], scores: &[f32], op: NmsPadded) -> (Vec<i32>, Vec<f32>, i32) {
        let flat: Vec<f32> = boxes.iter().flatten().copied().collect();
        let out = op.run(&flat, scores);
        let ints = |t: &Tensor| match &*t.data {
            TensorData::I32(v) => v.clone(),
            _ => unreachable!(),
        };
        let scores = match op.soft_nms_sigma {
            Some(_) => out[1].to_f32(),
            None => vec![],
        };
        (ints(&out[0]), scores, ints(out.last().unwrap())[0])
    }

    const BOXES: [[f32; 4]; 4] = [
        [0.0, 0.0, 1.0, 1.0],
        [0.0, 0.1, 1.0, 1.1], // IoU 0.818 with box 0
        [1.0, 1.0, 0.0, 0.0], // box 0 with its corners the other way round
        [2.0, 2.0, 3.0, 3.0], // apart
    ];

    #[test]
    fn hard_nms_drops_overlaps_at_the_threshold_and_pads_with_zeros() {
        let op = |iou_threshold| NmsPadded {
            max_output: 5,
            iou_threshold,
            score_threshold: 0.1,
            soft_nms_sigma: None,
        };
        // Box 2 is box 0 (IoU 1), box 1 overlaps it by 0.818.
        let (idx, _, n) = nms(&BOXES, &[0.9, 0.8, 0.7, 0.6], op(0.5));
        assert_eq!((idx, n), (vec![0, 3, 0, 0, 0], 2));
        // An IoU equal to the threshold suppresses.
        let (idx, _, n) = nms(&BOXES, &[0.9, 0.8, 0.7, 0.6], op(1.0));
        assert_eq!((idx, n), (vec![0, 1, 3, 0, 0], 3));
        // Scores at the threshold are not candidates.
        let (idx, _, n) = nms(&BOXES, &[0.9, 0.1, 0.1, 0.6], op(0.5));
        assert_eq!((idx, n), (vec![0, 3, 0, 0, 0], 2));
    }

    #[test]
    fn soft_nms_decays_overlapping_scores_and_reorders() {
        let op = NmsPadded {
            max_output: 4,
            iou_threshold: 1.0,
            score_threshold: 0.05,
            soft_nms_sigma: Some(0.5),
        };
        // Box 1 meets box 0 (IoU 0.818): 0.8 * exp(-0.818²) = 0.410, now below
        // box 3's 0.6; box 2 is box 0 again and is dropped (IoU 1).
        let (idx, scores, n) = nms(&BOXES, &[0.9, 0.8, 0.7, 0.6], op);
        assert_eq!((&idx[..], n), (&[0, 3, 1, 0][..], 3));
        let iou = 0.9f32 / 1.1;
        let decayed = 0.8 * (-iou * iou).exp();
        assert_eq!(&scores[..2], &[0.9, 0.6]);
        assert!((scores[2] - decayed).abs() < 1e-6, "{scores:?}");
        assert_eq!(scores[3], 0.0);
    }

    fn post_process(regular: bool, per_box: usize) -> DetectionPostProcess {
        DetectionPostProcess {
            max_detections: 2,
            max_classes_per_detection: per_box,
            detections_per_class: 2,
            use_regular_nms: regular,
            score_threshold: 0.3,
            iou_threshold: 0.5,
            num_classes: 2,
            scale: [10.0, 10.0, 5.0, 5.0],
        }
    }

    /// Three anchors, the first two overlapping (IoU 0.6), zero encodings:
    /// each box is its anchor. Scores with a background column first.
    fn run(op: &DetectionPostProcess, scores: [[f32; 3]; 3]) -> Vec<Vec<f32>> {
        let enc = vec![0f32; 12];
        let anchors = [0.5, 0.5, 1.0, 1.0, 0.5, 0.75, 1.0, 1.0, 3.0, 3.0, 1.0, 1.0];
        let cls: Vec<f32> = scores.iter().flatten().copied().collect();
        let shapes: [&[usize]; 3] = [&[1, 3, 4], &[1, 3, 3], &[3, 4]];
        let out = op.run(&[&enc, &cls, &anchors], &shapes).unwrap();
        out.iter().map(|t| t.to_f32()).collect()
    }

    #[test]
    fn fast_nms_keeps_each_box_by_its_best_class_and_reports_its_best_classes() {
        let out = run(
            &post_process(false, 2),
            [[0.0, 0.9, 0.4], [0.0, 0.2, 0.8], [0.0, 0.5, 0.1]],
        );
        // Box 0 (0.9) is kept, box 1 (0.8) overlaps it by 0.6 and goes, box 2 stays.
        assert_eq!(out[0][..8], [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0]);
        assert_eq!(out[0][8..12], [2.5, 2.5, 3.5, 3.5]);
        assert_eq!(out[1], [0.0, 1.0, 0.0, 1.0]);
        assert_eq!(out[2], [0.9, 0.4, 0.5, 0.1]);
        assert_eq!(out[3], [2.0]);
    }

    #[test]
    fn regular_nms_keeps_boxes_per_class_then_the_best_overall() {
        let out = run(
            &post_process(true, 1),
            [[0.0, 0.9, 0.4], [0.0, 0.2, 0.8], [0.0, 0.5, 0.1]],
        );
        // Class 0 keeps boxes 0 and 2, class 1 box 1 (0.8; box 0's 0.4 overlaps
        // it): the best two overall are 0.9 and 0.8.
        assert_eq!(out[0][..4], [0.0, 0.0, 1.0, 1.0]);
        assert_eq!(out[0][4..], [0.0, 0.25, 1.0, 1.25]);
        assert_eq!(out[1], [0.0, 1.0]);
        assert_eq!(out[2], [0.9, 0.8]);
        assert_eq!(out[3], [2.0]);
    }

    #[test]
    fn nothing_above_the_threshold_is_zeros_and_a_zero_count() {
        let out = run(&post_process(false, 1), [[0.9, 0.1, 0.2]; 3]);
        assert!(out[..3].iter().all(|o| o.iter().all(|&v| v == 0.0)));
        assert_eq!(out[3], [0.0]);
    }

    #[test]
    fn a_negative_anchor_extent_is_an_error() {
        let op = post_process(false, 1);
        let anchors = [0.5, 0.5, -1.0, 1.0];
        let shapes: [&[usize]; 3] = [&[1, 1, 4], &[1, 1, 3], &[1, 4]];
        let e = op
            .run(&[&[0.0; 4], &[0.0, 0.5, 0.5], &anchors], &shapes)
            .unwrap_err();
        assert!(e.to_string().contains("anchor 0"), "{e}");
    }
}
