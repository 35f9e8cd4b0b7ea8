//! Device memory abstractions: the [`DeviceAllocator`] trait, a [`DeviceRegistry`] holding
//! one allocator per device type, and RAII [`DeviceMemoryBuffer`]s. Implementations (the
//! simulated device, CUDA) live in `etch-devices`.
//!
//! Every byte that crosses host ↔ device goes through an allocator's copy functions; etch
//! never writes device memory with a host `memcpy`.

use crate::{ByteSource, DeviceType, Error, NUM_DEVICE_TYPES, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

/// Default alignment of device allocations (upstream: `alignof(void*)`).
pub const DEFAULT_ALIGNMENT: usize = 8;

/// Chunk size of [`DeviceAllocator::copy_host_to_device_from`]'s default implementation.
pub const SOURCE_CHUNK: usize = 8 << 20;

/// An ordered queue of device work (a CUDA stream). `0` is the device's default stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct StreamId(pub u64);

/// Host ↔ device traffic counted by an allocator since it was made: the bytes and the
/// number of copies each way. Device-to-device copies are not counted (they do not cross
/// the bus to the host).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TransferStats {
    /// Bytes copied from host to device.
    pub h2d_bytes: u64,
    /// Host-to-device copies (a staged copy counts once).
    pub h2d_copies: u64,
    /// Bytes copied from device to host.
    pub d2h_bytes: u64,
    /// Device-to-host copies.
    pub d2h_copies: u64,
}

impl TransferStats {
    /// The traffic between `earlier` and `self` (two readings of one allocator).
    pub fn since(self, earlier: TransferStats) -> TransferStats {
        TransferStats {
            h2d_bytes: self.h2d_bytes.saturating_sub(earlier.h2d_bytes),
            h2d_copies: self.h2d_copies.saturating_sub(earlier.h2d_copies),
            d2h_bytes: self.d2h_bytes.saturating_sub(earlier.d2h_bytes),
            d2h_copies: self.d2h_copies.saturating_sub(earlier.d2h_copies),
        }
    }
}

/// Lock-free counters behind [`TransferStats`], for allocator implementations.
#[derive(Debug, Default)]
pub struct TransferCounter {
    h2d_bytes: AtomicU64,
    h2d_copies: AtomicU64,
    d2h_bytes: AtomicU64,
    d2h_copies: AtomicU64,
}

impl TransferCounter {
    /// Counts one host-to-device copy of `n` bytes.
    pub fn h2d(&self, n: usize) {
        self.h2d_bytes.fetch_add(n as u64, Ordering::Relaxed);
        self.h2d_copies.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one device-to-host copy of `n` bytes.
    pub fn d2h(&self, n: usize) {
        self.d2h_bytes.fetch_add(n as u64, Ordering::Relaxed);
        self.d2h_copies.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts so far.
    pub fn get(&self) -> TransferStats {
        TransferStats {
            h2d_bytes: self.h2d_bytes.load(Ordering::Relaxed),
            h2d_copies: self.h2d_copies.load(Ordering::Relaxed),
            d2h_bytes: self.d2h_bytes.load(Ordering::Relaxed),
            d2h_copies: self.d2h_copies.load(Ordering::Relaxed),
        }
    }
}

/// Allocates and copies memory of one device type.
///
/// Device pointers are opaque addresses: the host never dereferences them. Implementations
/// must be thread-safe, validate what they can (a pointer they did not allocate, an index
/// with no device) and return errors rather than abort.
///
/// The `*_async` variants order the operation on a stream and may return before it
/// completes; the caller keeps host buffers alive until [`DeviceAllocator::synchronize`].
/// Their default implementations are the synchronous copies, which is correct for devices
/// without streams.
pub trait DeviceAllocator: Send + Sync {
    /// The device type this allocator serves.
    fn device_type(&self) -> DeviceType;

    /// Allocates `nbytes` on device `index` with the given power-of-two alignment.
    fn allocate(&self, nbytes: usize, index: i8, alignment: usize) -> Result<*mut u8>;

    /// Frees an allocation made by [`DeviceAllocator::allocate`].
    fn deallocate(&self, ptr: *mut u8, index: i8) -> Result<()>;

    /// Copies host bytes to device memory at `dst`.
    fn copy_host_to_device(&self, dst: *mut u8, src: &[u8], index: i8) -> Result<()>;

    /// Copies the bytes of `src` to device memory at `dst`, producing them piece by piece
    /// (a tensor stacked from memory-mapped files, or converted on the way), so that no
    /// host copy of the whole is made. Waits until the copy is done, like
    /// [`DeviceAllocator::copy_host_to_device`].
    ///
    /// The default copies a contiguous source directly and anything else through a host
    /// buffer of at most [`SOURCE_CHUNK`] bytes; CUDA overrides it with its pinned staging
    /// pipeline.
    fn copy_host_to_device_from(
        &self,
        dst: *mut u8,
        src: &dyn ByteSource,
        index: i8,
    ) -> Result<()> {
        if let Some(bytes) = src.as_slice() {
            return self.copy_host_to_device(dst, bytes, index);
        }
        let len = src.len();
        let mut buf = crate::AlignedBuf::zeroed(len.min(SOURCE_CHUNK))?;
        let mut off = 0;
        while off < len {
            let n = (len - off).min(SOURCE_CHUNK);
            let chunk = &mut buf.as_mut_slice()[..n];
            src.read_into(off, chunk)?;
            // `off + n <= len`, the size of the destination the caller gave.
            self.copy_host_to_device(dst.wrapping_add(off), chunk, index)?;
            off += n;
        }
        Ok(())
    }

    /// Copies device memory at `src` into host bytes.
    fn copy_device_to_host(&self, dst: &mut [u8], src: *const u8, index: i8) -> Result<()>;

    /// Copies `nbytes` between device allocations (possibly on two devices of this type).
    fn copy_device_to_device(
        &self,
        dst: *mut u8,
        dst_index: i8,
        src: *const u8,
        src_index: i8,
        nbytes: usize,
    ) -> Result<()>;

    /// Stream-ordered host → device copy; `src` must stay alive until the stream syncs.
    fn copy_host_to_device_async(
        &self,
        dst: *mut u8,
        src: &[u8],
        index: i8,
        stream: StreamId,
    ) -> Result<()> {
        let _ = stream;
        self.copy_host_to_device(dst, src, index)
    }

    /// Stream-ordered device → host copy; `dst` is valid only after the stream syncs.
    fn copy_device_to_host_async(
        &self,
        dst: &mut [u8],
        src: *const u8,
        index: i8,
        stream: StreamId,
    ) -> Result<()> {
        let _ = stream;
        self.copy_device_to_host(dst, src, index)
    }

    /// Waits until all work queued on `stream` of device `index` is done.
    fn synchronize(&self, index: i8, stream: StreamId) -> Result<()> {
        let _ = (index, stream);
        Ok(())
    }

    /// Allocates page-locked host memory that copies to and from this device move at full
    /// speed (`Ok(None)` when the device has no such memory). Free it with
    /// [`DeviceAllocator::free_pinned_host`]. The memory is not initialised.
    fn allocate_pinned_host(&self, nbytes: usize) -> Result<Option<*mut u8>> {
        let _ = nbytes;
        Ok(None)
    }

    /// Frees memory from [`DeviceAllocator::allocate_pinned_host`].
    fn free_pinned_host(&self, ptr: *mut u8) -> Result<()> {
        let _ = ptr;
        Err(Error::not_supported(
            "this device has no pinned host memory",
        ))
    }

    /// The allocator as `Any`, so device kernels can reach their allocator's concrete type
    /// (its contexts and streams). The default is not downcastable.
    fn as_any(&self) -> &dyn std::any::Any {
        &()
    }

    /// True when device memory is ordinary host memory (the simulated device), so CPU
    /// kernels may run on it directly. Real accelerators return `false`.
    fn host_accessible(&self) -> bool {
        false
    }

    /// Host ↔ device traffic since the allocator was made (all zero for allocators that do
    /// not count).
    fn transfer_stats(&self) -> TransferStats {
        TransferStats::default()
    }

    /// Declares that a kernel running on the device wrote `[ptr, ptr + n)` (used by the
    /// simulated device to tell legitimate writes from stray host writes).
    fn mark_written(&self, ptr: *const u8, n: usize) {
        let _ = (ptr, n);
    }
}

/// One allocator per device type. Lookups are cheap and thread-safe.
///
/// Unlike upstream's singleton, registries are values: a program's loader is given one,
/// so tests can use their own. [`DeviceRegistry::global`] is the process-wide default.
#[derive(Default)]
pub struct DeviceRegistry {
    slots: [RwLock<Option<Arc<dyn DeviceAllocator>>>; NUM_DEVICE_TYPES],
}

impl std::fmt::Debug for DeviceRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = [DeviceType::Cpu, DeviceType::Cuda]
            .into_iter()
            .filter(|t| self.get(*t).is_some())
            .map(|t| t.name())
            .collect();
        f.debug_struct("DeviceRegistry")
            .field("registered", &names)
            .finish()
    }
}

impl DeviceRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The process-wide registry.
    pub fn global() -> Arc<DeviceRegistry> {
        static GLOBAL: OnceLock<Arc<DeviceRegistry>> = OnceLock::new();
        Arc::clone(GLOBAL.get_or_init(|| Arc::new(DeviceRegistry::new())))
    }

    /// Registers `alloc` for its device type. A second registration for the same type is
    /// an `InvalidState` error (upstream aborts).
    pub fn register(&self, alloc: Arc<dyn DeviceAllocator>) -> Result<()> {
        let t = alloc.device_type();
        let mut slot = self.slots[t as usize]
            .write()
            .map_err(|_| Error::internal("device registry lock poisoned"))?;
        if slot.is_some() {
            return Err(Error::invalid_state(format!(
                "Allocator already registered for device type: {} ({})",
                t as i8,
                t.name()
            )));
        }
        *slot = Some(alloc);
        Ok(())
    }

    /// The allocator for a device type, if any.
    pub fn get(&self, t: DeviceType) -> Option<Arc<dyn DeviceAllocator>> {
        self.slots[t as usize].read().ok().and_then(|s| s.clone())
    }

    /// The allocator for a device type, or a `NotFound` error that says what to do.
    pub fn require(&self, t: DeviceType) -> Result<Arc<dyn DeviceAllocator>> {
        self.get(t).ok_or_else(|| {
            Error::not_found(format!(
                "no device allocator registered for {}; no {} device is available (try --simulate-device {})",
                t.name(),
                t.name().to_uppercase(),
                t.name()
            ))
        })
    }
}

/// An owned device allocation, freed exactly once through its allocator when dropped.
/// Move-only.
pub struct DeviceMemoryBuffer {
    ptr: *mut u8,
    size: usize,
    index: i8,
    allocator: Option<Arc<dyn DeviceAllocator>>,
}

// SAFETY: the buffer owns an opaque device address; allocators are `Send + Sync`.
unsafe impl Send for DeviceMemoryBuffer {}
// SAFETY: shared access only reads the address and size.
unsafe impl Sync for DeviceMemoryBuffer {}

impl Default for DeviceMemoryBuffer {
    fn default() -> Self {
        DeviceMemoryBuffer {
            ptr: std::ptr::null_mut(),
            size: 0,
            index: 0,
            allocator: None,
        }
    }
}

impl std::fmt::Debug for DeviceMemoryBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceMemoryBuffer")
            .field("ptr", &self.ptr)
            .field("size", &self.size)
            .field("index", &self.index)
            .finish()
    }
}

impl DeviceMemoryBuffer {
    /// Allocates `size` bytes on device `(t, index)` through `registry`. `NotFound` when no
    /// allocator is registered for `t`; allocator errors pass through unchanged.
    pub fn create(
        registry: &DeviceRegistry,
        size: usize,
        t: DeviceType,
        index: i8,
        alignment: usize,
    ) -> Result<Self> {
        let alloc = registry.require(t)?;
        let ptr = alloc.allocate(size, index, alignment)?;
        Ok(DeviceMemoryBuffer {
            ptr,
            size,
            index,
            allocator: Some(alloc),
        })
    }

    /// The device address (null when empty).
    pub fn data(&self) -> *mut u8 {
        self.ptr
    }
    /// Size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }
    /// Device index.
    pub fn index(&self) -> i8 {
        self.index
    }
    /// The allocator that owns the memory.
    pub fn allocator(&self) -> Option<&Arc<dyn DeviceAllocator>> {
        self.allocator.as_ref()
    }
}

impl Drop for DeviceMemoryBuffer {
    fn drop(&mut self) {
        if let Some(a) = self.allocator.take()
            && !self.ptr.is_null()
        {
            // A failed free cannot be reported from Drop; the allocator's own accounting
            // (and the leak tests) catch it.
            let _ = a.deallocate(self.ptr, self.index);
        }
    }
}
