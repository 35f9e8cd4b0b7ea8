//! `etch test`: runs the test cases of a bundled program (`.bpte`) and compares every
//! output with the expected one ([`etch::bundled::run_tests`]).

use super::{DeviceOpts, Opened, simulated_stats_line, to_json_pretty};
use etch::bundled::{BundledProgram, CaseReport, CaseStatus, OutputReport, TestReport, Tolerance};
use etch::{Module, Result};
use serde_json::{Value as Json, json};
use std::path::PathBuf;

/// Run the test cases of a bundled program and compare the outputs.
#[derive(clap::Args, Debug)]
pub struct TestArgs {
    /// The bundled program (.bpte), as executorch.devtools.BundledProgram writes it
    #[arg(value_name = "MODEL.bpte")]
    pub model: PathBuf,
    /// External constants, for programs exported with external_constants (repeatable)
    #[arg(long, value_name = "FILE.ptd")]
    pub data: Vec<PathBuf>,
    #[command(flatten)]
    pub device: DeviceOpts,
    /// Relative tolerance: an element is close when |actual - expected| <= atol +
    /// rtol * |expected| (Float, Double, Half; other dtypes must be equal). The default is
    /// upstream's (Tolerance::default())
    #[arg(long, value_name = "R", default_value = "1e-5")]
    pub rtol: f64,
    /// Absolute tolerance (the default is upstream's)
    #[arg(long, value_name = "A", default_value = "1e-8")]
    pub atol: f64,
    /// Print one JSON object instead of text
    #[arg(long)]
    pub json: bool,
}

/// `etch test MODEL.bpte [...]`: true when every case passed.
pub fn cmd_test(a: &TestArgs) -> Result<bool> {
    let bundled = BundledProgram::from_file(&a.model).map_err(|e| e.context(a.model.display()))?;
    let Opened {
        mut module,
        simulated,
    } = a.device.apply(Module::from_bundled(&bundled)?)?;
    for d in &a.data {
        module = module.with_data_file(d)?;
    }
    let tol = Tolerance {
        rtol: a.rtol,
        atol: a.atol,
    };
    let report = etch::bundled::run_tests(&bundled, &mut module, tol);
    if a.json {
        let sim = simulated.as_deref().map(|s| {
            let s = s.stats();
            json!({
                "allocations": s.allocations,
                "live_allocations": s.live_allocations,
                "h2d_copies": s.h2d_copies,
                "h2d_bytes": s.h2d_bytes,
                "d2h_copies": s.d2h_copies,
                "d2h_bytes": s.d2h_bytes,
            })
        });
        println!("{}", to_json_pretty(&report_json(a, &report, sim))?);
    } else {
        for c in &report.cases {
            println!("{}", case_line(c));
        }
        println!("{}", summary_line(&report));
        if let Some(sim) = simulated {
            println!("{}", simulated_stats_line(&sim));
        }
    }
    Ok(report.success())
}

/// `METHOD case I: STATUS  details`.
fn case_line(c: &CaseReport) -> String {
    let head = format!("{} case {}: {}", c.method, c.case, c.status.name());
    if let Some(e) = &c.error {
        return format!("{head}  {e}");
    }
    if c.status == CaseStatus::Skip {
        return format!("{head}  no expected outputs");
    }
    let mut parts = Vec::new();
    for o in c.outputs.iter().filter(|o| !o.passed) {
        parts.push(match &o.problem {
            Some(p) => format!("output {}: {p}", o.index),
            None => format!(
                "output {}: {}/{} element(s) outside tolerance",
                o.index, o.mismatched, o.numel
            ),
        });
    }
    if let Some(w) = c.worst_output() {
        parts.push(worst_text(w));
    }
    if parts.is_empty() {
        head
    } else {
        format!("{head}  {}", parts.join("; "))
    }
}

/// `max |err| E at output I [i, j] (got A, expected B)`, or `exact` when every element
/// is equal.
fn worst_text(o: &OutputReport) -> String {
    let Some(w) = &o.worst else {
        return String::new();
    };
    if o.max_abs_error == 0.0 {
        return "exact".to_string();
    }
    let idx: Vec<String> = w.index.iter().map(|i| i.to_string()).collect();
    format!(
        "max |err| {:.3e} at output {} [{}] (got {}, expected {})",
        o.max_abs_error,
        o.index,
        idx.join(", "),
        short(w.actual),
        short(w.expected)
    )
}

/// A value in its shortest form: as a float32 when it is one (most outputs are).
fn short(v: f64) -> String {
    let f = v as f32;
    if f64::from(f) == v {
        format!("{f}")
    } else {
        format!("{v}")
    }
}

fn summary_line(r: &TestReport) -> String {
    let mut s = format!(
        "{} passed, {} failed, {} skipped of {} case(s) (rtol {:e}, atol {:e})",
        r.passed(),
        r.failed(),
        r.skipped(),
        r.cases.len(),
        r.tolerance.rtol,
        r.tolerance.atol
    );
    if !r.untested_methods.is_empty() {
        s.push_str(&format!(
            "; methods without test cases: {}",
            r.untested_methods.join(", ")
        ));
    }
    s
}

fn output_json(o: &OutputReport) -> Json {
    json!({
        "index": o.index,
        "passed": o.passed,
        "numel": o.numel,
        "mismatched": o.mismatched,
        "max_abs_error": o.max_abs_error,
        "worst_index": o.worst.as_ref().map(|w| w.index.clone()),
        "actual": o.worst.as_ref().map(|w| w.actual),
        "expected": o.worst.as_ref().map(|w| w.expected),
        "problem": o.problem,
    })
}

fn report_json(a: &TestArgs, r: &TestReport, simulated: Option<Json>) -> Json {
    let cases: Vec<Json> = r
        .cases
        .iter()
        .map(|c| {
            json!({
                "method": c.method,
                "case": c.case,
                "status": c.status.name(),
                "error": c.error,
                "outputs": c.outputs.iter().map(output_json).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "model": a.model.display().to_string(),
        "rtol": r.tolerance.rtol,
        "atol": r.tolerance.atol,
        "passed": r.passed(),
        "failed": r.failed(),
        "skipped": r.skipped(),
        "untested_methods": r.untested_methods,
        "cases": cases,
        "simulated_cuda": simulated,
    })
}
