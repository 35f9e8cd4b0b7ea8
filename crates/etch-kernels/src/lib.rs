//! Portable CPU kernels for ExecuTorch operators.
//!
//! Every kernel follows ExecuTorch's argument convention: the operator's schema arguments
//! in order (keyword-only ones and the `out` tensors included), then the return values.
//! Modules group kernels by operator family; [`register_portable`] registers them all.
#![warn(missing_docs)]
// Kernels index several arrays with one loop variable; explicit indices read clearer.
#![allow(clippy::needless_range_loop)]

pub mod binary;
pub mod conv;
pub mod device_copy;
pub mod etch_ops;
pub mod gemm;
pub mod gemm512;
pub mod index;
pub mod layout;
pub mod linalg;
pub mod llama;
pub mod llama_gdr;
pub mod maxpool;
pub mod norm;
pub mod prim;
pub mod quantized;
pub mod reduce;
pub mod sample;
pub mod scratch;
pub mod shape;
pub mod threads;
pub(crate) mod transpose16;
pub mod unary;
pub mod upsample;
pub mod util;
pub mod vmath;
pub mod xnn_sigmoid;

use etch_core::{KernelRegistry, Result};

pub use sample::{SplitMix64, sample_row};

/// Registers every portable CPU kernel into `reg`.
pub fn register_portable(reg: &mut KernelRegistry) -> Result<()> {
    binary::register(reg)?;
    unary::register(reg)?;
    upsample::register(reg)?;
    linalg::register(reg)?;
    shape::register(reg)?;
    norm::register(reg)?;
    reduce::register(reg)?;
    conv::register(reg)?;
    index::register(reg)?;
    prim::register(reg)?;
    llama::register(reg)?;
    quantized::register(reg)?;
    etch_ops::register(reg)?;
    device_copy::register(reg)?;
    layout::register(reg);
    Ok(())
}

/// A registry holding the portable CPU kernels.
pub fn portable_registry() -> KernelRegistry {
    let mut reg = KernelRegistry::new();
    // Registration into a fresh registry cannot collide.
    let _ = register_portable(&mut reg);
    reg
}
