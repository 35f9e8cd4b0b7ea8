//! Backends that run delegated parts of a method.
//!
//! [`ExecutorBackend`] is ExecuTorch's nested-program delegate: its processed blob is a
//! complete `.pte`, run on the device named by the `target_device` compile spec.
//! [`XnnpackBackend`] runs the XNNPACK delegates of ExecuTorch's default CPU recipe
//! (`XnnpackPartitioner`) with etch's own CPU kernels.
#![warn(missing_docs)]

mod executor;
pub mod xnnpack;

pub use executor::{
    EXECUTOR_BACKEND_ID, ExecutorBackend, GraphCounts, TARGET_DEVICE_KEY, graph_counts,
    parse_target_device,
};
pub use xnnpack::{XNNPACK_BACKEND_ID, XnnpackBackend};

use etch_core::{EValue, Error, KernelContext, Result};
use etch_runtime::BackendRegistry;
use std::sync::Arc;

/// Rejects a delegate call in which the memory of output argument `o` (its whole capacity)
/// partly overlaps that of another tensor argument. Both backends bind the call's tensors
/// into graphs of their own, whose kernels read inputs while writing outputs, so such a
/// call (a malformed or hostile program's memory plan) would give a kernel overlapping
/// input and output slices. Tensors at the same address are left alone: an output planned
/// over its input (a state updated in place, a view) is what lowering produces.
pub(crate) fn check_output_overlap(args: &KernelContext<'_>, o: usize) -> Result<()> {
    let range = |v: &EValue| match v {
        EValue::Tensor(t) => t.memory_range(),
        _ => None,
    };
    let Some(ro) = range(args.value(o)?) else {
        return Ok(());
    };
    for j in 0..args.num_args() {
        if let Some(r) = range(args.value(j)?)
            && r.start != ro.start
            && r.start < ro.end
            && ro.start < r.end
        {
            return Err(Error::invalid_program(format!(
                "{}: output argument {o} ({:#x}..{:#x}) partly overlaps argument {j} ({:#x}..{:#x})",
                args.op_name(),
                ro.start,
                ro.end,
                r.start,
                r.end
            )));
        }
    }
    Ok(())
}

/// A backend registry holding every backend etch provides.
pub fn default_backends() -> BackendRegistry {
    let mut r = BackendRegistry::new();
    // A fresh registry has no entries, so registration cannot collide.
    let _ = r.register(EXECUTOR_BACKEND_ID, Arc::new(ExecutorBackend::new()));
    let _ = r.register(XNNPACK_BACKEND_ID, Arc::new(XnnpackBackend::new()));
    r
}
