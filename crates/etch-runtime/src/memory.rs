//! Memory a loaded method owns: planned arenas, staging buffers and device-resident
//! constants, on the host or on a device. Bytes reach device memory only through the
//! device's allocator.

use etch_core::{
    AlignedBuf, Device, DeviceAllocator, DeviceMemoryBuffer, DeviceRegistry, Error, HOST_ALIGNMENT,
    Result,
};
use std::sync::Arc;

/// A block of memory on one device.
pub enum Buffer {
    /// Host memory.
    Host(AlignedBuf),
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

    /// Base address (a device address for device buffers).
    pub fn base(&mut self) -> *mut u8 {
        match self {
            Buffer::Host(b) => b.as_mut_ptr(),
            Buffer::Device { buf, .. } => buf.data(),
        }
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        match self {
            Buffer::Host(b) => b.len(),
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
            Buffer::Host(_) => Device::CPU,
            Buffer::Device { device, .. } => *device,
        }
    }

    /// The allocator of a device buffer.
    pub fn allocator(&self) -> Option<&Arc<dyn DeviceAllocator>> {
        match self {
            Buffer::Host(_) => None,
            Buffer::Device { buf, .. } => buf.allocator(),
        }
    }

    /// Copies host bytes to `offset`: a memcpy on the host, the allocator's host-to-device
    /// copy on a device.
    pub fn write(&mut self, offset: usize, bytes: &[u8]) -> Result<()> {
        let end = offset
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
            Buffer::Host(b) => {
                b.as_mut_slice()[offset..end].copy_from_slice(bytes);
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
