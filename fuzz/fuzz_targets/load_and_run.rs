//! Fuzzes the loader and executor: any bytes must load, run and fail without panicking.
//! Seed the corpus with the fixtures: `mkdir -p corpus/load_and_run &&
//! cp ../tests/fixtures/*/model.pte corpus/load_and_run/`.
#![no_main]

use etch::{Module, Tag, Tensor, Value};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(module) = Module::from_bytes(data) else { return };
    let registry = etch::DeviceRegistry::new();
    let _ = registry.register(std::sync::Arc::new(etch::SimulatedAllocator::new(2)));
    let mut module = module
        .with_max_planned_bytes(Some(256 << 20))
        .with_devices(std::sync::Arc::new(registry));
    for name in module.method_names().to_vec() {
        let Ok(meta) = module.method_meta(&name) else { continue };
        let inputs: Vec<Value> = meta
            .inputs()
            .iter()
            .map(|i| match (&i.tag, &i.tensor) {
                (Tag::Tensor, Some(t)) if t.nbytes <= 1 << 20 => Tensor::zeros(t.dtype, &t.sizes)
                    .map(Value::Tensor)
                    .unwrap_or(Value::None),
                (Tag::Int, _) => Value::Int(1),
                (Tag::Double, _) => Value::Double(1.0),
                (Tag::Bool, _) => Value::Bool(true),
                _ => Value::None,
            })
            .collect();
        let Ok(method) = module.method(&name) else { continue };
        method.set_instruction_limit(Some(10_000));
        if method.set_inputs(&inputs).is_ok() && method.execute().is_ok() {
            let _ = method.output_values();
        }
    }
});
