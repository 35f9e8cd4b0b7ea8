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
    v.sort_by(|a, b| b.total.cmp(&a.total));
    v
}
