//! The pooling, matrix and gather kernels against the reference executor or
//! a plain loop.

use crate::graph::{DType, Graph, Op, Tensor, TensorData, ValueRef, ValueType, Window};
use crate::layout::Layout;
use crate::runtime::kernels::gather::Gather;
use crate::runtime::kernels::matmul::Dense;
use crate::runtime::test_support::{
    after_pointwise_conv, assert_close, available_isas, compile_on, compiled_per_isa, planned_for,
    Rng, FAMILIES,
};
use crate::runtime::{CompiledModel, RuntimeOptions};

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
        for family in FAMILIES {
            let pg = planned_for(&g, family);
            for (isa, m) in compiled_per_isa(&pg) {
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
    use crate::graph::PoolKind;
    use crate::ops::Pool;
    use crate::runtime::kernels::pool::{pool, PoolGeom};
    use crate::runtime::kernels::simd::Lanes;
    let mut rng = Rng(23);
    let isas = available_isas();
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
                    counts: (vec![], vec![]),
                    integer_average: None,
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

/// TFLite's integer average pool (its reference kernel, in i64: the window's
/// integers summed, `(sum ± count / 2) / count` truncated, clamped) against
/// the pool kernel rounding onto the grid, exactly: windows of 2x2 and 3x3 at
/// strides 1 and 2 with uncounted padding, and global ones; channels
/// innermost and not; signed and unsigned grids, every ISA. Windows of four
/// integers tie one time in four, and a half-to-even mean misses half of
/// those.
#[test]
fn integer_average_pools_round_halves_away_from_zero_as_tflite() {
    use crate::graph::PoolKind;
    use crate::runtime::kernels::pool::{pool, IntegerAverage, PoolGeom};
    use crate::runtime::kernels::quantized::Grid;
    use crate::runtime::kernels::simd::Lanes;
    let mut rng = Rng(41);
    let grids = [
        (0.05, -3.0, -128.0, 127.0),
        (0.0235, 131.0, 0.0, 255.0),
        (0.5, 0.0, -128.0, 127.0),
    ];
    for case in 0..48 {
        let (scale, zero_point, min, max) = grids[case % 3];
        let grid = Grid {
            scale,
            zero_point,
            min,
            max,
        };
        let (h, w) = (rng.range(4, 9), rng.range(4, 11));
        let global = case % 8 == 7;
        let (k, stride, pad) = match global {
            true => ((h, w), 1, 0),
            false => (
                [(2, 2), (3, 3)][rng.below(2)],
                rng.range(1, 2),
                rng.below(2),
            ),
        };
        let (oh, ow) = (
            (h + 2 * pad - k.0) / stride + 1,
            (w + 2 * pad - k.1) / stride + 1,
        );
        let c = [1, 3, 16, 19][rng.below(4)];
        let q: Vec<i64> = (0..c * h * w)
            .map(|_| min as i64 + rng.below((max - min) as usize + 1) as i64)
            .collect();
        // q in NCHW order, element (channel, row, column).
        let at = |ch: usize, r: usize, col: usize| q[(ch * h + r) * w + col];
        let mut want = vec![0f32; c * oh * ow];
        for ch in 0..c {
            for (y, x) in (0..oh).flat_map(|y| (0..ow).map(move |x| (y, x))) {
                let taps = |o: usize, k: usize, extent: usize| {
                    let start = (o * stride) as isize - pad as isize;
                    (start.max(0) as usize)..((start + k as isize) as usize).min(extent)
                };
                let (rows, cols) = (taps(y, k.0, h), taps(x, k.1, w));
                let count = (rows.len() * cols.len()) as i64;
                let sum: i64 = rows
                    .flat_map(|r| cols.clone().map(move |col| (r, col)))
                    .map(|(r, col)| at(ch, r, col))
                    .sum();
                let rounded = match sum > 0 {
                    true => (sum + count / 2) / count,
                    false => (sum - count / 2) / count,
                };
                let clamped = rounded.clamp(min as i64, max as i64) as f32;
                want[(ch * oh + y) * ow + x] = (clamped - zero_point) * scale;
            }
        }
        let value = |v: i64| (v as f32 - zero_point) * scale;
        for (cb, channels_last) in [(1, false), (c, true)] {
            let x: Vec<f32> = match channels_last {
                false => q.iter().map(|&v| value(v)).collect(),
                true => (0..h * w * c)
                    .map(|i| value(at(i % c, i / c / w, i / c % w)))
                    .collect(),
            };
            for &isa in &available_isas() {
                let geom = PoolGeom {
                    kind: PoolKind::Avg,
                    skip_nan: true,
                    planes: c / cb,
                    cb,
                    h,
                    w,
                    oh,
                    ow,
                    k,
                    stride: (stride, stride),
                    dilation: (1, 1),
                    pad: (pad, pad),
                    pad_end: (pad, pad),
                    count_include_pad: false,
                    lanes: Lanes::One,
                    rows: vec![],
                    cols: vec![],
                    counts: (vec![], vec![]),
                    integer_average: IntegerAverage::new(grid, k.0 * k.1),
                }
                .for_isa(isa);
                assert!(geom.integer_average.is_some());
                let mut y = vec![f32::NAN; c * oh * ow];
                pool(&geom, &x, &mut y);
                for (i, &e) in want.iter().enumerate() {
                    let (ch, p) = (i / (oh * ow), i % (oh * ow));
                    let got = match channels_last {
                        false => y[i],
                        true => y[p * c + ch],
                    };
                    let what = format!("case {case} {grid:?} {h}x{w}x{c} k {k:?} {isa} {cb}");
                    assert_eq!(got, e, "{what}: channel {ch} pixel {p}");
                }
            }
        }
    }
}

#[test]
fn dense_matches_a_naive_product_for_every_isa() {
    let isas = available_isas();
    let mut rng = Rng(9);
    for case in 0..80 {
        // Up to 20 rows (full row tiles of 4 and 8, tails of every length
        // below) and 150 columns (panels of 1, 2 and 4 vectors, panel tails).
        let (m, k, n) = (rng.range(1, 20), rng.range(1, 50), rng.range(1, 150));
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

/// Layout transforms between plain, channels-last and channel-blocked
/// layouts (channels padded to the block or not), built from rows of the
/// layouts' offset tables: each output is the layout algebra's physical form
/// of the tensor, its padding the fill.
#[test]
fn layout_transforms_gather_like_the_layout_algebra() {
    let names = ["NCHW", "NHWC", "NCHW8c", "NCHW16c"];
    let mut rng = Rng(29);
    for shape in [vec![2, 20, 3, 5], vec![1, 3, 7, 1], vec![1, 16, 1, 9]] {
        let x = Tensor::from_f32(shape.clone(), rng.f32s(shape.iter().product()));
        for from in names {
            for to in names {
                let (lf, lt) = (Layout::parse(from).unwrap(), Layout::parse(to).unwrap());
                let xp = lf.to_physical(&x, 0.0).unwrap().to_f32();
                let g = Gather::new(&lf, &lt, &shape, -1.0).unwrap();
                let want = lt.to_physical(&x, -1.0).unwrap().to_f32();
                let mut y = vec![f32::NAN; want.len()];
                g.run(&[&xp], &mut y).unwrap();
                assert_eq!(y, want, "{from} -> {to} {shape:?}");
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
        // A relabelling (NCHW and NHWC of a 1x1 map) and a reshape of
        // row-major data: the identity.
        ("NCHW", vec![2, 24, 1, 1], "NHWC", vec![2, 24, 1, 1], true),
        ("NCHW", vec![2, 3, 4, 5], "NC", vec![2, 60], true),
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
        let g = Gather::from_sources(src.clone(), -2.0).unwrap();
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
        let g = Gather::from_inputs(src.clone(), &starts, -2.0).unwrap();
        y.fill(f32::NAN);
        g.run(&inputs, &mut y).unwrap();
        assert_eq!(y, want, "case {case}, inputs from {starts:?}");
        assert!(
            g.run(&inputs[1..], &mut y).is_err(),
            "case {case}: an input short"
        );
    }
}

/// A gather that copies its whole input, contiguous, among fill (a zero Pad
/// of whole channel blocks) places the input at its offset in the output,
/// and its fill alone writes every other element, reading no input; any
/// other gather places nothing.
#[test]
fn a_padding_gather_places_its_input_and_keeps_its_fill() {
    const PAD: u32 = u32::MAX;
    let n = 40_000;
    let (before, after) = (48_000, 70_000);
    let mut src = vec![PAD; before];
    src.extend(0..n as u32);
    src.extend(std::iter::repeat_n(PAD, after));
    let g = Gather::from_sources(src.clone(), 0.5).unwrap();
    assert_eq!(g.placed_input(n), Some(before));
    assert_eq!(g.placed_input(n + 1), None, "the input is longer");
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut want = vec![f32::NAN; src.len()];
    g.run(&[&x], &mut want).unwrap();
    // The input computed in place, then the fill around it.
    let mut y = vec![f32::NAN; src.len()];
    y[before..before + n].copy_from_slice(&x);
    let fill = g.fill_only();
    assert_eq!(fill.filled(), before + after);
    fill.run(&[], &mut y).unwrap();
    assert_eq!(y, want);
    // Part of the input, or the input out of order, is no placement.
    let last = n as u32 - 1;
    let part = src.iter().map(|&s| if s == last { PAD } else { s });
    let part = Gather::from_sources(part.collect(), 0.0).unwrap();
    assert_eq!(part.placed_input(n), None);
    let mut swapped = src.clone();
    swapped.swap(before, before + 1);
    assert_eq!(
        Gather::from_sources(swapped, 0.0).unwrap().placed_input(n),
        None
    );
}

/// Matrix products of two computed operands (attention's Q·Kᵀ and P·V) run as
/// one native step: batch axes broadcast either way, vector operands, a
/// constant right operand of rank 3, row-tile and panel tails, an empty
/// contraction, right operands narrower than a vector (dot products, over
/// several tasks of rows); each against the reference executor.
#[test]
fn batched_matmuls_match_the_reference_executor() {
    let cases: [(&[usize], &[usize], bool); 11] = [
        (&[2, 130, 70], &[2, 70, 1], false),
        // Attention heads of 16 and 24: one- and two-vector panels.
        (&[1, 4, 16, 16], &[1, 4, 16, 16], false),
        (&[3, 13, 24], &[3, 24, 24], false),
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

/// GatherND by run-time int32 tuples, with and without batch axes, whole
/// slices and single elements, negative indices among them, against the
/// reference executor; a tuple outside the data is an error naming the node.
#[test]
fn tuple_gathers_by_runtime_indices_match_the_reference_executor() {
    let cases: [(&[usize], &[usize], usize); 4] = [
        (&[5, 4, 3], &[6, 2], 0),
        (&[5, 4, 3], &[2, 3, 3], 0),
        (&[2, 6, 3], &[2, 4, 1], 1),
        (&[7], &[3, 1], 0),
    ];
    let mut rng = Rng(31);
    for (shape, index_shape, batch_dims) in cases {
        let what = format!("{shape:?} by {index_shape:?}, batch_dims {batch_dims}");
        let mut g = Graph::new("gather_nd");
        let x_ty = ValueType::new(DType::F32, shape.to_vec());
        let x = g.add_input("x", x_ty.clone(), vec![]);
        let i_ty = ValueType::new(DType::I32, index_shape.to_vec());
        let i = g.add_input("i", i_ty.clone(), vec![]);
        let op = Op::GatherNd(crate::ops::GatherNd { batch_dims });
        let span = vec![crate::core::Span::new("g.onnx", "pick", "GatherND", 0)];
        let y = g.add_node(op, "pick", &[x, i], &[], span).unwrap();
        g.set_outputs(vec![ValueRef::new(y, 0)]);
        let m = compile_on(2, &g);
        // Each tuple element indexes the data axis after the batch axes.
        let k = index_shape[index_shape.len() - 1];
        let extent = |n: usize| shape[batch_dims + n % k] as i64;
        let indices: Vec<i32> = (0..i_ty.numel())
            .map(|n| (rng.below(2 * extent(n) as usize) as i64 - extent(n)) as i32)
            .collect();
        let inputs = [
            Tensor::from_f32(shape.to_vec(), rng.f32s(x_ty.numel())),
            Tensor::new(index_shape.to_vec(), TensorData::I32(indices)),
        ];
        let expected = crate::reference::run(&g, &inputs).unwrap();
        let got = m.run(&inputs).unwrap();
        assert_eq!(got[0].shape, expected[0].shape, "{what}");
        assert_close(&got[0].f32s(), &expected[0].f32s(), &what);
        let mut bad = inputs.clone();
        let too_far = vec![shape[batch_dims] as i32; i_ty.numel()];
        bad[1] = Tensor::new(index_shape.to_vec(), TensorData::I32(too_far));
        let e = m.run(&bad).unwrap_err().to_string();
        assert!(
            e.contains("pick") && e.contains("out of range"),
            "{what}: {e}"
        );
    }
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
