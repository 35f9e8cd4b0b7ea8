//! The qs8 SIMD kernels against the scalar loops (exact integer sums and the same
//! requantization, so the same bits).

use super::Requant;
use super::conv::Geometry;
use super::vnni::{Gemm, SLOTS, available, depth, folded_bias, pack, run, scratch_per_task};
use etch_kernels::conv::nhwc::NhwcShape;

/// Deterministic pseudo-random int8 values in `[lo, hi)`.
fn int8s(n: usize, seed: u32, lo: i32, hi: i32) -> Vec<i8> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (lo + (s >> 8) as i32 % (hi - lo)) as i8
        })
        .collect()
}

/// The packed kernel against the scalar one, on one and two threads.
fn check(shape: NhwcShape, x_zp: i32, out: Requant) {
    let g = Geometry {
        shape,
        groups: 1,
        gic: shape.c,
        x_zp,
    };
    let (n, k) = (shape.co, shape.kernel[0] * shape.kernel[1] * shape.c);
    let x = int8s(shape.in_len().unwrap(), 1, -128, 128);
    let w = int8s(n * k, 2, -127, 128);
    let bias: Vec<i32> = int8s(n, 3, -128, 128)
        .iter()
        .map(|&v| v as i32 * 97)
        .collect();
    let scales: Vec<f32> = (0..n).map(|i| 1e-3 + i as f32 * 3.7e-5).collect();
    let mut want = vec![0i8; shape.out_len().unwrap()];
    let how = (false, false);
    super::conv::reference(g, &x, &w, &bias, &scales, out, &mut want, how).unwrap();
    let k4 = depth(&g);
    let mut padded = vec![0i8; n * k4];
    for (d, s) in padded.chunks_exact_mut(k4).zip(w.chunks_exact(k)) {
        d[..k].copy_from_slice(s);
    }
    let panels = pack(&g, &padded, n, k4);
    let folded = folded_bias(&g, &w, k, &bias);
    let gemm = Gemm {
        w: &panels,
        bias: &folded,
        scales: &scales,
        k4,
        n,
        out,
    };
    for threads in [1, 2] {
        etch_kernels::threads::set_num_threads(threads);
        let mut scratch = vec![0i8; SLOTS * scratch_per_task(&g)];
        let mut got = vec![0i8; want.len()];
        run(&g, &gemm, &x, &mut scratch, &mut got).unwrap();
        assert_eq!(got, want, "{shape:?} on {threads} threads");
    }
    etch_kernels::threads::set_num_threads(0);
}

#[test]
fn packed_products_give_the_scalar_bits() {
    if !available() {
        return;
    }
    let shape = |h, c, co, k, s, p, d| NhwcShape {
        n: 2,
        h,
        w: h + 2,
        c,
        oh: (h + 2 * p - d * (k - 1) - 1) / s + 1,
        ow: (h + 2 + 2 * p - d * (k - 1) - 1) / s + 1,
        co,
        kernel: [k, k],
        stride: [s, s],
        pad: [p, p],
        dil: [d, d],
    };
    let relu = Requant {
        zp: -7,
        lo: -7,
        hi: 127,
    };
    let full = Requant {
        zp: 3,
        lo: -128,
        hi: 127,
    };
    // A stem (3 channels, depth 27 -> 28), strided and padded.
    check(shape(11, 3, 21, 3, 2, 1, 1), -10, full);
    // 1x1 of stride 1 on the input rows (direct), 3 panels and a tail.
    check(shape(5, 16, 40, 1, 1, 0, 1), 5, relu);
    // Dilated, odd channels (gathered), more than 8 rows a tile.
    check(shape(9, 7, 33, 3, 1, 2, 2), 0, relu);
    // 1x1 of stride 2 (indirect).
    check(shape(8, 8, 16, 1, 2, 0, 1), -128, full);
    // 3x3 over channels a multiple of 4 (indirect), padded, strided, dilated.
    check(shape(9, 12, 40, 3, 1, 1, 1), 77, relu);
    check(shape(10, 8, 20, 3, 2, 1, 2), -1, full);
    // A 7x7 stem of 3 channels (gathered, whole kernel rows where inside).
    check(shape(12, 3, 16, 7, 2, 3, 1), 4, relu);
    // Windows packed by one byte permutation: 3 kernel rows of 15 bytes; 4 rows of 4.
    check(shape(9, 5, 24, 3, 1, 1, 1), 9, full);
    check(shape(10, 1, 17, 4, 2, 1, 1), -3, relu);
    // A classifier's one row (split by panels over threads), and 3 tiles of 40.
    let fc = |h, c, co| NhwcShape {
        n: 1,
        h,
        w: 1,
        c,
        oh: h,
        ow: 1,
        co,
        kernel: [1, 1],
        stride: [1, 1],
        pad: [0, 0],
        dil: [1, 1],
    };
    check(fc(1, 640, 1000), 6, full);
    check(fc(20, 320, 1296), -2, relu);
}

/// The AVX-512 depthwise pixel against the scalar loops: channel counts around the
/// 16-lane vectors and the 64-channel passes, strides, padding and dilation.
#[test]
fn depthwise_vectors_give_the_scalar_bits() {
    if !super::dw512::available() {
        return;
    }
    // (Up to 32 channels: four pixels a pass, the row's last ones one by one.)
    for (c, k, s, p, d) in [
        (8, 3, 1, 1, 1),
        (32, 3, 1, 1, 1),
        (20, 3, 2, 1, 2),
        (37, 3, 2, 1, 1),
        (80, 5, 1, 2, 1),
        (64, 3, 1, 2, 2),
    ] {
        let (h, w) = (9, 6);
        let shape = NhwcShape {
            n: 2,
            h,
            w,
            c,
            oh: (h + 2 * p - d * (k - 1) - 1) / s + 1,
            ow: (w + 2 * p - d * (k - 1) - 1) / s + 1,
            co: c,
            kernel: [k, k],
            stride: [s, s],
            pad: [p, p],
            dil: [d, d],
        };
        let g = Geometry {
            shape,
            groups: c,
            gic: 1,
            x_zp: -3,
        };
        let x = int8s(shape.in_len().unwrap(), 4, -128, 128);
        let wt = int8s(k * k * c, 5, -127, 128);
        let bias: Vec<i32> = (0..c as i32).map(|i| i * 311 - 5000).collect();
        let scales: Vec<f32> = (0..c).map(|i| 2e-3 + i as f32 * 1e-5).collect();
        let out = Requant {
            zp: 9,
            lo: 9,
            hi: 120,
        };
        let run = |simd| {
            let mut o = vec![0i8; shape.out_len().unwrap()];
            let how = (true, simd);
            super::conv::reference(g, &x, &wt, &bias, &scales, out, &mut o, how).unwrap();
            o
        };
        assert_eq!(run(true), run(false), "{shape:?}");
    }
}

/// The AVX-512 addition and quantization against the scalar loops, on every int8 pair
/// and on floats around the rounding points, the range's ends, NaN and infinities.
#[test]
fn elementwise_vectors_give_the_scalar_bits() {
    use super::binary::{AddParams, Operand};
    if !super::flat512::available() {
        return;
    }
    let a: Vec<i8> = (0..65536).map(|i| (i % 256) as u8 as i8).collect();
    let b: Vec<i8> = (0..65536).map(|i| (i / 256) as u8 as i8).collect();
    for (sa, sb, so) in [
        (0.02f32, 0.05f32, 0.03f32),
        (0.5, 0.001, 0.7),
        (1.0, -0.3, 0.4),
    ] {
        let p = AddParams::new((sa, -3), (sb, 17), so).unwrap();
        let r = Requant {
            zp: -11,
            lo: -11,
            hi: 100,
        };
        let want: Vec<i8> = a.iter().zip(&b).map(|(&x, &y)| p.apply(x, y, &r)).collect();
        let mut got = vec![0i8; a.len()];
        let (ra, rb) = (Operand::Run(&a), Operand::Run(&b));
        // SAFETY: the CPU has the features; one length.
        unsafe { super::flat512::add(ra, rb, &mut got[..], &p, &r) };
        assert_eq!(got, want, "{sa} {sb} {so}");
        // Products, with the scalar arithmetic.
        let scale = sa * sb.abs() / so;
        let want: Vec<i8> = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| r.apply(((x as i32 + 3) * (y as i32 - 17)) as f32 * scale))
            .collect();
        // SAFETY: as above.
        unsafe { super::flat512::mul(ra, rb, &mut got[..], (-3, 17), scale, &r) };
        assert_eq!(got, want, "product {sa} {sb} {so}");
        // One operand repeated.
        let want: Vec<i8> = a.iter().map(|&x| p.apply(x, -77, &r)).collect();
        // SAFETY: as above.
        unsafe { super::flat512::add(ra, Operand::Splat(-77), &mut got[..], &p, &r) };
        assert_eq!(got, want, "splat {sa} {sb} {so}");
    }
    let mut x: Vec<f32> = (-3000..3000).map(|i| i as f32 * 0.125 + 0.0625).collect();
    x.extend([
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1e30,
        -1e30,
        0.5,
        1.5,
        -2.5,
    ]);
    for (inv, zp) in [(1.0f32, 0), (7.3, -10), (0.01, 127), (123.0, -128)] {
        let mut want = vec![0i8; x.len()];
        super::quantize_run(&x, &mut want, inv, zp);
        let mut got = vec![0i8; x.len()];
        // SAFETY: as above.
        unsafe { super::flat512::quantize(&x, &mut got, inv, zp) };
        assert_eq!(got, want, "{inv} {zp}");
        // And back.
        let want: Vec<f32> = got.iter().map(|&q| (q as i32 - zp) as f32 * inv).collect();
        let mut back = vec![0f32; got.len()];
        // SAFETY: as above.
        unsafe { super::flat512::dequantize(&got, &mut back, inv, zp) };
        assert!(
            back.iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
    }
}

/// The AVX-512 max pooling pixel against the scalar loop (channel counts around the
/// 64-byte vectors, padding that leaves windows partly outside, a clamp).
#[test]
fn max_pooling_vectors_give_the_scalar_bits() {
    if !super::flat512::available() {
        return;
    }
    for (c, k, st, p) in [(3, 3, 2, 1), (64, 3, 2, 1), (100, 2, 2, 0), (130, 3, 1, 1)] {
        let (h, w) = (9, 7);
        let shape = NhwcShape {
            n: 2,
            h,
            w,
            c,
            oh: (h + 2 * p - k) / st + 1,
            ow: (w + 2 * p - k) / st + 1,
            co: c,
            kernel: [k, k],
            stride: [st, st],
            pad: [p, p],
            dil: [1, 1],
        };
        let g = Geometry {
            shape,
            groups: c,
            gic: 1,
            x_zp: 0,
        };
        let x = int8s(shape.in_len().unwrap(), 6, -128, 128);
        let r = Requant {
            zp: -20,
            lo: -20,
            hi: 90,
        };
        let run = |simd| {
            let mut o = vec![0i8; shape.out_len().unwrap()];
            super::pool::max_pool_run(&g, &x, &r, &mut o, simd).unwrap();
            o
        };
        assert_eq!(run(true), run(false), "{shape:?}");
    }
}

/// Times the VNNI products on mobilenet_v2's stem (3 -> 32 channels, 3x3, stride 2, at
/// 224²) and a 1×1 of 16 -> 96 channels at 112²: `cargo test --release -p etch-backends
/// --lib qs8_conv_speed -- --ignored --nocapture` (`ETCH_BENCH_THREADS`, default 1;
/// `ETCH_BENCH_ONLY=stem`: the shapes whose names contain it).
#[test]
#[ignore]
fn qs8_conv_speed() {
    if !available() {
        return;
    }
    let threads = std::env::var("ETCH_BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    etch_kernels::threads::set_num_threads(threads);
    let shapes = [
        ("stem 3->32 3x3/2 224", 224, 3, 32, 3, 2, 1),
        ("1x1 16->96 112", 112, 16, 96, 1, 1, 0),
        ("3x3 64->64 56", 56, 64, 64, 3, 1, 1),
        ("1x1 32->16 112", 112, 32, 16, 1, 1, 0),
        ("1x1 96->24 56", 56, 96, 24, 1, 1, 0),
        ("1x1 144->24 56", 56, 144, 24, 1, 1, 0),
        ("1x1 24->144 56", 56, 24, 144, 1, 1, 0),
        ("1x1 192->32 28", 28, 192, 32, 1, 1, 0),
        ("1x1 320->1280 7", 7, 320, 1280, 1, 1, 0),
        ("1x1 160->960 7", 7, 160, 960, 1, 1, 0),
        ("1x1 960->160 7", 7, 960, 160, 1, 1, 0),
        ("1x1 64->384 14", 14, 64, 384, 1, 1, 0),
        ("1x1 384->64 14", 14, 384, 64, 1, 1, 0),
    ];
    let only = std::env::var("ETCH_BENCH_ONLY").unwrap_or_default();
    for (name, h, c, co, k, st, p) in shapes {
        if !name.contains(only.as_str()) {
            continue;
        }
        let shape = NhwcShape {
            n: 1,
            h,
            w: h,
            c,
            oh: (h + 2 * p - k) / st + 1,
            ow: (h + 2 * p - k) / st + 1,
            co,
            kernel: [k, k],
            stride: [st, st],
            pad: [p, p],
            dil: [1, 1],
        };
        let g = Geometry {
            shape,
            groups: 1,
            gic: c,
            x_zp: -5,
        };
        let kk = k * k * c;
        let k4 = depth(&g);
        let x = int8s(shape.in_len().unwrap(), 1, -128, 128);
        let w = int8s(co * kk, 2, -127, 128);
        let mut padded = vec![0i8; co * k4];
        for (d, s) in padded.chunks_exact_mut(k4).zip(w.chunks_exact(kk)) {
            d[..kk].copy_from_slice(s);
        }
        let panels = pack(&g, &padded, co, k4);
        let bias = folded_bias(&g, &w, kk, &vec![0; co]);
        let scales = vec![1e-3f32; co];
        let gemm = Gemm {
            w: &panels,
            bias: &bias,
            scales: &scales,
            k4,
            n: co,
            out: Requant {
                zp: 0,
                lo: -128,
                hi: 127,
            },
        };
        let mut scratch = vec![0i8; SLOTS * scratch_per_task(&g)];
        let mut o = vec![0i8; shape.out_len().unwrap()];
        let mut best = f64::MAX;
        for _ in 0..200 {
            let t = std::time::Instant::now();
            run(&g, &gemm, &x, &mut scratch, &mut o).unwrap();
            best = best.min(t.elapsed().as_secs_f64());
        }
        let macs = (shape.out_len().unwrap() * kk) as f64;
        println!(
            "{name}: {:.1} us, {:.1} GMAC/s ({threads} threads)",
            best * 1e6,
            macs / best / 1e9
        );
    }
    etch_kernels::threads::set_num_threads(0);
}

/// The AVX-512 VBMI table lookup against the scalar one: every byte, a ragged tail.
#[test]
fn table_lookups_give_the_scalar_bytes() {
    if !super::flat512::vbmi_available() {
        return;
    }
    let t: [i8; 256] = std::array::from_fn(|k| (k as u8).wrapping_mul(37).wrapping_add(11) as i8);
    let x: Vec<i8> = (0..1000).map(|k| (k * 7 % 256) as u8 as i8).collect();
    let want: Vec<i8> = x.iter().map(|&v| t[v as u8 as usize]).collect();
    let mut got = vec![0i8; x.len()];
    // SAFETY: the CPU has the features; one length.
    unsafe { super::flat512::lut(&x, &t, &mut got) };
    assert_eq!(got, want);
}

/// The AVX-512 column sums of the mean against the scalar ones.
#[test]
fn column_sums_give_the_scalar_sums() {
    if !super::flat512::available() {
        return;
    }
    let x = int8s(97 * 83, 9, -128, 128);
    for len in [1, 16, 33, 64] {
        let (mut want, mut got) = (vec![0i32; len], vec![0i32; len]);
        super::pool::sum_columns(&x[5..], 90, 83, &mut want);
        // SAFETY: the CPU has the features; 90 rows of 83 from offset 5 are in range.
        unsafe { super::flat512::sum_columns(&x[5..], 90, 83, &mut got) };
        assert_eq!(got, want, "{len}");
    }
}
