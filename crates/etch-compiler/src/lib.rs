//! `etch lower`: ahead-of-time passes on serialized ExecuTorch programs, in Rust.
//!
//! The passes read a program as [`ProgramParts`] (the decoded flatbuffer tables plus the
//! segment bytes) and write the same format back, so the result is a standard `.pte`
//! that etch and ExecuTorch both load.
//!
//! - [`replan`] re-plans every method's memory ([`planner`]), keeping the CPU program
//!   as it is otherwise (`etch lower --replan-only`).
//! - [`lower`] moves the operators a device supports into `ExecutorBackend` delegates
//!   (each a nested `.pte` carrying the `target_device` compile spec), inserts
//!   `et_copy` host-to-device and device-to-host copies at the delegate boundaries, and
//!   plans memory per device.
#![warn(missing_docs)]

mod analysis;
mod linear_group;
mod lower;
pub mod planner;
mod positions;
mod rewrite;
mod views;

pub use lower::{LowerOptions, LowerSummary, MethodLowering, MethodSelection, SupportedOps, lower};
pub use planner::{DEFAULT_ALIGNMENT, MethodPlanStats, PlanOptions};

use etch_core::Result;
use etch_format::ProgramParts;
/// The flatbuffer schema the passes work on.
pub use etch_format::schema;

/// Re-plans the memory of every method of `parts` in place. A method whose new plan
/// would be larger than its current one keeps its current plan, so the result never
/// plans more bytes than the input.
///
/// `alloc_graph_input` / `alloc_graph_output` set to `Some(false)` leave the inputs /
/// outputs unplanned (the caller binds them); static views of them become `et_view`
/// instructions.
pub fn replan(parts: &mut ProgramParts, opts: &PlanOptions) -> Result<Vec<MethodPlanStats>> {
    let mut stats = Vec::new();
    for plan in parts.program.execution_plan.iter_mut().flatten() {
        let inputs = opts.alloc_graph_input == Some(false);
        let outputs = opts.alloc_graph_output == Some(false);
        if inputs || outputs {
            views::materialize(plan, inputs, outputs)?;
        }
        // Leaving inputs or outputs unplanned is asked for, not a plan to fall back from.
        stats.push(planner::plan_method(
            plan,
            opts,
            None,
            !(inputs || outputs),
        )?);
    }
    Ok(stats)
}
