//! `Tensor::copy_from`: copies into a tensor's own memory through the allocators (host ↔
//! device, device ↔ device on the simulated device), with an element offset, and refuses
//! to write device memory a clone shares.

use etch::{Device, DeviceRegistry, ScalarType, SimulatedAllocator, Tensor};
use std::sync::Arc;

#[test]
fn copy_from_moves_elements_between_host_and_device_without_allocating() {
    let reg = DeviceRegistry::new();
    reg.register(Arc::new(SimulatedAllocator::new(1))).unwrap();
    let dev = Device::cuda(0);
    let table = Tensor::from_slice_on(&[10i64, 11, 12, 13, 14], &[5], dev, &reg).unwrap();
    let mut one = Tensor::empty_on(ScalarType::Long, &[1], dev, &reg).unwrap();
    for (row, want) in [(0, 10), (3, 13), (4, 14)] {
        one.copy_from(&table, row).unwrap(); // device -> device
        assert_eq!(one.to_cpu().unwrap().to_vec::<i64>().unwrap(), [want]);
    }
    let mut host = Tensor::zeros(ScalarType::Long, &[2]).unwrap();
    host.copy_from(&table, 1).unwrap(); // device -> host
    assert_eq!(host.to_vec::<i64>().unwrap(), [11, 12]);
    let src = Tensor::from_slice(&[7i64], &[1]).unwrap();
    one.copy_from(&src, 0).unwrap(); // host -> device
    assert_eq!(one.to_cpu().unwrap().to_vec::<i64>().unwrap(), [7]);
    // Past the end, another dtype: errors.
    assert!(one.copy_from(&table, 5).is_err());
    assert!(host.copy_from(&table, 4).is_err());
    let f = Tensor::from_slice(&[1.0f32], &[1]).unwrap();
    assert!(one.copy_from(&f, 0).is_err());
    // A clone shares the device memory: writing it is refused while the clone lives.
    let clone = one.clone();
    let err = one.copy_from(&src, 0).unwrap_err();
    assert!(err.to_string().contains("shared with a clone"), "{err}");
    drop(clone);
    one.copy_from(&src, 0).unwrap();
}
