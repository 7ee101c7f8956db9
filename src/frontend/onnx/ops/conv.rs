//! Convolutions: Conv, ConvTranspose, Col2Im as a transposed convolution,
//! DeformConv as bilinear samples gathered into columns for a 1x1 convolution,
//! and CausalConvWithState as a depthwise convolution over state and input.

use super::context::{dims, NodeCtx, Res};
use super::registry::{Registry, AI_ONNX};
use super::window::{kernel_attr, window};
use crate::core::TensorData;
use crate::graph::{
    BinaryOp, Conv, ConvTranspose, GridPadding, GridSample, Op, PadMode, Reshape, Sampling,
    SliceAxis, Tensor, UnaryOp, ValueRef, Window,
};
use crate::ops::{Concat, Gather, Pad, Slice, Transpose};

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "Conv", conv);
    reg.add(AI_ONNX, "ConvTranspose", conv_transpose);
    reg.add(AI_ONNX, "Col2Im", col2im);
    reg.add(AI_ONNX, "DeformConv", deform_conv);
    reg.add(AI_ONNX, "CausalConvWithState", causal_conv_with_state);
}

/// CausalConvWithState (opset 27, the short convolution of Mamba and Gated
/// DeltaNet decoders): a depthwise 1-D convolution, kernel k, over the past
/// state (k − 1 positions, zeros when absent) followed by the input, so that
/// each output position sees itself and the k − 1 before it; optionally
/// followed by SiLU. The present state is the last k − 1 positions of that
/// joined sequence. As a concatenation (or a pad), a convolution without
/// padding, and a slice.
fn causal_conv_with_state(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let (x, w) = (c.input(0)?, c.input(1)?);
    let (xs, ws) = (c.ty(x).shape, c.ty(w).shape);
    let [batch, channels, length] = xs[..] else {
        return Err(c.err(format!(
            "the input must be (batch, channels, length), got shape {xs:?}"
        )));
    };
    let k = match ws[..] {
        [m, 1, k] if m == channels && k > 0 => k,
        _ => {
            return Err(c.err(format!(
                "the weight must be ({channels}, 1, k) with k > 0 for {channels} channels, got shape {ws:?}"
            )))
        }
    };
    let silu = match c.string("activation", "none")?.as_str() {
        "none" => false,
        "silu" | "swish" => true,
        other => {
            return Err(c.err(format!(
                "activation '{other}' is not one of 'silu', 'swish', 'none'"
            )))
        }
    };
    let state = vec![batch, channels, k - 1];
    let joined = match c.opt_input(3) {
        _ if k == 1 => x,
        Some(past) if c.ty(past).shape == state => {
            c.emit_inner(Op::Concat(Concat { axis: 2 }), &[past, x], "joined")?
        }
        Some(past) => {
            return Err(c.err(format!(
                "past_state must have shape {state:?}, got {:?}",
                c.ty(past).shape
            )))
        }
        None => {
            let pad = Op::Pad(Pad {
                begins: vec![0, 0, k as i64 - 1],
                ends: vec![0; 3],
                mode: PadMode::Constant(0.0),
            });
            c.emit_inner(pad, &[x], "joined")?
        }
    };
    let mut inputs = vec![joined, w];
    inputs.extend(c.opt_input(2));
    let conv = Op::Conv(Conv {
        window: Window {
            kernel: vec![k],
            strides: vec![1],
            dilations: vec![1],
            pads: vec![0, 0],
        },
        group: channels,
    });
    let mut y = c.emit_inner(conv, &inputs, "conv")?;
    if silu {
        let gate = c.emit_inner(Op::Unary(UnaryOp::Sigmoid), &[y], "sigmoid")?;
        y = c.binary(BinaryOp::Mul, y, gate, "silu")?;
    }
    let present = Op::Slice(Slice {
        axes: vec![SliceAxis {
            axis: 2,
            start: length as i64,
            end: (length + k - 1) as i64,
            step: 1,
        }],
    });
    let present = c.emit_inner(present, &[joined], "present_state")?;
    Ok(vec![Some(y), Some(present)])
}

/// DeformConv (2-D): each tap of the window reads the input at its place
/// moved by a learned offset (input 2: per offset group, tap and output
/// position, a (y, x) pair), bilinearly with zeros outside, times an optional
/// mask (input 4). As the specification's reference computes it: per offset
/// group, a GridSample (align_corners, zeros) of the input at every tap's
/// places gives the taps as columns [N, C·kh·kw, oH, oW], which a 1x1
/// convolution of `group` groups, its weights [oC, C/group·kh·kw], sums, plus
/// the bias (input 3). The samples run on the GridSample kernel, the sums on
/// the convolution kernels.
fn deform_conv(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let (x, w, offset) = (c.input(0)?, c.input(1)?, c.input(2)?);
    let ConvParts {
        input_shape: xs,
        window: win,
        group,
        ..
    } = conv_parts_of(c, x, w, None, false)?;
    let (ws, os) = (c.ty(w).shape, c.ty(offset).shape);
    if xs.len() != 4 {
        return Err(c.err(format!(
            "only 2-D DeformConv is supported; the input is {xs:?}"
        )));
    }
    let (n, ic, ih, iw) = (xs[0], xs[1], xs[2], xs[3]);
    if group == 0 || ws[1].checked_mul(group) != Some(ic) || ws[0] % group != 0 {
        return Err(c.err(format!(
            "weight {ws:?} does not fit {ic} input channels in {group} groups"
        )));
    }
    let og = usize::try_from(c.int("offset_group", 1)?)
        .ok()
        .filter(|&g| g > 0 && ic % g == 0)
        .ok_or_else(|| {
            c.err(format!(
                "offset_group must be a positive divisor of the {ic} input channels"
            ))
        })?;
    // The output's extent along spatial axis `a`, as a convolution's.
    let extent = |a: usize| -> Option<usize> {
        let span = (win.dilations[a].checked_mul(win.kernel[a].checked_sub(1)?))?.checked_add(1)?;
        let padded = xs[2 + a]
            .checked_add(win.pads[a])?
            .checked_add(win.pads[2 + a])?;
        Some(padded.checked_sub(span)? / win.strides[a] + 1)
    };
    let (Some(oh), Some(ow)) = (extent(0), extent(1)) else {
        return Err(c.err(format!(
            "kernel {:?} (dilations {:?}) does not fit input {xs:?} padded by {:?}",
            win.kernel, win.dilations, win.pads
        )));
    };
    let taps = win.kernel[0] * win.kernel[1];
    let want = [n, og * taps * 2, oh, ow];
    if os != want {
        return Err(c.err(format!("offset is {os:?}, expected {want:?}")));
    }
    // GridSample's coordinates put -1 and 1 on the first and last pixel.
    if ih < 2 || iw < 2 {
        return Err(c.err(format!(
            "input {xs:?}: a height or width of 1 has no sampling coordinates (the specification divides by it minus 1)"
        )));
    }
    let dtype = c.ty(x).dtype;
    c.check_size(dtype, &[n, ic, taps, oh, ow])?;
    // Each tap's place in the window at every output position, in input
    // pixels, (x, y) as GridSample takes them: [1, 1, taps, 2, oH, oW].
    let mut places = Vec::with_capacity(taps * 2 * oh * ow);
    for ky in 0..win.kernel[0] {
        for kx in 0..win.kernel[1] {
            for axis in [1, 0] {
                let (k, pad) = ([ky, kx][axis], win.pads[axis] as f64);
                let (stride, dilation) = (win.strides[axis], win.dilations[axis]);
                for i in 0..oh {
                    for j in 0..ow {
                        let at = [i, j][axis] * stride + k * dilation;
                        places.push(at as f64 - pad);
                    }
                }
            }
        }
    }
    let constant = |c: &mut NodeCtx, what: &str, shape: Vec<usize>, v: Vec<f64>| {
        c.inner_constant(what, Tensor::new(shape, TensorData::from_f64(dtype, v)))
    };
    let places = constant(c, "window_places", vec![1, 1, taps, 2, oh, ow], places);
    // The offsets come (y, x): swapped as whole planes, before they are
    // moved last.
    let offsets = c.reshape_to(offset, vec![n, og, taps, 2, oh, ow], "offsets")?;
    let xy = c.inner_constant("xy", Tensor::from_i64(vec![2], vec![1, 0]));
    let offsets = c.emit_inner(Op::Gather(Gather { axis: 3 }), &[offsets, xy], "offsets_xy")?;
    let moved = c.binary(BinaryOp::Add, offsets, places, "moved")?;
    let to_grid = vec![2.0 / (iw - 1) as f64, 2.0 / (ih - 1) as f64];
    let to_grid = constant(c, "to_grid", vec![1, 1, 1, 2, 1, 1], to_grid);
    let one = constant(c, "one", vec![], vec![1.0]);
    let scaled = c.binary(BinaryOp::Mul, moved, to_grid, "scaled")?;
    let grid = c.binary(BinaryOp::Sub, scaled, one, "grid_planes")?;
    // GridSample takes the pair last, one image per offset group.
    let perm = vec![0, 1, 2, 4, 5, 3];
    let grid = c.emit_inner(Op::Transpose(Transpose { perm }), &[grid], "grid_points")?;
    let grid = c.reshape_to(grid, vec![n * og, taps * oh, ow, 2], "grid")?;
    let groups = c.reshape_to(x, vec![n * og, ic / og, ih, iw], "offset_groups")?;
    let sample = Op::GridSample(GridSample {
        mode: Sampling::Linear,
        padding: GridPadding::Zeros,
        align_corners: true,
        spatial: 2,
    });
    let samples = c.emit_inner(sample, &[groups, grid], "samples")?;
    let mut columns = c.reshape_to(samples, vec![n, og, ic / og, taps, oh, ow], "taps")?;
    if let Some(mask) = c.opt_input(4) {
        let (ms, want) = (c.ty(mask).shape, [n, og * taps, oh, ow]);
        if ms != want {
            return Err(c.err(format!("mask is {ms:?}, expected {want:?}")));
        }
        let mask = c.reshape_to(mask, vec![n, og, 1, taps, oh, ow], "mask")?;
        columns = c.binary(BinaryOp::Mul, columns, mask, "masked")?;
    }
    let columns = c.reshape_to(columns, vec![n, ic * taps, oh, ow], "columns")?;
    let weights = c.reshape_to(w, vec![ws[0], ws[1] * taps, 1, 1], "weights")?;
    let mut inputs = vec![columns, weights];
    inputs.extend(c.opt_input(3));
    let window = Window {
        kernel: vec![1, 1],
        strides: vec![1, 1],
        dilations: vec![1, 1],
        pads: vec![0; 4],
    };
    c.emit(Op::Conv(Conv { window, group }), &inputs)
}

/// Col2Im: input (N, C·∏block, L) holds the blocks of an image of
/// `image_shape` (input 1) one column each; the output sums every block
/// element onto the image position it came from. That is a transposed
/// convolution of the blocks (reshaped to their grid, L = ∏ L_d) with C groups
/// whose kernel of block size takes input channel `c·K + k` to position `k` of
/// the window of output channel `c`, weight one. Where the stride leaves some
/// image positions after the last block, output_padding adds them (they sum
/// nothing).
fn col2im(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let xs = c.ty(x).shape;
    let constant = |c: &NodeCtx, i: usize, what: &str| -> Res<Vec<usize>> {
        let v = c
            .const_ints(i)?
            .ok_or_else(|| c.err(format!("Col2Im needs a constant {what}")))?;
        dims(c, &v, what)
    };
    let image = constant(c, 1, "image_shape")?;
    let block = constant(c, 2, "block_shape")?;
    let r = image.len();
    // Strides, dilations and pads as every window reads them, checked alike.
    let w = window(c, &image, block.clone(), true)?;
    let per_block: usize = block.iter().product();
    if xs.len() != 3 || !xs[1].is_multiple_of(per_block) {
        return Err(c.err(format!(
            "input {xs:?} does not hold blocks {block:?} of an image {image:?}"
        )));
    }
    let channels = xs[1] / per_block;
    // Blocks along each axis, and the image positions after the last one.
    let mut grid = vec![];
    let mut output_padding = vec![];
    for a in 0..r {
        let span = w.dilations[a]
            .checked_mul(block[a] - 1)
            .and_then(|e| e.checked_add(1));
        let padded = image[a]
            .checked_add(w.pads[a])
            .and_then(|e| e.checked_add(w.pads[r + a]));
        let Some(room) = padded.zip(span).and_then(|(p, s)| p.checked_sub(s)) else {
            return Err(c.err(format!(
                "block {block:?} (dilations {:?}) does not fit image {image:?} padded by {:?}",
                w.dilations, w.pads
            )));
        };
        grid.push(room / w.strides[a] + 1);
        output_padding.push(room % w.strides[a]);
    }
    if grid.iter().product::<usize>() != xs[2] {
        return Err(c.err(format!(
            "input {xs:?} holds {} blocks, but image {image:?} has {grid:?} of them",
            xs[2]
        )));
    }
    let weight_shape = [&[xs[1], 1][..], &block].concat();
    let dtype = c.ty(x).dtype;
    c.check_size(dtype, &weight_shape)?;
    let mut weight = vec![0.0; xs[1] * per_block];
    for ch in 0..channels {
        for k in 0..per_block {
            weight[(ch * per_block + k) * per_block + k] = 1.0;
        }
    }
    let weight = Tensor::new(weight_shape, TensorData::from_f64(dtype, weight));
    let weight = c.inner_constant("weight", weight);
    let blocks_shape = [&xs[..2], &grid[..]].concat();
    let blocks = c.emit_inner(
        Op::Reshape(Reshape {
            shape: blocks_shape,
        }),
        &[x],
        "blocks",
    )?;
    let op = Op::ConvTranspose(ConvTranspose {
        window: w,
        group: channels,
        output_padding,
    });
    c.emit(op, &[blocks, weight])
}

/// What Conv and ConvTranspose read alike: their inputs (X, W and the optional
/// bias), the input's shape, the window and the group count.
pub(super) struct ConvParts {
    pub inputs: Vec<ValueRef>,
    pub input_shape: Vec<usize>,
    pub window: Window,
    pub group: usize,
}

fn conv_parts(c: &mut NodeCtx, transposed: bool) -> Res<ConvParts> {
    let (x, w) = (c.input(0)?, c.input(1)?);
    conv_parts_of(c, x, w, c.opt_input(2), transposed)
}

/// The parts of a convolution of `x` by `w` (plus `bias`) with the node's
/// attributes.
pub(super) fn conv_parts_of(
    c: &mut NodeCtx,
    x: ValueRef,
    w: ValueRef,
    bias: Option<ValueRef>,
    transposed: bool,
) -> Res<ConvParts> {
    let (xs, ws) = (c.ty(x).shape, c.ty(w).shape);
    if xs.len() < 3 || ws.len() != xs.len() {
        return Err(c.err(format!(
            "input {xs:?} and weight {ws:?} do not form a convolution"
        )));
    }
    let kernel = kernel_attr(c, Some(&ws[2..]))?;
    let window = window(c, &xs[2..], kernel, transposed)?;
    let group = usize::try_from(c.int("group", 1)?).map_err(|_| c.err("group must be positive"))?;
    let mut inputs = vec![x, w];
    inputs.extend(bias);
    Ok(ConvParts {
        inputs,
        input_shape: xs,
        window,
        group,
    })
}

fn conv(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let ConvParts {
        inputs,
        window,
        group,
        ..
    } = conv_parts(c, false)?;
    c.emit(Op::Conv(Conv { window, group }), &inputs)
}

fn conv_transpose(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let ConvParts {
        inputs,
        input_shape: xs,
        mut window,
        group,
    } = conv_parts(c, true)?;
    let r = xs.len() - 2;
    let mut output_padding = match c.ints("output_padding")? {
        Some(v) => dims(c, &v, "output_padding")?,
        None => vec![0; r],
    };
    if output_padding.len() != r {
        return Err(c.err(format!(
            "output_padding {output_padding:?} does not fit {r} spatial axes"
        )));
    }
    let auto_pad = c.string("auto_pad", "NOTSET")?;
    let output_shape = c.ints("output_shape")?;
    // An explicit output shape, or SAME auto padding, fixes the pads (ONNX spec formula).
    let target: Option<Vec<usize>> = match (&output_shape, auto_pad.as_str()) {
        (Some(s), _) => {
            let s = dims(c, s, "output_shape")?;
            Some(s[s.len().saturating_sub(r)..].to_vec())
        }
        (None, "SAME_UPPER" | "SAME_LOWER") => {
            Some((0..r).map(|i| xs[i + 2] * window.strides[i]).collect())
        }
        _ => None,
    };
    if let Some(target) = target {
        if target.len() != r {
            return Err(c.err(format!(
                "output_shape {target:?} does not fit {r} spatial axes"
            )));
        }
        for i in 0..r {
            let full = window.strides[i] * (xs[i + 2] - 1)
                + output_padding[i]
                + (window.kernel[i] - 1) * window.dilations[i]
                + 1;
            if full < target[i] {
                // The spec allows growing through output_padding when the target is larger.
                output_padding[i] += target[i] - full;
                window.pads[i] = 0;
                window.pads[i + r] = 0;
                continue;
            }
            let total = full - target[i];
            let (small, big) = (total / 2, total - total / 2);
            (window.pads[i], window.pads[i + r]) = if auto_pad == "SAME_UPPER" {
                (small, big)
            } else {
                (big, small)
            };
        }
    }
    c.emit(
        Op::ConvTranspose(ConvTranspose {
            window,
            group,
            output_padding,
        }),
        &inputs,
    )
}
