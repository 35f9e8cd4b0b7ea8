//! Sibling linears as one call: a run of consecutive `aten::linear(x, w_j, None)` calls
//! that read the same activation `x` with constant 2-D weights (the q/k/v projections of
//! an attention layer, the four input projections of a Gated DeltaNet) becomes one
//! `etch::linear_group.out(x, [w_j], out=[out_j])`, when the target device's kernel set
//! has it; so does a single linear with a constant weight (a run of one). Each output
//! keeps its tensor and memory. For one row (decode) the CUDA kernel is one GEMV launch
//! over all the weights' rows instead of a launch per projection, and, its weights being
//! constants that no kernel writes, it fetches them before it waits for the previous
//! kernel (programmatic dependent launch).
//!
//! Safe to fuse: within the run no call writes `x` (each writes only its own output), and
//! the outputs must be distinct storage from each other and from `x`, so that computing
//! them at once changes nothing a later call can see.

use crate::analysis::{instructions, is_constant, tensor};
use crate::lower::SupportedOps;
use crate::rewrite::{call, is_op, kernel, op_index};
use etch_core::{Result, ScalarType};
use etch_format::schema::pte;

const LINEAR: (&str, &str) = ("aten::linear", "out");
const GROUP: (&str, &str) = ("etch::linear_group", "out");
/// `etch::linear_group.out`, as the kernel registries name it.
const GROUP_NAME: &str = "etch::linear_group.out";
/// The most linears one group takes (the kernels' `MAX_LINEARS`).
const MAX: usize = 8;

/// A linear call's (x, weight, out) when it can join a group: no bias, a 2-D constant
/// weight of x's dtype whose K matches x's last dim (K > 0), a float dtype the device's
/// group kernel takes.
fn candidate(
    plan: &pte::ExecutionPlan,
    values: &[pte::EValue],
    ins: &pte::Instruction,
    supported: &SupportedOps,
) -> Option<(i32, i32, i32)> {
    let k = call(ins)?;
    let a = k.args.as_deref()?;
    if !is_op(plan, k.op_index, LINEAR) || a.len() != 5 || a[3] != a[4] {
        return None;
    }
    let none = matches!(
        values.get(a[2] as usize)?.val,
        None | Some(pte::KernelTypes::Null(_))
    );
    let (x, w, out) = (
        tensor(values, a[0] as usize)?,
        tensor(values, a[1] as usize)?,
        tensor(values, a[3] as usize)?,
    );
    let dt = ScalarType::from_i8(x.scalar_type as i8).ok()?;
    let (xs, ws) = (x.sizes.as_deref()?, w.sizes.as_deref()?);
    let ok = none
        && is_constant(w)
        && !is_constant(out)
        && matches!(
            dt,
            ScalarType::Float | ScalarType::BFloat16 | ScalarType::Half
        )
        && w.scalar_type == x.scalar_type
        && out.scalar_type == x.scalar_type
        && ws.len() == 2
        && xs.last().is_some_and(|&k| k > 0 && k == ws[1])
        && supported.supports_dtype(GROUP_NAME, dt);
    ok.then_some((a[0], a[1], a[3]))
}

/// A new TensorList value of `items`.
fn add_list(values: &mut Vec<pte::EValue>, items: Vec<i32>) -> i32 {
    values.push(pte::EValue {
        val: Some(pte::KernelTypes::TensorList(Box::new(pte::TensorList {
            items: Some(items),
        }))),
    });
    values.len() as i32 - 1
}

/// Groups the runs of sibling linears of a method without control flow; returns how many
/// linear calls went into how many groups.
pub(crate) fn group_linears(
    plan: &mut pte::ExecutionPlan,
    supported: &SupportedOps,
) -> Result<(usize, usize)> {
    if !supported.supports(GROUP_NAME) {
        return Ok((0, 0));
    }
    let instrs = instructions(plan)?.to_vec();
    let straight = instrs
        .iter()
        .all(|i| matches!(i.instr_args, Some(pte::InstructionArguments::KernelCall(_))));
    if !straight || plan.chains.as_ref().is_none_or(|c| c.len() != 1) {
        return Ok((0, 0));
    }
    let storage = crate::planner::Storage::of(plan)?;
    let group = |v: i32| storage.groups.find(v as usize);
    let mut values = plan.values.clone().unwrap_or_default();
    let cands: Vec<Option<(i32, i32, i32)>> = instrs
        .iter()
        .map(|i| candidate(plan, &values, i, supported))
        .collect();
    let op = op_index(plan, GROUP);
    let mut out = Vec::with_capacity(instrs.len());
    let (mut grouped, mut groups) = (0, 0);
    let mut i = 0;
    while i < instrs.len() {
        let Some((x, _, _)) = cands[i] else {
            out.push(instrs[i].clone());
            i += 1;
            continue;
        };
        // The run: consecutive candidates of the same x with outputs in storage of their own.
        let mut seen = vec![group(x)];
        let mut end = i;
        while end < instrs.len() && end - i < MAX {
            match cands[end] {
                Some((x2, _, o)) if x2 == x && !seen.contains(&group(o)) => seen.push(group(o)),
                _ => break,
            }
            end += 1;
        }
        let run = &cands[i..end];
        let ws = run.iter().flatten().map(|c| c.1).collect();
        let os = run.iter().flatten().map(|c| c.2).collect();
        let (wl, ol) = (add_list(&mut values, ws), add_list(&mut values, os));
        out.push(kernel(op, vec![x, wl, ol]));
        grouped += end - i;
        groups += 1;
        i = end;
    }
    if grouped == 0 {
        return Ok((0, 0));
    }
    plan.values = Some(values);
    if let Some(c) = plan.chains.as_mut().and_then(|c| c.first_mut()) {
        c.instructions = Some(out);
        c.stacktrace = None;
    }
    Ok((grouped, groups))
}
