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

mod module;
pub mod npy;

pub use module::Module;

pub use etch_core::{
    Device, DeviceAllocator, DeviceMemoryBuffer, DeviceRegistry, DeviceType, Dynamism, EValue,
    Error, ErrorCode, KernelContext, KernelFn, KernelRegistry, Result, ScalarType, Tag, Tensor,
    TensorImpl, TensorRef, Value, bf16, f16,
};
pub use etch_format::{NamedDataMap, Program, PtdFile};
pub use etch_runtime::{
    Backend, BackendInitContext, BackendRegistry, CompileSpec, Delegate, DelegateInfo, IoInfo,
    LoadConfig, Method, MethodMeta, TensorInfo,
};

pub use etch_backends::{ExecutorBackend, default_backends};
pub use etch_devices::{SimStats, SimulatedAllocator};

/// A registry with every portable CPU kernel.
pub fn default_kernels() -> KernelRegistry {
    etch_kernels::portable_registry()
}
