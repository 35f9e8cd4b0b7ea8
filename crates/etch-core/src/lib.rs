//! Core types shared by every etch crate: [`Error`] with ExecuTorch's error codes,
//! [`ScalarType`], [`Device`], tensors ([`TensorImpl`], [`TensorRef`], [`Tensor`]),
//! values ([`EValue`], [`Value`]) and the kernel ABI ([`KernelContext`], [`KernelRegistry`]).
#![warn(missing_docs)]

pub mod alloc;
pub mod device;
pub mod error;
pub mod graph;
pub mod kernel;
pub mod scalar;
pub mod source;
pub mod tensor;
pub mod value;

pub use alloc::{
    DeviceAllocator, DeviceMemoryBuffer, DeviceRegistry, StreamId, TransferCounter, TransferStats,
};
pub use device::{Device, DeviceType, NUM_DEVICE_TYPES};
pub use error::{Error, ErrorCode, Result};
pub use graph::{
    DeviceContext, DeviceExecHooks, DeviceGraph, DeviceGuard, DeviceOpTimer, lock_device,
};
pub use kernel::{
    ChainCall, Dims, FuseFn, Fused, KernelContext, KernelFn, KernelRegistry, LayoutFn, LayoutRule,
    PrepareFn, Prepared, Scalar, operator_name,
};
pub use scalar::{Element, ScalarType};
pub use source::{ByteSource, Prefix};
pub use tensor::{
    AlignedBuf, Dynamism, HOST_ALIGNMENT, MAX_DIMS, Tensor, TensorImpl, TensorRef, checked_numel,
    wrap_dim,
};
pub use value::{EValue, IntList, Tag, Value};

pub use half::{bf16, f16};
