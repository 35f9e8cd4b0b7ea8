//! Load-time folding of constant work: a shape or dtype-conversion kernel whose tensor
//! inputs are all constants (program constants, external weights, or earlier folded
//! results) and whose arguments are fixed runs once when the method loads, into memory of
//! its own, and is dropped from the instruction stream. Exported programs transpose every
//! linear layer's weight with `permute_copy` on each call; folded, the transposed weight
//! is computed once (at the cost of keeping it next to the original).

use crate::memory::Buffer;
use etch_core::{DeviceRegistry, EValue, KernelContext, KernelFn, Result};
use std::collections::HashSet;

/// Operators worth folding: pure copies that reshape, transpose or convert a tensor.
const FOLDABLE: &[&str] = &[
    "aten::permute_copy.out",
    "aten::t_copy.out",
    "aten::transpose_copy.int_out",
    "aten::view_copy.out",
    "aten::_to_copy.out",
    "dim_order_ops::_to_dim_order_copy.out",
    "dim_order_ops::_clone_dim_order.out",
    "aten::clone.out",
    "aten::unsqueeze_copy.out",
    "aten::squeeze_copy.dim_out",
    "aten::squeeze_copy.dims_out",
    "aten::squeeze_copy.out",
    "aten::expand_copy.out",
    "aten::slice_copy.Tensor_out",
    "aten::select_copy.int_out",
    "aten::alias_copy.out",
    "aten::detach_copy.out",
];

/// What the folder needs to know about the method being loaded.
pub(crate) struct FoldInput<'a> {
    pub values: &'a mut [EValue],
    pub constant: &'a mut [bool],
    /// Plain intermediates: planned, no initial state, not a method input or output.
    pub intermediate: &'a [bool],
    /// Each planned tensor's (buffer, offset): tensors sharing one are views of each other.
    pub location: &'a [Option<(u32, u64)>],
    pub runtime_ints: &'a HashSet<u32>,
    pub kernels: &'a [KernelFn],
    pub op_names: &'a [String],
    pub devices: &'a DeviceRegistry,
    pub host_access: bool,
    pub owned: &'a mut Vec<Buffer>,
    pub device_context: Option<&'a (dyn std::any::Any + Send + Sync)>,
}

/// One instruction of a chain as the folder sees it: operator index, arguments, whether
/// any int list argument changes at run time.
pub(crate) struct KernelRef<'a> {
    pub op: usize,
    pub args: &'a [u32],
    pub refreshed: bool,
}

/// Folds what it can of `instrs` (kernel instructions in execution order, `None` for
/// others); returns the indices of the folded ones.
pub(crate) fn fold(f: &mut FoldInput<'_>, instrs: &[Option<KernelRef<'_>>]) -> Result<Vec<usize>> {
    // A value an instruction writes appears twice in its arguments (ExecuTorch passes each
    // out argument again as a return value).
    let mut written = vec![false; f.values.len()];
    for k in instrs.iter().flatten() {
        for (n, &a) in k.args.iter().enumerate() {
            if k.args[..n].contains(&a) {
                written[a as usize] = true;
            }
        }
    }
    // Locations that a never-written tensor also names (a static view): folding a tensor
    // there would leave the view reading stale memory.
    let mut viewed = HashSet::new();
    for (v, loc) in f.location.iter().enumerate() {
        if let Some(l) = loc
            && !written[v]
            && f.intermediate[v]
        {
            viewed.insert(*l);
        }
    }
    let mut folded = Vec::new();
    for (i, k) in instrs.iter().enumerate() {
        let Some(k) = k else { continue };
        if k.refreshed || !FOLDABLE.contains(&f.op_names[k.op].as_str()) {
            continue;
        }
        let Some(out) = fold_target(f, k, &viewed) else {
            continue;
        };
        let EValue::Tensor(t) = &mut f.values[out] else {
            continue;
        };
        let buf = Buffer::allocate(t.capacity().max(1), t.device(), f.devices)?;
        t.set_data(buf.base(), t.capacity());
        f.owned.push(buf);
        // SAFETY: every tensor points at memory the method owns (the buffer just made, its
        // arenas, uploaded constants) or at the program's bytes, all alive for the call.
        let mut ctx = unsafe { KernelContext::new(f.values, k.args, &f.op_names[k.op]) }
            .with_devices(f.devices, f.host_access)
            .with_device_context(f.device_context);
        (f.kernels[k.op])(&mut ctx)
            .map_err(|e| e.context(format!("folding constant {}", f.op_names[k.op])))?;
        f.constant[out] = true;
        folded.push(i);
    }
    Ok(folded)
}

/// The one tensor `k` writes, if `k` can be folded: it is a plain intermediate no static
/// view shares, and every other argument is a constant or fixed.
fn fold_target(
    f: &FoldInput<'_>,
    k: &KernelRef<'_>,
    viewed: &HashSet<(u32, u64)>,
) -> Option<usize> {
    let mut out = None;
    for (n, &a) in k.args.iter().enumerate() {
        let i = a as usize;
        let twice = k.args[..n].contains(&a) || k.args[n + 1..].contains(&a);
        match f.values.get(i)? {
            EValue::Tensor(_) if twice => {
                let free = f.location[i].is_some_and(|l| !viewed.contains(&l));
                if !f.intermediate[i] || !free || out.is_some_and(|o| o != i) {
                    return None;
                }
                out = Some(i);
            }
            EValue::Tensor(_) if !f.constant[i] => return None,
            EValue::Int(_) if f.runtime_ints.contains(&a) => return None,
            EValue::IntList(l) if l.items.iter().any(|x| f.runtime_ints.contains(x)) => {
                return None;
            }
            EValue::TensorList(_) | EValue::OptionalTensorList(_) => return None,
            _ => {}
        }
    }
    out
}
