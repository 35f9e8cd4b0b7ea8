//! Load-time choice of channels-last feature maps: the 4-d intermediates of a portable
//! program are laid out channels-last (dim order `0, 2, 3, 1`, the same bytes read in
//! NHWC order) where every call that touches them allows it (its kernel's
//! [`etch_core::LayoutFn`]) and the convolutions among them gain in sum
//! ([`etch_core::LayoutRule::gains`]: depthwise convolutions; on some CPUs every
//! convolution). ExecuTorch's programs are exported
//! channels-first; XNNPACK runs NHWC inside its delegate, and this gives portable programs
//! the same kernels.
//!
//! Values are tied together by the calls' rules (a convolution's output with the
//! residual added to it, an activation's input with its output, ...); a group is switched
//! as a whole, when its calls' gains sum above zero and no call pins one of its values to
//! channels-first (an operator without a hook, a delegate call, a method input or output
//! it is tied to). The memory
//! plan is unchanged: a tensor keeps its bytes and capacity, only its strides change.

use crate::fold::{CallRef, written_by};
use crate::fuse::{Flow, mentioned, seen_by_views};
use etch_core::{DeviceRegistry, Dynamism, EValue, KernelContext, KernelRegistry, Result};
use std::collections::{HashMap, HashSet};

/// Channels-last: `n, h, w, c` in memory.
const CHANNELS_LAST: [u8; 4] = [0, 2, 3, 1];

/// What the layout choice needs to know about the method being loaded.
pub(crate) struct LayoutInput<'a> {
    pub values: &'a mut [EValue],
    pub constant: &'a [bool],
    /// Plain intermediates: planned, no initial state, not a method input or output.
    pub intermediate: &'a [bool],
    pub op_names: &'a [String],
    pub kernels: &'a KernelRegistry,
    pub devices: &'a DeviceRegistry,
}

/// Union-find over value indices.
struct Groups(Vec<usize>);

impl Groups {
    fn root(&mut self, mut v: usize) -> usize {
        while self.0[v] != v {
            self.0[v] = self.0[self.0[v]];
            v = self.0[v];
        }
        v
    }
    fn join(&mut self, a: usize, b: usize) {
        let (a, b) = (self.root(a), self.root(b));
        self.0[a] = b;
    }
}

/// Whether a value's layout matters: a 4-d tensor with more than one channel and more than
/// one pixel (`[n, c, 1, 1]` is the same bytes in both layouts).
fn spatial(v: &EValue) -> bool {
    matches!(v, EValue::Tensor(t) if t.dim() == 4 && t.sizes()[1] > 1 && t.sizes()[2] * t.sizes()[3] > 1)
}

/// The values that may be switched: spatial plain intermediates of a static shape, in the
/// default dim order, written by exactly one kernel call (not a delegate), outside the
/// tensor lists calls read, and not what a tensor no call writes (a static view) sees of
/// its memory: the view would read the bytes in its own order. (Which dtypes and shapes a
/// call takes channels-last is its hook's to say.)
fn candidates(f: &LayoutInput<'_>, chains: &[Vec<CallRef<'_>>]) -> Vec<bool> {
    let nv = f.values.len();
    let mut writers = vec![0u32; nv];
    let mut listed = vec![false; nv];
    for c in chains.iter().flatten() {
        for &w in written_by(f.values, c.args) {
            if let Some(n) = writers.get_mut(w as usize) {
                *n += if c.op.is_some() { 1 } else { 2 };
            }
        }
    }
    // Tensors in lists that calls read (a multi-output call's list of its outs repeats
    // them: not those).
    for c in chains.iter().flatten() {
        let n = c.args.len();
        for (k, &a) in c.args.iter().enumerate() {
            let items: Vec<u32> = match &f.values[a as usize] {
                EValue::TensorList(l) if k + 1 == n && c.args[..k].ends_with(l) => continue,
                EValue::TensorList(l) => l.to_vec(),
                EValue::OptionalTensorList(l) => l.iter().flatten().copied().collect(),
                _ => continue,
            };
            for i in items {
                if let Some(l) = listed.get_mut(i as usize) {
                    *l = true;
                }
            }
        }
    }
    // A tensor no call writes (a static view) reads the bytes that the calls before its
    // first use wrote last over its memory: the values they wrote there keep their layout.
    let flows: Vec<_> = chains
        .iter()
        .map(|c| Flow::new(f.values, f.intermediate, c))
        .collect();
    let viewed = seen_by_views(f.values, &flows);
    (0..nv)
        .map(|v| {
            let EValue::Tensor(t) = &f.values[v] else {
                return false;
            };
            f.intermediate[v]
                && spatial(&f.values[v])
                && t.dynamism() == Dynamism::Static
                && t.is_default_dim_order()
                && writers[v] == 1
                && !listed[v]
                && !viewed[v]
                && t.memory_range().is_some()
        })
        .collect()
}

/// Lays out channels-last the values of `chains` (each straight, in execution order) that
/// may be; returns how many.
pub(crate) fn choose(f: &mut LayoutInput<'_>, chains: &[Vec<CallRef<'_>>]) -> Result<usize> {
    let nv = f.values.len();
    let cand = candidates(f, chains);
    if !cand.iter().any(|&c| c) {
        return Ok(0);
    }
    let mut groups = Groups((0..nv).collect());
    // Values pinned to channels-first, and values of a group some convolution gains in.
    let (mut pinned, mut gains) = (Vec::new(), Vec::new());
    for c in chains.iter().flatten() {
        let rule = c.op.and_then(|op| {
            let name = f.op_names[op].as_str();
            let hook = f.kernels.layout_fn(name)?;
            // SAFETY: every tensor in `values` points at memory the method owns or at the
            // program's bytes, alive while it loads; the hook only reads.
            let ctx = unsafe { KernelContext::new(f.values, c.args, name) }
                .with_devices(f.devices, true)
                .with_constants(f.constant);
            hook(&ctx)
        });
        let arg = |i: usize| c.args.get(i).map(|&v| v as usize);
        let (mut tied, mut adapts) = (Vec::new(), Vec::new());
        if let Some(r) = &rule {
            tied = r.tied.iter().filter_map(|&i| arg(i)).collect();
            adapts = r.adapts.iter().filter_map(|&i| arg(i)).collect();
        }
        // A tied value whose layout matters but may not change pins the group.
        let blocked = tied
            .iter()
            .any(|&v| !cand[v] && f.values.get(v).is_some_and(spatial));
        let members: Vec<usize> = tied
            .iter()
            .chain(adapts.iter())
            .copied()
            .filter(|&v| cand[v])
            .collect();
        for w in members.windows(2) {
            groups.join(w[0], w[1]);
        }
        if let Some(&m) = members.first() {
            if blocked {
                pinned.push(m);
            }
            if let Some(r) = rule.as_ref().filter(|r| r.gains != 0) {
                gains.push((m, r.gains));
            }
        }
        // Every other candidate this call mentions keeps its layout.
        for v in mentioned(f.values, c.args) {
            let v = v as usize;
            if cand.get(v) == Some(&true) && !members.contains(&v) {
                pinned.push(v);
            }
        }
    }
    let pinned: HashSet<usize> = pinned.into_iter().map(|v| groups.root(v)).collect();
    let mut sums: HashMap<usize, i64> = HashMap::new();
    for (v, g) in gains {
        let s = sums.entry(groups.root(v)).or_default();
        *s = s.saturating_add(g);
    }
    let mut switched = 0;
    for (v, value) in f.values.iter_mut().enumerate() {
        let r = groups.root(v);
        if !cand[v] || pinned.contains(&r) || sums.get(&r).is_none_or(|&s| s <= 0) {
            continue;
        }
        if let EValue::Tensor(t) = value {
            t.set_dim_order(&CHANNELS_LAST)?;
            switched += 1;
        }
    }
    Ok(switched)
}
