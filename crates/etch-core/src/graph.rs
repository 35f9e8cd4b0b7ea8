//! Hooks a device's kernel crate gives the nested-program backend: recording a delegate's
//! device work once and replaying it (CUDA graphs), reporting errors that kernels
//! record on the device, and timing kernel calls on the device (the profiler).

use crate::{Device, DeviceRegistry, Result};

/// A device context made for one delegate's kernels.
pub type DeviceContext = std::sync::Arc<dyn std::any::Any + Send + Sync>;

/// Per-device-type hooks around a delegate's execution.
pub trait DeviceExecHooks: Send + Sync {
    /// The context the kernels of a delegate on `device` get with every call (made once,
    /// when the delegate loads); `None` when the kernels need none.
    fn kernel_context(
        &self,
        devices: &DeviceRegistry,
        device: Device,
    ) -> Result<Option<DeviceContext>> {
        let _ = (devices, device);
        Ok(None)
    }
    /// Starts recording the work queued on `device` by this thread.
    fn begin_capture(&self, devices: &DeviceRegistry, device: Device) -> Result<()>;
    /// Ends the recording; an error when the work could not be recorded (for example, a
    /// kernel waited for the device). The recorded work has not run yet.
    fn end_capture(&self, devices: &DeviceRegistry, device: Device)
    -> Result<Box<dyn DeviceGraph>>;
    /// Called after every execution of a delegate on `device` (with the context its
    /// kernels got): returns the first error a kernel recorded on the device (e.g. an
    /// index out of range), waiting for the device.
    fn after_execute(
        &self,
        devices: &DeviceRegistry,
        device: Device,
        context: Option<&DeviceContext>,
    ) -> Result<()>;
    /// A timer for the kernel calls of a delegate on `device` (`etch bench --profile`);
    /// `None` (the default) when the device has none, and each call is then timed on the
    /// host, waiting for the device after it.
    fn op_timer(
        &self,
        devices: &DeviceRegistry,
        device: Device,
    ) -> Result<Option<Box<dyn DeviceOpTimer>>> {
        let _ = (devices, device);
        Ok(None)
    }
}

/// Times kernel calls on a device without waiting for it after each call: the profiler
/// queues a mark on the device's stream before and after every call, and reads the marks
/// back once the execution is done (CUDA events on CUDA). What is measured is the time the
/// device spent between the marks, not the time the host took to queue the work.
pub trait DeviceOpTimer: Send {
    /// Forgets the marks queued so far (an execution that failed before [`Self::read`]).
    fn reset(&mut self);
    /// Queues a mark on the device's stream; does not wait.
    fn mark(&mut self) -> Result<()>;
    /// Waits for the last mark, appends each mark's time in nanoseconds after the first
    /// mark to `out`, in order, and forgets the marks.
    fn read(&mut self, out: &mut Vec<u64>) -> Result<()>;
}

/// Recorded device work, replayed with the same memory and arguments.
pub trait DeviceGraph: Send {
    /// Queues the recorded work again.
    fn replay(&self) -> Result<()>;
}
