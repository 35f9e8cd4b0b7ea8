//! `CudaAllocator`: device memory and copies on NVIDIA GPUs through the CUDA driver API
//! (cudarc, loaded at run time: no CUDA toolkit is needed to build, and a machine without a
//! driver simply has no CUDA device).
//!
//! One primary context per device (so several GPUs work) and one stream per device on which
//! every copy is ordered. Synchronous copies wait for their stream (the host reads or may
//! reuse the buffer right after); the `*_async` variants only enqueue.

use crate::{DeviceAllocator, StreamId};
use cudarc::driver::{CudaContext, CudaStream, DriverError, result, sys};
use etch_core::{DeviceType, Error, Result};
use std::sync::Arc;

/// Largest alignment `allocate` accepts (CUDA allocations are 256-byte aligned).
pub const MAX_CUDA_ALIGNMENT: usize = 256;

/// What `etch devices` shows about one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaDeviceInfo {
    /// Device index (`cuda:N`).
    pub index: i8,
    /// Marketing name, e.g. "NVIDIA H200".
    pub name: String,
    /// Total memory in bytes.
    pub total_bytes: usize,
    /// Free memory in bytes.
    pub free_bytes: usize,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
}

struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
}

/// Live allocations and counters of a [`CudaAllocator`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CudaStats {
    /// Allocations made.
    pub allocations: u64,
    /// Frees made.
    pub frees: u64,
    /// Allocations alive now.
    pub live_allocations: u64,
    /// Bytes alive now (as requested).
    pub live_bytes: u64,
}

/// The CUDA device allocator (registers as [`DeviceType::Cuda`]).
pub struct CudaAllocator {
    gpus: Vec<Gpu>,
    /// Live allocations: (device ordinal, address) → size. Frees of anything else are
    /// rejected instead of reaching the driver.
    live: std::sync::Mutex<LiveAllocations>,
}

/// Sizes of live allocations by (device ordinal, address), and the counters.
type LiveAllocations = (std::collections::HashMap<(usize, u64), usize>, CudaStats);

impl std::fmt::Debug for CudaAllocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaAllocator")
            .field("devices", &self.gpus.len())
            .finish()
    }
}

fn cuda_err(what: &str, e: DriverError) -> Error {
    Error::internal(format!("{what}: {e}"))
}

/// True when the CUDA driver library (`libcuda`) can be loaded.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the driver library; no CUDA call is made.
    unsafe { sys::is_culib_present() }
}

impl CudaAllocator {
    /// Opens every CUDA device: `NotFound` when there is no driver or no device.
    pub fn new() -> Result<CudaAllocator> {
        if !driver_present() {
            return Err(Error::not_found(
                "no CUDA driver (libcuda.so) was found on this machine",
            ));
        }
        result::init()
            .map_err(|e| Error::not_found(format!("CUDA driver failed to initialise: {e}")))?;
        let n = result::device::get_count()
            .map_err(|e| Error::not_found(format!("CUDA device count: {e}")))?;
        if n <= 0 {
            return Err(Error::not_found("the CUDA driver reports no devices"));
        }
        let mut gpus = Vec::new();
        for i in 0..n.min(i8::MAX as i32) as usize {
            let ctx =
                CudaContext::new(i).map_err(|e| cuda_err(&format!("context for cuda:{i}"), e))?;
            let stream = ctx
                .new_stream()
                .map_err(|e| cuda_err(&format!("stream for cuda:{i}"), e))?;
            gpus.push(Gpu { ctx, stream });
        }
        Ok(CudaAllocator {
            gpus,
            live: Default::default(),
        })
    }

    /// Allocation counters (our own accounting, next to the driver's free memory).
    pub fn stats(&self) -> CudaStats {
        self.live.lock().map(|l| l.1).unwrap_or_default()
    }

    /// Number of devices.
    pub fn num_devices(&self) -> usize {
        self.gpus.len()
    }

    /// Name, memory and compute capability of every device.
    pub fn devices(&self) -> Result<Vec<CudaDeviceInfo>> {
        self.gpus
            .iter()
            .enumerate()
            .map(|(i, g)| {
                g.ctx
                    .bind_to_thread()
                    .map_err(|e| cuda_err("bind context", e))?;
                let (free, total) = g
                    .ctx
                    .mem_get_info()
                    .map_err(|e| cuda_err("memory info", e))?;
                Ok(CudaDeviceInfo {
                    index: i as i8,
                    name: g.ctx.name().map_err(|e| cuda_err("device name", e))?,
                    total_bytes: total,
                    free_bytes: free,
                    compute_capability: g
                        .ctx
                        .compute_capability()
                        .map_err(|e| cuda_err("compute capability", e))?,
                })
            })
            .collect()
    }

    /// Free and total bytes of device `index`.
    pub fn mem_info(&self, index: i8) -> Result<(usize, usize)> {
        let g = self.gpu(index)?;
        g.ctx
            .bind_to_thread()
            .map_err(|e| cuda_err("bind context", e))?;
        g.ctx.mem_get_info().map_err(|e| cuda_err("memory info", e))
    }

    /// Resolves an index: −1 is the current device (the one whose context is current on
    /// this thread, else 0); below −1 or past the last device is `InvalidArgument`.
    fn resolve(&self, index: i8) -> Result<usize> {
        if index == -1 {
            let current = result::ctx::get_current().ok().flatten();
            return Ok(current
                .and_then(|c| self.gpus.iter().position(|g| g.ctx.cu_ctx() == c))
                .unwrap_or(0));
        }
        if index < -1 {
            return Err(Error::invalid_argument(format!(
                "invalid CUDA device index {index} (-1 means the current device)"
            )));
        }
        let i = index as usize;
        if i >= self.gpus.len() {
            return Err(Error::invalid_argument(format!(
                "no device cuda:{index}: this machine has {} CUDA device(s)",
                self.gpus.len()
            )));
        }
        Ok(i)
    }

    /// The stream device `index`'s copies (and kernels) are ordered on; binds its context
    /// to the calling thread.
    pub fn stream(&self, index: i8) -> Result<Arc<CudaStream>> {
        Ok(Arc::clone(&self.gpu(index)?.stream))
    }

    /// The context of device `index`, bound to the calling thread.
    pub fn context(&self, index: i8) -> Result<Arc<CudaContext>> {
        Ok(Arc::clone(&self.gpu(index)?.ctx))
    }

    /// The device ordinal an index means (−1: the current device).
    pub fn ordinal(&self, index: i8) -> Result<usize> {
        self.resolve(index)
    }

    fn gpu(&self, index: i8) -> Result<&Gpu> {
        let i = self.resolve(index)?;
        let g = &self.gpus[i];
        g.ctx
            .bind_to_thread()
            .map_err(|e| cuda_err("bind context", e))?;
        Ok(g)
    }

    fn check_ptr(ptr: *const u8, what: &str) -> Result<()> {
        if ptr.is_null() {
            return Err(Error::invalid_argument(format!(
                "{what}: null device pointer"
            )));
        }
        Ok(())
    }

    /// Allocates page-locked host memory (fast, asynchronous copies), freed with
    /// [`CudaAllocator::free_pinned`].
    pub fn alloc_pinned(&self, nbytes: usize) -> Result<*mut u8> {
        let g = self.gpu(0)?;
        let _ = g;
        // SAFETY: plain cuMemHostAlloc; the result is owned by the caller.
        let p = unsafe { result::malloc_host(nbytes.max(1), 0) }.map_err(|e| {
            Error::memory_allocation_failed(format!(
                "pinned host allocation of {nbytes} bytes: {e}"
            ))
        })?;
        Ok(p as *mut u8)
    }

    /// Frees memory from [`CudaAllocator::alloc_pinned`].
    ///
    /// # Safety
    /// `ptr` must come from `alloc_pinned` of this allocator and not be used afterwards.
    pub unsafe fn free_pinned(&self, ptr: *mut u8) -> Result<()> {
        // SAFETY: caller's contract.
        unsafe { result::free_host(ptr as *mut std::ffi::c_void) }
            .map_err(|e| cuda_err("free pinned", e))
    }
}

impl DeviceAllocator for CudaAllocator {
    fn device_type(&self) -> DeviceType {
        DeviceType::Cuda
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn allocate(&self, nbytes: usize, index: i8, alignment: usize) -> Result<*mut u8> {
        if !alignment.is_power_of_two() || alignment > MAX_CUDA_ALIGNMENT {
            return Err(Error::invalid_argument(format!(
                "alignment {alignment} must be a power of two no larger than {MAX_CUDA_ALIGNMENT}"
            )));
        }
        let g = self.gpu(index)?;
        // cuMemAlloc rejects 0 bytes; every allocation gets a distinct address.
        // SAFETY: the context is bound; the memory is returned to the caller uninitialised.
        match unsafe { result::malloc_sync(nbytes.max(1)) } {
            Ok(p) => {
                let ordinal = self.resolve(index)?;
                if let Ok(mut l) = self.live.lock() {
                    l.0.insert((ordinal, p), nbytes);
                    l.1.allocations += 1;
                    l.1.live_allocations += 1;
                    l.1.live_bytes += nbytes as u64;
                }
                Ok(p as usize as *mut u8)
            }
            Err(e) => {
                let free = g.ctx.mem_get_info().map(|(f, _)| f).unwrap_or(0);
                Err(Error::memory_allocation_failed(format!(
                    "cuda:{index}: cannot allocate {nbytes} bytes ({free} bytes free): {e}"
                )))
            }
        }
    }

    fn deallocate(&self, ptr: *mut u8, index: i8) -> Result<()> {
        Self::check_ptr(ptr, "deallocate")?;
        let ordinal = self.resolve(index)?;
        {
            let mut l = self
                .live
                .lock()
                .map_err(|_| Error::internal("CUDA allocator lock poisoned"))?;
            let Some(size) = l.0.remove(&(ordinal, ptr as usize as u64)) else {
                return Err(Error::invalid_argument(format!(
                    "freeing {ptr:?} on cuda:{index}, which this allocator did not allocate (or already freed)"
                )));
            };
            l.1.frees += 1;
            l.1.live_allocations -= 1;
            l.1.live_bytes -= size as u64;
        }
        let g = self.gpu(index)?;
        // Pending copies on the stream may still use the memory.
        g.stream
            .synchronize()
            .map_err(|e| cuda_err("synchronize before free", e))?;
        // SAFETY: `ptr` came from `allocate` on this device (the driver rejects others).
        unsafe { result::free_sync(ptr as usize as sys::CUdeviceptr) }
            .map_err(|e| cuda_err(&format!("cuda:{index}: free"), e))
    }

    fn copy_host_to_device(&self, dst: *mut u8, src: &[u8], index: i8) -> Result<()> {
        self.copy_host_to_device_async(dst, src, index, StreamId(0))?;
        self.synchronize(index, StreamId(0))
    }

    fn copy_device_to_host(&self, dst: &mut [u8], src: *const u8, index: i8) -> Result<()> {
        self.copy_device_to_host_async(dst, src, index, StreamId(0))?;
        self.synchronize(index, StreamId(0))
    }

    fn copy_device_to_device(
        &self,
        dst: *mut u8,
        dst_index: i8,
        src: *const u8,
        src_index: i8,
        nbytes: usize,
    ) -> Result<()> {
        if nbytes == 0 {
            return Ok(());
        }
        Self::check_ptr(dst, "copy_device_to_device")?;
        Self::check_ptr(src, "copy_device_to_device")?;
        let di = self.resolve(dst_index)?;
        let si = self.resolve(src_index)?;
        let g = self.gpu(dst_index)?;
        if di == si {
            // SAFETY: both pointers are device memory of this context (checked by the driver).
            unsafe {
                result::memcpy_dtod_async(
                    dst as usize as sys::CUdeviceptr,
                    src as usize as sys::CUdeviceptr,
                    nbytes,
                    g.stream.cu_stream(),
                )
            }
            .map_err(|e| cuda_err("device-to-device copy", e))?;
        } else {
            let s = &self.gpus[si];
            // Order after pending work on the source device, then copy peer to peer.
            s.stream
                .synchronize()
                .map_err(|e| cuda_err("synchronize source", e))?;
            // SAFETY: pointers belong to their contexts; the driver stages through the host
            // when peer access is unavailable.
            unsafe {
                result::memcpy_peer_async(
                    g.ctx.cu_ctx(),
                    dst as usize as sys::CUdeviceptr,
                    s.ctx.cu_ctx(),
                    src as usize as sys::CUdeviceptr,
                    nbytes,
                    g.stream.cu_stream(),
                )
            }
            .map_err(|e| cuda_err("peer copy", e))?;
        }
        g.stream
            .synchronize()
            .map_err(|e| cuda_err("synchronize", e))
    }

    fn copy_host_to_device_async(
        &self,
        dst: *mut u8,
        src: &[u8],
        index: i8,
        _stream: StreamId,
    ) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        Self::check_ptr(dst, "copy_host_to_device")?;
        let g = self.gpu(index)?;
        // SAFETY: `dst` is device memory of this context (the driver checks the range);
        // the caller keeps `src` alive until the stream is synchronised.
        unsafe {
            result::memcpy_htod_async(dst as usize as sys::CUdeviceptr, src, g.stream.cu_stream())
        }
        .map_err(|e| {
            cuda_err(
                &format!("cuda:{index}: host-to-device copy of {} bytes", src.len()),
                e,
            )
        })
    }

    fn copy_device_to_host_async(
        &self,
        dst: &mut [u8],
        src: *const u8,
        index: i8,
        _stream: StreamId,
    ) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        Self::check_ptr(src, "copy_device_to_host")?;
        let g = self.gpu(index)?;
        // SAFETY: as above; `dst` is valid only after the stream is synchronised.
        unsafe {
            result::memcpy_dtoh_async(dst, src as usize as sys::CUdeviceptr, g.stream.cu_stream())
        }
        .map_err(|e| {
            cuda_err(
                &format!("cuda:{index}: device-to-host copy of {} bytes", dst.len()),
                e,
            )
        })
    }

    fn synchronize(&self, index: i8, _stream: StreamId) -> Result<()> {
        self.gpu(index)?
            .stream
            .synchronize()
            .map_err(|e| cuda_err("stream synchronize", e))
    }
}
