//! Memory a loaded method owns: planned arenas, staging buffers and device-resident
//! constants, on the host or on a device. Bytes reach device memory only through the
//! device's allocator.

use etch_core::{
    AlignedBuf, ByteSource, Device, DeviceAllocator, DeviceMemoryBuffer, DeviceRegistry, Error,
    HOST_ALIGNMENT, Result,
};
use std::sync::Arc;

/// Page-locked host memory from a device allocator, freed through it on drop.
pub struct PinnedHost {
    ptr: *mut u8,
    len: usize,
    alloc: Arc<dyn DeviceAllocator>,
}

// SAFETY: `PinnedHost` uniquely owns its allocation, like `AlignedBuf`.
unsafe impl Send for PinnedHost {}
// SAFETY: shared access hands out only the address.
unsafe impl Sync for PinnedHost {}

impl Drop for PinnedHost {
    fn drop(&mut self) {
        // A failed free cannot be reported from Drop.
        let _ = self.alloc.free_pinned_host(self.ptr);
    }
}

/// A block of memory on one device.
pub enum Buffer {
    /// Host memory.
    Host(AlignedBuf),
    /// Page-locked host memory, for host buffers that feed or receive device copies.
    Pinned(PinnedHost),
    /// Device memory, freed through its allocator on drop.
    Device {
        /// The allocation.
        buf: DeviceMemoryBuffer,
        /// Where it lives.
        device: Device,
    },
}

impl Buffer {
    /// Allocates `size` bytes on `device` (zeroed on the host; device memory is
    /// uninitialised unless the allocator zeroes it).
    pub fn allocate(size: usize, device: Device, registry: &DeviceRegistry) -> Result<Buffer> {
        if device.is_cpu() {
            return Ok(Buffer::Host(AlignedBuf::zeroed(size)?));
        }
        let buf =
            DeviceMemoryBuffer::create(registry, size, device.kind, device.index, HOST_ALIGNMENT)
                .map_err(|e| {
                Error::new(e.code(), format!("program needs {device}: {}", e.message()))
            })?;
        Ok(Buffer::Device { buf, device })
    }

    /// Allocates a planned arena of `size` zeroed bytes on `device`. Persistent state
    /// without initial data (a mutable buffer) starts at zero, as on the host: device
    /// memory is zeroed through the allocator (in chunks, at load only).
    pub fn allocate_arena(
        size: usize,
        device: Device,
        registry: &DeviceRegistry,
    ) -> Result<Buffer> {
        let buf = Buffer::allocate(size, device, registry)?;
        if !device.is_cpu() {
            const CHUNK: usize = 1 << 20;
            let zeros = vec![0u8; size.min(CHUNK)];
            let mut off = 0;
            while off < size {
                let n = (size - off).min(CHUNK);
                buf.write(off, &zeros[..n])?;
                off += n;
            }
        }
        Ok(buf)
    }

    /// Allocates `size` zeroed bytes of page-locked host memory through `alloc`, or plain
    /// host memory when the device has none.
    pub fn allocate_pinned(size: usize, alloc: &Arc<dyn DeviceAllocator>) -> Result<Buffer> {
        match alloc.allocate_pinned_host(size)? {
            Some(ptr) => {
                // SAFETY: a fresh allocation of at least `size` bytes.
                unsafe { std::ptr::write_bytes(ptr, 0, size) };
                Ok(Buffer::Pinned(PinnedHost {
                    ptr,
                    len: size,
                    alloc: Arc::clone(alloc),
                }))
            }
            None => Ok(Buffer::Host(AlignedBuf::zeroed(size)?)),
        }
    }

    /// Base address (a device address for device buffers). Kernels write through it.
    pub fn base(&self) -> *mut u8 {
        match self {
            Buffer::Host(b) => b.raw_ptr(),
            Buffer::Pinned(p) => p.ptr,
            Buffer::Device { buf, .. } => buf.data(),
        }
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        match self {
            Buffer::Host(b) => b.len(),
            Buffer::Pinned(p) => p.len,
            Buffer::Device { buf, .. } => buf.size(),
        }
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The device it lives on.
    pub fn device(&self) -> Device {
        match self {
            Buffer::Host(_) | Buffer::Pinned(_) => Device::CPU,
            Buffer::Device { device, .. } => *device,
        }
    }

    /// The allocator of a device buffer.
    pub fn allocator(&self) -> Option<&Arc<dyn DeviceAllocator>> {
        match self {
            Buffer::Host(_) | Buffer::Pinned(_) => None,
            Buffer::Device { buf, .. } => buf.allocator(),
        }
    }

    /// Copies host bytes to `offset`: a memcpy on the host, the allocator's host-to-device
    /// copy on a device.
    pub fn write(&self, offset: usize, bytes: &[u8]) -> Result<()> {
        offset
            .checked_add(bytes.len())
            .filter(|&e| e <= self.len())
            .ok_or_else(|| {
                Error::invalid_program(format!(
                    "{} bytes at offset {offset} overrun a {}-byte buffer",
                    bytes.len(),
                    self.len()
                ))
            })?;
        match self {
            Buffer::Host(_) | Buffer::Pinned(_) => {
                // SAFETY: `offset..end` lies inside the buffer (checked above); `bytes` is
                // program or caller memory, never this buffer.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        bytes.as_ptr(),
                        self.base().add(offset),
                        bytes.len(),
                    )
                };
                Ok(())
            }
            Buffer::Device { buf, device } => {
                if bytes.is_empty() {
                    return Ok(());
                }
                let alloc = buf
                    .allocator()
                    .ok_or_else(|| Error::internal("device buffer without an allocator"))?;
                // SAFETY: `offset + len <= size` was checked above, so the address stays
                // inside the allocation.
                let dst = unsafe { buf.data().add(offset) };
                alloc.copy_host_to_device(dst, bytes, device.index)
            }
        }
    }

    /// Copies the bytes of `src` to `offset`, produced piece by piece: straight into host
    /// memory, or through the allocator's [`DeviceAllocator::copy_host_to_device_from`] on
    /// a device (CUDA stages them through pinned memory), so a tensor assembled from
    /// several files or converted on the way is never built whole in host memory first.
    pub fn write_from(&self, offset: usize, src: &dyn ByteSource) -> Result<()> {
        let len = src.len();
        offset
            .checked_add(len)
            .filter(|&e| e <= self.len())
            .ok_or_else(|| {
                Error::invalid_program(format!(
                    "{len} bytes at offset {offset} overrun a {}-byte buffer",
                    self.len()
                ))
            })?;
        if len == 0 {
            return Ok(());
        }
        match self {
            Buffer::Host(_) | Buffer::Pinned(_) => {
                // SAFETY: `offset..offset + len` lies inside the buffer (checked above); the
                // source is other memory (a file, a program), never this buffer, and the
                // buffer is not read while the method loads.
                let dst = unsafe { std::slice::from_raw_parts_mut(self.base().add(offset), len) };
                src.read_into(0, dst)
            }
            Buffer::Device { buf, device } => {
                let alloc = buf
                    .allocator()
                    .ok_or_else(|| Error::internal("device buffer without an allocator"))?;
                // SAFETY: `offset + len <= size` was checked above, so the address stays
                // inside the allocation.
                let dst = unsafe { buf.data().add(offset) };
                alloc.copy_host_to_device_from(dst, src, device.index)
            }
        }
    }
}

/// Copies `nbytes` between two tensors' memory on any pair of devices, always through the
/// device allocators (never a host memcpy into device memory).
///
/// # Safety
/// `dst` and `src` must be valid for `nbytes` on their devices and must not overlap.
pub unsafe fn copy_between(
    registry: &DeviceRegistry,
    dst: *mut u8,
    dst_device: Device,
    src: *const u8,
    src_device: Device,
    nbytes: usize,
) -> Result<()> {
    if nbytes == 0 {
        return Ok(());
    }
    match (dst_device.is_cpu(), src_device.is_cpu()) {
        (true, true) => {
            // SAFETY: both are host memory valid for `nbytes` (caller's contract).
            unsafe { std::ptr::copy_nonoverlapping(src, dst, nbytes) };
            Ok(())
        }
        (false, true) => {
            let a = registry.require(dst_device.kind)?;
            // SAFETY: `src` is host memory valid for `nbytes`.
            let s = unsafe { std::slice::from_raw_parts(src, nbytes) };
            a.copy_host_to_device(dst, s, dst_device.index)
        }
        (true, false) => {
            let a = registry.require(src_device.kind)?;
            // SAFETY: `dst` is host memory valid for `nbytes`, not aliased elsewhere now.
            let d = unsafe { std::slice::from_raw_parts_mut(dst, nbytes) };
            a.copy_device_to_host(d, src, src_device.index)
        }
        (false, false) => {
            if dst_device.kind != src_device.kind {
                return Err(Error::not_supported(format!(
                    "no direct copy from {src_device} to {dst_device}"
                )));
            }
            let a = registry.require(dst_device.kind)?;
            a.copy_device_to_device(dst, dst_device.index, src, src_device.index, nbytes)
        }
    }
}

/// Planned arenas shared by every method of a module: one buffer per (device, ordinal of
/// the buffer among the method's buffers on that device), sized to the largest request
/// over all methods. Upstream refuses to share arenas once a program has device buffers;
/// etch shares them per device.
#[derive(Default)]
pub struct SharedArenas {
    buffers: std::collections::HashMap<(Device, usize), Arc<Buffer>>,
    /// True when only some buffers are shared (the declared shared state, see
    /// [`crate::shared_state`]); a method allocates the others itself.
    partial: bool,
}

impl SharedArenas {
    /// Allocates the shared arenas for the given methods' planned buffers.
    pub fn new(
        metas: &[crate::MethodMeta],
        registry: &DeviceRegistry,
        max_planned_bytes: Option<u64>,
    ) -> Result<SharedArenas> {
        let mut sizes: std::collections::HashMap<(Device, usize), u64> = Default::default();
        for meta in metas {
            let mut ordinal: std::collections::HashMap<Device, usize> = Default::default();
            for i in 0..meta.num_memory_planned_buffers() {
                let dev = meta.memory_planned_buffer_device(i)?;
                let k = ordinal.entry(dev).or_insert(0);
                let e = sizes.entry((dev, *k)).or_insert(0);
                *e = (*e).max(meta.memory_planned_buffer_size(i)?);
                *k += 1;
            }
        }
        let total = sizes.values().fold(0u64, |a, &b| a.saturating_add(b));
        if let Some(limit) = max_planned_bytes
            && total > limit
        {
            return Err(Error::memory_allocation_failed(format!(
                "the shared arenas need {total} bytes; the limit is {limit}"
            )));
        }
        let mut buffers = std::collections::HashMap::new();
        for ((dev, k), size) in sizes {
            let size = usize::try_from(size).map_err(|_| {
                Error::memory_allocation_failed(format!(
                    "shared arena of {size} bytes is too large"
                ))
            })?;
            buffers.insert(
                (dev, k),
                Arc::new(Buffer::allocate_arena(size, dev, registry)?),
            );
        }
        Ok(SharedArenas {
            buffers,
            partial: false,
        })
    }

    /// One shared host arena of `size` zeroed bytes for the shared-state buffer that a
    /// program declares ([`crate::shared_state::declared_shared_state`]); each method
    /// allocates its other buffers itself.
    pub fn shared_state(size: u64, registry: &DeviceRegistry) -> Result<SharedArenas> {
        let size = usize::try_from(size).map_err(|_| {
            Error::memory_allocation_failed(format!("shared state of {size} bytes is too large"))
        })?;
        let buf = Buffer::allocate_arena(size, Device::CPU, registry)?;
        let key = (Device::CPU, crate::shared_state::SHARED_STATE_BUFFER);
        Ok(SharedArenas {
            buffers: [(key, Arc::new(buf))].into_iter().collect(),
            partial: true,
        })
    }

    /// The arena for the `ordinal`-th buffer on `device`, or `None` when these arenas
    /// share only some buffers and not this one (the method allocates it).
    pub fn lookup(&self, device: Device, ordinal: usize, size: u64) -> Result<Option<Arc<Buffer>>> {
        if self.partial && !self.buffers.contains_key(&(device, ordinal)) {
            return Ok(None);
        }
        self.get(device, ordinal, size).map(Some)
    }

    /// The arena for the `ordinal`-th buffer on `device`, at least `size` bytes.
    pub fn get(&self, device: Device, ordinal: usize, size: u64) -> Result<Arc<Buffer>> {
        let b = self.buffers.get(&(device, ordinal)).ok_or_else(|| {
            Error::invalid_argument(format!(
                "no shared arena for buffer {ordinal} on {device} (the arenas were planned for other methods)"
            ))
        })?;
        if (b.len() as u64) < size {
            return Err(Error::invalid_argument(format!(
                "shared arena {ordinal} on {device} has {} bytes; the method needs {size}",
                b.len()
            )));
        }
        Ok(Arc::clone(b))
    }

    /// Number of shared arenas.
    pub fn len(&self) -> usize {
        self.buffers.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.buffers.is_empty()
    }
}
