//! The kernel ABI: how operators are registered and how a kernel reads its arguments.
//!
//! A kernel is a plain function `fn(&mut KernelContext) -> Result<()>`. The runtime resolves
//! every operator of a method to such a pointer once, at load time; executing an
//! instruction is an indirect call with no name lookup. Arguments follow the operator's
//! schema order (inputs first, then `out` arguments), as ExecuTorch serializes them.

use crate::tensor::MAX_DIMS;
use crate::value::{EValue, Tag, type_error};
use crate::{DeviceRegistry, Error, Result, TensorImpl, TensorRef};
use std::collections::HashMap;

/// A kernel: reads its arguments from the context, writes its `out` tensors.
pub type KernelFn = fn(&mut KernelContext<'_>) -> Result<()>;

/// What a kernel prepared for one call site when its method loaded (weights packed once,
/// say), handed back to it on every call ([`KernelContext::prepared`]).
pub type Prepared = std::sync::Arc<dyn std::any::Any + Send + Sync>;

/// A kernel's load-time hook for one call site ([`KernelRegistry::register_prepare`]): it
/// sees the call's arguments as they are at load, the constants with their data
/// ([`KernelContext::is_constant`] says which are), and returns state for the call, or
/// `None` when it has nothing to prepare. It must not write any argument. The kernel must
/// also run without the state (a runtime may load without preparing), and give the same
/// values with it up to the order of its sums, which must not depend on the thread count.
pub type PrepareFn = fn(&KernelContext<'_>) -> Result<Option<Prepared>>;

/// One call of a chain offered to a [`FuseFn`]: its operator and where its arguments lie
/// in the chain's context (call `k`'s argument `j` is the context's argument
/// `args.start + j`).
#[derive(Debug, Clone)]
pub struct ChainCall<'a> {
    /// The operator's full name (`"aten::hardtanh.out"`).
    pub op: &'a str,
    /// Its arguments' indices in the chain's context.
    pub args: std::ops::Range<usize>,
}

/// What a [`FuseFn`] made of the first `calls` calls of a chain.
pub struct Fused {
    /// How many calls, from the first, the fused kernel replaces (at least 2).
    pub calls: usize,
    /// The kernel run in their place, where the last of them ran, on a context over the
    /// same concatenated arguments as the [`FuseFn`]'s (with [`Fused::prepared`]).
    pub kernel: KernelFn,
    /// Its name in profiles and errors (`"etch::fused_conv"`).
    pub name: &'static str,
    /// Its state, handed to it on every call ([`KernelContext::prepared`]).
    pub prepared: Prepared,
    /// Whether the kernel takes a scratch tensor: where the last call's outputs share
    /// memory with what the prefix reads, the runtime may then append one more argument, a
    /// tensor of at least the first output's bytes that the kernel computes into before it
    /// writes its outputs (an intermediate the last call read, which nothing else uses
    /// there). Without one the prefix is not fused in that case.
    pub takes_scratch: bool,
}

/// A load-time fusion of kernel calls ([`KernelRegistry::register_fusion`]), asked about
/// each chain of calls that starts with the operator it is registered for. The runtime
/// offers calls `c0, c1, ...` (at least two) that run one right after the other, where every
/// value that a call other than the last writes is a plain intermediate (planned memory, not
/// a method input or output, no view of it) that only later calls of the chain read; the
/// context holds their arguments one call after the other ([`ChainCall::args`]) and says
/// which values are constants. The hook checks the data flow it expects (which output feeds
/// which argument) and returns the fused kernel for a prefix of the chain, or `None`; it
/// must not write any argument. A prefix whose dropped calls' results a call after it reads
/// is not fused: the runtime then asks again with a shorter chain.
///
/// The fused kernel runs in place of the last call of the prefix and must write what that
/// call writes; what the earlier calls write is then never written. The runtime fuses only
/// where the last call's outputs share no memory with the tensors the prefix reads from
/// outside it. The values may differ from the unfused calls' in the last bits (weights
/// folded, another order of sums; a runtime may load without fusing), but must not depend
/// on the thread count.
pub type FuseFn = fn(&KernelContext<'_>, &[ChainCall<'_>]) -> Result<Option<Fused>>;

/// Which tensor arguments of one call may be laid out channels-last (dim order `0, 2, 3,
/// 1`) by the load-time layout choice ([`KernelRegistry::register_layout`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LayoutRule {
    /// Arguments that share one layout: all channels-first or all channels-last.
    pub tied: Vec<usize>,
    /// Arguments the kernel reads in either layout: channels-last only with the tied ones,
    /// channels-first (contiguous) whatever they are.
    pub adapts: Vec<usize>,
    /// What running the tied arguments channels-last gains, in any unit the hooks agree on
    /// (a convolution's multiply-adds, say; negative where it loses): values tied together
    /// switch when their calls' gains sum above zero. Most calls only follow (zero).
    pub gains: i64,
}

/// A kernel's layout hook ([`KernelRegistry::register_layout`]): for one call site, with
/// its arguments as they are at load (every tensor in its default dim order), the
/// arguments that the kernel runs channels-last as well, or `None` when it runs this call
/// channels-first only. Tensor arguments the rule does not name keep their layout, except
/// `[n, c, 1, 1]` and other tensors whose layouts are the same bytes.
pub type LayoutFn = fn(&KernelContext<'_>) -> Option<LayoutRule>;

/// A scalar argument (PyTorch's `Scalar`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    /// An integer.
    Int(i64),
    /// A floating-point value.
    Double(f64),
    /// A bool.
    Bool(bool),
}

impl Scalar {
    /// As `f64`.
    pub fn to_f64(self) -> f64 {
        match self {
            Scalar::Int(v) => v as f64,
            Scalar::Double(v) => v,
            Scalar::Bool(b) => b as i64 as f64,
        }
    }
    /// As `i64` (floats truncate).
    pub fn to_i64(self) -> i64 {
        match self {
            Scalar::Int(v) => v,
            Scalar::Double(v) => v as i64,
            Scalar::Bool(b) => b as i64,
        }
    }
    /// True for a floating-point scalar.
    pub fn is_floating(self) -> bool {
        matches!(self, Scalar::Double(_))
    }
}

/// A short list of dimensions, copied out of an argument (no heap).
#[derive(Clone, Copy)]
pub struct Dims {
    len: usize,
    vals: [i64; MAX_DIMS],
}

impl Dims {
    /// Makes dims from a slice (at most [`MAX_DIMS`] entries).
    pub fn from_slice(s: &[i64]) -> Result<Self> {
        if s.len() > MAX_DIMS {
            return Err(Error::invalid_argument(format!(
                "list of {} dims; at most {MAX_DIMS} are supported",
                s.len()
            )));
        }
        let mut vals = [0; MAX_DIMS];
        vals[..s.len()].copy_from_slice(s);
        Ok(Dims { len: s.len(), vals })
    }
}

impl std::ops::Deref for Dims {
    type Target = [i64];
    fn deref(&self) -> &[i64] {
        &self.vals[..self.len]
    }
}

impl std::fmt::Debug for Dims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.vals[..self.len], f)
    }
}

/// What a kernel sees while it runs: its arguments, as indices into the method's values.
pub struct KernelContext<'a> {
    values: &'a mut [EValue],
    args: &'a [u32],
    op: &'a str,
    devices: Option<&'a DeviceRegistry>,
    host_access: bool,
    device_ctx: Option<&'a (dyn std::any::Any + Send + Sync)>,
    /// Which values are constants (load-time preparation only).
    constant: Option<&'a [bool]>,
    /// Which values nothing reads (load-time preparation only).
    unread: Option<&'a [bool]>,
    prepared: Option<&'a (dyn std::any::Any + Send + Sync)>,
}

impl<'a> KernelContext<'a> {
    /// Makes a context. The runtime checks at load time that every argument index is in
    /// range for `values`; this constructor checks it again cheaply in debug builds only.
    ///
    /// # Safety
    /// Every tensor in `values` must satisfy [`TensorRef::new`]'s contract for `'a`.
    pub unsafe fn new(values: &'a mut [EValue], args: &'a [u32], op: &'a str) -> Self {
        debug_assert!(args.iter().all(|&a| (a as usize) < values.len()));
        KernelContext {
            values,
            args,
            op,
            devices: None,
            host_access: false,
            device_ctx: None,
            constant: None,
            unread: None,
            prepared: None,
        }
    }

    /// Says which of the method's values are constants (for a [`PrepareFn`] at load).
    pub fn with_constants(mut self, constant: &'a [bool]) -> Self {
        self.constant = Some(constant);
        self
    }

    /// Whether argument `i` is a constant of the method (its data fixed for the method's
    /// life); false when unknown (at run time, or out of range).
    pub fn is_constant(&self, i: usize) -> bool {
        let c = self.constant.zip(self.args.get(i));
        c.is_some_and(|(c, &a)| c.get(a as usize).copied().unwrap_or(false))
    }

    /// Says which of the method's values nothing reads (for a [`PrepareFn`] at load).
    pub fn with_unread(mut self, unread: &'a [bool]) -> Self {
        self.unread = Some(unread);
        self
    }

    /// Whether argument `i` is a value that nothing reads: a plain intermediate (planned
    /// memory, no initial state, not a method input or output) that no other call mentions
    /// and no view of memory sees, so a kernel may leave it unwritten (the indices of a
    /// max pooling whose values alone are used, say). False when unknown (at run time, or
    /// out of range).
    pub fn is_unread(&self, i: usize) -> bool {
        let u = self.unread.zip(self.args.get(i));
        u.is_some_and(|(u, &a)| u.get(a as usize).copied().unwrap_or(false))
    }

    /// Gives the kernel the state its [`PrepareFn`] made for this call site, if any.
    pub fn with_prepared(mut self, p: Option<&'a (dyn std::any::Any + Send + Sync)>) -> Self {
        self.prepared = p;
        self
    }

    /// The state prepared for this call site at load, if there is one of type `T`.
    pub fn prepared<T: std::any::Any>(&self) -> Option<&'a T> {
        self.prepared.and_then(|p| p.downcast_ref::<T>())
    }

    /// Gives the kernel its delegate's device context (what a device's kernel crate made
    /// for the delegate at load: its stream, library handles), if any.
    pub fn with_device_context(mut self, c: Option<&'a (dyn std::any::Any + Send + Sync)>) -> Self {
        self.device_ctx = c;
        self
    }

    /// The delegate's device context, if the call has one of type `T`.
    pub fn device_context<T: std::any::Any>(&self) -> Option<&'a T> {
        self.device_ctx.and_then(|c| c.downcast_ref::<T>())
    }

    /// Gives the kernel the device allocators (for copy ops). `host_access` says that the
    /// method's device memory is host memory (the simulated device), so CPU kernels may
    /// touch device tensors.
    pub fn with_devices(mut self, devices: &'a DeviceRegistry, host_access: bool) -> Self {
        self.devices = Some(devices);
        self.host_access = host_access;
        self
    }

    /// The device allocators, or `NotFound` when the runtime provided none.
    pub fn devices(&self) -> Result<&'a DeviceRegistry> {
        self.devices.ok_or_else(|| {
            Error::not_found(format!("{}: no device allocators are available", self.op))
        })
    }

    /// The operator's name, for error messages (borrowed for the context's lifetime, so
    /// holding it does not borrow the context).
    pub fn op_name(&self) -> &'a str {
        self.op
    }
    /// The index of argument `i`'s value in the method (to see which arguments of the
    /// calls of a [`FuseFn`]'s chain are the same value), if there is an argument `i`.
    pub fn value_index(&self, i: usize) -> Option<u32> {
        self.args.get(i).copied()
    }
    /// Number of arguments.
    pub fn num_args(&self) -> usize {
        self.args.len()
    }

    fn index(&self, i: usize) -> Result<usize> {
        self.args.get(i).map(|&a| a as usize).ok_or_else(|| {
            Error::invalid_program(format!(
                "{}: argument {i} missing ({} given)",
                self.op,
                self.args.len()
            ))
        })
    }

    /// The value of argument `i`.
    pub fn value(&self, i: usize) -> Result<&EValue> {
        let idx = self.index(i)?;
        self.values
            .get(idx)
            .ok_or_else(|| Error::invalid_program(format!("{}: value {idx} out of range", self.op)))
    }

    fn value_mut(&mut self, i: usize) -> Result<&mut EValue> {
        let idx = self.index(i)?;
        let op = self.op;
        self.values
            .get_mut(idx)
            .ok_or_else(|| Error::invalid_program(format!("{op}: value {idx} out of range")))
    }

    fn arg_err(&self, i: usize, e: Error) -> Error {
        Error::new(
            e.code(),
            format!("{}: argument {i}: {}", self.op, e.message()),
        )
    }

    fn tensor_at(&self, idx: usize) -> Result<TensorRef<'a>> {
        match self.values.get(idx) {
            // SAFETY: the context's contract (see `new`) makes every tensor valid for `'a`.
            Some(EValue::Tensor(t)) => Ok(unsafe {
                if self.host_access {
                    TensorRef::new_host_accessible(*t)
                } else {
                    TensorRef::new(*t)
                }
            }),
            Some(v) => Err(type_error(Tag::Tensor, v.tag())),
            None => Err(Error::invalid_program(format!("value {idx} out of range"))),
        }
    }

    /// Argument `i` as a tensor.
    pub fn tensor(&self, i: usize) -> Result<TensorRef<'a>> {
        let idx = self.index(i)?;
        self.tensor_at(idx).map_err(|e| self.arg_err(i, e))
    }

    /// Argument `i` as an optional tensor (`None` when the value is None).
    pub fn opt_tensor(&self, i: usize) -> Result<Option<TensorRef<'a>>> {
        match self.value(i)? {
            EValue::None => Ok(None),
            _ => self.tensor(i).map(Some),
        }
    }

    /// Argument `i` as an integer (a Bool reads as 0/1).
    pub fn int(&self, i: usize) -> Result<i64> {
        match self.value(i)? {
            EValue::Int(v) => Ok(*v),
            EValue::Bool(b) => Ok(*b as i64),
            v => Err(self.arg_err(i, type_error(Tag::Int, v.tag()))),
        }
    }

    /// Argument `i` as an optional integer.
    pub fn opt_int(&self, i: usize) -> Result<Option<i64>> {
        match self.value(i)? {
            EValue::None => Ok(None),
            _ => self.int(i).map(Some),
        }
    }

    /// Argument `i` as a double (an Int converts).
    pub fn double(&self, i: usize) -> Result<f64> {
        match self.value(i)? {
            EValue::Double(v) => Ok(*v),
            EValue::Int(v) => Ok(*v as f64),
            v => Err(self.arg_err(i, type_error(Tag::Double, v.tag()))),
        }
    }

    /// Argument `i` as an optional double.
    pub fn opt_double(&self, i: usize) -> Result<Option<f64>> {
        match self.value(i)? {
            EValue::None => Ok(None),
            _ => self.double(i).map(Some),
        }
    }

    /// Argument `i` as a bool.
    pub fn bool(&self, i: usize) -> Result<bool> {
        match self.value(i)? {
            EValue::Bool(v) => Ok(*v),
            v => Err(self.arg_err(i, type_error(Tag::Bool, v.tag()))),
        }
    }

    /// Argument `i` as an optional bool.
    pub fn opt_bool(&self, i: usize) -> Result<Option<bool>> {
        match self.value(i)? {
            EValue::None => Ok(None),
            _ => self.bool(i).map(Some),
        }
    }

    /// Argument `i` as a Scalar (Int, Double or Bool).
    pub fn scalar(&self, i: usize) -> Result<Scalar> {
        match self.value(i)? {
            EValue::Int(v) => Ok(Scalar::Int(*v)),
            EValue::Double(v) => Ok(Scalar::Double(*v)),
            EValue::Bool(v) => Ok(Scalar::Bool(*v)),
            v => Err(self.arg_err(i, type_error(Tag::Double, v.tag()))),
        }
    }

    /// Argument `i` as an optional Scalar.
    pub fn opt_scalar(&self, i: usize) -> Result<Option<Scalar>> {
        match self.value(i)? {
            EValue::None => Ok(None),
            _ => self.scalar(i).map(Some),
        }
    }

    /// Argument `i` as a string.
    pub fn string(&self, i: usize) -> Result<&str> {
        match self.value(i)? {
            EValue::String(s) => Ok(s),
            v => Err(self.arg_err(i, type_error(Tag::String, v.tag()))),
        }
    }

    /// Argument `i` as a list of integers.
    pub fn int_list(&self, i: usize) -> Result<&[i64]> {
        match self.value(i)? {
            EValue::IntList(l) => Ok(&l.vals),
            v => Err(self.arg_err(i, type_error(Tag::IntList, v.tag()))),
        }
    }

    /// Argument `i` as an optional list of integers.
    pub fn opt_int_list(&self, i: usize) -> Result<Option<&[i64]>> {
        match self.value(i)? {
            EValue::None => Ok(None),
            _ => self.int_list(i).map(Some),
        }
    }

    /// Argument `i` as a short list of dims, copied (no heap, no borrow kept).
    pub fn dims(&self, i: usize) -> Result<Dims> {
        Dims::from_slice(self.int_list(i)?).map_err(|e| self.arg_err(i, e))
    }

    /// Argument `i` as a list of doubles.
    pub fn double_list(&self, i: usize) -> Result<&[f64]> {
        match self.value(i)? {
            EValue::DoubleList(l) => Ok(l),
            v => Err(self.arg_err(i, type_error(Tag::DoubleList, v.tag()))),
        }
    }

    /// Argument `i` as a list of bools.
    pub fn bool_list(&self, i: usize) -> Result<&[bool]> {
        match self.value(i)? {
            EValue::BoolList(l) => Ok(l),
            v => Err(self.arg_err(i, type_error(Tag::BoolList, v.tag()))),
        }
    }

    /// Length of the tensor list (or optional tensor list) in argument `i`.
    pub fn tensor_list_len(&self, i: usize) -> Result<usize> {
        match self.value(i)? {
            EValue::TensorList(l) => Ok(l.len()),
            EValue::OptionalTensorList(l) => Ok(l.len()),
            v => Err(self.arg_err(i, type_error(Tag::TensorList, v.tag()))),
        }
    }

    /// Item `j` of the tensor list in argument `i`.
    pub fn tensor_list_item(&self, i: usize, j: usize) -> Result<TensorRef<'a>> {
        match self.opt_tensor_list_item(i, j)? {
            Some(t) => Ok(t),
            None => Err(self.arg_err(i, Error::invalid_type(format!("list item {j} is None")))),
        }
    }

    /// Item `j` of the (optional) tensor list in argument `i`.
    pub fn opt_tensor_list_item(&self, i: usize, j: usize) -> Result<Option<TensorRef<'a>>> {
        let idx = match self.value(i)? {
            EValue::TensorList(l) => l.get(j).map(|&x| Some(x)),
            EValue::OptionalTensorList(l) => l.get(j).copied(),
            v => return Err(self.arg_err(i, type_error(Tag::TensorList, v.tag()))),
        };
        match idx {
            None => Err(self.arg_err(i, Error::invalid_argument(format!("no list item {j}")))),
            Some(None) => Ok(None),
            Some(Some(x)) => self
                .tensor_at(x as usize)
                .map(Some)
                .map_err(|e| self.arg_err(i, e)),
        }
    }

    /// Resizes item `j` of the tensor list in argument `i` (an out list, such as
    /// `split_with_sizes_copy.out`'s, whose shapes follow a dynamic input) and returns it.
    pub fn resize_list_item(
        &mut self,
        i: usize,
        j: usize,
        sizes: &[usize],
    ) -> Result<TensorRef<'a>> {
        let idx = match self.value(i)? {
            EValue::TensorList(l) => l.get(j).copied(),
            v => return Err(self.arg_err(i, type_error(Tag::TensorList, v.tag()))),
        };
        let Some(x) = idx else {
            return Err(self.arg_err(i, Error::invalid_argument(format!("no list item {j}"))));
        };
        self.resize_value(x as usize, sizes, || format!("out list {i} item {j}"))
    }

    /// Resizes the `out` tensor in argument `i` (ExecuTorch's `resize_tensor`) and returns it.
    pub fn resize_out(&mut self, i: usize, sizes: &[usize]) -> Result<TensorRef<'a>> {
        let idx = self.index(i)?;
        self.resize_value(idx, sizes, || format!("out argument {i}"))
    }

    /// Resizes the tensor at value index `idx` (`what` names it in errors; only formatted
    /// on an error, so that execution allocates nothing).
    fn resize_value(
        &mut self,
        idx: usize,
        sizes: &[usize],
        what: impl Fn() -> String,
    ) -> Result<TensorRef<'a>> {
        let (op, host_access) = (self.op, self.host_access);
        let t = self
            .values
            .get_mut(idx)
            .ok_or_else(|| Error::invalid_program(format!("{op}: value {idx} out of range")))?
            .as_tensor_mut()
            .map_err(|e| Error::new(e.code(), format!("{op}: {}: {}", what(), e.message())))?;
        t.resize(sizes)
            .map_err(|e| Error::new(e.code(), format!("{op}: {}: {}", what(), e.message())))?;
        // SAFETY: resizing keeps the bytes within the tensor's capacity; see `new` and
        // `with_devices` for host access.
        Ok(unsafe {
            if host_access {
                TensorRef::new_host_accessible(*t)
            } else {
                TensorRef::new(*t)
            }
        })
    }

    /// Makes the tensor in argument `out` a view of `src`'s memory with new sizes (for
    /// view ops such as `et_view`). The element count must fit `src`'s capacity.
    pub fn alias_out(&mut self, out: usize, src: &TensorImpl, sizes: &[usize]) -> Result<()> {
        let op = self.op;
        let v = self.value_mut(out)?;
        let t = v.as_tensor_mut()?;
        if t.dtype() != src.dtype() {
            return Err(Error::invalid_argument(format!(
                "{op}: view of a {} tensor as {}",
                src.dtype(),
                t.dtype()
            )));
        }
        let mut n = *t;
        n.set_data(src.data_ptr(), src.capacity());
        let new = TensorImpl::new(
            n.dtype(),
            sizes,
            None,
            n.dynamism(),
            src.device(),
            src.data_ptr(),
            src.capacity(),
        )
        .map_err(|e| Error::invalid_argument(format!("{op}: {}", e.message())))?;
        *t = new;
        Ok(())
    }

    /// Writes an integer result (prim ops such as `sym_size`).
    pub fn set_int(&mut self, i: usize, v: i64) -> Result<()> {
        *self.value_mut(i)? = EValue::Int(v);
        Ok(())
    }
    /// Writes a double result.
    pub fn set_double(&mut self, i: usize, v: f64) -> Result<()> {
        *self.value_mut(i)? = EValue::Double(v);
        Ok(())
    }
    /// Writes a bool result.
    pub fn set_bool(&mut self, i: usize, v: bool) -> Result<()> {
        *self.value_mut(i)? = EValue::Bool(v);
        Ok(())
    }
}

/// Kernels by operator name (`"aten::add.out"`; `name` alone when the overload is empty).
#[derive(Clone, Default)]
pub struct KernelRegistry {
    kernels: HashMap<String, KernelFn>,
    prepares: HashMap<String, PrepareFn>,
    fusions: HashMap<String, FuseFn>,
    layouts: HashMap<String, LayoutFn>,
}

impl KernelRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }
    /// Registers a kernel; a second registration of the same name is an error.
    pub fn register(&mut self, name: &str, f: KernelFn) -> Result<()> {
        if self.kernels.contains_key(name) {
            return Err(Error::invalid_argument(format!(
                "a kernel for '{name}' is already registered"
            )));
        }
        self.kernels.insert(name.to_string(), f);
        Ok(())
    }
    /// Registers a kernel, replacing any earlier one.
    pub fn register_or_replace(&mut self, name: &str, f: KernelFn) {
        self.kernels.insert(name.to_string(), f);
    }
    /// Registers the load-time hook of the kernel registered as `name` (replacing any
    /// earlier one): the runtime calls it once per call site when a method loads.
    pub fn register_prepare(&mut self, name: &str, f: PrepareFn) {
        self.prepares.insert(name.to_string(), f);
    }
    /// The load-time hook registered for `name`, if any.
    pub fn prepare_fn(&self, name: &str) -> Option<PrepareFn> {
        self.prepares.get(name).copied()
    }
    /// Registers a load-time fusion of the chains of calls that start with `head` (replacing
    /// any earlier one; see [`FuseFn`]).
    pub fn register_fusion(&mut self, head: &str, f: FuseFn) {
        self.fusions.insert(head.to_string(), f);
    }
    /// The fusion registered for chains starting with `head`, if any.
    pub fn fusion_fn(&self, head: &str) -> Option<FuseFn> {
        self.fusions.get(head).copied()
    }
    /// Registers the layout hook of the kernel registered as `name` (replacing any earlier
    /// one; see [`LayoutFn`]).
    pub fn register_layout(&mut self, name: &str, f: LayoutFn) {
        self.layouts.insert(name.to_string(), f);
    }
    /// The layout hook registered for `name`, if any.
    pub fn layout_fn(&self, name: &str) -> Option<LayoutFn> {
        self.layouts.get(name).copied()
    }
    /// Looks a kernel up by full name.
    pub fn get(&self, name: &str) -> Option<KernelFn> {
        self.kernels.get(name).copied()
    }
    /// True if a kernel is registered under `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.kernels.contains_key(name)
    }
    /// Registered names, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.kernels.keys().map(|s| s.as_str()).collect();
        v.sort_unstable();
        v
    }
    /// Number of kernels.
    pub fn len(&self) -> usize {
        self.kernels.len()
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.kernels.is_empty()
    }
}

/// The full name of an operator: `name.overload`, or `name` when the overload is empty.
pub fn operator_name(name: &str, overload: &str) -> String {
    if overload.is_empty() {
        name.to_string()
    } else {
        format!("{name}.{overload}")
    }
}
