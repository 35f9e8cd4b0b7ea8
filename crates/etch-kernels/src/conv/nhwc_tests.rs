use super::*;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Forces the scalar loops (see `vector`).
pub(super) static SCALAR: AtomicBool = AtomicBool::new(false);
/// Serialises the tests here (they set the thread count and `SCALAR`).
static LOCK: Mutex<()> = Mutex::new(());

/// Uniform values in `[-1, 1)` (xorshift).
pub(in crate::conv) struct Rng(pub(in crate::conv) u64);
impl Rng {
    fn val(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    pub(in crate::conv) fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.val()).collect()
    }
}

#[allow(clippy::too_many_arguments)]
fn shape(
    n: usize,
    hw: usize,
    c: usize,
    co: usize,
    k: usize,
    st: usize,
    pad: usize,
    dil: usize,
) -> NhwcShape {
    let o = (hw + 2 * pad - dil * (k - 1) - 1) / st + 1;
    NhwcShape {
        n,
        h: hw,
        w: hw + 1,
        c,
        oh: o,
        ow: (hw + 1 + 2 * pad - dil * (k - 1) - 1) / st + 1,
        co,
        kernel: [k, k],
        stride: [st, st],
        pad: [pad, pad],
        dil: [dil, dil],
    }
}

/// The input element of tap `(i, j)` of output pixel `(b, oy, ox)`, channel `ch`, or
/// `None` in the padding.
fn tap(
    s: &NhwcShape,
    x: &[f32],
    (b, oy, ox): (usize, usize, usize),
    (i, j): (usize, usize),
    ch: usize,
) -> Option<f32> {
    let iy = (oy * s.stride[0] + i * s.dil[0]) as isize - s.pad[0] as isize;
    let ix = (ox * s.stride[1] + j * s.dil[1]) as isize - s.pad[1] as isize;
    if iy < 0 || ix < 0 || iy >= s.h as isize || ix >= s.w as isize {
        return None;
    }
    Some(x[((b * s.h + iy as usize) * s.w + ix as usize) * s.c + ch])
}

/// Runs `f` with the vector kernels (where the CPU has them) and the scalar loops, on one
/// and two threads: all four the same bits.
fn all_ways(f: impl Fn() -> Vec<f32>) -> Vec<f32> {
    all_ways_of(f, |a, b| a.to_bits() == b.to_bits())
}

/// [`all_ways`] for any element type, `same` comparing two elements.
fn all_ways_of<T>(f: impl Fn() -> Vec<T>, same: impl Fn(&T, &T) -> bool) -> Vec<T> {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut runs = Vec::new();
    for scalar in [false, true] {
        SCALAR.store(scalar, Ordering::Relaxed);
        for t in [1, 2] {
            threads::set_num_threads(t);
            runs.push(f());
        }
    }
    SCALAR.store(false, Ordering::Relaxed);
    threads::set_num_threads(0);
    for r in &runs[1..] {
        assert!(
            r.iter().zip(&runs[0]).all(|(a, b)| same(a, b)),
            "vector/scalar or thread counts differ"
        );
    }
    runs.swap_remove(0)
}

const SHAPES: [(usize, usize, usize, usize, usize, usize); 9] = [
    // (n, side, channels, kernel, stride, pad); dilation 1 unless below
    (1, 7, 16, 3, 1, 1),
    (2, 9, 96, 3, 2, 1),
    (1, 8, 24, 5, 1, 2),
    (1, 11, 130, 5, 2, 2),
    (1, 6, 3, 3, 1, 0),
    (2, 5, 72, 3, 1, 1),
    (1, 13, 40, 3, 2, 0),
    (1, 4, 64, 3, 1, 1),
    (1, 10, 20, 7, 3, 3),
];

#[test]
fn depthwise_matches_the_sums() {
    let mut rng = Rng(7);
    for (idx, &(n, hw, c, k, st, pad)) in SHAPES.iter().enumerate() {
        let dil = if idx == 2 { 2 } else { 1 };
        let s = shape(n, hw, c, c, k, st, pad.min(dil * (k - 1)), dil);
        let x = rng.vec(s.n * s.h * s.w * c);
        let w = rng.vec(k * k * c);
        let bias = (idx % 2 == 0).then(|| rng.vec(c));
        let (lo, hi) = if idx % 3 == 0 {
            (-0.5, 0.75)
        } else {
            (f32::NEG_INFINITY, f32::INFINITY)
        };
        let got = all_ways(|| {
            let mut out = vec![0f32; s.n * s.oh * s.ow * c];
            depthwise_f32(&s, &x, &w, bias.as_deref(), &mut out, lo, hi).unwrap();
            out
        });
        for b in 0..s.n {
            for oy in 0..s.oh {
                for ox in 0..s.ow {
                    for ch in 0..c {
                        // XNNPACK's order: the bias, then a fused multiply-add a tap.
                        let mut acc = bias.as_ref().map_or(0.0, |v| v[ch]);
                        for i in 0..k {
                            for j in 0..k {
                                if let Some(v) = tap(&s, &x, (b, oy, ox), (i, j), ch) {
                                    acc = v.mul_add(w[(i * k + j) * c + ch], acc);
                                }
                            }
                        }
                        let want = crate::conv::clamp_f32(acc, lo, hi);
                        let o = ((b * s.oh + oy) * s.ow + ox) * c + ch;
                        assert_eq!(got[o].to_bits(), want.to_bits(), "{s:?} at {o}");
                    }
                }
            }
        }
    }
}

#[test]
fn max_pool_matches_and_keeps_nan() {
    let mut rng = Rng(11);
    for &(n, hw, c, k, st, pad) in &SHAPES {
        let s = shape(n, hw, c, c, k, st, pad.min(k / 2), 1);
        let mut x = rng.vec(s.n * s.h * s.w * c);
        x[c + 1] = f32::NAN;
        let got = all_ways(|| {
            let mut out = vec![0f32; s.n * s.oh * s.ow * c];
            max_pool_f32(&s, &x, &mut out).unwrap();
            out
        });
        for b in 0..s.n {
            for oy in 0..s.oh {
                for ox in 0..s.ow {
                    for ch in 0..c {
                        let taps =
                            (0..k * k).filter_map(|t| tap(&s, &x, (b, oy, ox), (t / k, t % k), ch));
                        let want = taps.fold(f32::NEG_INFINITY, |m, v| {
                            if v.is_nan() || m.is_nan() {
                                f32::NAN
                            } else {
                                m.max(v)
                            }
                        });
                        let o = ((b * s.oh + oy) * s.ow + ox) * c + ch;
                        assert!(
                            got[o] == want || got[o].is_nan() && want.is_nan(),
                            "{s:?} at {o}: {} {want}",
                            got[o]
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn gathered_rows_give_the_copied_bits() {
    if !gemm512::avx512() {
        return;
    }
    let mut rng = Rng(21);
    // (channels, out, side, kernel, stride, pad, row dilation): borders on both sides,
    // kernels larger than the input (every pixel a border), stems of 3 channels, row
    // dilation, more output channels than a panel and a ragged last panel.
    for (c, co, hw, k, st, pad, dil) in [
        (3, 64, 23, 7, 2, 3, 1),
        (16, 40, 9, 3, 1, 1, 1),
        (8, 33, 2, 3, 1, 1, 1),
        (5, 48, 12, 5, 2, 2, 2),
        (32, 96, 7, 3, 1, 1, 1),
        (4, 16, 10, 3, 2, 0, 1),
    ] {
        let mut s = shape(2, hw, c, co, k, st, pad, 1);
        s.dil[0] = dil;
        s.oh = (hw + 2 * pad - dil * (k - 1) - 1) / st + 1;
        let kk = k * k * c;
        let x = rng.vec(s.n * s.h * s.w * c);
        let w = rng.vec(co * kk);
        let bias = rng.vec(co);
        let packed = gemm512::pack_fc(co, kk, |j, r| w[j * kk + r], Some(&bias)).unwrap();
        type Conv = fn(&NhwcShape, &[f32], &[f32], &mut [f32], f32, f32) -> Result<(), Refused>;
        let run = |f: Conv| {
            let out = all_ways(|| {
                let mut out = vec![0f32; s.n * s.oh * s.ow * co];
                f(&s, &x, &packed, &mut out, -2.0, 2.0).unwrap();
                out
            });
            out.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        };
        assert_eq!(run(conv_gathered), run(conv_copied), "{s:?}");
    }
}

#[test]
fn conv_matches_the_sums() {
    if !gemm512::available() {
        return;
    }
    let mut rng = Rng(3);
    for (c, co, hw, k, st, pad) in [
        (3, 32, 17, 3, 2, 1),
        (16, 40, 9, 3, 1, 1),
        (24, 8, 6, 1, 1, 0),
        (5, 48, 12, 7, 2, 3),
        (8, 16, 7, 1, 2, 0),
    ] {
        let s = shape(2, hw, c, co, k, st, pad, 1);
        let kk = k * k * c;
        let x = rng.vec(s.n * s.h * s.w * c);
        let w = rng.vec(co * kk);
        let bias = rng.vec(co);
        let packed = gemm512::pack_fc(co, kk, |j, r| w[j * kk + r], Some(&bias)).unwrap();
        let got = all_ways(|| {
            let mut out = vec![0f32; s.n * s.oh * s.ow * co];
            conv_f32(&s, &x, &packed, &mut out, -1.0, 1.0).unwrap();
            out
        });
        for b in 0..s.n {
            for oy in 0..s.oh {
                for ox in 0..s.ow {
                    for o in 0..co {
                        let (mut acc, mut mag) = (bias[o] as f64, bias[o].abs() as f64);
                        for t in 0..k * k {
                            for ch in 0..c {
                                if let Some(v) = tap(&s, &x, (b, oy, ox), (t / k, t % k), ch) {
                                    let p = v as f64 * w[o * kk + t * c + ch] as f64;
                                    acc += p;
                                    mag += p.abs();
                                }
                            }
                        }
                        let want = acc.clamp(-1.0, 1.0);
                        let g = got[((b * s.oh + oy) * s.ow + ox) * co + o] as f64;
                        assert!(
                            (g - want).abs() <= 1e-6 * mag + 1e-7,
                            "{s:?}: {g} vs {want}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn wrong_sizes_are_refused() {
    let s = shape(1, 5, 8, 8, 3, 1, 1, 1);
    let x = vec![0f32; 5 * 6 * 8];
    let mut out = vec![0f32; s.oh * s.ow * 8];
    assert!(depthwise_f32(&s, &x, &[0.0; 71], None, &mut out, 0.0, 1.0).is_err());
    assert!(depthwise_f32(&s, &x[1..], &[0.0; 72], None, &mut out, 0.0, 1.0).is_err());
    assert!(max_pool_f32(&s, &x, &mut out[1..]).is_err());
    let zero = NhwcShape {
        stride: [0, 1],
        ..s
    };
    assert!(max_pool_f32(&zero, &x, &mut out).is_err());
    assert!(depthwise_f32(&s, &x, &[0.0; 72], None, &mut out, 0.0, 1.0).is_ok());
}

/// `cargo test --release -p etch-kernels --lib nhwc_speed -- --ignored --nocapture`:
/// mobilenet_v2_224's depthwise layers and max pooling of resnet18_224, one thread.
#[test]
#[ignore]
fn nhwc_speed() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    threads::set_num_threads(1);
    let mut rng = Rng(5);
    for (hw, c, k, st) in [
        (112, 32, 3, 1),
        (112, 96, 3, 2),
        (56, 144, 3, 1),
        (56, 144, 3, 2),
        (28, 192, 3, 1),
        (14, 384, 3, 1),
        (7, 960, 3, 1),
        (112, 64, 3, 2),
    ] {
        let mut s = shape(1, hw, c, c, k, st, 1, 1);
        s.w = hw;
        s.ow = s.oh;
        let x = rng.vec(hw * hw * c);
        let w = rng.vec(k * k * c);
        let bias = rng.vec(c);
        let mut out = vec![0f32; s.oh * s.ow * c];
        let reps = 50;
        let mut best = [f64::MAX; 2];
        for _ in 0..5 {
            let t = std::time::Instant::now();
            for _ in 0..reps {
                depthwise_f32(&s, &x, &w, Some(&bias), &mut out, 0.0, 6.0).unwrap();
            }
            best[0] = best[0].min(t.elapsed().as_secs_f64() / reps as f64);
            let t = std::time::Instant::now();
            for _ in 0..reps {
                max_pool_f32(&s, &x, &mut out).unwrap();
            }
            best[1] = best[1].min(t.elapsed().as_secs_f64() / reps as f64);
        }
        println!(
            "{hw}x{hw}x{c} k{k} s{st}: depthwise {:.1} us ({:.1} GMAC/s), max pool {:.1} us",
            best[0] * 1e6,
            (s.oh * s.ow * c * k * k) as f64 / best[0] / 1e9,
            best[1] * 1e6
        );
    }
    threads::set_num_threads(0);
}

/// `cargo test --release -p etch-kernels --lib nhwc_conv_speed -- --ignored --nocapture`:
/// mobilenet_v2_224's stem and 1×1 convolutions and resnet18_224's convolutions on NHWC
/// tensors, one thread.
#[test]
#[ignore]
fn nhwc_conv_speed() {
    if !gemm512::available() {
        return;
    }
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    // `ETCH_BENCH_THREADS`: the thread count (1 by default).
    let nt = std::env::var("ETCH_BENCH_THREADS").map_or(1, |v| v.parse().unwrap_or(1));
    threads::set_num_threads(nt);
    let mut rng = Rng(9);
    for (hw, c, co, k, st) in [
        (224, 3, 32, 3, 2),
        (112, 16, 96, 1, 1),
        (112, 32, 16, 1, 1),
        (56, 24, 144, 1, 1),
        (7, 320, 1280, 1, 1),
        (14, 96, 576, 1, 1),
        (224, 3, 64, 7, 2),
        (56, 64, 64, 3, 1),
        (56, 64, 128, 3, 2),
        (28, 128, 128, 3, 1),
        (14, 256, 256, 3, 1),
        (7, 512, 512, 3, 1),
        (14, 256, 512, 1, 2),
    ] {
        let mut s = shape(1, hw, c, co, k, st, k / 2, 1);
        s.w = hw;
        s.ow = s.oh;
        let kk = k * k * c;
        // `ETCH_BENCH_COLD_IO`: inputs, outputs and weights rotate through copies larger
        // than L3, as a network's come and go.
        let copies = match std::env::var("ETCH_BENCH_COLD_IO") {
            Ok(_) => (64 << 20) / ((hw * hw * c + s.oh * s.ow * co + co * kk) * 4) + 1,
            Err(_) => 1,
        };
        let xs: Vec<Vec<f32>> = (0..copies).map(|_| rng.vec(hw * hw * c)).collect();
        let w = rng.vec(co * kk);
        let bias = rng.vec(co);
        let packs: Vec<Vec<f32>> = (0..copies)
            .map(|_| gemm512::pack_fc(co, kk, |j, r| w[j * kk + r], Some(&bias)).unwrap())
            .collect();
        let mut outs: Vec<Vec<f32>> = (0..copies).map(|_| vec![0f32; s.oh * s.ow * co]).collect();
        let reps = 20;
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t = std::time::Instant::now();
            for r in 0..reps {
                let i = r % copies;
                conv_f32(&s, &xs[i], &packs[i], &mut outs[i], 0.0, 6.0).unwrap();
            }
            best = best.min(t.elapsed().as_secs_f64() / reps as f64);
        }
        println!(
            "{hw}x{hw}x{c} -> {co} k{k} s{st}: {:.1} us ({:.1} GMAC/s)",
            best * 1e6,
            (s.oh * s.ow * co * kk) as f64 / best / 1e9
        );
    }
    threads::set_num_threads(0);
}

#[test]
fn planes_to_pixels_transposes() {
    let mut rng = Rng(13);
    // The last splits over threads (parts not multiples of 16 pixels).
    for (n, c, hw) in [
        (1, 3, 50),
        (2, 3, 64),
        (1, 4, 9),
        (1, 3, 7),
        (1, 3, 100_003),
    ] {
        let x = rng.vec(n * c * hw);
        let out = all_ways(|| {
            let mut out = vec![0f32; x.len()];
            planes_to_pixels_f32(n, c, hw, &x, &mut out).unwrap();
            out
        });
        for b in 0..n {
            for p in 0..hw {
                for ch in 0..c {
                    assert_eq!(out[(b * hw + p) * c + ch], x[(b * c + ch) * hw + p]);
                }
            }
        }
        let mut out = vec![0f32; x.len()];
        assert!(planes_to_pixels_f32(n, c, hw + 1, &x, &mut out).is_err());
        // The same for bytes (64 pixels a vector).
        let x: Vec<i8> = x.iter().map(|v| (v * 100.0) as i8).collect();
        let out = all_ways_of(
            || {
                let mut out = vec![0i8; x.len()];
                planes_to_pixels_i8(n, c, hw, &x, &mut out).unwrap();
                out
            },
            |a, b| a == b,
        );
        for b in 0..n {
            for p in 0..hw {
                for ch in 0..c {
                    assert_eq!(out[(b * hw + p) * c + ch], x[(b * c + ch) * hw + p]);
                }
            }
        }
    }
}

#[test]
fn global_avg_pool_is_the_mean() {
    let mut rng = Rng(17);
    // The last splits over threads (blocks of 32 channels, a partial one).
    for (n, hw, c) in [
        (1, 49, 1280),
        (2, 9, 20),
        (1, 196, 672),
        (1, 1, 3),
        (1, 784, 400),
    ] {
        let x = rng.vec(n * hw * c);
        let got = all_ways(|| {
            let mut out = vec![0f32; n * c];
            global_avg_pool_f32(n, hw, c, &x, &mut out).unwrap();
            out
        });
        for b in 0..n {
            for ch in 0..c {
                let sum = (0..hw).fold(0f32, |s, p| s + x[(b * hw + p) * c + ch]);
                assert_eq!(got[b * c + ch].to_bits(), (sum / hw as f32).to_bits());
            }
        }
    }
}
