//! Backends that run delegated parts of a method.
//!
//! [`ExecutorBackend`] is ExecuTorch's nested-program delegate: its processed blob is a
//! complete `.pte`, run on the device named by the `target_device` compile spec.
//! [`XnnpackBackend`] runs the XNNPACK delegates of ExecuTorch's default CPU recipe
//! (`XnnpackPartitioner`) with etch's own CPU kernels.
#![warn(missing_docs)]

mod executor;
pub mod xnnpack;

pub use executor::{EXECUTOR_BACKEND_ID, ExecutorBackend, TARGET_DEVICE_KEY, parse_target_device};
pub use xnnpack::{XNNPACK_BACKEND_ID, XnnpackBackend};

use etch_runtime::BackendRegistry;
use std::sync::Arc;

/// A backend registry holding every backend etch provides.
pub fn default_backends() -> BackendRegistry {
    let mut r = BackendRegistry::new();
    // A fresh registry has no entries, so registration cannot collide.
    let _ = r.register(EXECUTOR_BACKEND_ID, Arc::new(ExecutorBackend::new()));
    let _ = r.register(XNNPACK_BACKEND_ID, Arc::new(XnnpackBackend::new()));
    r
}
