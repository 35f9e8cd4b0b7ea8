//! Backends: delegates that run part of a method (ExecuTorch's `BackendInterface`).

use etch_core::{Error, KernelContext, Result};
use etch_format::NamedDataMap;
use std::collections::HashMap;
use std::sync::Arc;

/// One compile spec of a delegate (`key` → raw bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileSpec {
    /// The key, e.g. `"target_device"`.
    pub key: String,
    /// The raw value.
    pub value: Vec<u8>,
}

/// What a backend gets at init besides its blob.
pub struct BackendInitContext<'a> {
    /// The method being loaded.
    pub method_name: &'a str,
    /// Named data (the program's, then external `.ptd` maps).
    pub named_data: Option<&'a dyn NamedDataMap>,
    /// The loader's configuration: kernels, backends and device allocators, for backends
    /// that load programs of their own.
    pub config: &'a crate::LoadConfig,
}

/// A backend, registered by id (e.g. `"ExecutorBackend"`).
pub trait Backend: Send + Sync {
    /// Whether the backend can run here (e.g. its device exists).
    fn is_available(&self) -> bool;
    /// Prepares a delegate from its processed blob and compile specs.
    fn init(
        &self,
        ctx: &BackendInitContext<'_>,
        processed: &[u8],
        compile_specs: &[CompileSpec],
    ) -> Result<Box<dyn Delegate>>;
}

/// An initialised delegate. Dropping it releases its resources (upstream's `destroy`).
pub trait Delegate: Send {
    /// Runs the delegate. Its arguments (inputs, then outputs) are the `DelegateCall`'s
    /// value indices, read and written through the context like a kernel's.
    fn execute(&mut self, args: &mut KernelContext<'_>) -> Result<()>;

    /// Bounds the jumps of the programs the delegate runs itself (a nested method), as
    /// [`crate::Method::set_instruction_limit`] does for its own; delegates that run no
    /// program ignore it.
    fn set_instruction_limit(&mut self, _jumps: Option<u64>) {}
}

/// Backends by id.
#[derive(Clone, Default)]
pub struct BackendRegistry {
    backends: HashMap<String, Arc<dyn Backend>>,
}

impl BackendRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }
    /// Registers a backend; a second registration of the same id is an error.
    pub fn register(&mut self, id: &str, backend: Arc<dyn Backend>) -> Result<()> {
        if self.backends.contains_key(id) {
            return Err(Error::invalid_argument(format!(
                "backend '{id}' is already registered"
            )));
        }
        self.backends.insert(id.to_string(), backend);
        Ok(())
    }
    /// Looks a backend up.
    pub fn get(&self, id: &str) -> Option<&Arc<dyn Backend>> {
        self.backends.get(id)
    }
    /// Registered ids, sorted.
    pub fn ids(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.backends.keys().map(|s| s.as_str()).collect();
        v.sort_unstable();
        v
    }
}
