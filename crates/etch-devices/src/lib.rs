//! Device allocators for etch: the simulated device (tests, CI, `--simulate-device`), and
//! re-exports of the allocator abstractions defined in `etch-core` (the [`DeviceAllocator`]
//! trait, the [`DeviceRegistry`] and [`DeviceMemoryBuffer`]).
#![warn(missing_docs)]

#[cfg(feature = "cuda")]
pub mod cuda;
mod simulated;
pub mod staging;

pub use etch_core::alloc::{
    DEFAULT_ALIGNMENT, DeviceAllocator, DeviceMemoryBuffer, DeviceRegistry, StreamId,
};
pub use simulated::{POISON, SimStaging, SimStats, SimulatedAllocator};

#[cfg(test)]
mod tests {
    use super::*;
    use etch_core::DeviceType;
    use std::sync::Arc;

    #[test]
    fn registry_rejects_second_registration() {
        let r = DeviceRegistry::new();
        assert!(r.get(DeviceType::Cuda).is_none());
        assert_eq!(
            r.require(DeviceType::Cuda).err().map(|e| e.code()),
            Some(etch_core::ErrorCode::NotFound)
        );
        let a = Arc::new(SimulatedAllocator::new(2));
        r.register(a.clone()).unwrap();
        let e = r.register(a).expect_err("second registration fails");
        assert!(e.message().contains("Allocator already registered"));
        assert!(r.get(DeviceType::Cpu).is_none());
        assert_eq!(
            r.get(DeviceType::Cuda).unwrap().device_type(),
            DeviceType::Cuda
        );
    }

    #[test]
    fn buffer_frees_exactly_once() {
        let r = DeviceRegistry::new();
        let a = Arc::new(SimulatedAllocator::new(1));
        r.register(a.clone()).unwrap();
        {
            let b = DeviceMemoryBuffer::create(&r, 1024, DeviceType::Cuda, 0, 512).unwrap();
            assert_eq!(b.size(), 1024);
            assert_eq!(b.data() as usize % 512, 0);
            assert_eq!(a.stats().live_allocations, 1);
            let moved = b;
            assert_eq!(a.stats().live_allocations, 1);
            drop(moved);
        }
        let s = a.stats();
        assert_eq!(
            (s.live_allocations, s.live_bytes, s.allocations, s.frees),
            (0, 0, 1, 1)
        );
        let e = DeviceMemoryBuffer::create(&r, 8, DeviceType::Cpu, 0, 8).unwrap_err();
        assert_eq!(e.code(), etch_core::ErrorCode::NotFound);
        let d = DeviceMemoryBuffer::default();
        assert!(d.data().is_null() && d.size() == 0);
    }
}
