//! `MethodMeta`: what a method needs and takes, read from the program without loading it.

use crate::parse::{DataPlacement, decode_tensor, value_index, value_tag};
use etch_core::{Device, Dynamism, Error, Result, ScalarType, Tag};
use etch_format::schema::pte;
use etch_format::{Program, fb_err};

/// Metadata of a tensor input or output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Element type.
    pub dtype: ScalarType,
    /// Sizes (upper bound for dynamic shapes).
    pub sizes: Vec<usize>,
    /// Dim order.
    pub dim_order: Vec<u8>,
    /// Shape dynamism.
    pub dynamism: Dynamism,
    /// Bytes at the serialized shape.
    pub nbytes: usize,
    /// Whether the program planned memory for it.
    pub is_memory_planned: bool,
    /// The device it lives on.
    pub device: Device,
}

/// Metadata of one method input or output.
#[derive(Debug, Clone, PartialEq)]
pub struct IoInfo {
    /// The value's tag.
    pub tag: Tag,
    /// Tensor metadata, for tensors.
    pub tensor: Option<TensorInfo>,
}

/// A named tensor: an external constant or a piece of named state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedTensor {
    /// Fully qualified name (the key in `.ptd` files and checkpoints).
    pub name: String,
    /// Element type.
    pub dtype: ScalarType,
    /// Sizes.
    pub sizes: Vec<usize>,
    /// Bytes.
    pub nbytes: usize,
    /// The device it lives on.
    pub device: Device,
}

/// A delegate as the program declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegateInfo {
    /// Backend id.
    pub backend: String,
    /// Compile specs.
    pub compile_specs: Vec<crate::CompileSpec>,
    /// Size of the processed blob in bytes.
    pub blob_size: usize,
}

/// A method's metadata: inputs, outputs, planned buffers, operators and delegates.
#[derive(Debug, Clone)]
pub struct MethodMeta {
    name: String,
    inputs: Vec<IoInfo>,
    outputs: Vec<IoInfo>,
    buffer_sizes: Vec<u64>,
    buffer_devices: Vec<Device>,
    num_instructions: usize,
    operators: Vec<String>,
    operator_counts: Vec<usize>,
    delegates: Vec<DelegateInfo>,
    tensor_devices: Vec<(Device, usize)>,
    external_constants: Vec<NamedTensor>,
    named_state: Vec<NamedTensor>,
}

fn io_info(values: &flatbuffers_values::Values<'_>, idx: i64) -> Result<IoInfo> {
    let i = value_index(idx, values.len(), "method input/output")?;
    let v = values.get(i as usize)?;
    let tag = value_tag(&v)?;
    let tensor = match v.val().map_err(fb_err("value"))? {
        Some(pte::KernelTypesRef::Tensor(t)) => {
            let d = decode_tensor(&t)?;
            Some(TensorInfo {
                dtype: d.dtype,
                is_memory_planned: matches!(d.placement, DataPlacement::Planned { .. }),
                sizes: d.sizes,
                dim_order: d.dim_order,
                dynamism: d.dynamism,
                nbytes: d.nbytes,
                device: d.device,
            })
        }
        _ => None,
    };
    Ok(IoInfo { tag, tensor })
}

/// Small helper over the plan's value vector.
pub(crate) mod flatbuffers_values {
    use super::*;
    /// The values of a plan.
    pub struct Values<'a>(
        pub Option<etch_format::planus::Vector<'a, etch_format::planus::Result<pte::EValueRef<'a>>>>,
    );
    impl<'a> Values<'a> {
        /// Number of values.
        pub fn len(&self) -> usize {
            self.0.as_ref().map_or(0, |v| v.len())
        }
        /// Value `i` (checked).
        pub fn get(&self, i: usize) -> Result<pte::EValueRef<'a>> {
            self.0
                .as_ref()
                .and_then(|v| v.get(i))
                .ok_or_else(|| Error::invalid_program(format!("value index {i} out of range")))?
                .map_err(fb_err("value"))
        }
    }
}

/// The external constants and the named planned tensors among `values`.
fn named_tensors(
    values: &flatbuffers_values::Values<'_>,
) -> Result<(Vec<NamedTensor>, Vec<NamedTensor>)> {
    let (mut ext, mut state) = (Vec::new(), Vec::new());
    for i in 0..values.len() {
        let Some(pte::KernelTypesRef::Tensor(t)) = values.get(i)?.val().map_err(fb_err("value"))?
        else {
            continue;
        };
        let d = decode_tensor(&t)?;
        let Some(name) = d.name.clone() else {
            continue;
        };
        let nt = NamedTensor {
            name,
            dtype: d.dtype,
            sizes: d.sizes.clone(),
            nbytes: d.nbytes,
            device: d.device,
        };
        match d.placement {
            DataPlacement::External(_) => ext.push(nt),
            DataPlacement::Planned { .. } => state.push(nt),
            _ => {}
        }
    }
    Ok((ext, state))
}

/// How deep [`MethodMeta`] looks into nested `ExecutorBackend` programs.
const MAX_NESTED_META: u32 = 4;

/// Adds the external constants of the method's `ExecutorBackend` delegates (nested
/// programs); a constant a delegate uses is reported on the delegate's target device.
///
/// Informational: nested programs are read at most [`MAX_NESTED_META`] levels deep (a
/// malformed file can make a delegate's blob contain the file itself), and one that does
/// not parse is skipped (loading reports it).
fn nested_constants(
    program: &Program,
    plan: &pte::ExecutionPlanRef<'_>,
    out: &mut Vec<NamedTensor>,
    depth: u32,
) -> Result<()> {
    if depth >= MAX_NESTED_META {
        return Ok(());
    }
    let Some(ds) = plan.delegates().map_err(fb_err("delegates"))? else {
        return Ok(());
    };
    for d in ds.iter() {
        let d = d.map_err(fb_err("delegate"))?;
        if d.id().map_err(fb_err("delegate id"))? != Some("ExecutorBackend") {
            continue;
        }
        let Some(r) = d.processed().map_err(fb_err("delegate data"))? else {
            continue;
        };
        let mut target = None;
        let specs = d.compile_specs().map_err(fb_err("compile specs"))?;
        for c in specs.into_iter().flat_map(|v| v.iter()) {
            let c = c.map_err(fb_err("compile spec"))?;
            if c.key().map_err(fb_err("compile spec key"))? == Some("target_device") {
                let v = c
                    .value()
                    .map_err(fb_err("compile spec value"))?
                    .unwrap_or(&[]);
                target = std::str::from_utf8(v)
                    .ok()
                    .and_then(|s| s.parse::<Device>().ok());
            }
        }
        let Ok(nested) = Program::from_bytes(program.delegate_data(&r)?) else {
            continue;
        };
        for m in nested.method_names().to_vec() {
            let Ok(plan) = nested.plan(&m) else {
                continue;
            };
            let Ok(meta) = MethodMeta::from_plan_at(&nested, &plan, depth + 1) else {
                continue;
            };
            for mut c in meta.external_constants {
                c.device = target.unwrap_or(c.device);
                match out.iter_mut().find(|o| o.name == c.name) {
                    Some(o) => *o = c,
                    None => out.push(c),
                }
            }
        }
    }
    Ok(())
}

impl MethodMeta {
    /// Reads a method's metadata from a program.
    pub fn new(program: &Program, name: &str) -> Result<Self> {
        let plan = program.plan(name)?;
        Self::from_plan(program, &plan).map_err(|e| e.context(format!("method '{name}'")))
    }

    pub(crate) fn from_plan(program: &Program, plan: &pte::ExecutionPlanRef<'_>) -> Result<Self> {
        Self::from_plan_at(program, plan, 0)
    }

    /// `from_plan` for a program nested `depth` delegates deep.
    fn from_plan_at(
        program: &Program,
        plan: &pte::ExecutionPlanRef<'_>,
        depth: u32,
    ) -> Result<Self> {
        let name = plan
            .name()
            .map_err(fb_err("method name"))?
            .unwrap_or("")
            .to_string();
        let values = flatbuffers_values::Values(plan.values().map_err(fb_err("values"))?);
        let mut inputs = Vec::new();
        if let Some(ins) = plan.inputs().map_err(fb_err("inputs"))? {
            for i in ins.iter() {
                inputs.push(io_info(&values, i as i64)?);
            }
        }
        let mut outputs = Vec::new();
        if let Some(outs) = plan.outputs().map_err(fb_err("outputs"))? {
            for i in outs.iter() {
                outputs.push(io_info(&values, i as i64)?);
            }
        }
        let mut buffer_sizes = Vec::new();
        if let Some(sizes) = plan
            .non_const_buffer_sizes()
            .map_err(fb_err("buffer sizes"))?
        {
            for (i, s) in sizes.iter().enumerate().skip(1) {
                if s < 0 {
                    return Err(Error::invalid_program(format!(
                        "planned buffer {} has negative size {s}",
                        i - 1
                    )));
                }
                buffer_sizes.push(s as u64);
            }
        }
        let mut buffer_devices = vec![Device::CPU; buffer_sizes.len()];
        let mut seen = vec![false; buffer_sizes.len()];
        if let Some(devs) = plan
            .non_const_buffer_device()
            .map_err(fb_err("buffer devices"))?
        {
            for d in devs.iter() {
                let d = d.map_err(fb_err("buffer device"))?;
                let idx = d.buffer_idx().map_err(fb_err("buffer device index"))?;
                let dev = Device::from_serialized(
                    i8::from(d.device_type().map_err(fb_err("buffer device type"))?),
                    d.device_index().map_err(fb_err("buffer device index"))?,
                )?;
                // A dense list may describe the reserved slot 0 as CPU:0 (upstream's
                // serializer round-trips such lists); any other claim on slot 0 is an error.
                if idx == 0 && dev == Device::CPU {
                    continue;
                }
                if idx <= 0 || idx as usize > buffer_sizes.len() {
                    return Err(Error::invalid_program(format!(
                        "non_const_buffer_device names buffer {idx}; valid internal indices are 1..={}",
                        buffer_sizes.len()
                    )));
                }
                let user = idx as usize - 1;
                if seen[user] {
                    return Err(Error::invalid_program(format!(
                        "non_const_buffer_device names buffer {idx} twice"
                    )));
                }
                seen[user] = true;
                buffer_devices[user] = dev;
            }
        }
        let mut operators = Vec::new();
        if let Some(ops) = plan.operators().map_err(fb_err("operators"))? {
            for op in ops.iter() {
                let op = op.map_err(fb_err("operator"))?;
                let n = op.name().map_err(fb_err("operator name"))?.unwrap_or("");
                let o = op
                    .overload()
                    .map_err(fb_err("operator overload"))?
                    .unwrap_or("");
                operators.push(etch_core::operator_name(n, o));
            }
        }
        let mut num_instructions = 0;
        let mut operator_counts = vec![0usize; operators.len()];
        if let Some(chains) = plan.chains().map_err(fb_err("chains"))? {
            for c in chains.iter() {
                let c = c.map_err(fb_err("chain"))?;
                if let Some(instrs) = c.instructions().map_err(fb_err("instructions"))? {
                    num_instructions += instrs.len();
                    for ins in instrs.iter() {
                        let ins = ins.map_err(fb_err("instruction"))?;
                        if let Some(pte::InstructionArgumentsRef::KernelCall(k)) =
                            ins.instr_args().map_err(fb_err("instruction"))?
                        {
                            let op = k.op_index().map_err(fb_err("operator index"))?;
                            if let Some(c) = usize::try_from(op)
                                .ok()
                                .and_then(|o| operator_counts.get_mut(o))
                            {
                                *c += 1;
                            }
                        }
                    }
                }
            }
        }
        let mut delegates = Vec::new();
        if let Some(ds) = plan.delegates().map_err(fb_err("delegates"))? {
            for d in ds.iter() {
                let d = d.map_err(fb_err("delegate"))?;
                let backend = d
                    .id()
                    .map_err(fb_err("delegate id"))?
                    .unwrap_or("")
                    .to_string();
                let mut compile_specs = Vec::new();
                if let Some(cs) = d.compile_specs().map_err(fb_err("compile specs"))? {
                    for c in cs.iter() {
                        let c = c.map_err(fb_err("compile spec"))?;
                        compile_specs.push(crate::CompileSpec {
                            key: c
                                .key()
                                .map_err(fb_err("compile spec key"))?
                                .unwrap_or("")
                                .to_string(),
                            value: c
                                .value()
                                .map_err(fb_err("compile spec value"))?
                                .unwrap_or(&[])
                                .to_vec(),
                        });
                    }
                }
                let blob_size = match d.processed().map_err(fb_err("delegate data"))? {
                    Some(r) => program.delegate_data(&r)?.len(),
                    None => 0,
                };
                delegates.push(DelegateInfo {
                    backend,
                    compile_specs,
                    blob_size,
                });
            }
        }
        let mut tensor_devices: Vec<(Device, usize)> = Vec::new();
        for i in 0..values.len() {
            if let Some(pte::KernelTypesRef::Tensor(t)) =
                values.get(i)?.val().map_err(fb_err("value"))?
            {
                let dev = decode_tensor(&t)?.device;
                match tensor_devices.iter_mut().find(|(d, _)| *d == dev) {
                    Some((_, n)) => *n += 1,
                    None => tensor_devices.push((dev, 1)),
                }
            }
        }
        tensor_devices.sort();
        let (mut external_constants, named_state) = named_tensors(&values)?;
        nested_constants(program, plan, &mut external_constants, depth)?;
        Ok(MethodMeta {
            tensor_devices,
            external_constants,
            named_state,
            name,
            inputs,
            outputs,
            buffer_sizes,
            buffer_devices,
            num_instructions,
            operators,
            operator_counts,
            delegates,
        })
    }

    /// The external constants the method needs (looked up by name in `.ptd` files or
    /// checkpoints), including those of nested `ExecutorBackend` programs, in value order.
    pub fn external_constants(&self) -> &[NamedTensor] {
        &self.external_constants
    }
    /// Planned tensors with a name: the mutable buffers (KV caches, recurrent states) of
    /// programs exported with `emit_mutable_buffer_names`, with the device they live on.
    pub fn named_state(&self) -> &[NamedTensor] {
        &self.named_state
    }
    /// The method's name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Number of inputs.
    pub fn num_inputs(&self) -> usize {
        self.inputs.len()
    }
    /// Number of outputs.
    pub fn num_outputs(&self) -> usize {
        self.outputs.len()
    }
    /// Input `i`.
    pub fn input(&self, i: usize) -> Result<&IoInfo> {
        self.inputs.get(i).ok_or_else(|| {
            Error::invalid_argument(format!(
                "input index {i} out of range ({} inputs)",
                self.inputs.len()
            ))
        })
    }
    /// Output `i`.
    pub fn output(&self, i: usize) -> Result<&IoInfo> {
        self.outputs.get(i).ok_or_else(|| {
            Error::invalid_argument(format!(
                "output index {i} out of range ({} outputs)",
                self.outputs.len()
            ))
        })
    }
    /// All inputs.
    pub fn inputs(&self) -> &[IoInfo] {
        &self.inputs
    }
    /// All outputs.
    pub fn outputs(&self) -> &[IoInfo] {
        &self.outputs
    }
    /// Number of memory-planned buffers (the serialized list minus the reserved entry 0).
    pub fn num_memory_planned_buffers(&self) -> usize {
        self.buffer_sizes.len()
    }
    /// Size of planned buffer `i` (0-based; skips the reserved entry).
    pub fn memory_planned_buffer_size(&self, i: usize) -> Result<u64> {
        self.buffer_sizes
            .get(i)
            .copied()
            .ok_or_else(|| self.buffer_range_err(i))
    }
    /// Device of planned buffer `i` (0-based): CPU:0 unless the program maps it elsewhere.
    pub fn memory_planned_buffer_device(&self, i: usize) -> Result<Device> {
        self.buffer_devices
            .get(i)
            .copied()
            .ok_or_else(|| self.buffer_range_err(i))
    }
    fn buffer_range_err(&self, i: usize) -> Error {
        Error::invalid_argument(format!(
            "index {i} out of range. num_buffers: {}",
            self.buffer_sizes.len()
        ))
    }
    /// Number of instructions over all chains.
    pub fn num_instructions(&self) -> usize {
        self.num_instructions
    }
    /// Operator names (`aten::add.out`), in the plan's operator table order.
    pub fn operators(&self) -> &[String] {
        &self.operators
    }
    /// How many instructions call each operator (parallel to [`Self::operators`]).
    pub fn operator_counts(&self) -> &[usize] {
        &self.operator_counts
    }
    /// The method's delegates.
    pub fn delegates(&self) -> &[DelegateInfo] {
        &self.delegates
    }
    /// How many tensor values live on each device (from each tensor's serialized device).
    pub fn tensor_devices(&self) -> &[(Device, usize)] {
        &self.tensor_devices
    }
    /// True when some delegate uses backend `id`.
    pub fn uses_backend(&self, id: &str) -> bool {
        self.delegates.iter().any(|d| d.backend == id)
    }
}
