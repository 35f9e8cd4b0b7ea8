//! Partitioning and device propagation on a serialized program.
//!
//! **Partitioner.** A kernel call is *eligible* for the target device when the device
//! supports its operator (and its tensors' dtypes, when the support is restricted), it
//! writes only fresh, planned tensors (no in-place update, no runtime view escaping,
//! no persistent state), and it reads no persistent state and no non-tensor value that
//! another instruction computes at run time (e.g. `sym_size`), because a delegate's
//! inputs and outputs are tensors. Every instruction gets a *stage*: the largest number
//! of non-eligible instructions on any dependency path that ends at it (dependencies are
//! read-after-write, write-after-read and write-after-write, over storage); an eligible
//! instruction then moves to the latest stage its successors allow, so constant-only
//! work (a weight's permute) joins its consumer's region. Eligible instructions with the
//! same stage in the same basic block form one region. A path
//! from a region back into it would have to pass a non-eligible instruction, which
//! raises the stage, so every region is dependency-convex and the regions plus the
//! remaining instructions form a DAG; they are emitted in topological order, closest to
//! the original order. Each region becomes one `ExecutorBackend` delegate whose blob is
//! a nested `.pte` of the region (its constants inside) with the compile spec
//! `target_device`.
//!
//! **Device propagation** (upstream's `PropagateDevicePass`, spec §6), with these
//! differences:
//! - a value is uploaded once per device, however many delegates read it (upstream
//!   uploads once per consumer); a device value that a host instruction overwrites is
//!   uploaded again;
//! - a delegate output read by later delegates on the same device is passed to them
//!   directly; it is copied back to the host only when a host instruction or the method
//!   output needs it (upstream inserts the copy and then elides the round trip);
//! - `skip_h2d` works for inputs with several users: the input lives on the device and
//!   host users read a device-to-host copy of it (upstream raises an error);
//! - the skip flags imply `alloc_graph_input=False` / `alloc_graph_output=False` for
//!   that method, which upstream leaves to the user (and a program that forgets it
//!   fails at run time).

use crate::analysis::{
    Analysis, Kind, instructions, is_constant, is_external, nbytes, set_tensor_device, tensor,
    tensor_device,
};
use crate::planner::{self, AliasGroups, MethodPlanStats, PlanOptions, Storage};
use etch_core::{Device, Error, Result, ScalarType};
use etch_format::schema::pte;
use etch_format::{ProgramParts, WriteOptions};
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};

/// The backend id of the nested-program backend.
pub const EXECUTOR_BACKEND_ID: &str = "ExecutorBackend";
/// The compile spec naming a delegate's device.
pub const TARGET_DEVICE_KEY: &str = "target_device";
const H2D: &str = "et_copy::_h2d_copy";
const D2H: &str = "et_copy::_d2h_copy";

/// The operators a target device runs, each with the tensor dtypes it takes.
#[derive(Debug, Clone, Default)]
pub struct SupportedOps {
    /// Operator name (`name.overload`) to the dtypes its tensors may have (`None`: any).
    ops: HashMap<String, Option<HashSet<ScalarType>>>,
}

impl SupportedOps {
    /// Supports the operators named `name` or `name.overload` (as kernel registries name
    /// them, e.g. `aten::add.out`), for tensors of any dtype.
    pub fn new<S: Into<String>>(names: impl IntoIterator<Item = S>) -> Self {
        SupportedOps {
            ops: names.into_iter().map(|n| (n.into(), None)).collect(),
        }
    }
    /// Supports each operator for tensors of the listed dtypes only (inputs and outputs
    /// together). An empty list places no restriction (an operator that reads only
    /// tensor metadata, such as `aten::sym_size.int`). An operator listed twice takes the
    /// union.
    pub fn with_op_dtypes<S, D>(ops: impl IntoIterator<Item = (S, D)>) -> Self
    where
        S: Into<String>,
        D: IntoIterator<Item = ScalarType>,
    {
        let mut s = SupportedOps::default();
        s.extend(ops);
        s
    }
    /// Adds operators with their dtypes (as [`SupportedOps::with_op_dtypes`]).
    pub fn extend<S, D>(&mut self, ops: impl IntoIterator<Item = (S, D)>)
    where
        S: Into<String>,
        D: IntoIterator<Item = ScalarType>,
    {
        for (name, dtypes) in ops {
            let set: HashSet<ScalarType> = dtypes.into_iter().collect();
            let entry = self
                .ops
                .entry(name.into())
                .or_insert_with(|| Some(HashSet::new()));
            match (entry.as_mut(), set.is_empty()) {
                (Some(have), false) => have.extend(set),
                _ => *entry = None,
            }
        }
    }
    /// Whether operator `name` (`name.overload`) is supported (for some dtype).
    pub fn supports(&self, name: &str) -> bool {
        self.ops.contains_key(name)
    }
    /// Whether operator `name` takes tensors of `dtype`.
    pub fn supports_dtype(&self, name: &str, dtype: ScalarType) -> bool {
        self.ops
            .get(name)
            .is_some_and(|d| d.as_ref().is_none_or(|d| d.contains(&dtype)))
    }
    /// Number of supported operators.
    pub fn len(&self) -> usize {
        self.ops.len()
    }
    /// True when no operator is supported.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// Which methods a per-method flag applies to.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum MethodSelection {
    /// No method.
    #[default]
    None,
    /// Every method.
    All,
    /// The named methods (unknown names are an error).
    Some(Vec<String>),
}

impl MethodSelection {
    fn applies(&self, method: &str) -> bool {
        match self {
            MethodSelection::None => false,
            MethodSelection::All => true,
            MethodSelection::Some(m) => m.iter().any(|x| x == method),
        }
    }
    fn check(&self, flag: &str, methods: &[String]) -> Result<()> {
        if let MethodSelection::Some(m) = self {
            for name in m {
                if !methods.contains(name) {
                    return Err(Error::invalid_argument(format!(
                        "{flag} names method '{name}'; the program has {}",
                        methods.join(", ")
                    )));
                }
            }
        }
        Ok(())
    }
}

/// How a program is lowered.
#[derive(Debug, Clone)]
pub struct LowerOptions {
    /// The device the delegates run on (not the CPU).
    pub device: Device,
    /// What the device supports.
    pub supported: SupportedOps,
    /// Methods whose inputs are taken on the device (no host-to-device copy).
    pub skip_h2d_inputs: MethodSelection,
    /// Methods whose outputs stay on the device (no device-to-host copy).
    pub skip_d2h_outputs: MethodSelection,
    /// Memory-planning alignment.
    pub alignment: usize,
    /// One delegate per operator instead of maximal regions (what per-op partitioners
    /// such as upstream's test `PerAddDeviceDelegatePartitioner` produce).
    pub per_op: bool,
    /// Turn `aten::linear` calls with constant weights into `etch::linear_group` calls
    /// (when the device has that kernel; default on).
    pub group_linears: bool,
}

impl LowerOptions {
    /// Lowering to `device` with the given support and default flags.
    pub fn new(device: Device, supported: SupportedOps) -> Self {
        LowerOptions {
            device,
            supported,
            skip_h2d_inputs: MethodSelection::None,
            skip_d2h_outputs: MethodSelection::None,
            alignment: planner::DEFAULT_ALIGNMENT,
            per_op: false,
            group_linears: true,
        }
    }
}

/// What lowering did to one method.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MethodLowering {
    /// The method's name.
    pub method: String,
    /// Delegates created.
    pub delegates: usize,
    /// Kernel calls moved into delegates.
    pub delegated_instructions: usize,
    /// Kernel calls left on the host.
    pub host_instructions: usize,
    /// Host-to-device copies inserted.
    pub h2d_copies: usize,
    /// Device-to-host copies inserted.
    pub d2h_copies: usize,
    /// Uploads saved because the value was already on the device (upstream uploads once
    /// per consumer).
    pub uploads_reused: usize,
    /// Device-to-host-to-device round trips elided (a delegate output fed to another
    /// delegate on the same device).
    pub round_trips_elided: usize,
    /// Device-to-host copies not needed (no host reader, or skipped outputs).
    pub downloads_skipped: usize,
    /// Method inputs taken on the device (`skip_h2d`).
    pub device_inputs: usize,
    /// Method outputs left on the device (`skip_d2h`).
    pub device_outputs: usize,
    /// Planned bytes per device, before and after (the method's own buffers).
    pub plan: MethodPlanStats,
    /// Bytes the delegates' nested programs plan (on the device, at load).
    pub delegate_planned_bytes: u64,
    /// Pieces of persistent state (mutable buffers, with their views) living on the
    /// device.
    pub device_state: usize,
    /// Pieces of persistent state left on the host (a host instruction or a method output
    /// reads them).
    pub host_state: usize,
    /// Broadcast matmuls (`expand_copy` of a 2-D weight + `bmm`) turned into one `mm`.
    pub matmuls_rewritten: usize,
    /// `aten::linear` calls with constant weights that became `etch::linear_group` calls
    /// (consecutive ones of one input merged; when the device has that kernel) ...
    pub linears_grouped: usize,
    /// ... and how many `etch::linear_group` calls they became.
    pub linear_groups: usize,
    /// Readers of a host-read position (`_local_scalar_dense` of an int64 element) that
    /// now take the element itself and read it on the device (`llama::` ops' `start_pos`,
    /// RoPE table slices).
    pub device_positions: usize,
}

/// What lowering did, per method.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LowerSummary {
    /// One entry per method, in program order.
    pub methods: Vec<MethodLowering>,
}

fn op_key(o: &pte::Operator) -> String {
    etch_core::operator_name(
        o.name.as_deref().unwrap_or(""),
        o.overload.as_deref().unwrap_or(""),
    )
}

/// The constant data of a program (the constant segment).
struct Constants<'a> {
    offsets: &'a [u64],
    data: &'a [u8],
}

impl Constants<'_> {
    fn get(&self, idx: u32, n: usize) -> Result<&[u8]> {
        let off = *self.offsets.get(idx as usize).ok_or_else(|| {
            Error::invalid_program(format!(
                "constant index {idx} out of range ({})",
                self.offsets.len()
            ))
        })?;
        let r = etch_format::checked_range(off, n as u64, self.data.len(), "a constant")?;
        Ok(&self.data[r])
    }
}

fn constants(parts: &ProgramParts) -> Result<Option<Constants<'_>>> {
    let Some(cs) = &parts.program.constant_segment else {
        return Ok(None);
    };
    let offsets = cs.offsets.as_deref().unwrap_or(&[]);
    if offsets.len() <= 1 {
        return Ok(None);
    }
    let data = parts
        .segments
        .get(cs.segment_index as usize)
        .ok_or_else(|| Error::invalid_program("the constant segment index is out of range"))?;
    Ok(Some(Constants { offsets, data }))
}

fn is_list(values: &[pte::EValue], v: usize) -> bool {
    matches!(
        values[v].val,
        Some(pte::KernelTypes::TensorList(_)) | Some(pte::KernelTypes::OptionalTensorList(_))
    )
}

fn is_scalar(values: &[pte::EValue], v: usize) -> bool {
    matches!(
        values[v].val,
        Some(pte::KernelTypes::Int(_))
            | Some(pte::KernelTypes::Double(_))
            | Some(pte::KernelTypes::Bool(_))
    )
}

/// What the partitioner knows of each value of a method.
struct Facts {
    /// Instructions writing the value.
    writers: Vec<u32>,
    /// The instruction that first references the value, when that reference writes it.
    first_ref_write: Vec<Option<usize>>,
    /// Referenced by some instruction.
    seen: Vec<bool>,
    is_input: Vec<bool>,
    is_output: Vec<bool>,
    /// An Int, Double or Bool known only at run time (a method input, or written by an
    /// instruction): a delegate takes it as an input.
    runtime_scalar: Vec<bool>,
    /// The storage group of persistent state (a mutable buffer and its views) the value
    /// belongs to.
    state_group: Vec<Option<usize>>,
    /// Per state group: the instructions referencing its members.
    state_users: BTreeMap<usize, Vec<usize>>,
    /// State groups that must stay on the host whatever the regions (a member is a method
    /// input or output).
    state_pinned_to_host: HashSet<usize>,
}

impl Facts {
    fn new(
        a: &Analysis,
        values: &[pte::EValue],
        groups: &AliasGroups,
        persistent: &[bool],
    ) -> Facts {
        let nv = values.len();
        let mut writers = vec![0u32; nv];
        let mut first_ref_write = vec![None::<usize>; nv];
        let mut seen = vec![false; nv];
        for i in 0..a.len() {
            for &v in &a.uses[i] {
                if !seen[v] {
                    seen[v] = true;
                    if a.writes[i].contains(&v) {
                        first_ref_write[v] = Some(i);
                    }
                }
            }
            for &w in &a.writes[i] {
                writers[w] += 1;
            }
        }
        let is_input: Vec<bool> = (0..nv).map(|v| a.inputs.contains(&v)).collect();
        let is_output: Vec<bool> = (0..nv).map(|v| a.outputs.contains(&v)).collect();
        let runtime_scalar = (0..nv)
            .map(|v| is_scalar(values, v) && (writers[v] > 0 || is_input[v]))
            .collect();
        let state_reps: HashSet<usize> = (0..nv)
            .filter(|&v| persistent.get(v).copied().unwrap_or(false))
            .map(|v| groups.find(v))
            .collect();
        let state_group: Vec<Option<usize>> = (0..nv)
            .map(|v| {
                let g = groups.find(v);
                (tensor(values, v).is_some() && state_reps.contains(&g)).then_some(g)
            })
            .collect();
        let mut state_users: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, uses) in a.uses.iter().enumerate() {
            for g in uses.iter().filter_map(|&u| state_group[u]) {
                let e = state_users.entry(g).or_default();
                if e.last() != Some(&i) {
                    e.push(i);
                }
            }
        }
        let state_pinned_to_host = (0..nv)
            .filter(|&v| is_input[v] || is_output[v])
            .filter_map(|v| state_group[v])
            .collect();
        Facts {
            writers,
            first_ref_write,
            seen,
            is_input,
            is_output,
            runtime_scalar,
            state_group,
            state_users,
            state_pinned_to_host,
        }
    }

    /// Whether instruction `i` may run in a delegate, if the state it touches lives on
    /// the device: a supported kernel whose every tensor has a dtype its operator takes,
    /// writing only fresh values (tensors, lists of them, scalars) or state in place.
    fn eligible(
        &self,
        i: usize,
        a: &Analysis,
        values: &[pte::EValue],
        operators: &[pte::Operator],
        supported: &SupportedOps,
    ) -> bool {
        let Kind::Kernel { op } = a.kind[i] else {
            return false;
        };
        let key = op_key(&operators[op]);
        if !supported.supports(&key) || key.starts_with("et_copy::") || a.writes[i].is_empty() {
            return false;
        }
        let fresh = |w: usize| {
            self.writers[w] == 1 && self.first_ref_write[w] == Some(i) && !self.is_input[w]
        };
        let writes_ok = a.writes[i].iter().all(|&w| {
            if self.state_group[w].is_some() {
                // State updated in place on the device.
                return true;
            }
            match tensor(values, w) {
                // Unplanned outputs of an instruction are runtime views (et_view): they
                // may not leave the region (checked with the regions).
                Some(t) => fresh(w) && (t.allocation_info.is_some() || !is_constant(t)),
                None => is_list(values, w) || (is_scalar(values, w) && fresh(w)),
            }
        });
        let dtypes_ok = a.uses[i].iter().all(|&u| {
            tensor(values, u).is_none_or(|t| {
                ScalarType::from_i8(t.scalar_type as i8)
                    .is_ok_and(|s| supported.supports_dtype(&key, s))
            })
        });
        writes_ok && dtypes_ok
    }

    /// Keeps on the host every state group that a non-eligible instruction touches (and
    /// the instructions touching it), until stable. `eligible` becomes `base` minus the
    /// demoted instructions minus those touching host state.
    fn settle_state(
        &self,
        a: &Analysis,
        base: &[bool],
        demoted: &[bool],
        host_state: &mut HashSet<usize>,
        eligible: &mut [bool],
    ) {
        host_state.extend(self.state_pinned_to_host.iter().copied());
        loop {
            for i in 0..eligible.len() {
                eligible[i] = base[i]
                    && !demoted[i]
                    && !a.uses[i]
                        .iter()
                        .any(|&u| self.state_group[u].is_some_and(|g| host_state.contains(&g)));
            }
            let before = host_state.len();
            for (g, users) in &self.state_users {
                if users.iter().any(|&i| !eligible[i]) {
                    host_state.insert(*g);
                }
            }
            if host_state.len() == before {
                break;
            }
        }
    }
}

/// Lowers every method of `parts` to `opts.device` in place.
pub fn lower(parts: &mut ProgramParts, opts: &LowerOptions) -> Result<LowerSummary> {
    if opts.device.is_cpu() {
        return Err(Error::invalid_argument(
            "lowering needs a device other than the CPU (e.g. cuda:0); use --replan-only to re-plan a CPU program",
        ));
    }
    if opts.device.index < 0 {
        return Err(Error::invalid_argument(format!(
            "invalid device {}",
            opts.device
        )));
    }
    let methods: Vec<String> = parts
        .program
        .execution_plan
        .iter()
        .flatten()
        .map(|p| p.name.clone().unwrap_or_default())
        .collect();
    opts.skip_h2d_inputs.check("--skip-h2d-inputs", &methods)?;
    opts.skip_d2h_outputs
        .check("--skip-d2h-outputs", &methods)?;
    if parts.has_inline_constants() {
        return Err(Error::not_supported(
            "the program keeps constants inline (the deprecated constant_buffer layout); re-export it with a current ExecuTorch",
        ));
    }
    for plan in parts.program.execution_plan.iter().flatten() {
        let name = plan.name.as_deref().unwrap_or("");
        if plan.non_const_buffer_device.as_ref().is_some_and(|d| {
            d.iter()
                .any(|e| e.device_type != pte::DeviceType::Cpu || e.device_index != 0)
        }) || plan
            .operators
            .iter()
            .flatten()
            .any(|o| matches!(o.name.as_deref(), Some(H2D) | Some(D2H)))
        {
            return Err(Error::not_supported(format!(
                "method '{name}' already has device placement; lower the original CPU program"
            )));
        }
        for v in plan.values.iter().flatten() {
            if let Some(pte::KernelTypes::Tensor(t)) = &v.val
                && !tensor_device(t)?.is_cpu()
            {
                return Err(Error::not_supported(format!(
                    "method '{name}' already has device tensors; lower the original CPU program"
                )));
            }
        }
    }
    let mut summary = LowerSummary::default();
    let mut plans = parts.program.execution_plan.take().unwrap_or_default();
    for plan in plans.iter_mut() {
        // Delegate blobs go to new segments, after those the program has.
        let (lowered, blobs, mut m) = lower_plan(parts, plan.clone(), opts)?;
        parts.segments.extend(blobs);
        m.method = lowered.name.clone().unwrap_or_default();
        *plan = lowered;
        summary.methods.push(m);
    }
    parts.program.execution_plan = Some(plans);
    compact_constants(parts)?;
    Ok(summary)
}

/// Lowers one method. Delegate `k` it creates refers to its blob (the `k`-th returned) as
/// segment `parts.segments.len() + k`: the caller appends the blobs in order.
fn lower_plan(
    parts: &ProgramParts,
    mut plan: pte::ExecutionPlan,
    opts: &LowerOptions,
) -> Result<(pte::ExecutionPlan, Vec<Vec<u8>>, MethodLowering)> {
    let name = plan.name.clone().unwrap_or_default();
    let skip_h2d = opts.skip_h2d_inputs.applies(&name);
    let skip_d2h = opts.skip_d2h_outputs.applies(&name);
    let matmuls_rewritten = crate::rewrite::broadcast_matmul(&mut plan)?;
    let (linears_grouped, linear_groups) = if opts.group_linears {
        crate::linear_group::group_linears(&mut plan, &opts.supported)?
    } else {
        (0, 0)
    };
    let device_positions = crate::positions::device_positions(&mut plan, &opts.supported)?;
    if skip_h2d || skip_d2h {
        crate::views::materialize(&mut plan, skip_h2d, skip_d2h)?;
    }
    let a = Analysis::new(&plan)?;
    let n = a.len();
    let mut storage = Storage::of(&plan)?;
    let groups = storage.groups.clone();
    let persistent = storage.persistent.clone();
    let values = plan.values.clone().unwrap_or_default();
    let nv = values.len();
    let operators = plan.operators.clone().unwrap_or_default();
    let dev = opts.device;
    let mut out = MethodLowering {
        matmuls_rewritten,
        linears_grouped,
        linear_groups,
        device_positions,
        ..Default::default()
    };

    let f = Facts::new(&a, &values, &groups, &persistent);
    let Facts {
        ref writers,
        ref first_ref_write,
        ref seen,
        ref is_input,
        ref is_output,
        ref runtime_scalar,
        ref state_group,
        ..
    } = f;
    // Basic blocks: split at jump targets and after jumps.
    let mut block = vec![0usize; n];
    {
        let mut starts = vec![false; n + 1];
        for (j, k) in a.kind.iter().enumerate() {
            if let Kind::Jump { dest } = k {
                starts[*dest] = true;
                starts[j + 1] = true;
            }
        }
        let mut b = 0;
        for i in 0..n {
            if i > 0 && starts[i] {
                b += 1;
            }
            block[i] = b;
        }
    }

    // Eligibility, assuming every piece of state can live on the device; state whose
    // users do not all end up delegated stays on the host (settled with the regions).
    let base_eligible: Vec<bool> = (0..n)
        .map(|i| f.eligible(i, &a, &values, &operators, &opts.supported))
        .collect();
    let mut host_state: HashSet<usize> = HashSet::new();
    let mut demoted = vec![false; n];
    let mut eligible = base_eligible.clone();

    // Dependencies over storage (alias-group representatives).
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
    {
        let mut last_writer: HashMap<usize, usize> = HashMap::new();
        let mut readers: HashMap<usize, Vec<usize>> = HashMap::new();
        let mut block_nodes: Vec<usize> = Vec::new();
        let instrs = instructions(&plan)?;
        for i in 0..n {
            if i > 0 && block[i] != block[i - 1] {
                block_nodes.clear();
            }
            let mut p = Vec::new();
            let mut uses: Vec<usize> = a.uses[i].iter().map(|&v| groups.find(v)).collect();
            if let Some(pte::InstructionArguments::FreeCall(f)) = &instrs[i].instr_args {
                uses.push(groups.find(f.value_index as usize));
            }
            for &u in &uses {
                if let Some(&w) = last_writer.get(&u) {
                    p.push(w);
                }
            }
            for &w in &a.writes[i] {
                let w = groups.find(w);
                p.extend(readers.get(&w).into_iter().flatten().copied());
            }
            if matches!(a.kind[i], Kind::Jump { .. }) {
                p.extend(block_nodes.iter().copied());
            }
            for &u in &uses {
                readers.entry(u).or_default().push(i);
            }
            for &w in &a.writes[i] {
                let w = groups.find(w);
                last_writer.insert(w, i);
                readers.insert(w, Vec::new());
            }
            p.retain(|&x| x != i && block[x] == block[i]);
            p.sort_unstable();
            p.dedup();
            preds[i] = p;
            block_nodes.push(i);
        }
    }
    let mut succs: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, p) in preds.iter().enumerate() {
        for &q in p {
            succs[q].push(i);
        }
    }
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); nv];
    for i in 0..n {
        for &u in &a.uses[i] {
            if !a.writes[i].contains(&u) || first_ref_write[u].is_none_or(|f| f != i) {
                users[u].push(i);
            }
        }
    }

    // Regions: stage by stage; demote instructions whose region would need a non-tensor
    // or unplanned output, and keep on the host the state some host instruction touches,
    // until stable.
    let mut region_of: Vec<Option<usize>>;
    let mut regions: Vec<Vec<usize>>;
    loop {
        f.settle_state(&a, &base_eligible, &demoted, &mut host_state, &mut eligible);
        let mut stage = vec![0usize; n];
        for i in 0..n {
            let s = preds[i].iter().map(|&p| stage[p]).max().unwrap_or(0);
            stage[i] = s + usize::from(!eligible[i]);
        }
        // As late as possible for device instructions: the latest stage that keeps every
        // edge's constraint, so work that depends only on constants (a weight's permute)
        // joins the region of its consumer instead of the first region.
        for i in (0..n).rev() {
            if !eligible[i] || succs[i].is_empty() {
                continue;
            }
            let latest = succs[i]
                .iter()
                .map(|&s| if eligible[s] { stage[s] } else { stage[s] - 1 })
                .min()
                .unwrap_or(stage[i]);
            stage[i] = stage[i].max(latest);
        }
        let mut key_to_region: BTreeMap<(usize, usize, usize), usize> = BTreeMap::new();
        region_of = vec![None; n];
        regions = Vec::new();
        for i in 0..n {
            if !eligible[i] {
                continue;
            }
            let key = (block[i], stage[i], if opts.per_op { i } else { 0 });
            let r = *key_to_region.entry(key).or_insert_with(|| {
                regions.push(Vec::new());
                regions.len() - 1
            });
            regions[r].push(i);
            region_of[i] = Some(r);
        }
        // A delegate's outputs are planned tensors: a list, a scalar or a runtime view it
        // writes must stay inside it.
        let mut demote = Vec::new();
        for (r, nodes) in regions.iter().enumerate() {
            for &i in nodes {
                for &w in &a.writes[i] {
                    let not_planned = match tensor(&values, w) {
                        Some(t) => t.allocation_info.is_none(),
                        None => true,
                    };
                    if not_planned
                        && (is_output[w] || users[w].iter().any(|&u| region_of[u] != Some(r)))
                    {
                        demote.push(i);
                    }
                }
            }
        }
        if demote.is_empty() {
            break;
        }
        for i in demote {
            demoted[i] = true;
        }
    }

    // Topological order of the units (host instructions and regions), block by block.
    let nunits = n + regions.len();
    let unit_of = |i: usize| region_of[i].map_or(i, |r| n + r);
    let mut unit_preds: Vec<HashSet<usize>> = vec![HashSet::new(); nunits];
    let mut unit_succs: Vec<Vec<usize>> = vec![Vec::new(); nunits];
    for (i, pi) in preds.iter().enumerate() {
        let ui = unit_of(i);
        for &p in pi {
            let up = unit_of(p);
            if up != ui && unit_preds[ui].insert(up) {
                unit_succs[up].push(ui);
            }
        }
    }
    let unit_key = |u: usize| if u < n { u } else { regions[u - n][0] };
    let mut order: Vec<usize> = Vec::with_capacity(nunits);
    {
        let mut indeg: Vec<usize> = unit_preds.iter().map(|p| p.len()).collect();
        let mut present = vec![false; nunits];
        for i in 0..n {
            present[unit_of(i)] = true;
        }
        let mut heap = BinaryHeap::new();
        for u in 0..nunits {
            if present[u] && indeg[u] == 0 {
                heap.push(std::cmp::Reverse((block[unit_key(u)], unit_key(u), u)));
            }
        }
        while let Some(std::cmp::Reverse((_, _, u))) = heap.pop() {
            order.push(u);
            for &s in &unit_succs[u] {
                indeg[s] -= 1;
                if indeg[s] == 0 {
                    heap.push(std::cmp::Reverse((block[unit_key(s)], unit_key(s), s)));
                }
            }
        }
        let expected = present.iter().filter(|&&p| p).count();
        if order.len() != expected {
            return Err(Error::internal(format!(
                "partitioning method '{name}' produced a dependency cycle"
            )));
        }
    }

    // Emit.
    let mut new_values = values.clone();
    let mut new_ops = operators.clone();
    let op_index = |ops: &mut Vec<pte::Operator>, name: &str| -> i32 {
        if let Some(k) = ops
            .iter()
            .position(|o| o.name.as_deref() == Some(name) && o.overload.as_deref() == Some("out"))
        {
            return k as i32;
        }
        ops.push(pte::Operator {
            name: Some(name.to_string()),
            overload: Some("out".to_string()),
        });
        (ops.len() - 1) as i32
    };
    let instrs = instructions(&plan)?.to_vec();
    let mut new_instrs: Vec<pte::Instruction> = Vec::new();
    let mut delegates = plan.delegates.clone().unwrap_or_default();
    let mut blobs: Vec<Vec<u8>> = Vec::new();
    let mut block_start_new: HashMap<usize, usize> = HashMap::new();
    let mut jump_fixups: Vec<usize> = Vec::new();
    // Members of each storage group, and which members are static views.
    let mut members: HashMap<usize, Vec<usize>> = HashMap::new();
    for v in 0..nv {
        if tensor(&values, v).is_some() {
            members.entry(groups.find(v)).or_default().push(v);
        }
    }
    let static_view: Vec<bool> = (0..nv)
        .map(|v| {
            tensor(&values, v).is_some_and(|t| t.allocation_info.is_some())
                && !is_input[v]
                && !persistent[v]
                && writers[v] == 0
                && seen[v]
        })
        .collect();
    // Device twins: the device value standing for a host value. A twin copies its host
    // value's planned offset and joins the twins of its host group, so views of a value
    // stay views of its twin on the device.
    let mut twin: HashMap<usize, usize> = HashMap::new();
    // Host values whose twin holds their current data.
    let mut valid: HashSet<usize> = HashSet::new();
    let mut produced: HashSet<usize> = HashSet::new();
    let mut pinned: HashMap<usize, usize> = HashMap::new();
    let mut host_alias: HashMap<usize, usize> = HashMap::new();
    let is_region_user = |u: usize| region_of[u].is_some();
    let make_twin = |v: usize,
                     new_values: &mut Vec<pte::EValue>,
                     storage: &mut Storage,
                     twin: &mut HashMap<usize, usize>|
     -> usize {
        if let Some(&t) = twin.get(&v) {
            return t;
        }
        let mut ev = new_values[v].clone();
        if let Some(pte::KernelTypes::Tensor(t)) = &mut ev.val {
            t.data_buffer_idx = 0;
            t.extra_tensor_info = None;
            set_tensor_device(t, dev);
            if t.allocation_info.is_none() {
                t.allocation_info = Some(Box::new(placeholder()));
            }
        }
        new_values.push(ev);
        let t = new_values.len() - 1;
        storage.grow(new_values.len());
        let rep = groups.find(v);
        if let Some(other) = members
            .get(&rep)
            .into_iter()
            .flatten()
            .find_map(|m| twin.get(m).copied())
        {
            storage.groups.union(other, t);
        }
        twin.insert(v, t);
        t
    };
    let h2d_op = op_index(&mut new_ops, H2D);
    let d2h_op = op_index(&mut new_ops, D2H);
    let kernel = |op: i32, args: Vec<i32>| pte::Instruction {
        instr_args: Some(pte::InstructionArguments::KernelCall(Box::new(
            pte::KernelCall {
                op_index: op,
                args: Some(args),
            },
        ))),
    };

    // skip_h2d: inputs read by delegates live on the device.
    if skip_h2d {
        for &v in &a.inputs {
            let Some(t) = tensor(&values, v) else {
                continue;
            };
            if is_constant(t) || !users[v].iter().any(|&u| is_region_user(u)) {
                continue;
            }
            if let Some(pte::KernelTypes::Tensor(t)) = &mut new_values[v].val {
                set_tensor_device(t, dev);
            }
            pinned.insert(v, v);
            out.device_inputs += 1;
            if users[v].iter().any(|&u| !is_region_user(u)) {
                // Host readers get a copy.
                let mut ev = values[v].clone();
                if let Some(pte::KernelTypes::Tensor(t)) = &mut ev.val {
                    t.allocation_info = Some(Box::new(placeholder()));
                    t.extra_tensor_info = None;
                }
                new_values.push(ev);
                let host = new_values.len() - 1;
                storage.grow(new_values.len());
                host_alias.insert(v, host);
                new_instrs.push(kernel(d2h_op, vec![v as i32, host as i32, host as i32]));
                out.d2h_copies += 1;
            }
        }
    }

    // State whose users are all delegated lives on the device: planned in the device
    // buffer (initial data uploaded at load), passed to the delegates, updated in place.
    let mut device_state: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (v, g) in state_group.iter().enumerate() {
        if let Some(g) = *g
            && !host_state.contains(&g)
        {
            device_state.entry(g).or_default().push(v);
        }
    }
    for members in device_state.values() {
        for &m in members {
            if let Some(pte::KernelTypes::Tensor(t)) = &mut new_values[m].val {
                set_tensor_device(t, dev);
            }
            pinned.insert(m, m);
        }
    }
    out.device_state = device_state.len();
    out.host_state = f.state_users.len() - device_state.len();

    let mut last_block = usize::MAX;
    for &u in &order {
        let b = block[unit_key(u)];
        if b != last_block {
            block_start_new.insert(b, new_instrs.len());
            if a.has_control_flow() {
                valid.clear();
                produced.clear();
            }
            last_block = b;
        }
        if u < n {
            // A host instruction.
            let i = u;
            let mut ins = instrs[i].clone();
            let remap = |x: &mut i32| {
                if let Some(&h) = host_alias.get(&(*x as usize)) {
                    *x = h as i32;
                }
            };
            match &mut ins.instr_args {
                Some(pte::InstructionArguments::KernelCall(k)) => {
                    for x in k.args.iter_mut().flatten() {
                        remap(x);
                    }
                    out.host_instructions += 1;
                }
                Some(pte::InstructionArguments::DelegateCall(k)) => {
                    for x in k.args.iter_mut().flatten() {
                        remap(x);
                    }
                }
                Some(pte::InstructionArguments::MoveCall(m)) => remap(&mut m.move_from),
                Some(pte::InstructionArguments::JumpFalseCall(j)) => {
                    remap(&mut j.cond_value_index);
                    jump_fixups.push(new_instrs.len());
                }
                _ => {}
            }
            if !host_alias.is_empty() {
                for &x in &a.uses[i] {
                    if let Some(items) = list_items_mut(&mut new_values[x]) {
                        for it in items {
                            if let Some(&h) = host_alias.get(&(*it as usize)) {
                                *it = h as i32;
                            }
                        }
                    }
                }
            }
            // A host write makes the device copies of that storage stale.
            for &w in &a.writes[i] {
                for m in members.get(&groups.find(w)).into_iter().flatten() {
                    valid.remove(m);
                }
            }
            new_instrs.push(ins);
            continue;
        }
        // A region.
        let r = u - n;
        let nodes = &regions[r];
        let in_region: HashSet<usize> = nodes.iter().copied().collect();
        let mut defined: Vec<usize> = Vec::new();
        let mut used: Vec<usize> = Vec::new();
        for &i in nodes {
            for &w in &a.writes[i] {
                if !defined.contains(&w) {
                    defined.push(w);
                }
            }
            for &x in &a.uses[i] {
                if !used.contains(&x) {
                    used.push(x);
                }
            }
        }
        let def_groups: HashSet<usize> = defined
            .iter()
            .filter(|&&w| tensor(&values, w).is_some() && state_group[w].is_none())
            .map(|&w| groups.find(w))
            .collect();
        let inputs: Vec<usize> = used
            .iter()
            .copied()
            .filter(|&x| {
                // State is passed in and updated in place; a run-time scalar is passed by
                // value; a static view of a value the region computes is computed with it.
                state_group[x].is_some()
                    || (runtime_scalar[x] && !defined.contains(&x))
                    || (!defined.contains(&x)
                        && tensor(&values, x).is_some_and(|t| !is_constant(t))
                        && !(static_view[x] && def_groups.contains(&groups.find(x))))
            })
            .collect();
        let outside_user = |m: usize| users[m].iter().any(|x| !in_region.contains(x));
        let host_user = |m: usize| {
            users[m].iter().any(|&x| {
                !in_region.contains(&x) && (!is_region_user(x) || block[x] != block[nodes[0]])
            })
        };
        let mut outputs: Vec<usize> = Vec::new();
        for &w in &defined {
            if tensor(&values, w).is_none() || state_group[w].is_some() {
                continue;
            }
            let group = members.get(&groups.find(w)).cloned().unwrap_or_default();
            if group.iter().any(|&m| is_output[m] || outside_user(m)) {
                outputs.push(w);
            }
        }
        let mut dargs: Vec<i32> = Vec::new();
        for &x in &inputs {
            if let Some(&d) = pinned.get(&x) {
                dargs.push(d as i32);
                continue;
            }
            if runtime_scalar[x] {
                dargs.push(x as i32);
                continue;
            }
            if valid.contains(&x) {
                if produced.contains(&x) {
                    out.round_trips_elided += 1;
                } else {
                    out.uploads_reused += 1;
                }
                let t = make_twin(x, &mut new_values, &mut storage, &mut twin);
                dargs.push(t as i32);
                continue;
            }
            let d = make_twin(x, &mut new_values, &mut storage, &mut twin);
            let src = host_alias.get(&x).copied().unwrap_or(x);
            new_instrs.push(kernel(h2d_op, vec![src as i32, d as i32, d as i32]));
            out.h2d_copies += 1;
            valid.insert(x);
            dargs.push(d as i32);
        }
        let mut downloads = Vec::new();
        for &w in &outputs {
            let group = members.get(&groups.find(w)).cloned().unwrap_or_default();
            let host_readers = group
                .iter()
                .any(|&m| host_user(m) || (m != w && is_output[m]));
            // Outputs kept on the device: row-major ones that no host value shares
            // (etch's owned device tensors are row-major; others are copied back).
            let default_order = tensor(&values, w).is_some_and(|t| {
                t.dim_order
                    .iter()
                    .flatten()
                    .enumerate()
                    .all(|(k, &d)| d as usize == k)
            });
            let d =
                if is_output[w] && skip_d2h && !host_readers && group.len() == 1 && default_order {
                    if let Some(pte::KernelTypes::Tensor(t)) = &mut new_values[w].val {
                        set_tensor_device(t, dev);
                    }
                    out.device_outputs += 1;
                    out.downloads_skipped += 1;
                    twin.insert(w, w);
                    w
                } else {
                    let d = make_twin(w, &mut new_values, &mut storage, &mut twin);
                    if is_output[w] || host_readers {
                        downloads.push((d, w));
                    } else {
                        out.downloads_skipped += 1;
                    }
                    d
                };
            valid.insert(w);
            produced.insert(w);
            for &m in &group {
                if static_view[m] {
                    valid.insert(m);
                    produced.insert(m);
                }
            }
            dargs.push(d as i32);
        }
        let (blob, nested_bytes) = nested_program(
            parts,
            &plan,
            &values,
            &operators,
            nodes,
            &inputs,
            &outputs,
            &groups,
            opts.alignment,
        )
        .map_err(|e| e.context(format!("building delegate {} of '{name}'", delegates.len())))?;
        blobs.push(blob);
        out.delegate_planned_bytes += nested_bytes;
        delegates.push(pte::BackendDelegate {
            id: Some(EXECUTOR_BACKEND_ID.to_string()),
            processed: Some(Box::new(pte::BackendDelegateDataReference {
                location: pte::DataLocation::Segment,
                index: u32::try_from(parts.segments.len() + blobs.len() - 1)
                    .map_err(|_| Error::invalid_program("too many segments"))?,
            })),
            compile_specs: Some(vec![pte::CompileSpec {
                key: Some(TARGET_DEVICE_KEY.to_string()),
                value: Some(dev.to_string().into_bytes()),
            }]),
        });
        new_instrs.push(pte::Instruction {
            instr_args: Some(pte::InstructionArguments::DelegateCall(Box::new(
                pte::DelegateCall {
                    delegate_index: (delegates.len() - 1) as i32,
                    args: Some(dargs),
                },
            ))),
        });
        for (d, w) in downloads {
            new_instrs.push(kernel(d2h_op, vec![d as i32, w as i32, w as i32]));
            out.d2h_copies += 1;
        }
        out.delegates += 1;
        out.delegated_instructions += nodes.len();
    }
    // Jump destinations: the first instruction emitted for the target block.
    let total = new_instrs.len();
    for &k in &jump_fixups {
        if let Some(pte::InstructionArguments::JumpFalseCall(j)) = &mut new_instrs[k].instr_args {
            let dest = j.destination_instruction as usize;
            j.destination_instruction = if dest >= n {
                total as i32
            } else {
                *block_start_new.get(&block[dest]).ok_or_else(|| {
                    Error::internal(format!("jump target {dest} lost in '{name}'"))
                })? as i32
            };
        }
    }

    // The outer method: new values, instructions, operators and delegates; then memory.
    plan.values = Some(new_values);
    plan.operators = Some(new_ops);
    plan.delegates = Some(delegates);
    if let Some(c) = plan.chains.as_mut().and_then(|c| c.first_mut()) {
        c.instructions = Some(new_instrs);
        c.stacktrace = None;
    }
    compact_operators(&mut plan);
    let popts = PlanOptions {
        alignment: opts.alignment,
        alloc_graph_input: skip_h2d.then_some(false),
        alloc_graph_output: skip_d2h.then_some(false),
    };
    out.plan = planner::plan_method(&mut plan, &popts, Some(&storage), false)?;
    Ok((plan, blobs, out))
}

pub(crate) fn placeholder() -> pte::AllocationDetails {
    pte::AllocationDetails {
        memory_id: 1,
        memory_offset_low: 0,
        memory_offset_high: 0,
    }
}

fn list_items_mut(v: &mut pte::EValue) -> Option<&mut Vec<i32>> {
    match &mut v.val {
        Some(pte::KernelTypes::TensorList(l)) => l.items.as_mut(),
        Some(pte::KernelTypes::OptionalTensorList(l)) => l.items.as_mut(),
        _ => None,
    }
}

/// Drops operators no instruction calls and renumbers the rest.
fn compact_operators(plan: &mut pte::ExecutionPlan) {
    let ops = plan.operators.take().unwrap_or_default();
    let mut used = vec![false; ops.len()];
    let chains = plan.chains.as_deref_mut().unwrap_or(&mut []);
    for c in chains.iter() {
        for ins in c.instructions.iter().flatten() {
            if let Some(pte::InstructionArguments::KernelCall(k)) = &ins.instr_args
                && let Some(u) = used.get_mut(k.op_index as usize)
            {
                *u = true;
            }
        }
    }
    let mut map = vec![0i32; ops.len()];
    let mut kept = Vec::new();
    for (i, o) in ops.into_iter().enumerate() {
        if used[i] {
            map[i] = kept.len() as i32;
            kept.push(o);
        }
    }
    for c in chains.iter_mut() {
        for ins in c.instructions.iter_mut().flatten() {
            if let Some(pte::InstructionArguments::KernelCall(k)) = &mut ins.instr_args
                && let Some(&m) = map.get(k.op_index as usize)
            {
                k.op_index = m;
            }
        }
    }
    plan.operators = Some(kept);
}

/// The nested `.pte` of a region: its instructions, the values they use (constants
/// copied in), the region inputs and outputs as method inputs and outputs, planned.
#[allow(clippy::too_many_arguments)]
fn nested_program(
    parts: &ProgramParts,
    outer: &pte::ExecutionPlan,
    values: &[pte::EValue],
    operators: &[pte::Operator],
    nodes: &[usize],
    inputs: &[usize],
    outputs: &[usize],
    groups: &AliasGroups,
    alignment: usize,
) -> Result<(Vec<u8>, u64)> {
    let consts = constants(parts)?;
    let instrs = instructions(outer)?;
    let mut nb = Nested {
        values,
        consts,
        map: HashMap::new(),
        nvals: Vec::new(),
        origin: Vec::new(),
        cdata: Vec::new(),
        coffsets: vec![0],
        io: inputs.iter().chain(outputs).copied().collect(),
    };
    let mut ops: Vec<pte::Operator> = Vec::new();
    let mut op_map: HashMap<usize, i32> = HashMap::new();
    let mut ninstrs = Vec::new();
    let ins: Vec<i32> = inputs
        .iter()
        .map(|&v| nb.add(v).map(|k| k as i32))
        .collect::<Result<_>>()?;
    for &i in nodes {
        let Some(pte::InstructionArguments::KernelCall(k)) = &instrs[i].instr_args else {
            return Err(Error::internal(
                "a delegated instruction is not a kernel call",
            ));
        };
        let op = k.op_index as usize;
        let next = op_map.len() as i32;
        let nop = *op_map.entry(op).or_insert_with(|| {
            ops.push(operators[op].clone());
            next
        });
        let mut args = Vec::new();
        for &x in k.args.as_deref().unwrap_or(&[]) {
            args.push(nb.add(x as usize)? as i32);
        }
        ninstrs.push(pte::Instruction {
            instr_args: Some(pte::InstructionArguments::KernelCall(Box::new(
                pte::KernelCall {
                    op_index: nop,
                    args: Some(args),
                },
            ))),
        });
    }
    let mut outs: Vec<i32> = outputs
        .iter()
        .map(|&v| nb.add(v).map(|k| k as i32))
        .collect::<Result<_>>()?;
    let Nested {
        mut nvals,
        origin,
        cdata,
        coffsets,
        ..
    } = nb;
    // Storage groups carried over from the outer method, except for the inputs: each
    // input is bound to the caller's memory on its own.
    let input_set: HashSet<usize> = inputs.iter().copied().collect();
    let mut g = AliasGroups::singletons(nvals.len());
    let mut first_of: HashMap<usize, usize> = HashMap::new();
    let mut group_size: HashMap<usize, usize> = HashMap::new();
    for (k, &o) in origin.iter().enumerate() {
        if input_set.contains(&o) || tensor(values, o).is_none() {
            continue;
        }
        let rep = groups.find(o);
        *group_size.entry(rep).or_insert(0) += 1;
        match first_of.get(&rep) {
            Some(&f) => g.union(f, k),
            None => {
                first_of.insert(rep, k);
            }
        }
    }
    // An output that shares storage with other values of the nested method (a view of it,
    // or it a view) cannot be bound to the caller's memory: the method returns a copy.
    let mut clone_op = None;
    for (j, &o) in outputs.iter().enumerate() {
        if group_size.get(&groups.find(o)).copied().unwrap_or(0) <= 1 {
            continue;
        }
        let op = *clone_op.get_or_insert_with(|| {
            ops.push(pte::Operator {
                name: Some("aten::clone".to_string()),
                overload: Some("out".to_string()),
            });
            (ops.len() - 1) as i32
        });
        let src = outs[j];
        let mut ev = nvals[src as usize].clone();
        if let Some(pte::KernelTypes::Tensor(t)) = &mut ev.val {
            t.allocation_info = Some(Box::new(placeholder()));
        }
        nvals.push(ev);
        let copy = (nvals.len() - 1) as i32;
        nvals.push(pte::EValue {
            val: Some(pte::KernelTypes::Null(Box::new(pte::Null {}))),
        });
        let none = (nvals.len() - 1) as i32;
        ninstrs.push(pte::Instruction {
            instr_args: Some(pte::InstructionArguments::KernelCall(Box::new(
                pte::KernelCall {
                    op_index: op,
                    args: Some(vec![src, none, copy, copy]),
                },
            ))),
        });
        outs[j] = copy;
    }
    g.grow(nvals.len());
    let mut plan = pte::ExecutionPlan {
        name: Some("forward".to_string()),
        container_meta_type: outer.container_meta_type.clone(),
        values: Some(nvals),
        inputs: Some(ins.clone()),
        outputs: Some(outs.clone()),
        chains: Some(vec![pte::Chain {
            inputs: Some(ins),
            outputs: Some(outs),
            instructions: Some(ninstrs),
            stacktrace: None,
        }]),
        operators: Some(ops),
        delegates: Some(Vec::new()),
        non_const_buffer_sizes: Some(vec![0, 0]),
        non_const_buffer_device: None,
    };
    // Region outputs are fresh, so the nested plan's own aliasing matches the outer one.
    // Inputs are bound to the caller's memory (shared, so state updated in place is seen
    // by the caller): they take no planned memory. Outputs stay planned, as upstream's
    // ExecutorBackend copies them out of the nested method.
    let popts = PlanOptions {
        alignment,
        alloc_graph_input: Some(false),
        alloc_graph_output: Some(true),
    };
    let nested_storage = Storage {
        persistent: vec![false; g.len()],
        groups: g,
    };
    let planned = planner::plan_method(&mut plan, &popts, Some(&nested_storage), false)?;
    let has_consts = coffsets.len() > 1;
    let program = pte::Program {
        version: parts.program.version,
        execution_plan: Some(vec![plan]),
        constant_buffer: Some(Vec::new()),
        backend_delegate_data: Some(Vec::new()),
        segments: Some(Vec::new()),
        constant_segment: Some(Box::new(pte::SubsegmentOffsets {
            segment_index: 0,
            offsets: Some(if has_consts { coffsets } else { Vec::new() }),
        })),
        mutable_data_segments: None,
        named_data: None,
    };
    let nested = ProgramParts {
        program,
        segments: if has_consts { vec![cdata] } else { Vec::new() },
    };
    Ok((
        nested.to_bytes(WriteOptions::default())?,
        planned.total_after(),
    ))
}

/// Builds the value table of a nested program: values are copied in on first use (list
/// items first), constants are copied into the nested constant segment, and the region's
/// inputs and outputs are planned.
struct Nested<'a> {
    values: &'a [pte::EValue],
    consts: Option<Constants<'a>>,
    map: HashMap<usize, usize>,
    nvals: Vec<pte::EValue>,
    /// The outer value of each nested value.
    origin: Vec<usize>,
    cdata: Vec<u8>,
    coffsets: Vec<u64>,
    io: HashSet<usize>,
}

impl Nested<'_> {
    fn add(&mut self, v: usize) -> Result<usize> {
        if let Some(&k) = self.map.get(&v) {
            return Ok(k);
        }
        let mut ev = self.values[v].clone();
        let items: Option<Vec<i64>> = match &ev.val {
            Some(pte::KernelTypes::TensorList(l)) => {
                Some(l.items.iter().flatten().map(|&x| x as i64).collect())
            }
            Some(pte::KernelTypes::OptionalTensorList(l)) => {
                Some(l.items.iter().flatten().map(|&x| x as i64).collect())
            }
            Some(pte::KernelTypes::IntList(l)) => Some(l.items.clone().unwrap_or_default()),
            _ => None,
        };
        if let Some(items) = items {
            let mut mapped = Vec::with_capacity(items.len());
            for &x in &items {
                // List items are scalars or tensors, never lists (no recursion).
                if x >= 0
                    && (x as usize >= self.values.len()
                        || matches!(
                            self.values[x as usize].val,
                            Some(pte::KernelTypes::TensorList(_))
                                | Some(pte::KernelTypes::OptionalTensorList(_))
                                | Some(pte::KernelTypes::IntList(_))
                                | Some(pte::KernelTypes::DoubleList(_))
                                | Some(pte::KernelTypes::BoolList(_))
                        ))
                {
                    return Err(Error::invalid_program(format!(
                        "list value {v} holds {x}, which is not a scalar or a tensor"
                    )));
                }
            }
            for x in items {
                // -1 is an absent optional tensor.
                mapped.push(if x < 0 {
                    x
                } else {
                    self.add(x as usize)? as i64
                });
            }
            match &mut ev.val {
                Some(pte::KernelTypes::TensorList(l)) => {
                    l.items = Some(mapped.iter().map(|&x| x as i32).collect())
                }
                Some(pte::KernelTypes::OptionalTensorList(l)) => {
                    l.items = Some(mapped.iter().map(|&x| x as i32).collect())
                }
                Some(pte::KernelTypes::IntList(l)) => l.items = Some(mapped),
                _ => {}
            }
        }
        if let Some(pte::KernelTypes::Tensor(t)) = &mut ev.val {
            if is_external(t) {
                // Named data (a .ptd file): the nested program names the same key.
            } else if t.allocation_info.is_none() && t.data_buffer_idx > 0 {
                let c = self.consts.as_ref().ok_or_else(|| {
                    Error::invalid_program("a constant tensor but no constant segment")
                })?;
                let bytes = c.get(t.data_buffer_idx, nbytes(t)?)?;
                let off = self.cdata.len().next_multiple_of(CONSTANT_ALIGNMENT);
                self.cdata.resize(off, 0);
                self.cdata.extend_from_slice(bytes);
                self.coffsets.push(off as u64);
                t.data_buffer_idx = (self.coffsets.len() - 1) as u32;
            } else if !is_constant(t) {
                // Bound to the caller's memory or computed here: no device of its own, no
                // initial data (state is initialised by the outer method).
                t.extra_tensor_info = None;
                t.data_buffer_idx = 0;
                // Keep a planned value's offset: it fixes the layout of its views.
                if self.io.contains(&v) && t.allocation_info.is_none() {
                    t.allocation_info = Some(Box::new(placeholder()));
                }
            }
        }
        self.nvals.push(ev);
        self.origin.push(v);
        self.map.insert(v, self.nvals.len() - 1);
        Ok(self.nvals.len() - 1)
    }
}

/// Alignment of constants in a constant segment, as upstream writes them.
const CONSTANT_ALIGNMENT: usize = 16;

/// Rewrites the constant segment to hold only constants some method still references
/// (constants moved into delegates leave the outer program).
fn compact_constants(parts: &mut ProgramParts) -> Result<()> {
    let Some(cs) = parts.program.constant_segment.clone() else {
        return Ok(());
    };
    let offsets = cs.offsets.clone().unwrap_or_default();
    if offsets.len() <= 1 {
        return Ok(());
    }
    let seg = cs.segment_index as usize;
    // Another user of the constant segment (shared with something else) keeps it as is.
    let shared = parts
        .program
        .mutable_data_segments
        .iter()
        .flatten()
        .any(|m| m.segment_index as usize == seg)
        || parts.program.execution_plan.iter().flatten().any(|p| {
            p.delegates.iter().flatten().any(|d| {
                d.processed.as_ref().is_some_and(|r| {
                    r.location == pte::DataLocation::Segment && r.index as usize == seg
                })
            })
        });
    if shared {
        return Ok(());
    }
    let mut referenced: HashMap<u32, usize> = HashMap::new();
    let plans = parts.program.execution_plan.as_deref().unwrap_or(&[]);
    for plan in plans {
        let a = Analysis::new(plan)?;
        let values = plan.values.as_deref().unwrap_or(&[]);
        let mut live: HashSet<usize> = a.inputs.iter().chain(&a.outputs).copied().collect();
        for u in &a.uses {
            live.extend(u.iter().copied());
        }
        for v in live {
            if let Some(t) = tensor(values, v)
                && t.allocation_info.is_none()
                && t.data_buffer_idx > 0
                && !is_external(t)
            {
                let n = nbytes(t)?;
                let e = referenced.entry(t.data_buffer_idx).or_insert(0);
                *e = (*e).max(n);
            }
        }
    }
    let data = parts
        .segments
        .get(seg)
        .ok_or_else(|| Error::invalid_program("the constant segment index is out of range"))?;
    let mut keys: Vec<u32> = referenced.keys().copied().collect();
    keys.sort_unstable();
    let mut new_data: Vec<u8> = Vec::new();
    let mut new_offsets: Vec<u64> = vec![0];
    let mut remap: HashMap<u32, u32> = HashMap::new();
    for k in keys {
        let n = referenced[&k];
        let off = *offsets
            .get(k as usize)
            .ok_or_else(|| Error::invalid_program(format!("constant index {k} out of range")))?;
        let r = etch_format::checked_range(off, n as u64, data.len(), "a constant")?;
        let at = new_data.len().next_multiple_of(CONSTANT_ALIGNMENT);
        new_data.resize(at, 0);
        new_data.extend_from_slice(&data[r]);
        remap.insert(k, new_offsets.len() as u32);
        new_offsets.push(at as u64);
    }
    for plan in parts.program.execution_plan.iter_mut().flatten() {
        for v in plan.values.iter_mut().flatten() {
            if let Some(pte::KernelTypes::Tensor(t)) = &mut v.val
                && t.allocation_info.is_none()
                && t.data_buffer_idx > 0
                && !is_external(t)
            {
                t.data_buffer_idx = remap.get(&t.data_buffer_idx).copied().unwrap_or(0);
            }
        }
    }
    parts.segments[seg] = new_data;
    if let Some(c) = parts.program.constant_segment.as_mut() {
        c.offsets = Some(new_offsets);
    }
    Ok(())
}
