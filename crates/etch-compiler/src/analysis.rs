//! What each instruction of a method reads and writes, over the serialized program.
//!
//! ExecuTorch's emitter passes a kernel its schema arguments followed by its return
//! value: `add.out(self, other, alpha, out) -> out` is emitted as `[self, other, alpha,
//! out, out]`, an in-place `copy_(self, src)` as `[self, src, non_blocking, self]`, and a
//! multi-output op returns a `TensorList` of its outs. So the values an instruction
//! *writes* are its last argument, expanded through lists. A delegate call's arguments
//! are its inputs followed by its outputs, with no count in the outer program, so every
//! argument of a delegate call counts as both read and written.

use etch_core::{Device, DeviceType, Error, Result, ScalarType};
use etch_format::schema::pte;

/// One instruction's kind, with what the passes need of it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kind {
    Kernel { op: usize },
    Delegate,
    Move,
    Jump { dest: usize },
    Free,
}

/// Reads and writes of every instruction of chain 0 of a method.
pub(crate) struct Analysis {
    pub kind: Vec<Kind>,
    /// Every value an instruction references (arguments expanded through lists).
    pub uses: Vec<Vec<usize>>,
    /// The values it writes (a subset of `uses`).
    pub writes: Vec<Vec<usize>>,
    pub inputs: Vec<usize>,
    pub outputs: Vec<usize>,
}

fn idx(v: i32, n: usize, what: &str) -> Result<usize> {
    if v < 0 || v as usize >= n {
        return Err(Error::invalid_program(format!(
            "{what} refers to value {v}; the method has {n} values"
        )));
    }
    Ok(v as usize)
}

/// The value and, for lists, the values it holds.
pub(crate) fn expand(values: &[pte::EValue], v: usize, out: &mut Vec<usize>) -> Result<()> {
    out.push(v);
    let items = match &values[v].val {
        Some(pte::KernelTypes::TensorList(l)) => l.items.as_deref(),
        Some(pte::KernelTypes::OptionalTensorList(l)) => l.items.as_deref(),
        Some(pte::KernelTypes::IntList(l)) => {
            for &it in l.items.as_deref().unwrap_or(&[]) {
                let it = i32::try_from(it).unwrap_or(-1);
                out.push(idx(it, values.len(), "an int list item")?);
            }
            None
        }
        _ => None,
    };
    for &it in items.unwrap_or(&[]) {
        if it >= 0 {
            out.push(idx(it, values.len(), "a list item")?);
        }
    }
    Ok(())
}

impl Analysis {
    pub fn new(plan: &pte::ExecutionPlan) -> Result<Analysis> {
        let values = plan.values.as_deref().unwrap_or(&[]);
        let nv = values.len();
        let instrs = instructions(plan)?;
        let mut a = Analysis {
            kind: Vec::with_capacity(instrs.len()),
            uses: Vec::with_capacity(instrs.len()),
            writes: Vec::with_capacity(instrs.len()),
            inputs: list(plan.inputs.as_deref(), nv, "a method input")?,
            outputs: list(plan.outputs.as_deref(), nv, "a method output")?,
        };
        let nops = plan.operators.as_ref().map_or(0, |o| o.len());
        for (i, ins) in instrs.iter().enumerate() {
            use pte::InstructionArguments as A;
            let mut uses = Vec::new();
            let mut writes = Vec::new();
            let kind = match &ins.instr_args {
                Some(A::KernelCall(k)) => {
                    let args = k.args.as_deref().unwrap_or(&[]);
                    for &x in args {
                        expand(values, idx(x, nv, "a kernel argument")?, &mut uses)?;
                    }
                    if let Some(&last) = args.last() {
                        // The out arguments are the same values as the returned ones.
                        expand(values, idx(last, nv, "a kernel argument")?, &mut writes)?;
                    }
                    if k.op_index < 0 || k.op_index as usize >= nops {
                        return Err(Error::invalid_program(format!(
                            "instruction {i} calls operator {}; the method has {nops}",
                            k.op_index
                        )));
                    }
                    Kind::Kernel {
                        op: k.op_index as usize,
                    }
                }
                Some(A::DelegateCall(d)) => {
                    for &x in d.args.as_deref().unwrap_or(&[]) {
                        expand(values, idx(x, nv, "a delegate argument")?, &mut uses)?;
                    }
                    writes = uses.clone();
                    Kind::Delegate
                }
                Some(A::MoveCall(m)) => {
                    uses.push(idx(m.move_from, nv, "a move source")?);
                    let to = idx(m.move_to, nv, "a move destination")?;
                    uses.push(to);
                    writes.push(to);
                    Kind::Move
                }
                Some(A::JumpFalseCall(j)) => {
                    uses.push(idx(j.cond_value_index, nv, "a jump condition")?);
                    let dest = j.destination_instruction;
                    if dest < 0 || dest as usize > instrs.len() {
                        return Err(Error::invalid_program(format!(
                            "instruction {i} jumps to {dest}, outside the method"
                        )));
                    }
                    Kind::Jump {
                        dest: dest as usize,
                    }
                }
                Some(A::FreeCall(f)) => {
                    idx(f.value_index, nv, "a freed value")?;
                    Kind::Free
                }
                None => return Err(Error::invalid_program(format!("instruction {i} is empty"))),
            };
            a.kind.push(kind);
            a.uses.push(uses);
            a.writes.push(writes);
        }
        Ok(a)
    }

    pub fn len(&self) -> usize {
        self.kind.len()
    }

    pub fn has_control_flow(&self) -> bool {
        self.kind
            .iter()
            .any(|k| matches!(k, Kind::Jump { .. } | Kind::Move))
    }
}

fn list(l: Option<&[i32]>, nv: usize, what: &str) -> Result<Vec<usize>> {
    l.unwrap_or(&[]).iter().map(|&v| idx(v, nv, what)).collect()
}

/// The instructions of the method's only chain (none when it has no chain).
pub(crate) fn instructions(plan: &pte::ExecutionPlan) -> Result<&[pte::Instruction]> {
    let chains = plan.chains.as_deref().unwrap_or(&[]);
    match chains {
        [] => Ok(&[]),
        [c] => Ok(c.instructions.as_deref().unwrap_or(&[])),
        _ => Err(Error::not_supported(format!(
            "method '{}' has {} chains; etch lower handles single-chain methods",
            plan.name.as_deref().unwrap_or("?"),
            chains.len()
        ))),
    }
}

pub(crate) fn tensor(values: &[pte::EValue], v: usize) -> Option<&pte::Tensor> {
    match &values[v].val {
        Some(pte::KernelTypes::Tensor(t)) => Some(t),
        _ => None,
    }
}

/// The largest tensor the passes accept (256 TiB).
pub(crate) const MAX_TENSOR_BYTES: usize = 1 << 48;

/// Bytes of a tensor at its declared (upper-bound) sizes.
pub(crate) fn nbytes(t: &pte::Tensor) -> Result<usize> {
    let st = ScalarType::from_i8(t.scalar_type as i8)?;
    let mut n = st.element_size();
    for &s in t.sizes.as_deref().unwrap_or(&[]) {
        if s < 0 {
            return Err(Error::invalid_program(format!(
                "tensor size {s} is negative"
            )));
        }
        n = n
            .checked_mul(s as usize)
            .ok_or_else(|| Error::invalid_program("tensor size overflows"))?;
    }
    // Far beyond any device; keeps offset arithmetic clear of overflow.
    if n > MAX_TENSOR_BYTES {
        return Err(Error::invalid_program(format!(
            "a tensor of {n} bytes is larger than etch plans ({MAX_TENSOR_BYTES})"
        )));
    }
    Ok(n)
}

/// The device a tensor is declared on (CPU:0 without extra info).
pub(crate) fn tensor_device(t: &pte::Tensor) -> Result<Device> {
    match &t.extra_tensor_info {
        None => Ok(Device::CPU),
        Some(e) => Device::from_serialized(e.device_type as i8, e.device_index),
    }
}

/// Sets a tensor's device the way upstream's `make_tensor_value` does: a device tensor
/// carries `ExtraTensorInfo` with the device; a CPU tensor gets no new info.
pub(crate) fn set_tensor_device(t: &mut pte::Tensor, d: Device) {
    if d.is_cpu() {
        if let Some(e) = t.extra_tensor_info.as_mut() {
            e.device_type = pte::DeviceType::Cpu;
            e.device_index = 0;
        }
        return;
    }
    let kind = match d.kind {
        DeviceType::Cuda => pte::DeviceType::Cuda,
        DeviceType::Cpu => pte::DeviceType::Cpu,
    };
    let e = t.extra_tensor_info.get_or_insert_with(|| {
        Box::new(pte::ExtraTensorInfo {
            mutable_data_segments_idx: 0,
            fully_qualified_name: None,
            location: pte::TensorDataLocation::Segment,
            device_type: pte::DeviceType::Cpu,
            device_index: 0,
        })
    });
    e.device_type = kind;
    e.device_index = d.index;
}

/// True for a tensor whose data comes from the program (a constant, inline, in the
/// constant segment or in a `.ptd` file).
pub(crate) fn is_constant(t: &pte::Tensor) -> bool {
    t.allocation_info.is_none()
        && (t.data_buffer_idx > 0
            || t.extra_tensor_info
                .as_ref()
                .is_some_and(|e| e.location == pte::TensorDataLocation::External))
}

/// True for a constant kept in a `.ptd` file (named data), found by its name.
pub(crate) fn is_external(t: &pte::Tensor) -> bool {
    t.extra_tensor_info
        .as_ref()
        .is_some_and(|e| e.location == pte::TensorDataLocation::External)
}

pub(crate) fn offset_of(a: &pte::AllocationDetails) -> u64 {
    a.memory_offset_low as u64 | ((a.memory_offset_high as u64) << 32)
}
