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

/// Work on a device's stream from several threads at once: a CUDA graph capture fails (and
/// poisons the capture) when another thread enqueues onto the stream being captured, and
/// every module in a process shares a device's stream. [`lock_device`] serialises that
/// work per device ordinal: a delegate holds it from binding its inputs to its error check
/// (capture included), and the allocator holds it for each copy. Reentrant, so a delegate's
/// own copies take it again on the same thread.
struct DeviceSlot {
    owner: std::sync::Mutex<(Option<std::thread::ThreadId>, usize)>,
    free: std::sync::Condvar,
}

const DEVICE_SLOTS: usize = 32;

fn device_slots() -> &'static [DeviceSlot] {
    static SLOTS: std::sync::OnceLock<Vec<DeviceSlot>> = std::sync::OnceLock::new();
    SLOTS.get_or_init(|| {
        (0..DEVICE_SLOTS)
            .map(|_| DeviceSlot {
                owner: std::sync::Mutex::new((None, 0)),
                free: std::sync::Condvar::new(),
            })
            .collect()
    })
}

/// Held work on one device ordinal (see [`lock_device`]); released when dropped.
pub struct DeviceGuard {
    slot: &'static DeviceSlot,
}

/// Locks device ordinal `index` (-1, the current device, shares ordinal 0's lock) for this
/// thread; reentrant.
pub fn lock_device(index: i8) -> DeviceGuard {
    let slot = &device_slots()[(index.max(0) as usize) % DEVICE_SLOTS];
    let me = std::thread::current().id();
    let mut st = slot.owner.lock().unwrap_or_else(|p| p.into_inner());
    while st.0.is_some_and(|o| o != me) {
        st = slot.free.wait(st).unwrap_or_else(|p| p.into_inner());
    }
    st.0 = Some(me);
    st.1 += 1;
    DeviceGuard { slot }
}

impl Drop for DeviceGuard {
    fn drop(&mut self) {
        let mut st = self.slot.owner.lock().unwrap_or_else(|p| p.into_inner());
        st.1 -= 1;
        if st.1 == 0 {
            st.0 = None;
            self.slot.free.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::lock_device;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn device_lock_is_reentrant_and_exclusive() {
        let g1 = lock_device(3);
        let g2 = lock_device(3); // same thread: no deadlock
        static INSIDE: AtomicUsize = AtomicUsize::new(0);
        let t = std::thread::spawn(|| {
            let _g = lock_device(3);
            INSIDE.fetch_add(1, Ordering::SeqCst);
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(INSIDE.load(Ordering::SeqCst), 0, "another thread got in");
        drop(g1);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(
            INSIDE.load(Ordering::SeqCst),
            0,
            "released while still held"
        );
        drop(g2);
        t.join().unwrap();
        assert_eq!(INSIDE.load(Ordering::SeqCst), 1);
        // Another ordinal is independent.
        let _a = lock_device(4);
        std::thread::spawn(|| drop(lock_device(5))).join().unwrap();
    }
}
