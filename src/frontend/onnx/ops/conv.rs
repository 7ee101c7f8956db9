//! Convolutions: Conv, ConvTranspose, and Col2Im as a transposed convolution.

use super::context::{dims, NodeCtx, Res};
use super::registry::{Registry, AI_ONNX};
use super::window::{kernel_attr, window};
use crate::core::TensorData;
use crate::graph::{Conv, ConvTranspose, Op, Reshape, Tensor, ValueRef, Window};

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "Conv", conv);
    reg.add(AI_ONNX, "ConvTranspose", conv_transpose);
    reg.add(AI_ONNX, "Col2Im", col2im);
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
