//! `etch bench`: load time, first run, median/min/max over iterations, and where the peak
//! RSS goes; `--profile` adds per-operator times.

use super::run::{InputOpts, Prepared, prepare, timed_runs};
use super::{ModelOpts, mib, ms, positive, proc_status_bytes};
use etch::Result;
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
    /// Time every kernel call over N more runs and list the operators, slowest first
    /// (turns CUDA graph replay off)
    #[arg(long)]
    pub profile: bool,
}

/// `etch bench MODEL.pte [...]`.
pub fn cmd_bench(a: &BenchArgs) -> Result<()> {
    if a.profile {
        // Profiled kernel calls must run: no graph replay.
        etch::set_cuda_graphs(false);
    }
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
    if a.profile {
        print_profile(&mut *m, &inputs, n)?;
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
    Ok(())
}

/// Runs the method `n` more times (inputs set before each run, as in the timed runs: the
/// planned memory that holds them may be reused during a run) with every kernel call timed
/// and prints the operators, slowest first (device work is waited for after each call).
fn print_profile(m: &mut etch::Method, inputs: &[etch::Value], n: usize) -> Result<()> {
    use etch::profile;
    profile::take();
    profile::set_enabled(true);
    for _ in 0..n {
        profile::set_enabled(false);
        m.set_inputs(inputs)?;
        profile::set_enabled(true);
        m.execute()?;
        m.synchronize()?;
    }
    profile::set_enabled(false);
    let ops = profile::take();
    let total: f64 = ops.iter().map(|o| o.total.as_secs_f64()).sum();
    println!("profile over {n} runs (each call waited for; totals per run):");
    println!(
        "{:>10} {:>7} {:>10} {:>6}  operator",
        "ms/run", "calls", "us/call", "%"
    );
    for o in &ops {
        let t = o.total.as_secs_f64();
        println!(
            "{:>10.3} {:>7} {:>10.1} {:>5.1}%  {}",
            t * 1e3 / n as f64,
            o.calls / n as u64,
            t * 1e6 / o.calls.max(1) as f64,
            100.0 * t / total.max(1e-12),
            o.op
        );
    }
    Ok(())
}
