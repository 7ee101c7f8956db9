//! The sliding-window attributes Conv, ConvTranspose and the pools share:
//! kernel, strides, dilations and pads, with auto_pad resolved.

use super::context::{dims, NodeCtx, Res};
use crate::graph::Window;

/// Kernel, strides, dilations and pads of a conv or pool, with auto_pad resolved.
pub(super) fn window(
    c: &NodeCtx,
    spatial: &[usize],
    kernel: Vec<usize>,
    transposed: bool,
) -> Res<Window> {
    let r = spatial.len();
    let list = |name: &str, default: usize| -> Res<Vec<usize>> {
        match c.ints(name)? {
            Some(v) => dims(c, &v, name),
            None => Ok(vec![default; if name == "pads" { 2 * r } else { r }]),
        }
    };
    let strides = list("strides", 1)?;
    let dilations = list("dilations", 1)?;
    let mut pads = list("pads", 0)?;
    if strides.len() != r || dilations.len() != r || pads.len() != 2 * r || kernel.len() != r {
        return Err(c.err(format!(
            "kernel_shape {kernel:?}, strides {strides:?}, dilations {dilations:?} and pads {pads:?} do not fit {r} spatial axes"
        )));
    }
    if strides.contains(&0) || dilations.contains(&0) || kernel.contains(&0) {
        return Err(c.err(format!(
            "kernel_shape {kernel:?}, strides {strides:?} and dilations {dilations:?} must be positive"
        )));
    }
    let auto_pad = c.string("auto_pad", "NOTSET")?;
    match auto_pad.as_str() {
        "NOTSET" => {}
        "VALID" => pads = vec![0; 2 * r],
        "SAME_UPPER" | "SAME_LOWER" if !transposed => {
            for i in 0..r {
                let out = spatial[i].div_ceil(strides[i]).max(1);
                let covered = dilations[i]
                    .checked_mul(kernel[i] - 1)
                    .and_then(|e| e.checked_add(1))
                    .and_then(|e| e.checked_add((out - 1).checked_mul(strides[i])?))
                    .ok_or_else(|| {
                        c.err(format!(
                            "{auto_pad} padding overflows (kernel_shape {kernel:?}, strides {strides:?}, dilations {dilations:?})"
                        ))
                    })?;
                let total = covered.saturating_sub(spatial[i]);
                let (small, big) = (total / 2, total - total / 2);
                (pads[i], pads[i + r]) = if auto_pad == "SAME_UPPER" {
                    (small, big)
                } else {
                    (big, small)
                };
            }
        }
        "SAME_UPPER" | "SAME_LOWER" => {} // ConvTranspose resolves these itself.
        other => return Err(c.err(format!("auto_pad '{other}' is not known"))),
    }
    Ok(Window {
        kernel,
        strides,
        dilations,
        pads,
    })
}

/// The `kernel_shape` attribute, or else the weight's spatial extents.
pub(super) fn kernel_attr(c: &NodeCtx, from_weight: Option<&[usize]>) -> Res<Vec<usize>> {
    match (c.ints("kernel_shape")?, from_weight) {
        (Some(k), _) => dims(c, &k, "kernel_shape"),
        (None, Some(w)) => Ok(w.to_vec()),
        (None, None) => Err(c.err("needs the 'kernel_shape' attribute")),
    }
}
