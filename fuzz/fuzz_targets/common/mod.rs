//! The fuzz targets' harnesses, one function per target, shared with
//! `tests/fuzz_regressions.rs` (which includes this file) so that a kept input replays
//! exactly what the fuzzer ran. Every harness ignores errors: a panic, abort or hang is
//! what the fuzzer looks for. Loops in programs are bounded by [`INSTRUCTION_LIMIT`].

#![allow(dead_code)]

pub mod xnnpack;

use etch::compiler::{LowerOptions, MethodSelection, PlanOptions, SupportedOps, lower, replan};
use etch::{
    Device, Module, NamedDataMap, Program, ProgramParts, PtdFile, Safetensors, ScalarType, Tag,
    Tensor, TensorLayout, Value, WeightOptions, WriteOptions,
};
use etch_format::DataSource;
use std::sync::{Arc, OnceLock};

/// Jumps each method may take per call (`Method::set_instruction_limit`): keeps loops in
/// fuzzed programs short.
pub const INSTRUCTION_LIMIT: u64 = 10_000;

/// Gives `module` a simulated CUDA device and a planned-memory limit, then loads and runs
/// every method once with zero inputs of the declared shapes.
pub fn exercise(module: Module) {
    let registry = etch::DeviceRegistry::new();
    let _ = registry.register(Arc::new(etch::SimulatedAllocator::new(2)));
    let mut module = module
        .with_max_planned_bytes(Some(256 << 20))
        .with_devices(Arc::new(registry));
    for name in module.method_names().to_vec() {
        let Ok(meta) = module.method_meta(&name) else {
            continue;
        };
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
        let Ok(method) = module.method(&name) else {
            continue;
        };
        method.set_instruction_limit(Some(INSTRUCTION_LIMIT));
        if method.set_inputs(&inputs).is_ok() && method.execute().is_ok() {
            let _ = method.output_values();
        }
    }
}

/// Reads the bytes of `src` (at most 4 MiB) in 4 KiB chunks, as a copy to a device does.
pub fn drain(src: &dyn etch::ByteSource) {
    let len = src.len().min(4 << 20);
    let mut buf = vec![0u8; 4096];
    let mut off = 0;
    while off < len {
        let n = (len - off).min(buf.len());
        if src.read_into(off, &mut buf[..n]).is_err() {
            return;
        }
        off += n;
    }
}

/// `load_and_run`: any bytes must load as a `.pte`, run and fail without panicking.
pub fn load_and_run(data: &[u8]) {
    if let Ok(module) = Module::from_bytes(data) {
        exercise(module);
    }
}

/// Programs exported with external constants (their `.ptd` files seed the `ptd` corpus).
const PTD_PROGRAMS: [&[u8]; 2] = [
    include_bytes!("../../../tests/fixtures/mlp_external/model.pte"),
    include_bytes!("../../../tests/fixtures/upstream/ModuleLinearProgram.pte"),
];

/// `ptd`: any bytes must be rejected as a `.ptd` file or give a map whose every entry can
/// be looked up and read; the map then backs the external constants of two programs,
/// which load and run.
pub fn ptd(data: &[u8]) {
    let Ok(ptd) = PtdFile::from_bytes(data) else {
        return;
    };
    for key in ptd.keys() {
        let Some(blob) = ptd.get(key) else { continue };
        std::hint::black_box(blob.data.iter().fold(0u8, |a, b| a ^ b));
        if let Some(layout) = blob.layout.cloned()
            && let Ok(Some(src)) = ptd.get_tensor_source(key, &layout)
        {
            drain(src.bytes.as_ref());
        }
    }
    for pte in PTD_PROGRAMS {
        if let Ok(module) = Module::from_bytes(pte).and_then(|m| m.with_data_bytes(data)) {
            exercise(module);
        }
    }
}

const WEIGHT_PROGRAMS: [&[u8]; 2] = [
    include_bytes!("../../../tests/fixtures/moe_weights/model.pte"),
    include_bytes!("../../../tests/fixtures/weights/model.pte"),
];

/// `safetensors`: any bytes must be rejected as a safetensors file or give a checkpoint
/// whose every tensor (stacked expert weights included) can be looked up in its own dtype
/// and converted to the other float dtypes, or refused with an error; the checkpoint then
/// backs the weights of two programs (the MoE and MLP weight fixtures), which load and run.
pub fn safetensors(data: &[u8]) {
    let Ok(src) = DataSource::copy_from(data) else {
        return;
    };
    let mut st = Safetensors::new(WeightOptions {
        convert_dtype: true,
    });
    if st.add(Arc::new(src), "fuzz").is_err() {
        return;
    }
    for key in st.keys() {
        let Some(own) = st.get(key).and_then(|b| b.layout.cloned()) else {
            continue;
        };
        for dtype in [
            own.dtype,
            ScalarType::Float,
            ScalarType::BFloat16,
            ScalarType::Half,
        ] {
            let layout = TensorLayout {
                dtype,
                ..own.clone()
            };
            if let Ok(Some(blob)) = st.get_tensor(key, &layout) {
                std::hint::black_box(blob.data.iter().fold(0u8, |a, b| a ^ b));
            }
            if let Ok(Some(src)) = st.get_tensor_source(key, &layout) {
                drain(src.bytes.as_ref());
            }
        }
    }
    // `Module` maps checkpoints from files: one per process, rewritten for each input.
    static PATH: OnceLock<std::path::PathBuf> = OnceLock::new();
    let path = PATH.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("etch-fuzz-st-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        dir.join("model.safetensors")
    });
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if std::fs::write(path, data).is_err() {
        return;
    }
    for pte in WEIGHT_PROGRAMS {
        for convert_dtype in [false, true] {
            if let Ok(m) = Module::from_bytes(pte)
                .and_then(|m| m.with_weights_opts(path, WeightOptions { convert_dtype }))
            {
                exercise(m);
            }
        }
    }
}

fn portable() -> &'static SupportedOps {
    static OPS: OnceLock<SupportedOps> = OnceLock::new();
    OPS.get_or_init(|| SupportedOps::new(etch::default_kernels().names()))
}

/// `lower`: any bytes that load as a program must re-plan, and lower to `cuda:0` with the
/// portable operator set (what the simulated device runs), or fail with an error; a
/// lowered program must then serialize, load and run on the simulated device. The input's
/// length picks the flags (`--per-op`, `--skip-h2d-inputs`/`--skip-d2h-outputs`), so the
/// bytes themselves stay a `.pte`.
pub fn lower_and_run(data: &[u8]) {
    let Ok(program) = Program::from_bytes(data) else {
        return;
    };
    let Ok(parts) = ProgramParts::from_program(&program) else {
        return;
    };
    drop(program);

    let mut replanned = parts.clone();
    if replan(&mut replanned, &PlanOptions::default()).is_ok() {
        let _ = replanned.to_bytes(WriteOptions::default());
    }

    let mut lowered = parts;
    let mut opts = LowerOptions::new(Device::cuda(0), portable().clone());
    opts.per_op = data.len() & 1 == 1;
    if data.len() & 2 == 2 {
        opts.skip_h2d_inputs = MethodSelection::All;
        opts.skip_d2h_outputs = MethodSelection::All;
    }
    if lower(&mut lowered, &opts).is_err() {
        return;
    }
    let Ok(bytes) = lowered.to_bytes(WriteOptions::default()) else {
        return;
    };
    if let Ok(module) = Module::from_bytes(&bytes) {
        exercise(module);
    }
}

fn xnnpack_templates() -> &'static [ProgramParts] {
    static T: OnceLock<Vec<ProgramParts>> = OnceLock::new();
    T.get_or_init(|| {
        xnnpack::TEMPLATES
            .iter()
            .map(|b| {
                ProgramParts::from_program(&Program::from_bytes(b).expect("template loads"))
                    .expect("template decodes")
            })
            .collect()
    })
}

/// `xnnpack`: the XNNPACK delegate's payload reader (header, graph flatbuffer, constant
/// data), graph decoding, memory planning, lowering to the portable kernels and execution.
/// An input is one byte choosing a template program ([`xnnpack::TEMPLATES`]) and the
/// payload that replaces the template's first XNNPACK payload; the program is then
/// written, loaded and run on the simulated device.
pub fn xnnpack_payload(data: &[u8]) {
    let Some((&pick, payload)) = data.split_first() else {
        return;
    };
    let _ = etch::xnnpack::node_counts(payload);
    let templates = xnnpack_templates();
    let mut parts = templates[pick as usize % templates.len()].clone();
    let Some(&slot) = xnnpack::slots(&parts).first() else {
        return;
    };
    if !xnnpack::replace(&mut parts, slot, payload) {
        return;
    }
    let Ok(bytes) = parts.to_bytes(WriteOptions::default()) else {
        return;
    };
    if let Ok(module) = Module::from_bytes(&bytes) {
        exercise(module);
    }
}
