//! CUDA graphs for `ExecutorBackend` delegates: the nested method's work on the device's
//! stream is captured once (thread-local capture mode) and replayed; after every
//! execution the device error word is checked.

use crate::context::{CudaKernelContext, check_device_errors};
use crate::cuda_err;
use cudarc::driver::CudaGraph;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use etch_core::{
    Device, DeviceContext, DeviceExecHooks, DeviceGraph, DeviceRegistry, DeviceType, Error, Result,
};
use etch_devices::cuda::CudaAllocator;

/// The CUDA hooks (register with `ExecutorBackend::with_device_hooks`).
#[derive(Default)]
pub struct CudaHooks;

fn with_cuda<R>(
    devices: &DeviceRegistry,
    f: impl FnOnce(&CudaAllocator) -> Result<R>,
) -> Result<R> {
    let a = devices.require(DeviceType::Cuda)?;
    let cuda = a
        .as_any()
        .downcast_ref::<CudaAllocator>()
        .ok_or_else(|| Error::not_supported("CUDA graphs need the CUDA allocator"))?;
    f(cuda)
}

impl DeviceExecHooks for CudaHooks {
    fn kernel_context(
        &self,
        devices: &DeviceRegistry,
        device: Device,
    ) -> Result<Option<DeviceContext>> {
        let k = with_cuda(devices, |c| CudaKernelContext::new(c, device.index))?;
        Ok(Some(std::sync::Arc::new(k)))
    }

    fn begin_capture(&self, devices: &DeviceRegistry, device: Device) -> Result<()> {
        let stream = with_cuda(devices, |c| c.stream(device.index))?;
        stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(|e| cuda_err("begin graph capture", e))
    }

    fn end_capture(
        &self,
        devices: &DeviceRegistry,
        device: Device,
    ) -> Result<Box<dyn DeviceGraph>> {
        let stream = with_cuda(devices, |c| c.stream(device.index))?;
        match stream.end_capture(CUgraphInstantiate_flags(0)) {
            Ok(Some(g)) => Ok(Box::new(Graph(g))),
            Ok(None) => Err(Error::internal("graph capture recorded nothing")),
            Err(e) => Err(cuda_err("graph capture", e)),
        }
    }

    fn after_execute(
        &self,
        devices: &DeviceRegistry,
        device: Device,
        context: Option<&DeviceContext>,
    ) -> Result<()> {
        with_cuda(devices, |c| {
            match context.and_then(|ctx| ctx.downcast_ref::<CudaKernelContext>()) {
                Some(k) => k.check_errors(c),
                None => check_device_errors(c, device.index),
            }
        })
    }
}

struct Graph(CudaGraph);

// SAFETY: a graph belongs to one delegate, which one thread executes at a time (a method is
// `&mut` while it runs); CUDA graph objects only need external serialisation.
unsafe impl Send for Graph {}

impl DeviceGraph for Graph {
    fn replay(&self) -> Result<()> {
        self.0.launch().map_err(|e| cuda_err("graph launch", e))
    }
}
