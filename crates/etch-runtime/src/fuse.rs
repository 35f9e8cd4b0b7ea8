//! Load-time fusion of chains of kernel calls: a kernel that registered a fusion
//! (`KernelRegistry::register_fusion`, [`etch_core::FuseFn`]) is offered each chain of
//! calls starting with its operator whose intermediate results nothing else reads, and may
//! replace a prefix of it with one call (a convolution with the batch norm and activation
//! after it, say). The fused call runs where the last call of the prefix ran; the others are
//! dropped, so the intermediates they wrote are never written.
//!
//! Running the fused call late is what keeps the memory plan valid: every tensor the prefix
//! reads from outside it is still intact there (only the dropped calls ran in between, and
//! they wrote nothing else), and the last call's outputs live where the plan put them, at
//! the time it put them there. What remains to check is that those outputs share no memory
//! with what the fused call reads (the plan may have reused a dead input's memory for them).

pub(crate) use crate::fold::CallRef;
use crate::fold::written_by;
use etch_core::{ChainCall, DeviceRegistry, EValue, Fused, KernelContext, KernelRegistry, Result};
use std::collections::{HashMap, HashSet};
use std::ops::Range;

/// The most calls offered to a fusion hook at once.
const MAX_CHAIN: usize = 8;

/// What the fusion pass needs to know about the method being loaded.
pub(crate) struct FuseInput<'a> {
    pub values: &'a mut [EValue],
    pub constant: &'a [bool],
    /// Plain intermediates: planned, no initial state, not a method input or output.
    pub intermediate: &'a [bool],
    /// The method's inputs and outputs.
    pub io: &'a HashSet<u32>,
    pub op_names: &'a [String],
    pub kernels: &'a KernelRegistry,
    pub devices: &'a DeviceRegistry,
}

/// A fusion to apply: the instructions it replaces (in order; the fused call takes the
/// last one's place), its arguments (theirs, concatenated) and the hook's result.
pub(crate) struct FusedCalls {
    pub calls: Vec<usize>,
    pub args: Box<[u32]>,
    pub fused: Fused,
}

/// Every value an instruction's arguments mention, tensor list items included.
pub(crate) fn mentioned(values: &[EValue], args: &[u32]) -> Vec<u32> {
    let mut out = Vec::with_capacity(args.len());
    for &a in args {
        out.push(a);
        match values.get(a as usize) {
            Some(EValue::TensorList(l)) => out.extend(l.iter().copied()),
            Some(EValue::OptionalTensorList(l)) => out.extend(l.iter().flatten().copied()),
            _ => {}
        }
    }
    out
}

fn range_of(values: &[EValue], v: u32) -> Option<Range<usize>> {
    match values.get(v as usize) {
        Some(EValue::Tensor(t)) => t.memory_range(),
        _ => None,
    }
}

fn overlaps(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start < b.end && b.start < a.end
}

/// How values flow through one chain of instructions (the layout choice and the unread
/// outputs ask it which writes a static view sees too: [`seen_by_views`]).
pub(crate) struct Flow<'a> {
    instrs: &'a [CallRef<'a>],
    /// The instructions mentioning each value.
    uses: Vec<Vec<usize>>,
    /// How many instructions write each value.
    writers: Vec<u32>,
    /// Static views: the memory of planned intermediates no instruction writes, and their
    /// first use (`None`: none here). A view sees the tensor last written over its memory
    /// before its first use; a fused chain must not drop a write one of them could see.
    views: Vec<(Range<usize>, Option<usize>)>,
    /// The memory each instruction writes.
    written: Vec<Vec<Range<usize>>>,
}

impl<'a> Flow<'a> {
    /// The flow of `instrs` over `values` (`intermediate`: the plain intermediates).
    pub(crate) fn new(values: &[EValue], intermediate: &[bool], instrs: &'a [CallRef<'a>]) -> Self {
        let nv = values.len();
        let mut uses: Vec<Vec<usize>> = vec![Vec::new(); nv];
        let mut writers = vec![0u32; nv];
        for (i, c) in instrs.iter().enumerate() {
            for v in mentioned(values, c.args) {
                if let Some(u) = uses.get_mut(v as usize)
                    && u.last() != Some(&i)
                {
                    u.push(i);
                }
            }
            if c.op.is_some() {
                for &w in written_by(values, c.args) {
                    if let Some(n) = writers.get_mut(w as usize) {
                        *n += 1;
                    }
                }
            }
        }
        let views = (0..nv)
            .filter(|&v| intermediate[v] && writers[v] == 0)
            .filter_map(|v| Some((range_of(values, v as u32)?, uses[v].first().copied())))
            .collect();
        let written = instrs
            .iter()
            .map(|c| match c.op {
                Some(_) => written_by(values, c.args)
                    .iter()
                    .filter_map(|&w| range_of(values, w))
                    .collect(),
                None => Vec::new(),
            })
            .collect();
        Flow {
            instrs,
            uses,
            writers,
            views,
            written,
        }
    }

    /// Whether a view (its memory, its first use) could see what call `c` writes at `r`,
    /// the calls in `dropped` writing nothing.
    fn sees(
        &self,
        view: &(Range<usize>, Option<usize>),
        c: usize,
        r: &Range<usize>,
        dropped: &[usize],
    ) -> bool {
        let (v, u) = view;
        let Some(u) = *u else {
            return overlaps(v, r);
        };
        let covered = |t: usize| {
            !dropped.contains(&t)
                && self.written[t]
                    .iter()
                    .any(|w| w.start <= v.start && v.end <= w.end)
        };
        overlaps(v, r) && u > c && !(c + 1..u).any(covered)
    }

    /// How many instructions of the chain mention value `v`.
    pub(crate) fn mentions(&self, v: usize) -> usize {
        self.uses.get(v).map_or(0, Vec::len)
    }

    /// How many kernel calls of the chain write value `v`.
    pub(crate) fn writers(&self, v: usize) -> u32 {
        self.writers.get(v).copied().unwrap_or(0)
    }

    /// Whether value `w`, which call `c` writes, may stay unwritten when `calls` are fused:
    /// a plain intermediate (or a tensor without memory) that only this call writes, that
    /// only later calls of `calls` read, and that no static view can see.
    fn internal(&self, f: &FuseInput<'_>, w: u32, c: usize, calls: &[usize]) -> bool {
        let wi = w as usize;
        let EValue::Tensor(t) = &f.values[wi] else {
            return false;
        };
        let plain = f.intermediate[wi]
            || (t.memory_range().is_none() && !f.io.contains(&w) && !f.constant[wi]);
        let dropped = &calls[..calls.len() - 1];
        plain
            && self.writers[wi] == 1
            && self.uses[wi].iter().all(|&u| u >= c && calls.contains(&u))
            && t.memory_range()
                .is_none_or(|r| self.views.iter().all(|v| !self.sees(v, c, &r, dropped)))
    }

    /// Whether the first `m` of `calls` may be fused: what all but the last write stays
    /// within them.
    fn valid(&self, f: &FuseInput<'_>, calls: &[usize], m: usize) -> bool {
        calls[..m - 1].iter().all(|&c| {
            written_by(f.values, self.instrs[c].args)
                .iter()
                .all(|&w| self.internal(f, w, c, &calls[..m]))
        })
    }
}

/// The values whose bytes a static view could read as a kernel call of one of `flows`'
/// chains wrote them: a view of the same chain that sees the write ([`Flow::sees`], no
/// call dropped), or any view of another chain over the same memory. The layout choice
/// keeps those in their layout; kernels must write them (`KernelContext::is_unread`).
pub(crate) fn seen_by_views(values: &[EValue], flows: &[Flow<'_>]) -> Vec<bool> {
    let mut seen = vec![false; values.len()];
    for (ci, flow) in flows.iter().enumerate() {
        for (c, call) in flow
            .instrs
            .iter()
            .enumerate()
            .filter(|(_, c)| c.op.is_some())
        {
            for &w in written_by(values, call.args) {
                let Some(r) = range_of(values, w) else {
                    continue;
                };
                let other = |(cj, f): (usize, &Flow<'_>)| {
                    cj != ci && f.views.iter().any(|(v, _)| overlaps(v, &r))
                };
                if flow.views.iter().any(|v| flow.sees(v, c, &r, &[]))
                    || flows.iter().enumerate().any(other)
                {
                    seen[w as usize] = true;
                }
            }
        }
    }
    seen
}

/// Finds the fusions the registered hooks make of `instrs` (one chain without jumps, in
/// execution order). Applies none of them.
pub(crate) fn plan(f: &mut FuseInput<'_>, instrs: &[CallRef<'_>]) -> Result<Vec<FusedCalls>> {
    let flow = Flow::new(f.values, f.intermediate, instrs);
    let mut out = Vec::new();
    let mut i = 0;
    while i < instrs.len() {
        let head = &instrs[i];
        let hook = head
            .op
            .filter(|_| !head.refreshed)
            .and_then(|op| f.kernels.fusion_fn(&f.op_names[op]));
        let Some(hook) = hook else {
            i += 1;
            continue;
        };
        // The kernel calls that follow, without in-place ones.
        let mut calls = vec![i];
        while calls.len() < MAX_CHAIN {
            let j = i + calls.len();
            match instrs.get(j) {
                Some(CallRef {
                    op: Some(op),
                    refreshed: false,
                    ..
                }) if !f.op_names[*op].ends_with('_') => calls.push(j),
                _ => break,
            }
        }
        match ask(f, &flow, hook, &calls)? {
            Some(z) => {
                i = z.calls[z.calls.len() - 1] + 1;
                out.push(z);
            }
            None => i += 1,
        }
    }
    Ok(out)
}

/// Asks `hook` about `calls`: offers the longest prefix that may be fused, and when the
/// hook picks a shorter one that may not, asks again with the longest one below it that
/// may.
fn ask(
    f: &mut FuseInput<'_>,
    flow: &Flow<'_>,
    hook: etch_core::FuseFn,
    calls: &[usize],
) -> Result<Option<FusedCalls>> {
    let instrs = flow.instrs;
    let mut offer = (2..=calls.len()).rev().find(|&m| flow.valid(f, calls, m));
    while let Some(m) = offer {
        let mut args = Vec::new();
        let mut chain = Vec::with_capacity(m);
        for &c in &calls[..m] {
            let a = instrs[c].args;
            let op = instrs[c].op.map_or("", |o| f.op_names[o].as_str());
            chain.push(ChainCall {
                op,
                args: args.len()..args.len() + a.len(),
            });
            args.extend_from_slice(a);
        }
        let name = chain[0].op;
        // SAFETY: every tensor in `values` points at memory the method owns (arenas,
        // folded results) or at the program's bytes, all alive while it loads; the hook
        // only reads.
        let ctx = unsafe { KernelContext::new(f.values, &args, name) }
            .with_devices(f.devices, true)
            .with_constants(f.constant);
        let fused = hook(&ctx, &chain).map_err(|e| e.context(format!("fusing {name} at load")))?;
        let Some(z) = fused.filter(|z| (2..=m).contains(&z.calls)) else {
            return Ok(None);
        };
        let k = z.calls;
        let apart = outputs_apart(f.values, instrs, &calls[..k]);
        let scratch = match apart {
            false if z.takes_scratch => scratch_for(f.values, instrs, &calls[..k]),
            _ => None,
        };
        if flow.valid(f, calls, k) && (apart || scratch.is_some()) {
            args.truncate(chain[k - 1].args.end);
            args.extend(scratch);
            return Ok(Some(FusedCalls {
                calls: calls[..k].to_vec(),
                args: args.into_boxed_slice(),
                fused: z,
            }));
        }
        offer = (2..k).rev().find(|&m| flow.valid(f, calls, m));
    }
    Ok(None)
}

/// A scratch tensor for a fused call whose outputs share memory with what it reads: a
/// value an earlier call writes that the last call reads (so nothing else uses its memory
/// there), as large as the first output, sharing memory with nothing the calls read from
/// outside them nor with the outputs. Of those, the one the calls wrote last: in the
/// program's plan its bytes are the ones touched most recently, and the fused call keeps
/// them in use (efficientnet's squeeze-excitation products, writing where the first
/// candidate's bytes had gone untouched since the previous run, took 1.35-1.5x longer).
fn scratch_for(values: &[EValue], instrs: &[CallRef<'_>], calls: &[usize]) -> Option<u32> {
    let last = instrs[calls[calls.len() - 1]].args;
    // Each intermediate with the position of the call that writes it (the latest wins).
    let dropped: HashMap<u32, usize> = calls[..calls.len() - 1]
        .iter()
        .enumerate()
        .flat_map(|(k, &c)| {
            written_by(values, instrs[c].args)
                .iter()
                .map(move |&v| (v, k))
        })
        .collect();
    let outs = written_by(values, last);
    let need = outs.first().and_then(|&o| range_of(values, o))?.len();
    let taken: Vec<Range<usize>> = calls
        .iter()
        .flat_map(|&c| mentioned(values, instrs[c].args))
        .filter(|v| !dropped.contains_key(v))
        .filter_map(|v| range_of(values, v))
        .collect();
    mentioned(values, last)
        .into_iter()
        .filter_map(|v| {
            let at = *dropped.get(&v)?;
            let r = range_of(values, v)?;
            let fits = r.len() >= need && taken.iter().all(|t| !overlaps(t, &r));
            fits.then_some((v, at))
        })
        .max_by_key(|&(_, at)| at)
        .map(|(v, _)| v)
}

/// Whether the last call's outputs share no memory with the tensors the calls read from
/// outside them (what the fused call reads where the last call runs).
fn outputs_apart(values: &[EValue], instrs: &[CallRef<'_>], calls: &[usize]) -> bool {
    let last = instrs[calls[calls.len() - 1]].args;
    let written: HashSet<u32> = calls
        .iter()
        .flat_map(|&c| written_by(values, instrs[c].args).iter().copied())
        .collect();
    let outs: Vec<Range<usize>> = written_by(values, last)
        .iter()
        .filter_map(|&w| range_of(values, w))
        .collect();
    calls
        .iter()
        .flat_map(|&c| mentioned(values, instrs[c].args))
        .filter(|v| !written.contains(v))
        .filter_map(|v| range_of(values, v))
        .all(|r| outs.iter().all(|o| !overlaps(o, &r)))
}

#[cfg(test)]
mod tests {
    use super::{CallRef, FuseInput, plan};
    use etch_core::{
        ChainCall, DeviceRegistry, EValue, Fused, KernelContext, KernelRegistry, Result,
    };
    use std::collections::HashSet;

    fn noop(_: &mut KernelContext<'_>) -> Result<()> {
        Ok(())
    }

    /// Fuses the first two calls, taking a scratch tensor.
    fn fuse_two(_: &KernelContext<'_>, _: &[ChainCall<'_>]) -> Result<Option<Fused>> {
        Ok(Some(Fused {
            calls: 2,
            kernel: noop,
            name: "test::fused",
            prepared: std::sync::Arc::new(()),
            takes_scratch: true,
        }))
    }

    /// The same without a scratch tensor.
    fn fuse_two_no_scratch(c: &KernelContext<'_>, ch: &[ChainCall<'_>]) -> Result<Option<Fused>> {
        Ok(fuse_two(c, ch)?.map(|f| Fused {
            takes_scratch: false,
            ..f
        }))
    }

    /// A 4-float tensor at float `at` of `arena`.
    fn tensor(arena: &mut [f32], at: usize) -> EValue {
        crate::test_tensor(arena[at..].as_mut_ptr())
    }

    /// `head(x) -> a`, `tail(a) -> c`, then `other(..) -> d` reading `a` (`other_reads_a`),
    /// else the never-written intermediate (a static view) at `view_at` if there is one,
    /// else `c`; `x` at float 0, `a` at 4, `c` at `c_at`, `d` at 12. Returns the fused
    /// calls and their arguments.
    fn fuse(
        c_at: usize,
        other_reads_a: bool,
        view_at: Option<usize>,
        scratch: bool,
    ) -> Option<(Vec<usize>, Vec<u32>)> {
        let mut arena = [0f32; 32];
        // 0: x, 1: a, 2: c, 3: view, 4: d (other's out).
        let mut values = vec![
            tensor(&mut arena, 0),
            tensor(&mut arena, 4),
            tensor(&mut arena, c_at),
            tensor(&mut arena, view_at.unwrap_or(28)),
            tensor(&mut arena, 12),
        ];
        let intermediate = [false, true, true, view_at.is_some(), true];
        let io: HashSet<u32> = [0].into_iter().collect();
        let names: Vec<String> = ["test::head", "test::tail", "test::other"]
            .map(String::from)
            .into();
        let mut reg = KernelRegistry::new();
        reg.register_fusion(
            "test::head",
            if scratch {
                fuse_two
            } else {
                fuse_two_no_scratch
            },
        );
        let devices = DeviceRegistry::new();
        let mut f = FuseInput {
            values: &mut values,
            constant: &[false; 5],
            intermediate: &intermediate,
            io: &io,
            op_names: &names,
            kernels: &reg,
            devices: &devices,
        };
        let other: Vec<u32> = match (other_reads_a, view_at) {
            (true, _) => vec![1, 4, 4],
            (false, Some(_)) => vec![3, 4, 4],
            (false, None) => vec![2, 4, 4],
        };
        let instrs = [
            CallRef {
                op: Some(0),
                args: &[0, 1, 1],
                refreshed: false,
            },
            CallRef {
                op: Some(1),
                args: &[1, 2, 2],
                refreshed: false,
            },
            CallRef {
                op: Some(2),
                args: &other,
                refreshed: false,
            },
        ];
        let mut made = plan(&mut f, &instrs).unwrap();
        assert!(made.len() <= 1);
        made.pop().map(|z| (z.calls, z.args.to_vec()))
    }

    #[test]
    fn fuses_a_chain_whose_intermediates_stay_inside() {
        // `c` apart from `x`: the two calls' arguments, no scratch.
        assert_eq!(
            fuse(8, false, None, true),
            Some((vec![0, 1], vec![0, 1, 1, 1, 2, 2]))
        );
        // `a` read after the chain: not fused (the hook's prefix of two drops its write).
        assert_eq!(fuse(8, true, None, true), None);
    }

    #[test]
    fn an_output_over_an_input_needs_a_scratch_tensor() {
        // `c` over `x` (the plan reused the dead input's memory): `a`, which the last call
        // reads, comes as scratch; without scratch support, no fusion.
        assert_eq!(
            fuse(0, false, None, true),
            Some((vec![0, 1], vec![0, 1, 1, 1, 2, 2, 1]))
        );
        assert_eq!(fuse(0, false, None, false), None);
    }

    #[test]
    fn a_static_view_of_a_dropped_write_blocks_fusion() {
        // A never-written tensor over `a`'s memory, first used after the chain: it views
        // `a`, whose write fusion drops.
        assert_eq!(fuse(8, false, Some(4), true), None);
        // Over other memory: fused.
        assert_eq!(
            fuse(8, false, Some(20), true).map(|z| z.0),
            Some(vec![0, 1])
        );
    }
}
