//! `CudaAllocator`: device memory and copies on NVIDIA GPUs through the CUDA driver API
//! (cudarc, loaded at run time: no CUDA toolkit is needed to build, and a machine without a
//! driver simply has no CUDA device).
//!
//! One primary context per device (so several GPUs work) and one stream per device on which
//! every copy is ordered. Synchronous copies wait for their stream (the host reads or may
//! reuse the buffer right after); the `*_async` variants only enqueue.

use crate::staging::{self, CopyEngine, StagingBuffer, StagingPlan};
use crate::{DeviceAllocator, StreamId};
use cudarc::driver::{CudaContext, CudaStream, DriverError, result, sys};
use etch_core::{ByteSource, DeviceType, Error, Result};
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
    /// Pinned buffers for staging pageable host→device copies, made on first use.
    staging: std::sync::Mutex<Option<Staging>>,
}

/// A ring of pinned staging buffers, one event per buffer: while the DMA engine reads
/// some, the host fills the others ([`crate::staging`]).
struct Staging {
    bufs: Vec<StagingBuffer>,
    /// `done[k]` completes when the transfer last submitted from `bufs[k]` has.
    done: Vec<cudarc::driver::CudaEvent>,
}

// SAFETY: the staging buffers are plain pinned host memory used under the Gpu's mutex.
unsafe impl Send for Staging {}

impl Drop for Staging {
    fn drop(&mut self) {
        // The buffers' context, current for the frees (the events keep it alive); every
        // copy waited for its transfers, but wait again rather than free memory a transfer
        // might read.
        if let Some(ev) = self.done.first() {
            let _ = ev.context().bind_to_thread();
        }
        for ev in &self.done {
            let _ = ev.synchronize();
        }
        for b in &self.bufs {
            // SAFETY: each buffer came from cuMemHostAlloc in `Staging::new`, is freed once,
            // here, and no transfer reads it any more (the events above completed).
            let _ = unsafe { result::free_host(b.ptr as *mut std::ffi::c_void) };
        }
    }
}

impl Staging {
    /// `STAGING_BUFFERS` pinned buffers of `STAGING_CHUNK` bytes with their events.
    fn new(ctx: &Arc<CudaContext>) -> Result<Staging> {
        let mut st = Staging {
            bufs: Vec::with_capacity(STAGING_BUFFERS),
            done: Vec::with_capacity(STAGING_BUFFERS),
        };
        for _ in 0..STAGING_BUFFERS {
            st.done
                .push(ctx.new_event(None).map_err(|e| cuda_err("event", e))?);
            // SAFETY: plain cuMemHostAlloc; the buffer is owned by `st` (freed on drop).
            let p = unsafe { result::malloc_host(STAGING_CHUNK, 0) }.map_err(|e| {
                Error::memory_allocation_failed(format!(
                    "pinned staging buffer of {STAGING_CHUNK} bytes: {e}"
                ))
            })?;
            st.bufs.push(StagingBuffer {
                ptr: p as *mut u8,
                len: STAGING_CHUNK,
            });
        }
        Ok(st)
    }
}

/// A 4-byte word of page-locked host memory that kernels address directly (mapped into the
/// device's address space; [`CudaAllocator::alloc_mapped_word`]): for status a kernel writes
/// only when something fails, such as the CUDA kernels' error word. The host reads it after
/// waiting for the stream, so nothing crosses PCIe while every kernel succeeds: no copy, and
/// nothing in [`DeviceAllocator::transfer_stats`] (a failing kernel's 4-byte store is the only
/// traffic, and it is not a copy). Kernels store to it (no atomics: system-memory atomics over
/// PCIe depend on the platform).
pub struct MappedWord {
    host: *mut i32,
    device: sys::CUdeviceptr,
    ctx: Arc<CudaContext>,
}

// SAFETY: the word is plain page-locked host memory, only read and written with volatile
// 4-byte accesses (which cannot tear) by the host and by kernels.
unsafe impl Send for MappedWord {}
// SAFETY: as above.
unsafe impl Sync for MappedWord {}

impl MappedWord {
    /// The address kernels use.
    pub fn device_ptr(&self) -> u64 {
        self.device
    }

    /// The word's value (after the kernels that may write it have finished).
    pub fn get(&self) -> i32 {
        // SAFETY: `host` is a live, aligned 4-byte allocation owned by `self`.
        unsafe { std::ptr::read_volatile(self.host) }
    }

    /// Sets the word (before the kernels that may write it are launched).
    pub fn set(&self, v: i32) {
        // SAFETY: as in `get`.
        unsafe { std::ptr::write_volatile(self.host, v) }
    }
}

impl Drop for MappedWord {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: `host` came from cuMemHostAlloc in `alloc_mapped_word` and is freed once,
        // here; the owner drops the word only after the kernels that use it.
        let _ = unsafe { result::free_host(self.host as *mut std::ffi::c_void) };
    }
}

/// The CUDA copy engine of one staged copy: `cuMemcpyHtoDAsync` from the pinned buffers
/// on the device's stream, an event recorded after each.
struct CudaEngine<'a> {
    staging: &'a Staging,
    stream: &'a CudaStream,
    /// Device address of the destination's first byte.
    dst: usize,
}

// SAFETY: the buffers are pinned allocations the `Staging` owns (they outlive the engine,
// which borrows it under the Gpu's mutex, so no other copy uses them); a transfer reads
// buffer k until `done[k]` completes, and `wait(k)` synchronises on that event.
unsafe impl CopyEngine for CudaEngine<'_> {
    fn buffers(&self) -> &[StagingBuffer] {
        &self.staging.bufs
    }

    fn wait(&mut self, slot: usize) -> Result<()> {
        let ev = self
            .staging
            .done
            .get(slot)
            .ok_or_else(|| Error::internal(format!("no staging buffer {slot}")))?;
        ev.synchronize().map_err(|e| cuda_err("staging wait", e))
    }

    fn submit(&mut self, slot: usize, len: usize, offset: usize) -> Result<()> {
        let (Some(b), Some(ev)) = (self.staging.bufs.get(slot), self.staging.done.get(slot)) else {
            return Err(Error::internal(format!("no staging buffer {slot}")));
        };
        if len > b.len {
            return Err(Error::internal(format!(
                "staged transfer of {len} bytes from a {}-byte buffer",
                b.len
            )));
        }
        // SAFETY: `len <= b.len` bytes of pinned memory; the pipeline filled them and does
        // not write the buffer again before `wait(slot)`.
        let bytes = unsafe { std::slice::from_raw_parts(b.ptr as *const u8, len) };
        // SAFETY: `dst + offset + len` lies inside the destination (the pipeline cuts the
        // caller's `len()` bytes; the driver checks the range); the staging buffer lives
        // until the event recorded next says the transfer is done.
        unsafe {
            result::memcpy_htod_async(
                (self.dst + offset) as sys::CUdeviceptr,
                bytes,
                self.stream.cu_stream(),
            )
        }
        .map_err(|e| cuda_err("staged host-to-device copy", e))?;
        ev.record(self.stream)
            .map_err(|e| cuda_err("staging record", e))
    }

    fn finish(&mut self) -> Result<()> {
        self.stream
            .synchronize()
            .map_err(|e| cuda_err("synchronize", e))
    }
}

/// Size of each pinned staging buffer (the largest chunk of a staged copy).
pub const STAGING_CHUNK: usize = 64 << 20;

/// Number of pinned staging buffers per device (`STAGING_BUFFERS * STAGING_CHUNK` = 256 MiB
/// of page-locked memory, made on the first staged copy and kept).
pub const STAGING_BUFFERS: usize = 4;

/// The staging plan: chunks of at least 4 MiB, each thread filling at least 1 MiB of one,
/// with [`copy_threads`] threads.
fn staging_plan() -> StagingPlan {
    StagingPlan {
        min_chunk: 4 << 20,
        threads: copy_threads(),
        min_share: 1 << 20,
    }
}

/// Threads that fill the staging buffers: `ETCH_COPY_THREADS`, else one per CPU up to 16
/// (the host memcpy from pageable memory is what limits staged copies).
pub fn copy_threads() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("ETCH_COPY_THREADS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&n| n >= 1)
            .unwrap_or_else(|| {
                std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(1)
                    .min(16)
            })
    })
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
    /// The most bytes alive at once (as requested).
    pub peak_bytes: u64,
}

/// The CUDA device allocator (registers as [`DeviceType::Cuda`]).
pub struct CudaAllocator {
    gpus: Vec<Gpu>,
    /// Live allocations: (device ordinal, address) → size. Frees of anything else are
    /// rejected instead of reaching the driver.
    live: std::sync::Mutex<LiveAllocations>,
    /// `peer[i][j]`: device i's context can read device j's memory directly (NVLink/PCIe
    /// peer access, enabled at start where the hardware allows it).
    peer: Vec<Vec<bool>>,
    /// Pinned host allocations (address → size): copies from them skip staging.
    pinned: std::sync::Mutex<std::collections::BTreeMap<usize, usize>>,
    /// Pageable host→device copies of at least this many bytes go through pinned staging.
    staging_threshold: std::sync::atomic::AtomicUsize,
    /// Host ↔ device traffic ([`DeviceAllocator::transfer_stats`]).
    transfers: etch_core::TransferCounter,
}

/// Default size from which pageable host→device copies are staged through pinned memory.
/// Direct pageable copies peaked at 16 MiB on the H200 host (BENCHMARKS.md: 13 GB/s, then
/// 8–9 GB/s from 64 MiB); the staged copy fills its buffers with up to 16 threads and
/// overlaps that with the transfers (4 chunks of 4 MiB at 16 MiB), so it should win from
/// there, while small copies keep the direct path (no threads, no pinned buffers).
/// `copy_bench`'s first two columns compare the two at each size.
pub const DEFAULT_STAGING_THRESHOLD: usize = 16 << 20;

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

/// The CUDA devices for a test or benchmark: `Ok(None)` (skip) when there are none, unless
/// `ETCH_REQUIRE_CUDA=1`, which makes a missing device an error, so a GPU run cannot pass by
/// skipping.
pub fn cuda_for_tests() -> Result<Option<CudaAllocator>> {
    let required = std::env::var("ETCH_REQUIRE_CUDA").is_ok_and(|v| v == "1");
    match CudaAllocator::new() {
        Ok(a) => Ok(Some(a)),
        Err(e) if required => Err(Error::not_found(format!(
            "ETCH_REQUIRE_CUDA=1 but no CUDA device is usable: {}",
            e.message()
        ))),
        Err(e) => {
            eprintln!("skipped: no CUDA device ({})", e.message());
            Ok(None)
        }
    }
}

/// Enables peer access between every pair of devices that supports it, so device-to-device
/// copies across GPUs go over NVLink/PCIe directly instead of through the host.
fn enable_peer_access(gpus: &[Gpu]) -> Vec<Vec<bool>> {
    let n = gpus.len();
    let mut peer = vec![vec![false; n]; n];
    for i in 0..n {
        for j in 0..n {
            if i == j {
                continue;
            }
            let mut can = 0i32;
            // SAFETY: plain queries on valid device handles; `can` outlives the call.
            let ok = unsafe {
                sys::cuDeviceCanAccessPeer(
                    &mut can,
                    gpus[i].ctx.cu_device(),
                    gpus[j].ctx.cu_device(),
                )
            };
            if ok != sys::cudaError_enum::CUDA_SUCCESS || can == 0 {
                continue;
            }
            if gpus[i].ctx.bind_to_thread().is_err() {
                continue;
            }
            // SAFETY: enables access from the current context (device i) to device j's
            // primary context; "already enabled" is fine.
            let r = unsafe { sys::cuCtxEnablePeerAccess(gpus[j].ctx.cu_ctx(), 0) };
            peer[i][j] = r == sys::cudaError_enum::CUDA_SUCCESS
                || r == sys::cudaError_enum::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
        }
    }
    peer
}

impl CudaAllocator {
    /// True when device `from` can read device `to`'s memory directly.
    pub fn peer_access(&self, from: usize, to: usize) -> bool {
        self.peer
            .get(from)
            .and_then(|r| r.get(to))
            .copied()
            .unwrap_or(false)
    }

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
            gpus.push(Gpu {
                ctx,
                stream,
                staging: std::sync::Mutex::new(None),
            });
        }
        let peer = enable_peer_access(&gpus);
        Ok(CudaAllocator {
            peer,
            gpus,
            live: Default::default(),
            pinned: Default::default(),
            staging_threshold: std::sync::atomic::AtomicUsize::new(DEFAULT_STAGING_THRESHOLD),
            transfers: etch_core::TransferCounter::default(),
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

    /// Every device's stream lock, in ascending order: pinning and unpinning host memory
    /// synchronise with all devices, so not while any thread captures a graph.
    fn lock_all(&self) -> Vec<etch_core::DeviceGuard> {
        (0..self.gpus.len().min(i8::MAX as usize))
            .map(|i| etch_core::lock_device(i as i8))
            .collect()
    }

    /// Allocates page-locked host memory (fast, asynchronous copies), freed with
    /// [`CudaAllocator::free_pinned`].
    pub fn alloc_pinned(&self, nbytes: usize) -> Result<*mut u8> {
        let _streams = self.lock_all();
        self.gpu(0)?;
        // SAFETY: plain cuMemHostAlloc; the result is owned by the caller.
        let p = unsafe { result::malloc_host(nbytes.max(1), 0) }.map_err(|e| {
            Error::memory_allocation_failed(format!(
                "pinned host allocation of {nbytes} bytes: {e}"
            ))
        })? as *mut u8;
        if let Ok(mut m) = self.pinned.lock() {
            m.insert(p as usize, nbytes.max(1));
        }
        Ok(p)
    }

    /// Frees memory from [`CudaAllocator::alloc_pinned`]. A pointer this allocator did
    /// not pin (or already freed) is rejected.
    pub fn free_pinned(&self, ptr: *mut u8) -> Result<()> {
        let _streams = self.lock_all();
        let known = self
            .pinned
            .lock()
            .map_err(|_| Error::internal("pinned-memory lock poisoned"))?
            .remove(&(ptr as usize))
            .is_some();
        if !known {
            return Err(Error::invalid_argument(format!(
                "{ptr:?} is not pinned memory of this allocator"
            )));
        }
        // SAFETY: `ptr` came from cuMemHostAlloc in `alloc_pinned` and was live until the
        // removal above, so it is freed exactly once.
        unsafe { result::free_host(ptr as *mut std::ffi::c_void) }
            .map_err(|e| cuda_err("free pinned", e))
    }

    /// A status word in page-locked host memory mapped into device `index`'s address space
    /// ([`MappedWord`]), zeroed. The caller holds the device's lock
    /// ([`etch_core::lock_device`]): allocating page-locked memory must not run while a
    /// graph is captured on the device's stream.
    pub fn alloc_mapped_word(&self, index: i8) -> Result<MappedWord> {
        let g = self.gpu(index)?;
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: plain cuMemHostAlloc of 4 bytes in this device's (bound) context; the
        // result is owned by the returned MappedWord, which frees it once.
        let host = unsafe { result::malloc_host(4, flags) }.map_err(|e| {
            Error::memory_allocation_failed(format!("cuda:{index}: mapped status word: {e}"))
        })? as *mut i32;
        let mut word = MappedWord {
            host,
            device: 0,
            ctx: Arc::clone(&g.ctx),
        };
        let mut device: sys::CUdeviceptr = 0;
        // SAFETY: `host` is a live mapped allocation of this context; `device` is written.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host as *mut _, 0) }
            .result()
            .map_err(|e| cuda_err("device address of a mapped status word", e))?;
        word.device = device;
        word.set(0);
        Ok(word)
    }

    /// Bytes of pinned host memory alive (made by [`CudaAllocator::alloc_pinned`]).
    pub fn pinned_bytes(&self) -> usize {
        self.pinned.lock().map(|m| m.values().sum()).unwrap_or(0)
    }

    /// True when `[p, p + n)` lies in pinned memory this allocator made.
    fn is_pinned(&self, p: *const u8, n: usize) -> bool {
        let Ok(m) = self.pinned.lock() else {
            return false;
        };
        let p = p as usize;
        m.range(..=p)
            .next_back()
            .is_some_and(|(&b, &len)| p + n <= b + len)
    }

    /// True when a copy of `src` goes through pinned staging: pageable and at least the
    /// staging threshold.
    fn staged(&self, src: &[u8]) -> bool {
        let threshold = self
            .staging_threshold
            .load(std::sync::atomic::Ordering::Relaxed);
        src.len() >= threshold && !self.is_pinned(src.as_ptr(), src.len())
    }

    /// Sets the size from which pageable host→device copies are staged through pinned
    /// memory (`usize::MAX` turns staging off).
    pub fn set_staging_threshold(&self, bytes: usize) {
        self.staging_threshold
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// Host→device copy of pageable memory through pinned staging buffers: several
    /// threads copy chunk i+1 into one buffer while the DMA engine reads chunk i from
    /// another ([`crate::staging`]). Waits for the copy to finish.
    pub fn copy_host_to_device_staged(&self, dst: *mut u8, src: &[u8], index: i8) -> Result<()> {
        self.copy_staged(dst, &src, index)
    }

    /// [`CudaAllocator::copy_host_to_device_staged`] for any [`ByteSource`].
    fn copy_staged(&self, dst: *mut u8, src: &dyn ByteSource, index: i8) -> Result<()> {
        let _stream = etch_core::lock_device(index);
        if src.is_empty() {
            return Ok(());
        }
        Self::check_ptr(dst, "copy_host_to_device")?;
        let g = self.gpu(index)?;
        self.transfers.h2d(src.len());
        let mut guard = g
            .staging
            .lock()
            .map_err(|_| Error::internal("staging lock poisoned"))?;
        if guard.is_none() {
            *guard = Some(Staging::new(&g.ctx)?);
        }
        let st = guard
            .as_ref()
            .ok_or_else(|| Error::internal("staging buffers vanished"))?;
        let mut engine = CudaEngine {
            staging: st,
            stream: &g.stream,
            dst: dst as usize,
        };
        staging::staged_copy(&mut engine, src, &staging_plan())
            .map_err(|e| Error::new(e.code(), format!("cuda:{index}: {}", e.message())))
    }

    /// Frees the pinned staging buffers (they are made again by the next staged copy).
    pub fn release_staging(&self) -> Result<()> {
        for g in &self.gpus {
            let mut st = g
                .staging
                .lock()
                .map_err(|_| Error::internal("staging lock poisoned"))?;
            // Dropping waits for pending transfers and frees the buffers.
            *st = None;
        }
        Ok(())
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
        // cuMemAlloc / cuMemFree may synchronise the device: not while another thread
        // captures a graph on its stream (see etch_core::lock_device).
        let _stream = etch_core::lock_device(index);
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
                    l.1.peak_bytes = l.1.peak_bytes.max(l.1.live_bytes);
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
        // cuMemAlloc / cuMemFree may synchronise the device: not while another thread
        // captures a graph on its stream (see etch_core::lock_device).
        let _stream = etch_core::lock_device(index);
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
        let _stream = etch_core::lock_device(index);
        if self.staged(src) {
            return self.copy_host_to_device_staged(dst, src, index);
        }
        // The caller may reuse `src` as soon as this returns, so wait for the copy.
        self.copy_host_to_device_async(dst, src, index, StreamId(0))?;
        self.synchronize(index, StreamId(0))
    }

    /// A contiguous source goes the way of `copy_host_to_device` (direct, or staged when
    /// large and pageable); anything else (stacked, converted) always through staging.
    fn copy_host_to_device_from(
        &self,
        dst: *mut u8,
        src: &dyn ByteSource,
        index: i8,
    ) -> Result<()> {
        match src.as_slice() {
            Some(bytes) if !self.staged(bytes) => self.copy_host_to_device(dst, bytes, index),
            _ => self.copy_staged(dst, src, index),
        }
    }

    fn allocate_pinned_host(&self, nbytes: usize) -> Result<Option<*mut u8>> {
        self.alloc_pinned(nbytes).map(Some)
    }

    fn free_pinned_host(&self, ptr: *mut u8) -> Result<()> {
        self.free_pinned(ptr)
    }

    fn copy_device_to_host(&self, dst: &mut [u8], src: *const u8, index: i8) -> Result<()> {
        let _stream = etch_core::lock_device(index);
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
        // Both ordinals, in ascending order (see etch_core::lock_device).
        let _first = etch_core::lock_device(dst_index.min(src_index));
        let _second = etch_core::lock_device(dst_index.max(src_index));
        if nbytes == 0 {
            return Ok(());
        }
        Self::check_ptr(dst, "copy_device_to_device")?;
        Self::check_ptr(src, "copy_device_to_device")?;
        let di = self.resolve(dst_index)?;
        let si = self.resolve(src_index)?;
        let g = self.gpu(dst_index)?;
        if di == si {
            // Ordered on the device's stream with the kernels and copies around it; the
            // host does not wait: it reads device memory only through a device-to-host
            // copy, which synchronises, and frees synchronise first.
            // SAFETY: both pointers are device memory of this context (checked by the driver).
            return unsafe {
                result::memcpy_dtod_async(
                    dst as usize as sys::CUdeviceptr,
                    src as usize as sys::CUdeviceptr,
                    nbytes,
                    g.stream.cu_stream(),
                )
            }
            .map_err(|e| cuda_err("device-to-device copy", e));
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
        let _stream = etch_core::lock_device(index);
        if src.is_empty() {
            return Ok(());
        }
        Self::check_ptr(dst, "copy_host_to_device")?;
        let g = self.gpu(index)?;
        self.transfers.h2d(src.len());
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
        let _stream = etch_core::lock_device(index);
        if dst.is_empty() {
            return Ok(());
        }
        Self::check_ptr(src, "copy_device_to_host")?;
        let g = self.gpu(index)?;
        self.transfers.d2h(dst.len());
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

    fn transfer_stats(&self) -> etch_core::TransferStats {
        self.transfers.get()
    }

    fn synchronize(&self, index: i8, _stream: StreamId) -> Result<()> {
        self.gpu(index)?
            .stream
            .synchronize()
            .map_err(|e| cuda_err("stream synchronize", e))
    }
}
