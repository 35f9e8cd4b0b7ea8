//! A [`Profile`] as an ETDump, named as upstream's runtime names its events so that
//! `executorch.devtools.Inspector` reads it as it reads one from ExecuTorch:
//!
//! - each run is a `RunData` block named `Execute` (upstream's `create_event_block`);
//! - the whole execution is `Method::execute`, with chain -1 and instruction id 0 (the
//!   unset chain and debug handle upstream records it with);
//! - a kernel call is `native_call_<op>` (the name upstream's generated kernel wrappers
//!   give, the operator without its namespace: `native_call_add.out`) inside
//!   `OPERATOR_CALL`, both with the instruction's chain and index. etch does no work per
//!   call outside the kernel, so both span the same interval;
//! - a delegate call is `DELEGATE_CALL` at its instruction, and each operator run inside
//!   it a delegate event at the same instruction, identified by the string delegate debug
//!   id `<op> #<k>` (the k-th call of that operator in the call, as upstream's XNNPACK
//!   profiler names its operators), so that every event of a run has its own signature.
//!
//! Times are nanoseconds (the Inspector's default source time scale). Events are in the
//! order they ended, as upstream writes them.

use super::{Event, EventKind, Profile};
use etch_format::etdump::{ETDUMP_VERSION, schema, write_etdump};

/// The name of upstream's event block for one execution.
pub const RUN_NAME: &str = "Execute";

impl Profile {
    /// The runs as a size-prefixed ETDump flatbuffer (`.etdp`).
    pub fn to_etdump(&self) -> Vec<u8> {
        write_etdump(&self.to_etdump_schema())
    }

    /// The runs as ETDump tables (see the module documentation for the names).
    pub fn to_etdump_schema(&self) -> schema::EtDump {
        let run_data = self.runs.iter().map(|r| schema::RunData {
            name: Some(RUN_NAME.to_string()),
            bundled_input_index: -1,
            allocators: None,
            events: Some(r.events.iter().flat_map(upstream_events).collect()),
        });
        schema::EtDump {
            version: ETDUMP_VERSION,
            run_data: Some(run_data.collect()),
        }
    }
}

/// The name upstream's kernel wrappers give their events (`native_call_add.out` for
/// `aten::add.out`).
pub fn native_call_name(op: &str) -> String {
    let bare = op.rsplit_once("::").map_or(op, |(_, name)| name);
    format!("native_call_{bare}")
}

/// The string delegate debug id of the `ordinal`-th call of `op` in a delegate call.
pub fn delegate_op_id(op: &str, ordinal: u32) -> String {
    format!("{op} #{ordinal}")
}

fn profile_event(e: &Event, name: Option<String>, delegate_id: Option<String>) -> schema::Event {
    schema::Event {
        profile_event: Some(Box::new(schema::ProfileEvent {
            name,
            chain_index: e.chain,
            instruction_id: e.instruction,
            delegate_debug_id_int: -1,
            delegate_debug_id_str: delegate_id,
            delegate_debug_metadata: None,
            start_time: e.start_ns,
            end_time: e.end_ns,
        })),
        allocation_event: None,
        debug_event: None,
    }
}

fn upstream_events(e: &Event) -> Vec<schema::Event> {
    let named = |name: &str| profile_event(e, Some(name.to_string()), None);
    match e.kind {
        EventKind::Method => {
            let method = Event {
                chain: -1,
                instruction: 0,
                ..e.clone()
            };
            vec![profile_event(&method, Some("Method::execute".into()), None)]
        }
        EventKind::Operator => vec![named(&native_call_name(&e.name)), named("OPERATOR_CALL")],
        EventKind::Delegate => vec![named("DELEGATE_CALL")],
        EventKind::DelegateOp => {
            vec![profile_event(
                e,
                None,
                Some(delegate_op_id(&e.name, e.ordinal)),
            )]
        }
    }
}
