use super::*;
use crate::conv::nhwc::{self, tests::Rng};
use std::sync::Mutex;

/// Serialises the tests here (they set the thread count).
static LOCK: Mutex<()> = Mutex::new(());

/// A 3×3 stride-1 convolution of `n` items of `h × w` pixels with padding `pad` (top and
/// left) and output `oh × ow`.
fn shape(
    n: usize,
    (h, w): (usize, usize),
    (c, co): (usize, usize),
    pad: [usize; 2],
    (oh, ow): (usize, usize),
) -> NhwcShape {
    NhwcShape {
        n,
        h,
        w,
        c,
        oh,
        ow,
        co,
        kernel: [3, 3],
        stride: [1, 1],
        pad,
        dil: [1, 1],
    }
}

/// The Winograd convolution on 1, 2 and 3 threads (the same bits asserted).
fn run(s: &NhwcShape, x: &[f32], packed: &[f32], (lo, hi): (f32, f32)) -> Vec<f32> {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut runs = Vec::new();
    for t in [1, 2, 3] {
        threads::set_num_threads(t);
        let mut out = vec![f32::NAN; s.out_len().unwrap()];
        conv_f32(s, x, packed, &mut out, lo, hi).unwrap();
        runs.push(out);
    }
    threads::set_num_threads(0);
    for r in &runs[1..] {
        assert!(
            r.iter()
                .zip(&runs[0])
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{s:?}: thread counts differ"
        );
    }
    runs.swap_remove(0)
}

#[test]
fn winograd_matches_the_sums() {
    let mut rng = Rng(21);
    for s in [
        shape(1, (8, 8), (32, 32), [1, 1], (8, 8)),
        shape(2, (7, 9), (48, 64), [1, 1], (7, 9)),
        shape(1, (6, 5), (32, 48), [0, 0], (4, 3)),
        shape(1, (5, 6), (64, 32), [2, 1], (7, 6)),
        shape(3, (3, 3), (32, 32), [1, 1], (3, 3)),
        shape(1, (30, 17), (32, 80), [1, 1], (30, 17)),
        // Fewer tiles than tasks: split by output channels too.
        shape(1, (4, 3), (256, 128), [1, 1], (4, 3)),
    ] {
        if !applies(&s) {
            return;
        }
        let (c, co) = (s.c, s.co);
        let x = rng.vec(s.in_len().unwrap());
        let w = rng.vec(co * 9 * c);
        let bias = rng.vec(co);
        let packed = pack(co, c, |j, r| w[j * 9 * c + r], Some(&bias)).unwrap();
        assert_eq!(packed.len(), packed_len(co, c).unwrap());
        let got = run(&s, &x, &packed, (-1.5, 1.5));
        let mut worst = 0f64;
        for b in 0..s.n {
            for oy in 0..s.oh {
                for ox in 0..s.ow {
                    for o in 0..co {
                        let (mut acc, mut mag) = (bias[o] as f64, bias[o].abs() as f64);
                        for t in 0..9 {
                            let iy = (oy + t / 3) as isize - s.pad[0] as isize;
                            let ix = (ox + t % 3) as isize - s.pad[1] as isize;
                            if iy < 0 || ix < 0 || iy >= s.h as isize || ix >= s.w as isize {
                                continue;
                            }
                            let px = ((b * s.h + iy as usize) * s.w + ix as usize) * c;
                            for ch in 0..c {
                                let p = x[px + ch] as f64 * w[o * 9 * c + t * c + ch] as f64;
                                acc += p;
                                mag += p.abs();
                            }
                        }
                        let want = acc.clamp(-1.5, 1.5);
                        let g = got[((b * s.oh + oy) * s.ow + ox) * co + o] as f64;
                        worst = worst.max((g - want).abs() / mag);
                        assert!(
                            (g - want).abs() <= 1e-6 * mag + 1e-7,
                            "{s:?} at {b} {oy} {ox} {o}: {g} vs {want}"
                        );
                    }
                }
            }
        }
        eprintln!("{s:?}: worst |error| / sum |terms| {worst:.2e}");
    }
}

#[test]
fn winograd_refuses_other_shapes_and_sizes() {
    let s = shape(1, (8, 8), (32, 32), [1, 1], (8, 8));
    if !applies(&s) {
        return;
    }
    let packed = pack(32, 32, |_, _| 0.5, None).unwrap();
    let x = vec![0f32; s.in_len().unwrap()];
    let mut out = vec![0f32; s.out_len().unwrap()];
    assert!(conv_f32(&s, &x[1..], &packed, &mut out, 0.0, 1.0).is_err());
    assert!(conv_f32(&s, &x, &packed[1..], &mut out, 0.0, 1.0).is_err());
    let mut strided = s;
    strided.stride = [2, 2];
    assert!(!applies(&strided));
    assert!(conv_f32(&strided, &x, &packed, &mut out, 0.0, 1.0).is_err());
    // An empty batch is nothing to do.
    let mut empty = s;
    empty.n = 0;
    conv_f32(&empty, &[], &packed, &mut [], 0.0, 1.0).unwrap();
    let mut odd = s;
    odd.c = 24;
    assert!(!applies(&odd));
    assert!(pack(32, 32, |_, _| 0.0, Some(&[0.0; 3])).is_none());
}

/// `cargo test --release -p etch-kernels --lib winograd_speed -- --ignored --nocapture`:
/// resnet's 3×3 stride-1 convolutions, direct ([`nhwc::conv_f32`]) and by Winograd, on
/// `ETCH_BENCH_THREADS` threads (1 by default).
#[test]
#[ignore]
fn winograd_speed() {
    let nt = std::env::var("ETCH_BENCH_THREADS").map_or(1, |v| v.parse().unwrap_or(1));
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    threads::set_num_threads(nt);
    let mut rng = Rng(9);
    for (hw, c) in [
        (56, 64),
        (28, 128),
        (14, 256),
        (7, 512),
        (32, 64),
        (16, 128),
        (8, 256),
        (4, 512),
    ] {
        // `ETCH_BENCH_ONLY=56`: that plane size only.
        if std::env::var("ETCH_BENCH_ONLY").is_ok_and(|v| v != hw.to_string()) {
            continue;
        }
        let s = shape(1, (hw, hw), (c, c), [1, 1], (hw, hw));
        if !applies(&s) {
            return;
        }
        let kk = 9 * c;
        let x = rng.vec(hw * hw * c);
        let w = rng.vec(c * kk);
        let bias = rng.vec(c);
        let direct = gemm512::pack_fc(c, kk, |j, r| w[j * kk + r], Some(&bias)).unwrap();
        let wino = pack(c, c, |j, r| w[j * kk + r], Some(&bias)).unwrap();
        let mut out = vec![0f32; hw * hw * c];
        let time = |f: &mut dyn FnMut()| {
            let mut best = f64::MAX;
            for _ in 0..5 {
                let t = std::time::Instant::now();
                for _ in 0..20 {
                    f();
                }
                best = best.min(t.elapsed().as_secs_f64() / 20.0);
            }
            best
        };
        let td = time(&mut || nhwc::conv_f32(&s, &x, &direct, &mut out, 0.0, 6.0).unwrap());
        let tw = time(&mut || conv_f32(&s, &x, &wino, &mut out, 0.0, 6.0).unwrap());
        let macs = (hw * hw * c * kk) as f64;
        println!(
            "{hw}x{hw}x{c}: direct {:.1} us ({:.1} GMAC/s), winograd {:.1} us ({:.2}x)",
            td * 1e6,
            macs / td / 1e9,
            tw * 1e6,
            td / tw
        );
    }
    threads::set_num_threads(0);
}
