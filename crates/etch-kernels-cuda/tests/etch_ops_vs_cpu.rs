//! The `etch::` CUDA kernels against the CPU kernels at the sizes of the Qwen 3.5 MoE model
//! (the op table holds small, odd sizes): head_dim 128 for the Gated DeltaNet, head_dim 256
//! with a cache of 4096 positions for attention (decode with split keys, and prefill), a
//! 64-expert MoE, and sampling over a 248,320-token vocabulary. States updated in place
//! and outputs must agree. Skipped without a GPU unless `ETCH_REQUIRE_CUDA=1`; run on the
//! H200 by `scripts/gpu-test.sh`.

use etch_core::{DeviceRegistry, ScalarType, Tensor};
use etch_devices::cuda::cuda_for_tests;
use std::sync::Arc;

mod common;
#[path = "common/ops.rs"]
mod ops;
use common::Rng;
use ops::{A, check, pos, rand, tensor};

use ScalarType::{BFloat16 as BF16, Float as F32, Half as F16, Long};

/// A GDN call of the model's shapes: 16 key heads and 32 value heads of 128.
fn gdn_args(rng: &mut Rng, dt: ScalarType, t: usize, p: i64, dk: usize) -> Vec<A> {
    let (hk, hv, dv, k) = (16, 32, 128, 4);
    let c = 2 * hk * dk + hv * dv;
    vec![
        A::In(rand(rng, dt, &[1, t, c], 2.0)),
        A::In(rand(rng, dt, &[1, t, hv], 2.0)),
        A::In(rand(rng, dt, &[1, t, hv], 2.0)),
        A::In(rand(rng, dt, &[c, 1, k], 0.5)),
        A::In(rand(rng, dt, &[hv], 1.0)),
        A::In(rand(rng, dt, &[hv], 1.0)),
        A::State(rand(rng, dt, &[1, c, k - 1], 2.0)),
        A::State(rand(rng, F32, &[1, hv, dk, dv], 0.1)),
        pos(p),
        A::Int(hk as i64),
        A::Int(dk as i64),
        A::Out(dt, vec![1, t, hv, dv]),
    ]
}

/// A MoE call: `e` experts of 128 over a hidden size of 512, top 8, shared expert of `is`
/// (128: as wide as the experts, so one row takes moe_down_row). A zero router (`tied`)
/// makes every router logit equal: the routing picks the lowest expert indices.
fn moe_args(rng: &mut Rng, dt: ScalarType, rows: usize, e: usize, is: usize, tied: bool) -> Vec<A> {
    let (h, i) = (512, 128);
    let s = |n: usize| 1.7 / (n as f32).sqrt();
    let router = if tied { 0.0 } else { s(h) * 2.0 };
    vec![
        A::In(rand(rng, dt, &[rows, h], 1.0)),
        A::In(rand(rng, dt, &[e, h], router)),
        A::In(rand(rng, dt, &[e, 2 * i, h], s(h))),
        A::In(rand(rng, dt, &[e, h, i], s(i))),
        A::In(rand(rng, dt, &[is, h], s(h))),
        A::In(rand(rng, dt, &[is, h], s(h))),
        A::In(rand(rng, dt, &[h, is], s(is))),
        A::In(rand(rng, dt, &[1, h], s(h))),
        A::Int(8),
        A::Out(dt, vec![rows, h]),
    ]
}

/// An attention call over a cache of 4096 positions: 16 query heads, 2 KV heads.
fn attention_args(rng: &mut Rng, dt: ScalarType, d: usize, t: usize, p: i64) -> Vec<A> {
    let (hq, hkv, s) = (16, 2, 4096);
    vec![
        A::In(rand(rng, dt, &[1, t, hq, d], 1.0)),
        A::In(rand(rng, dt, &[1, t, hkv, d], 1.0)),
        A::In(rand(rng, dt, &[1, t, hkv, d], 1.0)),
        A::State(rand(rng, dt, &[1, s, hkv, d], 1.0)),
        A::State(rand(rng, dt, &[1, s, hkv, d], 1.0)),
        pos(p),
        A::Double(1.0 / (d as f64).sqrt()),
        A::Out(dt, vec![1, t, hq, d]),
    ]
}

/// Logits over the model's vocabulary, peaked as a language model's are: a flat bulk and
/// ten tokens with probabilities ~ 0.61^j (cumulative 0.40, 0.64, 0.78, 0.87, 0.92, 0.96,
/// ...), so that each draw below is far from a boundary.
fn logits(rng: &mut Rng, dt: ScalarType, rows: usize) -> Tensor {
    let v = 248_320;
    let mut x: Vec<f32> = (0..rows * v).map(|_| rng.f()).collect();
    for r in 0..rows {
        for j in 0..10 {
            x[r * v + (1000 + 7919 * (j + 3 * r)) % v] = 20.0 - 0.5 * j as f32;
        }
    }
    tensor(&x, dt, &[rows, v])
}

#[test]
fn etch_ops_match_the_cpu_at_model_sizes() {
    let Some(alloc) = cuda_for_tests().unwrap() else {
        return;
    };
    let devs = DeviceRegistry::new();
    devs.register(Arc::new(alloc)).unwrap();
    let (cpu, gpu) = (
        etch_kernels::portable_registry(),
        etch_kernels_cuda::cuda_registry(),
    );
    let regs = (&cpu, &gpu);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // head_k_dim 256: the 16-warp entry points. From 64 tokens (ETCH_GDN_CHUNK_FROM) the
    // chunked delta rule (gdn_chunk.cu): partial last chunks (200, 130, 1000 tokens), a
    // state carried in (pos 9), two passes of up to 1024 tokens (1100), and head_k_dim 256
    // at 100 tokens (the recurrence: the chunk kernels take up to 128).
    for (dt, t, p, dk) in [
        (BF16, 1, 5, 128),
        (BF16, 17, 0, 128),
        (F32, 3, 2, 128),
        (BF16, 2, 7, 256),
        (BF16, 200, 0, 128),
        (F32, 130, 0, 128),
        (BF16, 64, 9, 128),
        (F32, 1000, 0, 128),
        (BF16, 1100, 3, 128),
        (BF16, 100, 0, 256),
    ] {
        let args = gdn_args(&mut rng, dt, t, p, dk);
        check(
            regs,
            &devs,
            &format!("gdn {dt} T={t} pos={p} head_k_dim={dk}"),
            "etch::gated_delta_net.out",
            &args,
        );
    }
    // 640 experts: more than a block's threads (the routing's rank loop in chunks); 1100
    // rows: more unit tiles than moe_down's counters, so moe_combine sums. From 64 rows
    // bfloat16 and float16 run on tensor cores (moe_tc.cu): 600 rows (several tiles per
    // expert, shared expert wider than the experts), 200 in float16, 100 rows over 640
    // experts (most without pairs), 64 rows (the threshold); a shared expert of 80 units
    // (not a multiple of 32) keeps the CUDA-core kernels. `tied`: a zero router, so every
    // logit ties and the routing takes the lowest expert indices. 256 experts (the 35B's):
    // the routing's candidate ranks (top 8 of each group of 32 first), also tied and over
    // several rows; 100 experts: a last group of 4.
    for (dt, rows, e, is, tied) in [
        (BF16, 1, 64, 256, false),
        (BF16, 1, 64, 128, false),
        (BF16, 5, 64, 256, false),
        (F32, 3, 64, 256, false),
        (BF16, 1, 640, 128, false),
        (F32, 1, 64, 128, false),
        (F16, 1, 64, 128, false),
        (F32, 1100, 64, 256, false),
        (BF16, 600, 64, 256, false),
        (F16, 200, 64, 128, false),
        (BF16, 100, 640, 128, false),
        (BF16, 64, 64, 96, false),
        (BF16, 130, 64, 80, false),
        (BF16, 1, 64, 128, true),
        (F32, 3, 640, 128, true),
        (BF16, 1, 256, 128, false),
        (BF16, 1, 256, 128, true),
        (BF16, 4, 256, 128, false),
        (F32, 1, 100, 128, false),
    ] {
        let args = moe_args(&mut rng, dt, rows, e, is, tied);
        check(
            regs,
            &devs,
            &format!("moe {dt} rows={rows} experts={e} shared={is} tied={tied}"),
            "etch::moe.out",
            &args,
        );
    }
    for (dt, d, t, p) in [
        (BF16, 256, 1, 3000),
        (BF16, 256, 128, 0),
        (BF16, 256, 64, 100),
        (F16, 128, 1, 4095),
    ] {
        let args = attention_args(&mut rng, dt, d, t, p);
        check(
            regs,
            &devs,
            &format!("attention {dt} D={d} T={t} pos={p}"),
            "etch::attention.out",
            &args,
        );
    }
    // etch::linear_group: one row at the Gated DeltaNet's projection sizes (one
    // gemv_group launch), the attention's three, a single linear, and 5 rows (cuBLAS).
    for (dt, m, ns) in [
        (BF16, 1, &[8192usize, 32, 32, 4096][..]),
        (F32, 1, &[8192, 512, 512][..]),
        (F16, 1, &[100][..]),
        (BF16, 5, &[640, 32, 256][..]),
    ] {
        let k = 2048;
        let ws = ns
            .iter()
            .map(|&n| rand(&mut rng, dt, &[n, k], 0.05))
            .collect();
        let args = [
            A::In(rand(&mut rng, dt, &[1, m, k], 1.0)),
            A::InList(ws),
            A::OutList(dt, ns.iter().map(|&n| vec![1, m, n]).collect()),
        ];
        check(
            regs,
            &devs,
            &format!("linear_group {dt} rows={m} outs={ns:?}"),
            "etch::linear_group.out",
            &args,
        );
    }
    let l = logits(&mut rng, BF16, 2);
    // Greedy; top-k 20 with top-p (shared-memory path); all tokens, top-p 0.9 and all
    // tokens, top-k 2000 (digit searches).
    for s in [
        [0.0f32, 0.0, 1.0, 0.5],
        [0.7, 20.0, 0.95, 0.37],
        [1.0, 0.0, 0.9, 0.5],
        [1.0, 0.0, 1.0, 0.7],
        [1.0, 2000.0, 0.95, 0.8],
    ] {
        let args = [
            A::In(l.to_cpu().unwrap()),
            A::In(Tensor::from_slice(&s, &[4]).unwrap()),
            A::Out(Long, vec![2, 1]),
        ];
        check(
            regs,
            &devs,
            &format!("sample {s:?}"),
            "etch::sample.out",
            &args,
        );
    }
}
