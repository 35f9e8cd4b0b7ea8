//! XNNPACK-delegated programs (ExecuTorch's default CPU recipe) run through etch's
//! `XnnpackBackend` and match ExecuTorch's own runtime on the same files. Fixtures and
//! expected outputs: `tools/export/export_xnnpack_fixtures.py`.

mod common;

use common::{fixtures_dir, manifest_in};
use etch::{ErrorCode, Module};

fn run_fixture(name: &str) {
    common::run_xnnpack_fixture(name);
}

#[test]
fn every_xnnpack_fixture_is_tested() {
    let names: Vec<String> = manifest_in(&fixtures_dir().join("xnnpack"))
        .into_iter()
        .map(|f| f.name)
        .collect();
    let tested = [
        "tiny_cnn",
        "tiny_transformer",
        "elementwise",
        "more_nodes",
        "hf_llama",
        "hf_qwen3",
        "mobilenet_v2_025",
        "tiny_cnn_fp16",
        "tiny_transformer_fp16",
        "linear_8da4w",
        "linear_8da8w",
        "hf_llama_8da4w",
        "hf_qwen3_8da4w",
        "static_qs8_cnn",
        "mobilenet_v2_025_qs8",
        "static_qs8_conv_transpose",
        "static_qs8_per_tensor",
        "resnet_block",
        "resnet_block_portable",
    ];
    for n in &names {
        assert!(tested.contains(&n.as_str()), "fixture {n} has no test");
    }
}

#[test]
fn tiny_cnn() {
    run_fixture("tiny_cnn");
}

#[test]
fn tiny_transformer() {
    run_fixture("tiny_transformer");
}

#[test]
fn elementwise() {
    run_fixture("elementwise");
}

#[test]
fn more_nodes() {
    run_fixture("more_nodes");
}

#[test]
fn hf_llama() {
    run_fixture("hf_llama");
}

#[test]
fn hf_qwen3() {
    run_fixture("hf_qwen3");
}

#[test]
fn mobilenet_v2_025() {
    run_fixture("mobilenet_v2_025");
}

#[test]
fn tiny_cnn_fp16() {
    run_fixture("tiny_cnn_fp16");
}

#[test]
fn tiny_transformer_fp16() {
    run_fixture("tiny_transformer_fp16");
}

#[test]
fn linear_8da4w() {
    run_fixture("linear_8da4w");
}

#[test]
fn linear_8da8w() {
    run_fixture("linear_8da8w");
}

#[test]
fn hf_llama_8da4w() {
    run_fixture("hf_llama_8da4w");
}

#[test]
fn hf_qwen3_8da4w() {
    run_fixture("hf_qwen3_8da4w");
}

#[test]
fn wrong_input_shape_is_an_error() {
    let pte = fixtures_dir().join("xnnpack/tiny_cnn/model.pte");
    let mut module = Module::from_file(&pte).unwrap();
    let x = etch::Tensor::zeros(etch::ScalarType::Float, &[1, 3, 20, 20]).unwrap();
    let e = module
        .execute("forward", &[etch::Value::Tensor(x)])
        .unwrap_err();
    assert!(matches!(e.code(), ErrorCode::InvalidArgument), "{e}");
}

/// Statically quantized (qs8, XNNPACKQuantizer's PT2E flow) convolutions, depthwise and
/// grouped convolutions with fused ReLU / ReLU6, additions, a subtraction, products, max
/// pooling, global average pooling, a concatenation and a linear layer: XNNPACK's integer
/// arithmetic and requantization, so the outputs are ExecuTorch's bit for bit (the
/// manifest's 1e-5 is far below one quantization step).
#[test]
fn static_qs8_cnn() {
    run_fixture("static_qs8_cnn");
}

/// A statically quantized mobilenet_v2 at width 0.25.
#[test]
fn mobilenet_v2_025_qs8() {
    run_fixture("mobilenet_v2_025_qs8");
}

/// Statically quantized transposed convolutions (strided with an output padding, dilated):
/// exact sums and the convolutions' requantization, ExecuTorch's bits.
#[test]
fn static_qs8_conv_transpose() {
    run_fixture("static_qs8_conv_transpose");
}

/// The qs8 CNN quantized with one weight scale a tensor (qint8 filters, qint32 biases).
#[test]
fn static_qs8_per_tensor() {
    run_fixture("static_qs8_per_tensor");
}

/// A resnet basic block and an unpadded 3×3 convolution on odd plane sizes: with AVX-512
/// the 3×3 stride-1 convolutions run by Winograd's F(2×2, 3×3) (`conv::winograd`), whose
/// sums round differently from XNNPACK's direct ones; the manifest's 1e-5 holds.
#[test]
fn resnet_block() {
    run_fixture("resnet_block");
}

/// The block as a portable program (each channel's mean out): etch lays its feature maps
/// out channels-last and runs the same Winograd convolutions, with batch norm folded in.
#[test]
fn resnet_block_portable() {
    run_fixture("resnet_block_portable");
}

/// Mutates the XNNPACK payload inside a program (header, graph flatbuffer) thousands of
/// times: loading and running must never panic.
#[test]
fn mutated_payloads_never_panic() {
    use std::panic::{AssertUnwindSafe, catch_unwind};
    let iterations: usize = std::env::var("ETCH_FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1500);
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for name in [
        "tiny_cnn",
        "tiny_transformer",
        "elementwise",
        "more_nodes",
        "linear_8da4w",
        "linear_8da8w",
        "static_qs8_cnn",
        "static_qs8_conv_transpose",
    ] {
        let pte = fixtures_dir().join(format!("xnnpack/{name}/model.pte"));
        let original = std::fs::read(&pte).unwrap();
        let dir = fixtures_dir().join("xnnpack");
        let fx = manifest_in(&dir)
            .into_iter()
            .find(|f| f.name == name)
            .unwrap();
        let inputs = fx.cases[0].load_inputs();
        // Every payload starts 4 bytes before its "XH00" header magic.
        let starts: Vec<usize> = original
            .windows(4)
            .enumerate()
            .filter(|(_, w)| w == b"XH00")
            .map(|(i, _)| i - 4)
            .collect();
        assert!(!starts.is_empty());
        for it in 0..iterations {
            let mut b = original.clone();
            let start = starts[next() as usize % starts.len()];
            let span = (b.len() - start).min(4096);
            for _ in 0..1 + next() % 4 {
                let i = start + next() as usize % span;
                match next() % 3 {
                    0 => b[i] ^= 1 << (next() % 8),
                    1 => b[i] = next() as u8,
                    _ => {
                        let i = i & !3;
                        let v =
                            [0u32, 1, 0xff, 0xffff, 0x7fff_ffff, 0xffff_ffff][next() as usize % 6];
                        if i + 4 <= b.len() {
                            b[i..i + 4].copy_from_slice(&v.to_le_bytes());
                        }
                    }
                }
            }
            let r = catch_unwind(AssertUnwindSafe(|| {
                if let Ok(m) = Module::from_bytes(&b) {
                    let mut m = m.with_max_planned_bytes(Some(256 << 20));
                    let _ = m.execute("forward", &inputs);
                }
            }));
            assert!(r.is_ok(), "{name}: mutation {it} panicked");
        }
    }
}
