//! The CUDA allocator on a real GPU. Without a CUDA driver (CI, this machine) every test
//! prints that it was skipped and returns; `scripts/gpu-test.sh` builds these for the H200.

#![cfg(feature = "cuda")]

use etch_core::{DeviceAllocator, DeviceMemoryBuffer, DeviceRegistry, DeviceType, ErrorCode};
use etch_devices::cuda::{CudaAllocator, cuda_for_tests};
use std::sync::{Arc, OnceLock};

fn cuda() -> Option<&'static CudaAllocator> {
    static A: OnceLock<Option<CudaAllocator>> = OnceLock::new();
    // ETCH_REQUIRE_CUDA=1 turns a missing device into a failure.
    A.get_or_init(|| cuda_for_tests().unwrap()).as_ref()
}

/// The device under test: `ETCH_CUDA_DEVICE` (default 0), so the suite runs on every GPU.
fn ix() -> i8 {
    std::env::var("ETCH_CUDA_DEVICE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn devices_are_listed() {
    let Some(a) = cuda() else { return };
    let d = a.devices().unwrap();
    assert!(!d.is_empty());
    for x in &d {
        assert!(x.total_bytes > 0 && x.free_bytes <= x.total_bytes);
        eprintln!("{x:?}");
    }
}

#[test]
fn copies_round_trip_bit_exactly_from_1_byte_to_1_gib() {
    let Some(a) = cuda() else { return };
    let mut sizes = vec![
        1usize,
        3,
        7,
        255,
        4096,
        4097,
        65_537,
        1 << 20,
        (1 << 20) + 13,
        16 << 20,
    ];
    sizes.push(1 << 30);
    for &n in &sizes {
        for offset in [0usize, 1, 13] {
            if n == 1 << 30 && offset != 0 {
                continue;
            }
            let p = a.allocate(n + offset, ix(), 256).unwrap();
            // SAFETY: `offset` lies inside the allocation of `n + offset` bytes.
            let dst = unsafe { p.add(offset) };
            let src = pattern(n, offset as u8);
            a.copy_host_to_device(dst, &src, ix()).unwrap();
            let q = a.allocate(n, ix(), 8).unwrap();
            a.copy_device_to_device(q, ix(), dst, ix(), n).unwrap();
            let mut back = vec![0u8; n];
            a.copy_device_to_host(&mut back, q, ix()).unwrap();
            assert!(back == src, "size {n} offset {offset}: mismatch");
            a.deallocate(p, ix()).unwrap();
            a.deallocate(q, ix()).unwrap();
        }
    }
}

#[test]
fn error_cases_are_errors() {
    let Some(a) = cuda() else { return };
    let n = a.num_devices() as i8;
    assert_eq!(
        a.allocate(64, ix(), 3).unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        a.allocate(64, ix(), 512).unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        a.allocate(64, -2, 8).unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    assert_eq!(
        a.allocate(64, n, 8).unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    // -1 is the current device.
    let p = a.allocate(64, -1, 8).unwrap();
    a.deallocate(p, -1).unwrap();
    // Null pointers are rejected before any zero-size shortcut.
    assert_eq!(
        a.copy_host_to_device(std::ptr::null_mut(), &[1, 2], 0)
            .unwrap_err()
            .code(),
        ErrorCode::InvalidArgument
    );
    assert!(a.deallocate(std::ptr::null_mut(), ix()).is_err());
    // Out of memory: an error with the requested and free bytes, never an abort.
    let e = a.allocate(1 << 50, ix(), 8).unwrap_err();
    assert_eq!(e.code(), ErrorCode::MemoryAllocationFailed);
    assert!(e.message().contains("free"), "{e}");
    // A host pointer is not device memory.
    let host = [0u8; 16];
    let mut out = [0u8; 16];
    assert!(
        a.copy_device_to_host(&mut out, host.as_ptr(), ix())
            .is_err()
    );
}

#[test]
fn accounting_and_no_leaks() {
    let Some(a) = cuda() else { return };
    let (free0, _) = a.mem_info(ix()).unwrap();
    let registry = DeviceRegistry::new();
    // Register a second handle to the same allocator type in a private registry.
    registry
        .register(Arc::new(CudaAllocator::new().unwrap()))
        .unwrap();
    {
        let bufs: Vec<_> = (0..16)
            .map(|_| {
                DeviceMemoryBuffer::create(&registry, 64 << 20, DeviceType::Cuda, ix(), 256)
                    .unwrap()
            })
            .collect();
        let (free1, _) = a.mem_info(ix()).unwrap();
        assert!(free0 - free1 >= 16 * (64 << 20), "{free0} -> {free1}");
        drop(bufs);
    }
    let (free2, _) = a.mem_info(ix()).unwrap();
    // The driver may keep a little for itself; 16 × 64 MiB must be back.
    assert!(free2 + (8 << 20) >= free0, "leaked: {free0} -> {free2}");
}

#[test]
fn several_threads_use_the_allocator() {
    let Some(a) = cuda() else { return };
    std::thread::scope(|s| {
        for t in 0..8u8 {
            s.spawn(move || {
                for i in 0..50usize {
                    let n = 1000 + i * 37 + t as usize;
                    let p = a.allocate(n, ix(), 16).unwrap();
                    let src = pattern(n, t);
                    a.copy_host_to_device(p, &src, ix()).unwrap();
                    let mut back = vec![0u8; n];
                    a.copy_device_to_host(&mut back, p, ix()).unwrap();
                    assert_eq!(back, src);
                    a.deallocate(p, ix()).unwrap();
                }
            });
        }
    });
}

#[test]
fn pinned_memory_round_trips() {
    let Some(a) = cuda() else { return };
    let n = 8 << 20;
    let h = a.alloc_pinned(n).unwrap();
    // SAFETY: `h` is a fresh pinned allocation of `n` bytes.
    let hs = unsafe { std::slice::from_raw_parts_mut(h, n) };
    hs.copy_from_slice(&pattern(n, 9));
    let d = a.allocate(n, ix(), 256).unwrap();
    a.copy_host_to_device(d, hs, ix()).unwrap();
    let mut back = vec![0u8; n];
    a.copy_device_to_host(&mut back, d, ix()).unwrap();
    assert!(back == hs);
    a.deallocate(d, ix()).unwrap();
    a.free_pinned(h).unwrap();
}

/// A source whose byte `i` is `f(i)`, produced on demand (like a stacked checkpoint
/// tensor), failing at byte `fail_at` if set.
struct Produced {
    len: usize,
    fail_at: Option<usize>,
}

fn produced_byte(i: usize) -> u8 {
    (i.wrapping_mul(131) ^ (i >> 12)) as u8
}

impl etch_core::ByteSource for Produced {
    fn len(&self) -> usize {
        self.len
    }
    fn read_into(&self, offset: usize, dst: &mut [u8]) -> etch_core::Result<()> {
        if self
            .fail_at
            .is_some_and(|f| (offset..offset + dst.len()).contains(&f))
        {
            return Err(etch_core::Error::access_failed("injected read failure"));
        }
        for (k, d) in dst.iter_mut().enumerate() {
            *d = produced_byte(offset + k);
        }
        Ok(())
    }
}

#[test]
fn staged_copies_from_a_producer_arrive_bit_exactly_and_errors_leave_staging_usable() {
    let Some(a) = cuda() else { return };
    for n in [1usize, 4097, (16 << 20) + 13, 300 << 20] {
        let p = a.allocate(n, ix(), 256).unwrap();
        a.copy_host_to_device_from(
            p,
            &Produced {
                len: n,
                fail_at: None,
            },
            ix(),
        )
        .unwrap();
        let mut back = vec![0u8; n];
        a.copy_device_to_host(&mut back, p, ix()).unwrap();
        assert!(
            back.iter().enumerate().all(|(i, &b)| b == produced_byte(i)),
            "size {n}: mismatch"
        );
        // A failing source: its error comes back, and the next copy works.
        if n > 1 {
            let bad = Produced {
                len: n,
                fail_at: Some(n / 2),
            };
            let e = a.copy_host_to_device_from(p, &bad, ix()).unwrap_err();
            assert!(e.message().contains("injected read failure"), "{e}");
        }
        a.deallocate(p, ix()).unwrap();
    }
    // The buffers are made again on demand.
    a.release_staging().unwrap();
}
