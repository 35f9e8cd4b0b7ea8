//! Mutates every fixture thousands of times (truncation, bit flips, corrupted words such
//! as counts and offsets) and checks that loading and executing never panics: errors are
//! fine, crashes are not.

mod common;

use etch::{Module, Tag, Tensor, Value};
use std::panic::{AssertUnwindSafe, catch_unwind};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const INTERESTING: [u32; 10] = [
    0,
    1,
    2,
    0x7f,
    0xff,
    0xffff,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    0x100,
];

fn mutate(bytes: &[u8], rng: &mut Rng) -> (Vec<u8>, String) {
    let mut b = bytes.to_vec();
    match rng.below(4) {
        0 => {
            let n = rng.below(b.len());
            b.truncate(n);
            (b, format!("truncate to {n}"))
        }
        1 => {
            let flips = 1 + rng.below(4);
            for _ in 0..flips {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
            (b, format!("{flips} bit flips"))
        }
        2 => {
            // Corrupt an aligned 32-bit word: flatbuffer offsets, counts, indices.
            let i = rng.below(b.len() / 4) * 4;
            let v = INTERESTING[rng.below(INTERESTING.len())];
            b[i..i + 4].copy_from_slice(&v.to_le_bytes());
            (b, format!("word at {i} = {v:#x}"))
        }
        _ => {
            let i = rng.below(b.len());
            let v = (rng.next() & 0xff) as u8;
            b[i] = v;
            (b, format!("byte at {i} = {v:#x}"))
        }
    }
}

/// Loads and runs every method with zero inputs of the declared shapes; returns whether
/// any method reached execution (its inputs were accepted and `execute` ran).
fn exercise(bytes: &[u8]) -> bool {
    let Ok(module) = Module::from_bytes(bytes) else {
        return false;
    };
    // A simulated CUDA device, so device programs get past allocation into execution.
    let registry = etch::DeviceRegistry::new();
    let _ = registry.register(std::sync::Arc::new(etch::SimulatedAllocator::new(2)));
    let mut module = module
        .with_max_planned_bytes(Some(256 << 20))
        .with_devices(std::sync::Arc::new(registry));
    let names = module.method_names().to_vec();
    let mut reached = false;
    for name in names {
        let Ok(meta) = module.method_meta(&name) else {
            continue;
        };
        let mut inputs = Vec::new();
        for info in meta.inputs() {
            let v = match (&info.tag, &info.tensor) {
                (Tag::Tensor, Some(t)) if t.nbytes <= 1 << 24 => {
                    match Tensor::zeros(t.dtype, &t.sizes) {
                        Ok(t) => Value::Tensor(t),
                        Err(_) => Value::None,
                    }
                }
                (Tag::Int, _) => Value::Int(1),
                (Tag::Double, _) => Value::Double(1.0),
                (Tag::Bool, _) => Value::Bool(false),
                _ => Value::None,
            };
            inputs.push(v);
        }
        let Ok(method) = module.method(&name) else {
            continue;
        };
        method.set_instruction_limit(Some(100_000));
        if method.set_inputs(&inputs).is_ok() {
            reached = true;
            if method.execute().is_ok() {
                let _ = method.output_values();
            }
        }
    }
    reached
}

#[test]
fn mutated_fixtures_never_panic() {
    let iterations: usize = std::env::var("ETCH_FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1500);
    let mut rng = Rng(0x5DEE_CE66_D1CE_4E5B);
    let mut files: Vec<_> = common::manifest().into_iter().map(|f| f.pte).collect();
    files.push(common::fixtures_dir().join("misc/xnnpack_linear.pte"));
    for name in ["tiny_cnn", "tiny_transformer", "elementwise"] {
        files.push(common::fixtures_dir().join(format!("xnnpack/{name}/model.pte")));
    }
    files.extend(
        common::manifest_in(&common::fixtures_dir().join("device"))
            .into_iter()
            .map(|f| f.pte),
    );
    files.extend(
        common::manifest_in(&common::fixtures_dir().join("llama_ops"))
            .into_iter()
            .map(|f| f.pte),
    );
    let mut worst = (1.0f64, String::new());
    let (mut all_reached, mut all_mutants) = (0usize, 0usize);
    // Programs that need data beside them (a .ptd) reach only the loader.
    let mut load_only = Vec::new();
    let total = files.len();
    for path in files {
        let original = std::fs::read(&path).unwrap();
        let executes = exercise(&original);
        if !executes {
            load_only.push(path.display().to_string());
        }
        let mut reached = 0;
        for it in 0..iterations {
            let (bytes, what) = mutate(&original, &mut rng);
            let r = catch_unwind(AssertUnwindSafe(|| exercise(&bytes)));
            match r {
                Ok(true) => reached += 1,
                Ok(false) => {}
                Err(_) => panic!("{}: mutation {it} ({what}) panicked", path.display()),
            }
        }
        let rate = reached as f64 / iterations.max(1) as f64;
        eprintln!(
            "{}: {reached} of {iterations} mutants reached execution",
            path.display()
        );
        if executes {
            all_reached += reached;
            all_mutants += iterations;
        }
        if executes && rate < worst.0 {
            worst = (rate, path.display().to_string());
        }
    }
    assert!(
        load_only.len() * 20 <= total,
        "{} of {total} programs do not execute unmutated: {load_only:?}",
        load_only.len()
    );
    // Many small mutations leave a program loadable (38% of all mutants reached execution
    // at 60 per program, 8% for the smallest programs): if far fewer do, the test has
    // stopped testing execution (e.g. every mutant fails at load).
    let overall = all_reached as f64 / all_mutants.max(1) as f64;
    assert!(
        overall >= 0.2,
        "only {:.0}% of all mutants reached execution",
        100.0 * overall
    );
    assert!(
        worst.0 >= 0.03,
        "only {:.1}% of the mutants of {} reached execution",
        100.0 * worst.0,
        worst.1
    );
}

#[test]
fn mutated_data_files_never_panic() {
    let original = std::fs::read(common::fixtures_dir().join("mlp_external/model.ptd")).unwrap();
    let pte = common::fixtures_dir().join("mlp_external/model.pte");
    let mut rng = Rng(42);
    for it in 0..1500 {
        let (bytes, what) = mutate(&original, &mut rng);
        let r = catch_unwind(AssertUnwindSafe(|| {
            let Ok(m) = Module::from_file(&pte) else {
                return;
            };
            let Ok(mut m) = m.with_data_bytes(&bytes) else {
                return;
            };
            if let Ok(method) = m.method("forward") {
                let x = Tensor::zeros(etch::ScalarType::Float, &[4, 16]).unwrap();
                if method.set_inputs(&[Value::Tensor(x)]).is_ok() {
                    let _ = method.execute();
                }
            }
        }));
        assert!(r.is_ok(), "ptd mutation {it} ({what}) panicked");
    }
}

/// `etch lower` and `--replan-only` on mutated programs: errors are fine, panics are not;
/// what they write must load and run without panicking too.
#[test]
fn mutated_programs_never_panic_the_compiler() {
    use etch::compiler::{LowerOptions, PlanOptions, SupportedOps, lower, replan};
    let iterations: usize = std::env::var("ETCH_FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1500)
        / 3;
    let supported = SupportedOps::new(etch::default_kernels().names());
    let mut rng = Rng(0x1234_5678_9ABC_DEF1);
    let mut files: Vec<_> = common::manifest().into_iter().map(|f| f.pte).collect();
    files.extend(
        common::manifest_in(&common::fixtures_dir().join("models"))
            .into_iter()
            .map(|f| f.pte),
    );
    for path in files {
        let original = std::fs::read(&path).unwrap();
        for it in 0..iterations {
            let (bytes, what) = mutate(&original, &mut rng);
            let r = catch_unwind(AssertUnwindSafe(|| {
                let Ok(program) = etch::Program::from_bytes(&bytes) else {
                    return;
                };
                let Ok(parts) = etch::ProgramParts::from_program(&program) else {
                    return;
                };
                let mut a = parts.clone();
                if replan(&mut a, &PlanOptions::default()).is_ok()
                    && let Ok(out) = a.to_bytes(etch::WriteOptions::default())
                {
                    exercise(&out);
                }
                let mut b = parts;
                let opts = LowerOptions::new(etch::Device::cuda(0), supported.clone());
                if lower(&mut b, &opts).is_ok()
                    && let Ok(out) = b.to_bytes(etch::WriteOptions::default())
                {
                    exercise(&out);
                }
            }));
            assert!(
                r.is_ok(),
                "{}: mutation {it} ({what}) panicked the compiler",
                path.display()
            );
        }
    }
}
