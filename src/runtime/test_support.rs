//! What the runtime's tests share: reproducible random data, a graph
//! compiled on some threads, closeness to the reference, and the graphs
//! several rooms' tests compile.

use crate::fusion::Activation;
use crate::graph::{
    BinaryOp, Conv, DType, Graph, Op, Tensor, UnaryOp, ValueRef, ValueType, Window,
};
use crate::layout::cost::CostModel;
use crate::layout::plan::plan;
use crate::layout::planners::planner_by_name;
use crate::layout::target::TargetFamily;
use crate::ops::BatchNorm;
use crate::runtime::kernels::conv::direct::ConvGeom;
use crate::runtime::kernels::conv::tile::{ChannelParams, Epilogue};
use crate::runtime::{CompiledModel, Isa, RuntimeOptions};

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

/// The families the runtime's tests plan for: both plain orders and both
/// channel blocks.
pub(super) const FAMILIES: [TargetFamily; 4] = [
    TargetFamily::Nchw,
    TargetFamily::Nhwc,
    TargetFamily::Nchwc(16),
    TargetFamily::Nchwc(8),
];

/// `g` as the global planner lays it out for `family`, with the built-in costs.
pub(super) fn planned_for(g: &Graph, family: TargetFamily) -> Graph {
    let global = planner_by_name("global").unwrap();
    plan(g, global.as_ref(), family, &CostModel::default())
        .unwrap()
        .graph
}

/// `g` compiled to run on 2 threads with each instruction set this CPU has.
pub(super) fn compiled_per_isa(g: &Graph) -> impl Iterator<Item = (Isa, CompiledModel)> + '_ {
    available_isas().into_iter().map(|isa| {
        let options = RuntimeOptions {
            threads: 2,
            isa: Some(isa),
            ..Default::default()
        };
        (isa, CompiledModel::compile(g, &options).unwrap())
    })
}

/// Every instruction set this CPU has, widest first.
pub(super) fn available_isas() -> Vec<Isa> {
    Isa::ALL.into_iter().filter(|i| i.available()).collect()
}

/// NCHW{cb}c storage of logical NCHW data: `channels` channels of `plane`
/// pixels, in blocks of `cb` channels padded to whole blocks.
#[derive(Clone, Copy)]
pub(super) struct Blocked {
    pub(super) channels: usize,
    pub(super) plane: usize,
    pub(super) cb: usize,
}

/// A dense `k` x `k` convolution of a `side` x `side` plane padded by `k / 2`
/// on every side, `channels` in and out, both blocked by `cb`.
pub(super) fn square_conv(
    channels: usize,
    side: usize,
    (k, stride): (usize, usize),
    cb: usize,
) -> ConvGeom {
    let (pad, out) = (k / 2, (side + 2 * (k / 2) - k) / stride + 1);
    ConvGeom {
        n: 1,
        cin: channels,
        h: side,
        w: side,
        cout: channels,
        oh: out,
        ow: out,
        k: (k, k),
        stride: (stride, stride),
        dilation: (1, 1),
        pad: (pad, pad),
        groups: 1,
        x_cb: cb,
        y_cb: cb,
    }
}

/// What a fused conv epilogue adds to the plain convolution: a residual at
/// the output's own offset, then a clamp to `[lo, hi]`, then an activation,
/// then a PRelu of one slope per channel.
#[derive(Clone, Copy)]
pub(super) struct FusedTail<'a> {
    pub(super) residual: Option<&'a [f32]>,
    pub(super) lo: f32,
    pub(super) hi: f32,
    pub(super) act: Option<UnaryOp>,
    pub(super) slope: Option<&'a [f32]>,
}

impl<'a> FusedTail<'a> {
    /// A tail that adds `residual` or not, clamps to one of `clamps`, and
    /// ends in a PRelu of `slopes` or not, each at random.
    pub(super) fn random(
        residual: &'a [f32],
        slopes: &'a [f32],
        clamps: &[(f32, f32)],
        rng: &mut Rng,
    ) -> Self {
        let with_residual = rng.below(2) == 0;
        let (lo, hi) = clamps[rng.below(clamps.len())];
        FusedTail {
            residual: with_residual.then_some(residual),
            lo,
            hi,
            act: None,
            slope: (rng.below(3) == 0).then_some(slopes),
        }
    }

    /// The kernels' epilogue that clamps and activates as this tail does.
    pub(super) fn epilogue(&self) -> Epilogue {
        Epilogue {
            min: self.lo,
            max: self.hi,
            act: self.act.map(Activation::Unary),
            slope_at: None,
        }
    }

    /// The kernels' per-channel values: `bias`, and the tail's slopes.
    pub(super) fn params(&self, bias: &'a [f32]) -> ChannelParams<'a> {
        ChannelParams {
            bias,
            slope: self.slope,
        }
    }

    /// `e`, the plain output of channel `c` that lands at offset `at`, with
    /// the tail applied.
    pub(super) fn apply(&self, e: f64, at: usize, c: usize) -> f64 {
        let e = e + self.residual.map_or(0.0, |r| r[at] as f64);
        let e = e.clamp(self.lo as f64, self.hi as f64);
        let e = self.act.map_or(e, |u| u.apply(e));
        match self.slope {
            Some(s) if e < 0.0 => e * s[c] as f64,
            _ => e,
        }
    }
}

impl Blocked {
    /// The storage of `g`'s input.
    pub(super) fn input_of(g: &ConvGeom) -> Self {
        Blocked {
            channels: g.cin,
            plane: g.h * g.w,
            cb: g.x_cb,
        }
    }

    /// The storage of `g`'s output.
    pub(super) fn output_of(g: &ConvGeom) -> Self {
        Blocked {
            channels: g.cout,
            plane: g.oh * g.ow,
            cb: g.y_cb,
        }
    }

    /// Offset of logical (n, c, yx).
    pub(super) fn at(&self, n: usize, c: usize, yx: usize) -> usize {
        let blocks = self.channels.div_ceil(self.cb);
        ((n * blocks + c / self.cb) * self.plane + yx) * self.cb + c % self.cb
    }

    /// Logical NCHW `x` in this storage; padding channels hold NaN, so that
    /// a kernel that reads them shows in its outputs.
    pub(super) fn scatter(&self, x: &[f32]) -> Vec<f32> {
        let image = self.channels * self.plane;
        let batch = x.len() / image;
        let padded = self.channels.div_ceil(self.cb) * self.cb;
        let mut out = vec![f32::NAN; batch * padded * self.plane];
        for (i, &v) in x.iter().enumerate() {
            let (n, c, yx) = (i / image, i % image / self.plane, i % self.plane);
            out[self.at(n, c, yx)] = v;
        }
        out
    }

    /// The blocked output `y` against the logical NCHW `expect` with `tail`
    /// applied: every real channel passes `close(got, want)`, every padding
    /// channel is 0 where `zero_padding` (a zero weight times NaN is not).
    pub(super) fn check(
        &self,
        y: &[f32],
        expect: &[f64],
        tail: FusedTail,
        zero_padding: bool,
        close: impl Fn(f64, f64) -> bool,
        what: &str,
    ) {
        let padded = self.channels.div_ceil(self.cb) * self.cb;
        for n in 0..expect.len() / (self.channels * self.plane) {
            for c in 0..padded {
                for yx in 0..self.plane {
                    let at = self.at(n, c, yx);
                    if c >= self.channels {
                        if zero_padding {
                            assert_eq!(y[at], 0.0, "{what}: padding channel {c}");
                        }
                        continue;
                    }
                    let e = tail.apply(expect[(n * self.channels + c) * self.plane + yx], at, c);
                    let got = y[at] as f64;
                    assert!(close(got, e), "{what}: ({n},{c},{yx}) got {got} want {e}");
                }
            }
        }
    }
}

/// `got` equals the reference's `expected`: |got - expected| ≤ 1e-5 ·
/// max(1, |expected|), NaN where it is NaN.
/// The largest absolute difference between `got` and `expected`, and the
/// largest magnitude in `expected` (to hold the first to a share of it).
pub(super) fn max_error(got: &[f32], expected: &[f32]) -> (f32, f32) {
    let mag = expected.iter().fold(0f32, |m, e| m.max(e.abs()));
    let err = got
        .iter()
        .zip(expected)
        .fold(0f32, |m, (a, e)| m.max((a - e).abs()));
    (err, mag)
}

pub(super) fn assert_close(got: &[f32], expected: &[f32], what: &str) {
    assert_eq!(got.len(), expected.len(), "{what}");
    for (i, (&a, &e)) in got.iter().zip(expected).enumerate() {
        let close =
            a == e || (a.is_nan() && e.is_nan()) || (a - e).abs() <= 1e-5 * e.abs().max(1.0);
        assert!(close, "{what} element {i}: got {a}, expected {e}");
    }
}

/// A graph: x -> Conv(random window, groups) [-> BatchNorm] [-> Add(r)] [-> Clip].
pub(super) fn random_conv_graph(rng: &mut Rng) -> (Graph, Vec<Tensor>) {
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
    // The activation last: a clip, a swish (x · sigmoid(x)), another unary op,
    // a PRelu (its slope per channel, one for all, or per column), or none.
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
    match rng.below(5) {
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
        3 => {
            let w_out = g.value_type(v).shape[3];
            let shape = [vec![cout, 1, 1], vec![1, cout, 1, 1], vec![1], vec![w_out]];
            let shape = shape[rng.below(shape.len())].clone();
            let slope = rng.f32s(shape.iter().product());
            let slope = g.add_constant("slope", Tensor::from_f32(shape, slope), vec![]);
            let prelu = Op::Binary(crate::graph::BinaryOp::PRelu);
            let id = g
                .add_node(prelu, "prelu", &[v, slope], &[], vec![])
                .unwrap();
            v = crate::graph::ValueRef::new(id, 0);
        }
        _ => {}
    }
    g.set_outputs(vec![v]);
    (g, inputs)
}

/// x[1, c, h, w] -> 1x1 Conv -> `op`, the graph's output; with x's type. The
/// convolution's weights are random, or with `rng` None the identity (so that
/// `op` reads exactly x).
pub(super) fn after_pointwise_conv(
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

/// x[2, cin, 9, 11] -> Conv(cout, groups, 3x2 window, stride (2, 1), dilation
/// (1, 2), pads top 1, bottom 1, right 1) [-> BatchNorm -> Add(r) -> Relu]:
/// the output is [2, cout, 5, 10] ((9 + 2 - 3) / 2 + 1 rows, 11 + 1 - 3 + 1 columns).
pub(super) fn strided_conv_graph(cin: usize, cout: usize, group: usize, epilogue: bool) -> Graph {
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
