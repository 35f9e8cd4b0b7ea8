//! `etch run`: runs a method on given or random inputs, prints a summary of each output
//! and can write them as `.npy`. Also what `bench` shares with it: choosing the method and
//! making its inputs.

use super::progress::Progress;
use super::{ModelOpts, Opened, ms, positive, shape_str};
use etch::{Error, Module, Result, ScalarType, SimulatedAllocator, Tag, Tensor, Value, npy};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which method runs and on what (`run`, `bench`).
#[derive(clap::Args, Debug)]
pub struct InputOpts {
    /// Method to run [default: forward, or the only method]. `etch run` takes it more than
    /// once to run several methods in order on one loaded module (e.g. `--method set_state
    /// --method get_state`)
    #[arg(long, value_name = "NAME")]
    pub method: Vec<String>,
    /// One per method input, in order (with several --method, the first method's inputs,
    /// then the next's). A 0-d array feeds an Int, Double or Bool input; float32 arrays
    /// are accepted for bfloat16 inputs [default: deterministic random inputs of the
    /// declared shapes]
    #[arg(long, value_name = "FILE.npy")]
    pub input: Vec<PathBuf>,
}

/// Run a method and print (or write) its outputs.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelOpts,
    #[command(flatten)]
    pub inputs: InputOpts,
    /// Write output_0.npy, output_1.npy, ... there (bfloat16 as float32)
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// Run N times on one loaded method (state carries over)
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = positive)]
    pub iterations: usize,
}

/// A loaded module, its chosen method and its inputs: what `run` and `bench` share.
pub struct Prepared {
    pub module: Module,
    pub method: String,
    pub inputs: Vec<Value>,
    /// The methods given after the first (`etch run --method A --method B`), with theirs.
    pub then: Vec<(String, Vec<Value>)>,
    pub load: Duration,
    pub simulated: Option<Arc<SimulatedAllocator>>,
}

/// Opens the model, loads the method and makes its inputs.
pub fn prepare(model: &ModelOpts, io: &InputOpts) -> Result<Prepared> {
    let t0 = Instant::now();
    let progress = Progress::new(1 + io.method.len().max(1) as u64, true);
    let Opened {
        mut module,
        simulated,
    } = model.open(&progress)?;
    let methods = if io.method.is_empty() {
        let names = module.method_names();
        if names.iter().any(|n| n == "forward") || names.len() != 1 {
            vec!["forward".to_string()]
        } else {
            vec![names[0].clone()]
        }
    } else {
        io.method.clone()
    };
    for method in &methods {
        progress.step(format!("loading {method}"));
        module.load_method(method)?;
    }
    progress.finish();
    let load = t0.elapsed();
    let mut calls = method_inputs(&module, &methods, &io.input)?.into_iter();
    let (method, inputs) = calls
        .next()
        .ok_or_else(|| Error::internal("no method to run"))?;
    Ok(Prepared {
        module,
        method,
        inputs,
        then: calls.collect(),
        load,
        simulated,
    })
}

/// Each method's inputs: from the `--input` files in order (each method takes as many as
/// it has inputs), or deterministic random ones when none are given.
fn method_inputs(
    module: &Module,
    methods: &[String],
    files: &[PathBuf],
) -> Result<Vec<(String, Vec<Value>)>> {
    let metas = methods
        .iter()
        .map(|m| module.method_meta(m))
        .collect::<Result<Vec<_>>>()?;
    let wanted: usize = metas.iter().map(|m| m.num_inputs()).sum();
    if !files.is_empty() && files.len() != wanted {
        let each: Vec<String> = methods
            .iter()
            .zip(&metas)
            .map(|(n, m)| format!("'{n}' {}", m.num_inputs()))
            .collect();
        return Err(Error::invalid_argument(format!(
            "{} --input files given; the methods take {wanted} ({})",
            files.len(),
            each.join(", ")
        )));
    }
    let mut next = files.iter();
    let mut out = Vec::with_capacity(methods.len());
    for (name, meta) in methods.iter().zip(&metas) {
        let inputs: Vec<Value> = if files.is_empty() {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
            meta.inputs()
                .iter()
                .map(|i| random_input(i, &mut rng))
                .collect::<Result<_>>()?
        } else {
            (0..meta.num_inputs())
                .zip(next.by_ref())
                .map(|(i, f)| adapt_input(i, npy::read(f)?, &meta.inputs()[i]))
                .collect::<Result<_>>()?
        };
        out.push((name.clone(), inputs));
    }
    Ok(out)
}

/// A small deterministic generator for default inputs.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn random_input(info: &etch::IoInfo, rng: &mut Rng) -> Result<Value> {
    Ok(match (&info.tag, &info.tensor) {
        (Tag::Tensor, Some(t)) => {
            let n: usize = t.sizes.iter().product();
            let vals: Vec<f64> = (0..n)
                .map(|_| {
                    if t.dtype.is_floating() {
                        rng.uniform() * 2.0 - 1.0
                    } else if t.dtype == ScalarType::Bool {
                        (rng.next() & 1) as f64
                    } else {
                        (rng.next() % 4) as f64
                    }
                })
                .collect();
            Value::Tensor(tensor_from_f64(&vals, &t.sizes, t.dtype)?)
        }
        (Tag::Int, _) => Value::Int(1),
        (Tag::Double, _) => Value::Double(1.0),
        (Tag::Bool, _) => Value::Bool(true),
        (tag, _) => {
            return Err(Error::not_supported(format!(
                "cannot make a default {} input; pass --input",
                tag.name()
            )));
        }
    })
}

fn tensor_from_f64(v: &[f64], sizes: &[usize], dtype: ScalarType) -> Result<Tensor> {
    use etch::{bf16, f16};
    match dtype {
        ScalarType::Float => {
            Tensor::from_slice(&v.iter().map(|&x| x as f32).collect::<Vec<_>>(), sizes)
        }
        ScalarType::Double => Tensor::from_slice(v, sizes),
        ScalarType::Half => Tensor::from_slice(
            &v.iter().map(|&x| f16::from_f64(x)).collect::<Vec<_>>(),
            sizes,
        ),
        ScalarType::BFloat16 => Tensor::from_slice(
            &v.iter().map(|&x| bf16::from_f64(x)).collect::<Vec<_>>(),
            sizes,
        ),
        ScalarType::Long => {
            Tensor::from_slice(&v.iter().map(|&x| x as i64).collect::<Vec<_>>(), sizes)
        }
        ScalarType::Int => {
            Tensor::from_slice(&v.iter().map(|&x| x as i32).collect::<Vec<_>>(), sizes)
        }
        ScalarType::Short => {
            Tensor::from_slice(&v.iter().map(|&x| x as i16).collect::<Vec<_>>(), sizes)
        }
        ScalarType::Char => {
            Tensor::from_slice(&v.iter().map(|&x| x as i8).collect::<Vec<_>>(), sizes)
        }
        ScalarType::Byte | ScalarType::Bool => {
            let b: Vec<u8> = v.iter().map(|&x| x as u8).collect();
            Tensor::from_bytes(dtype, sizes, &b)
        }
        other => Err(Error::not_supported(format!("cannot make {other} inputs"))),
    }
}

/// Converts a loaded `.npy` array to what input `i` expects.
fn adapt_input(i: usize, t: Tensor, info: &etch::IoInfo) -> Result<Value> {
    let err = |want: &str| {
        Error::invalid_argument(format!(
            "input {i}: expected {want}, got a {} array of shape {}",
            t.dtype(),
            shape_str(t.sizes())
        ))
    };
    match info.tag {
        Tag::Tensor => {
            let want = info.tensor.as_ref().map(|x| x.dtype).unwrap_or(t.dtype());
            if t.dtype() == want {
                Ok(Value::Tensor(t))
            } else if want == ScalarType::BFloat16 && t.dtype() == ScalarType::Float {
                let v: Vec<etch::bf16> = t
                    .as_slice::<f32>()?
                    .iter()
                    .map(|&x| etch::bf16::from_f32(x))
                    .collect();
                Ok(Value::Tensor(Tensor::from_slice(&v, t.sizes())?))
            } else {
                Err(err(&format!("a {want} tensor")))
            }
        }
        Tag::Int | Tag::Double | Tag::Bool => {
            let scalar_err = || err(&format!("a 0-d array for the {} input", info.tag.name()));
            if !t.sizes().is_empty() {
                return Err(scalar_err());
            }
            let v = t.to_f64_vec()?[0];
            Ok(match info.tag {
                Tag::Int if t.dtype().is_integral() => Value::Int(v as i64),
                Tag::Double => Value::Double(v),
                Tag::Bool if matches!(t.dtype(), ScalarType::Bool) => Value::Bool(v != 0.0),
                _ => return Err(scalar_err()),
            })
        }
        other => Err(Error::not_supported(format!(
            "input {i} is a {}, which .npy files cannot feed",
            other.name()
        ))),
    }
}

fn summarize(i: usize, v: &Value) -> String {
    match v {
        Value::Tensor(t) => {
            let s = match t.to_f64_vec() {
                Ok(vals) if !vals.is_empty() => {
                    let min = vals.iter().cloned().fold(f64::INFINITY, f64::min);
                    let max = vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let mean = vals.iter().sum::<f64>() / vals.len() as f64;
                    let head: Vec<String> =
                        vals.iter().take(4).map(|x| format!("{x:.5}")).collect();
                    format!(
                        "min {min:.5} max {max:.5} mean {mean:.5} [{}{}]",
                        head.join(", "),
                        if vals.len() > 4 { ", ..." } else { "" }
                    )
                }
                Ok(_) => "empty".to_string(),
                Err(_) => String::new(),
            };
            format!("output {i}: {} {} {s}", t.dtype(), shape_str(t.sizes()))
        }
        Value::None => format!("output {i}: None"),
        Value::Int(x) => format!("output {i}: Int {x}"),
        Value::Double(x) => format!("output {i}: Double {x}"),
        Value::Bool(x) => format!("output {i}: Bool {x}"),
        Value::String(x) => format!("output {i}: String {x:?}"),
        other => format!("output {i}: {other:?}"),
    }
}

/// The output as a `.npy` array: tensors and scalars; `None` for the other values (None,
/// strings, lists), which `etch run` prints only.
fn value_to_npy(v: &Value) -> Result<Option<Tensor>> {
    Ok(Some(match v {
        Value::Tensor(t) => t.clone(),
        Value::Int(x) => Tensor::scalar(*x)?,
        Value::Double(x) => Tensor::scalar(*x)?,
        Value::Bool(b) => Tensor::from_bytes(ScalarType::Bool, &[], &[*b as u8])?,
        _ => return Ok(None),
    }))
}

/// Writes `{prefix}output_{i}.npy` for each tensor or scalar output into `dir`.
fn write_outputs(dir: &std::path::Path, prefix: &str, outputs: &[Value]) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::access_failed(format!("cannot create '{}': {e}", dir.display())))?;
    for (i, v) in outputs.iter().enumerate() {
        match value_to_npy(v)? {
            Some(t) => npy::write(dir.join(format!("{prefix}output_{i}.npy")), &t)?,
            None => println!("{prefix}output {i} is a {}: not written", v.tag().name()),
        }
    }
    Ok(())
}

/// Runs several methods in order on one loaded module (`--method A --method B`), the whole
/// sequence `--iterations` times; prints each method's outputs of the last round and
/// writes them as `{method}_output_{i}.npy`.
fn run_sequence(
    a: &RunArgs,
    module: &mut Module,
    calls: &[(String, Vec<Value>)],
    load: Duration,
) -> Result<()> {
    let mut times = vec![Vec::new(); calls.len()];
    for round in 0..a.iterations {
        for (k, (name, inputs)) in calls.iter().enumerate() {
            let m = module.method(name)?;
            times[k].extend(timed_runs(m, inputs, 1)?);
            if round + 1 < a.iterations {
                continue;
            }
            let outputs = m.host_output_values()?;
            println!("method {name}:");
            for (i, v) in outputs.iter().enumerate() {
                println!("  {}", summarize(i, v));
            }
            if let Some(dir) = &a.output_dir {
                write_outputs(dir, &format!("{name}_"), &outputs)?;
            }
        }
    }
    println!("load {}", ms(load));
    for ((name, _), t) in calls.iter().zip(&mut times) {
        t.sort();
        println!(
            "{name}: median {} over {} run(s)",
            ms(t[t.len() / 2]),
            t.len()
        );
    }
    Ok(())
}

/// Sets the inputs and executes `n` times, waiting for device outputs; the times.
pub fn timed_runs(m: &mut etch::Method, inputs: &[Value], n: usize) -> Result<Vec<Duration>> {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        m.set_inputs(inputs)?;
        let t = Instant::now();
        m.execute()?;
        // Outputs left on a device are timed until they are ready.
        m.synchronize()?;
        times.push(t.elapsed());
    }
    Ok(times)
}

/// `etch run MODEL.pte [...]`.
pub fn cmd_run(a: &RunArgs) -> Result<()> {
    let Prepared {
        mut module,
        method,
        inputs,
        then,
        load,
        simulated,
    } = prepare(&a.model, &a.inputs)?;
    if !then.is_empty() {
        let mut calls = vec![(method, inputs)];
        calls.extend(then);
        return run_sequence(a, &mut module, &calls, load);
    }
    let m = module.method(&method)?;
    let times = timed_runs(m, &inputs, a.iterations)?;
    let outputs = m.host_output_values()?;
    for (i, v) in outputs.iter().enumerate() {
        println!("{}", summarize(i, v));
    }
    if let Some(dir) = &a.output_dir {
        write_outputs(dir, "", &outputs)?;
    }
    let mut sorted = times.clone();
    sorted.sort();
    println!(
        "load {} | first run {} | median {} over {} run(s)",
        ms(load),
        ms(times[0]),
        ms(sorted[sorted.len() / 2]),
        a.iterations
    );
    if let Some(sim) = simulated {
        println!("{}", super::simulated_stats_line(&sim));
    }
    Ok(())
}
