//! Decoding serialized tensors and values into checked metadata.

use etch_core::{Device, Dynamism, Error, Result, ScalarType, Tag, checked_numel};
use etch_format::fb_err;
use etch_format::schema::pte;

/// Where a serialized tensor's data lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataPlacement {
    /// A constant in the program (`data_buffer_idx`).
    Constant(u32),
    /// A constant in external named data (`.ptd`), by fully qualified name.
    External(String),
    /// In planned buffer `memory_id` (1-based, internal index) at `offset`, optionally with
    /// initial state.
    Planned {
        /// Internal buffer index (≥ 1).
        memory_id: u32,
        /// Byte offset in that buffer.
        offset: u64,
        /// Where the initial state comes from, if it has one.
        initial: Option<InitialState>,
    },
    /// No memory at load time: an input bound later, or a view set by a kernel.
    Unbound,
}

/// The initial value of a planned (mutable) tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitialState {
    /// `mutable_data_segments[list].offsets[data_buffer_idx]` of the program.
    Mutable(u64, u32),
    /// External named data (`.ptd`), by fully qualified name: the trainable parameters of
    /// a program exported with external constants are loaded into their planned memory,
    /// as upstream's tensor parser does for an external tensor with allocation info.
    External(String),
}

/// A serialized tensor, decoded and checked.
#[derive(Debug, Clone)]
pub struct TensorDecl {
    /// Element type.
    pub dtype: ScalarType,
    /// Sizes (the upper bound for dynamic tensors).
    pub sizes: Vec<usize>,
    /// Dim order.
    pub dim_order: Vec<u8>,
    /// Shape dynamism.
    pub dynamism: Dynamism,
    /// Device.
    pub device: Device,
    /// Data placement.
    pub placement: DataPlacement,
    /// Bytes at the upper-bound shape.
    pub nbytes: usize,
    /// Fully qualified name (external constants, and mutable buffers of programs exported
    /// with `emit_mutable_buffer_names`).
    pub name: Option<String>,
}

/// Decodes a serialized tensor, validating every field.
pub fn decode_tensor(t: &pte::TensorRef<'_>) -> Result<TensorDecl> {
    let dtype = ScalarType::from_i8(i8::from(t.scalar_type().map_err(fb_err("tensor dtype"))?))?;
    if t.storage_offset()
        .map_err(fb_err("tensor storage offset"))?
        != 0
    {
        return Err(Error::invalid_program("tensor storage_offset must be 0"));
    }
    let raw_sizes = t.sizes().map_err(fb_err("tensor sizes"))?;
    let mut sizes = Vec::new();
    if let Some(rs) = raw_sizes {
        if rs.len() > etch_core::MAX_DIMS {
            return Err(Error::invalid_program(format!(
                "tensor has {} dims; at most {} are supported",
                rs.len(),
                etch_core::MAX_DIMS
            )));
        }
        for s in rs.iter() {
            if s < 0 {
                return Err(Error::invalid_program(format!("negative tensor size {s}")));
            }
            sizes.push(s as usize);
        }
    }
    let dim_order = match t.dim_order().map_err(fb_err("tensor dim order"))? {
        Some(d) if !d.is_empty() || sizes.is_empty() => d.to_vec(),
        _ => (0..sizes.len() as u8).collect(),
    };
    etch_core::tensor::validate_dim_order(&dim_order, sizes.len())?;
    let dynamism = Dynamism::from_i8(i8::from(
        t.shape_dynamism()
            .map_err(fb_err("tensor shape dynamism"))?,
    ))?;
    let nbytes = checked_numel(&sizes)
        .and_then(|n| n.checked_mul(dtype.element_size()))
        .ok_or_else(|| Error::invalid_program(format!("tensor size {sizes:?} overflows")))?;

    let extra = t.extra_tensor_info().map_err(fb_err("extra tensor info"))?;
    let mut device = Device::CPU;
    let mut fqn = None;
    let mut external = false;
    let mut mutable_list = 0u64;
    if let Some(x) = &extra {
        device = Device::from_serialized(
            i8::from(x.device_type().map_err(fb_err("tensor device type"))?),
            x.device_index().map_err(fb_err("tensor device index"))?,
        )?;
        fqn = x
            .fully_qualified_name()
            .map_err(fb_err("tensor name"))?
            .map(|s| s.to_string());
        external = x.location().map_err(fb_err("tensor data location"))?
            == pte::TensorDataLocation::External;
        mutable_list = x
            .mutable_data_segments_idx()
            .map_err(fb_err("mutable data segment index"))?;
    }

    let data_idx = t.data_buffer_idx().map_err(fb_err("tensor data index"))?;
    let alloc = t.allocation_info().map_err(fb_err("tensor allocation"))?;
    let placement = match alloc {
        Some(a) => {
            let memory_id = a.memory_id().map_err(fb_err("memory id"))?;
            let lo = a.memory_offset_low().map_err(fb_err("memory offset"))? as u64;
            let hi = a.memory_offset_high().map_err(fb_err("memory offset"))? as u64;
            let initial = match &fqn {
                Some(name) if external => Some(InitialState::External(name.clone())),
                _ => (data_idx > 0).then_some(InitialState::Mutable(mutable_list, data_idx)),
            };
            DataPlacement::Planned {
                memory_id,
                offset: lo | (hi << 32),
                initial,
            }
        }
        None if external => DataPlacement::External(fqn.clone().ok_or_else(|| {
            Error::invalid_program("external tensor without a fully qualified name")
        })?),
        None if data_idx > 0 => DataPlacement::Constant(data_idx),
        None => DataPlacement::Unbound,
    };
    Ok(TensorDecl {
        dtype,
        sizes,
        dim_order,
        dynamism,
        device,
        placement,
        nbytes,
        name: fqn,
    })
}

/// The tag of a serialized value.
pub fn value_tag(v: &pte::EValueRef<'_>) -> Result<Tag> {
    use pte::KernelTypesRef as K;
    Ok(match v.val().map_err(fb_err("value"))? {
        None | Some(K::Null(_)) => Tag::None,
        Some(K::Int(_)) => Tag::Int,
        Some(K::Bool(_)) => Tag::Bool,
        Some(K::Double(_)) => Tag::Double,
        Some(K::Tensor(_)) => Tag::Tensor,
        Some(K::String(_)) => Tag::String,
        Some(K::IntList(_)) => Tag::IntList,
        Some(K::DoubleList(_)) => Tag::DoubleList,
        Some(K::BoolList(_)) => Tag::BoolList,
        Some(K::TensorList(_)) => Tag::TensorList,
        Some(K::OptionalTensorList(_)) => Tag::OptionalTensorList,
    })
}

/// Converts a serialized value index, checking it against the number of values.
pub fn value_index(i: i64, num_values: usize, what: &str) -> Result<u32> {
    if i < 0 || i as u64 >= num_values as u64 {
        return Err(Error::invalid_program(format!(
            "{what}: value index {i} out of range ({num_values} values)"
        )));
    }
    Ok(i as u32)
}
