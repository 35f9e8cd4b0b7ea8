//! A per-operator profiler for development (`etch bench --profile`): when enabled, every
//! kernel call is timed, waiting for the method's device after it so device work is
//! counted where it happens (this serialises the device: profiled times are for finding
//! hot operators, not for end-to-end figures). Off, it costs one relaxed atomic load per
//! instruction.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

static ENABLED: AtomicBool = AtomicBool::new(false);
static TABLE: Mutex<Option<HashMap<String, (u64, Duration)>>> = Mutex::new(None);

/// Turns profiling on or off (process-wide).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether kernel calls are being timed.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Adds one call of `op` that took `d`.
pub fn record(op: &str, d: Duration) {
    if let Ok(mut t) = TABLE.lock() {
        let e = t
            .get_or_insert_with(HashMap::new)
            .entry(op.to_string())
            .or_default();
        e.0 += 1;
        e.1 += d;
    }
}

/// Adds one kernel call; with `ETCH_PROFILE_SHAPES=1` the key also holds the shape of the
/// call's last tensor argument (its output), to tell calls of one operator apart.
pub fn record_call(op: &str, values: &[etch_core::EValue], args: &[u32], d: Duration) {
    static SHAPES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let shapes =
        *SHAPES.get_or_init(|| std::env::var("ETCH_PROFILE_SHAPES").is_ok_and(|v| v == "1"));
    if !shapes {
        return record(op, d);
    }
    let shape = |a: &u32| match values.get(*a as usize) {
        Some(etch_core::EValue::Tensor(t)) => Some(format!("{:?}", t.sizes())),
        _ => None,
    };
    let first = args.iter().find_map(shape).unwrap_or_default();
    let out = args.iter().rev().find_map(shape).unwrap_or_default();
    record(&format!("{op} {first} -> {out}"), d)
}

/// One operator's totals.
#[derive(Debug, Clone)]
pub struct OpTime {
    /// The operator.
    pub op: String,
    /// Calls.
    pub calls: u64,
    /// Total time.
    pub total: Duration,
}

/// The totals so far, slowest first, and clears them.
pub fn take() -> Vec<OpTime> {
    let mut v: Vec<OpTime> = TABLE
        .lock()
        .ok()
        .and_then(|mut t| t.take())
        .unwrap_or_default()
        .into_iter()
        .map(|(op, (calls, total))| OpTime { op, calls, total })
        .collect();
    v.sort_by_key(|o| std::cmp::Reverse(o.total));
    v
}
