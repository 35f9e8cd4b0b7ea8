//! Executing a loaded method allocates no memory: arenas and staging come from load,
//! kernel scratch (matrix-product packing buffers included: `etch_kernels::gemm` drives
//! gemm's micro-kernels with memory from the scratch pool) from a reused pool warmed by the
//! first run, and the thread pool hands out work without allocating. While `execute` runs,
//! the counting allocator counts allocations on the test's thread and on the pool's worker
//! threads (named `etch-worker-N`; the test harness's own threads are left out). The test
//! runs single-threaded and with several threads, on the fixtures and on a program large
//! enough for the kernels to split their work.

use etch::{Module, Tag, Tensor, Value};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static COUNT: AtomicUsize = AtomicUsize::new(0);
static BYTES: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Set while this thread records an allocation (capturing a backtrace allocates too).
    static RECORDING: Cell<bool> = const { Cell::new(false) };
    /// Whether this thread's allocations count: the test's thread (set by the test) and the
    /// pool's workers (found by name on their first allocation while counting).
    static WATCHED: Cell<Option<bool>> = const { Cell::new(None) };
}

fn watched() -> bool {
    if let Ok(Some(w)) = WATCHED.try_with(|w| w.get()) {
        return w;
    }
    if RECORDING.try_with(|r| r.replace(true)).unwrap_or(true) {
        return false;
    }
    let w = std::thread::current()
        .name()
        .is_some_and(|n| n.starts_with("etch-worker-"));
    let _ = WATCHED.try_with(|c| c.set(Some(w)));
    let _ = RECORDING.try_with(|r| r.set(false));
    w
}

// SAFETY: forwards to the system allocator; only counts calls while counting is on.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) && watched() {
            record(layout.size());
        }
        // SAFETY: the caller's contract is forwarded unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) && watched() {
            record(new);
        }
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

fn record(size: usize) {
    if RECORDING.try_with(|r| r.replace(true)).unwrap_or(true) {
        return;
    }
    COUNT.fetch_add(1, Ordering::Relaxed);
    BYTES.fetch_add(size, Ordering::Relaxed);
    let thread = std::thread::current();
    let bt = std::backtrace::Backtrace::force_capture();
    eprintln!(
        "allocation of {size} bytes while counting, on thread {:?}:\n{bt}",
        thread.name()
    );
    let _ = RECORDING.try_with(|r| r.set(false));
}

#[global_allocator]
static A: Counting = Counting;

/// (allocations, bytes) made by `f` on any thread.
fn allocations_in(f: impl FnOnce()) -> (usize, usize) {
    COUNT.store(0, Ordering::Relaxed);
    BYTES.store(0, Ordering::Relaxed);
    COUNTING.store(true, Ordering::SeqCst);
    f();
    COUNTING.store(false, Ordering::SeqCst);
    (COUNT.load(Ordering::Relaxed), BYTES.load(Ordering::Relaxed))
}

/// The counter sees allocations on the test's thread and on a worker-named thread.
fn counter_counts_watched_threads() {
    let (n, _) = allocations_in(|| drop(std::hint::black_box(vec![1u8; 16])));
    assert_eq!(n, 1, "an allocation on this thread");
    let go = std::sync::Barrier::new(2);
    let done = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        let b = std::thread::Builder::new().name("etch-worker-check".into());
        let _ = b.spawn_scoped(s, || {
            go.wait();
            drop(std::hint::black_box(vec![1u8; 16]));
            done.wait();
        });
        let (n, _) = allocations_in(|| {
            go.wait();
            done.wait();
        });
        assert!(n >= 1, "an allocation on a worker thread");
    });
}

#[test]
fn execute_does_not_allocate() {
    WATCHED.with(|w| w.set(Some(true)));
    counter_counts_watched_threads();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let programs = [
        "mlp/model.pte",
        "mlp_bf16/model.pte",
        "cnn/model.pte",
        "convnet/model.pte",
        "fusenet/model.pte",
        "transformer/model.pte",
        "token_model/model.pte",
        "stateful/model.pte",
        "dynamic_batch/model.pte",
        "cond/model.pte",
        "misc/threads.pte",
        "llama_ops/custom_sdpa_causal/model.pte",
        "llama_ops/sdpa_with_kv_cache/model.pte",
        "llama_ops/custom_sdpa_mask/model.pte",
        "llama_ops/tiny_llama/model.pte",
        "llama_ops/tiny_llama_qkv/model.pte",
        "llama_ops/tiny_llama_xnn8da4w/model.pte",
        "llama_ops/tiny_llama_kv/model.pte",
        "xnnpack/tiny_cnn/model.pte",
        "xnnpack/tiny_transformer/model.pte",
        "xnnpack/more_nodes/model.pte",
        "xnnpack/hf_llama/model.pte",
        "xnnpack/mobilenet_v2_025/model.pte",
        "xnnpack/tiny_cnn_fp16/model.pte",
        "xnnpack/linear_8da8w/model.pte",
        "xnnpack/hf_llama_8da4w/model.pte",
    ];
    for threads in [1, 4] {
        etch::set_num_threads(threads);
        for name in programs {
            let mut m = Module::from_file(dir.join(name)).unwrap();
            let meta = m.method_meta("forward").unwrap();
            let inputs: Vec<Value> = meta
                .inputs()
                .iter()
                .map(|i| match (&i.tag, &i.tensor) {
                    (Tag::Tensor, Some(t)) => {
                        Value::Tensor(Tensor::zeros(t.dtype, &t.sizes).unwrap())
                    }
                    _ => Value::Int(1),
                })
                .collect();
            assert_warm_execute_allocates_nothing(&mut m, "forward", &inputs, name, threads);
        }
        decode_with_sampling(threads);
        xnnpack_rows_change(threads);
    }
    etch::set_num_threads(0);
}

/// The Qwen 3.5 MoE fixture's decode step with sampling on (temperature, top-k, top-p):
/// `etch::sample` takes its work buffers from the scratch pool, so a step allocates nothing
/// once warm (the Gated DeltaNet, MoE and attention kernels neither). One test function
/// runs everything: the counters and the thread pool are process-wide.
fn decode_with_sampling(threads: usize) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qwen3_5_moe");
    let mut m = Module::from_file(dir.join("model.pte"))
        .unwrap()
        .with_weights(dir.join("ckpt"))
        .unwrap();
    let inputs = [
        Value::Tensor(Tensor::from_slice(&[3i64], &[1, 1]).unwrap()),
        Value::Tensor(Tensor::from_slice(&[0i64], &[1]).unwrap()),
        Value::Tensor(Tensor::from_slice(&[0.8f32, 5.0, 0.9, 0.5], &[4]).unwrap()),
    ];
    assert_warm_execute_allocates_nothing(
        &mut m,
        "decode",
        &inputs,
        "Qwen decode with sampling",
        threads,
    );
}

/// An export_llm program with XNNPACK 8da4w delegates, called with a 5-token prompt and then
/// one token: the delegates' views are resized to the call's rows in place.
fn xnnpack_rows_change(threads: usize) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llama_ops");
    let mut m = Module::from_file(dir.join("tiny_llama_xnn8da4w/model.pte")).unwrap();
    let call = |tokens: &[i64], pos: i64| {
        [
            Value::Tensor(Tensor::from_slice(tokens, &[1, tokens.len()]).unwrap()),
            Value::Tensor(Tensor::from_slice(&[pos], &[1]).unwrap()),
        ]
    };
    let method = m.method("forward").unwrap();
    method.set_inputs(&call(&[1, 5, 9, 23, 7], 0)).unwrap();
    method.execute().unwrap();
    method.set_inputs(&call(&[3], 5)).unwrap();
    let (n, bytes) = allocations_in(|| method.execute().unwrap());
    assert_eq!(
        n, 0,
        "XNNPACK rows 5 -> 1 with {threads} threads: {n} allocations ({bytes} bytes)"
    );
}

/// Runs `method` once to warm it, then asserts that a second execution allocates nothing.
fn assert_warm_execute_allocates_nothing(
    m: &mut Module,
    method: &str,
    inputs: &[Value],
    what: &str,
    threads: usize,
) {
    let method = m.method(method).unwrap();
    method.set_inputs(inputs).unwrap();
    method.execute().unwrap();
    method.set_inputs(inputs).unwrap();
    let (n, bytes) = allocations_in(|| method.execute().unwrap());
    assert_eq!(
        n, 0,
        "{what} with {threads} threads: {n} allocations ({bytes} bytes) during execute"
    );
}
