//! Kernels' load-time hooks (`KernelRegistry::register_prepare`): a method loaded with them
//! (convolution weights packed once) gives the same bits as one loaded without them (weights
//! packed on every call), on the fixtures with convolutions, on 1 and 2 threads.

mod common;

use common::{fixtures_dir, manifest};
use etch::{LoadConfig, Method, Program, Value};
use std::sync::Arc;

/// The outputs of `fixture`'s first case as bytes, loaded with or without the hooks.
fn run(fixture: &str, prepare: bool) -> Vec<Vec<u8>> {
    let fx = manifest().into_iter().find(|f| f.name == fixture).unwrap();
    let bytes = std::fs::read(&fx.pte).unwrap();
    let program = Program::from_bytes(&bytes).unwrap();
    let mut config = LoadConfig::new(
        Arc::new(etch::default_kernels()),
        Arc::new(etch::default_backends()),
    );
    config.prepare_kernels = prepare;
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

#[test]
fn prepared_convolutions_give_the_same_bits() {
    assert!(fixtures_dir().join("convnet/model.pte").exists());
    for threads in [1, 2] {
        etch::set_num_threads(threads);
        for fixture in ["convnet", "cnn"] {
            let (with, without) = (run(fixture, true), run(fixture, false));
            assert_eq!(with.len(), without.len());
            for (i, (a, b)) in with.iter().zip(&without).enumerate() {
                assert!(a == b, "{fixture} output {i} differs ({threads} threads)");
            }
        }
    }
    etch::set_num_threads(0);
}
