//! etch's runtime: [`Program`] → [`MethodMeta`] → [`Method`].
//!
//! Loading a method resolves every operator to a kernel once, allocates the planned
//! arenas once from its `MethodMeta`, binds constants zero-copy from the mapped program,
//! initialises mutable state and delegates. Executing runs the instruction chains with no
//! name lookups and no allocation beyond what loading prepared.
#![warn(missing_docs)]

pub mod backend;
mod fold;
mod fuse;
mod layout;
pub mod memory;
pub mod meta;
pub mod method;
pub mod parse;
pub mod profile;
pub mod shared_state;

pub use backend::{Backend, BackendInitContext, BackendRegistry, CompileSpec, Delegate};
pub use memory::SharedArenas;
pub use meta::{DelegateInfo, IoInfo, MethodMeta, NamedTensor, TensorInfo};
pub use method::{DeviceConstants, LoadConfig, Method, evalue_to_value, tensor_to_owned};

pub use etch_format::{NamedDataMap, Program, PtdFile};

/// A static float32 tensor of 4 elements at `p`, for the load-time passes' unit tests.
#[cfg(test)]
pub(crate) fn test_tensor(p: *mut f32) -> etch_core::EValue {
    let t = etch_core::TensorImpl::new(
        etch_core::ScalarType::Float,
        &[4],
        None,
        etch_core::Dynamism::Static,
        etch_core::Device::CPU,
        p as *mut u8,
        16,
    );
    etch_core::EValue::Tensor(t.unwrap())
}
