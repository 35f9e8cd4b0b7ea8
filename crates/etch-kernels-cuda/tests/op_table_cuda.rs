//! The per-operator PyTorch table (etch-kernels/tests/op_table.json) replayed against the
//! CUDA kernels on a real GPU: inputs are uploaded, each CUDA kernel runs, outputs come
//! back and are compared at the table's tolerances; cases PyTorch rejects must be errors
//! (argument checks, or errors the kernels record on the device). Skipped without a GPU
//! unless `ETCH_REQUIRE_CUDA=1`.

#[path = "../../etch-kernels/tests/op_table_support/mod.rs"]
mod op_table_support;

use etch_core::{Device, DeviceMemoryBuffer, DeviceRegistry, DeviceType, EValue, TensorImpl};
use etch_devices::cuda::{CudaAllocator, cuda_for_tests};
use op_table_support::{Built, Target, replay};
use std::sync::{Arc, Mutex};

struct Cuda {
    reg: DeviceRegistry,
    alloc: Arc<CudaAllocator>,
    /// Device buffers of the current case (dropped when the next case is placed).
    held: Mutex<Vec<DeviceMemoryBuffer>>,
}

impl Target for Cuda {
    fn place(&self, b: &mut Built) {
        let mut held = self.held.lock().unwrap();
        held.clear();
        for v in b.values.iter_mut() {
            let EValue::Tensor(t) = v else { continue };
            let cap = t.capacity().max(16);
            let buf = DeviceMemoryBuffer::create(&self.reg, cap, DeviceType::Cuda, 0, 256)
                .expect("device allocation");
            // SAFETY: the case's host buffer holds `capacity` bytes at the data pointer.
            let host = unsafe { std::slice::from_raw_parts(t.data_ptr(), t.capacity()) };
            use etch_core::DeviceAllocator;
            self.alloc
                .copy_host_to_device(buf.data(), host, 0)
                .expect("upload");
            let order: Vec<u8> = t.dim_order().to_vec();
            *t = TensorImpl::new(
                t.dtype(),
                t.sizes(),
                Some(&order),
                t.dynamism(),
                Device::cuda(0),
                buf.data(),
                t.capacity(),
            )
            .expect("device tensor");
            held.push(buf);
        }
    }
    fn devices(&self) -> Option<&DeviceRegistry> {
        Some(&self.reg)
    }
    fn finish(&self) -> etch_core::Result<()> {
        etch_kernels_cuda::check_device_errors(&self.alloc, 0)
    }
    fn read(&self, t: &TensorImpl) -> Vec<u8> {
        use etch_core::DeviceAllocator;
        let mut v = vec![0u8; t.nbytes()];
        if !v.is_empty() {
            self.alloc
                .copy_device_to_host(&mut v, t.data_ptr(), 0)
                .expect("download");
        }
        v
    }
}

#[test]
fn cuda_kernels_match_pytorch_op_table() {
    let Some(alloc) = cuda_for_tests().unwrap() else {
        return;
    };
    let alloc = Arc::new(alloc);
    let reg = DeviceRegistry::new();
    reg.register(alloc.clone()).unwrap();
    let target = Cuda {
        reg,
        alloc,
        held: Mutex::new(Vec::new()),
    };
    let kernels = etch_kernels_cuda::cuda_registry();
    let r = replay(&kernels, &target);
    eprintln!(
        "CUDA: {} cases run: {} elements compared, {} error cases; {} failures",
        r.cases,
        r.compared,
        r.errors,
        r.failures.len()
    );
    let skipped: usize = r.missing.iter().map(|(_, n)| n).sum();
    eprintln!(
        "{} operators of the table ({skipped} cases) have no CUDA kernel: {}",
        r.missing.len(),
        r.missing
            .iter()
            .map(|(o, _)| o.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    for f in &r.failures {
        eprintln!("FAIL {f}");
    }
    assert!(
        r.failures.is_empty(),
        "{} CUDA cases failed",
        r.failures.len()
    );
}
