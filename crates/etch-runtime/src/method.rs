//! `Method`: a loaded, executable method with its values, planned arenas and resolved
//! instructions.

use crate::backend::{BackendInitContext, BackendRegistry, Delegate};
use crate::memory::{Buffer, SharedArenas, copy_between};
use crate::meta::MethodMeta;
use crate::parse::{DataPlacement, InitialState, TensorDecl, decode_tensor, value_index};
use etch_core::{
    ByteSource, Device, DeviceRegistry, EValue, Error, IntList, KernelContext, KernelFn,
    KernelRegistry, Prefix, Result, ScalarType, Tag, Tensor, TensorImpl, TensorRef, Value,
};
use etch_format::schema::pte;
use etch_format::{NamedDataMap, Program, fb_err};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// What loading a method needs besides the program: kernels, backends, device allocators
/// and external data.
#[derive(Clone)]
pub struct LoadConfig {
    /// Kernels by operator name.
    pub kernels: Arc<KernelRegistry>,
    /// Backends by id.
    pub backends: Arc<BackendRegistry>,
    /// Device allocators, for planned buffers and tensors on devices.
    pub devices: Arc<DeviceRegistry>,
    /// External named data (`.ptd` files), consulted after the program's own named data.
    pub named_data: Option<Arc<dyn NamedDataMap>>,
    /// Places every planned buffer, constant and tensor of the method on this device,
    /// whatever the file says (used by `ExecutorBackend` for its nested program).
    pub target_device: Option<Device>,
    /// Fold constant work (transposes and casts of weights) once at load (default: on).
    pub fold_constants: bool,
    /// Run the kernels' load-time hooks (`KernelRegistry::register_prepare`: weights
    /// packed once for their call sites) when the method loads (default: on).
    pub prepare_kernels: bool,
    /// Fuse chains of kernel calls at load (`KernelRegistry::register_fusion`: a
    /// convolution with the batch norm and activation after it) where the host runs them
    /// (default: on). Fused calls may differ from the unfused ones in the last bits.
    pub fuse_kernels: bool,
    /// Lay 4-d feature maps out channels-last at load where every kernel touching them
    /// allows it and their convolutions gain (`KernelRegistry::register_layout`; needs
    /// `prepare_kernels`, default: on). Results may differ in the last bits (other orders
    /// of sums).
    pub channels_last: bool,
    /// The context a device's kernels get with every call of this (nested) method.
    pub device_context: Option<etch_core::DeviceContext>,
    /// Most bytes of planned memory a method may allocate (`None`: no limit). Loading a
    /// program that asks for more fails with `MemoryAllocationFailed` before allocating.
    pub max_planned_bytes: Option<u64>,
    /// Planned arenas shared with other methods (see [`SharedArenas`]); `None`: the
    /// method allocates its own.
    pub shared_arenas: Option<Arc<SharedArenas>>,
    /// How many programs deep this load is (0 for a top-level program; backends that load
    /// nested programs add one and bound it, so a self-referencing file cannot recurse
    /// forever).
    pub nesting_depth: u32,
    /// Device copies of external constants shared with the other methods (and their
    /// delegates) of a module; `None`: the method uploads its own.
    pub device_constants: Option<Arc<DeviceConstants>>,
}

/// A device copy's key: name, device, dtype and sizes.
type ConstantKey = (String, Device, ScalarType, Vec<usize>);

/// Device copies of external (named) constants, shared by every method of a module and
/// their nested delegates: a weight that `prefill` and `decode` both use is uploaded once
/// per device (upstream's `weight_sharing_across_methods`). Keyed by name, device, dtype
/// and shape; the copies are freed when the last method using them is dropped.
///
/// It also counts the bytes of constants copied to devices while loading (these and the
/// program's own constants), for progress reports ([`DeviceConstants::uploaded_bytes`]).
#[derive(Default)]
pub struct DeviceConstants {
    map: std::sync::Mutex<std::collections::HashMap<ConstantKey, Arc<Buffer>>>,
    uploaded: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for DeviceConstants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.map.lock().map(|m| m.len()).unwrap_or(0);
        f.debug_struct("DeviceConstants")
            .field("tensors", &n)
            .field("uploaded_bytes", &self.uploaded_bytes())
            .finish()
    }
}

impl DeviceConstants {
    /// The shared copy of `key` on `device`, copying `bytes` there the first time (from
    /// the source, chunk by chunk: see [`Buffer::write_from`]).
    fn get_or_upload(
        &self,
        key: ConstantKey,
        bytes: &dyn ByteSource,
        devices: &DeviceRegistry,
    ) -> Result<Arc<Buffer>> {
        let mut map = self
            .map
            .lock()
            .map_err(|_| Error::internal("device constant cache poisoned"))?;
        if let Some(b) = map.get(&key) {
            return Ok(Arc::clone(b));
        }
        let buf = Arc::new(self.upload(bytes, key.1, devices)?);
        map.insert(key, Arc::clone(&buf));
        Ok(buf)
    }

    /// A new buffer on `device` holding `bytes`, counted in [`DeviceConstants::uploaded_bytes`].
    fn upload(
        &self,
        bytes: &dyn ByteSource,
        device: Device,
        devices: &DeviceRegistry,
    ) -> Result<Buffer> {
        let buf = Buffer::allocate(bytes.len(), device, devices)?;
        buf.write_from(0, bytes)?;
        self.uploaded
            .fetch_add(bytes.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(buf)
    }

    /// Bytes of constants copied to devices so far by the methods loaded with this cache
    /// (each shared copy once). Another thread may read it while methods load.
    pub fn uploaded_bytes(&self) -> u64 {
        self.uploaded.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl LoadConfig {
    /// Kernels and backends as given, the process-wide device registry, no external data.
    pub fn new(kernels: Arc<KernelRegistry>, backends: Arc<BackendRegistry>) -> Self {
        LoadConfig {
            kernels,
            backends,
            devices: DeviceRegistry::global(),
            named_data: None,
            target_device: None,
            fold_constants: true,
            prepare_kernels: true,
            fuse_kernels: true,
            channels_last: true,
            device_context: None,
            max_planned_bytes: None,
            shared_arenas: None,
            nesting_depth: 0,
            device_constants: None,
        }
    }
}

/// The state a kernel's load-time hook made for one call site.
#[derive(Clone)]
struct PreparedState(etch_core::Prepared);

impl std::fmt::Debug for PreparedState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PreparedState")
    }
}

#[derive(Debug, Clone)]
enum Instr {
    Kernel {
        op: u32,
        args: Box<[u32]>,
        /// IntList arguments whose items may change at run time; refreshed before the call.
        refresh: Box<[u32]>,
        /// What the kernel's load-time hook prepared for this call, if anything.
        prepared: Option<PreparedState>,
    },
    Delegate {
        index: u32,
        args: Box<[u32]>,
    },
    Move {
        from: u32,
        to: u32,
    },
    JumpFalse {
        cond: u32,
        dest: u32,
    },
    Free,
}

/// Checks that external data recorded with a layout (a `.ptd` entry, a safetensors tensor)
/// has the dtype and shape the program declares for it.
fn check_layout(key: &str, l: &etch_format::TensorLayout, d: &TensorDecl) -> Result<()> {
    let same_sizes = l.sizes.len() == d.sizes.len()
        && l.sizes.iter().zip(&d.sizes).all(|(&a, &b)| a == b as i64);
    if l.dtype != d.dtype || !same_sizes {
        return Err(Error::invalid_program(format!(
            "external constant '{key}' is {} {:?}; the program expects {} {:?}",
            l.dtype, l.sizes, d.dtype, d.sizes
        )));
    }
    Ok(())
}

/// A new buffer on `device` holding `bytes`, counted by the module's device constants
/// when the load has them.
fn upload_constant(bytes: &dyn ByteSource, device: Device, config: &LoadConfig) -> Result<Buffer> {
    match &config.device_constants {
        Some(c) => c.upload(bytes, device, &config.devices),
        None => {
            let buf = Buffer::allocate(bytes.len(), device, &config.devices)?;
            buf.write_from(0, bytes)?;
            Ok(buf)
        }
    }
}

/// Named data: the program's own segments, then the external maps.
struct ProgramNamedData<'a> {
    program: &'a Program,
    external: Option<&'a dyn NamedDataMap>,
}

impl NamedDataMap for ProgramNamedData<'_> {
    fn get(&self, key: &str) -> Option<etch_format::NamedBlob<'_>> {
        if let Ok(Some(data)) = self.program.named_data(key) {
            return Some(etch_format::NamedBlob { data, layout: None });
        }
        self.external.and_then(|m| m.get(key))
    }
    fn keys(&self) -> Vec<&str> {
        self.external.map(|m| m.keys()).unwrap_or_default()
    }
    fn get_tensor(
        &self,
        key: &str,
        expected: &etch_format::TensorLayout,
    ) -> Result<Option<etch_format::NamedBlob<'_>>> {
        if let Ok(Some(data)) = self.program.named_data(key) {
            return Ok(Some(etch_format::NamedBlob { data, layout: None }));
        }
        self.external
            .map_or(Ok(None), |m| m.get_tensor(key, expected))
    }
    fn get_tensor_source(
        &self,
        key: &str,
        expected: &etch_format::TensorLayout,
    ) -> Result<Option<etch_format::TensorSource<'_>>> {
        if let Ok(Some(data)) = self.program.named_data(key) {
            let blob = etch_format::NamedBlob { data, layout: None };
            return Ok(Some(blob.into()));
        }
        self.external
            .map_or(Ok(None), |m| m.get_tensor_source(key, expected))
    }
}

/// A loaded method, ready to execute.
///
/// It owns its planned arenas (allocated once at load, sized from [`MethodMeta`]), staging
/// buffers for unplanned inputs and outputs, and its delegates; constants stay views into
/// the program's mapped bytes, which the method keeps alive.
///
/// Ownership of inputs and outputs: [`Method::set_input`] copies the caller's data into the
/// method's memory, so the caller's tensor may be dropped right after. Outputs are views
/// into the method's memory ([`Method::output_tensor`]), valid until the next `execute` or
/// `set_input`; [`Method::output_value`] copies one out into an owned [`Value`].
pub struct Method {
    name: String,
    meta: MethodMeta,
    values: Vec<EValue>,
    chains: Vec<Vec<Instr>>,
    /// The program's index of each instruction in `chains` (folding constants removes
    /// instructions): what the profiler reports, as upstream's runtime does.
    instr_ids: Vec<Vec<u32>>,
    /// The kernel of each operator in the plan's operator table (all resolved at load).
    kernels: Vec<KernelFn>,
    op_names: Vec<String>,
    delegates: Vec<Box<dyn Delegate>>,
    delegate_ids: Vec<String>,
    inputs: Vec<u32>,
    outputs: Vec<u32>,
    input_set: Vec<bool>,
    /// Most backward jumps one `execute` may take (guards against endless loops).
    jump_limit: Option<u64>,
    /// Planned buffers, in user index order.
    arenas: Vec<Arc<Buffer>>,
    /// Staging buffers for unplanned method inputs and outputs, and device copies of
    /// constants (host constants stay views into the program).
    _owned: Vec<Arc<Buffer>>,
    devices: Arc<DeviceRegistry>,
    /// The device a nested (delegate) method runs on, if not the host.
    target: Option<Device>,
    /// The context its device kernels get (see `LoadConfig::device_context`).
    device_context: Option<etch_core::DeviceContext>,
    /// Times the kernel calls on the device while profiling (see [`Method::set_op_timer`]).
    op_timer: Option<Box<dyn etch_core::DeviceOpTimer>>,
    /// True when the method's device memory is host-accessible (the simulated device), so
    /// CPU kernels may run on it.
    host_access: bool,
    /// How many values the load-time layout choice laid out channels-last.
    channels_last: usize,
    _program: Program,
    _named_data: Option<Arc<dyn NamedDataMap>>,
}

impl std::fmt::Debug for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Method")
            .field("name", &self.name)
            .field("values", &self.values.len())
            .field("instructions", &self.meta.num_instructions())
            .finish()
    }
}

fn planned_ptr(
    arenas: &[Arc<Buffer>],
    d: &TensorDecl,
    memory_id: u32,
    offset: u64,
) -> Result<*mut u8> {
    let n = arenas.len();
    if memory_id == 0 || memory_id as usize > n {
        return Err(Error::invalid_program(format!(
            "tensor placed in planned buffer {memory_id}; the method has buffers 1..={n}"
        )));
    }
    let arena = &arenas[memory_id as usize - 1];
    // Beyond upstream: a planned tensor must live on its buffer's device.
    if arena.device() != d.device {
        return Err(Error::invalid_program(format!(
            "tensor on {} is planned in buffer {} on {}",
            d.device,
            memory_id - 1,
            arena.device()
        )));
    }
    let r = etch_format::checked_range(offset, d.nbytes as u64, arena.len(), "planned tensor")
        .map_err(|e| {
            Error::invalid_program(format!(
                "tensor of {} bytes at offset {offset} does not fit planned buffer {memory_id} ({} bytes): {}",
                d.nbytes,
                arena.len(),
                e.message()
            ))
        })?;
    // SAFETY: `r.start <= arena.len()` was checked, so the result stays within (or one past)
    // the allocation.
    Ok(unsafe { arena.base().add(r.start) })
}

impl Method {
    /// Loads method `name` of `program`: resolves every operator and backend, allocates the
    /// planned arenas, binds constants and initial state, and initialises delegates.
    pub fn load(program: &Program, name: &str, config: &LoadConfig) -> Result<Method> {
        let plan = program.plan(name)?;
        Self::load_plan(program, &plan, config).map_err(|e| e.context(format!("method '{name}'")))
    }

    fn load_plan(
        program: &Program,
        plan: &pte::ExecutionPlanRef<'_>,
        config: &LoadConfig,
    ) -> Result<Method> {
        let meta = MethodMeta::from_plan(program, plan)?;
        let name = meta.name().to_string();

        // Operators: resolve all of them once; report every missing one together.
        let mut op_names = Vec::new();
        let mut kernels = Vec::new();
        let mut missing = Vec::new();
        for op in meta.operators() {
            let k = config.kernels.get(op);
            if k.is_none() {
                missing.push(op.clone());
            }
            op_names.push(op.clone());
            kernels.push(k);
        }

        // Planned arenas, allocated once from MethodMeta, each on its device through the
        // device registry.
        let total: u64 = (0..meta.num_memory_planned_buffers())
            .map(|i| meta.memory_planned_buffer_size(i).unwrap_or(0))
            .fold(0u64, u64::saturating_add);
        if let Some(limit) = config.max_planned_bytes
            && total > limit
        {
            return Err(Error::memory_allocation_failed(format!(
                "the method plans {total} bytes; the limit is {limit}"
            )));
        }
        let accel = (0..meta.num_memory_planned_buffers())
            .filter_map(|i| meta.memory_planned_buffer_device(i).ok())
            .find(|d| !d.is_cpu());
        let pinning = accel.and_then(|d| config.devices.get(d.kind));
        let pinning_allocator = pinning.as_ref();
        let mut arenas = Vec::with_capacity(meta.num_memory_planned_buffers());
        let mut ordinals: std::collections::HashMap<Device, usize> = Default::default();
        for i in 0..meta.num_memory_planned_buffers() {
            let dev = config
                .target_device
                .unwrap_or(meta.memory_planned_buffer_device(i)?);
            let size = meta.memory_planned_buffer_size(i)?;
            let k = ordinals.entry(dev).or_insert(0);
            let ordinal = *k;
            *k += 1;
            if let Some(shared) = &config.shared_arenas
                && let Some(buf) = shared.lookup(dev, ordinal, size)?
            {
                arenas.push(buf);
                continue;
            }
            let size = usize::try_from(size).map_err(|_| {
                Error::memory_allocation_failed(format!(
                    "planned buffer {i} of {size} bytes is too large"
                ))
            })?;
            // Host buffers of a device program feed or receive device copies: page-locked
            // memory moves at full bus speed.
            let buf = match pinning_allocator {
                Some(a) if dev.is_cpu() && size > 0 => Buffer::allocate_pinned(size, a),
                _ => Buffer::allocate_arena(size, dev, &config.devices),
            }
            .map_err(|e| e.context(format!("planned buffer {i} ({size} bytes)")))?;
            arenas.push(Arc::new(buf));
        }

        let raw_values = plan.values().map_err(fb_err("values"))?;
        let num_values = raw_values.as_ref().map_or(0, |v| v.len());
        let inputs = index_list(
            plan.inputs().map_err(fb_err("inputs"))?,
            num_values,
            "method input",
        )?;
        let outputs = index_list(
            plan.outputs().map_err(fb_err("outputs"))?,
            num_values,
            "method output",
        )?;
        let io: HashSet<u32> = inputs.iter().chain(outputs.iter()).copied().collect();
        let referenced = referenced_values(plan, num_values)?;

        let named = ProgramNamedData {
            program,
            external: config.named_data.as_deref(),
        };
        let mut values = Vec::with_capacity(num_values);
        let mut owned = Vec::new();
        // For load-time folding: constants, plain intermediates and planned locations.
        let mut constant = vec![false; num_values];
        let mut intermediate = vec![false; num_values];
        let mut location = vec![None; num_values];
        if let Some(vs) = &raw_values {
            for (i, v) in vs.iter().enumerate() {
                let v = v.map_err(fb_err("value"))?;
                if let Ok(Some(pte::KernelTypesRef::Tensor(t))) = v.val()
                    && let Ok(d) = decode_tensor(&t)
                {
                    match d.placement {
                        DataPlacement::Constant(_) | DataPlacement::External(_) => {
                            constant[i] = true
                        }
                        DataPlacement::Planned {
                            memory_id,
                            offset,
                            initial,
                        } => {
                            location[i] = Some((memory_id, offset));
                            intermediate[i] = initial.is_none() && !io.contains(&(i as u32));
                        }
                        DataPlacement::Unbound => {}
                    }
                }
                let usage = ValueUse {
                    io: io.contains(&(i as u32)),
                    referenced: io.contains(&(i as u32)) || referenced.contains(&(i as u32)),
                };
                let ev = Self::load_value(
                    program, &named, &arenas, &mut owned, config, &v, usage, num_values,
                )
                .map_err(|e| e.context(format!("value {i}")))?;
                values.push(ev);
            }
        }
        // Second pass: list items must name values of the right kind.
        for i in 0..values.len() {
            let check = |idx: u32, want: &[Tag]| -> Result<()> {
                let t = values[idx as usize].tag();
                if want.contains(&t) {
                    Ok(())
                } else {
                    Err(Error::invalid_program(format!(
                        "value {i}: list item {idx} is {}, expected {}",
                        t.name(),
                        want[0].name()
                    )))
                }
            };
            match &values[i] {
                EValue::IntList(l) => l.items.iter().try_for_each(|&x| check(x, &[Tag::Int]))?,
                EValue::TensorList(l) => l.iter().try_for_each(|&x| check(x, &[Tag::Tensor]))?,
                EValue::OptionalTensorList(l) => l
                    .iter()
                    .flatten()
                    .try_for_each(|&x| check(x, &[Tag::Tensor, Tag::None]))?,
                _ => {}
            }
        }
        refresh_all_int_lists(&mut values);

        // Delegates.
        let mut delegates = Vec::new();
        let mut delegate_ids = Vec::new();
        if let Some(ds) = plan.delegates().map_err(fb_err("delegates"))? {
            for (di, d) in ds.iter().enumerate() {
                let d = d.map_err(fb_err("delegate"))?;
                let id = d
                    .id()
                    .map_err(fb_err("delegate id"))?
                    .unwrap_or("")
                    .to_string();
                let backend = config.backends.get(&id).ok_or_else(|| {
                    Error::not_found(format!(
                        "delegate {di} needs backend '{id}', which is not registered (registered: {})",
                        if config.backends.ids().is_empty() { "none".to_string() } else { config.backends.ids().join(", ") }
                    ))
                })?;
                if !backend.is_available() {
                    return Err(Error::not_supported(format!(
                        "backend '{id}' is not available on this machine"
                    )));
                }
                let processed_ref = d
                    .processed()
                    .map_err(fb_err("delegate data reference"))?
                    .ok_or_else(|| {
                        Error::invalid_program(format!("delegate {di} has no processed data"))
                    })?;
                let processed = program.delegate_data(&processed_ref)?;
                // Compile specs were decoded into the method's metadata.
                let specs = meta
                    .delegates()
                    .get(di)
                    .map(|info| info.compile_specs.as_slice())
                    .unwrap_or(&[]);
                let ctx = BackendInitContext {
                    method_name: &name,
                    named_data: Some(&named),
                    config,
                };
                let h = backend
                    .init(&ctx, processed, specs)
                    .map_err(|e| e.context(format!("initialising delegate {di} ({id})")))?;
                delegates.push(h);
                delegate_ids.push(id);
            }
        }

        // Instructions.
        let mut chains: Vec<Vec<Instr>> = Vec::new();
        let mut runtime_ints = runtime_written_ints(plan, num_values)?;
        // Int inputs are set at run time too (a delegate's nested method takes the sizes
        // its caller computed).
        runtime_ints.extend(inputs.iter().copied());
        if let Some(cs) = plan.chains().map_err(fb_err("chains"))? {
            for c in cs.iter() {
                let c = c.map_err(fb_err("chain"))?;
                let instrs = c.instructions().map_err(fb_err("instructions"))?;
                let n = instrs.as_ref().map_or(0, |v| v.len());
                let mut out = Vec::with_capacity(n);
                if let Some(instrs) = instrs {
                    for (pc, ins) in instrs.iter().enumerate() {
                        let ins = ins.map_err(fb_err("instruction"))?;
                        let i = Self::load_instr(
                            &ins,
                            &values,
                            &kernels,
                            delegates.len(),
                            n,
                            &runtime_ints,
                        )
                        .map_err(|e| e.context(format!("instruction {pc}")))?;
                        if let Instr::Kernel { op, args, .. } = &i {
                            check_out_aliasing(&values, args).map_err(|e| {
                                e.context(format!("instruction {pc} ({})", op_names[*op as usize]))
                            })?;
                        }
                        out.push(i);
                    }
                }
                chains.push(out);
            }
        }
        if !missing.is_empty() {
            return Err(Error::operator_missing(format!(
                "missing operator{}: {} (see `etch ops` for the registered ones)",
                if missing.len() > 1 { "s" } else { "" },
                missing.join(", ")
            )));
        }

        // Every operator resolved (checked just above).
        let mut kernels: Vec<KernelFn> = kernels.into_iter().flatten().collect();
        let host_access = arenas
            .iter()
            .map(|a| a.as_ref())
            .chain(owned.iter().map(|b| b.as_ref()))
            .all(|b| b.allocator().is_none_or(|a| a.host_accessible()));
        let mut instr_ids: Vec<Vec<u32>> = chains
            .iter()
            .map(|c| (0..c.len() as u32).collect())
            .collect();
        let straight = chains
            .iter()
            .flatten()
            .all(|i| !matches!(i, Instr::JumpFalse { .. } | Instr::Move { .. }));
        if straight && config.fold_constants {
            let mut f = crate::fold::FoldInput {
                values: &mut values,
                constant: &mut constant,
                intermediate: &intermediate,
                location: &location,
                runtime_ints: &runtime_ints,
                kernels: &kernels,
                op_names: &op_names,
                devices: &config.devices,
                host_access,
                owned: &mut owned,
                device_context: config.device_context.as_deref(),
            };
            for (chain, ids) in chains.iter_mut().zip(instr_ids.iter_mut()) {
                let refs = call_refs(chain);
                let done = crate::fold::fold(&mut f, &refs)?;
                drop(refs);
                for &d in done.iter() {
                    chain[d] = Instr::Free;
                }
                drop_frees(chain, ids);
            }
        }
        let mut channels_last = 0;
        if straight && config.channels_last && config.prepare_kernels && host_access {
            let refs: Vec<_> = chains.iter().map(|c| call_refs(c)).collect();
            let mut f = crate::layout::LayoutInput {
                values: &mut values,
                constant: &constant,
                intermediate: &intermediate,
                op_names: &op_names,
                kernels: &config.kernels,
                devices: &config.devices,
            };
            channels_last = crate::layout::choose(&mut f, &refs)?;
        }
        // Before the fusion, whose fused calls take their chains' arguments (so that the
        // values inside a chain, which no call writes any more, look like static views).
        let unread = (straight && config.prepare_kernels)
            .then(|| unread_values(&values, &intermediate, &chains));
        if straight && config.fuse_kernels && host_access {
            let mut f = crate::fuse::FuseInput {
                values: &mut values,
                constant: &constant,
                intermediate: &intermediate,
                io: &io,
                op_names: &op_names,
                kernels: &config.kernels,
                devices: &config.devices,
            };
            let mut made = Vec::new();
            for (ci, chain) in chains.iter().enumerate() {
                let refs = call_refs(chain);
                made.push((ci, crate::fuse::plan(&mut f, &refs)?));
            }
            // Fused kernels as operators of their own, one entry a kernel.
            let mut fused_ops: HashMap<(&'static str, usize), u32> = HashMap::new();
            for (ci, fusions) in made {
                for z in fusions {
                    let key = (z.fused.name, z.fused.kernel as usize);
                    let op = *fused_ops.entry(key).or_insert_with(|| {
                        kernels.push(z.fused.kernel);
                        op_names.push(z.fused.name.to_string());
                        (kernels.len() - 1) as u32
                    });
                    for &c in &z.calls {
                        chains[ci][c] = Instr::Free;
                    }
                    chains[ci][z.calls[z.calls.len() - 1]] = Instr::Kernel {
                        op,
                        args: z.args,
                        refresh: Box::new([]),
                        prepared: Some(PreparedState(z.fused.prepared)),
                    };
                }
                drop_frees(&mut chains[ci], &mut instr_ids[ci]);
            }
        }
        if config.prepare_kernels {
            let ctx = PrepareInput {
                values: &mut values,
                constant: &constant,
                unread: unread.as_deref(),
                op_names: &op_names,
                kernels: &config.kernels,
                devices: &config.devices,
                host_access,
            };
            prepare_kernels(ctx, &mut chains)?;
        }
        let input_set = vec![false; inputs.len()];
        Ok(Method {
            name,
            meta,
            values,
            chains,
            instr_ids,
            kernels,
            op_names,
            delegates,
            delegate_ids,
            inputs,
            outputs,
            input_set,
            jump_limit: None,
            host_access,
            channels_last,
            arenas,
            _owned: owned,
            devices: Arc::clone(&config.devices),
            target: config.target_device,
            device_context: config.device_context.clone(),
            op_timer: None,
            _program: program.clone(),
            _named_data: config.named_data.clone(),
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn load_value(
        program: &Program,
        named: &ProgramNamedData<'_>,
        arenas: &[Arc<Buffer>],
        owned: &mut Vec<Arc<Buffer>>,
        config: &LoadConfig,
        v: &pte::EValueRef<'_>,
        usage: ValueUse,
        num_values: usize,
    ) -> Result<EValue> {
        use pte::KernelTypesRef as K;
        Ok(match v.val().map_err(fb_err("value"))? {
            None | Some(K::Null(_)) => EValue::None,
            Some(K::Int(x)) => EValue::Int(x.int_val().map_err(fb_err("int"))?),
            Some(K::Bool(x)) => EValue::Bool(x.bool_val().map_err(fb_err("bool"))?),
            Some(K::Double(x)) => EValue::Double(x.double_val().map_err(fb_err("double"))?),
            Some(K::String(x)) => EValue::String(
                x.string_val()
                    .map_err(fb_err("string"))?
                    .unwrap_or("")
                    .into(),
            ),
            Some(K::IntList(x)) => {
                let items = x.items().map_err(fb_err("int list"))?;
                let mut idx = Vec::with_capacity(items.as_ref().map_or(0, |v| v.len()));
                if let Some(items) = items {
                    for it in items.iter() {
                        idx.push(value_index(it, num_values, "int list item")?);
                    }
                }
                let n = idx.len();
                EValue::IntList(IntList {
                    items: idx.into(),
                    vals: vec![0; n].into(),
                    dynamic: false,
                })
            }
            Some(K::DoubleList(x)) => EValue::DoubleList(
                x.items()
                    .map_err(fb_err("double list"))?
                    .map(|v| v.iter().collect())
                    .unwrap_or_default(),
            ),
            Some(K::BoolList(x)) => {
                let items = x.items().map_err(fb_err("bool list"))?;
                let mut out = Vec::new();
                if let Some(items) = items {
                    for b in items.iter() {
                        out.push(b);
                    }
                }
                EValue::BoolList(out.into())
            }
            Some(K::TensorList(x)) => {
                let items = x.items().map_err(fb_err("tensor list"))?;
                let mut out = Vec::new();
                if let Some(items) = items {
                    for it in items.iter() {
                        out.push(value_index(it as i64, num_values, "tensor list item")?);
                    }
                }
                EValue::TensorList(out.into())
            }
            Some(K::OptionalTensorList(x)) => {
                let items = x.items().map_err(fb_err("optional tensor list"))?;
                let mut out = Vec::new();
                if let Some(items) = items {
                    for it in items.iter() {
                        out.push(if it < 0 {
                            None
                        } else {
                            Some(value_index(
                                it as i64,
                                num_values,
                                "optional tensor list item",
                            )?)
                        });
                    }
                }
                EValue::OptionalTensorList(out.into())
            }
            Some(K::Tensor(t)) => EValue::Tensor(Self::load_tensor(
                program, named, arenas, owned, config, &t, usage,
            )?),
        })
    }

    /// A tensor value: its declaration, and memory bound to it (a constant's view or
    /// device copy, planned memory, or a buffer of its own).
    #[allow(clippy::too_many_arguments)]
    fn load_tensor(
        program: &Program,
        named: &ProgramNamedData<'_>,
        arenas: &[Arc<Buffer>],
        owned: &mut Vec<Arc<Buffer>>,
        config: &LoadConfig,
        t: &pte::TensorRef<'_>,
        usage: ValueUse,
    ) -> Result<TensorImpl> {
        let is_io = usage.io;
        let mut d = decode_tensor(t)?;
        if let Some(dev) = config.target_device {
            d.device = dev;
        }
        let (ptr, cap) = match &d.placement {
            // Constants bound on a device are uploaded once, into a buffer the method owns.
            DataPlacement::Constant(idx) => {
                let bytes = program.constant(*idx, d.nbytes)?;
                if d.device.is_cpu() {
                    (bytes.as_ptr() as *mut u8, bytes.len())
                } else {
                    let buf = upload_constant(&bytes, d.device, config)?;
                    let p = buf.base();
                    owned.push(Arc::new(buf));
                    (p, bytes.len())
                }
            }
            // An external constant no instruction of this method uses (a lowered program
            // keeps its weights' values, but only its delegates, which load their own,
            // read them): not read at all, so a checkpoint's stacked or converted tensors
            // are never built in host memory for nothing.
            DataPlacement::External(_) if !usage.referenced => (std::ptr::null_mut(), 0),
            DataPlacement::External(key) => Self::load_external(key, &d, named, owned, config)?,
            DataPlacement::Planned {
                memory_id,
                offset,
                initial,
            } => {
                let ptr = planned_ptr(arenas, &d, *memory_id, *offset)?;
                if let Some(initial) = initial {
                    let init = Self::initial_bytes(program, named, initial, &d)?;
                    // `planned_ptr` checked that the range lies inside the arena; the
                    // write goes through the allocator for device arenas.
                    arenas[*memory_id as usize - 1].write(*offset as usize, init)?;
                }
                (ptr, d.nbytes)
            }
            // A nested (delegate) method's inputs and outputs are always bound to its
            // caller's memory before it runs: no memory of their own.
            DataPlacement::Unbound if is_io && config.nesting_depth == 0 => {
                if config
                    .max_planned_bytes
                    .is_some_and(|l| d.nbytes as u64 > l)
                {
                    return Err(Error::memory_allocation_failed(format!(
                        "an input/output of {} bytes exceeds the memory limit",
                        d.nbytes
                    )));
                }
                let buf = Buffer::allocate(d.nbytes, d.device, &config.devices)?;
                let p = buf.base();
                owned.push(Arc::new(buf));
                (p, d.nbytes)
            }
            DataPlacement::Unbound => (std::ptr::null_mut(), 0),
        };
        // An unbound tensor has no memory yet (null data); its capacity is its declared
        // size, so a view op can later point it at memory of that size.
        let cap = if ptr.is_null() { d.nbytes } else { cap };
        TensorImpl::new(
            d.dtype,
            &d.sizes,
            Some(&d.dim_order),
            d.dynamism,
            d.device,
            ptr,
            cap,
        )
    }

    /// The initial value of a planned tensor: from the program's mutable data, or (a
    /// trainable parameter exported with external constants) from the external data.
    fn initial_bytes<'a>(
        program: &'a Program,
        named: &'a ProgramNamedData<'_>,
        initial: &InitialState,
        d: &TensorDecl,
    ) -> Result<&'a [u8]> {
        let key = match initial {
            InitialState::Mutable(list, idx) => {
                return program.mutable_data(*list, *idx, d.nbytes);
            }
            InitialState::External(key) => key,
        };
        let expected = etch_format::TensorLayout {
            dtype: d.dtype,
            sizes: d.sizes.iter().map(|&s| s as i64).collect(),
            dim_order: d.dim_order.clone(),
        };
        let blob = named.get_tensor(key, &expected)?.ok_or_else(|| {
            Error::not_found(format!(
                "the initial value of mutable tensor '{key}' is external data that was not found; pass the .ptd file that holds it (`--data model.ptd`)"
            ))
        })?;
        if let Some(l) = blob.layout {
            check_layout(key, l, d)?;
        }
        blob.data.get(..d.nbytes).ok_or_else(|| {
            Error::invalid_program(format!(
                "external tensor '{key}' has {} bytes; the tensor needs {}",
                blob.data.len(),
                d.nbytes
            ))
        })
    }

    /// An external constant (`.ptd`, checkpoint): a view of the host bytes for the CPU;
    /// on a device, the module's shared copy, made the first time by streaming the bytes
    /// from their source (pieces of mapped files, converted on the way) through the
    /// device's staging copy: no host copy of the tensor is built.
    fn load_external(
        key: &str,
        d: &TensorDecl,
        named: &ProgramNamedData<'_>,
        owned: &mut Vec<Arc<Buffer>>,
        config: &LoadConfig,
    ) -> Result<(*mut u8, usize)> {
        let expected = etch_format::TensorLayout {
            dtype: d.dtype,
            sizes: d.sizes.iter().map(|&s| s as i64).collect(),
            dim_order: d.dim_order.clone(),
        };
        let missing = || {
            Error::not_found(format!(
                "external constant '{key}' not found; pass the .ptd file or safetensors checkpoint that holds it (`--data model.ptd`, `--weights DIR`)"
            ))
        };
        let short = |n: usize| {
            Error::invalid_program(format!(
                "external constant '{key}' has {n} bytes; the tensor needs {}",
                d.nbytes
            ))
        };
        if d.device.is_cpu() {
            let blob = named.get_tensor(key, &expected)?.ok_or_else(missing)?;
            if let Some(l) = blob.layout {
                check_layout(key, l, d)?;
            }
            if blob.data.len() < d.nbytes {
                return Err(short(blob.data.len()));
            }
            return Ok((blob.data.as_ptr() as *mut u8, d.nbytes));
        }
        let src = named
            .get_tensor_source(key, &expected)?
            .ok_or_else(missing)?;
        if let Some(l) = &src.layout {
            check_layout(key, l, d)?;
        }
        if src.bytes.len() < d.nbytes {
            return Err(short(src.bytes.len()));
        }
        let bytes = Prefix::new(&*src.bytes, d.nbytes)?;
        let buf = match &config.device_constants {
            Some(cache) => {
                let k = (key.to_string(), d.device, d.dtype, d.sizes.clone());
                cache.get_or_upload(k, &bytes, &config.devices)?
            }
            None => Arc::new(upload_constant(&bytes, d.device, config)?),
        };
        let p = buf.base();
        owned.push(buf);
        Ok((p, d.nbytes))
    }

    fn load_instr(
        ins: &pte::InstructionRef<'_>,
        values: &[EValue],
        kernels: &[Option<KernelFn>],
        num_delegates: usize,
        num_instrs: usize,
        runtime_ints: &HashSet<u32>,
    ) -> Result<Instr> {
        use pte::InstructionArgumentsRef as A;
        let nv = values.len();
        let args_of = |a: Option<etch_format::planus::Vector<'_, i32>>| -> Result<Box<[u32]>> {
            let mut out = Vec::new();
            if let Some(a) = a {
                for x in a.iter() {
                    out.push(value_index(x as i64, nv, "argument")?);
                }
            }
            Ok(out.into())
        };
        match ins.instr_args().map_err(fb_err("instruction"))? {
            None => Err(Error::invalid_program("instruction without arguments")),
            Some(A::KernelCall(k)) => {
                let op = k.op_index().map_err(fb_err("operator index"))?;
                if op < 0 || op as usize >= kernels.len() {
                    return Err(Error::invalid_program(format!(
                        "operator index {op} out of range ({} operators)",
                        kernels.len()
                    )));
                }
                let args = args_of(k.args().map_err(fb_err("kernel arguments"))?)?;
                let refresh = args
                    .iter()
                    .copied()
                    .filter(|&a| match &values[a as usize] {
                        EValue::IntList(l) => l.items.iter().any(|x| runtime_ints.contains(x)),
                        _ => false,
                    })
                    .collect();
                Ok(Instr::Kernel {
                    op: op as u32,
                    args,
                    refresh,
                    prepared: None,
                })
            }
            Some(A::DelegateCall(d)) => {
                let index = d.delegate_index().map_err(fb_err("delegate index"))?;
                if index < 0 || index as usize >= num_delegates {
                    return Err(Error::invalid_program(format!(
                        "delegate index {index} out of range ({num_delegates} delegates)"
                    )));
                }
                let args = args_of(d.args().map_err(fb_err("delegate arguments"))?)?;
                Ok(Instr::Delegate {
                    index: index as u32,
                    args,
                })
            }
            Some(A::MoveCall(m)) => Ok(Instr::Move {
                from: value_index(
                    m.move_from().map_err(fb_err("move"))? as i64,
                    nv,
                    "move source",
                )?,
                to: value_index(
                    m.move_to().map_err(fb_err("move"))? as i64,
                    nv,
                    "move target",
                )?,
            }),
            Some(A::JumpFalseCall(j)) => {
                let cond = value_index(
                    j.cond_value_index().map_err(fb_err("jump"))? as i64,
                    nv,
                    "jump condition",
                )?;
                let dest = j.destination_instruction().map_err(fb_err("jump"))?;
                if dest < 0 || dest as usize > num_instrs {
                    return Err(Error::invalid_program(format!(
                        "jump destination {dest} out of range ({num_instrs} instructions)"
                    )));
                }
                Ok(Instr::JumpFalse {
                    cond,
                    dest: dest as u32,
                })
            }
            Some(A::FreeCall(f)) => {
                value_index(f.value_index().map_err(fb_err("free"))? as i64, nv, "free")?;
                Ok(Instr::Free)
            }
        }
    }

    /// The method's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The method's metadata.
    pub fn meta(&self) -> &MethodMeta {
        &self.meta
    }

    /// How many of the method's feature maps the load-time layout choice laid out
    /// channels-last ([`LoadConfig::channels_last`]).
    pub fn channels_last_values(&self) -> usize {
        self.channels_last
    }

    /// The operators of the method's kernel calls in the order they run, after the work
    /// done once at load: folded calls are gone, and each fused chain is one call (named
    /// by its kernel, `etch::fused_convolution`).
    pub fn kernel_calls(&self) -> Vec<&str> {
        let ops = self.chains.iter().flatten().filter_map(|i| match i {
            Instr::Kernel { op, .. } => Some(self.op_names[*op as usize].as_str()),
            _ => None,
        });
        ops.collect()
    }

    /// Number of inputs.
    pub fn num_inputs(&self) -> usize {
        self.inputs.len()
    }

    /// Number of outputs.
    pub fn num_outputs(&self) -> usize {
        self.outputs.len()
    }

    /// Sizes of the planned arenas this method uses (user index order).
    pub fn planned_bytes(&self) -> Vec<usize> {
        self.arenas.iter().map(|a| a.len()).collect()
    }

    /// The device of each planned arena (user index order), as allocated.
    pub fn planned_buffer_devices(&self) -> Vec<Device> {
        self.arenas.iter().map(|a| a.device()).collect()
    }

    /// Sets input `i`, copying the caller's data into the method's memory.
    ///
    /// The value must match the input's tag; a tensor must match its dtype exactly and its
    /// shape (a dynamic input may take any shape of the same rank that fits its upper bound).
    pub fn set_input(&mut self, i: usize, value: &Value) -> Result<()> {
        let n = self.inputs.len();
        let idx = *self.inputs.get(i).ok_or_else(|| {
            Error::invalid_argument(format!("input index {i} out of range ({n} inputs)"))
        })? as usize;
        let bound = self
            .meta
            .input(i)
            .ok()
            .and_then(|m| m.tensor.as_ref())
            .map(|t| &t.sizes);
        let slot = &mut self.values[idx];
        match (slot, value) {
            (EValue::Tensor(t), Value::Tensor(src)) => {
                // Beyond upstream (which bounds only the element count): every dim of a
                // dynamic input must stay within its exported upper bound.
                if let Some(b) = bound
                    && b.len() == src.sizes().len()
                    && src.sizes().iter().zip(b).any(|(s, b)| s > b)
                {
                    return Err(Error::invalid_argument(format!(
                        "input {i}: shape {:?} exceeds the exported upper bound {b:?}",
                        src.sizes()
                    )));
                }
                set_tensor_input(t, src, &self.devices)
                    .map_err(|e| e.context(format!("input {i}")))?;
            }
            (EValue::Int(v), Value::Int(x)) => *v = *x,
            (EValue::Double(v), Value::Double(x)) => *v = *x,
            (EValue::Double(v), Value::Int(x)) => *v = *x as f64,
            (EValue::Bool(v), Value::Bool(x)) => *v = *x,
            (EValue::None, Value::None) => {}
            (slot, value) => {
                return Err(Error::invalid_argument(format!(
                    "input {i}: expected {}, got {}",
                    slot.tag().name(),
                    value.tag().name()
                )));
            }
        }
        self.input_set[i] = true;
        Ok(())
    }

    /// Binds input `i` to caller memory without copying (the delegate path): the input
    /// tensor takes `t`'s data pointer and shape.
    ///
    /// # Safety
    /// `t`'s memory must stay valid, on the input's device, until the next `execute`
    /// returns.
    pub unsafe fn share_input(&mut self, i: usize, t: &TensorImpl) -> Result<()> {
        let idx = self.tensor_io_index(&self.inputs, i, "input")?;
        // Disjoint fields: the declared shape is borrowed, not copied (this runs per call).
        let bound = self.meta.input(i).ok().and_then(|m| m.tensor.as_ref());
        share_tensor(&mut self.values[idx], t, bound.map(|b| b.sizes.as_slice()))
            .map_err(|e| e.context(format!("input {i}")))?;
        self.input_set[i] = true;
        Ok(())
    }

    /// Binds output `i` to caller memory without copying: the kernel producing it writes
    /// straight into `t`'s memory.
    ///
    /// # Safety
    /// As for [`Method::share_input`].
    pub unsafe fn share_output(&mut self, i: usize, t: &TensorImpl) -> Result<()> {
        let idx = self.tensor_io_index(&self.outputs, i, "output")?;
        // Disjoint fields: the declared shape is borrowed, not copied (this runs per call).
        let bound = self.meta.output(i).ok().and_then(|m| m.tensor.as_ref());
        share_tensor(&mut self.values[idx], t, bound.map(|b| b.sizes.as_slice()))
            .map_err(|e| e.context(format!("output {i}")))
    }

    fn tensor_io_index(&self, list: &[u32], i: usize, what: &str) -> Result<usize> {
        let idx = *list.get(i).ok_or_else(|| {
            Error::invalid_argument(format!("{what} index {i} out of range ({})", list.len()))
        })? as usize;
        Ok(idx)
    }

    /// The device allocators this method uses.
    pub fn devices(&self) -> &Arc<DeviceRegistry> {
        &self.devices
    }

    /// Sets every input, in order.
    pub fn set_inputs(&mut self, inputs: &[Value]) -> Result<()> {
        if inputs.len() != self.inputs.len() {
            return Err(Error::invalid_argument(format!(
                "method '{}' takes {} inputs, {} given",
                self.name,
                self.inputs.len(),
                inputs.len()
            )));
        }
        for (i, v) in inputs.iter().enumerate() {
            self.set_input(i, v)?;
        }
        Ok(())
    }

    /// Bounds how many jumps one `execute` may take; `None` (the default) means no bound.
    /// Loops in a program are legitimate, but an untrusted program may loop forever. The
    /// bound also applies to the programs this method's delegates run (each its own count).
    pub fn set_instruction_limit(&mut self, jumps: Option<u64>) {
        self.jump_limit = jumps;
        for d in &mut self.delegates {
            d.set_instruction_limit(jumps);
        }
    }

    /// Runs every instruction. Inputs must have been set.
    ///
    /// While the profiler is on ([`crate::profile`]), every kernel and delegate call is
    /// recorded.
    pub fn execute(&mut self) -> Result<()> {
        if let Some(i) = self.input_set.iter().position(|s| !s) {
            return Err(Error::invalid_state(format!(
                "method '{}': input {i} was not set",
                self.name
            )));
        }
        let Method {
            values,
            chains,
            instr_ids,
            kernels,
            op_names,
            delegates,
            delegate_ids,
            name,
            jump_limit,
            devices,
            host_access,
            arenas,
            _owned,
            target,
            device_context,
            op_timer,
            ..
        } = self;
        let dctx = device_context.as_deref();
        let mut prof = crate::profile::enabled().then(|| {
            let device = target.map(|d| (&**devices, d));
            crate::profile::ExecProfile::begin(name, op_timer.as_deref_mut(), device)
        });
        let mut jumps = 0u64;
        for (ci, chain) in chains.iter().enumerate() {
            let ids = &instr_ids[ci];
            let mut pc = 0usize;
            while pc < chain.len() {
                match &chain[pc] {
                    Instr::Kernel {
                        op,
                        args,
                        refresh,
                        prepared,
                    } => {
                        for &l in refresh.iter() {
                            refresh_int_list(values, l as usize);
                        }
                        let op = *op as usize;
                        let f = kernels[op];
                        // SAFETY: every tensor in `values` points at memory the method owns
                        // (arenas, staging), at the program's bytes it keeps alive, or at memory
                        // a kernel aliased from those; all outlive this call.
                        let mut ctx = unsafe { KernelContext::new(values, args, &op_names[op]) }
                            .with_devices(devices, *host_access)
                            .with_device_context(dctx)
                            .with_prepared(prepared.as_ref().map(|p| &*p.0));
                        let t0 = prof.as_mut().map(|p| p.kernel_start()).transpose()?;
                        f(&mut ctx).map_err(|e| {
                            e.context(format!(
                                "method '{name}', instruction {pc} ({})",
                                op_names[op]
                            ))
                        })?;
                        if let (Some(p), Some(t0)) = (prof.as_mut(), t0) {
                            p.kernel_end(t0, &op_names[op], values, args, (ci, ids[pc]))?;
                        }
                        pc += 1;
                    }
                    Instr::Delegate { index, args } => {
                        let di = *index as usize;
                        // SAFETY: as for kernels.
                        let mut ctx =
                            unsafe { KernelContext::new(values, args, &delegate_ids[di]) }
                                .with_devices(devices, *host_access);
                        let scope = prof.as_ref().map(|p| p.delegate_start((ci, ids[pc])));
                        delegates[di].execute(&mut ctx).map_err(|e| {
                            e.context(format!(
                                "method '{name}', instruction {pc} (delegate {di}, {})",
                                delegate_ids[di]
                            ))
                        })?;
                        if let (Some(p), Some(s)) = (prof.as_ref(), scope) {
                            p.delegate_end(s, di, &delegate_ids[di]);
                        }
                        pc += 1;
                    }
                    Instr::Move { from, to } => {
                        let v = values[*from as usize].clone();
                        values[*to as usize] = v;
                        pc += 1;
                    }
                    Instr::JumpFalse { cond, dest } => {
                        if !jump_condition(values, *cond, name, pc)? {
                            jumps += 1;
                            if jump_limit.is_some_and(|l| jumps > l) {
                                return Err(Error::invalid_state(format!(
                                    "method '{name}': more than {jumps} jumps; stopping (instruction limit)"
                                )));
                            }
                            pc = *dest as usize;
                        } else {
                            pc += 1;
                        }
                    }
                    Instr::Free => pc += 1,
                }
            }
        }
        if let Some(p) = prof {
            p.finish()?;
        }
        if *host_access {
            // CPU kernels wrote host-accessible device memory (the simulated device): those
            // are legitimate device-side writes.
            for b in arenas.iter().chain(_owned.iter()).map(|a| a.as_ref()) {
                if let Some(a) = b.allocator().cloned() {
                    a.mark_written(b.base(), b.len());
                }
            }
        }
        Ok(())
    }

    /// Sets the timer that times this method's kernel calls on its device while the
    /// profiler is on, without waiting for the device after each call (see
    /// [`crate::profile`]); `None` waits for the device after each call instead.
    /// `ExecutorBackend` sets the one its device hooks give (CUDA events).
    pub fn set_op_timer(&mut self, timer: Option<Box<dyn etch_core::DeviceOpTimer>>) {
        self.op_timer = timer;
    }

    /// Whether a device timer is set ([`Method::set_op_timer`]).
    pub fn has_op_timer(&self) -> bool {
        self.op_timer.is_some()
    }

    /// Output `i` as a method value (tensors are views into the method's memory).
    pub fn output(&self, i: usize) -> Result<&EValue> {
        let n = self.outputs.len();
        let idx = *self.outputs.get(i).ok_or_else(|| {
            Error::invalid_argument(format!("output index {i} out of range ({n} outputs)"))
        })?;
        Ok(&self.values[idx as usize])
    }

    /// Waits until the work that produces the method's device outputs is done (outputs on
    /// the host are complete when `execute` returns: their device-to-host copies wait).
    /// Timing a method whose outputs stay on a device needs this.
    pub fn synchronize(&self) -> Result<()> {
        for &o in &self.outputs {
            if let EValue::Tensor(t) = &self.values[o as usize] {
                let d = t.device();
                if !d.is_cpu() {
                    self.devices
                        .require(d.kind)?
                        .synchronize(d.index, etch_core::StreamId(0))?;
                }
            }
        }
        Ok(())
    }

    /// Output `i` as a tensor view, valid while the method is borrowed.
    pub fn output_tensor(&self, i: usize) -> Result<TensorRef<'_>> {
        let t = self.output(i)?.as_tensor()?;
        // SAFETY: the tensor points at memory the method owns or keeps alive, and the
        // returned view borrows the method.
        Ok(unsafe { TensorRef::new(*t) })
    }

    /// Output `i`, copied into an owned value (tensors in row-major order).
    pub fn output_value(&self, i: usize) -> Result<Value> {
        evalue_to_value(&self.values, self.output(i)?, &self.devices)
    }

    /// All outputs, copied.
    pub fn output_values(&self) -> Result<Vec<Value>> {
        (0..self.outputs.len())
            .map(|i| self.output_value(i))
            .collect()
    }

    /// All outputs, copied to the host: device tensors are copied back through their
    /// allocator, so every tensor can be read.
    pub fn host_output_values(&self) -> Result<Vec<Value>> {
        self.output_values()?
            .into_iter()
            .map(|v| match v {
                Value::Tensor(t) if !t.is_cpu() => t.to_cpu().map(Value::Tensor),
                other => Ok(other),
            })
            .collect()
    }
}

/// Byte range of a tensor's memory, if it has any.
fn tensor_range(v: &EValue) -> Option<std::ops::Range<usize>> {
    match v {
        EValue::Tensor(t) => t.memory_range(),
        _ => None,
    }
}

/// Rejects a kernel call whose output memory overlaps another tensor argument's: kernels
/// read inputs while writing outputs, so such a program (malformed, or a hostile file)
/// would be undefined behaviour. Outputs follow ExecuTorch's convention: an `out` argument
/// appears again as the return value (or inside the returned tensor list).
fn check_out_aliasing(values: &[EValue], args: &[u32]) -> Result<()> {
    let mut outs: Vec<u32> = Vec::new();
    for (k, &a) in args.iter().enumerate() {
        if args[..k].contains(&a) && !outs.contains(&a) {
            outs.push(a);
        }
    }
    if let Some(EValue::TensorList(items)) = args.last().map(|&a| &values[a as usize]) {
        for &it in items.iter() {
            if args.contains(&it) && !outs.contains(&it) {
                outs.push(it);
            }
        }
    }
    for &o in &outs {
        let Some(ro) = tensor_range(&values[o as usize]) else {
            continue;
        };
        for &a in args {
            if a == o {
                continue;
            }
            let items: Vec<u32> = match &values[a as usize] {
                EValue::TensorList(l) => l.to_vec(),
                EValue::OptionalTensorList(l) => l.iter().flatten().copied().collect(),
                _ => vec![a],
            };
            for x in items {
                if x == o {
                    continue;
                }
                if let Some(rx) = tensor_range(&values[x as usize])
                    && rx.start < ro.end
                    && ro.start < rx.end
                {
                    return Err(Error::invalid_program(format!(
                        "output value {o} overlaps the memory of argument value {x}"
                    )));
                }
            }
        }
    }
    Ok(())
}

fn index_list(
    v: Option<etch_format::planus::Vector<'_, i32>>,
    nv: usize,
    what: &str,
) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    if let Some(v) = v {
        for x in v.iter() {
            out.push(value_index(x as i64, nv, what)?);
        }
    }
    Ok(out)
}

/// How a method uses a value: a method input or output, and whether any instruction (or a
/// list an instruction takes) refers to it.
#[derive(Clone, Copy)]
struct ValueUse {
    io: bool,
    referenced: bool,
}

/// Values the instructions refer to: the arguments of kernel and delegate calls, moves,
/// jump conditions and frees, and the items of the tensor lists among them.
fn referenced_values(plan: &pte::ExecutionPlanRef<'_>, nv: usize) -> Result<HashSet<u32>> {
    use pte::InstructionArgumentsRef as A;
    let mut set = HashSet::new();
    let mut add = |x: i64| {
        if x >= 0 && (x as usize) < nv {
            set.insert(x as u32);
        }
    };
    if let Some(cs) = plan.chains().map_err(fb_err("chains"))? {
        for c in cs.iter() {
            let c = c.map_err(fb_err("chain"))?;
            let Some(instrs) = c.instructions().map_err(fb_err("instructions"))? else {
                continue;
            };
            for ins in instrs.iter() {
                let ins = ins.map_err(fb_err("instruction"))?;
                match ins.instr_args().map_err(fb_err("instruction"))? {
                    Some(A::KernelCall(k)) => {
                        if let Some(a) = k.args().map_err(fb_err("arguments"))? {
                            a.iter().for_each(|x| add(x as i64));
                        }
                    }
                    Some(A::DelegateCall(d)) => {
                        if let Some(a) = d.args().map_err(fb_err("arguments"))? {
                            a.iter().for_each(|x| add(x as i64));
                        }
                    }
                    Some(A::MoveCall(m)) => {
                        add(m.move_from().map_err(fb_err("move"))? as i64);
                        add(m.move_to().map_err(fb_err("move"))? as i64);
                    }
                    Some(A::JumpFalseCall(j)) => {
                        add(j.cond_value_index().map_err(fb_err("jump"))? as i64)
                    }
                    Some(A::FreeCall(f)) => add(f.value_index().map_err(fb_err("free"))? as i64),
                    None => {}
                }
            }
        }
    }
    list_items(plan, nv, &mut set)?;
    Ok(set)
}

/// Adds the items of the (optional) tensor lists in `set` to it.
fn list_items(plan: &pte::ExecutionPlanRef<'_>, nv: usize, set: &mut HashSet<u32>) -> Result<()> {
    use pte::KernelTypesRef as K;
    let Some(vs) = plan.values().map_err(fb_err("values"))? else {
        return Ok(());
    };
    let mut items = Vec::new();
    for &i in set.iter() {
        let Some(Ok(v)) = vs.get(i as usize) else {
            continue;
        };
        match v.val().map_err(fb_err("value"))? {
            Some(K::TensorList(l)) => {
                if let Some(v) = l.items().map_err(fb_err("tensor list"))? {
                    items.extend(v.iter().map(|x| x as i64));
                }
            }
            Some(K::OptionalTensorList(l)) => {
                if let Some(v) = l.items().map_err(fb_err("tensor list"))? {
                    items.extend(v.iter().map(|x| x as i64));
                }
            }
            _ => {}
        }
    }
    set.extend(
        items
            .into_iter()
            .filter(|&x| x >= 0 && (x as usize) < nv)
            .map(|x| x as u32),
    );
    Ok(())
}

/// Int values a kernel may write at run time: every Int that is an argument of a kernel
/// call (symbolic sizes come out of `sym_size` and prim ops) or a move target. (Method
/// inputs are added by the caller.)
fn runtime_written_ints(plan: &pte::ExecutionPlanRef<'_>, nv: usize) -> Result<HashSet<u32>> {
    use pte::InstructionArgumentsRef as A;
    let mut set = HashSet::new();
    if let Some(cs) = plan.chains().map_err(fb_err("chains"))? {
        for c in cs.iter() {
            let c = c.map_err(fb_err("chain"))?;
            if let Some(instrs) = c.instructions().map_err(fb_err("instructions"))? {
                for ins in instrs.iter() {
                    match ins
                        .map_err(fb_err("instruction"))?
                        .instr_args()
                        .map_err(fb_err("instruction"))?
                    {
                        Some(A::KernelCall(k)) => {
                            if let Some(a) = k.args().map_err(fb_err("arguments"))? {
                                set.extend(
                                    a.iter()
                                        .filter(|&x| x >= 0 && (x as usize) < nv)
                                        .map(|x| x as u32),
                                );
                            }
                        }
                        Some(A::MoveCall(m)) => {
                            let t = m.move_to().map_err(fb_err("move"))?;
                            if t >= 0 {
                                set.insert(t as u32);
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    Ok(set)
}

fn refresh_int_list(values: &mut [EValue], l: usize) {
    let n = match &values[l] {
        EValue::IntList(list) => list.items.len(),
        _ => return,
    };
    for k in 0..n {
        let item = match &values[l] {
            EValue::IntList(list) => list.items[k] as usize,
            _ => return,
        };
        let v = match &values[item] {
            EValue::Int(v) => *v,
            _ => 0,
        };
        if let EValue::IntList(list) = &mut values[l] {
            list.vals[k] = v;
        }
    }
}

fn refresh_all_int_lists(values: &mut [EValue]) {
    for l in 0..values.len() {
        refresh_int_list(values, l);
    }
}

fn set_tensor_input(t: &mut TensorImpl, src: &Tensor, devices: &DeviceRegistry) -> Result<()> {
    if t.dtype() != src.dtype() {
        return Err(Error::invalid_argument(format!(
            "expected a {} tensor, got {}",
            t.dtype(),
            src.dtype()
        )));
    }
    if src.sizes().len() != t.dim() {
        return Err(Error::invalid_argument(format!(
            "expected a {}-d tensor of shape {:?}, got shape {:?}",
            t.dim(),
            t.sizes(),
            src.sizes()
        )));
    }
    if !t.is_default_dim_order() {
        return Err(Error::not_supported(
            "inputs with a non-default dim order are not supported yet",
        ));
    }
    let old = *t;
    t.resize(src.sizes()).map_err(|e| {
        Error::invalid_argument(format!(
            "shape {:?} does not fit the input ({:?}, {}): {}",
            src.sizes(),
            old.sizes(),
            old.dynamism().name(),
            e.message()
        ))
    })?;
    if t.data_ptr().is_null() && src.numel() > 0 {
        return Err(Error::invalid_state("input has no memory to copy into"));
    }
    let from = src.view();
    // Host → host is a memcpy; anything touching a device goes through its allocator
    // (host → device, device → device, device → host), never a host memcpy into device
    // memory.
    // SAFETY: `resize` checked `src.nbytes() <= capacity` of the destination, which is
    // method-owned memory distinct from the caller's tensor.
    unsafe {
        copy_between(
            devices,
            t.data_ptr(),
            t.device(),
            from.data_ptr(),
            src.device(),
            src.nbytes(),
        )
    }
}

/// Points a method tensor at caller memory, checking dtype, device and capacity.
/// Binds `slot` to the caller's tensor `t`: same dtype, device and dim order, and a shape
/// the method declared: equal for a static tensor, within `bound` (the exported upper
/// bound) per dim for a dynamic one, so kernels planned for the declared shapes never see
/// a larger one.
fn share_tensor(slot: &mut EValue, t: &TensorImpl, bound: Option<&[usize]>) -> Result<()> {
    let dst = slot.as_tensor_mut()?;
    let fits = match (dst.dynamism(), bound) {
        (_, _) if t.dim() != dst.dim() => false,
        (etch_core::Dynamism::Static, Some(b)) => t.sizes() == b,
        (_, Some(b)) => b.len() == t.dim() && t.sizes().iter().zip(b).all(|(s, b)| s <= b),
        (_, None) => true,
    };
    if !fits {
        return Err(Error::invalid_argument(format!(
            "shape {:?} does not fit the declared {:?} ({})",
            t.sizes(),
            bound.unwrap_or(dst.sizes()),
            dst.dynamism().name()
        )));
    }
    if dst.dtype() != t.dtype() {
        return Err(Error::invalid_argument(format!(
            "expected a {} tensor, got {}",
            dst.dtype(),
            t.dtype()
        )));
    }
    if dst.device() != t.device() {
        return Err(Error::invalid_argument(format!(
            "expected a tensor on {}, got one on {}",
            dst.device(),
            t.device()
        )));
    }
    if t.dim_order() != dst.dim_order() {
        return Err(Error::invalid_argument(format!(
            "expected dim order {:?}, got {:?}",
            dst.dim_order(),
            t.dim_order()
        )));
    }
    let mut n = *dst;
    n.set_data(t.data_ptr(), t.capacity().max(t.nbytes()));
    n.resize(t.sizes())?;
    *dst = n;
    Ok(())
}

/// Copies a method value out into an owned value.
pub fn evalue_to_value(values: &[EValue], v: &EValue, devices: &DeviceRegistry) -> Result<Value> {
    Ok(match v {
        EValue::None => Value::None,
        EValue::Int(x) => Value::Int(*x),
        EValue::Double(x) => Value::Double(*x),
        EValue::Bool(x) => Value::Bool(*x),
        EValue::String(s) => Value::String(s.to_string()),
        EValue::Tensor(t) => Value::Tensor(tensor_to_owned(t, devices)?),
        EValue::IntList(l) => Value::IntList(l.vals.to_vec()),
        EValue::DoubleList(l) => Value::DoubleList(l.to_vec()),
        EValue::BoolList(l) => Value::BoolList(l.to_vec()),
        EValue::TensorList(l) => Value::TensorList(
            l.iter()
                .map(|&i| tensor_to_owned(values[i as usize].as_tensor()?, devices))
                .collect::<Result<_>>()?,
        ),
        EValue::OptionalTensorList(l) => Value::OptionalTensorList(
            l.iter()
                .map(|i| match i {
                    Some(i) => match &values[*i as usize] {
                        EValue::Tensor(t) => tensor_to_owned(t, devices).map(Some),
                        _ => Ok(None),
                    },
                    None => Ok(None),
                })
                .collect::<Result<_>>()?,
        ),
    })
}

/// Copies a host tensor view into an owned row-major tensor (converting the dim order).
pub fn tensor_to_owned(t: &TensorImpl, devices: &DeviceRegistry) -> Result<Tensor> {
    if !t.device().is_cpu() {
        // A device output stays on its device: copy it device-to-device into a new
        // allocation the caller owns.
        if !t.is_default_dim_order() {
            return Err(Error::not_supported(
                "device outputs with a non-default dim order are not supported yet",
            ));
        }
        let out = Tensor::empty_on(t.dtype(), t.sizes(), t.device(), devices)?;
        // SAFETY: `t` points at live method memory of `nbytes()`; `out` is a fresh
        // allocation of the same size.
        unsafe {
            copy_between(
                devices,
                out.view().data_ptr(),
                out.device(),
                t.data_ptr(),
                t.device(),
                t.nbytes(),
            )?
        };
        return Ok(out);
    }
    // SAFETY: runtime tensors point at live method or program memory.
    let r = unsafe { TensorRef::new(*t) };
    let bytes = r.bytes()?;
    if t.is_default_dim_order() {
        return Tensor::from_bytes(t.dtype(), t.sizes(), bytes);
    }
    let mut out = Tensor::zeros(t.dtype(), t.sizes())?;
    let es = t.dtype().element_size();
    let sizes = t.sizes();
    let strides = t.strides();
    let n = t.numel();
    let dst = out.as_bytes_mut()?;
    let mut idx = vec![0usize; sizes.len()];
    for lin in 0..n {
        let src_off: usize = idx.iter().zip(strides).map(|(i, s)| i * s).sum();
        dst[lin * es..(lin + 1) * es].copy_from_slice(&bytes[src_off * es..(src_off + 1) * es]);
        for d in (0..sizes.len()).rev() {
            idx[d] += 1;
            if idx[d] < sizes[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(out)
}

/// What [`prepare_kernels`] needs of the method being loaded.
struct PrepareInput<'a> {
    values: &'a mut [EValue],
    constant: &'a [bool],
    /// The values nothing reads ([`unread_values`]; `None` where unknown: methods with
    /// jumps).
    unread: Option<&'a [bool]>,
    op_names: &'a [String],
    kernels: &'a KernelRegistry,
    devices: &'a DeviceRegistry,
    host_access: bool,
}

/// Runs the load-time hook of each kernel call that has one (`KernelRegistry::
/// register_prepare`), once per call site, and keeps what it returns with the call. Calls
/// whose int lists change at run time are left alone, and so are methods whose memory the
/// host cannot read (on a device).
fn prepare_kernels(p: PrepareInput<'_>, chains: &mut [Vec<Instr>]) -> Result<()> {
    // Hooks read constants on the host.
    if !p.host_access {
        return Ok(());
    }
    for instr in chains.iter_mut().flatten() {
        let Instr::Kernel {
            op,
            args,
            refresh,
            prepared,
        } = instr
        else {
            continue;
        };
        let name = &p.op_names[*op as usize];
        let Some(hook) = p.kernels.prepare_fn(name).filter(|_| refresh.is_empty()) else {
            continue;
        };
        // SAFETY: every tensor in `values` points at memory the method owns (arenas,
        // uploaded constants, folded results) or at the program's bytes, all alive while it
        // loads; the hook only reads.
        let ctx = unsafe { KernelContext::new(p.values, args, name) }
            .with_devices(p.devices, p.host_access)
            .with_constants(p.constant);
        let ctx = match p.unread {
            Some(u) => ctx.with_unread(u),
            None => ctx,
        };
        *prepared = hook(&ctx)
            .map_err(|e| e.context(format!("preparing {name} at load")))?
            .map(PreparedState);
    }
    Ok(())
}

/// The values nothing reads (`KernelContext::is_unread`) in a method without jumps: plain
/// intermediates with memory that one kernel call writes, that no other instruction
/// mentions (a kernel or delegate call, tensor lists included) and whose bytes no static
/// view can read (`fuse::seen_by_views`).
fn unread_values(values: &[EValue], intermediate: &[bool], chains: &[Vec<Instr>]) -> Vec<bool> {
    let refs: Vec<_> = chains.iter().map(|c| call_refs(c)).collect();
    let flows: Vec<_> = refs
        .iter()
        .map(|r| crate::fuse::Flow::new(values, intermediate, r))
        .collect();
    let seen = crate::fuse::seen_by_views(values, &flows);
    (0..values.len())
        .map(|v| {
            let mentions: usize = flows.iter().map(|f| f.mentions(v)).sum();
            let writers: u32 = flows.iter().map(|f| f.writers(v)).sum();
            let memory = matches!(&values[v], EValue::Tensor(t) if t.memory_range().is_some());
            intermediate[v] && memory && mentions == 1 && writers == 1 && !seen[v]
        })
        .collect()
}

/// The instructions of a chain as the load-time passes see them.
fn call_refs(chain: &[Instr]) -> Vec<crate::fold::CallRef<'_>> {
    let call = |op, args, refreshed| crate::fold::CallRef {
        op,
        args,
        refreshed,
    };
    chain
        .iter()
        .map(|i| match i {
            Instr::Kernel {
                op, args, refresh, ..
            } => call(Some(*op as usize), args, !refresh.is_empty()),
            Instr::Delegate { args, .. } => call(None, args, false),
            _ => call(None, &[], false),
        })
        .collect()
}

/// Removes the `Free` instructions (the program's, and folded kernels) from a chain
/// without jumps, and their program indices from `ids`.
fn drop_frees(chain: &mut Vec<Instr>, ids: &mut Vec<u32>) {
    let mut kept = chain.iter().map(|i| !matches!(i, Instr::Free));
    ids.retain(|_| kept.next().unwrap_or(false));
    chain.retain(|i| !matches!(i, Instr::Free));
}

/// The value of a jump's condition: a Bool, or a tensor whose elements are all non-zero.
fn jump_condition(values: &[EValue], cond: u32, name: &str, pc: usize) -> Result<bool> {
    match &values[cond as usize] {
        EValue::Bool(b) => Ok(*b),
        EValue::Tensor(t) => {
            // SAFETY: as for kernels: the tensor points at memory the method keeps alive.
            let r = unsafe { TensorRef::new(*t) };
            Ok(r.data::<u8>()?.iter().all(|&b| b != 0))
        }
        other => Err(Error::invalid_type(format!(
            "method '{name}', instruction {pc}: jump condition is {}",
            other.tag().name()
        ))),
    }
}
