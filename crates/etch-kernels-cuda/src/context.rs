//! Per-device kernel state: the NVRTC-compiled module of each op family (compiled on first
//! use, PTX cached on disk), the cuBLAS handle, the device error word and a scratch buffer.

use crate::{Family, cuda_err};
use cudarc::cublas::{result as blas, sys as blas_sys};
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, LaunchConfig};
use cudarc::nvrtc::{CompileOptions, Ptx, compile_ptx_with_opts};
use etch_core::{Device, DeviceType, Error, KernelContext, Result};
use etch_devices::cuda::CudaAllocator;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

/// Per device, shared by every delegate on it: the compiled module of each op family.
pub(crate) struct Shared {
    arch: String,
    /// Kernels launch with programmatic dependent launch (compute capability 9.0 and up,
    /// unless `ETCH_CUDA_PDL=0`): each may start while the one before it finishes, and
    /// waits for its writes at entry (`PDL_ENTRY` in common.cuh).
    pdl: bool,
    ctx: Arc<CudaContext>,
    /// Locked only when a kernel is first looked up by a delegate.
    modules: Mutex<HashMap<Family, Arc<CudaModule>>>,
}

impl Shared {
    fn module(&self, family: Family) -> Result<Arc<CudaModule>> {
        let mut m = self
            .modules
            .lock()
            .map_err(|_| Error::internal("CUDA module lock poisoned"))?;
        if let Some(x) = m.get(&family) {
            return Ok(Arc::clone(x));
        }
        let ptx = compile(family, &self.arch)?;
        let module = self
            .ctx
            .load_module(ptx)
            .map_err(|e| cuda_err(&format!("load module {}", family.name()), e))?;
        m.insert(family, Arc::clone(&module));
        Ok(module)
    }
}

/// The shared per-device state of device `index` (made once per process and device).
fn shared_for(cuda: &CudaAllocator, index: i8) -> Result<Arc<Shared>> {
    static S: OnceLock<Mutex<HashMap<usize, Arc<Shared>>>> = OnceLock::new();
    let ordinal = cuda.ordinal(index)?;
    let mut map = S
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .map_err(|_| Error::internal("CUDA device state lock poisoned"))?;
    if let Some(s) = map.get(&ordinal) {
        return Ok(Arc::clone(s));
    }
    let c = cuda.context(index)?;
    let (major, minor) = c
        .compute_capability()
        .map_err(|e| cuda_err("compute capability", e))?;
    let s = Arc::new(Shared {
        arch: format!("compute_{major}{minor}"),
        pdl: major >= 9 && std::env::var("ETCH_CUDA_PDL").as_deref() != Ok("0"),
        ctx: c,
        modules: Mutex::new(HashMap::new()),
    });
    map.insert(ordinal, Arc::clone(&s));
    Ok(s)
}

/// What the kernels of one caller use on a device: kernel handles, a cuBLAS handle (made
/// on first use), the device error word and a scratch buffer.
pub(crate) struct DeviceState {
    shared: Arc<Shared>,
    functions: HashMap<&'static str, CudaFunction>,
    blas: Option<BlasHandle>,
    /// One i32 in mapped host memory: 0, or the code of an error a kernel hit (kernels
    /// write it only then, so nothing crosses PCIe while all is well; taken in
    /// `CudaKernelContext::drop`).
    err: Option<etch_devices::cuda::MappedWord>,
    pub(crate) err_ptr: u64,
    scratch: Option<(CudaSlice<u8>, u64)>,
    /// Outgrown scratch buffers, kept: recorded CUDA graphs may still use their addresses.
    retired: Vec<CudaSlice<u8>>,
    /// Kernels not launched (`ETCH_CUDA_SKIP_KERNELS`, see [`skip_list`]): for ablation
    /// timings only.
    skip: Vec<usize>,
}

/// `ETCH_CUDA_SKIP_KERNELS=a,b,...`: kernels whose name starts with one of these are
/// looked up but never launched, so that a benchmark can time a program without them (an
/// ablation, to see what each kernel costs inside a CUDA graph, where a profiler's
/// kernel-by-kernel times do not say). The results are then wrong; a warning says so once.
/// Empty (the default): nothing is skipped and launches pay nothing for the check.
fn skip_list() -> &'static [String] {
    static L: OnceLock<Vec<String>> = OnceLock::new();
    L.get_or_init(|| {
        let v: Vec<String> = std::env::var("ETCH_CUDA_SKIP_KERNELS")
            .unwrap_or_default()
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if !v.is_empty() {
            eprintln!(
                "etch: ETCH_CUDA_SKIP_KERNELS={}: these kernels are not launched, results are \
                 wrong (for ablation timings only)",
                v.join(",")
            );
        }
        v
    })
}

impl DeviceState {
    fn new(cuda: &CudaAllocator, index: i8, stream: &Arc<CudaStream>) -> Result<Self> {
        let _ = stream;
        let err = cuda.alloc_mapped_word(index)?;
        let err_ptr = err.device_ptr();
        Ok(DeviceState {
            shared: shared_for(cuda, index)?,
            functions: HashMap::new(),
            blas: None,
            err: Some(err),
            err_ptr,
            scratch: None,
            retired: Vec::new(),
            skip: Vec::new(),
        })
    }
}

pub(crate) struct BlasHandle(pub(crate) blas_sys::cublasHandle_t);
// SAFETY: the handle is used by one thread at a time (its owner's lock).
unsafe impl Send for BlasHandle {}

impl Drop for BlasHandle {
    fn drop(&mut self) {
        // SAFETY: the handle was created by `create_handle` and is destroyed once.
        let _ = unsafe { blas::destroy_handle(self.0) };
    }
}

/// The kernel context of one CUDA delegate, made once when it loads
/// (`CudaHooks::kernel_context`) and handed to each of its kernel calls: its stream and its
/// own kernel state, so a launch takes no process-wide lock and looks nothing up by device.
pub struct CudaKernelContext {
    index: i8,
    stream: Arc<CudaStream>,
    state: Mutex<DeviceState>,
}

impl CudaKernelContext {
    /// A context for device `index` of `cuda`.
    pub fn new(cuda: &CudaAllocator, index: i8) -> Result<Self> {
        // The error word is allocated and zeroed on the device's shared stream: not while
        // another thread captures a graph on it (the work would join that graph).
        let _stream = etch_core::lock_device(index);
        let stream = cuda.stream(index)?;
        let state = DeviceState::new(cuda, index, &stream)?;
        Ok(CudaKernelContext {
            index,
            stream,
            state: Mutex::new(state),
        })
    }

    /// Runs `f` with this context's kernel state.
    pub(crate) fn with<R>(&self, f: impl FnOnce(Launch<'_>) -> Result<R>) -> Result<R> {
        let mut st = self
            .state
            .lock()
            .map_err(|_| Error::internal("CUDA kernel context lock poisoned"))?;
        f(Launch {
            stream: &self.stream,
            state: &mut st,
        })
    }
}

impl Drop for CudaKernelContext {
    fn drop(&mut self) {
        // Device buffers are freed in stream order on the device's shared stream (and their
        // cuBLAS handle with them): under the device's lock, so that the frees never join a
        // graph another thread is capturing (they would fail there, poisoning the context).
        let _stream = etch_core::lock_device(self.index);
        if let Ok(st) = self.state.get_mut() {
            st.blas.take();
            st.scratch.take();
            st.retired.clear();
            st.err.take();
        }
    }
}

/// The process-wide kernel state per device, for kernels called without a delegate's
/// context (tests, tools).
fn states() -> &'static Mutex<HashMap<usize, DeviceState>> {
    static S: OnceLock<Mutex<HashMap<usize, DeviceState>>> = OnceLock::new();
    S.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Everything a kernel call needs on one device.
pub(crate) struct Launch<'s> {
    pub(crate) stream: &'s Arc<CudaStream>,
    pub(crate) state: &'s mut DeviceState,
}

/// Runs `f` with the kernel state for `dev`: the delegate's context when the call has one
/// for that device, else the process-wide state (created on first use).
pub(crate) fn with_device<R>(
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
    if let Some(k) = ctx.device_context::<CudaKernelContext>()
        && k.index == dev.index
    {
        return k.with(f);
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
    with_allocator(cuda, dev.index, f)
}

/// Runs `f` with the process-wide kernel state of device `index` of `cuda`.
pub(crate) fn with_allocator<R>(
    cuda: &CudaAllocator,
    index: i8,
    f: impl FnOnce(Launch<'_>) -> Result<R>,
) -> Result<R> {
    let ordinal = cuda.ordinal(index)?;
    let stream = cuda.stream(index)?;
    let mut map = states()
        .lock()
        .map_err(|_| Error::internal("CUDA kernel state lock poisoned"))?;
    if let std::collections::hash_map::Entry::Vacant(slot) = map.entry(ordinal) {
        let _stream = etch_core::lock_device(index);
        slot.insert(DeviceState::new(cuda, index, &stream)?);
    }
    let state = map
        .get_mut(&ordinal)
        .ok_or_else(|| Error::internal("CUDA kernel state vanished"))?;
    f(Launch {
        stream: &stream,
        state,
    })
}

impl Launch<'_> {
    /// The raw handle of kernel `name` of `family` (module compiled on first use).
    pub(crate) fn function(
        &mut self,
        family: Family,
        name: &'static str,
    ) -> Result<cudarc::driver::sys::CUfunction> {
        if let Some(f) = self.state.functions.get(name) {
            return Ok(f.cu_function());
        }
        let module = self.state.shared.module(family)?;
        let f = module
            .load_function(name)
            .map_err(|e| cuda_err(&format!("kernel {name}"), e))?;
        let raw = f.cu_function();
        self.state.functions.insert(name, f);
        if skip_list().iter().any(|p| name.starts_with(p.as_str())) {
            self.state.skip.push(raw as usize);
        }
        Ok(raw)
    }

    /// The cuBLAS handle (made on first use), bound to this launch's stream.
    pub(crate) fn blas(&mut self) -> Result<blas_sys::cublasHandle_t> {
        if self.state.blas.is_none() {
            let h = blas::create_handle().map_err(|e| cuda_err("cuBLAS handle", e))?;
            self.state.blas = Some(BlasHandle(h));
        }
        let h = self
            .state
            .blas
            .as_ref()
            .map(|b| b.0)
            .ok_or_else(|| Error::internal("cuBLAS handle vanished"))?;
        // SAFETY: a live handle and this device's stream.
        unsafe { blas::set_stream(h, self.stream.cu_stream() as _) }
            .map_err(|e| cuda_err("cublasSetStream", e))?;
        Ok(h)
    }

    /// The device error word's address.
    pub(crate) fn err_ptr(&self) -> u64 {
        self.state.err_ptr
    }

    /// A device scratch buffer of at least `nbytes` (grown when needed, kept for later
    /// calls; its contents are undefined).
    pub(crate) fn scratch(&mut self, nbytes: usize) -> Result<u64> {
        if let Some((s, p)) = &self.state.scratch
            && s.len() >= nbytes
        {
            return Ok(*p);
        }
        if let Some((old, _)) = self.state.scratch.take() {
            self.state.retired.push(old);
        }
        let s = self
            .stream
            .alloc_zeros::<u8>(nbytes.max(1 << 20))
            .map_err(|e| cuda_err("scratch memory", e))?;
        let p = raw_ptr(&s, self.stream);
        self.state.scratch = Some((s, p));
        Ok(p)
    }

    /// Launches `f` on a grid-stride grid covering `n` elements.
    ///
    /// # Safety
    /// `args` must point at values whose types and order match the kernel's signature, and
    /// every device pointer among them must be valid for the launch.
    pub(crate) unsafe fn launch(
        &self,
        f: cudarc::driver::sys::CUfunction,
        n: i64,
        args: &mut [*mut std::ffi::c_void],
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { self.launch_with(f, config(n), args) }
    }

    /// Launches `f` with an explicit configuration.
    ///
    /// # Safety
    /// As [`Launch::launch`].
    pub(crate) unsafe fn launch_with(
        &self,
        f: cudarc::driver::sys::CUfunction,
        c: LaunchConfig,
        args: &mut [*mut std::ffi::c_void],
    ) -> Result<()> {
        if !self.state.skip.is_empty() && self.state.skip.contains(&(f as usize)) {
            return Ok(());
        }
        if !self.state.shared.pdl {
            // SAFETY: the caller's contract; the stream belongs to this device's context.
            return unsafe {
                cudarc::driver::result::launch_kernel(
                    f,
                    c.grid_dim,
                    c.block_dim,
                    c.shared_mem_bytes,
                    self.stream.cu_stream(),
                    args,
                )
            }
            .map_err(|e| cuda_err("kernel launch", e));
        }
        use cudarc::driver::sys;
        // SAFETY: an all-zero attribute value is valid (a union of plain integers).
        let mut value: sys::CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
        value.programmaticStreamSerializationAllowed = 1;
        let mut attr = sys::CUlaunchAttribute {
            id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            pad: [0; 4],
            value,
        };
        let cfg = sys::CUlaunchConfig {
            gridDimX: c.grid_dim.0,
            gridDimY: c.grid_dim.1,
            gridDimZ: c.grid_dim.2,
            blockDimX: c.block_dim.0,
            blockDimY: c.block_dim.1,
            blockDimZ: c.block_dim.2,
            sharedMemBytes: c.shared_mem_bytes,
            hStream: self.stream.cu_stream(),
            attrs: &mut attr,
            numAttrs: 1,
        };
        // SAFETY: the caller's contract (a kernel of this context whose parameters are
        // `args`, each kernel waiting for the previous grid at entry); `cfg` and `attr`
        // outlive the call, which copies them.
        unsafe { sys::cuLaunchKernelEx(&cfg, f, args.as_mut_ptr(), std::ptr::null_mut()).result() }
            .map_err(|e| cuda_err("kernel launch", e))
    }
}

fn raw_ptr<T>(s: &CudaSlice<T>, stream: &CudaStream) -> u64 {
    use cudarc::driver::DevicePtr;
    let (p, _sync) = s.device_ptr(stream);
    p
}

/// What a device error code means (`set_error` in the CUDA sources).
fn error_message(code: i32) -> &'static str {
    match code {
        1 => "integer division by zero",
        2 => "an index is out of range",
        3 => "an argument is invalid",
        _ => "unknown error",
    }
}

/// Waits for the stream of device `index` and returns, as an error, an error a kernel
/// recorded there since the last check (clearing it), for kernels called without a
/// delegate's context. Allocates and copies nothing (the word is mapped host memory).
pub fn check_device_errors(cuda: &CudaAllocator, index: i8) -> Result<()> {
    with_allocator(cuda, index, check_word)
}

impl CudaKernelContext {
    /// Waits for the device and returns, as an error, an error this context's kernels
    /// recorded since the last check (clearing it). The word is host memory mapped into
    /// the device, written by a kernel only when it fails: reading it copies nothing.
    pub fn check_errors(&self) -> Result<()> {
        self.with(check_word)
    }
}

fn check_word(l: Launch<'_>) -> Result<()> {
    // The word is host memory the kernels write (only on an error): wait for them, then
    // read it, with no copy.
    l.stream
        .synchronize()
        .map_err(|e| cuda_err("wait for the CUDA kernels", e))?;
    let Some(word) = l.state.err.as_ref() else {
        return Err(Error::internal("CUDA error word already released"));
    };
    let code = word.get();
    if code == 0 {
        return Ok(());
    }
    // No kernel runs now (the stream is idle), so the next ones see the cleared word.
    word.set(0);
    Err(Error::invalid_argument(format!(
        "a CUDA kernel reported: {} (code {})",
        error_message(code),
        code
    )))
}

/// A grid-stride configuration for `n` elements.
pub(crate) fn config(n: i64) -> LaunchConfig {
    let blocks = ((n.max(1) as u64).div_ceil(256)).min(65_535 * 8) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// One block of `threads` per row, `rows` rows (y and z dims split past 65,535).
pub(crate) fn rows_config(rows: usize, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (rows.clamp(1, 1 << 30) as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The full NVRTC source of a family: the op-code prelude, common.cuh, the family file.
pub fn source(family: Family) -> String {
    let mut s = crate::elementwise::prelude();
    s.push_str(include_str!("cuda/common.cuh"));
    s.push('\n');
    s.push_str(family.source());
    s
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Where compiled PTX is cached: `ETCH_CACHE_DIR`, else `$XDG_CACHE_HOME/etch`, else
/// `$HOME/.cache/etch`; `None` when `ETCH_NVRTC_CACHE=0` or no directory is known.
fn cache_dir() -> Option<PathBuf> {
    if std::env::var("ETCH_NVRTC_CACHE").is_ok_and(|v| v == "0") {
        return None;
    }
    let base = std::env::var_os("ETCH_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("etch")))
        .or_else(|| std::env::var_os("HOME").map(|d| PathBuf::from(d).join(".cache/etch")))?;
    Some(base.join("nvrtc"))
}

/// True when the NVRTC library can be loaded.
pub fn nvrtc_available() -> bool {
    // SAFETY: only tries to dlopen the library; no NVRTC call is made.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Compiles a family's source for `arch` (e.g. `compute_90`) with NVRTC, or reads the PTX
/// from the disk cache (keyed by source hash and architecture).
pub fn compile(family: Family, arch: &str) -> Result<Ptx> {
    compile_with(family, arch, cache_dir())
}

/// Compiles a family's source with NVRTC, ignoring the disk cache (for checks).
pub fn compile_fresh(family: Family, arch: &str) -> Result<Ptx> {
    compile_with(family, arch, None)
}

fn compile_with(family: Family, arch: &str, cache: Option<PathBuf>) -> Result<Ptx> {
    let src = source(family);
    let key = format!(
        "{}-{arch}-{:016x}.ptx",
        family.name(),
        fnv1a(src.as_bytes())
    );
    let cached = cache.map(|d| d.join(&key));
    if let Some(p) = &cached
        && let Ok(text) = std::fs::read_to_string(p)
    {
        return Ok(Ptx::from_src(text));
    }
    if !nvrtc_available() {
        return Err(Error::not_found(
            "the NVRTC library (libnvrtc) was not found: install the CUDA toolkit's NVRTC or \
             `pip install nvidia-cuda-nvrtc` and add its lib folder to LD_LIBRARY_PATH",
        ));
    }
    let opts = CompileOptions {
        options: vec![format!("--gpu-architecture={arch}"), "--std=c++17".into()],
        name: Some(format!("{}.cu", family.name())),
        ..Default::default()
    };
    let ptx = compile_ptx_with_opts(&src, opts)
        .map_err(|e| cuda_err(&format!("NVRTC compile of {}.cu", family.name()), e))?;
    if let Some(p) = cached {
        // The cache is best effort: a failure to write it costs a compile next time.
        let tmp = p.with_extension(format!("tmp{}", std::process::id()));
        if p.parent()
            .is_some_and(|d| std::fs::create_dir_all(d).is_ok())
            && std::fs::write(&tmp, ptx.to_src()).is_ok()
        {
            let _ = std::fs::rename(&tmp, &p);
        }
    }
    Ok(ptx)
}
