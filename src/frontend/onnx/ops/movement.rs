//! Data movement: Reshape and its kin (Flatten, Squeeze, Unsqueeze), Transpose,
//! Concat, Split, Slice, Gather, Compress, ReverseSequence, Pad, CenterCropPad,
//! Expand, Tile, DepthToSpace and SpaceToDepth, and the ops that pass their
//! input on (Identity, Dropout, Cast, CastLike, BitCast).

use super::context::{dims, NodeCtx, Res};
use super::registry::{Registry, AI_ONNX};
use crate::frontend::onnx::dtype_from_onnx;
use crate::graph::{
    broadcast_shapes, numel, DType, Op, PadMode, SliceAxis, Tensor, TensorData, ValueRef,
};
use crate::ops::{
    BitCast, Cast, Concat, Expand, Gather, Pad, Reshape, Slice, Split, Tile, Transpose,
};

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "Reshape", reshape);
    reg.add(AI_ONNX, "Flatten", flatten);
    reg.add(AI_ONNX, "Squeeze", squeeze);
    reg.add(AI_ONNX, "Unsqueeze", unsqueeze);
    reg.add(AI_ONNX, "Transpose", transpose);
    reg.add(AI_ONNX, "Concat", concat);
    reg.add(AI_ONNX, "Split", split);
    reg.add(AI_ONNX, "Slice", slice);
    reg.add(AI_ONNX, "Gather", gather);
    reg.add(AI_ONNX, "Compress", compress);
    reg.add(AI_ONNX, "ReverseSequence", reverse_sequence);
    reg.add(AI_ONNX, "Pad", pad);
    reg.add(AI_ONNX, "CenterCropPad", center_crop_pad);
    reg.add(AI_ONNX, "Expand", expand);
    reg.add(AI_ONNX, "Tile", tile);
    reg.add(AI_ONNX, "DepthToSpace", |c| depth_space(c, true));
    reg.add(AI_ONNX, "SpaceToDepth", |c| depth_space(c, false));
    reg.add(AI_ONNX, "Identity", |c| c.emit_all(Op::Identity));
    reg.add(AI_ONNX, "Dropout", dropout);
    reg.add(AI_ONNX, "Cast", cast);
    reg.add(AI_ONNX, "CastLike", cast_like);
    reg.add(AI_ONNX, "BitCast", bitcast);
}

fn reshape(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let target = c
        .const_ints(1)?
        .ok_or_else(|| c.err("Reshape needs its shape input"))?;
    let shape = reshape_target(c, &c.ty(x).shape, &target, c.bool_attr("allowzero", false)?)?;
    c.emit(Op::Reshape(Reshape { shape }), &[x])
}

/// Resolves a Reshape target: 0 copies the input dim (unless allowzero), -1 is inferred.
fn reshape_target(
    c: &NodeCtx,
    input: &[usize],
    target: &[i64],
    allowzero: bool,
) -> Res<Vec<usize>> {
    let mut shape = Vec::with_capacity(target.len());
    let mut infer = None;
    for (i, &t) in target.iter().enumerate() {
        shape.push(match t {
            -1 if infer.is_none() => {
                infer = Some(i);
                1
            }
            0 if !allowzero => *input.get(i).ok_or_else(|| {
                c.err(format!(
                    "shape {target:?}: 0 at axis {i} has no input axis to copy"
                ))
            })?,
            t if t >= 0 => t as usize,
            _ => return Err(c.err(format!("shape {target:?} is not a valid reshape target"))),
        });
    }
    if let Some(i) = infer {
        let known = numel(&shape);
        let total = numel(input);
        if known == 0 || !total.is_multiple_of(known) {
            return Err(c.err(format!(
                "cannot reshape {input:?} ({total} elements) to {target:?}"
            )));
        }
        shape[i] = total / known;
    }
    Ok(shape)
}

fn flatten(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let s = c.ty(x).shape;
    // Flatten's axis ranges over [-rank, rank].
    let r = s.len() as i64;
    let axis = c.int("axis", 1)?;
    let axis = match axis {
        a if (0..=r).contains(&a) => a as usize,
        a if (-r..0).contains(&a) => (a + r) as usize,
        a => return Err(c.err(format!("axis {a} is out of range for rank {r}"))),
    };
    let shape = vec![numel(&s[..axis]), numel(&s[axis..])];
    c.emit(Op::Reshape(Reshape { shape }), &[x])
}

fn transpose(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let rank = c.ty(x).shape.len();
    let perm = match c.ints("perm")? {
        Some(p) => p
            .iter()
            .map(|&a| {
                usize::try_from(a).map_err(|_| c.err(format!("perm {p:?} has a negative axis")))
            })
            .collect::<Res<Vec<_>>>()?,
        None => (0..rank).rev().collect(),
    };
    c.emit_all(Op::Transpose(Transpose { perm }))
}

fn concat(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let axis = c.int("axis", i64::MIN)?;
    if axis == i64::MIN {
        return Err(c.err("Concat needs the 'axis' attribute"));
    }
    let axis = c.axis(axis, c.ty(x).shape.len())?;
    c.emit_all(Op::Concat(Concat { axis }))
}

fn gather(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let axis = c.axis(c.int("axis", 0)?, c.ty(x).shape.len())?;
    c.emit_all(Op::Gather(Gather { axis }))
}

impl NodeCtx<'_> {
    /// The rows of `x` along `axis` at constant `positions`, as the node's output
    /// (reshaped to `shape` when given).
    fn rows_at(
        &mut self,
        x: ValueRef,
        axis: usize,
        positions: Vec<i64>,
        shape: Option<Vec<usize>>,
    ) -> Res<Vec<Option<ValueRef>>> {
        let at = Tensor::from_i64(vec![positions.len()], positions);
        let at = self.inner_constant("positions", at);
        let gather = Op::Gather(Gather { axis });
        match shape {
            None => self.emit(gather, &[x, at]),
            Some(shape) => {
                let rows = self.emit_inner(gather, &[x, at], "rows")?;
                self.emit(Op::Reshape(Reshape { shape }), &[rows])
            }
        }
    }
}

/// Compress: the slices along `axis` (of the flattened input without one) whose
/// entry of the condition (input 1, a constant) holds; entries past its end
/// count as false.
fn compress(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let s = c.ty(x).shape;
    let keep = c
        .const_input(1)?
        .ok_or_else(|| c.err("Compress needs its condition input"))?
        .data
        .to_f64();
    let (x, axis, extent) = match c.attr("axis") {
        Some(_) => {
            let axis = c.axis(c.int("axis", 0)?, s.len())?;
            (x, axis, s[axis])
        }
        None => {
            let flat = vec![numel(&s)];
            let x = c.emit_inner(Op::Reshape(Reshape { shape: flat }), &[x], "flat")?;
            (x, 0, numel(&s))
        }
    };
    if keep.len() > extent {
        return Err(c.err(format!(
            "the condition holds {} entries for an axis of {extent}",
            keep.len()
        )));
    }
    let positions = (0..keep.len() as i64)
        .filter(|&i| keep[i as usize] != 0.0)
        .collect();
    c.rows_at(x, axis, positions, None)
}

/// ReverseSequence: along `time_axis`, the first `sequence_lens[b]` steps of
/// each batch entry `b` (input 1, a constant) reversed and the rest kept; as a
/// gather of (time, batch) rows of the two axes flattened.
fn reverse_sequence(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let s = c.ty(x).shape;
    let (time, batch) = (c.int("time_axis", 0)?, c.int("batch_axis", 1)?);
    if s.len() < 2 || !matches!((time, batch), (0, 1) | (1, 0)) {
        return Err(c.err(format!(
            "time_axis {time} and batch_axis {batch} must be 0 and 1, in either order, of an input of rank 2 or more (shape {s:?})"
        )));
    }
    let lens = c
        .const_ints(1)?
        .ok_or_else(|| c.err("ReverseSequence needs its sequence_lens input"))?;
    let (steps, entries) = (s[time as usize], s[batch as usize]);
    if lens.len() != entries || lens.iter().any(|&l| !(0..=steps as i64).contains(&l)) {
        return Err(c.err(format!(
            "sequence_lens {lens:?} must hold one length in 0..={steps} per batch entry ({entries})"
        )));
    }
    // Row of (step t, entry b) in the flattened axes.
    let row = |t: i64, b: usize| match time {
        0 => t * entries as i64 + b as i64,
        _ => b as i64 * steps as i64 + t,
    };
    let mut positions = vec![0; steps * entries];
    for (b, &len) in lens.iter().enumerate() {
        for t in 0..steps as i64 {
            let from = if t < len { len - 1 - t } else { t };
            positions[row(t, b) as usize] = row(from, b);
        }
    }
    let mut flat = vec![steps * entries];
    flat.extend_from_slice(&s[2..]);
    let rows = c.emit_inner(Op::Reshape(Reshape { shape: flat }), &[x], "flat")?;
    c.rows_at(rows, 0, positions, Some(s))
}

fn expand(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let target = c
        .const_ints(1)?
        .ok_or_else(|| c.err("Expand needs its shape input"))?;
    let target = dims(c, &target, "shape")?;
    let shape = broadcast_shapes(&c.ty(x).shape, &target).map_err(|m| c.err(m))?;
    c.emit(Op::Expand(Expand { shape }), &[x])
}

fn tile(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let repeats = c
        .const_ints(1)?
        .ok_or_else(|| c.err("Tile needs its repeats input"))?;
    let repeats = dims(c, &repeats, "repeats")?;
    c.emit(Op::Tile(Tile { repeats }), &[x])
}

fn cast(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let op = Op::Cast(Cast {
        to: dtype_from_onnx(c.int("to", 0)? as i32).map_err(|m| c.err(format!("Cast: {m}")))?,
        saturate: c.bool_attr("saturate", true)?,
    });
    c.emit_all(op)
}

fn bitcast(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let to = dtype_from_onnx(c.int("to", 0)? as i32).map_err(|m| c.err(format!("BitCast: {m}")))?;
    c.emit_all(Op::BitCast(BitCast { to }))
}

/// CastLike casts to the element type of its second input. Types are static
/// here, so it is a Cast: one op to run, fold and export, and no edge to a
/// tensor whose values it never reads.
fn cast_like(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let (x, like) = (c.input(0)?, c.input(1)?);
    let to = c.ty(like).dtype;
    let saturate = c.bool_attr("saturate", true)?;
    c.emit(Op::Cast(Cast { to, saturate }), &[x])
}

fn dropout(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    if let Some(t) = c.const_input(2)? {
        if t.data.to_bool().first() == Some(&true) {
            return Err(c.err("Dropout in training mode is not supported"));
        }
    } else if c.opt_input(2).is_some() {
        return Err(c.err("Dropout training_mode must be a constant"));
    }
    let x = c.input(0)?;
    let mut outs = c.emit(Op::Identity, &[x])?;
    if c.node.output.len() > 1 {
        // In inference every element is kept: the mask is all true.
        let shape = c.ty(x).shape;
        c.check_size(DType::Bool, &shape)?;
        let mask = Tensor::new(shape.clone(), TensorData::Bool(vec![true; numel(&shape)]));
        let name = c.node.output[1].clone();
        outs.push(Some(c.g.add_constant(&name, mask, vec![c.span.clone()])));
    }
    Ok(outs)
}

fn split(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let s = c.ty(x).shape;
    let axis = c.axis(c.int("axis", 0)?, s.len())?;
    let n_out = c.node.output.len();
    let given = if c.opset >= 13 {
        c.const_ints(1)?
    } else {
        c.ints("split")?
    };
    let sizes = match given {
        Some(v) => dims(c, &v, "split")?,
        None => {
            let n = if c.opset >= 18 {
                // Absent, it is the node's output count; given, it must be that.
                match c
                    .attr("num_outputs")
                    .map(|_| c.int("num_outputs", 0))
                    .transpose()?
                {
                    None => n_out,
                    Some(k) if usize::try_from(k) == Ok(n_out) => n_out,
                    Some(k) => {
                        return Err(c.err(format!(
                            "num_outputs is {k}, but the node has {n_out} outputs"
                        )))
                    }
                }
            } else {
                n_out
            };
            if n == 0 {
                return Err(c.err("Split has no outputs"));
            }
            // Opset 18: uneven splits give ceil-sized chunks and a smaller last one.
            let chunk = s[axis].div_ceil(n);
            if c.opset < 18 && !s[axis].is_multiple_of(n) {
                return Err(c.err(format!(
                    "axis extent {} does not split evenly into {n}",
                    s[axis]
                )));
            }
            (0..n)
                .map(|i| chunk.min(s[axis].saturating_sub(i * chunk)))
                .collect()
        }
    };
    if sizes.len() != n_out {
        return Err(c.err(format!("{} split sizes for {n_out} outputs", sizes.len())));
    }
    c.emit(Op::Split(Split { axis, sizes }), &[x])
}

/// The axes of Squeeze and Unsqueeze: an attribute before opset 13, a
/// constant input from it.
fn squeeze_axes(c: &NodeCtx) -> Res<Option<Vec<i64>>> {
    if c.opset >= 13 {
        c.const_ints(1)
    } else {
        c.ints("axes")
    }
}

fn squeeze(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let s = c.ty(x).shape;
    let axes = match squeeze_axes(c)? {
        Some(a) => c.axes(&a, s.len())?,
        None => (0..s.len()).filter(|&i| s[i] == 1).collect(),
    };
    if let Some(&a) = axes.iter().find(|&&a| s[a] != 1) {
        return Err(c.err(format!(
            "cannot squeeze axis {a} of shape {s:?}: its extent is not 1"
        )));
    }
    let shape = s
        .iter()
        .enumerate()
        .filter(|(i, _)| !axes.contains(i))
        .map(|(_, &d)| d)
        .collect();
    c.emit(Op::Reshape(Reshape { shape }), &[x])
}

fn unsqueeze(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let s = c.ty(x).shape;
    let axes = squeeze_axes(c)?.ok_or_else(|| c.err("Unsqueeze needs axes"))?;
    let out_rank = s.len() + axes.len();
    let axes = c.axes(&axes, out_rank)?;
    let mut rest = s.iter();
    let shape = (0..out_rank)
        .map(|i| {
            if axes.contains(&i) {
                1
            } else {
                *rest.next().expect("rank adds up")
            }
        })
        .collect();
    c.emit(Op::Reshape(Reshape { shape }), &[x])
}

fn slice(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let s = c.ty(x).shape;
    // Before opset 10 starts, ends and axes are attributes and there are no steps.
    let (starts, ends, axes, steps) = if c.opset >= 10 {
        (
            c.const_ints(1)?,
            c.const_ints(2)?,
            c.const_ints(3)?,
            c.const_ints(4)?,
        )
    } else {
        (c.ints("starts")?, c.ints("ends")?, c.ints("axes")?, None)
    };
    let starts = starts.ok_or_else(|| c.err("Slice needs starts"))?;
    let ends = ends.ok_or_else(|| c.err("Slice needs ends"))?;
    let axes = match axes {
        Some(a) => c.axes(&a, s.len())?,
        None => (0..starts.len()).collect(),
    };
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(c.err(format!(
            "starts {starts:?}, ends {ends:?}, axes {axes:?} and steps {steps:?} differ in length"
        )));
    }
    let mut out = Vec::with_capacity(axes.len());
    for i in 0..axes.len() {
        let (axis, step) = (axes[i], steps[i]);
        if step == 0 {
            return Err(c.err("Slice step must not be zero"));
        }
        let d = s[axis] as i64;
        let norm = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
        // Clamp as the spec says: [0, d] going forward, [-1, d-1] going backward.
        let (start, end) = if step > 0 {
            (norm(starts[i]).clamp(0, d), norm(ends[i]).clamp(0, d))
        } else {
            (
                norm(starts[i]).clamp(0, d - 1),
                norm(ends[i]).clamp(-1, d - 1),
            )
        };
        out.push(SliceAxis {
            axis,
            start,
            end,
            step,
        });
    }
    c.emit(Op::Slice(Slice { axes: out }), &[x])
}

fn pad(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let s = c.ty(x).shape;
    let r = s.len();
    // Before opset 11 pads and value are attributes.
    let (pads, value) = if c.opset >= 11 {
        let value = c
            .const_input(2)?
            .map(|t| t.data.to_f64().first().copied().unwrap_or(0.0))
            .unwrap_or(0.0) as f32;
        (c.const_ints(1)?, value)
    } else {
        (c.ints("pads")?, c.float("value", 0.0)?)
    };
    let pads = pads.ok_or_else(|| c.err("Pad needs its pads"))?;
    let axes = match c.const_ints(3)? {
        Some(a) => c.axes(&a, r)?,
        None => (0..r).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return Err(c.err(format!("pads {pads:?} do not fit {} axes", axes.len())));
    }
    let (mut begins, mut ends) = (vec![0; r], vec![0; r]);
    for (k, &a) in axes.iter().enumerate() {
        begins[a] = pads[k];
        ends[a] = pads[k + axes.len()];
    }
    let mode = match c.string("mode", "constant")?.as_str() {
        "constant" => PadMode::Constant(value),
        "reflect" => PadMode::Reflect,
        "edge" => PadMode::Edge,
        "wrap" => PadMode::Wrap,
        other => return Err(c.err(format!("Pad mode '{other}' is not supported"))),
    };
    c.emit(Op::Pad(Pad { begins, ends, mode }), &[x])
}

/// CenterCropPad: each listed axis cropped or zero-padded to its target extent
/// around the centre (an odd remainder goes to the end), as one Pad whose
/// negative amounts crop.
fn center_crop_pad(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let s = c.ty(x).shape;
    let target = c
        .const_ints(1)?
        .ok_or_else(|| c.err("CenterCropPad needs its shape input"))?;
    let axes = match c.ints("axes")? {
        Some(a) => c.axes(&a, s.len())?,
        None => (0..s.len()).collect(),
    };
    if target.len() != axes.len() {
        return Err(c.err(format!(
            "shape {target:?} has {} entries for {} axes",
            target.len(),
            axes.len()
        )));
    }
    let target = dims(c, &target, "shape")?;
    let (mut begins, mut ends) = (vec![0; s.len()], vec![0; s.len()]);
    for (&a, &t) in axes.iter().zip(&target) {
        let change = t as i64 - s[a] as i64;
        // Half the change, rounded toward zero, before the data: a crop starts
        // half the excess in, rounded down, and a pad puts the larger half
        // after. Either way the odd element is at the end.
        let before = change / 2;
        begins[a] = before;
        ends[a] = change - before;
    }
    let pad = Pad {
        begins,
        ends,
        mode: PadMode::Constant(0.0),
    };
    c.emit(Op::Pad(pad), &[x])
}

/// DepthToSpace (`to_space`) and SpaceToDepth as the Reshape, Transpose,
/// Reshape their definitions are written in, in DCR or CRD order.
fn depth_space(c: &mut NodeCtx, to_space: bool) -> Res<Vec<Option<ValueRef>>> {
    let x = c.input(0)?;
    let s = c.ty(x).shape;
    let b = usize::try_from(c.int("blocksize", 0)?)
        .ok()
        .filter(|&b| b > 0)
        .ok_or_else(|| c.err("blocksize must be a positive integer"))?;
    let [n, ch, h, w] = s[..] else {
        return Err(c.err(format!("input shape {s:?} is not 4-D (NCHW)")));
    };
    let (split, perm, out) = if to_space {
        if ch % (b * b) != 0 {
            return Err(c.err(format!(
                "{ch} channels do not divide by blocksize² {}",
                b * b
            )));
        }
        let co = ch / (b * b);
        match c.string("mode", "DCR")?.as_str() {
            "DCR" => (
                vec![n, b, b, co, h, w],
                vec![0, 3, 4, 1, 5, 2],
                vec![n, co, h * b, w * b],
            ),
            "CRD" => (
                vec![n, co, b, b, h, w],
                vec![0, 1, 4, 2, 5, 3],
                vec![n, co, h * b, w * b],
            ),
            other => return Err(c.err(format!("DepthToSpace mode '{other}' is not known"))),
        }
    } else {
        if h % b != 0 || w % b != 0 {
            return Err(c.err(format!(
                "spatial extents {h}x{w} do not divide by blocksize {b}"
            )));
        }
        // Opset 28 added CRD, the inverse of DepthToSpace's CRD.
        let perm = match c.string("mode", "DCR")?.as_str() {
            "DCR" => vec![0, 3, 5, 1, 2, 4],
            "CRD" => vec![0, 1, 3, 5, 2, 4],
            other => return Err(c.err(format!("SpaceToDepth mode '{other}' is not known"))),
        };
        (
            vec![n, ch, h / b, b, w / b, b],
            perm,
            vec![n, ch * b * b, h / b, w / b],
        )
    };
    let split = c.emit_inner(Op::Reshape(Reshape { shape: split }), &[x], "split")?;
    let moved = c.emit_inner(Op::Transpose(Transpose { perm }), &[split], "moved")?;
    c.emit(Op::Reshape(Reshape { shape: out }), &[moved])
}
