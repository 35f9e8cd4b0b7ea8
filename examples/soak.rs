//! Soak test (issue #15; a script, not CI): for `--minutes` minutes, several threads at once
//! load, execute, generate with and drop modules in a loop, checking every result against
//! the fixtures' expected outputs; every `--every` seconds a line with the iterations, the
//! host RSS and (with CUDA) the device's used memory. After the warm-up (`--warmup`
//! seconds, default 60, at most half the run: kernel compilation, thread pools, caches),
//! the peak RSS and the peak device use over the last third of the samples must be within
//! 1% of their peaks over the first third (a sample catches whichever modules are alive at
//! that instant, so single samples swing; the envelope shows growth), with no error; the
//! exit status says so.
//!
//! ```text
//! cargo run --release --example soak -- --minutes 30              # CPU
//! cargo run --release --example soak -- --minutes 30 --cuda       # + programs lowered to cuda:0
//! ```
//!
//! Workers (each its own thread, each iteration a fresh Module, dropped at the end):
//! `mlp` (execute, tests/fixtures/mlp), `tokens` (execute, tests/fixtures/token_model),
//! `generate` (greedy prefill + decode of the Qwen 3.5 MoE fixture with its checkpoint,
//! ids against transformers'), and with `--cuda` the same three lowered to cuda:0.

use etch::{Module, Tensor, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

type Check = Box<dyn Fn(&Path) -> Result<(), String> + Send + Sync>;

/// Runs `model`'s forward on the fixture's `forward_0_in0.npy` and compares outputs `outs`
/// with the fixture's expected arrays.
fn execute_check(fixture: &'static str, outs: &'static [(usize, &'static str)]) -> Check {
    let dir = fixtures().join(fixture);
    Box::new(move |model: &Path| {
        let s = |e: etch::Error| e.to_string();
        let x = etch::npy::read(dir.join("forward_0_in0.npy")).map_err(s)?;
        let mut m = Module::from_file(model).map_err(s)?;
        let got = m.execute("forward", &[Value::Tensor(x)]).map_err(s)?;
        for &(i, want) in outs {
            let w = etch::npy::read(dir.join(want)).map_err(s)?;
            let g = got[i].as_tensor().map_err(s)?.to_cpu().map_err(s)?;
            let (g, w) = (g.to_f64_vec().map_err(s)?, w.to_f64_vec().map_err(s)?);
            let close = |(a, b): (&f64, &f64)| (a - b).abs() <= 1e-4 * (1.0 + b.abs());
            if g.len() != w.len() || !g.iter().zip(&w).all(close) {
                return Err(format!(
                    "{}: output {i} differs from {want}",
                    model.display()
                ));
            }
        }
        Ok(())
    })
}

/// Greedy generation with the Qwen fixture's first two cases: prefill, then decode, the
/// ids against transformers' (expected.json).
fn generate_check() -> Check {
    let expected: serde_json::Value = serde_json::from_slice(
        &std::fs::read(fixtures().join("qwen3_5_moe/expected.json")).unwrap(),
    )
    .unwrap();
    Box::new(move |model: &Path| {
        let ckpt = fixtures().join("qwen3_5_moe/ckpt");
        // The prefill/decode convention: the methods share their state through shared
        // arenas, as `etch generate` loads such programs.
        let mut m = Module::from_file(model)
            .and_then(|m| m.with_weights(&ckpt))
            .map_err(|e| e.to_string())?
            .with_shared_arenas(true);
        let greedy = Value::Tensor(Tensor::from_slice(&[0.0f32, 0.0, 1.0, 0.5], &[4]).unwrap());
        for case in expected["cases"].as_array().unwrap().iter().take(2) {
            let ids = |k: &str| -> Vec<i64> {
                case[k]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_i64().unwrap())
                    .collect()
            };
            let (prompt, want) = (ids("prompt_ids"), ids("generated_ids"));
            let step =
                |m: &mut Module, method: &str, toks: &[i64], pos: i64| -> Result<i64, String> {
                    let t =
                        Tensor::from_slice(toks, &[1, toks.len()]).map_err(|e| e.to_string())?;
                    let p = Tensor::from_slice(&[pos], &[1]).map_err(|e| e.to_string())?;
                    let out = m
                        .execute(
                            method,
                            &[Value::Tensor(t), Value::Tensor(p), greedy.clone()],
                        )
                        .map_err(|e| e.to_string())?;
                    let o = out[0]
                        .as_tensor()
                        .map_err(|e| e.to_string())?
                        .to_cpu()
                        .map_err(|e| e.to_string())?;
                    Ok(o.to_f64_vec().map_err(|e| e.to_string())?[0] as i64)
                };
            let mut got = vec![step(&mut m, "prefill", &prompt, 0)?];
            while got.len() < want.len() {
                let pos = (prompt.len() + got.len() - 1) as i64;
                got.push(step(&mut m, "decode", &[*got.last().unwrap()], pos)?);
            }
            if got != want {
                return Err(format!(
                    "{}: ids {got:?}, transformers {want:?}",
                    model.display()
                ));
            }
        }
        Ok(())
    })
}

/// Host RSS in bytes (/proc/self/statm).
fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    s.split_whitespace()
        .nth(1)
        .and_then(|p| p.parse::<u64>().ok())
        .unwrap_or(0)
        * 4096
}

/// Free and total device memory of cuda:0, when CUDA is there.
fn device_free() -> Option<(usize, usize)> {
    etch::devices_status()
        .cuda
        .as_ref()
        .and_then(|c| c.mem_info(0).ok())
}

/// `etch lower IN -o OUT --ops cuda` with the etch binary next to this example.
fn lower(src: &Path, out: &Path) {
    let exe = std::env::current_exe().unwrap();
    let etch = exe.parent().unwrap().parent().unwrap().join("etch");
    let st = std::process::Command::new(&etch)
        .arg("lower")
        .arg(src)
        .arg("-o")
        .arg(out)
        .args(["--ops", "cuda"])
        .status()
        .unwrap_or_else(|e| panic!("{}: {e}", etch.display()));
    assert!(st.success(), "lowering {} failed", src.display());
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let minutes: f64 = arg(&args, "--minutes").map_or(30.0, |v| v.parse().unwrap());
    let every: u64 = arg(&args, "--every").map_or(10, |v| v.parse().unwrap());
    let warmup: f64 = arg(&args, "--warmup").map_or(60.0, |v| v.parse().unwrap());
    let cuda = args.iter().any(|a| a == "--cuda");
    let f = fixtures();
    let mut work: Vec<(String, PathBuf, Check)> = vec![
        (
            "mlp".into(),
            f.join("mlp/model.pte"),
            execute_check("mlp", &[(0, "forward_0_out0.npy")]),
        ),
        (
            "tokens".into(),
            f.join("token_model/model.pte"),
            execute_check(
                "token_model",
                &[(0, "forward_0_out0.npy"), (1, "forward_0_out1.npy")],
            ),
        ),
        (
            "generate".into(),
            f.join("qwen3_5_moe/model.pte"),
            generate_check(),
        ),
    ];
    if cuda {
        let dir = std::env::temp_dir()
            .join(format!("etch-soak-{}", std::process::id()))
            .join("lowered");
        std::fs::create_dir_all(&dir).unwrap();
        let mut dev = Vec::new();
        for (name, src, _) in &work {
            let out = dir.join(format!("{name}.pte"));
            lower(src, &out);
            dev.push((format!("{name}@cuda"), out));
        }
        let checks = [
            execute_check("mlp", &[(0, "forward_0_out0.npy")]),
            execute_check(
                "token_model",
                &[(0, "forward_0_out0.npy"), (1, "forward_0_out1.npy")],
            ),
            generate_check(),
        ];
        for ((n, p), c) in dev.into_iter().zip(checks) {
            work.push((n, p, c));
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicBool::new(false));
    let counts: Vec<Arc<AtomicU64>> = work.iter().map(|_| Arc::new(AtomicU64::new(0))).collect();
    let names: Vec<String> = work.iter().map(|w| w.0.clone()).collect();
    let handles: Vec<_> = work
        .into_iter()
        .zip(&counts)
        .map(|((name, path, check), n)| {
            let (stop, failed, n) = (stop.clone(), failed.clone(), n.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Err(e) = check(&path) {
                        eprintln!("ERROR {name}: {e}");
                        failed.store(true, Ordering::Relaxed);
                        return;
                    }
                    n.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let t0 = Instant::now();
    let end = Duration::from_secs_f64(minutes * 60.0);
    // (rss, device bytes in use) after the warm-up.
    let mut samples: Vec<(u64, Option<usize>)> = Vec::new();
    println!("soak: {minutes} min, workers {names:?}, a line every {every} s");
    while t0.elapsed() < end && !failed.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_secs(every).min(end.saturating_sub(t0.elapsed())));
        let (r, d) = (rss(), device_free());
        let its: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        println!(
            "{:7.1} s  iterations {its:?}  rss {:.1} MiB  device free {}",
            t0.elapsed().as_secs_f64(),
            r as f64 / (1 << 20) as f64,
            d.map_or("-".into(), |(f, _)| format!(
                "{:.1} MiB",
                f as f64 / (1 << 20) as f64
            ))
        );
        if t0.elapsed().as_secs_f64() >= warmup.min(minutes * 30.0) {
            samples.push((r, d.map(|(f, t)| t - f)));
        }
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        let _ = h.join();
    }
    if samples.len() < 3 {
        println!("FAIL: fewer than 3 samples after the warm-up");
        std::process::exit(1);
    }
    let third = samples.len() / 3;
    let peak = |s: &[(u64, Option<usize>)]| {
        let r = s.iter().map(|x| x.0).max().unwrap_or(0);
        let d = s.iter().filter_map(|x| x.1).max();
        (r, d)
    };
    let (r0, d0) = peak(&samples[..third]);
    let (r1, d1) = peak(&samples[samples.len() - third..]);
    let within = |a: f64, b: f64| a <= b * 1.01;
    let rss_ok = within(r1 as f64, r0 as f64);
    let dev_ok = match (d1, d0) {
        (Some(a), Some(b)) => within(a as f64, b as f64),
        _ => true,
    };
    let ok = rss_ok && dev_ok && !failed.load(Ordering::Relaxed);
    let mib = |x: u64| x as f64 / (1 << 20) as f64;
    println!(
        "{}: peak rss {:.1} -> {:.1} MiB ({}), peak device use {:?} -> {:?} MiB ({}), errors: {}",
        if ok { "PASS" } else { "FAIL" },
        mib(r0),
        mib(r1),
        if rss_ok { "within 1%" } else { "NOT within 1%" },
        d0.map(|x| mib(x as u64)),
        d1.map(|x| mib(x as u64)),
        if dev_ok { "within 1%" } else { "NOT within 1%" },
        failed.load(Ordering::Relaxed)
    );
    std::process::exit(if ok { 0 } else { 1 });
}
