//! Mutable state that a program's methods declare as shared.
//!
//! ExecuTorch's exporter, with `MemoryPlanningPass(share_mutable_buffers=True)`, places
//! every mutable buffer of every method in planned buffer 1 (internal memory id 2, after
//! the activations' buffer 0), at the same offset wherever the same buffer (by fully
//! qualified name) appears, and gives every method the same size for that buffer. Upstream
//! runs such a program with `Module(..., share_memory_arenas=true)` (or the Python
//! `Runtime`, which shares all host arenas), so `forward` updating the state is seen by
//! `get_state`.
//!
//! etch recognizes that layout and shares that one buffer between the methods of a
//! module, while every other buffer stays the method's own. The rule, checked before
//! anything is shared:
//!
//! - the program has at least two methods, and every method has exactly two planned
//!   buffers, both on the host, the second of the same non-zero size in every method;
//! - in that buffer, the tensors of any two methods either occupy exactly the same bytes
//!   (the same state: same offset, same size) or do not overlap at all.
//!
//! A program that breaks the rule does not declare sharing: each method keeps its own
//! buffers, so no method can overwrite bytes another method relies on. Methods of one
//! module run one at a time (`&mut Module`), so the shared bytes are never written by two
//! methods at once.

use crate::parse::{DataPlacement, decode_tensor};
use etch_core::{Device, Result};
use etch_format::schema::pte;
use etch_format::{Program, fb_err};

/// The planned buffer (0-based, as in [`crate::MethodMeta`]) that upstream's
/// `share_mutable_buffers` places mutable state in.
pub const SHARED_STATE_BUFFER: usize = 1;

/// The byte ranges `(offset, nbytes)` of the tensors a method plans in internal memory id
/// `memory_id`.
fn planned_ranges(plan: &pte::ExecutionPlanRef<'_>, memory_id: u32) -> Result<Vec<(u64, u64)>> {
    let mut out = Vec::new();
    let Some(values) = plan.values().map_err(fb_err("values"))? else {
        return Ok(out);
    };
    for v in values.iter() {
        let v = v.map_err(fb_err("value"))?;
        let Some(pte::KernelTypesRef::Tensor(t)) = v.val().map_err(fb_err("value"))? else {
            continue;
        };
        let d = decode_tensor(&t)?;
        if let DataPlacement::Planned {
            memory_id: m,
            offset,
            ..
        } = d.placement
            && m == memory_id
        {
            out.push((offset, d.nbytes as u64));
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// True when two sorted range lists agree: every pair of ranges either coincides or is
/// disjoint.
fn consistent(a: &[(u64, u64)], b: &[(u64, u64)]) -> bool {
    a.iter().all(|&(ao, an)| {
        b.iter().all(|&(bo, bn)| {
            (ao, an) == (bo, bn) || ao.saturating_add(an) <= bo || bo.saturating_add(bn) <= ao
        })
    })
}

/// The size of the shared-state buffer when the program declares one (see the module
/// docs for the rule), else `None`.
pub fn declared_shared_state(program: &Program) -> Result<Option<u64>> {
    let names = program.method_names();
    if names.len() < 2 {
        return Ok(None);
    }
    let mut size = None;
    let mut ranges: Vec<Vec<(u64, u64)>> = Vec::with_capacity(names.len());
    for name in names {
        let meta = crate::MethodMeta::new(program, name)?;
        if meta.num_memory_planned_buffers() != SHARED_STATE_BUFFER + 1 {
            return Ok(None);
        }
        for i in 0..=SHARED_STATE_BUFFER {
            if meta.memory_planned_buffer_device(i)? != Device::CPU {
                return Ok(None);
            }
        }
        let s = meta.memory_planned_buffer_size(SHARED_STATE_BUFFER)?;
        if s == 0 || size.is_some_and(|prev| prev != s) {
            return Ok(None);
        }
        size = Some(s);
        let plan = program.plan(name)?;
        ranges.push(planned_ranges(&plan, SHARED_STATE_BUFFER as u32 + 1)?);
    }
    for (i, a) in ranges.iter().enumerate() {
        if ranges[i + 1..].iter().any(|b| !consistent(a, b)) {
            return Ok(None);
        }
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::consistent;

    #[test]
    fn ranges_must_coincide_or_be_disjoint() {
        assert!(consistent(&[(0, 16)], &[(0, 16)]));
        assert!(consistent(&[(0, 16)], &[(16, 16)]));
        assert!(consistent(&[(0, 16), (16, 4)], &[]));
        assert!(!consistent(&[(0, 16)], &[(0, 8)]));
        assert!(!consistent(&[(0, 16)], &[(8, 16)]));
        assert!(!consistent(&[(16, 16)], &[(0, 32)]));
    }
}
