//! `Method::set_instruction_limit` reaches the programs a method's delegates run (an
//! ExecutorBackend delegate's nested method), so a looping nested program is bounded too.

use etch::{
    Backend, BackendInitContext, BackendRegistry, CompileSpec, Delegate, KernelContext, Module,
    Result,
};
use std::sync::{Arc, Mutex};

/// The simulated device the fixtures' `cuda:0` buffers go to.
fn devices() -> Arc<etch::DeviceRegistry> {
    let r = etch::DeviceRegistry::new();
    r.register(Arc::new(etch::SimulatedAllocator::new(1)))
        .unwrap();
    Arc::new(r)
}

/// A backend standing in for "ExecutorBackend" whose delegates record the limits set.
struct Recording(Arc<Mutex<Vec<Option<u64>>>>);
struct RecordingDelegate(Arc<Mutex<Vec<Option<u64>>>>);

impl Backend for Recording {
    fn is_available(&self) -> bool {
        true
    }
    fn init(
        &self,
        _ctx: &BackendInitContext<'_>,
        _processed: &[u8],
        _specs: &[CompileSpec],
    ) -> Result<Box<dyn Delegate>> {
        Ok(Box::new(RecordingDelegate(self.0.clone())))
    }
}

impl Delegate for RecordingDelegate {
    fn execute(&mut self, _args: &mut KernelContext<'_>) -> Result<()> {
        Ok(())
    }
    fn set_instruction_limit(&mut self, jumps: Option<u64>) {
        self.0.lock().unwrap().push(jumps);
    }
}

#[test]
fn the_instruction_limit_reaches_every_delegate() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/device/two_delegates/model.pte"
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut reg = BackendRegistry::new();
    reg.register("ExecutorBackend", Arc::new(Recording(seen.clone())))
        .unwrap();
    let mut m = Module::from_file(path)
        .unwrap()
        .with_backends(Arc::new(reg))
        .with_devices(devices());
    let name = m.method_names()[0].clone();
    let method = m.method(&name).unwrap();
    method.set_instruction_limit(Some(7));
    method.set_instruction_limit(None);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [Some(7), Some(7), None, None],
        "two delegates, two calls"
    );
}

/// The real ExecutorBackend passes it on to its nested method (a straight-line program
/// here: the bound changes nothing, and the method still runs).
#[test]
fn executor_delegates_take_the_limit() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/device/one_delegate/model.pte"
    );
    let mut m = Module::from_file(path).unwrap().with_devices(devices());
    let name = m.method_names()[0].clone();
    let meta = m.method_meta(&name).unwrap();
    let inputs: Vec<etch::Value> = meta
        .inputs()
        .iter()
        .map(|i| {
            let t = i.tensor.as_ref().unwrap();
            etch::Value::Tensor(etch::Tensor::zeros(t.dtype, &t.sizes).unwrap())
        })
        .collect();
    let method = m.method(&name).unwrap();
    method.set_instruction_limit(Some(0));
    method.set_inputs(&inputs).unwrap();
    method.execute().unwrap();
}
