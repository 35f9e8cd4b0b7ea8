//! The `llama::` custom-op kernels on hand-built arguments: cache updates, attention
//! against a plain reference, and typed errors for bad arguments. The programs exported
//! with ExecuTorch's exporter and checked against its runtime are in the root crate's
//! `tests/llama_ops.rs`.

mod env;

use env::*;

fn seq(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

#[test]
fn update_cache_writes_rows_at_start_pos() {
    let mut e = Env::default();
    // value [2, 2, 1, 3] into cache [2, 5, 1, 3] at position 2.
    let v: Vec<f32> = (1..=12).map(|x| x as f32).collect();
    let value = e.t(&v, &[2, 2, 1, 3]);
    let cache = e.t(&[0f32; 30], &[2, 5, 1, 3]);
    let pos = e.int(2);
    let out = e.out(ScalarType::Float, &[1]);
    e.run("llama::update_cache.out", &[value, cache, pos, out, out])
        .unwrap();
    let c = e.get::<f32>(cache);
    let mut want = vec![0f32; 30];
    want[6..12].copy_from_slice(&v[0..6]);
    want[21..27].copy_from_slice(&v[6..12]);
    assert_eq!(c, want);

    for (bad, code) in [
        (4, ErrorCode::InvalidArgument),
        (-1, ErrorCode::InvalidArgument),
    ] {
        let p = e.int(bad);
        let err = e
            .run("llama::update_cache.out", &[value, cache, p, out, out])
            .unwrap_err();
        assert_eq!(err.code(), code, "start_pos {bad}: {err}");
    }
    // Heads differ from the cache's.
    let wrong = e.t(&[0f32; 12], &[2, 1, 2, 3]);
    assert!(
        e.run("llama::update_cache.out", &[wrong, cache, pos, out, out])
            .is_err()
    );
    // dtype differs.
    let half = e.t(&[f16::from_f32(1.0); 12], &[2, 2, 1, 3]);
    assert!(
        e.run("llama::update_cache.out", &[half, cache, pos, out, out])
            .is_err()
    );
}

#[test]
fn update_cache_with_indices_scatters_rows() {
    let mut e = Env::default();
    let v: Vec<f32> = (1..=4).map(|x| x as f32).collect();
    let value = e.t(&v, &[1, 2, 1, 2]);
    let cache = e.t(&[0f32; 8], &[1, 4, 1, 2]);
    let pos = e.int(0);
    let idx = e.t(&[3i64, 0], &[1, 2]);
    let out = e.out(ScalarType::Float, &[1]);
    e.run(
        "llama::update_cache_with_indices.out",
        &[value, cache, pos, idx, out, out],
    )
    .unwrap();
    assert_eq!(
        e.get::<f32>(cache),
        vec![3.0, 4.0, 0.0, 0.0, 0.0, 0.0, 1.0, 2.0]
    );
    let bad = e.t(&[4i64, 0], &[1, 2]);
    assert!(
        e.run(
            "llama::update_cache_with_indices.out",
            &[value, cache, pos, bad, out, out],
        )
        .is_err()
    );
}

/// Attention of q [1, s, h, d] over caches [1, max, hk, d], in f64.
#[allow(clippy::too_many_arguments)]
fn reference(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    s: usize,
    h: usize,
    hk: usize,
    d: usize,
    max: usize,
    start: usize,
    causal: bool,
    scale: f64,
) -> Vec<f64> {
    let mut out = vec![0f64; s * h * d];
    for r in 0..s {
        for hi in 0..h {
            let kh = hi / (h / hk);
            let n = if causal { start + r + 1 } else { start + s };
            let sc: Vec<f64> = (0..n)
                .map(|j| {
                    (0..d)
                        .map(|x| q[(r * h + hi) * d + x] as f64 * k[(j * hk + kh) * d + x] as f64)
                        .sum::<f64>()
                        * scale
                })
                .collect();
            let mx = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let p: Vec<f64> = sc.iter().map(|x| (x - mx).exp()).collect();
            let sum: f64 = p.iter().sum();
            for x in 0..d {
                out[(r * h + hi) * d + x] = (0..n)
                    .map(|j| p[j] * v[(j * hk + kh) * d + x] as f64)
                    .sum::<f64>()
                    / sum;
            }
        }
    }
    let _ = max;
    out
}

#[test]
fn custom_sdpa_matches_reference_with_gqa() {
    let (h, hk, d, max) = (4, 2, 8, 12);
    let k = seq(max * hk * d, 1);
    let v = seq(max * hk * d, 2);
    for (s, start, causal, scale) in [
        (5, 0, true, None),
        (1, 5, true, None),
        (3, 6, true, Some(0.25)),
        (2, 4, false, None),
    ] {
        let mut e = Env::default();
        let q = seq(s * h * d, 3 + s as u32);
        let qi = e.t(&q, &[1, s, h, d]);
        let ki = e.t(&k, &[1, max, hk, d]);
        let vi = e.t(&v, &[1, max, hk, d]);
        let sp = e.int(start as i64);
        let none = e.none();
        let drop = e.dbl(0.0);
        let c = e.boolean(causal);
        let sc = match scale {
            Some(x) => e.dbl(x),
            None => e.none(),
        };
        let out = e.out(ScalarType::Float, &[1, s, h, d]);
        e.run(
            "llama::custom_sdpa.out",
            &[qi, ki, vi, sp, none, drop, c, sc, out, out],
        )
        .unwrap();
        let want = reference(
            &q,
            &k,
            &v,
            s,
            h,
            hk,
            d,
            max,
            start,
            causal,
            scale.unwrap_or(1.0 / (d as f64).sqrt()),
        );
        for (g, w) in e.getf(out).iter().zip(&want) {
            assert!((g - w).abs() < 1e-5, "s {s} start {start}: {g} vs {w}");
        }
    }
}

#[test]
fn custom_sdpa_rejects_bad_arguments() {
    let mut e = Env::default();
    let q = e.t(&seq(3 * 4, 1), &[1, 1, 3, 4]);
    let q4 = e.t(&seq(4 * 4, 1), &[1, 1, 4, 4]);
    let k = e.t(&seq(8 * 2 * 4, 2), &[1, 8, 2, 4]);
    let v = e.t(&seq(8 * 2 * 4, 3), &[1, 8, 2, 4]);
    let mask = e.t(&[0f32; 8], &[1, 8]);
    let (none, drop) = (e.none(), e.dbl(0.0));
    let (t, f) = (e.boolean(true), e.boolean(false));
    let (p0, p8) = (e.int(0), e.int(8));
    let out = e.out(ScalarType::Float, &[1, 1, 4, 4]);
    let run = |e: &mut Env, [q, p, m, c]: [u32; 4]| {
        e.run(
            "llama::custom_sdpa.out",
            &[q, k, v, p, m, drop, c, none, out, out],
        )
    };
    // 3 query heads over 2 KV heads.
    assert!(run(&mut e, [q, p0, none, t]).is_err());
    // start_pos past the cache.
    assert!(run(&mut e, [q4, p8, none, t]).is_err());
    // A mask together with is_causal.
    assert!(run(&mut e, [q4, p0, mask, t]).is_err());
    // A mask is fine without it.
    run(&mut e, [q4, p0, mask, f]).unwrap();
    // A mask that does not cover the cache.
    let short = e.t(&[0f32; 4], &[1, 4]);
    assert!(run(&mut e, [q4, p0, short, f]).is_err());
}

#[test]
fn sdpa_with_kv_cache_updates_then_attends() {
    let (s, h, hk, d, max, start) = (2, 2, 1, 4, 6, 3);
    let mut e = Env::default();
    let kc0 = seq(max * hk * d, 7);
    let vc0 = seq(max * hk * d, 8);
    let (q, kn, vn) = (seq(s * h * d, 9), seq(s * hk * d, 10), seq(s * hk * d, 11));
    let qi = e.t(&q, &[1, s, h, d]);
    let ki = e.t(&kn, &[1, s, hk, d]);
    let vi = e.t(&vn, &[1, s, hk, d]);
    let kc = e.t(&kc0, &[1, max, hk, d]);
    let vc = e.t(&vc0, &[1, max, hk, d]);
    let (sp, sl) = (e.int(start as i64), e.int(s as i64));
    let (none, drop, c) = (e.none(), e.dbl(0.0), e.boolean(true));
    let out = e.out(ScalarType::Float, &[1, s, h, d]);
    e.run(
        "llama::sdpa_with_kv_cache.out",
        &[qi, ki, vi, kc, vc, sp, sl, none, drop, c, none, out, out],
    )
    .unwrap();
    let (mut k, mut v) = (kc0.clone(), vc0.clone());
    k[start * d..(start + s) * d].copy_from_slice(&kn);
    v[start * d..(start + s) * d].copy_from_slice(&vn);
    assert_eq!(e.get::<f32>(kc), k);
    assert_eq!(e.get::<f32>(vc), v);
    let want = reference(&q, &k, &v, s, h, hk, d, max, start, true, 0.5);
    for (g, w) in e.getf(out).iter().zip(&want) {
        assert!((g - w).abs() < 1e-5, "{g} vs {w}");
    }
    // seq_len that disagrees with the query.
    let bad = e.int(1);
    assert!(
        e.run(
            "llama::sdpa_with_kv_cache.out",
            &[qi, ki, vi, kc, vc, sp, bad, none, drop, c, none, out, out],
        )
        .is_err()
    );
}

/// `custom_quantized_sdpa` and the per-token quantization ops on hand-built arguments:
/// a hand-computed case and typed errors (the values against ExecuTorch's runtime are in
/// the root crate's `tests/llama_ops.rs`).
#[test]
fn quantized_sdpa_and_per_token_ops() {
    let mut e = Env::default();
    // One query row, two keys (start_pos 1, causal): head_dim 2, one head.
    let q = e.t(&[2i8, 4], &[1, 1, 1, 2]);
    let k = e.t(&[1i8, 0, 3, 3, 0, 0], &[1, 3, 1, 2]);
    let v = e.t(&[10i8, 0, 0, 20, 0, 0], &[1, 3, 1, 2]);
    let qz = e.t(&[0i8], &[1, 1, 1, 1]);
    let qs = e.t(&[0.5f32], &[1, 1, 1, 1]);
    let kz = e.t(&[0i8, 1, 0], &[1, 3, 1, 1]);
    let ks = e.t(&[1.0f32, 0.25, 1.0], &[1, 3, 1, 1]);
    let vz = e.t(&[0i8, 0, 0], &[1, 3, 1, 1]);
    let vs = e.t(&[0.1f32, 0.05, 1.0], &[1, 3, 1, 1]);
    let (start, none, drop, causal, no) = (
        e.int(1),
        e.none(),
        e.dbl(0.0),
        e.boolean(true),
        e.boolean(false),
    );
    let out = e.out(ScalarType::Float, &[1, 1, 1, 2]);
    let args = |qz, qs, seq2, out| {
        [
            q, k, v, start, none, drop, causal, none, qz, qs, kz, ks, vz, vs, seq2, out, out,
        ]
    };
    e.run("llama::custom_quantized_sdpa.out", &args(qz, qs, no, out))
        .unwrap();
    // Scores: key 0: 0.5*1*(2*1 + 4*0) = 1; key 1: 0.5*0.25*(2*2 + 4*2) = 1.5; / sqrt(2).
    let (s0, s1) = (1.0f64 / 2f64.sqrt(), 1.5 / 2f64.sqrt());
    let (p0, p1) = ((s0 - s1).exp(), 1.0);
    let want = [
        (p0 * 1.0) / (p0 + p1),
        (p1 * 1.0) / (p0 + p1), // v0 = [1, 0], v1 = [0, 1]
    ];
    let got = e.getf(out);
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-6, "{got:?} vs {want:?}");
    }
    // Missing parameters, float query parameters of the wrong dtype, seq at dim 2.
    let err = e
        .run("llama::custom_quantized_sdpa.out", &args(none, qs, no, out))
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    let qs64 = e.t(&[0.5f64], &[1, 1, 1, 1]);
    let err = e
        .run("llama::custom_quantized_sdpa.out", &args(qz, qs64, no, out))
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    let yes = e.boolean(true);
    let err = e
        .run("llama::custom_quantized_sdpa.out", &args(qz, qs, yes, out))
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotSupported, "{err}");

    // Per-token: a row [-1, 0, 3] -> scale 4/255, zero point round(-128 + 255/4) = -64.
    let x = e.t(&[-1.0f32, 0.0, 3.0], &[1, 3]);
    let dt = e.int(1); // int8
    let s = e.out(ScalarType::Double, &[1, 1]);
    let z = e.out(ScalarType::Long, &[1, 1]);
    e.run(
        "quantized_decomposed::choose_qparams_per_token_asymmetric.out",
        &[x, dt, s, z, s, z],
    )
    .unwrap();
    assert_eq!(e.get::<f64>(s), vec![4.0 / 255.0]);
    assert_eq!(e.get::<i64>(z), vec![-64]);
    let (lo, hi) = (e.int(-128), e.int(127));
    let xq = e.out(ScalarType::Char, &[1, 3]);
    e.run(
        "quantized_decomposed::quantize_per_token.out",
        &[x, s, z, lo, hi, dt, xq, xq],
    )
    .unwrap();
    assert_eq!(e.get::<i8>(xq), vec![-128, -64, 127]);
    // A range wider than int8, too few scales, a float input of another dtype.
    let wide = e.int(200);
    code(
        e.run(
            "quantized_decomposed::quantize_per_token.out",
            &[x, s, z, lo, wide, dt, xq, xq],
        ),
        ErrorCode::InvalidArgument,
    );
    let x2 = e.t(&[0.0f32; 6], &[2, 3]);
    code(
        e.run(
            "quantized_decomposed::quantize_per_token.out",
            &[x2, s, z, lo, hi, dt, xq, xq],
        ),
        ErrorCode::InvalidArgument,
    );
    let xh = e.t(&[f16::from_f32(1.0); 3], &[1, 3]);
    assert!(
        e.run(
            "quantized_decomposed::choose_qparams_per_token_asymmetric.out",
            &[xh, dt, s, z, s, z],
        )
        .is_err()
    );
    let empty = e.t::<f32>(&[], &[1, 0]);
    code(
        e.run(
            "quantized_decomposed::choose_qparams_per_token_asymmetric.out",
            &[empty, dt, s, z, s, z],
        ),
        ErrorCode::InvalidArgument,
    );
}

#[test]
fn quantized_embeddings_dequantize_rows_and_reject_bad_arguments() {
    let mut e = Env::default();
    // 8-bit, per channel: rows [1, -2, 3, 4] * 0.5 and [-128, 127, 0, 2] * 0.25.
    let w = e.t(&[1i8, -2, 3, 4, -128, 127, 0, 2], &[2, 4]);
    let s = e.t(&[0.5f32, 0.25], &[2]);
    let no = e.none();
    let (lo, hi) = (e.int(-128), e.int(127));
    let idx = e.t(&[1i64, 0, 1], &[3]);
    let dt = e.int(6); // float32
    let out = e.out(ScalarType::Float, &[3, 4]);
    let op = "quantized_decomposed::embedding_byte.dtype_out";
    e.run(op, &[w, s, no, lo, hi, idx, dt, out, out]).unwrap();
    assert_eq!(
        e.get::<f32>(out),
        vec![
            -32.0, 31.75, 0.0, 0.5, 0.5, -1.0, 1.5, 2.0, -32.0, 31.75, 0.0, 0.5
        ]
    );
    // 4-bit, two groups of 2 with zero points: byte 0x9f is nibbles 9, 15 -> 1, 7.
    let w4 = e.t(&[0x9fu8, 0x08], &[1, 2]);
    let s4 = e.t(&[1.0f32, 0.5], &[1, 2]);
    let z4 = e.t(&[1.0f32, -2.0], &[1, 2]);
    let (lo4, hi4) = (e.int(-8), e.int(7));
    let idx0 = e.t(&[0i64], &[1, 1]);
    let out4 = e.out(ScalarType::Float, &[1, 1, 4]);
    let op4 = "quantized_decomposed::embedding_4bit.dtype_out";
    e.run(op4, &[w4, s4, z4, lo4, hi4, idx0, dt, out4, out4])
        .unwrap();
    assert_eq!(e.get::<f32>(out4), vec![0.0, 6.0, -3.0, 1.0]);
    // Out-of-range and negative indices, a 1-D weight, scales that do not fit, int32
    // indices, an out dtype other than `dtype`, an int8 weight for the 4-bit op.
    for bad in [2i64, -1] {
        let i = e.t(&[bad], &[1]);
        let o = e.out(ScalarType::Float, &[1, 4]);
        code(
            e.run(op, &[w, s, no, lo, hi, i, dt, o, o]),
            ErrorCode::InvalidArgument,
        );
    }
    let w1 = e.t(&[1i8; 8], &[8]);
    let s3 = e.t(&[1.0f32; 3], &[3]);
    let idx32 = e.t(&[0i32], &[1]);
    let dt16 = e.int(5); // float16
    for args in [
        [w1, s, no, lo, hi, idx, dt, out, out],
        [w, s3, no, lo, hi, idx, dt, out, out],
        [w, s, no, lo, hi, idx32, dt, out, out],
        [w, s, no, lo, hi, idx, dt16, out, out],
        [w, s, s3, lo, hi, idx, dt, out, out],
        [w, s, no, hi, lo, idx, dt, out, out],
    ] {
        code(e.run(op, &args), ErrorCode::InvalidArgument);
    }
    code(
        e.run(op4, &[w, s, no, lo4, hi4, idx, dt, out, out]),
        ErrorCode::InvalidArgument,
    );
    // The `.out` variant: no dtype argument.
    let o = e.out(ScalarType::Float, &[3, 4]);
    e.run(
        "quantized_decomposed::embedding_byte.out",
        &[w, s, no, lo, hi, idx, o, o],
    )
    .unwrap();
    assert_eq!(e.get::<f32>(o), e.get::<f32>(out));
}

/// A weight with no columns (found by the mutation test: the group size was 0 and the
/// kernel divided by it): the output has no values and nothing is read.
#[test]
fn quantized_embedding_of_an_empty_row_is_empty() {
    let mut e = Env::default();
    let w = e.t::<u8>(&[], &[2, 0]);
    let s = e.t(&[1.0f32, 1.0], &[2]);
    let no = e.none();
    let (lo, hi) = (e.int(-8), e.int(7));
    let idx = e.t(&[1i64, 0], &[2]);
    let dt = e.int(6);
    let out = e.out(ScalarType::Float, &[2, 0]);
    for op in [
        "quantized_decomposed::embedding_4bit.dtype_out",
        "quantized_decomposed::embedding_byte.dtype_out",
    ] {
        e.run(op, &[w, s, no, lo, hi, idx, dt, out, out]).unwrap();
        assert!(e.get::<f32>(out).is_empty(), "{op}");
    }
}

/// `start_pos` given as a one-element int64 tensor (what `etch lower` passes so that a
/// device kernel reads it on the device) gives the same results as the Int, for the cache
/// update and both attention ops; a tensor of another dtype or size, or an out-of-range
/// value read from it, is a typed error.
#[test]
fn start_pos_may_be_a_tensor() {
    let (s, h, hk, d, max, start) = (2, 4, 2, 8, 10, 5);
    let q = seq(s * h * d, 21);
    let k0 = seq(max * hk * d, 22);
    let v0 = seq(max * hk * d, 23);
    let (kn, vn) = (seq(s * hk * d, 24), seq(s * hk * d, 25));
    let mut results = Vec::new();
    for as_tensor in [false, true] {
        let mut e = Env::default();
        let pos = if as_tensor {
            e.t(&[start as i64], &[1])
        } else {
            e.int(start as i64)
        };
        let qi = e.t(&q, &[1, s, h, d]);
        let (ki, vi) = (e.t(&kn, &[1, s, hk, d]), e.t(&vn, &[1, s, hk, d]));
        let (kc, vc) = (e.t(&k0, &[1, max, hk, d]), e.t(&v0, &[1, max, hk, d]));
        let ph = e.out(ScalarType::Float, &[1]);
        e.run("llama::update_cache.out", &[ki, kc, pos, ph, ph])
            .unwrap();
        e.run("llama::update_cache.out", &[vi, vc, pos, ph, ph])
            .unwrap();
        let (none, drop, c, sl) = (e.none(), e.dbl(0.0), e.boolean(true), e.int(s as i64));
        let out = e.out(ScalarType::Float, &[1, s, h, d]);
        e.run(
            "llama::custom_sdpa.out",
            &[qi, kc, vc, pos, none, drop, c, none, out, out],
        )
        .unwrap();
        let out2 = e.out(ScalarType::Float, &[1, s, h, d]);
        e.run(
            "llama::sdpa_with_kv_cache.out",
            &[qi, ki, vi, kc, vc, pos, sl, none, drop, c, none, out2, out2],
        )
        .unwrap();
        results.push((e.getf(kc), e.getf(out), e.getf(out2)));
        if as_tensor {
            // Past the cache: read from the tensor, then rejected.
            let far = e.t(&[max as i64], &[1]);
            let err = e
                .run("llama::update_cache.out", &[ki, kc, far, ph, ph])
                .unwrap_err();
            assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
            let err = e
                .run(
                    "llama::custom_sdpa.out",
                    &[qi, kc, vc, far, none, drop, c, none, out, out],
                )
                .unwrap_err();
            assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
            for bad in [e.t(&[1i32], &[1]), e.t(&[1i64, 2], &[2])] {
                let err = e
                    .run("llama::update_cache.out", &[ki, kc, bad, ph, ph])
                    .unwrap_err();
                assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
            }
        }
    }
    assert_eq!(results[0], results[1]);
}

/// The gated delta rule in f64 (`llama::gated_delta_rule`, docs/OPS.md): q [b, hq, t, kd],
/// k [b, hs, t, kd], v [b, hs, t, vd], decay [b, hs, t(, kd)], beta [b, hs, t], state
/// [b, hs, kd, vd] (updated); returns out [b, hq, t, vd].
#[allow(clippy::too_many_arguments)]
fn gdr_reference(
    [q, k, v, decay, beta]: [&[f32]; 5],
    state: &mut [f64],
    [b, hq, hs, t, kd, vd]: [usize; 6],
    channelwise: bool,
) -> Vec<f64> {
    let g = hq / hs;
    let mut out = vec![0f64; b * hq * t * vd];
    for bi in 0..b {
        for h in 0..hs {
            let s = &mut state[(bi * hs + h) * kd * vd..(bi * hs + h + 1) * kd * vd];
            for ti in 0..t {
                let tok = (bi * hs + h) * t + ti;
                for i in 0..kd {
                    let d = if channelwise {
                        decay[tok * kd + i]
                    } else {
                        decay[tok]
                    };
                    for j in 0..vd {
                        s[i * vd + j] *= d as f64;
                    }
                }
                let kk = |i: usize| k[tok * kd + i] as f64;
                let delta: Vec<f64> = (0..vd)
                    .map(|j| {
                        let pred: f64 = (0..kd).map(|i| s[i * vd + j] * kk(i)).sum();
                        (v[tok * vd + j] as f64 - pred) * beta[tok] as f64
                    })
                    .collect();
                for i in 0..kd {
                    for j in 0..vd {
                        s[i * vd + j] += kk(i) * delta[j];
                    }
                }
                for qh in h * g..(h + 1) * g {
                    let row = (bi * hq + qh) * t + ti;
                    for j in 0..vd {
                        out[row * vd + j] = (0..kd)
                            .map(|i| s[i * vd + j] * q[row * kd + i] as f64)
                            .sum();
                    }
                }
            }
        }
    }
    out
}

#[test]
fn gated_delta_rule_matches_reference_for_any_thread_count() {
    for (dims, channelwise) in [
        ([1, 2, 2, 1, 5, 3], true),
        ([2, 8, 4, 20, 16, 16], false),
        ([2, 6, 3, 7, 7, 9], true),
    ] {
        let [b, hq, hs, t, kd, vd] = dims;
        let q = seq(b * hq * t * kd, 1);
        let k = seq(b * hs * t * kd, 2);
        let v = seq(b * hs * t * vd, 3);
        let dn = if channelwise {
            b * hs * t * kd
        } else {
            b * hs * t
        };
        let decay: Vec<f32> = seq(dn, 4).iter().map(|x| 0.7 + 0.3 * x).collect();
        let beta: Vec<f32> = seq(b * hs * t, 5).iter().map(|x| 0.5 + 0.5 * x).collect();
        let s0 = seq(b * hs * kd * vd, 6);
        let mut state: Vec<f64> = s0.iter().map(|&x| x as f64).collect();
        let want = gdr_reference([&q, &k, &v, &decay, &beta], &mut state, dims, channelwise);
        let mut first: Option<(Vec<f32>, Vec<f32>)> = None;
        for threads in [1, 4] {
            etch_kernels::threads::set_num_threads(threads);
            let mut e = Env::default();
            let qi = e.t(&q, &[b, hq, t, kd]);
            let ki = e.t(&k, &[b, hs, t, kd]);
            let vi = e.t(&v, &[b, hs, t, vd]);
            let di = if channelwise {
                e.t(&decay, &[b, hs, t, kd])
            } else {
                e.t(&decay, &[b, hs, t])
            };
            let bi = e.t(&beta, &[b, hs, t]);
            let si = e.t(&s0, &[b, hs, kd, vd]);
            let out = e.out(ScalarType::Float, &[b, hq, t, vd]);
            let fs = e.out(ScalarType::Float, &[b, hs, kd, vd]);
            // Run twice: the second run reuses the scratch and starts from the same state.
            for _ in 0..2 {
                e.run(
                    "llama::gated_delta_rule.out",
                    &[qi, ki, vi, di, bi, si, out, fs, out, fs],
                )
                .unwrap();
            }
            let (o, s) = (e.get::<f32>(out), e.get::<f32>(fs));
            for (got, want) in [(&o, &want), (&s, &state)] {
                for (i, (&g, &w)) in got.iter().zip(want.iter()).enumerate() {
                    assert!(
                        (g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()),
                        "{dims:?} element {i}: {g} vs {w}"
                    );
                }
            }
            match &first {
                None => first = Some((o, s)),
                Some(f) => assert!(f.0 == o && f.1 == s, "{dims:?}: thread counts differ"),
            }
        }
        etch_kernels::threads::set_num_threads(0);
    }
}

#[test]
fn gated_delta_rule_rejects_bad_arguments() {
    let mut e = Env::default();
    let (b, hq, hs, t, kd, vd) = (1, 4, 2, 3, 4, 5);
    let q = e.t(&seq(b * hq * t * kd, 1), &[b, hq, t, kd]);
    let k = e.t(&seq(b * hs * t * kd, 2), &[b, hs, t, kd]);
    let v = e.t(&seq(b * hs * t * vd, 3), &[b, hs, t, vd]);
    let d = e.t(&seq(b * hs * t, 4), &[b, hs, t]);
    let beta = e.t(&seq(b * hs * t, 5), &[b, hs, t]);
    let s = e.t(&seq(b * hs * kd * vd, 6), &[b, hs, kd, vd]);
    let out = e.out(ScalarType::Float, &[b, hq, t, vd]);
    let fs = e.out(ScalarType::Float, &[b, hs, kd, vd]);
    let run = |e: &mut Env, a: [u32; 6]| {
        let [q, k, v, d, beta, s] = a;
        e.run(
            "llama::gated_delta_rule.out",
            &[q, k, v, d, beta, s, out, fs, out, fs],
        )
    };
    run(&mut e, [q, k, v, d, beta, s]).unwrap();
    let q3 = e.t(&seq(hq * t * kd, 1), &[hq, t, kd]);
    let q_half = e.t(&vec![f16::ZERO; b * hq * t * kd], &[b, hq, t, kd]);
    let q_heads = e.t(&seq(b * 3 * t * kd, 1), &[b, 3, t, kd]);
    let k_dim = e.t(&seq(b * hs * t * 3, 2), &[b, hs, t, 3]);
    let v_t = e.t(&seq(b * hs * 2 * vd, 3), &[b, hs, 2, vd]);
    let d_wrong = e.t(&seq(b * hs * t * 3, 4), &[b, hs, t, 3]);
    let d_2d = e.t(&seq(hs * t, 4), &[hs, t]);
    let beta4 = e.t(&seq(b * hs * t, 5), &[b, hs, t, 1]);
    let s_wrong = e.t(&seq(b * hs * vd * kd, 6), &[b, hs, vd, kd]);
    let s_long = e.t(&vec![0i64; b * hs * kd * vd], &[b, hs, kd, vd]);
    let k0 = e.t(&[0f32; 0], &[b, 0, t, kd]);
    let v0 = e.t(&[0f32; 0], &[b, 0, t, vd]);
    let d0 = e.t(&[0f32; 0], &[b, 0, t]);
    let s0 = e.t(&[0f32; 0], &[b, 0, kd, vd]);
    for (what, args) in [
        ("3-D query", [q3, k, v, d, beta, s]),
        ("f16 query", [q_half, k, v, d, beta, s]),
        ("3 query heads over 2", [q_heads, k, v, d, beta, s]),
        ("key head_dim", [q, k_dim, v, d, beta, s]),
        ("value tokens", [q, k, v_t, d, beta, s]),
        (
            "channelwise decay of the wrong K",
            [q, k, v, d_wrong, beta, s],
        ),
        ("2-D decay", [q, k, v, d_2d, beta, s]),
        ("4-D beta", [q, k, v, d, beta4, s]),
        ("transposed state", [q, k, v, d, beta, s_wrong]),
        ("int64 state", [q, k, v, d, beta, s_long]),
        ("no state heads", [q, k0, v0, d0, d0, s0]),
    ] {
        let r = run(&mut e, args);
        assert_eq!(
            r.as_ref().map_err(|e| e.code()),
            Err(ErrorCode::InvalidArgument),
            "{what}: {r:?}"
        );
    }
}
