//! Upstream ExecuTorch's own runtime test programs (`test/models/export_program.py` and
//! `export_program_with_device_info.py`), exported by
//! `tools/export/export_upstream_programs.py` into `tests/fixtures/upstream/`. Every call
//! of a fixture runs in order on ONE loaded [`Module`] and must match the output that
//! ExecuTorch's own runtime gave for the same call: integers and bools exactly, floats
//! within `atol + rtol * |expected|` (1e-5 for float32, 1e-2 for float16), `None` outputs
//! as `None`. Fixtures that ExecuTorch's runtime could not run carry a named skip reason.

mod common;

use common::{check_output, load_input};
use etch::{Module, Value};
use serde_json::Value as Json;
use std::path::{Path, PathBuf};

fn upstream_dir() -> PathBuf {
    common::fixtures_dir().join("upstream")
}

struct Call {
    method: String,
    inputs: Vec<Value>,
    /// `None` for an output that is `None`.
    expected: Vec<Option<PathBuf>>,
    output_dtypes: Vec<String>,
    rtol: f64,
    atol: f64,
}

struct Fixture {
    name: String,
    pte: PathBuf,
    ptd: Option<PathBuf>,
    calls: Vec<Call>,
    skip: Option<String>,
}

fn strs(v: &Json) -> Vec<Option<String>> {
    v.as_array()
        .expect("a list")
        .iter()
        .map(|x| x.as_str().map(String::from))
        .collect()
}

fn parse_call(dir: &Path, c: &Json) -> Call {
    let dtypes: Vec<String> = strs(&c["input_dtypes"]).into_iter().flatten().collect();
    let inputs = strs(&c["inputs"])
        .into_iter()
        .zip(&dtypes)
        .map(|(p, d)| load_input(&dir.join(p.expect("input file")), d))
        .collect();
    Call {
        method: c["method"].as_str().unwrap().to_string(),
        inputs,
        expected: strs(&c["expected"])
            .into_iter()
            .map(|p| p.map(|p| dir.join(p)))
            .collect(),
        output_dtypes: strs(&c["output_dtypes"]).into_iter().flatten().collect(),
        rtol: c["rtol"].as_f64().unwrap(),
        atol: c["atol"].as_f64().unwrap(),
    }
}

fn fixtures() -> Vec<Fixture> {
    let dir = upstream_dir();
    common::manifest_entries(&dir)
        .iter()
        .map(|f| Fixture {
            name: f["name"].as_str().unwrap().to_string(),
            pte: dir.join(f["pte"].as_str().unwrap()),
            ptd: f["ptd"].as_str().map(|p| dir.join(p)),
            calls: f["cases"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| parse_call(&dir, c))
                .collect(),
            skip: f["skip"].as_str().map(String::from),
        })
        .collect()
}

fn fixture(name: &str) -> Fixture {
    fixtures()
        .into_iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("fixture {name} in the upstream manifest"))
}

fn open(fx: &Fixture) -> Module {
    let mut module = Module::from_file(&fx.pte).unwrap();
    if let Some(ptd) = &fx.ptd {
        module = module.with_data_file(ptd).unwrap();
    }
    module
}

fn check_call(what: &str, outputs: &[Value], call: &Call) {
    assert_eq!(outputs.len(), call.expected.len(), "{what}: output count");
    for (oi, (got, exp)) in outputs.iter().zip(&call.expected).enumerate() {
        let what = format!("{what} output {oi}");
        match exp {
            None => assert!(matches!(got, Value::None), "{what}: {got:?}, expected None"),
            Some(exp) => check_output(
                &what,
                got,
                exp,
                &call.output_dtypes[oi],
                call.rtol,
                call.atol,
            ),
        }
    }
}

/// Runs every call of the fixture, in order, on one loaded module.
fn run_fixture(name: &str) {
    let fx = fixture(name);
    assert!(fx.skip.is_none(), "{name} is skipped: {:?}", fx.skip);
    assert!(!fx.calls.is_empty(), "{name} has no calls");
    let mut module = open(&fx);
    for (ci, call) in fx.calls.iter().enumerate() {
        let what = format!("{name} call {ci} ({})", call.method);
        let outputs = module
            .execute(&call.method, &call.inputs)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        check_call(&what, &outputs, call);
    }
}

/// Fixtures with calls run by a test below, and the skipped ones with their reasons.
const TESTED: &[&str] = &[
    "ModuleAdd",
    "ModuleAddHalf",
    "ModuleAddMul",
    "ModuleAddMulProgram",
    "ModuleBasic",
    "ModuleKVCacheCachePos",
    "ModuleKVCacheCachePosProgram",
    "ModuleKVCacheInputPos",
    "ModuleKVCacheInputPosProgram",
    "ModuleMultipleEntry",
    "ModuleMultipleEntryProgram",
    "ModuleNoKVCache",
    "ModuleNoKVCacheProgram",
    "ModuleIndex",
    "ModuleIntBool",
    "ModuleDynamicCatUnallocatedIO",
    "ModuleSimpleTrain",
    "ModuleSimpleTrainProgram",
    "ModuleSharedState",
    "ModuleLinear",
    "ModuleLinearProgram",
    "ModuleNoOp",
];
const SKIPPED: &[&str] = &["ModuleStateful", "ModuleAddWithDevice"];

#[test]
fn every_upstream_fixture_is_tested_or_skipped_with_a_reason() {
    for fx in fixtures() {
        match &fx.skip {
            Some(reason) => {
                assert!(SKIPPED.contains(&fx.name.as_str()), "{} skipped", fx.name);
                assert!(reason.len() > 20, "{}: skip reason {reason:?}", fx.name);
                eprintln!("skipped {}: {reason}", fx.name);
            }
            None => assert!(TESTED.contains(&fx.name.as_str()), "{} untested", fx.name),
        }
    }
}

macro_rules! upstream_tests {
    ($($test:ident => $name:literal),* $(,)?) => {
        $( #[test] fn $test() { run_fixture($name); } )*
    };
}

upstream_tests!(
    add => "ModuleAdd",
    add_half => "ModuleAddHalf",
    add_mul => "ModuleAddMul",
    add_mul_external => "ModuleAddMulProgram",
    basic => "ModuleBasic",
    kv_cache_cache_pos => "ModuleKVCacheCachePos",
    kv_cache_cache_pos_external => "ModuleKVCacheCachePosProgram",
    kv_cache_input_pos => "ModuleKVCacheInputPos",
    kv_cache_input_pos_external => "ModuleKVCacheInputPosProgram",
    multiple_entry => "ModuleMultipleEntry",
    multiple_entry_external => "ModuleMultipleEntryProgram",
    no_kv_cache => "ModuleNoKVCache",
    no_kv_cache_external => "ModuleNoKVCacheProgram",
    index => "ModuleIndex",
    int_bool => "ModuleIntBool",
    dynamic_cat_unallocated_io => "ModuleDynamicCatUnallocatedIO",
    simple_train => "ModuleSimpleTrain",
    simple_train_external => "ModuleSimpleTrainProgram",
    shared_state => "ModuleSharedState",
    linear => "ModuleLinear",
    linear_external => "ModuleLinearProgram",
    no_op => "ModuleNoOp",
);

/// Which programs declare shared state: ModuleSharedState does (its 16-byte state
/// buffer); a one-method program, ModuleMultipleEntry (two methods, no state) and the
/// set_state/get_state program exported without share_mutable_buffers do not, so their
/// methods keep their own buffers.
#[test]
fn only_share_mutable_buffers_programs_declare_shared_state() {
    use etch_runtime::shared_state::declared_shared_state;
    let declared =
        |p: &Path| declared_shared_state(Module::from_file(p).unwrap().program()).unwrap();
    let dir = upstream_dir();
    assert_eq!(declared(&dir.join("ModuleSharedState.pte")), Some(16));
    for name in [
        "ModuleMultipleEntry",
        "ModuleKVCacheInputPos",
        "ModuleSimpleTrain",
    ] {
        assert_eq!(declared(&dir.join(format!("{name}.pte"))), None, "{name}");
    }
    let unshared = common::fixtures_dir().join("none_output/model.pte");
    assert_eq!(declared(&unshared), None);
}

/// Without declared sharing, each method has its own state: the set_state/get_state
/// program exported without share_mutable_buffers keeps get_state's buffer untouched by
/// set_state (as upstream's Module without share_memory_arenas does).
#[test]
fn methods_that_do_not_declare_sharing_keep_their_own_state() {
    let pte = common::fixtures_dir().join("none_output/model.pte");
    let mut module = Module::from_file(&pte).unwrap();
    let before = module.execute("get_state", &[]).unwrap();
    let x = etch::Tensor::from_slice(&[7.0f32, 7.0], &[2]).unwrap();
    module.execute("set_state", &[Value::Tensor(x)]).unwrap();
    let after = module.execute("get_state", &[]).unwrap();
    let vals = |v: &[Value]| v[0].as_tensor().unwrap().to_vec::<f32>().unwrap();
    assert_eq!(vals(&before), vals(&after));
}

/// ModuleAddWithDevice: the add is delegated to upstream's demo backend with a cuda:0
/// annotation. etch reads the device annotations; running it fails with a clear error
/// (no such backend or device), never a panic.
#[test]
fn device_info_program_is_read_and_fails_clearly() {
    let fx = fixture("ModuleAddWithDevice");
    assert!(
        fx.skip
            .as_deref()
            .unwrap()
            .contains("BackendWithCompilerDemo")
    );
    let mut module = open(&fx);
    let meta = module.method_meta("forward").unwrap();
    let delegates = meta.delegates();
    assert_eq!(delegates.len(), 1);
    assert_eq!(delegates[0].backend, "BackendWithCompilerDemo");
    assert!(
        meta.tensor_devices().iter().any(|(d, _)| !d.is_cpu()),
        "{:?}",
        meta.tensor_devices()
    );
    let e = module.load_method("forward").unwrap_err();
    assert!(
        e.message().contains("BackendWithCompilerDemo") || e.message().contains("cuda"),
        "{e}"
    );
}

/// ModuleStateful's state has no planned memory (upstream attaches some through the C++
/// Method::get_attribute); etch reports an error instead of crashing.
#[test]
fn unplanned_state_fails_clearly() {
    let fx = fixture("ModuleStateful");
    let mut module = open(&fx);
    let x = etch::Tensor::from_slice(&[1.0f32], &[1]).unwrap();
    let r = module.forward(&[Value::Tensor(x)]);
    assert!(r.is_err(), "{r:?}");
}
