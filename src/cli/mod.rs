//! The subcommands of the `etch` binary and what they share: the model options of `run`,
//! `bench` and `generate`, value parsers, and memory figures.

pub mod bench;
pub mod devices;
pub mod generate;
pub mod inspect;
pub mod lower;
pub mod progress;
pub mod run;
pub mod test;

use etch::{Device, DeviceType, Error, Module, Result, SimulatedAllocator};
use progress::Progress;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The program and where its data and devices come from (`run`, `bench`, `generate`).
#[derive(clap::Args, Debug, Clone)]
pub struct ModelOpts {
    /// The program (.pte)
    #[arg(value_name = "MODEL.pte")]
    pub model: PathBuf,
    /// External constants, for programs exported with external_constants (repeatable)
    #[arg(long, value_name = "FILE.ptd")]
    pub data: Vec<PathBuf>,
    /// External constants from a safetensors checkpoint: a .safetensors file or a folder of
    /// shards (a Hugging Face checkpoint), found by their state_dict names (repeatable)
    #[arg(long, value_name = "PATH")]
    pub weights: Vec<PathBuf>,
    /// Convert float32/bfloat16/float16 checkpoint tensors to the dtypes the program
    /// declares (by default a dtype mismatch is an error)
    #[arg(long)]
    pub convert_dtype: bool,
    #[command(flatten)]
    pub device: DeviceOpts,
}

/// Where device programs run (`run`, `bench`, `generate`, `test`).
#[derive(clap::Args, Debug, Clone)]
pub struct DeviceOpts {
    /// Run device programs on a simulated CUDA device: host memory behind a tracking
    /// allocator; inputs the method expects on the device are staged through it and device
    /// outputs copied back
    #[arg(long, value_name = "cuda", value_parser = parse_simulated_device)]
    pub simulate_device: Option<Device>,
    /// Run CUDA delegates op by op. By default a delegate called again with the same inputs
    /// is recorded as a CUDA graph and replayed; ETCH_CUDA_GRAPHS=0 does the same as this flag
    #[arg(long)]
    pub no_cuda_graphs: bool,
}

impl DeviceOpts {
    /// Applies the options to a module: CUDA graphs off, the simulated device registry.
    pub fn apply(&self, module: Module) -> Result<Opened> {
        if self.no_cuda_graphs {
            etch::set_cuda_graphs(false);
        }
        if self.simulate_device.is_none() {
            return Ok(Opened {
                module,
                simulated: None,
            });
        }
        let registry = etch::DeviceRegistry::new();
        let sim = Arc::new(SimulatedAllocator::new(8));
        registry.register(sim.clone())?;
        Ok(Opened {
            module: module.with_devices(Arc::new(registry)),
            simulated: Some(sim),
        })
    }
}

/// The simulated device's counters, as `run` and `test` print them.
pub fn simulated_stats_line(sim: &SimulatedAllocator) -> String {
    let s = sim.stats();
    format!(
        "simulated cuda: {} allocations ({} live), {} H2D copies ({} bytes), {} D2H copies ({} bytes)",
        s.allocations, s.live_allocations, s.h2d_copies, s.h2d_bytes, s.d2h_copies, s.d2h_bytes
    )
}

/// `--simulate-device`: a CUDA device name (`cuda`, `cuda:0`).
fn parse_simulated_device(s: &str) -> std::result::Result<Device, String> {
    match s.parse::<Device>() {
        Ok(d) if d.kind == DeviceType::Cuda => Ok(d),
        _ => Err(format!("--simulate-device takes 'cuda', got '{s}'")),
    }
}

/// A whole number >= 1 (`--iterations`).
pub fn positive(s: &str) -> std::result::Result<usize, String> {
    s.parse::<usize>()
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(|| format!("expected a positive integer, got '{s}'"))
}

/// A loaded module and the simulated allocator behind it, if any.
pub struct Opened {
    pub module: Module,
    pub simulated: Option<Arc<SimulatedAllocator>>,
}

impl ModelOpts {
    /// Opens the model with its device and data options.
    pub fn open(&self, progress: &Progress) -> Result<Opened> {
        progress.step(format!("opening {}", self.model.display()));
        let Opened {
            mut module,
            simulated,
        } = self.device.apply(Module::from_file(&self.model)?)?;
        for d in &self.data {
            progress.step(format!("mapping {}", d.display()));
            module = module.with_data_file(d)?;
        }
        for w in &self.weights {
            progress.step(format!("mapping {}", w.display()));
            let opts = etch::WeightOptions {
                convert_dtype: self.convert_dtype,
            };
            module = module.with_weights_opts(w, opts)?;
        }
        progress.inc();
        Ok(Opened { module, simulated })
    }

    /// The model path as text (for reports).
    pub fn model_str(&self) -> String {
        self.model.display().to_string()
    }
}

/// A field of /proc/self/status in bytes (Linux), e.g. `VmHWM` (peak RSS) or `VmRSS`.
pub fn proc_status_bytes(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The host ↔ device traffic counters of the allocator the module runs on: the simulated
/// one, or the CUDA allocator when the program uses a device (None for CPU programs).
pub fn device_transfers(
    simulated: Option<&SimulatedAllocator>,
    module: &Module,
) -> Option<etch::TransferStats> {
    use etch::DeviceAllocator;
    if let Some(sim) = simulated {
        return Some(sim.transfer_stats());
    }
    if !uses_device(module) {
        return None;
    }
    #[cfg(feature = "cuda")]
    if let Some(cuda) = &etch::devices_status().cuda {
        return Some(cuda.transfer_stats());
    }
    None
}

/// True when a loaded method of `module` has tensors on a device.
fn uses_device(module: &Module) -> bool {
    module.method_names().iter().any(|n| {
        module.is_method_loaded(n)
            && module
                .method_meta(n)
                .is_ok_and(|m| m.tensor_devices().iter().any(|(d, _)| !d.is_cpu()))
    })
}

/// The peak device bytes of the allocator the module ran on: the simulated one, or the
/// CUDA allocator when the program used a device (None for CPU programs).
pub fn peak_device_bytes(
    simulated: Option<&SimulatedAllocator>,
    module: &Module,
) -> Option<(String, u64)> {
    if let Some(sim) = simulated {
        return Some(("simulated cuda".into(), sim.stats().peak_bytes));
    }
    if !uses_device(module) {
        return None;
    }
    #[cfg(feature = "cuda")]
    if let Some(cuda) = &etch::devices_status().cuda {
        return Some(("cuda".into(), cuda.stats().peak_bytes));
    }
    None
}

/// Bytes of the external constants (weights) that loading `methods` copies to devices:
/// each (name, device, dtype, shape) once, as the module shares them between methods and
/// their delegates. Constants stored in the program itself are not counted.
pub fn device_constant_bytes(module: &Module, methods: &[String]) -> u64 {
    let mut seen = std::collections::HashSet::new();
    let mut total = 0u64;
    for m in methods {
        let Ok(meta) = module.method_meta(m) else {
            continue;
        };
        for c in meta.external_constants() {
            if !c.device.is_cpu()
                && seen.insert((c.name.clone(), c.device, c.dtype, c.sizes.clone()))
            {
                total += c.nbytes as u64;
            }
        }
    }
    total
}

/// `[a, b, c]`.
pub fn shape_str(s: &[usize]) -> String {
    format!(
        "[{}]",
        s.iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Milliseconds with three decimals.
pub fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// Bytes as MiB with two decimals.
pub fn mib(b: u64) -> String {
    format!("{:.2} MiB", b as f64 / (1 << 20) as f64)
}

/// Bytes in decimal units: `512 B`, `12.3 MB`, `69.30 GB`.
pub fn decimal_bytes(b: u64) -> String {
    let x = b as f64;
    if x >= 1e9 {
        format!("{:.2} GB", x / 1e9)
    } else if x >= 1e6 {
        format!("{:.1} MB", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1} kB", x / 1e3)
    } else {
        format!("{b} B")
    }
}

/// JSON text, or an internal error.
pub fn to_json_pretty(v: &serde_json::Value) -> Result<String> {
    serde_json::to_string_pretty(v).map_err(|e| Error::internal(e.to_string()))
}
