//! Backends that run delegated parts of a method.
//!
//! [`ExecutorBackend`] is ExecuTorch's nested-program delegate: its processed blob is a
//! complete `.pte`, run on the device named by the `target_device` compile spec.
#![warn(missing_docs)]

mod executor;

pub use executor::{EXECUTOR_BACKEND_ID, ExecutorBackend, TARGET_DEVICE_KEY, parse_target_device};

use etch_runtime::BackendRegistry;
use std::sync::Arc;

/// A backend registry holding every backend etch provides.
pub fn default_backends() -> BackendRegistry {
    let mut r = BackendRegistry::new();
    // A fresh registry has no entries, so registration cannot collide.
    let _ = r.register(EXECUTOR_BACKEND_ID, Arc::new(ExecutorBackend::new()));
    r
}
