//! `ExecutorBackend`: the delegate's blob is a nested program, loaded at init and run on
//! the compile spec's `target_device`.

use etch_core::{
    Device, DeviceContext, DeviceExecHooks, DeviceGraph, DeviceType, EValue, Error, KernelContext,
    KernelRegistry, MAX_DIMS, Result, TensorImpl, Value,
};
use etch_format::Program;
use etch_runtime::{
    Backend, BackendInitContext, CompileSpec, Delegate, LoadConfig, Method, memory::copy_between,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The backend id ExecuTorch's exporter writes.
pub const EXECUTOR_BACKEND_ID: &str = "ExecutorBackend";
/// Deepest nesting of ExecutorBackend programs accepted.
pub const MAX_NESTING: u32 = 4;
/// The compile spec naming the device a delegate runs on (`cuda:0`; CPU when absent).
pub const TARGET_DEVICE_KEY: &str = "target_device";

/// Reads the `target_device` compile spec (the first one wins), as upstream's
/// `_parse_device_spec_value`: case-insensitive `type[:index]`. Negative indices are
/// rejected (upstream accepts them).
pub fn parse_target_device(specs: &[CompileSpec]) -> Result<Device> {
    match specs.iter().find(|c| c.key == TARGET_DEVICE_KEY) {
        None => Ok(Device::CPU),
        Some(c) => {
            let s = std::str::from_utf8(&c.value)
                .map_err(|_| Error::invalid_program("target_device compile spec is not UTF-8"))?;
            s.parse::<Device>().map_err(|e| {
                Error::invalid_program(format!("target_device '{s}': {}", e.message()))
            })
        }
    }
}

/// The nested-program backend.
///
/// Kernels: a device whose memory the host can address (the CPU, the simulated device)
/// runs the nested method with the loader's kernels (the portable CPU kernels); another
/// device needs a kernel registry registered for its type with
/// [`ExecutorBackend::with_device_kernels`], or init fails naming the device.
///
/// Device hooks ([`ExecutorBackend::with_device_hooks`]) let a delegate on that device be
/// recorded once and replayed (CUDA graphs): a delegate executed again with the same
/// inputs (addresses, shapes and scalar values) and outputs is captured on its second
/// call and replayed from then on; a delegate whose work cannot be captured (a kernel that
/// waits for the device) runs normally. [`ExecutorBackend::with_graphs`] turns this off.
/// While the profiler is on (`etch_runtime::profile`), delegates run op by op and their
/// kernel calls are timed with the hooks' device timer, when they give one.
pub struct ExecutorBackend {
    device_kernels: HashMap<DeviceType, Arc<KernelRegistry>>,
    device_hooks: HashMap<DeviceType, Arc<dyn DeviceExecHooks>>,
    graphs: bool,
}

impl Default for ExecutorBackend {
    fn default() -> Self {
        ExecutorBackend {
            device_kernels: HashMap::new(),
            device_hooks: HashMap::new(),
            graphs: true,
        }
    }
}

impl ExecutorBackend {
    /// A backend with no device-specific kernels.
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses `kernels` for nested methods on devices of type `t`.
    pub fn with_device_kernels(mut self, t: DeviceType, kernels: Arc<KernelRegistry>) -> Self {
        self.device_kernels.insert(t, kernels);
        self
    }

    /// Uses `hooks` around delegates on devices of type `t` (graph capture, device errors).
    pub fn with_device_hooks(mut self, t: DeviceType, hooks: Arc<dyn DeviceExecHooks>) -> Self {
        self.device_hooks.insert(t, hooks);
        self
    }

    /// Whether delegates are recorded and replayed as device graphs (default: yes).
    pub fn with_graphs(mut self, on: bool) -> Self {
        self.graphs = on;
        self
    }
}

impl Backend for ExecutorBackend {
    fn is_available(&self) -> bool {
        true
    }

    fn init(
        &self,
        ctx: &BackendInitContext<'_>,
        processed: &[u8],
        compile_specs: &[CompileSpec],
    ) -> Result<Box<dyn Delegate>> {
        let device = parse_target_device(compile_specs)?;
        let config = ctx.config;
        if config.nesting_depth >= MAX_NESTING {
            return Err(Error::invalid_program(format!(
                "ExecutorBackend programs nested more than {MAX_NESTING} deep"
            )));
        }
        let kernels = if device.is_cpu() {
            Arc::clone(&config.kernels)
        } else {
            let alloc = config.devices.require(device.kind).map_err(|_| {
                Error::not_found(format!(
                    "delegate targets {device}; no {} device is available (try --simulate-device {})",
                    device.kind.name().to_uppercase(),
                    device.kind.name()
                ))
            })?;
            match self.device_kernels.get(&device.kind) {
                // Host-addressable device memory (the simulated device) runs the loader's
                // CPU kernels; real device memory needs the device's kernels.
                _ if alloc.host_accessible() => Arc::clone(&config.kernels),
                Some(k) => Arc::clone(k),
                None => {
                    return Err(Error::not_supported(format!(
                        "no kernels are registered for {device}"
                    )));
                }
            }
        };
        // The blob is copied into aligned memory: the nested program's constants must be
        // aligned, and they are uploaded to the device below anyway.
        let program = Program::from_bytes(processed)
            .map_err(|e| e.context("nested program of ExecutorBackend"))?;
        let name = program
            .method_names()
            .first()
            .cloned()
            .ok_or_else(|| Error::invalid_program("nested program has no method"))?;
        let hooks = (!device.is_cpu())
            .then(|| self.device_hooks.get(&device.kind).cloned())
            .flatten()
            .filter(|_| {
                config
                    .devices
                    .get(device.kind)
                    .is_some_and(|a| !a.host_accessible())
            });
        let device_context = match &hooks {
            Some(h) => h.kernel_context(&config.devices, device)?,
            None => None,
        };
        let nested = LoadConfig {
            kernels,
            backends: Arc::clone(&config.backends),
            devices: Arc::clone(&config.devices),
            named_data: config.named_data.clone(),
            target_device: (!device.is_cpu()).then_some(device),
            max_planned_bytes: config.max_planned_bytes,
            shared_arenas: None,
            nesting_depth: config.nesting_depth + 1,
            fold_constants: config.fold_constants,
            prepare_kernels: config.prepare_kernels,
            fuse_kernels: config.fuse_kernels,
            channels_last: config.channels_last,
            device_context: device_context.clone(),
            device_constants: config.device_constants.clone(),
        };
        let method = Method::load(&program, &name, &nested)?;
        let outs = Vec::with_capacity(method.num_outputs());
        let graphs = hooks.is_some() && self.graphs;
        Ok(Box::new(ExecutorDelegate {
            method,
            device,
            outs,
            hooks,
            graph: if graphs {
                GraphState::Watching
            } else {
                GraphState::Off
            },
            key: Vec::new(),
            last_key: Vec::new(),
            out_sizes: Vec::new(),
            device_context,
        }))
    }
}

/// How the calls of device delegates (those whose device has hooks: CUDA) ran, counted
/// over the process: what `etch generate` reports for its decode steps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphCounts {
    /// Calls recorded as a device graph (and replayed once to run them).
    pub recorded: u64,
    /// Calls that replayed a recorded graph.
    pub replayed: u64,
    /// Calls that ran op by op: graphs off, a call unlike the previous one (new addresses,
    /// shapes or scalars), a failed capture, or the profiler on.
    pub op_by_op: u64,
}

impl GraphCounts {
    /// The calls counted since `earlier`.
    pub fn since(self, earlier: GraphCounts) -> GraphCounts {
        GraphCounts {
            recorded: self.recorded.saturating_sub(earlier.recorded),
            replayed: self.replayed.saturating_sub(earlier.replayed),
            op_by_op: self.op_by_op.saturating_sub(earlier.op_by_op),
        }
    }

    /// All the calls counted.
    pub fn calls(&self) -> u64 {
        self.recorded + self.replayed + self.op_by_op
    }
}

/// [`GraphCounts`]' counters.
static RECORDED: AtomicU64 = AtomicU64::new(0);
static REPLAYED: AtomicU64 = AtomicU64::new(0);
static OP_BY_OP: AtomicU64 = AtomicU64::new(0);

fn tally(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// The device-delegate calls of this process so far, by how they ran.
pub fn graph_counts() -> GraphCounts {
    GraphCounts {
        recorded: RECORDED.load(Ordering::Relaxed),
        replayed: REPLAYED.load(Ordering::Relaxed),
        op_by_op: OP_BY_OP.load(Ordering::Relaxed),
    }
}

/// Where a delegate stands with device graphs.
enum GraphState {
    /// Never recorded (graphs off, or capture failed once).
    Off,
    /// Running normally; recorded when a call repeats the previous call's key.
    Watching,
    /// Recorded for `key`; replayed while calls keep it.
    Recorded(Box<dyn DeviceGraph>),
}

struct ExecutorDelegate {
    method: Method,
    device: Device,
    /// The outer output tensors of the current call (reused; no allocation per call).
    outs: Vec<TensorImpl>,
    hooks: Option<Arc<dyn DeviceExecHooks>>,
    graph: GraphState,
    /// This call's inputs and outputs (addresses, shapes, scalar bits), and the last
    /// call's (the recorded graph's, once recorded).
    key: Vec<u64>,
    last_key: Vec<u64>,
    /// The output shapes the recorded work produces.
    out_sizes: Vec<([usize; MAX_DIMS], usize)>,
    /// The context the device's kernels get (from the hooks).
    device_context: Option<DeviceContext>,
}

impl ExecutorDelegate {
    /// Binds the call's inputs and outputs to the nested method and fills `key`.
    fn bind(&mut self, args: &mut KernelContext<'_>, ni: usize, no: usize) -> Result<()> {
        self.key.clear();
        for i in 0..ni {
            // Tensors are shared (the nested method reads them and may update them in
            // place: state); scalars computed at run time are passed by value.
            let scalar = match args.value(i)? {
                EValue::Tensor(_) => None,
                EValue::Int(x) => Some(Value::Int(*x)),
                EValue::Double(x) => Some(Value::Double(*x)),
                EValue::Bool(x) => Some(Value::Bool(*x)),
                EValue::None => Some(Value::None),
                other => {
                    return Err(Error::invalid_program(format!(
                        "ExecutorBackend: delegate input {i} is {}; a nested method takes tensors, Int, Double, Bool or None",
                        other.tag().name()
                    )));
                }
            };
            match scalar {
                Some(v) => {
                    self.key.push(match v {
                        Value::Int(x) => x as u64,
                        Value::Double(x) => x.to_bits(),
                        Value::Bool(x) => x as u64,
                        _ => u64::MAX,
                    });
                    self.method.set_input(i, &v)?
                }
                None => {
                    let t = args.tensor(i)?;
                    push_tensor_key(&mut self.key, t.imp());
                    // SAFETY: the outer method's tensors stay valid through this call,
                    // which returns before the outer method runs anything else.
                    unsafe { self.method.share_input(i, t.imp())? };
                }
            }
        }
        self.outs.clear();
        for j in 0..no {
            // The nested kernels read the shared inputs while writing the shared outputs.
            crate::check_output_overlap(args, ni + j)?;
            let t = *args.tensor(ni + j)?.imp();
            push_tensor_key(&mut self.key, &t);
            // SAFETY: as above.
            unsafe { self.method.share_output(j, &t)? };
            self.outs.push(t);
        }
        Ok(())
    }

    /// Runs the nested method and puts its outputs into the outer ones.
    fn run(&mut self, args: &mut KernelContext<'_>, ni: usize) -> Result<()> {
        self.method.execute()?;
        self.out_sizes.clear();
        for (j, outer) in self.outs.iter().enumerate() {
            let produced = *self.method.output(j)?.as_tensor()?;
            let mut sizes = [0usize; MAX_DIMS];
            sizes[..produced.dim()].copy_from_slice(produced.sizes());
            self.out_sizes.push((sizes, produced.dim()));
            let resized = args.resize_out(ni + j, produced.sizes())?;
            if produced.data_ptr() != outer.data_ptr() {
                // The nested method produced this output elsewhere (a view or a move): copy
                // it over through the device's allocator.
                // SAFETY: both point at live memory of at least `nbytes` on their devices.
                unsafe {
                    copy_between(
                        self.method.devices(),
                        resized.data_ptr(),
                        resized.device(),
                        produced.data_ptr(),
                        produced.device(),
                        produced.nbytes(),
                    )?
                };
            }
            if !self.device.is_cpu()
                && let Some(a) = self.method.devices().get(self.device.kind)
                && a.host_accessible()
            {
                // CPU kernels wrote the outer output in host-accessible device memory.
                a.mark_written(resized.data_ptr(), resized.nbytes());
            }
        }
        Ok(())
    }

    /// Records `run` as a device graph and replays it once; on a failed capture the work
    /// runs normally and graphs stay off for this delegate.
    fn record(
        &mut self,
        args: &mut KernelContext<'_>,
        ni: usize,
        hooks: &dyn DeviceExecHooks,
    ) -> Result<()> {
        let devices = Arc::clone(self.method.devices());
        hooks.begin_capture(&devices, self.device)?;
        let ran = self.run(args, ni);
        let captured = hooks.end_capture(&devices, self.device);
        match (ran, captured) {
            (Ok(()), Ok(g)) => {
                g.replay()?;
                self.graph = GraphState::Recorded(g);
                tally(&RECORDED);
                Ok(())
            }
            (Err(e), _) => {
                self.graph = GraphState::Off;
                Err(e)
            }
            (Ok(()), Err(_)) => {
                self.graph = GraphState::Off;
                tally(&OP_BY_OP);
                self.run(args, ni)
            }
        }
    }
}

impl ExecutorDelegate {
    /// A call while the profiler is on: the nested method runs op by op, never as a
    /// device graph (a recorded graph stays for later calls; nothing is recorded), so each
    /// kernel call is seen; on a device whose hooks give a timer (CUDA events), the timer
    /// is set on the nested method at the first profiled call and times each kernel on the
    /// device.
    fn run_profiled(&mut self, args: &mut KernelContext<'_>, ni: usize) -> Result<()> {
        if let Some(h) = &self.hooks
            && !self.method.has_op_timer()
        {
            let timer = h.op_timer(self.method.devices(), self.device)?;
            self.method.set_op_timer(timer);
        }
        self.run(args, ni)
    }

    /// The device hooks' check after every call (device errors).
    fn after_execute(&self) -> Result<()> {
        match &self.hooks {
            Some(h) => h.after_execute(
                self.method.devices(),
                self.device,
                self.device_context.as_ref(),
            ),
            None => Ok(()),
        }
    }
}

fn push_tensor_key(key: &mut Vec<u64>, t: &TensorImpl) {
    key.push(t.data_ptr() as usize as u64);
    key.push(t.dim() as u64);
    key.extend(t.sizes().iter().map(|&s| s as u64));
}

impl Delegate for ExecutorDelegate {
    fn set_instruction_limit(&mut self, jumps: Option<u64>) {
        self.method.set_instruction_limit(jumps);
    }

    fn execute(&mut self, args: &mut KernelContext<'_>) -> Result<()> {
        let ni = self.method.num_inputs();
        let no = self.method.num_outputs();
        if args.num_args() < ni + no {
            return Err(Error::invalid_program(format!(
                "ExecutorBackend: the delegate call passes {} values; the nested method takes {ni} inputs and {no} outputs",
                args.num_args()
            )));
        }
        let hooks = self.hooks.clone();
        // A device delegate (with hooks) has the device's stream to itself from binding to
        // its error check: another thread's work there would break a graph capture.
        let _stream = hooks
            .is_some()
            .then(|| etch_core::lock_device(self.device.index));
        self.bind(args, ni, no)?;
        // Counted only for device delegates (hooks), which could have run as a graph.
        let op_by_op = || {
            if hooks.is_some() {
                tally(&OP_BY_OP);
            }
        };
        if etch_runtime::profile::enabled() {
            op_by_op();
            self.run_profiled(args, ni)?;
            return self.after_execute();
        }
        let same = self.key == self.last_key;
        match (&self.graph, &hooks) {
            (GraphState::Recorded(g), Some(_)) if same => {
                g.replay()?;
                tally(&REPLAYED);
                for j in 0..no {
                    let (sizes, n) = self.out_sizes[j];
                    args.resize_out(ni + j, &sizes[..n])?;
                }
            }
            (GraphState::Recorded(_), _) => {
                // New addresses or shapes: run normally, record again if they repeat.
                self.graph = GraphState::Watching;
                op_by_op();
                self.run(args, ni)?;
            }
            (GraphState::Watching, Some(h)) if same => self.record(args, ni, h.as_ref())?,
            _ => {
                op_by_op();
                self.run(args, ni)?
            }
        }
        std::mem::swap(&mut self.key, &mut self.last_key);
        self.after_execute()
    }
}
