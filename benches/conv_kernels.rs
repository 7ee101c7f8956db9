//! The convolution kernels alone, at the shapes of ResNet50's layers (batch 1,
//! NCHW16c in and out): 1x1 convolutions as GEMM over 64 to 2048 input
//! channels, a strided 1x1, and each 3x3 layer by every algorithm (direct,
//! Winograd F(2x2,3x3) and F(4x4,3x3)), on 1 and 2 threads. Inputs, weights
//! and scratch stay in the caches between iterations, so these are the
//! kernels' compute-bound times; in a model a layer's weights come from
//! memory (`layoutopt bench --profile` times the steps in place). The
//! depthwise kernel runs at the shapes of MobileNet's and EfficientNet's
//! layers (3x3 and 5x5, stride 1 and 2, planes of 7x7 to 112x112).
//! Run with `cargo bench --bench conv_kernels [-- FILTER]`.

use criterion::{criterion_group, criterion_main, Criterion};
use layoutopt::core::par::Pool;
use layoutopt::fusion::Activation;
use layoutopt::graph::UnaryOp;
use layoutopt::runtime::kernels::conv::depthwise::Depthwise;
use layoutopt::runtime::kernels::conv::direct::{ConvGeom, PackedConv};
use layoutopt::runtime::kernels::conv::tile::{ChannelParams, Epilogue};
use layoutopt::runtime::kernels::conv::winograd::{TransformedWeights, WinogradConv, WinogradTile};
use layoutopt::runtime::Isa;

/// Input channels, output channels, input side, kernel side, stride.
const LAYERS: [(usize, usize, usize, usize, usize); 10] = [
    (64, 256, 56, 1, 1),
    (256, 64, 56, 1, 1),
    (512, 128, 28, 1, 1),
    (1024, 256, 14, 1, 1),
    (2048, 512, 7, 1, 1),
    (256, 512, 56, 1, 2),
    (64, 64, 56, 3, 1),
    (128, 128, 28, 3, 1),
    (256, 256, 14, 3, 1),
    (512, 512, 7, 3, 1),
];

/// Deterministic values in [-0.5, 0.5).
fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919 + seed * 104_729) % 1000) as f32 / 1000.0 - 0.5)
        .collect()
}

/// A convolution of batch 1 over a square input, a square window padded by
/// half its side, NCHW16c in and out.
fn square(
    cin: usize,
    cout: usize,
    side: usize,
    k: usize,
    stride: usize,
    groups: usize,
) -> ConvGeom {
    let out = (side + 2 * (k / 2) - k) / stride + 1;
    ConvGeom {
        n: 1,
        cin,
        h: side,
        w: side,
        cout,
        oh: out,
        ow: out,
        k: (k, k),
        stride: (stride, stride),
        dilation: (1, 1),
        pad: (k / 2, k / 2),
        groups,
        x_cb: 16,
        y_cb: 16,
    }
}

fn conv_kernels(c: &mut Criterion) {
    let isa = Isa::detect();
    for (cin, cout, side, k, stride) in LAYERS {
        let geom = square(cin, cout, side, k, stride, 1);
        let w = values(cout * cin * k * k, 1);
        let bias = values(cout, 2);
        let x = values(geom.x_len(), 3);
        let mut y = vec![0f32; geom.y_len()];
        let relu = Epilogue::of(Some(Activation::Unary(UnaryOp::Relu)));
        let params = ChannelParams::bias_only(&bias);
        let tiles: &[WinogradTile] = match k {
            3 => &[WinogradTile::F2, WinogradTile::F4],
            _ => &[],
        };
        let shape = format!("{cin}->{cout} {k}x{k}/{stride} at {side}x{side}");
        for threads in [1, 2] {
            let pool = Pool::new(threads).expect("worker threads start");
            let direct = PackedConv::new(geom.clone(), isa, &w, params, relu, None);
            let mut scratch = vec![0f32; direct.scratch_len()];
            let name = if k == 1 { "gemm" } else { "direct" };
            c.bench_function(&format!("{shape} {name} ({threads}t)"), |b| {
                pool.install(|| b.iter(|| direct.run(&x, None, &mut y, &mut scratch)))
            });
            for &tile in tiles {
                let u = TransformedWeights::new(tile, isa, cin, cout, &w);
                let wino =
                    WinogradConv::new(geom.clone(), isa, &u, &w, params, relu, None, threads);
                let mut scratch = vec![0f32; wino.scratch_len()];
                c.bench_function(&format!("{shape} {tile:?} ({threads}t)"), |b| {
                    pool.install(|| b.iter(|| wino.run(&x, None, &mut y, &mut scratch)))
                });
            }
        }
    }
}

/// Channels, input side, kernel side, stride of depthwise layers.
const DEPTHWISE: [(usize, usize, usize, usize); 6] = [
    (32, 112, 3, 1),
    (144, 56, 3, 2),
    (96, 28, 5, 2),
    (240, 14, 5, 1),
    (672, 14, 5, 1),
    (576, 7, 5, 1),
];

fn depthwise_kernels(c: &mut Criterion) {
    let isa = Isa::detect();
    for (ch, side, k, stride) in DEPTHWISE {
        let geom = square(ch, ch, side, k, stride, ch);
        let w = values(ch * k * k, 1);
        let bias = values(ch, 2);
        let x = values(geom.x_len(), 3);
        let mut y = vec![0f32; geom.y_len()];
        let relu = Epilogue::of(Some(Activation::Unary(UnaryOp::Relu)));
        let params = ChannelParams::bias_only(&bias);
        let dw = Depthwise::new(geom, isa, &w, params, relu, None);
        let pool = Pool::new(1).expect("worker threads start");
        let shape = format!("depthwise {ch} {k}x{k}/{stride} at {side}x{side}");
        c.bench_function(&format!("{shape} (1t)"), |b| {
            pool.install(|| b.iter(|| dw.run(&x, None, &mut y)))
        });
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(1));
    targets = conv_kernels, depthwise_kernels
}
criterion_main!(benches);
