//! Memory planning over the instruction stream of a serialized method.
//!
//! A planned tensor lives from the instruction that first references it to the last one
//! (inclusive, so a kernel's output never shares memory with its inputs), with these
//! rules:
//! - method inputs are live from the start, method outputs to the end;
//! - persistent state (a planned tensor with initial data, or one whose first reference
//!   reads it rather than writing it, i.e. a mutable buffer) is live for the whole method
//!   and never shares memory;
//! - a backward jump (a loop) extends every lifetime that touches the loop to all of it;
//! - tensors that the original plan lets overlap *while both are live* are views of one
//!   storage (e.g. `et_view` outputs, in-place ops): they are planned together, as one
//!   block, keeping their relative offsets; an unplanned tensor written by an
//!   instruction (a runtime view) keeps the tensors it was made from alive.
//!
//! Tensors are bucketed by device; each bucket gets one buffer, planned on its own, and
//! buffers are ordered as upstream orders them: reserved slot 0, cpu:0, then the other
//! devices by (type, index). `non_const_buffer_device` is written sparse, and only when
//! some buffer is not on the CPU. Buffers that hold only persistent state (as with
//! upstream's `share_mutable_buffers`) keep their layout and come last.
//!
//! Each bucket is planned by several greedy algorithms (by size, by start, by duration;
//! best-fit and first-fit), and the smallest result is kept.

use crate::analysis::{
    Analysis, Kind, MAX_TENSOR_BYTES, is_constant, nbytes, offset_of, tensor, tensor_device,
};
use etch_core::{Device, DeviceType, Error, Result};
use etch_format::schema::pte;
use std::collections::{BTreeMap, HashMap};

/// Upstream's default planning alignment (`MemoryPlanningPass(alignment=16)`).
pub const DEFAULT_ALIGNMENT: usize = 16;

/// How a method's memory is planned.
#[derive(Debug, Clone, Copy)]
pub struct PlanOptions {
    /// Alignment of every planned tensor's offset (a power of two).
    pub alignment: usize,
    /// Plan the method inputs (`Some(false)`: leave them for the caller to bind, as
    /// upstream's `alloc_graph_input=False`; `None`: keep them as they are).
    pub alloc_graph_input: Option<bool>,
    /// Plan the method outputs (as `alloc_graph_input`).
    pub alloc_graph_output: Option<bool>,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            alignment: DEFAULT_ALIGNMENT,
            alloc_graph_input: None,
            alloc_graph_output: None,
        }
    }
}

/// Planned bytes of one method, per device, before and after.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MethodPlanStats {
    /// The method's name.
    pub method: String,
    /// Bytes per device in the program as given.
    pub before: BTreeMap<Device, u64>,
    /// Bytes per device as planned.
    pub after: BTreeMap<Device, u64>,
    /// True when the new plan was larger and the original one was kept.
    pub kept_original: bool,
    /// The most bytes live at any one instruction, summed over the buckets (alignment
    /// included): no plan of these lifetimes needs less.
    pub lower_bound: u64,
}

impl MethodPlanStats {
    /// Total bytes before.
    pub fn total_before(&self) -> u64 {
        self.before.values().sum()
    }
    /// Total bytes after.
    pub fn total_after(&self) -> u64 {
        self.after.values().sum()
    }
}

/// Which values must be planned together (views of one storage). `find` gives a
/// representative; values with the same representative form one group.
#[derive(Debug, Clone)]
pub(crate) struct AliasGroups {
    parent: Vec<usize>,
}

impl AliasGroups {
    pub fn singletons(n: usize) -> Self {
        AliasGroups {
            parent: (0..n).collect(),
        }
    }
    pub fn find(&self, mut v: usize) -> usize {
        if v >= self.parent.len() {
            return v;
        }
        while self.parent[v] != v {
            v = self.parent[v];
        }
        v
    }
    pub fn union(&mut self, a: usize, b: usize) {
        let (a, b) = (self.find(a), self.find(b));
        if a != b {
            let (lo, hi) = (a.min(b), a.max(b));
            self.parent[hi] = lo;
        }
    }
    pub fn len(&self) -> usize {
        self.parent.len()
    }
    /// Extends the table to `n` values; new values are their own group.
    pub fn grow(&mut self, n: usize) {
        while self.parent.len() < n {
            let k = self.parent.len();
            self.parent.push(k);
        }
    }
}

/// Lifetime `[first, last]` of every value over the instruction stream (`None` for a
/// value no instruction references that is not an input or output). Method inputs start
/// at 0 and outputs end at `len` (after the last instruction). Backward jumps extend
/// lifetimes over the loop.
pub(crate) fn lifetimes(
    plan: &pte::ExecutionPlan,
    a: &Analysis,
) -> Result<Vec<Option<(usize, usize)>>> {
    let nv = plan.values.as_ref().map_or(0, |v| v.len());
    let n = a.len();
    let mut life: Vec<Option<(usize, usize)>> = vec![None; nv];
    for (i, uses) in a.uses.iter().enumerate() {
        for &v in uses {
            life[v] = Some(match life[v] {
                None => (i, i),
                Some((s, e)) => (s.min(i), e.max(i)),
            });
        }
    }
    for &v in &a.inputs {
        life[v] = Some(life[v].map_or((0, 0), |(_, e)| (0, e)));
    }
    for &v in &a.outputs {
        life[v] = Some(life[v].map_or((n, n), |(s, _)| (s, n)));
    }
    let loops: Vec<(usize, usize)> = a
        .kind
        .iter()
        .enumerate()
        .filter_map(|(j, k)| match k {
            Kind::Jump { dest } if *dest <= j => Some((*dest, j)),
            _ => None,
        })
        .collect();
    if !loops.is_empty() {
        loop {
            let mut changed = false;
            for l in life.iter_mut().flatten() {
                for &(t, j) in &loops {
                    if l.0 <= j && t <= l.1 && (l.0 > t || l.1 < j) {
                        *l = (l.0.min(t), l.1.max(j));
                        changed = true;
                    }
                }
            }
            if !changed {
                break;
            }
        }
    }
    Ok(life)
}

/// How a method's tensors share storage: alias groups and persistent state.
#[derive(Debug, Clone)]
pub(crate) struct Storage {
    pub groups: AliasGroups,
    /// Planned tensors holding state across executions (live for the whole method).
    pub persistent: Vec<bool>,
}

impl Storage {
    /// Extends the tables to `n` values (new values: own group, not persistent).
    pub fn grow(&mut self, n: usize) {
        self.groups.grow(n);
        self.persistent.resize(n, false);
    }

    /// The storage facts of a method as planned now:
    /// - a planned tensor that an instruction reads before any writes it, and that is not
    ///   a method input, is either a *static view* (ExecuTorch emits a view of a planned
    ///   tensor as a second tensor at the same offset, with no instruction) or state. It
    ///   is a view of the latest tensor written before that read whose memory overlaps
    ///   it, or of a method input whose memory holds it; otherwise it is state. A planned
    ///   method output that no instruction references is a static view the same way;
    /// - tensors overlapping in memory while both are live share storage;
    /// - an unplanned tensor a kernel writes (a runtime view) shares the storage of the
    ///   tensors that kernel reads.
    pub fn of(plan: &pte::ExecutionPlan) -> Result<Storage> {
        let values = plan.values.as_deref().unwrap_or(&[]);
        let a = Analysis::new(plan)?;
        let life = lifetimes(plan, &a)?;
        let nv = values.len();
        let mut g = AliasGroups::singletons(nv);
        // First reference of each value, and whether it writes.
        let mut first: Vec<Option<(usize, bool)>> = vec![None; nv];
        for i in 0..a.len() {
            for &v in &a.uses[i] {
                if first[v].is_none() {
                    first[v] = Some((i, a.writes[i].contains(&v)));
                }
            }
        }
        let is_input: Vec<bool> = (0..nv).map(|v| a.inputs.contains(&v)).collect();
        let mut by_mem: HashMap<u32, Vec<(u64, u64, usize)>> = HashMap::new();
        for v in 0..nv {
            let Some(t) = tensor(values, v) else { continue };
            let Some(al) = &t.allocation_info else {
                continue;
            };
            let n = nbytes(t)? as u64;
            let off = offset_of(al);
            by_mem
                .entry(al.memory_id)
                .or_default()
                .push((off, off + n, v));
        }
        for list in by_mem.values_mut() {
            list.sort_unstable();
        }
        let mut persistent = vec![false; nv];
        for v in 0..nv {
            let Some(t) = tensor(values, v) else { continue };
            let Some(al) = &t.allocation_info else {
                continue;
            };
            if is_input[v] {
                continue;
            }
            if t.data_buffer_idx > 0 {
                persistent[v] = true;
                continue;
            }
            // Read before written, or (an output) never referenced at all.
            let read_at = match first[v] {
                Some((i, false)) => i,
                None if a.outputs.contains(&v) => a.len(),
                _ => continue,
            };
            let n = nbytes(t)? as u64;
            let (lo, hi) = (offset_of(al), offset_of(al).saturating_add(n));
            let mut base: Option<(usize, usize)> = None; // (written at, value)
            let mut input_base = None;
            for &(o, e, b) in &by_mem[&al.memory_id] {
                let overlaps = o < hi.max(lo + 1) && lo < e.max(o + 1);
                if b == v || !overlaps {
                    continue;
                }
                if is_input[b] && o <= lo && hi <= e {
                    input_base = Some(b);
                }
                if let Some((w, true)) = first[b]
                    && w < read_at
                    && base.is_none_or(|(bw, _)| w > bw)
                {
                    base = Some((w, b));
                }
            }
            match base.map(|(_, b)| b).or(input_base) {
                Some(b) => g.union(v, b),
                None => persistent[v] = true,
            }
        }
        // Planned tensors overlapping in memory while both are live.
        let eff = |v: usize| {
            if persistent[v] {
                Some((0, a.len()))
            } else {
                life[v]
            }
        };
        for list in by_mem.values() {
            for i in 0..list.len() {
                let (_, end_i, vi) = list[i];
                for &(off_j, _, vj) in &list[i + 1..] {
                    if off_j >= end_i {
                        break;
                    }
                    let (Some(li), Some(lj)) = (eff(vi), eff(vj)) else {
                        continue;
                    };
                    if li.0 <= lj.1 && lj.0 <= li.1 {
                        g.union(vi, vj);
                    }
                }
            }
        }
        // Unplanned tensors an instruction writes (runtime views) alias its tensor inputs.
        for i in 0..a.len() {
            if !matches!(a.kind[i], Kind::Kernel { .. }) {
                continue;
            }
            for &w in &a.writes[i] {
                let Some(t) = tensor(values, w) else { continue };
                if t.allocation_info.is_some() || is_constant(t) || a.outputs.contains(&w) {
                    continue;
                }
                for &u in &a.uses[i] {
                    if u != w
                        && !a.writes[i].contains(&u)
                        && tensor(values, u).is_some_and(|t| !is_constant(t))
                    {
                        g.union(w, u);
                    }
                }
            }
        }
        Ok(Storage {
            groups: g,
            persistent,
        })
    }
}

/// One unit of planning: an alias group's planned tensors at fixed relative offsets.
struct Block {
    size: u64,
    start: usize,
    end: usize,
    members: Vec<(usize, u64)>,
}

/// Device of each buffer (internal index, 0 reserved) as the plan declares it.
pub(crate) fn buffer_devices(plan: &pte::ExecutionPlan) -> Result<Vec<Device>> {
    let n = plan.non_const_buffer_sizes.as_ref().map_or(0, |s| s.len());
    let mut d = vec![Device::CPU; n];
    for e in plan.non_const_buffer_device.as_deref().unwrap_or(&[]) {
        let i = e.buffer_idx;
        if i <= 0 || i as usize >= n {
            return Err(Error::invalid_program(format!(
                "non_const_buffer_device names buffer {i}; the method has {} buffers",
                n.saturating_sub(1)
            )));
        }
        d[i as usize] = Device::from_serialized(e.device_type as i8, e.device_index)?;
    }
    Ok(d)
}

fn bytes_by_device(plan: &pte::ExecutionPlan) -> Result<BTreeMap<Device, u64>> {
    let devs = buffer_devices(plan)?;
    let mut m = BTreeMap::new();
    for (i, &s) in plan
        .non_const_buffer_sizes
        .as_deref()
        .unwrap_or(&[])
        .iter()
        .enumerate()
        .skip(1)
    {
        let e = m.entry(devs[i]).or_insert(0u64);
        // Sizes come from the program: a corrupt one must not overflow the sum.
        *e = e.saturating_add(s.max(0) as u64);
    }
    Ok(m)
}

/// Re-plans the memory of one method in place.
///
/// `storage` holds the storage facts computed on the program before it was transformed
/// (by [`Storage::of`]); `None` computes them from the method as it is. With
/// `keep_if_larger`, a plan larger than the method's current one is discarded.
pub(crate) fn plan_method(
    plan: &mut pte::ExecutionPlan,
    opts: &PlanOptions,
    storage: Option<&Storage>,
    keep_if_larger: bool,
) -> Result<MethodPlanStats> {
    if !opts.alignment.is_power_of_two() {
        return Err(Error::invalid_argument(format!(
            "alignment {} is not a power of two",
            opts.alignment
        )));
    }
    let before = bytes_by_device(plan)?;
    let original = plan.clone();
    let own;
    let storage = match storage {
        Some(s) => s,
        None => {
            own = Storage::of(plan)?;
            &own
        }
    };
    let groups = &storage.groups;
    let a = Analysis::new(plan)?;
    let persistent = &storage.persistent;
    if persistent.len() < plan.values.as_ref().map_or(0, |v| v.len()) {
        return Err(Error::internal("storage facts do not cover every value"));
    }
    let life = lifetimes(plan, &a)?;
    let n = a.len();
    let values = plan.values.as_deref_mut().unwrap_or(&mut []);

    // Inputs and outputs planned or not, as asked.
    for (list, want) in [
        (&a.inputs, opts.alloc_graph_input),
        (&a.outputs, opts.alloc_graph_output),
    ] {
        let Some(want) = want else { continue };
        for &v in list {
            let Some(pte::KernelTypes::Tensor(t)) = &mut values[v].val else {
                continue;
            };
            if is_constant(t) {
                continue;
            }
            if !want {
                t.allocation_info = None;
            } else if t.allocation_info.is_none() {
                t.allocation_info = Some(Box::new(pte::AllocationDetails {
                    memory_id: 1,
                    memory_offset_low: 0,
                    memory_offset_high: 0,
                }));
            }
        }
    }

    // Buffers that hold only persistent state, all on one device, keep their layout (on
    // that device: lowering may have moved the state).
    let mut fixed: BTreeMap<u32, Option<Device>> = BTreeMap::new();
    for (v, ev) in values.iter().enumerate() {
        if let Some(pte::KernelTypes::Tensor(t)) = &ev.val
            && let Some(al) = &t.allocation_info
        {
            let dev = tensor_device(t)?;
            let e = fixed.entry(al.memory_id).or_insert(Some(dev));
            if !persistent[v] || *e != Some(dev) {
                *e = None;
            }
        }
    }
    let fixed: BTreeMap<u32, Device> = fixed
        .into_iter()
        .filter_map(|(k, d)| d.map(|d| (k, d)))
        .collect();

    // Group the planned tensors into blocks, per device.
    struct Member {
        v: usize,
        off: u64,
        size: u64,
        dev: Device,
    }
    let mut by_group: BTreeMap<usize, Vec<Member>> = BTreeMap::new();
    let mut group_life: HashMap<usize, (usize, usize)> = HashMap::new();
    let mut group_state: HashMap<usize, bool> = HashMap::new();
    let mut unreferenced = Vec::new();
    for v in 0..values.len() {
        let Some(pte::KernelTypes::Tensor(t)) = &values[v].val else {
            continue;
        };
        let g = groups.find(v);
        let lt = if persistent[v] { Some((0, n)) } else { life[v] };
        let Some(lt) = lt else {
            // Never referenced, not an input, output or state: it needs no memory.
            if t.allocation_info.is_some() {
                unreferenced.push(v);
            }
            continue;
        };
        let e = group_life.entry(g).or_insert(lt);
        *e = (e.0.min(lt.0), e.1.max(lt.1));
        *group_state.entry(g).or_insert(false) |= persistent[v];
        let Some(al) = &t.allocation_info else {
            continue;
        };
        if fixed.contains_key(&al.memory_id) {
            continue;
        }
        by_group.entry(g).or_default().push(Member {
            v,
            off: offset_of(al),
            size: nbytes(t)? as u64,
            dev: tensor_device(t)?,
        });
    }
    let align = opts.alignment as u64;
    let mut buckets: BTreeMap<(bool, DeviceType, i8), Vec<Block>> = BTreeMap::new();
    for (g, members) in by_group {
        let dev = members[0].dev;
        if let Some(m) = members.iter().find(|m| m.dev != dev) {
            return Err(Error::invalid_program(format!(
                "values {} and {} share storage but are on {} and {}",
                members[0].v, m.v, dev, m.dev
            )));
        }
        let Some(&(start, end)) = group_life.get(&g) else {
            return Err(Error::internal("a planned group without a lifetime"));
        };
        let (start, end) = if group_state[&g] {
            (0, n)
        } else {
            (start, end)
        };
        let base = members.iter().map(|m| m.off).min().unwrap_or(0);
        let span = members
            .iter()
            .map(|m| m.off.saturating_add(m.size) - base)
            .max()
            .unwrap_or(0);
        if span > MAX_TENSOR_BYTES as u64 {
            return Err(Error::invalid_program(format!(
                "values sharing storage with value {} span {span} bytes",
                members[0].v
            )));
        }
        buckets
            .entry((dev != Device::CPU, dev.kind, dev.index))
            .or_default()
            .push(Block {
                size: span.next_multiple_of(align),
                start,
                end,
                members: members.iter().map(|m| (m.v, m.off - base)).collect(),
            });
    }
    for v in unreferenced {
        if let Some(pte::KernelTypes::Tensor(t)) = &mut values[v].val {
            t.allocation_info = None;
        }
    }

    // Plan every bucket; lay out the buffers.
    let mut sizes: Vec<i64> = vec![0];
    let mut devs: Vec<Device> = vec![Device::CPU];
    let mut lower_bound = 0u64;
    let mut assign: Vec<(usize, u32, u64)> = Vec::new();
    for ((_, kind, index), blocks) in &buckets {
        // Keeps every offset below 2^62: no overflow in the placement arithmetic.
        let sum = blocks.iter().map(|b| b.size as u128).sum::<u128>();
        if sum > 1 << 62 {
            return Err(Error::invalid_program(format!(
                "{} bytes to plan on {}",
                sum,
                Device::new(*kind, *index)
            )));
        }
        let (offsets, total) = best_plan(blocks, align);
        lower_bound += peak_live(blocks);
        let mem_id = sizes.len() as u32;
        sizes.push(total as i64);
        devs.push(Device::new(*kind, *index));
        for (b, off) in blocks.iter().zip(offsets) {
            for &(v, rel) in &b.members {
                assign.push((v, mem_id, off + rel));
            }
        }
    }
    let old_sizes = plan.non_const_buffer_sizes.clone().unwrap_or_default();
    let values = plan.values.as_deref_mut().unwrap_or(&mut []);
    let mut fixed_map = HashMap::new();
    let mut fixed_bytes = 0u64;
    for (&old, &dev) in &fixed {
        let size = old_sizes.get(old as usize).copied().ok_or_else(|| {
            Error::invalid_program(format!("a tensor is planned in missing buffer {old}"))
        })?;
        fixed_bytes += size.max(0) as u64;
        fixed_map.insert(old, sizes.len() as u32);
        sizes.push(size);
        devs.push(dev);
    }
    // Renumber the fixed (state-only) buffers first: their old ids may equal the new ids
    // just given to the planned buckets.
    for ev in values.iter_mut() {
        if let Some(pte::KernelTypes::Tensor(t)) = &mut ev.val
            && let Some(al) = t.allocation_info.as_mut()
            && let Some(&new) = fixed_map.get(&al.memory_id)
        {
            al.memory_id = new;
        }
    }
    for (v, mem_id, off) in assign {
        if let Some(pte::KernelTypes::Tensor(t)) = &mut values[v].val {
            t.allocation_info = Some(Box::new(pte::AllocationDetails {
                memory_id: mem_id,
                memory_offset_low: off as u32,
                memory_offset_high: (off >> 32) as u32,
            }));
        }
    }
    if sizes.len() < 2 {
        sizes.push(0);
        devs.push(Device::CPU);
    }
    plan.non_const_buffer_sizes = Some(sizes);
    plan.non_const_buffer_device = if devs.iter().any(|d| !d.is_cpu()) {
        Some(
            devs.iter()
                .enumerate()
                .filter(|(_, d)| **d != Device::CPU)
                .map(|(i, d)| pte::NonConstBufferDevice {
                    buffer_idx: i as i32,
                    device_type: match d.kind {
                        DeviceType::Cpu => pte::DeviceType::Cpu,
                        DeviceType::Cuda => pte::DeviceType::Cuda,
                    },
                    device_index: d.index,
                })
                .collect(),
        )
    } else {
        None
    };
    let mut stats = MethodPlanStats {
        method: plan.name.clone().unwrap_or_default(),
        before,
        after: bytes_by_device(plan)?,
        kept_original: false,
        lower_bound: lower_bound + fixed_bytes,
    };
    if keep_if_larger && stats.total_after() > stats.total_before() {
        *plan = original;
        stats.after = stats.before.clone();
        stats.kept_original = true;
    }
    Ok(stats)
}

/// The most bytes live at once.
fn peak_live(blocks: &[Block]) -> u64 {
    let mut events: Vec<(usize, i128)> = Vec::with_capacity(blocks.len() * 2);
    for b in blocks {
        events.push((b.start, b.size as i128));
        events.push((b.end + 1, -(b.size as i128)));
    }
    // Ends before starts at the same instruction: [s, e] is inclusive.
    events.sort_unstable_by_key(|&(t, d)| (t, d));
    let (mut live, mut peak) = (0i128, 0i128);
    for (_, d) in events {
        live += d;
        peak = peak.max(live);
    }
    peak as u64
}

/// Runs every greedy variant and returns the offsets of the smallest plan.
fn best_plan(blocks: &[Block], align: u64) -> (Vec<u64>, u64) {
    let n = blocks.len();
    let mut orders: Vec<Vec<usize>> = Vec::new();
    let mut by_size: Vec<usize> = (0..n).collect();
    by_size.sort_by_key(|&i| (std::cmp::Reverse(blocks[i].size), blocks[i].start, i));
    let mut by_start: Vec<usize> = (0..n).collect();
    by_start.sort_by_key(|&i| (blocks[i].start, std::cmp::Reverse(blocks[i].size), i));
    let mut by_duration: Vec<usize> = (0..n).collect();
    by_duration.sort_by_key(|&i| {
        (
            std::cmp::Reverse(blocks[i].end - blocks[i].start),
            std::cmp::Reverse(blocks[i].size),
            i,
        )
    });
    orders.push(by_size);
    orders.push(by_start);
    orders.push(by_duration);
    let mut best: Option<(Vec<u64>, u64)> = None;
    for order in &orders {
        for best_fit in [true, false] {
            let r = greedy(blocks, order, best_fit, align);
            if best.as_ref().is_none_or(|b| r.1 < b.1) {
                best = Some(r);
            }
        }
    }
    best.unwrap_or_default()
}

/// Places blocks in `order`, each at the lowest (first-fit) or tightest (best-fit) gap
/// among the already placed blocks whose lifetimes overlap its own.
fn greedy(blocks: &[Block], order: &[usize], best_fit: bool, align: u64) -> (Vec<u64>, u64) {
    let mut offsets = vec![0u64; blocks.len()];
    let mut placed: Vec<usize> = Vec::with_capacity(blocks.len());
    let mut total = 0u64;
    let mut busy: Vec<(u64, u64)> = Vec::new();
    for &i in order {
        let b = &blocks[i];
        busy.clear();
        for &j in &placed {
            let o = &blocks[j];
            if o.start <= b.end && b.start <= o.end && o.size > 0 {
                busy.push((offsets[j], offsets[j] + o.size));
            }
        }
        busy.sort_unstable();
        let mut cur = 0u64;
        let mut choice: Option<(u64, u64)> = None; // (gap, offset)
        for &(s, e) in &busy {
            if s >= cur + b.size {
                let gap = s - cur;
                if !best_fit {
                    choice = Some((gap, cur));
                    break;
                }
                if choice.is_none_or(|c| gap < c.0) {
                    choice = Some((gap, cur));
                }
            }
            cur = cur.max(e.next_multiple_of(align));
        }
        let off = choice.map_or(cur, |c| c.1);
        offsets[i] = off;
        total = total.max(off + b.size);
        placed.push(i);
    }
    (offsets, total)
}
