//! Load-time folding of constant work: a shape or dtype-conversion kernel whose tensor
//! inputs are all constants (program constants, external weights, or earlier folded
//! results) and whose arguments are fixed runs once when the method loads, into memory of
//! its own, and is dropped from the instruction stream. Exported programs transpose every
//! linear layer's weight with `permute_copy` on each call; folded, the transposed weight
//! is computed once (at the cost of keeping it next to the original).

use crate::memory::Buffer;
use etch_core::{DeviceRegistry, EValue, KernelContext, KernelFn, Result};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

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
    pub owned: &'a mut Vec<Arc<Buffer>>,
    pub device_context: Option<&'a (dyn std::any::Any + Send + Sync)>,
}

/// One instruction of a chain as the load-time passes (folding, fusion) see it: a kernel
/// call (`op`: its operator index) or another instruction reading `args` (a delegate
/// call; no arguments for the rest).
pub(crate) struct CallRef<'a> {
    pub op: Option<usize>,
    pub args: &'a [u32],
    /// Some int list argument changes at run time.
    pub refreshed: bool,
}

/// A kernel call of a chain: its operator, arguments, whether an int list changes at run
/// time.
struct KernelRef<'a> {
    op: usize,
    args: &'a [u32],
    refreshed: bool,
}

impl<'a> CallRef<'a> {
    fn kernel(&self) -> Option<KernelRef<'a>> {
        self.op.map(|op| KernelRef {
            op,
            args: self.args,
            refreshed: self.refreshed,
        })
    }
}

/// Folds what it can of the kernel calls of `instrs` (one chain, in execution order; the
/// folder looks at kernel calls only); returns the indices of the folded ones.
pub(crate) fn fold(f: &mut FoldInput<'_>, instrs: &[CallRef<'_>]) -> Result<Vec<usize>> {
    let instrs: Vec<Option<KernelRef<'_>>> = instrs.iter().map(CallRef::kernel).collect();
    // A value an instruction writes appears twice in its arguments (ExecuTorch passes each
    // out argument again as a return value). Count the instructions writing each value, and
    // note the values in-place operators (`aten::copy_`, ...) write.
    let mut writers = vec![0u32; f.values.len()];
    let mut in_place = vec![false; f.values.len()];
    for k in instrs.iter().flatten() {
        let inplace = f.op_names[k.op].ends_with('_');
        for &a in written_by(f.values, k.args) {
            writers[a as usize] += 1;
            in_place[a as usize] |= inplace;
        }
    }
    // The first instruction using each value, and the instructions writing each location.
    let mut first_use: Vec<Option<usize>> = vec![None; f.values.len()];
    let mut writes: HashMap<(u32, u64), Vec<usize>> = HashMap::new();
    for (i, k) in instrs.iter().enumerate() {
        let Some(k) = k else { continue };
        for &a in k.args {
            first_use[a as usize].get_or_insert(i);
        }
        for &a in written_by(f.values, k.args) {
            if let Some(l) = f.location[a as usize] {
                writes.entry(l).or_default().push(i);
            }
        }
    }
    // Tensors that could see a folded tensor's old memory: a static view (never written)
    // of it, or a tensor updated in place at its location. Folding a tensor there would
    // leave them reading or writing stale memory. The memory plan reuses a location for
    // tensors whose lifetimes do not overlap, so a static view at a location views the
    // tensor last written there before its first use; one no instruction here uses
    // counts as a view of every tensor there.
    let mut views: HashMap<(u32, u64), Vec<Option<usize>>> = HashMap::new();
    let mut updated = HashSet::new();
    for (v, loc) in f.location.iter().enumerate() {
        match loc {
            Some(l) if f.intermediate[v] && in_place[v] => {
                updated.insert(*l);
            }
            Some(l) if f.intermediate[v] && writers[v] == 0 => {
                views.entry(*l).or_default().push(first_use[v]);
            }
            _ => {}
        }
    }
    let mut folded = Vec::new();
    for (i, k) in instrs.iter().enumerate() {
        let Some(k) = k else { continue };
        if k.refreshed || !FOLDABLE.contains(&f.op_names[k.op].as_str()) {
            continue;
        }
        // Whether a tensor at `l` could see the tensor instruction `i` writes there.
        let seen = |l: &(u32, u64)| {
            let views_it = |u: &Option<usize>| match *u {
                None => true,
                Some(u) => {
                    u > i
                        && writes
                            .get(l)
                            .is_none_or(|w| w.iter().all(|&w| w <= i || w >= u))
                }
            };
            updated.contains(l) || views.get(l).is_some_and(|v| v.iter().any(views_it))
        };
        let Some(out) = fold_target(f, k, &seen) else {
            continue;
        };
        // Written again later (e.g. updated in place each call): it is not constant.
        if writers[out] != 1 {
            continue;
        }
        let EValue::Tensor(t) = &mut f.values[out] else {
            continue;
        };
        let buf = Buffer::allocate(t.capacity().max(1), t.device(), f.devices)?;
        t.set_data(buf.base(), t.capacity());
        f.owned.push(Arc::new(buf));
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

/// The values a kernel call writes. ExecuTorch passes an out-variant's out arguments again
/// as its return values, so the call ends with a block equal to the block before it
/// (`[x, x, out, out]`, `[a, dim, keep, vals, idx, vals, idx]`), or with a tensor list of
/// them (`[x, .., out0, out1, out2, [out0, out1, out2]]`, batch norm); an in-place operator
/// returns its first argument (`[self, src, non_blocking, self]`).
pub(crate) fn written_by<'a>(values: &[EValue], args: &'a [u32]) -> &'a [u32] {
    let n = args.len();
    for k in (1..=n / 2).rev() {
        if args[n - k..] == args[n - 2 * k..n - k] {
            return &args[n - k..];
        }
    }
    if let Some(EValue::TensorList(items)) = args.last().and_then(|&a| values.get(a as usize))
        && !items.is_empty()
        && items.len() < n
        && args[n - 1 - items.len()..n - 1] == items[..]
    {
        return &args[n - 1 - items.len()..n - 1];
    }
    match (args.first(), args.last()) {
        (Some(a), Some(b)) if n >= 2 && a == b => &args[..1],
        _ => &[],
    }
}

/// The one tensor `k` writes, if `k` can be folded: it is a plain intermediate no static
/// view shares, and every other argument is a constant or fixed.
fn fold_target(
    f: &FoldInput<'_>,
    k: &KernelRef<'_>,
    seen: &dyn Fn(&(u32, u64)) -> bool,
) -> Option<usize> {
    let mut out = None;
    let outs = written_by(f.values, k.args);
    for &a in k.args.iter() {
        let i = a as usize;
        match f.values.get(i)? {
            EValue::Tensor(_) if outs.contains(&a) => {
                let free = f.location[i].is_some_and(|l| !seen(&l));
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

#[cfg(test)]
mod tests {
    use super::{CallRef, FoldInput, fold, written_by};
    use etch_core::{DeviceRegistry, EValue, KernelContext, KernelFn, Result};
    use std::collections::HashSet;

    /// A stand-in for a copy kernel: writes 7 into its out tensor's first element.
    fn fill(ctx: &mut KernelContext<'_>) -> Result<()> {
        ctx.tensor(1)?.data_mut::<f32>()?[0] = 7.0;
        Ok(())
    }

    /// `copy(w, out)` at instruction 1 of 4, `out` planned at (1, 0) where a never-written
    /// intermediate also lives, used by instructions `view_uses`; instruction 3 writes
    /// another tensor at (1, 0) when `rewrite`: folded unless that intermediate is a view
    /// of `out` (first used after the copy, before the location is written again).
    fn folds_with_view_used_at(view_uses: &[usize], rewrite: bool) -> bool {
        let mut w = [1f32; 4];
        let mut arena = [0f32; 4];
        let tensor = crate::test_tensor;
        // 0: constant weight, 1: the copy's out, 2: a view at the same location, 3: a
        // later tensor there.
        let mut values = vec![
            tensor(w.as_mut_ptr()),
            tensor(arena.as_mut_ptr()),
            tensor(arena.as_mut_ptr()),
            tensor(arena.as_mut_ptr()),
        ];
        let mut constant = vec![true, false, false, false];
        let intermediate = [false, true, true, true];
        let location = [None, Some((1, 0)), Some((1, 0)), rewrite.then_some((1, 0))];
        let kernels: [KernelFn; 2] = [fill, fill];
        let names = ["aten::clone.out".to_string(), "aten::relu.out".to_string()];
        let devices = DeviceRegistry::new();
        let mut owned = Vec::new();
        let mut f = FoldInput {
            values: &mut values,
            constant: &mut constant,
            intermediate: &intermediate,
            location: &location,
            runtime_ints: &HashSet::new(),
            kernels: &kernels,
            op_names: &names,
            devices: &devices,
            host_access: true,
            owned: &mut owned,
            device_context: None,
        };
        // 1 copies, 2 reads the copy, 3 writes value 3 (with `rewrite`); those in
        // `view_uses` read the view.
        let args: Vec<Vec<u32>> = (0..5)
            .map(|i| {
                let mut a = match i {
                    1 => vec![0, 1, 1],
                    2 => vec![1],
                    3 if rewrite => vec![3, 3],
                    _ => vec![],
                };
                if view_uses.contains(&i) {
                    a.insert(0, 2);
                }
                a
            })
            .collect();
        let instrs: Vec<CallRef<'_>> = args
            .iter()
            .enumerate()
            .map(|(i, a)| CallRef {
                op: (!a.is_empty()).then_some((i != 1) as usize),
                args: a,
                refreshed: false,
            })
            .collect();
        let done = fold(&mut f, &instrs).unwrap();
        done == [1]
    }

    #[test]
    fn folds_unless_a_view_of_its_location_sees_it() {
        // First used before the copy: a view of an earlier tensor there.
        assert!(folds_with_view_used_at(&[0], false));
        assert!(folds_with_view_used_at(&[0], true));
        // After the copy, before the location is written again: a view of the copy.
        assert!(!folds_with_view_used_at(&[2], false));
        assert!(!folds_with_view_used_at(&[4], false));
        // After another tensor was written there: a view of that one.
        assert!(folds_with_view_used_at(&[4], true));
        // Not used by any instruction here: a view of anything there.
        assert!(!folds_with_view_used_at(&[], false));
    }

    #[test]
    fn written_values_of_kernel_calls() {
        let none = vec![EValue::None; 10];
        // mul(x, x, out) + return
        assert_eq!(written_by(&none, &[1, 1, 2, 2]), &[2]);
        // max.dim(a, dim, keepdim, values, indices) + returns
        assert_eq!(written_by(&none, &[1, 2, 3, 4, 5, 4, 5]), &[4, 5]);
        // copy_(self, src, non_blocking) returning self
        assert_eq!(written_by(&none, &[7, 8, 9, 7]), &[7]);
        // nothing written
        assert!(written_by(&none, &[1, 2, 3]).is_empty());
        // batch norm(x, .., out0, out1, out2) returning [out0, out1, out2]
        let mut values = none.clone();
        values[9] = EValue::TensorList(vec![5, 6, 7].into());
        assert_eq!(written_by(&values, &[1, 2, 3, 4, 5, 6, 7, 9]), &[5, 6, 7]);
        values[9] = EValue::TensorList(vec![5, 7].into());
        assert!(written_by(&values, &[1, 2, 3, 4, 5, 6, 7, 9]).is_empty());
    }
}
