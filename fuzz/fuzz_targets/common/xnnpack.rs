//! XNNPACK-delegated template programs, and swapping a delegate's payload for other bytes.

use etch::ProgramParts;
use etch_format::schema::pte::DataLocation;

/// Small programs exported with the XNNPACK partitioner (tests/fixtures/xnnpack).
pub const TEMPLATES: [&[u8]; 6] = [
    include_bytes!("../../../tests/fixtures/xnnpack/elementwise/model.pte"),
    include_bytes!("../../../tests/fixtures/xnnpack/more_nodes/model.pte"),
    include_bytes!("../../../tests/fixtures/xnnpack/linear_8da4w/model.pte"),
    include_bytes!("../../../tests/fixtures/xnnpack/tiny_cnn/model.pte"),
    include_bytes!("../../../tests/fixtures/xnnpack/tiny_cnn_fp16/model.pte"),
    include_bytes!("../../../tests/fixtures/xnnpack/static_qs8_cnn/model.pte"),
];

/// Where a delegate's processed bytes live in the program.
#[derive(Clone, Copy, Debug)]
pub enum Slot {
    Segment(usize),
    Inline(usize),
}

/// The XNNPACK delegates' payload slots, in plan and delegate order.
pub fn slots(parts: &ProgramParts) -> Vec<Slot> {
    let mut v = Vec::new();
    for plan in parts.program.execution_plan.iter().flatten() {
        for d in plan.delegates.iter().flatten() {
            if d.id.as_deref() != Some("XnnpackBackend") {
                continue;
            }
            let Some(r) = &d.processed else { continue };
            v.push(match r.location {
                DataLocation::Segment => Slot::Segment(r.index as usize),
                DataLocation::Inline => Slot::Inline(r.index as usize),
            });
        }
    }
    v
}

/// The bytes in `slot`, if it exists.
pub fn payload(parts: &ProgramParts, slot: Slot) -> Option<&[u8]> {
    match slot {
        Slot::Segment(i) => parts.segments.get(i).map(|s| s.as_slice()),
        Slot::Inline(i) => parts
            .program
            .backend_delegate_data
            .as_ref()?
            .get(i)?
            .data
            .as_deref(),
    }
}

/// Replaces the bytes in `slot`; false when it does not exist.
pub fn replace(parts: &mut ProgramParts, slot: Slot, bytes: &[u8]) -> bool {
    match slot {
        Slot::Segment(i) => match parts.segments.get_mut(i) {
            Some(s) => {
                *s = bytes.to_vec();
                true
            }
            None => false,
        },
        Slot::Inline(i) => match parts
            .program
            .backend_delegate_data
            .as_mut()
            .and_then(|d| d.get_mut(i))
        {
            Some(d) => {
                d.data = Some(bytes.to_vec());
                true
            }
            None => false,
        },
    }
}
