//! `etch bench`: load time, first run, median/min/max over iterations, and where the peak
//! RSS goes; `--profile` adds per-operator and per-delegate times, `--etdump` writes them
//! for ExecuTorch's Inspector.

use super::run::{InputOpts, Prepared, prepare, timed_runs};
use super::{ModelOpts, mib, ms, positive, proc_status_bytes};
use etch::Result;
use etch::profile::{self, EventKind, Profile};
use serde_json::json;
use std::time::Duration;

/// Time a method: load, first run, and median/min/max over the iterations after it.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelOpts,
    #[command(flatten)]
    pub inputs: InputOpts,
    /// Timed runs after the first
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = positive)]
    pub iterations: usize,
    /// Print the figures as one JSON object
    #[arg(long)]
    pub json: bool,
    /// Time every kernel and delegate call over N more runs and list the operators and
    /// delegates, slowest first (CUDA delegates run op by op during those runs, each op
    /// timed on the GPU with CUDA events)
    #[arg(long)]
    pub profile: bool,
    /// Write the profiled runs to FILE in ExecuTorch's ETDump format, for
    /// executorch.devtools.Inspector (implies --profile)
    #[arg(long, value_name = "FILE")]
    pub etdump: Option<std::path::PathBuf>,
}

/// `etch bench MODEL.pte [...]`.
pub fn cmd_bench(a: &BenchArgs) -> Result<()> {
    let n = a.iterations;
    let baseline = proc_status_bytes("VmRSS");
    if a.inputs.method.len() > 1 {
        return Err(etch::Error::invalid_argument(
            "etch bench times one method: give --method once (etch run runs several in order)",
        ));
    }
    let Prepared {
        mut module,
        method,
        inputs,
        load,
        ..
    } = prepare(&a.model, &a.inputs)?;
    let file_bytes = module.program().bytes().len() as u64;
    let m = module.method(&method)?;
    let planned: u64 = m.planned_bytes().iter().map(|&b| b as u64).sum();
    let times = timed_runs(m, &inputs, n + 1)?;
    let profile = if a.profile || a.etdump.is_some() {
        Some(profile_runs(&mut *m, &inputs, n)?)
    } else {
        None
    };
    if let (Some(p), Some(path)) = (&profile, &a.etdump) {
        std::fs::write(path, p.to_etdump()).map_err(|e| {
            etch::Error::access_failed(format!("cannot write {}: {e}", path.display()))
        })?;
    }
    let first = times[0];
    let mut rest: Vec<Duration> = times[1..].to_vec();
    rest.sort();
    let median = rest[rest.len() / 2];
    let (min, max) = (rest[0], rest[rest.len() - 1]);
    let peak = proc_status_bytes("VmHWM");
    let overhead = match (peak, baseline) {
        (Some(p), Some(b)) => Some(p.saturating_sub(b + planned + file_bytes)),
        _ => None,
    };
    let model = a.model.model_str();
    if a.json {
        let j = json!({
            "model": model,
            "method": method,
            "iterations": n,
            "load_ms": load.as_secs_f64() * 1e3,
            "first_run_ms": first.as_secs_f64() * 1e3,
            "median_ms": median.as_secs_f64() * 1e3,
            "min_ms": min.as_secs_f64() * 1e3,
            "max_ms": max.as_secs_f64() * 1e3,
            "peak_rss_bytes": peak,
            "baseline_rss_bytes": baseline,
            "planned_bytes": planned,
            "file_bytes": file_bytes,
            "overhead_bytes": overhead,
            "profile": profile.as_ref().map(profile_json),
        });
        println!("{j}");
        return Ok(());
    }
    println!("{model} ({method}), {n} iterations after the first");
    println!("load       {}", ms(load));
    println!("first run  {}", ms(first));
    println!(
        "execute    median {}  min {}  max {}",
        ms(median),
        ms(min),
        ms(max)
    );
    if let (Some(p), Some(b)) = (peak, baseline) {
        println!(
            "memory     peak RSS {} = baseline {} + planned arenas {} + mapped file {} + overhead {}",
            mib(p),
            mib(b),
            mib(planned),
            mib(file_bytes),
            mib(overhead.unwrap_or(0))
        );
    }
    if let Some(p) = &profile {
        print_profile(p);
    }
    if let Some(path) = &a.etdump {
        println!(
            "etdump     {} (ExecuTorch's Inspector reads it: see README)",
            path.display()
        );
    }
    Ok(())
}

/// Runs the method `n` more times (inputs set before each run, as in the timed runs: the
/// planned memory that holds them may be reused during a run) with the profiler on.
fn profile_runs(m: &mut etch::Method, inputs: &[etch::Value], n: usize) -> Result<Profile> {
    profile::take();
    let runs = (|| {
        for _ in 0..n {
            m.set_inputs(inputs)?;
            profile::set_enabled(true);
            let ran = m.execute().and_then(|()| m.synchronize());
            profile::set_enabled(false);
            ran?;
        }
        Ok(())
    })();
    profile::set_enabled(false);
    let p = profile::take();
    runs.map(|()| p)
}

/// What a row is, as printed.
fn kind_name(k: EventKind) -> &'static str {
    match k {
        EventKind::Method => "method",
        EventKind::Operator => "op",
        EventKind::Delegate => "delegate",
        EventKind::DelegateOp => "delegate op",
    }
}

/// `x` per run: a whole number when it divides evenly.
fn per_run(x: u64, runs: usize) -> String {
    let runs = runs.max(1) as u64;
    if x.is_multiple_of(runs) {
        format!("{}", x / runs)
    } else {
        format!("{:.1}", x as f64 / runs as f64)
    }
}

/// Prints the rows, slowest first: calls, time and share of the run, per run, and the mean
/// time of one call.
fn print_profile(p: &Profile) {
    let runs = p.runs.len().max(1);
    let run = p.run_time().as_secs_f64() / runs as f64;
    println!(
        "profile over {} runs (per run; % of the whole run, {:.3} ms; delegate ops are inside their delegate's time):",
        p.runs.len(),
        run * 1e3
    );
    println!(
        "{:>10} {:>8} {:>10} {:>6}  {:<11}  name",
        "ms/run", "calls", "us/call", "%", "kind"
    );
    let rows = p.rows();
    for r in &rows {
        let t = r.total.as_secs_f64() / runs as f64;
        println!(
            "{:>10.3} {:>8} {:>10.1} {:>5.1}%  {:<11}  {}{}",
            t * 1e3,
            per_run(r.calls, runs),
            r.mean().as_secs_f64() * 1e6,
            100.0 * t / run.max(1e-12),
            kind_name(r.kind),
            r.name,
            if r.device_timed { " (GPU time)" } else { "" }
        );
    }
    if rows.iter().any(|r| r.device_timed) {
        println!(
            "GPU time: measured with CUDA events around each op of the CUDA delegates{}",
            if etch::cuda_graphs() {
                ", which ran op by op, without their CUDA graphs, during these runs"
            } else {
                ""
            }
        );
    }
}

/// The profile for `--json`.
fn profile_json(p: &Profile) -> serde_json::Value {
    let runs = p.runs.len().max(1) as f64;
    let run_ms = p.run_time().as_secs_f64() * 1e3 / runs;
    let rows: Vec<serde_json::Value> = p
        .rows()
        .iter()
        .map(|r| {
            let ms = r.total.as_secs_f64() * 1e3 / runs;
            json!({
                "kind": kind_name(r.kind),
                "name": r.name,
                "calls_per_run": r.calls as f64 / runs,
                "ms_per_run": ms,
                "mean_us": r.mean().as_secs_f64() * 1e6,
                "share": ms / run_ms.max(1e-12),
                "gpu_time": r.device_timed,
            })
        })
        .collect();
    json!({"runs": p.runs.len(), "run_ms": run_ms, "rows": rows})
}
