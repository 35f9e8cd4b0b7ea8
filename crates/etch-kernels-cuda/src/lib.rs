//! CUDA kernels for `ExecutorBackend` delegates on `cuda:N`: elementwise ops with
//! broadcasting and strided copies compiled once per device with NVRTC, and matmuls on
//! cuBLAS, in f32, f16 and bf16. Every kernel runs on the stream of the `CudaAllocator`
//! that owns the memory, so it is ordered with the copies around it.
#![warn(missing_docs)]

use cudarc::cublas::{result as blas, sys as blas_sys};
use cudarc::driver::{CudaFunction, CudaModule, CudaStream, DeviceRepr, LaunchConfig};
use cudarc::nvrtc::{CompileOptions, compile_ptx_with_opts};
use etch_core::{
    Device, DeviceType, Error, KernelContext, KernelRegistry, Result, ScalarType, TensorRef,
};
use etch_devices::cuda::CudaAllocator;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

const SOURCE: &str = include_str!("kernels.cu");
const MAX_DIMS: usize = 8;

/// Registers the CUDA kernels.
pub fn register_cuda(reg: &mut KernelRegistry) -> Result<()> {
    reg.register("aten::add.out", add_out)?;
    reg.register("aten::sub.out", sub_out)?;
    reg.register("aten::mul.out", mul_out)?;
    reg.register("aten::div.out", div_out)?;
    reg.register("aten::relu.out", relu_out)?;
    reg.register("aten::sigmoid.out", sigmoid_out)?;
    reg.register("aten::tanh.out", tanh_out)?;
    reg.register("aten::permute_copy.out", permute_copy_out)?;
    reg.register("aten::view_copy.out", view_copy_out)?;
    reg.register("aten::clone.out", clone_out)?;
    reg.register("dim_order_ops::_clone_dim_order.out", dim_order_copy_out)?;
    reg.register("dim_order_ops::_to_dim_order_copy.out", dim_order_copy_out)?;
    reg.register("aten::mm.out", mm_out)?;
    reg.register("aten::bmm.out", bmm_out)?;
    reg.register("aten::addmm.out", addmm_out)?;
    Ok(())
}

/// The floating-point dtypes of the first kernels.
const FLOATS: &[ScalarType] = &[ScalarType::Float, ScalarType::Half, ScalarType::BFloat16];

/// Every operator with a CUDA kernel and the dtypes its tensors may have (inputs and
/// outputs together): what `etch lower --ops cuda` asks before delegating an instruction.
pub fn op_support() -> Vec<(&'static str, &'static [ScalarType])> {
    cuda_registry()
        .names()
        .into_iter()
        .map(|n| {
            let n: &'static str = Box::leak(n.to_string().into_boxed_str());
            (n, FLOATS)
        })
        .collect()
}

/// A registry holding the CUDA kernels.
pub fn cuda_registry() -> KernelRegistry {
    let mut r = KernelRegistry::new();
    // A fresh registry cannot collide.
    let _ = register_cuda(&mut r);
    r
}

/// Shape and strides passed to the kernels by value (matches `struct Shape` in kernels.cu).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Shape {
    ndim: i32,
    _pad: i32,
    size: [i64; MAX_DIMS],
    sa: [i64; MAX_DIMS],
    sb: [i64; MAX_DIMS],
}

// SAFETY: `Shape` is `#[repr(C)]` plain data laid out as the CUDA struct.
unsafe impl DeviceRepr for Shape {}

/// Per-device compiled module and cuBLAS handle.
struct DeviceState {
    _module: Arc<CudaModule>,
    functions: HashMap<&'static str, CudaFunction>,
    blas: BlasHandle,
}

struct BlasHandle(blas_sys::cublasHandle_t);
// SAFETY: the handle is used only under the state mutex, one thread at a time.
unsafe impl Send for BlasHandle {}

fn states() -> &'static Mutex<HashMap<usize, DeviceState>> {
    static S: OnceLock<Mutex<HashMap<usize, DeviceState>>> = OnceLock::new();
    S.get_or_init(|| Mutex::new(HashMap::new()))
}

fn cuda_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::internal(format!("{what}: {e}"))
}

/// Everything a kernel call needs on one device.
struct Launch<'s> {
    stream: Arc<CudaStream>,
    state: &'s mut DeviceState,
}

fn with_device<R>(
    ctx: &KernelContext<'_>,
    dev: Device,
    f: impl FnOnce(Launch<'_>) -> Result<R>,
) -> Result<R> {
    if dev.kind != DeviceType::Cuda {
        return Err(Error::invalid_argument(format!(
            "{}: a CUDA kernel got a tensor on {dev}",
            ctx.op_name()
        )));
    }
    let alloc = ctx.devices()?.require(DeviceType::Cuda)?;
    let cuda = alloc
        .as_any()
        .downcast_ref::<CudaAllocator>()
        .ok_or_else(|| {
            Error::not_supported(format!(
                "{}: CUDA kernels need the CUDA allocator (not a simulated device)",
                ctx.op_name()
            ))
        })?;
    let ordinal = cuda.ordinal(dev.index)?;
    let stream = cuda.stream(dev.index)?;
    let mut map = states()
        .lock()
        .map_err(|_| Error::internal("CUDA kernel state lock poisoned"))?;
    if let std::collections::hash_map::Entry::Vacant(slot) = map.entry(ordinal) {
        let c = cuda.context(dev.index)?;
        let (major, minor) = c
            .compute_capability()
            .map_err(|e| cuda_err("compute capability", e))?;
        let opts = CompileOptions {
            options: vec![format!("--gpu-architecture=compute_{major}{minor}")],
            ..Default::default()
        };
        let ptx = compile_ptx_with_opts(SOURCE, opts).map_err(|e| cuda_err("NVRTC compile", e))?;
        let module = c.load_module(ptx).map_err(|e| cuda_err("load module", e))?;
        let handle = blas::create_handle().map_err(|e| cuda_err("cuBLAS handle", e))?;
        slot.insert(DeviceState {
            _module: module,
            functions: HashMap::new(),
            blas: BlasHandle(handle),
        });
    }
    let state = map
        .get_mut(&ordinal)
        .ok_or_else(|| Error::internal("CUDA kernel state vanished"))?;
    f(Launch { stream, state })
}

impl Launch<'_> {
    /// The raw handle of kernel `name` (looked up in the module once, then cached).
    fn function(&mut self, name: &'static str) -> Result<cudarc::driver::sys::CUfunction> {
        if let Some(f) = self.state.functions.get(name) {
            return Ok(f.cu_function());
        }
        let f = self
            .state
            ._module
            .load_function(name)
            .map_err(|e| cuda_err(&format!("kernel {name}"), e))?;
        let raw = f.cu_function();
        self.state.functions.insert(name, f);
        Ok(raw)
    }

    /// Launches `f` over `n` elements with argument pointers held on the caller's stack
    /// (no allocation per launch).
    ///
    /// # Safety
    /// `args` must point at values whose types and order match the kernel's signature, and
    /// every device pointer among them must be valid for the launch.
    unsafe fn launch(
        &self,
        f: cudarc::driver::sys::CUfunction,
        n: i64,
        args: &mut [*mut std::ffi::c_void],
    ) -> Result<()> {
        let c = config(n);
        // SAFETY: the caller's contract; the stream belongs to this device's context.
        unsafe {
            cudarc::driver::result::launch_kernel(
                f,
                c.grid_dim,
                c.block_dim,
                c.shared_mem_bytes,
                self.stream.cu_stream(),
                args,
            )
        }
        .map_err(|e| cuda_err("kernel launch", e))
    }
}

fn config(n: i64) -> LaunchConfig {
    let blocks = ((n.max(1) as u64).div_ceil(256)).min(65_535) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The kernel for a dtype from its `[f32, f16, bf16]` names.
fn kernel(op: &str, names: [&'static str; 3], t: ScalarType) -> Result<&'static str> {
    match t {
        ScalarType::Float => Ok(names[0]),
        ScalarType::Half => Ok(names[1]),
        ScalarType::BFloat16 => Ok(names[2]),
        other => Err(Error::not_supported(format!(
            "{op}: the CUDA kernel supports float32, float16 and bfloat16, not {other}"
        ))),
    }
}

/// `[base_f32, base_f16, base_bf16]`.
macro_rules! names {
    ($base:literal) => {
        [
            concat!($base, "_f32"),
            concat!($base, "_f16"),
            concat!($base, "_bf16"),
        ]
    };
}

const COPY: [&str; 3] = names!("copy");

/// A short list of dims on the stack (at most `etch_core::MAX_DIMS`; no heap).
#[derive(Clone, Copy)]
struct Small {
    len: usize,
    v: [usize; etch_core::MAX_DIMS],
}

impl Small {
    fn new() -> Small {
        Small {
            len: 0,
            v: [0; etch_core::MAX_DIMS],
        }
    }
    fn push(&mut self, x: usize) {
        if self.len < self.v.len() {
            self.v[self.len] = x;
            self.len += 1;
        }
    }
}

impl std::fmt::Debug for Small {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

impl std::ops::Deref for Small {
    type Target = [usize];
    fn deref(&self) -> &[usize] {
        &self.v[..self.len]
    }
}

impl std::ops::DerefMut for Small {
    fn deref_mut(&mut self) -> &mut [usize] {
        &mut self.v[..self.len]
    }
}

/// A kernel argument pointer (cuLaunchKernel reads each argument through one).
fn arg<T>(v: &mut T) -> *mut std::ffi::c_void {
    v as *mut T as *mut std::ffi::c_void
}

fn ptr(t: &TensorRef<'_>) -> u64 {
    t.data_ptr() as usize as u64
}

fn check_same(op: &str, ts: &[&TensorRef<'_>]) -> Result<()> {
    let (d, t) = (ts[0].device(), ts[0].dtype());
    for x in ts {
        if x.device() != d {
            return Err(Error::invalid_argument(format!(
                "{op}: tensors on {} and {}",
                d,
                x.device()
            )));
        }
        if x.dtype() != t {
            return Err(Error::not_supported(format!(
                "{op}: mixed dtypes ({t} and {}) are not supported by the CUDA kernel",
                x.dtype()
            )));
        }
    }
    Ok(())
}

/// Broadcast strides of `t` for an output of `out_sizes` (0 on broadcast dims); callers
/// check `out_sizes.len() <= MAX_DIMS` and that `t` broadcasts to it.
fn bcast_strides(t: &TensorRef<'_>, out_sizes: &[usize]) -> [i64; MAX_DIMS] {
    let mut s = [0i64; MAX_DIMS];
    let off = out_sizes.len().saturating_sub(t.dim());
    for (slot, (&size, &stride)) in s
        .iter_mut()
        .skip(off)
        .zip(t.sizes().iter().zip(t.strides()))
    {
        if size != 1 {
            *slot = stride as i64;
        }
    }
    s
}

/// `t`'s strides in logical dim order, or `NotSupported` beyond [`MAX_DIMS`] dims.
fn logical_strides(op: &str, t: &TensorRef<'_>) -> Result<[i64; MAX_DIMS]> {
    check_rank(op, t.dim())?;
    let mut s = [0i64; MAX_DIMS];
    for (slot, &stride) in s.iter_mut().zip(t.strides()) {
        *slot = stride as i64;
    }
    Ok(s)
}

fn check_rank(op: &str, n: usize) -> Result<()> {
    if n > MAX_DIMS {
        return Err(Error::not_supported(format!(
            "{op}: the CUDA kernel handles at most {MAX_DIMS} dims, got {n}"
        )));
    }
    Ok(())
}

fn broadcast(op: &str, a: &[usize], b: &[usize]) -> Result<Small> {
    let n = a.len().max(b.len());
    let mut out = Small::new();
    for _ in 0..n {
        out.push(0);
    }
    for i in 0..n {
        let x = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let y = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = if x == y || y == 1 {
            x
        } else if x == 1 {
            y
        } else {
            return Err(Error::invalid_argument(format!(
                "{op}: shapes {a:?} and {b:?} do not broadcast"
            )));
        };
    }
    Ok(out)
}

fn shape_for(op: &str, sizes: &[usize], sa: [i64; MAX_DIMS], sb: [i64; MAX_DIMS]) -> Result<Shape> {
    if sizes.len() > MAX_DIMS {
        return Err(Error::not_supported(format!(
            "{op}: the CUDA kernel handles at most {MAX_DIMS} dims"
        )));
    }
    let mut s = Shape {
        ndim: sizes.len() as i32,
        sa,
        sb,
        ..Default::default()
    };
    for (d, &v) in sizes.iter().enumerate() {
        s.size[d] = v as i64;
    }
    Ok(s)
}

fn binary(ctx: &mut KernelContext<'_>, names: [&'static str; 3], has_alpha: bool) -> Result<()> {
    let op = ctx.op_name();
    let a = ctx.tensor(0)?;
    let b = ctx.tensor(1)?;
    let alpha = if has_alpha {
        ctx.scalar(2)?.to_f64() as f32
    } else {
        1.0
    };
    let out_i = if has_alpha { 3 } else { 2 };
    let out0 = ctx.tensor(out_i)?;
    check_same(op, &[&a, &b, &out0])?;
    let sizes = broadcast(op, a.sizes(), b.sizes())?;
    check_rank(op, sizes.len())?;
    let out = ctx.resize_out(out_i, &sizes)?;
    if !out.is_default_dim_order() {
        return Err(Error::not_supported(format!(
            "{op}: out must be contiguous"
        )));
    }
    let shape = shape_for(
        op,
        &sizes,
        bcast_strides(&a, &sizes),
        bcast_strides(&b, &sizes),
    )?;
    let n = out.numel() as i64;
    if n == 0 {
        return Ok(());
    }
    let fname = kernel(op, names, out.dtype())?;
    let (mut pa, mut pb, mut po) = (ptr(&a), ptr(&b), ptr(&out));
    let (mut n, mut alpha, mut shape) = (n, alpha, shape);
    with_device(ctx, out.device(), |mut l| {
        let f = l.function(fname)?;
        let mut args = [
            arg(&mut pa),
            arg(&mut pb),
            arg(&mut po),
            arg(&mut n),
            arg(&mut alpha),
            arg(&mut shape),
        ];
        // SAFETY: the pointers are live device memory of this device sized for the shapes
        // (checked by resize and the tensors' capacities); the arguments match
        // `NAME(const T* a, const T* b, T* out, i64 n, float alpha, Shape s)` in kernels.cu.
        unsafe { l.launch(f, n, &mut args) }
    })
}

/// Runs the strided-copy ("unary" family) kernel: out (contiguous in its own dim order) is
/// `name(a)` read through `sa` strides over `sizes` (given in the out's memory order).
fn unary_launch(
    ctx: &KernelContext<'_>,
    names: [&'static str; 3],
    a: &TensorRef<'_>,
    out: &TensorRef<'_>,
    sizes: &[usize],
    sa: [i64; MAX_DIMS],
) -> Result<()> {
    let op = ctx.op_name();
    let mut shape = shape_for(op, sizes, sa, [0; MAX_DIMS])?;
    let mut n = out.numel() as i64;
    if n == 0 {
        return Ok(());
    }
    let (mut pa, mut po) = (ptr(a), ptr(out));
    match kernel(op, names, out.dtype()) {
        Ok(fname) => with_device(ctx, out.device(), |mut l| {
            let f = l.function(fname)?;
            let mut args = [arg(&mut pa), arg(&mut po), arg(&mut n), arg(&mut shape)];
            // SAFETY: as in `binary`; matches `NAME(const T* a, T* out, i64 n, Shape s)`.
            unsafe { l.launch(f, n, &mut args) }
        }),
        // Copies of other element types move bytes.
        Err(e) if names != COPY => Err(e),
        Err(_) => {
            let mut es = out.dtype().element_size() as i32;
            with_device(ctx, out.device(), |mut l| {
                let f = l.function("copy_bytes")?;
                let mut args = [
                    arg(&mut pa),
                    arg(&mut po),
                    arg(&mut n),
                    arg(&mut es),
                    arg(&mut shape),
                ];
                // SAFETY: as in `binary`; matches `copy_bytes(a, out, n, int es, Shape s)`.
                unsafe { l.launch(f, n, &mut args) }
            })
        }
    }
}

fn unary(ctx: &mut KernelContext<'_>, names: [&'static str; 3]) -> Result<()> {
    let op = ctx.op_name();
    let a = ctx.tensor(0)?;
    let out0 = ctx.tensor(1)?;
    check_same(op, &[&a, &out0])?;
    let out = ctx.resize_out(1, a.sizes())?;
    if !out.is_default_dim_order() {
        return Err(Error::not_supported(format!(
            "{op}: out must be contiguous"
        )));
    }
    let sa = logical_strides(op, &a)?;
    unary_launch(ctx, names, &a, &out, a.sizes(), sa)
}

/// Copies `a` into `out` (whose logical shape is `a`'s, possibly permuted by `perm`),
/// honouring both tensors' dim orders.
fn strided_copy(
    ctx: &KernelContext<'_>,
    a: &TensorRef<'_>,
    out: &TensorRef<'_>,
    perm: &[usize],
) -> Result<()> {
    // Logical dim k of out reads logical dim perm[k] of a. Iterate in out's memory order.
    check_rank(ctx.op_name(), out.dim())?;
    let order = out.dim_order();
    let mut sizes = Small::new();
    let mut sa = [0i64; MAX_DIMS];
    for (j, &d) in order.iter().enumerate() {
        let d = d as usize;
        sizes.push(out.sizes()[d]);
        if j < MAX_DIMS {
            sa[j] = a.strides()[perm[d]] as i64;
        }
    }
    unary_launch(ctx, COPY, a, out, &sizes, sa)
}

fn add_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    binary(ctx, names!("add"), true)
}
fn sub_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    binary(ctx, names!("sub"), true)
}
fn mul_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    binary(ctx, names!("mul"), false)
}
fn div_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    binary(ctx, names!("div"), false)
}
fn relu_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    unary(ctx, names!("relu"))
}
fn sigmoid_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    unary(ctx, names!("sigmoid"))
}
fn tanh_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    unary(ctx, names!("tanh"))
}

fn permute_copy_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let a = ctx.tensor(0)?;
    let dims = ctx.dims(1)?;
    let n = a.dim();
    if dims.len() != n {
        return Err(Error::invalid_argument(format!(
            "{op}: {} dims for a {n}-d tensor",
            dims.len()
        )));
    }
    let mut perm = Small::new();
    let mut seen = [false; MAX_DIMS * 2];
    for &d in dims.iter() {
        let d = etch_core::wrap_dim(d, n)?;
        if seen[d] {
            return Err(Error::invalid_argument(format!("{op}: repeated dim {d}")));
        }
        seen[d] = true;
        perm.push(d);
    }
    let mut sizes = Small::new();
    for &d in perm.iter() {
        sizes.push(a.sizes()[d]);
    }
    let out0 = ctx.tensor(2)?;
    check_same(op, &[&a, &out0])?;
    let out = ctx.resize_out(2, &sizes)?;
    strided_copy(ctx, &a, &out, &perm)
}

fn view_copy_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let a = ctx.tensor(0)?;
    let req = ctx.dims(1)?;
    let numel = a.numel();
    let mut sizes = Small::new();
    let mut infer = None;
    let mut known = 1usize;
    for (i, &s) in req.iter().enumerate() {
        if s == -1 {
            if infer.replace(i).is_some() {
                return Err(Error::invalid_argument(format!("{op}: more than one -1")));
            }
            sizes.push(0);
        } else if s < 0 {
            return Err(Error::invalid_argument(format!("{op}: invalid size {s}")));
        } else {
            known = known.saturating_mul(s as usize);
            sizes.push(s as usize);
        }
    }
    if let Some(i) = infer {
        if known == 0 || numel % known != 0 {
            return Err(Error::invalid_argument(format!(
                "{op}: cannot view {numel} elements as {:?}",
                &*req
            )));
        }
        sizes[i] = numel / known;
    }
    if sizes.iter().product::<usize>() != numel {
        return Err(Error::invalid_argument(format!(
            "{op}: cannot view {numel} elements as {sizes:?}"
        )));
    }
    let out0 = ctx.tensor(2)?;
    check_same(op, &[&a, &out0])?;
    let out = ctx.resize_out(2, &sizes)?;
    // Read a in its logical order (through its strides), write out contiguously.
    let sa = logical_strides(op, &a)?;
    unary_launch(ctx, COPY, &a, &out, a.sizes(), sa)
}

fn clone_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    // clone.out(self, *, memory_format=None, out)
    copy_into(ctx, 2)
}

fn dim_order_copy_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    // (self, *, non_blocking=False, dim_order=None, out)
    copy_into(ctx, 3)
}

fn copy_into(ctx: &mut KernelContext<'_>, out_i: usize) -> Result<()> {
    let op = ctx.op_name();
    let a = ctx.tensor(0)?;
    let out0 = ctx.tensor(out_i)?;
    check_same(op, &[&a, &out0])?;
    let out = ctx.resize_out(out_i, a.sizes())?;
    let mut perm = Small::new();
    for d in 0..a.dim() {
        perm.push(d);
    }
    strided_copy(ctx, &a, &out, &perm)
}

fn data_type(op: &str, t: ScalarType) -> Result<blas_sys::cudaDataType> {
    Ok(match t {
        ScalarType::Float => blas_sys::cudaDataType::CUDA_R_32F,
        ScalarType::Half => blas_sys::cudaDataType::CUDA_R_16F,
        ScalarType::BFloat16 => blas_sys::cudaDataType::CUDA_R_16BF,
        other => {
            return Err(Error::not_supported(format!(
                "{op}: cuBLAS matmul supports float32, float16 and bfloat16, not {other}"
            )));
        }
    })
}

/// Row-major `out[b] = alpha * a[b] @ b[b] + beta * out[b]` for `batch` matrices through
/// cuBLAS (column-major: out^T = b^T a^T).
#[allow(clippy::too_many_arguments)]
fn gemm(
    ctx: &KernelContext<'_>,
    a: &TensorRef<'_>,
    b: &TensorRef<'_>,
    out: &TensorRef<'_>,
    (batch, m, k, n): (usize, usize, usize, usize),
    alpha: f32,
    beta: f32,
) -> Result<()> {
    let op = ctx.op_name();
    for t in [a, b, out] {
        if !t.is_default_dim_order() {
            return Err(Error::not_supported(format!(
                "{op}: the CUDA matmul needs contiguous tensors"
            )));
        }
    }
    if batch == 0 || m == 0 || n == 0 {
        return Ok(());
    }
    let dt = data_type(op, out.dtype())?;
    let to_i32 = |v: usize| {
        i32::try_from(v).map_err(|_| Error::not_supported(format!("{op}: dimension {v} too large")))
    };
    let (mi, ki, ni, bi) = (to_i32(m)?, to_i32(k)?, to_i32(n)?, to_i32(batch)?);
    let (pa, pb, po) = (a.data_ptr(), b.data_ptr(), out.data_ptr());
    with_device(ctx, out.device(), |l| {
        let h = l.state.blas.0;
        // SAFETY: the handle is used under the state lock; the stream belongs to this
        // device; pointers are live device memory of the checked shapes; alpha/beta are
        // host f32 values (cuBLAS's default pointer mode) matching the f32 compute type.
        unsafe {
            blas::set_stream(h, l.stream.cu_stream() as _)
                .map_err(|e| cuda_err("cublasSetStream", e))?;
            blas::gemm_strided_batched_ex(
                h,
                blas_sys::cublasOperation_t::CUBLAS_OP_N,
                blas_sys::cublasOperation_t::CUBLAS_OP_N,
                ni,
                mi,
                ki,
                &alpha as *const f32 as *const _,
                pb as *const _,
                dt,
                ni,
                (k * n) as i64,
                pa as *const _,
                dt,
                ki,
                (m * k) as i64,
                &beta as *const f32 as *const _,
                po as *mut _,
                dt,
                ni,
                (m * n) as i64,
                bi,
                blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
            .map_err(|e| cuda_err(op, e))
        }
    })
}

fn mm_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let a = ctx.tensor(0)?;
    let b = ctx.tensor(1)?;
    let out0 = ctx.tensor(2)?;
    check_same(op, &[&a, &b, &out0])?;
    if a.dim() != 2 || b.dim() != 2 || a.sizes()[1] != b.sizes()[0] {
        return Err(Error::invalid_argument(format!(
            "{op}: cannot multiply {:?} by {:?}",
            a.sizes(),
            b.sizes()
        )));
    }
    let (m, k, n) = (a.sizes()[0], a.sizes()[1], b.sizes()[1]);
    let out = ctx.resize_out(2, &[m, n])?;
    gemm(ctx, &a, &b, &out, (1, m, k, n), 1.0, 0.0)
}

fn bmm_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    let op = ctx.op_name();
    let a = ctx.tensor(0)?;
    let b = ctx.tensor(1)?;
    let out0 = ctx.tensor(2)?;
    check_same(op, &[&a, &b, &out0])?;
    if a.dim() != 3 || b.dim() != 3 || a.sizes()[0] != b.sizes()[0] || a.sizes()[2] != b.sizes()[1]
    {
        return Err(Error::invalid_argument(format!(
            "{op}: cannot batch-multiply {:?} by {:?}",
            a.sizes(),
            b.sizes()
        )));
    }
    let (bs, m, k, n) = (a.sizes()[0], a.sizes()[1], a.sizes()[2], b.sizes()[2]);
    let out = ctx.resize_out(2, &[bs, m, n])?;
    gemm(ctx, &a, &b, &out, (bs, m, k, n), 1.0, 0.0)
}

fn addmm_out(ctx: &mut KernelContext<'_>) -> Result<()> {
    // addmm.out(self, mat1, mat2, *, beta=1, alpha=1, out)
    let op = ctx.op_name();
    let bias = ctx.tensor(0)?;
    let a = ctx.tensor(1)?;
    let b = ctx.tensor(2)?;
    let beta = ctx.scalar(3)?.to_f64() as f32;
    let alpha = ctx.scalar(4)?.to_f64() as f32;
    let out0 = ctx.tensor(5)?;
    check_same(op, &[&bias, &a, &b, &out0])?;
    if a.dim() != 2 || b.dim() != 2 || a.sizes()[1] != b.sizes()[0] {
        return Err(Error::invalid_argument(format!(
            "{op}: cannot multiply {:?} by {:?}",
            a.sizes(),
            b.sizes()
        )));
    }
    let (m, k, n) = (a.sizes()[0], a.sizes()[1], b.sizes()[1]);
    let out = ctx.resize_out(5, &[m, n])?;
    if beta != 0.0 {
        // out = broadcast(bias), then out = alpha*a@b + beta*out.
        let sizes = [m, n];
        if bias.dim() > 2 || *broadcast(op, bias.sizes(), &sizes)? != sizes[..] {
            return Err(Error::invalid_argument(format!(
                "{op}: bias {:?} does not broadcast to {sizes:?}",
                bias.sizes()
            )));
        }
        unary_launch(ctx, COPY, &bias, &out, &sizes, bcast_strides(&bias, &sizes))?;
    }
    gemm(ctx, &a, &b, &out, (1, m, k, n), alpha, beta)
}
