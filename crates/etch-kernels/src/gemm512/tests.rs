//! Tests of the AVX-512F products: against f64 references, across thread counts and
//! modes, and (ignored) timing runs whose commands are in their doc comments.

use super::*;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn val(&mut self) -> f32 {
        (self.next() % 2001) as f32 / 1000.0 - 1.0
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.val()).collect()
    }
}

/// The convolution's scratch filled and the stride-2 gather scalar ([`fill_scratch`]).
pub(super) static OLD_PAD: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Turns the column tiles of direct planes off ([`cols_enabled`]).
pub(super) static NO_COLS: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Serialises this module's tests, which set the process-wide thread count (other
/// tests may still change it meanwhile: the results must not depend on it anyway).
static THREADS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The timing runs' thread count: `ETCH_BENCH_THREADS`, 1 by default.
fn bench_threads() -> usize {
    std::env::var("ETCH_BENCH_THREADS").map_or(1, |v| v.parse().unwrap_or(1))
}

/// Runs `f` with 1 and with 2 threads and checks the outputs are the same bits.
fn both_thread_counts(f: impl Fn() -> Vec<f32>) -> Vec<f32> {
    let _guard = THREADS.lock().unwrap_or_else(|e| e.into_inner());
    threads::set_num_threads(1);
    let one = f();
    threads::set_num_threads(2);
    let two = f();
    threads::set_num_threads(0);
    assert!(
        one.iter()
            .zip(&two)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "1 and 2 threads differ"
    );
    one
}

fn close(got: f32, want: f64, scale: f64) {
    assert!(
        (got as f64 - want).abs() <= 1e-5 * scale,
        "got {got}, want {want} (terms' magnitude {scale})"
    );
}

#[test]
fn fully_connected_matches_f64() {
    if !available() {
        return;
    }
    let mut rng = Rng(3);
    let dims = [
        1, 2, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 64, 65, 100, 129,
    ];
    for case in 0..120 {
        let (m, n, k) = (
            dims[rng.below(dims.len())],
            dims[rng.below(dims.len())],
            [0, 1, 3, 17, 64, 100, 333, 1000][rng.below(8)],
        );
        // Case 1: one row, split over two threads (the classifier of the mobilenets).
        let (m, n, k) = match case {
            0 => (300, 1100, 520),
            1 => (1, 1000, 1280),
            _ => (m, n, k),
        };
        let x = rng.vec(m * k);
        let w = rng.vec(n * k);
        let bias = if rng.below(2) == 0 {
            Some(rng.vec(n))
        } else {
            None
        };
        let (lo, hi) = if rng.below(3) == 0 {
            (-0.5, 0.75)
        } else {
            (f32::NEG_INFINITY, f32::INFINITY)
        };
        let packed = pack_fc(n, k, |j, kk| w[j * k + kk], bias.as_deref()).unwrap();
        let got = both_thread_counts(|| {
            let mut out = vec![f32::NAN; m * n];
            fully_connected(&x, m, k, &packed, n, &mut out, lo, hi).unwrap();
            out
        });
        for i in 0..m {
            for j in 0..n {
                let mut acc = bias.as_ref().map_or(0.0, |b| b[j] as f64);
                let mut scale = acc.abs();
                for kk in 0..k {
                    let t = x[i * k + kk] as f64 * w[j * k + kk] as f64;
                    acc += t;
                    scale += t.abs();
                }
                let want = acc.max(lo as f64).min(hi as f64);
                close(got[i * n + j], want, scale.max(1.0));
            }
        }
    }
}

#[test]
fn fully_connected_clamp_keeps_nan_and_checks_sizes() {
    if !available() {
        return;
    }
    let (m, n, k) = (3, 20, 5);
    let mut x = vec![1.0f32; m * k];
    x[k] = f32::NAN;
    let packed = pack_fc(n, k, |_, _| 1.0, None).unwrap();
    let mut out = vec![0f32; m * n];
    fully_connected(&x, m, k, &packed, n, &mut out, 0.0, 2.0).unwrap();
    assert!(out[..n].iter().all(|&v| v == 2.0));
    assert!(out[n..2 * n].iter().all(|v| v.is_nan()));
    assert!(fully_connected(&x, m + 1, k, &packed, n, &mut out, 0.0, 2.0).is_err());
    assert!(fully_connected(&x, m, k, &packed[1..], n, &mut out, 0.0, 2.0).is_err());
    assert!(fully_connected(&x, m, k, &packed, n, &mut out[1..], 0.0, 2.0).is_err());
}

/// A reference convolution in f64: (value, sum of the terms' magnitudes).
fn conv_ref(s: &ConvShape, x: &[f32], w: &[f32], bias: Option<&[f32]>) -> Vec<(f64, f64)> {
    let [kh, kw] = s.kernel;
    let co_all = s.groups * s.cout_g;
    let mut out = vec![(0.0, 0.0); s.n * s.os[0]];
    for b in 0..s.n {
        for co in 0..co_all {
            let g = co / s.cout_g;
            for y in 0..s.oh {
                for xo in 0..s.ow {
                    let mut acc = bias.map_or(0.0, |v| v[co] as f64);
                    let mut scale = acc.abs();
                    for ci in 0..s.cin_g {
                        for i in 0..kh {
                            for j in 0..kw {
                                let ih =
                                    (y * s.stride[0] + i * s.dil[0]) as isize - s.pad[0] as isize;
                                let iw =
                                    (xo * s.stride[1] + j * s.dil[1]) as isize - s.pad[1] as isize;
                                if ih < 0 || iw < 0 || ih as usize >= s.h || iw as usize >= s.w {
                                    continue;
                                }
                                let xv = x[b * s.xs[0]
                                    + (g * s.cin_g + ci) * s.xs[1]
                                    + ih as usize * s.xs[2]
                                    + iw as usize * s.xs[3]];
                                let t =
                                    xv as f64 * w[((co * s.cin_g + ci) * kh + i) * kw + j] as f64;
                                acc += t;
                                scale += t.abs();
                            }
                        }
                    }
                    out[b * s.os[0] + co * s.os[1] + y * s.ow + xo] = (acc, scale);
                }
            }
        }
    }
    out
}

/// A `kern`×`kern` convolution of `c` to `co` channels over an `hw`×`hw` NCHW plane,
/// stride `stride`, padding `kern / 2`.
fn square_conv(c: usize, co: usize, hw: usize, kern: usize, stride: usize) -> ConvShape {
    let pad = kern / 2;
    let o = (hw + 2 * pad - kern) / stride + 1;
    ConvShape {
        n: 1,
        groups: 1,
        cin_g: c,
        cout_g: co,
        h: hw,
        w: hw,
        xs: [c * hw * hw, hw * hw, hw, 1],
        oh: o,
        ow: o,
        os: [co * o * o, o * o],
        kernel: [kern, kern],
        stride: [stride, stride],
        pad: [pad, pad],
        dil: [1, 1],
    }
}

/// A 1×1 convolution of `c` to `co` channels over an `h`×`w` NCHW plane (direct tiles).
fn pointwise(c: usize, co: usize, h: usize, w: usize) -> ConvShape {
    ConvShape {
        n: 1,
        groups: 1,
        cin_g: c,
        cout_g: co,
        h,
        w,
        xs: [c * h * w, h * w, w, 1],
        oh: h,
        ow: w,
        os: [co * h * w, h * w],
        kernel: [1, 1],
        stride: [1, 1],
        pad: [0, 0],
        dil: [1, 1],
    }
}

/// A direct 1×1 convolution of `c -> co` channels (at least 2) on `h × w` planes
/// against the same convolution of a channels-last input (im2col, 4-tile groups, no
/// columns; direct too on one-pixel planes): the same bits, at 1 and 2 threads, with a
/// clamp.
fn direct_matches_rows(rng: &mut Rng, (c, co, h, w): (usize, usize, usize, usize)) {
    let direct = pointwise(c, co, h, w);
    let rows = ConvShape {
        xs: [h * w * c, 1, w * c, c],
        ..direct
    };
    // One-pixel planes are direct whatever their strides (the channels are a run either
    // way); larger channels-last planes are not.
    assert!(direct.direct() && rows.direct() == (h * w == 1));
    let x = rng.vec(c * h * w);
    let mut xr = vec![0f32; c * h * w];
    for (i, v) in x.iter().enumerate() {
        xr[i % (h * w) * c + i / (h * w)] = *v;
    }
    let wt = rng.vec(co * c);
    let bias = rng.vec(co);
    let packed = pack_conv(
        1,
        co,
        c,
        |a, r| wt[a * c + r],
        Some(&bias),
        ConvLayout::Panels,
    )
    .unwrap();
    let run = |s: &ConvShape, x: &[f32]| {
        both_thread_counts(|| {
            let mut out = vec![0f32; co * h * w];
            conv2d(s, x, &packed, ConvLayout::Panels, &mut out, -0.5, 2.0).unwrap();
            out
        })
    };
    let (a, b) = (run(&direct, &x), run(&rows, &xr));
    let same = a.iter().zip(&b).all(|(a, b)| a.to_bits() == b.to_bits());
    assert!(same, "{c} -> {co} on {h}x{w}");
}

/// 1×1 convolutions whose output exceeds L2 run in grown tile groups
/// ([`direct_group`]); one or two blocks of terms, a partial last group.
#[test]
fn direct_grown_groups_match_im2col() {
    if !available() {
        return;
    }
    let mut rng = Rng(11);
    for (c, co, h, w) in [(16, 96, 112, 112), (300, 24, 150, 151), (3, 40, 120, 117)] {
        let s = pointwise(c, co, h, w);
        assert!(ConvPlan::new(&s, None, true).group > CONV_TILES);
        direct_matches_rows(&mut rng, (c, co, h, w));
    }
}

/// Direct planes with few tile groups split by panels on two threads
/// ([`ConvPlan`]`::by_panels`): mobilenet's 14² and 7² expansions, a one-pixel
/// squeeze-excitation convolution.
#[test]
fn direct_by_panels_match_im2col() {
    if !available() {
        return;
    }
    let mut rng = Rng(13);
    for (c, co, h, w) in [
        (96, 576, 14, 14),
        (160, 960, 7, 7),
        (64, 384, 14, 14),
        (960, 240, 1, 1),
    ] {
        let s = pointwise(c, co, h, w);
        {
            let _guard = THREADS.lock().unwrap_or_else(|e| e.into_inner());
            threads::set_num_threads(2);
            let p = ConvPlan::new(&s, None, true);
            threads::set_num_threads(0);
            assert!(p.by_panels && p.tasks == 2, "{c} -> {co} on {h}x{w}");
        }
        direct_matches_rows(&mut rng, (c, co, h, w));
    }
}

/// On two threads a single item's few tile groups are of near-equal size and even in
/// number ([`balanced_group`]): efficientnet's 16 -> 96 on 112² (392 tiles: groups of 98,
/// were 128, 128, 128 and 8) and 672 -> 112 on 14² (6 tiles: 3 and 3, were 4 and 2); the
/// outputs are the same bits as on one thread.
#[test]
fn direct_groups_split_evenly() {
    if !available() {
        return;
    }
    assert_eq!(balanced_group(392, 128, 1, 2), 98);
    assert_eq!(balanced_group(6, 4, 1, 2), 3);
    assert_eq!(balanced_group(6, 4, 1, 1), 4);
    assert_eq!(balanced_group(100, 4, 1, 2), 4);
    assert_eq!(balanced_group(7, 4, 3, 2), 4);
    let mut rng = Rng(14);
    for (c, co, h, w) in [(16, 96, 112, 112), (672, 112, 14, 14)] {
        let s = pointwise(c, co, h, w);
        {
            let _guard = THREADS.lock().unwrap_or_else(|e| e.into_inner());
            threads::set_num_threads(2);
            let p = ConvPlan::new(&s, None, true);
            threads::set_num_threads(0);
            assert!(p.tasks == 2 && p.per_item.is_multiple_of(2), "{p:?}");
            assert!(p.tiles - (p.per_item - 1) * p.group <= p.group, "{p:?}");
            assert!(p.per_item * p.group - p.tiles < p.per_item, "{p:?}");
        }
        direct_matches_rows(&mut rng, (c, co, h, w));
    }
}

/// Direct planes of `16 k + 1` to `16 k + 4` pixels end in a column tile ([`cols`]):
/// 7×7, 14×14, one pixel (no pixel tile at all), several blocks of terms, partial
/// panels.
#[test]
fn direct_columns_match_im2col() {
    if !available() {
        return;
    }
    let mut rng = Rng(12);
    for (shape, cols) in [
        ((160, 20, 7, 7), 1),
        ((300, 9, 7, 7), 1),
        ((5, 17, 14, 14), 4),
        ((7, 8, 1, 1), 1),
        ((3, 33, 2, 2), 4),
        ((600, 5, 1, 3), 3),
        ((4, 16, 5, 4), 4),
        ((2, 3, 1, 17), 1),
        ((40, 12, 6, 3), 2),
    ] {
        let (c, co, h, w) = shape;
        let s = pointwise(c, co, h, w);
        assert_eq!(ConvPlan::new(&s, None, true).cols, cols);
        direct_matches_rows(&mut rng, shape);
    }
}

#[test]
fn conv2d_matches_f64() {
    if !available() {
        return;
    }
    let mut rng = Rng(5);
    for case in 0..120 {
        let kernel = [[1, 1], [3, 3], [1, 3], [5, 5], [7, 7]][rng.below(5)];
        // Every fourth case: stride 1 on rows of at least 24 outputs (indirect tiles).
        let wide = case % 4 == 1;
        let stride = if wide {
            [1, 1]
        } else {
            [[1, 1], [2, 2], [1, 2]][rng.below(3)]
        };
        let dil = if rng.below(4) == 0 { [2, 1] } else { [1, 1] };
        let pad = [rng.below(kernel[0] / 2 + 1), rng.below(kernel[1] / 2 + 1)];
        let groups = [1, 1, 1, 2, 3][rng.below(5)];
        let cin_g = [1, 2, 3, 8, 17, 300][rng.below(6)];
        // Many terms (several blocks), not too slow for the reference.
        let cin_g = if cin_g == 300 && kernel[0] * kernel[1] > 9 {
            40
        } else {
            cin_g
        };
        let cout_g = [1, 5, 8, 9, 16, 24, 33][rng.below(7)];
        let n = 1 + rng.below(2);
        let (h, w) = (
            kernel[0] * dil[0] + rng.below(20),
            kernel[1] * dil[1] + rng.below(40) + if wide { 24 } else { 0 },
        );
        let (h, w) = if case == 0 { (56, 56) } else { (h, w) };
        let oh = (h + 2 * pad[0] - dil[0] * (kernel[0] - 1) - 1) / stride[0] + 1;
        let ow = (w + 2 * pad[1] - dil[1] * (kernel[1] - 1) - 1) / stride[1] + 1;
        let c = groups * cin_g;
        // Contiguous NCHW, channels-last, or padded planes.
        let xs = match rng.below(3) {
            0 => [c * h * w, h * w, w, 1],
            1 => [h * w * c, 1, w * c, c],
            _ => [c * (h * w + 3), h * w + 3, w, 1],
        };
        let x = rng.vec(n * xs[0]);
        let co_all = groups * cout_g;
        let os = [co_all * oh * ow + rng.below(2), oh * ow];
        let kk = cin_g * kernel[0] * kernel[1];
        let wt = rng.vec(co_all * kk);
        let bias = if rng.below(2) == 0 {
            Some(rng.vec(co_all))
        } else {
            None
        };
        let s = ConvShape {
            n,
            groups,
            cin_g,
            cout_g,
            h,
            w,
            xs,
            oh,
            ow,
            os,
            kernel,
            stride,
            pad,
            dil,
        };
        let packed = pack_conv(
            groups,
            cout_g,
            kk,
            |co, r| wt[co * kk + r],
            bias.as_deref(),
            ConvLayout::Panels,
        )
        .unwrap();
        let (lo, hi) = if rng.below(3) == 0 {
            (0.0, 6.0)
        } else {
            (f32::NEG_INFINITY, f32::INFINITY)
        };
        let got = both_thread_counts(|| {
            let mut out = vec![0f32; n * os[0]];
            conv2d(&s, &x, &packed, ConvLayout::Panels, &mut out, lo, hi).unwrap();
            out
        });
        let want = conv_ref(&s, &x, &wt, bias.as_deref());
        for b in 0..n {
            for co in 0..co_all {
                for p in 0..oh * ow {
                    let o = b * os[0] + co * os[1] + p;
                    let (v, scale) = want[o];
                    close(got[o], v.max(lo as f64).min(hi as f64), scale.max(1.0));
                }
            }
        }
    }
}

/// Im2col tiles of at most 16 pixels (a 4×4 output: resnet18's last layers at 128²) give
/// the same bits as pixel tiles and the rows mode, with and without a clamp, over channel
/// counts that end in a single panel, and with terms split into blocks.
#[test]
fn small_plane_modes_agree() {
    if !available() {
        return;
    }
    let mut rng = Rng(5);
    let shapes = [
        (40, 48, 4, 1),
        (300, 24, 4, 1),
        (64, 32, 8, 2),
        (7, 16, 3, 1),
    ];
    for (cin, cout, hw, stride) in shapes {
        let s = square_conv(cin, cout, hw, 3, stride);
        let kk = cin * 9;
        let x = rng.vec(cin * hw * hw);
        let (wt, bias) = (rng.vec(cout * kk), rng.vec(cout));
        // Pairs where the channels allow (pixel tiles need them), else panels.
        let layout = match cout % 16 {
            0 => ConvLayout::Pairs,
            _ => ConvLayout::Panels,
        };
        let packed = pack_conv(1, cout, kk, |co, r| wt[co * kk + r], Some(&bias), layout).unwrap();
        for (lo, hi) in [(f32::MIN, f32::MAX), (0.0, 6.0)] {
            let run = |mode| {
                both_thread_counts(|| {
                    let mut out = vec![f32::NAN; cout * s.oh * s.ow];
                    let w = Weights::Packed(&packed, layout);
                    conv2d_with(&s, &x, w, &mut out, lo, hi, Some(mode)).unwrap();
                    out
                })
            };
            let want = run(Mode::Rows);
            assert!(want.iter().all(|v| !v.is_nan()));
            for mode in [Mode::Im2col, Mode::Pixels] {
                if mode == Mode::Pixels && layout == ConvLayout::Panels {
                    continue;
                }
                let got = run(mode);
                assert!(
                    got.iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{s:?} {mode:?}"
                );
            }
        }
    }
}

/// Phase planes (each indirect mode) against an im2col: the same bits, on
/// strides 1-3, dilation, padding, groups, channels-last and padded inputs, several
/// blocks of terms, a clamp, 1 and 2 threads.
#[test]
fn conv2d_phase_planes_match_im2col() {
    if !available() {
        return;
    }
    let mut rng = Rng(11);
    for case in 0..150 {
        let kernel = [[3, 3], [1, 3], [2, 2], [5, 5], [7, 7], [3, 1]][rng.below(6)];
        let stride = [[1, 1], [2, 2], [1, 2], [3, 3], [2, 1]][rng.below(5)];
        let dil = [[1, 1], [1, 1], [2, 1], [2, 3]][rng.below(4)];
        let pad = [rng.below(kernel[0] / 2 + 1), rng.below(kernel[1] / 2 + 1)];
        let groups = [1, 1, 2][rng.below(3)];
        let cin_g = [1, 3, 8, 40][rng.below(4)];
        let cout_g = [1, 8, 9, 24, 16, 48][rng.below(6)];
        let n = 1 + rng.below(2);
        let h = kernel[0] * dil[0] + rng.below(30);
        let w = kernel[1] * dil[1] + rng.below(60);
        let oh = (h + 2 * pad[0] - dil[0] * (kernel[0] - 1) - 1) / stride[0] + 1;
        let ow = (w + 2 * pad[1] - dil[1] * (kernel[1] - 1) - 1) / stride[1] + 1;
        let c = groups * cin_g;
        let xs = match case % 3 {
            0 => [c * h * w, h * w, w, 1],
            1 => [h * w * c, 1, w * c, c],
            _ => [c * (h * w + 3), h * w + 3, w, 1],
        };
        let x = rng.vec(n * xs[0]);
        let co_all = groups * cout_g;
        let os = [co_all * oh * ow, oh * ow];
        let kk = cin_g * kernel[0] * kernel[1];
        let wt = rng.vec(co_all * kk);
        let bias = rng.vec(co_all);
        let s = ConvShape {
            n,
            groups,
            cin_g,
            cout_g,
            h,
            w,
            xs,
            oh,
            ow,
            os,
            kernel,
            stride,
            pad,
            dil,
        };
        let pack = |layout| {
            pack_conv(
                groups,
                cout_g,
                kk,
                |co, r| wt[co * kk + r],
                Some(&bias),
                layout,
            )
        };
        let packed = pack(ConvLayout::Panels).unwrap();
        let pairs = pack(ConvLayout::Pairs).filter(|_| kernel != [1, 1]);
        let (lo, hi) = if case % 4 == 0 {
            (0.0, 6.0)
        } else {
            (f32::MIN, f32::MAX)
        };
        let run_in = |mode: Option<Mode>, weights| {
            both_thread_counts(|| {
                let mut out = vec![f32::NAN; n * os[0]];
                conv2d_with(&s, &x, weights, &mut out, lo, hi, mode).unwrap();
                out
            })
        };
        let run = |mode| run_in(mode, Weights::Packed(&packed, ConvLayout::Panels));
        let want = run(Some(Mode::Im2col));
        assert!(
            want.iter().all(|v| !v.is_nan()),
            "{s:?}: outputs not written"
        );
        if pairs.is_some() {
            let p = ConvPlan::new(&s, Some(Mode::Pixels), true);
            assert_eq!(p.mode, Mode::Pixels, "{s:?}");
        }
        // Pixel tiles need weights in pairs of panels; every mode runs on either layout.
        let modes = [
            None,
            Some(Mode::Rows),
            Some(Mode::Wide),
            Some(Mode::Im2col),
            Some(Mode::Pixels),
        ];
        let layouts = [Some(&packed), pairs.as_ref()];
        for (mode, (li, w)) in modes
            .into_iter()
            .flat_map(|m| layouts.iter().enumerate().map(move |l| (m, l)))
        {
            let Some(w) = w else { continue };
            let layout = [ConvLayout::Panels, ConvLayout::Pairs][li];
            let got = run_in(mode, Weights::Packed(w, layout));
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "{s:?} {mode:?} {layout:?}: element {i}: {a} vs {b}"
                );
            }
        }
    }
}

/// Weights packed chunk by chunk while the convolution runs (the portable kernel's
/// path) against weights packed at load: the same bits (packed ahead in several chunks,
/// or per unit on small planes; each mode, padded weight rows, bias or none, 1 and 2
/// threads).
#[test]
fn conv2d_unpacked_matches_packed() {
    if !available() {
        return;
    }
    let mut rng = Rng(13);
    for (case, &(cin, cout, hw, kern, stride)) in [
        (3, 16, 40, 7, 2),
        (300, 70, 9, 3, 1),
        (300, 70, 24, 3, 1),
        (64, 24, 30, 3, 1),
        (40, 9, 17, 3, 2),
        (600, 20, 4, 3, 1),
        (16, 33, 12, 1, 2),
        (16, 33, 12, 1, 1),
        // Direct planes ending in column tiles (one panel at a time when packed
        // lazily, several from packed weights).
        (300, 20, 7, 1, 1),
        (40, 9, 1, 1, 1),
    ]
    .iter()
    .enumerate()
    {
        let pad = kern / 2;
        let o = (hw + 2 * pad - kern) / stride + 1;
        let s = ConvShape {
            n: 1 + case % 2,
            groups: 1,
            cin_g: cin,
            cout_g: cout,
            h: hw,
            w: hw,
            xs: [cin * hw * hw, hw * hw, hw, 1],
            oh: o,
            ow: o,
            os: [cout * o * o, o * o],
            kernel: [kern, kern],
            stride: [stride, stride],
            pad: [pad, pad],
            dil: [1, 1],
        };
        let kk = s.kk();
        let x = rng.vec(s.n * s.xs[0]);
        // Weight rows `ld >= kk` apart.
        let ld = kk + case % 2 * 3;
        let wt = rng.vec(cout * ld);
        let wf = |co: usize, r: usize| wt[co * ld + r];
        let bias = (case % 3 != 0).then(|| rng.vec(cout));
        let packed = pack_conv(1, cout, kk, wf, bias.as_deref(), ConvLayout::Panels).unwrap();
        let want = both_thread_counts(|| {
            let mut out = vec![0f32; s.n * s.os[0]];
            conv2d(&s, &x, &packed, ConvLayout::Panels, &mut out, f32::MIN, 6.0).unwrap();
            out
        });
        let got = both_thread_counts(|| {
            let mut out = vec![0f32; s.n * s.os[0]];
            let b = bias.as_deref();
            conv2d_unpacked(&s, &x, &wt, ld, b, &mut out, f32::MIN, 6.0).unwrap();
            out
        });
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "{s:?}: element {i}: {a} vs {b}");
        }
    }
}

#[test]
fn conv2d_checks_sizes() {
    if !available() {
        return;
    }
    let s = ConvShape {
        n: 1,
        groups: 1,
        cin_g: 2,
        cout_g: 3,
        h: 4,
        w: 4,
        xs: [32, 16, 4, 1],
        oh: 4,
        ow: 4,
        os: [48, 16],
        kernel: [3, 3],
        stride: [1, 1],
        pad: [1, 1],
        dil: [1, 1],
    };
    let packed = pack_conv(1, 3, 18, |_, _| 1.0, None, ConvLayout::Panels).unwrap();
    let x = vec![1f32; 32];
    let mut out = vec![0f32; 48];
    assert!(
        conv2d(
            &s,
            &x,
            &packed,
            ConvLayout::Panels,
            &mut out,
            f32::NEG_INFINITY,
            f32::INFINITY
        )
        .is_ok()
    );
    assert_eq!(out[5], 18.0);
    assert!(conv2d(&s, &x[1..], &packed, ConvLayout::Panels, &mut out, 0.0, 1.0).is_err());
    assert!(conv2d(&s, &x, &packed, ConvLayout::Panels, &mut out[1..], 0.0, 1.0).is_err());
    let bad = ConvShape { oh: 5, ..s };
    assert!(conv2d(&bad, &x, &packed, ConvLayout::Panels, &mut out, 0.0, 1.0).is_err());
}

/// Throughput of the micro-kernels on shapes of the bench models (one thread):
/// `cargo test --release -p etch-kernels gemm512_speed -- --ignored --nocapture`.
#[test]
#[ignore]
fn gemm512_speed() {
    if !available() {
        return;
    }
    let _guard = THREADS.lock().unwrap_or_else(|e| e.into_inner());
    threads::set_num_threads(1);
    let mut rng = Rng(1);
    for (m, n, k) in [(128, 1536, 512), (128, 512, 1536), (128, 2048, 512)] {
        let x = rng.vec(m * k);
        let w = rng.vec(n * k);
        let packed = pack_fc(n, k, |j, kk| w[j * k + kk], None).unwrap();
        let mut out = vec![0f32; m * n];
        let t0 = std::time::Instant::now();
        let reps = 20;
        for _ in 0..reps {
            fully_connected(&x, m, k, &packed, n, &mut out, f32::MIN, f32::MAX).unwrap();
        }
        let dt = t0.elapsed().as_secs_f64() / reps as f64;
        println!(
            "fc {m}x{k} -> {n}: {:.3} ms, {:.1} GMAC/s",
            dt * 1e3,
            (m * n * k) as f64 / dt / 1e9
        );
    }
    for (c, co, hw, kern, stride) in [
        (64, 64, 56, 3, 1),
        (128, 128, 28, 3, 1),
        (256, 256, 14, 3, 1),
        (512, 512, 7, 3, 1),
        (32, 192, 28, 1, 1),
        (320, 1280, 7, 1, 1),
        (3, 64, 224, 7, 2),
        (576, 64, 56, 1, 1),
        (16, 96, 112, 1, 1),
        (96, 24, 56, 1, 1),
        (144, 24, 56, 1, 1),
        (960, 160, 7, 1, 1),
        (2304, 256, 14, 1, 1),
        (4608, 512, 7, 1, 1),
        (960, 240, 1, 1, 1),
        (672, 168, 1, 1, 1),
        (240, 960, 1, 1, 1),
    ] {
        let s = square_conv(c, co, hw, kern, stride);
        let o = s.oh;
        let kk = c * kern * kern;
        let x = rng.vec(c * hw * hw);
        let w = rng.vec(co * kk);
        let packed = pack_conv(1, co, kk, |a, r| w[a * kk + r], None, ConvLayout::Panels).unwrap();
        let mut out = vec![0f32; co * o * o];
        let reps = 20;
        let t0 = std::time::Instant::now();
        for _ in 0..reps {
            conv2d(
                &s,
                &x,
                &packed,
                ConvLayout::Panels,
                &mut out,
                f32::MIN,
                f32::MAX,
            )
            .unwrap();
        }
        let dt = t0.elapsed().as_secs_f64() / reps as f64;
        println!(
            "conv {c}->{co} {hw}x{hw} k{kern} s{stride}: {:.3} ms, {:.1} GMAC/s",
            dt * 1e3,
            (co * o * o * kk) as f64 / dt / 1e9
        );
    }
    threads::set_num_threads(0);
}

/// One-row products of the classifier heads (mobilenet_v3's 960 -> 1280 and 1280 -> 1000,
/// resnet18's 512 -> 1000), weights out of cache (copies past L3), against a plain read of
/// the same bytes: `cargo test --release -p etch-kernels fc_row_speed -- --ignored
/// --nocapture` (`ETCH_BENCH_THREADS` threads, 1 by default).
#[test]
#[ignore]
fn fc_row_speed() {
    if !available() {
        return;
    }
    let _guard = THREADS.lock().unwrap_or_else(|e| e.into_inner());
    threads::set_num_threads(bench_threads());
    let mut rng = Rng(1);
    for (k, n) in [(960, 1280), (1280, 1000), (512, 1000)] {
        let x = rng.vec(k);
        let w = rng.vec(n * k);
        let copies = (96 << 20) / (n * k * 4) + 1;
        let packed: Vec<Vec<f32>> = (0..copies)
            .map(|_| pack_fc(n, k, |j, kk| w[j * k + kk], None).unwrap())
            .collect();
        let mut out = vec![0f32; n];
        let (mut best, mut read) = (f64::MAX, f64::MAX);
        for _ in 0..5 {
            let t0 = std::time::Instant::now();
            for p in &packed {
                fully_connected(&x, 1, k, p, n, &mut out, f32::MIN, f32::MAX).unwrap();
            }
            best = best.min(t0.elapsed().as_secs_f64() / copies as f64);
            let t0 = std::time::Instant::now();
            let mut acc = [0f32; 16];
            for p in &packed {
                for c in p.chunks_exact(16) {
                    for (a, &v) in acc.iter_mut().zip(c) {
                        *a += v;
                    }
                }
            }
            std::hint::black_box(acc);
            read = read.min(t0.elapsed().as_secs_f64() / copies as f64);
        }
        let gb = |t: f64| (n * (k + 1) * 4) as f64 / t / 1e9;
        println!(
            "fc 1x{k} -> {n}: {:.1} us, {:.1} GB/s (a plain read: {:.1} us, {:.1} GB/s)",
            best * 1e6,
            gb(best),
            read * 1e6,
            gb(read)
        );
    }
    threads::set_num_threads(0);
}

/// mobilenet_v2's 1×1 convolutions at 224² (calls counted; ReLU6 on the expansions),
/// best of 200 calls: `cargo test --release -p etch-kernels pointwise_speed --
/// --ignored --nocapture` (`ETCH_BENCH_THREADS` threads, 1 by default).
#[test]
#[ignore]
fn pointwise_speed() {
    if !available() {
        return;
    }
    let _guard = THREADS.lock().unwrap_or_else(|e| e.into_inner());
    let nt = bench_threads();
    threads::set_num_threads(nt);
    let mut rng = Rng(1);
    let (mut total, mut macs) = (0.0, 0.0);
    for (c, co, hw, calls) in [
        (32, 16, 112, 1),
        (16, 96, 112, 1),
        (96, 24, 56, 1),
        (24, 144, 56, 2),
        (144, 24, 56, 1),
        (144, 32, 28, 1),
        (32, 192, 28, 3),
        (192, 32, 28, 2),
        (192, 64, 14, 1),
        (64, 384, 14, 4),
        (384, 64, 14, 3),
        (384, 96, 14, 1),
        (96, 576, 14, 3),
        (576, 96, 14, 2),
        (576, 160, 7, 1),
        (160, 960, 7, 3),
        (960, 160, 7, 2),
        (960, 320, 7, 1),
        (320, 1280, 7, 1),
    ] {
        let npix = hw * hw;
        let s = pointwise(c, co, hw, hw);
        let x = rng.vec(c * npix);
        let w = rng.vec(co * c);
        let bias = rng.vec(co);
        let packed = pack_conv(
            1,
            co,
            c,
            |a, r| w[a * c + r],
            Some(&bias),
            ConvLayout::Panels,
        )
        .unwrap();
        let mut out = vec![0f32; co * npix];
        let (lo, hi) = if co > c {
            (0.0, 6.0)
        } else {
            (f32::NEG_INFINITY, f32::INFINITY)
        };
        // Calls timed one by one, the best kept: a call is short enough to run
        // between two preemptions on a loaded machine.
        let mut best = f64::MAX;
        for _ in 0..200 {
            let t0 = std::time::Instant::now();
            conv2d(&s, &x, &packed, ConvLayout::Panels, &mut out, lo, hi).unwrap();
            best = best.min(t0.elapsed().as_secs_f64());
        }
        total += best * calls as f64;
        macs += (c * co * npix * calls) as f64;
        println!(
            "1x1 {c}->{co} {hw}x{hw} x{calls}: {:.1} us, {:.1} GMAC/s",
            best * 1e6,
            (c * co * npix) as f64 / best / 1e9
        );
    }
    println!(
        "total {:.3} ms, {:.1} GMAC/s",
        total * 1e3,
        macs / total / 1e9
    );
    threads::set_num_threads(0);
}

/// Column tiles on and off, call by call (best of 300 each), on mobilenet_v2's 1×1
/// convolutions with column tiles and squeeze-excitation ones: `cargo test --release -p
/// etch-kernels columns_speed -- --ignored --nocapture`.
#[test]
#[ignore]
fn columns_speed() {
    if !available() {
        return;
    }
    let _guard = THREADS.lock().unwrap_or_else(|e| e.into_inner());
    threads::set_num_threads(1);
    let mut rng = Rng(1);
    let mut total = [0.0; 2];
    for (c, co, hw, calls) in [
        (192, 64, 14, 1),
        (64, 384, 14, 4),
        (384, 64, 14, 3),
        (384, 96, 14, 1),
        (96, 576, 14, 3),
        (576, 96, 14, 2),
        (576, 160, 7, 1),
        (160, 960, 7, 3),
        (960, 160, 7, 2),
        (960, 320, 7, 1),
        (320, 1280, 7, 1),
        (96, 4, 1, 1),
        (4, 96, 1, 1),
        (1152, 48, 1, 1),
        (48, 1152, 1, 1),
    ] {
        let npix = hw * hw;
        let s = pointwise(c, co, hw, hw);
        let x = rng.vec(c * npix);
        let w = rng.vec(co * c);
        let packed = pack_conv(1, co, c, |a, r| w[a * c + r], None, ConvLayout::Panels).unwrap();
        let mut out = vec![0f32; co * npix];
        let mut best = [f64::MAX; 2];
        for _ in 0..300 {
            for (off, b) in best.iter_mut().enumerate() {
                NO_COLS.store(off == 1, std::sync::atomic::Ordering::Relaxed);
                let t0 = std::time::Instant::now();
                conv2d(&s, &x, &packed, ConvLayout::Panels, &mut out, 0.0, 6.0).unwrap();
                *b = b.min(t0.elapsed().as_secs_f64());
            }
        }
        NO_COLS.store(false, std::sync::atomic::Ordering::Relaxed);
        for (t, b) in total.iter_mut().zip(best) {
            *t += b * calls as f64;
        }
        println!(
            "1x1 {c}->{co} {hw}x{hw} x{calls}: columns {:.1} us, without {:.1} us ({:.3})",
            best[0] * 1e6,
            best[1] * 1e6,
            best[0] / best[1]
        );
    }
    println!(
        "total: columns {:.3} ms, without {:.3} ms ({:.3})",
        total[0] * 1e3,
        total[1] * 1e3,
        total[0] / total[1]
    );
    threads::set_num_threads(0);
}

/// Runs convolutions of stride 1 and 2 (phase planes, wide grids, im2col) with the
/// scratch filled and the scalar gather, then with scratch left as NaN by an earlier
/// loan and the block gather: the same bits, 1 and 2 threads.
#[test]
fn dirty_scratch_and_gather_match() {
    if !available() {
        return;
    }
    let mut rng = Rng(13);
    for (c, co, hw, kern, stride) in [
        (3, 32, 40, 3, 2),
        (5, 9, 37, 3, 2),
        (4, 16, 30, 3, 1),
        (3, 8, 41, 7, 2),
        (6, 10, 9, 3, 2),
        (2, 3, 70, 5, 1),
    ] {
        let pad = kern / 2;
        let o = (hw + 2 * pad - kern) / stride + 1;
        let s = ConvShape {
            n: 2,
            groups: 1,
            cin_g: c,
            cout_g: co,
            h: hw,
            w: hw,
            xs: [c * hw * hw, hw * hw, hw, 1],
            oh: o,
            ow: o,
            os: [co * o * o, o * o],
            kernel: [kern, kern],
            stride: [stride, stride],
            pad: [pad, pad],
            dil: [1, 1],
        };
        let kk = c * kern * kern;
        let x = rng.vec(2 * c * hw * hw);
        let w = rng.vec(co * kk);
        let packed = pack_conv(1, co, kk, |a, r| w[a * kk + r], None, ConvLayout::Panels).unwrap();
        let run = |old: bool| {
            both_thread_counts(|| {
                OLD_PAD.store(old, std::sync::atomic::Ordering::Relaxed);
                // Leave NaN in the pool's buffers.
                drop(crate::scratch::take(1 << 20, f32::NAN));
                let mut out = vec![0f32; 2 * co * o * o];
                conv2d(&s, &x, &packed, ConvLayout::Panels, &mut out, -1.0, 1.0).unwrap();
                OLD_PAD.store(false, std::sync::atomic::Ordering::Relaxed);
                out
            })
        };
        let (a, b) = (run(true), run(false));
        assert!(a.iter().zip(&b).all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}

/// The phase planes' fill and gather as before and as now, call by call (best of 300
/// each): `cargo test --release -p etch-kernels pad_speed -- --ignored --nocapture`
/// (`ETCH_BENCH_THREADS` threads, 1 by default).
#[test]
#[ignore]
fn pad_speed() {
    if !available() {
        return;
    }
    let _guard = THREADS.lock().unwrap_or_else(|e| e.into_inner());
    threads::set_num_threads(bench_threads());
    let mut rng = Rng(1);
    for (c, co, hw, kern, stride) in [
        (3, 32, 224, 3, 2),
        (3, 64, 224, 7, 2),
        (64, 64, 56, 3, 1),
        (64, 128, 56, 3, 2),
        (16, 16, 112, 3, 2),
    ] {
        let s = square_conv(c, co, hw, kern, stride);
        let o = s.oh;
        let kk = c * kern * kern;
        let x = rng.vec(c * hw * hw);
        let w = rng.vec(co * kk);
        let packed = pack_conv(1, co, kk, |a, r| w[a * kk + r], None, ConvLayout::Panels).unwrap();
        let mut out = vec![0f32; co * o * o];
        let mut best = [f64::MAX; 2];
        for _ in 0..300 {
            for (old, b) in best.iter_mut().enumerate() {
                OLD_PAD.store(old == 1, std::sync::atomic::Ordering::Relaxed);
                let t0 = std::time::Instant::now();
                conv2d(
                    &s,
                    &x,
                    &packed,
                    ConvLayout::Panels,
                    &mut out,
                    f32::MIN,
                    f32::MAX,
                )
                .unwrap();
                *b = b.min(t0.elapsed().as_secs_f64());
            }
        }
        OLD_PAD.store(false, std::sync::atomic::Ordering::Relaxed);
        println!(
            "conv {c}->{co} {hw}x{hw} k{kern} s{stride}: now {:.1} us, before {:.1} us ({:.3})",
            best[0] * 1e6,
            best[1] * 1e6,
            best[0] / best[1]
        );
    }
    threads::set_num_threads(0);
}

/// resnet18's convolutions at 128² and 224², the weights of each cycled through
/// copies that do not fit the L3 cache together (as in the model, whose weights do not
/// either): `ETCH_BENCH_THREADS=1 cargo test --release -p etch-kernels
/// resnet18_conv_speed -- --ignored --nocapture`.
#[test]
#[ignore]
fn resnet18_conv_speed() {
    if !available() {
        return;
    }
    let _guard = THREADS.lock().unwrap_or_else(|e| e.into_inner());
    let nt = bench_threads();
    threads::set_num_threads(nt);
    let mut rng = Rng(1);
    let mut total = [0.0; 2];
    // `ETCH_BENCH_SHAPES="3,32,224,3,2;16,96,112,1,1"`: other shapes (channels in, out,
    // side, kernel, stride), one call each.
    let shapes: Option<Vec<_>> = std::env::var("ETCH_BENCH_SHAPES").ok().map(|v| {
        v.split(';')
            .map(|s| {
                let d: Vec<usize> = s.split(',').map(|n| n.trim().parse().unwrap()).collect();
                (d[0], d[1], d[2], d[3], d[4], 1)
            })
            .collect()
    });
    let resnet = [
        (3, 64, 128, 7, 2, 1),
        (64, 64, 32, 3, 1, 4),
        (64, 128, 32, 3, 2, 1),
        (64, 128, 32, 1, 2, 1),
        (128, 128, 16, 3, 1, 3),
        (128, 256, 16, 3, 2, 1),
        (128, 256, 16, 1, 2, 1),
        (256, 256, 8, 3, 1, 3),
        (256, 512, 8, 3, 2, 1),
        (256, 512, 8, 1, 2, 1),
        (512, 512, 4, 3, 1, 3),
        (3, 64, 224, 7, 2, 1),
        (64, 64, 56, 3, 1, 4),
        (64, 128, 56, 3, 2, 1),
        (128, 128, 28, 3, 1, 3),
        (128, 256, 28, 3, 2, 1),
        (256, 256, 14, 3, 1, 3),
        (256, 512, 14, 3, 2, 1),
        (512, 512, 7, 3, 1, 3),
    ];
    for (c, co, hw, kern, stride, calls) in shapes.unwrap_or(resnet.to_vec()) {
        let s = square_conv(c, co, hw, kern, stride);
        let o = s.oh;
        let kk = c * kern * kern;
        let x = rng.vec(c * hw * hw);
        let w = rng.vec(co * kk);
        let warm = std::env::var("ETCH_BENCH_WARM").is_ok();
        let copies = if warm {
            1
        } else {
            (48 << 20) / (co * kk * 4) + 1
        };
        // The layout the shape calls for [0], and panels (no pixel tiles) [1].
        let layouts = [conv_layout_for(&s), ConvLayout::Panels];
        let packed = layouts.map(|layout| {
            (0..copies)
                .map(|_| pack_conv(1, co, kk, |a, r| w[a * kk + r], None, layout).unwrap())
                .collect::<Vec<_>>()
        });
        // `ETCH_BENCH_COLD_IO`: inputs and outputs rotate through copies larger than L3,
        // as a network's activations come and go (else the same, warm, every call).
        let io = if std::env::var("ETCH_BENCH_COLD_IO").is_ok() {
            (48 << 20) / ((c * hw * hw + co * o * o) * 4) + 1
        } else {
            1
        };
        let xs: Vec<Vec<f32>> = (0..io).map(|_| x.clone()).collect();
        let mut outs: Vec<Vec<f32>> = (0..io).map(|_| vec![0f32; co * o * o]).collect();
        let reps = 30;
        // Best of 3 each way, interleaved.
        let mut best = [f64::MAX; 2];
        for _ in 0..3 {
            for (off, best) in best.iter_mut().enumerate() {
                let t0 = std::time::Instant::now();
                for rep in 0..reps {
                    let p = &packed[off][rep % copies];
                    let (x, out) = (&xs[rep % io], &mut outs[rep % io]);
                    conv2d(&s, x, p, layouts[off], out, f32::MIN, f32::MAX).unwrap();
                }
                *best = best.min(t0.elapsed().as_secs_f64() / reps as f64);
            }
        }
        for (t, b) in total.iter_mut().zip(best) {
            *t += b * calls as f64;
        }
        let rate = |b: f64| (co * o * o * kk) as f64 / b / 1e9;
        println!(
            "conv {c}->{co} {hw}x{hw} k{kern} s{stride} x{calls}: {:.3} ms, {:.1} GMAC/s ({:?}); without pixel tiles {:.3} ms, {:.1} GMAC/s",
            best[0] * 1e3,
            rate(best[0]),
            ConvPlan::new(&s, None, true).mode,
            best[1] * 1e3,
            rate(best[1]),
        );
    }
    println!(
        "total (both sizes, calls counted) {:.2} ms; without pixel tiles {:.2} ms",
        total[0] * 1e3,
        total[1] * 1e3
    );
    threads::set_num_threads(0);
}
