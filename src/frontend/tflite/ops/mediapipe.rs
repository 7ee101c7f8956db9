//! MediaPipe's custom operators. Their options are C structs copied into
//! `custom_options`: little-endian int32 fields read by position.

use super::{Cx, Res};
use crate::graph::{BinaryOp, DType, Op, ReduceKind, Tensor, ValueRef};
use crate::ops::{ArgKind, ArgReduce, Cast, Reduce, Reshape, Transpose};

/// Transposed convolution with bias.
pub(super) const CONVOLUTION_2D_TRANSPOSE_BIAS: &str = "CUSTOM:Convolution2DTransposeBias";
/// Max pooling that also outputs where in its window each maximum was.
pub(super) const MAX_POOLING_WITH_ARGMAX_2D: &str = "CUSTOM:MaxPoolingWithArgmax2D";
/// Puts each value back at the window position its index names.
pub(super) const MAX_UNPOOLING_2D: &str = "CUSTOM:MaxUnpooling2D";

/// NHWC split into windows, [N, h, kh, w, kw, C], to [N, h, w, C, kh, kw] and back.
const WINDOWS_LAST: [usize; 6] = [0, 1, 3, 5, 2, 4];
const WINDOWS_BACK: [usize; 6] = [0, 1, 4, 2, 5, 3];

/// The TfLitePoolParams fields these imports use (padding, stride_w, stride_h,
/// filter_w, filter_h, activation are the struct's first six).
struct PoolParams {
    /// [height, width].
    filter: [usize; 2],
    activation: i8,
}

impl Cx<'_, '_> {
    /// The first `N` int32 fields of the custom options; `fields` names them.
    fn custom_ints<const N: usize>(&self, fields: &str) -> Res<[i32; N]> {
        let bytes = self.op.custom_options().map_or(&[][..], |v| v.bytes());
        let Some(b) = bytes.get(..4 * N) else {
            return Err(self.err(format!(
                "custom options are {} bytes, but {} needs {} ({fields} as int32)",
                bytes.len(),
                self.span.op_type.trim_start_matches("CUSTOM:"),
                4 * N
            )));
        };
        Ok(std::array::from_fn(|i| {
            i32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
        }))
    }

    /// Convolution2DTransposeBias (input NHWC, weights OHWI, bias [O]); its options are
    /// a TfLiteTransposeConvParams: padding (1 SAME, 2 VALID), stride_w, stride_h. The
    /// output extent is `s * (in - 1) + k` less, for SAME, `max(0, k - (in - 1) % s - 1)`
    /// pixels trimmed (the smaller half at the start).
    pub(super) fn transpose_conv_bias(&mut self) -> Res<ValueRef> {
        let [padding, stride_w, stride_h] = self.custom_ints("padding, stride_w, stride_h")?;
        let same = match padding {
            1 => true,
            2 => false,
            p => return Err(self.err(format!("padding {p} is neither SAME (1) nor VALID (2)"))),
        };
        let stride = [stride_h, stride_w];
        if stride.iter().any(|&s| s <= 0) {
            return Err(self.err(format!("strides {stride:?} must be positive")));
        }
        let x = self.input(0)?;
        let xs = self.ty(x).shape.clone();
        let ws = self.imp.value_type(self.tensor_input(1)?)?.shape;
        if xs.len() != 4 || ws.len() != 4 || xs[1] == 0 || xs[2] == 0 {
            return Err(self.err(format!(
                "input {xs:?} (NHWC) and weights {ws:?} (OHWI) must be rank 4 with non-empty rows and columns"
            )));
        }
        let extent = |a: usize| {
            let (n, k, s) = (xs[a + 1] as i64, ws[a + 1] as i64, stride[a] as i64);
            let trimmed = if same {
                (k - (n - 1) % s - 1).max(0)
            } else {
                0
            };
            s * (n - 1) + k - trimmed
        };
        let target = [xs[0] as i64, extent(0), extent(1), ws[0] as i64];
        let y = self.conv_transpose_nhwc([0, 1, 2], same, stride, &target)?;
        self.activated_as_nhwc(y, 0)
    }

    /// The pooling options of MaxPoolingWithArgmax2D and MaxUnpooling2D. Only windows
    /// that tile the map are imported: filter equal to stride (then both paddings pad
    /// nothing where the filter divides the extent, checked by the caller).
    fn pool_params(&self) -> Res<PoolParams> {
        let [_, stride_w, stride_h, filter_w, filter_h, activation] =
            self.custom_ints("padding, stride_w, stride_h, filter_w, filter_h, activation")?;
        let filter = [filter_h, filter_w].map(|f| usize::try_from(f).unwrap_or(0));
        if filter.contains(&0) || [stride_h, stride_w] != [filter_h, filter_w] {
            return Err(self.unsupported(format!(
                "only non-overlapping windows are supported: filter {:?} must be positive and equal to the strides {:?}",
                [filter_h, filter_w],
                [stride_h, stride_w]
            )));
        }
        let activation = i8::try_from(activation)
            .map_err(|_| self.err(format!("activation {activation} is unknown")))?;
        Ok(PoolParams { filter, activation })
    }

    /// NHWC input `i` as [N, h, kh, w, kw, C] windows of `filter` = [kh, kw].
    fn nhwc_windows(&mut self, i: usize, filter: [usize; 2]) -> Res<(ValueRef, [usize; 4])> {
        let x = self.input(i)?;
        let xs = self.ty(x).shape.clone();
        let [n, h, w, c] = xs[..] else {
            return Err(self.err(format!("input must be NHWC (rank 4), got {}", self.ty(x))));
        };
        let [kh, kw] = filter;
        if !h.is_multiple_of(kh) || !w.is_multiple_of(kw) {
            return Err(self.unsupported(format!(
                "filter {filter:?} must divide the input's extents [{h}, {w}]"
            )));
        }
        let split = Op::Reshape(Reshape {
            shape: vec![n, h / kh, kh, w / kw, kw, c],
        });
        let v = self.emit(split, "windows", &[x])?;
        Ok((v, [n, h / kh, w / kw, c]))
    }

    /// MaxPoolingWithArgmax2D: the max of each window (with the fused activation) and,
    /// as float32, `fy * kw + fx + 0.1` for the window position of its first maximum.
    /// Over [N, h, w, C, kh * kw] windows: a max reduction and an argmax.
    pub(super) fn max_pool_argmax(&mut self) -> Res<Vec<ValueRef>> {
        let p = self.pool_params()?;
        let (windows, [n, h, w, c]) = self.nhwc_windows(0, p.filter)?;
        let last = Op::Transpose(Transpose {
            perm: WINDOWS_LAST.to_vec(),
        });
        let windows = self.emit(last, "windows_last", &[windows])?;
        let flat = Op::Reshape(Reshape {
            shape: vec![n, h, w, c, p.filter[0] * p.filter[1]],
        });
        let windows = self.emit(flat, "flatten_windows", &[windows])?;
        let max = Op::Reduce(Reduce {
            kind: ReduceKind::Max,
            axes: vec![4],
            keepdims: false,
        });
        let values = self.emit(max, "max", &[windows])?;
        let values = self.activation(values, p.activation)?;
        let argmax = Op::ArgReduce(ArgReduce {
            kind: ArgKind::Max,
            axis: 4,
            keepdims: false,
            select_last_index: false,
        });
        let at = self.emit(argmax, "argmax", &[windows])?;
        let at = self.emit(
            Op::Cast(Cast {
                to: DType::F32,
                saturate: false,
            }),
            "argmax_f32",
            &[at],
        )?;
        // MediaPipe adds 0.1 so that truncating back to an integer is exact.
        let tenth = self.constant_value("tenth", Tensor::scalar_f32(0.1));
        let indices = self.emit(Op::Binary(BinaryOp::Add), "indices", &[at, tenth])?;
        Ok(vec![values, indices])
    }

    /// MaxUnpooling2D (values, indices as MaxPoolingWithArgmax2D writes them): each
    /// value goes to the position of its window its index names, zeros elsewhere; the
    /// output is the input's extents times the filter. An index outside the window
    /// places nothing (MediaPipe would write into a neighbouring window).
    pub(super) fn max_unpooling(&mut self) -> Res<ValueRef> {
        let p = self.pool_params()?;
        let values = self.input(0)?;
        let indices = self.input(1)?;
        let vs = self.ty(values).shape.clone();
        let [n, h, w, c] = vs[..] else {
            return Err(self.err(format!(
                "values must be NHWC (rank 4), got {}",
                self.ty(values)
            )));
        };
        if self.ty(indices).shape != vs {
            return Err(self.err(format!(
                "indices {} must have the shape of the values {}",
                self.ty(indices),
                self.ty(values)
            )));
        }
        let [kh, kw] = p.filter;
        let with_axis = |shape: &[usize]| {
            Op::Reshape(Reshape {
                shape: [shape, &[1]].concat(),
            })
        };
        let truncated = self.emit(
            Op::Cast(Cast {
                to: DType::I64,
                saturate: false,
            }),
            "index",
            &[indices],
        )?;
        let truncated = self.emit(with_axis(&vs), "index_axis", &[truncated])?;
        let positions = (0..(kh * kw) as i64).collect();
        let positions =
            self.constant_value("positions", Tensor::from_i64(vec![kh * kw], positions));
        let chosen = self.emit(
            Op::Binary(BinaryOp::Equal),
            "chosen",
            &[truncated, positions],
        )?;
        let values = self.emit(with_axis(&vs), "value_axis", &[values])?;
        let zero = self.constant_value("zero", Tensor::scalar_f32(0.0));
        let placed = self.emit(Op::Where, "place", &[chosen, values, zero])?;
        let windows = Op::Reshape(Reshape {
            shape: vec![n, h, w, c, kh, kw],
        });
        let placed = self.emit(windows, "windows", &[placed])?;
        let back = Op::Transpose(Transpose {
            perm: WINDOWS_BACK.to_vec(),
        });
        let placed = self.emit(back, "windows_back", &[placed])?;
        let merge = Op::Reshape(Reshape {
            shape: vec![n, h * kh, w * kw, c],
        });
        // MediaPipe's kernel does not apply the activation its options carry.
        self.emit(merge, "unpool", &[placed])
    }
}
