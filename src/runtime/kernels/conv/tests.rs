//! The convolution kernels against independent computations: the
//! register-tiled convolution and the depthwise one against a naive loop
//! (every instruction set this CPU has, every channel blocking, tails that do
//! not divide), the epilogue activations against their scalar definitions,
//! Winograd against the paper's matrices and a naive loop, and the integer
//! kernel against the exact sums of its integers.

use crate::core::scalar::QuantizedArithmetic::Onnxruntime;
use crate::fusion::Activation;
use crate::graph::{DynamicQuantize, UnaryOp};
use crate::runtime::kernels::conv::algo::ConvSpec;
use crate::runtime::kernels::conv::depthwise::Depthwise;
use crate::runtime::kernels::conv::direct::{ConvGeom, PackedConv};
use crate::runtime::kernels::conv::int8::{IntegerWeights, QuantConv, StagedInput};
use crate::runtime::kernels::conv::pixel_lanes::PixelLanes;
use crate::runtime::kernels::conv::tile::{ChannelParams, Epilogue};
use crate::runtime::kernels::quantized::{Grid, QuantizedAdd};
use crate::runtime::kernels::simd::{amx, Isa, Scalar, Vector};
use crate::runtime::test_support::{available_isas, square_conv, Blocked, FusedTail, Rng};

/// The logical NCHW convolution computed plainly in f64.
fn naive_conv(g: &ConvGeom, x: &[f32], w: &[f32], b: &[f32]) -> Vec<f64> {
    let mut y = vec![0f64; g.n * g.cout * g.oh * g.ow];
    let (cin_g, cout_g) = (g.cin / g.groups, g.cout / g.groups);
    for n in 0..g.n {
        for o in 0..g.cout {
            for oy in 0..g.oh {
                for ox in 0..g.ow {
                    let mut s = b[o] as f64;
                    for j in 0..cin_g {
                        let i = (o / cout_g) * cin_g + j;
                        for ky in 0..g.k.0 {
                            for kx in 0..g.k.1 {
                                let iy = (oy * g.stride.0 + ky * g.dilation.0) as isize
                                    - g.pad.0 as isize;
                                let ix = (ox * g.stride.1 + kx * g.dilation.1) as isize
                                    - g.pad.1 as isize;
                                if iy < 0 || ix < 0 || iy >= g.h as isize || ix >= g.w as isize {
                                    continue;
                                }
                                let xv =
                                    x[((n * g.cin + i) * g.h + iy as usize) * g.w + ix as usize];
                                let wv = w[((o * cin_g + j) * g.k.0 + ky) * g.k.1 + kx];
                                s += xv as f64 * wv as f64;
                            }
                        }
                    }
                    y[((n * g.cout + o) * g.oh + oy) * g.ow + ox] = s;
                }
            }
        }
    }
    y
}

#[test]
fn tiled_conv_matches_a_naive_loop_for_every_isa_and_blocking() {
    let isas = available_isas();
    let mut rng = Rng(7);
    for case in 0..90 {
        let (mut cin, mut cout) = (rng.range(1, 20), rng.range(1, 40));
        let mut k = (rng.range(1, 3), rng.range(1, 3));
        let mut groups = 1;
        if case < 4 {
            // Packed weights over 64 KB: pieces of work ordered block by block.
            (cin, cout, k) = (40 + case, 50, (3, 3));
        }
        if case >= 60 {
            // Grouped: groups narrower than a vector (ResNeXt's 4 channels),
            // as wide as two (RegNet's 32 and more), and in between, their
            // input channels at any offset in the input's channel blocks.
            groups = rng.range(2, 6);
            let cout_g = [1, 3, 4, 8, 16, 20, 32, 64][rng.below(8)];
            (cin, cout) = (groups * rng.range(1, 6), groups * cout_g);
        }
        let dilation = (rng.range(1, 2), rng.range(1, 2));
        let mut pad = (rng.range(0, 2), rng.range(0, 2));
        // Padding at the bottom and right may differ from the top and left.
        let mut pad_end = (rng.range(0, 2), rng.range(0, 2));
        let mut stride = (rng.range(1, 2), rng.range(1, 2));
        if (4..12).contains(&case) {
            // A strided 1x1 window: the pointwise kernel on the staged pixels.
            (k, pad, pad_end) = ((1, 1), (0, 0), (0, 0));
            stride = [(2, 2), (2, 1), (1, 2), (3, 2)][case % 4];
        }
        let span = ((k.0 - 1) * dilation.0 + 1, (k.1 - 1) * dilation.1 + 1);
        let h = rng.range(span.0.saturating_sub(pad.0 + pad_end.0).max(1), 16);
        let w = rng.range(span.1.saturating_sub(pad.1 + pad_end.1).max(1), 30);
        let window = (k, stride, dilation);
        let g = ConvGeom {
            groups,
            ..random_blocked_geom(&mut rng, (cin, cout), (h, w), window, (pad, pad_end))
        };
        let mut x = rng.f32s(g.n * cin * h * w);
        // Every third case holds NaN and ±inf in the body and the tail of rows:
        // they must reach the outputs as IEEE arithmetic says (issue: a NaN
        // used to leave the epilogue's max as -inf or as the clamp bound).
        let nonfinite = case % 3 == 2;
        if nonfinite {
            sprinkle_nonfinite(&mut x);
        }
        let wt = rng.f32s(cout * (cin / groups) * k.0 * k.1);
        let bias = rng.f32s(cout);
        let residual = rng.f32s(g.y_len());
        let clamps = [
            (f32::NEG_INFINITY, f32::INFINITY),
            (0.0, f32::INFINITY),
            (-0.5, 0.5),
        ];
        let slopes = rng.f32s(cout);
        let tail = FusedTail::random(&residual, &slopes, &clamps, &mut rng);
        let xb = Blocked::input_of(&g).scatter(&x);
        let y_blocks = Blocked::output_of(&g);
        let expect = naive_conv(&g, &x, &wt, &bias);
        for &isa in &isas {
            let params = tail.params(&bias);
            let conv = PackedConv::new(g.clone(), isa, &wt, params, tail.epilogue(), Some(0.0));
            let mut y = vec![f32::NAN; g.y_len()];
            let mut scratch = vec![f32::NAN; conv.scratch_len()];
            conv.run(&xb, tail.residual, &mut y, &mut scratch);
            let close = |got: f64, e: f64| close_or_same_nonfinite(got, e, 1e-4);
            // Zero weights times a NaN or inf input are NaN.
            let what = format!("case {case} {isa:?} {g:?}");
            y_blocks.check(&y, &expect, tail, !nonfinite, close, &what);
        }
    }
}

/// NaN, +inf and -inf at every 29th element of `x`, in turn.
fn sprinkle_nonfinite(x: &mut [f32]) {
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY];
    for (k, i) in (0..x.len()).step_by(29).enumerate() {
        x[i] = specials[k % 3];
    }
}

/// `got` within `tol` relative to a finite `e` (plus `tol` absolute), NaN
/// where `e` is NaN and the same infinity where `e` is one.
fn close_or_same_nonfinite(got: f64, e: f64, tol: f64) -> bool {
    if e.is_nan() || e.is_infinite() {
        got.to_bits() == e.to_bits() || (e.is_nan() && got.is_nan())
    } else {
        (got - e).abs() <= tol * (1.0 + e.abs())
    }
}

/// (kernel, stride, dilation), each (rows, columns).
type ConvWindow = ((usize, usize), (usize, usize), (usize, usize));

/// A convolution of `cin` → `cout` channels over an `h` x `w` image with
/// padding `pad` before and `pad_end` after, its output extents those of the
/// window; the batch (1 or 2) and the channel blocks (1, 8, 16 or all
/// channels) drawn from `rng`.
fn random_blocked_geom(
    rng: &mut Rng,
    (cin, cout): (usize, usize),
    (h, w): (usize, usize),
    (k, stride, dilation): ConvWindow,
    (pad, pad_end): ((usize, usize), (usize, usize)),
) -> ConvGeom {
    let pick = |rng: &mut Rng, c: usize| [1, 8, 16, c][rng.below(4)];
    let (x_cb, y_cb) = (pick(rng, cin), pick(rng, cout));
    let span = ((k.0 - 1) * dilation.0 + 1, (k.1 - 1) * dilation.1 + 1);
    ConvGeom {
        n: rng.range(1, 2),
        cin,
        h,
        w,
        cout,
        oh: (h + pad.0 + pad_end.0 - span.0) / stride.0 + 1,
        ow: (w + pad.1 + pad_end.1 - span.1) / stride.1 + 1,
        k,
        stride,
        dilation,
        pad,
        groups: 1,
        x_cb,
        y_cb,
    }
}

/// Input and output channel blocks drawn independently (NCHW, NCHW8c,
/// NCHW16c, NCHW32c, NHWC on either side), every third case with NaN and ±inf
/// inputs; a quarter of the cases narrow groups of 2 to 16 channels, on every
/// instruction set whose vectors the blocks let hold them.
#[test]
fn depthwise_and_lane_groups_match_a_naive_loop_for_every_isa_and_blocking() {
    let isas = available_isas();
    let mut rng = Rng(5);
    let mut lane_group_runs = 0;
    for case in 0..160 {
        let group = match case % 4 {
            3 => [2, 4, 8, 16][rng.below(4)],
            _ => 1,
        };
        let c = group * rng.range(1, 40 / group + 1);
        let k = [(3, 3), (3, 3), (1, 1), (5, 5), (2, 3)][rng.below(5)];
        let dilation = (rng.range(1, 2), rng.range(1, 2));
        let pad = (rng.range(0, 2), rng.range(0, 2));
        let pad_end = (rng.range(0, 2), rng.range(0, 2));
        let stride = (rng.range(1, 2), rng.range(1, 2));
        let span = ((k.0 - 1) * dilation.0 + 1, (k.1 - 1) * dilation.1 + 1);
        // Widths up to 30 give full tiles, tails and border columns.
        let h = rng.range(span.0.saturating_sub(pad.0 + pad_end.0).max(1), 12);
        let w = rng.range(span.1.saturating_sub(pad.1 + pad_end.1).max(1), 30);
        // Blocks that split no group, for the lanes of a group to meet.
        let mut pick_cb = || match group {
            1 => [1, 8, 16, 32, c][rng.below(5)],
            _ => [8, 16, 32][rng.below(3)],
        };
        let (x_cb, y_cb) = (pick_cb(), pick_cb());
        let g = ConvGeom {
            n: rng.range(1, 2),
            cin: c,
            h,
            w,
            cout: c,
            oh: (h + pad.0 + pad_end.0 - span.0) / stride.0 + 1,
            ow: (w + pad.1 + pad_end.1 - span.1) / stride.1 + 1,
            k,
            stride,
            dilation,
            pad,
            groups: c / group,
            x_cb,
            y_cb,
        };
        let mut x = rng.f32s(g.n * c * h * w);
        if case % 3 == 2 {
            sprinkle_nonfinite(&mut x);
        }
        let wt = rng.f32s(c * group * k.0 * k.1);
        let bias = rng.f32s(c);
        let residual = rng.f32s(g.y_len());
        let clamps = [(f32::NEG_INFINITY, f32::INFINITY), (0.0, 6.0), (-0.5, 0.5)];
        let slopes = rng.f32s(c);
        let mut tail = FusedTail::random(&residual, &slopes, &clamps, &mut rng);
        // An activation after the clamp in a third of the cases.
        let acts = [
            UnaryOp::HardSwish,
            UnaryOp::Sigmoid,
            UnaryOp::LeakyRelu { alpha: 0.1 },
        ];
        tail.act = (case % 3 == 1).then(|| acts[rng.below(acts.len())]);
        let xb = Blocked::input_of(&g).scatter(&x);
        let y_blocks = Blocked::output_of(&g);
        let expect = naive_conv(&g, &x, &wt, &bias);
        for &isa in isas.iter().filter(|&&i| Depthwise::applies(&g, i)) {
            lane_group_runs += usize::from(group > 1);
            let params = tail.params(&bias);
            let d = Depthwise::new(g.clone(), isa, &wt, params, tail.epilogue(), Some(0.0));
            let mut y = vec![f32::NAN; g.y_len()];
            d.run(&xb, tail.residual, &mut y);
            let close = |got: f64, e: f64| close_or_same_nonfinite(got, e, 1e-5);
            let what = format!("case {case} {isa:?} {g:?}");
            y_blocks.check(&y, &expect, tail, true, close, &what);
        }
    }
    assert!(lane_group_runs > 20, "{lane_group_runs} narrow-group runs");
}

/// Few output channels per group in NCHW (1 to 8, groups of 1 to 3; every
/// third case depthwise, whose tiles take four rows; some of 48 input
/// channels per group, whose border columns run lane by lane), stride 1 or 2
/// along the rows, rows up to 70 columns (full tiles of three vectors, single
/// vectors, patched border and tail columns), every fused tail, every third
/// case with NaN and ±inf inputs, on every instruction set.
#[test]
fn pixel_lanes_match_a_naive_loop_for_every_isa() {
    let isas = available_isas();
    let mut rng = Rng(17);
    for case in 0..90 {
        let depthwise = case % 3 == 0;
        let groups = match depthwise {
            true => rng.range(1, 6),
            false => rng.range(1, 3),
        };
        let cout_g = match depthwise {
            true => 1,
            false => rng.range(1, 8),
        };
        // Some groups too wide for a patch of their border columns.
        let cin = match (depthwise, case % 10) {
            (true, _) => groups,
            (false, 1) => groups * 48,
            (false, _) => groups * rng.range(1, 6),
        };
        let k = [(3, 3), (1, 1), (5, 5), (2, 3), (7, 7)][rng.below(5)];
        let dilation = (rng.range(1, 2), rng.range(1, 2));
        let pad = (rng.range(0, 3), rng.range(0, 3));
        let pad_end = (rng.range(0, 3), rng.range(0, 3));
        let stride = (rng.range(1, 2), rng.range(1, 2));
        let span = ((k.0 - 1) * dilation.0 + 1, (k.1 - 1) * dilation.1 + 1);
        let h = span.0.saturating_sub(pad.0 + pad_end.0).max(1) + rng.below(12);
        let w = span.1.saturating_sub(pad.1 + pad_end.1).max(1) + rng.below(60);
        let g = ConvGeom {
            n: rng.range(1, 2),
            cin,
            h,
            w,
            cout: groups * cout_g,
            oh: (h + pad.0 + pad_end.0 - span.0) / stride.0 + 1,
            ow: (w + pad.1 + pad_end.1 - span.1) / stride.1 + 1,
            k,
            stride,
            dilation,
            pad,
            groups,
            x_cb: 1,
            y_cb: 1,
        };
        assert!(PixelLanes::applies(&g), "{g:?}");
        let mut x = rng.f32s(g.n * cin * h * w);
        let nonfinite = case % 3 == 2;
        if nonfinite {
            sprinkle_nonfinite(&mut x);
        }
        let wt = rng.f32s(g.cout * (cin / groups) * k.0 * k.1);
        let bias = rng.f32s(g.cout);
        let residual = rng.f32s(g.y_len());
        let slopes = rng.f32s(g.cout);
        let clamps = [(f32::NEG_INFINITY, f32::INFINITY), (0.0, 6.0), (-0.5, 0.5)];
        let tail = FusedTail::random(&residual, &slopes, &clamps, &mut rng);
        let expect = naive_conv(&g, &x, &wt, &bias);
        for &isa in &isas {
            let params = tail.params(&bias);
            let k = PixelLanes::new(g.clone(), isa, &wt, params, tail.epilogue());
            let mut y = vec![f32::NAN; g.y_len()];
            k.run(&x, tail.residual, &mut y);
            let close = |got: f64, e: f64| close_or_same_nonfinite(got, e, 1e-4);
            let what = format!("case {case} {isa:?} {g:?}");
            Blocked::output_of(&g).check(&y, &expect, tail, true, close, &what);
        }
    }
}

/// Every activation the conv epilogues apply, on every instruction set, against
/// its scalar definition in f64: a depthwise 1x1 convolution with weight 1 passes
/// its input through exactly (NaN and infinities included) to the epilogue, and a
/// pointwise one with identity weights does for finite inputs, also with an output
/// block narrower than the vector (the lane-by-lane store).
#[test]
fn epilogue_activations_match_their_scalar_definitions_on_every_isa() {
    let acts = [
        Activation::Swish,
        Activation::Unary(UnaryOp::Sigmoid),
        Activation::Unary(UnaryOp::Tanh),
        Activation::Unary(UnaryOp::HardSwish),
        Activation::Unary(UnaryOp::HardSigmoid {
            alpha: 0.2,
            beta: 0.5,
        }),
        Activation::Unary(UnaryOp::LeakyRelu { alpha: 0.1 }),
        Activation::Unary(UnaryOp::Gelu { tanh_approx: false }),
        Activation::Unary(UnaryOp::Gelu { tanh_approx: true }),
        Activation::Unary(UnaryOp::Elu { alpha: 1.0 }),
        Activation::Unary(UnaryOp::Exp),
        Activation::Unary(UnaryOp::Relu),
        // A quantized model's relu6 and its output grid (no ties at these values).
        Activation::Clamped {
            clamp: UnaryOp::Clip { min: 0.0, max: 6.0 },
            then: UnaryOp::QuantizeDequantize {
                scale: 0.03,
                zero_point: -3.0,
                min: -128.0,
                max: 127.0,
            },
        },
        Activation::Clamped {
            clamp: UnaryOp::Relu,
            then: UnaryOp::Sigmoid,
        },
    ];
    let c = 16;
    // Values over the whole range where each function bends, saturates or overflows.
    let mut x: Vec<f32> = (0..c * 40).map(|i| (i as f32 - 320.0) * 0.05).collect();
    x.extend([
        90.0, -90.0, 88.5, -87.5, 1e-6, -1e-6, 0.0, -0.0, 30.0, -30.0, 3.0, -3.0,
    ]);
    let finite = x.len();
    x.extend([f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1.0]);
    x.resize(x.len().div_ceil(c) * c, 0.5);
    let pixels = x.len() / c;
    let expect = |act: Activation, v: f32| -> f64 {
        let v = v as f64;
        match act {
            Activation::Unary(u) => u.apply(v),
            Activation::Swish => v * UnaryOp::Sigmoid.apply(v),
            Activation::Clamped { clamp, then } => then.apply(clamp.apply(v)),
            // Its slopes are per channel: the kernels' tests draw it in their tails.
            Activation::PRelu => unreachable!("not in `acts`"),
        }
    };
    let check = |act: Activation, isa: Isa, what: &str, i: usize, got: f32| {
        let (v, e, got) = (x[i], expect(act, x[i]), got as f64);
        let ok = if e.is_nan() {
            got.is_nan()
        } else if e.is_infinite() || e.abs() > f32::MAX as f64 {
            got == e
                || (e.abs() > f32::MAX as f64 && got.is_infinite() && got.signum() == e.signum())
        } else {
            (got - e).abs() <= 2e-6 * e.abs().max(1.0)
        };
        assert!(ok, "{act:?} {isa:?} {what}: f({v}) = {got}, expected {e}");
    };
    let isas = available_isas();
    for act in acts {
        for &isa in &isas {
            let ep = Epilogue::of(Some(act));
            // Depthwise, NCHW16c: x as [1, 16, 1, pixels] in blocks of 16 channels.
            let g = |cb: usize, depthwise: bool| ConvGeom {
                n: 1,
                cin: c,
                h: 1,
                w: pixels,
                cout: c,
                oh: 1,
                ow: pixels,
                k: (1, 1),
                stride: (1, 1),
                dilation: (1, 1),
                pad: (0, 0),
                groups: if depthwise { c } else { 1 },
                x_cb: if depthwise { cb } else { c },
                y_cb: cb,
            };
            let zeros = vec![0.0; c];
            let params = ChannelParams::bias_only(&zeros);
            let d = Depthwise::new(g(c, true), isa, &vec![1.0; c], params, ep, None);
            let mut y = vec![0f32; x.len()];
            d.run(&x, None, &mut y);
            for (i, &got) in y.iter().enumerate() {
                check(act, isa, "depthwise", i, got);
            }
            // Pointwise with identity weights, into blocks of 16 and of 3 channels.
            let identity: Vec<f32> = (0..c * c).map(|k| (k / c == k % c) as u8 as f32).collect();
            let xf: Vec<f32> = x
                .iter()
                .map(|&v| if v.is_finite() { v } else { 0.0 })
                .collect();
            for cb in [16, 3] {
                let geom = g(cb, false);
                let conv = PackedConv::new(geom.clone(), isa, &identity, params, ep, None);
                let mut y = vec![0f32; geom.y_len()];
                conv.run(&xf, None, &mut y, &mut vec![0.0; conv.scratch_len()]);
                for (i, &v) in xf.iter().enumerate().take(finite) {
                    let (px, ch) = (i / c, i % c);
                    let blocks = Blocked {
                        channels: c,
                        plane: pixels,
                        cb,
                    };
                    let got = y[blocks.at(0, ch, px)];
                    assert_eq!(v, x[i]);
                    check(act, isa, &format!("pointwise, blocks of {cb}"), i, got);
                }
            }
        }
    }
}

/// The written-out Winograd transforms along one axis are the matrices Bᵀ
/// and Aᵀ of Lavin and Gray: each maps the unit vector e_k to column k.
#[test]
fn winograd_line_transforms_are_the_papers_matrices() {
    use crate::runtime::kernels::conv::winograd::{F2Input, F2Output, F4Input, F4Output, Line};
    use crate::runtime::kernels::simd::{Scalar as Lane, Vector};
    fn columns<L: Line<A, R>, const A: usize, const R: usize>(want: [[f32; A]; R]) {
        for k in 0..A {
            // SAFETY: the one-lane type needs no instruction set.
            let got: Vec<f32> = unsafe {
                let unit = std::array::from_fn(|i| Lane::splat(if i == k { 1.0 } else { 0.0 }));
                L::apply::<Lane>(&unit)
                    .iter()
                    .map(|v| {
                        let mut out = 0f32;
                        v.store(&mut out);
                        out
                    })
                    .collect()
            };
            let column: Vec<f32> = want.iter().map(|row| row[k]).collect();
            assert_eq!(got, column, "column {k}");
        }
    }
    columns::<F2Input, 4, 4>([
        [1.0, 0.0, -1.0, 0.0],
        [0.0, 1.0, 1.0, 0.0],
        [0.0, -1.0, 1.0, 0.0],
        [0.0, 1.0, 0.0, -1.0],
    ]);
    columns::<F2Output, 4, 2>([[1.0, 1.0, 1.0, 0.0], [0.0, 1.0, -1.0, -1.0]]);
    columns::<F4Input, 6, 6>([
        [4.0, 0.0, -5.0, 0.0, 1.0, 0.0],
        [0.0, -4.0, -4.0, 1.0, 1.0, 0.0],
        [0.0, 4.0, -4.0, -1.0, 1.0, 0.0],
        [0.0, -2.0, -1.0, 2.0, 1.0, 0.0],
        [0.0, 2.0, -1.0, -2.0, 1.0, 0.0],
        [0.0, 4.0, 0.0, -5.0, 0.0, 1.0],
    ]);
    columns::<F4Output, 6, 4>([
        [1.0, 1.0, 1.0, 1.0, 1.0, 0.0],
        [0.0, 1.0, -1.0, 2.0, -2.0, 0.0],
        [0.0, 1.0, 1.0, 4.0, 4.0, 0.0],
        [0.0, 1.0, -1.0, 8.0, -8.0, 1.0],
    ]);
}

/// Every Winograd size against the naive loop: odd extents, padding on either
/// side, channel counts that do not fill a block in every blocking, with and
/// without the fused bias, residual and clamp, on one block of tiles and on
/// several; |error| ≤ 1e-4 · (1 + the largest |output|), the bound a whole
/// model is held to (Winograd's rounding error scales with the layer's
/// magnitude, not with each output's). NaN and infinities at a body and an
/// edge pixel make non-finite exactly the outputs they make non-finite in the
/// naive loop and in the direct kernel.
#[test]
fn winograd_matches_a_naive_loop_for_every_isa_tile_and_blocking() {
    use crate::runtime::kernels::conv::winograd::{TransformedWeights, WinogradConv, WinogradTile};
    let isas = available_isas();
    let mut rng = Rng(16);
    for case in 0..48 {
        // The first cases have enough tiles for several blocks per worker.
        let (cin, cout, h, w) = match case < 6 {
            true => (
                rng.range(40, 70),
                rng.range(33, 70),
                rng.range(19, 31),
                rng.range(19, 31),
            ),
            false => (
                rng.range(1, 40),
                rng.range(1, 40),
                rng.range(1, 17),
                rng.range(1, 17),
            ),
        };
        let pad = (rng.range(0, 2), rng.range(0, 2));
        let pad_end = (rng.range(0, 2), rng.range(0, 2));
        if h + pad.0 + pad_end.0 < 3 || w + pad.1 + pad_end.1 < 3 {
            continue;
        }
        let window = ((3, 3), (1, 1), (1, 1));
        let g = random_blocked_geom(&mut rng, (cin, cout), (h, w), window, (pad, pad_end));
        let x = rng.f32s(g.n * cin * h * w);
        let wt = rng.f32s(cout * cin * 9);
        let fused = case % 2 == 0;
        let bias = match fused {
            true => rng.f32s(cout),
            false => vec![0.0; cout],
        };
        let residual = rng.f32s(g.y_len());
        let (lo, hi) = match fused {
            true => (0.0, 2.0),
            false => (f32::NEG_INFINITY, f32::INFINITY),
        };
        // Where the non-finite inputs go: a body pixel, an edge pixel.
        let (nan_n, nan_c) = (rng.below(g.n), rng.below(cin));
        // An inner row or column where there is one.
        let inner = |rng: &mut Rng, n: usize| match n > 2 {
            true => rng.range(1, n - 2),
            false => rng.below(n),
        };
        let body_at = (inner(&mut rng, h), inner(&mut rng, w));
        let edge_at = match rng.below(4) {
            0 => (0, rng.below(w)),
            1 => (h - 1, rng.below(w)),
            2 => (rng.below(h), 0),
            _ => (rng.below(h), w - 1),
        };
        let x_blocks = Blocked::input_of(&g);
        let xb = x_blocks.scatter(&x);
        let plane = g.oh * g.ow;
        let y_blocks = Blocked::output_of(&g);
        // Unfused cases end in a PRelu half the time (after the clamp of a
        // fused one it would see no negative values).
        let slopes = rng.f32s(cout);
        let tail = FusedTail {
            residual: fused.then_some(&residual[..]),
            lo,
            hi,
            act: None,
            slope: (case % 4 == 1).then_some(&slopes[..]),
        };
        let expect = naive_conv(&g, &x, &wt, &bias);
        let tol = 1e-4 * (2.0 + expect.iter().fold(0f64, |m, e| m.max(e.abs())));
        for (&isa, tile) in isas
            .iter()
            .flat_map(|i| [(i, WinogradTile::F2), (i, WinogradTile::F4)])
        {
            // Run on that many threads: with few products, their rows are
            // cut between the threads.
            let threads = 1 + case % 3;
            let pool = crate::core::par::Pool::new(threads).unwrap();
            let ep = tail.epilogue();
            let u = TransformedWeights::new(tile, isa, cin, cout, &wt);
            let params = tail.params(&bias);
            let conv = WinogradConv::new(g.clone(), isa, &u, &wt, params, ep, Some(0.0), threads);
            let mut y = vec![f32::NAN; g.y_len()];
            let mut scratch = vec![f32::NAN; conv.scratch_len()];
            pool.install(|| conv.run(&xb, tail.residual, &mut y, &mut scratch));
            let close = |got: f64, e: f64| (got - e).abs() <= tol;
            let what = format!("case {case} {isa:?} {tile:?} {g:?}");
            y_blocks.check(&y, &expect, tail, true, close, &what);
            // NaN and ±inf at a body and at an edge pixel: exactly the
            // outputs the naive loop and the direct kernel make non-finite
            // are, with the same NaN or sign of infinity.
            let direct = PackedConv::new(g.clone(), isa, &wt, params, ep, Some(0.0));
            let mut yd = vec![f32::NAN; g.y_len()];
            let mut scratch_d = vec![f32::NAN; direct.scratch_len()];
            for (body, edge) in [(f32::NAN, f32::INFINITY), (f32::NEG_INFINITY, f32::NAN)] {
                let (mut xl, mut xn) = (x.clone(), xb.clone());
                for (v, (iy, ix)) in [(body, body_at), (edge, edge_at)] {
                    let yx = iy * w + ix;
                    xl[(nan_n * cin + nan_c) * h * w + yx] = v;
                    xn[x_blocks.at(nan_n, nan_c, yx)] = v;
                }
                let expect = naive_conv(&g, &xl, &wt, &bias);
                pool.install(|| conv.run(&xn, tail.residual, &mut y, &mut scratch));
                direct.run(&xn, tail.residual, &mut yd, &mut scratch_d);
                let class = |v: f64| (v.is_nan(), v.is_finite(), v > 0.0);
                for n in 0..g.n {
                    for c in 0..cout {
                        for yx in 0..plane {
                            let at = y_blocks.at(n, c, yx);
                            let e = tail.apply(expect[(n * cout + c) * plane + yx], at, c);
                            let (got, d) = (y[at] as f64, yd[at] as f64);
                            let what = format!("case {case} {isa:?} {tile:?} {body} body {body_at:?} {edge} edge {edge_at:?}: ({n},{c},{yx})");
                            assert_eq!(class(got), class(e), "{what}: got {got} want {e}");
                            assert_eq!(class(got), class(d), "{what}: got {got}, direct {d}");
                            assert!(
                                !e.is_finite() || (got - e).abs() <= tol,
                                "{what}: got {got} want {e}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// A random quantized convolution: its geometry, input grid and values,
/// per-channel weight steps and float weights, and the exact sums of the
/// integers (logical NCHW). Where `exact`, every step is 1.
struct QuantCase {
    g: ConvGeom,
    grid: Grid,
    x: Vec<f32>,
    steps: Vec<f32>,
    wt: Vec<f32>,
    sums: Vec<f64>,
}

/// Case `case` of the random quantized convolutions: u8 and s8 input grids
/// with any zero point, grouped, padded, dilated and strided 1x1 windows,
/// every channel blocking; every seventh with 30-150 input channels per
/// group (enough for AMX tiles).
fn quant_case(case: usize, exact: bool, rng: &mut Rng) -> QuantCase {
    let groups = if case % 4 == 3 { rng.range(2, 4) } else { 1 };
    let cin_g = match case % 7 {
        6 => rng.range(30, 150),
        _ => rng.range(1, 20),
    };
    let (cin, cout) = (groups * cin_g, groups * rng.range(1, 40));
    let mut k = (rng.range(1, 3), rng.range(1, 3));
    let dilation = (rng.range(1, 2), rng.range(1, 2));
    let mut pad = (rng.range(0, 2), rng.range(0, 2));
    let mut pad_end = (rng.range(0, 2), rng.range(0, 2));
    let mut stride = (rng.range(1, 2), rng.range(1, 2));
    if case % 5 == 1 {
        // A strided 1x1 window: staged as the subsampled plane.
        (k, pad, pad_end) = ((1, 1), (0, 0), (0, 0));
        stride = [(2, 2), (1, 1), (1, 2)][case % 3];
    }
    if case % 14 == 6 {
        // Many channels, a padded 3x3 window of stride 1: AMX tiles run
        // each image's rows as one flat row.
        (k, pad, pad_end, stride) = ((3, 3), (1, 1), (1, 1), (1, 1));
    }
    // A 1x1 window over one pixel (a convolution after a global pool): each
    // channel block follows the one before without a gap.
    let one_pixel = case % 9 == 4;
    if one_pixel {
        (k, pad, pad_end, stride) = ((1, 1), (0, 0), (0, 0), (1, 1));
    }
    let span = ((k.0 - 1) * dilation.0 + 1, (k.1 - 1) * dilation.1 + 1);
    let h = rng.range(span.0.saturating_sub(pad.0 + pad_end.0).max(1), 12);
    let w = rng.range(span.1.saturating_sub(pad.1 + pad_end.1).max(1), 30);
    let (h, w) = if one_pixel { (1, 1) } else { (h, w) };
    let g = ConvGeom {
        groups,
        ..random_blocked_geom(
            rng,
            (cin, cout),
            (h, w),
            (k, stride, dilation),
            (pad, pad_end),
        )
    };
    let min = if case.is_multiple_of(2) { -128i32 } else { 0 };
    let zero_point = min + rng.range(0, 255) as i32;
    let scale = if exact {
        1.0
    } else {
        0.01 + rng.below(100) as f32 / 1000.0
    };
    let grid = Grid {
        scale,
        zero_point: zero_point as f32,
        min: min as f32,
        max: (min + 255) as f32,
    };
    let xq: Vec<i32> = (0..g.n * cin * h * w)
        .map(|_| min + rng.range(0, 255) as i32)
        .collect();
    let x: Vec<f32> = xq
        .iter()
        .map(|&q| (q - zero_point) as f32 * scale)
        .collect();
    let cin_g = cin / groups;
    let per = cin_g * k.0 * k.1;
    let steps: Vec<f32> = (0..cout)
        .map(|_| {
            if exact {
                1.0
            } else {
                0.001 + rng.below(50) as f32 / 5000.0
            }
        })
        .collect();
    // A channel's first weight is its largest, 127 steps, as symmetric
    // quantizers make it (a few weights alone may lie on coarser grids too).
    let wq: Vec<i32> = (0..cout * per)
        .map(|i| match i % per {
            0 => 127,
            _ => rng.range(0, 254) as i32 - 127,
        })
        .collect();
    let wt: Vec<f32> = wq
        .iter()
        .enumerate()
        .map(|(i, &q)| q as f32 * steps[i / per])
        .collect();
    // The integers' sums (padding is the zero point: centered 0) in f64.
    let centered: Vec<f32> = xq.iter().map(|&q| (q - zero_point) as f32).collect();
    let wq_f: Vec<f32> = wq.iter().map(|&q| q as f32).collect();
    let none = vec![0f32; cout];
    let sums = naive_conv(&g, &centered, &wq_f, &none);
    QuantCase {
        g,
        grid,
        x,
        steps,
        wt,
        sums,
    }
}

/// Quantized convolutions against the f64 sum of their integers: u8 and s8
/// input grids with any zero point, per-channel weight steps, grouped,
/// padded, dilated and strided 1x1 windows, every channel blocking and
/// instruction set (AMX tiles and `vpdpbusd` both, where the CPU has them),
/// with a residual, clamp and PRelu. Where every step is 1
/// and every added value an integer, the output is the exact sum: equal,
/// not close.
#[test]
fn int8_conv_sums_quantized_values_exactly() {
    let isas = available_isas();
    let mut rng = Rng(11);
    let mut flat = 0;
    for case in 0..60 {
        let exact = case % 3 == 0;
        let QuantCase {
            g,
            grid,
            x,
            steps,
            wt,
            sums,
        } = quant_case(case, exact, &mut rng);
        let (cout, scale) = (g.cout, grid.scale);
        let integers = |n: usize, rng: &mut Rng| -> Vec<f32> {
            (0..n).map(|_| rng.range(0, 40) as f32 - 20.0).collect()
        };
        let (bias, residual) = match exact {
            true => (integers(cout, &mut rng), integers(g.y_len(), &mut rng)),
            false => (rng.f32s(cout), rng.f32s(g.y_len())),
        };
        let plane = g.oh * g.ow;
        let expect: Vec<f64> = sums
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let o = i / plane % cout;
                s * scale as f64 * steps[o] as f64 + bias[o] as f64
            })
            .collect();
        let clamps = [
            (f32::NEG_INFINITY, f32::INFINITY),
            (0.0, f32::INFINITY),
            (-0.5, 0.5),
        ];
        let slopes = vec![0.5f32; cout];
        let tail = FusedTail::random(&residual, &slopes, &clamps, &mut rng);
        let weights = IntegerWeights::recover(&wt, cout).expect("weights on a grid");
        let xb = Blocked::input_of(&g).scatter(&x);
        let y_blocks = Blocked::output_of(&g);
        let variants = isas.iter().flat_map(|&isa| [(isa, false), (isa, true)]);
        let tiled = |&(isa, tiles): &(Isa, bool)| !tiles || isa == Isa::Avx512 && amx::available();
        for (isa, tiles) in variants.filter(tiled) {
            let spec = ConvSpec {
                geom: g.clone(),
                isa,
                w: &wt,
                params: tail.params(&bias),
                epilogue: tail.epilogue(),
                pad_fill: Some(0.0),
                threads: 1,
                grid: Some(grid),
                residual: tail.residual.is_some(),
                dynamic: None,
            };
            let conv = QuantConv::with_tiles(&spec, grid, &weights, tiles).expect("bytes");
            flat += usize::from(conv.runs_flat());
            let mut y = vec![f32::NAN; g.y_len()];
            let mut scratch = vec![f32::NAN; conv.scratch_len()];
            conv.run(&xb, tail.residual, &mut y, &mut scratch);
            let close = |got: f64, e: f64| match exact {
                true => got == e,
                false => (got - e).abs() <= 1e-5 * (1.0 + e.abs()),
            };
            let what = format!("case {case} {isa:?} tiles {tiles} {g:?} {grid:?}");
            y_blocks.check(&y, &expect, tail, true, close, &what);
        }
    }
    // Cases 6, 20, 34 and 48 run flat where the CPU has AMX.
    assert!(flat >= 4 || !amx::available(), "{flat} cases ran flat rows");
}

/// A quantized convolution that quantizes its float input itself, onto the
/// grid `DynamicQuantize` fits to it at every run (TFLite's hybrid
/// kernels), computes the float convolution of the op's reference output:
/// asymmetric and symmetric grids, the quantization cases' geometries and
/// weights on every instruction set, with a bias and a relu. The input's
/// padding channels hold 0, as the op's padding requirement makes the
/// planner keep them.
#[test]
fn int8_conv_quantizing_its_input_per_run_matches_the_ops_reference() {
    let isas = available_isas();
    let mut rng = Rng(41);
    for case in 0..28 {
        let QuantCase { g, wt, .. } = quant_case(case, false, &mut rng);
        let op = DynamicQuantize {
            axis: 0,
            symmetric: case % 2 == 1,
        };
        let offset = rng.f32s(1)[0] * 2.0;
        let x: Vec<f32> = (rng.f32s(g.n * g.cin * g.h * g.w).iter())
            .map(|v| v * 3.0 + offset)
            .collect();
        let mut on_grid = vec![0f32; x.len()];
        op.apply(&x, x.len(), &mut on_grid);
        let bias = rng.f32s(g.cout);
        let expect = naive_conv(&g, &on_grid, &wt, &bias);
        let weights = IntegerWeights::recover(&wt, g.cout).expect("weights on a grid");
        let mut xb = Blocked::input_of(&g).scatter(&x);
        xb.iter_mut().filter(|v| v.is_nan()).for_each(|v| *v = 0.0);
        let y_blocks = Blocked::output_of(&g);
        let relu = FusedTail {
            residual: None,
            lo: 0.0,
            hi: f32::INFINITY,
            act: None,
            slope: None,
        };
        let any = Grid::any_fitted(&op);
        for &isa in &isas {
            let spec = ConvSpec {
                grid: None,
                dynamic: Some(op),
                ..quant_spec(&g, isa, &wt, &bias, relu.epilogue(), any)
            };
            let conv = QuantConv::new(&spec, any, &weights).expect("a grid of bytes");
            assert!(conv.quantizes_input());
            let mut y = vec![f32::NAN; g.y_len()];
            let mut scratch = vec![f32::NAN; conv.scratch_len()];
            conv.run(&xb, None, &mut y, &mut scratch);
            let close = |got: f64, e: f64| (got - e).abs() <= 1e-5 * (1.0 + e.abs());
            let what = format!("case {case} {isa:?} {g:?} {op:?}");
            y_blocks.check(&y, &expect, relu, true, close, &what);
        }
    }
}

/// A quantized convolution whose output is rounded onto a grid is
/// requantized as onnxruntime's and XNNPACK's integer kernels do it: the
/// integer sum with the integer bias, times the f32 multiplier `in_step *
/// w_step / out_step`, clamped (a relu), rounded half to even, plus the zero
/// point and clamped to the type's range. Bit for bit, on every instruction
/// set; a bias off the sums' grid is added in float instead.
#[test]
fn int8_conv_requantizes_onto_the_output_grid_as_integer_kernels_do() {
    let isas = available_isas();
    let mut rng = Rng(23);
    for case in 0..40 {
        let QuantCase {
            g,
            grid,
            x,
            steps,
            wt,
            sums,
        } = quant_case(case, false, &mut rng);
        let weights = IntegerWeights::recover(&wt, g.cout).expect("weights on a grid");
        assert_eq!(
            weights.scale, steps,
            "case {case}: the steps recovered exactly"
        );
        let sum_steps: Vec<f32> = steps.iter().map(|s| grid.scale * s).collect();
        let bias_q: Vec<i64> = (0..g.cout)
            .map(|_| rng.range(0, 4000) as i64 - 2000)
            .collect();
        let bias: Vec<f32> = bias_q
            .iter()
            .zip(&sum_steps)
            .map(|(&q, s)| q as f32 * s)
            .collect();
        let (qmin, qmax) = if case % 2 == 0 { (0, 255) } else { (-128, 127) };
        let out = UnaryOp::QuantizeDequantize {
            scale: 0.002 + rng.below(100) as f32 / 2000.0,
            zero_point: (qmin + rng.range(0, 255) as i32) as f32,
            min: qmin as f32,
            max: qmax as f32,
        };
        let UnaryOp::QuantizeDequantize {
            scale: out_step,
            zero_point,
            ..
        } = out
        else {
            unreachable!()
        };
        let relu = case % 3 == 0;
        let plane = g.oh * g.ow;
        let expect: Vec<f64> = sums
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                let o = i / plane % g.cout;
                let v = (s as i64 + bias_q[o]) as f32 * (sum_steps[o] / out_step);
                let v = if relu { v.max(0.0) } else { v };
                let q = (v.round_ties_even() + zero_point).clamp(qmin as f32, qmax as f32);
                f64::from((q - zero_point) * out_step)
            })
            .collect();
        // A relu before the rounding, fused as TFLite models write it.
        let epilogue = Epilogue::of(Some(match relu {
            true => Activation::Clamped {
                clamp: UnaryOp::Relu,
                then: out,
            },
            false => Activation::Unary(out),
        }));
        let xb = Blocked::input_of(&g).scatter(&x);
        let y_blocks = Blocked::output_of(&g);
        let plain = FusedTail {
            residual: None,
            lo: f32::NEG_INFINITY,
            hi: f32::INFINITY,
            act: None,
            slope: None,
        };
        for &isa in &isas {
            let spec = quant_spec(&g, isa, &wt, &bias, epilogue, grid);
            let conv = QuantConv::new(&spec, grid, &weights).expect("a grid of bytes");
            let mut y = vec![f32::NAN; g.y_len()];
            let mut scratch = vec![f32::NAN; conv.scratch_len()];
            conv.run(&xb, None, &mut y, &mut scratch);
            let what = format!("case {case} {isa:?} {g:?} {grid:?} relu {relu}");
            y_blocks.check(&y, &expect, plain, true, |got, e| got == e, &what);
        }
    }
}

/// A random grid of case `case`'s 8-bit type: u8 on even cases, else s8.
fn random_grid(case: usize, rng: &mut Rng) -> Grid {
    let min = if case.is_multiple_of(2) { 0 } else { -128 };
    Grid {
        scale: 0.02 + rng.below(100) as f32 / 500.0,
        zero_point: (min + rng.range(0, 255) as i32) as f32,
        min: min as f32,
        max: (min + 255) as f32,
    }
}

/// A one-thread convolution over an input on `grid`, with `bias` and
/// `epilogue` and no residual.
fn quant_spec<'a>(
    g: &ConvGeom,
    isa: Isa,
    w: &'a [f32],
    bias: &'a [f32],
    epilogue: Epilogue,
    grid: Grid,
) -> ConvSpec<'a> {
    ConvSpec {
        epilogue,
        pad_fill: Some(0.0),
        grid: Some(grid),
        ..ConvSpec::biased(g.clone(), isa, w, bias, 1)
    }
}

/// The epilogue that rounds onto `grid`.
fn rounding_onto(grid: Grid) -> Epilogue {
    Epilogue::of(Some(Activation::Unary(UnaryOp::QuantizeDequantize {
        scale: grid.scale,
        zero_point: grid.zero_point,
        min: grid.min,
        max: grid.max,
    })))
}

/// A requantized convolution that writes the next convolution's staged
/// input as bytes gives that convolution the outputs it computes from the
/// floats, bit for bit: padded 3x3 and 1x1 windows after it (a 1x1 before
/// it runs as one row across the padded rows), grouped and not, every
/// channel blocking and instruction set. The byte slot starts as garbage,
/// so unfilled padding would show. A strided 1x1 window (its staged pixels
/// not the input's) and a float output are refused.
#[test]
fn int8_conv_hands_its_output_to_the_next_as_staged_bytes() {
    let isas = available_isas();
    let mut rng = Rng(31);
    let mut handed = 0;
    for case in 0..48 {
        let QuantCase {
            g: ga,
            grid,
            x,
            wt: wa,
            ..
        } = quant_case(case, false, &mut rng);
        let weights_a = IntegerWeights::recover(&wa, ga.cout).expect("weights on a grid");
        let between = random_grid(case, &mut rng);
        let requantize = rounding_onto(between);
        // The next convolution reads the first's output as it is laid out.
        let (k, pad, stride) = match case % 4 {
            0 => ((3, 3), (1, 1), (1, 1)),
            1 => ((1, 1), (0, 0), (1, 1)),
            2 => ((3, 3), (1, 1), (2, 2)),
            _ => ((1, 1), (0, 0), (2, 2)),
        };
        let groups = if case % 3 == 2 && ga.cout % 2 == 0 {
            2
        } else {
            1
        };
        let cout = groups * rng.range(1, 24);
        let gb = ConvGeom {
            n: ga.n,
            groups,
            x_cb: ga.y_cb,
            ..random_blocked_geom(
                &mut rng,
                (ga.cout, cout),
                (ga.oh, ga.ow),
                (k, stride, (1, 1)),
                (pad, pad),
            )
        };
        let per = ga.cout / groups * k.0 * k.1;
        let wb: Vec<f32> = (0..cout * per)
            .map(|i| (rng.range(0, 254) as f32 - 127.0) * (0.01 + (i / per) as f32 / 64.0))
            .collect();
        let weights_b = IntegerWeights::recover(&wb, cout).expect("weights on a grid");
        let bias_a = rng.f32s(ga.cout);
        let bias_b = vec![0f32; cout];
        let xa = Blocked::input_of(&ga).scatter(&x);
        for &isa in &isas {
            let spec_a = quant_spec(&ga, isa, &wa, &bias_a, requantize, grid);
            let spec_b = ConvSpec {
                geom: gb.clone(),
                w: &wb,
                params: ChannelParams::bias_only(&bias_b),
                epilogue: Epilogue::of(None),
                grid: Some(between),
                ..spec_a
            };
            let build = |spec: &ConvSpec, grid, w| QuantConv::new(spec, grid, w).expect("bytes");
            let run = |conv: &QuantConv, x: &[f32], y_len: usize| {
                let mut y = vec![f32::NAN; y_len];
                let mut scratch = vec![f32::NAN; conv.scratch_len()];
                conv.run(x, None, &mut y, &mut scratch);
                y
            };
            let (a, b) = (
                build(&spec_a, grid, &weights_a),
                build(&spec_b, between, &weights_b),
            );
            let floats = run(&b, &run(&a, &xa, ga.y_len()), gb.y_len());
            let (mut a, mut b) = (a, b);
            let what = format!("case {case} {isa:?} {ga:?} then {gb:?}");
            let Some(to) = b.staged_input() else {
                assert!(
                    stride == (2, 2) && k == (1, 1) || !(gb.cin / groups).is_multiple_of(4),
                    "{what}"
                );
                continue;
            };
            let mut off_grid = build(
                &ConvSpec {
                    epilogue: Epilogue::of(None),
                    ..spec_a
                },
                grid,
                &weights_a,
            );
            assert!(!off_grid.write_staged(to), "{what}: float outputs");
            assert!(a.write_staged(to), "{what}");
            b.read_staged();
            let slot = a.output_len().expect("bytes");
            let bytes = run(&a, &xa, slot);
            let handed_over = run(&b, &bytes, gb.y_len());
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&handed_over), bits(&floats), "{what}");
            handed += 1;
        }
    }
    assert!(handed >= 40, "only {handed} handed over");
}

/// A requantized convolution that computes the quantized add after it (of
/// its output and a shortcut on another grid) gives what the add's own step
/// gives from the convolution's float output, bit for bit, as either
/// operand of the add, on every channel blocking and instruction set, with
/// the shortcut read as floats or as compact bytes, and the sums written as
/// floats or (from a byte shortcut only) as bytes. An output with padding
/// channels, or on a grid other than the add's operand's, is refused.
#[test]
fn int8_conv_computes_the_quantized_add_after_it_as_the_add_does() {
    let isas = available_isas();
    let mut rng = Rng(37);
    let mut fused = 0;
    for case in 0..40 {
        let QuantCase { g, grid, x, wt, .. } = quant_case(case, false, &mut rng);
        let weights = IntegerWeights::recover(&wt, g.cout).expect("weights on a grid");
        let mut new_grid = || random_grid(case, &mut rng);
        let (rounded, shortcut, sum) = (new_grid(), new_grid(), new_grid());
        let requantize = rounding_onto(rounded);
        let first = case % 3 != 0;
        let add = match first {
            true => QuantizedAdd::new(rounded, shortcut, sum, Onnxruntime),
            false => QuantizedAdd::new(shortcut, rounded, sum, Onnxruntime),
        }
        .expect("integral grids");
        // The shortcut on its grid, laid out like the output.
        let s: Vec<f32> = (0..g.y_len())
            .map(|_| {
                (rng.range(0, 255) as f32 + shortcut.min - shortcut.zero_point) * shortcut.scale
            })
            .collect();
        let bias = rng.f32s(g.cout);
        let xb = Blocked::input_of(&g).scatter(&x);
        for &isa in &isas {
            let spec = quant_spec(&g, isa, &wt, &bias, requantize, grid);
            let build = || QuantConv::new(&spec, grid, &weights).expect("a grid of bytes");
            let run = |conv: &QuantConv, residual: Option<&[f32]>| {
                let mut y = vec![f32::NAN; g.y_len()];
                let mut scratch = vec![f32::NAN; conv.scratch_len()];
                conv.run(&xb, residual, &mut y, &mut scratch);
                y
            };
            let conv_out = run(&build(), None);
            let expect: Vec<u32> = (conv_out.iter().zip(&s))
                .map(|(&c, &s)| {
                    let (a, b) = if first { (c, s) } else { (s, c) };
                    let mut sum = [0f32];
                    // SAFETY: one lane of plain f32 arithmetic.
                    unsafe {
                        add.apply(Scalar::splat(a), Scalar::splat(b))
                            .store(sum.as_mut_ptr())
                    };
                    sum[0].to_bits()
                })
                .collect();
            let what = format!("case {case} {isa:?} {g:?} first {first}");
            let mut conv = build();
            let mut off_grid = build();
            let other = match first {
                true => QuantizedAdd::new(sum, shortcut, sum, Onnxruntime),
                false => QuantizedAdd::new(shortcut, sum, sum, Onnxruntime),
            };
            assert!(
                !off_grid.fuse_add(other.expect("integral"), first),
                "{what}"
            );
            if !conv.fuse_add(add, first) {
                assert!(!g.cout.is_multiple_of(g.y_cb), "{what}");
                continue;
            }
            let got: Vec<u32> = run(&conv, Some(&s)).iter().map(|v| v.to_bits()).collect();
            for (i, (got, want)) in got.iter().zip(&expect).enumerate() {
                assert_eq!(got, want, "{what}: element {i}");
            }
            fused += 1;
            // The shortcut as compact bytes, and the sums written as bytes.
            let out = Blocked::output_of(&g);
            let shape = [g.n, g.cout, g.oh, g.ow];
            let (from, to) = (
                StagedInput::compact(shortcut, shape),
                StagedInput::compact(sum, shape),
            );
            let byte = |v: f32, grid: Grid| (v / grid.scale + grid.zero_point - grid.min).round();
            let pixels = g.oh * g.ow;
            let compact = |n: usize, c: usize, yx: usize| (n * pixels + yx) * g.cout + c;
            let mut s_bytes = vec![0u8; (g.n * pixels * g.cout).next_multiple_of(4)];
            for (n, c, yx) in (0..g.n * g.cout * pixels)
                .map(|i| (i / pixels / g.cout, i / pixels % g.cout, i % pixels))
            {
                s_bytes[compact(n, c, yx)] = byte(s[out.at(n, c, yx)], shortcut) as u8;
            }
            let s_bytes: Vec<f32> = s_bytes
                .chunks_exact(4)
                .map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            let mut reads_bytes = build();
            assert!(reads_bytes.fuse_add(add, first), "{what}");
            assert!(
                !reads_bytes.read_residual_staged(to),
                "{what}: the sum's grid"
            );
            assert!(reads_bytes.read_residual_staged(from), "{what}");
            let got: Vec<u32> = (run(&reads_bytes, Some(&s_bytes)).iter())
                .map(|v| v.to_bits())
                .collect();
            for (i, (got, want)) in got.iter().zip(&expect).enumerate() {
                assert_eq!(got, want, "{what}: element {i} from bytes");
            }
            assert!(
                !conv.write_staged(to),
                "{what}: a float operand, byte outputs"
            );
            assert!(reads_bytes.write_staged(to), "{what}");
            let len = reads_bytes.output_len().expect("bytes");
            let mut y = vec![f32::NAN; len];
            let mut scratch = vec![f32::NAN; reads_bytes.scratch_len()];
            reads_bytes.run(&xb, Some(&s_bytes), &mut y, &mut scratch);
            let y: Vec<u8> = y.iter().flat_map(|v| v.to_ne_bytes()).collect();
            for (n, c, yx) in (0..g.n * g.cout * pixels)
                .map(|i| (i / pixels / g.cout, i / pixels % g.cout, i % pixels))
            {
                let want = byte(f32::from_bits(expect[out.at(n, c, yx)]), sum);
                assert_eq!(
                    f32::from(y[compact(n, c, yx)]),
                    want,
                    "{what}: ({n},{c},{yx}) as bytes"
                );
            }
        }
    }
    assert!(fused >= 30, "only {fused} fused");
}

/// Weights recover their integers and per-channel steps when they lie on a
/// grid of signed bytes, whatever the largest integer; weights off every
/// such grid are refused.
#[test]
fn integer_weights_are_recovered_only_from_a_grid() {
    let steps = [0.013f32, 0.5, 1.0, 3.0e-4];
    for largest in [127, 128, 100, 3] {
        let q: Vec<i32> = (0..4 * 9)
            .map(|i| (i * 37 % (2 * largest + 1) - largest).min(127))
            .collect();
        let w: Vec<f32> = q
            .iter()
            .enumerate()
            .map(|(i, &v)| v as f32 * steps[i / 9])
            .collect();
        let got = IntegerWeights::recover(&w, 4).expect("on a grid");
        for (i, &v) in w.iter().enumerate() {
            let back = got.q[i] as f32 * got.scale[i / 9];
            assert!(
                (back - v).abs() <= v.abs() * 1e-6,
                "largest {largest}: {back} vs {v}"
            );
        }
    }
    let off_grid: Vec<f32> = (0..18).map(|i| (i as f32 * 0.731).sin()).collect();
    assert!(IntegerWeights::recover(&off_grid, 2).is_none());
    assert!(IntegerWeights::recover(&[f32::NAN, 1.0], 1).is_none());
}

/// Winograd errors a store holds (a process before computed them) are taken
/// as they are; errors computed are kept there, one per size.
#[test]
fn winograd_errors_come_from_the_store_when_it_has_them() {
    use crate::runtime::kernels::conv::algo::{winograd_errors, ConvAlgo, ErrorsStore};
    use crate::runtime::kernels::conv::winograd::WinogradTile;
    struct Store {
        answer: Option<f64>,
        kept: Vec<(Vec<usize>, ConvAlgo, f64)>,
    }
    impl ErrorsStore for Store {
        fn error(&self, _: &[usize], _: ConvAlgo) -> Option<f64> {
            self.answer
        }
        fn keep_error(&mut self, key: &[usize], algo: ConvAlgo, error: f64) {
            self.kept.push((key.to_vec(), algo, error));
        }
    }
    let g = square_conv(8, 9, (3, 1), 8);
    let tiles = [WinogradTile::F4, WinogradTile::F2];
    let mut rng = Rng(0x5eed_e770);
    let bias = vec![0f32; 8];
    for answer in [None, Some(0.125)] {
        // Weights no test has given before, so this process has not seen them.
        let w = rng.f32s(8 * 8 * 9);
        let spec = ConvSpec::biased(g.clone(), Isa::detect(), &w, &bias, 1);
        let mut store = Store {
            answer,
            kept: vec![],
        };
        let errors = winograd_errors(&spec, &tiles, &mut store);
        let algos: Vec<ConvAlgo> = tiles.iter().map(|&t| ConvAlgo::Winograd(t)).collect();
        assert_eq!(errors.iter().map(|e| e.0).collect::<Vec<_>>(), algos);
        match answer {
            Some(e) => {
                assert!(errors.iter().all(|&(_, got)| got == e), "{errors:?}");
                assert!(store.kept.is_empty());
            }
            None => {
                assert!(
                    errors.iter().all(|&(_, e)| e.is_finite() && e < 1e-3),
                    "{errors:?}"
                );
                let kept: Vec<(ConvAlgo, f64)> = store.kept.iter().map(|k| (k.1, k.2)).collect();
                assert_eq!(kept, errors);
                assert!(store.kept.iter().all(|k| k.0 == store.kept[0].0));
            }
        }
    }
}

/// A depthwise convolution of byte-grid values by per-channel int8 weights,
/// rounded onto a byte grid after a clip to [0, 6] (a MobileNet block's),
/// sums its integers: equal to onnxruntime's and XNNPACK's requantization
/// computed in i64 (the integer sum with the integer bias, times the f32
/// multiplier, rounded half to even, clamped), on every instruction set,
/// channel blocking (a partial vector of 24 channels), stride and padding.
/// Input and weight steps are no powers of two, so the float sums of the
/// values are not exact. 5x5 windows whose weights' sums could err by a
/// quarter step stay in float.
#[test]
fn integer_depthwise_convolutions_requantize_as_the_peers() {
    let mut rng = Rng(29);
    let input = Grid {
        scale: 0.0237,
        zero_point: -7.0,
        min: -128.0,
        max: 127.0,
    };
    let output = Grid {
        scale: 0.0311,
        zero_point: -128.0,
        min: -128.0,
        max: 127.0,
    };
    let (lo, hi) = output.rounded_clamp(0.0, 6.0);
    for case in 0..24 {
        let c = [24, 32, 16][case % 3];
        // Every fourth case a 5x5 window of full-range weights.
        let k = match case % 4 {
            0 => 5,
            _ => [3, 3, 5][rng.below(3)],
        };
        let stride = rng.range(1, 2);
        let cb = [16, 8, c][rng.below(3)];
        let mut g = square_conv(c, rng.range(5, 13), (k, stride), cb);
        g.groups = c;
        g.cin = c;
        // Small weights let 5x5 windows' float sums round to the integer
        // sums; bytes of any size round each input value first.
        let largest = match (k, case % 4) {
            (5, 0) => 127,
            (5, _) => 20,
            _ => 127,
        };
        // Each channel's first weight its largest, as symmetric quantizers make it.
        let q: Vec<i64> = (0..c * k * k)
            .map(|i| match i % (k * k) {
                0 => largest as i64,
                _ => rng.range(0, 2 * largest) as i64 - largest as i64,
            })
            .collect();
        let w_step: Vec<f32> = (0..c).map(|o| 0.0013 * (1.0 + o as f32 * 0.37)).collect();
        let w: Vec<f32> = q
            .iter()
            .enumerate()
            .map(|(i, &v)| v as f32 * w_step[i / (k * k)])
            .collect();
        let bias_q: Vec<i64> = (0..c).map(|_| rng.range(0, 4000) as i64 - 2000).collect();
        let bias: Vec<f32> = (0..c)
            .map(|o| bias_q[o] as f32 * (input.scale * w_step[o]))
            .collect();
        let xq: Vec<i64> = (0..g.n * c * g.h * g.w)
            .map(|_| rng.range(0, 255) as i64 - 128)
            .collect();
        let x: Vec<f32> = xq
            .iter()
            .map(|&v| (v as f32 - input.zero_point) * input.scale)
            .collect();
        let mut want = vec![0f32; g.n * c * g.oh * g.ow];
        for o in 0..c {
            let multiplier = input.scale * w_step[o] / output.scale;
            for (oy, ox) in (0..g.oh).flat_map(|y| (0..g.ow).map(move |x| (y, x))) {
                let mut sum = bias_q[o];
                for (ky, kx) in (0..k).flat_map(|y| (0..k).map(move |x| (y, x))) {
                    let iy = (oy * stride + ky) as isize - g.pad.0 as isize;
                    let ix = (ox * stride + kx) as isize - g.pad.1 as isize;
                    if iy < 0 || ix < 0 || iy >= g.h as isize || ix >= g.w as isize {
                        continue;
                    }
                    let xv =
                        xq[(o * g.h + iy as usize) * g.w + ix as usize] - input.zero_point as i64;
                    sum += xv * q[o * k * k + ky * k + kx];
                }
                let r =
                    ((sum as f32 * multiplier).round_ties_even() + output.zero_point).clamp(lo, hi);
                want[(o * g.oh + oy) * g.ow + ox] = (r - output.zero_point) * output.scale;
            }
        }
        let rounding = UnaryOp::QuantizeDequantize {
            scale: output.scale,
            zero_point: output.zero_point,
            min: output.min,
            max: output.max,
        };
        let epilogue = Epilogue::of(Some(Activation::Clamped {
            clamp: UnaryOp::Clip { min: 0.0, max: 6.0 },
            then: rounding,
        }));
        let xb = Blocked::input_of(&g).scatter(&x);
        let out = Blocked::output_of(&g);
        for &isa in available_isas()
            .iter()
            .filter(|&&i| Depthwise::applies(&g, i))
        {
            let what = format!("case {case} {isa:?} {g:?}");
            let d = Depthwise::integer_sums(g.clone(), isa, input, &w, &bias, epilogue, Some(0.0))
                .unwrap_or_else(|| panic!("{what}: not summed in integers"));
            let mut y = vec![f32::NAN; g.y_len()];
            d.run(&xb, None, &mut y);
            for (i, &e) in want.iter().enumerate() {
                let (o, p) = (i / (g.oh * g.ow), i % (g.oh * g.ow));
                assert_eq!(y[out.at(0, o, p)], e, "{what}: channel {o} pixel {p}");
            }
        }
    }
}
