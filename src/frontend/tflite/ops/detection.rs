//! Detection post-processing: NON_MAX_SUPPRESSION_V4/V5 with a constant most
//! boxes (their outputs padded to it), and the custom operator
//! `TFLite_Detection_PostProcess`, whose options are a FlexBuffers map.

use super::super::flexbuffer::{FlexMap, FlexValue};
use super::{Cx, Res};
use crate::graph::{DType, Op, ValueRef};
use crate::ops::{Detection, DetectionPostProcess, NmsPadded};

/// SSD box decoding and NMS, as the Object Detection API's TFLite export ends.
pub(super) const DETECTION_POST_PROCESS: &str = "CUSTOM:TFLite_Detection_PostProcess";

impl Cx<'_, '_> {
    /// NON_MAX_SUPPRESSION_V4 (boxes, scores, max_output_size, iou_threshold,
    /// score_threshold) and _V5 (also soft_nms_sigma); every input after the
    /// scores a constant scalar.
    pub(super) fn nms_padded(&mut self, soft: bool) -> Res<Vec<ValueRef>> {
        let boxes = self.input(0)?;
        let scores = self.input(1)?;
        let max_output = match self.const_extents(2, "max_output_size")?[..] {
            [m] => m,
            _ => return Err(self.err("max_output_size must be one integer")),
        };
        let iou_threshold = self.const_scalar(3, "iou_threshold")?;
        let score_threshold = self.const_scalar(4, "score_threshold")?;
        let soft_nms_sigma = match soft {
            true => Some(self.const_scalar(5, "soft_nms_sigma")?),
            false => None,
        };
        let op = Detection::Nms(NmsPadded {
            max_output,
            iou_threshold,
            score_threshold,
            soft_nms_sigma,
        });
        self.emit_all(Op::Detection(op), "nms", &[boxes, scores])
    }

    /// The float32 scalar of constant input `i`.
    fn const_scalar(&mut self, i: usize, what: &str) -> Res<f32> {
        let t = self.constant(i, what)?;
        match (t.dtype(), t.numel()) {
            (DType::F32, 1) => Ok(t.to_f32()[0]),
            _ => Err(self.err(format!(
                "{what} (input {i}) must be one float32, got {} of {:?}",
                t.dtype(),
                t.shape
            ))),
        }
    }

    /// TFLite_Detection_PostProcess (box encodings, class scores, anchors).
    pub(super) fn detection_post_process(&mut self) -> Res<Vec<ValueRef>> {
        let bytes = self.op.custom_options().map_or(&[][..], |v| v.bytes());
        let options =
            FlexMap::root(bytes).map_err(|e| self.err(format!("malformed custom options: {e}")))?;
        let get = |key: &str| {
            options
                .get(key)
                .map_err(|e| self.err(format!("malformed custom options: {e}")))
        };
        let required = |key: &str| {
            get(key)?.ok_or_else(|| self.err(format!("the custom options have no '{key}'")))
        };
        let count = |v: FlexValue, key: &str| {
            (v.as_int().and_then(|n| usize::try_from(n).ok()))
                .ok_or_else(|| self.err(format!("option '{key}' = {v:?} is not a count")))
        };
        let float = |v: FlexValue, key: &str| {
            (v.as_float().map(|f| f as f32))
                .ok_or_else(|| self.err(format!("option '{key}' = {v:?} is not a number")))
        };
        // TFLite's defaults for the two optional keys.
        let detections_per_class = match get("detections_per_class")? {
            None | Some(FlexValue::Null) => 100,
            Some(v) => count(v, "detections_per_class")?,
        };
        let use_regular_nms = match get("use_regular_nms")? {
            None | Some(FlexValue::Null) => false,
            Some(v) => v.as_int().is_some_and(|b| b != 0),
        };
        let op = DetectionPostProcess {
            max_detections: count(required("max_detections")?, "max_detections")?,
            max_classes_per_detection: count(
                required("max_classes_per_detection")?,
                "max_classes_per_detection",
            )?,
            detections_per_class,
            use_regular_nms,
            score_threshold: float(required("nms_score_threshold")?, "nms_score_threshold")?,
            iou_threshold: float(required("nms_iou_threshold")?, "nms_iou_threshold")?,
            num_classes: count(required("num_classes")?, "num_classes")?,
            scale: [
                float(required("y_scale")?, "y_scale")?,
                float(required("x_scale")?, "x_scale")?,
                float(required("h_scale")?, "h_scale")?,
                float(required("w_scale")?, "w_scale")?,
            ],
        };
        let inputs = [self.input(0)?, self.input(1)?, self.input(2)?];
        let op = Op::Detection(Detection::PostProcess(op));
        self.emit_all(op, "post_process", &inputs)
    }
}
