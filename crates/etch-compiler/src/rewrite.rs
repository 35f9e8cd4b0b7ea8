//! Rewrites that make exported programs cheaper to run, applied before partitioning.
//!
//! **Broadcast matmul.** `torch.matmul` of a 3-D activation `[B, M, K]` by a 2-D weight
//! `[K, N]` is exported as `expand_copy(weight, [B, K, N])` followed by `bmm`: the weight
//! is copied `B` times on every call (torchvision's ViT attention does this with `B` the
//! sequence length: a 1.4 GB copy per layer at batch 8). When the expanded tensor feeds
//! only that `bmm` and the activation is row-major, the pair becomes
//! `view_copy(a, [B*M, K])`, `mm(·, weight)`, `view_copy(·, [B, M, N])`: the same values,
//! one GEMM, no copy of the weight.

use crate::analysis::{instructions, nbytes, offset_of, tensor};
use crate::lower::placeholder;
use etch_core::Result;
use etch_format::schema::pte;

const EXPAND: (&str, &str) = ("aten::expand_copy", "out");
const BMM: (&str, &str) = ("aten::bmm", "out");
const VIEW: (&str, &str) = ("aten::view_copy", "out");
const MM: (&str, &str) = ("aten::mm", "out");

pub(crate) fn op_index(plan: &mut pte::ExecutionPlan, (name, overload): (&str, &str)) -> i32 {
    let ops = plan.operators.get_or_insert_with(Vec::new);
    if let Some(i) = ops
        .iter()
        .position(|o| o.name.as_deref() == Some(name) && o.overload.as_deref() == Some(overload))
    {
        return i as i32;
    }
    ops.push(pte::Operator {
        name: Some(name.into()),
        overload: Some(overload.into()),
    });
    ops.len() as i32 - 1
}

pub(crate) fn is_op(plan: &pte::ExecutionPlan, idx: i32, (name, overload): (&str, &str)) -> bool {
    plan.operators
        .as_ref()
        .and_then(|o| o.get(idx as usize))
        .is_some_and(|o| o.name.as_deref() == Some(name) && o.overload.as_deref() == Some(overload))
}

pub(crate) fn call(i: &pte::Instruction) -> Option<&pte::KernelCall> {
    match &i.instr_args {
        Some(pte::InstructionArguments::KernelCall(k)) => Some(k),
        _ => None,
    }
}

fn sizes(values: &[pte::EValue], v: usize) -> Option<Vec<i64>> {
    let t = tensor(values, v)?;
    let row_major = t
        .dim_order
        .as_ref()
        .is_none_or(|d| d.iter().enumerate().all(|(i, &x)| x as usize == i));
    row_major.then(|| t.sizes.iter().flatten().map(|&s| s as i64).collect())
}

/// A new int list value holding `sz` (and its Int items).
fn add_list(values: &mut Vec<pte::EValue>, sz: &[i64]) -> i32 {
    let mut items = Vec::new();
    for &s in sz {
        items.push(values.len() as i64);
        values.push(pte::EValue {
            val: Some(pte::KernelTypes::Int(Box::new(pte::Int { int_val: s }))),
        });
    }
    values.push(pte::EValue {
        val: Some(pte::KernelTypes::IntList(Box::new(pte::IntList {
            items: Some(items),
        }))),
    });
    values.len() as i32 - 1
}

/// A new row-major planned tensor like `like`, of sizes `sz`, placed at `*at` (past every
/// planned byte, so that the storage analysis sees it overlap nothing; the planner then
/// places it for real), which it advances.
fn add_tensor(values: &mut Vec<pte::EValue>, like: usize, sz: &[i64], at: &mut u64) -> Option<i32> {
    let mut t = tensor(values, like)?.clone();
    t.sizes = Some(sz.iter().map(|&s| s as i32).collect());
    t.dim_order = Some((0..sz.len() as u8).collect());
    let mut a = placeholder();
    a.memory_offset_low = *at as u32;
    a.memory_offset_high = (*at >> 32) as u32;
    t.allocation_info = Some(Box::new(a));
    *at += (nbytes(&t).ok()? as u64).next_multiple_of(64);
    t.shape_dynamism = pte::TensorShapeDynamism::Static;
    values.push(pte::EValue {
        val: Some(pte::KernelTypes::Tensor(Box::new(t))),
    });
    Some(values.len() as i32 - 1)
}

pub(crate) fn kernel(op: i32, args: Vec<i32>) -> pte::Instruction {
    pte::Instruction {
        instr_args: Some(pte::InstructionArguments::KernelCall(Box::new(
            pte::KernelCall {
                op_index: op,
                args: Some(args),
            },
        ))),
    }
}

/// Applies the broadcast-matmul rewrite to a method without control flow; returns how
/// many `bmm`s became `mm`s.
pub(crate) fn broadcast_matmul(plan: &mut pte::ExecutionPlan) -> Result<usize> {
    let instrs = instructions(plan)?.to_vec();
    let straight = instrs.iter().all(|i| {
        matches!(
            i.instr_args,
            Some(pte::InstructionArguments::KernelCall(_))
                | Some(pte::InstructionArguments::FreeCall(_))
        )
    });
    if !straight || plan.chains.as_ref().is_none_or(|c| c.len() != 1) {
        return Ok(0);
    }
    let storage = crate::planner::Storage::of(plan)?;
    let group = |v: i32| storage.groups.find(v as usize);
    let mut values = plan.values.clone().unwrap_or_default();
    let nv = values.len();
    // References of each value over all instructions (list items included).
    let mut refs = vec![0usize; values.len()];
    for k in instrs.iter().filter_map(call) {
        for &a in k.args.iter().flatten() {
            if let Some(r) = refs.get_mut(a as usize) {
                *r += 1;
            }
            if let Some(pte::KernelTypes::TensorList(l)) =
                values.get(a as usize).and_then(|v| v.val.as_ref())
            {
                for &x in l.items.iter().flatten() {
                    if let Some(r) = refs.get_mut(x as usize) {
                        *r += 1;
                    }
                }
            }
        }
    }
    let io: Vec<i32> = plan
        .inputs
        .iter()
        .flatten()
        .chain(plan.outputs.iter().flatten())
        .copied()
        .collect();
    // Storage group of an expand's output (its static views share it) -> (instruction,
    // weight value).
    let mut expands = std::collections::HashMap::new();
    for (j, k) in instrs
        .iter()
        .enumerate()
        .filter_map(|(j, i)| call(i).map(|k| (j, k)))
    {
        let a = k.args.as_deref().unwrap_or(&[]);
        if is_op(plan, k.op_index, EXPAND) && a.len() == 5 && a[3] == a[4] {
            expands.insert(group(a[3]), (j, a[0]));
        }
    }
    // References of each storage group, and its members.
    let mut group_refs = std::collections::HashMap::<usize, usize>::new();
    for (v, &r) in refs.iter().enumerate() {
        *group_refs.entry(storage.groups.find(v)).or_default() += r;
    }
    let (view, mm) = (op_index(plan, VIEW), op_index(plan, MM));
    // Past the end of every planned tensor.
    let mut at = 0u64;
    for v in 0..nv {
        if let Some(t) = tensor(&values, v)
            && let Some(a) = &t.allocation_info
        {
            at = at.max(offset_of(a) + nbytes(t)? as u64);
        }
    }
    at = at.next_multiple_of(64);
    let mut out: Vec<pte::Instruction> = Vec::with_capacity(instrs.len());
    let mut dropped = vec![false; instrs.len()];
    let mut rewrites = Vec::new();
    for (i, k) in instrs
        .iter()
        .enumerate()
        .filter_map(|(i, x)| call(x).map(|k| (i, k)))
    {
        let a = k.args.as_deref().unwrap_or(&[]);
        if !is_op(plan, k.op_index, BMM) || a.len() != 4 || a[2] != a[3] {
            continue;
        }
        let (lhs, rhs, res) = (a[0], a[1], a[2]);
        let g = group(rhs);
        let Some(&(j, w)) = expands.get(&g) else {
            continue;
        };
        // The expanded tensor (and its views) is written by the expand and read by this
        // bmm only.
        let members: Vec<usize> = (0..nv).filter(|&v| storage.groups.find(v) == g).collect();
        if group_refs.get(&g) != Some(&3)
            || members.iter().any(|&v| io.contains(&(v as i32)))
            || j > i
        {
            continue;
        }
        let (Some(ls), Some(ws), Some(rs)) = (
            sizes(&values, lhs as usize),
            sizes(&values, w as usize),
            sizes(&values, res as usize),
        ) else {
            continue;
        };
        let dynamic = |v: i32| {
            tensor(&values, v as usize)
                .is_some_and(|t| t.shape_dynamism != pte::TensorShapeDynamism::Static)
        };
        if ls.len() != 3
            || ws.len() != 2
            || rs.len() != 3
            || ls[2] != ws[0]
            || dynamic(lhs)
            || dynamic(res)
        {
            continue;
        }
        let (b, m, kk, n) = (ls[0], ls[1], ls[2], ws[1]);
        let (Some(a2), Some(y2)) = (
            add_tensor(&mut values, lhs as usize, &[b * m, kk], &mut at),
            add_tensor(&mut values, res as usize, &[b * m, n], &mut at),
        ) else {
            continue;
        };
        let (l1, l2) = (
            add_list(&mut values, &[b * m, kk]),
            add_list(&mut values, &[b, m, n]),
        );
        // The expanded tensor and its views are no longer written or read: no memory.
        for &v in &members {
            if let Some(pte::KernelTypes::Tensor(t)) = values[v].val.as_mut() {
                t.allocation_info = None;
            }
        }
        dropped[j] = true;
        rewrites.push((
            i,
            [
                kernel(view, vec![lhs, l1, a2, a2]),
                kernel(mm, vec![a2, w, y2, y2]),
                kernel(view, vec![y2, l2, res, res]),
            ],
        ));
    }
    if rewrites.is_empty() {
        return Ok(0);
    }
    let n = rewrites.len();
    let mut by_index: std::collections::HashMap<usize, [pte::Instruction; 3]> =
        rewrites.into_iter().collect();
    for (i, ins) in instrs.into_iter().enumerate() {
        if dropped[i] {
            continue;
        }
        match by_index.remove(&i) {
            Some(three) => out.extend(three),
            None => out.push(ins),
        }
    }
    plan.values = Some(values);
    if let Some(c) = plan.chains.as_mut().and_then(|c| c.first_mut()) {
        c.instructions = Some(out);
        c.stacktrace = None;
    }
    Ok(n)
}
