//! The execution plan of an XNNPACK graph: a value table of tensor views and arguments,
//! and a list of steps (calls of etch's CPU kernels, in-place clamps, byte copies) that
//! read and write it. Everything is allocated at init; executing binds the delegate's
//! arguments to the external values' views and runs the steps.

use super::graph::{Datatype, Graph, XValue};
use super::memory::{MemoryPlan, Storage};
use super::rows::Rows;
use etch_core::{
    AlignedBuf, Device, Dynamism, EValue, Error, IntList, KernelContext, KernelFn, KernelRegistry,
    Result, ScalarType, TensorImpl, bf16, f16,
};
use etch_kernels::util::Shape;
use std::sync::OnceLock;

/// etch's portable CPU kernels, which the steps call.
fn kernels() -> &'static KernelRegistry {
    static REG: OnceLock<KernelRegistry> = OnceLock::new();
    REG.get_or_init(etch_kernels::portable_registry)
}

/// One step of the plan.
pub enum Step {
    /// A kernel call; `args` is a range of [`Plan::args`].
    Kernel {
        f: KernelFn,
        op: &'static str,
        args: (u32, u32),
    },
    /// Clamps a tensor value in place (a node's fused output range).
    Clamp { value: u32, lo: f32, hi: f32 },
    /// Copies the bytes of one tensor value into another of the same size.
    Copy { src: u32, dst: u32 },
}

/// A delegate argument bound to a graph value.
pub struct Binding {
    /// The argument index (the value's external id).
    pub arg: u32,
    /// Whether the argument is an output.
    pub output: bool,
    /// The value id.
    pub id: u32,
    /// The dtype and shape the graph declares.
    pub dtype: ScalarType,
    /// The declared shape.
    pub dims: Shape,
    /// Table entries viewing the value (their data pointers are set per call).
    pub views: Vec<u32>,
}

/// A ready-to-run plan.
pub struct Plan {
    /// Tensor views and kernel arguments.
    pub values: Vec<EValue>,
    /// Kernel argument lists (value indices), referenced by steps.
    pub args: Vec<u32>,
    /// What to run, in order.
    pub steps: Vec<Step>,
    /// External values.
    pub bindings: Vec<Binding>,
    /// The node of each step, for error messages and the profiler.
    pub step_nodes: Vec<u32>,
    /// Node names (schema names), by node.
    pub node_names: Vec<&'static str>,
    /// When the graph takes fewer rows than declared (see [`super::rows`]).
    rows: Option<Rows>,
    /// Owned memory the views point into (arena, constants, scratch).
    _buffers: Vec<AlignedBuf>,
}

/// The scalar type etch uses for an XNNPACK datatype.
pub fn scalar_type(v: &XValue, id: u32) -> Result<ScalarType> {
    Ok(match v.dtype {
        Datatype::Fp32 => ScalarType::Float,
        Datatype::Fp16 => ScalarType::Half,
        Datatype::Bf16 => ScalarType::BFloat16,
        Datatype::Int32 | Datatype::Qcint32 | Datatype::Qint32 => ScalarType::Int,
        // The int8 elements; the quantization parameters are kept beside them.
        Datatype::Qint8 | Datatype::Qdint8 | Datatype::Qcint8 => ScalarType::Char,
        d @ (Datatype::Qcint4 | Datatype::Qbint4 | Datatype::Other(_)) => {
            let q = v
                .quant
                .as_ref()
                .map(|q| format!(", {}", q.name()))
                .unwrap_or_default();
            return Err(Error::not_supported(format!(
                "value {id} is {}{q}: etch runs XNNPACK graphs of fp32, fp16 and bf16 tensors, \
                 statically quantized int8 (qint8) nodes, and dynamically quantized \
                 fully-connected nodes (qdint8 inputs, qcint8, qcint4 or qbint4 filters), only \
                 so far",
                d.name()
            )));
        }
    })
}

/// Builds a [`Plan`] node by node. The arena is allocated by [`Builder::finish`], once
/// every node has been checked, and only within the byte limit.
pub struct Builder<'g> {
    /// The graph being planned.
    pub graph: &'g Graph,
    mem: MemoryPlan,
    /// Values laid out channels-first (see [`super::memory::channels_first`]).
    channels_first: Vec<bool>,
    /// The bytes of each constant value (exactly its size), in the payload or named data.
    const_src: Vec<Option<&'g [u8]>>,
    /// The bytes of each quantized value's scales, when they are in constant data.
    scale_src: Vec<Option<&'g [u8]>>,
    /// The per-row parameters of each dynamically quantized value (table entries).
    row_params: Vec<Option<u32>>,
    /// Data pointer of each constant value copied into the plan (on first direct use;
    /// constants used only through a repacked copy are never copied as they are).
    const_ptrs: Vec<*mut u8>,
    /// Views of arena values: (table entry, arena offset), pointed at the arena by `finish`.
    arena_views: Vec<(u32, usize)>,
    default_view: Vec<Option<u32>>,
    /// Views of non-constant values (arena, arguments, per-row parameters).
    data_views: Vec<u32>,
    values: Vec<EValue>,
    args: Vec<u32>,
    steps: Vec<Step>,
    step_nodes: Vec<u32>,
    bindings: Vec<Binding>,
    buffers: Vec<AlignedBuf>,
    /// Bytes of the arena and of the plan's own buffers, against `limit`.
    bytes: u64,
    limit: Option<u64>,
    /// The node being lowered (for step attribution).
    pub node: u32,
}

impl<'g> Builder<'g> {
    /// Starts a plan over the constants' bytes. `limit` caps the bytes the plan allocates
    /// (arena, constants and repacked or scratch buffers).
    pub fn new(
        graph: &'g Graph,
        mem: MemoryPlan,
        constants: Vec<Option<&'g [u8]>>,
        scales: Vec<Option<&'g [u8]>>,
        limit: Option<u64>,
    ) -> Result<Self> {
        let mut b = Builder {
            graph,
            channels_first: super::memory::channels_first(graph),
            default_view: vec![None; graph.values.len()],
            data_views: Vec::new(),
            mem,
            const_ptrs: vec![std::ptr::null_mut(); constants.len()],
            const_src: constants,
            scale_src: scales,
            row_params: vec![None; graph.values.len()],
            arena_views: Vec::new(),
            values: Vec::new(),
            args: Vec::new(),
            steps: Vec::new(),
            step_nodes: Vec::new(),
            bindings: Vec::new(),
            buffers: Vec::new(),
            bytes: 0,
            limit,
            node: 0,
        };
        b.reserve(b.mem.arena_bytes)?;
        Ok(b)
    }

    /// Counts `n` more bytes against the limit.
    fn reserve(&mut self, n: usize) -> Result<()> {
        self.bytes = self.bytes.saturating_add(n as u64);
        match self.limit {
            Some(l) if self.bytes > l => Err(Error::memory_allocation_failed(format!(
                "the XNNPACK delegate needs more than {} bytes of memory; the limit is {l}",
                self.bytes
            ))),
            _ => Ok(()),
        }
    }

    /// The graph value `id`.
    pub fn value(&self, id: u32) -> &'g XValue {
        &self.graph.values[id as usize]
    }

    /// The scalar type of value `id`.
    pub fn dtype(&self, id: u32) -> Result<ScalarType> {
        scalar_type(self.value(id), id)
    }

    /// Whether values `a` and `b` occupy the same bytes (a reshape's input and output, which
    /// the memory plan gives one place: [`super::memory::reshape_roots`]).
    pub fn same_bytes(&self, a: u32, b: u32) -> bool {
        let st = |id: u32| self.mem.storage.get(id as usize).copied();
        match (st(a), st(b)) {
            (Some(Storage::Arena(x)), Some(Storage::Arena(y))) => x == y,
            (Some(Storage::External(x)), Some(Storage::External(y))) => x == y,
            _ => false,
        }
    }

    /// Whether value `id` is a constant.
    pub fn is_constant(&self, id: u32) -> bool {
        self.mem.storage[id as usize] == Storage::Constant
    }

    /// The bytes of constant `id`, in XNNPACK's layout.
    pub fn constant_bytes(&self, id: u32) -> Result<&'g [u8]> {
        self.const_src
            .get(id as usize)
            .copied()
            .flatten()
            .ok_or_else(|| Error::internal(format!("value {id} is not a loaded constant")))
    }

    /// The bytes of value `id`'s scales in constant data (the whole table entry).
    pub fn scale_bytes(&self, id: u32) -> Result<&'g [u8]> {
        self.scale_src
            .get(id as usize)
            .copied()
            .flatten()
            .ok_or_else(|| Error::internal(format!("value {id} has no scales in constant data")))
    }

    /// The per-row quantization parameters of dynamically quantized value `id`: a plan-owned
    /// `[rows, 2]` f32 tensor (scale, zero point) that the node writing the value fills.
    pub fn row_params(&mut self, id: u32, rows: usize) -> Result<u32> {
        if let Some(i) = self.row_params[id as usize] {
            return Ok(i);
        }
        let i = self.scratch_with(ScalarType::Float, &[rows, 2], Dynamism::DynamicBound)?;
        self.data_views.push(i);
        self.row_params[id as usize] = Some(i);
        Ok(i)
    }

    /// Copies constant `id` into the plan (once) and returns its data pointer.
    fn constant_ptr(&mut self, id: u32) -> Result<*mut u8> {
        let p = self.const_ptrs[id as usize];
        if !p.is_null() {
            return Ok(p);
        }
        let src = self.constant_bytes(id)?;
        self.reserve(src.len())?;
        let mut buf = AlignedBuf::from_bytes(src)?;
        let p = buf.as_mut_ptr();
        self.buffers.push(buf);
        self.const_ptrs[id as usize] = p;
        Ok(p)
    }

    /// Table entry `i`.
    pub fn entry(&self, i: u32) -> &EValue {
        &self.values[i as usize]
    }

    fn push(&mut self, v: EValue) -> u32 {
        self.values.push(v);
        (self.values.len() - 1) as u32
    }

    /// A view of value `id` with `sizes` (same element count) and a dim order, over its
    /// bytes in XNNPACK's layout (not for values laid out channels-first).
    pub fn view(&mut self, id: u32, sizes: &[usize], dim_order: Option<&[u8]>) -> Result<u32> {
        if self.channels_first[id as usize] {
            return Err(Error::internal(format!(
                "value {id} is laid out channels-first; it has no flat view"
            )));
        }
        self.raw_view(id, sizes, dim_order)
    }

    /// An NHWC value `[n, h, w, c]` viewed as NCHW `[n, c, h, w]` (channels-last dim order
    /// unless the value is laid out channels-first), and those sizes.
    pub fn nchw(&mut self, id: u32, what: &str) -> Result<(u32, [usize; 4])> {
        let d = self.value(id).dims;
        if d.len() != 4 {
            return Err(Error::invalid_program(format!(
                "{what} {:?} is not a 4-d NHWC tensor",
                &d[..]
            )));
        }
        let s = [d[0], d[3], d[1], d[2]];
        let order: Option<&[u8]> = if self.channels_first[id as usize] {
            None
        } else {
            Some(&[0, 2, 3, 1])
        };
        Ok((self.raw_view(id, &s, order)?, s))
    }

    /// Value `id`, a 4-d NHWC value laid out channels-first or with one pixel (where both
    /// layouts are the same bytes), as a contiguous NCHW tensor `[n, c, h, w]` in the
    /// default dim order; `None` for other values.
    pub fn dense_nchw(&mut self, id: u32) -> Result<Option<u32>> {
        let d = self.value(id).dims;
        if d.len() != 4 || !(self.channels_first[id as usize] || d[1] * d[2] == 1) {
            return Ok(None);
        }
        self.raw_view(id, &[d[0], d[3], d[1], d[2]], None).map(Some)
    }

    /// Whether value `id` is laid out channels-first.
    pub fn is_channels_first(&self, id: u32) -> bool {
        self.channels_first[id as usize]
    }

    /// The current node's [`super::memory::InPlace`], where the memory plan gave its output
    /// the bytes of that input.
    pub fn inplace(&self) -> Option<super::memory::InPlace> {
        let g = self.graph;
        let ip = super::memory::inplace(g, &self.channels_first, self.node as usize)?;
        let out = g.nodes[self.node as usize].op.outputs().first().copied()? as u32;
        self.same_bytes(ip.x, out).then_some(ip)
    }

    fn raw_view(&mut self, id: u32, sizes: &[usize], dim_order: Option<&[u8]>) -> Result<u32> {
        let v = self.value(id);
        let dtype = scalar_type(v, id)?;
        let bytes = super::memory::value_bytes(self.graph, id as usize)?;
        let storage = self.mem.storage[id as usize];
        let ptr = match storage {
            Storage::Constant => self.constant_ptr(id)?,
            _ => std::ptr::null_mut(),
        };
        // Views of non-constant values may be resized per call (see [`super::rows`]).
        let dynamism = match storage {
            Storage::Constant => Dynamism::Static,
            _ => Dynamism::DynamicBound,
        };
        let t = TensorImpl::new(dtype, sizes, dim_order, dynamism, Device::CPU, ptr, bytes)?;
        if t.nbytes() != bytes {
            return Err(Error::invalid_program(format!(
                "view {sizes:?} of value {id} {:?} changes its size",
                &v.dims[..]
            )));
        }
        let idx = self.push(EValue::Tensor(t));
        if storage != Storage::Constant {
            self.data_views.push(idx);
        }
        match storage {
            Storage::External(arg) => self.bind(id, arg, idx)?,
            Storage::Arena(off) => self.arena_views.push((idx, off)),
            Storage::Constant => {}
            Storage::Unused => {
                return Err(Error::internal(format!("value {id} has no storage")));
            }
        }
        Ok(idx)
    }

    /// A view of value `id` in its own shape (XNNPACK's layout).
    pub fn tensor(&mut self, id: u32) -> Result<u32> {
        if let Some(i) = self.default_view[id as usize] {
            return Ok(i);
        }
        let dims = self.value(id).dims;
        let order: Option<&[u8]> = if self.channels_first[id as usize] {
            Some(&[0, 3, 1, 2])
        } else {
            None
        };
        let i = self.raw_view(id, &dims, order)?;
        self.default_view[id as usize] = Some(i);
        Ok(i)
    }

    fn bind(&mut self, id: u32, arg: u32, view: u32) -> Result<()> {
        // An internal value in a delegate argument's bytes (a reshape's operand:
        // memory::reshape_roots) is another view of the argument's own value.
        let id = match self.value(id).external_id {
            Some(_) => id,
            None => self
                .graph
                .values
                .iter()
                .position(|v| v.constant == 0 && v.external_id == Some(arg))
                .ok_or_else(|| Error::internal(format!("no value is argument {arg}")))?
                as u32,
        };
        if let Some(b) = self.bindings.iter_mut().find(|b| b.id == id) {
            b.views.push(view);
            return Ok(());
        }
        if let Some(b) = self.bindings.iter().find(|b| b.arg == arg) {
            return Err(Error::invalid_program(format!(
                "XNNPACK values {} and {id} are both bound to argument {arg}",
                b.id
            )));
        }
        let v = self.value(id);
        let output = v.flags & super::graph::FLAG_EXTERNAL_OUTPUT != 0
            || self.graph.output_ids.contains(&id);
        self.bindings.push(Binding {
            arg,
            output,
            id,
            dtype: scalar_type(v, id)?,
            dims: v.dims,
            views: vec![view],
        });
        Ok(())
    }

    /// A new zeroed buffer of `bytes` owned by the plan, viewed as a tensor.
    pub fn scratch(&mut self, dtype: ScalarType, sizes: &[usize]) -> Result<u32> {
        self.scratch_with(dtype, sizes, Dynamism::Static)
    }

    fn scratch_with(&mut self, dtype: ScalarType, sizes: &[usize], d: Dynamism) -> Result<u32> {
        let bytes = etch_core::checked_numel(sizes)
            .and_then(|n| n.checked_mul(dtype.element_size()))
            .ok_or_else(|| Error::invalid_program(format!("scratch {sizes:?} overflows")))?;
        self.reserve(bytes)?;
        let mut b = AlignedBuf::zeroed(bytes.max(1))?;
        let t = TensorImpl::new(dtype, sizes, None, d, Device::CPU, b.as_mut_ptr(), b.len())?;
        self.buffers.push(b);
        Ok(self.push(EValue::Tensor(t)))
    }

    /// A constant tensor of `dtype` and `sizes` holding `bytes` (a repacked weight).
    pub fn owned(&mut self, dtype: ScalarType, sizes: &[usize], bytes: &[u8]) -> Result<u32> {
        let i = self.scratch(dtype, sizes)?;
        let EValue::Tensor(t) = &self.values[i as usize] else {
            return Err(Error::internal("scratch is not a tensor"));
        };
        if t.nbytes() != bytes.len() {
            return Err(Error::internal(format!(
                "repacked constant of {} bytes for {sizes:?}",
                bytes.len()
            )));
        }
        // SAFETY: the buffer was just allocated with `nbytes` bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), t.data_ptr(), bytes.len()) };
        Ok(i)
    }

    /// An `Int` argument.
    pub fn int(&mut self, v: i64) -> u32 {
        self.push(EValue::Int(v))
    }
    /// A `Double` argument.
    pub fn double(&mut self, v: f64) -> u32 {
        self.push(EValue::Double(v))
    }
    /// A `Bool` argument.
    pub fn boolean(&mut self, v: bool) -> u32 {
        self.push(EValue::Bool(v))
    }
    /// A `None` argument.
    pub fn none(&mut self) -> u32 {
        self.push(EValue::None)
    }
    /// A `String` argument.
    pub fn string(&mut self, s: &str) -> u32 {
        self.push(EValue::String(s.into()))
    }
    /// An int list argument.
    pub fn ints(&mut self, v: &[i64]) -> u32 {
        self.push(EValue::IntList(IntList {
            items: Box::new([]),
            vals: v.into(),
            dynamic: false,
        }))
    }
    /// A tensor list argument (of table entries).
    pub fn tensors(&mut self, v: &[u32]) -> u32 {
        self.push(EValue::TensorList(v.into()))
    }

    /// Appends a call of the portable kernel `op`.
    pub fn kernel(&mut self, op: &'static str, args: &[u32]) -> Result<()> {
        let f = kernels()
            .get(op)
            .ok_or_else(|| Error::operator_missing(format!("etch has no kernel {op}")))?;
        self.kernel_fn(op, f, args);
        Ok(())
    }

    /// Appends a call of kernel `f` (named `op` in errors).
    pub fn kernel_fn(&mut self, op: &'static str, f: KernelFn, args: &[u32]) {
        let start = self.args.len() as u32;
        self.args.extend_from_slice(args);
        self.steps.push(Step::Kernel {
            f,
            op,
            args: (start, self.args.len() as u32),
        });
        self.step_nodes.push(self.node);
    }

    /// A node's clamp range as two `Double` arguments `(lo, hi)` (unbounded without one),
    /// for kernels that apply it as they store.
    pub fn clamp_bounds(&mut self, range: Option<(f32, f32)>) -> (u32, u32) {
        let (lo, hi) = range.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
        (self.double(lo as f64), self.double(hi as f64))
    }

    /// Appends an in-place clamp of table entry `value` (skipped for an unbounded range).
    pub fn clamp(&mut self, value: u32, range: Option<(f32, f32)>) {
        if let Some((lo, hi)) = bounded(range) {
            self.steps.push(Step::Clamp { value, lo, hi });
            self.step_nodes.push(self.node);
        }
    }

    /// Appends a byte copy between two table entries of the same size.
    pub fn copy(&mut self, src: u32, dst: u32) -> Result<()> {
        let (EValue::Tensor(a), EValue::Tensor(b)) =
            (&self.values[src as usize], &self.values[dst as usize])
        else {
            return Err(Error::internal("copy between non-tensors"));
        };
        if a.nbytes() != b.nbytes() {
            return Err(Error::invalid_program(format!(
                "copy of {} bytes into {} bytes",
                a.nbytes(),
                b.nbytes()
            )));
        }
        self.steps.push(Step::Copy { src, dst });
        self.step_nodes.push(self.node);
        Ok(())
    }

    /// The finished plan: allocates the arena and points the views at it.
    pub fn finish(mut self) -> Result<Plan> {
        let mut arena = AlignedBuf::zeroed(self.mem.arena_bytes.max(1))?;
        let base = arena.as_mut_ptr();
        for &(v, off) in &self.arena_views {
            if let EValue::Tensor(t) = &mut self.values[v as usize] {
                // SAFETY: the planner placed the value, `nbytes` of it, inside the arena.
                let p = unsafe { base.add(off) };
                let n = t.nbytes();
                t.set_data(p, n);
            }
        }
        self.buffers.push(arena);
        let node_names: Vec<&'static str> = self.graph.nodes.iter().map(|n| n.name).collect();
        let rows = Rows::analyse(&node_names, &self.bindings, &self.values, &self.data_views);
        Ok(Plan {
            values: self.values,
            args: self.args,
            steps: self.steps,
            bindings: self.bindings,
            step_nodes: self.step_nodes,
            node_names,
            rows,
            _buffers: self.buffers,
        })
    }
}

// SAFETY: the raw pointers in the value table point into buffers the plan owns, or into
// the delegate's arguments during a call; a plan is used by one thread at a time.
unsafe impl Send for Plan {}

impl Plan {
    /// Points the external values' views at the call's arguments, checking them.
    fn bind(&mut self, args: &mut KernelContext<'_>) -> Result<()> {
        // A row-dynamic graph takes its leading dims from the first argument (an input).
        if let (Some(r), Some(b)) = (&mut self.rows, self.bindings.first()) {
            r.begin_call(&b.dims, args.tensor(b.arg as usize)?.sizes());
        }
        let row_dynamic = self.rows.is_some();
        for b in &self.bindings {
            let dims = match &mut self.rows {
                Some(r) => r.expected(&b.dims),
                None => &b.dims[..],
            };
            let t = args.tensor(b.arg as usize)?;
            // XNNPACK declares 0-d tensors as [1].
            let scalar = t.dim() == 0 && dims == [1];
            if b.output {
                // The plan's kernels read bound inputs while writing bound outputs.
                crate::check_output_overlap(args, b.arg as usize)?;
            }
            let t = if b.output && !scalar {
                args.resize_out(b.arg as usize, dims)?
            } else {
                t
            };
            if t.dtype() != b.dtype || (t.sizes() != dims && !scalar) {
                let rows = if row_dynamic {
                    "fewer rows than declared, the rest as declared"
                } else {
                    "static shapes, except for graphs of row-wise nodes called with fewer rows"
                };
                return Err(Error::invalid_argument(format!(
                    "XNNPACK delegate argument {} is {} {:?}; the graph expects {} {:?} (etch runs these XNNPACK graphs with {rows})",
                    b.arg,
                    t.dtype(),
                    t.sizes(),
                    b.dtype,
                    dims
                )));
            }
            if !t.device().is_cpu() {
                return Err(Error::not_supported(format!(
                    "XNNPACK delegate argument {} is on {}",
                    b.arg,
                    t.device()
                )));
            }
            for &v in &b.views {
                if let EValue::Tensor(view) = &mut self.values[v as usize] {
                    view.set_data(t.data_ptr(), t.nbytes());
                }
            }
        }
        match &mut self.rows {
            Some(r) => r.apply(&mut self.values),
            None => Ok(()),
        }
    }

    /// Runs the plan on a call's arguments.
    pub fn execute(&mut self, args: &mut KernelContext<'_>) -> Result<()> {
        self.bind(args)?;
        let profiling = etch_runtime::profile::enabled();
        for i in 0..self.steps.len() {
            let t0 = profiling.then(std::time::Instant::now);
            self.run_step(i)
                .map_err(|e| e.context(format!("XNNPACK node {}", self.step_nodes[i])))?;
            if let Some(t0) = t0 {
                self.record(i, t0);
            }
        }
        Ok(())
    }

    /// Records step `i`, which started at `t0`, as an operator of the delegate call, under
    /// its node's name (`etch bench --profile`).
    fn record(&self, i: usize, t0: std::time::Instant) {
        let end = std::time::Instant::now();
        let name = self.node_names[self.step_nodes[i] as usize];
        let shapes = match &self.steps[i] {
            Step::Kernel { args, .. } => {
                let a = &self.args[args.0 as usize..args.1 as usize];
                etch_runtime::profile::call_shapes(&self.values, a)
            }
            _ => None,
        };
        etch_runtime::profile::record_delegate_op(name, shapes, t0, end);
    }

    fn run_step(&mut self, i: usize) -> Result<()> {
        match &self.steps[i] {
            Step::Kernel { f, op, args } => {
                let a = &self.args[args.0 as usize..args.1 as usize];
                // SAFETY: every tensor in the table points into the plan's buffers (sized
                // at init) or into this call's arguments (bound above, sizes checked).
                let mut ctx = unsafe { KernelContext::new(&mut self.values, a, op) };
                f(&mut ctx)
            }
            Step::Clamp { value, lo, hi } => {
                let t = self.values[*value as usize].as_tensor()?;
                clamp_in_place(t, *lo, *hi)
            }
            Step::Copy { src, dst } => {
                let s = self.values[*src as usize].as_tensor()?;
                let d = self.values[*dst as usize].as_tensor()?;
                if s.data_ptr().is_null() || d.data_ptr().is_null() {
                    return Err(Error::invalid_state("copy of an unbound tensor"));
                }
                // SAFETY: both hold `nbytes` bytes (checked at init) in distinct buffers
                // (values live at once never share arena bytes).
                unsafe { std::ptr::copy(s.data_ptr(), d.data_ptr(), s.nbytes()) };
                Ok(())
            }
        }
    }
}

/// A node's output clamp when it bounds anything (`None` for none or `[-inf, inf]`).
pub fn bounded(range: Option<(f32, f32)>) -> Option<(f32, f32)> {
    range.filter(|&(lo, hi)| lo > f32::NEG_INFINITY || hi < f32::INFINITY)
}

fn clamp_in_place(t: &TensorImpl, lo: f32, hi: f32) -> Result<()> {
    let n = t.numel();
    if n == 0 {
        return Ok(());
    }
    if t.data_ptr().is_null() {
        return Err(Error::invalid_state("clamp of an unbound tensor"));
    }
    fn apply<T: Copy>(p: *mut u8, n: usize, f: impl Fn(T) -> T) {
        // SAFETY: the caller passes a tensor's data pointer (aligned, `n` elements).
        let s = unsafe { std::slice::from_raw_parts_mut(p.cast::<T>(), n) };
        for x in s {
            *x = f(*x);
        }
    }
    let c = |x: f32| {
        if x < lo {
            lo
        } else if x > hi {
            hi
        } else {
            x
        }
    };
    match t.dtype() {
        ScalarType::Float => apply::<f32>(t.data_ptr(), n, c),
        ScalarType::Half => apply::<f16>(t.data_ptr(), n, |x| f16::from_f32(c(x.to_f32()))),
        ScalarType::BFloat16 => apply::<bf16>(t.data_ptr(), n, |x| bf16::from_f32(c(x.to_f32()))),
        d => {
            return Err(Error::not_supported(format!(
                "output clamp of a {d} tensor"
            )));
        }
    }
    Ok(())
}
