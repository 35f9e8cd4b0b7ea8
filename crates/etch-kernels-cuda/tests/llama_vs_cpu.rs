//! The `llama::` and `quantized_decomposed::` CUDA kernels against the CPU kernels (which
//! are checked against ExecuTorch's runtime in the root crate's `tests/llama_ops.rs`) at
//! the sizes of Llama-3.2-1B: 32 query heads, 8 KV heads, head_dim 64, a cache of 2048
//! positions; decode (T=1, split keys) and prefill (T=37), causal, non-causal and masked,
//! the position as an Int and as a tensor read on the device; the quantized KV-cache
//! recipe's per-token ops (bit for bit) and int8 attention; quantized embeddings. An
//! out-of-range position read on the device is an error and writes nothing. Skipped
//! without a GPU unless `ETCH_REQUIRE_CUDA=1`.

use etch_core::{Device, DeviceRegistry, KernelRegistry, ScalarType, Tensor};
use etch_devices::cuda::cuda_for_tests;
use std::sync::Arc;

mod common;
#[path = "common/ops.rs"]
mod ops;
use common::{Rng, ix};
use ops::{A, check, rand, try_run};

use ScalarType::{BFloat16 as BF16, Char, Double, Float as F32, Half as F16, Long};

const H: usize = 32;
const HKV: usize = 8;
const D: usize = 64;
const L: usize = 2048;

/// The position argument: a tensor (read on the device) or an Int.
fn start(p: i64, as_tensor: bool) -> A {
    if as_tensor {
        A::In(Tensor::from_slice(&[p], &[1]).unwrap())
    } else {
        A::Int(p)
    }
}

fn i8s(rng: &mut Rng, sizes: &[usize], lo: i32, hi: i32) -> Tensor {
    let n: usize = sizes.iter().product();
    let span = (hi - lo + 1) as f32;
    let v: Vec<i8> = (0..n)
        .map(|_| (lo + ((rng.f() + 2.0) / 4.0 * span) as i32).clamp(lo, hi) as i8)
        .collect();
    Tensor::from_slice(&v, sizes).unwrap()
}

fn positive(rng: &mut Rng, sizes: &[usize], lo: f32, hi: f32) -> Tensor {
    let n: usize = sizes.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| lo + (rng.f() + 2.0) / 4.0 * (hi - lo))
        .collect();
    Tensor::from_slice(&v, sizes).unwrap()
}

/// `llama::gated_delta_rule` (float32) at the dense Qwen 3.5 shapes (16 query heads over 16
/// or 8 state heads of 128), per-channel and scalar decay, prefill and one token, and the
/// deprecated `channelwise_` name; small odd head dims too.
fn gated_delta_rule(e: &Env, rng: &mut Rng) {
    for (op, b, hq, hs, t, k, v, channelwise) in [
        ("llama::gated_delta_rule.out", 1, 16, 16, 7, 128, 128, true),
        ("llama::gated_delta_rule.out", 1, 16, 8, 1, 128, 128, false),
        ("llama::gated_delta_rule.out", 2, 6, 3, 33, 7, 130, true),
        (
            "llama::channelwise_gated_delta_rule.out",
            1,
            4,
            4,
            5,
            5,
            3,
            true,
        ),
    ] {
        let decay_sizes: Vec<usize> = if channelwise {
            vec![b, hs, t, k]
        } else {
            vec![b, hs, t]
        };
        // Unit-norm-ish keys and queries, as the model's (L2-normalised) ones.
        let scale = 1.0 / (k as f32).sqrt();
        let args = [
            A::In(rand(rng, F32, &[b, hq, t, k], scale)),
            A::In(rand(rng, F32, &[b, hs, t, k], scale)),
            A::In(rand(rng, F32, &[b, hs, t, v], 1.0)),
            A::In(positive(rng, &decay_sizes, 0.5, 1.0)),
            A::In(positive(rng, &[b, hs, t], 0.0, 1.0)),
            A::In(rand(rng, F32, &[b, hs, k, v], 1.0)),
            A::Out(F32, vec![b, hq, t, v]),
            A::Out(F32, vec![b, hs, k, v]),
        ];
        e.check(
            &format!("{op} B={b} Hq={hq} Hs={hs} T={t} K={k} V={v}"),
            op,
            &args,
        );
    }
}

struct Env {
    devs: DeviceRegistry,
    cpu: KernelRegistry,
    gpu: KernelRegistry,
}

impl Env {
    fn check(&self, what: &str, op: &str, args: &[A]) {
        check((&self.cpu, &self.gpu), &self.devs, what, op, args);
    }
}

fn custom_sdpa(e: &Env, rng: &mut Rng) {
    let cases = [
        // (T, pos, causal, mask, position as a tensor)
        (1, 2047, true, false, true),
        (1, 1000, true, false, false),
        (37, 0, true, false, true),
        (37, 500, true, false, false),
        (4, 100, false, false, true),
        (4, 100, false, true, false),
    ];
    for dt in [F32, BF16, F16] {
        let kc = rand(rng, dt, &[1, L, HKV, D], 2.0);
        let vc = rand(rng, dt, &[1, L, HKV, D], 2.0);
        for (t, p, causal, masked, as_tensor) in cases {
            let mask = if masked {
                A::In(rand(rng, dt, &[t, L], 4.0))
            } else {
                A::None
            };
            let args = [
                A::In(rand(rng, dt, &[1, t, H, D], 2.0)),
                A::In(kc.to_cpu().unwrap()),
                A::In(vc.to_cpu().unwrap()),
                start(p, as_tensor),
                mask,
                A::Double(0.0),
                A::Bool(causal),
                if t == 4 { A::Double(0.2) } else { A::None },
                A::Out(dt, vec![1, t, H, D]),
            ];
            e.check(
                &format!("custom_sdpa {dt} T={t} pos={p} causal={causal} mask={masked} tensor pos={as_tensor}"),
                "llama::custom_sdpa.out",
                &args,
            );
        }
    }
}

fn sdpa_with_kv_cache(e: &Env, rng: &mut Rng) {
    for (dt, t, p, as_tensor) in [
        (BF16, 1, 77, true),
        (BF16, 37, 0, false),
        (F32, 1, 2047, true),
        (F16, 5, 300, true),
    ] {
        let args = [
            A::In(rand(rng, dt, &[1, t, H, D], 2.0)),
            A::In(rand(rng, dt, &[1, t, HKV, D], 2.0)),
            A::In(rand(rng, dt, &[1, t, HKV, D], 2.0)),
            A::State(rand(rng, dt, &[1, L, HKV, D], 2.0)),
            A::State(rand(rng, dt, &[1, L, HKV, D], 2.0)),
            start(p, as_tensor),
            A::Int(t as i64),
            A::None,
            A::Double(0.0),
            A::Bool(true),
            A::None,
            A::Out(dt, vec![1, t, H, D]),
        ];
        e.check(
            &format!("sdpa_with_kv_cache {dt} T={t} pos={p} tensor pos={as_tensor}"),
            "llama::sdpa_with_kv_cache.out",
            &args,
        );
    }
}

fn cache_updates(e: &Env, rng: &mut Rng) {
    // The placeholder `out` no kernel writes: an input here, so that it is not compared.
    let placeholder = || A::In(Tensor::from_slice(&[0f32], &[1]).unwrap());
    for (t, p, as_tensor) in [(37, 100, true), (1, 2047, false), (3, 5, true)] {
        e.check(
            &format!("update_cache bf16 T={t} pos={p}"),
            "llama::update_cache.out",
            &[
                A::In(rand(rng, BF16, &[1, t, HKV, D], 2.0)),
                A::State(rand(rng, BF16, &[1, L, HKV, D], 2.0)),
                start(p, as_tensor),
                placeholder(),
            ],
        );
        // The quantized recipe's caches: int8 rows, f32 scales [.., 1], int8 zero points.
        e.check(
            &format!("update_cache int8 T={t} pos={p}"),
            "llama::update_cache.out",
            &[
                A::In(i8s(rng, &[1, t, HKV, D], -128, 127)),
                A::State(i8s(rng, &[1, L, HKV, D], -128, 127)),
                start(p, as_tensor),
                placeholder(),
            ],
        );
        e.check(
            &format!("update_cache scales T={t} pos={p}"),
            "llama::update_cache.out",
            &[
                A::In(rand(rng, F32, &[1, t, HKV, 1], 1.0)),
                A::State(rand(rng, F32, &[1, L, HKV, 1], 1.0)),
                start(p, as_tensor),
                placeholder(),
            ],
        );
    }
    let idx: Vec<i64> = vec![2047, 0, 5, 1000];
    e.check(
        "update_cache_with_indices f32",
        "llama::update_cache_with_indices.out",
        &[
            A::In(rand(rng, F32, &[1, 4, HKV, D], 2.0)),
            A::State(rand(rng, F32, &[1, L, HKV, D], 2.0)),
            A::Int(0),
            A::In(Tensor::from_slice(&idx, &[1, 4]).unwrap()),
            placeholder(),
        ],
    );
}

fn quantized_sdpa(e: &Env, rng: &mut Rng) {
    for (t, p, masked, as_tensor) in [
        (1, 2047, false, true),
        (1, 300, false, false),
        (9, 40, true, true),
    ] {
        let q = |rng: &mut Rng, s: usize, h: usize| {
            [
                A::In(i8s(rng, &[1, s, h, 1], -20, 20)),
                A::In(positive(rng, &[1, s, h, 1], 0.005, 0.05)),
            ]
        };
        let [qz, qs] = q(rng, t, H);
        let [kz, ks] = q(rng, L, HKV);
        let [vz, vs] = q(rng, L, HKV);
        let args = [
            A::In(i8s(rng, &[1, t, H, D], -128, 127)),
            A::In(i8s(rng, &[1, L, HKV, D], -128, 127)),
            A::In(i8s(rng, &[1, L, HKV, D], -128, 127)),
            start(p, as_tensor),
            if masked {
                A::In(rand(rng, F32, &[t, L], 4.0))
            } else {
                A::None
            },
            A::Double(0.0),
            A::Bool(!masked),
            A::None,
            qz,
            qs,
            kz,
            ks,
            vz,
            vs,
            A::Bool(false),
            A::Out(F32, vec![1, t, H, D]),
        ];
        e.check(
            &format!("custom_quantized_sdpa T={t} pos={p} mask={masked}"),
            "llama::custom_quantized_sdpa.out",
            &args,
        );
    }
}

/// Rows of [1, 37, 8, 64] f32 with the quantization's corner cases: all zero, all
/// positive, all negative, tiny (the small-scale branch), one large value.
fn per_token_input(rng: &mut Rng) -> Tensor {
    let (rows, d) = (37 * HKV, D);
    let mut v: Vec<f32> = (0..rows * d).map(|_| rng.f() * 3.0).collect();
    for (r, row) in v.chunks_exact_mut(d).enumerate() {
        match r % 6 {
            0 => row.fill(0.0),
            1 => row.iter_mut().for_each(|x| *x = x.abs() + 0.1),
            2 => row.iter_mut().for_each(|x| *x = -x.abs() - 0.1),
            3 => row.iter_mut().for_each(|x| *x *= 1e-7),
            4 => row[7] = 1e4,
            _ => {}
        }
    }
    Tensor::from_slice(&v, &[1, 37, HKV, D]).unwrap()
}

fn per_token(e: &Env, rng: &mut Rng) {
    let x = per_token_input(rng);
    let qargs = || {
        [
            A::In(x.to_cpu().unwrap()),
            A::Int(Char as i64),
            A::Out(Double, vec![1, 37, HKV, 1]),
            A::Out(Long, vec![1, 37, HKV, 1]),
        ]
    };
    e.check(
        "choose_qparams_per_token_asymmetric",
        "quantized_decomposed::choose_qparams_per_token_asymmetric.out",
        &qargs(),
    );
    // Quantize with the CPU's parameters.
    let p = ops::run(
        &e.cpu,
        "quantized_decomposed::choose_qparams_per_token_asymmetric.out",
        &qargs(),
        Device::CPU,
        &e.devs,
    );
    e.check(
        "quantize_per_token",
        "quantized_decomposed::quantize_per_token.out",
        &[
            A::In(x.to_cpu().unwrap()),
            A::In(p[0].to_cpu().unwrap()),
            A::In(p[1].to_cpu().unwrap()),
            A::Int(-128),
            A::Int(127),
            A::Int(Char as i64),
            A::Out(Char, vec![1, 37, HKV, D]),
        ],
    );
}

fn embeddings(e: &Env, rng: &mut Rng) {
    let (rows, dim, t) = (4096, 2048, 37);
    let idx: Vec<i64> = (0..t as i64)
        .map(|k| (k * 997 + 13) % rows as i64)
        .collect();
    let indices = || A::In(Tensor::from_slice(&idx, &[1, t]).unwrap());
    // 8-bit, one f32 scale per row (`8,0`), no zero points, f32 out.
    e.check(
        "embedding_byte.dtype_out per row",
        "quantized_decomposed::embedding_byte.dtype_out",
        &[
            A::In(i8s(rng, &[rows, dim], -128, 127)),
            A::In(positive(rng, &[rows], 0.001, 0.02)),
            A::None,
            A::Int(-128),
            A::Int(127),
            indices(),
            A::Int(F32 as i64),
            A::Out(F32, vec![1, t, dim]),
        ],
    );
    // 8-bit with 64 groups a row, bf16 scales and zero points, bf16 out.
    e.check(
        "embedding_byte.out groups bf16",
        "quantized_decomposed::embedding_byte.out",
        &[
            A::In(i8s(rng, &[rows, dim], -128, 127)),
            A::In(rand(rng, BF16, &[rows, 64], 0.04)),
            A::In(rand(rng, BF16, &[rows, 64], 8.0)),
            A::Int(-128),
            A::Int(127),
            indices(),
            A::Out(BF16, vec![1, t, dim]),
        ],
    );
    // 4-bit (`4,32`): two values a byte, groups of 32, f32 scales and zero points.
    let packed: Vec<u8> = (0..rows * dim / 2)
        .map(|_| ((rng.f() + 2.0) * 63.9) as u8)
        .collect();
    e.check(
        "embedding_4bit.dtype_out groups of 32",
        "quantized_decomposed::embedding_4bit.dtype_out",
        &[
            A::In(Tensor::from_slice(&packed, &[rows, dim / 2]).unwrap()),
            A::In(positive(rng, &[rows, dim / 32], 0.01, 0.1)),
            A::In(rand(rng, F32, &[rows, dim / 32], 2.0)),
            A::Int(-8),
            A::Int(7),
            indices(),
            A::None,
            A::Out(F32, vec![1, t, dim]),
        ],
    );
}

/// A position read on the device past the cache is an error after the call, and the
/// caches keep their rows.
fn bad_positions(e: &Env, rng: &mut Rng) {
    let dev = Device::cuda(ix());
    let cache = rand(rng, BF16, &[1, L, HKV, D], 2.0);
    let args = [
        A::In(rand(rng, BF16, &[1, 37, HKV, D], 2.0)),
        A::State(cache.to_cpu().unwrap()),
        start(2040, true),
        A::In(Tensor::from_slice(&[0f32], &[1]).unwrap()),
    ];
    let (after, r) = try_run(&e.gpu, "llama::update_cache.out", &args, dev, &e.devs);
    eprintln!("update_cache at 2040 + 37: {}", r.unwrap_err());
    assert_eq!(
        after[0].to_f64_vec().unwrap(),
        cache.to_f64_vec().unwrap(),
        "the cache was written"
    );
    for p in [-1i64, L as i64] {
        let args = [
            A::In(rand(rng, BF16, &[1, 1, H, D], 2.0)),
            A::In(cache.to_cpu().unwrap()),
            A::In(cache.to_cpu().unwrap()),
            start(p, true),
            A::None,
            A::Double(0.0),
            A::Bool(true),
            A::None,
            A::Out(BF16, vec![1, 1, H, D]),
        ];
        let (_, r) = try_run(&e.gpu, "llama::custom_sdpa.out", &args, dev, &e.devs);
        eprintln!("custom_sdpa at {p}: {}", r.unwrap_err());
        // An Int position out of range is rejected before any launch.
        let mut args = args;
        args[3] = A::Int(p);
        let (_, r) = try_run(&e.gpu, "llama::custom_sdpa.out", &args, dev, &e.devs);
        assert!(r.is_err());
    }
    // The device is usable afterwards (the error word was cleared).
    let ok = [
        A::In(rand(rng, BF16, &[1, 1, HKV, D], 2.0)),
        A::State(cache.to_cpu().unwrap()),
        start(5, true),
        A::In(Tensor::from_slice(&[0f32], &[1]).unwrap()),
    ];
    try_run(&e.gpu, "llama::update_cache.out", &ok, dev, &e.devs)
        .1
        .unwrap();
}

#[test]
fn llama_ops_match_the_cpu_at_llama_3_2_1b_sizes() {
    let Some(alloc) = cuda_for_tests().unwrap() else {
        return;
    };
    let devs = DeviceRegistry::new();
    devs.register(Arc::new(alloc)).unwrap();
    let e = Env {
        devs,
        cpu: etch_kernels::portable_registry(),
        gpu: etch_kernels_cuda::cuda_registry(),
    };
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    custom_sdpa(&e, &mut rng);
    sdpa_with_kv_cache(&e, &mut rng);
    cache_updates(&e, &mut rng);
    quantized_sdpa(&e, &mut rng);
    per_token(&e, &mut rng);
    embeddings(&e, &mut rng);
    bad_positions(&e, &mut rng);
    gated_delta_rule(&e, &mut rng);
}
