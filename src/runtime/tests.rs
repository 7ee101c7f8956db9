//! The runtime's kernels against independent computations: the register-tiled
//! convolution against a naive loop (every instruction set this CPU has, every
//! channel blocking, tails that do not divide), and whole compiled graphs of
//! random convolutions (padding, stride, dilation, groups, fused batch norm,
//! residual and activation) against the reference executor. The work each step
//! counts against closed forms, the machine's peaks and their cache, and the
//! profile table against figures worked by hand.

use super::conv::{ConvGeom, PackedConv};
use super::depthwise::Depthwise;
use super::kernels::Gather;
use super::matmul::Dense;
use super::roofline::StepWork;
use super::simd::{Epilogue, Isa};
use super::{CompiledModel, RuntimeOptions};
use crate::core::scalar::Scalar;
use crate::fusion::Activation;
use crate::graph::{
    BinaryOp, Conv, DType, Graph, Op, Tensor, TensorData, UnaryOp, ValueRef, ValueType, Window,
};
use crate::layout::cost::CostModel;
use crate::layout::plan::plan;
use crate::layout::planners::planner_by_name;
use crate::layout::target::TargetFamily;
use crate::layout::Layout;
use crate::ops::BatchNorm;

/// splitmix64: reproducible test data without a dependency.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub(super) fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }
    pub(super) fn f32s(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0)
            .collect()
    }
}

/// `g` compiled to run on `threads` threads, every other option at its default.
pub(super) fn compile_on(threads: usize, g: &Graph) -> CompiledModel {
    let options = RuntimeOptions {
        threads,
        ..Default::default()
    };
    CompiledModel::compile(g, &options).unwrap()
}

/// `got` equals the reference's `expected`: |got - expected| ≤ 1e-5 ·
/// max(1, |expected|), NaN where it is NaN.
pub(super) fn assert_close(got: &[f32], expected: &[f32], what: &str) {
    assert_eq!(got.len(), expected.len(), "{what}");
    for (i, (&a, &e)) in got.iter().zip(expected).enumerate() {
        let close =
            a == e || (a.is_nan() && e.is_nan()) || (a - e).abs() <= 1e-5 * e.abs().max(1.0);
        assert!(close, "{what} element {i}: got {a}, expected {e}");
    }
}

/// The logical NCHW convolution (groups = 1) computed plainly in f64.
fn naive_conv(g: &ConvGeom, x: &[f32], w: &[f32], b: &[f32]) -> Vec<f64> {
    let mut y = vec![0f64; g.n * g.cout * g.oh * g.ow];
    for n in 0..g.n {
        for o in 0..g.cout {
            for oy in 0..g.oh {
                for ox in 0..g.ow {
                    let mut s = b[o] as f64;
                    for i in 0..g.cin {
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
                                let wv = w[((o * g.cin + i) * g.k.0 + ky) * g.k.1 + kx];
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

/// Offset of logical (n, c, y, x) in NCHW{cb}c storage of `channels` channels.
fn blocked(n: usize, c: usize, yx: usize, channels: usize, plane: usize, cb: usize) -> usize {
    let blocks = channels.div_ceil(cb);
    ((n * blocks + c / cb) * plane + yx) * cb + c % cb
}

#[test]
fn tiled_conv_matches_a_naive_loop_for_every_isa_and_blocking() {
    let isas: Vec<Isa> = [Isa::Avx512, Isa::Avx2, Isa::Portable]
        .into_iter()
        .filter(|i| i.available())
        .collect();
    let mut rng = Rng(7);
    for case in 0..60 {
        let (mut cin, mut cout) = (rng.range(1, 20), rng.range(1, 40));
        let mut k = (rng.range(1, 3), rng.range(1, 3));
        if case < 4 {
            // Packed weights over 64 KB: pieces of work ordered group by group.
            (cin, cout, k) = (40 + case, 50, (3, 3));
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
        let pick = |rng: &mut Rng, c: usize| [1, 8, 16, c][rng.below(4)];
        let (x_cb, y_cb) = (pick(&mut rng, cin), pick(&mut rng, cout));
        let g = ConvGeom {
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
            x_cb,
            y_cb,
        };
        let mut x = rng.f32s(g.n * cin * h * w);
        // Every third case holds NaN and ±inf in the body and the tail of rows:
        // they must reach the outputs as IEEE arithmetic says (issue: a NaN
        // used to leave the epilogue's max as -inf or as the clamp bound).
        let nonfinite = case % 3 == 2;
        if nonfinite {
            let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY];
            for (k, i) in (0..x.len()).step_by(29).enumerate() {
                x[i] = specials[k % 3];
            }
        }
        let wt = rng.f32s(cout * cin * k.0 * k.1);
        let bias = rng.f32s(cout);
        let residual = rng.f32s(g.y_len());
        let with_residual = rng.below(2) == 0;
        let (lo, hi) = [
            (f32::NEG_INFINITY, f32::INFINITY),
            (0.0, f32::INFINITY),
            (-0.5, 0.5),
        ][rng.below(3)];
        let mut xb = vec![f32::NAN; g.x_len()];
        for n in 0..g.n {
            for c in 0..cin {
                for yx in 0..h * w {
                    xb[blocked(n, c, yx, cin, h * w, x_cb)] = x[(n * cin + c) * h * w + yx];
                }
            }
        }
        let expect = naive_conv(&g, &x, &wt, &bias);
        for &isa in &isas {
            let conv = PackedConv::new(
                g.clone(),
                isa,
                &wt,
                &bias,
                Epilogue {
                    min: lo,
                    max: hi,
                    act: None,
                },
                Some(0.0),
            );
            let mut y = vec![f32::NAN; g.y_len()];
            let mut scratch = vec![f32::NAN; conv.scratch_len()];
            conv.run(
                &xb,
                with_residual.then_some(&residual[..]),
                &mut y,
                &mut scratch,
            );
            let plane = g.oh * g.ow;
            for n in 0..g.n {
                for c in 0..cout.div_ceil(y_cb) * y_cb {
                    for yx in 0..plane {
                        let at = blocked(n, c, yx, cout, plane, y_cb);
                        if c >= cout {
                            // Zero weights times a NaN or inf input are NaN.
                            if !nonfinite {
                                assert_eq!(y[at], 0.0, "case {case} {isa:?}: padding channel {c}");
                            }
                            continue;
                        }
                        let mut e = expect[(n * cout + c) * plane + yx];
                        if with_residual {
                            e += residual[at] as f64;
                        }
                        let e = Scalar::min(Scalar::max(e, lo as f64), hi as f64);
                        let got = y[at] as f64;
                        let ok = if e.is_nan() || e.is_infinite() {
                            got.to_bits() == e.to_bits() || (e.is_nan() && got.is_nan())
                        } else {
                            (got - e).abs() <= 1e-4 * (1.0 + e.abs())
                        };
                        assert!(
                            ok,
                            "case {case} {isa:?} {g:?}: ({n},{c},{yx}) got {got} want {e}"
                        );
                    }
                }
            }
        }
    }
}

/// The logical NCHW depthwise convolution computed plainly in f64.
fn naive_depthwise(g: &ConvGeom, x: &[f32], w: &[f32], b: &[f32]) -> Vec<f64> {
    let mut y = vec![0f64; g.n * g.cin * g.oh * g.ow];
    for (nc, out) in y.chunks_mut(g.oh * g.ow).enumerate() {
        let c = nc % g.cin;
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                let mut s = b[c] as f64;
                for ky in 0..g.k.0 {
                    for kx in 0..g.k.1 {
                        let iy = (oy * g.stride.0 + ky * g.dilation.0) as isize - g.pad.0 as isize;
                        let ix = (ox * g.stride.1 + kx * g.dilation.1) as isize - g.pad.1 as isize;
                        if iy < 0 || ix < 0 || iy >= g.h as isize || ix >= g.w as isize {
                            continue;
                        }
                        let xv = x[(nc * g.h + iy as usize) * g.w + ix as usize];
                        s += xv as f64 * w[(c * g.k.0 + ky) * g.k.1 + kx] as f64;
                    }
                }
                out[oy * g.ow + ox] = s;
            }
        }
    }
    y
}

#[test]
fn depthwise_matches_a_naive_loop_for_every_isa_and_blocking() {
    let isas: Vec<Isa> = [Isa::Avx512, Isa::Avx2, Isa::Portable]
        .into_iter()
        .filter(|i| i.available())
        .collect();
    let mut rng = Rng(5);
    for case in 0..80 {
        let c = rng.range(1, 40);
        let k = [(3, 3), (3, 3), (1, 1), (5, 5), (2, 3)][rng.below(5)];
        let dilation = (rng.range(1, 2), rng.range(1, 2));
        let pad = (rng.range(0, 2), rng.range(0, 2));
        let pad_end = (rng.range(0, 2), rng.range(0, 2));
        let stride = (rng.range(1, 2), rng.range(1, 2));
        let span = ((k.0 - 1) * dilation.0 + 1, (k.1 - 1) * dilation.1 + 1);
        // Widths up to 30 give full tiles, tails and border columns.
        let h = rng.range(span.0.saturating_sub(pad.0 + pad_end.0).max(1), 12);
        let w = rng.range(span.1.saturating_sub(pad.1 + pad_end.1).max(1), 30);
        let cb = [1, 8, 16, 32, c][rng.below(5)];
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
            x_cb: cb,
            y_cb: cb,
        };
        let x = rng.f32s(g.n * c * h * w);
        let wt = rng.f32s(c * k.0 * k.1);
        let bias = rng.f32s(c);
        let residual = rng.f32s(g.y_len());
        let with_residual = rng.below(2) == 0;
        let (lo, hi) = [(f32::NEG_INFINITY, f32::INFINITY), (0.0, 6.0), (-0.5, 0.5)][rng.below(3)];
        let mut xb = vec![f32::NAN; g.x_len()];
        for n in 0..g.n {
            for ch in 0..c {
                for yx in 0..h * w {
                    xb[blocked(n, ch, yx, c, h * w, cb)] = x[(n * c + ch) * h * w + yx];
                }
            }
        }
        let expect = naive_depthwise(&g, &x, &wt, &bias);
        for &isa in &isas {
            let d = Depthwise::new(
                g.clone(),
                isa,
                &wt,
                &bias,
                Epilogue {
                    min: lo,
                    max: hi,
                    act: None,
                },
                Some(0.0),
            );
            let mut y = vec![f32::NAN; g.y_len()];
            d.run(&xb, with_residual.then_some(&residual[..]), &mut y);
            let plane = g.oh * g.ow;
            for n in 0..g.n {
                for ch in 0..c.div_ceil(cb) * cb {
                    for yx in 0..plane {
                        let at = blocked(n, ch, yx, c, plane, cb);
                        if ch >= c {
                            assert_eq!(y[at], 0.0, "case {case} {isa:?}: padding channel {ch}");
                            continue;
                        }
                        let mut e = expect[(n * c + ch) * plane + yx];
                        if with_residual {
                            e += residual[at] as f64;
                        }
                        let e = e.max(lo as f64).min(hi as f64);
                        assert!(
                            (y[at] as f64 - e).abs() <= 1e-5 * (1.0 + e.abs()),
                            "case {case} {isa:?} {g:?}: ({n},{ch},{yx}) got {} want {e}",
                            y[at]
                        );
                    }
                }
            }
        }
    }
}

/// A graph: x -> Conv(random window, groups) [-> BatchNorm] [-> Add(r)] [-> Clip].
fn random_conv_graph(rng: &mut Rng) -> (Graph, Vec<Tensor>) {
    let mut g = Graph::new("random_conv");
    let groups = [1, 2, 0][rng.below(3)];
    let per_group = rng.range(1, 6);
    let cin = if groups == 0 {
        rng.range(2, 20)
    } else {
        groups * per_group
    };
    let groups = if groups == 0 { cin } else { groups };
    let cout = if groups == cin {
        cin
    } else {
        groups * rng.range(1, 12)
    };
    let k = rng.range(1, 3);
    let window = Window {
        kernel: vec![k, rng.range(1, 3)],
        strides: vec![rng.range(1, 2), rng.range(1, 2)],
        dilations: vec![rng.range(1, 2), rng.range(1, 2)],
        pads: vec![
            rng.range(0, 2),
            rng.range(0, 1),
            rng.range(0, 2),
            rng.range(0, 1),
        ],
    };
    let (h, w) = (rng.range(5, 12), rng.range(5, 12));
    let x_ty = ValueType::new(DType::F32, vec![1, cin, h, w]);
    let x = g.add_input("x", x_ty.clone(), vec![]);
    let mut inputs = vec![Tensor::from_f32(x_ty.shape.clone(), rng.f32s(x_ty.numel()))];
    let wshape = vec![cout, cin / groups, window.kernel[0], window.kernel[1]];
    let wt = g.add_constant(
        "w",
        Tensor::from_f32(wshape.clone(), rng.f32s(wshape.iter().product())),
        vec![],
    );
    let b = g.add_constant("b", Tensor::from_f32(vec![cout], rng.f32s(cout)), vec![]);
    let conv = g
        .add_node(
            Op::Conv(Conv {
                window,
                group: groups,
            }),
            "conv",
            &[x, wt, b],
            &[],
            vec![],
        )
        .unwrap();
    let mut v = crate::graph::ValueRef::new(conv, 0);
    if rng.below(2) == 0 {
        let mut p = |name: &str, positive: bool| {
            let vals: Vec<f32> = rng
                .f32s(cout)
                .iter()
                .map(|x| if positive { x.abs() + 0.5 } else { *x })
                .collect();
            g.add_constant(name, Tensor::from_f32(vec![cout], vals), vec![])
        };
        let params = [
            p("scale", false),
            p("beta", false),
            p("mean", false),
            p("var", true),
        ];
        let ins = [v, params[0], params[1], params[2], params[3]];
        v = crate::graph::ValueRef::new(
            g.add_node(
                Op::BatchNorm(BatchNorm { epsilon: 1e-5 }),
                "bn",
                &ins,
                &[],
                vec![],
            )
            .unwrap(),
            0,
        );
    }
    if rng.below(2) == 0 {
        let ty = g.value_type(v).clone();
        let r = g.add_input("r", ty.clone(), vec![]);
        inputs.push(Tensor::from_f32(ty.shape.clone(), rng.f32s(ty.numel())));
        let add = Op::Binary(crate::graph::BinaryOp::Add);
        v = crate::graph::ValueRef::new(g.add_node(add, "add", &[v, r], &[], vec![]).unwrap(), 0);
    }
    // The activation last: a clip, a swish (x · sigmoid(x)), another unary op, or none.
    let unary = |g: &mut Graph, op: UnaryOp, x| {
        let id = g.add_node(Op::Unary(op), op.name(), &[x], &[], vec![]);
        crate::graph::ValueRef::new(id.unwrap(), 0)
    };
    let others = [
        UnaryOp::Sigmoid,
        UnaryOp::HardSwish,
        UnaryOp::LeakyRelu { alpha: 0.2 },
        UnaryOp::Tanh,
    ];
    match rng.below(4) {
        0 => {
            v = unary(
                &mut g,
                UnaryOp::Clip {
                    min: -0.5,
                    max: 1.0,
                },
                v,
            )
        }
        1 => {
            let s = unary(&mut g, UnaryOp::Sigmoid, v);
            let mul = Op::Binary(crate::graph::BinaryOp::Mul);
            let id = g.add_node(mul, "swish", &[v, s], &[], vec![]).unwrap();
            v = crate::graph::ValueRef::new(id, 0);
        }
        2 => v = unary(&mut g, others[rng.below(others.len())], v),
        _ => {}
    }
    g.set_outputs(vec![v]);
    (g, inputs)
}

#[test]
fn compiled_random_convs_match_the_reference_executor() {
    let mut rng = Rng(11);
    let families = [
        TargetFamily::Nchwc(16),
        TargetFamily::Nchwc(8),
        TargetFamily::Nhwc,
        TargetFamily::Nchw,
    ];
    let (mut native, mut swish_fused) = (0, 0);
    for case in 0..40 {
        let (g, inputs) = random_conv_graph(&mut rng);
        let expected = crate::reference::run(&g, &inputs).unwrap();
        let family = families[case % families.len()];
        let planned = plan(
            &g,
            planner_by_name("global").unwrap().as_ref(),
            family,
            &CostModel::default(),
        )
        .unwrap()
        .graph;
        let m = compile_on(2, &planned);
        let got = m.run(&inputs).unwrap();
        let steps = m.describe();
        native += steps
            .iter()
            .any(|l| l.contains("[Conv") && l.ends_with("native")) as usize;
        swish_fused += steps
            .iter()
            .any(|l| l.contains("Sigmoid+Mul]") && l.ends_with("native"))
            as usize;
        let (e, a) = (expected[0].to_f32(), got[0].to_f32());
        let mag = e.iter().fold(0f32, |m, x| m.max(x.abs()));
        let err = e
            .iter()
            .zip(&a)
            .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(
            err <= 1e-4 * mag.max(1.0),
            "case {case} {family}: error {err} (max {mag})\n{}",
            m.describe().join("\n")
        );
    }
    // Grouped (not depthwise) convolutions fall back; the rest must be native.
    assert!(
        native >= 20,
        "only {native} of 40 convolutions ran natively"
    );
    assert!(
        swish_fused >= 2,
        "{swish_fused} swishes ran in a conv epilogue"
    );
}

/// A channels-last graph as the TFLite importer writes it: each conv between a
/// transpose to NCHW and one back, the residual add and the activation on the
/// NHWC side. The transpose after the conv only relabels its output, so the
/// add and the swish or relu still run in the conv's epilogue, equal to the
/// reference in every layout family.
#[test]
fn conv_epilogues_look_through_relabelling_transposes() {
    use crate::graph::Transpose;
    let mut rng = Rng(12);
    for (case, family) in [
        TargetFamily::Nchwc(16),
        TargetFamily::Nchwc(8),
        TargetFamily::Nhwc,
        TargetFamily::Nchw,
    ]
    .into_iter()
    .enumerate()
    {
        let (h, w, cin, cout) = (9, 7, 5, 24);
        let mut g = Graph::new("channels-last");
        let nhwc = |c: usize| ValueType::new(DType::F32, vec![1, h, w, c]);
        let x = g.add_input("x", nhwc(cin), vec![]);
        let r = g.add_input("r", nhwc(cout), vec![]);
        let inputs =
            [nhwc(cin), nhwc(cout)].map(|t| Tensor::from_f32(t.shape.clone(), rng.f32s(t.numel())));
        let node = |g: &mut Graph, op: Op, ins: &[ValueRef]| {
            let name = format!("n{}", g.node_count());
            ValueRef::new(g.add_node(op, &name, ins, &[], vec![]).unwrap(), 0)
        };
        let transpose = |perm: [usize; 4]| {
            Op::Transpose(Transpose {
                perm: perm.to_vec(),
            })
        };
        let wshape = vec![cout, cin, 3, 3];
        let wt = g.add_constant(
            "w",
            Tensor::from_f32(wshape.clone(), rng.f32s(wshape.iter().product())),
            vec![],
        );
        let conv = Op::Conv(Conv {
            window: crate::ops::testutil::square_window(3, 1, 1),
            group: 1,
        });
        let to_nchw = node(&mut g, transpose([0, 3, 1, 2]), &[x]);
        let y = node(&mut g, conv, &[to_nchw, wt]);
        let back = node(&mut g, transpose([0, 2, 3, 1]), &[y]);
        let sum = node(&mut g, Op::Binary(BinaryOp::Add), &[back, r]);
        let out = match case % 2 {
            0 => {
                let s = node(&mut g, Op::Unary(UnaryOp::Sigmoid), &[sum]);
                node(&mut g, Op::Binary(BinaryOp::Mul), &[sum, s])
            }
            _ => node(&mut g, Op::Unary(UnaryOp::Relu), &[sum]),
        };
        g.set_outputs(vec![out]);
        let expected = crate::reference::run(&g, &inputs).unwrap()[0].to_f32();
        let planner = planner_by_name("global").unwrap();
        let planned = plan(&g, planner.as_ref(), family, &CostModel::default())
            .unwrap()
            .graph;
        // The direct kernel: this checks the fused epilogue to the direct
        // kernel's precision, whichever algorithm measures fastest.
        let direct = super::conv_algo::ConvAlgoOptions {
            choice: super::conv_algo::ConvAlgoChoice::Direct,
            cache: None,
        };
        let m = CompiledModel::compile(
            &planned,
            &RuntimeOptions {
                threads: 2,
                conv_algo: direct,
                ..Default::default()
            },
        )
        .unwrap();
        let got = m.run(&inputs).unwrap()[0].to_f32();
        assert_close(&got, &expected, &format!("{family}"));
        let steps = m.describe();
        assert!(
            steps.iter().any(|l| l.contains("[Conv+Transpose+Add+")),
            "{family}: the add and activation were not fused:\n{}",
            steps.join("\n")
        );
    }
}

/// Transposes of every 4-d permutation that moves data, on extents that fill
/// whole 16 x 16 tiles, leave partial ones, or fill none (17, 33, 5, 1),
/// equal the reference executor's exactly.
#[test]
fn transposes_in_whole_and_partial_tiles_match_the_reference_executor() {
    use crate::graph::Transpose;
    let mut rng = Rng(31);
    let shapes = [
        [1, 33, 17, 16],
        [2, 17, 5, 40],
        [1, 5, 1, 3],
        [1, 256, 4, 8],
    ];
    for shape in shapes {
        for perm in [[0, 2, 3, 1], [0, 3, 1, 2], [0, 1, 3, 2], [3, 2, 1, 0]] {
            let ty = ValueType::new(DType::F32, shape.to_vec());
            let mut g = Graph::new("transpose");
            let x = g.add_input("x", ty.clone(), vec![]);
            let op = Op::Transpose(Transpose {
                perm: perm.to_vec(),
            });
            let y = g.add_node(op, "t", &[x], &[], vec![]).unwrap();
            g.set_outputs(vec![ValueRef::new(y, 0)]);
            let inputs = vec![Tensor::from_f32(ty.shape.clone(), rng.f32s(ty.numel()))];
            let expected = crate::reference::run(&g, &inputs).unwrap()[0].to_f32();
            let options = RuntimeOptions {
                threads: 2,
                ..Default::default()
            };
            let got = CompiledModel::compile(&g, &options)
                .unwrap()
                .run(&inputs)
                .unwrap()[0]
                .to_f32();
            assert_eq!(got, expected, "{shape:?} permuted by {perm:?}");
        }
    }
}

#[test]
fn a_wrong_input_is_an_error_naming_the_input() {
    let mut rng = Rng(3);
    let (g, _) = random_conv_graph(&mut rng);
    let m = compile_on(1, &g);
    let bad = vec![Tensor::from_f32(vec![1, 1, 1, 1], vec![0.0]); g.inputs().len()];
    let e = m.run(&bad).unwrap_err().to_string();
    assert!(e.contains("model input 'x'"), "{e}");
    let e = m.run(&[]).unwrap_err().to_string();
    assert!(e.contains("inputs"), "{e}");
}

/// Graph inputs are read in place and graph outputs written in place: an input
/// that is also an output, an output that later steps read, and an output
/// listed twice all come back as the reference executor computes them, run
/// after run (a second run must not see the first one's buffers).
#[test]
fn inputs_and_outputs_in_place_match_the_reference_executor() {
    use crate::graph::{BinaryOp, ValueRef};
    let ty = ValueType::new(DType::F32, vec![1, 3, 40, 40]);
    let mut g = Graph::new("io");
    let x = g.add_input("x", ty.clone(), vec![]);
    let relu = g.add_node(Op::Unary(UnaryOp::Relu), "relu", &[x], &[], vec![]);
    let y = ValueRef::new(relu.unwrap(), 0);
    let add = g.add_node(Op::Binary(BinaryOp::Add), "add", &[y, x], &[], vec![]);
    let z = ValueRef::new(add.unwrap(), 0);
    g.set_outputs(vec![y, z, y, x]);
    let m = compile_on(2, &g);
    let mut rng = Rng(11);
    let mut run = || {
        let inputs = vec![Tensor::from_f32(ty.shape.clone(), rng.f32s(ty.numel()))];
        (
            m.run(&inputs).unwrap(),
            crate::reference::run(&g, &inputs).unwrap(),
        )
    };
    // Outputs still held are not written by the next run.
    let (first, first_expected) = run();
    let (second, second_expected) = run();
    assert_eq!(first, first_expected);
    assert_eq!(second, second_expected);
    // Once dropped, the next run writes its outputs into the same buffers.
    let buffer = |outs: &[Tensor]| outs[1].f32s().as_ptr() as usize;
    let reused = buffer(&second);
    drop((first, second));
    let (third, third_expected) = run();
    assert_eq!(third, third_expected);
    assert_eq!(buffer(&third), reused);
}

/// A model run from several threads at once (its pool and its scratch busy
/// with another thread's run) computes every run's own outputs.
#[test]
fn runs_from_several_threads_at_once_match_the_reference_executor() {
    let g = strided_conv_graph(16, 32, 1, true);
    let m = compile_on(2, &g);
    let mut rng = Rng(23);
    let cases: Vec<(Vec<Tensor>, Vec<f32>)> = (0..4)
        .map(|_| {
            let inputs: Vec<Tensor> = g
                .inputs()
                .iter()
                .map(|&id| {
                    let shape = g.node(id).outputs[0].ty.shape.clone();
                    let n = shape.iter().product();
                    Tensor::from_f32(shape, rng.f32s(n))
                })
                .collect();
            let expected = crate::reference::run(&g, &inputs).unwrap()[0].to_f32();
            (inputs, expected)
        })
        .collect();
    std::thread::scope(|s| {
        for (k, (inputs, expected)) in cases.iter().enumerate() {
            let m = &m;
            s.spawn(move || {
                for run in 0..20 {
                    let got = m.run(inputs).unwrap()[0].to_f32();
                    assert_close(&got, expected, &format!("thread {k}, run {run}"));
                }
            });
        }
    });
}

/// Concats along the outer axis are placements: their inputs are computed in
/// their slice of the output (nested concats too) and no Concat step runs;
/// a concat of a graph input keeps its copy. Outputs match the reference.
#[test]
fn concats_along_the_outer_axis_are_computed_in_place() {
    use crate::graph::ValueRef;
    use crate::ops::Concat;
    let ty = ValueType::new(DType::F32, vec![1, 16, 9, 9]);
    let unary = |g: &mut Graph, op: UnaryOp, x: ValueRef| {
        ValueRef::new(
            g.add_node(Op::Unary(op), op.name(), &[x], &[], vec![])
                .unwrap(),
            0,
        )
    };
    let concat = |g: &mut Graph, name: &str, parts: &[ValueRef]| {
        let op = Op::Concat(Concat { axis: 1 });
        ValueRef::new(g.add_node(op, name, parts, &[], vec![]).unwrap(), 0)
    };
    let mut g = Graph::new("concat");
    let x = g.add_input("x", ty.clone(), vec![]);
    let a = unary(&mut g, UnaryOp::Relu, x);
    let b = unary(&mut g, UnaryOp::Neg, x);
    let c = concat(&mut g, "c", &[a, b]);
    let d = unary(&mut g, UnaryOp::Tanh, c);
    let e = concat(&mut g, "e", &[c, d]);
    let kept = concat(&mut g, "kept", &[x, a]);
    // Two consumers, so that `e` is not fused into an elementwise chain.
    let y = unary(&mut g, UnaryOp::Sigmoid, e);
    let z = unary(&mut g, UnaryOp::Relu, e);
    g.set_outputs(vec![y, z, kept]);
    let m = compile_on(2, &g);
    let steps: Vec<String> = m.describe();
    let named = |n: &str| steps.iter().any(|s| s.starts_with(&format!("{n} [")));
    assert!(!named("c") && !named("e") && named("kept"), "{steps:#?}");
    let mut rng = Rng(5);
    for _ in 0..2 {
        let inputs = vec![Tensor::from_f32(ty.shape.clone(), rng.f32s(ty.numel()))];
        let expected = crate::reference::run(&g, &inputs).unwrap();
        let got = m.run(&inputs).unwrap();
        for (e, a) in expected.iter().zip(&got) {
            assert_eq!(e.shape, a.shape);
            let err = e
                .to_f32()
                .iter()
                .zip(a.to_f32())
                .map(|(p, q)| (p - q).abs())
                .fold(0f32, f32::max);
            assert!(err <= 1e-6, "max abs error {err}");
        }
    }
}

/// Concats that are not placements (parts that do not fill whole channel
/// blocks, an inner axis, a graph input among the parts) run as one gather
/// from all their inputs, unplanned and in each layout family: exactly the
/// reference's values.
#[test]
fn concats_of_several_inputs_run_as_one_gather() {
    use crate::ops::Concat;
    let mut rng = Rng(6);
    for (axis, family) in [
        (1, TargetFamily::Nchwc(16)),
        (1, TargetFamily::Nhwc),
        (3, TargetFamily::Nchwc(8)),
        (2, TargetFamily::Nchw),
    ] {
        let mut g = Graph::new("concat");
        let (mut parts, mut inputs) = (vec![], vec![]);
        for (k, c) in [5, 11, 16].into_iter().enumerate() {
            let mut shape = vec![1, 7, 6, 4];
            shape[axis] = c;
            let ty = ValueType::new(DType::F32, shape.clone());
            inputs.push(Tensor::from_f32(shape, rng.f32s(ty.numel())));
            let x = g.add_input(&format!("x{k}"), ty, vec![]);
            // One part straight from a graph input, the others computed.
            parts.push(match k {
                0 => x,
                _ => {
                    let id =
                        g.add_node(Op::Unary(UnaryOp::Neg), &format!("n{k}"), &[x], &[], vec![]);
                    ValueRef::new(id.unwrap(), 0)
                }
            });
        }
        let cat = g
            .add_node(Op::Concat(Concat { axis }), "cat", &parts, &[], vec![])
            .unwrap();
        let out = g.add_node(
            Op::Unary(UnaryOp::Relu),
            "relu",
            &[ValueRef::new(cat, 0)],
            &[],
            vec![],
        );
        g.set_outputs(vec![ValueRef::new(out.unwrap(), 0)]);
        let expected = crate::reference::run(&g, &inputs).unwrap()[0].to_f32();
        let planner = planner_by_name("global").unwrap();
        let planned = plan(&g, planner.as_ref(), family, &CostModel::default())
            .unwrap()
            .graph;
        for graph in [&g, &planned] {
            let m = compile_on(2, graph);
            assert_eq!(
                m.run(&inputs).unwrap()[0].to_f32(),
                expected,
                "axis {axis} {family}"
            );
            let steps = m.describe();
            assert!(
                steps.iter().any(|s| s.starts_with("cat [Concat (gather)]")),
                "axis {axis} {family}: {steps:#?}"
            );
        }
    }
}

/// x[1, c, h, w] -> 1x1 Conv -> `op`, the graph's output; with x's type. The
/// convolution's weights are random, or with `rng` None the identity (so that
/// `op` reads exactly x).
fn after_pointwise_conv(
    op: Op,
    [c, h, w]: [usize; 3],
    rng: Option<&mut Rng>,
) -> (Graph, ValueType) {
    let ty = ValueType::new(DType::F32, vec![1, c, h, w]);
    let mut g = Graph::new(op.kind_name());
    let x = g.add_input("x", ty.clone(), vec![]);
    let weights = match rng {
        Some(rng) => rng.f32s(c * c),
        None => (0..c * c)
            .map(|i| (i % (c + 1) == 0) as u8 as f32)
            .collect(),
    };
    let wt = Tensor::from_f32(vec![c, c, 1, 1], weights);
    let wt = g.add_constant("w", wt, vec![]);
    let conv = Op::Conv(Conv {
        window: Window {
            kernel: vec![1, 1],
            strides: vec![1, 1],
            dilations: vec![1, 1],
            pads: vec![0; 4],
        },
        group: 1,
    });
    let y = ValueRef::new(g.add_node(conv, "conv", &[x, wt], &[], vec![]).unwrap(), 0);
    let name = op.kind_name().to_lowercase();
    let out = g.add_node(op, &name, &[y], &[], vec![]).unwrap();
    g.set_outputs(vec![ValueRef::new(out, 0)]);
    (g, ty)
}

/// Max and average pools of random geometry (odd extents, windows 1 to 5,
/// strides 1 to 3, dilations, unequal pads, ceil_mode, padding counted or
/// not, global windows, NaN pixels) compiled in NCHW, NHWC and the blocked
/// layouts, on every instruction set this CPU has, run natively and match the
/// reference executor: a maximum exactly (NaN where it is NaN), an average
/// within `k_h * k_w` units of 2^-22 of the largest input (f32 sums in
/// another order, a divisor as two reciprocals).
#[test]
fn pools_of_random_geometry_match_the_reference_executor() {
    use crate::graph::PoolKind;
    use crate::ops::Pool;
    let mut rng = Rng(17);
    let isas: Vec<Isa> = Isa::ALL.into_iter().filter(|i| i.available()).collect();
    for case in 0..48 {
        // Wide rows sometimes, so that NCHW fills 16-lane vectors.
        let c = rng.range(1, 20);
        let (h, w) = (rng.range(1, 13), rng.range(1, [13, 45][case % 3 / 2]));
        let global = case % 8 == 0;
        let dilations = match global || case % 5 != 1 {
            true => vec![1, 1],
            false => vec![rng.range(1, 2), rng.range(1, 2)],
        };
        let (kh, kw) = match global {
            true => (h, w),
            false => (
                rng.range(1, 5.min(h.div_ceil(dilations[0]))),
                rng.range(1, 5.min(w.div_ceil(dilations[1]))),
            ),
        };
        let pad = |k: usize, rng: &mut Rng| if global { 0 } else { rng.below(k) };
        let pads = vec![
            pad(kh, &mut rng),
            pad(kw, &mut rng),
            pad(kh, &mut rng),
            pad(kw, &mut rng),
        ];
        let window = Window {
            kernel: vec![kh, kw],
            strides: vec![rng.range(1, 3), rng.range(1, 3)],
            dilations,
            pads,
        };
        let kind = [PoolKind::Max, PoolKind::Avg][case % 2];
        let op = Op::Pool(Pool {
            kind,
            window,
            ceil_mode: !global && rng.below(3) == 0,
            count_include_pad: rng.below(2) == 1,
        });
        // A 1x1 convolution first, so that the global plan blocks the pool's
        // input; the identity, so that the pool reads exactly x.
        let (g, ty) = after_pointwise_conv(op.clone(), [c, h, w], None);
        let mut x = rng.f32s(ty.numel());
        if kind == PoolKind::Max && case % 4 == 2 {
            // NaN pixels (of all channels, through the convolution).
            for _ in 0..h * w / 3 {
                x[rng.below(h * w)] = f32::NAN;
            }
        }
        let inputs = vec![Tensor::from_f32(ty.shape.clone(), x)];
        let expected = crate::reference::run(&g, &inputs).unwrap()[0].to_f32();
        let scale = expected.iter().fold(1f32, |m, v| m.max(v.abs()));
        let tolerance = match kind {
            PoolKind::Max => 0.0,
            PoolKind::Avg => (kh * kw) as f32 * scale * 2f32.powi(-22),
        };
        let planner = planner_by_name("global").unwrap();
        for family in [
            TargetFamily::Nchw,
            TargetFamily::Nhwc,
            TargetFamily::Nchwc(16),
            TargetFamily::Nchwc(8),
        ] {
            let pg = plan(&g, planner.as_ref(), family, &CostModel::default())
                .unwrap()
                .graph;
            for &isa in &isas {
                let options = RuntimeOptions {
                    threads: 2,
                    isa: Some(isa),
                    ..Default::default()
                };
                let m = CompiledModel::compile(&pg, &options).unwrap();
                let what = format!("case {case} {op:?} {family} {isa}");
                let steps = m.describe();
                let pool = steps.iter().find(|s| s.contains("Pool]")).unwrap();
                assert!(pool.ends_with("native"), "{what}: {steps:#?}");
                let got = m.run(&inputs).unwrap()[0].to_f32();
                for (i, (&a, &e)) in got.iter().zip(&expected).enumerate() {
                    let ok = (a.is_nan() && e.is_nan()) || (a - e).abs() <= tolerance;
                    assert!(ok, "{what}: element {i} is {a}, expected {e}");
                }
            }
        }
    }
}

/// The pooling kernel itself in each layout it serves (NCHW, NHWC, NCHW8c,
/// NCHW16c; channels not filling a block, rows wide enough for 16-lane
/// vectors of NCHW columns or not, rows staged or read straight from the
/// input), on every instruction set this CPU has, against the reference
/// executor on random geometry (windows 2, 3, 5, strides 1 to 3, dilations,
/// unequal pads, ceil_mode, padding counted or not; NaN and infinite inputs,
/// maximum windows of NaN and -inf only): a maximum exactly, an average
/// within `k_h * k_w` units of 2^-22 (the finite inputs are in [-1, 1]).
#[test]
fn pool_kernel_matches_the_reference_executor_in_every_layout() {
    use super::pool::{pool, PoolGeom};
    use super::simd::Lanes;
    use crate::graph::PoolKind;
    use crate::ops::Pool;
    let mut rng = Rng(23);
    let isas: Vec<Isa> = Isa::ALL.into_iter().filter(|i| i.available()).collect();
    for case in 0..60 {
        let (n, c) = (rng.range(1, 2), rng.range(1, 21));
        let (h, w) = (rng.range(5, 9), [7, 9, 40, 57, 130][case % 5]);
        let k = [2, 3, 5][rng.below(3)];
        let stride = rng.range(1, 3);
        // Dilated where the window still fits the height and width.
        let dilation = match (k - 1) * 2 < h.min(w) {
            true => [1, 1, 2][rng.below(3)],
            false => 1,
        };
        let pads: Vec<usize> = (0..4).map(|_| rng.below(k)).collect();
        let kind = [PoolKind::Max, PoolKind::Avg][case % 2];
        let op = Op::Pool(Pool {
            kind,
            window: Window {
                kernel: vec![k, k],
                strides: vec![stride, stride],
                dilations: vec![dilation, dilation],
                pads: pads.clone(),
            },
            ceil_mode: rng.below(2) == 0,
            count_include_pad: rng.below(2) == 0,
        });
        let ty = ValueType::new(DType::F32, vec![n, c, h, w]);
        let mut g = Graph::new("pool");
        let x = g.add_input("x", ty.clone(), vec![]);
        let y = g.add_node(op.clone(), "pool", &[x], &[], vec![]).unwrap();
        g.set_outputs(vec![ValueRef::new(y, 0)]);
        let out = g.node(y).outputs[0].ty.shape.clone();
        let mut xs = rng.f32s(ty.numel());
        if case % 4 >= 2 {
            // A maximum skips NaN, -inf only where nothing else is in the
            // window; an average spreads both infinities and NaN.
            let specials = match kind {
                PoolKind::Max => &[f32::NAN, f32::NEG_INFINITY][..],
                PoolKind::Avg => &[f32::NAN, f32::NEG_INFINITY, f32::INFINITY][..],
            };
            for _ in 0..xs.len() / 2 {
                xs[rng.below(ty.numel())] = specials[rng.below(specials.len())];
            }
            // The first window rows of the first channel NaN only.
            xs[..k.min(h) * w].fill(f32::NAN);
        }
        let inputs = vec![Tensor::from_f32(ty.shape.clone(), xs.clone())];
        let expected = crate::reference::run(&g, &inputs).unwrap()[0].to_f32();
        let tolerance = match kind {
            PoolKind::Max => 0.0,
            PoolKind::Avg => (k * k) as f32 * 2f32.powi(-22),
        };
        let nchw = Layout::parse("NCHW").unwrap();
        for (name, cb) in [("NCHW", 1), ("NHWC", c), ("NCHW8c", 8), ("NCHW16c", 16)] {
            let layout = Layout::parse(name).unwrap();
            let packed = |from: &Layout, to: &Layout, shape: &[usize], v: &[f32]| {
                let gather = Gather::new(from, to, shape, 0.0).unwrap();
                let mut p = vec![0f32; to.physical_shape(shape).unwrap().iter().product()];
                gather.run(&[v], &mut p).unwrap();
                p
            };
            let px = packed(&nchw, &layout, &ty.shape, &xs);
            for &isa in &isas {
                let geom = PoolGeom {
                    kind,
                    skip_nan: true,
                    planes: n * c.div_ceil(cb),
                    cb,
                    h,
                    w,
                    oh: out[2],
                    ow: out[3],
                    k: (k, k),
                    stride: (stride, stride),
                    dilation: (dilation, dilation),
                    pad: (pads[0], pads[1]),
                    pad_end: (pads[2], pads[3]),
                    count_include_pad: matches!(&op, Op::Pool(p) if p.count_include_pad),
                    lanes: Lanes::One,
                    rows: vec![],
                    cols: vec![],
                    inv: (vec![], vec![]),
                }
                .for_isa(isa);
                let mut py = vec![f32::INFINITY; geom.planes * geom.oh * geom.ow * cb];
                pool(&geom, &px, &mut py);
                let got = packed(&layout, &nchw, &out, &py);
                let what = format!("case {case} {op:?} x{:?} {name} {isa}", ty.shape);
                for (i, (&a, &e)) in got.iter().zip(&expected).enumerate() {
                    let ok = (a.is_nan() && e.is_nan()) || a == e || (a - e).abs() <= tolerance;
                    assert!(ok, "{what}: element {i} is {a}, expected {e}");
                }
            }
        }
    }
}

#[test]
fn dense_matches_a_naive_product_for_every_isa() {
    let isas: Vec<Isa> = [Isa::Avx512, Isa::Avx2, Isa::Portable]
        .into_iter()
        .filter(|i| i.available())
        .collect();
    let mut rng = Rng(9);
    for case in 0..40 {
        // Up to 9 rows (two full row tiles and a tail) and 150 columns (panel tails).
        let (m, k, n) = (rng.range(1, 9), rng.range(1, 50), rng.range(1, 150));
        let trans_b = rng.below(2) == 0;
        let alpha = [1.0, 0.5, -2.0][rng.below(3)];
        let a = rng.f32s(m * k);
        let b = rng.f32s(k * n);
        let c_shape = [vec![], vec![n], vec![1, n], vec![m, 1], vec![m, n]][rng.below(5)].clone();
        let c = rng.f32s(c_shape.iter().product());
        for &isa in &isas {
            let bias = (!c_shape.is_empty()).then_some((&c[..], &c_shape[..]));
            let d = Dense::new((m, k, n), isa, alpha, &b, trans_b, bias).unwrap();
            let mut y = vec![f32::NAN; m * n];
            d.run(&a, &mut y);
            for i in 0..m {
                for j in 0..n {
                    let mut e = 0f64;
                    for kk in 0..k {
                        let bv = if trans_b {
                            b[j * k + kk]
                        } else {
                            b[kk * n + j]
                        };
                        e += a[i * k + kk] as f64 * bv as f64;
                    }
                    e *= alpha as f64;
                    e += match c_shape.len() {
                        0 => 0.0,
                        1 => c[j] as f64,
                        _ => c[(i % c_shape[0]) * c_shape[1] + j % c_shape[1]] as f64,
                    };
                    let got = y[i * n + j] as f64;
                    assert!(
                        (got - e).abs() <= 1e-5 * (1.0 + e.abs()) * k as f64,
                        "case {case} {isa:?} ({m},{k},{n}): y[{i}][{j}] = {got}, want {e}"
                    );
                }
            }
        }
    }
}

#[test]
fn reshape_gathers_between_layouts_like_the_layout_algebra() {
    let cases = [
        // The MobileNetV2 head: a 1x1 map in NCHW16c to NC16c moves nothing.
        ("NCHW16c", vec![1, 32, 1, 1], "NC16c", vec![1, 32], true),
        // Padding channels (20 channels in blocks of 16) get the fill, not
        // whatever the input's padding holds: a gather, not a copy.
        ("NCHW16c", vec![1, 20, 1, 1], "NC16c", vec![1, 20], false),
        ("NCHW8c", vec![1, 12, 2, 3], "NC", vec![1, 72], false),
        ("NHWC", vec![2, 5, 3, 1], "NC8c", vec![2, 15], false),
    ];
    let mut rng = Rng(13);
    for (from, from_shape, to, to_shape, copy) in cases {
        let (lf, lt) = (Layout::parse(from).unwrap(), Layout::parse(to).unwrap());
        let x = Tensor::from_f32(from_shape.clone(), rng.f32s(from_shape.iter().product()));
        let xp = lf.to_physical(&x, 0.0).unwrap();
        let g = Gather::reshape((&lf, &from_shape), (&lt, &to_shape), -1.0).unwrap();
        assert_eq!(g.is_copy(xp.shape.iter().product()), copy, "{from} -> {to}");
        let want = lt
            .to_physical(&Tensor::from_f32(to_shape.clone(), x.to_f32()), -1.0)
            .unwrap()
            .to_f32();
        let mut y = vec![f32::NAN; want.len()];
        g.run(&[&xp.to_f32()], &mut y).unwrap();
        assert_eq!(y, want, "{from} {from_shape:?} -> {to} {to_shape:?}");
    }
    let bad = Gather::reshape(
        (&Layout::parse("NC").unwrap(), &[2, 3]),
        (&Layout::parse("NC").unwrap(), &[4, 2]),
        0.0,
    );
    assert!(bad.is_err());
}

/// Gathers from per-element sources (stretches of padding, of ascending,
/// descending and repeated sources, of rows of them each a step further on,
/// and of random ones, more than one
/// parallel task long), from one input or several, copy exactly what an
/// element-by-element lookup does; an input shorter than the sources read is
/// an error.
#[test]
fn gathers_in_runs_copy_what_each_element_names() {
    let mut rng = Rng(41);
    for case in 0..20 {
        let n = rng.range(1, 3000);
        let mut src: Vec<u32> = vec![];
        while src.len() < 70_000 {
            let (start, len) = (rng.below(n) as i64, rng.range(1, 40_000 / (case + 1)));
            let stride = [0i64, 1, -1, 3, -7][rng.below(5)];
            match rng.below(5) {
                0 => src.extend(std::iter::repeat_n(u32::MAX, len)),
                1 => src.extend((0..len).map(|_| rng.below(n) as u32)),
                // Rows of `width` elements, each `step` further on: the runs
                // of a transpose (step 1), of an upsampling (stride 0).
                2 => {
                    let width = rng.range(1, 20) as i64;
                    let step = [0, 1, -1, 2, width][rng.below(5)];
                    src.extend((0..len as i64).map(|e| {
                        let at = start + e / width * step + e % width * stride;
                        at.rem_euclid(n as i64) as u32
                    }))
                }
                _ => src.extend(
                    (0..len as i64).map(|k| (start + k * stride).rem_euclid(n as i64) as u32),
                ),
            }
        }
        let x = rng.f32s(n);
        let want: Vec<f32> = src
            .iter()
            .map(|&s| if s == u32::MAX { -2.0 } else { x[s as usize] })
            .collect();
        let g = Gather::from_sources(src.clone(), -2.0);
        let mut y = vec![f32::NAN; src.len()];
        g.run(&[&x], &mut y).unwrap();
        assert_eq!(y, want, "case {case}");
        let read = src
            .iter()
            .filter(|&&s| s != u32::MAX)
            .max()
            .map_or(0, |&m| m as usize + 1);
        if read > 0 {
            assert!(g.run(&[&x[..read - 1]], &mut y).is_err(), "case {case}");
        }
        // The same sources as the elements of up to four inputs, one after
        // another (a concat's): each input in a buffer of its own, so a run
        // that crossed from one into the next would read the wrong memory.
        let mut starts = vec![0];
        for _ in 0..rng.below(4) {
            starts.push(rng.range(*starts.last().unwrap(), n));
        }
        let parts: Vec<Vec<f32>> = starts
            .iter()
            .zip(starts[1..].iter().chain([&n]))
            .map(|(&a, &b)| x[a..b].to_vec())
            .collect();
        let inputs: Vec<&[f32]> = parts.iter().map(|p| &p[..]).collect();
        let g = Gather::from_inputs(src.clone(), &starts, -2.0);
        y.fill(f32::NAN);
        g.run(&inputs, &mut y).unwrap();
        assert_eq!(y, want, "case {case}, inputs from {starts:?}");
        assert!(
            g.run(&inputs[1..], &mut y).is_err(),
            "case {case}: an input short"
        );
    }
}

/// Constant Pads (a value of their own, some axes cropped) after a
/// convolution, compiled unplanned and in the planned layouts: equal to the
/// reference; unplanned they run as gathers.
#[test]
fn constant_pads_gather_what_the_reference_pads() {
    use crate::ops::{Pad, PadMode};
    let mut rng = Rng(43);
    for (value, begins, ends) in [
        (1.5, vec![0, 0, 1, 2], vec![0, 0, 2, 0]),
        (0.0, vec![0, 0, 1, 1], vec![0, 0, 1, 1]),
        (-3.0, vec![0, 2, -1, 0], vec![0, 1, 0, -2]),
    ] {
        let pad = Op::Pad(Pad {
            begins,
            ends,
            mode: PadMode::Constant(value),
        });
        let (g, ty) = after_pointwise_conv(pad, [20, 7, 9], Some(&mut rng));
        let inputs = vec![Tensor::from_f32(ty.shape.clone(), rng.f32s(ty.numel()))];
        let expected = crate::reference::run(&g, &inputs).unwrap()[0].to_f32();
        let m = compile_on(2, &g);
        assert!(
            m.describe().iter().any(|s| s.contains("Pad (gather)")),
            "{:?}",
            m.describe()
        );
        assert_close(&m.run(&inputs).unwrap()[0].to_f32(), &expected, "unplanned");
        let planner = planner_by_name("global").unwrap();
        for family in [TargetFamily::Nchwc(16), TargetFamily::Nchwc(8)] {
            let planned = plan(&g, planner.as_ref(), family, &CostModel::default()).unwrap();
            let m = compile_on(2, &planned.graph);
            let got = m.run(&inputs).unwrap()[0].to_f32();
            assert_close(&got, &expected, &format!("{family} pad {value}"));
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
    let isas: Vec<Isa> = [Isa::Avx512, Isa::Avx2, Isa::Portable]
        .into_iter()
        .filter(|i| i.available())
        .collect();
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
                x_cb: if depthwise { cb } else { c },
                y_cb: cb,
            };
            let d = Depthwise::new(g(c, true), isa, &vec![1.0; c], &vec![0.0; c], ep, None);
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
                let conv = PackedConv::new(geom.clone(), isa, &identity, &vec![0.0; c], ep, None);
                let mut y = vec![0f32; geom.y_len()];
                conv.run(&xf, None, &mut y, &mut vec![0.0; conv.scratch_len()]);
                for (i, &v) in xf.iter().enumerate().take(finite) {
                    let (px, ch) = (i / c, i % c);
                    let got = y[blocked(0, ch, px, c, pixels, cb)];
                    assert_eq!(v, x[i]);
                    check(act, isa, &format!("pointwise, blocks of {cb}"), i, got);
                }
            }
        }
    }
}

/// x[2, cin, 9, 11] -> Conv(cout, groups, 3x2 window, stride (2, 1), dilation
/// (1, 2), pads top 1, bottom 1, right 1) [-> BatchNorm -> Add(r) -> Relu]:
/// the output is [2, cout, 5, 10] ((9 + 2 - 3) / 2 + 1 rows, 11 + 1 - 3 + 1 columns).
fn strided_conv_graph(cin: usize, cout: usize, group: usize, epilogue: bool) -> Graph {
    let mut rng = Rng(17);
    let mut g = Graph::new("strided_conv");
    let x = g.add_input("x", ValueType::new(DType::F32, vec![2, cin, 9, 11]), vec![]);
    let mut constant = |g: &mut Graph, name: &str, shape: Vec<usize>| {
        let values = rng
            .f32s(shape.iter().product())
            .iter()
            .map(|v| v + 2.0)
            .collect();
        g.add_constant(name, Tensor::from_f32(shape, values), vec![])
    };
    let w = constant(&mut g, "w", vec![cout, cin / group, 3, 2]);
    let b = constant(&mut g, "b", vec![cout]);
    let window = Window {
        kernel: vec![3, 2],
        strides: vec![2, 1],
        dilations: vec![1, 2],
        pads: vec![1, 0, 1, 1],
    };
    let conv = Op::Conv(Conv { window, group });
    let mut y = ValueRef::new(
        g.add_node(conv, "conv", &[x, w, b], &[], vec![]).unwrap(),
        0,
    );
    assert_eq!(g.value_type(y).shape, [2, cout, 5, 10]);
    if epilogue {
        let bn = ["scale", "beta", "mean", "var"].map(|p| constant(&mut g, p, vec![cout]));
        let bn_op = Op::BatchNorm(BatchNorm { epsilon: 1e-5 });
        let ins = [y, bn[0], bn[1], bn[2], bn[3]];
        y = ValueRef::new(g.add_node(bn_op, "bn", &ins, &[], vec![]).unwrap(), 0);
        let r = g.add_input("r", g.value_type(y).clone(), vec![]);
        let add = Op::Binary(BinaryOp::Add);
        y = ValueRef::new(g.add_node(add, "add", &[y, r], &[], vec![]).unwrap(), 0);
        let relu = Op::Unary(UnaryOp::Relu);
        y = ValueRef::new(g.add_node(relu, "relu", &[y], &[], vec![]).unwrap(), 0);
    }
    g.set_outputs(vec![y]);
    g
}

/// The one step of `model` whose kind starts with `kind`.
fn step<'m>(model: &'m CompiledModel, kind: &str) -> &'m super::Step {
    let mut found = model.steps.iter().filter(|s| s.kind.starts_with(kind));
    let step = found.next().unwrap_or_else(|| panic!("no {kind} step"));
    assert!(found.next().is_none(), "more than one {kind} step");
    step
}

#[test]
fn a_conv_step_does_the_closed_form_work_in_every_layout() {
    // (cin, cout, groups, with batch norm, residual and relu)
    for (cin, cout, group, epilogue) in [(8, 24, 1, true), (8, 8, 8, false)] {
        let g = strided_conv_graph(cin, cout, group, epilogue);
        let (kh, kw, oh, ow) = (3, 2, 5, 10);
        // One multiply-add per output element, input channel of its group and tap.
        let flops = (2 * 2 * cout * oh * ow * (cin / group) * kh * kw) as f64;
        let x = 2 * cin * 9 * 11;
        let y = 2 * cout * oh * ow;
        // Data, weights, bias and output, and the residual (as large as the
        // output) when the step adds it; the batch norm's parameters are folded
        // into the weights.
        let elements = |kind: &str| {
            let residual = if kind.contains("Add") { y } else { 0 };
            x + cout * (cin / group) * kh * kw + cout + y + residual
        };
        let m = compile_on(1, &g);
        let conv = step(&m, "Conv");
        assert!(matches!(
            conv.kernel,
            super::Kernel::Conv(_) | super::Kernel::Depthwise(_)
        ));
        assert_eq!(conv.kind.contains("Add+Relu"), epilogue, "{}", conv.kind);
        let bytes = 4 * elements(&conv.kind) as u64;
        assert_eq!(conv.work, StepWork { bytes, flops }, "group {group}");
        // Planned, the step counts the logical flops (channels that pad a
        // block compute nothing) and the bytes as stored: as many in
        // channels-last storage, at least as many in blocks.
        for family in [TargetFamily::Nhwc, TargetFamily::Nchwc(16)] {
            let planner = planner_by_name("global").unwrap();
            let planned = plan(&g, planner.as_ref(), family, &CostModel::default()).unwrap();
            let m = compile_on(1, &planned.graph);
            let conv = step(&m, "Conv");
            let (work, logical) = (conv.work, 4 * elements(&conv.kind) as u64);
            assert_eq!(work.flops, flops, "group {group} {family}");
            match family {
                TargetFamily::Nhwc => assert_eq!(work.bytes, logical, "group {group}"),
                _ => assert!(work.bytes >= logical, "group {group} {family}"),
            }
        }
    }
}

#[test]
fn elementwise_and_dense_steps_count_their_operands_and_products() {
    let mut g = Graph::new("elementwise");
    let ty = ValueType::new(DType::F32, vec![2, 3, 5]);
    let x = g.add_input("x", ty.clone(), vec![]);
    let y = g.add_input("y", ty.clone(), vec![]);
    let sum = Op::Binary(BinaryOp::Add);
    let sum = ValueRef::new(g.add_node(sum, "sum", &[x, y], &[], vec![]).unwrap(), 0);
    // A broadcast constant and a sigmoid: one loop nest, the sum in between unstored.
    let c = g.add_constant("c", Tensor::from_f32(vec![5], vec![0.5; 5]), vec![]);
    let scaled = Op::Binary(BinaryOp::Mul);
    let scaled = ValueRef::new(
        g.add_node(scaled, "scaled", &[sum, c], &[], vec![])
            .unwrap(),
        0,
    );
    let sigmoid = Op::Unary(UnaryOp::Sigmoid);
    let s = ValueRef::new(
        g.add_node(sigmoid, "sigmoid", &[scaled], &[], vec![])
            .unwrap(),
        0,
    );
    // Then a product with [5, 7] weights and a bias, as 30 rows of 5.
    let flat = g.add_node(
        Op::Reshape(crate::ops::Reshape { shape: vec![6, 5] }),
        "flat",
        &[s],
        &[],
        vec![],
    );
    let flat = ValueRef::new(flat.unwrap(), 0);
    let w = g.add_constant("w", Tensor::from_f32(vec![5, 7], vec![0.25; 35]), vec![]);
    let b = g.add_constant("b", Tensor::from_f32(vec![7], vec![1.0; 7]), vec![]);
    let gemm = Op::Gemm(crate::ops::Gemm {
        alpha: 1.0,
        beta: 1.0,
        trans_a: false,
        trans_b: false,
    });
    let out = ValueRef::new(
        g.add_node(gemm, "dense", &[flat, w, b], &[], vec![])
            .unwrap(),
        0,
    );
    g.set_outputs(vec![out]);
    let m = compile_on(1, &g);
    let bytes = |elements: usize| 4 * elements as u64;
    // The chain reads x, y and c and writes its result; the values between its
    // ops stay in registers. Elementwise ops count no flops.
    let chain = step(&m, "Add+Mul+Sigmoid");
    let moved = bytes(30 + 30 + 5 + 30);
    assert_eq!(
        chain.work,
        StepWork {
            bytes: moved,
            flops: 0.0
        }
    );
    assert_eq!(chain.work.intensity(), None);
    // The reshape is a view of the chain's output: no step, nothing moved.
    assert!(m.steps.iter().all(|s| !s.kind.starts_with("Reshape")));
    let dense = step(&m, "Gemm").work;
    assert_eq!(dense.flops, (2 * 6 * 7 * 5) as f64);
    assert_eq!(dense.bytes, bytes(30 + 35 + 7 + 42));
    assert_eq!(dense.intensity(), Some(420.0 / 456.0));
}

#[test]
fn peaks_are_probed_once_then_read_from_the_cache() {
    use super::load::Load;
    use super::roofline::{peaks_cached_in, PeaksSource, Roofline};
    use std::path::Path;
    // Probed for real, the machine's load given: the test does not depend on it.
    let probed_under = |threads: usize, dir: &Path, reprobe: bool, load: Load| -> Roofline {
        let pool = super::worker_pool(threads).unwrap();
        peaks_cached_in(&pool, Some(dir), (reprobe, false), |pool| {
            (super::roofline::probe(pool), load)
        })
    };
    let machine_peaks = |threads: usize, dir: Option<&Path>, reprobe: bool| -> Option<Roofline> {
        Some(probed_under(threads, dir?, reprobe, Load::default()))
    };
    let dir = std::env::temp_dir().join(format!("layoutopt-peaks-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let file = dir.join("peaks.json");
    let probed = Some(file.clone());
    let first = machine_peaks(2, Some(&dir), false).unwrap();
    assert_eq!(first.source, PeaksSource::Probed(probed.clone()));
    let p = first.peaks;
    assert_eq!(p.threads, 2);
    for figure in [p.copy_gbps, p.fma_gflops] {
        assert!(figure.is_finite() && figure > 0.0, "{p:?}");
    }
    let again = machine_peaks(2, Some(&dir), false).unwrap();
    assert_eq!(again.source, PeaksSource::Cached(file.clone()));
    assert_eq!(again.peaks, p);
    // A corrupt file is passed over and rewritten.
    std::fs::write(&file, "{\"peaks\": [").unwrap();
    let rewritten = machine_peaks(2, Some(&dir), false).unwrap();
    assert_eq!(rewritten.source, PeaksSource::Probed(probed.clone()));
    let read = machine_peaks(2, Some(&dir), false).unwrap();
    assert_eq!(read.peaks, rewritten.peaks);
    // Another thread count is another entry.
    let one = machine_peaks(1, Some(&dir), false).unwrap();
    assert_eq!(one.peaks.threads, 1);
    assert_eq!(one.source, PeaksSource::Probed(probed.clone()));
    assert_eq!(machine_peaks(2, Some(&dir), false).unwrap(), read);
    // A re-probe replaces its own entry only.
    let reprobed = machine_peaks(2, Some(&dir), true).unwrap();
    assert_eq!(reprobed.source, PeaksSource::Probed(probed));
    assert_eq!(
        machine_peaks(2, Some(&dir), false).unwrap().peaks,
        reprobed.peaks
    );
    assert_eq!(
        machine_peaks(1, Some(&dir), false).unwrap().peaks,
        one.peaks
    );
    // Probed while other processes kept both cores busy: used, not cached.
    let busy = Load {
        others: 150.0,
        elapsed: 100.0,
        cpus: 2,
        span: None,
    };
    let loaded = probed_under(2, &dir, true, busy);
    assert_eq!(loaded.source, PeaksSource::Busy(busy));
    assert_eq!(
        machine_peaks(2, Some(&dir), false).unwrap().peaks,
        reprobed.peaks
    );
    // A folder that cannot be made (a file is in the way): probed, not cached.
    let blocked = machine_peaks(1, Some(&file), false).unwrap();
    assert_eq!(blocked.source, PeaksSource::Probed(None));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_profile_shows_rates_and_the_fraction_of_the_roof() {
    use super::bench::{BenchReport, Profile};
    use super::roofline::{MachinePeaks, PeaksSource, Roofline};
    use super::StepProfile;
    use std::time::Duration;
    let step = |name: &str, bytes: u64, flops: f64, ms_per_run: [u64; 3]| StepProfile {
        name: name.into(),
        kind: "Kind".into(),
        fallback: false,
        work: StepWork { bytes, flops },
        times: ms_per_run.map(Duration::from_millis).to_vec(),
    };
    let ms = Duration::from_millis(1);
    let report = BenchReport {
        runs: 3,
        times: vec![ms, ms, ms],
        min: ms,
        p50: ms,
        p90: ms,
        p99: ms,
        mean: ms,
        profile: Some(Profile {
            runs: 3,
            steps: vec![
                // A median of 1 ms a run (one preempted run of 30 ms does not
                // count): 2 GB/s and 400 GFLOP/s; the roof is the 0.5 ms its
                // flops take at 800 GFLOP/s (its bytes take 0.2 ms at 10 GB/s).
                step("conv", 2_000_000, 4e8, [1, 30, 1]),
                // 2 ms a run for 3 MB: 1.5 GB/s, 15% of 10 GB/s.
                step("pool", 3_000_000, 0.0, [2, 2, 2]),
            ],
            roofline: Roofline {
                peaks: MachinePeaks {
                    copy_gbps: 10.0,
                    fma_gflops: 800.0,
                    threads: 2,
                },
                source: PeaksSource::Cached("/cache/peaks.json".into()),
            },
            // The conv predicted by a measured kernel time, the pool by its
            // bytes at 10 GB/s.
            predicted: vec![0.8e-3, 0.3e-3],
        }),
    };
    let text = report.to_string();
    let line = |name: &str| {
        let line = text.lines().find(|l| l.ends_with(name));
        line.unwrap_or_else(|| panic!("no {name} in\n{text}"))
    };
    assert!(text.contains(
        "machine: copy 10.0 GB/s, FMA 800.0 GFLOP/s (threads 2, cached in /cache/peaks.json)"
    ));
    assert!(text.contains("predicted 1.100 ms in all, measured 3.000 ms"));
    let columns = |l: &str| l.split_whitespace().take(8).collect::<Vec<_>>().join(" ");
    assert_eq!(
        columns(line("step")),
        "ms pred. ms share GB/s GFLOP/s flop/B %"
    );
    assert_eq!(
        columns(line("conv")),
        "1.000 0.800 33.3% 2.00 400.00 200.00 50.0% Kind"
    );
    assert_eq!(
        columns(line("pool")),
        "2.000 0.300 66.7% 1.50 - - 15.0% Kind"
    );
}

/// Reshapes, slices and splits along the outermost axis read a contiguous piece
/// of their input: they become views (no step) and compute what the reference
/// computes; one whose input is a graph input or whose output is a graph
/// output keeps its copy.
#[test]
fn contiguous_movements_are_views_of_their_input() {
    use crate::ops::{Reshape, Slice, SliceAxis, Split};
    let mut g = Graph::new("views");
    let x = g.add_input("x", ValueType::new(DType::F32, vec![4, 3, 5]), vec![]);
    let node = |g: &mut Graph, op: Op, name: &str, ins: &[ValueRef]| {
        ValueRef::new(g.add_node(op, name, ins, &[], vec![]).unwrap(), 0)
    };
    let relu = node(&mut g, Op::Unary(UnaryOp::Relu), "relu", &[x]);
    let flat = node(
        &mut g,
        Op::Reshape(Reshape { shape: vec![4, 15] }),
        "flat",
        &[relu],
    );
    let rows = Op::Slice(Slice {
        axes: vec![SliceAxis {
            axis: 0,
            start: 1,
            end: 3,
            step: 1,
        }],
    });
    let rows = node(&mut g, rows, "rows", &[flat]);
    let neg = node(&mut g, Op::Unary(UnaryOp::Neg), "neg", &[rows]);
    let split = Op::Split(Split {
        axis: 0,
        sizes: vec![1, 3],
    });
    let parts = g.add_node(split, "split", &[relu], &[], vec![]).unwrap();
    let (first, rest) = (ValueRef::new(parts, 0), ValueRef::new(parts, 1));
    let tail = node(&mut g, Op::Unary(UnaryOp::Exp), "tail", &[rest]);
    let sum = node(&mut g, Op::Binary(BinaryOp::Add), "sum", &[first, tail]);
    // A graph input and a graph output keep their copies.
    let of_input = node(
        &mut g,
        Op::Reshape(Reshape { shape: vec![60] }),
        "of_input",
        &[x],
    );
    let as_output = node(
        &mut g,
        Op::Reshape(Reshape { shape: vec![12, 5] }),
        "as_output",
        &[relu],
    );
    g.set_outputs(vec![neg, sum, of_input, as_output]);
    let m = compile_on(2, &g);
    let kinds: Vec<&str> = m.steps.iter().map(|s| s.kind.as_str()).collect();
    let movements = kinds
        .iter()
        .filter(|k| {
            ["Reshape", "Slice", "Split"]
                .iter()
                .any(|m| k.starts_with(m))
        })
        .count();
    assert_eq!(
        movements, 2,
        "only the input's and the output's reshapes copy: {kinds:?}"
    );
    let mut rng = Rng(11);
    let input = Tensor::from_f32(vec![4, 3, 5], rng.f32s(60));
    let expected = crate::reference::run(&g, std::slice::from_ref(&input)).unwrap();
    for _ in 0..2 {
        let got = m.run(std::slice::from_ref(&input)).unwrap();
        for (k, (a, e)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(a.shape, e.shape, "output {k}");
            assert_close(&a.to_f32(), &e.to_f32(), &format!("output {k}"));
        }
    }
}

/// Matrix products of two computed operands (attention's Q·Kᵀ and P·V) run as
/// one native step: batch axes broadcast either way, vector operands, a
/// constant right operand of rank 3, row-tile and panel tails, an empty
/// contraction; each against the reference executor.
#[test]
fn batched_matmuls_match_the_reference_executor() {
    let cases: [(&[usize], &[usize], bool); 8] = [
        (&[2, 3, 5, 7], &[2, 3, 7, 9], false),
        (&[1, 4, 9, 16], &[4, 16, 70], false),
        (&[3, 1, 6, 5], &[1, 2, 5, 4], false),
        (&[8, 33], &[33, 17], false),
        (&[8, 33], &[33], false),
        (&[33], &[2, 33, 5], false),
        (&[2, 5, 0], &[2, 0, 3], false),
        (&[2, 4, 8], &[2, 8, 3], true),
    ];
    let mut rng = Rng(17);
    for (a_shape, b_shape, constant_b) in cases {
        let what = format!("{a_shape:?} x {b_shape:?}");
        let mut g = Graph::new("matmul");
        let a_ty = ValueType::new(DType::F32, a_shape.to_vec());
        let a = g.add_input("a", a_ty.clone(), vec![]);
        let b_data = Tensor::from_f32(b_shape.to_vec(), rng.f32s(b_shape.iter().product()));
        let b = match constant_b {
            true => g.add_constant("b", b_data.clone(), vec![]),
            false => g.add_input("b", ValueType::new(DType::F32, b_shape.to_vec()), vec![]),
        };
        let mm = g.add_node(Op::MatMul, "mm", &[a, b], &[], vec![]).unwrap();
        g.set_outputs(vec![ValueRef::new(mm, 0)]);
        let m = compile_on(2, &g);
        let kinds: Vec<&str> = m.steps.iter().map(|s| s.kind.as_str()).collect();
        assert_eq!(kinds, ["MatMul"], "{what}");
        let mut inputs = vec![Tensor::from_f32(a_shape.to_vec(), rng.f32s(a_ty.numel()))];
        if !constant_b {
            inputs.push(b_data);
        }
        let expected = crate::reference::run(&g, &inputs).unwrap();
        // Twice: the second run packs `b` into scratch the first one left dirty.
        for _ in 0..2 {
            let got = m.run(&inputs).unwrap();
            assert_eq!(got[0].shape, expected[0].shape, "{what}");
            assert_close(&got[0].f32s(), &expected[0].f32s(), &what);
        }
    }
}

/// A classifier after a pooled, channel-blocked feature map: the planner
/// stores the feature vector NC16c (the bytes of row-major), and the product
/// still runs the packed dense kernel rather than a loop nest.
#[test]
fn a_classifier_on_a_blocked_feature_vector_runs_the_dense_kernel() {
    use crate::graph::{GlobalPool, PoolKind, Reshape};
    let mut rng = Rng(23);
    let (cin, c, classes) = (16, 32, 10);
    let mut g = Graph::new("classifier");
    let x_ty = ValueType::new(DType::F32, vec![1, cin, 6, 6]);
    let x = g.add_input("x", x_ty.clone(), vec![]);
    let mut constant = |g: &mut Graph, name: &str, shape: Vec<usize>| {
        let data = rng.f32s(shape.iter().product());
        g.add_constant(name, Tensor::from_f32(shape, data), vec![])
    };
    let w = constant(&mut g, "w", vec![c, cin, 3, 3]);
    let dense = constant(&mut g, "dense", vec![c, classes]);
    let node = |g: &mut Graph, op: Op, ins: &[ValueRef]| {
        let name = format!("n{}", g.node_count());
        ValueRef::new(g.add_node(op, &name, ins, &[], vec![]).unwrap(), 0)
    };
    let conv = Op::Conv(Conv {
        window: crate::ops::testutil::square_window(3, 1, 1),
        group: 1,
    });
    let y = node(&mut g, conv, &[x, w]);
    let pooled = Op::GlobalPool(GlobalPool {
        kind: PoolKind::Avg,
    });
    let y = node(&mut g, pooled, &[y]);
    let flat = Op::Reshape(Reshape { shape: vec![1, c] });
    let y = node(&mut g, flat, &[y]);
    let y = node(&mut g, Op::MatMul, &[y, dense]);
    g.set_outputs(vec![y]);
    let inputs = [Tensor::from_f32(x_ty.shape.clone(), rng.f32s(x_ty.numel()))];
    let expected = crate::reference::run(&g, &inputs).unwrap()[0].to_f32();
    let planner = planner_by_name("global").unwrap();
    let planned = plan(
        &g,
        planner.as_ref(),
        TargetFamily::Nchwc(16),
        &CostModel::default(),
    )
    .unwrap()
    .graph;
    let matmul = planned
        .node_ids()
        .into_iter()
        .find(|&id| matches!(crate::fusion::inner(&planned, id).0, Op::MatMul))
        .unwrap();
    let (layout, _) = crate::fusion::input_layout(&planned, matmul, 0).unwrap();
    assert!(
        !layout.is_identity(),
        "the feature vector is stored row-major"
    );
    let m = CompiledModel::compile(&planned, &RuntimeOptions::default()).unwrap();
    assert!(matches!(step(&m, "MatMul").kernel, super::Kernel::Dense(_)));
    let got = m.run(&inputs).unwrap()[0].to_f32();
    assert_close(&got, &expected, "classifier");
}

/// The written-out Winograd transforms along one axis are the matrices Bᵀ
/// and Aᵀ of Lavin and Gray: each maps the unit vector e_k to column k.
#[test]
fn winograd_line_transforms_are_the_papers_matrices() {
    use super::simd::{Scalar as Lane, Vector};
    use super::winograd::{F2Input, F2Output, F4Input, F4Output, Line};
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
    use super::winograd::{TransformedWeights, WinogradConv, WinogradTile};
    let isas: Vec<Isa> = [Isa::Avx512, Isa::Avx2, Isa::Portable]
        .into_iter()
        .filter(|i| i.available())
        .collect();
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
        let pick = |rng: &mut Rng, c: usize| [1, 8, 16, c][rng.below(4)];
        let (x_cb, y_cb) = (pick(&mut rng, cin), pick(&mut rng, cout));
        let g = ConvGeom {
            n: rng.range(1, 2),
            cin,
            h,
            w,
            cout,
            oh: h + pad.0 + pad_end.0 - 2,
            ow: w + pad.1 + pad_end.1 - 2,
            k: (3, 3),
            stride: (1, 1),
            dilation: (1, 1),
            pad,
            x_cb,
            y_cb,
        };
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
        let mut xb = vec![f32::NAN; g.x_len()];
        for n in 0..g.n {
            for c in 0..cin {
                for yx in 0..h * w {
                    xb[blocked(n, c, yx, cin, h * w, x_cb)] = x[(n * cin + c) * h * w + yx];
                }
            }
        }
        let expect = naive_conv(&g, &x, &wt, &bias);
        let tol = 1e-4 * (2.0 + expect.iter().fold(0f64, |m, e| m.max(e.abs())));
        let plane = g.oh * g.ow;
        for (&isa, tile) in isas
            .iter()
            .flat_map(|i| [(i, WinogradTile::F2), (i, WinogradTile::F4)])
        {
            // Run on that many threads: with few products, their rows are
            // cut between the threads.
            let threads = 1 + case % 3;
            let pool = crate::core::par::Pool::new(threads).unwrap();
            let ep = Epilogue {
                min: lo,
                max: hi,
                act: None,
            };
            let u = TransformedWeights::new(tile, isa, cin, cout, &wt);
            let conv = WinogradConv::new(g.clone(), isa, &u, &wt, &bias, ep, Some(0.0), threads);
            let mut y = vec![f32::NAN; g.y_len()];
            let mut scratch = vec![f32::NAN; conv.scratch_len()];
            pool.install(|| conv.run(&xb, fused.then_some(&residual[..]), &mut y, &mut scratch));
            for n in 0..g.n {
                for c in 0..cout.div_ceil(y_cb) * y_cb {
                    for yx in 0..plane {
                        let at = blocked(n, c, yx, cout, plane, y_cb);
                        if c >= cout {
                            assert_eq!(y[at], 0.0, "case {case} {isa:?} {tile:?}: padding {c}");
                            continue;
                        }
                        let mut e = expect[(n * cout + c) * plane + yx];
                        if fused {
                            e += residual[at] as f64;
                        }
                        let e = e.clamp(lo as f64, hi as f64);
                        let got = y[at] as f64;
                        assert!(
                            (got - e).abs() <= tol,
                            "case {case} {isa:?} {tile:?} {g:?}: ({n},{c},{yx}) got {got} want {e}"
                        );
                    }
                }
            }
            // NaN and ±inf at a body and at an edge pixel: exactly the
            // outputs the naive loop and the direct kernel make non-finite
            // are, with the same NaN or sign of infinity.
            let direct = PackedConv::new(g.clone(), isa, &wt, &bias, ep, Some(0.0));
            let mut yd = vec![f32::NAN; g.y_len()];
            let mut scratch_d = vec![f32::NAN; direct.scratch_len()];
            for (body, edge) in [(f32::NAN, f32::INFINITY), (f32::NEG_INFINITY, f32::NAN)] {
                let (mut xl, mut xn) = (x.clone(), xb.clone());
                for (v, (iy, ix)) in [(body, body_at), (edge, edge_at)] {
                    let yx = iy * w + ix;
                    xl[(nan_n * cin + nan_c) * h * w + yx] = v;
                    xn[blocked(nan_n, nan_c, yx, cin, h * w, x_cb)] = v;
                }
                let expect = naive_conv(&g, &xl, &wt, &bias);
                let res = fused.then_some(&residual[..]);
                pool.install(|| conv.run(&xn, res, &mut y, &mut scratch));
                direct.run(&xn, res, &mut yd, &mut scratch_d);
                let class = |v: f64| (v.is_nan(), v.is_finite(), v > 0.0);
                for n in 0..g.n {
                    for c in 0..cout {
                        for yx in 0..plane {
                            let at = blocked(n, c, yx, cout, plane, y_cb);
                            let mut e = expect[(n * cout + c) * plane + yx];
                            if fused {
                                e += residual[at] as f64;
                            }
                            let e = e.clamp(lo as f64, hi as f64);
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

/// `auto` measures direct and each accurate Winograd size once per machine
/// and shape: a second build reads the times from `conv_algos.json` (edited
/// times decide the next choice, so nothing is measured again); `direct` and
/// `winograd` measure nothing; every Winograd size chosen or timed is within
/// the tolerance on the layer.
#[test]
fn conv_algorithms_are_measured_once_then_read_from_the_cache() {
    use super::conv_algo::{
        build, ConvAlgo, ConvAlgoChoice, ConvAlgoOptions, ConvSpec, WINOGRAD_TOLERANCE,
    };
    use super::winograd::WinogradTile;
    // What is cached is tested here, not the guard against load (`load.rs`).
    std::env::set_var(super::load::CACHE_UNDER_LOAD_ENV, "1");
    let dir = std::env::temp_dir().join(format!("layoutopt-convalgo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = Rng(23);
    let geom = ConvGeom {
        n: 1,
        cin: 32,
        h: 12,
        w: 12,
        cout: 32,
        oh: 12,
        ow: 12,
        k: (3, 3),
        stride: (1, 1),
        dilation: (1, 1),
        pad: (1, 1),
        x_cb: 16,
        y_cb: 16,
    };
    let (w, bias) = (rng.f32s(32 * 32 * 9), rng.f32s(32));
    let spec = ConvSpec {
        geom,
        isa: Isa::detect(),
        w: &w,
        bias: &bias,
        epilogue: Epilogue::of(None),
        pad_fill: None,
        threads: 1,
    };
    let options = |choice| ConvAlgoOptions {
        choice,
        cache: Some(dir.clone()),
    };
    let auto = options(ConvAlgoChoice::Auto);
    let (_, first) = build(&spec, &auto);
    let names: Vec<ConvAlgo> = first.millis.iter().map(|m| m.0).collect();
    assert_eq!(names[0], ConvAlgo::Direct, "{first}");
    for (algo, e) in &first.errors {
        assert!(e.is_finite(), "{first}");
        assert_eq!(names.contains(algo), *e <= WINOGRAD_TOLERANCE, "{first}");
    }
    let fastest = first.millis.iter().min_by(|a, b| a.1.total_cmp(&b.1));
    assert_eq!(first.algo, fastest.unwrap().0, "{first}");
    let (_, second) = build(&spec, &auto);
    assert_eq!(second, first);
    // Make F(2x2) the fastest in the file: the next build takes it.
    assert!(
        names.contains(&ConvAlgo::Winograd(WinogradTile::F2)),
        "{first}"
    );
    let file = dir.join("kernel_times.json");
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    for m in json[0]["millis"].as_array_mut().unwrap() {
        m[1] = serde_json::json!(if m[0] == "winograd-f2" { 0.5 } else { 1.0 });
    }
    std::fs::write(&file, json.to_string()).unwrap();
    let (kernel, edited) = build(&spec, &auto);
    assert_eq!(
        edited.algo,
        ConvAlgo::Winograd(WinogradTile::F2),
        "{edited}"
    );
    assert!(matches!(kernel, super::conv_algo::ConvKernel::Winograd(_)));
    // The forced choices measure nothing.
    let (_, direct) = build(&spec, &options(ConvAlgoChoice::Direct));
    assert_eq!((direct.algo, direct.millis.len()), (ConvAlgo::Direct, 0));
    let (_, wino) = build(&spec, &options(ConvAlgoChoice::Winograd));
    assert_eq!(wino.millis.len(), 0);
    assert_eq!(wino.algo, ConvAlgo::Winograd(WinogradTile::F4), "{wino}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Gathers by run-time indices, with rows long enough to be cut between
/// threads and short enough to be grouped, negative indices among them,
/// against the reference executor; an index outside the axis is an error
/// naming the node.
#[test]
fn gathers_by_runtime_indices_match_the_reference_executor() {
    let cases: [(&[usize], usize, usize); 4] = [
        (&[3, 40_000], 0, 5),
        (&[2, 300, 7], 1, 900),
        (&[4, 5, 6, 9], 3, 9),
        (&[6], 0, 0),
    ];
    let mut rng = Rng(29);
    for (shape, axis, picks) in cases {
        let what = format!("{shape:?} axis {axis}");
        let extent = shape[axis] as i64;
        let mut g = Graph::new("gather");
        let x_ty = ValueType::new(DType::F32, shape.to_vec());
        let x = g.add_input("x", x_ty.clone(), vec![]);
        let i = g.add_input("i", ValueType::new(DType::I64, vec![picks]), vec![]);
        let op = Op::Gather(crate::ops::Gather { axis });
        let span = vec![crate::core::Span::new("gather.onnx", "pick", "Gather", 0)];
        let y = g.add_node(op, "pick", &[x, i], &[], span).unwrap();
        g.set_outputs(vec![ValueRef::new(y, 0)]);
        let m = compile_on(2, &g);
        let index = |_| rng.below(2 * extent as usize) as i64 - extent;
        let indices: Vec<i64> = (0..picks).map(index).collect();
        let inputs = [
            Tensor::from_f32(shape.to_vec(), rng.f32s(x_ty.numel())),
            Tensor::new(vec![picks], TensorData::I64(indices)),
        ];
        let expected = crate::reference::run(&g, &inputs).unwrap();
        let got = m.run(&inputs).unwrap();
        assert_eq!(got[0].shape, expected[0].shape, "{what}");
        assert_close(&got[0].f32s(), &expected[0].f32s(), &what);
        if picks > 0 {
            let mut bad = inputs.clone();
            bad[1] = Tensor::new(vec![picks], TensorData::I64(vec![extent; picks]));
            let e = m.run(&bad).unwrap_err().to_string();
            assert!(
                e.contains("pick") && e.contains("out of range"),
                "{what}: {e}"
            );
        }
    }
}
