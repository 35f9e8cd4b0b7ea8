//! Hooks a device's kernel crate gives the nested-program backend: recording a delegate's
//! device work once and replaying it (CUDA graphs), and reporting errors that kernels
//! record on the device.

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
}

/// Recorded device work, replayed with the same memory and arguments.
pub trait DeviceGraph: Send {
    /// Queues the recorded work again.
    fn replay(&self) -> Result<()>;
}
