//! # etch
//!
//! A pure-Rust runtime for ExecuTorch programs (`.pte`). Export a PyTorch model with the
//! stock ExecuTorch exporter, then run it from Rust:
//!
//! ```no_run
//! use etch::{Module, Tensor, Value};
//! # fn main() -> etch::Result<()> {
//! let mut module = Module::from_file("examples/models/mlp.pte")?;
//! let meta = module.method_meta("forward")?;
//! println!("{} inputs, {} outputs", meta.num_inputs(), meta.num_outputs());
//! let x = Tensor::from_slice(&vec![0.1f32; 4 * 16], &[4, 16])?;
//! let out = module.forward(&[Value::Tensor(x)])?;
//! println!("{:?}", out[0].as_tensor()?.to_vec::<f32>()?);
//! # Ok(()) }
//! ```
//!
//! The crates underneath, re-exported here: `etch-core` (types, errors, kernel ABI),
//! `etch-format` (reading `.pte`/`.ptd`), `etch-runtime` (Program → MethodMeta → Method),
//! `etch-kernels` (portable CPU kernels).
#![warn(missing_docs)]

use std::sync::{Arc, OnceLock};

pub mod bundled;
mod module;
pub mod npy;

pub use module::Module;

pub use etch_core::{
    ByteSource, Device, DeviceAllocator, DeviceMemoryBuffer, DeviceOpTimer, DeviceRegistry,
    DeviceType, Dynamism, EValue, Error, ErrorCode, KernelContext, KernelFn, KernelRegistry,
    PrepareFn, Prepared, Result, ScalarType, Tag, Tensor, TensorImpl, TensorRef, TransferStats,
    Value, bf16, f16,
};
/// ETDump files (`.etdp`, what ExecuTorch's Inspector reads): the generated schema, writer
/// and reader.
pub use etch_format::etdump;
pub use etch_format::{
    NamedBlob, NamedDataMap, Program, ProgramParts, PtdFile, Safetensors, TensorLayout,
    TensorSource, WeightOptions, WriteOptions,
};
/// The per-operator and per-delegate profiler (`etch bench --profile`); its runs write as
/// ETDump files ([`profile::Profile::to_etdump`]).
pub use etch_runtime::profile;
pub use etch_runtime::{
    Backend, BackendInitContext, BackendRegistry, CompileSpec, Delegate, DelegateInfo,
    DeviceConstants, IoInfo, LoadConfig, Method, MethodMeta, NamedTensor, TensorInfo,
};

/// The XNNPACK delegate's payload and graph readers (`etch inspect` uses them).
pub use etch_backends::xnnpack;
pub use etch_backends::{ExecutorBackend, XnnpackBackend};
/// How device delegates' calls ran (recorded as a CUDA graph, replayed, or op by op),
/// counted over the process.
pub use etch_backends::{GraphCounts, graph_counts};
/// `etch lower`: partitioning, device propagation and memory planning on `.pte` files.
pub use etch_compiler as compiler;

/// The number of threads the CPU kernels use, and its process-wide setter (`1`:
/// single-threaded; `0`: back to `ETCH_NUM_THREADS` or the number of CPUs). Kernels split
/// only large work, along independent outputs, so results do not depend on it.
pub use etch_kernels::threads::{num_threads, set_num_threads};

/// Token sampling shared by `etch generate` and on-device sampling kernels, and the host's
/// seeded generator ([`etch_kernels::sample`]).
pub use etch_kernels::sample::{SplitMix64, sample_row};

static CUDA_GRAPHS: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(2);

/// Whether modules created from now on record CUDA delegates as CUDA graphs and replay
/// them: [`set_cuda_graphs`], else `ETCH_CUDA_GRAPHS` (`0` turns them off), else on.
pub fn cuda_graphs() -> bool {
    match CUDA_GRAPHS.load(std::sync::atomic::Ordering::Relaxed) {
        0 => false,
        1 => true,
        _ => std::env::var("ETCH_CUDA_GRAPHS").map_or(true, |v| v != "0"),
    }
}

/// Turns CUDA graphs on or off for modules created from now on (process-wide).
pub fn set_cuda_graphs(on: bool) {
    CUDA_GRAPHS.store(on as u8, std::sync::atomic::Ordering::Relaxed);
}

/// The backends etch provides: `ExecutorBackend`, with the CUDA kernels for delegates on
/// `cuda:N` when built with the `cuda` feature (the simulated device uses the portable CPU
/// kernels), and `XnnpackBackend` (XNNPACK delegates run with etch's CPU kernels).
pub fn default_backends() -> BackendRegistry {
    let backend = ExecutorBackend::new().with_graphs(cuda_graphs());
    #[cfg(feature = "cuda")]
    let backend = backend
        .with_device_kernels(
            DeviceType::Cuda,
            Arc::new(etch_kernels_cuda::cuda_registry()),
        )
        .with_device_hooks(DeviceType::Cuda, Arc::new(etch_kernels_cuda::CudaHooks));
    let mut r = BackendRegistry::new();
    // A fresh registry has no entries, so registration cannot collide.
    let _ = r.register(etch_backends::EXECUTOR_BACKEND_ID, Arc::new(backend));
    let _ = r.register(
        etch_backends::XNNPACK_BACKEND_ID,
        Arc::new(etch_backends::XnnpackBackend::new()),
    );
    r
}
/// The staged host → device copy pipeline (chunking, threads) that CUDA and, when asked
/// ([`SimulatedAllocator::set_staging`]), the simulated device run.
pub use etch_devices::staging::StagingPlan;
pub use etch_devices::{SimStaging, SimStats, SimulatedAllocator};

/// Why the default registry has no CUDA allocator (or `None` when it has one).
#[derive(Debug, Clone)]
pub struct DeviceStatus {
    /// The CUDA allocator, when a driver and devices were found.
    #[cfg(feature = "cuda")]
    pub cuda: Option<Arc<etch_devices::cuda::CudaAllocator>>,
    /// Why there is no CUDA device.
    pub cuda_unavailable: Option<String>,
}

fn device_status() -> &'static DeviceStatus {
    static STATUS: OnceLock<DeviceStatus> = OnceLock::new();
    STATUS.get_or_init(|| {
        #[cfg(feature = "cuda")]
        {
            match etch_devices::cuda::CudaAllocator::new() {
                Ok(a) => {
                    let a = Arc::new(a);
                    match DeviceRegistry::global().register(a.clone()) {
                        Ok(()) => DeviceStatus {
                            cuda: Some(a),
                            cuda_unavailable: None,
                        },
                        // Someone registered another CUDA allocator first (e.g. a simulated
                        // one): keep theirs.
                        Err(e) => DeviceStatus {
                            cuda: None,
                            cuda_unavailable: Some(e.message().to_string()),
                        },
                    }
                }
                Err(e) => DeviceStatus {
                    cuda: None,
                    cuda_unavailable: Some(e.message().to_string()),
                },
            }
        }
        #[cfg(not(feature = "cuda"))]
        {
            DeviceStatus {
                cuda_unavailable: Some("etch was built without the `cuda` feature".into()),
            }
        }
    })
}

/// The process-wide device registry with the real devices registered: the CUDA allocator
/// when a CUDA driver and GPU are present (registered on first call; no explicit init is
/// needed). [`Module`] uses it unless given another registry.
pub fn default_devices() -> Arc<DeviceRegistry> {
    let _ = device_status();
    DeviceRegistry::global()
}

/// Whether CUDA is available, and the allocator if so.
pub fn devices_status() -> &'static DeviceStatus {
    device_status()
}

/// A registry with every portable CPU kernel.
pub fn default_kernels() -> KernelRegistry {
    etch_kernels::portable_registry()
}

/// The operators etch's CUDA kernels implement with the dtypes each takes (empty without
/// the `cuda` feature): what `etch lower --ops cuda` delegates.
pub fn cuda_op_support() -> Vec<(String, Vec<ScalarType>)> {
    #[cfg(feature = "cuda")]
    {
        etch_kernels_cuda::op_support()
            .into_iter()
            .map(|(n, d)| (n.to_string(), d.to_vec()))
            .collect()
    }
    #[cfg(not(feature = "cuda"))]
    {
        Vec::new()
    }
}

/// The operators etch's CUDA kernels implement (empty without the `cuda` feature): what
/// `etch lower --ops cuda` delegates.
pub fn cuda_kernel_names() -> Vec<String> {
    #[cfg(feature = "cuda")]
    {
        etch_kernels_cuda::cuda_registry()
            .names()
            .into_iter()
            .map(String::from)
            .collect()
    }
    #[cfg(not(feature = "cuda"))]
    {
        Vec::new()
    }
}
