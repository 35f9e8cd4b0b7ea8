//! Chains of kernel calls fused at load (`KernelRegistry::register_fusion`): a convolution
//! with the batch norm, activation and residual add after it runs as one call. Fused, the
//! fixtures give the unfused calls' values up to the batch norm folded into the weights
//! (PyTorch's own comparison is in tests/fixtures.rs, which loads with fusion on), the same
//! bits where no batch norm is folded, and the same bits on any number of threads.

mod common;

use common::{load_case, run_f32};
use etch::Method;

const FUSED: &str = "etch::fused_convolution";

/// The method as loaded with or without fusion, with its first case's inputs set.
fn load(fixture: &str, method: &str, fuse: bool) -> Method {
    load_case(fixture, method, |c| c.fuse_kernels = fuse)
}

fn run(m: &mut Method) -> Vec<Vec<f32>> {
    run_f32(m)
}

fn count(calls: &[&str], op: &str) -> usize {
    calls.iter().filter(|c| **c == op).count()
}

#[test]
fn every_convolution_chain_of_fusenet_is_one_call() {
    let m = load("fusenet", "forward", true);
    let calls = m.kernel_calls();
    // stem + hardswish, depthwise + ReLU6, pointwise + residual, expand + SiLU, depthwise
    // 5x5 + SiLU, the two squeeze-and-excitation convolutions (SiLU, sigmoid), projection +
    // ReLU.
    assert_eq!(count(&calls, FUSED), 8, "{calls:?}");
    for op in [
        "aten::convolution.out",
        "aten::_native_batch_norm_legit_no_training.out",
        "aten::clamp.out",
        "aten::hardtanh.out",
        "aten::relu.out",
        "aten::div.out",
    ] {
        assert_eq!(count(&calls, op), 0, "{op} left in {calls:?}");
    }
    // Left: the squeeze-and-excitation product (broadcast), two means, the classifier.
    assert_eq!(count(&calls, "aten::mul.out"), 1, "{calls:?}");
    let unfused = load("fusenet", "forward", false);
    assert_eq!(count(&unfused.kernel_calls(), FUSED), 0);
}

#[test]
fn fused_chains_match_the_unfused_calls() {
    for (fixture, method) in [
        ("fusenet", "forward"),
        ("convnet", "forward"),
        ("cnn", "forward"),
    ] {
        let mut fused = load(fixture, method, true);
        assert!(
            count(&fused.kernel_calls(), FUSED) > 0,
            "{fixture}: nothing fused"
        );
        let (a, b) = (run(&mut fused), run(&mut load(fixture, method, false)));
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            let scale = y.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-3);
            for (j, (p, q)) in x.iter().zip(y).enumerate() {
                assert!(
                    (p - q).abs() <= 1e-5 * scale,
                    "{fixture} output {i} element {j}: fused {p}, unfused {q}"
                );
            }
        }
    }
}

#[test]
fn chains_without_a_batch_norm_keep_the_unfused_bits() {
    let mut fused = load("fusenet", "plain", true);
    let calls = fused.kernel_calls();
    // ReLU, SiLU, ReLU6 (depthwise), hardswish: every convolution fused.
    assert_eq!(count(&calls, FUSED), 4, "{calls:?}");
    assert_eq!(count(&calls, "aten::convolution.out"), 0, "{calls:?}");
    let (a, b) = (run(&mut fused), run(&mut load("fusenet", "plain", false)));
    for (x, y) in a.iter().zip(&b) {
        // Equal values (ReLU's -0 may come out as the clamp's -0 rather than +0).
        assert!(
            x.iter().zip(y).all(|(p, q)| p == q),
            "fused and unfused differ"
        );
    }
}

#[test]
fn fused_results_do_not_depend_on_the_thread_count() {
    let mut per_threads = Vec::new();
    for threads in [1, 2, 3] {
        etch::set_num_threads(threads);
        let mut m = load("fusenet", "forward", true);
        let mut p = load("fusenet", "plain", true);
        per_threads.push((run(&mut m), run(&mut p)));
    }
    etch::set_num_threads(0);
    for r in &per_threads[1..] {
        assert!(r == &per_threads[0], "results differ across thread counts");
    }
}
