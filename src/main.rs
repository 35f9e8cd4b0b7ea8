//! The `etch` command line: inspect and run ExecuTorch programs.

mod generate;

use etch::{Error, Module, Result, ScalarType, Tag, Tensor, Value, npy};
use serde_json::{Value as Json, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const USAGE: &str = "\
etch: run ExecuTorch programs (.pte)

USAGE:
    etch inspect MODEL.pte [--json]
    etch run MODEL.pte [--method NAME] [--input FILE.npy]... [--data FILE.ptd]... [--weights PATH]... [--no-cuda-graphs]
                       [--convert-dtype] [--output-dir DIR] [--iterations N] [--simulate-device cuda]
    etch bench MODEL.pte [--iterations N] [--json] [--profile] [run's --method/--input/--data/...]
    etch lower IN.pte -o OUT.pte [--device cuda:0] [--ops cuda|portable|FILE] [--per-op]
                       [--skip-h2d-inputs[=M1,M2]] [--skip-d2h-outputs[=M1,M2]]
                       [--replan-only [--no-alloc-graph-input] [--no-alloc-graph-output]]
                       [--alignment N] [--json]
    etch generate MODEL.pte --prompt-ids 1,2,3 [--max-new-tokens N] [--json]
                       [run's --data/--weights/--convert-dtype/--simulate-device/--no-cuda-graphs]
    etch ops
    etch devices
    etch help

run:
    --method NAME       method to run (default: forward, or the only method)
    --input FILE.npy    one per method input, in order; a 0-d array feeds an Int, Double
                        or Bool input; float32 arrays are accepted for bfloat16 inputs
                        (default: deterministic random inputs of the declared shapes)
    --data FILE.ptd     external constants (programs exported with external_constants)
    --weights PATH      external constants from a safetensors checkpoint (a .safetensors
                        file or a folder of shards), found by their state_dict names;
                        Hugging Face checkpoints are read as saved (per-expert weights,
                        model.language_model. prefixes, tied embeddings, index.json)
    --convert-dtype     convert float32/bfloat16/float16 checkpoint tensors to the dtypes
                        the program declares (default: a dtype mismatch is an error)
    --output-dir DIR    write output_0.npy, output_1.npy, ... (bfloat16 as float32)
    --iterations N      run N times on one loaded method (state carries over); default 1
    --simulate-device cuda
                        run device programs on a simulated CUDA device (host memory
                        behind a tracking allocator); inputs the method expects on the
                        device are staged through the allocator, device outputs copied back
    --no-cuda-graphs    run CUDA delegates op by op (by default a delegate called again with
                        the same inputs is recorded as a CUDA graph and replayed; the
                        environment variable ETCH_CUDA_GRAPHS=0 does the same)

lower:
    Moves the operators the device supports into ExecutorBackend delegates (nested .pte
    programs with the compile spec target_device), inserts et_copy host<->device copies
    at their boundaries and plans memory per device. The output is a standard .pte.
    --device DEV        target device (default cuda:0)
    --ops SET           what the device runs: `cuda` (etch's CUDA kernels, per operator and
                        dtype; the default), `portable` (every portable kernel: what the
                        simulated device runs) or a file with one operator name per line
    --per-op            one delegate per operator instead of maximal regions
    --skip-h2d-inputs[=M,..]   inputs of these methods (all without a list) are taken on
                        the device: no copy, and the inputs are left unplanned
    --skip-d2h-outputs[=M,..]  outputs of these methods stay on the device (unplanned)
    --replan-only       keep the program on the CPU; only re-plan its memory (never more
                        bytes than before)
    --no-alloc-graph-input / --no-alloc-graph-output
                        with --replan-only: leave the method inputs / outputs unplanned
                        (the caller binds them), as upstream's alloc_graph_input=False
    --alignment N       planning alignment (default 16, as upstream)
    --json              print the summary as JSON
";

fn main() {
    // Output piped into a command that stops reading (`etch inspect m.pte | head`) ends the
    // process quietly, as command-line tools do, instead of failing a write.
    #[cfg(unix)]
    // SAFETY: restores the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // Errors are reported as messages; a panic would be a bug, reported without a backtrace.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("etch: internal error: {info}");
    }));
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match run_cli(&args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    };
    std::process::exit(code);
}

fn run_cli(args: &[String]) -> Result<()> {
    let Some(cmd) = args.first() else {
        print!("{USAGE}");
        return Err(Error::invalid_argument("no command given"));
    };
    let rest = &args[1..];
    match cmd.as_str() {
        "inspect" => cmd_inspect(rest),
        "run" => cmd_run(rest),
        "bench" => cmd_bench(rest),
        "lower" => cmd_lower(rest),
        "generate" => generate::cmd_generate(rest),
        "ops" => cmd_ops(),
        "devices" => cmd_devices(),
        "help" | "--help" | "-h" => {
            print!("{USAGE}");
            Ok(())
        }
        other => Err(Error::invalid_argument(format!(
            "unknown command '{other}' (try `etch help`)"
        ))),
    }
}

/// Parsed `--flag value` options and positional arguments.
struct Opts {
    positional: Vec<String>,
    flags: Vec<(String, Option<String>)>,
}

impl Opts {
    fn parse(args: &[String], with_value: &[&str], switches: &[&str]) -> Result<Opts> {
        let mut positional = Vec::new();
        let mut flags = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if let Some(name) = a.strip_prefix("--") {
                let (name, inline) = match name.split_once('=') {
                    Some((n, v)) => (n, Some(v.to_string())),
                    None => (name, None),
                };
                if with_value.contains(&name) {
                    let v = match inline {
                        Some(v) => v,
                        None => it.next().cloned().ok_or_else(|| {
                            Error::invalid_argument(format!("--{name} needs a value"))
                        })?,
                    };
                    flags.push((name.to_string(), Some(v)));
                } else if switches.contains(&name) {
                    // A switch may carry an inline value (`--skip-h2d-inputs=forward`).
                    flags.push((name.to_string(), inline));
                } else {
                    return Err(Error::invalid_argument(format!("unknown option --{name}")));
                }
            } else {
                positional.push(a.clone());
            }
        }
        Ok(Opts { positional, flags })
    }
    fn all(&self, name: &str) -> Vec<&str> {
        self.flags
            .iter()
            .filter(|(n, _)| n == name)
            .filter_map(|(_, v)| v.as_deref())
            .collect()
    }
    fn one(&self, name: &str) -> Option<&str> {
        self.all(name).last().copied()
    }
    fn has(&self, name: &str) -> bool {
        self.flags.iter().any(|(n, _)| n == name)
    }
    fn model(&self) -> Result<&str> {
        match self.positional.as_slice() {
            [m] => Ok(m),
            [] => Err(Error::invalid_argument("no model file given")),
            more => Err(Error::invalid_argument(format!(
                "expected one model file, got {}",
                more.len()
            ))),
        }
    }
}

fn shape_str(s: &[usize]) -> String {
    format!(
        "[{}]",
        s.iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn spec_value(v: &[u8]) -> String {
    match std::str::from_utf8(v) {
        Ok(s) if s.chars().all(|c| !c.is_control()) => s.to_string(),
        _ => format!(
            "0x{}",
            v.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ),
    }
}

fn cmd_inspect(args: &[String]) -> Result<()> {
    let o = Opts::parse(args, &[], &["json"])?;
    let path = o.model()?;
    let module = Module::from_file(path)?;
    let program = module.program();
    let mut methods = Vec::new();
    for name in module.method_names() {
        let meta = module.method_meta(name)?;
        let io = |infos: &[etch::IoInfo]| -> Vec<Json> {
            infos
                .iter()
                .map(|i| match &i.tensor {
                    Some(t) => json!({
                        "tag": i.tag.name(),
                        "dtype": t.dtype.name(),
                        "sizes": t.sizes,
                        "dim_order": t.dim_order,
                        "dynamism": t.dynamism.name(),
                        "memory_planned": t.is_memory_planned,
                        "device": t.device.to_string(),
                    }),
                    None => json!({ "tag": i.tag.name() }),
                })
                .collect()
        };
        let mut buffers = Vec::new();
        for i in 0..meta.num_memory_planned_buffers() {
            buffers.push(json!({
                "index": i,
                "size": meta.memory_planned_buffer_size(i)?,
                "device": meta.memory_planned_buffer_device(i)?.to_string(),
            }));
        }
        let delegates: Vec<Json> = meta
            .delegates()
            .iter()
            .map(|d| {
                let specs: serde_json::Map<String, Json> = d
                    .compile_specs
                    .iter()
                    .map(|c| (c.key.clone(), Json::String(spec_value(&c.value))))
                    .collect();
                json!({"backend": d.backend, "compile_specs": specs, "blob_size": d.blob_size})
            })
            .collect();
        let counts: serde_json::Map<String, Json> = meta
            .operators()
            .iter()
            .zip(meta.operator_counts())
            .map(|(o, c)| (o.clone(), json!(c)))
            .collect();
        let tensor_devices: serde_json::Map<String, Json> = meta
            .tensor_devices()
            .iter()
            .map(|(d, n)| (d.to_string(), json!(n)))
            .collect();
        methods.push(json!({
            "name": name,
            "tensor_devices": tensor_devices,
            "inputs": io(meta.inputs()),
            "outputs": io(meta.outputs()),
            "operators": meta.operators(),
            "operator_counts": counts,
            "num_instructions": meta.num_instructions(),
            "delegates": delegates,
            "planned_buffers": buffers,
        }));
    }
    let report = json!({
        "file": path,
        "file_size": program.bytes().len(),
        "segments": program.num_segments(),
        "constant_bytes": program.constant_bytes()?,
        "named_data": program.named_data_keys()?,
        "methods": methods,
    });
    if o.has("json") {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| Error::internal(e.to_string()))?
        );
        return Ok(());
    }
    println!(
        "{path}: {} bytes, {} segment(s), {} constant bytes",
        program.bytes().len(),
        program.num_segments(),
        report["constant_bytes"]
    );
    for m in report["methods"].as_array().into_iter().flatten() {
        println!("\nmethod {}", m["name"].as_str().unwrap_or(""));
        for (kind, key) in [("input", "inputs"), ("output", "outputs")] {
            for (i, v) in m[key].as_array().into_iter().flatten().enumerate() {
                if v["tag"] == "Tensor" {
                    let sizes: Vec<usize> = v["sizes"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|x| x.as_u64().map(|x| x as usize))
                        .collect();
                    println!(
                        "  {kind} {i}: Tensor {} {} {}{}{}",
                        v["dtype"].as_str().unwrap_or(""),
                        shape_str(&sizes),
                        v["dynamism"].as_str().unwrap_or(""),
                        if v["memory_planned"] == true {
                            ", planned"
                        } else {
                            ""
                        },
                        if v["device"] != "cpu" {
                            format!(", on {}", v["device"].as_str().unwrap_or(""))
                        } else {
                            String::new()
                        }
                    );
                } else {
                    println!("  {kind} {i}: {}", v["tag"].as_str().unwrap_or(""));
                }
            }
        }
        println!("  operators ({} instructions):", m["num_instructions"]);
        if let Some(c) = m["operator_counts"].as_object() {
            for (op, n) in c {
                println!("    {n:>4} × {op}");
            }
        }
        for (i, d) in m["delegates"].as_array().into_iter().flatten().enumerate() {
            println!(
                "  delegate {i}: {} ({} bytes) specs {}",
                d["backend"].as_str().unwrap_or(""),
                d["blob_size"],
                d["compile_specs"]
            );
        }
        if let Some(td) = m["tensor_devices"].as_object() {
            let parts: Vec<String> = td.iter().map(|(d, n)| format!("{n} on {d}")).collect();
            println!("  tensors: {}", parts.join(", "));
        }
        for b in m["planned_buffers"].as_array().into_iter().flatten() {
            println!(
                "  planned buffer {}: {} bytes on {}",
                b["index"],
                b["size"],
                b["device"].as_str().unwrap_or("")
            );
        }
    }
    Ok(())
}

fn cmd_devices() -> Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("cpu: host, {cores} thread(s)");
    let status = etch::devices_status();
    #[cfg(feature = "cuda")]
    if let Some(cuda) = &status.cuda {
        for d in cuda.devices()? {
            println!(
                "cuda:{}: {}, {:.1} GiB total, {:.1} GiB free, compute capability {}.{}",
                d.index,
                d.name,
                d.total_bytes as f64 / (1u64 << 30) as f64,
                d.free_bytes as f64 / (1u64 << 30) as f64,
                d.compute_capability.0,
                d.compute_capability.1
            );
        }
        return Ok(());
    }
    println!(
        "cuda: none ({})",
        status
            .cuda_unavailable
            .as_deref()
            .unwrap_or("unknown reason")
    );
    Ok(())
}

fn parse_methods(v: Option<&str>) -> etch::compiler::MethodSelection {
    use etch::compiler::MethodSelection;
    match v {
        None => MethodSelection::All,
        Some(list) => MethodSelection::Some(
            list.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
        ),
    }
}

fn supported_ops(set: &str) -> Result<(String, etch::compiler::SupportedOps)> {
    use etch::compiler::SupportedOps;
    Ok(match set {
        "portable" | "simulated" => {
            let k = etch::default_kernels();
            (
                format!("portable ({} operators)", k.len()),
                SupportedOps::new(k.names()),
            )
        }
        "cuda" => {
            let ops = SupportedOps::with_op_dtypes(etch::cuda_op_support());
            (
                format!("cuda ({} operators, each with its dtypes)", ops.len()),
                ops,
            )
        }
        file => {
            let text = std::fs::read_to_string(file).map_err(|e| {
                Error::invalid_argument(format!(
                    "--ops {file}: not `cuda` or `portable`, and not a readable file: {e}"
                ))
            })?;
            let names: Vec<String> = text
                .lines()
                .map(|l| l.trim().to_string())
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .collect();
            (
                format!("{file} ({} operators)", names.len()),
                SupportedOps::new(names),
            )
        }
    })
}

fn device_bytes(m: &std::collections::BTreeMap<etch::Device, u64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(d, b)| format!("{d} {b}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn plan_json(p: &etch::compiler::MethodPlanStats) -> Json {
    let by = |m: &std::collections::BTreeMap<etch::Device, u64>| {
        Json::Object(m.iter().map(|(d, b)| (d.to_string(), json!(b))).collect())
    };
    json!({
        "method": p.method,
        "before": by(&p.before),
        "after": by(&p.after),
        "total_before": p.total_before(),
        "total_after": p.total_after(),
        "kept_original": p.kept_original,
        "lower_bound": p.lower_bound,
    })
}

fn cmd_lower(args: &[String]) -> Result<()> {
    use etch::compiler::{LowerOptions, MethodSelection, PlanOptions};
    let args: Vec<String> = args
        .iter()
        .map(|a| {
            if a == "-o" {
                "--output".to_string()
            } else {
                a.clone()
            }
        })
        .collect();
    let o = Opts::parse(
        &args,
        &["output", "device", "ops", "alignment"],
        &[
            "skip-h2d-inputs",
            "skip-d2h-outputs",
            "replan-only",
            "per-op",
            "json",
            "no-alloc-graph-input",
            "no-alloc-graph-output",
        ],
    )?;
    let input = o.model()?;
    let output = o
        .one("output")
        .ok_or_else(|| Error::invalid_argument("no output file given (-o OUT.pte)"))?;
    let alignment = match o.one("alignment") {
        None => etch::compiler::DEFAULT_ALIGNMENT,
        Some(a) => a
            .parse::<usize>()
            .ok()
            .filter(|a| a.is_power_of_two())
            .ok_or_else(|| {
                Error::invalid_argument(format!("--alignment {a}: expected a power of two"))
            })?,
    };
    let program = etch::Program::from_file(input)?;
    let mut parts = etch::ProgramParts::from_program(&program)?;
    let replan_only = o.has("replan-only");
    let mut report = json!({ "input": input, "output": output });
    let mut text = String::new();
    if replan_only {
        for flag in [
            "device",
            "ops",
            "skip-h2d-inputs",
            "skip-d2h-outputs",
            "per-op",
        ] {
            if o.has(flag) {
                return Err(Error::invalid_argument(format!(
                    "--{flag} does not apply with --replan-only"
                )));
            }
        }
        let stats = etch::compiler::replan(
            &mut parts,
            &PlanOptions {
                alignment,
                alloc_graph_input: o.has("no-alloc-graph-input").then_some(false),
                alloc_graph_output: o.has("no-alloc-graph-output").then_some(false),
            },
        )?;
        text.push_str(&format!("re-planned {input} -> {output}\n"));
        for s in &stats {
            let ratio = s.total_after() as f64 / s.total_before().max(1) as f64;
            text.push_str(&format!(
                "method {}: planned bytes {} -> {} ({:.3}x){}\n",
                s.method,
                s.total_before(),
                s.total_after(),
                ratio,
                if s.kept_original {
                    " (kept the original plan: ours was not smaller)"
                } else {
                    ""
                }
            ));
        }
        report["methods"] = Json::Array(stats.iter().map(plan_json).collect());
    } else {
        for flag in ["no-alloc-graph-input", "no-alloc-graph-output"] {
            if o.has(flag) {
                return Err(Error::invalid_argument(format!(
                    "--{flag} applies with --replan-only (when lowering, the skip flags imply it)"
                )));
            }
        }
        let device: etch::Device = o.one("device").unwrap_or("cuda:0").parse()?;
        let (ops_desc, supported) = supported_ops(o.one("ops").unwrap_or("cuda"))?;
        let skip = |flag: &str| {
            if o.has(flag) {
                parse_methods(o.one(flag))
            } else {
                MethodSelection::None
            }
        };
        let mut opts = LowerOptions::new(device, supported);
        opts.skip_h2d_inputs = skip("skip-h2d-inputs");
        opts.skip_d2h_outputs = skip("skip-d2h-outputs");
        opts.alignment = alignment;
        opts.per_op = o.has("per-op");
        let summary = etch::compiler::lower(&mut parts, &opts)?;
        text.push_str(&format!(
            "lowered {input} -> {output} for {device} (ops: {ops_desc})\n"
        ));
        let mut methods = Vec::new();
        for m in &summary.methods {
            text.push_str(&format!(
                "method {}: {} delegate(s) holding {} instruction(s); {} kernel call(s) stay on the host\n",
                m.method, m.delegates, m.delegated_instructions, m.host_instructions
            ));
            text.push_str(&format!(
                "  copies inserted: {} h2d, {} d2h; elided: {} upload(s) reused, {} d2h->h2d round trip(s), {} d2h not needed\n",
                m.h2d_copies, m.d2h_copies, m.uploads_reused, m.round_trips_elided, m.downloads_skipped
            ));
            if m.device_state + m.host_state > 0 {
                text.push_str(&format!(
                    "  state: {} buffer(s) on {device} (updated in place by the delegates), {} on the host\n",
                    m.device_state, m.host_state
                ));
            }
            if m.device_inputs + m.device_outputs > 0 {
                text.push_str(&format!(
                    "  on the device: {} input(s), {} output(s) (unplanned; bind device memory)\n",
                    m.device_inputs, m.device_outputs
                ));
            }
            text.push_str(&format!(
                "  planned bytes: before {}; after {} (+ {} in the delegates, on {device})\n",
                device_bytes(&m.plan.before),
                device_bytes(&m.plan.after),
                m.delegate_planned_bytes
            ));
            methods.push(json!({
                "method": m.method,
                "delegates": m.delegates,
                "delegated_instructions": m.delegated_instructions,
                "host_instructions": m.host_instructions,
                "matmuls_rewritten": m.matmuls_rewritten,
                "h2d_copies": m.h2d_copies,
                "d2h_copies": m.d2h_copies,
                "uploads_reused": m.uploads_reused,
                "round_trips_elided": m.round_trips_elided,
                "downloads_skipped": m.downloads_skipped,
                "device_inputs": m.device_inputs,
                "device_outputs": m.device_outputs,
                "plan": plan_json(&m.plan),
                "delegate_planned_bytes": m.delegate_planned_bytes,
                "device_state": m.device_state,
                "host_state": m.host_state,
            }));
        }
        report["device"] = json!(device.to_string());
        report["ops"] = json!(ops_desc);
        report["methods"] = Json::Array(methods);
    }
    let bytes = parts.to_bytes(etch::WriteOptions::default())?;
    // What we write must load.
    let check = etch::Program::from_bytes(&bytes)
        .map_err(|e| Error::internal(format!("the lowered program does not load: {e}")))?;
    for name in check.method_names() {
        etch::MethodMeta::new(&check, name)
            .map_err(|e| Error::internal(format!("lowered method '{name}' is invalid: {e}")))?;
    }
    std::fs::write(output, &bytes)
        .map_err(|e| Error::access_failed(format!("cannot write {output}: {e}")))?;
    if o.has("json") {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        print!("{text}");
    }
    Ok(())
}

fn cmd_ops() -> Result<()> {
    let k = etch::default_kernels();
    for n in k.names() {
        println!("{n}");
    }
    eprintln!("{} operators", k.len());
    Ok(())
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
            if !t.sizes().is_empty() {
                return Err(err(&format!(
                    "a 0-d array for the {} input",
                    info.tag.name()
                )));
            }
            let v = t.to_f64_vec()?[0];
            Ok(match info.tag {
                Tag::Int if t.dtype().is_integral() => Value::Int(v as i64),
                Tag::Double => Value::Double(v),
                Tag::Bool if matches!(t.dtype(), ScalarType::Bool) => Value::Bool(v != 0.0),
                _ => {
                    return Err(err(&format!(
                        "a 0-d array for the {} input",
                        info.tag.name()
                    )));
                }
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
        other => format!("output {i}: {other:?}"),
    }
}

fn value_to_npy(v: &Value) -> Result<Tensor> {
    match v {
        Value::Tensor(t) => Ok(t.clone()),
        Value::Int(x) => Tensor::scalar(*x),
        Value::Double(x) => Tensor::scalar(*x),
        Value::Bool(b) => Tensor::from_bytes(ScalarType::Bool, &[], &[*b as u8]),
        other => Err(Error::not_supported(format!(
            "cannot write a {} output as .npy",
            other.tag().name()
        ))),
    }
}

/// A field of /proc/self/status in bytes (Linux), e.g. `VmHWM` (peak RSS) or `VmRSS`.
fn proc_status_bytes(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn cmd_bench(args: &[String]) -> Result<()> {
    let o = Opts::parse(
        args,
        &RUN_FLAGS,
        &["json", "no-cuda-graphs", "profile", "convert-dtype"],
    )?;
    if o.has("profile") {
        // Profiled kernel calls must run: no graph replay.
        etch::set_cuda_graphs(false);
    }
    let n = iterations(&o, 20)?;
    let baseline = proc_status_bytes("VmRSS");
    let Prepared {
        mut module,
        method,
        inputs,
        load,
        ..
    } = prepare(&o)?;
    let file_bytes = module.program().bytes().len() as u64;
    let m = module.method(&method)?;
    let planned: u64 = m.planned_bytes().iter().map(|&b| b as u64).sum();
    let mut times = Vec::with_capacity(n + 1);
    for _ in 0..=n {
        m.set_inputs(&inputs)?;
        let t = Instant::now();
        m.execute()?;
        // Outputs left on a device are timed until they are ready.
        m.synchronize()?;
        times.push(t.elapsed());
    }
    if o.has("profile") {
        print_profile(&mut *m, n)?;
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
    if o.has("json") {
        let j = json!({
            "model": o.model()?,
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
    println!("{} ({method}), {n} iterations after the first", o.model()?);
    println!("load       {}", ms(load));
    println!("first run  {}", ms(first));
    println!(
        "execute    median {}  min {}  max {}",
        ms(median),
        ms(min),
        ms(max)
    );
    let mib = |b: u64| format!("{:.2} MiB", b as f64 / (1 << 20) as f64);
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

/// Runs the method `n` more times with every kernel call timed and prints the operators,
/// slowest first (device work is waited for after each call).
fn print_profile(m: &mut etch::Method, n: usize) -> Result<()> {
    use etch::profile;
    profile::take();
    profile::set_enabled(true);
    for _ in 0..n {
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

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// A loaded module, its chosen method and its inputs: what `run` and `bench` share.
struct Prepared {
    module: Module,
    method: String,
    inputs: Vec<Value>,
    load: Duration,
    simulated: Option<std::sync::Arc<etch::SimulatedAllocator>>,
}

const RUN_FLAGS: [&str; 6] = [
    "method",
    "input",
    "data",
    "weights",
    "simulate-device",
    "iterations",
];

/// Opens the model with run's device and data options (`--simulate-device`, `--data`,
/// `--weights`, `--convert-dtype`, `--no-cuda-graphs`).
fn open_module(o: &Opts) -> Result<(Module, Option<std::sync::Arc<etch::SimulatedAllocator>>)> {
    let path = o.model()?;
    if o.has("no-cuda-graphs") {
        etch::set_cuda_graphs(false);
    }
    let mut module = Module::from_file(path)?;
    let mut simulated = None;
    if let Some(dev) = o.one("simulate-device") {
        let kind = dev.parse::<etch::Device>()?.kind;
        if kind != etch::DeviceType::Cuda {
            return Err(Error::invalid_argument(format!(
                "--simulate-device takes 'cuda', got '{dev}'"
            )));
        }
        let registry = etch::DeviceRegistry::new();
        let sim = std::sync::Arc::new(etch::SimulatedAllocator::new(8));
        registry.register(sim.clone())?;
        module = module.with_devices(std::sync::Arc::new(registry));
        simulated = Some(sim);
    }
    for d in o.all("data") {
        module = module.with_data_file(d)?;
    }
    let convert_dtype = o.has("convert-dtype");
    for w in o.all("weights") {
        module = module.with_weights_opts(w, etch::WeightOptions { convert_dtype })?;
    }
    Ok((module, simulated))
}

fn prepare(o: &Opts) -> Result<Prepared> {
    let t0 = Instant::now();
    let (mut module, simulated) = open_module(o)?;
    let method = match o.one("method") {
        Some(m) => m.to_string(),
        None => {
            let names = module.method_names();
            if names.iter().any(|n| n == "forward") || names.len() != 1 {
                "forward".to_string()
            } else {
                names[0].clone()
            }
        }
    };
    let meta = module.method_meta(&method)?;
    module.load_method(&method)?;
    let load = t0.elapsed();

    let files = o.all("input");
    let inputs: Vec<Value> = if files.is_empty() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        meta.inputs()
            .iter()
            .map(|i| random_input(i, &mut rng))
            .collect::<Result<_>>()?
    } else {
        if files.len() != meta.num_inputs() {
            return Err(Error::invalid_argument(format!(
                "method '{method}' takes {} inputs; {} --input files given",
                meta.num_inputs(),
                files.len()
            )));
        }
        files
            .iter()
            .enumerate()
            .map(|(i, f)| adapt_input(i, npy::read(f)?, &meta.inputs()[i]))
            .collect::<Result<_>>()?
    };
    Ok(Prepared {
        module,
        method,
        inputs,
        load,
        simulated,
    })
}

fn iterations(o: &Opts, default: usize) -> Result<usize> {
    match o.one("iterations") {
        Some(s) => s.parse().ok().filter(|&n| n >= 1).ok_or_else(|| {
            Error::invalid_argument(format!(
                "--iterations must be a positive integer, got '{s}'"
            ))
        }),
        None => Ok(default),
    }
}

fn cmd_run(args: &[String]) -> Result<()> {
    let mut flags = RUN_FLAGS.to_vec();
    flags.push("output-dir");
    let o = Opts::parse(args, &flags, &["no-cuda-graphs", "convert-dtype"])?;
    let iterations = iterations(&o, 1)?;
    let Prepared {
        mut module,
        method,
        inputs,
        load,
        simulated,
    } = prepare(&o)?;
    let m = module.method(&method)?;
    let mut times = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        m.set_inputs(&inputs)?;
        let t = Instant::now();
        m.execute()?;
        // Outputs left on a device are timed until they are ready.
        m.synchronize()?;
        times.push(t.elapsed());
    }
    // Device outputs come back to the host for printing and writing.
    let outputs: Vec<Value> = m
        .output_values()?
        .into_iter()
        .map(|v| match v {
            Value::Tensor(t) if !t.is_cpu() => t.to_cpu().map(Value::Tensor),
            other => Ok(other),
        })
        .collect::<Result<_>>()?;
    for (i, v) in outputs.iter().enumerate() {
        println!("{}", summarize(i, v));
    }
    if let Some(dir) = o.one("output-dir") {
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::access_failed(format!("cannot create '{}': {e}", dir.display())))?;
        for (i, v) in outputs.iter().enumerate() {
            npy::write(
                Path::new(&dir).join(format!("output_{i}.npy")),
                &value_to_npy(v)?,
            )?;
        }
    }
    let first = times[0];
    let mut sorted = times.clone();
    sorted.sort();
    let median = sorted[sorted.len() / 2];
    println!(
        "load {} | first run {} | median {} over {iterations} run(s)",
        ms(load),
        ms(first),
        ms(median)
    );
    if let Some(sim) = simulated {
        let s = sim.stats();
        println!(
            "simulated cuda: {} allocations ({} live), {} H2D copies ({} bytes), {} D2H copies ({} bytes)",
            s.allocations, s.live_allocations, s.h2d_copies, s.h2d_bytes, s.d2h_copies, s.d2h_bytes
        );
    }
    Ok(())
}
