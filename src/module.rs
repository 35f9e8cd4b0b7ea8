//! The `Module` facade: open a program, load methods, execute them.

use crate::{
    BackendRegistry, DeviceRegistry, Error, KernelRegistry, LoadConfig, Method, MethodMeta,
    NamedDataMap, Program, PtdFile, Result, Value, WeightOptions,
};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// Several external data sources (`.ptd` files, safetensors checkpoints) searched in order.
struct DataFiles(Vec<Arc<dyn NamedDataMap>>);

impl DataFiles {
    /// The first source for which `get` finds the tensor; a source's `NotFound` (which
    /// names what it tried) is reported only when no source has it.
    fn first<'a, T>(
        &'a self,
        get: impl Fn(&'a dyn NamedDataMap) -> Result<Option<T>>,
    ) -> Result<Option<T>> {
        let mut missing = None;
        for f in &self.0 {
            match get(f.as_ref()) {
                Ok(Some(b)) => return Ok(Some(b)),
                Ok(None) => {}
                Err(e) if e.code() == crate::ErrorCode::NotFound => {
                    missing.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        missing.map_or(Ok(None), Err)
    }
}

impl NamedDataMap for DataFiles {
    fn get(&self, key: &str) -> Option<etch_format::NamedBlob<'_>> {
        self.0.iter().find_map(|f| f.get(key))
    }
    fn keys(&self) -> Vec<&str> {
        self.0.iter().flat_map(|f| f.keys()).collect()
    }
    fn get_tensor(
        &self,
        key: &str,
        expected: &etch_format::TensorLayout,
    ) -> Result<Option<etch_format::NamedBlob<'_>>> {
        self.first(|f| f.get_tensor(key, expected))
    }
    fn get_tensor_source(
        &self,
        key: &str,
        expected: &etch_format::TensorLayout,
    ) -> Result<Option<etch_format::TensorSource<'_>>> {
        self.first(|f| f.get_tensor_source(key, expected))
    }
}

/// An ExecuTorch program and its loaded methods.
///
/// ```no_run
/// use etch::{Module, Tensor, Value};
/// # fn main() -> etch::Result<()> {
/// let mut module = Module::from_file("examples/models/mlp.pte")?;
/// let x = Tensor::from_slice(&[0.5f32; 64], &[4, 16])?;
/// let outputs = module.forward(&[Value::Tensor(x)])?;
/// let probs = outputs[0].as_tensor()?.to_vec::<f32>()?;
/// # let _ = probs; Ok(()) }
/// ```
///
/// Methods load on first use (or explicitly with [`Module::load_method`]) and stay loaded:
/// their planned memory and mutable state (e.g. registered buffers updated in place)
/// persist across executions until the module is dropped.
///
/// Each method owns its planned buffers, except mutable state that the program declares
/// shared (exported with `MemoryPlanningPass(share_mutable_buffers=True)`): the methods of
/// one module read and write that state in one buffer, so `forward` updating it is seen by
/// `get_state` ([`etch_runtime::shared_state`] has the rule and its safety check).
pub struct Module {
    program: Program,
    kernels: Arc<KernelRegistry>,
    backends: Arc<BackendRegistry>,
    /// The registry given by `with_devices`; `None` means the default devices.
    devices: Option<Arc<DeviceRegistry>>,
    max_planned_bytes: Option<u64>,
    share_arenas: bool,
    shared_arenas: Option<Arc<etch_runtime::SharedArenas>>,
    device_constants: Arc<etch_runtime::DeviceConstants>,
    data_files: Vec<Arc<dyn NamedDataMap>>,
    named_data: Option<Arc<dyn NamedDataMap>>,
    methods: HashMap<String, Method>,
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module")
            .field("program", &self.program)
            .field("loaded", &self.methods.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Module {
    /// Maps a `.pte` file (zero-copy) and verifies it.
    ///
    /// The file must not be modified or truncated while the module is alive.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Module> {
        let path = path.as_ref();
        let program = Program::from_file(path).map_err(|e| e.context(path.display()))?;
        Ok(Self::from_program(program))
    }

    /// Copies program bytes into aligned memory and verifies them.
    pub fn from_bytes(bytes: &[u8]) -> Result<Module> {
        Ok(Self::from_program(Program::from_bytes(bytes)?))
    }

    /// Wraps an already loaded program, with the portable CPU kernels, the built-in
    /// backends (`ExecutorBackend`) and the default devices ([`crate::default_devices`]).
    pub fn from_program(program: Program) -> Module {
        Module {
            program,
            kernels: Arc::new(crate::default_kernels()),
            backends: Arc::new(crate::default_backends()),
            devices: None,
            max_planned_bytes: None,
            share_arenas: false,
            shared_arenas: None,
            device_constants: Default::default(),
            data_files: Vec::new(),
            named_data: None,
            methods: HashMap::new(),
        }
    }

    /// Adds an external data file (`.ptd`) that holds constants the program refers to by
    /// name. Call before loading methods.
    pub fn with_data_file(mut self, path: impl AsRef<Path>) -> Result<Module> {
        let path = path.as_ref();
        self.data_files.push(Arc::new(
            PtdFile::from_file(path).map_err(|e| e.context(path.display()))?,
        ));
        self.refresh_named_data();
        Ok(self)
    }

    /// Adds the tensors of a safetensors checkpoint (a `.safetensors` file, or a folder of
    /// shards such as a Hugging Face checkpoint) as external data: a program exported with
    /// external constants finds each weight by its fully qualified name, the `state_dict`
    /// key. The files are memory-mapped; dtype and shape are checked against the program.
    /// Hugging Face checkpoints are read as they are: multimodal `model.language_model.`
    /// prefixes, per-expert weights stacked on first use, tied embeddings, sharded folders
    /// with or without `model.safetensors.index.json` (see [`crate::Safetensors`]).
    /// A dtype mismatch is an error; [`Module::with_weights_opts`] can convert instead.
    pub fn with_weights(self, path: impl AsRef<Path>) -> Result<Module> {
        self.with_weights_opts(path, WeightOptions::default())
    }

    /// [`Module::with_weights`] with options, e.g. converting float32/bfloat16/float16
    /// weights to the dtypes the program declares:
    /// `module.with_weights_opts(dir, WeightOptions { convert_dtype: true })`.
    pub fn with_weights_opts(
        mut self,
        path: impl AsRef<Path>,
        options: WeightOptions,
    ) -> Result<Module> {
        let path = path.as_ref();
        self.data_files.push(Arc::new(
            etch_format::Safetensors::open_with(path, options)
                .map_err(|e| e.context(path.display()))?,
        ));
        self.refresh_named_data();
        Ok(self)
    }

    /// Adds external data from bytes of a `.ptd` file.
    pub fn with_data_bytes(mut self, bytes: &[u8]) -> Result<Module> {
        self.data_files.push(Arc::new(PtdFile::from_bytes(bytes)?));
        self.refresh_named_data();
        Ok(self)
    }

    fn refresh_named_data(&mut self) {
        self.methods.clear();
        self.device_constants = Default::default();
        self.named_data = Some(Arc::new(DataFiles(self.data_files.clone())));
    }

    /// Replaces the kernel registry (e.g. to add custom operators).
    pub fn with_kernels(mut self, kernels: Arc<KernelRegistry>) -> Module {
        self.kernels = kernels;
        self.methods.clear();
        self.device_constants = Default::default();
        self
    }

    /// Replaces the backend registry.
    pub fn with_backends(mut self, backends: Arc<BackendRegistry>) -> Module {
        self.backends = backends;
        self.methods.clear();
        self.device_constants = Default::default();
        self
    }

    /// Replaces the device allocator registry (default: [`crate::default_devices`]).
    pub fn with_devices(mut self, devices: Arc<DeviceRegistry>) -> Module {
        self.devices = Some(devices);
        self.shared_arenas = None;
        self.methods.clear();
        self.device_constants = Default::default();
        self
    }

    /// Caps the planned memory one method may allocate (for untrusted programs).
    pub fn with_max_planned_bytes(mut self, limit: Option<u64>) -> Module {
        self.max_planned_bytes = limit;
        self.methods.clear();
        self.device_constants = Default::default();
        self
    }

    /// Makes all methods share their planned arenas: one arena per (device, buffer ordinal),
    /// sized for the largest method. Saves memory when methods run one at a time, and lets
    /// them share state planned in the same place. Works with device buffers too (upstream
    /// returns NotSupported there).
    pub fn with_shared_arenas(mut self, share: bool) -> Module {
        self.share_arenas = share;
        self.shared_arenas = None;
        self.methods.clear();
        self.device_constants = Default::default();
        self
    }

    /// The device allocator registry methods load with (the default devices, detected on
    /// first use, unless [`Module::with_devices`] gave another).
    pub fn devices(&self) -> Arc<DeviceRegistry> {
        match &self.devices {
            Some(d) => Arc::clone(d),
            None => crate::default_devices(),
        }
    }

    /// The registry for loading `metas`: CPU-only programs never touch a device driver.
    fn registry_for(&self, metas: &[MethodMeta]) -> Arc<DeviceRegistry> {
        if let Some(d) = &self.devices {
            return Arc::clone(d);
        }
        let needs_device = metas.iter().any(|m| {
            (0..m.num_memory_planned_buffers())
                .any(|i| m.memory_planned_buffer_device(i).is_ok_and(|d| !d.is_cpu()))
                || m.tensor_devices().iter().any(|(d, _)| !d.is_cpu())
                || m.delegates().iter().any(|d| {
                    etch_backends::parse_target_device(&d.compile_specs)
                        .map_or(true, |dev| !dev.is_cpu())
                })
        });
        if needs_device {
            crate::default_devices()
        } else {
            DeviceRegistry::global()
        }
    }

    /// The program.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Method names, in file order.
    pub fn method_names(&self) -> &[String] {
        self.program.method_names()
    }

    /// A method's metadata (does not load the method).
    pub fn method_meta(&self, name: &str) -> Result<MethodMeta> {
        MethodMeta::new(&self.program, name)
    }

    fn load_config(&mut self, method: &str) -> Result<LoadConfig> {
        let devices = if self.share_arenas {
            let metas = self
                .method_names()
                .iter()
                .map(|n| self.method_meta(n))
                .collect::<Result<Vec<_>>>()?;
            let devices = self.registry_for(&metas);
            if self.shared_arenas.is_none() {
                self.shared_arenas = Some(Arc::new(etch_runtime::SharedArenas::new(
                    &metas,
                    &devices,
                    self.max_planned_bytes,
                )?));
            }
            devices
        } else {
            if self.shared_arenas.is_none() {
                self.shared_arenas =
                    etch_runtime::shared_state::declared_shared_state(&self.program)?
                        .map(|size| etch_runtime::SharedArenas::shared_state(size, &self.devices()))
                        .transpose()?
                        .map(Arc::new);
            }
            self.registry_for(&[self.method_meta(method)?])
        };
        Ok(self.load_config_inner(devices))
    }

    fn load_config_inner(&self, devices: Arc<DeviceRegistry>) -> LoadConfig {
        LoadConfig {
            kernels: Arc::clone(&self.kernels),
            backends: Arc::clone(&self.backends),
            devices,
            named_data: self.named_data.clone(),
            target_device: None,
            max_planned_bytes: self.max_planned_bytes,
            shared_arenas: self.shared_arenas.clone(),
            nesting_depth: 0,
            // Weights used by several methods (prefill and decode) go to a device once.
            device_constants: Some(Arc::clone(&self.device_constants)),
            // Transposes and casts of weights run once at load (ETCH_FOLD_CONSTANTS=0: not).
            fold_constants: std::env::var("ETCH_FOLD_CONSTANTS").map_or(true, |v| v != "0"),
            // Weights packed once for their kernels (ETCH_PREPARE_KERNELS=0: on every call).
            prepare_kernels: std::env::var("ETCH_PREPARE_KERNELS").map_or(true, |v| v != "0"),
            // Convolutions fused with their batch norm and activation (ETCH_FUSE_KERNELS=0:
            // each call on its own).
            fuse_kernels: std::env::var("ETCH_FUSE_KERNELS").map_or(true, |v| v != "0"),
            // Feature maps channels-last where a convolution gains (ETCH_CHANNELS_LAST=0:
            // as exported).
            channels_last: std::env::var("ETCH_CHANNELS_LAST").map_or(true, |v| v != "0"),
            device_context: None,
        }
    }

    /// The device copies of external constants that this module's methods share, and the
    /// count of bytes copied to devices while loading them
    /// ([`crate::DeviceConstants::uploaded_bytes`]; another thread may poll it
    /// while [`Module::load_method`] runs, e.g. for a progress bar). Replaced by the
    /// `with_*` builders: take it after configuring the module.
    pub fn device_constants(&self) -> Arc<crate::DeviceConstants> {
        Arc::clone(&self.device_constants)
    }

    /// Loads a method (once; later calls are no-ops).
    pub fn load_method(&mut self, name: &str) -> Result<()> {
        if !self.methods.contains_key(name) {
            let config = self.load_config(name)?;
            let m = Method::load(&self.program, name, &config)?;
            self.methods.insert(name.to_string(), m);
        }
        Ok(())
    }

    /// True when the method is loaded.
    pub fn is_method_loaded(&self, name: &str) -> bool {
        self.methods.contains_key(name)
    }

    /// The loaded method, loading it first if needed (for the low-level API: `set_input`,
    /// `execute`, borrowed outputs).
    pub fn method(&mut self, name: &str) -> Result<&mut Method> {
        self.load_method(name)?;
        self.methods
            .get_mut(name)
            .ok_or_else(|| Error::internal("method vanished after loading"))
    }

    /// Sets the inputs, executes, and returns owned copies of the outputs.
    pub fn execute(&mut self, name: &str, inputs: &[Value]) -> Result<Vec<Value>> {
        let m = self.method(name)?;
        m.set_inputs(inputs)?;
        m.execute()?;
        m.output_values()
    }

    /// `execute("forward", inputs)`.
    pub fn forward(&mut self, inputs: &[Value]) -> Result<Vec<Value>> {
        self.execute("forward", inputs)
    }
}
