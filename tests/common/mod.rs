//! Shared helpers for the fixture tests: the manifest written by
//! `tools/export/export_fixtures.py` and comparison against PyTorch's outputs.
#![allow(dead_code)]

use etch::{DeviceRegistry, ScalarType, SimulatedAllocator, Tensor, Value, bf16, npy};
use serde_json::Value as Json;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A registry with a simulated CUDA device of two ordinals.
pub fn simulated() -> (Arc<DeviceRegistry>, Arc<SimulatedAllocator>) {
    let r = DeviceRegistry::new();
    let sim = Arc::new(SimulatedAllocator::new(2));
    r.register(sim.clone()).unwrap();
    (Arc::new(r), sim)
}

/// `fixture`'s `method`, loaded with the default kernels and backends and the load options
/// `configure` sets, with the inputs of its first case of that method set.
pub fn load_case(
    fixture: &str,
    method: &str,
    configure: impl FnOnce(&mut etch::LoadConfig),
) -> etch::Method {
    let fx = manifest().into_iter().find(|f| f.name == fixture).unwrap();
    let bytes = std::fs::read(&fx.pte).unwrap();
    let program = etch::Program::from_bytes(&bytes).unwrap();
    let kernels = Arc::new(etch::default_kernels());
    let mut config = etch::LoadConfig::new(kernels, Arc::new(etch::default_backends()));
    configure(&mut config);
    let mut m = etch::Method::load(&program, method, &config).unwrap();
    let case = fx.cases.iter().find(|c| c.method == method).unwrap();
    m.set_inputs(&case.load_inputs()).unwrap();
    m
}

/// The float32 outputs of one run of `m`.
pub fn run_f32(m: &mut etch::Method) -> Vec<Vec<f32>> {
    m.execute().unwrap();
    m.output_values()
        .unwrap()
        .iter()
        .map(|v| match v {
            Value::Tensor(t) => t.to_vec::<f32>().unwrap(),
            other => panic!("unexpected output {other:?}"),
        })
        .collect()
}

pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

pub struct Case {
    pub method: String,
    pub inputs: Vec<PathBuf>,
    pub input_dtypes: Vec<String>,
    pub expected: Vec<PathBuf>,
    pub output_dtypes: Vec<String>,
    pub rtol: f64,
    pub atol: f64,
}

impl Case {
    /// The case's inputs, read from their `.npy` files.
    pub fn load_inputs(&self) -> Vec<Value> {
        self.inputs
            .iter()
            .zip(&self.input_dtypes)
            .map(|(p, d)| load_input(p, d))
            .collect()
    }
}

pub struct Fixture {
    pub name: String,
    pub pte: PathBuf,
    pub ptd: Option<PathBuf>,
    pub cases: Vec<Case>,
}

fn strings(v: &Json) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

pub fn manifest() -> Vec<Fixture> {
    manifest_in(&fixtures_dir())
}

/// The entries of a fixture directory's `manifest.json`.
pub fn manifest_entries(dir: &Path) -> Vec<Json> {
    let text = std::fs::read_to_string(dir.join("manifest.json")).expect("manifest.json");
    let json: Json = serde_json::from_str(&text).expect("manifest parses");
    match json {
        Json::Array(a) => a,
        _ => panic!("manifest is a list"),
    }
}

/// Reads the manifest of a fixture directory (`tests/fixtures` or `tests/fixtures/device`).
pub fn manifest_in(dir: &Path) -> Vec<Fixture> {
    let dir = dir.to_path_buf();
    manifest_entries(&dir)
        .iter()
        .map(|f| Fixture {
            name: f["name"].as_str().unwrap().to_string(),
            pte: dir.join(f["pte"].as_str().unwrap()),
            ptd: f["ptd"].as_str().map(|p| dir.join(p)),
            cases: f["cases"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| Case {
                    method: c["method"].as_str().unwrap().to_string(),
                    inputs: strings(&c["inputs"]).iter().map(|p| dir.join(p)).collect(),
                    input_dtypes: strings(&c["input_dtypes"]),
                    expected: strings(&c["expected"])
                        .iter()
                        .map(|p| dir.join(p))
                        .collect(),
                    output_dtypes: strings(&c["output_dtypes"]),
                    rtol: c["rtol"].as_f64().unwrap(),
                    atol: c["atol"].as_f64().unwrap(),
                })
                .collect(),
        })
        .collect()
}

/// Loads an input `.npy` as the value the manifest says the method takes.
pub fn load_input(path: &Path, dtype: &str) -> Value {
    let t = npy::read(path).unwrap();
    match dtype {
        "bfloat16" => {
            let v: Vec<bf16> = t
                .as_slice::<f32>()
                .unwrap()
                .iter()
                .map(|&x| bf16::from_f32(x))
                .collect();
            Value::Tensor(Tensor::from_slice(&v, t.sizes()).unwrap())
        }
        "int" => Value::Int(t.to_f64_vec().unwrap()[0] as i64),
        "float" => Value::Double(t.to_f64_vec().unwrap()[0]),
        "bool" => Value::Bool(t.to_f64_vec().unwrap()[0] != 0.0),
        _ => Value::Tensor(t),
    }
}

/// Compares an output with PyTorch's expected output: floats within `atol + rtol*|e|`,
/// integers and bools exactly, shapes and dtypes exactly.
pub fn check_output(what: &str, got: &Value, expected: &Path, dtype: &str, rtol: f64, atol: f64) {
    let exp = npy::read(expected).unwrap();
    let (got_vals, got_shape, got_dtype) = match got {
        Value::Tensor(t) => (t.to_f64_vec().unwrap(), t.sizes().to_vec(), Some(t.dtype())),
        Value::Int(x) => (vec![*x as f64], vec![], None),
        Value::Double(x) => (vec![*x], vec![], None),
        Value::Bool(b) => (vec![*b as u8 as f64], vec![], None),
        other => panic!("{what}: unexpected output {other:?}"),
    };
    assert_eq!(got_shape, exp.sizes(), "{what}: shape");
    if let Some(d) = got_dtype {
        assert_eq!(d.name(), dtype, "{what}: dtype");
    }
    let exp_vals = exp.to_f64_vec().unwrap();
    let exact =
        !matches!(got_dtype, Some(d) if d.is_floating()) && !matches!(got, Value::Double(_));
    let mut worst = 0.0f64;
    for (i, (g, e)) in got_vals.iter().zip(&exp_vals).enumerate() {
        if exact {
            assert_eq!(g, e, "{what}: element {i}");
        } else {
            let ok = (g - e).abs() <= atol + rtol * e.abs() || (g.is_nan() && e.is_nan());
            assert!(
                ok,
                "{what}: element {i}: got {g}, expected {e} (rtol {rtol}, atol {atol})"
            );
            worst = worst.max((g - e).abs());
        }
    }
    let _ = ScalarType::Float;
}

/// Skips a real-CUDA test, or fails it when `ETCH_REQUIRE_CUDA=1` (the GPU suite sets it).
pub fn require_no_cuda() {
    assert!(
        std::env::var("ETCH_REQUIRE_CUDA").as_deref() != Ok("1"),
        "ETCH_REQUIRE_CUDA=1 but no CUDA device is usable: {:?}",
        etch::devices_status().cuda_unavailable
    );
    eprintln!("skipped: no CUDA device");
}

/// Runs XNNPACK fixture `name` (`tests/fixtures/xnnpack`) twice a case and checks every
/// output against ExecuTorch's. A `_portable` fixture is the same model without the
/// delegate (ExecuTorch's portable kernels gave its outputs).
pub fn run_xnnpack_fixture(name: &str) {
    let dir = fixtures_dir().join("xnnpack");
    let fx = manifest_in(&dir)
        .into_iter()
        .find(|f| f.name == name)
        .expect("fixture in manifest");
    let mut module = etch::Module::from_file(&fx.pte).unwrap();
    let meta = module.method_meta("forward").unwrap();
    let portable = name.ends_with("_portable");
    assert_eq!(
        meta.uses_backend("XnnpackBackend"),
        !portable,
        "{name}: an XNNPACK delegate unless the fixture is portable"
    );
    for (ci, case) in fx.cases.iter().enumerate() {
        let inputs = case.load_inputs();
        // Twice: the second run reuses every buffer planned at load.
        for run in 0..2 {
            let outputs = module
                .execute(&case.method, &inputs)
                .unwrap_or_else(|e| panic!("{name} case {ci}: {e}"));
            assert_eq!(outputs.len(), case.expected.len(), "{name}: output count");
            for (oi, (got, exp)) in outputs.iter().zip(&case.expected).enumerate() {
                check_output(
                    &format!("{name} case {ci} run {run} output {oi}"),
                    got,
                    exp,
                    &case.output_dtypes[oi],
                    case.rtol,
                    case.atol,
                );
            }
        }
    }
}
