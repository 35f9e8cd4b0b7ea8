//! Bundled programs (`.bpte`, written by `tools/export/export_bundled.py` with the stock
//! `executorch.devtools.BundledProgram` tooling): every case passes against eager PyTorch's
//! outputs, a tampered expected output fails with a report naming method, case and worst
//! error, and malformed bytes are typed errors.

mod common;

use common::{fixtures_dir, simulated};
use etch::bundled::{BundledProgram, BundledValue, CaseStatus, TestReport, Tolerance, run_tests};
use etch::{ErrorCode, Module};
use etch_format::schema::bundled as fb;
use etch_format::schema::pte::ScalarType as FbScalarType;
use std::path::PathBuf;

fn bpte(name: &str) -> PathBuf {
    fixtures_dir().join("bundled").join(format!("{name}.bpte"))
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(bpte(name)).unwrap()
}

fn run(bundled: &BundledProgram) -> TestReport {
    let mut module = Module::from_bundled(bundled).unwrap();
    run_tests(bundled, &mut module, Tolerance::default())
}

fn assert_all_pass(what: &str, r: &TestReport, cases: usize) {
    assert_eq!(r.cases.len(), cases, "{what}: {r:#?}");
    assert!(r.success() && r.passed() == cases, "{what}: {r:#?}");
}

#[test]
fn stock_bundles_pass_on_the_cpu() {
    let b = BundledProgram::from_file(bpte("two_methods")).unwrap();
    assert_eq!(b.version(), 2);
    let names: Vec<&str> = b
        .method_test_suites()
        .iter()
        .map(|s| s.method_name.as_str())
        .collect();
    assert_eq!(names, ["add_mul", "forward"]);
    let r = run(&b);
    assert_all_pass("two_methods", &r, 6);
    assert!(r.untested_methods.is_empty());
    // add_mul returns two outputs, forward one; each is compared.
    let outputs: Vec<usize> = r.cases.iter().map(|c| c.outputs.len()).collect();
    assert_eq!(outputs, [2, 2, 2, 1, 1, 1]);

    // Tensor inputs of three dtypes and an Int; f32, i64 and bool outputs.
    let b = BundledProgram::from_file(bpte("mixed_io")).unwrap();
    let case = &b.method_test_suites()[0].test_cases[0];
    let kinds: Vec<&str> = case.inputs.iter().map(BundledValue::type_name).collect();
    assert_eq!(kinds, ["Tensor", "Tensor", "Tensor", "Int"]);
    assert_all_pass("mixed_io", &run(&b), 3);
}

#[test]
fn the_embedded_program_is_a_view_of_the_file() {
    for b in [
        BundledProgram::from_file(bpte("two_methods")).unwrap(),
        BundledProgram::from_bytes(&read("two_methods")).unwrap(),
    ] {
        assert!(b.program_is_aligned());
        let file = b.source().bytes().as_ptr_range();
        let program = b.program().unwrap();
        assert!(file.contains(&program.bytes().as_ptr()));
        assert_eq!(program.bytes(), b.program_bytes());
        assert_eq!(program.method_names(), ["add_mul", "forward"]);
    }
}

#[test]
fn device_bundle_passes_on_the_simulated_device() {
    let b = BundledProgram::from_file(bpte("device")).unwrap();
    let (devices, sim) = simulated();
    let mut module = Module::from_bundled(&b).unwrap().with_devices(devices);
    let r = run_tests(&b, &mut module, Tolerance::default());
    assert_all_pass("device", &r, 2);
    use etch::DeviceAllocator;
    let t = sim.transfer_stats();
    assert!(t.h2d_copies > 0 && t.d2h_copies > 0, "{t:?}");
}

/// The file range of `expected_outputs[output]` of `method`'s case `case`.
fn expected_range(
    b: &BundledProgram,
    method: &str,
    case: usize,
    output: usize,
) -> std::ops::Range<usize> {
    let suite = b
        .method_test_suites()
        .iter()
        .find(|s| s.method_name == method)
        .unwrap();
    match &suite.test_cases[case].expected_outputs[output] {
        BundledValue::Tensor(t) => t.data.clone(),
        other => panic!("{other:?}"),
    }
}

/// `two_methods.bpte` with forward case 1's expected output 0 at [2, 5] raised by 0.5.
fn tampered_two_methods() -> Vec<u8> {
    let mut bytes = read("two_methods");
    let b = BundledProgram::from_bytes(&bytes).unwrap();
    let at = expected_range(&b, "forward", 1, 0).start + (2 * 16 + 5) * 4;
    let v = f32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    bytes[at..at + 4].copy_from_slice(&(v + 0.5).to_le_bytes());
    bytes
}

#[test]
fn a_tampered_expected_output_fails_with_its_place() {
    let b = BundledProgram::from_bytes(&tampered_two_methods()).unwrap();
    let r = run(&b);
    assert_eq!((r.passed(), r.failed()), (5, 1), "{r:#?}");
    let bad = r
        .cases
        .iter()
        .find(|c| c.status == CaseStatus::Fail)
        .unwrap();
    assert_eq!((bad.method.as_str(), bad.case), ("forward", 1));
    assert!(bad.error.is_none());
    let o = &bad.outputs[0];
    assert!(!o.passed);
    assert_eq!((o.mismatched, o.numel), (1, 64));
    assert!((o.max_abs_error - 0.5).abs() < 1e-6, "{o:?}");
    let w = o.worst.as_ref().unwrap();
    assert_eq!(w.index, [2, 5]);
    assert!((w.expected - w.actual - 0.5).abs() < 1e-6, "{w:?}");
    assert_eq!(bad.worst_output().map(|o| o.index), Some(0));

    // Loose enough tolerances accept it.
    let mut module = Module::from_bundled(&b).unwrap();
    let r = run_tests(
        &b,
        &mut module,
        Tolerance {
            rtol: 0.0,
            atol: 0.6,
        },
    );
    assert!(r.success(), "{r:#?}");
}

#[test]
fn integer_and_bool_outputs_compare_exactly() {
    let mut bytes = read("mixed_io");
    let b = BundledProgram::from_bytes(&bytes).unwrap();
    // Output 1 is i64 [3, 4]: element [1, 2] off by one.
    let at = expected_range(&b, "forward", 2, 1).start + (4 + 2) * 8;
    let v = i64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    bytes[at..at + 8].copy_from_slice(&(v + 1).to_le_bytes());
    // Output 2 is bool [3, 4]: element [0, 0] flipped.
    let at = expected_range(&b, "forward", 0, 2).start;
    bytes[at] ^= 1;
    let b = BundledProgram::from_bytes(&bytes).unwrap();
    let mut module = Module::from_bundled(&b).unwrap();
    // Even a huge tolerance does not excuse integer or bool differences.
    let r = run_tests(
        &b,
        &mut module,
        Tolerance {
            rtol: 1.0,
            atol: 10.0,
        },
    );
    let status: Vec<CaseStatus> = r.cases.iter().map(|c| c.status).collect();
    assert_eq!(
        status,
        [CaseStatus::Fail, CaseStatus::Pass, CaseStatus::Fail]
    );
    let o = &r.cases[0].outputs[2];
    assert_eq!((o.passed, o.mismatched, o.max_abs_error), (false, 1, 1.0));
    assert_eq!(o.worst.as_ref().unwrap().index, [0, 0]);
    let o = &r.cases[2].outputs[1];
    assert_eq!((o.passed, o.mismatched, o.max_abs_error), (false, 1, 1.0));
    assert_eq!(o.worst.as_ref().unwrap().index, [1, 2]);
}

fn tensor(
    dtype: FbScalarType,
    sizes: &[i32],
    data: Vec<u8>,
    dim_order: Option<Vec<u8>>,
) -> fb::Value {
    fb::Value {
        val: Some(fb::ValueUnion::Tensor(Box::new(fb::Tensor {
            scalar_type: dtype,
            sizes: Some(sizes.to_vec()),
            data: Some(data),
            dim_order,
        }))),
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A bundle of `two_methods`' program with one `add_mul` case, written by planus.
fn build(inputs: Vec<fb::Value>, expected: Vec<fb::Value>) -> Vec<u8> {
    let program = BundledProgram::from_file(bpte("two_methods"))
        .unwrap()
        .program_bytes()
        .to_vec();
    let bp = fb::BundledProgram {
        version: 2,
        method_test_suites: Some(vec![fb::BundledMethodTestSuite {
            method_name: Some("add_mul".into()),
            test_cases: Some(vec![fb::BundledMethodTestCase {
                inputs: Some(inputs),
                expected_outputs: Some(expected),
            }]),
        }]),
        program: Some(program),
    };
    finish(&bp)
}

/// Serializes a bundled program with its identifier where flatbuffers put it (planus 1.3
/// writes `[identifier][root offset - 4]`; see `ProgramParts::to_bytes`).
fn finish(bp: &fb::BundledProgram) -> Vec<u8> {
    let mut builder = etch_format::planus::Builder::new();
    let mut bytes = builder.finish(bp, Some(*b"BP08")).to_vec();
    assert_eq!(&bytes[0..4], b"BP08");
    let root = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) + 4;
    bytes[0..4].copy_from_slice(&root.to_le_bytes());
    bytes[4..8].copy_from_slice(b"BP08");
    bytes
}

#[test]
fn tensors_stored_in_another_dim_order_are_reordered() {
    // a and b are [2, 5]; a is stored column-major (dim order [1, 0]).
    let a: Vec<f32> = (0..10).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..10).map(|i| 1.0 + i as f32 * 0.5).collect();
    let a_col: Vec<f32> = (0..5).flat_map(|j| [a[j], a[5 + j]]).collect();
    let sum: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    let prod: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x * y).collect();
    let bytes = build(
        vec![
            tensor(
                FbScalarType::Float,
                &[2, 5],
                f32_bytes(&a_col),
                Some(vec![1, 0]),
            ),
            tensor(
                FbScalarType::Float,
                &[2, 5],
                f32_bytes(&b),
                Some(vec![0, 1]),
            ),
        ],
        vec![
            tensor(
                FbScalarType::Float,
                &[2, 5],
                f32_bytes(&sum),
                Some(vec![0, 1]),
            ),
            tensor(FbScalarType::Float, &[2, 5], f32_bytes(&prod), None),
        ],
    );
    let bundled = BundledProgram::from_bytes(&bytes).unwrap();
    // planus does not honour force_align: the program may be copied; it runs either way.
    let r = run(&bundled);
    assert_all_pass("dim order", &r, 1);
    assert_eq!(r.untested_methods, ["forward"]);
}

#[test]
fn mismatched_outputs_and_missing_expectations_are_reported() {
    let a = f32_bytes(&[1.0; 10]);
    // Expected dtype differs (Double), and only one expected output for two.
    let bytes = build(
        vec![
            tensor(FbScalarType::Float, &[2, 5], a.clone(), None),
            tensor(FbScalarType::Float, &[2, 5], a.clone(), None),
        ],
        vec![tensor(FbScalarType::Double, &[2, 5], vec![0; 80], None)],
    );
    let r = run(&BundledProgram::from_bytes(&bytes).unwrap());
    let c = &r.cases[0];
    assert_eq!(c.status, CaseStatus::Fail);
    assert!(
        c.error
            .as_deref()
            .unwrap()
            .contains("returned 2 output(s); the case expects 1")
    );

    let bytes = build(
        vec![
            tensor(FbScalarType::Float, &[2, 5], a.clone(), None),
            tensor(FbScalarType::Float, &[2, 5], a.clone(), None),
        ],
        vec![
            tensor(FbScalarType::Double, &[2, 5], vec![0; 80], None),
            tensor(FbScalarType::Float, &[5, 2], f32_bytes(&[1.0; 10]), None),
        ],
    );
    let r = run(&BundledProgram::from_bytes(&bytes).unwrap());
    let problems: Vec<&str> = r.cases[0]
        .outputs
        .iter()
        .map(|o| o.problem.as_deref().unwrap())
        .collect();
    assert!(
        problems[0].contains("float32 [2, 5], the case expects float64 [2, 5]"),
        "{problems:?}"
    );
    assert!(
        problems[1].contains("the case expects float32 [5, 2]"),
        "{problems:?}"
    );

    // Inputs of the wrong type: the case fails with the runtime's error.
    let bytes = build(
        vec![fb::Value {
            val: Some(fb::ValueUnion::Int(Box::new(fb::Int { int_val: 3 }))),
        }],
        vec![],
    );
    let r = run(&BundledProgram::from_bytes(&bytes).unwrap());
    assert_eq!(r.cases[0].status, CaseStatus::Fail);
    assert!(
        r.cases[0]
            .error
            .as_deref()
            .unwrap()
            .contains("takes 2 inputs"),
        "{r:#?}"
    );

    // No expected outputs: the case runs and is skipped, not failed.
    let bytes = build(
        vec![
            tensor(FbScalarType::Float, &[2, 5], a.clone(), None),
            tensor(FbScalarType::Float, &[2, 5], a, None),
        ],
        vec![],
    );
    let r = run(&BundledProgram::from_bytes(&bytes).unwrap());
    assert_eq!((r.skipped(), r.failed(), r.success()), (1, 0, true));
}

fn invalid(bytes: &[u8]) -> String {
    let e = BundledProgram::from_bytes(bytes).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidProgram, "{e}");
    e.to_string()
}

#[test]
fn malformed_bundles_are_typed_errors() {
    let good = read("two_methods");
    // (Flatbuffers carry no length: cutting only the trailing padding goes unnoticed.)
    for n in [0, 4, 7, 8, 12, 100, good.len() / 2] {
        invalid(&good[..n]);
    }
    // A program (.pte) is not a bundled program.
    let pte = std::fs::read(fixtures_dir().join("mlp/model.pte")).unwrap();
    assert!(invalid(&pte).contains("not a bundled program"));
    // Garbage behind the right identifier.
    let mut junk: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    junk[4..8].copy_from_slice(b"BP08");
    invalid(&junk);

    let f = |sizes: &[i32], data: usize, order: Option<Vec<u8>>| {
        build(
            vec![tensor(FbScalarType::Float, sizes, vec![0; data], order)],
            vec![],
        )
    };
    assert!(invalid(&f(&[2, -5], 40, None)).contains("negative"));
    assert!(invalid(&f(&[2, 5], 39, None)).contains("needs 40"));
    assert!(invalid(&f(&[2, 5], 40, Some(vec![0, 0]))).contains("not a permutation"));
    assert!(invalid(&f(&[2, 5], 40, Some(vec![0]))).contains("dim_order"));
    assert!(invalid(&f(&[1; 17], 4, None)).contains("dims"));
    let msg = invalid(&build(vec![fb::Value { val: None }], vec![]));
    assert!(
        msg.contains("value has no type") && msg.contains("input 0"),
        "{msg}"
    );

    // No embedded program.
    let bp = fb::BundledProgram {
        version: 2,
        method_test_suites: None,
        program: None,
    };
    assert!(invalid(&finish(&bp)).contains("embeds no program"));
}

/// Every single-byte change outside the embedded program loads or fails cleanly, and what
/// loads runs without panicking.
#[test]
fn byte_mutations_never_panic() {
    let good = read("two_methods");
    let b = BundledProgram::from_bytes(&good).unwrap();
    let base = b.source().bytes().as_ptr() as usize;
    let start = b.program_bytes().as_ptr() as usize - base;
    let end = start + b.program_bytes().len();
    let (mut loaded, mut ran) = (0, 0);
    for i in (0..good.len()).filter(|i| !(start..end).contains(i)) {
        let mut m = good.clone();
        m[i] ^= 0xA5;
        let Ok(b) = BundledProgram::from_bytes(&m) else {
            continue;
        };
        loaded += 1;
        if let Ok(mut module) = Module::from_bundled(&b) {
            let _ = run_tests(&b, &mut module, Tolerance::default());
            ran += 1;
        }
    }
    // Most mutants (test data, scalars) still load; the program is untouched, so every one
    // that loads also runs.
    let candidates = good.len() - (end - start);
    assert!(
        loaded * 2 > candidates && ran == loaded,
        "{loaded} {ran} {candidates}"
    );
}

/// `etch test PATH ARGS...`.
fn etch_test(path: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_etch"))
        .arg("test")
        .arg(path)
        .args(args)
        .output()
        .unwrap()
}

/// The stdout of a run that must have succeeded.
fn ok_stdout(o: &std::process::Output) -> String {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{out}{err}");
    out
}

#[test]
fn cli_prints_a_line_per_case_and_a_summary() {
    let out = ok_stdout(&etch_test(&bpte("two_methods"), &[]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 7, "{out}");
    assert!(lines[0].starts_with("add_mul case 0: PASS"), "{out}");
    assert!(lines[5].starts_with("forward case 2: PASS"), "{out}");
    assert_eq!(
        lines[6],
        "6 passed, 0 failed, 0 skipped of 6 case(s) (rtol 1e-5, atol 1e-8)"
    );

    let out = ok_stdout(&etch_test(&bpte("mixed_io"), &["--json", "--rtol", "1e-4"]));
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (j["passed"].as_u64(), j["failed"].as_u64()),
        (Some(3), Some(0))
    );
    assert_eq!(j["rtol"].as_f64(), Some(1e-4));
    assert_eq!(j["cases"][0]["outputs"].as_array().map(Vec::len), Some(3));
    assert_eq!(j["cases"][0]["status"], "PASS");

    let out = ok_stdout(&etch_test(&bpte("device"), &["--simulate-device", "cuda"]));
    assert!(
        out.contains("2 passed, 0 failed") && out.contains("simulated cuda:"),
        "{out}"
    );
}

#[test]
fn cli_fails_on_a_mismatch_and_names_it() {
    let dir = std::env::temp_dir().join(format!("etch-bundled-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tampered.bpte");
    std::fs::write(&path, tampered_two_methods()).unwrap();
    let o = etch_test(&path, &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains(
            "forward case 1: FAIL  output 0: 1/64 element(s) outside tolerance; \
             max |err| 5.000e-1 at output 0 [2, 5]"
        ),
        "{out}"
    );
    assert!(out.contains("5 passed, 1 failed"), "{out}");
    // Loose tolerances pass it.
    ok_stdout(&etch_test(&path, &["--atol", "0.6"]));

    // A plain program is not a bundled program: an error, not a report.
    let o = etch_test(&fixtures_dir().join("mlp/model.pte"), &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        o.stdout.is_empty() && err.contains("not a bundled program"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
