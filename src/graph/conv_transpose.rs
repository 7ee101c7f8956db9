//! Transposed convolutions rewritten as ordinary convolutions, so that they
//! run on the convolution kernels (direct, 1x1 GEMM, Winograd) instead of a
//! generic loop nest.
//!
//! With stride `s` along an axis, output position `q = m*s + r` of the
//! uncropped transposed convolution only ever meets the kernel taps
//! `t = r + j*s`: every phase `r` is a stride-1 correlation of the input with
//! the taps of that phase, reversed. One convolution with `s` times the output
//! channels (channel `co*S + r` for the `S = ∏s` phases) computes every phase;
//! the sub-pixel interleave (DepthToSpace in CRD order, as a Reshape, Transpose
//! and Reshape) puts each phase at its positions, and a Slice cuts the
//! transposed convolution's pads. This is the equivalence behind sub-pixel
//! convolution ("Real-Time Single Image and Video Super-Resolution Using an
//! Efficient Sub-Pixel Convolutional Neural Network", Shi et al., CVPR 2016).
//! Per phase the kernel has `ceil(k/s)` taps, so where `s` does not divide `k`
//! the conv multiplies some zero weights; at most `(s/k + 1)^rank` times the
//! work, still on a kernel near the machine's peak.

use super::{
    DType, Graph, GraphError, NodeId, Op, Reshape, Slice, SliceAxis, Tensor, Transpose, ValueRef,
};
use crate::ops::{Conv, ConvTranspose, Window};

/// Rewrites every transposed convolution of f32 data with constant f32
/// weights (and bias), no dilation, as a convolution, a sub-pixel interleave
/// and a crop. Returns how many were rewritten.
pub fn conv_transposes_as_convs(g: &mut Graph) -> Result<usize, GraphError> {
    let mut rewritten = 0;
    for id in g.topo_order()? {
        if let Some(parts) = parts_of(g, id) {
            rewrite(g, id, parts)?;
            rewritten += 1;
        }
    }
    g.remove_dead_nodes();
    Ok(rewritten)
}

/// A transposed convolution that can be rewritten, with its operands.
struct Parts {
    op: ConvTranspose,
    x: ValueRef,
    w: Tensor,
    bias: Option<Vec<f32>>,
}

fn parts_of(g: &Graph, id: NodeId) -> Option<Parts> {
    let Op::ConvTranspose(op) = &g.node(id).op else {
        return None;
    };
    let ins = g.node_inputs(id);
    let x = ins[0];
    let f32_const = |v: &ValueRef| g.constant(*v).filter(|t| t.dtype() == DType::F32);
    let w = f32_const(&ins[1])?.clone();
    let bias = match ins.get(2) {
        Some(b) => Some(f32_const(b)?.f32s().into_owned()),
        None => None,
    };
    let dense_taps = op.window.dilations.iter().all(|&d| d == 1);
    (g.value_type(x).dtype == DType::F32 && dense_taps && w.shape[2..] == op.window.kernel[..])
        .then(|| Parts {
            op: op.clone(),
            x,
            w,
            bias,
        })
}

/// How one spatial axis is rewritten.
struct AxisPlan {
    stride: usize,
    /// Taps of the transposed kernel, and of each phase's kernel.
    taps: usize,
    phase_taps: usize,
    /// The conv's pads and output extent.
    pad_begin: usize,
    pad_end: usize,
    extent: usize,
    /// Where the transposed convolution's output starts in the interleaved
    /// phases, and its extent.
    crop: usize,
    out: usize,
}

impl AxisPlan {
    /// `input`: the input extent; `out`: the transposed conv's output extent;
    /// `pad`: its begin pad.
    fn new(stride: usize, taps: usize, input: usize, out: usize, pad: usize) -> AxisPlan {
        let phase_taps = taps.div_ceil(stride);
        // Conv output m is uncropped position m*s + r (with its full left pad
        // of phase_taps - 1); whole strides of the transposed pad are skipped
        // by padding the conv less.
        let skipped = (pad / stride).min(phase_taps - 1);
        let needed = (out + pad).div_ceil(stride) - skipped;
        let pad_begin = phase_taps - 1 - skipped;
        let pad_end = (needed + skipped).saturating_sub(input);
        AxisPlan {
            stride,
            taps,
            phase_taps,
            pad_begin,
            pad_end,
            extent: input + pad_begin + pad_end + 1 - phase_taps,
            crop: pad - skipped * stride,
            out,
        }
    }

    /// The transposed kernel's tap for phase `r` at conv tap `u`, if any.
    fn tap(&self, r: usize, u: usize) -> Option<usize> {
        let t = r + (self.phase_taps - 1 - u) * self.stride;
        (t < self.taps).then_some(t)
    }
}

fn rewrite(g: &mut Graph, id: NodeId, p: Parts) -> Result<(), GraphError> {
    let node = g.node(id);
    let (name, spans) = (node.name.clone(), node.spans.clone());
    let out_name = node.outputs[0].name.clone();
    let out_shape = node.outputs[0].ty.shape.clone();
    let x_shape = g.value_type(p.x).shape.clone();
    let rank = x_shape.len() - 2;
    let win = &p.op.window;
    let axes: Vec<AxisPlan> = (0..rank)
        .map(|i| {
            AxisPlan::new(
                win.strides[i],
                win.kernel[i],
                x_shape[i + 2],
                out_shape[i + 2],
                win.pad_begin(i),
            )
        })
        .collect();
    let weights = phase_weights(&p, &axes);
    let cout = out_shape[1];
    let phases: usize = axes.iter().map(|a| a.stride).product();
    let bias: Vec<f32> = (0..cout * phases)
        .map(|c| p.bias.as_ref().map_or(0.0, |b| b[c / phases]))
        .collect();
    let conv = Op::Conv(Conv {
        window: Window {
            kernel: axes.iter().map(|a| a.phase_taps).collect(),
            strides: vec![1; rank],
            dilations: vec![1; rank],
            pads: axes
                .iter()
                .map(|a| a.pad_begin)
                .chain(axes.iter().map(|a| a.pad_end))
                .collect(),
        },
        group: p.op.group,
    });
    let w = g.add_constant(&format!("{name}/phase_weights"), weights, spans.clone());
    let b = g.add_constant(
        &format!("{name}/phase_bias"),
        Tensor::from_f32(vec![cout * phases], bias),
        spans.clone(),
    );
    let conv = g.add_node(
        conv,
        &format!("{name}/phases"),
        &[p.x, w, b],
        &[],
        spans.clone(),
    )?;
    // [n, cout, s..., e...] -> [n, cout, e0, s0, e1, s1, ...] -> [n, cout, e*s...]
    let n = x_shape[0];
    let split: Vec<usize> = [n, cout]
        .into_iter()
        .chain(axes.iter().map(|a| a.stride))
        .chain(axes.iter().map(|a| a.extent))
        .collect();
    let perm: Vec<usize> = [0, 1]
        .into_iter()
        .chain((0..rank).flat_map(|i| [2 + rank + i, 2 + i]))
        .collect();
    let spread: Vec<usize> = [n, cout]
        .into_iter()
        .chain(axes.iter().map(|a| a.extent * a.stride))
        .collect();
    let mut v = ValueRef::new(conv, 0);
    for (step, op) in [
        ("split", Op::Reshape(Reshape { shape: split })),
        ("interleave", Op::Transpose(Transpose { perm })),
        ("spread", Op::Reshape(Reshape { shape: spread })),
    ] {
        v = ValueRef::new(
            g.add_node(op, &format!("{name}/{step}"), &[v], &[], spans.clone())?,
            0,
        );
    }
    let crop = Op::Slice(Slice {
        axes: axes
            .iter()
            .enumerate()
            .map(|(i, a)| SliceAxis {
                axis: i + 2,
                start: a.crop as i64,
                end: (a.crop + a.out) as i64,
                step: 1,
            })
            .collect(),
    });
    let y = g.add_node(crop, &name, &[v], &[out_name], spans)?;
    g.replace_uses(ValueRef::new(id, 0), ValueRef::new(y, 0));
    g.remove_node(id);
    Ok(())
}

/// The conv's weights `[cout * S, cin / group, phase taps...]`: output channel
/// `co * S + r` (phases `r` row-major over the axes) holds, for each input
/// channel of its group, the transposed kernel's taps of phase `r`, reversed.
fn phase_weights(p: &Parts, axes: &[AxisPlan]) -> Tensor {
    let ws = &p.w.shape;
    let (cin, cout_g, group) = (ws[0], ws[1], p.op.group);
    let cin_g = cin / group;
    let w = p.w.f32s();
    let phases: usize = axes.iter().map(|a| a.stride).product();
    let taps: usize = axes.iter().map(|a| a.phase_taps).product();
    let kernel: usize = axes.iter().map(|a| a.taps).product();
    let mut out = vec![0.0; cout_g * group * phases * cin_g * taps];
    for (oc, chunk) in out.chunks_exact_mut(cin_g * taps).enumerate() {
        let (co, phase) = (oc / phases, oc % phases);
        let (grp, co_g) = (co / cout_g, co % cout_g);
        for (ci, row) in chunk.chunks_exact_mut(taps).enumerate() {
            let src = &w[((grp * cin_g + ci) * cout_g + co_g) * kernel..][..kernel];
            for (u, dst) in row.iter_mut().enumerate() {
                // Row-major digits of the phase and the tap, axis by axis.
                let (mut r_rest, mut u_rest, mut t_flat) = (phase, u, 0);
                let mut inside = true;
                for (i, a) in axes.iter().enumerate() {
                    let r_div: usize = axes[i + 1..].iter().map(|a| a.stride).product();
                    let u_div: usize = axes[i + 1..].iter().map(|a| a.phase_taps).product();
                    let (r, uu) = (r_rest / r_div, u_rest / u_div);
                    (r_rest, u_rest) = (r_rest % r_div, u_rest % u_div);
                    match a.tap(r, uu) {
                        Some(t) => t_flat = t_flat * a.taps + t,
                        None => inside = false,
                    }
                }
                if inside {
                    *dst = src[t_flat];
                }
            }
        }
    }
    let shape = [cout_g * group * phases, cin_g]
        .into_iter()
        .chain(axes.iter().map(|a| a.phase_taps))
        .collect();
    Tensor::from_f32(shape, out)
}
