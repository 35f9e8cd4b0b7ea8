//! Kernels' load-time hooks (`KernelRegistry::register_prepare`): a method loaded with them
//! (convolution weights packed once) gives the same bits as one loaded without them (weights
//! packed on every call), on the fixtures with convolutions, on 1 and 2 threads; products on
//! weights packed at load (their own summation order) the same values up to rounding.

mod common;

use common::{fixtures_dir, manifest};
use etch::{LoadConfig, Method, Program, Value};
use std::sync::Arc;

/// No preparation.
fn nothing(_: &etch::KernelContext<'_>) -> etch::Result<Option<etch::Prepared>> {
    Ok(None)
}

/// The outputs of `fixture`'s first case as bytes, loaded with or without the hooks
/// (`convs_only`: without the products').
fn run_with(fixture: &str, prepare: bool, convs_only: bool) -> Vec<Vec<u8>> {
    let fx = manifest().into_iter().find(|f| f.name == fixture).unwrap();
    let bytes = std::fs::read(&fx.pte).unwrap();
    let program = Program::from_bytes(&bytes).unwrap();
    let mut kernels = etch::default_kernels();
    if convs_only {
        for op in ["aten::mm.out", "aten::addmm.out", "aten::linear.out"] {
            kernels.register_prepare(op, nothing);
        }
    }
    let mut config = LoadConfig::new(Arc::new(kernels), Arc::new(etch::default_backends()));
    config.prepare_kernels = prepare;
    // Convolutions run on their own (fusion packs its own weights), channels-first (the
    // layout choice needs the hooks; tests/layout.rs compares it).
    config.fuse_kernels = false;
    config.channels_last = false;
    let mut method = Method::load(&program, "forward", &config).unwrap();
    method.set_inputs(&fx.cases[0].load_inputs()).unwrap();
    method.execute().unwrap();
    let outs = method.output_values().unwrap();
    outs.iter()
        .map(|v| match v {
            Value::Tensor(t) => t.as_bytes().unwrap().to_vec(),
            other => format!("{other:?}").into_bytes(),
        })
        .collect()
}

fn run(fixture: &str, prepare: bool) -> Vec<Vec<u8>> {
    run_with(fixture, prepare, false)
}

#[test]
fn prepared_convolutions_give_the_same_bits() {
    assert!(fixtures_dir().join("convnet/model.pte").exists());
    for threads in [1, 2] {
        etch::set_num_threads(threads);
        for fixture in ["convnet", "cnn"] {
            let (with, without) = (run_with(fixture, true, true), run(fixture, false));
            assert_eq!(with.len(), without.len());
            for (i, (a, b)) in with.iter().zip(&without).enumerate() {
                assert!(a == b, "{fixture} output {i} differs ({threads} threads)");
            }
        }
    }
    etch::set_num_threads(0);
}

#[test]
fn prepared_products_match_within_rounding() {
    let floats = |b: &[u8]| -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    for fixture in ["mlp", "transformer", "convnet", "cnn"] {
        let (with, without) = (run(fixture, true), run(fixture, false));
        for (i, (a, b)) in with.iter().zip(&without).enumerate() {
            let (a, b) = (floats(a), floats(b));
            let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-3);
            for (j, (x, y)) in a.iter().zip(&b).enumerate() {
                assert!(
                    (x - y).abs() <= 1e-5 * scale,
                    "{fixture} output {i} element {j}: {x} vs {y}"
                );
            }
        }
    }
}

/// What `KernelContext::is_unread` said about the max pooling's values and indices.
static POOL_UNREAD: std::sync::Mutex<Vec<(bool, bool)>> = std::sync::Mutex::new(Vec::new());

fn record_unread(ctx: &etch::KernelContext<'_>) -> etch::Result<Option<etch::Prepared>> {
    POOL_UNREAD
        .lock()
        .unwrap()
        .push((ctx.is_unread(6), ctx.is_unread(7)));
    Ok(None)
}

/// The load-time hooks learn which outputs nothing reads: the cnn fixture's max pooling
/// feeds its values on and drops its indices (a method output or an argument another call
/// reads is never unread). The default hook then leaves the indices unwritten, and the
/// outputs stay the bits of a method loaded without hooks (above).
#[test]
fn hooks_see_which_outputs_nothing_reads() {
    let fx = manifest().into_iter().find(|f| f.name == "cnn").unwrap();
    let program = Program::from_bytes(&std::fs::read(&fx.pte).unwrap()).unwrap();
    let mut kernels = etch::default_kernels();
    kernels.register_prepare("aten::max_pool2d_with_indices.out", record_unread);
    let config = LoadConfig::new(Arc::new(kernels), Arc::new(etch::default_backends()));
    Method::load(&program, "forward", &config).unwrap();
    assert_eq!(*POOL_UNREAD.lock().unwrap(), [(false, true)]);
}
