//! CUDA graphs for `ExecutorBackend` delegates: the nested method's work on the device's
//! stream is captured once (thread-local capture mode) and replayed; after every
//! execution the device error word is checked. While profiling, a delegate's kernel calls
//! are timed with CUDA events on the same stream ([`EventTimer`]).

use crate::context::{CudaKernelContext, check_device_errors};
use crate::cuda_err;
use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaEvent, CudaGraph, CudaStream};
use etch_core::{
    Device, DeviceContext, DeviceExecHooks, DeviceGraph, DeviceOpTimer, DeviceRegistry, DeviceType,
    Error, Result,
};
use etch_devices::cuda::CudaAllocator;
use std::sync::Arc;

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
            Ok(Some(g)) => Ok(Box::new(Graph {
                graph: Some(g),
                index: device.index,
            })),
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
                Some(k) => k.check_errors(),
                None => check_device_errors(c, device.index),
            }
        })
    }

    fn op_timer(
        &self,
        devices: &DeviceRegistry,
        device: Device,
    ) -> Result<Option<Box<dyn DeviceOpTimer>>> {
        let stream = with_cuda(devices, |c| c.stream(device.index))?;
        Ok(Some(Box::new(EventTimer::new(stream))))
    }
}

/// Times a delegate's kernel calls with CUDA events recorded on the stream its kernels run
/// on (`etch bench --profile`): each mark records an event (created on first use and
/// reused by later executions), nothing waits until [`DeviceOpTimer::read`], which waits
/// for the last event and reads every mark's time after the first
/// (`cuEventElapsedTime`, about half a microsecond of resolution). The time between the
/// marks around a call is the device's time for the work the call queued.
pub struct EventTimer {
    stream: Arc<CudaStream>,
    events: Vec<CudaEvent>,
    /// Marks queued since the last reset or read.
    used: usize,
}

impl EventTimer {
    /// A timer for work queued on `stream`.
    pub fn new(stream: Arc<CudaStream>) -> Self {
        EventTimer {
            stream,
            events: Vec::new(),
            used: 0,
        }
    }
}

impl DeviceOpTimer for EventTimer {
    fn reset(&mut self) {
        self.used = 0;
    }

    fn mark(&mut self) -> Result<()> {
        if self.used == self.events.len() {
            let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
            let event = self.stream.context().new_event(flags);
            self.events
                .push(event.map_err(|e| cuda_err("create CUDA event", e))?);
        }
        self.events[self.used]
            .record(&self.stream)
            .map_err(|e| cuda_err("record CUDA event", e))?;
        self.used += 1;
        Ok(())
    }

    fn read(&mut self, out: &mut Vec<u64>) -> Result<()> {
        let marks = &self.events[..self.used.min(self.events.len())];
        self.used = 0;
        let Some(first) = marks.first() else {
            return Ok(());
        };
        for e in marks {
            // Waits for `e` (so the first call waits for the device), then reads the time.
            let ms = first
                .elapsed_ms(e)
                .map_err(|err| cuda_err("read CUDA event time", err))?;
            out.push(ms_to_ns(ms));
        }
        Ok(())
    }
}

/// Milliseconds from `cuEventElapsedTime` as whole nanoseconds (negative and NaN as 0).
fn ms_to_ns(ms: f32) -> u64 {
    (f64::from(ms) * 1e6).round().max(0.0) as u64
}

struct Graph {
    /// Taken (and destroyed) in `drop`, under the device's stream lock.
    graph: Option<CudaGraph>,
    index: i8,
}

impl Drop for Graph {
    fn drop(&mut self) {
        // Destroying a graph is not allowed while another thread captures on the device.
        let _stream = etch_core::lock_device(self.index);
        drop(self.graph.take());
    }
}

// SAFETY: a graph belongs to one delegate, which one thread executes at a time (a method is
// `&mut` while it runs); CUDA graph objects only need external serialisation.
unsafe impl Send for Graph {}

impl DeviceGraph for Graph {
    fn replay(&self) -> Result<()> {
        match &self.graph {
            Some(g) => g.launch().map_err(|e| cuda_err("graph launch", e)),
            None => Err(Error::internal("graph already destroyed")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ms_to_ns;

    #[test]
    fn event_times_to_nanoseconds() {
        assert_eq!(ms_to_ns(0.0), 0);
        assert_eq!(ms_to_ns(1.5), 1_500_000);
        assert_eq!(ms_to_ns(0.0005), 500);
        assert_eq!(ms_to_ns(-0.25), 0);
        assert_eq!(ms_to_ns(f32::NAN), 0);
    }
}
