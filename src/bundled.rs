//! Bundled programs (`.bpte`): a program with test cases for its methods, as ExecuTorch's
//! `executorch.devtools.BundledProgram` writes them. [`run_tests`] runs every case and
//! compares each output with the expected one the way upstream's
//! `verify_method_outputs` does (`devtools/bundled_program/bundled_program.cpp`).
//!
//! ```no_run
//! use etch::bundled::{BundledProgram, Tolerance, run_tests};
//! # fn main() -> etch::Result<()> {
//! let bundled = BundledProgram::from_file("model.bpte")?;
//! let mut module = etch::Module::from_bundled(&bundled)?;
//! let report = run_tests(&bundled, &mut module, Tolerance::default());
//! println!("{} passed, {} failed", report.passed(), report.failed());
//! # Ok(()) }
//! ```
//!
//! The comparison: an output passes when its dtype and shape equal the expected tensor's
//! and every element is close. Float, Double and Half elements are close when
//! `|actual - expected| <= atol + |rtol * expected|` (the difference of two Floats is taken
//! in single precision, as upstream does), or both are NaN, or both are infinities of one
//! sign; with `rtol` and `atol` both 0 they must be equal. Every other dtype, BFloat16
//! included, must match exactly, as upstream compares them with `memcmp`. One deliberate
//! difference: upstream's infinity test also lets NaN pass against `-inf` (it reads NaN as
//! not positive); here NaN matches only NaN.
//! A `.bpte` stores no tolerances: the runner picks them, upstream's default being
//! [`Tolerance::default`] (`rtol` 1e-5, `atol` 1e-8).

use crate::{Device, DeviceRegistry, Dynamism, Module, Result, ScalarType, Tensor, Value};
pub use etch_format::{
    BUNDLED_PROGRAM_IDENTIFIER, BundledProgram, BundledTensor, BundledTestCase, BundledValue,
    EMBEDDED_PROGRAM_ALIGNMENT, MethodTestSuite,
};

/// The tolerances outputs are compared with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// Relative tolerance, a fraction of the expected value.
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
}

impl Default for Tolerance {
    /// Upstream's defaults (`verify_method_outputs`, and the Python binding's
    /// `verify_result_with_bundled_expected_output`): `rtol` 1e-5, `atol` 1e-8.
    fn default() -> Self {
        Tolerance {
            rtol: 1e-5,
            atol: 1e-8,
        }
    }
}

impl Tolerance {
    /// Whether `actual` is close to `expected`, given their difference `diff` (as the dtype
    /// computes it); and the error to report (0 for matching NaNs and infinities).
    fn check(&self, actual: f64, expected: f64, diff: f64) -> (bool, f64) {
        if (actual.is_nan() && expected.is_nan())
            || (actual.is_infinite()
                && expected.is_infinite()
                && (actual > 0.0) == (expected > 0.0))
        {
            return (true, 0.0);
        }
        let err = if diff.is_nan() { f64::INFINITY } else { diff };
        if self.rtol == 0.0 && self.atol == 0.0 {
            return (actual == expected, err);
        }
        let allowed = self.atol + (self.rtol * expected).abs();
        (err.is_finite() && err <= allowed, err)
    }
}

/// A case's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaseStatus {
    /// Every output matched.
    Pass,
    /// An output did not match, or the case could not run.
    Fail,
    /// The case ran but has no expected outputs to compare with (the Python tooling allows
    /// cases meant only for profiling; upstream's verification refuses them).
    Skip,
}

impl CaseStatus {
    /// `PASS`, `FAIL` or `SKIP`.
    pub fn name(self) -> &'static str {
        match self {
            CaseStatus::Pass => "PASS",
            CaseStatus::Fail => "FAIL",
            CaseStatus::Skip => "SKIP",
        }
    }
}

/// The element with the largest absolute error of an output.
#[derive(Debug, Clone, PartialEq)]
pub struct WorstElement {
    /// Its index (row-major coordinates; empty for a 0-d tensor or a scalar).
    pub index: Vec<usize>,
    /// The value the method produced.
    pub actual: f64,
    /// The expected value.
    pub expected: f64,
}

/// How one output compared with its expected value.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputReport {
    /// The output's index.
    pub index: usize,
    /// True when it matched.
    pub passed: bool,
    /// Its number of elements (1 for a scalar).
    pub numel: usize,
    /// How many elements are outside the tolerance.
    pub mismatched: usize,
    /// The largest absolute error (infinite where one side is NaN or infinite and the
    /// other is not; 0 for an empty tensor).
    pub max_abs_error: f64,
    /// Where the largest absolute error is (`None` when there are no elements).
    pub worst: Option<WorstElement>,
    /// Why the output could not be compared element by element (dtype, shape or type
    /// mismatch).
    pub problem: Option<String>,
}

/// The outcome of one test case.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseReport {
    /// The method tested.
    pub method: String,
    /// The case's index within the method's suite.
    pub case: usize,
    /// Pass, fail or skip.
    pub status: CaseStatus,
    /// Why the case failed as a whole: the method did not load or run, its inputs did not
    /// fit, or the number of outputs differs from the expected ones.
    pub error: Option<String>,
    /// Each compared output.
    pub outputs: Vec<OutputReport>,
}

impl CaseReport {
    /// The output with the largest absolute error.
    pub fn worst_output(&self) -> Option<&OutputReport> {
        self.outputs
            .iter()
            .filter(|o| o.worst.is_some())
            .max_by(|a, b| a.max_abs_error.total_cmp(&b.max_abs_error))
    }
}

/// The outcome of every test case of a bundled program.
#[derive(Debug, Clone, PartialEq)]
pub struct TestReport {
    /// The tolerances used.
    pub tolerance: Tolerance,
    /// Every case, suite by suite in file order.
    pub cases: Vec<CaseReport>,
    /// Methods of the program that no suite tests.
    pub untested_methods: Vec<String>,
}

impl TestReport {
    fn count(&self, s: CaseStatus) -> usize {
        self.cases.iter().filter(|c| c.status == s).count()
    }
    /// Cases that passed.
    pub fn passed(&self) -> usize {
        self.count(CaseStatus::Pass)
    }
    /// Cases that failed.
    pub fn failed(&self) -> usize {
        self.count(CaseStatus::Fail)
    }
    /// Cases without expected outputs.
    pub fn skipped(&self) -> usize {
        self.count(CaseStatus::Skip)
    }
    /// True when no case failed.
    pub fn success(&self) -> bool {
        self.failed() == 0
    }
}

/// Runs every test case of every suite on `module` (which should hold `bundled`'s program:
/// [`Module::from_bundled`], configured with devices as needed) and compares the outputs.
/// A case that cannot run is reported as failed, with the reason; the other cases still run.
pub fn run_tests(bundled: &BundledProgram, module: &mut Module, tol: Tolerance) -> TestReport {
    let mut cases = Vec::new();
    for suite in bundled.method_test_suites() {
        for (i, case) in suite.test_cases.iter().enumerate() {
            cases.push(run_case(bundled, module, &suite.method_name, i, case, tol));
        }
    }
    let tested: Vec<&str> = bundled
        .method_test_suites()
        .iter()
        .map(|s| s.method_name.as_str())
        .collect();
    let untested_methods = module
        .method_names()
        .iter()
        .filter(|m| !tested.contains(&m.as_str()))
        .cloned()
        .collect();
    TestReport {
        tolerance: tol,
        cases,
        untested_methods,
    }
}

fn run_case(
    bundled: &BundledProgram,
    module: &mut Module,
    method: &str,
    index: usize,
    case: &BundledTestCase,
    tol: Tolerance,
) -> CaseReport {
    let mut report = CaseReport {
        method: method.to_string(),
        case: index,
        status: CaseStatus::Fail,
        error: None,
        outputs: Vec::new(),
    };
    let actual = match execute_case(bundled, module, method, case) {
        Ok(v) => v,
        Err(e) => {
            report.error = Some(e.to_string());
            return report;
        }
    };
    if case.expected_outputs.is_empty() {
        report.status = CaseStatus::Skip;
        return report;
    }
    if case.expected_outputs.len() != actual.len() {
        report.error = Some(format!(
            "the method returned {} output(s); the case expects {}",
            actual.len(),
            case.expected_outputs.len()
        ));
        return report;
    }
    for (i, (e, a)) in case.expected_outputs.iter().zip(&actual).enumerate() {
        let out = match value_of(bundled, e) {
            Ok(e) => compare_output(i, a, &e, tol),
            Err(err) => {
                report.error = Some(format!("expected output {i}: {err}"));
                return report;
            }
        };
        report.outputs.push(out);
    }
    if report.outputs.iter().all(|o| o.passed) {
        report.status = CaseStatus::Pass;
    }
    report
}

/// Sets the case's inputs, executes the method and returns its outputs on the host.
fn execute_case(
    bundled: &BundledProgram,
    module: &mut Module,
    method: &str,
    case: &BundledTestCase,
) -> Result<Vec<Value>> {
    let inputs = case
        .inputs
        .iter()
        .enumerate()
        .map(|(i, v)| value_of(bundled, v).map_err(|e| e.context(format!("input {i}"))))
        .collect::<Result<Vec<_>>>()?;
    let m = module.method(method)?;
    m.set_inputs(&inputs)?;
    m.execute()?;
    m.host_output_values()
}

/// A bundled value as a runtime value; tensors row-major in host memory.
pub fn value_of(bundled: &BundledProgram, v: &BundledValue) -> Result<Value> {
    Ok(match v {
        BundledValue::Tensor(t) => Value::Tensor(tensor_of(bundled, t)?),
        BundledValue::Int(x) => Value::Int(*x),
        BundledValue::Bool(x) => Value::Bool(*x),
        BundledValue::Double(x) => Value::Double(*x),
    })
}

/// A bundled tensor as a row-major host tensor (its bytes reordered when stored in another
/// dim order).
pub fn tensor_of(bundled: &BundledProgram, t: &BundledTensor) -> Result<Tensor> {
    let stored = Tensor::from_bytes(t.dtype, &t.sizes, bundled.tensor_bytes(t))?;
    if t.is_row_major() {
        return Ok(stored);
    }
    let flat = stored.view();
    // The metadata of the stored order, over memory `stored` owns (host, aligned, alive
    // until the copy below returns).
    let imp = crate::TensorImpl::new(
        t.dtype,
        &t.sizes,
        Some(&t.dim_order),
        Dynamism::Static,
        Device::CPU,
        flat.data_ptr(),
        flat.capacity(),
    )?;
    etch_runtime::tensor_to_owned(&imp, &DeviceRegistry::new())
}

/// Compares output `index` (`actual`) with `expected`.
fn compare_output(index: usize, actual: &Value, expected: &Value, tol: Tolerance) -> OutputReport {
    let mut r = OutputReport {
        index,
        passed: false,
        numel: 1,
        mismatched: 0,
        max_abs_error: 0.0,
        worst: None,
        problem: None,
    };
    let scalar = |a: f64, e: f64, (close, err): (bool, f64), r: &mut OutputReport| {
        r.passed = close;
        r.mismatched = usize::from(!close);
        r.max_abs_error = err;
        r.worst = Some(WorstElement {
            index: Vec::new(),
            actual: a,
            expected: e,
        });
    };
    match (actual, expected) {
        (Value::Tensor(a), Value::Tensor(e)) => compare_tensors(a, e, tol, &mut r),
        (Value::Int(a), Value::Int(e)) => {
            let err = (*a as f64 - *e as f64).abs();
            scalar(*a as f64, *e as f64, (a == e, err), &mut r)
        }
        (Value::Bool(a), Value::Bool(e)) => {
            let (a, e) = (f64::from(u8::from(*a)), f64::from(u8::from(*e)));
            scalar(a, e, (a == e, (a - e).abs()), &mut r)
        }
        (Value::Double(a), Value::Double(e)) => {
            scalar(*a, *e, tol.check(*a, *e, (a - e).abs()), &mut r)
        }
        (a, e) => {
            r.problem = Some(format!(
                "the method returned {}, the case expects {}",
                a.tag().name(),
                e.tag().name()
            ))
        }
    }
    r
}

fn compare_tensors(a: &Tensor, e: &Tensor, tol: Tolerance, r: &mut OutputReport) {
    r.numel = e.numel();
    if a.dtype() != e.dtype() || a.sizes() != e.sizes() {
        r.problem = Some(format!(
            "the method returned {} {:?}, the case expects {} {:?}",
            a.dtype(),
            a.sizes(),
            e.dtype(),
            e.sizes()
        ));
        return;
    }
    let (ab, eb) = match (a.as_bytes(), e.as_bytes()) {
        (Ok(ab), Ok(eb)) => (ab, eb),
        (Err(err), _) | (_, Err(err)) => {
            r.problem = Some(err.to_string());
            return;
        }
    };
    let es = e.dtype().element_size().max(1);
    // Values for reporting (and for the tolerant dtypes' comparison); None for dtypes
    // without a numeric reading (quantized, bits), compared by bytes only.
    let values = a.to_f64_vec().ok().zip(e.to_f64_vec().ok());
    let tolerant = matches!(
        e.dtype(),
        ScalarType::Float | ScalarType::Double | ScalarType::Half
    );
    let mut worst: Option<(usize, f64)> = None;
    for (k, (x, y)) in ab.chunks_exact(es).zip(eb.chunks_exact(es)).enumerate() {
        let (av, ev) = match &values {
            Some((av, ev)) => (av.get(k).copied(), ev.get(k).copied()),
            None => (None, None),
        };
        let (close, err) = match (av, ev) {
            (Some(av), Some(ev)) if tolerant => tol.check(av, ev, diff(e.dtype(), av, ev)),
            (Some(av), Some(ev)) => (x == y, if x == y { 0.0 } else { (av - ev).abs() }),
            _ => (x == y, if x == y { 0.0 } else { f64::INFINITY }),
        };
        r.mismatched += usize::from(!close);
        if worst.is_none_or(|(_, w)| err > w) {
            worst = Some((k, err));
        }
    }
    r.passed = r.mismatched == 0;
    if let Some((k, err)) = worst {
        r.max_abs_error = err;
        let at = |v: &Vec<f64>| v.get(k).copied().unwrap_or(f64::NAN);
        r.worst = Some(WorstElement {
            index: unravel(k, e.sizes()),
            actual: values.as_ref().map_or(f64::NAN, |(av, _)| at(av)),
            expected: values.as_ref().map_or(f64::NAN, |(_, ev)| at(ev)),
        });
    }
}

/// `|a - e|` as upstream computes it: in single precision for Float, else in double.
fn diff(dtype: ScalarType, a: f64, e: f64) -> f64 {
    if dtype == ScalarType::Float {
        f64::from(((a as f32) - (e as f32)).abs())
    } else {
        (a - e).abs()
    }
}

/// Row-major coordinates of flat index `k`.
fn unravel(mut k: usize, sizes: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; sizes.len()];
    for (i, &s) in sizes.iter().enumerate().rev() {
        if s > 0 {
            idx[i] = k % s;
            k /= s;
        }
    }
    idx
}

impl Module {
    /// A module for the program embedded in a bundled program, loaded without copying it
    /// (it keeps the bundled program's bytes alive).
    pub fn from_bundled(bundled: &BundledProgram) -> Result<Module> {
        Ok(Module::from_program(bundled.program()?))
    }
}
