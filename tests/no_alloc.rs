//! Executing a loaded method allocates no memory of its own: arenas and staging come from
//! load, kernel scratch from a reused pool (warmed by the first run). The one exception is
//! inside the `gemm` crate, which allocates its own per-call packing and bookkeeping buffers
//! (gemm-common's gemm.rs; a few KiB per matmul); the test checks, by backtrace, that every
//! allocation during `execute` comes from there.

use etch::{Module, Tag, Tensor, Value};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<usize> = const { Cell::new(0) };
    static BYTES: Cell<usize> = const { Cell::new(0) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
    static FOREIGN: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only counts calls on threads that opted in.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.try_with(|c| c.get()).unwrap_or(false) {
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
        if COUNTING.try_with(|c| c.get()).unwrap_or(false) {
            record(new);
        }
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

fn record(size: usize) {
    // Look at who allocates (with counting off, since capturing allocates too).
    COUNTING.with(|c| c.set(false));
    let bt = std::backtrace::Backtrace::force_capture().to_string();
    // Frames are named `gemm_common::gemm::…` in debug builds; release builds print
    // `gemm_basic_generic<…>` with the source path `gemm-common-…/src/gemm.rs`.
    let from_gemm = ["gemm_common::gemm", "gemm-common", "gemm_basic_generic"]
        .iter()
        .any(|m| bt.contains(m));
    if !from_gemm {
        eprintln!("allocation of {size} bytes during execute:\n{bt}");
        let _ = FOREIGN.try_with(|n| n.set(n.get() + 1));
    }
    COUNTING.with(|c| c.set(true));
    let _ = COUNT.try_with(|n| n.set(n.get() + 1));
    let _ = BYTES.try_with(|n| n.set(n.get() + size));
    let _ = LARGEST.try_with(|n| n.set(n.get().max(size)));
}

#[global_allocator]
static A: Counting = Counting;

/// (allocations, bytes, largest, not from gemm) made by `f` on this thread.
fn allocations_in(f: impl FnOnce()) -> (usize, usize, usize, usize) {
    FOREIGN.with(|n| n.set(0));
    COUNT.with(|n| n.set(0));
    BYTES.with(|n| n.set(0));
    LARGEST.with(|n| n.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    (
        COUNT.with(|n| n.get()),
        BYTES.with(|n| n.get()),
        LARGEST.with(|n| n.get()),
        FOREIGN.with(|n| n.get()),
    )
}

#[test]
fn execute_does_not_allocate() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    for name in [
        "mlp",
        "mlp_bf16",
        "cnn",
        "transformer",
        "token_model",
        "stateful",
        "dynamic_batch",
        "cond",
    ] {
        let mut m = Module::from_file(dir.join(name).join("model.pte")).unwrap();
        let meta = m.method_meta("forward").unwrap();
        let inputs: Vec<Value> = meta
            .inputs()
            .iter()
            .map(|i| match (&i.tag, &i.tensor) {
                (Tag::Tensor, Some(t)) => Value::Tensor(Tensor::zeros(t.dtype, &t.sizes).unwrap()),
                _ => Value::Int(1),
            })
            .collect();
        let method = m.method("forward").unwrap();
        method.set_inputs(&inputs).unwrap();
        method.execute().unwrap();
        method.set_inputs(&inputs).unwrap();
        let (n, bytes, largest, foreign) = allocations_in(|| method.execute().unwrap());
        eprintln!("{name}: {n} allocations inside gemm ({bytes} bytes, largest {largest})");
        assert_eq!(foreign, 0, "{name}: etch allocated during execute");
    }
}
