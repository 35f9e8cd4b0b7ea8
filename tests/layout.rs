//! Feature maps laid out channels-last at load (`LoadConfig::channels_last`): where its
//! convolutions gain (depthwise ones with AVX-512F), a program runs its 4-d
//! intermediates channels-last, fused or not, and gives the channels-first results up to
//! the order of the convolutions' sums (PyTorch's own comparison is in tests/fixtures.rs,
//! which loads with the default configuration, channels-last on).

mod common;

use common::{load_case, run_f32 as run};
use etch::Method;

/// The method as loaded with the layout choice on or off (and fusion on or off), with its
/// first case's inputs set.
fn load(fixture: &str, method: &str, channels_last: bool, fuse: bool) -> Method {
    load_case(fixture, method, |c| {
        c.channels_last = channels_last;
        c.fuse_kernels = fuse;
    })
}

/// Whether this CPU has AVX-512F (where depthwise convolutions gain channels-last; with
/// AVX2 alone only those of planes of at least 56², which the fixtures do not have).
fn avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Every element of `a` within `1e-5` of the largest magnitude of `b`.
fn assert_close(what: &str, a: &[Vec<f32>], b: &[Vec<f32>]) {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let scale = y.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-3);
        for (j, (p, q)) in x.iter().zip(y).enumerate() {
            assert!(
                (p - q).abs() <= 1e-5 * scale,
                "{what} output {i} element {j}: channels-last {p}, channels-first {q}"
            );
        }
    }
}

#[test]
fn a_depthwise_net_runs_channels_last_with_avx512() {
    // fusenet: depthwise convolutions (which gain), residual adds, squeeze-excitation
    // means and products.
    let m = load("fusenet", "forward", true, true);
    assert_eq!(m.channels_last_values() > 0, avx512());
    let off = load("fusenet", "forward", false, true);
    assert_eq!(off.channels_last_values(), 0);
}

#[test]
fn channels_last_gives_the_channels_first_values() {
    for (fixture, method) in [
        ("fusenet", "forward"),
        ("fusenet", "plain"),
        ("convnet", "forward"),
        ("cnn", "forward"),
    ] {
        for fuse in [true, false] {
            let what = format!("{fixture}.{method} (fused: {fuse})");
            let mut on = load(fixture, method, true, fuse);
            let mut off = load(fixture, method, false, fuse);
            assert_close(&what, &run(&mut on), &run(&mut off));
        }
    }
}

#[test]
fn channels_last_results_do_not_depend_on_the_thread_count() {
    let mut per_threads = Vec::new();
    for threads in [1, 2, 3] {
        etch::set_num_threads(threads);
        let outs: Vec<_> = [("fusenet", "forward"), ("cnn", "forward")]
            .iter()
            .flat_map(|&(f, m)| [true, false].map(|fuse| run(&mut load(f, m, true, fuse))))
            .collect();
        per_threads.push(outs);
    }
    etch::set_num_threads(0);
    for r in &per_threads[1..] {
        assert!(r == &per_threads[0], "results differ across thread counts");
    }
}
