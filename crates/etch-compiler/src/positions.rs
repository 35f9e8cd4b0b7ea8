//! **Device positions**, applied before partitioning.
//!
//! ExecuTorch's LLM programs (`export_llm`) read the position on the host: each user of it
//! takes `select_copy(input_pos, 0, k) -> x` then `aten::_local_scalar_dense(x) -> s` (an
//! Int), and passes `s` as `start_pos` to `llama::update_cache` / `custom_sdpa` /
//! `sdpa_with_kv_cache` / `custom_quantized_sdpa` and to the RoPE table slices
//! `slice_copy(freqs, d, s, executorch_prim::add.Scalar(s, n), 1)`. Lowered as it is, `x`
//! is computed in a delegate and copied back for the host to read (a device sync every
//! call), each host `_local_scalar_dense` splits the method into another delegate, and each
//! decode step passes a new Int into the delegates, so no CUDA graph is ever replayed.
//!
//! When the target runs the consumers, this pass hands them `x` itself:
//! - a `llama::` op's `start_pos` becomes `x` (`etch_kernels::llama::StartPos`: a
//!   one-element int64 tensor, read by the kernel where it lives);
//! - the slice becomes `arange.out(n) -> i`, `add.out(i, x) -> j`,
//!   `index_select.out(src, d, j) -> out`: the same rows (a start past the table is an
//!   index error instead of a shorter slice, which the model would reject anyway);
//!
//! and drops the `add.Scalar` and the `_local_scalar_dense` once nothing else reads them.
//! `x` moves to memory of its own, past every planned byte (it now lives until its last
//! reader; the planner places it for real). An Int with another reader keeps its
//! `_local_scalar_dense`; only its rewritten readers change.

use crate::analysis::{Analysis, instructions, nbytes, offset_of, tensor};
use crate::lower::{SupportedOps, placeholder};
use crate::planner::Storage;
use crate::rewrite::{call, is_op, kernel, op_index};
use etch_core::{Result, ScalarType};
use etch_format::schema::pte;
use std::collections::{HashMap, HashSet};

const LSD: [(&str, &str); 2] = [
    ("aten::_local_scalar_dense", ""),
    ("aten::_local_scalar_dense", "default"),
];
const ADD_SCALAR: (&str, &str) = ("executorch_prim::add", "Scalar");
const SLICE: (&str, &str) = ("aten::slice_copy", "Tensor_out");
const ARANGE: (&str, &str) = ("aten::arange", "out");
const ADD: (&str, &str) = ("aten::add", "out");
const INDEX_SELECT: (&str, &str) = ("aten::index_select", "out");

/// The `llama::` ops taking a start position, and its argument slot.
const LLAMA_START: [(&str, &str, usize); 5] = [
    ("llama::update_cache", "out", 2),
    ("llama::update_cache_with_indices", "out", 2),
    ("llama::custom_sdpa", "out", 3),
    ("llama::sdpa_with_kv_cache", "out", 5),
    ("llama::custom_quantized_sdpa", "out", 3),
];

fn key((name, overload): (&str, &str)) -> String {
    etch_core::operator_name(name, overload)
}

fn int_of(values: &[pte::EValue], v: i32) -> Option<i64> {
    match values.get(v as usize)?.val.as_ref()? {
        pte::KernelTypes::Int(i) => Some(i.int_val),
        _ => None,
    }
}

fn is_int(values: &[pte::EValue], v: i32) -> bool {
    int_of(values, v).is_some()
}

/// What the pass decided for one method.
#[derive(Default)]
struct Plan {
    /// (instruction, argument slot) -> the tensor value replacing the Int there.
    llama_args: Vec<(usize, usize, i32)>,
    /// Slice instruction -> (x, n).
    slices: HashMap<usize, (i32, i32)>,
    /// Instructions dropped (`_local_scalar_dense`, `add.Scalar`).
    dropped: HashSet<usize>,
    /// Tensors moved past every planned byte.
    relocate: Vec<i32>,
}

/// Facts of one method: each value's writers and direct readers (instruction, slot); a
/// reader through a list is recorded with slot `usize::MAX`.
struct Refs {
    writers: Vec<Vec<usize>>,
    readers: Vec<Vec<(usize, usize)>>,
}

impl Refs {
    fn of(plan: &pte::ExecutionPlan, a: &Analysis, nv: usize) -> Result<Refs> {
        let mut writers = vec![Vec::new(); nv];
        let mut readers = vec![Vec::new(); nv];
        for (i, ins) in instructions(plan)?.iter().enumerate() {
            for &w in &a.writes[i] {
                writers[w].push(i);
            }
            let direct: Vec<i32> = call(ins)
                .map(|k| k.args.clone().unwrap_or_default())
                .unwrap_or_default();
            for (slot, &v) in direct.iter().enumerate() {
                readers[v as usize].push((i, slot));
            }
            for &u in &a.uses[i] {
                if !direct.contains(&(u as i32)) {
                    readers[u].push((i, usize::MAX));
                }
            }
            if call(ins).is_none() {
                for &u in &a.uses[i] {
                    readers[u].push((i, usize::MAX));
                }
            }
        }
        Ok(Refs { writers, readers })
    }
}

/// The position tensor `x` of `_local_scalar_dense` instruction `i` when the pass may hand
/// it to readers: one int64 element, planned, written once before `i` and never after, no
/// method input or output, sharing its storage with no other value.
fn position_tensor(
    plan: &pte::ExecutionPlan,
    a: &Analysis,
    refs: &Refs,
    storage: &Storage,
    i: usize,
    x: i32,
) -> bool {
    let values = plan.values.as_deref().unwrap_or(&[]);
    let xv = x as usize;
    let Some(t) = tensor(values, xv) else {
        return false;
    };
    let one = t.sizes.iter().flatten().product::<i32>() == 1;
    let single_group = (0..values.len())
        .filter(|&v| storage.groups.find(v) == storage.groups.find(xv))
        .count()
        == 1;
    t.scalar_type == pte::ScalarType::Long
        && one
        && t.allocation_info.is_some()
        && !a.inputs.contains(&xv)
        && !a.outputs.contains(&xv)
        && refs.writers[xv].len() == 1
        && refs.writers[xv][0] < i
        && single_group
}

/// Decides the rewrites of one `_local_scalar_dense(x) -> s` (instruction `i`).
#[allow(clippy::too_many_arguments)]
fn plan_one(
    plan: &pte::ExecutionPlan,
    refs: &Refs,
    supported: &SupportedOps,
    i: usize,
    x: i32,
    s: i32,
    out: &mut Plan,
) -> Result<()> {
    let values = plan.values.as_deref().unwrap_or(&[]);
    let instrs = instructions(plan)?;
    let args = |j: usize| {
        call(&instrs[j])
            .and_then(|k| k.args.clone())
            .unwrap_or_default()
    };
    let op_is =
        |j: usize, o: (&str, &str)| call(&instrs[j]).is_some_and(|k| is_op(plan, k.op_index, o));
    let slice_ok = |src: i32| {
        let dt = tensor(values, src as usize)
            .and_then(|t| ScalarType::from_i8(t.scalar_type as i8).ok());
        supported.supports_dtype(&key(ARANGE), ScalarType::Long)
            && supported.supports_dtype(&key(ADD), ScalarType::Long)
            && dt.is_some_and(|d| supported.supports_dtype(&key(INDEX_SELECT), d))
            && supported.supports_dtype(&key(INDEX_SELECT), ScalarType::Long)
    };
    let mut kept = false;
    for &(j, slot) in &refs.readers[s as usize] {
        if j == i {
            continue;
        }
        let llama = LLAMA_START.iter().find(|&&(n, o, st)| {
            op_is(j, (n, o)) && st == slot && supported.supports(&key((n, o)))
        });
        if llama.is_some() {
            out.llama_args.push((j, slot, x));
            continue;
        }
        if op_is(j, ADD_SCALAR) && slot < 2 && args(j).len() == 3 && args(j)[1 - slot] != s {
            let a = args(j);
            let (e, n) = (a[2], a[1 - slot]);
            // Every reader of e: a slice of start s, end e, step 1.
            let slices: Option<Vec<usize>> = refs.readers[e as usize]
                .iter()
                .filter(|&&(k, _)| k != j)
                .map(|&(k, sl)| {
                    let b = args(k);
                    let ok = op_is(k, SLICE)
                        && sl == 3
                        && b.len() == 7
                        && b[2] == s
                        && int_of(values, b[4]) == Some(1)
                        && is_int(values, b[1])
                        && is_int(values, n)
                        && refs.writers[e as usize] == [j]
                        && slice_ok(b[0]);
                    ok.then_some(k)
                })
                .collect();
            match slices {
                Some(ks) if !ks.is_empty() => {
                    for k in ks {
                        out.slices.insert(k, (x, n));
                    }
                    out.dropped.insert(j);
                }
                _ => kept = true,
            }
            continue;
        }
        if op_is(j, SLICE) && slot == 2 {
            // Decided with the add.Scalar that computes its end (checked below).
            continue;
        }
        kept = true;
    }
    // A slice reading s whose end is not a dropped add.Scalar keeps s.
    for &(j, slot) in &refs.readers[s as usize] {
        if op_is(j, SLICE) && slot == 2 && !out.slices.contains_key(&j) {
            kept = true;
        }
    }
    if !kept {
        out.dropped.insert(i);
    }
    Ok(())
}

/// Applies the device-position rewrite to a method without control flow, for readers the
/// device `supported` runs; returns how many Int readers now take the tensor.
pub(crate) fn device_positions(
    plan: &mut pte::ExecutionPlan,
    supported: &SupportedOps,
) -> Result<usize> {
    let a = Analysis::new(plan)?;
    let straight = instructions(plan)?.iter().all(|i| {
        matches!(
            i.instr_args,
            Some(pte::InstructionArguments::KernelCall(_))
                | Some(pte::InstructionArguments::FreeCall(_))
        )
    });
    if !straight || a.has_control_flow() || plan.chains.as_ref().is_none_or(|c| c.len() != 1) {
        return Ok(0);
    }
    let nv = plan.values.as_ref().map_or(0, |v| v.len());
    let refs = Refs::of(plan, &a, nv)?;
    let storage = Storage::of(plan)?;
    let mut p = Plan::default();
    let instrs = instructions(plan)?.to_vec();
    for (i, ins) in instrs.iter().enumerate() {
        let Some(k) = call(ins) else { continue };
        let args = k.args.as_deref().unwrap_or(&[]);
        if !LSD.iter().any(|&o| is_op(plan, k.op_index, o)) || args.len() != 2 {
            continue;
        }
        let (x, s) = (args[0], args[1]);
        let values = plan.values.as_deref().unwrap_or(&[]);
        if !is_int(values, s)
            || refs.writers[s as usize] != [i]
            || !position_tensor(plan, &a, &refs, &storage, i, x)
        {
            continue;
        }
        let before = p.llama_args.len() + p.slices.len();
        plan_one(plan, &refs, supported, i, x, s, &mut p)?;
        if p.llama_args.len() + p.slices.len() > before {
            p.relocate.push(x);
        }
    }
    let n = p.llama_args.len() + p.slices.len();
    if n > 0 {
        apply(plan, &p)?;
    }
    Ok(n)
}

/// A new planned int64 tensor `[len]` (dynamic up to `len`) at `*at`, which it advances.
fn index_tensor(values: &mut Vec<pte::EValue>, len: i32, at: &mut u64) -> i32 {
    let mut a = placeholder();
    a.memory_offset_low = *at as u32;
    a.memory_offset_high = (*at >> 32) as u32;
    *at += (8 * len.max(1) as u64).next_multiple_of(64);
    values.push(pte::EValue {
        val: Some(pte::KernelTypes::Tensor(Box::new(pte::Tensor {
            scalar_type: pte::ScalarType::Long,
            storage_offset: 0,
            sizes: Some(vec![len]),
            dim_order: Some(vec![0]),
            requires_grad: false,
            data_buffer_idx: 0,
            allocation_info: Some(Box::new(a)),
            layout: 0,
            shape_dynamism: pte::TensorShapeDynamism::DynamicBound,
            extra_tensor_info: None,
        }))),
    });
    values.len() as i32 - 1
}

/// Rewrites the method as `p` says.
fn apply(plan: &mut pte::ExecutionPlan, p: &Plan) -> Result<()> {
    let mut values = plan.values.clone().unwrap_or_default();
    // Past the end of every planned tensor.
    let mut at = 0u64;
    for v in 0..values.len() {
        if let Some(t) = tensor(&values, v)
            && let Some(al) = &t.allocation_info
        {
            at = at.max(offset_of(al) + nbytes(t)? as u64);
        }
    }
    at = at.next_multiple_of(64);
    for &x in &p.relocate {
        if let Some(pte::KernelTypes::Tensor(t)) = values[x as usize].val.as_mut()
            && let Some(al) = t.allocation_info.as_mut()
        {
            al.memory_offset_low = at as u32;
            al.memory_offset_high = (at >> 32) as u32;
            at += 64;
        }
    }
    let one = values.len() as i32;
    values.push(pte::EValue {
        val: Some(pte::KernelTypes::Int(Box::new(pte::Int { int_val: 1 }))),
    });
    let (arange, add, select) = (
        op_index(plan, ARANGE),
        op_index(plan, ADD),
        op_index(plan, INDEX_SELECT),
    );
    let mut instrs = instructions(plan)?.to_vec();
    for &(j, slot, x) in &p.llama_args {
        if let Some(pte::InstructionArguments::KernelCall(k)) = instrs[j].instr_args.as_mut()
            && let Some(a) = k.args.as_mut()
        {
            a[slot] = x;
        }
    }
    let mut out = Vec::with_capacity(instrs.len() + 2 * p.slices.len());
    for (j, ins) in instrs.drain(..).enumerate() {
        if p.dropped.contains(&j) {
            continue;
        }
        let Some(&(x, n)) = p.slices.get(&j) else {
            out.push(ins);
            continue;
        };
        let b = call(&ins).and_then(|k| k.args.clone()).unwrap_or_default();
        let (src, dim, res) = (b[0], b[1], b[5]);
        let len = tensor(&values, res as usize)
            .and_then(|t| {
                let sz = t.sizes.as_deref()?;
                let d = int_of(&values, dim)?;
                let d = if d < 0 { d + sz.len() as i64 } else { d };
                sz.get(usize::try_from(d).ok()?).copied()
            })
            .unwrap_or(1);
        let i0 = index_tensor(&mut values, len, &mut at);
        let i1 = index_tensor(&mut values, len, &mut at);
        out.push(kernel(arange, vec![n, i0, i0]));
        out.push(kernel(add, vec![i0, x, one, i1, i1]));
        out.push(kernel(select, vec![src, dim, i1, res, res]));
    }
    plan.values = Some(values);
    if let Some(c) = plan.chains.as_mut().and_then(|c| c.first_mut()) {
        c.instructions = Some(out);
        c.stacktrace = None;
    }
    Ok(())
}
