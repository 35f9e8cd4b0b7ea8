//! Static views of values that become unplanned.
//!
//! ExecuTorch emits a view of a planned tensor as a second tensor at the same offset, with
//! no instruction: it works because both point into the same arena. Once a method input
//! or output is left unplanned (bound to the caller's memory: `alloc_graph_input=False`,
//! `alloc_graph_output=False`, implied by the skip flags), such a view would read the
//! arena instead. Here each one becomes an explicit `executorch_prim::et_view.default`,
//! which points the view at its base's memory at run time: a view of an input right at the
//! start, a view of an output right after the instruction that writes it, and an output
//! that is itself a view right after its base is written.

use crate::analysis::{Analysis, nbytes, offset_of, tensor};
use crate::planner::Storage;
use etch_core::{Error, Result};
use etch_format::schema::pte;

const ET_VIEW: &str = "executorch_prim::et_view";

/// Materializes the static views of the inputs (`inputs`) and of the outputs (`outputs`).
pub(crate) fn materialize(
    plan: &mut pte::ExecutionPlan,
    inputs: bool,
    outputs: bool,
) -> Result<()> {
    let storage = Storage::of(plan)?;
    let a = Analysis::new(plan)?;
    let values = plan.values.clone().unwrap_or_default();
    let name = plan.name.clone().unwrap_or_default();
    let nv = values.len();
    let n = a.len();
    // Where each value is written first (None: never).
    let mut written_at: Vec<Option<usize>> = vec![None; nv];
    for (i, w) in a.writes.iter().enumerate() {
        for &v in w {
            written_at[v].get_or_insert(i);
        }
    }
    let same_storage = |x: usize, v: usize| -> Result<bool> {
        let (Some(xt), Some(vt)) = (tensor(&values, x), tensor(&values, v)) else {
            return Ok(false);
        };
        let (Some(xa), Some(va)) = (&xt.allocation_info, &vt.allocation_info) else {
            return Ok(false);
        };
        if storage.groups.find(x) != storage.groups.find(v) {
            return Ok(false);
        }
        if va.memory_id != xa.memory_id
            || offset_of(va) != offset_of(xa)
            || nbytes(vt)? != nbytes(xt)?
            || vt.scalar_type != xt.scalar_type
        {
            return Err(Error::not_supported(format!(
                "method '{name}': value {v} is a partial view of value {x}, which is left unplanned; keep it planned"
            )));
        }
        Ok(true)
    };
    // (insert after instruction `at` (None: at the start), base, view)
    let mut inserts: Vec<(Option<usize>, usize, usize)> = Vec::new();
    let mut bases: Vec<(usize, Option<usize>)> = Vec::new();
    if inputs {
        bases.extend(a.inputs.iter().map(|&x| (x, None)));
    }
    if outputs {
        for &o in &a.outputs {
            match written_at[o] {
                Some(i) => bases.push((o, Some(i))),
                None if !a.inputs.contains(&o) => {
                    // The output is itself a static view: of the value written last before
                    // the end whose storage it shares.
                    let base = (0..nv)
                        .filter(|&b| b != o && written_at[b].is_some())
                        .filter(|&b| {
                            storage.groups.find(b) == storage.groups.find(o)
                                && tensor(&values, b).is_some_and(|t| t.allocation_info.is_some())
                        })
                        .max_by_key(|&b| written_at[b]);
                    if let Some(b) = base
                        && same_storage(b, o)?
                    {
                        inserts.push((written_at[b], b, o));
                    }
                }
                None => {}
            }
        }
    }
    for (x, at) in bases {
        if tensor(&values, x).is_none_or(|t| t.allocation_info.is_none()) {
            continue;
        }
        for (v, w) in written_at.iter().enumerate() {
            if v == x
                || a.inputs.contains(&v)
                || w.is_some()
                || inserts.iter().any(|&(_, _, w)| w == v)
                || tensor(&values, v).is_none()
            {
                continue;
            }
            if same_storage(x, v)? {
                inserts.push((at, x, v));
            }
        }
    }
    if inserts.is_empty() {
        return Ok(());
    }
    let ops = plan.operators.get_or_insert_with(Vec::new);
    let op = match ops.iter().position(|o| {
        o.name.as_deref() == Some(ET_VIEW) && o.overload.as_deref() == Some("default")
    }) {
        Some(k) => k,
        None => {
            ops.push(pte::Operator {
                name: Some(ET_VIEW.into()),
                overload: Some("default".into()),
            });
            ops.len() - 1
        }
    } as i32;
    let vals = plan.values.get_or_insert_with(Vec::new);
    // The instructions to add after each position (index 0: at the start).
    let mut after: Vec<Vec<pte::Instruction>> = vec![Vec::new(); n + 1];
    for (at, x, v) in inserts {
        let sizes: Vec<i32> = tensor(vals, v)
            .and_then(|t| t.sizes.clone())
            .unwrap_or_default();
        let mut items = Vec::new();
        for s in sizes {
            vals.push(pte::EValue {
                val: Some(pte::KernelTypes::Int(Box::new(pte::Int {
                    int_val: s as i64,
                }))),
            });
            items.push((vals.len() - 1) as i64);
        }
        vals.push(pte::EValue {
            val: Some(pte::KernelTypes::IntList(Box::new(pte::IntList {
                items: Some(items),
            }))),
        });
        let list = (vals.len() - 1) as i32;
        if let Some(pte::KernelTypes::Tensor(t)) = &mut vals[v].val {
            t.allocation_info = None;
        }
        after[at.map_or(0, |i| i + 1)].push(pte::Instruction {
            instr_args: Some(pte::InstructionArguments::KernelCall(Box::new(
                pte::KernelCall {
                    op_index: op,
                    args: Some(vec![x as i32, list, v as i32]),
                },
            ))),
        });
    }
    let Some(c) = plan.chains.as_mut().and_then(|c| c.first_mut()) else {
        return Ok(());
    };
    let old = c.instructions.take().unwrap_or_default();
    // New index of old instruction i: i plus everything inserted up to and before it.
    let mut new_index = vec![0usize; n + 1];
    let mut shift = 0;
    for (i, slot) in new_index.iter_mut().enumerate() {
        shift += after[i].len();
        *slot = i + shift;
    }
    let mut out = Vec::with_capacity(old.len() + shift);
    out.append(&mut after[0]);
    for (i, mut ins) in old.into_iter().enumerate() {
        if let Some(pte::InstructionArguments::JumpFalseCall(j)) = &mut ins.instr_args {
            let d = (j.destination_instruction.max(0) as usize).min(n);
            j.destination_instruction = new_index[d] as i32;
        }
        out.push(ins);
        out.append(&mut after[i + 1]);
    }
    c.instructions = Some(out);
    c.stacktrace = None;
    Ok(())
}
