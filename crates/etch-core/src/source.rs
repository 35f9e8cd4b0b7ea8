//! [`ByteSource`]: bytes produced on demand, so that a copy to a device need not first
//! build them in host memory (a weight stacked from several memory-mapped files, or
//! converted to another dtype on the way).

use crate::{Error, Result};

/// Bytes that a copy reads piece by piece: `[offset, offset + n)` at a time, in any order,
/// possibly from several threads at once.
///
/// A plain byte slice is a source; a checkpoint describes a tensor it would otherwise
/// have to build (stacked experts, a converted dtype) as one, and device allocators copy
/// it through their staging memory chunk by chunk
/// ([`crate::DeviceAllocator::copy_host_to_device_from`]), so no host copy of the whole
/// tensor is ever made.
pub trait ByteSource: Sync {
    /// Total number of bytes.
    fn len(&self) -> usize;

    /// True when there are no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes bytes `[offset, offset + dst.len())` into `dst`. Callers ask for ranges inside
    /// `0..len()` whose ends are multiples of 64 bytes (or `len()` itself); a range outside
    /// is an error, never a panic. May be called concurrently for disjoint ranges.
    fn read_into(&self, offset: usize, dst: &mut [u8]) -> Result<()>;

    /// The bytes as one host slice, when they are stored that way (no assembly, no
    /// conversion): copies may then read them directly.
    fn as_slice(&self) -> Option<&[u8]> {
        None
    }

    /// A hint that `[offset, offset + len)` will be read soon (e.g. `madvise(WILLNEED)` on
    /// the memory-mapped files behind it, so the page cache reads ahead). Never fails.
    fn prefetch(&self, offset: usize, len: usize) {
        let _ = (offset, len);
    }
}

/// The range `[offset, offset + n)` of a source of `len` bytes, or an `Internal` error.
pub fn checked_source_range(offset: usize, n: usize, len: usize) -> Result<std::ops::Range<usize>> {
    offset
        .checked_add(n)
        .filter(|&end| end <= len)
        .map(|end| offset..end)
        .ok_or_else(|| {
            Error::internal(format!(
                "read of {n} bytes at offset {offset} from a source of {len} bytes"
            ))
        })
}

impl ByteSource for [u8] {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }
    fn read_into(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        let r = checked_source_range(offset, dst.len(), <[u8]>::len(self))?;
        dst.copy_from_slice(&self[r]);
        Ok(())
    }
    fn as_slice(&self) -> Option<&[u8]> {
        Some(self)
    }
}

impl<T: ByteSource + ?Sized> ByteSource for &T {
    fn len(&self) -> usize {
        (**self).len()
    }
    fn read_into(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        (**self).read_into(offset, dst)
    }
    fn as_slice(&self) -> Option<&[u8]> {
        (**self).as_slice()
    }
    fn prefetch(&self, offset: usize, len: usize) {
        (**self).prefetch(offset, len)
    }
}

impl<T: ByteSource + ?Sized> ByteSource for Box<T> {
    fn len(&self) -> usize {
        (**self).len()
    }
    fn read_into(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        (**self).read_into(offset, dst)
    }
    fn as_slice(&self) -> Option<&[u8]> {
        (**self).as_slice()
    }
    fn prefetch(&self, offset: usize, len: usize) {
        (**self).prefetch(offset, len)
    }
}

/// The first `len` bytes of another source (a blob may be longer than the tensor it
/// holds: segments are padded).
pub struct Prefix<'a> {
    inner: &'a dyn ByteSource,
    len: usize,
}

impl<'a> Prefix<'a> {
    /// The first `len` bytes of `inner`; `InvalidProgram` when it is shorter.
    pub fn new(inner: &'a dyn ByteSource, len: usize) -> Result<Self> {
        if inner.len() < len {
            return Err(Error::invalid_program(format!(
                "{} bytes of data where {len} are needed",
                inner.len()
            )));
        }
        Ok(Prefix { inner, len })
    }
}

impl ByteSource for Prefix<'_> {
    fn len(&self) -> usize {
        self.len
    }
    fn read_into(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        checked_source_range(offset, dst.len(), self.len)?;
        self.inner.read_into(offset, dst)
    }
    fn as_slice(&self) -> Option<&[u8]> {
        self.inner.as_slice().and_then(|s| s.get(..self.len))
    }
    fn prefetch(&self, offset: usize, len: usize) {
        self.inner
            .prefetch(offset, len.min(self.len.saturating_sub(offset)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DeviceAllocator, DeviceType};
    use std::sync::Mutex;

    /// "Device" memory in a host vector at address 0x1000, through the trait's defaults.
    struct Vram(Mutex<Vec<u8>>);

    impl DeviceAllocator for Vram {
        fn device_type(&self) -> DeviceType {
            DeviceType::Cuda
        }
        fn allocate(&self, _: usize, _: i8, _: usize) -> Result<*mut u8> {
            Ok(0x1000 as *mut u8)
        }
        fn deallocate(&self, _: *mut u8, _: i8) -> Result<()> {
            Ok(())
        }
        fn copy_host_to_device(&self, dst: *mut u8, src: &[u8], _: i8) -> Result<()> {
            let at = dst as usize - 0x1000;
            self.0.lock().unwrap()[at..at + src.len()].copy_from_slice(src);
            Ok(())
        }
        fn copy_device_to_host(&self, _: &mut [u8], _: *const u8, _: i8) -> Result<()> {
            Ok(())
        }
        fn copy_device_to_device(
            &self,
            _: *mut u8,
            _: i8,
            _: *const u8,
            _: i8,
            _: usize,
        ) -> Result<()> {
            Ok(())
        }
    }

    /// Byte `i` is `i / 7`, not stored anywhere.
    struct Counting(usize);

    impl ByteSource for Counting {
        fn len(&self) -> usize {
            self.0
        }
        fn read_into(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
            checked_source_range(offset, dst.len(), self.0)?;
            for (k, d) in dst.iter_mut().enumerate() {
                *d = ((offset + k) / 7) as u8;
            }
            Ok(())
        }
    }

    #[test]
    fn the_default_copy_goes_through_a_bounded_host_buffer() {
        let n = crate::alloc::SOURCE_CHUNK * 2 + 123;
        let v = Vram(Mutex::new(vec![0; n]));
        let dst = v.allocate(n, 0, 8).unwrap();
        v.copy_host_to_device_from(dst, &Counting(n), 0).unwrap();
        let got = v.0.lock().unwrap();
        assert!(got.iter().enumerate().all(|(i, &b)| b == (i / 7) as u8));
        drop(got);
        let bytes = [5u8; 9];
        v.copy_host_to_device_from(dst, &&bytes[..], 0).unwrap();
        assert_eq!(
            v.0.lock().unwrap()[..10],
            [5, 5, 5, 5, 5, 5, 5, 5, 5, (9 / 7) as u8]
        );
    }

    #[test]
    fn slices_and_prefixes_read_ranges_and_reject_overruns() {
        let bytes: Vec<u8> = (0..100).collect();
        let s: &[u8] = &bytes;
        let mut d = [0u8; 4];
        s.read_into(10, &mut d).unwrap();
        assert_eq!(d, [10, 11, 12, 13]);
        assert!(s.read_into(98, &mut d).is_err());
        assert!(s.read_into(usize::MAX, &mut d).is_err());
        let p = Prefix::new(&s, 50).unwrap();
        assert_eq!(p.len(), 50);
        assert_eq!(p.as_slice().map(<[u8]>::len), Some(50));
        assert!(p.read_into(48, &mut d).is_err());
        p.read_into(46, &mut d).unwrap();
        assert_eq!(d, [46, 47, 48, 49]);
        assert!(Prefix::new(&s, 101).is_err());
    }
}
